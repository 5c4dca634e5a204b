//! Typed access to hash, list, set and sorted-set values, with `WRONGTYPE` for a key
//! of another type and Redis's rule that an emptied container is deleted.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::keyspace::{Entry, ExecCtx, Glob, Keyspace, LogTime, Rng, Value};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

use super::keys::{matches_or_gives_up, scan_position};
use super::CmdError;

/// A container value type.
pub(super) trait Container: Sized {
    fn empty() -> Value;
    fn of(v: &Value) -> Option<&Self>;
    fn of_mut(v: &mut Value) -> Option<&mut Self>;
}

impl Container for BTreeMap<Bytes, Bytes> {
    fn empty() -> Value {
        Value::Hash(BTreeMap::new())
    }
    fn of(v: &Value) -> Option<&Self> {
        if let Value::Hash(h) = v { Some(h) } else { None }
    }
    fn of_mut(v: &mut Value) -> Option<&mut Self> {
        if let Value::Hash(h) = v { Some(h) } else { None }
    }
}

impl Container for VecDeque<Bytes> {
    fn empty() -> Value {
        Value::List(Box::default())
    }
    fn of(v: &Value) -> Option<&Self> {
        if let Value::List(l) = v { Some(l) } else { None }
    }
    fn of_mut(v: &mut Value) -> Option<&mut Self> {
        if let Value::List(l) = v { Some(l) } else { None }
    }
}

impl Container for BTreeMap<Bytes, f64> {
    fn empty() -> Value {
        Value::ZSet(BTreeMap::new())
    }
    fn of(v: &Value) -> Option<&Self> {
        if let Value::ZSet(z) = v { Some(z) } else { None }
    }
    fn of_mut(v: &mut Value) -> Option<&mut Self> {
        if let Value::ZSet(z) = v { Some(z) } else { None }
    }
}

impl Container for BTreeSet<Bytes> {
    fn empty() -> Value {
        Value::Set(BTreeSet::new())
    }
    fn of(v: &Value) -> Option<&Self> {
        if let Value::Set(s) = v { Some(s) } else { None }
    }
    fn of_mut(v: &mut Value) -> Option<&mut Self> {
        if let Value::Set(s) = v { Some(s) } else { None }
    }
}

/// The live container under `key` for reading.
pub(super) fn read<'a, T: Container>(ks: &'a Keyspace, now: LogTime, key: &[u8]) -> Result<Option<&'a T>, CmdError> {
    match ks.get(key, now) {
        None => Ok(None),
        Some(e) => T::of(&e.value).map(Some).ok_or(CmdError::WrongType),
    }
}

/// The live container under `key` for writing; created empty (with a new
/// version) when missing and `create` is set.
pub(super) fn write<'a, T: Container>(
    ks: &'a mut Keyspace,
    ctx: &mut ExecCtx,
    key: &Bytes,
    create: bool,
) -> Result<Option<&'a mut T>, CmdError> {
    if ks.get_mut(key, ctx).is_none() {
        if !create {
            return Ok(None);
        }
        ks.insert(key.clone(), Entry::new(T::empty(), ctx.version, ctx.log_time));
    }
    match ks.get_mut(key, ctx) {
        None => Ok(None),
        Some(e) => {
            if T::of(&e.value).is_none() {
                return Err(CmdError::WrongType);
            }
            // The caller is about to change the value in place.
            e.rewritten(ctx.version, ctx.log_time);
            T::of_mut(&mut e.value).map(Some).ok_or(CmdError::WrongType)
        }
    }
}

/// Checks the type of `key` without creating it.
pub(super) fn check<T: Container>(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes) -> Result<(), CmdError> {
    match ks.get_mut(key, ctx) {
        Some(e) if T::of(&e.value).is_none() => Err(CmdError::WrongType),
        _ => Ok(()),
    }
}

/// Deletes `key` if its container became empty, with the `del` event.
pub(super) fn drop_if_empty(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes) {
    if ks.get_mut(key, ctx).is_some_and(|e| e.value.is_empty_container()) {
        ks.remove(key);
        ctx.key_event('g', "del", key);
    }
}

/// Containers up to this size are scanned in one call (cursor 0 at once), as
/// Redis scans its small encodings (listpacks, intsets, small tables).
const SCAN_ALL_BELOW: usize = 128;

/// The count of `SRANDMEMBER`/`HRANDFIELD`/`ZRANDMEMBER key count`: Redis
/// refuses only the one value whose negation overflows.
pub(super) fn random_count(raw: &[u8]) -> Result<i64, CmdError> {
    match crate::protocol::parse_i64(raw) {
        None => Err(CmdError::Arg(ArgError::NotInteger)),
        Some(i64::MIN) => Err(CmdError::Other(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807".into(),
        )),
        Some(n) => Ok(n),
    }
}

