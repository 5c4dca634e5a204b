//! The LOCK.* family (DESIGN.md §3) and fencing tokens (§2), against the real binary:
//! grant, same-owner retry, renew, release, fence, info, lease expiry, and a
//! `kill -9` + restart that keeps every acknowledged lock.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// LOCK.ACQUIRE that must be granted; returns the token.
#[track_caller]
fn acquire(c: &mut redis::Connection, key: &str, owner: &str, ttl_ms: u64) -> i64 {
    match q(c, &["LOCK.ACQUIRE", key, owner, &ttl_ms.to_string()]) {
        Ok(Value::Int(t)) => t,
        other => panic!("LOCK.ACQUIRE {key} {owner} {ttl_ms} should grant a token, got {other:?}"),
    }
}

#[derive(Debug, PartialEq)]
struct Info {
    owner: String,
    token: i64,
    ttl_ms: i64,
    waiters: i64,
}

/// Parse LOCK.INFO; None for nil. Checks the field order for RESP2 flat arrays.
#[track_caller]
fn info(c: &mut redis::Connection, key: &str) -> Option<Info> {
    let v = q(c, &["LOCK.INFO", key]).unwrap();
    if v == Value::Nil {
        return None;
    }
    let p = pairs(&v);
    if let Value::Array(_) = v {
        let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["owner", "token", "ttl-ms", "waiters", "next-waiter"],
            "LOCK.INFO {key}: {v:?}"
        );
    }
    let get = |k: &str| {
        lookup(&p, k)
            .unwrap_or_else(|| panic!("LOCK.INFO lacks {k}: {v:?}"))
            .clone()
    };
    Some(Info {
        owner: as_text(&get("owner")).unwrap_or_else(|| panic!("owner not a string: {v:?}")),
        token: int(&get("token")),
        ttl_ms: int(&get("ttl-ms")),
        waiters: int(&get("waiters")),
    })
}

#[test]
fn acquire_grants_token_and_same_owner_retry_refreshes_lease() {
    let s = TestServer::start();
    let mut c = s.client();
    let t = acquire(&mut c, "orders", "alice", 5_000);
    assert!(t > 0, "token {t}");
    // the lock is a key whose value is its owner, with the lease as its TTL
    assert_eq!(q(&mut c, &["GET", "orders"]).unwrap(), bulk("alice"));
    let pttl = int(&q(&mut c, &["PTTL", "orders"]).unwrap());
    assert!((1..=5_000).contains(&pttl), "PTTL {pttl}");

    // same owner: same token, lease refreshed to the new ttl
    let t2 = acquire(&mut c, "orders", "alice", 60_000);
    assert_eq!(
        t2, t,
        "a retried LOCK.ACQUIRE by the same owner must return the same token"
    );
    let pttl = int(&q(&mut c, &["PTTL", "orders"]).unwrap());
    assert!(
        (50_000..=60_000).contains(&pttl),
        "lease not refreshed: PTTL {pttl}"
    );

    // another owner: nil, nothing changes
    assert_eq!(
        q(&mut c, &["LOCK.ACQUIRE", "orders", "bob", "5000"]).unwrap(),
        Value::Nil
    );
    assert_eq!(q(&mut c, &["GET", "orders"]).unwrap(), bulk("alice"));
    let i = info(&mut c, "orders").expect("held");
    assert_eq!(i.owner, "alice");
    assert_eq!(i.token, t);
}

#[test]
fn renew_extends_or_reports_locklost() {
    let s = TestServer::start();
    let mut c = s.client();
    let t = acquire(&mut c, "job", "w1", 2_000);
    let ts = t.to_string();
    assert_eq!(
        q(&mut c, &["LOCK.RENEW", "job", "w1", &ts, "30000"]).unwrap(),
        Value::Int(30_000)
    );
    let pttl = int(&q(&mut c, &["PTTL", "job"]).unwrap());
    assert!(
        (25_000..=30_000).contains(&pttl),
        "PTTL after renew: {pttl}"
    );
    // the token does not change on renewal
    assert_eq!(info(&mut c, "job").unwrap().token, t);

    let wrong_token = (t + 1000).to_string();
    let e = expect_err(q(
        &mut c,
        &["LOCK.RENEW", "job", "w1", &wrong_token, "30000"],
    ));
    assert!(e.starts_with("LOCKLOST"), "renew with a wrong token: {e:?}");
    let e = expect_err(q(&mut c, &["LOCK.RENEW", "job", "w2", &ts, "30000"]));
    assert!(e.starts_with("LOCKLOST"), "renew by a wrong owner: {e:?}");
    let e = expect_err(q(&mut c, &["LOCK.RENEW", "nosuchlock", "w1", &ts, "30000"]));
    assert!(e.starts_with("LOCKLOST"), "renew of a free lock: {e:?}");
    // failed renewals changed nothing
    let i = info(&mut c, "job").unwrap();
    assert_eq!((i.owner.as_str(), i.token), ("w1", t));

    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "job", "w1", &ts]).unwrap(),
        Value::Int(1)
    );
    let e = expect_err(q(&mut c, &["LOCK.RENEW", "job", "w1", &ts, "30000"]));
    assert!(e.starts_with("LOCKLOST"), "renew after release: {e:?}");
    assert_eq!(
        q(&mut c, &["EXISTS", "job"]).unwrap(),
        Value::Int(0),
        "renew must not recreate"
    );
}

