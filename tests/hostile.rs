//! Issue 9: no client input may stop a node or leave a log entry that stops it
//! again on replay. Every input here once crashed or hung a node, or is of a
//! kind that could (deep and cyclic structures, C loops a script controls,
//! huge and overflowing numbers, binary and empty keys, thousands of
//! arguments, error objects of every type). Each must get a reply while the
//! node keeps serving other clients; afterwards a restart on the same data
//! directory replays every entry and comes back with the same keyspace
//! (RAFT.DIGEST before and after). The same runs through a follower of a
//! three-node cluster, whose replicas must agree.

mod cluster_support;
mod common;

use std::time::Duration;

use common::{q, Resp, TestServer};
use redis::Value;

/// What a hostile input must get back.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// An error reply whose text contains this.
    Error(&'static str),
    /// Any reply at all (the point is that the node survives and agrees).
    Reply,
}
use Expect::{Error, Reply};

const NESTED_100K: &str = "local t = {} local c = t for i=1,100000 do c[1] = {} c = c[1] end return t";

/// (arguments, expectation). Scripts are run with EVAL, so they are in the log.
fn cases() -> Vec<(Vec<String>, Expect)> {
    let eval = |body: &str| vec!["EVAL".to_string(), body.to_string(), "0".to_string()];
    let cmd = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut cases = vec![
        // The two inputs of the issue: a cyclic table and a very deep one.
        (eval("local a = {}; local b = {a}; a[1] = b; return a"), Error("reached lua stack limit")),
        (eval(NESTED_100K), Error("reached lua stack limit")),
        (eval("local a = {} a[1] = a a[2] = a return a"), Error("reached lua stack limit")),
        (eval("local t = {} local c = t for i=1,40 do local n = {} c[1] = n c[2] = n c = n end return t"), Error("too large")),
        // C loops and allocations a script controls.
        (eval("return string.rep('', 2^62)"), Reply),
        (eval("return string.rep('x', 2^40)"), Error("not enough memory")),
        (eval("local t = {} table.insert(t, -2^31, 1) return t"), Error("budget")),
        (eval("local t = {1, 2, nil, 4} local j = 5 while j < 2^30 do t[j] = 1 j = j * 2 end table.remove(t, 1)"), Error("budget")),
        (eval("local s = string.rep('x', 2^20) for i = 1, 1e6 do local t = s .. 'y' end"), Error("budget")),
        (eval("local t = {} for i=1,8 do t[{}] = i end for k, v in pairs(t) do redis.call('RPUSH', 'order', v) end"), Error("differ from node to node")),
        (eval("return unpack({}, 1, 1e8)"), Error("")),
        (eval("local s = 'x' while true do s = s .. s end"), Error("memory")),
        (eval("local t = {} for i = 1, 1e9 do t[i] = i end"), Error("")),
        (eval("while true do end"), Error("budget")),
        (eval("local co = coroutine.wrap(function() while true do end end) return co()"), Error("budget")),
        (eval("local function f() return 1 + f() end return f()"), Error("")),
        (eval("local function f() return pcall(f) end return f()"), Reply),
        (eval("return loadstring(string.rep('(', 100000) .. '1' .. string.rep(')', 100000))()"), Error("")),
        (eval("return string.find(string.rep('a', 40), string.rep('a*', 40) .. 'b')"), Error("")),
        (eval("return string.find(string.rep('a', 300000), string.rep('a?', 300000))"), Error("")),
        (eval("return string.gsub(string.rep('x', 1000000), '', string.rep('y', 1000))"), Error("")),
        // Error objects of every type.
        (eval("error(nil)"), Error("")),
        (eval("error({})"), Error("")),
        (eval("error(function() end)"), Error("function: 0x")),
        (eval("error(setmetatable({}, {__newindex = function() error('again') end}))"), Error("")),
        (eval("error(_G)"), Error("")),
        (eval("return redis.error_reply('ERR a\\r\\nb')"), Error("ERR a")),
        (eval("return {ok = 'a\\r\\nb'}"), Reply),
        // The reply of a script that wrote an address would differ per node.
        (eval("redis.call('SET', 'addr', tostring({})) return redis.call('GET', 'addr')"), Reply),
        // Numbers at and beyond the edges.
        (cmd(&["SET", "n", "9223372036854775807"]), Reply),
        (cmd(&["INCR", "n"]), Error("overflow")),
        (cmd(&["INCRBY", "n", "-9223372036854775808"]), Reply),
        (cmd(&["DECRBY", "n", "-9223372036854775808"]), Error("")),
        (cmd(&["SET", "e", "v", "EX", "9223372036854775807"]), Error("invalid expire")),
        (cmd(&["SET", "e", "v", "PX", "-1"]), Error("invalid expire")),
        (cmd(&["SET", "e", "v", "EXAT", "9223372036854775807"]), Error("invalid expire")),
        (cmd(&["SET", "e", "v", "PXAT", "9223372036854775807"]), Reply),
        (cmd(&["EXPIRE", "n", "9223372036854775807"]), Error("invalid expire")),
        (cmd(&["PEXPIRE", "n", "-9223372036854775808"]), Reply),
        (cmd(&["PEXPIREAT", "n", "9223372036854775807"]), Reply),
        (cmd(&["LOCK.ACQUIRE", "l", "o", "0"]), Error("")),
        (cmd(&["LOCK.ACQUIRE", "l", "o", "-1"]), Error("")),
        (cmd(&["LOCK.ACQUIRE", "l", "o", "18446744073709551615"]), Error("")),
        (cmd(&["LOCK.ACQUIRE", "l", "o", "9223372036854775807"]), Reply),
        (cmd(&["LOCK.RENEW", "l", "o", "-1", "1000"]), Error("")),
        (cmd(&["LOCK.FENCE", "f", "-9223372036854775808"]), Error("")),
        (cmd(&["LOCK.FENCE", "f", "18446744073709551615"]), Error("")),
        (cmd(&["RPUSH", "list", "a", "b", "c"]), Reply),
        (cmd(&["LRANGE", "list", "-9223372036854775808", "9223372036854775807"]), Reply),
        (cmd(&["LPOP", "list", "9223372036854775807"]), Reply),
        (cmd(&["LPOP", "list", "-1"]), Error("")),
        (cmd(&["LINDEX", "list", "-9223372036854775808"]), Reply),
        (cmd(&["LREM", "list", "-9223372036854775808", "a"]), Reply),
        (cmd(&["ZADD", "z", "nan", "m"]), Error("not a valid float")),
        (cmd(&["ZADD", "z", "inf", "m"]), Reply),
        (cmd(&["ZINCRBY", "z", "-inf", "m"]), Error("NaN")),
        (cmd(&["ZRANGE", "z", "-9223372036854775808", "9223372036854775807"]), Reply),
        (cmd(&["ZRANGE", "z", "(nan", "+inf", "BYSCORE"]), Reply),
        (cmd(&["ZRANGE", "z", "0", "-1", "BYSCORE", "LIMIT", "0", "9223372036854775807"]), Reply),
        (cmd(&["HSET", "h", "f", "9223372036854775807"]), Reply),
        (cmd(&["HINCRBY", "h", "f", "1"]), Error("overflow")),
        (cmd(&["SCAN", "0", "COUNT", "9223372036854775807"]), Reply),
        (cmd(&["SCAN", "18446744073709551615"]), Reply),
        (cmd(&["SCAN", "0", "COUNT", "0"]), Error("")),
        (cmd(&["BLPOP", "nolist", "-1"]), Error("")),
        (cmd(&["BLPOP", "nolist", "nan"]), Error("")),
        (cmd(&["BLPOP", "nolist", "inf"]), Error("")),
        (cmd(&["BLPOP", "nolist", "1e300"]), Error("")),
        (cmd(&["EVAL", "return 1", "-1"]), Error("negative")),
        (cmd(&["EVAL", "return 1", "9223372036854775807"]), Error("greater")),
        (cmd(&["KEYS", &"*a".repeat(5000)]), Reply),
        (cmd(&["KEYS", &format!("{}b", "*a".repeat(5000))]), Reply),
        // A pattern built to backtrack against a long key gives up, in a
        // command and inside a script (there in every node's apply).
        (cmd(&["SET", &"a".repeat(200_000), "1"]), Reply),
        (cmd(&["KEYS", &format!("*{}b", "a".repeat(100_000))]), Error("pattern too complex")),
        (cmd(&["SCAN", "0", "MATCH", &format!("*{}b", "a".repeat(100_000)), "COUNT", "1000000"]), Error("pattern too complex")),
        (eval(&format!("return redis.call('KEYS', '*{}b')", "a".repeat(100_000))), Error("pattern too complex")),
        (cmd(&["EXISTS", "", "\u{0}\u{1}\u{ff}"]), Reply),
        (cmd(&["SET", "", ""]), Reply),
        (cmd(&["CLIENT", "SETNAME", "has space"]), Error("")),
        (cmd(&["HELLO", "99"]), Error("NOPROTO")),
        (cmd(&["HELLO", "-9223372036854775808"]), Error("")),
        (cmd(&["CONFIG", "SET", "notify-keyspace-events", "\u{0}zzz"]), Error("")),
    ];
    // Thousands of arguments, in one command and in one script.
    let mut many = vec!["DEL".to_string()];
    many.extend((0..20_000).map(|i| format!("k{i}")));
    cases.push((many, Reply));
    let mut mset = vec!["MSET".to_string()];
    mset.extend((0..10_000).flat_map(|i| [format!("m{i}"), "v".to_string()]));
    cases.push((mset, Reply));
    let mut keys = vec!["EVAL".to_string(), "return #KEYS + #ARGV".to_string(), "30000".to_string()];
    keys.extend((0..60_000).map(|i| format!("a{i}")));
    cases.push((keys, Reply));
    cases
}

