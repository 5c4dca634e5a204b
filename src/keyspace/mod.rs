//! The replicated data: keys, their values, versions and expiry, in log time.
//!
//! PURE: no tokio, no openraft, no rocksdb, no clock. Every mutation takes the
//! log time of the entry being applied, so applying the same entries in the same
//! order yields the same keyspace on every node. Side effects leave as
//! [`Event`] values for the caller to deliver.

pub mod acl;
pub use key::{Key, Str};
pub use map::{fnv1a, key_hash, FNV_OFFSET};
use map::KeyMap;
mod expiries;
mod glob;
mod key;
mod map;
mod sessions;
pub mod stream;
mod waiters;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use glob::{glob_match, glob_match_within, Glob};
pub use sessions::{ClientId, Seen, Sessions, MAX_RETRY_WINDOW_MS, SESSION_TTL_MS};
pub use waiters::{Enqueued, WaitStep, Waiter, Waiters, MAX_WAITERS_PER_KEY};

/// Milliseconds of log time (DESIGN.md §4): stamped by the leader, never read
/// from a clock by the state machine.
pub type LogTime = u64;

/// A key's fencing token, assigned by the command that created the key or last
/// replaced its whole value: that command's log index, or one more than the
/// previous command's version when several commands share one log entry
/// (group commit). Strictly increasing across all keys, never reused.
pub type Version = u64;

/// A key's value. Containers are ordered (B-trees, a deque) so that every
/// node iterates them identically: scripts may act on iteration order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value {
    Str(Str),
    Hash(BTreeMap<Bytes, Bytes>),
    /// Boxed: a deque is 32 bytes, the other kinds 24, and every entry
    /// holds a `Value` (32 bytes with the boxed list, 40 without).
    List(Box<VecDeque<Bytes>>),
    /// Sorted set: member -> score.
    ZSet(BTreeMap<Bytes, f64>),
    /// Set (after the others, so that snapshots written before sets existed decode).
    Set(BTreeSet<Bytes>),
    /// Stream (last, for the same reason); boxed, as it is large.
    Stream(Box<stream::Stream>),
}

impl Value {
    /// The name `TYPE` replies.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::ZSet(_) => "zset",
            Value::Set(_) => "set",
            Value::Stream(_) => "stream",
        }
    }

    /// A rough measure of the work of reading or rewriting the whole value:
    /// a container's element count, a string's length in 256-byte units (at
    /// least 1).
    pub fn weight(&self) -> usize {
        match self {
            Value::Str(s) => 1 + s.as_slice().len() / 256,
            Value::Hash(h) => h.len(),
            Value::List(l) => l.len(),
            Value::ZSet(z) => z.len(),
            Value::Set(s) => s.len(),
            Value::Stream(s) => s.weight(),
        }
    }

    /// Whether this is an empty container (which Redis never keeps).
    pub fn is_empty_container(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::Hash(h) => h.is_empty(),
            Value::List(l) => l.is_empty(),
            Value::ZSet(z) => z.is_empty(),
            Value::Set(s) => s.is_empty(),
            // Redis keeps an empty stream (its last ID, its groups).
            Value::Stream(_) => false,
        }
    }
}

/// One key's state.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "EntryWire")]
pub struct Entry {
    pub value: Value,
    /// Log time after which the key no longer exists, [`NO_EXPIRY`] for
    /// none (see [`Entry::expires_at`]), in the low 63 bits, and in the top
    /// bit ([`LEASE`]) whether this key is a lease (taken with
    /// `LOCK.ACQUIRE` or `SET NX` with an expiry: its expiry and release
    /// emit lock events; see [`Entry::is_lease`]). 8 bytes where an
    /// `Option` and a flag took 24, on every key.
    expiry: u64,
    /// The fencing token (see [`Version`]).
    pub version: Version,
    /// Log time at which `version` was assigned; the start of a lease.
    pub since: LogTime,
    /// Version of the last command that wrote this key (for `WATCH`).
    pub modified: Version,
}

/// The bit of [`Entry::expiry`] that marks a lease.
const LEASE: u64 = 1 << 63;

/// [`Entry::expiry`]'s time of a key that does not expire: the last
/// millisecond of log time an entry can hold (2^63 - 1 ms, some 292
/// million years).
const NO_EXPIRY: LogTime = LEASE - 1;

/// An [`Entry`] as snapshots store it (the fields in this order).
#[derive(Deserialize)]
struct EntryWire {
    value: Value,
    expires_at: Option<LogTime>,
    version: Version,
    since: LogTime,
    lease: bool,
    modified: Version,
}

/// [`EntryWire`] as written, borrowing the value.
#[derive(Serialize)]
#[serde(rename = "EntryWire")]
struct EntryWireOut<'a> {
    value: &'a Value,
    expires_at: Option<LogTime>,
    version: Version,
    since: LogTime,
    lease: bool,
    modified: Version,
}

impl From<EntryWire> for Entry {
    fn from(w: EntryWire) -> Entry {
        let mut entry = Entry { value: w.value, expiry: NO_EXPIRY, version: w.version, since: w.since, modified: w.modified };
        entry.set_expires_at(w.expires_at);
        entry.set_lease(w.lease);
        entry
    }
}

impl Serialize for Entry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        EntryWireOut {
            value: &self.value,
            expires_at: self.expires_at(),
            version: self.version,
            since: self.since,
            lease: self.is_lease(),
            modified: self.modified,
        }
        .serialize(s)
    }
}

impl Entry {
    /// Log time after which the key no longer exists; `None` if it does not
    /// expire.
    pub fn expires_at(&self) -> Option<LogTime> {
        let at = self.expiry & !LEASE;
        (at != NO_EXPIRY).then_some(at)
    }

    /// Sets the expiry of an entry that is not in a keyspace yet (one that
    /// is goes through [`Keyspace::set_expiry`], which keeps the expiry
    /// index). A time from [`NO_EXPIRY`] on is kept as the one before it.
    pub fn set_expires_at(&mut self, at: Option<LogTime>) {
        self.expiry = (self.expiry & LEASE) | at.map_or(NO_EXPIRY, |at| at.min(NO_EXPIRY - 1));
    }

    /// Whether this key is a lease (taken with `LOCK.ACQUIRE` or `SET NX`
    /// with an expiry): its expiry and release emit lock events.
    pub fn is_lease(&self) -> bool {
        self.expiry & LEASE != 0
    }

    pub fn set_lease(&mut self, lease: bool) {
        if lease {
            self.expiry |= LEASE;
        } else {
            self.expiry &= !LEASE;
        }
    }

    /// The owner of a lease: its string value (empty for other types), as
    /// `Bytes` (a copy).
    pub fn owner(&self) -> Bytes {
        Bytes::copy_from_slice(self.owner_name())
    }

    /// [`Entry::owner`], borrowed.
    pub fn owner_name(&self) -> &[u8] {
        match &self.value {
            Value::Str(v) => v,
            _ => &[],
        }
    }

    pub fn string(value: Bytes, version: Version, since: LogTime) -> Entry {
        Entry::new(Value::Str(Str::from(value)), version, since)
    }

