//! `SLOWLOG`: this node's commands that took at least
//! `slowlog-log-slower-than` microseconds (10,000 by default; -1: none),
//! the newest `slowlog-max-len` of them (128), as Redis keeps them.
//!
//! A command's time here runs from when its connection takes it to when its
//! reply is ready, and so includes the Raft round a write makes (its
//! replication and fsync): that is what a slow write costs its client.
//! Redis counts only the command's execution. Not logged, as in Redis: the
//! blocking commands (their wait is not their work) and `EXEC` (its
//! commands are); nor, so that no password is ever kept, `AUTH`, `HELLO`,
//! `ACL` and `CONFIG`; nor commands queued in `MULTI`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use crate::protocol::Reply;

/// Arguments kept per entry; the last one kept says how many more there were.
const MAX_ARGS: usize = 32;
/// Bytes kept per argument; the rest is counted.
const MAX_ARG_BYTES: usize = 128;
/// Bytes kept of a client's name (and in `ACL LOG`, of its `CLIENT INFO`).
pub const MAX_TEXT_BYTES: usize = 4096;

pub use crate::protocol::repr::cut;

/// `text` cut to at most `max` bytes (at a character boundary), with how
/// many more there were.
pub fn bounded(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} more bytes)", &text[..end], text.len() - end)
}

struct Entry {
    id: u64,
    unix_secs: i64,
    micros: u64,
    argv: Vec<Bytes>,
    addr: String,
    name: String,
}

pub struct SlowLog {
    entries: Mutex<VecDeque<Entry>>,
    next_id: AtomicU64,
    /// `slowlog-log-slower-than`, in µs; negative: nothing is logged.
    threshold_us: AtomicI64,
    /// `slowlog-max-len`.
    max_len: AtomicUsize,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog {
            entries: Mutex::new(VecDeque::new()),
            next_id: AtomicU64::new(0),
            threshold_us: AtomicI64::new(10_000),
            max_len: AtomicUsize::new(128),
        }
    }
}

/// Whether a command is never logged (see the module's notes).
pub fn skipped(name: &str, flags: &[&str]) -> bool {
    flags.contains(&"blocking") || flags.contains(&"skip_slowlog") || matches!(name, "auth" | "hello" | "acl" | "config")
}

impl SlowLog {
    /// `CONFIG SET` of one of its two parameters (values already checked).
    pub fn configure(&self, name: &str, value: &str) {
        let Ok(n) = value.parse::<i64>() else { return };
        match name {
            "slowlog-log-slower-than" => self.threshold_us.store(n, Ordering::Relaxed),
            "slowlog-max-len" => {
                let len = usize::try_from(n).unwrap_or(0);
                self.max_len.store(len, Ordering::Relaxed);
                self.trim(len);
            }
            _ => {}
        }
    }

    /// Whether a command that took `micros` is logged.
    pub fn is_slow(&self, micros: u64) -> bool {
        let threshold = self.threshold_us.load(Ordering::Relaxed);
        threshold >= 0 && micros >= threshold as u64
    }

    pub fn record(&self, micros: u64, argv: &[Bytes], addr: String, name: String) {
        let max_len = self.max_len.load(Ordering::Relaxed);
        if max_len == 0 {
            return;
        }
        let kept = argv.len().min(MAX_ARGS);
        let argv = argv[..kept]
            .iter()
            .enumerate()
            .map(|(j, arg)| {
                if kept != argv.len() && j == kept - 1 {
                    Bytes::from(format!("... ({} more arguments)", argv.len() - kept + 1))
                } else {
                    // A copy: a slice would keep the whole request's buffer
                    // (a big value beside it) for as long as the entry.
                    Bytes::copy_from_slice(&cut(arg, MAX_ARG_BYTES))
                }
            })
            .collect();
        // A client name is the client's to choose, of any length.
        let name = bounded(name, MAX_TEXT_BYTES);
        let unix_secs =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut entries = self.lock();
        entries.push_front(Entry { id, unix_secs, micros, argv, addr, name });
        entries.truncate(max_len);
    }

