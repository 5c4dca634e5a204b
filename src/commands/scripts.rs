//! Scripting commands: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT.
//!
//! `EVAL` is replicated verbatim and runs in the state machine on every node
//! (see `scripting`); every `redis.call` inside it runs through the same
//! command table as a client command would. The script cache is replicated.

use std::cell::Cell;

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx, MAX_SHOWN_BYTES};
use crate::protocol::{Args, Reply};
use crate::scripting::{self, INSTRUCTION_BUDGET};

use super::functions::script_shebang;
use super::{CmdError, CmdResult, Handler};

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
const READ_ONLY_SCRIPT: &str = "ERR Write commands are not allowed from read-only scripts.";

/// A script's error reply as Redis words it: named by the SHA1 of the
/// script as sent (with its `#!lua` line), not of the body Lua ran.
fn named(reply: Reply, ran: &Bytes, body: &Bytes) -> Reply {
    if ran.len() == body.len() {
        return reply;
    }
    super::functions::renamed(reply, ran, &scripting::sha1hex(body), "user_script")
}

/// A script's body as Lua runs it: without its `#!lua` line (but with the
/// line feed, so line numbers stay the user's); and whether it may write.
fn runnable(body: &Bytes, read_only_command: bool) -> Result<(Bytes, bool), CmdError> {
    let (flags, shebang) = script_shebang(body)?;
    if read_only_command && !flags.compat && !flags.no_writes {
        return Err(CmdError::Other("ERR Can not execute a script with write flag using *_ro command.".into()));
    }
    Ok((body.slice(shebang..), flags.no_writes))
}

/// Splits `numkeys key... arg...`.
fn keys_and_args(args: &mut Args) -> Result<(Vec<Bytes>, Vec<Bytes>), CmdError> {
    let numkeys = args.next_i64()?;
    let rest = args.rest();
    if numkeys < 0 {
        return Err(CmdError::Other("ERR Number of keys can't be negative".into()));
    }
    if numkeys as usize > rest.len() {
        return Err(CmdError::Other("ERR Number of keys can't be greater than number of args".into()));
    }
    let (keys, argv) = rest.split_at(numkeys as usize);
    Ok((keys.to_vec(), argv.to_vec()))
}

fn sha_arg(args: &mut Args) -> Result<String, CmdError> {
    Ok(String::from_utf8_lossy(args.next_bytes()?).to_ascii_lowercase())
}

fn not_allowed() -> Reply {
    Reply::error("ERR This Redis command is not allowed from script")
}

/// What a script's `redis.call('TIME')` answers: the time the leader
/// stamped on the entry (`unix_ms`), so every node answers alike (a
/// rate limiter's script reads TIME). A read-only script on the leader reads
/// the leader's clock.
fn script_time(cmd: &[Bytes], unix_ms: u64) -> Option<Reply> {
    if !cmd.first().is_some_and(|n| n.eq_ignore_ascii_case(b"time")) {
        return None;
    }
    let spec = match resolve_for_script(cmd).and_then(|spec| super::acl::script_check(spec, cmd).map(|()| spec)) {
        Ok(spec) => spec,
        Err(reply) => return Some(reply),
    };
    debug_assert_eq!(spec.name, "time");
    Some(Reply::Array(vec![
        Reply::Bulk(Bytes::from((unix_ms / 1000).to_string())),
        Reply::Bulk(Bytes::from((unix_ms % 1000 * 1000).to_string())),
    ]))
}

/// `redis.acl_check_cmd(command, arg...)`: whether the script's user may
/// run it (`Int` 1 or 0), as Redis answers it (unknown commands are an
/// error; the argument count is not checked).
fn acl_check_cmd(cmd: &[Bytes]) -> Reply {
    match cmd.first().and_then(|name| super::table::lookup(name)) {
        None => Reply::error("ERR Invalid command passed to redis.acl_check_cmd()"),
        Some(spec) => Reply::Int(i64::from(super::acl::script_check(spec, cmd).is_ok())),
    }
}

/// The calls a script makes that are not commands of the table run as
/// commands: `redis.acl_check_cmd`'s question and `TIME`.
fn script_special(cmd: &[Bytes], unix_ms: u64) -> Option<Reply> {
    if cmd.first().is_some_and(|n| n == scripting::ACL_CHECK) {
        return Some(acl_check_cmd(&cmd[1..]));
    }
    script_time(cmd, unix_ms)
}

