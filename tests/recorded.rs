//! Replies recorded from a real Redis 7.0, replayed against raftlock and compared
//! reply by reply (issue 17): normal replies, edge cases, `WRONGTYPE`, arity, syntax
//! and range errors, word for word.
//!
//! Data: `tests/data/redis7/<family>.cmds` lists the commands (one a line, shell-style
//! quoting; `# comments`); `tests/data/redis7/record.py` sends them to a private
//! `redis-server` and writes `<family>.expected`: JSON lines, first
//! `{"redis_version": ...}`, then one object per command with `line` (its line in the
//! .cmds file), `cmd` (the arguments) and `reply` (the exact RESP bytes Redis sent),
//! byte strings written as latin-1 strings (one char per byte).
//!
//! To regenerate after editing a .cmds file (needs `redis-server` on PATH; Debian's
//! package is 7.0.15): `python3 tests/data/redis7/record.py` (or `... record.py sets`
//! for one family). Each family is recorded on a fresh server after `HELLO 2` and
//! `FLUSHALL`; here each family runs on a fresh raftlock after `FLUSHALL`, on one
//! connection, commands in file order (a `HELLO 3` line switches to RESP3 here too).
//!
//! Flags on a recorded command:
//! - `unordered` (a `~ ` line in the .cmds file): Redis does not promise the order
//!   of the reply's elements. Both replies are parsed, and in each, every array or
//!   set whose items are all scalars (strings, integers, nils: the innermost arrays)
//!   is sorted, and map entries are sorted by key; then they must be equal. So an
//!   `SSCAN` reply `[cursor, [members]]` compares its members as a multiset and its
//!   cursor exactly; a flat field/value array is compared as a multiset of strings.
//! - `skip_compare` (`HELLO` lines): the reply holds server name, version and
//!   connection id, so it only has to be a non-error reply.
//!
//! Deliberate differences: `tests/data/redis7/<family>.differences` (optional),
//! JSON lines `{"line": N, "reply": "<raw RESP raftlock sends>", "why": "..."}`:
//! for the command on line N of the .cmds file raftlock must send exactly that
//! reply instead of Redis's, for the reason given (the README lists them). An
//! entry that names no recorded command, gives no reason, or equals what Redis
//! sent fails the test, so the file can only hold real, explained differences.
//!
//! Every difference in a family is collected (file, line, command, both replies)
//! and the family's test fails once, listing all of them.

mod common;

use std::path::{Path, PathBuf};

use common::{parse, RawConn, Resp, TestServer};

/// The families, one `#[test]` each (kept in step with the data directory by
/// `every_recorded_family_has_a_test`).
const FAMILIES: &[&str] =
    &["bitfield", "bitmaps", "config", "functions", "geo", "hashes2", "hyperloglog", "lists2", "server", "sets", "sets_resp3", "sort", "streams", "strings2", "zsets2"];

#[test]
fn bitfield() {
    replay("bitfield");
}

#[test]
fn functions() {
    replay("functions");
}

#[test]
fn geo() {
    replay("geo");
}

#[test]
fn server() {
    replay("server");
}

#[test]
fn sets() {
    replay("sets");
}

#[test]
fn streams() {
    replay("streams");
}

#[test]
fn sets_resp3() {
    replay("sets_resp3");
}

#[test]
fn strings2() {
    replay("strings2");
}

#[test]
fn bitmaps() {
    replay("bitmaps");
}

#[test]
fn hyperloglog() {
    replay("hyperloglog");
}

#[test]
fn sort() {
    replay("sort");
}

#[test]
fn hashes2() {
    replay("hashes2");
}

#[test]
fn lists2() {
    replay("lists2");
}

#[test]
fn zsets2() {
    replay("zsets2");
}

#[test]
fn config() {
    replay("config");
}

