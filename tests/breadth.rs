//! Issue 17: the Redis families a lock user touches, complete. Here the parts
//! that need a cluster or a stock tool; the replies themselves are compared
//! with a real Redis 7.0's in `tests/recorded.rs`.
//!
//! - A randomized mix of the set, string, list, hash, sorted-set and key
//!   commands (random choices inside scripts and transactions included), sent
//!   through the leader and a follower of a three-node cluster, leaves every
//!   replica with the same keyspace (`RAFT.DIGEST`).
//! - `redis-benchmark -q` with its default test list completes, without an
//!   error, through a follower (`scripts/clients.sh` runs it on one node).

mod cluster_support;
mod common;

use std::process::Command;
use std::time::Duration;

use cluster_support::{serial, Cluster, Opts};
use common::{poll_until, q};
use redis::Value;

const ALL: [u64; 3] = [1, 2, 3];

/// A small deterministic generator for the workload (xorshift64*).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
    fn int(&mut self, lo: i64, hi: i64) -> String {
        (lo + self.below((hi - lo + 1) as u64) as i64).to_string()
    }
}

/// Keys: each family has its own few, and one command in eight takes any
/// key, so that commands meet keys of other types (WRONGTYPE) and
/// STORE/MOVE/RENAME/COPY cross families.
const KEYS: &[&str] = &["s1", "s2", "s3", "t1", "t2", "t3", "l1", "l2", "l3", "h1", "h2", "h3", "z1", "z2", "z3"];
const MEMBERS: &[&str] = &["m1", "m2", "m3", "m4", "5", "7", "11", ""];

