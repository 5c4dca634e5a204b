//! The one command table: name, arity, flags, key positions, docs, handler.

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx};
use crate::protocol::{Args, Reply};

use super::{bitfield, dump, functions, geo, hashes, hll, keys, lists, locks, pubsub, scripts, server, sets, sort, streams, strings, transactions, zsets, CmdResult};

/// How a command runs.
#[derive(Clone, Copy)]
pub enum Handler {
    /// Changes replicated state: goes through the Raft log, runs on apply.
    Write(fn(&mut Keyspace, &mut ExecCtx, Args) -> CmdResult),
    /// Reads replicated state on the leader after a ReadIndex round.
    Read(fn(&Keyspace, &ReadCtx, Args) -> CmdResult),
    /// Touches only the connection or the node; handled in `server/`.
    Local,
}

/// One row of the command table.
pub struct CommandSpec {
    /// Lower-case name, as `COMMAND` reports it.
    pub name: &'static str,
    /// Redis's convention: `n` exactly n arguments (name included), `-n` at least n.
    pub arity: i64,
    pub flags: &'static [&'static str],
    pub first_key: i64,
    pub last_key: i64,
    pub key_step: i64,
    /// For commands whose keys are counted by an argument (`EVAL script
    /// numkeys key...`, `SINTERCARD numkeys key...`): that argument's
    /// position, the keys following it; 0 for the rest. Redis's
    /// `movablekeys`, added to the keys that `first_key` .. `last_key` name.
    pub numkeys_at: usize,
    /// Not `fast`, but bounded by the values at its keys (and how many keys
    /// it names), not by its other arguments: quick while those values are
    /// small (`commands::may_run_long_command`). Not set for commands whose
    /// counts or offsets are arguments (`SRANDMEMBER key -1000000`,
    /// `SETRANGE`, `SETBIT`), that match patterns (`*SCAN ... MATCH`), that
    /// walk the whole keyspace (`KEYS`, `SCAN`, `FLUSHALL`), or scripts.
    pub bounded_by_keys: bool,
    /// Redis command group (`string`, `generic`, `connection`, ...).
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub handler: Handler,
}

impl CommandSpec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        if self.arity >= 0 { argc == self.arity } else { argc >= -self.arity }
    }

    pub fn is_write(&self) -> bool {
        matches!(self.handler, Handler::Write(_))
    }

    /// The key arguments of `argv`, by the table's key positions and, for a
    /// command with `numkeys`, the keys that argument counts (none if it is
    /// not a count the arguments can hold).
    pub fn keys<'a>(&self, argv: &'a [Bytes]) -> impl Iterator<Item = &'a Bytes> {
        self.key_positions(argv).map(move |i| &argv[i])
    }

    /// Where [`CommandSpec::keys`] finds the keys in `argv`, in order: the
    /// table's fixed positions (`first_key` .. `last_key`), then those a
    /// `numkeys` argument counts. Every position is within `argv`.
    pub fn key_positions(&self, argv: &[Bytes]) -> impl Iterator<Item = usize> {
        let len = argv.len() as i64;
        let first = self.first_key;
        let last = if self.last_key < 0 { len + self.last_key } else { self.last_key.min(len - 1) };
        let step = self.key_step.max(1);
        // No fixed keys: an empty range (`last` below `first`).
        let (first, last) = if first > 0 { (first, last) } else { (1, 0) };
        let fixed = (first..=last).step_by(step as usize);
        let counted = match self.numkeys_at {
            // The streams named after STREAMS.
            0 if matches!(self.name, "xread" | "xreadgroup") => super::streams::read_key_positions(argv),
            0 => 0..0,
            at => {
                let n = argv.get(at).and_then(|n| crate::protocol::parse_i64(n)).unwrap_or(0).max(0) as usize;
                let from = (at + 1).min(argv.len());
                from..from.saturating_add(n).min(argv.len())
            }
        };
        // SORT's and GEORADIUS's STORE destination, where an option names it.
        let stored = match self.name {
            "sort" => super::sort::store_key_position(argv),
            "georadius" | "georadiusbymember" => super::geo::store_key_position(argv),
            _ => None,
        };
        let argc = argv.len();
        fixed.map(|i| i as usize).filter(move |i| *i < argc).chain(counted).chain(stored)
    }

    /// A blocking pop's retry after a push to `key` woke it: `argv` with
    /// `key` moved to the first key position, the others in their order, so
    /// that the retry pops from the key that was pushed to, as Redis serves
    /// a woken client from the key that became ready (not from the first of
    /// its keys). `None` if that changes nothing or the command's keys are
    /// not all sources (`BLMOVE` names its destination).
    pub fn with_key_first(&self, argv: &[Bytes], key: &Bytes) -> Option<Vec<Bytes>> {
        if !matches!(self.name, "blpop" | "brpop" | "bzpopmin" | "bzpopmax" | "blmpop" | "bzmpop") {
            return None;
        }
        let at: Vec<usize> = self.key_positions(argv).collect();
        let found = at.iter().position(|i| argv[*i] == key)?;
        if found == 0 {
            return None;
        }
        let mut reordered = argv.to_vec();
        let mut keys: Vec<Bytes> = at.iter().map(|i| argv[*i].clone()).collect();
        keys[..=found].rotate_right(1);
        for (i, k) in at.iter().zip(keys) {
            reordered[*i] = k;
        }
        Some(reordered)
    }
}

macro_rules! cmd {
    (@spec $name:literal, $arity:expr, [$($flag:literal),*], ($f:expr, $l:expr, $s:expr, numkeys $n:expr), $group:literal, $since:literal, $summary:literal, $handler:expr, $bounded:expr) => {
        CommandSpec {
            name: $name, arity: $arity, flags: &[$($flag),*], first_key: $f, last_key: $l, key_step: $s, numkeys_at: $n,
            bounded_by_keys: $bounded, group: $group, since: $since, summary: $summary, handler: $handler,
        }
    };
    ($name:literal, $arity:expr, [$($flag:literal),*], ($f:expr, $l:expr, $s:expr, numkeys $n:expr), $group:literal, $since:literal, $summary:literal, $handler:expr) => {
        cmd!(@spec $name, $arity, [$($flag),*], ($f, $l, $s, numkeys $n), $group, $since, $summary, $handler, false)
    };
    ($name:literal, $arity:expr, [$($flag:literal),*], ($f:expr, $l:expr, $s:expr), $group:literal, $since:literal, $summary:literal, $handler:expr) => {
        cmd!(@spec $name, $arity, [$($flag),*], ($f, $l, $s, numkeys 0), $group, $since, $summary, $handler, false)
    };
    // A command whose work is bounded by the values at its keys
    // (`CommandSpec::bounded_by_keys`).
    ($name:literal, $arity:expr, [$($flag:literal),*], ($f:expr, $l:expr, $s:expr), $group:literal, $since:literal, $summary:literal, $handler:expr, bounded_by_keys) => {
        cmd!(@spec $name, $arity, [$($flag),*], ($f, $l, $s, numkeys 0), $group, $since, $summary, $handler, true)
    };
}

use Handler::{Local, Read, Write};

