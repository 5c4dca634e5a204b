//! Load generator for raftlock (and, for comparison, redis-server).
//!
//! Every client task owns one TCP connection and loops "acquire, then release"
//! for a fixed time after a short warm-up, timing each acquire+release pair.
//! It speaks RESP2 directly over a tokio `TcpStream` (a few lines of encoder
//! and reply parser below), so the generator costs little CPU and measures
//! exactly one round trip per command, no client-library machinery in between.
//!
//! Modes:
//! * `raftlock`: `LOCK.ACQUIRE key owner ttl` -> (integer) token,
//!   then `LOCK.RELEASE key owner token` -> (integer) 1.
//! * `redis`: `SET key owner NX PX ttl` -> OK, then the compare-and-delete
//!   script redis-py's `Lock` uses (`EVAL ... 1 key owner`) -> (integer) 1.
//! * `redis-evalsha`: the same, releasing with `EVALSHA` as redis-py does
//!   (after one `SCRIPT LOAD`).
//! * `raftlock-wait`: `LOCK.ACQUIRE key owner ttl WAIT ms` (`--wait-ms`): a
//!   held lock queues the client, which is answered when the lock is handed
//!   to it; then `LOCK.RELEASE`.
//!
//! With `--renew` each client renews its lease once between the acquire and
//! the release: `LOCK.RENEW key owner token ttl` -> (integer) ttl, and on Redis
//! the compare-and-`PEXPIRE` script Redlock clients extend a lock with
//! (`EVAL`/`EVALSHA ... 1 key owner ttl`) -> (integer) 1.
//!
//! A denied acquire (nil: another client holds the key, or a `WAIT` ran out)
//! counts as an attempt and the client retries at once; it is expected only
//! with `--keys shared`.
//! Any other reply that is not what the protocol promises is an error: errors
//! are counted, the first few are printed, and the process exits with status 1.
//!
//! Each scenario prints one line to stdout that starts with `RESULT`:
//!
//! ```text
//! RESULT mode=redis scenario=clients50-distinct clients=50 keys=distinct duration_s=10.000
//!        pairs=... pairs_per_s=... attempts=... attempts_per_s=... denied=...
//!        p50_ms=... p99_ms=... p999_ms=... max_ms=... acquire_p50_ms=... acquire_p99_ms=...
//!        acquire_mean_ms=... acquire_max_ms=... overtaken_max=... commands=...
//!        cmd_p50_ms=... cmd_p99_ms=... cmd_p999_ms=... cmd_max_ms=... errors=0
//! ```
//! (on one line). `cmd_*` is the latency of each command the clients sent
//! (every acquire attempt, renewal and release: sent to reply received);
//! `commands` counts them. `p*_ms`/`max_ms` are the latency of a granted pair: from
//! sending the acquire that was granted to receiving the release reply (the
//! renewal in between, with `--renew`). `acquire_*` is the
//! time to get the lock: from sending a client's first attempt to receiving the
//! grant, denied retries included (with no contention, the acquire's latency).
//! `overtaken_max` is fairness, whatever the disk's speed: the most grants to
//! other clients that fell inside one client's wait (between sending its first
//! attempt and receiving its grant). A first-come-first-served server keeps it
//! below the number of clients: each of the others is granted at most once
//! before a waiter that queued behind it; clients spinning on `SET NX` may be
//! passed over any number of times.
//! Only pairs and attempts that complete inside the measured window (after the
//! warm-up) count; `*_per_s` divide by its length.
//!
//! Run: `cargo bench --bench loadgen -- --port 6379 --mode raftlock --scenario all`
//! (`--scenario single|distinct|shared` runs one of the three), or, for one custom
//! scenario, `... --clients 8 --keys shared --duration-secs 5`.
//! `scripts/bench.sh` runs all three against raftlock and redis-server and prints
//! them side by side.

