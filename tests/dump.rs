//! `DUMP` and `RESTORE` against the real binary: payloads that a real Redis
//! 7.0 wrote, in each of its encodings (`tests/data/redis7/dumps.txt`,
//! recorded by `record_dumps.py`), restore to the value the same commands
//! build here; raftlock's own payloads restore to the value they were taken
//! from; and `RESTORE`'s options and errors are Redis's.

mod common;

use std::path::Path;

use common::{arr, b, RawConn, Resp, TestServer};

fn bulks(items: &[&str]) -> Resp {
    arr(items.iter().map(|s| b(s)).collect())
}

/// One recorded payload: the commands that built key `k` in Redis, and
/// what `DUMP k` answered there.
struct Recorded {
    name: String,
    setup: Vec<Vec<String>>,
    payload: Vec<u8>,
}

fn recorded() -> Vec<Recorded> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/redis7/dumps.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out: Vec<Recorded> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (kind, rest) = line.split_once(' ').expect("a line is `kind rest`");
        match kind {
            "name" => out.push(Recorded { name: rest.to_string(), setup: Vec::new(), payload: Vec::new() }),
            "setup" => {
                let args = rest.split(' ').map(|a| if a == "''" { String::new() } else { a.to_string() }).collect();
                out.last_mut().expect("setup after name").setup.push(args);
            }
            "dump" => {
                let hex = rest.as_bytes();
                let bytes = (0..hex.len() / 2)
                    .map(|i| u8::from_str_radix(std::str::from_utf8(&hex[2 * i..2 * i + 2]).unwrap(), 16).unwrap())
                    .collect();
                out.last_mut().expect("dump after name").payload = bytes;
            }
            other => panic!("unknown line kind {other:?}"),
        }
    }
    assert!(out.len() >= 20 && out.iter().all(|r| !r.payload.is_empty()), "{} recorded payloads", out.len());
    out
}

fn cmd(c: &mut RawConn, args: &[&[u8]]) -> Resp {
    c.send(&RawConn::encode(args));
    c.read().expect("a reply")
}

/// The value at `key` in a form two equal values share whatever their
/// encoding: members of sets and fields of hashes sorted.
fn value_of(c: &mut RawConn, key: &str) -> (String, Resp) {
    let kind = match c.cmd(&["TYPE", key]) {
        Resp::Simple(t) => t,
        other => panic!("TYPE {key}: {other:?}"),
    };
    let sorted = |r: Resp| match r {
        Resp::Array(Some(mut items)) => {
            items.sort_by_key(|i| format!("{i:?}"));
            Resp::Array(Some(items))
        }
        other => other,
    };
    let value = match kind.as_str() {
        "string" => c.cmd(&["GET", key]),
        "list" => c.cmd(&["LRANGE", key, "0", "-1"]),
        "set" => sorted(c.cmd(&["SMEMBERS", key])),
        "hash" => match c.cmd(&["HGETALL", key]) {
            Resp::Array(Some(flat)) => {
                let mut pairs: Vec<Vec<Resp>> = flat.chunks(2).map(|p| p.to_vec()).collect();
                pairs.sort_by_key(|p| format!("{p:?}"));
                Resp::Array(Some(pairs.into_iter().flatten().collect()))
            }
            other => other,
        },
        "zset" => c.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]),
        other => panic!("TYPE {key}: {other}"),
    };
    (kind, value)
}