pub static COMMANDS: &[CommandSpec] = &[
    // connection
    cmd!("ping", -1, ["fast", "stale"], (0, 0, 0), "connection", "1.0.0", "Returns the server's liveliness response.", Local),
    cmd!("echo", 2, ["fast"], (0, 0, 0), "connection", "1.0.0", "Returns the given string.", Local),
    cmd!("hello", -1, ["noscript", "loading", "stale", "fast", "no_auth"], (0, 0, 0), "connection", "6.0.0", "Handshakes with the server: protocol version, client name.", Local),
    cmd!("auth", -2, ["noscript", "loading", "stale", "fast", "no_auth"], (0, 0, 0), "connection", "1.0.0", "AUTH [username] password: authenticates the connection as the default user.", Local),
    cmd!("select", 2, ["loading", "stale", "fast"], (0, 0, 0), "connection", "1.0.0", "Changes the selected database; only database 0 exists.", Local),
    cmd!("client", -2, ["loading", "stale"], (0, 0, 0), "connection", "2.4.0", "CLIENT ID|SETNAME|GETNAME|SETINFO|INFO|LIST|KILL|UNBLOCK|PAUSE|UNPAUSE|NO-EVICT|NO-TOUCH|REPLY|TRACKING|CACHING.", Local),
    cmd!("quit", -1, ["noscript", "loading", "stale", "fast", "no_auth"], (0, 0, 0), "connection", "1.0.0", "Closes the connection.", Local),
    cmd!("reset", 1, ["noscript", "loading", "stale", "fast", "no_auth"], (0, 0, 0), "connection", "6.2.0", "Resets the connection.", Local),
    // server
    cmd!("info", -1, ["loading", "stale"], (0, 0, 0), "server", "1.0.0", "Returns information and statistics about the server.", Local),
    cmd!("command", -1, ["loading", "stale"], (0, 0, 0), "server", "2.8.13", "COMMAND [COUNT|DOCS|INFO|LIST]: details about commands.", Local),
    cmd!("acl", -2, ["admin", "noscript", "loading", "stale"], (0, 0, 0), "server", "6.0.0", "ACL SETUSER|GETUSER|DELUSER|LIST|USERS|WHOAMI|CAT|GENPASS|LOAD|SAVE: users, replicated through the log.", Local),
    cmd!("config", -2, ["admin", "noscript", "loading", "stale"], (0, 0, 0), "server", "2.0.0", "CONFIG GET|SET|RESETSTAT|REWRITE.", Local),
    cmd!("time", 1, ["loading", "stale", "fast"], (0, 0, 0), "server", "2.6.0", "Returns the server's wall-clock time.", Local),
    cmd!("move", 3, ["write", "fast"], (1, 1, 1), "generic", "1.0.0", "MOVE key db: only database 0 exists, so every MOVE is refused as Redis refuses one (the same database, or one out of range).", Local),
    cmd!("swapdb", 3, ["write", "fast"], (0, 0, 0), "server", "4.0.0", "SWAPDB index1 index2: only database 0 exists; SWAPDB 0 0 changes nothing.", Local),
    cmd!("save", 1, ["admin", "noscript", "no_async_loading", "no_multi"], (0, 0, 0), "server", "1.0.0", "SAVE: builds a snapshot of this node's state now and answers once it is on disk (every acknowledged write already is, in the Raft log; a snapshot shortens the log a restart replays).", Local),
    cmd!("bgsave", -1, ["admin", "noscript", "no_async_loading"], (0, 0, 0), "server", "1.0.0", "BGSAVE [SCHEDULE]: starts a snapshot of this node's state and answers at once.", Local),
    cmd!("bgrewriteaof", 1, ["admin", "noscript", "no_async_loading"], (0, 0, 0), "server", "1.0.0", "BGREWRITEAOF: the Raft log is this node's append-only file; a snapshot compacts it (started, answered at once).", Local),
    cmd!("shutdown", -1, ["admin", "noscript", "loading", "stale", "no_multi", "allow_busy"], (0, 0, 0), "server", "1.0.0", "SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: stops this node as SIGTERM does (SAVE takes a snapshot first). The cluster goes on while a majority runs.", Local),
    cmd!("latency", -2, ["admin", "noscript", "loading", "stale"], (0, 0, 0), "server", "2.8.13", "LATENCY LATEST|HISTORY|GRAPH|DOCTOR|RESET|HISTOGRAM|HELP: this node's latency monitor (latency-monitor-threshold) and per-command latency histograms (latency-tracking), each command timed as SLOWLOG times it.", Local),
    cmd!("monitor", 1, ["admin", "noscript", "loading", "stale"], (0, 0, 0), "server", "1.0.0", "MONITOR: streams every command this node's clients send (admin commands never; AUTH's arguments redacted).", Local),
    cmd!("slowlog", -2, ["admin", "loading", "stale"], (0, 0, 0), "server", "2.2.12", "SLOWLOG GET [count] | LEN | RESET | HELP: this node's commands that took at least slowlog-log-slower-than microseconds, from being read to being answered (a write's Raft round included).", Local),
    cmd!("lastsave", 1, ["loading", "stale", "fast"], (0, 0, 0), "server", "1.0.0", "Returns the Unix time now: every acknowledged write is already on disk (INFO's rdb_changes_since_last_save is 0).", Local),
    cmd!("cluster", -2, ["loading", "stale"], (0, 0, 0), "cluster", "3.0.0", "Answers as a Redis without cluster mode: a raftlock cluster is one keyspace replicated whole, not shards.", Local),
    cmd!("readonly", 1, ["loading", "stale", "fast"], (0, 0, 0), "cluster", "3.0.0", "Answers as a Redis without cluster mode (every node serves linearizable reads).", Local),
    cmd!("readwrite", 1, ["loading", "stale", "fast"], (0, 0, 0), "cluster", "3.0.0", "Answers as a Redis without cluster mode.", Local),
    cmd!("asking", 1, ["fast"], (0, 0, 0), "cluster", "3.0.0", "Answers as a Redis without cluster mode.", Local),
    cmd!("module", -2, ["admin", "noscript"], (0, 0, 0), "server", "4.0.0", "MODULE LIST | LOAD | LOADEX | UNLOAD | HELP: no module is loaded (LIST is empty), and loading one is refused, as by a Redis with enable-module-command no (its default).", Local),
    cmd!("lolwut", -1, ["readonly", "fast"], (0, 0, 0), "server", "5.0.0", "LOLWUT [VERSION v]: the version line Redis ends its drawing with (raftlock draws nothing).", Local),
    cmd!("replicaof", 3, ["admin", "noscript", "stale", "no_async_loading"], (0, 0, 0), "server", "5.0.0", "REPLICAOF NO ONE: OK, every node already takes writes. REPLICAOF host port is refused: raftlock nodes replicate by Raft (RAFT.NODE ADD), never as Redis replicas.", Local),
    cmd!("slaveof", 3, ["admin", "noscript", "stale", "no_async_loading"], (0, 0, 0), "server", "1.0.0", "SLAVEOF: REPLICAOF's old name.", Local),
    cmd!("debug", -2, ["admin", "noscript", "loading", "stale"], (0, 0, 0), "server", "1.0.0", "Refused, as by a Redis with enable-debug-command no (its default).", Local),
    cmd!("role", 1, ["noscript", "loading", "stale", "fast"], (0, 0, 0), "server", "2.8.12", "Returns master, as INFO replication does: every node takes writes (a follower forwards them).", Local),
    cmd!("wait", 3, ["noscript"], (0, 0, 0), "connection", "3.0.0", "WAIT numreplicas timeout: 0 at once. No node is a Redis replica (ROLE, INFO replication); a write is on a majority of the Raft cluster before it is acknowledged, which WAIT cannot add to.", Local),
    cmd!("waitaof", 4, ["noscript"], (0, 0, 0), "connection", "7.2.0", "WAITAOF numlocal numreplicas timeout: [1, 0] at once. Every acknowledged write is already fsynced here (the Raft log); no node is a Redis replica.", Local),
    cmd!("dbsize", 1, ["readonly", "fast"], (0, 0, 0), "server", "1.0.0", "Returns the number of keys.", Read(server::dbsize)),
    cmd!("flushdb", -1, ["write"], (0, 0, 0), "server", "1.0.0", "Removes all keys.", Write(server::flush)),
    cmd!("flushall", -1, ["write"], (0, 0, 0), "server", "1.0.0", "Removes all keys.", Write(server::flush)),
    cmd!("raft.node", -3, ["admin", "noscript"], (0, 0, 0), "server", "0.1.0", "RAFT.NODE ADD id peer-addr client-addr | RAFT.NODE REMOVE id: changes the cluster's members.", Local),
    cmd!("raft.backup", 1, ["admin", "noscript"], (0, 0, 0), "server", "0.1.0", "Returns a backup of the replicated state (a file for raftlock restore), taken on the leader with every acknowledged write in it.", Local),
    cmd!("raft.digest", 1, ["loading", "stale"], (0, 0, 0), "server", "0.1.0", "Returns this node's last applied index and a SHA1 of its keyspace there (replicas that applied the same entries agree).", Local),
    cmd!("raft.info", 1, ["loading", "stale"], (0, 0, 0), "server", "0.1.0", "Returns the Raft role, term, leader, indexes and members.", Local),
    // strings
    cmd!("set", -3, ["write", "denyoom"], (1, 1, 1), "string", "1.0.0", "SET key value [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL].", Write(strings::set)),
    cmd!("setnx", 3, ["write", "denyoom", "fast"], (1, 1, 1), "string", "1.0.0", "Sets a key only if it does not exist: 1 or 0.", Write(strings::setnx)),
    cmd!("setex", 4, ["write", "denyoom"], (1, 1, 1), "string", "2.0.0", "SETEX key seconds value.", Write(strings::setex)),
    cmd!("psetex", 4, ["write", "denyoom"], (1, 1, 1), "string", "2.6.0", "PSETEX key milliseconds value.", Write(strings::psetex)),
    cmd!("getset", 3, ["write", "denyoom", "fast"], (1, 1, 1), "string", "1.0.0", "Sets a value and returns the old one.", Write(strings::getset)),
    cmd!("mget", -2, ["readonly", "fast"], (1, -1, 1), "string", "1.0.0", "Returns the values of several keys.", Read(strings::mget)),
    cmd!("mset", -3, ["write", "denyoom"], (1, -1, 2), "string", "1.0.1", "Sets several keys.", Write(strings::mset), bounded_by_keys),
    cmd!("msetnx", -3, ["write", "denyoom"], (1, -1, 2), "string", "1.0.1", "Sets several keys, or none if any exists: 1 or 0.", Write(strings::msetnx), bounded_by_keys),
    cmd!("strlen", 2, ["readonly", "fast"], (1, 1, 1), "string", "2.2.0", "Returns the length of a string value.", Read(strings::strlen)),
    cmd!("append", 3, ["write", "denyoom", "fast"], (1, 1, 1), "string", "2.0.0", "Appends to a string; the new length.", Write(strings::append)),
    cmd!("get", 2, ["readonly", "fast"], (1, 1, 1), "string", "1.0.0", "Returns the string value of a key.", Read(strings::get)),
    cmd!("getdel", 2, ["write", "fast"], (1, 1, 1), "string", "6.2.0", "Returns the string value of a key and deletes it.", Write(strings::getdel)),
    cmd!("incr", 2, ["write", "denyoom", "fast"], (1, 1, 1), "string", "1.0.0", "Increments the integer value of a key by one.", Write(strings::incr)),
    cmd!("incrby", 3, ["write", "denyoom", "fast"], (1, 1, 1), "string", "1.0.0", "Increments the integer value of a key by a number.", Write(strings::incrby)),
    cmd!("decr", 2, ["write", "denyoom", "fast"], (1, 1, 1), "string", "1.0.0", "Decrements the integer value of a key by one.", Write(strings::decr)),
    cmd!("decrby", 3, ["write", "denyoom", "fast"], (1, 1, 1), "string", "1.0.0", "Decrements the integer value of a key by a number.", Write(strings::decrby)),
    cmd!("incrbyfloat", 3, ["write", "denyoom", "fast"], (1, 1, 1), "string", "2.6.0", "Increments the float value of a key.", Write(strings::incrbyfloat)),
    cmd!("getex", -2, ["write", "fast"], (1, 1, 1), "string", "6.2.0", "GETEX key [EX s|PX ms|EXAT t|PXAT t|PERSIST]: the value, setting its expiry.", Write(strings::getex)),
    cmd!("getrange", 4, ["readonly"], (1, 1, 1), "string", "2.4.0", "GETRANGE key start end: a substring.", Read(strings::getrange), bounded_by_keys),
    cmd!("substr", 4, ["readonly"], (1, 1, 1), "string", "1.0.0", "SUBSTR key start end: the same as GETRANGE.", Read(strings::getrange), bounded_by_keys),
    cmd!("setrange", 4, ["write", "denyoom"], (1, 1, 1), "string", "2.2.0", "SETRANGE key offset value: overwrites part of a string; its length.", Write(strings::setrange)),
    cmd!("setbit", 4, ["write", "denyoom"], (1, 1, 1), "bitmap", "2.2.0", "SETBIT key offset 0|1: sets a bit; its old value.", Write(strings::setbit)),
    cmd!("bitfield", -2, ["write", "denyoom"], (1, 1, 1), "bitmap", "3.2.0", "BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset increment] [OVERFLOW WRAP|SAT|FAIL] ...: integers of any width at bit offsets.", Write(bitfield::bitfield)),
    cmd!("bitfield_ro", -2, ["readonly", "fast"], (1, 1, 1), "bitmap", "6.0.0", "BITFIELD_RO key [GET type offset ...]: BITFIELD's reads.", Read(bitfield::bitfield_ro)),
    cmd!("getbit", 3, ["readonly", "fast"], (1, 1, 1), "bitmap", "2.2.0", "GETBIT key offset: a bit of a string.", Read(strings::getbit)),
    cmd!("bitcount", -2, ["readonly"], (1, 1, 1), "bitmap", "2.6.0", "BITCOUNT key [start end [BYTE|BIT]]: the number of set bits.", Read(strings::bitcount), bounded_by_keys),
    cmd!("pfadd", -2, ["write", "denyoom", "fast"], (1, 1, 1), "hyperloglog", "2.8.9", "PFADD key [element ...]: adds elements to a HyperLogLog (Redis's string format); 1 if it changed.", Write(hll::pfadd)),
    cmd!("pfcount", -2, ["readonly", "may_replicate"], (1, -1, 1), "hyperloglog", "2.8.9", "PFCOUNT key [key ...]: the estimated number of distinct elements of the union (Redis 7's estimate).", Read(hll::pfcount), bounded_by_keys),
    cmd!("pfmerge", -2, ["write", "denyoom"], (1, -1, 1), "hyperloglog", "2.8.9", "PFMERGE destkey [sourcekey ...]: stores the union of HyperLogLogs.", Write(hll::pfmerge), bounded_by_keys),
    cmd!("lcs", -3, ["readonly"], (1, 2, 1), "string", "7.0.0", "LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]: the longest common subsequence (its time grows with the product of the two lengths: never counted quick).", Read(strings::lcs)),
    cmd!("bitpos", -3, ["readonly"], (1, 1, 1), "bitmap", "2.8.7", "BITPOS key bit [start [end [BYTE|BIT]]]: the first bit set to 0 or 1.", Read(strings::bitpos), bounded_by_keys),
    cmd!("bitop", -4, ["write", "denyoom"], (2, -1, 1), "bitmap", "2.6.0", "BITOP AND|OR|XOR|NOT destkey key [key ...]: stores a bitwise operation over strings; its length.", Write(strings::bitop), bounded_by_keys),
    // keys
    cmd!("del", -2, ["write"], (1, -1, 1), "generic", "1.0.0", "Deletes one or more keys.", Write(keys::del), bounded_by_keys),
    cmd!("unlink", -2, ["write", "fast"], (1, -1, 1), "generic", "4.0.0", "Deletes keys (the same as DEL here).", Write(keys::del)),
    cmd!("exists", -2, ["readonly", "fast"], (1, -1, 1), "generic", "1.0.0", "Counts how many of the given keys exist.", Read(keys::exists)),
    cmd!("touch", -2, ["readonly", "fast"], (1, -1, 1), "generic", "3.2.1", "Counts how many of the given keys exist (no access times are kept).", Read(keys::touch)),
    cmd!("expire", -3, ["write", "fast"], (1, 1, 1), "generic", "1.0.0", "EXPIRE key seconds [NX|XX|GT|LT].", Write(keys::expire)),
    cmd!("pexpire", -3, ["write", "fast"], (1, 1, 1), "generic", "2.6.0", "PEXPIRE key milliseconds [NX|XX|GT|LT].", Write(keys::pexpire)),
    cmd!("expireat", -3, ["write", "fast"], (1, 1, 1), "generic", "1.2.0", "EXPIREAT key unix-seconds [NX|XX|GT|LT].", Write(keys::expireat)),
    cmd!("pexpireat", -3, ["write", "fast"], (1, 1, 1), "generic", "2.6.0", "PEXPIREAT key unix-ms [NX|XX|GT|LT].", Write(keys::pexpireat)),
    cmd!("ttl", 2, ["readonly", "fast"], (1, 1, 1), "generic", "1.0.0", "Returns the remaining time to live in seconds.", Read(keys::ttl)),
    cmd!("pttl", 2, ["readonly", "fast"], (1, 1, 1), "generic", "2.6.0", "Returns the remaining time to live in milliseconds.", Read(keys::pttl)),
    cmd!("persist", 2, ["write", "fast"], (1, 1, 1), "generic", "2.2.0", "Removes the expiry of a key.", Write(keys::persist)),
    cmd!("type", 2, ["readonly", "fast"], (1, 1, 1), "generic", "1.0.0", "Returns the type of the value of a key.", Read(keys::type_of)),
    cmd!("keys", 2, ["readonly"], (0, 0, 0), "generic", "1.0.0", "Returns all key names that match a pattern.", Read(keys::keys)),
    cmd!("scan", -2, ["readonly"], (0, 0, 0), "generic", "2.8.0", "SCAN cursor [MATCH pattern] [COUNT n] [TYPE type].", Read(keys::scan)),
    cmd!("expiretime", 2, ["readonly", "fast"], (1, 1, 1), "generic", "7.0.0", "Returns the Unix time in seconds at which a key expires.", Read(keys::expiretime)),
    cmd!("pexpiretime", 2, ["readonly", "fast"], (1, 1, 1), "generic", "7.0.0", "Returns the Unix time in milliseconds at which a key expires.", Read(keys::pexpiretime)),
    cmd!("randomkey", 1, ["readonly"], (0, 0, 0), "generic", "1.0.0", "Returns a key chosen at random.", Read(keys::randomkey)),
    cmd!("rename", 3, ["write"], (1, 2, 1), "generic", "1.0.0", "RENAME key newkey: renames a key, replacing newkey.", Write(keys::rename), bounded_by_keys),
    cmd!("renamenx", 3, ["write", "fast"], (1, 2, 1), "generic", "1.0.0", "RENAMENX key newkey: renames a key only if newkey does not exist.", Write(keys::renamenx)),
    cmd!("copy", -3, ["write", "denyoom"], (1, 2, 1), "generic", "6.2.0", "COPY source destination [DB 0] [REPLACE]: copies a key.", Write(keys::copy), bounded_by_keys),
    cmd!("dump", 2, ["readonly"], (1, 1, 1), "generic", "2.6.0", "DUMP key: the value serialized as Redis does (RDB version 10), for RESTORE.", Read(dump::dump), bounded_by_keys),
    cmd!("restore", -4, ["write", "denyoom"], (1, 1, 1), "generic", "2.6.0", "RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]: creates a key from a DUMP payload (Redis's, up to RDB version 10).", Write(dump::restore)),
    cmd!("sort", -2, ["write", "denyoom", "movablekeys"], (1, 1, 1), "generic", "1.0.0", "SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA] [STORE destination]: sorts a list, set or sorted set.", Write(sort::sort)),
    cmd!("sort_ro", -2, ["readonly", "movablekeys"], (1, 1, 1), "generic", "7.0.0", "SORT_RO key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]: SORT without STORE.", Read(sort::sort_ro)),
    cmd!("memory", -2, ["readonly"], (2, 2, 1), "server", "4.0.0", "MEMORY USAGE key [SAMPLES count] | STATS | DOCTOR | MALLOC-STATS | PURGE | HELP: the bytes a key takes, estimated; the node's memory.", Read(keys::memory), bounded_by_keys),
    cmd!("object", -2, ["readonly"], (2, 2, 1), "generic", "2.2.3", "OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key | OBJECT HELP.", Read(keys::object)),
    // hashes
    cmd!("hset", -4, ["write", "denyoom", "fast"], (1, 1, 1), "hash", "2.0.0", "HSET key field value [field value ...]: the number of fields added.", Write(hashes::hset)),
    cmd!("hmset", -4, ["write", "denyoom", "fast"], (1, 1, 1), "hash", "2.0.0", "HMSET key field value [field value ...] (deprecated form of HSET).", Write(hashes::hmset)),
    cmd!("hsetnx", 4, ["write", "denyoom", "fast"], (1, 1, 1), "hash", "2.0.0", "Sets a hash field only if it does not exist.", Write(hashes::hsetnx)),
    cmd!("hget", 3, ["readonly", "fast"], (1, 1, 1), "hash", "2.0.0", "Returns the value of a hash field.", Read(hashes::hget)),
    cmd!("hmget", -3, ["readonly", "fast"], (1, 1, 1), "hash", "2.0.0", "Returns the values of several hash fields.", Read(hashes::hmget)),
    cmd!("hexists", 3, ["readonly", "fast"], (1, 1, 1), "hash", "2.0.0", "Whether a hash field exists.", Read(hashes::hexists)),
    cmd!("hincrby", 4, ["write", "denyoom", "fast"], (1, 1, 1), "hash", "2.0.0", "Increments the integer value of a hash field.", Write(hashes::hincrby)),
    cmd!("hdel", -3, ["write", "fast"], (1, 1, 1), "hash", "2.0.0", "Deletes hash fields; the number removed.", Write(hashes::hdel)),
    cmd!("hlen", 2, ["readonly", "fast"], (1, 1, 1), "hash", "2.0.0", "Returns the number of fields in a hash.", Read(hashes::hlen)),
    cmd!("hkeys", 2, ["readonly"], (1, 1, 1), "hash", "2.0.0", "Returns the fields of a hash.", Read(hashes::hkeys), bounded_by_keys),
    cmd!("hvals", 2, ["readonly"], (1, 1, 1), "hash", "2.0.0", "Returns the values of a hash.", Read(hashes::hvals), bounded_by_keys),
    cmd!("hgetall", 2, ["readonly"], (1, 1, 1), "hash", "2.0.0", "Returns all fields and values of a hash.", Read(hashes::hgetall), bounded_by_keys),
    cmd!("hincrbyfloat", 4, ["write", "denyoom", "fast"], (1, 1, 1), "hash", "2.6.0", "Increments the float value of a hash field (as Redis, in long double).", Write(hashes::hincrbyfloat)),
    cmd!("hstrlen", 3, ["readonly", "fast"], (1, 1, 1), "hash", "3.2.0", "Returns the length of a hash field's value.", Read(hashes::hstrlen)),
    cmd!("hscan", -3, ["readonly"], (1, 1, 1), "hash", "2.8.0", "HSCAN key cursor [MATCH pattern] [COUNT n]: iterates fields and values.", Read(hashes::hscan)),
    cmd!("hrandfield", -2, ["readonly"], (1, 1, 1), "hash", "6.2.0", "HRANDFIELD key [count [WITHVALUES]]: random fields.", Read(hashes::hrandfield)),
    // lists
    cmd!("lpush", -3, ["write", "denyoom", "fast"], (1, 1, 1), "list", "1.0.0", "Prepends elements to a list; its new length.", Write(lists::lpush)),
    cmd!("rpush", -3, ["write", "denyoom", "fast"], (1, 1, 1), "list", "1.0.0", "Appends elements to a list; its new length.", Write(lists::rpush)),
    cmd!("lpop", -2, ["write", "fast"], (1, 1, 1), "list", "1.0.0", "LPOP key [count]: removes and returns the first elements.", Write(lists::lpop)),
    cmd!("rpop", -2, ["write", "fast"], (1, 1, 1), "list", "1.0.0", "RPOP key [count]: removes and returns the last elements.", Write(lists::rpop)),
    cmd!("blpop", -3, ["write", "noscript", "blocking"], (1, -2, 1), "list", "2.0.0", "BLPOP key [key ...] timeout: pops from the first non-empty list, waiting for a push.", Write(lists::blpop)),
    cmd!("brpop", -3, ["write", "noscript", "blocking"], (1, -2, 1), "list", "2.0.0", "BRPOP key [key ...] timeout: pops from the end of the first non-empty list, waiting for a push.", Write(lists::brpop)),
    cmd!("lindex", 3, ["readonly"], (1, 1, 1), "list", "1.0.0", "Returns an element by its index.", Read(lists::lindex), bounded_by_keys),
    cmd!("lrange", 4, ["readonly"], (1, 1, 1), "list", "1.0.0", "Returns a range of elements.", Read(lists::lrange), bounded_by_keys),
    cmd!("lrem", 4, ["write"], (1, 1, 1), "list", "1.0.0", "LREM key count element: removes occurrences of an element.", Write(lists::lrem), bounded_by_keys),
    cmd!("llen", 2, ["readonly", "fast"], (1, 1, 1), "list", "1.0.0", "Returns the length of a list.", Read(lists::llen)),
    cmd!("lpos", -3, ["readonly"], (1, 1, 1), "list", "6.0.6", "LPOS key element [RANK rank] [COUNT n] [MAXLEN len]: the indexes of matching elements.", Read(lists::lpos), bounded_by_keys),
    cmd!("lmove", 5, ["write", "denyoom"], (1, 2, 1), "list", "6.2.0", "LMOVE source destination LEFT|RIGHT LEFT|RIGHT: moves an element between lists.", Write(lists::lmove)),
    cmd!("blmove", 6, ["write", "denyoom", "noscript", "blocking"], (1, 2, 1), "list", "6.2.0", "BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout: LMOVE, waiting for a push.", Write(lists::blmove)),
    cmd!("rpoplpush", 3, ["write", "denyoom"], (1, 2, 1), "list", "1.2.0", "Moves the last element of a list to the head of another.", Write(lists::rpoplpush)),
    cmd!("brpoplpush", 4, ["write", "denyoom", "noscript", "blocking"], (1, 2, 1), "list", "2.2.0", "BRPOPLPUSH source destination timeout: RPOPLPUSH, waiting for a push.", Write(lists::brpoplpush)),
    cmd!("lmpop", -4, ["write", "movablekeys"], (0, 0, 0, numkeys 1), "list", "7.0.0", "LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT n]: pops from the first non-empty list.", Write(lists::lmpop)),
    cmd!("blmpop", -5, ["write", "blocking", "movablekeys"], (0, 0, 0, numkeys 2), "list", "7.0.0", "BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT n]: LMPOP, waiting for a push.", Write(lists::blmpop)),
    cmd!("lset", 4, ["write", "denyoom"], (1, 1, 1), "list", "1.0.0", "Sets the element at an index.", Write(lists::lset), bounded_by_keys),
    cmd!("linsert", 5, ["write", "denyoom"], (1, 1, 1), "list", "2.2.0", "LINSERT key BEFORE|AFTER pivot element: inserts next to the first pivot.", Write(lists::linsert), bounded_by_keys),
    cmd!("ltrim", 4, ["write"], (1, 1, 1), "list", "1.0.0", "Keeps only a range of elements.", Write(lists::ltrim), bounded_by_keys),
    cmd!("lpushx", -3, ["write", "denyoom", "fast"], (1, 1, 1), "list", "2.2.0", "Prepends elements to an existing list; its new length, or 0.", Write(lists::lpushx)),
    cmd!("rpushx", -3, ["write", "denyoom", "fast"], (1, 1, 1), "list", "2.2.0", "Appends elements to an existing list; its new length, or 0.", Write(lists::rpushx)),
    // sets
    cmd!("sadd", -3, ["write", "denyoom", "fast"], (1, 1, 1), "set", "1.0.0", "SADD key member [member ...]: the number of members added.", Write(sets::sadd)),
    cmd!("srem", -3, ["write", "fast"], (1, 1, 1), "set", "1.0.0", "SREM key member [member ...]: the number of members removed.", Write(sets::srem)),
    cmd!("smembers", 2, ["readonly"], (1, 1, 1), "set", "1.0.0", "Returns all members of a set.", Read(sets::smembers), bounded_by_keys),
    cmd!("sismember", 3, ["readonly", "fast"], (1, 1, 1), "set", "1.0.0", "Whether a member belongs to a set.", Read(sets::sismember)),
    cmd!("smismember", -3, ["readonly", "fast"], (1, 1, 1), "set", "6.2.0", "Whether each of several members belongs to a set.", Read(sets::smismember)),
    cmd!("scard", 2, ["readonly", "fast"], (1, 1, 1), "set", "1.0.0", "Returns the number of members of a set.", Read(sets::scard)),
    cmd!("spop", -2, ["write", "fast"], (1, 1, 1), "set", "1.0.0", "SPOP key [count]: removes and returns members chosen at random (the same on every node).", Write(sets::spop)),
    cmd!("srandmember", -2, ["readonly"], (1, 1, 1), "set", "1.0.0", "SRANDMEMBER key [count]: members chosen at random (negative count: with repeats).", Read(sets::srandmember)),
    cmd!("smove", 4, ["write", "fast"], (1, 2, 1), "set", "1.0.0", "SMOVE source destination member: moves a member between sets.", Write(sets::smove)),
    cmd!("sinter", -2, ["readonly"], (1, -1, 1), "set", "1.0.0", "Returns the intersection of sets.", Read(sets::sinter), bounded_by_keys),
    cmd!("sunion", -2, ["readonly"], (1, -1, 1), "set", "1.0.0", "Returns the union of sets.", Read(sets::sunion), bounded_by_keys),
    cmd!("sdiff", -2, ["readonly"], (1, -1, 1), "set", "1.0.0", "Returns the members of the first set missing from the others.", Read(sets::sdiff), bounded_by_keys),
    cmd!("sinterstore", -3, ["write", "denyoom"], (1, -1, 1), "set", "1.0.0", "SINTERSTORE destination key [key ...]: stores an intersection; its size.", Write(sets::sinterstore), bounded_by_keys),
    cmd!("sunionstore", -3, ["write", "denyoom"], (1, -1, 1), "set", "1.0.0", "SUNIONSTORE destination key [key ...]: stores a union; its size.", Write(sets::sunionstore), bounded_by_keys),
    cmd!("sdiffstore", -3, ["write", "denyoom"], (1, -1, 1), "set", "1.0.0", "SDIFFSTORE destination key [key ...]: stores a difference; its size.", Write(sets::sdiffstore), bounded_by_keys),
    cmd!("sintercard", -3, ["readonly", "movablekeys"], (0, 0, 0, numkeys 1), "set", "7.0.0", "SINTERCARD numkeys key [key ...] [LIMIT limit]: the size of an intersection.", Read(sets::sintercard)),
    cmd!("sscan", -3, ["readonly"], (1, 1, 1), "set", "2.8.0", "SSCAN key cursor [MATCH pattern] [COUNT count]: iterates the members of a set.", Read(sets::sscan)),
    // sorted sets
    cmd!("geoadd", -5, ["write", "denyoom"], (1, 1, 1), "geo", "3.2.0", "GEOADD key [NX|XX] [CH] longitude latitude member [...]: adds members at positions (a sorted set of geohashes).", Write(geo::geoadd)),
    cmd!("geodist", -4, ["readonly"], (1, 1, 1), "geo", "3.2.0", "GEODIST key member1 member2 [M|KM|FT|MI]: the distance between two members.", Read(geo::geodist)),
    cmd!("geohash", -2, ["readonly"], (1, 1, 1), "geo", "3.2.0", "GEOHASH key [member ...]: members' positions as geohash strings.", Read(geo::geohash)),
    cmd!("geopos", -2, ["readonly"], (1, 1, 1), "geo", "3.2.0", "GEOPOS key [member ...]: members' longitudes and latitudes.", Read(geo::geopos)),
    cmd!("georadius", -6, ["write", "denyoom", "movablekeys"], (1, 1, 1), "geo", "3.2.0", "GEORADIUS key longitude latitude radius unit [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC|DESC] [STORE key|STOREDIST key]: members within a radius.", Write(geo::georadius)),
    cmd!("georadius_ro", -6, ["readonly"], (1, 1, 1), "geo", "3.2.10", "GEORADIUS_RO key longitude latitude radius unit [options]: GEORADIUS without STORE.", Read(geo::georadius_ro)),
    cmd!("georadiusbymember", -5, ["write", "denyoom", "movablekeys"], (1, 1, 1), "geo", "3.2.0", "GEORADIUSBYMEMBER key member radius unit [options]: members within a radius of a member.", Write(geo::georadiusbymember)),
    cmd!("georadiusbymember_ro", -5, ["readonly"], (1, 1, 1), "geo", "3.2.10", "GEORADIUSBYMEMBER_RO key member radius unit [options]: GEORADIUSBYMEMBER without STORE.", Read(geo::georadiusbymember_ro)),
    cmd!("geosearch", -7, ["readonly"], (1, 1, 1), "geo", "6.2.0", "GEOSEARCH key FROMMEMBER member|FROMLONLAT lon lat BYRADIUS r unit|BYBOX w h unit [ASC|DESC] [COUNT n [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]: members within a circle or box.", Read(geo::geosearch)),
    cmd!("geosearchstore", -8, ["write", "denyoom"], (1, 2, 1), "geo", "6.2.0", "GEOSEARCHSTORE dst src FROMMEMBER ...|FROMLONLAT ... BYRADIUS ...|BYBOX ... [ASC|DESC] [COUNT n [ANY]] [STOREDIST]: stores what GEOSEARCH finds.", Write(geo::geosearchstore)),
    cmd!("zadd", -4, ["write", "denyoom", "fast"], (1, 1, 1), "sorted-set", "1.2.0", "ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...].", Write(zsets::zadd)),
    cmd!("zincrby", 4, ["write", "denyoom", "fast"], (1, 1, 1), "sorted-set", "1.2.0", "Increments the score of a member.", Write(zsets::zincrby)),
    cmd!("zscore", 3, ["readonly", "fast"], (1, 1, 1), "sorted-set", "1.2.0", "Returns the score of a member.", Read(zsets::zscore)),
    cmd!("zrem", -3, ["write", "fast"], (1, 1, 1), "sorted-set", "1.2.0", "Removes members; the number removed.", Write(zsets::zrem)),
    cmd!("zrange", -4, ["readonly"], (1, 1, 1), "sorted-set", "1.2.0", "ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES].", Read(zsets::zrange), bounded_by_keys),
    cmd!("zcard", 2, ["readonly", "fast"], (1, 1, 1), "sorted-set", "1.2.0", "Returns the number of members.", Read(zsets::zcard)),
    cmd!("zmscore", -3, ["readonly", "fast"], (1, 1, 1), "sorted-set", "6.2.0", "ZMSCORE key member [member ...]: the scores of several members (nil for a missing one).", Read(zsets::zmscore)),
    cmd!("zrank", -3, ["readonly", "fast"], (1, 1, 1), "sorted-set", "2.0.0", "Returns the rank of a member, lowest score first.", Read(zsets::zrank)),
    cmd!("zrevrank", -3, ["readonly", "fast"], (1, 1, 1), "sorted-set", "2.0.0", "Returns the rank of a member, highest score first.", Read(zsets::zrevrank)),
    cmd!("zcount", 4, ["readonly", "fast"], (1, 1, 1), "sorted-set", "2.0.0", "ZCOUNT key min max: the number of members with a score in the range.", Read(zsets::zcount)),
    cmd!("zlexcount", 4, ["readonly", "fast"], (1, 1, 1), "sorted-set", "2.8.9", "ZLEXCOUNT key min max: the number of members in a lexicographical range.", Read(zsets::zlexcount)),
    cmd!("zrevrange", -4, ["readonly"], (1, 1, 1), "sorted-set", "1.2.0", "ZREVRANGE key start stop [WITHSCORES]: members by rank, highest score first.", Read(zsets::zrevrange), bounded_by_keys),
    cmd!("zrangebyscore", -4, ["readonly"], (1, 1, 1), "sorted-set", "1.0.5", "ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count].", Read(zsets::zrangebyscore), bounded_by_keys),
    cmd!("zrevrangebyscore", -4, ["readonly"], (1, 1, 1), "sorted-set", "2.2.0", "ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count].", Read(zsets::zrevrangebyscore), bounded_by_keys),
    cmd!("zrangebylex", -4, ["readonly"], (1, 1, 1), "sorted-set", "2.8.9", "ZRANGEBYLEX key min max [LIMIT offset count].", Read(zsets::zrangebylex), bounded_by_keys),
    cmd!("zrevrangebylex", -4, ["readonly"], (1, 1, 1), "sorted-set", "2.8.9", "ZREVRANGEBYLEX key max min [LIMIT offset count].", Read(zsets::zrevrangebylex), bounded_by_keys),
    cmd!("zrangestore", -5, ["write", "denyoom"], (1, 2, 1), "sorted-set", "6.2.0", "ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]: stores a range; its size.", Write(zsets::zrangestore), bounded_by_keys),
    cmd!("zremrangebyrank", 4, ["write"], (1, 1, 1), "sorted-set", "2.0.0", "ZREMRANGEBYRANK key start stop: removes members by rank; how many.", Write(zsets::zremrangebyrank), bounded_by_keys),
    cmd!("zremrangebyscore", 4, ["write"], (1, 1, 1), "sorted-set", "1.2.0", "ZREMRANGEBYSCORE key min max: removes members by score; how many.", Write(zsets::zremrangebyscore), bounded_by_keys),
    cmd!("zremrangebylex", 4, ["write"], (1, 1, 1), "sorted-set", "2.8.9", "ZREMRANGEBYLEX key min max: removes members in a lexicographical range; how many.", Write(zsets::zremrangebylex), bounded_by_keys),
    cmd!("zpopmin", -2, ["write", "fast"], (1, 1, 1), "sorted-set", "5.0.0", "ZPOPMIN key [count]: removes and returns the lowest-scored members.", Write(zsets::zpopmin)),
    cmd!("zpopmax", -2, ["write", "fast"], (1, 1, 1), "sorted-set", "5.0.0", "ZPOPMAX key [count]: removes and returns the highest-scored members.", Write(zsets::zpopmax)),
    cmd!("bzpopmin", -3, ["write", "noscript", "blocking", "fast"], (1, -2, 1), "sorted-set", "5.0.0", "BZPOPMIN key [key ...] timeout: pops the lowest-scored member of the first non-empty set, waiting for one.", Write(zsets::bzpopmin)),
    cmd!("bzpopmax", -3, ["write", "noscript", "blocking", "fast"], (1, -2, 1), "sorted-set", "5.0.0", "BZPOPMAX key [key ...] timeout: pops the highest-scored member of the first non-empty set, waiting for one.", Write(zsets::bzpopmax)),
    cmd!("zmpop", -4, ["write", "movablekeys"], (0, 0, 0, numkeys 1), "sorted-set", "7.0.0", "ZMPOP numkeys key [key ...] MIN|MAX [COUNT n]: pops from the first non-empty sorted set.", Write(zsets::zmpop)),
    cmd!("bzmpop", -5, ["write", "blocking", "movablekeys"], (0, 0, 0, numkeys 2), "sorted-set", "7.0.0", "BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT n]: ZMPOP, waiting for an add.", Write(zsets::bzmpop)),
    cmd!("zunion", -3, ["readonly", "movablekeys"], (0, 0, 0, numkeys 1), "sorted-set", "6.2.0", "ZUNION numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES].", Read(zsets::zunion)),
    cmd!("zinter", -3, ["readonly", "movablekeys"], (0, 0, 0, numkeys 1), "sorted-set", "6.2.0", "ZINTER numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES].", Read(zsets::zinter)),
    cmd!("zdiff", -3, ["readonly", "movablekeys"], (0, 0, 0, numkeys 1), "sorted-set", "6.2.0", "ZDIFF numkeys key [key ...] [WITHSCORES]: the members of the first set missing from the others.", Read(zsets::zdiff)),
    cmd!("zintercard", -3, ["readonly", "movablekeys"], (0, 0, 0, numkeys 1), "sorted-set", "7.0.0", "ZINTERCARD numkeys key [key ...] [LIMIT limit]: the size of an intersection.", Read(zsets::zintercard)),
    cmd!("zunionstore", -4, ["write", "denyoom", "movablekeys"], (1, 1, 1, numkeys 2), "sorted-set", "2.0.0", "ZUNIONSTORE destination numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX]: stores a union; its size.", Write(zsets::zunionstore)),
    cmd!("zinterstore", -4, ["write", "denyoom", "movablekeys"], (1, 1, 1, numkeys 2), "sorted-set", "2.0.0", "ZINTERSTORE destination numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX]: stores an intersection; its size.", Write(zsets::zinterstore)),
    cmd!("zdiffstore", -4, ["write", "denyoom", "movablekeys"], (1, 1, 1, numkeys 2), "sorted-set", "6.2.0", "ZDIFFSTORE destination numkeys key [key ...]: stores a difference; its size.", Write(zsets::zdiffstore)),
    cmd!("zrandmember", -2, ["readonly"], (1, 1, 1), "sorted-set", "6.2.0", "ZRANDMEMBER key [count [WITHSCORES]]: members chosen at random (negative count: with repeats).", Read(zsets::zrandmember)),
    cmd!("zscan", -3, ["readonly"], (1, 1, 1), "sorted-set", "2.8.0", "ZSCAN key cursor [MATCH pattern] [COUNT count]: iterates the members and scores of a sorted set.", Read(zsets::zscan)),
    // streams
    cmd!("xadd", -5, ["write", "denyoom", "fast"], (1, 1, 1), "stream", "5.0.0", "XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value [field value ...]: appends an entry; its ID.", Write(streams::xadd)),
    cmd!("xlen", 2, ["readonly", "fast"], (1, 1, 1), "stream", "5.0.0", "XLEN key: the number of entries.", Read(streams::xlen)),
    cmd!("xrange", -4, ["readonly"], (1, 1, 1), "stream", "5.0.0", "XRANGE key start end [COUNT count]: the entries between two IDs.", Read(streams::xrange)),
    cmd!("xrevrange", -4, ["readonly"], (1, 1, 1), "stream", "5.0.0", "XREVRANGE key end start [COUNT count]: the entries between two IDs, newest first.", Read(streams::xrevrange)),
    cmd!("xdel", -3, ["write", "fast"], (1, 1, 1), "stream", "5.0.0", "XDEL key id [id ...]: deletes entries; how many.", Write(streams::xdel)),
    cmd!("xtrim", -4, ["write"], (1, 1, 1), "stream", "5.0.0", "XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]: deletes the oldest entries; how many.", Write(streams::xtrim)),
    cmd!("xread", -4, ["readonly", "blocking", "movablekeys"], (0, 0, 0), "stream", "5.0.0", "XREAD [COUNT count] [BLOCK ms] STREAMS key [key ...] id [id ...]: the entries after each ID, waiting for one with BLOCK.", Read(streams::xread)),
    cmd!("xreadgroup", -7, ["write", "blocking", "movablekeys"], (0, 0, 0), "stream", "5.0.0", "XREADGROUP GROUP group consumer [COUNT count] [BLOCK ms] [NOACK] STREAMS key [key ...] id [id ...]: entries for a consumer of a group.", Write(streams::xreadgroup)),
    cmd!("xgroup", -2, ["write", "denyoom"], (2, 2, 1), "stream", "5.0.0", "XGROUP CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER|HELP: manages consumer groups.", Write(streams::xgroup)),
    cmd!("xack", -4, ["write", "fast"], (1, 1, 1), "stream", "5.0.0", "XACK key group id [id ...]: acknowledges pending entries; how many.", Write(streams::xack)),
    cmd!("xpending", -3, ["readonly"], (1, 1, 1), "stream", "5.0.0", "XPENDING key group [[IDLE min-idle-time] start end count [consumer]]: a group's pending entries.", Read(streams::xpending)),
    cmd!("xclaim", -6, ["write", "fast"], (1, 1, 1), "stream", "5.0.0", "XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms] [RETRYCOUNT n] [FORCE] [JUSTID] [LASTID id]: takes over pending entries.", Write(streams::xclaim)),
    cmd!("xautoclaim", -6, ["write", "fast"], (1, 1, 1), "stream", "6.2.0", "XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]: takes over pending entries idle long enough, from a cursor.", Write(streams::xautoclaim)),
    cmd!("xinfo", -2, ["readonly"], (2, 2, 1), "stream", "5.0.0", "XINFO STREAM key [FULL [COUNT count]] | GROUPS key | CONSUMERS key group | HELP.", Read(streams::xinfo)),
    cmd!("xsetid", -3, ["write", "denyoom", "fast"], (1, 1, 1), "stream", "5.0.0", "XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]: sets a stream's last ID.", Write(streams::xsetid)),
    // locks
    cmd!("lock.acquire", -4, ["write", "denyoom", "fast"], (1, 1, 1), "generic", "0.1.0", "LOCK.ACQUIRE key owner ttl-ms [WAIT ms]: the fencing token, or nil if held by another owner (with WAIT, queues and blocks until granted or timed out).", Write(locks::acquire)),
    cmd!("lock.renew", 5, ["write", "fast"], (1, 1, 1), "generic", "0.1.0", "LOCK.RENEW key owner token ttl-ms: extends the lease from now.", Write(locks::renew)),
    cmd!("lock.release", 4, ["write", "fast"], (1, 1, 1), "generic", "0.1.0", "LOCK.RELEASE key owner token: 1 if released, 0 if not held.", Write(locks::release)),
    cmd!("lock.fence", 3, ["write", "fast"], (1, 1, 1), "generic", "0.1.0", "LOCK.FENCE resource token: records the token unless a higher one was honored.", Write(locks::fence)),
    cmd!("lock.top", -1, ["admin", "loading", "stale"], (0, 0, 0), "server", "0.1.0", "LOCK.TOP [count]: the keys with the most refused attempts, queued waiters and time held on this node over the last minute (at most 64 each, default 10).", Local),
    cmd!("lock.info", 2, ["readonly", "fast"], (1, 1, 1), "generic", "0.1.0", "LOCK.INFO key: owner, token, ttl-ms, waiters and next-waiter, or nil if free.", Read(locks::info)),
    // scripting
    cmd!("eval", -3, ["noscript", "stale", "skip_monitor", "may_replicate", "no_mandatory_keys", "movablekeys"], (0, 0, 0, numkeys 2), "scripting", "2.6.0", "EVAL script numkeys [key ...] [arg ...]: runs a Lua script atomically on every node.", Write(scripts::eval)),
    cmd!("evalsha", -3, ["noscript", "stale", "skip_monitor", "may_replicate", "no_mandatory_keys", "movablekeys"], (0, 0, 0, numkeys 2), "scripting", "2.6.0", "EVALSHA sha1 numkeys [key ...] [arg ...]: runs a cached script.", Write(scripts::evalsha)),
    cmd!("eval_ro", -3, ["noscript", "stale", "skip_monitor", "no_mandatory_keys", "readonly", "movablekeys"], (0, 0, 0, numkeys 2), "scripting", "7.0.0", "EVAL_RO script numkeys [key ...] [arg ...]: a read-only script.", Read(scripts::eval_ro)),
    cmd!("evalsha_ro", -3, ["noscript", "stale", "skip_monitor", "no_mandatory_keys", "readonly", "movablekeys"], (0, 0, 0, numkeys 2), "scripting", "7.0.0", "EVALSHA_RO sha1 numkeys [key ...] [arg ...]: a cached read-only script.", Read(scripts::evalsha_ro)),
    cmd!("fcall", -3, ["noscript", "stale", "skip_monitor", "may_replicate", "no_mandatory_keys", "movablekeys"], (0, 0, 0, numkeys 2), "scripting", "7.0.0", "FCALL function numkeys [key ...] [arg ...]: runs a function of a loaded library, on every node.", Write(functions::fcall)),
    cmd!("fcall_ro", -3, ["noscript", "stale", "skip_monitor", "no_mandatory_keys", "readonly", "movablekeys"], (0, 0, 0, numkeys 2), "scripting", "7.0.0", "FCALL_RO function numkeys [key ...] [arg ...]: runs a function flagged no-writes.", Read(functions::fcall_ro)),
    cmd!("function", -2, ["noscript"], (0, 0, 0), "scripting", "7.0.0", "FUNCTION LOAD|DELETE|FLUSH|LIST|STATS|DUMP|RESTORE|KILL|HELP: the replicated function libraries.", Write(functions::function)),
    cmd!("script", -2, ["noscript"], (0, 0, 0), "scripting", "2.6.0", "SCRIPT LOAD|EXISTS|FLUSH|KILL: the replicated script cache.", Write(scripts::script)),
    // transactions
    cmd!("multi", 1, ["noscript", "loading", "stale", "fast"], (0, 0, 0), "transactions", "1.2.0", "Starts a transaction: commands are queued until EXEC.", Local),
    cmd!("exec", 1, ["noscript", "loading", "stale", "skip_slowlog"], (0, 0, 0), "transactions", "1.2.0", "Runs the queued commands as one log entry, or none of them.", Local),
    cmd!("discard", 1, ["noscript", "loading", "stale", "fast"], (0, 0, 0), "transactions", "2.0.0", "Discards the queued commands.", Local),
    cmd!("watch", -2, ["noscript", "loading", "stale", "fast", "readonly"], (1, -1, 1), "transactions", "2.2.0", "EXEC will do nothing if one of these keys changes before it.", Read(transactions::watch)),
    cmd!("unwatch", 1, ["noscript", "loading", "stale", "fast"], (0, 0, 0), "transactions", "2.2.0", "Forgets the watched keys.", Local),
    // pub/sub
    cmd!("publish", 3, ["pubsub", "loading", "stale", "fast", "may_replicate"], (0, 0, 0), "pubsub", "2.0.0", "Posts a message to a channel (through the log).", Write(pubsub::publish)),
    cmd!("spublish", 3, ["pubsub", "loading", "stale", "fast", "may_replicate"], (0, 0, 0), "pubsub", "7.0.0", "Posts a message to a shard channel (through the log; a raftlock cluster is one shard).", Write(pubsub::spublish)),
    cmd!("ssubscribe", -2, ["pubsub", "noscript", "loading", "stale"], (0, 0, 0), "pubsub", "7.0.0", "Listens for messages published to shard channels.", Local),
    cmd!("sunsubscribe", -1, ["pubsub", "noscript", "loading", "stale"], (0, 0, 0), "pubsub", "7.0.0", "Stops listening to shard channels.", Local),
    cmd!("subscribe", -2, ["pubsub", "noscript", "loading", "stale"], (0, 0, 0), "pubsub", "2.0.0", "Listens for messages published to channels.", Local),
    cmd!("unsubscribe", -1, ["pubsub", "noscript", "loading", "stale"], (0, 0, 0), "pubsub", "2.0.0", "Stops listening to channels.", Local),
    cmd!("psubscribe", -2, ["pubsub", "noscript", "loading", "stale"], (0, 0, 0), "pubsub", "2.0.0", "Listens for messages published to channels matching patterns.", Local),
    cmd!("punsubscribe", -1, ["pubsub", "noscript", "loading", "stale"], (0, 0, 0), "pubsub", "2.0.0", "Stops listening to channel patterns.", Local),
    cmd!("pubsub", -2, ["pubsub", "loading", "stale"], (0, 0, 0), "pubsub", "2.8.0", "PUBSUB CHANNELS [pattern] | NUMSUB [channel ...] | NUMPAT | SHARDCHANNELS [pattern] | SHARDNUMSUB [channel ...].", Local),
];

