//! Generic key commands: DEL, EXISTS, EXPIRE family, TTL, PTTL, EXPIRETIME,
//! PEXPIRETIME, PERSIST, TYPE, KEYS, SCAN, RANDOMKEY, RENAME, RENAMENX, COPY,
//! OBJECT.

use bytes::Bytes;

use crate::keyspace::{Entry, Event, Glob, ExecCtx, Keyspace, LeaseEvent, LogTime, ReadCtx, Rng, Value};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

use super::{relative_expiry, CmdError, CmdResult};

/// Deletes a live key with its `del` (and, for a lease, `lock.released`) events.
pub(super) fn delete_key(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes) -> bool {
    if ks.get_mut(key, ctx).is_none() {
        return false;
    }
    let Some(entry) = ks.remove(key) else { return false };
    ctx.key_event('g', "del", key);
    if entry.is_lease() {
        let held_ms = ctx.log_time.saturating_sub(entry.since);
        let ttl_ms = entry.expires_at().unwrap_or(0).saturating_sub(entry.since);
        let (owner, token) = (entry.owner(), entry.version);
        ctx.events.push(Event::Lease { kind: LeaseEvent::Released, key: key.clone(), owner, token, ttl_ms, held_ms });
    }
    true
}

/// ```text
/// DEL key [key ...]
/// ```
/// The number of keys removed.
pub fn del(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let removed = args.rest().iter().filter(|key| delete_key(ks, ctx, key)).count();
    Ok(Reply::Int(removed as i64))
}

/// ```text
/// EXISTS key [key ...]
/// ```
/// How many of the keys exist (a key named twice counts twice).
pub fn exists(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    Ok(Reply::Int(args.rest().iter().filter(|k| ks.contains(k, ctx.now)).count() as i64))
}

/// ```text
/// TOUCH key [key ...]
/// ```
/// How many of the keys exist (a key named twice counts twice), as
/// `EXISTS`: raftlock keeps no access times for a touch to update.
pub fn touch(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    exists(ks, ctx, args)
}

#[derive(Clone, Copy, PartialEq)]
enum ExpireCond {
    Nx,
    Xx,
    Gt,
    Lt,
}

fn expire_generic(
    ks: &mut Keyspace,
    ctx: &mut ExecCtx,
    mut args: Args,
    to_log_time: impl Fn(&ExecCtx, i64) -> Result<LogTime, CmdError>,
) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let amount = args.next_i64()?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    while args.remaining() > 0 {
        match args.next_keyword()?.as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            other => return Err(CmdError::Other(format!("ERR Unsupported option {other}"))),
        }
    }
    if nx && (xx || gt || lt) {
        return Err(CmdError::Other("ERR NX and XX, GT or LT options at the same time are not compatible".into()));
    }
    if gt && lt {
        return Err(CmdError::Other("ERR GT and LT options at the same time are not compatible".into()));
    }
    let at = to_log_time(ctx, amount)?;
    let Some(entry) = ks.get_mut(&key, ctx) else { return Ok(Reply::Int(0)) };
    let current = entry.expires_at();
    // Every condition given must hold (`XX` with `GT` or `LT` both).
    let allowed = [(nx, ExpireCond::Nx), (xx, ExpireCond::Xx), (gt, ExpireCond::Gt), (lt, ExpireCond::Lt)]
        .into_iter()
        .filter(|(set, _)| *set)
        .all(|(_, cond)| match cond {
            ExpireCond::Nx => current.is_none(),
            ExpireCond::Xx => current.is_some(),
            // No expiry counts as an infinite TTL.
            ExpireCond::Gt => current.is_some_and(|c| at > c),
            ExpireCond::Lt => current.is_none_or(|c| at < c),
        });
    if !allowed {
        return Ok(Reply::Int(0));
    }
    let (lease, since, owner, token) = (entry.is_lease(), entry.since, entry.owner(), entry.version);
    if at <= ctx.log_time {
        // An expiry in the past deletes the key, as Redis does.
        delete_key(ks, ctx, &key);
        return Ok(Reply::Int(1));
    }
    ks.set_expiry(&key, Some(at));
    ctx.key_event('g', "expire", &key);
    if lease {
        let held_ms = ctx.log_time.saturating_sub(since);
        let ttl_ms = at - ctx.log_time;
        let left_ms = current.map_or(0, |c| c.saturating_sub(ctx.log_time));
        ctx.events.push(Event::Lease { kind: LeaseEvent::Renewed { left_ms }, key, owner, token, ttl_ms, held_ms });
    }
    Ok(Reply::Int(1))
}