#[test]
fn payloads_of_a_real_redis_restore_to_the_same_values() {
    let s = TestServer::start();
    let mut c = s.raw();
    for case in recorded() {
        assert_eq!(c.cmd(&["FLUSHALL"]), Resp::Simple("OK".into()));
        for args in &case.setup {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let r = cmd(&mut c, &args);
            assert!(!matches!(r, Resp::Error(_)), "{}: {r:?}", case.name);
        }
        let r = cmd(&mut c, &[b"RESTORE", b"copy", b"0", &case.payload]);
        assert_eq!(r, Resp::Simple("OK".into()), "{}", case.name);
        let (kind, expected) = value_of(&mut c, "k");
        assert_eq!(value_of(&mut c, "copy"), (kind, expected), "{}", case.name);
        // And raftlock's own payload of the same value.
        let Resp::Bulk(Some(own)) = c.cmd(&["DUMP", "k"]) else { panic!("{}: DUMP k", case.name) };
        assert_eq!(cmd(&mut c, &[b"RESTORE", b"again", b"0", &own]), Resp::Simple("OK".into()), "{}", case.name);
        assert_eq!(value_of(&mut c, "again"), value_of(&mut c, "k"), "{}", case.name);
    }
}

#[test]
fn restore_options_and_errors_are_redis_s() {
    let s = TestServer::start();
    let mut c = s.raw();
    let err = |m: &str| Resp::Error(m.to_string());
    let ok = Resp::Simple("OK".into());
    assert_eq!(c.cmd(&["DUMP", "nokey"]), Resp::Bulk(None));
    c.cmd(&["RPUSH", "l", "a", "b", "1"]);
    let Resp::Bulk(Some(payload)) = c.cmd(&["DUMP", "l"]) else { panic!("DUMP l") };
    let p = &payload[..];
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"l", b"0", p]), err("BUSYKEY Target key name already exists."));
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"l", b"0", p, b"REPLACE"]), ok);
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"n", b"-1", p]), err("ERR Invalid TTL value, must be >= 0"));
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"n", b"x", p]), err("ERR value is not an integer or out of range"));
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"n", b"0", p, b"FOO"]), err("ERR syntax error"));
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"n", b"0", p, b"IDLETIME", b"-1"]), err("ERR Invalid IDLETIME value, must be >= 0"));
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"n", b"0", p, b"FREQ", b"256"]), err("ERR Invalid FREQ value, must be >= 0 and <= 255"));
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"n", b"0", p, b"IDLETIME", b"1", b"FREQ", b"1"]), err("ERR syntax error"));
    let wrong = err("ERR DUMP payload version or checksum are wrong");
    let mut flipped = payload.clone();
    flipped[1] ^= 1;
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"n", b"0", &flipped]), wrong);
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"n", b"0", b"short"]), wrong);
    let mut newer = payload.clone();
    let at = newer.len() - 10;
    newer[at] = 11;
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"n", b"0", &newer]), wrong);
    assert_eq!(c.cmd(&["EXISTS", "n"]), Resp::Int(0));
    // A TTL, relative and absolute; one already past creates nothing and
    // removes the key it replaces.
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"t", b"100000", p, b"IDLETIME", b"5"]), ok);
    let Resp::Int(pttl) = c.cmd(&["PTTL", "t"]) else { panic!("PTTL") };
    assert!(pttl > 0 && pttl <= 100_000, "{pttl}");
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let at = (now_ms + 200_000).to_string();
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"a", at.as_bytes(), p, b"ABSTTL", b"FREQ", b"7"]), ok);
    let Resp::Int(pttl) = c.cmd(&["PTTL", "a"]) else { panic!("PTTL") };
    assert!(pttl > 100_000 && pttl <= 200_000, "{pttl}");
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"a", b"1000", p, b"ABSTTL", b"REPLACE"]), ok);
    assert_eq!(c.cmd(&["EXISTS", "a"]), Resp::Int(0));
    assert_eq!(c.cmd(&["LRANGE", "l", "0", "-1"]), bulks(&["a", "b", "1"]));
}

