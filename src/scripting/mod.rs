//! The deterministic, sandboxed Lua 5.1 that runs `EVAL` scripts inside the
//! state machine, on every node.
//!
//! Owns the Lua side only: the sandbox, the `redis` library, the conversions
//! between Lua values and [`Reply`], and the instruction budget. How a
//! `redis.call` runs is the caller's closure, so this module never touches the
//! keyspace. Every run gets a fresh Lua state: nothing leaks between scripts.
//!
//! Determinism: no clock, no I/O, no real randomness (`math.random` is a fixed
//! generator seeded identically for every run), no `collectgarbage`/`gcinfo`,
//! and a budget counted in Lua instructions, so a script over budget fails at
//! the same point on every node.

use std::cell::Cell;
use std::rc::Rc;

use bytes::Bytes;
use mlua::{ChunkMode, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};

use crate::protocol::Reply;

/// Lua instructions one script may execute. A constant, not a setting: every
/// node must stop a script at the same instruction.
pub const INSTRUCTION_BUDGET: u64 = 50_000_000;
/// Memory one script's Lua state may allocate.
const MEMORY_LIMIT: usize = 64 * 1024 * 1024;
const HOOK_EVERY: u32 = 1000;

/// The SHA1 of a script body, lower-case hex, as `EVALSHA` names scripts.
pub fn sha1hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// Runs a Redis command for the script; errors come back as `Reply::Error`.
pub type CallFn<'a> = dyn FnMut(&[Bytes]) -> Reply + 'a;

/// Runs `body` with `KEYS` and `ARGV`, executing `redis.call`/`redis.pcall`
/// through `call`, stopping after `budget` Lua instructions (the server always
/// passes [`INSTRUCTION_BUDGET`]). Returns the script's reply (errors as
/// `Reply::Error`).
pub fn run(body: &[u8], keys: &[Bytes], argv: &[Bytes], budget: u64, call: &mut CallFn) -> Reply {
    match run_inner(body, keys, argv, budget, call) {
        Ok(reply) => reply,
        Err(reply) => reply,
    }
}

