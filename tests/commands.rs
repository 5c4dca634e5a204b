//! Connection, server, key and string commands of issue 2, against the real binary,
//! through the `redis` crate (and a raw socket where the exact bytes matter).
//! Expected replies and error texts are Redis 7's.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use redis::Value;

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("expected an integer reply, got {other:?}"),
    }
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn now_unix() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

fn client_id(c: &mut redis::Connection) -> i64 {
    int(&q(c, &["CLIENT", "ID"]).unwrap())
}

// ------------------------------------------------------------------------------
// connection commands
// ------------------------------------------------------------------------------

#[test]
fn ping_and_echo() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(
        q(&mut c, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
    assert_eq!(q(&mut c, &["PING", "hello"]).unwrap(), bulk("hello"));
    assert_eq!(q(&mut c, &["ECHO", "hi there"]).unwrap(), bulk("hi there"));
    assert_eq!(q(&mut c, &["echo", ""]).unwrap(), bulk(""));
    assert_eq!(
        expect_err(q(&mut c, &["ECHO"])),
        "ERR wrong number of arguments for 'echo' command"
    );
    assert_eq!(
        expect_err(q(&mut c, &["PING", "a", "b"])),
        "ERR wrong number of arguments for 'ping' command"
    );
}

#[test]
fn select_zero_only() {
    let s = TestServer::start();
    let mut c = s.client();
    let id = client_id(&mut c);
    assert_eq!(q(&mut c, &["SELECT", "0"]).unwrap(), Value::Okay);
    let e = expect_err(q(&mut c, &["SELECT", "1"]));
    assert!(
        e.starts_with("ERR "),
        "SELECT 1 should be an ERR reply, got {e:?}"
    );
    // still the same, open connection
    assert_eq!(client_id(&mut c), id);
}

#[test]
fn client_subcommands() {
    let s = TestServer::start();
    let mut c = s.client();
    let mut other = s.client();
    let id = client_id(&mut c);
    let other_id = client_id(&mut other);
    assert!(
        id > 0 && other_id > 0 && id != other_id,
        "ids {id} {other_id}"
    );

    assert_eq!(q(&mut c, &["CLIENT", "GETNAME"]).unwrap(), Value::Nil);
    assert_eq!(
        q(&mut c, &["CLIENT", "SETNAME", "worker-7"]).unwrap(),
        Value::Okay
    );
    assert_eq!(q(&mut c, &["CLIENT", "GETNAME"]).unwrap(), bulk("worker-7"));
    let e = expect_err(q(&mut c, &["CLIENT", "SETNAME", "has space"]));
    assert!(e.starts_with("ERR "), "{e}");
    assert_eq!(q(&mut c, &["CLIENT", "GETNAME"]).unwrap(), bulk("worker-7"));

    assert_eq!(
        q(&mut c, &["CLIENT", "SETINFO", "LIB-NAME", "mylib"]).unwrap(),
        Value::Okay
    );
    assert_eq!(
        q(&mut c, &["CLIENT", "SETINFO", "lib-ver", "1.2.3"]).unwrap(),
        Value::Okay
    );

    let info = as_text(&q(&mut c, &["CLIENT", "INFO"]).unwrap()).expect("CLIENT INFO text");
    assert!(info.contains(&format!("id={id} ")), "CLIENT INFO: {info}");
    assert!(info.contains("name=worker-7"), "CLIENT INFO: {info}");
    assert!(info.contains("lib-name=mylib"), "CLIENT INFO: {info}");
    assert!(info.contains("lib-ver=1.2.3"), "CLIENT INFO: {info}");
    assert!(info.contains("addr=127.0.0.1:"), "CLIENT INFO: {info}");

    let list = as_text(&q(&mut c, &["CLIENT", "LIST"]).unwrap()).expect("CLIENT LIST text");
    let lines: Vec<&str> = list.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("id={id} ")) && l.contains("name=worker-7")),
        "CLIENT LIST lacks this connection: {list}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("id={other_id} "))),
        "CLIENT LIST lacks the other connection: {list}"
    );
    // redis-py >= 8 and node-redis send this; COMPAT.md: reply -ERR
    let e = expect_err(q(
        &mut c,
        &[
            "CLIENT",
            "MAINT_NOTIFICATIONS",
            "ON",
            "moving-endpoint-type",
            "none",
        ],
    ));
    assert!(e.starts_with("ERR "), "{e}");
    let e = expect_err(q(&mut c, &["CLIENT", "NOSUCHSUB"]));
    assert!(e.starts_with("ERR "), "{e}");
    assert_eq!(client_id(&mut c), id, "connection must stay open");
}

#[test]
fn hello_3_then_2_over_raw_socket() {
    let s = TestServer::start();
    let mut r = s.raw();
    let reply = r.cmd(&["HELLO", "3"]);
    let Resp::Map(m) = &reply else {
        panic!("HELLO 3 must reply a RESP3 map, got {reply:?}");
    };
    let get = |k: &str| {
        m.iter()
            .find(|(key, _)| key.text().as_deref() == Some(k))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("HELLO 3 map lacks {k:?}: {reply:?}"))
    };
    assert_eq!(get("proto"), Resp::Int(3));
    assert!(
        get("server").text().is_some(),
        "server: {:?}",
        get("server")
    );
    let version = get("version").text().expect("version is a string");
    assert!(
        version.starts_with("7."),
        "version {version:?} must look like Redis 7"
    );
    assert!(
        matches!(get("id"), Resp::Int(i) if i > 0),
        "id: {:?}",
        get("id")
    );
    assert_eq!(get("mode").text().as_deref(), Some("standalone"));
    assert_eq!(get("role").text().as_deref(), Some("master"));
    let _ = get("modules");

    // now in RESP3: a missing key is the RESP3 null
    assert_eq!(r.cmd(&["GET", "nosuchkey"]), Resp::Null);

    // back to RESP2: flat array, proto 2, and `$-1` nulls
    let reply = r.cmd(&["HELLO", "2"]);
    let Resp::Array(Some(items)) = &reply else {
        panic!("HELLO 2 must reply a flat array, got {reply:?}");
    };
    let pos = items
        .iter()
        .position(|v| v.text().as_deref() == Some("proto"))
        .expect("proto in HELLO 2 reply");
    assert_eq!(items[pos + 1], Resp::Int(2));
    assert_eq!(r.cmd(&["GET", "nosuchkey"]), Resp::Bulk(None));

    // unsupported version
    match r.cmd(&["HELLO", "4"]) {
        Resp::Error(e) => assert!(e.starts_with("NOPROTO"), "HELLO 4: {e}"),
        other => panic!("HELLO 4 must be a NOPROTO error, got {other:?}"),
    }
    // go-redis sends it in lower case
    assert!(matches!(r.cmd(&["hello", "3"]), Resp::Map(_)));
    // HELLO with SETNAME
    let reply = r.cmd(&["HELLO", "3", "SETNAME", "via-hello"]);
    assert!(matches!(reply, Resp::Map(_)), "{reply:?}");
    assert_eq!(r.cmd(&["CLIENT", "GETNAME"]), Resp::bulk("via-hello"));
}

#[test]
fn resp3_client_of_redis_crate_connects() {
    // redis-rs sends HELLO 3 on connect and fails the connection if it is refused.
    let s = TestServer::start();
    let mut c = s.client_resp3();
    assert_eq!(q(&mut c, &["SET", "k", "v"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), bulk("v"));
    assert_eq!(q(&mut c, &["GET", "missing"]).unwrap(), Value::Nil);
    let cfg = q(&mut c, &["CONFIG", "GET", "maxclients"]).unwrap();
    assert!(
        matches!(cfg, Value::Map(_)),
        "RESP3 CONFIG GET must be a map: {cfg:?}"
    );

    // HELLO through the redis crate on a RESP2 connection: a map, then a flat array
    let mut c2 = s.client();
    let hello = q(&mut c2, &["HELLO", "3"]).unwrap();
    let Value::Map(_) = &hello else {
        panic!("HELLO 3 must reply a map: {hello:?}")
    };
    let p = pairs(&hello);
    assert_eq!(lookup(&p, "proto"), Some(&Value::Int(3)), "{hello:?}");
    let v = lookup(&p, "version").and_then(as_text).expect("version");
    assert!(v.starts_with("7."), "{v}");
    assert!(
        lookup(&p, "server").and_then(as_text).is_some(),
        "{hello:?}"
    );
    let hello = q(&mut c2, &["HELLO", "2"]).unwrap();
    let Value::Array(_) = &hello else {
        panic!("HELLO 2 must reply a flat array: {hello:?}")
    };
    assert_eq!(
        lookup(&pairs(&hello), "proto"),
        Some(&Value::Int(2)),
        "{hello:?}"
    );
}

#[test]
fn auth_is_a_clear_error_and_keeps_connection() {
    // As a Redis whose only user, `default`, has no password.
    let s = TestServer::start();
    let mut c = s.client();
    let id = client_id(&mut c);
    let e = expect_err(q(&mut c, &["AUTH", "secret"]));
    assert!(e.starts_with("ERR AUTH <password> called without any password configured"), "{e:?}");
    let e = expect_err(q(&mut c, &["AUTH", "user", "secret"]));
    assert!(e.starts_with("WRONGPASS invalid username-password pair"), "{e:?}");
    assert_eq!(q(&mut c, &["AUTH", "default", "anything"]).unwrap(), Value::Okay);
    assert!(matches!(q(&mut c, &["HELLO", "2", "AUTH", "default", "x"]).unwrap(), Value::Array(_) | Value::Map(_)));
    let e = expect_err(q(&mut c, &["HELLO", "2", "AUTH", "bob", "x"]));
    assert!(e.starts_with("WRONGPASS"), "{e:?}");
    assert_eq!(client_id(&mut c), id);
    assert_eq!(
        q(&mut c, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
}

#[test]
fn quit_and_reset() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&["CLIENT", "SETNAME", "before-reset"]),
        Resp::Simple("OK".into())
    );
    assert!(matches!(r.cmd(&["HELLO", "3"]), Resp::Map(_)));
    assert_eq!(r.cmd(&["RESET"]), Resp::Simple("RESET".into()));
    // RESET drops the name and goes back to RESP2
    assert_eq!(r.cmd(&["CLIENT", "GETNAME"]), Resp::Bulk(None));
    assert_eq!(r.cmd(&["QUIT"]), Resp::Simple("OK".into()));
    assert!(
        r.closed_within(EVENT_TIMEOUT),
        "QUIT must close the connection"
    );
}

