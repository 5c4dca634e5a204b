//! Deliberate bugs, for showing that the fault-injection harness (tests/chaos)
//! catches what it claims to. They exist only in builds with the
//! `planted-bugs` feature and are switched on one by one with `--plant-bug`;
//! in every other build [`active`] is a constant `false`.

/// A bug that can be planted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Bug {
    /// Leases are judged against the leader's wall clock instead of log time.
    WallClockLease,
    /// Reads are answered from the local state without `ensure_linearizable`,
    /// on any node.
    StaleReads,
    /// Log appends are acknowledged as they arrive and reach the log's file
    /// only a second later, so a process that dies in between loses records it
    /// acknowledged.
    AckBeforeFsync,
    /// Tokens come from a counter that is rebuilt from the live keys of the
    /// snapshot at start, so tokens are handed out again after a restart.
    TokenReuse,
    /// A new leader continues log time from the highest time this node ever
    /// saw or stamped (including entries that never committed or were
    /// truncated) instead of from the last entry of its log.
    LogTimeFromUncommitted,
    /// Reads judge expiry at the leader's live clock instead of at the log
    /// time of the applied state.
    ReadsAtLeaderClock,
    /// Writes that change a value in place (INCR, APPEND, HSET, LPUSH, ...)
    /// keep the key's version, so a lock key rewritten that way keeps the
    /// old grant's token.
    VersionKeptOnWrite,
    /// A follower ends the pending state of a tracked read as soon as the
    /// leader's answer arrives, before applying the entries it reflects.
    TrackingAnsweredEarly,
    /// A freed lock goes to the waiter that queued last instead of first.
    WaitLifo,
    /// A leader's own entries are acknowledged before their fsync (as
    /// always) with none of the safeguards of `raft::log_store::Durable`: it
    /// applies them and tells followers they are committed before they are
    /// on its disk, saves such a commit, changes its vote and restarts as
    /// the leader of the same term without waiting for them; and its log
    /// writes lag a second. A leader that dies meanwhile loses entries it
    /// acknowledged, or gives other entries their log ids.
    AppliedBeforeDurable,
    /// A truncation leaves the early acknowledgements of the entries it cut
    /// off in place, so a deposed leader's next vote change waits for its
    /// log to grow back past them, holding openraft's core (the fix of
    /// 2026-12-04): the node stops applying while it runs.
    VoteWaitsForTruncated,
    /// Not a bug: the leader's log writes lag a second behind the early
    /// acknowledgements of its own entries, as `AppliedBeforeDurable` has
    /// them, with every safeguard in place. A chaos run with it must pass.
    LeaderLogLag,
}

#[cfg(feature = "planted-bugs")]
static PLANTED: std::sync::OnceLock<Vec<Bug>> = std::sync::OnceLock::new();

/// Switches on `bugs` for the rest of the process (once).
#[cfg(feature = "planted-bugs")]
pub fn plant(bugs: &[Bug]) {
    if !bugs.is_empty() {
        tracing::warn!(?bugs, "PLANTED BUGS ARE ACTIVE: this node is deliberately unsafe");
    }
    let _ = PLANTED.set(bugs.to_vec());
}

/// Whether `bug` is planted in this process.
#[inline]
pub fn active(bug: Bug) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        PLANTED.get().is_some_and(|bugs| bugs.contains(&bug))
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = bug;
        false
    }
}

/// For [`Bug::WallClockLease`]: how far the leader's wall clock (`unix_ms` of
/// the entry) has moved ahead of log time since this node first looked.
pub fn wall_clock_skew(log_time: u64, unix_ms: u64) -> u64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static BASE: AtomicI64 = AtomicI64::new(i64::MIN);
    let gap = unix_ms as i64 - log_time as i64;
    let _ = BASE.compare_exchange(i64::MIN, gap, Ordering::Relaxed, Ordering::Relaxed);
    (gap - BASE.load(Ordering::Relaxed)).max(0) as u64
}
