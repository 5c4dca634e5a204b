//! Shared helpers for the integration tests: start the real `raftlock` binary on free
//! loopback ports with its own temporary data directory, connect to it with the
//! `redis` crate or with a raw TCP socket, kill it with SIGKILL and restart it.
//!
//! Every wait here is bounded; nothing binds anything but 127.0.0.1.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

/// How long a freshly started (or restarted) node may take to accept a write.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Read/write timeout on every client socket, so that no test can hang forever.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Generous bound for "this notification / expiry happens soon".
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// One running raftlock node (a one-node cluster) owned by a test.
pub struct TestServer {
    pub port: u16,
    pub peer_port: u16,
    pub metrics_port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    starts: u32,
    env: Vec<(String, String)>,
}

/// Find `n` distinct free TCP ports on 127.0.0.1 (all listeners are held until the
/// last one is picked, so the ports are distinct).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

impl TestServer {
    /// Start a fresh node and wait until it accepts a write.
    pub fn start() -> TestServer {
        Self::start_with_env(&[])
    }

    /// Like `start`, with extra environment variables for the server process
    /// (e.g. `RAFTLOCK_SNAPSHOT_LOGS`); they are kept for restarts.
    pub fn start_with_env(env: &[(&str, &str)]) -> TestServer {
        // A port picked by binding :0 can in rare cases be taken by someone else
        // before the server binds it; retry a couple of times with new ports then.
        let mut last_logs = String::new();
        for _attempt in 0..3 {
            let ports = free_ports(3);
            let dir = tempfile::Builder::new()
                .prefix("raftlock-test-")
                .tempdir()
                .expect("tempdir");
            let mut s = TestServer {
                port: ports[0],
                peer_port: ports[1],
                metrics_port: ports[2],
                dir,
                child: None,
                starts: 0,
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            };
            s.spawn();
            match s.wait_ready(READY_TIMEOUT) {
                Ok(()) => return s,
                Err(why) => {
                    let logs = s.logs();
                    let port_clash = logs.contains("Address already in use")
                        || logs.contains("AddrInUse")
                        || logs.contains("address already in use");
                    last_logs = format!("{why}\n--- server log ---\n{logs}");
                    s.kill9();
                    if !port_clash {
                        break;
                    }
                }
            }
        }
        panic!("raftlock did not become ready: {last_logs}");
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("raftlock.log")
    }

    /// The server's URL; with the password when it requires one
    /// (`RAFTLOCK_REQUIREPASS`, letters and digits only), so `client()`
    /// and readiness checks authenticate.
    pub fn url(&self) -> String {
        match self.env.iter().find(|(k, _)| k == "RAFTLOCK_REQUIREPASS") {
            Some((_, pass)) if !pass.is_empty() => format!("redis://:{pass}@127.0.0.1:{}/", self.port),
            _ => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "server already running");
        self.starts += 1;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open log file");
        writeln!(&log, "===== raftlock start #{} =====", self.starts).ok();
        let log2 = log.try_clone().expect("clone log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_raftlock"));
        // Do not let a developer's environment change the configuration under test.
        for (k, _) in std::env::vars() {
            if k.starts_with("RAFTLOCK_") {
                cmd.env_remove(k);
            }
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.arg("--bind")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--peer-port")
            .arg(self.peer_port.to_string())
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{}", self.metrics_port))
            .arg("--node-id")
            .arg("1")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        let child = cmd.spawn().expect("spawn raftlock binary");
        self.child = Some(child);
    }

