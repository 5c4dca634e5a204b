//! The audit log (`--audit-log`): one JSON line per lease transition this
//! node's state machine applies, with the log index and log time of the entry.
//! It is evidence for the fault-injection harness (tests/chaos), which checks
//! grants against it; it is not read back by raftlock. Lines are written before
//! the replies of the entry go out; a node replays entries after a restart, so
//! a record may appear again.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use super::types::NodeId;
use crate::keyspace::{Event, LeaseEvent, LogTime, WaitStep};

pub struct AuditLog {
    node: NodeId,
    out: Mutex<BufWriter<File>>,
}

impl AuditLog {
    /// Opens `path` for appending and records this start.
    pub fn open(path: &Path, node: NodeId) -> std::io::Result<AuditLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let log = AuditLog { node, out: Mutex::new(BufWriter::new(file)) };
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let line = format!(
            "{{\"boot\":true,\"node\":{node},\"pid\":{},\"unix_ms\":{unix_ms}}}\n",
            std::process::id()
        );
        log.write(line.as_bytes());
        log.flush();
        Ok(log)
    }

    /// Buffers a record for each lease event of the entry at `index`.
    pub fn record(&self, index: u64, log_time: LogTime, events: &[Event]) {
        let mut lines = String::new();
        for event in events {
            let (ev, key, owner, token, ttl, exp) = match event {
                Event::Lease { kind, key, owner, token, ttl_ms, .. } => {
                    let (ev, ttl) = match kind {
                        LeaseEvent::Acquired => ("acquired", *ttl_ms),
                        LeaseEvent::Renewed { .. } => ("renewed", *ttl_ms),
                        LeaseEvent::Released => ("released", 0),
                        LeaseEvent::Expired => ("expired", 0),
                    };
                    let exp = if ttl > 0 { log_time.saturating_add(ttl) } else { 0 };
                    (ev, key, owner, *token, ttl, exp)
                }
                // A waiter's steps: `exp` of `queued` is its deadline.
                Event::Wait { key, owner, step, .. } => match step {
                    WaitStep::Queued { deadline, ttl_ms } => ("queued", key, owner, 0, *ttl_ms, *deadline),
                    WaitStep::Left => ("dequeued", key, owner, 0, 0, 0),
                    WaitStep::Granted { token } => ("handoff", key, owner, *token, 0, 0),
                    WaitStep::TimedOut => ("timedout", key, owner, 0, 0, 0),
                },
                _ => continue,
            };
            let _ = writeln!(
                lines,
                "{{\"node\":{},\"i\":{index},\"lt\":{log_time},\"ev\":\"{ev}\",\"key\":{},\"owner\":{},\"token\":{token},\"ttl\":{ttl},\"exp\":{exp}}}",
                self.node,
                json_string(key),
                json_string(owner),
            );
        }
        if !lines.is_empty() {
            self.write(lines.as_bytes());
        }
    }

    /// Hands buffered records to the OS (they survive a kill of the process).
    pub fn flush(&self) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = out.flush() {
            tracing::warn!("audit log: {e}");
        }
    }

    fn write(&self, bytes: &[u8]) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = out.write_all(bytes) {
            tracing::warn!("audit log: {e}");
        }
    }
}

/// `bytes` as a JSON string (invalid UTF-8 replaced).
fn json_string(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn records_lease_events_as_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, 2).unwrap();
        let lease = |kind, ttl_ms| Event::Lease {
            kind,
            key: Bytes::from("k\"1"),
            owner: Bytes::from("o\n"),
            token: 7,
            ttl_ms,
            held_ms: 0,
        };
        let events = [
            lease(LeaseEvent::Acquired, 500),
            Event::Key { class: 'g', name: "del", key: Bytes::from("k") },
            lease(LeaseEvent::Released, 500),
        ];
        log.record(9, 1000, &events);
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("{\"boot\":true,\"node\":2,"));
        assert_eq!(
            lines[1],
            r#"{"node":2,"i":9,"lt":1000,"ev":"acquired","key":"k\"1","owner":"o\u000a","token":7,"ttl":500,"exp":1500}"#
        );
        assert_eq!(
            lines[2],
            r#"{"node":2,"i":9,"lt":1000,"ev":"released","key":"k\"1","owner":"o\u000a","token":7,"ttl":0,"exp":0}"#
        );
    }

    #[test]
    fn records_the_steps_of_waiters() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, 1).unwrap();
        let client = crate::keyspace::ClientId { node: 1, boot: 1, conn: 1 };
        let wait = |step| Event::Wait { client, seq: 1, key: Bytes::from("k"), owner: Bytes::from("w"), step, waited_ms: 5 };
        let steps = [
            WaitStep::Queued { deadline: 900, ttl_ms: 300 },
            WaitStep::Granted { token: 12 },
            WaitStep::TimedOut,
            WaitStep::Left,
        ];
        log.record(12, 800, &steps.map(wait));
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let evs: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            evs,
            [
                r#"{"node":1,"i":12,"lt":800,"ev":"queued","key":"k","owner":"w","token":0,"ttl":300,"exp":900}"#,
                r#"{"node":1,"i":12,"lt":800,"ev":"handoff","key":"k","owner":"w","token":12,"ttl":0,"exp":0}"#,
                r#"{"node":1,"i":12,"lt":800,"ev":"timedout","key":"k","owner":"w","token":0,"ttl":0,"exp":0}"#,
                r#"{"node":1,"i":12,"lt":800,"ev":"dequeued","key":"k","owner":"w","token":0,"ttl":0,"exp":0}"#,
            ]
        );
    }
}