/// One random command (as words).
fn command(g: &mut Gen) -> Vec<String> {
    let choice = g.below(60);
    let family = match choice {
        0..=14 => 0,
        15..=21 => 1,
        28..=37 => 2,
        38..=42 => 3,
        43..=53 => 4,
        _ => g.below(5) as usize,
    };
    let k = move |g: &mut Gen| {
        let i = if g.below(8) == 0 { g.below(KEYS.len() as u64) as usize } else { family * 3 + g.below(3) as usize };
        KEYS[i].to_string()
    };
    let m = |g: &mut Gen| g.pick(MEMBERS).to_string();
    let w = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut out = match choice {
        // sets
        0..=3 => vec!["SADD".into(), k(g), m(g), m(g), m(g)],
        4 => vec!["SREM".into(), k(g), m(g), m(g)],
        5 => vec!["SPOP".into(), k(g)],
        6 => vec!["SPOP".into(), k(g), g.int(0, 4)],
        7 => vec!["SMOVE".into(), k(g), k(g), m(g)],
        // SORT ... STORE of any container: ties (ALPHA BY a pattern that
        // names no key) must come out alike on every node.
        8 if g.below(3) == 0 => w(&["SORT"])
            .into_iter()
            .chain([k(g), "ALPHA".into(), g.pick(&["ASC", "DESC"]).into(), "BY".into(), g.pick(&["*", "nosort", "w_*"]).into()])
            .chain(w(&["GET", "#", "LIMIT", "0"]))
            .chain([g.int(1, 5), "STORE".into(), k(g)])
            .collect(),
        8 => vec![g.pick(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]).into(), k(g), k(g), k(g)],
        9 => vec!["SINTERCARD".into(), "2".into(), k(g), k(g), "LIMIT".into(), g.int(0, 3)],
        // a script that acts on a random choice: replicas must choose alike
        10 => w(&[
            "EVAL",
            "local m = redis.call('SRANDMEMBER', KEYS[1]) if m then redis.call('RPUSH', KEYS[2], m) end return m",
            "2",
        ])
        .into_iter()
        .chain([k(g), k(g)])
        .collect(),
        11 => w(&["EVAL", "local r = redis.pcall('SRANDMEMBER', KEYS[1], -3) if type(r) == 'table' then for _, x in ipairs(r) do redis.call('SADD', KEYS[2], x) end end return 1", "2"])
            .into_iter()
            .chain([k(g), k(g)])
            .collect(),
        12 => w(&["EVAL", "local key = redis.call('RANDOMKEY') if key then redis.call('SADD', 'picked', key) end return key", "0"]),
        13 => w(&["EVAL", "local f = redis.pcall('HRANDFIELD', KEYS[1], 2) if type(f) == 'table' then for _, x in ipairs(f) do redis.call('SADD', KEYS[2], x) end end return 1", "2"])
            .into_iter()
            .chain([k(g), k(g)])
            .collect(),
        14 => w(&["EVAL", "return redis.pcall('SPOP', KEYS[1], 2)", "1"]).into_iter().chain([k(g)]).collect(),
        // strings
        15 => vec!["INCRBYFLOAT".into(), k(g), g.pick(&["1.5", "-0.25", "0.1", "1e3"]).into()],
        16 if g.below(3) == 0 => vec!["PFADD".into(), k(g), m(g), m(g), m(g)],
        16 if g.below(2) == 0 => vec!["PFMERGE".into(), k(g), k(g), k(g)],
        16 => vec!["SETRANGE".into(), k(g), g.int(0, 12), m(g)],
        17 if g.below(3) == 0 => vec!["BITOP".into(), g.pick(&["AND", "OR", "XOR"]).into(), k(g), k(g), k(g)],
        17 => vec!["SETBIT".into(), k(g), g.int(0, 100), g.int(0, 1)],
        18 => vec!["GETEX".into(), k(g), g.pick(&["PX", "EX"]).into(), g.int(1, 100_000)],
        19 => vec!["GETEX".into(), k(g), "PERSIST".into()],
        20 => vec!["SET".into(), k(g), m(g)],
        21 => vec!["APPEND".into(), k(g), m(g)],
        // keys
        22 => vec!["RENAME".into(), k(g), k(g)],
        23 => vec!["RENAMENX".into(), k(g), k(g)],
        24 => vec!["COPY".into(), k(g), k(g), "REPLACE".into()],
        25 => vec!["COPY".into(), k(g), k(g)],
        26 => vec!["PEXPIRE".into(), k(g), g.int(50, 100_000)],
        27 => vec!["DEL".into(), k(g)],
        // lists
        28..=30 => vec![g.pick(&["LPUSH", "RPUSH"]).into(), k(g), m(g), m(g)],
        31 => vec![g.pick(&["LPUSHX", "RPUSHX"]).into(), k(g), m(g)],
        32 => vec!["LMOVE".into(), k(g), k(g), g.pick(&["LEFT", "RIGHT"]).into(), g.pick(&["LEFT", "RIGHT"]).into()],
        33 => vec!["RPOPLPUSH".into(), k(g), k(g)],
        34 => vec!["LSET".into(), k(g), g.int(-3, 3), m(g)],
        35 => vec!["LINSERT".into(), k(g), g.pick(&["BEFORE", "AFTER"]).into(), m(g), m(g)],
        36 => vec!["LTRIM".into(), k(g), g.int(-3, 2), g.int(-3, 5)],
        37 => vec!["BLMOVE".into(), k(g), k(g), "LEFT".into(), "RIGHT".into(), "0.01".into()],
        // hashes
        38..=40 => vec!["HSET".into(), k(g), m(g), m(g), m(g), g.int(0, 9)],
        41 => vec!["HINCRBYFLOAT".into(), k(g), m(g), g.pick(&["0.5", "-1.25", "3"]).into()],
        42 => vec!["HDEL".into(), k(g), m(g)],
        // sorted sets
        43..=45 => vec!["ZADD".into(), k(g), g.int(-5, 5), m(g), g.int(-5, 5), m(g)],
        46 if g.below(2) == 0 => vec![g.pick(&["ZPOPMIN", "ZPOPMAX"]).into(), k(g), g.int(1, 3)],
        46 => vec!["ZMPOP".into(), "2".into(), k(g), k(g), g.pick(&["MIN", "MAX"]).into(), "COUNT".into(), g.int(1, 3)],
        47 => vec!["ZREMRANGEBYSCORE".into(), k(g), g.int(-5, 0), g.int(0, 5)],
        48 => vec!["ZREMRANGEBYRANK".into(), k(g), g.int(-2, 0), g.int(0, 2)],
        49 => vec![g.pick(&["ZUNIONSTORE", "ZINTERSTORE"]).into(), k(g), "2".into(), k(g), k(g), "WEIGHTS".into(), "2".into(), "-1".into()],
        50 => vec!["ZRANGESTORE".into(), k(g), k(g), "0".into(), "-1".into()],
        51 => vec!["ZINCRBY".into(), k(g), g.int(-3, 3), m(g)],
        52 => vec!["BZPOPMIN".into(), k(g), k(g), "0.01".into()],
        53 => w(&["EVAL", "local r = redis.pcall('ZRANDMEMBER', KEYS[1], -2) if type(r) == 'table' then for _, x in ipairs(r) do redis.call('RPUSH', KEYS[2], x) end end return 1", "2"])
            .into_iter()
            .chain([k(g), k(g)])
            .collect(),
        // reads, so that a read's result can never matter to replicas
        54 => vec![g.pick(&["SMEMBERS", "HGETALL", "LRANGE", "ZRANGE", "GET", "TYPE"]).into(), k(g)],
        55 => vec!["SRANDMEMBER".into(), k(g), g.int(-4, 4)],
        56 => vec!["ZRANGEBYSCORE".into(), k(g), "-inf".into(), "+inf".into(), "WITHSCORES".into()],
        57 => vec!["OBJECT".into(), "ENCODING".into(), k(g)],
        58 => vec!["RANDOMKEY".into()],
        _ => vec!["SSCAN".into(), k(g), "0".into()],
    };
    // LRANGE and ZRANGE need their range.
    if matches!(out[0].as_str(), "LRANGE" | "ZRANGE") {
        out.extend(["0".into(), "-1".into()]);
    }
    out
}