/// Runs one case; a description of what went wrong, if anything.
fn run_case(con: &mut redis::Connection, args: &[String], expect: Expect) -> Result<(), String> {
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let shown = shorten(&argv.join(" "));
    let no_reply = |e: &redis::RedisError| {
        e.kind() == redis::ErrorKind::Io || e.is_connection_dropped() || e.kind() == redis::ErrorKind::Parse
    };
    // Errors that no hostile input may cause: a command that panicked while
    // applied (contained, but a bug), or a cluster that stopped serving.
    let broken = |text: &str| {
        ["internal error while applying", "TRYAGAIN", "CLUSTERDOWN"].iter().any(|bad| text.contains(bad))
    };
    match (q(con, &argv), expect) {
        (Err(e), _) if no_reply(&e) => Err(format!("{shown}: no reply: {}", common::err_text(&e))),
        (Err(e), _) if broken(&common::err_text(&e)) => {
            Err(format!("{shown}: {}", common::err_text(&e)))
        }
        (Err(e), Error(needle)) => {
            let text = common::err_text(&e);
            if text.contains(needle) {
                Ok(())
            } else {
                Err(format!("{shown}: error {text:?} should contain {needle:?}"))
            }
        }
        (Ok(v), Error(needle)) => {
            Err(format!("{shown}: expected an error containing {needle:?}, got {}", shorten(&format!("{v:?}"))))
        }
        (_, Reply) => Ok(()),
    }
}

