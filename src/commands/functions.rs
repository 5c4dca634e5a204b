//! Redis 7 functions: `FUNCTION LOAD|DELETE|FLUSH|LIST|STATS|DUMP|RESTORE|KILL|HELP`,
//! `FCALL` and `FCALL_RO`; and the `#!lua flags=...` line Redis 7 scripts
//! may start with.
//!
//! A library is Lua code whose first line is `#!lua name=<library>`; loading
//! it runs it once, and each `redis.register_function` it makes registers a
//! function (name, callback, flags, description). The libraries are
//! replicated state: `FUNCTION LOAD` goes through the log, runs on every node
//! and is kept in snapshots, so every node has the same functions.
//!
//! Both loading and calling run in the scripting sandbox, as a script made
//! of the library's code wrapped so that `redis.register_function` collects
//! what it registers; a call then runs the function asked for with its keys
//! and arguments. The library is run again on every call (its top level
//! registers and returns, normally microseconds), so no state survives from
//! one call to the next, on any node: a library that keeps values in its
//! own variables between calls (which Redis's one long-lived Lua state
//! allows) starts afresh each time here. The instruction budget covers the
//! library's top level and the call together.

use bytes::Bytes;

use crate::keyspace::{ExecCtx, FunctionInfo, Keyspace, Library, ReadCtx};
use crate::protocol::{parse_i64, Args, Reply};
use crate::scripting::{self, INSTRUCTION_BUDGET};

use super::{dump, CmdError, CmdResult};

/// The flags a script or function may declare, in Redis's order.
const FLAG_NAMES: [&str; 5] = ["no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"];

/// What a script's `#!lua` line, or a function's flags, declare.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScriptFlags {
    /// No `#!` line: an old-style script (writes unless run by `EVAL_RO`).
    pub compat: bool,
    pub no_writes: bool,
    /// Runs over `maxmemory` with every command it calls.
    pub allow_oom: bool,
}

impl ScriptFlags {
    fn of(flags: &[String]) -> ScriptFlags {
        ScriptFlags {
            compat: false,
            no_writes: flags.iter().any(|f| f == "no-writes"),
            allow_oom: flags.iter().any(|f| f == "allow-oom"),
        }
    }
}

/// The flags of the function `FCALL` names in `argv`, if it exists.
pub fn flags_of(ks: &Keyspace, argv: &[Bytes]) -> Option<ScriptFlags> {
    find(ks, argv.get(1)?).map(|(_, f)| ScriptFlags::of(&f.flags))
}

/// Splits a `#!` line into words as Redis does (`sdssplitargs`): at white
/// space, with "double quotes" (C escapes) and 'single quotes' anywhere in
/// a word (`name="foo"` is `name=foo`); `None` if a quote is unbalanced.
fn words(line: &[u8]) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut i = 0;
    loop {
        while line.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        if i >= line.len() {
            return Some(words);
        }
        let mut word = Vec::new();
        while let Some(&c) = line.get(i) {
            i += 1;
            match c {
                c if c.is_ascii_whitespace() => break,
                b'"' => crate::protocol::double_quoted(line, &mut i, &mut word)?,
                b'\'' => crate::protocol::single_quoted(line, &mut i, &mut word)?,
                other => {
                    word.push(other);
                    continue;
                }
            }
            // A closing quote must end the word.
            if matches!(c, b'"' | b'\'') && line.get(i).is_some_and(|n| !n.is_ascii_whitespace()) {
                return None;
            }
        }
        words.push(String::from_utf8_lossy(&word).into_owned());
    }
}

