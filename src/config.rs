//! Command-line flags, each also read from `RAFTLOCK_<NAME>`, and their
//! validation. No I/O beyond reading the environment.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

use crate::protocol::Limits;

/// raftlock: a Redis-protocol lock server replicated through Raft onto RocksDB.
///
/// With no arguments: a one-node cluster on 127.0.0.1:6379, data in ./data,
/// Prometheus metrics on 127.0.0.1:9379.
#[derive(Debug, Clone, Parser)]
#[command(name = "raftlock", version)]
pub struct Config {
    /// Address to listen on for clients and peers.
    #[arg(long, env = "RAFTLOCK_BIND", default_value = "127.0.0.1")]
    pub bind: String,
    /// Client (RESP) port.
    #[arg(long, env = "RAFTLOCK_PORT", default_value_t = 6379)]
    pub port: u16,
    /// Peer (Raft RPC) port; default: client port + 10000.
    #[arg(long, env = "RAFTLOCK_PEER_PORT")]
    pub peer_port: Option<u16>,
    /// Directory for the Raft log, vote and snapshots.
    #[arg(long, env = "RAFTLOCK_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Prometheus endpoint address, or `off`.
    #[arg(long, env = "RAFTLOCK_METRICS_ADDR", default_value = "127.0.0.1:9379")]
    pub metrics_addr: String,
    /// This node's Raft id.
    #[arg(long, env = "RAFTLOCK_NODE_ID", default_value_t = 1)]
    pub node_id: u64,
    /// Most client connections at once; more are refused with Redis's error.
    #[arg(long, env = "RAFTLOCK_MAXCLIENTS", default_value_t = 10000)]
    pub maxclients: usize,
    /// Largest single argument in bytes (Redis's proto-max-bulk-len).
    #[arg(long, env = "RAFTLOCK_PROTO_MAX_BULK_LEN", default_value_t = 8 * 1024 * 1024)]
    pub proto_max_bulk_len: usize,
    /// Largest request in bytes, all arguments together.
    #[arg(long, env = "RAFTLOCK_MAX_REQUEST_LEN", default_value_t = 32 * 1024 * 1024)]
    pub max_request_len: usize,
    /// Most arguments in one command.
    #[arg(long, env = "RAFTLOCK_MAX_ARGS", default_value_t = 64 * 1024)]
    pub max_args: usize,
    /// Take a snapshot after this many log entries since the last one.
    #[arg(long, env = "RAFTLOCK_SNAPSHOT_LOGS", default_value_t = 20_000)]
    pub snapshot_logs: u64,
    /// Also take a snapshot once the commands applied since the last one
    /// hold this many bytes of arguments. One log entry may hold thousands
    /// of pipelined commands, so a count of entries alone does not bound the
    /// log a restart replays. 0: only --snapshot-logs counts.
    #[arg(long, env = "RAFTLOCK_SNAPSHOT_LOG_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub snapshot_log_bytes: u64,
    /// Free space to keep on the data directory's disk: while less is free,
    /// commands that may add data (SET, LOCK.ACQUIRE, scripts other than
    /// lock releases and renewals, ...) are refused with a MISCONF error;
    /// reads, deletions, renewals and releases are served. A node whose log
    /// cannot be written stops, so a full disk would stop it. Bytes, or with
    /// a unit (`kb`, `mb`, `gb`); 0 turns it off.
    #[arg(long, env = "RAFTLOCK_MIN_FREE_DISK", default_value = "256mb", value_parser = parse_amount)]
    pub min_free_disk: u64,
    /// Raft heartbeat interval in ms.
    #[arg(long, env = "RAFTLOCK_HEARTBEAT_MS", default_value_t = 50)]
    pub heartbeat_ms: u64,
    /// How long the thread that runs connections and Raft keeps polling,
    /// instead of sleeping, while a log write is in flight, per write, in µs
    /// (0: never). It saves the wake-ups that answer every command at low
    /// load, for the CPU of one thread while the disk syncs; it gives its
    /// core to any other thread ready to run between polls. A node with more
    /// than 4 writes (or forwards to the leader) in flight does not poll.
    #[arg(long, env = "RAFTLOCK_BUSY_POLL_US", default_value_t = 500)]
    pub busy_poll_us: u64,
    /// Lower bound of the election timeout in ms; the upper bound is a third
    /// more. A follower that stops hearing from its leader starts an election
    /// after the upper bound (openraft's leader lease) plus its own timeout,
    /// so with the defaults a failover takes about 0.6 s.
    #[arg(long, env = "RAFTLOCK_ELECTION_TIMEOUT_MS", default_value_t = 250)]
    pub election_timeout_ms: u64,
    /// The cluster to form on first start: `id=peer-host:port[/client-host:port],...`
    /// on every node (same value). Without it, a one-node cluster. A member's
    /// client address defaults to its peer port minus 10000.
    #[arg(long, env = "RAFTLOCK_INITIAL_CLUSTER", default_value = "")]
    pub initial_cluster: String,
    /// Shared secret every peer connection must present.
    #[arg(long, env = "RAFTLOCK_CLUSTER_SECRET", default_value = "", hide_env_values = true)]
    pub cluster_secret: String,
    /// Password of the default user: clients must `AUTH` (or `HELLO 3 AUTH
    /// default <password>`) before any other command. Give every node the
    /// same one. Prefer the environment variable: a flag shows in `ps`.
    #[arg(long, env = "RAFTLOCK_REQUIREPASS", hide_env_values = true)]
    pub requirepass: Option<String>,
    /// Protected mode, as Redis: with no password set, only clients on the
    /// loopback interface (127.0.0.1, ::1) are served; others are told why and
    /// disconnected.
    #[arg(long, env = "RAFTLOCK_PROTECTED_MODE", default_value = "yes", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub protected_mode: bool,
    /// The ACL file (Redis's format) that `ACL LOAD` reads and `ACL SAVE`
    /// writes. On start, a node whose cluster has no ACL users yet loads it
    /// (through the log, for every node).
    #[arg(long, env = "RAFTLOCK_ACLFILE")]
    pub aclfile: Option<PathBuf>,
    /// Also serve clients with TLS on this port (0: no TLS port). `--port 0`
    /// leaves only the TLS port open.
    #[arg(long, env = "RAFTLOCK_TLS_PORT", default_value_t = 0)]
    pub tls_port: u16,
    /// This node's certificate chain (PEM), for the TLS port and, with
    /// `--tls-cluster yes`, the peer port.
    #[arg(long, env = "RAFTLOCK_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `--tls-cert-file` (PEM).
    #[arg(long, env = "RAFTLOCK_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// CA certificates (PEM) that client certificates, and peers' with
    /// `--tls-cluster yes`, must chain to.
    #[arg(long, env = "RAFTLOCK_TLS_CA_CERT_FILE")]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Whether TLS clients must show a certificate signed by the CA: `yes`,
    /// `optional` (checked if shown) or `no`.
    #[arg(long, env = "RAFTLOCK_TLS_AUTH_CLIENTS", default_value = "yes", value_parser = crate::tls::ClientAuth::parse)]
    pub tls_auth_clients: crate::tls::ClientAuth,
    /// Mutual TLS between nodes on the peer port (every node the same).
    #[arg(long, env = "RAFTLOCK_TLS_CLUSTER", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub tls_cluster: bool,
    /// How long a command waits for the cluster before replying an error, ms.
    #[arg(long, env = "RAFTLOCK_REQUEST_TIMEOUT_MS", default_value_t = 5000)]
    pub request_timeout_ms: u64,
    /// Append a JSON line for every lease event applied here to this file (for
    /// the fault-injection harness, tests/chaos).
    #[arg(long, env = "RAFTLOCK_AUDIT_LOG")]
    pub audit_log: Option<PathBuf>,
    /// Apply this log entry as an error reply that changes nothing, on a node
    /// that stops every time it applies it (the node names the entry as it
    /// stops). Give every node the same list. Repeat or separate with commas.
    #[arg(long = "skip-entry", env = "RAFTLOCK_SKIP_ENTRIES", value_delimiter = ',')]
    pub skip_entry: Vec<u64>,
    /// Disaster recovery when a majority of the members is lost for good:
    /// apply every entry in this node's log, then make this node's data a
    /// one-node cluster of this node alone, serving what it holds. Entries
    /// only the lost members had are gone, so force the member with the
    /// highest last log index (`raftlock status`, `RAFT.INFO`). The old
    /// members must never start again with their data (give the new cluster
    /// a new --cluster-secret); add new members with `RAFT.NODE ADD`. Start
    /// with it once: see scripts/ops/README.md.
    #[arg(long, env = "RAFTLOCK_FORCE_NEW_CLUSTER")]
    pub force_new_cluster: bool,
    /// Threads that run connections and Raft (0: one per CPU). One by
    /// default: tasks that hand a command on to each other on one thread
    /// cost far less than waking a second one (`benches/HISTORY.md`, "The
    /// comparison table"). A
    /// command that may run long (a script, `KEYS`) first hands the other
    /// tasks to a new thread, so it never stops the rest. The Raft log's
    /// writer and snapshot work have threads of their own besides.
    #[arg(long, env = "RAFTLOCK_WORKER_THREADS", default_value_t = 1)]
    pub worker_threads: usize,
    /// Shift this node's wall clock by this many ms (for tests of clock
    /// skew: TIME, EXAT/PXAT and the clock offsets peers measure see it;
    /// leases never read the wall clock).
    #[arg(long, env = "RAFTLOCK_WALL_CLOCK_OFFSET_MS", default_value_t = 0, allow_negative_numbers = true, hide = true)]
    pub wall_clock_offset_ms: i64,
    /// Switch on a deliberate bug (builds with the `planted-bugs` feature only).
    #[cfg(feature = "planted-bugs")]
    #[arg(long = "plant-bug", value_enum)]
    pub plant_bug: Vec<crate::planted::Bug>,
}