/// Every .cmds file has its .expected and its test here, and every recorded file
/// parses (this needs no server).
#[test]
fn every_recorded_family_has_a_test() {
    let dir = data_dir();
    let mut cmds = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let name = entry.expect("dir entry").file_name().to_string_lossy().into_owned();
        if let Some(family) = name.strip_suffix(".cmds") {
            cmds.push(family.to_string());
        }
    }
    cmds.sort();
    let mut known: Vec<String> = FAMILIES.iter().map(|s| s.to_string()).collect();
    known.sort();
    assert_eq!(cmds, known, "the .cmds files in {} and FAMILIES in tests/recorded.rs differ", dir.display());
    for family in FAMILIES {
        let path = dir.join(format!("{family}.expected"));
        let (version, cases) = load(&path);
        assert!(version.starts_with("7."), "{}: recorded against Redis {version:?}", path.display());
        assert!(!cases.is_empty(), "{}: no commands", path.display());
        for case in &cases {
            recorded_reply(&path, case);
        }
    }
}

// ---------------------------------------------------------------------------------
// replay
// ---------------------------------------------------------------------------------

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("data").join("redis7")
}

/// One recorded command.
struct Case {
    /// Line in the .expected file.
    expected_line: usize,
    /// Line in the .cmds file.
    cmds_line: usize,
    cmd: Vec<Vec<u8>>,
    reply: Vec<u8>,
    unordered: bool,
    skip_compare: bool,
}

fn replay(family: &str) {
    let path = data_dir().join(format!("{family}.expected"));
    let (version, cases) = load(&path);
    assert!(!cases.is_empty(), "{}: no commands", path.display());
    let shown = format!("tests/data/redis7/{family}.expected");

    let differences = load_differences(&data_dir().join(format!("{family}.differences")));
    for (line, (reply, _)) in &differences {
        let case = cases.iter().find(|c| c.cmds_line == *line).unwrap_or_else(|| {
            panic!("{family}.differences: line {line} of {family}.cmds has no recorded command")
        });
        assert!(*reply != recorded_reply(&path, case), "{family}.differences: line {line} is what Redis sends: no difference");
    }

    let s = TestServer::start();
    let mut c = s.raw();
    let flush = c.cmd(&["FLUSHALL"]);
    assert!(!is_error(&flush), "FLUSHALL replied {}", show(&flush));

    let mut resp3 = false;
    let mut mismatches: Vec<String> = Vec::new();
    for case in &cases {
        let want = match differences.get(&case.cmds_line) {
            Some((reply, _)) => reply.clone(),
            None => recorded_reply(&path, case),
        };
        let place = format!("{shown}:{} ({family}.cmds:{})", case.expected_line, case.cmds_line);
        let cmd_text = show_cmd(&case.cmd);
        let args: Vec<&[u8]> = case.cmd.iter().map(|a| a.as_slice()).collect();
        c.send(&RawConn::encode(&args));
        let got = match c.read() {
            Ok(v) => v,
            Err(e) => {
                mismatches.push(format!(
                    "{place}: {cmd_text}\n    expected: {}\n    got:      no reply ({e:?}); reconnected",
                    show(&want)
                ));
                c = s.raw();
                if resp3 {
                    let _ = c.cmd(&["HELLO", "3"]);
                }
                continue;
            }
        };
        if case.skip_compare {
            if is_error(&got) {
                mismatches.push(format!(
                    "{place}: {cmd_text} (not compared, but must not fail)\n    expected: {}\n    got:      {}",
                    show(&want),
                    show(&got)
                ));
            } else if case.cmd[0].eq_ignore_ascii_case(b"HELLO") && case.cmd.len() > 1 {
                resp3 = case.cmd[1] == b"3";
            }
            continue;
        }
        let same = if case.unordered {
            normalize(want.clone()) == normalize(got.clone())
        } else {
            want == got
        };
        if !same {
            mismatches.push(format!(
                "{place}: {cmd_text}{}\n    expected: {}\n    got:      {}",
                if case.unordered { "  (unordered)" } else { "" },
                show(&want),
                show(&got)
            ));
        }
    }
    if !mismatches.is_empty() {
        panic!(
            "{} of {} commands in {shown} differ from Redis {version}:\n\n{}\n",
            mismatches.len(),
            cases.len(),
            mismatches.join("\n\n")
        );
    }
}

