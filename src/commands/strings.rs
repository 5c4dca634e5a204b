//! String commands: SET, GET, GETDEL, INCR, INCRBY, DECR, DECRBY.

use bytes::Bytes;

use crate::keyspace::{Entry, Event, ExecCtx, Keyspace, LeaseEvent, LogTime, ReadCtx, Str, Value};
use crate::protocol::{parse_i64, Args, Reply};

use super::{relative_expiry, CmdError, CmdResult};

/// The string value of a live key; `WRONGTYPE` for other types.
fn string_of(entry: Option<&Entry>) -> Result<Option<&Str>, CmdError> {
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
                    "EX" => relative_expiry(ctx, n, 1000, "set")?,
                    "PX" => relative_expiry(ctx, n, 1, "set")?,
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
    let old = if get { string_of(existing.as_ref())?.map(Str::to_bytes) } else { None };
    let old_reply = |old: Option<Bytes>| old.map(Reply::Bulk).unwrap_or(Reply::Nil);
    if (nx && existing.is_some()) || (xx && existing.is_none()) {
        return Ok(if get { old_reply(old) } else { Reply::Nil });
    }
    let expires_at = match expiry {
        SetExpiry::None => None,
        SetExpiry::At(at) => Some(at),
        SetExpiry::Keep => existing.as_ref().and_then(|e| e.expires_at()),
    };
    let value_owner = value.clone();
    let mut entry = Entry::string(value, ctx.version, ctx.log_time);
    entry.set_expires_at(expires_at);
    // `SET k owner NX PX ttl` is how existing clients take a lock.
    entry.set_lease(nx && matches!(expiry, SetExpiry::At(_)));
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
    Ok(string_of(ks.get(key, ctx.now))?.map(Str::to_bytes).map(Reply::Bulk).unwrap_or(Reply::Nil))
}

/// ```text
/// GETDEL key
/// ```
/// The value (or nil), deleting the key.
pub fn getdel(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let Some(value) = string_of(ks.get_mut(&key, ctx).map(|e| &*e))?.map(Str::to_bytes) else {
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
            entry.value = Value::Str(Str::from(value));
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
    let by = args.next_i64()?.checked_neg().ok_or(CmdError::DecrementOverflow)?;
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
                Some(Value::Str(v)) => Reply::Bulk(v.to_bytes()),
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
    set_pairs(ks, ctx, pairs);
    Ok(Reply::ok())
}

/// Sets each key of `pairs` (key, value, key, value, ...) to its value, in
/// order, as `SET` without options does.
fn set_pairs(ks: &mut Keyspace, ctx: &mut ExecCtx, pairs: &[Bytes]) {
    for pair in pairs.chunks(2) {
        ks.insert(pair[0].clone(), Entry::string(pair[1].clone(), ctx.version, ctx.log_time));
        ctx.key_event('$', "set", &pair[0]);
    }
}

/// ```text
/// MSETNX key value [key value ...]
/// ```
/// Sets every key, or none if any of them exists: 1 or 0.
pub fn msetnx(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let pairs = args.rest();
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Err(CmdError::Arity("msetnx"));
    }
    if pairs.chunks(2).any(|pair| ks.contains(&pair[0], ctx.log_time)) {
        return Ok(Reply::Int(0));
    }
    set_pairs(ks, ctx, pairs);
    Ok(Reply::Int(1))
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
    let mut joined = string_of(ks.get_mut(&key, ctx).map(|e| &*e))?.map_or_else(Vec::new, |s| s.to_vec());
    joined.extend_from_slice(suffix);
    let len = joined.len();
    match ks.get_mut(&key, ctx) {
        // Changed in place: the expiry stays; the version is new.
        Some(entry) => {
            entry.value = Value::Str(Str::new(&joined));
            entry.rewritten(ctx.version, ctx.log_time);
        }
        None => ks.insert(key.clone(), Entry::string(Bytes::from(joined), ctx.version, ctx.log_time)),
    }
    ctx.key_event('$', "append", &key);
    Ok(Reply::Int(len as i64))
}