    /// Wait (bounded) until `SET __ready 1` replies OK, then delete `__ready` so
    /// tests see an empty keyspace.
    fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut last_err = String::from("never connected");
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("raftlock exited early with {status}"));
                }
            }
            match self.try_ready() {
                Ok(()) => return Ok(()),
                Err(e) => last_err = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "not ready within {timeout:?}; last error: {last_err}"
        ))
    }

    fn try_ready(&self) -> Result<(), String> {
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        let mut con = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        con.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        con.set_write_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let v: Value = redis::cmd("SET")
            .arg("__ready")
            .arg("1")
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        if v != Value::Okay {
            return Err(format!("SET __ready 1 replied {v:?}"));
        }
        let _: Value = redis::cmd("DEL")
            .arg("__ready")
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// A new synchronous RESP2 connection with bounded socket timeouts.
    pub fn client(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).expect("client");
        let con = client
            .get_connection_with_timeout(IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect to raftlock: {e}\n{}", self.logs()));
        con.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        con.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        con
    }

    /// A new synchronous connection that speaks RESP3 (the crate sends `HELLO 3`).
    pub fn client_resp3(&self) -> redis::Connection {
        let client = redis::Client::open(format!("{}?protocol=resp3", self.url())).expect("client");
        let con = client
            .get_connection_with_timeout(IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect (resp3) to raftlock: {e}\n{}", self.logs()));
        con.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        con.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        con
    }

    /// A new multiplexed async connection (needs a tokio runtime).
    pub async fn async_client(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(self.url()).expect("client");
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(IO_TIMEOUT))
            .set_response_timeout(Some(IO_TIMEOUT));
        client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .unwrap_or_else(|e| panic!("async connect to raftlock: {e}\n{}", self.logs()))
    }

    /// A raw TCP connection for protocol-level tests.
    pub fn raw(&self) -> RawConn {
        RawConn::connect(&self.addr())
    }

    /// SIGKILL the process (no clean shutdown) and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill(); // SIGKILL on Unix
            let _ = child.wait();
        }
    }

    /// Start the process again with the same ports and data directory, and wait until
    /// it accepts a write.
    pub fn restart(&mut self) {
        self.kill9();
        // The old process's listening sockets are gone once it is reaped, but give
        // the port a few tries in case the OS is slow to release it.
        let mut last = String::new();
        for _ in 0..3 {
            self.spawn();
            match self.wait_ready(READY_TIMEOUT) {
                Ok(()) => return,
                Err(e) => {
                    last = e;
                    self.kill9();
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        panic!(
            "raftlock did not become ready after restart: {last}\n--- server log ---\n{}",
            self.logs()
        );
    }

    /// Sets an environment variable of the server process for later restarts.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    /// `kill -9`, then start again on the same data directory without waiting
    /// and without writing anything (a ready check would write).
    pub fn restart_quietly(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Send SIGTERM and wait (bounded) for the process to exit; returns its status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("server not running");
        let ok = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "could not send SIGTERM");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "raftlock did not exit within 15 s of SIGTERM\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Resident set size of the server process in KiB (Linux /proc).
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }

    /// How the process ended, once it has exited on its own (then reaped:
    /// `restart` starts a new one).
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Everything the server wrote to stdout/stderr so far (all starts).
    pub fn logs(&self) -> String {
        read_lossy(&self.log_path())
    }
}

// ---------------------------------------------------------------------------------
// Snapshots: forcing one, and proving what a restart could and could not replay
// ---------------------------------------------------------------------------------

/// Entries openraft keeps in the log behind a snapshot (`max_in_snapshot_log_to_keep`
/// in src/raft/mod.rs).
pub const LOG_KEPT_BEHIND_SNAPSHOT: u64 = 1_000;
/// The fewest entries openraft purges at once (`purge_batch_size` in src/raft/mod.rs).
pub const PURGE_BATCH: u64 = 1_024;
/// Once a snapshot at index S has been taken (and its purge done), the first entry
/// left in the log is above S - SNAPSHOT_PURGE_LAG: openraft purges up to
/// S - LOG_KEPT_BEHIND_SNAPSHOT whenever that frees at least PURGE_BATCH entries, so
/// the first kept entry is S + 1 - KEPT when it purged and above
/// S + 1 - KEPT - BATCH when it did not. A snapshot at index >= d + this lag means
/// entry d is gone from the log.
pub const SNAPSHOT_PURGE_LAG: u64 = LOG_KEPT_BEHIND_SNAPSHOT + PURGE_BATCH - 1;

/// Parsed `RAFT.INFO`.
#[derive(Clone, Debug, Default)]
pub struct RaftInfo {
    pub fields: std::collections::BTreeMap<String, String>,
    pub raw: String,
}

impl RaftInfo {
    pub fn parse(text: &str) -> RaftInfo {
        let mut fields = std::collections::BTreeMap::new();
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if let Some((k, v)) = line.split_once(':') {
                fields.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
        RaftInfo { fields, raw: text.to_string() }
    }

    #[track_caller]
    pub fn get(&self, k: &str) -> &str {
        self.fields.get(k).map(|s| s.as_str()).unwrap_or_else(|| panic!("RAFT.INFO lacks {k}:\n{}", self.raw))
    }

    pub fn role(&self) -> &str {
        self.get("role")
    }

    #[track_caller]
    pub fn num(&self, k: &str) -> u64 {
        let v = self.get(k);
        v.parse().unwrap_or_else(|_| panic!("RAFT.INFO {k}:{v} is not a number:\n{}", self.raw))
    }

    pub fn leader_id(&self) -> Option<u64> {
        self.fields.get("leader_id").and_then(|s| s.parse().ok())
    }

    /// `members:` as id -> "peer/client".
    pub fn members(&self) -> std::collections::BTreeMap<u64, String> {
        let mut m = std::collections::BTreeMap::new();
        for item in self.get("members").split(',').filter(|s| !s.is_empty()) {
            let (id, addrs) = item.split_once('@').unwrap_or_else(|| panic!("bad member {item:?}:\n{}", self.raw));
            m.insert(id.parse().unwrap_or_else(|_| panic!("bad member id {item:?}")), addrs.to_string());
        }
        m
    }
}

/// `RAFT.INFO` over `c`.
#[track_caller]
fn raft_info_on(c: &mut RawConn) -> RaftInfo {
    match c.cmd(&["RAFT.INFO"]) {
        r @ (Resp::Bulk(Some(_)) | Resp::Verbatim(..) | Resp::Simple(_)) => RaftInfo::parse(&r.text().unwrap()),
        other => panic!("RAFT.INFO replied {other:?}"),
    }
}

impl TestServer {
    /// `RAFT.INFO` of the running node, over a fresh connection.
    #[track_caller]
    pub fn raft_info(&self) -> RaftInfo {
        raft_info_on(&mut self.raw())
    }

    /// Writes filler entries, one command at a time (so one log entry each), until
    /// the node has taken a snapshot at index >= `index`; then waits (bounded, without
    /// writing) until no further snapshot is being built: applied_index -
    /// snapshot_index < `every` (the node's `--snapshot-logs`; a build that was
    /// triggered and not yet reported shows as a gap of at least `every`). The filler
    /// is one key, `filler_key`, overwritten each time. At most
    /// `index + 4 * every + 10_000` writes. Returns RAFT.INFO at the end.
    #[track_caller]
    pub fn write_until_snapshot(&self, index: u64, every: u64, filler_key: &str) -> RaftInfo {
        let mut c = self.raw();
        let info = raft_info_on;
        let budget = index + 4 * every + 10_000;
        let mut now = info(&mut c);
        let mut writes = 0u64;
        while now.num("snapshot_index") < index {
            assert!(
                writes < budget,
                "no snapshot at index >= {index} after {writes} single writes (--snapshot-logs {every}); RAFT.INFO:\n{}",
                now.raw
            );
            assert_eq!(c.cmd(&["SET", filler_key, &writes.to_string()]), Resp::Simple("OK".into()));
            writes += 1;
            if writes % 20 == 0 {
                now = info(&mut c);
            }
        }
        poll_until(EVENT_TIMEOUT, &format!("no snapshot build in flight (gap < {every})"), || {
            let i = info(&mut c);
            if i.num("applied_index") - i.num("snapshot_index") < every {
                return Some(i);
            }
            // A build that ended while more entries came may leave a gap of
            // `every` or more with none in flight: the node decides on its
            // next snapshot as it applies, so one more entry lets it.
            assert_eq!(c.cmd(&["SET", filler_key, "one more"]), Resp::Simple("OK".into()));
            None
        })
    }

    /// Waits until the node's log purge past `index` is on disk (`RAFT.INFO`
    /// `purged_index`): openraft purges behind a snapshot once it is taken,
    /// and the mark is written in the background, so a kill right after the
    /// snapshot can still find the entries on disk.
    pub fn wait_purged_on_disk(&self, index: u64) -> RaftInfo {
        let mut c = self.raw();
        poll_until(EVENT_TIMEOUT, &format!("the log purged past entry {index} on disk"), || {
            let i = raft_info_on(&mut c);
            (i.num("purged_index") >= index).then_some(i)
        })
    }

    /// The snapshot test in one step: writes until a snapshot covers entry
    /// `written_at` and the log behind it is purged, kills the node and
    /// checks on disk that no entry up to `written_at` is left (`what` names
    /// what those entries wrote), restarts it, and checks that it reports a
    /// snapshot at least as new. What the node holds then came from the
    /// snapshot.
    pub fn restart_from_snapshot(&mut self, written_at: u64, every: u64, what: &str) {
        let before = self.write_until_snapshot(written_at + SNAPSHOT_PURGE_LAG, every, "filler");
        self.wait_purged_on_disk(written_at);
        self.kill9();
        let (first, last) = self.log_on_disk().expect("the log on disk is empty");
        assert!(
            first > written_at,
            "the log on disk still holds entry {written_at} (it spans {first}..={last}; snapshot at {}): \
             a restart could replay {what} from the log, so this would not test the snapshot",
            before.num("snapshot_index")
        );
        self.restart();
        let after = self.raft_info();
        assert!(
            after.num("snapshot_index") >= before.num("snapshot_index"),
            "after the restart the node reports snapshot_index {}, below the {} taken before kill -9:\n{}",
            after.num("snapshot_index"),
            before.num("snapshot_index"),
            after.raw
        );
    }

    /// With the node stopped: the first and last index of the Raft log on disk
    /// (None if the log is empty), read straight from its files.
    pub fn log_on_disk(&self) -> Option<(u64, u64)> {
        assert!(self.child.is_none(), "log_on_disk needs the node stopped (RocksDB is single-process)");
        use raftlock::storage::Storage;
        let db = Storage::open(&self.data_dir()).expect("open the node's RocksDB");
        let span = raftlock::raft::log_on_disk(&db).expect("read the log");
        db.stop_background_work();
        span
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let logs = self.logs();
            // Keep the tail: the interesting part is usually at the end.
            let tail: String = if logs.len() > 20_000 {
                let mut start = logs.len() - 20_000;
                while !logs.is_char_boundary(start) {
                    start += 1;
                }
                logs[start..].to_string()
            } else {
                logs
            };
            eprintln!(
                "----- raftlock log (port {}, {}) -----\n{}\n----- end of raftlock log -----",
                self.port,
                self.log_path().display(),
                tail
            );
        }
    }
}

fn read_lossy(p: &Path) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = File::open(p) {
        let _ = f.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

// ---------------------------------------------------------------------------------
// redis crate helpers
// ---------------------------------------------------------------------------------

/// The full error line the server sent (`CODE detail`), from a `redis` crate error.
pub fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => format!("<not a server error: {e}>"),
    }
}