/// The recorded reply of `case`, parsed; it must be exactly one RESP value.
fn recorded_reply(path: &Path, case: &Case) -> Resp {
    match parse(&case.reply) {
        Ok(Some((v, used))) if used == case.reply.len() => v,
        other => panic!(
            "{}:{}: the recorded reply \"{}\" is not one RESP value: {other:?}",
            path.display(),
            case.expected_line,
            case.reply.escape_ascii()
        ),
    }
}

fn is_error(r: &Resp) -> bool {
    matches!(r, Resp::Error(_) | Resp::BlobError(_))
}

/// For `unordered` replies: sort every array/set whose items are all scalars, and
/// every map's entries by key, recursively.
fn normalize(r: Resp) -> Resp {
    match r {
        Resp::Array(Some(items)) => Resp::Array(Some(sort_scalars(items.into_iter().map(normalize).collect()))),
        Resp::Set(items) => Resp::Set(sort_scalars(items.into_iter().map(normalize).collect())),
        Resp::Push(items) => Resp::Push(items.into_iter().map(normalize).collect()),
        Resp::Map(pairs) => {
            let mut pairs: Vec<(Resp, Resp)> = pairs.into_iter().map(|(k, v)| (normalize(k), normalize(v))).collect();
            pairs.sort_by_key(|(k, _)| format!("{k:?}"));
            Resp::Map(pairs)
        }
        other => other,
    }
}

fn is_aggregate(r: &Resp) -> bool {
    matches!(r, Resp::Array(Some(_)) | Resp::Set(_) | Resp::Map(_) | Resp::Push(_))
}

fn sort_scalars(mut items: Vec<Resp>) -> Vec<Resp> {
    if !items.iter().any(is_aggregate) {
        items.sort_by_key(|i| format!("{i:?}"));
    }
    items
}

/// A reply in a short RESP-like form; the three nils stay distinct.
fn show(r: &Resp) -> String {
    match r {
        Resp::Simple(s) => format!("+{s}"),
        Resp::Error(s) => format!("-{s}"),
        Resp::Int(i) => format!(":{i}"),
        Resp::Bulk(None) => "$-1 (nil bulk)".to_string(),
        Resp::Bulk(Some(b)) => format!("\"{}\"", b.escape_ascii()),
        Resp::Array(None) => "*-1 (nil array)".to_string(),
        Resp::Array(Some(items)) => format!("[{}]", show_list(items)),
        Resp::Null => "_ (null)".to_string(),
        Resp::Bool(b) => format!("#{}", if *b { "t" } else { "f" }),
        Resp::Double(d) => format!(",{d}"),
        Resp::BigNum(n) => format!("({n}"),
        Resp::BlobError(s) => format!("!{s}"),
        Resp::Verbatim(f, t) => format!("={f}:{t:?}"),
        Resp::Map(pairs) => format!(
            "%{{{}}}",
            pairs.iter().map(|(k, v)| format!("{}: {}", show(k), show(v))).collect::<Vec<_>>().join(", ")
        ),
        Resp::Set(items) => format!("~{{{}}}", show_list(items)),
        Resp::Push(items) => format!(">[{}]", show_list(items)),
    }
}

fn show_list(items: &[Resp]) -> String {
    items.iter().map(show).collect::<Vec<_>>().join(", ")
}