use std::io;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use clap::{Parser, ValueEnum};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The script redis-py's `Lock.release` runs (compare owner, then delete).
const REDIS_RELEASE_SCRIPT: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// The script Redlock clients (redsync, node-redlock) extend a lock with:
/// compare owner, then set the new time to live.
const REDIS_RENEW_SCRIPT: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('pexpire',KEYS[1],ARGV[2]) else return 0 end";

/// How many error descriptions are printed (all are counted).
const MAX_PRINTED_ERRORS: u64 = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// LOCK.ACQUIRE / LOCK.RELEASE with fencing tokens.
    Raftlock,
    /// SET NX PX / compare-and-delete EVAL.
    Redis,
    /// SET NX PX / compare-and-delete EVALSHA, as redis-py's Lock does (the
    /// script is loaded once with SCRIPT LOAD before the run).
    RedisEvalsha,
    /// LOCK.ACQUIRE ... WAIT (queued until granted) / LOCK.RELEASE.
    RaftlockWait,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Keys {
    /// Every client locks its own key: no contention.
    Distinct,
    /// All clients compete for one key: denied acquires are retried.
    Shared,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Raftlock => "raftlock",
            Mode::Redis => "redis",
            Mode::RedisEvalsha => "redis-evalsha",
            Mode::RaftlockWait => "raftlock-wait",
        }
    }
}

impl Keys {
    fn name(self) -> &'static str {
        match self {
            Keys::Distinct => "distinct",
            Keys::Shared => "shared",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// The three below in turn: single, distinct, shared.
    All,
    /// 1 client (`clients1`).
    Single,
    /// N clients on N distinct keys (`clientsN-distinct`; N = --clients, default 50).
    Distinct,
    /// N clients on one shared key (`clientsN-shared`; N = --clients, default 50).
    Shared,
    /// One scenario from --clients (default 1) and --keys.
    Custom,
}

#[derive(Parser, Debug)]
#[command(
    name = "loadgen",
    about = "acquire+release load generator for raftlock and redis-server"
)]
struct Args {
    /// Server address (IPv4/IPv6 literal or host name).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Server port. Without it the program only prints a note and exits 0, so that
    /// `cargo test --all-targets` (which runs this bench without arguments) passes.
    #[arg(long)]
    port: Option<u16>,
    /// Which lock protocol to speak.
    #[arg(long, value_enum, default_value_t = Mode::Raftlock)]
    mode: Mode,
    /// `all` runs the three standard scenarios; `custom` runs --clients/--keys.
    #[arg(long, value_enum, default_value_t = Scenario::Custom)]
    scenario: Scenario,
    /// Number of clients (connections). Custom: default 1. All: the "many" count, default 50.
    #[arg(long)]
    clients: Option<usize>,
    /// Key layout for a custom scenario.
    #[arg(long, value_enum, default_value_t = Keys::Distinct)]
    keys: Keys,
    /// Measured time per scenario, in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration_secs: f64,
    /// Unmeasured warm-up before each scenario, in seconds.
    #[arg(long, default_value_t = 1.0)]
    warmup_secs: f64,
    /// Pause between scenarios, in seconds (lets the server settle).
    #[arg(long, default_value_t = 1.0)]
    pause_secs: f64,
    /// Lease length requested by every acquire, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    ttl_ms: u64,
    /// `raftlock-wait` mode: the WAIT of every acquire, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    wait_ms: u64,
    /// Renew each lease once between its acquire and its release.
    #[arg(long)]
    renew: bool,
    /// Longest wait for any single reply (or connect) before it counts as an error, in seconds.
    #[arg(long, default_value_t = 10.0)]
    timeout_secs: f64,
    /// Key prefix; a per-run, per-scenario suffix is added so runs never collide.
    #[arg(long, default_value = "loadgen")]
    key_prefix: String,
    /// Runtime threads for the generator; 1 = a single-threaded runtime (leaves the
    /// other cores to the server).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Added to the RESULT line as `label=...` (for scripts that run several targets).
    #[arg(long, default_value = "-")]
    label: String,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

// ---------------------------------------------------------------------------
// RESP: encoder and reply parser
// ---------------------------------------------------------------------------

/// Appends a RESP array of bulk strings (a command) to `out`.
fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    /// `$-1`, `*-1` (RESP2) or `_` (RESP3).
    Nil,
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "+{s}"),
            Reply::Error(s) => write!(f, "-{s}"),
            Reply::Int(i) => write!(f, "(integer) {i}"),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Array(a) => write!(f, "(array of {})", a.len()),
            Reply::Nil => write!(f, "(nil)"),
        }
    }
}