/// Runs every case on `con`, checking after each that `bystander` is served.
fn run_all(con: &mut redis::Connection, bystander: &mut redis::Connection) {
    let mut wrong = Vec::new();
    for (args, expect) in cases() {
        if let Err(e) = run_case(con, &args, expect) {
            wrong.push(e);
        }
        let pong = q(bystander, &["PING"]);
        assert_eq!(pong.ok(), Some(Value::SimpleString("PONG".into())), "the node stopped serving after {}", shorten(&args.join(" ")));
    }
    assert!(wrong.is_empty(), "{} cases went wrong:\n{}", wrong.len(), wrong.join("\n"));
}

fn shorten(s: &str) -> String {
    if s.len() > 160 { format!("{}...", &s[..s.char_indices().take_while(|(i, _)| *i < 160).last().map_or(0, |(i, _)| i)]) } else { s.to_string() }
}

/// A node's RAFT.DIGEST: (last applied index, keyspace digest).
fn digest(con: &mut redis::Connection) -> (u64, String) {
    match q(con, &["RAFT.DIGEST"]) {
        Ok(Value::Array(items)) if items.len() == 2 => match (&items[0], common::as_text(&items[1])) {
            (Value::Int(index), Some(sha)) => (*index as u64, sha),
            other => panic!("RAFT.DIGEST: {other:?}"),
        },
        other => panic!("RAFT.DIGEST: {other:?}"),
    }
}

/// A connection that waits as long as the slowest hostile script may take
/// (every node of a cluster on this 2-core machine runs each one).
fn patient_client(addr: &str) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    let con = client.get_connection_with_timeout(Duration::from_secs(5)).expect("connect");
    con.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    con
}

/// After a restart: polls RAFT.DIGEST of the node at `addr` until it has
/// replayed up to `index`, and returns its digest then. Nothing is written
/// meanwhile, so the digest must equal the one taken before the restart.
fn replayed_digest(addr: &str, index: u64) -> String {
    common::poll_until(Duration::from_secs(60), "the restarted node has replayed its log", || {
        let client = redis::Client::open(format!("redis://{addr}/")).ok()?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(2)).ok()?;
        let (applied, sha) = digest(&mut con);
        (applied >= index).then_some(sha)
    })
}