/// The most items a random choice with repetition (a negative count) may
/// return: its reply must fit in memory (Redis would try to send it, an
/// item at a time).
const MAX_RANDOM_REPEATS: u64 = 10_000_000;

/// `n` distinct items chosen by `rng`, in random order: a partial
/// Fisher-Yates shuffle (all of them, in their order, if there are no more
/// than `n`).
pub(super) fn choose_distinct<T>(mut items: Vec<T>, n: u64, rng: &mut Rng) -> Vec<T> {
    if n >= items.len() as u64 {
        return items;
    }
    let n = n as usize;
    for i in 0..n {
        let j = i + rng.below(items.len() - i);
        items.swap(i, j);
    }
    items.truncate(n);
    items
}

/// The most bytes a reply of items drawn with repetition may repeat.
const MAX_RANDOM_REPLY_BYTES: u64 = 512 * 1024 * 1024;

/// Exactly `n` items drawn with repetition (a negative count), or an error
/// for a count no reply could hold: more than [`MAX_RANDOM_REPEATS`] reply
/// entries (`per_item` each), or more than 512 MiB if the largest item
/// (`size` bytes) were drawn every time. `what` names the items.
pub(super) fn choose_repeated<T: Clone>(
    items: &[T],
    n: u64,
    per_item: u64,
    size: impl Fn(&T) -> usize,
    rng: &mut Rng,
    what: &str,
) -> Result<Vec<T>, CmdError> {
    if n.saturating_mul(per_item) > MAX_RANDOM_REPEATS {
        let most = MAX_RANDOM_REPEATS / per_item;
        return Err(CmdError::Other(format!("ERR count is too large: at most {most} {what} with repetition")));
    }
    let largest = items.iter().map(&size).max().unwrap_or(0) as u64;
    if n.saturating_mul(largest) > MAX_RANDOM_REPLY_BYTES {
        return Err(CmdError::Other(format!(
            "ERR count is too large: the reply would repeat more than {MAX_RANDOM_REPLY_BYTES} bytes"
        )));
    }
    Ok((0..n).map(|_| items[rng.below(items.len())].clone()).collect())
}

/// A `SCAN`-family cursor as Redis reads it (C's `strtoul`): decimal digits
/// after an optional sign, a negative number wrapping around (`-1` is
/// 2^64 - 1), nothing else.
pub(super) fn parse_cursor(raw: &[u8]) -> Result<u64, CmdError> {
    let (negative, digits) = match raw.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, raw),
    };
    if digits.is_empty() && raw.is_empty() {
        return Ok(0);
    }
    let value: u64 = std::str::from_utf8(digits)
        .ok()
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse().ok())
        .ok_or(CmdError::InvalidCursor)?;
    Ok(if negative { value.wrapping_neg() } else { value })
}

/// The options of a `SCAN`-family command after its cursor: `MATCH
/// pattern`, `COUNT count` and, for `SCAN` itself, `TYPE type`.
pub(super) struct ScanOptions<'a> {
    pub glob: Option<Glob<'a>>,
    pub count: usize,
    pub type_name: Option<String>,
}

pub(super) fn scan_options<'a>(mut args: Args<'a>, with_type: bool) -> Result<ScanOptions<'a>, CmdError> {
    let mut options = ScanOptions { glob: None, count: 10, type_name: None };
    while args.remaining() > 0 {
        match args.next_keyword()?.as_str() {
            "MATCH" => options.glob = Some(Glob::new(args.next_bytes()?)),
            "COUNT" => {
                let n = args.next_i64()?;
                if n < 1 {
                    return Err(CmdError::Arg(ArgError::Syntax));
                }
                options.count = n.min(1 << 20) as usize;
            }
            "TYPE" if with_type => options.type_name = Some(args.next_keyword()?.to_ascii_lowercase()),
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    Ok(options)
}

impl ScanOptions<'_> {
    /// Whether `name` matches `MATCH` (all do without it).
    pub fn matches(&mut self, name: &[u8]) -> Result<bool, CmdError> {
        self.glob.as_mut().map_or(Ok(true), |g| matches_or_gives_up(g, name))
    }
}

/// One page of a scan: the items at or after `cursor`, in the order of a
/// fixed hash of their names (positions that stay put while others come and
/// go), about `count` of them, and the cursor that continues (0: the end).
/// Items sharing a position come together, so none is skipped.
pub(super) fn scan_page<T>(items: impl Iterator<Item = (u64, T)>, cursor: u64, count: usize) -> (Vec<T>, u64) {
    let mut candidates: Vec<(u64, T)> = items.filter(|(pos, _)| *pos >= cursor).collect();
    // Stable: items of one position keep the order they came in.
    candidates.sort_by_key(|(pos, _)| *pos);
    let mut end = count.min(candidates.len());
    while end < candidates.len() && end > 0 && candidates[end].0 == candidates[end - 1].0 {
        end += 1;
    }
    let next = candidates.get(end).map(|c| c.0).unwrap_or(0);
    candidates.truncate(end);
    (candidates.into_iter().map(|(_, item)| item).collect(), next)
}