/// Looks up a command a script calls, with the error texts Redis 7 gives
/// scripts (not those it gives clients).
fn resolve_for_script(cmd: &[Bytes]) -> Result<&'static super::table::CommandSpec, Reply> {
    let name = cmd.first().ok_or_else(|| Reply::error("ERR Please specify at least one argument for this redis lib call"))?;
    let spec = super::table::lookup(name).ok_or_else(|| Reply::error("ERR Unknown Redis command called from script"))?;
    if !spec.arity_ok(cmd.len()) {
        return Err(Reply::error("ERR Wrong number of args calling Redis command from script"));
    }
    // As Redis 7: the blocking pops carry `noscript`, except BLMPOP, which
    // a script may call and which never blocks there (LMPOP's reply).
    if spec.flags.contains(&"noscript") {
        return Err(not_allowed());
    }
    // A script cannot wait: Redis refuses XREAD's and XREADGROUP's BLOCK there.
    if matches!(spec.name, "xread" | "xreadgroup") && super::streams::read_layout(cmd).is_some_and(|(block, _)| block.is_some()) {
        return Err(Reply::error(format!(
            "ERR {} command is not allowed with BLOCK option from scripts",
            String::from_utf8_lossy(name)
        )));
    }
    // MEMORY's other subcommands read this node's process (its resident
    // set): a script runs on every node, and must see the same there.
    let usage_or_help = |sub: &Bytes| sub.eq_ignore_ascii_case(b"usage") || sub.eq_ignore_ascii_case(b"help");
    if spec.name == "memory" && !cmd.get(1).is_some_and(usage_or_help) {
        return Err(not_allowed());
    }
    Ok(spec)
}

/// A script's command as `MONITOR` shows it (nothing for those it never
/// shows).
fn shown(cmd: &[Bytes]) -> Vec<u8> {
    use crate::protocol::repr::{monitor_args, shown_to_monitors};
    match cmd.first().and_then(|name| super::table::lookup(name)) {
        Some(spec) if shown_to_monitors(spec.name, spec.flags) => monitor_args(spec.name, cmd),
        _ => Vec::new(),
    }
}

