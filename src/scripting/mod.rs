//! The deterministic, sandboxed Lua 5.1 that runs `EVAL` scripts inside the
//! state machine, on every node.
//!
//! Owns the Lua side only: the sandbox, the `redis` library, the conversions
//! between Lua values and [`Reply`], and the instruction budget. How a
//! `redis.call` runs is the caller's closure, so this module never touches the
//! keyspace. A VM is reused from run to run only while it is exactly as it was
//! built (see [`Vm`]): nothing leaks between scripts.
//!
//! Determinism: no clock, no I/O, no real randomness (`math.random` is a fixed
//! generator seeded identically for every run), no `collectgarbage`/`gcinfo`,
//! tables walked in one order of their keys ([`TableKey`]), the collector run
//! only at points every node shares ([`Pace`]), and a budget counted in Lua
//! instructions, so a script over budget fails at the same point on every node.

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

/// The first argument `redis.acl_check_cmd` puts before the command it asks
/// about, when it hands it to [`CallFn`]: the command layer answers whether
/// the script's user may run it (`Int` 1 or 0), or an error for an unknown
/// command. No script can send it itself (`redis.call` refuses it: a
/// command name never holds a NUL).
pub const ACL_CHECK: &[u8] = b"\0acl_check_cmd";

/// Runs `body` with `KEYS` and `ARGV`, executing `redis.call`/`redis.pcall`
/// through `call`, stopping after `budget` Lua instructions (the server always
/// passes [`INSTRUCTION_BUDGET`]). Returns the script's reply (errors as
/// `Reply::Error`).
///
/// A script clients send word for word (see [`known`]) runs without Lua; any
/// other runs in this thread's idle VM (see [`Vm`]), or in a new one.
pub fn run(body: &[u8], keys: &[Bytes], argv: &[Bytes], budget: u64, call: &mut CallFn) -> Reply {
    CALL_WORK.with(|work| work.set(0));
    let known = known::run(body, keys, argv, call);
    // The work of the commands a lock script made without Lua goes to the
    // entry (a few key lookups).
    charge_entry(CALL_WORK.with(|work| work.replace(0)));
    match known {
        Some(reply) => reply,
        None => run_in_vm(body, keys, argv, budget, call),
    }
}

/// Whether `body` is a lock script that runs without Lua (see [`known`]): a
/// `GET` and at most one small write, microseconds. Anything else may run
/// up to its budget.
pub fn runs_without_vm(body: &[u8]) -> bool {
    known::recognised(body)
}

thread_local! {
    /// The budget that the scripts of the log entry being applied on this
    /// thread share (see [`EntryBudget`]); `None` outside an entry's apply.
    static ENTRY_LEFT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// While alive, every script run on this thread (`EVAL`, `FCALL`, their
/// read-only forms inside a transaction, a library's load) draws its
/// instructions from one budget of [`INSTRUCTION_BUDGET`], as well as from
/// its own: the scripts of one log entry share it, and so does the work of
/// its other commands on big values ([`charge_entry`]).
///
/// Each script has its own budget, but a `MULTI` may queue any number of
/// them, and every node applies the entry, and applies it again after each
/// restart: ten spinning scripts in one transaction held every node for
/// about 50 s and made 2 GB of keyspace events, which a node could not
/// allocate; a thousand, most of a day. So the scripts of an entry have one
/// budget between them. What a script used depends only on what it did, so
/// every node stops the same script at the same point. The leader gives a
/// request whose scripts are not known to be light an entry of its own
/// ([`shares_entries`]), so that another client's script does not find the
/// budget spent by it.
#[derive(Debug)]
pub struct EntryBudget(());

impl EntryBudget {
    /// The scripts run on this thread share one budget until this is dropped.
    pub fn begin() -> EntryBudget {
        ENTRY_LEFT.with(|left| left.set(Some(INSTRUCTION_BUDGET)));
        EntryBudget(())
    }
}

impl Drop for EntryBudget {
    fn drop(&mut self) {
        ENTRY_LEFT.with(|left| left.set(None));
    }
}

/// Runs the script in this thread's idle VM, or in a new one, within what
/// the entry's budget has left (see [`EntryBudget`]).
fn run_in_vm(body: &[u8], keys: &[Bytes], argv: &[Bytes], budget: u64, call: &mut CallFn) -> Reply {
    let left = ENTRY_LEFT.with(Cell::get);
    let given = budget.min(left.unwrap_or(u64::MAX));
    // With nothing left, the script does not start (it would run to the
    // budget's first check).
    let (reply, used) = if given == 0 {
        (Reply::Error(format!("{BUDGET_EXCEEDED} 0")), 0)
    } else {
        run_in_idle_vm(body, keys, argv, given, call)
    };
    // A script stopped by its budget is heavy, whatever it was given; one
    // that never started says nothing.
    let stopped = matches!(&reply, Reply::Error(e) if e.starts_with(BUDGET_EXCEEDED));
    if given > 0 {
        remember_weight(body, if stopped { u64::MAX } else { used });
    }
    if let Some(left) = left {
        ENTRY_LEFT.with(|l| l.set(Some(left.saturating_sub(used.min(given)))));
    }
    match reply {
        Reply::Error(e) if given < budget && e.starts_with(BUDGET_EXCEEDED) => entry_budget_error(given),
        reply => reply,
    }
}

/// The error of a script stopped by what its log entry's budget had left.
fn entry_budget_error(given: u64) -> Reply {
    Reply::Error(format!(
        "{BUDGET_EXCEEDED} {given} Lua instructions, what the scripts before it in its log entry left of the \
         {INSTRUCTION_BUDGET} they share, and was stopped (at the same point on every node); nothing after \
         that point was applied"
    ))
}

/// The reply of a script not started because its log entry's budget is
/// spent ([`entry_spent`]): for a caller that would first do work to run it
/// (`FCALL` builds its library's body).
pub fn entry_spent_reply() -> Reply {
    entry_budget_error(0)
}

/// Scripts (by SHA) whose last run on this node used at most
/// [`LIGHT_BUDGET`]: the leader lets them share a log entry with other
/// requests (see [`shares_entries`]).
static LIGHT_SCRIPTS: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());
/// What a run may use and still count as light: 1/64 of the budget.
const LIGHT_BUDGET: u64 = INSTRUCTION_BUDGET / 64;
/// Light scripts remembered at most; past it, the set starts again.
const LIGHT_REMEMBERED: usize = 4096;

/// Notes what the script `body` used in its last run here.
fn remember_weight(body: &[u8], used: u64) {
    let sha = sha1hex(body);
    let Ok(mut light) = LIGHT_SCRIPTS.lock() else { return };
    if used > LIGHT_BUDGET {
        light.remove(&sha);
        return;
    }
    if light.len() >= LIGHT_REMEMBERED && !light.contains(&sha) {
        light.clear();
    }
    light.insert(sha);
}

/// Whether the leader may propose a request running `body` (whose SHA is
/// `sha`, when the request named it) in a log entry with other requests:
/// a lock script that runs without Lua, or a script whose last run on this
/// node used at most 1/64 of the budget. Any other (not run here yet, or
/// heavy last time) gets an entry of its own, so that the budget the scripts
/// of an entry share (see [`EntryBudget`]) is never spent by one client's
/// script before another's runs. Decides only how requests are grouped
/// into entries, never what an entry does.
pub fn shares_entries(body: &[u8], sha: Option<&str>) -> bool {
    if runs_without_vm(body) {
        return true;
    }
    let computed;
    let sha = match sha {
        Some(sha) => sha,
        None => {
            computed = sha1hex(body);
            &computed
        }
    };
    LIGHT_SCRIPTS.lock().is_ok_and(|light| light.contains(sha))
}

/// How the error of a script stopped by its budget begins.
const BUDGET_EXCEEDED: &str = "ERR Script exceeded the budget of";