/// A command as words; empty words and words with spaces or quotes are quoted.
fn show_cmd(cmd: &[Vec<u8>]) -> String {
    cmd.iter()
        .map(|a| {
            let t = a.escape_ascii().to_string();
            if t.is_empty() || t.contains(' ') || t.contains('"') {
                format!("{t:?}")
            } else {
                t
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------
// .expected files: JSON lines (a small JSON reader; the test crate has no serde_json)
// ---------------------------------------------------------------------------------

/// The deliberate differences of a family (see the module doc): .cmds line ->
/// (raftlock's reply, why). None if the file does not exist.
fn load_differences(path: &Path) -> std::collections::BTreeMap<usize, (Resp, String)> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else { return out };
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{}:{}", path.display(), n + 1);
        let Ok(Json::Obj(obj)) = Json::parse(line) else { panic!("{at}: not a JSON object") };
        let Some(Json::Num(cmds_line)) = field(&obj, "line") else { panic!("{at}: no \"line\"") };
        let Some(Json::Str(reply)) = field(&obj, "reply") else { panic!("{at}: no \"reply\"") };
        let why = match field(&obj, "why") {
            Some(Json::Str(w)) if !w.trim().is_empty() => w.clone(),
            _ => panic!("{at}: a difference needs its reason (\"why\")"),
        };
        let raw = latin1(reply).unwrap_or_else(|e| panic!("{at}: reply: {e}"));
        let reply = match parse(&raw) {
            Ok(Some((v, used))) if used == raw.len() => v,
            other => panic!("{at}: the reply is not one RESP value: {other:?}"),
        };
        assert!(out.insert(*cmds_line as usize, (reply, why)).is_none(), "{at}: line {cmds_line} listed twice");
    }
    out
}

/// The Redis version and the commands of one .expected file.
fn load(path: &Path) -> (String, Vec<Case>) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e} (regenerate with python3 tests/data/redis7/record.py)", path.display()));
    let mut version = String::new();
    let mut cases = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let expected_line = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{}:{expected_line}", path.display());
        let obj = match Json::parse(line) {
            Ok(Json::Obj(fields)) => fields,
            Ok(other) => panic!("{at}: not a JSON object: {other:?}"),
            Err(e) => panic!("{at}: bad JSON: {e}"),
        };
        if let Some(Json::Str(v)) = field(&obj, "redis_version") {
            version = v.clone();
            continue;
        }
        let cmds_line = match field(&obj, "line") {
            Some(Json::Num(x)) => *x as usize,
            _ => 0,
        };
        let cmd: Vec<Vec<u8>> = match field(&obj, "cmd") {
            Some(Json::Arr(items)) if !items.is_empty() => items
                .iter()
                .map(|x| match x {
                    Json::Str(s) => latin1(s).unwrap_or_else(|e| panic!("{at}: cmd: {e}")),
                    other => panic!("{at}: a cmd argument is not a string: {other:?}"),
                })
                .collect(),
            _ => panic!("{at}: no non-empty \"cmd\" array"),
        };
        let reply = match field(&obj, "reply") {
            Some(Json::Str(s)) => latin1(s).unwrap_or_else(|e| panic!("{at}: reply: {e}")),
            _ => panic!("{at}: no \"reply\" string"),
        };
        let flag = |k: &str| matches!(field(&obj, k), Some(Json::Bool(true)));
        cases.push(Case {
            expected_line,
            cmds_line,
            cmd,
            reply,
            unordered: flag("unordered"),
            skip_compare: flag("skip_compare"),
        });
    }
    assert!(!version.is_empty(), "{}: no {{\"redis_version\": ...}} line", path.display());
    (version, cases)
}

/// Each char of a latin-1 string is one byte.
fn latin1(s: &str) -> Result<Vec<u8>, String> {
    s.chars()
        .map(|c| u8::try_from(c).map_err(|_| format!("{c:?} is not a latin-1 character")))
        .collect()
}

fn field<'a>(obj: &'a [(String, Json)], key: &str) -> Option<&'a Json> {
    obj.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

struct JsonReader {
    c: Vec<char>,
    i: usize,
}

