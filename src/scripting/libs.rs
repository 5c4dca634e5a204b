//! The libraries Redis 7 adds to a script's Lua: `cjson`, `cmsgpack`, `bit`
//! (LuaBitOp) and `struct`, reimplemented in Rust with the results and error
//! texts of Redis 7.0's C versions (`deps/lua/src/lua_*.c`).
//!
//! Redis's C versions recurse without bound on some inputs, build buffers the
//! script's memory limit does not see, and loop in C where no instruction is
//! counted. Here every function pays for what it handles (items and bytes)
//! through the script's [`Charge`], refuses output that would not fit in the
//! script's memory, and nests at most [`MAX_NESTING`] deep in Rust. Where a C
//! version's result depends on undefined behaviour (out of range
//! conversions, shifts), this module does what the x86-64 build does.
//!
//! What differs from Redis, on purpose: nesting past 1000 is refused even if
//! a script raises `cjson.encode_max_depth`/`decode_max_depth` above it;
//! `cjson`'s configuration lasts for one run (Redis keeps it in the VM until
//! `SCRIPT FLUSH`, which would make a node's results depend on the scripts it
//! ran before); and `cjson.encode` of a table with table, function or
//! coroutine keys reports such a key (the order Redis finds them in follows
//! addresses, which differ from node to node).

use std::cell::Cell;
use std::os::raw::c_int;
use std::rc::Rc;

use mlua::{ffi, Function, LightUserData, Lua, MultiValue, Table, Value};

use super::patterns::{arg_error_at, lua_function, lua_function_through, type_name, Args, Charge, Fail};

/// Lua 5.1's `LUAI_MAXCSTACK`: the stack slots a C function may use. Redis's
/// libraries fail past it (with the texts reproduced here), and mlua cannot
/// hold many more values than this at once.
const C_STACK_SLOTS: usize = 8000;
/// Deepest nesting of tables any function here follows or builds: a bound on
/// the Rust stack (and on mlua's references), whatever a script configures.
const MAX_NESTING: usize = 1000;
/// Bytes handled that cost one instruction.
const BYTES_PER_INSTRUCTION: u64 = 16;
/// What one value (a table element, a JSON token, a msgpack item) costs, in
/// bytes.
const ITEM_BYTES: u64 = 64;
/// Bytes of work piled up before they are charged.
const CHUNK_BYTES: u64 = 160_000;

/// Puts `cjson`, `cmsgpack`, `bit` and `struct` into `globals`. Work is paid
/// through `charge`; output longer than what is left of `memory_limit` is
/// refused. Returns the function that puts `cjson`'s configuration back to
/// its defaults (for the next run).
pub(super) fn install(lua: &Lua, globals: &Table, charge: Rc<Charge>, memory_limit: usize) -> mlua::Result<Function> {
    let env = Env { charge, memory_limit };
    let config = Rc::new(Cell::new(JsonConfig::DEFAULT));
    globals.raw_set("cjson", cjson_table(lua, &env, config.clone())?)?;
    globals.raw_set("cmsgpack", cmsgpack_table(lua, &env)?)?;
    globals.raw_set("bit", bit_table(lua, &env)?)?;
    globals.raw_set("struct", struct_table(lua, &env)?)?;
    lua.create_function(move |_, ()| {
        config.set(JsonConfig::DEFAULT);
        Ok(())
    })
}

/// What every function here needs to pay for its work.
#[derive(Clone)]
struct Env {
    charge: Rc<Charge>,
    memory_limit: usize,
}

/// One call's work: charged in chunks, and its output bounded by the memory
/// the script has left.
struct Work<'c> {
    charge: &'c Charge,
    pending_bytes: u64,
    room: usize,
}

