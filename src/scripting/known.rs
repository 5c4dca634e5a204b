//! The lock scripts clients send word for word, run without Lua.
//!
//! Nearly every Redis lock library releases and extends its lock with a
//! script of a handful of tokens: "GET the key; if it holds my token, DEL
//! (or PEXPIRE) it". Running one in the VM costs far more than the two
//! commands it makes (a compile, the run, and the full collection that puts
//! the VM back as it was built; see [`super::Vm`]). A script whose tokens are
//! one of the [`TEMPLATES`] below runs here instead, and must be
//! indistinguishable from its run in the VM: the same commands, through the
//! same `call`, in the same order with the same arguments (as the script spells
//! them), and the same reply, error texts and lines included. The unit tests
//! run every template both ways against the same store and compare.
//!
//! The first command of every template is a `GET`, which changes nothing. Any
//! case whose outcome is not plain here (the `GET` fails, or returns a value
//! big enough to weigh in the VM's memory limit and budget, or the script's
//! arguments are big or missing) gives up after that `GET` and the VM runs the
//! script from the start, so the answer is the VM's.
//!
//! Matching is by tokens, so whitespace, line breaks, comments, quotes and the
//! case of command names do not matter; anything outside the small lexer
//! below (escapes, long strings or comments, decimal numbers, `;`) is not
//! matched and runs in the VM.

use bytes::Bytes;

use super::CallFn;
use crate::protocol::Reply;

/// Arguments (keys and values together) past which a script runs in the VM:
/// far below what could weigh in its memory limit or budget.
const MAX_ARGUMENT_BYTES: usize = 1 << 20;
/// A `GET` value past which the script runs in the VM, for the same reason.
const MAX_VALUE_BYTES: usize = 1 << 20;

/// What a matched script does after its `GET` of `KEYS[1]` (`value`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Recipe {
    /// `if value == ARGV[1] then return <write> else return 0 end`; redsync's
    /// delete script answers `-1` instead when the key is missing.
    ReturnWrite { when_missing: i64 },
    /// redis-py: `if not value or value ~= ARGV[1] then return 0 end; <write>; return 1`.
    WriteThenOne,
}

/// The second command: `DEL KEYS[1]` or `PEXPIRE KEYS[1] ARGV[2]`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Write {
    Del,
    Pexpire,
}

