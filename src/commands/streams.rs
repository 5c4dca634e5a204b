//! Stream commands: XADD, XLEN, XRANGE, XREVRANGE, XDEL, XTRIM, XREAD,
//! XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO, XSETID,
//! with Redis 7's replies and errors.
//!
//! An ID made with `*` takes the milliseconds of the log entry's Unix time
//! (the same on every node), or the last ID's when that is later, so IDs
//! only grow, whatever a new leader's clock says. Idle times are counted
//! from that same time. `MAXLEN ~` and `MINID ~` trim whole runs of 100
//! entries from the head, as Redis trims whole nodes of its default
//! `stream-node-max-entries`. `XREAD` and `XREADGROUP` with `BLOCK` wait on
//! the client's connection (`server::connection`); each attempt is one of
//! these commands.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::keyspace::stream::{Consumer, Group, Pending, Stream, StreamEntry, StreamId, NODE_ENTRIES};
use crate::keyspace::{Entry, ExecCtx, Keyspace, LogTime, ReadCtx, Value};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

use super::{CmdError, CmdResult};

/// What `~` trims at most without `LIMIT` (Redis: 100 nodes).
const DEFAULT_APPROX_LIMIT: u64 = 100 * NODE_ENTRIES;

/// `XAUTOCLAIM`'s `COUNT` at most (Redis 7's `LONG_MAX / 16`).
const MAX_AUTOCLAIM_COUNT: i64 = i64::MAX / 16;

fn err(text: &str) -> CmdError {
    CmdError::Other(text.to_string())
}

fn invalid_id() -> CmdError {
    err("ERR Invalid stream ID specified as stream command argument")
}

fn upper(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).to_ascii_uppercase()
}

/// An unsigned decimal, digits only (what Redis's `string2ull` takes from a
/// client in practice).
fn parse_u64(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 20 || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// `ms-seq` or `ms` (then `missing_seq`); with `special`, `-` and `+` too.
fn parse_id_with(raw: &[u8], missing_seq: u64, special: bool) -> Result<StreamId, CmdError> {
    match raw {
        b"-" if special => return Ok(StreamId::MIN),
        b"+" if special => return Ok(StreamId::MAX),
        _ => {}
    }
    let (ms, seq) = match raw.iter().position(|b| *b == b'-') {
        Some(dash) => (parse_u64(&raw[..dash]), parse_u64(&raw[dash + 1..])),
        None => (parse_u64(raw), Some(missing_seq)),
    };
    match (ms, seq) {
        (Some(ms), Some(seq)) => Ok(StreamId::new(ms, seq)),
        _ => Err(invalid_id()),
    }
}

/// A strict ID (`XDEL`, `XACK`, `XCLAIM`, `XREAD`): no `-` or `+`.
fn parse_id(raw: &[u8]) -> Result<StreamId, CmdError> {
    parse_id_with(raw, 0, false)
}

/// The start of an interval: `-`, `+`, an ID (`ms` is `ms-0`), or `(ID`
/// (exclusive).
fn parse_start(raw: &[u8]) -> Result<StreamId, CmdError> {
    match raw.strip_prefix(b"(") {
        Some(rest) if !rest.is_empty() => {
            parse_id_with(rest, 0, false)?.next().ok_or_else(|| err("ERR invalid start ID for the interval"))
        }
        _ => parse_id_with(raw, 0, true),
    }
}

/// The end of an interval: `+`, `-`, an ID (`ms` is `ms-<max>`), or `(ID`.
fn parse_end(raw: &[u8]) -> Result<StreamId, CmdError> {
    match raw.strip_prefix(b"(") {
        Some(rest) if !rest.is_empty() => {
            parse_id_with(rest, u64::MAX, false)?.prev().ok_or_else(|| err("ERR invalid end ID for the interval"))
        }
        _ => parse_id_with(raw, u64::MAX, true),
    }
}

fn id_reply(id: StreamId) -> Reply {
    Reply::Bulk(Bytes::from(id.to_string()))
}

fn entry_reply(id: StreamId, entry: &StreamEntry) -> Reply {
    Reply::Array(vec![id_reply(id), Reply::Array(entry.fields.iter().cloned().map(Reply::Bulk).collect())])
}

/// The stream under `key` for reading (`WRONGTYPE` for another type).
fn read_stream<'a>(ks: &'a Keyspace, now: LogTime, key: &[u8]) -> Result<Option<&'a Stream>, CmdError> {
    match ks.get(key, now).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Stream(s)) => Ok(Some(s)),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Whether `key` holds a stream (or nothing): `WRONGTYPE` otherwise.
fn check_stream(ks: &mut Keyspace, ctx: &mut ExecCtx, key: &Bytes) -> Result<bool, CmdError> {
    match ks.get_mut(key, ctx).map(|e| &e.value) {
        None => Ok(false),
        Some(Value::Stream(_)) => Ok(true),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// The stream under `key` for changing it in place (it must exist: see
/// [`check_stream`]).
fn stream_mut<'a>(ks: &'a mut Keyspace, ctx: &mut ExecCtx, key: &Bytes) -> Option<&'a mut Stream> {
    let entry = ks.get_mut(key, ctx)?;
    entry.rewritten(ctx.version, ctx.log_time);
    match &mut entry.value {
        Value::Stream(s) => Some(s),
        _ => None,
    }
}

/// How a stream is trimmed (`XADD`'s and `XTRIM`'s options).
#[derive(Debug, Clone, Copy)]
enum Threshold {
    MaxLen(u64),
    MinId(StreamId),
}

#[derive(Debug, Clone, Copy)]
struct Trim {
    threshold: Threshold,
    approx: bool,
    /// At most this many entries removed (0: no limit).
    limit: u64,
}