#[test]
fn release_only_by_holder_with_token() {
    let s = TestServer::start();
    let mut c = s.client();
    let t = acquire(&mut c, "r", "alice", 30_000);
    let ts = t.to_string();
    let wrong = (t + 7).to_string();
    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "r", "alice", &wrong]).unwrap(),
        Value::Int(0)
    );
    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "r", "bob", &ts]).unwrap(),
        Value::Int(0)
    );
    assert_eq!(
        q(&mut c, &["GET", "r"]).unwrap(),
        bulk("alice"),
        "wrong release must not free"
    );
    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "r", "alice", &ts]).unwrap(),
        Value::Int(1)
    );
    assert_eq!(q(&mut c, &["GET", "r"]).unwrap(), Value::Nil);
    assert_eq!(info(&mut c, "r"), None);
    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "r", "alice", &ts]).unwrap(),
        Value::Int(0)
    );
    // free again: someone else gets it, with a greater token
    let t2 = acquire(&mut c, "r", "bob", 30_000);
    assert!(t2 > t, "new grant token {t2} must exceed {t}");
    // the old holder's stale token can no longer release the new holder's lock
    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "r", "alice", &ts]).unwrap(),
        Value::Int(0)
    );
    assert_eq!(q(&mut c, &["GET", "r"]).unwrap(), bulk("bob"));
}

#[test]
fn fence_records_highest_token_and_rejects_stale() {
    let s = TestServer::start();
    let mut c = s.client();
    let t1 = acquire(&mut c, "a", "o1", 30_000);
    let t2 = acquire(&mut c, "b", "o2", 30_000);
    assert!(t2 > t1);
    assert_eq!(
        q(&mut c, &["LOCK.FENCE", "resource", &t1.to_string()]).unwrap(),
        Value::Int(t1)
    );
    assert_eq!(
        q(&mut c, &["GET", "resource"]).unwrap(),
        bulk(&t1.to_string())
    );
    assert_eq!(
        q(&mut c, &["LOCK.FENCE", "resource", &t2.to_string()]).unwrap(),
        Value::Int(t2)
    );
    // equal token: still honoured (token >= highest)
    assert_eq!(
        q(&mut c, &["LOCK.FENCE", "resource", &t2.to_string()]).unwrap(),
        Value::Int(t2)
    );
    let e = expect_err(q(&mut c, &["LOCK.FENCE", "resource", &t1.to_string()]));
    assert!(
        e.starts_with("STALE"),
        "a lower token must be refused with STALE: {e:?}"
    );
    assert_eq!(
        q(&mut c, &["GET", "resource"]).unwrap(),
        bulk(&t2.to_string()),
        "GET resource shows the highest token"
    );
    let e = expect_err(q(&mut c, &["LOCK.FENCE", "resource", "notanumber"]));
    assert!(e.starts_with("ERR "), "{e}");
    assert_eq!(
        expect_err(q(&mut c, &["LOCK.FENCE", "resource"])),
        "ERR wrong number of arguments for 'lock.fence' command"
    );
}

#[test]
fn info_nil_when_free_flat_array_in_resp2() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(q(&mut c, &["LOCK.INFO", "free"]).unwrap(), Value::Nil);
    let t = acquire(&mut c, "held", "carol", 20_000);
    let v = q(&mut c, &["LOCK.INFO", "held"]).unwrap();
    let Value::Array(items) = &v else {
        panic!("RESP2 LOCK.INFO must be a flat array: {v:?}")
    };
    assert_eq!(items.len(), 10, "{v:?}");
    assert_eq!(items[0], bulk("owner"));
    assert_eq!(items[1], bulk("carol"));
    assert_eq!(items[2], bulk("token"));
    assert_eq!(items[3], Value::Int(t));
    assert_eq!(items[4], bulk("ttl-ms"));
    let ttl = int(&items[5]);
    assert!((1..=20_000).contains(&ttl), "ttl-ms {ttl}");
    assert_eq!(items[6], bulk("waiters"));
    assert_eq!(items[7], Value::Int(0));
    assert_eq!(items[8], bulk("next-waiter"));
    assert_eq!(items[9], Value::Nil);
}

#[test]
fn info_is_a_map_in_resp3() {
    let s = TestServer::start();
    let mut c = s.client_resp3();
    assert_eq!(q(&mut c, &["LOCK.INFO", "free"]).unwrap(), Value::Nil);
    let t = acquire(&mut c, "held", "dave", 20_000);
    let v = q(&mut c, &["LOCK.INFO", "held"]).unwrap();
    let Value::Map(m) = &v else {
        panic!("RESP3 LOCK.INFO must be a map: {v:?}")
    };
    let m: BTreeMap<String, Value> = m
        .iter()
        .map(|(k, v)| (as_text(k).unwrap(), v.clone()))
        .collect();
    assert_eq!(m.len(), 5, "{v:?}");
    assert_eq!(m["owner"], bulk("dave"));
    assert_eq!(m["token"], Value::Int(t));
    assert!((1..=20_000).contains(&int(&m["ttl-ms"])), "{v:?}");
    assert_eq!(m["waiters"], Value::Int(0));
}

