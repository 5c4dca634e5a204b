//! Lock waiters (`LOCK.ACQUIRE key owner ttl-ms WAIT ms`): for each lock key,
//! the owners waiting for it, first come first served. Replicated state: the
//! queues are in the snapshot, and every node hands a freed lock to the same
//! waiter in the same log entry (see `Keyspace::settle`).
//!
//! A waiter is known by its owner: one owner waits at most once per key (a
//! retried `WAIT` keeps its place). It remembers the client connection that
//! asked last, so that node can answer it when the lock is granted or the
//! wait ends.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{ClientId, LogTime};

/// Most waiters one key may have; more `WAIT`s on it are refused.
pub const MAX_WAITERS_PER_KEY: usize = 65_536;

/// One owner waiting for a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    pub owner: Bytes,
    /// The lease to grant, in ms.
    pub ttl_ms: u64,
    /// Log time after which the waiter is no longer granted the lock.
    pub deadline: LogTime,
    /// Log time at which it joined the queue (wait time, for metrics).
    pub since: LogTime,
    /// The connection to answer, and its command number.
    pub client: ClientId,
    pub seq: u64,
}

/// A step in a waiter's life, as an applied entry reports it. Its node
/// answers the blocked connection on the last two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStep {
    /// It joined the queue, or (already queued) renewed its request, to wait
    /// until `deadline` for a lease of `ttl_ms`.
    Queued { deadline: LogTime, ttl_ms: u64 },
    /// Its connection left the queue (`Request::Dequeue`).
    Left,
    /// It holds the lock now, with this fencing token.
    Granted { token: u64 },
    /// Its deadline passed before the lock was free.
    TimedOut,
}

/// What `Waiters::enqueue` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Joined the end of the queue.
    Joined,
    /// The owner was already waiting: it keeps its place, and the new
    /// request (its connection, lease and deadline) replaces the old one.
    Renewed,
    /// The queue is full ([`MAX_WAITERS_PER_KEY`]).
    Full,
}

/// Every key's queue, and the waiters in order of deadline. Persistent maps,
/// as the keyspace's: a snapshot clones them in O(1).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Waiters {
    queues: imbl::OrdMap<Bytes, imbl::Vector<Waiter>>,
    deadlines: imbl::OrdSet<(LogTime, Bytes, Bytes)>,
    count: usize,
}

impl Waiters {
    /// Adds `waiter` at the end of `key`'s queue, unless its owner already
    /// waits there.
    pub fn enqueue(&mut self, key: &Bytes, waiter: Waiter) -> Enqueued {
        let queue = self.queues.entry(key.clone()).or_default();
        if let Some(i) = queue.iter().position(|w| w.owner == waiter.owner) {
            let old = queue.set(i, waiter.clone());
            self.deadlines.remove(&(old.deadline, key.clone(), old.owner));
            self.deadlines.insert((waiter.deadline, key.clone(), waiter.owner));
            return Enqueued::Renewed;
        }
        if queue.len() >= MAX_WAITERS_PER_KEY {
            return Enqueued::Full;
        }
        self.deadlines.insert((waiter.deadline, key.clone(), waiter.owner.clone()));
        queue.push_back(waiter);
        self.count += 1;
        Enqueued::Joined
    }

    /// Whether anyone waits for `key`.
    pub fn has(&self, key: &[u8]) -> bool {
        self.queues.contains_key(key)
    }

    /// `key`'s queue, first in line first.
    pub fn queue(&self, key: &[u8]) -> impl Iterator<Item = &Waiter> {
        self.queues.get(key).into_iter().flatten()
    }

    /// Takes the first waiter of `key`'s queue.
    pub fn pop_front(&mut self, key: &Bytes) -> Option<Waiter> {
        let queue = self.queues.get_mut(key)?;
        let waiter = if crate::planted::active(crate::planted::Bug::WaitLifo) { queue.pop_back() } else { queue.pop_front() };
        if queue.is_empty() {
            self.queues.remove(key);
        }
        let waiter = waiter?;
        self.forget(key, &waiter);
        Some(waiter)
    }

    /// Takes `owner`'s place in `key`'s queue if `client` is the connection
    /// it answers.
    pub fn remove(&mut self, key: &Bytes, owner: &[u8], client: &ClientId) -> Option<Waiter> {
        let queue = self.queues.get_mut(key)?;
        let i = queue.iter().position(|w| w.owner == owner && w.client == *client)?;
        let waiter = queue.remove(i);
        if queue.is_empty() {
            self.queues.remove(key);
        }
        self.forget(key, &waiter);
        Some(waiter)
    }

