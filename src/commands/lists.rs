//! List commands: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LMPOP, BLPOP,
//! BRPOP, BLMPOP, LMOVE, RPOPLPUSH, BLMOVE, BRPOPLPUSH, LINDEX, LPOS, LRANGE,
//! LSET, LINSERT, LTRIM, LREM, LLEN.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

use super::containers::{drop_if_empty, multi_pop_args, read, write};
use super::{CmdError, CmdResult};

type List = VecDeque<Bytes>;

/// Pushes the elements one by one; `create` unless it is `LPUSHX`/`RPUSHX`,
/// which push only onto an existing list (0 otherwise).
fn push(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args, left: bool, create: bool) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let values = args.rest();
    let Some(list) = write::<List>(ks, ctx, &key, create)? else { return Ok(Reply::Int(0)) };
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
    push(ks, ctx, args, true, true)
}

/// ```text
/// RPUSH key element [element ...]
/// ```
pub fn rpush(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    push(ks, ctx, args, false, true)
}

/// ```text
/// LPUSHX key element [element ...]
/// ```
/// As LPUSH, but only onto an existing list: its new length, or 0 (and no
/// key is created) if `key` does not exist.
pub fn lpushx(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    push(ks, ctx, args, true, false)
}

/// ```text
/// RPUSHX key element [element ...]
/// ```
/// As RPUSH, but only onto an existing list (0 if `key` does not exist).
pub fn rpushx(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    push(ks, ctx, args, false, false)
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

/// An end of a list, as `LEFT`/`RIGHT` name it (LMOVE, BLMOVE, LMPOP, BLMPOP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Left,
    Right,
}

impl End {
    /// `LEFT` or `RIGHT`, in any case; a syntax error otherwise.
    fn parse(raw: &[u8]) -> Result<End, CmdError> {
        if raw.eq_ignore_ascii_case(b"left") {
            Ok(End::Left)
        } else if raw.eq_ignore_ascii_case(b"right") {
            Ok(End::Right)
        } else {
            Err(CmdError::Arg(ArgError::Syntax))
        }
    }

    fn pop(self, list: &mut List) -> Option<Bytes> {
        match self {
            End::Left => list.pop_front(),
            End::Right => list.pop_back(),
        }
    }

    fn push(self, list: &mut List, value: Bytes) {
        match self {
            End::Left => list.push_front(value),
            End::Right => list.push_back(value),
        }
    }

    fn pop_event(self) -> &'static str {
        if self == End::Left { "lpop" } else { "rpop" }
    }

    /// Named `...push` so that the hub wakes clients blocked on the key.
    fn push_event(self) -> &'static str {
        if self == End::Left { "lpush" } else { "rpush" }
    }
}

/// Pops from the `from` end of `src` and pushes onto the `to` end of `dst`
/// (created if missing; with `src == dst` the list rotates). The element, or
/// nil when `src` does not exist. `WRONGTYPE` for a key of another type,
/// before anything moves; as in Redis the destination's type is checked only
/// when there is something to move. Events as Redis: the push on `dst`, the
/// pop on `src`, `del` if `src` was emptied.
fn move_element(ks: &mut Keyspace, ctx: &mut ExecCtx, src: &Bytes, dst: &Bytes, from: End, to: End) -> CmdResult {
    if read::<List>(ks, ctx.log_time, src)?.is_none_or(|l| l.is_empty()) {
        return Ok(Reply::Nil);
    }
    read::<List>(ks, ctx.log_time, dst)?;
    let Some(value) = write::<List>(ks, ctx, src, false)?.and_then(|list| from.pop(list)) else {
        return Ok(Reply::Nil);
    };
    // Pushed before an emptied source is deleted: when `src == dst` the
    // element goes back onto the same list, which stays.
    let dest = write::<List>(ks, ctx, dst, true)?.ok_or(CmdError::WrongType)?;
    to.push(dest, value.clone());
    ctx.key_event('l', to.push_event(), dst);
    ctx.key_event('l', from.pop_event(), src);
    drop_if_empty(ks, ctx, src);
    Ok(Reply::Bulk(value))
}