/// Expect an error reply; return its full text (`CODE detail`).
#[track_caller]
pub fn expect_err<T: std::fmt::Debug>(r: RedisResult<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error reply, got {v:?}"),
        Err(e) => {
            assert!(
                e.code().is_some(),
                "expected a server error reply, got a client-side error: {e}"
            );
            err_text(&e)
        }
    }
}

/// Run one command given as words and return the raw reply value (errors as Err).
pub fn q(con: &mut redis::Connection, args: &[&str]) -> RedisResult<Value> {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
}

/// Bytes of a string-ish reply (bulk, simple, verbatim, OK).
pub fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// Turn a RESP3 map or a RESP2 flat key/value array into (key, value) pairs.
pub fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Map(m) => m
            .iter()
            .map(|(k, v)| (as_text(k).expect("map key is a string"), v.clone()))
            .collect(),
        Value::Array(a) => {
            assert!(
                a.len() % 2 == 0,
                "flat key/value array of odd length: {v:?}"
            );
            a.chunks(2)
                .map(|c| (as_text(&c[0]).expect("key is a string"), c[1].clone()))
                .collect()
        }
        other => panic!("expected a map or a flat key/value array, got {other:?}"),
    }
}

pub fn lookup<'a>(p: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    p.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Poll `f` until it returns Some, at most `timeout`; panics with `what` otherwise.
#[track_caller]
pub fn poll_until<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

