//! String commands: SET, GET, GETDEL, INCR, INCRBY, DECR, DECRBY.

use bytes::Bytes;

use crate::keyspace::{Entry, Event, ExecCtx, Keyspace, LeaseEvent, LogTime, ReadCtx, Value};
use crate::protocol::{parse_i64, Args, Reply};

use super::{relative_expiry, CmdError, CmdResult};

/// The string value of a live key; `WRONGTYPE` for other types.
fn string_of(entry: Option<&Entry>) -> Result<Option<&Bytes>, CmdError> {
    match entry.map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s)),
        Some(_) => Err(CmdError::WrongType),
    }
}

enum SetExpiry {
    None,
    At(LogTime),
    Keep,
}

/// ```text
/// SET key value [NX | XX] [GET] [EX seconds | PX milliseconds |
///     EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL]
/// ```
/// Replies `OK`, or nil when `NX`/`XX` prevented the write; with `GET`, the old
/// value (or nil). Replaces the whole value, so the key gets a new version.
pub fn set(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let value = args.next_bytes()?.clone();
    let (mut nx, mut xx, mut get) = (false, false, false);
    let mut expiry = SetExpiry::None;
    let mut expiry_given = false;
    while args.remaining() > 0 {
        let opt = args.next_keyword()?;
        match opt.as_str() {
            "NX" if !xx => nx = true,
            "XX" if !nx => xx = true,
            "GET" => get = true,
            "KEEPTTL" if !expiry_given => {
                expiry = SetExpiry::Keep;
                expiry_given = true;
            }
            "EX" | "PX" | "EXAT" | "PXAT" if !expiry_given => {
                let n = args.next_i64()?;
                if n <= 0 {
                    return Err(CmdError::InvalidExpire("set"));
                }
                let at = match opt.as_str() {
                    "EX" => relative_expiry(ctx.log_time, n, 1000, "set")?,
                    "PX" => relative_expiry(ctx.log_time, n, 1, "set")?,
                    "EXAT" => ctx.unix_to_log_time(n.checked_mul(1000).ok_or(CmdError::InvalidExpire("set"))?),
                    _ => ctx.unix_to_log_time(n),
                };
                expiry = SetExpiry::At(at);
                expiry_given = true;
            }
            _ => return Err(CmdError::Arg(crate::protocol::ArgError::Syntax)),
        }
    }
    if nx {
        // A lock that expired while owners queued for it is theirs first.
        ks.settle(&key, ctx);
    }
    let existing = ks.get_mut(&key, ctx).map(|e| e.clone());
    let old = if get { string_of(existing.as_ref())?.cloned() } else { None };
    let old_reply = |old: Option<Bytes>| old.map(Reply::Bulk).unwrap_or(Reply::Nil);
    if (nx && existing.is_some()) || (xx && existing.is_none()) {
        return Ok(if get { old_reply(old) } else { Reply::Nil });
    }
    let expires_at = match expiry {
        SetExpiry::None => None,
        SetExpiry::At(at) => Some(at),
        SetExpiry::Keep => existing.as_ref().and_then(|e| e.expires_at),
    };
    let value_owner = value.clone();
    let mut entry = Entry::string(value, ctx.version, ctx.log_time);
    entry.expires_at = expires_at;
    // `SET k owner NX PX ttl` is how existing clients take a lock.
    entry.lease = nx && matches!(expiry, SetExpiry::At(_));
    ks.insert(key.clone(), entry);
    ctx.key_event('$', "set", &key);
    if let SetExpiry::At(at) = expiry {
        ctx.key_event('g', "expire", &key);
        if nx {
            let ttl_ms = at.saturating_sub(ctx.log_time);
            let (owner, token) = (value_owner, ctx.version);
            ctx.events.push(Event::Lease { kind: LeaseEvent::Acquired, key, owner, token, ttl_ms, held_ms: 0 });
        }
    }
    Ok(if get { old_reply(old) } else { Reply::ok() })
}

/// ```text
/// GET key
/// ```
/// The value, or nil if the key does not exist.
pub fn get(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(string_of(ks.get(key, ctx.now))?.cloned().map(Reply::Bulk).unwrap_or(Reply::Nil))
}

/// ```text
/// GETDEL key
/// ```
/// The value (or nil), deleting the key.
pub fn getdel(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let Some(value) = string_of(ks.get_mut(&key, ctx).map(|e| &*e))?.cloned() else {
        return Ok(Reply::Nil);
    };
    super::keys::delete_key(ks, ctx, &key);
    Ok(Reply::Bulk(value))
}

