//! Sorted-set commands: ZADD, ZINCRBY, ZSCORE, ZMSCORE, ZREM, ZCARD, ZRANK,
//! ZREVRANK, ZCOUNT, ZLEXCOUNT, the ZRANGE family (ZRANGE, ZREVRANGE,
//! ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZRANGESTORE),
//! ZREMRANGEBYRANK/SCORE/LEX, ZPOPMIN/ZPOPMAX and their blocking forms,
//! ZUNION/ZINTER/ZDIFF and their STORE forms, ZINTERCARD, ZRANDMEMBER, ZSCAN.
//!
//! A sorted set is `member -> score`; Redis's order is by score, then by
//! member bytes (scores compare as numbers, so `-0` and `0` tie). Replies,
//! errors and keyspace events are Redis 7.0's (`t_zset.c`), including how it
//! parses numbers (C's `strtod`) and what it does with odd ranges.
//!
//! The map is keyed by member, so commands that need the score order select
//! only what they return (O(n) plus sorting the selection) rather than
//! sorting the whole set; a lex range over equal scores (what BYLEX is for)
//! is a range query on the map.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use bytes::Bytes;

use crate::keyspace::{Entry, ExecCtx, Keyspace, LogTime, ReadCtx, Rng, Value};
use crate::protocol::{format_double, parse_i64, ArgError, Args, Reply};

use super::containers::{
    check, choose_distinct, choose_repeated, drop_if_empty, empty_scan, multi_pop_args, parse_cursor, random_count, read,
    scan_container, write,
};
use super::lists::{clamp_range, parse_block_timeout};
use super::{CmdError, CmdResult};

pub(super) type ZSet = BTreeMap<Bytes, f64>;

/// A member and its score, borrowed from a set.
type Item<'a> = (&'a Bytes, f64);

// ---------------------------------------------------------------------------
// Numbers as Redis reads them
// ---------------------------------------------------------------------------

/// C's `isspace`.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// C's `strtod` over all of `text`: the value, and whether it was out of
/// range (overflowed to infinity, or underflowed to zero: `ERANGE`). `None`
/// if `strtod` would stop before the end. As in C, leading white space is
/// skipped, `inf`/`infinity`/`nan` (any case) and hexadecimal (`0x1p3`) are
/// read, and an empty text is 0 (nothing converted, but nothing left over).
pub(super) fn strtod_all(text: &[u8]) -> Option<(f64, bool)> {
    if text.is_empty() {
        return Some((0.0, false));
    }
    let body = &text[text.iter().position(|b| !is_c_space(*b))?..];
    let (negative, unsigned) = match body.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, body),
    };
    let lower = unsigned.to_ascii_lowercase();
    let (magnitude, out_of_range) = if lower == b"inf" || lower == b"infinity" {
        (f64::INFINITY, false)
    } else if lower == b"nan"
        || (lower.starts_with(b"nan(")
            && lower.ends_with(b")")
            && lower[4..lower.len() - 1].iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_'))
    {
        (f64::NAN, false)
    } else if lower.starts_with(b"0x") {
        parse_hex_float(&lower[2..])?
    } else {
        parse_decimal_float(unsigned)?
    };
    Some((if negative { -magnitude } else { magnitude }, out_of_range))
}

/// A decimal float with nothing before or after it: `digits[.digits][e[+-]digits]`,
/// at least one mantissa digit.
fn parse_decimal_float(s: &[u8]) -> Option<(f64, bool)> {
    let mantissa_end = s.iter().position(|b| !(b.is_ascii_digit() || *b == b'.')).unwrap_or(s.len());
    let mantissa = &s[..mantissa_end];
    if mantissa.iter().filter(|b| **b == b'.').count() > 1 || !mantissa.iter().any(u8::is_ascii_digit) {
        return None;
    }
    if let Some(exponent) = s[mantissa_end..].strip_prefix(b"e").or_else(|| s[mantissa_end..].strip_prefix(b"E")) {
        let digits = exponent.strip_prefix(b"+").or_else(|| exponent.strip_prefix(b"-")).unwrap_or(exponent);
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
    } else if mantissa_end != s.len() {
        return None;
    }
    let v: f64 = std::str::from_utf8(s).ok()?.parse().ok()?;
    let nonzero = mantissa.iter().any(|b| (b'1'..=b'9').contains(b));
    Some((v, v.is_infinite() || (v == 0.0 && nonzero)))
}

/// A hexadecimal float after its `0x` (lower-cased): `hex[.hex][p[+-]digits]`.
fn parse_hex_float(s: &[u8]) -> Option<(f64, bool)> {
    // 60 bits of mantissa, then a sticky bit for whatever digits follow, so
    // that the conversion to 53 bits rounds as a full-precision one would.
    let (mut mantissa, mut exp2, mut sticky) = (0u64, 0i64, false);
    let (mut seen_point, mut any_digit, mut i) = (false, false, 0);
    while i < s.len() {
        match s[i] {
            b'.' if !seen_point => seen_point = true,
            c if c.is_ascii_hexdigit() => {
                any_digit = true;
                let d = (c as char).to_digit(16).unwrap_or(0) as u64;
                if mantissa < 1 << 56 {
                    mantissa = mantissa * 16 + d;
                    if seen_point {
                        exp2 -= 4;
                    }
                } else {
                    sticky |= d != 0;
                    if !seen_point {
                        exp2 += 4;
                    }
                }
            }
            _ => break,
        }
        i += 1;
    }
    if !any_digit {
        return None;
    }
    if i < s.len() {
        let exponent = s[i..].strip_prefix(b"p")?;
        let (sign, digits) = match exponent.split_first() {
            Some((b'-', rest)) => (-1, rest),
            Some((b'+', rest)) => (1, rest),
            _ => (1, exponent),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // Saturates well beyond any finite double's exponent.
        let e = digits.iter().fold(0i64, |e, d| (e * 10 + i64::from(d - b'0')).min(1 << 20));
        exp2 += sign * e;
    }
    let mut v = (mantissa | u64::from(sticky)) as f64;
    // Scaling by powers of two is exact until the result leaves the range.
    while exp2 > 1000 && v.is_finite() && v != 0.0 {
        v *= 2f64.powi(1000);
        exp2 -= 1000;
    }
    while exp2 < -1000 && v != 0.0 {
        v *= 2f64.powi(-1000);
        exp2 += 1000;
    }
    v *= 2f64.powi(exp2.clamp(-1100, 1100) as i32);
    Some((v, v.is_infinite() || (v == 0.0 && mantissa != 0)))
}

/// A float argument as Redis reads one (`string2d`: a score, an increment,
/// a weight): all of it, no leading space, not out of range, not NaN.
pub(super) fn parse_float(raw: &[u8]) -> Option<f64> {
    if raw.first().is_none_or(|b| is_c_space(*b)) {
        return None;
    }
    match strtod_all(raw)? {
        (v, false) if !v.is_nan() => Some(v),
        _ => None,
    }
}

fn parse_score(raw: &[u8]) -> Result<f64, CmdError> {
    parse_float(raw).ok_or_else(|| CmdError::Other("ERR value is not a valid float".into()))
}

/// A count that must not be negative (`ZPOPMIN key count`), with Redis's
/// `getPositiveLongFromObjectOrReply` error.
fn parse_positive(raw: &[u8], error: &str) -> Result<i64, CmdError> {
    parse_i64(raw).filter(|n| *n >= 0).ok_or_else(|| CmdError::Other(error.into()))
}

const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

// ---------------------------------------------------------------------------
// Order and ranges
// ---------------------------------------------------------------------------

/// Redis's order: by score (as numbers: `-0` ties with `0`), then by member.
fn by_score(a: &Item, b: &Item) -> Ordering {
    a.1.partial_cmp(&b.1).unwrap_or(Ordering::Equal).then_with(|| a.0.cmp(b.0))
}

fn by_score_desc(a: &Item, b: &Item) -> Ordering {
    by_score(b, a)
}

fn items(z: &ZSet) -> Vec<Item<'_>> {
    z.iter().map(|(m, s)| (m, *s)).collect()
}