/// Runs the script in this thread's idle VM, or in a new one; its reply and
/// the budget it used.
fn run_in_idle_vm(body: &[u8], keys: &[Bytes], argv: &[Bytes], budget: u64, call: &mut CallFn) -> (Reply, u64) {
    // Taken out for the run: a script run from inside a script's command
    // (never today) would get a VM of its own.
    let vm = IDLE_VM.with(|idle| idle.borrow_mut().take());
    let vm = match vm {
        Some(vm) => vm,
        None => match Vm::new() {
            Ok(vm) => vm,
            Err(e) => return (Reply::Error(format!("ERR script engine: {e}")), 0),
        },
    };
    let (reply, pristine) = vm.run(body, keys, argv, budget, call);
    let used = vm.meter.used.get();
    if pristine {
        IDLE_VM.with(|idle| *idle.borrow_mut() = Some(vm));
    }
    (reply, used)
}

thread_local! {
    static IDLE_VM: std::cell::RefCell<Option<Vm>> = const { std::cell::RefCell::new(None) };
}

/// Compiles `body` (a script without its `#!` line) and runs nothing:
/// Redis's error if it is not Lua, as `SCRIPT LOAD` answers it. Lua's
/// compiler says the same on every node; the compile is charged to the
/// log entry's budget as a run's is (see [`EntryBudget`]).
pub fn compile_error(body: &[u8]) -> Option<String> {
    if known::recognised(body) {
        return None;
    }
    charge_entry(body.len() as u64 / COMPILED_BYTES_PER_INSTRUCTION);
    let vm = IDLE_VM.with(|idle| idle.borrow_mut().take());
    let vm = match vm {
        Some(vm) => vm,
        None => match Vm::new() {
            Ok(vm) => vm,
            Err(e) => return Some(format!("ERR script engine: {e}")),
        },
    };
    let (error, pristine) = vm.compile(body);
    if pristine {
        IDLE_VM.with(|idle| *idle.borrow_mut() = Some(vm));
    }
    error
}

#[cfg(test)]
thread_local! {
    static VMS_BUILT_HERE: Cell<u64> = const { Cell::new(0) };
}

/// VMs built on this thread.
#[cfg(test)]
fn vms_built_on_this_thread() -> u64 {
    VMS_BUILT_HERE.with(Cell::get)
}

/// What a run sees of the VM it runs in: the same on every node, whatever the
/// VM ran before. Scripts must stop at the same instruction on every node,
/// and the budget weighs memory (see [`Meter`]), so the heap a run starts from
/// must be identical, not only its globals: same objects of the same sizes,
/// and the collector in the same state.
///
/// A VM is built, warmed up and fully collected; what is then live is its
/// [`Heap`] fingerprint. After each run the VM drops everything the run made
/// (KEYS, ARGV, the `tostring` numbering, the random seed), collects fully,
/// and is kept only if its heap is back to that fingerprint; otherwise it is
/// dropped and the next run builds a new one. A full collection leaves Lua
/// 5.1's collector in one state whatever came before (paused, its debt
/// zeroed, its threshold twice its estimate), and the estimate is the heap's
/// size unless a userdata was finalized, which leaves that userdata in the
/// heap until the next collection, so a heap equal to the fingerprint
/// implies the collector's state too. Scripts cannot leave anything behind
/// that the fingerprint does not see: globals, the libraries, `coroutine` and
/// the string metatable are read-only, and no script can reach anything else
/// that outlives its run.
struct Vm {
    call_slot: Rc<Cell<Option<*mut CallFn<'static>>>>,
    runner: mlua::Function,
    set_global: mlua::Function,
    reset: mlua::Function,
    meter: Rc<Meter>,
    baseline: Heap,
    /// Declared after every Lua value, which must be dropped before it.
    state: State,
}

/// A Lua state and the allocator meter in front of its allocator: dropped in
/// this order, since the closing state still calls the meter.
struct State {
    lua: Lua,
    allocator: Box<AllocatorState>,
}

impl std::ops::Deref for Vm {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

/// The live heap, as the allocator saw it: bytes, blocks, and a sum of a hash
/// of every block's size, so that two heaps that differ in shape but not in
/// total (a table grown, a buffer shrunk) do not look alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Heap {
    bytes: u64,
    blocks: u64,
    shape: u64,
}

