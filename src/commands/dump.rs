//! `DUMP` and `RESTORE`: a key's value in Redis's serialization, the object
//! format of its RDB files followed by the RDB version (2 bytes) and a CRC64
//! of everything before it (8 bytes), both little-endian.
//!
//! `DUMP` writes the plain forms every Redis since 2.x reads (a string, with
//! small integers in their integer encoding; a list, set or hash as a count
//! and strings; a sorted set with binary scores), uncompressed, under RDB
//! version 10 (Redis 7.0's). `RESTORE` reads those and what Redis 7.0 and its
//! predecessors write: LZF-compressed strings, quicklists of listpacks or
//! ziplists, listpacks, ziplists and intsets. Every length in a payload is
//! checked against the bytes that are there, and what LZF may expand is
//! bounded, so that no payload, however made, can panic or exhaust a node:
//! `RESTORE` is applied from the log on every node, and an entry that cannot
//! be applied would stop the cluster.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use super::zsets::strtod_all;
use super::{CmdError, CmdResult};
use crate::keyspace::{Entry, ExecCtx, Keyspace, ReadCtx, Str, Value};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

/// The RDB version `DUMP` writes and the newest `RESTORE` accepts (Redis 7.0's).
pub const RDB_VERSION: u16 = 10;

/// The most bytes the LZF-compressed strings of one payload may expand to:
/// the longest string a command builds (`super::strings::MAX_BUILT_STRING_LEN`,
/// 64 MiB). Redis allows its `proto-max-bulk-len` (512 MiB), which a 6 MB
/// payload of back references reaches; here every replica, every replay of
/// the log and every snapshot would hold it.
const MAX_EXPANDED_BYTES: usize = super::MAX_REQUEST_BYTES;

const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_LIST_ZIPLIST: u8 = 10;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST: u8 = 14;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;

// ---------------------------------------------------------------------------
// CRC64 (Jones polynomial, reflected, as Redis's crc64.c computes it)
// ---------------------------------------------------------------------------

/// The reflected form of the polynomial 0xad93d23594c935a9.
const CRC64_POLY: u64 = 0x95ac_9329_ac4b_c9b5;

