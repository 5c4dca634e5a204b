//! `ACL LOG [count | RESET]`: this node's record of refused commands and
//! failed authentications, as Redis 7.0 keeps it: newest first, at most
//! `acllog-max-len` entries (128), and a refusal like one of the last ten
//! (same reason, context, object and user, within 60 seconds) counted on
//! that entry instead of a new one.
//!
//! Logged where this node refuses: a command (`toplevel`, or `multi` when
//! queued in a transaction or checked again at its `EXEC`) and an `AUTH` or
//! `HELLO ... AUTH` that failed (`auth`). A script's refused `redis.call`
//! is decided inside the state machine, on every node, and is not logged.
//! No password is ever kept: an `auth` entry names the command and the user.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use crate::protocol::{parse_i64, Reply};

/// Entries looked at for one to count a new refusal on.
const MATCH_SCAN: usize = 10;
/// How close in time a refusal must be to an entry to be counted on it.
const GROUPING_MS: i64 = 60_000;
/// Bytes kept of the refused key or channel; the rest is counted.
const MAX_OBJECT_BYTES: usize = 1024;

/// What was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Channel,
    Auth,
}

impl Reason {
    fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

struct Entry {
    count: u64,
    reason: Reason,
    /// `toplevel` or `multi`.
    context: &'static str,
    object: Bytes,
    username: String,
    /// Unix time of the latest refusal counted here, ms.
    at_ms: i64,
    client_info: String,
}

pub struct AclLog {
    entries: Mutex<VecDeque<Entry>>,
    /// `acllog-max-len`.
    max_len: AtomicUsize,
    /// Refusals by reason, in [`Reason`]'s order (INFO's
    /// `acl_access_denied_*`).
    denied: [AtomicU64; 4],
}

impl Default for AclLog {
    fn default() -> Self {
        AclLog { entries: Mutex::new(VecDeque::new()), max_len: AtomicUsize::new(128), denied: Default::default() }
    }
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl AclLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `CONFIG SET acllog-max-len` (value already checked).
    pub fn configure(&self, name: &str, value: &str) {
        if name == "acllog-max-len" {
            if let Ok(n) = value.parse::<usize>() {
                self.max_len.store(n, Ordering::Relaxed);
                self.lock().truncate(n);
            }
        }
    }

    /// A refusal: `client_info` is the client's `CLIENT INFO` line.
    pub fn record(&self, reason: Reason, multi: bool, object: Bytes, username: &str, client_info: String) {
        self.denied[reason as usize].fetch_add(1, Ordering::Relaxed);
        self.record_at(reason, multi, object, username, client_info, unix_ms());
    }

