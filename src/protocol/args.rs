//! [`Args`]: a cursor over a command's arguments.

use bytes::Bytes;

/// Why an argument could not be read. Turned into Redis's error text by the
/// command layer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgError {
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
}

/// Reads a command's arguments left to right; the command name is skipped.
#[derive(Debug, Clone)]
pub struct Args<'a> {
    argv: &'a [Bytes],
    pos: usize,
}

impl<'a> Args<'a> {
    /// A cursor positioned after the command name (`argv[0]`).
    pub fn new(argv: &'a [Bytes]) -> Self {
        Args { argv, pos: 1 }
    }

    /// Every argument, the command's name first, wherever the cursor is.
    pub fn all(&self) -> &'a [Bytes] {
        self.argv
    }

    pub fn remaining(&self) -> usize {
        self.argv.len().saturating_sub(self.pos)
    }

    pub fn peek(&self) -> Option<&'a Bytes> {
        self.argv.get(self.pos)
    }

    pub fn next_bytes(&mut self) -> Result<&'a Bytes, ArgError> {
        let arg = self.argv.get(self.pos).ok_or(ArgError::Syntax)?;
        self.pos += 1;
        Ok(arg)
    }

    /// The next argument, upper-cased, for matching keywords.
    pub fn next_keyword(&mut self) -> Result<String, ArgError> {
        Ok(String::from_utf8_lossy(self.next_bytes()?).to_ascii_uppercase())
    }

    pub fn next_i64(&mut self) -> Result<i64, ArgError> {
        parse_i64(self.next_bytes()?).ok_or(ArgError::NotInteger)
    }

    /// All arguments not read yet.
    pub fn rest(&mut self) -> &'a [Bytes] {
        let rest = &self.argv[self.pos.min(self.argv.len())..];
        self.pos = self.argv.len();
        rest
    }

    /// Fails if arguments are left over.
    pub fn finish(&self) -> Result<(), ArgError> {
        if self.remaining() == 0 { Ok(()) } else { Err(ArgError::Syntax) }
    }
}

/// Parses a Redis integer argument: decimal, optional `-`, no spaces or `+`.
pub fn parse_i64(raw: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(raw).ok()?;
    if s.is_empty() || s.starts_with('+') || (s.len() > 1 && (s.starts_with('0') || s.starts_with("-0"))) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(parse_i64(b"42"), Some(42));
        assert_eq!(parse_i64(b"-7"), Some(-7));
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"007"), None);
        assert_eq!(parse_i64(b"+1"), None);
        assert_eq!(parse_i64(b" 1"), None);
        assert_eq!(parse_i64(b"1.5"), None);
        assert_eq!(parse_i64(b"99999999999999999999"), None);
    }
}
