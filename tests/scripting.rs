//! Scripting (issue 4, item 1) against the real binary: `EVAL`, `EVALSHA`, `EVAL_RO`,
//! `EVALSHA_RO`, `SCRIPT LOAD|EXISTS|FLUSH`, the Lua <-> RESP conversions, `KEYS` /
//! `ARGV`, `redis.call` vs `redis.pcall`, the sandbox, the instruction budget, the
//! lock libraries' own scripts, durability of the script cache and of script effects
//! across `kill -9`, and `SCRIPT LOAD` on one node of a 3-node cluster making
//! `EVALSHA` work on the others.
//!
//! Expected replies and error texts were checked against Debian's `redis-server`
//! 7.0.15. Replies are read with a raw RESP client where the exact type matters
//! (nil bulk vs nil array, status vs bulk, error text).

mod cluster_support;
mod common;

use std::time::Duration;

use common::{arr, b, st, PYTHON_REDIS_LOCK_UNLOCK, expect_err, q, Resp, RawConn, TestServer};
use redis::Value;

// ---------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------


/// The text of an error reply; panics (with the command) on anything else.
#[track_caller]
fn err(r: Resp, what: &str) -> String {
    match r {
        Resp::Error(e) => e,
        other => panic!("{what}: expected an error reply, got {other:?}"),
    }
}

#[track_caller]
fn pong(c: &mut RawConn) {
    assert_eq!(c.cmd(&["PING"]), st("PONG"), "PING after the script");
}

/// `SCRIPT LOAD body` -> sha (also checks the reply is a 40-char lower-case hex bulk).
#[track_caller]
fn load(c: &mut RawConn, body: &str) -> String {
    let r = c.cmd(&["SCRIPT", "LOAD", body]);
    let sha = r.text().unwrap_or_else(|| panic!("SCRIPT LOAD replied {r:?}"));
    assert!(matches!(r, Resp::Bulk(Some(_))), "SCRIPT LOAD must reply a bulk string, got {r:?}");
    assert_eq!(sha.len(), 40, "sha {sha:?}");
    assert!(sha.chars().all(|ch| ch.is_ascii_hexdigit() && !ch.is_ascii_uppercase()), "sha {sha:?}");
    sha
}

/// `LOCK.INFO key` token (via the raw client; RESP2 flat array).
#[track_caller]
fn token_of(c: &mut RawConn, key: &str) -> i64 {
    let r = c.cmd(&["LOCK.INFO", key]);
    let items = r.items();
    let pos = items
        .iter()
        .position(|i| i.text().as_deref() == Some("token"))
        .unwrap_or_else(|| panic!("LOCK.INFO {key} has no token: {r:?}"));
    match &items[pos + 1] {
        Resp::Int(t) => *t,
        other => panic!("LOCK.INFO {key} token is {other:?}"),
    }
}

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