#[test]
fn hostile_inputs_get_replies_and_a_restart_replays_them() {
    let mut server = TestServer::start_with_env(&[("RAFTLOCK_REQUEST_TIMEOUT_MS", "120000")]);
    let mut con = patient_client(&server.addr());
    let mut bystander = server.client();
    q(&mut con, &["SET", "before", "1"]).unwrap();
    run_all(&mut con, &mut bystander);
    assert!(server.is_running());
    let (index, before) = digest(&mut con);
    drop(con);
    drop(bystander);
    // kill -9 and start again on the same data directory: every entry above
    // is replayed (none was behind a snapshot).
    server.restart_quietly();
    assert_eq!(replayed_digest(&server.addr(), index), before, "the replayed keyspace differs");
    let mut con = server.client();
    assert_eq!(q(&mut con, &["GET", "before"]).ok(), Some(Value::BulkString(b"1".to_vec())));
    // And it still takes writes.
    q(&mut con, &["SET", "after", "1"]).unwrap();
}

#[test]
fn hostile_inputs_through_a_follower_leave_every_replica_equal() {
    let _serial = cluster_support::serial();
    let opts = cluster_support::Opts { request_timeout_ms: Some(120_000), ..Default::default() };
    let mut cluster = cluster_support::Cluster::start(3, opts);
    let leader = cluster.wait_leader(&[1, 2, 3], Duration::from_secs(20));
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let mut con = patient_client(&cluster.node(follower).addr());
    let mut bystander = cluster.node(leader).client();
    run_all(&mut con, &mut bystander);
    q(&mut con, &["SET", "last", "1"]).unwrap();
    // Every replica applies the same entries and reaches the same keyspace.
    // The index to compare at is the highest any node has applied: the first
    // leader may have lost its place meanwhile and be behind.
    let index = [1, 2, 3].iter().map(|id| digest(&mut cluster.node(*id).client()).0).max().unwrap();
    let before: Vec<String> = [1, 2, 3].iter().map(|id| replayed_digest(&cluster.node(*id).addr(), index)).collect();
    assert!(before.windows(2).all(|w| w[0] == w[1]), "the replicas differ: {before:?}");
    for id in [1, 2, 3] {
        assert!(cluster.node_mut(id).is_running(), "node {id} stopped");
    }
    // All three killed and started again: each replays its log, and nothing
    // is written until all have reached the same point.
    for id in [1, 2, 3] {
        cluster.kill9(id);
    }
    for id in [1, 2, 3] {
        cluster.restart(id);
    }
    for id in [1, 2, 3] {
        assert_eq!(replayed_digest(&cluster.node(id).addr(), index), before[0], "node {id} replayed to another keyspace");
    }
    cluster.wait_ready(&[1, 2, 3], Duration::from_secs(30));
}

/// The way back from an entry that stops every node (README: "An entry that
/// cannot be applied"): restarted with `--skip-entry N`, the node replays
/// entry N as an error that changes nothing, and serves.
#[test]
fn skip_entry_turns_an_entry_into_an_error_on_replay() {
    let mut server = TestServer::start();
    let mut con = server.client();
    q(&mut con, &["SET", "kept", "1"]).unwrap();
    q(&mut con, &["SET", "skipped", "1"]).unwrap();
    let (index, _) = digest(&mut con);
    q(&mut con, &["SET", "after", "1"]).unwrap();
    drop(con);
    server.set_env("RAFTLOCK_SKIP_ENTRIES", &index.to_string());
    server.restart();
    let mut con = server.client();
    assert_eq!(q(&mut con, &["GET", "kept"]).ok(), Some(Value::BulkString(b"1".to_vec())));
    assert_eq!(q(&mut con, &["GET", "skipped"]).ok(), Some(Value::Nil), "entry {index} was applied");
    assert_eq!(q(&mut con, &["GET", "after"]).ok(), Some(Value::BulkString(b"1".to_vec())));
    assert!(server.logs().contains(&format!("skipping log entry {index}")), "{}", server.logs());
}

/// EXEC is one log entry, and an entry over the peer transport's frame limit
/// could never replicate: a transaction may hold no more than one request.
#[test]
fn a_transaction_larger_than_a_request_is_refused() {
    let server = TestServer::start();
    let mut con = server.client();
    let big = "x".repeat(7 * 1024 * 1024);
    q(&mut con, &["MULTI"]).unwrap();
    let mut refused = 0;
    for i in 0..6 {
        if let Err(e) = q(&mut con, &["SET", &format!("big{i}"), &big]) {
            assert!(common::err_text(&e).contains("larger than the largest request"), "{}", common::err_text(&e));
            refused += 1;
        }
    }
    assert!(refused > 0, "six 7 MiB SETs fit in one 32 MiB transaction");
    let exec = common::expect_err(q(&mut con, &["EXEC"]));
    assert!(exec.starts_with("EXECABORT"), "{exec}");
    assert_eq!(q(&mut con, &["EXISTS", "big0"]).ok(), Some(Value::Int(0)));
}