impl Json {
    fn parse(text: &str) -> Result<Json, String> {
        let mut r = JsonReader { c: text.chars().collect(), i: 0 };
        let v = r.value()?;
        r.ws();
        if r.i != r.c.len() {
            return Err(format!("trailing characters at {}", r.i));
        }
        Ok(v)
    }
}

impl JsonReader {
    fn ws(&mut self) {
        while self.i < self.c.len() && self.c[self.i].is_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<char> {
        self.c.get(self.i).copied()
    }

    fn literal(&mut self, word: &str, v: Json) -> Result<Json, String> {
        for ch in word.chars() {
            if self.peek() != Some(ch) {
                return Err(format!("bad literal at {}", self.i));
            }
            self.i += 1;
        }
        Ok(v)
    }

    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        match self.peek() {
            None => Err("unexpected end of line".to_string()),
            Some('{') => {
                self.i += 1;
                let mut fields = Vec::new();
                self.ws();
                if self.peek() == Some('}') {
                    self.i += 1;
                    return Ok(Json::Obj(fields));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.ws();
                    if self.peek() != Some(':') {
                        return Err(format!("expected ':' at {}", self.i));
                    }
                    self.i += 1;
                    let v = self.value()?;
                    fields.push((k, v));
                    self.ws();
                    match self.peek() {
                        Some(',') => self.i += 1,
                        Some('}') => {
                            self.i += 1;
                            return Ok(Json::Obj(fields));
                        }
                        _ => return Err(format!("expected ',' or '}}' at {}", self.i)),
                    }
                }
            }
            Some('[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek() == Some(']') {
                    self.i += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value()?);
                    self.ws();
                    match self.peek() {
                        Some(',') => self.i += 1,
                        Some(']') => {
                            self.i += 1;
                            return Ok(Json::Arr(items));
                        }
                        _ => return Err(format!("expected ',' or ']' at {}", self.i)),
                    }
                }
            }
            Some('"') => Ok(Json::Str(self.string()?)),
            Some('t') => self.literal("true", Json::Bool(true)),
            Some('f') => self.literal("false", Json::Bool(false)),
            Some('n') => self.literal("null", Json::Null),
            Some(_) => {
                let start = self.i;
                while let Some(ch) = self.peek() {
                    if ch.is_ascii_digit() || "+-.eE".contains(ch) {
                        self.i += 1;
                    } else {
                        break;
                    }
                }
                let s: String = self.c[start..self.i].iter().collect();
                s.parse::<f64>().map(Json::Num).map_err(|_| format!("bad number {s:?} at {start}"))
            }
        }
    }

    fn string(&mut self) -> Result<String, String> {
        if self.peek() != Some('"') {
            return Err(format!("expected a string at {}", self.i));
        }
        self.i += 1;
        let mut out = String::new();
        loop {
            let Some(ch) = self.peek() else {
                return Err("unterminated string".to_string());
            };
            self.i += 1;
            match ch {
                '"' => return Ok(out),
                '\\' => {
                    let Some(esc) = self.peek() else {
                        return Err("unterminated escape".to_string());
                    };
                    self.i += 1;
                    match esc {
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        '/' => out.push('/'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'u' => {
                            if self.i + 4 > self.c.len() {
                                return Err("short \\u escape".to_string());
                            }
                            let hex: String = self.c[self.i..self.i + 4].iter().collect();
                            self.i += 4;
                            let code = u32::from_str_radix(&hex, 16).map_err(|_| format!("bad \\u escape {hex:?}"))?;
                            // record.py writes bytes as U+0000..U+00FF, never surrogates.
                            let c = char::from_u32(code).ok_or_else(|| format!("\\u{hex} is not a character"))?;
                            out.push(c);
                        }
                        other => return Err(format!("bad escape \\{other}")),
                    }
                }
                c => out.push(c),
            }
        }
    }
}