/// The row of the table `spec` is, by its place in [`COMMANDS`] (per-command
/// counters are kept in a vector in the table's order).
pub fn row_of(spec: &'static CommandSpec) -> Option<usize> {
    let offset = (spec as *const CommandSpec as usize).checked_sub(COMMANDS.as_ptr() as usize)?;
    Some(offset / std::mem::size_of::<CommandSpec>()).filter(|row| *row < COMMANDS.len())
}

/// The command named `name`, case-insensitively.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    type Index = HashMap<&'static [u8], &'static CommandSpec, std::hash::BuildHasherDefault<Fnv>>;
    static INDEX: OnceLock<Index> = OnceLock::new();
    let index = INDEX.get_or_init(|| COMMANDS.iter().map(|c| (c.name.as_bytes(), c)).collect());
    // Lowered on the stack: this runs for every command, some more than once.
    let mut buf = [0u8; 32];
    let lower = buf.get_mut(..name.len())?;
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    index.get(&*lower).copied()
}

/// FNV-1a (the start of the keyspace's hash): the command index holds a fixed set of short names,
/// not keys a client chooses, so it needs no keyed hash (SipHash cost more
/// than the rest of the lookup).
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(crate::keyspace::FNV_OFFSET)
    }
}

impl std::hash::Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = crate::keyspace::fnv1a(self.0, bytes);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// One command's `COMMAND INFO` entry, in Redis 7's shape: with, for a
/// container, its subcommands' entries.
pub fn command_info(spec: &CommandSpec) -> Reply {
    let subcommands: Vec<Reply> = subcommands(spec.name).map(|sub| subcommand_info(spec, sub)).collect();
    info_entry(
        spec.name,
        spec.arity,
        spec.flags,
        (spec.first_key, spec.last_key, spec.key_step),
        &super::acl::categories(spec, None),
        subcommands,
    )
}