#[test]
fn plain_set_nx_px_lock_has_a_token() {
    let s = TestServer::start();
    let mut c = s.client();
    let before = acquire(&mut c, "probe1", "p", 10_000);
    assert_eq!(
        q(&mut c, &["SET", "legacy", "tok-123", "NX", "PX", "10000"]).unwrap(),
        Value::Okay
    );
    let i = info(&mut c, "legacy").expect("a SET NX PX lock must show in LOCK.INFO");
    assert_eq!(i.owner, "tok-123");
    assert!(
        i.token > before,
        "token {} must exceed the earlier grant {before}",
        i.token
    );
    assert!((1..=10_000).contains(&i.ttl_ms), "{i:?}");
    assert_eq!(i.waiters, 0);
    // the LOCK.* family sees it as held by its owner
    assert_eq!(
        q(&mut c, &["LOCK.ACQUIRE", "legacy", "other", "5000"]).unwrap(),
        Value::Nil
    );
    let after = acquire(&mut c, "probe2", "p", 10_000);
    assert!(after > i.token);
    assert_eq!(
        q(
            &mut c,
            &["LOCK.RELEASE", "legacy", "tok-123", &i.token.to_string()]
        )
        .unwrap(),
        Value::Int(1)
    );
    assert_eq!(q(&mut c, &["GET", "legacy"]).unwrap(), Value::Nil);
}

#[test]
fn lock_argument_errors() {
    let s = TestServer::start();
    let mut c = s.client();
    assert_eq!(
        expect_err(q(&mut c, &["LOCK.ACQUIRE", "k", "o"])),
        "ERR wrong number of arguments for 'lock.acquire' command"
    );
    assert_eq!(
        expect_err(q(&mut c, &["lock.release", "k", "o"])),
        "ERR wrong number of arguments for 'lock.release' command"
    );
    assert_eq!(
        expect_err(q(&mut c, &["LOCK.RENEW", "k", "o", "1"])),
        "ERR wrong number of arguments for 'lock.renew' command"
    );
    assert_eq!(
        expect_err(q(&mut c, &["LOCK.INFO"])),
        "ERR wrong number of arguments for 'lock.info' command"
    );
    let e = expect_err(q(&mut c, &["LOCK.ACQUIRE", "k", "o", "soon"]));
    assert!(e.starts_with("ERR "), "{e}");
    let e = expect_err(q(&mut c, &["LOCK.ACQUIRE", "k", "o", "0"]));
    assert!(e.starts_with("ERR "), "a zero lease must be refused: {e}");
    let e = expect_err(q(&mut c, &["LOCK.ACQUIRE", "k", "o", "-5"]));
    assert!(
        e.starts_with("ERR "),
        "a negative lease must be refused: {e}"
    );
    assert_eq!(info(&mut c, "k"), None);
    let t = acquire(&mut c, "held", "o", 30_000).to_string();
    let e = expect_err(q(&mut c, &["LOCK.RENEW", "held", "o", &t, "0"]));
    assert!(
        e.starts_with("ERR "),
        "renew with a zero lease must be refused: {e}"
    );
    let e = expect_err(q(&mut c, &["LOCK.RENEW", "held", "o", &t, "later"]));
    assert!(e.starts_with("ERR "), "{e}");
    let e = expect_err(q(&mut c, &["LOCK.RELEASE", "held", "o", "tok"]));
    assert!(e.starts_with("ERR "), "{e}");
    assert_eq!(
        info(&mut c, "held").unwrap().owner,
        "o",
        "bad arguments changed the lock"
    );
    // lower-case command names work
    assert!(matches!(
        q(&mut c, &["lock.acquire", "k", "o", "1000"]).unwrap(),
        Value::Int(_)
    ));
}

#[test]
fn tokens_strictly_increase_across_keys_and_grants() {
    let s = TestServer::start();
    let mut c = s.client();
    let mut last = 0;
    for i in 0..20 {
        let key = format!("k{}", i % 5);
        let t = acquire(&mut c, &key, &format!("o{i}"), 30_000);
        assert!(t > last, "token {t} after {last} is not strictly greater");
        last = t;
        assert_eq!(
            q(
                &mut c,
                &["LOCK.RELEASE", &key, &format!("o{i}"), &t.to_string()]
            )
            .unwrap(),
            Value::Int(1)
        );
    }
    // plain writes in between also advance the log; tokens still increase
    q(&mut c, &["SET", "x", "1"]).unwrap();
    let t = acquire(&mut c, "k0", "z", 30_000);
    assert!(t > last);
}