impl Work<'_> {
    fn bytes(&mut self, n: usize) -> Result<(), Fail> {
        self.pending_bytes += n as u64;
        if self.pending_bytes >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn item(&mut self) -> Result<(), Fail> {
        self.bytes(ITEM_BYTES as usize)
    }

    fn flush(&mut self) -> Result<(), Fail> {
        let units = self.pending_bytes / BYTES_PER_INSTRUCTION;
        self.pending_bytes %= BYTES_PER_INSTRUCTION;
        if units > 0 {
            (self.charge)(units).map_err(Fail::Host)?;
        }
        Ok(())
    }

    /// Appends to an output, which must fit in the script's memory.
    fn write(&mut self, out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Fail> {
        if out.len() + bytes.len() > self.room {
            return Err(Fail::Message("not enough memory".into()));
        }
        self.bytes(bytes.len())?;
        out.extend_from_slice(bytes);
        Ok(())
    }
}

/// A Lua function running `body`, paying its work; errors as Lua raises them.
fn function<F>(lua: &Lua, env: &Env, body: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, &Args, &mut Work) -> Result<MultiValue, Fail> + 'static,
{
    let env = env.clone();
    lua_function(lua, move |lua, args| run(lua, &env, args, &body))
}

/// A Lua function whose `body` returns its results in a table (values and
/// count), spread onto the stack by [`spread`]: so any number of results,
/// nils among them, reach Lua without mlua holding one reference per value.
fn spreading_function<F>(lua: &Lua, env: &Env, body: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, &Args, &mut Work) -> Result<(Table, usize), Fail> + 'static,
{
    let env = env.clone();
    let body = move |lua: &Lua, args: &Args, work: &mut Work| {
        let (results, n) = body(lua, args, work)?;
        Ok(MultiValue::from_vec(vec![Value::Table(results), Value::Integer(n as i64)]))
    };
    lua_function_through(lua, move |lua, args| run(lua, &env, args, &body), spread)
}

fn run<F>(lua: &Lua, env: &Env, args: MultiValue, body: &F) -> Result<MultiValue, Fail>
where
    F: Fn(&Lua, &Args, &mut Work) -> Result<MultiValue, Fail>,
{
    let args = Args::new(lua, args);
    let room = env.memory_limit.saturating_sub(lua.used_memory());
    let mut work = Work { charge: &*env.charge, pending_bytes: 0, room };
    let result = body(lua, &args, &mut work);
    let paid = work.flush();
    let values = result?;
    paid?;
    Ok(values)
}

/// The trampoline of [`spreading_function`]: calls upvalue 1, which returns
/// `true, results, n` or `false, error`, and returns `results[1..n]`.
unsafe extern "C-unwind" fn spread(state: *mut ffi::lua_State) -> c_int {
    let nargs = ffi::lua_gettop(state);
    ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
    ffi::lua_insert(state, 1);
    ffi::lua_call(state, nargs, 3);
    if ffi::lua_toboolean(state, 1) == 0 {
        ffi::lua_settop(state, 2);
        ffi::lua_error(state);
    }
    let n = ffi::lua_tointeger(state, 3) as c_int;
    ffi::lua_settop(state, 2);
    ffi::lua_remove(state, 1);
    // The bodies stop short of C_STACK_SLOTS results, as Redis does.
    if ffi::lua_checkstack(state, n) == 0 {
        ffi::lua_pushstring(state, c"stack overflow (too many results)".as_ptr());
        ffi::lua_error(state);
    }
    for i in 1..=n {
        ffi::lua_rawgeti(state, 1, i as _);
    }
    n
}

/// A result table of [`spreading_function`], checked against Redis's stack
/// limit as values are added.
struct Results {
    table: Table,
    n: usize,
}

impl Results {
    fn new(lua: &Lua) -> mlua::Result<Results> {
        Ok(Results { table: lua.create_table()?, n: 0 })
    }

    fn push(&mut self, value: Value) -> Result<(), Fail> {
        self.n += 1;
        self.table.raw_set(self.n, value)?;
        Ok(())
    }

    fn pop(&mut self) -> Result<(), Fail> {
        self.table.raw_set(self.n, Value::Nil)?;
        self.n -= 1;
        Ok(())
    }

    fn last(&self) -> Result<Value, Fail> {
        Ok(self.table.raw_get(self.n)?)
    }

    fn done(self) -> (Table, usize) {
        (self.table, self.n)
    }
}

/// `luaL_checkstack`'s failure, as Redis's libraries word it.
fn stack_overflow(what: &str) -> Fail {
    Fail::Message(format!("stack overflow ({what})"))
}

fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// A C cast of a double to a 32-bit `int` on x86-64: out of range and NaN
/// give the minimum.
fn double_to_c_int(n: f64) -> i32 {
    if n > -2_147_483_649.0 && n < 2_147_483_648.0 {
        n as i32
    } else {
        i32::MIN
    }
}

/// A C cast of a double to an unsigned 64-bit integer, as GCC compiles it for
/// x86-64: below 2^63 a signed conversion, above it one of `n - 2^63` with
/// the top bit flipped (so NaN is 2^63 and 2^64 and beyond are 0).
fn double_to_c_ulong(n: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if n >= TWO_63 {
        (super::patterns::number_to_integer(n - TWO_63) as u64) ^ (1 << 63)
    } else {
        super::patterns::number_to_integer(n) as u64
    }
}

fn lua_null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

// ---------------------------------------------------------------------------
// bit: LuaBitOp 1.0.
// ---------------------------------------------------------------------------

fn bit_table(lua: &Lua, env: &Env) -> mlua::Result<Table> {
    let bit = lua.create_table()?;
    type Op = fn(u32, u32) -> u32;
    let unary: [(&str, fn(u32) -> u32); 3] =
        [("tobit", |b| b), ("bnot", |b| !b), ("bswap", u32::swap_bytes)];
    for (name, op) in unary {
        bit.raw_set(name, function(lua, env, move |_, args, _| Ok(bits(op(bit_arg(args, 1)?))))?)?;
    }
    let folds: [(&str, Op); 3] = [("band", |a, b| a & b), ("bor", |a, b| a | b), ("bxor", |a, b| a ^ b)];
    for (name, op) in folds {
        bit.raw_set(
            name,
            function(lua, env, move |_, args, work| {
                let mut b = bit_arg(args, 1)?;
                // LuaBitOp reads the arguments from the last.
                for i in (2..=args.count()).rev() {
                    work.item()?;
                    b = op(b, bit_arg(args, i)?);
                }
                Ok(bits(b))
            })?,
        )?;
    }
    let shifts: [(&str, Op); 5] = [
        ("lshift", |b, n| b << n),
        ("rshift", |b, n| b >> n),
        ("arshift", |b, n| ((b as i32) >> n) as u32),
        ("rol", u32::rotate_left),
        ("ror", u32::rotate_right),
    ];
    for (name, op) in shifts {
        bit.raw_set(
            name,
            function(lua, env, move |_, args, _| {
                let b = bit_arg(args, 1)?;
                let n = bit_arg(args, 2)? & 31;
                Ok(bits(op(b, n)))
            })?,
        )?;
    }
    bit.raw_set(
        "tohex",
        function(lua, env, |lua, args, _| {
            let mut b = bit_arg(args, 1)?;
            let mut n = if args.get(2).is_none() { 8 } else { bit_arg(args, 2)? as i32 };
            let mut digits = b"0123456789abcdef";
            n = n.max(i32::MIN + 1);
            if n < 0 {
                n = -n;
                digits = b"0123456789ABCDEF";
            }
            let n = n.min(8) as usize;
            let mut buf = [0u8; 8];
            for i in (0..n).rev() {
                buf[i] = digits[(b & 15) as usize];
                b >>= 4;
            }
            Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(&buf[..n])?)]))
        })?,
    )?;
    Ok(bit)
}

/// LuaBitOp's `barg`: the low 32 bits of the number rounded to an integer,
/// by way of the 2^52 + 2^51 trick (so out of range numbers wrap as they do
/// in Redis).
fn bit_arg(args: &Args, n: usize) -> Result<u32, Fail> {
    let number = args.to_number(n)?;
    let b = (number.unwrap_or(0.0) + 6_755_399_441_055_744.0).to_bits() as u32;
    if b == 0 && number.is_none() {
        return Err(args.type_error(n, "number"));
    }
    Ok(b)
}

fn bits(b: u32) -> MultiValue {
    MultiValue::from_vec(vec![Value::Number(b as i32 as f64)])
}

// ---------------------------------------------------------------------------
// struct: Roberto Ierusalimschy's struct library, as Redis builds it
// (`long` integers, native little-endian x86-64 layout).
// ---------------------------------------------------------------------------

fn struct_table(lua: &Lua, env: &Env) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", function(lua, env, struct_pack)?)?;
    t.raw_set("unpack", spreading_function(lua, env, struct_unpack)?)?;
    t.raw_set("size", function(lua, env, struct_size)?)?;
    Ok(t)
}

/// The largest `i`/`I` size (`MAXINTSIZE`).
const MAX_INT_SIZE: usize = 32;
/// The default and largest alignment `!` takes (`MAXALIGN`).
const MAX_ALIGN: usize = 8;

/// A format being read, and the options it has set.
struct Format {
    fmt: Vec<u8>,
    at: usize,
    little: bool,
    align: usize,
}

impl Format {
    /// The format as C reads it: up to the first NUL.
    fn new(fmt: &[u8]) -> Format {
        let end = fmt.iter().position(|&b| b == 0).unwrap_or(fmt.len());
        Format { fmt: fmt[..end].to_vec(), at: 0, little: true, align: 1 }
    }

    fn next(&mut self) -> Option<u8> {
        let c = *self.fmt.get(self.at)?;
        self.at += 1;
        Some(c)
    }

    fn number(&mut self, default: usize) -> Result<usize, Fail> {
        if !self.fmt.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut a: i32 = 0;
        while let Some(&d) = self.fmt.get(self.at).filter(|d| d.is_ascii_digit()) {
            let d = (d - b'0') as i32;
            if a > i32::MAX / 10 || a * 10 > i32::MAX - d {
                return Err(Fail::Message("integral size overflow".into()));
            }
            a = a * 10 + d;
            self.at += 1;
        }
        Ok(a as usize)
    }

