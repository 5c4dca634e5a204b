//! HyperLogLog: `PFADD`, `PFCOUNT`, `PFMERGE`, with Redis 7's counts.
//!
//! A HyperLogLog is a string in Redis's own format, so `GET`, `SET`, `DUMP`
//! and `RESTORE` carry it between raftlock and Redis: a 16-byte header
//! (`HYLL`, the encoding, 3 unused bytes, a cached count in 8 bytes, its top
//! bit set when stale) and 16384 registers of 6 bits, dense (12288 bytes) or
//! sparse (runs of zeros and of equal small values). An element sets the
//! register its 64-bit MurmurHash (seed 0xadc83b19) picks in its low 14 bits
//! to the position of the lowest set bit of the other 50, if that is higher;
//! the count is Ertl's estimate from the registers' histogram, as Redis 7
//! computes it.
//!
//! Written back, a sparse HyperLogLog stays sparse while every register is
//! at most 32 and the encoding fits in 3000 bytes (Redis's
//! `hll-sparse-max-bytes`), in the shortest form of its runs; a dense one
//! stays dense. `PFCOUNT` is a read here: it does not store the count it
//! computes in the header, as Redis does.

use bytes::Bytes;

use super::strings::store_in_place;
use super::{CmdError, CmdResult};
use crate::keyspace::{ExecCtx, Keyspace, LogTime, ReadCtx, Value};
use crate::protocol::{Args, Reply};

const REGISTERS: usize = 1 << 14;
const HEADER: usize = 16;
const DENSE_BYTES: usize = REGISTERS * 6 / 8;
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// Redis's `hll-sparse-max-bytes` default: the largest sparse encoding,
/// header included.
const SPARSE_MAX_BYTES: usize = 3000;
/// The largest value a sparse `VAL` run holds.
const SPARSE_MAX_VALUE: u8 = 32;
const SEED: u64 = 0xadc8_3b19;

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

/// MurmurHash64A over `data`, little-endian words, as Redis uses it.
fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut words = data.chunks_exact(8);
    for word in &mut words {
        let mut k = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate() {
            h ^= u64::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register `element` falls in, and the value it offers it: one more
/// than the number of zeros below the lowest set bit of the hash's upper
/// 50 bits.
fn register_of(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, SEED);
    let index = (hash as usize) & (REGISTERS - 1);
    let rest = (hash >> 14) | (1 << 50);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// A HyperLogLog read out of its string: every register, whether it was
/// dense, and its header's cached-count bytes.
struct Hll {
    registers: Box<[u8; REGISTERS]>,
    dense: bool,
    card: [u8; 8],
}

enum Refused {
    NotHll,
    Corrupt,
}

impl Refused {
    fn error(self) -> CmdError {
        CmdError::Other(match self {
            Refused::NotHll => NOT_HLL.into(),
            Refused::Corrupt => CORRUPT.into(),
        })
    }
}

impl Hll {
    fn empty() -> Hll {
        Hll { registers: Box::new([0; REGISTERS]), dense: false, card: [0; 8] }
    }

    fn parse(s: &[u8]) -> Result<Hll, Refused> {
        let mut registers = Box::new([0u8; REGISTERS]);
        let (dense, card) = raise(s, &mut registers, false)?;
        Ok(Hll { registers, dense, card })
    }

    /// The string to store: sparse if it was and still can be, else dense.
    /// `stale`: the cached count no longer holds.
    fn serialize(&self, stale: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 64);
        out.extend_from_slice(b"HYLL");
        out.extend([DENSE, 0, 0, 0]);
        out.extend_from_slice(&self.card);
        if stale {
            out[15] |= 0x80;
        }
        if !self.dense {
            if let Some(sparse) = sparse_runs(&self.registers) {
                out[4] = SPARSE;
                out.extend(sparse);
                return out;
            }
        }
        let mut body = vec![0u8; DENSE_BYTES];
        for (i, v) in self.registers.iter().enumerate() {
            dense_set(&mut body, i, *v);
        }
        out.extend(body);
        out
    }

    /// Redis 7's estimate (Ertl, "New cardinality estimation algorithms for
    /// HyperLogLog sketches", arXiv:1702.01284).
    fn count(&self) -> u64 {
        let m = REGISTERS as f64;
        let mut histogram = [0u32; 64];
        for v in self.registers.iter() {
            histogram[usize::from(*v & 63)] += 1;
        }
        const Q: usize = 50;
        let mut z = m * tau((m - f64::from(histogram[Q + 1])) / m);
        for j in (1..=Q).rev() {
            z += f64::from(histogram[j]);
            z *= 0.5;
        }
        z += m * sigma(f64::from(histogram[0]) / m);
        const ALPHA_INF: f64 = 0.721_347_520_444_481_7;
        let estimate = (ALPHA_INF * m * m / z).round();
        // Past what a signed 64-bit integer holds (registers all 50 or
        // more), Redis's `llroundl` gives its minimum, which PFCOUNT replies.
        if estimate < 9_223_372_036_854_775_808.0 { estimate as u64 } else { 1 << 63 }
    }
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if z == before {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if z == before {
            return z / 3.0;
        }
    }
}

/// Register `i` of a dense body: 6 bits from bit `6i`, least significant
/// bits first (a read past the end sees zeros, as Redis's past its final
/// NUL).
fn dense_get(body: &[u8], i: usize) -> u8 {
    let (byte, shift) = (i * 6 / 8, i * 6 % 8);
    let b0 = u16::from(body[byte]);
    let b1 = u16::from(body.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> shift) | (b1 << (8 - shift))) & 63) as u8
}