/// ```text
/// EXPIRE key seconds [NX | XX | GT | LT]
/// ```
/// 1 if the expiry was set, 0 if the key is missing or the condition failed.
pub fn expire(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    expire_generic(ks, ctx, args, |ctx, n| relative_expiry(ctx, n, 1000, "expire"))
}

/// ```text
/// PEXPIRE key milliseconds [NX | XX | GT | LT]
/// ```
pub fn pexpire(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    expire_generic(ks, ctx, args, |ctx, n| relative_expiry(ctx, n, 1, "pexpire"))
}

/// ```text
/// EXPIREAT key unix-time-seconds [NX | XX | GT | LT]
/// ```
/// The absolute time is converted with the leader's wall clock at stamping.
pub fn expireat(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    expire_generic(ks, ctx, args, |ctx, n| {
        Ok(ctx.unix_to_log_time(n.checked_mul(1000).ok_or(CmdError::InvalidExpire("expireat"))?))
    })
}

/// ```text
/// PEXPIREAT key unix-time-milliseconds [NX | XX | GT | LT]
/// ```
pub fn pexpireat(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    expire_generic(ks, ctx, args, |ctx, n| Ok(ctx.unix_to_log_time(n)))
}

/// `TTL`/`PTTL`: whether the key exists is judged at the read's log time
/// (`ctx.now`), the time it has left from where log time has got to by now
/// (`ctx.clock_now`), so that it counts down on an idle cluster, where no
/// entry moves log time on (0 once it is due, until the entry that
/// expires it is applied).
fn ttl_generic(ks: &Keyspace, ctx: &ReadCtx, mut args: Args, unit_ms: u64) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(Reply::Int(match ks.get(key, ctx.now) {
        None => -2,
        Some(e) => match e.ttl_ms(ctx.clock_now.max(ctx.now)) {
            None => -1,
            // Rounded to the nearest unit, as Redis does for TTL.
            Some(ms) => ((ms + unit_ms / 2) / unit_ms) as i64,
        },
    }))
}

/// ```text
/// TTL key
/// ```
/// Seconds left; -1 without expiry; -2 if the key does not exist.
pub fn ttl(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    ttl_generic(ks, ctx, args, 1000)
}

/// ```text
/// PTTL key
/// ```
/// Milliseconds left; -1 without expiry; -2 if the key does not exist.
pub fn pttl(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    ttl_generic(ks, ctx, args, 1)
}

fn expiretime_generic(ks: &Keyspace, ctx: &ReadCtx, mut args: Args, unit_ms: u64) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(Reply::Int(match ks.get(key, ctx.now) {
        None => -2,
        Some(e) => match e.expires_at() {
            None => -1,
            Some(at) => {
                // Log time back to the wall clock of the view (see ReadCtx):
                // exact for an expiry set as an absolute time.
                let unix_ms = (ctx.unix_ms as i64).saturating_add(at as i64 - ctx.now as i64).max(0) as u64;
                ((unix_ms + unit_ms / 2) / unit_ms) as i64
            }
        },
    }))
}

/// ```text
/// EXPIRETIME key
/// ```
/// The Unix time in seconds at which the key expires; -1 without expiry; -2
/// if it does not exist.
pub fn expiretime(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    expiretime_generic(ks, ctx, args, 1000)
}

/// ```text
/// PEXPIRETIME key
/// ```
/// The same in milliseconds.
pub fn pexpiretime(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    expiretime_generic(ks, ctx, args, 1)
}

/// ```text
/// PERSIST key
/// ```
/// 1 if an expiry was removed, else 0.
pub fn persist(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    match ks.get_mut(&key, ctx) {
        Some(e) if e.expires_at().is_some() => {
            ks.set_expiry(&key, None);
            ctx.key_event('g', "persist", &key);
            Ok(Reply::Int(1))
        }
        _ => Ok(Reply::Int(0)),
    }
}

/// ```text
/// TYPE key
/// ```
/// `string`, ... or `none`.
pub fn type_of(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let name = ks.get(key, ctx.now).map(|e| e.value.type_name()).unwrap_or("none");
    Ok(Reply::Status(name.into()))
}

