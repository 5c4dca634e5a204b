//! Log time (DESIGN.md §4): the leader stamps each entry with the log time of
//! the last entry in its own log when it became leader, plus its monotonic
//! clock's elapsed time since then. Log time does not advance during an
//! election, so a leader change can only lengthen leases.
//!
//! Why the last entry of the leader's own log, and nothing else: every entry
//! that was ever committed is in the new leader's log (Raft's leader
//! completeness), and log times never decrease along a log, so that entry's
//! time is at least every committed time. Two other times this node may know
//! are not safe to continue from: what it stamped itself as leader of an older
//! term (a deposed leader keeps stamping until it learns of the new term, and
//! those entries never commit), and times of entries a truncation removed.
//! Either could lie ahead of the committed log; a leader that continued from
//! one would expire leases early.
//!
//! The state machine never reads any of this; it sees only stamped entries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::keyspace::LogTime;

/// The two clocks a node reads. Behind a trait so tests can drive time.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic milliseconds since an arbitrary origin.
    fn monotonic_ms(&self) -> u64;
    /// Wall clock, Unix milliseconds. Only for `EXAT`/`PXAT` and `TIME`.
    fn unix_ms(&self) -> u64;
}

/// The operating system's clocks.
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        SystemClock { origin: Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn monotonic_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    fn unix_ms(&self) -> u64 {
        wall_unix_us() / 1000
    }
}

/// A shift of this process's wall clock, for tests that fake clock skew
/// (`--wall-clock-offset-ms`). Leases never read the wall clock.
static WALL_OFFSET_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Shifts the wall clock this process reads by `ms` (see [`WALL_OFFSET_MS`]).
pub fn set_wall_offset_ms(ms: i64) {
    WALL_OFFSET_MS.store(ms, Ordering::Relaxed);
}

/// The wall clock, Unix microseconds (shifted by the test offset, if any).
pub fn wall_unix_us() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0);
    now.saturating_add(WALL_OFFSET_MS.load(Ordering::Relaxed).saturating_mul(1000)).max(0) as u64
}

/// A clock a test moves by hand.
#[derive(Default)]
pub struct ManualClock {
    pub mono_ms: AtomicU64,
    pub unix_ms: AtomicU64,
}

impl ManualClock {
    pub fn advance(&self, ms: u64) {
        self.mono_ms.fetch_add(ms, Ordering::SeqCst);
        self.unix_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn monotonic_ms(&self) -> u64 {
        self.mono_ms.load(Ordering::SeqCst)
    }
    fn unix_ms(&self) -> u64 {
        self.unix_ms.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Default)]
struct Anchor {
    /// The leadership term this anchor belongs to.
    term: u64,
    /// Log time at the moment of anchoring.
    log_time: LogTime,
    /// Monotonic clock at the moment of anchoring.
    mono_ms: u64,
    /// Last log time handed out in this term.
    last: LogTime,
}

/// The last entry with a log time in this node's log.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct LogEnd {
    index: u64,
    log_time: LogTime,
}

/// The log-time source of one node.
pub struct LogClock {
    clock: Arc<dyn Clock>,
    /// Kept by the log store through appends, truncations and recovery.
    log_end: Mutex<LogEnd>,
    /// Highest log time applied here: committed, so never undone.
    applied: AtomicU64,
    /// This node's monotonic clock when an entry was last applied here.
    applied_at_ms: AtomicU64,
    /// Highest log time ever appended here, truncated or not. Only the
    /// planted bug `log-time-from-uncommitted` reads it.
    seen_ever: AtomicU64,
    anchor: Mutex<Anchor>,
}