/// ```text
/// LMOVE source destination LEFT|RIGHT LEFT|RIGHT
/// ```
/// Moves the first (`LEFT`) or last (`RIGHT`) element of `source` to the
/// given end of `destination`: the element, or nil if `source` does not exist.
pub fn lmove(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let (src, dst) = (args.next_bytes()?.clone(), args.next_bytes()?.clone());
    let from = End::parse(args.next_bytes()?)?;
    let to = End::parse(args.next_bytes()?)?;
    move_element(ks, ctx, &src, &dst, from, to)
}

/// ```text
/// RPOPLPUSH source destination
/// ```
/// `LMOVE source destination RIGHT LEFT`.
pub fn rpoplpush(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let (src, dst) = (args.next_bytes()?.clone(), args.next_bytes()?.clone());
    move_element(ks, ctx, &src, &dst, End::Right, End::Left)
}

/// ```text
/// BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout
/// ```
/// LMOVE that waits for `source` to get an element. This is one attempt, as
/// applied from the log: the element, or nil while `source` does not exist
/// (what Redis replies where it may not block: in a transaction);
/// a client connection waits for a push to `source` and tries again, until
/// `timeout` seconds pass (then a null array, as Redis 7.0) or forever (0).
pub fn blmove(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let (src, dst) = (args.next_bytes()?.clone(), args.next_bytes()?.clone());
    let from = End::parse(args.next_bytes()?)?;
    let to = End::parse(args.next_bytes()?)?;
    parse_block_timeout(args.next_bytes()?)?;
    move_element(ks, ctx, &src, &dst, from, to)
}

/// ```text
/// BRPOPLPUSH source destination timeout
/// ```
/// `BLMOVE source destination RIGHT LEFT timeout`: one attempt, as BLMOVE.
pub fn brpoplpush(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let (src, dst) = (args.next_bytes()?.clone(), args.next_bytes()?.clone());
    parse_block_timeout(args.next_bytes()?)?;
    move_element(ks, ctx, &src, &dst, End::Right, End::Left)
}

/// LMPOP and BLMPOP from `numkeys` on (`timeout` is BLMPOP's, checked after
/// the other arguments, as Redis does): pops up to `count` elements from the
/// first non-empty list. `[key, [element, ...]]`, or a null array when every
/// list is missing; `WRONGTYPE` for a key of another type reached before one.
fn multi_pop(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args, timeout: Option<&Bytes>) -> CmdResult {
    let (keys, end, count) = multi_pop_args(args, |word| End::parse(word))?;
    if let Some(timeout) = timeout {
        parse_block_timeout(timeout)?;
    }
    for key in keys {
        if read::<List>(ks, ctx.log_time, key)?.is_none_or(|l| l.is_empty()) {
            continue;
        }
        let Some(list) = write::<List>(ks, ctx, key, false)? else { continue };
        let take = count.min(list.len() as u64);
        let popped: Vec<Reply> = (0..take).filter_map(|_| end.pop(list)).map(Reply::Bulk).collect();
        ctx.key_event('l', end.pop_event(), key);
        drop_if_empty(ks, ctx, key);
        return Ok(Reply::Array(vec![Reply::Bulk(key.clone()), Reply::Array(popped)]));
    }
    Ok(Reply::NilArray)
}

/// ```text
/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]
/// ```
/// Pops up to `count` (1) elements from the given end of the first of the
/// lists that exists: `[key, [element, ...]]`, or a null array.
pub fn lmpop(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    multi_pop(ks, ctx, args, None)
}

