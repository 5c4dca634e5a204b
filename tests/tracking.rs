//! Issue 15: client-side caching as Redis 6+ offers it (`CLIENT TRACKING`),
//! which rueidis and its lock package rely on: a connection that read a key
//! is told, once, when any client changes it, on any node: RESP3
//! `invalidate` pushes, or messages on `__redis__:invalidate` for a RESP2
//! connection's redirect; BCAST with prefixes, NOLOOP, OPTIN/OPTOUT with
//! `CLIENT CACHING`, FLUSHALL.

mod cluster_support;
mod common;

use std::time::Duration;

use common::{b, RawConn, Resp, TestServer};

fn hello3(c: &mut RawConn) {
    assert!(matches!(c.cmd(&["HELLO", "3"]), Resp::Map(_)));
}

/// The next push (a reply first would be a test bug: nothing else is pending).
fn push(c: &mut RawConn) -> Resp {
    match c.read() {
        Ok(p @ Resp::Push(_)) => p,
        other => panic!("expected a push, got {other:?}"),
    }
}

/// Nothing arrives within `ms`.
fn quiet(c: &mut RawConn, ms: u64) {
    c.stream.set_read_timeout(Some(Duration::from_millis(ms))).unwrap();
    let got = c.read();
    c.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(matches!(got, Err(common::RawErr::Timeout)), "expected nothing, got {got:?}");
}

fn invalidate(keys: &[&str]) -> Resp {
    Resp::Push(vec![b("invalidate"), Resp::Array(Some(keys.iter().map(|k| b(k)).collect()))])
}

#[test]
fn a_reader_is_told_once_when_another_client_changes_the_key() {
    let s = TestServer::start();
    let (mut a, mut w) = (s.raw(), s.raw());
    hello3(&mut a);
    assert_eq!(a.cmd(&["CLIENT", "TRACKING", "ON"]), Resp::Simple("OK".into()));
    assert_eq!(a.cmd(&["GET", "k"]), Resp::Null);
    assert_eq!(w.cmd(&["SET", "k", "v1"]), Resp::Simple("OK".into()));
    assert_eq!(push(&mut a), invalidate(&["k"]));
    // Not read again: no second message.
    w.cmd(&["SET", "k", "v2"]);
    quiet(&mut a, 300);
    // Read again: tracked again; a lock taken on it counts as a change.
    assert_eq!(a.cmd(&["GET", "k"]), b("v2"));
    w.cmd(&["DEL", "k"]);
    assert_eq!(push(&mut a), invalidate(&["k"]));
    a.cmd(&["GET", "lk"]);
    w.cmd(&["LOCK.ACQUIRE", "lk", "me", "60000"]);
    assert_eq!(push(&mut a), invalidate(&["lk"]));
    // An expiry is a change too.
    a.cmd(&["GET", "short"]);
    w.cmd(&["SET", "short", "x", "PX", "1000"]);
    assert_eq!(push(&mut a), invalidate(&["short"]));
    a.cmd(&["GET", "short"]);
    assert_eq!(push(&mut a), invalidate(&["short"]), "the expiry of a key read while it lived");
    // A script's keys count as read (rueidislock's acquire script reads its
    // key so that a waiter hears of the release), pipelined ones too.
    let script = "return redis.call('GET', KEYS[1])";
    a.cmd(&["EVAL", script, "1", "sk"]);
    w.cmd(&["SET", "sk", "1"]);
    assert_eq!(push(&mut a), invalidate(&["sk"]));
    let one = RawConn::encode(&[b"EVAL", script.as_bytes(), b"1", b"p1"]);
    let two = RawConn::encode(&[b"EVAL", script.as_bytes(), b"1", b"p2"]);
    a.send(&[one, two].concat());
    a.read().unwrap();
    a.read().unwrap();
    w.cmd(&["MSET", "p1", "x", "p2", "y"]);
    // One change of both keys: one message naming both.
    assert_eq!(push(&mut a), invalidate(&["p1", "p2"]));
    // FLUSHALL: everything (a null key list).
    a.cmd(&["GET", "k"]);
    w.cmd(&["FLUSHALL"]);
    assert_eq!(push(&mut a), Resp::Push(vec![b("invalidate"), Resp::Null]));
    // Off: nothing more.
    assert_eq!(a.cmd(&["CLIENT", "TRACKING", "OFF"]), Resp::Simple("OK".into()));
    a.cmd(&["GET", "k"]);
    w.cmd(&["SET", "k", "v3"]);
    quiet(&mut a, 300);
}