const CRC64_TABLE: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ CRC64_POLY } else { crc >> 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

pub fn crc64(data: &[u8]) -> u64 {
    data.iter().fold(0u64, |crc, b| CRC64_TABLE[((crc ^ u64::from(*b)) & 0xff) as usize] ^ (crc >> 8))
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

fn put_len(out: &mut Vec<u8>, n: usize) {
    let n = n as u64;
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend([0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend((n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend(n.to_be_bytes());
    }
}

/// A string, in an integer encoding where Redis would use one: decimal
/// text of an integer that fits in 32 bits, written canonically.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(n) = parse_i64(s).filter(|n| n.to_string().as_bytes() == s) {
            if let Ok(n) = i8::try_from(n) {
                out.extend([0xc0, n as u8]);
                return;
            } else if let Ok(n) = i16::try_from(n) {
                out.push(0xc1);
                out.extend(n.to_le_bytes());
                return;
            } else if let Ok(n) = i32::try_from(n) {
                out.push(0xc2);
                out.extend(n.to_le_bytes());
                return;
            }
        }
    }
    put_len(out, s.len());
    out.extend_from_slice(s);
}

/// The `DUMP` payload of `value`; `None` for a stream (Redis writes its
/// listpacks, which raftlock does not).
pub fn serialize(value: &Value) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match value {
        Value::Stream(_) => return None,
        Value::Str(s) => {
            out.push(TYPE_STRING);
            put_string(&mut out, s);
        }
        Value::List(l) => {
            out.push(TYPE_LIST);
            put_len(&mut out, l.len());
            l.iter().for_each(|e| put_string(&mut out, e));
        }
        Value::Set(s) => {
            out.push(TYPE_SET);
            put_len(&mut out, s.len());
            s.iter().for_each(|m| put_string(&mut out, m));
        }
        Value::Hash(h) => {
            out.push(TYPE_HASH);
            put_len(&mut out, h.len());
            for (field, value) in h {
                put_string(&mut out, field);
                put_string(&mut out, value);
            }
        }
        Value::ZSet(z) => {
            out.push(TYPE_ZSET_2);
            put_len(&mut out, z.len());
            for (member, score) in z {
                put_string(&mut out, member);
                out.extend(score.to_le_bytes());
            }
        }
    }
    out.extend(RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend(crc.to_le_bytes());
    Some(out)
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

/// Why a payload was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Too short, a newer RDB version, or a checksum that does not match.
    Footer,
    /// Anything wrong inside.
    Format,
    /// More elements than [`MAX_RESTORED_ELEMENTS`].
    TooMany,
}

/// The most elements (members, fields and values, list items) one
/// `RESTORE` may create. A listpack, ziplist or intset packs an element in 2
/// bytes and LZF compresses them further: 760 KB of payload made 33.5 M list
/// items, several GB in memory, on every node and at every replay (an entry
/// that cannot be applied). 4 M is about what one request of the shortest
/// arguments gives `RPUSH`.
pub const MAX_RESTORED_ELEMENTS: usize = 4 << 20;

/// A cursor over a payload's object; every read checks the bytes are there.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    /// What LZF may still expand to.
    budget: usize,
    /// How many more elements the value may have ([`MAX_RESTORED_ELEMENTS`]).
    elements: usize,
}

type Parsed<T> = Result<T, Refused>;

impl<'a> Reader<'a> {
    /// Counts `n` more elements against [`Reader::elements`].
    fn elements(&mut self, n: usize) -> Parsed<()> {
        self.elements = self.elements.checked_sub(n).ok_or(Refused::TooMany)?;
        Ok(())
    }

    fn take(&mut self, n: usize) -> Parsed<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.data.len()).ok_or(Refused::Format)?;
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn byte(&mut self) -> Parsed<u8> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Parsed<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A length, or (`Err(Some(kind))`) the kind of a special string encoding.
    fn len_or_encoding(&mut self) -> Parsed<Result<u64, u8>> {
        let first = self.byte()?;
        Ok(match first >> 6 {
            0 => Ok(u64::from(first & 0x3f)),
            1 => Ok(u64::from(first & 0x3f) << 8 | u64::from(self.byte()?)),
            3 => Err(first & 0x3f),
            _ if first == 0x80 => Ok(u64::from(u32::from_be_bytes(self.array()?))),
            _ if first == 0x81 => Ok(u64::from_be_bytes(self.array()?)),
            _ => return Err(Refused::Format),
        })
    }

    /// A count of items to come: each takes at least one byte, so a count
    /// beyond the bytes left is a lie (and is never allocated for).
    fn count(&mut self) -> Parsed<usize> {
        match self.len_or_encoding()? {
            Ok(n) if n <= (self.data.len() - self.at) as u64 => Ok(n as usize),
            _ => Err(Refused::Format),
        }
    }

    fn string(&mut self) -> Parsed<Vec<u8>> {
        match self.len_or_encoding()? {
            Ok(n) => Ok(self.take(usize::try_from(n).map_err(|_| Refused::Format)?)?.to_vec()),
            Err(0) => Ok((self.byte()? as i8).to_string().into_bytes()),
            Err(1) => Ok(i16::from_le_bytes(self.array()?).to_string().into_bytes()),
            Err(2) => Ok(i32::from_le_bytes(self.array()?).to_string().into_bytes()),
            Err(3) => {
                let compressed = self.len_or_encoding()?.map_err(|_| Refused::Format)?;
                let expanded = self.len_or_encoding()?.map_err(|_| Refused::Format)?;
                let expanded = usize::try_from(expanded).ok().filter(|n| *n <= self.budget).ok_or(Refused::Format)?;
                self.budget -= expanded;
                let input = self.take(usize::try_from(compressed).map_err(|_| Refused::Format)?)?;
                lzf_decompress(input, expanded).ok_or(Refused::Format)
            }
            Err(_) => Err(Refused::Format),
        }
    }

    fn bytes(&mut self) -> Parsed<Bytes> {
        self.string().map(Bytes::from)
    }
}

/// LZF: literal runs (a control byte below 32: that many plus one bytes
/// follow) and back references (length in the top 3 bits, 7 meaning one
/// more length byte follows; offset in the low 5 bits and the next byte).
/// `None` unless it makes exactly `expanded` bytes.
fn lzf_decompress(input: &[u8], expanded: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(expanded);
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        if ctrl < 32 {
            let run = input.get(i..i + ctrl + 1)?;
            if out.len() + run.len() > expanded {
                return None;
            }
            out.extend_from_slice(run);
            i += ctrl + 1;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(i)?);
                i += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(i)?) + 1;
            i += 1;
            let len = len + 2;
            if back > out.len() || out.len() + len > expanded {
                return None;
            }
            // Byte by byte: the source may overlap what is being written.
            let from = out.len() - back;
            for k in 0..len {
                out.push(out[from + k]);
            }
        }
    }
    (out.len() == expanded).then_some(out)
}

/// One item of a listpack or a ziplist.
enum Item<'a> {
    Text(&'a [u8]),
    Int(i64),
}

impl Item<'_> {
    fn bytes(&self) -> Bytes {
        match self {
            Item::Text(t) => Bytes::copy_from_slice(t),
            Item::Int(n) => Bytes::from(n.to_string()),
        }
    }

    /// A sorted set's score as Redis reads one from its compact encodings.
    fn score(&self) -> Parsed<f64> {
        match self {
            Item::Int(n) => Ok(*n as f64),
            Item::Text(t) => match strtod_all(t) {
                Some((v, _)) if !v.is_nan() => Ok(v),
                _ => Err(Refused::Format),
            },
        }
    }
}

/// `n` bytes of `data` from `from`, if they are there.
fn slice_at(data: &[u8], from: usize, n: usize) -> Parsed<&[u8]> {
    from.checked_add(n).and_then(|end| data.get(from..end)).ok_or(Refused::Format)
}

fn sign_extend(value: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((value << shift) as i64) >> shift
}

fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0u64, |n, b| n << 8 | u64::from(*b))
}