/// A script's `#!lua [flags=a,b]` line, as Redis reads it: the flags, and
/// the length of the line (without its line feed, which the script keeps,
/// so that its line numbers stay the user's).
pub fn script_shebang(body: &[u8]) -> Result<(ScriptFlags, usize), CmdError> {
    if !body.starts_with(b"#!") {
        return Ok((ScriptFlags { compat: true, no_writes: false, allow_oom: false }, 0));
    }
    let err = |m: String| CmdError::Other(format!("ERR {m}"));
    let end = body.iter().position(|b| *b == b'\n').ok_or_else(|| err("Invalid script shebang".into()))?;
    let parts = words(&body[..end]).ok_or_else(|| err("Invalid script shebang".into()))?;
    let Some(engine) = parts.first() else { return Err(err("Invalid engine in script shebang".into())) };
    if engine != "#!lua" {
        return Err(err(format!("Unexpected engine in script shebang: {engine}")));
    }
    let mut flags = ScriptFlags::default();
    for part in &parts[1..] {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(err(format!("Unknown lua shebang option: {part}")));
        };
        for flag in list.split(',') {
            if !FLAG_NAMES.contains(&flag) {
                return Err(err(format!("Unexpected flag in script shebang: {flag}")));
            }
            flags.no_writes |= flag == "no-writes";
            flags.allow_oom |= flag == "allow-oom";
        }
    }
    Ok((flags, end))
}

/// A library's `#!<engine> name=<name>` line: its name, and where its code
/// starts (at the line feed that ends the line).
fn library_header(code: &[u8]) -> Result<(String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let end = code.iter().position(|b| *b == b'\n').ok_or("Invalid library metadata")?;
    let parts = words(&code[..end]).ok_or("Invalid library metadata")?;
    let Some(engine) = parts.first() else { return Err("Invalid library metadata".into()) };
    let mut name = None;
    for part in &parts[1..] {
        // Compared as bytes: a word may begin with a character of several.
        if part.len() >= 5 && part.as_bytes()[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err("Invalid metadata value, name argument was given multiple times".into());
            }
            name = Some(part[5..].to_string());
            continue;
        }
        return Err(format!("Invalid metadata value given: {part}"));
    }
    let name = name.ok_or("Library name was not given")?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    let engine = &engine[2..];
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("Engine '{engine}' not found"));
    }
    Ok((name, end))
}

/// The Lua that stands in for `redis` while a library runs: the real one,
/// with `register_function`, which records each function in `__fns` (in
/// order), checking its arguments as Redis does. All on one line, so that
/// the library's lines keep their numbers.
const PRELUDE: &str = "local __r, __fns, __order, __top = redis, {}, {}, true \
local __known = {['no-writes']=1, ['allow-oom']=2, ['allow-stale']=3, ['no-cluster']=4, ['allow-cross-slot-keys']=5} \
local function __fail(m) error(m, 0) end \
local function __register(...) \
  if not __top then __fail('redis.register_function can only be called on FUNCTION LOAD command') end \
  local n = select('#', ...) \
  if n < 1 or n > 2 then __fail('wrong number of arguments to redis.register_function') end \
  local name, cb, flags, desc = nil, nil, {}, nil \
  if n == 1 then \
    local t = ... \
    if type(t) ~= 'table' then __fail('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).') end \
    for k, v in pairs(t) do \
      if type(k) ~= 'string' then __fail('named argument key given to redis.register_function is not a string') end \
      local key = string.lower(k) \
      if key == 'function_name' then \
        if type(v) ~= 'string' then __fail('function_name argument given to redis.register_function must be a string') end \
        name = v \
      elseif key == 'description' then \
        if type(v) ~= 'string' then __fail('description argument given to redis.register_function must be a string') end \
        desc = v \
      elseif key == 'callback' then \
        if type(v) ~= 'function' then __fail('callback argument given to redis.register_function must be a function') end \
        cb = v \
      elseif key == 'flags' then \
        if type(v) ~= 'table' then __fail('flags argument to redis.register_function must be a table representing function flags') end \
        local set = {} \
        for _, f in pairs(v) do \
          if type(f) ~= 'string' or not __known[f] then __fail('unknown flag given') end \
          set[__known[f]] = f \
        end \
        for i = 1, 5 do if set[i] then flags[#flags + 1] = set[i] end end \
      else \
        __fail('unknown argument given to redis.register_function') \
      end \
    end \
    if not name then __fail('redis.register_function must get a function name argument') end \
    if not cb then __fail('redis.register_function must get a callback argument') end \
  else \
    local a, b = ... \
    if type(a) ~= 'string' then __fail('first argument to redis.register_function must be a string') end \
    if type(b) ~= 'function' then __fail('second argument to redis.register_function must be a function') end \
    name, cb = a, b \
  end \
  if not string.find(name, '^[%w_]+$') then __fail('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long') end \
  if __fns[name] then __fail('Function already exists in the library') end \
  __fns[name] = {cb, flags, desc} \
  __order[#__order + 1] = name \
end ";