/// An amount of bytes, as Redis's configuration takes it (`256mb`, `1gb`).
fn parse_amount(s: &str) -> Result<u64, String> {
    crate::server::parse_bytes(s).ok_or_else(|| format!("{s:?} is not an amount of bytes (e.g. 0, 512mb, 2gb)"))
}

impl Config {
    /// A configuration with every default, as `raftlock` with no arguments.
    pub fn defaults() -> Config {
        Config::parse_from(["raftlock"])
    }

    pub fn peer_port(&self) -> u16 {
        self.peer_port.unwrap_or_else(|| self.advertised_port().wrapping_add(10000))
    }

    /// The client port others are told about: the plain one, or the TLS
    /// port when it is the only one.
    fn advertised_port(&self) -> u16 {
        if self.port == 0 { self.tls_port } else { self.port }
    }

    /// Where clients reach this node (the plain port, else the TLS port).
    pub fn client_addr(&self) -> String {
        join_host_port(&self.bind, self.advertised_port())
    }

    /// The plain client port's address, if it is open.
    pub fn plain_addr(&self) -> Option<String> {
        (self.port != 0).then(|| join_host_port(&self.bind, self.port))
    }

    /// The TLS client port's address, if it is open.
    pub fn tls_addr(&self) -> Option<String> {
        (self.tls_port != 0).then(|| join_host_port(&self.bind, self.tls_port))
    }

