//! Rust clients against raftlock, unchanged:
//!
//! - the `redis` crate as applications use it for locks: `SET key token NX PX ms`
//!   through its typed API, and `redis::Script` (EVALSHA, EVAL on NOSCRIPT) to
//!   extend and release only while still the owner; in RESP2 and in RESP3;
//! - `rslock` (a Redlock crate): lock, contention, extend, is_freed, unlock,
//!   blocking `acquire`, and `using` with automatic extension.
//!
//! A case passes only if the library reports success AND a plain RESP2 client on a
//! raw socket (`Plain`, independent of both crates) reads back the state the
//! library believes in. Each case prints
//! `RESULT<TAB>library<TAB>case<TAB>PASS|FAIL<TAB>detail` for tests/interop/run.sh.
//!
//!     raftlock-interop --port P --check-port C [--prefix X]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redis::{Commands, ExistenceCheck, SetExpiry, SetOptions};

const TTL_MS: u64 = 10_000;

/// `(name, version)` of the crates we link, read from this project's Cargo.lock.
fn locked_version(name: &str) -> String {
    let lock = include_str!("../Cargo.lock");
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l == format!("name = \"{name}\"") {
            if let Some(v) = lines.next().and_then(|v| v.strip_prefix("version = \"")) {
                return v.trim_end_matches('"').to_string();
            }
        }
    }
    "?".into()
}

// ---------------------------------------------------------------------------
// The plain checker

#[derive(Debug, PartialEq)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

struct Plain {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Plain {
    fn connect(port: u16) -> Result<Plain, String> {
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("plain connect: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        s.set_write_timeout(Some(Duration::from_secs(10))).ok();
        let w = s.try_clone().map_err(|e| e.to_string())?;
        Ok(Plain { r: BufReader::new(s), w })
    }

    fn line(&mut self) -> Result<String, String> {
        let mut l = String::new();
        self.r.read_line(&mut l).map_err(|e| format!("plain read: {e}"))?;
        if !l.ends_with("\r\n") {
            return Err("plain: connection closed".into());
        }
        l.truncate(l.len() - 2);
        Ok(l)
    }

    fn reply(&mut self) -> Result<Reply, String> {
        let l = self.line()?;
        let (kind, rest) = l.split_at(1);
        let num = || rest.parse::<i64>().map_err(|e| format!("plain: bad number {rest:?}: {e}"));
        Ok(match kind {
            "+" => Reply::Status(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(num()?),
            "$" => {
                let n = num()?;
                if n < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut b = vec![0u8; n as usize + 2];
                    self.r.read_exact(&mut b).map_err(|e| format!("plain read: {e}"))?;
                    b.truncate(n as usize);
                    Reply::Bulk(Some(b))
                }
            }
            "*" => {
                let n = num()?;
                if n < 0 {
                    Reply::Array(None)
                } else {
                    let mut v = Vec::new();
                    for _ in 0..n {
                        v.push(self.reply()?);
                    }
                    Reply::Array(Some(v))
                }
            }
            _ => return Err(format!("plain: unexpected reply {l:?}")),
        })
    }

    /// Sends a command; an error reply is returned as `Reply::Error`.
    fn raw(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&out).map_err(|e| format!("plain write: {e}"))?;
        self.reply()
    }

    fn cmd(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        match self.raw(args)? {
            Reply::Error(e) => Err(format!("server error to {}: {e}", String::from_utf8_lossy(args[0]))),
            r => Ok(r),
        }
    }

    fn int(&mut self, args: &[&[u8]]) -> Result<i64, String> {
        match self.cmd(args)? {
            Reply::Int(n) => Ok(n),
            r => Err(format!("{} replied {r:?}", String::from_utf8_lossy(args[0]))),
        }
    }

    fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, String> {
        match self.cmd(&[b"GET", key.as_bytes()])? {
            Reply::Bulk(b) => Ok(b),
            r => Err(format!("GET replied {r:?}")),
        }
    }