// The redis-py `Lock` scripts, verbatim from redis/lock.py (redis-py 8.x).
const PY_RELEASE: &str = "
        local token = redis.call('get', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        redis.call('del', KEYS[1])
        return 1
    ";
const PY_EXTEND: &str = "
        local token = redis.call('get', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        local expiration = redis.call('pttl', KEYS[1])
        if not expiration then
            expiration = 0
        end
        if expiration < 0 then
            return 0
        end

        local newttl = ARGV[2]
        if ARGV[3] == \"0\" then
            newttl = ARGV[2] + expiration
        end
        redis.call('pexpire', KEYS[1], newttl)
        return 1
    ";
const PY_REACQUIRE: &str = "
        local token = redis.call('get', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        redis.call('pexpire', KEYS[1], ARGV[2])
        return 1
    ";

// ---------------------------------------------------------------------------------
// conversions
// ---------------------------------------------------------------------------------

#[test]
fn lua_to_resp_conversions() {
    let s = TestServer::start();
    let mut c = s.raw();
    // Numbers are truncated towards zero to integers.
    assert_eq!(c.cmd(&["EVAL", "return 3.99", "0"]), Resp::Int(3));
    assert_eq!(c.cmd(&["EVAL", "return -3.99", "0"]), Resp::Int(-3));
    assert_eq!(c.cmd(&["EVAL", "return 0.5", "0"]), Resp::Int(0));
    assert_eq!(c.cmd(&["EVAL", "return 1e15", "0"]), Resp::Int(1_000_000_000_000_000));
    // Strings are bulk strings, also ones that look like numbers.
    assert_eq!(c.cmd(&["EVAL", "return '3.99'", "0"]), b("3.99"));
    assert_eq!(c.cmd(&["EVAL", "return ''", "0"]), b(""));
    // true -> 1, false -> nil bulk, nil -> nil bulk.
    assert_eq!(c.cmd(&["EVAL", "return true", "0"]), Resp::Int(1));
    assert_eq!(c.cmd(&["EVAL", "return false", "0"]), Resp::Bulk(None));
    assert_eq!(c.cmd(&["EVAL", "return nil", "0"]), Resp::Bulk(None));
    assert_eq!(c.cmd(&["EVAL", "local x = 1", "0"]), Resp::Bulk(None));
    // Tables are arrays cut at the first nil; nested tables and mixed types convert.
    assert_eq!(
        c.cmd(&["EVAL", "return {1, 2, nil, 4}", "0"]),
        arr(vec![Resp::Int(1), Resp::Int(2)])
    );
    assert_eq!(
        c.cmd(&["EVAL", "return {1,2,3,'foo',nil,'bar'}", "0"]),
        arr(vec![Resp::Int(1), Resp::Int(2), Resp::Int(3), b("foo")])
    );
    assert_eq!(
        c.cmd(&["EVAL", "return {1, 'a', {2, 3.7}, false, 5}", "0"]),
        arr(vec![
            Resp::Int(1),
            b("a"),
            arr(vec![Resp::Int(2), Resp::Int(3)]),
            Resp::Bulk(None),
            Resp::Int(5)
        ])
    );
    assert_eq!(c.cmd(&["EVAL", "return {}", "0"]), arr(vec![]));
    assert_eq!(c.cmd(&["EVAL", "return {nil, 1}", "0"]), arr(vec![]));
    // Non-array keys of a table are ignored.
    assert_eq!(c.cmd(&["EVAL", "return {1, foo='bar'}", "0"]), arr(vec![Resp::Int(1)]));
    // Status and error tables, at top level and nested.
    assert_eq!(c.cmd(&["EVAL", "return {ok='fine'}", "0"]), st("fine"));
    assert_eq!(c.cmd(&["EVAL", "return redis.status_reply('PONG2')", "0"]), st("PONG2"));
    assert_eq!(c.cmd(&["EVAL", "return {err='My Error'}", "0"]), Resp::Error("My Error".into()));
    assert_eq!(c.cmd(&["EVAL", "return {err='ERR custom thing'}", "0"]), Resp::Error("ERR custom thing".into()));
    assert_eq!(c.cmd(&["EVAL", "return redis.error_reply('FOO bar')", "0"]), Resp::Error("FOO bar".into()));
    assert_eq!(
        c.cmd(&["EVAL", "return {1, {ok='x'}, {err='E y'}, 'z'}", "0"]),
        arr(vec![Resp::Int(1), st("x"), Resp::Error("E y".into()), b("z")])
    );
    assert_eq!(c.cmd(&["EVAL", "return redis.sha1hex('')", "0"]), b("da39a3ee5e6b4b0d3255bfef95601890afd80709"));
    assert_eq!(c.cmd(&["EVAL", "return redis.sha1hex('abc')", "0"]), b("a9993e364706816aba3e25717850c26c9cd0d89d"));
    let e = err(c.cmd(&["EVAL", "return redis.sha1hex()", "0"]), "sha1hex()");
    assert!(e.starts_with("ERR wrong number of arguments script: "), "{e}");
    // The standard libraries Redis exposes.
    assert_eq!(c.cmd(&["EVAL", "return table.concat({'a','b'}, ',')", "0"]), b("a,b"));
    assert_eq!(c.cmd(&["EVAL", "return string.format('%d-%s', 5, 'x')", "0"]), b("5-x"));
    assert_eq!(c.cmd(&["EVAL", "return math.floor(3.7)", "0"]), Resp::Int(3));
    assert_eq!(c.cmd(&["EVAL", "return tonumber('12') + 1", "0"]), Resp::Int(13));
    assert_eq!(c.cmd(&["EVAL", "return '5' + 1", "0"]), Resp::Int(6));
    assert_eq!(c.cmd(&["EVAL", "return 'x' .. 1", "0"]), b("x1"));
    assert_eq!(c.cmd(&["EVAL", "return select('#', 1, 2, 3)", "0"]), Resp::Int(3));
    assert_eq!(c.cmd(&["EVAL", "return loadstring('return 7')()", "0"]), Resp::Int(7));
}

#[test]
fn resp_to_lua_conversions() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", "sk", "v"]), st("OK"));
    // nil from GET is `false` in Lua (not nil).
    assert_eq!(c.cmd(&["EVAL", "return redis.call('get', 'nokey') == false", "0"]), Resp::Int(1));
    assert_eq!(c.cmd(&["EVAL", "return type(redis.call('get', 'nokey'))", "0"]), b("boolean"));
    assert_eq!(c.cmd(&["EVAL", "return type(redis.call('hget', 'nohash', 'f'))", "0"]), b("boolean"));
    // Integer replies are Lua numbers.
    assert_eq!(c.cmd(&["EVAL", "return type(redis.call('exists', 'sk'))", "0"]), b("number"));
    assert_eq!(c.cmd(&["EVAL", "return redis.call('exists', 'sk') == 1", "0"]), Resp::Int(1));
    assert_eq!(c.cmd(&["EVAL", "return redis.call('incr', 'ctr') + 0.9", "0"]), Resp::Int(1));
    // Bulk replies are strings.
    assert_eq!(c.cmd(&["EVAL", "return type(redis.call('get', 'sk'))", "0"]), b("string"));
    // Status replies are {ok=...} tables, which convert back to status replies.
    assert_eq!(c.cmd(&["EVAL", "return redis.call('set', 'x', '1')['ok']", "0"]), b("OK"));
    assert_eq!(c.cmd(&["EVAL", "return redis.call('set', 'x', '1')", "0"]), st("OK"));
    assert_eq!(c.cmd(&["EVAL", "return redis.call('type', 'sk').ok", "0"]), b("string"));
    // Arrays are tables (flat pairs for HGETALL, empty table for a missing list).
    assert_eq!(c.cmd(&["HSET", "h", "f", "v"]), Resp::Int(1));
    assert_eq!(c.cmd(&["EVAL", "return redis.call('hgetall', 'h')", "0"]), arr(vec![b("f"), b("v")]));
    assert_eq!(c.cmd(&["EVAL", "return #redis.call('lrange', 'nolist', 0, -1)", "0"]), Resp::Int(0));
    // Command arguments: numbers are formatted as Redis formats them.
    assert_eq!(c.cmd(&["EVAL", "return redis.call('set', 'n', 10)", "0"]), st("OK"));
    assert_eq!(c.cmd(&["EVAL", "return redis.call('incrby', 'n', 2.0)", "0"]), Resp::Int(12));
    assert_eq!(c.cmd(&["GET", "n"]), b("12"));
    // The same script replies the same on a RESP3 connection (RESP2 conversion rules).
    let mut c3 = s.raw();
    assert!(matches!(c3.cmd(&["HELLO", "3"]), Resp::Map(_)));
    assert_eq!(c3.cmd(&["EVAL", "return redis.call('hgetall', 'h')", "0"]), arr(vec![b("f"), b("v")]));
    assert_eq!(c3.cmd(&["EVAL", "return 3.7", "0"]), Resp::Int(3));
}

#[test]
fn keys_and_argv() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(
        c.cmd(&["EVAL", "return {KEYS[1], KEYS[2], ARGV[1], ARGV[2], #KEYS, #ARGV}", "2", "k1", "k2", "a1", "a2"]),
        arr(vec![b("k1"), b("k2"), b("a1"), b("a2"), Resp::Int(2), Resp::Int(2)])
    );
    assert_eq!(c.cmd(&["EVAL", "return {#KEYS, #ARGV}", "0"]), arr(vec![Resp::Int(0), Resp::Int(0)]));
    assert_eq!(c.cmd(&["EVAL", "return {#KEYS, ARGV[1]}", "0", "only-arg"]), arr(vec![Resp::Int(0), b("only-arg")]));
    assert_eq!(c.cmd(&["EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "sk", "val"]), st("OK"));
    assert_eq!(c.cmd(&["GET", "sk"]), b("val"));
    // numkeys errors, as Redis.
    assert_eq!(err(c.cmd(&["EVAL", "return 1", "-1"]), "negative numkeys"), "ERR Number of keys can't be negative");
    assert_eq!(
        err(c.cmd(&["EVAL", "return 1", "2", "a"]), "numkeys > args"),
        "ERR Number of keys can't be greater than number of args"
    );
    assert_eq!(err(c.cmd(&["EVAL", "return 1", "x"]), "numkeys x"), "ERR value is not an integer or out of range");
    assert_eq!(err(c.cmd(&["EVAL"]), "EVAL"), "ERR wrong number of arguments for 'eval' command");
    assert_eq!(err(c.cmd(&["EVAL", "return 1"]), "EVAL body"), "ERR wrong number of arguments for 'eval' command");
    assert_eq!(err(c.cmd(&["EVALSHA"]), "EVALSHA"), "ERR wrong number of arguments for 'evalsha' command");
    // Binary-safe arguments.
    let mut raw = s.raw();
    raw.send(&RawConn::encode(&[b"EVAL", b"return ARGV[1]", b"0", b"a\x00b\r\nc"]));
    assert_eq!(raw.read().unwrap(), Resp::Bulk(Some(b"a\x00b\r\nc".to_vec())));
}

/// As Redis 7.0.15 answers: the blocking pops are refused in scripts, except
/// BLMPOP, which never blocks there (LMPOP's reply, nil when empty).
#[test]
fn blocking_pops_in_scripts() {
    let s = TestServer::start();
    let mut c = s.raw();
    let blmpop = "return redis.call('blmpop', 0, 1, KEYS[1], 'LEFT', 'COUNT', 5)";
    assert_eq!(c.cmd(&["EVAL", blmpop, "1", "l"]), Resp::Bulk(None), "empty: nil, at once");
    assert_eq!(c.cmd(&["RPUSH", "l", "a", "b"]), Resp::Int(2));
    assert_eq!(c.cmd(&["EVAL", blmpop, "1", "l"]), arr(vec![b("l"), arr(vec![b("a"), b("b")])]));
    for call in [
        "redis.call('blpop', KEYS[1], 0)",
        "redis.call('brpop', KEYS[1], 0)",
        "redis.call('blmove', KEYS[1], 'x', 'LEFT', 'RIGHT', 0)",
        "redis.call('brpoplpush', KEYS[1], 'x', 0)",
        "redis.call('bzpopmin', KEYS[1], 0)",
        "redis.call('bzpopmax', KEYS[1], 0)",
    ] {
        let e = err(c.cmd(&["EVAL", &format!("return {call}"), "1", "l"]), call);
        assert!(e.starts_with("ERR This Redis command is not allowed from script script: "), "{call}: {e}");
    }
    pong(&mut c);
}

// ---------------------------------------------------------------------------------
// redis.call vs redis.pcall
// ---------------------------------------------------------------------------------

#[test]
fn call_raises_and_pcall_returns_the_error() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", "sk", "v"]), st("OK"));
    // redis.call: the error aborts the script and becomes the script's error reply
    // (Redis appends " script: <sha>, on @user_script:<line>."; checked exactly in
    // `error_texts_match_redis_7`).
    let e = err(c.cmd(&["EVAL", "redis.call('incr', 'sk'); return 'not reached'", "0"]), "call error");
    assert!(e.starts_with("ERR value is not an integer or out of range"), "{e}");
    let e = err(c.cmd(&["EVAL", "redis.call('hset', 'sk', 'a', 'b'); return 1", "0"]), "call wrongtype");
    assert!(e.starts_with("WRONGTYPE Operation against a key holding the wrong kind of value"), "{e}");
    // Nothing after the failing call ran.
    let e = err(c.cmd(&["EVAL", "redis.call('incr', 'sk'); redis.call('set', 'after', '1')", "0"]), "call error");
    assert!(e.starts_with("ERR value is not an integer"), "{e}");
    assert_eq!(c.cmd(&["EXISTS", "after"]), Resp::Int(0));
    // redis.pcall: the error is a value ({err=...}); the script continues.
    assert_eq!(
        c.cmd(&["EVAL", "return redis.pcall('incr', 'sk')", "0"]),
        Resp::Error("ERR value is not an integer or out of range".into())
    );
    assert_eq!(
        c.cmd(&["EVAL", "local r = redis.pcall('incr', 'sk'); return type(r) .. ':' .. r.err", "0"]),
        b("table:ERR value is not an integer or out of range")
    );
    assert_eq!(
        c.cmd(&["EVAL", "redis.pcall('incr', 'sk'); redis.call('set', 'after', '2'); return 'went on'", "0"]),
        b("went on")
    );
    assert_eq!(c.cmd(&["GET", "after"]), b("2"));
    assert_eq!(
        c.cmd(&["EVAL", "return redis.pcall('hset', 'sk', 'a', 'b')", "0"]),
        Resp::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
    // A successful pcall is just the reply.
    assert_eq!(c.cmd(&["EVAL", "return redis.pcall('get', 'sk')", "0"]), b("v"));
    // Argument errors of the redis lib.
    let e = err(c.cmd(&["EVAL", "return redis.call()", "0"]), "no args");
    assert!(e.starts_with("ERR Please specify at least one argument for this redis lib call"), "{e}");
    assert_eq!(
        c.cmd(&["EVAL", "return redis.pcall()", "0"]),
        Resp::Error("ERR Please specify at least one argument for this redis lib call".into())
    );
    let e = err(c.cmd(&["EVAL", "return redis.call({})", "0"]), "table arg");
    assert!(e.starts_with("ERR Lua redis lib command arguments must be strings or integers"), "{e}");
    pong(&mut c);
}

/// A script that catches a `redis.call` error with Lua's own `pcall` sees the
/// error as Redis gives it (a string in 7.0, a table with `err` in later
/// versions), never an internal marker.
#[test]
fn lua_pcall_around_redis_call_sees_the_redis_error() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", "sk", "v"]), st("OK"));
    let script = "local ok, e = pcall(redis.call, 'incr', 'sk')
                  if type(e) == 'table' then e = e.err end
                  return {tostring(ok), e}";
    // Redis 7.0.15: ["false", "ERR value is not an integer or out of range"]
    assert_eq!(
        c.cmd(&["EVAL", script, "0"]),
        arr(vec![b("false"), b("ERR value is not an integer or out of range")])
    );
}

/// What Redis 7 gives scripts besides `redis.call`, as scripts written for
/// it use them: `replicate_commands` (a rate limiter's first line, with
/// `TIME`), `set_repl` and its flags, the version, `acl_check_cmd`, the
/// debugger's calls. Replies and error texts as Redis 7.0.15's (the version
/// is the one raftlock tells clients).
#[test]
fn redis_7_script_helpers() {
    let s = TestServer::start();
    let mut c = s.raw();
    let eval = |c: &mut RawConn, script: &str| c.cmd(&["EVAL", script, "0"]);
    assert_eq!(eval(&mut c, "return redis.replicate_commands()"), Resp::Int(1));
    assert_eq!(eval(&mut c, "return redis.set_repl(redis.REPL_ALL)"), Resp::Bulk(None));
    assert_eq!(eval(&mut c, "redis.set_repl(redis.REPL_NONE) return redis.call('SET', 'r', 'v')"), st("OK"));
    assert_eq!(c.cmd(&["GET", "r"]), b("v"), "REPL_NONE changes nothing here: every node runs the script");
    assert_eq!(
        eval(&mut c, "return {redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL}"),
        arr(vec![Resp::Int(0), Resp::Int(1), Resp::Int(2), Resp::Int(2), Resp::Int(3)])
    );
    for (script, text) in [
        ("return redis.set_repl()", "ERR redis.set_repl() requires two arguments."),
        ("return redis.set_repl(1, 2)", "ERR redis.set_repl() requires two arguments."),
        ("return redis.set_repl(4)", "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."),
        ("return redis.set_repl(-1)", "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."),
        ("return redis.acl_check_cmd('nosuch')", "ERR Invalid command passed to redis.acl_check_cmd()"),
        ("return redis.acl_check_cmd()", "ERR Please specify at least one argument for this redis lib call"),
        ("return redis.call('TIME', 'x')", "ERR Wrong number of args calling Redis command from script"),
    ] {
        // A tail call still names the script's line, as Redis's C functions do.
        let e = err(eval(&mut c, script), script);
        assert!(e.starts_with(text) && e.ends_with("on @user_script:1."), "{script}: {e}");
    }
    // Lua's 2.5 is 2, anything else not a number is 0 (REPL_NONE), as in Redis.
    assert_eq!(eval(&mut c, "return redis.set_repl(2.5)"), Resp::Bulk(None));
    assert_eq!(eval(&mut c, "return redis.set_repl('x')"), Resp::Bulk(None));
    // No script reaches the question's marker through redis.call.
    assert_eq!(
        eval(&mut c, "return redis.pcall('\\0acl_check_cmd', 'get', 'k')"),
        Resp::Error("ERR Unknown Redis command called from script".into())
    );
    let Resp::Bulk(Some(info)) = c.cmd(&["INFO", "server"]) else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    let version = info.lines().find_map(|l| l.strip_prefix("redis_version:")).expect("redis_version").trim().to_string();
    assert_eq!(eval(&mut c, "return redis.REDIS_VERSION"), b(&version));
    let number = version.split('.').map(|p| p.parse::<i64>().unwrap()).fold(0, |n, p| n * 256 + p);
    assert_eq!(eval(&mut c, "return redis.REDIS_VERSION_NUM"), Resp::Int(number));
    assert_eq!(eval(&mut c, "return redis.breakpoint()"), Resp::Bulk(None));
    assert_eq!(eval(&mut c, "return redis.debug('x')"), Resp::Bulk(None));
    // acl_check_cmd answers for the script's caller.
    assert_eq!(eval(&mut c, "return redis.acl_check_cmd('set', 'k', 'v')"), Resp::Int(1));
    assert_eq!(c.cmd(&["ACL", "SETUSER", "reader", "on", "nopass", "+eval", "+get", "~app:*"]), st("OK"));
    let mut r = s.raw();
    assert_eq!(r.cmd(&["AUTH", "reader", "x"]), st("OK"));
    let checks = "return {redis.acl_check_cmd('get', 'app:1'), redis.acl_check_cmd('set', 'app:1', 'v'), \
                  redis.acl_check_cmd('get', 'other'), redis.acl_check_cmd('get')}";
    // true, false, false, true: Lua's booleans, as Redis converts them.
    assert_eq!(eval(&mut r, checks), arr(vec![Resp::Int(1), Resp::Bulk(None), Resp::Bulk(None), Resp::Int(1)]));
    pong(&mut c);
}

/// A script's `TIME` is the time the leader stamped on its entry, so every
/// node, each applying the entry at its own moment and with its own clock,
/// computes the same (a node that read its own clock would store another
/// value than the leader's). A read-only script reads the leader's clock.
#[test]
fn a_scripts_time_is_the_same_on_every_node() {
    use cluster_support::{as_text, err_text, q as cq, serial, Cluster, Opts};
    let _g = serial();
    // Node 3's wall clock runs 5 s ahead: no node may read its own.
    let node_args = std::collections::BTreeMap::from([(3u64, vec!["--wall-clock-offset-ms=5000".to_string()])]);
    let c = Cluster::start(3, Opts { node_args, ..Opts::default() });
    let leader = c.wait_leader(&[1, 2, 3], Duration::from_secs(20));
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let script = "local t = redis.call('TIME') redis.call('SET', KEYS[1], t[1] .. '.' .. t[2]) return t";
    for (round, id) in [leader, leader % 3 + 1].into_iter().enumerate() {
        let key = format!("stamp{round}");
        let mut con = c.node(id).client();
        let before = now();
        let r = cq(&mut con, &["EVAL", script, "1", &key]).unwrap_or_else(|e| panic!("EVAL on node {id}: {}", err_text(&e)));
        let Value::Array(t) = r else { panic!("TIME in a script: {r:?}") };
        let (secs, micros) = (as_text(&t[0]).unwrap(), as_text(&t[1]).unwrap());
        let at: f64 = secs.parse::<f64>().unwrap() + micros.parse::<f64>().unwrap() / 1e6;
        let skew = if leader == 3 { 5.0 } else { 0.0 };
        assert!((at - before - skew).abs() < 30.0, "TIME {at} against {before} (leader {leader})");
        let stored = format!("{secs}.{micros}");
        let got = cq(&mut con, &["GET", &key]).unwrap();
        assert_eq!(as_text(&got).as_deref(), Some(stored.as_str()));
    }
    // Every node's own keyspace (reads go to the leader): the same digest
    // once each has applied the same index.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let digests: Vec<Value> = [1u64, 2, 3]
            .iter()
            .map(|id| cq(&mut c.node(*id).client(), &["RAFT.DIGEST"]).unwrap())
            .collect();
        let index = |d: &Value| match d {
            Value::Array(parts) => format!("{:?}", parts[0]),
            other => panic!("RAFT.DIGEST: {other:?}"),
        };
        if digests.iter().all(|d| index(d) == index(&digests[0])) {
            assert!(digests.iter().all(|d| *d == digests[0]), "the nodes stored different times: {digests:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the nodes never applied the same index: {digests:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut con = c.node(leader).client();
    let r = cq(&mut con, &["EVAL_RO", "return redis.call('TIME')", "0"]).unwrap();
    assert!(matches!(&r, Value::Array(t) if t.len() == 2), "{r:?}");
}

/// Commands Redis 7 allows inside scripts that are deterministic: PING, ECHO.
#[test]
fn ping_and_echo_from_scripts() {
    let s = TestServer::start();
    let mut c = s.raw();
    // Redis 7.0.15: +PONG and $1 x
    assert_eq!(c.cmd(&["EVAL", "return redis.call('ping')", "0"]), st("PONG"));
    assert_eq!(c.cmd(&["EVAL", "return redis.call('echo', 'x')", "0"]), b("x"));
}

#[test]
fn commands_refused_inside_scripts() {
    let s = TestServer::start();
    let mut c = s.raw();
    for script in [
        "return redis.call('eval', 'return 1', '0')",
        "return redis.call('multi')",
        "return redis.call('exec')",
        "return redis.call('subscribe', 'ch')",
        "return redis.call('script', 'load', 'return 1')",
    ] {
        let e = err(c.cmd(&["EVAL", script, "0"]), script);
        // Redis 7.0.15: "ERR This Redis command is not allowed from script script: <sha>, on @user_script:1."
        assert!(e.starts_with("ERR This Redis command is not allowed from script"), "{script}: {e}");
    }
    pong(&mut c);
}

/// Redis 7 refuses blocking list commands inside scripts.
#[test]
fn blocking_pops_are_refused_inside_scripts() {
    let s = TestServer::start();
    let mut c = s.raw();
    for script in ["return redis.call('blpop', 'l', '0')", "return redis.call('brpop', 'l', '1')"] {
        // Redis 7.0.15: -ERR This Redis command is not allowed from script script: <sha>, on @user_script:1.
        match c.cmd(&["EVAL", script, "0"]) {
            Resp::Error(e) => assert!(e.starts_with("ERR This Redis command is not allowed from script"), "{script}: {e}"),
            other => panic!("{script}: Redis 7 replies -ERR This Redis command is not allowed from script ...; raftlock replied {other:?}"),
        }
    }
    pong(&mut c);
}

/// Error texts, exactly as Redis 7.0 replies them (collected: every mismatch is
/// listed in the failure message).
#[test]

fn error_texts_match_redis_7() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", "sk", "v"]), st("OK"));
    // (command, expected error; "<sha>" is the script's sha1)
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["EVAL", "return redis.call('incr', KEYS[1])", "1", "sk"],
            "ERR value is not an integer or out of range script: <sha>, on @user_script:1."),
        (vec!["EVAL", "local a = 1\nreturn redis.call('incr', KEYS[1])", "1", "sk"],
            "ERR value is not an integer or out of range script: <sha>, on @user_script:2."),
        (vec!["EVAL", "return redis.call('nosuchcmd')", "0"],
            "ERR Unknown Redis command called from script script: <sha>, on @user_script:1."),
        (vec!["EVAL", "return redis.pcall('nosuchcmd')", "0"],
            "ERR Unknown Redis command called from script"),
        (vec!["EVAL", "return redis.call('get')", "0"],
            "ERR Wrong number of args calling Redis command from script script: <sha>, on @user_script:1."),
        (vec!["EVAL", "return redis.call('get', 'a', 'b')", "0"],
            "ERR Wrong number of args calling Redis command from script script: <sha>, on @user_script:1."),
        (vec!["EVAL", "return redis.error_reply('bar')", "0"], "ERR bar"),
        (vec!["EVAL", "return redis.error_reply('-FOO bar')", "0"], "FOO bar"),
        (vec!["EVAL", "return {err='nocode'}", "0"], "nocode"),
        (vec!["EVAL", "error('boom')", "0"],
            "ERR user_script:1: boom script: <sha>, on @user_script:1."),
        (vec!["EVAL", "local a = 1\nerror('boom')", "0"],
            "ERR user_script:2: boom script: <sha>, on @user_script:2."),
        (vec!["EVAL", "error({err='X y'})", "0"], "X y script: <sha>, on @user_script:1."),
        (vec!["EVAL", "return 1 +", "0"],
            "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'"),
        (vec!["EVAL", "return os.time()", "0"],
            "ERR user_script:1: Script attempted to access nonexistent global variable 'os' script: <sha>, on @user_script:1."),
        (vec!["EVAL", "x = 5", "0"],
            "ERR user_script:1: Attempt to modify a readonly table script: <sha>, on @user_script:1."),
        (vec!["EVAL", "return redis.call('eval', 'return 1', '0')", "0"],
            "ERR This Redis command is not allowed from script script: <sha>, on @user_script:1."),
        (vec!["EVAL_RO", "return redis.call('del', KEYS[1])", "1", "x"],
            "ERR Write commands are not allowed from read-only scripts. script: <sha>, on @user_script:1."),
        (vec!["EVAL_RO", "return redis.pcall('del', KEYS[1])", "1", "x"],
            "ERR Write commands are not allowed from read-only scripts."),
        (vec!["SCRIPT", "foo"], "ERR unknown subcommand 'foo'. Try SCRIPT HELP."),
        (vec!["SCRIPT", "FLUSH", "bad"], "ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
        (vec!["SCRIPT", "LOAD"], "ERR wrong number of arguments for 'script|load' command"),
        (vec!["SCRIPT", "EXISTS"], "ERR wrong number of arguments for 'script|exists' command"),
    ];
    let mut mismatches = Vec::new();
    for (args, expected) in &cases {
        let expected = if expected.contains("<sha>") {
            let sha = load(&mut c, args[1]);
            expected.replace("<sha>", &sha)
        } else {
            expected.to_string()
        };
        match c.cmd(args) {
            Resp::Error(e) if e == expected => {}
            other => mismatches.push(format!("  {args:?}\n     redis 7: -{expected}\n    raftlock: {other:?}")),
        }
    }
    pong(&mut c);
    assert!(mismatches.is_empty(), "{} of {} error replies differ from Redis 7.0:\n{}", mismatches.len(), cases.len(), mismatches.join("\n"));
}

// ---------------------------------------------------------------------------------
// the script cache
// ---------------------------------------------------------------------------------

#[test]
fn script_load_evalsha_exists_flush() {
    let s = TestServer::start();
    let mut c = s.raw();
    // The sha is SHA1 of the body (checked against Redis 7.0.15).
    let sha = load(&mut c, "return 'hi'");
    assert_eq!(sha, "2f31ba2bb6d6a0f42cc159d2e2dad55440778de3");
    assert_eq!(c.cmd(&["EVALSHA", &sha, "0"]), b("hi"));
    // Case-insensitive sha, in EVALSHA and SCRIPT EXISTS.
    let upper = sha.to_ascii_uppercase();
    assert_eq!(c.cmd(&["EVALSHA", &upper, "0"]), b("hi"));
    assert_eq!(c.cmd(&["evalsha", &upper, "0"]), b("hi"));
    let missing = "ffffffffffffffffffffffffffffffffffffffff";
    assert_eq!(
        c.cmd(&["SCRIPT", "EXISTS", &sha, missing, &upper]),
        arr(vec![Resp::Int(1), Resp::Int(0), Resp::Int(1)])
    );
    // Loading twice is fine and gives the same sha.
    assert_eq!(load(&mut c, "return 'hi'"), sha);
    // KEYS/ARGV through EVALSHA.
    let sha2 = load(&mut c, "return {KEYS[1], ARGV[1]}");
    assert_eq!(c.cmd(&["EVALSHA", &sha2, "1", "k", "a"]), arr(vec![b("k"), b("a")]));
    // A missing sha: exactly Redis's NOSCRIPT text, in every form.
    assert_eq!(c.cmd(&["EVALSHA", missing, "0"]), Resp::Error(NOSCRIPT.into()));
    assert_eq!(c.cmd(&["EVALSHA", "abc", "0"]), Resp::Error(NOSCRIPT.into()));
    assert_eq!(c.cmd(&["EVALSHA_RO", missing, "0"]), Resp::Error(NOSCRIPT.into()));
    // And on the wire, byte for byte.
    c.send(&RawConn::encode(&[b"EVALSHA", missing.as_bytes(), b"0"]));
    assert_eq!(c.read_line().unwrap(), format!("-{NOSCRIPT}"));
    // Through the redis crate too: the code is NOSCRIPT.
    let mut rc = s.client();
    let e = expect_err(q(&mut rc, &["EVALSHA", missing, "0"]));
    assert_eq!(e, NOSCRIPT);
    // FLUSH empties the cache.
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH"]), st("OK"));
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha, &sha2]), arr(vec![Resp::Int(0), Resp::Int(0)]));
    assert_eq!(c.cmd(&["EVALSHA", &sha, "0"]), Resp::Error(NOSCRIPT.into()));
    assert_eq!(load(&mut c, "return 'hi'"), sha);
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH", "ASYNC"]), st("OK"));
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha]), arr(vec![Resp::Int(0)]));
    assert_eq!(load(&mut c, "return 'hi'"), sha);
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH", "SYNC"]), st("OK"));
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha]), arr(vec![Resp::Int(0)]));
    // Wrong arity of the subcommands.
    assert_eq!(err(c.cmd(&["SCRIPT", "LOAD", "a", "b"]), "LOAD 2 args"), "ERR wrong number of arguments for 'script|load' command");
    assert_eq!(c.cmd(&["SCRIPT", "KILL"]), Resp::Error("NOTBUSY No scripts in execution right now.".into()));
}