fn send(con: &mut redis::Connection, words: &[String]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(&words[0]);
    for w in &words[1..] {
        cmd.arg(w.as_str());
    }
    cmd.query(con)
}

/// `RAFT.DIGEST` of every node once they have applied the same index.
fn digests_agree(c: &Cluster) -> Vec<String> {
    poll_until(Duration::from_secs(30), "every replica at the same applied index", || {
        let mut digests = Vec::new();
        for id in ALL {
            let mut con = c.node(id).try_client(Duration::from_secs(1)).ok()?;
            digests.push(format!("{:?}", q(&mut con, &["RAFT.DIGEST"]).ok()?));
        }
        digests.windows(2).all(|w| w[0] == w[1]).then_some(digests)
    })
}

#[test]
fn a_randomized_mix_of_the_new_commands_leaves_replicas_identical() {
    let _serial = serial();
    let c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(&ALL, Duration::from_secs(10));
    let follower = *ALL.iter().find(|id| **id != leader).unwrap();
    let seed = std::env::var("BREADTH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED_17u64);
    eprintln!("workload seed {seed} (BREADTH_SEED to repeat)");
    let mut g = Gen(seed | 1);
    let mut via_leader = c.node(leader).client();
    let mut via_follower = c.node(follower).client();
    let (mut ok, mut errors) = (0, 0);
    let mut kinds_of_error = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..3000 {
        let con = if g.below(3) == 0 { &mut via_follower } else { &mut via_leader };
        // Now and then several commands in one transaction.
        let result = if i % 50 == 49 {
            let mut pipe = redis::pipe();
            pipe.atomic();
            for _ in 0..4 {
                let words = command(&mut g);
                let mut cmd = redis::cmd(&words[0]);
                for w in &words[1..] {
                    cmd.arg(w.as_str());
                }
                pipe.add_command(cmd);
            }
            pipe.query::<Value>(con).map(|_| Value::Okay)
        } else {
            send(con, &command(&mut g))
        };
        match result {
            Ok(_) => ok += 1,
            // WRONGTYPE, syntax and range errors are part of the mix; a
            // connection that fails is not.
            Err(e) if e.kind() == redis::ErrorKind::Io => panic!("command {i}: connection failed: {e}"),
            Err(e) => {
                errors += 1;
                let text = format!("{}", e.code().unwrap_or("?"));
                assert!(!e.to_string().contains("unknown command"), "command {i}: {e}");
                *kinds_of_error.entry(text).or_default() += 1;
            }
        }
    }
    eprintln!("{ok} commands answered, {errors} errors: {kinds_of_error:?}");
    assert!(ok > 1500, "only {ok} of 3000 commands succeeded");
    let digests = digests_agree(&c);
    // The mix left data of every kind behind (else it proved little).
    let mut con = c.node(leader).client();
    let mut kinds = std::collections::BTreeSet::new();
    for key in KEYS.iter().chain(["picked"].iter()) {
        if let Ok(Value::SimpleString(t)) = q(&mut con, &["TYPE", key]) {
            kinds.insert(t);
        }
    }
    eprintln!("types left: {kinds:?}; digest {}", digests[0]);
    assert!(kinds.len() >= 3, "the workload left too little behind: {kinds:?}");
    // A restarted follower replays the same entries to the same keyspace.
    drop(via_follower);
    let mut c = c;
    c.restart(follower);
    digests_agree(&c);
}

/// The tests `redis-benchmark` 7 runs without `-t`.
const DEFAULT_TESTS: &[&str] = &[
    "PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "LPUSH", "RPUSH", "LPOP", "RPOP", "SADD", "HSET", "SPOP", "ZADD",
    "ZPOPMIN", "LRANGE_100 (first 100 elements)", "LRANGE_300 (first 300 elements)", "LRANGE_500 (first 500 elements)",
    "LRANGE_600 (first 600 elements)", "MSET (10 keys)",
];

#[test]
fn redis_benchmark_default_tests_complete_through_a_follower() {
    if !common::need_tool("redis-benchmark") {
        return;
    }
    let _serial = serial();
    let c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(&ALL, Duration::from_secs(10));
    let follower = *ALL.iter().find(|id| **id != leader).unwrap();
    let port = c.node(follower).addr().rsplit(':').next().unwrap().to_string();
    let out = Command::new("timeout")
        .args(["600", "redis-benchmark", "-h", "127.0.0.1", "-p", &port, "-q", "-n", "1000", "-c", "10"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run redis-benchmark");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n") + &String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty() && !l.contains("rps=")).collect();
    assert!(out.status.success(), "redis-benchmark failed ({}):\n{}", out.status, lines.join("\n"));
    let errors: Vec<&&str> = lines.iter().filter(|l| l.to_ascii_lowercase().contains("err")).collect();
    assert!(errors.is_empty(), "redis-benchmark reported errors:\n{}", lines.join("\n"));
    for t in DEFAULT_TESTS {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("{t}: ")) && l.contains("requests per second")),
            "redis-benchmark did not complete {t}:\n{}",
            lines.join("\n")
        );
    }
    eprintln!("{}", lines.join("\n"));
}