/// A score as a set keeps it: `-0` becomes `0`, as in the compact encoding
/// Redis keeps every small set in (it stores an integral score as an
/// integer). A reply computed on the way (ZINCRBY's, ZUNION's) keeps `-0`.
fn stored(score: f64) -> f64 {
    if score == 0.0 { 0.0 } else { score }
}

/// Places `from..to` of `items` in `order`, sorted: O(n + m log m) for the
/// m chosen, instead of sorting everything.
fn window<'a>(mut items: Vec<Item<'a>>, from: usize, to: usize, order: fn(&Item, &Item) -> Ordering) -> Vec<Item<'a>> {
    let to = to.min(items.len());
    if from >= to {
        return Vec::new();
    }
    if to < items.len() {
        items.select_nth_unstable_by(to, order);
        items.truncate(to);
    }
    if from > 0 {
        items.select_nth_unstable_by(from, order);
        items.drain(..from);
    }
    items.sort_unstable_by(order);
    items
}

/// `min max` of a score range: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ScoreRange {
    min: f64,
    min_exclusive: bool,
    max: f64,
    max_exclusive: bool,
}

impl ScoreRange {
    /// As `zslParseRange`: C strings (an embedded NUL ends one), read with
    /// `strtod` (so leading spaces, hex, and out-of-range values that
    /// become infinite are accepted); only NaN is refused.
    fn parse(min: &[u8], max: &[u8]) -> Result<ScoreRange, CmdError> {
        fn bound(raw: &[u8]) -> Option<(f64, bool)> {
            let raw = &raw[..raw.iter().position(|b| *b == 0).unwrap_or(raw.len())];
            let (text, exclusive) = match raw.strip_prefix(b"(") {
                Some(rest) => (rest, true),
                None => (raw, false),
            };
            let (v, _) = strtod_all(text)?;
            (!v.is_nan()).then_some((v, exclusive))
        }
        match (bound(min), bound(max)) {
            (Some((min, min_exclusive)), Some((max, max_exclusive))) => {
                Ok(ScoreRange { min, min_exclusive, max, max_exclusive })
            }
            _ => Err(CmdError::Other("ERR min or max is not a float".into())),
        }
    }

    fn contains(&self, score: f64) -> bool {
        let above_min = if self.min_exclusive { score > self.min } else { score >= self.min };
        let below_max = if self.max_exclusive { score < self.max } else { score <= self.max };
        above_min && below_max
    }
}

/// One end of a lex range: `-`, `+`, `[member` (inclusive), `(member`.
#[derive(Debug, Clone, PartialEq)]
enum LexBound {
    /// `-`: below every member.
    Lowest,
    /// `+`: above every member.
    Highest,
    Inclusive(Bytes),
    Exclusive(Bytes),
}

impl LexBound {
    fn parse(raw: &Bytes) -> Option<LexBound> {
        // A C string: `+` followed by its terminating NUL.
        let alone = raw.get(1).is_none_or(|b| *b == 0);
        match raw.first()? {
            b'-' if alone => Some(LexBound::Lowest),
            b'+' if alone => Some(LexBound::Highest),
            b'[' => Some(LexBound::Inclusive(raw.slice(1..))),
            b'(' => Some(LexBound::Exclusive(raw.slice(1..))),
            _ => None,
        }
    }

    /// Redis's `sdscmplex`: `-` below every string, `+` above.
    fn cmp(&self, other: &LexBound) -> Ordering {
        use LexBound::*;
        match (self, other) {
            (Lowest, Lowest) | (Highest, Highest) => Ordering::Equal,
            (Lowest, _) | (_, Highest) => Ordering::Less,
            (_, Lowest) | (Highest, _) => Ordering::Greater,
            (Inclusive(a) | Exclusive(a), Inclusive(b) | Exclusive(b)) => a.cmp(b),
        }
    }

    fn exclusive(&self) -> bool {
        !matches!(self, LexBound::Inclusive(_))
    }
}

/// A range of members, as a map range query takes it.
type MemberBounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// `min max` of a lex range. Meant for a set whose scores are all equal,
/// where the score order is the member order.
#[derive(Debug, Clone, PartialEq)]
struct LexRange {
    min: LexBound,
    max: LexBound,
}

impl LexRange {
    fn parse(min: &Bytes, max: &Bytes) -> Result<LexRange, CmdError> {
        match (LexBound::parse(min), LexBound::parse(max)) {
            (Some(min), Some(max)) => Ok(LexRange { min, max }),
            _ => Err(CmdError::Other("ERR min or max not valid string range item".into())),
        }
    }

    fn is_empty(&self) -> bool {
        match self.min.cmp(&self.max) {
            Ordering::Greater => true,
            Ordering::Equal => self.min.exclusive() || self.max.exclusive(),
            Ordering::Less => false,
        }
    }

    fn above_min(&self, m: &[u8]) -> bool {
        match &self.min {
            LexBound::Lowest => true,
            LexBound::Highest => false,
            LexBound::Inclusive(s) => m >= &s[..],
            LexBound::Exclusive(s) => m > &s[..],
        }
    }

    fn below_max(&self, m: &[u8]) -> bool {
        match &self.max {
            LexBound::Lowest => false,
            LexBound::Highest => true,
            LexBound::Inclusive(s) => m <= &s[..],
            LexBound::Exclusive(s) => m < &s[..],
        }
    }

    /// The range as map bounds; `None` if it is empty (which a map range
    /// query would refuse with a panic).
    fn bounds(&self) -> Option<MemberBounds<'_>> {
        if self.is_empty() {
            return None;
        }
        let lower = match &self.min {
            LexBound::Lowest => Bound::Unbounded,
            LexBound::Highest => return None,
            LexBound::Inclusive(s) => Bound::Included(&s[..]),
            LexBound::Exclusive(s) => Bound::Excluded(&s[..]),
        };
        let upper = match &self.max {
            LexBound::Lowest => return None,
            LexBound::Highest => Bound::Unbounded,
            LexBound::Inclusive(s) => Bound::Included(&s[..]),
            LexBound::Exclusive(s) => Bound::Excluded(&s[..]),
        };
        Some((lower, upper))
    }
}

/// The members in `range`, lowest first (highest with `rev`). Over equal
/// scores this is a range query. Over mixed scores (which Redis leaves
/// undefined) it walks the score order as Redis walks a small set: from
/// the first member at or above `min` while members stay at or below `max`
/// (from the highest score, the other way round, with `rev`).
fn lex_walk<'a>(z: &'a ZSet, range: &LexRange, rev: bool) -> Box<dyn Iterator<Item = Item<'a>> + 'a> {
    let Some(bounds) = range.bounds() else { return Box::new(std::iter::empty()) };
    let mut scores = z.values();
    let first = scores.next().copied();
    if scores.all(|s| Some(*s) == first) {
        let found = z.range::<[u8], _>(bounds).map(|(m, s)| (m, *s));
        return if rev { Box::new(found.rev()) } else { Box::new(found) };
    }
    let mut all = items(z);
    all.sort_unstable_by(by_score);
    // Redis first checks that the ends of the set overlap the range.
    let overlaps = all.first().is_some_and(|(m, _)| range.below_max(m)) && all.last().is_some_and(|(m, _)| range.above_min(m));
    if !overlaps {
        return Box::new(std::iter::empty());
    }
    type Test = fn(&LexRange, &[u8]) -> bool;
    let (starts, stays): (Test, Test) = if rev {
        all.reverse();
        (LexRange::below_max, LexRange::above_min)
    } else {
        (LexRange::above_min, LexRange::below_max)
    };
    let found: Vec<Item> = all.into_iter().skip_while(|(m, _)| !starts(range, m)).take_while(|(m, _)| stays(range, m)).collect();
    Box::new(found.into_iter())
}