/// Writes `value` as the string under `key`: in place if the key exists
/// (its expiry stays; the version is new), else as a new key.
fn store_in_place(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes, value: Bytes) {
    match ks.get_mut(key, ctx) {
        Some(entry) => {
            entry.value = Value::Str(Str::from(value));
            entry.rewritten(ctx.version, ctx.log_time);
        }
        None => ks.insert(key.clone(), Entry::string(value, ctx.version, ctx.log_time)),
    }
}

/// ```text
/// INCRBYFLOAT key increment
/// ```
/// The value after adding `increment` (a float), as a string; a missing key
/// counts as 0 and the expiry stays. As Redis, the sum is taken in x86-64's
/// 80-bit `long double` (emulated: the same bits on every node) and written
/// as `%.17Lf` without trailing zeros: `5000 + 0.01` is `5000.00999999999999979`.
pub fn incrbyfloat(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    use super::long_double::{self, Float, LongDouble};
    let key = args.next_bytes()?.clone();
    let not_float = || CmdError::Other("ERR value is not a valid float".into());
    let not_finite = || CmdError::Other("ERR increment would produce NaN or Infinity".into());
    let by = args.next_bytes()?;
    let current = match string_of(ks.get_mut(&key, ctx).map(|e| &*e))? {
        None => Float::Finite(LongDouble::ZERO),
        Some(s) => long_double::parse(s).ok_or_else(not_float)?,
    };
    let by = long_double::parse(by).ok_or_else(not_float)?;
    let (Float::Finite(current), Float::Finite(by)) = (current, by) else { return Err(not_finite()) };
    let sum = long_double::add(current, by).ok_or_else(not_finite)?;
    let text = Bytes::from(long_double::to_human(sum));
    store_in_place(ks, ctx, &key, text.clone());
    ctx.key_event('$', "incrbyfloat", &key);
    Ok(Reply::Bulk(text))
}

/// Redis's largest string (its default `proto-max-bulk-len`, 512 MiB): the
/// range of the offsets `SETRANGE`, `SETBIT` and `GETBIT` parse.
const REDIS_MAX_STRING_LEN: u64 = 512 * 1024 * 1024;

/// The longest string `SETRANGE` and `SETBIT` build: the largest request
/// raftlock takes (64 MiB), a fixed bound, the same on every node. Redis
/// lets these build 512 MiB from a command of a few bytes; here such a
/// value would be copied into every replica and every snapshot.
const MAX_BUILT_STRING_LEN: u64 = super::MAX_REQUEST_BYTES as u64;

/// ```text
/// GETEX key [EX seconds | PX milliseconds | EXAT unix-time-seconds |
///     PXAT unix-time-milliseconds | PERSIST]
/// ```
/// The value (or nil), setting or removing its expiry.
pub fn getex(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    enum Change {
        Keep,
        At(LogTime),
        Persist,
    }
    let mut change = Change::Keep;
    let mut given = false;
    while args.remaining() > 0 {
        let opt = args.next_keyword()?;
        let syntax = CmdError::Arg(crate::protocol::ArgError::Syntax);
        if given {
            return Err(syntax);
        }
        given = true;
        change = match opt.as_str() {
            "PERSIST" => Change::Persist,
            "EX" | "PX" | "EXAT" | "PXAT" => {
                if args.remaining() == 0 {
                    return Err(syntax);
                }
                let n = args.next_i64()?;
                if n <= 0 {
                    return Err(CmdError::InvalidExpire("getex"));
                }
                Change::At(match opt.as_str() {
                    "EX" => relative_expiry(ctx, n, 1000, "getex")?,
                    "PX" => relative_expiry(ctx, n, 1, "getex")?,
                    "EXAT" => ctx.unix_to_log_time(n.checked_mul(1000).ok_or(CmdError::InvalidExpire("getex"))?),
                    _ => ctx.unix_to_log_time(n),
                })
            }
            _ => return Err(syntax),
        };
    }
    let Some(value) = string_of(ks.get_mut(&key, ctx).map(|e| &*e))?.map(Str::to_bytes) else { return Ok(Reply::Nil) };
    match change {
        Change::Keep => {}
        Change::At(at) if at <= ctx.log_time => {
            super::keys::delete_key(ks, ctx, &key);
        }
        Change::At(at) => {
            ks.set_expiry(&key, Some(at));
            ctx.key_event('g', "expire", &key);
        }
        Change::Persist => {
            if ks.get(&key, ctx.log_time).is_some_and(|e| e.expires_at().is_some()) {
                ks.set_expiry(&key, None);
                ctx.key_event('g', "persist", &key);
            }
        }
    }
    Ok(Reply::Bulk(value))
}