    /// `optsize`: the size of option `opt`, reading its count.
    fn size(&mut self, opt: u8) -> Result<usize, Fail> {
        Ok(match opt {
            b'B' | b'b' | b'x' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size > MAX_INT_SIZE {
                    return Err(Fail::Message(format!(
                        "integral size {size} is larger than limit of {MAX_INT_SIZE}"
                    )));
                }
                size
            }
            _ => 0,
        })
    }

    /// `gettoalign`: padding before an item of `size` at offset `len`.
    fn padding(&self, len: usize, opt: u8, size: usize) -> usize {
        if size == 0 || opt == b'c' {
            return 0;
        }
        let size = size.min(self.align);
        (size.wrapping_sub(len & (size - 1))) & (size - 1)
    }

    /// `controloptions`: endianness, alignment, spaces; anything else is an
    /// error.
    fn control(&mut self, lua: &Lua, opt: u8) -> Result<(), Fail> {
        match opt {
            b' ' => {}
            b'>' => self.little = false,
            b'<' => self.little = true,
            b'!' => {
                let a = self.number(MAX_ALIGN)?;
                if !a.is_power_of_two() {
                    return Err(Fail::Message(format!("alignment {a} is not a power of 2")));
                }
                self.align = a;
            }
            _ => {
                let opt = String::from_utf8_lossy(&[opt]).into_owned();
                return Err(arg_error_at(lua, 1, &format!("invalid format option '{opt}'")));
            }
        }
        Ok(())
    }

    /// Native (little-endian) bytes in this format's order.
    fn ordered<const N: usize>(&self, mut bytes: [u8; N]) -> [u8; N] {
        if !self.little {
            bytes.reverse();
        }
        bytes
    }
}

fn struct_pack(lua: &Lua, args: &Args, work: &mut Work) -> Result<MultiValue, Fail> {
    let mut f = Format::new(&args.check_string(1)?.as_bytes());
    // C's version then pushes a nil after the arguments: a missing one is nil.
    let args = &args.and_nil();
    let mut arg = 2;
    let mut total = 0usize;
    let mut out = Vec::new();
    while let Some(opt) = f.next() {
        work.item()?;
        let mut size = f.size(opt)?;
        let pad = f.padding(total, opt, size);
        total += pad;
        work.write(&mut out, &[0u8; MAX_ALIGN][..pad])?;
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = args.check_number(arg)?;
                arg += 1;
                let mut value = if n < 0.0 { super::patterns::number_to_integer(n) as u64 } else { double_to_c_ulong(n) };
                let mut buf = [0u8; MAX_INT_SIZE];
                for i in 0..size {
                    let at = if f.little { i } else { size - 1 - i };
                    buf[at] = value as u8;
                    value >>= 8;
                }
                work.write(&mut out, &buf[..size])?;
            }
            b'x' => work.write(&mut out, &[0])?,
            b'f' => {
                let v = args.check_number(arg)? as f32;
                arg += 1;
                work.write(&mut out, &f.ordered(v.to_le_bytes()))?;
            }
            b'd' => {
                let v = args.check_number(arg)?;
                arg += 1;
                work.write(&mut out, &f.ordered(v.to_le_bytes()))?;
            }
            b'c' | b's' => {
                let s = args.check_string(arg)?;
                arg += 1;
                let s = s.as_bytes();
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // As in C: the argument after the string is named.
                    return Err(arg_error_at(lua, arg as i64, "string too short"));
                }
                work.write(&mut out, &s[..size])?;
                if opt == b's' {
                    work.write(&mut out, &[0])?;
                    size += 1;
                }
            }
            _ => f.control(lua, opt)?,
        }
        total += size;
    }
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(&out)?)]))
}

/// `getinteger`: `size` bytes as an unsigned or sign-extended `long`, with
/// the shifts x86-64 makes of sizes past 8.
fn struct_integer(bytes: &[u8], little: bool, signed: bool) -> f64 {
    let mut l = 0u64;
    let mut take = |b: &u8| l = (l << 8) | *b as u64;
    if little {
        bytes.iter().rev().for_each(&mut take);
    } else {
        bytes.iter().for_each(&mut take);
    }
    if !signed {
        return l as f64;
    }
    let mask = (!0u64).wrapping_shl((bytes.len() as i32 * 8 - 1) as u32);
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

fn struct_unpack(lua: &Lua, args: &Args, work: &mut Work) -> Result<(Table, usize), Fail> {
    let mut f = Format::new(&args.check_string(1)?.as_bytes());
    let data = args.check_string(2)?;
    let data = data.as_bytes();
    let ld = data.len();
    // `size_t pos = luaL_optinteger(...)`: negative offsets wrap.
    let mut pos = args.opt_integer(3)?.unwrap_or(1) as u64 as usize;
    if pos == 0 {
        return Err(arg_error_at(lua, 3, "offset must be 1 or greater"));
    }
    pos -= 1;
    let slots = args.count();
    let mut results = Results::new(lua)?;
    let too_short = || arg_error_at(lua, 2, "data string too short");
    while let Some(opt) = f.next() {
        work.item()?;
        let mut size = f.size(opt)?;
        pos = pos.wrapping_add(f.padding(pos, opt, size));
        if size > ld || pos > ld - size {
            return Err(too_short());
        }
        if slots + results.n + 2 > C_STACK_SLOTS {
            return Err(stack_overflow("too many results"));
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = struct_integer(&data[pos..pos + size], f.little, opt.is_ascii_lowercase());
                results.push(Value::Number(n))?;
            }
            b'x' => {}
            b'f' => {
                let bytes: [u8; 4] = data[pos..pos + 4].try_into().expect("4 bytes");
                results.push(Value::Number(f32::from_le_bytes(f.ordered(bytes)) as f64))?;
            }
            b'd' => {
                let bytes: [u8; 8] = data[pos..pos + 8].try_into().expect("8 bytes");
                results.push(Value::Number(f64::from_le_bytes(f.ordered(bytes))))?;
            }
            b'c' => {
                if size == 0 {
                    let previous = if results.n == 0 { None } else { lua.coerce_number(results.last()?)? };
                    let Some(previous) = previous else {
                        return Err(Fail::Message("format 'c0' needs a previous size".into()));
                    };
                    size = double_to_c_ulong(previous) as usize;
                    results.pop()?;
                    if size > ld || pos > ld - size {
                        return Err(too_short());
                    }
                }
                work.bytes(size)?;
                results.push(Value::String(lua.create_string(&data[pos..pos + size])?))?;
            }
            b's' => {
                let Some(len) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err(Fail::Message("unfinished string in data".into()));
                };
                work.bytes(len)?;
                size = len + 1;
                results.push(Value::String(lua.create_string(&data[pos..pos + len])?))?;
            }
            _ => f.control(lua, opt)?,
        }
        pos = pos.wrapping_add(size);
    }
    results.push(Value::Number(pos.wrapping_add(1) as i64 as f64))?;
    Ok(results.done())
}