/// The items of a listpack: a 6-byte header (total bytes, count), entries
/// each followed by its length backwards in 1-5 bytes, and 0xff.
fn listpack(blob: &[u8], max: usize) -> Parsed<Vec<Item<'_>>> {
    if blob.len() < 7 || le(&blob[..4]) != blob.len() as u64 || blob[blob.len() - 1] != 0xff {
        return Err(Refused::Format);
    }
    let declared = le(&blob[4..6]);
    let body = &blob[6..blob.len() - 1];
    let mut items = Vec::new();
    let mut at = 0;
    let field = |from: usize, n: usize| slice_at(body, from, n);
    while at < body.len() {
        let b = body[at];
        let (item, size) = match b {
            0x00..=0x7f => (Item::Int(i64::from(b)), 1),
            0x80..=0xbf => {
                let n = usize::from(b & 0x3f);
                (Item::Text(field(at + 1, n)?), 1 + n)
            }
            0xc0..=0xdf => {
                let v = u64::from(b & 0x1f) << 8 | u64::from(field(at + 1, 1)?[0]);
                (Item::Int(sign_extend(v, 13)), 2)
            }
            0xe0..=0xef => {
                let n = usize::from(b & 0x0f) << 8 | usize::from(field(at + 1, 1)?[0]);
                (Item::Text(field(at + 2, n)?), 2 + n)
            }
            0xf0 => {
                let n = le(field(at + 1, 4)?) as usize;
                (Item::Text(field(at + 5, n)?), 5 + n)
            }
            0xf1 => (Item::Int(sign_extend(le(field(at + 1, 2)?), 16)), 3),
            0xf2 => (Item::Int(sign_extend(le(field(at + 1, 3)?), 24)), 4),
            0xf3 => (Item::Int(sign_extend(le(field(at + 1, 4)?), 32)), 5),
            0xf4 => (Item::Int(le(field(at + 1, 8)?) as i64), 9),
            _ => return Err(Refused::Format),
        };
        let backlen = match size {
            0..=127 => 1,
            128..=16382 => 2,
            16383..=2097150 => 3,
            2097151..=268435454 => 4,
            _ => 5,
        };
        field(at, size + backlen)?;
        at += size + backlen;
        if items.len() == max {
            return Err(Refused::TooMany);
        }
        items.push(item);
    }
    if declared != 65535 && declared != items.len() as u64 {
        return Err(Refused::Format);
    }
    Ok(items)
}

/// The items of a ziplist (Redis before 7.0): a 10-byte header, entries
/// each after the previous one's length (1 or 5 bytes), and 0xff.
fn ziplist(blob: &[u8], max: usize) -> Parsed<Vec<Item<'_>>> {
    if blob.len() < 11 || le(&blob[..4]) != blob.len() as u64 || blob[blob.len() - 1] != 0xff {
        return Err(Refused::Format);
    }
    let declared = le(&blob[8..10]);
    let body = &blob[10..blob.len() - 1];
    let field = |from: usize, n: usize| slice_at(body, from, n);
    let mut items = Vec::new();
    let mut at = 0;
    while at < body.len() {
        at += if body[at] == 0xfe { 5 } else { 1 };
        let b = field(at, 1)?[0];
        let (item, size) = match b >> 6 {
            0 => {
                let n = usize::from(b & 0x3f);
                (Item::Text(field(at + 1, n)?), 1 + n)
            }
            1 => {
                let n = usize::from(b & 0x3f) << 8 | usize::from(field(at + 1, 1)?[0]);
                (Item::Text(field(at + 2, n)?), 2 + n)
            }
            2 if b == 0x80 => {
                let n = u32::from_be_bytes(field(at + 1, 4)?.try_into().map_err(|_| Refused::Format)?) as usize;
                (Item::Text(field(at + 5, n)?), 5 + n)
            }
            3 => match b {
                0xc0 => (Item::Int(sign_extend(le(field(at + 1, 2)?), 16)), 3),
                0xd0 => (Item::Int(sign_extend(le(field(at + 1, 4)?), 32)), 5),
                0xe0 => (Item::Int(le(field(at + 1, 8)?) as i64), 9),
                0xf0 => (Item::Int(sign_extend(le(field(at + 1, 3)?), 24)), 4),
                0xfe => (Item::Int(i64::from(field(at + 1, 1)?[0] as i8)), 2),
                0xf1..=0xfd => (Item::Int(i64::from(b & 0x0f) - 1), 1),
                _ => return Err(Refused::Format),
            },
            _ => return Err(Refused::Format),
        };
        at += size;
        if items.len() == max {
            return Err(Refused::TooMany);
        }
        items.push(item);
    }
    if declared != 65535 && declared != items.len() as u64 {
        return Err(Refused::Format);
    }
    Ok(items)
}