#[test]
fn only_one_of_many_racing_owners_wins() {
    let s = TestServer::start();
    let url = s.url();
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let client = redis::Client::open(url).unwrap();
                let mut c = client.get_connection_with_timeout(IO_TIMEOUT).unwrap();
                c.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                let v: Value = redis::cmd("LOCK.ACQUIRE")
                    .arg("contended")
                    .arg(format!("owner-{i}"))
                    .arg(30_000)
                    .query(&mut c)
                    .unwrap();
                (i, v)
            })
        })
        .collect();
    let results: Vec<(i32, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let winners: Vec<_> = results
        .iter()
        .filter(|(_, v)| matches!(v, Value::Int(_)))
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one owner must be granted: {results:?}"
    );
    assert!(
        results
            .iter()
            .all(|(_, v)| matches!(v, Value::Int(_) | Value::Nil)),
        "{results:?}"
    );
    let (wi, wt) = winners[0];
    let mut c = s.client();
    let i = info(&mut c, "contended").unwrap();
    assert_eq!(i.owner, format!("owner-{wi}"));
    assert_eq!(Value::Int(i.token), *wt);
}

#[test]
fn lease_lapses_after_its_ttl() {
    let s = TestServer::start();
    let mut c = s.client();
    let t = acquire(&mut c, "lease", "sleepy", 300);
    poll_until(
        EVENT_TIMEOUT,
        "the 300 ms lease to lapse (GET lease -> nil)",
        || (q(&mut c, &["GET", "lease"]).unwrap() == Value::Nil).then_some(()),
    );
    assert_eq!(info(&mut c, "lease"), None);
    assert_eq!(q(&mut c, &["PTTL", "lease"]).unwrap(), Value::Int(-2));
    let ts = t.to_string();
    let e = expect_err(q(&mut c, &["LOCK.RENEW", "lease", "sleepy", &ts, "1000"]));
    assert!(
        e.starts_with("LOCKLOST"),
        "renew after the lease lapsed: {e:?}"
    );
    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "lease", "sleepy", &ts]).unwrap(),
        Value::Int(0)
    );
    // the same owner coming back after its lease lapsed gets a new, greater token
    let t1 = acquire(&mut c, "lease", "sleepy", 30_000);
    assert!(
        t1 > t,
        "re-grant after lapse must have a new token: {t1} vs {t}"
    );
    assert_eq!(
        q(
            &mut c,
            &["LOCK.RELEASE", "lease", "sleepy", &t1.to_string()]
        )
        .unwrap(),
        Value::Int(1)
    );
    let t2 = acquire(&mut c, "lease", "next", 30_000);
    assert!(t2 > t1, "token after lapse {t2} must exceed {t1}");
    // a stale fence by the old holder is refused once the new holder fenced
    assert_eq!(
        q(&mut c, &["LOCK.FENCE", "db", &t2.to_string()]).unwrap(),
        Value::Int(t2)
    );
    let e = expect_err(q(&mut c, &["LOCK.FENCE", "db", &ts]));
    assert!(e.starts_with("STALE"), "{e}");
}

#[test]
fn renewal_keeps_a_lease_alive_past_its_first_ttl() {
    let s = TestServer::start();
    let mut c = s.client();
    let t = acquire(&mut c, "kept", "w", 1_000);
    let ts = t.to_string();
    // renew to a long lease right away, then wait beyond the original ttl
    assert_eq!(
        q(&mut c, &["LOCK.RENEW", "kept", "w", &ts, "60000"]).unwrap(),
        Value::Int(60_000)
    );
    // a sentinel with the original ttl, acquired after the renewal, lapses first
    acquire(&mut c, "sentinel", "w", 1_000);
    poll_until(EVENT_TIMEOUT, "the sentinel lease to lapse", || {
        (q(&mut c, &["EXISTS", "sentinel"]).unwrap() == Value::Int(0)).then_some(())
    });
    let i = info(&mut c, "kept").expect("the renewed lock must still be held");
    assert_eq!((i.owner.as_str(), i.token), ("w", t));
}

