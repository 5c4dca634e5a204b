//! `SORT` and `SORT_RO`: the elements of a list, set or sorted set in order,
//! as numbers or as strings, by themselves or by other keys' values (`BY
//! pattern`), with other keys' values beside them (`GET pattern`), as Redis
//! 7 answers (its `sort.c`).
//!
//! One difference, in what Redis leaves unspecified: a set sorted `BY` a
//! constant (`BY nosort`) comes out in string order (ascending or `DESC`)
//! wherever it is asked, where Redis gives its hash table's order except in a
//! script or with `STORE` (string order there too). Equal weights keep the
//! order the elements were read in (the list's, or the set's and sorted set's
//! string order), where Redis's `qsort` leaves it open: `SORT ... STORE` is
//! applied on every node and must store the same list on each.

use std::cmp::Ordering;
use std::collections::VecDeque;

use bytes::Bytes;

use super::zsets::strtod_all;
use super::{CmdError, CmdResult};
use crate::keyspace::{Entry, ExecCtx, Keyspace, LogTime, ReadCtx, Value};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

/// The most entries a reply (or a stored list) may have beyond the sorted
/// key's own size: `GET` patterns multiply them, and a reply must fit in
/// memory on every node that applies the command.
const MAX_EXTRA_ITEMS: usize = 10_000_000;

/// The most bytes of key names the `BY` and `GET` patterns may build in
/// one `SORT` (each pattern once per element it is used with, with that
/// element in place of its `*`): a long pattern, or a long element, over a
/// long list would otherwise hold up every node's apply path (2,000 `GET *`
/// over one 8 MB element built 16 GB of names: 35 s).
const MAX_PATTERN_BYTES: u64 = 1 << 30;

/// The most bytes one `SORT` may return or store. `GET #` repeats an
/// element without copying it, so 1,000 of them over one 8 MB element stored
/// an 8 GB list in a few MB of memory, which no `DUMP`, snapshot or reply
/// could then hold (Redis's largest string is 512 MB).
const MAX_RESULT_BYTES: u64 = 512 << 20;

/// The bytes of the key names `pattern` builds for elements of these
/// lengths (none if it names no key: no `*`).
fn names_built(pattern: &[u8], elements: impl Iterator<Item = usize>) -> u64 {
    if !c_str(pattern).contains(&b'*') {
        return 0;
    }
    elements.map(|e| (pattern.len() + e) as u64).sum()
}

/// The lengths of the elements of a sortable value.
fn element_lengths(value: Option<&Value>) -> Box<dyn Iterator<Item = usize> + '_> {
    match value {
        Some(Value::List(l)) => Box::new(l.iter().map(Bytes::len)),
        Some(Value::Set(s)) => Box::new(s.iter().map(Bytes::len)),
        Some(Value::ZSet(z)) => Box::new(z.keys().map(Bytes::len)),
        _ => Box::new(std::iter::empty()),
    }
}

/// A `SORT`'s work for the entry's budget (`commands::work_of`), in the
/// same units (a byte in 16): the key names its patterns build, each GET's
/// counted over as many elements as its `LIMIT` picks, of the mean length.
pub(super) fn pattern_work(ks: &Keyspace, now: LogTime, argv: &[Bytes]) -> u64 {
    let Some(key) = argv.get(1) else { return 0 };
    let Ok(q) = parse(argv.get(2..).unwrap_or(&[]), false, true) else { return 0 };
    let value = ks.get(key, now).map(|e| &e.value);
    let len = element_lengths(value).count();
    let total: u64 = element_lengths(value).map(|e| e as u64).sum();
    let (start, end) = window(len, q.limit_start, q.limit_count);
    let picked = if end >= start { (end - start + 1) as u64 } else { 0 };
    let mean = total.checked_div(len as u64).unwrap_or(0);
    let by = q.by.filter(|_| !q.dont_sort).map_or(0, |p| names_built(p, element_lengths(value)));
    let gets: u64 =
        q.gets.iter().filter(|g| c_str(g).contains(&b'*')).map(|g| picked * (g.len() as u64 + mean)).sum();
    by.saturating_add(gets) / 16
}

/// What the options of one `SORT` ask for.
struct Query<'a> {
    desc: bool,
    alpha: bool,
    limit_start: i64,
    limit_count: i64,
    /// `BY pattern`: the last one given.
    by: Option<&'a [u8]>,
    /// A `BY` pattern without `*` was given (Redis keeps this even if a
    /// later `BY` has one).
    dont_sort: bool,
    gets: Vec<&'a [u8]>,
    store: Option<&'a Bytes>,
}

