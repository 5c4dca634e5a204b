//! Client-side caching (`CLIENT TRACKING`, Redis 6+): which connections of
//! this node want to hear that a key they may have cached changed, and the
//! `invalidate` messages that tell them.
//!
//! Every node applies every entry and so sees every change; each tells its
//! own connections, as it delivers keyspace notifications. In the default
//! mode a connection is told about the keys it read (once per read: reading
//! again tracks again); with `BCAST`, about every key that starts with one of
//! its prefixes (or every key). The keys of a read are remembered *before*
//! the read is sent to the leader, so a change applied here after the read
//! is never missed, whatever the lag of this node (at worst the client drops
//! a value that was already fresh).
//!
//! Until the read's reply is back, a change of one of its keys is told but
//! does not end the tracking: that change may come before the read in the
//! log (this node applies entries while the read travels to the leader and
//! back), and Redis tracks a key from the moment the read runs. Without
//! this, a waiter whose lock was renewed while its failed attempt was in
//! flight would never hear of the release that follows.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use super::hub::{PushMsg, Subscriber};

/// The options of `CLIENT TRACKING ON`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrackingMode {
    /// Another connection (its id) receives the messages, through the
    /// `__redis__:invalidate` channel it subscribes to.
    pub redirect: Option<u64>,
    pub bcast: bool,
    pub prefixes: Vec<Bytes>,
    pub optin: bool,
    pub optout: bool,
    /// Not told about its own changes.
    pub noloop: bool,
}

/// Most keys the default mode tracks on this node (Redis's
/// `tracking-table-max-keys` default).
pub const MAX_TRACKED_KEYS: usize = 1_000_000;

/// The channel a redirect target subscribes to.
pub const INVALIDATE_CHANNEL: &str = "__redis__:invalidate";

struct Tracker {
    mode: TrackingMode,
    /// Its own pushes (RESP3), when there is no redirect.
    own: Subscriber,
    /// The keys it reads that are tracked now (default mode).
    keys: HashSet<Bytes>,
    /// Keys of its reads sent and not yet answered, with how many.
    pending: HashMap<Bytes, u32>,
}

#[derive(Default)]
struct State {
    trackers: HashMap<u64, Tracker>,
    /// Default mode: key -> connections to tell when it changes.
    readers: HashMap<Bytes, HashSet<u64>>,
    /// Answers that reflect entries this node has not applied yet, by the
    /// index it must reach first: (connection, keys) for
    /// [`Tracking::answered`] then.
    deferred: std::collections::BTreeMap<u64, Vec<(u64, Vec<Bytes>)>>,
}

/// This node's tracking connections.
#[derive(Default)]
pub struct Tracking {
    state: Mutex<State>,
}

/// One message to deliver: to whom, and for which keys (`None`: all, after
/// a flush).
pub struct Invalidation {
    pub to: Delivery,
    pub keys: Option<Vec<Bytes>>,
}

/// Where an invalidation goes.
pub enum Delivery {
    /// The tracking connection itself, as a RESP3 push.
    Own(Subscriber),
    /// The connection with this id, as a message on `__redis__:invalidate`.
    Redirect(u64),
}

impl Tracking {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns tracking on (or changes its options) for connection `id`.
    pub fn enable(&self, id: u64, mode: TrackingMode, own: &Subscriber) {
        let mut state = self.lock();
        let (keys, pending) = state.trackers.remove(&id).map(|t| (t.keys, t.pending)).unwrap_or_default();
        state.trackers.insert(id, Tracker { mode, own: own.clone(), keys, pending });
    }

    /// Turns tracking off for `id` (and forgets what it read).
    pub fn disable(&self, id: u64) {
        let mut state = self.lock();
        if let Some(t) = state.trackers.remove(&id) {
            for key in t.keys {
                if let Some(readers) = state.readers.get_mut(&key) {
                    readers.remove(&id);
                    if readers.is_empty() {
                        state.readers.remove(&key);
                    }
                }
            }
        }
    }

    pub fn mode(&self, id: u64) -> Option<TrackingMode> {
        self.lock().trackers.get(&id).map(|t| t.mode.clone())
    }

