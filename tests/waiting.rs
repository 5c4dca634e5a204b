//! `LOCK.ACQUIRE key owner ttl-ms WAIT ms` (issue 13) against real raftlock
//! processes, with the `redis` crate:
//!
//! * one node: FIFO grants handed over by the release (with `lock.handoff`
//!   naming the new token), a timeout, a waiter that disconnects leaving the
//!   queue, a handoff on expiry after which the old holder's renewal is
//!   `LOCKLOST`, spinning `SET NX`/`LOCK.ACQUIRE` on a held key leaving the log
//!   unchanged, and a queue that survives a snapshot and a restart (its waiter
//!   gone with the old process: the grant lapses by its lease);
//! * three nodes: FIFO order across waiters blocked on different nodes, and a
//!   `kill -9` of the leader with waiters queued on the followers.
//!
//! Waits are bounded; the cluster tests run one at a time
//! (`cluster_support::serial`).

mod cluster_support;
mod common;

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use cluster_support::{lock_info, poll_until, serial, Cluster, LockInfo, Opts};
use common::{err_text, q, RawConn, TestServer};
use redis::Value;

const ALL: [u64; 3] = [1, 2, 3];
const BOUND: Duration = Duration::from_secs(20);

/// `LOCK.ACQUIRE key owner ttl_ms WAIT wait_ms` on a connection of its own to
/// `url`, in a thread: its reply (or error text) and how long it took.
fn waiter(url: String, key: &str, owner: &str, ttl_ms: u64, wait_ms: u64) -> JoinHandle<(Result<Value, String>, Duration)> {
    let args: Vec<String> =
        ["LOCK.ACQUIRE", key, owner, &ttl_ms.to_string(), "WAIT", &wait_ms.to_string()].iter().map(|s| s.to_string()).collect();
    thread::spawn(move || {
        let client = redis::Client::open(url).expect("client");
        let mut con = client.get_connection_with_timeout(Duration::from_secs(5)).expect("connect");
        con.set_read_timeout(Some(Duration::from_millis(wait_ms) + BOUND)).unwrap();
        let started = Instant::now();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = q(&mut con, &args).map_err(|e| err_text(&e));
        (reply, started.elapsed())
    })
}

fn token(reply: &Result<Value, String>) -> i64 {
    match reply {
        Ok(Value::Int(t)) => *t,
        other => panic!("a granted wait replies its token, got {other:?}"),
    }
}

#[track_caller]
fn info(con: &mut redis::Connection, key: &str) -> Option<LockInfo> {
    lock_info(con, key).unwrap_or_else(|e| panic!("LOCK.INFO {key}: {e}"))
}

#[track_caller]
fn queued(con: &mut redis::Connection, key: &str) -> i64 {
    info(con, key).map_or(0, |i| i.waiters)
}

/// The owner first in `key`'s queue, as `LOCK.INFO` names it.
fn next_waiter(con: &mut redis::Connection, key: &str) -> Option<String> {
    let v = q(con, &["LOCK.INFO", key]).unwrap();
    let items = match v {
        Value::Array(items) => items,
        other => panic!("LOCK.INFO in RESP2 is a flat array, got {other:?}"),
    };
    let keys: Vec<String> = items.iter().step_by(2).map(|k| common::as_text(k).unwrap_or_default()).collect();
    assert_eq!(keys, ["owner", "token", "ttl-ms", "waiters", "next-waiter"], "LOCK.INFO {key}");
    common::as_text(&items[9])
}

#[track_caller]
fn acquire(con: &mut redis::Connection, key: &str, owner: &str, ttl_ms: u64) -> i64 {
    match q(con, &["LOCK.ACQUIRE", key, owner, &ttl_ms.to_string()]) {
        Ok(Value::Int(t)) => t,
        other => panic!("LOCK.ACQUIRE {key} {owner} should be granted, got {other:?}"),
    }
}

#[track_caller]
fn release(con: &mut redis::Connection, key: &str, owner: &str, token: i64) {
    assert_eq!(q(con, &["LOCK.RELEASE", key, owner, &token.to_string()]).unwrap(), Value::Int(1), "release {key} by {owner}");
}

