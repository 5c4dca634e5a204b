//! Redis's `long double` arithmetic, as HINCRBYFLOAT (and INCRBYFLOAT) do it
//! on x86-64, in software: values with a 64-bit mantissa (the x87 80-bit
//! format), parsed as `strtold` parses, added and rounded as the FPU rounds
//! (to nearest, ties to even) and printed as `printf("%.17Lf")` prints. Exact
//! big-integer arithmetic, so the result is the same bits on every node and
//! machine, and Redis's replies digit for digit.

use std::cmp::Ordering;

/// The exponent of the smallest subnormal's only bit (2^-16445).
const MIN_EXP: i64 = -16445;
/// The exponent of the largest finite value's lowest bit
/// ((2^64 - 1) * 2^16320, about 1.19e4932).
const MAX_EXP: i64 = 16320;
/// Redis's `MAX_LONG_DOUBLE_CHARS`: `string2ld` refuses longer strings.
const MAX_CHARS: usize = 5 * 1024;

/// A finite value: `(-1)^negative * mantissa * 2^exp`. The mantissa's top
/// bit is set unless `exp` is `MIN_EXP` (a subnormal) or it is zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongDouble {
    negative: bool,
    mantissa: u64,
    exp: i64,
}

impl LongDouble {
    pub const ZERO: LongDouble = LongDouble { negative: false, mantissa: 0, exp: 0 };
}

/// What `string2ld` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Float {
    Finite(LongDouble),
    /// `inf`, `infinity` (either sign): accepted, for the caller to refuse.
    Infinite,
}

/// Parses `raw` as Redis's `string2ld`: the whole string as `strtold`
/// reads it (decimal or `0x` hexadecimal, `inf`), with no leading space,
/// under 5 KiB; `None` for anything else, NaN, and values that overflow
/// to infinity or underflow to zero.
pub fn parse(raw: &[u8]) -> Option<Float> {
    if raw.is_empty() || raw.len() >= MAX_CHARS {
        return None;
    }
    let (negative, body) = match raw[0] {
        b'-' => (true, &raw[1..]),
        b'+' => (false, &raw[1..]),
        _ => (false, raw),
    };
    if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        return Some(Float::Infinite);
    }
    let number = match body {
        [b'0', x, rest @ ..] if x.eq_ignore_ascii_case(&b'x') => hexadecimal(rest)?,
        _ => decimal(body)?,
    };
    match number {
        Number::Zero => Some(Float::Finite(LongDouble { negative, mantissa: 0, exp: 0 })),
        Number::OutOfRange => None,
        Number::Ratio { num, den, exp2 } => match round(negative, &num, &den, exp2) {
            Some(v) if v.mantissa != 0 => Some(Float::Finite(v)),
            _ => None,
        },
    }
}

/// `a + b`, rounded; `None` if it overflows to infinity.
pub fn add(a: LongDouble, b: LongDouble) -> Option<LongDouble> {
    if a.mantissa == 0 {
        return Some(b);
    }
    if b.mantissa == 0 {
        return Some(a);
    }
    let low = a.exp.min(b.exp);
    let x = Big::from_u128(a.mantissa.into()).shl(a.exp - low);
    let y = Big::from_u128(b.mantissa.into()).shl(b.exp - low);
    let (negative, sum) = if a.negative == b.negative {
        (a.negative, x.add(&y))
    } else {
        match x.cmp(&y) {
            Ordering::Equal => return Some(LongDouble::ZERO),
            Ordering::Greater => (a.negative, x.sub(&y)),
            Ordering::Less => (b.negative, y.sub(&x)),
        }
    };
    round(negative, &sum, &Big::from_u128(1), low)
}

/// A finite `f64`, exactly (as C widens a `double` to a `long double`).
pub fn from_f64(v: f64) -> LongDouble {
    let bits = v.to_bits();
    let negative = bits >> 63 == 1;
    let biased = ((bits >> 52) & 0x7ff) as i64;
    let fraction = bits & ((1 << 52) - 1);
    let (mantissa, exp) = if biased == 0 { (fraction, -1074) } else { (fraction | 1 << 52, biased - 1075) };
    if mantissa == 0 {
        return LongDouble { negative, mantissa: 0, exp: 0 };
    }
    let shift = mantissa.leading_zeros();
    LongDouble { negative, mantissa: mantissa << shift, exp: exp - i64::from(shift) }
}

