//! Authentication and protected mode (issue 14), against the real binary:
//! with a password, an unauthenticated client can do nothing but AUTH,
//! HELLO ... AUTH, QUIT and RESET (pipelined writes included), with Redis
//! 7's replies; the redis crate and redis-cli authenticate the usual ways;
//! the password shows nowhere; and protected mode turns away clients that
//! are not on the loopback interface (here: connecting from 127.0.0.2) while
//! no password is set.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{q, RawConn, Resp, TestServer};
use redis::Value;

const PASS: &str = "Tr0ub4dor3";

fn err(r: Resp) -> String {
    match r {
        Resp::Error(e) => e,
        other => panic!("expected an error reply, got {other:?}"),
    }
}

/// A connection to `addr` from the local address `from` (e.g. 127.0.0.2).
fn connect_from(from: &str, addr: &str) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let stream = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).expect("bind the client to a second loopback address");
        socket.connect(addr.parse().unwrap()).await.expect("connect")
    });
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
}

/// Sends PING on `stream` and returns everything the server sends until it
/// closes the connection or goes quiet.
fn ping_and_read(mut stream: TcpStream) -> (String, bool) {
    use std::io::Write;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&got).into_owned(), closed)
}

#[test]
fn without_the_password_a_client_can_only_authenticate() {
    let s = TestServer::start_with_env(&[("RAFTLOCK_REQUIREPASS", PASS)]);
    let mut raw = RawConn::connect(&s.addr());
    let noauth = "NOAUTH Authentication required.";
    for cmd in [&["PING"][..], &["GET", "k"], &["SET", "k", "v"], &["LOCK.ACQUIRE", "k", "o", "1000"], &["MULTI"], &["EVAL", "return 1", "0"], &["SUBSCRIBE", "c"], &["CLIENT", "ID"]] {
        assert_eq!(err(raw.cmd(cmd)), noauth, "{cmd:?}");
    }
    // Pipelined writes go to the leader together: each is refused too.
    let mut pipeline = Vec::new();
    for i in 0..3 {
        pipeline.extend(RawConn::encode(&[b"SET", format!("p{i}").as_bytes(), b"v"]));
    }
    raw.send(&pipeline);
    for _ in 0..3 {
        assert_eq!(err(raw.read().unwrap()), noauth);
    }
    assert_eq!(
        err(raw.cmd(&["HELLO", "3"])),
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
    );
    let wrongpass = "WRONGPASS invalid username-password pair or user is disabled.";
    assert_eq!(err(raw.cmd(&["AUTH", "guess"])), wrongpass);
    assert_eq!(err(raw.cmd(&["AUTH", "alice", PASS])), wrongpass);
    assert_eq!(err(raw.cmd(&["HELLO", "3", "AUTH", "default", "guess"])), wrongpass);
    assert_eq!(err(raw.cmd(&["PING"])), noauth);
    // Nothing the refused commands asked for happened.
    let mut admin = s.client();
    for key in ["k", "p0", "p1", "p2"] {
        assert_eq!(q(&mut admin, &["EXISTS", key]).unwrap(), Value::Int(0), "{key}");
    }
    assert_eq!(raw.cmd(&["AUTH", PASS]), Resp::Simple("OK".into()));
    assert_eq!(raw.cmd(&["PING"]), Resp::Simple("PONG".into()));
    assert_eq!(raw.cmd(&["SET", "k", "v"]), Resp::Simple("OK".into()));
    // RESET goes back to the default user, which needs the password.
    assert_eq!(raw.cmd(&["RESET"]), Resp::Simple("RESET".into()));
    assert_eq!(err(raw.cmd(&["GET", "k"])), noauth);
    let hello = raw.cmd(&["HELLO", "3", "AUTH", "default", PASS]);
    assert!(matches!(hello, Resp::Map(_)), "HELLO 3 AUTH: {hello:?}");
    assert_eq!(raw.cmd(&["AUTH", "default", PASS]), Resp::Simple("OK".into()));
    assert_eq!(raw.cmd(&["GET", "k"]), Resp::Bulk(Some(b"v".to_vec())));
    assert_eq!(raw.cmd(&["QUIT"]), Resp::Simple("OK".into()));
}