thread_local! {
    /// While [`showing_script_calls`] runs with a monitor watching: the
    /// commands read-only scripts run, as `MONITOR` shows them, and their
    /// bytes.
    static SHOWN: std::cell::RefCell<Option<(Vec<Bytes>, usize)>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` (a read, perhaps a read-only script); when `monitored`, also
/// the commands its scripts ran, as `MONITOR` shows them (at most
/// [`MAX_SHOWN_BYTES`] of them, as a written script's).
pub fn showing_script_calls<R>(monitored: bool, f: impl FnOnce() -> R) -> (R, Vec<Bytes>) {
    if !monitored {
        return (f(), Vec::new());
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            SHOWN.with(|s| s.borrow_mut().take());
        }
    }
    SHOWN.with(|s| *s.borrow_mut() = Some((Vec::new(), 0)));
    let reset = Reset;
    let out = f();
    let shown = SHOWN.with(|s| s.borrow_mut().take()).map(|(shown, _)| shown).unwrap_or_default();
    drop(reset);
    (out, shown)
}

/// A read-only script ran `cmd`: kept for `MONITOR` inside
/// [`showing_script_calls`].
fn show_read_only_call(cmd: &[Bytes]) {
    SHOWN.with(|s| {
        let mut s = s.borrow_mut();
        let Some((calls, bytes)) = s.as_mut() else { return };
        if *bytes > MAX_SHOWN_BYTES {
            return;
        }
        let line = shown(cmd);
        if !line.is_empty() {
            *bytes += line.len();
            calls.push(Bytes::from(line));
        }
    });
}

thread_local! {
    /// Set while a request from a node over its `maxmemory` is applied.
    static OVER_MAXMEMORY: Cell<bool> = const { Cell::new(false) };
    /// Set while a script without flags runs in such a request: its
    /// commands that may add data are refused.
    static DENY_OOM: Cell<bool> = const { Cell::new(false) };
}

/// Redis's error for a command that may add data over `maxmemory`.
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Runs `f` (the apply of a [`super::Request::OverMaxmemory`]'s request)
/// with the scripts in it bound as on a Redis over its `maxmemory`.
pub(super) fn over_maxmemory<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVER_MAXMEMORY.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(OVER_MAXMEMORY.with(|o| o.replace(true)));
    f()
}

/// Runs `f` (a script run) refusing the commands that may add data if this
/// is a script without flags (`compat`) applied over `maxmemory`, as Redis
/// refuses them (a flagged script was refused, or allowed, whole).
fn bound_by_maxmemory<T>(compat: bool, f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DENY_OOM.with(|d| d.set(self.0));
        }
    }
    let deny = compat && OVER_MAXMEMORY.with(Cell::get);
    let _restore = Restore(DENY_OOM.with(|d| d.replace(deny)));
    f()
}

/// Runs a script inside an applied entry; it may write unless `no_writes`
/// (`#!lua flags=no-writes`, or a function so flagged).
pub(super) fn run_writable(
    ks: &mut Keyspace,
    ctx: &mut ExecCtx,
    body: &Bytes,
    keys: &[Bytes],
    argv: &[Bytes],
    no_writes: bool,
) -> Reply {
    // The first write uses the script's own version; each further write gets
    // the next one, so keys created by one script still have distinct tokens.
    let mut version_used = false;
    let mut call = |cmd: &[Bytes]| -> Reply {
        if let Some(reply) = super::execute_local(cmd).or_else(|| script_special(cmd, ctx.unix_ms)) {
            ctx.show_script_call(|| shown(cmd));
            return reply;
        }
        let spec = match resolve_for_script(cmd).and_then(|spec| super::acl::script_check(spec, cmd).map(|()| spec)) {
            Ok(spec) => spec,
            Err(reply) => return reply,
        };
        match spec.handler {
            Handler::Write(_) if no_writes => return Reply::error(READ_ONLY_SCRIPT),
            Handler::Local => return not_allowed(),
            Handler::Write(_) | Handler::Read(_) => {}
        }
        if DENY_OOM.with(Cell::get) && super::may_add_data_spec(spec, cmd) {
            return Reply::error(OOM);
        }
        // Shown as Redis shows a script's commands: those that ran, whatever
        // they answered.
        ctx.show_script_call(|| shown(cmd));
        let reply = match spec.handler {
            Handler::Write(f) => {
                if version_used {
                    ctx.version = ks.next_version(ctx.version);
                }
                version_used = true;
                super::run_write(f, spec, ks, ctx, cmd)
            }
            Handler::Read(f) => {
                let read = ctx.read_ctx();
                f(ks, &read, Args::new(cmd)).unwrap_or_else(Reply::from)
            }
            Handler::Local => return not_allowed(),
        };
        // The script pays for the command's work on big values.
        if super::charged_for_work(spec) {
            scripting::charge_call(super::work_of(ks, spec, cmd));
        }
        reply
    };
    scripting::run(body, keys, argv, INSTRUCTION_BUDGET, &mut call)
}

/// Runs a read-only script on the leader.
pub(super) fn run_read_only(ks: &Keyspace, ctx: &ReadCtx, body: &Bytes, keys: &[Bytes], argv: &[Bytes]) -> Reply {
    let mut call = |cmd: &[Bytes]| -> Reply {
        if let Some(reply) = super::execute_local(cmd).or_else(|| script_special(cmd, ctx.unix_ms)) {
            show_read_only_call(cmd);
            return reply;
        }
        match resolve_for_script(cmd).and_then(|spec| super::acl::script_check(spec, cmd).map(|()| spec)) {
            Err(reply) => reply,
            Ok(spec) => match spec.handler {
                Handler::Read(f) => {
                    show_read_only_call(cmd);
                    let reply = f(ks, ctx, Args::new(cmd)).unwrap_or_else(Reply::from);
                    if super::charged_for_work(spec) {
                        scripting::charge_call(super::work_of(ks, spec, cmd));
                    }
                    reply
                }
                Handler::Write(_) => Reply::error(READ_ONLY_SCRIPT),
                Handler::Local => not_allowed(),
            },
        }
    };
    scripting::run(body, keys, argv, INSTRUCTION_BUDGET, &mut call)
}

/// ```text
/// EVAL script numkeys [key ...] [arg ...]
/// ```
/// The script's return value, converted as Redis converts it. The script is
/// cached for `EVALSHA`.
pub fn eval(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let body = args.next_bytes()?.clone();
    let (keys, argv) = keys_and_args(&mut args)?;
    let (runs, no_writes) = runnable(&body, false)?;
    let compat = runs.len() == body.len();
    let reply = bound_by_maxmemory(compat, || run_writable(ks, ctx, &runs, &keys, &argv, no_writes));
    // Kept for `EVALSHA` unless it did not compile, as Redis keeps it.
    if !matches!(&reply, Reply::Error(e) if e.starts_with(COMPILE_ERROR)) {
        ks.add_script(scripting::sha1hex(&body), body.clone());
    }
    Ok(named(reply, &runs, &body))
}

/// How the error of a script that is not Lua begins.
const COMPILE_ERROR: &str = "ERR Error compiling script";

/// ```text
/// EVALSHA sha1 numkeys [key ...] [arg ...]
/// ```
/// Runs a cached script; `-NOSCRIPT` if it is not cached.
pub fn evalsha(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let sha = sha_arg(&mut args)?;
    let (keys, argv) = keys_and_args(&mut args)?;
    let body = ks.script(&sha).cloned().ok_or_else(|| CmdError::Other(NOSCRIPT.into()))?;
    let (runs, no_writes) = runnable(&body, false)?;
    let compat = runs.len() == body.len();
    Ok(named(bound_by_maxmemory(compat, || run_writable(ks, ctx, &runs, &keys, &argv, no_writes)), &runs, &body))
}

/// ```text
/// EVAL_RO script numkeys [key ...] [arg ...]
/// ```
/// A script that only reads: runs on the leader without a log entry.
pub fn eval_ro(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let body = args.next_bytes()?.clone();
    let (keys, argv) = keys_and_args(&mut args)?;
    let (runs, _) = runnable(&body, true)?;
    Ok(named(run_read_only(ks, ctx, &runs, &keys, &argv), &runs, &body))
}

/// ```text
/// EVALSHA_RO sha1 numkeys [key ...] [arg ...]
/// ```
pub fn evalsha_ro(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let sha = sha_arg(&mut args)?;
    let (keys, argv) = keys_and_args(&mut args)?;
    let body = ks.script(&sha).cloned().ok_or_else(|| CmdError::Other(NOSCRIPT.into()))?;
    let (runs, _) = runnable(&body, true)?;
    Ok(named(run_read_only(ks, ctx, &runs, &keys, &argv), &runs, &body))
}

/// ```text
/// SCRIPT LOAD script | SCRIPT EXISTS sha1 [sha1 ...] | SCRIPT FLUSH [ASYNC | SYNC] | SCRIPT KILL
/// ```
/// Replicated, so the cache is the same on every node.
pub fn script(ks: &mut Keyspace, _ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let sub_raw = String::from_utf8_lossy(args.next_bytes()?).into_owned();
    let sub = sub_raw.to_ascii_uppercase();
    match sub.as_str() {
        "LOAD" if args.remaining() == 1 => {
            let body = args.next_bytes()?.clone();
            let (_, shebang) = script_shebang(&body)?;
            // As Redis: a script that does not compile is refused, not kept.
            if let Some(e) = scripting::compile_error(&body[shebang..]) {
                return Err(CmdError::Other(e));
            }
            let sha = scripting::sha1hex(&body);
            ks.add_script(sha.clone(), body);
            Ok(Reply::text(&sha))
        }
        "EXISTS" if args.remaining() >= 1 => Ok(Reply::Array(
            args.rest()
                .iter()
                .map(|sha| Reply::Int(ks.has_script(&String::from_utf8_lossy(sha).to_ascii_lowercase()) as i64))
                .collect(),
        )),
        "FLUSH" if args.remaining() <= 1 => {
            if args.remaining() == 1 && !matches!(args.next_keyword()?.as_str(), "ASYNC" | "SYNC") {
                return Err(CmdError::Other("ERR SCRIPT FLUSH only support SYNC|ASYNC option".into()));
            }
            ks.flush_scripts();
            Ok(Reply::ok())
        }
        // Scripts run to completion inside one log entry: none is ever
        // running between commands.
        "KILL" if args.remaining() == 0 => Ok(Reply::error("NOTBUSY No scripts in execution right now.")),
        "LOAD" | "EXISTS" | "FLUSH" | "KILL" => Err(CmdError::Other(format!(
            "ERR wrong number of arguments for 'script|{}' command",
            sub.to_ascii_lowercase()
        ))),
        _ => Err(CmdError::Other(format!("ERR unknown subcommand '{sub_raw}'. Try SCRIPT HELP."))),
    }
}
