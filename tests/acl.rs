//! ACL users (issue 14), against the real binary: a user limited to
//! `+@lock ~orders:*` locks its keys and nothing else; scripts run with
//! their caller's permissions; `AUTH user pass`, `HELLO 3 AUTH`, redis-cli
//! `--user/--pass` and the redis crate's URL authenticate; `ACL` answers as
//! Redis 7; deleting a user disconnects it; users survive `ACL SAVE`/`LOAD`
//! and a restart; and on a cluster, users defined on the leader hold on
//! every node after a failover.

mod cluster_support;
mod common;

use std::process::Command;
use std::time::Duration;

use common::{expect_err, q, TestServer};
use redis::Value;

fn as_user(port: u16, user: &str, pass: &str) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{user}:{pass}@127.0.0.1:{port}/")).unwrap();
    client.get_connection_with_timeout(Duration::from_secs(10)).expect("connect as the user")
}

fn text(v: &Value) -> String {
    common::as_text(v).unwrap_or_else(|| format!("{v:?}"))
}

const KEY_DENIED: &str = "NOPERM this user has no permissions to access one of the keys used as arguments";

fn command_denied(name: &str) -> String {
    format!("NOPERM this user has no permissions to run the '{name}' command")
}

#[test]
fn a_lock_user_locks_its_keys_and_nothing_else() {
    let server = TestServer::start();
    let mut admin = server.client();
    let set = q(&mut admin, &["ACL", "SETUSER", "locker", "on", ">pw", "+@lock", "~orders:*"]);
    assert_eq!(set.unwrap(), Value::Okay);
    q(&mut admin, &["SET", "locks:1", "theirs"]).unwrap();

    let mut locker = as_user(server.port, "locker", "pw");
    assert!(matches!(q(&mut locker, &["LOCK.ACQUIRE", "orders:1", "me", "60000"]).unwrap(), Value::Int(t) if t > 0));
    assert_eq!(expect_err(q(&mut locker, &["LOCK.ACQUIRE", "locks:1", "me", "60000"])), KEY_DENIED);
    assert_eq!(expect_err(q(&mut locker, &["FLUSHALL"])), command_denied("flushall"));
    assert_eq!(expect_err(q(&mut locker, &["KEYS", "*"])), command_denied("keys"));
    assert_eq!(expect_err(q(&mut locker, &["GET", "orders:1"])), command_denied("get"));
    assert_eq!(expect_err(q(&mut locker, &["ACL", "SETUSER", "locker", "+@all"])), command_denied("acl|setuser"));
    // Pipelined, the same (each command is checked on its own).
    let mut raw = server.raw();
    assert_eq!(raw.cmd(&["AUTH", "locker", "pw"]).text().as_deref(), Some("OK"));
    let enc = |a: &[&str]| common::RawConn::encode(&a.iter().map(|s| s.as_bytes()).collect::<Vec<_>>());
    let mut both = enc(&["LOCK.ACQUIRE", "orders:2", "me", "60000"]);
    both.extend(enc(&["LOCK.ACQUIRE", "locks:2", "me", "60000"]));
    raw.send(&both);
    assert!(matches!(raw.read().unwrap(), common::Resp::Int(t) if t > 0));
    assert!(matches!(raw.read().unwrap(), common::Resp::Error(e) if e == KEY_DENIED));
    // Nothing of the refused commands happened.
    assert_eq!(q(&mut admin, &["GET", "locks:1"]).unwrap(), Value::BulkString(b"theirs".to_vec()));
    assert_eq!(q(&mut admin, &["EXISTS", "locks:2"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut admin, &["EXISTS", "orders:1"]).unwrap(), Value::Int(1));

    // In MULTI: refused when queued, and EXEC aborts.
    q(&mut admin, &["ACL", "SETUSER", "locker", "+@transaction"]).unwrap();
    assert_eq!(q(&mut locker, &["MULTI"]).unwrap(), Value::Okay);
    assert_eq!(expect_err(q(&mut locker, &["LOCK.ACQUIRE", "locks:3", "me", "1000"])), KEY_DENIED);
    assert!(expect_err(q(&mut locker, &["EXEC"])).starts_with("EXECABORT"));
    assert_eq!(q(&mut admin, &["EXISTS", "locks:3"]).unwrap(), Value::Int(0));

    // Wrong password, unknown user, a user turned off: all WRONGPASS.
    let wrongpass = "WRONGPASS invalid username-password pair or user is disabled.";
    let mut c = server.client();
    assert_eq!(expect_err(q(&mut c, &["AUTH", "locker", "nope"])), wrongpass);
    assert_eq!(expect_err(q(&mut c, &["AUTH", "nobody", "pw"])), wrongpass);
    q(&mut admin, &["ACL", "SETUSER", "locker", "off"]).unwrap();
    assert_eq!(expect_err(q(&mut c, &["AUTH", "locker", "pw"])), wrongpass);
    q(&mut admin, &["ACL", "SETUSER", "locker", "on"]).unwrap();
    assert_eq!(q(&mut c, &["AUTH", "locker", "pw"]).unwrap(), Value::Okay);
    assert_eq!(expect_err(q(&mut c, &["ACL", "WHOAMI"])), command_denied("acl|whoami"));
    assert_eq!(text(&q(&mut admin, &["ACL", "WHOAMI"]).unwrap()), "default");
}

#[test]
fn scripts_run_with_their_callers_permissions() {
    let server = TestServer::start();
    let mut admin = server.client();
    q(&mut admin, &["ACL", "SETUSER", "scripter", "on", ">pw", "+@lock", "+@scripting", "+get", "~orders:*"]).unwrap();
    q(&mut admin, &["SET", "locks:1", "secret"]).unwrap();
    q(&mut admin, &["SET", "orders:1", "mine"]).unwrap();
    let mut s = as_user(server.port, "scripter", "pw");
    let run = |s: &mut redis::Connection, body: &str| q(s, &["EVAL", body, "0"]);
    assert_eq!(run(&mut s, "return redis.call('GET', 'orders:1')").unwrap(), Value::BulkString(b"mine".to_vec()));
    let e = expect_err(run(&mut s, "return redis.call('GET', 'locks:1')"));
    assert!(e.contains("The user executing the script can't access at least one of the keys"), "{e}");
    let e = expect_err(run(&mut s, "return redis.call('FLUSHALL')"));
    assert!(e.contains("The user executing the script can't run this command or subcommand"), "{e}");
    // pcall sees the error as a value; the keyspace is untouched.
    let caught = run(&mut s, "local ok = redis.pcall('DEL', 'locks:1'); return type(ok) == 'table' and ok.err or 'ran'");
    assert!(text(&caught.unwrap()).contains("can't run this command"));
    assert_eq!(q(&mut admin, &["GET", "locks:1"]).unwrap(), Value::BulkString(b"secret".to_vec()));
    // Declared keys are checked before the script runs.
    assert_eq!(expect_err(q(&mut s, &["EVAL", "return 1", "1", "locks:1"])), KEY_DENIED);
    // EVALSHA and the read-only form too.
    let sha = text(&q(&mut admin, &["SCRIPT", "LOAD", "return redis.call('GET', 'locks:1')"]).unwrap());
    assert!(expect_err(q(&mut s, &["EVALSHA", &sha, "0"])).contains("can't access at least one of the keys"));
    let e = expect_err(q(&mut s, &["EVAL_RO", "return redis.call('GET', 'locks:1')", "0"]));
    assert!(e.contains("can't access at least one of the keys"), "{e}");
    // The default user's scripts are not limited.
    assert_eq!(run(&mut admin, "return redis.call('GET', 'locks:1')").unwrap(), Value::BulkString(b"secret".to_vec()));
}

#[test]
fn acl_commands_answer_as_redis_and_deleting_a_user_disconnects_it() {
    let server = TestServer::start();
    let mut admin = server.client();
    q(&mut admin, &["ACL", "SETUSER", "alice", "on", ">pw", "~orders:*", "%R~ro:*", "&news", "-@all", "+@lock", "+get"]).unwrap();
    let users = q(&mut admin, &["ACL", "USERS"]).unwrap();
    assert_eq!(format!("{users:?}"), format!("{:?}", Value::Array(vec![Value::BulkString(b"alice".to_vec()), Value::BulkString(b"default".to_vec())])));
    let list: Vec<String> = match q(&mut admin, &["ACL", "LIST"]).unwrap() {
        Value::Array(v) => v.iter().map(text).collect(),
        other => panic!("{other:?}"),
    };
    let hash = "30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4"; // SHA-256 of "pw"
    assert_eq!(
        list,
        vec![
            format!("user alice on sanitize-payload #{hash} ~orders:* %R~ro:* resetchannels &news -@all +@lock +get"),
            "user default on nopass sanitize-payload ~* &* +@all".to_string(),
        ]
    );
    let info = common::pairs(&q(&mut admin, &["ACL", "GETUSER", "alice"]).unwrap());
    let get = |k: &str| common::lookup(&info, k).map(|v| format!("{v:?}")).unwrap_or_default();
    assert!(get("commands").contains("-@all +@lock +get"), "{info:?}");
    assert!(get("keys").contains("~orders:* %R~ro:*"), "{info:?}");
    assert!(get("passwords").contains(hash), "{info:?}");
    assert_eq!(q(&mut admin, &["ACL", "GETUSER", "nobody"]).unwrap(), Value::Nil);
    let e = expect_err(q(&mut admin, &["ACL", "SETUSER", "alice", "+nosuchcommand"]));
    assert_eq!(e, "ERR Error in ACL SETUSER modifier '+nosuchcommand': Unknown command or category name in ACL");
    assert_eq!(expect_err(q(&mut admin, &["ACL", "DELUSER", "default"])), "ERR The 'default' user cannot be removed");
    assert!(matches!(q(&mut admin, &["ACL", "CAT"]).unwrap(), Value::Array(v) if v.len() >= 20));
    let lock_cmds = format!("{:?}", q(&mut admin, &["ACL", "CAT", "lock"]).unwrap());
    assert!(lock_cmds.contains("lock.acquire") && !lock_cmds.contains("\"get\""), "{lock_cmds}");
    assert_eq!(text(&q(&mut admin, &["ACL", "DRYRUN", "alice", "GET", "orders:1"]).unwrap()), "OK");
    assert!(text(&q(&mut admin, &["ACL", "DRYRUN", "alice", "SET", "orders:1", "x"]).unwrap()).contains("'set' command"));
    assert_eq!(text(&q(&mut admin, &["ACL", "GENPASS"]).unwrap()).len(), 64);
    assert_eq!(text(&q(&mut admin, &["ACL", "GENPASS", "32"]).unwrap()).len(), 8);

    // redis-cli's own options, and HELLO 3 AUTH.
    let port = server.port.to_string();
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-p", &port, "--user", "alice", "--pass", "pw", "--no-auth-warning"])
            .args(args)
            .output()
            .expect("run redis-cli (Debian: redis-tools)");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert!(cli(&["LOCK.ACQUIRE", "orders:9", "me", "1000"]).parse::<i64>().is_ok());
    assert!(cli(&["ACL", "WHOAMI"]).contains("NOPERM"));
    let mut raw = server.raw();
    let hello = raw.cmd(&["HELLO", "3", "AUTH", "alice", "pw"]);
    assert!(!matches!(hello, common::Resp::Error(_)), "{hello:?}");
    assert!(matches!(raw.cmd(&["ACL", "WHOAMI"]), common::Resp::Error(e) if e.starts_with("NOPERM")));
    assert!(!matches!(raw.cmd(&["GET", "orders:9"]), common::Resp::Error(_)));

    // CLIENT LIST shows the user; deleting it disconnects its clients.
    let mut alice = as_user(server.port, "alice", "pw");
    assert!(matches!(q(&mut alice, &["GET", "orders:1"]), Ok(Value::Nil)));
    let clients = text(&q(&mut admin, &["CLIENT", "LIST"]).unwrap());
    assert!(clients.contains("user=alice"), "{clients}");
    assert_eq!(q(&mut admin, &["ACL", "DELUSER", "alice", "nobody"]).unwrap(), Value::Int(1));
    assert!(q(&mut alice, &["GET", "orders:1"]).is_err(), "a deleted user's connection was still served");
}

#[test]
fn users_survive_acl_save_load_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.acl");
    std::fs::write(&file, "# users\nuser reader on >r ~* &* -@all +@read\n").unwrap();
    let mut server = TestServer::start_with_env(&[("RAFTLOCK_ACLFILE", file.to_str().unwrap())]);
    let mut admin = server.client();
    // Loaded at start, through the log.
    common::poll_until(Duration::from_secs(10), "the ACL file's users", || {
        matches!(q(&mut admin, &["ACL", "GETUSER", "reader"]), Ok(Value::Map(_)) | Ok(Value::Array(_))).then_some(())
    });
    let mut reader = as_user(server.port, "reader", "r");
    assert!(matches!(q(&mut reader, &["GET", "k"]), Ok(Value::Nil)));
    assert_eq!(expect_err(q(&mut reader, &["SET", "k", "v"])), command_denied("set"));

    q(&mut admin, &["ACL", "SETUSER", "writer", "on", ">w", "~w:*", "+@write"]).unwrap();
    assert_eq!(q(&mut admin, &["ACL", "SAVE"]).unwrap(), Value::Okay);
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("user writer on sanitize-payload #") && saved.contains("user reader on"), "{saved}");
    q(&mut admin, &["ACL", "DELUSER", "writer"]).unwrap();
    assert_eq!(q(&mut admin, &["ACL", "GETUSER", "writer"]).unwrap(), Value::Nil);
    assert_eq!(q(&mut admin, &["ACL", "LOAD"]).unwrap(), Value::Okay);
    assert!(matches!(q(&mut as_user(server.port, "writer", "w"), &["SET", "w:1", "v"]), Ok(Value::Okay)));

    // A bad file is refused whole; the users stay.
    std::fs::write(&file, "user x on +nosuch\n").unwrap();
    assert!(expect_err(q(&mut admin, &["ACL", "LOAD"])).contains("Unknown command or category name in ACL"));
    assert!(matches!(q(&mut admin, &["ACL", "GETUSER", "writer"]), Ok(Value::Map(_)) | Ok(Value::Array(_))));

    // The users are replicated state: they come back with the node.
    server.restart();
    let mut w = as_user(server.port, "writer", "w");
    assert_eq!(expect_err(q(&mut w, &["SET", "other", "v"])), KEY_DENIED);
}