/// The members of an intset: its width (2, 4 or 8 bytes), count, and the
/// integers in ascending order.
fn intset(blob: &[u8], max: usize) -> Parsed<Vec<i64>> {
    if blob.len() < 8 {
        return Err(Refused::Format);
    }
    let width = le(&blob[..4]) as usize;
    let count = le(&blob[4..8]) as usize;
    if !matches!(width, 2 | 4 | 8) || (blob.len() - 8) / width != count || (blob.len() - 8) % width != 0 {
        return Err(Refused::Format);
    }
    if count > max {
        return Err(Refused::TooMany);
    }
    Ok(blob[8..].chunks(width).map(|c| sign_extend(le(c), 8 * width as u32)).collect())
}

fn pairs<'a>(items: Vec<Item<'a>>) -> Parsed<Vec<(Item<'a>, Item<'a>)>> {
    if items.len() % 2 != 0 {
        return Err(Refused::Format);
    }
    let mut it = items.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    Ok(out)
}

/// Adds members, refusing a duplicate (Redis does too).
fn set_of(members: impl IntoIterator<Item = Bytes>) -> Parsed<Value> {
    let mut set = BTreeSet::new();
    for m in members {
        if !set.insert(m) {
            return Err(Refused::Format);
        }
    }
    Ok(Value::Set(set))
}

fn hash_of(pairs: impl IntoIterator<Item = (Bytes, Bytes)>) -> Parsed<Value> {
    let mut hash = BTreeMap::new();
    for (f, v) in pairs {
        if hash.insert(f, v).is_some() {
            return Err(Refused::Format);
        }
    }
    Ok(Value::Hash(hash))
}

fn zset_of(members: impl IntoIterator<Item = Parsed<(Bytes, f64)>>) -> Parsed<Value> {
    let mut z = BTreeMap::new();
    for m in members {
        let (member, score) = m?;
        // A set keeps `-0` as `0` (see `zsets::stored`).
        if score.is_nan() || z.insert(member, if score == 0.0 { 0.0 } else { score }).is_some() {
            return Err(Refused::Format);
        }
    }
    Ok(Value::ZSet(z))
}

/// The value a `RESTORE` payload holds.
pub fn deserialize(payload: &[u8]) -> Result<Value, Refused> {
    if payload.len() < 10 {
        return Err(Refused::Footer);
    }
    let (object, footer) = payload.split_at(payload.len() - 10);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    if version > RDB_VERSION || crc64(&payload[..payload.len() - 8]).to_le_bytes() != footer[2..] {
        return Err(Refused::Footer);
    }
    let mut r = Reader { data: object, at: 0, budget: MAX_EXPANDED_BYTES, elements: MAX_RESTORED_ELEMENTS };
    let kind = r.byte()?;
    let value = match kind {
        TYPE_STRING => Value::Str(Str::new(&r.string()?)),
        TYPE_LIST => {
            let n = r.count()?;
            r.elements(n)?;
            let list = (0..n).map(|_| r.bytes()).collect::<Parsed<VecDeque<Bytes>>>()?;
            Value::List(Box::new(list))
        }
        TYPE_SET => {
            let n = r.count()?;
            r.elements(n)?;
            set_of((0..n).map(|_| r.bytes()).collect::<Parsed<Vec<Bytes>>>()?)?
        }
        TYPE_HASH => {
            let n = r.count()?;
            r.elements(n.saturating_mul(2))?;
            let pairs = (0..n).map(|_| Ok((r.bytes()?, r.bytes()?))).collect::<Parsed<Vec<_>>>()?;
            hash_of(pairs)?
        }
        TYPE_ZSET | TYPE_ZSET_2 => {
            let n = r.count()?;
            r.elements(n)?;
            let mut members = Vec::new();
            for _ in 0..n {
                let member = r.bytes()?;
                let score = if kind == TYPE_ZSET_2 {
                    f64::from_le_bytes(r.array()?)
                } else {
                    // A length byte, then the score's text; 253-255: NaN, +inf, -inf.
                    match r.byte()? {
                        253 => f64::NAN,
                        254 => f64::INFINITY,
                        255 => f64::NEG_INFINITY,
                        n => match strtod_all(r.take(usize::from(n))?) {
                            Some((v, _)) => v,
                            None => return Err(Refused::Format),
                        },
                    }
                };
                members.push(Ok((member, score)));
            }
            zset_of(members)?
        }
        TYPE_LIST_QUICKLIST | TYPE_LIST_QUICKLIST_2 => {
            let nodes = r.count()?;
            let mut list = VecDeque::new();
            for _ in 0..nodes {
                // Quicklist 2 says per node whether it is one plain element (1) or packed (2).
                let container = if kind == TYPE_LIST_QUICKLIST_2 { r.len_or_encoding()? } else { Ok(2) };
                let blob = r.string()?;
                if blob.is_empty() {
                    return Err(Refused::Format);
                }
                let items = match container {
                    Ok(1) => {
                        r.elements(1)?;
                        list.push_back(Bytes::from(blob));
                        continue;
                    }
                    Ok(2) if kind == TYPE_LIST_QUICKLIST_2 => listpack(&blob, r.elements)?,
                    Ok(2) => ziplist(&blob, r.elements)?,
                    _ => return Err(Refused::Format),
                };
                r.elements(items.len())?;
                list.extend(items.iter().map(Item::bytes));
            }
            Value::List(Box::new(list))
        }
        TYPE_LIST_ZIPLIST => Value::List(Box::new(ziplist(&r.string()?, r.elements)?.iter().map(Item::bytes).collect())),
        TYPE_SET_INTSET => set_of(intset(&r.string()?, r.elements)?.into_iter().map(|n| Bytes::from(n.to_string())))?,
        TYPE_HASH_LISTPACK | TYPE_HASH_ZIPLIST | TYPE_ZSET_LISTPACK | TYPE_ZSET_ZIPLIST => {
            let blob = r.string()?;
            let max = r.elements;
            let items = if matches!(kind, TYPE_HASH_LISTPACK | TYPE_ZSET_LISTPACK) { listpack(&blob, max)? } else { ziplist(&blob, max)? };
            let pairs = pairs(items)?;
            if matches!(kind, TYPE_HASH_LISTPACK | TYPE_HASH_ZIPLIST) {
                hash_of(pairs.iter().map(|(f, v)| (f.bytes(), v.bytes())))?
            } else {
                zset_of(pairs.iter().map(|(m, s)| Ok((m.bytes(), s.score()?))))?
            }
        }
        _ => return Err(Refused::Format),
    };
    if value.is_empty_container() {
        return Err(Refused::Format);
    }
    Ok(value)
}

