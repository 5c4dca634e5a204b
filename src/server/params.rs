//! The standard Redis configuration parameters that mean nothing here
//! (encodings, lazy freeing, the event loop's tuning): `CONFIG SET` checks
//! a value as Redis 7.0 would (type, range, choices) and stores it, and
//! `CONFIG GET` shows it back, so that tools and test suites that tune them
//! run on. Changing one changes no behaviour. The parameters raftlock honours
//! (`maxmemory`, `timeout`, `notify-keyspace-events`, ...) live beside the
//! connection code that applies them; README lists both kinds.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// What values a parameter takes, as Redis checks them.
#[derive(Clone, Copy)]
enum Kind {
    Int { min: i64, max: i64 },
    Bool,
    Choice(&'static [&'static str]),
}

struct Param {
    name: &'static str,
    alias: Option<&'static str>,
    kind: Kind,
    /// Redis 7.0.15's value when started without a configuration file.
    default: &'static str,
}

const UNSIGNED: Kind = Kind::Int { min: 0, max: i64::MAX };
const INT: Kind = Kind::Int { min: i32::MIN as i64, max: i32::MAX as i64 };
const NON_NEGATIVE_INT: Kind = Kind::Int { min: 0, max: i32::MAX as i64 };

const fn p(name: &'static str, alias: Option<&'static str>, kind: Kind, default: &'static str) -> Param {
    Param { name, alias, kind, default }
}

static PARAMS: &[Param] = &[
    p("list-max-listpack-size", Some("list-max-ziplist-size"), INT, "-2"),
    p("list-compress-depth", None, NON_NEGATIVE_INT, "0"),
    p("hash-max-listpack-entries", Some("hash-max-ziplist-entries"), UNSIGNED, "512"),
    p("hash-max-listpack-value", Some("hash-max-ziplist-value"), UNSIGNED, "64"),
    p("set-max-intset-entries", None, UNSIGNED, "512"),
    p("zset-max-listpack-entries", Some("zset-max-ziplist-entries"), UNSIGNED, "128"),
    p("zset-max-listpack-value", Some("zset-max-ziplist-value"), UNSIGNED, "64"),
    p("stream-node-max-bytes", None, UNSIGNED, "4096"),
    p("stream-node-max-entries", None, Kind::Int { min: 0, max: i64::MAX }, "100"),
    p("hll-sparse-max-bytes", None, UNSIGNED, "3000"),
    p("lazyfree-lazy-eviction", None, Kind::Bool, "no"),
    p("lazyfree-lazy-expire", None, Kind::Bool, "no"),
    p("lazyfree-lazy-server-del", None, Kind::Bool, "no"),
    p("lazyfree-lazy-user-del", None, Kind::Bool, "no"),
    p("lazyfree-lazy-user-flush", None, Kind::Bool, "no"),
    p("replica-lazy-flush", Some("slave-lazy-flush"), Kind::Bool, "no"),
    p("activerehashing", None, Kind::Bool, "yes"),
    p("activedefrag", None, Kind::Bool, "no"),
    p("dynamic-hz", None, Kind::Bool, "yes"),
    p("hz", None, Kind::Int { min: 0, max: i32::MAX as i64 }, "10"),
    p("active-expire-effort", None, Kind::Int { min: 1, max: 10 }, "1"),
    p("maxmemory-samples", None, Kind::Int { min: 1, max: i32::MAX as i64 }, "5"),
    p("lfu-log-factor", None, NON_NEGATIVE_INT, "10"),
    p("lfu-decay-time", None, NON_NEGATIVE_INT, "1"),
    p("slowlog-log-slower-than", None, Kind::Int { min: -1, max: i64::MAX }, "10000"),
    p("slowlog-max-len", None, Kind::Int { min: 0, max: i64::MAX }, "128"),
    p("acllog-max-len", None, Kind::Int { min: 0, max: i64::MAX }, "128"),
    p("latency-monitor-threshold", None, Kind::Int { min: 0, max: i64::MAX }, "0"),
    p("latency-tracking", None, Kind::Bool, "yes"),
    p("lua-time-limit", Some("busy-reply-threshold"), Kind::Int { min: 0, max: i64::MAX }, "5000"),
    p("tcp-keepalive", None, NON_NEGATIVE_INT, "300"),
    p("loglevel", None, Kind::Choice(&["debug", "verbose", "notice", "warning", "nothing"]), "notice"),
    p("appendfilename", None, Kind::Choice(&[]), "appendonly.aof"),
    p("no-appendfsync-on-rewrite", None, Kind::Bool, "no"),
    p("stop-writes-on-bgsave-error", None, Kind::Bool, "yes"),
    p("rdbcompression", None, Kind::Bool, "yes"),
    p("rdbchecksum", None, Kind::Bool, "yes"),
    p("close-on-replica-write", None, Kind::Bool, "yes"),
];