/// The part of a pattern C's string functions see: up to its first NUL.
fn c_str(s: &[u8]) -> &[u8] {
    &s[..s.iter().position(|b| *b == 0).unwrap_or(s.len())]
}

/// Why a user without access to every key may not run a `SORT`: its first
/// `BY` pattern with a `*`, or `GET`, as Redis finds them while reading the
/// options (an earlier syntax error is the command's own answer).
pub fn refused_without_full_key_access(argv: &[Bytes]) -> Option<CmdError> {
    let readonly = argv.first().is_some_and(|name| name.eq_ignore_ascii_case(b"sort_ro"));
    match parse(argv.get(2..).unwrap_or_default(), readonly, false) {
        Err(e @ CmdError::Other(_)) => Some(e),
        _ => None,
    }
}

/// `options`: the arguments after the key. `full_key_access`: whether the
/// caller may read any key (`BY` and `GET` name keys by pattern).
fn parse(options: &[Bytes], readonly: bool, full_key_access: bool) -> Result<Query<'_>, CmdError> {
    let mut q = Query {
        desc: false,
        alpha: false,
        limit_start: 0,
        limit_count: -1,
        by: None,
        dont_sort: false,
        gets: Vec::new(),
        store: None,
    };
    let denied = |option: &str| {
        CmdError::Other(format!("ERR {option} option of SORT denied due to insufficient ACL permissions."))
    };
    let mut j = 0;
    while j < options.len() {
        let left = options.len() - j - 1;
        let word = &options[j][..];
        let is = |name: &str| word.eq_ignore_ascii_case(name.as_bytes());
        if is("asc") {
            q.desc = false;
        } else if is("desc") {
            q.desc = true;
        } else if is("alpha") {
            q.alpha = true;
        } else if is("limit") && left >= 2 {
            q.limit_start = parse_i64(&options[j + 1]).ok_or(ArgError::NotInteger)?;
            q.limit_count = parse_i64(&options[j + 2]).ok_or(ArgError::NotInteger)?;
            j += 2;
        } else if !readonly && is("store") && left >= 1 {
            q.store = Some(&options[j + 1]);
            j += 1;
        } else if is("by") && left >= 1 {
            let pattern = &options[j + 1][..];
            if !c_str(pattern).contains(&b'*') {
                q.dont_sort = true;
            } else if !full_key_access {
                return Err(denied("BY"));
            }
            q.by = Some(pattern);
            j += 1;
        } else if is("get") && left >= 1 {
            if !full_key_access {
                return Err(denied("GET"));
            }
            q.gets.push(&options[j + 1][..]);
            j += 1;
        } else {
            return Err(ArgError::Syntax.into());
        }
        j += 1;
    }
    Ok(q)
}

/// The value a pattern names for `element` (Redis's `lookupKeyByPattern`):
/// `#` is the element itself; otherwise the first `*` is replaced by it,
/// and the key so named must hold a string, or, for `key*->field`, a hash
/// with that field. `None` for anything else, and for a pattern without `*`.
fn lookup(ks: &Keyspace, now: LogTime, pattern: &[u8], element: &Bytes) -> Option<Bytes> {
    let visible = c_str(pattern);
    if visible == b"#" {
        return Some(element.clone());
    }
    let star = visible.iter().position(|b| *b == b'*')?;
    // `->` after the `*`, with something after it: a hash field.
    let arrow = visible[star + 1..].windows(2).position(|w| w == b"->").map(|i| star + 1 + i);
    let field = arrow.filter(|at| at + 2 < visible.len()).map(|at| &pattern[at + 2..]);
    let suffix_len = pattern.len() - star - 1 - field.map_or(0, |f| f.len() + 2);
    let mut key = Vec::with_capacity(star + element.len() + suffix_len);
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(&pattern[star + 1..star + 1 + suffix_len]);
    let entry = ks.get(&key, now)?;
    match (field, &entry.value) {
        (None, Value::Str(s)) => Some(s.to_bytes()),
        (Some(field), Value::Hash(h)) => h.get(field).cloned(),
        _ => None,
    }
}