fn size_hash(size: usize) -> u64 {
    let mut x = (size as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Vm {
    fn new() -> mlua::Result<Vm> {
        #[cfg(test)]
        VMS_BUILT_HERE.with(|n| n.set(n.get() + 1));
        // The debug library is loaded only for the error handler (which reads
        // the line an error came from); `WRAPPERS` removes it from the globals.
        // SAFETY: no script can reach `debug`: `WRAPPERS` takes it away before
        // any user code runs, keeping only `debug.getinfo` in the handler's
        // upvalue.
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG;
        let lua = unsafe { Lua::unsafe_new_with(libs, LuaOptions::new()) };
        // The memory limit is the allocator meter's, counted from each run's
        // start (see `Pace`).
        let allocator = AllocatorState::install(&lua)?;
        let state = State { lua, allocator };
        let lua = &state.lua;
        let meter = Rc::new(Meter::new(0));
        let reset = sandbox(lua, &meter)?;

        let call_slot: Rc<Cell<Option<*mut CallFn<'static>>>> = Rc::default();
        // `redis.call`'s work, and `redis.acl_check_cmd`'s (`acl_check`),
        // through the run's `call`.
        let scoped = |acl_check: bool| {
            let slot = call_slot.clone();
            let meter = meter.clone();
            lua.create_function(move |lua, args: MultiValue| {
                let Some(call) = slot.get() else {
                    return Err(mlua::Error::RuntimeError("redis.call outside a script run".into()));
                };
                // SAFETY: the slot holds the run's `call` only while `Vm::run`
                // holds that `&mut` and does nothing else with it; it is
                // cleared before `run` returns. Calls do not nest: a command
                // never runs a script in this VM (it is taken out while it runs).
                let call = unsafe { &mut *call };
                redis_command(lua, &meter, call, args, acl_check)
            })
        };
        let raw = scoped(false)?;
        let acl = scoped(true)?;
        let set_repl = lua.create_function(|lua, args: MultiValue| {
            let failed = |text: &str| Ok((true, Value::Table(error_table(lua, text)?)));
            if args.len() != 1 {
                // (Redis 7's text, though it takes one.)
                return failed("ERR redis.set_repl() requires two arguments.");
            }
            // As Lua's tonumber, truncated (a non-number is 0: REPL_NONE).
            let flags = match args.front() {
                Some(Value::Integer(i)) => *i as f64,
                Some(Value::Number(n)) => *n,
                Some(Value::String(s)) => s.to_str().ok().and_then(|s| s.trim().parse::<f64>().ok()).unwrap_or(0.0),
                _ => 0.0,
            };
            if !(0.0..4.0).contains(&flags.trunc()) {
                return failed("ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.");
            }
            Ok((false, Value::Nil))
        })?;
        lua.set_named_registry_value(CALL_REGISTRY_KEY, &raw)?;
        lua.set_named_registry_value(ACL_CHECK_REGISTRY_KEY, &acl)?;
        lua.set_named_registry_value(SET_REPL_REGISTRY_KEY, &set_repl)?;
        let redis: Table = lua.globals().raw_get("redis")?;
        redis.raw_set("__raw", raw)?;
        // SAFETY: these only move values on the Lua stack and call the
        // functions registered under their keys through Lua.
        redis.raw_set("acl_check_cmd", unsafe { lua.create_c_function(acl_check_call) }?)?;
        redis.raw_set("set_repl", unsafe { lua.create_c_function(set_repl_call) }?)?;
        // SAFETY: `redis_call` only moves values on the Lua stack and calls
        // the function registered under CALL_REGISTRY_KEY through Lua.
        redis.raw_set("call", unsafe { lua.create_c_function(redis_call) }?)?;
        let runner: mlua::Function = lua.load(WRAPPERS).set_name("=raftlock").eval()?;
        let set_global = protect_globals(lua)?;
        let mut vm = Vm { call_slot, runner, set_global, reset, meter, baseline: Heap::default(), state };
        // One run through every path a script takes, so that whatever mlua
        // and Lua set up on first use is part of the baseline.
        let mut nothing = |_: &[Bytes]| Reply::Nil;
        vm.run_script(b"return redis.pcall('x')", &[Bytes::new()], &[Bytes::new()], 1_000_000, &mut nothing);
        vm.clear()?;
        vm.baseline = vm.collect()?;
        Ok(vm)
    }

    fn heap(&self) -> Heap {
        Heap { bytes: self.allocator.live.get(), blocks: self.allocator.blocks.get(), shape: self.allocator.shape.get() }
    }

    /// Full collections, until the heap stops shrinking (Lua 5.1 halves its
    /// string table and buffer at most once per collection).
    fn collect(&self) -> mlua::Result<Heap> {
        let mut heap = self.heap();
        for _ in 0..64 {
            self.lua.gc_collect()?;
            let now = self.heap();
            if now == heap {
                break;
            }
            heap = now;
        }
        Ok(heap)
    }

    /// Whether full collections bring the heap back to `target` (usually the
    /// first does).
    fn collect_to(&self, target: Heap) -> mlua::Result<bool> {
        self.lua.gc_collect()?;
        if self.heap() == target {
            return Ok(true);
        }
        Ok(self.collect()? == target)
    }

    /// Drops what the run made: KEYS, ARGV, the `tostring` numbering, the seed.
    fn clear(&self) -> mlua::Result<()> {
        let empty = self.lua.create_table()?;
        self.set_global.call::<()>(("KEYS", &empty))?;
        self.set_global.call::<()>(("ARGV", &empty))?;
        self.reset.call::<()>(())
    }

    /// Runs one script; also says whether the VM is as it was built (and so
    /// may run the next one).
    fn run(&self, body: &[u8], keys: &[Bytes], argv: &[Bytes], budget: u64, call: &mut CallFn) -> (Reply, bool) {
        // What this run used is read from the meter after it; a run that
        // fails before it starts the meter used nothing.
        self.meter.used.set(0);
        let reply = self.run_script(body, keys, argv, budget, call);
        let pristine = self.clear().is_ok() && self.collect_to(self.baseline).unwrap_or(false);
        (reply, pristine)
    }

    /// Compiles `body` and drops what it made: Redis's error if it is not
    /// Lua; and whether the VM is as it was built.
    fn compile(&self, body: &[u8]) -> (Option<String>, bool) {
        let lua = &self.lua;
        lua.gc_stop();
        self.allocator.limit.set(self.allocator.live.get() + MEMORY_LIMIT as u64);
        let compiled = lua.load(body).set_name("@user_script").set_mode(ChunkMode::Text).into_function();
        self.allocator.limit.set(u64::MAX);
        lua.gc_restart();
        let error = compiled.err().map(|e| format!("ERR Error compiling script (new function): {}", lua_message(&e)));
        let pristine = self.collect_to(self.baseline).unwrap_or(false);
        (error, pristine)
    }

    fn run_script(&self, body: &[u8], keys: &[Bytes], argv: &[Bytes], budget: u64, call: &mut CallFn) -> Reply {
        // SAFETY (of the lifetime change): the slot is cleared by `_slot`
        // before this function returns, so the pointer is never used after
        // `call`'s borrow ends.
        let call: *mut CallFn<'_> = call;
        self.call_slot.set(Some(unsafe { std::mem::transmute::<*mut CallFn<'_>, *mut CallFn<'static>>(call) }));
        struct ClearSlot<'a>(&'a Cell<Option<*mut CallFn<'static>>>);
        impl Drop for ClearSlot<'_> {
            fn drop(&mut self) {
                self.0.set(None);
            }
        }
        let _slot = ClearSlot(&self.call_slot);
        match self.run_inner(body, keys, argv, budget) {
            Ok(reply) | Err(reply) => reply,
        }
    }

    fn run_inner(&self, body: &[u8], keys: &[Bytes], argv: &[Bytes], budget: u64) -> Result<Reply, Reply> {
        let internal = |e: mlua::Error| Reply::Error(format!("ERR script engine: {e}"));
        let lua = &self.lua;
        let list = |items: &[Bytes]| -> mlua::Result<Table> {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(&item[..])?)?;
            }
            Ok(t)
        };
        // The collector runs only where `Pace` says, at the same instructions
        // on every node; and the memory limit counts from this run's start,
        // not from the heap's size, which differs by a few bytes from process
        // to process (see `Pace`).
        lua.gc_stop();
        self.allocator.limit.set(self.allocator.live.get() + MEMORY_LIMIT as u64);
        self.set_global.call::<()>(("KEYS", list(keys).map_err(internal)?)).map_err(internal)?;
        self.set_global.call::<()>(("ARGV", list(argv).map_err(internal)?)).map_err(internal)?;
        // The seed and the `tostring` numbering were reset by the last `clear`.
        let meter = &self.meter;
        meter.start(budget, lua.used_memory());
        // Compiling costs by the size of the body, which may be megabytes of
        // comment (and is compiled again at each run): an instruction for
        // every 4 bytes (an 8 MB body took 40 ms to compile, here).
        if meter.charge(body.len() as u64 / COMPILED_BYTES_PER_INSTRUCTION).is_err() {
            self.allocator.limit.set(u64::MAX);
            lua.gc_restart();
            return Err(Reply::Error(format!(
                "{BUDGET_EXCEEDED} {budget} Lua instructions and was stopped \
                 (at the same point on every node); nothing after that point was applied"
            )));
        }

        let sha = || sha1hex(body);
        let function = lua
            .load(body)
            .set_name("@user_script")
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| Reply::Error(format!("ERR Error compiling script (new function): {}", lua_message(&e))))?;

        let pace = Rc::new(Pace {
            meter: meter.clone(),
            allocated: self.allocator.allocated.clone(),
            allocated_at_hook: Cell::new(self.allocator.allocated.get()),
            live: Cell::new(0),
        });
        pace.hook_every(lua, HOOK_EVERY).map_err(internal)?;
        let result = self.runner.call::<(bool, Value)>(function);
        lua.remove_global_hook();
        // Converting the result and clearing up run outside any Lua call,
        // where a refused allocation would end the process (Lua's panic):
        // no limit there (what they allocate is bounded by the reply's own
        // limits), and the collector free to run.
        self.allocator.limit.set(u64::MAX);
        lua.gc_restart();

        if meter.exceeded.get() {
            return Err(Reply::Error(format!(
                "{BUDGET_EXCEEDED} {budget} Lua instructions and was stopped \
                 (at the same point on every node); nothing after that point was applied"
            )));
        }
        match result {
            Ok((true, value)) => Ok(lua_to_reply(lua, &value, meter)),
            // Redis 7's error reply: the message, then where the script failed.
            Ok((false, Value::Table(err))) => {
                let msg: String = err
                    .raw_get::<Option<String>>("err")
                    .ok()
                    .flatten()
                    .filter(|m| !m.trim().is_empty())
                    .unwrap_or_else(|| "ERR unknown error".into());
                let line: Option<i64> = err.raw_get("line").ok();
                match line {
                    Some(line) if line > 0 => Err(Reply::Error(format!("{msg} script: {}, on @user_script:{line}.", sha()))),
                    _ => Err(Reply::Error(format!("{msg} script: {}, on @user_script.", sha()))),
                }
            }
            // Not an error table (Lua raises memory errors as a bare string,
            // past the error handler): Redis 7's text for that.
            Ok((false, other)) => {
                let msg = match &other {
                    Value::String(s) => s.to_string_lossy().to_string(),
                    _ => "execution failure".to_string(),
                };
                let msg: String = msg.chars().take(100).collect();
                Err(Reply::Error(format!("ERR Error running script f_{}, {msg}", sha())))
            }
            Err(e) if matches!(root(&e), mlua::Error::MemoryError(_)) => {
                Err(Reply::Error(format!("ERR Error running script f_{}, not enough memory", sha())))
            }
            Err(e) => Err(Reply::Error(format!("ERR Error running script: {}", lua_message(&e)))),
        }
    }
}

