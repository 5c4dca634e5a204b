//! `LATENCY`: this node's latency monitor and its per-command latency
//! histograms, as Redis 7.0 keeps them.
//!
//! - The monitor (`latency-monitor-threshold` ms, 0 by default: off)
//!   records each command that took at least that long as an event,
//!   `fast-command` for commands flagged `fast` and `command` for the
//!   others: per event the worst latency of each second, the last 160
//!   seconds that had one, and the worst of all time.
//! - The histograms (`latency-tracking`, on by default) count every
//!   command's latency in power-of-two buckets of nanoseconds from 1,024,
//!   reported cumulatively under the bounds Redis's HdrHistogram gives them
//!   (1, 2, 4, 8, 16, 33, 66 ... µs).
//!
//! A command's time is measured as `SLOWLOG` measures it (`slowlog`): from
//! when its connection takes it to when its reply is ready, a write's Raft
//! round included; blocking commands and `EXEC` are not timed. Commands with
//! subcommands are counted under the command's name (`config`), where Redis
//! counts each subcommand (`config|get`).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use crate::commands::{stats_row, stats_row_name, stats_rows, stats_rows_named, CommandSpec};
use crate::protocol::Reply;

/// Seconds with a sample kept per event (Redis's `LATENCY_TS_LEN`).
const SERIES_LEN: usize = 160;
/// Histogram buckets: up to 1,024 ns << 30 (about 18 minutes).
const BUCKETS: usize = 31;

/// One event's samples: (Unix second, worst ms in it), oldest first.
#[derive(Default)]
struct Series {
    samples: VecDeque<(i64, u64)>,
    max: u64,
}

struct Histogram {
    calls: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

pub struct Latency {
    /// `latency-monitor-threshold`, ms; 0: the monitor is off.
    threshold_ms: AtomicU64,
    /// `latency-tracking`.
    tracking: AtomicBool,
    events: Mutex<BTreeMap<&'static str, Series>>,
    /// One per row of `commands::stats_row`: each command, then each of
    /// Redis's subcommands (`config|get`).
    histograms: Vec<Histogram>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            threshold_ms: AtomicU64::new(0),
            tracking: AtomicBool::new(true),
            events: Mutex::new(BTreeMap::new()),
            histograms: (0..stats_rows())
                .map(|_| Histogram { calls: AtomicU64::new(0), buckets: std::array::from_fn(|_| AtomicU64::new(0)) })
                .collect(),
        }
    }
}

/// The bucket of a latency of `nanos`: the first whose bound is not below it.
fn bucket(nanos: u64) -> usize {
    (0..BUCKETS).find(|&k| nanos < upper_nanos(k)).unwrap_or(BUCKETS - 1)
}

/// The highest latency HdrHistogram (2 significant digits) counts at
/// reporting level `1024 << k` ns: the level plus its unit there, less one.
fn upper_nanos(k: usize) -> u64 {
    let level = 1024u64 << k;
    level + level / 128
}

/// The unix time now, in seconds.
fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

impl Latency {
    /// `CONFIG RESETSTAT`: the histograms start again (the latency events
    /// stay, as in Redis, which clears them with `LATENCY RESET`).
    pub fn reset_histograms(&self) {
        for h in &self.histograms {
            h.calls.store(0, Ordering::Relaxed);
            for b in &h.buckets {
                b.store(0, Ordering::Relaxed);
            }
        }
    }

