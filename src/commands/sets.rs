//! Set commands: SADD, SREM, SMEMBERS, SISMEMBER, SMISMEMBER, SCARD, SPOP,
//! SRANDMEMBER, SMOVE, SINTER/SUNION/SDIFF and their STORE forms,
//! SINTERCARD, SSCAN.
//!
//! A set is ordered by member bytes, so every node lists it identically. The
//! commands that choose at random (SPOP, SRANDMEMBER) draw from a generator
//! seeded from the log entry (or, for a read on the leader, any seed), so
//! replicas choose alike. Replies and errors are Redis 7.0's (t_set.c).

use std::collections::BTreeSet;

use bytes::Bytes;

use crate::keyspace::{Entry, ExecCtx, Keyspace, LogTime, ReadCtx, Rng, Value};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

use super::containers::{
    choose_distinct, choose_repeated, drop_if_empty, empty_scan, parse_cursor, random_count, read, scan_container, write,
};
use super::{CmdError, CmdResult};

type Set = BTreeSet<Bytes>;

fn members(set: impl IntoIterator<Item = Bytes>) -> Reply {
    Reply::Set(set.into_iter().map(Reply::Bulk).collect())
}

/// ```text
/// SADD key member [member ...]
/// ```
/// The number of members that were not in the set.
pub fn sadd(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let new = args.rest();
    let set = write::<Set>(ks, ctx, &key, true)?.ok_or(CmdError::WrongType)?;
    let added = new.iter().filter(|m| set.insert((*m).clone())).count();
    if added > 0 {
        ctx.key_event('s', "sadd", &key);
    }
    Ok(Reply::Int(added as i64))
}

/// ```text
/// SREM key member [member ...]
/// ```
/// The number of members removed; an emptied set is deleted.
pub fn srem(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let gone = args.rest();
    let Some(set) = write::<Set>(ks, ctx, &key, false)? else { return Ok(Reply::Int(0)) };
    let removed = gone.iter().filter(|m| set.remove(*m)).count();
    if removed > 0 {
        ctx.key_event('s', "srem", &key);
        drop_if_empty(ks, ctx, &key);
    }
    Ok(Reply::Int(removed as i64))
}

/// ```text
/// SMEMBERS key
/// ```
/// Every member (a RESP3 set); empty for a missing key.
pub fn smembers(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(members(read::<Set>(ks, ctx.now, key)?.into_iter().flatten().cloned()))
}

/// ```text
/// SISMEMBER key member
/// ```
/// 1 if `member` is in the set, else 0.
pub fn sismember(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let member = args.next_bytes()?;
    Ok(Reply::Int(read::<Set>(ks, ctx.now, key)?.is_some_and(|s| s.contains(member)) as i64))
}

/// ```text
/// SMISMEMBER key member [member ...]
/// ```
/// 1 or 0 for each member, in order.
pub fn smismember(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let set = read::<Set>(ks, ctx.now, key)?;
    Ok(Reply::Array(args.rest().iter().map(|m| Reply::Int(set.is_some_and(|s| s.contains(m)) as i64)).collect()))
}

/// ```text
/// SCARD key
/// ```
/// The number of members; 0 for a missing key.
pub fn scard(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(Reply::Int(read::<Set>(ks, ctx.now, key)?.map_or(0, |s| s.len()) as i64))
}

