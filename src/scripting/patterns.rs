//! Lua 5.1's pattern functions (`string.find`, `string.match`,
//! `string.gmatch`, `string.gsub`) reimplemented in Rust, with bounds.
//!
//! Lua's own versions are C code that a script can turn against the node:
//! their matcher recurses once per pattern item (so `string.rep("a?", 200000)`
//! overflows the C stack and kills the process) and backtracks exponentially
//! inside C, where the instruction hook never fires (so one script hangs
//! every replica forever). This module owns the replacement:
//!
//! * the matcher, over bytes, with Lua 5.1.5's semantics (`lstrlib.c`): C
//!   locale classes, patterns read as C strings (ending at the first NUL),
//!   Lua's error messages, raised at the same point Lua raises them;
//! * its bounds: at most [`MAX_DEPTH`] nested matcher calls ("pattern too
//!   complex", as Lua 5.2+ says), every elementary step paid from a
//!   [`Meter`], and `gsub`'s result capped;
//! * the mlua glue ([`install`]) that puts the four functions into a string
//!   table with Lua 5.1's argument handling, results and error texts.
//!
//! Every count here is a function of the script's inputs only, so a script
//! that runs out of budget stops at the same step on every node.

use std::cell::Cell;
use std::os::raw::c_int;
use std::rc::Rc;

use mlua::{ffi, Function, Lua, MultiValue, Table, Value};

/// Captures one match may hold (Lua 5.1's `LUA_MAXCAPTURES`).
pub const MAX_CAPTURES: usize = 32;
/// Nested matcher calls one match may make (Lua 5.2's `MAXCCALLS`). Nesting
/// grows with quantified items and captures of the pattern, never with the
/// length of the subject, so real patterns stay far below it.
pub const MAX_DEPTH: usize = 200;
/// Steps the glue lets the matcher take between two calls of `charge`.
pub const CHUNK: u64 = 10_000;

/// Characters that make `string.find` match a pattern instead of searching
/// for the text as it is.
const SPECIALS: &[u8] = b"^$*+?.([%-";

/// Why a match stopped without an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// An error Lua 5.1 raises itself; the text is Lua's, without position.
    #[error("{0}")]
    Lua(String),
    /// Deeper than [`MAX_DEPTH`] nested matcher calls.
    #[error("pattern too complex")]
    TooComplex,
    /// The [`Meter`] refused a step.
    #[error("pattern matching step budget exhausted")]
    Budget,
    /// `gsub`'s result would be longer than its cap.
    #[error("resulting string too large")]
    OutputTooLarge,
}

fn lua_error(text: &str) -> PatternError {
    PatternError::Lua(text.to_string())
}

/// Pays for matching work. Each elementary step (a byte compared against a
/// pattern item, a set element tried, a matcher call or backtrack, a byte of
/// output) costs one.
pub trait Meter {
    /// Pays `steps`, or refuses with [`PatternError::Budget`].
    fn spend(&mut self, steps: u64) -> Result<(), PatternError>;
}

/// A plain allowance: spending more than is left fails (and leaves zero).
impl Meter for u64 {
    #[inline]
    fn spend(&mut self, steps: u64) -> Result<(), PatternError> {
        if steps > *self {
            *self = 0;
            return Err(PatternError::Budget);
        }
        *self -= steps;
        Ok(())
    }
}

/// How far a capture got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CapLen {
    /// Opened, not closed yet.
    Open,
    /// `()`: records a position, not text.
    Position,
    /// Closed, with this many bytes.
    Closed(usize),
}

#[derive(Debug, Clone, Copy)]
struct Cap {
    start: usize,
    len: CapLen,
}

const NO_CAP: Cap = Cap { start: 0, len: CapLen::Open };

/// One successful match: where it is, and the captures as they stood.
#[derive(Debug, Clone, Copy)]
pub struct Match {
    /// Offset of the first matched byte.
    pub start: usize,
    /// Offset just past the last matched byte.
    pub end: usize,
    level: usize,
    caps: [Cap; MAX_CAPTURES],
}

/// One capture's value, as Lua pushes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture<'s> {
    Bytes(&'s [u8]),
    /// A position capture: the 1-based position.
    Position(usize),
}

impl Match {
    fn plain(start: usize, end: usize) -> Match {
        Match { start, end, level: 0, caps: [NO_CAP; MAX_CAPTURES] }
    }

    /// How many values the captures make: with `whole_if_none`, a pattern
    /// without captures yields the whole match (`match`, `gmatch`, a `gsub`
    /// function); without it, nothing (`find`).
    pub fn capture_count(&self, whole_if_none: bool) -> usize {
        if self.level == 0 && whole_if_none {
            1
        } else {
            self.level
        }
    }

    /// Capture `i` (0-based) of this match against `src`. Index 0 of a
    /// pattern without captures is the whole match. An unfinished capture is
    /// an error only now, when its value is asked for, as in Lua.
    pub fn capture<'s>(&self, src: &'s [u8], i: usize) -> Result<Capture<'s>, PatternError> {
        if i >= self.level {
            return if i == 0 {
                Ok(Capture::Bytes(&src[self.start..self.end]))
            } else {
                Err(lua_error("invalid capture index"))
            };
        }
        let cap = self.caps[i];
        match cap.len {
            CapLen::Open => Err(lua_error("unfinished capture")),
            CapLen::Position => Ok(Capture::Position(cap.start + 1)),
            CapLen::Closed(len) => Ok(Capture::Bytes(&src[cap.start..cap.start + len])),
        }
    }
}

/// Lua reads patterns (except for `find`'s plain search) as C strings: they
/// end at the first NUL.
fn c_string(pat: &[u8]) -> &[u8] {
    match pat.iter().position(|&b| b == 0) {
        Some(n) => &pat[..n],
        None => pat,
    }
}

/// A leading `^` anchors a `find`/`match`/`gsub` pattern (not a `gmatch` one,
/// where it is an ordinary character).
fn strip_anchor(pat: &[u8]) -> (bool, &[u8]) {
    match pat.first() {
        Some(b'^') => (true, &pat[1..]),
        _ => (false, pat),
    }
}

/// A class letter (`%a`, `%D`, ...) against `c`, with C-locale ASCII
/// classification; any other character after `%` stands for itself.
fn match_class(c: u8, class: u8) -> bool {
    let res = match class.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        // C's isspace includes the vertical tab, which Rust's
        // is_ascii_whitespace leaves out.
        b's' => matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r'),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        b'z' => c == 0,
        _ => return class == c,
    };
    if class.is_ascii_lowercase() {
        res
    } else {
        !res
    }
}

/// The backtracking matcher, shaped like Lua's so that it succeeds, fails
/// and raises errors exactly where Lua does; it only adds the depth limit
/// and the meter.
struct Matcher<'a, M: Meter> {
    src: &'a [u8],
    /// Already cut at its first NUL.
    pat: &'a [u8],
    level: usize,
    caps: [Cap; MAX_CAPTURES],
    depth_left: usize,
    meter: &'a mut M,
}

impl<'a, M: Meter> Matcher<'a, M> {
    fn new(src: &'a [u8], pat: &'a [u8], meter: &'a mut M) -> Self {
        Matcher { src, pat, level: 0, caps: [NO_CAP; MAX_CAPTURES], depth_left: MAX_DEPTH, meter }
    }

    /// The pattern byte at `i`; past the end reads 0, like the C string's
    /// terminator, which is what Lua's matcher tests for.
    #[inline]
    fn pat_at(&self, i: usize) -> u8 {
        self.pat.get(i).copied().unwrap_or(0)
    }