#[test]
fn a_restored_list_wakes_a_client_blocked_on_it_and_restored_data_survives_a_restart() {
    let mut s = TestServer::start();
    let mut c = s.raw();
    c.cmd(&["RPUSH", "src", "x", "y"]);
    c.cmd(&["HSET", "h", "f", "v"]);
    let Resp::Bulk(Some(list)) = c.cmd(&["DUMP", "src"]) else { panic!("DUMP src") };
    let Resp::Bulk(Some(hash)) = c.cmd(&["DUMP", "h"]) else { panic!("DUMP h") };
    let mut blocked = s.raw();
    blocked.send(&RawConn::encode(&[b"BLPOP", b"dst", b"30"]));
    common::poll_until(std::time::Duration::from_secs(10), "a client blocked in BLPOP", || {
        c.cmd(&["CLIENT", "LIST"]).text().filter(|l| l.contains("cmd=blpop")).map(|_| ())
    });
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"dst", b"0", &list]), Resp::Simple("OK".into()));
    assert_eq!(blocked.read().unwrap(), bulks(&["dst", "x"]));
    assert_eq!(cmd(&mut c, &[b"RESTORE", b"h2", b"0", &hash]), Resp::Simple("OK".into()));
    s.restart();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["LRANGE", "dst", "0", "-1"]), bulks(&["y"]));
    assert_eq!(c.cmd(&["HGET", "h2", "f"]), Resp::Bulk(Some(b"v".to_vec())));
}

/// A throw-away `redis-server` on a free port, stopped when dropped.
struct RealRedis {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RealRedis {
    fn start() -> RealRedis {
        let dir = tempfile::tempdir().unwrap();
        let port = common::free_ports(1)[0];
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start redis-server");
        let redis = RealRedis { child, port, _dir: dir };
        common::poll_until(std::time::Duration::from_secs(20), "redis-server answering", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
        });
        redis
    }
}

impl Drop for RealRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The other direction: what raftlock's `DUMP` writes, a real Redis 7
/// restores to the value the same commands build there.
#[test]
fn a_real_redis_restores_raftlock_s_payloads() {
    if !common::need_tool("redis-server") {
        return;
    }
    let s = TestServer::start();
    let redis = RealRedis::start();
    let mut ours = s.raw();
    let mut theirs = RawConn::connect(&format!("127.0.0.1:{}", redis.port));
    let many = |prefix: &str, n: usize| (0..n).map(|i| format!("{prefix}{i}")).collect::<Vec<_>>();
    let mut setups: Vec<Vec<String>> = [
        "SET k 123",
        "SET k -2147483648",
        "SET k 12345678901",
        "RPUSH k 1 two -300 0",
        "SADD k 1 2 3 -9223372036854775808",
        "SADD k a b 1",
        "HSET k f 1 g v",
        "ZADD k 1.5 a -inf b 3 c 0 d",
    ]
    .iter()
    .map(|c| c.split(' ').map(String::from).collect())
    .collect();
    setups.push(vec!["SET".into(), "k".into(), "x".repeat(5000)]);
    setups.push([vec!["RPUSH".into(), "k".into()], many("element-", 3000)].concat());
    setups.push([vec!["HSET".into(), "k".into()], many("f", 400)].concat());
    setups.push(
        [vec!["ZADD".into(), "k".into()], (0..300).flat_map(|i| [format!("{}", f64::from(i) / 7.0), format!("m{i}")]).collect()]
            .concat(),
    );
    for setup in &setups {
        let args: Vec<&[u8]> = setup.iter().map(|a| a.as_bytes()).collect();
        for c in [&mut ours, &mut theirs] {
            c.cmd(&["DEL", "k"]);
            let r = cmd(c, &args);
            assert!(!matches!(r, Resp::Error(_)), "{setup:?}: {r:?}");
        }
        let Resp::Bulk(Some(payload)) = ours.cmd(&["DUMP", "k"]) else { panic!("DUMP after {setup:?}") };
        assert_eq!(cmd(&mut theirs, &[b"RESTORE", b"copy", b"0", &payload, b"REPLACE"]), Resp::Simple("OK".into()));
        assert_eq!(value_of(&mut theirs, "copy"), value_of(&mut theirs, "k"), "{:?}", &setup[..2]);
    }
}