fn add(ks: &mut Keyspace, ctx: &mut ExecCtx, key: Bytes, delta: i64, event: &'static str) -> CmdResult {
    let (current, existed) = match ks.get_mut(&key, ctx) {
        None => (0, false),
        Some(entry) => match &entry.value {
            Value::Str(s) => (parse_i64(s).ok_or(CmdError::Arg(crate::protocol::ArgError::NotInteger))?, true),
            _ => return Err(CmdError::WrongType),
        },
    };
    let new = current.checked_add(delta).ok_or(CmdError::Overflow)?;
    let value = Bytes::from(new.to_string());
    match ks.get_mut(&key, ctx) {
        // Changed in place: the expiry stays; the version is new.
        Some(entry) if existed => {
            entry.value = Value::Str(value);
            entry.rewritten(ctx.version, ctx.log_time);
        }
        _ => ks.insert(key.clone(), Entry::string(value, ctx.version, ctx.log_time)),
    }
    ctx.key_event('$', event, &key);
    Ok(Reply::Int(new))
}

/// ```text
/// INCR key
/// ```
/// The value after adding one; a missing key counts as 0.
pub fn incr(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    add(ks, ctx, key, 1, "incrby")
}

/// ```text
/// INCRBY key increment
/// ```
pub fn incrby(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let by = args.next_i64()?;
    add(ks, ctx, key, by, "incrby")
}

/// ```text
/// DECR key
/// ```
pub fn decr(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    add(ks, ctx, key, -1, "decrby")
}

/// ```text
/// DECRBY key decrement
/// ```
pub fn decrby(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let by = args.next_i64()?.checked_neg().ok_or(CmdError::Overflow)?;
    add(ks, ctx, key, by, "decrby")
}

/// Runs `SET` with the given arguments (after the name).
fn set_with(ks: &mut Keyspace, ctx: &mut ExecCtx, args: &[&[u8]]) -> CmdResult {
    let argv: Vec<Bytes> =
        std::iter::once(&b"SET"[..]).chain(args.iter().copied()).map(Bytes::copy_from_slice).collect();
    set(ks, ctx, Args::new(&argv))
}

/// ```text
/// SETNX key value
/// ```
/// 1 if the key was set, 0 if it existed.
pub fn setnx(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let (key, value) = (args.next_bytes()?, args.next_bytes()?);
    Ok(Reply::Int((set_with(ks, ctx, &[key, value, b"NX"])? != Reply::Nil) as i64))
}

/// ```text
/// SETEX key seconds value
/// ```
pub fn setex(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let (key, secs, value) = (args.next_bytes()?, args.next_bytes()?, args.next_bytes()?);
    set_with(ks, ctx, &[key, value, b"EX", secs]).map_err(|e| match e {
        CmdError::InvalidExpire(_) => CmdError::InvalidExpire("setex"),
        other => other,
    })
}

/// ```text
/// PSETEX key milliseconds value
/// ```
pub fn psetex(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let (key, ms, value) = (args.next_bytes()?, args.next_bytes()?, args.next_bytes()?);
    set_with(ks, ctx, &[key, value, b"PX", ms]).map_err(|e| match e {
        CmdError::InvalidExpire(_) => CmdError::InvalidExpire("psetex"),
        other => other,
    })
}

/// ```text
/// GETSET key value
/// ```
/// The old value (or nil); the key gets the new one, without expiry.
pub fn getset(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let (key, value) = (args.next_bytes()?, args.next_bytes()?);
    set_with(ks, ctx, &[key, value, b"GET"])
}

/// ```text
/// MGET key [key ...]
/// ```
/// Each value, nil for a missing key or one that is not a string.
pub fn mget(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    Ok(Reply::Array(
        args.rest()
            .iter()
            .map(|k| match ks.get(k, ctx.now).map(|e| &e.value) {
                Some(Value::Str(v)) => Reply::Bulk(v.clone()),
                _ => Reply::Nil,
            })
            .collect(),
    ))
}

/// ```text
/// MSET key value [key value ...]
/// ```
pub fn mset(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let pairs = args.rest();
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Err(CmdError::Arity("mset"));
    }
    for pair in pairs.chunks(2) {
        ks.insert(pair[0].clone(), Entry::string(pair[1].clone(), ctx.version, ctx.log_time));
        ctx.key_event('$', "set", &pair[0]);
    }
    Ok(Reply::ok())
}

/// ```text
/// STRLEN key
/// ```
pub fn strlen(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(Reply::Int(string_of(ks.get(key, ctx.now))?.map(|v| v.len()).unwrap_or(0) as i64))
}

/// ```text
/// APPEND key value
/// ```
/// The length after appending; a missing key starts empty.
pub fn append(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let suffix = args.next_bytes()?;
    let current = string_of(ks.get_mut(&key, ctx).map(|e| &*e))?.cloned();
    let mut joined = current.as_deref().unwrap_or_default().to_vec();
    joined.extend_from_slice(suffix);
    let len = joined.len();
    match ks.get_mut(&key, ctx) {
        // Changed in place: the expiry stays; the version is new.
        Some(entry) => {
            entry.value = Value::Str(Bytes::from(joined));
            entry.rewritten(ctx.version, ctx.log_time);
        }
        None => ks.insert(key.clone(), Entry::string(Bytes::from(joined), ctx.version, ctx.log_time)),
    }
    ctx.key_event('$', "append", &key);
    Ok(Reply::Int(len as i64))
}