fn struct_size(lua: &Lua, args: &Args, work: &mut Work) -> Result<MultiValue, Fail> {
    let mut f = Format::new(&args.check_string(1)?.as_bytes());
    let mut pos = 0usize;
    while let Some(opt) = f.next() {
        work.item()?;
        let size = f.size(opt)?;
        pos += f.padding(pos, opt, size);
        if opt == b's' {
            return Err(arg_error_at(lua, 1, "option 's' has no fixed size"));
        } else if opt == b'c' && size == 0 {
            return Err(arg_error_at(lua, 1, "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            f.control(lua, opt)?;
        }
        pos += size;
    }
    Ok(MultiValue::from_vec(vec![Value::Integer(pos as i64)]))
}

// ---------------------------------------------------------------------------
// cmsgpack: lua-cmsgpack 0.4.0.
// ---------------------------------------------------------------------------

fn cmsgpack_table(lua: &Lua, env: &Env) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", function(lua, env, msgpack_pack)?)?;
    t.raw_set("unpack", spreading_function(lua, env, |lua, args, work| msgpack_unpack(lua, args, work, 0, 0, args.count()))?)?;
    t.raw_set(
        "unpack_one",
        spreading_function(lua, env, |lua, args, work| {
            let offset = args.opt_integer(2)?.unwrap_or(0);
            msgpack_unpack(lua, args, work, 1, offset, 1)
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        spreading_function(lua, env, |lua, args, work| {
            let limit = args.check_integer(2)?;
            let offset = args.opt_integer(3)?.unwrap_or(0);
            msgpack_unpack(lua, args, work, limit, offset, 1)
        })?,
    )?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

/// What Redis says when its stack runs out while unpacking.
const TOO_MANY_VALUES: &str = "too many return values at once; use unpack_one or unpack_limit instead.";

/// Tables nested deeper than this are packed as nil (`LUACMSGPACK_MAX_NESTING`).
const MSGPACK_MAX_NESTING: usize = 16;

fn msgpack_pack(lua: &Lua, args: &Args, work: &mut Work) -> Result<MultiValue, Fail> {
    let n = args.count();
    if n == 0 {
        return Err(arg_error_at(lua, 0, "MessagePack pack needs input."));
    }
    if 2 * n > C_STACK_SLOTS {
        return Err(arg_error_at(lua, 0, "Too many arguments for MessagePack pack."));
    }
    let mut out = Vec::new();
    for i in 1..=n {
        let value = args.get(i).cloned().unwrap_or(Value::Nil);
        msgpack_encode(lua, &value, 0, &mut out, work)?;
    }
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(&out)?)]))
}

fn msgpack_encode(lua: &Lua, value: &Value, level: usize, out: &mut Vec<u8>, work: &mut Work) -> Result<(), Fail> {
    work.item()?;
    match value {
        Value::Table(t) if level < MSGPACK_MAX_NESTING => {
            if msgpack_is_array(t, work)? {
                let len = t.raw_len();
                msgpack_header(out, work, len as u64, 0x90, 0xdc)?;
                for j in 1..=len {
                    msgpack_encode(lua, &t.raw_get::<Value>(j)?, level + 1, out, work)?;
                }
            } else {
                let Some(keys) = ordered_keys(t, work)? else {
                    return Err(Fail::Message(
                        "cannot pack a table with table, function or coroutine keys: the order would differ from node to node".into(),
                    ));
                };
                msgpack_header(out, work, keys.len() as u64, 0x80, 0xde)?;
                for key in &keys {
                    let k = key.to_lua(lua)?;
                    let v = t.raw_get::<Value>(&k)?;
                    msgpack_encode(lua, &k, level + 1, out, work)?;
                    msgpack_encode(lua, &v, level + 1, out, work)?;
                }
            }
            Ok(())
        }
        Value::String(s) => {
            let s = s.as_bytes();
            let len = s.len();
            if len < 32 {
                work.write(out, &[0xa0 | len as u8])?;
            } else if len <= 0xff {
                work.write(out, &[0xd9, len as u8])?;
            } else if len <= 0xffff {
                work.write(out, &[0xda, (len >> 8) as u8, len as u8])?;
            } else {
                work.write(out, &[0xdb])?;
                work.write(out, &(len as u32).to_be_bytes())?;
            }
            work.write(out, &s)
        }
        Value::Boolean(b) => work.write(out, &[if *b { 0xc3 } else { 0xc2 }]),
        Value::Integer(_) | Value::Number(_) => {
            let n = number_of(value).unwrap_or(0.0);
            let i = super::patterns::number_to_integer(n);
            if !n.is_infinite() && i as f64 == n {
                msgpack_int(out, work, i)
            } else if n == n as f32 as f64 {
                work.write(out, &[0xca])?;
                work.write(out, &(n as f32).to_be_bytes())
            } else {
                work.write(out, &[0xcb])?;
                work.write(out, &n.to_be_bytes())
            }
        }
        _ => work.write(out, &[0xc0]),
    }
}

/// `table_is_an_array`: only positive integer keys (in `int`'s range), as
/// many as the largest.
fn msgpack_is_array(t: &Table, work: &mut Work) -> Result<bool, Fail> {
    let (mut count, mut max) = (0i64, 0i64);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        work.item()?;
        let Some(n) = number_of(&k) else { return Ok(false) };
        if n <= 0.0 || n.is_infinite() || double_to_c_int(n) as f64 != n {
            return Ok(false);
        }
        max = max.max(n as i64);
        count += 1;
    }
    Ok(max == count)
}

/// An array or map header: `fix` for up to 15 elements, `wide` (16 bits)
/// and `wide + 1` (32 bits) beyond.
fn msgpack_header(out: &mut Vec<u8>, work: &mut Work, n: u64, fix: u8, wide: u8) -> Result<(), Fail> {
    if n <= 15 {
        work.write(out, &[fix | n as u8])
    } else if n <= 0xffff {
        work.write(out, &[wide, (n >> 8) as u8, n as u8])
    } else {
        work.write(out, &[wide + 1])?;
        work.write(out, &(n as u32).to_be_bytes())
    }
}

fn msgpack_int(out: &mut Vec<u8>, work: &mut Work, n: i64) -> Result<(), Fail> {
    let mut b = Vec::with_capacity(9);
    if n >= 0 {
        match n {
            0..=127 => b.push(n as u8),
            128..=0xff => b.extend([0xcc, n as u8]),
            0x100..=0xffff => b.extend([0xcd, (n >> 8) as u8, n as u8]),
            0x1_0000..=0xffff_ffff => {
                b.push(0xce);
                b.extend((n as u32).to_be_bytes());
            }
            _ => {
                b.push(0xcf);
                b.extend(n.to_be_bytes());
            }
        }
    } else {
        match n {
            -32..=-1 => b.push(n as u8),
            -128..=-33 => b.extend([0xd0, n as u8]),
            -32768..=-129 => b.extend([0xd1, (n >> 8) as u8, n as u8]),
            -2_147_483_648..=-32769 => {
                b.push(0xd2);
                b.extend((n as i32).to_be_bytes());
            }
            _ => {
                b.push(0xd3);
                b.extend(n.to_be_bytes());
            }
        }
    }
    work.write(out, &b)
}

/// Why decoding stopped.
enum Undecodable {
    /// "Missing bytes in input."
    Eof,
    /// "Bad data format in input."
    BadFormat,
    Fail(Fail),
}

impl From<Fail> for Undecodable {
    fn from(e: Fail) -> Self {
        Undecodable::Fail(e)
    }
}

impl From<mlua::Error> for Undecodable {
    fn from(e: mlua::Error) -> Self {
        Undecodable::Fail(Fail::Host(e))
    }
}

/// `mp_unpack_full`: decodes up to `limit` values (all if `limit` and
/// `offset` are 0) from `offset`; when not decoding all, the next offset (or
/// -1 at the end) comes first. `slots` is the stack Redis's version holds
/// before the first value, for its stack limit.
fn msgpack_unpack(
    lua: &Lua,
    args: &Args,
    work: &mut Work,
    limit: i64,
    offset: i64,
    slots: usize,
) -> Result<(Table, usize), Fail> {
    let s = args.check_string(1)?;
    let s = s.as_bytes();
    let len = s.len();
    let all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        return Err(Fail::Message(format!(
            "Invalid request to unpack with offset of {} and limit of {}.",
            offset as i32, len as i32
        )));
    } else if offset as u64 > len as u64 {
        return Err(Fail::Message(format!("Start offset {} greater than input length {}.", offset as i32, len as i32)));
    }
    let limit = if all { i32::MAX as i64 } else { limit };
    let mut decoder = Decoder { lua, data: &s, at: offset as usize, work, depth: 0 };
    let mut values = Results::new(lua)?;
    if !all {
        values.push(Value::Nil)?; // the next offset, once known
    }
    let mut count = 0i64;
    while decoder.at < len && count < limit {
        match decoder.value(slots + count as usize) {
            Ok(v) => values.push(v)?,
            Err(Undecodable::Eof) => return Err(Fail::Message("Missing bytes in input.".into())),
            Err(Undecodable::BadFormat) => return Err(Fail::Message("Bad data format in input.".into())),
            Err(Undecodable::Fail(e)) => return Err(e),
        }
        count += 1;
    }
    if !all {
        if slots + count as usize + 1 > C_STACK_SLOTS {
            return Err(stack_overflow("in function mp_unpack_full"));
        }
        let next = if decoder.at == len { -1 } else { decoder.at as i64 };
        values.table.raw_set(1, next)?;
    }
    Ok(values.done())
}