#[test]
fn eval_caches_the_script() {
    let s = TestServer::start();
    let mut c = s.raw();
    let body = "return 'cached:' .. ARGV[1]";
    // sha known from Redis: SCRIPT LOAD of the same body on a fresh connection would
    // add it; instead compute it with redis.sha1hex, which must agree.
    let sha = c.cmd(&["EVAL", "return redis.sha1hex(ARGV[1])", "0", body]).text().unwrap();
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha]), arr(vec![Resp::Int(0)]));
    assert_eq!(c.cmd(&["EVALSHA", &sha, "0", "x"]), Resp::Error(NOSCRIPT.into()));
    assert_eq!(c.cmd(&["EVAL", body, "0", "1"]), b("cached:1"));
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha]), arr(vec![Resp::Int(1)]));
    assert_eq!(c.cmd(&["EVALSHA", &sha, "0", "2"]), b("cached:2"));
    // Another connection sees it too.
    let mut c2 = s.raw();
    assert_eq!(c2.cmd(&["EVALSHA", &sha, "0", "3"]), b("cached:3"));
    // A script that fails at run time is still cached (Redis caches on compile).
    let failing = "return redis.call('incr', KEYS[1])";
    let fsha = c.cmd(&["EVAL", "return redis.sha1hex(ARGV[1])", "0", failing]).text().unwrap();
    assert_eq!(c.cmd(&["SET", "s", "str"]), st("OK"));
    assert!(matches!(c.cmd(&["EVAL", failing, "1", "s"]), Resp::Error(_)));
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &fsha]), arr(vec![Resp::Int(1)]));
    assert_eq!(c.cmd(&["EVALSHA", &fsha, "1", "n"]), Resp::Int(1));
}

