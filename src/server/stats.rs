//! What `INFO commandstats` and `INFO errorstats` count: each command's
//! calls, time and refusals on this node, and the error replies it sent by
//! their code, as Redis counts them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::commands::{stats_row, stats_row_name, stats_rows, CommandSpec};

/// Most distinct error codes counted, as Redis's `ERRORSTATS_LIMIT`: a
/// client cannot grow the table without bound with made-up codes (a
/// script's `redis.error_reply`).
const ERROR_CODES: usize = 128;

#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    usec: AtomicU64,
    /// Refused before they ran (arity, ACL, out of memory, not
    /// authenticated): Redis's `rejected_calls`.
    rejected: AtomicU64,
    /// Ran and answered an error: `failed_calls`.
    failed: AtomicU64,
}

pub struct Stats {
    /// One per row of `commands::stats_row`: each command, then each of
    /// Redis's subcommands (`config|get`).
    commands: Vec<Counts>,
    errors: Mutex<BTreeMap<String, u64>>,
    total_errors: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            commands: (0..stats_rows()).map(|_| Counts::default()).collect(),
            errors: Mutex::default(),
            total_errors: AtomicU64::new(0),
        }
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Answered,
    /// Refused before it ran.
    Rejected,
    /// Ran, and answered an error.
    Failed,
}

impl Outcome {
    /// How a command that answered `error` ended: refused before it ran,
    /// or failed.
    pub fn of_error(error: &str) -> Outcome {
        if rejected(error) {
            Outcome::Rejected
        } else {
            Outcome::Failed
        }
    }
}

/// Whether an error reply means the command was refused before it ran.
pub fn rejected(error: &str) -> bool {
    ["NOPERM", "OOM", "NOAUTH", "ERR wrong number of arguments", "ERR unknown subcommand", "MISCONF", "BUSY"]
        .iter()
        .any(|p| error.starts_with(p))
}

impl Stats {
    /// A command of `spec` (`sub` its first argument) was answered after
    /// `usec` (0 when not timed: a blocking command's wait is not its
    /// time); counted as its subcommand (`config|get`) where Redis has one.
    pub fn command(&self, spec: &'static CommandSpec, sub: Option<&[u8]>, usec: u64, outcome: Outcome) {
        let Some(c) = stats_row(spec, sub).and_then(|row| self.commands.get(row)) else { return };
        match outcome {
            Outcome::Rejected => {
                c.rejected.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Outcome::Failed => {
                c.failed.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Answered => {}
        }
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.usec.fetch_add(usec, Ordering::Relaxed);
    }

    /// An error reply was sent: counted by its code (its first word, if
    /// it ends within 32 bytes, else `ERR`, as Redis counts: a script's
    /// error without a space can be megabytes long). A line break ends
    /// the word too (the reply goes out with spaces for them, as Redis's):
    /// a script's `{err='X\r\nrole:slave ...'}` does not add lines to INFO.
    pub fn error(&self, text: &str) {
        self.total_errors.fetch_add(1, Ordering::Relaxed);
        let head = &text.as_bytes()[..text.len().min(32)];
        let code = match head.iter().position(|b| matches!(b, b' ' | b'\r' | b'\n')) {
            Some(end) => &text[..end],
            None => "ERR",
        };
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = errors.get_mut(code) {
            *n += 1;
        } else if errors.len() < ERROR_CODES {
            errors.insert(code.to_string(), 1);
        }
    }

    pub fn total_errors(&self) -> u64 {
        self.total_errors.load(Ordering::Relaxed)
    }

    /// `cmdstat_<name>` lines' values, for the commands called so far.
    pub fn commandstats(&self) -> Vec<(&'static str, String)> {
        self.commands
            .iter()
            .enumerate()
            .filter_map(|(row, c)| {
                let name = stats_row_name(row)?;
                let calls = c.calls.load(Ordering::Relaxed);
                let usec = c.usec.load(Ordering::Relaxed);
                let rejected = c.rejected.load(Ordering::Relaxed);
                let failed = c.failed.load(Ordering::Relaxed);
                if calls + rejected == 0 {
                    return None;
                }
                let per_call = if calls == 0 { 0.0 } else { usec as f64 / calls as f64 };
                Some((
                    name,
                    format!("calls={calls},usec={usec},usec_per_call={per_call:.2},rejected_calls={rejected},failed_calls={failed}"),
                ))
            })
            .collect()
    }

    /// `errorstat_<code>` counts, by code.
    pub fn errorstats(&self) -> Vec<(String, u64)> {
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        errors.iter().map(|(code, n)| (code.clone(), *n)).collect()
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset(&self) {
        for c in &self.commands {
            for n in [&c.calls, &c.usec, &c.rejected, &c.failed] {
                n.store(0, Ordering::Relaxed);
            }
        }
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.total_errors.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::lookup;

    #[test]
    fn calls_refusals_and_failures_are_counted_apart() {
        let s = Stats::default();
        let get = lookup(b"get").unwrap();
        let argv = |words: &'static str| words.split(' ').nth(1).map(str::as_bytes);
        let outcome = Outcome::of_error;
        s.command(get, argv("GET k"), 10, Outcome::Answered);
        s.command(get, argv("GET k"), 30, Outcome::Answered);
        s.command(get, argv("GET k"), 5, outcome("WRONGTYPE Operation against a key holding the wrong kind of value"));
        s.command(get, argv("GET"), 0, outcome("ERR wrong number of arguments for 'get' command"));
        s.command(get, argv("GET k"), 0, outcome("NOPERM User u has no permissions to run the 'get' command"));
        assert_eq!(
            s.commandstats(),
            vec![("get", "calls=3,usec=45,usec_per_call=15.00,rejected_calls=2,failed_calls=1".to_string())]
        );
        s.reset();
        // A container's subcommands are counted apart, as Redis does; one
        // Redis does not have, and the bare container, as the container.
        let config = lookup(b"config").unwrap();
        s.command(config, argv("CONFIG GET maxmemory"), 4, Outcome::Answered);
        s.command(config, argv("config get x"), 2, Outcome::Answered);
        s.command(config, argv("CONFIG NOSUCH"), 0, outcome("ERR unknown subcommand 'NOSUCH'. Try CONFIG HELP."));
        let mut stats = s.commandstats();
        stats.sort();
        assert_eq!(
            stats,
            vec![
                ("config", "calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0".to_string()),
                ("config|get", "calls=2,usec=6,usec_per_call=3.00,rejected_calls=0,failed_calls=0".to_string()),
            ]
        );
        s.reset();
        assert!(s.commandstats().is_empty());
    }

    #[test]
    fn errors_are_counted_by_code_up_to_a_limit() {
        let s = Stats::default();
        s.error("ERR syntax error");
        s.error("ERR no such key");
        s.error("WRONGTYPE Operation against a key holding the wrong kind of value");
        // A line break ends the code: nothing a script raises adds INFO lines.
        s.error("X\r\nrole:slave\r\ny z");
        for i in 0..1000 {
            s.error(&format!("MADEUP{i} x"));
        }
        // No space near the start: counted as ERR, whatever its length.
        s.error(&"X".repeat(1 << 20));
        let stats = s.errorstats();
        assert_eq!(stats.len(), ERROR_CODES);
        assert!(stats.contains(&("ERR".to_string(), 3)) && stats.contains(&("WRONGTYPE".to_string(), 1)), "{stats:?}");
        assert!(stats.contains(&("X".to_string(), 1)), "{stats:?}");
        assert!(stats.iter().all(|(code, _)| code.len() <= 32 && !code.contains(['\r', '\n'])));
        assert_eq!(s.total_errors(), 1005);
    }
}
