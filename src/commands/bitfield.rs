//! BITFIELD and BITFIELD_RO: signed and unsigned integers of 1 to 64 bits
//! (unsigned up to 63, as Redis) at any bit offset of a string, read, set
//! and incremented with Redis 7.0's overflow rules (`bitops.c`): WRAP
//! (two's complement), SAT (clamped) or FAIL (nothing written, nil).
//!
//! Bit 0 is the most significant bit of the first byte, as for SETBIT.

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

use super::strings::{store_in_place, string_of, MAX_BUILT_STRING_LEN, REDIS_MAX_STRING_LEN};
use super::{CmdError, CmdResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    Set(i64),
    IncrBy(i64),
}

/// One subcommand: an integer of `bits` bits at bit `offset`.
#[derive(Debug, Clone, Copy)]
struct Field {
    op: Op,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

const BAD_TYPE: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";

/// `i<bits>` or `u<bits>`: whether signed, and the width.
fn parse_type(raw: &[u8]) -> Result<(bool, u32), CmdError> {
    let bad = || CmdError::Other(BAD_TYPE.into());
    let (signed, digits) = match raw.split_first() {
        Some((b'i', rest)) => (true, rest),
        Some((b'u', rest)) => (false, rest),
        _ => return Err(bad()),
    };
    match parse_i64(digits) {
        Some(n) if n >= 1 && n <= if signed { 64 } else { 63 } => Ok((signed, n as u32)),
        _ => Err(bad()),
    }
}

/// A bit offset, or `#n`: the n-th field of this width.
fn parse_offset(raw: &[u8], bits: u32) -> Result<u64, CmdError> {
    let bad = || CmdError::Other(BAD_OFFSET.into());
    let (by_index, digits) = match raw.strip_prefix(b"#") {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let n = parse_i64(digits).ok_or_else(bad)?;
    let n = if by_index { n.checked_mul(i64::from(bits)).ok_or_else(bad)? } else { n };
    if n < 0 || (n >> 3) as u64 >= REDIS_MAX_STRING_LEN {
        return Err(bad());
    }
    Ok(n as u64)
}

/// The subcommands, in order, with Redis's errors.
fn parse_fields(argv: &[Bytes]) -> Result<Vec<Field>, CmdError> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < argv.len() {
        let left = argv.len() - j - 1;
        let name = argv[j].to_ascii_lowercase();
        let takes_value = match name.as_slice() {
            b"get" if left >= 2 => false,
            b"set" | b"incrby" if left >= 3 => true,
            b"overflow" if left >= 1 => {
                overflow = match argv[j + 1].to_ascii_lowercase().as_slice() {
                    b"wrap" => Overflow::Wrap,
                    b"sat" => Overflow::Sat,
                    b"fail" => Overflow::Fail,
                    _ => return Err(CmdError::Other("ERR Invalid OVERFLOW type specified".into())),
                };
                j += 2;
                continue;
            }
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        };
        let (signed, bits) = parse_type(&argv[j + 1])?;
        let offset = parse_offset(&argv[j + 2], bits)?;
        let op = if takes_value {
            let value = parse_i64(&argv[j + 3]).ok_or(CmdError::Arg(ArgError::NotInteger))?;
            if name == b"set" { Op::Set(value) } else { Op::IncrBy(value) }
        } else {
            Op::Get
        };
        fields.push(Field { op, signed, bits, offset, overflow });
        j += if takes_value { 4 } else { 3 };
    }
    Ok(fields)
}

/// The `bits` bits at `offset` as an unsigned number; bits past the end
/// of `bytes` read as zero.
fn get_unsigned(bytes: &[u8], offset: u64, bits: u32) -> u64 {
    (0..u64::from(bits)).fold(0, |value, j| {
        let at = offset + j;
        let byte = bytes.get((at >> 3) as usize).copied().unwrap_or(0);
        (value << 1) | u64::from((byte >> (7 - (at & 7))) & 1)
    })
}

fn get_signed(bytes: &[u8], offset: u64, bits: u32) -> i64 {
    let value = get_unsigned(bytes, offset, bits);
    if bits < 64 && value & (1 << (bits - 1)) != 0 {
        (value | (u64::MAX << bits)) as i64
    } else {
        value as i64
    }
}

/// Writes the low `bits` bits of `value` at `offset` (within `bytes`).
fn set_bits(bytes: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let bit = (value >> (u64::from(bits) - 1 - j)) & 1;
        let at = offset + j;
        let shift = 7 - (at & 7);
        let byte = &mut bytes[(at >> 3) as usize];
        *byte = (*byte & !(1 << shift)) | ((bit as u8) << shift);
    }
}