#[test]
fn clients_authenticate_the_usual_ways() {
    let s = TestServer::start_with_env(&[("RAFTLOCK_REQUIREPASS", PASS)]);
    // The redis crate: password only, user and password, RESP3 (HELLO 3 AUTH).
    for url in [
        format!("redis://:{PASS}@127.0.0.1:{}/", s.port),
        format!("redis://default:{PASS}@127.0.0.1:{}/", s.port),
        format!("redis://default:{PASS}@127.0.0.1:{}/?protocol=resp3", s.port),
    ] {
        let mut con = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(matches!(q(&mut con, &["LOCK.ACQUIRE", "l", &url, "1000"]), Ok(Value::Int(_))), "{url}");
        assert_eq!(q(&mut con, &["DEL", "l"]).unwrap(), Value::Int(1));
    }
    let bad = format!("redis://:nope@127.0.0.1:{}/", s.port);
    let e = redis::Client::open(bad.as_str()).unwrap().get_connection().err().expect("a wrong password must fail");
    assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e}");
    // redis-cli: -a, --user/--pass, and without.
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &s.port.to_string(), "--no-auth-warning"])
            .args(args)
            .output()
            .expect("redis-cli (Debian's redis-tools; scripts/deps.sh installs it)");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(cli(&["-a", PASS, "PING"]), "PONG");
    assert_eq!(cli(&["--user", "default", "--pass", PASS, "PING"]), "PONG");
    assert_eq!(cli(&["PING"]), "NOAUTH Authentication required.");
    assert!(cli(&["-a", "nope", "PING"]).contains("NOAUTH"), "a wrong password authenticates nothing");
}