#[test]
fn kill9_restart_keeps_every_acknowledged_lock() {
    let mut s = TestServer::start();
    let url = s.url();
    // 4 writers in parallel (group commit path), 25 grants each, all acknowledged
    let handles: Vec<_> = (0..4)
        .map(|w| {
            let url = url.clone();
            std::thread::spawn(move || {
                let client = redis::Client::open(url).unwrap();
                let mut c = client.get_connection_with_timeout(IO_TIMEOUT).unwrap();
                c.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                (0..25)
                    .map(|i| {
                        let key = format!("lock:{w}:{i}");
                        let owner = format!("owner-{w}-{i}");
                        let t = acquire(&mut c, &key, &owner, 600_000);
                        (key, owner, t)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut held: Vec<(String, String, i64)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let mut c = s.client();
    // release a few: acknowledged releases must survive too
    let released: Vec<(String, String, i64)> = held.drain(..5).collect();
    for (k, o, t) in &released {
        assert_eq!(
            q(&mut c, &["LOCK.RELEASE", k, o, &t.to_string()]).unwrap(),
            Value::Int(1)
        );
    }
    let max_old = held.iter().chain(&released).map(|x| x.2).max().unwrap();
    assert_eq!(
        q(&mut c, &["LOCK.FENCE", "resource", &max_old.to_string()]).unwrap(),
        Value::Int(max_old)
    );
    // a short lease that must still lapse after the restart
    let short = acquire(&mut c, "short", "brief", 1_500);
    assert!(short > max_old);
    drop(c);

    s.kill9();
    s.restart();

    let mut c = s.client();
    for (k, o, t) in &held {
        let i = info(&mut c, k).unwrap_or_else(|| panic!("acknowledged lock {k} lost on restart"));
        assert_eq!(
            (&i.owner, i.token),
            (o, *t),
            "lock {k} changed across restart"
        );
        assert!((1..=600_000).contains(&i.ttl_ms), "{k}: {i:?}");
    }
    for (k, _, _) in &released {
        assert_eq!(
            info(&mut c, k),
            None,
            "released lock {k} came back after restart"
        );
    }
    assert_eq!(
        q(&mut c, &["GET", "resource"]).unwrap(),
        bulk(&max_old.to_string())
    );
    let e = expect_err(q(
        &mut c,
        &["LOCK.FENCE", "resource", &(max_old - 1).to_string()],
    ));
    assert!(e.starts_with("STALE"), "{e}");
    // same-owner retry after restart still returns the original token
    let (k0, o0, t0) = &held[0];
    assert_eq!(acquire(&mut c, k0, o0, 600_000), *t0);
    // new tokens are greater than every old one
    let fresh = acquire(&mut c, "after-restart", "new", 600_000);
    assert!(
        fresh > short && fresh > max_old,
        "token {fresh} after restart <= old {short}"
    );
    // the short lease is still enforced after the restart
    poll_until(
        EVENT_TIMEOUT,
        "the short lease to lapse after restart",
        || (q(&mut c, &["GET", "short"]).unwrap() == Value::Nil).then_some(()),
    );
    drop(c);

    // and once more, to check a recovered node recovers again
    s.restart();
    let mut c = s.client();
    let i = info(&mut c, "after-restart").expect("lock granted after first restart lost");
    assert_eq!((i.owner.as_str(), i.token), ("new", fresh));
    let later = acquire(&mut c, "after-second-restart", "new", 600_000);
    assert!(
        later > fresh,
        "token {later} after second restart <= {fresh}"
    );
}

#[test]
fn token_is_the_key_version() {
    // DESIGN §2: the token is the version of the key: SET replaces the value (new
    // version), PEXPIRE changes it in place (same version).
    let s = TestServer::start();
    let mut c = s.client();
    let t = acquire(&mut c, "v", "o", 30_000);
    assert_eq!(
        q(&mut c, &["PEXPIRE", "v", "60000"]).unwrap(),
        Value::Int(1)
    );
    let i = info(&mut c, "v").unwrap();
    assert_eq!(i.token, t, "PEXPIRE must keep the version");
    assert!(i.ttl_ms > 30_000, "{i:?}");

    // someone overwrites the lock key with plain SET: a new version, a new token
    assert_eq!(
        q(&mut c, &["SET", "v", "mallory", "PX", "30000"]).unwrap(),
        Value::Okay
    );
    let i = info(&mut c, "v").unwrap();
    assert_eq!(i.owner, "mallory");
    assert!(
        i.token > t,
        "SET replaced the value; token {} must exceed {t}",
        i.token
    );
    let ts = t.to_string();
    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "v", "o", &ts]).unwrap(),
        Value::Int(0)
    );
    let e = expect_err(q(&mut c, &["LOCK.RENEW", "v", "o", &ts, "1000"]));
    assert!(e.starts_with("LOCKLOST"), "{e}");

    // even the same owner re-SETting replaces the value: the old token is void
    assert_eq!(
        q(&mut c, &["SET", "v", "o", "PX", "30000"]).unwrap(),
        Value::Okay
    );
    let i2 = info(&mut c, "v").unwrap();
    assert!(i2.token > i.token, "{i2:?} vs {i:?}");
    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "v", "o", &ts]).unwrap(),
        Value::Int(0)
    );
    assert_eq!(
        q(&mut c, &["LOCK.RELEASE", "v", "o", &i2.token.to_string()]).unwrap(),
        Value::Int(1)
    );
    // DEL frees a lock
    let t3 = acquire(&mut c, "v", "o", 30_000);
    assert!(t3 > i2.token);
    assert_eq!(q(&mut c, &["DEL", "v"]).unwrap(), Value::Int(1));
    assert_eq!(info(&mut c, "v"), None);
}

type Acked = Arc<Mutex<Vec<(String, String, i64)>>>;

/// Four writer threads granting distinct locks as fast as they can until their
/// connection fails (the server went away) or 5000 grants each; every
/// acknowledged grant is recorded.
fn spawn_writers(
    s: &TestServer,
    prefix: &str,
) -> (Vec<std::thread::JoinHandle<()>>, Acked, Arc<AtomicUsize>) {
    let acked: Acked = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let handles = (0..4)
        .map(|w| {
            let url = s.url();
            let prefix = prefix.to_string();
            let acked = acked.clone();
            let count = count.clone();
            std::thread::spawn(move || {
                let client = redis::Client::open(url).unwrap();
                let mut c = client.get_connection_with_timeout(IO_TIMEOUT).unwrap();
                c.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
                c.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
                for i in 0..5_000 {
                    let key = format!("{prefix}:{w}:{i}");
                    let owner = format!("o{w}-{i}");
                    match q(&mut c, &["LOCK.ACQUIRE", &key, &owner, "600000"]) {
                        Ok(Value::Int(t)) => {
                            acked.lock().unwrap().push((key, owner, t));
                            count.fetch_add(1, Ordering::SeqCst);
                        }
                        // a shutting-down server may refuse with an error reply
                        Err(e) if e.code().is_some() => return,
                        Ok(other) => panic!("LOCK.ACQUIRE {key}: {other:?}"),
                        Err(_) => return, // connection gone
                    }
                }
            })
        })
        .collect();
    (handles, acked, count)
}

