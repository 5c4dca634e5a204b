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
//! atomic load or two; between readings, the bytes of the commands let in
//! are taken off the last reading (a client writing megabytes at memory
//! speed would otherwise pass the whole reserve in one interval).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Bytes of commands let in since the last reading: a client writing
    /// fast would otherwise pass the reserve between two readings.
    spent: AtomicU64,
    /// When the last reading was taken, in µs since [`epoch`].
    read_at_us: AtomicU64,
}

/// Free space a snapshot being written must leave: half the reserve (the
/// other half is the log's while the snapshot is retried). Process-wide,
/// set by [`DiskReserve::guard_snapshots`]; 0 (tests of the storage alone):
/// no floor.
static SNAPSHOT_FLOOR: AtomicU64 = AtomicU64::new(0);

/// An error if the file system that holds `file` has less free than
/// [`SNAPSHOT_FLOOR`]: the snapshot being written into `file` stops (it is
/// deleted, and tried again later) instead of filling the disk.
pub fn room_for_snapshot(file: &std::fs::File) -> std::io::Result<()> {
    let floor = SNAPSHOT_FLOOR.load(Ordering::Relaxed);
    if floor == 0 {
        return Ok(());
    }
    // SAFETY: `fstatvfs` writes only into `stat`, plain data; the descriptor
    // is `file`'s, open for the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatvfs(std::os::fd::AsRawFd::as_raw_fd(file), &mut stat) } != 0 {
        return Ok(());
    }
    let free = available(&stat);
    if free < floor {
        return Err(std::io::Error::other(format!(
            "no room for a snapshot: {} MB free, below half of min-free-disk",
            free >> 20
        )));
    }
    Ok(())
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
    Some(available(&stat))
}

/// Bytes an unprivileged writer may still use, by `stat`.
fn available(stat: &libc::statvfs) -> u64 {
    (stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64)
}

impl DiskReserve {
    pub fn new(dir: PathBuf, reserve: u64) -> DiskReserve {
        let disk = DiskReserve {
            dir,
            reserve: AtomicU64::new(reserve),
            free: AtomicU64::new(u64::MAX),
            spent: AtomicU64::new(0),
            read_at_us: AtomicU64::new(0),
        };
        disk.sample();
        disk
    }

    /// Makes this reserve the one snapshots written by this process leave
    /// half of ([`room_for_snapshot`]); the server's, at its start and when
    /// the reserve changes.
    pub fn guard_snapshots(&self) {
        SNAPSHOT_FLOOR.store(self.reserve() / 2, Ordering::Relaxed);
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
        self.spent.store(0, Ordering::Relaxed);
        self.read_at_us.store(epoch().elapsed().as_micros() as u64, Ordering::Relaxed);
        if free != u64::MAX {
            crate::metrics::set_disk(free, self.below_reserve());
        }
    }

    /// Counts `bytes` of a command let in against the free space until the
    /// next reading.
    pub fn spend(&self, bytes: u64) {
        self.spent.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Whether the last reading, less what was let in since, is below the
    /// reserve.
    fn below_reserve(&self) -> bool {
        let (reserve, free) = (self.reserve(), self.free.load(Ordering::Relaxed));
        reserve > 0 && free != u64::MAX && free.saturating_sub(self.spent.load(Ordering::Relaxed)) < reserve
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
        self.below_reserve()
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
    fn what_is_let_in_counts_against_the_free_space_until_the_next_reading() {
        let dir = std::env::temp_dir();
        let free = free_bytes(&dir).expect("statvfs of the temporary directory");
        let disk = DiskReserve::new(dir, free / 2);
        assert!(!disk.low());
        disk.spend(free - free / 4);
        // Not `low`, which reads again once 100 ms have passed.
        assert!(disk.below_reserve(), "{} of {free} bytes let in, the reserve {} not met", free - free / 4, free / 2);
        disk.sample();
        assert!(!disk.low(), "a reading starts the count again");
    }

    #[test]
    fn an_unreadable_directory_refuses_nothing() {
        let disk = DiskReserve::new(PathBuf::from("/nonexistent/raftlock/dir"), u64::MAX);
        assert_eq!(disk.free(), None);
        assert!(!disk.low());
    }
}
