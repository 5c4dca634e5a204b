//! raftlock: a lock server that speaks the Redis protocol and replicates every
//! command through Raft onto RocksDB. Locks are leases in log time with
//! strictly increasing fencing tokens; see `DESIGN.md` for the architecture.
//!
//! # Layout
//!
//! - [`config`]: flags, environment variables, validation.
//! - [`protocol`]: RESP framing with limits, [`protocol::Reply`] and its RESP2/RESP3
//!   encodings, the argument cursor.
//! - [`commands`]: the command table and one file per command family; `apply`
//!   (log entries, every node) and `execute_read` (leader reads).
//! - [`keyspace`]: PURE replicated data: keys, values, versions, expiry in log
//!   time, events out, snapshot encoding. No tokio, openraft or rocksdb.
//! - [`scripting`]: the deterministic, sandboxed Lua 5.1 for `EVAL`.
//! - [`clock`]: the log-time source, monotonic and anchored, behind a trait.
//! - [`storage`]: the only module that imports `rocksdb`.
//! - [`raft`]: the only module that imports `openraft`: types, log store, state
//!   machine adapter, the authenticated peer transport, and [`raft::Consensus`],
//!   the handle the server uses (group commit, ReadIndex batching, forwarding
//!   to the leader, membership changes).
//! - [`server`]: listener, connections, pub/sub hub, expiry timer, node wiring.
//! - [`metrics`]: metric names, descriptions, the Prometheus exporter.

pub mod clock;
pub mod commands;
pub mod config;
pub mod keyspace;
pub mod metrics;
pub mod planted;
pub mod protocol;
pub mod raft;
pub mod scripting;
pub mod server;
pub mod storage;