/// A subcommand's `COMMAND INFO` entry; its categories are the ones `ACL`
/// checks it by.
pub fn subcommand_info(container: &CommandSpec, sub: &Subcommand) -> Reply {
    let short = sub.name.split_once('|').map_or(sub.name, |(_, s)| s);
    let categories = super::acl::categories(container, Some(short));
    info_entry(sub.name, sub.arity, sub.flags, (sub.first_key, sub.last_key, sub.key_step), &categories, Vec::new())
}

fn info_entry(
    name: &str,
    arity: i64,
    flags: &[&str],
    (first, last, step): (i64, i64, i64),
    categories: &[&str],
    subcommands: Vec<Reply>,
) -> Reply {
    let statuses = |items: &[&str]| Reply::Set(items.iter().map(|s| Reply::Status(s.to_string())).collect());
    Reply::Array(vec![
        Reply::text(name),
        Reply::Int(arity),
        statuses(flags),
        Reply::Int(first),
        Reply::Int(last),
        Reply::Int(step),
        // ACL categories: the ones `ACL SETUSER +@cat` and `ACL CAT` use.
        Reply::Set(categories.iter().map(|c| Reply::Status(format!("@{c}"))).collect()),
        // Tips and key specs (not described here).
        Reply::Set(vec![]),
        Reply::Set(vec![]),
        if subcommands.is_empty() { Reply::Set(vec![]) } else { Reply::Array(subcommands) },
    ])
}

