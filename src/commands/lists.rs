//! List commands: LPUSH, RPUSH, LPOP, RPOP, LINDEX, LRANGE, LREM, LLEN.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx};
use crate::protocol::{Args, Reply};

use super::containers::{drop_if_empty, read, write};
use super::{CmdError, CmdResult};

type List = VecDeque<Bytes>;

fn push(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args, left: bool) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let values = args.rest();
    let list = write::<List>(ks, ctx, &key, true)?.ok_or(CmdError::WrongType)?;
    for v in values {
        if left { list.push_front(v.clone()) } else { list.push_back(v.clone()) }
    }
    let len = list.len();
    ctx.key_event('l', if left { "lpush" } else { "rpush" }, &key);
    Ok(Reply::Int(len as i64))
}

/// ```text
/// LPUSH key element [element ...]
/// ```
/// The length of the list after the push.
pub fn lpush(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    push(ks, ctx, args, true)
}

/// ```text
/// RPUSH key element [element ...]
/// ```
pub fn rpush(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    push(ks, ctx, args, false)
}

fn pop(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args, left: bool) -> CmdResult {
    let key = args.next_bytes()?.clone();
    if args.remaining() > 1 {
        return Err(CmdError::Arity(if left { "lpop" } else { "rpop" }));
    }
    let count = match args.remaining() {
        0 => None,
        _ => match args.next_i64() {
            Ok(n) if n >= 0 => Some(n as usize),
            _ => return Err(CmdError::Other("ERR value is out of range, must be positive".into())),
        },
    };
    let Some(list) = write::<List>(ks, ctx, &key, false)? else {
        return Ok(if count.is_some() { Reply::NilArray } else { Reply::Nil });
    };
    let take = count.unwrap_or(1).min(list.len());
    let popped: Vec<Bytes> =
        (0..take).filter_map(|_| if left { list.pop_front() } else { list.pop_back() }).collect();
    if !popped.is_empty() {
        ctx.key_event('l', if left { "lpop" } else { "rpop" }, &key);
        drop_if_empty(ks, ctx, &key);
    }
    Ok(match count {
        None => popped.into_iter().next().map(Reply::Bulk).unwrap_or(Reply::Nil),
        Some(_) => Reply::Array(popped.into_iter().map(Reply::Bulk).collect()),
    })
}

/// ```text
/// LPOP key [count]
/// ```
/// The first element (or up to `count` of them), or nil if the list is missing.
pub fn lpop(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    pop(ks, ctx, args, true)
}

/// ```text
/// RPOP key [count]
/// ```
pub fn rpop(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    pop(ks, ctx, args, false)
}

/// Parses a blocking timeout in seconds (a float; 0 waits forever).
pub fn parse_block_timeout(raw: &[u8]) -> Result<f64, CmdError> {
    let t: f64 = std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|t: &f64| t.is_finite())
        .ok_or_else(|| CmdError::Other("ERR timeout is not a float or out of range".into()))?;
    if t < 0.0 {
        return Err(CmdError::Other("ERR timeout is negative".into()));
    }
    // As Redis: milliseconds must fit a signed 64-bit integer.
    if t * 1000.0 >= i64::MAX as f64 {
        return Err(CmdError::Other("ERR timeout is out of range".into()));
    }
    Ok(t)
}

fn blocking_pop(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args, left: bool) -> CmdResult {
    let rest = args.rest();
    let (keys, timeout) = rest.split_at(rest.len() - 1);
    parse_block_timeout(&timeout[0])?;
    for key in keys {
        let Some(list) = write::<List>(ks, ctx, key, false)? else { continue };
        let Some(value) = (if left { list.pop_front() } else { list.pop_back() }) else { continue };
        ctx.key_event('l', if left { "lpop" } else { "rpop" }, key);
        drop_if_empty(ks, ctx, key);
        return Ok(Reply::Array(vec![Reply::Bulk(key.clone()), Reply::Bulk(value)]));
    }
    Ok(Reply::NilArray)
}

/// ```text
/// BLPOP key [key ...] timeout
/// ```
/// `[key, element]` from the first non-empty list. This is one attempt, as
/// applied from the log; a client connection waits for a push to any of the
/// keys and tries again, until `timeout` seconds pass (nil) or forever (0).
pub fn blpop(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    blocking_pop(ks, ctx, args, true)
}

/// ```text
/// BRPOP key [key ...] timeout
/// ```
pub fn brpop(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    blocking_pop(ks, ctx, args, false)
}

/// Resolves a Redis list index (negative counts from the end).
fn resolve_index(index: i64, len: usize) -> Option<usize> {
    let i = if index < 0 { len as i64 + index } else { index };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// ```text
/// LINDEX key index
/// ```
pub fn lindex(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let index = args.next_i64()?;
    let list = read::<List>(ks, ctx.now, key)?;
    let item = list.and_then(|l| resolve_index(index, l.len()).and_then(|i| l.get(i).cloned()));
    Ok(item.map(Reply::Bulk).unwrap_or(Reply::Nil))
}

/// Clamps a Redis `start stop` range to `[from, to)` over `len` items.
pub(super) fn clamp_range(start: i64, stop: i64, len: usize) -> (usize, usize) {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let stop = if stop < 0 { len + stop } else { stop.min(len - 1) };
    if start > stop || start >= len { (0, 0) } else { (start as usize, stop as usize + 1) }
}

/// ```text
/// LRANGE key start stop
/// ```
pub fn lrange(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let (start, stop) = (args.next_i64()?, args.next_i64()?);
    let Some(list) = read::<List>(ks, ctx.now, key)? else { return Ok(Reply::Array(vec![])) };
    let (from, to) = clamp_range(start, stop, list.len());
    Ok(Reply::Array(list.range(from..to).cloned().map(Reply::Bulk).collect()))
}

/// ```text
/// LREM key count element
/// ```
/// Removes `count` occurrences (from the head if positive, from the tail if
/// negative, all if 0); the number removed.
pub fn lrem(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let count = args.next_i64()?;
    let element = args.next_bytes()?.clone();
    let Some(list) = write::<List>(ks, ctx, &key, false)? else { return Ok(Reply::Int(0)) };
    let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
    let mut removed = 0;
    let mut kept: Vec<Bytes> = Vec::with_capacity(list.len());
    let items: Vec<Bytes> = if count < 0 { list.drain(..).rev().collect() } else { list.drain(..).collect() };
    for item in items {
        if removed < limit && item == element {
            removed += 1;
        } else {
            kept.push(item);
        }
    }
    if count < 0 {
        kept.reverse();
    }
    list.extend(kept);
    if removed > 0 {
        ctx.key_event('l', "lrem", &key);
        drop_if_empty(ks, ctx, &key);
    }
    Ok(Reply::Int(removed as i64))
}

/// ```text
/// LLEN key
/// ```
pub fn llen(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(Reply::Int(read::<List>(ks, ctx.now, key)?.map(|l| l.len()).unwrap_or(0) as i64))
}

#[cfg(test)]
mod tests {
    use super::clamp_range;

    #[test]
    fn ranges_clamp_like_redis() {
        assert_eq!(clamp_range(0, -1, 5), (0, 5));
        assert_eq!(clamp_range(1, 2, 5), (1, 3));
        assert_eq!(clamp_range(-2, -1, 5), (3, 5));
        assert_eq!(clamp_range(3, 100, 5), (3, 5));
        assert_eq!(clamp_range(4, 2, 5), (0, 0));
        assert_eq!(clamp_range(-100, 0, 5), (0, 1));
        assert_eq!(clamp_range(0, -1, 0), (0, 0));
    }
}