/// `v` as Redis's `ld2string(..., LD_STR_HUMAN)` writes it: `%.17Lf`
/// (rounded half to even, as glibc's printf), trailing zeros and point
/// removed, `-0` written `0`.
pub fn to_human(v: LongDouble) -> String {
    let digits = if v.exp >= 0 {
        // An integer: its fractional digits are all zeros.
        Big::from_u128(v.mantissa.into()).shl(v.exp).to_decimal()
    } else {
        let scaled = u128::from(v.mantissa) * 10u128.pow(17);
        let shift = v.exp.unsigned_abs();
        // `scaled` < 2^121: shifted this far it is less than a half.
        let units = if shift >= 122 {
            0
        } else {
            let q = scaled >> shift;
            let rest = scaled - (q << shift);
            let half = 1u128 << (shift - 1);
            if rest > half || (rest == half && q & 1 == 1) { q + 1 } else { q }
        };
        let text = format!("{units:018}");
        let (int, frac) = text.split_at(text.len() - 17);
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() { int.to_string() } else { format!("{int}.{frac}") }
    };
    if v.negative && digits != "0" { format!("-{digits}") } else { digits }
}

/// A parsed number before rounding.
enum Number {
    Zero,
    /// So large it overflows, or so small it rounds to zero.
    OutOfRange,
    /// `num / den * 2^exp2`, `num` > 0.
    Ratio { num: Big, den: Big, exp2: i64 },
}

/// An exponent's digits, saturated far beyond any value's range.
fn exponent(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0i64, |e, d| (e * 10 + i64::from(d - b'0')).min(1 << 40)))
}

/// An optional sign and an exponent's digits.
fn signed_exponent(raw: &[u8]) -> Option<i64> {
    match raw {
        [b'-', digits @ ..] => exponent(digits).map(|e| -e),
        [b'+', digits @ ..] => exponent(digits),
        digits => exponent(digits),
    }
}

/// `digits[.digits][(e|E)[sign]digits]`, at least one mantissa digit.
fn decimal(s: &[u8]) -> Option<Number> {
    let (mantissa, exp10) = match s.iter().position(|c| c.eq_ignore_ascii_case(&b'e')) {
        Some(at) => (&s[..at], signed_exponent(&s[at + 1..])?),
        None => (s, 0),
    };
    let (int, frac) = match mantissa.iter().position(|&c| c == b'.') {
        Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
        None => (mantissa, &[][..]),
    };
    let all = || int.iter().chain(frac.iter());
    if int.len() + frac.len() == 0 || !all().all(u8::is_ascii_digit) {
        return None;
    }
    let significant: Vec<u8> = all().copied().skip_while(|&d| d == b'0').collect();
    if significant.is_empty() {
        return Some(Number::Zero);
    }
    // The value is `significant * 10^exp10`, in [10^(digits-1+exp10), 10^(digits+exp10)).
    let exp10 = exp10 - frac.len() as i64;
    let digits = significant.len() as i64;
    // The largest value is below 10^4933; half the smallest subnormal
    // (2^-16446) is above 10^-4952.
    if digits - 1 + exp10 >= 4933 || digits + exp10 <= -4952 {
        return Some(Number::OutOfRange);
    }
    let mut num = Big::from_u128(0);
    for chunk in significant.chunks(9) {
        let value = chunk.iter().fold(0u32, |v, d| v * 10 + u32::from(d - b'0'));
        num.mul_add(10u32.pow(chunk.len() as u32), value);
    }
    let one = Big::from_u128(1);
    Some(if exp10 >= 0 {
        Number::Ratio { num: num.mul(&Big::pow10(exp10.unsigned_abs())), den: one, exp2: 0 }
    } else {
        Number::Ratio { num, den: Big::pow10(exp10.unsigned_abs()), exp2: 0 }
    })
}

/// After `0x`: `hexdigits[.hexdigits][(p|P)[sign]digits]`, at least one
/// mantissa digit; the exponent is of 2, in decimal.
fn hexadecimal(s: &[u8]) -> Option<Number> {
    let (mantissa, exp2) = match s.iter().position(|c| c.eq_ignore_ascii_case(&b'p')) {
        Some(at) => (&s[..at], signed_exponent(&s[at + 1..])?),
        None => (s, 0),
    };
    let (int, frac) = match mantissa.iter().position(|&c| c == b'.') {
        Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
        None => (mantissa, &[][..]),
    };
    if int.len() + frac.len() == 0 || !int.iter().chain(frac.iter()).all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut num = Big::from_u128(0);
    for &c in int.iter().chain(frac.iter()) {
        let digit = (c as char).to_digit(16).unwrap_or(0);
        num.mul_add(16, digit);
    }
    if num.is_zero() {
        return Some(Number::Zero);
    }
    let exp2 = exp2 - 4 * frac.len() as i64;
    // In [2^(bits-1+exp2), 2^(bits+exp2)): the largest value is below
    // 2^16384, half the smallest subnormal is 2^-16446.
    let bits = num.bits();
    if bits - 1 + exp2 >= 16384 || bits + exp2 <= -16446 {
        return Some(Number::OutOfRange);
    }
    Some(Number::Ratio { num, den: Big::from_u128(1), exp2 })
}