    /// `key` holds exactly `owner`, with a PTTL within (ttl - 2000, ttl].
    fn expect_owner(&mut self, key: &str, owner: &[u8], ttl_ms: u64) -> Result<(), String> {
        let got = self.get(key)?;
        if got.as_deref() != Some(owner) {
            return Err(format!(
                "server: GET {key} = {:?}, library believes the owner is {:?}",
                got.map(|g| String::from_utf8_lossy(&g).into_owned()),
                String::from_utf8_lossy(owner)
            ));
        }
        let pttl = self.int(&[b"PTTL", key.as_bytes()])?;
        if !(pttl > ttl_ms as i64 - 2000 && pttl <= ttl_ms as i64) {
            return Err(format!("server: PTTL {key} = {pttl}, expected about {ttl_ms} ms"));
        }
        Ok(())
    }

    /// LOCK.INFO: (owner, token), or None if the lock is free.
    fn lock_info(&mut self, key: &str) -> Result<Option<(Vec<u8>, i64)>, String> {
        match self.cmd(&[b"LOCK.INFO", key.as_bytes()])? {
            Reply::Bulk(None) | Reply::Array(None) => Ok(None),
            Reply::Array(Some(v)) => match v.as_slice() {
                [Reply::Bulk(Some(k1)), Reply::Bulk(Some(owner)), Reply::Bulk(Some(k2)), Reply::Int(token), Reply::Bulk(Some(k3)), Reply::Int(_), Reply::Bulk(Some(k4)), Reply::Int(_), Reply::Bulk(Some(k5)), _]
                    if k1 == b"owner" && k2 == b"token" && k3 == b"ttl-ms" && k4 == b"waiters" && k5 == b"next-waiter" =>
                {
                    Ok(Some((owner.clone(), *token)))
                }
                _ => Err(format!("server: LOCK.INFO {key} = {v:?}")),
            },
            r => Err(format!("server: LOCK.INFO {key} = {r:?}")),
        }
    }

    /// LOCK.INFO shows `owner`; returns its token.
    fn expect_token_owner(&mut self, key: &str, owner: &[u8]) -> Result<i64, String> {
        match self.lock_info(key)? {
            Some((o, t)) if o == owner && t > 0 => Ok(t),
            other => Err(format!(
                "server: LOCK.INFO {key} = {other:?}, expected owner {:?}",
                String::from_utf8_lossy(owner)
            )),
        }
    }

    /// LOCK.FENCE resource token: honoured if token >= highest, else exactly STALE.
    fn expect_fence(&mut self, resource: &str, token: i64, highest: i64) -> Result<(), String> {
        let r = self.raw(&[b"LOCK.FENCE", resource.as_bytes(), token.to_string().as_bytes()])?;
        let want = if token >= highest { Reply::Int(token) } else { Reply::Error(stale_text(token, highest)) };
        ensure(r == want, || format!("server: LOCK.FENCE {resource} {token} = {r:?}, expected {want:?}"))
    }

