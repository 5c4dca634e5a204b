//! A local raftlock cluster for the multi-node integration tests (`tests/cluster.rs`):
//! real `raftlock` processes on free 127.0.0.1 ports, one temporary directory per node
//! (data + log file), `kill -9`, SIGSTOP/SIGCONT, restart with the same flags, and
//! helpers that read `RAFT.INFO` and talk to a node with the `redis` crate.
//!
//! Every wait is bounded by a deadline. Dropping a [`Cluster`] resumes every stopped
//! process (SIGCONT) and then kills it (SIGKILL); if the test is panicking it prints
//! the tail of every node's log first and keeps the node directories on disk.
#![allow(dead_code)]

pub mod net;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

/// Read/write timeout of client sockets: longer than any server-side timeout the
/// tests configure, so a slow answer is measured, not cut off by the client.
pub const IO_TIMEOUT: Duration = Duration::from_secs(12);
/// How long a freshly started cluster (or a restarted one) may take to serve writes.
pub const READY_TIMEOUT: Duration = Duration::from_secs(25);

/// The cluster tests start 3-4 processes each on a 2-core machine; running them one
/// at a time keeps their timing meaningful. Each test holds this for its duration.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Flags common to every node of a cluster (None: the server's default).
#[derive(Clone, Debug, Default)]
pub struct Opts {
    pub election_timeout_ms: Option<u64>,
    pub heartbeat_ms: Option<u64>,
    pub request_timeout_ms: Option<u64>,
    pub snapshot_logs: Option<u64>,
    /// Put a proxy ([`net::Net`]) in front of every node's peer port, so the
    /// test can partition nodes (`Cluster::net`).
    pub partitionable: bool,
    /// More flags for every node (e.g. TLS).
    pub extra_args: Vec<String>,
    /// Serve /metrics on `Node::metrics_port` (otherwise off).
    pub metrics: bool,
    /// More flags for one node (by id).
    pub node_args: BTreeMap<u64, Vec<String>>,
}

/// Find `n` distinct free TCP ports on 127.0.0.1 (all listeners are held until the
/// last one is picked, so the ports are distinct).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    listeners.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// One raftlock process (possibly not running) and its directory.
pub struct Node {
    pub id: u64,
    pub port: u16,
    pub peer_port: u16,
    /// Where /metrics is served, with `Opts::metrics`.
    pub metrics_port: u16,
    dir: Option<tempfile::TempDir>,
    child: Option<Child>,
    stopped: bool,
    starts: u32,
    /// The `--initial-cluster` this node is started with (kept for restarts).
    initial_cluster: String,
}

impl Node {
    fn new(id: u64, port: u16, peer_port: u16, initial_cluster: String) -> Node {
        let dir = tempfile::Builder::new()
            .prefix(&format!("raftlock-cluster-n{id}-"))
            .tempdir()
            .expect("tempdir");
        let metrics_port = free_ports(1)[0];
        Node { id, port, peer_port, metrics_port, dir: Some(dir), child: None, stopped: false, starts: 0, initial_cluster }
    }

    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("node dir").path()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir().join("data")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir().join("raftlock.log")
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn peer_addr(&self) -> String {
        format!("127.0.0.1:{}", self.peer_port)
    }

