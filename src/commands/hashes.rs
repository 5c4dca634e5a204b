//! Hash commands: HSET, HSETNX, HGET, HMGET, HEXISTS, HINCRBY,
//! HINCRBYFLOAT, HDEL, HLEN, HSTRLEN, HKEYS, HVALS, HGETALL, HSCAN,
//! HRANDFIELD.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx, Rng};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

use super::containers::{
    choose_distinct, choose_repeated, drop_if_empty, empty_scan, parse_cursor, random_count, read, scan_container, write,
};
use super::{CmdError, CmdResult};
use super::long_double::{self, Float, LongDouble};

type Hash = BTreeMap<Bytes, Bytes>;

/// ```text
/// HSET key field value [field value ...]
/// ```
/// The number of fields that were added (not updated).
pub fn hset(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    hset_as("hset", ks, ctx, args)
}

/// `HSET`, its arity error naming `name` (`hmset` for `HMSET`, as Redis).
fn hset_as(name: &'static str, ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let pairs = args.rest();
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Err(CmdError::Arity(name));
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
    hset_as("hmset", ks, ctx, args).map(|_| Reply::ok())
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

/// ```text
/// HINCRBYFLOAT key field increment
/// ```
/// The value after adding `increment`; a missing field counts as 0. As in
/// Redis the sum is taken in x86-64's `long double` (80-bit, emulated in
/// `long_double` below, so that every node computes the same bits) and stored
/// and replied as `%.17Lf` without trailing zeros: `5000 + 0.01` is
/// `5000.00999999999999979`.
pub fn hincrbyfloat(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let field = args.next_bytes()?.clone();
    let not_finite = || CmdError::Other("ERR increment would produce NaN or Infinity".into());
    let by = match long_double::parse(args.next_bytes()?) {
        None => return Err(CmdError::Other("ERR value is not a valid float".into())),
        Some(Float::Infinite) => return Err(CmdError::Other("ERR value is NaN or Infinity".into())),
        Some(Float::Finite(by)) => by,
    };
    let current = match read::<Hash>(ks, ctx.log_time, &key)?.and_then(|h| h.get(&field)) {
        None => LongDouble::ZERO,
        Some(v) => match long_double::parse(v) {
            None => return Err(CmdError::Other("ERR hash value is not a float".into())),
            // A stored "inf" plus anything finite stays infinite.
            Some(Float::Infinite) => return Err(not_finite()),
            Some(Float::Finite(v)) => v,
        },
    };
    let sum = long_double::add(current, by).ok_or_else(not_finite)?;
    let text = Bytes::from(long_double::to_human(sum));
    let hash = write::<Hash>(ks, ctx, &key, true)?.ok_or(CmdError::WrongType)?;
    hash.insert(field, text.clone());
    ctx.key_event('h', "hincrbyfloat", &key);
    Ok(Reply::Bulk(text))
}

/// ```text
/// HSTRLEN key field
/// ```
/// The length of the field's value; 0 if the field or the key is missing.
pub fn hstrlen(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let field = args.next_bytes()?;
    let len = read::<Hash>(ks, ctx.now, key)?.and_then(|h| h.get(field)).map_or(0, |v| v.len());
    Ok(Reply::Int(len as i64))
}

/// ```text
/// HSCAN key cursor [MATCH pattern] [COUNT count]
/// ```
/// `[next-cursor, [field, value, ...]]` (see `containers::scan_container`);
/// `[0, []]` for a missing key.
pub fn hscan(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    // As Redis: a bad cursor is reported before the key's type.
    let cursor = parse_cursor(args.next_bytes()?)?;
    let Some(hash) = read::<Hash>(ks, ctx.now, key)? else { return Ok(empty_scan()) };
    scan_container(hash.iter().map(|(f, v)| (f, vec![Reply::Bulk(v.clone())])), hash.len(), cursor, args)
}

/// ```text
/// HRANDFIELD key [count [WITHVALUES]]
/// ```
/// A random field (nil for a missing key). With `count`: an array of
/// `count` distinct fields (all of them if the hash has fewer), or with a
/// negative `count`, exactly `-count` fields that may repeat; `WITHVALUES`
/// puts each field's value after it (RESP3: each pair nested). Random from `ctx.seed`, so a script's call
/// chooses alike on every node.
pub fn hrandfield(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let mut count = None;
    let mut with_values = false;
    if args.remaining() > 0 {
        let n = random_count(args.next_bytes()?)?;
        with_values = match args.remaining() {
            0 => false,
            1 if args.next_bytes()?.eq_ignore_ascii_case(b"withvalues") => true,
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        };
        // Redis's bound for a reply of two entries per field.
        if with_values && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&n) {
            return Err(CmdError::Other("ERR value is out of range".into()));
        }
        count = Some(n);
    }
    let hash = read::<Hash>(ks, ctx.now, key)?.filter(|h| !h.is_empty());
    let mut rng = Rng::new(ctx.seed);
    let Some(count) = count else {
        let field = hash.and_then(|h| h.keys().nth(rng.below(h.len())));
        return Ok(field.map_or(Reply::Nil, |f| Reply::Bulk(f.clone())));
    };
    let Some(hash) = hash.filter(|_| count != 0) else { return Ok(Reply::Array(vec![])) };
    let entries: Vec<(&Bytes, &Bytes)> = hash.iter().collect();
    let chosen = if count < 0 {
        let size = |(f, v): &(&Bytes, &Bytes)| f.len() + if with_values { v.len() } else { 0 };
        choose_repeated(&entries, count.unsigned_abs(), if with_values { 2 } else { 1 }, size, &mut rng, "fields")?
    } else {
        choose_distinct(entries, count as u64, &mut rng)
    };
    if with_values {
        return Ok(Reply::Pairs(chosen.into_iter().map(|(f, v)| (Reply::Bulk(f.clone()), Reply::Bulk(v.clone()))).collect()));
    }
    Ok(Reply::Array(chosen.into_iter().map(|(f, _)| Reply::Bulk(f.clone())).collect()))
}



