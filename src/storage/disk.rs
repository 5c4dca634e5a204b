//! A reserve of free space on the data directory's disk.
//!
//! A node whose log cannot be written stops (openraft takes a failed append
//! as fatal), and every member holds the same data: clients that write until
//! the disks are full would stop the whole cluster at once. So while the free
//! space of the data directory's file system is below the reserve
//! (`--min-free-disk`), commands that may add data (`denyoom` in the command
//! table, and scripts other than the lock scripts run without Lua) are
//! refused with a `MISCONF` error, as Redis refuses writes when it cannot
//! write its AOF; reads, deletions, lease renewals and releases go on, and
//! spend the reserve, so holders can still let go. The node that takes a
//! command judges it by its own disk, and the leader again by its own.
//!
//! The free space is read (`statvfs`) at most every [`SAMPLE_EVERY`], by the
//! first caller that finds the last reading older, so a command pays an
//! atomic load or two.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a reading of the free space stands.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The default reserve: room for a few new log segments (64 MB each, taken
/// whole when one starts) and RocksDB's own files.
pub const DEFAULT_RESERVE: u64 = 256 * 1024 * 1024;

#[derive(Debug)]
pub struct DiskReserve {
    dir: PathBuf,
    /// Bytes; 0: no reserve (nothing is refused).
    reserve: AtomicU64,
    /// The last reading, in bytes (`u64::MAX` when unreadable).
    free: AtomicU64,
    low: AtomicBool,
    /// When the last reading was taken, in µs since [`epoch`].
    read_at_us: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Bytes an unprivileged writer may still use on the file system that holds
/// `dir` (`None` if it cannot be read).
pub fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` writes only into `stat`, which is plain data; `path`
    // is a NUL-terminated string that outlives the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

impl DiskReserve {
    pub fn new(dir: PathBuf, reserve: u64) -> DiskReserve {
        let disk = DiskReserve {
            dir,
            reserve: AtomicU64::new(reserve),
            free: AtomicU64::new(u64::MAX),
            low: AtomicBool::new(false),
            read_at_us: AtomicU64::new(0),
        };
        disk.sample();
        disk
    }

    pub fn reserve(&self) -> u64 {
        self.reserve.load(Ordering::Relaxed)
    }

    /// Changes the reserve, effective at once.
    pub fn set_reserve(&self, bytes: u64) {
        self.reserve.store(bytes, Ordering::Relaxed);
        self.sample();
    }

    /// Reads the free space now.
    pub fn sample(&self) {
        let free = free_bytes(&self.dir).unwrap_or(u64::MAX);
        self.free.store(free, Ordering::Relaxed);
        let reserve = self.reserve();
        let low = reserve > 0 && free < reserve;
        self.low.store(low, Ordering::Relaxed);
        if free != u64::MAX {
            crate::metrics::set_disk(free, low);
        }
        self.read_at_us.store(epoch().elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// The free space as last read (`None` if it could not be read).
    pub fn free(&self) -> Option<u64> {
        Some(self.free.load(Ordering::Relaxed)).filter(|f| *f != u64::MAX)
    }

    /// Whether commands that may add data are refused now.
    pub fn low(&self) -> bool {
        let now = epoch().elapsed().as_micros() as u64;
        let at = self.read_at_us.load(Ordering::Relaxed);
        if now.saturating_sub(at) >= SAMPLE_EVERY.as_micros() as u64
            && self.read_at_us.compare_exchange(at, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.sample();
        }
        self.low.load(Ordering::Relaxed)
    }

    /// The error a refused command gets.
    pub fn refusal(&self) -> String {
        const MB: u64 = 1024 * 1024;
        format!(
            "MISCONF the data directory's disk is nearly full ({} MB free, min-free-disk is {} MB): \
             commands that may add data are refused until space is freed; deletions and lock releases are served",
            self.free().unwrap_or(0) / MB,
            self.reserve() / MB
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_above_the_free_space_is_low_and_zero_never_is() {
        let dir = std::env::temp_dir();
        let free = free_bytes(&dir).expect("statvfs of the temporary directory");
        assert!(free > 0);
        let disk = DiskReserve::new(dir.clone(), 0);
        assert!(!disk.low(), "no reserve refuses nothing");
        disk.set_reserve(free.saturating_mul(2).max(1 << 40));
        assert!(disk.low(), "a reserve above the free space ({free} bytes) is not low");
        assert!(disk.refusal().starts_with("MISCONF "), "{}", disk.refusal());
        disk.set_reserve(1);
        assert!(!disk.low());
        assert!(disk.free().is_some_and(|f| f > 1));
    }

    #[test]
    fn an_unreadable_directory_refuses_nothing() {
        let disk = DiskReserve::new(PathBuf::from("/nonexistent/raftlock/dir"), u64::MAX);
        assert_eq!(disk.free(), None);
        assert!(!disk.low());
    }
}