#[test]
fn waiters_are_granted_in_arrival_order_by_each_release() {
    let s = TestServer::start();
    let mut c = s.client();
    let mut held = acquire(&mut c, "k", "holder", 30_000);
    let mut subscriber = s.client();
    let mut ps = subscriber.as_pubsub();
    ps.subscribe("__keyspace@0__:k").unwrap();
    ps.set_read_timeout(Some(BOUND)).unwrap();
    let mut waiters = Vec::new();
    for i in 0..4 {
        waiters.push(waiter(s.url(), "k", &format!("w{i}"), 30_000, 30_000));
        // Each joins only after the one before it: the order is known.
        poll_until(BOUND, &format!("w{i} queued"), || (queued(&mut c, "k") == i + 1).then_some(()));
    }
    assert_eq!(next_waiter(&mut c, "k").as_deref(), Some("w0"));
    let clients = match q(&mut c, &["CLIENT", "LIST"]).unwrap() {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        other => panic!("CLIENT LIST replied {other:?}"),
    };
    assert_eq!(clients.matches("flags=b").count(), 4, "every waiter shows as blocked:\n{clients}");
    let mut owner = "holder".to_string();
    for (i, w) in waiters.into_iter().enumerate() {
        release(&mut c, "k", &owner, held);
        let (reply, _) = w.join().unwrap();
        let t = token(&reply);
        assert!(t > held, "the handoff token {t} must exceed the previous holder's {held}");
        owner = format!("w{i}");
        let now = info(&mut c, "k").expect("handed over, not freed");
        assert_eq!((now.owner.as_str(), now.token, now.waiters), (owner.as_str(), t, 3 - i as i64));
        // The release's own lock.released, then the grant to the waiter.
        let mut seen = Vec::new();
        while !seen.iter().any(|m: &String| m.starts_with("lock.handoff")) {
            seen.push(ps.get_message().expect("keyspace notification").get_payload::<String>().unwrap());
        }
        assert_eq!(seen.last().unwrap(), &format!("lock.handoff {t}"), "notifications: {seen:?}");
        assert!(seen.contains(&"lock.released".to_string()) && seen.contains(&"lock.acquired".to_string()), "{seen:?}");
        held = t;
    }
    assert_eq!(info(&mut c, "k").unwrap().waiters, 0);
}

#[test]
fn a_wait_ends_with_nil_at_its_deadline_and_leaves_the_queue() {
    let s = TestServer::start();
    let mut c = s.client();
    acquire(&mut c, "k", "holder", 30_000);
    let (reply, took) = waiter(s.url(), "k", "w", 1000, 300).join().unwrap();
    assert_eq!(reply, Ok(Value::Nil));
    assert!(took >= Duration::from_millis(300), "answered nil after {took:?}, before its WAIT of 300 ms");
    assert_eq!(info(&mut c, "k").unwrap().waiters, 0);
    assert!(q(&mut c, &["LOCK.ACQUIRE", "k", "w", "1000", "WAIT", "-1"]).is_err());
}

#[test]
fn a_waiter_that_disconnects_leaves_the_queue_and_is_never_granted() {
    let s = TestServer::start();
    let mut c = s.client();
    let t = acquire(&mut c, "k", "holder", 30_000);
    let mut raw = RawConn::connect(&s.addr());
    raw.send(&RawConn::encode(&[b"LOCK.ACQUIRE", b"k", b"gone", b"30000", b"WAIT", b"60000"]));
    poll_until(BOUND, "the raw waiter queued", || (queued(&mut c, "k") == 1).then_some(()));
    drop(raw);
    poll_until(BOUND, "the closed waiter dequeued", || (queued(&mut c, "k") == 0).then_some(()));
    release(&mut c, "k", "holder", t);
    assert_eq!(q(&mut c, &["GET", "k"]).unwrap(), Value::Nil, "nobody waits: the release frees the lock");
}

#[test]
fn an_expired_lease_is_handed_over_and_its_holder_has_lost_it() {
    let s = TestServer::start();
    let mut c = s.client();
    let old = acquire(&mut c, "k", "holder", 400);
    let started = Instant::now();
    let (reply, _) = waiter(s.url(), "k", "next", 5000, 10_000).join().unwrap();
    let t = token(&reply);
    assert!(started.elapsed() >= Duration::from_millis(300), "granted after {:?}, before the lease ran out", started.elapsed());
    assert!(t > old);
    let e = q(&mut c, &["LOCK.RENEW", "k", "holder", &old.to_string(), "1000"]).unwrap_err();
    assert!(err_text(&e).starts_with("LOCKLOST"), "{e:?}");
    assert_eq!(info(&mut c, "k").unwrap().owner, "next");
}

#[test]
fn spinning_on_a_held_lock_does_not_grow_the_log() {
    let s = TestServer::start();
    let mut c = s.client();
    acquire(&mut c, "k", "holder", 600_000);
    let before = s.raft_info();
    for i in 0..300 {
        let me = format!("spinner{i}");
        assert_eq!(q(&mut c, &["SET", "k", &me, "NX", "PX", "1000"]).unwrap(), Value::Nil);
        assert_eq!(q(&mut c, &["LOCK.ACQUIRE", "k", &me, "1000"]).unwrap(), Value::Nil);
    }
    let after = s.raft_info();
    assert_eq!(
        after.num("last_log_index"),
        before.num("last_log_index"),
        "600 refused attempts wrote log entries"
    );
    // What may succeed still goes through the log.
    assert_eq!(q(&mut c, &["SET", "free", "x", "NX", "PX", "1000"]).unwrap(), Value::Okay);
    assert!(s.raft_info().num("last_log_index") > after.num("last_log_index"));
}