#[test]
fn eval_ro_refuses_writes() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", "sk", "v"]), st("OK"));
    // Reads work.
    assert_eq!(c.cmd(&["EVAL_RO", "return redis.call('get', KEYS[1])", "1", "sk"]), b("v"));
    assert_eq!(c.cmd(&["EVAL_RO", "return 1", "0"]), Resp::Int(1));
    // Writes are refused with Redis's text, and nothing is written.
    for script in [
        "return redis.call('set', KEYS[1], 'x')",
        "return redis.call('del', KEYS[1])",
        "return redis.call('lpush', KEYS[1], 'x')",
        "return redis.call('hset', KEYS[1], 'f', 'x')",
        "return redis.call('zadd', KEYS[1], 1, 'x')",
        "return redis.call('expire', KEYS[1], 100)",
    ] {
        let e = err(c.cmd(&["EVAL_RO", script, "1", "sk"]), script);
        assert!(e.starts_with("ERR Write commands are not allowed from read-only scripts."), "{script}: {e}");
    }
    assert_eq!(
        c.cmd(&["EVAL_RO", "return redis.pcall('set', KEYS[1], 'x')", "1", "sk"]),
        Resp::Error("ERR Write commands are not allowed from read-only scripts.".into())
    );
    assert_eq!(c.cmd(&["GET", "sk"]), b("v"));
    assert_eq!(c.cmd(&["TTL", "sk"]), Resp::Int(-1));
    assert_eq!(c.cmd(&["DBSIZE"]), Resp::Int(1));
    // EVALSHA_RO: the same rules for a cached script.
    let rd = load(&mut c, "return redis.call('get', KEYS[1])");
    let wr = load(&mut c, "return redis.call('set', KEYS[1], 'changed')");
    assert_eq!(c.cmd(&["EVALSHA_RO", &rd, "1", "sk"]), b("v"));
    let e = err(c.cmd(&["EVALSHA_RO", &wr, "1", "sk"]), "EVALSHA_RO write");
    assert!(e.starts_with("ERR Write commands are not allowed from read-only scripts."), "{e}");
    assert_eq!(c.cmd(&["GET", "sk"]), b("v"));
    // The same cached script runs writable through EVALSHA.
    assert_eq!(c.cmd(&["EVALSHA", &wr, "1", "sk"]), st("OK"));
    assert_eq!(c.cmd(&["GET", "sk"]), b("changed"));
}