    fn trim(&self, len: usize) {
        self.lock().truncate(len);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `SLOWLOG GET|LEN|RESET|HELP`; `args` after `SLOWLOG`.
    pub fn command(&self, args: &[Bytes]) -> Reply {
        let sub = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        match (sub.as_str(), args.len()) {
            ("GET", 1 | 2) => {
                let count = match args.get(1).map(|c| crate::protocol::parse_i64(c)) {
                    None => 10,
                    Some(Some(-1)) => usize::MAX,
                    Some(Some(n)) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                    Some(_) => return Reply::error("ERR count should be greater than or equal to -1"),
                };
                let entries = self.lock();
                Reply::Array(
                    entries
                        .iter()
                        .take(count)
                        .map(|e| {
                            Reply::Array(vec![
                                Reply::Int(e.id as i64),
                                Reply::Int(e.unix_secs),
                                Reply::Int(e.micros as i64),
                                Reply::Array(e.argv.iter().cloned().map(Reply::Bulk).collect()),
                                Reply::text(&e.addr),
                                Reply::text(&e.name),
                            ])
                        })
                        .collect(),
                )
            }
            ("LEN", 1) => Reply::Int(self.lock().len() as i64),
            ("RESET", 1) => {
                self.lock().clear();
                Reply::ok()
            }
            ("HELP", 1) => Reply::Array(
                [
                    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "GET [<count>]",
                    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                    "    Entries are made of:",
                    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                    "    client name",
                    "LEN",
                    "    Return the length of the slowlog.",
                    "RESET",
                    "    Reset the slowlog.",
                    "HELP",
                    "    Prints this help.",
                ]
                .iter()
                .map(|l| Reply::Status(l.to_string()))
                .collect(),
            ),
            ("GET" | "LEN" | "RESET" | "HELP", _) => {
                Reply::Error(format!("ERR wrong number of arguments for 'slowlog|{}' command", sub.to_ascii_lowercase()))
            }
            _ => Reply::Error(format!(
                "ERR unknown subcommand '{}'. Try SLOWLOG HELP.",
                String::from_utf8_lossy(&args[0])
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    #[test]
    fn entries_do_not_keep_the_request_s_buffer() {
        let request = Bytes::from(vec![b'v'; 1 << 20]);
        let log = SlowLog::default();
        let argv = [Bytes::from_static(b"SET"), request.slice(0..3), request.clone()];
        log.record(20_000, &argv, String::new(), "n".repeat(100_000));
        let entries = log.lock();
        let within = |b: &Bytes| (request.as_ptr() as usize..request.as_ptr() as usize + request.len()).contains(&(b.as_ptr() as usize));
        assert!(!entries[0].argv.iter().any(within), "a slice of the request's buffer was kept");
        assert!(entries[0].name.len() <= MAX_TEXT_BYTES + 40, "a client's name kept whole");
    }

    #[test]
    fn long_commands_are_trimmed_as_redis_trims_them() {
        let log = SlowLog::default();
        let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        let mut words = vec!["RPUSH", "k"];
        words.extend(many.iter().map(String::as_str));
        log.record(20_000, &argv(&words), "127.0.0.1:1".into(), "n".into());
        let long = "x".repeat(200);
        log.record(30_000, &argv(&["SET", "k", &long]), "127.0.0.1:2".into(), String::new());
        let Reply::Array(entries) = log.command(&argv(&["GET", "-1"])) else { panic!() };
        let Reply::Array(newest) = &entries[0] else { panic!() };
        assert!(matches!(newest[0], Reply::Int(1)) && matches!(newest[2], Reply::Int(30_000)));
        let Reply::Array(args) = &newest[3] else { panic!() };
        let Reply::Bulk(value) = &args[2] else { panic!() };
        assert_eq!(value.len(), 128 + "... (72 more bytes)".len());
        let Reply::Array(oldest) = &entries[1] else { panic!() };
        let Reply::Array(args) = &oldest[3] else { panic!() };
        assert_eq!(args.len(), 32);
        assert!(matches!(&args[31], Reply::Bulk(b) if &b[..] == b"... (11 more arguments)"));
        // The newest `slowlog-max-len` stay.
        log.configure("slowlog-max-len", "1");
        assert!(matches!(log.command(&argv(&["LEN"])), Reply::Int(1)));
        assert!(matches!(log.command(&argv(&["GET", "-2"])), Reply::Error(_)));
        log.configure("slowlog-log-slower-than", "-1");
        assert!(!log.is_slow(u64::MAX));
        log.configure("slowlog-log-slower-than", "0");
        assert!(log.is_slow(0));
    }
}