/// An element and what it is ordered by.
struct Sortable {
    element: Bytes,
    score: f64,
    /// `ALPHA` with `BY`: the other key's value (`None` if it has none).
    text: Option<Bytes>,
}

/// A weight as `SORT` reads a number: C's `strtod` up to the first NUL, all
/// of it, in range and not NaN.
fn weight(raw: &[u8]) -> Option<f64> {
    match strtod_all(c_str(raw))? {
        (v, false) if !v.is_nan() => Some(v),
        _ => None,
    }
}

/// Indexes Redis's `LIMIT offset count` selects of `len` elements: `start..=end`
/// (empty when `end < start`).
fn window(len: usize, limit_start: i64, limit_count: i64) -> (i64, i64) {
    let n = len as i64;
    let mut start = limit_start.max(0).min(n);
    let count = limit_count.max(-1).min(n);
    let mut end = if count < 0 { n - 1 } else { start + count - 1 };
    if start >= n {
        start = n - 1;
        end = n - 2;
    }
    (start, end.min(n - 1))
}

/// The sorted (and limited) elements of `key`, each followed by its `GET`
/// values, or alone without `GET`: a reply's entries, or a stored list's.
fn run(ks: &Keyspace, now: LogTime, key: &Bytes, mut q: Query) -> Result<Vec<Option<Bytes>>, CmdError> {
    let value = match ks.get(key, now).map(|e| &e.value) {
        None => None,
        Some(v @ (Value::List(_) | Value::Set(_) | Value::ZSet(_))) => Some(v),
        Some(_) => return Err(CmdError::WrongType),
    };
    if q.dont_sort && matches!(value, Some(Value::Set(_))) {
        // A set has no order of its own worth keeping: strings' order.
        q.dont_sort = false;
        q.alpha = true;
        q.by = None;
    }
    let len = match value {
        Some(Value::List(l)) => l.len(),
        Some(Value::Set(s)) => s.len(),
        Some(Value::ZSet(z)) => z.len(),
        _ => 0,
    };
    let (start, end) = window(len, q.limit_start, q.limit_count);
    let picked = if end >= start { (end - start + 1) as usize } else { 0 };
    let out_len = picked * q.gets.len().max(1);
    if out_len > len.max(MAX_EXTRA_ITEMS) {
        return Err(CmdError::Other(format!(
            "ERR SORT would return {out_len} items: at most {MAX_EXTRA_ITEMS} with its GET patterns"
        )));
    }
    // The key names the patterns build: a pattern with `*` once for every
    // element it is used with (BY: all of them when sorting; GET: those
    // chosen, counted once they are).
    let too_many_names = || {
        CmdError::Other(format!("ERR SORT's BY and GET patterns would build more than {MAX_PATTERN_BYTES} bytes of key names"))
    };
    let by_bytes = q.by.filter(|_| !q.dont_sort).map_or(0, |p| names_built(p, element_lengths(value)));
    if by_bytes > MAX_PATTERN_BYTES {
        return Err(too_many_names());
    }
    let chosen: Vec<Bytes> = if q.dont_sort {
        // The list's or the sorted set's own order, from the tail for DESC.
        let (start, picked) = (start.max(0) as usize, picked);
        match value {
            Some(Value::List(l)) if q.desc => l.iter().rev().skip(start).take(picked).cloned().collect(),
            Some(Value::List(l)) => l.iter().skip(start).take(picked).cloned().collect(),
            Some(Value::ZSet(z)) => {
                let mut ranked: Vec<(&Bytes, f64)> = z.iter().map(|(m, s)| (m, *s)).collect();
                ranked.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(Ordering::Equal).then_with(|| a.0.cmp(b.0)));
                if q.desc {
                    ranked.reverse();
                }
                ranked.into_iter().skip(start).take(picked).map(|(m, _)| m.clone()).collect()
            }
            _ => Vec::new(),
        }
    } else {
        let elements: Vec<Bytes> = match value {
            Some(Value::List(l)) => l.iter().cloned().collect(),
            Some(Value::Set(s)) => s.iter().cloned().collect(),
            Some(Value::ZSet(z)) => z.keys().cloned().collect(),
            _ => Vec::new(),
        };
        let mut items = Vec::with_capacity(elements.len());
        let mut not_a_number = false;
        for element in elements {
            let by = match q.by {
                Some(pattern) => lookup(ks, now, pattern, &element),
                None => None,
            };
            let mut item = Sortable { element, score: 0.0, text: None };
            if q.alpha {
                item.text = by;
            } else if let Some(raw) = by.as_deref().or(if q.by.is_none() { Some(&item.element[..]) } else { None }) {
                match weight(raw) {
                    Some(score) => item.score = score,
                    None => not_a_number = true,
                }
            }
            items.push(item);
        }
        if not_a_number {
            return Err(CmdError::Other("ERR One or more scores can't be converted into double".into()));
        }
        let by_pattern = q.by.is_some();
        let order = |a: &Sortable, b: &Sortable| {
            let cmp = if !q.alpha {
                a.score.partial_cmp(&b.score).unwrap_or(Ordering::Equal).then_with(|| a.element.cmp(&b.element))
            } else if by_pattern {
                match (&a.text, &b.text) {
                    (Some(x), Some(y)) => x.cmp(y),
                    (x, y) => x.is_some().cmp(&y.is_some()),
                }
            } else {
                a.element.cmp(&b.element)
            };
            if q.desc { cmp.reverse() } else { cmp }
        };
        // Stable: equal weights keep the order they were read in.
        items.sort_by(order);
        items.into_iter().skip(start.max(0) as usize).take(picked).map(|i| i.element).collect()
    };
    let get_bytes: u64 = q.gets.iter().map(|g| names_built(g, chosen.iter().map(Bytes::len))).sum();
    if by_bytes.saturating_add(get_bytes) > MAX_PATTERN_BYTES {
        return Err(too_many_names());
    }
    // What the reply or the stored list holds, counted as it is built.
    let mut result_bytes = 0u64;
    let mut out = Vec::with_capacity(out_len);
    for element in chosen {
        if q.gets.is_empty() {
            result_bytes += element.len() as u64;
            out.push(Some(element));
        } else {
            for pattern in &q.gets {
                let found = lookup(ks, now, pattern, &element);
                result_bytes += found.as_ref().map_or(0, |v| v.len() as u64);
                out.push(found);
            }
        }
        if result_bytes > MAX_RESULT_BYTES {
            return Err(CmdError::Other(format!("ERR SORT would return more than {MAX_RESULT_BYTES} bytes")));
        }
    }
    Ok(out)
}

