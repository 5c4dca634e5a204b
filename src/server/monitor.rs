//! `MONITOR`: every command this node's clients send, as Redis shows it:
//! `+<unix time.µs> [0 <client address>] "command" "arg" ...`, each
//! argument quoted and escaped as Redis's `sdscatrepr` does.
//!
//! As in Redis: commands flagged `admin` (`CONFIG`, `ACL`, `SHUTDOWN`, ...)
//! are never shown; `AUTH`'s arguments and `HELLO`'s `AUTH` user and
//! password are shown as `(redacted)`; a transaction's commands are shown
//! at its `EXEC`. A node shows what its own clients send: a follower's
//! monitor sees its clients' writes, not the leader's. The commands a
//! script runs are shown as `[0 lua] "set" ...`, as Redis shows them, by
//! every node that applies the script while it has a monitor (the state
//! machine runs scripts on every node; a Redis replica's monitor, too,
//! shows what its master sends), after the script's own line; a read-only
//! script's (`EVAL_RO`, `FCALL_RO`) by the leader that runs it; a
//! command's scripts show at most 4 MiB of them.
//!
//! A monitor that falls more than 4,096 lines behind is disconnected,
//! as Redis disconnects one past its output buffer limit. Lines wait for
//! the slowest monitor, so each is bounded: past `MAX_ARGS` arguments and
//! `MAX_ARG_BYTES` bytes in one, the rest is counted (`"... (12 more
//! bytes)"`, `"... (3 more arguments)"`), and the backlog holds at most a
//! few tens of MiB however big the commands are.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::broadcast;

use crate::protocol::repr::{monitor_args, shown_to_monitors};
#[cfg(test)]
use crate::protocol::repr::{MAX_ARGS, MAX_ARG_BYTES};

/// Lines a monitor may fall behind before it is let go.
const BACKLOG: usize = 4 * 1024;

#[derive(Clone)]
pub struct Monitors {
    lines: broadcast::Sender<Bytes>,
    /// Connections monitoring: nothing is formatted while there are none.
    watching: Arc<AtomicUsize>,
}

impl Default for Monitors {
    fn default() -> Self {
        Monitors { lines: broadcast::channel(BACKLOG).0, watching: Arc::default() }
    }
}

/// A connection's `MONITOR`: its lines, until dropped.
pub struct Watch {
    watching: Arc<AtomicUsize>,
    pub lines: broadcast::Receiver<Bytes>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.watching.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Monitors {
    /// Starts monitoring.
    pub fn watch(&self) -> Watch {
        self.watching.fetch_add(1, Ordering::Relaxed);
        Watch { watching: self.watching.clone(), lines: self.lines.subscribe() }
    }

    /// Whether any connection monitors (cheap: checked for every command).
    pub fn active(&self) -> bool {
        self.watching.load(Ordering::Relaxed) > 0
    }

    /// Shows `argv`, sent by the client at `addr`, unless it is not to be
    /// shown (`flags` holds `admin`, or `skip_monitor` for other than a
    /// script).
    pub fn feed(&self, addr: &str, name: &str, flags: &[&str], argv: &[Bytes]) {
        if !self.active() {
            return;
        }
        if !shown_to_monitors(name, flags) {
            return;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let _ = self.lines.send(line(now.as_secs(), now.subsec_micros(), addr, name, argv));
    }

    /// Shows a command a script ran (`shown`: its arguments as
    /// [`monitor_args`] writes them), from `lua` as Redis shows it.
    pub fn feed_script_call(&self, shown: &[u8]) {
        if !self.active() {
            return;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let _ = self.lines.send(prefixed(now.as_secs(), now.subsec_micros(), "lua", shown));
    }

    /// The count of watching connections, for the state machine to know
    /// whether scripts should report their commands.
    pub fn watching(&self) -> Arc<AtomicUsize> {
        self.watching.clone()
    }
}

/// One monitor line, with its CRLF: `source` is the client's address, or
/// `lua` for a script's commands.
fn line(secs: u64, micros: u32, source: &str, name: &str, argv: &[Bytes]) -> Bytes {
    prefixed(secs, micros, source, &monitor_args(name, argv))
}

fn prefixed(secs: u64, micros: u32, source: &str, shown: &[u8]) -> Bytes {
    let mut out = format!("+{secs}.{micros:06} [0 {source}]").into_bytes();
    out.extend_from_slice(shown);
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&[u8]]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w)).collect()
    }

    #[test]
    fn lines_are_quoted_and_escaped_as_redis_writes_them() {
        let l = line(1339518083, 107412, "127.0.0.1:60866", "set", &argv(&[b"set", b"k", b"a \"b\"\\\n\r\t\x07\x08\x00\xff"]));
        assert_eq!(
            &l[..],
            &b"+1339518083.107412 [0 127.0.0.1:60866] \"set\" \"k\" \"a \\\"b\\\"\\\\\\n\\r\\t\\a\\b\\x00\\xff\"\r\n"[..]
        );
        let l = line(1, 5, "a:1", "auth", &argv(&[b"AUTH", b"user", b"secret"]));
        assert_eq!(&l[..], &b"+1.000005 [0 a:1] \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"[..]);
        let l = line(1, 5, "a:1", "hello", &argv(&[b"HELLO", b"3", b"AUTH", b"user", b"secret", b"SETNAME", b"n"]));
        assert_eq!(
            &l[..],
            &b"+1.000005 [0 a:1] \"HELLO\" \"3\" \"AUTH\" \"(redacted)\" \"(redacted)\" \"SETNAME\" \"n\"\r\n"[..]
        );
    }

    #[test]
    fn big_commands_make_bounded_lines() {
        let big = vec![b'x'; 10_000];
        let mut words: Vec<&[u8]> = vec![b"RPUSH", b"k", &big];
        words.extend(std::iter::repeat(&b"e"[..]).take(100));
        let l = line(1, 0, "a:1", "rpush", &argv(&words));
        assert!(l.len() < MAX_ARGS * 8 + MAX_ARG_BYTES + 200, "{} bytes", l.len());
        let text = String::from_utf8_lossy(&l);
        assert!(text.contains(&format!("\"{}... (9744 more bytes)\"", "x".repeat(256))));
        assert!(text.ends_with("\"... (39 more arguments)\"\r\n"), "{text}");
    }

    #[test]
    fn only_what_may_be_shown_reaches_monitors() {
        let m = Monitors::default();
        m.feed("a:1", "get", &[], &argv(&[b"GET", b"k"]));
        let mut w = m.watch();
        assert!(m.active());
        m.feed("a:1", "config", &["admin"], &argv(&[b"CONFIG", b"SET", b"requirepass", b"x"]));
        m.feed("a:1", "eval", &["skip_monitor"], &argv(&[b"EVAL", b"return 1", b"0"]));
        m.feed("a:1", "get", &[], &argv(&[b"GET", b"k"]));
        let first = w.lines.try_recv().unwrap();
        assert!(first.ends_with(b"[0 a:1] \"EVAL\" \"return 1\" \"0\"\r\n"));
        assert!(w.lines.try_recv().unwrap().ends_with(b"\"GET\" \"k\"\r\n"));
        assert!(w.lines.try_recv().is_err(), "CONFIG is never shown");
        drop(w);
        assert!(!m.active());
    }
}