// ------------------------------------------------------------------------------
// server commands
// ------------------------------------------------------------------------------

#[test]
fn info_has_the_fields_clients_need() {
    let s = TestServer::start();
    let mut c = s.client();
    let info = as_text(&q(&mut c, &["INFO"]).unwrap()).expect("INFO is a string");
    for needle in [
        "# Server",
        "redis_version:7.",
        "arch_bits:64",
        "cluster_enabled:0",
        "loading:0",
        "# Raft",
    ] {
        assert!(info.contains(needle), "INFO lacks {needle:?}:\n{info}");
    }
    assert!(
        info.contains("\r\n"),
        "INFO lines are CRLF-separated like Redis"
    );
    let server = as_text(&q(&mut c, &["INFO", "server"]).unwrap()).unwrap();
    assert!(
        server.contains("redis_version:7."),
        "INFO server:\n{server}"
    );
    // RESP3 clients (ioredis, redis-py) also run INFO
    let mut c3 = s.client_resp3();
    let info3 = as_text(&q(&mut c3, &["INFO"]).unwrap()).expect("INFO (RESP3) is a string");
    assert!(info3.contains("loading:0"), "{info3}");
}

/// The sections and fields monitoring tools read (redis_exporter, Sidekiq's
/// web page, go-redis's and redis-py's own tests): Memory, CPU, Modules,
/// Errorstats by default; Commandstats with `all`; each counting what this
/// node answered, as Redis counts it.
#[test]
fn info_has_the_sections_monitoring_reads() {
    let s = TestServer::start();
    let mut c = s.client();
    let section_names = |text: &str| -> Vec<String> {
        text.lines().filter_map(|l| l.strip_prefix("# ")).map(|l| l.trim().to_string()).collect()
    };
    let info = as_text(&q(&mut c, &["INFO"]).unwrap()).unwrap();
    // Redis 7.0.15's default sections, in its order, and raftlock's own.
    let expected = ["Server", "Clients", "Memory", "Persistence", "Stats", "Replication", "CPU", "Modules", "Errorstats", "Cluster", "Keyspace", "Raft"];
    assert_eq!(section_names(&info), expected, "{info}");
    let all = as_text(&q(&mut c, &["INFO", "all"]).unwrap()).unwrap();
    assert!(section_names(&all).contains(&"Commandstats".to_string()) && section_names(&all).contains(&"Latencystats".to_string()));
    // Several sections in one call, as Redis 7 takes them.
    let two = as_text(&q(&mut c, &["INFO", "cpu", "memory"]).unwrap()).unwrap();
    assert_eq!(section_names(&two), ["Memory", "CPU"], "{two}");
    let field = |text: &str, name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .trim()
            .to_string()
    };
    let used: u64 = field(&two, "used_memory").parse().unwrap();
    assert!(used > 1_000_000, "used_memory {used}");
    assert!(field(&two, "used_memory_human").ends_with('M'));
    assert_eq!(field(&two, "maxmemory_policy"), "noeviction");
    assert!(field(&two, "used_cpu_user").parse::<f64>().unwrap() > 0.0);
    assert!(field(&two, "used_cpu_sys").parse::<f64>().is_ok());
    // Calls, refusals and failures per command; errors by their code.
    assert_eq!(q(&mut c, &["CONFIG", "RESETSTAT"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["SET", "k", "v"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["SET", "k", "w"]).unwrap(), Value::Okay);
    assert!(q(&mut c, &["LPUSH", "k", "x"]).is_err(), "WRONGTYPE");
    assert!(q(&mut c, &["GET"]).is_err(), "arity");
    let stats = as_text(&q(&mut c, &["INFO", "commandstats"]).unwrap()).unwrap();
    let set = field(&stats, "cmdstat_set");
    assert!(set.starts_with("calls=2,usec=") && set.ends_with(",rejected_calls=0,failed_calls=0"), "{set}");
    assert!(field(&stats, "cmdstat_lpush").ends_with(",rejected_calls=0,failed_calls=1"), "{stats}");
    assert!(field(&stats, "cmdstat_get").starts_with("calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,"), "{stats}");
    let errors = as_text(&q(&mut c, &["INFO", "errorstats"]).unwrap()).unwrap();
    assert_eq!(field(&errors, "errorstat_WRONGTYPE"), "count=1");
    assert_eq!(field(&errors, "errorstat_ERR"), "count=1");
    let stats = as_text(&q(&mut c, &["INFO", "stats"]).unwrap()).unwrap();
    assert_eq!(field(&stats, "total_error_replies"), "2");
    // Pipelined writes are counted too, each once.
    let mut pipe = redis::pipe();
    for i in 0..10 {
        pipe.cmd("SET").arg(format!("p{i}")).arg("v").ignore();
    }
    pipe.query::<()>(&mut c).unwrap();
    let stats = as_text(&q(&mut c, &["INFO", "commandstats"]).unwrap()).unwrap();
    assert!(field(&stats, "cmdstat_set").starts_with("calls=12,"), "{stats}");
    // A container's subcommands are counted apart (`cmdstat_config|get`),
    // and a transaction's commands once, when EXEC runs them, with the
    // errors among its results (Redis's counts).
    assert_eq!(q(&mut c, &["CONFIG", "RESETSTAT"]).unwrap(), Value::Okay);
    assert!(matches!(q(&mut c, &["CONFIG", "GET", "maxmemory"]).unwrap(), Value::Array(_)));
    let mut tx = redis::pipe();
    tx.atomic().cmd("INCR").arg("k").cmd("SET").arg("t").arg("1");
    assert!(tx.query::<Value>(&mut c).is_err(), "INCR of a string fails inside EXEC");
    assert_eq!(q(&mut c, &["GET", "t"]).unwrap(), Value::BulkString(b"1".to_vec()), "the rest of the transaction ran");
    let stats = as_text(&q(&mut c, &["INFO", "commandstats"]).unwrap()).unwrap();
    assert!(field(&stats, "cmdstat_config|get").starts_with("calls=1,"), "{stats}");
    assert!(!stats.contains("cmdstat_config:"), "{stats}");
    assert!(field(&stats, "cmdstat_incr").starts_with("calls=1,") && field(&stats, "cmdstat_incr").ends_with("failed_calls=1"), "{stats}");
    assert!(field(&stats, "cmdstat_set").starts_with("calls=1,"), "{stats}");
    assert!(field(&stats, "cmdstat_exec").starts_with("calls=1,"), "{stats}");
    let errors = as_text(&q(&mut c, &["INFO", "errorstats"]).unwrap()).unwrap();
    assert_eq!(field(&errors, "errorstat_ERR"), "count=1", "{errors}");
    let latency = as_text(&q(&mut c, &["INFO", "latencystats"]).unwrap()).unwrap();
    assert!(latency.contains("latency_percentiles_usec_config|get:p50="), "{latency}");
}

/// No node is a Redis replica: `REPLICAOF NO ONE` is what it already is,
/// making it one is refused with a reason (the argument checks are
/// Redis's, recorded in `tests/data/redis7/config.cmds`).
#[test]
fn replicaof_is_refused_with_its_reason() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["REPLICAOF", "NO", "ONE"]).unwrap(), Value::Okay);
    let e = q(&mut c, &["REPLICAOF", "127.0.0.1", "6380"]).unwrap_err();
    assert!(format!("{e}").contains("RAFT.NODE ADD"), "{e}");
    let e = q(&mut c, &["SLAVEOF", "127.0.0.1", "6380"]).unwrap_err();
    assert!(format!("{e}").contains("RAFT.NODE ADD"), "{e}");
    assert_eq!(q(&mut c, &["ROLE"]).unwrap(), Value::Array(vec![Value::BulkString(b"master".to_vec()), Value::Int(0), Value::Array(vec![])]));
}

/// `COMMAND LIST` names the subcommands too (`config|get`), as Redis 7 does
/// (redis-py's own test wants more than 300 names), and `COMMAND INFO`
/// describes them.
#[test]
fn command_list_names_subcommands() {
    let s = TestServer::start();
    let mut c = s.client();
    let Value::Array(names) = q(&mut c, &["COMMAND", "LIST"]).unwrap() else { panic!("COMMAND LIST") };
    let names: BTreeSet<String> = names.iter().filter_map(as_text).collect();
    assert!(names.len() > 300, "{} names", names.len());
    for name in ["get", "lock.acquire", "config|get", "client|no-touch", "xinfo|stream", "acl|setuser"] {
        assert!(names.contains(name), "{name} missing");
    }
    assert!(!names.iter().any(|n| n.starts_with("cluster|")), "no CLUSTER subcommand is served");
    let Value::Array(info) = q(&mut c, &["COMMAND", "INFO", "CONFIG|GET"]).unwrap() else { panic!() };
    let Value::Array(entry) = &info[0] else { panic!("{info:?}") };
    assert_eq!(as_text(&entry[0]).as_deref(), Some("config|get"));
    assert_eq!(entry[1], Value::Int(-3));
}