// ---------------------------------------------------------------------------------
// lock libraries' scripts, tokens
// ---------------------------------------------------------------------------------

#[test]
fn redis_py_lock_scripts() {
    let s = TestServer::start();
    let mut c = s.raw();
    let release = load(&mut c, PY_RELEASE);
    let extend = load(&mut c, PY_EXTEND);
    let reacquire = load(&mut c, PY_REACQUIRE);

    // acquire as redis-py does
    assert_eq!(c.cmd(&["SET", "lock:a", "tok-1", "NX", "PX", "10000"]), st("OK"));
    assert_eq!(c.cmd(&["SET", "lock:a", "tok-2", "NX", "PX", "10000"]), Resp::Bulk(None));
    let token = token_of(&mut c, "lock:a");

    // extend, additive (ARGV[3] == "0"): ttl goes from ~10 s to ~30 s
    assert_eq!(c.cmd(&["EVALSHA", &extend, "1", "lock:a", "tok-1", "20000", "0"]), Resp::Int(1));
    let pttl = match c.cmd(&["PTTL", "lock:a"]) {
        Resp::Int(n) => n,
        other => panic!("PTTL {other:?}"),
    };
    assert!((25_000..=30_000).contains(&pttl), "additive extend: pttl {pttl}");
    // extend, replacing (ARGV[3] == "1")
    assert_eq!(c.cmd(&["EVALSHA", &extend, "1", "lock:a", "tok-1", "5000", "1"]), Resp::Int(1));
    let pttl = match c.cmd(&["PTTL", "lock:a"]) {
        Resp::Int(n) => n,
        other => panic!("PTTL {other:?}"),
    };
    assert!((3_000..=5_000).contains(&pttl), "replacing extend: pttl {pttl}");
    // wrong token: refused
    assert_eq!(c.cmd(&["EVALSHA", &extend, "1", "lock:a", "tok-x", "5000", "1"]), Resp::Int(0));
    // reacquire
    assert_eq!(c.cmd(&["EVALSHA", &reacquire, "1", "lock:a", "tok-1", "60000"]), Resp::Int(1));
    let pttl = match c.cmd(&["PTTL", "lock:a"]) {
        Resp::Int(n) => n,
        other => panic!("PTTL {other:?}"),
    };
    assert!((55_000..=60_000).contains(&pttl), "reacquire: pttl {pttl}");
    assert_eq!(c.cmd(&["EVALSHA", &reacquire, "1", "lock:a", "tok-x", "60000"]), Resp::Int(0));
    // The lock still is the same grant: same fencing token.
    assert_eq!(token_of(&mut c, "lock:a"), token);
    // release with the wrong token: kept
    assert_eq!(c.cmd(&["EVALSHA", &release, "1", "lock:a", "tok-x"]), Resp::Int(0));
    assert_eq!(c.cmd(&["GET", "lock:a"]), b("tok-1"));
    // release with the right token: gone
    assert_eq!(c.cmd(&["EVALSHA", &release, "1", "lock:a", "tok-1"]), Resp::Int(1));
    assert_eq!(c.cmd(&["EXISTS", "lock:a"]), Resp::Int(0));
    // release / extend of a missing lock
    assert_eq!(c.cmd(&["EVALSHA", &release, "1", "lock:a", "tok-1"]), Resp::Int(0));
    assert_eq!(c.cmd(&["EVALSHA", &extend, "1", "lock:a", "tok-1", "5000", "0"]), Resp::Int(0));
    // extend of a lock without a TTL: 0 (pttl < 0)
    assert_eq!(c.cmd(&["SET", "lock:b", "tok-1"]), st("OK"));
    assert_eq!(c.cmd(&["EVALSHA", &extend, "1", "lock:b", "tok-1", "5000", "0"]), Resp::Int(0));
    // A new holder gets a higher token.
    assert_eq!(c.cmd(&["SET", "lock:a", "tok-2", "NX", "PX", "10000"]), st("OK"));
    assert!(token_of(&mut c, "lock:a") > token);
    // The libraries' fallback: EVALSHA -> NOSCRIPT -> EVAL.
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH"]), st("OK"));
    assert_eq!(c.cmd(&["EVALSHA", &release, "1", "lock:a", "tok-2"]), Resp::Error(NOSCRIPT.into()));
    assert_eq!(c.cmd(&["EVAL", PY_RELEASE, "1", "lock:a", "tok-2"]), Resp::Int(1));
    assert_eq!(c.cmd(&["EXISTS", "lock:a"]), Resp::Int(0));
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &release]), arr(vec![Resp::Int(1)]));
}

/// The python-redis-lock release script (DEL + LPUSH signal + PEXPIRE), which
/// redis-py's `register_script` runs through EVALSHA.
#[test]
fn python_redis_lock_unlock_script() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", "lock:n", "id-1", "NX", "EX", "30"]), st("OK"));
    let sha = load(&mut c, PYTHON_REDIS_LOCK_UNLOCK);
    assert_eq!(c.cmd(&["EVALSHA", &sha, "2", "lock:n", "lock-signal:n", "id-2", "1000"]), Resp::Int(1));
    assert_eq!(c.cmd(&["EXISTS", "lock-signal:n"]), Resp::Int(0));
    assert_eq!(c.cmd(&["EVALSHA", &sha, "2", "lock:n", "lock-signal:n", "id-1", "1000"]), Resp::Int(0));
    assert_eq!(c.cmd(&["EXISTS", "lock:n"]), Resp::Int(0));
    assert_eq!(c.cmd(&["LRANGE", "lock-signal:n", "0", "-1"]), arr(vec![b("1")]));
    let pttl = match c.cmd(&["PTTL", "lock-signal:n"]) {
        Resp::Int(n) => n,
        other => panic!("PTTL {other:?}"),
    };
    assert!((1..=1000).contains(&pttl), "signal pttl {pttl}");
}

#[test]
fn script_writes_get_distinct_increasing_tokens() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", "before", "o", "NX", "PX", "30000"]), st("OK"));
    let t0 = token_of(&mut c, "before");
    let script = "redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', 30000)
                  redis.call('set', KEYS[2], ARGV[1], 'NX', 'PX', 30000)
                  redis.call('set', KEYS[3], ARGV[1], 'NX', 'PX', 30000)
                  return 1";
    assert_eq!(c.cmd(&["EVAL", script, "3", "k1", "k2", "k3", "me"]), Resp::Int(1));
    let (t1, t2, t3) = (token_of(&mut c, "k1"), token_of(&mut c, "k2"), token_of(&mut c, "k3"));
    assert!(t0 < t1 && t1 < t2 && t2 < t3, "tokens must strictly increase: before={t0} k1={t1} k2={t2} k3={t3}");
    // A later grant is higher than all of them.
    assert_eq!(c.cmd(&["SET", "after", "o", "NX", "PX", "30000"]), st("OK"));
    let t4 = token_of(&mut c, "after");
    assert!(t4 > t3, "after={t4} k3={t3}");
    // Through EVALSHA and LOCK.ACQUIRE inside a script as well.
    let sha = load(&mut c, "return {redis.call('lock.acquire', KEYS[1], 'o', 30000), redis.call('lock.acquire', KEYS[2], 'o', 30000)}");
    let r = c.cmd(&["EVALSHA", &sha, "2", "m1", "m2"]);
    let items = r.items();
    let (a1, a2) = match (&items[0], &items[1]) {
        (Resp::Int(a), Resp::Int(b)) => (*a, *b),
        _ => panic!("LOCK.ACQUIRE from a script replied {r:?}"),
    };
    assert!(t4 < a1 && a1 < a2, "after={t4} m1={a1} m2={a2}");
    assert_eq!(token_of(&mut c, "m1"), a1);
    assert_eq!(token_of(&mut c, "m2"), a2);
}