pub use super::redis_specs::Subcommand;
use super::redis_specs::{Begin, KEY_SPECS, SUBCOMMANDS};

/// The subcommands of `container` (none for other commands).
fn subcommands(container: &str) -> impl Iterator<Item = &'static Subcommand> + '_ {
    SUBCOMMANDS.iter().filter(move |s| s.name.split_once('|').is_some_and(|(c, _)| c == container))
}

/// How many rows `INFO commandstats` and the latency histograms count by:
/// one per command of the table, then one per Redis subcommand
/// (`config|get`), as Redis counts a container's subcommands apart.
pub fn stats_rows() -> usize {
    COMMANDS.len() + SUBCOMMANDS.len()
}

/// The row a `spec` command counts in, `sub` its first argument: its
/// subcommand's, when Redis has one by that name, else its command's.
pub fn stats_row(spec: &'static CommandSpec, sub: Option<&[u8]>) -> Option<usize> {
    static CONTAINERS: OnceLock<Vec<bool>> = OnceLock::new();
    let row = row_of(spec)?;
    let containers = CONTAINERS.get_or_init(|| COMMANDS.iter().map(|c| subcommands(c.name).next().is_some()).collect());
    let Some(sub) = sub.filter(|_| containers.get(row).copied().unwrap_or(false)) else { return Some(row) };
    let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
    let found = SUBCOMMANDS.iter().position(|s| s.name.split_once('|') == Some((spec.name, sub.as_str())));
    Some(found.map_or(row, |i| COMMANDS.len() + i))
}