fn run_inner(body: &[u8], keys: &[Bytes], argv: &[Bytes], budget: u64, call: &mut CallFn) -> Result<Reply, Reply> {
    let internal = |e: mlua::Error| Reply::Error(format!("ERR script engine: {e}"));
    // The debug library is loaded only for the error handler (which reads the
    // line an error came from); `WRAPPERS` removes it from the globals.
    // SAFETY: no script can reach `debug`: `WRAPPERS` takes it away before any
    // user code runs, keeping only `debug.getinfo` in the handler's upvalue.
    let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG;
    let lua = unsafe { Lua::unsafe_new_with(libs, LuaOptions::new()) };
    lua.set_memory_limit(MEMORY_LIMIT).map_err(internal)?;
    let exceeded = Rc::new(Cell::new(false));
    sandbox(&lua, keys, argv).map_err(internal)?;

    let sha = sha1hex(body);
    let function = lua
        .load(body)
        .set_name("@user_script")
        .set_mode(ChunkMode::Text)
        .into_function()
        .map_err(|e| Reply::Error(format!("ERR Error compiling script (new function): {}", lua_message(&e))))?;

    // The budget: count instructions. Once over, raise at every instruction,
    // so the error escapes every `pcall` the script may hide it in.
    let executed = Rc::new(Cell::new(0u64));
    {
        let (executed, exceeded) = (executed.clone(), exceeded.clone());
        lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_EVERY), move |lua, _| {
            executed.set(executed.get() + HOOK_EVERY as u64);
            if executed.get() > budget && !exceeded.get() {
                exceeded.set(true);
                lua.set_hook(HookTriggers::new().every_nth_instruction(1), |_, _| {
                    Err(mlua::Error::RuntimeError("instruction budget exceeded".into()))
                })?;
            }
            if exceeded.get() {
                return Err(mlua::Error::RuntimeError("instruction budget exceeded".into()));
            }
            Ok(VmState::Continue)
        })
        .map_err(internal)?;
    }

    let result = lua.scope(|scope| {
        let raw = scope.create_function_mut(move |lua, args: MultiValue| {
            let mut argv = Vec::with_capacity(args.len());
            for arg in args {
                match arg {
                    Value::String(s) => argv.push(Bytes::copy_from_slice(&s.as_bytes())),
                    Value::Integer(i) => argv.push(Bytes::from(i.to_string())),
                    Value::Number(n) => argv.push(Bytes::from(format_lua_number(n))),
                    _ => {
                        let err = "ERR Lua redis lib command arguments must be strings or integers";
                        return Ok((true, Value::Table(error_table(lua, err)?)));
                    }
                }
            }
            if argv.is_empty() {
                let err = "ERR Please specify at least one argument for this redis lib call";
                return Ok((true, Value::Table(error_table(lua, err)?)));
            }
            match call(&argv) {
                Reply::Error(e) => Ok((true, Value::Table(error_table(lua, &e)?))),
                reply => Ok((false, reply_to_lua(lua, &reply)?)),
            }
        })?;
        lua.set_named_registry_value(CALL_REGISTRY_KEY, &raw)?;
        let redis: Table = lua.globals().raw_get("redis")?;
        redis.raw_set("__raw", raw)?;
        // SAFETY: `redis_call` only moves values on the Lua stack and calls
        // the scoped `raw` function through Lua.
        redis.raw_set("call", unsafe { lua.create_c_function(redis_call) }?)?;
        let runner: mlua::Function = lua.load(WRAPPERS).set_name("=raftlock").eval()?;
        protect_globals(&lua)?;
        runner.call::<(bool, Value)>(function.clone())
    });
    lua.remove_hook();

    if exceeded.get() {
        return Err(Reply::Error(format!(
            "ERR Script exceeded the budget of {budget} Lua instructions and was stopped \
             (at the same point on every node); nothing after that point was applied"
        )));
    }
    match result {
        Ok((true, value)) => Ok(lua_to_reply(&value)),
        // Redis 7's error reply: the message, then where the script failed.
        Ok((false, Value::Table(err))) => {
            let msg: String = err.raw_get::<Option<String>>("err").ok().flatten().unwrap_or_default();
            let line: Option<i64> = err.raw_get("line").ok();
            match line {
                Some(line) if line > 0 => Err(Reply::Error(format!("{msg} script: {sha}, on @user_script:{line}."))),
                _ => Err(Reply::Error(format!("{msg} script: {sha}, on @user_script."))),
            }
        }
        Ok((false, other)) => Err(Reply::Error(format!("ERR Error running script: {other:?}"))),
        Err(e) if matches!(root(&e), mlua::Error::MemoryError(_)) => {
            Err(Reply::Error("ERR Script exceeded its memory limit".into()))
        }
        Err(e) => Err(Reply::Error(format!("ERR Error running script: {}", lua_message(&e)))),
    }
}

/// Where `redis_call` finds the scoped function that runs a command.
const CALL_REGISTRY_KEY: &str = "raftlock.redis_call";

/// `redis.call`: runs the command through the scoped function registered under
/// [`CALL_REGISTRY_KEY`], which returns `(failed, value)`, and raises `value`
/// (the error table) if it failed. A C function, as in Redis, so that a
/// script's `return redis.call(...)` (a tail call) keeps the script's frame and
/// the error handler can still name the script line.
unsafe extern "C-unwind" fn redis_call(state: *mut mlua::ffi::lua_State) -> std::os::raw::c_int {
    use mlua::ffi;
    let nargs = ffi::lua_gettop(state);
    ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, c"raftlock.redis_call".as_ptr());
    ffi::lua_insert(state, 1);
    ffi::lua_call(state, nargs, 2);
    if ffi::lua_toboolean(state, -2) != 0 {
        ffi::lua_error(state);
    }
    1
}