/// A library wrapped to run: `redis` is the stand-in (without `call` and
/// `pcall` while loading, as Redis's load runs no commands), the library's
/// code runs in a function of its own, then `tail`. The stand-in is
/// read-only, as Redis's `redis` table (a write goes on to the real one,
/// which refuses it with Redis's error), and has `register_function` only
/// while the library's top level runs: a function called by `FCALL` finds
/// it nil, as on Redis (and one kept from the top level refuses).
fn wrapped(code: &[u8], code_start: usize, loading: bool, tail: &str) -> Bytes {
    let hide = if loading { "if k == 'call' or k == 'pcall' then return nil end " } else { "" };
    let mut body = Vec::with_capacity(PRELUDE.len() + code.len() + tail.len() + 200);
    body.extend_from_slice(PRELUDE.as_bytes());
    body.extend_from_slice(
        format!(
            "local redis = setmetatable({{}}, {{__index = function(_, k) \
               if k == 'register_function' then if __top then return __register end return nil end \
               {hide}return __r[k] end, \
             __newindex = __r, __metatable = false}}) \
             ;(function() "
        )
        .as_bytes(),
    );
    // From the line feed that ended the `#!` line: line 2 stays line 2.
    body.extend_from_slice(&code[code_start..]);
    body.extend_from_slice(b"\nend)(); __top = false ");
    body.extend_from_slice(tail.as_bytes());
    Bytes::from(body)
}

