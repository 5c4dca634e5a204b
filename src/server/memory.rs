//! `maxmemory` with Redis's `noeviction` policy: while the process's memory
//! is over the limit, commands that may grow the data set (`denyoom` in the
//! command table, and scripts other than the lock scripts run without Lua:
//! `commands::may_add_data`) are refused with Redis's `OOM` error; reads,
//! deletions and releases are still served, so clients can make room.
//!
//! The memory is the process's resident set (Redis counts what its
//! allocator holds), sampled every [`SAMPLE_EVERY`] and whenever the limit
//! changes, so a command pays one atomic load. Each node judges its own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How often the resident set is read.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

#[derive(Default)]
pub struct MemoryLimit {
    /// Bytes; 0: no limit.
    limit: AtomicU64,
    over: AtomicBool,
}

pub use crate::commands::resident_bytes;

impl MemoryLimit {
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    pub fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Relaxed);
        self.sample();
    }

    /// Reads the resident set and notes whether it is over the limit.
    pub fn sample(&self) {
        let limit = self.limit();
        self.over.store(limit > 0 && resident_bytes() > limit, Ordering::Relaxed);
    }

    /// Whether commands that may grow the data set are refused now.
    pub fn exceeded(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }
}

/// A memory amount as Redis's configuration takes it: bytes, or with a unit
/// (`k`/`m`/`g` = powers of 1000, `kb`/`mb`/`gb` = powers of 1024).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mul)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_parse_as_redis_takes_them() {
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes("100mb"), Some(100 * 1024 * 1024));
        assert_eq!(parse_bytes("1G"), Some(1_000_000_000));
        assert_eq!(parse_bytes("2kb"), Some(2048));
        assert_eq!(parse_bytes("12x"), None);
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("99999999999999gb"), None);
    }

    #[test]
    fn a_limit_below_the_resident_set_is_exceeded_at_once() {
        let m = MemoryLimit::default();
        assert!(!m.exceeded());
        assert!(resident_bytes() > 4096);
        m.set_limit(1);
        assert!(m.exceeded());
        m.set_limit(0);
        assert!(!m.exceeded());
        m.set_limit(u64::MAX / 2);
        assert!(!m.exceeded());
    }
}