    /// Connection `id` is about to read `keys` (default mode): it is told
    /// the next time each changes after the read (and of changes while the
    /// read is in flight: see [`Tracking::answered`]). Past [`MAX_TRACKED_KEYS`] keys, as
    /// Redis's `tracking-table-max-keys`, keys are dropped from the table and
    /// their readers told they changed (they may no longer rely on them):
    /// those messages are returned for the caller to send.
    pub fn remember<'a>(&self, id: u64, keys: impl IntoIterator<Item = &'a Bytes>) -> Vec<Invalidation> {
        let mut state = self.lock();
        let State { trackers, readers, .. } = &mut *state;
        let Some(t) = trackers.get_mut(&id) else { return Vec::new() };
        if t.mode.bcast {
            return Vec::new();
        }
        for key in keys {
            *t.pending.entry(key.clone()).or_default() += 1;
            if t.keys.insert(key.clone()) {
                readers.entry(key.clone()).or_default().insert(id);
            }
        }
        let over = readers.len().saturating_sub(MAX_TRACKED_KEYS);
        if over == 0 {
            return Vec::new();
        }
        // Not keys with a read in flight: `changed` would keep them.
        let in_flight = |key: &Bytes, ids: &HashSet<u64>| ids.iter().any(|id| trackers.get(id).is_some_and(|t| t.pending.contains_key(key)));
        let evicted: Vec<Bytes> =
            readers.iter().filter(|(key, ids)| !in_flight(key, ids)).map(|(key, _)| key.clone()).take(over).collect();
        drop(state);
        self.changed(&evicted, None)
    }

    /// The reads of `keys` that connection `id` announced with
    /// [`Tracking::remember`] were answered: from now on the next change of
    /// each ends its tracking, as in Redis.
    pub fn answered(&self, id: u64, keys: &[Bytes]) {
        let mut state = self.lock();
        let Some(t) = state.trackers.get_mut(&id) else { return };
        for key in keys {
            if let Some(n) = t.pending.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    t.pending.remove(key);
                }
            }
        }
    }

    /// [`Tracking::answered`], once this node has applied the entry at
    /// `index`: the answer came from the leader, which had applied that
    /// far, and the entries up to there, applied here later, changed
    /// nothing the reader has not seen. Until then their changes are told
    /// but keep the keys tracked, so the first change after the read still
    /// reaches the reader. Call it only while `index` is not applied, in
    /// step with [`Tracking::applied_through`].
    pub fn answered_at(&self, index: u64, id: u64, keys: Vec<Bytes>) {
        self.lock().deferred.entry(index).or_default().push((id, keys));
    }

    /// This node has applied every entry up to `index` (and delivered their
    /// changes): the answers waiting for it count as answered now.
    pub fn applied_through(&self, index: u64) {
        let mut state = self.lock();
        if state.deferred.first_key_value().is_none_or(|(first, _)| *first > index) {
            return;
        }
        let later = state.deferred.split_off(&(index + 1));
        let due = std::mem::replace(&mut state.deferred, later);
        drop(state);
        for (id, keys) in due.into_values().flatten() {
            self.answered(id, &keys);
        }
    }

    /// Who must hear that `keys` changed by a command of connection
    /// `origin` (a local connection; `None`: another node's, or no
    /// client's), and which of the keys each must hear about. Default-mode
    /// readers are told once, then forget the key.
    pub fn changed(&self, keys: &[Bytes], origin: Option<u64>) -> Vec<Invalidation> {
        let mut state = self.lock();
        if state.trackers.is_empty() {
            return Vec::new();
        }
        let mut per_client: HashMap<u64, Vec<Bytes>> = HashMap::new();
        let State { trackers, readers, .. } = &mut *state;
        for key in keys {
            if let Some(mut ids) = readers.remove(key) {
                ids.retain(|id| {
                    let Some(t) = trackers.get_mut(id) else { return false };
                    if !(t.mode.noloop && origin == Some(*id)) {
                        per_client.entry(*id).or_default().push(key.clone());
                    }
                    // A read in flight keeps it tracked.
                    let keep = t.pending.contains_key(key);
                    if !keep {
                        t.keys.remove(key);
                    }
                    keep
                });
                if !ids.is_empty() {
                    readers.insert(key.clone(), ids);
                }
            }
            for (id, t) in trackers.iter() {
                let wanted = t.mode.bcast
                    && (t.mode.prefixes.is_empty() || t.mode.prefixes.iter().any(|p| key.starts_with(p)))
                    && !(t.mode.noloop && origin == Some(*id));
                if wanted {
                    per_client.entry(*id).or_default().push(key.clone());
                }
            }
        }
        let mut out: Vec<Invalidation> = per_client
            .into_iter()
            .filter_map(|(id, mut keys)| {
                keys.dedup();
                trackers.get(&id).map(|t| Invalidation { to: delivery(t), keys: Some(keys) })
            })
            .collect();
        out.sort_by_key(|i| match &i.to {
            Delivery::Own(_) => 0,
            Delivery::Redirect(id) => *id,
        });
        out
    }

    /// Every tracking connection hears that everything changed (`FLUSHALL`),
    /// and forgets what it read.
    pub fn flushed(&self) -> Vec<Invalidation> {
        let mut state = self.lock();
        let State { trackers, readers, .. } = &mut *state;
        readers.clear();
        let out = trackers.iter_mut().map(|(id, t)| {
            // Reads in flight stay tracked, as in `changed`.
            t.keys = t.pending.keys().cloned().collect();
            for key in &t.keys {
                readers.entry(key.clone()).or_default().insert(*id);
            }
            Invalidation { to: delivery(t), keys: None }
        });
        out.collect()
    }
}

