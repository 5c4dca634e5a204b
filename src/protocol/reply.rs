//! [`Reply`]: what a command answers, independent of the protocol version.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// A command's answer. Commands build these; only [`encode_reply`] knows RESP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// `+text`
    Status(String),
    /// `-CODE message`; the text includes the code (`ERR`, `WRONGTYPE`, ...).
    Error(String),
    Int(i64),
    Bulk(Bytes),
    /// A missing value: RESP2 `$-1`, RESP3 `_`.
    Nil,
    /// A missing array (e.g. a blocking pop that timed out): RESP2 `*-1`.
    NilArray,
    Array(Vec<Reply>),
    /// RESP3 map; a flat array of alternating keys and values in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 set; an array in RESP2.
    Set(Vec<Reply>),
    /// RESP3 push (pub/sub messages); an array in RESP2.
    Push(Vec<Reply>),
    /// RESP3 verbatim text (`INFO`, `CLIENT INFO`); a bulk string in RESP2.
    Verbatim(String),
    /// RESP3 double (`,1.5`); a bulk string in RESP2, as Redis formats it.
    Double(f64),
    /// Members with scores (`ZRANGE ... WITHSCORES`): RESP3 an array of
    /// `[member, double]` pairs, RESP2 one flat array.
    ScorePairs(Vec<(Bytes, f64)>),
    /// Not for the client: `LOCK.ACQUIRE ... WAIT` joined the lock's queue
    /// as command `seq` of its connection, which now blocks until its wait
    /// ends. Encoded as nil should it ever reach a client.
    Queued { seq: u64 },
    /// Pairs that are not a map (`HRANDFIELD ... WITHVALUES`, which may
    /// repeat a field): RESP3 an array of two-element arrays, RESP2 one flat
    /// array. (Last, so that replies kept in snapshots before it decode.)
    Pairs(Vec<(Reply, Reply)>),
    /// RESP3 big number (`(12345`); a bulk string in RESP2. Only a script
    /// returns one (`{big_number = "..."}`). (After `Pairs`, for the same
    /// reason.)
    BigNumber(String),
    /// RESP3 double written as given (`GEOPOS`'s coordinates, which Redis
    /// writes with `%.17Lf`'s digits, not the shortest); a bulk string in
    /// RESP2. (After `BigNumber`, for the same reason.)
    DoubleText(String),
    /// RESP3 map; in RESP2 an array of `[key, value]` arrays, as Redis
    /// answers `XREAD` and `XREADGROUP`. (Last, for the same reason.)
    NestedMap(Vec<(Reply, Reply)>),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Status("OK".into())
    }

    pub fn error(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn bulk(data: impl Into<Bytes>) -> Reply {
        Reply::Bulk(data.into())
    }

    pub fn text(s: &str) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// Appends `reply` to `out` in RESP2 (`resp3 == false`) or RESP3.
pub fn encode_reply(reply: &Reply, resp3: bool, out: &mut BytesMut) {
    fn header(out: &mut BytesMut, kind: u8, n: i64) {
        out.put_u8(kind);
        put_decimal(out, n);
        out.extend_from_slice(b"\r\n");
    }
    fn line(out: &mut BytesMut, kind: u8, text: &str) {
        out.put_u8(kind);
        // A line may not contain CR or LF; Redis replaces them with spaces.
        out.extend(text.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
        out.extend_from_slice(b"\r\n");
    }
    fn bulk(out: &mut BytesMut, data: &[u8]) {
        header(out, b'$', data.len() as i64);
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    match reply {
        Reply::Status(s) => line(out, b'+', s),
        Reply::Error(s) => line(out, b'-', s),
        Reply::Int(n) => header(out, b':', *n),
        Reply::Bulk(b) => bulk(out, b),
        Reply::Nil | Reply::Queued { .. } if resp3 => out.extend_from_slice(b"_\r\n"),
        Reply::Nil | Reply::Queued { .. } => out.extend_from_slice(b"$-1\r\n"),
        Reply::NilArray if resp3 => out.extend_from_slice(b"_\r\n"),
        Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
        Reply::Array(items) => {
            header(out, b'*', items.len() as i64);
            items.iter().for_each(|r| encode_reply(r, resp3, out));
        }
        Reply::Set(items) => {
            header(out, if resp3 { b'~' } else { b'*' }, items.len() as i64);
            items.iter().for_each(|r| encode_reply(r, resp3, out));
        }
        Reply::Push(items) => {
            header(out, if resp3 { b'>' } else { b'*' }, items.len() as i64);
            items.iter().for_each(|r| encode_reply(r, resp3, out));
        }
        Reply::Map(pairs) => {
            if resp3 {
                header(out, b'%', pairs.len() as i64);
            } else {
                header(out, b'*', 2 * pairs.len() as i64);
            }
            for (k, v) in pairs {
                encode_reply(k, resp3, out);
                encode_reply(v, resp3, out);
            }
        }
        Reply::NestedMap(pairs) => {
            header(out, if resp3 { b'%' } else { b'*' }, pairs.len() as i64);
            for (k, v) in pairs {
                if !resp3 {
                    header(out, b'*', 2);
                }
                encode_reply(k, resp3, out);
                encode_reply(v, resp3, out);
            }
        }
        Reply::Pairs(pairs) => {
            header(out, b'*', if resp3 { pairs.len() } else { 2 * pairs.len() } as i64);
            for (k, v) in pairs {
                if resp3 {
                    header(out, b'*', 2);
                }
                encode_reply(k, resp3, out);
                encode_reply(v, resp3, out);
            }
        }
        Reply::Verbatim(text) if resp3 => {
            header(out, b'=', text.len() as i64 + 4);
            out.extend_from_slice(b"txt:");
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Reply::Verbatim(text) => bulk(out, text.as_bytes()),
        // A line break would end the line early and let the rest pass for
        // more replies: such text goes as the bulk string RESP2 gets.
        Reply::BigNumber(text) if resp3 && !text.contains(['\r', '\n']) => line(out, b'(', text),
        Reply::BigNumber(text) => bulk(out, text.as_bytes()),
        Reply::DoubleText(text) if resp3 && !text.contains(['\r', '\n']) => line(out, b',', text),
        Reply::DoubleText(text) => bulk(out, text.as_bytes()),
        Reply::Double(v) if resp3 => line(out, b',', &format_double(*v)),
        Reply::Double(v) => bulk(out, format_double(*v).as_bytes()),
        Reply::ScorePairs(pairs) if resp3 => {
            header(out, b'*', pairs.len() as i64);
            for (member, score) in pairs {
                header(out, b'*', 2);
                bulk(out, member);
                line(out, b',', &format_double(*score));
            }
        }
        Reply::ScorePairs(pairs) => {
            header(out, b'*', 2 * pairs.len() as i64);
            for (member, score) in pairs {
                bulk(out, member);
                bulk(out, format_double(*score).as_bytes());
            }
        }
    }
}

/// `v` as Redis 7.2 writes a double in a reply (`d2string`): `nan`, `inf`,
/// `-inf`, `0` or `-0`; an integral value within ±2^62 as an integer;
/// otherwise the shortest digits that read back as `v`, written plainly
/// while that takes at most seven zeros after them or six before them
/// (`1349673917.939762`, `0.000015`), else in scientific notation (`1e+20`,
/// `1.5e-7`, `1.7976931348623157e+308`).
pub fn format_double(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // 2^62, exactly as a double: Redis's bound for printing as an integer.
    const INTEGRAL_UP_TO: f64 = 4_611_686_018_427_387_904.0;
    if v.fract() == 0.0 && (-INTEGRAL_UP_TO..=INTEGRAL_UP_TO).contains(&v) {
        return (v as i64).to_string();
    }
    // Rust's `{:e}` writes the shortest round-trip digits: `d[.ddd]e[-]x`.
    let scientific = format!("{:e}", v.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: Vec<u8> = mantissa.bytes().filter(|b| *b != b'.').collect();
    let n = digits.len() as i32;
    // The power of ten of the last digit.
    let last = exponent - (n - 1);
    let mut out = Vec::with_capacity(32);
    if v < 0.0 {
        out.push(b'-');
    }
    if last >= 0 && exponent < n + 7 {
        out.extend_from_slice(&digits);
        out.resize(out.len() + last as usize, b'0');
    } else if last < 0 && (last > -7 || exponent.abs() < 4) {
        let before_point = n + last;
        if before_point <= 0 {
            out.extend_from_slice(b"0.");
            out.resize(out.len() + (-before_point) as usize, b'0');
            out.extend_from_slice(&digits);
        } else {
            out.extend_from_slice(&digits[..before_point as usize]);
            out.push(b'.');
            out.extend_from_slice(&digits[before_point as usize..]);
        }
    } else {
        out.push(digits[0]);
        if n > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.extend_from_slice(if exponent < 0 { b"e-" } else { b"e+" });
        out.extend_from_slice(exponent.unsigned_abs().to_string().as_bytes());
    }
    String::from_utf8(out).unwrap_or_default()
}

/// `n` in decimal, as `to_string` writes it, straight into `out`: every
/// element of a reply has a length or a count in front, and formatting each
/// through a fresh `String` was 2% of a node's CPU serving `LRANGE key 0 99`.
fn put_decimal(out: &mut BytesMut, n: i64) {
    if n < 0 {
        out.put_u8(b'-');
    }
    out.extend_from_slice(decimal_digits(n.unsigned_abs(), &mut [0; 20]));
}

/// The decimal digits of `n`, written into the end of `buf`: no allocation,
/// so a signal handler may use it too (`raft::applying`).
pub fn decimal_digits(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, resp3: bool) -> String {
        let mut out = BytesMut::new();
        encode_reply(r, resp3, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn doubles_are_written_as_redis_7_2_writes_them() {
        // Redis 7.2's d2string for each (worked out apart from this code,
        // from its double2ll and fpconv_dtoa's emit_digits).
        let cases: [(f64, &str); 30] = [
            (0.1, "0.1"),
            (1349673917.939762, "1349673917.939762"),
            (1e300, "1e+300"),
            (1e20, "1e+20"),
            (1e19, "1e+19"),
            (1e18, "1000000000000000000"),
            (4611686018427387904.0, "4611686018427387904"),
            (6e18, "6e+18"),
            (1e-10, "1e-10"),
            (1.5e-7, "1.5e-7"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-2.5, "-2.5"),
            (3.0, "3"),
            (-0.0, "-0"),
            (0.0, "0"),
            (0.000015, "0.000015"),
            (0.0000015, "1.5e-6"),
            (0.00015, "0.00015"),
            (123456789012345680000.0, "123456789012345680000"),
            (1.2345678901234567e23, "123456789012345670000000"),
            (-1e-5, "-0.00001"),
            (1234567.125, "1234567.125"),
            (0.001, "0.001"),
            (1e-4, "0.0001"),
            (12345678912345.5, "12345678912345.5"),
            (1.5e16, "15000000000000000"),
            (3.14159e25, "3.14159e+25"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (v, want) in cases {
            assert_eq!(format_double(v), want, "{v:e}");
        }
        assert_eq!(format_double(f64::NAN), "nan");
        // Whatever the form, it reads back as the same double.
        let mut x = 1.0e-300f64;
        while x < 1e300 {
            for v in [x, -x, x * 1.2345678901234567] {
                assert_eq!(format_double(v).parse::<f64>().unwrap(), v);
            }
            x *= 13.7;
        }
    }

    #[test]
    fn decimals_are_written_as_to_string_writes_them() {
        let mut samples = vec![0, 1, -1, 9, 10, -10, 99, 100, i64::MAX, i64::MIN, i64::MIN + 1, i64::MAX - 1];
        samples.extend((0..19).map(|p| 10i64.pow(p)));
        samples.extend((0..19).map(|p| -(10i64.pow(p)) + 1));
        for n in samples {
            let mut out = BytesMut::new();
            put_decimal(&mut out, n);
            assert_eq!(&out[..], n.to_string().as_bytes(), "{n}");
        }
        assert_eq!(enc(&Reply::Int(-42), false), ":-42\r\n");
        assert_eq!(enc(&Reply::Bulk(Bytes::from_static(b"abc")), false), "$3\r\nabc\r\n");
    }

    #[test]
    fn resp2_and_resp3() {
        let map = Reply::Map(vec![(Reply::text("owner"), Reply::text("a")), (Reply::text("token"), Reply::Int(7))]);
        assert_eq!(enc(&map, false), "*4\r\n$5\r\nowner\r\n$1\r\na\r\n$5\r\ntoken\r\n:7\r\n");
        assert_eq!(enc(&map, true), "%2\r\n$5\r\nowner\r\n$1\r\na\r\n$5\r\ntoken\r\n:7\r\n");
        assert_eq!(enc(&Reply::Nil, false), "$-1\r\n");
        assert_eq!(enc(&Reply::Nil, true), "_\r\n");
        assert_eq!(enc(&Reply::error("ERR a\r\nb"), false), "-ERR a  b\r\n");
        assert_eq!(enc(&Reply::Push(vec![Reply::text("message")]), true), ">1\r\n$7\r\nmessage\r\n");
        assert_eq!(enc(&Reply::Double(1.5), true), ",1.5\r\n");
        assert_eq!(enc(&Reply::Double(2.0), false), "$1\r\n2\r\n");
        let pairs = Reply::ScorePairs(vec![(Bytes::from("a"), 1.0)]);
        assert_eq!(enc(&pairs, false), "*2\r\n$1\r\na\r\n$1\r\n1\r\n");
        assert_eq!(enc(&pairs, true), "*1\r\n*2\r\n$1\r\na\r\n,1\r\n");
        let pairs = Reply::Pairs(vec![(Reply::text("f"), Reply::text("v")), (Reply::text("f"), Reply::text("v"))]);
        assert_eq!(enc(&pairs, false), "*4\r\n$1\r\nf\r\n$1\r\nv\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(enc(&pairs, true), "*2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
    }
}