/// What a ZRANGE-family command selects.
#[derive(Debug, Clone, PartialEq)]
enum Bounds {
    /// `start stop` ranks (negative from the end).
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum RangeBy {
    Rank,
    Score,
    Lex,
}

/// A parsed ZRANGE-family request.
#[derive(Debug, Clone, PartialEq)]
struct RangeQuery {
    bounds: Bounds,
    rev: bool,
    with_scores: bool,
    /// `LIMIT offset count`: a negative offset selects nothing, a negative
    /// count means no limit.
    offset: i64,
    count: i64,
}

/// Parses `min max [BYSCORE | BYLEX] [REV] [WITHSCORES] [LIMIT offset count]`
/// as Redis's `zrangeGenericCommand`. `by` and `rev` are fixed by the older
/// commands (ZRANGEBYSCORE, ZREVRANGE, ...), which then refuse those words;
/// `store` (ZRANGESTORE) refuses WITHSCORES. Options are checked before the
/// range itself, and with REV a score or lex range is given `max min`.
fn parse_range(args: &[Bytes], by: Option<RangeBy>, rev: Option<bool>, store: bool) -> Result<RangeQuery, CmdError> {
    let [first, second, options @ ..] = args else { return Err(CmdError::Arg(ArgError::Syntax)) };
    let (mut by, mut rev) = (by, rev);
    let (mut with_scores, mut offset, mut count) = (false, 0, -1);
    let mut i = 0;
    while i < options.len() {
        let opt = &options[i];
        let left = options.len() - i - 1;
        if !store && opt.eq_ignore_ascii_case(b"withscores") {
            with_scores = true;
        } else if opt.eq_ignore_ascii_case(b"limit") && left >= 2 {
            offset = parse_i64(&options[i + 1]).ok_or(ArgError::NotInteger)?;
            count = parse_i64(&options[i + 2]).ok_or(ArgError::NotInteger)?;
            i += 2;
        } else if rev.is_none() && opt.eq_ignore_ascii_case(b"rev") {
            rev = Some(true);
        } else if by.is_none() && opt.eq_ignore_ascii_case(b"bylex") {
            by = Some(RangeBy::Lex);
        } else if by.is_none() && opt.eq_ignore_ascii_case(b"byscore") {
            by = Some(RangeBy::Score);
        } else {
            return Err(CmdError::Arg(ArgError::Syntax));
        }
        i += 1;
    }
    let (by, rev) = (by.unwrap_or(RangeBy::Rank), rev.unwrap_or(false));
    // As Redis, only a count other than -1 counts as a LIMIT here.
    if count != -1 && by == RangeBy::Rank {
        return Err(CmdError::Other(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX".into(),
        ));
    }
    if with_scores && by == RangeBy::Lex {
        return Err(CmdError::Other("ERR syntax error, WITHSCORES not supported in combination with BYLEX".into()));
    }
    let (min, max) = if rev && by != RangeBy::Rank { (second, first) } else { (first, second) };
    let bounds = match by {
        RangeBy::Rank => Bounds::Rank(
            parse_i64(min).ok_or(ArgError::NotInteger)?,
            parse_i64(max).ok_or(ArgError::NotInteger)?,
        ),
        RangeBy::Score => Bounds::Score(ScoreRange::parse(min, max)?),
        RangeBy::Lex => Bounds::Lex(LexRange::parse(min, max)?),
    };
    Ok(RangeQuery { bounds, rev, with_scores, offset, count })
}

/// Applies `LIMIT offset count` as Redis walks it: a negative offset walks
/// off the end (nothing), a negative count has no end.
fn limited<'a>(found: impl Iterator<Item = Item<'a>>, offset: i64, count: i64) -> Vec<Item<'a>> {
    if offset < 0 {
        return Vec::new();
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    found.skip(usize::try_from(offset).unwrap_or(usize::MAX)).take(count).collect()
}

/// The members `q` selects from `z`, in reply order.
fn select<'a>(z: &'a ZSet, q: &RangeQuery) -> Vec<Item<'a>> {
    let order = if q.rev { by_score_desc } else { by_score };
    match &q.bounds {
        Bounds::Rank(start, stop) => {
            let (from, to) = clamp_range(*start, *stop, z.len());
            window(items(z), from, to, order)
        }
        Bounds::Score(range) => {
            if q.offset < 0 || q.count == 0 {
                return Vec::new();
            }
            let matching: Vec<Item> = z.iter().filter(|(_, s)| range.contains(**s)).map(|(m, s)| (m, *s)).collect();
            let from = usize::try_from(q.offset).unwrap_or(usize::MAX);
            let to = usize::try_from(q.count).map_or(usize::MAX, |c| from.saturating_add(c));
            window(matching, from, to, order)
        }
        Bounds::Lex(range) => limited(lex_walk(z, range, q.rev), q.offset, q.count),
    }
}

/// Members, with their scores if asked (RESP3: `[member, score]` pairs).
fn items_reply(found: Vec<Item>, with_scores: bool) -> Reply {
    if with_scores {
        Reply::ScorePairs(found.into_iter().map(|(m, s)| (m.clone(), s)).collect())
    } else {
        Reply::Array(found.into_iter().map(|(m, _)| Reply::Bulk(m.clone())).collect())
    }
}

/// Replaces `dst` (whatever it held) with `result` and replies its size; an
/// empty result deletes `dst` instead (with a `del` event if it existed).
pub(super) fn store(ks: &mut Keyspace, ctx: &mut ExecCtx, dst: &Bytes, mut result: ZSet, event: &'static str) -> CmdResult {
    result.values_mut().for_each(|s| *s = stored(*s));
    let size = result.len() as i64;
    // Looked up first so that an expired destination is expired (with its
    // event) before it is replaced, as Redis does.
    let existed = ks.get_mut(dst, ctx).is_some();
    if size == 0 {
        if existed {
            ks.remove(dst);
            ctx.key_event('g', "del", dst);
        }
    } else {
        ks.insert(dst.clone(), Entry::new(Value::ZSet(result), ctx.version, ctx.log_time));
        ctx.key_event('z', event, dst);
    }
    Ok(Reply::Int(size))
}

/// Removes `members` from the set under `key` (which holds them all), with
/// `event` and, if that empties it, the key's deletion.
fn remove_members(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes, members: &[Bytes], event: &'static str) -> CmdResult {
    if members.is_empty() {
        return Ok(Reply::Int(0));
    }
    let z = write::<ZSet>(ks, ctx, key, false)?.ok_or(CmdError::WrongType)?;
    for m in members {
        z.remove(m);
    }
    ctx.key_event('z', event, key);
    drop_if_empty(ks, ctx, key);
    Ok(Reply::Int(members.len() as i64))
}