/// Every recorded grant is present with its owner and token; returns the max token.
fn check_acked(c: &mut redis::Connection, acked: &[(String, String, i64)]) -> i64 {
    let mut max_old = 0;
    for (k, o, t) in acked {
        let i = info(c, k).unwrap_or_else(|| panic!("acknowledged grant {k} (token {t}) lost"));
        assert_eq!((&i.owner, i.token), (o, *t), "{k}");
        max_old = max_old.max(*t);
    }
    max_old
}

#[test]
fn kill9_during_writes_loses_nothing_acknowledged() {
    let mut s = TestServer::start();
    let (handles, acked, count) = spawn_writers(&s, "inflight");
    poll_until(Duration::from_secs(60), "200 acknowledged grants", || {
        (count.load(Ordering::SeqCst) >= 200).then_some(())
    });
    s.kill9();
    for h in handles {
        h.join().expect("writer thread panicked");
    }
    let acked = acked.lock().unwrap().clone();
    s.restart();
    let mut c = s.client();
    let max_old = check_acked(&mut c, &acked);
    let fresh = acquire(&mut c, "after", "x", 10_000);
    assert!(
        fresh > max_old,
        "token {fresh} after restart <= acknowledged {max_old}"
    );
}

#[test]
fn sigterm_under_load_shuts_down_cleanly_and_keeps_acknowledged() {
    let mut s = TestServer::start();
    let (handles, acked, count) = spawn_writers(&s, "busy");
    poll_until(Duration::from_secs(60), "200 acknowledged grants", || {
        (count.load(Ordering::SeqCst) >= 200).then_some(())
    });
    let status = s.terminate();
    for h in handles {
        h.join().expect("writer thread panicked");
    }
    let tail: String = {
        let l = s.logs();
        l.lines()
            .rev()
            .take(15)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        status.success(),
        "SIGTERM with busy clients must shut down cleanly (exit 0), got {status}; log tail:\n{tail}"
    );
    let acked = acked.lock().unwrap().clone();
    s.restart();
    let mut c = s.client();
    let max_old = check_acked(&mut c, &acked);
    let fresh = acquire(&mut c, "after", "x", 10_000);
    assert!(fresh > max_old);
}