/// One token of a template.
#[derive(Debug, Clone, Copy)]
enum T {
    /// A name or keyword, exactly.
    Name(&'static str),
    /// An operator or punctuation, exactly.
    Sym(&'static str),
    /// A whole number, exactly.
    Num(&'static str),
    /// A string literal naming this command, in any case; captured (see
    /// [`Matched`]).
    Command(&'static str),
    /// A local's name, bound at its first use, the same at every later one.
    Local,
}

struct Template {
    tokens: &'static [T],
    recipe: Recipe,
    write: Write,
}

use T::{Command, Local, Name, Num, Sym};

/// `redis.call(<cmd>, KEYS[1]` — the opening of every call in the templates.
macro_rules! call_key1 {
    ($cmd:literal) => {
        [Name("redis"), Sym("."), Name("call"), Sym("("), Command($cmd), Sym(","), Name("KEYS"), Sym("["), Num("1"), Sym("]")]
    };
}

const fn concat<const N: usize>(parts: &[&[T]]) -> [T; N] {
    let mut out = [Sym(""); N];
    let mut n = 0;
    let mut p = 0;
    while p < parts.len() {
        let mut i = 0;
        while i < parts[p].len() {
            out[n] = parts[p][i];
            n += 1;
            i += 1;
        }
        p += 1;
    }
    assert!(n == N, "template length");
    out
}

const ARGV1: [T; 4] = [Name("ARGV"), Sym("["), Num("1"), Sym("]")];

/// The pieces the templates share.
/// `if redis.call("get", KEYS[1]) == ARGV[1] then return`
const IF_GET_EQUALS_RETURN: [T; 19] = concat(&[
    &[Name("if")],
    &call_key1!("get"),
    &[Sym(")"), Sym("==")],
    &ARGV1,
    &[Name("then"), Name("return")],
]);
/// `local <name> = redis.call("get", KEYS[1])`
const LOCAL_GET: [T; 14] = concat(&[&[Name("local"), Local, Sym("=")], &call_key1!("get"), &[Sym(")")]]);
/// redis-py's guard: `if not <name> or <name> ~= ARGV[1] then return 0 end`
const UNLESS_LOCAL_EQUALS_RETURN_0: [T; 14] = concat(&[
    &[Name("if"), Name("not"), Local, Name("or"), Local, Sym("~=")],
    &ARGV1,
    &[Name("then"), Name("return"), Num("0"), Name("end")],
]);
/// `redis.call("del", KEYS[1])`
const DEL_CALL: [T; 11] = concat(&[&call_key1!("del"), &[Sym(")")]]);
/// `redis.call("pexpire", KEYS[1], ARGV[2])`
const PEXPIRE_CALL: [T; 16] =
    concat(&[&call_key1!("pexpire"), &[Sym(","), Name("ARGV"), Sym("["), Num("2"), Sym("]"), Sym(")")]]);
const ELSE_RETURN_0_END: [T; 4] = [Name("else"), Name("return"), Num("0"), Name("end")];

/// The compare-and-delete of Redis's documentation (`SET` page), Jedis and
/// Lettuce recipes, node-redlock 4 and many more:
/// `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`.
const DEL_IF_EQUAL: [T; 34] = concat(&[&IF_GET_EQUALS_RETURN, &DEL_CALL, &ELSE_RETURN_0_END]);

/// The same, extending: redsync's touch script.
const PEXPIRE_IF_EQUAL: [T; 39] = concat(&[&IF_GET_EQUALS_RETURN, &PEXPIRE_CALL, &ELSE_RETURN_0_END]);

/// redsync's delete script:
/// `local val = redis.call("GET", KEYS[1]) if val == ARGV[1] then return redis.call("DEL", KEYS[1])
///  elseif val == false then return -1 else return 0 end`.
const REDSYNC_DELETE: [T; 46] = concat(&[
    &LOCAL_GET,
    &[Name("if"), Local, Sym("==")],
    &ARGV1,
    &[Name("then"), Name("return")],
    &DEL_CALL,
    &[Name("elseif"), Local, Sym("=="), Name("false"), Name("then"), Name("return"), Sym("-"), Num("1")],
    &ELSE_RETURN_0_END,
]);

/// redis-py's `Lock` release: `local token = redis.call('get', KEYS[1])
/// if not token or token ~= ARGV[1] then return 0 end redis.call('del', KEYS[1]) return 1`.
const REDIS_PY_RELEASE: [T; 41] =
    concat(&[&LOCAL_GET, &UNLESS_LOCAL_EQUALS_RETURN_0, &DEL_CALL, &[Name("return"), Num("1")]]);

/// redis-py's `Lock.reacquire`: the same with `redis.call('pexpire', KEYS[1], ARGV[2])`.
const REDIS_PY_REACQUIRE: [T; 46] =
    concat(&[&LOCAL_GET, &UNLESS_LOCAL_EQUALS_RETURN_0, &PEXPIRE_CALL, &[Name("return"), Num("1")]]);

const TEMPLATES: &[Template] = &[
    Template { tokens: &DEL_IF_EQUAL, recipe: Recipe::ReturnWrite { when_missing: 0 }, write: Write::Del },
    Template { tokens: &PEXPIRE_IF_EQUAL, recipe: Recipe::ReturnWrite { when_missing: 0 }, write: Write::Pexpire },
    Template { tokens: &REDSYNC_DELETE, recipe: Recipe::ReturnWrite { when_missing: -1 }, write: Write::Del },
    Template { tokens: &REDIS_PY_RELEASE, recipe: Recipe::WriteThenOne, write: Write::Del },
    Template { tokens: &REDIS_PY_REACQUIRE, recipe: Recipe::WriteThenOne, write: Write::Pexpire },
];

/// One token of a script, with the line it is on.
#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    Name(&'a [u8]),
    Sym(&'static str),
    Num(&'a [u8]),
    Str(&'a [u8]),
}

/// Lua 5.1's reserved words: never a local's name.
const KEYWORDS: &[&str] = &[
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in", "local", "nil", "not", "or",
    "repeat", "return", "then", "true", "until", "while",
];

/// Splits `body` into tokens as Lua 5.1's lexer would, with each token's line;
/// `None` for anything this small lexer does not handle.
fn tokens(body: &[u8]) -> Option<Vec<(Tok<'_>, u32)>> {
    let mut out = Vec::with_capacity(48);
    let mut line = 1u32;
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        match c {
            b'\n' | b'\r' => {
                // "\n", "\r", "\r\n" and "\n\r" are one line break each.
                let next = body.get(i + 1).copied();
                i += if matches!(next, Some(n) if (n == b'\n' || n == b'\r') && n != c) { 2 } else { 1 };
                line += 1;
            }
            b' ' | b'\t' | 0x0b | 0x0c => i += 1,
            b'-' if body.get(i + 1) == Some(&b'-') => {
                // A short comment; a long one (`--[[`, `--[=[`) is not handled.
                if body.get(i + 2) == Some(&b'[') {
                    let mut j = i + 3;
                    while body.get(j) == Some(&b'=') {
                        j += 1;
                    }
                    if body.get(j) == Some(&b'[') {
                        return None;
                    }
                }
                while i < body.len() && body[i] != b'\n' && body[i] != b'\r' {
                    i += 1;
                }
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let start = i;
                while i < body.len() && (body[i].is_ascii_alphanumeric() || body[i] == b'_') {
                    i += 1;
                }
                out.push((Tok::Name(&body[start..i]), line));
            }
            b'0'..=b'9' => {
                let start = i;
                while i < body.len() && body[i].is_ascii_digit() {
                    i += 1;
                }
                // Decimals, exponents, hex: not handled.
                if i < body.len() && (body[i].is_ascii_alphanumeric() || body[i] == b'_' || body[i] == b'.') {
                    return None;
                }
                out.push((Tok::Num(&body[start..i]), line));
            }
            b'"' | b'\'' => {
                let start = i + 1;
                let mut j = start;
                while j < body.len() && body[j] != c {
                    // Escapes and line breaks inside strings: not handled.
                    if matches!(body[j], b'\\' | b'\n' | b'\r') {
                        return None;
                    }
                    j += 1;
                }
                if j >= body.len() {
                    return None;
                }
                out.push((Tok::Str(&body[start..j]), line));
                i = j + 1;
            }
            _ => {
                let two = body.get(i..i + 2);
                let sym = match (c, two) {
                    (_, Some(b"==")) => "==",
                    (_, Some(b"~=")) => "~=",
                    // `..`, `...`, `[[`, `[=` are not handled.
                    (_, Some(b"..")) | (_, Some(b"[[")) | (_, Some(b"[=")) => return None,
                    (b'(', _) => "(",
                    (b')', _) => ")",
                    (b'[', _) => "[",
                    (b']', _) => "]",
                    (b',', _) => ",",
                    (b'.', _) => ".",
                    (b'=', _) => "=",
                    (b'-', _) => "-",
                    _ => return None,
                };
                out.push((Tok::Sym(sym), line));
                i += sym.len();
            }
        }
    }
    Some(out)
}

/// What a script's tokens bound when they matched a template.
struct Matched<'a> {
    template: &'static Template,
    /// The two command names as the script spells them.
    get_name: &'a [u8],
    write_name: &'a [u8],
    /// The line a failing write is reported on: that of its call's `(`.
    write_line: u32,
}

fn matches<'a>(template: &'static Template, toks: &[(Tok<'a>, u32)]) -> Option<Matched<'a>> {
    if toks.len() != template.tokens.len() {
        return None;
    }
    let mut local: Option<&[u8]> = None;
    let mut commands: Vec<(&[u8], u32)> = Vec::with_capacity(2);
    for (k, (want, (got, _))) in template.tokens.iter().zip(toks).enumerate() {
        match (want, got) {
            (T::Name(w), Tok::Name(g)) if w.as_bytes() == *g => {}
            (T::Sym(w), Tok::Sym(g)) if w == g => {}
            (T::Num(w), Tok::Num(g)) if w.as_bytes() == *g => {}
            (T::Command(w), Tok::Str(g)) if w.as_bytes().eq_ignore_ascii_case(g) => {
                // Lua puts the call on the line of its `(`, the token before,
                // and refuses to compile a `(` on a line after the `call`'s.
                let paren = toks[k.checked_sub(1)?].1;
                if toks[k.checked_sub(2)?].1 != paren {
                    return None;
                }
                commands.push((g, paren));
            }
            (T::Local, Tok::Name(g)) => match local {
                None => {
                    let name = std::str::from_utf8(g).ok()?;
                    // A reserved word would not compile; a name the script
                    // reads later would be shadowed.
                    if KEYWORDS.contains(&name) || ["redis", "KEYS", "ARGV"].contains(&name) {
                        return None;
                    }
                    local = Some(g);
                }
                Some(bound) if bound == *g => {}
                Some(_) => return None,
            },
            _ => return None,
        }
    }
    let [(get_name, _), (write_name, write_line)] = commands[..] else { return None };
    Some(Matched { template, get_name, write_name, write_line })
}

/// Runs `body` here if it is one of the templates and the case is plain;
/// `None` if the VM must run it (having made at most one `GET`, which changes
/// nothing).
pub(super) fn run(body: &[u8], keys: &[Bytes], argv: &[Bytes], call: &mut CallFn) -> Option<Reply> {
    let m = shape(body)?.matched(body);
    let needs_argv = match m.template.write {
        Write::Del => 1,
        Write::Pexpire => 2,
    };
    let argument_bytes: usize = keys.iter().chain(argv).map(|a| a.len()).sum();
    if keys.is_empty() || argv.len() < needs_argv || argument_bytes > MAX_ARGUMENT_BYTES || keys.len() + argv.len() > 64 {
        return None;
    }
    let key = &keys[0];
    let value = match call(&[Bytes::copy_from_slice(m.get_name), key.clone()]) {
        Reply::Bulk(v) if v.len() <= MAX_VALUE_BYTES => Some(v),
        Reply::Nil => None,
        _ => return None,
    };
    let equal = value.as_deref() == Some(&argv[0][..]);
    if !equal {
        return Some(match m.template.recipe {
            Recipe::ReturnWrite { when_missing } if value.is_none() => Reply::Int(when_missing),
            _ => Reply::Int(0),
        });
    }
    let mut write = vec![Bytes::copy_from_slice(m.write_name), key.clone()];
    if m.template.write == Write::Pexpire {
        write.push(argv[1].clone());
    }
    Some(match call(&write) {
        Reply::Error(e) => {
            // As the VM reports a `redis.call` that raised.
            let msg = if e.trim().is_empty() { "ERR unknown error" } else { e.as_str() };
            Reply::Error(format!("{msg} script: {}, on @user_script:{}.", super::sha1hex(body), m.write_line))
        }
        reply => match m.template.recipe {
            Recipe::WriteThenOne => Reply::Int(1),
            // The reply became a Lua value and back: DEL and PEXPIRE answer
            // integers, which go through a Lua number.
            Recipe::ReturnWrite { .. } => match reply {
                Reply::Int(n) => Reply::Int((n as f64).trunc() as i64),
                // Not what DEL or PEXPIRE answer; the VM would convert it
                // some other way, and it is too late to hand the script to it.
                other => other,
            },
        },
    })
}

/// Whether `body` is one of the templates, which [`run`] runs here (unless a
/// case is not plain: then after one `GET`, in the VM).
pub(super) fn recognised(body: &[u8]) -> bool {
    shape(body).is_some()
}

/// A [`Matched`] by offsets into the script's body, so that it can be kept.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    template: usize,
    get_name: (usize, usize),
    write_name: (usize, usize),
    write_line: u32,
}

impl Shape {
    fn matched<'a>(&self, body: &'a [u8]) -> Matched<'a> {
        Matched {
            template: &TEMPLATES[self.template],
            get_name: &body[self.get_name.0..self.get_name.1],
            write_name: &body[self.write_name.0..self.write_name.1],
            write_line: self.write_line,
        }
    }
}

/// Scripts looked at lately on this thread, with what matching found.
const SEEN_SCRIPTS: usize = 8;

thread_local! {
    /// A client sends the same few scripts over and over (and an `EVALSHA`
    /// is looked at twice: to route it, then to run it), and lexing is most
    /// of what a matched script costs here. What matching finds depends on
    /// the body's bytes alone, so a body seen before is answered from here.
    static SEEN: std::cell::RefCell<(Vec<(Box<[u8]>, Option<Shape>)>, usize)> =
        const { std::cell::RefCell::new((Vec::new(), 0)) };
}

/// Which template `body` matches, if any.
fn shape(body: &[u8]) -> Option<Shape> {
    // Short of every template, or far longer: not worth lexing (nor keeping).
    if !(60..=1024).contains(&body.len()) {
        return None;
    }
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        if let Some((_, found)) = seen.0.iter().find(|(b, _)| &b[..] == body) {
            return *found;
        }
        let found = shape_of(body);
        let (list, next) = &mut *seen;
        if list.len() < SEEN_SCRIPTS {
            list.push((body.into(), found));
        } else {
            list[*next] = (body.into(), found);
            *next = (*next + 1) % SEEN_SCRIPTS;
        }
        found
    })
}

/// [`shape`], worked out.
fn shape_of(body: &[u8]) -> Option<Shape> {
    let toks = tokens(body)?;
    let (template, m) = TEMPLATES.iter().enumerate().find_map(|(i, t)| Some((i, matches(t, &toks)?)))?;
    // The names are slices of `body` (string tokens are never copied); one
    // that were not would run in the VM rather than be cut out of the body.
    let span = |name: &[u8]| {
        let start = (name.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
        let end = start.checked_add(name.len()).filter(|end| *end <= body.len())?;
        Some((start, end))
    };
    Some(Shape { template, get_name: span(m.get_name)?, write_name: span(m.write_name)?, write_line: m.write_line })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::scripting::{run_in_vm, INSTRUCTION_BUDGET};

    /// The scripts of the libraries, as they send them, and variants.
    const RECOGNISED: &[&str] = &[
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
        "if redis.call(\"get\",KEYS[1]) == ARGV[1]\nthen\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend",
        "-- release\r\nif redis.call('GET', KEYS[1]) == ARGV[1] then\r\n  return redis.call('DEL',\r\n KEYS[1])\r\nelse return 0 end\r\n",
        "\n\n\n\tif redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n\t\treturn redis.call(\"PEXPIRE\", KEYS[1], ARGV[2])\n\telse\n\t\treturn 0\n\tend\n",
        "\n\tlocal val = redis.call(\"GET\", KEYS[1])\n\tif val == ARGV[1] then\n\t\treturn redis.call(\"DEL\", KEYS[1])\n\telseif val == false then\n\t\treturn -1\n\telse\n\t\treturn 0\n\tend\n",
        "\n        local token = redis.call('get', KEYS[1])\n        if not token or token ~= ARGV[1] then\n            return 0\n        end\n        redis.call('del', KEYS[1])\n        return 1\n    ",
        "\n        local token = redis.call('get', KEYS[1])\n        if not token or token ~= ARGV[1] then\n            return 0\n        end\n        redis.call('pexpire', KEYS[1], ARGV[2])\n        return 1\n    ",
        "local t=redis.call('get',KEYS[1]) -- mine\nif not t or t~=ARGV[1] then return 0 end\n\n\nredis.call('del',KEYS[1]) return 1",
    ];

    /// Close to a template, different in meaning or not valid Lua: the VM's.
    const NOT_RECOGNISED: &[&str] = &[
        "if redis.call('get',KEYS[1])~=ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
        "if redis.call('get',KEYS[1])==ARGV[2] then return redis.call('del',KEYS[1]) else return 0 end",
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[2]) else return 0 end",
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('unlink',KEYS[1]) else return 0 end",
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.pcall('del',KEYS[1]) else return 0 end",
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 1 end",
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0.0 end",
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('d\\el',KEYS[1]) else return 0 end",
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call\n('del',KEYS[1]) else return 0 end",
        "--[[ a long comment ]] if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end;",
        "local redis = redis.call('get', KEYS[1]) if not redis or redis ~= ARGV[1] then return 0 end redis.call('del', KEYS[1]) return 1",
        "local end = redis.call('get', KEYS[1]) if not end or end ~= ARGV[1] then return 0 end redis.call('del', KEYS[1]) return 1",
        "local a = redis.call('get', KEYS[1]) if not a or b ~= ARGV[1] then return 0 end redis.call('del', KEYS[1]) return 1",
        "local v = redis.call(\"GET\", KEYS[1]) if v == ARGV[1] then return redis.call(\"DEL\", KEYS[1]) elseif v == false then return 1 else return 0 end",
    ];

    /// A store with strings, a key of another type, and commands told to fail.
    #[derive(Clone, Default, PartialEq, Debug)]
    struct Store {
        strings: HashMap<Bytes, Bytes>,
        ttl: HashMap<Bytes, i64>,
        wrong_type: Vec<Bytes>,
        failing: Vec<(&'static str, &'static str)>,
        log: Vec<Vec<Bytes>>,
    }

    impl Store {
        fn call(&mut self, args: &[Bytes]) -> Reply {
            self.log.push(args.to_vec());
            let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
            if let Some((_, e)) = self.failing.iter().find(|(c, _)| *c == name) {
                return Reply::error(*e);
            }
            let key = &args[1];
            if self.wrong_type.contains(key) {
                return Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value");
            }
            match name.as_str() {
                "get" => self.strings.get(key).cloned().map(Reply::Bulk).unwrap_or(Reply::Nil),
                "del" => {
                    self.ttl.remove(key);
                    Reply::Int(self.strings.remove(key).is_some() as i64)
                }
                "pexpire" => match std::str::from_utf8(&args[2]).ok().and_then(|s| s.parse::<i64>().ok()) {
                    None => Reply::error("ERR value is not an integer or out of range"),
                    Some(ms) if self.strings.contains_key(key) => {
                        self.ttl.insert(key.clone(), ms);
                        Reply::Int(1)
                    }
                    Some(_) => Reply::Int(0),
                },
                _ => Reply::error("ERR unknown command"),
            }
        }
    }

    fn b(items: &[&str]) -> Vec<Bytes> {
        items.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect()
    }

    /// Every state and argument list the tests run each script against.
    fn cases() -> Vec<(Store, Vec<Bytes>, Vec<Bytes>)> {
        let big = Bytes::from(vec![b't'; MAX_VALUE_BYTES + 1]);
        let mut states = Vec::new();
        for value in [None, Some(Bytes::from("tok")), Some(Bytes::from("other")), Some(Bytes::new()), Some(big.clone())] {
            for failing in [vec![], vec![("del", "NOPERM this user has no permissions to run the 'del' command")], vec![("pexpire", "")], vec![("get", "ERR get refused")]] {
                let mut s = Store { failing, ..Store::default() };
                if let Some(v) = &value {
                    s.strings.insert(Bytes::from("k"), v.clone());
                }
                states.push(s);
            }
        }
        let mut wrong = Store::default();
        wrong.wrong_type.push(Bytes::from("k"));
        states.push(wrong);
        let big_arg = String::from_utf8(vec![b'a'; MAX_ARGUMENT_BYTES + 1]).unwrap();
        let keys: Vec<Vec<Bytes>> = vec![b(&[]), b(&["k"]), b(&["k", "x"]), b(&["missing"])];
        let argvs: Vec<Vec<Bytes>> = vec![
            b(&[]),
            b(&["tok"]),
            b(&["tok", "5000"]),
            b(&["tok", "soon"]),
            b(&["other", "10"]),
            b(&[""]),
            b(&["", "1"]),
            b(&["tok", &big_arg]),
            vec![big.clone(), Bytes::from("1")],
        ];
        let mut out = Vec::new();
        for s in &states {
            for k in &keys {
                for a in &argvs {
                    out.push((s.clone(), k.clone(), a.clone()));
                }
            }
        }
        out
    }

    /// Runs `body` both ways on every case; returns how many ran here.
    fn compare(body: &str) -> usize {
        let mut native = 0;
        for (store, keys, argv) in cases() {
            let mut in_vm = store.clone();
            let want = run_in_vm(body.as_bytes(), &keys, &argv, INSTRUCTION_BUDGET, &mut |a: &[Bytes]| in_vm.call(a));
            let mut here = store.clone();
            match run(body.as_bytes(), &keys, &argv, &mut |a: &[Bytes]| here.call(a)) {
                Some(got) => {
                    native += 1;
                    assert_eq!(got, want, "{body:?} keys {keys:?} argv {:?}", argv.iter().map(|a| a.len()).collect::<Vec<_>>());
                    assert_eq!(here, in_vm, "{body:?}: the store and the commands made differ");
                }
                None => {
                    // Given up: at most the GET was made, nothing written.
                    assert!(here.log.len() <= 1, "{body:?}: gave up after {:?}", here.log);
                    assert!(here.log.iter().all(|c| c[0].eq_ignore_ascii_case(b"get")));
                    assert_eq!(here.strings, store.strings);
                }
            }
        }
        native
    }

    #[test]
    fn the_libraries_scripts_run_here_exactly_as_in_the_vm() {
        for body in RECOGNISED {
            assert!(recognised(body.as_bytes()), "not recognised: {body:?}");
            let native = compare(body);
            assert!(native > 100, "{body:?} ran here only {native} times");
        }
    }

    #[test]
    fn scripts_that_differ_in_a_token_run_in_the_vm() {
        for body in NOT_RECOGNISED {
            assert!(!recognised(body.as_bytes()), "recognised: {body:?}");
            assert_eq!(compare(body), 0);
        }
    }

    /// What is kept of scripts seen before answers as matching them again
    /// would, through evictions, and for scripts of the same length that
    /// differ in one token.
    #[test]
    fn scripts_seen_before_are_answered_as_when_first_seen() {
        assert_eq!(RECOGNISED[0].len(), NOT_RECOGNISED[0].len());
        let all: Vec<&str> = RECOGNISED.iter().chain(NOT_RECOGNISED).copied().collect();
        assert!(all.len() > 2 * SEEN_SCRIPTS);
        for round in 0..3 {
            for (i, body) in all.iter().enumerate() {
                let fresh = shape_of(body.as_bytes());
                assert_eq!(fresh.is_some(), i < RECOGNISED.len(), "{body:?}");
                assert_eq!(shape(body.as_bytes()), fresh, "round {round}: {body:?}");
                // At once again: now from what was kept.
                assert_eq!(shape(body.as_bytes()), fresh, "round {round}, kept: {body:?}");
            }
        }
    }

    /// A value past the VM's memory limit fails there: here too, by handing
    /// the script to the VM.
    #[test]
    fn a_value_the_vm_cannot_hold_fails_as_in_the_vm() {
        let mut store = Store::default();
        store.strings.insert(Bytes::from("k"), Bytes::from(vec![b'v'; 80 << 20]));
        let body = RECOGNISED[0].as_bytes();
        let (keys, argv) = (b(&["k"]), b(&["tok"]));
        let mut in_vm = store.clone();
        let want = run_in_vm(body, &keys, &argv, INSTRUCTION_BUDGET, &mut |a: &[Bytes]| in_vm.call(a));
        assert!(matches!(&want, Reply::Error(e) if e.contains("not enough memory")), "{want:?}");
        let mut here = store.clone();
        assert_eq!(run(body, &keys, &argv, &mut |a: &[Bytes]| here.call(a)), None);
        let mut both = store.clone();
        assert_eq!(crate::scripting::run(body, &keys, &argv, INSTRUCTION_BUDGET, &mut |a: &[Bytes]| both.call(a)), want);
    }
}