/// ```text
/// SORT key [BY pattern] [LIMIT offset count] [GET pattern [GET pattern ...]]
///     [ASC|DESC] [ALPHA] [STORE destination]
/// ```
/// The sorted elements (with their `GET` values), or with `STORE` their
/// number, stored as a list at `destination` (deleted if there are none).
pub fn sort(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let q = parse(args.rest(), false, true)?;
    let store = q.store.cloned();
    let found = run(ks, ctx.log_time, key, q)?;
    let Some(dst) = store else {
        return Ok(items_reply(found));
    };
    let count = found.len();
    if count > 0 {
        let list: VecDeque<Bytes> = found.into_iter().map(Option::unwrap_or_default).collect();
        ks.insert(dst.clone(), Entry::new(Value::List(Box::new(list)), ctx.version, ctx.log_time));
        ctx.key_event('l', "sortstore", &dst);
    } else if ks.get_mut(&dst, ctx).is_some() {
        ks.remove(&dst);
        ctx.key_event('g', "del", &dst);
    }
    Ok(Reply::Int(count as i64))
}

/// ```text
/// SORT_RO key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
/// ```
/// `SORT` without `STORE`, a read.
pub fn sort_ro(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let q = parse(args.rest(), true, true)?;
    Ok(items_reply(run(ks, ctx.now, key, q)?))
}

fn items_reply(items: Vec<Option<Bytes>>) -> Reply {
    Reply::Array(items.into_iter().map(|i| i.map_or(Reply::Nil, Reply::Bulk)).collect())
}