#[test]
fn the_password_is_shown_nowhere() {
    let s = TestServer::start_with_env(&[("RAFTLOCK_REQUIREPASS", PASS), ("RUST_LOG", "debug")]);
    let mut c = s.client();
    let mut seen = String::new();
    for cmd in [&["INFO", "everything"][..], &["CONFIG", "GET", "*"], &["CLIENT", "LIST"], &["CLIENT", "INFO"]] {
        seen.push_str(&format!("{:?}", q(&mut c, cmd).unwrap()));
    }
    assert!(!seen.contains(PASS), "the password shows in INFO, CONFIG GET or CLIENT");
    assert!(seen.contains("protected-mode"), "CONFIG GET * lists protected-mode");
    assert!(!s.logs().contains(PASS), "the password is in the server's log");
    // CONFIG SET requirepass: new authentications need the new password.
    assert_eq!(q(&mut c, &["CONFIG", "SET", "requirepass", "N3w"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut c, &["PING"]).unwrap(), Value::SimpleString("PONG".into()), "an authenticated client stays so");
    let mut raw = RawConn::connect(&s.addr());
    assert!(err(raw.cmd(&["AUTH", PASS])).starts_with("WRONGPASS"));
    assert_eq!(raw.cmd(&["AUTH", "N3w"]), Resp::Simple("OK".into()));
}

#[test]
fn protected_mode_serves_only_loopback_clients_while_no_password_is_set() {
    let denied = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user.";
    let s = TestServer::start();
    let (got, closed) = ping_and_read(connect_from("127.0.0.2", &s.addr()));
    assert!(got.starts_with(denied) && got.ends_with("from the outside.\r\n"), "from 127.0.0.2: {got:?}");
    assert!(closed, "the denied connection must be closed");
    let (got, _) = ping_and_read(connect_from("127.0.0.1", &s.addr()));
    assert_eq!(got, "+PONG\r\n");
    // Switched off from the loopback interface, as Redis allows.
    let mut c = s.client();
    assert_eq!(q(&mut c, &["CONFIG", "SET", "protected-mode", "no"]).unwrap(), Value::Okay);
    assert_eq!(ping_and_read(connect_from("127.0.0.2", &s.addr())).0, "+PONG\r\n");
    assert_eq!(q(&mut c, &["CONFIG", "SET", "protected-mode", "yes"]).unwrap(), Value::Okay);
    assert!(ping_and_read(connect_from("127.0.0.2", &s.addr())).0.starts_with(denied));
    // With a password, everyone may connect (and must authenticate).
    assert_eq!(q(&mut c, &["CONFIG", "SET", "requirepass", PASS]).unwrap(), Value::Okay);
    assert_eq!(ping_and_read(connect_from("127.0.0.2", &s.addr())).0, "-NOAUTH Authentication required.\r\n");

    let off = TestServer::start_with_env(&[("RAFTLOCK_PROTECTED_MODE", "no")]);
    assert_eq!(ping_and_read(connect_from("127.0.0.2", &off.addr())).0, "+PONG\r\n");
}

/// Redis's `timeout`: a client idle for longer is disconnected; one that
/// keeps talking, or subscribes, is not.
#[test]
fn idle_clients_are_let_go_after_the_timeout() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["CONFIG", "GET", "timeout"]).unwrap(), Value::Array(vec![
        Value::BulkString(b"timeout".to_vec()), Value::BulkString(b"0".to_vec())]));
    assert!(q(&mut c, &["CONFIG", "SET", "timeout", "-1"]).is_err());
    assert_eq!(q(&mut c, &["CONFIG", "SET", "timeout", "1"]).unwrap(), Value::Okay);
    let mut idle = RawConn::connect(&s.addr());
    let mut busy = RawConn::connect(&s.addr());
    let mut subscriber = RawConn::connect(&s.addr());
    assert_eq!(idle.cmd(&["PING"]), Resp::Simple("PONG".into()));
    subscriber.send(&RawConn::encode(&[b"SUBSCRIBE", b"news"]));
    assert!(matches!(subscriber.read().unwrap(), Resp::Array(Some(_)) | Resp::Push(_)));
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(busy.cmd(&["PING"]), Resp::Simple("PONG".into()));
    }
    // 2.4 s later: the idle one is gone, the others are served.
    idle.send(&RawConn::encode(&[b"PING"]));
    assert!(matches!(idle.read(), Err(common::RawErr::Closed)), "an idle client outlived the timeout");
    assert_eq!(busy.cmd(&["PUBLISH", "news", "hi"]), Resp::Int(1), "the subscriber was let go");
    assert_eq!(busy.cmd(&["CONFIG", "SET", "timeout", "0"]), Resp::Simple("OK".into()));
}