/// ```text
/// SPOP key [count]
/// ```
/// Without `count`: a member chosen at random and removed, or nil. With it:
/// up to `count` distinct members removed (a RESP3 set); the whole set,
/// deleted, if `count` reaches its size.
pub fn spop(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let count = match args.remaining() {
        0 => None,
        1 => match parse_i64(args.next_bytes()?) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return Err(CmdError::Other("ERR value is out of range, must be positive".into())),
        },
        _ => return Err(CmdError::Arg(ArgError::Syntax)),
    };
    let seed = ctx.random_seed();
    let Some(set) = write::<Set>(ks, ctx, &key, false)? else {
        return Ok(if count.is_some() { Reply::Set(vec![]) } else { Reply::Nil });
    };
    let mut rng = Rng::new(seed);
    let popped: Vec<Bytes> = match count {
        Some(0) => return Ok(Reply::Set(vec![])),
        Some(n) if n >= set.len() => std::mem::take(set).into_iter().collect(),
        n => choose_distinct(set.iter().cloned().collect(), n.unwrap_or(1) as u64, &mut rng),
    };
    for m in &popped {
        set.remove(m);
    }
    ctx.key_event('s', "spop", &key);
    drop_if_empty(ks, ctx, &key);
    Ok(match count {
        None => popped.into_iter().next().map(Reply::Bulk).unwrap_or(Reply::Nil),
        Some(_) => members(popped),
    })
}

/// ```text
/// SRANDMEMBER key [count]
/// ```
/// Without `count`: a member chosen at random, or nil. A positive `count`:
/// that many distinct members (the whole set if it is smaller). A negative
/// one: exactly `-count` members, repeats allowed.
pub fn srandmember(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let count = match args.remaining() {
        0 => None,
        1 => Some(random_count(args.next_bytes()?)?),
        _ => return Err(CmdError::Arg(ArgError::Syntax)),
    };
    let set = read::<Set>(ks, ctx.now, key)?;
    let mut rng = Rng::new(ctx.seed);
    let Some(count) = count else {
        return Ok(match set {
            Some(s) if !s.is_empty() => s.iter().nth(rng.below(s.len())).cloned().map(Reply::Bulk).unwrap_or(Reply::Nil),
            _ => Reply::Nil,
        });
    };
    let Some(set) = set.filter(|s| !s.is_empty() && count != 0) else { return Ok(Reply::Array(vec![])) };
    let all: Vec<&Bytes> = set.iter().collect();
    let chosen = if count < 0 {
        choose_repeated(&all, count.unsigned_abs(), 1, |m| m.len(), &mut rng, "members")?
    } else {
        choose_distinct(all, count as u64, &mut rng)
    };
    Ok(Reply::Array(chosen.into_iter().map(|m| Reply::Bulk(m.clone())).collect()))
}

/// ```text
/// SMOVE source destination member
/// ```
/// 1 if `member` moved from `source` to `destination` (created if missing),
/// 0 if it was not in `source`.
pub fn smove(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let src = args.next_bytes()?.clone();
    let dst = args.next_bytes()?.clone();
    let member = args.next_bytes()?.clone();
    if read::<Set>(ks, ctx.log_time, &src)?.is_none() {
        return Ok(Reply::Int(0));
    }
    read::<Set>(ks, ctx.log_time, &dst)?;
    if src == dst {
        return Ok(Reply::Int(read::<Set>(ks, ctx.log_time, &src)?.is_some_and(|s| s.contains(&member)) as i64));
    }
    let set = write::<Set>(ks, ctx, &src, false)?.ok_or(CmdError::WrongType)?;
    if !set.remove(&member) {
        return Ok(Reply::Int(0));
    }
    ctx.key_event('s', "srem", &src);
    drop_if_empty(ks, ctx, &src);
    let dest = write::<Set>(ks, ctx, &dst, true)?.ok_or(CmdError::WrongType)?;
    if dest.insert(member) {
        ctx.key_event('s', "sadd", &dst);
    }
    Ok(Reply::Int(1))
}

/// The sets under `keys` at `now`, `None` for a missing key; WRONGTYPE if
/// any key holds something else (checked for every key first, as Redis).
fn sets_of<'a>(ks: &'a Keyspace, now: LogTime, keys: &[Bytes]) -> Result<Vec<Option<&'a Set>>, CmdError> {
    keys.iter().map(|k| read::<Set>(ks, now, k)).collect()
}

#[derive(Clone, Copy)]
enum SetOp {
    Inter,
    Union,
    Diff,
}

impl SetOp {
    fn store_event(self) -> &'static str {
        match self {
            SetOp::Inter => "sinterstore",
            SetOp::Union => "sunionstore",
            SetOp::Diff => "sdiffstore",
        }
    }
}