/// Whether `value + incr` fits an unsigned field of `bits` bits: `None`
/// if it does, else the value the overflow rule gives (`None` inside for
/// FAIL).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, rule: Overflow) -> Option<Option<u64>> {
    let max = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = 0u64.wrapping_sub(value) as i64;
    let wrapped = || value.wrapping_add(incr as u64) & !(u64::MAX.checked_shl(bits).unwrap_or(0));
    if value > max || (incr > 0 && incr > max_incr) {
        Some(match rule {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(max),
            Overflow::Fail => None,
        })
    } else if incr < 0 && incr < min_incr {
        Some(match rule {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(0),
            Overflow::Fail => None,
        })
    } else {
        None
    }
}

/// As [`unsigned_overflow`], for a signed field.
fn signed_overflow(value: i64, incr: i64, bits: u32, rule: Overflow) -> Option<Option<i64>> {
    let max = if bits == 64 { i64::MAX } else { (1i64 << (bits - 1)) - 1 };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wrapped = || {
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1 << (bits - 1)) != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    if value > max || (bits != 64 && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr) {
        Some(match rule {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(max),
            Overflow::Fail => None,
        })
    } else if value < min || (bits != 64 && incr < min_incr) || (value < 0 && incr < 0 && incr < min_incr) {
        Some(match rule {
            Overflow::Wrap => Some(wrapped()),
            Overflow::Sat => Some(min),
            Overflow::Fail => None,
        })
    } else {
        None
    }
}

/// Runs a SET or INCRBY on `bytes`: the reply, and whether the field's
/// value changed.
fn write_field(bytes: &mut [u8], f: &Field) -> (Reply, bool) {
    let (value, incr) = match f.op {
        Op::Set(v) => (v, None),
        Op::IncrBy(by) => (by, Some(by)),
        Op::Get => unreachable!("GET does not write"),
    };
    if f.signed {
        let old = get_signed(bytes, f.offset, f.bits);
        let (overflow, new) = match incr {
            Some(by) => match signed_overflow(old, by, f.bits, f.overflow) {
                None => (None, old.wrapping_add(by)),
                Some(limit) => (Some(limit), limit.unwrap_or(old)),
            },
            None => match signed_overflow(value, 0, f.bits, f.overflow) {
                None => (None, value),
                Some(limit) => (Some(limit), limit.unwrap_or(old)),
            },
        };
        if overflow == Some(None) {
            return (Reply::Nil, false);
        }
        set_bits(bytes, f.offset, f.bits, new as u64);
        (Reply::Int(if incr.is_some() { new } else { old }), old != new)
    } else {
        let old = get_unsigned(bytes, f.offset, f.bits);
        let (overflow, new) = match incr {
            Some(by) => match unsigned_overflow(old, by, f.bits, f.overflow) {
                None => (None, old.wrapping_add(by as u64)),
                Some(limit) => (Some(limit), limit.unwrap_or(old)),
            },
            None => match unsigned_overflow(value as u64, 0, f.bits, f.overflow) {
                None => (None, value as u64),
                Some(limit) => (Some(limit), limit.unwrap_or(old)),
            },
        };
        if overflow == Some(None) {
            return (Reply::Nil, false);
        }
        set_bits(bytes, f.offset, f.bits, new);
        (Reply::Int((if incr.is_some() { new } else { old }) as i64), old != new)
    }
}

fn read_field(bytes: &[u8], f: &Field) -> Reply {
    Reply::Int(if f.signed { get_signed(bytes, f.offset, f.bits) } else { get_unsigned(bytes, f.offset, f.bits) as i64 })
}