struct Decoder<'a, 'w, 'c> {
    lua: &'a Lua,
    data: &'a [u8],
    at: usize,
    work: &'w mut Work<'c>,
    depth: usize,
}

impl<'a> Decoder<'a, '_, '_> {
    /// The next `n` bytes, consumed.
    fn take(&mut self, n: usize) -> Result<&'a [u8], Undecodable> {
        if self.data.len() - self.at < n {
            return Err(Undecodable::Eof);
        }
        let bytes = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(bytes)
    }

    fn be(&mut self, n: usize) -> Result<u64, Undecodable> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }

    fn string(&mut self, len: usize) -> Result<Value, Undecodable> {
        let bytes = self.take(len)?;
        self.work.bytes(len)?;
        Ok(Value::String(self.lua.create_string(bytes)?))
    }

    /// One value, with `slots` of Redis's stack in use before it.
    fn value(&mut self, slots: usize) -> Result<Value, Undecodable> {
        self.work.item()?;
        let Some(&first) = self.data.get(self.at) else { return Err(Undecodable::Eof) };
        if slots + 1 > C_STACK_SLOTS {
            return Err(stack_overflow(TOO_MANY_VALUES).into());
        }
        self.at += 1;
        let number = |n: f64| Ok(Value::Number(n));
        match first {
            0xcc => number(self.be(1)? as f64),
            0xd0 => number(self.be(1)? as u8 as i8 as f64),
            0xcd => number(self.be(2)? as f64),
            0xd1 => number(self.be(2)? as u16 as i16 as f64),
            0xce => number(self.be(4)? as f64),
            0xd2 => number(self.be(4)? as u32 as i32 as f64),
            // Pushed as a signed integer, as Redis does.
            0xcf | 0xd3 => number(self.be(8)? as i64 as f64),
            0xc0 => Ok(Value::Nil),
            0xc3 => Ok(Value::Boolean(true)),
            0xc2 => Ok(Value::Boolean(false)),
            0xca => number(f32::from_bits(self.be(4)? as u32) as f64),
            0xcb => number(f64::from_bits(self.be(8)?)),
            0xd9 => {
                let len = self.be(1)? as usize;
                self.string(len)
            }
            0xda => {
                let len = self.be(2)? as usize;
                self.string(len)
            }
            0xdb => {
                let len = self.be(4)? as usize;
                self.string(len)
            }
            0xdc => {
                let len = self.be(2)?;
                self.array(len, slots)
            }
            0xdd => {
                let len = self.be(4)?;
                self.array(len, slots)
            }
            0xde => {
                let len = self.be(2)?;
                self.map(len, slots)
            }
            0xdf => {
                let len = self.be(4)?;
                self.map(len, slots)
            }
            b if b & 0x80 == 0 => number(b as f64),
            b if b & 0xe0 == 0xe0 => number(b as i8 as f64),
            b if b & 0xe0 == 0xa0 => self.string((b & 0x1f) as usize),
            b if b & 0xf0 == 0x90 => self.array((b & 0xf) as u64, slots),
            b if b & 0xf0 == 0x80 => self.map((b & 0xf) as u64, slots),
            _ => Err(Undecodable::BadFormat),
        }
    }

    /// Redis's stack holds the table and, per element, its index.
    fn array(&mut self, len: u64, slots: usize) -> Result<Value, Undecodable> {
        let table = self.nested("in function mp_decode_to_lua_array")?;
        if slots + 2 > C_STACK_SLOTS {
            return Err(stack_overflow("in function mp_decode_to_lua_array").into());
        }
        for i in 1..=len {
            let v = self.value(slots + 2)?;
            table.raw_set(i, v)?;
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }

    /// Redis's stack holds the table and, per element, its key.
    fn map(&mut self, len: u64, slots: usize) -> Result<Value, Undecodable> {
        let table = self.nested(TOO_MANY_VALUES)?;
        for _ in 0..len {
            let k = self.value(slots + 1)?;
            let v = self.value(slots + 2)?;
            match &k {
                Value::Nil => return Err(Fail::Raise(Value::String(self.lua.create_string("table index is nil")?)).into()),
                Value::Number(n) if n.is_nan() => {
                    return Err(Fail::Raise(Value::String(self.lua.create_string("table index is NaN")?)).into())
                }
                _ => table.raw_set(k, v)?,
            }
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }

    /// A new table one level deeper. Redis's limit is its stack (about
    /// 4000 levels); past [`MAX_NESTING`], the error Redis gives when that
    /// runs out under an array or a map (`what`).
    fn nested(&mut self, what: &str) -> Result<Table, Undecodable> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(stack_overflow(what).into());
        }
        Ok(self.lua.create_table()?)
    }
}

// ---------------------------------------------------------------------------
// cjson: lua-cjson 2.1.0.
// ---------------------------------------------------------------------------

/// `json_config_t`, with lua-cjson's defaults.
#[derive(Debug, Clone, Copy)]
struct JsonConfig {
    sparse_convert: bool,
    sparse_ratio: i32,
    sparse_safe: i32,
    encode_max_depth: i32,
    decode_max_depth: i32,
    /// 0: refuse NaN and infinities; 1: write them; 2: write null.
    encode_invalid_numbers: u8,
    decode_invalid_numbers: bool,
    keep_buffer: bool,
    precision: i32,
}

impl JsonConfig {
    const DEFAULT: JsonConfig = JsonConfig {
        sparse_convert: false,
        sparse_ratio: 2,
        sparse_safe: 10,
        encode_max_depth: 1000,
        decode_max_depth: 1000,
        encode_invalid_numbers: 0,
        decode_invalid_numbers: true,
        keep_buffer: true,
        precision: 14,
    };
}

type Config = Rc<Cell<JsonConfig>>;