/// Loads a library: the functions it registers, or Redis's error.
fn load(code: &[u8]) -> Result<(String, Vec<FunctionInfo>), String> {
    let (name, start) = library_header(code)?;
    let tail = "local out = {} \
        for i, n in ipairs(__order) do local f = __fns[n] out[i] = {n, f[2], f[3] or false} end \
        return out";
    let body = wrapped(code, start, true, tail);
    let mut refuse = |_: &[Bytes]| Reply::error("ERR redis.call is not available while loading a library");
    let reply = scripting::run(&body, &[], &[], INSTRUCTION_BUDGET, &mut refuse);
    let functions = match reply {
        Reply::Error(e) => {
            // Redis's words: the message, without where the script failed,
            // in the library's name for its code.
            let e = e.strip_prefix("ERR ").unwrap_or(&e);
            let msg = e.rfind(" script: ").map_or(e, |at| &e[..at]).replace("user_script", "user_function");
            return Err(match msg.strip_prefix("Error compiling script (new function): ") {
                Some(rest) => format!("Error compiling function: {rest}"),
                None => format!("Error registering functions: ERR {msg}"),
            });
        }
        Reply::Array(items) => items.iter().filter_map(function_info).collect::<Vec<_>>(),
        other => return Err(format!("Error registering functions: unexpected result {other:?}")),
    };
    if functions.is_empty() {
        return Err("No functions registered".into());
    }
    // `register_function` checked each name; a library that reached past it
    // (its code can close the function it runs in) still gets no name that
    // could not be called.
    let valid = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !functions.iter().all(|f| valid(&f.name)) {
        return Err("Error registering functions: ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    Ok((name, functions))
}

/// One `{name, {flags}, description or false}` the load returned.
fn function_info(item: &Reply) -> Option<FunctionInfo> {
    let Reply::Array(parts) = item else { return None };
    let text = |r: &Reply| match r {
        Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let name = text(parts.first()?)?;
    let flags = match parts.get(1) {
        Some(Reply::Array(flags)) => flags.iter().filter_map(text).collect(),
        _ => Vec::new(),
    };
    let description = parts.get(2).and_then(text);
    Some(FunctionInfo { name, flags, description })
}

/// Adds a loaded library to `libraries`, as Redis does: refused if it
/// exists (unless `replace`) or if one of its functions belongs to another
/// library.
fn add_library(
    libraries: &mut crate::keyspace::Libraries,
    name: String,
    library: Library,
    replace: bool,
) -> Result<(), String> {
    if libraries.contains_key(&name) && !replace {
        return Err(format!("Library '{name}' already exists"));
    }
    for f in &library.functions {
        if libraries.iter().any(|(other, lib)| *other != name && lib.functions.iter().any(|g| g.name.eq_ignore_ascii_case(&f.name))) {
            return Err(format!("Function {} already exists", f.name));
        }
    }
    libraries.insert(name, library);
    Ok(())
}

/// The library holding function `name`, and the function.
fn find<'a>(ks: &'a Keyspace, name: &[u8]) -> Option<(&'a Library, &'a FunctionInfo)> {
    ks.libraries()
        .values()
        .find_map(|lib| lib.functions.iter().find(|f| f.name.as_bytes().eq_ignore_ascii_case(name)).map(|f| (lib, f)))
}

/// `FCALL`'s `function numkeys key... arg...`: the function and the script
/// that calls it, its keys and arguments.
fn prepare_call(ks: &Keyspace, args: &mut Args, read_only_command: bool) -> Result<(Bytes, ScriptFlags, Vec<Bytes>, Vec<Bytes>), CmdError> {
    let name = args.next_bytes()?;
    let (library, function) = find(ks, name).ok_or_else(|| CmdError::Other("ERR Function not found".into()))?;
    let numkeys = parse_i64(args.next_bytes()?).ok_or_else(|| CmdError::Other("ERR Bad number of keys provided".into()))?;
    let rest = args.rest();
    if numkeys > rest.len() as i64 {
        return Err(CmdError::Other("ERR Number of keys can't be greater than number of args".into()));
    }
    if numkeys < 0 {
        return Err(CmdError::Other("ERR Number of keys can't be negative".into()));
    }
    let flags = ScriptFlags::of(&function.flags);
    if read_only_command && !flags.no_writes {
        return Err(CmdError::Other("ERR Can not execute a script with write flag using *_ro command.".into()));
    }
    let (_, start) = library_header(&library.code).map_err(|e| CmdError::Other(format!("ERR {e}")))?;
    // The name was checked when the library was loaded: letters, digits, `_`.
    let tail = format!("return __fns['{}'][1](KEYS, ARGV)", function.name);
    let body = wrapped(&library.code, start, false, &tail);
    let (keys, argv) = rest.split_at(numkeys as usize);
    Ok((body, flags, keys.to_vec(), argv.to_vec()))
}

/// An error reply of a script run as `ran`, in the words Redis would use
/// for `name` (a script's SHA1, or a function's name) from `source`
/// (`user_script`, `user_function`).
pub(super) fn renamed(reply: Reply, ran: &[u8], name: &str, source: &str) -> Reply {
    match reply {
        Reply::Error(e) => Reply::Error(e.replace(&scripting::sha1hex(ran), name).replace("user_script", source)),
        other => other,
    }
}

/// ```text
/// FCALL function numkeys [key ...] [arg ...]
/// ```
pub fn fcall(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    if scripting::entry_spent() {
        return Ok(scripting::entry_spent_reply());
    }
    let name = String::from_utf8_lossy(args.peek().map_or(&b""[..], |n| &n[..])).into_owned();
    let (body, flags, keys, argv) = prepare_call(ks, &mut args, false)?;
    let reply = super::scripts::run_writable(ks, ctx, &body, &keys, &argv, flags.no_writes);
    Ok(renamed(reply, &body, &name, "user_function"))
}

/// ```text
/// FCALL_RO function numkeys [key ...] [arg ...]
/// ```
/// Only for functions flagged `no-writes`.
pub fn fcall_ro(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    if scripting::entry_spent() {
        return Ok(scripting::entry_spent_reply());
    }
    let name = String::from_utf8_lossy(args.peek().map_or(&b""[..], |n| &n[..])).into_owned();
    let (body, _, keys, argv) = prepare_call(ks, &mut args, true)?;
    let reply = super::scripts::run_read_only(ks, ctx, &body, &keys, &argv);
    Ok(renamed(reply, &body, &name, "user_function"))
}

fn library_reply(name: &str, library: &Library, with_code: bool) -> Reply {
    let text = |s: &str| Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    let functions = library
        .functions
        .iter()
        .map(|f| {
            Reply::Map(vec![
                (text("name"), text(&f.name)),
                (text("description"), f.description.as_deref().map_or(Reply::Nil, text)),
                (text("flags"), Reply::Set(f.flags.iter().map(|s| Reply::Status(s.clone())).collect())),
            ])
        })
        .collect();
    let mut fields = vec![
        (text("library_name"), text(name)),
        (text("engine"), text("LUA")),
        (text("functions"), Reply::Array(functions)),
    ];
    if with_code {
        fields.push((text("library_code"), Reply::Bulk(library.code.clone())));
    }
    Reply::Map(fields)
}

fn error(text: String) -> CmdError {
    CmdError::Other(format!("ERR {text}"))
}

/// ```text
/// FUNCTION LOAD [REPLACE] code | DELETE library | FLUSH [ASYNC|SYNC] |
///     LIST [LIBRARYNAME pattern] [WITHCODE] | STATS | DUMP |
///     RESTORE payload [FLUSH|APPEND|REPLACE] | KILL | HELP
/// ```
/// Through the log, every subcommand (the libraries are replicated state).
pub fn function(ks: &mut Keyspace, _ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let sub_raw = args.next_bytes()?.clone();
    let sub = String::from_utf8_lossy(&sub_raw).to_ascii_uppercase();
    let rest = args.rest();
    let arity = |name: &str| Err(CmdError::Other(format!("ERR wrong number of arguments for 'function|{name}' command")));
    match sub.as_str() {
        "LOAD" => {
            let Some((code, options)) = rest.split_last() else { return arity("load") };
            let mut replace = false;
            for option in options {
                if option.eq_ignore_ascii_case(b"replace") {
                    replace = true;
                } else {
                    return Err(error(format!("Unknown option given: {}", String::from_utf8_lossy(option))));
                }
            }
            let (name, functions) = load(code).map_err(error)?;
            let library = Library { code: code.clone(), functions };
            let mut libraries = ks.libraries().clone();
            add_library(&mut libraries, name.clone(), library, replace).map_err(error)?;
            *ks.libraries_mut() = libraries;
            Ok(Reply::Bulk(Bytes::from(name)))
        }
        "DELETE" => {
            let [name] = rest else { return arity("delete") };
            let name = String::from_utf8_lossy(name).into_owned();
            if !ks.libraries().contains_key(&name) {
                return Err(error("Library not found".into()));
            }
            ks.libraries_mut().remove(&name);
            Ok(Reply::ok())
        }
        "FLUSH" => {
            match rest {
                [] => {}
                [mode] if mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync") => {}
                [_] => return Err(error("FUNCTION FLUSH only supports SYNC|ASYNC option".into())),
                _ => {
                    return Err(error(format!(
                        "unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
                        String::from_utf8_lossy(&sub_raw)
                    )))
                }
            }
            if !ks.libraries().is_empty() {
                ks.libraries_mut().clear();
            }
            Ok(Reply::ok())
        }
        "LIST" => {
            let (mut pattern, mut with_code) = (None, false);
            let mut i = 0;
            while i < rest.len() {
                if rest[i].eq_ignore_ascii_case(b"withcode") {
                    if with_code {
                        return Err(error(format!("Unknown argument {}", String::from_utf8_lossy(&rest[i]))));
                    }
                    with_code = true;
                } else if rest[i].eq_ignore_ascii_case(b"libraryname") {
                    if pattern.is_some() {
                        return Err(error(format!("Unknown argument {}", String::from_utf8_lossy(&rest[i]))));
                    }
                    let Some(p) = rest.get(i + 1) else {
                        return Err(error("library name argument was not given".into()));
                    };
                    pattern = Some(p.clone());
                    i += 1;
                } else {
                    return Err(error(format!("Unknown argument {}", String::from_utf8_lossy(&rest[i]))));
                }
                i += 1;
            }
            let listed = ks
                .libraries()
                .iter()
                .filter(|(name, _)| pattern.as_ref().is_none_or(|p| crate::keyspace::glob_match(p, name.as_bytes())))
                .map(|(name, lib)| library_reply(name, lib, with_code))
                .collect();
            Ok(Reply::Array(listed))
        }
        "STATS" => {
            if !rest.is_empty() {
                return arity("stats");
            }
            let text = |s: &str| Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()));
            let libraries = ks.libraries();
            let functions: usize = libraries.values().map(|l| l.functions.len()).sum();
            Ok(Reply::Map(vec![
                (text("running_script"), Reply::Nil),
                (
                    text("engines"),
                    Reply::Map(vec![(
                        text("LUA"),
                        Reply::Map(vec![
                            (text("libraries_count"), Reply::Int(libraries.len() as i64)),
                            (text("functions_count"), Reply::Int(functions as i64)),
                        ]),
                    )]),
                ),
            ]))
        }
        "DUMP" => {
            if !rest.is_empty() {
                return arity("dump");
            }
            Ok(Reply::Bulk(Bytes::from(dump::serialize_functions(ks.libraries().values().map(|l| &l.code)))))
        }
        "RESTORE" => {
            let (payload, policy) = match rest {
                [payload] => (payload, "APPEND".to_string()),
                [payload, policy] => (payload, String::from_utf8_lossy(policy).to_ascii_uppercase()),
                _ => return arity("restore"),
            };
            if !matches!(policy.as_str(), "FLUSH" | "APPEND" | "REPLACE") {
                return Err(error("Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.".into()));
            }
            let codes = dump::deserialize_functions(payload).map_err(|e| CmdError::Other(e.into()))?;
            // Every library is loaded first, among themselves; then all
            // are added, or none.
            let mut restored = crate::keyspace::Libraries::new();
            for code in codes {
                let (name, functions) = load(&code).map_err(error)?;
                add_library(&mut restored, name.clone(), Library { code, functions }, false).map_err(error)?;
            }
            let mut libraries = if policy == "FLUSH" { Default::default() } else { ks.libraries().clone() };
            for (name, library) in restored {
                add_library(&mut libraries, name, library, policy == "REPLACE").map_err(error)?;
            }
            *ks.libraries_mut() = libraries;
            Ok(Reply::ok())
        }
        // Functions run to completion inside one log entry: none is ever
        // running between commands.
        "KILL" if rest.is_empty() => Err(CmdError::Other("NOTBUSY No scripts in execution right now.".into())),
        "KILL" => arity("kill"),
        "HELP" if rest.is_empty() => {
            let lines = [
                "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "LOAD [REPLACE] <FUNCTION CODE>",
                "    Create a new library with the given library name and code.",
                "DELETE <LIBRARY NAME>",
                "    Delete the given library.",
                "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
                "    Return general information on all the libraries:",
                "    * Library name",
                "    * The engine used to run the Library",
                "    * Library description",
                "    * Functions list",
                "    * Library code (if WITHCODE is given)",
                "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
                "STATS",
                "    Return information about the current function running:",
                "    * Function name",
                "    * Command used to run the function",
                "    * Duration in MS that the function is running",
                "    If no function is running, return nil",
                "    In addition, returns a list of available engines.",
                "KILL",
                "    Kill the current running function.",
                "FLUSH [ASYNC|SYNC]",
                "    Delete all the libraries.",
                "    When called without the optional mode argument, the behavior is determined by the",
                "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
                "    * ASYNC: Asynchronously flush the libraries.",
                "    * SYNC: Synchronously flush the libraries.",
                "DUMP",
                "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
                "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
                "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
                "    control how to handle existing libraries (default APPEND):",
                "    * FLUSH: delete all existing libraries.",
                "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
                "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
                "      libraries with the new libraries (notice that even on this option there is a chance of failure",
                "      in case of functions name collision with another library).",
                "HELP",
                "    Prints this help.",
            ];
            Ok(Reply::Array(lines.iter().map(|l| Reply::Status(l.to_string())).collect()))
        }
        _ => Err(CmdError::Other(format!(
            "ERR unknown subcommand '{}'. Try FUNCTION HELP.",
            String::from_utf8_lossy(&sub_raw)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_parse_as_redis_s() {
        assert_eq!(script_shebang(b"return 1").unwrap(), (ScriptFlags { compat: true, no_writes: false, allow_oom: false }, 0));
        assert_eq!(script_shebang(b"#!lua\nreturn 1").unwrap(), (ScriptFlags::default(), 5));
        let (flags, len) = script_shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(flags.no_writes && !flags.compat && len == 31);
        let err = |b: &[u8]| script_shebang(b).unwrap_err().to_string();
        assert_eq!(err(b"#!lua flags=bogus\n"), "ERR Unexpected flag in script shebang: bogus");
        assert_eq!(err(b"#!py\n"), "ERR Unexpected engine in script shebang: #!py");
        assert_eq!(err(b"#!lua name=x\n"), "ERR Unknown lua shebang option: name=x");
        assert_eq!(err(b"#!lua"), "ERR Invalid script shebang");
    }

    #[test]
    fn library_headers_parse_as_redis_s() {
        assert_eq!(library_header(b"#!lua name=mylib\nx").unwrap(), ("mylib".to_string(), 16));
        assert_eq!(library_header(b"#!LUA NAME=a\n").unwrap().0, "a");
        assert_eq!(library_header(b"return 1").unwrap_err(), "Missing library metadata");
        assert_eq!(library_header(b"#!lua name=a").unwrap_err(), "Invalid library metadata");
        assert_eq!(library_header(b"#!lua\n").unwrap_err(), "Library name was not given");
        assert_eq!(library_header(b"#!lua name=a foo=b\n").unwrap_err(), "Invalid metadata value given: foo=b");
        assert_eq!(library_header(b"#!js name=a\n").unwrap_err(), "Engine 'js' not found");
        assert!(library_header(b"#!lua name=a-b\n").unwrap_err().starts_with("Library names can only"));
        // Found by the fuzzer: a word whose fifth byte is inside a character.
        assert_eq!(library_header("#!lua name\u{e9}x\n".as_bytes()).unwrap_err(), "Invalid metadata value given: name\u{e9}x");
    }

    #[test]
    fn a_library_registers_its_functions_with_their_flags() {
        let code = b"#!lua name=lib\n\
            redis.register_function('plain', function(keys, args) return 1 end)\n\
            redis.register_function{function_name='ro', callback=function() return 2 end,\n\
              flags={'allow-stale', 'no-writes'}, description='reads'}\n";
        let (name, functions) = load(code).unwrap();
        assert_eq!(name, "lib");
        assert_eq!(functions.len(), 2);
        assert_eq!(functions[0], FunctionInfo { name: "plain".into(), flags: vec![], description: None });
        assert_eq!(
            functions[1],
            FunctionInfo { name: "ro".into(), flags: vec!["no-writes".into(), "allow-stale".into()], description: Some("reads".into()) }
        );
        assert_eq!(load(b"#!lua name=empty\nlocal x = 1\n").unwrap_err(), "No functions registered");
        let e = load(b"#!lua name=bad\nredis.register_function('f', function() end)\nredis.call('set', 'k', 'v')\n").unwrap_err();
        assert!(e.starts_with("Error registering functions: "), "{e}");
        let e = load(b"#!lua name=bad\nredis.register_function('f', function() end, 3)\n").unwrap_err();
        assert!(e.contains("wrong number of arguments to redis.register_function"), "{e}");
        let e = load(b"#!lua name=bad\nthis is not lua\n").unwrap_err();
        assert!(e.starts_with("Error compiling function: "), "{e}");
        // Code that closes the function it runs in and registers a name
        // behind `register_function`'s back is refused all the same.
        let e = load(b"#!lua name=sly\nend)() __fns[\"x'y\"] = {function() end, {}} __order[1] = \"x'y\" (function()\n").unwrap_err();
        assert!(e.starts_with("Error registering functions: ERR Library names can only"), "{e}");
    }
}