/// ```text
/// BITFIELD key [GET type offset] [SET type offset value]
///     [INCRBY type offset increment] [OVERFLOW WRAP|SAT|FAIL] ...
/// ```
/// One reply per GET, SET (the old value) and INCRBY (the new value; nil
/// when OVERFLOW FAIL stopped it). Writing grows the string with zero
/// bytes to the farthest field written, as Redis does, even when every
/// write then fails.
pub fn bitfield(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    let argv = args.all();
    let key = &argv[1];
    let fields = parse_fields(argv)?;
    let Some(end) = fields.iter().filter(|f| f.op != Op::Get).map(|f| f.offset + u64::from(f.bits)).max() else {
        // Only reads.
        let value = string_of(ks.get_mut(key, ctx).map(|e| &*e))?;
        let bytes = value.map_or(&[][..], |v| &v[..]);
        return Ok(Reply::Array(fields.iter().map(|f| read_field(bytes, f)).collect()));
    };
    let len = end.div_ceil(8);
    if len > MAX_BUILT_STRING_LEN {
        return Err(CmdError::Other(BAD_OFFSET.into()));
    }
    let current = string_of(ks.get_mut(key, ctx).map(|e| &*e))?;
    let mut grown = current.is_none();
    let mut bytes = current.map_or_else(Vec::new, |c| c.to_vec());
    if (bytes.len() as u64) < len {
        bytes.resize(len as usize, 0);
        grown = true;
    }
    let mut changed = false;
    let replies = fields
        .iter()
        .map(|f| {
            if f.op == Op::Get {
                return read_field(&bytes, f);
            }
            let (reply, differs) = write_field(&mut bytes, f);
            changed |= differs || (grown && reply != Reply::Nil);
            reply
        })
        .collect();
    if grown || changed {
        store_in_place(ks, ctx, key, Bytes::from(bytes));
    }
    if changed {
        ctx.key_event('$', "setbit", key);
    }
    Ok(Reply::Array(replies))
}

/// ```text
/// BITFIELD_RO key [GET type offset ...]
/// ```
pub fn bitfield_ro(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    let argv = args.all();
    let fields = parse_fields(argv)?;
    if fields.iter().any(|f| f.op != Op::Get) {
        return Err(CmdError::Other("ERR BITFIELD_RO only supports the GET subcommand".into()));
    }
    let value = string_of(ks.get(&argv[1], ctx.now))?;
    let bytes = value.map_or(&[][..], |v| &v[..]);
    Ok(Reply::Array(fields.iter().map(|f| read_field(bytes, f)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_and_write_across_bytes() {
        // Redis's example: a 5-bit unsigned 23 at offset 7.
        let mut bytes = [0u8; 2];
        set_bits(&mut bytes, 7, 5, 23);
        assert_eq!(bytes, [0b0000_0001, 0b0111_0000]);
        assert_eq!(get_unsigned(&bytes, 7, 5), 23);
        assert_eq!(get_signed(&bytes, 7, 5), 23 - 32);
        assert_eq!(get_unsigned(&bytes, 12, 64), 0, "bits past the end read as zero");
    }

    #[test]
    fn overflow_rules_are_redis_s() {
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Wrap), Some(Some(4)));
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Sat), Some(Some(255)));
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Fail), Some(None));
        assert_eq!(unsigned_overflow(5, -10, 8, Overflow::Sat), Some(Some(0)));
        assert_eq!(unsigned_overflow(5, -5, 8, Overflow::Fail), None);
        assert_eq!(signed_overflow(100, 100, 8, Overflow::Wrap), Some(Some(-56)));
        assert_eq!(signed_overflow(-100, -100, 8, Overflow::Sat), Some(Some(-128)));
        assert_eq!(signed_overflow(i64::MAX, 1, 64, Overflow::Wrap), Some(Some(i64::MIN)));
        assert_eq!(signed_overflow(i64::MIN, -1, 64, Overflow::Sat), Some(Some(i64::MIN)));
        assert_eq!(signed_overflow(-1, i64::MAX, 64, Overflow::Fail), None);
    }

    #[test]
    fn types_and_offsets_parse_as_redis_s() {
        assert_eq!(parse_type(b"i64").unwrap(), (true, 64));
        assert_eq!(parse_type(b"u63").unwrap(), (false, 63));
        assert!(parse_type(b"u64").is_err() && parse_type(b"i0").is_err() && parse_type(b"I8").is_err());
        assert_eq!(parse_offset(b"#3", 8).unwrap(), 24);
        assert!(parse_offset(b"-1", 8).is_err() && parse_offset(b"#9223372036854775807", 8).is_err());
        assert!(parse_offset(b"4294967296", 8).is_err());
        assert_eq!(parse_offset(b"4294967295", 8).unwrap(), 4_294_967_295);
    }
}
