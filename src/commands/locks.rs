//! The lock family (DESIGN.md §3): leases with fencing tokens.
//!
//! A lock is a string key whose value is its owner; its version (the log index
//! that created it) is the fencing token. So `GET` shows the owner, `PTTL` the
//! lease, and a lock taken with `SET key owner NX PX ttl` has a token too.

use bytes::Bytes;

use crate::keyspace::{
    ClientId, Enqueued, Entry, Event, ExecCtx, Keyspace, LeaseEvent, ReadCtx, Seen, Str, Value, WaitStep, Waiter,
    MAX_WAITERS_PER_KEY,
};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

use super::{CmdError, CmdResult};

fn lease_ttl(args: &mut Args) -> Result<u64, CmdError> {
    match args.next_i64()? {
        ms if ms > 0 => Ok(ms as u64),
        _ => Err(CmdError::Other("ERR ttl-ms must be a positive integer".into())),
    }
}

fn token_arg(args: &mut Args) -> Result<u64, CmdError> {
    match args.next_i64()? {
        t if t >= 0 => Ok(t as u64),
        _ => Err(CmdError::Arg(ArgError::NotInteger)),
    }
}

/// `WAIT ms`: how long a caller waits in the queue, in ms (> 0).
fn wait_arg(args: &mut Args) -> Result<u64, CmdError> {
    match args.next_i64()? {
        ms if ms > 0 => Ok(ms as u64),
        _ => Err(CmdError::Other("ERR WAIT ms must be a positive integer".into())),
    }
}

/// The owner of a live lock key; `WRONGTYPE` if the key is not a string.
fn owner_of(entry: &Entry) -> Result<&Str, CmdError> {
    match &entry.value {
        Value::Str(owner) => Ok(owner),
        _ => Err(CmdError::WrongType),
    }
}