/// The name of a row of [`stats_row`]: `get`, `config|get`.
pub fn stats_row_name(row: usize) -> Option<&'static str> {
    match row.checked_sub(COMMANDS.len()) {
        None => COMMANDS.get(row).map(|c| c.name),
        Some(sub) => SUBCOMMANDS.get(sub).map(|s| s.name),
    }
}

/// The rows `name` stands for in `LATENCY HISTOGRAM`: a command's, and its
/// subcommands' for a container (`config`); a subcommand's (`config|get`).
pub fn stats_rows_named(name: &[u8]) -> Vec<usize> {
    if let Some((spec, sub)) = lookup_subcommand(name) {
        let i = SUBCOMMANDS.iter().position(|s| std::ptr::eq(s, sub));
        return row_of(spec).and(i).map(|i| vec![COMMANDS.len() + i]).unwrap_or_default();
    }
    let Some(spec) = lookup(name) else { return Vec::new() };
    let own = row_of(spec).into_iter();
    let subs = SUBCOMMANDS
        .iter()
        .enumerate()
        .filter(|(_, s)| s.name.split_once('|').is_some_and(|(c, _)| c == spec.name))
        .map(|(i, _)| COMMANDS.len() + i);
    own.chain(subs).collect()
}

/// `container|subcommand`, case-insensitively, with its container's row.
pub fn lookup_subcommand(full: &[u8]) -> Option<(&'static CommandSpec, &'static Subcommand)> {
    let full = String::from_utf8_lossy(full).to_ascii_lowercase();
    let (container, _) = full.split_once('|')?;
    let spec = lookup(container.as_bytes())?;
    let sub = SUBCOMMANDS.iter().find(|s| s.name == full)?;
    Some((spec, sub))
}