/// Recovery goes through a snapshot AND the log after it: the locks granted first are
/// covered by a snapshot and gone from the log (purged behind it), so only the
/// snapshot can bring them back; a few grants after the last snapshot are only in
/// the log, so only replaying it can bring them back. Both must be there after each
/// of two kill -9 restarts, with their tokens.
#[test]
fn restart_recovers_from_snapshots_and_log_suffix() {
    const EVERY: u64 = 100;
    const SUFFIX_WRITES: u64 = 5; // DEL filler + 4 grants
    let mut s = TestServer::start_with_env(&[("RAFTLOCK_SNAPSHOT_LOGS", "100")]);
    let mut c = s.client();
    let mut expect: Vec<(String, String, i64)> = Vec::new();
    for batch in 0..15 {
        let mut p = redis::pipe();
        for i in 0..100 {
            p.cmd("LOCK.ACQUIRE")
                .arg(format!("snap:{batch}:{i}"))
                .arg(format!("o{batch}-{i}"))
                .arg(600_000);
        }
        let out: Vec<Value> = p.query(&mut c).unwrap();
        for (i, v) in out.iter().enumerate() {
            let t = int(v);
            expect.push((format!("snap:{batch}:{i}"), format!("o{batch}-{i}"), t));
        }
    }
    // release every third one
    let mut released = Vec::new();
    let mut p = redis::pipe();
    for (n, (k, o, t)) in expect.iter().enumerate() {
        if n % 3 == 0 {
            p.cmd("LOCK.RELEASE").arg(k).arg(o).arg(*t);
            released.push(k.clone());
        }
    }
    let out: Vec<Value> = p.query(&mut c).unwrap();
    assert!(out.iter().all(|v| *v == Value::Int(1)), "releases: {out:?}");
    expect = expect
        .into_iter()
        .enumerate()
        .filter(|(n, _)| n % 3 != 0)
        .map(|(_, x)| x)
        .collect();
    // Every grant and release above was applied before its reply.
    let base_at = s.raft_info().num("applied_index");

    // A snapshot far enough past them that the log behind it no longer holds them;
    // then, right after a snapshot (so the next one is EVERY entries away), the suffix.
    let mut snap = s.write_until_snapshot(base_at + SNAPSHOT_PURGE_LAG, EVERY, "filler");
    while snap.num("applied_index") - snap.num("snapshot_index") + SUFFIX_WRITES >= EVERY {
        snap = s.write_until_snapshot(snap.num("snapshot_index") + 1, EVERY, "filler");
    }
    let suffix_from = snap.num("applied_index") + 1;
    assert_eq!(int(&q(&mut c, &["DEL", "filler"]).unwrap()), 1);
    let mut suffix = Vec::new();
    for i in 0..SUFFIX_WRITES - 1 {
        let (k, o) = (format!("suffix:{i}"), format!("s{i}"));
        let t = acquire(&mut c, &k, &o, 600_000);
        suffix.push((k, o, t));
    }
    let at_kill = s.raft_info();
    let suffix_to = at_kill.num("applied_index");
    assert!(
        suffix_to >= suffix_from + SUFFIX_WRITES - 1 && at_kill.num("snapshot_index") < suffix_from,
        "the suffix (entries {suffix_from}..={suffix_to}) must be only in the log, after the last snapshot:\n{}",
        at_kill.raw
    );
    assert!(
        suffix_to - at_kill.num("snapshot_index") < EVERY,
        "a snapshot build may be in flight at the kill:\n{}",
        at_kill.raw
    );
    s.wait_purged_on_disk(base_at);
    let max_old = expect.iter().chain(&suffix).map(|x| x.2).max().unwrap();
    expect.extend(suffix.iter().cloned());
    drop(c);

    for round in 0..2 {
        s.kill9();
        let (first, last) = s.log_on_disk().expect("the log on disk is empty");
        assert!(
            first > base_at,
            "round {round}: the log on disk still holds entry {base_at} (it spans {first}..={last}; snapshot at {}): \
             a restart could replay the first grants from the log instead of the snapshot",
            at_kill.num("snapshot_index")
        );
        assert!(
            last >= suffix_to,
            "round {round}: the log on disk ends at {last}, before the suffix's last entry {suffix_to}"
        );
        s.restart();
        let after = s.raft_info();
        assert!(
            after.num("snapshot_index") >= at_kill.num("snapshot_index"),
            "round {round}: the restarted node reports snapshot_index {}, below the {} on disk at the kill:\n{}",
            after.num("snapshot_index"),
            at_kill.num("snapshot_index"),
            after.raw
        );
        let mut c = s.client();
        for (k, o, t) in &expect {
            let i = info(&mut c, k).unwrap_or_else(|| panic!("round {round}: lock {k} lost"));
            assert_eq!((&i.owner, i.token), (o, *t), "round {round}: {k}");
        }
        for k in &released {
            assert_eq!(
                info(&mut c, k),
                None,
                "round {round}: released {k} came back"
            );
        }
        assert_eq!(q(&mut c, &["EXISTS", "filler"]).unwrap(), Value::Int(0), "round {round}: the DEL in the suffix");
        let n = int(&q(&mut c, &["DBSIZE"]).unwrap()) as usize;
        assert_eq!(n, expect.len() + round, "round {round}: DBSIZE");
        let t = acquire(&mut c, &format!("new{round}"), "x", 600_000);
        assert!(t > max_old, "round {round}: token {t} <= {max_old}");
    }
}

#[test]
fn sigterm_shuts_down_cleanly_and_keeps_locks() {
    let mut s = TestServer::start();
    let mut c = s.client();
    let t = acquire(&mut c, "graceful", "g", 600_000);
    drop(c);
    let status = s.terminate();
    assert!(
        status.success(),
        "SIGTERM must shut down cleanly (exit 0), got {status}"
    );
    s.restart();
    let mut c = s.client();
    let i = info(&mut c, "graceful").expect("lock lost across a clean shutdown");
    assert_eq!((i.owner.as_str(), i.token), ("g", t));
}

/// A snapshot of a big keyspace is built while renewals go on (issue 12).
/// The keyspace is cloned in O(1) under the state lock and encoded and
/// written on a blocking thread, to a file of its own, so neither applying
/// nor the runtime waits for it. Before, the whole keyspace was encoded under
/// the lock: with this many keys every write stopped for the whole encoding.
/// Reports the slowest renewals it saw; the bound is generous (a lease of a
/// few seconds must survive a snapshot), not a race.
#[test]
fn renewals_keep_flowing_while_a_big_keyspace_is_snapshotted() {
    const KEYS: usize = 1_200_000;
    const PER_MSET: usize = 1_000;
    const EVERY: u64 = 400;
    const BOUND: Duration = Duration::from_millis(500);
    let s = TestServer::start_with_env(&[("RAFTLOCK_SNAPSHOT_LOGS", &EVERY.to_string())]);
    let mut c = s.client();
    let value = "v".repeat(40);
    for chunk in 0..KEYS / PER_MSET {
        let mut cmd = redis::cmd("MSET");
        for i in 0..PER_MSET {
            cmd.arg(format!("big:{chunk}:{i}")).arg(&value);
        }
        cmd.query::<()>(&mut c).expect("MSET");
    }
    let filled_at = s.raft_info().num("applied_index");
    let token = acquire(&mut c, "renewed", "r", 60_000).to_string();
    // Renew until a snapshot taken after the fill has been built and reported
    // (so one covering every key was built while renewals ran), and then
    // until the one after it.
    let mut slowest: Vec<Duration> = Vec::new();
    let mut renewals = 0u64;
    let mut snapshots_seen = 0;
    let mut last_snapshot = s.raft_info().num("snapshot_index");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while snapshots_seen < 2 {
        assert!(std::time::Instant::now() < deadline, "no two snapshots after the fill within 120 s ({renewals} renewals)");
        let started = std::time::Instant::now();
        assert_eq!(q(&mut c, &["LOCK.RENEW", "renewed", "r", &token, "60000"]).unwrap(), Value::Int(60_000));
        slowest.push(started.elapsed());
        renewals += 1;
        if renewals % 50 == 0 {
            let now = s.raft_info().num("snapshot_index");
            if now > last_snapshot && now > filled_at {
                snapshots_seen += 1;
            }
            last_snapshot = now;
        }
    }
    slowest.sort_unstable_by(|a, b| b.cmp(a));
    slowest.truncate(5);
    eprintln!("{KEYS} keys; {renewals} renewals across two snapshots; slowest: {slowest:?}");
    assert!(
        slowest[0] < BOUND,
        "a renewal took {:?} while a snapshot of {KEYS} keys was built (slowest five: {slowest:?})",
        slowest[0]
    );
}