/// DESIGN.md §3: a stale `LOCK.FENCE` inside a script raises an error.
#[test]
fn stale_fence_inside_a_script_raises() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["LOCK.FENCE", "res", "10"]), Resp::Int(10));
    let e = err(c.cmd(&["EVAL", "redis.call('lock.fence', KEYS[1], 5); return 'not reached'", "1", "res"]), "stale fence");
    assert!(e.starts_with("STALE"), "{e}");
    assert_eq!(
        c.cmd(&["EVAL", "return redis.call('lock.fence', KEYS[1], 12)", "1", "res"]),
        Resp::Int(12)
    );
    assert_eq!(c.cmd(&["GET", "res"]), b("12"));
}

// ---------------------------------------------------------------------------------
// sandbox and budget
// ---------------------------------------------------------------------------------

#[test]
fn sandbox_escapes_fail_and_the_server_keeps_serving() {
    let s = TestServer::start();
    let mut c = s.raw();
    // (script, a phrase the error must contain; Redis 7's own wording)
    let cases: &[(&str, &str)] = &[
        ("return os.time()", "Script attempted to access nonexistent global variable 'os'"),
        ("return os.execute('true')", "Script attempted to access nonexistent global variable 'os'"),
        ("return io.open('/etc/passwd')", "Script attempted to access nonexistent global variable 'io'"),
        ("return io.popen('id')", "Script attempted to access nonexistent global variable 'io'"),
        ("return require('os')", "Script attempted to access nonexistent global variable 'require'"),
        ("return dofile('/etc/passwd')", "Script attempted to access nonexistent global variable 'dofile'"),
        ("return loadfile('/etc/passwd')", "Script attempted to access nonexistent global variable 'loadfile'"),
        ("return getfenv()", "Script attempted to access nonexistent global variable 'getfenv'"),
        // Reading a missing global through _G trips the same guard as reading it bare.
        ("return _G.os.time()", "Script attempted to access nonexistent global variable 'os'"),
        ("x = 5", "Attempt to modify a readonly table"),
        ("_G.x = 5", "Attempt to modify a readonly table"),
        ("KEYS = nil", "Attempt to modify a readonly table"),
        ("redis.call = nil", "Attempt to modify a readonly table"),
        ("string.foo = 1", "Attempt to modify a readonly table"),
        ("redis = nil", "Attempt to modify a readonly table"),
        ("function f() return 1 end", "Attempt to modify a readonly table"),
        // bytecode: loadstring of "\27Lua..." gives no function; calling it fails
        ("local f = loadstring(string.char(27) .. 'LuaQ' .. string.rep(string.char(0), 20)); return f()",
            "attempt to call local 'f' (a nil value)"),
        // loadstring refuses a binary chunk; assert raises loadstring's message.
        ("local f = assert(loadstring(string.char(27) .. 'Lua')); return f()", "loading binary chunks is not allowed"),
    ];
    for (script, phrase) in cases {
        let e = err(c.cmd(&["EVAL", script, "0"]), script);
        assert!(e.starts_with("ERR"), "{script}: {e}");
        assert!(e.contains(phrase), "{script}: error {e:?} lacks {phrase:?}");
        pong(&mut c);
    }
    // loadstring of bytecode returns nil and a message, as Redis does.
    assert_eq!(
        c.cmd(&["EVAL", "local f, e = loadstring(string.char(27) .. 'LuaQ'); return {type(f), type(e)}", "0"]),
        arr(vec![b("nil"), b("string")])
    );
    // Nothing leaked into the next script's globals.
    let e = err(c.cmd(&["EVAL", "return x", "0"]), "x");
    assert!(e.contains("Script attempted to access nonexistent global variable 'x'"), "{e}");
    assert_eq!(c.cmd(&["EVAL", "return type(redis.call)", "0"]), b("function"));
    assert_eq!(c.cmd(&["EVAL", "return #KEYS", "1", "k"]), Resp::Int(1));
    // Local variables and functions are fine.
    assert_eq!(c.cmd(&["EVAL", "local function f(a) return a * 2 end local y = f(21) return y", "0"]), Resp::Int(42));
    // The server is fine: new connections, writes.
    let mut c2 = s.raw();
    pong(&mut c2);
    assert_eq!(c2.cmd(&["SET", "after", "1"]), st("OK"));
    assert_eq!(c2.cmd(&["GET", "after"]), b("1"));
}

/// `rawset(_G, ...)` is a global write too; Redis 7 refuses it.
#[test]

fn sandbox_rawset_on_globals_is_refused() {
    let s = TestServer::start();
    let mut c = s.raw();
    // Redis 7.0.15: -ERR Attempt to modify a readonly table script: <sha>, on @user_script:1.
    let r = c.cmd(&["EVAL", "return rawset(_G, 'x', 1)", "0"]);
    match &r {
        Resp::Error(e) => assert!(e.contains("Attempt to modify a readonly table"), "{e}"),
        other => panic!("rawset(_G, 'x', 1) must fail like Redis 7 (-ERR Attempt to modify a readonly table ...), got {other:?}"),
    }
    pong(&mut c);
}

/// The budget error (Redis has a time limit instead, and no such text).
const BUDGET_ERROR: &str = "ERR Script exceeded the budget of 50000000 Lua instructions and was stopped \
     (at the same point on every node); nothing after that point was applied";

#[test]
fn script_over_budget_fails_and_the_server_keeps_serving() {
    let s = TestServer::start();
    let mut c = s.raw();
    // The budget counts Lua instructions, so how long a script runs before it is
    // stopped depends on the machine; the reply must come, bounded by this timeout
    // (how fast belongs in the benchmarks).
    c.stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    for script in [
        "while true do end",
        "local i = 0; while true do i = i + 1 end",
        // a Lua pcall must not swallow the budget error
        "local ok = pcall(function() while true do end end) return 'swallowed'",
        "for i = 1, 1e12 do local x = i * 2 end return 1",
    ] {
        let e = err(c.cmd(&["EVAL", script, "0"]), script);
        assert_eq!(e, BUDGET_ERROR, "{script}");
        pong(&mut c);
    }
    // Deterministic: the same script fails the same way again.
    let e1 = err(c.cmd(&["EVAL", "while true do end", "0"]), "again");
    let e2 = err(c.cmd(&["EVAL", "while true do end", "0"]), "again");
    assert_eq!(e1, e2);
    // A heavy but bounded script still completes.
    assert_eq!(
        c.cmd(&["EVAL", "local s = 0 for i = 1, 1000000 do s = s + i end return s", "0"]),
        Resp::Int(500000500000)
    );
    let mut c2 = s.raw();
    assert_eq!(c2.cmd(&["SET", "after", "1"]), st("OK"));
    pong(&mut c2);
}

/// A script that runs to its budget holds the state machine, not the node:
/// with one worker thread (the default), the apply first hands the
/// runtime's other tasks to another thread, so other clients' local commands
/// are answered while it runs, and so are they while a read waits for the
/// state the script holds. Judged by order, not time: a PING sent a quarter
/// of the way into the run comes back before the script's reply.
#[test]
fn other_clients_are_answered_while_a_script_runs_to_its_budget() {
    let s = TestServer::start_with_env(&[("RAFTLOCK_WORKER_THREADS", "1")]);
    let mut busy = s.raw();
    busy.stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    // Slow per instruction (a new string each time round), so that a run
    // lasts long enough to be sure of the order. How long it lasts here:
    const SLOW: &str = "while true do local s = string.rep('x', 64) end";
    let started = std::time::Instant::now();
    assert_eq!(err(busy.cmd(&["EVAL", SLOW, "0"]), "first run"), BUDGET_ERROR);
    let run = started.elapsed();
    let mut other = s.raw();
    pong(&mut other);
    let mut reader = s.raw();
    reader.stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    for round in 0..3 {
        busy.send(&RawConn::encode(&[b"EVAL", SLOW.as_bytes(), b"0"]));
        std::thread::sleep(run / 4);
        // A read waits for the state the script holds, but not in a way
        // that stops the PING behind it.
        reader.send(&RawConn::encode(&[b"GET", b"k"]));
        std::thread::sleep(run / 20);
        pong(&mut other);
        // The script's reply has not come yet.
        busy.stream.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let early = busy.stream.peek(&mut byte);
        busy.stream.set_nonblocking(false).unwrap();
        assert!(
            matches!(&early, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "round {round}: the PING came back only after the script ({run:?} a run) had finished: {early:?}"
        );
        assert_eq!(err(busy.read().unwrap(), "budget"), BUDGET_ERROR);
        assert_eq!(reader.read().unwrap(), Resp::Bulk(None));
    }
}

// ---------------------------------------------------------------------------------
// durability
// ---------------------------------------------------------------------------------

#[test]
fn script_cache_and_effects_survive_kill9() {
    let mut s = TestServer::start();
    let (sha, sha_evaled, token) = {
        let mut c = s.raw();
        let sha = load(&mut c, "return redis.call('incr', KEYS[1])");
        let evaled = "redis.call('hset', KEYS[1], 'f', ARGV[1]) redis.call('rpush', KEYS[2], ARGV[1]) redis.call('set', KEYS[3], ARGV[1], 'NX', 'PX', 600000) return 1";
        assert_eq!(c.cmd(&["EVAL", evaled, "3", "h", "l", "lk", "v1"]), Resp::Int(1));
        let sha_evaled = c.cmd(&["EVAL", "return redis.sha1hex(ARGV[1])", "0", evaled]).text().unwrap();
        assert_eq!(c.cmd(&["EVALSHA", &sha, "1", "ctr"]), Resp::Int(1));
        assert_eq!(c.cmd(&["EVALSHA", &sha, "1", "ctr"]), Resp::Int(2));
        let token = token_of(&mut c, "lk");
        (sha, sha_evaled, token)
    };
    s.kill9();
    s.restart();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha, &sha_evaled]), arr(vec![Resp::Int(1), Resp::Int(1)]));
    assert_eq!(c.cmd(&["GET", "ctr"]), b("2"));
    assert_eq!(c.cmd(&["HGET", "h", "f"]), b("v1"));
    assert_eq!(c.cmd(&["LRANGE", "l", "0", "-1"]), arr(vec![b("v1")]));
    assert_eq!(c.cmd(&["GET", "lk"]), b("v1"));
    assert_eq!(token_of(&mut c, "lk"), token);
    // The cached scripts run without being sent again.
    assert_eq!(c.cmd(&["EVALSHA", &sha, "1", "ctr"]), Resp::Int(3));
    assert_eq!(c.cmd(&["EVALSHA", &sha_evaled, "3", "h", "l", "lk2", "v2"]), Resp::Int(1));
    assert!(token_of(&mut c, "lk2") > token);
    // A SCRIPT FLUSH is durable as well.
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH"]), st("OK"));
    drop(c);
    s.kill9();
    s.restart();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha, &sha_evaled]), arr(vec![Resp::Int(0), Resp::Int(0)]));
    assert_eq!(c.cmd(&["EVALSHA", &sha, "1", "ctr"]), Resp::Error(NOSCRIPT.into()));
    assert_eq!(c.cmd(&["GET", "ctr"]), b("3"));
}