    /// `id=peer/client`, as in `--initial-cluster`.
    pub fn member_spec(&self) -> String {
        format!("{}={}/{}", self.id, self.peer_addr(), self.addr())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Running (possibly SIGSTOPped): spawned and not yet exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    fn spawn(&mut self, secret: &str, opts: &Opts) {
        assert!(self.child.is_none(), "node {} already running", self.id);
        self.starts += 1;
        let log = OpenOptions::new().create(true).append(true).open(self.log_path()).expect("open log file");
        writeln!(&log, "===== raftlock node {} start #{} =====", self.id, self.starts).ok();
        let log2 = log.try_clone().expect("clone log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_raftlock"));
        // Do not let a developer's environment change the configuration under test.
        for (k, _) in std::env::vars() {
            if k.starts_with("RAFTLOCK_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(["--node-id", &self.id.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--port", &self.port.to_string()])
            .args(["--peer-port", &self.peer_port.to_string()])
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--metrics-addr")
            .arg(if opts.metrics { format!("127.0.0.1:{}", self.metrics_port) } else { "off".into() })
            .args(["--cluster-secret", secret])
            .args(["--initial-cluster", &self.initial_cluster]);
        if let Some(v) = opts.election_timeout_ms {
            cmd.args(["--election-timeout-ms", &v.to_string()]);
        }
        if let Some(v) = opts.heartbeat_ms {
            cmd.args(["--heartbeat-ms", &v.to_string()]);
        }
        if let Some(v) = opts.request_timeout_ms {
            cmd.args(["--request-timeout-ms", &v.to_string()]);
        }
        if let Some(v) = opts.snapshot_logs {
            cmd.args(["--snapshot-logs", &v.to_string()]);
        }
        cmd.args(&opts.extra_args);
        if let Some(args) = opts.node_args.get(&self.id) {
            cmd.args(args);
        }
        // To show that a test catches a bug: RAFTLOCK_TEST_PLANT_BUG=<bug> with a
        // build that has the `planted-bugs` feature (see src/planted.rs).
        if let Ok(bug) = std::env::var("RAFTLOCK_TEST_PLANT_BUG") {
            cmd.args(["--plant-bug", &bug]);
        }
        // The server's default filter ("info,openraft=warn") unless the developer
        // asks for more with RAFTLOCK_TEST_LOG (e.g. "debug,openraft=info").
        cmd.env_remove("RUST_LOG");
        if let Ok(filter) = std::env::var("RAFTLOCK_TEST_LOG") {
            cmd.env("RUST_LOG", filter);
        }
        cmd.current_dir(self.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        self.child = Some(cmd.spawn().expect("spawn raftlock binary"));
        self.stopped = false;
    }

    fn signal(&self, sig: &str) {
        let pid = self.pid().unwrap_or_else(|| panic!("node {} is not running", self.id));
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{sig} {pid} (node {}) failed", self.id);
    }

    /// SIGKILL the process (no clean shutdown) and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.stopped {
                // Resume first so the process does not linger as a stopped zombie-to-be.
                let _ = Command::new("kill").arg("-CONT").arg(child.id().to_string()).status();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stopped = false;
    }

    /// SIGSTOP: the process stays alive (sockets open) but does nothing.
    pub fn pause(&mut self) {
        self.signal("STOP");
        self.stopped = true;
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&mut self) {
        self.signal("CONT");
        self.stopped = false;
    }

    /// Everything the node wrote to stdout/stderr so far (all starts).
    pub fn logs(&self) -> String {
        read_lossy(&self.log_path())
    }