// ---------------------------------------------------------------------------------
// Raw RESP client
// ---------------------------------------------------------------------------------

/// A decoded RESP2/RESP3 reply, kept close to the wire so tests can check types.
#[derive(Debug, Clone, PartialEq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    /// `$-1` (RESP2 null bulk) is `Bulk(None)`.
    Bulk(Option<Vec<u8>>),
    /// `*-1` (RESP2 null array) is `Array(None)`.
    Array(Option<Vec<Resp>>),
    /// RESP3 `_`.
    Null,
    Bool(bool),
    Double(String),
    BigNum(String),
    BlobError(String),
    Verbatim(String, String),
    Map(Vec<(Resp, Resp)>),
    Set(Vec<Resp>),
    Push(Vec<Resp>),
}

impl Resp {
    pub fn bulk(s: &str) -> Resp {
        Resp::Bulk(Some(s.as_bytes().to_vec()))
    }
    pub fn text(&self) -> Option<String> {
        match self {
            Resp::Simple(s) | Resp::Verbatim(_, s) => Some(s.clone()),
            Resp::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
    pub fn is_nil(&self) -> bool {
        matches!(self, Resp::Null | Resp::Bulk(None) | Resp::Array(None))
    }
    pub fn items(&self) -> Vec<Resp> {
        match self {
            Resp::Array(Some(v)) | Resp::Set(v) | Resp::Push(v) => v.clone(),
            other => panic!("expected an aggregate, got {other:?}"),
        }
    }
}

pub struct RawConn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

#[derive(Debug)]
pub enum RawErr {
    /// The peer closed the connection (clean EOF or reset).
    Closed,
    Timeout,
    Io(std::io::Error),
    Bad(String),
}

impl RawConn {
    pub fn connect(addr: &str) -> RawConn {
        let stream = TcpStream::connect(addr).expect("raw connect");
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).ok();
        RawConn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("raw write");
    }

    pub fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// Send one command as a RESP array of bulk strings, without reading
    /// its reply (a command that blocks, a pipeline).
    pub fn send_cmd(&mut self, args: &[&str]) {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&Self::encode(&a));
    }