fn protocol_error(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Finds the CRLF-terminated line starting at `pos`; returns (line, index after CRLF).
fn line_at(buf: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(pos..)?;
    let i = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..i], pos + i + 2))
}

fn parse_int(line: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol_error(format!("bad integer {:?}", String::from_utf8_lossy(line))))
}

/// Parses one reply starting at `pos`. `Ok(None)`: more bytes are needed.
fn parse_reply(buf: &[u8], pos: usize) -> io::Result<Option<(Reply, usize)>> {
    let Some((line, next)) = line_at(buf, pos) else {
        return Ok(None);
    };
    let Some((&kind, body)) = line.split_first() else {
        return Err(protocol_error("empty reply line"));
    };
    let text = || String::from_utf8_lossy(body).into_owned();
    match kind {
        b'+' => Ok(Some((Reply::Status(text()), next))),
        b'-' => Ok(Some((Reply::Error(text()), next))),
        b':' => Ok(Some((Reply::Int(parse_int(body)?), next))),
        b'_' => Ok(Some((Reply::Nil, next))),
        b'$' => {
            let len = parse_int(body)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            let end = next + len as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(protocol_error("bulk string not followed by CRLF"));
            }
            Ok(Some((Reply::Bulk(buf[next..end].to_vec()), end + 2)))
        }
        b'*' => {
            let n = parse_int(body)?;
            if n < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            let mut items = Vec::with_capacity(n.min(1024) as usize);
            let mut at = next;
            for _ in 0..n {
                match parse_reply(buf, at)? {
                    Some((r, after)) => {
                        items.push(r);
                        at = after;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), at)))
        }
        other => Err(protocol_error(format!(
            "unexpected reply type byte {:?}",
            other as char
        ))),
    }
}

/// One client connection: write a command, read exactly one reply.
struct Conn {
    stream: TcpStream,
    rbuf: BytesMut,
    timeout: Duration,
}

impl Conn {
    async fn connect(addr: &str, timeout: Duration) -> io::Result<Conn> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            rbuf: BytesMut::with_capacity(4096),
            timeout,
        })
    }

    /// Sends an already encoded command and waits (bounded) for its reply.
    async fn request(&mut self, encoded: &[u8]) -> io::Result<Reply> {
        self.request_within(encoded, Duration::ZERO).await
    }

    /// As `request`, allowing `extra` time beyond the usual bound (a blocking
    /// command's own wait).
    async fn request_within(&mut self, encoded: &[u8], extra: Duration) -> io::Result<Reply> {
        match tokio::time::timeout(self.timeout + extra, self.request_unbounded(encoded)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "reply timed out")),
        }
    }

    async fn request_unbounded(&mut self, encoded: &[u8]) -> io::Result<Reply> {
        self.stream.write_all(encoded).await?;
        loop {
            if let Some((reply, used)) = parse_reply(&self.rbuf, 0)? {
                self.rbuf.advance(used);
                return Ok(reply);
            }
            if self.stream.read_buf(&mut self.rbuf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
        }
    }

    async fn command(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let mut buf = Vec::new();
        encode_command(&mut buf, args);
        self.request(&buf).await
    }
}

// ---------------------------------------------------------------------------
// The lock protocol of each mode
// ---------------------------------------------------------------------------

/// Outcome of one acquire attempt.
enum Acquire {
    /// Granted; carries the raftlock token (0 for redis mode).
    Granted(i64),
    Denied,
}