/// `redis.call`'s work (`redis.pcall`'s too): converts the arguments, runs the
/// command, and returns `(failed, reply or error table)`. With `acl_check`,
/// `redis.acl_check_cmd`'s: asks instead whether the script's user may run
/// the command (a boolean).
fn redis_command(
    lua: &Lua,
    meter: &Meter,
    call: &mut CallFn,
    args: MultiValue,
    acl_check: bool,
) -> mlua::Result<(bool, Value)> {
    let mut argv = Vec::with_capacity(args.len());
    for arg in args {
        match arg {
            Value::String(s) => {
                // What a script hands to commands is paid for by size, so one
                // script cannot write without bound.
                let bytes = s.as_bytes();
                meter.charge(bytes.len() as u64 / CALL_BYTES_PER_INSTRUCTION)?;
                argv.push(Bytes::copy_from_slice(&bytes));
            }
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
    if acl_check {
        argv.insert(0, Bytes::from_static(ACL_CHECK));
    } else if argv[0] == ACL_CHECK {
        return Ok((true, Value::Table(error_table(lua, "ERR Unknown Redis command called from script")?)));
    }
    let reply = call(&argv);
    // The work the command did beyond its arguments (see `charge_call`).
    meter.charge(CALL_WORK.with(|work| work.replace(0)))?;
    match reply {
        Reply::Error(e) => Ok((true, Value::Table(error_table(lua, &e)?))),
        Reply::Int(allowed) if acl_check => Ok((false, Value::Boolean(allowed != 0))),
        reply => Ok((false, reply_to_lua(lua, &reply)?)),
    }
}

thread_local! {
    /// The work of the command a script is calling, in instructions (see
    /// [`charge_call`]).
    static CALL_WORK: Cell<u64> = const { Cell::new(0) };
}

/// Charges the script calling a command with the command's work, in
/// instructions: what it did to values that its arguments do not show (a
/// `SETRANGE` at a large offset, an `LCS`, a `SUNIONSTORE`). The script
/// stops at that call if it passes its budget. Called by the command layer
/// from inside a script's `redis.call`.
pub fn charge_call(work: u64) {
    CALL_WORK.with(|w| w.set(w.get().saturating_add(work)));
}

/// Whether the budget of the log entry being applied is spent (see
/// [`EntryBudget`]): a command that would add to the work is then not run.
/// Never outside an entry's apply.
pub fn entry_spent() -> bool {
    ENTRY_LEFT.with(Cell::get) == Some(0)
}

/// What the budget of the log entry being applied has left (`None` outside
/// an entry's apply: no bound).
pub fn entry_left() -> Option<u64> {
    ENTRY_LEFT.with(Cell::get)
}

/// Charges the log entry being applied with the work of a command run
/// outside any script (see [`charge_call`] for one a script calls).
pub fn charge_entry(work: u64) {
    ENTRY_LEFT.with(|left| {
        if let Some(l) = left.get() {
            left.set(Some(l.saturating_sub(work)));
        }
    });
}

/// How many bytes a script may hold beyond its fresh state before each of its
/// instructions counts double (triple at twice this, and so on). Some
/// instructions work in C, where no instruction is counted, in time that grows
/// with the data they touch (`..` copies whole strings, `<` compares them);
/// weighting by what the script holds, and charging what it allocates (see
/// `AllocationMeter`), bounds the time any run can take by its budget.
const MEMORY_WEIGHT_BYTES: u64 = 32 * 1024;
/// Bytes allocated by a script that cost one instruction.
const ALLOCATED_BYTES_PER_INSTRUCTION: u64 = 64;
/// Bytes of `redis.call` arguments that cost one instruction.
const CALL_BYTES_PER_INSTRUCTION: u64 = 16;
/// Bytes of a script's body that cost one instruction to compile.
const COMPILED_BYTES_PER_INSTRUCTION: u64 = 4;

/// One run's budget, charged by the instruction hook, by `redis.call`
/// arguments, and by the library functions that do work in C (the pattern
/// matcher, `string.rep`, the table functions). Deterministic: every charge
/// depends only on what the script does.
struct Meter {
    used: Cell<u64>,
    budget: Cell<u64>,
    exceeded: Cell<bool>,
    /// Memory of the state before the script runs (its libraries).
    baseline_memory: Cell<usize>,
}

impl Meter {
    fn new(budget: u64) -> Meter {
        Meter { used: Cell::new(0), budget: Cell::new(budget), exceeded: Cell::new(false), baseline_memory: Cell::new(0) }
    }

    /// A new run, holding `memory` before its script is loaded.
    fn start(&self, budget: u64, memory: usize) {
        self.used.set(0);
        self.budget.set(budget);
        self.exceeded.set(false);
        self.baseline_memory.set(memory);
    }

    fn charge(&self, cost: u64) -> mlua::Result<()> {
        self.used.set(self.used.get().saturating_add(cost));
        if self.used.get() > self.budget.get() {
            self.exceeded.set(true);
        }
        if self.exceeded.get() {
            return Err(mlua::Error::RuntimeError("instruction budget exceeded".into()));
        }
        Ok(())
    }
}

/// When a run checks its budget and collects its garbage: both at instructions
/// that are the same on every node.
///
/// Lua's own collector runs when the heap has grown by a ratio of its size,
/// and frees in the order its objects were made; both differ between nodes
/// (the heap of a new VM differs by a few bytes with the process's addresses,
/// a reused one holds its objects in another order). The budget weighs the
/// memory a script holds, so a collector left to itself moved the instruction
/// a script over budget stopped at from node to node, and a replayed log
/// could stop it elsewhere than the first time. So the collector is stopped
/// for the run, and the hook collects fully once the garbage made since the
/// last collection passes [`garbage_allowed`]: a full collection frees
/// exactly what is unreachable, whatever the order. The hook runs every
/// [`HOOK_EVERY`] instructions, and more often while the script allocates
/// fast (about [`CHECK_BYTES`] between two looks), so that garbage made in C
/// (`string.rep`, `..`) is collected before it reaches the memory limit.
struct Pace {
    meter: Rc<Meter>,
    /// The allocator's running count of bytes requested.
    allocated: Rc<Cell<u64>>,
    allocated_at_hook: Cell<u64>,
    /// Bytes held beyond the run's start after the last collection.
    live: Cell<u64>,
}

/// Bytes allocated between two looks of the hook while a script allocates fast.
const CHECK_BYTES: u64 = 64 * 1024;
/// Garbage a run may make before a collection, at least (below that, a full
/// collection would cost more than the garbage it frees).
const GARBAGE_MIN: u64 = 256 * 1024;

/// Garbage (bytes made since the last collection, beyond what was `live`
/// after it) past which the hook collects: as much as is live, as Lua's own
/// pause of 200% does, but never more than half the room left under the
/// memory limit, so that garbage alone does not run a script out of memory.
fn garbage_allowed(live: u64) -> u64 {
    let room = (MEMORY_LIMIT as u64).saturating_sub(live);
    live.max(GARBAGE_MIN).min(room / 2).max(GARBAGE_MIN / 4)
}

impl Pace {
    /// (Re)installs the hook, called every `every` instructions.
    fn hook_every(self: &Rc<Pace>, lua: &Lua, every: u32) -> mlua::Result<()> {
        let pace = self.clone();
        lua.set_global_hook(HookTriggers::new().every_nth_instruction(every), move |lua, _| {
            let meter = &pace.meter;
            if !meter.exceeded.get() {
                let next = pace.look(lua, every)?;
                if next != every && !meter.exceeded.get() {
                    pace.hook_every(lua, next)?;
                }
            }
            if meter.exceeded.get() {
                // Raise at every instruction from now on, so that the error
                // escapes every `pcall` the script may hide it in.
                lua.set_global_hook(HookTriggers::new().every_nth_instruction(1), |_, _| {
                    Err(mlua::Error::RuntimeError("instruction budget exceeded".into()))
                })?;
                return Err(mlua::Error::RuntimeError("instruction budget exceeded".into()));
            }
            Ok(VmState::Continue)
        })
    }

    /// Charges the `every` instructions since the last look, each weighted
    /// by the memory the script holds (see [`Meter`]), and what it allocated;
    /// collects if the garbage is due. Returns how many instructions to the
    /// next look.
    fn look(&self, lua: &Lua, every: u32) -> mlua::Result<u32> {
        let meter = &self.meter;
        let held = (lua.used_memory().saturating_sub(meter.baseline_memory.get())) as u64;
        let fresh = self.allocated.get() - self.allocated_at_hook.get();
        // The garbage a run may make before a collection weighs nothing, so
        // that a script's budget does not depend on it.
        let weighed = held.saturating_sub(GARBAGE_MIN);
        let mut cost = every as u64 * (1 + weighed / MEMORY_WEIGHT_BYTES) + fresh / ALLOCATED_BYTES_PER_INSTRUCTION;
        if held.saturating_sub(self.live.get()) >= garbage_allowed(self.live.get()) {
            // SAFETY: a full collection from the hook, on the running thread,
            // as `collectgarbage("collect")` would run it; the scripts' values
            // have no finalizers.
            unsafe {
                lua.exec_raw::<()>((), |l| {
                    mlua::ffi::lua_gc(l, mlua::ffi::LUA_GCCOLLECT, 0);
                })?;
            }
            // A full collection sets the collector going again.
            lua.gc_stop();
            let live = (lua.used_memory().saturating_sub(meter.baseline_memory.get())) as u64;
            self.live.set(live);
            // Paid as if it were allocated again: a collection's work grows
            // with what is live.
            cost += live / ALLOCATED_BYTES_PER_INSTRUCTION;
        }
        self.allocated_at_hook.set(self.allocated.get());
        let _ = meter.charge(cost);
        // Sooner while allocating fast: about `CHECK_BYTES` to the next look.
        let per_instruction = fresh / every as u64;
        let mut next = HOOK_EVERY;
        while next > 1 && per_instruction * next as u64 > CHECK_BYTES {
            next /= 2;
        }
        Ok(next)
    }
}

/// Wraps a Lua state's allocator (mlua's) to count what the state allocates
/// and holds, and to refuse what would pass the run's memory limit.
///
/// `allocated` counts every byte requested: every C operation whose time grows
/// with its data produces a result of that size, so the count is a measure of
/// work the instruction count does not see. Deterministic: the same script on
/// the same data from the same heap makes the same allocations on every node,
/// with the collector run only where [`Pace`] runs it.
/// `live`, `blocks` and `shape` describe the heap (see [`Heap`]).
struct AllocatorState {
    inner: mlua::ffi::lua_Alloc,
    inner_ud: *mut std::os::raw::c_void,
    allocated: Rc<Cell<u64>>,
    live: Cell<u64>,
    blocks: Cell<u64>,
    shape: Cell<u64>,
    /// `live` may not grow past this: a request that would is refused, and
    /// Lua raises its memory error.
    limit: Cell<u64>,
}

unsafe extern "C" fn metered_alloc(
    ud: *mut std::os::raw::c_void,
    ptr: *mut std::os::raw::c_void,
    osize: usize,
    nsize: usize,
) -> *mut std::os::raw::c_void {
    // SAFETY: `ud` is the `AllocatorState` that `install` registered, which
    // the `Vm` owning the state drops only after the state is closed.
    let state = &*(ud as *const AllocatorState);
    // Lua 5.1 passes osize 0 with a null ptr.
    let old = if ptr.is_null() { 0 } else { osize };
    if nsize > old && state.live.get().saturating_sub(old as u64).saturating_add(nsize as u64) > state.limit.get() {
        return std::ptr::null_mut();
    }
    let out = (state.inner)(state.inner_ud, ptr, osize, nsize);
    if nsize == 0 || !out.is_null() {
        if old > 0 {
            state.live.set(state.live.get().wrapping_sub(old as u64));
            state.blocks.set(state.blocks.get().wrapping_sub(1));
            state.shape.set(state.shape.get().wrapping_sub(size_hash(old)));
        }
        if nsize > 0 {
            state.live.set(state.live.get().wrapping_add(nsize as u64));
            state.blocks.set(state.blocks.get().wrapping_add(1));
            state.shape.set(state.shape.get().wrapping_add(size_hash(nsize)));
        }
    }
    if !out.is_null() && nsize > osize {
        state.allocated.set(state.allocated.get() + (nsize - osize) as u64);
    }
    out
}

impl AllocatorState {
    /// Puts the meter in front of `lua`'s allocator, for the state's life.
    fn install(lua: &Lua) -> mlua::Result<Box<AllocatorState>> {
        let mut state = Box::new(AllocatorState {
            inner: metered_alloc,
            inner_ud: std::ptr::null_mut(),
            allocated: Rc::default(),
            live: Cell::new(lua.used_memory() as u64),
            blocks: Cell::new(0),
            shape: Cell::new(0),
            limit: Cell::new(u64::MAX),
        });
        let state_ptr: *mut AllocatorState = &mut *state;
        // SAFETY: swaps the allocator of a state no other thread uses; the
        // old one is kept and called for every request. The box outlives the
        // state (see `Vm`).
        unsafe {
            lua.exec_raw::<()>((), |l| {
                let mut inner_ud = std::ptr::null_mut();
                let inner = mlua::ffi::lua_getallocf(l, &mut inner_ud);
                (*state_ptr).inner = inner;
                (*state_ptr).inner_ud = inner_ud;
                mlua::ffi::lua_setallocf(l, metered_alloc, state_ptr.cast());
            })?;
        }
        Ok(state)
    }
}

/// Where `redis_call` finds the scoped function that runs a command.
const CALL_REGISTRY_KEY: &str = "raftlock.redis_call";
/// Where `acl_check_call` and `set_repl_call` find theirs.
const ACL_CHECK_REGISTRY_KEY: &str = "raftlock.acl_check";
const SET_REPL_REGISTRY_KEY: &str = "raftlock.set_repl";

/// `redis.call`: runs the command through the scoped function registered under
/// [`CALL_REGISTRY_KEY`], which returns `(failed, value)`, and raises `value`
/// (the error table) if it failed. A C function, as in Redis, so that a
/// script's `return redis.call(...)` (a tail call) keeps the script's frame and
/// the error handler can still name the script line.
unsafe extern "C-unwind" fn redis_call(state: *mut mlua::ffi::lua_State) -> std::os::raw::c_int {
    call_and_raise(state, c"raftlock.redis_call")
}

/// `redis.acl_check_cmd`, a C function for the same reason as [`redis_call`].
unsafe extern "C-unwind" fn acl_check_call(state: *mut mlua::ffi::lua_State) -> std::os::raw::c_int {
    call_and_raise(state, c"raftlock.acl_check")
}

/// `redis.set_repl`, likewise.
unsafe extern "C-unwind" fn set_repl_call(state: *mut mlua::ffi::lua_State) -> std::os::raw::c_int {
    call_and_raise(state, c"raftlock.set_repl")
}

/// Calls the function registered under `key` with this call's arguments; it
/// returns `(failed, value)`: raises `value` if it failed, else returns it.
unsafe fn call_and_raise(state: *mut mlua::ffi::lua_State, key: &std::ffi::CStr) -> std::os::raw::c_int {
    use mlua::ffi;
    let nargs = ffi::lua_gettop(state);
    ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, key.as_ptr());
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
local type, tostring, xpcall, getinfo, select = type, tostring, xpcall, debug.getinfo, select
debug = nil
local sha1hex = redis.sha1hex
redis.sha1hex = function(...)
    if select('#', ...) ~= 1 then error("wrong number of arguments", 0) end
    return sha1hex((...))
end
redis.pcall = function(...)
    local _, v = raw(...)
    return v
end
local rawget = rawget
local function handler(err)
    -- A new table: the script's own error table may have metamethods.
    if type(err) == "table" then
        err = { err = rawget(err, "err") }
    else
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
/// is not deterministic; installs the `redis` library and (empty) `KEYS` and
/// `ARGV`. Returns the function that resets what a run may change in the
/// sandbox: the random seed and the numbering of `tostring`.
/// Where the sandbox keeps Lua's own `next` (which walks a table in the order
/// its keys sit) for its own setup.
const RAW_NEXT_KEY: &str = "raftlock.raw_next";

fn sandbox(lua: &Lua, meter: &Rc<Meter>) -> mlua::Result<mlua::Function> {
    let g = lua.globals();
    lua.set_named_registry_value(RAW_NEXT_KEY, g.raw_get::<mlua::Function>("next")?)?;
    for name in ["dofile", "loadfile", "load", "print", "collectgarbage", "gcinfo", "newproxy", "getfenv", "setfenv", "module", "require"] {
        g.raw_set(name, Value::Nil)?;
    }
    g.raw_set("KEYS", lua.create_table()?)?;
    g.raw_set("ARGV", lua.create_table()?)?;

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
    // Redis 7 replicates a script's effects whatever the script asks:
    // `replicate_commands` says yes and `set_repl` only checks its flags.
    // Here every node runs the script itself, so whatever a script passes to
    // `set_repl` (set up in `Vm::new`), its writes reach every node (as with
    // REPL_ALL).
    redis.raw_set("replicate_commands", lua.create_function(|_, _: MultiValue| Ok(true))?)?;
    for (name, flags) in [("REPL_NONE", 0), ("REPL_AOF", 1), ("REPL_SLAVE", 2), ("REPL_REPLICA", 2), ("REPL_ALL", 3)] {
        redis.raw_set(name, flags)?;
    }
    // The version clients are told (`INFO`, `HELLO`), as a string and as
    // Redis's 0x00MMmmpp number.
    let version = crate::REDIS_VERSION;
    redis.raw_set("REDIS_VERSION", version)?;
    let number = version.split('.').filter_map(|p| p.parse::<i64>().ok()).fold(0, |n, p| n * 256 + p);
    redis.raw_set("REDIS_VERSION_NUM", number)?;
    // The debugger's calls, which do nothing outside it (there is none here).
    redis.raw_set("breakpoint", lua.create_function(|_, _: MultiValue| Ok(false))?)?;
    redis.raw_set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    g.raw_set("redis", redis)?;
    // Lua's own matcher recurses in C once per pattern item and backtracks
    // without limit, where no instruction is counted: ours is bounded and
    // charges its steps to the budget.
    let string: Table = g.raw_get("string")?;
    let charge_steps = {
        let meter = meter.clone();
        Rc::new(move |steps: u64| meter.charge(steps))
    };
    patterns::install(lua, &string, charge_steps.clone(), MEMORY_LIMIT)?;
    let reset_libs = libs::install(lua, &g, charge_steps, MEMORY_LIMIT)?;

    let charge = {
        let meter = meter.clone();
        lua.create_function(move |_, cost: f64| meter.charge(if cost > 0.0 { cost as u64 } else { 0 }))?
    };
    // `pairs` and `next` walk a table in `key_order`: Lua's own order follows
    // where each key sits in the table, and that depends on every key the
    // table ever held, removed ones too; a key placed by its address (a table,
    // a function) moves the others, differently on every node.
    let sorted_keys = {
        let meter = meter.clone();
        lua.create_function(move |lua, t: Table| {
            let Some(keys) = ordered_keys::<mlua::Error>(&t, || Ok(()))? else { return Ok(Value::Boolean(false)) };
            let n = keys.len() as u64;
            meter.charge(n + n * (64 - n.leading_zeros() as u64))?;
            let out = lua.create_table_with_capacity(keys.len(), 0)?;
            for (i, k) in keys.iter().enumerate() {
                out.raw_set(i + 1, k.to_lua(lua)?)?;
            }
            Ok(Value::Table(out))
        })?
    };
    let key_after = {
        let meter = meter.clone();
        lua.create_function(move |lua, (t, after): (Table, Value)| {
            let after = match &after {
                Value::Nil => None,
                other => match TableKey::of(other) {
                    Some(key) => Some(key),
                    None => return Ok((false, Value::Nil, Value::Nil)),
                },
            };
            let mut best: Option<TableKey> = None;
            let mut seen = 0u64;
            for pair in t.pairs::<Value, Value>() {
                let (k, _) = pair?;
                seen += 1;
                let Some(k) = TableKey::of(&k) else { return Ok((false, Value::Nil, Value::Nil)) };
                let later = after.as_ref().is_none_or(|a| k.order(a) == std::cmp::Ordering::Greater);
                if later && best.as_ref().is_none_or(|b| k.order(b) == std::cmp::Ordering::Less) {
                    best = Some(k);
                }
            }
            meter.charge(seen)?;
            Ok(match best {
                Some(k) => {
                    let k = k.to_lua(lua)?;
                    let v = t.raw_get::<Value>(&k)?;
                    (true, k, v)
                }
                None => (true, Value::Nil, Value::Nil),
            })
        })?
    };
    lua.load(
        r##"
        local MEMORY_LIMIT, charge, reset_libs, sorted_keys, key_after = ...
        -- Bytecode can break out of any Lua sandbox: text only.
        local text_only = loadstring
        loadstring = function(s, name)
            if type(s) == "string" and string.byte(s, 1) == 27 then
                return nil, "loading binary chunks is not allowed"
            end
            return text_only(s, name)
        end
        string.dump = nil
        -- string.rep of an empty string loops in C, where no instruction is
        -- counted, for as many times as asked: refuse results that could not
        -- fit in the script's memory before starting.
        local rep, type, tostring, tonumber, error = string.rep, type, tostring, tonumber, error
        string.rep = function(s, n)
            rep(s, 0) -- the argument errors of the original
            local count = tonumber(n)
            if count == nil then return rep(s, n) end
            local len = #tostring(s)
            if len == 0 or count < 1 then return "" end
            if len * count > MEMORY_LIMIT then error("not enough memory", 2) end
            charge(len * count / 16)
            return rep(s, count)
        end
        -- The table functions that move elements loop in C over `#t`, which a
        -- sparse table makes huge (t[1], t[2], t[4], ... t[2^29] gives a #t
        -- near 2^29): written in Lua here, so every step is counted.
        local select, floor, sort, rawnext = select, math.floor, table.sort, next
        local function table_arg(t, fname)
            if type(t) ~= "table" then
                error("bad argument #1 to '" .. fname .. "' (table expected, got " .. type(t) .. ")", 3)
            end
        end
        local function int_arg(v, n, fname)
            local i = tonumber(v)
            if i == nil then
                error("bad argument #" .. n .. " to '" .. fname .. "' (number expected, got " .. type(v) .. ")", 3)
            end
            return i >= 0 and floor(i) or -floor(-i)
        end
        table.insert = function(t, ...)
            table_arg(t, "insert")
            local n, e = select("#", ...), #t + 1
            if n == 1 then
                t[e] = ...
                return
            elseif n ~= 2 then
                error("wrong number of arguments to 'insert'", 2)
            end
            local pos, v = ...
            pos = int_arg(pos, 2, "insert")
            if pos > e then e = pos end
            for i = e, pos + 1, -1 do t[i] = t[i - 1] end
            t[pos] = v
        end
        table.remove = function(t, pos)
            table_arg(t, "remove")
            local e = #t
            if e == 0 then return end
            pos = pos == nil and e or int_arg(pos, 2, "remove")
            if pos < 1 or pos > e then return end
            local v = t[pos]
            for i = pos, e - 1 do t[i] = t[i + 1] end
            t[e] = nil
            return v
        end
        table.foreachi = function(t, f)
            table_arg(t, "foreachi")
            for i = 1, #t do
                local r = f(i, t[i])
                if r ~= nil then return r end
            end
        end
        table.sort = function(t, ...)
            table_arg(t, "sort")
            -- More elements than fit in a script's memory: a sparse table.
            if #t > MEMORY_LIMIT / 16 then error("table too large to sort", 2) end
            charge(#t)
            return sort(t, ...)
        end
        -- No order of keys that are tables, functions or coroutines is the
        -- same on every node (it would follow their addresses); a script
        -- that wrote in such an order would leave the replicas different.
        local unordered = "cannot iterate over a table with table, function or coroutine keys: the order would differ from node to node"
        -- Every node walks a table in one order (see `key_order`): booleans,
        -- then numbers, then strings, each ascending.
        local raw_get = rawget
        next = function(t, k)
            if type(t) ~= "table" then return rawnext(t, k) end
            local ok, nk, nv = key_after(t, k)
            if not ok then error(unordered, 2) end
            return nk, nv
        end
        pairs = function(t)
            table_arg(t, "pairs")
            local keys = sorted_keys(t)
            if not keys then error(unordered, 2) end
            local i = 0
            return function()
                while true do
                    i = i + 1
                    local k = keys[i]
                    if k == nil then return nil end
                    local v = raw_get(t, k)
                    if v ~= nil then return k, v end
                end
            end, t, nil
        end
        table.foreach = function(t, f)
            table_arg(t, "foreach")
            for k, v in pairs(t) do
                local r = f(k, v)
                if r ~= nil then return r end
            end
        end
        -- tostring of a table or function shows its address, which differs
        -- from node to node; a script that stored it would make the replicas
        -- differ. Number such values in the order the script first shows them.
        -- cjson.null is the NULL pointer, shown alike everywhere.
        local raw_tostring, metatable_of, setmetatable, rawget, format = tostring, debug.getmetatable, setmetatable, rawget, string.format
        local null = cjson.null
        local weak = { __mode = "k" }
        local ids, last_id = setmetatable({}, weak), 0
        _G.tostring = function(...)
            local v = ...
            local kind = type(v)
            if kind == "table" or kind == "function" or kind == "thread" or kind == "userdata" then
                local mt = metatable_of(v)
                if not (mt and rawget(mt, "__tostring") ~= nil) and v ~= null then
                    local id = ids[v]
                    if id == nil then
                        last_id = last_id + 1
                        id = last_id
                        ids[v] = id
                    end
                    return format("%s: 0x%08x", kind, id)
                end
            end
            return raw_tostring(...)
        end
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
        -- Every run starts from the same seed and numbering.
        return function()
            seed = 0
            ids, last_id = setmetatable({}, weak), 0
            reset_libs()
        end
        "##,
    )
    .set_name("=raftlock")
    .call::<mlua::Function>((MEMORY_LIMIT, charge, reset_libs, sorted_keys, key_after))
}

/// Makes the globals and the libraries read-only, with Redis's messages:
/// `_G` keeps nothing itself and reads through to a hidden table. Every
/// library table, and the metatable strings share, is read-only too: a VM
/// runs many scripts, and none may leave anything for the next. Returns the
/// function that sets a global (`KEYS`, `ARGV`) for a run.
fn protect_globals(lua: &Lua) -> mlua::Result<mlua::Function> {
    lua.load(
        r#"
        local rawnext = ...
        local G, ipairs, rawset, setmetatable, error, tostring = _G, ipairs, rawset, setmetatable, error, tostring
        local backing = {}
        for k, v in rawnext, G do backing[k] = v end
        for k in rawnext, backing do rawset(G, k, nil) end
        local function deny() error("Attempt to modify a readonly table", 2) end
        local readonly = { [G] = true }
        for _, name in ipairs({"string", "table", "math", "redis", "coroutine", "cjson", "cmsgpack", "bit", "struct"}) do
            backing[name] = setmetatable({}, { __index = backing[name], __newindex = deny, __metatable = false })
            readonly[backing[name]] = true
        end
        -- ("x"):upper() looks up the string library through this metatable.
        local string_meta = backing.getmetatable("")
        string_meta.__index = backing.string
        string_meta.__metatable = false
        -- rawset would bypass __newindex. Redis's rawset raises without a
        -- position.
        backing.rawset = function(t, k, v)
            if readonly[t] then error("Attempt to modify a readonly table", 0) end
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
        return function(name, value) backing[name] = value end
        "#,
    )
    .set_name("=raftlock")
    .call::<mlua::Function>(lua.named_registry_value::<mlua::Function>(RAW_NEXT_KEY)?)
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
        Reply::Nil | Reply::NilArray | Reply::Queued { .. } => Value::Boolean(false),
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
        Reply::BigNumber(text) | Reply::DoubleText(text) => Value::String(lua.create_string(text)?),
        Reply::ScorePairs(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (m, v)) in pairs.iter().enumerate() {
                t.raw_set(2 * i + 1, lua.create_string(&m[..])?)?;
                t.raw_set(2 * i + 2, lua.create_string(crate::protocol::format_double(*v))?)?;
            }
            Value::Table(t)
        }
        // As a script sees it in RESP2: `[key, value]` arrays.
        Reply::NestedMap(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len(), 0)?;
            for (i, (k, v)) in pairs.iter().enumerate() {
                let pair = lua.create_table_with_capacity(2, 0)?;
                pair.raw_set(1, reply_to_lua(lua, k)?)?;
                pair.raw_set(2, reply_to_lua(lua, v)?)?;
                t.raw_set(i + 1, pair)?;
            }
            Value::Table(t)
        }
        Reply::Map(pairs) | Reply::Pairs(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (k, v)) in pairs.iter().enumerate() {
                t.raw_set(2 * i + 1, reply_to_lua(lua, k)?)?;
                t.raw_set(2 * i + 2, reply_to_lua(lua, v)?)?;
            }
            Value::Table(t)
        }
    })
}