#[test]
fn a_queue_survives_a_snapshot_and_a_restart_and_a_vanished_waiters_grant_lapses() {
    let every = 50;
    let mut s = TestServer::start_with_env(&[("RAFTLOCK_SNAPSHOT_LOGS", &every.to_string())]);
    let mut c = s.client();
    let t = acquire(&mut c, "k", "holder", 600_000);
    let mut raw = RawConn::connect(&s.addr());
    raw.send(&RawConn::encode(&[b"LOCK.ACQUIRE", b"k", b"w", b"1500", b"WAIT", b"600000"]));
    poll_until(BOUND, "w queued", || (queued(&mut c, "k") == 1).then_some(()));
    let queued_at = s.raft_info().num("applied_index");
    // The waiter's connection dies with the process: it stays queued.
    s.restart_from_snapshot(queued_at, every, "the queue");
    let mut c = s.client();
    assert_eq!(next_waiter(&mut c, "k").as_deref(), Some("w"));
    assert_eq!(info(&mut c, "k").unwrap().waiters, 1);
    release(&mut c, "k", "holder", t);
    let granted = info(&mut c, "k").expect("handed to the queued waiter");
    assert_eq!((granted.owner.as_str(), granted.waiters), ("w", 0));
    assert!(granted.token > t && granted.ttl_ms <= 1500, "{granted:?}");
    poll_until(BOUND, "the vanished waiter's lease lapsed", || info(&mut c, "k").is_none().then_some(()));
    drop(raw);
}

#[test]
fn waiters_on_every_node_of_a_cluster_are_granted_in_arrival_order() {
    let _serial = serial();
    let c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(&ALL, BOUND);
    let mut con = c.node(leader).client();
    let mut held = acquire(&mut con, "k", "holder", 30_000);
    // Waiters blocked on followers and on the leader, in turn.
    let nodes = [1u64, 2, 3, 1, 2, 3];
    let mut waiters = Vec::new();
    for (i, id) in nodes.iter().enumerate() {
        waiters.push((waiter(c.node(*id).url(), "k", &format!("w{i}"), 30_000, 30_000), *id));
        poll_until(BOUND, &format!("w{i} queued via node {id}"), || (queued(&mut con, "k") == i as i64 + 1).then_some(()));
    }
    let mut owner = "holder".to_string();
    for (i, (w, id)) in waiters.into_iter().enumerate() {
        // Released through a node other than the waiter's.
        let mut via = c.node(if id == 3 { 1 } else { id + 1 }).client();
        release(&mut via, "k", &owner, held);
        let (reply, _) = w.join().unwrap();
        let t = token(&reply);
        assert!(t > held, "w{i} (node {id}) got token {t}, not above {held}");
        owner = format!("w{i}");
        assert_eq!(info(&mut con, "k").unwrap().owner, owner);
        held = t;
    }
}

#[test]
fn queued_waiters_are_granted_after_the_leader_is_killed() {
    let _serial = serial();
    let mut c = Cluster::start(3, Opts::default());
    let leader = c.wait_leader(&ALL, BOUND);
    let followers: Vec<u64> = ALL.iter().copied().filter(|id| *id != leader).collect();
    let mut con = c.node(followers[0]).client();
    let held = acquire(&mut con, "k", "holder", 60_000);
    let first = waiter(c.node(followers[0]).url(), "k", "a", 30_000, 60_000);
    poll_until(BOUND, "a queued", || (queued(&mut con, "k") == 1).then_some(()));
    let second = waiter(c.node(followers[1]).url(), "k", "b", 30_000, 60_000);
    poll_until(BOUND, "b queued", || (queued(&mut con, "k") == 2).then_some(()));
    c.kill9(leader);
    let new_leader = c.wait_leader(&followers, BOUND);
    let mut con = c.node(new_leader).client();
    assert_eq!(info(&mut con, "k").unwrap().waiters, 2, "the queue survives the leader change");
    release(&mut con, "k", "holder", held);
    let ta = token(&first.join().unwrap().0);
    assert!(ta > held);
    release(&mut con, "k", "a", ta);
    let tb = token(&second.join().unwrap().0);
    assert!(tb > ta);
    assert_eq!(info(&mut con, "k").unwrap().owner, "b");
}