fn owned(found: Vec<Item>) -> Vec<(Bytes, f64)> {
    found.into_iter().map(|(m, s)| (m.clone(), s)).collect()
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

/// ```text
/// ZADD key [NX | XX] [GT | LT] [CH] [INCR] score member [score member ...]
/// ```
/// The number of members added (or changed, with `CH`); with `INCR`, the new
/// score, or nil if a condition prevented the update.
pub fn zadd(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) = (false, false, false, false, false, false);
    while let Some(opt) = args.peek() {
        match String::from_utf8_lossy(opt).to_ascii_uppercase().as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            "CH" => ch = true,
            "INCR" => incr = true,
            _ => break,
        }
        args.next_bytes()?;
    }
    let rest = args.rest();
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(CmdError::Arg(ArgError::Syntax));
    }
    if nx && xx {
        return Err(CmdError::Other("ERR XX and NX options at the same time are not compatible".into()));
    }
    if (gt && lt) || (nx && (gt || lt)) {
        return Err(CmdError::Other("ERR GT, LT, and/or NX options at the same time are not compatible".into()));
    }
    if incr && rest.len() != 2 {
        return Err(CmdError::Other("ERR INCR option supports a single increment-element pair".into()));
    }
    let pairs: Vec<(f64, Bytes)> =
        rest.chunks(2).map(|p| Ok((parse_score(&p[0])?, p[1].clone()))).collect::<Result<_, CmdError>>()?;
    check::<ZSet>(ks, ctx, &key)?;
    if xx && read::<ZSet>(ks, ctx.log_time, &key)?.is_none() {
        return Ok(if incr { Reply::Nil } else { Reply::Int(0) });
    }
    let z = write::<ZSet>(ks, ctx, &key, true)?.ok_or(CmdError::WrongType)?;
    let (mut added, mut changed) = (0, 0);
    let mut incr_result = None;
    for (score, member) in pairs {
        let current = z.get(&member).copied();
        if (nx && current.is_some()) || (xx && current.is_none()) {
            continue;
        }
        let new = if incr { current.unwrap_or(0.0) + score } else { score };
        if new.is_nan() {
            return Err(CmdError::Other("ERR resulting score is not a number (NaN)".into()));
        }
        if let Some(cur) = current {
            if (gt && new <= cur) || (lt && new >= cur) {
                continue;
            }
            if new != cur {
                changed += 1;
            }
        } else {
            added += 1;
        }
        z.insert(member, stored(new));
        incr_result = Some(new);
    }
    if added + changed > 0 {
        ctx.key_event('z', if incr { "zincr" } else { "zadd" }, &key);
    }
    drop_if_empty(ks, ctx, &key);
    Ok(match (incr, incr_result) {
        (true, Some(v)) => Reply::Double(v),
        (true, None) => Reply::Nil,
        _ => Reply::Int(if ch { added + changed } else { added }),
    })
}

/// ```text
/// ZINCRBY key increment member
/// ```
/// The member's new score.
pub fn zincrby(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let by = parse_score(args.next_bytes()?)?;
    let member = args.next_bytes()?.clone();
    let z = write::<ZSet>(ks, ctx, &key, true)?.ok_or(CmdError::WrongType)?;
    let new = z.get(&member).copied().unwrap_or(0.0) + by;
    if new.is_nan() {
        return Err(CmdError::Other("ERR resulting score is not a number (NaN)".into()));
    }
    z.insert(member, stored(new));
    ctx.key_event('z', "zincr", &key);
    Ok(Reply::Double(new))
}

/// ```text
/// ZSCORE key member
/// ```
pub fn zscore(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let member = args.next_bytes()?;
    let score = read::<ZSet>(ks, ctx.now, key)?.and_then(|z| z.get(member).copied());
    Ok(score.map(Reply::Double).unwrap_or(Reply::Nil))
}

/// ```text
/// ZMSCORE key member [member ...]
/// ```
/// Each member's score, nil for a missing one (or a missing key).
pub fn zmscore(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let z = read::<ZSet>(ks, ctx.now, key)?;
    let scores = args.rest().iter().map(|m| z.and_then(|z| z.get(m)).map_or(Reply::Nil, |s| Reply::Double(*s)));
    Ok(Reply::Array(scores.collect()))
}

/// ```text
/// ZREM key member [member ...]
/// ```
pub fn zrem(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let members = args.rest();
    let Some(z) = write::<ZSet>(ks, ctx, &key, false)? else { return Ok(Reply::Int(0)) };
    let removed = members.iter().filter(|m| z.remove(*m).is_some()).count();
    if removed > 0 {
        ctx.key_event('z', "zrem", &key);
        drop_if_empty(ks, ctx, &key);
    }
    Ok(Reply::Int(removed as i64))
}

/// ```text
/// ZCARD key
/// ```
pub fn zcard(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(Reply::Int(read::<ZSet>(ks, ctx.now, key)?.map(|z| z.len()).unwrap_or(0) as i64))
}

/// `ZRANK`/`ZREVRANK key member [WITHSCORE]`: the rank, or with
/// `WITHSCORE` (Redis 7.2) the rank and the score; nil (a nil array with
/// `WITHSCORE`) for a missing key or member.
fn rank(ks: &Keyspace, ctx: &ReadCtx, mut args: Args, rev: bool) -> CmdResult {
    let key = args.next_bytes()?;
    let member = args.next_bytes()?;
    let with_score = match args.remaining() {
        0 => false,
        1 if args.next_bytes()?.eq_ignore_ascii_case(b"withscore") => true,
        1 => return Err(CmdError::Arg(ArgError::Syntax)),
        _ => return Err(CmdError::Arity(if rev { "zrevrank" } else { "zrank" })),
    };
    let missing = if with_score { Reply::NilArray } else { Reply::Nil };
    let Some(z) = read::<ZSet>(ks, ctx.now, key)? else { return Ok(missing) };
    let Some(score) = z.get(member).copied() else { return Ok(missing) };
    let below = z.iter().filter(|(m, s)| by_score(&(*m, **s), &(member, score)) == Ordering::Less).count();
    let rank = Reply::Int(if rev { z.len() - 1 - below } else { below } as i64);
    Ok(if with_score { Reply::Array(vec![rank, Reply::Double(score)]) } else { rank })
}

/// ```text
/// ZRANK key member [WITHSCORE]
/// ```
/// The member's rank (0 for the lowest score), or nil.
pub fn zrank(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    rank(ks, ctx, args, false)
}

/// ```text
/// ZREVRANK key member [WITHSCORE]
/// ```
/// The member's rank from the highest score (0), or nil.
pub fn zrevrank(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    rank(ks, ctx, args, true)
}

/// ```text
/// ZCOUNT key min max
/// ```
/// How many members have a score in the range (`(` before a bound excludes it).
pub fn zcount(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let range = ScoreRange::parse(args.next_bytes()?, args.next_bytes()?)?;
    let Some(z) = read::<ZSet>(ks, ctx.now, key)? else { return Ok(Reply::Int(0)) };
    Ok(Reply::Int(z.values().filter(|s| range.contains(**s)).count() as i64))
}

/// ```text
/// ZLEXCOUNT key min max
/// ```
/// How many members are in the lex range (`-`, `+`, `[member`, `(member`).
pub fn zlexcount(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let range = LexRange::parse(args.next_bytes()?, args.next_bytes()?)?;
    let Some(z) = read::<ZSet>(ks, ctx.now, key)? else { return Ok(Reply::Int(0)) };
    Ok(Reply::Int(lex_walk(z, &range, false).count() as i64))
}

fn range_command(ks: &Keyspace, ctx: &ReadCtx, mut args: Args, by: Option<RangeBy>, rev: Option<bool>) -> CmdResult {
    let key = args.next_bytes()?;
    let q = parse_range(args.rest(), by, rev, false)?;
    let Some(z) = read::<ZSet>(ks, ctx.now, key)? else { return Ok(Reply::Array(vec![])) };
    Ok(items_reply(select(z, &q), q.with_scores))
}

/// ```text
/// ZRANGE key start stop [BYSCORE | BYLEX] [REV] [LIMIT offset count] [WITHSCORES]
/// ```
/// Members by rank (by score with `BYSCORE`, by member with `BYLEX`), lowest
/// first (highest with `REV`, which then takes `max min`), with their scores
/// if asked.
pub fn zrange(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    range_command(ks, ctx, args, None, None)
}

/// ```text
/// ZREVRANGE key start stop [WITHSCORES]
/// ```
/// Members by rank from the highest score.
pub fn zrevrange(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    range_command(ks, ctx, args, Some(RangeBy::Rank), Some(true))
}

/// ```text
/// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]
/// ```
/// Members with a score in the range, lowest first.
pub fn zrangebyscore(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    range_command(ks, ctx, args, Some(RangeBy::Score), Some(false))
}

/// ```text
/// ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]
/// ```
/// Members with a score in the range, highest first.
pub fn zrevrangebyscore(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    range_command(ks, ctx, args, Some(RangeBy::Score), Some(true))
}

/// ```text
/// ZRANGEBYLEX key min max [LIMIT offset count]
/// ```
/// Members in the lex range (for a set whose scores are all equal), lowest first.
pub fn zrangebylex(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    range_command(ks, ctx, args, Some(RangeBy::Lex), Some(false))
}

