//! How the node's background threads ask Linux's scheduler for a core.
//!
//! A snapshot's encoding takes a core for seconds (about 4.6 s at 10 M
//! keys), while the threads that answer clients and write the log wake
//! thousands of times a second and run for microseconds each time. Two
//! settings keep it out of their way ([`background`]):
//!
//! - its nice value, +10: its share of a contended core (about a tenth of a
//!   nice-0 thread's);
//! - its slice, 100 µs instead of the kernel's default (0.75 ms times a
//!   factor of the CPU count, 1.4 ms on two). Linux 6.6 and later schedule
//!   by EEVDF, which lets the running thread finish its slice before a
//!   thread that wakes takes the core (`RUN_TO_PARITY`): the nice value
//!   alone left each command's wake-up up to 1.4 ms behind the encoder,
//!   several times per command. The slice changes when the encoder runs,
//!   not how much.
//!
//! Measured (`benches/HISTORY.md`, 2026-12-06, early afternoon): one node,
//! 50 clients inserting 3 M lock keys with a one-client acquire+release loop
//! beside them, two alternating pairs: the loop's pairs over 7 ms while a
//! snapshot was encoded, 31.1 and 22.0 per second with the short slice
//! against 45.0 and 39.1 without. The same short slice given to the runtime
//! and the log writer as well did as much for a single node but cost a
//! three-node cluster sharing two cores 10-20% of its pairs/s (their
//! `sched_yield`s between polls push a short slice's deadline only 100 µs
//! on, so a poller took its core back at once): not done.
//!
//! Linux's idle class (`SCHED_IDLE`) was tried instead: at 3 M keys the lock
//! loop's slow pairs (over 7 ms) were fewer per second of snapshot but as
//! many in all, the build took half as long again, and a node on a machine
//! kept busy by others could starve its snapshots (and grow its log)
//! without end. Not kept.

/// The nice value of a [`background`] thread.
const BACKGROUND_NICE: i32 = 10;

/// A [`background`] thread's slice, ns (Linux takes 100 µs to 100 ms).
const BACKGROUND_SLICE_NS: u64 = 100_000;

/// Makes the calling thread a background one (see the module's docs): nice
/// +10 and a short slice. Whatever the kernel refuses is left as it was
/// (a kernel before 6.6 has no slices to set, and ignores this one).
pub fn background() {
    #[cfg(target_os = "linux")]
    {
        set_nice(BACKGROUND_NICE);
        set_slice(BACKGROUND_SLICE_NS);
    }
}

/// The calling thread's id (Linux keeps a nice value per thread).
#[cfg(target_os = "linux")]
fn tid() -> libc::id_t {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

#[cfg(target_os = "linux")]
fn set_nice(nice: i32) {
    // SAFETY: setpriority only reads its arguments.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid(), nice) };
}

/// Asks for a slice of `ns` for the calling thread, keeping its policy
/// (`SCHED_OTHER`) and nice value. Returns whether the kernel took it.
#[cfg(target_os = "linux")]
fn set_slice(ns: u64) -> bool {
    /// `struct sched_attr` (include/uapi/linux/sched/types.h), its first
    /// version (`SCHED_ATTR_SIZE_VER0`).
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        sched_policy: u32,
        sched_flags: u64,
        sched_nice: i32,
        sched_priority: u32,
        sched_runtime: u64,
        sched_deadline: u64,
        sched_period: u64,
    }
    let tid = tid();
    // SAFETY: getpriority only reads its arguments. Its -1 for an error is
    // also a nice value, but it cannot fail for the calling thread.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: 0,
        sched_nice: nice,
        sched_priority: 0,
        // For the fair policies: the slice.
        sched_runtime: ns,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: sched_setattr reads `attr`, which outlives the call and whose
    // first field gives its size.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &attr as *const SchedAttr, 0u32) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "the scheduler refused a short slice");
    }
    rc == 0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The calling thread's slice as the kernel reports it (ns), if it does.
    fn reported_slice() -> Option<u64> {
        let sched = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
        let line = sched.lines().find(|l| l.trim_start().starts_with("se.slice"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }

    /// (major, minor) of the running kernel.
    fn kernel() -> (u32, u32) {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release.trim().split(|c: char| !c.is_ascii_digit()).map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    fn nice() -> i32 {
        // SAFETY: getpriority only reads its arguments.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, tid()) }
    }

    #[test]
    fn a_background_thread_has_nice_10_and_a_short_slice() {
        std::thread::spawn(|| {
            let default = reported_slice();
            background();
            assert_eq!(nice(), BACKGROUND_NICE);
            match default {
                // EEVDF reports every thread's slice.
                Some(default) => {
                    assert_ne!(default, BACKGROUND_SLICE_NS, "the default slice is already the short one");
                    assert_eq!(reported_slice(), Some(BACKGROUND_SLICE_NS));
                }
                None => assert!(kernel() < (6, 6), "kernel {:?} reports no slice", kernel()),
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_slice_keeps_the_nice_value() {
        std::thread::spawn(|| {
            set_nice(3);
            set_slice(250_000);
            assert_eq!(nice(), 3);
            if reported_slice().is_some() {
                assert_eq!(reported_slice(), Some(250_000));
            }
        })
        .join()
        .unwrap();
    }
}