/// How deep a script's reply may nest. A cyclic table (`a = {b}; b = {a}`)
/// would otherwise recurse until the thread's stack overflows.
const MAX_REPLY_DEPTH: usize = 1000;
/// How many values one script's reply may hold. A table that refers to itself
/// twice (`a = {a, a}`) is small in Lua but exponentially large as a reply.
const MAX_REPLY_VALUES: usize = 4_000_000;
/// How many bytes of strings one script's reply may hold: a table that holds
/// one big string many times is small in Lua, not as a reply.
const MAX_REPLY_BYTES: usize = 4 * MEMORY_LIMIT;

/// Why a script's return value cannot become a reply.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ReplyLimit {
    Depth,
    Size,
}

impl ReplyLimit {
    fn reply(self) -> Reply {
        match self {
            // Redis's text when a reply nests past what its Lua stack holds.
            ReplyLimit::Depth => Reply::error("ERR reached lua stack limit"),
            ReplyLimit::Size => Reply::error(format!(
                "ERR script reply too large (more than {MAX_REPLY_VALUES} values or {MAX_REPLY_BYTES} bytes)"
            )),
        }
    }
}

/// Lua -> RESP, as Redis converts a script's return value, bounded in depth
/// and in size (see [`MAX_REPLY_DEPTH`], [`MAX_REPLY_VALUES`]).
///
/// Each value converted is charged to `meter` as [`REPLY_VALUE_COST`]
/// instructions, after the run: the script has ended, but what it used is
/// taken from the budget its log entry's scripts share (a 60-byte script
/// returning a table that holds itself twice, 30 deep, makes 4 M values in
/// about 2 s, with a handful of instructions).
fn lua_to_reply(lua: &Lua, value: &Value, meter: &Meter) -> Reply {
    let mut size = ReplySize::default();
    let fields = match ReplyFields::new(lua) {
        Ok(fields) => fields,
        Err(e) => return Reply::Error(format!("ERR script engine: {e}")),
    };
    let reply = convert_lua_value(&fields, value, 0, &mut size).unwrap_or_else(ReplyLimit::reply);
    meter.used.set(meter.used.get().saturating_add(size.values as u64 * REPLY_VALUE_COST));
    reply
}