fn delivery(t: &Tracker) -> Delivery {
    match t.mode.redirect {
        Some(id) => Delivery::Redirect(id),
        None => Delivery::Own(t.own.clone()),
    }
}

impl Invalidation {
    pub fn message(&self, via_channel: bool) -> PushMsg {
        PushMsg::Invalidate { keys: self.keys.clone(), via_channel }
    }
}

/// Parses `CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST]
/// [OPTIN] [OPTOUT] [NOLOOP]` (`argv` from `TRACKING` on): `None` for OFF,
/// or Redis 7's error text. `exists` says whether a connection id is live.
pub fn parse_tracking(argv: &[Bytes], exists: impl Fn(u64) -> bool) -> Result<Option<TrackingMode>, String> {
    let syntax = || "ERR syntax error".to_string();
    let on = match argv.get(1).map(|a| a.to_ascii_uppercase()) {
        Some(a) if a == b"ON" => true,
        Some(a) if a == b"OFF" => false,
        _ => return Err(syntax()),
    };
    let mut mode = TrackingMode::default();
    let mut i = 2;
    while i < argv.len() {
        let opt = argv[i].to_ascii_uppercase();
        let value = argv.get(i + 1);
        match (&opt[..], value) {
            (b"REDIRECT", Some(v)) => {
                let id = crate::protocol::parse_i64(v).filter(|n| *n > 0).ok_or_else(|| "ERR value is not an integer or out of range".to_string())?;
                if !exists(id as u64) {
                    return Err("ERR The client ID you want redirect to does not exist".into());
                }
                mode.redirect = Some(id as u64);
                i += 1;
            }
            (b"PREFIX", Some(v)) => {
                mode.prefixes.push(v.clone());
                i += 1;
            }
            (b"BCAST", _) => mode.bcast = true,
            (b"OPTIN", _) => mode.optin = true,
            (b"OPTOUT", _) => mode.optout = true,
            (b"NOLOOP", _) => mode.noloop = true,
            _ => return Err(syntax()),
        }
        i += 1;
    }
    if !on {
        return Ok(None);
    }
    if !mode.prefixes.is_empty() && !mode.bcast {
        return Err("ERR PREFIX option requires BCAST mode to be enabled".into());
    }
    if mode.optin && mode.optout {
        return Err("ERR You can't use both OPTIN and OPTOUT".into());
    }
    if mode.bcast && (mode.optin || mode.optout) {
        return Err("ERR OPTIN and OPTOUT are not compatible with BCAST".into());
    }
    // As Redis: no prefix may begin another (each key would be told twice).
    for (i, a) in mode.prefixes.iter().enumerate() {
        if let Some(b) = mode.prefixes[i + 1..].iter().find(|b| a.starts_with(b) || b.starts_with(a)) {
            return Err(format!(
                "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b)
            ));
        }
    }
    // BCAST without a prefix is the empty prefix (as `TRACKINGINFO` shows it).
    if mode.bcast && mode.prefixes.is_empty() {
        mode.prefixes.push(Bytes::new());
    }
    Ok(Some(mode))
}