fn dense_set(body: &mut [u8], i: usize, v: u8) {
    let (byte, shift) = (i * 6 / 8, i * 6 % 8);
    let mask = 63u16 << shift;
    let bits = u16::from(v & 63) << shift;
    body[byte] = (body[byte] & !(mask as u8)) | bits as u8;
    if let Some(next) = body.get_mut(byte + 1) {
        *next = (*next & !((mask >> 8) as u8)) | (bits >> 8) as u8;
    }
}

/// The shortest sparse runs of `registers`, or `None` if a register is
/// above 32 or the runs would not fit in `SPARSE_MAX_BYTES`.
fn sparse_runs(registers: &[u8; REGISTERS]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < REGISTERS {
        let v = registers[i];
        let mut run = 1;
        while i + run < REGISTERS && registers[i + run] == v {
            run += 1;
        }
        i += run;
        if v == 0 {
            while run > 0 {
                if run > 64 {
                    let n = run.min(16384) - 1;
                    out.extend([0x40 | (n >> 8) as u8, n as u8]);
                    run -= n + 1;
                } else {
                    out.push((run - 1) as u8);
                    run = 0;
                }
            }
        } else if v > SPARSE_MAX_VALUE {
            return None;
        } else {
            while run > 0 {
                let n = run.min(4);
                out.push(0x80 | (v - 1) << 2 | (n - 1) as u8);
                run -= n;
            }
        }
        if HEADER + out.len() > SPARSE_MAX_BYTES {
            return None;
        }
    }
    Some(out)
}