    /// INFO's `acl_access_denied_auth`, `_cmd`, `_key` and `_channel`.
    pub fn denied_counts(&self) -> [(&'static str, u64); 4] {
        let n = |r: Reason| self.denied[r as usize].load(Ordering::Relaxed);
        [
            ("acl_access_denied_auth", n(Reason::Auth)),
            ("acl_access_denied_cmd", n(Reason::Command)),
            ("acl_access_denied_key", n(Reason::Key)),
            ("acl_access_denied_channel", n(Reason::Channel)),
        ]
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset_counts(&self) {
        self.denied.iter().for_each(|d| d.store(0, Ordering::Relaxed));
    }

    fn record_at(&self, reason: Reason, multi: bool, object: Bytes, username: &str, client_info: String, now_ms: i64) {
        let context = if multi { "multi" } else { "toplevel" };
        // Copies, bounded: a key, channel or client name may be megabytes,
        // and a slice of the request would keep all of its buffer.
        let object = Bytes::copy_from_slice(&super::slowlog::cut(&object, MAX_OBJECT_BYTES));
        let client_info = super::slowlog::bounded(client_info, super::slowlog::MAX_TEXT_BYTES);
        let username = super::slowlog::bounded(username.to_string(), super::slowlog::MAX_TEXT_BYTES);
        let username = username.as_str();
        let mut entries = self.lock();
        let similar = entries.iter().take(MATCH_SCAN).position(|e| {
            e.reason == reason
                && e.context == context
                && (e.at_ms - now_ms).abs() <= GROUPING_MS
                && e.object == object
                && e.username == username
        });
        if let Some(at) = similar {
            let mut e = entries.remove(at).expect("found above");
            e.count += 1;
            e.at_ms = now_ms;
            e.client_info = client_info;
            entries.push_front(e);
            return;
        }
        entries.push_front(Entry { count: 1, reason, context, object, username: username.to_string(), at_ms: now_ms, client_info });
        entries.truncate(self.max_len.load(Ordering::Relaxed));
    }

    /// `ACL LOG [count | RESET]`; `args` after `LOG`.
    pub fn command(&self, args: &[Bytes]) -> Reply {
        let count = match args.first() {
            None => 10,
            Some(a) if a.eq_ignore_ascii_case(b"reset") => {
                self.lock().clear();
                return Reply::ok();
            }
            Some(a) => match parse_i64(a) {
                Some(n) => usize::try_from(n).unwrap_or(0),
                None => return Reply::error("ERR value is not an integer or out of range"),
            },
        };
        let now = unix_ms();
        let entries = self.lock();
        Reply::Array(
            entries
                .iter()
                .take(count)
                .map(|e| {
                    Reply::Map(vec![
                        (Reply::text("count"), Reply::Int(e.count as i64)),
                        (Reply::text("reason"), Reply::text(e.reason.name())),
                        (Reply::text("context"), Reply::text(e.context)),
                        (Reply::text("object"), Reply::Bulk(e.object.clone())),
                        (Reply::text("username"), Reply::text(&e.username)),
                        (Reply::text("age-seconds"), Reply::Double((now - e.at_ms).max(0) as f64 / 1000.0)),
                        (Reply::text("client-info"), Reply::text(&e.client_info)),
                    ])
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(log: &AclLog) -> Vec<(u64, String)> {
        log.lock().iter().map(|e| (e.count, String::from_utf8_lossy(&e.object).into_owned())).collect()
    }

    #[test]
    fn like_refusals_count_on_one_entry_within_a_minute() {
        let log = AclLog::default();
        let o = |s: &'static str| Bytes::from_static(s.as_bytes());
        log.record_at(Reason::Key, false, o("k1"), "alice", "id=1".into(), 1_000);
        log.record_at(Reason::Key, false, o("k1"), "alice", "id=2".into(), 30_000);
        assert_eq!(counts(&log), [(2, "k1".into())]);
        // Another user, context, object or reason: a new entry.
        log.record_at(Reason::Key, false, o("k1"), "bob", String::new(), 30_000);
        log.record_at(Reason::Key, true, o("k1"), "alice", String::new(), 30_000);
        log.record_at(Reason::Key, false, o("k2"), "alice", String::new(), 30_000);
        log.record_at(Reason::Command, false, o("k1"), "alice", String::new(), 30_000);
        assert_eq!(log.lock().len(), 5);
        // More than a minute after its last: a new entry.
        log.record_at(Reason::Key, false, o("k1"), "alice", String::new(), 30_000 + GROUPING_MS + 1);
        assert_eq!(log.lock().len(), 6);
        // The match moves to the front, with its latest client.
        log.record_at(Reason::Key, false, o("k2"), "alice", "id=9".into(), 40_000);
        let front = log.lock().front().map(|e| (e.count, e.client_info.clone()));
        assert_eq!(front, Some((2, "id=9".to_string())));
        log.configure("acllog-max-len", "2");
        assert_eq!(log.lock().len(), 2);
        assert!(matches!(log.command(&[Bytes::from_static(b"1")]), Reply::Array(a) if a.len() == 1));
        assert!(matches!(log.command(&[Bytes::from_static(b"-3")]), Reply::Array(a) if a.is_empty()));
        assert!(matches!(log.command(&[Bytes::from_static(b"x")]), Reply::Error(_)));
        assert!(matches!(log.command(&[Bytes::from_static(b"RESET")]), Reply::Status(_)));
        assert!(log.lock().is_empty());
    }
}