    /// The subject byte at `i`; the end reads 0, as Lua strings carry a
    /// terminating NUL that `%f` and `%b` look at.
    #[inline]
    fn src_at(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    /// One match attempt of the whole pattern at `s`.
    fn attempt(&mut self, s: usize) -> Result<Option<usize>, PatternError> {
        self.level = 0;
        self.depth_left = MAX_DEPTH;
        self.do_match(s, 0)
    }

    fn found(&self, start: usize, end: usize) -> Match {
        Match { start, end, level: self.level, caps: self.caps }
    }

    /// Matches the pattern from `p` against the subject from `s`; the end
    /// of the match, or `None`.
    fn do_match(&mut self, s: usize, p: usize) -> Result<Option<usize>, PatternError> {
        if self.depth_left == 0 {
            return Err(PatternError::TooComplex);
        }
        self.depth_left -= 1;
        let result = self.match_here(s, p);
        self.depth_left += 1;
        result
    }

    /// Items that need no backtracking loop here instead of recursing, so
    /// only quantifiers and captures add depth.
    fn match_here(&mut self, mut s: usize, mut p: usize) -> Result<Option<usize>, PatternError> {
        loop {
            self.meter.spend(1)?;
            match self.pat_at(p) {
                b'(' => {
                    return if self.pat_at(p + 1) == b')' {
                        self.start_capture(s, p + 2, CapLen::Position)
                    } else {
                        self.start_capture(s, p + 1, CapLen::Open)
                    };
                }
                b')' => return self.end_capture(s, p + 1),
                // The end of the pattern (the pattern holds no NUL).
                0 => return Ok(Some(s)),
                // `$` anchors only as the last pattern character.
                b'$' if p + 1 == self.pat.len() => {
                    return Ok((s == self.src.len()).then_some(s));
                }
                b'%' if self.pat_at(p + 1) == b'b' => match self.balance(s, p + 2)? {
                    Some(end) => {
                        s = end;
                        p += 4;
                    }
                    None => return Ok(None),
                },
                b'%' if self.pat_at(p + 1) == b'f' => {
                    p += 2;
                    if self.pat_at(p) != b'[' {
                        return Err(lua_error("missing '[' after '%f' in pattern"));
                    }
                    let ep = self.class_end(p)?;
                    let previous = if s == 0 { 0 } else { self.src[s - 1] };
                    let current = self.src_at(s);
                    if self.bracket_class(previous, p, ep - 1)? || !self.bracket_class(current, p, ep - 1)? {
                        return Ok(None);
                    }
                    p = ep;
                }
                b'%' if self.pat_at(p + 1).is_ascii_digit() => match self.back_reference(s, self.pat_at(p + 1))? {
                    Some(end) => {
                        s = end;
                        p += 2;
                    }
                    None => return Ok(None),
                },
                _ => {
                    let ep = self.class_end(p)?;
                    let m = s < self.src.len() && self.single_match(self.src[s], p, ep)?;
                    match self.pat_at(ep) {
                        b'?' => {
                            if m {
                                if let Some(end) = self.do_match(s + 1, ep + 1)? {
                                    return Ok(Some(end));
                                }
                            }
                            p = ep + 1;
                        }
                        b'*' => return self.max_expand(s, p, ep),
                        b'+' => return if m { self.max_expand(s + 1, p, ep) } else { Ok(None) },
                        b'-' => return self.min_expand(s, p, ep),
                        _ => {
                            if !m {
                                return Ok(None);
                            }
                            s += 1;
                            p = ep;
                        }
                    }
                }
            }
        }
    }

    /// Where the single-character item at `p` ends: past `%x`, past a
    /// `[set]`, or past one plain character. Malformed items are reported
    /// here, when the matcher first reaches them, as Lua does.
    fn class_end(&mut self, p: usize) -> Result<usize, PatternError> {
        let start = p;
        let mut p = p + 1;
        match self.pat_at(start) {
            b'%' => {
                if self.pat_at(p) == 0 {
                    return Err(lua_error("malformed pattern (ends with '%')"));
                }
                Ok(p + 1)
            }
            b'[' => {
                if self.pat_at(p) == b'^' {
                    p += 1;
                }
                // The first character of a set is never its end, so `[]]`
                // is the set of `]`.
                loop {
                    if self.pat_at(p) == 0 {
                        return Err(lua_error("malformed pattern (missing ']')"));
                    }
                    let c = self.pat_at(p);
                    p += 1;
                    if c == b'%' && self.pat_at(p) != 0 {
                        p += 1;
                    }
                    if self.pat_at(p) == b']' {
                        break;
                    }
                }
                // Scanning a long set is work, repeated at every attempt.
                self.meter.spend((p - start) as u64)?;
                Ok(p + 1)
            }
            _ => Ok(p),
        }
    }

    /// Does `c` match the item at `p..ep`?
    fn single_match(&mut self, c: u8, p: usize, ep: usize) -> Result<bool, PatternError> {
        self.meter.spend(1)?;
        Ok(match self.pat_at(p) {
            b'.' => true,
            b'%' => match_class(c, self.pat_at(p + 1)),
            b'[' => return self.bracket_class(c, p, ep - 1),
            other => other == c,
        })
    }

    /// Does `c` match the set from `[` at `p` to `]` at `ec`?
    fn bracket_class(&mut self, c: u8, mut p: usize, ec: usize) -> Result<bool, PatternError> {
        let mut matches = true;
        if self.pat_at(p + 1) == b'^' {
            matches = false;
            p += 1;
        }
        loop {
            p += 1;
            if p >= ec {
                return Ok(!matches);
            }
            self.meter.spend(1)?;
            if self.pat_at(p) == b'%' {
                p += 1;
                if match_class(c, self.pat_at(p)) {
                    return Ok(matches);
                }
            } else if self.pat_at(p + 1) == b'-' && p + 2 < ec {
                p += 2;
                if self.pat_at(p - 2) <= c && c <= self.pat_at(p) {
                    return Ok(matches);
                }
            } else if self.pat_at(p) == c {
                return Ok(matches);
            }
        }
    }

    /// `%bxy` from `s`, the two delimiters at `p`.
    fn balance(&mut self, s: usize, p: usize) -> Result<Option<usize>, PatternError> {
        let (open, close) = (self.pat_at(p), self.pat_at(p + 1));
        if open == 0 || close == 0 {
            return Err(lua_error("unbalanced pattern"));
        }
        if self.src_at(s) != open {
            return Ok(None);
        }
        let mut depth = 1usize;
        let mut i = s + 1;
        let mut end = None;
        while i < self.src.len() {
            let c = self.src[i];
            if c == close {
                depth -= 1;
                if depth == 0 {
                    end = Some(i + 1);
                    break;
                }
            } else if c == open {
                depth += 1;
            }
            i += 1;
        }
        // The scan is bounded by the subject; pay for it in one go.
        self.meter.spend((i - s) as u64)?;
        Ok(end)
    }

    /// `%1`-`%9` (and `%0`, always an error) at `s`.
    fn back_reference(&mut self, s: usize, digit: u8) -> Result<Option<usize>, PatternError> {
        let l = match digit.checked_sub(b'1') {
            Some(l) if (l as usize) < self.level && self.caps[l as usize].len != CapLen::Open => l as usize,
            _ => return Err(lua_error("invalid capture index")),
        };
        let cap = self.caps[l];
        // A position capture never matches as text.
        let CapLen::Closed(len) = cap.len else { return Ok(None) };
        self.meter.spend(len as u64)?;
        if self.src.len() - s >= len && self.src[cap.start..cap.start + len] == self.src[s..s + len] {
            Ok(Some(s + len))
        } else {
            Ok(None)
        }
    }

    /// Greedy `*`/`+`: take all it can, then give back one at a time.
    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> Result<Option<usize>, PatternError> {
        let mut i = 0;
        while s + i < self.src.len() && self.single_match(self.src[s + i], p, ep)? {
            i += 1;
        }
        loop {
            if let Some(end) = self.do_match(s + i, ep + 1)? {
                return Ok(Some(end));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    /// Lazy `-`: take one more only when the rest fails.
    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> Result<Option<usize>, PatternError> {
        loop {
            if let Some(end) = self.do_match(s, ep + 1)? {
                return Ok(Some(end));
            }
            if s < self.src.len() && self.single_match(self.src[s], p, ep)? {
                s += 1;
            } else {
                return Ok(None);
            }
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: CapLen) -> Result<Option<usize>, PatternError> {
        if self.level >= MAX_CAPTURES {
            return Err(lua_error("too many captures"));
        }
        self.caps[self.level] = Cap { start: s, len: what };
        self.level += 1;
        let result = self.do_match(s, p)?;
        if result.is_none() {
            self.level -= 1;
        }
        Ok(result)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Result<Option<usize>, PatternError> {
        let l = (0..self.level)
            .rev()
            .find(|&i| self.caps[i].len == CapLen::Open)
            .ok_or_else(|| lua_error("invalid pattern capture"))?;
        self.caps[l].len = CapLen::Closed(s - self.caps[l].start);
        let result = self.do_match(s, p)?;
        if result.is_none() {
            self.caps[l].len = CapLen::Open;
        }
        Ok(result)
    }
}

/// The first `needle` in `hay`, paying for bytes scanned and compared.
fn plain_find<M: Meter>(hay: &[u8], needle: &[u8], meter: &mut M) -> Result<Option<usize>, PatternError> {
    if needle.is_empty() {
        return Ok(Some(0));
    }
    if needle.len() > hay.len() {
        return Ok(None);
    }
    let last = hay.len() - needle.len();
    let mut i = 0;
    while i <= last {
        match hay[i..=last].iter().position(|&b| b == needle[0]) {
            None => {
                meter.spend((last + 1 - i) as u64)?;
                return Ok(None);
            }
            Some(skip) => {
                meter.spend(skip as u64 + needle.len() as u64)?;
                i += skip;
                if hay[i..i + needle.len()] == *needle {
                    return Ok(Some(i));
                }
                i += 1;
            }
        }
    }
    Ok(None)
}

/// Lua 5.1's `posrelat` then clamp: a 1-based, possibly negative `init` as
/// a 0-based offset in `0..=len` (beyond the end clamps to the end, so
/// `find("abc", "", 10)` finds the empty string at 4).
fn start_offset(init: i64, len: usize) -> usize {
    let len_i = len as i64;
    let pos = if init < 0 { init + len_i + 1 } else { init };
    let pos = pos.max(0) - 1;
    if pos < 0 {
        0
    } else if pos > len_i {
        len
    } else {
        pos as usize
    }
}

fn search<M: Meter>(
    src: &[u8],
    pat: &[u8],
    init: i64,
    find: bool,
    plain: bool,
    meter: &mut M,
) -> Result<Option<Match>, PatternError> {
    let init = start_offset(init, src.len());
    let cpat = c_string(pat);
    if find && (plain || !cpat.iter().any(|b| SPECIALS.contains(b))) {
        // The plain search uses the whole pattern, NULs included.
        let at = plain_find(&src[init..], pat, meter)?;
        return Ok(at.map(|at| Match::plain(init + at, init + at + pat.len())));
    }
    let (anchor, cpat) = strip_anchor(cpat);
    let mut m = Matcher::new(src, cpat, meter);
    let mut s = init;
    loop {
        if let Some(end) = m.attempt(s)? {
            return Ok(Some(m.found(s, end)));
        }
        if anchor || s >= src.len() {
            return Ok(None);
        }
        s += 1;
    }
}

/// `string.find(src, pat, init, plain)` after argument conversion.
pub fn find<M: Meter>(
    src: &[u8],
    pat: &[u8],
    init: i64,
    plain: bool,
    meter: &mut M,
) -> Result<Option<Match>, PatternError> {
    search(src, pat, init, true, plain, meter)
}

/// `string.match(src, pat, init)` after argument conversion.
pub fn match_pattern<M: Meter>(
    src: &[u8],
    pat: &[u8],
    init: i64,
    meter: &mut M,
) -> Result<Option<Match>, PatternError> {
    search(src, pat, init, false, false, meter)
}

/// One step of a `string.gmatch` iterator: the next match at or after
/// `*pos`, which moves past it (by one more after an empty match). `*pos`
/// stays put when nothing matches. A leading `^` is an ordinary character.
pub fn gmatch_next<M: Meter>(
    src: &[u8],
    pat: &[u8],
    pos: &mut usize,
    meter: &mut M,
) -> Result<Option<Match>, PatternError> {
    let mut m = Matcher::new(src, c_string(pat), meter);
    let mut s = *pos;
    while s <= src.len() {
        if let Some(end) = m.attempt(s)? {
            *pos = if end == s { end + 1 } else { end };
            return Ok(Some(m.found(s, end)));
        }
        s += 1;
    }
    Ok(None)
}

/// The growing result of `gsub`, refusing to pass its cap.
pub struct Output {
    buf: Vec<u8>,
    max: usize,
}

impl Output {
    fn new(max: usize) -> Output {
        Output { buf: Vec::new(), max }
    }

    /// Appends `bytes`, or fails with [`PatternError::OutputTooLarge`]
    /// (appending nothing).
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), PatternError> {
        if bytes.len() > self.max - self.buf.len() {
            return Err(PatternError::OutputTooLarge);
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    fn len(&self) -> usize {
        self.buf.len()
    }
}

/// What `gsub` puts in place of a match.
pub enum Replacement<'r, E> {
    /// A replacement string: `%0`-`%9` are captures, `%` before anything
    /// else is that character.
    Template(&'r [u8]),
    /// Appends the replacement for a match (the caller's table lookup or
    /// function call, which may keep the match by appending it).
    With(&'r mut dyn FnMut(&Match, &mut Output) -> Result<(), E>),
}

/// Appends a replacement string's expansion for `m`.
fn expand_template(template: &[u8], src: &[u8], m: &Match, out: &mut Output) -> Result<(), PatternError> {
    let mut i = 0;
    while i < template.len() {
        let literal = template[i..].iter().position(|&b| b == b'%').unwrap_or(template.len() - i);
        out.push(&template[i..i + literal])?;
        i += literal;
        if i == template.len() {
            break;
        }
        // A `%` at the very end reads the string's terminating NUL, which
        // Lua then appends.
        let c = template.get(i + 1).copied().unwrap_or(0);
        i += 2;
        if !c.is_ascii_digit() {
            out.push(&[c])?;
        } else if c == b'0' {
            out.push(&src[m.start..m.end])?;
        } else {
            match m.capture(src, (c - b'1') as usize)? {
                Capture::Bytes(b) => out.push(b)?,
                Capture::Position(p) => out.push(p.to_string().as_bytes())?,
            }
        }
    }
    Ok(())
}

/// `string.gsub(src, pat, repl, max_n)` after argument conversion: the
/// result and the number of matches replaced. `max_n` is Lua's optional
/// fourth argument (cut to a C `int`, as Lua does); the result may not pass
/// `max_output` bytes. Bytes appended are paid for, as is reading the
/// replacement string for every match.
pub fn gsub<M: Meter, E: From<PatternError>>(
    src: &[u8],
    pat: &[u8],
    mut repl: Replacement<'_, E>,
    max_n: Option<i64>,
    max_output: usize,
    meter: &mut M,
) -> Result<(Vec<u8>, usize), E> {
    let (anchor, pat) = strip_anchor(c_string(pat));
    // Lua 5.1's luaL_optint: the integer, truncated to a C int.
    let max_n = max_n.unwrap_or(src.len() as i64 + 1) as i32;
    let mut out = Output::new(max_output);
    let mut m = Matcher::new(src, pat, meter);
    let mut s = 0;
    let mut n = 0i32;
    while n < max_n {
        let end = m.attempt(s)?;
        if let Some(end) = end {
            n += 1;
            let found = m.found(s, end);
            let before = out.len();
            match &mut repl {
                Replacement::Template(template) => {
                    m.meter.spend(template.len() as u64)?;
                    expand_template(template, src, &found, &mut out)?;
                }
                Replacement::With(f) => f(&found, &mut out)?,
            }
            m.meter.spend((out.len() - before) as u64)?;
        }
        match end {
            Some(end) if end > s => s = end,
            _ if s < src.len() => {
                out.push(&src[s..s + 1])?;
                m.meter.spend(1)?;
                s += 1;
            }
            _ => break,
        }
        if anchor {
            break;
        }
    }
    out.push(&src[s..])?;
    m.meter.spend((src.len() - s) as u64)?;
    Ok((out.buf, n as usize))
}

// ---------------------------------------------------------------------------
// The mlua glue.
// ---------------------------------------------------------------------------

/// The steps charged to the script: `charge` is called once at least
/// [`CHUNK`] steps have piled up, and with the rest when the call ends.
pub(super) type Charge = dyn Fn(u64) -> mlua::Result<()>;

/// A [`Meter`] that pays through the script's `charge`. When `charge`
/// refuses, its error is kept to be returned unchanged.
struct Charged<'c> {
    charge: &'c Charge,
    pending: u64,
    refused: Option<mlua::Error>,
}

impl<'c> Charged<'c> {
    fn new(charge: &'c Charge) -> Self {
        Charged { charge, pending: 0, refused: None }
    }

    #[cold]
    fn flush(&mut self) -> Result<(), PatternError> {
        if self.refused.is_some() {
            return Err(PatternError::Budget);
        }
        let steps = std::mem::take(&mut self.pending);
        if steps == 0 {
            return Ok(());
        }
        (self.charge)(steps).map_err(|e| {
            self.refused = Some(e);
            PatternError::Budget
        })
    }

    /// Charges what is left and turns a refused charge into its own error.
    fn settle<T>(&mut self, result: Result<T, Fail>) -> Result<T, Fail> {
        let tail = self.flush();
        match (result, tail) {
            (Err(Fail::Pattern(PatternError::Budget)), _) | (_, Err(_)) => Err(Fail::Host(
                self.refused
                    .take()
                    .unwrap_or_else(|| mlua::Error::RuntimeError("pattern matching step budget exhausted".into())),
            )),
            (result, Ok(())) => result,
        }
    }
}

impl Meter for Charged<'_> {
    #[inline]
    fn spend(&mut self, steps: u64) -> Result<(), PatternError> {
        self.pending += steps;
        if self.pending >= CHUNK {
            self.flush()
        } else {
            Ok(())
        }
    }
}

/// How one of the Lua functions fails.
pub(super) enum Fail {
    /// A Lua error message: raised as a string, after the position of the
    /// calling Lua code, as `luaL_error` does.
    Message(String),
    /// A matcher error (its text becomes a [`Fail::Message`]).
    Pattern(PatternError),
    /// A value some Lua code raised (a `gsub` callback): raised again as it is.
    Raise(Value),
    /// An mlua error, or `charge`'s: returned to mlua unchanged.
    Host(mlua::Error),
}

impl From<PatternError> for Fail {
    fn from(e: PatternError) -> Self {
        Fail::Pattern(e)
    }
}

impl From<mlua::Error> for Fail {
    fn from(e: mlua::Error) -> Self {
        Fail::Host(e)
    }
}

/// Calls the function at upvalue 1 (the Rust body) with the arguments. The
/// body returns `true, results...`, or `false, error`, which is raised from
/// here: so a Lua error is a plain Lua value (a string, or whatever a
/// callback raised), not mlua's wrapped error, and the function seen from
/// Lua is a C function like Lua's own, keeping debug names and positions.
unsafe extern "C-unwind" fn trampoline(state: *mut ffi::lua_State) -> c_int {
    let nargs = ffi::lua_gettop(state);
    ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
    ffi::lua_insert(state, 1);
    ffi::lua_call(state, nargs, ffi::LUA_MULTRET);
    if ffi::lua_toboolean(state, 1) != 0 {
        return ffi::lua_gettop(state) - 1;
    }
    ffi::lua_settop(state, 2);
    ffi::lua_error(state)
}

/// `t[k]` for a `gsub` table, called protected so that an `__index` error
/// keeps its value.
unsafe extern "C-unwind" fn index_table(state: *mut ffi::lua_State) -> c_int {
    ffi::lua_gettable(state, 1);
    1
}

/// A Lua function running `body` through [`trampoline`].
pub(super) fn lua_function<F>(lua: &Lua, body: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, MultiValue) -> Result<MultiValue, Fail> + 'static,
{
    lua_function_through(lua, body, trampoline)
}

/// A Lua function running `body` through `trampoline`, a C function that
/// calls its upvalue 1 as [`trampoline`] does (body at level 0, trampoline at
/// level 1, the caller at level 2).
pub(super) fn lua_function_through<F>(lua: &Lua, body: F, trampoline: ffi::lua_CFunction) -> mlua::Result<Function>
where
    F: Fn(&Lua, MultiValue) -> Result<MultiValue, Fail> + 'static,
{
    let inner = lua.create_function(move |lua, args: MultiValue| {
        let raised = match body(lua, args) {
            Ok(mut values) => {
                values.push_front(Value::Boolean(true));
                return Ok(values);
            }
            Err(Fail::Host(e)) => return Err(e),
            Err(Fail::Raise(value)) => value,
            Err(Fail::Message(text)) => Value::String(lua.create_string(format!("{}{text}", caller_position(lua)))?),
            Err(Fail::Pattern(e)) => Value::String(lua.create_string(format!("{}{e}", caller_position(lua)))?),
        };
        Ok(MultiValue::from_vec(vec![Value::Boolean(false), raised]))
    })?;
    // SAFETY: only pushes a C closure over the function exec_raw left on
    // the stack; `trampoline` keeps to the Lua C API's stack rules.
    unsafe { lua.exec_raw(inner, |state| ffi::lua_pushcclosure(state, trampoline, 1)) }
}

/// `luaL_where(L, 1)` seen from the body: level 0 is the body, 1 the
/// trampoline (Lua's C function), 2 the code that called it.
pub(super) fn caller_position(lua: &Lua) -> String {
    lua.inspect_stack(2, |d| match d.current_line() {
        Some(line) if line > 0 => format!("{}:{}: ", d.source().short_src.unwrap_or_default(), line),
        _ => String::new(),
    })
    .unwrap_or_default()
}

/// `luaL_argerror`: names the function as the caller called it, and does
/// not count `self` in a method call.
fn arg_error(lua: &Lua, narg: usize, extra: &str) -> Fail {
    arg_error_at(lua, narg as i64, extra)
}

/// [`arg_error`] for any argument number: C libraries name argument 0 too.
pub(super) fn arg_error_at(lua: &Lua, mut narg: i64, extra: &str) -> Fail {
    let (name, method) = lua
        .inspect_stack(1, |d| {
            let names = d.names();
            (names.name.map(|n| n.into_owned()), names.name_what == Some("method"))
        })
        .unwrap_or((None, false));
    let name = name.unwrap_or_else(|| "?".to_string());
    if method {
        narg -= 1;
        if narg == 0 {
            return Fail::Message(format!("calling '{name}' on bad self ({extra})"));
        }
    }
    Fail::Message(format!("bad argument #{narg} to '{name}' ({extra})"))
}

/// `luaL_typename`.
pub(super) fn type_name(value: Option<&Value>) -> &'static str {
    match value {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Integer(_) | Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(_) => "userdata",
    }
}

/// A double as a C cast to a 64-bit integer on x86-64 (`cvttsd2si`), which
/// is what Lua 5.1's `lua_tointeger` does: out of range and NaN give the
/// minimum. Fixed here so every node converts alike.
pub(super) fn number_to_integer(n: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if n.is_nan() || !(-LIMIT..LIMIT).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

/// The arguments of one call, read as `luaL_check*`/`luaL_opt*` do.
pub(super) struct Args<'l> {
    lua: &'l Lua,
    values: Vec<Value>,
}

impl<'l> Args<'l> {
    pub(super) fn new(lua: &'l Lua, args: MultiValue) -> Self {
        Args { lua, values: args.into_vec() }
    }

    /// Argument `n`, 1-based; `None` when not passed at all.
    pub(super) fn get(&self, n: usize) -> Option<&Value> {
        self.values.get(n - 1)
    }

    pub(super) fn type_error(&self, n: usize, expected: &str) -> Fail {
        arg_error(self.lua, n, &format!("{expected} expected, got {}", type_name(self.get(n))))
    }

    /// `luaL_checklstring`: a string, or a number as Lua writes it.
    pub(super) fn check_string(&self, n: usize) -> Result<mlua::String, Fail> {
        match self.get(n) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v @ (Value::Integer(_) | Value::Number(_))) => {
                self.lua.coerce_string(v.clone())?.ok_or_else(|| self.type_error(n, "string"))
            }
            _ => Err(self.type_error(n, "string")),
        }
    }

    /// `luaL_optinteger`: `None` for an absent or nil argument.
    pub(super) fn opt_integer(&self, n: usize) -> Result<Option<i64>, Fail> {
        match self.get(n) {
            None | Some(Value::Nil) => Ok(None),
            Some(Value::Integer(i)) => Ok(Some(*i)),
            Some(Value::Number(f)) => Ok(Some(number_to_integer(*f))),
            Some(v @ Value::String(_)) => match self.lua.coerce_number(v.clone())? {
                Some(f) => Ok(Some(number_to_integer(f))),
                None => Err(self.type_error(n, "number")),
            },
            Some(_) => Err(self.type_error(n, "number")),
        }
    }

    /// These arguments and a nil after them.
    pub(super) fn and_nil(&self) -> Args<'l> {
        let mut values = self.values.clone();
        values.push(Value::Nil);
        Args { lua: self.lua, values }
    }

    /// How many arguments were passed (`lua_gettop`).
    pub(super) fn count(&self) -> usize {
        self.values.len()
    }

    /// `lua_tonumber`: a number, or a string Lua reads as one.
    pub(super) fn to_number(&self, n: usize) -> Result<Option<f64>, Fail> {
        Ok(match self.get(n) {
            Some(Value::Integer(i)) => Some(*i as f64),
            Some(Value::Number(f)) => Some(*f),
            Some(v @ Value::String(_)) => self.lua.coerce_number(v.clone())?,
            _ => None,
        })
    }

    /// `luaL_checknumber`.
    pub(super) fn check_number(&self, n: usize) -> Result<f64, Fail> {
        self.to_number(n)?.ok_or_else(|| self.type_error(n, "number"))
    }

    /// `luaL_checkinteger`: truncated as Lua 5.1 does on x86-64.
    pub(super) fn check_integer(&self, n: usize) -> Result<i64, Fail> {
        Ok(number_to_integer(self.check_number(n)?))
    }

    fn truthy(&self, n: usize) -> bool {
        !matches!(self.get(n), None | Some(Value::Nil) | Some(Value::Boolean(false)))
    }
}

fn capture_value(lua: &Lua, capture: Capture) -> mlua::Result<Value> {
    Ok(match capture {
        Capture::Bytes(b) => Value::String(lua.create_string(b)?),
        Capture::Position(p) => Value::Integer(p as i64),
    })
}

/// Appends the values of `m`'s captures, as Lua's `push_captures`.
fn push_captures(lua: &Lua, src: &[u8], m: &Match, whole_if_none: bool, out: &mut Vec<Value>) -> Result<(), Fail> {
    for i in 0..m.capture_count(whole_if_none) {
        out.push(capture_value(lua, m.capture(src, i)?)?);
    }
    Ok(())
}

/// Calls `args[0](args[1..])` protected, for one result. A Lua error comes
/// back as `Err(value)`, the value untouched (a table stays a table), to be
/// raised again by the trampoline; mlua's own call would turn it into a
/// string.
fn protected_call(lua: &Lua, args: MultiValue) -> mlua::Result<Result<Value, Value>> {
    let failed = Cell::new(false);
    // SAFETY: `lua_pcall` catches every Lua error, so nothing unwinds
    // through this closure; the stack holds exactly the function and its
    // arguments, and `lua_pcall` leaves one value in their place.
    let value: Value = unsafe {
        lua.exec_raw(args, |state| {
            let nargs = ffi::lua_gettop(state) - 1;
            if ffi::lua_pcall(state, nargs, 1, 0) != 0 {
                failed.set(true);
            }
        })
    }?;
    Ok(if failed.get() { Err(value) } else { Ok(value) })
}

fn lua_find(lua: &Lua, args: MultiValue, find: bool, charge: &Charge) -> Result<MultiValue, Fail> {
    let args = Args::new(lua, args);
    let subject = args.check_string(1)?;
    let pattern = args.check_string(2)?;
    let init = args.opt_integer(3)?.unwrap_or(1);
    let plain = find && args.truthy(4);
    let (src, pat) = (subject.as_bytes(), pattern.as_bytes());
    let mut meter = Charged::new(charge);
    let found = if find {
        self::find(&src, &pat, init, plain, &mut meter)
    } else {
        match_pattern(&src, &pat, init, &mut meter)
    };
    let Some(m) = meter.settle(found.map_err(Fail::from))? else {
        return Ok(MultiValue::from_vec(vec![Value::Nil]));
    };
    let mut out = Vec::new();
    if find {
        out.push(Value::Integer(m.start as i64 + 1));
        out.push(Value::Integer(m.end as i64));
    }
    push_captures(lua, &src, &m, !find, &mut out)?;
    Ok(MultiValue::from_vec(out))
}

fn lua_gmatch(lua: &Lua, args: MultiValue, charge: Rc<Charge>) -> Result<MultiValue, Fail> {
    let args = Args::new(lua, args);
    let subject = args.check_string(1)?;
    let pattern = c_string(&args.check_string(2)?.as_bytes()).to_vec();
    let pos = Cell::new(0usize);
    // The iterator's state lives in this closure; nothing in it is borrowed
    // across a call into Lua.
    let iterator = lua_function(lua, move |lua, _args| {
        let src = subject.as_bytes();
        let mut at = pos.get();
        let mut meter = Charged::new(&*charge);
        let found = gmatch_next(&src, &pattern, &mut at, &mut meter).map_err(Fail::from);
        let Some(m) = meter.settle(found)? else { return Ok(MultiValue::new()) };
        pos.set(at);
        let mut out = Vec::new();
        push_captures(lua, &src, &m, true, &mut out)?;
        Ok(MultiValue::from_vec(out))
    })?;
    Ok(MultiValue::from_vec(vec![Value::Function(iterator)]))
}

/// Appends what a `gsub` table or function gave for `m`: false or nil keep
/// the match, a string or number replaces it, anything else is an error.
fn append_replacement(lua: &Lua, value: Value, src: &[u8], m: &Match, out: &mut Output) -> Result<(), Fail> {
    match value {
        Value::Nil | Value::Boolean(false) => out.push(&src[m.start..m.end])?,
        Value::String(s) => out.push(&s.as_bytes())?,
        v @ (Value::Integer(_) | Value::Number(_)) => {
            if let Some(s) = lua.coerce_string(v)? {
                out.push(&s.as_bytes())?;
            }
        }
        other => {
            return Err(Fail::Message(format!("invalid replacement value (a {})", type_name(Some(&other)))));
        }
    }
    Ok(())
}

fn lua_gsub(
    lua: &Lua,
    args: MultiValue,
    charge: &Charge,
    max_output: usize,
    index: &Function,
) -> Result<MultiValue, Fail> {
    let args = Args::new(lua, args);
    let subject = args.check_string(1)?;
    let pattern = args.check_string(2)?;
    let repl = args.get(3).cloned();
    // Lua reads the count before it checks the replacement's type.
    let max_n = args.opt_integer(4)?;
    let (src, pat) = (subject.as_bytes(), pattern.as_bytes());
    let mut meter = Charged::new(charge);
    let result = match repl {
        Some(v @ (Value::String(_) | Value::Integer(_) | Value::Number(_))) => {
            let template = lua.coerce_string(v)?.map(|s| s.as_bytes().to_vec()).unwrap_or_default();
            gsub(&src, &pat, Replacement::Template(&template), max_n, max_output, &mut meter)
        }
        Some(Value::Table(table)) => {
            let mut lookup = |m: &Match, out: &mut Output| -> Result<(), Fail> {
                let key = capture_value(lua, m.capture(&src, 0)?)?;
                let args = MultiValue::from_vec(vec![Value::Function(index.clone()), Value::Table(table.clone()), key]);
                let value = protected_call(lua, args)?.map_err(Fail::Raise)?;
                append_replacement(lua, value, &src, m, out)
            };
            gsub(&src, &pat, Replacement::With(&mut lookup), max_n, max_output, &mut meter)
        }
        Some(Value::Function(function)) => {
            let mut call = |m: &Match, out: &mut Output| -> Result<(), Fail> {
                let mut args = vec![Value::Function(function.clone())];
                push_captures(lua, &src, m, true, &mut args)?;
                let value = protected_call(lua, MultiValue::from_vec(args))?.map_err(Fail::Raise)?;
                append_replacement(lua, value, &src, m, out)
            };
            gsub(&src, &pat, Replacement::With(&mut call), max_n, max_output, &mut meter)
        }
        _ => return Err(arg_error(lua, 3, "string/function/table expected")),
    };
    let (bytes, n) = meter.settle(result)?;
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(&bytes)?), Value::Integer(n as i64)]))
}