/// `redis.pcall` returns the error table that `redis.call` raises. Evaluates
/// to the runner: it calls the script under an error handler that, as Redis 7
/// does, turns any error into `{err=..., line=...}`: a string error gets an
/// `ERR ` code, and `line` is the script line the error came from.
const WRAPPERS: &str = r#"
local raw = redis.__raw
redis.__raw = nil
local type, tostring, xpcall, getinfo = type, tostring, xpcall, debug.getinfo
debug = nil
redis.pcall = function(...)
    local _, v = raw(...)
    return v
end
local function handler(err)
    if type(err) ~= "table" then
        err = { err = "ERR " .. tostring(err) }
    end
    for level = 2, 12 do
        local info = getinfo(level, "Sl")
        if not info then break end
        if info.source == "@user_script" then
            err.line = info.currentline
            break
        end
    end
    return err
end
return function(script)
    return xpcall(script, handler)
end
"#;

/// Removes everything that reads the environment, does I/O, loads bytecode or
/// is not deterministic; installs the `redis` library, `KEYS` and `ARGV`.
fn sandbox(lua: &Lua, keys: &[Bytes], argv: &[Bytes]) -> mlua::Result<()> {
    let g = lua.globals();
    for name in ["dofile", "loadfile", "load", "print", "collectgarbage", "gcinfo", "newproxy", "getfenv", "setfenv", "module", "require"] {
        g.raw_set(name, Value::Nil)?;
    }
    let list = |items: &[Bytes]| -> mlua::Result<Table> {
        let t = lua.create_table_with_capacity(items.len(), 0)?;
        for (i, item) in items.iter().enumerate() {
            t.raw_set(i + 1, lua.create_string(&item[..])?)?;
        }
        Ok(t)
    };
    g.raw_set("KEYS", list(keys)?)?;
    g.raw_set("ARGV", list(argv)?)?;

    let redis = lua.create_table()?;
    redis.raw_set("sha1hex", lua.create_function(|_, s: mlua::String| Ok(sha1hex(&s.as_bytes())))?)?;
    // Redis 7: a leading '-' is dropped; a message without a space (so
    // without an error code) gets the code `ERR`.
    redis.raw_set(
        "error_reply",
        lua.create_function(|lua, s: mlua::String| {
            let s = s.to_str()?;
            let text = s.strip_prefix('-').unwrap_or(&s);
            if text.contains(' ') {
                error_table(lua, text)
            } else {
                error_table(lua, &format!("ERR {text}"))
            }
        })?,
    )?;
    redis.raw_set(
        "status_reply",
        lua.create_function(|lua, s: mlua::String| {
            let t = lua.create_table()?;
            t.raw_set("ok", s)?;
            Ok(t)
        })?,
    )?;
    // Logging would be I/O from inside the state machine: accepted, dropped.
    redis.raw_set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    redis.raw_set(
        "setresp",
        lua.create_function(|_, v: i64| match v {
            2 => Ok(()),
            _ => Err(mlua::Error::RuntimeError("RESP3 replies inside scripts are not supported".into())),
        })?,
    )?;
    for (name, level) in [("LOG_DEBUG", 0), ("LOG_VERBOSE", 1), ("LOG_NOTICE", 2), ("LOG_WARNING", 3)] {
        redis.raw_set(name, level)?;
    }
    g.raw_set("redis", redis)?;

    lua.load(
        r#"
        -- Bytecode can break out of any Lua sandbox: text only.
        local text_only = loadstring
        loadstring = function(s, name)
            if type(s) == "string" and string.byte(s, 1) == 27 then
                return nil, "loading binary chunks is not allowed"
            end
            return text_only(s, name)
        end
        string.dump = nil
        -- A fixed generator: the same numbers on every node.
        local seed = 0
        math.randomseed = function(n) seed = math.floor(tonumber(n) or 0) % 2147483647 end
        math.random = function(m, n)
            seed = (seed * 16807 + 1) % 2147483647
            local r = seed / 2147483647
            if m == nil then return r end
            if n == nil then m, n = 1, m end
            return m + math.floor(r * (n - m + 1))
        end
        "#,
    )
    .set_name("=raftlock")
    .exec()
}