/// ```text
/// KEYS pattern
/// ```
/// Every live key matching the glob pattern, sorted.
pub fn keys(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let mut glob = Glob::new(args.next_bytes()?);
    let mut found: Vec<&crate::keyspace::Key> = Vec::new();
    for (key, _) in ks.iter(ctx.now) {
        if matches_or_gives_up(&mut glob, key)? {
            found.push(key);
        }
    }
    found.sort();
    Ok(Reply::Array(found.into_iter().map(|k| Reply::Bulk(k.to_bytes())).collect()))
}

/// Whether `key` matches; an error once matching the pattern against this
/// command's keys has cost more than its budget (see `keyspace::Glob`). The
/// error names no key: keys are visited in an order that differs from node to
/// node, and a script may store the error.
pub(super) fn matches_or_gives_up(glob: &mut Glob, key: &[u8]) -> Result<bool, CmdError> {
    glob.matches(key).ok_or_else(|| CmdError::Other("ERR pattern too complex to match against these keys".into()))
}

/// A key's (or a member's) position in SCAN order: the keyspace's fixed
/// hash, so a cursor stays meaningful while keys come and go, and every key
/// present for the whole scan is returned.
pub(super) fn scan_position(key: &[u8]) -> u64 {
    crate::keyspace::key_hash(key)
}

/// ```text
/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
/// ```
/// `[next-cursor, [keys...]]`; a next cursor of 0 ends the iteration.
pub fn scan(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let cursor = super::containers::parse_cursor(args.next_bytes()?)?;
    let mut options = super::containers::scan_options(args, true)?;
    // The keyspace is kept in SCAN's order: the page starts at the cursor
    // and ends after `count` keys and any that share the last one's
    // position (so none is skipped), in time proportional to the page.
    let mut page = Vec::new();
    let mut next = 0;
    let mut last = None;
    for (key, entry) in ks.iter_from_hash(cursor, ctx.now) {
        let position = scan_position(key);
        if page.len() >= options.count && last != Some(position) {
            next = position;
            break;
        }
        last = Some(position);
        page.push((key, entry.value.type_name()));
    }
    let mut keys = Vec::new();
    for (key, kind) in page {
        let wanted_type = options.type_name.as_deref().is_none_or(|want| want == kind);
        if wanted_type && options.matches(key)? {
            keys.push(Reply::Bulk(key.to_bytes()));
        }
    }
    Ok(Reply::Array(vec![Reply::text(&next.to_string()), Reply::Array(keys)]))
}

/// Keyspaces up to this size choose `RANDOMKEY` uniformly, by position.
const UNIFORM_RANDOM_KEYS: usize = 100_000;

/// ```text
/// RANDOMKEY
/// ```
/// A live key chosen at random, or nil if there is none. Uniform up to
/// 100,000 keys; above, the first key at or after a random point of the
/// keyspace's hash order (a point after the last key draws again), found in
/// the time of a lookup: each key's chance is in proportion to the gap
/// before it, as Redis's own choice is not uniform either.
pub fn randomkey(ks: &Keyspace, ctx: &ReadCtx, _args: Args) -> CmdResult {
    let mut rng = Rng::new(ctx.seed);
    let len = ks.len(ctx.now);
    if len == 0 {
        return Ok(Reply::Nil);
    }
    if len <= UNIFORM_RANDOM_KEYS {
        let pick = rng.below(len);
        return Ok(ks.iter(ctx.now).nth(pick).map(|(k, _)| Reply::Bulk(k.to_bytes())).unwrap_or(Reply::Nil));
    }
    // A few tries: the key found may have expired.
    for _ in 0..16 {
        let point = rng.next_u64();
        if let Some((key, _)) = ks.iter_from_hash(point, ctx.now).next() {
            return Ok(Reply::Bulk(key.to_bytes()));
        }
    }
    Ok(ks.iter(ctx.now).next().map(|(k, _)| Reply::Bulk(k.to_bytes())).unwrap_or(Reply::Nil))
}

/// Removes `key` (live) as a rename or move does: its lock, if it was one,
/// is released; no `del` event.
fn take_for_move(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes) -> Option<Entry> {
    ks.get_mut(key, ctx)?;
    let entry = ks.remove(key)?;
    if entry.is_lease() {
        let held_ms = ctx.log_time.saturating_sub(entry.since);
        let ttl_ms = entry.expires_at().unwrap_or(0).saturating_sub(entry.since);
        let (owner, token) = (entry.owner(), entry.version);
        ctx.events.push(Event::Lease { kind: LeaseEvent::Released, key: key.clone(), owner, token, ttl_ms, held_ms });
    }
    Some(entry)
}