    pub fn new(value: Value, version: Version, since: LogTime) -> Entry {
        Entry { value, expiry: NO_EXPIRY, version, since, modified: version }
    }

    /// The command with `version` changed the value in place at `now` (INCR,
    /// APPEND, a container write): the key gets that new version, so a lock
    /// key rewritten this way has a new token, never its old grant's.
    pub fn rewritten(&mut self, version: Version, now: LogTime) {
        if crate::planted::active(crate::planted::Bug::VersionKeptOnWrite) {
            return;
        }
        self.version = version;
        self.since = now;
    }

    fn is_expired(&self, now: LogTime) -> bool {
        // As Redis: a key is gone once the current time is past its expiry.
        self.expires_at().is_some_and(|at| now > at)
    }

    /// Remaining time to live in ms, or `None` without expiry.
    pub fn ttl_ms(&self, now: LogTime) -> Option<u64> {
        self.expires_at().map(|at| at.saturating_sub(now))
    }
}

/// The lease transitions reported to subscribers and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEvent {
    Acquired,
    /// `left_ms`: what was left of the lease when it was renewed.
    Renewed { left_ms: u64 },
    Released,
    Expired,
}

impl LeaseEvent {
    pub fn name(self) -> &'static str {
        match self {
            LeaseEvent::Acquired => "lock.acquired",
            LeaseEvent::Renewed { .. } => "lock.renewed",
            LeaseEvent::Released => "lock.released",
            LeaseEvent::Expired => "lock.expired",
        }
    }
}

/// Something that happened while applying an entry, to be delivered by the
/// node that applied it (notifications, metrics). Values, not I/O.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A keyspace notification: `class` is the `notify-keyspace-events`
    /// letter that enables it (`g`, `$`, `x`, ...), `name` the event (`set`).
    Key { class: char, name: &'static str, key: Bytes },
    /// A lease transition of the lease `token` held by `owner`. `held_ms` is
    /// how long the lease had been held (for releases and expiries), `ttl_ms`
    /// the lease length requested.
    Lease { kind: LeaseEvent, key: Bytes, owner: Bytes, token: Version, ttl_ms: u64, held_ms: u64 },
    /// `PUBLISH channel message`.
    Publish { channel: Bytes, message: Bytes },
    /// `SPUBLISH shardchannel message`: for `SSUBSCRIBE`rs only.
    SPublish { channel: Bytes, message: Bytes },
    /// A step of `owner`'s wait for `key`: queued, left, granted (a handoff)
    /// or timed out. On the last two its node (`client.node`) answers the
    /// connection blocked in `WAIT`.
    Wait { client: ClientId, seq: u64, key: Bytes, owner: Bytes, step: WaitStep, waited_ms: u64 },
    /// Every key was deleted (`FLUSHALL`, `FLUSHDB`): clients that cache
    /// keys (`CLIENT TRACKING`) drop everything.
    Flushed,
    /// A command a script ran, for `MONITOR` (only while the node has a
    /// monitor: [`ExecCtx::monitored`]): its arguments as a monitor line
    /// shows them (`protocol::repr::monitor_args`).
    ScriptCall { shown: Bytes },
}

/// Everything an applied command may read or produce besides the keyspace.
#[derive(Debug)]
pub struct ExecCtx {
    /// The version given to keys this command creates (see [`Version`]).
    pub version: Version,
    /// Log time of the entry; the only "now" the state machine knows.
    pub log_time: LogTime,
    /// The leader's wall clock when it stamped the entry, used only to convert
    /// absolute Unix times (`EXAT`, `PXAT`) into log time.
    pub unix_ms: u64,
    pub events: Vec<Event>,
    /// The client command being applied, when it stands alone (not in a
    /// transaction, a script or a pipeline): only then may it block, as
    /// `LOCK.ACQUIRE ... WAIT` does by joining a queue.
    pub blocking_origin: Option<(ClientId, u64)>,
    /// How many random choices commands of this entry made so far (see
    /// [`ExecCtx::random_seed`]).
    draws: u64,
    /// This node shows commands to `MONITOR`: scripts report the commands
    /// they run ([`Event::ScriptCall`]). Changes nothing else.
    pub monitored: bool,
    /// The bytes of [`Event::ScriptCall`]s so far (see
    /// [`ExecCtx::show_script_call`]).
    shown_bytes: usize,
}

/// The most a command's scripts show to `MONITOR`: what a script runs past
/// it is not shown (a monitor that far behind would be let go anyway).
pub const MAX_SHOWN_BYTES: usize = 4 << 20;

impl ExecCtx {
    pub fn new(version: Version, log_time: LogTime, unix_ms: u64) -> Self {
        ExecCtx {
            version,
            log_time,
            unix_ms,
            events: Vec::new(),
            blocking_origin: None,
            draws: 0,
            monitored: false,
            shown_bytes: 0,
        }
    }

    /// A script ran a command: shown to this node's monitors (`shown`
    /// formats it), if it has any, up to [`MAX_SHOWN_BYTES`] a command.
    pub fn show_script_call(&mut self, shown: impl FnOnce() -> Vec<u8>) {
        if !self.monitored || self.shown_bytes > MAX_SHOWN_BYTES {
            return;
        }
        let shown = shown();
        if shown.is_empty() {
            return;
        }
        self.shown_bytes += shown.len();
        self.events.push(Event::ScriptCall { shown: Bytes::from(shown) });
    }

    /// A seed for a command that chooses at random (`SPOP`, `SRANDMEMBER`,
    /// `HRANDFIELD`): drawn from the entry (its version, its log time and
    /// how many seeds it gave out before), so every replica chooses alike.
    pub fn random_seed(&mut self) -> u64 {
        self.draws += 1;
        mix64(self.version ^ mix64(self.log_time ^ mix64(self.draws)))
    }

    /// The view a read-only command run inside this entry (a script's
    /// `redis.call`, a transaction) gets.
    pub fn read_ctx(&mut self) -> ReadCtx {
        let seed = self.random_seed();
        ReadCtx { now: self.log_time, clock_now: self.log_time, unix_ms: self.unix_ms, seed }
    }

    pub fn key_event(&mut self, class: char, name: &'static str, key: &Bytes) {
        self.events.push(Event::Key { class, name, key: key.clone() });
    }

    /// Converts an absolute Unix time in ms into log time.
    pub fn unix_to_log_time(&self, unix_ms: i64) -> LogTime {
        let delta = unix_ms.saturating_sub(self.unix_ms as i64);
        (self.log_time as i64).saturating_add(delta).max(0) as LogTime
    }
}

/// Read-only view parameters: the leader's current log time.
#[derive(Debug, Clone, Copy)]
pub struct ReadCtx {
    /// The log time a read is judged at: which keys exist.
    pub now: LogTime,
    /// How far log time has got by now, as the node can tell (at least
    /// `now`; see `LogClock::estimate_from`): only for the time a key has
    /// left (`TTL`, `PTTL`).
    pub clock_now: LogTime,
    pub unix_ms: u64,
    /// Where a read that chooses at random (`SRANDMEMBER`) starts: any value
    /// on the leader, [`ExecCtx::random_seed`] inside an applied entry.
    pub seed: u64,
}