/// Parses `XADD`'s options (`NOMKSTREAM`, `MAXLEN`, `MINID`, `LIMIT`) and
/// its ID, or `XTRIM`'s options, in Redis's order and with its errors.
/// Returns the trim, `NOMKSTREAM`, and for `XADD` the ID argument's index.
fn parse_trim_args(argv: &[Bytes], xadd: bool) -> Result<(Option<Trim>, bool, usize), CmdError> {
    let mut threshold = None;
    let mut approx = false;
    let mut limit = None;
    let mut nomkstream = false;
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - 1 - i;
        let word = upper(&argv[i]);
        match word.as_str() {
            "*" if xadd => break,
            "MAXLEN" | "MINID" if more > 0 => {
                if threshold.is_some() {
                    return Err(err("ERR syntax error, MAXLEN and MINID options at the same time are not compatible"));
                }
                approx = false;
                if more >= 2 && (argv[i + 1][..] == b"~"[..] || argv[i + 1][..] == b"="[..]) {
                    approx = argv[i + 1][..] == b"~"[..];
                    i += 1;
                }
                let raw = &argv[i + 1];
                threshold = Some(if word == "MAXLEN" {
                    let n = parse_i64(raw).ok_or(CmdError::Arg(ArgError::NotInteger))?;
                    if n < 0 {
                        return Err(err("ERR The MAXLEN argument must be >= 0."));
                    }
                    Threshold::MaxLen(n as u64)
                } else {
                    Threshold::MinId(parse_id(raw)?)
                });
                i += 2;
            }
            "LIMIT" if more > 0 => {
                let n = parse_i64(&argv[i + 1]).ok_or(CmdError::Arg(ArgError::NotInteger))?;
                if n < 0 {
                    return Err(err("ERR The LIMIT argument must be >= 0."));
                }
                limit = Some(n as u64);
                i += 2;
            }
            "NOMKSTREAM" if xadd => {
                nomkstream = true;
                i += 1;
            }
            _ if xadd => break,
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    if limit.is_some_and(|l| l > 0) && threshold.is_none() {
        return Err(err("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"));
    }
    if !xadd && threshold.is_none() {
        return Err(err("ERR syntax error, XTRIM must be called with a trimming strategy"));
    }
    if limit.is_some() && !approx {
        return Err(err("ERR syntax error, LIMIT cannot be used without the special ~ option"));
    }
    let limit = if approx { limit.unwrap_or(DEFAULT_APPROX_LIMIT) } else { 0 };
    Ok((threshold.map(|threshold| Trim { threshold, approx, limit }), nomkstream, i))
}

/// Trims `stream` from its head, as Redis does: whole nodes while the rest
/// is still over the threshold (and the limit allows), then, unless `~`,
/// single entries. The number of entries removed.
fn trim(stream: &mut Stream, trim: Trim) -> u64 {
    let mut removed = 0u64;
    loop {
        let Some(node) = stream.entries.first_key_value().map(|(_, e)| e.node) else { break };
        let ids: Vec<StreamId> = stream.entries.iter().take_while(|(_, e)| e.node == node).map(|(id, _)| *id).collect();
        let n = ids.len() as u64;
        if trim.limit > 0 && removed + n > trim.limit {
            break;
        }
        let len = stream.entries.len() as u64;
        let whole = match trim.threshold {
            Threshold::MaxLen(max) => len - n >= max,
            Threshold::MinId(min) => ids.last().is_some_and(|last| *last < min),
        };
        if whole {
            ids.iter().for_each(|id| drop(stream.entries.remove(id)));
            removed += n;
            continue;
        }
        if !trim.approx {
            for id in ids {
                let over = match trim.threshold {
                    Threshold::MaxLen(max) => stream.entries.len() as u64 > max,
                    Threshold::MinId(min) => id < min,
                };
                if !over {
                    break;
                }
                stream.entries.remove(&id);
                removed += 1;
            }
        }
        break;
    }
    removed
}

/// ```text
/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value [field value ...]
/// ```
/// The new entry's ID; nil with `NOMKSTREAM` and no stream.
pub fn xadd(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    let argv = args.all();
    let key = argv[1].clone();
    let (trim_by, nomkstream, at) = parse_trim_args(argv, true)?;
    let fields = argv.get(at + 1..).unwrap_or(&[]);
    if at >= argv.len() || fields.len() < 2 || fields.len() % 2 != 0 {
        return Err(CmdError::Arity("xadd"));
    }
    // The ID: `*`, `ms-*`, `ms-seq` or `ms`.
    let raw = &argv[at][..];
    let given = match raw {
        b"*" => None,
        _ => match raw.strip_suffix(b"-*") {
            Some(ms) => Some((parse_u64(ms).ok_or_else(invalid_id)?, None)),
            None => {
                let id = parse_id(raw)?;
                if id.is_zero() {
                    return Err(err("ERR The ID specified in XADD must be greater than 0-0"));
                }
                Some((id.ms, Some(id.seq)))
            }
        },
    };
    let exists = check_stream(ks, ctx, &key)?;
    if !exists && nomkstream {
        return Ok(Reply::Nil);
    }
    let last = match ks.get(&key, ctx.log_time).map(|e| &e.value) {
        Some(Value::Stream(s)) => s.last_id,
        _ => StreamId::MIN,
    };
    if last == StreamId::MAX {
        return Err(err("ERR The stream has exhausted the last possible ID, unable to add more items"));
    }
    let smaller = || err("ERR The ID specified in XADD is equal or smaller than the target stream top item");
    let id = match given {
        None if ctx.unix_ms > last.ms => StreamId::new(ctx.unix_ms, 0),
        None => last.next().ok_or_else(smaller)?,
        Some((ms, Some(seq))) => StreamId::new(ms, seq),
        Some((ms, None)) if ms == last.ms => last.next().filter(|n| n.ms == ms).ok_or_else(smaller)?,
        Some((ms, None)) => StreamId::new(ms, 0),
    };
    if id <= last {
        return Err(smaller());
    }
    if !exists {
        ks.insert(key.clone(), Entry::new(Value::Stream(Box::default()), ctx.version, ctx.log_time));
    }
    let Some(stream) = stream_mut(ks, ctx, &key) else { return Err(CmdError::WrongType) };
    stream.append(id, fields.to_vec());
    stream.last_id = id;
    stream.added += 1;
    let trimmed = trim_by.map_or(0, |t| trim(stream, t));
    ctx.key_event('t', "xadd", &key);
    if trimmed > 0 {
        ctx.key_event('t', "xtrim", &key);
    }
    Ok(id_reply(id))
}

/// ```text
/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]
/// ```
/// The number of entries removed.
pub fn xtrim(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    let argv = args.all();
    let key = argv[1].clone();
    let (Some(how), _, _) = parse_trim_args(argv, false)? else { return Err(CmdError::Arg(ArgError::Syntax)) };
    if !check_stream(ks, ctx, &key)? {
        return Ok(Reply::Int(0));
    }
    let Some(stream) = stream_mut(ks, ctx, &key) else { return Ok(Reply::Int(0)) };
    let removed = trim(stream, how);
    if removed > 0 {
        ctx.key_event('t', "xtrim", &key);
    }
    Ok(Reply::Int(removed as i64))
}

/// ```text
/// XLEN key
/// ```
pub fn xlen(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(Reply::Int(read_stream(ks, ctx.now, key)?.map_or(0, |s| s.entries.len() as i64)))
}

/// `[COUNT n]` after an interval: `None` for no limit, `Some(0)` for
/// `COUNT` 0 or less.
fn range_count(mut args: Args) -> Result<Option<usize>, CmdError> {
    let mut count = None;
    while args.remaining() > 0 {
        if args.remaining() >= 2 && upper(args.peek().map_or(&b""[..], |b| &b[..])) == "COUNT" {
            args.next_bytes()?;
            count = Some(args.next_i64()?.max(0) as usize);
        } else {
            return Err(CmdError::Arg(ArgError::Syntax));
        }
    }
    Ok(count)
}

fn range(ks: &Keyspace, ctx: &ReadCtx, mut args: Args, rev: bool) -> CmdResult {
    let key = args.next_bytes()?;
    let (first, second) = (args.next_bytes()?, args.next_bytes()?);
    let (start, end) = if rev { (parse_start(second)?, parse_end(first)?) } else { (parse_start(first)?, parse_end(second)?) };
    let count = range_count(args)?;
    let Some(stream) = read_stream(ks, ctx.now, key)? else { return Ok(Reply::Array(vec![])) };
    if count == Some(0) {
        return Ok(Reply::NilArray);
    }
    if start > end {
        return Ok(Reply::Array(vec![]));
    }
    let limit = count.unwrap_or(usize::MAX);
    let found = stream.entries.range(start..=end);
    let items: Vec<Reply> = if rev {
        found.rev().take(limit).map(|(id, f)| entry_reply(*id, f)).collect()
    } else {
        found.take(limit).map(|(id, f)| entry_reply(*id, f)).collect()
    };
    Ok(Reply::Array(items))
}

/// ```text
/// XRANGE key start end [COUNT count]
/// ```
pub fn xrange(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    range(ks, ctx, args, false)
}

/// ```text
/// XREVRANGE key end start [COUNT count]
/// ```
pub fn xrevrange(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    range(ks, ctx, args, true)
}

/// ```text
/// XDEL key id [id ...]
/// ```
/// The number of entries deleted.
pub fn xdel(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    // As Redis: a missing key or another type before the IDs are checked.
    if !check_stream(ks, ctx, &key)? {
        return Ok(Reply::Int(0));
    }
    let ids = args.rest().iter().map(|raw| parse_id(raw)).collect::<Result<Vec<_>, _>>()?;
    let Some(stream) = stream_mut(ks, ctx, &key) else { return Ok(Reply::Int(0)) };
    let mut deleted = 0;
    for id in ids {
        if stream.entries.remove(&id).is_some() {
            deleted += 1;
            stream.max_deleted = stream.max_deleted.max(id);
        }
    }
    if deleted > 0 {
        ctx.key_event('t', "xdel", &key);
    }
    Ok(Reply::Int(deleted))
}

/// Where `XREAD`'s or `XREADGROUP`'s arguments are: `BLOCK`'s position, if
/// any, and `STREAMS`'s; `None` if they do not parse that far (the command
/// then replies its error).
pub fn read_layout(argv: &[Bytes]) -> Option<(Option<usize>, usize)> {
    let mut block = None;
    let mut i = 1;
    while i < argv.len() {
        let more = argv.len() - 1 - i;
        match upper(&argv[i]).as_str() {
            "BLOCK" if more > 0 => {
                block = Some(i);
                i += 2;
            }
            "COUNT" if more > 0 => i += 2,
            "STREAMS" if more > 0 => return Some((block, i)),
            "GROUP" if more >= 2 => i += 3,
            "NOACK" => i += 1,
            _ => return None,
        }
    }
    None
}