/// `HSCAN`/`SSCAN`/`ZSCAN key cursor [MATCH pattern] [COUNT count]`: the
/// options after the cursor, for the container found under the key.
/// `items` are its members, each with the replies that follow it (a hash
/// field's value, a score as a string; none for a set).
/// `[next-cursor, [member, ...]]` (see [`scan_page`]); a small container is
/// returned whole whatever the cursor, as Redis returns its compact
/// encodings.
pub(super) fn scan_container<'a>(
    items: impl Iterator<Item = (&'a Bytes, Vec<Reply>)>,
    len: usize,
    cursor: u64,
    args: Args,
) -> Result<Reply, CmdError> {
    let mut options = scan_options(args, false)?;
    let (chosen, next) = if len <= SCAN_ALL_BELOW {
        (items.collect(), 0)
    } else {
        scan_page(items.map(|(m, rest)| (scan_position(m), (m, rest))), cursor, options.count)
    };
    let mut out = Vec::new();
    for (member, rest) in chosen {
        if options.matches(member)? {
            out.push(Reply::Bulk(member.clone()));
            out.extend(rest);
        }
    }
    Ok(Reply::Array(vec![Reply::text(&next.to_string()), Reply::Array(out)]))
}

/// The arguments LMPOP and ZMPOP share (and BLMPOP and BZMPOP after their
/// timeout): `numkeys key [key ...] end [COUNT count]`, checked in Redis's
/// order and with its errors; `end` reads the word where the end stands.
/// The keys, the end, and the count (1 if none is given).
pub(super) fn multi_pop_args<'a, E>(
    mut args: Args<'a>,
    end: impl FnOnce(&Bytes) -> Result<E, CmdError>,
) -> Result<(&'a [Bytes], E, u64), CmdError> {
    let numkeys = parse_i64(args.next_bytes()?)
        .filter(|n| *n > 0)
        .ok_or_else(|| CmdError::Other("ERR numkeys should be greater than 0".into()))?;
    let rest = args.rest();
    // The keys, then the end: a count the arguments cannot hold is a syntax
    // error.
    let numkeys = usize::try_from(numkeys).ok().filter(|n| *n < rest.len()).ok_or(CmdError::Arg(ArgError::Syntax))?;
    let (keys, rest) = rest.split_at(numkeys);
    let end = end(&rest[0])?;
    let mut count = None;
    let mut options = rest[1..].iter();
    while let Some(option) = options.next() {
        match (count, options.next()) {
            (None, Some(value)) if option.eq_ignore_ascii_case(b"count") => {
                let n = parse_i64(value)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| CmdError::Other("ERR count should be greater than 0".into()))?;
                count = Some(n as u64);
            }
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    Ok((keys, end, count.unwrap_or(1)))
}

/// The reply to a `SCAN`-family command on a missing key.
pub(super) fn empty_scan() -> Reply {
    Reply::Array(vec![Reply::text("0"), Reply::Array(vec![])])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_parse_as_strtoul() {
        assert_eq!(parse_cursor(b"0"), Ok(0));
        assert_eq!(parse_cursor(b"42"), Ok(42));
        assert_eq!(parse_cursor(b"+7"), Ok(7));
        assert_eq!(parse_cursor(b"-1"), Ok(u64::MAX));
        assert_eq!(parse_cursor(b""), Ok(0));
        for bad in [&b"abc"[..], b"1x", b" 1", b"-", b"18446744073709551616", b"1.5"] {
            assert_eq!(parse_cursor(bad), Err(CmdError::InvalidCursor), "{:?}", bad);
        }
    }

    #[test]
    fn a_large_container_is_scanned_whole_across_calls() {
        let members: Vec<Bytes> = (0..1000).map(|i| Bytes::from(format!("m{i}"))).collect();
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = 0u64;
        let mut calls = 0;
        loop {
            let argv = vec![Bytes::from_static(b"sscan"), Bytes::from_static(b"COUNT"), Bytes::from_static(b"33")];
            let reply = scan_container(members.iter().map(|m| (m, vec![])), members.len(), cursor, Args::new(&argv)).unwrap();
            let Reply::Array(parts) = reply else { panic!() };
            let [Reply::Bulk(next), Reply::Array(found)] = &parts[..] else { panic!("{parts:?}") };
            for f in found {
                let Reply::Bulk(m) = f else { panic!() };
                seen.insert(m.clone());
            }
            cursor = std::str::from_utf8(next).unwrap().parse().unwrap();
            calls += 1;
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(seen.len(), 1000);
        assert!(calls > 20, "COUNT 33 over 1000 members took {calls} calls");
    }
}