/// ```text
/// ZREVRANGEBYLEX key max min [LIMIT offset count]
/// ```
pub fn zrevrangebylex(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    range_command(ks, ctx, args, Some(RangeBy::Lex), Some(true))
}

/// ```text
/// ZRANGESTORE dst src min max [BYSCORE | BYLEX] [REV] [LIMIT offset count]
/// ```
/// Stores what `ZRANGE src ...` selects (with scores) in `dst`, replacing
/// it; the number stored (an empty selection deletes `dst`).
pub fn zrangestore(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let dst = args.next_bytes()?.clone();
    let src = args.next_bytes()?;
    let q = parse_range(args.rest(), None, None, true)?;
    let result: ZSet = match read::<ZSet>(ks, ctx.log_time, src)? {
        Some(z) => select(z, &q).into_iter().map(|(m, s)| (m.clone(), s)).collect(),
        None => ZSet::new(),
    };
    store(ks, ctx, &dst, result, "zrangestore")
}

/// ```text
/// ZREMRANGEBYRANK key start stop
/// ```
/// Removes the members ranked `start` to `stop`; how many.
pub fn zremrangebyrank(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let (start, stop) = (args.next_i64()?, args.next_i64()?);
    let Some(z) = read::<ZSet>(ks, ctx.log_time, &key)? else { return Ok(Reply::Int(0)) };
    let (from, to) = clamp_range(start, stop, z.len());
    let gone: Vec<Bytes> = window(items(z), from, to, by_score).into_iter().map(|(m, _)| m.clone()).collect();
    remove_members(ks, ctx, &key, &gone, "zremrangebyrank")
}

/// ```text
/// ZREMRANGEBYSCORE key min max
/// ```
/// Removes the members with a score in the range; how many.
pub fn zremrangebyscore(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let range = ScoreRange::parse(args.next_bytes()?, args.next_bytes()?)?;
    let Some(z) = read::<ZSet>(ks, ctx.log_time, &key)? else { return Ok(Reply::Int(0)) };
    let gone: Vec<Bytes> = z.iter().filter(|(_, s)| range.contains(**s)).map(|(m, _)| m.clone()).collect();
    remove_members(ks, ctx, &key, &gone, "zremrangebyscore")
}

/// ```text
/// ZREMRANGEBYLEX key min max
/// ```
/// Removes the members in the lex range; how many.
pub fn zremrangebylex(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let range = LexRange::parse(args.next_bytes()?, args.next_bytes()?)?;
    let Some(z) = read::<ZSet>(ks, ctx.log_time, &key)? else { return Ok(Reply::Int(0)) };
    let gone: Vec<Bytes> = lex_walk(z, &range, false).map(|(m, _)| m.clone()).collect();
    remove_members(ks, ctx, &key, &gone, "zremrangebylex")
}

/// Removes up to `n` members from the low (or `max`: high) end of the set
/// under `key`; they are returned in that order.
fn pop_ends(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes, n: usize, max: bool) -> Result<Vec<(Bytes, f64)>, CmdError> {
    let Some(z) = read::<ZSet>(ks, ctx.log_time, key)? else { return Ok(Vec::new()) };
    let popped = owned(window(items(z), 0, n, if max { by_score_desc } else { by_score }));
    if !popped.is_empty() {
        let members: Vec<Bytes> = popped.iter().map(|(m, _)| m.clone()).collect();
        remove_members(ks, ctx, key, &members, if max { "zpopmax" } else { "zpopmin" })?;
    }
    Ok(popped)
}

fn pop(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args, max: bool) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let count = match args.rest() {
        [] => None,
        [count] => Some(parse_positive(count, MUST_BE_POSITIVE)?),
        _ => return Err(CmdError::Arg(ArgError::Syntax)),
    };
    if read::<ZSet>(ks, ctx.log_time, &key)?.is_none() || count == Some(0) {
        return Ok(Reply::Array(vec![]));
    }
    let n = count.map_or(1, |c| usize::try_from(c).unwrap_or(usize::MAX));
    let popped = pop_ends(ks, ctx, &key, n, max)?;
    Ok(match count {
        // One pop is a flat `[member, score]` in RESP3 too.
        None => Reply::Array(popped.into_iter().flat_map(|(m, s)| [Reply::Bulk(m), Reply::Double(s)]).collect()),
        Some(_) => Reply::ScorePairs(popped),
    })
}

/// ```text
/// ZPOPMIN key [count]
/// ```
/// Removes and returns the member with the lowest score (or up to `count`
/// of them, lowest first) with its score; empty for a missing key.
pub fn zpopmin(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    pop(ks, ctx, args, false)
}

/// ```text
/// ZPOPMAX key [count]
/// ```
/// As ZPOPMIN, from the highest score.
pub fn zpopmax(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    pop(ks, ctx, args, true)
}

fn blocking_pop(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args, max: bool) -> CmdResult {
    let Some((timeout, keys)) = args.rest().split_last() else { return Err(CmdError::Arg(ArgError::Syntax)) };
    parse_block_timeout(timeout)?;
    for key in keys {
        if let Some((member, score)) = pop_ends(ks, ctx, key, 1, max)?.pop() {
            return Ok(Reply::Array(vec![Reply::Bulk(key.clone()), Reply::Bulk(member), Reply::Double(score)]));
        }
    }
    Ok(Reply::NilArray)
}

/// ZMPOP and BZMPOP (after its timeout): `numkeys key [key ...] MIN|MAX
/// [COUNT count]`, checked as Redis checks them.
fn multi_pop(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args, timeout: Option<&Bytes>) -> CmdResult {
    let (keys, max, count) = multi_pop_args(args, |word| match word {
        w if w.eq_ignore_ascii_case(b"min") => Ok(false),
        w if w.eq_ignore_ascii_case(b"max") => Ok(true),
        _ => Err(CmdError::Arg(ArgError::Syntax)),
    })?;
    if let Some(timeout) = timeout {
        parse_block_timeout(timeout)?;
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    for key in keys {
        let popped = pop_ends(ks, ctx, key, count, max)?;
        if !popped.is_empty() {
            // `[member, score]` pairs, in RESP2 as in RESP3.
            let pairs = popped.into_iter().map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)]));
            return Ok(Reply::Array(vec![Reply::Bulk(key.clone()), Reply::Array(pairs.collect())]));
        }
    }
    Ok(Reply::NilArray)
}

/// ```text
/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]
/// ```
/// Pops up to `count` (1) of the lowest (`MIN`) or highest (`MAX`) scored
/// members of the first of the sorted sets that exists: `[key, [[member,
/// score], ...]]`, or a null array.
pub fn zmpop(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    multi_pop(ks, ctx, args, None)
}

/// ```text
/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]
/// ```
/// ZMPOP that waits for an add to one of the sets. One attempt, as
/// BZPOPMIN: a null array while every set is missing.
pub fn bzmpop(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let timeout = args.next_bytes()?;
    multi_pop(ks, ctx, args, Some(timeout))
}

/// ```text
/// BZPOPMIN key [key ...] timeout
/// ```
/// `[key, member, score]`: the lowest-scored member of the first non-empty
/// set, removed. This is one attempt, as applied from the log (nil array if
/// every set is empty); a client connection waits for the keys to change
/// and tries again until `timeout` seconds pass (0: forever).
pub fn bzpopmin(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    blocking_pop(ks, ctx, args, false)
}

/// ```text
/// BZPOPMAX key [key ...] timeout
/// ```
/// As BZPOPMIN, from the highest score.
pub fn bzpopmax(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    blocking_pop(ks, ctx, args, true)
}

// ---------------------------------------------------------------------------
// Union, intersection, difference
// ---------------------------------------------------------------------------