/// A spinning script that writes as it goes: stopped by its budget.
const SPIN: &str = "local i = 0 while true do i = i + 1 if i % 100 == 0 then redis.call('set', KEYS[1], i) end end";

/// `EXEC`'s replies to a transaction of [`SPIN`] on each of `keys`, then
/// `SET after 1` if `then_set`.
fn spinning_transaction(addr: &str, keys: &[&str], then_set: bool) -> Vec<Resp> {
    let mut raw = common::RawConn::connect(addr);
    raw.stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    assert_eq!(raw.cmd(&["MULTI"]), Resp::Simple("OK".into()));
    for key in keys {
        assert_eq!(raw.cmd(&["EVAL", SPIN, "1", key]), Resp::Simple("QUEUED".into()));
    }
    if then_set {
        assert_eq!(raw.cmd(&["SET", "after", "1"]), Resp::Simple("QUEUED".into()));
    }
    raw.cmd(&["EXEC"]).items()
}

/// Each script has a budget, but a transaction may queue any number of
/// them, and every node runs them all again at each replay: ten spinning
/// scripts in one `MULTI` held a node for about 50 s and made it allocate
/// 2 GB of events, where it stopped, as it did again after each restart.
/// The scripts of one log entry now share one budget: the first spins to
/// it, the rest stop at once; the node answers; a restart replays the entry
/// to the same keyspace.
#[test]
fn the_scripts_of_one_transaction_share_one_budget_and_replay_alike() {
    let mut server = TestServer::start_with_env(&[("RAFTLOCK_REQUEST_TIMEOUT_MS", "120000")]);
    let replies = spinning_transaction(&server.addr(), &["a", "b", "c", "d"], true);
    let error = |v: &Resp| match v {
        Resp::Error(e) => e.clone(),
        other => panic!("not an error: {other:?}"),
    };
    assert!(error(&replies[0]).contains("budget of 50000000 Lua instructions and was stopped"), "{:?}", replies[0]);
    for reply in &replies[1..4] {
        assert!(error(reply).contains("they share"), "{reply:?}");
    }
    assert_eq!(replies[4], Resp::Simple("OK".into()));
    let mut con = patient_client(&server.addr());
    let written = |con: &mut redis::Connection, key: &str| match q(con, &["GET", key]) {
        Ok(Value::BulkString(b)) => String::from_utf8(b).unwrap().parse::<u64>().unwrap(),
        Ok(Value::Nil) => 0,
        other => panic!("GET {key}: {other:?}"),
    };
    assert!(written(&mut con, "a") > 1_000_000, "the first script had the whole budget");
    for key in ["b", "c", "d"] {
        assert!(written(&mut con, key) < 10_000, "script {key} ran on a spent budget");
    }
    let (index, before) = digest(&mut con);
    drop(con);
    server.restart_quietly();
    assert_eq!(replayed_digest(&server.addr(), index), before, "the replayed keyspace differs");
}

/// The leader proposes a request that runs Lua in a log entry of its own, so
/// that a client's script never shares its entry's budget with another
/// client's spinning transaction: small scripts sent all along by other
/// clients always complete.
#[test]
fn another_clients_script_never_shares_a_spinning_transactions_budget() {
    let server = TestServer::start_with_env(&[("RAFTLOCK_REQUEST_TIMEOUT_MS", "120000")]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let small = "redis.call('incr', KEYS[1]) return redis.call('get', KEYS[1])";
    let senders: Vec<_> = (0..8)
        .map(|i| {
            let (addr, stop) = (server.addr(), stop.clone());
            std::thread::spawn(move || {
                let mut con = patient_client(&addr);
                let key = format!("small{i}");
                let mut runs = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match q(&mut con, &["EVAL", small, "1", &key]) {
                        Ok(_) => runs += 1,
                        Err(e) => return Err(format!("{key}: {}", common::err_text(&e))),
                    }
                }
                Ok(runs)
            })
        })
        .collect();
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(200));
        let replies = spinning_transaction(&server.addr(), &[&format!("x{round}"), &format!("y{round}")], false);
        assert_eq!(replies.len(), 2, "{replies:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for sender in senders {
        let runs = sender.join().unwrap().unwrap_or_else(|e| panic!("a small script failed: {e}"));
        assert!(runs > 0);
    }
}