fn cjson_table(lua: &Lua, env: &Env, config: Config) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let c = config.clone();
    t.raw_set(
        "encode",
        function(lua, env, move |lua, args, work| {
            if args.count() != 1 {
                return Err(arg_error_at(lua, 1, "expected 1 argument"));
            }
            let mut encoder = Encoder { lua, config: c.get(), work, out: Vec::new() };
            encoder.value(args.get(1).unwrap_or(&Value::Nil), 0)?;
            Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(&encoder.out)?)]))
        })?,
    )?;
    let c = config.clone();
    t.raw_set(
        "decode",
        function(lua, env, move |lua, args, work| {
            if args.count() != 1 {
                return Err(arg_error_at(lua, 1, "expected 1 argument"));
            }
            let json = args.check_string(1)?;
            let json = json.as_bytes();
            if json.len() >= 2 && (json[0] == 0 || json[1] == 0) {
                return Err(Fail::Message("JSON parser does not support UTF-16 or UTF-32".into()));
            }
            let mut parser = Parser { lua, config: c.get(), data: &json, at: 0, depth: 0, text: Vec::new(), work };
            let value = parser.document()?;
            Ok(MultiValue::from_vec(vec![value]))
        })?,
    )?;
    let c = config.clone();
    t.raw_set(
        "encode_sparse_array",
        config_function(lua, env, 3, move |lua, args| {
            let mut cfg = c.get();
            let mut setting = cfg.sparse_convert as u8;
            let convert = enum_option(lua, args, 1, &mut setting, &["off", "on"], 1)?;
            cfg.sparse_convert = setting != 0;
            let ratio = integer_option(lua, args, 2, &mut cfg.sparse_ratio, 0, i32::MAX)?;
            let safe = integer_option(lua, args, 3, &mut cfg.sparse_safe, 0, i32::MAX)?;
            c.set(cfg);
            Ok(vec![convert, ratio, safe])
        })?,
    )?;
    type Field = fn(&mut JsonConfig) -> &mut i32;
    let integers: [(&str, Field, i32, i32); 3] = [
        ("encode_max_depth", |c| &mut c.encode_max_depth, 1, i32::MAX),
        ("decode_max_depth", |c| &mut c.decode_max_depth, 1, i32::MAX),
        ("encode_number_precision", |c| &mut c.precision, 1, 14),
    ];
    for (name, field, min, max) in integers {
        let c = config.clone();
        t.raw_set(
            name,
            config_function(lua, env, 1, move |lua, args| {
                let mut cfg = c.get();
                let v = integer_option(lua, args, 1, field(&mut cfg), min, max)?;
                c.set(cfg);
                Ok(vec![v])
            })?,
        )?;
    }
    type Flag = fn(&mut JsonConfig) -> &mut bool;
    let flags: [(&str, Flag); 2] =
        [("encode_keep_buffer", |c| &mut c.keep_buffer), ("decode_invalid_numbers", |c| &mut c.decode_invalid_numbers)];
    for (name, field) in flags {
        let c = config.clone();
        t.raw_set(
            name,
            config_function(lua, env, 1, move |lua, args| {
                let mut cfg = c.get();
                let mut setting = *field(&mut cfg) as u8;
                let v = enum_option(lua, args, 1, &mut setting, &["off", "on"], 1)?;
                *field(&mut cfg) = setting != 0;
                c.set(cfg);
                Ok(vec![v])
            })?,
        )?;
    }
    let c = config;
    t.raw_set(
        "encode_invalid_numbers",
        config_function(lua, env, 1, move |lua, args| {
            let mut cfg = c.get();
            let v = enum_option(lua, args, 1, &mut cfg.encode_invalid_numbers, &["off", "on", "null"], 1)?;
            c.set(cfg);
            Ok(vec![v])
        })?,
    )?;
    let new_env = env.clone();
    t.raw_set(
        "new",
        function(lua, env, move |lua, _, _| {
            let fresh = cjson_table(lua, &new_env, Rc::new(Cell::new(JsonConfig::DEFAULT)))?;
            Ok(MultiValue::from_vec(vec![Value::Table(fresh)]))
        })?,
    )?;
    t.raw_set("null", lua_null())?;
    t.raw_set("_NAME", "cjson")?;
    t.raw_set("_VERSION", "2.1.0")?;
    Ok(t)
}

/// A configuration function taking at most `max_args` arguments
/// (`json_arg_init`).
fn config_function<F>(lua: &Lua, env: &Env, max_args: usize, body: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, &Args) -> Result<Vec<Value>, Fail> + 'static,
{
    function(lua, env, move |lua, args, _| {
        if args.count() > max_args {
            return Err(arg_error_at(lua, max_args as i64 + 1, "found too many arguments"));
        }
        Ok(MultiValue::from_vec(body(lua, args)?))
    })
}

fn is_nil(args: &Args, n: usize) -> bool {
    matches!(args.get(n), None | Some(Value::Nil))
}

/// `json_integer_option`. The range error names argument 1 whatever the
/// argument, as lua-cjson does.
fn integer_option(lua: &Lua, args: &Args, n: usize, setting: &mut i32, min: i32, max: i32) -> Result<Value, Fail> {
    if !is_nil(args, n) {
        // `int value = luaL_checkinteger(...)`: the low 32 bits.
        let value = args.check_integer(n)? as i32;
        if value < min || value > max {
            return Err(arg_error_at(lua, 1, &format!("expected integer between {min} and {max}")));
        }
        *setting = value;
    }
    Ok(Value::Integer(*setting as i64))
}

/// `json_enum_option`: a boolean stands for `bool_true` or 0; the setting is
/// shown as a boolean when it is one of those.
fn enum_option(lua: &Lua, args: &Args, n: usize, setting: &mut u8, options: &[&str], bool_true: u8) -> Result<Value, Fail> {
    if !is_nil(args, n) {
        if let Some(Value::Boolean(b)) = args.get(n) {
            *setting = *b as u8 * bool_true;
        } else {
            let name = args.check_string(n)?;
            let name = name.as_bytes();
            match options.iter().position(|o| o.as_bytes() == &name[..]) {
                Some(i) => *setting = i as u8,
                None => {
                    let name = String::from_utf8_lossy(&name).into_owned();
                    return Err(arg_error_at(lua, n as i64, &format!("invalid option '{name}'")));
                }
            }
        }
    }
    if *setting == 0 || *setting == bool_true {
        Ok(Value::Boolean(*setting != 0))
    } else {
        Ok(Value::String(lua.create_string(options[*setting as usize])?))
    }
}

/// Keys whose place in a table follows their address.
/// A table's keys in [`super::TableKey`] order, the same on every node (Lua's
/// own order follows where the keys sit, which may differ); `None` if one
/// is placed by its address.
fn ordered_keys(t: &Table, work: &mut Work) -> Result<Option<Vec<super::TableKey>>, Fail> {
    super::ordered_keys(t, || work.item())
}

fn keyed_by_address(key: &Value) -> bool {
    matches!(key, Value::Table(_) | Value::Function(_) | Value::Thread(_) | Value::UserData(_))
}

struct Encoder<'l, 'w, 'c> {
    lua: &'l Lua,
    config: JsonConfig,
    work: &'w mut Work<'c>,
    out: Vec<u8>,
}

