//! raftlock: a lock server that speaks the Redis protocol and replicates every
//! command through Raft onto RocksDB. Locks are leases in log time with
//! strictly increasing fencing tokens; see `DESIGN.md` for the architecture.
//!
//! # Layout
//!
//! - [`config`]: flags, environment variables, validation.
//! - [`protocol`]: RESP framing with limits, [`protocol::Reply`] and its RESP2/RESP3
//!   encodings, the argument cursor.
//! - [`commands`]: the command table and one file per command family (strings,
//!   keys, hashes, lists, sets, sorted sets, locks, ...); `apply` (log
//!   entries, every node) and `execute_read` (leader reads). Redis's 80-bit
//!   `long double` for `INCRBYFLOAT` is emulated there, so replies match
//!   Redis digit for digit and every node computes the same bits.
//! - [`keyspace`]: PURE replicated data: keys, values, versions, expiry in log
//!   time, events out, snapshot encoding. No tokio, openraft or rocksdb.
//! - [`scripting`]: the deterministic, sandboxed Lua 5.1 for `EVAL`, and the
//!   lock scripts libraries send word for word, run without Lua.
//! - [`clock`]: the log-time source, monotonic and anchored, behind a trait.
//! - [`storage`]: the only module that imports `rocksdb` (Raft's vote and
//!   metadata), and the Raft log's own segment files ([`storage::wal`]:
//!   written into space allocated ahead, so a group commit's `fdatasync`
//!   does not also commit a new file size).
//! - [`raft`]: the only module that imports `openraft`: types, log store, state
//!   machine adapter, the authenticated peer transport, and [`raft::Consensus`],
//!   the handle the server uses (group commit, ReadIndex batching, forwarding
//!   to the leader, membership changes).
//! - [`server`]: listener, connections, pub/sub hub, client-side caching
//!   (`CLIENT TRACKING`), the stored-only Redis parameters, expiry timer, the
//!   hot-lock rankings of `LOCK.TOP`, the metrics address (`/metrics` and the
//!   dashboard page), node wiring.
//! - [`status`]: `raftlock status`, the members table for operators (a small
//!   RESP client).
//! - [`backup`]: `raftlock backup` and `raftlock restore` (the file format
//!   and the recoveries, `--force-new-cluster` too, are in `raft::recovery`).
//! - [`metrics`]: metric names, descriptions, the Prometheus exporter.
//! - [`tls`]: rustls for the TLS client port and mutual TLS between peers.
//!
//! The cargo feature `server` (default) is the node: [`config`], [`storage`],
//! [`raft`], [`server`], [`metrics`] and [`tls`]. Without it the crate is the
//! pure part alone (no RocksDB, openraft or network), which the fuzz targets
//! (`tests/fuzz`) build.
//!
//! # Snapshots without stopping the world
//!
//! Two designs avoid encoding the keyspace under the state lock: keep the
//! state machine in RocksDB (each entry's changes in its write batch, a
//! snapshot is a RocksDB snapshot streamed out), or keep it in memory in
//! persistent maps whose clone is O(1). raftlock does the second. The
//! keyspace stays pure (no storage in [`keyspace`]), reads stay in-memory
//! lookups, apply stays one lock and no I/O, and the log's group commit is the
//! only write on the hot path (the commit index openraft saves after each
//! commit goes to RocksDB from a thread of its own, the newest one handed
//! over, at most every 10 ms rather than once per entry: one that lags
//! only makes a start replay less); the cost is a copy of
//! each map node the first time it changes after a snapshot. The keys are a
//! persistent hash trie (`keyspace::map`: a lookup follows one hash's bits,
//! not a binary search of names in every node as the `imbl::OrdMap` before
//! it did), ordered by that hash, which `SCAN` takes as its cursor. The clone is encoded on a
//! thread of its own, at a lower CPU priority than the threads that answer
//! clients, straight into a file beside the database (`storage`; no copy
//! of the encoding in memory), not through the WAL the log uses. It is
//! fsynced a megabyte at a time, and the file it replaces is freed a few
//! megabytes at a time once nothing maps it: the log's fsyncs share the
//! filesystem's journal with both, and waited tens of milliseconds behind a
//! big fsync or a big deletion.
//! That file is mapped, not read, when a node starts (it is decoded where it
//! lies) and when it is sent to a follower (openraft reads its chunks from
//! the mapping): its pages are the page cache's, never a copy in the heap.
//! The cost a design in RocksDB would not have: a start decodes the whole
//! keyspace, and replays the log since the snapshot, before it serves. That
//! replay is bounded twice: a snapshot every `--snapshot-logs` entries, and
//! one whenever the commands applied since the last hold
//! `--snapshot-log-bytes` (an entry may hold thousands of pipelined
//! commands, so entries alone bound nothing). A snapshot a leader sends is
//! received into a file, not memory, and installed from it mapped.

#[cfg(feature = "server")]
pub mod backup;
pub mod clock;
pub mod commands;
#[cfg(feature = "server")]
pub mod config;
pub mod keyspace;
#[cfg(feature = "server")]
pub mod metrics;
pub mod planted;
pub mod protocol;
#[cfg(feature = "server")]
pub mod raft;
pub mod scripting;
#[cfg(feature = "server")]
mod sched;
#[cfg(feature = "server")]
pub mod server;
pub mod status;
#[cfg(feature = "server")]
pub mod storage;
#[cfg(feature = "server")]
pub mod tls;

/// The Redis version clients are told (`INFO`, `HELLO`, a script's
/// `redis.REDIS_VERSION`): raftlock implements Redis 7 behaviour.
pub const REDIS_VERSION: &str = "7.2.4";