/// A Redis `start end` byte range over `len` bytes (negative counts from
/// the end), or `None` if it selects nothing.
fn byte_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { (len + end).max(0) } else { end.min(len - 1) };
    (len > 0 && start <= end && start < len).then(|| (start as usize, end as usize + 1))
}

/// ```text
/// GETRANGE key start end
/// ```
/// The bytes from `start` to `end` inclusive (negative: from the end).
pub fn getrange(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let (start, end) = (args.next_i64()?, args.next_i64()?);
    let value = string_of(ks.get(key, ctx.now))?.map(Str::to_bytes).unwrap_or_default();
    // As Redis: a negative start past a negative end selects nothing.
    if start < 0 && end < 0 && start > end {
        return Ok(Reply::Bulk(Bytes::new()));
    }
    Ok(Reply::Bulk(byte_range(start, end, value.len()).map(|(a, b)| value.slice(a..b)).unwrap_or_default()))
}

/// ```text
/// SETRANGE key offset value
/// ```
/// Overwrites the string from `offset` (padding with zero bytes); its new length.
pub fn setrange(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let offset = args.next_i64()?;
    let patch = args.next_bytes()?;
    if offset < 0 {
        return Err(CmdError::Other("ERR offset is out of range".into()));
    }
    let current = string_of(ks.get_mut(&key, ctx).map(|e| &*e))?;
    if patch.is_empty() {
        return Ok(Reply::Int(current.map_or(0, |c| c.len()) as i64));
    }
    if offset as u64 + patch.len() as u64 > MAX_BUILT_STRING_LEN {
        return Err(CmdError::Other("ERR string exceeds maximum allowed size (proto-max-bulk-len)".into()));
    }
    let offset = offset as usize;
    let mut bytes = current.map_or_else(Vec::new, |c| c.to_vec());
    if bytes.len() < offset + patch.len() {
        bytes.resize(offset + patch.len(), 0);
    }
    bytes[offset..offset + patch.len()].copy_from_slice(patch);
    let len = bytes.len();
    store_in_place(ks, ctx, &key, Bytes::from(bytes));
    ctx.key_event('$', "setrange", &key);
    Ok(Reply::Int(len as i64))
}

/// A bit offset below `limit` bytes' worth of bits (Redis: 2^32, a 512 MiB
/// string).
fn bit_offset(raw: &[u8], limit: u64) -> Result<u64, CmdError> {
    match parse_i64(raw) {
        Some(n) if (0..(limit * 8) as i64).contains(&n) => Ok(n as u64),
        _ => Err(CmdError::Other("ERR bit offset is not an integer or out of range".into())),
    }
}

/// ```text
/// SETBIT key offset value
/// ```
/// Sets or clears the bit at `offset` (bit 0 is the most significant bit of
/// the first byte), growing the string with zero bytes; the bit's old value.
pub fn setbit(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let offset = bit_offset(args.next_bytes()?, MAX_BUILT_STRING_LEN)?;
    let on = match &args.next_bytes()?[..] {
        b"1" => true,
        b"0" => false,
        _ => return Err(CmdError::Other("ERR bit is not an integer or out of range".into())),
    };
    let mut bytes = string_of(ks.get_mut(&key, ctx).map(|e| &*e))?.map_or_else(Vec::new, |c| c.to_vec());
    let (byte, mask) = ((offset / 8) as usize, 0x80u8 >> (offset % 8));
    if bytes.len() <= byte {
        bytes.resize(byte + 1, 0);
    }
    let old = bytes[byte] & mask != 0;
    if on { bytes[byte] |= mask } else { bytes[byte] &= !mask }
    store_in_place(ks, ctx, &key, Bytes::from(bytes));
    ctx.key_event('$', "setbit", &key);
    Ok(Reply::Int(old as i64))
}