/// Reads the HyperLogLog string `s` into `registers`: each register set to
/// the string's (`max`: raised to it where lower, for a union). A sparse
/// string costs its runs, not its 16384 registers, except where it has
/// values. Returns whether it was dense, and its header's count bytes.
fn raise(s: &[u8], registers: &mut [u8; REGISTERS], max: bool) -> Result<(bool, [u8; 8]), Refused> {
    if s.len() < HEADER || &s[..4] != b"HYLL" || s[4] > SPARSE {
        return Err(Refused::NotHll);
    }
    let dense = s[4] == DENSE;
    let body = &s[HEADER..];
    if dense && body.len() != DENSE_BYTES {
        return Err(Refused::NotHll);
    }
    let mut card = [0u8; 8];
    card.copy_from_slice(&s[8..16]);
    if dense {
        for (i, r) in registers.iter_mut().enumerate() {
            let v = dense_get(body, i);
            *r = if max { (*r).max(v) } else { v };
        }
        return Ok((dense, card));
    }
    // Sparse: ZERO 00llllll (1-64 zeros), XZERO 01llllll llllllll (1-16384
    // zeros), VAL 1vvvvvll (1-4 registers of value 1-32).
    let (mut at, mut index) = (0usize, 0usize);
    while at < body.len() {
        let b = body[at];
        let (value, run, size) = match b >> 6 {
            0 => (0, usize::from(b & 0x3f) + 1, 1),
            1 => {
                let low = *body.get(at + 1).ok_or(Refused::Corrupt)?;
                (0, (usize::from(b & 0x3f) << 8 | usize::from(low)) + 1, 2)
            }
            _ => (((b >> 2) & 0x1f) + 1, usize::from(b & 3) + 1, 1),
        };
        if index + run > REGISTERS {
            return Err(Refused::Corrupt);
        }
        let span = &mut registers[index..index + run];
        if !max {
            span.fill(value);
        } else if value > 0 {
            span.iter_mut().for_each(|r| *r = (*r).max(value));
        }
        index += run;
        at += size;
    }
    if index != REGISTERS {
        return Err(Refused::Corrupt);
    }
    Ok((dense, card))
}