#[test]
fn command_count_docs_info() {
    let s = TestServer::start();
    let mut c = s.client();
    let count = int(&q(&mut c, &["COMMAND", "COUNT"]).unwrap());
    assert!(
        count >= 30,
        "COMMAND COUNT {count} is too small for issue 2's commands"
    );

    let all = q(&mut c, &["COMMAND"]).unwrap();
    let Value::Array(entries) = &all else {
        panic!("COMMAND: {all:?}")
    };
    assert_eq!(
        entries.len() as i64,
        count,
        "COMMAND and COMMAND COUNT disagree"
    );

    let info = q(&mut c, &["COMMAND", "INFO", "get", "set"]).unwrap();
    let Value::Array(infos) = &info else {
        panic!("COMMAND INFO: {info:?}")
    };
    assert_eq!(infos.len(), 2);
    for (entry, name, arity) in [(&infos[0], "get", 2), (&infos[1], "set", -3)] {
        let Value::Array(f) = entry else {
            panic!("COMMAND INFO entry: {entry:?}")
        };
        assert_eq!(as_text(&f[0]).as_deref(), Some(name));
        assert_eq!(f[1], Value::Int(arity), "arity of {name}");
        assert_eq!(f[3], Value::Int(1), "first key of {name}");
    }

    // COMMAND DOCS: RESP2 flat array name, doc-map, name, doc-map ...
    let docs = q(&mut c, &["COMMAND", "DOCS"]).unwrap();
    let p = pairs(&docs);
    let names: BTreeSet<String> = p.iter().map(|(k, _)| k.to_lowercase()).collect();
    for n in [
        "get",
        "set",
        "ping",
        "lock.acquire",
        "lock.release",
        "lock.info",
    ] {
        assert!(names.contains(n), "COMMAND DOCS lacks {n}: {names:?}");
    }
    for (name, doc) in &p {
        let d = pairs(doc);
        assert!(
            lookup(&d, "summary").and_then(as_text).is_some(),
            "COMMAND DOCS {name} lacks a summary string: {doc:?}"
        );
    }
    let one = q(&mut c, &["COMMAND", "DOCS", "get"]).unwrap();
    let p = pairs(&one);
    assert_eq!(p.len(), 1, "COMMAND DOCS get: {one:?}");
    assert_eq!(p[0].0, "get");

    // RESP3: a real map
    let mut c3 = s.client_resp3();
    let docs3 = q(&mut c3, &["COMMAND", "DOCS", "get", "set"]).unwrap();
    let Value::Map(m) = &docs3 else {
        panic!("COMMAND DOCS in RESP3 must be a map: {docs3:?}")
    };
    assert_eq!(m.len(), 2);
    assert!(
        m.iter().all(|(_, v)| matches!(v, Value::Map(_))),
        "{docs3:?}"
    );

    // COMMAND LIST, whole and filtered as Redis filters it.
    let list = |c: &mut redis::Connection, args: &[&str]| -> BTreeSet<String> {
        let mut argv = vec!["COMMAND", "LIST"];
        argv.extend_from_slice(args);
        let v = q(c, &argv).unwrap();
        let Value::Array(names) = &v else {
            panic!("COMMAND LIST {args:?}: {v:?}")
        };
        names.iter().map(|n| as_text(n).unwrap()).collect()
    };
    let every = list(&mut c, &[]);
    // As Redis 7: COUNT counts the commands, LIST names their subcommands too.
    let top_level = every.iter().filter(|n| !n.contains('|')).count();
    assert_eq!(top_level as i64, count, "COMMAND LIST and COMMAND COUNT disagree");
    let locks = list(&mut c, &["FILTERBY", "PATTERN", "LOCK.*"]);
    assert!(locks.contains("lock.acquire") && locks.contains("lock.release"), "{locks:?}");
    assert!(locks.iter().all(|n| n.starts_with("lock.")), "{locks:?}");
    let strings = list(&mut c, &["filterby", "aclcat", "string"]);
    assert!(strings.contains("get") && strings.contains("incr"), "{strings:?}");
    assert!(!strings.contains("hset") && !strings.contains("ping"), "{strings:?}");
    assert!(list(&mut c, &["FILTERBY", "ACLCAT", "nosuch"]).is_empty());
    assert!(list(&mut c, &["FILTERBY", "MODULE", "json"]).is_empty());
    for bad in [&["FILTERBY"][..], &["FILTERBY", "BAD", "x"], &["x"], &["FILTERBY", "PATTERN", "*", "x"]] {
        let mut argv = vec!["COMMAND", "LIST"];
        argv.extend_from_slice(bad);
        assert_eq!(expect_err(q(&mut c, &argv)), "ERR syntax error", "COMMAND LIST {bad:?}");
    }
}

#[test]
fn config_get_set() {
    let s = TestServer::start();
    let mut c = s.client();
    let v = q(&mut c, &["CONFIG", "GET", "maxclients"]).unwrap();
    let p = pairs(&v);
    assert_eq!(p.len(), 1, "{v:?}");
    assert_eq!(p[0].0, "maxclients");
    let n: i64 = as_text(&p[0].1)
        .unwrap()
        .parse()
        .expect("maxclients is a number");
    assert!(n > 0);

    assert_eq!(
        q(&mut c, &["CONFIG", "SET", "maxclients", "5000"]).unwrap(),
        Value::Okay
    );
    let p = pairs(&q(&mut c, &["CONFIG", "GET", "maxclients"]).unwrap());
    assert_eq!(as_text(&p[0].1).as_deref(), Some("5000"));

    // default is KEL (K, E and raftlock's lock class L)
    let p = pairs(&q(&mut c, &["CONFIG", "GET", "notify-keyspace-events"]).unwrap());
    assert_eq!(p.len(), 1);
    let flags: BTreeSet<char> = as_text(&p[0].1).unwrap().chars().collect();
    assert_eq!(
        flags,
        "KEL".chars().collect::<BTreeSet<_>>(),
        "default notify-keyspace-events"
    );

    assert_eq!(
        q(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]).unwrap(),
        Value::Okay
    );
    let p = pairs(&q(&mut c, &["CONFIG", "GET", "notify-keyspace-events"]).unwrap());
    let flags: BTreeSet<char> = as_text(&p[0].1).unwrap().chars().collect();
    assert_eq!(
        flags,
        "AKE".chars().collect::<BTreeSet<_>>(),
        "after CONFIG SET KEA"
    );

    // a pattern
    let p = pairs(&q(&mut c, &["CONFIG", "GET", "maxcl*"]).unwrap());
    assert!(p.iter().any(|(k, _)| k == "maxclients"), "{p:?}");
    // what redis-benchmark asks on connect must not be an error
    assert!(q(&mut c, &["CONFIG", "GET", "save"]).is_ok());
    assert!(q(&mut c, &["CONFIG", "GET", "appendonly"]).is_ok());
    // unknown parameters
    assert_eq!(
        pairs(&q(&mut c, &["CONFIG", "GET", "no-such-parameter"]).unwrap()).len(),
        0
    );
    let e = expect_err(q(&mut c, &["CONFIG", "SET", "no-such-parameter", "1"]));
    assert!(e.starts_with("ERR "), "{e}");
    let e = expect_err(q(&mut c, &["CONFIG", "SET", "maxclients", "lots"]));
    assert!(e.starts_with("ERR "), "{e}");
}

#[test]
fn dbsize_flushdb_flushall_time() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["DBSIZE"]).unwrap(), Value::Int(0));
    for k in ["a", "b", "c"] {
        q(&mut c, &["SET", k, "1"]).unwrap();
    }
    assert_eq!(q(&mut c, &["DBSIZE"]).unwrap(), Value::Int(3));
    assert_eq!(q(&mut c, &["FLUSHDB"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["DBSIZE"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut c, &["GET", "a"]).unwrap(), Value::Nil);
    q(&mut c, &["SET", "d", "1"]).unwrap();
    assert_eq!(q(&mut c, &["FLUSHALL"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["DBSIZE"]).unwrap(), Value::Int(0));

    // LASTSAVE: every acknowledged write is saved, so it is now.
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let saved = int(&q(&mut c, &["LASTSAVE"]).unwrap());
    let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((before..=after).contains(&saved), "LASTSAVE {saved} not in {before}..={after}");

    // ROLE agrees with INFO replication: a master with no Redis replicas.
    let role = q(&mut c, &["ROLE"]).unwrap();
    let Value::Array(role) = &role else {
        panic!("ROLE: {role:?}")
    };
    assert_eq!(role.len(), 3, "{role:?}");
    assert_eq!(as_text(&role[0]).as_deref(), Some("master"));
    assert_eq!(role[1], Value::Int(0));
    assert_eq!(role[2], Value::Array(Vec::new()));
    let info = as_text(&q(&mut c, &["INFO", "replication"]).unwrap()).unwrap();
    assert!(info.contains("role:master"), "{info}");
    assert_eq!(
        expect_err(q(&mut c, &["ROLE", "x"])),
        "ERR wrong number of arguments for 'role' command"
    );

    // WAIT and WAITAOF answer at once, as ROLE says: no Redis replicas
    // (the writes are on a majority of the Raft cluster before any reply),
    // and this node's log is fsynced before each acknowledgement. Even the
    // timeout that would wait forever answers at once.
    q(&mut c, &["SET", "w", "1"]).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(q(&mut c, &["WAIT", "0", "0"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut c, &["WAIT", "1", "0"]).unwrap(), Value::Int(0));
    assert_eq!(
        q(&mut c, &["WAITAOF", "1", "1", "0"]).unwrap(),
        Value::Array(vec![Value::Int(1), Value::Int(0)])
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "WAIT blocked");
    for (cmd, e) in [
        (&["WAIT", "x", "0"][..], "ERR value is not an integer or out of range"),
        (&["WAIT", "x", "-1"][..], "ERR value is not an integer or out of range"),
        (&["WAIT", "0", "1.5"][..], "ERR timeout is not an integer or out of range"),
        (&["WAIT", "0", "-1"][..], "ERR timeout is negative"),
        (&["WAITAOF", "0", "x", "0"][..], "ERR value is not an integer or out of range"),
        (&["WAITAOF", "0", "0", "-5"][..], "ERR timeout is negative"),
        (&["WAIT", "0"][..], "ERR wrong number of arguments for 'wait' command"),
    ] {
        assert_eq!(expect_err(q(&mut c, cmd)), e, "{cmd:?}");
    }

    let t = q(&mut c, &["TIME"]).unwrap();
    let Value::Array(parts) = &t else {
        panic!("TIME: {t:?}")
    };
    assert_eq!(parts.len(), 2, "{t:?}");
    assert!(
        matches!(parts[0], Value::BulkString(_)),
        "TIME parts are bulk strings: {t:?}"
    );
    let secs: u64 = as_text(&parts[0]).unwrap().parse().unwrap();
    let micros: u64 = as_text(&parts[1]).unwrap().parse().unwrap();
    assert!(micros < 1_000_000);
    let now = now_unix().as_secs();
    assert!(secs.abs_diff(now) < 120, "TIME {secs} vs local clock {now}");
}

// ------------------------------------------------------------------------------
// SET and friends
// ------------------------------------------------------------------------------

#[test]
fn set_get_nx_xx_get_option() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), Value::Nil);
    assert_eq!(q(&mut c, &["SET", "k", "v1"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), bulk("v1"));

    assert_eq!(q(&mut c, &["SET", "k", "v2", "NX"]).unwrap(), Value::Nil);
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), bulk("v1"));
    assert_eq!(q(&mut c, &["SET", "k", "v2", "XX"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), bulk("v2"));

    assert_eq!(q(&mut c, &["SET", "new", "x", "XX"]).unwrap(), Value::Nil);
    assert_eq!(q(&mut c, &["EXISTS", "new"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut c, &["SET", "new", "x", "NX"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["GET", "new"]).unwrap(), bulk("x"));

    // GET option: returns the old value
    assert_eq!(q(&mut c, &["SET", "k", "v3", "GET"]).unwrap(), bulk("v2"));
    assert_eq!(
        q(&mut c, &["SET", "fresh", "v", "GET"]).unwrap(),
        Value::Nil
    );
    assert_eq!(q(&mut c, &["GET", "fresh"]).unwrap(), bulk("v"));
    // NX GET on an existing key: old value, nothing set (Redis 7)
    assert_eq!(
        q(&mut c, &["SET", "k", "v4", "NX", "GET"]).unwrap(),
        bulk("v3")
    );
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), bulk("v3"));
    // any case, any order
    assert_eq!(
        q(&mut c, &["set", "k", "v5", "get", "xx"]).unwrap(),
        bulk("v3")
    );
    assert_eq!(
        q(&mut c, &["sEt", "k", "v6", "Xx", "gEt", "pX", "100000"]).unwrap(),
        bulk("v5")
    );
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), bulk("v6"));
    // binary-safe values
    let bin: Vec<u8> = (0u8..=255).collect();
    let v: Value = redis::cmd("SET")
        .arg("bin")
        .arg(&bin[..])
        .query(&mut c)
        .unwrap();
    assert_eq!(v, Value::Okay);
    let v: Vec<u8> = redis::cmd("GET").arg("bin").query(&mut c).unwrap();
    assert_eq!(v, bin);
}