// ---------------------------------------------------------------------------
// The commands
// ---------------------------------------------------------------------------

/// RDB's opcode for a function library (its code) in a `FUNCTION DUMP`.
const OPCODE_FUNCTION2: u8 = 245;

/// The `FUNCTION DUMP` payload of libraries' codes: each as Redis writes it
/// (opcode, string), then the version and checksum a `DUMP` ends with.
pub fn serialize_functions<'a>(codes: impl IntoIterator<Item = &'a Bytes>) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(OPCODE_FUNCTION2);
        put_string(&mut out, code);
    }
    out.extend(RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend(crc.to_le_bytes());
    out
}

/// Why a `FUNCTION RESTORE` payload is refused, in Redis's words.
pub fn deserialize_functions(payload: &[u8]) -> Result<Vec<Bytes>, &'static str> {
    const BAD_FOOTER: &str = "ERR DUMP payload version or checksum are wrong";
    if payload.len() < 10 {
        return Err(BAD_FOOTER);
    }
    let (body, footer) = payload.split_at(payload.len() - 10);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    if version > RDB_VERSION || crc64(&payload[..payload.len() - 8]).to_le_bytes() != footer[2..] {
        return Err(BAD_FOOTER);
    }
    let mut r = Reader { data: body, at: 0, budget: MAX_EXPANDED_BYTES, elements: MAX_RESTORED_ELEMENTS };
    let mut codes = Vec::new();
    while r.at < body.len() {
        match r.byte() {
            Ok(OPCODE_FUNCTION2) => codes.push(r.bytes().map_err(|_| "ERR can not read data type")?),
            Ok(_) => return Err("ERR given type is not a function"),
            Err(_) => return Err("ERR can not read data type"),
        }
    }
    Ok(codes)
}

/// ```text
/// DUMP key
/// ```
/// The key's value, serialized; nil if there is none.
pub fn dump(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    Ok(match ks.get(key, ctx.now) {
        Some(entry) => match serialize(&entry.value) {
            Some(payload) => Reply::Bulk(Bytes::from(payload)),
            None => return Err(CmdError::Other("ERR DUMP of a stream is not supported by raftlock".into())),
        },
        None => Reply::Nil,
    })
}