/// `num / den * 2^exp2` (`num` > 0) rounded to nearest, ties to even,
/// with subnormals; `None` if it overflows.
fn round(negative: bool, num: &Big, den: &Big, exp2: i64) -> Option<LongDouble> {
    // The exponent that leaves a quotient of 64 bits, give or take one.
    let mut exp = (num.bits() - den.bits() + exp2 - 64).max(MIN_EXP);
    loop {
        let shift = exp2 - exp;
        let (n, d) = if shift >= 0 { (num.shl(shift), den.clone()) } else { (num.clone(), den.shl(-shift)) };
        let (q, rest) = divide(n, &d);
        if q >> 64 != 0 {
            exp += 1;
            continue;
        }
        let half = rest.shl(1).cmp(&d);
        let mut m = q;
        if half == Ordering::Greater || (half == Ordering::Equal && m & 1 == 1) {
            m += 1;
        }
        if m >> 64 != 0 {
            m >>= 1;
            exp += 1;
        }
        if exp > MAX_EXP {
            return None;
        }
        return Some(LongDouble { negative, mantissa: m as u64, exp: if m == 0 { 0 } else { exp } });
    }
}

/// `num / den`: the quotient (under 2^66 where `round` divides) and
/// the remainder. Schoolbook binary division.
fn divide(mut num: Big, den: &Big) -> (u128, Big) {
    if num.cmp(den) == Ordering::Less {
        return (0, num);
    }
    let shift = num.bits() - den.bits();
    debug_assert!((0..128).contains(&shift), "quotient of {shift} bits");
    let shift = shift.clamp(0, 127);
    let mut d = den.shl(shift);
    let mut q = 0u128;
    for i in (0..=shift).rev() {
        if num.cmp(&d) != Ordering::Less {
            num = num.sub(&d);
            q |= 1 << i;
        }
        d.shr1();
    }
    (q, num)
}