/// Every `container|subcommand` name, with its container (`COMMAND LIST`).
pub fn subcommand_names() -> impl Iterator<Item = (&'static CommandSpec, &'static Subcommand)> {
    SUBCOMMANDS.iter().filter_map(|sub| {
        let (container, _) = sub.name.split_once('|')?;
        Some((lookup(container.as_bytes())?, sub))
    })
}

/// The flags Redis's key specs give the keys at `positions` of `argv`
/// (`COMMAND GETKEYSANDFLAGS`), one list per position: of the spec whose
/// keys begin last at or before it. Commands Redis lacks (`LOCK.*`) have
/// them from how they use the key. Linear in `argv` whatever the number of
/// keys (each keyword looked for once).
pub fn key_flags(spec: &CommandSpec, argv: &[Bytes], positions: &[usize]) -> Vec<Vec<&'static str>> {
    let name = match argv.get(1).filter(|_| subcommands(spec.name).next().is_some()) {
        Some(sub) => format!("{}|{}", spec.name, String::from_utf8_lossy(sub).to_ascii_lowercase()),
        None => spec.name.to_string(),
    };
    // A STORE destination named by an option.
    let stored = match spec.name {
        "sort" => super::sort::store_key_position(argv),
        "georadius" | "georadiusbymember" => super::geo::store_key_position(argv),
        _ => None,
    };
    let specs = KEY_SPECS.iter().find(|(n, _)| *n == name).map(|(_, specs)| *specs);
    // Flags that depend on the arguments (`SET ... GET` reads), and
    // commands Redis lacks: from how the command uses the key.
    let Some(specs) = specs.filter(|specs| !specs.iter().any(|(_, flags)| flags.contains(&"variable_flags"))) else {
        let access = super::acl::key_access(spec, argv);
        let by_position: std::collections::HashMap<usize, u8> =
            spec.key_positions(argv).zip(access.iter().map(|(_, a)| *a)).collect();
        return positions
            .iter()
            .map(|p| match by_position.get(p).or(access.first().map(|(_, a)| a)) {
                Some(&a) if a == crate::keyspace::acl::KEY_READ => vec!["RO", "access"],
                Some(&a) if a == crate::keyspace::acl::KEY_WRITE => vec!["OW", "update"],
                _ => vec!["RW", "access", "update"],
            })
            .collect();
    };
    let stored_flags = || {
        specs
            .iter()
            .find(|(begin, flags)| *begin == Begin::Unknown && flags.contains(&"OW"))
            .map_or(vec!["OW", "update"], |(_, flags)| flags.to_vec())
    };
    // Where each spec's keys begin: an index, or after the first of its
    // keyword (looked for once).
    let begins: Vec<Option<usize>> = specs
        .iter()
        .map(|(begin, _)| match begin {
            Begin::Index(i) => Some(*i),
            Begin::Keyword(word) => {
                argv.iter().skip(1).position(|a| a.eq_ignore_ascii_case(word.as_bytes())).map(|i| i + 1)
            }
            Begin::Unknown => None,
        })
        .collect();
    positions
        .iter()
        .map(|&position| {
            if stored == Some(position) {
                return stored_flags();
            }
            specs
                .iter()
                .zip(&begins)
                .filter_map(|((begin, flags), at)| {
                    // An index counts up to the key itself; a keyword must
                    // come before it.
                    let at = (*at)?;
                    let before = if matches!(begin, Begin::Index(_)) { at <= position } else { at < position };
                    before.then_some((at, flags))
                })
                .max_by_key(|(at, _)| *at)
                .or_else(|| specs.first().map(|(_, flags)| (0, flags)))
                .map_or_else(Vec::new, |(_, flags)| flags.to_vec())
        })
        .collect()
}