/// ```text
/// LOCK.ACQUIRE key owner ttl-ms [WAIT ms]
/// ```
/// The fencing token if granted, or if `owner` already holds the lock (then the
/// lease is refreshed to `ttl-ms` and the token is the same: safe to retry);
/// nil if another owner holds it, or if others wait for it.
///
/// With `WAIT`, a caller that would get nil joins the lock's queue instead
/// (first come, first served; an owner already queued keeps its place), and
/// its connection blocks: the entry that frees the lock grants it to the
/// first waiter, and that waiter's node answers it with the token, or with
/// nil once `ms` of log time have passed. Only a command that stands alone
/// waits: in a transaction, a script or a pipeline `WAIT` is ignored, as
/// Redis's blocking commands do not block there.
pub fn acquire(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let owner = args.next_bytes()?.clone();
    let ttl_ms = lease_ttl(&mut args)?;
    let mut wait_ms = None;
    if args.remaining() > 0 {
        match args.next_keyword()?.as_str() {
            "WAIT" => wait_ms = Some(wait_arg(&mut args)?),
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
        if args.remaining() > 0 {
            return Err(CmdError::Arg(ArgError::Syntax));
        }
    }
    // A lock that expired while owners queued for it is theirs first.
    ks.settle(&key, ctx);
    let expires_at = ctx.log_time.saturating_add(ttl_ms);
    if let Some(entry) = ks.get_mut(&key, ctx) {
        if owner_of(entry)?[..] != owner[..] {
            let (Some(wait_ms), Some((client, seq))) = (wait_ms, ctx.blocking_origin) else {
                return Ok(Reply::Nil);
            };
            let deadline = ctx.log_time.saturating_add(wait_ms);
            let waiter = Waiter { owner: owner.clone(), ttl_ms, deadline, since: ctx.log_time, client, seq };
            return match ks.enqueue_waiter(&key, waiter) {
                Enqueued::Full => Err(CmdError::Other(format!(
                    "ERR {MAX_WAITERS_PER_KEY} owners already wait for this lock; retry later"
                ))),
                Enqueued::Joined | Enqueued::Renewed => {
                    let step = WaitStep::Queued { deadline, ttl_ms };
                    ctx.events.push(Event::Wait { client, seq, key, owner, step, waited_ms: 0 });
                    Ok(Reply::Queued { seq })
                }
            };
        }
        entry.set_lease(true);
        let (token, since) = (entry.version, entry.since);
        let left_ms = entry.expires_at().map_or(0, |e| e.saturating_sub(ctx.log_time));
        ks.set_expiry(&key, Some(expires_at));
        ctx.key_event('g', "expire", &key);
        let held_ms = ctx.log_time.saturating_sub(since);
        ctx.events.push(Event::Lease { kind: LeaseEvent::Renewed { left_ms }, key, owner, token, ttl_ms, held_ms });
        return Ok(Reply::Int(token as i64));
    }
    let mut entry = Entry::string(owner.clone(), ctx.version, ctx.log_time);
    entry.set_expires_at(Some(expires_at));
    entry.set_lease(true);
    ks.insert(key.clone(), entry);
    ctx.key_event('$', "set", &key);
    ctx.key_event('g', "expire", &key);
    let token = ctx.version;
    ctx.events.push(Event::Lease { kind: LeaseEvent::Acquired, key, owner, token, ttl_ms, held_ms: 0 });
    Ok(Reply::Int(ctx.version as i64))
}

/// The connection `client` stops waiting as `owner` in `key`'s queue, where
/// its command `seq` put it ([`crate::commands::Request::Dequeue`]): nil if it
/// was still waiting (now it is not); otherwise how that wait ended, as the
/// client's session recorded it (the token of the grant, even if its lease
/// has run out since, or nil for a timeout); failing that (a session
/// forgotten), the token if `owner` holds the lock, else nil.
pub fn dequeue(ks: &mut Keyspace, ctx: &mut ExecCtx, client: &ClientId, seq: u64, key: &Bytes, owner: &Bytes) -> Reply {
    if let Some(w) = ks.remove_waiter(key, owner, client) {
        let waited_ms = ctx.log_time.saturating_sub(w.since);
        let (client, seq, key, owner) = (w.client, w.seq, key.clone(), w.owner);
        ctx.events.push(Event::Wait { client, seq, key, owner, step: WaitStep::Left, waited_ms });
        return Reply::Nil;
    }
    if let Seen::Again(ended @ (Reply::Int(_) | Reply::Nil)) = ks.sessions().check(client, seq) {
        return ended;
    }
    match ks.get(key, ctx.log_time) {
        Some(entry) if matches!(&entry.value, Value::Str(v) if v[..] == owner[..]) => Reply::Int(entry.version as i64),
        _ => Reply::Nil,
    }
}

/// ```text
/// LOCK.RENEW key owner token ttl-ms
/// ```
/// `ttl-ms` once the lease runs `ttl-ms` from now; `-LOCKLOST` if the lock is
/// not held by `owner` with `token` (it expired, or was taken since).
pub fn renew(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let owner = args.next_bytes()?.clone();
    let token = token_arg(&mut args)?;
    let ttl_ms = lease_ttl(&mut args)?;
    let lost = || CmdError::LockLost("the lock is not held by this owner with this token".into());
    let entry = ks.get_mut(&key, ctx).ok_or_else(lost)?;
    if owner_of(entry)?[..] != owner[..] || entry.version != token {
        return Err(lost());
    }
    entry.set_lease(true);
    let held_ms = ctx.log_time.saturating_sub(entry.since);
    let left_ms = entry.expires_at().map_or(0, |e| e.saturating_sub(ctx.log_time));
    ks.set_expiry(&key, Some(ctx.log_time.saturating_add(ttl_ms)));
    ctx.key_event('g', "expire", &key);
    ctx.events.push(Event::Lease { kind: LeaseEvent::Renewed { left_ms }, key, owner, token, ttl_ms, held_ms });
    Ok(Reply::Int(ttl_ms as i64))
}

/// ```text
/// LOCK.RELEASE key owner token
/// ```
/// 1 if released; 0 if the lock was not held by `owner` with `token`.
pub fn release(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?.clone();
    let owner = args.next_bytes()?.clone();
    let token = token_arg(&mut args)?;
    let Some(entry) = ks.get_mut(&key, ctx) else { return Ok(Reply::Int(0)) };
    if owner_of(entry)?[..] != owner[..] || entry.version != token {
        return Ok(Reply::Int(0));
    }
    entry.set_lease(true);
    super::keys::delete_key(ks, ctx, &key);
    Ok(Reply::Int(1))
}

/// ```text
/// LOCK.FENCE resource token
/// ```
/// Makes raftlock a fenced resource: `token` if it is at least the highest token
/// honored for `resource` (which becomes `token`); `-STALE` if it is lower. The
/// highest token is the string key `resource`.
pub fn fence(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let resource = args.next_bytes()?.clone();
    let token = token_arg(&mut args)?;
    let value = Value::Str(Str::new(token.to_string().as_bytes()));
    match ks.get_mut(&resource, ctx) {
        Some(entry) => {
            let highest = parse_i64(owner_of(entry)?)
                .ok_or_else(|| CmdError::Other("ERR the fencing resource holds a value that is not a token".into()))?;
            if (token as i64) < highest {
                return Err(CmdError::Stale(format!(
                    "token {token} is lower than {highest}, the highest honored for this resource"
                )));
            }
            entry.value = value;
            entry.rewritten(ctx.version, ctx.log_time);
        }
        None => ks.insert(resource.clone(), Entry::new(value, ctx.version, ctx.log_time)),
    }
    ctx.key_event('$', "set", &resource);
    Ok(Reply::Int(token as i64))
}

/// The owner `LOCK.INFO` shows: a string lock's value, or the one field of
/// a hash that holds one (a Redisson `RLock` or `RFencedLock`: the holder's
/// `<client-id>:<thread-id>`, mapped to its hold count). `WRONGTYPE` for
/// anything else.
fn shown_owner(entry: &Entry) -> Result<&[u8], CmdError> {
    match &entry.value {
        Value::Hash(h) if h.len() == 1 => h.keys().next().map(|f| &f[..]).ok_or(CmdError::WrongType),
        _ => owner_of(entry).map(|o| &o[..]),
    }
}

/// ```text
/// LOCK.INFO key
/// ```
/// `owner`, `token`, `ttl-ms` (-1 without expiry), `waiters` (how many
/// owners queue for it) and `next-waiter` (the first of them, or nil) as a
/// map (a flat array in RESP2), or nil if the key does not exist. The key
/// is a string lock, or a hash with one field (a lock taken by Redisson:
/// the field is its owner, and the key's version, new at each acquisition
/// and reentry, its token).
pub fn info(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let Some(entry) = ks.get(key, ctx.now) else { return Ok(Reply::Nil) };
    let owner = Bytes::copy_from_slice(shown_owner(entry)?);
    let ttl = entry.ttl_ms(ctx.clock_now.max(ctx.now)).map(|ms| ms as i64).unwrap_or(-1);
    let mut queue = ks.waiters().queue(key);
    let next = queue.next().map(|w| Reply::Bulk(w.owner.clone())).unwrap_or(Reply::Nil);
    let waiters = queue.count() + usize::from(next != Reply::Nil);
    Ok(Reply::Map(vec![
        (Reply::text("owner"), Reply::Bulk(owner)),
        (Reply::text("token"), Reply::Int(entry.version as i64)),
        (Reply::text("ttl-ms"), Reply::Int(ttl)),
        (Reply::text("waiters"), Reply::Int(waiters as i64)),
        (Reply::text("next-waiter"), next),
    ]))
}

#[cfg(test)]
mod tests {
    use crate::commands::{apply, execute_read, may_be_refused, refused, ClientCommand, Op, Origin, Proposal, Request};
    use crate::keyspace::{Event, Keyspace, LeaseEvent, ReadCtx, WaitStep};
    use crate::protocol::Reply;
    use bytes::Bytes;

    /// Applies `cmd` at log `index` and log time `t`.
    fn run(ks: &mut Keyspace, index: u64, t: u64, cmd: &str) -> (Reply, Vec<Event>) {
        let argv = cmd.split_whitespace().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect();
        let origin = Origin::test(index);
        let request = Request::Command(argv);
        let p = Proposal { log_time: t, unix_ms: 0, op: Op::Commands(vec![ClientCommand { origin, request }]) };
        let applied = apply(ks, index, &p).pop().unwrap();
        (applied.reply, applied.events)
    }

    fn expire(ks: &mut Keyspace, index: u64, t: u64) -> Vec<Event> {
        let p = Proposal { log_time: t, unix_ms: 0, op: Op::Expire };
        apply(ks, index, &p).pop().unwrap().events
    }

    fn read(ks: &Keyspace, t: u64, cmd: &str) -> Reply {
        let argv: Vec<Bytes> = cmd.split_whitespace().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect();
        execute_read(ks, &argv, &ReadCtx::at(t))
    }

    fn err_starts(r: &Reply, prefix: &str) -> bool {
        matches!(r, Reply::Error(e) if e.starts_with(prefix))
    }

    #[test]
    fn grant_and_same_owner_retry_keep_the_token() {
        let mut ks = Keyspace::new();
        assert_eq!(run(&mut ks, 10, 1000, "LOCK.ACQUIRE l a 5000").0, Reply::Int(10));
        assert_eq!(read(&ks, 1000, "PTTL l"), Reply::Int(5000));
        // Same owner, later: same token, lease refreshed from the retry's time.
        assert_eq!(run(&mut ks, 11, 3000, "LOCK.ACQUIRE l a 5000").0, Reply::Int(10));
        assert_eq!(read(&ks, 3000, "PTTL l"), Reply::Int(5000));
        // Another owner is refused.
        assert_eq!(run(&mut ks, 12, 3001, "LOCK.ACQUIRE l b 5000").0, Reply::Nil);
        assert_eq!(read(&ks, 3001, "GET l"), Reply::bulk("a"));
    }

    #[test]
    fn renew_checks_owner_and_token() {
        let mut ks = Keyspace::new();
        assert_eq!(run(&mut ks, 5, 0, "LOCK.ACQUIRE l a 1000").0, Reply::Int(5));
        assert!(err_starts(&run(&mut ks, 6, 10, "LOCK.RENEW l a 4 1000").0, "LOCKLOST"));
        assert!(err_starts(&run(&mut ks, 7, 10, "LOCK.RENEW l b 5 1000").0, "LOCKLOST"));
        assert_eq!(run(&mut ks, 8, 900, "LOCK.RENEW l a 5 1000").0, Reply::Int(1000));
        assert_eq!(read(&ks, 1500, "GET l"), Reply::bulk("a"));
        // Past the renewed lease the lock is gone, and renewing it is LOCKLOST.
        assert!(err_starts(&run(&mut ks, 9, 1901, "LOCK.RENEW l a 5 1000").0, "LOCKLOST"));
        assert!(err_starts(&run(&mut ks, 10, 0, "LOCK.RENEW l a x 1000").0, "ERR value is not an integer"));
    }

    #[test]
    fn release_only_by_holder_and_emits_events() {
        let mut ks = Keyspace::new();
        run(&mut ks, 3, 0, "LOCK.ACQUIRE l a 1000");
        assert_eq!(run(&mut ks, 4, 10, "LOCK.RELEASE l a 2").0, Reply::Int(0));
        assert_eq!(run(&mut ks, 5, 10, "LOCK.RELEASE l b 3").0, Reply::Int(0));
        let (reply, events) = run(&mut ks, 6, 50, "LOCK.RELEASE l a 3");
        assert_eq!(reply, Reply::Int(1));
        assert!(events.contains(&Event::Key { class: 'g', name: "del", key: Bytes::from("l") }));
        assert!(events.contains(&Event::Lease {
            kind: LeaseEvent::Released,
            key: Bytes::from("l"),
            owner: Bytes::from("a"),
            token: 3,
            ttl_ms: 1000,
            held_ms: 50
        }));
        assert_eq!(read(&ks, 50, "LOCK.INFO l"), Reply::Nil);
        // Free again: the next grant has a higher token.
        assert_eq!(run(&mut ks, 7, 60, "LOCK.ACQUIRE l b 1000").0, Reply::Int(7));
    }

    #[test]
    fn expiry_by_log_time_frees_the_lock() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 100");
        assert_eq!(read(&ks, 100, "GET l"), Reply::bulk("a"));
        assert_eq!(read(&ks, 101, "GET l"), Reply::Nil);
        // The Expire entry deletes it and reports lock.expired.
        let events = expire(&mut ks, 2, 101);
        assert!(events.contains(&Event::Lease {
            kind: LeaseEvent::Expired,
            key: Bytes::from("l"),
            owner: Bytes::from("a"),
            token: 1,
            ttl_ms: 100,
            held_ms: 101
        }));
        assert_eq!(run(&mut ks, 3, 102, "LOCK.ACQUIRE l b 100").0, Reply::Int(3));
    }

    #[test]
    fn a_renewal_before_the_expire_entry_wins() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 100");
        run(&mut ks, 2, 90, "LOCK.RENEW l a 1 100");
        expire(&mut ks, 3, 101);
        assert_eq!(read(&ks, 150, "GET l"), Reply::bulk("a"));
    }

    #[test]
    fn fence_keeps_the_highest_token() {
        let mut ks = Keyspace::new();
        assert_eq!(run(&mut ks, 1, 0, "LOCK.FENCE db 7").0, Reply::Int(7));
        assert_eq!(run(&mut ks, 2, 0, "LOCK.FENCE db 7").0, Reply::Int(7));
        assert!(err_starts(&run(&mut ks, 3, 0, "LOCK.FENCE db 6").0, "STALE"));
        assert_eq!(run(&mut ks, 4, 0, "LOCK.FENCE db 9").0, Reply::Int(9));
        assert_eq!(read(&ks, 0, "GET db"), Reply::bulk("9"));
        run(&mut ks, 5, 0, "SET other hello");
        assert!(err_starts(&run(&mut ks, 6, 0, "LOCK.FENCE other 1").0, "ERR"));
    }

    #[test]
    fn set_nx_px_locks_have_tokens_and_versions_follow_the_rules() {
        let mut ks = Keyspace::new();
        assert_eq!(run(&mut ks, 4, 0, "SET l tok NX PX 1000").0, Reply::ok());
        assert_eq!(run(&mut ks, 5, 0, "SET l other NX PX 1000").0, Reply::Nil);
        let info = read(&ks, 10, "LOCK.INFO l");
        assert_eq!(
            info,
            Reply::Map(vec![
                (Reply::text("owner"), Reply::bulk("tok")),
                (Reply::text("token"), Reply::Int(4)),
                (Reply::text("ttl-ms"), Reply::Int(990)),
                (Reply::text("waiters"), Reply::Int(0)),
                (Reply::text("next-waiter"), Reply::Nil),
            ])
        );
        // PEXPIRE changes only the expiry: version kept. INCR and APPEND
        // change the value in place, SET replaces it: new version each time
        // (issue 10, finding 3: a rewritten lock key never keeps its token).
        run(&mut ks, 6, 20, "PEXPIRE l 5000");
        assert!(matches!(read(&ks, 20, "LOCK.INFO l"), Reply::Map(m) if m[1].1 == Reply::Int(4)));
        run(&mut ks, 7, 20, "SET n 1");
        run(&mut ks, 8, 20, "INCR n");
        assert!(matches!(read(&ks, 20, "LOCK.INFO n"), Reply::Map(m) if m[1].1 == Reply::Int(8)));
        run(&mut ks, 9, 20, "SET n 5");
        assert!(matches!(read(&ks, 20, "LOCK.INFO n"), Reply::Map(m) if m[1].1 == Reply::Int(9)));
        run(&mut ks, 10, 20, "APPEND l x");
        assert!(matches!(read(&ks, 20, "LOCK.INFO l"), Reply::Map(m) if m[0].1 == Reply::bulk("tokx") && m[1].1 == Reply::Int(10)));
        assert!(err_starts(&run(&mut ks, 11, 20, "LOCK.RENEW l tok 4 1000").0, "LOCKLOST"));
    }

    #[test]
    fn commands_sharing_an_entry_get_distinct_increasing_tokens() {
        let mut ks = Keyspace::new();
        let cmd = |k: &str| ClientCommand {
            origin: Origin::test(k.as_bytes()[0] as u64),
            request: Request::Command(
                ["LOCK.ACQUIRE", k, "o", "1000"].iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect(),
            ),
        };
        let p = Proposal { log_time: 0, unix_ms: 0, op: Op::Commands(vec![cmd("a"), cmd("b"), cmd("c")]) };
        let replies: Vec<Reply> = apply(&mut ks, 7, &p).into_iter().map(|a| a.reply).collect();
        assert_eq!(replies, vec![Reply::Int(7), Reply::Int(8), Reply::Int(9)]);
        // The next entry's grant is above all of them.
        assert_eq!(run(&mut ks, 8, 0, "LOCK.ACQUIRE d o 1000").0, Reply::Int(10));
    }

    fn wait_end(events: &[Event]) -> Vec<(u64, WaitStep)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Wait { client, step: step @ (WaitStep::Granted { .. } | WaitStep::TimedOut), .. } => {
                    Some((client.conn, *step))
                }
                _ => None,
            })
            .collect()
    }

    fn info_of(ks: &Keyspace, t: u64, key: &str) -> (Reply, Reply, i64, Reply) {
        match read(ks, t, &format!("LOCK.INFO {key}")) {
            Reply::Map(m) => {
                let Reply::Int(waiters) = m[3].1 else { panic!("{m:?}") };
                (m[0].1.clone(), m[1].1.clone(), waiters, m[4].1.clone())
            }
            other => panic!("LOCK.INFO replied {other:?}"),
        }
    }

    #[test]
    fn waiters_are_granted_in_order_by_the_entry_that_releases() {
        let mut ks = Keyspace::new();
        assert_eq!(run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 1000").0, Reply::Int(1));
        // Origin::test(index) is connection `index`: b waits on 2, c on 3.
        assert_eq!(run(&mut ks, 2, 10, "LOCK.ACQUIRE l b 500 WAIT 5000").0, Reply::Queued { seq: 1 });
        assert_eq!(run(&mut ks, 3, 20, "LOCK.ACQUIRE l c 500 WAIT 5000").0, Reply::Queued { seq: 1 });
        assert_eq!(info_of(&ks, 20, "l"), (Reply::bulk("a"), Reply::Int(1), 2, Reply::bulk("b")));
        // Without WAIT, a third owner is refused and does not queue.
        assert_eq!(run(&mut ks, 4, 30, "LOCK.ACQUIRE l d 500").0, Reply::Nil);
        let (reply, events) = run(&mut ks, 5, 40, "LOCK.RELEASE l a 1");
        assert_eq!(reply, Reply::Int(1));
        assert_eq!(wait_end(&events), vec![(2, WaitStep::Granted { token: 6 })]);
        assert!(events.contains(&Event::Lease {
            kind: LeaseEvent::Acquired,
            key: Bytes::from("l"),
            owner: Bytes::from("b"),
            token: 6,
            ttl_ms: 500,
            held_ms: 0
        }));
        // b holds it from the release's log time, with its own lease.
        assert_eq!(info_of(&ks, 40, "l"), (Reply::bulk("b"), Reply::Int(6), 1, Reply::bulk("c")));
        assert_eq!(read(&ks, 40, "PTTL l"), Reply::Int(500));
        let (_, events) = run(&mut ks, 7, 50, "DEL l");
        assert_eq!(wait_end(&events), vec![(3, WaitStep::Granted { token: 8 })]);
        assert_eq!(info_of(&ks, 50, "l"), (Reply::bulk("c"), Reply::Int(8), 0, Reply::Nil));
        assert_eq!(ks.waiters().total(), 0);
    }

    #[test]
    fn an_expiry_hands_the_lock_over_and_the_old_holder_has_lost_it() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 100");
        assert_eq!(run(&mut ks, 2, 10, "LOCK.ACQUIRE l b 1000 WAIT 5000").0, Reply::Queued { seq: 1 });
        let events = expire(&mut ks, 3, 101);
        assert_eq!(wait_end(&events), vec![(2, WaitStep::Granted { token: 4 })]);
        assert!(events.iter().any(|e| matches!(e, Event::Lease { kind: LeaseEvent::Expired, token: 1, .. })));
        assert!(err_starts(&run(&mut ks, 4, 102, "LOCK.RENEW l a 1 100").0, "LOCKLOST"));
        assert_eq!(run(&mut ks, 5, 103, "LOCK.RENEW l b 4 1000").0, Reply::Int(1000));
    }

    #[test]
    fn an_expired_lock_goes_to_its_waiters_before_anyone_else() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 100");
        run(&mut ks, 2, 10, "LOCK.ACQUIRE l b 1000 WAIT 5000");
        // Expired in log time, not yet deleted by an Expire entry: a SET NX
        // or LOCK.ACQUIRE from outside the queue must not take it first.
        let (reply, events) = run(&mut ks, 3, 150, "SET l x NX PX 100");
        assert_eq!(reply, Reply::Nil);
        assert_eq!(wait_end(&events), vec![(2, WaitStep::Granted { token: 4 })]);
        assert_eq!(run(&mut ks, 4, 160, "LOCK.ACQUIRE l x 100").0, Reply::Nil);
        assert_eq!(read(&ks, 160, "GET l"), Reply::bulk("b"));
    }

    #[test]
    fn waits_end_at_their_deadline_in_log_time() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 10000");
        run(&mut ks, 2, 0, "LOCK.ACQUIRE l b 100 WAIT 50");
        run(&mut ks, 3, 0, "LOCK.ACQUIRE l c 100 WAIT 80");
        run(&mut ks, 4, 0, "LOCK.ACQUIRE l d 100 WAIT 1000");
        assert_eq!(ks.next_expiry(), Some(50));
        assert!(wait_end(&expire(&mut ks, 5, 50)).is_empty());
        assert_eq!(wait_end(&expire(&mut ks, 6, 51)), vec![(2, WaitStep::TimedOut)]);
        // c's deadline passed but no Expire entry removed it yet: the release
        // skips it (told it timed out) and grants d.
        let (_, events) = run(&mut ks, 7, 90, "LOCK.RELEASE l a 1");
        assert_eq!(wait_end(&events), vec![(3, WaitStep::TimedOut), (4, WaitStep::Granted { token: 8 })]);
        assert_eq!(ks.waiters().total(), 0);
        assert_eq!(ks.next_expiry(), Some(190));
    }

    #[test]
    fn a_retried_wait_keeps_its_place_and_only_lone_commands_wait() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 1000");
        run(&mut ks, 2, 0, "LOCK.ACQUIRE l b 100 WAIT 5000");
        run(&mut ks, 3, 0, "LOCK.ACQUIRE l c 100 WAIT 5000");
        // b again, from connection 4: one place, still first, answered on 4.
        assert_eq!(run(&mut ks, 4, 0, "LOCK.ACQUIRE l b 100 WAIT 5000").0, Reply::Queued { seq: 1 });
        assert_eq!(info_of(&ks, 0, "l").2, 2);
        let (_, events) = run(&mut ks, 5, 10, "LOCK.RELEASE l a 1");
        assert_eq!(wait_end(&events), vec![(4, WaitStep::Granted { token: 6 })]);
        // In a transaction, WAIT does not wait.
        let origin = Origin::test(9);
        let request = Request::Transaction {
            watched: vec![],
            commands: vec![["LOCK.ACQUIRE", "l", "e", "100", "WAIT", "1000"].iter().map(|s| Bytes::from(*s)).collect()],
        };
        let p = Proposal { log_time: 20, unix_ms: 0, op: Op::Commands(vec![ClientCommand { origin, request }]) };
        assert_eq!(apply(&mut ks, 9, &p).pop().unwrap().reply, Reply::Array(vec![Reply::Nil]));
        assert_eq!(info_of(&ks, 20, "l").2, 1);
        assert!(err_starts(&run(&mut ks, 10, 20, "LOCK.ACQUIRE l e 100 WAIT 0").0, "ERR WAIT ms"));
        assert!(err_starts(&run(&mut ks, 11, 20, "LOCK.ACQUIRE l e 100 WAIT 5 x").0, "ERR syntax"));
        assert!(err_starts(&run(&mut ks, 12, 20, "LOCK.ACQUIRE l e 100 SOON 5").0, "ERR syntax"));
    }

    #[test]
    fn a_dequeued_waiter_is_never_granted_and_a_late_dequeue_learns_the_token() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 1000");
        run(&mut ks, 2, 0, "LOCK.ACQUIRE l b 100 WAIT 5000");
        run(&mut ks, 3, 0, "LOCK.ACQUIRE l c 100 WAIT 5000");
        let dequeue = |ks: &mut Keyspace, index: u64, conn: u64, owner: &str| {
            let origin = Origin { seq: index, ..Origin::test(conn) };
            let owner = Bytes::copy_from_slice(owner.as_bytes());
            let request = Request::Dequeue { key: Bytes::from("l"), owner, seq: 1 };
            let p = Proposal { log_time: 10, unix_ms: 0, op: Op::Commands(vec![ClientCommand { origin, request }]) };
            apply(ks, index, &p).pop().unwrap().reply
        };
        // Only the connection that queued b may take it out.
        assert_eq!(dequeue(&mut ks, 4, 3, "b"), Reply::Nil);
        assert_eq!(info_of(&ks, 10, "l").2, 2);
        assert_eq!(dequeue(&mut ks, 5, 2, "b"), Reply::Nil);
        assert_eq!(info_of(&ks, 10, "l"), (Reply::bulk("a"), Reply::Int(1), 1, Reply::bulk("c")));
        let (_, events) = run(&mut ks, 6, 20, "LOCK.RELEASE l a 1");
        assert_eq!(wait_end(&events), vec![(3, WaitStep::Granted { token: 7 })]);
        assert_eq!(dequeue(&mut ks, 7, 3, "c"), Reply::Int(7));
    }

    /// Found by the chaos harness: a node that installed a snapshot over the
    /// entry granting its waiter never saw the grant; its connection then
    /// left the queue past the deadline, after the lease had run out, and
    /// was told nil although the lock had been its own. The end of a wait is
    /// now kept in the waiter's session, where a late `Dequeue` or a retried
    /// `WAIT` finds it.
    #[test]
    fn how_a_wait_ended_outlives_the_lease_it_granted() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 100");
        run(&mut ks, 2, 0, "LOCK.ACQUIRE l b 100 WAIT 5000");
        run(&mut ks, 3, 0, "LOCK.ACQUIRE l c 100 WAIT 150");
        let events = expire(&mut ks, 4, 101);
        assert_eq!(wait_end(&events), vec![(2, WaitStep::Granted { token: 5 })]);
        // b's lease runs out, then c's wait.
        expire(&mut ks, 6, 202);
        assert_eq!(read(&ks, 202, "GET l"), Reply::Nil);
        let dequeue = |ks: &mut Keyspace, index: u64, conn: u64, owner: &str| {
            let origin = Origin { seq: 2, ..Origin::test(conn) };
            let request = Request::Dequeue { key: Bytes::from("l"), owner: Bytes::copy_from_slice(owner.as_bytes()), seq: 1 };
            let p = Proposal { log_time: 300, unix_ms: 0, op: Op::Commands(vec![ClientCommand { origin, request }]) };
            apply(ks, index, &p).pop().unwrap().reply
        };
        // A retried copy of b's WAIT (same origin) is answered its token.
        let retry = ClientCommand {
            origin: Origin::test(2),
            request: Request::Command(["LOCK.ACQUIRE", "l", "b", "100", "WAIT", "5000"].iter().map(|s| Bytes::from(*s)).collect()),
        };
        let p = Proposal { log_time: 250, unix_ms: 0, op: Op::Commands(vec![retry]) };
        assert_eq!(apply(&mut ks, 7, &p).pop().unwrap().reply, Reply::Int(5));
        assert_eq!(dequeue(&mut ks, 8, 2, "b"), Reply::Int(5));
        assert_eq!(dequeue(&mut ks, 9, 3, "c"), Reply::Nil);
    }

    #[test]
    fn an_undone_transaction_puts_the_queue_back() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.FENCE r 10");
        run(&mut ks, 2, 0, "LOCK.ACQUIRE l a 100");
        run(&mut ks, 3, 0, "LOCK.ACQUIRE l b 100 WAIT 5000");
        // The expired lock is handed to b inside the transaction, which the
        // stale fence then undoes; then the entry hands it over again, once.
        let origin = Origin::test(9);
        let cmds = [vec!["SET", "l", "x", "NX"], vec!["LOCK.FENCE", "r", "1"]];
        let request = Request::Transaction {
            watched: vec![],
            commands: cmds.iter().map(|c| c.iter().map(|s| Bytes::from(*s)).collect()).collect(),
        };
        let p = Proposal { log_time: 150, unix_ms: 0, op: Op::Commands(vec![ClientCommand { origin, request }]) };
        let applied = apply(&mut ks, 4, &p).pop().unwrap();
        assert!(err_starts(&applied.reply, "STALE"));
        assert_eq!(wait_end(&applied.events), vec![(3, WaitStep::Granted { token: 5 })]);
        assert_eq!(info_of(&ks, 150, "l"), (Reply::bulk("b"), Reply::Int(5), 0, Reply::Nil));
        assert!(wait_end(&expire(&mut ks, 5, 151)).is_empty());
    }

    fn apply_argv(ks: &mut Keyspace, index: u64, t: u64, conn: u64, request: Request) -> crate::commands::Applied {
        let p = Proposal { log_time: t, unix_ms: 0, op: Op::Commands(vec![ClientCommand { origin: Origin::test(conn), request }]) };
        apply(ks, index, &p).pop().unwrap()
    }

    fn argv(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect()
    }

    /// Review finding: a script's `redis.call('LOCK.ACQUIRE', ..., 'WAIT',
    /// ...)` queued a waiter nobody listened for.
    #[test]
    fn a_script_never_waits() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 1000");
        let script = "return redis.call('LOCK.ACQUIRE', 'l', 'b', 1000, 'WAIT', 60000)";
        let applied = apply_argv(&mut ks, 2, 0, 2, Request::Command(argv(&["EVAL", script, "0"])));
        assert_eq!(applied.reply, Reply::Nil);
        assert_eq!(ks.waiters().total(), 0);
    }

    /// Review finding: an undone transaction put its keys back in hash
    /// order, and the locks that freed got their handoff tokens in that
    /// order, different on every node.
    #[test]
    fn an_undone_transaction_hands_locks_over_in_key_order() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.FENCE r 100");
        let keys: Vec<String> = (0..8).map(|i| format!("l{i}")).collect();
        let mut index = 2;
        for k in &keys {
            run(&mut ks, index, 0, &format!("LOCK.ACQUIRE {k} a 100"));
            run(&mut ks, index + 1, 0, &format!("LOCK.ACQUIRE {k} w 100 WAIT 5000"));
            index += 2;
        }
        // Expired, not yet deleted. Each LOCK.ACQUIRE fails (ttl 0) but
        // counts as a write of its key, which the undo of the stale fence
        // then puts back, freeing it: the entry hands each over, in an order
        // every node must agree on.
        let mut commands: Vec<Vec<Bytes>> = keys.iter().rev().map(|k| argv(&["LOCK.ACQUIRE", k, "x", "0"])).collect();
        commands.push(argv(&["LOCK.FENCE", "r", "1"]));
        let request = Request::Transaction { watched: vec![], commands };
        let applied = apply_argv(&mut ks, 100, 150, 99, request);
        let tokens: Vec<u64> = keys
            .iter()
            .map(|k| match read(&ks, 150, &format!("LOCK.INFO {k}")) {
                Reply::Map(m) => match m[1].1 {
                    Reply::Int(t) => t as u64,
                    _ => panic!(),
                },
                other => panic!("{k}: {other:?}"),
            })
            .collect();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "handoff tokens {tokens:?} not in key order");
        assert_eq!(wait_end(&applied.events).len(), keys.len());
    }

    /// Review finding: an undone grant left its token in the waiter's
    /// session, where a retried WAIT would have found it.
    #[test]
    fn an_undone_grant_is_forgotten_by_the_waiters_session() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.FENCE r 100");
        run(&mut ks, 2, 0, "LOCK.ACQUIRE l a 10000");
        run(&mut ks, 3, 0, "LOCK.ACQUIRE l b 100 WAIT 5000");
        let commands = vec![argv(&["DEL", "l"]), argv(&["SET", "l", "x", "NX"]), argv(&["LOCK.FENCE", "r", "1"])];
        let applied = apply_argv(&mut ks, 4, 10, 9, Request::Transaction { watched: vec![], commands });
        assert!(err_starts(&applied.reply, "STALE"));
        assert_eq!(read(&ks, 10, "GET l"), Reply::bulk("a"));
        // b's WAIT, retried: still waiting, not granted.
        let retry = apply_argv(&mut ks, 5, 10, 3, Request::Command(argv(&["LOCK.ACQUIRE", "l", "b", "100", "WAIT", "5000"])));
        assert_eq!(retry.reply, Reply::Queued { seq: 1 });
    }

    #[test]
    fn a_refused_attempt_is_recognised_without_changing_anything() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "LOCK.ACQUIRE l a 1000");
        let argv = |cmd: &str| cmd.split_whitespace().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect::<Vec<_>>();
        let ctx = ReadCtx::at(10);
        let before = ks.clone();
        assert!(refused(&ks, &argv("LOCK.ACQUIRE l b 1000"), &ctx));
        assert!(refused(&ks, &argv("SET l b NX PX 1000"), &ctx));
        assert!(refused(&ks, &argv("set l b px 1000 nx"), &ctx));
        // The owner's own retry renews; a free key is taken; GET, WAIT and
        // bad syntax are not refusals; other commands are never judged.
        assert!(!refused(&ks, &argv("LOCK.ACQUIRE l a 1000"), &ctx));
        assert!(!refused(&ks, &argv("LOCK.ACQUIRE m b 1000"), &ctx));
        assert!(!refused(&ks, &argv("SET l b NX GET"), &ctx));
        assert!(!refused(&ks, &argv("LOCK.ACQUIRE l b 1000 WAIT 10"), &ctx));
        assert!(!refused(&ks, &argv("SET l b NX PX x"), &ctx));
        assert!(!refused(&ks, &argv("SET l b NX XX"), &ctx));
        assert!(!refused(&ks, &argv("GETDEL l"), &ctx));
        assert_eq!(ks, before);
        // The leader's lookup before the ReadIndex round agrees.
        assert!(may_be_refused(&ks, &argv("LOCK.ACQUIRE l b 1000")) && may_be_refused(&ks, &argv("SET l b NX")));
        assert!(!may_be_refused(&ks, &argv("LOCK.ACQUIRE l a 1000")) && !may_be_refused(&ks, &argv("SET m b NX")));
        assert!(!may_be_refused(&ks, &argv("GET l")));
        // Expired at the time judged: not refused.
        assert!(!refused(&ks, &argv("SET l b NX"), &ReadCtx::at(1001)));
    }

    /// The attempts whose nil reply is a refusal (LOCK.TOP counts those),
    /// and among them those the leader may refuse without the log.
    #[test]
    fn lock_attempts_are_lock_acquires_and_set_nx_without_get() {
        use crate::commands::{attempted_lock, is_lock_attempt};
        let key = Bytes::from("k");
        for (cmd, attempt, without_log) in [
            ("LOCK.ACQUIRE k o 100", true, true),
            ("lock.acquire k o 100 WAIT 5", true, false),
            ("set k o PX 100 nx", true, true),
            ("SET k o NX", true, true),
            // With GET, nil means the key was free and is now set.
            ("SET k o NX GET", false, false),
            ("SET k o", false, false),
            ("SET k nx", false, false),
            ("GET k", false, false),
        ] {
            let words = argv(&cmd.split(' ').collect::<Vec<_>>());
            assert_eq!(attempted_lock(&words), attempt.then_some(&key), "{cmd}");
            assert_eq!(is_lock_attempt(&words), without_log, "{cmd}");
        }
        assert_eq!(attempted_lock(&argv(&["LOCK.ACQUIRE"])), None);
    }

    /// Issue 10, finding 4: the same proposal applied twice (a follower
    /// re-sent it after losing the answer, and both copies committed) runs
    /// once; the second copy gets the first one's reply.
    #[test]
    fn a_retried_command_runs_once_and_gets_the_first_reply() {
        let mut ks = Keyspace::new();
        let command = |seq: u64, args: &[&str]| ClientCommand {
            origin: Origin { seq, ..Origin::test(7) },
            request: Request::Command(args.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect()),
        };
        let entry = |t: u64, c: ClientCommand| Proposal { log_time: t, unix_ms: 0, op: Op::Commands(vec![c]) };
        let release = command(2, &["LOCK.RELEASE", "l", "a", "1"]);
        apply(&mut ks, 1, &entry(0, command(1, &["LOCK.ACQUIRE", "l", "a", "1000"])));
        let first = apply(&mut ks, 2, &entry(10, release.clone())).pop().unwrap();
        assert_eq!(first.reply, Reply::Int(1));
        let again = apply(&mut ks, 3, &entry(20, release.clone())).pop().unwrap();
        assert_eq!((again.reply, again.events), (Reply::Int(1), vec![]));
        let incr = command(3, &["INCR", "n"]);
        apply(&mut ks, 4, &entry(30, incr.clone()));
        assert_eq!(apply(&mut ks, 5, &entry(40, incr)).pop().unwrap().reply, Reply::Int(1));
        assert_eq!(read(&ks, 40, "GET n"), Reply::bulk("1"));
        // A copy older than the client's last command never runs.
        let stale = apply(&mut ks, 6, &entry(50, command(1, &["INCR", "n"]))).pop().unwrap();
        assert!(err_starts(&stale.reply, "ERR a newer command"));
        assert_eq!(read(&ks, 50, "GET n"), Reply::bulk("1"));
        // The sessions survive a snapshot.
        let restored = Keyspace::decode(&ks.encode()).unwrap();
        assert_eq!(restored.sessions(), ks.sessions());
    }

    /// A Redisson `RLock` is a hash `{holder: count}`: LOCK.INFO shows the
    /// holder, and the key's version as the token, new when another holder
    /// takes it (after the first one's lease ran out).
    #[test]
    fn lock_info_reads_a_redisson_hash_lock() {
        let mut ks = Keyspace::new();
        run(&mut ks, 1, 0, "HINCRBY rl uuid-a:1 1");
        run(&mut ks, 2, 0, "PEXPIRE rl 1000");
        let (owner, token, _, _) = info_of(&ks, 10, "rl");
        assert_eq!((owner, token.clone()), (Reply::bulk("uuid-a:1"), Reply::Int(1)));
        // The lease runs out; another JVM's thread takes it.
        expire(&mut ks, 3, 1001);
        run(&mut ks, 4, 1001, "HINCRBY rl uuid-b:7 1");
        let (owner, later, _, _) = info_of(&ks, 1001, "rl");
        assert_eq!(owner, Reply::bulk("uuid-b:7"));
        assert!(matches!((&token, &later), (Reply::Int(a), Reply::Int(b)) if b > a), "{token:?} then {later:?}");
        // A hash of several fields is no lock.
        run(&mut ks, 5, 1001, "HSET rl mode read");
        assert_eq!(read(&ks, 1001, "LOCK.INFO rl"), Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value"));
    }
}