/// The intersection of `sets` (empty if one is missing), stopping once it
/// has `limit` members (0: no limit).
fn intersect(sets: &[Option<&Set>], limit: usize) -> Set {
    let Some(present) = sets.iter().copied().collect::<Option<Vec<&Set>>>() else { return Set::new() };
    let Some(smallest) = present.iter().min_by_key(|s| s.len()) else { return Set::new() };
    let mut out = Set::new();
    for m in smallest.iter() {
        if present.iter().all(|s| s.contains(m)) {
            out.insert(m.clone());
            if limit > 0 && out.len() >= limit {
                break;
            }
        }
    }
    out
}

fn combine(sets: &[Option<&Set>], op: SetOp) -> Set {
    match op {
        SetOp::Inter => intersect(sets, 0),
        SetOp::Union => sets.iter().flatten().flat_map(|s| s.iter().cloned()).collect(),
        SetOp::Diff => {
            let Some(Some(first)) = sets.first() else { return Set::new() };
            first.iter().filter(|m| !sets[1..].iter().flatten().any(|s| s.contains(*m))).cloned().collect()
        }
    }
}

fn set_op(ks: &Keyspace, ctx: &ReadCtx, mut args: Args, op: SetOp) -> CmdResult {
    let keys = args.rest();
    Ok(members(combine(&sets_of(ks, ctx.now, keys)?, op)))
}

/// ```text
/// SINTER key [key ...]
/// ```
/// The members of every set (a missing key is an empty set).
pub fn sinter(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    set_op(ks, ctx, args, SetOp::Inter)
}

/// ```text
/// SUNION key [key ...]
/// ```
pub fn sunion(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    set_op(ks, ctx, args, SetOp::Union)
}

/// ```text
/// SDIFF key [key ...]
/// ```
/// The members of the first set that are in none of the others.
pub fn sdiff(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    set_op(ks, ctx, args, SetOp::Diff)
}

fn set_op_store(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args, op: SetOp) -> CmdResult {
    let dst = args.next_bytes()?.clone();
    let keys = args.rest();
    let result = combine(&sets_of(ks, ctx.log_time, keys)?, op);
    let size = result.len();
    // The destination's old value, whatever its type, is replaced whole.
    if size == 0 {
        if ks.get_mut(&dst, ctx).is_some() {
            ks.remove(&dst);
            ctx.key_event('g', "del", &dst);
        }
    } else {
        ks.insert(dst.clone(), Entry::new(Value::Set(result), ctx.version, ctx.log_time));
        ctx.key_event('s', op.store_event(), &dst);
    }
    Ok(Reply::Int(size as i64))
}

/// ```text
/// SINTERSTORE destination key [key ...]
/// ```
/// Stores the intersection in `destination` (deleted if it is empty); its size.
pub fn sinterstore(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    set_op_store(ks, ctx, args, SetOp::Inter)
}

/// ```text
/// SUNIONSTORE destination key [key ...]
/// ```
pub fn sunionstore(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    set_op_store(ks, ctx, args, SetOp::Union)
}

/// ```text
/// SDIFFSTORE destination key [key ...]
/// ```
pub fn sdiffstore(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    set_op_store(ks, ctx, args, SetOp::Diff)
}