#[test]
fn users_defined_on_the_leader_hold_on_every_node_after_a_failover() {
    use cluster_support::{Cluster, Opts};
    let mut c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(&c.ids(), Duration::from_secs(30));
    let mut admin = c.node(leader).client();
    q(&mut admin, &["ACL", "SETUSER", "locker", "on", ">pw", "+@lock", "+@scripting", "~orders:*"]).unwrap();
    c.kill9(leader);
    let others: Vec<u64> = c.ids().into_iter().filter(|&id| id != leader).collect();
    let new_leader = c.wait_leader(&others, Duration::from_secs(30));
    for id in others {
        let port: u16 = c.node(id).addr().rsplit(':').next().unwrap().parse().unwrap();
        let mut locker = as_user(port, "locker", "pw");
        assert!(matches!(q(&mut locker, &["LOCK.ACQUIRE", &format!("orders:{id}"), "me", "60000"]).unwrap(), Value::Int(_)));
        assert_eq!(expect_err(q(&mut locker, &["LOCK.ACQUIRE", "locks:1", "me", "60000"])), KEY_DENIED);
        assert_eq!(expect_err(q(&mut locker, &["FLUSHALL"])), command_denied("flushall"));
        // A script forwarded from a follower runs on the leader as its caller.
        let e = expect_err(q(&mut locker, &["EVAL", "return redis.call('LOCK.ACQUIRE', 'locks:2', 'me', 1000)", "0"]));
        assert!(e.contains("can't access at least one of the keys"), "node {id} (leader {new_leader}): {e}");
    }
    let mut admin = c.node(new_leader).client();
    assert_eq!(q(&mut admin, &["EXISTS", "locks:1", "locks:2"]).unwrap(), Value::Int(0));

    // Defined through a follower: the same connection can log in as the
    // new user at once, there.
    let follower = c.ids().into_iter().find(|&id| id != new_leader && id != leader).unwrap();
    let mut via_follower = c.node(follower).client();
    q(&mut via_follower, &["ACL", "SETUSER", "bob", "on", ">pw", "+@all", "~bob:*"]).unwrap();
    assert_eq!(q(&mut via_follower, &["AUTH", "bob", "pw"]).unwrap(), Value::Okay);
    let e = expect_err(q(&mut via_follower, &["EVAL_RO", "return redis.call('GET', 'orders:1')", "0"]));
    assert!(e.contains("can't access"), "{e}");
    // Two changes of the default user in a row, through the follower: the
    // second starts from the first.
    let mut admin2 = c.node(follower).client();
    q(&mut admin2, &["ACL", "SETUSER", "default", ">s3cret"]).unwrap();
    q(&mut admin2, &["ACL", "SETUSER", "default", "-flushall"]).unwrap();
    let mut anon = common::RawConn::connect(&c.node(new_leader).addr());
    common::poll_until(Duration::from_secs(10), "the default user's password on the leader", || {
        matches!(anon.cmd(&["PING"]), common::Resp::Error(e) if e.starts_with("NOAUTH")).then_some(())
    });
    let anon_ok = anon.cmd(&["AUTH", "s3cret"]);
    assert_eq!(anon_ok.text().as_deref(), Some("OK"));
    assert!(matches!(anon.cmd(&["FLUSHALL"]), common::Resp::Error(e) if e.starts_with("NOPERM")), "the first change was lost");
}