fn rename_generic(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args, nx: bool) -> CmdResult {
    let src = args.next_bytes()?.clone();
    let dst = args.next_bytes()?.clone();
    if ks.get_mut(&src, ctx).is_none() {
        return Err(CmdError::Other("ERR no such key".into()));
    }
    if src == dst {
        return Ok(if nx { Reply::Int(0) } else { Reply::ok() });
    }
    let dst_exists = ks.get_mut(&dst, ctx).is_some();
    if nx && dst_exists {
        return Ok(Reply::Int(0));
    }
    let Some(mut entry) = take_for_move(ks, ctx, &src) else { return Err(CmdError::Other("ERR no such key".into())) };
    if dst_exists {
        take_for_move(ks, ctx, &dst);
    }
    // A new key under its new name: a new version (a lock's token changes
    // with its name, so no holder of the old one can fence with it here).
    entry.version = ctx.version;
    entry.modified = ctx.version;
    entry.since = ctx.log_time;
    ks.insert(dst.clone(), entry);
    ctx.key_event('g', "rename_from", &src);
    ctx.key_event('g', "rename_to", &dst);
    Ok(if nx { Reply::Int(1) } else { Reply::ok() })
}

/// ```text
/// RENAME key newkey
/// ```
/// `OK`; the value and expiry move to `newkey`, replacing what it held.
/// `ERR no such key` if `key` does not exist.
pub fn rename(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    rename_generic(ks, ctx, args, false)
}

/// ```text
/// RENAMENX key newkey
/// ```
/// 1 if renamed, 0 if `newkey` exists.
pub fn renamenx(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    rename_generic(ks, ctx, args, true)
}

