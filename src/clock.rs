//! Log time (DESIGN.md §4): the leader stamps each entry with the highest log
//! time in its log plus its monotonic clock's elapsed time since it became
//! leader. Log time never goes backwards and does not advance during an
//! election, so a leader change can only lengthen leases.
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
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }
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
    /// Last log time handed out.
    last: LogTime,
}

/// The log-time source of one node.
pub struct LogClock {
    clock: Arc<dyn Clock>,
    /// Highest log time seen in any entry this node appended or applied.
    highest_seen: AtomicU64,
    anchor: Mutex<Anchor>,
}

impl LogClock {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        LogClock { clock, highest_seen: AtomicU64::new(0), anchor: Mutex::new(Anchor::default()) }
    }

    pub fn system() -> Self {
        Self::new(Arc::new(SystemClock::new()))
    }

    /// Records a log time found in the log (appended, applied or recovered).
    pub fn observe(&self, t: LogTime) {
        self.highest_seen.fetch_max(t, Ordering::SeqCst);
    }

    pub fn highest_seen(&self) -> LogTime {
        self.highest_seen.load(Ordering::SeqCst)
    }

    pub fn unix_ms(&self) -> u64 {
        self.clock.unix_ms()
    }

    fn current(&self, anchor: &mut Anchor, term: u64) -> LogTime {
        let mono = self.clock.monotonic_ms();
        let seen = self.highest_seen();
        if anchor.term != term {
            // New leadership: continue from the highest log time in the log;
            // time spent electing does not count.
            *anchor = Anchor { term, log_time: seen.max(anchor.last), mono_ms: mono, last: seen.max(anchor.last) };
        }
        let t = anchor.log_time + mono.saturating_sub(anchor.mono_ms);
        t.max(anchor.last).max(seen)
    }

    /// The log time for a new entry proposed as leader of `term`.
    pub fn stamp(&self, term: u64) -> LogTime {
        let mut anchor = self.anchor.lock().unwrap_or_else(|p| p.into_inner());
        let t = self.current(&mut anchor, term);
        anchor.last = t;
        t
    }

    /// The leader's current log time, for reads, without stamping.
    pub fn now(&self, term: u64) -> LogTime {
        let mut anchor = self.anchor.lock().unwrap_or_else(|p| p.into_inner());
        self.current(&mut anchor, term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_with_the_monotonic_clock_from_the_highest_seen() {
        let manual = Arc::new(ManualClock::default());
        manual.mono_ms.store(1_000_000, Ordering::SeqCst);
        let clock = LogClock::new(manual.clone());
        clock.observe(5_000);
        assert_eq!(clock.stamp(1), 5_000);
        manual.advance(250);
        assert_eq!(clock.stamp(1), 5_250);
        assert_eq!(clock.now(1), 5_250);
    }

    #[test]
    fn a_new_term_continues_from_the_log_and_skips_the_election() {
        let manual = Arc::new(ManualClock::default());
        let clock = LogClock::new(manual.clone());
        clock.observe(100);
        assert_eq!(clock.stamp(1), 100);
        manual.advance(50);
        assert_eq!(clock.stamp(1), 150);
        // Another leader wrote entries up to 400 while we were not leader.
        clock.observe(400);
        manual.advance(10_000);
        // Elected again: continue at 400, not at 150 + 10 s.
        assert_eq!(clock.stamp(3), 400);
        manual.advance(20);
        assert_eq!(clock.stamp(3), 420);
    }

    #[test]
    fn never_goes_backwards() {
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