/// `SET piped:<p>:<i> value` for `pipelines` pipelines of `per_pipeline`
/// commands each: a node puts each pipeline in one request, so a few log
/// entries hold them all.
fn set_pipelined(c: &mut redis::Connection, pipelines: usize, per_pipeline: usize, value: &str) {
    for p in 0..pipelines {
        let mut pipe = redis::pipe();
        for i in 0..per_pipeline {
            pipe.cmd("SET").arg(format!("piped:{p}:{i}")).arg(value).ignore();
        }
        pipe.query::<()>(c).expect("pipelined SETs");
    }
}

/// One log entry may hold a thousand commands, each a pipeline of any
/// length: counting entries alone (`--snapshot-logs`), a restart could have
/// millions of commands to replay (25 s for 5 M pipelined `SET`s on 2
/// vCPUs). `--snapshot-log-bytes` counts the bytes of the commands applied
/// too. Here a few thousand pipelined writes, far fewer than
/// `--snapshot-logs` even one per entry, hold about three times the byte
/// limit: they must bring a snapshot, which a restart then starts from.
#[test]
fn a_log_of_a_few_big_entries_is_snapshotted_by_its_bytes() {
    const LIMIT: u64 = 256 * 1024;
    const PIPELINES: usize = 8;
    const PER_PIPELINE: usize = 500;
    let mut s = TestServer::start_with_env(&[
        ("RAFTLOCK_SNAPSHOT_LOGS", "100000"),
        ("RAFTLOCK_SNAPSHOT_LOG_BYTES", &LIMIT.to_string()),
    ]);
    let mut c = s.client();
    let before = s.raft_info();
    assert_eq!(before.num("snapshot_index"), 0, "a snapshot before any write:\n{}", before.raw);
    let value = "v".repeat(150);
    set_pipelined(&mut c, PIPELINES, PER_PIPELINE, &value);
    let written = s.raft_info();
    let entries = written.num("last_log_index") - before.num("last_log_index");
    eprintln!("{} pipelined SETs in {entries} log entries", PIPELINES * PER_PIPELINE);
    let snapshot = poll_until(EVENT_TIMEOUT, "a snapshot once the log holds 3x --snapshot-log-bytes", || {
        let info = s.raft_info();
        (info.num("snapshot_index") > before.num("last_log_index")).then_some(info)
    });
    s.kill9();
    s.restart();
    let after = s.raft_info();
    assert!(
        after.num("snapshot_index") >= snapshot.num("snapshot_index"),
        "the restarted node reports snapshot_index {} below the {} taken before:\n{}",
        after.num("snapshot_index"),
        snapshot.num("snapshot_index"),
        after.raw
    );
    let mut c = s.client();
    assert_eq!(q(&mut c, &["DBSIZE"]).unwrap(), Value::Int((PIPELINES * PER_PIPELINE) as i64));
    assert_eq!(q(&mut c, &["GET", "piped:7:499"]).unwrap(), Value::BulkString(value.into_bytes()));
}

/// `--snapshot-log-bytes 0` turns the byte count off: the same log that
/// brings a snapshot above (three times a 256 KiB limit) brings none, and
/// `--snapshot-logs` alone decides.
#[test]
fn snapshot_log_bytes_zero_leaves_snapshots_to_the_entry_count() {
    const PIPELINES: usize = 8;
    const PER_PIPELINE: usize = 500;
    let s = TestServer::start_with_env(&[("RAFTLOCK_SNAPSHOT_LOGS", "100000"), ("RAFTLOCK_SNAPSHOT_LOG_BYTES", "0")]);
    let mut c = s.client();
    let value = "v".repeat(150);
    set_pipelined(&mut c, PIPELINES, PER_PIPELINE, &value);
    // The trigger looks every 100 ms; with a limit it fires within one look.
    std::thread::sleep(Duration::from_millis(1500));
    let info = s.raft_info();
    assert_eq!(info.num("snapshot_index"), 0, "a snapshot with the byte count off:\n{}", info.raw);
    assert_eq!(q(&mut c, &["DBSIZE"]).unwrap(), Value::Int((PIPELINES * PER_PIPELINE) as i64));
}