    /// A new synchronous RESP2 connection with bounded socket timeouts.
    pub fn try_client(&self, connect_timeout: Duration) -> RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let con = client.get_connection_with_timeout(connect_timeout)?;
        con.set_read_timeout(Some(IO_TIMEOUT))?;
        con.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(con)
    }

    /// Like [`try_client`](Self::try_client) with a chosen read timeout (for
    /// commands that may legitimately take long, such as `RAFT.NODE ADD`).
    pub fn try_client_slow(&self, read_timeout: Duration) -> RedisResult<redis::Connection> {
        let con = self.try_client(Duration::from_secs(5))?;
        con.set_read_timeout(Some(read_timeout))?;
        Ok(con)
    }

    #[track_caller]
    pub fn client(&self) -> redis::Connection {
        self.try_client(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect to node {} ({}): {e}", self.id, self.addr()))
    }

    /// `RAFT.INFO` of this node as field -> value (short timeouts: a paused or dead
    /// node is an error, not a hang).
    /// The samples of this node's /metrics (`name{labels}` -> value).
    pub fn metrics(&self) -> Result<BTreeMap<String, f64>, String> {
        let mut http = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).map_err(|e| e.to_string())?;
        http.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        http.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
        let mut text = String::new();
        http.read_to_string(&mut text).map_err(|e| e.to_string())?;
        let (_, body) = text.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP header end: {text}"))?;
        Ok(body
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?))))
            .collect())
    }

    pub fn raft_info(&self) -> Result<RaftInfo, String> {
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(1)).map_err(|e| e.to_string())?;
        con.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
        con.set_write_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
        let v = redis::cmd("RAFT.INFO").query::<Value>(&mut con).map_err(|e| e.to_string())?;
        let text = as_text(&v).ok_or_else(|| format!("RAFT.INFO replied {v:?}"))?;
        Ok(RaftInfo::parse(&text))
    }

    /// `INFO <section>` of this node (answered locally, never forwarded).
    pub fn info_section(&self, section: &str) -> Result<String, String> {
        let mut con = self.try_client(Duration::from_secs(2)).map_err(|e| e.to_string())?;
        let v = redis::cmd("INFO").arg(section).query::<Value>(&mut con).map_err(|e| e.to_string())?;
        as_text(&v).ok_or_else(|| format!("INFO replied {v:?}"))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let logs = self.logs();
            let tail = tail(&logs, 12_000);
            let dir = self.dir.take().map(|d| d.keep());
            eprintln!(
                "----- node {} log (client 127.0.0.1:{}, peer 127.0.0.1:{}; dir kept at {:?}) -----\n{}\n----- end of node {} log -----",
                self.id, self.port, self.peer_port, dir, tail, self.id
            );
        }
    }
}

pub use crate::common::RaftInfo;

/// A set of raftlock nodes forming one cluster.
pub struct Cluster {
    pub nodes: BTreeMap<u64, Node>,
    pub secret: String,
    pub opts: Opts,
    /// `--initial-cluster` of the original members.
    pub initial_cluster: String,
    /// The links between the nodes, when started with `Opts::partitionable`.
    pub net: Option<net::Net>,
}

impl Cluster {
    /// Start `n` nodes (ids 1..=n) with the same `--initial-cluster` and wait until a
    /// leader is elected and every node serves a write.
    pub fn start(n: u64, opts: Opts) -> Cluster {
        let mut last = String::new();
        for _attempt in 0..3 {
            let ports = free_ports(2 * n as usize);
            let specs: Vec<(u64, u16, u16)> =
                (1..=n).map(|id| (id, ports[2 * (id as usize - 1)], ports[2 * (id as usize - 1) + 1])).collect();
            // With a proxy, the peer address every node is told is the proxy's.
            let mut net = opts.partitionable.then(net::Net::new);
            let mut advertised = BTreeMap::new();
            for (id, _, pp) in &specs {
                let peer = match net.as_mut() {
                    Some(net) => {
                        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
                        let port = listener.local_addr().unwrap().port();
                        net.add_proxy(*id, listener, *pp);
                        port
                    }
                    None => *pp,
                };
                advertised.insert(*id, peer);
            }
            let initial_cluster = specs
                .iter()
                .map(|(id, p, _)| format!("{id}=127.0.0.1:{}/127.0.0.1:{p}", advertised[id]))
                .collect::<Vec<_>>()
                .join(",");
            let mut c = Cluster {
                nodes: BTreeMap::new(),
                secret: format!("test-secret-{}", std::process::id()),
                opts: opts.clone(),
                initial_cluster: initial_cluster.clone(),
                net,
            };
            for (id, p, pp) in specs {
                c.nodes.insert(id, Node::new(id, p, pp, initial_cluster.clone()));
            }
            let ids: Vec<u64> = c.nodes.keys().copied().collect();
            for id in &ids {
                c.spawn(*id);
            }
            match c.try_wait_ready(&ids, READY_TIMEOUT) {
                Ok(()) => return c,
                Err(why) => {
                    let clash = c.nodes.values().any(|n| {
                        let l = n.logs();
                        l.contains("Address already in use") || l.contains("AddrInUse")
                    });
                    if !clash {
                        panic!("cluster of {n} did not become ready: {why}");
                    }
                    last = why;
                    // Port clash with someone else: kill quietly and retry with new ports.
                    for node in c.nodes.values_mut() {
                        node.kill9();
                    }
                }
            }
        }
        panic!("cluster did not become ready (ports kept clashing): {last}");
    }