    fn forget(&mut self, key: &Bytes, waiter: &Waiter) {
        self.deadlines.remove(&(waiter.deadline, key.clone(), waiter.owner.clone()));
        self.count -= 1;
    }

    /// Removes every waiter whose deadline has passed at `now`, in order of
    /// deadline (then key, then owner).
    pub fn take_timed_out(&mut self, now: LogTime) -> Vec<(Bytes, Waiter)> {
        let due: Vec<(Bytes, Bytes)> = self
            .deadlines
            .iter()
            .take_while(|(at, ..)| now > *at)
            .map(|(_, key, owner)| (key.clone(), owner.clone()))
            .collect();
        let mut out = Vec::with_capacity(due.len());
        for (key, owner) in due {
            let Some(queue) = self.queues.get(&key) else { continue };
            let Some(client) = queue.iter().find(|w| w.owner == owner).map(|w| w.client) else { continue };
            if let Some(waiter) = self.remove(&key, &owner, &client) {
                out.push((key, waiter));
            }
        }
        out
    }

    /// The earliest deadline of any waiter.
    pub fn next_deadline(&self) -> Option<LogTime> {
        self.deadlines.get_min().map(|(at, ..)| *at)
    }

    /// Waiters on every key.
    pub fn total(&self) -> usize {
        self.count
    }

    /// The keys anyone waits for, in key order.
    pub fn keys(&self) -> impl Iterator<Item = &Bytes> {
        self.queues.keys()
    }

    /// For the snapshot: in key order, each queue in its order.
    pub(super) fn to_list(&self) -> Vec<(&Bytes, Vec<&Waiter>)> {
        self.queues.iter().map(|(k, q)| (k, q.iter().collect())).collect()
    }

    pub(super) fn from_list(list: Vec<(Bytes, Vec<Waiter>)>) -> Waiters {
        let mut waiters = Waiters::default();
        for (key, queue) in list {
            for waiter in queue {
                waiters.enqueue(&key, waiter);
            }
        }
        waiters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(owner: &str, deadline: LogTime, conn: u64) -> Waiter {
        Waiter {
            owner: Bytes::copy_from_slice(owner.as_bytes()),
            ttl_ms: 1000,
            deadline,
            since: 0,
            client: ClientId { node: 1, boot: 1, conn },
            seq: 1,
        }
    }

    #[test]
    fn first_come_first_served_and_one_place_per_owner() {
        let key = Bytes::from("k");
        let mut q = Waiters::default();
        assert_eq!(q.enqueue(&key, w("a", 100, 1)), Enqueued::Joined);
        assert_eq!(q.enqueue(&key, w("b", 50, 2)), Enqueued::Joined);
        // `a` again, from another connection: same place, new connection.
        assert_eq!(q.enqueue(&key, w("a", 200, 3)), Enqueued::Renewed);
        assert_eq!(q.total(), 2);
        let order: Vec<_> = q.queue(b"k").map(|w| (w.owner.clone(), w.client.conn)).collect();
        assert_eq!(order, vec![(Bytes::from("a"), 3), (Bytes::from("b"), 2)]);
        // The old connection cannot remove the renewed waiter.
        assert!(q.remove(&key, b"a", &ClientId { node: 1, boot: 1, conn: 1 }).is_none());
        assert_eq!(q.next_deadline(), Some(50));
        assert_eq!(q.pop_front(&key).unwrap().owner, Bytes::from("a"));
        assert_eq!(q.next_deadline(), Some(50));
        assert!(q.remove(&key, b"b", &ClientId { node: 1, boot: 1, conn: 2 }).is_some());
        assert!(!q.has(b"k"));
        assert_eq!((q.total(), q.next_deadline()), (0, None));
    }

    #[test]
    fn timed_out_waiters_leave_in_deadline_order() {
        let (k1, k2) = (Bytes::from("k1"), Bytes::from("k2"));
        let mut q = Waiters::default();
        q.enqueue(&k1, w("a", 30, 1));
        q.enqueue(&k1, w("b", 10, 2));
        q.enqueue(&k2, w("c", 20, 3));
        q.enqueue(&k2, w("d", 40, 4));
        assert!(q.take_timed_out(10).is_empty());
        let gone: Vec<_> = q.take_timed_out(31).into_iter().map(|(k, w)| (k, w.owner)).collect();
        assert_eq!(gone, vec![(k1.clone(), Bytes::from("b")), (k2.clone(), Bytes::from("c")), (k1.clone(), Bytes::from("a"))]);
        assert_eq!(q.total(), 1);
        assert!(!q.has(b"k1"));
        let back = Waiters::from_list(q.to_list().into_iter().map(|(k, v)| (k.clone(), v.into_iter().cloned().collect())).collect());
        assert_eq!(back, q);
    }
}