#[test]
fn changed_rules_reach_pipelines_transactions_and_subscribers_at_once() {
    let server = TestServer::start();
    let mut admin = server.client();
    let enc = |a: &[&str]| common::RawConn::encode(&a.iter().map(|s| s.as_bytes()).collect::<Vec<_>>());
    // Every permission: this client's writes are pipelined together.
    q(&mut admin, &["ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~*", "&*"]).unwrap();
    let mut alice = server.raw();
    assert_eq!(alice.cmd(&["AUTH", "alice", "pw"]).text().as_deref(), Some("OK"));
    let batch = |keys: [&str; 3]| {
        let mut b = Vec::new();
        for k in keys {
            b.extend(enc(&["SET", k, "v"]));
        }
        b
    };
    alice.send(&batch(["x:1", "x:2", "x:3"]));
    for _ in 0..3 {
        assert_eq!(alice.read().unwrap().text().as_deref(), Some("OK"));
    }
    q(&mut admin, &["ACL", "SETUSER", "alice", "resetkeys", "~safe:*"]).unwrap();
    alice.send(&batch(["x:4", "safe:1", "x:5"]));
    assert!(matches!(alice.read().unwrap(), common::Resp::Error(e) if e == KEY_DENIED));
    assert_eq!(alice.read().unwrap().text().as_deref(), Some("OK"));
    assert!(matches!(alice.read().unwrap(), common::Resp::Error(e) if e == KEY_DENIED));
    assert_eq!(q(&mut admin, &["EXISTS", "x:4", "x:5"]).unwrap(), Value::Int(0));

    // A transaction queued before the rules changed is checked again at EXEC.
    q(&mut admin, &["ACL", "SETUSER", "alice", "allkeys"]).unwrap();
    assert_eq!(alice.cmd(&["MULTI"]).text().as_deref(), Some("OK"));
    assert_eq!(alice.cmd(&["SET", "x:6", "v"]).text().as_deref(), Some("QUEUED"));
    q(&mut admin, &["ACL", "SETUSER", "alice", "resetkeys", "~safe:*"]).unwrap();
    assert!(matches!(alice.cmd(&["EXEC"]), common::Resp::Error(e) if e.starts_with("NOPERM ACLs rules changed")));
    assert_eq!(q(&mut admin, &["EXISTS", "x:6"]).unwrap(), Value::Int(0));

    // Write-only keys: commands that return the value need read access too.
    q(&mut admin, &["ACL", "SETUSER", "w", "on", ">pw", "+@all", "%W~s:*"]).unwrap();
    let mut w = as_user(server.port, "w", "pw");
    assert_eq!(q(&mut w, &["SET", "s:1", "secret"]).unwrap(), Value::Okay);
    assert_eq!(expect_err(q(&mut w, &["GETDEL", "s:1"])), KEY_DENIED);
    assert_eq!(expect_err(q(&mut w, &["SET", "s:1", "x", "GET"])), KEY_DENIED);
    assert_eq!(expect_err(q(&mut w, &["GET", "s:1"])), KEY_DENIED);

    // A subscriber whose channel is taken away is disconnected, as is a
    // client whose user is deleted, without sending anything.
    q(&mut admin, &["ACL", "SETUSER", "listener", "on", ">pw", "+@all", "~*", "resetchannels", "&news"]).unwrap();
    let mut listener = server.raw();
    assert_eq!(listener.cmd(&["AUTH", "listener", "pw"]).text().as_deref(), Some("OK"));
    listener.send(&enc(&["SUBSCRIBE", "news"]));
    assert!(!matches!(listener.read().unwrap(), common::Resp::Error(_)));
    let mut idle = server.raw();
    assert_eq!(idle.cmd(&["AUTH", "w", "pw"]).text().as_deref(), Some("OK"));
    q(&mut admin, &["ACL", "SETUSER", "listener", "resetchannels", "&sport"]).unwrap();
    assert!(matches!(listener.read(), Err(common::RawErr::Closed)), "the subscriber kept a channel it lost");
    q(&mut admin, &["ACL", "DELUSER", "w"]).unwrap();
    assert!(matches!(idle.read(), Err(common::RawErr::Closed)), "a deleted user's idle connection stayed");

    // Once the log defines the default user, this node's password no longer
    // decides it.
    q(&mut admin, &["ACL", "SETUSER", "default", "-keys"]).unwrap();
    let e = expect_err(q(&mut admin, &["CONFIG", "SET", "requirepass", "x"]));
    assert!(e.contains("ACL SETUSER default"), "{e}");
}