/// Sets `find`, `match`, `gmatch` and `gsub` in `string_table` to the
/// implementations here, with Lua 5.1's behaviour. Matching work is paid
/// through `charge` (steps, in chunks of about [`CHUNK`]); when it returns
/// an error, the call stops and returns that error unchanged. `charge` may
/// be called again from inside a `gsub` callback, so it must allow nested
/// calls. `gsub` results longer than `max_output` bytes raise the Lua error
/// "resulting string too large".
pub fn install(lua: &Lua, string_table: &Table, charge: Rc<Charge>, max_output: usize) -> mlua::Result<()> {
    let c = charge.clone();
    string_table.raw_set("find", lua_function(lua, move |lua, args| lua_find(lua, args, true, &*c))?)?;
    let c = charge.clone();
    string_table.raw_set("match", lua_function(lua, move |lua, args| lua_find(lua, args, false, &*c))?)?;
    let c = charge.clone();
    string_table.raw_set("gmatch", lua_function(lua, move |lua, args| lua_gmatch(lua, args, c.clone()))?)?;
    // SAFETY: `index_table` only indexes its first argument by its second.
    let index = unsafe { lua.create_c_function(index_table) }?;
    string_table
        .raw_set("gsub", lua_function(lua, move |lua, args| lua_gsub(lua, args, &*charge, max_output, &index))?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh Lua with the C string library as `string` and this module's
    /// functions in the global `R` (a copy of `string` with them replaced).
    fn lua_with(charge: Rc<Charge>, max_output: usize) -> Lua {
        let lua = Lua::new();
        let mine: Table = lua.load("local t = {} for k, v in pairs(string) do t[k] = v end return t").eval().unwrap();
        install(&lua, &mine, charge, max_output).unwrap();
        lua.globals().set("R", mine).unwrap();
        lua
    }

    fn free_lua() -> Lua {
        lua_with(Rc::new(|_| Ok(())), usize::MAX)
    }

    /// Serialises results (or the error) so C and Rust can be compared.
    const SER: &str = r#"
        local function ser(...)
            local t = {}
            for i = 1, select('#', ...) do
                local v = select(i, ...)
                if type(v) == 'string' then t[i] = string.format('%q', v)
                else t[i] = type(v) .. ':' .. tostring(v) end
            end
            return select('#', ...) .. '|' .. table.concat(t, ',')
        end
    "#;

    /// Runs every operation on every (subject, pattern) pair through the C
    /// library and ours; returns the number of comparisons and the
    /// differences.
    fn compare_pairs(lua: &Lua, pairs: &[(Vec<u8>, Vec<u8>)]) -> (usize, Vec<String>) {
        let driver = format!(
            "{SER}{}",
            r#"
            local C, R, pairs = ...
            local ops = {
                function(L, s, p) return L.find(s, p) end,
                function(L, s, p) return L.find(s, p, 2) end,
                function(L, s, p) return L.find(s, p, -2) end,
                function(L, s, p) return L.find(s, p, 1, true) end,
                function(L, s, p) return L.match(s, p) end,
                function(L, s, p) return L.match(s, p, 3) end,
                function(L, s, p)
                    local out = {}
                    for a, b, c in L.gmatch(s, p) do
                        out[#out + 1] = ser(a, b, c)
                        if #out > 100 then break end
                    end
                    return table.concat(out, ';')
                end,
                function(L, s, p) return L.gsub(s, p, '<%0>') end,
                function(L, s, p) return L.gsub(s, p, '%1-', 2) end,
                function(L, s, p) return L.gsub(s, p, function(...) return ser(...) end) end,
                function(L, s, p) return L.gsub(s, p, { a = 'A', [1] = 'one', ['('] = false, b = 7 }) end,
            }
            local count, diffs = 0, {}
            for _, pair in ipairs(pairs) do
                local s, p = pair[1], pair[2]
                for i, op in ipairs(ops) do
                    local want = ser(pcall(op, C, s, p))
                    local got = ser(pcall(op, R, s, p))
                    count = count + 1
                    if want ~= got then
                        diffs[#diffs + 1] = string.format('op %d s=%q p=%q\n  C:    %s\n  Rust: %s', i, s, p, want, got)
                    end
                end
            end
            return count, diffs
            "#
        );
        let list = lua.create_table().unwrap();
        for (i, (s, p)) in pairs.iter().enumerate() {
            let pair = lua.create_table().unwrap();
            pair.raw_set(1, lua.create_string(s).unwrap()).unwrap();
            pair.raw_set(2, lua.create_string(p).unwrap()).unwrap();
            list.raw_set(i + 1, pair).unwrap();
        }
        let string: Table = lua.globals().get("string").unwrap();
        let mine: Table = lua.globals().get("R").unwrap();
        let (count, diffs): (usize, Vec<String>) =
            lua.load(driver.as_str()).set_name("=driver").call((string, mine, list)).unwrap();
        (count, diffs)
    }

    fn assert_same(count_and_diffs: (usize, Vec<String>)) -> usize {
        let (count, diffs) = count_and_diffs;
        assert!(
            diffs.is_empty(),
            "{} of {count} differ from Lua 5.1:\n{}",
            diffs.len(),
            diffs.iter().take(25).cloned().collect::<Vec<_>>().join("\n")
        );
        count
    }

    const PATTERNS: &[&[u8]] = &[
        b"",
        b"a",
        b"ab",
        b".",
        b"..",
        b"a*",
        b"a+",
        b"a-",
        b"a?",
        b"^a",
        b"^a*",
        b"a$",
        b"^$",
        b"$",
        b"^",
        b"%a+",
        b"%A+",
        b"%d+",
        b"%D",
        b"%l%u",
        b"%p+",
        b"%s+",
        b"%S+",
        b"%w+",
        b"%W",
        b"%x+",
        b"%X",
        b"%c",
        b"%C+",
        b"%z",
        b"%Z+",
        b"%u+",
        b"%L",
        b"%P",
        b"[abc]",
        b"[^abc]+",
        b"[a-c]+",
        b"[%a_][%w_]*",
        b"[%]]",
        b"[]]",
        b"[^]]+",
        b"[a-]",
        b"[-a]",
        b"[%-]",
        b"[a%-z]+",
        b"[%a-z]",
        b"[a-%%]",
        b"[z-a]",
        b"[%d.]+",
        b"[\x80-\xff]+",
        b"()",
        b"()a()",
        b"(a)(b)",
        b"(a*(.)%w(%s*))",
        b"(.-)%s",
        b"((a)(b))",
        b"%bxy",
        b"%b()",
        b"%b((",
        b"%b))",
        b"%bab*",
        b"%f[%w]%w+",
        b"%f[%W]",
        b"%f[%a]",
        b"%f[^%z]",
        b"%f[%z]",
        b"%f[]]",
        b"(a)%1",
        b"(%w+)%s*=%s*(%w+)",
        b"(.)%1",
        b"^(%w+)",
        b"(.-)$",
        b"x*$",
        b"a.-b",
        b"a.*b",
        b"%.",
        b"%%",
        b"%",
        b"[a",
        b"[^",
        b"[",
        b"[]",
        b"[^]",
        b"[%",
        b"[a%",
        b"(",
        b")",
        b"(()",
        b"%1",
        b"(a)%2",
        b"%0",
        b"()%1",
        b"%f",
        b"%fx",
        b"%b",
        b"%bx",
        b"a**",
        b"*a",
        b"+",
        b"?",
        b"-",
        b"%g",
        b"a\0b",
        b"(a\0)",
        b"\0",
        b"[\0]",
        b"^^",
        b"$$",
        b"a$b",
        b"()()",
        b"(a)()",
        b"%[",
        b"(a?)b",
        b"a-b",
        b"(a-)b",
        b"[^%s]+",
        b"\xff",
        b"%W+",
        b".-",
        b"()$",
        b"(.)(.)(.)%3%2%1",
        b"^(a)(b)$",
        b"(%b())",
        b"%f[%s](%w+)",
        b"((()))",
        b"(x*)",
        b"[%w%p]+",
        b"[b-a]",
        b"[%s%d]",
        b"^%s*(.-)%s*$",
        b"%$",
        b"%^",
        b"[$^]",
        b"%-",
        b"a%-",
        b"[a-z]-",
        b"((a+)b)?",
        b"%)",
        b"%(",
        b"[(]",
        b"[)]",
        b"(()a)",
        b"(a)(b)%2%1",
    ];

    const SUBJECTS: &[&[u8]] = &[
        b"",
        b"a",
        b"aaa",
        b"abc",
        b"hello world",
        b"ab ba  ab",
        b"x = 1, y = 22",
        b"(foo(bar))baz)",
        b"xaybxy",
        b"THE (quick) fox",
        b"a\0b\0c",
        b"  tab\tnl\n vt\x0b ",
        b"123.456e7 0xFF",
        b"\xff\x80abc",
        b"a.b%c[d]e^f$",
        b"]]^]",
        b"aaab",
        b"abab",
        b"abba-baab",
        b"x",
    ];

    #[test]
    fn pattern_matrix_matches_lua51() {
        let lua = free_lua();
        let pairs: Vec<_> =
            PATTERNS.iter().flat_map(|p| SUBJECTS.iter().map(move |s| (s.to_vec(), p.to_vec()))).collect();
        let count = assert_same(compare_pairs(&lua, &pairs));
        assert!(count > 30_000, "{count}");
    }

    /// Random patterns from pattern pieces, against random subjects.
    #[test]
    fn random_patterns_match_lua51() {
        const PIECES: &[&[u8]] = &[
            b"a", b"b", b"x", b".", b"%a", b"%d", b"%s", b"%w", b"%p", b"%W", b"[ab]", b"[^a]", b"[a-c]", b"[%d%s]",
            b"(", b")", b"()", b"%1", b"%2", b"%b()", b"%bab", b"%f[%w]", b"%f[%W]", b"^", b"$", b"*", b"+", b"-",
            b"?", b"%", b"[", b"]", b"\0", b"%z", b"[]]", b"%(", b"%.",
        ];
        const BYTES: &[u8] = b"aab()1 x.\0%b";
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut pairs = Vec::new();
        for _ in 0..4000 {
            let mut p = Vec::new();
            for _ in 0..1 + next(7) {
                p.extend_from_slice(PIECES[next(PIECES.len())]);
            }
            let s: Vec<u8> = (0..next(14)).map(|_| BYTES[next(BYTES.len())]).collect();
            pairs.push((s, p));
        }
        let lua = free_lua();
        assert_same(compare_pairs(&lua, &pairs));
    }

    /// Runs each snippet (with `S` as the library) through both libraries
    /// and compares results and error messages, positions included.
    fn compare_snippets(snippets: &[&str]) -> usize {
        let lua = free_lua();
        let string: Table = lua.globals().get("string").unwrap();
        let mine: Table = lua.globals().get("R").unwrap();
        let ser: Function = lua.load(format!("{SER} return ser")).eval().unwrap();
        let mut diffs = Vec::new();
        for snippet in snippets {
            let run = |lib: &Table| -> String {
                let chunk: Function =
                    lua.load(format!("local S = ...\n{snippet}")).set_name("=snippet").into_function().unwrap();
                let pcall: Function = lua.globals().get("pcall").unwrap();
                let results: MultiValue = pcall.call((chunk, lib.clone())).unwrap();
                ser.call(results).unwrap()
            };
            let (want, got) = (run(&string), run(&mine));
            if want != got {
                diffs.push(format!("{snippet}\n  C:    {want}\n  Rust: {got}"));
            }
        }
        assert!(diffs.is_empty(), "{} differ from Lua 5.1:\n{}", diffs.len(), diffs.join("\n"));
        snippets.len()
    }

    #[test]
    fn arguments_and_errors_match_lua51() {
        compare_snippets(&[
            "return S.find()",
            "return S.find(nil, 'a')",
            "return S.find('a')",
            "return S.find('a', {})",
            "return S.find('a', print)",
            "return S.find(12345, 34)",
            "return S.find(1.5, '.')",
            "return S.match(1e100, '%d+')",
            "return S.match(-0.1, '.+')",
            "return S.gsub(255, 5, 10.5)",
            "return S.find('abc', 'b', 'x')",
            "return S.find('abc', 'b', true)",
            "return S.find('abc', 'b', {})",
            "return S.find('abc', 'b', '2')",
            "return S.find('abc', 'b', ' 0x2 ')",
            "return S.find('abc', 'b', nil, true)",
            "return S.match('abc')",
            "return S.match('abc', 'b', 'x')",
            "return S.gmatch('abc')",
            "return S.gmatch(nil, 'a')",
            "return S.gmatch(1)",
            "return S.gsub('abc', 'b')",
            "return S.gsub('abc', 'b', true)",
            "return S.gsub('abc', 'b', 'x', 'y')",
            "return S.gsub('abc', 'b', nil, 'y')",
            "return S.gsub('abc', 'b', nil, nil)",
            "return S.gsub()",
            "return S.gsub('abc', 'b', 'x', true)",
            "local o = {f = S.find}; return o:f('x')",
            "local o = {f = S.find}; return o.f('x')",
            "local o = {m = S.match}; return o:m()",
            "local f = S.gsub; return f('x', 'x')",
            "local t = {S.gsub}; return t[1]('x', 'x')",
            "return pcall(S.find, nil)",
            "return pcall(S.find, 'a', '%')",
            "local mt = getmetatable(''); local old = mt.__index; mt.__index = S\n\
             local r = {pcall(function() return ('abc'):find() end)}\n\
             local r2 = {pcall(function() return ('abc'):gsub('b') end)}\n\
             local r3 = {pcall(function() return ('abc'):gsub('(b', '%1') end)}\n\
             local r4 = {('a b c'):gsub('%w', '<%0>')}\n\
             mt.__index = old\n\
             return r[1], r[2], r2[1], r2[2], r3[1], r3[2], r4[1], r4[2]",
            "return S.find('a', '%')",
            "return S.find('a', '[a')",
            "return S.find('xyz', 'x[')",
            "return S.find('abc', 'x[')",
            "return S.find('a', '%f')",
            "return S.find('a', 'a%b')",
            "return S.find('a', '%ba')",
            "return S.find('a', '%0')",
            "return S.find('a', '(a)%2')",
            "return S.find('abc', '(b')",
            "return S.match('abc', 'b)')",
            "return S.match('abc', '(()')",
            "return S.find(string.rep('a', 40), string.rep('(a)', 32))",
            "return S.find(string.rep('a', 40), string.rep('(a)', 33))",
            "return S.match(string.rep('a', 40), string.rep('(a)', 32))",
            "local function g() return S.find('a', '%') end return g()",
            "local function g() return S.gsub('a', 'a', {}, 'n') end return g()",
            "for w in S.gmatch('abc', '[a') do end",
            "for w in S.gmatch('abc', '(b') do end",
            "local it = S.gmatch('a1b2', '%a(%d)'); return it(), it(), it(), it()",
            "local it = S.gmatch('a1b2', '()%a'); return it(), it(), it()",
            "local t = {} for m in S.gmatch('^a^a', '^a') do t[#t + 1] = m end return #t, t[1]",
            "local t = {} for a, b in S.gmatch('k=v, x=yy', '(%w+)=(%w+)') do t[#t + 1] = a .. b end return table.concat(t, ',')",
            "local t = {} for m in S.gmatch('abc', '') do t[#t + 1] = m end return #t",
            "local t = {} for m in S.gmatch('a\\0b', '%z') do t[#t + 1] = m end return #t",
            "return S.gsub('abc', '%w', '%2')",
            "return S.gsub('abc', '(%w)', '%2')",
            "return S.gsub('abc', '(b', '%1')",
            "return S.gsub('abc', '(b', '%0')",
            "return S.gsub('abc', '(b', 'x')",
            "return S.gsub('abc', '(b', function(...) return select('#', ...) end)",
            "return S.gsub('abc', '(b', {})",
            "return S.gsub('aaa', '^a', 'b')",
            "return S.gsub('abc', '', '-')",
            "return S.gsub('abc', '%w*', 'x')",
            "return S.gsub('hello world', '%w+', '%0 %0', 1)",
            "return S.gsub('abc', '%w', '%')",
            "return S.gsub('abc', '%w', 'x%')",
            "return S.gsub('abc', '%w', '%a%%%.')",
            "return S.gsub('abc', '()', '%1')",
            "return S.gsub('abc', '(b)()', '%2%1')",
            "return S.gsub('a.b', '.', {['.'] = '!'})",
            "return S.gsub('abc', '%w', setmetatable({}, {__index = function(t, k) return k:upper() .. '.' end}))",
            "return S.gsub('abc', '()', setmetatable({}, {__index = function(t, k) return k * 10 end}))",
            "return S.gsub('abc', '%w', setmetatable({}, {__index = function(t, k) error('idx ' .. k) end}))",
            "return S.gsub('abc', '%w', function(c) return c:byte() end)",
            "return S.gsub('abc', '%w', function(c) return c:byte() + 0.5 end)",
            "return S.gsub('abc', '%w', function(c) if c == 'b' then return false end return nil end)",
            "return S.gsub('abc', '%w', function(c) return {} end)",
            "return S.gsub('abc', '%w', function(c) return true end)",
            "return S.gsub('abc', '%w', function(c) return print end)",
            "return S.gsub('abc', '%w', function(c) error('boom') end)",
            "return S.gsub('abc', '%w', function(c) error('x', 2) end)",
            "return S.gsub('abc', '%w', function(c) error() end)",
            "local ok, e = pcall(S.gsub, 'abc', 'b', function() error({code = 7}) end) return ok, type(e), e.code",
            "return S.gsub('abc', '%w', {a = {}})",
            "return S.gsub('abc', '%w', {a = true})",
            "return S.gsub('abc def', '%w+', function(w) return (S.gsub(w, '.', function(c) return c:upper() .. '.' end)) end)",
            "return S.gsub('abc', '%w', function(c) return S.find('xbx', c) end)",
            "return S.gsub('abc', '%w', 'x', 0)",
            "return S.gsub('abc', '%w', 'x', -1)",
            "return S.gsub('abc', '%w', 'x', 2.7)",
            "return S.gsub('abc', '%w', 'x', '2')",
            "return S.gsub('abc', '%w', 'x', 2^32)",
            "return S.gsub('abc', '%w', 'x', 2^32 + 2)",
            "return S.gsub('abc', '%w', 'x', 1e300)",
            "return S.gsub('abc', '%w', 'x', -1e300)",
            "return S.gsub('abc', '%w', 'x', 0/0)",
            "return S.gsub('abc', '%w', 1.25)",
            "return S.gsub('abc', '%w', -7)",
            "return S.gsub('abc', 'b', '%1')",
            "return S.gsub('a\\0b', '%z', '%%z')",
            "return S.gsub('a\\0b', 'a\\0', 'X')",
            "return S.find('a+b', '+', 1, true)",
            "return S.find('a+b', 'a+b')",
            "return S.find('a+b', 'a+b', 1, 1)",
            "return S.find('a+b', '+', 3, true)",
            "return S.find('xa\\0b', 'a\\0b')",
            "return S.find('xa\\0b', 'a\\0.')",
            "return S.match('xa\\0c', 'a\\0b')",
            "return S.find('abc', 'b()')",
            "return S.find('abc', '')",
            "return S.find('abc', '', 10)",
            "return S.find('abc', '', 4)",
            "return S.find('abc', '', 5)",
            "return S.find('', '')",
            "return S.match('', '')",
            "return S.match('', '()')",
            "return S.find('abc', '$', 10)",
            "return S.find('abc', '^', 10)",
            "return S.find('abc', 'c', -1)",
            "return S.match('abc', '^b', 2)",
            "return S.match('abc', '^b', -2)",
            "return S.match(' key = value ', '^%s*(%S+)%s*=%s*(%S+)%s*$')",
            "return S.match('[[x]]', '%[(%b[])%]')",
            "return S.match('THE (quick) fox', '%f[%a]%a+%f[%A]', 5)",
            "return S.match(string.rep('a', 16), string.rep('a?', 16) .. string.rep('a', 16))",
        ]);
    }

    #[test]
    fn init_values_match_lua51() {
        let inits = [
            "0", "1", "-1", "-2", "-3", "-4", "-100", "2", "3", "4", "5", "6", "100", "1e300", "-1e300", "0/0", "2.7",
            "-2.7", "'2'", "'-1'", "'0x2'", "' 3 '", "2^53", "-2^63", "2^63", "2^64", "nil", "'x'", "true", "{}",
        ];
        let mut snippets = Vec::new();
        for init in inits {
            for (s, p) in [("abc", "b"), ("abc", ""), ("abc", "c$"), ("abcabc", "(b)"), ("abc", "^a"), ("", "")] {
                snippets.push(format!("return S.find('{s}', '{p}', {init})"));
                snippets.push(format!("return S.find('{s}', '{p}', {init}, true)"));
                snippets.push(format!("return S.match('{s}', '{p}', {init})"));
            }
        }
        let snippets: Vec<&str> = snippets.iter().map(String::as_str).collect();
        compare_snippets(&snippets);
    }

    #[test]
    fn deep_pattern_is_too_complex_not_a_crash() {
        let deep = b"a?".repeat(200_000);
        let subject = [b'a'; 300];
        let mut budget = u64::MAX;
        assert_eq!(find(&subject, &deep, 1, false, &mut budget).unwrap_err(), PatternError::TooComplex);
        // With a short subject the same pattern only needs shallow calls,
        // as in Lua 5.1.
        let mut budget = u64::MAX;
        assert_eq!(find(b"aaa", &deep, 1, false, &mut budget).unwrap().map(|m| (m.start, m.end)), Some((0, 3)));

        let lua = free_lua();
        let (ok, err, kind): (bool, String, String) = lua
            .load(
                "local ok, e = pcall(function() return R.find(string.rep('a', 300), string.rep('a?', 200000)) end)
                 return ok, e, type(e)",
            )
            .set_name("=deep")
            .eval()
            .unwrap();
        assert!(!ok);
        assert_eq!(err, "deep:1: pattern too complex");
        assert_eq!(kind, "string");
        for call in [
            "R.match(string.rep('a', 300), string.rep('a?', 200000))",
            "R.gsub(string.rep('a', 300), string.rep('a?', 200000), '')",
            "R.gmatch(string.rep('a', 300), string.rep('a?', 200000))()",
            "R.find(string.rep('a', 300), string.rep('(a*)', 31) .. string.rep('a-', 200))",
        ] {
            let err: String =
                lua.load(format!("return select(2, pcall(function() return {call} end))")).eval().unwrap();
            assert!(err.ends_with("pattern too complex"), "{call}: {err}");
        }
    }

    #[test]
    fn exponential_pattern_stops_at_the_budget() {
        let subject = [b'a'; 40];
        let pattern = [b"a*".repeat(40), b"b".to_vec()].concat();
        let mut budget = 1_000_000u64;
        assert_eq!(find(&subject, &pattern, 1, false, &mut budget).unwrap_err(), PatternError::Budget);
        assert_eq!(budget, 0);

        // Through `charge`: its error comes back unchanged, deterministically.
        for _ in 0..2 {
            let charged = Rc::new(Cell::new(0u64));
            let calls = Rc::new(Cell::new(0u64));
            let (c, n) = (charged.clone(), calls.clone());
            let lua = lua_with(
                Rc::new(move |steps| {
                    assert!(steps <= CHUNK + 64, "{steps}");
                    c.set(c.get() + steps);
                    n.set(n.get() + 1);
                    if c.get() > 2_000_000 {
                        return Err(mlua::Error::RuntimeError("script budget exhausted".into()));
                    }
                    Ok(())
                }),
                usize::MAX,
            );
            let started = std::time::Instant::now();
            let (ok, err) = lua
                .load("return pcall(R.find, string.rep('a', 40), string.rep('a*', 40) .. 'b')")
                .eval::<(bool, Value)>()
                .unwrap();
            assert!(!ok);
            match &err {
                Value::Error(e) => assert!(e.to_string().contains("script budget exhausted"), "{e}"),
                other => panic!("{other:?}"),
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
            assert!(charged.get() > 2_000_000 && charged.get() <= 2_000_000 + CHUNK + 64);
            assert_eq!(calls.get(), charged.get().div_ceil(CHUNK));
            // Outside pcall the error reaches the host as it was.
            let host =
                lua.load("return R.gsub(string.rep('a', 40), string.rep('a*', 40) .. 'b', '')").exec().unwrap_err();
            assert!(host.to_string().contains("script budget exhausted"), "{host}");
        }
    }

    #[test]
    fn charge_sees_every_step() {
        let charged = Rc::new(Cell::new(0u64));
        let c = charged.clone();
        let lua = lua_with(
            Rc::new(move |steps| {
                c.set(c.get() + steps);
                Ok(())
            }),
            usize::MAX,
        );
        let src = "local s = string.rep('ab', 50000) return R.gsub(s, '%w', '%0%0')";
        let (out, n): (mlua::String, i64) = lua.load(src).eval().unwrap();
        assert_eq!((out.as_bytes().len(), n), (200_000, 100_000));
        let after_gsub = charged.get();
        // Every attempt, comparison and output byte is charged.
        assert!(after_gsub >= 400_000, "{after_gsub}");
        // Plain search pays for what it scans.
        let _: Value = lua.load("return R.find(string.rep('a', 100000), 'b', 1, true)").eval().unwrap();
        assert!(charged.get() - after_gsub >= 100_000);
        // The same work costs the same on a fresh state.
        let again = Rc::new(Cell::new(0u64));
        let c = again.clone();
        let lua = lua_with(
            Rc::new(move |steps| {
                c.set(c.get() + steps);
                Ok(())
            }),
            usize::MAX,
        );
        let _: Value = lua.load(src).eval().unwrap();
        assert_eq!(again.get(), after_gsub);
    }

    #[test]
    fn gsub_output_is_capped() {
        let lua = lua_with(Rc::new(|_| Ok(())), 1000);
        let (out, n): (mlua::String, i64) =
            lua.load("return R.gsub(string.rep('a', 100), '.', string.rep('x', 10))").eval().unwrap();
        assert_eq!((out.as_bytes().len(), n), (1000, 100));
        let err: String = lua
            .load(
                "return select(2, pcall(function() return R.gsub(string.rep('a', 100), '.', string.rep('x', 11)) end))",
            )
            .set_name("=cap")
            .eval()
            .unwrap();
        assert_eq!(err, "cap:1: resulting string too large");
        let err: String = lua.load("return select(2, pcall(R.gsub, string.rep('a', 2000), 'b', ''))").eval().unwrap();
        assert_eq!(err, "resulting string too large");
        let err: String = lua
            .load("return select(2, pcall(R.gsub, 'abc', '%w', function() return string.rep('y', 600) end))")
            .eval()
            .unwrap();
        assert_eq!(err, "resulting string too large");

        let mut budget = u64::MAX;
        let result = gsub::<_, PatternError>(b"aaaa", b"a", Replacement::Template(b"xyz"), None, 11, &mut budget);
        assert_eq!(result.unwrap_err(), PatternError::OutputTooLarge);
        let mut budget = u64::MAX;
        let result = gsub::<_, PatternError>(b"aaaa", b"a", Replacement::Template(b"xyz"), None, 12, &mut budget);
        assert_eq!(result.unwrap(), (b"xyzxyzxyzxyz".to_vec(), 4));
    }

    #[test]
    fn nested_gsub_callbacks() {
        let lua = free_lua();
        // A callback that itself calls gsub, many levels deep.
        let out: String = lua
            .load(
                "local function nest(s, depth)
                     if depth == 0 then return s end
                     return (R.gsub(s, '%w', function(c) return nest(c, depth - 1) end))
                 end
                 return nest('ab', 40)",
            )
            .eval()
            .unwrap();
        assert_eq!(out, "ab");
        // A gmatch iterator survives gsub calls in its loop body.
        let out: String = lua
            .load(
                "local t = {}
                 for w in R.gmatch('one two three', '%a+') do
                     t[#t + 1] = (R.gsub(w, '%a', function(c) return (R.gsub(c, '.', '%0%0')) end))
                 end
                 return table.concat(t, ' ')",
            )
            .eval()
            .unwrap();
        assert_eq!(out, "oonnee ttwwoo tthhrreeee");
        // Nesting without end stops at Lua's C-call limit with a Lua error,
        // not a crash.
        for lib in ["string", "R"] {
            let err: String = lua
                .load(
                    "local S = ...
                     local depth = 0
                     local function nest(s) depth = depth + 1 return (S.gsub(s, '%w', nest)) end
                     local ok, e = pcall(nest, 'a')
                     return e .. ' at ' .. depth",
                )
                .set_name("=nest")
                .call(lua.globals().get::<Table>(lib).unwrap())
                .unwrap();
            assert!(err.starts_with("C stack overflow at "), "{lib}: {err}");
        }
    }

    #[test]
    fn pure_api() {
        let mut budget = u64::MAX;
        let src = b"key = value";
        let m = match_pattern(src, b"(%w+)%s*=%s*()(%w+)", 1, &mut budget).unwrap().unwrap();
        assert_eq!((m.start, m.end, m.capture_count(true)), (0, 11, 3));
        assert_eq!(m.capture(src, 0).unwrap(), Capture::Bytes(b"key"));
        assert_eq!(m.capture(src, 1).unwrap(), Capture::Position(7));
        assert_eq!(m.capture(src, 2).unwrap(), Capture::Bytes(b"value"));
        assert_eq!(m.capture(src, 3).unwrap_err(), PatternError::Lua("invalid capture index".into()));
        assert_eq!(
            find(b"x", b"[a", 1, false, &mut budget).unwrap_err(),
            PatternError::Lua("malformed pattern (missing ']')".into())
        );
        let mut pos = 0;
        let mut words = Vec::new();
        while let Some(m) = gmatch_next(b"a bb ccc", b"%a+", &mut pos, &mut budget).unwrap() {
            words.push(&b"a bb ccc"[m.start..m.end]);
        }
        assert_eq!(words, [&b"a"[..], b"bb", b"ccc"]);
        let mut upper = |m: &Match, out: &mut Output| -> Result<(), PatternError> {
            out.push(&b"a bb"[m.start..m.end].to_ascii_uppercase())
        };
        let (out, n) = gsub(b"a bb", b"%a+", Replacement::With(&mut upper), None, 100, &mut budget).unwrap();
        assert_eq!((out, n), (b"A BB".to_vec(), 2));
        // A budget of exactly what a match needs is enough; one less is not.
        let mut used = 1_000u64;
        find(b"hello world", b"o w", 1, false, &mut used).unwrap();
        let need = 1_000 - used;
        let mut exact = need;
        assert!(find(b"hello world", b"o w", 1, false, &mut exact).unwrap().is_some());
        let mut short = need - 1;
        assert_eq!(find(b"hello world", b"o w", 1, false, &mut short).unwrap_err(), PatternError::Budget);
    }
}
