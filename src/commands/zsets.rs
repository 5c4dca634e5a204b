//! Sorted-set commands: ZADD, ZSCORE, ZREM, ZRANGE, ZINCRBY, ZCARD.
//! Members are ordered by (score, member), as in Redis.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx};
use crate::protocol::{ArgError, Args, Reply};

use super::containers::{check, drop_if_empty, read, write};
use super::lists::clamp_range;
use super::{CmdError, CmdResult};

type ZSet = BTreeMap<Bytes, f64>;

fn parse_score(raw: &[u8]) -> Result<f64, CmdError> {
    let s = std::str::from_utf8(raw).map_err(|_| not_float())?;
    let v = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        other if !other.is_empty() && !other.contains(char::is_whitespace) => other.parse().map_err(|_| not_float())?,
        _ => return Err(not_float()),
    };
    if v.is_nan() { Err(not_float()) } else { Ok(v) }
}

fn not_float() -> CmdError {
    CmdError::Other("ERR value is not a valid float".into())
}


/// Members in (score, member) order.
fn ordered(z: &ZSet) -> Vec<(&Bytes, f64)> {
    let mut items: Vec<(&Bytes, f64)> = z.iter().map(|(m, s)| (m, *s)).collect();
    items.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    items
}

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
    if rest.is_empty() || rest.len() % 2 != 0 {
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
        z.insert(member, new);
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
    z.insert(member, new);
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

/// A score bound: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
fn parse_bound(raw: &[u8]) -> Result<(f64, bool), CmdError> {
    match raw.strip_prefix(b"(") {
        Some(rest) => Ok((parse_score(rest).map_err(|_| min_max_err())?, true)),
        None => Ok((parse_score(raw).map_err(|_| min_max_err())?, false)),
    }
}

fn min_max_err() -> CmdError {
    CmdError::Other("ERR min or max is not a float".into())
}

/// ```text
/// ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES]
/// ```
/// Members by rank (or by score with `BYSCORE`), lowest first (highest with `REV`).
pub fn zrange(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let (start_raw, stop_raw) = (args.next_bytes()?.clone(), args.next_bytes()?.clone());
    let (mut by_score, mut rev, mut with_scores, mut limit) = (false, false, false, None);
    while args.remaining() > 0 {
        match args.next_keyword()?.as_str() {
            "BYSCORE" => by_score = true,
            "REV" => rev = true,
            "WITHSCORES" => with_scores = true,
            "LIMIT" => limit = Some((args.next_i64()?, args.next_i64()?)),
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    if limit.is_some() && !by_score {
        return Err(CmdError::Other(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX".into(),
        ));
    }
    let Some(z) = read::<ZSet>(ks, ctx.now, key)? else { return Ok(Reply::Array(vec![])) };
    let mut items = ordered(z);
    if rev {
        items.reverse();
    }
    let selected: Vec<(&Bytes, f64)> = if by_score {
        // With REV the first bound is the maximum.
        let (a, b) = (parse_bound(&start_raw)?, parse_bound(&stop_raw)?);
        let ((min, min_ex), (max, max_ex)) = if rev { (b, a) } else { (a, b) };
        let in_range = |s: f64| (if min_ex { s > min } else { s >= min }) && (if max_ex { s < max } else { s <= max });
        let matching = items.into_iter().filter(|(_, s)| in_range(*s));
        match limit {
            Some((offset, _)) if offset < 0 => matching.take(0).collect(),
            Some((offset, count)) => {
                let count = if count < 0 { usize::MAX } else { count as usize };
                matching.skip(offset as usize).take(count).collect()
            }
            None => matching.collect(),
        }
    } else {
        let start = crate::protocol::parse_i64(&start_raw).ok_or(CmdError::Arg(ArgError::NotInteger))?;
        let stop = crate::protocol::parse_i64(&stop_raw).ok_or(CmdError::Arg(ArgError::NotInteger))?;
        let (from, to) = clamp_range(start, stop, items.len());
        items[from..to].to_vec()
    };
    if with_scores {
        return Ok(Reply::ScorePairs(selected.into_iter().map(|(m, s)| (m.clone(), s)).collect()));
    }
    Ok(Reply::Array(selected.into_iter().map(|(m, _)| Reply::Bulk(m.clone())).collect()))
}
