//! The sandbox, the conversions and the budget, without a server.

use std::collections::HashMap;

use bytes::Bytes;

use super::{run, sha1hex, INSTRUCTION_BUDGET};
use crate::protocol::Reply;

/// Runs `body` against a tiny GET/SET store.
fn eval(body: &str, keys: &[&str], argv: &[&str]) -> Reply {
    let mut store: HashMap<Bytes, Bytes> = HashMap::new();
    eval_with(&mut store, body, keys, argv)
}

fn eval_with(store: &mut HashMap<Bytes, Bytes>, body: &str, keys: &[&str], argv: &[&str]) -> Reply {
    eval_budget(store, body, keys, argv, INSTRUCTION_BUDGET)
}

fn eval_budget(store: &mut HashMap<Bytes, Bytes>, body: &str, keys: &[&str], argv: &[&str], budget: u64) -> Reply {
    let b = |v: &[&str]| v.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect::<Vec<_>>();
    let mut call = |args: &[Bytes]| -> Reply {
        match String::from_utf8_lossy(&args[0]).to_ascii_lowercase().as_str() {
            "get" => store.get(&args[1]).cloned().map(Reply::Bulk).unwrap_or(Reply::Nil),
            "set" => {
                store.insert(args[1].clone(), args[2].clone());
                Reply::ok()
            }
            "wrong" => Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value"),
            _ => Reply::error("ERR unknown command"),
        }
    };
    run(body.as_bytes(), &b(keys), &b(argv), budget, &mut call)
}

fn is_err(r: &Reply, needle: &str) -> bool {
    matches!(r, Reply::Error(e) if e.contains(needle))
}

#[test]
fn conversions_follow_redis() {
    assert_eq!(eval("return 1", &[], &[]), Reply::Int(1));
    assert_eq!(eval("return 3.99", &[], &[]), Reply::Int(3));
    assert_eq!(eval("return -3.99", &[], &[]), Reply::Int(-3));
    assert_eq!(eval("return 'x'", &[], &[]), Reply::bulk("x"));
    assert_eq!(eval("return true", &[], &[]), Reply::Int(1));
    assert_eq!(eval("return false", &[], &[]), Reply::Nil);
    assert_eq!(eval("return nil", &[], &[]), Reply::Nil);
    assert_eq!(eval("return {1, 'a', nil, 3}", &[], &[]), Reply::Array(vec![Reply::Int(1), Reply::bulk("a")]));
    assert_eq!(eval("return redis.status_reply('FINE')", &[], &[]), Reply::Status("FINE".into()));
    assert_eq!(eval("return redis.error_reply('MY failure')", &[], &[]), Reply::error("MY failure"));
    assert_eq!(eval("return {err='E1'}", &[], &[]), Reply::error("E1"));
    assert_eq!(eval("return {KEYS[1], ARGV[2], #ARGV}", &["k"], &["a", "b"]), Reply::Array(vec![Reply::bulk("k"), Reply::bulk("b"), Reply::Int(2)]));
}