impl ReadCtx {
    /// A view at `now` for tests and internal checks that choose nothing at random.
    pub fn at(now: LogTime) -> ReadCtx {
        ReadCtx { now, clock_now: now, unix_ms: 0, seed: 0 }
    }
}

/// SplitMix64's finaliser: a well-mixed 64-bit value from any input.
pub fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small deterministic generator (SplitMix64) for the commands that choose
/// at random: seeded from the entry, it chooses the same on every replica.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() as u128) * (n as u128)) >> 64) as usize
    }
}

/// All keys, with an index of expiry times.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Keyspace {
    /// Persistent (shared-structure) maps: a clone costs O(1) and later
    /// changes copy only what they touch, so a snapshot is taken under the
    /// lock in constant time and encoded elsewhere while applying goes on.
    entries: KeyMap<Entry>,
    expiries: expiries::Expiries,
    /// Highest log time applied so far.
    log_time: LogTime,
    /// Last version handed out.
    last_version: Version,
    /// The script cache (`SCRIPT LOAD`, `EVAL`): SHA1 hex -> body. Replicated,
    /// so `EVALSHA` works on every node.
    scripts: imbl::OrdMap<String, Bytes>,
    /// The last command and reply of each client (retries run once).
    sessions: Sessions,
    /// Owners waiting for lock keys (`LOCK.ACQUIRE ... WAIT`).
    waiters: Waiters,
    /// Keys with waiters removed by the command being applied: at its end,
    /// each that is still free goes to its first waiter ([`Keyspace::hand_off`]).
    freed: Vec<Bytes>,
    /// While a transaction that may have to be undone runs: what it changed.
    undo: Option<Box<Undo>>,
    /// ACL users. Shared, replaced whole when it changes (rarely), so a
    /// node publishes it to its connections by pointer.
    acl: std::sync::Arc<acl::AclTable>,
    /// `FUNCTION LOAD`'s libraries, by name. Shared, copied on change.
    libraries: std::sync::Arc<Libraries>,
}

/// The function libraries (`FUNCTION LOAD`), by library name.
pub type Libraries = BTreeMap<String, Library>;

/// A function library: its code (with its `#!lua name=...` line) and the
/// functions it registered when loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Library {
    pub code: Bytes,
    pub functions: Vec<FunctionInfo>,
}

/// One registered function: its name, flags (`no-writes`, ...) and
/// description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionInfo {
    pub name: String,
    pub flags: Vec<String>,
    pub description: Option<String>,
}

/// What a transaction changed, to put back if it is undone: each key's entry
/// as it was before its first change (cost in proportion to what changed, not
/// to the keyspace).
#[derive(Debug, Default, Clone, PartialEq)]
struct Undo {
    /// Ordered: putting keys back may free locks, whose handoffs take
    /// versions in this order, the same on every node.
    keys: BTreeMap<Bytes, Option<Entry>>,
    /// The whole keyspace, saved once if the transaction flushed it.
    flushed: Option<(KeyMap<Entry>, expiries::Expiries)>,
    scripts: Option<imbl::OrdMap<String, Bytes>>,
    libraries: Option<std::sync::Arc<Libraries>>,
    waiters: Option<Waiters>,
    /// Sessions as they were, if a handoff resolved a waiter's reply.
    sessions: Option<Sessions>,
    last_version: Version,
}

#[derive(Deserialize)]
struct SnapshotV1 {
    log_time: LogTime,
    last_version: Version,
    scripts: BTreeMap<String, Bytes>,
    entries: DecodedEntries,
}

/// The keys of a snapshot (a sequence of key and entry), read into the map
/// as they are decoded. Older versions wrote them in name order, this one
/// in the map's (hash) order; any order is taken, a key twice is not (its
/// first copy's expiry would stay indexed). The expiry index is built
/// afterwards, from the expiries sorted (inserting them one by one would
/// land all over the index).
#[derive(Default)]
struct DecodedEntries {
    map: KeyMap<Entry>,
    expiries: Vec<(LogTime, Key)>,
}

impl<'de> Deserialize<'de> for DecodedEntries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = DecodedEntries;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sequence of keys and their entries")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<DecodedEntries, A::Error> {
                let mut out = DecodedEntries::default();
                while let Some((key, entry)) = seq.next_element::<(Key, Entry)>()? {
                    let at = entry.expires_at();
                    if out.map.insert(key.clone(), entry).is_some() {
                        return Err(serde::de::Error::custom("a key appears twice in the snapshot"));
                    }
                    if let Some(at) = at {
                        out.expiries.push((at, key));
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_seq(Entries)
    }
}

/// The keys of a keyspace as [`DecodedEntries`] reads them, written as they
/// are iterated (no list of them first).
struct EncodedEntries<'a>(&'a KeyMap<Entry>);

impl Serialize for EncodedEntries<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for pair in self.0.iter() {
            seq.serialize_element(&pair)?;
        }
        seq.end()
    }
}

/// Format 2: format 1 and the client sessions.
#[derive(Deserialize)]
struct SnapshotV2 {
    v1: SnapshotV1,
    sessions: Vec<(ClientId, u64, crate::protocol::Reply, LogTime)>,
}

/// Format 3: format 2 and the lock waiters.
#[derive(Deserialize)]
struct SnapshotV3 {
    v2: SnapshotV2,
    waiters: Vec<(Bytes, Vec<Waiter>)>,
}

/// Format 4: format 3 and the ACL users (written only when there are any).
#[derive(Deserialize)]
struct SnapshotV4 {
    v3: SnapshotV3,
    acl: acl::AclTable,
}

/// Format 5: format 4 and the function libraries (written only when there
/// are any).
#[derive(Deserialize)]
struct SnapshotV5 {
    v4: SnapshotV4,
    libraries: Libraries,
}

/// Format 6: format 5 and the users' ACL selectors (written only when a
/// user has any; the libraries may be empty).
#[derive(Deserialize)]
struct SnapshotV6 {
    v5: SnapshotV5,
    selectors: BTreeMap<String, Vec<acl::Selector>>,
}

/// [`SnapshotV1`] as written: borrowed, serialised to the same bytes.
#[derive(Serialize)]
struct SnapshotV1Out<'a> {
    log_time: LogTime,
    last_version: Version,
    scripts: BTreeMap<&'a String, &'a Bytes>,
    entries: EncodedEntries<'a>,
}

/// [`SnapshotV2`] as written.
#[derive(Serialize)]
struct SnapshotV2Out<'a> {
    v1: SnapshotV1Out<'a>,
    sessions: Vec<(ClientId, u64, crate::protocol::Reply, LogTime)>,
}

/// [`SnapshotV3`] as written.
#[derive(Serialize)]
struct SnapshotV3Out<'a> {
    v2: SnapshotV2Out<'a>,
    waiters: Vec<(&'a Bytes, Vec<&'a Waiter>)>,
}