/// The script cache is in snapshots too: after `SCRIPT LOAD`, enough entries that a
/// snapshot covers it and the log behind that snapshot is purged (so the entry that
/// loaded the script is no longer in the log); after kill -9 the node starts from the
/// snapshot, and `EVALSHA` still finds the script.
#[test]
fn script_cache_survives_restart_from_a_snapshot() {
    const EVERY: u64 = 20;
    let mut s = TestServer::start_with_env(&[("RAFTLOCK_SNAPSHOT_LOGS", "20")]);
    let (sha, loaded_at) = {
        let mut c = s.raw();
        let sha = load(&mut c, "return 'from snapshot'");
        assert_eq!(c.cmd(&["SET", "k", "v"]), st("OK"));
        // Both were applied before their replies: their entries are at or below this.
        (sha, s.raft_info().num("applied_index"))
    };
    s.restart_from_snapshot(loaded_at, EVERY, "SCRIPT LOAD");
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha]), arr(vec![Resp::Int(1)]));
    assert_eq!(c.cmd(&["EVALSHA", &sha, "0"]), b("from snapshot"));
    assert_eq!(c.cmd(&["GET", "k"]), b("v"));
}

// ---------------------------------------------------------------------------------
// cluster
// ---------------------------------------------------------------------------------

#[test]
fn script_load_on_one_node_serves_evalsha_on_every_node() {
    use cluster_support::{as_text, err_text, lock_info, q as cq, serial, Cluster, Opts};
    let _g = serial();
    let c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(&[1, 2, 3], Duration::from_secs(20));
    let follower = [1u64, 2, 3].into_iter().find(|i| *i != leader).unwrap();
    let body = "redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', 60000) return redis.call('get', KEYS[1])";
    // SCRIPT LOAD on a follower.
    let mut con = c.node(follower).client();
    let sha = as_text(&cq(&mut con, &["SCRIPT", "LOAD", body]).unwrap()).unwrap();
    assert_eq!(sha.len(), 40);
    // Every node knows it and runs it.
    for id in [1u64, 2, 3] {
        let mut con = c.node(id).client();
        let exists = cq(&mut con, &["SCRIPT", "EXISTS", &sha]).unwrap_or_else(|e| panic!("node {id}: {}", err_text(&e)));
        assert_eq!(exists, Value::Array(vec![Value::Int(1)]), "SCRIPT EXISTS on node {id}");
        let key = format!("k{id}");
        let r = cq(&mut con, &["EVALSHA", &sha, "1", &key, &format!("owner-{id}")])
            .unwrap_or_else(|e| panic!("EVALSHA on node {id}: {}", err_text(&e)));
        assert_eq!(as_text(&r).as_deref(), Some(format!("owner-{id}").as_str()), "EVALSHA on node {id}");
        // Read-only variant too.
        let r = cq(&mut con, &["EVALSHA_RO", &sha.to_ascii_uppercase(), "1", &key, "x"]);
        // The body writes (SET NX), so EVALSHA_RO must refuse it on every node.
        let e = err_text(&r.expect_err("EVALSHA_RO of a writing script"));
        assert!(e.starts_with("ERR Write commands are not allowed from read-only scripts."), "node {id}: {e}");
    }
    // The effects (with their tokens) are the same on every node.
    let mut tokens = Vec::new();
    for key in ["k1", "k2", "k3"] {
        let mut seen = Vec::new();
        for id in [1u64, 2, 3] {
            let mut con = c.node(id).client();
            seen.push(lock_info(&mut con, key).unwrap().expect("key present"));
        }
        assert!(seen.windows(2).all(|w| w[0].owner == w[1].owner && w[0].token == w[1].token), "{key}: {seen:?}");
        tokens.push(seen[0].token);
    }
    assert!(tokens[0] < tokens[1] && tokens[1] < tokens[2], "{tokens:?}");
    // SCRIPT FLUSH on another node empties every node's cache.
    let other = [1u64, 2, 3].into_iter().find(|i| *i != follower).unwrap();
    let mut con = c.node(other).client();
    assert_eq!(cq(&mut con, &["SCRIPT", "FLUSH"]).unwrap(), Value::Okay);
    for id in [1u64, 2, 3] {
        let mut con = c.node(id).client();
        let e = cq(&mut con, &["EVALSHA", &sha, "1", "kx", "o"]).expect_err("after FLUSH");
        assert_eq!(err_text(&e), NOSCRIPT, "node {id}");
    }
}

// ---------------------------------------------------------------------------------
// functions
// ---------------------------------------------------------------------------------

const LIBRARY: &str = "#!lua name=counter\n\
    redis.register_function('bump', function(keys, args) return redis.call('INCRBY', keys[1], args[1]) end)\n\
    redis.register_function{function_name='peek', callback=function(keys) return redis.call('GET', keys[1]) end, flags={'no-writes'}}\n";

/// `FUNCTION DUMP` of a private real redis-server with LIBRARY loaded (its
/// code LZF-compressed, as Redis writes strings over 20 bytes).
fn redis_dump_of_library() -> Option<Vec<u8>> {
    let port = common::free_ports(1)[0];
    let dir = tempfile::tempdir().ok()?;
    let mut child = std::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let addr = format!("127.0.0.1:{port}");
    common::poll_until(Duration::from_secs(10), "redis-server to answer", || {
        std::net::TcpStream::connect(&addr).ok().map(|_| ())
    });
    let mut c = RawConn::connect(&addr);
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", LIBRARY]), b("counter"));
    let payload = match c.cmd(&["FUNCTION", "DUMP"]) {
        Resp::Bulk(Some(p)) => p,
        other => panic!("FUNCTION DUMP on redis-server: {other:?}"),
    };
    let _ = child.kill();
    let _ = child.wait();
    Some(payload)
}

