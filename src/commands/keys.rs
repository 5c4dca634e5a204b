//! Generic key commands: DEL, EXISTS, EXPIRE family, TTL, PTTL, PERSIST, TYPE,
//! KEYS, SCAN.

use bytes::Bytes;

use crate::keyspace::{Event, Glob, ExecCtx, Keyspace, LeaseEvent, LogTime, ReadCtx};
use crate::protocol::{ArgError, Args, Reply};

use super::{relative_expiry, CmdError, CmdResult};

/// Deletes a live key with its `del` (and, for a lease, `lock.released`) events.
pub(super) fn delete_key(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes) -> bool {
    if ks.get_mut(key, ctx).is_none() {
        return false;
    }
    let Some(entry) = ks.remove(key) else { return false };
    ctx.key_event('g', "del", key);
    if entry.lease {
        let held_ms = ctx.log_time.saturating_sub(entry.since);
        let ttl_ms = entry.expires_at.unwrap_or(0).saturating_sub(entry.since);
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

#[derive(Clone, Copy, PartialEq)]
enum ExpireCond {
    Always,
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
    let mut cond = ExpireCond::Always;
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
    for (set, c) in [(nx, ExpireCond::Nx), (xx, ExpireCond::Xx), (gt, ExpireCond::Gt), (lt, ExpireCond::Lt)] {
        if set {
            cond = c;
        }
    }
    let at = to_log_time(ctx, amount)?;
    let Some(entry) = ks.get_mut(&key, ctx) else { return Ok(Reply::Int(0)) };
    let current = entry.expires_at;
    let allowed = match cond {
        ExpireCond::Always => true,
        ExpireCond::Nx => current.is_none(),
        ExpireCond::Xx => current.is_some(),
        // No expiry counts as an infinite TTL.
        ExpireCond::Gt => current.is_some_and(|c| at > c),
        ExpireCond::Lt => current.is_none_or(|c| at < c),
    };
    if !allowed {
        return Ok(Reply::Int(0));
    }
    let (lease, since, owner, token) = (entry.lease, entry.since, entry.owner(), entry.version);
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
        ctx.events.push(Event::Lease { kind: LeaseEvent::Renewed, key, owner, token, ttl_ms, held_ms });
    }
    Ok(Reply::Int(1))
}

/// ```text
/// EXPIRE key seconds [NX | XX | GT | LT]
/// ```
/// 1 if the expiry was set, 0 if the key is missing or the condition failed.
pub fn expire(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    expire_generic(ks, ctx, args, |ctx, n| relative_expiry(ctx.log_time, n, 1000, "expire"))
}

/// ```text
/// PEXPIRE key milliseconds [NX | XX | GT | LT]
/// ```
pub fn pexpire(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    expire_generic(ks, ctx, args, |ctx, n| relative_expiry(ctx.log_time, n, 1, "pexpire"))
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

fn ttl_generic(ks: &Keyspace, ctx: &ReadCtx, mut args: Args, unit_ms: u64) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(Reply::Int(match ks.get(key, ctx.now) {
        None => -2,
        Some(e) => match e.ttl_ms(ctx.now) {
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

/// ```text
/// PERSIST key
/// ```
/// 1 if an expiry was removed, else 0.
pub fn persist(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    match ks.get_mut(&key, ctx) {
        Some(e) if e.expires_at.is_some() => {
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
    let mut found: Vec<&Bytes> = Vec::new();
    for (key, _) in ks.iter(ctx.now) {
        if matches_or_gives_up(&mut glob, key)? {
            found.push(key);
        }
    }
    found.sort();
    Ok(Reply::Array(found.into_iter().map(|k| Reply::Bulk(k.clone())).collect()))
}

/// Whether `key` matches; an error once matching the pattern against this
/// command's keys has cost more than its budget (see `keyspace::Glob`). The
/// error names no key: keys are visited in an order that differs from node to
/// node, and a script may store the error.
fn matches_or_gives_up(glob: &mut Glob, key: &[u8]) -> Result<bool, CmdError> {
    glob.matches(key).ok_or_else(|| CmdError::Other("ERR pattern too complex to match against these keys".into()))
}

/// A key's position in SCAN order: a fixed hash (FNV-1a), so a cursor stays
/// meaningful while keys come and go, and every key present for the whole
/// scan is returned.
fn scan_position(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// ```text
/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
/// ```
/// `[next-cursor, [keys...]]`; a next cursor of 0 ends the iteration.
pub fn scan(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let cursor: u64 = std::str::from_utf8(args.next_bytes()?)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(CmdError::InvalidCursor)?;
    let (mut pattern, mut count, mut type_name) = (None, 10usize, None);
    while args.remaining() > 0 {
        match args.next_keyword()?.as_str() {
            "MATCH" => pattern = Some(args.next_bytes()?),
            "COUNT" => {
                let n = args.next_i64()?;
                if n < 1 {
                    return Err(CmdError::Arg(ArgError::Syntax));
                }
                count = n.min(1 << 20) as usize;
            }
            "TYPE" => type_name = Some(args.next_keyword()?.to_ascii_lowercase()),
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    let mut glob = pattern.map(|p| Glob::new(p));
    let mut candidates: Vec<(u64, &Bytes, &str)> = ks
        .iter(ctx.now)
        .map(|(k, e)| (scan_position(k), k, e.value.type_name()))
        .filter(|(pos, _, _)| *pos >= cursor)
        .collect();
    candidates.sort_unstable();
    // Keys sharing a position are returned together so none is skipped.
    let mut end = count.min(candidates.len());
    while end < candidates.len() && end > 0 && candidates[end].0 == candidates[end - 1].0 {
        end += 1;
    }
    let next = candidates.get(end).map(|c| c.0).unwrap_or(0);
    let mut keys = Vec::new();
    for (_, key, kind) in &candidates[..end] {
        let wanted_type = type_name.as_deref().is_none_or(|want| want == *kind);
        if wanted_type && glob.as_mut().map_or(Ok(true), |g| matches_or_gives_up(g, key))? {
            keys.push(Reply::Bulk((*key).clone()));
        }
    }
    Ok(Reply::Array(vec![Reply::text(&next.to_string()), Reply::Array(keys)]))
}