/// `SORT`'s `STORE` destination is a key the user must be allowed to
/// write; `BY pattern` and `GET pattern` name keys by pattern, so only a
/// user who may read every key may use them (Redis's own error, not an ACL
/// failure: `ACL DRYRUN` allows the command), in a script too.
#[test]
fn sort_checks_its_store_key_and_its_patterns() {
    let server = TestServer::start();
    let mut admin = server.client();
    q(&mut admin, &["RPUSH", "orders:list", "2", "1", "3"]).unwrap();
    q(&mut admin, &["MSET", "orders:w1", "30", "orders:w2", "20", "orders:w3", "10"]).unwrap();
    let setuser = ["ACL", "SETUSER", "sorter", "on", ">pw", "+sort", "+sort_ro", "+lrange", "+eval", "~orders:*"];
    q(&mut admin, &setuser).unwrap();
    let mut s = as_user(server.port, "sorter", "pw");
    let strings = |v: Value| -> Vec<String> {
        match v {
            Value::Array(items) => items.iter().map(text).collect(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(strings(q(&mut s, &["SORT", "orders:list"]).unwrap()), ["1", "2", "3"]);
    assert_eq!(q(&mut s, &["SORT", "orders:list", "STORE", "orders:sorted"]).unwrap(), Value::Int(3));
    assert_eq!(expect_err(q(&mut s, &["SORT", "orders:list", "STORE", "other"])), KEY_DENIED);
    assert_eq!(q(&mut admin, &["EXISTS", "other"]).unwrap(), Value::Int(0));
    // A LIMIT's arguments are not the destination.
    assert_eq!(strings(q(&mut s, &["SORT", "orders:list", "LIMIT", "0", "1"]).unwrap()), ["1"]);
    let by = "ERR BY option of SORT denied due to insufficient ACL permissions.";
    let get = "ERR GET option of SORT denied due to insufficient ACL permissions.";
    assert_eq!(expect_err(q(&mut s, &["SORT", "orders:list", "BY", "orders:w*"])), by);
    assert_eq!(expect_err(q(&mut s, &["SORT_RO", "orders:list", "GET", "#"])), get);
    // A constant BY names no key; an earlier syntax error is answered first.
    assert_eq!(strings(q(&mut s, &["SORT", "orders:list", "BY", "nosort"]).unwrap()), ["2", "1", "3"]);
    assert_eq!(expect_err(q(&mut s, &["SORT", "orders:list", "FOO", "GET", "#"])), "ERR syntax error");
    let e = expect_err(q(&mut s, &["EVAL", "return redis.call('SORT', KEYS[1], 'BY', 'orders:w*')", "1", "orders:list"]));
    assert!(e.contains(by), "{e}");
    assert_eq!(q(&mut admin, &["ACL", "DRYRUN", "sorter", "SORT", "orders:list", "BY", "orders:w*"]).unwrap(), Value::Okay);
    // With every key readable, the patterns are allowed.
    q(&mut admin, &["ACL", "SETUSER", "sorter", "%R~*"]).unwrap();
    assert_eq!(strings(q(&mut s, &["SORT", "orders:list", "BY", "orders:w*"]).unwrap()), ["3", "2", "1"]);
    // The default user was never limited.
    let got = q(&mut admin, &["SORT", "orders:list", "BY", "orders:w*", "GET", "#", "GET", "orders:w*"]).unwrap();
    assert_eq!(strings(got), ["3", "10", "2", "20", "1", "30"]);
}

/// A user with limits pipelines its writes as any client does (those its
/// rules allow go to the leader together); one refused in the middle is
/// refused and logged, the rest run, in order.
#[test]
fn a_restricted_user_s_pipeline_runs_in_order_with_its_refusals() {
    let server = TestServer::start();
    let mut admin = server.client();
    q(&mut admin, &["ACL", "SETUSER", "piper", "on", ">pw", "+set", "+get", "+auth", "~ok:*"]).unwrap();
    let mut raw = common::RawConn::connect(&server.addr());
    assert_eq!(raw.cmd(&["AUTH", "piper", "pw"]), common::Resp::Simple("OK".into()));
    let enc = |a: &[&str]| common::RawConn::encode(&a.iter().map(|s| s.as_bytes()).collect::<Vec<_>>());
    let mut burst = Vec::new();
    for cmd in [["SET", "ok:1", "a"], ["SET", "ok:2", "b"], ["SET", "no:1", "c"], ["SET", "ok:3", "d"], ["SET", "ok:1", "e"]] {
        burst.extend(enc(&cmd));
    }
    raw.send(&burst);
    let replies: Vec<common::Resp> = (0..5).map(|_| raw.read().unwrap()).collect();
    let ok = common::Resp::Simple("OK".into());
    assert_eq!(replies[..2], [ok.clone(), ok.clone()]);
    assert!(matches!(&replies[2], common::Resp::Error(e) if e == KEY_DENIED), "{:?}", replies[2]);
    assert_eq!(replies[3..], [ok.clone(), ok]);
    assert_eq!(q(&mut admin, &["GET", "ok:1"]).unwrap(), Value::BulkString(b"e".to_vec()));
    assert_eq!(q(&mut admin, &["EXISTS", "no:1"]).unwrap(), Value::Int(0));
    let Value::Array(entries) = q(&mut admin, &["ACL", "LOG"]).unwrap() else { panic!() };
    assert_eq!(entries.len(), 1);
    assert_eq!(text(&log_entry(&entries[0])["object"]), "no:1");
}

/// One `ACL LOG` entry as field -> value.
fn log_entry(v: &Value) -> std::collections::HashMap<String, Value> {
    common::pairs(v).into_iter().collect()
}

/// ACL LOG: each refusal (a command, a key, a channel, a wrong password)
/// is an entry with Redis 7.0's fields, newest first; a repeat within a
/// minute counts on its entry; the password is never in it; RESET empties
/// it, and `acllog-max-len` bounds it.
#[test]
fn acl_log_records_refusals_and_failed_logins() {
    let server = TestServer::start();
    let mut admin = server.client();
    q(&mut admin, &["ACL", "SETUSER", "logged", "on", ">pw", "+get", "+set", "+publish", "+multi", "+exec", "+client", "~mine:*", "&news"]).unwrap();
    let mut user = as_user(server.port, "logged", "pw");
    assert_eq!(expect_err(q(&mut user, &["GET", "theirs:1"])), KEY_DENIED);
    assert_eq!(expect_err(q(&mut user, &["GET", "theirs:1"])), KEY_DENIED);
    assert_eq!(expect_err(q(&mut user, &["DEL", "mine:1"])), command_denied("del"));
    assert!(expect_err(q(&mut user, &["PUBLISH", "sport", "m"])).starts_with("NOPERM"));
    let wrong = q(&mut admin, &["AUTH", "logged", "not-the-password"]);
    assert!(expect_err(wrong).starts_with("WRONGPASS"));
    let Value::Array(entries) = q(&mut admin, &["ACL", "LOG"]).unwrap() else { panic!() };
    let entries: Vec<_> = entries.iter().map(log_entry).collect();
    let field = |e: &std::collections::HashMap<String, Value>, k: &str| text(&e[k]);
    let summary: Vec<(String, String, String, Value)> =
        entries.iter().map(|e| (field(e, "reason"), field(e, "object"), field(e, "username"), e["count"].clone())).collect();
    assert_eq!(
        summary,
        [
            ("auth".into(), "AUTH".into(), "logged".into(), Value::Int(1)),
            ("channel".into(), "sport".into(), "logged".into(), Value::Int(1)),
            ("command".into(), "del".into(), "logged".into(), Value::Int(1)),
            ("key".into(), "theirs:1".into(), "logged".into(), Value::Int(2)),
        ]
    );
    let Value::BulkString(stats) = q(&mut admin, &["INFO", "stats"]).unwrap() else { panic!() };
    let stats = String::from_utf8(stats).unwrap();
    for counted in ["acl_access_denied_auth:1", "acl_access_denied_cmd:1", "acl_access_denied_key:2", "acl_access_denied_channel:1"] {
        assert!(stats.lines().any(|l| l == counted), "{counted} in {stats}");
    }
    for e in &entries {
        assert_eq!(field(e, "context"), "toplevel");
        assert!(field(e, "client-info").starts_with("id="), "{e:?}");
        assert!(e.contains_key("age-seconds"));
        assert!(!format!("{e:?}").contains("not-the-password"), "no password in the log");
    }
    // In a transaction: refused when queued, context multi.
    redis::cmd("MULTI").query::<()>(&mut user).unwrap();
    assert_eq!(expect_err(q(&mut user, &["GET", "theirs:2"])), KEY_DENIED);
    assert!(q(&mut user, &["EXEC"]).is_err());
    let Value::Array(newest) = q(&mut admin, &["ACL", "LOG", "1"]).unwrap() else { panic!() };
    let newest = log_entry(&newest[0]);
    assert_eq!((field(&newest, "context"), field(&newest, "object")), ("multi".into(), "theirs:2".into()));
    assert_eq!(q(&mut admin, &["CONFIG", "SET", "acllog-max-len", "2"]).unwrap(), Value::Okay);
    let Value::Array(kept) = q(&mut admin, &["ACL", "LOG", "100"]).unwrap() else { panic!() };
    assert_eq!(kept.len(), 2);
    assert_eq!(q(&mut admin, &["ACL", "LOG", "RESET"]).unwrap(), Value::Okay);
    assert_eq!(q(&mut admin, &["ACL", "LOG"]).unwrap(), Value::Array(vec![]));
    assert!(expect_err(q(&mut admin, &["ACL", "LOG", "many"])).starts_with("ERR value is not an integer"));
}

/// Shard channels are channels to ACL: `SSUBSCRIBE` and `SPUBLISH` need
/// the channel, and a shard subscriber that loses it is disconnected.
/// GEORADIUS names the key it stores in after `STORE`: a key the user must
/// be allowed to write.
#[test]
fn shard_channels_and_geo_store_keys_are_checked() {
    let server = TestServer::start();
    let mut admin = server.client();
    q(&mut admin, &["ACL", "SETUSER", "sharder", "on", ">pw", "+@all", "~geo:*", "resetchannels", "&news"]).unwrap();
    let mut user = as_user(server.port, "sharder", "pw");
    assert!(expect_err(q(&mut user, &["SPUBLISH", "sport", "m"])).starts_with("NOPERM"));
    assert_eq!(q(&mut user, &["SPUBLISH", "news", "m"]).unwrap(), Value::Int(0));
    assert!(expect_err(q(&mut user, &["SSUBSCRIBE", "sport"])).starts_with("NOPERM"));

    q(&mut user, &["GEOADD", "geo:k", "13.361389", "38.115556", "Palermo"]).unwrap();
    let near = ["GEORADIUS", "geo:k", "15", "37", "200", "km"];
    assert_eq!(q(&mut user, &near).unwrap(), Value::Array(vec![Value::BulkString(b"Palermo".to_vec())]));
    assert_eq!(q(&mut user, &[&near[..], &["STORE", "geo:dst"]].concat()).unwrap(), Value::Int(1));
    assert_eq!(expect_err(q(&mut user, &[&near[..], &["STORE", "other:dst"]].concat())), KEY_DENIED);
    assert_eq!(expect_err(q(&mut user, &[&near[..], &["STOREDIST", "other:dst"]].concat())), KEY_DENIED);
    assert_eq!(q(&mut admin, &["EXISTS", "other:dst"]).unwrap(), Value::Int(0));

    let mut listener = server.raw();
    assert_eq!(listener.cmd(&["AUTH", "sharder", "pw"]).text().as_deref(), Some("OK"));
    listener.send_cmd(&["SSUBSCRIBE", "news"]);
    assert!(!matches!(listener.read().unwrap(), common::Resp::Error(_)));
    q(&mut admin, &["ACL", "SETUSER", "sharder", "resetchannels", "&sport"]).unwrap();
    assert!(matches!(listener.read(), Err(common::RawErr::Closed)), "the shard subscriber kept a channel it lost");
}

/// Redis 7's selectors: `ACL SETUSER u (rules)` adds a further set of
/// commands, keys and channels; a command runs if the user's own rules or
/// any one selector allow all of it. Shown by what the user may really do,
/// by `ACL DRYRUN` (with Redis's texts), `ACL GETUSER`/`LIST`, an ACL file
/// whose selector spans several words, and a restart from a snapshot (its
/// format 6 carries them).
#[test]
fn selectors_allow_a_command_that_any_one_of_them_allows_whole() {
    const EVERY: u64 = 20;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.acl");
    std::fs::write(&file, "user filed on >f resetchannels -@all +get ~f:* (+set ~w:*  %R~r:*)\n").unwrap();
    let mut server =
        TestServer::start_with_env(&[("RAFTLOCK_SNAPSHOT_LOGS", "20"), ("RAFTLOCK_ACLFILE", file.to_str().unwrap())]);
    let mut admin = server.client();
    let port = server.port;
    let set = |args: &[&str]| q(&mut redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap(), args);
    assert_eq!(
        set(&["ACL", "SETUSER", "app", "on", ">p", "+get", "~app:*", "(+set %W~orders:*)", "(+publish &news.*)"]).unwrap(),
        Value::Okay
    );
    // The words of one selector given apart are one rule; an unclosed one is refused.
    assert_eq!(set(&["ACL", "SETUSER", "split", "(+get", "~s:*)"]).unwrap(), Value::Okay);
    assert_eq!(
        expect_err(set(&["ACL", "SETUSER", "bad", "(+get", "~s:*"])),
        "ERR Unmatched parenthesis in acl selector starting at '(+get ~s:*'."
    );
    assert_eq!(
        expect_err(set(&["ACL", "SETUSER", "bad", "(on)"])),
        "ERR Error in ACL SETUSER modifier '(on)': Syntax error"
    );
    let check = |server: &TestServer| {
        let mut app = as_user(server.port, "app", "p");
        assert!(matches!(q(&mut app, &["GET", "app:1"]), Ok(Value::Nil)), "the user's own rules");
        assert_eq!(q(&mut app, &["SET", "orders:1", "v"]).unwrap(), Value::Okay, "the first selector");
        assert_eq!(q(&mut app, &["PUBLISH", "news.x", "m"]).unwrap(), Value::Int(0), "the second selector");
        // No one selector allows all of these.
        assert_eq!(expect_err(q(&mut app, &["GET", "orders:1"])), KEY_DENIED, "orders:* is written only");
        assert_eq!(expect_err(q(&mut app, &["SET", "app:1", "v"])), KEY_DENIED, "set is for orders:* only");
        assert_eq!(
            expect_err(q(&mut app, &["PUBLISH", "other", "m"])),
            "NOPERM this user has no permissions to access one of the channels used as arguments"
        );
        assert_eq!(expect_err(q(&mut app, &["DEL", "app:1"])), command_denied("del"));
        let mut filed = as_user(server.port, "filed", "f");
        assert_eq!(q(&mut filed, &["SET", "w:1", "v"]).unwrap(), Value::Okay);
        assert_eq!(expect_err(q(&mut filed, &["SET", "r:1", "v"])), KEY_DENIED);
    };
    check(&server);
    let dry = |args: &[&str]| text(&set(&[&["ACL", "DRYRUN", "app"], args].concat()).unwrap());
    assert_eq!(dry(&["SET", "orders:1", "v"]), "OK");
    assert_eq!(dry(&["SET", "app:1", "v"]), "This user has no permissions to access the 'app:1' key");
    assert_eq!(dry(&["PUBLISH", "other", "m"]), "This user has no permissions to access the 'other' channel");
    assert_eq!(dry(&["DEL", "app:1"]), "This user has no permissions to run the 'del' command");
    let list = text(&q(&mut admin, &["ACL", "LIST"]).unwrap());
    assert!(
        list.contains("~app:* resetchannels -@all +get (%W~orders:* resetchannels -@all +set) (resetchannels &news.* -@all +publish)"),
        "{list}"
    );
    assert!(list.contains("(~s:* resetchannels -@all +get)"), "{list}");
    assert!(list.contains("(~w:* %R~r:* resetchannels -@all +set)"), "{list}");
    let getuser = format!("{:?}", q(&mut admin, &["ACL", "GETUSER", "app"]).unwrap());
    assert!(getuser.contains("selectors") && getuser.contains("%W~orders:*") && getuser.contains("&news.*"), "{getuser}");
    // From a snapshot: the selectors are no longer in the log.
    let written_at = server.raft_info().num("applied_index");
    server.restart_from_snapshot(written_at, EVERY, "ACL SETUSER");
    check(&server);
    // Cleared, the user's own rules remain.
    let port = server.port;
    let set = |args: &[&str]| q(&mut redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap(), args);
    assert_eq!(set(&["ACL", "SETUSER", "app", "clearselectors"]).unwrap(), Value::Okay);
    let mut app = as_user(server.port, "app", "p");
    assert_eq!(expect_err(q(&mut app, &["SET", "orders:1", "v"])), command_denied("set"));
    assert!(matches!(q(&mut app, &["GET", "app:1"]), Ok(Value::Nil)));
}