/// Whether a read should be tracked, in `mode`, after `CLIENT CACHING`
/// said `caching` (yes/no) for it.
pub fn tracks(mode: &TrackingMode, caching: Option<bool>) -> bool {
    if mode.optin {
        caching == Some(true)
    } else if mode.optout {
        caching != Some(false)
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub() -> Subscriber {
        Subscriber::new(std::sync::Arc::default()).0
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn keys_of(out: &[Invalidation]) -> Vec<Option<Vec<Bytes>>> {
        out.iter().map(|i| i.keys.clone()).collect()
    }

    #[test]
    fn a_reader_hears_once_of_each_key_it_read() {
        let t = Tracking::default();
        t.enable(1, TrackingMode::default(), &sub());
        assert!(t.remember(1, [&b("a"), &b("b")]).is_empty());
        t.answered(1, &[b("a"), b("b")]);
        assert!(t.changed(&[b("c")], None).is_empty(), "a key it never read");
        assert_eq!(keys_of(&t.changed(&[b("a")], None)), vec![Some(vec![b("a")])]);
        assert!(t.changed(&[b("a")], None).is_empty(), "told once, until it reads again");
        t.remember(1, [&b("a")]);
        t.answered(1, &[b("a")]);
        assert_eq!(keys_of(&t.changed(&[b("a"), b("b")], None)), vec![Some(vec![b("a"), b("b")])]);
        // The table is bounded: past its size, keys are dropped, their
        // readers told.
        let many: Vec<Bytes> = (0..MAX_TRACKED_KEYS).map(|i| Bytes::from(i.to_string())).collect();
        assert!(t.remember(1, many.iter()).is_empty());
        t.answered(1, &many);
        let more = [b("new1"), b("new2"), b("new3")];
        let out = t.remember(1, more.iter());
        let told: Vec<&Bytes> = out.iter().flat_map(|i| i.keys.iter().flatten()).collect();
        assert_eq!(told.len(), 3, "the table is back at its size");
        assert!(told.iter().all(|k| !more.contains(k)), "keys of reads in flight are not the ones evicted: {told:?}");
        assert_eq!(t.lock().readers.len(), MAX_TRACKED_KEYS);
        t.disable(1);
        t.enable(1, TrackingMode::default(), &sub());
        assert!(t.changed(&[b("a")], None).is_empty());
    }

    /// A change applied while a read is in flight may precede the read in
    /// the log: it is told, and the key stays tracked until the read is
    /// answered; the next change after that is told too, and ends it.
    #[test]
    fn a_change_during_a_read_in_flight_does_not_end_its_tracking() {
        let t = Tracking::default();
        t.enable(1, TrackingMode { noloop: true, ..Default::default() }, &sub());
        t.remember(1, [&b("lock")]);
        assert_eq!(keys_of(&t.changed(&[b("lock")], None)), vec![Some(vec![b("lock")])], "a renewal by another client");
        assert!(t.changed(&[b("lock")], Some(1)).is_empty(), "NOLOOP: its own change is not told");
        t.answered(1, &[b("lock")]);
        assert_eq!(keys_of(&t.changed(&[b("lock")], None)), vec![Some(vec![b("lock")])], "the release after the read");
        assert!(t.changed(&[b("lock")], None).is_empty(), "and then it is over");
        // Two reads of one key in flight: tracked until both are answered.
        t.remember(1, [&b("k")]);
        t.remember(1, [&b("k")]);
        t.answered(1, &[b("k")]);
        assert_eq!(t.changed(&[b("k")], None).len(), 1);
        assert_eq!(t.changed(&[b("k")], None).len(), 1, "one read still in flight");
        t.answered(1, &[b("k")]);
        assert_eq!(t.changed(&[b("k")], None).len(), 1);
        assert!(t.changed(&[b("k")], None).is_empty());
        // A flush keeps reads in flight tracked.
        t.remember(1, [&b("f")]);
        t.flushed();
        t.answered(1, &[b("f")]);
        assert_eq!(keys_of(&t.changed(&[b("f")], None)), vec![Some(vec![b("f")])]);
    }

    #[test]
    fn an_answer_from_the_leader_counts_once_this_node_applied_what_it_reflects() {
        let t = Tracking::default();
        t.enable(1, TrackingMode::default(), &sub());
        t.remember(1, [&b("k")]);
        // The leader answered at index 10; this node is at 8.
        t.answered_at(10, 1, vec![b("k")]);
        t.applied_through(9);
        assert_eq!(t.changed(&[b("k")], None).len(), 1, "entry 9, applied late: told");
        t.applied_through(10);
        assert_eq!(t.changed(&[b("k")], None).len(), 1, "the first change after the read: told");
        assert!(t.changed(&[b("k")], None).is_empty(), "and then it is over");
        // Answers at several indexes are each released at theirs.
        t.remember(1, [&b("a")]);
        t.remember(1, [&b("c")]);
        t.answered_at(20, 1, vec![b("a")]);
        t.answered_at(30, 1, vec![b("c")]);
        t.applied_through(25);
        t.changed(&[b("a"), b("c")], None);
        assert!(t.changed(&[b("a")], None).is_empty(), "a: answered at 20");
        assert_eq!(t.changed(&[b("c")], None).len(), 1, "c: still waiting for 30");
        t.applied_through(31);
        t.changed(&[b("c")], None);
        assert!(t.changed(&[b("c")], None).is_empty());
        // A connection gone before its answer counts: nothing is left behind.
        t.remember(1, [&b("gone")]);
        t.answered_at(40, 1, vec![b("gone")]);
        t.disable(1);
        t.applied_through(40);
        assert!(t.lock().deferred.is_empty());
    }

    #[test]
    fn tracking_options_as_redis_checks_them() {
        let argv = |s: &str| s.split(' ').map(b).collect::<Vec<_>>();
        let parse = |s: &str| parse_tracking(&argv(s), |id| id == 7);
        assert_eq!(parse("TRACKING ON"), Ok(Some(TrackingMode::default())));
        assert_eq!(parse("TRACKING OFF"), Ok(None));
        let m = parse("TRACKING on BCAST PREFIX a: PREFIX b: NOLOOP REDIRECT 7").unwrap().unwrap();
        assert_eq!((m.bcast, m.prefixes.len(), m.noloop, m.redirect), (true, 2, true, Some(7)));
        assert_eq!(parse("TRACKING ON REDIRECT 8"), Err("ERR The client ID you want redirect to does not exist".into()));
        assert_eq!(parse("TRACKING ON PREFIX a"), Err("ERR PREFIX option requires BCAST mode to be enabled".into()));
        assert_eq!(
            parse("TRACKING ON BCAST PREFIX FOOBAR PREFIX FOO"),
            Err("ERR Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'. Prefixes for a single client must not overlap.".into())
        );
        assert_eq!(parse("TRACKING ON BCAST").unwrap().unwrap().prefixes, vec![Bytes::new()]);
        assert_eq!(parse("TRACKING ON OPTIN OPTOUT"), Err("ERR You can't use both OPTIN and OPTOUT".into()));
        assert_eq!(parse("TRACKING ON BCAST OPTIN"), Err("ERR OPTIN and OPTOUT are not compatible with BCAST".into()));
        assert_eq!(parse("TRACKING MAYBE"), Err("ERR syntax error".into()));
        assert_eq!(parse("TRACKING ON FOO"), Err("ERR syntax error".into()));
        let optin = TrackingMode { optin: true, ..Default::default() };
        assert!(!tracks(&optin, None) && tracks(&optin, Some(true)));
        let optout = TrackingMode { optout: true, ..Default::default() };
        assert!(tracks(&optout, None) && !tracks(&optout, Some(false)));
    }

    #[test]
    fn bcast_prefixes_noloop_and_flush() {
        let t = Tracking::default();
        let mode = TrackingMode { bcast: true, prefixes: vec![b("lock:")], noloop: true, ..Default::default() };
        t.enable(1, mode, &sub());
        t.enable(2, TrackingMode { redirect: Some(9), ..Default::default() }, &sub());
        assert_eq!(keys_of(&t.changed(&[b("lock:1"), b("other")], None)), vec![Some(vec![b("lock:1")])]);
        assert!(t.changed(&[b("lock:1")], Some(1)).is_empty(), "NOLOOP: not its own change");
        t.remember(2, [&b("x")]);
        let out = t.changed(&[b("x")], Some(1));
        assert!(matches!(out[..], [Invalidation { to: Delivery::Redirect(9), .. }]));
        assert_eq!(keys_of(&t.flushed()).len(), 2);
    }
}