    fn expect_gone(&mut self, key: &str) -> Result<(), String> {
        let n = self.int(&[b"EXISTS", key.as_bytes()])?;
        if n != 0 {
            return Err(format!("server: EXISTS {key} = {n} after release, expected 0"));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Harness

struct Harness {
    failed: u32,
}

impl Harness {
    fn report(&mut self, library: &str, name: &str, t0: Instant, r: Result<(), String>) -> bool {
        let took = format!("{:.1}s", t0.elapsed().as_secs_f64());
        match r {
            Ok(()) => {
                println!("RESULT\t{library}\t{name}\tPASS\t{took}");
                true
            }
            Err(e) => {
                self.failed += 1;
                let e: String = e.split_whitespace().collect::<Vec<_>>().join(" ");
                let e: String = e.chars().take(400).collect();
                println!("RESULT\t{library}\t{name}\tFAIL\t{took} {e}");
                false
            }
        }
    }
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// The exact error (without the leading '-') for a fence below the highest token.
fn stale_text(token: i64, highest: i64) -> String {
    format!("STALE token {token} is lower than {highest}, the highest honored for this resource")
}

/// (owner, token) from a LOCK.INFO reply as the redis crate returns it: a flat
/// array (RESP2) or a map (RESP3).
fn info_token(v: &redis::Value) -> Result<(Vec<u8>, i64), String> {
    use redis::Value as V;
    let pairs: Vec<(&V, &V)> = match v {
        V::Array(a) if a.len() % 2 == 0 => a.chunks(2).map(|c| (&c[0], &c[1])).collect(),
        V::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        other => return Err(format!("LOCK.INFO replied {other:?}")),
    };
    let text = |v: &V| match v {
        V::BulkString(b) => Some(b.clone()),
        V::SimpleString(s) => Some(s.as_bytes().to_vec()),
        _ => None,
    };
    let mut owner = None;
    let mut token = None;
    let mut names = Vec::new();
    for (k, val) in pairs {
        let k = text(k).ok_or_else(|| format!("LOCK.INFO key {k:?}"))?;
        match (k.as_slice(), val) {
            (b"owner", v) => owner = text(v),
            (b"token", V::Int(t)) => token = Some(*t),
            _ => {}
        }
        names.push(String::from_utf8_lossy(&k).into_owned());
    }
    ensure(names == ["owner", "token", "ttl-ms", "waiters", "next-waiter"], || format!("LOCK.INFO replied {v:?}"))?;
    match (owner, token) {
        (Some(o), Some(t)) if t > 0 => Ok((o, t)),
        _ => Err(format!("LOCK.INFO replied {v:?}")),
    }
}

/// LOCK.FENCE through the redis crate: Ok(token) or Err(the server's error text).
fn fence(con: &mut redis::Connection, resource: &str, token: i64) -> Result<i64, String> {
    redis::cmd("LOCK.FENCE").arg(resource).arg(token).query::<i64>(con).map_err(|e| match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => format!("<not a server error: {e}>"),
    })
}

fn lock_info_via(con: &mut redis::Connection, key: &str) -> Result<(Vec<u8>, i64), String> {
    let v: redis::Value = redis::cmd("LOCK.INFO").arg(key).query(con).map_err(|e| format!("LOCK.INFO: {e}"))?;
    info_token(&v)
}

fn unique(prefix: &str, name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}:{name}:{:08x}{:04x}", nanos, std::process::id() & 0xffff)
}

fn token() -> String {
    // Unique enough for a test: time, pid and a counter.
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    format!("{}-{}-{}", t.as_nanos(), std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

const UNLOCK: &str = r#"
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("del", KEYS[1])
else
  return 0
end"#;

const EXTEND: &str = r#"
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("pexpire", KEYS[1], ARGV[2])
else
  return 0
end"#;

// ---------------------------------------------------------------------------
// The `redis` crate

fn connect(url: &str) -> Result<redis::Connection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    con.set_read_timeout(Some(Duration::from_secs(15))).map_err(|e| e.to_string())?;
    con.set_write_timeout(Some(Duration::from_secs(15))).map_err(|e| e.to_string())?;
    Ok(con)
}

fn redis_rs_cases(h: &mut Harness, port: u16, check_port: u16, prefix: &str, resp: u8) {
    let library = format!("redis-rs {}", locked_version("redis"));
    let tag = format!("resp{resp}");
    let url = if resp == 3 {
        format!("redis://127.0.0.1:{port}/?protocol=resp3")
    } else {
        format!("redis://127.0.0.1:{port}/")
    };
    let mut plain = match Plain::connect(check_port) {
        Ok(p) => p,
        Err(e) => {
            h.report(&library, &format!("{tag} connect"), Instant::now(), Err(e));
            return;
        }
    };
    let opts = |ms: u64| {
        SetOptions::default()
            .conditional_set(ExistenceCheck::NX)
            .with_expiration(SetExpiry::PX(ms))
    };

    let t0 = Instant::now();
    let mut con = match connect(&url) {
        Ok(c) => c,
        Err(e) => {
            h.report(&library, &format!("{tag} connect"), t0, Err(e));
            return;
        }
    };
    let r = (|| {
        let pong: String = redis::cmd("PING").query(&mut con).map_err(|e| e.to_string())?;
        ensure(pong == "PONG", || format!("PING replied {pong:?}"))?;
        let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut con).map_err(|e| e.to_string())?;
        ensure(info.contains(&format!("resp={resp}")), || format!("CLIENT INFO: {info}"))
    })();
    h.report(&library, &format!("{tag} connect"), t0, r);

    let key = unique(prefix, &format!("redis-rs-{tag}"));
    let tok = token();

    let t0 = Instant::now();
    let r = (|| {
        let got: Option<String> = con.set_options(&key, &tok, opts(TTL_MS)).map_err(|e| e.to_string())?;
        ensure(got.as_deref() == Some("OK"), || format!("SET NX PX replied {got:?}"))?;
        plain.expect_owner(&key, tok.as_bytes(), TTL_MS)?;
        let again: Option<String> = con.set_options(&key, token(), opts(TTL_MS)).map_err(|e| e.to_string())?;
        ensure(again.is_none(), || format!("a second SET NX PX on a held lock replied {again:?}"))?;
        plain.expect_owner(&key, tok.as_bytes(), TTL_MS)
    })();
    let acquired = h.report(&library, &format!("{tag} acquire (SET NX PX)"), t0, r);

    let t0 = Instant::now();
    let r = (|| {
        ensure(acquired, || "no lock: acquire failed".into())?;
        let script = redis::Script::new(EXTEND);
        let n: i64 = script.key(&key).arg(&tok).arg(20_000).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 1, || format!("extend script replied {n}"))?;
        plain.expect_owner(&key, tok.as_bytes(), 20_000)?;
        let n: i64 = script.key(&key).arg(token()).arg(60_000).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 0, || format!("extend by a non-owner replied {n}"))?;
        plain.expect_owner(&key, tok.as_bytes(), 20_000)
    })();
    h.report(&library, &format!("{tag} extend (Script)"), t0, r);