/// Functions are replicated state: loaded libraries survive kill -9 (the
/// log replayed) and a restart from a snapshot (format 5 carries them);
/// `FUNCTION DUMP` and `RESTORE` carry them between raftlock and Redis in
/// both directions, with Redis's three policies; `FCALL` runs inside
/// `MULTI` and reports errors in Redis's words.
#[test]
fn functions_survive_restarts_and_travel_by_dump_and_restore() {
    let mut s = TestServer::start_with_env(&[("RAFTLOCK_SNAPSHOT_LOGS", "20")]);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", LIBRARY]), b("counter"));
    assert_eq!(c.cmd(&["FCALL", "bump", "1", "n", "5"]), Resp::Int(5));
    s.kill9();
    s.restart();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["FCALL", "bump", "1", "n", "2"]), Resp::Int(7), "after a log replay");
    let written_at = s.raft_info().num("applied_index");
    s.restart_from_snapshot(written_at, 20, "the library");
    let mut c = s.raw();
    assert_eq!(c.cmd(&["FCALL_RO", "peek", "1", "n"]), b("7"), "after a restart from a snapshot");

    // In a transaction, beside other writes.
    assert_eq!(c.cmd(&["MULTI"]), st("OK"));
    assert_eq!(c.cmd(&["FCALL", "bump", "1", "n", "1"]), st("QUEUED"));
    assert_eq!(c.cmd(&["SET", "m", "x"]), st("QUEUED"));
    assert_eq!(c.cmd(&["EXEC"]), arr(vec![Resp::Int(8), st("OK")]));

    // An error inside a function is named by the function, as in Redis.
    let e = err(c.cmd(&["FCALL", "bump", "1", "m", "1"]), "INCRBY of a string");
    assert_eq!(e, "ERR value is not an integer or out of range script: bump, on @user_function:2.");

    // DUMP, FLUSH, RESTORE here.
    let Resp::Bulk(Some(ours)) = c.cmd(&["FUNCTION", "DUMP"]) else { panic!("FUNCTION DUMP") };
    assert_eq!(c.cmd(&["FUNCTION", "FLUSH"]), st("OK"));
    assert!(err(c.cmd(&["FCALL", "bump", "1", "n", "1"]), "after FLUSH").contains("Function not found"));
    c.send(&RawConn::encode(&[b"FUNCTION", b"RESTORE", &ours]));
    assert_eq!(c.read().unwrap(), st("OK"));
    assert_eq!(c.cmd(&["FCALL", "bump", "1", "n", "1"]), Resp::Int(9));
    // APPEND (the default) refuses a library that exists; REPLACE takes it.
    c.send(&RawConn::encode(&[b"FUNCTION", b"RESTORE", &ours]));
    assert_eq!(c.read().unwrap(), Resp::Error("ERR Library 'counter' already exists".into()));
    c.send(&RawConn::encode(&[b"FUNCTION", b"RESTORE", &ours, b"REPLACE"]));
    assert_eq!(c.read().unwrap(), st("OK"));
    let mut corrupt = ours.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    c.send(&RawConn::encode(&[b"FUNCTION", b"RESTORE", &corrupt]));
    assert_eq!(c.read().unwrap(), Resp::Error("ERR DUMP payload version or checksum are wrong".into()));

    // Redis's payload (compressed) restores here, and ours in Redis.
    if !common::need_tool("redis-server") {
        return;
    }
    let theirs = redis_dump_of_library().expect("a FUNCTION DUMP from redis-server");
    assert_ne!(theirs, ours, "Redis compresses the code: the payloads differ");
    c.send(&RawConn::encode(&[b"FUNCTION", b"RESTORE", &theirs, b"FLUSH"]));
    assert_eq!(c.read().unwrap(), st("OK"));
    assert_eq!(c.cmd(&["FCALL", "bump", "1", "n", "1"]), Resp::Int(10));
}

#[test]
fn a_function_loaded_on_a_follower_runs_on_every_node() {
    use cluster_support::{err_text, q as cq, serial, Cluster, Opts};
    let _g = serial();
    let c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(&[1, 2, 3], Duration::from_secs(20));
    let follower = [1u64, 2, 3].into_iter().find(|i| *i != leader).unwrap();
    let mut con = c.node(follower).client();
    assert_eq!(cq(&mut con, &["FUNCTION", "LOAD", LIBRARY]).unwrap(), Value::BulkString(b"counter".to_vec()));
    let mut total = 0;
    for id in [1u64, 2, 3] {
        let mut con = c.node(id).client();
        total += id as i64;
        let r = cq(&mut con, &["FCALL", "bump", "1", "n", &id.to_string()]).unwrap_or_else(|e| panic!("node {id}: {}", err_text(&e)));
        assert_eq!(r, Value::Int(total), "FCALL on node {id}");
    }
    for id in [1u64, 2, 3] {
        let mut con = c.node(id).client();
        let r = cq(&mut con, &["FCALL_RO", "peek", "1", "n"]).unwrap_or_else(|e| panic!("node {id}: {}", err_text(&e)));
        assert_eq!(r, Value::BulkString(total.to_string().into_bytes()), "FCALL_RO on node {id}");
        let Value::Array(libs) = cq(&mut con, &["FUNCTION", "LIST"]).unwrap() else { panic!("FUNCTION LIST") };
        assert_eq!(libs.len(), 1, "node {id}");
    }
}

/// A library's own variables start afresh at every call (README): its top
/// level runs again each time, on every node alike, where Redis's one Lua
/// state would count 1, 2.
#[test]
fn a_library_keeps_no_values_between_calls() {
    let s = TestServer::start();
    let mut c = s.raw();
    let code = "#!lua name=count\nlocal n = 0\nredis.register_function('count', function() n = n + 1 return n end)\n";
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", code]), b("count"));
    assert_eq!(c.cmd(&["FCALL", "count", "0"]), Resp::Int(1));
    assert_eq!(c.cmd(&["FCALL", "count", "0"]), Resp::Int(1));
}

/// Redis's `redis` table is read-only inside a function too, and has
/// `register_function` only while the library loads (Redis's own suite:
/// "Try trick readonly table on redis table", "LIBRARIES - register
/// function inside a function").
#[test]
fn a_function_finds_redis_read_only_as_on_redis() {
    let s = TestServer::start();
    let mut c = s.raw();
    let code = "#!lua name=t4\n\
        redis.register_function('t4', function(KEYS, ARGV) redis.call = function() return 42 end return 1 end)\n\
        redis.register_function('t5', function(KEYS, ARGV) return redis.register_function('zz', function() return 1 end) end)\n\
        local reg = redis.register_function\n\
        redis.register_function('t6', function(KEYS, ARGV) return reg('zz', function() return 1 end) end)\n\
        redis.register_function('t7', function(KEYS, ARGV) return type(redis.register_function) end)\n\
        redis.register_function('t8', function(KEYS, ARGV) return redis.call('set', KEYS[1], 'v') end)\n";
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", code]), b("t4"));
    assert_eq!(
        err(c.cmd(&["FCALL", "t4", "0"]), "t4"),
        "ERR user_function:2: Attempt to modify a readonly table script: t4, on @user_function:2."
    );
    assert_eq!(
        err(c.cmd(&["FCALL", "t5", "0"]), "t5"),
        "ERR user_function:3: attempt to call field 'register_function' (a nil value) script: t5, on @user_function:3."
    );
    let e = err(c.cmd(&["FCALL", "t6", "0"]), "t6");
    assert!(e.starts_with("ERR redis.register_function can only be called on FUNCTION LOAD command"), "{e}");
    assert_eq!(c.cmd(&["FCALL", "t7", "0"]), b("nil"));
    // The real `redis.call` is untouched by the earlier attempt.
    assert_eq!(c.cmd(&["FCALL", "t8", "1", "k"]), st("OK"));
    assert_eq!(c.cmd(&["GET", "k"]), b("v"));
}

/// `SCRIPT LOAD` compiles what it is given, as Redis does: a body that is
/// not Lua is refused and not kept (lock libraries' `EVALSHA`-then-load
/// fallbacks rely on `SCRIPT EXISTS`); an `EVAL` of one is not kept either.
#[test]
fn script_load_refuses_what_does_not_compile() {
    let s = TestServer::start();
    let mut c = s.raw();
    let sha_of = |body: &str| sha1_smol::Sha1::from(body).digest().to_string();
    assert_eq!(
        err(c.cmd(&["SCRIPT", "LOAD", "return 1 +"]), "load"),
        "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'"
    );
    assert_eq!(
        err(c.cmd(&["SCRIPT", "LOAD", "#!lua flags=no-writes\nthis is not lua"]), "load"),
        "ERR Error compiling script (new function): user_script:2: '=' expected near 'is'"
    );
    assert!(err(c.cmd(&["EVAL", "return 1 +", "0"]), "eval").starts_with("ERR Error compiling script"));
    for body in ["return 1 +", "#!lua flags=no-writes\nthis is not lua"] {
        assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha_of(body)]), arr(vec![Resp::Int(0)]), "{body}");
        match c.cmd(&["EVALSHA", &sha_of(body), "0"]) {
            Resp::Error(e) => assert!(e.starts_with("NOSCRIPT"), "{e}"),
            other => panic!("{other:?}"),
        }
    }
    // What compiles is kept, as before.
    assert_eq!(c.cmd(&["SCRIPT", "LOAD", "return 7"]), b(&sha_of("return 7")));
    assert_eq!(c.cmd(&["EVALSHA", &sha_of("return 7"), "0"]), Resp::Int(7));
    assert_eq!(c.cmd(&["EVAL", "return 8", "0"]), Resp::Int(8));
    assert_eq!(c.cmd(&["SCRIPT", "EXISTS", &sha_of("return 8")]), arr(vec![Resp::Int(1)]));
}

/// functions.tcl: function names are matched whatever their case, and the
/// `#!lua` line is split as Redis splits it (quotes anywhere in a word).
#[test]
fn function_names_ignore_case_and_the_library_line_takes_quotes() {
    let s = TestServer::start();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", "#!lua name=test\nredis.register_function('test', function() return 1 end)"]), b("test"));
    assert_eq!(c.cmd(&["FCALL", "TEST", "0"]), Resp::Int(1));
    assert_eq!(c.cmd(&["FCALL_RO", "Test", "0"]), err_resp("ERR Can not execute a script with write flag using *_ro command."));
    assert_eq!(
        c.cmd(&["FUNCTION", "LOAD", "#!lua name=other\nredis.register_function('TEST', function() return 2 end)"]),
        err_resp("ERR Function TEST already exists")
    );
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", "#!lua name=\"foo\"\nredis.register_function('foo', function() return 3 end)"]), b("foo"));
    assert_eq!(c.cmd(&["FCALL", "foo", "0"]), Resp::Int(3));
    assert_eq!(
        c.cmd(&["FUNCTION", "LOAD", "#!lua name=\"bar\nredis.register_function('bar', function() return 3 end)"]),
        err_resp("ERR Invalid library metadata")
    );
    assert_eq!(c.cmd(&["EVAL", "#!lua flags=\"no-writes\"\nreturn redis.call('get', 'k')", "0"]), Resp::Bulk(None));
}

fn err_resp(text: &str) -> Resp {
    Resp::Error(text.into())
}
