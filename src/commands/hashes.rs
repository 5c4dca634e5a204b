//! Hash commands: HSET, HSETNX, HGET, HMGET, HEXISTS, HINCRBY, HDEL, HLEN,
//! HKEYS, HVALS, HGETALL.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx};
use crate::protocol::{parse_i64, Args, Reply};

use super::containers::{drop_if_empty, read, write};
use super::{CmdError, CmdResult};

type Hash = BTreeMap<Bytes, Bytes>;

/// ```text
/// HSET key field value [field value ...]
/// ```
/// The number of fields that were added (not updated).
pub fn hset(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let pairs = args.rest();
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Err(CmdError::Arity("hset"));
    }
    let hash = write::<Hash>(ks, ctx, &key, true)?.ok_or(CmdError::WrongType)?;
    let added = pairs.chunks(2).filter(|p| hash.insert(p[0].clone(), p[1].clone()).is_none()).count();
    ctx.key_event('h', "hset", &key);
    Ok(Reply::Int(added as i64))
}

/// ```text
/// HMSET key field value [field value ...]
/// ```
/// `OK` (the deprecated form of HSET).
pub fn hmset(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    hset(ks, ctx, args).map(|_| Reply::ok())
}

/// ```text
/// HSETNX key field value
/// ```
/// 1 if the field was set, 0 if it existed.
pub fn hsetnx(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let field = args.next_bytes()?.clone();
    let value = args.next_bytes()?.clone();
    let hash = write::<Hash>(ks, ctx, &key, true)?.ok_or(CmdError::WrongType)?;
    if hash.contains_key(&field) {
        return Ok(Reply::Int(0));
    }
    hash.insert(field, value);
    ctx.key_event('h', "hset", &key);
    Ok(Reply::Int(1))
}

/// ```text
/// HGET key field
/// ```
pub fn hget(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let field = args.next_bytes()?;
    let value = read::<Hash>(ks, ctx.now, key)?.and_then(|h| h.get(field).cloned());
    Ok(value.map(Reply::Bulk).unwrap_or(Reply::Nil))
}

/// ```text
/// HMGET key field [field ...]
/// ```
pub fn hmget(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let hash = read::<Hash>(ks, ctx.now, key)?;
    let values = args.rest().iter().map(|f| hash.and_then(|h| h.get(f).cloned()).map(Reply::Bulk).unwrap_or(Reply::Nil));
    Ok(Reply::Array(values.collect()))
}

/// ```text
/// HEXISTS key field
/// ```
pub fn hexists(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let field = args.next_bytes()?;
    Ok(Reply::Int(read::<Hash>(ks, ctx.now, key)?.is_some_and(|h| h.contains_key(field)) as i64))
}

/// ```text
/// HINCRBY key field increment
/// ```
/// The value after the increment; a missing field counts as 0.
pub fn hincrby(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let field = args.next_bytes()?.clone();
    let by = args.next_i64()?;
    super::containers::check::<Hash>(ks, ctx, &key)?;
    let current = match read::<Hash>(ks, ctx.log_time, &key)?.and_then(|h| h.get(&field)) {
        None => 0,
        Some(v) => parse_i64(v).ok_or_else(|| CmdError::Other("ERR hash value is not an integer".into()))?,
    };
    let new = current.checked_add(by).ok_or(CmdError::Overflow)?;
    let hash = write::<Hash>(ks, ctx, &key, true)?.ok_or(CmdError::WrongType)?;
    hash.insert(field, Bytes::from(new.to_string()));
    ctx.key_event('h', "hincrby", &key);
    Ok(Reply::Int(new))
}

/// ```text
/// HDEL key field [field ...]
/// ```
/// The number of fields removed.
pub fn hdel(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let fields = args.rest();
    let Some(hash) = write::<Hash>(ks, ctx, &key, false)? else { return Ok(Reply::Int(0)) };
    let removed = fields.iter().filter(|f| hash.remove(*f).is_some()).count();
    if removed > 0 {
        ctx.key_event('h', "hdel", &key);
        drop_if_empty(ks, ctx, &key);
    }
    Ok(Reply::Int(removed as i64))
}

/// ```text
/// HLEN key
/// ```
pub fn hlen(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(Reply::Int(read::<Hash>(ks, ctx.now, key)?.map(|h| h.len()).unwrap_or(0) as i64))
}

/// ```text
/// HKEYS key
/// ```
pub fn hkeys(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let hash = read::<Hash>(ks, ctx.now, key)?;
    Ok(Reply::Array(hash.into_iter().flat_map(|h| h.keys().cloned().map(Reply::Bulk)).collect()))
}

/// ```text
/// HVALS key
/// ```
pub fn hvals(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let hash = read::<Hash>(ks, ctx.now, key)?;
    Ok(Reply::Array(hash.into_iter().flat_map(|h| h.values().cloned().map(Reply::Bulk)).collect()))
}

/// ```text
/// HGETALL key
/// ```
/// A map of fields to values (a flat array in RESP2).
pub fn hgetall(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let hash = read::<Hash>(ks, ctx.now, key)?;
    Ok(Reply::Map(
        hash.into_iter().flat_map(|h| h.iter().map(|(f, v)| (Reply::Bulk(f.clone()), Reply::Bulk(v.clone())))).collect(),
    ))
}