/// The HyperLogLog at `key`: `None` if there is none, an error if the key
/// holds anything else.
fn read(ks: &Keyspace, key: &[u8], now: LogTime) -> Result<Option<Hll>, CmdError> {
    match ks.get(key, now).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Str(s)) => Hll::parse(s).map(Some).map_err(Refused::error),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Raises `registers` to the HyperLogLog at `key` (nothing if there is no
/// key): whether it was dense.
fn raise_by_key(ks: &Keyspace, key: &[u8], now: LogTime, registers: &mut [u8; REGISTERS]) -> Result<bool, CmdError> {
    match ks.get(key, now).map(|e| &e.value) {
        None => Ok(false),
        Some(Value::Str(s)) => raise(s, registers, true).map(|(dense, _)| dense).map_err(Refused::error),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// ```text
/// PFADD key [element ...]
/// ```
/// 1 if a register changed (or the key was created), else 0.
pub fn pfadd(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let existing = read(ks, &key, ctx.log_time)?;
    let created = existing.is_none();
    let mut hll = existing.unwrap_or_else(Hll::empty);
    let mut changed = false;
    for element in args.rest() {
        let (index, value) = register_of(element);
        if value > hll.registers[index] {
            hll.registers[index] = value;
            changed = true;
        }
    }
    if created || changed {
        store_in_place(ks, ctx, &key, Bytes::from(hll.serialize(true)));
        ctx.key_event('$', "pfadd", &key);
    }
    Ok(Reply::Int(i64::from(created || changed)))
}

/// ```text
/// PFCOUNT key [key ...]
/// ```
/// The estimated number of distinct elements added to the keys together.
pub fn pfcount(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let mut union = Hll::empty();
    for key in args.rest() {
        raise_by_key(ks, key, ctx.now, &mut union.registers)?;
    }
    Ok(Reply::Int(union.count() as i64))
}

/// ```text
/// PFMERGE destkey [sourcekey ...]
/// ```
/// Stores at `destkey` the union of its HyperLogLog and the sources'.
pub fn pfmerge(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let dst = args.next_bytes()?.clone();
    let mut union = Hll::empty();
    let mut dense = false;
    for key in std::iter::once(&dst).chain(args.rest()) {
        dense |= raise_by_key(ks, key, ctx.log_time, &mut union.registers)?;
    }
    let mut target = read(ks, &dst, ctx.log_time)?.unwrap_or_else(Hll::empty);
    target.registers = union.registers;
    target.dense |= dense;
    store_in_place(ks, ctx, &dst, Bytes::from(target.serialize(true)));
    ctx.key_event('$', "pfadd", &dst);
    Ok(Reply::ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_registers_round_trip_through_their_6_bits() {
        let mut body = vec![0u8; DENSE_BYTES];
        let value = |i: usize| ((i * 7 + 3) % 64) as u8;
        for i in 0..REGISTERS {
            dense_set(&mut body, i, value(i));
        }
        assert!((0..REGISTERS).all(|i| dense_get(&body, i) == value(i)));
        // Setting one register leaves its neighbours alone.
        dense_set(&mut body, 5, 0);
        assert_eq!((dense_get(&body, 4), dense_get(&body, 5), dense_get(&body, 6)), (value(4), 0, value(6)));
    }

    #[test]
    fn sparse_and_dense_forms_hold_the_same_registers() {
        let mut hll = Hll::empty();
        for i in 0..300 {
            let (index, value) = register_of(format!("e{i}").as_bytes());
            hll.registers[index] = hll.registers[index].max(value);
        }
        let sparse = hll.serialize(false);
        assert_eq!(sparse[4], SPARSE);
        hll.dense = true;
        let dense = hll.serialize(false);
        assert_eq!((dense[4], dense.len()), (DENSE, HEADER + DENSE_BYTES));
        let (a, b) = (Hll::parse(&sparse).ok().unwrap(), Hll::parse(&dense).ok().unwrap());
        assert!(a.registers == b.registers && a.registers == hll.registers);
        assert_eq!(a.count(), b.count());
        // A register above 32 has no sparse form.
        let mut big = Hll::empty();
        big.registers[7] = 33;
        assert_eq!(big.serialize(false)[4], DENSE);
        // The stale bit is the top bit of the header's last byte.
        assert_eq!(Hll::empty().serialize(true)[15], 0x80);
    }

    #[test]
    fn an_estimate_past_the_signed_range_is_its_minimum_as_in_redis() {
        // Redis 7.0.15 answers -9223372036854775808 for registers all 50,
        // 51 or 63 (its `llroundl` overflows).
        for value in [50u8, 51, 63] {
            let mut hll = Hll::empty();
            hll.registers.fill(value);
            assert_eq!(hll.count() as i64, i64::MIN, "{value}");
        }
        let mut hll = Hll::empty();
        hll.registers.fill(20);
        assert!(hll.count() < 1 << 40);
    }

    #[test]
    fn broken_strings_are_refused() {
        let ok = Hll::empty().serialize(false);
        assert!(Hll::parse(&ok).is_ok());
        let corrupt = |s: &[u8]| matches!(Hll::parse(s), Err(Refused::Corrupt));
        let not_hll = |s: &[u8]| matches!(Hll::parse(s), Err(Refused::NotHll));
        assert!(not_hll(b"HYLL"));
        assert!(not_hll(&[&ok[..4], &[2], &ok[5..]].concat()));
        assert!(not_hll(&[&ok[..], &[0]].concat()[1..]));
        let mut dense_short = Hll::empty();
        dense_short.dense = true;
        let dense = dense_short.serialize(false);
        assert!(not_hll(&dense[..dense.len() - 1]));
        // Runs that cover too few or too many registers, or an XZERO cut short.
        assert!(corrupt(&[&ok[..], &[0x00]].concat()));
        assert!(corrupt(&ok[..ok.len() - 2]));
        assert!(corrupt(&[&ok[..HEADER], &[0x7f]].concat()));
    }

    #[test]
    fn the_estimate_of_nothing_is_zero_and_grows_with_distinct_elements() {
        assert_eq!(Hll::empty().count(), 0);
        let mut hll = Hll::empty();
        let mut last = 0;
        for i in 0..2000 {
            let (index, value) = register_of(format!("{i}").as_bytes());
            hll.registers[index] = hll.registers[index].max(value);
            if i % 500 == 499 {
                let n = hll.count();
                assert!(n > last && (n as f64 - (i + 1) as f64).abs() < 0.05 * (i + 1) as f64, "{n} for {}", i + 1);
                last = n;
            }
        }
        assert_eq!((sigma(1.0), tau(0.0), tau(1.0)), (f64::INFINITY, 0.0, 0.0));
    }
}
