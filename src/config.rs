//! Command-line flags, each also read from `RAFTLOCK_<NAME>`, and their
//! validation. No I/O beyond reading the environment.

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
    /// Raft heartbeat interval in ms.
    #[arg(long, env = "RAFTLOCK_HEARTBEAT_MS", default_value_t = 100)]
    pub heartbeat_ms: u64,
    /// Lower bound of the election timeout in ms (the upper bound is twice it).
    #[arg(long, env = "RAFTLOCK_ELECTION_TIMEOUT_MS", default_value_t = 500)]
    pub election_timeout_ms: u64,
    /// How long a command waits for the cluster before replying an error, ms.
    #[arg(long, env = "RAFTLOCK_REQUEST_TIMEOUT_MS", default_value_t = 5000)]
    pub request_timeout_ms: u64,
}

impl Config {
    /// A configuration with every default, as `raftlock` with no arguments.
    pub fn defaults() -> Config {
        Config::parse_from(["raftlock"])
    }

    pub fn peer_port(&self) -> u16 {
        self.peer_port.unwrap_or_else(|| self.port.wrapping_add(10000))
    }

    pub fn client_addr(&self) -> String {
        join_host_port(&self.bind, self.port)
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

    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        self.metrics_socket()?;
        if self.node_id == 0 {
            return Err("--node-id must be at least 1".into());
        }
        if self.peer_port() == self.port {
            return Err("--peer-port must differ from --port".into());
        }
        if self.maxclients == 0 {
            return Err("--maxclients must be at least 1".into());
        }
        if self.proto_max_bulk_len < 1024 || self.max_request_len < self.proto_max_bulk_len {
            return Err("--proto-max-bulk-len must be >= 1024 and <= --max-request-len".into());
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
    }

    #[test]
    fn bad_values_are_rejected() {
        let c = Config::parse_from(["raftlock", "--metrics-addr", "nowhere"]);
        assert!(c.validate().is_err());
        let c = Config::parse_from(["raftlock", "--port", "7000", "--peer-port", "7000"]);
        assert!(c.validate().is_err());
        let c = Config::parse_from(["raftlock", "--metrics-addr", "off"]);
        assert_eq!(c.metrics_socket().unwrap(), None);
    }
}