/// ```text
/// GETBIT key offset
/// ```
/// The bit at `offset`; 0 past the end or for a missing key.
pub fn getbit(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let offset = bit_offset(args.next_bytes()?, REDIS_MAX_STRING_LEN)?;
    let value = string_of(ks.get(key, ctx.now))?;
    let bit = value.and_then(|v| v.get((offset / 8) as usize)).is_some_and(|b| b & (0x80 >> (offset % 8)) != 0);
    Ok(Reply::Int(bit as i64))
}

/// ```text
/// BITCOUNT key [start end [BYTE | BIT]]
/// ```
/// The number of set bits, in the whole string or in a range of bytes (or,
/// with `BIT`, of bits).
pub fn bitcount(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let range = match args.remaining() {
        0 => None,
        1 => return Err(CmdError::Arg(crate::protocol::ArgError::Syntax)),
        n => {
            let (start, end) = (args.next_i64()?, args.next_i64()?);
            let bits = match n {
                2 => false,
                3 => match args.next_keyword()?.as_str() {
                    "BYTE" => false,
                    "BIT" => true,
                    _ => return Err(CmdError::Arg(crate::protocol::ArgError::Syntax)),
                },
                _ => return Err(CmdError::Arg(crate::protocol::ArgError::Syntax)),
            };
            Some((start, end, bits))
        }
    };
    let Some(value) = string_of(ks.get(key, ctx.now))? else { return Ok(Reply::Int(0)) };
    let count = match range {
        None => value.iter().map(|b| b.count_ones() as i64).sum(),
        Some((start, end, false)) => match byte_range(start, end, value.len()) {
            Some((a, b)) if !(start < 0 && end < 0 && start > end) => value[a..b].iter().map(|b| b.count_ones() as i64).sum(),
            _ => 0,
        },
        Some((start, end, true)) => {
            let total = value.len() as u64 * 8;
            match byte_range(start, end, total.min(usize::MAX as u64) as usize) {
                Some((a, b)) if !(start < 0 && end < 0 && start > end) => {
                    (a..b).filter(|&i| value[i / 8] & (0x80 >> (i % 8)) != 0).count() as i64
                }
                _ => 0,
            }
        }
    };
    Ok(Reply::Int(count))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README: strings built in place stop at 64 MiB, with Redis's errors.
    #[test]
    fn setrange_and_setbit_build_at_most_64_mib() {
        let argv = |words: &[&str]| words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>();
        let mut ks = Keyspace::new();
        let mut ctx = ExecCtx::new(1, 0, 0);
        let limit = MAX_BUILT_STRING_LEN;
        let at_limit = (limit - 1).to_string();
        assert_eq!(setrange(&mut ks, &mut ctx, Args::new(&argv(&["setrange", "k", &at_limit, "x"]))), Ok(Reply::Int(limit as i64)));
        let past = limit.to_string();
        let e = setrange(&mut ks, &mut ctx, Args::new(&argv(&["setrange", "k", &past, "x"]))).unwrap_err();
        assert_eq!(e.to_string(), "ERR string exceeds maximum allowed size (proto-max-bulk-len)");
        let bit = (limit * 8).to_string();
        let e = setbit(&mut ks, &mut ctx, Args::new(&argv(&["setbit", "k", &bit, "1"]))).unwrap_err();
        assert_eq!(e.to_string(), "ERR bit offset is not an integer or out of range");
        // GETBIT reads Redis's whole range.
        let read = ReadCtx::at(0);
        assert_eq!(getbit(&ks, &read, Args::new(&argv(&["getbit", "k", &bit]))), Ok(Reply::Int(0)));
    }

    /// Redis refuses a relative expiry whose Unix time would not fit a
    /// signed 64-bit count of milliseconds (its `EXPIRE with big integer
    /// overflows when converted to milliseconds` test), and names DECRBY's
    /// own overflow.
    #[test]
    fn expiries_past_the_end_of_time_and_decrby_overflow_are_refused_like_redis() {
        let argv = |words: &[&str]| words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>();
        let mut ks = Keyspace::new();
        // A log entry written at 2026-12-06 (Unix ms), early in log time.
        let mut ctx = ExecCtx::new(1, 5_000, 1_796_546_848_000);
        let run = |ks: &mut Keyspace, ctx: &mut ExecCtx, words: &[&str]| {
            let v = argv(words);
            let args = Args::new(&v);
            match words[0] {
                "set" => set(ks, ctx, args),
                "getex" => getex(ks, ctx, args),
                "expire" => crate::commands::keys::expire(ks, ctx, args),
                "pexpire" => crate::commands::keys::pexpire(ks, ctx, args),
                "decrby" => decrby(ks, ctx, args),
                other => panic!("not in this test: {other}"),
            }
            .map_err(|e| e.to_string())
        };
        let invalid = |cmd: &str| Err(format!("ERR invalid expire time in '{cmd}' command"));
        // i64::MAX ms from now overflows; so does a count of seconds whose
        // milliseconds fit but not once now is added.
        assert_eq!(run(&mut ks, &mut ctx, &["set", "k", "v", "EX", "9223372036854775"]), invalid("set"));
        assert_eq!(run(&mut ks, &mut ctx, &["set", "k", "v", "PX", "9223372036854775000"]), invalid("set"));
        assert_eq!(run(&mut ks, &mut ctx, &["set", "k", "v", "EX", "10000000000000000"]), invalid("set"));
        // The largest that fits is taken, and so is a far but sane one.
        let last = (i64::MAX - 1_796_546_848_000).to_string();
        assert_eq!(run(&mut ks, &mut ctx, &["set", "k", "v", "PX", &last]), Ok(Reply::ok()));
        let after = (i64::MAX - 1_796_546_848_000 + 1).to_string();
        assert_eq!(run(&mut ks, &mut ctx, &["set", "k", "v", "PX", &after]), invalid("set"));
        assert_eq!(run(&mut ks, &mut ctx, &["set", "k", "v", "EX", "3153600000"]), Ok(Reply::ok()));
        assert_eq!(run(&mut ks, &mut ctx, &["getex", "k", "EX", "9223372036854775"]), invalid("getex"));
        assert_eq!(run(&mut ks, &mut ctx, &["getex", "k", "PX", "9223372036854775000"]), invalid("getex"));
        assert_eq!(run(&mut ks, &mut ctx, &["expire", "k", "9223370399119966"]), invalid("expire"));
        assert_eq!(run(&mut ks, &mut ctx, &["pexpire", "k", "9223372036854770000"]), invalid("pexpire"));
        // The refused ones left the key and its expiry as they were.
        assert_eq!(run(&mut ks, &mut ctx, &["expire", "k", "100", "LT"]), Ok(Reply::Int(1)));
        assert_eq!(run(&mut ks, &mut ctx, &["set", "n", "1"]), Ok(Reply::ok()));
        assert_eq!(
            run(&mut ks, &mut ctx, &["decrby", "n", "-9223372036854775808"]),
            Err("ERR decrement would overflow".to_string())
        );
        assert_eq!(
            run(&mut ks, &mut ctx, &["decrby", "n", "-9223372036854775807"]),
            Err("ERR increment or decrement would overflow".to_string())
        );
    }

    #[test]
    fn byte_ranges_clamp_like_redis() {
        assert_eq!(byte_range(0, 4, 11), Some((0, 5)));
        assert_eq!(byte_range(-5, -1, 11), Some((6, 11)));
        assert_eq!(byte_range(6, 100, 11), Some((6, 11)));
        assert_eq!(byte_range(100, 200, 11), None);
        assert_eq!(byte_range(5, 2, 11), None);
        assert_eq!(byte_range(-100, 2, 11), Some((0, 3)));
        assert_eq!(byte_range(0, 0, 0), None);
    }
}