/// ```text
/// COPY source destination [DB destination-db] [REPLACE]
/// ```
/// 1 if copied (value and expiry), 0 if `source` is missing or
/// `destination` exists without `REPLACE`. Only database 0 exists.
pub fn copy(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let src = args.next_bytes()?.clone();
    let dst = args.next_bytes()?.clone();
    let mut replace = false;
    while args.remaining() > 0 {
        match args.next_keyword()?.as_str() {
            "REPLACE" => replace = true,
            "DB" if args.remaining() > 0 => {
                if args.next_i64()? != 0 {
                    return Err(CmdError::Other("ERR DB index is out of range".into()));
                }
            }
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    if src == dst {
        return Err(CmdError::Other("ERR source and destination objects are the same".into()));
    }
    let Some(source) = ks.get_mut(&src, ctx).map(|e| e.clone()) else { return Ok(Reply::Int(0)) };
    if ks.get_mut(&dst, ctx).is_some() {
        if !replace {
            return Ok(Reply::Int(0));
        }
        take_for_move(ks, ctx, &dst);
    }
    // A copy of a lock's key is a plain key: it holds no lease.
    let expires_at = source.expires_at();
    let mut entry = Entry::new(source.value, ctx.version, ctx.log_time);
    entry.set_expires_at(expires_at);
    ks.insert(dst.clone(), entry);
    ctx.key_event('g', "copy_to", &dst);
    Ok(Reply::Int(1))
}

/// The encoding Redis 7.0 would use for `value` (`OBJECT ENCODING`): raftlock
/// has one representation per type, so this is what a Redis tool expects to
/// see, by Redis's default size thresholds.
fn redis_encoding(value: &Value) -> &'static str {
    const SMALL: usize = 128;
    const SMALL_ITEM: usize = 64;
    match value {
        Value::Str(s) if s.len() <= 20 && crate::protocol::parse_i64(s).is_some() => "int",
        Value::Str(s) if s.len() <= 44 => "embstr",
        Value::Str(_) => "raw",
        Value::List(_) => "quicklist",
        Value::Hash(h) if h.len() <= SMALL && h.iter().all(|(f, v)| f.len() <= SMALL_ITEM && v.len() <= SMALL_ITEM) => "listpack",
        Value::Hash(_) => "hashtable",
        Value::Set(s) if s.len() <= 512 && s.iter().all(|m| crate::protocol::parse_i64(m).is_some()) => "intset",
        Value::Set(_) => "hashtable",
        Value::ZSet(z) if z.len() <= SMALL && z.keys().all(|m| m.len() <= SMALL_ITEM) => "listpack",
        Value::ZSet(_) => "skiplist",
        Value::Stream(_) => "stream",
    }
}

/// What a key and its value take in memory, estimated from what raftlock
/// keeps for them: the key's and the values' bytes and a fixed overhead for
/// the key's entry and for each element of a container (its allocation and
/// its place in the tree). Not Redis's figure, which counts Redis's own
/// structures.
fn approximate_usage(key: &[u8], value: &Value) -> usize {
    const ENTRY: usize = 64;
    const ELEMENT: usize = 48;
    ENTRY
        + key.len()
        + match value {
            Value::Str(s) => s.len(),
            Value::List(l) => l.iter().map(|e| e.len() + ELEMENT).sum(),
            Value::Set(s) => s.iter().map(|m| m.len() + ELEMENT).sum(),
            Value::Hash(h) => h.iter().map(|(f, v)| f.len() + v.len() + ELEMENT).sum(),
            Value::ZSet(z) => z.keys().map(|m| m.len() + 8 + ELEMENT).sum(),
            Value::Stream(st) => {
                let entries: usize = st.entries.values().map(|e| e.fields.iter().map(|b| b.len() + 16).sum::<usize>() + ELEMENT).sum();
                let groups: usize = st.groups.values().map(|g| ELEMENT * (1 + g.pending.len() * 2 + g.consumers.len())).sum();
                entries + groups
            }
        }
}

/// ```text
/// MEMORY USAGE key [SAMPLES count] | STATS | DOCTOR | MALLOC-STATS | PURGE | HELP
/// ```
/// USAGE: the bytes a key takes, estimated (every element counted, whatever
/// `SAMPLES` says); nil if there is no such key. STATS: Redis's fields, from
/// this node's resident set (its peak, and as the allocator's figures) and
/// the keyspace; what raftlock has not (a replication backlog, an AOF
/// buffer, cluster links, functions) is 0, and the fragmentation ratios 1.
/// DOCTOR: Redis's all-clear. MALLOC-STATS: what Redis built without
/// jemalloc says. PURGE: OK (jemalloc returns free pages by itself).
pub fn memory(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let raw_sub = args.peek().cloned().unwrap_or_default();
    match args.next_keyword()?.as_str() {
        "HELP" if args.remaining() == 0 => {
            let lines = [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return memory problems reports.",
                "MALLOC-STATS",
                "    Return internal statistics report from the memory allocator.",
                "PURGE",
                "    Attempt to purge dirty pages for reclamation by the allocator.",
                "STATS",
                "    Return information about the memory usage of the server.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value (estimated; every",
                "    element is counted, whatever <count> says).",
                "HELP",
                "    Prints this help.",
            ];
            Ok(Reply::Array(lines.iter().map(|l| Reply::Status(l.to_string())).collect()))
        }
        "USAGE" if args.remaining() >= 1 => {
            let key = args.next_bytes()?;
            match args.rest() {
                [] => {}
                [word, count] if word.eq_ignore_ascii_case(b"samples") => {
                    if parse_i64(count).ok_or(ArgError::NotInteger)? < 0 {
                        return Err(ArgError::Syntax.into());
                    }
                }
                _ => return Err(ArgError::Syntax.into()),
            }
            Ok(ks.get(key, ctx.now).map_or(Reply::Nil, |e| Reply::Int(approximate_usage(key, &e.value) as i64)))
        }
        "USAGE" => Err(CmdError::Arity("memory|usage")),
        "STATS" if args.remaining() == 0 => Ok(memory_stats(ks.len(ctx.now) as u64)),
        "DOCTOR" if args.remaining() == 0 => Ok(Reply::Verbatim(
            "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n"
                .into(),
        )),
        "MALLOC-STATS" if args.remaining() == 0 => {
            Ok(Reply::Bulk(Bytes::from_static(b"Stats not supported for the current allocator")))
        }
        "PURGE" if args.remaining() == 0 => Ok(Reply::ok()),
        "STATS" | "DOCTOR" | "MALLOC-STATS" | "PURGE" => {
            Err(CmdError::Arity(match raw_sub.to_ascii_lowercase().as_slice() {
                b"stats" => "memory|stats",
                b"doctor" => "memory|doctor",
                b"malloc-stats" => "memory|malloc-stats",
                _ => "memory|purge",
            }))
        }
        _ => Err(CmdError::Other(format!(
            "ERR unknown subcommand '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(&raw_sub)
        ))),
    }
}

/// `MEMORY STATS` for a node holding `keys` keys.
fn memory_stats(keys: u64) -> Reply {
    let rss = super::resident_bytes();
    let peak = super::peak_resident_bytes().max(rss);
    let int = |name: &str, v: u64| (Reply::text(name), Reply::Int(v as i64));
    let ratio = |name: &str, v: f64| (Reply::text(name), Reply::Double(v));
    let percent = |part: u64, whole: u64| if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 };
    Reply::Map(vec![
        int("peak.allocated", peak),
        int("total.allocated", rss),
        int("startup.allocated", 0),
        int("replication.backlog", 0),
        int("clients.slaves", 0),
        int("clients.normal", 0),
        int("cluster.links", 0),
        int("aof.buffer", 0),
        int("lua.caches", 0),
        int("functions.caches", 0),
        (
            Reply::text("db.0"),
            Reply::Map(vec![
                int("overhead.hashtable.main", 0),
                int("overhead.hashtable.expires", 0),
                int("overhead.hashtable.slot-to-keys", 0),
            ]),
        ),
        int("overhead.total", 0),
        int("keys.count", keys),
        int("keys.bytes-per-key", if keys == 0 { 0 } else { rss / keys }),
        int("dataset.bytes", rss),
        ratio("dataset.percentage", percent(rss, rss)),
        ratio("peak.percentage", percent(rss, peak)),
        int("allocator.allocated", rss),
        int("allocator.active", rss),
        int("allocator.resident", rss),
        ratio("allocator-fragmentation.ratio", 1.0),
        int("allocator-fragmentation.bytes", 0),
        ratio("allocator-rss.ratio", 1.0),
        int("allocator-rss.bytes", 0),
        ratio("rss-overhead.ratio", 1.0),
        int("rss-overhead.bytes", 0),
        ratio("fragmentation", 1.0),
        int("fragmentation.bytes", 0),
    ])
}