/// Two locks held, each to be released while writes are refused: `held`
/// by `LOCK.ACQUIRE` (its token returned) and `redis-lock` by `SET NX PX`
/// with value `tok-1`, whose compare-and-delete release script (redis-py's)
/// is loaded (its SHA returned); and a plain key `k` = `v`.
fn two_held_locks(c: &mut redis::Connection) -> (String, String) {
    let token = match q(c, &["LOCK.ACQUIRE", "held", "me", "30000"]).unwrap() {
        Value::Int(t) => t.to_string(),
        other => panic!("{other:?}"),
    };
    let release = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
    let sha = match q(c, &["SCRIPT", "LOAD", release]).unwrap() {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(q(c, &["SET", "redis-lock", "tok-1", "NX", "PX", "30000"]).unwrap(), Value::Okay);
    assert_eq!(q(c, &["SET", "k", "v"]).unwrap(), Value::Okay);
    (token, sha)
}

/// `maxmemory` with noeviction: over the limit, what may grow the data set
/// is refused with Redis's OOM error; reads, deletions and releases are
/// served.
#[test]
fn over_maxmemory_writes_are_refused_and_reads_and_releases_served() {
    let s = TestServer::start();
    let mut c = s.client();
    // redis-py's release: a script Redis serves over maxmemory, as it calls
    // no command that may grow the data.
    let (token, sha) = two_held_locks(&mut c);
    let mut raw = RawConn::connect(&s.addr());
    let lib = "#!lua name=m\n\
        redis.register_function('w', function(keys) return redis.call('set', keys[1], 'f') end)\n\
        redis.register_function{function_name='r', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}}\n";
    assert_eq!(raw.cmd(&["FUNCTION", "LOAD", lib]), Resp::bulk("m"));
    // Queued before the limit is set, run after: refused whole, in Redis's words.
    assert_eq!(raw.cmd(&["MULTI"]), Resp::Simple("OK".into()));
    assert_eq!(raw.cmd(&["SET", "t", "v"]), Resp::Simple("QUEUED".into()));
    assert_eq!(q(&mut c, &["CONFIG", "SET", "maxmemory", "1mb"]).unwrap(), Value::Okay);
    let oom = "OOM command not allowed when used memory > 'maxmemory'.";
    assert_eq!(err(raw.cmd(&["EXEC"])), format!("EXECABORT Transaction discarded because of: {oom}"));
    for cmd in [
        &["SET", "k2", "v"][..],
        &["LOCK.ACQUIRE", "l", "o", "1000"],
        &["LPUSH", "q", "x"],
        // A script with flags that may write, a function that may write, a
        // library's load: refused before they run.
        &["EVAL", "#!lua\nreturn 1", "0"],
        &["FCALL", "w", "1", "q"],
        &["FUNCTION", "LOAD", "#!lua name=n\nredis.register_function('n', function() return 1 end)"],
    ] {
        assert_eq!(err(raw.cmd(cmd)), oom, "{cmd:?}");
    }
    // As Redis: a script without flags runs, and only the commands it calls
    // that may add data are refused; one that only reads, or says so, runs.
    assert_eq!(raw.cmd(&["EVAL", "return redis.call('get', KEYS[1])", "1", "k"]), Resp::bulk("v"));
    assert_eq!(raw.cmd(&["EVAL", "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])", "1", "k"]), Resp::bulk("v"));
    assert_eq!(raw.cmd(&["FCALL", "r", "1", "k"]), Resp::bulk("v"));
    let e = err(raw.cmd(&["EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "q"]));
    assert!(e.starts_with(&format!("{oom} script: ")), "{e}");
    assert_eq!(raw.cmd(&["EVAL", "return redis.pcall('lpush', KEYS[1], 'x')", "1", "q"]), Resp::Error(oom.into()));
    // `allow-oom` runs with every command.
    assert_eq!(raw.cmd(&["EVAL", "#!lua flags=allow-oom\nreturn redis.call('set', KEYS[1], 'y')", "1", "ao"]), Resp::Simple("OK".into()));
    assert_eq!(raw.cmd(&["DEL", "ao"]), Resp::Int(1));
    // Pipelined writes, one by one.
    raw.send(&[RawConn::encode(&[b"SET", b"p1", b"v"]), RawConn::encode(&[b"SET", b"p2", b"v"])].concat());
    assert_eq!(err(raw.read().unwrap()), oom);
    assert_eq!(err(raw.read().unwrap()), oom);
    // A transaction with a write is refused as a whole.
    assert_eq!(raw.cmd(&["MULTI"]), Resp::Simple("OK".into()));
    assert_eq!(err(raw.cmd(&["SET", "t", "v"])), oom);
    assert!(err(raw.cmd(&["EXEC"])).starts_with("EXECABORT"));
    assert_eq!(raw.cmd(&["GET", "k"]), Resp::Bulk(Some(b"v".to_vec())));
    assert_eq!(raw.cmd(&["LOCK.RELEASE", "held", "me", &token]), Resp::Int(1));
    assert_eq!(raw.cmd(&["EVALSHA", &sha, "1", "redis-lock", "tok-1"]), Resp::Int(1));
    assert_eq!(raw.cmd(&["DEL", "k"]), Resp::Int(1));
    assert_eq!(raw.cmd(&["CONFIG", "GET", "maxmemory-policy"]).items()[1], Resp::bulk("noeviction"));
    assert_eq!(raw.cmd(&["CONFIG", "SET", "maxmemory", "0"]), Resp::Simple("OK".into()));
    assert_eq!(raw.cmd(&["SET", "k2", "v"]), Resp::Simple("OK".into()));
    for key in ["p1", "p2", "t", "l", "q", "redis-lock"] {
        assert_eq!(q(&mut c, &["EXISTS", key]).unwrap(), Value::Int(0), "{key} was written while over maxmemory");
    }
}


/// A reserve of free disk (`min-free-disk`): while less is free, what may add
/// data is refused with a MISCONF error (a node whose log cannot be written
/// stops); reads, deletions, renewals and releases, by `LOCK.*` and by the
/// compare-and-delete script clients send, are served, and writes come back
/// once the reserve is met. A reserve above any disk's size stands for a
/// full one.
#[test]
fn a_nearly_full_disk_refuses_what_adds_data_and_serves_releases() {
    let s = TestServer::start();
    let mut c = s.client();
    let (token, sha) = two_held_locks(&mut c);
    let info = |c: &mut redis::Connection| match q(c, &["INFO", "persistence"]).unwrap() {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("{other:?}"),
    };
    assert!(info(&mut c).contains("disk_nearly_full:0"), "{}", info(&mut c));
    assert_eq!(q(&mut c, &["CONFIG", "SET", "min-free-disk", "1000000gb"]).unwrap(), Value::Okay);
    assert!(info(&mut c).contains("disk_nearly_full:1"), "{}", info(&mut c));
    let mut raw = RawConn::connect(&s.addr());
    let refused = |reply: Resp| {
        let e = err(reply);
        assert!(e.starts_with("MISCONF ") && e.contains("min-free-disk"), "{e}");
    };
    for cmd in [
        &["SET", "k2", "v"][..],
        &["SET", "lock2", "t", "NX", "PX", "1000"],
        &["LOCK.ACQUIRE", "l", "o", "1000"],
        &["LPUSH", "q", "x"],
        &["EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "e"],
    ] {
        refused(raw.cmd(cmd));
    }
    // Pipelined writes, one by one; a transaction with one, as a whole.
    raw.send(&[RawConn::encode(&[b"SET", b"p1", b"v"]), RawConn::encode(&[b"INCR", b"p2"])].concat());
    refused(raw.read().unwrap());
    refused(raw.read().unwrap());
    assert_eq!(raw.cmd(&["MULTI"]), Resp::Simple("OK".into()));
    refused(raw.cmd(&["SET", "t", "v"]));
    assert!(err(raw.cmd(&["EXEC"])).starts_with("EXECABORT"));
    // What frees or keeps what is there is served.
    assert_eq!(raw.cmd(&["GET", "k"]), Resp::Bulk(Some(b"v".to_vec())));
    assert_eq!(raw.cmd(&["LOCK.RENEW", "held", "me", &token, "60000"]), Resp::Int(60000));
    assert_eq!(raw.cmd(&["PEXPIRE", "k", "60000"]), Resp::Int(1));
    assert_eq!(raw.cmd(&["EVALSHA", &sha, "1", "redis-lock", "tok-1"]), Resp::Int(1));
    assert_eq!(raw.cmd(&["LOCK.RELEASE", "held", "me", &token]), Resp::Int(1));
    assert_eq!(raw.cmd(&["DEL", "k"]), Resp::Int(1));
    assert_eq!(raw.cmd(&["CONFIG", "GET", "min-free-disk"]).items()[1], Resp::bulk("1073741824000000"));
    assert_eq!(raw.cmd(&["CONFIG", "SET", "min-free-disk", "0"]), Resp::Simple("OK".into()));
    assert!(info(&mut c).contains("disk_nearly_full:0"), "{}", info(&mut c));
    assert_eq!(raw.cmd(&["SET", "k2", "v"]), Resp::Simple("OK".into()));
    for key in ["lock2", "l", "q", "e", "p1", "p2", "t", "redis-lock", "held", "k"] {
        assert_eq!(q(&mut c, &["EXISTS", key]).unwrap(), Value::Int(0), "{key} is there");
    }
}

/// `client-output-buffer-limit pubsub`: a subscriber that does not read is
/// disconnected once its unsent messages pass the hard limit, or stay over
/// the soft limit for the soft seconds, as Redis; other clients are served
/// meanwhile, and the setting reads back as Redis writes it.
#[test]
fn a_slow_subscriber_is_disconnected_past_its_output_limit() {
    let s = TestServer::start();
    let mut c = s.client();
    let get = |c: &mut redis::Connection| {
        let v = q(c, &["CONFIG", "GET", "client-output-buffer-limit"]).unwrap();
        format!("{v:?}")
    };
    assert!(get(&mut c).contains("pubsub 33554432 8388608 60"), "{}", get(&mut c));
    assert!(q(&mut c, &["CONFIG", "SET", "client-output-buffer-limit", "pubsub 1mb"]).is_err());
    assert!(q(&mut c, &["CONFIG", "SET", "client-output-buffer-limit", "friends 1mb 1mb 1"]).is_err());
    let set = q(&mut c, &["CONFIG", "SET", "client-output-buffer-limit", "normal 0 0 0 pubsub 2mb 0 0"]);
    assert_eq!(set.unwrap(), Value::Okay);
    assert!(get(&mut c).contains("pubsub 2097152 0 0"));

    // Hard limit: a subscriber that never reads, and 64 MiB published to it.
    let mut slow = RawConn::connect(&s.addr());
    slow.send(&RawConn::encode(&[b"SUBSCRIBE", b"firehose"]));
    let mut busy = RawConn::connect(&s.addr());
    let payload = "m".repeat(64 * 1024);
    let mut receivers = Vec::new();
    for _ in 0..1024 {
        match busy.cmd(&["PUBLISH", "firehose", &payload]) {
            Resp::Int(n) => receivers.push(n),
            other => panic!("PUBLISH: {other:?}"),
        }
    }
    assert_eq!(receivers.last(), Some(&0), "the slow subscriber was never let go");
    assert_eq!(busy.cmd(&["PING"]), Resp::Simple("PONG".into()));
    // It was cut off: after what the kernel held, the connection ends.
    let mut gone = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        match slow.read() {
            Ok(_) => {}
            Err(common::RawErr::Closed) => {
                gone = true;
                break;
            }
            Err(e) => panic!("reading the slow subscriber: {e:?}"),
        }
    }
    assert!(gone, "the slow subscriber's connection is still open");

    // A subscriber whose socket is full: what its connection has taken but
    // not written counts (CLIENT LIST's omem), and messages that pile up
    // behind that write end the connection then, not once the write ends
    // (it never would: this client never reads). Small messages count what
    // they hold in the queue, not only their bytes: 30,000 one-byte
    // messages pass 2 MB (they were counted 1.5 MB, and a subscriber held
    // 170 MB of them under a 32 MB limit).
    let mut slow = RawConn::connect(&s.addr());
    let Resp::Int(slow_id) = slow.cmd(&["CLIENT", "ID"]) else { panic!("CLIENT ID") };
    slow.send(&RawConn::encode(&[b"SUBSCRIBE", b"confetti"]));
    let omem = |busy: &mut RawConn| -> Option<u64> {
        let Resp::Bulk(Some(list)) = busy.cmd(&["CLIENT", "LIST", "ID", &slow_id.to_string()]) else { panic!("CLIENT LIST") };
        let line = String::from_utf8(list).unwrap();
        let field = line.split_whitespace().find_map(|f| f.strip_prefix("omem="))?;
        Some(field.parse().unwrap())
    };
    // Fill the kernel's buffers, a message at a time, until one stays unsent.
    let mut blocked = false;
    for _ in 0..4096 {
        assert_eq!(busy.cmd(&["PUBLISH", "confetti", &payload]), Resp::Int(1));
        std::thread::sleep(Duration::from_millis(20));
        if omem(&mut busy).is_some_and(|m| m > 0) {
            blocked = true;
            break;
        }
    }
    assert!(blocked, "256 MB published and the subscriber's socket never filled");
    let held = omem(&mut busy).unwrap();
    assert!(held >= payload.len() as u64 && held < 2 << 20, "omem {held}");
    let script = "for i = 1, 30000 do redis.call('publish', 'confetti', 'x') end return 1";
    assert_eq!(busy.cmd(&["EVAL", script, "0"]), Resp::Int(1));
    assert_eq!(busy.cmd(&["PUBLISH", "confetti", "x"]), Resp::Int(0), "30,000 small messages kept under 2 MB");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while omem(&mut busy).is_some() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(omem(&mut busy), None, "the slow subscriber is still connected, stuck in its write");
    drop(slow);

    // Soft limit: over 100 KB for 1 s is too long.
    let set = q(&mut c, &["CONFIG", "SET", "client-output-buffer-limit", "pubsub 0 100kb 1"]);
    assert_eq!(set.unwrap(), Value::Okay);
    let mut slow = RawConn::connect(&s.addr());
    slow.send(&RawConn::encode(&[b"SUBSCRIBE", b"drip"]));
    std::thread::sleep(Duration::from_millis(200));
    let mut delivered = Vec::new();
    for _ in 0..40 {
        for _ in 0..64 {
            if let Resp::Int(n) = busy.cmd(&["PUBLISH", "drip", &payload]) {
                delivered.push(n);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(delivered.last(), Some(&0), "over the soft limit for 4 s and still subscribed");
}

/// `client-output-buffer-limit normal`: a reply over the hard limit, or
/// output left unread over the soft limit for the soft seconds, ends the
/// connection (Redis's default, `normal 0 0 0`, limits nothing).
#[test]
fn normal_clients_obey_their_output_limit_when_one_is_set() {
    let s = TestServer::start();
    let mut c = s.client();
    let big = "b".repeat(4 << 20);
    assert_eq!(q(&mut c, &["SET", "big", &big]).unwrap(), Value::Okay);
    // No limit by default: the whole reply arrives.
    assert!(matches!(q(&mut c, &["GET", "big"]).unwrap(), Value::BulkString(v) if v.len() == big.len()));
    let set = q(&mut c, &["CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0"]);
    assert_eq!(set.unwrap(), Value::Okay);
    let mut raw = RawConn::connect(&s.addr());
    assert_eq!(raw.cmd(&["PING"]), Resp::Simple("PONG".into()));
    raw.send(&RawConn::encode(&[b"GET", b"big"]));
    assert!(matches!(raw.read(), Err(common::RawErr::Closed)), "a 4 MiB reply passed a 1 MiB hard limit");
    // Small replies are fine.
    let mut raw = RawConn::connect(&s.addr());
    assert_eq!(raw.cmd(&["PING"]), Resp::Simple("PONG".into()));

    // Soft: 1 MiB for 1 s. A client that does not read 40 MiB of replies
    // for 3 s is let go; one that reads them is not.
    let set = q(&mut c, &["CONFIG", "SET", "client-output-buffer-limit", "normal 0 1mb 1"]);
    assert_eq!(set.unwrap(), Value::Okay);
    let mut stalled = RawConn::connect(&s.addr());
    let mut ten = Vec::new();
    for _ in 0..10 {
        ten.extend(RawConn::encode(&[b"GET", b"big"]));
    }
    stalled.send(&ten);
    std::thread::sleep(Duration::from_secs(3));
    let mut closed = false;
    for _ in 0..11 {
        match stalled.read() {
            Ok(_) => {}
            Err(common::RawErr::Closed) => {
                closed = true;
                break;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(closed, "a client that left 40 MiB unread for 3 s is still served");
    assert!(matches!(q(&mut c, &["GET", "big"]).unwrap(), Value::BulkString(v) if v.len() == big.len()));
    assert_eq!(q(&mut c, &["CONFIG", "SET", "client-output-buffer-limit", "normal 0 0 0"]).unwrap(), Value::Okay);
}