    fn spawn(&mut self, id: u64) {
        let (secret, opts) = (self.secret.clone(), self.opts.clone());
        self.node_mut(id).spawn(&secret, &opts);
    }

    #[track_caller]
    pub fn node(&self, id: u64) -> &Node {
        self.nodes.get(&id).unwrap_or_else(|| panic!("no node {id}"))
    }

    #[track_caller]
    pub fn node_mut(&mut self, id: u64) -> &mut Node {
        self.nodes.get_mut(&id).unwrap_or_else(|| panic!("no node {id}"))
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    pub fn kill9(&mut self, id: u64) {
        self.node_mut(id).kill9();
    }

    /// The proxies' switch (the cluster must be started with `Opts::partitionable`).
    #[track_caller]
    pub fn net(&self) -> &net::Net {
        self.net.as_ref().expect("cluster started without Opts::partitionable")
    }

    pub fn pause(&mut self, id: u64) {
        self.node_mut(id).pause();
    }

    pub fn resume(&mut self, id: u64) {
        self.node_mut(id).resume();
    }

    /// Start node `id` again with a different cluster secret (same ports and
    /// data); does not wait.
    pub fn restart_with_secret(&mut self, id: u64, secret: &str) {
        let opts = self.opts.clone();
        self.node_mut(id).kill9();
        self.node_mut(id).spawn(secret, &opts);
    }

    /// Start a killed node again with the same flags, ports and data directory
    /// (does not wait; see [`wait_ready`](Self::wait_ready)).
    pub fn restart(&mut self, id: u64) {
        self.node_mut(id).kill9();
        self.spawn(id);
    }

    /// Start a new node `id` that is not a member yet: its `--initial-cluster` names
    /// the original members and itself (it is not the lowest id, so it does not
    /// initialise anything; it waits to be added). Waits until it answers RAFT.INFO.
    pub fn start_extra_node(&mut self, id: u64) {
        assert!(!self.nodes.contains_key(&id), "node {id} exists");
        let ports = free_ports(2);
        let spec = format!("{id}=127.0.0.1:{}/127.0.0.1:{}", ports[1], ports[0]);
        let initial = format!("{},{spec}", self.initial_cluster);
        self.nodes.insert(id, Node::new(id, ports[0], ports[1], initial));
        self.spawn(id);
        let node = self.node(id);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match node.raft_info() {
                Ok(_) => return,
                Err(e) if Instant::now() >= deadline => panic!("node {id} does not answer RAFT.INFO: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Wait until the nodes `ids` agree on one leader (it reports `role:leader`, and
    /// every one of them reports it as `leader_id`); returns its id.
    #[track_caller]
    pub fn wait_leader(&self, ids: &[u64], timeout: Duration) -> u64 {
        self.try_wait_leader(ids, timeout).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_wait_leader(&self, ids: &[u64], timeout: Duration) -> Result<u64, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let infos: Vec<(u64, Result<RaftInfo, String>)> =
                ids.iter().map(|id| (*id, self.node(*id).raft_info())).collect();
            let leaders: Vec<u64> = infos
                .iter()
                .filter_map(|(id, i)| i.as_ref().ok().filter(|i| i.fields.get("role").map(|r| r == "leader").unwrap_or(false)).map(|_| *id))
                .collect();
            if leaders.len() == 1 {
                let l = leaders[0];
                if infos.iter().all(|(_, i)| i.as_ref().map(|i| i.leader_id() == Some(l)).unwrap_or(false)) {
                    return Ok(l);
                }
            }
            let last = infos
                .iter()
                .map(|(id, i)| match i {
                    Ok(i) => format!(
                        "node {id}: role={} term={} leader_id={}",
                        i.fields.get("role").map(String::as_str).unwrap_or("?"),
                        i.fields.get("term").map(String::as_str).unwrap_or("?"),
                        i.fields.get("leader_id").map(String::as_str).unwrap_or("?")
                    ),
                    Err(e) => format!("node {id}: {e}"),
                })
                .collect::<Vec<_>>()
                .join("; ");
            if Instant::now() >= deadline {
                return Err(format!("no agreed leader among {ids:?} within {timeout:?}; last: {last}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until a leader is agreed among `ids` and a write through each of them
    /// succeeds.
    #[track_caller]
    pub fn wait_ready(&self, ids: &[u64], timeout: Duration) {
        self.try_wait_ready(ids, timeout).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_wait_ready(&self, ids: &[u64], timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        self.try_wait_leader(ids, timeout)?;
        for id in ids {
            let key = format!("__ready:{id}");
            let mut last: String;
            loop {
                let r = self.node(*id).try_client(Duration::from_secs(2)).and_then(|mut c| {
                    let v: Value = redis::cmd("SET").arg(&key).arg("1").query(&mut c)?;
                    let _: Value = redis::cmd("DEL").arg(&key).query(&mut c)?;
                    Ok(v)
                });
                match r {
                    Ok(Value::Okay) => break,
                    Ok(v) => last = format!("SET replied {v:?}"),
                    Err(e) => last = err_text(&e),
                }
                if Instant::now() >= deadline {
                    return Err(format!("node {id} does not serve writes within {timeout:?}; last: {last}"));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// RAFT.INFO of every node, for failure messages.
    pub fn describe(&self) -> String {
        self.nodes
            .values()
            .map(|n| match n.raft_info() {
                Ok(i) => format!("node {}: {}", n.id, i.raw.replace("\r\n", " ").replace('\n', " ")),
                Err(e) => format!("node {}: {e}", n.id),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Resume and kill every process first so that no node keeps running while
        // the logs are printed; Node::drop prints the logs when panicking.
        for n in self.nodes.values_mut() {
            n.kill9();
        }
    }
}

// ---------------------------------------------------------------------------------
// small helpers
// ---------------------------------------------------------------------------------

fn read_lossy(p: &Path) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = File::open(p) {
        let _ = f.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

pub fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

/// The full error line (`CODE detail`) of a server error, or a description of a
/// client-side error.
pub fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => format!("<not a server error: {e}>"),
    }
}

pub use super::common::{as_text, q};

/// A lock as `LOCK.INFO` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct LockInfo {
    pub owner: String,
    pub token: i64,
    pub ttl_ms: i64,
    pub waiters: i64,
}

/// Parse a `LOCK.INFO` reply (RESP2 flat array or RESP3 map); None for nil.
pub fn parse_lock_info(v: &Value) -> Result<Option<LockInfo>, String> {
    let pairs: Vec<(String, Value)> = match v {
        Value::Nil => return Ok(None),
        Value::Map(m) => m.iter().map(|(k, v)| (as_text(k).unwrap_or_default(), v.clone())).collect(),
        Value::Array(a) if a.len() % 2 == 0 => {
            a.chunks(2).map(|c| (as_text(&c[0]).unwrap_or_default(), c[1].clone())).collect()
        }
        other => return Err(format!("LOCK.INFO replied {other:?}")),
    };
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let int = |k: &str| match get(k) {
        Some(Value::Int(i)) => Ok(i),
        other => Err(format!("LOCK.INFO {k} is {other:?} in {v:?}")),
    };
    Ok(Some(LockInfo {
        owner: get("owner").as_ref().and_then(as_text).ok_or_else(|| format!("LOCK.INFO owner missing in {v:?}"))?,
        token: int("token")?,
        ttl_ms: int("ttl-ms")?,
        waiters: int("waiters")?,
    }))
}

/// `LOCK.INFO key` on `con`.
pub fn lock_info(con: &mut redis::Connection, key: &str) -> Result<Option<LockInfo>, String> {
    let v = q(con, &["LOCK.INFO", key]).map_err(|e| err_text(&e))?;
    parse_lock_info(&v)
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
        std::thread::sleep(Duration::from_millis(50));
    }
}