#[test]
fn set_expiry_options() {
    let s = TestServer::start();
    let mut c = s.client();
    let ttl = |c: &mut redis::Connection, k: &str| int(&q(c, &["TTL", k]).unwrap());
    let pttl = |c: &mut redis::Connection, k: &str| int(&q(c, &["PTTL", k]).unwrap());

    assert_eq!(
        q(&mut c, &["SET", "ex", "v", "EX", "100"]).unwrap(),
        Value::Okay
    );
    let t = ttl(&mut c, "ex");
    assert!((90..=100).contains(&t), "TTL after EX 100: {t}");

    assert_eq!(
        q(&mut c, &["SET", "px", "v", "PX", "100000"]).unwrap(),
        Value::Okay
    );
    let t = pttl(&mut c, "px");
    assert!((90_000..=100_000).contains(&t), "PTTL after PX 100000: {t}");

    let at = (now_unix().as_secs() + 100).to_string();
    assert_eq!(
        q(&mut c, &["SET", "exat", "v", "EXAT", &at]).unwrap(),
        Value::Okay
    );
    let t = ttl(&mut c, "exat");
    assert!((90..=101).contains(&t), "TTL after EXAT now+100: {t}");

    let at = (now_unix().as_millis() as u64 + 100_000).to_string();
    assert_eq!(
        q(&mut c, &["SET", "pxat", "v", "PXAT", &at]).unwrap(),
        Value::Okay
    );
    let t = pttl(&mut c, "pxat");
    assert!(
        (90_000..=100_000).contains(&t),
        "PTTL after PXAT now+100s: {t}"
    );

    // KEEPTTL keeps it; a plain SET discards it
    assert_eq!(
        q(&mut c, &["SET", "ex", "v2", "KEEPTTL"]).unwrap(),
        Value::Okay
    );
    let t = ttl(&mut c, "ex");
    assert!((1..=100).contains(&t), "TTL after SET KEEPTTL: {t}");
    assert_eq!(q(&mut c, &["GET", "ex"]).unwrap(), bulk("v2"));
    assert_eq!(q(&mut c, &["SET", "ex", "v3"]).unwrap(), Value::Okay);
    assert_eq!(ttl(&mut c, "ex"), -1, "plain SET must discard the TTL");

    // lower case, options in any order (redsync: `set k v px ms nx`)
    assert_eq!(
        q(&mut c, &["set", "lk", "tok", "px", "30000", "nx"]).unwrap(),
        Value::Okay
    );
    assert_eq!(
        q(&mut c, &["set", "lk", "tok2", "px", "30000", "nx"]).unwrap(),
        Value::Nil
    );
    let t = pttl(&mut c, "lk");
    assert!((1..=30_000).contains(&t), "{t}");
    assert_eq!(
        q(&mut c, &["SET", "lk2", "tok", "NX", "EX", "30"]).unwrap(),
        Value::Okay
    );

    // errors, with Redis's texts
    assert_eq!(
        expect_err(q(&mut c, &["SET", "e", "v", "NX", "XX"])),
        "ERR syntax error"
    );
    assert_eq!(
        expect_err(q(&mut c, &["SET", "e", "v", "EX", "10", "PX", "100"])),
        "ERR syntax error"
    );
    assert_eq!(
        expect_err(q(&mut c, &["SET", "e", "v", "KEEPTTL", "EX", "10"])),
        "ERR syntax error"
    );
    assert_eq!(
        expect_err(q(&mut c, &["SET", "e", "v", "BOGUS"])),
        "ERR syntax error"
    );
    assert_eq!(
        expect_err(q(&mut c, &["SET", "e", "v", "EX"])),
        "ERR syntax error"
    );
    assert_eq!(
        expect_err(q(&mut c, &["SET", "e", "v", "EX", "0"])),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(
        expect_err(q(&mut c, &["SET", "e", "v", "PX", "-5"])),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(
        expect_err(q(&mut c, &["SET", "e", "v", "EX", "soon"])),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        expect_err(q(&mut c, &["SET", "e"])),
        "ERR wrong number of arguments for 'set' command"
    );
    assert_eq!(
        q(&mut c, &["EXISTS", "e"]).unwrap(),
        Value::Int(0),
        "failed SETs set nothing"
    );
}

#[test]
fn getdel_del_exists_type() {
    let s = TestServer::start();
    let mut c = s.client();
    q(&mut c, &["SET", "a", "1"]).unwrap();
    q(&mut c, &["SET", "b", "2"]).unwrap();
    q(&mut c, &["SET", "c", "3"]).unwrap();

    assert_eq!(q(&mut c, &["GETDEL", "a"]).unwrap(), bulk("1"));
    assert_eq!(q(&mut c, &["GET", "a"]).unwrap(), Value::Nil);
    assert_eq!(q(&mut c, &["GETDEL", "a"]).unwrap(), Value::Nil);

    assert_eq!(q(&mut c, &["EXISTS", "b"]).unwrap(), Value::Int(1));
    assert_eq!(
        q(&mut c, &["EXISTS", "b", "b", "c", "nope"]).unwrap(),
        Value::Int(3)
    );
    // TOUCH counts as EXISTS does (Redis's own counts each name given).
    assert_eq!(
        q(&mut c, &["TOUCH", "b", "b", "c", "nope"]).unwrap(),
        Value::Int(3)
    );
    assert_eq!(
        expect_err(q(&mut c, &["TOUCH"])),
        "ERR wrong number of arguments for 'touch' command"
    );
    assert_eq!(
        q(&mut c, &["TYPE", "b"]).unwrap(),
        Value::SimpleString("string".into())
    );
    assert_eq!(
        q(&mut c, &["TYPE", "nope"]).unwrap(),
        Value::SimpleString("none".into())
    );

    assert_eq!(
        q(&mut c, &["DEL", "b", "c", "nope", "a"]).unwrap(),
        Value::Int(2)
    );
    assert_eq!(q(&mut c, &["EXISTS", "b", "c"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut c, &["DEL", "b"]).unwrap(), Value::Int(0));
    assert_eq!(
        expect_err(q(&mut c, &["DEL"])),
        "ERR wrong number of arguments for 'del' command"
    );
}

#[test]
fn expire_ttl_persist() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["TTL", "missing"]).unwrap(), Value::Int(-2));
    assert_eq!(q(&mut c, &["PTTL", "missing"]).unwrap(), Value::Int(-2));
    q(&mut c, &["SET", "k", "v"]).unwrap();
    assert_eq!(q(&mut c, &["TTL", "k"]).unwrap(), Value::Int(-1));
    assert_eq!(q(&mut c, &["PTTL", "k"]).unwrap(), Value::Int(-1));

    assert_eq!(q(&mut c, &["EXPIRE", "k", "100"]).unwrap(), Value::Int(1));
    let t = int(&q(&mut c, &["TTL", "k"]).unwrap());
    assert!((90..=100).contains(&t), "TTL {t}");
    assert_eq!(
        q(&mut c, &["PEXPIRE", "k", "50000"]).unwrap(),
        Value::Int(1)
    );
    let t = int(&q(&mut c, &["PTTL", "k"]).unwrap());
    assert!((40_000..=50_000).contains(&t), "PTTL {t}");
    assert_eq!(
        q(&mut c, &["EXPIRE", "missing", "100"]).unwrap(),
        Value::Int(0)
    );
    assert_eq!(
        q(&mut c, &["PEXPIRE", "missing", "100"]).unwrap(),
        Value::Int(0)
    );
    assert_eq!(
        expect_err(q(&mut c, &["EXPIRE", "k", "later"])),
        "ERR value is not an integer or out of range"
    );

    assert_eq!(q(&mut c, &["PERSIST", "k"]).unwrap(), Value::Int(1));
    assert_eq!(q(&mut c, &["TTL", "k"]).unwrap(), Value::Int(-1));
    assert_eq!(q(&mut c, &["PERSIST", "k"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut c, &["PERSIST", "missing"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), bulk("v"));

    // a non-positive timeout deletes the key (Redis semantics)
    assert_eq!(q(&mut c, &["EXPIRE", "k", "-1"]).unwrap(), Value::Int(1));
    assert_eq!(q(&mut c, &["EXISTS", "k"]).unwrap(), Value::Int(0));
}

#[test]
fn keys_expire_by_themselves() {
    let s = TestServer::start();
    let mut c = s.client();
    // a key whose expiry has passed reads as absent
    q(&mut c, &["SET", "gone", "v", "PX", "1"]).unwrap();
    // Reads are judged at the log time of the last applied entry, which passes the
    // expiry once the node's expiry timer commits it: a bounded wait, not a sleep.
    poll_until(EVENT_TIMEOUT, "GET gone -> nil after its 1 ms TTL", || {
        (q(&mut c, &["GET", "gone"]).unwrap() == Value::Nil).then_some(())
    });
    assert_eq!(q(&mut c, &["EXISTS", "gone"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut c, &["PTTL", "gone"]).unwrap(), Value::Int(-2));
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert!(!keys.contains(&"gone".to_string()), "{keys:?}");

    // and an expiring key disappears on its own (Expire entries), DBSIZE included
    q(&mut c, &["SET", "soon", "v"]).unwrap();
    assert_eq!(
        q(&mut c, &["PEXPIRE", "soon", "300"]).unwrap(),
        Value::Int(1)
    );
    poll_until(EVENT_TIMEOUT, "key 'soon' to expire", || {
        (q(&mut c, &["EXISTS", "soon"]).unwrap() == Value::Int(0)).then_some(())
    });
    poll_until(EVENT_TIMEOUT, "DBSIZE 0 after expiry", || {
        (q(&mut c, &["DBSIZE"]).unwrap() == Value::Int(0)).then_some(())
    });
}

#[test]
fn incr_incrby_decr() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["INCR", "n"]).unwrap(), Value::Int(1));
    assert_eq!(q(&mut c, &["INCRBY", "n", "10"]).unwrap(), Value::Int(11));
    assert_eq!(q(&mut c, &["DECR", "n"]).unwrap(), Value::Int(10));
    assert_eq!(q(&mut c, &["INCRBY", "n", "-15"]).unwrap(), Value::Int(-5));
    assert_eq!(q(&mut c, &["GET", "n"]).unwrap(), bulk("-5"));
    assert_eq!(q(&mut c, &["DECR", "fresh"]).unwrap(), Value::Int(-1));

    q(&mut c, &["SET", "s", "abc"]).unwrap();
    assert_eq!(
        expect_err(q(&mut c, &["INCR", "s"])),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        expect_err(q(&mut c, &["INCRBY", "n", "ten"])),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        expect_err(q(&mut c, &["DECR", "s"])),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(q(&mut c, &["GET", "s"]).unwrap(), bulk("abc"));
    q(&mut c, &["SET", "big", "9223372036854775807"]).unwrap();
    assert_eq!(
        expect_err(q(&mut c, &["INCR", "big"])),
        "ERR increment or decrement would overflow"
    );

    // INCR changes the value in place: the TTL stays
    q(&mut c, &["SET", "t", "1", "EX", "100"]).unwrap();
    assert_eq!(q(&mut c, &["INCR", "t"]).unwrap(), Value::Int(2));
    let t = int(&q(&mut c, &["TTL", "t"]).unwrap());
    assert!((1..=100).contains(&t), "INCR must keep the TTL, TTL is {t}");
}

#[test]
fn keys_glob_patterns() {
    let s = TestServer::start();
    let mut c = s.client();
    for k in [
        "hello", "hallo", "hxllo", "hllo", "heeeello", "user:1", "user:2", "x",
    ] {
        q(&mut c, &["SET", k, "1"]).unwrap();
    }
    let keys = |c: &mut redis::Connection, pat: &str| -> BTreeSet<String> {
        let v: Vec<String> = redis::cmd("KEYS").arg(pat).query(c).unwrap();
        v.into_iter().collect()
    };
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        keys(&mut c, "*"),
        set(&["hello", "hallo", "hxllo", "hllo", "heeeello", "user:1", "user:2", "x"])
    );
    assert_eq!(keys(&mut c, "h?llo"), set(&["hello", "hallo", "hxllo"]));
    assert_eq!(
        keys(&mut c, "h*llo"),
        set(&["hello", "hallo", "hxllo", "hllo", "heeeello"])
    );
    assert_eq!(keys(&mut c, "h[ae]llo"), set(&["hello", "hallo"]));
    assert_eq!(keys(&mut c, "h[^e]llo"), set(&["hallo", "hxllo"]));
    assert_eq!(keys(&mut c, "h[a-b]llo"), set(&["hallo"]));
    assert_eq!(keys(&mut c, "user:*"), set(&["user:1", "user:2"]));
    assert_eq!(keys(&mut c, "nomatch*"), set(&[]));
    assert_eq!(keys(&mut c, "x"), set(&["x"]));
}