impl Encoder<'_, '_, '_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), Fail> {
        self.work.write(&mut self.out, bytes)
    }

    fn value(&mut self, value: &Value, depth: usize) -> Result<(), Fail> {
        self.work.item()?;
        match value {
            Value::String(s) => self.string(&s.as_bytes()),
            Value::Integer(_) | Value::Number(_) => self.number(number_of(value).unwrap_or(0.0)),
            Value::Boolean(true) => self.put(b"true"),
            Value::Boolean(false) => self.put(b"false"),
            Value::Nil => self.put(b"null"),
            Value::LightUserData(p) if p.0.is_null() => self.put(b"null"),
            Value::Table(t) => {
                let depth = depth + 1;
                let max = (self.config.encode_max_depth.max(0) as usize).min(MAX_NESTING);
                if depth > max {
                    return Err(Fail::Message(format!("Cannot serialise, excessive nesting ({depth})")));
                }
                match self.array_length(t)? {
                    Some(len) => self.array(t, len, depth),
                    None => self.object(t, depth),
                }
            }
            other => Err(Fail::Message(format!("Cannot serialise {}: type not supported", type_name(Some(other))))),
        }
    }

    /// `lua_array_length`: the length if `t` is an array (only positive
    /// integer keys, not too sparse), `None` for an object. `max` is a C
    /// `int`, so keys past its range make the table an object.
    fn array_length(&mut self, t: &Table) -> Result<Option<usize>, Fail> {
        let (mut max, mut items) = (0i32, 0i32);
        for pair in t.pairs::<Value, Value>() {
            let (k, _) = pair?;
            self.work.item()?;
            match number_of(&k) {
                Some(k) if k != 0.0 && k.floor() == k && k >= 1.0 => {
                    if k > max as f64 {
                        max = double_to_c_int(k);
                    }
                    items = items.wrapping_add(1);
                }
                _ => return Ok(None),
            }
        }
        let c = &self.config;
        if c.sparse_ratio > 0 && max > items.wrapping_mul(c.sparse_ratio) && max > c.sparse_safe {
            if !c.sparse_convert {
                return Err(Fail::Message("Cannot serialise table: excessively sparse array".into()));
            }
            return Ok(None);
        }
        Ok(if max > 0 { Some(max as usize) } else { None })
    }

    fn array(&mut self, t: &Table, len: usize, depth: usize) -> Result<(), Fail> {
        self.put(b"[")?;
        for i in 1..=len {
            if i > 1 {
                self.put(b",")?;
            }
            self.value(&t.raw_get::<Value>(i)?, depth)?;
        }
        self.put(b"]")
    }

    fn object(&mut self, t: &Table, depth: usize) -> Result<(), Fail> {
        // Where such keys sit, and so which of them lua-cjson meets first,
        // differs from node to node: name one of them before anything else.
        let mut by_address = None;
        for pair in t.pairs::<Value, Value>() {
            let (k, _) = pair?;
            self.work.item()?;
            if keyed_by_address(&k) {
                let name = type_name(Some(&k));
                by_address = Some(by_address.map_or(name, |n: &'static str| n.min(name)));
            }
        }
        if let Some(name) = by_address {
            return Err(Fail::Message(format!("Cannot serialise {name}: table key must be a number or string")));
        }
        let keys = ordered_keys(t, self.work)?.unwrap_or_default();
        self.put(b"{")?;
        let mut first = true;
        for key in &keys {
            if !first {
                self.put(b",")?;
            }
            first = false;
            match key {
                super::TableKey::Num(n) => {
                    self.put(b"\"")?;
                    self.number(*n)?;
                    self.put(b"\":")?;
                }
                super::TableKey::Str(s) => {
                    self.string(s)?;
                    self.put(b":")?;
                }
                super::TableKey::Bool(_) => {
                    return Err(Fail::Message("Cannot serialise boolean: table key must be a number or string".into()))
                }
            }
            let v = t.raw_get::<Value>(key.to_lua(self.lua)?)?;
            self.value(&v, depth)?;
        }
        self.put(b"}")
    }

    fn string(&mut self, s: &[u8]) -> Result<(), Fail> {
        self.put(b"\"")?;
        let mut plain = 0;
        for (i, &c) in s.iter().enumerate() {
            let escaped: &[u8] = match c {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'/' => b"\\/",
                b'\x08' => b"\\b",
                b'\t' => b"\\t",
                b'\n' => b"\\n",
                b'\x0c' => b"\\f",
                b'\r' => b"\\r",
                0..=0x1f | 0x7f => {
                    self.put(&s[plain..i])?;
                    plain = i + 1;
                    self.put(format!("\\u{c:04x}").as_bytes())?;
                    continue;
                }
                _ => continue,
            };
            self.put(&s[plain..i])?;
            plain = i + 1;
            self.put(escaped)?;
        }
        self.put(&s[plain..])?;
        self.put(b"\"")
    }

    fn number(&mut self, n: f64) -> Result<(), Fail> {
        let invalid = n.is_nan() || n.is_infinite();
        match self.config.encode_invalid_numbers {
            0 if invalid => return Err(Fail::Message("Cannot serialise number: must not be NaN or Inf".into())),
            1 if n.is_nan() => return self.put(b"nan"),
            2 if invalid => return self.put(b"null"),
            _ => {}
        }
        let text = format_g(n, self.config.precision);
        self.put(&text)
    }
}

/// C's `%.<precision>g`, from the C library, so that every digit is the one
/// Redis writes.
fn format_g(n: f64, precision: i32) -> Vec<u8> {
    let mut buf = [0u8; 64];
    // SAFETY: the buffer's size is passed; "%.*g" takes an int and a double.
    let len = unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), c"%.*g".as_ptr(), precision as c_int, n) };
    buf[..(len.max(0) as usize).min(buf.len() - 1)].to_vec()
}

/// A JSON token (`json_token_type_t`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Token {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    /// The text is in the parser's buffer.
    String,
    Number(f64),
    Boolean(bool),
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

impl Token {
    fn name(self) -> &'static str {
        match self {
            Token::ObjBegin => "T_OBJ_BEGIN",
            Token::ObjEnd => "T_OBJ_END",
            Token::ArrBegin => "T_ARR_BEGIN",
            Token::ArrEnd => "T_ARR_END",
            Token::String => "T_STRING",
            Token::Number(_) => "T_NUMBER",
            Token::Boolean(_) => "T_BOOLEAN",
            Token::Null => "T_NULL",
            Token::Colon => "T_COLON",
            Token::Comma => "T_COMMA",
            Token::End => "T_END",
            Token::Error(what) => what,
        }
    }
}

/// lua-cjson's parser: the input read as a C string (a NUL ends it), numbers
/// read by the C library's `strtod`.
struct Parser<'a, 'w, 'c> {
    lua: &'a Lua,
    config: JsonConfig,
    data: &'a [u8],
    at: usize,
    depth: usize,
    /// The last string token's text.
    text: Vec<u8>,
    work: &'w mut Work<'c>,
}