/// ```text
/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]
/// ```
/// LMPOP that waits for a push to one of the lists. One attempt, as BLPOP:
/// a null array while every list is missing.
pub fn blmpop(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let timeout = args.next_bytes()?;
    multi_pop(ks, ctx, args, Some(timeout))
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

/// An `LPOS` count or `MAXLEN`: a non-negative integer, else `error` (Redis
/// gives the same text for a value that is not an integer).
fn non_negative(raw: &[u8], error: &str) -> Result<i64, CmdError> {
    parse_i64(raw).filter(|n| *n >= 0).ok_or_else(|| CmdError::Other(error.into()))
}

/// The indexes `LPOS` reports: the matches of `element`, searched from the
/// head (`rank` > 0) or from the tail (`rank` < 0), from the `|rank|`-th
/// match on, at most `count` of them (0: all), among the first `maxlen`
/// elements searched (0: all of them).
fn positions(list: &List, element: &[u8], rank: i64, count: i64, maxlen: i64) -> Vec<usize> {
    let len = list.len();
    let searched = if maxlen == 0 { len } else { len.min(usize::try_from(maxlen).unwrap_or(usize::MAX)) };
    let from_tail = rank < 0;
    // Redis 7.0 negates the rank in a C `long`: -2^63 stays negative, every
    // match passes `matches >= rank`, and the search answers from the first
    // match from the tail.
    let skipped = if rank == i64::MIN { 0 } else { rank.unsigned_abs().saturating_sub(1) };
    let (mut matches, mut found) = (0u64, Vec::new());
    for step in 0..searched {
        let i = if from_tail { len - 1 - step } else { step };
        if list.get(i).is_some_and(|e| e.as_ref() == element) {
            matches += 1;
            if matches > skipped {
                found.push(i);
                if count != 0 && found.len() as u64 >= count as u64 {
                    break;
                }
            }
        }
    }
    found
}

/// ```text
/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]
/// ```
/// The index of the first match of `element` (nil if none); with `RANK n`,
/// of the n-th match (negative: counted from the tail); with `COUNT`, an
/// array of up to that many indexes (0: all matches); `MAXLEN` limits how
/// many elements are compared. Indexes count from the head, as LINDEX's.
pub fn lpos(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let element = args.next_bytes()?;
    let (mut rank, mut count, mut maxlen) = (1, None, 0);
    while args.remaining() > 0 {
        let option = args.next_keyword()?;
        // An option without its value is a syntax error, as an unknown one.
        if args.remaining() == 0 {
            return Err(CmdError::Arg(ArgError::Syntax));
        }
        match option.as_str() {
            "RANK" => {
                rank = args.next_i64()?;
                if rank == 0 {
                    return Err(CmdError::Other(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... \
                         or use negative to start from the end of the list"
                            .into(),
                    ));
                }
            }
            "COUNT" => count = Some(non_negative(args.next_bytes()?, "ERR COUNT can't be negative")?),
            "MAXLEN" => maxlen = non_negative(args.next_bytes()?, "ERR MAXLEN can't be negative")?,
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    let found = match read::<List>(ks, ctx.now, key)? {
        Some(list) => positions(list, element, rank, count.unwrap_or(1), maxlen),
        None => Vec::new(),
    };
    Ok(match count {
        Some(_) => Reply::Array(found.into_iter().map(|i| Reply::Int(i as i64)).collect()),
        None => found.first().map_or(Reply::Nil, |&i| Reply::Int(i as i64)),
    })
}

/// ```text
/// LSET key index element
/// ```
/// `OK`; `ERR no such key` if the list does not exist (reported before a bad
/// index, as Redis), `ERR index out of range` past either end.
pub fn lset(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let index = args.next_bytes()?;
    let element = args.next_bytes()?.clone();
    let Some(len) = read::<List>(ks, ctx.log_time, &key)?.map(|l| l.len()) else {
        return Err(CmdError::Other("ERR no such key".into()));
    };
    let index = parse_i64(index).ok_or(ArgError::NotInteger)?;
    let i = resolve_index(index, len).ok_or_else(|| CmdError::Other("ERR index out of range".into()))?;
    let slot = write::<List>(ks, ctx, &key, false)?.and_then(|list| list.get_mut(i));
    let Some(slot) = slot else { return Err(CmdError::Other("ERR no such key".into())) };
    *slot = element;
    ctx.key_event('l', "lset", &key);
    Ok(Reply::ok())
}

/// ```text
/// LINSERT key BEFORE|AFTER pivot element
/// ```
/// Inserts `element` next to the first `pivot` from the head: the list's new
/// length, -1 if `pivot` is not in it, 0 if the list does not exist.
pub fn linsert(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let before = match args.next_keyword()?.as_str() {
        "BEFORE" => true,
        "AFTER" => false,
        _ => return Err(CmdError::Arg(ArgError::Syntax)),
    };
    let pivot = args.next_bytes()?;
    let element = args.next_bytes()?.clone();
    let Some(list) = read::<List>(ks, ctx.log_time, &key)? else { return Ok(Reply::Int(0)) };
    let Some(at) = list.iter().position(|e| e == pivot) else { return Ok(Reply::Int(-1)) };
    let Some(list) = write::<List>(ks, ctx, &key, false)? else { return Ok(Reply::Int(0)) };
    list.insert(if before { at } else { at + 1 }, element);
    let len = list.len();
    ctx.key_event('l', "linsert", &key);
    Ok(Reply::Int(len as i64))
}

/// ```text
/// LTRIM key start stop
/// ```
/// Keeps only the elements from `start` to `stop` (inclusive; negative
/// counts from the end; clamped to the list): `OK`. A list trimmed to
/// nothing is deleted.
pub fn ltrim(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let (start, stop) = (args.next_i64()?, args.next_i64()?);
    let Some(list) = write::<List>(ks, ctx, &key, false)? else { return Ok(Reply::ok()) };
    let (from, to) = clamp_range(start, stop, list.len());
    list.truncate(to);
    list.drain(..from);
    ctx.key_event('l', "ltrim", &key);
    drop_if_empty(ks, ctx, &key);
    Ok(Reply::ok())
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
    use super::*;

    fn argv(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn list(items: &str) -> List {
        items.split_whitespace().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect()
    }

    /// Runs a write command on `ks`; its reply (errors as replies).
    fn run(ks: &mut Keyspace, f: fn(&mut Keyspace, &mut ExecCtx, Args) -> CmdResult, words: &[&str]) -> Reply {
        let argv = argv(words);
        f(ks, &mut ExecCtx::new(7, 10, 0), Args::new(&argv)).unwrap_or_else(Reply::from)
    }

    fn contents(ks: &Keyspace, key: &str) -> Option<String> {
        let items = read::<List>(ks, 10, key.as_bytes()).ok()??;
        Some(items.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect::<Vec<_>>().join(" "))
    }

    #[test]
    fn lpos_rank_count_and_maxlen() {
        let l = list("a b c a b c a");
        assert_eq!(positions(&l, b"a", 1, 1, 0), vec![0]);
        assert_eq!(positions(&l, b"a", 2, 1, 0), vec![3]);
        assert_eq!(positions(&l, b"a", 4, 1, 0), Vec::<usize>::new());
        assert_eq!(positions(&l, b"a", -1, 1, 0), vec![6]);
        assert_eq!(positions(&l, b"a", -2, 0, 0), vec![3, 0]);
        assert_eq!(positions(&l, b"a", 1, 0, 0), vec![0, 3, 6]);
        assert_eq!(positions(&l, b"a", 2, 1, 10), vec![3]);
        // MAXLEN counts the elements compared, from the end searched from.
        assert_eq!(positions(&l, b"a", 1, 0, 3), vec![0]);
        assert_eq!(positions(&l, b"a", -1, 0, 2), vec![6]);
        assert_eq!(positions(&l, b"b", 1, 1, 1), Vec::<usize>::new());
        assert_eq!(positions(&l, b"c", 2, 0, 0), vec![5]);
        // Hostile values: no overflow, no panic; Redis 7.0's answer for -2^63.
        assert_eq!(positions(&l, b"a", i64::MIN, 1, 0), vec![6]);
        assert_eq!(positions(&l, b"a", i64::MAX, 0, i64::MAX), Vec::<usize>::new());
        assert_eq!(positions(&l, b"a", -1, i64::MAX, 0), vec![6, 3, 0]);
        assert_eq!(positions(&List::new(), b"a", -1, 0, 0), Vec::<usize>::new());
    }

    #[test]
    fn ltrim_keeps_the_clamped_range_and_deletes_an_emptied_list() {
        let mut ks = Keyspace::new();
        run(&mut ks, rpush, &["rpush", "l", "a", "b", "c", "d", "e", "f"]);
        assert_eq!(run(&mut ks, ltrim, &["ltrim", "l", "1", "-2"]), Reply::ok());
        assert_eq!(contents(&ks, "l").as_deref(), Some("b c d e"));
        run(&mut ks, ltrim, &["ltrim", "l", "-3", "100"]);
        assert_eq!(contents(&ks, "l").as_deref(), Some("c d e"));
        run(&mut ks, ltrim, &["ltrim", "l", "-9223372036854775808", "-3"]);
        assert_eq!(contents(&ks, "l").as_deref(), Some("c"));
        run(&mut ks, ltrim, &["ltrim", "l", "1", "0"]);
        assert_eq!(contents(&ks, "l"), None);
        assert_eq!(run(&mut ks, ltrim, &["ltrim", "l", "0", "1"]), Reply::ok(), "a missing list is OK");
    }

    #[test]
    fn linsert_goes_next_to_the_first_pivot() {
        let mut ks = Keyspace::new();
        run(&mut ks, rpush, &["rpush", "l", "x", "y", "x"]);
        assert_eq!(run(&mut ks, linsert, &["linsert", "l", "after", "x", "m"]), Reply::Int(4));
        assert_eq!(run(&mut ks, linsert, &["linsert", "l", "BEFORE", "x", "0"]), Reply::Int(5));
        assert_eq!(contents(&ks, "l").as_deref(), Some("0 x m y x"));
        assert_eq!(run(&mut ks, linsert, &["linsert", "l", "BEFORE", "zz", "q"]), Reply::Int(-1));
        assert_eq!(run(&mut ks, linsert, &["linsert", "nokey", "BEFORE", "x", "q"]), Reply::Int(0));
        assert_eq!(contents(&ks, "nokey"), None);
    }

    #[test]
    fn lmove_rotates_one_list_and_empties_another() {
        let mut ks = Keyspace::new();
        run(&mut ks, rpush, &["rpush", "l", "a", "b"]);
        assert_eq!(run(&mut ks, lmove, &["lmove", "l", "l", "LEFT", "RIGHT"]), Reply::bulk("a"));
        assert_eq!(contents(&ks, "l").as_deref(), Some("b a"));
        let argv = argv(&["lmove", "l", "d", "right", "left"]);
        let mut ctx = ExecCtx::new(8, 10, 0);
        lmove(&mut ks, &mut ctx, Args::new(&argv)).unwrap();
        lmove(&mut ks, &mut ctx, Args::new(&argv)).unwrap();
        assert_eq!(contents(&ks, "l"), None);
        assert_eq!(contents(&ks, "d").as_deref(), Some("b a"));
        let names: Vec<String> = ctx
            .events
            .iter()
            .filter_map(|e| match e {
                crate::keyspace::Event::Key { name, .. } => Some(name.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["lpush", "rpop", "lpush", "rpop", "del"]);
        assert_eq!(run(&mut ks, lmove, &["lmove", "l", "d", "LEFT", "UP"]), Reply::error("ERR syntax error"));
        assert_eq!(run(&mut ks, lmove, &["lmove", "l", "d", "LEFT", "LEFT"]), Reply::Nil);
    }

    #[test]
    fn lmpop_counts_and_hostile_numkeys() {
        let mut ks = Keyspace::new();
        run(&mut ks, rpush, &["rpush", "b", "1", "2", "3"]);
        let popped = run(&mut ks, lmpop, &["lmpop", "2", "a", "b", "RIGHT", "COUNT", "9223372036854775807"]);
        let expected = Reply::Array(vec![Reply::bulk("b"), Reply::Array(vec![Reply::bulk("3"), Reply::bulk("2"), Reply::bulk("1")])]);
        assert_eq!(popped, expected);
        assert_eq!(run(&mut ks, lmpop, &["lmpop", "1", "b", "LEFT"]), Reply::NilArray);
        assert_eq!(run(&mut ks, lmpop, &["lmpop", "9223372036854775807", "b", "LEFT"]), Reply::error("ERR syntax error"));
        assert_eq!(run(&mut ks, lmpop, &["lmpop", "0", "b", "LEFT"]), Reply::error("ERR numkeys should be greater than 0"));
        assert_eq!(run(&mut ks, lmpop, &["lmpop", "1", "b", "LEFT", "COUNT", "1", "COUNT", "1"]), Reply::error("ERR syntax error"));
        assert_eq!(run(&mut ks, lmpop, &["lmpop", "1", "b", "LEFT", "COUNT", "0"]), Reply::error("ERR count should be greater than 0"));
    }

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