/// A STORE writes its destination only: a WATCH on one of its sources holds,
/// one on its destination fails (as Redis).
#[test]
fn a_store_command_invalidates_a_watch_on_its_destination_only() {
    let s = common::TestServer::start();
    let mut setup = s.client();
    for args in [&["SADD", "src", "a", "b"][..], &["ZADD", "zsrc", "1", "a"], &["RPUSH", "lsrc", "x", "y"]] {
        q(&mut setup, args).unwrap();
    }
    let stores: [(&[&str], &str, &str); 4] = [
        (&["SINTERSTORE", "dst", "src", "src"], "src", "dst"),
        (&["ZUNIONSTORE", "zdst", "1", "zsrc"], "zsrc", "zdst"),
        (&["ZRANGESTORE", "zdst2", "zsrc", "0", "-1"], "zsrc", "zdst2"),
        (&["COPY", "src", "copied", "REPLACE"], "src", "copied"),
    ];
    for (store, source, destination) in stores {
        for (watched, should_abort) in [(source, false), (destination, true)] {
            let mut con = s.client();
            q(&mut con, &["WATCH", watched]).unwrap();
            q(&mut setup, store).unwrap();
            let result: Value = redis::pipe().atomic().cmd("SET").arg("marker").arg("1").query(&mut con).unwrap();
            assert_eq!(result == Value::Nil, should_abort, "{store:?} with WATCH {watched}: EXEC answered {result:?}");
        }
    }
}

/// CLIENT KILL closes another connection, a blocked one too; the old form
/// names an address.
#[test]
fn client_kill_closes_the_connections_it_names() {
    let s = common::TestServer::start();
    let mut a = s.raw();
    let common::Resp::Int(a_id) = a.cmd(&["CLIENT", "ID"]) else { panic!() };
    let mut blocked = s.raw();
    let info = blocked.cmd(&["CLIENT", "INFO"]).text().unwrap();
    let addr = info.split(' ').find_map(|f| f.strip_prefix("addr=")).unwrap().to_string();
    blocked.send(&common::RawConn::encode(&[b"BLPOP", b"never-pushed", b"0"]));
    let mut admin = s.raw();
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "ID", &a_id.to_string()]), common::Resp::Int(1));
    assert!(a.closed_within(Duration::from_secs(5)), "the killed client was not closed");
    assert_eq!(admin.cmd(&["CLIENT", "KILL", &addr]), common::Resp::Simple("OK".into()));
    assert!(blocked.closed_within(Duration::from_secs(5)), "the blocked client was not closed");
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "ID", "999999"]), common::Resp::Int(0));
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "127.0.0.1:1"]), common::Resp::Error("ERR No such client".into()));
    // SKIPME yes by default: the asking connection stays.
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "TYPE", "normal"]), common::Resp::Int(0));
    assert_eq!(admin.cmd(&["PING"]), common::Resp::Simple("PONG".into()));
}