/// ```text
/// SINTERCARD numkeys key [key ...] [LIMIT limit]
/// ```
/// The size of the intersection, counting up to `limit` (0: no limit).
pub fn sintercard(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let numkeys = match parse_i64(args.next_bytes()?) {
        Some(n) if n > 0 => n as usize,
        _ => return Err(CmdError::Other("ERR numkeys should be greater than 0".into())),
    };
    if numkeys > args.remaining() {
        return Err(CmdError::Other("ERR Number of keys can't be greater than number of args".into()));
    }
    let rest = args.rest();
    let (keys, mut options) = rest.split_at(numkeys);
    let mut limit = 0usize;
    while let Some((opt, more)) = options.split_first() {
        match more.first() {
            Some(value) if opt.eq_ignore_ascii_case(b"limit") => {
                limit = match parse_i64(value) {
                    Some(n) if n >= 0 => n as usize,
                    _ => return Err(CmdError::Other("ERR LIMIT can't be negative".into())),
                };
                options = &more[1..];
            }
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    Ok(Reply::Int(intersect(&sets_of(ks, ctx.now, keys)?, limit).len() as i64))
}

/// ```text
/// SSCAN key cursor [MATCH pattern] [COUNT count]
/// ```
/// `[next-cursor, [member, ...]]` (see `containers::scan_container`).
pub fn sscan(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let cursor = parse_cursor(args.next_bytes()?)?;
    let Some(set) = read::<Set>(ks, ctx.now, key)? else { return Ok(empty_scan()) };
    scan_container(set.iter().map(|m| (m, vec![])), set.len(), cursor, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> Set {
        items.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect()
    }

    #[test]
    fn set_algebra() {
        let (a, b, c) = (set(&["a", "b", "c", "d"]), set(&["c", "d", "e"]), set(&["d", "e", "f"]));
        assert_eq!(combine(&[Some(&a), Some(&b)], SetOp::Inter), set(&["c", "d"]));
        assert_eq!(combine(&[Some(&a), Some(&b), Some(&c)], SetOp::Inter), set(&["d"]));
        assert_eq!(combine(&[Some(&a), None], SetOp::Inter), set(&[]));
        assert_eq!(combine(&[Some(&a), None, Some(&c)], SetOp::Union), set(&["a", "b", "c", "d", "e", "f"]));
        assert_eq!(combine(&[Some(&a), Some(&b), Some(&c)], SetOp::Diff), set(&["a", "b"]));
        assert_eq!(combine(&[None, Some(&a)], SetOp::Diff), set(&[]));
        assert_eq!(intersect(&[Some(&a), Some(&a)], 2).len(), 2);
    }

    #[test]
    fn random_choices_are_distinct_and_follow_the_seed() {
        let s: Set = (0..100).map(|i| Bytes::from(format!("m{i}"))).collect();
        let one = choose_distinct(s.iter().collect(), 10, &mut Rng::new(7));
        let again = choose_distinct(s.iter().collect(), 10, &mut Rng::new(7));
        let other = choose_distinct(s.iter().collect(), 10, &mut Rng::new(8));
        assert_eq!(one, again, "the same seed chooses the same members");
        assert_ne!(one, other);
        assert_eq!(one.iter().collect::<BTreeSet<_>>().len(), 10);
        // Every member can be chosen.
        let mut rng = Rng::new(1);
        let seen: BTreeSet<Bytes> = (0..2000).flat_map(|_| choose_distinct(s.iter().cloned().collect(), 1, &mut rng)).collect();
        assert_eq!(seen.len(), 100);
    }

    #[test]
    fn spop_on_two_replicas_pops_the_same_members() {
        let run = || {
            let mut ks = Keyspace::new();
            let argv: Vec<Bytes> = ["sadd", "s"].iter().map(|s| Bytes::from(*s)).chain((0..50).map(|i| Bytes::from(format!("{i}")))).collect();
            let mut ctx = ExecCtx::new(1, 10, 0);
            sadd(&mut ks, &mut ctx, Args::new(&argv)).unwrap();
            let mut ctx = ExecCtx::new(2, 11, 0);
            let pop = vec![Bytes::from("spop"), Bytes::from("s"), Bytes::from("5")];
            let first = spop(&mut ks, &mut ctx, Args::new(&pop)).unwrap();
            let second = spop(&mut ks, &mut ctx, Args::new(&pop)).unwrap();
            (first, second, ks)
        };
        let (a1, a2, ks_a) = run();
        let (b1, b2, ks_b) = run();
        assert_eq!((a1.clone(), a2.clone()), (b1, b2));
        assert_ne!(a1, a2, "two draws of one entry differ");
        assert_eq!(ks_a, ks_b);
    }
}