/// Largest last version a snapshot may carry: half the token range.
pub const MAX_SNAPSHOT_VERSION: Version = (i64::MAX / 2) as u64;
/// Largest log time a snapshot may carry: 2^53 ms, some 285,000 years.
pub const MAX_SNAPSHOT_LOG_TIME: LogTime = 1 << 53;

/// A snapshot that cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[error("corrupt keyspace snapshot: {0}")]
pub struct SnapshotError(String);

impl Keyspace {
    pub fn new() -> Self {
        Self::default()
    }

    /// Log time of the last applied entry.
    pub fn log_time(&self) -> LogTime {
        self.log_time
    }

    /// The last version (token) handed out.
    pub fn last_version(&self) -> Version {
        self.last_version
    }

    /// The version for the next command of the entry at `log_index`: the log
    /// index itself, unless an earlier command took it (then one more than the
    /// last version).
    pub fn next_version(&mut self, log_index: u64) -> Version {
        self.last_version = log_index.max(self.last_version + 1);
        self.last_version
    }

    /// Forgets every lock waiter: for a keyspace that continues in a new
    /// cluster (`raft::recovery`), where no connection of the old one is
    /// left to be granted or to leave the queue.
    pub fn drop_waiters(&mut self) {
        self.waiters = Waiters::default();
    }

    /// Makes the next version at least `gap` above every version handed out
    /// so far, for a keyspace that continues where others may have gone on
    /// without it (a restored backup, a forced survivor: `raft::recovery`).
    /// Refused if that would come near [`MAX_SNAPSHOT_VERSION`].
    pub fn skip_versions(&mut self, gap: u64) -> Result<(), SnapshotError> {
        match self.last_version.checked_add(gap) {
            Some(v) if v <= MAX_SNAPSHOT_VERSION / 2 => {
                self.last_version = v;
                Ok(())
            }
            _ => Err(SnapshotError(format!("version {} cannot skip {gap} more", self.last_version))),
        }
    }

    /// Moves the keyspace's time forward to `t` (never backward) and returns
    /// the time to apply the entry at.
    pub fn advance_to(&mut self, t: LogTime) -> LogTime {
        self.log_time = self.log_time.max(t);
        self.log_time
    }

    /// The live entry under `key` at `now`.
    pub fn get(&self, key: &[u8], now: LogTime) -> Option<&Entry> {
        self.entries.get(key).filter(|e| !e.is_expired(now))
    }

    /// The live entry under `key`, for modification; an expired entry is
    /// deleted first (emitting `expired`), as Redis expires keys lazily.
    pub fn get_mut(&mut self, key: &Bytes, ctx: &mut ExecCtx) -> Option<&mut Entry> {
        match self.entries.get(&key[..]) {
            // A miss ends here: the map's mutable lookup would copy the
            // nodes on its path that a snapshot still shares, for nothing.
            None => return None,
            Some(e) if e.is_expired(ctx.log_time) => {
                self.expire_key(key, ctx);
                return None;
            }
            Some(_) => {}
        }
        self.remember(key);
        self.entries.get_mut(&key[..])
    }

    /// From now on, records what changes so that [`Keyspace::undo`] can put
    /// it back (a transaction with a `LOCK.FENCE` that may turn out stale).
    pub fn begin_undoable(&mut self) {
        self.undo = Some(Box::new(Undo { last_version: self.last_version, ..Undo::default() }));
    }

    /// Keeps every change since [`Keyspace::begin_undoable`].
    pub fn keep_changes(&mut self) {
        self.undo = None;
    }

    /// Puts back everything changed since [`Keyspace::begin_undoable`].
    pub fn undo(&mut self) {
        let Some(undo) = self.undo.take() else { return };
        let Undo { keys, flushed, scripts, libraries, waiters, sessions, last_version } = *undo;
        if let Some((entries, expiries)) = flushed {
            self.entries = entries;
            self.expiries = expiries;
        }
        for (key, before) in keys {
            self.remove(&key);
            if let Some(entry) = before {
                self.insert(key, entry);
            }
        }
        if let Some(scripts) = scripts {
            self.scripts = scripts;
        }
        if let Some(libraries) = libraries {
            self.libraries = libraries;
        }
        if let Some(waiters) = waiters {
            self.waiters = waiters;
        }
        if let Some(sessions) = sessions {
            self.sessions = sessions;
        }
        self.last_version = last_version;
    }

    /// Notes `key`'s entry as it is now, the first time a transaction that
    /// may be undone changes it.
    fn remember(&mut self, key: &[u8]) {
        let Some(undo) = self.undo.as_mut() else { return };
        if undo.flushed.is_none() && !undo.keys.contains_key(key) {
            undo.keys.insert(Bytes::copy_from_slice(key), self.entries.get(key).cloned());
        }
    }

    /// Whether `key` is live at `now`.
    pub fn contains(&self, key: &[u8], now: LogTime) -> bool {
        self.get(key, now).is_some()
    }

    /// Stores `entry` under `key`, replacing any previous value.
    pub fn insert(&mut self, key: Bytes, entry: Entry) {
        let key = Key::from(key);
        self.remember(&key);
        let at = entry.expires_at();
        // One descent of the map: the entry replaced comes back from it.
        if let Some(old_at) = self.entries.insert(key.clone(), entry).and_then(|old| old.expires_at()) {
            self.expiries.remove(old_at, &key);
        }
        if let Some(at) = at {
            self.expiries.insert(at, key);
        }
    }