#[test]
fn redis_call_and_pcall() {
    let mut store = HashMap::new();
    assert_eq!(eval_with(&mut store, "return redis.call('set', KEYS[1], ARGV[1])", &["k"], &["v"]), Reply::ok());
    assert_eq!(eval_with(&mut store, "return redis.call('GET', KEYS[1])", &["k"], &[]), Reply::bulk("v"));
    // A missing value is false in Lua.
    assert_eq!(eval_with(&mut store, "return redis.call('get', 'nope') == false", &[], &[]), Reply::Int(1));
    // Numbers become their decimal text.
    assert_eq!(eval_with(&mut store, "redis.call('set', 'n', 42) return redis.call('get', 'n')", &[], &[]), Reply::bulk("42"));
    // call raises the command's error as the script's error ...
    // (with Redis 7's suffix: the script and the line, even for a tail call)
    let sha = sha1hex(b"return redis.call('wrong')");
    assert_eq!(
        eval("return redis.call('wrong')", &[], &[]),
        Reply::Error(format!("WRONGTYPE Operation against a key holding the wrong kind of value script: {sha}, on @user_script:1."))
    );
    // ... pcall returns it as a table.
    assert_eq!(eval("local r = redis.pcall('wrong') return r.err", &[], &[]), Reply::bulk("WRONGTYPE Operation against a key holding the wrong kind of value"));
    assert!(is_err(&eval("return redis.call('get', {})", &[], &[]), "arguments must be strings or integers"));
    assert_eq!(eval("return redis.sha1hex('')", &[], &[]), Reply::bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709"));
    assert_eq!(sha1hex(b"return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
}

#[test]
fn escapes_fail_cleanly() {
    for body in [
        "return os.execute('true')",
        "return io.open('/etc/passwd')",
        "return require('os')",
        "return dofile('/etc/passwd')",
        "return loadfile('/etc/passwd')",
        "return load(function() return nil end)",
        "return string.dump(function() end)",
        "return getfenv(1)",
        "return collectgarbage('count')",
    ] {
        assert!(matches!(eval(body, &[], &[]), Reply::Error(_)), "{body} did not fail");
    }
    // Bytecode is refused even through loadstring.
    assert_eq!(eval("local f, e = loadstring('\\27Lua') return e", &[], &[]), Reply::bulk("loading binary chunks is not allowed"));
    // Text chunks still load.
    assert_eq!(eval("return loadstring('return 7')()", &[], &[]), Reply::Int(7));
}

#[test]
fn globals_are_protected() {
    assert!(is_err(&eval("x = 1 return 1", &[], &[]), "Attempt to modify a readonly table"));
    assert!(is_err(&eval("return undefined_thing", &[], &[]), "nonexistent global variable 'undefined_thing'"));
    assert!(is_err(&eval("string.len = nil return 1", &[], &[]), "readonly"));
    assert!(is_err(&eval("redis.call = nil return 1", &[], &[]), "readonly"));
    // Locals are fine.
    assert_eq!(eval("local x = 5 return x", &[], &[]), Reply::Int(5));
}

#[test]
fn runaway_scripts_hit_the_budget_even_inside_pcall() {
    assert!(is_err(&eval("while true do end", &[], &[]), "budget"));
    assert!(is_err(&eval("while true do pcall(function() while true do end end) end", &[], &[]), "budget"));
    // A script over budget stops at the same point every time.
    let mut a = HashMap::new();
    let mut b = HashMap::new();
    let body = "local i = 0 while true do i = i + 1 redis.call('set', 'i', i) end";
    assert!(is_err(&eval_budget(&mut a, body, &[], &[], 200_000), "budget"));
    eval_budget(&mut b, body, &[], &[], 200_000);
    assert_eq!(a, b);
    assert!(!a.is_empty());
}

#[test]
fn syntax_errors_and_randomness_are_deterministic() {
    assert!(is_err(&eval("return (", &[], &[]), "Error compiling script"));
    let r = "math.randomseed(7) return {math.random(100), math.random(100), math.random(100)}";
    assert_eq!(eval(r, &[], &[]), eval(r, &[], &[]));
}

/// Issue 9: inputs that once stopped the node (or every node, on replay).
#[test]
fn cyclic_and_deep_replies_are_errors() {
    let cyclic = "local a = {}; local b = {a}; a[1] = b; return a";
    assert_eq!(eval(cyclic, &[], &[]), Reply::error("ERR reached lua stack limit"));
    assert_eq!(eval("local a = {} a[1] = a return a", &[], &[]), Reply::error("ERR reached lua stack limit"));
    let deep = "local t = {} local c = t for i=1,100000 do c[1] = {} c = c[1] end return t";
    assert_eq!(eval(deep, &[], &[]), Reply::error("ERR reached lua stack limit"));
    // A table that refers to itself twice doubles at every level.
    assert!(is_err(&eval("local a = {} a[1] = a a[2] = a return a", &[], &[]), "reached lua stack limit"));
    let wide = "local t = {} local c = t for i=1,40 do local n = {} c[1] = n c[2] = n c = n end return t";
    assert!(is_err(&eval(wide, &[], &[]), "too large"));
    // Nesting below the limit still converts, all the way down.
    let ok = "local t = {} local c = t for i=1,900 do c[1] = {} c = c[1] end c[1] = 'leaf' return t";
    let mut reply = eval(ok, &[], &[]);
    let mut depth = 0;
    while let Reply::Array(mut items) = reply {
        assert_eq!(items.len(), 1);
        reply = items.remove(0);
        depth += 1;
    }
    assert_eq!((depth, reply), (901, Reply::bulk("leaf")));
}

#[test]
fn c_loops_a_script_controls_are_bounded() {
    // string.rep of an empty string would loop 2^62 times in C.
    assert_eq!(eval("return string.rep('', 2^62)", &[], &[]), Reply::bulk(""));
    assert_eq!(eval("return #string.rep('ab', 3)", &[], &[]), Reply::Int(6));
    assert_eq!(eval("return string.rep('x', -1)", &[], &[]), Reply::bulk(""));
    assert!(is_err(&eval("return string.rep('x', 2^40)", &[], &[]), "not enough memory"));
    // Redis 7's text for an error that is not an error table.
    let oom = eval("local s = 'x' for i = 1, 40 do s = s .. s end return #s", &[], &[]);
    assert!(matches!(&oom, Reply::Error(e) if e.starts_with("ERR Error running script f_") && e.ends_with(", not enough memory")), "{oom:?}");
    assert!(is_err(&eval("return string.rep('x', 'many')", &[], &[]), "bad argument #2 to 'rep'"));
    assert!(is_err(&eval("return ('x'):rep(2^40)", &[], &[]), "not enough memory"));
    // table.insert at -2^31 would shift 2^31 slots.
    assert!(is_err(&eval("local t = {} table.insert(t, -2^31, 1) return t", &[], &[]), "budget"));
    // A sparse table whose length is near 2^29: removing its first element
    // would move that many slots in C.
    let sparse = "local t = {1, 2, nil, 4} local j = 5 while j < 2^30 do t[j] = 1 j = j * 2 end";
    assert!(is_err(&eval(&format!("{sparse} table.remove(t, 1) return #t"), &[], &[]), "budget"));
    assert!(is_err(&eval(&format!("{sparse} table.insert(t, 1, 'x') return #t"), &[], &[]), "budget"));
    assert!(is_err(&eval(&format!("{sparse} table.foreachi(t, function() end) return #t"), &[], &[]), "budget"));
    assert!(is_err(&eval(&format!("{sparse} table.sort(t) return #t"), &[], &[]), "too large to sort"));
    assert_eq!(eval("local t = {1, 2, 3} return {table.remove(t, 1), table.remove(t), #t}", &[], &[]), eval("return {1, 3, 1}", &[], &[]));
    // Concatenating big strings in a loop allocates, and allocation is paid for.
    assert!(is_err(&eval("local s = string.rep('x', 2^20) for i = 1, 1e6 do local t = s .. 'y' end", &[], &[]), "budget"));
    // Comparing big strings is weighted by what the script holds.
    assert!(is_err(&eval("local s = string.rep('x', 2^24) for i = 1, 1e7 do local c = s < s end", &[], &[]), "budget"));
    // Patterns cannot recurse deeply nor backtrack without limit.
    assert!(is_err(&eval("return string.find(string.rep('a', 300000), string.rep('a?', 300000))", &[], &[]), "pattern too complex"));
    assert!(is_err(&eval("return string.find(string.rep('a', 40), string.rep('a*', 40) .. 'b')", &[], &[]), "budget"));
    assert!(is_err(&eval("return string.gsub(string.rep('x', 1e6), '', string.rep('y', 1000))", &[], &[]), ""));
    assert_eq!(eval("local t = {1, 3} table.insert(t, 2, 2) table.insert(t, 4) return t", &[], &[]), eval("return {1, 2, 3, 4}", &[], &[]));
    // unpack and string.byte of huge ranges fail inside Lua.
    assert!(matches!(eval("return unpack({}, 1, 1e8)", &[], &[]), Reply::Error(_)));
    assert!(matches!(eval("return string.byte(string.rep('x', 1e7), 1, -1)", &[], &[]), Reply::Error(_)));
}

#[test]
fn memory_and_recursion_bombs_fail_cleanly() {
    for body in [
        "local t = {} for i = 1, 1e9 do t[i] = i end",
        "local s = 'x' while true do s = s .. s end",
        "local t = {} for i = 1, 1e8 do t[#t + 1] = string.rep('x', 100) end",
        "local function f() return 1 + f() end return f()",
        "local t = setmetatable({}, {}) getmetatable(t).__index = function(t, k) return t[k] end return t.x",
        "return loadstring(string.rep('(', 100000) .. '1' .. string.rep(')', 100000))()",
        "return loadstring('return ' .. string.rep('{', 100000))()",
        "local co = coroutine.wrap(function() while true do end end) return co()",
        "local co = coroutine.wrap(function() while true do pcall(function() while true do end end) end end) return co()",
        "return table.concat(setmetatable({}, {__index = function() return 'x' end}), '', 1, 1e9)",
    ] {
        assert!(matches!(eval(body, &[], &[]), Reply::Error(_)), "{body} did not fail");
    }
}

#[test]
fn error_objects_of_every_type_become_error_replies() {
    for body in [
        "error(nil)",
        "error(false)",
        "error(42)",
        "error({})",
        "error({err = {}})",
        "error(function() end)",
        "error(coroutine.create(function() end))",
        "error(setmetatable({}, {__newindex = function() error('again') end}))",
        "error(setmetatable({}, {__tostring = function() error('again') end}))",
        "error(setmetatable({}, {__index = function() while true do end end}))",
        "error(_G)",
        "error(string)",
    ] {
        let reply = eval(body, &[], &[]);
        match &reply {
            Reply::Error(text) => assert!(!text.trim().is_empty() && text.split(' ').next().unwrap().chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()) , "{body}: {text:?}"),
            other => panic!("{body} replied {other:?}"),
        }
    }
}

#[test]
fn addresses_never_reach_a_reply_or_a_write() {
    // Two runs on different allocations must give the same text.
    let body = "local t, f = {}, function() end return {tostring(t), tostring(f), tostring(t), tostring(setmetatable({}, {__tostring = function() return 'mine' end}))}";
    let a = eval(body, &[], &[]);
    let _garbage: Vec<Vec<u8>> = (0..1000).map(|i| vec![0u8; i * 7]).collect();
    assert_eq!(a, eval(body, &[], &[]));
    assert_eq!(
        a,
        Reply::Array(vec![Reply::bulk("table: 0x00000001"), Reply::bulk("function: 0x00000002"), Reply::bulk("table: 0x00000001"), Reply::bulk("mine")])
    );
    let err = eval("error(function() end)", &[], &[]);
    assert!(matches!(&err, Reply::Error(e) if e.contains("function: 0x00000001")), "{err:?}");
}

/// Runs `body` in a VM built for it alone (as every run did before VMs were
/// reused).
fn eval_fresh(store: &mut HashMap<Bytes, Bytes>, body: &str, budget: u64) -> Reply {
    let vm = super::Vm::new().expect("build a VM");
    let mut call = |args: &[Bytes]| -> Reply {
        store.insert(args[1].clone(), args[2].clone());
        Reply::ok()
    };
    vm.run(body.as_bytes(), &[], &[], budget, &mut call).0
}

/// A run in a reused VM behaves exactly as in a new one, whatever ran there
/// before: a node that just restarted (new VMs) and one that has run
/// thousands of scripts must stop a script at the same instruction and make
/// the same writes. The probe churns memory (so the collector and the
/// memory-weighted budget both matter), writes as it goes and runs out of
/// budget; it also reads the seed, the `tostring` numbering and the string
/// metatable.
#[test]
fn a_reused_vm_runs_a_script_exactly_as_a_new_one() {
    let probe = "
        local out = { tostring({}), tostring(math.random(1000)), ('ab'):upper() }
        redis.call('set', 'seen', table.concat(out, ' '))
        local keep, n = {}, 0
        while true do
            n = n + 1
            keep[n % 64 + 1] = string.rep('x', (n * 37) % 2000) .. n
            redis.call('set', 'n', n)
        end";
    const BUDGET: u64 = 3_000_000;
    let mut expected = HashMap::new();
    let reply = eval_fresh(&mut expected, probe, BUDGET);
    assert!(is_err(&reply, "budget"), "{reply:?}");
    let n: u64 = String::from_utf8_lossy(&expected[&Bytes::from("n")]).parse().unwrap();
    assert!(n > 1000, "the probe must run long enough to collect garbage: {n}");

    // What earlier scripts may leave behind, or try to.
    let history = [
        "return 1",
        "local t = {} for i = 1, 20000 do t[i] = 'k' .. i end return #t",
        "local s = string.rep('y', 2^20) return #s",
        "local function f(n) if n == 0 then return 0 end return 1 + f(n - 1) end return f(5000)",
        "local co = coroutine.create(function() coroutine.yield(1) end) coroutine.resume(co) return 1",
        "return tostring({}) .. tostring(function() end)",
        "math.randomseed(42) return math.random(100)",
        "while true do end",
        "local t = {} while true do t[#t + 1] = tostring(#t) end",
        "local s = 'x' while true do s = s .. s end",
        "error('boom')",
        "return redis.pcall()",
        "getmetatable('').__index = nil",
        "coroutine.create = nil",
        "rawset(coroutine, 'x', 1)",
        "string.x = 1",
        "return loadstring('return 1 + 1')()",
        "local big = {} for i = 1, 3000 do big['key' .. i] = {i} end return 1",
        "return 'x' .. string.rep('z', 300)",
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
    ];
    for before in history {
        let _ = eval(before, &["k"], &["v"]);
        let mut store = HashMap::new();
        let reply = eval_budget(&mut store, probe, &[], &[], BUDGET);
        assert_eq!(reply, eval_fresh(&mut HashMap::new(), probe, BUDGET), "after {before:?}");
        assert_eq!(store, expected, "the probe after {before:?} differs from a run in a new VM");
    }
}

/// The common case reuses one VM: the lock-release script builds no VM after
/// the first.
#[test]
fn small_scripts_reuse_one_vm() {
    let release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
    let _ = eval(release, &["k"], &["v"]);
    let built = super::vms_built_on_this_thread();
    for _ in 0..200 {
        assert_eq!(eval(release, &["k"], &["v"]), Reply::Int(0));
    }
    assert_eq!(super::vms_built_on_this_thread() - built, 0, "VMs built for 200 runs");
}

/// Nothing a script does to the libraries or the string metatable outlives it.
#[test]
fn shared_tables_are_read_only() {
    assert!(is_err(&eval("coroutine.create = nil return 1", &[], &[]), "readonly"));
    assert!(is_err(&eval("rawset(coroutine, 'create', nil) return 1", &[], &[]), "readonly"));
    assert_eq!(eval("return getmetatable('')", &[], &[]), Reply::Nil);
    assert_eq!(eval("return ('ab'):upper()", &[], &[]), Reply::Bulk(Bytes::from("AB")));
    assert_eq!(eval("return type(coroutine.create)", &[], &[]), Reply::Bulk(Bytes::from("function")));
}

/// Redis 7's RESP3 tables in a script's reply (`double`, `big_number`,
/// `map`, `set`), as redis-server 7.0.15 converts them (its order of string
/// keys included, taken from it); `err` and `ok` come first, as there.
#[test]
fn resp3_tables_convert_as_redis_7() {
    let b = Reply::bulk;
    assert_eq!(eval("return {double=1.5}", &[], &[]), Reply::Double(1.5));
    assert_eq!(eval("return {double=3}", &[], &[]), Reply::Double(3.0));
    assert_eq!(eval("return {double=-1/0}", &[], &[]), Reply::Double(f64::NEG_INFINITY));
    // Only a number is a double; a string falls through to an empty array.
    assert_eq!(eval("return {double='1.5'}", &[], &[]), Reply::Array(vec![]));
    assert_eq!(eval("return {double=1.5, ok='x'}", &[], &[]), Reply::Status("x".into()));
    assert_eq!(eval("return {double=1.5, err='E'}", &[], &[]), Reply::error("E"));
    assert_eq!(eval("return {big_number='12345678901234567890'}", &[], &[]), Reply::BigNumber("12345678901234567890".into()));
    assert_eq!(eval("return {big_number=123}", &[], &[]), Reply::Array(vec![]));
    assert_eq!(
        eval("return {map={a=1, b='x', c={1,2}}}", &[], &[]),
        Reply::Map(vec![(b("a"), Reply::Int(1)), (b("c"), Reply::Array(vec![Reply::Int(1), Reply::Int(2)])), (b("b"), b("x"))])
    );
    assert_eq!(
        eval("return {map={[1]='one', [2]='two', x=true, y=false}}", &[], &[]),
        Reply::Map(vec![(Reply::Int(1), b("one")), (Reply::Int(2), b("two")), (b("y"), Reply::Nil), (b("x"), Reply::Int(1))])
    );
    assert_eq!(
        eval("return {set={a=true, b=true, c=false}}", &[], &[]),
        Reply::Set(vec![b("a"), b("c"), b("b")])
    );
    assert_eq!(eval("return {map={}}", &[], &[]), Reply::Map(vec![]));
    assert_eq!(eval("return {map='x'}", &[], &[]), Reply::Array(vec![]));
    assert_eq!(
        eval("return {1, {double=2.5}, {map={k={set={v=true}}}}}", &[], &[]),
        Reply::Array(vec![Reply::Int(1), Reply::Double(2.5), Reply::Map(vec![(b("k"), Reply::Set(vec![b("v")]))])])
    );
    // Keys Lua places by address (tables, functions) are sorted by what they
    // became, so every node keeps the same reply whatever its allocations.
    let by_address = "return {set={[{2,3}]=true, ['s']=true, [{1}]=true, [{}]=true}}";
    let first = eval(by_address, &[], &[]);
    let _garbage: Vec<Vec<u8>> = (0..1000).map(|i| vec![0u8; i * 7]).collect();
    assert_eq!(first, eval(by_address, &[], &[]));
    let Reply::Set(members) = &first else { panic!("{first:?}") };
    let shown: Vec<String> = members.iter().map(|m| format!("{m:?}")).collect();
    let mut sorted = shown.clone();
    sorted.sort();
    assert_eq!(shown, sorted);
    assert_eq!(members.len(), 4);
    // Cycles and depth through a map are bounded as through an array.
    assert!(is_err(&eval("local m = {} local t = {map=m} m.k = t return t", &[], &[]), "reached lua stack limit"));
}

/// Runs `body` in a new VM whose heap holds `padding` more bytes than
/// usual, as the heap of a VM in another process may (its size depends a
/// little on where the process's code and data were loaded).
fn eval_padded(store: &mut HashMap<Bytes, Bytes>, body: &str, budget: u64, padding: usize) -> Reply {
    let mut vm = super::Vm::new().expect("build a VM");
    if padding > 0 {
        let pad = vm.lua.create_string(vec![b'p'; padding]).unwrap();
        vm.lua.set_named_registry_value("test.padding", pad).unwrap();
        vm.baseline = vm.collect().unwrap();
    }
    let mut call = |args: &[Bytes]| -> Reply {
        store.insert(args[1].clone(), args[2].clone());
        Reply::ok()
    };
    vm.run(body.as_bytes(), &[], &[], budget, &mut call).0
}

/// Scripts that write as they go and are stopped by their budget or their
/// memory limit, for the tests below.
const STOPPED_PROBES: [&str; 3] = [
    // Little garbage (one reply table per write), a long run.
    "local i = 0 while true do i = i + 1 if i % 1000 == 0 then redis.call('set', 'n', i) end end",
    // Garbage of many sizes, some kept.
    "local keep, n = {}, 0
     while true do
         n = n + 1
         keep[n % 7 + 1] = {n, tostring(n), string.rep('q', n % 300)}
         if n % 100 == 0 then redis.call('set', 'n', n) end
     end",
    // Memory held, then out of memory.
    "local t, n = {}, 0
     while true do
         n = n + 1
         t[n] = string.rep('m', 1000) .. n
         if n % 500 == 0 then redis.call('set', 'n', n) end
     end",
];

/// Where a script stops does not depend on the size of the heap it starts
/// from: each node's VMs differ there by a few bytes (a fresh process, a
/// restart replaying the log), and the collector, left to itself, started
/// at other moments and moved the point the budget ran out at, so the
/// replicas kept different writes.
#[test]
fn where_a_script_stops_does_not_depend_on_the_heap_it_starts_from() {
    const BUDGET: u64 = 20_000_000;
    for probe in STOPPED_PROBES {
        let mut expected = HashMap::new();
        let first = eval_fresh(&mut expected, probe, BUDGET);
        assert!(matches!(&first, Reply::Error(_)), "{first:?}");
        for padding in [8, 24, 100, 1_000, 7_000, 40_000, 300_000] {
            let mut store = HashMap::new();
            let reply = eval_padded(&mut store, probe, BUDGET, padding);
            assert_eq!(reply, first, "{probe:?} with {padding} bytes more in the heap");
            assert_eq!(store, expected, "{probe:?} with {padding} bytes more in the heap stopped elsewhere");
        }
    }
}

/// A script that runs out of its budget, or of memory, stops at the same
/// point in a VM that has run anything before as in a new one: where the
/// collector happens to be must not move it (each node's VM has its own
/// history, and a node that restarted has a new one). The probes write as
/// they go, so any difference in where they stop shows in the store.
#[test]
fn where_a_script_stops_does_not_depend_on_what_ran_before_in_its_vm() {
    const BUDGET: u64 = 20_000_000;
    let history = [
        "return 1",
        "local t = {} for i = 1, 20000 do t[i] = 'k' .. i end return #t",
        "local s = string.rep('y', 2^20) return #s",
        "local t = {} while true do t[#t + 1] = tostring(#t) end",
        "local keep = {} for i = 1, 50000 do keep[i % 100] = {i} end return 1",
        "return tostring({}) .. tostring(function() end)",
        "local s = 'x' while true do s = s .. s end",
    ];
    for probe in STOPPED_PROBES {
        let mut expected = HashMap::new();
        let first = eval_fresh(&mut expected, probe, BUDGET);
        assert!(matches!(&first, Reply::Error(_)), "{first:?}");
        for before in history {
            let _ = eval(before, &["k"], &["v"]);
            for round in 0..3 {
                let mut store = HashMap::new();
                let reply = eval_budget(&mut store, probe, &[], &[], BUDGET);
                assert_eq!(reply, first, "after {before:?}, round {round}");
                assert_eq!(store, expected, "{probe:?} after {before:?} (round {round}) stopped elsewhere than in a new VM");
            }
        }
    }
}

/// `pairs`, `next`, `cjson.encode` and `cmsgpack.pack` walk a table in one
/// order on every node, whatever keys it held before: keys placed by their
/// address (tables here), even once removed, moved the others to places
/// that differed from node to node, and a script writing in that order left
/// the replicas different.
#[test]
fn tables_are_walked_in_one_order_whatever_keys_they_held() {
    let body = "
        local t, held = {}, {}
        for i = 1, 40 do local k = {} held[i] = k t[k] = i end
        for i = 1, 40 do t['k' .. i] = i end
        t[3], t[1.5], t[-2], t[true], t[false] = 'a', 'b', 'c', 'd', 'e'
        for i = 1, 40 do t[held[i]] = nil end
        local order = {}
        for k in pairs(t) do order[#order + 1] = tostring(k) end
        local via_next, k = {}, next(t)
        while k ~= nil do via_next[#via_next + 1] = tostring(k) k = next(t, k) end
        t[true], t[false] = nil, nil
        return {table.concat(order, ','), table.concat(via_next, ','), cjson.encode(t), cmsgpack.pack({z = 1, a = 2, m = 3})}";
    let mut strings: Vec<String> = (1..=40).map(|i| format!("k{i}")).collect();
    strings.sort();
    let walked = format!("false,true,-2,1.5,3,{}", strings.join(","));
    let json = format!(
        "{{\"-2\":\"c\",\"1.5\":\"b\",\"3\":\"a\",{}}}",
        strings.iter().map(|k| format!("\"{k}\":{}", &k[1..])).collect::<Vec<_>>().join(",")
    );
    let packed = Bytes::from_static(b"\x83\xa1a\x02\xa1m\x03\xa1z\x01");
    let expected = Reply::Array(vec![Reply::bulk(walked.clone()), Reply::bulk(walked), Reply::bulk(json), Reply::Bulk(packed)]);
    for padding in [0, 24, 1_000, 40_000] {
        assert_eq!(eval_padded(&mut HashMap::new(), body, INSTRUCTION_BUDGET, padding), expected, "padding {padding}");
    }
    assert_eq!(eval(body, &[], &[]), expected);
    // Tables of more keys than mlua can hold references to at once.
    let big = "local t = {} for i = 1, 10000 do t['k' .. i] = i end
        local n, last, sorted = 0, '', true
        for k in pairs(t) do n = n + 1 sorted = sorted and k > last last = k end
        return {n, tostring(sorted), cjson.encode(t), #cmsgpack.pack(t), (next(t))}";
    let mut keys: Vec<String> = (1..=10000).map(|i| format!("k{i}")).collect();
    keys.sort();
    let json = format!("{{{}}}", keys.iter().map(|k| format!("\"{k}\":{}", &k[1..])).collect::<Vec<_>>().join(","));
    // A map16 header; each key a fixstr; each value a positive fixint, uint8 or uint16.
    let packed: usize = 3 + keys.iter().map(|k| 1 + k.len()).sum::<usize>()
        + (1..=10000).map(|i| if i < 128 { 1 } else if i < 256 { 2 } else { 3 }).sum::<usize>();
    let Reply::Array(got) = eval(big, &[], &[]) else { panic!("not an array") };
    assert_eq!(got[..2], [Reply::Int(10000), Reply::bulk("true")]);
    assert_eq!(got[2], Reply::bulk(json));
    assert_eq!(got[3..], [Reply::Int(packed as i64), Reply::bulk("k1")]);
    // A table still holding such a key is refused, as before.
    assert!(is_err(&eval("local t = {[{}] = 1, a = 2} for k in pairs(t) do end", &[], &[]), "cannot iterate"));
    assert!(is_err(&eval("local t = {[{}] = 1} return next(t)", &[], &[]), "cannot iterate"));
    assert!(is_err(&eval("return cmsgpack.pack({[{}] = 1})", &[], &[]), "cannot pack"));
}

#[test]
fn the_scripts_of_one_entry_share_one_budget() {
    let spin = "local i = 0 while true do i = i + 1 if i % 100 == 0 then redis.call('set', KEYS[1], i) end end";
    let small = "redis.call('set', KEYS[1], 'done') return 1";
    let budget_error = |r: &Reply| match r {
        Reply::Error(e) if e.starts_with("ERR Script exceeded the budget of ") => e.clone(),
        other => panic!("not stopped by its budget: {other:?}"),
    };
    // Outside an entry's apply (a read on the leader), every run has the
    // whole budget, however many ran before.
    let mut alone = HashMap::new();
    let first = budget_error(&eval_with(&mut alone, spin, &["a"], &[]));
    assert!(first.contains(&format!("budget of {INSTRUCTION_BUDGET} Lua instructions and was stopped")), "{first}");
    // Within one entry, the first spinning script has the whole budget and
    // stops where it stops alone; the scripts after it have what is left.
    let mut shared = HashMap::new();
    {
        let _entry = super::EntryBudget::begin();
        assert_eq!(eval_with(&mut shared, small, &["s1"], &[]), Reply::Int(1), "a small script within the budget");
        budget_error(&eval_with(&mut shared, spin, &["a"], &[]));
        let second = budget_error(&eval_with(&mut shared, spin, &["b"], &[]));
        assert!(second.contains(&format!("left of the {INSTRUCTION_BUDGET} they share")), "{second}");
        let third = budget_error(&eval_with(&mut shared, small, &["s2"], &[]));
        assert!(third.contains("budget of 0 Lua instructions"), "{third}");
    }
    let writes = |store: &HashMap<Bytes, Bytes>, key: &'static [u8]| {
        store.get(&Bytes::from_static(key)).map(|v| String::from_utf8_lossy(v).parse::<u64>().unwrap())
    };
    let (a_alone, a) = (writes(&alone, b"a").unwrap(), writes(&shared, b"a").unwrap());
    // The small script before it used a little of the budget.
    assert!(a <= a_alone && a + 1000 >= a_alone, "{a} writes in the entry, {a_alone} alone");
    assert!(writes(&shared, b"b").unwrap_or(0) < 10_000, "the second script ran on: {:?}", writes(&shared, b"b"));
    assert_eq!(shared.get(&Bytes::from_static(b"s2")), None, "a script with no budget left ran");
    // Over again: the budget is the same in every entry, and a script stops
    // at the same point there.
    let mut again = HashMap::new();
    {
        let _entry = super::EntryBudget::begin();
        eval_with(&mut again, small, &["s1"], &[]);
        eval_with(&mut again, spin, &["a"], &[]);
        eval_with(&mut again, spin, &["b"], &[]);
    }
    assert_eq!(again, { shared.remove(&Bytes::from_static(b"s2")); shared });
    // And after the entry, a run has the whole budget again.
    let mut after = HashMap::new();
    budget_error(&eval_with(&mut after, spin, &["a"], &[]));
    assert_eq!(writes(&after, b"a").unwrap(), a_alone);
}

#[test]
fn a_script_shares_entries_once_it_ran_light_here_and_until_it_runs_heavy() {
    // Distinct bodies: the set of light scripts is the process's.
    let light = "return 'shares entries, light' .. #KEYS";
    let heavy = "local i = 0 while true do i = i + 1 end return 'shares entries, heavy'";
    let sha = sha1hex(light.as_bytes());
    assert!(!super::shares_entries(light.as_bytes(), None), "a script never run here");
    assert!(super::shares_entries(b"return redis.call('get', KEYS[1])", None) == super::runs_without_vm(b"return redis.call('get', KEYS[1])"));
    eval(light, &[], &[]);
    assert!(super::shares_entries(light.as_bytes(), None));
    assert!(super::shares_entries(light.as_bytes(), Some(&sha)));
    assert!(!super::shares_entries(b"return 'another'", Some(&sha1hex(b"return 'another'"))));
    eval(heavy, &[], &[]);
    assert!(!super::shares_entries(heavy.as_bytes(), None), "a script stopped by its budget");
    // Stopped by a small budget is heavy too; a script given nothing (its
    // entry's budget spent) does not start and counts for nothing.
    let mut store = HashMap::new();
    assert!(is_err(&eval_budget(&mut store, "local i = 0 while i < 1e6 do i = i + 1 end return 'bounded'", &[], &[], 1000), "budget"));
    assert!(!super::shares_entries(b"local i = 0 while i < 1e6 do i = i + 1 end return 'bounded'", None));
    {
        let _entry = super::EntryBudget::begin();
        eval(heavy, &[], &[]);
        eval(light, &[], &[]);
    }
    assert!(super::shares_entries(light.as_bytes(), None), "a script that did not start was marked heavy");
    // A light script that runs heavy once goes alone again.
    let varies = "if ARGV[1] == 'spin' then while true do end end return 'shares entries, varies'";
    eval(varies, &[], &["quick"]);
    assert!(super::shares_entries(varies.as_bytes(), None));
    eval(varies, &[], &["spin"]);
    assert!(!super::shares_entries(varies.as_bytes(), None));
}

#[test]
fn converting_a_reply_is_charged_to_the_entrys_budget() {
    let spin = "local i = 0 while true do i = i + 1 if i % 100 == 0 then redis.call('set', KEYS[1], i) end end";
    // One table held twice at each of 20 levels: a few instructions to
    // build, 2 M values (tables and the empty ones at the bottom) to convert.
    let wide = "local t = {} for i = 1, 20 do t = {t, t} end return t";
    let written = |store: &HashMap<Bytes, Bytes>| String::from_utf8_lossy(&store[&Bytes::from_static(b"a")]).parse::<u64>().unwrap();
    let mut alone = HashMap::new();
    eval_with(&mut alone, spin, &["a"], &[]);
    let mut shared = HashMap::new();
    {
        let _entry = super::EntryBudget::begin();
        assert!(matches!(eval(wide, &[], &[]), Reply::Array(_)));
        eval_with(&mut shared, spin, &["a"], &[]);
    }
    let (alone, shared) = (written(&alone), written(&shared));
    // What the conversion cost (4 instructions a value) was not left to the
    // spinning script after it: about a sixth of the budget.
    assert!(shared * 10 < alone * 9 && shared * 10 > alone * 7, "{shared} writes after the reply, {alone} alone");
}
