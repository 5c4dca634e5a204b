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