/// Pre-encoded commands of one client (key and owner never change).
struct Protocol {
    mode: Mode,
    key: Vec<u8>,
    owner: Vec<u8>,
    acquire: Vec<u8>,
    /// redis mode only: the release never changes.
    release: Vec<u8>,
    /// redis mode only: the renewal never changes.
    renew: Vec<u8>,
    /// The time to live a renewal asks for.
    ttl: String,
    /// How long an acquire may block on the server (its WAIT).
    blocks_for: Duration,
}

impl Protocol {
    fn new(mode: Mode, key: String, owner: String, ttl_ms: u64, wait_ms: u64) -> Protocol {
        let ttl = ttl_ms.to_string();
        let (k, o) = (key.as_bytes(), owner.as_bytes());
        let mut acquire = Vec::new();
        let mut release = Vec::new();
        let mut renew = Vec::new();
        match mode {
            Mode::Raftlock => {
                encode_command(&mut acquire, &[b"LOCK.ACQUIRE", k, o, ttl.as_bytes()]);
            }
            Mode::RaftlockWait => {
                let wait = wait_ms.to_string();
                encode_command(&mut acquire, &[b"LOCK.ACQUIRE", k, o, ttl.as_bytes(), b"WAIT", wait.as_bytes()]);
            }
            Mode::Redis => {
                encode_command(&mut acquire, &[b"SET", k, o, b"NX", b"PX", ttl.as_bytes()]);
                encode_command(
                    &mut release,
                    &[b"EVAL", REDIS_RELEASE_SCRIPT.as_bytes(), b"1", k, o],
                );
                encode_command(&mut renew, &[b"EVAL", REDIS_RENEW_SCRIPT.as_bytes(), b"1", k, o, ttl.as_bytes()]);
            }
            Mode::RedisEvalsha => {
                let sha = raftlock::scripting::sha1hex(REDIS_RELEASE_SCRIPT.as_bytes());
                encode_command(&mut acquire, &[b"SET", k, o, b"NX", b"PX", ttl.as_bytes()]);
                encode_command(&mut release, &[b"EVALSHA", sha.as_bytes(), b"1", k, o]);
                let sha = raftlock::scripting::sha1hex(REDIS_RENEW_SCRIPT.as_bytes());
                encode_command(&mut renew, &[b"EVALSHA", sha.as_bytes(), b"1", k, o, ttl.as_bytes()]);
            }
        }
        Protocol {
            mode,
            key: key.into_bytes(),
            owner: owner.into_bytes(),
            acquire,
            release,
            renew,
            ttl,
            blocks_for: if mode == Mode::RaftlockWait { Duration::from_millis(wait_ms) } else { Duration::ZERO },
        }
    }

    /// Interprets an acquire reply; `Err` describes an unexpected reply.
    fn acquire_outcome(&self, reply: Reply) -> Result<Acquire, String> {
        match (self.mode, reply) {
            (_, Reply::Nil) => Ok(Acquire::Denied),
            (Mode::Raftlock | Mode::RaftlockWait, Reply::Int(token)) if token > 0 => Ok(Acquire::Granted(token)),
            (Mode::Redis | Mode::RedisEvalsha, Reply::Status(s)) if s == "OK" => Ok(Acquire::Granted(0)),
            (_, other) => Err(format!("acquire: unexpected reply {other}")),
        }
    }

    /// Renews the lease of `token`; `Err` describes an unexpected reply.
    async fn renew(&self, conn: &mut Conn, token: i64) -> io::Result<Result<(), String>> {
        let reply = match self.mode {
            Mode::Redis | Mode::RedisEvalsha => conn.request(&self.renew).await?,
            Mode::Raftlock | Mode::RaftlockWait => {
                let t = token.to_string();
                conn.command(&[b"LOCK.RENEW", &self.key, &self.owner, t.as_bytes(), self.ttl.as_bytes()])
                    .await?
            }
        };
        let expected = match self.mode {
            Mode::Redis | Mode::RedisEvalsha => 1,
            Mode::Raftlock | Mode::RaftlockWait => self.ttl.parse().unwrap_or(-1),
        };
        Ok(match reply {
            Reply::Int(n) if n == expected => Ok(()),
            other => Err(format!("renew: unexpected reply {other}")),
        })
    }