/// The stored values of the parameters in `PARAMS`.
pub struct StoredParams {
    values: Mutex<BTreeMap<&'static str, String>>,
}

impl Default for StoredParams {
    fn default() -> Self {
        StoredParams { values: Mutex::new(PARAMS.iter().map(|p| (p.name, p.default.to_string())).collect()) }
    }
}

/// The parameter `name` (or its alias), case-insensitively.
fn find(name: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.name.eq_ignore_ascii_case(name) || p.alias.is_some_and(|a| a.eq_ignore_ascii_case(name)))
}

impl StoredParams {
    /// The canonical name of a stored parameter, if `name` is one.
    pub fn canonical(name: &str) -> Option<&'static str> {
        find(name).map(|p| p.name)
    }

    /// Every name (aliases too) with its value.
    pub fn all(&self) -> Vec<(&'static str, String)> {
        let values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for p in PARAMS {
            let value = values.get(p.name).cloned().unwrap_or_default();
            if let Some(alias) = p.alias {
                out.push((alias, value.clone()));
            }
            out.push((p.name, value));
        }
        out
    }

    /// The value `raw` as it would be stored for `name`, or Redis's reason
    /// for refusing it.
    pub fn check(name: &str, raw: &str) -> Result<String, String> {
        let p = find(name).ok_or_else(|| format!("Unknown option or number of arguments for CONFIG SET - '{name}'"))?;
        match p.kind {
            Kind::Int { min, max } => {
                let n: i64 = raw.parse().map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
                if n < min || n > max {
                    return Err(format!("argument must be between {min} and {max} inclusive"));
                }
                Ok(n.to_string())
            }
            Kind::Bool => match raw.to_ascii_lowercase().as_str() {
                "yes" => Ok("yes".into()),
                "no" => Ok("no".into()),
                _ => Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Choice(choices) if choices.is_empty() => Ok(raw.to_string()),
            Kind::Choice(choices) => {
                let lower = raw.to_ascii_lowercase();
                if choices.contains(&lower.as_str()) {
                    Ok(lower)
                } else {
                    Err(format!("argument(s) must be one of the following: {}", choices.join(", ")))
                }
            }
        }
    }

    /// Stores a value that [`StoredParams::check`] returned.
    pub fn set(&self, name: &str, value: String) {
        if let Some(p) = find(name) {
            self.values.lock().unwrap_or_else(|p| p.into_inner()).insert(p.name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_as_redis_checks_them() {
        assert_eq!(StoredParams::check("hash-max-listpack-entries", "64"), Ok("64".into()));
        assert_eq!(
            StoredParams::check("hash-max-listpack-entries", "-1"),
            Err("argument must be between 0 and 9223372036854775807 inclusive".into())
        );
        assert_eq!(StoredParams::check("list-max-ziplist-size", "1.5"), Err("argument couldn't be parsed into an integer".into()));
        assert_eq!(StoredParams::check("lazyfree-lazy-user-del", "NO"), Ok("no".into()));
        assert!(StoredParams::check("lazyfree-lazy-user-del", "maybe").is_err());
        assert!(StoredParams::check("no-such-parameter", "1").unwrap_err().starts_with("Unknown option"));
    }

    #[test]
    fn an_alias_and_its_name_share_one_value() {
        let params = StoredParams::default();
        params.set("list-max-ziplist-size", "128".into());
        let all = params.all();
        assert!(all.contains(&("list-max-listpack-size", "128".into())));
        assert!(all.contains(&("list-max-ziplist-size", "128".into())));
        assert_eq!(StoredParams::canonical("HASH-MAX-ZIPLIST-ENTRIES"), Some("hash-max-listpack-entries"));
    }
}
