//! Which log entry this node is applying, so that a crash no code can catch
//! (a stack overflow, an abort inside a dependency, an allocation failure)
//! still names the entry that caused it and says how to recover.
//!
//! A command that fails in any catchable way while being applied becomes an
//! error reply (`commands::apply`). What is left cannot be caught: the process
//! aborts, and after a restart the node replays the same entry and aborts
//! again. Without a name for the entry the operator would have only a crash
//! loop; with it, `--skip-entry INDEX` on every node turns that entry into an
//! error reply everywhere, and the cluster comes back (README: "An entry that
//! cannot be applied").
//!
//! The report is written from a `SIGABRT` handler, which may only use
//! async-signal-safe calls: the entry is kept in atomics and formatted into a
//! stack buffer, then written with `write(2)`.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Once;

/// The index being applied, 0 when none (log indexes start at 1).
static INDEX: AtomicU64 = AtomicU64::new(0);
const NAME_CAP: usize = 32;
static NAME: [AtomicU8; NAME_CAP] = [const { AtomicU8::new(0) }; NAME_CAP];
static NAME_LEN: AtomicUsize = AtomicUsize::new(0);

/// Records that the entry at `index`, whose first command is `name`, is being
/// applied. Cheap: a few relaxed stores per entry.
pub fn begin(index: u64, name: &str) {
    let bytes = name.as_bytes();
    let len = bytes.len().min(NAME_CAP);
    for (slot, b) in NAME.iter().zip(&bytes[..len]) {
        slot.store(*b, Ordering::Relaxed);
    }
    NAME_LEN.store(len, Ordering::Relaxed);
    INDEX.store(index, Ordering::Release);
}

/// The entry has been applied.
pub fn end() {
    INDEX.store(0, Ordering::Release);
}

/// Installs the `SIGABRT` handler that prints the report (once per process).
pub fn install_crash_report() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: `on_abort` only reads atomics, fills a stack buffer and
        // calls write(2), all async-signal-safe. SA_RESETHAND restores the
        // default action, so abort() then ends the process as usual.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_abort as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGABRT, &action, std::ptr::null_mut());
        }
    });
}

extern "C" fn on_abort(_signal: libc::c_int) {
    let index = INDEX.load(Ordering::Acquire);
    if index == 0 {
        return;
    }
    let mut buf = [0u8; 512];
    let mut w = Writer { buf: &mut buf, len: 0 };
    w.put(b"\nraftlock: the process is stopping while applying log entry ");
    w.put_u64(index);
    w.put(b" (command '");
    let len = NAME_LEN.load(Ordering::Relaxed).min(NAME_CAP);
    for slot in &NAME[..len] {
        w.put(&[slot.load(Ordering::Relaxed)]);
    }
    w.put(b"'). Every node will stop at this entry. To recover, start every node with --skip-entry ");
    w.put_u64(index);
    w.put(b": that entry then replies an error and changes nothing.\n");
    let len = w.len;
    // SAFETY: write(2) on stderr with a valid buffer.
    unsafe {
        libc::write(2, buf.as_ptr().cast(), len);
    }
}

/// Formats into a fixed buffer without allocating (signal-safe).
struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        for b in bytes {
            if self.len < self.buf.len() {
                self.buf[self.len] = *b;
                self.len += 1;
            }
        }
    }

    fn put_u64(&mut self, n: u64) {
        self.put(crate::protocol::decimal_digits(n, &mut [0; 20]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers_without_allocating() {
        let mut buf = [0u8; 64];
        let mut w = Writer { buf: &mut buf, len: 0 };
        w.put(b"entry ");
        w.put_u64(0);
        w.put(b" ");
        w.put_u64(18_446_744_073_709_551_615);
        let len = w.len;
        assert_eq!(&buf[..len], b"entry 0 18446744073709551615");
    }
}
