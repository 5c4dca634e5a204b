//! Keeping the runtime's thread awake while the log's write is in flight
//! (and, on a follower, while the commands it forwarded are with the
//! leader: the leader's answer is read the same way, without a wake-up).
//!
//! A command is committed once the log's writer threads have synced its
//! entry: this node's alone (about 100 µs on this project's test machine)
//! or a majority's, each node's writer answering its runtime when the sync
//! is done. A runtime thread that went to sleep meanwhile is woken by the
//! writer: a write to the runtime's eventfd, and on a virtual machine an
//! interrupt to a halted virtual CPU, measured here at 15-30 µs per
//! wake-up, paid by every command at low load. Redis, which syncs on its
//! one thread, pays no such wake-up.
//!
//! So while a write is in flight, [`BusyPoll::run`] yields to the runtime
//! in a loop, for at most its limit: the thread keeps polling its I/O driver
//! (without blocking) and runs every other task as soon as it is ready,
//! and it finds the writer's completion, or a follower's answer, without
//! being woken. Between two polls it gives its core to any other thread
//! that is ready to run (`sched_yield`): the writer that must run to finish
//! the sync, another node's thread on a shared machine. Without that, three
//! nodes sharing two cores (as in `scripts/bench.sh`) starved each other
//! when they polled: 950 down to 600-770 pairs/s at one client; with it,
//! 830-950 up to 1,190-1,200 (`benches/HISTORY.md`, "Polling while the log
//! is written"). It costs the CPU of one thread for as long as the disk
//! takes, never more than the limit per write, and nothing while no write is
//! in flight, nor while more than [`MAX_IN_FLIGHT`] are (a busy node is
//! woken by its own traffic soon enough).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Past this many log writes and forwards in flight the thread does not
/// poll: with that many answers due, one comes soon after another and the
/// thread is seldom asleep when it does, while a thread that polls takes a
/// core from the machine's other work on every yield. A follower that
/// forwards the writes of 50 clients had about 50 forwards out at all times
/// and yielded 125,000 times a second (a third of its thread's time, taken
/// from the leader and the other follower sharing the two vCPUs); with this
/// bound, 5,000 (`benches/HISTORY.md`, "A follower stops polling when its
/// clients keep it busy").
pub const MAX_IN_FLIGHT: usize = 4;

/// See the module's notes.
#[derive(Debug)]
pub struct BusyPoll {
    /// The longest the thread is kept awake for one write (zero: never).
    limit: Duration,
    /// Log writes handed to the writer and not yet done (and forwards not
    /// yet answered). The thread polls while there are 1 to
    /// [`MAX_IN_FLIGHT`].
    in_flight: AtomicUsize,
    /// Told when a write begins.
    wake: Notify,
    /// Times [`BusyPoll::run`] yielded (`RAFT.INFO` `busy_polls`).
    polls: AtomicU64,
}

/// A log write (or a forward) in flight: it ends when this is dropped.
#[derive(Debug)]
pub struct Writing(Arc<BusyPoll>);

impl Drop for Writing {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl BusyPoll {
    /// Polling for at most `limit` per write (zero: never).
    pub fn new(limit: Duration) -> Arc<BusyPoll> {
        Arc::new(BusyPoll {
            limit,
            in_flight: AtomicUsize::new(0),
            wake: Notify::new(),
            polls: AtomicU64::new(0),
        })
    }

    /// Whether this node polls at all.
    pub fn enabled(&self) -> bool {
        !self.limit.is_zero()
    }

    /// A log write begins; `None` when this node does not poll.
    pub fn begin(self: &Arc<Self>) -> Option<Writing> {
        if !self.enabled() {
            return None;
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.wake.notify_one();
        Some(Writing(self.clone()))
    }

    /// The task that keeps the runtime's thread awake: spawn it once on
    /// the runtime that runs Raft and the connections.
    pub async fn run(self: Arc<Self>) {
        loop {
            self.wake.notified().await;
            let started = Instant::now();
            while (1..=MAX_IN_FLIGHT).contains(&self.in_flight.load(Ordering::Acquire))
                && started.elapsed() < self.limit
            {
                self.polls.fetch_add(1, Ordering::Relaxed);
                // Lets any other thread that is ready run first.
                std::thread::yield_now();
                // Runs the other ready tasks, then polls the I/O driver
                // without blocking, then this again.
                tokio::task::yield_now().await;
            }
        }
    }

    /// Times the thread was kept awake by a yield, so far.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pause(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    #[tokio::test]
    async fn the_thread_is_kept_awake_while_a_write_is_in_flight_and_only_then() {
        let poll = BusyPoll::new(Duration::from_secs(10));
        tokio::spawn(poll.clone().run());
        pause(5).await;
        assert_eq!(poll.polls(), 0, "polled with no write in flight");
        let writing = poll.begin().expect("an enabled node polls");
        pause(20).await;
        let during = poll.polls();
        assert!(during > 10, "only {during} polls in 20 ms with a write in flight");
        drop(writing);
        pause(5).await;
        let after = poll.polls();
        pause(20).await;
        assert_eq!(poll.polls(), after, "still polling after the write was done");
        // A second write starts polling again.
        let writing = poll.begin().expect("an enabled node polls");
        pause(10).await;
        assert!(poll.polls() > after, "a second write was not polled for");
        drop(writing);
    }

    #[tokio::test]
    async fn a_write_keeps_it_awake_no_longer_than_the_limit() {
        let poll = BusyPoll::new(Duration::from_millis(5));
        tokio::spawn(poll.clone().run());
        let writing = poll.begin().expect("an enabled node polls");
        pause(20).await;
        let at = poll.polls();
        assert!(at > 0, "never polled");
        pause(20).await;
        assert_eq!(poll.polls(), at, "polled past the limit");
        drop(writing);
    }

    #[tokio::test]
    async fn a_thread_with_many_answers_due_does_not_poll() {
        let poll = BusyPoll::new(Duration::from_secs(10));
        tokio::spawn(poll.clone().run());
        let mut writes: Vec<Writing> = (0..=MAX_IN_FLIGHT).map(|_| poll.begin().expect("enabled")).collect();
        pause(5).await;
        let at = poll.polls();
        pause(20).await;
        assert_eq!(poll.polls(), at, "polled with {} writes in flight", MAX_IN_FLIGHT + 1);
        // Down to the bound, the next write starts polling again.
        writes.pop();
        writes.pop();
        writes.push(poll.begin().expect("enabled"));
        pause(20).await;
        assert!(
            poll.polls() > at + 10,
            "did not poll again with {MAX_IN_FLIGHT} in flight"
        );
        drop(writes);
    }

    #[tokio::test]
    async fn a_limit_of_zero_never_polls() {
        let poll = BusyPoll::new(Duration::ZERO);
        tokio::spawn(poll.clone().run());
        assert!(!poll.enabled());
        assert!(poll.begin().is_none(), "polls with a limit of zero");
        pause(10).await;
        assert_eq!(poll.polls(), 0);
    }
}