    /// Send one command as a RESP array of bulk strings and read one reply.
    pub fn cmd(&mut self, args: &[&str]) -> Resp {
        self.send_cmd(args);
        self.read()
            .unwrap_or_else(|e| panic!("reading reply to {args:?}: {e:?}"))
    }

    #[track_caller]
    pub fn read(&mut self) -> Result<Resp, RawErr> {
        loop {
            if let Some((v, used)) = parse(&self.buf).map_err(RawErr::Bad)? {
                self.buf.drain(..used);
                return Ok(v);
            }
            self.fill()?;
        }
    }

    /// The next reply if it already arrived with what was read before,
    /// without reading from the connection.
    pub fn already_read(&mut self) -> Option<Resp> {
        let (v, used) = parse(&self.buf).ok()??;
        self.buf.drain(..used);
        Some(v)
    }

    fn fill(&mut self) -> Result<(), RawErr> {
        let mut tmp = [0u8; 65536];
        match self.stream.read(&mut tmp) {
            Ok(0) => Err(RawErr::Closed),
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Ok(())
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                Err(RawErr::Timeout)
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionReset
                    || e.kind() == std::io::ErrorKind::ConnectionAborted
                    || e.kind() == std::io::ErrorKind::BrokenPipe =>
            {
                Err(RawErr::Closed)
            }
            Err(e) => Err(RawErr::Io(e)),
        }
    }

    /// Read the raw bytes of one line (without CRLF), for exact-text checks.
    pub fn read_line(&mut self) -> Result<String, RawErr> {
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..pos]).into_owned();
                self.buf.drain(..pos + 2);
                return Ok(line);
            }
            self.fill()?;
        }
    }

    /// True if the server closes the connection (EOF/reset) within `timeout`,
    /// discarding anything it still sends before closing.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        self.stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let r = loop {
            self.buf.clear();
            match self.fill() {
                Err(RawErr::Closed) => break true,
                Err(RawErr::Timeout) if Instant::now() < deadline => continue,
                Err(RawErr::Timeout) => break false,
                Err(_) => break true,
                Ok(()) if Instant::now() < deadline => continue,
                Ok(()) => break false,
            }
        };
        self.stream.set_read_timeout(Some(IO_TIMEOUT)).ok();
        r
    }
}

fn find_crlf(b: &[u8], from: usize) -> Option<usize> {
    b[from..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| p + from)
}

/// Parse one RESP2/RESP3 value from the front of `b`. Ok(None) if incomplete.
pub fn parse(b: &[u8]) -> Result<Option<(Resp, usize)>, String> {
    parse_at(b, 0)
}