/// Where `SORT`'s `STORE` destination is in `argv`: after the last `STORE`,
/// skipping the arguments of `LIMIT`, `GET` and `BY` (Redis's `sortGetKeys`).
pub fn store_key_position(argv: &[Bytes]) -> Option<usize> {
    let mut found = None;
    let mut i = 2;
    while i < argv.len() {
        let word = &argv[i][..];
        if word.eq_ignore_ascii_case(b"limit") {
            i += 2;
        } else if word.eq_ignore_ascii_case(b"get") || word.eq_ignore_ascii_case(b"by") {
            i += 1;
        } else if word.eq_ignore_ascii_case(b"store") && i + 1 < argv.len() {
            found = Some(i + 1);
        }
        i += 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn texts(reply: Reply) -> Vec<String> {
        match reply {
            Reply::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                    Reply::Nil => "nil".into(),
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    fn keyspace(commands: &[&[&str]]) -> (Keyspace, ExecCtx) {
        let mut ks = Keyspace::new();
        let mut ctx = ExecCtx::new(1, 0, 0);
        for words in commands {
            let reply = crate::commands::execute_write(&mut ks, &mut ctx, &argv(words));
            assert!(!matches!(reply, Reply::Error(_)), "{words:?}: {reply:?}");
        }
        (ks, ctx)
    }

    fn sorted(ks: &Keyspace, words: &[&str]) -> Result<Vec<String>, CmdError> {
        sort_ro(ks, &ReadCtx::at(0), Args::new(&argv(&[&["sort_ro"], words].concat()))).map(texts)
    }

    #[test]
    fn patterns_are_read_as_redis_reads_them() {
        let (ks, _) = keyspace(&[
            &["RPUSH", "l", "a", "b"],
            &["MSET", "w_a", "2", "w_b", "1", "w_a->", "x", "w_b->", "y"],
            &["HSET", "h_a", "f", "A", "f\0g", "NUL"],
        ]);
        assert_eq!(sorted(&ks, &["l", "BY", "w_*"]).unwrap(), ["b", "a"]);
        // `->` with nothing after it is part of the key's name.
        assert_eq!(sorted(&ks, &["l", "ALPHA", "GET", "w_*->"]).unwrap(), ["x", "y"]);
        assert_eq!(sorted(&ks, &["l", "ALPHA", "GET", "h_*->f", "GET", "#", "GET", "nostar"]).unwrap(), [
            "A", "a", "nil", "nil", "b", "nil"
        ]);
        // C sees a pattern up to its first NUL: "#\0..." is "#", and a field
        // keeps its bytes after the NUL.
        assert_eq!(sorted(&ks, &["l", "ALPHA", "GET", "#\0junk"]).unwrap(), ["a", "b"]);
        assert_eq!(sorted(&ks, &["l", "ALPHA", "GET", "h_*->f\0g"]).unwrap(), ["NUL", "nil"]);
        // A `*` after a NUL is not seen: a constant BY, no sorting.
        assert_eq!(sorted(&ks, &["l", "BY", "w\0*", "DESC"]).unwrap(), ["b", "a"]);
    }

    #[test]
    fn equal_weights_keep_the_order_they_were_read_in() {
        let (ks, _) = keyspace(&[&["RPUSH", "l", "b", "c", "a"], &["MSET", "t_a", "same", "t_b", "same", "t_c", "same"]]);
        assert_eq!(sorted(&ks, &["l", "BY", "t_*", "ALPHA"]).unwrap(), ["b", "c", "a"]);
        assert_eq!(sorted(&ks, &["l", "BY", "t_*", "ALPHA", "DESC"]).unwrap(), ["b", "c", "a"]);
        // A missing weight sorts first (last with DESC).
        let (ks, _) = keyspace(&[&["RPUSH", "l", "b", "c", "a"], &["MSET", "t_a", "2", "t_b", "1"]]);
        assert_eq!(sorted(&ks, &["l", "BY", "t_*", "ALPHA"]).unwrap(), ["c", "b", "a"]);
        assert_eq!(sorted(&ks, &["l", "BY", "t_*", "ALPHA", "DESC"]).unwrap(), ["a", "b", "c"]);
        // Numbers tie-break on the elements' bytes.
        assert_eq!(sorted(&ks, &["l", "BY", "missing_*"]).unwrap(), ["a", "b", "c"]);
    }

    #[test]
    fn get_patterns_cannot_multiply_a_reply_beyond_memory() {
        let (ks, _) = keyspace(&[&["RPUSH", "l", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]]);
        let mut words = vec!["l"];
        words.extend(std::iter::repeat_n(["GET", "#"], MAX_EXTRA_ITEMS / 10).flatten());
        assert_eq!(sorted(&ks, &words).unwrap().len(), MAX_EXTRA_ITEMS);
        words.extend(["GET", "#"]);
        let e = sorted(&ks, &words).unwrap_err().to_string();
        assert_eq!(e, "ERR SORT would return 10000010 items: at most 10000000 with its GET patterns");
        // A LIMIT that keeps the reply small is fine.
        words.extend(["LIMIT", "0", "1"]);
        assert_eq!(sorted(&ks, &words).unwrap().len(), MAX_EXTRA_ITEMS / 10 + 1);
    }

    #[test]
    fn long_patterns_over_long_lists_are_refused() {
        let elements: Vec<String> = (0..1100).map(|i| i.to_string()).collect();
        let mut push = vec!["RPUSH", "l"];
        push.extend(elements.iter().map(String::as_str));
        let (ks, _) = keyspace(&[&push]);
        // 1,100 elements and a pattern of a million bytes: 1.1 GB of key names.
        let long = format!("w_*{}", "x".repeat(1_000_000));
        let e = sorted(&ks, &["l", "BY", &long]).unwrap_err().to_string();
        assert!(e.contains("would build more than"), "{e}");
        assert!(sorted(&ks, &["l", "GET", &long]).is_err());
        // Used with a few elements only, or as a constant, it is fine.
        assert_eq!(sorted(&ks, &["l", "LIMIT", "0", "2", "GET", &long]).unwrap(), ["nil", "nil"]);
        assert_eq!(sorted(&ks, &["l", "BY", &long[3..], "LIMIT", "0", "2"]).unwrap(), ["0", "1"]);
    }

    #[test]
    fn acl_refusals_come_where_redis_finds_them() {
        let refused = |words: &[&str]| refused_without_full_key_access(&argv(words)).map(|e| e.to_string());
        let by = "ERR BY option of SORT denied due to insufficient ACL permissions.";
        let get = "ERR GET option of SORT denied due to insufficient ACL permissions.";
        assert_eq!(refused(&["sort", "k", "BY", "w_*"]).as_deref(), Some(by));
        assert_eq!(refused(&["sort", "k", "BY", "nosort", "GET", "#"]).as_deref(), Some(get));
        assert_eq!(refused(&["sort", "k", "BY", "nosort", "LIMIT", "0", "1", "STORE", "d"]), None);
        // A syntax error before the option is the answer instead.
        assert_eq!(refused(&["sort", "k", "FOO", "BY", "w_*"]), None);
        assert_eq!(refused(&["sort_ro", "k", "STORE", "d", "GET", "#"]), None);
        assert_eq!(refused(&["sort", "k", "STORE", "d", "GET", "#"]).as_deref(), Some(get));
    }

    #[test]
    fn the_store_key_is_found_past_other_options_arguments() {
        let at = |words: &[&str]| store_key_position(&argv(words));
        assert_eq!(at(&["sort", "k", "STORE", "d"]), Some(3));
        assert_eq!(at(&["sort", "k", "LIMIT", "store", "x", "STORE", "d"]), Some(6));
        assert_eq!(at(&["sort", "k", "GET", "store", "BY", "STORE"]), None);
        assert_eq!(at(&["sort", "k", "STORE", "d1", "store", "d2"]), Some(5));
        assert_eq!(at(&["sort", "k", "STORE"]), None);
        let spec = crate::commands::lookup(b"sort").unwrap();
        let words = argv(&["sort", "k", "BY", "w_*", "STORE", "d"]);
        assert_eq!(spec.keys(&words).collect::<Vec<_>>(), [&words[1], &words[5]]);
    }

    #[test]
    fn store_replaces_the_destination_or_deletes_it() {
        let (mut ks, mut ctx) = keyspace(&[&["RPUSH", "l", "2", "1"], &["SET", "d", "old"]]);
        let run = |ks: &mut Keyspace, ctx: &mut ExecCtx, words: &[&str]| {
            sort(ks, ctx, Args::new(&argv(&[&["sort"], words].concat())))
        };
        assert!(matches!(run(&mut ks, &mut ctx, &["l", "STORE", "d"]), Ok(Reply::Int(2))));
        assert_eq!(sorted(&ks, &["d", "BY", "nosort"]).unwrap(), ["1", "2"]);
        assert!(matches!(run(&mut ks, &mut ctx, &["l", "LIMIT", "5", "1", "STORE", "d"]), Ok(Reply::Int(0))));
        assert!(ks.get(b"d", 0).is_none());
        assert!(matches!(run(&mut ks, &mut ctx, &["l", "GET", "nokey*", "STORE", "d"]), Ok(Reply::Int(2))));
        assert_eq!(sorted(&ks, &["d", "BY", "nosort"]).unwrap(), ["", ""]);
    }
}