    /// Removes `key` whatever its expiry, returning the entry it had.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        self.remember(key);
        let (key, entry) = self.entries.remove_with_key(key)?;
        if let Some(at) = entry.expires_at() {
            self.expiries.remove(at, &key);
        }
        if self.waiters.has(&key) {
            self.freed.push(key.to_bytes());
        }
        Some(entry)
    }

    /// Sets or clears the expiry of an existing key. Returns false if absent.
    pub fn set_expiry(&mut self, key: &Bytes, at: Option<LogTime>) -> bool {
        self.remember(key);
        let Some((name, entry)) = self.entries.get_key_value_mut(&key[..]) else { return false };
        if let Some(old) = entry.expires_at() {
            self.expiries.remove(old, key);
        }
        entry.set_expires_at(at);
        // As the entry holds it (the last millisecond is never).
        if let Some(at) = entry.expires_at() {
            self.expiries.insert(at, name.clone());
        }
        true
    }

    /// The earliest expiry of any key or waiter's deadline, due or not.
    pub fn next_expiry(&self) -> Option<LogTime> {
        let key = self.expiries.first().map(|(at, _)| at);
        match (key, self.waiters.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Deletes every key whose expiry has passed at the entry's log time.
    pub fn expire_due(&mut self, ctx: &mut ExecCtx) -> usize {
        let due: Vec<Key> = self
            .expiries
            .iter()
            .take_while(|(at, _)| ctx.log_time > *at)
            .map(|(_, k)| k.clone())
            .collect();
        for key in &due {
            self.expire_key(key, ctx);
        }
        due.len()
    }

    fn expire_key(&mut self, key: &[u8], ctx: &mut ExecCtx) {
        if let Some(entry) = self.remove(key) {
            let key = Bytes::copy_from_slice(key);
            ctx.key_event('x', "expired", &key);
            if entry.is_lease() {
                let held_ms = ctx.log_time.saturating_sub(entry.since);
                let ttl_ms = entry.expires_at().unwrap_or(0).saturating_sub(entry.since);
                let (owner, token) = (entry.owner(), entry.version);
                ctx.events.push(Event::Lease { kind: LeaseEvent::Expired, key, owner, token, ttl_ms, held_ms });
            }
        }
    }

    /// Live keys at `now`, in the map's order: by [`key_hash`], then name
    /// (the same on every node).
    pub fn iter(&self, now: LogTime) -> impl Iterator<Item = (&Key, &Entry)> {
        self.entries.iter().filter(move |(_, e)| !e.is_expired(now))
    }

    /// Live keys at `now` whose [`key_hash`] is `from` or more, in the
    /// map's order (`SCAN` from a cursor, `RANDOMKEY` from a random point):
    /// finding the first costs a lookup, not a walk of the keys before it.
    pub fn iter_from_hash(&self, from: u64, now: LogTime) -> impl Iterator<Item = (&Key, &Entry)> {
        self.entries.iter_from(from).filter(move |(_, e)| !e.is_expired(now))
    }

    /// Number of live keys at `now`.
    pub fn len(&self, now: LogTime) -> usize {
        let expired = self.expiries.iter().take_while(|(at, _)| now > *at).count();
        self.entries.len() - expired
    }

    /// What `WATCH` compares: the version of the last write to a live key, 0
    /// for a missing or expired key.
    pub fn modified(&self, key: &[u8], now: LogTime) -> Version {
        self.get(key, now).map(|e| e.modified).unwrap_or(0)
    }

    /// Records that the command with `version` wrote `key`.
    pub fn touch(&mut self, key: &[u8], version: Version) {
        self.remember(key);
        if let Some(e) = self.entries.get_mut(key) {
            e.modified = version;
        }
    }

    /// Number of keys that have an expiry.
    pub fn expires_count(&self) -> usize {
        self.expiries.len()
    }

    pub fn is_empty(&self, now: LogTime) -> bool {
        self.len(now) == 0
    }

    /// The cached script with this SHA1 (lower-case hex).
    pub fn script(&self, sha: &str) -> Option<&Bytes> {
        self.scripts.get(sha)
    }

    pub fn has_script(&self, sha: &str) -> bool {
        self.scripts.contains_key(sha)
    }

    /// Scripts cached, functions and libraries loaded (`INFO memory`).
    pub fn script_counts(&self) -> (usize, usize, usize) {
        let functions = self.libraries.values().map(|l| l.functions.len()).sum();
        (self.scripts.len(), functions, self.libraries.len())
    }

    /// Caches a script under its SHA1.
    pub fn add_script(&mut self, sha: String, body: Bytes) {
        self.remember_scripts();
        self.scripts.insert(sha, body);
    }

    pub fn flush_scripts(&mut self) {
        self.remember_scripts();
        self.scripts.clear();
    }

    /// The function libraries.
    pub fn libraries(&self) -> &Libraries {
        &self.libraries
    }

    /// Changes the function libraries (copying them if a snapshot still
    /// shares them).
    pub fn libraries_mut(&mut self) -> &mut Libraries {
        if let Some(undo) = self.undo.as_mut() {
            if undo.libraries.is_none() {
                undo.libraries = Some(self.libraries.clone());
            }
        }
        std::sync::Arc::make_mut(&mut self.libraries)
    }

    fn remember_scripts(&mut self) {
        if let Some(undo) = self.undo.as_mut() {
            if undo.scripts.is_none() {
                undo.scripts = Some(self.scripts.clone());
            }
        }
    }

    /// Deletes every key.
    pub fn clear(&mut self) {
        if let Some(undo) = self.undo.as_mut() {
            if undo.flushed.is_none() {
                // Keys changed before the flush are put back first, then
                // this: the state before the transaction.
                let mut entries = std::mem::take(&mut self.entries);
                let mut expiries = std::mem::take(&mut self.expiries);
                for (key, before) in std::mem::take(&mut undo.keys) {
                    if let Some(e) = entries.remove(&key[..]) {
                        if let Some(at) = e.expires_at() {
                            expiries.remove(at, &key);
                        }
                    }
                    if let Some(e) = before {
                        let key = Key::from(key);
                        if let Some(at) = e.expires_at() {
                            expiries.insert(at, key.clone());
                        }
                        entries.insert(key, e);
                    }
                }
                undo.flushed = Some((entries, expiries));
            }
        }
        self.entries.clear();
        self.expiries.clear();
        self.freed.extend(self.waiters.keys().cloned());
    }

    /// For the planted bug `TokenReuse` (src/planted.rs): forgets the last
    /// version handed out, keeping only the highest among live keys.
    pub fn planted_forget_last_version(&mut self) {
        self.last_version = self.entries.values().map(|e| e.version).max().unwrap_or(0);
    }

    /// A SHA1 of the whole keyspace (hex): equal on replicas that applied the
    /// same entries.
    pub fn digest(&self) -> String {
        sha1_smol::Sha1::from(self.encode()).digest().to_string()
    }

    /// Encodes the whole keyspace for a Raft snapshot. Takes time in
    /// proportion to the keyspace: encode a clone (O(1), see `entries`)
    /// away from the apply path.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// [`Keyspace::encode`], appended to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        self.encode_to(out).expect("serialising plain data into memory cannot fail");
    }

    /// [`Keyspace::encode`], written to `out` as it is produced (into a
    /// snapshot file: no copy of the whole encoding in memory).
    pub fn encode_to(&self, mut out: impl std::io::Write) -> std::io::Result<()> {
        // In the map's order (by hash, then name: the same for the same
        // keys), so equal keyspaces give byte-identical snapshots.
        let entries = EncodedEntries(&self.entries);
        let v1 = SnapshotV1Out {
            log_time: self.log_time,
            last_version: self.last_version,
            scripts: self.scripts.iter().collect(),
            entries,
        };
        let v2 = SnapshotV2Out { v1, sessions: self.sessions.to_list() };
        let snap = SnapshotV3Out { v2, waiters: self.waiters.to_list() };
        let selectors = self.acl.selectors();
        let written = if !selectors.is_empty() {
            out.write_all(&[6u8])?;
            bincode::serialize_into(&mut out, &(snap, &*self.acl, &*self.libraries, selectors))
        } else if !self.libraries.is_empty() {
            out.write_all(&[5u8])?;
            bincode::serialize_into(&mut out, &(snap, &*self.acl, &*self.libraries))
        } else if self.acl.users.is_empty() {
            out.write_all(&[3u8])?;
            bincode::serialize_into(&mut out, &snap)
        } else {
            out.write_all(&[4u8])?;
            bincode::serialize_into(&mut out, &(snap, &*self.acl))
        };
        written.map_err(|e| match *e {
            bincode::ErrorKind::Io(e) => e,
            e => std::io::Error::other(e),
        })
    }

    /// Decodes what [`Keyspace::encode`] produced (and format 1, which had no
    /// sessions).
    pub fn decode(data: &[u8]) -> Result<Keyspace, SnapshotError> {
        let corrupt = |e: bincode::Error| SnapshotError(e.to_string());
        let mut acl = acl::AclTable::default();
        let mut libraries = Libraries::new();
        let (v1, sessions, waiters) = match data.split_first() {
            None => return Ok(Keyspace::new()),
            Some((6, rest)) => {
                let snap = bincode::deserialize::<SnapshotV6>(rest).map_err(corrupt)?;
                acl = snap.v5.v4.acl;
                for (name, selectors) in snap.selectors {
                    match acl.users.get_mut(&name) {
                        Some(u) => u.selectors = selectors,
                        None => return Err(SnapshotError(format!("selectors of user {name}, who does not exist"))),
                    }
                }
                libraries = snap.v5.libraries;
                (snap.v5.v4.v3.v2.v1, snap.v5.v4.v3.v2.sessions, snap.v5.v4.v3.waiters)
            }
            Some((5, rest)) => {
                let snap = bincode::deserialize::<SnapshotV5>(rest).map_err(corrupt)?;
                acl = snap.v4.acl;
                libraries = snap.libraries;
                (snap.v4.v3.v2.v1, snap.v4.v3.v2.sessions, snap.v4.v3.waiters)
            }
            Some((4, rest)) => {
                let snap = bincode::deserialize::<SnapshotV4>(rest).map_err(corrupt)?;
                acl = snap.acl;
                (snap.v3.v2.v1, snap.v3.v2.sessions, snap.v3.waiters)
            }
            Some((1, rest)) => (bincode::deserialize::<SnapshotV1>(rest).map_err(corrupt)?, Vec::new(), Vec::new()),
            Some((2, rest)) => {
                let snap = bincode::deserialize::<SnapshotV2>(rest).map_err(corrupt)?;
                (snap.v1, snap.sessions, Vec::new())
            }
            Some((3, rest)) => {
                let snap = bincode::deserialize::<SnapshotV3>(rest).map_err(corrupt)?;
                (snap.v2.v1, snap.v2.sessions, snap.waiters)
            }
            Some((v, _)) => return Err(SnapshotError(format!("unknown snapshot format {v}"))),
        };
        // Versions are fencing tokens, which clients get as signed 64-bit
        // integers, and log time is milliseconds since the cluster began:
        // values near the top of u64 cannot come from a running cluster,
        // and would overflow what is computed from them.
        if v1.last_version > MAX_SNAPSHOT_VERSION || v1.log_time > MAX_SNAPSHOT_LOG_TIME {
            return Err(SnapshotError(format!(
                "implausible snapshot: last version {}, log time {}",
                v1.last_version, v1.log_time
            )));
        }
        let DecodedEntries { map: entries, expiries: mut at } = v1.entries;
        // (time, key) order. Keys are unique, so an unstable sort gives the
        // one order; names are compared only between keys of one
        // millisecond, and a short name is held in its key, not elsewhere
        // in memory.
        at.sort_unstable_by(|(t1, k1), (t2, k2)| t1.cmp(t2).then_with(|| k1.cmp(k2)));
        let ks = Keyspace {
            entries,
            expiries: expiries::Expiries::from_sorted(at),
            log_time: v1.log_time,
            last_version: v1.last_version,
            scripts: v1.scripts.into_iter().collect(),
            sessions: Sessions::from_list(sessions),
            waiters: Waiters::from_list(waiters),
            acl: std::sync::Arc::new(acl),
            libraries: std::sync::Arc::new(libraries),
            ..Keyspace::default()
        };
        Ok(ks)
    }

    /// The ACL users defined through the log.
    pub fn acl(&self) -> &std::sync::Arc<acl::AclTable> {
        &self.acl
    }

    /// Changes the ACL users (copying the table if a node still shares it).
    pub fn acl_mut(&mut self) -> &mut acl::AclTable {
        std::sync::Arc::make_mut(&mut self.acl)
    }

    /// The lock waiters.
    pub fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    /// Adds a waiter to `key`'s queue (see [`Waiters::enqueue`]).
    pub fn enqueue_waiter(&mut self, key: &Bytes, waiter: Waiter) -> Enqueued {
        self.remember_waiters();
        self.waiters.enqueue(key, waiter)
    }

    /// Takes `owner`'s place in `key`'s queue if `client` is the connection
    /// it answers.
    pub fn remove_waiter(&mut self, key: &Bytes, owner: &[u8], client: &ClientId) -> Option<Waiter> {
        self.remember_waiters();
        self.waiters.remove(key, owner, client)
    }

    /// Notes the waiters (and the sessions, where their ends are recorded)
    /// as they are now, the first time a transaction that may be undone
    /// changes them.
    fn remember_waiters(&mut self) {
        if let Some(undo) = self.undo.as_mut() {
            if undo.waiters.is_none() {
                undo.waiters = Some(self.waiters.clone());
                undo.sessions = Some(self.sessions.clone());
            }
        }
    }

    /// If `key` is free and has waiters, grants it to the first whose
    /// deadline has not passed (those whose has are told so and leave): a
    /// new entry owned by the waiter, with a new version (its fencing token)
    /// and its lease from this entry's log time. Called wherever a lock may
    /// have been freed, so that nobody takes a lock that others queue for.
    pub fn settle(&mut self, key: &Bytes, ctx: &mut ExecCtx) {
        if !self.waiters.has(key) || self.get_mut(key, ctx).is_some() {
            return;
        }
        self.remember_waiters();
        while let Some(w) = self.waiters.pop_front(key) {
            let waited_ms = ctx.log_time.saturating_sub(w.since);
            let (client, seq) = (w.client, w.seq);
            if ctx.log_time > w.deadline {
                self.sessions.resolve(client, seq, &crate::protocol::Reply::Nil, ctx.log_time);
                let (key, owner) = (key.clone(), w.owner);
                ctx.events.push(Event::Wait { client, seq, key, owner, step: WaitStep::TimedOut, waited_ms });
                continue;
            }
            let token = self.next_version(ctx.version);
            let mut entry = Entry::string(w.owner.clone(), token, ctx.log_time);
            entry.set_expires_at(Some(ctx.log_time.saturating_add(w.ttl_ms)));
            entry.set_lease(true);
            self.insert(key.clone(), entry);
            ctx.key_event('$', "set", key);
            ctx.key_event('g', "expire", key);
            ctx.events.push(Event::Lease {
                kind: LeaseEvent::Acquired,
                key: key.clone(),
                owner: w.owner.clone(),
                token,
                ttl_ms: w.ttl_ms,
                held_ms: 0,
            });
            self.sessions.resolve(client, seq, &crate::protocol::Reply::Int(token as i64), ctx.log_time);
            let (key, owner, step) = (key.clone(), w.owner, WaitStep::Granted { token });
            ctx.events.push(Event::Wait { client, seq, key, owner, step, waited_ms });
            return;
        }
    }

    /// At the end of a command: hands every lock it freed to its waiters.
    pub fn hand_off(&mut self, ctx: &mut ExecCtx) {
        while !self.freed.is_empty() {
            let freed = std::mem::take(&mut self.freed);
            for key in freed {
                self.settle(&key, ctx);
            }
        }
    }

    /// Ends the wait of every waiter whose deadline has passed (the `Expire`
    /// entry).
    pub fn expire_waiters(&mut self, ctx: &mut ExecCtx) -> usize {
        self.remember_waiters();
        let gone = self.waiters.take_timed_out(ctx.log_time);
        let n = gone.len();
        for (key, w) in gone {
            let waited_ms = ctx.log_time.saturating_sub(w.since);
            let (client, seq, owner) = (w.client, w.seq, w.owner);
            self.sessions.resolve(client, seq, &crate::protocol::Reply::Nil, ctx.log_time);
            ctx.events.push(Event::Wait { client, seq, key, owner, step: WaitStep::TimedOut, waited_ms });
        }
        n
    }

    /// The client sessions (retried commands run once).
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    pub fn sessions_mut(&mut self) -> &mut Sessions {
        &mut self.sessions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// An entry's bytes in a snapshot, written out by hand from bincode's
    /// rules (the format every snapshot and backup so far was written in):
    /// the value (variant index u32, then the bytes' length u64 and the
    /// bytes), the expiry as an option (tag byte, u64), version, since, the
    /// lease flag (one byte), modified. The entry's own layout may change;
    /// these bytes may not.
    #[test]
    fn an_entry_is_written_in_the_snapshot_format_it_always_had() {
        let mut e = Entry::string(b("ab"), 7, 9);
        e.set_lease(true);
        e.modified = 11;
        let mut want = vec![0, 0, 0, 0];
        want.extend(2u64.to_le_bytes());
        want.extend(b"ab");
        let tail = |want: &mut Vec<u8>| {
            want.extend(7u64.to_le_bytes());
            want.extend(9u64.to_le_bytes());
            want.push(1);
            want.extend(11u64.to_le_bytes());
        };
        let mut without = want.clone();
        without.push(0);
        tail(&mut without);
        assert_eq!(bincode::serialize(&e).unwrap(), without);
        assert_eq!(bincode::deserialize::<Entry>(&without).unwrap(), e);
        e.set_expires_at(Some(300));
        want.push(1);
        want.extend(300u64.to_le_bytes());
        tail(&mut want);
        assert_eq!(bincode::serialize(&e).unwrap(), want);
        let back: Entry = bincode::deserialize(&want).unwrap();
        assert_eq!((back.expires_at(), back), (Some(300), e.clone()));
        // A time from the last millisecond an entry holds on is kept as the
        // one before it: that value means "no expiry" inside an entry, and
        // the bit above it is the lease flag, which no expiry may touch.
        for at in [u64::MAX, NO_EXPIRY, NO_EXPIRY + 1, LEASE] {
            e.set_expires_at(Some(at));
            assert_eq!((e.expires_at(), e.is_lease()), (Some(NO_EXPIRY - 1), true), "{at}");
        }
        e.set_lease(false);
        e.set_expires_at(Some(u64::MAX));
        assert_eq!((e.expires_at(), e.is_lease()), (Some(NO_EXPIRY - 1), false));
        e.set_expires_at(None);
        assert_eq!((e.expires_at(), e.is_lease()), (None, false));
        e.set_lease(true);
        assert_eq!((e.expires_at(), e.is_lease()), (None, true));
        let mut ks = Keyspace::new();
        ks.insert(b("k"), Entry::string(b("v"), 1, 0));
        assert!(ks.set_expiry(&b("k"), Some(u64::MAX)));
        assert_eq!(ks.expires_count(), 1);
        assert_eq!(ks.next_expiry(), Some(NO_EXPIRY - 1));
        assert!(ks.set_expiry(&b("k"), None));
        assert_eq!((ks.expires_count(), ks.next_expiry()), (0, None));
    }

    /// What every key costs in the map's slot besides its name: a value of
    /// 32 bytes (a string of up to 22 bytes inside it) and an entry of 64.
    #[test]
    fn an_entry_is_64_bytes() {
        assert_eq!(std::mem::size_of::<Value>(), 32);
        assert_eq!(std::mem::size_of::<Entry>(), 64);
    }

    #[test]
    fn skipped_versions_stay_skipped_through_a_snapshot() {
        let mut ks = Keyspace::new();
        assert_eq!(ks.next_version(10), 10);
        ks.skip_versions(1000).unwrap();
        let ks2 = Keyspace::decode(&ks.encode()).unwrap();
        let mut ks = ks2;
        assert_eq!(ks.next_version(11), 1011, "above the gap, not the log index");
        assert!(ks.skip_versions(MAX_SNAPSHOT_VERSION).is_err());
        assert_eq!(ks.last_version(), 1011, "a refused skip changes nothing");
    }

    #[test]
    fn script_calls_are_shown_only_while_monitored_and_bounded() {
        let mut ctx = ExecCtx::new(1, 0, 0);
        ctx.show_script_call(|| b" \"get\"".to_vec());
        assert!(ctx.events.is_empty(), "no monitor, nothing kept");
        ctx.monitored = true;
        ctx.show_script_call(Vec::new);
        assert!(ctx.events.is_empty(), "a command never shown");
        for _ in 0..10_000 {
            ctx.show_script_call(|| vec![b'x'; 1024]);
        }
        let shown: usize = ctx
            .events
            .iter()
            .map(|e| match e {
                Event::ScriptCall { shown } => shown.len(),
                other => panic!("{other:?}"),
            })
            .sum();
        assert!(shown > MAX_SHOWN_BYTES && shown <= MAX_SHOWN_BYTES + 1024, "{shown}");
    }

    #[test]
    fn expiry_is_judged_by_log_time_only() {
        let mut ks = Keyspace::new();
        let mut e = Entry::string(b("v"), 1, 0);
        e.set_expires_at(Some(100));
        ks.insert(b("k"), e);
        assert!(ks.contains(b"k", 100));
        assert!(!ks.contains(b"k", 101));
        assert_eq!(ks.len(100), 1);
        assert_eq!(ks.len(101), 0);
        assert_eq!(ks.next_expiry(), Some(100));

        let mut ctx = ExecCtx::new(2, 100, 0);
        assert_eq!(ks.expire_due(&mut ctx), 0);
        let mut ctx = ExecCtx::new(3, 101, 0);
        assert_eq!(ks.expire_due(&mut ctx), 1);
        assert_eq!(ctx.events, vec![Event::Key { class: 'x', name: "expired", key: b("k") }]);
        assert_eq!(ks.next_expiry(), None);
    }

    #[test]
    fn lazy_expiry_on_write_emits_lease_event() {
        let mut ks = Keyspace::new();
        let mut e = Entry::string(b("owner"), 5, 10);
        e.set_expires_at(Some(40));
        e.set_lease(true);
        ks.insert(b("lock"), e);
        let mut ctx = ExecCtx::new(9, 50, 0);
        assert!(ks.get_mut(&b("lock"), &mut ctx).is_none());
        assert!(ctx.events.contains(&Event::Lease { kind: LeaseEvent::Expired, key: b("lock"), owner: b("owner"), token: 5, ttl_ms: 30, held_ms: 40 }));
    }

    #[test]
    fn snapshot_round_trip_keeps_expiry_index() {
        let mut ks = Keyspace::new();
        ks.advance_to(77);
        let mut e = Entry::string(b("v"), 3, 0);
        e.set_expires_at(Some(500));
        ks.insert(b("a"), e);
        ks.insert(b("b"), Entry::string(b("w"), 4, 0));
        ks.add_script("sha".into(), b("return 1"));
        let client = ClientId { node: 1, boot: 2, conn: 3 };
        ks.sessions_mut().record(client, 9, &crate::protocol::Reply::Int(4), 70);
        for (owner, deadline) in [("w1", 900), ("w2", 600)] {
            let waiter = Waiter { owner: b(owner), ttl_ms: 10, deadline, since: 70, client, seq: 9 };
            ks.enqueue_waiter(&b("a"), waiter);
        }
        let back = Keyspace::decode(&ks.encode()).unwrap();
        assert_eq!(back, ks);
        assert_eq!(back.waiters().queue(b"a").map(|w| w.owner.clone()).collect::<Vec<_>>(), vec![b("w1"), b("w2")]);
        assert_eq!(back.waiters().next_deadline(), Some(600));
        assert_eq!(back.next_expiry(), Some(500));
        assert_eq!(back.log_time(), 77);
        assert_eq!(back.script("sha"), Some(&b("return 1")));
        assert_eq!(back.sessions().check(&client, 9), Seen::Again(crate::protocol::Reply::Int(4)));
        assert!(Keyspace::decode(&[9, 1, 2]).is_err());
    }

    #[test]
    fn a_snapshot_decodes_many_keys_and_their_expiries_in_any_order() {
        let mut ks = Keyspace::new();
        for i in 0..5000u64 {
            let mut e = Entry::string(Bytes::from(format!("owner{i}")), i + 1, 0);
            // Expiries in another order than the keys, some shared, some none.
            e.set_expires_at((i % 7 != 0).then_some(1_000_000 - (i * 7919) % 4999));
            ks.insert(Bytes::from(format!("k{i}")), e);
        }
        let back = Keyspace::decode(&ks.encode()).unwrap();
        assert_eq!(back, ks);
        assert_eq!(back.expires_count(), ks.expires_count());
        assert_eq!(back.next_expiry(), ks.next_expiry());
        assert_eq!(back.encode(), ks.encode());
    }

    #[test]
    fn a_snapshot_with_a_key_twice_is_refused() {
        let mut ks = Keyspace::new();
        ks.insert(b("a"), Entry::string(b("x"), 1, 0));
        ks.insert(b("b"), Entry::string(b("y"), 2, 0));
        let mut data = ks.encode();
        let b_key = [1u8, 0, 0, 0, 0, 0, 0, 0, b'b'];
        let at = data.windows(b_key.len()).position(|w| w == b_key).expect("key b in the encoding");
        data[at + 8] = b'a';
        let err = Keyspace::decode(&data).expect_err("a key twice");
        assert!(err.0.contains("twice"), "{}", err.0);
        // Keys in another order than the map's (snapshots before the hash
        // map wrote them in name order): taken, and the keyspace is the
        // one those keys make.
        let mut data = ks.encode();
        let a_key = [1u8, 0, 0, 0, 0, 0, 0, 0, b'a'];
        let at = data.windows(a_key.len()).position(|w| w == a_key).expect("key a in the encoding");
        data[at + 8] = b'c';
        let back = Keyspace::decode(&data).expect("keys in any order");
        let mut want = Keyspace::new();
        want.insert(b("c"), Entry::string(b("x"), 1, 0));
        want.insert(b("b"), Entry::string(b("y"), 2, 0));
        assert_eq!(back, want);
        assert_eq!(back.encode(), want.encode());
    }

    /// Replicas compare digests of their encodings (`RAFT.DIGEST`): the same
    /// keys, inserted in another order, encode to the same bytes.
    #[test]
    fn equal_keyspaces_encode_identically() {
        let keys: Vec<String> = (0..500).map(|i| format!("k{}", (i * 7919) % 500)).collect();
        let mut forward = Keyspace::new();
        let mut backward = Keyspace::new();
        for (i, k) in keys.iter().enumerate() {
            forward.insert(b(k), Entry::string(b("v"), i as u64, 0));
        }
        for (i, k) in keys.iter().enumerate().rev() {
            backward.insert(b(k), Entry::string(b("v"), i as u64, 0));
        }
        assert_eq!(forward.encode(), backward.encode());
    }

    #[test]
    fn versions_are_log_indexes_until_an_entry_holds_several_commands() {
        let mut ks = Keyspace::new();
        assert_eq!(ks.next_version(5), 5);
        // Three commands in the entry at index 6.
        assert_eq!(ks.next_version(6), 6);
        assert_eq!(ks.next_version(6), 7);
        assert_eq!(ks.next_version(6), 8);
        // The next entries continue above, strictly increasing.
        assert_eq!(ks.next_version(7), 9);
        assert_eq!(ks.next_version(20), 20);
        let back = Keyspace::decode(&ks.encode()).unwrap();
        assert_eq!(back.clone().next_version(21), 21);
        assert_eq!(back.clone().next_version(20), 21);
    }

    #[test]
    fn undo_puts_back_exactly_what_a_transaction_changed() {
        let mut ks = Keyspace::new();
        let mut ctx = ExecCtx::new(1, 0, 0);
        for i in 0..100 {
            let mut e = Entry::string(b("v"), i, 0);
            e.set_expires_at((i % 3 == 0).then_some(1000 + i));
            ks.insert(b(&format!("k{i}")), e);
        }
        ks.add_script("s".into(), b("return 1"));
        let before = ks.clone();
        ks.begin_undoable();
        ks.insert(b("new"), Entry::string(b("x"), 200, 5));
        ks.remove(b"k1");
        ks.set_expiry(&b("k2"), Some(7));
        ks.get_mut(&b("k3"), &mut ctx).unwrap().value = Value::Str(Str::new(b"changed"));
        ks.touch(b"k4", 300);
        ks.next_version(400);
        ks.flush_scripts();
        ks.undo();
        assert_eq!(ks, before);
        // A flush inside the transaction is undone too, with what came before it.
        ks.begin_undoable();
        ks.remove(b"k5");
        ks.insert(b("k6"), Entry::string(b("y"), 500, 5));
        ks.clear();
        ks.insert(b("after"), Entry::string(b("z"), 501, 5));
        ks.undo();
        assert_eq!(ks, before);
        // Kept changes stay, and nothing is recorded afterwards.
        ks.begin_undoable();
        ks.remove(b"k7");
        ks.keep_changes();
        ks.remove(b"k8");
        ks.undo();
        assert!(ks.get(b"k7", 0).is_none() && ks.get(b"k8", 0).is_none());
    }

    #[test]
    fn log_time_never_goes_backwards() {
        let mut ks = Keyspace::new();
        assert_eq!(ks.advance_to(10), 10);
        assert_eq!(ks.advance_to(5), 10);
    }
}