impl LogClock {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        LogClock {
            clock,
            log_end: Mutex::new(LogEnd::default()),
            applied: AtomicU64::new(0),
            applied_at_ms: AtomicU64::new(0),
            seen_ever: AtomicU64::new(0),
            anchor: Mutex::new(Anchor::default()),
        }
    }

    pub fn system() -> Self {
        Self::new(Arc::new(SystemClock::new()))
    }

    /// The log now ends (as far as log times go) with an entry at `index`
    /// stamped `log_time`: after an append, or after recovery.
    pub fn log_appended(&self, index: u64, log_time: LogTime) {
        self.seen_ever.fetch_max(log_time, Ordering::SeqCst);
        let mut end = self.log_end.lock().unwrap_or_else(|p| p.into_inner());
        if index >= end.index {
            *end = LogEnd { index, log_time };
        }
    }

    /// Entries from `from_index` on were removed; the last remaining entry
    /// with a log time is `remaining` (`None`: none is left in the log).
    pub fn log_truncated(&self, from_index: u64, remaining: Option<(u64, LogTime)>) {
        let mut end = self.log_end.lock().unwrap_or_else(|p| p.into_inner());
        if end.index >= from_index {
            *end = remaining.map_or(LogEnd::default(), |(index, log_time)| LogEnd { index, log_time });
        }
    }

    /// An entry (or a snapshot) at `log_time` was applied.
    pub fn applied(&self, log_time: LogTime) {
        self.applied.fetch_max(log_time, Ordering::SeqCst);
        self.applied_at_ms.store(self.clock.monotonic_ms(), Ordering::SeqCst);
    }

    /// Where log time has got to by now, as this node can tell without
    /// asking: `applied` (the log time of its applied state) plus the time
    /// since it last applied an entry. For how long a key has left (`TTL`,
    /// `PTTL` count down on an idle cluster, as on Redis), never for whether
    /// a key exists: that stays judged at `applied`, by the log alone.
    pub fn estimate_from(&self, applied: LogTime) -> LogTime {
        let since = self.clock.monotonic_ms().saturating_sub(self.applied_at_ms.load(Ordering::SeqCst));
        applied.saturating_add(since)
    }

    /// The time a leader elected now would continue from.
    pub fn log_end_time(&self) -> LogTime {
        let end = self.log_end.lock().unwrap_or_else(|p| p.into_inner()).log_time;
        end.max(self.applied.load(Ordering::SeqCst))
    }

    pub fn unix_ms(&self) -> u64 {
        self.clock.unix_ms()
    }

    fn current(&self, anchor: &mut Anchor, term: u64) -> LogTime {
        let mono = self.clock.monotonic_ms();
        if anchor.term != term {
            // New leadership: continue from the last entry of this node's log
            // (see the module doc); time spent electing does not count.
            let base = if crate::planted::active(crate::planted::Bug::LogTimeFromUncommitted) {
                self.log_end_time().max(anchor.last).max(self.seen_ever.load(Ordering::SeqCst))
            } else {
                self.log_end_time()
            };
            *anchor = Anchor { term, log_time: base, mono_ms: mono, last: base };
        }
        let t = anchor.log_time + mono.saturating_sub(anchor.mono_ms);
        t.max(anchor.last)
    }

    /// The log time for a new entry proposed as leader of `term`.
    pub fn stamp(&self, term: u64) -> LogTime {
        let mut anchor = self.anchor.lock().unwrap_or_else(|p| p.into_inner());
        let t = self.current(&mut anchor, term);
        anchor.last = t;
        t
    }

    /// The leader's current log time, without stamping.
    pub fn now(&self, term: u64) -> LogTime {
        let mut anchor = self.anchor.lock().unwrap_or_else(|p| p.into_inner());
        self.current(&mut anchor, term)
    }

    /// [`LogClock::now`] if this node already leads in `term`, without
    /// starting the term's time: a reader's look must never move the time
    /// the proposer continues from. `None` in another term.
    pub fn peek(&self, term: u64) -> Option<LogTime> {
        let anchor = self.anchor.lock().unwrap_or_else(|p| p.into_inner());
        (anchor.term == term).then(|| {
            let t = anchor.log_time + self.clock.monotonic_ms().saturating_sub(anchor.mono_ms);
            t.max(anchor.last)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_with_the_monotonic_clock_from_the_end_of_the_log() {
        let manual = Arc::new(ManualClock::default());
        manual.mono_ms.store(1_000_000, Ordering::SeqCst);
        let clock = LogClock::new(manual.clone());
        clock.log_appended(10, 5_000);
        assert_eq!(clock.stamp(1), 5_000);
        manual.advance(250);
        assert_eq!(clock.stamp(1), 5_250);
        assert_eq!(clock.now(1), 5_250);
    }

    #[test]
    fn a_new_term_continues_from_the_log_and_skips_the_election() {
        let manual = Arc::new(ManualClock::default());
        let clock = LogClock::new(manual.clone());
        clock.log_appended(1, 100);
        assert_eq!(clock.stamp(1), 100);
        manual.advance(50);
        assert_eq!(clock.stamp(1), 150);
        clock.log_appended(2, 150);
        // Another leader wrote entries up to 400 while we were not leader.
        clock.log_appended(5, 400);
        manual.advance(10_000);
        // Elected again: continue at 400, not at 150 + 10 s.
        assert_eq!(clock.stamp(3), 400);
        manual.advance(20);
        assert_eq!(clock.stamp(3), 420);
    }

    /// Issue 10, finding 1: a deposed leader stamps an entry far ahead that
    /// never commits; the entry is truncated; when this node is elected again
    /// it must continue from the committed log, not from that stamp.
    #[test]
    fn stamps_of_a_deposed_leader_and_truncated_entries_are_forgotten() {
        let manual = Arc::new(ManualClock::default());
        let clock = LogClock::new(manual.clone());
        // Leader A (term 1), last entry at log time 0, index 7.
        clock.log_appended(7, 0);
        clock.applied(0);
        assert_eq!(clock.stamp(1), 0);
        // Cut off at 30 s; B is elected at 31.5 s. At 32 s a write reaches A,
        // still leader of term 1 in its own view: stamped 32,000, appended at
        // index 8, never committed.
        manual.advance(32_000);
        let stale = clock.stamp(1);
        assert_eq!(stale, 32_000);
        clock.log_appended(8, stale);
        // The partition heals: B's leader (term 2) overwrites index 8 with its
        // own entries (an acquire stamped 3,500, then one at 5,500).
        clock.log_truncated(8, Some((7, 0)));
        clock.log_appended(8, 3_500);
        clock.log_appended(9, 5_500);
        clock.applied(5_500);
        // B crashes; A is elected for term 3 and continues from 5,500.
        manual.advance(5_000);
        assert_eq!(clock.stamp(3), 5_500);
        manual.advance(100);
        assert_eq!(clock.stamp(3), 5_600);
    }

    #[test]
    fn truncating_everything_falls_back_to_what_was_applied() {
        let manual = Arc::new(ManualClock::default());
        let clock = LogClock::new(manual.clone());
        clock.applied(2_000);
        clock.log_appended(20, 9_000);
        clock.log_truncated(15, None);
        assert_eq!(clock.log_end_time(), 2_000);
        // A truncation above the end changes nothing.
        clock.log_appended(21, 3_000);
        clock.log_truncated(30, None);
        assert_eq!(clock.log_end_time(), 3_000);
        // An append of an earlier index (a repeat) does not move the end back.
        clock.log_appended(5, 100);
        assert_eq!(clock.log_end_time(), 3_000);
    }

    #[test]
    fn never_goes_backwards_within_a_term() {
        let manual = Arc::new(ManualClock::default());
        manual.mono_ms.store(500, Ordering::SeqCst);
        let clock = LogClock::new(manual.clone());
        assert_eq!(clock.stamp(1), 0);
        manual.advance(100);
        let a = clock.stamp(1);
        // A lower monotonic reading (a different clock after restart) cannot
        // move log time back.
        manual.mono_ms.store(0, Ordering::SeqCst);
        assert!(clock.stamp(1) >= a);
    }
}