    let t0 = Instant::now();
    let r = (|| {
        ensure(acquired, || "no lock: acquire failed".into())?;
        let script = redis::Script::new(UNLOCK);
        let n: i64 = script.key(&key).arg(token()).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 0, || format!("release by a non-owner replied {n}"))?;
        let n: i64 = script.key(&key).arg(&tok).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 1, || format!("release replied {n}"))?;
        plain.expect_gone(&key)?;
        let n: i64 = script.key(&key).arg(&tok).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 0, || format!("a second release replied {n}"))
    })();
    h.report(&library, &format!("{tag} release (Script)"), t0, r);

    let t0 = Instant::now();
    let r = (|| {
        let key = unique(prefix, &format!("redis-rs-wait-{tag}"));
        let holder = token();
        let got: Option<String> = con.set_options(&key, &holder, opts(TTL_MS)).map_err(|e| e.to_string())?;
        ensure(got.is_some(), || "holder could not acquire".into())?;
        let key2 = key.clone();
        let url2 = url.clone();
        // The waiter gives up after 8 s, before the holder's 10 s lease ends: only
        // the release can let it in.
        let waiter = std::thread::spawn(move || -> Result<(String, Instant), String> {
            let mut con2 = connect(&url2)?;
            let me = token();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(8) {
                let got: Option<String> = con2
                    .set_options(&key2, &me, opts(TTL_MS))
                    .map_err(|e| e.to_string())?;
                if got.is_some() {
                    return Ok((me, Instant::now()));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err("waiter never acquired within its 8 s retry loop".into())
        });
        std::thread::sleep(Duration::from_secs(1));
        let released_at = Instant::now();
        let n: i64 = redis::Script::new(UNLOCK).key(&key).arg(&holder).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 1, || format!("holder release replied {n}"))?;
        let (me, acquired_at) = waiter.join().map_err(|_| "waiter panicked".to_string())??;
        ensure(acquired_at >= released_at, || {
            format!("waiter acquired {:?} before the release", released_at - acquired_at)
        })?;
        plain.expect_owner(&key, me.as_bytes(), TTL_MS)?;
        let n: i64 = redis::Script::new(UNLOCK).key(&key).arg(&me).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 1, || format!("waiter release replied {n}"))?;
        plain.expect_gone(&key)
    })();
    h.report(&library, &format!("{tag} wait for release (retry loop)"), t0, r);

    // A holder that crashes (its connection gone, never releasing): another client
    // retrying SET NX PX gets the lock once the 1.5 s lease has run out, not before;
    // the crashed holder's late release script does not touch the new lock.
    let t0 = Instant::now();
    let r = (|| {
        let key = unique(prefix, &format!("redis-rs-crash-{tag}"));
        let dead = token();
        let since = Instant::now();
        {
            let mut hc = connect(&url)?;
            let got: Option<String> = hc.set_options(&key, &dead, opts(1500)).map_err(|e| e.to_string())?;
            ensure(got.as_deref() == Some("OK"), || format!("holder SET NX PX replied {got:?}"))?;
        }
        let old_token = plain.expect_token_owner(&key, dead.as_bytes())?;
        let me = token();
        let acquired_at = loop {
            let got: Option<String> = con.set_options(&key, &me, opts(TTL_MS)).map_err(|e| e.to_string())?;
            if got.is_some() {
                break Instant::now();
            }
            ensure(since.elapsed() < Duration::from_secs(30), || "no one got the lock within 30 s of a 1.5 s lease".into())?;
            std::thread::sleep(Duration::from_millis(50));
        };
        ensure(acquired_at + Duration::from_millis(5) >= since + Duration::from_millis(1500), || {
            format!("the lock was taken {:?} after the crashed holder's 1.5 s lease was requested", acquired_at - since)
        })?;
        plain.expect_owner(&key, me.as_bytes(), TTL_MS)?;
        let new_token = plain.expect_token_owner(&key, me.as_bytes())?;
        ensure(new_token > old_token, || format!("token after the expiry {new_token}, not above the crashed holder's {old_token}"))?;
        let n: i64 = redis::Script::new(UNLOCK).key(&key).arg(&dead).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 0, || format!("the crashed holder's release replied {n}"))?;
        plain.expect_owner(&key, me.as_bytes(), TTL_MS)?;
        let n: i64 = redis::Script::new(UNLOCK).key(&key).arg(&me).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 1, || format!("release replied {n}"))?;
        plain.expect_gone(&key)
    })();
    h.report(&library, &format!("{tag} crashed holder expires"), t0, r);

    // Tokens from LOCK.INFO through the redis crate (a flat array in RESP2, a map in
    // RESP3); the resource honours each holder's token, then refuses the earlier,
    // lower one with the exact STALE error.
    let t0 = Instant::now();
    let r = (|| {
        let key = unique(prefix, &format!("redis-rs-fence-{tag}"));
        let resource = unique(prefix, &format!("redis-rs-resource-{tag}"));
        let first = token();
        let got: Option<String> = con.set_options(&key, &first, opts(TTL_MS)).map_err(|e| e.to_string())?;
        ensure(got.is_some(), || "first holder could not acquire".into())?;
        let (owner, t1) = lock_info_via(&mut con, &key)?;
        ensure(owner == first.as_bytes(), || format!("LOCK.INFO owner {:?}", String::from_utf8_lossy(&owner)))?;
        ensure(plain.expect_token_owner(&key, first.as_bytes())? == t1, || "plain LOCK.INFO disagrees on the token".into())?;
        ensure(fence(&mut con, &resource, t1) == Ok(t1), || format!("LOCK.FENCE with the holder's token {t1} refused"))?;
        let n: i64 = redis::Script::new(UNLOCK).key(&key).arg(&first).invoke(&mut con).map_err(|e| e.to_string())?;
        ensure(n == 1, || format!("first release replied {n}"))?;
        let mut con2 = connect(&url)?;
        let second = token();
        let got: Option<String> = con2.set_options(&key, &second, opts(TTL_MS)).map_err(|e| e.to_string())?;
        ensure(got.is_some(), || "second holder could not acquire".into())?;
        let (owner, t2) = lock_info_via(&mut con2, &key)?;
        ensure(owner == second.as_bytes() && t2 > t1, || format!("second holder: token {t2} (first token {t1})"))?;
        ensure(fence(&mut con2, &resource, t2) == Ok(t2), || format!("LOCK.FENCE with the second holder's token {t2} refused"))?;
        let got = fence(&mut con, &resource, t1);
        ensure(got == Err(stale_text(t1, t2)), || {
            format!("LOCK.FENCE with the first holder's lower token gave {got:?}, expected -{}", stale_text(t1, t2))
        })?;
        plain.expect_fence(&resource, t1, t2)?;
        plain.expect_fence(&resource, t2, t2)?;
        let n: i64 = redis::Script::new(UNLOCK).key(&key).arg(&second).invoke(&mut con2).map_err(|e| e.to_string())?;
        ensure(n == 1, || format!("second release replied {n}"))?;
        plain.expect_gone(&key)
    })();
    h.report(&library, &format!("{tag} fenced write"), t0, r);
}