fn parse_at(b: &[u8], at: usize) -> Result<Option<(Resp, usize)>, String> {
    if at >= b.len() {
        return Ok(None);
    }
    let Some(eol) = find_crlf(b, at + 1) else {
        return Ok(None);
    };
    let line = String::from_utf8_lossy(&b[at + 1..eol]).into_owned();
    let next = eol + 2;
    let int = |s: &str| -> Result<i64, String> {
        s.parse::<i64>().map_err(|_| format!("bad integer {s:?}"))
    };
    let blob = |len: i64| -> Result<Option<(Vec<u8>, usize)>, String> {
        let len = len as usize;
        if b.len() < next + len + 2 {
            return Ok(None);
        }
        if &b[next + len..next + len + 2] != b"\r\n" {
            return Err("blob not terminated by CRLF".into());
        }
        Ok(Some((b[next..next + len].to_vec(), next + len + 2)))
    };
    let agg = |n: usize, pairs: bool| -> Result<Option<(Vec<Resp>, usize)>, String> {
        let mut items = Vec::new();
        let mut pos = next;
        let total = if pairs { n * 2 } else { n };
        for _ in 0..total {
            match parse_at(b, pos)? {
                Some((v, p)) => {
                    items.push(v);
                    pos = p;
                }
                None => return Ok(None),
            }
        }
        Ok(Some((items, pos)))
    };
    let v = match b[at] {
        b'+' => (Resp::Simple(line), next),
        b'-' => (Resp::Error(line), next),
        b':' => (Resp::Int(int(&line)?), next),
        b'_' => (Resp::Null, next),
        b'#' => (Resp::Bool(line == "t"), next),
        b',' => (Resp::Double(line), next),
        b'(' => (Resp::BigNum(line), next),
        b'$' => {
            let n = int(&line)?;
            if n < 0 {
                (Resp::Bulk(None), next)
            } else {
                match blob(n)? {
                    Some((d, p)) => (Resp::Bulk(Some(d)), p),
                    None => return Ok(None),
                }
            }
        }
        b'!' => match blob(int(&line)?)? {
            Some((d, p)) => (Resp::BlobError(String::from_utf8_lossy(&d).into_owned()), p),
            None => return Ok(None),
        },
        b'=' => match blob(int(&line)?)? {
            Some((d, p)) => {
                let s = String::from_utf8_lossy(&d).into_owned();
                let (fmt, text) = if s.len() >= 4 && &s[3..4] == ":" {
                    (s[..3].to_string(), s[4..].to_string())
                } else {
                    (String::new(), s)
                };
                (Resp::Verbatim(fmt, text), p)
            }
            None => return Ok(None),
        },
        b'*' | b'~' | b'>' => {
            let n = int(&line)?;
            if n < 0 {
                (Resp::Array(None), next)
            } else {
                match agg(n as usize, false)? {
                    Some((items, p)) => (
                        match b[at] {
                            b'*' => Resp::Array(Some(items)),
                            b'~' => Resp::Set(items),
                            _ => Resp::Push(items),
                        },
                        p,
                    ),
                    None => return Ok(None),
                }
            }
        }
        b'%' | b'|' => {
            let n = int(&line)? as usize;
            match agg(n, true)? {
                Some((items, p)) => {
                    let mut it = items.into_iter();
                    let mut m = Vec::new();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        m.push((k, v));
                    }
                    if b[at] == b'|' {
                        // An attribute precedes the real reply: skip it.
                        return match parse_at(b, p)? {
                            Some((v, p2)) => Ok(Some((v, p2))),
                            None => Ok(None),
                        };
                    }
                    (Resp::Map(m), p)
                }
                None => return Ok(None),
            }
        }
        other => return Err(format!("unexpected RESP type byte {:?}", other as char)),
    };
    Ok(Some(v))
}

/// A bulk-string reply.
pub fn b(s: &str) -> Resp {
    Resp::bulk(s)
}

/// An array reply.
pub fn arr(items: Vec<Resp>) -> Resp {
    Resp::Array(Some(items))
}

/// A simple-string reply.
pub fn st(s: &str) -> Resp {
    Resp::Simple(s.to_string())
}

/// python-redis-lock's release script: DEL signal, LPUSH signal, PEXPIRE
/// signal, DEL lock (KEYS: lock, signal; ARGV: owner id, signal expiry ms).
pub const PYTHON_REDIS_LOCK_UNLOCK: &str = r#"
    if redis.call("get", KEYS[1]) ~= ARGV[1] then
        return 1
    else
        redis.call("del", KEYS[2])
        redis.call("lpush", KEYS[2], 1)
        redis.call("pexpire", KEYS[2], ARGV[2])
        redis.call("del", KEYS[1])
        return 0
    end
"#;

/// Whether `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool} >/dev/null 2>&1")).status().is_ok_and(|s| s.success())
}

/// Whether a test that needs `tool` can run: a missing tool is a failure
/// under `RAFTLOCK_REQUIRE_CLIENT_TOOLS` (scripts/test.sh, CI), else a
/// skip with a note.
pub fn need_tool(tool: &str) -> bool {
    if have(tool) {
        return true;
    }
    assert!(std::env::var_os("RAFTLOCK_REQUIRE_CLIENT_TOOLS").is_none(), "{tool} is not installed");
    eprintln!("NOTE: skipping: {tool} is not installed");
    false
}