    async fn release(&self, conn: &mut Conn, token: i64) -> io::Result<Reply> {
        match self.mode {
            Mode::Redis | Mode::RedisEvalsha => conn.request(&self.release).await,
            Mode::Raftlock | Mode::RaftlockWait => {
                let t = token.to_string();
                conn.command(&[b"LOCK.RELEASE", &self.key, &self.owner, t.as_bytes()])
                    .await
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Clients and scenarios
// ---------------------------------------------------------------------------

#[derive(Default)]
struct ClientStats {
    /// Granted pair latencies (ns), pairs completed in the window.
    pair_ns: Vec<u64>,
    /// First attempt sent -> grant received (ns), for the same pairs.
    acquire_ns: Vec<u64>,
    /// Each command's latency (ns): every attempt, renewal and release
    /// answered in the window.
    command_ns: Vec<u64>,
    /// (first attempt sent, grant received) of the same pairs.
    waits: Vec<(Instant, Instant)>,
    /// When each grant of this client was received, the warm-up's and the
    /// run-out's included: a wait in the window may span them.
    grants: Vec<Instant>,
    attempts: u64,
    denied: u64,
    errors: u64,
}

/// The most grants in `grants` (every client's) that fall strictly inside one
/// of `waits`; a wait's own grant ends it, so it is not counted.
fn most_overtaken(mut grants: Vec<Instant>, waits: &[(Instant, Instant)]) -> usize {
    grants.sort_unstable();
    waits
        .iter()
        .map(|&(first, granted)| {
            let after_first = grants.partition_point(|&g| g <= first);
            let before_grant = grants.partition_point(|&g| g < granted);
            before_grant.saturating_sub(after_first)
        })
        .max()
        .unwrap_or(0)
}

struct Shared {
    addr: String,
    timeout: Duration,
    /// Renew each lease once before releasing it.
    renew: bool,
    errors_printed: AtomicU64,
}

impl Shared {
    fn report_error(&self, client: usize, what: &str) {
        let n = self.errors_printed.fetch_add(1, Ordering::Relaxed);
        if n < MAX_PRINTED_ERRORS {
            eprintln!("loadgen: client {client}: {what}");
        } else if n == MAX_PRINTED_ERRORS {
            eprintln!("loadgen: further errors are counted but not printed");
        }
    }
}

struct Window {
    measure_from: Instant,
    end: Instant,
}

impl Window {
    fn counts(&self, t: Instant) -> bool {
        t >= self.measure_from && t <= self.end
    }
}

async fn run_client(
    id: usize,
    mut conn: Option<Conn>,
    proto: Protocol,
    shared: Arc<Shared>,
    window: Arc<Window>,
) -> ClientStats {
    let mut st = ClientStats {
        pair_ns: Vec::with_capacity(1 << 16),
        acquire_ns: Vec::with_capacity(1 << 16),
        command_ns: Vec::with_capacity(1 << 16),
        ..Default::default()
    };
    let error = |st: &mut ClientStats, what: String| {
        st.errors += 1;
        shared.report_error(id, &what);
    };

    'pairs: while Instant::now() < window.end {
        // (Re)connect after an I/O error, waiting a little so a dead server
        // does not turn into a busy loop.
        if conn.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            match Conn::connect(&shared.addr, shared.timeout).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    error(&mut st, format!("reconnect: {e}"));
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };

        // Acquire, retrying while denied.
        let first_attempt = Instant::now();
        let (granted_at, acquired_at, token) = loop {
            let sent = Instant::now();
            let reply = match c.request_within(&proto.acquire, proto.blocks_for).await {
                Ok(r) => r,
                Err(e) => {
                    error(&mut st, format!("acquire: {e}"));
                    conn = None;
                    continue 'pairs;
                }
            };
            let done = Instant::now();
            if window.counts(done) {
                st.attempts += 1;
                st.command_ns.push((done - sent).as_nanos() as u64);
            }
            match proto.acquire_outcome(reply) {
                Ok(Acquire::Granted(token)) => {
                    st.grants.push(done);
                    break (sent, done, token);
                }
                Ok(Acquire::Denied) => {
                    if window.counts(done) {
                        st.denied += 1;
                    }
                    if done >= window.end {
                        break 'pairs;
                    }
                }
                Err(what) => {
                    error(&mut st, what);
                    continue 'pairs;
                }
            }
        };

        if shared.renew {
            let sent = Instant::now();
            match proto.renew(c, token).await {
                Ok(Ok(())) => {
                    let done = Instant::now();
                    if window.counts(done) {
                        st.command_ns.push((done - sent).as_nanos() as u64);
                    }
                }
                // Released below all the same.
                Ok(Err(what)) => error(&mut st, what),
                Err(e) => {
                    error(&mut st, format!("renew: {e}"));
                    conn = None;
                    continue 'pairs;
                }
            }
        }

        // Release (always, even past the end, so no lease is left behind).
        let sent = Instant::now();
        match proto.release(c, token).await {
            Ok(Reply::Int(1)) => {
                let done = Instant::now();
                if window.counts(done) {
                    st.command_ns.push((done - sent).as_nanos() as u64);
                    st.pair_ns.push((done - granted_at).as_nanos() as u64);
                    st.acquire_ns
                        .push((acquired_at - first_attempt).as_nanos() as u64);
                    st.waits.push((first_attempt, acquired_at));
                }
            }
            Ok(other) => error(&mut st, format!("release: unexpected reply {other}")),
            Err(e) => {
                error(&mut st, format!("release: {e}"));
                conn = None;
            }
        }
    }
    st
}

struct ScenarioSpec {
    name: String,
    clients: usize,
    keys: Keys,
}

/// Percentile (nearest rank) of sorted nanoseconds, in milliseconds.
fn pct_ms(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1e6
}

/// Runs one scenario, prints its RESULT line; returns its error count.
async fn run_scenario(args: &Args, spec: &ScenarioSpec, run_id: &str) -> Result<u64, String> {
    let addr = format!("{}:{}", args.host, args.port.unwrap_or_default());
    let timeout = Duration::from_secs_f64(args.timeout_secs);
    let shared = Arc::new(Shared {
        addr: addr.clone(),
        timeout,
        renew: args.renew,
        errors_printed: AtomicU64::new(0),
    });
    eprintln!(
        "loadgen: {} scenario {} ({} client(s), {} keys): {:.1} s warm-up + {:.1} s measured",
        args.mode.name(),
        spec.name,
        spec.clients,
        spec.keys.name(),
        args.warmup_secs,
        args.duration_secs
    );

    // Connect everybody first so connection setup is not measured.
    let mut conns = Vec::with_capacity(spec.clients);
    for i in 0..spec.clients {
        let c = Conn::connect(&addr, timeout)
            .await
            .map_err(|e| format!("client {i}: connect to {addr}: {e}"))?;
        conns.push(c);
    }

    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup_secs);
    let window = Arc::new(Window {
        measure_from,
        end: measure_from + Duration::from_secs_f64(args.duration_secs),
    });
    let mut tasks = Vec::with_capacity(spec.clients);
    for (i, c) in conns.into_iter().enumerate() {
        let key = match spec.keys {
            Keys::Distinct => format!("{}:{run_id}:{}:{i}", args.key_prefix, spec.name),
            Keys::Shared => format!("{}:{run_id}:{}:shared", args.key_prefix, spec.name),
        };
        let owner = format!("{run_id}-client-{i}");
        let proto = Protocol::new(args.mode, key, owner, args.ttl_ms, args.wait_ms);
        tasks.push(tokio::spawn(run_client(
            i,
            Some(c),
            proto,
            shared.clone(),
            window.clone(),
        )));
    }

    let mut pair_ns = Vec::new();
    let mut acquire_ns = Vec::new();
    let mut command_ns = Vec::new();
    let (mut waits, mut grants) = (Vec::new(), Vec::new());
    let (mut attempts, mut denied, mut errors) = (0u64, 0u64, 0u64);
    for t in tasks {
        let st = t.await.map_err(|e| format!("client task failed: {e}"))?;
        pair_ns.extend_from_slice(&st.pair_ns);
        acquire_ns.extend_from_slice(&st.acquire_ns);
        command_ns.extend_from_slice(&st.command_ns);
        waits.extend_from_slice(&st.waits);
        grants.extend_from_slice(&st.grants);
        attempts += st.attempts;
        denied += st.denied;
        errors += st.errors;
    }
    pair_ns.sort_unstable();
    acquire_ns.sort_unstable();
    command_ns.sort_unstable();
    let secs = args.duration_secs;
    let pairs = pair_ns.len() as u64;
    println!(
        "RESULT label={} mode={} scenario={} clients={} keys={} duration_s={:.3} pairs={} pairs_per_s={:.1} \
         attempts={} attempts_per_s={:.1} denied={} p50_ms={:.3} p99_ms={:.3} p999_ms={:.3} max_ms={:.3} \
         acquire_p50_ms={:.3} acquire_p99_ms={:.3} acquire_mean_ms={:.3} acquire_max_ms={:.3} overtaken_max={} commands={} cmd_p50_ms={:.3} \
         cmd_p99_ms={:.3} cmd_p999_ms={:.3} cmd_max_ms={:.3} errors={}",
        args.label,
        args.mode.name(),
        spec.name,
        spec.clients,
        spec.keys.name(),
        secs,
        pairs,
        pairs as f64 / secs,
        attempts,
        attempts as f64 / secs,
        denied,
        pct_ms(&pair_ns, 50.0),
        pct_ms(&pair_ns, 99.0),
        pct_ms(&pair_ns, 99.9),
        pair_ns.last().copied().unwrap_or(0) as f64 / 1e6,
        pct_ms(&acquire_ns, 50.0),
        pct_ms(&acquire_ns, 99.0),
        if acquire_ns.is_empty() { 0.0 } else { acquire_ns.iter().sum::<u64>() as f64 / acquire_ns.len() as f64 / 1e6 },
        acquire_ns.last().copied().unwrap_or(0) as f64 / 1e6,
        most_overtaken(grants, &waits),
        command_ns.len(),
        pct_ms(&command_ns, 50.0),
        pct_ms(&command_ns, 99.0),
        pct_ms(&command_ns, 99.9),
        command_ns.last().copied().unwrap_or(0) as f64 / 1e6,
        errors
    );
    Ok(errors)
}

/// One acquire+release on a fresh connection, so that a server that does not
/// speak the mode's commands fails fast with its reply instead of N error streams.
async fn preflight(args: &Args, run_id: &str) -> Result<(), String> {
    let addr = format!("{}:{}", args.host, args.port.unwrap_or_default());
    let timeout = Duration::from_secs_f64(args.timeout_secs);
    let mut c = Conn::connect(&addr, timeout)
        .await
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    match c.command(&[b"PING"]).await {
        Ok(Reply::Status(s)) if s == "PONG" => {}
        Ok(other) => return Err(format!("PING: unexpected reply {other}")),
        Err(e) => return Err(format!("PING: {e}")),
    }
    if args.mode == Mode::RedisEvalsha {
        for script in [REDIS_RELEASE_SCRIPT, REDIS_RENEW_SCRIPT] {
            let sha = raftlock::scripting::sha1hex(script.as_bytes());
            match c.command(&[b"SCRIPT", b"LOAD", script.as_bytes()]).await {
                Ok(Reply::Bulk(b)) if b == sha.as_bytes() => {}
                Ok(other) => return Err(format!("SCRIPT LOAD: unexpected reply {other}")),
                Err(e) => return Err(format!("SCRIPT LOAD: {e}")),
            }
        }
    }
    let proto = Protocol::new(
        args.mode,
        format!("{}:{run_id}:preflight", args.key_prefix),
        format!("{run_id}-preflight"),
        args.ttl_ms,
        args.wait_ms,
    );
    let reply = c
        .request(&proto.acquire)
        .await
        .map_err(|e| format!("preflight acquire: {e}"))?;
    let token = match proto.acquire_outcome(reply)? {
        Acquire::Granted(t) => t,
        Acquire::Denied => return Err("preflight acquire of a fresh key was denied".into()),
    };
    if args.renew {
        proto
            .renew(&mut c, token)
            .await
            .map_err(|e| format!("preflight renew: {e}"))?
            .map_err(|what| format!("preflight {what}"))?;
    }
    match proto.release(&mut c, token).await {
        Ok(Reply::Int(1)) => Ok(()),
        Ok(other) => Err(format!("preflight release: unexpected reply {other}")),
        Err(e) => Err(format!("preflight release: {e}")),
    }
}

async fn run(args: Args) -> ExitCode {
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    if let Err(e) = preflight(&args, &run_id).await {
        eprintln!("loadgen: {e}");
        return ExitCode::from(2);
    }
    let specs: Vec<ScenarioSpec> = match args.scenario {
        Scenario::All | Scenario::Single | Scenario::Distinct | Scenario::Shared => {
            let n = args.clients.unwrap_or(50);
            let single = ScenarioSpec {
                name: "clients1".into(),
                clients: 1,
                keys: Keys::Distinct,
            };
            let distinct = ScenarioSpec {
                name: format!("clients{n}-distinct"),
                clients: n,
                keys: Keys::Distinct,
            };
            let shared = ScenarioSpec {
                name: format!("clients{n}-shared"),
                clients: n,
                keys: Keys::Shared,
            };
            match args.scenario {
                Scenario::Single => vec![single],
                Scenario::Distinct => vec![distinct],
                Scenario::Shared => vec![shared],
                _ => vec![single, distinct, shared],
            }
        }
        Scenario::Custom => {
            let n = args.clients.unwrap_or(1);
            let keys = args.keys.name();
            vec![ScenarioSpec {
                name: format!("clients{n}-{keys}"),
                clients: n,
                keys: args.keys,
            }]
        }
    };

    let mut total_errors = 0;
    for (i, spec) in specs.iter().enumerate() {
        if i > 0 && args.pause_secs > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(args.pause_secs)).await;
        }
        match run_scenario(&args, spec, &run_id).await {
            Ok(errors) => total_errors += errors,
            Err(e) => {
                eprintln!("loadgen: scenario {}: {e}", spec.name);
                return ExitCode::from(2);
            }
        }
    }
    if total_errors > 0 {
        eprintln!("loadgen: {total_errors} unexpected replies or I/O errors");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.port.is_none() {
        eprintln!(
            "loadgen: no --port given, nothing to measure. Run it as \
             `cargo bench --bench loadgen -- --port PORT --mode raftlock|redis --scenario all` \
             (see --help), or scripts/bench.sh for the comparison with redis-server."
        );
        return ExitCode::SUCCESS;
    }
    let positive = |x: f64| x.is_finite() && x > 0.0;
    let not_negative = |x: f64| x.is_finite() && x >= 0.0;
    if args.clients == Some(0)
        || !positive(args.duration_secs)
        || !not_negative(args.warmup_secs)
        || !not_negative(args.pause_secs)
        || !positive(args.timeout_secs)
        || args.threads == 0
    {
        eprintln!(
            "loadgen: --clients and --threads must be at least 1, --duration-secs and \
             --timeout-secs positive, --warmup-secs and --pause-secs not negative"
        );
        return ExitCode::from(2);
    }
    let rt = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    };
    match rt {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => {
            eprintln!("loadgen: cannot start the runtime: {e}");
            ExitCode::from(2)
        }
    }
}