// ---------------------------------------------------------------------------
// rslock

async fn rslock_cases(h: &mut Harness, port: u16, check_port: u16, prefix: &str) {
    use rslock::{LockError, LockManager};
    let library = format!("rslock {}", locked_version("rslock"));
    let url = format!("redis://127.0.0.1:{port}/");
    let mut plain = match Plain::connect(check_port) {
        Ok(p) => p,
        Err(e) => {
            h.report(&library, "lock", Instant::now(), Err(e));
            return;
        }
    };
    let rl = LockManager::new(vec![url.clone()]);
    let ttl = Duration::from_millis(TTL_MS);
    let key = unique(prefix, "rslock");
    let bounded = |d: u64| Duration::from_secs(d);

    let t0 = Instant::now();
    let mut held = None;
    let r = async {
        let lock = tokio::time::timeout(bounded(10), rl.lock(key.as_str(), ttl))
            .await
            .map_err(|_| "lock() timed out".to_string())?
            .map_err(|e| format!("lock(): {e}"))?;
        ensure(lock.validity_time > (TTL_MS as usize) - 1000, || format!("validity_time {}", lock.validity_time))?;
        plain.expect_owner(&key, &lock.val, TTL_MS)?;
        held = Some(lock);
        Ok(())
    }
    .await;
    h.report(&library, "lock", t0, r);

    let t0 = Instant::now();
    let r = async {
        let lock = held.as_ref().ok_or("no lock: lock() failed")?;
        let other = LockManager::new(vec![url.clone()]);
        match tokio::time::timeout(bounded(10), other.lock(key.as_str(), ttl)).await {
            Err(_) => return Err("second lock() timed out".into()),
            Ok(Ok(_)) => return Err("a second LockManager locked a held lock".into()),
            Ok(Err(LockError::Unavailable)) => {}
            Ok(Err(e)) => return Err(format!("second lock() failed with {e}, expected Unavailable")),
        }
        plain.expect_owner(&key, &lock.val, TTL_MS)
    }
    .await;
    h.report(&library, "contention", t0, r);

    let t0 = Instant::now();
    let r = async {
        let lock = held.as_ref().ok_or("no lock: lock() failed")?;
        let ext = rl.extend(lock, Duration::from_millis(20_000)).await.map_err(|e| format!("extend(): {e}"))?;
        ensure(ext.val == lock.val, || "extend() changed the value".into())?;
        plain.expect_owner(&key, &lock.val, 20_000)?;
        match rl.is_freed(lock).await {
            Ok(false) => Ok(()),
            other => Err(format!("is_freed() of a held lock = {other:?}")),
        }
    }
    .await;
    h.report(&library, "extend", t0, r);

    let t0 = Instant::now();
    let r = async {
        let lock = held.take().ok_or("no lock: lock() failed")?;
        rl.unlock(&lock).await;
        plain.expect_gone(&key)?;
        match rl.is_freed(&lock).await {
            Err(LockError::RedisKeyNotFound) => {}
            other => return Err(format!("is_freed() after unlock = {other:?}")),
        }
        match rl.extend(&lock, ttl).await {
            Err(LockError::Unavailable) => Ok(()),
            other => Err(format!("extend() after unlock = {:?}", other.map(|l| l.val))),
        }
    }
    .await;
    h.report(&library, "unlock", t0, r);

    let t0 = Instant::now();
    let r = async {
        let key = unique(prefix, "rslock-acquire");
        let holder = rl.lock(key.as_str(), ttl).await.map_err(|e| format!("holder lock(): {e}"))?;
        let rl2 = LockManager::new(vec![url.clone()]);
        let key2 = key.clone();
        // The waiter gives up after 8 s, before the holder's 10 s lease ends: only
        // the release can let it in.
        let waiter = tokio::spawn(async move {
            let g = tokio::time::timeout(Duration::from_secs(8), rl2.acquire(key2.as_str(), ttl)).await;
            (g, Instant::now())
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        ensure(!waiter.is_finished(), || "acquire() returned while the lock was held".into())?;
        let released_at = Instant::now();
        holder.release().await;
        let (g, acquired_at) = waiter.await.map_err(|e| e.to_string())?;
        let guard = g.map_err(|_| "acquire() still blocked 7 s after the release".to_string())?
            .map_err(|e| format!("acquire(): {e}"))?;
        ensure(acquired_at >= released_at, || {
            format!("acquired {:?} before the release", released_at - acquired_at)
        })?;
        plain.expect_owner(&key, &guard.lock.val, TTL_MS)?;
        guard.release().await;
        plain.expect_gone(&key)
    }
    .await;
    h.report(&library, "blocking acquire", t0, r);

    let t0 = Instant::now();
    let r = async {
        let key = unique(prefix, "rslock-using");
        let dur = Duration::from_millis(2000);
        let mut check = Plain::connect(check_port)?;
        let k = key.clone();
        let res = tokio::time::timeout(
            Duration::from_secs(15),
            rl.using(key.as_bytes(), dur, async || -> Result<(usize, Duration), String> {
                // Held 2.5 times its TTL: only the automatic extensions keep it.
                let start = Instant::now();
                let mut seen = None;
                let mut samples = 0;
                let mut last_sample = Duration::ZERO;
                while start.elapsed() < Duration::from_secs(5) {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let v = check.get(&k)?;
                    let pttl = check.int(&[b"PTTL", k.as_bytes()])?;
                    ensure(v.is_some() && pttl > 0 && pttl <= 2000, || {
                        format!("at {:?} the server has GET={v:?} PTTL={pttl}", start.elapsed())
                    })?;
                    if seen.is_none() {
                        seen = v.clone();
                    }
                    ensure(seen == v, || "the lock's value changed while held".into())?;
                    samples += 1;
                    last_sample = start.elapsed();
                }
                Ok((samples, last_sample))
            }),
        )
        .await
        .map_err(|_| "using() did not return".to_string())?
        .map_err(|e| format!("using(): {e}"))?;
        let (samples, last_sample) = res?;
        // The server still had the lock well past its first TTL (however few samples
        // a loaded machine managed to take).
        ensure(last_sample >= 2 * dur, || format!("the last check of the held lock was at {last_sample:?} ({samples} samples)"))?;
        plain.expect_gone(&key)
    }
    .await;
    h.report(&library, "using() auto-extension", t0, r);

    // A holder that takes a 1.5 s lock and crashes (never unlocks): acquire() on
    // another manager gets it once the lease has run out, not before; the crashed
    // holder's late unlock does not touch the new lock.
    let t0 = Instant::now();
    let r = async {
        let key = unique(prefix, "rslock-crash");
        let since = Instant::now();
        let dead = rl.lock(key.as_str(), Duration::from_millis(1500)).await.map_err(|e| format!("holder lock(): {e}"))?;
        let old_token = plain.expect_token_owner(&key, &dead.val)?;
        let rl2 = LockManager::new(vec![url.clone()]);
        let guard = tokio::time::timeout(Duration::from_secs(30), rl2.acquire(key.as_str(), ttl))
            .await
            .map_err(|_| "acquire() still blocked 30 s after a 1.5 s lease".to_string())?
            .map_err(|e| format!("acquire(): {e}"))?;
        let acquired_at = Instant::now();
        ensure(acquired_at + Duration::from_millis(5) >= since + Duration::from_millis(1500), || {
            format!("acquired {:?} after the crashed holder's 1.5 s lease was requested", acquired_at - since)
        })?;
        plain.expect_owner(&key, &guard.lock.val, TTL_MS)?;
        let new_token = plain.expect_token_owner(&key, &guard.lock.val)?;
        ensure(new_token > old_token, || format!("token after the expiry {new_token}, not above the crashed holder's {old_token}"))?;
        rl.unlock(&dead).await;
        plain.expect_owner(&key, &guard.lock.val, TTL_MS)?;
        guard.release().await;
        plain.expect_gone(&key)
    }
    .await;
    h.report(&library, "crashed holder expires", t0, r);

    // Tokens from LOCK.INFO (through the redis crate) for rslock's locks; the
    // resource honours each holder's token, then refuses the earlier, lower one.
    let t0 = Instant::now();
    let r = async {
        let key = unique(prefix, "rslock-fence");
        let resource = unique(prefix, "rslock-resource");
        let mut con = connect(&url)?;
        let first = rl.lock(key.as_str(), ttl).await.map_err(|e| format!("first lock(): {e}"))?;
        let (owner, t1) = lock_info_via(&mut con, &key)?;
        ensure(owner == first.val, || "LOCK.INFO owner is not the lock's value".into())?;
        ensure(plain.expect_token_owner(&key, &first.val)? == t1, || "plain LOCK.INFO disagrees on the token".into())?;
        ensure(fence(&mut con, &resource, t1) == Ok(t1), || format!("LOCK.FENCE with the holder's token {t1} refused"))?;
        rl.unlock(&first).await;
        plain.expect_gone(&key)?;
        let second = rl.lock(key.as_str(), ttl).await.map_err(|e| format!("second lock(): {e}"))?;
        let (owner, t2) = lock_info_via(&mut con, &key)?;
        ensure(owner == second.val && t2 > t1, || format!("second holder: token {t2} (first token {t1})"))?;
        ensure(fence(&mut con, &resource, t2) == Ok(t2), || format!("LOCK.FENCE with the second holder's token {t2} refused"))?;
        let got = fence(&mut con, &resource, t1);
        ensure(got == Err(stale_text(t1, t2)), || {
            format!("LOCK.FENCE with the first holder's lower token gave {got:?}, expected -{}", stale_text(t1, t2))
        })?;
        plain.expect_fence(&resource, t1, t2)?;
        plain.expect_fence(&resource, t2, t2)?;
        rl.unlock(&second).await;
        plain.expect_gone(&key)
    }
    .await;
    h.report(&library, "fenced write", t0, r);
}

fn main() {
    let mut port = None;
    let mut check_port = None;
    let mut prefix = "interop".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--port" => port = v.parse::<u16>().ok(),
            "--check-port" => check_port = v.parse::<u16>().ok(),
            "--prefix" => prefix = v,
            _ => {
                eprintln!("unknown argument {a}");
                std::process::exit(2);
            }
        }
    }
    let (Some(port), Some(check_port)) = (port, check_port) else {
        eprintln!("usage: raftlock-interop --port P --check-port C [--prefix X]");
        std::process::exit(2);
    };
    let mut h = Harness { failed: 0 };
    redis_rs_cases(&mut h, port, check_port, &prefix, 2);
    redis_rs_cases(&mut h, port, check_port, &prefix, 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(rslock_cases(&mut h, port, check_port, &prefix));
    std::process::exit(if h.failed == 0 { 0 } else { 1 });
}