/// One command's `COMMAND DOCS` value (the map under its name).
pub fn command_docs(spec: &CommandSpec) -> Reply {
    Reply::Map(vec![
        (Reply::text("summary"), Reply::text(spec.summary)),
        (Reply::text("since"), Reply::text(spec.since)),
        (Reply::text("group"), Reply::text(spec.group)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_woken_pop_retries_from_the_key_pushed_to() {
        let argv = |s: &str| s.split(' ').map(|a| Bytes::copy_from_slice(a.as_bytes())).collect::<Vec<_>>();
        let first = |cmd: &str, key: &str| {
            let a = argv(cmd);
            lookup(&a[0]).unwrap().with_key_first(&a, &Bytes::copy_from_slice(key.as_bytes())).map(|v| {
                v.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect::<Vec<_>>().join(" ")
            })
        };
        assert_eq!(first("BLPOP a b c 0", "c").as_deref(), Some("BLPOP c a b 0"));
        assert_eq!(first("BRPOP a b c 0", "b").as_deref(), Some("BRPOP b a c 0"));
        assert_eq!(first("BZPOPMIN a b 1.5", "b").as_deref(), Some("BZPOPMIN b a 1.5"));
        assert_eq!(first("BLMPOP 0 3 a b c LEFT COUNT 2", "c").as_deref(), Some("BLMPOP 0 3 c a b LEFT COUNT 2"));
        // Already first, not a key of the command, or not a source.
        assert_eq!(first("BLPOP a b 0", "a"), None);
        assert_eq!(first("BLPOP a b 0", "0"), None);
        assert_eq!(first("BLMPOP 0 1 a LEFT", "LEFT"), None);
        assert_eq!(first("BLMOVE a b LEFT RIGHT 0", "b"), None);
        // A count the arguments cannot hold names fewer keys.
        assert_eq!(first("BLMPOP 0 9 a b", "b").as_deref(), Some("BLMPOP 0 9 b a"));
    }

    #[test]
    fn command_info_shows_the_acl_categories() {
        for c in COMMANDS {
            let Reply::Array(info) = command_info(c) else { panic!("{}", c.name) };
            let Reply::Set(cats) = &info[6] else { panic!("{}", c.name) };
            for cat in cats {
                let Reply::Status(cat) = cat else { panic!("{}", c.name) };
                assert!(super::super::acl::CATEGORIES.contains(&&cat[1..]), "{}: {cat} is not an ACL category", c.name);
            }
        }
        let Reply::Array(info) = command_info(lookup(b"lock.acquire").unwrap()) else { unreachable!() };
        assert!(matches!(&info[6], Reply::Set(c) if c.contains(&Reply::Status("@lock".into()))));
    }

    #[test]
    fn commands_whose_keys_the_positions_cannot_give_are_flagged_movablekeys() {
        // Clients that read COMMAND to find a command's keys (redis-py's
        // CommandsParser, cluster clients) ask COMMAND GETKEYS for these.
        for c in COMMANDS {
            let movable = c.numkeys_at > 0
                || matches!(c.name, "xread" | "xreadgroup" | "sort" | "sort_ro" | "georadius" | "georadiusbymember");
            assert_eq!(c.flags.contains(&"movablekeys"), movable, "{}", c.name);
        }
    }

    #[test]
    fn every_subcommand_belongs_to_a_container_rules_may_name() {
        for sub in super::super::redis_specs::SUBCOMMANDS {
            let (container, short) = sub.name.split_once('|').unwrap();
            assert!(lookup(container.as_bytes()).is_some(), "{}: no such command here", sub.name);
            assert!(super::super::acl::is_container(container), "{}: ACL rules cannot name it", sub.name);
            assert_eq!(lookup_subcommand(sub.name.to_ascii_uppercase().as_bytes()).map(|(_, s)| s.name), Some(sub.name));
            assert!(!short.is_empty());
        }
        let Reply::Array(info) = command_info(lookup(b"config").unwrap()) else { unreachable!() };
        let Reply::Array(subs) = &info[9] else { panic!("CONFIG's subcommands: {:?}", info[9]) };
        assert_eq!(subs.len(), 5);
    }

    #[test]
    fn names_are_unique_lowercase_and_found_in_any_case() {
        let mut seen = std::collections::HashSet::new();
        for c in COMMANDS {
            assert!(seen.insert(c.name), "{} listed twice", c.name);
            assert_eq!(c.name, c.name.to_ascii_lowercase());
            assert!(c.arity != 0);
        }
        assert_eq!(lookup(b"LoCk.AcQuIrE").unwrap().name, "lock.acquire");
        assert!(lookup(b"dping").is_none());
        assert!(lookup(&[b'a'; 40]).is_none(), "longer than any name");
        assert!(lookup(b"g\xffet").is_none(), "not UTF-8");
        assert!(lookup(b"").is_none());
    }

    #[test]
    fn arity_rules() {
        let get = lookup(b"get").unwrap();
        assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
        let del = lookup(b"del").unwrap();
        assert!(del.arity_ok(2) && del.arity_ok(10) && !del.arity_ok(1));
    }
}