/// The keys of `XREAD`/`XREADGROUP` (the first half of what follows
/// `STREAMS`): their positions in `argv`.
pub fn read_key_positions(argv: &[Bytes]) -> std::ops::Range<usize> {
    match read_layout(argv) {
        // Half of what follows STREAMS, rounded down, as Redis's key spec
        // counts them (an odd count is the command's syntax error, after
        // the ACL check of those keys).
        Some((_, at)) => at + 1..at + 1 + (argv.len() - at - 1) / 2,
        _ => 0..0,
    }
}

/// `XREAD`'s and `XREADGROUP`'s parsed arguments.
struct ReadArgs<'a> {
    /// 0: no limit.
    count: usize,
    group: Option<(&'a Bytes, &'a Bytes)>,
    noack: bool,
    keys: &'a [Bytes],
    ids: &'a [Bytes],
}

fn parse_read(argv: &[Bytes], xreadgroup: bool) -> Result<ReadArgs<'_>, CmdError> {
    let mut out = ReadArgs { count: 0, group: None, noack: false, keys: &[], ids: &[] };
    let mut streams = None;
    let mut i = 1;
    while i < argv.len() {
        let more = argv.len() - 1 - i;
        match upper(&argv[i]).as_str() {
            "BLOCK" if more > 0 => {
                let ms = parse_i64(&argv[i + 1])
                    .ok_or_else(|| err("ERR timeout is not an integer or out of range"))?;
                if ms < 0 {
                    return Err(err("ERR timeout is negative"));
                }
                i += 2;
            }
            "COUNT" if more > 0 => {
                out.count = parse_i64(&argv[i + 1]).ok_or(CmdError::Arg(ArgError::NotInteger))?.max(0) as usize;
                i += 2;
            }
            "STREAMS" if more > 0 => {
                let rest = &argv[i + 1..];
                if rest.len() % 2 != 0 {
                    // Redis 7.0's words, for XREADGROUP too.
                    return Err(err(
                        "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                    ));
                }
                let (keys, ids) = rest.split_at(rest.len() / 2);
                (out.keys, out.ids) = (keys, ids);
                streams = Some(i);
                break;
            }
            "GROUP" if more >= 2 => {
                if !xreadgroup {
                    return Err(err("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."));
                }
                out.group = Some((&argv[i + 1], &argv[i + 2]));
                i += 3;
            }
            "NOACK" => {
                if !xreadgroup {
                    return Err(err("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."));
                }
                out.noack = true;
                i += 1;
            }
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    if streams.is_none() {
        return Err(CmdError::Arg(ArgError::Syntax));
    }
    if xreadgroup && out.group.is_none() {
        return Err(err("ERR Missing GROUP option for XREADGROUP"));
    }
    Ok(out)
}

/// What to read from one stream: after an ID, or (`XREADGROUP`) `>`.
#[derive(Clone, Copy)]
enum From {
    After(StreamId),
    New,
}

fn parse_read_id(raw: &[u8], last: Option<StreamId>, xreadgroup: bool) -> Result<From, CmdError> {
    match raw {
        b"$" if xreadgroup => Err(err(
            "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by \
             specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
        )),
        b"$" => Ok(From::After(last.unwrap_or(StreamId::MIN))),
        b">" if xreadgroup => Ok(From::New),
        b">" => Err(err(
            "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
        )),
        _ => parse_id(raw).map(From::After),
    }
}

/// ```text
/// XREAD [COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]
/// ```
/// For each stream with entries after its ID, `[key, entries]` (a map in
/// RESP3); nil if none has any. This is one attempt: with `BLOCK`, the
/// client's connection waits for an `XADD` and tries again.
pub fn xread(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    let a = parse_read(args.all(), false)?;
    let mut froms = Vec::with_capacity(a.keys.len());
    for (key, raw) in a.keys.iter().zip(a.ids) {
        let stream = read_stream(ks, ctx.now, key)?;
        froms.push(parse_read_id(raw, stream.map(|s| s.last_id), false)?);
    }
    let limit = if a.count == 0 { usize::MAX } else { a.count };
    let mut out = Vec::new();
    for (key, from) in a.keys.iter().zip(froms) {
        let (Some(stream), From::After(after)) = (read_stream(ks, ctx.now, key)?, from) else { continue };
        let Some(start) = after.next() else { continue };
        let items: Vec<Reply> = stream.entries.range(start..).take(limit).map(|(id, f)| entry_reply(*id, f)).collect();
        if !items.is_empty() {
            out.push((Reply::Bulk(key.clone()), Reply::Array(items)));
        }
    }
    Ok(if out.is_empty() { Reply::NilArray } else { Reply::NestedMap(out) })
}

fn no_group(key: &[u8], group: &[u8], command: &str) -> CmdError {
    CmdError::Other(format!(
        "NOGROUP No such key '{}' or consumer group '{}'{command}",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

/// The consumer `name` of `group`, created if missing (with its event);
/// seen now.
fn consumer<'a>(group: &'a mut Group, name: &Bytes, now: u64, created: &mut bool) -> &'a mut Consumer {
    let c = group.consumers.entry(name.clone()).or_insert_with(|| {
        *created = true;
        Consumer::default()
    });
    c.seen_ms = now;
    c
}

/// ```text
/// XREADGROUP GROUP group consumer [COUNT count] [BLOCK milliseconds] [NOACK] STREAMS key [key ...] id [id ...]
/// ```
/// With `>`, entries never delivered to the group, now pending for the
/// consumer (unless `NOACK`); with an ID, the consumer's pending entries
/// after it (an entry deleted since as `[id, nil]`).
pub fn xreadgroup(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    let a = parse_read(args.all(), true)?;
    let Some((group_name, consumer_name)) = a.group else { return Err(CmdError::Arg(ArgError::Syntax)) };
    let mut froms = Vec::with_capacity(a.keys.len());
    for (key, raw) in a.keys.iter().zip(a.ids) {
        let stream = read_stream(ks, ctx.log_time, key)?;
        if !stream.is_some_and(|s| s.groups.contains_key(group_name)) {
            return Err(no_group(key, group_name, " in XREADGROUP with GROUP option"));
        }
        froms.push(parse_read_id(raw, None, true)?);
    }
    let now = ctx.unix_ms;
    let limit = if a.count == 0 { usize::MAX } else { a.count };
    let mut out = Vec::new();
    for (key, from) in a.keys.iter().zip(froms) {
        let Some(stream) = stream_mut(ks, ctx, key) else { continue };
        let mut created = false;
        let items = match from {
            From::After(after) => {
                let Some(group) = stream.groups.get_mut(group_name) else { continue };
                let mine: Vec<StreamId> = match after.next() {
                    Some(start) => {
                        consumer(group, consumer_name, now, &mut created).pending.range(start..).take(limit).copied().collect()
                    }
                    None => {
                        consumer(group, consumer_name, now, &mut created);
                        Vec::new()
                    }
                };
                let mut items = Vec::with_capacity(mine.len());
                for id in mine {
                    match stream.entries.get(&id) {
                        Some(fields) => {
                            if let Some(p) = group.pending.get_mut(&id) {
                                p.delivered_ms = now;
                                p.deliveries += 1;
                            }
                            items.push(entry_reply(id, fields));
                        }
                        None => items.push(Reply::Array(vec![id_reply(id), Reply::NilArray])),
                    }
                }
                Some(items)
            }
            From::New => {
                let Some(last) = stream.groups.get(group_name).map(|g| g.last_delivered) else { continue };
                let new: Vec<StreamId> = match last.next() {
                    Some(start) => stream.entries.range(start..).take(limit).map(|(id, _)| *id).collect(),
                    None => Vec::new(),
                };
                if new.is_empty() {
                    None
                } else {
                    let mut items = Vec::with_capacity(new.len());
                    for id in new {
                        stream.advance_group(group_name, id);
                        items.push(entry_reply(id, &stream.entries[&id]));
                        let Some(group) = stream.groups.get_mut(group_name) else { continue };
                        let c = consumer(group, consumer_name, now, &mut created);
                        c.active_ms = Some(now);
                        if !a.noack {
                            c.pending.insert(id);
                            let pending = Pending { consumer: consumer_name.clone(), delivered_ms: now, deliveries: 1 };
                            if let Some(before) = group.pending.insert(id, pending) {
                                // `XGROUP SETID` moved the group back: the
                                // entry changes hands.
                                if before.consumer != *consumer_name {
                                    if let Some(owner) = group.consumers.get_mut(&before.consumer) {
                                        owner.pending.remove(&id);
                                    }
                                }
                            }
                        }
                    }
                    Some(items)
                }
            }
        };
        if created {
            ctx.key_event('t', "xgroup-createconsumer", key);
        }
        if let Some(items) = items {
            out.push((Reply::Bulk(key.clone()), Reply::Array(items)));
        }
    }
    Ok(if out.is_empty() { Reply::NilArray } else { Reply::NestedMap(out) })
}

/// ```text
/// XACK key group id [id ...]
/// ```
/// The number of pending entries acknowledged.
pub fn xack(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let group_name = args.next_bytes()?.clone();
    // As Redis 7.0: the type, then a missing key or group (0), then the IDs.
    let has_group = read_stream(ks, ctx.log_time, &key)?.is_some_and(|s| s.groups.contains_key(&group_name));
    if !has_group {
        return Ok(Reply::Int(0));
    }
    let ids = args.rest().iter().map(|raw| parse_id(raw)).collect::<Result<Vec<_>, _>>()?;
    let Some(stream) = stream_mut(ks, ctx, &key) else { return Ok(Reply::Int(0)) };
    let Some(group) = stream.groups.get_mut(&group_name) else { return Ok(Reply::Int(0)) };
    let mut acked = 0;
    for id in ids {
        if let Some(p) = group.pending.remove(&id) {
            if let Some(c) = group.consumers.get_mut(&p.consumer) {
                c.pending.remove(&id);
            }
            acked += 1;
        }
    }
    Ok(Reply::Int(acked))
}

/// ```text
/// XPENDING key group [[IDLE min-idle-time] start end count [consumer]]
/// ```
pub fn xpending(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let group_name = args.next_bytes()?;
    let rest = args.rest();
    // The extended form's arguments, checked before the key is read.
    let extended = if rest.is_empty() {
        None
    } else {
        let (min_idle, rest) = match rest {
            [idle, ms, rest @ ..] if idle.eq_ignore_ascii_case(b"idle") => {
                (Some(parse_i64(ms).ok_or(CmdError::Arg(ArgError::NotInteger))?), rest)
            }
            _ => (None, rest),
        };
        if min_idle.is_some() && rest.is_empty() {
            return Err(CmdError::Arg(ArgError::Syntax));
        }
        let [start, end, count, consumer @ ..] = rest else { return Err(CmdError::Arg(ArgError::Syntax)) };
        // As Redis: at most 9 arguments in all; one past the consumer is
        // ignored.
        if args.all().len() > 9 {
            return Err(CmdError::Arg(ArgError::Syntax));
        }
        let count = parse_i64(count).ok_or(CmdError::Arg(ArgError::NotInteger))?.max(0) as usize;
        Some((min_idle, parse_start(start)?, parse_end(end)?, count, consumer.first()))
    };
    let stream = read_stream(ks, ctx.now, key)?;
    let Some(group) = stream.and_then(|s| s.groups.get(group_name)) else {
        return Err(no_group(key, group_name, ""));
    };
    let now = ctx.unix_ms;
    let Some((min_idle, start, end, count, consumer)) = extended else {
        if group.pending.is_empty() {
            return Ok(Reply::Array(vec![Reply::Int(0), Reply::Nil, Reply::Nil, Reply::NilArray]));
        }
        let first = group.pending.keys().next().copied().unwrap_or_default();
        let last = group.pending.keys().next_back().copied().unwrap_or_default();
        let mut per: BTreeMap<&Bytes, u64> = BTreeMap::new();
        for p in group.pending.values() {
            *per.entry(&p.consumer).or_default() += 1;
        }
        let consumers =
            per.into_iter().map(|(c, n)| Reply::Array(vec![Reply::Bulk(c.clone()), Reply::Bulk(Bytes::from(n.to_string()))]));
        return Ok(Reply::Array(vec![
            Reply::Int(group.pending.len() as i64),
            id_reply(first),
            id_reply(last),
            Reply::Array(consumers.collect()),
        ]));
    };
    if start > end || count == 0 {
        return Ok(Reply::Array(vec![]));
    }
    let idle_of = |p: &Pending| now.saturating_sub(p.delivered_ms);
    let ids: Box<dyn Iterator<Item = StreamId>> = match consumer {
        Some(name) => match group.consumers.get(name) {
            Some(c) => Box::new(c.pending.range(start..=end).copied()),
            None => return Ok(Reply::Array(vec![])),
        },
        None => Box::new(group.pending.range(start..=end).map(|(id, _)| *id)),
    };
    let mut out = Vec::new();
    for id in ids {
        if out.len() >= count {
            break;
        }
        let Some(p) = group.pending.get(&id) else { continue };
        if min_idle.is_some_and(|min| (idle_of(p) as i64) < min) {
            continue;
        }
        out.push(Reply::Array(vec![
            id_reply(id),
            Reply::Bulk(p.consumer.clone()),
            Reply::Int(idle_of(p) as i64),
            Reply::Int(p.deliveries as i64),
        ]));
    }
    Ok(Reply::Array(out))
}

/// Gives pending entry `id` to `consumer` (delivered at `at`); the entry
/// must be pending.
fn hand_over(group: &mut Group, id: StreamId, consumer: &Bytes, at: u64, count_delivery: bool) {
    let Some(p) = group.pending.get_mut(&id) else { return };
    let before = std::mem::replace(&mut p.consumer, consumer.clone());
    p.delivered_ms = at;
    if count_delivery {
        p.deliveries += 1;
    }
    if let Some(c) = group.consumers.get_mut(&before) {
        c.pending.remove(&id);
    }
    if let Some(c) = group.consumers.get_mut(consumer) {
        c.pending.insert(id);
    }
}

/// ```text
/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-milliseconds] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]
/// ```
/// The entries claimed (their IDs with `JUSTID`).
pub fn xclaim(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let group_name = args.next_bytes()?.clone();
    let consumer_name = args.next_bytes()?.clone();
    // As Redis: the type and the group first.
    let exists = read_stream(ks, ctx.log_time, &key)?.is_some_and(|s| s.groups.contains_key(&group_name));
    if !exists {
        return Err(no_group(&key, &group_name, ""));
    }
    let min_idle = parse_i64(args.next_bytes()?)
        .ok_or_else(|| err("ERR Invalid min-idle-time argument for XCLAIM"))?
        .max(0) as u64;
    let rest = args.rest();
    // IDs until the first argument that is not one, then options.
    let split = rest.iter().position(|raw| parse_id(raw).is_err()).unwrap_or(rest.len());
    let ids: Vec<StreamId> = rest[..split].iter().filter_map(|raw| parse_id(raw).ok()).collect();
    let now = ctx.unix_ms;
    let (mut delivered_at, mut retry, mut force, mut justid, mut lastid) = (now, None, false, false, None);
    let options = &rest[split..];
    let mut i = 0;
    while i < options.len() {
        let option = &options[i];
        let value = options.get(i + 1);
        let unrecognized =
            || CmdError::Other(format!("ERR Unrecognized XCLAIM option '{}'", String::from_utf8_lossy(option)));
        let word = upper(option);
        match (word.as_str(), value) {
            ("FORCE", _) => force = true,
            ("JUSTID", _) => justid = true,
            ("IDLE", Some(v)) => {
                let ms = parse_i64(v).ok_or_else(|| err("ERR Invalid IDLE option argument for XCLAIM"))?;
                // Longer ago than 1970, or in the future: now, as Redis has it.
                delivered_at = u64::try_from(ms).ok().and_then(|ms| now.checked_sub(ms)).unwrap_or(now);
                i += 1;
            }
            ("TIME", Some(v)) => {
                let at = parse_i64(v).ok_or_else(|| err("ERR Invalid TIME option argument for XCLAIM"))?;
                delivered_at = u64::try_from(at).ok().filter(|at| *at <= now).unwrap_or(now);
                i += 1;
            }
            ("RETRYCOUNT", Some(v)) => {
                let n = parse_i64(v).ok_or_else(|| err("ERR Invalid RETRYCOUNT option argument for XCLAIM"))?;
                retry = Some(n.max(0) as u64);
                i += 1;
            }
            ("LASTID", Some(v)) => {
                lastid = Some(parse_id(v)?);
                i += 1;
            }
            _ => return Err(unrecognized()),
        }
        i += 1;
    }
    let Some(stream) = stream_mut(ks, ctx, &key) else { return Err(no_group(&key, &group_name, "")) };
    let Some(group) = stream.groups.get_mut(&group_name) else { return Err(no_group(&key, &group_name, "")) };
    if let Some(last) = lastid.filter(|l| *l > group.last_delivered) {
        group.last_delivered = last;
    }
    let mut created = false;
    consumer(group, &consumer_name, now, &mut created);
    let mut out = Vec::new();
    for id in ids {
        let Some(fields) = stream.entries.get(&id) else {
            // Deleted from the stream: no longer pending either.
            if let Some(p) = group.pending.remove(&id) {
                if let Some(c) = group.consumers.get_mut(&p.consumer) {
                    c.pending.remove(&id);
                }
            }
            continue;
        };
        let forced = !group.pending.contains_key(&id);
        if forced {
            if !force {
                continue;
            }
            // A new pending entry, as if delivered now (min-idle-time does
            // not apply to it).
            let p = Pending { consumer: consumer_name.clone(), delivered_ms: now, deliveries: 1 };
            group.pending.insert(id, p);
            if let Some(c) = group.consumers.get_mut(&consumer_name) {
                c.pending.insert(id);
            }
        }
        let idle = group.pending.get(&id).map_or(0, |p| now.saturating_sub(p.delivered_ms));
        if !forced && min_idle > 0 && idle < min_idle {
            continue;
        }
        hand_over(group, id, &consumer_name, delivered_at, !justid && retry.is_none());
        if let (Some(n), Some(p)) = (retry, group.pending.get_mut(&id)) {
            p.deliveries = n;
        }
        if let Some(c) = group.consumers.get_mut(&consumer_name) {
            c.active_ms = Some(now);
        }
        out.push(if justid { id_reply(id) } else { entry_reply(id, fields) });
    }
    if created {
        ctx.key_event('t', "xgroup-createconsumer", &key);
    }
    Ok(Reply::Array(out))
}

/// ```text
/// XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]
/// ```
/// `[next start, claimed entries, IDs deleted from the stream]`.
pub fn xautoclaim(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let group_name = args.next_bytes()?.clone();
    let consumer_name = args.next_bytes()?.clone();
    let min_idle = parse_i64(args.next_bytes()?)
        .ok_or_else(|| err("ERR Invalid min-idle-time argument for XAUTOCLAIM"))?
        .max(0) as u64;
    let start = parse_start(args.next_bytes()?)?;
    let (mut count, mut justid) = (100i64, false);
    while args.remaining() > 0 {
        match args.next_keyword()?.as_str() {
            "COUNT" if args.remaining() > 0 => {
                count = args.next_i64()?;
                if !(1..=MAX_AUTOCLAIM_COUNT).contains(&count) {
                    return Err(err("ERR COUNT must be > 0"));
                }
            }
            "JUSTID" => justid = true,
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    let exists = read_stream(ks, ctx.log_time, &key)?.is_some_and(|s| s.groups.contains_key(&group_name));
    if !exists {
        return Err(no_group(&key, &group_name, ""));
    }
    let now = ctx.unix_ms;
    let Some(stream) = stream_mut(ks, ctx, &key) else { return Err(no_group(&key, &group_name, "")) };
    let Some(group) = stream.groups.get_mut(&group_name) else { return Err(no_group(&key, &group_name, "")) };
    let mut created = false;
    consumer(group, &consumer_name, now, &mut created);
    // `count` bounds the reply (claimed and deleted), `count * 10` the
    // entries looked at.
    let mut count = count as usize;
    let mut attempts = count.saturating_mul(10);
    let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
    let mut next = StreamId::MIN;
    let candidates: Vec<StreamId> = group.pending.range(start..).map(|(id, _)| *id).take(attempts).collect();
    let mut ids = candidates.into_iter();
    let mut last_seen = None;
    while attempts > 0 && count > 0 {
        let Some(id) = ids.next() else { break };
        attempts -= 1;
        last_seen = Some(id);
        let Some(fields) = stream.entries.get(&id) else {
            if let Some(p) = group.pending.remove(&id) {
                if let Some(c) = group.consumers.get_mut(&p.consumer) {
                    c.pending.remove(&id);
                }
            }
            deleted.push(id_reply(id));
            count -= 1;
            continue;
        };
        let idle = group.pending.get(&id).map_or(0, |p| now.saturating_sub(p.delivered_ms));
        if min_idle > 0 && idle < min_idle {
            continue;
        }
        hand_over(group, id, &consumer_name, now, !justid);
        if let Some(c) = group.consumers.get_mut(&consumer_name) {
            c.active_ms = Some(now);
        }
        claimed.push(if justid { id_reply(id) } else { entry_reply(id, fields) });
        count -= 1;
    }
    // The cursor: the pending entry after the last one looked at (0-0 at
    // the end).
    if let Some(after) = last_seen.and_then(StreamId::next) {
        next = group.pending.range(after..).next().map_or(StreamId::MIN, |(id, _)| *id);
    }
    if created {
        ctx.key_event('t', "xgroup-createconsumer", &key);
    }
    Ok(Reply::Array(vec![id_reply(next), Reply::Array(claimed), Reply::Array(deleted)]))
}

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

fn help(lines: &[&str]) -> Reply {
    Reply::Array(lines.iter().map(|l| Reply::Status(l.to_string())).collect())
}

fn unknown_subcommand(command: &str, sub: &[u8]) -> CmdError {
    CmdError::Other(format!("ERR unknown subcommand '{}'. Try {command} HELP.", String::from_utf8_lossy(sub)))
}

/// A subcommand given the wrong number of arguments (`xgroup|create`).
fn subcommand_arity(command: &str, sub: &str) -> CmdError {
    CmdError::Other(format!(
        "ERR wrong number of arguments for '{}|{}' command",
        command.to_ascii_lowercase(),
        sub.to_ascii_lowercase()
    ))
}

/// Options a subcommand does not take (`sub` as the client wrote it).
fn subcommand_syntax(command: &str, sub: &[u8]) -> CmdError {
    CmdError::Other(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {command} HELP.",
        String::from_utf8_lossy(sub)
    ))
}

/// `ENTRIESREAD n` after `XGROUP CREATE`'s or `SETID`'s ID.
fn entries_read_option(raw: &Bytes) -> Result<Option<u64>, CmdError> {
    let n = parse_i64(raw).ok_or(CmdError::Arg(ArgError::NotInteger))?;
    if n < 0 && n != -1 {
        return Err(err("ERR value for ENTRIESREAD must be positive or -1"));
    }
    Ok(u64::try_from(n).ok())
}

/// ```text
/// XGROUP CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER|HELP ...
/// ```
pub fn xgroup(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    let argv = args.all();
    let sub = upper(&argv[1]);
    let n = argv.len();
    let arity_ok = match sub.as_str() {
        "CREATE" | "SETID" => n >= 5,
        "DESTROY" => n == 4,
        "CREATECONSUMER" | "DELCONSUMER" => n == 5,
        "HELP" => n == 2,
        _ => return Err(unknown_subcommand("XGROUP", &argv[1])),
    };
    if !arity_ok {
        return Err(subcommand_arity("XGROUP", &sub));
    }
    if sub == "HELP" {
        return Ok(help(XGROUP_HELP));
    }
    let (key, group_name) = (argv[2].clone(), argv[3].clone());
    // CREATE's options, checked before the key.
    let (mut mkstream, mut entries_read) = (false, None);
    if sub == "CREATE" || sub == "SETID" {
        let mut i = 5;
        while i < n {
            match upper(&argv[i]).as_str() {
                "MKSTREAM" if sub == "CREATE" => {
                    mkstream = true;
                    i += 1;
                }
                "ENTRIESREAD" if i + 1 < n => {
                    entries_read = entries_read_option(&argv[i + 1])?;
                    i += 2;
                }
                _ => return Err(subcommand_syntax("XGROUP", &argv[1])),
            }
        }
    }
    let stream = read_stream(ks, ctx.log_time, &key)?;
    if stream.is_none() && !(sub == "CREATE" && mkstream) {
        return Err(err(
            "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
        ));
    }
    let last = stream.map_or(StreamId::MIN, |s| s.last_id);
    let has_group = stream.is_some_and(|s| s.groups.contains_key(&group_name));
    let missing_group = || {
        CmdError::Other(format!(
            "NOGROUP No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(&group_name),
            String::from_utf8_lossy(&key)
        ))
    };
    let target = |raw: &Bytes| if &raw[..] == b"$" { Ok(last) } else { parse_id(raw) };
    match sub.as_str() {
        "CREATE" => {
            let id = target(&argv[4])?;
            if has_group {
                return Err(err("BUSYGROUP Consumer Group name already exists"));
            }
            if stream.is_none() {
                ks.insert(key.clone(), Entry::new(Value::Stream(Box::default()), ctx.version, ctx.log_time));
            }
            let Some(s) = stream_mut(ks, ctx, &key) else { return Err(CmdError::WrongType) };
            s.groups.insert(group_name, Group { last_delivered: id, entries_read, ..Group::default() });
            ctx.key_event('t', "xgroup-create", &key);
            Ok(Reply::ok())
        }
        "SETID" => {
            // As Redis: the group first; `-` and `+` are IDs here.
            if !has_group {
                return Err(missing_group());
            }
            let id = if &argv[4][..] == b"$" { last } else { parse_id_with(&argv[4], 0, true)? };
            let Some(s) = stream_mut(ks, ctx, &key) else { return Err(CmdError::WrongType) };
            if let Some(g) = s.groups.get_mut(&group_name) {
                g.last_delivered = id;
                g.entries_read = entries_read;
            }
            ctx.key_event('t', "xgroup-setid", &key);
            Ok(Reply::ok())
        }
        "DESTROY" => {
            if !has_group {
                return Ok(Reply::Int(0));
            }
            let Some(s) = stream_mut(ks, ctx, &key) else { return Err(CmdError::WrongType) };
            s.groups.remove(&group_name);
            ctx.key_event('t', "xgroup-destroy", &key);
            Ok(Reply::Int(1))
        }
        "CREATECONSUMER" => {
            if !has_group {
                return Err(missing_group());
            }
            let now = ctx.unix_ms;
            let Some(s) = stream_mut(ks, ctx, &key) else { return Err(CmdError::WrongType) };
            let Some(g) = s.groups.get_mut(&group_name) else { return Err(missing_group()) };
            if g.consumers.contains_key(&argv[4]) {
                return Ok(Reply::Int(0));
            }
            g.consumers.insert(argv[4].clone(), Consumer { seen_ms: now, ..Consumer::default() });
            ctx.key_event('t', "xgroup-createconsumer", &key);
            Ok(Reply::Int(1))
        }
        _ => {
            // DELCONSUMER: the number of entries it had pending.
            if !has_group {
                return Err(missing_group());
            }
            let Some(s) = stream_mut(ks, ctx, &key) else { return Err(CmdError::WrongType) };
            let Some(g) = s.groups.get_mut(&group_name) else { return Err(missing_group()) };
            let Some(c) = g.consumers.remove(&argv[4]) else { return Ok(Reply::Int(0)) };
            for id in &c.pending {
                g.pending.remove(id);
            }
            ctx.key_event('t', "xgroup-delconsumer", &key);
            Ok(Reply::Int(c.pending.len() as i64))
        }
    }
}

/// ```text
/// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]
/// ```
pub fn xsetid(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let id = parse_id(args.next_bytes()?)?;
    let (mut added, mut max_deleted) = (None, None);
    while args.remaining() > 0 {
        match args.next_keyword()?.as_str() {
            "ENTRIESADDED" if args.remaining() > 0 => {
                let n = args.next_i64()?;
                if n < 0 {
                    return Err(err("ERR entries_added must be positive"));
                }
                added = Some(n as u64);
            }
            "MAXDELETEDID" if args.remaining() > 0 => {
                let m = parse_id(args.next_bytes()?)?;
                if id < m {
                    return Err(err("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"));
                }
                max_deleted = Some(m);
            }
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
    }
    let Some(stream) = read_stream(ks, ctx.log_time, &key)? else { return Err(err("ERR no such key")) };
    if let Some(top) = stream.entries.keys().next_back() {
        if id < *top {
            return Err(err("ERR The ID specified in XSETID is smaller than the target stream top item"));
        }
        if added.is_some_and(|a| a < stream.entries.len() as u64) {
            return Err(err("ERR The entries_added specified in XSETID is smaller than the target stream length"));
        }
    }
    let Some(stream) = stream_mut(ks, ctx, &key) else { return Err(CmdError::WrongType) };
    stream.last_id = id;
    if let Some(a) = added {
        stream.added = a;
    }
    if let Some(m) = max_deleted {
        stream.max_deleted = m;
    }
    ctx.key_event('t', "xsetid", &key);
    Ok(Reply::ok())
}

fn text(s: &str) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn opt_int(v: Option<u64>) -> Reply {
    v.map_or(Reply::Nil, |n| Reply::Int(n as i64))
}

fn opt_signed(v: Option<i64>) -> Reply {
    v.map_or(Reply::Nil, Reply::Int)
}

/// `XINFO GROUPS`'s map for one group.
fn group_info(stream: &Stream, name: &Bytes, g: &Group) -> Reply {
    Reply::Map(vec![
        (text("name"), Reply::Bulk(name.clone())),
        (text("consumers"), Reply::Int(g.consumers.len() as i64)),
        (text("pending"), Reply::Int(g.pending.len() as i64)),
        (text("last-delivered-id"), id_reply(g.last_delivered)),
        (text("entries-read"), opt_int(g.entries_read)),
        (text("lag"), opt_signed(stream.lag(g))),
    ])
}

/// ```text
/// XINFO STREAM key [FULL [COUNT count]] | GROUPS key | CONSUMERS key group | HELP
/// ```
pub fn xinfo(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    let argv = args.all();
    let sub = upper(&argv[1]);
    let n = argv.len();
    let arity_ok = match sub.as_str() {
        "STREAM" => n >= 3,
        "GROUPS" => n == 3,
        "CONSUMERS" => n == 4,
        "HELP" => n == 2,
        _ => return Err(unknown_subcommand("XINFO", &argv[1])),
    };
    if !arity_ok {
        return Err(subcommand_arity("XINFO", &sub));
    }
    if sub == "HELP" {
        return Ok(help(XINFO_HELP));
    }
    let key = &argv[2];
    let Some(stream) = read_stream(ks, ctx.now, key)? else { return Err(err("ERR no such key")) };
    let now = ctx.unix_ms;
    match sub.as_str() {
        "GROUPS" => Ok(Reply::Array(stream.groups.iter().map(|(name, g)| group_info(stream, name, g)).collect())),
        "CONSUMERS" => {
            let Some(g) = stream.groups.get(&argv[3]) else {
                return Err(CmdError::Other(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    String::from_utf8_lossy(&argv[3]),
                    String::from_utf8_lossy(key)
                )));
            };
            let consumers = g.consumers.iter().map(|(name, c)| {
                Reply::Map(vec![
                    (text("name"), Reply::Bulk(name.clone())),
                    (text("pending"), Reply::Int(c.pending.len() as i64)),
                    (text("idle"), Reply::Int(now.saturating_sub(c.seen_ms) as i64)),
                    (text("inactive"), Reply::Int(c.active_ms.map_or(-1, |a| now.saturating_sub(a) as i64))),
                ])
            });
            Ok(Reply::Array(consumers.collect()))
        }
        _ => {
            let mut full = false;
            let mut count = 10usize;
            let mut i = 3;
            while i < n {
                match upper(&argv[i]).as_str() {
                    "FULL" if !full => {
                        full = true;
                        i += 1;
                    }
                    "COUNT" if full && i + 1 < n => {
                        let c = parse_i64(&argv[i + 1]).ok_or(CmdError::Arg(ArgError::NotInteger))?;
                        // 0: every entry; below 0: the default, as Redis.
                        count = match c {
                            0 => usize::MAX,
                            c if c < 0 => 10,
                            c => c as usize,
                        };
                        i += 2;
                    }
                    _ => return Err(subcommand_syntax("XINFO", &argv[1])),
                }
            }
            let nodes = stream.nodes() as i64;
            let recorded_first = stream.first_id().unwrap_or_default();
            let mut info = vec![
                (text("length"), Reply::Int(stream.entries.len() as i64)),
                (text("radix-tree-keys"), Reply::Int(nodes)),
                (text("radix-tree-nodes"), Reply::Int(nodes + 1)),
                (text("last-generated-id"), id_reply(stream.last_id)),
                (text("max-deleted-entry-id"), id_reply(stream.max_deleted)),
                (text("entries-added"), Reply::Int(stream.added as i64)),
                (text("recorded-first-entry-id"), id_reply(recorded_first)),
            ];
            if !full {
                let first = stream.entries.iter().next().map_or(Reply::Nil, |(id, f)| entry_reply(*id, f));
                let last = stream.entries.iter().next_back().map_or(Reply::Nil, |(id, f)| entry_reply(*id, f));
                info.push((text("groups"), Reply::Int(stream.groups.len() as i64)));
                info.push((text("first-entry"), first));
                info.push((text("last-entry"), last));
                return Ok(Reply::Map(info));
            }
            let entries = stream.entries.iter().take(count).map(|(id, f)| entry_reply(*id, f)).collect();
            info.push((text("entries"), Reply::Array(entries)));
            let groups = stream.groups.iter().map(|(name, g)| {
                let pel = g.pending.iter().take(count).map(|(id, p)| {
                    Reply::Array(vec![
                        id_reply(*id),
                        Reply::Bulk(p.consumer.clone()),
                        Reply::Int(p.delivered_ms as i64),
                        Reply::Int(p.deliveries as i64),
                    ])
                });
                let consumers = g.consumers.iter().map(|(cname, c)| {
                    let pel = c.pending.iter().take(count).filter_map(|id| {
                        let p = g.pending.get(id)?;
                        Some(Reply::Array(vec![id_reply(*id), Reply::Int(p.delivered_ms as i64), Reply::Int(p.deliveries as i64)]))
                    });
                    Reply::Map(vec![
                        (text("name"), Reply::Bulk(cname.clone())),
                        (text("seen-time"), Reply::Int(c.seen_ms as i64)),
                        (text("active-time"), Reply::Int(c.active_ms.map_or(-1, |a| a as i64))),
                        (text("pel-count"), Reply::Int(c.pending.len() as i64)),
                        (text("pending"), Reply::Array(pel.collect())),
                    ])
                });
                Reply::Map(vec![
                    (text("name"), Reply::Bulk(name.clone())),
                    (text("last-delivered-id"), id_reply(g.last_delivered)),
                    (text("entries-read"), opt_int(g.entries_read)),
                    (text("lag"), opt_signed(stream.lag(g))),
                    (text("pel-count"), Reply::Int(g.pending.len() as i64)),
                    (text("pending"), Reply::Array(pel.collect())),
                    (text("consumers"), Reply::Array(consumers.collect())),
                ])
            });
            info.push((text("groups"), Reply::Array(groups.collect())));
            Ok(Reply::Map(info))
        }
    }
}

/// How many elements a stream command touches at most, for the entry's
/// budget (`commands::work_of`), where that is less than the whole stream:
/// a read with `COUNT` (`XRANGE`, `XREAD`, `XREADGROUP`), `XAUTOCLAIM`'s
/// scan (`COUNT` x 10), `XINFO` without `FULL`. `None` for the others (the
/// stream's size).
pub(super) fn work(ks: &Keyspace, now: LogTime, name: &str, argv: &[Bytes]) -> Option<u64> {
    let size = |key: &Bytes, of: fn(&Stream) -> usize| -> u64 {
        match ks.get(key, now).map(|e| &e.value) {
            Some(Value::Stream(s)) => of(s) as u64,
            _ => 0,
        }
    };
    let at_most = |n: usize| if n == 0 { u64::MAX } else { n as u64 };
    match name {
        "xrange" | "xrevrange" => {
            let count = range_count(Args::new(argv.get(3..)?)).ok()?.map_or(u64::MAX, |c| c as u64);
            Some(size(argv.get(1)?, |s| s.entries.len()).min(count).max(1))
        }
        "xread" | "xreadgroup" => {
            let a = parse_read(argv, name == "xreadgroup").ok()?;
            let per = at_most(a.count);
            Some(a.keys.iter().map(|k| size(k, |s| s.entries.len()).min(per).max(1)).sum())
        }
        "xautoclaim" => {
            let mut count = 100u64;
            let mut i = 6;
            while i + 1 < argv.len() {
                if argv[i].eq_ignore_ascii_case(b"count") {
                    count = parse_i64(&argv[i + 1]).map_or(100, |c| c.max(1) as u64);
                }
                i += 1;
            }
            let pending = |s: &Stream| s.groups.values().map(|g| g.pending.len()).max().unwrap_or(0);
            Some(size(argv.get(1)?, pending).min(count.saturating_mul(10)).max(1))
        }
        "xinfo" if !argv.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"full")) => Some(1),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn write(ks: &mut Keyspace, unix_ms: u64, f: fn(&mut Keyspace, &mut ExecCtx, Args) -> CmdResult, words: &[&str]) -> Reply {
        let mut ctx = ExecCtx::new(ks.last_version() + 1, 1, unix_ms);
        let a = argv(words);
        f(ks, &mut ctx, Args::new(&a)).unwrap_or_else(Reply::from)
    }

    fn read(ks: &Keyspace, unix_ms: u64, f: fn(&Keyspace, &ReadCtx, Args) -> CmdResult, words: &[&str]) -> Reply {
        let ctx = ReadCtx { now: 1, clock_now: 1, unix_ms, seed: 0 };
        let a = argv(words);
        f(ks, &ctx, Args::new(&a)).unwrap_or_else(Reply::from)
    }

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn ids_parse_as_redis_parses_them() {
        assert_eq!(parse_id(b"5").unwrap(), StreamId::new(5, 0));
        assert_eq!(parse_id(b"5-7").unwrap(), StreamId::new(5, 7));
        for bad in [&b""[..], b"-", b"+", b"5-", b"-5", b"a-1", b"1-b", b"18446744073709551616", b"1-2-3", b" 1"] {
            assert!(parse_id(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_start(b"-").unwrap(), StreamId::MIN);
        assert_eq!(parse_end(b"+").unwrap(), StreamId::MAX);
        assert_eq!(parse_end(b"5").unwrap(), StreamId::new(5, u64::MAX));
        assert_eq!(parse_start(b"(5-1").unwrap(), StreamId::new(5, 2));
        assert_eq!(parse_end(b"(5-0").unwrap(), StreamId::new(4, u64::MAX));
        assert!(parse_start(b"(+").is_err());
        assert!(parse_end(b"(-").is_err());
    }

    #[test]
    fn ids_only_grow_whatever_the_clock_says() {
        let mut ks = Keyspace::default();
        assert_eq!(write(&mut ks, 1000, xadd, &["xadd", "s", "*", "f", "v"]), bulk("1000-0"));
        assert_eq!(write(&mut ks, 1000, xadd, &["xadd", "s", "*", "f", "v"]), bulk("1000-1"));
        // A leader whose clock is behind.
        assert_eq!(write(&mut ks, 900, xadd, &["xadd", "s", "*", "f", "v"]), bulk("1000-2"));
        assert_eq!(write(&mut ks, 900, xadd, &["xadd", "s", "1000-*", "f", "v"]), bulk("1000-3"));
        assert_eq!(write(&mut ks, 900, xadd, &["xadd", "s", "2000-*", "f", "v"]), bulk("2000-0"));
        let smaller = Reply::error("ERR The ID specified in XADD is equal or smaller than the target stream top item");
        assert_eq!(write(&mut ks, 900, xadd, &["xadd", "s", "2000-0", "f", "v"]), smaller);
        assert_eq!(write(&mut ks, 900, xadd, &["xadd", "s", "1999-*", "f", "v"]), smaller);
        assert_eq!(
            write(&mut ks, 900, xadd, &["xadd", "t", "0-0", "f", "v"]),
            Reply::error("ERR The ID specified in XADD must be greater than 0-0")
        );
        assert_eq!(write(&mut ks, 900, xadd, &["xadd", "s", "*", "f"]), Reply::error("ERR wrong number of arguments for 'xadd' command"));
        assert_eq!(read(&ks, 0, xlen, &["xlen", "s"]), Reply::Int(5));
        assert_eq!(write(&mut ks, 0, xsetid, &["xsetid", "s", &format!("{}-{}", u64::MAX, u64::MAX)]), Reply::ok());
        assert_eq!(
            write(&mut ks, 0, xadd, &["xadd", "s", "*", "f", "v"]),
            Reply::error("ERR The stream has exhausted the last possible ID, unable to add more items")
        );
    }

    #[test]
    fn trimming_exact_and_by_whole_nodes() {
        let mut ks = Keyspace::default();
        for i in 1..=250 {
            write(&mut ks, 0, xadd, &["xadd", "s", &format!("{i}-0"), "f", "v"]);
        }
        // 190 over: `~` takes one node of 100, `=` the exact count.
        assert_eq!(write(&mut ks, 0, xtrim, &["xtrim", "s", "MAXLEN", "~", "60"]), Reply::Int(100));
        assert_eq!(write(&mut ks, 0, xtrim, &["xtrim", "s", "MAXLEN", "~", "60", "LIMIT", "50"]), Reply::Int(0));
        assert_eq!(write(&mut ks, 0, xtrim, &["xtrim", "s", "MAXLEN", "60"]), Reply::Int(90));
        assert_eq!(write(&mut ks, 0, xtrim, &["xtrim", "s", "MINID", "200"]), Reply::Int(9));
        assert_eq!(read(&ks, 0, xlen, &["xlen", "s"]), Reply::Int(51));
        assert_eq!(
            write(&mut ks, 0, xtrim, &["xtrim", "s", "MAXLEN", "1", "LIMIT", "5"]),
            Reply::error("ERR syntax error, LIMIT cannot be used without the special ~ option")
        );
        assert_eq!(
            write(&mut ks, 0, xadd, &["xadd", "s", "MAXLEN", "2", "*", "f", "v"]),
            bulk("250-1"),
            "the clock (0) is behind the last ID"
        );
        assert_eq!(read(&ks, 0, xlen, &["xlen", "s"]), Reply::Int(2));
    }

    #[test]
    fn ranges_and_reads() {
        let mut ks = Keyspace::default();
        for i in 1..=5 {
            write(&mut ks, 0, xadd, &["xadd", "s", &format!("{i}-0"), "n", &i.to_string()]);
        }
        let ids = |r: Reply| -> Vec<String> {
            let Reply::Array(items) = r else { panic!("{r:?}") };
            items
                .into_iter()
                .map(|e| match e {
                    Reply::Array(p) => match &p[0] {
                        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                        other => panic!("{other:?}"),
                    },
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        assert_eq!(ids(read(&ks, 0, xrange, &["xrange", "s", "(2", "+"])), ["3-0", "4-0", "5-0"]);
        assert_eq!(ids(read(&ks, 0, xrevrange, &["xrevrange", "s", "+", "-", "COUNT", "2"])), ["5-0", "4-0"]);
        assert_eq!(read(&ks, 0, xrange, &["xrange", "s", "-", "+", "COUNT", "0"]), Reply::NilArray);
        assert_eq!(write(&mut ks, 0, xdel, &["xdel", "s", "3-0", "9-0"]), Reply::Int(1));
        assert_eq!(ids(read(&ks, 0, xrange, &["xrange", "s", "2", "4"])), ["2-0", "4-0"]);
        let Reply::NestedMap(streams) = read(&ks, 0, xread, &["xread", "COUNT", "1", "STREAMS", "s", "missing", "1", "0"]) else {
            panic!()
        };
        assert_eq!(streams.len(), 1);
        assert_eq!(ids(streams[0].1.clone()), ["2-0"]);
        assert_eq!(read(&ks, 0, xread, &["xread", "STREAMS", "s", "$"]), Reply::NilArray);
        assert_eq!(
            read(&ks, 0, xread, &["xread", "STREAMS", "s", "a", "0"]),
            Reply::error("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.")
        );
        assert_eq!(read_key_positions(&argv(&["xread", "BLOCK", "0", "STREAMS", "a", "b", "0", "0"])), 4..6);
        assert_eq!(read_key_positions(&argv(&["xreadgroup", "GROUP", "g", "c", "STREAMS", "a", ">"])), 5..6);
    }

    #[test]
    fn a_group_delivers_once_tracks_pending_and_lag() {
        let mut ks = Keyspace::default();
        for i in 1..=3 {
            write(&mut ks, 0, xadd, &["xadd", "s", &format!("{i}-0"), "n", &i.to_string()]);
        }
        assert_eq!(write(&mut ks, 0, xgroup, &["xgroup", "CREATE", "s", "g", "0"]), Reply::ok());
        assert_eq!(
            write(&mut ks, 0, xgroup, &["xgroup", "CREATE", "s", "g", "0"]),
            Reply::error("BUSYGROUP Consumer Group name already exists")
        );
        let Reply::Array(groups) = read(&ks, 0, xinfo, &["xinfo", "GROUPS", "s"]) else { panic!() };
        let Reply::Map(info) = &groups[0] else { panic!() };
        assert_eq!(info[4], (text("entries-read"), Reply::Nil));
        assert_eq!(info[5], (text("lag"), Reply::Int(3)));
        let first = write(&mut ks, 1000, xreadgroup, &["xreadgroup", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">"]);
        let Reply::NestedMap(got) = first else { panic!("{first:?}") };
        let Reply::Array(entries) = &got[0].1 else { panic!() };
        assert_eq!(entries.len(), 2);
        let Reply::Array(groups) = read(&ks, 0, xinfo, &["xinfo", "GROUPS", "s"]) else { panic!() };
        let Reply::Map(info) = &groups[0] else { panic!() };
        assert_eq!(info[2], (text("pending"), Reply::Int(2)));
        assert_eq!(info[3], (text("last-delivered-id"), bulk("2-0")));
        assert_eq!(info[4], (text("entries-read"), Reply::Int(2)));
        assert_eq!(info[5], (text("lag"), Reply::Int(1)));
        // The history: what alice has pending, a delivery more each.
        let again = write(&mut ks, 1500, xreadgroup, &["xreadgroup", "GROUP", "g", "alice", "STREAMS", "s", "0"]);
        let Reply::NestedMap(got) = again else { panic!() };
        let Reply::Array(entries) = &got[0].1 else { panic!() };
        assert_eq!(entries.len(), 2);
        let pending = read(&ks, 2000, xpending, &["xpending", "s", "g", "-", "+", "10"]);
        assert_eq!(
            pending,
            Reply::Array(vec![
                Reply::Array(vec![bulk("1-0"), bulk("alice"), Reply::Int(500), Reply::Int(2)]),
                Reply::Array(vec![bulk("2-0"), bulk("alice"), Reply::Int(500), Reply::Int(2)]),
            ])
        );
        // Bob claims what has been idle 400 ms; an entry deleted since is
        // dropped from the pending list.
        write(&mut ks, 0, xdel, &["xdel", "s", "2-0"]);
        let claimed = write(&mut ks, 2000, xclaim, &["xclaim", "s", "g", "bob", "400", "1-0", "2-0", "JUSTID"]);
        assert_eq!(claimed, Reply::Array(vec![bulk("1-0")]));
        assert_eq!(
            read(&ks, 2000, xpending, &["xpending", "s", "g"]),
            Reply::Array(vec![
                Reply::Int(1),
                bulk("1-0"),
                bulk("1-0"),
                Reply::Array(vec![Reply::Array(vec![bulk("bob"), bulk("1")])]),
            ])
        );
        assert_eq!(write(&mut ks, 2000, xack, &["xack", "s", "g", "1-0", "1-0"]), Reply::Int(1));
        assert_eq!(
            write(&mut ks, 0, xreadgroup, &["xreadgroup", "GROUP", "nog", "c", "STREAMS", "s", ">"]),
            Reply::error("NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option")
        );
        let auto = write(&mut ks, 9000, xautoclaim, &["xautoclaim", "s", "g", "carol", "0", "0", "COUNT", "5"]);
        assert_eq!(auto, Reply::Array(vec![bulk("0-0"), Reply::Array(vec![]), Reply::Array(vec![])]));
        assert_eq!(write(&mut ks, 0, xgroup, &["xgroup", "DELCONSUMER", "s", "g", "alice"]), Reply::Int(0));
        assert_eq!(write(&mut ks, 0, xgroup, &["xgroup", "DESTROY", "s", "g"]), Reply::Int(1));
    }

    #[test]
    fn a_stream_survives_a_snapshot() {
        let mut ks = Keyspace::default();
        write(&mut ks, 5, xadd, &["xadd", "s", "*", "f", "v"]);
        write(&mut ks, 5, xgroup, &["xgroup", "CREATE", "s", "g", "$"]);
        write(&mut ks, 6, xadd, &["xadd", "s", "*", "f", "w"]);
        write(&mut ks, 7, xreadgroup, &["xreadgroup", "GROUP", "g", "c", "STREAMS", "s", ">"]);
        let back = Keyspace::decode(&ks.encode()).unwrap();
        assert_eq!(back.digest(), ks.digest());
        assert_eq!(
            read(&back, 7, xpending, &["xpending", "s", "g", "-", "+", "9"]),
            Reply::Array(vec![Reply::Array(vec![bulk("6-0"), bulk("c"), Reply::Int(0), Reply::Int(1)])])
        );
    }
}
