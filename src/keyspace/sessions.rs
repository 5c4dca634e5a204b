//! Client sessions: for each client connection (on whichever node it is
//! connected to), the sequence number and reply of its last command applied.
//!
//! This is what makes a retried proposal run once. A node that forwards a
//! command and loses the answer (the leader died, the link broke, the leader
//! stepped down before it could reply) sends the very same proposal again,
//! with the same origin, to whoever leads next. If the first copy committed
//! after all, the second finds its sequence here and gets the first one's
//! reply instead of running again. A connection sends one command at a time,
//! so the last sequence and reply per connection is enough.
//!
//! Sessions are replicated state (in the snapshot) and are forgotten after
//! [`SESSION_TTL_MS`] of log time without a command: far longer than any
//! retry, which ends with the request timeout.


use serde::{Deserialize, Serialize};

use super::LogTime;
use crate::protocol::Reply;

/// How long, in log time, a session is kept after its last command. The
/// longest retry is one request timeout (`--request-timeout-ms`, at most
/// [`MAX_RETRY_WINDOW_MS`]).
pub const SESSION_TTL_MS: LogTime = 10 * 60 * 1000;
/// The longest a node may keep retrying one command.
pub const MAX_RETRY_WINDOW_MS: u64 = 5 * 60 * 1000;
/// Replies bigger than this (in values) are not kept: a retry of such a
/// command learns that it ran, not what it answered.
const MAX_KEPT_VALUES: usize = 1024;

/// One client connection, cluster-wide: the node it is connected to, that
/// node's process start, and the connection's id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClientId {
    pub node: u64,
    pub boot: u64,
    pub conn: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Session {
    seq: u64,
    reply: Reply,
    at: LogTime,
}

/// What applying a command with a given origin should do.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// Not applied before: run it.
    New,
    /// Applied already: answer this, run nothing.
    Again(Reply),
    /// Older than a command of the same client that was already applied: its
    /// client stopped waiting for it long ago. Run nothing.
    Stale,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Sessions {
    /// Persistent maps, as the keyspace's (a snapshot clones them in O(1)).
    by_client: imbl::HashMap<ClientId, Session>,
    /// (time of last command, client): the order in which sessions go stale.
    by_time: imbl::OrdSet<(LogTime, ClientId)>,
}

impl Sessions {
    pub fn check(&self, client: &ClientId, seq: u64) -> Seen {
        match self.by_client.get(client) {
            None => Seen::New,
            Some(s) if seq > s.seq => Seen::New,
            Some(s) if seq == s.seq => Seen::Again(s.reply.clone()),
            Some(_) => Seen::Stale,
        }
    }

    /// Records the reply of `client`'s command `seq`, applied at `now`.
    pub fn record(&mut self, client: ClientId, seq: u64, reply: &Reply, now: LogTime) {
        let kept = if values_in(reply, MAX_KEPT_VALUES + 1) > MAX_KEPT_VALUES {
            Reply::error("ERR the command ran, but its reply was too large to keep for a retry")
        } else {
            reply.clone()
        };
        if let Some(old) = self.by_client.insert(client, Session { seq, reply: kept, at: now }) {
            self.by_time.remove(&(old.at, client));
        }
        self.by_time.insert((now, client));
    }

    /// Replaces the reply of `client`'s command `seq` with its final one, if
    /// that is still the client's last command: a `WAIT` that queued (reply
    /// `Queued`) and was then granted or timed out. A retry of it, or its
    /// connection asking after it (`Request::Dequeue`), then learns how it
    /// ended.
    pub fn resolve(&mut self, client: ClientId, seq: u64, reply: &Reply, now: LogTime) {
        if self.by_client.get(&client).is_some_and(|s| s.seq == seq) {
            self.record(client, seq, reply, now);
        }
    }

    /// Forgets sessions idle for longer than [`SESSION_TTL_MS`] at `now`.
    pub fn expire(&mut self, now: LogTime) {
        while let Some(&(at, client)) = self.by_time.get_min() {
            if at.saturating_add(SESSION_TTL_MS) >= now {
                break;
            }
            self.by_time.remove_min();
            self.by_client.remove(&client);
        }
    }

    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    /// For the snapshot: sorted, so equal states encode identically.
    pub(super) fn to_list(&self) -> Vec<(ClientId, u64, Reply, LogTime)> {
        let mut list: Vec<_> = self.by_client.iter().map(|(c, s)| (*c, s.seq, s.reply.clone(), s.at)).collect();
        list.sort_by_key(|(c, ..)| *c);
        list
    }

    pub(super) fn from_list(list: Vec<(ClientId, u64, Reply, LogTime)>) -> Sessions {
        let mut sessions = Sessions::default();
        for (client, seq, reply, at) in list {
            sessions.by_client.insert(client, Session { seq, reply, at });
            sessions.by_time.insert((at, client));
        }
        sessions
    }
}

/// How many values `reply` holds, counting no further than `limit`.
fn values_in(reply: &Reply, limit: usize) -> usize {
    let mut count = 1;
    let add = |r: &Reply, count: &mut usize| {
        if *count < limit {
            *count += values_in(r, limit - *count);
        }
    };
    match reply {
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => items.iter().for_each(|r| add(r, &mut count)),
        Reply::Map(pairs) | Reply::Pairs(pairs) | Reply::NestedMap(pairs) => pairs.iter().for_each(|(k, v)| {
            add(k, &mut count);
            add(v, &mut count);
        }),
        Reply::ScorePairs(pairs) => count += 2 * pairs.len(),
        Reply::Bulk(b) => count += b.len() / 1024,
        _ => {}
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ClientId = ClientId { node: 1, boot: 7, conn: 3 };
    const B: ClientId = ClientId { node: 2, boot: 9, conn: 3 };

    #[test]
    fn a_retry_gets_the_first_reply_and_older_commands_are_stale() {
        let mut s = Sessions::default();
        assert_eq!(s.check(&A, 5), Seen::New);
        s.record(A, 5, &Reply::Int(1), 100);
        assert_eq!(s.check(&A, 5), Seen::Again(Reply::Int(1)));
        assert_eq!(s.check(&A, 4), Seen::Stale);
        assert_eq!(s.check(&A, 6), Seen::New);
        // Another client with the same connection id is another session.
        assert_eq!(s.check(&B, 5), Seen::New);
    }

    #[test]
    fn idle_sessions_are_forgotten_in_log_time() {
        let mut s = Sessions::default();
        s.record(A, 1, &Reply::ok(), 0);
        s.record(B, 1, &Reply::ok(), 1000);
        s.expire(SESSION_TTL_MS);
        assert_eq!(s.len(), 2);
        s.expire(SESSION_TTL_MS + 1);
        assert_eq!(s.check(&A, 1), Seen::New);
        assert_eq!(s.check(&B, 1), Seen::Again(Reply::ok()));
        // A newer command moves a session's time forward.
        s.record(B, 2, &Reply::Int(2), SESSION_TTL_MS + 5000);
        s.expire(SESSION_TTL_MS + 2000);
        assert_eq!(s.check(&B, 2), Seen::Again(Reply::Int(2)));
        assert_eq!(Sessions::from_list(s.to_list()), s);
    }

    #[test]
    fn large_replies_are_not_kept() {
        let mut s = Sessions::default();
        let big = Reply::Array((0..5000).map(Reply::Int).collect());
        s.record(A, 1, &big, 0);
        assert!(matches!(s.check(&A, 1), Seen::Again(Reply::Error(e)) if e.contains("too large")));
    }
}