    /// The certificate files, when TLS is used on any port.
    pub fn tls_files(&self) -> Option<crate::tls::TlsFiles> {
        if self.tls_port == 0 && !self.tls_cluster {
            return None;
        }
        Some(crate::tls::TlsFiles {
            cert: self.tls_cert_file.clone().unwrap_or_default(),
            key: self.tls_key_file.clone().unwrap_or_default(),
            ca: self.tls_ca_cert_file.clone(),
            auth_clients: self.tls_auth_clients,
        })
    }

    pub fn peer_addr(&self) -> String {
        join_host_port(&self.bind, self.peer_port())
    }

    /// The metrics listener, or `None` when disabled.
    pub fn metrics_socket(&self) -> Result<Option<SocketAddr>, String> {
        if self.metrics_addr.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        self.metrics_addr
            .parse()
            .map(Some)
            .map_err(|_| format!("--metrics-addr must be host:port or 'off', not '{}'", self.metrics_addr))
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_bulk_len: self.proto_max_bulk_len,
            max_args: self.max_args,
            max_request_len: self.max_request_len,
            ..Limits::default()
        }
    }

    /// The members to bootstrap with: `--initial-cluster`, or this node alone.
    pub fn initial_members(&self) -> Result<BTreeMap<u64, (String, String)>, String> {
        let mut members = BTreeMap::new();
        if self.initial_cluster.trim().is_empty() {
            members.insert(self.node_id, (self.peer_addr(), self.client_addr()));
            return Ok(members);
        }
        for item in self.initial_cluster.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || format!("--initial-cluster: '{item}' is not id=peer-host:port[/client-host:port]");
            let (id, addrs) = item.split_once('=').ok_or_else(bad)?;
            let id: u64 = id.trim().parse().ok().filter(|id| *id > 0).ok_or_else(bad)?;
            let (peer, client) = match addrs.split_once('/') {
                Some((p, c)) => (p.to_string(), c.to_string()),
                None => {
                    let (host, port) = addrs.rsplit_once(':').ok_or_else(bad)?;
                    let port: u16 = port.parse().map_err(|_| bad())?;
                    let client_port = port.checked_sub(10000).ok_or_else(bad)?;
                    (addrs.to_string(), format!("{host}:{client_port}"))
                }
            };
            if peer.rsplit_once(':').is_none() || client.rsplit_once(':').is_none() {
                return Err(bad());
            }
            if members.insert(id, (peer, client)).is_some() {
                return Err(format!("--initial-cluster names node {id} twice"));
            }
        }
        if !members.contains_key(&self.node_id) {
            return Err(format!("--initial-cluster does not name this node (--node-id {})", self.node_id));
        }
        Ok(members)
    }

    /// The address other nodes use to reach this node's peer port.
    pub fn advertised_peer_addr(&self) -> String {
        self.initial_members()
            .ok()
            .and_then(|m| m.get(&self.node_id).map(|(p, _)| p.clone()))
            .unwrap_or_else(|| self.peer_addr())
    }

    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        self.metrics_socket()?;
        let members = self.initial_members()?;
        if members.len() > 1 && self.cluster_secret.is_empty() {
            return Err("a cluster of several nodes needs --cluster-secret (RAFTLOCK_CLUSTER_SECRET)".into());
        }
        if self.node_id == 0 {
            return Err("--node-id must be at least 1".into());
        }
        if self.port == 0 && self.tls_port == 0 {
            return Err("--port 0 needs a --tls-port: there would be no client port".into());
        }
        if self.peer_port() == self.port || self.peer_port() == self.tls_port {
            return Err("--peer-port must differ from --port and --tls-port".into());
        }
        if self.port != 0 && self.port == self.tls_port {
            return Err("--tls-port must differ from --port".into());
        }
        if self.tls_files().is_some() {
            if self.tls_cert_file.is_none() || self.tls_key_file.is_none() {
                return Err("TLS (--tls-port, --tls-cluster) needs --tls-cert-file and --tls-key-file".into());
            }
            if self.tls_ca_cert_file.is_none() && (self.tls_cluster || self.tls_auth_clients != crate::tls::ClientAuth::No) {
                return Err(
                    "--tls-ca-cert-file is needed to check peers (--tls-cluster) and clients (--tls-auth-clients yes|optional)"
                        .into(),
                );
            }
        }
        if self.maxclients == 0 {
            return Err("--maxclients must be at least 1".into());
        }
        if self.proto_max_bulk_len < 1024 || self.max_request_len < self.proto_max_bulk_len {
            return Err("--proto-max-bulk-len must be >= 1024 and <= --max-request-len".into());
        }
        if self.max_request_len > crate::commands::MAX_REQUEST_BYTES {
            // Every log entry must fit the peer transport's frame, or it
            // could never replicate.
            return Err(format!("--max-request-len must be at most {}", crate::commands::MAX_REQUEST_BYTES));
        }
        if self.request_timeout_ms == 0 || self.request_timeout_ms > crate::keyspace::MAX_RETRY_WINDOW_MS {
            return Err(format!(
                "--request-timeout-ms must be between 1 and {} (retries of a command are recognised for that long)",
                crate::keyspace::MAX_RETRY_WINDOW_MS
            ));
        }
        if self.heartbeat_ms == 0 || self.election_timeout_ms <= 2 * self.heartbeat_ms {
            return Err("--election-timeout-ms must exceed twice --heartbeat-ms".into());
        }
        Ok(())
    }
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// `yes` or `no`, as Redis's boolean settings.
pub fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err("argument must be 'yes' or 'no'".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_readme() {
        let c = Config::defaults();
        assert_eq!(c.client_addr(), "127.0.0.1:6379");
        assert_eq!(c.peer_addr(), "127.0.0.1:16379");
        assert_eq!(c.metrics_socket().unwrap(), Some("127.0.0.1:9379".parse().unwrap()));
        assert_eq!(c.node_id, 1);
        assert!(c.validate().is_ok());
        assert!(c.protected_mode && c.requirepass.is_none());
    }

    #[test]
    fn protected_mode_takes_yes_or_no() {
        assert!(!Config::parse_from(["raftlock", "--protected-mode", "no"]).protected_mode);
        assert!(Config::parse_from(["raftlock", "--protected-mode", "YES"]).protected_mode);
        assert!(Config::try_parse_from(["raftlock", "--protected-mode", "maybe"]).is_err());
        assert!(Config::try_parse_from(["raftlock", "--protected-mode"]).is_err());
    }

    #[test]
    fn initial_cluster_parses_and_must_name_this_node() {
        let c = Config::parse_from([
            "raftlock",
            "--node-id",
            "2",
            "--cluster-secret",
            "s",
            "--initial-cluster",
            "1=127.0.0.1:16379,2=127.0.0.1:16380/127.0.0.1:7000",
        ]);
        let m = c.initial_members().unwrap();
        assert_eq!(m[&1], ("127.0.0.1:16379".to_string(), "127.0.0.1:6379".to_string()));
        assert_eq!(m[&2], ("127.0.0.1:16380".to_string(), "127.0.0.1:7000".to_string()));
        assert!(c.validate().is_ok());
        let c = Config::parse_from(["raftlock", "--node-id", "3", "--initial-cluster", "1=127.0.0.1:16379"]);
        assert!(c.initial_members().is_err());
        let c = Config::parse_from(["raftlock", "--initial-cluster", "1=127.0.0.1:16379,2=127.0.0.1:16380"]);
        assert!(c.validate().is_err(), "several nodes without a secret");
        let c = Config::parse_from(["raftlock", "--initial-cluster", "1=nonsense"]);
        assert!(c.initial_members().is_err());
    }

    #[test]
    fn bad_values_are_rejected() {
        let c = Config::parse_from(["raftlock", "--metrics-addr", "nowhere"]);
        assert!(c.validate().is_err());
        let c = Config::parse_from(["raftlock", "--port", "7000", "--peer-port", "7000"]);
        assert!(c.validate().is_err());
        let c = Config::parse_from(["raftlock", "--metrics-addr", "off"]);
        assert_eq!(c.metrics_socket().unwrap(), None);
        // A retry is recognised only while the session keeps the reply: the
        // request timeout (how long a node retries) is bounded below that.
        for bad in ["0", "300001"] {
            let c = Config::parse_from(["raftlock", "--request-timeout-ms", bad]);
            assert!(c.validate().unwrap_err().contains("--request-timeout-ms"), "{bad}");
        }
        assert!(Config::parse_from(["raftlock", "--request-timeout-ms", "300000"]).validate().is_ok());
        const _: () = assert!(crate::keyspace::MAX_RETRY_WINDOW_MS < crate::keyspace::SESSION_TTL_MS);
    }
}