/// An input of ZUNION/ZINTER/ZDIFF: a plain set counts as a sorted set
/// whose scores are all 1.
#[derive(Clone, Copy)]
enum Source<'a> {
    Missing,
    Sorted(&'a ZSet),
    Plain(&'a BTreeSet<Bytes>),
}

impl<'a> Source<'a> {
    fn of(ks: &'a Keyspace, now: LogTime, key: &[u8]) -> Result<Source<'a>, CmdError> {
        match ks.get(key, now).map(|e| &e.value) {
            None => Ok(Source::Missing),
            Some(Value::ZSet(z)) => Ok(Source::Sorted(z)),
            Some(Value::Set(s)) => Ok(Source::Plain(s)),
            Some(_) => Err(CmdError::WrongType),
        }
    }

    fn len(&self) -> usize {
        match self {
            Source::Missing => 0,
            Source::Sorted(z) => z.len(),
            Source::Plain(s) => s.len(),
        }
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            Source::Missing => None,
            Source::Sorted(z) => z.get(member).copied(),
            Source::Plain(s) => s.contains(member).then_some(1.0),
        }
    }

    fn members(&self) -> Box<dyn Iterator<Item = Item<'a>> + 'a> {
        match *self {
            Source::Missing => Box::new(std::iter::empty()),
            Source::Sorted(z) => Box::new(z.iter().map(|(m, s)| (m, *s))),
            Source::Plain(s) => Box::new(s.iter().map(|m| (m, 1.0))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// Redis's `zunionInterAggregate`: a sum of `inf` and `-inf` is 0, and
    /// MIN/MAX keep the current score when the new one is NaN.
    fn fold(self, current: &mut f64, value: f64) {
        match self {
            Aggregate::Sum => {
                *current += value;
                if current.is_nan() {
                    *current = 0.0;
                }
            }
            Aggregate::Min if value < *current => *current = value,
            Aggregate::Max if value > *current => *current = value,
            Aggregate::Min | Aggregate::Max => {}
        }
    }
}

/// A parsed ZUNION/ZINTER/ZDIFF (or STORE, or ZINTERCARD) request.
struct SetOpQuery<'a> {
    /// The inputs with their weights (1 unless WEIGHTS).
    sources: Vec<(Source<'a>, f64)>,
    aggregate: Aggregate,
    with_scores: bool,
    /// ZINTERCARD's LIMIT (0: none).
    limit: usize,
}

/// Parses `numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX]
/// [WITHSCORES]` (or ZINTERCARD's `[LIMIT n]`) as Redis's
/// `zunionInterDiffGenericCommand`: the keys' types are checked before the
/// options are read. `name` is the command's, for the error.
fn parse_set_op<'a>(
    ks: &'a Keyspace,
    now: LogTime,
    name: &str,
    args: &[Bytes],
    op: SetOp,
    store: bool,
    card_only: bool,
) -> Result<SetOpQuery<'a>, CmdError> {
    let (numkeys, rest) = args.split_first().ok_or(ArgError::Syntax)?;
    let n = parse_i64(numkeys).ok_or(ArgError::NotInteger)?;
    if n < 1 {
        return Err(CmdError::Other(format!("ERR at least 1 input key is needed for '{name}' command")));
    }
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    if n > rest.len() {
        return Err(CmdError::Arg(ArgError::Syntax));
    }
    let (keys, mut options) = rest.split_at(n);
    let mut sources: Vec<(Source, f64)> =
        keys.iter().map(|k| Ok((Source::of(ks, now, k)?, 1.0))).collect::<Result<_, CmdError>>()?;
    let (mut aggregate, mut with_scores, mut limit) = (Aggregate::Sum, false, 0);
    let weighted = op != SetOp::Diff && !card_only;
    while let Some(opt) = options.first() {
        if weighted && options.len() > n && opt.eq_ignore_ascii_case(b"weights") {
            for (source, raw) in sources.iter_mut().zip(&options[1..=n]) {
                source.1 = parse_float(raw).ok_or_else(|| CmdError::Other("ERR weight value is not a float".into()))?;
            }
            options = &options[n + 1..];
        } else if weighted && options.len() >= 2 && opt.eq_ignore_ascii_case(b"aggregate") {
            let how = &options[1];
            aggregate = if how.eq_ignore_ascii_case(b"sum") {
                Aggregate::Sum
            } else if how.eq_ignore_ascii_case(b"min") {
                Aggregate::Min
            } else if how.eq_ignore_ascii_case(b"max") {
                Aggregate::Max
            } else {
                return Err(CmdError::Arg(ArgError::Syntax));
            };
            options = &options[2..];
        } else if !store && !card_only && opt.eq_ignore_ascii_case(b"withscores") {
            with_scores = true;
            options = &options[1..];
        } else if card_only && options.len() >= 2 && opt.eq_ignore_ascii_case(b"limit") {
            let l = parse_positive(&options[1], "ERR LIMIT can't be negative")?;
            limit = usize::try_from(l).unwrap_or(usize::MAX);
            options = &options[2..];
        } else {
            return Err(CmdError::Arg(ArgError::Syntax));
        }
    }
    if op != SetOp::Diff {
        // As Redis: smallest input first (stable, so equal sizes keep their
        // order), which decides the order scores are aggregated in.
        sources.sort_by_key(|(s, _)| s.len());
    }
    Ok(SetOpQuery { sources, aggregate, with_scores, limit })
}

/// A weighted score; NaN (`0 * inf`) counts as 0, as Redis has it.
fn weighted(score: f64, weight: f64) -> f64 {
    let v = score * weight;
    if v.is_nan() { 0.0 } else { v }
}

/// The members of every input with their aggregated scores, stopping after
/// `limit` (0: all). Walks the smallest input, looking each member up in
/// the others.
fn intersection<'a>(q: &SetOpQuery<'a>, limit: usize) -> Vec<(&'a Bytes, f64)> {
    let Some(((first, first_weight), others)) = q.sources.split_first() else { return Vec::new() };
    let mut out = Vec::new();
    'members: for (member, score) in first.members() {
        let mut total = weighted(score, *first_weight);
        for (source, weight) in others {
            let Some(s) = source.score(member) else { continue 'members };
            // Not `weighted`: Redis folds a NaN product in as it is here.
            q.aggregate.fold(&mut total, s * weight);
        }
        out.push((member, total));
        if limit > 0 && out.len() >= limit {
            break;
        }
    }
    out
}

fn combine(q: &SetOpQuery, op: SetOp) -> ZSet {
    match op {
        SetOp::Inter => intersection(q, 0).into_iter().map(|(m, s)| (m.clone(), s)).collect(),
        SetOp::Union => {
            let mut out = ZSet::new();
            for (source, weight) in &q.sources {
                for (member, score) in source.members() {
                    let value = weighted(score, *weight);
                    match out.get_mut(member) {
                        Some(total) => q.aggregate.fold(total, value),
                        None => {
                            out.insert(member.clone(), value);
                        }
                    }
                }
            }
            out
        }
        SetOp::Diff => {
            let Some(((first, _), others)) = q.sources.split_first() else { return ZSet::new() };
            first
                .members()
                .filter(|(m, _)| others.iter().all(|(s, _)| s.score(m).is_none()))
                .map(|(m, s)| (m.clone(), s))
                .collect()
        }
    }
}

fn set_op(ks: &Keyspace, ctx: &ReadCtx, mut args: Args, op: SetOp, name: &str) -> CmdResult {
    let q = parse_set_op(ks, ctx.now, name, args.rest(), op, false, false)?;
    let result = combine(&q, op);
    let mut found = items(&result);
    found.sort_unstable_by(by_score);
    Ok(items_reply(found, q.with_scores))
}

fn set_op_store(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args, op: SetOp, name: &'static str) -> CmdResult {
    let dst = args.next_bytes()?.clone();
    let result = combine(&parse_set_op(ks, ctx.log_time, name, args.rest(), op, true, false)?, op);
    store(ks, ctx, &dst, result, name)
}

/// ```text
/// ZUNION numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM | MIN | MAX] [WITHSCORES]
/// ```
/// The members of any input (a plain set's scores are 1), each scored by
/// aggregating its weighted scores (a sum by default), lowest first.
pub fn zunion(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    set_op(ks, ctx, args, SetOp::Union, "zunion")
}

/// ```text
/// ZINTER numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM | MIN | MAX] [WITHSCORES]
/// ```
/// The members of every input, scored as in ZUNION.
pub fn zinter(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    set_op(ks, ctx, args, SetOp::Inter, "zinter")
}

/// ```text
/// ZDIFF numkeys key [key ...] [WITHSCORES]
/// ```
/// The members of the first input in none of the others, with its scores.
pub fn zdiff(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    set_op(ks, ctx, args, SetOp::Diff, "zdiff")
}

/// ```text
/// ZUNIONSTORE destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM | MIN | MAX]
/// ```
/// Stores the union in `destination` (replacing it; deleted if the union
/// is empty); its size.
pub fn zunionstore(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    set_op_store(ks, ctx, args, SetOp::Union, "zunionstore")
}

/// ```text
/// ZINTERSTORE destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM | MIN | MAX]
/// ```
/// Stores the intersection, as ZUNIONSTORE.
pub fn zinterstore(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    set_op_store(ks, ctx, args, SetOp::Inter, "zinterstore")
}

/// ```text
/// ZDIFFSTORE destination numkeys key [key ...]
/// ```
/// Stores the difference, as ZUNIONSTORE.
pub fn zdiffstore(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    set_op_store(ks, ctx, args, SetOp::Diff, "zdiffstore")
}

/// ```text
/// ZINTERCARD numkeys key [key ...] [LIMIT limit]
/// ```
/// The size of the intersection, counting at most `limit` (0: no limit).
pub fn zintercard(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let q = parse_set_op(ks, ctx.now, "zintercard", args.rest(), SetOp::Inter, false, true)?;
    Ok(Reply::Int(intersection(&q, q.limit).len() as i64))
}

// ---------------------------------------------------------------------------
// Random members, scanning
// ---------------------------------------------------------------------------

/// ```text
/// ZRANDMEMBER key [count [WITHSCORES]]
/// ```
/// Without `count`: a member chosen at random, or nil. A positive `count`:
/// that many distinct members (the whole set, highest score first, if it
/// is smaller).
/// A negative one: exactly `-count` members, repeats allowed. The choice is
/// the same on every node that runs it in the same log entry.
pub fn zrandmember(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let mut rng = Rng::new(ctx.seed);
    let Some(raw) = args.peek() else {
        let z = read::<ZSet>(ks, ctx.now, key)?;
        let chosen = z.filter(|z| !z.is_empty()).and_then(|z| z.keys().nth(rng.below(z.len())));
        return Ok(chosen.map_or(Reply::Nil, |m| Reply::Bulk(m.clone())));
    };
    let count = random_count(raw)?;
    let with_scores = match &args.rest()[1..] {
        [] => false,
        [w] if w.eq_ignore_ascii_case(b"withscores") => true,
        _ => return Err(CmdError::Arg(ArgError::Syntax)),
    };
    if with_scores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return Err(CmdError::Other("ERR value is out of range".into()));
    }
    let Some(z) = read::<ZSet>(ks, ctx.now, key)? else { return Ok(Reply::Array(vec![])) };
    if count == 0 || z.is_empty() {
        return Ok(Reply::Array(vec![]));
    }
    let mut all = items(z);
    let chosen: Vec<Item> = if count < 0 {
        let per_item = if with_scores { 2 } else { 1 };
        choose_repeated(&all, count.unsigned_abs(), per_item, |(m, _)| m.len() + 24, &mut rng, "members")?
    } else if count as u64 >= all.len() as u64 {
        // Redis walks a sorted set from its highest score here.
        all.sort_unstable_by(by_score_desc);
        all
    } else {
        // In random order, as Redis's.
        choose_distinct(all, count as u64, &mut rng)
    };
    Ok(items_reply(chosen, with_scores))
}