#[test]
fn scan_iterates_every_key() {
    let s = TestServer::start();
    let mut c = s.client();
    let mut p = redis::pipe();
    let mut want_scan = BTreeSet::new();
    for i in 0..237 {
        let k = format!("scan:{i}");
        p.cmd("SET").arg(&k).arg(i).ignore();
        want_scan.insert(k);
    }
    for i in 0..13 {
        p.cmd("SET").arg(format!("other:{i}")).arg(i).ignore();
    }
    let () = p.query(&mut c).unwrap();

    let scan_all = |c: &mut redis::Connection, extra: &[&str]| -> BTreeSet<String> {
        let mut cursor = "0".to_string();
        let mut seen = BTreeSet::new();
        for _round in 0..10_000 {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(&cursor);
            for a in extra {
                cmd.arg(*a);
            }
            let v: Value = cmd.query(c).unwrap();
            let Value::Array(parts) = &v else {
                panic!("SCAN reply: {v:?}")
            };
            assert_eq!(parts.len(), 2, "SCAN reply: {v:?}");
            assert!(
                matches!(parts[0], Value::BulkString(_)),
                "SCAN cursor must be a bulk string: {v:?}"
            );
            cursor = as_text(&parts[0]).unwrap();
            let Value::Array(keys) = &parts[1] else {
                panic!("SCAN keys: {v:?}")
            };
            for k in keys {
                seen.insert(as_text(k).unwrap());
            }
            if cursor == "0" {
                return seen;
            }
        }
        panic!("SCAN never returned cursor 0");
    };
    assert_eq!(
        scan_all(&mut c, &["MATCH", "scan:*", "COUNT", "10"]),
        want_scan
    );
    let all = scan_all(&mut c, &["COUNT", "7"]);
    assert_eq!(all.len(), 250, "plain SCAN must return every key");
    assert_eq!(scan_all(&mut c, &[]).len(), 250);
    assert_eq!(
        scan_all(&mut c, &["match", "other:1*", "count", "1000"]).len(),
        4
    );
    assert_eq!(
        expect_err(q(&mut c, &["SCAN", "notanumber"])),
        "ERR invalid cursor"
    );
}

// ------------------------------------------------------------------------------
// errors, protocol, pipelining
// ------------------------------------------------------------------------------