/// ```text
/// OBJECT ENCODING | FREQ | IDLETIME | REFCOUNT key
/// OBJECT HELP
/// ```
/// `ENCODING`: the encoding Redis would use; `IDLETIME`: seconds since the
/// key was last written (reads are not recorded: they do not go through the
/// log); `REFCOUNT`: 1; `FREQ`: an error, as Redis's without an LFU policy.
/// Nil for a missing key.
pub fn object(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let raw_sub = args.peek().cloned().unwrap_or_default();
    let sub = args.next_keyword()?;
    if sub == "HELP" {
        let lines = [
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key>. The returned integer is",
            "    proportional to the logarithm of the recent access frequency of the key.",
            "IDLETIME <key>",
            "    Return the idle time of the <key>, that is the approximated number of",
            "    seconds elapsed since the last access to the key.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
            "HELP",
            "    Prints this help.",
        ];
        return Ok(Reply::Array(lines.iter().map(|l| Reply::Status(l.to_string())).collect()));
    }
    let name = match sub.as_str() {
        "ENCODING" => "object|encoding",
        "FREQ" => "object|freq",
        "IDLETIME" => "object|idletime",
        "REFCOUNT" => "object|refcount",
        _ => {
            return Err(CmdError::Other(format!("ERR unknown subcommand '{}'. Try OBJECT HELP.", String::from_utf8_lossy(&raw_sub))))
        }
    };
    if args.remaining() != 1 {
        return Err(CmdError::Arity(name));
    }
    let Some(entry) = ks.get(args.next_bytes()?, ctx.now) else { return Ok(Reply::Nil) };
    Ok(match sub.as_str() {
        "ENCODING" => Reply::bulk(redis_encoding(&entry.value)),
        // Counted to the log time estimated now, as `PTTL` counts down: on
        // an idle cluster the applied log time stands still.
        "IDLETIME" => Reply::Int((ctx.clock_now.max(ctx.now).saturating_sub(entry.since) / 1000) as i64),
        "REFCOUNT" => Reply::Int(1),
        _ => {
            return Err(CmdError::Other(
                "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.".into(),
            ))
        }
    })
}