impl Parser<'_, '_, '_> {
    fn byte(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    fn document(&mut self) -> Result<Value, Fail> {
        let token = self.next()?;
        let value = self.value(token)?;
        let token = self.next()?;
        if token.0 != Token::End {
            return Err(self.expected("the end", token));
        }
        Ok(value)
    }

    fn expected(&self, what: &str, (token, index): (Token, usize)) -> Fail {
        Fail::Message(format!("Expected {what} but found {} at character {}", token.name(), index + 1))
    }

    /// The next token and where it starts (or, for errors, where the error is).
    fn next(&mut self) -> Result<(Token, usize), Fail> {
        let start = self.at;
        let token = self.token();
        self.work.bytes(self.at - start)?;
        Ok(token)
    }

    fn token(&mut self) -> (Token, usize) {
        while matches!(self.byte(self.at), b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
        let index = self.at;
        let c = self.byte(self.at);
        let single = match c {
            b'{' => Some(Token::ObjBegin),
            b'}' => Some(Token::ObjEnd),
            b'[' => Some(Token::ArrBegin),
            b']' => Some(Token::ArrEnd),
            b',' => Some(Token::Comma),
            b':' => Some(Token::Colon),
            _ => None,
        };
        if let Some(token) = single {
            self.at += 1;
            return (token, index);
        }
        let rest = &self.data[self.at.min(self.data.len())..];
        match c {
            0 => (Token::End, index),
            b'"' => self.string_token(),
            b'-' | b'0'..=b'9' => {
                if !self.config.decode_invalid_numbers && self.invalid_number() {
                    return (Token::Error("invalid number"), index);
                }
                self.number_token()
            }
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'+' => {
                if rest.starts_with(b"true") {
                    self.at += 4;
                    (Token::Boolean(true), index)
                } else if rest.starts_with(b"false") {
                    self.at += 5;
                    (Token::Boolean(false), index)
                } else if rest.starts_with(b"null") {
                    self.at += 4;
                    (Token::Null, index)
                } else if self.config.decode_invalid_numbers && self.invalid_number() {
                    self.number_token()
                } else {
                    (Token::Error("invalid token"), index)
                }
            }
            _ => (Token::Error("invalid token"), index),
        }
    }

    /// `json_is_invalid_number`: what `strtod` takes but JSON does not.
    fn invalid_number(&self) -> bool {
        let mut p = self.at;
        match self.byte(p) {
            b'+' => return true,
            b'-' => p += 1,
            _ => {}
        }
        let c = self.byte(p);
        if c == b'0' {
            let c2 = self.byte(p + 1);
            return c2 | 0x20 == b'x' || c2.is_ascii_digit();
        } else if c <= b'9' {
            return false;
        }
        let word = |w: &[u8]| (0..3).all(|i| self.byte(p + i).to_ascii_lowercase() == w[i]);
        word(b"inf") || word(b"nan")
    }

    fn number_token(&mut self) -> (Token, usize) {
        let index = self.at;
        // No more than strtod could read: signs, digits, letters (hex,
        // exponents, inf, nan), points and nan's parentheses.
        let len = self.data[index..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.' | b'(' | b')' | b'_'))
            .count();
        let mut text = self.data[index..index + len].to_vec();
        text.push(0);
        let mut end = std::ptr::null_mut();
        // SAFETY: `text` ends with a NUL; `end` points into it afterwards.
        let value = unsafe { libc::strtod(text.as_ptr().cast(), &mut end) };
        let consumed = end as usize - text.as_ptr() as usize;
        if consumed == 0 {
            return (Token::Error("invalid number"), index);
        }
        self.at += consumed;
        (Token::Number(value), index)
    }

    fn string_token(&mut self) -> (Token, usize) {
        let index = self.at;
        self.at += 1;
        self.text.clear();
        loop {
            let c = self.byte(self.at);
            match c {
                b'"' => break,
                0 => return (Token::Error("unexpected end of string"), self.at),
                b'\\' => {
                    let escaped = match self.byte(self.at + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => b'\x08',
                        b't' => b'\t',
                        b'n' => b'\n',
                        b'f' => b'\x0c',
                        b'r' => b'\r',
                        b'u' => {
                            if !self.unicode_escape() {
                                return (Token::Error("invalid unicode escape code"), self.at);
                            }
                            continue;
                        }
                        _ => return (Token::Error("invalid escape code"), self.at),
                    };
                    self.text.push(escaped);
                    self.at += 2;
                }
                _ => {
                    self.text.push(c);
                    self.at += 1;
                }
            }
        }
        self.at += 1;
        (Token::String, index)
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        (0..4).try_fold(0u32, |acc, i| Some((acc << 4) | (self.byte(at + i) as char).to_digit(16)?))
    }

    /// `\uXXXX` (or a surrogate pair) at `at`, appended as UTF-8.
    fn unicode_escape(&mut self) -> bool {
        let Some(mut code) = self.hex4(self.at + 2) else { return false };
        let mut len = 6;
        if code & 0xf800 == 0xd800 {
            if code & 0x400 != 0 || self.byte(self.at + 6) != b'\\' || self.byte(self.at + 7) != b'u' {
                return false;
            }
            let Some(low) = self.hex4(self.at + 8) else { return false };
            if low & 0xfc00 != 0xdc00 {
                return false;
            }
            code = (((code & 0x3ff) << 10) | (low & 0x3ff)) + 0x10000;
            len = 12;
        }
        // Surrogates and all are encoded as they are, as lua-cjson does.
        let mut buf = [0u8; 4];
        let bytes: &[u8] = match code {
            0..=0x7f => {
                buf[0] = code as u8;
                &buf[..1]
            }
            0x80..=0x7ff => {
                buf[0] = (code >> 6) as u8 | 0xc0;
                buf[1] = (code & 0x3f) as u8 | 0x80;
                &buf[..2]
            }
            0x800..=0xffff => {
                buf[0] = (code >> 12) as u8 | 0xe0;
                buf[1] = ((code >> 6) & 0x3f) as u8 | 0x80;
                buf[2] = (code & 0x3f) as u8 | 0x80;
                &buf[..3]
            }
            _ => {
                buf[0] = (code >> 18) as u8 | 0xf0;
                buf[1] = ((code >> 12) & 0x3f) as u8 | 0x80;
                buf[2] = ((code >> 6) & 0x3f) as u8 | 0x80;
                buf[3] = (code & 0x3f) as u8 | 0x80;
                &buf[..4]
            }
        };
        self.text.extend_from_slice(bytes);
        self.at += len;
        true
    }

    fn value(&mut self, token: (Token, usize)) -> Result<Value, Fail> {
        self.work.item()?;
        Ok(match token.0 {
            Token::String => Value::String(self.lua.create_string(&self.text)?),
            Token::Number(n) => Value::Number(n),
            Token::Boolean(b) => Value::Boolean(b),
            Token::Null => lua_null(),
            Token::ObjBegin => self.object()?,
            Token::ArrBegin => self.array()?,
            _ => return Err(self.expected("value", token)),
        })
    }

    fn descend(&mut self) -> Result<Table, Fail> {
        self.depth += 1;
        let max = (self.config.decode_max_depth.max(0) as usize).min(MAX_NESTING);
        if self.depth > max {
            return Err(Fail::Message(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.at
            )));
        }
        Ok(self.lua.create_table()?)
    }

    fn object(&mut self) -> Result<Value, Fail> {
        let table = self.descend()?;
        let mut token = self.next()?;
        if token.0 != Token::ObjEnd {
            loop {
                if token.0 != Token::String {
                    return Err(self.expected("object key string", token));
                }
                let key = self.lua.create_string(&self.text)?;
                token = self.next()?;
                if token.0 != Token::Colon {
                    return Err(self.expected("colon", token));
                }
                token = self.next()?;
                let value = self.value(token)?;
                table.raw_set(key, value)?;
                token = self.next()?;
                if token.0 == Token::ObjEnd {
                    break;
                }
                if token.0 != Token::Comma {
                    return Err(self.expected("comma or object end", token));
                }
                token = self.next()?;
            }
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }

    fn array(&mut self) -> Result<Value, Fail> {
        let table = self.descend()?;
        let mut token = self.next()?;
        if token.0 != Token::ArrEnd {
            for i in 1.. {
                let value = self.value(token)?;
                table.raw_set(i, value)?;
                token = self.next()?;
                if token.0 == Token::ArrEnd {
                    break;
                }
                if token.0 != Token::Comma {
                    return Err(self.expected("comma or array end", token));
                }
                token = self.next()?;
            }
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }
}

#[cfg(test)]
mod redis_cases;

#[cfg(test)]
mod tests;