#[test]
fn bcast_prefixes_noloop_optin_and_a_redirect_for_resp2() {
    let s = TestServer::start();
    let (mut a, mut w) = (s.raw(), s.raw());
    hello3(&mut a);
    assert_eq!(a.cmd(&["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "lock:", "NOLOOP"]), Resp::Simple("OK".into()));
    w.cmd(&["SET", "lock:1", "x"]);
    assert_eq!(push(&mut a), invalidate(&["lock:1"]));
    w.cmd(&["SET", "other", "x"]);
    a.cmd(&["SET", "lock:2", "mine"]);
    quiet(&mut a, 300);
    assert_eq!(a.cmd(&["CLIENT", "TRACKING", "OFF"]), Resp::Simple("OK".into()));

    // OPTIN: only the reads after CLIENT CACHING yes (a transaction counts as one).
    assert_eq!(a.cmd(&["CLIENT", "TRACKING", "ON", "OPTIN"]), Resp::Simple("OK".into()));
    a.cmd(&["GET", "o1"]);
    w.cmd(&["SET", "o1", "x"]);
    quiet(&mut a, 300);
    assert_eq!(a.cmd(&["CLIENT", "CACHING", "yes"]), Resp::Simple("OK".into()));
    a.cmd(&["MULTI"]);
    a.cmd(&["PTTL", "o2"]);
    a.cmd(&["GET", "o2"]);
    assert!(matches!(a.cmd(&["EXEC"]), Resp::Array(Some(_))));
    w.cmd(&["SET", "o2", "x"]);
    assert_eq!(push(&mut a), invalidate(&["o2"]));
    let e = a.cmd(&["CLIENT", "CACHING", "no"]);
    assert!(matches!(e, Resp::Error(t) if t.contains("OPTOUT")), "CACHING no needs OPTOUT");

    // A RESP2 client redirects to another connection subscribed to
    // __redis__:invalidate.
    let mut listener = s.raw();
    let Resp::Int(listener_id) = listener.cmd(&["CLIENT", "ID"]) else { panic!() };
    listener.cmd(&["SUBSCRIBE", "__redis__:invalidate"]);
    let mut r2 = s.raw();
    let id = listener_id.to_string();
    assert_eq!(r2.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id]), Resp::Simple("OK".into()));
    assert_eq!(r2.cmd(&["CLIENT", "GETREDIR"]), Resp::Int(listener_id));
    r2.cmd(&["GET", "r"]);
    w.cmd(&["SET", "r", "x"]);
    let message = listener.read().unwrap();
    assert_eq!(message, Resp::Array(Some(vec![b("message"), b("__redis__:invalidate"), Resp::Array(Some(vec![b("r")]))])));
    quiet(&mut r2, 200);
    // Redirected to a RESP3 connection (listening on the channel): an
    // `invalidate` push there, as Redis sends it, not a Pub/Sub message.
    let mut listener3 = s.raw();
    hello3(&mut listener3);
    let Resp::Int(listener3_id) = listener3.cmd(&["CLIENT", "ID"]) else { panic!() };
    assert!(matches!(listener3.cmd(&["SUBSCRIBE", "__redis__:invalidate"]), Resp::Push(_)));
    let mut r3 = s.raw();
    assert_eq!(r3.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", &listener3_id.to_string()]), Resp::Simple("OK".into()));
    r3.cmd(&["GET", "r3"]);
    w.cmd(&["SET", "r3", "x"]);
    assert_eq!(push(&mut listener3), invalidate(&["r3"]));
    // BCAST: overlapping prefixes refused; none given is the empty prefix.
    let mut b3 = s.raw();
    assert_eq!(
        b3.cmd(&["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "FOOBAR", "PREFIX", "FOO"]),
        Resp::Error("ERR Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'. Prefixes for a single client must not overlap.".into())
    );
    let e = r2.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", "999999"]);
    assert!(matches!(e, Resp::Error(t) if t.contains("does not exist")));
}

/// A client of a follower is told of a change made through the leader: each
/// node tells its own connections as it applies the entry.
#[test]
fn a_reader_on_a_follower_is_told_of_a_write_through_the_leader() {
    let _serial = cluster_support::serial();
    let c = cluster_support::Cluster::start(3, cluster_support::Opts::default());
    let leader = c.wait_leader(&[1, 2, 3], Duration::from_secs(10));
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let mut a = RawConn::connect(&c.node(follower).addr());
    let mut w = RawConn::connect(&c.node(leader).addr());
    hello3(&mut a);
    a.cmd(&["CLIENT", "TRACKING", "ON"]);
    a.cmd(&["GET", "shared"]);
    w.cmd(&["SET", "shared", "1"]);
    assert_eq!(push(&mut a), invalidate(&["shared"]));
}

/// A follower forwards reads to the leader, whose answer can arrive before
/// the follower has applied the entries the answer reflects. Those entries,
/// applied after the answer, are changes the reader has already seen: they
/// may be told, but must not end the read's tracking, or the first change
/// after the read is never told (rueidislock's waiters, which sleep until
/// told of the release, then hang). Here the leader's appends to the
/// follower are held while a write and the read go through, so the
/// follower applies the write only after the answer, every round.
#[test]
fn entries_a_follower_applies_after_the_answer_do_not_end_the_tracking() {
    let _serial = cluster_support::serial();
    let opts = cluster_support::Opts { partitionable: true, election_timeout_ms: Some(3000), ..Default::default() };
    let c = cluster_support::Cluster::start(3, opts);
    let leader = c.wait_leader(&[1, 2, 3], Duration::from_secs(10));
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    c.wait_ready(&[1, 2, 3], Duration::from_secs(10));
    let mut a = RawConn::connect(&c.node(follower).addr());
    let mut w = RawConn::connect(&c.node(leader).addr());
    hello3(&mut a);
    assert_eq!(a.cmd(&["CLIENT", "TRACKING", "ON"]), Resp::Simple("OK".into()));
    assert_eq!(a.cmd(&["GET", "warm"]), Resp::Null, "the follower forwards through its link to the leader");
    for round in 0..5 {
        let seen = format!("seen-{round}");
        c.net().hold_calls(leader, follower);
        assert_eq!(w.cmd(&["SET", "k", &seen]), Resp::Simple("OK".into()));
        assert_eq!(a.cmd(&["GET", "k"]), b(&seen), "round {round}: the leader answers with its applied state");
        let reflected = c.node(leader).raft_info().unwrap().num("applied_index");
        assert!(
            c.node(follower).raft_info().unwrap().num("applied_index") < reflected,
            "round {round}: the follower applied the write before the answer; the test does not test what it says"
        );
        c.net().heal();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while c.node(follower).raft_info().map(|i| i.num("applied_index")).unwrap_or(0) < reflected {
            assert!(std::time::Instant::now() < deadline, "round {round}: the follower never caught up");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The write applied late may be told (the reader cannot tell it
        // from a later one), once at most.
        a.stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        match a.read() {
            Ok(p) => assert_eq!(p, invalidate(&["k"]), "round {round}"),
            Err(common::RawErr::Timeout) => {}
            Err(e) => panic!("round {round}: {e:?}"),
        }
        quiet(&mut a, 200);
        // The first change after the read is told.
        assert_eq!(w.cmd(&["SET", "k", &format!("after-{round}")]), Resp::Simple("OK".into()));
        assert_eq!(push(&mut a), invalidate(&["k"]), "round {round}: the first change after the read");
    }
}