#[test]
fn unknown_command_and_wrong_arity_texts() {
    let s = TestServer::start();
    let mut c = s.client();
    let id = client_id(&mut c);
    let e = expect_err(q(&mut c, &["dping"]));
    assert_eq!(
        e.trim_end(),
        "ERR unknown command 'dping', with args beginning with:"
    );
    let e = expect_err(q(&mut c, &["dping", "a", "b"]));
    assert_eq!(
        e.trim_end(),
        "ERR unknown command 'dping', with args beginning with: 'a' 'b'"
    );
    assert_eq!(
        expect_err(q(&mut c, &["GET"])),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        expect_err(q(&mut c, &["get", "a", "b"])),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        expect_err(q(&mut c, &["EXPIRE", "a"])),
        "ERR wrong number of arguments for 'expire' command"
    );
    // the connection is still the same open connection
    assert_eq!(client_id(&mut c), id);
    assert_eq!(q(&mut c, &["SET", "after", "errors"]).unwrap(), Value::Okay);

    // exact bytes on the wire, including Redis's trailing space
    let mut r = s.raw();
    r.send(&RawConn::encode(&[b"dping"]));
    assert_eq!(
        r.read_line().unwrap(),
        "-ERR unknown command 'dping', with args beginning with: "
    );
    r.send(&RawConn::encode(&[b"DPING", b"x"]));
    assert_eq!(
        r.read_line().unwrap(),
        "-ERR unknown command 'DPING', with args beginning with: 'x' "
    );
    r.send(&RawConn::encode(&[b"GET"]));
    assert_eq!(
        r.read_line().unwrap(),
        "-ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(r.cmd(&["PING"]), Resp::Simple("PONG".into()));
}

fn assert_protocol_error_closes(s: &TestServer, input: &[u8]) {
    let mut r = s.raw();
    r.send(input);
    let line = r
        .read_line()
        .unwrap_or_else(|e| panic!("no reply to malformed {input:?}: {e:?}"));
    assert!(
        line.starts_with("-ERR Protocol error: "),
        "malformed {input:?} must get '-ERR Protocol error: ...', got {line:?}"
    );
    assert!(
        r.closed_within(EVENT_TIMEOUT),
        "the server must close the connection after a protocol error ({input:?})"
    );
}

#[test]
fn malformed_resp_gets_protocol_error_and_close() {
    let s = TestServer::start();
    assert_protocol_error_closes(&s, b"*1\r\n$x\r\n");
    assert_protocol_error_closes(&s, b"*abc\r\n");
    assert_protocol_error_closes(&s, b"*1\r\n+PING\r\n");
    // a bulk length far beyond any sane limit must be refused, not allocated
    assert_protocol_error_closes(&s, b"*1\r\n$99999999999\r\n");
    // a valid command before the garbage is still answered
    let mut r = s.raw();
    r.send(b"*1\r\n$4\r\nPING\r\n*1\r\n$x\r\n");
    assert_eq!(r.read().unwrap(), Resp::Simple("PONG".into()));
    let line = r.read_line().unwrap();
    assert!(line.starts_with("-ERR Protocol error: "), "{line:?}");
    assert!(r.closed_within(EVENT_TIMEOUT));
    // the server is fine afterwards
    let mut c = s.client();
    assert_eq!(
        q(&mut c, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
}

#[test]
fn oversized_declarations_do_not_take_the_server_down() {
    // Headers that announce enormous arrays or strings, then stall: the server must
    // neither allocate what they announce nor stop serving others.
    let s = TestServer::start();
    let rss_before = s.rss_kib();
    let mut stalled = Vec::new();
    for header in [
        &b"*2147483647\r\n$3\r\nGET\r\n"[..],
        &b"*1\r\n$2147483647\r\nabc"[..],
        &b"*1\r\n$536870912\r\nabc"[..],
        &b"*1048576\r\n"[..],
    ] {
        for _ in 0..4 {
            let mut r = s.raw();
            r.send(header);
            stalled.push(r);
        }
    }
    let mut c = s.client();
    for i in 0..20 {
        assert_eq!(
            q(&mut c, &["SET", &format!("k{i}"), "v"]).unwrap(),
            Value::Okay
        );
    }
    assert_eq!(q(&mut c, &["DBSIZE"]).unwrap(), Value::Int(20));
    if let (Some(before), Some(after)) = (rss_before, s.rss_kib()) {
        assert!(
            after < before + 512 * 1024,
            "RSS grew from {before} KiB to {after} KiB after 16 stalled oversized headers"
        );
    }
    drop(stalled);
    assert_eq!(
        q(&mut c, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
}

#[test]
fn inline_commands() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.send(b"PING\r\n");
    assert_eq!(r.read_line().unwrap(), "+PONG");
    r.send(b"SET inl hello\r\nGET inl\r\nECHO  spaced\r\n");
    assert_eq!(r.read().unwrap(), Resp::Simple("OK".into()));
    assert_eq!(r.read().unwrap(), Resp::bulk("hello"));
    assert_eq!(r.read().unwrap(), Resp::bulk("spaced"));
    // inline and multibulk mixed in one write
    r.send(b"PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nok\r\nping\r\n");
    assert_eq!(r.read().unwrap(), Resp::Simple("PONG".into()));
    assert_eq!(r.read().unwrap(), Resp::bulk("ok"));
    assert_eq!(r.read().unwrap(), Resp::Simple("PONG".into()));
}

#[test]
fn pipelining_in_one_write() {
    let s = TestServer::start();
    // raw: 1000 INCRs and a GET in a single write, replies in order
    let mut r = s.raw();
    let mut buf = Vec::new();
    for _ in 0..1000 {
        buf.extend_from_slice(&RawConn::encode(&[b"INCR", b"ctr"]));
    }
    buf.extend_from_slice(&RawConn::encode(&[b"GET", b"ctr"]));
    r.send(&buf);
    for i in 1..=1000 {
        assert_eq!(r.read().unwrap(), Resp::Int(i), "reply {i} out of order");
    }
    assert_eq!(r.read().unwrap(), Resp::bulk("1000"));

    // the redis crate's pipeline
    let mut c = s.client();
    let mut p = redis::pipe();
    for i in 0..300 {
        p.cmd("SET").arg(format!("p{i}")).arg(i);
        p.cmd("GET").arg(format!("p{i}"));
    }
    let out: Vec<Value> = p.query(&mut c).unwrap();
    assert_eq!(out.len(), 600);
    for i in 0..300 {
        assert_eq!(out[2 * i], Value::Okay);
        assert_eq!(out[2 * i + 1], bulk(&i.to_string()));
    }
    // an error in the middle of a pipeline does not break the rest
    let out: Vec<redis::RedisResult<Value>> = redis::pipe()
        .cmd("SET")
        .arg("m")
        .arg("1")
        .cmd("GET")
        .cmd("GET")
        .arg("m")
        .ignore_errors()
        .query(&mut c)
        .unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(*out[0].as_ref().unwrap(), Value::Okay);
    assert_eq!(
        err_text(out[1].as_ref().unwrap_err()),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(*out[2].as_ref().unwrap(), bulk("1"));
}

#[tokio::test]
async fn async_client_concurrent_commands() {
    let s = TestServer::start();
    let con = s.async_client().await;
    let mut tasks = Vec::new();
    for i in 0..50 {
        let mut con = con.clone();
        tasks.push(tokio::spawn(async move {
            let n: i64 = redis::cmd("INCR")
                .arg("actr")
                .query_async(&mut con)
                .await
                .unwrap();
            let ok: Value = redis::cmd("SET")
                .arg(format!("a{i}"))
                .arg(i)
                .query_async(&mut con)
                .await
                .unwrap();
            assert_eq!(ok, Value::Okay);
            n
        }));
    }
    let mut seen = BTreeSet::new();
    for t in tasks {
        seen.insert(t.await.unwrap());
    }
    assert_eq!(
        seen,
        (1..=50).collect::<BTreeSet<i64>>(),
        "every INCR result exactly once"
    );
    let mut con = con.clone();
    let n: i64 = redis::cmd("DBSIZE").query_async(&mut con).await.unwrap();
    assert_eq!(n, 51);
}

#[test]
fn stalled_half_frame_and_idle_connections_do_not_block_others() {
    let s = TestServer::start();
    let mut stalled = s.raw();
    stalled.send(b"*2\r\n$3\r\nGET\r\n$10\r\nabc");
    let idle: Vec<std::net::TcpStream> = (0..200)
        .map(|_| std::net::TcpStream::connect(s.addr()).expect("connect"))
        .collect();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["SET", "k", "v"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), bulk("v"));
    drop(idle);
    // finishing the stalled frame still works
    stalled.send(b"defghij\r\n");
    assert_eq!(stalled.read().unwrap(), Resp::Bulk(None));
}

#[test]
fn maxclients_limit_uses_redis_error_text() {
    let s = TestServer::start();
    let mut admin = s.client();
    assert_eq!(
        q(&mut admin, &["CONFIG", "SET", "maxclients", "3"]).unwrap(),
        Value::Okay
    );
    let mut refused = 0;
    let mut conns = Vec::new();
    for _ in 0..8 {
        let mut r = s.raw();
        r.send(b"PING\r\n");
        match r.read() {
            Ok(Resp::Simple(p)) if p == "PONG" => conns.push(r),
            Ok(Resp::Error(e)) => {
                assert_eq!(e, "ERR max number of clients reached");
                refused += 1;
            }
            Err(RawErr::Closed) => panic!("connection closed without Redis's error text"),
            other => panic!("unexpected reply {other:?}"),
        }
    }
    assert!(
        refused >= 1,
        "maxclients 3 never refused a connection ({} accepted)",
        conns.len()
    );
    assert!(
        conns.len() <= 3,
        "{} connections accepted with maxclients 3",
        conns.len()
    );
    drop(conns);
    assert_eq!(
        q(&mut admin, &["CONFIG", "SET", "maxclients", "10000"]).unwrap(),
        Value::Okay
    );
    let mut c = poll_until(
        EVENT_TIMEOUT,
        "a new connection after raising maxclients",
        || {
            let mut r = s.raw();
            r.send(b"PING\r\n");
            matches!(r.read(), Ok(Resp::Simple(_))).then_some(r)
        },
    );
    assert_eq!(c.cmd(&["PING"]), Resp::Simple("PONG".into()));
}

/// A scrape of /metrics: the status line, the samples (`name{labels}` -> value) and
/// the `# TYPE` lines (metric -> type).
struct Scrape {
    status: String,
    samples: std::collections::BTreeMap<String, f64>,
    types: std::collections::BTreeMap<String, String>,
}

fn scrape(s: &TestServer) -> Scrape {
    let mut http = std::net::TcpStream::connect(("127.0.0.1", s.metrics_port)).expect("metrics");
    http.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    http.read_to_string(&mut text).expect("read metrics");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP header end:\n{text}"));
    let status = head.lines().next().unwrap_or("").to_string();
    let mut samples = std::collections::BTreeMap::new();
    let mut types = std::collections::BTreeMap::new();
    for line in body.lines().map(str::trim).filter(|l| l.starts_with("# TYPE ")) {
        let mut w = line["# TYPE ".len()..].split_whitespace();
        if let (Some(name), Some(kind)) = (w.next(), w.next()) {
            types.insert(name.to_string(), kind.to_string());
        }
    }
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample line {line:?}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad sample value in {line:?}"));
        assert!(samples.insert(name.to_string(), value).is_none(), "sample {name} twice:\n{body}");
    }
    Scrape { status, samples, types }
}

/// The lock metrics count exactly the lock events the test causes on a fresh node:
/// two grants (one with a 10 s and one with a 0.2 s lease), a denial, a renewal, a
/// lost renewal, a release, an expiry, an honoured and a stale fence.
#[test]
fn metrics_endpoint_serves_prometheus_text() {
    let s = TestServer::start();
    let mut c = s.client();
    let first = scrape(&s);
    assert!(first.status.starts_with("HTTP/1.1 200"), "{}", first.status);
    let before = first.samples;
    let lock_metrics = [
        "raftlock_lock_grants_total",
        "raftlock_lock_denials_total",
        "raftlock_lock_renewals_total",
        "raftlock_lock_releases_total",
        "raftlock_lease_expirations_total",
        "raftlock_fencing_rejections_total",
        "raftlock_lease_requested_ttl_seconds",
        "raftlock_lock_hold_seconds",
    ];
    for (name, v) in &before {
        assert!(
            !lock_metrics.iter().any(|m| name.starts_with(m)) || *v == 0.0,
            "before any lock command: {name} = {v}"
        );
    }

    let tok = match q(&mut c, &["LOCK.ACQUIRE", "m", "o", "10000"]).unwrap() {
        Value::Int(t) => t,
        other => panic!("LOCK.ACQUIRE m o replied {other:?}"),
    };
    let ts = tok.to_string();
    assert_eq!(q(&mut c, &["LOCK.ACQUIRE", "m", "other", "10000"]).unwrap(), Value::Nil);
    assert_eq!(q(&mut c, &["LOCK.RENEW", "m", "o", &ts, "20000"]).unwrap(), Value::Int(20_000));
    assert_eq!(q(&mut c, &["LOCK.FENCE", "db", &ts]).unwrap(), Value::Int(tok));
    assert_eq!(
        expect_err(q(&mut c, &["LOCK.FENCE", "db", &(tok - 1).to_string()])),
        format!("STALE token {} is lower than {tok}, the highest honored for this resource", tok - 1)
    );
    assert_eq!(q(&mut c, &["LOCK.RELEASE", "m", "o", &ts]).unwrap(), Value::Int(1));
    assert!(expect_err(q(&mut c, &["LOCK.RENEW", "m", "o", &ts, "1000"])).starts_with("LOCKLOST"));
    assert!(matches!(q(&mut c, &["LOCK.ACQUIRE", "e", "o", "200"]).unwrap(), Value::Int(_)));
    poll_until(EVENT_TIMEOUT, "the 200 ms lease on e to expire", || {
        (q(&mut c, &["LOCK.INFO", "e"]).unwrap() == Value::Nil).then_some(())
    });

    let want: &[(&str, f64)] = &[
        ("raftlock_lock_grants_total", 2.0),
        ("raftlock_lock_denials_total", 1.0),
        ("raftlock_lock_renewals_total{result=\"ok\"}", 1.0),
        ("raftlock_lock_renewals_total{result=\"lost\"}", 1.0),
        ("raftlock_lock_releases_total", 1.0),
        ("raftlock_lease_expirations_total", 1.0),
        ("raftlock_fencing_rejections_total", 1.0),
        ("raftlock_lease_requested_ttl_seconds_count", 2.0),
        ("raftlock_lease_requested_ttl_seconds_sum", 10.2),
        ("raftlock_lease_requested_ttl_seconds_bucket{le=\"0.1\"}", 0.0),
        ("raftlock_lease_requested_ttl_seconds_bucket{le=\"0.5\"}", 1.0),
        ("raftlock_lease_requested_ttl_seconds_bucket{le=\"5\"}", 1.0),
        ("raftlock_lease_requested_ttl_seconds_bucket{le=\"10\"}", 2.0),
        ("raftlock_lock_hold_seconds_count", 2.0),
        ("raftlock_commands_total{command=\"lock.acquire\",result=\"ok\"}", 3.0),
        ("raftlock_commands_total{command=\"lock.renew\",result=\"ok\"}", 1.0),
        ("raftlock_commands_total{command=\"lock.renew\",result=\"error\"}", 1.0),
        ("raftlock_commands_total{command=\"lock.fence\",result=\"ok\"}", 1.0),
        ("raftlock_commands_total{command=\"lock.fence\",result=\"error\"}", 1.0),
        ("raftlock_commands_total{command=\"lock.release\",result=\"ok\"}", 1.0),
        ("raftlock_raft_is_leader", 1.0),
        ("raftlock_raft_term", 1.0),
    ];
    // Lease events are counted where the node applies them, which can follow the
    // reply: wait (bounded) until the page shows them all, then compare exactly.
    let mut last = Scrape { status: String::new(), samples: Default::default(), types: Default::default() };
    let matches = |m: &std::collections::BTreeMap<String, f64>| {
        want.iter().all(|(k, v)| m.get(*k).is_some_and(|got| (got - v).abs() < 1e-9))
    };
    let deadline = std::time::Instant::now() + EVENT_TIMEOUT;
    while std::time::Instant::now() < deadline {
        last = scrape(&s);
        assert!(last.status.starts_with("HTTP/1.1 200"), "{}", last.status);
        if matches(&last.samples) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let wrong: Vec<String> = want
        .iter()
        .filter(|(k, v)| last.samples.get(*k).is_none_or(|got| (got - v).abs() >= 1e-9))
        .map(|(k, v)| format!("  {k}: expected {v}, page has {:?}", last.samples.get(*k)))
        .collect();
    assert!(wrong.is_empty(), "metrics after the lock commands:\n{}", wrong.join("\n"));
    // Prometheus text format: each family is declared with its type.
    for (name, kind) in [
        ("raftlock_lock_grants_total", "counter"),
        ("raftlock_lock_renewals_total", "counter"),
        ("raftlock_fencing_rejections_total", "counter"),
        ("raftlock_lease_requested_ttl_seconds", "histogram"),
        ("raftlock_lock_hold_seconds", "histogram"),
        ("raftlock_raft_is_leader", "gauge"),
    ] {
        assert_eq!(last.types.get(name).map(String::as_str), Some(kind), "# TYPE of {name}");
    }
}

/// A server keeps its runtime's thread polling while a log write is in
/// flight (RAFT.INFO `busy_poll`, and `busy_polls` counts the polls: the
/// log's writes do start them), unless `--busy-poll-us 0`. Commands are
/// answered alike either way.
#[test]
fn a_server_polls_while_its_log_is_written_unless_told_not_to() {
    for (env, polls) in [(None, 1), (Some("0"), 0)] {
        let polls_expected = polls == 1;
        let s = match env {
            Some(us) => TestServer::start_with_env(&[("RAFTLOCK_BUSY_POLL_US", us)]),
            None => TestServer::start(),
        };
        let mut c = s.client();
        assert_eq!(s.raft_info().num("busy_poll"), polls, "busy poll limit {env:?}");
        for i in 0..50 {
            let token: i64 = redis::cmd("LOCK.ACQUIRE").arg(format!("l{i}")).arg("me").arg(30_000).query(&mut c).unwrap();
            assert!(token > 0);
            let released: i64 = redis::cmd("LOCK.RELEASE").arg(format!("l{i}")).arg("me").arg(token).query(&mut c).unwrap();
            assert_eq!(released, 1, "release of l{i} with busy poll limit {env:?}");
        }
        let polls = s.raft_info().num("busy_polls");
        if polls_expected {
            assert!(polls > 0, "no poll during 100 log writes");
        } else {
            assert_eq!(polls, 0, "polled with --busy-poll-us 0");
        }
    }
}

/// Writes a client pipelines on one connection go to the leader together
/// (one request, one log entry) and are applied and answered in order, each
/// on its own: an error in the middle stops nothing, a read in the middle
/// sees the writes before it, and the fencing tokens of locks taken in one
/// pipeline still increase. Before, each waited for its own commit: one log
/// entry per command.
#[test]
fn pipelined_writes_share_an_entry_and_keep_their_order() {
    let s = TestServer::start();
    let mut c = s.client();
    q(&mut c, &["SET", "text", "not a number"]).unwrap();
    let before = s.raft_info().num("commit_index");
    let mut p = redis::pipe();
    for _ in 0..100 {
        p.cmd("INCR").arg("n");
    }
    p.cmd("INCR").arg("text"); // fails, alone
    p.cmd("GET").arg("n"); // a read: sees the 100 increments
    for i in 0..50 {
        p.cmd("INCR").arg("n");
        p.cmd("LOCK.ACQUIRE").arg(format!("pl:{i}")).arg("o").arg(60_000);
    }
    let replies: Vec<Value> = p.ignore_errors().query(&mut c).expect("pipeline");
    assert_eq!(replies.len(), 202);
    for (i, r) in replies[..100].iter().enumerate() {
        assert_eq!(r, &Value::Int(i as i64 + 1), "reply {i} of the pipeline");
    }
    assert!(
        matches!(&replies[100], Value::ServerError(e) if e.details().unwrap_or("").contains("not an integer")),
        "INCR of a string: {:?}",
        replies[100]
    );
    assert_eq!(replies[101], bulk("100"));
    let mut last_token = 0;
    for i in 0..50 {
        assert_eq!(replies[102 + 2 * i], Value::Int(101 + i as i64));
        let token = int(&replies[103 + 2 * i]);
        assert!(token > last_token, "tokens must increase along the pipeline: {token} after {last_token}");
        last_token = token;
    }
    let entries = s.raft_info().num("commit_index") - before;
    assert!(entries < 20, "202 pipelined commands took {entries} log entries");
    assert_eq!(q(&mut c, &["GET", "n"]).unwrap(), bulk("150"));
}

/// Headroom: what was left of a lease at its renewal, as a fraction of the
/// TTL. LOCK.TOP: refused attempts (LOCK.ACQUIRE and SET NX), queued waiters
/// and time held, by key; for operators only.
#[test]
fn headroom_and_the_hot_locks() {
    let s = TestServer::start();
    let mut c = s.client();
    let int = |v: Value| match v {
        Value::Int(n) => n,
        other => panic!("not an integer: {other:?}"),
    };
    // Renewed at once: nearly all of it left.
    let t = int(q(&mut c, &["LOCK.ACQUIRE", "h", "o", "10000"]).unwrap()).to_string();
    assert_eq!(q(&mut c, &["LOCK.RENEW", "h", "o", &t, "10000"]).unwrap(), Value::Int(10_000));
    // Renewed late: about a quarter left (a stall of up to half a second
    // more still leaves it held).
    let t2 = int(q(&mut c, &["LOCK.ACQUIRE", "late", "o", "2000"]).unwrap()).to_string();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(q(&mut c, &["LOCK.RENEW", "late", "o", &t2, "2000"]).unwrap(), Value::Int(2000));
    let m = scrape(&s).samples;
    let sample = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in /metrics"));
    assert_eq!(sample("raftlock_lease_headroom_ratio_count"), 2.0);
    assert_eq!(sample("raftlock_lease_headroom_ratio_bucket{le=\"0.3\"}"), 1.0, "the late renewal");
    assert_eq!(sample("raftlock_lease_headroom_ratio_bucket{le=\"0.9\"}"), 1.0, "the early one is above 0.9");
    assert_eq!(sample("raftlock_raft_apply_lag_entries"), 0.0);

    // "hot" is held; 5 LOCK.ACQUIRE and 3 SET NX are refused, one on "cold".
    let hot = int(q(&mut c, &["LOCK.ACQUIRE", "hot", "holder", "10000"]).unwrap()).to_string();
    for i in 0..5 {
        assert_eq!(q(&mut c, &["LOCK.ACQUIRE", "hot", &format!("o{i}"), "1000"]).unwrap(), Value::Nil);
    }
    for i in 0..3 {
        assert_eq!(q(&mut c, &["SET", "hot", &format!("s{i}"), "NX", "PX", "1000"]).unwrap(), Value::Nil);
    }
    assert_eq!(q(&mut c, &["SET", "cold", "x"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["SET", "cold", "y", "NX"]).unwrap(), Value::Nil);
    // A waiter queues, then gives up: one wait, and one more refusal.
    assert_eq!(q(&mut c, &["LOCK.ACQUIRE", "hot", "w", "1000", "WAIT", "100"]).unwrap(), Value::Nil);
    assert_eq!(q(&mut c, &["LOCK.RELEASE", "hot", "holder", &hot]).unwrap(), Value::Int(1));
    assert_eq!(q(&mut c, &["LOCK.RELEASE", "h", "o", &t]).unwrap(), Value::Int(1));

    let pairs = |v: &Value| -> Vec<(String, i64)> {
        let Value::Array(items) = v else { panic!("not an array: {v:?}") };
        items
            .iter()
            .map(|p| match p {
                Value::Array(kv) => match (&kv[0], &kv[1]) {
                    (Value::BulkString(k), Value::Int(n)) => (String::from_utf8_lossy(k).into_owned(), *n),
                    other => panic!("not [key, count]: {other:?}"),
                },
                other => panic!("not [key, count]: {other:?}"),
            })
            .collect()
    };
    let Value::Array(top) = q(&mut c, &["LOCK.TOP", "2"]).unwrap() else { panic!("LOCK.TOP is not a flat map in RESP2") };
    assert_eq!(top.len(), 6);
    assert_eq!(top[0], Value::BulkString(b"denials".to_vec()));
    assert_eq!(pairs(&top[1]), vec![("hot".into(), 9), ("cold".into(), 1)]);
    assert_eq!(top[2], Value::BulkString(b"waits".to_vec()));
    assert_eq!(pairs(&top[3]), vec![("hot".into(), 1)]);
    assert_eq!(top[4], Value::BulkString(b"hold-ms".to_vec()));
    let holds = pairs(&top[5]);
    assert_eq!(holds.iter().map(|(k, _)| k.as_str()).collect::<BTreeSet<_>>(), BTreeSet::from(["h", "hot"]), "{holds:?}");
    assert!(holds.iter().all(|(_, ms)| *ms >= 100), "{holds:?}");

    assert!(expect_err(q(&mut c, &["LOCK.TOP", "0"])).contains("positive"));
    assert!(expect_err(q(&mut c, &["LOCK.TOP", "x"])).contains("not an integer"));
    // Not in @lock: a user held to some keys must not see every key's name.
    assert_eq!(q(&mut c, &["ACL", "SETUSER", "locker", "on", ">pw", "+@lock", "~orders:*"]).unwrap(), Value::Okay);
    let mut u = s.client();
    assert_eq!(q(&mut u, &["AUTH", "locker", "pw"]).unwrap(), Value::Okay);
    assert!(expect_err(q(&mut u, &["LOCK.TOP"])).starts_with("NOPERM"));
    assert!(matches!(q(&mut u, &["LOCK.ACQUIRE", "orders:1", "o", "1000"]).unwrap(), Value::Int(_)));
}

/// `SAVE` answers once a snapshot covers every write applied before it (a
/// restart then replays none of them); `BGSAVE` and `BGREWRITEAOF` start one
/// and answer at once, with Redis's words.
#[test]
fn save_and_bgsave_take_snapshots() {
    let mut s = TestServer::start();
    let mut c = s.client();
    for i in 0..50 {
        q(&mut c, &["SET", &format!("k{i}"), "v"]).unwrap();
    }
    let before = s.raft_info();
    assert!(before.num("snapshot_index") < before.num("applied_index"), "{}", before.raw);
    assert_eq!(q(&mut c, &["SAVE"]).unwrap(), Value::Okay);
    let after = s.raft_info();
    assert!(after.num("snapshot_index") >= before.num("applied_index"), "{}", after.raw);
    assert_eq!(q(&mut c, &["BGSAVE"]).unwrap(), Value::SimpleString("Background saving started".into()));
    assert_eq!(q(&mut c, &["BGSAVE", "SCHEDULE"]).unwrap(), Value::SimpleString("Background saving started".into()));
    assert_eq!(common::expect_err(q(&mut c, &["BGSAVE", "now"])), "ERR syntax error");
    let rewrite = q(&mut c, &["BGREWRITEAOF"]).unwrap();
    assert_eq!(rewrite, Value::SimpleString("Background append only file rewriting started".into()));
    s.restart();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["DBSIZE"]).unwrap(), Value::Int(50));
}

/// `MEMORY USAGE` estimates a key's bytes (more for a bigger value, nil for
/// none) with Redis's argument errors; `MEMORY HELP` lists what is there.
#[test]
fn memory_usage_grows_with_the_value() {
    let s = TestServer::start();
    let mut c = s.client();
    let usage = |c: &mut redis::Connection, args: &[&str]| q(c, &[&["MEMORY", "USAGE"], args].concat());
    assert_eq!(usage(&mut c, &["nokey"]).unwrap(), Value::Nil);
    q(&mut c, &["SET", "small", "x"]).unwrap();
    q(&mut c, &["SET", "big", &"x".repeat(10_000)]).unwrap();
    q(&mut c, &["RPUSH", "list", "a", "b", "c"]).unwrap();
    let (small, big) = (int(&usage(&mut c, &["small"]).unwrap()), int(&usage(&mut c, &["big"]).unwrap()));
    assert!(small > 0 && big > small + 9_900, "{small} {big}");
    let list = int(&usage(&mut c, &["list", "SAMPLES", "0"]).unwrap());
    q(&mut c, &["RPUSH", "list", "d"]).unwrap();
    assert!(int(&usage(&mut c, &["list"]).unwrap()) > list);
    assert_eq!(expect_err(usage(&mut c, &[])), "ERR wrong number of arguments for 'memory|usage' command");
    assert_eq!(expect_err(usage(&mut c, &["small", "SAMPLES"])), "ERR syntax error");
    assert_eq!(expect_err(usage(&mut c, &["small", "SAMPLES", "-1"])), "ERR syntax error");
    assert_eq!(expect_err(usage(&mut c, &["small", "SAMPLES", "x"])), "ERR value is not an integer or out of range");
    assert_eq!(expect_err(q(&mut c, &["MEMORY", "FOO"])), "ERR unknown subcommand 'FOO'. Try MEMORY HELP.");
    let Value::Array(help) = q(&mut c, &["MEMORY", "HELP"]).unwrap() else { panic!("MEMORY HELP") };
    assert!(help.len() > 2);
}

/// `MEMORY STATS` has Redis's fields with this node's resident set and key
/// count; `DOCTOR`, `MALLOC-STATS` and `PURGE` answer as Redis's do when
/// all is well; each refuses arguments with Redis's arity error.
#[test]
fn memory_stats_doctor_and_purge() {
    let s = TestServer::start();
    let mut c = s.client();
    for i in 0..30 {
        q(&mut c, &["SET", &format!("k{i}"), "v"]).unwrap();
    }
    let stats = pairs(&q(&mut c, &["MEMORY", "STATS"]).unwrap());
    let names: Vec<&str> = stats.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names.len(), 28, "{names:?}");
    assert_eq!(names[..2], ["peak.allocated", "total.allocated"]);
    assert_eq!(names[10], "db.0");
    assert_eq!(names[27], "fragmentation.bytes");
    assert_eq!(lookup(&stats, "keys.count"), Some(&Value::Int(30)));
    let rss = int(lookup(&stats, "total.allocated").unwrap());
    let peak = int(lookup(&stats, "peak.allocated").unwrap());
    let real = s.rss_kib().unwrap() as i64 * 1024;
    assert!(rss > 1 << 20 && peak >= rss && rss < 4 * real && real < 4 * rss, "rss {rss} peak {peak} /proc {real}");
    assert_eq!(lookup(&stats, "keys.bytes-per-key"), Some(&Value::Int(rss / 30)));
    let doctor = as_text(&q(&mut c, &["MEMORY", "DOCTOR"]).unwrap()).unwrap();
    assert!(doctor.starts_with("Hi Sam, I can't find any memory issue"), "{doctor}");
    assert_eq!(q(&mut c, &["MEMORY", "PURGE"]).unwrap(), Value::Okay);
    assert!(as_text(&q(&mut c, &["MEMORY", "MALLOC-STATS"]).unwrap()).is_some());
    // They describe this node's process: a script, which runs on every
    // node, may not read them (MEMORY USAGE it may).
    let e = expect_err(q(&mut c, &["EVAL", "return redis.call('MEMORY', 'STATS')", "0"]));
    assert!(e.starts_with("ERR This Redis command is not allowed from script"), "{e}");
    assert!(matches!(q(&mut c, &["EVAL", "return redis.call('MEMORY', 'USAGE', 'k1')", "0"]).unwrap(), Value::Int(n) if n > 0));
    for sub in ["STATS", "DOCTOR", "PURGE", "MALLOC-STATS"] {
        let e = expect_err(q(&mut c, &["MEMORY", sub, "x"]));
        assert_eq!(e, format!("ERR wrong number of arguments for 'memory|{}' command", sub.to_ascii_lowercase()));
    }
}

/// `SLOWLOG` keeps the commands that took at least
/// `slowlog-log-slower-than` µs, newest first, with their arguments, the
/// client's address and name; never `AUTH`, `CONFIG` or a blocking wait.
#[test]
fn slowlog_keeps_slow_commands() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["SLOWLOG", "LEN"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]).unwrap(), Value::Okay);
    q(&mut c, &["CLIENT", "SETNAME", "slow-one"]).unwrap();
    q(&mut c, &["SET", "k", "v"]).unwrap();
    q(&mut c, &["AUTH", "nobody", "wrong"]).unwrap_err();
    q(&mut c, &["BLPOP", "empty", "0.05"]).unwrap();
    q(&mut c, &["GET", "k"]).unwrap();
    let Value::Array(entries) = q(&mut c, &["SLOWLOG", "GET", "-1"]).unwrap() else { panic!("SLOWLOG GET") };
    let commands: Vec<String> = entries
        .iter()
        .map(|e| {
            let Value::Array(fields) = e else { panic!("{e:?}") };
            assert_eq!(fields.len(), 6, "{fields:?}");
            assert!(matches!(fields[2], Value::Int(us) if us >= 0));
            let Value::Array(args) = &fields[3] else { panic!("{fields:?}") };
            let client = common::as_text(&fields[5]).unwrap_or_default();
            format!("{} {client}", args.iter().filter_map(common::as_text).collect::<Vec<_>>().join(" "))
        })
        .collect();
    // (Anything older took 10 ms or more before the CONFIG SET, on a busy machine.)
    assert_eq!(commands[..3], ["GET k slow-one", "SET k v slow-one", "CLIENT SETNAME slow-one slow-one"]);
    let Value::Array(one) = q(&mut c, &["SLOWLOG", "GET", "1"]).unwrap() else { panic!() };
    assert_eq!(one.len(), 1);
    assert!(q(&mut c, &["SLOWLOG", "LEN"]).unwrap() != Value::Int(0));
    assert_eq!(q(&mut c, &["SLOWLOG", "RESET"]).unwrap(), Value::Okay);
    // RESET itself was slow enough to be logged after it ran.
    assert_eq!(q(&mut c, &["SLOWLOG", "LEN"]).unwrap(), Value::Int(1));
    assert_eq!(q(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "-1"]).unwrap(), Value::Okay);
    q(&mut c, &["SLOWLOG", "RESET"]).unwrap();
    q(&mut c, &["SET", "k", "v2"]).unwrap();
    assert_eq!(q(&mut c, &["SLOWLOG", "LEN"]).unwrap(), Value::Int(0));
    assert_eq!(expect_err(q(&mut c, &["SLOWLOG", "GET", "-2"])), "ERR count should be greater than or equal to -1");
    assert_eq!(expect_err(q(&mut c, &["SLOWLOG", "NOPE"])), "ERR unknown subcommand 'NOPE'. Try SLOWLOG HELP.");
}