/// Instructions one value of a script's reply costs (about the time Lua
/// takes for four).
const REPLY_VALUE_COST: u64 = 4;

/// The fields a table in a reply is looked up by, made once per reply: a
/// reply may hold millions of tables, and a string made for each lookup
/// cost more than the rest of the conversion.
struct ReplyFields {
    err: mlua::String,
    ok: mlua::String,
    double: mlua::String,
    big_number: mlua::String,
    map: mlua::String,
    set: mlua::String,
}

impl ReplyFields {
    fn new(lua: &Lua) -> mlua::Result<ReplyFields> {
        Ok(ReplyFields {
            err: lua.create_string("err")?,
            ok: lua.create_string("ok")?,
            double: lua.create_string("double")?,
            big_number: lua.create_string("big_number")?,
            map: lua.create_string("map")?,
            set: lua.create_string("set")?,
        })
    }
}

/// What a reply holds so far.
#[derive(Default)]
struct ReplySize {
    values: usize,
    bytes: usize,
}

impl ReplySize {
    fn add(&mut self, bytes: usize) -> Result<(), ReplyLimit> {
        self.values += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        if self.values > MAX_REPLY_VALUES || self.bytes > MAX_REPLY_BYTES {
            return Err(ReplyLimit::Size);
        }
        Ok(())
    }
}