#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn hash_of(n: usize) -> Keyspace {
        let mut ks = Keyspace::new();
        let mut words = vec!["hset".to_string(), "h".to_string()];
        for i in 0..n {
            words.push(format!("f{i}"));
            words.push(format!("v{i}"));
        }
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        hset(&mut ks, &mut ExecCtx::new(1, 10, 0), Args::new(&argv(&words))).unwrap();
        ks
    }

    fn rand(ks: &Keyspace, seed: u64, words: &[&str]) -> Reply {
        let ctx = ReadCtx { now: 10, clock_now: 10, unix_ms: 0, seed };
        hrandfield(ks, &ctx, Args::new(&argv(words))).unwrap_or_else(Reply::from)
    }

    fn items(reply: Reply) -> Vec<Bytes> {
        let items = match reply {
            Reply::Array(items) => items,
            Reply::Pairs(pairs) => pairs.into_iter().flat_map(|(f, v)| [f, v]).collect(),
            other => panic!("{other:?}"),
        };
        items.into_iter().map(|r| if let Reply::Bulk(b) = r { b } else { panic!("{r:?}") }).collect()
    }

    #[test]
    fn hrandfield_counts() {
        let ks = hash_of(10);
        let distinct = items(rand(&ks, 1, &["hrandfield", "h", "4"]));
        assert_eq!(distinct.iter().collect::<std::collections::BTreeSet<_>>().len(), 4);
        assert_eq!(distinct, items(rand(&ks, 1, &["hrandfield", "h", "4"])), "the same seed, the same choice");
        assert_eq!(items(rand(&ks, 1, &["hrandfield", "h", "100"])).len(), 10);
        let repeated = items(rand(&ks, 2, &["hrandfield", "h", "-50"]));
        assert_eq!(repeated.len(), 50);
        let pairs = items(rand(&ks, 3, &["hrandfield", "h", "-5", "WITHVALUES"]));
        assert_eq!(pairs.len(), 10);
        for pair in pairs.chunks(2) {
            assert_eq!(&pair[0][1..], &pair[1][1..], "each field is followed by its value");
        }
        // Every field can be chosen.
        let seen: std::collections::BTreeSet<Bytes> =
            (0..200).flat_map(|seed| items(rand(&ks, seed, &["hrandfield", "h", "1"]))).collect();
        assert_eq!(seen.len(), 10);
    }

    #[test]
    fn hrandfield_refuses_counts_it_cannot_serve() {
        let ks = hash_of(3);
        let too_many = rand(&ks, 1, &["hrandfield", "h", "-1000000000000"]);
        assert!(matches!(&too_many, Reply::Error(e) if e.starts_with("ERR count is too large")), "{too_many:?}");
        let too_many = rand(&ks, 1, &["hrandfield", "h", "-6000000", "WITHVALUES"]);
        assert!(matches!(&too_many, Reply::Error(e) if e.starts_with("ERR count is too large")), "{too_many:?}");
        assert_eq!(rand(&ks, 1, &["hrandfield", "h", "-4611686018427387904", "WITHVALUES"]), Reply::error("ERR value is out of range"));
        assert!(rand(&ks, 1, &["hrandfield", "h", "-9223372036854775808"]).is_error());
        assert_eq!(items(rand(&ks, 1, &["hrandfield", "h", "4611686018427387903", "WITHVALUES"])).len(), 6);
        assert_eq!(rand(&ks, 1, &["hrandfield", "h", "1", "WITHVALUES", "x"]), Reply::error("ERR syntax error"));
    }
}
