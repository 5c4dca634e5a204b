//! String commands: SET, GET, GETDEL, INCR, INCRBY, DECR, DECRBY.

use bytes::Bytes;

use crate::keyspace::{Entry, Event, ExecCtx, Keyspace, LeaseEvent, LogTime, ReadCtx, Str, Value};
use crate::protocol::{parse_i64, Args, Reply};

use super::{relative_expiry, CmdError, CmdResult};

/// The string value of a live key; `WRONGTYPE` for other types.
pub(super) fn string_of(entry: Option<&Entry>) -> Result<Option<&Str>, CmdError> {
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
    let current = string_of(ks.get_mut(&key, ctx).map(|e| &*e))?;
    // Each APPEND copies the whole value: past the longest string a command
    // may build, a few bytes a command would grow every replica without end.
    if current.map_or(0, |c| c.len()) as u64 + suffix.len() as u64 > MAX_BUILT_STRING_LEN {
        return Err(CmdError::Other("ERR string exceeds maximum allowed size (proto-max-bulk-len)".into()));
    }
    let mut joined = current.map_or_else(Vec::new, |s| s.to_vec());
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
pub(super) fn store_in_place(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes, value: Bytes) {
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
pub(super) const REDIS_MAX_STRING_LEN: u64 = 512 * 1024 * 1024;

/// The longest string `SETRANGE`, `SETBIT`, `BITFIELD` and `APPEND` build
/// (and `RESTORE` expands): the largest request
/// raftlock takes (64 MiB), a fixed bound, the same on every node. Redis
/// lets these build 512 MiB from a command of a few bytes; here such a
/// value would be copied into every replica and every snapshot.
pub(super) const MAX_BUILT_STRING_LEN: u64 = super::MAX_REQUEST_BYTES as u64;

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

/// ```text
/// BITPOS key bit [start [end [BYTE | BIT]]]
/// ```
/// The position of the first bit set to `bit` (0 or 1) in the string or in a
/// range of its bytes (or, with `BIT`, of its bits), counted from the
/// string's first bit; -1 if there is none. As Redis, a missing key is an
/// endless run of zeros (0 for a clear bit, -1 for a set one), and a string
/// without a clear bit has one just past its end unless `end` was given.
/// Arguments are read in Redis's order: a missing key answers before its
/// range is parsed.
pub fn bitpos(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let bit = match args.next_i64()? {
        0 => false,
        1 => true,
        _ => return Err(CmdError::Other("ERR The bit argument must be 1 or 0.".into())),
    };
    let Some(value) = string_of(ks.get(key, ctx.now))? else { return Ok(Reply::Int(if bit { -1 } else { 0 })) };
    let len = value.len() as i64;
    // The first and last bit searched, inclusive, and whether `end` was given.
    let (first, last, end_given) = match args.remaining() {
        0 => (0, len * 8 - 1, false),
        1..=3 => {
            use crate::protocol::ArgError;
            let range = args.rest();
            let start = parse_i64(&range[0]).ok_or(ArgError::NotInteger)?;
            let by_bit = match range.get(2).map(|unit| unit.to_ascii_uppercase()) {
                None => false,
                Some(unit) if unit == b"BIT" => true,
                Some(unit) if unit == b"BYTE" => false,
                Some(_) => return Err(CmdError::Arg(ArgError::Syntax)),
            };
            let end = range.get(1).map(|end| parse_i64(end).ok_or(ArgError::NotInteger)).transpose()?;
            let total = if by_bit { len * 8 } else { len };
            let clamp = |i: i64| if i < 0 { (total + i).max(0) } else { i };
            let (start, end) = (clamp(start), clamp(end.unwrap_or(total - 1)).min(total - 1));
            if start > end {
                return Ok(Reply::Int(-1));
            }
            let (first, last) = if by_bit { (start, end) } else { (start * 8, end * 8 + 7) };
            (first, last, range.len() >= 2)
        }
        _ => return Err(CmdError::Arg(crate::protocol::ArgError::Syntax)),
    };
    if first > last {
        return Ok(Reply::Int(-1));
    }
    let bit_at = |i: i64| value[(i / 8) as usize] & (0x80 >> (i % 8)) != 0;
    // Whole bytes that cannot hold the bit are skipped a byte at a time.
    let skip = if bit { 0x00 } else { 0xff };
    let mut i = first;
    while i <= last {
        if i % 8 == 0 && i + 7 <= last && value[(i / 8) as usize] == skip {
            i += 8;
            continue;
        }
        if bit_at(i) == bit {
            return Ok(Reply::Int(i));
        }
        i += 1;
    }
    Ok(Reply::Int(if !bit && !end_given { last + 1 } else { -1 }))
}

/// The most memory `LCS` may take for its table of subsequence lengths (4
/// bytes for each pair of positions): 64 MiB, two strings of about 4,000
/// bytes. Redis allows its `proto-max-bulk-len` (512 MiB by default); here
/// the table is built on the thread that serves every client, so the bound
/// is the largest request raftlock takes.
const MAX_LCS_TABLE_BYTES: u64 = super::MAX_REQUEST_BYTES as u64;

/// ```text
/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]
/// ```
/// The longest common subsequence of two strings (a missing key is empty):
/// the subsequence itself, its length (`LEN`), or (`IDX`) its length and
/// its matching ranges, last first, each `[[start1, end1], [start2, end2]]`
/// with `WITHMATCHLEN` its length too, those shorter than `MINMATCHLEN` left
/// out. The same subsequence and ranges as Redis: from the end of both
/// strings, a step back in the first string only when that keeps a longer
/// subsequence than a step back in the second.
pub fn lcs(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let not_strings = || CmdError::Other("ERR The specified keys must contain string values".into());
    let value = |key: &Bytes| -> Result<&[u8], CmdError> {
        match string_of(ks.get(key, ctx.now)) {
            Ok(v) => Ok(v.map_or(&[][..], |s| &s[..])),
            Err(_) => Err(not_strings()),
        }
    };
    let (a, b) = (args.next_bytes()?, args.next_bytes()?);
    let (a, b) = (value(a)?, value(b)?);
    let (mut get_len, mut get_idx, mut with_match_len, mut min_match_len) = (false, false, false, 0u64);
    while args.remaining() > 0 {
        match args.next_keyword()?.as_str() {
            "LEN" => get_len = true,
            "IDX" => get_idx = true,
            "WITHMATCHLEN" => with_match_len = true,
            "MINMATCHLEN" if args.remaining() > 0 => min_match_len = args.next_i64()?.max(0) as u64,
            _ => return Err(CmdError::Arg(crate::protocol::ArgError::Syntax)),
        }
    }
    if get_len && get_idx {
        return Err(CmdError::Other("ERR If you want both the length and indexes, please just use IDX.".into()));
    }
    let width = b.len() + 1;
    let cells = (a.len() as u64 + 1) * width as u64;
    if cells * 4 > MAX_LCS_TABLE_BYTES {
        return Err(CmdError::Other(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len".into(),
        ));
    }
    // table[i * width + j]: the length of the longest common subsequence
    // of a[..i] and b[..j].
    let mut table = vec![0u32; cells as usize];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let length = table[a.len() * width + b.len()];
    if get_len {
        return Ok(Reply::Int(length as i64));
    }
    // Walked back from the ends; a run of matches in both strings at once
    // is one range, reported once it ends (a step without a match, or the
    // start of either string).
    let mut common = vec![0u8; length as usize];
    let mut left = length as usize;
    let mut ranges = Vec::new();
    // The current range: (start in a, end in a, start in b, end in b).
    let mut range: Option<(usize, usize, usize, usize)> = None;
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 && j > 0 {
        let ended = if a[i - 1] == b[j - 1] {
            left -= 1;
            common[left] = a[i - 1];
            range = match range {
                // A match right after a match extends its range (any other
                // step ended the range).
                Some((sa, ea, sb, eb)) if sa == i && sb == j => Some((sa - 1, ea, sb - 1, eb)),
                _ => Some((i - 1, i - 1, j - 1, j - 1)),
            };
            i -= 1;
            j -= 1;
            i == 0 || j == 0
        } else {
            if table[(i - 1) * width + j] > table[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            range.is_some()
        };
        if ended {
            if let Some((sa, ea, sb, eb)) = range.take() {
                let len = (ea - sa + 1) as u64;
                if min_match_len == 0 || len >= min_match_len {
                    let pair = |s: usize, e: usize| Reply::Array(vec![Reply::Int(s as i64), Reply::Int(e as i64)]);
                    let mut item = vec![pair(sa, ea), pair(sb, eb)];
                    if with_match_len {
                        item.push(Reply::Int(len as i64));
                    }
                    ranges.push(Reply::Array(item));
                }
            }
        }
    }
    if get_idx {
        return Ok(Reply::Map(vec![
            (Reply::text("matches"), Reply::Array(ranges)),
            (Reply::text("len"), Reply::Int(length as i64)),
        ]));
    }
    Ok(Reply::Bulk(Bytes::from(common)))
}

/// The operations of [`bitop`].
#[derive(Clone, Copy, PartialEq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// ```text
/// BITOP AND | OR | XOR | NOT destkey key [key ...]
/// ```
/// Stores in `destkey` the bitwise operation over the strings at the keys
/// (a missing key, or the part of a string past its end, counts as zero
/// bytes; `NOT` takes one key), as long as the longest of them, without an
/// expiry; deletes `destkey` if that is empty. Its length.
pub fn bitop(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let op = match args.next_keyword()?.as_str() {
        "AND" => BitOp::And,
        "OR" => BitOp::Or,
        "XOR" => BitOp::Xor,
        "NOT" => BitOp::Not,
        _ => return Err(CmdError::Arg(crate::protocol::ArgError::Syntax)),
    };
    let dst = args.next_bytes()?.clone();
    let keys = args.rest();
    if op == BitOp::Not && keys.len() != 1 {
        return Err(CmdError::Other("ERR BITOP NOT must be called with a single source key.".into()));
    }
    let sources: Vec<Option<&Str>> =
        keys.iter().map(|k| string_of(ks.get(k, ctx.log_time))).collect::<Result<_, _>>()?;
    let byte = |s: &Option<&Str>, j: usize| s.and_then(|s| s.get(j).copied()).unwrap_or(0);
    let longest = sources.iter().map(|s| s.map_or(0, |s| s.len())).max().unwrap_or(0);
    let result: Vec<u8> = (0..longest)
        .map(|j| {
            let rest = sources[1..].iter().map(|s| byte(s, j));
            match op {
                BitOp::And => rest.fold(byte(&sources[0], j), |a, b| a & b),
                BitOp::Or => rest.fold(byte(&sources[0], j), |a, b| a | b),
                BitOp::Xor => rest.fold(byte(&sources[0], j), |a, b| a ^ b),
                BitOp::Not => !byte(&sources[0], j),
            }
        })
        .collect();
    // The destination's old value, whatever its type, is replaced whole.
    if result.is_empty() {
        if ks.get_mut(&dst, ctx).is_some() {
            ks.remove(&dst);
            ctx.key_event('g', "del", &dst);
        }
    } else {
        ks.insert(dst.clone(), Entry::string(Bytes::from(result), ctx.version, ctx.log_time));
        ctx.key_event('$', "set", &dst);
    }
    Ok(Reply::Int(longest as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README: strings built in place or appended to stop at 64 MiB, with
    /// Redis's errors.
    #[test]
    fn setrange_setbit_and_append_build_at_most_64_mib() {
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
        // APPEND up to the same length, and not a byte past it.
        let e = append(&mut ks, &mut ctx, Args::new(&argv(&["append", "k", "y"]))).unwrap_err();
        assert_eq!(e.to_string(), "ERR string exceeds maximum allowed size (proto-max-bulk-len)");
        assert_eq!(strlen_of(&ks, "k"), limit as usize);
        let mut chunk = argv(&["append", "a", ""]);
        chunk[2] = Bytes::from(vec![b'z'; (limit / 4) as usize]);
        for n in 1..=4 {
            assert_eq!(append(&mut ks, &mut ctx, Args::new(&chunk)), Ok(Reply::Int((limit / 4 * n) as i64)));
        }
        assert!(append(&mut ks, &mut ctx, Args::new(&chunk)).is_err());
        assert_eq!(strlen_of(&ks, "a"), limit as usize);
    }

    fn strlen_of(ks: &Keyspace, key: &str) -> usize {
        let read = ReadCtx::at(0);
        match strlen(ks, &read, Args::new(&[Bytes::from_static(b"strlen"), Bytes::copy_from_slice(key.as_bytes())])) {
            Ok(Reply::Int(n)) => n as usize,
            other => panic!("{other:?}"),
        }
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

    /// BITPOS's answers, each checked against redis-server 7.0.15: `s` holds ff f0 00 (bits 0-11 set), `ones` ff ff, `e`
    /// the empty string.
    #[test]
    fn bitpos_answers_like_redis() {
        let argv = |words: &[&str]| words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>();
        let mut ks = Keyspace::new();
        let mut ctx = ExecCtx::new(1, 0, 0);
        ks.insert(Bytes::from("s"), Entry::string(Bytes::from_static(b"\xff\xf0\x00"), 1, 0));
        ks.insert(Bytes::from("ones"), Entry::string(Bytes::from_static(b"\xff\xff"), 2, 0));
        ks.insert(Bytes::from("e"), Entry::string(Bytes::new(), 3, 0));
        crate::commands::hashes::hset(&mut ks, &mut ctx, Args::new(&argv(&["hset", "h", "f", "v"]))).unwrap();
        let read = ReadCtx::at(0);
        let run = |line: &str| match bitpos(&ks, &read, Args::new(&argv(&line.split(' ').collect::<Vec<_>>()))) {
            Ok(Reply::Int(n)) => Ok(n),
            Ok(other) => panic!("{line}: {other:?}"),
            Err(e) => Err(e.to_string()),
        };
        for (line, want) in [
            ("bitpos s 0", 12),
            ("bitpos s 1", 0),
            ("bitpos s 0 0", 12),
            ("bitpos s 0 0 0", -1),
            ("bitpos s 1 2", -1),
            ("bitpos s 0 1 -1", 12),
            ("bitpos s 1 -1", -1),
            ("bitpos s 1 -2", 8),
            ("bitpos s 0 2 -5", -1),
            ("bitpos s 0 3", -1),
            ("bitpos s 1 7 15 bit", 7),
            ("bitpos s 0 7 15 bit", 12),
            ("bitpos s 0 7 11 BIT", -1),
            ("bitpos s 1 12 23 bit", -1),
            ("bitpos s 0 14 23 bit", 14),
            ("bitpos s 0 -10 -1 bit", 14),
            ("bitpos s 1 -17 -1 bit", 7),
            ("bitpos s 1 0 -1 byte", 0),
            ("bitpos ones 0", 16),
            ("bitpos ones 0 0", 16),
            ("bitpos ones 0 0 -1", -1),
            ("bitpos ones 0 1 1 bit", -1),
            ("bitpos ones 1 100", -1),
            ("bitpos e 0", -1),
            ("bitpos e 1", -1),
            ("bitpos nokey 0", 0),
            ("bitpos nokey 1", -1),
            ("bitpos nokey 1 x", -1),
            ("bitpos s 1 -9223372036854775808 9223372036854775807", 0),
            ("bitpos s 0 -9223372036854775808 9223372036854775807 bit", 12),
            ("bitpos s 1 9223372036854775807", -1),
            ("bitpos s 0 2", 16),
            ("bitpos s 0 2 2", 16),
            ("bitpos s 0 16 100 bit", 16),
        ] {
            assert_eq!(run(line), Ok(want), "{line}");
        }
        let not_bit = Err("ERR The bit argument must be 1 or 0.".to_string());
        let not_int = Err("ERR value is not an integer or out of range".to_string());
        let syntax = Err("ERR syntax error".to_string());
        for (line, want) in [
            ("bitpos nokey 2", &not_bit),
            ("bitpos s 2", &not_bit),
            ("bitpos s x", &not_int),
            ("bitpos s 1 x", &not_int),
            ("bitpos s 1 0 x", &not_int),
            ("bitpos s 1 0 1 bogus", &syntax),
            ("bitpos s 1 x 1 bogus", &not_int),
            ("bitpos s 1 0 x bogus", &syntax),
            ("bitpos s 1 0 1 bit extra", &syntax),
            ("bitpos h 1 x", &Err(crate::commands::CmdError::WrongType.to_string())),
        ] {
            assert_eq!(&run(line), want, "{line}");
        }
    }

    /// BITOP's results, lengths, errors and destinations, each checked
    /// against redis-server 7.0.15.
    #[test]
    fn bitop_stores_like_redis() {
        let argv = |words: &[&str]| words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>();
        let mut ks = Keyspace::new();
        let mut ctx = ExecCtx::new(1, 0, 0);
        for (k, v) in [("a", "foo"), ("b", "foobar"), ("e", "")] {
            set(&mut ks, &mut ctx, Args::new(&argv(&["set", k, v]))).unwrap();
        }
        set(&mut ks, &mut ctx, Args::new(&argv(&["set", "dst", "x", "PX", "100000"]))).unwrap();
        crate::commands::hashes::hset(&mut ks, &mut ctx, Args::new(&argv(&["hset", "h", "f", "v"]))).unwrap();
        let mut run = |line: &str| {
            bitop(&mut ks, &mut ctx, Args::new(&argv(&line.split(' ').collect::<Vec<_>>()))).map_err(|e| e.to_string())
        };
        assert_eq!(run("bitop and dst a b"), Ok(Reply::Int(6)));
        let value = |ks: &Keyspace| ks.get(b"dst", 0).map(|e| (string_of(Some(e)).unwrap().unwrap().to_vec(), e.expires_at()));
        assert_eq!(value(&ks), Some((b"foo\0\0\0".to_vec(), None)), "the expiry goes with the old value");
        let mut run = |ks: &mut Keyspace, line: &str| {
            bitop(ks, &mut ctx, Args::new(&argv(&line.split(' ').collect::<Vec<_>>()))).map_err(|e| e.to_string())
        };
        assert_eq!(run(&mut ks, "bitop OR dst a b nokey"), Ok(Reply::Int(6)));
        assert_eq!(run(&mut ks, "bitop xor dst a b"), Ok(Reply::Int(6)));
        assert_eq!(run(&mut ks, "bitop not dst a"), Ok(Reply::Int(3)));
        assert_eq!(run(&mut ks, "bitop not dst a b"), Err("ERR BITOP NOT must be called with a single source key.".into()));
        assert_eq!(run(&mut ks, "bitop nand dst a"), Err("ERR syntax error".into()));
        assert_eq!(run(&mut ks, "bitop and dst a h"), Err(crate::commands::CmdError::WrongType.to_string()));
        assert_eq!(run(&mut ks, "bitop and dst h"), Err(crate::commands::CmdError::WrongType.to_string()));
        assert_eq!(value(&ks), Some((vec![!b'f', !b'o', !b'o'], None)), "errors leave the destination");
        assert_eq!(run(&mut ks, "bitop and dst a nokey"), Ok(Reply::Int(3)));
        assert_eq!(value(&ks), Some((vec![0, 0, 0], None)));
        // An empty result deletes the destination.
        assert_eq!(run(&mut ks, "bitop or dst e"), Ok(Reply::Int(0)));
        assert_eq!(value(&ks), None);
        assert_eq!(run(&mut ks, "bitop and dst nokey"), Ok(Reply::Int(0)));
        assert_eq!(value(&ks), None);
        assert_eq!(run(&mut ks, "bitop xor h b b"), Ok(Reply::Int(6)), "any type is replaced");
        assert_eq!(ks.get(b"h", 0).map(|e| string_of(Some(e)).unwrap().unwrap().to_vec()), Some(vec![0; 6]));
    }

    /// LCS's subsequences and ranges, recorded from redis-server 7.0.15 for
    /// random strings (`LCS x y` and `LCS x y IDX WITHMATCHLEN`, flattened),
    /// and its options and errors.
    #[test]
    fn lcs_answers_like_redis() {
        let argv = |words: &[&str]| words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>();
        fn flat(r: &Reply, out: &mut Vec<String>) {
            match r {
                Reply::Array(items) => items.iter().for_each(|i| flat(i, out)),
                Reply::Map(pairs) => pairs.iter().for_each(|(k, v)| {
                    flat(k, out);
                    flat(v, out)
                }),
                Reply::Int(n) => out.push(n.to_string()),
                Reply::Bulk(b) => out.push(String::from_utf8_lossy(b).into_owned()),
                Reply::Status(s) => out.push(s.clone()),
                other => panic!("{other:?}"),
            }
        }
        let run = |ks: &Keyspace, words: &[&str]| {
            lcs(ks, &ReadCtx::at(0), Args::new(&argv(&[&["lcs"], words].concat()))).map(|r| {
                let mut out = Vec::new();
                flat(&r, &mut out);
                out.join(" ")
            })
        };
        for (x, y, common, idx) in [
            ("abcaa", "abcacaaa", "abcaa", "matches 3 4 6 7 2 2 2 4 4 1 0 1 0 1 2 len 5"),
            ("baaacb", "", "", "matches len 0"),
            ("aca", "baca", "aca", "matches 0 2 1 3 3 len 3"),
            ("bccaaccca", "accac", "acca", "matches 6 8 1 3 3 4 4 0 0 1 len 4"),
            ("", "abccbbbcb", "", "matches len 0"),
            ("baaca", "c", "c", "matches 3 3 0 0 1 len 1"),
            ("cbbc", "bcaacba", "bc", "matches 3 3 4 4 1 2 2 0 0 1 len 2"),
            ("bbcbcbcba", "b", "b", "matches 7 7 0 0 1 len 1"),
            ("ccaaccb", "ccbbcbcbab", "ccccb", "matches 6 6 9 9 1 5 5 6 6 1 4 4 4 4 1 0 1 0 1 2 len 5"),
            ("acaba", "bac", "ba", "matches 3 4 0 1 2 len 2"),
            ("ohmytext", "mynewtext", "mytext", "matches 4 7 5 8 4 2 3 0 1 2 len 6"),
        ] {
            let mut ks = Keyspace::new();
            ks.insert(Bytes::from("x"), Entry::string(Bytes::copy_from_slice(x.as_bytes()), 1, 0));
            ks.insert(Bytes::from("y"), Entry::string(Bytes::copy_from_slice(y.as_bytes()), 2, 0));
            assert_eq!(run(&ks, &["x", "y"]).unwrap(), common, "{x} {y}");
            assert_eq!(run(&ks, &["x", "y", "idx", "withmatchlen"]).unwrap(), idx, "{x} {y}");
            assert_eq!(run(&ks, &["x", "y", "LEN"]).unwrap(), common.len().to_string());
        }
        let mut ks = Keyspace::new();
        let mut ctx = ExecCtx::new(1, 0, 0);
        for (k, v) in [("a", "ohmytext"), ("b", "mynewtext")] {
            set(&mut ks, &mut ctx, Args::new(&argv(&["set", k, v]))).unwrap();
        }
        crate::commands::hashes::hset(&mut ks, &mut ctx, Args::new(&argv(&["hset", "h", "f", "v"]))).unwrap();
        let ok = |s: &str| Ok::<_, CmdError>(s.to_string());
        assert_eq!(run(&ks, &["a", "b", "idx"]), ok("matches 4 7 5 8 2 3 0 1 len 6"));
        assert_eq!(run(&ks, &["a", "b", "idx", "minmatchlen", "4", "withmatchlen"]), ok("matches 4 7 5 8 4 len 6"));
        assert_eq!(run(&ks, &["a", "b", "idx", "minmatchlen", "-5"]), ok("matches 4 7 5 8 2 3 0 1 len 6"));
        assert_eq!(run(&ks, &["a", "nokey"]), ok(""));
        // The table is bounded: two strings of 5,000 bytes would need 100 MB.
        let long = "x".repeat(5_000);
        for k in ["l1", "l2"] {
            set(&mut ks, &mut ctx, Args::new(&argv(&["set", k, &long]))).unwrap();
        }
        let err = |words: &[&str]| run(&ks, words).unwrap_err().to_string();
        assert_eq!(err(&["a", "b", "len", "idx"]), "ERR If you want both the length and indexes, please just use IDX.");
        assert_eq!(err(&["a", "h"]), "ERR The specified keys must contain string values");
        assert_eq!(err(&["a", "b", "minmatchlen"]), "ERR syntax error");
        assert_eq!(err(&["a", "b", "minmatchlen", "x"]), "ERR value is not an integer or out of range");
        assert_eq!(err(&["a", "b", "bogus"]), "ERR syntax error");
        assert_eq!(
            err(&["l1", "l2", "len"]),
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"
        );
        assert_eq!(run(&ks, &["l1", "a", "len"]), ok("1"), "one string long, the other short: taken");
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