fn convert_lua_value(f: &ReplyFields, value: &Value, depth: usize, size: &mut ReplySize) -> Result<Reply, ReplyLimit> {
    size.add(match value {
        Value::String(s) => s.as_bytes().len(),
        _ => 0,
    })?;
    Ok(match value {
        Value::Nil => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Nil,
        Value::Integer(i) => Reply::Int(*i),
        // Numbers are truncated to integers, as Redis does (`as` saturates;
        // NaN becomes 0).
        Value::Number(n) => Reply::Int(n.trunc() as i64),
        Value::String(s) => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Table(t) => {
            if let Ok(Value::String(e)) = t.raw_get::<Value>(&f.err) {
                let text = String::from_utf8_lossy(&e.as_bytes()).into_owned();
                // An empty error would be a bare `-` line.
                return Ok(Reply::Error(if text.trim().is_empty() { "ERR unknown error".into() } else { text }));
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>(&f.ok) {
                return Ok(Reply::Status(String::from_utf8_lossy(&s.as_bytes()).into_owned()));
            }
            // Redis 7's RESP3 forms, which RESP2 clients get as a bulk
            // string, a flat array and an array.
            match t.raw_get::<Value>(&f.double) {
                Ok(Value::Number(n)) => return Ok(Reply::Double(n)),
                Ok(Value::Integer(i)) => return Ok(Reply::Double(i as f64)),
                _ => {}
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>(&f.big_number) {
                return Ok(Reply::BigNumber(String::from_utf8_lossy(&s.as_bytes()).into_owned()));
            }
            if depth >= MAX_REPLY_DEPTH {
                return Err(ReplyLimit::Depth);
            }
            if let Ok(Value::Table(map)) = t.raw_get::<Value>(&f.map) {
                let (mut pairs, mut by_address) = (Vec::new(), false);
                for pair in map.pairs::<Value, Value>() {
                    let Ok((k, v)) = pair else { break };
                    by_address |= hashed_by_address(&k);
                    pairs.push((convert_lua_value(f, &k, depth + 1, size)?, convert_lua_value(f, &v, depth + 1, size)?));
                }
                return Ok(Reply::Map(in_stable_order(pairs, by_address)));
            }
            if let Ok(Value::Table(set)) = t.raw_get::<Value>(&f.set) {
                let (mut members, mut by_address) = (Vec::new(), false);
                for pair in set.pairs::<Value, Value>() {
                    let Ok((k, _)) = pair else { break };
                    by_address |= hashed_by_address(&k);
                    members.push(convert_lua_value(f, &k, depth + 1, size)?);
                }
                return Ok(Reply::Set(in_stable_order(members, by_address)));
            }
            // An array, cut at the first nil.
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(v) => items.push(convert_lua_value(f, &v, depth + 1, size)?),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    })
}

/// Whether Lua places `key` in a table by its address (a table, function,
/// coroutine or userdata), which differs from node to node, rather than by
/// its value (a string, number or boolean).
fn hashed_by_address(key: &Value) -> bool {
    !matches!(key, Value::String(_) | Value::Number(_) | Value::Integer(_) | Value::Boolean(_))
}

/// A table key, copied out of Lua, in the order every node walks a table's
/// keys in (`pairs`, `next`, `cjson.encode`, `cmsgpack.pack`): booleans
/// (false first), then numbers, then strings (bytewise), each ascending.
/// Lua's own order follows where each key sits in the table, which depends
/// on every key the table ever held: a key placed by its address (a table,
/// a function), even once removed, moves the others, differently on every
/// node. Copied, not held as Lua values: a walk may meet millions of keys,
/// more than mlua can keep references to.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum TableKey {
    Bool(bool),
    Num(f64),
    Str(Vec<u8>),
}

impl TableKey {
    /// `None` for a key placed by its address, which has no such order.
    pub(super) fn of(v: &Value) -> Option<TableKey> {
        match v {
            Value::Boolean(b) => Some(TableKey::Bool(*b)),
            Value::Integer(i) => Some(TableKey::Num(*i as f64)),
            Value::Number(n) => Some(TableKey::Num(*n)),
            Value::String(s) => Some(TableKey::Str(s.as_bytes().to_vec())),
            _ => None,
        }
    }

    pub(super) fn to_lua(&self, lua: &Lua) -> mlua::Result<Value> {
        Ok(match self {
            TableKey::Bool(b) => Value::Boolean(*b),
            TableKey::Num(n) => Value::Number(*n),
            TableKey::Str(s) => Value::String(lua.create_string(s)?),
        })
    }

    fn order(&self, other: &TableKey) -> std::cmp::Ordering {
        use TableKey::*;
        match (self, other) {
            (Bool(a), Bool(b)) => a.cmp(b),
            (Num(a), Num(b)) => a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal),
            (Str(a), Str(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            TableKey::Bool(_) => 0,
            TableKey::Num(_) => 1,
            TableKey::Str(_) => 2,
        }
    }
}

/// `t`'s keys in [`TableKey`] order, with `each` called once per key met;
/// `None` if a key is placed by its address.
pub(super) fn ordered_keys<E: From<mlua::Error>>(
    t: &Table,
    mut each: impl FnMut() -> Result<(), E>,
) -> Result<Option<Vec<TableKey>>, E> {
    let mut keys = Vec::new();
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        each()?;
        match TableKey::of(&k) {
            Some(key) => keys.push(key),
            None => return Ok(None),
        }
    }
    keys.sort_by(|a, b| a.order(b));
    Ok(Some(keys))
}

/// A map's or set's entries in an order every node gives alike: every
/// reply is kept in the replicated state (the client sessions). Lua walks a
/// table in the order of its keys' hashes, which for strings, numbers and
/// booleans is the same on every node (and Redis's: its scripts run the
/// same Lua 5.1), so that order is kept; if any key is placed by its
/// address, the entries are sorted by what they became.
fn in_stable_order<T: std::fmt::Debug>(mut entries: Vec<T>, by_address: bool) -> Vec<T> {
    if by_address {
        entries.sort_by_cached_key(|e| format!("{e:?}"));
    }
    entries
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

mod known;
mod libs;
mod patterns;

#[cfg(test)]
mod tests;