/// A non-negative integer: little-endian 32-bit limbs, no zero limb on top.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u128(mut v: u128) -> Big {
        let mut limbs = Vec::new();
        while v != 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Big(limbs)
    }

    fn pow10(mut n: u64) -> Big {
        let mut b = Big::from_u128(1);
        while n >= 9 {
            b.mul_add(1_000_000_000, 0);
            n -= 9;
        }
        b.mul_add(10u32.pow(n as u32), 0);
        b
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bits(&self) -> i64 {
        self.0.last().map_or(0, |top| self.0.len() as i64 * 32 - i64::from(top.leading_zeros()))
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    /// `self = self * m + a`.
    fn mul_add(&mut self, m: u32, a: u32) {
        let mut carry = u64::from(a);
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(m) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn mul(&self, other: &Big) -> Big {
        let mut out = vec![0u32; self.0.len() + other.0.len()];
        for (i, &a) in self.0.iter().enumerate() {
            let mut carry = 0u64;
            for (j, &b) in other.0.iter().enumerate() {
                let v = u64::from(a) * u64::from(b) + u64::from(out[i + j]) + carry;
                out[i + j] = v as u32;
                carry = v >> 32;
            }
            out[i + other.0.len()] = carry as u32;
        }
        let mut out = Big(out);
        out.trim();
        out
    }

    fn add(&self, other: &Big) -> Big {
        let (long, short) = if self.0.len() >= other.0.len() { (self, other) } else { (other, self) };
        let mut out = Vec::with_capacity(long.0.len() + 1);
        let mut carry = 0u64;
        for (i, &a) in long.0.iter().enumerate() {
            let v = u64::from(a) + u64::from(short.0.get(i).copied().unwrap_or(0)) + carry;
            out.push(v as u32);
            carry = v >> 32;
        }
        if carry != 0 {
            out.push(carry as u32);
        }
        Big(out)
    }

    /// `self - other`, for `self >= other`.
    fn sub(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for (i, &a) in self.0.iter().enumerate() {
            let mut v = i64::from(a) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            borrow = i64::from(v < 0);
            if v < 0 {
                v += 1 << 32;
            }
            out.push(v as u32);
        }
        let mut out = Big(out);
        out.trim();
        out
    }

    /// `self * 2^n`, `n` >= 0.
    fn shl(&self, n: i64) -> Big {
        if self.is_zero() {
            return self.clone();
        }
        let (limbs, bits) = ((n / 32) as usize, (n % 32) as u32);
        let mut out = vec![0u32; limbs];
        if bits == 0 {
            out.extend_from_slice(&self.0);
        } else {
            let mut carry = 0u32;
            for &limb in &self.0 {
                out.push((limb << bits) | carry);
                carry = limb >> (32 - bits);
            }
            if carry != 0 {
                out.push(carry);
            }
        }
        Big(out)
    }

    fn shr1(&mut self) {
        let mut carry = 0u32;
        for limb in self.0.iter_mut().rev() {
            let v = *limb;
            *limb = (v >> 1) | (carry << 31);
            carry = v & 1;
        }
        self.trim();
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    fn to_decimal(&self) -> String {
        let mut n = self.clone();
        let mut chunks = Vec::new();
        while !n.is_zero() {
            let mut rest = 0u64;
            for limb in n.0.iter_mut().rev() {
                let v = (rest << 32) | u64::from(*limb);
                *limb = (v / 1_000_000_000) as u32;
                rest = v % 1_000_000_000;
            }
            n.trim();
            chunks.push(rest);
        }
        let mut text = chunks.pop().map_or_else(|| "0".to_string(), |top| top.to_string());
        for chunk in chunks.iter().rev() {
            text.push_str(&format!("{chunk:09}"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HINCRBYFLOAT's arithmetic on two strings, as the tests state it.
    fn incr(current: &str, by: &str) -> Option<String> {
        let (Some(Float::Finite(a)), Some(Float::Finite(b))) = (parse(current.as_bytes()), parse(by.as_bytes())) else {
            return None;
        };
        add(a, b).map(to_human)
    }

    fn human(raw: &str) -> Option<String> {
        match parse(raw.as_bytes())? {
            Float::Finite(v) => Some(to_human(v)),
            Float::Infinite => Some("inf".into()),
        }
    }

    // The expected strings are glibc's (strtold, long double addition,
    // printf("%.17Lf") trimmed) on x86-64, as Redis 7.0 replies.
    #[test]
    fn sums_are_redis_long_double_sums() {
        assert_eq!(incr("5000", "1e-2").as_deref(), Some("5000.00999999999999979"));
        assert_eq!(incr("2.75", "0.1").as_deref(), Some("2.85"));
        assert_eq!(incr("0", "1.5").as_deref(), Some("1.5"));
        assert_eq!(incr("1.5", "1.5").as_deref(), Some("3"));
        assert_eq!(incr("10", "-10").as_deref(), Some("0"));
        assert_eq!(incr("0.1", "0.2").as_deref(), Some("0.3"));
        assert_eq!(incr("-1", "0.5").as_deref(), Some("-0.5"));
        assert_eq!(incr("1e4932", "1e4932"), None, "overflows to infinity");
    }

    #[test]
    fn values_print_as_percent_17_lf() {
        assert_eq!(human("0x1p-3").as_deref(), Some("0.125"));
        // A tie at the 17th decimal rounds to even, as glibc's printf.
        assert_eq!(human("3.814697265625e-06").as_deref(), Some("0.00000381469726562"));
        assert_eq!(human("-1e-30").as_deref(), Some("0"), "-0.000... is written 0");
        assert_eq!(human("-0").as_deref(), Some("0"));
        assert_eq!(human("1e20").as_deref(), Some("100000000000000000000"));
        // 64 bits of mantissa: integers past 2^64 are rounded.
        assert_eq!(human("123456789012345678901234567890").as_deref(), Some("123456789012345678899921813504"));
        assert_eq!(human("0.1").as_deref(), Some("0.1"));
        assert_eq!(human("1e-4950").as_deref(), Some("0"), "a subnormal prints as 0");
        let max = human("1.18973149535723176502e4932").unwrap_or_default();
        assert!(max.starts_with("118973149535723176502126385303") && max.len() == 4933, "{max}");
    }

    #[test]
    fn parsing_follows_string2ld() {
        for good in ["1", "-1", "+1", "1.", ".5", "1e5", "1E+5", "1e-5", "0x10", "0X1.8p1", "0x.8", "007", "0e99999"] {
            assert!(matches!(parse(good.as_bytes()), Some(Float::Finite(_))), "{good}");
        }
        for inf in ["inf", "-INF", "Infinity", "+infinity"] {
            assert_eq!(parse(inf.as_bytes()), Some(Float::Infinite), "{inf}");
        }
        for bad in ["", " 1", "1 ", "abc", "nan", "-nan", "1e", "1e+", ".", "-", "0x", "0xg", "0x1p", "1.2.3", "infinit", "1e5000", "1e-5000", "1_0"] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse("1".repeat(5119).as_bytes()), None, "over 4933 digits overflows");
        assert!(parse(format!("0.{}", "0".repeat(5000)).as_bytes()).is_some());
        assert_eq!(parse(format!("0.{}", "0".repeat(5200)).as_bytes()), None, "5 KiB or more");
        assert_eq!(parse("1e99999999999999999999999".as_bytes()), None);
        assert_eq!(parse("0x1p-16446".as_bytes()), None, "half the smallest subnormal rounds to zero");
        assert!(parse("0x1p-16445".as_bytes()).is_some(), "the smallest subnormal");
    }
}