/// ```text
/// ZSCAN key cursor [MATCH pattern] [COUNT count]
/// ```
/// `[next-cursor, [member, score, ...]]` (see `containers::scan_container`);
/// a small set comes whole, in score order, as Redis returns its compact
/// encoding.
pub fn zscan(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let cursor = parse_cursor(args.next_bytes()?)?;
    let Some(z) = read::<ZSet>(ks, ctx.now, key)? else { return Ok(empty_scan()) };
    let mut all = items(z);
    all.sort_unstable_by(by_score);
    // Scores as strings, in RESP3 too.
    let with_scores = all.into_iter().map(|(m, s)| (m, vec![Reply::Bulk(Bytes::from(format_double(s)))]));
    scan_container(with_scores, z.len(), cursor, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zset(pairs: &[(&str, f64)]) -> ZSet {
        pairs.iter().map(|(m, s)| (Bytes::copy_from_slice(m.as_bytes()), *s)).collect()
    }

    fn names(found: &[Item]) -> Vec<String> {
        found.iter().map(|(m, _)| String::from_utf8_lossy(m).into_owned()).collect()
    }

    fn argv(words: &str) -> Vec<Bytes> {
        words.split(' ').map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    #[test]
    fn floats_parse_as_redis_reads_them() {
        for (text, want) in [
            ("1.5", 1.5),
            ("-2", -2.0),
            ("+3", 3.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("1e3", 1000.0),
            ("1E-2", 0.01),
            ("inf", f64::INFINITY),
            ("-Infinity", f64::NEG_INFINITY),
            ("0x10", 16.0),
            ("0x1p-2", 0.25),
            ("0X.8", 0.5),
            ("-0", -0.0),
        ] {
            assert_eq!(parse_float(text.as_bytes()), Some(want), "{text}");
        }
        for bad in ["", " 1", "1 ", "abc", "1e", "1e+", "nan", "-nan", "1.2.3", "0x", "1e400", "-1e400", "1e-400", "1\0", "0x1p"] {
            assert_eq!(parse_float(bad.as_bytes()), None, "{bad:?}");
        }
        assert!(parse_float(b"1e-310").is_some_and(|v| v > 0.0), "subnormals are in range");
        assert_eq!(parse_float(b"0x1.fffffffffffff8p0"), Some(2.0), "hex rounds to nearest even");
    }

    #[test]
    fn score_ranges_parse_as_zsl_parse_range() {
        let r = ScoreRange::parse(b"(1", b"5").unwrap();
        assert_eq!((r.min, r.min_exclusive, r.max, r.max_exclusive), (1.0, true, 5.0, false));
        assert!(!r.contains(1.0) && r.contains(1.5) && r.contains(5.0) && !r.contains(5.5));
        // strtod's leniency: leading spaces, an empty text (0), overflow to inf,
        // and everything after a NUL ignored.
        assert_eq!(ScoreRange::parse(b" 2", b"(").unwrap().min, 2.0);
        assert_eq!(ScoreRange::parse(b"", b"1").unwrap().min, 0.0);
        assert_eq!(ScoreRange::parse(b"1e400", b"1").unwrap().min, f64::INFINITY);
        assert_eq!(ScoreRange::parse(b"3\0junk", b"4").unwrap().min, 3.0);
        for (min, max) in [("a", "1"), ("1", "(abc"), ("1", "nan"), ("((1", "2"), ("1", " ")] {
            assert_eq!(
                ScoreRange::parse(min.as_bytes(), max.as_bytes()),
                Err(CmdError::Other("ERR min or max is not a float".into())),
                "{min:?} {max:?}"
            );
        }
    }

    #[test]
    fn lex_ranges_and_their_emptiness() {
        let parse = |a: &str, b: &str| LexRange::parse(&Bytes::copy_from_slice(a.as_bytes()), &Bytes::copy_from_slice(b.as_bytes()));
        for bad in [("b", "d"), ("[b", "d"), ("", "+"), ("-x", "+"), ("++", "-")] {
            assert!(parse(bad.0, bad.1).is_err(), "{bad:?}");
        }
        for (a, b, empty) in [
            ("-", "+", false),
            ("+", "-", true),
            ("-", "-", true),
            ("+", "+", true),
            ("[a", "[a", false),
            ("(a", "[a", true),
            ("[b", "[a", true),
            ("[a", "-", true),
            ("+", "[z", true),
        ] {
            let r = parse(a, b).unwrap();
            assert_eq!(r.is_empty(), empty, "{a} {b}");
            assert_eq!(r.bounds().is_none(), empty, "{a} {b}");
        }
    }

    #[test]
    fn lex_walk_over_equal_and_mixed_scores() {
        let z = zset(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]);
        let r = LexRange::parse(&Bytes::from("(a"), &Bytes::from("[c")).unwrap();
        assert_eq!(names(&lex_walk(&z, &r, false).collect::<Vec<_>>()), ["b", "c"]);
        assert_eq!(names(&lex_walk(&z, &r, true).collect::<Vec<_>>()), ["c", "b"]);
        // Mixed scores: walked in score order (c, a, b), as a small Redis set.
        let z = zset(&[("a", 1.0), ("b", 2.0), ("c", 0.0)]);
        let all = LexRange::parse(&Bytes::from("-"), &Bytes::from("+")).unwrap();
        assert_eq!(names(&lex_walk(&z, &all, false).collect::<Vec<_>>()), ["c", "a", "b"]);
        let r = LexRange::parse(&Bytes::from("[a"), &Bytes::from("[b")).unwrap();
        assert!(lex_walk(&z, &r, false).next().is_none(), "the first member (c) is above max");
        let r = LexRange::parse(&Bytes::from("[a"), &Bytes::from("+")).unwrap();
        assert_eq!(names(&lex_walk(&z, &r, false).collect::<Vec<_>>()), ["c", "a", "b"]);
        assert_eq!(names(&lex_walk(&z, &r, true).collect::<Vec<_>>()), ["b", "a", "c"]);
        let r = LexRange::parse(&Bytes::from("-"), &Bytes::from("[b")).unwrap();
        assert!(lex_walk(&z, &r, true).next().is_none(), "the lowest-scored member (c) is above max");
    }

    #[test]
    fn ordering_ties_minus_zero_with_zero() {
        let z = zset(&[("b", -0.0), ("a", 0.0), ("c", -1.0)]);
        assert_eq!(names(&window(items(&z), 0, 3, by_score)), ["c", "a", "b"]);
    }

    #[test]
    fn windows_select_ranks() {
        let z = zset(&[("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0), ("e", 5.0)]);
        assert_eq!(names(&window(items(&z), 1, 3, by_score)), ["b", "c"]);
        assert_eq!(names(&window(items(&z), 0, 2, by_score_desc)), ["e", "d"]);
        assert_eq!(names(&window(items(&z), 3, 100, by_score)), ["d", "e"]);
        assert!(window(items(&z), 5, 9, by_score).is_empty());
        assert!(window(items(&z), 2, 2, by_score).is_empty());
    }

    #[test]
    fn range_options_parse_as_redis() {
        let q = parse_range(&argv("(5 2 BYSCORE REV LIMIT 1 2 WITHSCORES"), None, None, false).unwrap();
        let want = ScoreRange { min: 2.0, min_exclusive: false, max: 5.0, max_exclusive: true };
        assert_eq!(q, RangeQuery { bounds: Bounds::Score(want), rev: true, with_scores: true, offset: 1, count: 2 });
        // A count of -1 is no LIMIT, even by rank.
        assert!(parse_range(&argv("0 -1 LIMIT 5 -1"), None, None, false).is_ok());
        let syntax = Err(CmdError::Arg(ArgError::Syntax));
        assert_eq!(parse_range(&argv("0 -1 REV REV"), None, None, false), syntax);
        assert_eq!(parse_range(&argv("0 1 BYSCORE BYLEX"), None, None, false), syntax);
        assert_eq!(parse_range(&argv("0 1 LIMIT 1"), Some(RangeBy::Score), Some(false), false), syntax);
        assert_eq!(parse_range(&argv("0 1 REV"), Some(RangeBy::Score), Some(false), false), syntax);
        assert_eq!(parse_range(&argv("0 1 WITHSCORES"), None, None, true), syntax);
        // Options are checked before the range.
        assert_eq!(parse_range(&argv("a b FOO"), None, None, false), syntax);
        assert_eq!(
            parse_range(&argv("0 1 LIMIT x 1"), Some(RangeBy::Score), Some(false), false),
            Err(CmdError::Arg(ArgError::NotInteger))
        );
    }

    #[test]
    fn limits_as_redis_walks_them() {
        let z = zset(&[("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0), ("e", 5.0)]);
        let run = |offset, count, rev| {
            let all = ScoreRange { min: f64::NEG_INFINITY, min_exclusive: false, max: f64::INFINITY, max_exclusive: false };
            names(&select(&z, &RangeQuery { bounds: Bounds::Score(all), rev, with_scores: false, offset, count }))
        };
        assert_eq!(run(1, 2, false), ["b", "c"]);
        assert_eq!(run(1, -1, false), ["b", "c", "d", "e"]);
        assert_eq!(run(1, 1, true), ["d"]);
        assert!(run(-1, 2, false).is_empty());
        assert!(run(0, 0, false).is_empty());
        assert!(run(10, 5, false).is_empty());
        assert_eq!(run(i64::MAX, i64::MAX, false), Vec::<String>::new());
        assert_eq!(run(4, i64::MAX, false), ["e"]);
    }

    #[test]
    fn aggregation_keeps_nan_out() {
        let mut total = f64::INFINITY;
        Aggregate::Sum.fold(&mut total, f64::NEG_INFINITY);
        assert_eq!(total, 0.0);
        let mut total = 3.0;
        Aggregate::Min.fold(&mut total, f64::NAN);
        Aggregate::Max.fold(&mut total, f64::NAN);
        assert_eq!(total, 3.0);
        Aggregate::Min.fold(&mut total, 2.0);
        assert_eq!(total, 2.0);
        assert_eq!(weighted(f64::INFINITY, 0.0), 0.0);
    }

    #[test]
    fn stores_aggregate_weighted_scores() {
        let (a, b) = (zset(&[("x", 1.0), ("y", 2.0)]), zset(&[("y", f64::INFINITY), ("z", 3.0)]));
        let plain: BTreeSet<Bytes> = [Bytes::from("x")].into_iter().collect();
        fn q(sources: Vec<(Source, f64)>, aggregate: Aggregate) -> SetOpQuery {
            SetOpQuery { sources, aggregate, with_scores: false, limit: 0 }
        }
        let union = combine(&q(vec![(Source::Sorted(&a), 2.0), (Source::Sorted(&b), 1.0)], Aggregate::Sum), SetOp::Union);
        assert_eq!(union, zset(&[("x", 2.0), ("y", f64::INFINITY), ("z", 3.0)]));
        // inf * 0 is NaN: 0 in a union, but a NaN sum (so 0) in an intersection.
        let union = combine(&q(vec![(Source::Sorted(&a), 1.0), (Source::Sorted(&b), 0.0)], Aggregate::Sum), SetOp::Union);
        assert_eq!(union.get(&Bytes::from("y")), Some(&2.0));
        let inter = combine(&q(vec![(Source::Sorted(&a), 1.0), (Source::Sorted(&b), 0.0)], Aggregate::Sum), SetOp::Inter);
        assert_eq!(inter, zset(&[("y", 0.0)]));
        let inter = combine(&q(vec![(Source::Plain(&plain), 5.0), (Source::Sorted(&a), 1.0)], Aggregate::Max), SetOp::Inter);
        assert_eq!(inter, zset(&[("x", 5.0)]));
        let diff = combine(&q(vec![(Source::Sorted(&a), 1.0), (Source::Plain(&plain), 1.0)], Aggregate::Sum), SetOp::Diff);
        assert_eq!(diff, zset(&[("y", 2.0)]));
        let missing = combine(&q(vec![(Source::Missing, 1.0), (Source::Sorted(&a), 1.0)], Aggregate::Sum), SetOp::Inter);
        assert!(missing.is_empty());
    }
}