    /// `CONFIG SET` of `latency-monitor-threshold` or `latency-tracking`
    /// (values already checked).
    pub fn configure(&self, name: &str, value: &str) {
        match name {
            "latency-monitor-threshold" => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.threshold_ms.store(ms, Ordering::Relaxed);
                }
            }
            "latency-tracking" => self.tracking.store(value.eq_ignore_ascii_case("yes"), Ordering::Relaxed),
            _ => {}
        }
    }

    /// Whether commands need timing for either.
    pub fn wanted(&self) -> bool {
        self.tracking.load(Ordering::Relaxed) || self.threshold_ms.load(Ordering::Relaxed) > 0
    }

    /// A command of `spec` (`sub` its first argument) took `nanos`.
    pub fn record(&self, spec: &'static CommandSpec, sub: Option<&[u8]>, nanos: u64) {
        if self.tracking.load(Ordering::Relaxed) {
            if let Some(h) = stats_row(spec, sub).and_then(|row| self.histograms.get(row)) {
                h.calls.fetch_add(1, Ordering::Relaxed);
                h.buckets[bucket(nanos)].fetch_add(1, Ordering::Relaxed);
            }
        }
        let threshold = self.threshold_ms.load(Ordering::Relaxed);
        let ms = nanos / 1_000_000;
        if threshold > 0 && ms >= threshold {
            let event = if spec.flags.contains(&"fast") { "fast-command" } else { "command" };
            self.add_sample(event, ms, unix_now());
        }
    }

    fn add_sample(&self, event: &'static str, ms: u64, now: i64) {
        let mut events = self.lock();
        let series = events.entry(event).or_default();
        series.max = series.max.max(ms);
        match series.samples.back_mut() {
            Some((second, worst)) if *second == now => *worst = (*worst).max(ms),
            _ => {
                if series.samples.len() == SERIES_LEN {
                    series.samples.pop_front();
                }
                series.samples.push_back((now, ms));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Series>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `LATENCY ...`; `args` after `LATENCY`.
    pub fn command(&self, args: &[Bytes]) -> Reply {
        let sub = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let event = || String::from_utf8_lossy(&args[1]).into_owned();
        match (sub.as_str(), args.len()) {
            ("LATEST", 1) => Reply::Array(
                self.lock()
                    .iter()
                    .filter_map(|(name, s)| {
                        let (second, ms) = *s.samples.back()?;
                        Some(Reply::Array(vec![Reply::text(name), Reply::Int(second), Reply::Int(ms as i64), Reply::Int(s.max as i64)]))
                    })
                    .collect(),
            ),
            ("HISTORY", 2) => Reply::Array(match self.lock().get(event().as_str()) {
                None => Vec::new(),
                Some(s) => s
                    .samples
                    .iter()
                    .map(|&(second, ms)| Reply::Array(vec![Reply::Int(second), Reply::Int(ms as i64)]))
                    .collect(),
            }),
            ("GRAPH", 2) => {
                let name = event();
                match self.lock().get(name.as_str()) {
                    Some(s) if !s.samples.is_empty() => Reply::Verbatim(graph(&name, s, unix_now())),
                    _ => Reply::Error(format!("ERR No samples available for event '{name}'")),
                }
            }
            ("DOCTOR", 1) => Reply::Verbatim(self.doctor()),
            ("RESET", _) => {
                let mut events = self.lock();
                let reset = if args.len() == 1 {
                    let n = events.len();
                    events.clear();
                    n
                } else {
                    args[1..].iter().filter(|e| events.remove(String::from_utf8_lossy(e).as_ref()).is_some()).count()
                };
                Reply::Int(reset as i64)
            }
            ("HISTOGRAM", _) => {
                let rows: Vec<usize> = if args.len() == 1 {
                    (0..self.histograms.len()).collect()
                } else {
                    args[1..].iter().flat_map(|name| stats_rows_named(name)).collect()
                };
                Reply::Map(
                    rows.into_iter()
                        .filter_map(|row| {
                            let (h, name) = (self.histograms.get(row)?, stats_row_name(row)?);
                            let calls = h.calls.load(Ordering::Relaxed);
                            (calls > 0).then(|| (Reply::text(name), cumulative(h, calls)))
                        })
                        .collect(),
                )
            }
            ("HELP", 1) => Reply::Array(
                [
                    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "DOCTOR",
                    "    Return a human readable latency analysis report.",
                    "GRAPH <event>",
                    "    Return an ASCII latency graph for the <event> class.",
                    "HISTORY <event>",
                    "    Return time-latency samples for the <event> class.",
                    "LATEST",
                    "    Return the latest latency samples for all events.",
                    "RESET [<event> ...]",
                    "    Reset latency data of one or more <event> classes.",
                    "    (default: reset all data for all event classes)",
                    "HISTOGRAM [COMMAND ...]",
                    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
                    "    If no commands are specified then all histograms are replied.",
                    "HELP",
                    "    Prints this help.",
                ]
                .iter()
                .map(|l| Reply::Status(l.to_string()))
                .collect(),
            ),
            ("LATEST" | "HISTORY" | "GRAPH" | "DOCTOR" | "HELP", _) => {
                Reply::Error(format!("ERR wrong number of arguments for 'latency|{}' command", sub.to_ascii_lowercase()))
            }
            _ => Reply::Error(format!("ERR unknown subcommand '{}'. Try LATENCY HELP.", String::from_utf8_lossy(&args[0]))),
        }
    }

    /// `LATENCY DOCTOR`: Redis's report, for the events this node keeps.
    fn doctor(&self) -> String {
        if self.threshold_ms.load(Ordering::Relaxed) == 0 {
            return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".into();
        }
        let events = self.lock();
        if events.values().all(|s| s.samples.is_empty()) {
            return "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n".into();
        }
        let mut report = String::from("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n");
        for (i, (name, s)) in events.iter().filter(|(_, s)| !s.samples.is_empty()).enumerate() {
            let n = s.samples.len() as u64;
            let avg = s.samples.iter().map(|&(_, ms)| ms).sum::<u64>() / n;
            let deviation = s.samples.iter().map(|&(_, ms)| ms.abs_diff(avg)).sum::<u64>() / n;
            let (first, last) = (s.samples.front().map_or(0, |f| f.0), s.samples.back().map_or(0, |l| l.0));
            let period = if n > 1 { (last - first) as f64 / (n - 1) as f64 } else { (unix_now() - first).max(1) as f64 };
            let _ = writeln!(
                report,
                "{}. {name}: {n} latency spikes (average {avg}ms, mean deviation {deviation}ms, period {period:.2} sec). Worst all time event {}ms.",
                i + 1,
                s.max
            );
        }
        report.push_str("\nI have a few advices for you:\n\n");
        report.push_str("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n");
        report.push_str("- Here a command's time includes its Raft round (replication and the log's fsync): see RAFT.INFO and the raftlock_* metrics for the log's and the peers' latency.\n");
        report
    }
}

impl Latency {
    /// INFO's `latencystats`: per command that ran, the 50th, 99th and
    /// 99.9th percentiles in µs, each the bound of the power-of-two bucket
    /// it falls in (Redis's HdrHistogram is finer: two significant digits).
    pub fn percentiles(&self) -> Vec<(&'static str, String)> {
        self.histograms
            .iter()
            .enumerate()
            .filter_map(|(row, h)| {
                let name = stats_row_name(row)?;
                let calls = h.calls.load(Ordering::Relaxed);
                if calls == 0 {
                    return None;
                }
                let at = |p: f64| {
                    let rank = ((p / 100.0) * calls as f64).ceil().max(1.0) as u64;
                    let mut running = 0;
                    for (k, b) in h.buckets.iter().enumerate() {
                        running += b.load(Ordering::Relaxed);
                        if running >= rank {
                            return (upper_nanos(k) - 1) as f64 / 1000.0;
                        }
                    }
                    (upper_nanos(BUCKETS - 1) - 1) as f64 / 1000.0
                };
                Some((name, format!("p50={:.3},p99={:.3},p99.9={:.3}", at(50.0), at(99.0), at(99.9))))
            })
            .collect()
    }
}

/// `histogram_usec`: for each bucket that holds a command, its bound in µs
/// and the calls at or below it.
fn cumulative(h: &Histogram, calls: u64) -> Reply {
    let mut running = 0;
    let mut points = Vec::new();
    for (k, b) in h.buckets.iter().enumerate() {
        let n = b.load(Ordering::Relaxed);
        if n > 0 {
            running += n;
            points.push((Reply::Int(((upper_nanos(k) - 1) / 1000) as i64), Reply::Int(running as i64)));
        }
    }
    Reply::Map(vec![(Reply::text("calls"), Reply::Int(calls as i64)), (Reply::text("histogram_usec"), Reply::Map(points))])
}

/// `LATENCY GRAPH`: the header Redis writes, then one column per sample
/// (oldest first), its height scaled between the lowest and the highest,
/// and under each how long ago it was.
fn graph(name: &str, s: &Series, now: i64) -> String {
    let high = s.samples.iter().map(|&(_, ms)| ms).max().unwrap_or(0);
    let low = s.samples.iter().map(|&(_, ms)| ms).min().unwrap_or(0);
    let mut out = format!("{name} - high {high} ms, low {low} ms (all time high {} ms)\n{}\n", s.max, "-".repeat(80));
    const ROWS: u64 = 4;
    for row in (0..ROWS).rev() {
        let line: String = s
            .samples
            .iter()
            .map(|&(_, ms)| {
                let height = if high == low { ROWS } else { 1 + (ms - low) * (ROWS - 1) / (high - low) };
                if height > row { '#' } else { ' ' }
            })
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let ago: Vec<String> = s.samples.iter().map(|&(second, _)| age(now - second)).collect();
    let width = ago.iter().map(String::len).max().unwrap_or(0);
    for i in 0..width {
        let line: String = ago.iter().map(|a| a.chars().nth(i).unwrap_or(' ')).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `12s`, `3m`, `2h`, `1d`: how long ago, in Redis's graph's units.
fn age(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86399 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn spec(name: &str) -> &'static CommandSpec {
        crate::commands::lookup(name.as_bytes()).unwrap()
    }

    #[test]
    fn buckets_are_reported_under_redis_s_bounds() {
        // The bounds Redis 7.0 replies: 1, 2, 4, 8, 16, 33, 66, 132 ... µs,
        // and 33816 at 1024 << 15 ns.
        let bounds: Vec<u64> = (0..8).map(|k| (upper_nanos(k) - 1) / 1000).collect();
        assert_eq!(bounds, [1, 2, 4, 8, 16, 33, 66, 132]);
        assert_eq!((upper_nanos(15) - 1) / 1000, 33816);
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(1031), 0);
        assert_eq!(bucket(1032), 1);
        assert_eq!(bucket(8_000), 3);
        assert_eq!(bucket(20_000_000), 15);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        let l = Latency::default();
        for nanos in [500, 900, 8_000, 20_000_000] {
            l.record(spec("ping"), None, nanos);
        }
        let Reply::Map(by_command) = l.command(&args(&["HISTOGRAM", "ping", "nosuch", "get"])) else { panic!() };
        assert_eq!(by_command.len(), 1, "only commands that ran");
        let Reply::Map(fields) = &by_command[0].1 else { panic!() };
        assert!(matches!(fields[0].1, Reply::Int(4)));
        let Reply::Map(points) = &fields[1].1 else { panic!() };
        let points: Vec<(i64, i64)> = points
            .iter()
            .map(|(a, b)| match (a, b) {
                (Reply::Int(a), Reply::Int(b)) => (*a, *b),
                _ => panic!(),
            })
            .collect();
        assert_eq!(points, [(1, 2), (8, 3), (33816, 4)]);
        let stats = l.percentiles();
        assert_eq!(stats, [("ping", "p50=1.031,p99=33816.575,p99.9=33816.575".to_string())]);
        l.configure("latency-tracking", "no");
        l.record(spec("ping"), None, 500);
        let Reply::Map(by_command) = l.command(&args(&["HISTOGRAM"])) else { panic!() };
        let Reply::Map(fields) = &by_command[0].1 else { panic!() };
        assert!(matches!(fields[0].1, Reply::Int(4)), "not counted while tracking is off");
    }

    #[test]
    fn subcommands_have_histograms_of_their_own() {
        let l = Latency::default();
        l.record(spec("config"), Some(b"GET"), 500);
        l.record(spec("config"), Some(b"set"), 500);
        l.record(spec("get"), Some(b"k"), 500);
        let names = |reply: Reply| match reply {
            Reply::Map(m) => m.into_iter().map(|(k, _)| format!("{k:?}")).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        let by_container = names(l.command(&args(&["HISTOGRAM", "config"])));
        assert_eq!(by_container.len(), 2, "{by_container:?}");
        assert!(by_container.iter().any(|n| n.contains("config|get")) && by_container.iter().any(|n| n.contains("config|set")));
        let one = names(l.command(&args(&["HISTOGRAM", "CONFIG|GET"])));
        assert!(one.len() == 1 && one[0].contains("config|get"), "{one:?}");
        assert_eq!(names(l.command(&args(&["HISTOGRAM"]))).len(), 3);
        let mut stats: Vec<&str> = l.percentiles().into_iter().map(|(name, _)| name).collect();
        stats.sort();
        assert_eq!(stats, ["config|get", "config|set", "get"]);
    }

    #[test]
    fn the_monitor_keeps_each_second_s_worst_and_the_worst_of_all() {
        let l = Latency::default();
        l.record(spec("set"), None, 50_000_000);
        assert!(matches!(l.command(&args(&["LATEST"])), Reply::Array(a) if a.is_empty()), "off by default");
        l.configure("latency-monitor-threshold", "10");
        l.record(spec("get"), None, 9_999_999);
        l.add_sample("command", 30, 100);
        l.add_sample("command", 20, 100);
        l.add_sample("command", 25, 101);
        l.add_sample("fast-command", 12, 101);
        let Reply::Array(history) = l.command(&args(&["HISTORY", "command"])) else { panic!() };
        assert_eq!(history.len(), 2, "one sample per second, its worst");
        assert!(matches!(&history[0], Reply::Array(s) if matches!(s[..], [Reply::Int(100), Reply::Int(30)])));
        let Reply::Array(latest) = l.command(&args(&["LATEST"])) else { panic!() };
        assert_eq!(latest.len(), 2);
        assert!(matches!(&latest[0], Reply::Array(e) if matches!(e[1..], [Reply::Int(101), Reply::Int(25), Reply::Int(30)])));
        for second in 0..200 {
            l.add_sample("command", 15, 1000 + second);
        }
        let Reply::Array(history) = l.command(&args(&["HISTORY", "command"])) else { panic!() };
        assert_eq!(history.len(), SERIES_LEN);
        assert!(matches!(l.command(&args(&["GRAPH", "command"])), Reply::Verbatim(g) if g.starts_with("command - high 15 ms, low 15 ms (all time high 30 ms)\n")));
        assert!(matches!(l.command(&args(&["DOCTOR"])), Reply::Verbatim(d) if d.contains("1. command: 160 latency spikes") && d.contains("Worst all time event 30ms")));
        assert!(matches!(l.command(&args(&["RESET", "command", "nosuch"])), Reply::Int(1)));
        assert!(matches!(l.command(&args(&["RESET"])), Reply::Int(1)));
        assert!(matches!(l.command(&args(&["GRAPH", "command"])), Reply::Error(e) if e == "ERR No samples available for event 'command'"));
    }
}
