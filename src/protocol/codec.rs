//! Request framing: RESP multibulk (`*N\r\n$len\r\n...`) and inline commands.
//!
//! Frames are first *scanned* against [`Limits`] without copying or
//! allocating, so a declared length can never make us reserve memory; only a
//! complete, in-limits frame is handed to `redis-protocol`'s decoder.

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::{decode::decode_bytes_mut, types::BytesFrame};
use tokio_util::codec::Decoder;

/// Size limits applied to every request before it is buffered in full.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest single argument (Redis: `proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// Most arguments in one command.
    pub max_args: usize,
    /// Largest whole request, all arguments together.
    pub max_request_len: usize,
    /// Longest inline command line or length header.
    pub max_inline_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 8 * 1024 * 1024,
            max_args: 64 * 1024,
            max_request_len: 32 * 1024 * 1024,
            max_inline_len: 64 * 1024,
        }
    }
}

/// A request the server cannot frame; the connection replies
/// `-ERR Protocol error: <text>` and closes, as Redis does.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("Protocol error: {0}")]
    Invalid(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn invalid(msg: impl Into<String>) -> ProtocolError {
    ProtocolError::Invalid(msg.into())
}

/// Decodes requests into argument vectors.
#[derive(Debug, Default)]
pub struct RequestCodec {
    pub limits: Limits,
    /// How far the scan of an incomplete multibulk frame got: (offset of the
    /// next argument, arguments scanned, arguments declared). A request that
    /// arrives a few bytes at a time is scanned once, not once per read.
    partial: Option<(usize, i64, i64)>,
}

impl RequestCodec {
    pub fn new(limits: Limits) -> Self {
        RequestCodec { limits, partial: None }
    }

    /// Finds the `\n` ending the line that starts at `from`; `Ok(None)` if
    /// it has not arrived yet. A line longer than `max_inline_len` (not
    /// counting its `\n`) is an error whether or not its end has arrived,
    /// so the verdict does not depend on how the bytes were split into reads.
    fn line_end(&self, buf: &[u8], from: usize, what: &str) -> Result<Option<usize>, ProtocolError> {
        let max = self.limits.max_inline_len;
        let window = &buf[from..buf.len().min(from.saturating_add(max).saturating_add(1))];
        match window.iter().position(|&b| b == b'\n') {
            Some(p) => Ok(Some(from + p)),
            None if window.len() > max => Err(invalid(format!("too big {what}"))),
            None => Ok(None),
        }
    }

    /// Scans one multibulk frame; returns its total length once complete.
    /// Resumes where the last call stopped if the frame was incomplete.
    fn scan_multibulk(&mut self, buf: &[u8]) -> Result<Option<(usize, i64)>, ProtocolError> {
        let (mut pos, done, count) = match self.partial.take() {
            Some(state) => state,
            None => {
                let Some(nl) = self.line_end(buf, 1, "mbulk count string")? else { return Ok(None) };
                let count = parse_len(&buf[1..nl]).ok_or_else(|| invalid("invalid multibulk length"))?;
                if count > self.limits.max_args as i64 {
                    return Err(invalid("invalid multibulk length"));
                }
                (nl + 1, 0, count)
            }
        };
        for scanned in done..count.max(0) {
            if pos >= buf.len() {
                self.partial = Some((pos, scanned, count));
                return Ok(None);
            }
            if buf[pos] != b'$' {
                return Err(invalid(format!("expected '$', got '{}'", printable(buf[pos]))));
            }
            let Some(nl) = self.line_end(buf, pos + 1, "bulk count string")? else {
                self.partial = Some((pos, scanned, count));
                return Ok(None);
            };
            let len = parse_len(&buf[pos + 1..nl]).ok_or_else(|| invalid("invalid bulk length"))?;
            if len < 0 || len as usize > self.limits.max_bulk_len {
                return Err(invalid("invalid bulk length"));
            }
            let next = nl + 1 + len as usize + 2;
            if next > self.limits.max_request_len {
                return Err(invalid("request too large"));
            }
            if next > buf.len() {
                // Resume at this argument's header: its body is still coming.
                self.partial = Some((pos, scanned, count));
                return Ok(None);
            }
            pos = next;
        }
        Ok(Some((pos, count)))
    }

    fn decode_inline(&self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let Some(nl) = self.line_end(buf, 0, "inline request")? else { return Ok(None) };
        let line = buf.split_to(nl + 1);
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        split_inline(text).map(Some)
    }
}

impl Decoder for RequestCodec {
    type Item = Vec<Bytes>;
    type Error = ProtocolError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        loop {
            if buf.is_empty() {
                return Ok(None);
            }
            if buf[0] != b'*' {
                match self.decode_inline(buf)? {
                    // Empty lines are skipped, as Redis does.
                    Some(args) if args.is_empty() => continue,
                    other => return Ok(other),
                }
            }
            let Some((len, count)) = self.scan_multibulk(buf)? else {
                return Ok(None);
            };
            if count <= 0 {
                // `*0` and `*-1` are empty requests: skip them.
                let _ = buf.split_to(len);
                continue;
            }
            let mut frame_buf = buf.split_to(len);
            let frame = match decode_bytes_mut(&mut frame_buf) {
                Ok(Some((frame, _, _))) => frame,
                Ok(None) => return Err(invalid("incomplete frame")),
                Err(e) => return Err(invalid(e.details().to_string())),
            };
            return match frame {
                BytesFrame::Array(items) => items
                    .into_iter()
                    .map(|item| match item {
                        BytesFrame::BulkString(b) => Ok(b),
                        _ => Err(invalid("expected bulk string")),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                _ => Err(invalid("expected array")),
            };
        }
    }
}

fn printable(b: u8) -> char {
    if b.is_ascii_graphic() { b as char } else { '?' }
}

/// Parses the decimal length in a `*N` or `$N` header, tolerating a `\r`.
fn parse_len(raw: &[u8]) -> Option<i64> {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    if raw.is_empty() || raw.len() > 19 {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// The bytes of a "double-quoted" span, with C escapes (`\n`, `\xHH`, ...),
/// as `sdssplitargs` reads them: from `line[*i]`, just after the opening
/// quote, to the closing quote, which is consumed. `None` if it never closes.
pub(crate) fn double_quoted(line: &[u8], i: &mut usize, out: &mut Vec<u8>) -> Option<()> {
    loop {
        let c = *line.get(*i)?;
        *i += 1;
        match c {
            b'"' => return Some(()),
            b'\\' if *i < line.len() => {
                let e = line[*i];
                *i += 1;
                if e == b'x' && *i + 1 < line.len() && line[*i].is_ascii_hexdigit() && line[*i + 1].is_ascii_hexdigit() {
                    let hex = std::str::from_utf8(&line[*i..*i + 2]).unwrap_or("0");
                    out.push(u8::from_str_radix(hex, 16).unwrap_or(0));
                    *i += 2;
                } else {
                    out.push(match e {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                }
            }
            other => out.push(other),
        }
    }
}

/// [`double_quoted`] for a 'single-quoted' span: only `\'` is an escape.
pub(crate) fn single_quoted(line: &[u8], i: &mut usize, out: &mut Vec<u8>) -> Option<()> {
    loop {
        let c = *line.get(*i)?;
        *i += 1;
        match c {
            b'\'' => return Some(()),
            b'\\' if line.get(*i) == Some(&b'\'') => {
                out.push(b'\'');
                *i += 1;
            }
            other => out.push(other),
        }
    }
}

/// Splits an inline command the way `sdssplitargs` does: whitespace separated,
/// with "double quotes" (C escapes) and 'single quotes'.
fn split_inline(line: &[u8]) -> Result<Vec<Bytes>, ProtocolError> {
    let unbalanced = || invalid("unbalanced quotes in request");
    let mut args = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            break;
        }
        let mut cur = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                double_quoted(line, &mut i, &mut cur).ok_or_else(unbalanced)?;
                if i < line.len() && !line[i].is_ascii_whitespace() {
                    return Err(unbalanced());
                }
            }
            b'\'' => {
                i += 1;
                single_quoted(line, &mut i, &mut cur).ok_or_else(unbalanced)?;
                if i < line.len() && !line[i].is_ascii_whitespace() {
                    return Err(unbalanced());
                }
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    cur.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(Bytes::from(cur));
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
        let mut codec = RequestCodec::default();
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(args) = codec.decode(&mut buf)? {
            out.push(args);
        }
        Ok(out)
    }

    #[test]
    fn multibulk_and_pipelines() {
        let got = decode_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n").unwrap();
        assert_eq!(got, vec![vec![Bytes::from("GET"), Bytes::from("k")], vec![Bytes::from("PING")]]);
    }

    #[test]
    fn partial_frame_waits_for_more() {
        let mut codec = RequestCodec::default();
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$1\r"[..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(b"\nk\r\n");
        assert_eq!(codec.decode(&mut buf).unwrap().unwrap().len(), 2);
    }

    #[test]
    fn inline_commands_with_quotes() {
        let got = decode_all(b"PING\r\nSET k \"a b\\n\" 'c d'\r\n\r\n").unwrap();
        assert_eq!(got[0], vec![Bytes::from("PING")]);
        assert_eq!(got[1], vec![Bytes::from("SET"), Bytes::from("k"), Bytes::from("a b\n"), Bytes::from("c d")]);
        assert!(decode_all(b"SET k \"unterminated\r\n").is_err());
    }

    #[test]
    fn limits_reject_before_buffering() {
        let err = decode_all(b"*1\r\n$999999999999\r\n").unwrap_err();
        assert_eq!(err.to_string(), "Protocol error: invalid bulk length");
        let err = decode_all(b"*99999999\r\n").unwrap_err();
        assert_eq!(err.to_string(), "Protocol error: invalid multibulk length");
        let err = decode_all(b"*1\r\nx\r\n").unwrap_err();
        assert_eq!(err.to_string(), "Protocol error: expected '$', got 'x'");
        let err = decode_all(b"*1\r\n$x\r\n").unwrap_err();
        assert_eq!(err.to_string(), "Protocol error: invalid bulk length");
        let long = vec![b'a'; 70 * 1024];
        assert!(decode_all(&long).is_err());
    }

    /// A line over `max_inline_len` fails the same way whether its `\n` came
    /// in the same read or a later one; a line at the limit is accepted.
    #[test]
    fn line_limit_does_not_depend_on_reads() {
        let limits = Limits { max_inline_len: 16, ..Limits::default() };
        let run = |reads: &[&[u8]]| {
            let mut codec = RequestCodec::new(limits);
            let mut buf = BytesMut::new();
            let mut out = Vec::new();
            for read in reads {
                buf.extend_from_slice(read);
                loop {
                    match codec.decode(&mut buf) {
                        Ok(Some(args)) => out.push(args),
                        Ok(None) => break,
                        Err(e) => return (out, Some(e.to_string())),
                    }
                }
            }
            (out, None)
        };
        let at_limit = b"PING\nECHO 0123456789a\n"; // the second line is 16 bytes
        let over = b"PING\nECHO 0123456789ab\n"; // 17 bytes
        for input in [&at_limit[..], &over[..]] {
            let whole = run(&[input]);
            for split in 0..input.len() {
                let (a, b) = input.split_at(split);
                assert_eq!(run(&[a, b]), whole, "split at {split} of {:?}", String::from_utf8_lossy(input));
            }
        }
        assert_eq!(run(&[at_limit]).0.len(), 2);
        let (framed, err) = run(&[over]);
        assert_eq!(framed, vec![vec![Bytes::from("PING")]]);
        assert_eq!(err.as_deref(), Some("Protocol error: too big inline request"));
        // The same holds for multibulk headers.
        // The bulk header's line after '$' is 16 bytes ("000000000000003\r"), then 17.
        let header = b"*1\r\n$000000000000003\r\nfoo\r\n";
        assert_eq!(run(&[header]).0.len(), 1);
        let header = b"*1\r\n$0000000000000003\r\nfoo\r\n";
        assert_eq!(run(&[header]).1.as_deref(), Some("Protocol error: too big bulk count string"));
    }
}