/// Makes the globals and the libraries read-only, with Redis's messages:
/// `_G` keeps nothing itself and reads through to a hidden table.
fn protect_globals(lua: &Lua) -> mlua::Result<()> {
    lua.load(
        r#"
        local G, pairs, ipairs, rawset, setmetatable, error, tostring = _G, pairs, ipairs, rawset, setmetatable, error, tostring
        local backing = {}
        for k, v in pairs(G) do backing[k] = v end
        for k in pairs(backing) do rawset(G, k, nil) end
        local function deny() error("Attempt to modify a readonly table", 2) end
        local readonly = { [G] = true }
        for _, name in ipairs({"string", "table", "math", "redis"}) do
            backing[name] = setmetatable({}, { __index = backing[name], __newindex = deny, __metatable = false })
            readonly[backing[name]] = true
        end
        -- rawset would bypass __newindex.
        backing.rawset = function(t, k, v)
            if readonly[t] then error("Attempt to modify a readonly table", 2) end
            return rawset(t, k, v)
        end
        backing._G = G
        setmetatable(G, {
            __index = function(_, name)
                local v = backing[name]
                if v == nil then
                    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
                end
                return v
            end,
            __newindex = function(_, name)
                error("Attempt to modify a readonly table", 2)
            end,
            __metatable = false,
        })
        "#,
    )
    .set_name("=raftlock")
    .exec()
}

fn error_table(lua: &Lua, text: &str) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("err", text)?;
    Ok(t)
}

/// Lua 5.1's `%.14g` for numbers passed as command arguments.
fn format_lua_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// RESP -> Lua, as Redis converts `redis.call` replies (RESP2 rules).
fn reply_to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Int(n) => Value::Number(*n as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(&b[..])?),
        Reply::Verbatim(s) => Value::String(lua.create_string(s)?),
        Reply::Nil | Reply::NilArray => Value::Boolean(false),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s.as_str())?;
            Value::Table(t)
        }
        Reply::Error(e) => Value::Table(error_table(lua, e)?),
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, reply_to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Double(v) => Value::String(lua.create_string(crate::protocol::format_double(*v))?),
        Reply::ScorePairs(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (m, v)) in pairs.iter().enumerate() {
                t.raw_set(2 * i + 1, lua.create_string(&m[..])?)?;
                t.raw_set(2 * i + 2, lua.create_string(crate::protocol::format_double(*v))?)?;
            }
            Value::Table(t)
        }
        Reply::Map(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (k, v)) in pairs.iter().enumerate() {
                t.raw_set(2 * i + 1, reply_to_lua(lua, k)?)?;
                t.raw_set(2 * i + 2, reply_to_lua(lua, v)?)?;
            }
            Value::Table(t)
        }
    })
}

/// Lua -> RESP, as Redis converts a script's return value.
fn lua_to_reply(value: &Value) -> Reply {
    match value {
        Value::Nil => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Nil,
        Value::Integer(i) => Reply::Int(*i),
        // Numbers are truncated to integers, as Redis does.
        Value::Number(n) => Reply::Int(n.trunc() as i64),
        Value::String(s) => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Table(t) => {
            if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
                return Reply::Error(String::from_utf8_lossy(&e.as_bytes()).into_owned());
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
                return Reply::Status(String::from_utf8_lossy(&s.as_bytes()).into_owned());
            }
            // An array, cut at the first nil.
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(v) => items.push(lua_to_reply(&v)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

fn root(e: &mlua::Error) -> &mlua::Error {
    match e {
        mlua::Error::CallbackError { cause, .. } => root(cause),
        other => other,
    }
}

/// The message of a Lua error, without mlua's wrapping or a traceback.
fn lua_message(e: &mlua::Error) -> String {
    let text = match root(e) {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::MemoryError(m) => m.clone(),
        other => other.to_string(),
    };
    match text.find("\nstack traceback:") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests;