/// TIME, INFO, CLIENT ... queued in MULTI are answered in their places in
/// EXEC's reply (Redisson and others queue them); a transaction aborted by
/// WATCH answers nil for all of them.
#[test]
fn connection_commands_inside_multi_answer_in_place() {
    let s = common::TestServer::start();
    let mut c = s.raw();
    let common::Resp::Int(id) = c.cmd(&["CLIENT", "ID"]) else { panic!() };
    for cmd in [&["MULTI"][..], &["SET", "a", "1"], &["TIME"], &["CLIENT", "ID"], &["INFO", "server"], &["GET", "a"], &["PING"]] {
        c.cmd(cmd);
    }
    let common::Resp::Array(Some(items)) = c.cmd(&["EXEC"]) else { panic!("EXEC") };
    assert_eq!(items.len(), 6, "{items:?}");
    assert_eq!(items[0], common::Resp::Simple("OK".into()));
    assert!(matches!(&items[1], common::Resp::Array(Some(t)) if t.len() == 2), "TIME: {:?}", items[1]);
    assert_eq!(items[2], common::Resp::Int(id));
    assert!(items[3].text().is_some_and(|t| t.contains("redis_version")), "INFO: {:?}", items[3]);
    assert_eq!(items[4], common::b("1"));
    assert_eq!(items[5], common::Resp::Simple("PONG".into()));
    // Refused as before: what would change the connection itself.
    c.cmd(&["MULTI"]);
    assert!(matches!(c.cmd(&["SUBSCRIBE", "x"]), common::Resp::Error(_)));
    assert!(matches!(c.cmd(&["EXEC"]), common::Resp::Error(e) if e.starts_with("EXECABORT")));
    // An aborted transaction runs nothing, local commands included.
    let mut other = s.raw();
    c.cmd(&["WATCH", "a"]);
    other.cmd(&["SET", "a", "2"]);
    c.cmd(&["MULTI"]);
    c.cmd(&["CLIENT", "SETNAME", "renamed"]);
    c.cmd(&["SET", "a", "3"]);
    assert!(matches!(c.cmd(&["EXEC"]), common::Resp::Array(None) | common::Resp::Null));
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), common::Resp::Bulk(None));
}

/// `PUBLISH` and `SPUBLISH` through a follower count the receivers of the
/// node they were sent to, as a Redis Cluster node does (the leader runs
/// them, and used to answer its own count); every node's subscribers get
/// the message.
#[test]
fn publish_through_a_follower_counts_that_nodes_receivers() {
    use common::{RawConn, Resp};
    let _serial = serial();
    let c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(&ALL, Duration::from_secs(10));
    let f = *ALL.iter().find(|&&id| id != leader).unwrap();
    // A connection to `node` that sent `command channel` and had it confirmed.
    let subscribed = |node: u64, command: &str, channel: &str| {
        let mut conn = RawConn::connect(&c.node(node).addr());
        conn.send_cmd(&[command, channel]);
        match conn.read().expect("subscription reply") {
            Resp::Array(Some(items)) => {
                let kind = command.to_ascii_lowercase().into_bytes();
                assert_eq!(items[0], Resp::Bulk(Some(kind)), "{command}: {items:?}");
            }
            other => panic!("{command}: {other:?}"),
        }
        conn
    };
    // On the follower: a subscriber of the channel, one of a pattern that
    // matches it, a shard subscriber. On the leader: one of the channel.
    let mut on_f = subscribed(f, "SUBSCRIBE", "news");
    let mut pattern_f = subscribed(f, "PSUBSCRIBE", "n*");
    let mut shard_f = subscribed(f, "SSUBSCRIBE", "news");
    let mut on_leader = subscribed(leader, "SUBSCRIBE", "news");

    let mut via_f = c.node(f).client();
    let mut via_leader = c.node(leader).client();
    assert_eq!(q(&mut via_f, &["PUBLISH", "news", "one"]).unwrap(), Value::Int(2), "follower: channel + pattern");
    assert_eq!(q(&mut via_leader, &["PUBLISH", "news", "two"]).unwrap(), Value::Int(1), "leader: its one subscriber");
    assert_eq!(q(&mut via_f, &["SPUBLISH", "news", "three"]).unwrap(), Value::Int(1), "follower: its shard subscriber");
    assert_eq!(q(&mut via_leader, &["SPUBLISH", "news", "four"]).unwrap(), Value::Int(0), "leader: no shard subscriber");
    assert_eq!(q(&mut via_f, &["PUBLISH", "other", "x"]).unwrap(), Value::Int(0), "follower: nobody listens");

    // Each subscriber got what was published, wherever it was sent.
    let payload = |conn: &mut RawConn| match conn.read().expect("a message") {
        Resp::Array(Some(items)) => match items.last() {
            Some(Resp::Bulk(Some(p))) => String::from_utf8_lossy(p).into_owned(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    for conn in [&mut on_f, &mut pattern_f, &mut on_leader] {
        assert_eq!((payload(conn), payload(conn)), ("one".to_string(), "two".to_string()));
    }
    assert_eq!((payload(&mut shard_f), payload(&mut shard_f)), ("three".to_string(), "four".to_string()));
}