/// ```text
/// RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]
/// ```
/// Creates `key` from a `DUMP` payload, expiring after `ttl` ms (at the Unix
/// time `ttl` in ms with `ABSTTL`; never for 0). `IDLETIME` and `FREQ` are
/// checked as Redis checks them and otherwise ignored (no eviction here).
pub fn restore(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let ttl = args.next_bytes()?;
    let payload = args.next_bytes()?;
    let (mut replace, mut absttl, mut idle, mut freq) = (false, false, false, false);
    let options = args.rest();
    let mut j = 0;
    while j < options.len() {
        let word = &options[j][..];
        let more = j + 1 < options.len();
        if word.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if word.eq_ignore_ascii_case(b"absttl") {
            absttl = true;
        } else if word.eq_ignore_ascii_case(b"idletime") && more && !freq {
            if parse_i64(&options[j + 1]).ok_or(ArgError::NotInteger)? < 0 {
                return Err(CmdError::Other("ERR Invalid IDLETIME value, must be >= 0".into()));
            }
            idle = true;
            j += 1;
        } else if word.eq_ignore_ascii_case(b"freq") && more && !idle {
            if !(0..=255).contains(&parse_i64(&options[j + 1]).ok_or(ArgError::NotInteger)?) {
                return Err(CmdError::Other("ERR Invalid FREQ value, must be >= 0 and <= 255".into()));
            }
            freq = true;
            j += 1;
        } else {
            return Err(ArgError::Syntax.into());
        }
        j += 1;
    }
    let exists = ks.get_mut(&key, ctx).is_some();
    if exists && !replace {
        return Err(CmdError::Other("BUSYKEY Target key name already exists.".into()));
    }
    let ttl = parse_i64(ttl).ok_or(ArgError::NotInteger)?;
    if ttl < 0 {
        return Err(CmdError::Other("ERR Invalid TTL value, must be >= 0".into()));
    }
    let value = match deserialize(payload) {
        Ok(value) => value,
        Err(Refused::Footer) => return Err(CmdError::Other("ERR DUMP payload version or checksum are wrong".into())),
        Err(Refused::Format) => return Err(CmdError::Other("ERR Bad data format".into())),
        Err(Refused::TooMany) => {
            return Err(CmdError::Other(format!(
                "ERR DUMP payload holds more than {MAX_RESTORED_ELEMENTS} elements: raftlock restores at most that many in one value"
            )))
        }
    };
    let expires_at = match ttl {
        0 => None,
        ms if absttl => Some(ctx.unix_to_log_time(ms)),
        ms => Some(ctx.log_time.saturating_add(ms as u64)),
    };
    if expires_at.is_some_and(|at| at <= ctx.log_time) {
        // Already expired: nothing is created, and a replaced key is gone.
        if exists {
            ks.remove(&key);
            ctx.key_event('g', "del", &key);
        }
        return Ok(Reply::ok());
    }
    ks.insert(key.clone(), Entry::new(value, ctx.version, ctx.log_time));
    if expires_at.is_some() {
        ks.set_expiry(&key, expires_at);
    }
    ctx.key_event('g', "restore", &key);
    Ok(Reply::ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `object` with the footer `DUMP` puts after it.
    fn with_footer(mut object: Vec<u8>, version: u16) -> Vec<u8> {
        object.extend(version.to_le_bytes());
        let crc = crc64(&object);
        object.extend(crc.to_le_bytes());
        object
    }

    fn string(s: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_len(&mut out, s.len());
        out.extend_from_slice(s);
        out
    }

    /// A ziplist as Redis 6 wrote one: strings and small integers.
    fn ziplist_of(items: &[&str]) -> Vec<u8> {
        let mut body = Vec::new();
        let mut prev = 0usize;
        for item in items {
            let start = body.len();
            if prev < 254 {
                body.push(prev as u8);
            } else {
                body.push(0xfe);
                body.extend((prev as u32).to_le_bytes());
            }
            match item.parse::<i64>() {
                Ok(n @ 0..=12) => body.push(0xf1 + n as u8),
                Ok(n) if i16::try_from(n).is_ok() => {
                    body.push(0xc0);
                    body.extend((n as i16).to_le_bytes());
                }
                Ok(n) => {
                    body.push(0xe0);
                    body.extend(n.to_le_bytes());
                }
                Err(_) => {
                    assert!(item.len() < 64);
                    body.push(item.len() as u8);
                    body.extend(item.as_bytes());
                }
            }
            prev = body.len() - start;
        }
        let total = 10 + body.len() + 1;
        let mut out = Vec::new();
        out.extend((total as u32).to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend((items.len() as u16).to_le_bytes());
        out.extend(body);
        out.push(0xff);
        out
    }

    fn texts(list: &VecDeque<Bytes>) -> Vec<String> {
        list.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect()
    }

    #[test]
    fn crc64_is_redis_s() {
        // The check value of Redis's crc64.c (Jones polynomial, reflected).
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn every_kind_of_value_comes_back_from_its_payload() {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let values = [
            Value::Str(Str::new(b"")),
            Value::Str(Str::new(b"-128")),
            Value::Str(Str::new(b"2147483648")),
            Value::Str(Str::new(b"007")),
            Value::Str(Str::new(&[0u8, 255, 10, 13])),
            Value::List(Box::new(["1", "-32769", "x", ""].map(b).into())),
            Value::Set(["a", "1", "-5"].map(b).into()),
            Value::Hash([("f", "1"), ("g", "")].map(|(f, v)| (b(f), b(v))).into()),
            Value::ZSet([("a", 1.5), ("b", f64::INFINITY), ("c", -0.0), ("d", f64::MIN_POSITIVE)].map(|(m, s)| (b(m), s)).into()),
        ];
        for value in values {
            let payload = serialize(&value).unwrap();
            let back = deserialize(&payload).unwrap();
            assert_eq!(format!("{back:?}"), format!("{value:?}").replace("-0.0", "0.0"));
        }
        // Integers are written in their integer encodings, as Redis writes them.
        assert_eq!(&serialize(&Value::Str(Str::new(b"-128"))).unwrap()[..3], [0, 0xc0, 0x80]);
        assert_eq!(&serialize(&Value::Str(Str::new(b"1000"))).unwrap()[..4], [0, 0xc1, 0xe8, 0x03]);
        assert_eq!(&serialize(&Value::Str(Str::new(b"007"))).unwrap()[..5], [0, 3, b'0', b'0', b'7']);
    }

    #[test]
    fn ziplists_of_redis_6_are_read() {
        let zl = ziplist_of(&["a", "7", "-300", "123456789012", "bb"]);
        let mut list = vec![TYPE_LIST_ZIPLIST];
        list.extend(string(&zl));
        let Value::List(l) = deserialize(&with_footer(list, 9)).unwrap() else { panic!() };
        assert_eq!(texts(&l), ["a", "7", "-300", "123456789012", "bb"]);
        // A quicklist (Redis 3.2-6.2) of two ziplist nodes.
        let mut quick = vec![TYPE_LIST_QUICKLIST, 2];
        quick.extend(string(&ziplist_of(&["x", "1"])));
        quick.extend(string(&ziplist_of(&["y"])));
        let Value::List(l) = deserialize(&with_footer(quick, 9)).unwrap() else { panic!() };
        assert_eq!(texts(&l), ["x", "1", "y"]);
        let mut hash = vec![TYPE_HASH_ZIPLIST];
        hash.extend(string(&ziplist_of(&["f", "1", "g", "v"])));
        let Value::Hash(h) = deserialize(&with_footer(hash, 9)).unwrap() else { panic!() };
        assert_eq!(h.get(&b"g"[..]).map(|v| &v[..]), Some(&b"v"[..]));
        let mut zset = vec![TYPE_ZSET_ZIPLIST];
        zset.extend(string(&ziplist_of(&["m", "3", "n", "2.5"])));
        let Value::ZSet(z) = deserialize(&with_footer(zset, 9)).unwrap() else { panic!() };
        assert_eq!((z[&b"m"[..]], z[&b"n"[..]]), (3.0, 2.5));
        // Odd pairs, a wrong count or a truncated entry are refused.
        let mut odd = vec![TYPE_HASH_ZIPLIST];
        odd.extend(string(&ziplist_of(&["f", "1", "g"])));
        assert_eq!(deserialize(&with_footer(odd, 9)).unwrap_err(), Refused::Format);
        let mut miscounted = ziplist_of(&["a", "b"]);
        miscounted[8] = 3;
        let mut list = vec![TYPE_LIST_ZIPLIST];
        list.extend(string(&miscounted));
        assert_eq!(deserialize(&with_footer(list, 9)).unwrap_err(), Refused::Format);
    }

    /// A few hundred KB of LZF back references may expand to any length:
    /// up to the longest string a command builds, and no further.
    #[test]
    fn compressed_strings_expand_to_at_most_64_mib() {
        let expanding_to = |n: usize| {
            // One literal byte, then back references to it of 264 bytes
            // (and one shorter), each three bytes long.
            let mut lzf = vec![0, b'z'];
            let mut made = 1;
            while made < n {
                let len = (n - made).min(264);
                if len >= 9 {
                    lzf.extend([0xe0, (len - 9) as u8, 0]);
                } else {
                    lzf.extend([((len - 2) << 5) as u8, 0]);
                }
                made += len;
            }
            let mut object = vec![TYPE_STRING, 0x80 | 0x40 | 3];
            object.push(0x80);
            object.extend((lzf.len() as u32).to_be_bytes());
            object.push(0x80);
            object.extend((n as u32).to_be_bytes());
            object.extend(lzf);
            deserialize(&with_footer(object, RDB_VERSION))
        };
        let Value::Str(s) = expanding_to(MAX_EXPANDED_BYTES).unwrap() else { panic!("not a string") };
        assert_eq!(s.as_slice().len(), MAX_EXPANDED_BYTES);
        assert_eq!(expanding_to(MAX_EXPANDED_BYTES + 1).unwrap_err(), Refused::Format);
    }

    #[test]
    fn payloads_that_lie_are_refused() {
        let refused = |object: Vec<u8>| deserialize(&with_footer(object, RDB_VERSION)).unwrap_err();
        // A count far beyond the bytes there.
        assert_eq!(refused(vec![TYPE_LIST, 0x81, 0, 0, 0, 1, 0, 0, 0, 0, 1, b'a']), Refused::Format);
        // A string longer than the payload.
        assert_eq!(refused(vec![TYPE_STRING, 0x80, 0xff, 0xff, 0xff, 0xff, b'a']), Refused::Format);
        // LZF claiming to expand past the budget, or to a different length.
        assert_eq!(refused(vec![TYPE_STRING, 0xc3, 2, 0x81, 0, 0, 0, 1, 0, 0, 0, 0, 0, b'a']), Refused::Format);
        assert_eq!(refused(vec![TYPE_STRING, 0xc3, 2, 5, 0, b'a']), Refused::Format);
        // A back reference before the start.
        assert_eq!(refused(vec![TYPE_STRING, 0xc3, 4, 4, 0, b'a', 0x20, 5]), Refused::Format);
        // Empty containers, duplicates, NaN scores, unknown types.
        assert_eq!(refused(vec![TYPE_SET, 0]), Refused::Format);
        assert_eq!(refused(vec![TYPE_SET, 2, 1, b'a', 1, b'a']), Refused::Format);
        let mut nan = vec![TYPE_ZSET_2, 1, 1, b'm'];
        nan.extend(f64::NAN.to_le_bytes());
        assert_eq!(refused(nan), Refused::Format);
        assert_eq!(refused(vec![15, 0]), Refused::Format);
        assert_eq!(refused(vec![]), Refused::Format);
        // Footers.
        let good = serialize(&Value::Str(Str::new(b"x"))).unwrap();
        assert!(deserialize(&good).is_ok());
        let mut flipped = good.clone();
        flipped[2] ^= 0x40;
        assert_eq!(deserialize(&flipped).unwrap_err(), Refused::Footer);
        assert_eq!(deserialize(&good[..good.len() - 1]).unwrap_err(), Refused::Footer);
        assert_eq!(deserialize(&with_footer(vec![TYPE_STRING, 1, b'x'], 11)).unwrap_err(), Refused::Footer);
        assert_eq!(deserialize(b"short").unwrap_err(), Refused::Footer);
        // LZF that decodes: "aaaaaa" as a literal "a" and a back reference of 5.
        let Value::Str(s) = deserialize(&with_footer(vec![TYPE_STRING, 0xc3, 4, 6, 0, b'a', 0x60, 0], 10)).unwrap() else {
            panic!()
        };
        assert_eq!(&s[..], b"aaaaaa");
    }

    /// Any bytes with a valid footer: an answer, never a panic, and the same
    /// answer every time (every node applies the same `RESTORE`).
    #[test]
    fn mangled_payloads_never_panic() {
        let seeds: Vec<Vec<u8>> = [
            Value::List(Box::new((0..40).map(|i| Bytes::from(i.to_string())).collect())),
            Value::ZSet((0..20).map(|i| (Bytes::from(format!("m{i}")), i as f64 / 3.0)).collect()),
            Value::Hash((0..20).map(|i| (Bytes::from(format!("f{i}")), Bytes::from("v".repeat(i)))).collect()),
        ]
        .iter()
        .map(|v| {
            let p = serialize(v).unwrap();
            p[..p.len() - 10].to_vec()
        })
        .chain([
            [vec![TYPE_LIST_ZIPLIST], string(&ziplist_of(&["a", "1", "-300", "bb", "123456789012"]))].concat(),
            [vec![TYPE_STRING, 0xc3, 5, 40, 1, b'a', b'b', 0xe0, 30, 1]].concat(),
        ])
        .collect();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut kinds = [0usize; 2];
        for round in 0..60_000 {
            let mut object = seeds[round % seeds.len()].clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % object.len();
                match next() % 4 {
                    0 => object[at] = next() as u8,
                    1 => object[at] ^= 1 << (next() % 8),
                    2 => object.truncate(at.max(1)),
                    _ => object.insert(at, next() as u8),
                }
            }
            // A listpack, ziplist or intset inside a string: try the type byte too.
            if next() % 3 == 0 {
                object[0] = [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 16, 17, 18][(next() % 14) as usize];
            }
            let payload = with_footer(object, RDB_VERSION);
            let first = format!("{:?}", deserialize(&payload));
            assert_eq!(first, format!("{:?}", deserialize(&payload)));
            kinds[usize::from(first.starts_with("Ok"))] += 1;
        }
        // Some of them still decode: the mangling reached inside.
        assert!(kinds[1] > 1000 && kinds[0] > 1000, "{kinds:?}");
    }

    #[test]
    fn a_payload_makes_at_most_the_most_elements() {
        // An intset of one more member than allowed (8 MB): refused before a
        // member is made (they repeat, which would be refused later).
        let n = MAX_RESTORED_ELEMENTS + 1;
        let mut blob = Vec::with_capacity(8 + 2 * n);
        blob.extend(2u32.to_le_bytes());
        blob.extend((n as u32).to_le_bytes());
        (0..n).for_each(|i| blob.extend(((i % 30000) as u16).to_le_bytes()));
        let mut object = vec![TYPE_SET_INTSET];
        put_len(&mut object, blob.len());
        object.extend(&blob);
        assert_eq!(deserialize(&with_footer(object, RDB_VERSION)).unwrap_err(), Refused::TooMany);
        // A quicklist of two listpacks of one-byte integers, each within the
        // bound and the two past it.
        let half = MAX_RESTORED_ELEMENTS / 2 + 1;
        let mut pack = Vec::with_capacity(7 + 2 * half);
        pack.extend(((7 + 2 * half) as u32).to_le_bytes());
        pack.extend(65535u16.to_le_bytes());
        (0..half).for_each(|_| pack.extend([0x01, 0x01]));
        pack.push(0xff);
        let mut object = vec![TYPE_LIST_QUICKLIST_2];
        put_len(&mut object, 2);
        for _ in 0..2 {
            put_len(&mut object, 2);
            put_len(&mut object, pack.len());
            object.extend(&pack);
        }
        assert_eq!(deserialize(&with_footer(object.clone(), RDB_VERSION)).unwrap_err(), Refused::TooMany);
        // One of them alone restores.
        let mut one = vec![TYPE_LIST_QUICKLIST_2];
        put_len(&mut one, 1);
        put_len(&mut one, 2);
        put_len(&mut one, pack.len());
        one.extend(&pack);
        let Value::List(list) = deserialize(&with_footer(one, RDB_VERSION)).unwrap() else { panic!() };
        assert_eq!(list.len(), half);
    }
}
