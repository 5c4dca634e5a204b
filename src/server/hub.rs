//! The node-local pub/sub hub: which connection listens to which channel or
//! pattern, delivery of `PUBLISH` messages and keyspace notifications, and the
//! `notify-keyspace-events` setting.
//!
//! Every node delivers the events of the entries it applies to its own
//! subscribers, so notifications arrive in log order on any node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};

use crate::keyspace::{self, glob_match, Event, LeaseEvent, WaitStep};

/// A message for a subscribed connection.
#[derive(Debug, Clone, PartialEq)]
pub enum PushMsg {
    Message { channel: Bytes, payload: Bytes },
    /// A shard channel's message (`SPUBLISH`), sent as `smessage`.
    SMessage { channel: Bytes, payload: Bytes },
    PMessage { pattern: Bytes, channel: Bytes, payload: Bytes },
    /// `CLIENT TRACKING`: these keys (`None`: every key) changed. As a RESP3
    /// `invalidate` push, or `via_channel` as a message of the
    /// `__redis__:invalidate` channel (a redirect's target).
    Invalidate { keys: Option<Vec<Bytes>>, via_channel: bool },
}

impl PushMsg {
    /// Bytes it takes until sent: its data, a little framing (as Redis
    /// counts a reply in an output buffer), and the message itself in the
    /// connection's queue. Without the last, a subscriber that did not read
    /// held about 170 MB of one-byte messages under a 32 MB limit (each
    /// counted 50 bytes, taking over 200), and fifty such subscribers of one
    /// script publishing four million messages stopped a node.
    pub fn size(&self) -> u64 {
        let data = match self {
            PushMsg::Message { channel, payload } | PushMsg::SMessage { channel, payload } => channel.len() + payload.len(),
            PushMsg::PMessage { pattern, channel, payload } => pattern.len() + channel.len() + payload.len(),
            PushMsg::Invalidate { keys, .. } => keys.iter().flatten().map(|k| k.len() + 16).sum(),
        };
        (data + 48 + QUEUED_MESSAGE_BYTES) as u64
    }
}

/// What a message takes in a connection's queue besides its data: the
/// queue's slot, and the shared buffers of its channel and payload.
const QUEUED_MESSAGE_BYTES: usize = std::mem::size_of::<PushMsg>() + 64;

/// Most messages one connection may have waiting, whatever their size (the
/// byte limits below are the ones that normally act).
pub const PUSH_QUEUE: usize = 1_000_000;

/// One class of `client-output-buffer-limit <class> <hard> <soft>
/// <soft-seconds>`, as Redis: a client whose unsent output takes more than
/// `hard` bytes, or more than `soft` bytes for `soft_secs` seconds on end,
/// is disconnected (0: no such limit). Redis's defaults: `normal 0 0 0`,
/// `pubsub 32mb 8mb 60`.
pub struct OutputLimit {
    pub hard: AtomicU64,
    pub soft: AtomicU64,
    pub soft_secs: AtomicU64,
}

impl OutputLimit {
    pub fn new(hard: u64, soft: u64, soft_secs: u64) -> OutputLimit {
        OutputLimit { hard: AtomicU64::new(hard), soft: AtomicU64::new(soft), soft_secs: AtomicU64::new(soft_secs) }
    }

    pub fn get(&self) -> (u64, u64, u64) {
        (self.hard.load(Ordering::Relaxed), self.soft.load(Ordering::Relaxed), self.soft_secs.load(Ordering::Relaxed))
    }

    pub fn set(&self, (hard, soft, soft_secs): (u64, u64, u64)) {
        self.hard.store(hard, Ordering::Relaxed);
        self.soft.store(soft, Ordering::Relaxed);
        self.soft_secs.store(soft_secs, Ordering::Relaxed);
    }
}

impl Default for OutputLimit {
    /// The pub/sub class's.
    fn default() -> Self {
        OutputLimit::new(32 << 20, 8 << 20, 60)
    }
}

/// What one subscriber has waiting: the messages in its queue and those its
/// connection has taken but not yet written to the socket, as Redis counts
/// a client's output buffer (what the kernel has accepted no longer counts).
#[derive(Default)]
struct Backlog {
    bytes: Arc<AtomicU64>,
    over_soft_since: Mutex<Option<std::time::Instant>>,
}

#[derive(Clone)]
pub struct Subscriber {
    tx: mpsc::Sender<PushMsg>,
    overflow: Arc<Notify>,
    limit: Arc<OutputLimit>,
    backlog: Arc<Backlog>,
}

impl Subscriber {
    pub fn new(limit: Arc<OutputLimit>) -> (Subscriber, mpsc::Receiver<PushMsg>, Arc<Notify>) {
        let (tx, rx) = mpsc::channel(PUSH_QUEUE);
        let overflow = Arc::new(Notify::new());
        (Subscriber { tx, overflow: overflow.clone(), limit, backlog: Arc::default() }, rx, overflow)
    }

    /// The connection wrote messages of `size` bytes (as [`PushMsg::size`]
    /// counts them) to its socket: they no longer count.
    pub fn written(&self, size: u64) {
        self.backlog.bytes.fetch_sub(size, Ordering::Relaxed);
    }

    /// The bytes waiting for the socket (`CLIENT LIST`'s `omem`).
    pub fn unsent(&self) -> Arc<AtomicU64> {
        self.backlog.bytes.clone()
    }

    fn over_limit(&self, backlog: u64) -> bool {
        let hard = self.limit.hard.load(Ordering::Relaxed);
        if hard > 0 && backlog > hard {
            return true;
        }
        let soft = self.limit.soft.load(Ordering::Relaxed);
        let mut since = self.backlog.over_soft_since.lock().unwrap_or_else(|p| p.into_inner());
        if soft == 0 || backlog <= soft {
            *since = None;
            return false;
        }
        let first = *since.get_or_insert_with(std::time::Instant::now);
        first.elapsed().as_secs() >= self.limit.soft_secs.load(Ordering::Relaxed)
    }

    pub fn send(&self, msg: PushMsg) -> bool {
        let size = msg.size();
        let backlog = self.backlog.bytes.fetch_add(size, Ordering::Relaxed) + size;
        if self.over_limit(backlog) {
            self.backlog.bytes.fetch_sub(size, Ordering::Relaxed);
            self.overflow.notify_one();
            return false;
        }
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.backlog.bytes.fetch_sub(size, Ordering::Relaxed);
                self.overflow.notify_one();
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.backlog.bytes.fetch_sub(size, Ordering::Relaxed);
                false
            }
        }
    }
}

type ClientId = u64;

#[derive(Default)]
struct Subscriptions {
    channels: Listeners,
    patterns: Listeners,
    /// `SSUBSCRIBE`: shard channels, a namespace apart from `channels`.
    shard_channels: Listeners,
}

/// Who listens to each channel (or pattern, or shard channel).
type Listeners = HashMap<Bytes, HashMap<ClientId, Subscriber>>;

fn join(listeners: &mut Listeners, name: &Bytes, id: ClientId, sub: &Subscriber) {
    listeners.entry(name.clone()).or_default().insert(id, sub.clone());
}

/// Takes `id` off `name`, and `name` off the map once nobody listens.
fn leave(listeners: &mut Listeners, name: &Bytes, id: ClientId) {
    if let Some(set) = listeners.get_mut(name) {
        set.remove(&id);
        if set.is_empty() {
            listeners.remove(name);
        }
    }
}

/// How many listen to `name`.
fn listening(listeners: &Listeners, name: &[u8]) -> usize {
    listeners.get(name).map_or(0, |set| set.len())
}

/// The names listened to, sorted, optionally those matching `pattern`.
fn names(listeners: &Listeners, pattern: Option<&[u8]>) -> Vec<Bytes> {
    let mut out: Vec<Bytes> = listeners.keys().filter(|c| pattern.is_none_or(|p| glob_match(p, c))).cloned().collect();
    out.sort();
    out
}

/// `notify-keyspace-events` classes, one bit per letter.
const CLASSES: &str = "g$lshzxetdmnL";
const ALL_CLASSES: &str = "g$lshzxetdL";
const KEYSPACE: u32 = 1 << 30;
const KEYEVENT: u32 = 1 << 29;

fn class_bit(c: char) -> Option<u32> {
    CLASSES.find(c).map(|i| 1 << i)
}

/// Parses a `notify-keyspace-events` value; `None` if it has an unknown letter.
pub fn parse_notify_flags(s: &str) -> Option<u32> {
    let mut flags = 0;
    for c in s.chars() {
        flags |= match c {
            'A' => ALL_CLASSES.chars().filter_map(class_bit).fold(0, |a, b| a | b),
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            c => class_bit(c)?,
        };
    }
    Some(flags)
}

/// Renders flags the way `CONFIG GET notify-keyspace-events` shows them.
pub fn format_notify_flags(flags: u32) -> String {
    let all = parse_notify_flags("A").unwrap_or(0);
    let mut out = String::new();
    if flags & all == all {
        out.push('A');
    }
    for c in CLASSES.chars() {
        let bit = class_bit(c).unwrap_or(0);
        if flags & bit != 0 && !(flags & all == all && all & bit != 0) {
            out.push(c);
        }
    }
    if flags & KEYSPACE != 0 {
        out.push('K');
    }
    if flags & KEYEVENT != 0 {
        out.push('E');
    }
    out
}

/// Default: lock events on both keyspace and keyevent channels.
pub const DEFAULT_NOTIFY: &str = "KEL";

pub struct Hub {
    subs: Mutex<Subscriptions>,
    notify_flags: AtomicU32,
    /// Clients blocked in BLPOP/BRPOP, by list key: woken by pushes.
    list_waiters: Mutex<HashMap<Bytes, Vec<Arc<ListWake>>>>,
    /// How many of them are stream readers (every key event looks for them
    /// while there are any).
    stream_waiters: AtomicUsize,
    /// Connections of this node blocked in `LOCK.ACQUIRE ... WAIT`: where
    /// the end of their wait (command number, outcome) is sent.
    lock_waits: Mutex<HashMap<keyspace::ClientId, mpsc::UnboundedSender<(u64, WaitStep)>>>,
    /// `client-output-buffer-limit pubsub` and `normal`.
    pubsub_limit: Arc<OutputLimit>,
    normal_limit: Arc<OutputLimit>,
    /// `CLIENT TRACKING` connections.
    pub tracking: super::tracking::Tracking,
    /// This node's id and boot, which origins of its own connections carry.
    local: std::sync::OnceLock<(u64, u64)>,
}

/// A connection's registration for the end of its lock waits; unregisters
/// when dropped.
pub struct LockWait<'a> {
    hub: &'a Hub,
    client: keyspace::ClientId,
    pub outcomes: mpsc::UnboundedReceiver<(u64, WaitStep)>,
}

impl Drop for LockWait<'_> {
    fn drop(&mut self) {
        self.hub.lock_waits.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.client);
    }
}

/// A blocked client's registration; unregisters when dropped.
pub struct ListWaiter<'a> {
    hub: &'a Hub,
    keys: Vec<Bytes>,
    pub wake: Arc<ListWake>,
}

/// How a blocked client is woken, and by which of its keys first.
#[derive(Default)]
pub struct ListWake {
    pub notify: Notify,
    first: Mutex<Option<Bytes>>,
    /// A blocked `XREAD` or `XREADGROUP`: woken by any change to its keys
    /// (a deleted stream or destroyed group answers `XREADGROUP` with an
    /// error), not only by what feeds a pop.
    streams: bool,
}

impl ListWake {
    /// The key whose push woke the client first since the last call (the
    /// first of an entry's pushes, when one entry pushed to several).
    pub fn take_first(&self) -> Option<Bytes> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn wake(&self, key: &Bytes) {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| key.clone());
        self.notify.notify_one();
    }
}

impl Drop for ListWaiter<'_> {
    fn drop(&mut self) {
        if self.wake.streams {
            self.hub.stream_waiters.fetch_sub(1, Ordering::Relaxed);
        }
        let mut waiters = self.hub.list_waiters.lock().unwrap_or_else(|p| p.into_inner());
        for key in &self.keys {
            if let Some(list) = waiters.get_mut(key) {
                list.retain(|n| !Arc::ptr_eq(n, &self.wake));
                if list.is_empty() {
                    waiters.remove(key);
                }
            }
        }
    }
}

impl Default for Hub {
    fn default() -> Self {
        Self::new()
    }
}

impl Hub {
    pub fn new() -> Hub {
        Hub {
            subs: Mutex::new(Subscriptions::default()),
            notify_flags: AtomicU32::new(parse_notify_flags(DEFAULT_NOTIFY).unwrap_or(0)),
            list_waiters: Mutex::new(HashMap::new()),
            stream_waiters: AtomicUsize::new(0),
            lock_waits: Mutex::new(HashMap::new()),
            pubsub_limit: Arc::default(),
            normal_limit: Arc::new(OutputLimit::new(0, 0, 0)),
            tracking: Default::default(),
            local: Default::default(),
        }
    }

    /// Says which origins are this node's own connections (`CLIENT
    /// TRACKING ... NOLOOP`).
    pub fn set_local_identity(&self, node: u64, boot: u64) {
        let _ = self.local.set((node, boot));
    }

    /// The pub/sub output limits every subscriber of this node obeys.
    pub fn pubsub_limit(&self) -> &Arc<OutputLimit> {
        &self.pubsub_limit
    }

    /// The output limits of clients that do not subscribe.
    pub fn normal_limit(&self) -> &Arc<OutputLimit> {
        &self.normal_limit
    }

    /// Registers `client` (a connection of this node) for the end of its
    /// lock waits. Register before proposing the `WAIT`, so that a grant
    /// applied right after it is not missed.
    pub fn await_lock(&self, client: keyspace::ClientId) -> LockWait<'_> {
        let (tx, outcomes) = mpsc::unbounded_channel();
        self.lock_waits.lock().unwrap_or_else(|p| p.into_inner()).insert(client, tx);
        LockWait { hub: self, client, outcomes }
    }

    /// Registers interest in pushes to `keys`. Register before trying to pop,
    /// so a push in between is not missed.
    pub fn wait_for_lists(&self, keys: &[Bytes]) -> ListWaiter<'_> {
        self.register_waiter(keys, false)
    }

    /// Registers a blocked `XREAD` or `XREADGROUP`: woken by any change to
    /// `keys` (see [`ListWake`]).
    pub fn wait_for_streams(&self, keys: &[Bytes]) -> ListWaiter<'_> {
        self.stream_waiters.fetch_add(1, Ordering::Relaxed);
        self.register_waiter(keys, true)
    }

    fn register_waiter(&self, keys: &[Bytes], streams: bool) -> ListWaiter<'_> {
        let wake = Arc::new(ListWake { streams, ..ListWake::default() });
        let mut waiters = self.list_waiters.lock().unwrap_or_else(|p| p.into_inner());
        for key in keys {
            waiters.entry(key.clone()).or_default().push(wake.clone());
        }
        ListWaiter { hub: self, keys: keys.to_vec(), wake }
    }

    /// Wakes the clients blocked on `key`: all if the event `feeds_pop`,
    /// else the stream readers.
    fn wake_list_waiters(&self, key: &Bytes, feeds_pop: bool) {
        let waiters = self.list_waiters.lock().unwrap_or_else(|p| p.into_inner());
        for w in waiters.get(key).into_iter().flatten().filter(|w| feeds_pop || w.streams) {
            w.wake(key);
        }
    }

    /// Wakes every stream reader (`FLUSHALL`).
    fn wake_all_stream_waiters(&self) {
        let waiters = self.list_waiters.lock().unwrap_or_else(|p| p.into_inner());
        for (key, list) in waiters.iter() {
            list.iter().filter(|w| w.streams).for_each(|w| w.wake(key));
        }
    }

    fn lock(&self) -> MutexGuard<'_, Subscriptions> {
        self.subs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn notify_flags(&self) -> u32 {
        self.notify_flags.load(Ordering::Relaxed)
    }

    pub fn set_notify_flags(&self, flags: u32) {
        self.notify_flags.store(flags, Ordering::Relaxed);
        if flags & class_bit('n').unwrap_or(0) != 0 {
            crate::commands::NEW_KEY_EVENTS.store(true, Ordering::Relaxed);
        }
    }

    pub fn subscribe(&self, id: ClientId, sub: &Subscriber, channel: &Bytes) {
        join(&mut self.lock().channels, channel, id, sub);
    }

    pub fn unsubscribe(&self, id: ClientId, channel: &Bytes) {
        leave(&mut self.lock().channels, channel, id);
    }

    pub fn ssubscribe(&self, id: ClientId, sub: &Subscriber, channel: &Bytes) {
        join(&mut self.lock().shard_channels, channel, id, sub);
    }

    pub fn sunsubscribe(&self, id: ClientId, channel: &Bytes) {
        leave(&mut self.lock().shard_channels, channel, id);
    }

    /// Delivers a shard channel's message; how many subscribers received it.
    pub fn spublish(&self, channel: &Bytes, payload: &Bytes) -> usize {
        let subs = self.lock();
        let Some(set) = subs.shard_channels.get(channel) else { return 0 };
        set.values()
            .map(|sub| sub.send(PushMsg::SMessage { channel: channel.clone(), payload: payload.clone() }) as usize)
            .sum()
    }

    pub fn psubscribe(&self, id: ClientId, sub: &Subscriber, pattern: &Bytes) {
        join(&mut self.lock().patterns, pattern, id, sub);
    }

    pub fn punsubscribe(&self, id: ClientId, pattern: &Bytes) {
        leave(&mut self.lock().patterns, pattern, id);
    }

    /// How many subscriptions of this node a message on `channel` goes to:
    /// its subscribers and those of the patterns it matches, or, for a shard
    /// channel, its shard subscribers.
    pub fn receivers(&self, channel: &[u8], shard: bool) -> usize {
        let subs = self.lock();
        if shard {
            return listening(&subs.shard_channels, channel);
        }
        let matched: usize =
            subs.patterns.iter().filter(|(pattern, _)| glob_match(pattern, channel)).map(|(_, set)| set.len()).sum();
        listening(&subs.channels, channel) + matched
    }

    /// Delivers a message; returns how many subscriptions received it.
    pub fn publish(&self, channel: &Bytes, payload: &Bytes) -> usize {
        let subs = self.lock();
        let mut delivered = 0;
        if let Some(set) = subs.channels.get(channel) {
            for sub in set.values() {
                let msg = PushMsg::Message { channel: channel.clone(), payload: payload.clone() };
                delivered += sub.send(msg) as usize;
            }
        }
        for (pattern, set) in &subs.patterns {
            if glob_match(pattern, channel) {
                for sub in set.values() {
                    let msg = PushMsg::PMessage { pattern: pattern.clone(), channel: channel.clone(), payload: payload.clone() };
                    delivered += sub.send(msg) as usize;
                }
            }
        }
        delivered
    }

    fn notify_key(&self, flags: u32, class: char, event: &str, key: &Bytes) {
        if flags & class_bit(class).unwrap_or(0) == 0 {
            return;
        }
        if flags & KEYSPACE != 0 {
            let mut channel = b"__keyspace@0__:".to_vec();
            channel.extend_from_slice(key);
            self.publish(&Bytes::from(channel), &Bytes::copy_from_slice(event.as_bytes()));
        }
        if flags & KEYEVENT != 0 {
            let channel = Bytes::from(format!("__keyevent@0__:{event}"));
            self.publish(&channel, key);
        }
    }

    /// `lock.handoff`: on the key's keyspace channel the event name and the
    /// new holder's fencing token (`lock.handoff 42`); on the keyevent
    /// channel the key, as for every event.
    fn notify_handoff(&self, flags: u32, key: &Bytes, token: u64) {
        if flags & class_bit('L').unwrap_or(0) == 0 {
            return;
        }
        if flags & KEYSPACE != 0 {
            let mut channel = b"__keyspace@0__:".to_vec();
            channel.extend_from_slice(key);
            self.publish(&Bytes::from(channel), &Bytes::from(format!("lock.handoff {token}")));
        }
        if flags & KEYEVENT != 0 {
            self.publish(&Bytes::from_static(b"__keyevent@0__:lock.handoff"), key);
        }
    }

    /// Delivers the events of applied entries. Returns the receivers of the
    /// `PUBLISH` messages among them.
    /// `origin` is the client whose command made them, if any.
    pub fn dispatch(&self, events: Vec<Event>, origin: Option<keyspace::ClientId>) -> usize {
        let flags = self.notify_flags();
        let mut published = 0;
        let mut changed: Vec<Bytes> = Vec::new();
        for event in events {
            match event {
                Event::Publish { channel, message } => published += self.publish(&channel, &message),
                Event::SPublish { channel, message } => published += self.spublish(&channel, &message),
                Event::Key { class, name, key } => {
                    let feeds_pop = may_feed_a_blocked_pop(class, name);
                    if feeds_pop || self.stream_waiters.load(Ordering::Relaxed) > 0 {
                        self.wake_list_waiters(&key, feeds_pop);
                    }
                    self.notify_key(flags, class, name, &key);
                    changed.push(key);
                }
                Event::Lease { kind, key, ttl_ms, held_ms, .. } => {
                    crate::metrics::record_lease(kind, ttl_ms, held_ms);
                    if matches!(kind, LeaseEvent::Released | LeaseEvent::Expired) {
                        super::top::record(super::top::Ranking::HoldMs, &key, held_ms);
                    }
                    self.notify_key(flags, 'L', kind.name(), &key);
                    changed.push(key);
                }
                Event::Flushed => {
                    if self.stream_waiters.load(Ordering::Relaxed) > 0 {
                        self.wake_all_stream_waiters();
                    }
                    let all = self.tracking.flushed();
                    self.invalidate(all);
                }
                // For MONITOR, shown before the node's events are dispatched.
                Event::ScriptCall { .. } => {}
                Event::Wait { client, seq, key, step, waited_ms, .. } => {
                    match step {
                        WaitStep::Granted { token } => {
                            crate::metrics::record_wait(true, waited_ms);
                            self.notify_handoff(flags, &key, token);
                        }
                        WaitStep::TimedOut => crate::metrics::record_wait(false, waited_ms),
                        WaitStep::Queued { .. } => {
                            super::top::record(super::top::Ranking::Waits, &key, 1);
                            continue;
                        }
                        WaitStep::Left => continue,
                    }
                    let waits = self.lock_waits.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(tx) = waits.get(&client) {
                        let _ = tx.send((seq, step));
                    }
                }
            }
        }
        if !changed.is_empty() {
            let local = self.local.get().copied();
            let origin = origin.filter(|o| local == Some((o.node, o.boot))).map(|o| o.conn);
            let messages = self.tracking.changed(&changed, origin);
            self.invalidate(messages);
        }
        published
    }

    /// Connection `id` (tracking) is about to read `keys` (see
    /// `Tracking::remember`).
    pub fn remember_reads<'a>(&self, id: u64, keys: impl IntoIterator<Item = &'a Bytes>) {
        let evicted = self.tracking.remember(id, keys);
        self.invalidate(evicted);
    }

    /// The reads announced with [`Hub::remember_reads`] were answered.
    pub fn reads_answered(&self, id: u64, keys: &[Bytes]) {
        if !keys.is_empty() {
            self.tracking.answered(id, keys);
        }
    }

    /// Sends `CLIENT TRACKING` messages: to the tracking connection, or to
    /// its redirect's target if that one listens on `__redis__:invalidate`.
    fn invalidate(&self, messages: Vec<super::tracking::Invalidation>) {
        use super::tracking::{Delivery, INVALIDATE_CHANNEL};
        for m in messages {
            match &m.to {
                Delivery::Own(sub) => {
                    sub.send(m.message(false));
                }
                Delivery::Redirect(id) => {
                    let target = self.lock().channels.get(INVALIDATE_CHANNEL.as_bytes()).and_then(|s| s.get(id).cloned());
                    if let Some(sub) = target {
                        sub.send(m.message(true));
                    }
                }
            }
        }
    }

    /// Channels with at least one subscriber, optionally matching `pattern`.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        names(&self.lock().channels, pattern)
    }

    pub fn numsub(&self, channel: &[u8]) -> usize {
        listening(&self.lock().channels, channel)
    }

    /// Shard channels with at least one subscriber, optionally matching
    /// `pattern`.
    pub fn shard_channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        names(&self.lock().shard_channels, pattern)
    }

    pub fn shard_numsub(&self, channel: &[u8]) -> usize {
        listening(&self.lock().shard_channels, channel)
    }

    pub fn numpat(&self) -> usize {
        self.lock().patterns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[test]
    fn flags_round_trip() {
        assert_eq!(format_notify_flags(parse_notify_flags("KEA").unwrap()), "AKE");
        assert_eq!(format_notify_flags(parse_notify_flags("Kgx").unwrap()), "gxK");
        assert_eq!(format_notify_flags(parse_notify_flags("").unwrap()), "");
        assert_eq!(format_notify_flags(parse_notify_flags(DEFAULT_NOTIFY).unwrap()), "LKE");
        assert!(parse_notify_flags("KQ").is_none());
    }

    #[test]
    fn keyspace_notifications_follow_flags() {
        let hub = Hub::new();
        let (sub, mut rx, _) = Subscriber::new(Arc::default());
        hub.subscribe(1, &sub, &Bytes::from("__keyspace@0__:k"));
        hub.psubscribe(1, &sub, &Bytes::from("__keyevent@0__:*"));
        // Default flags: lock events only.
        hub.dispatch(vec![Event::Key { class: 'g', name: "del", key: Bytes::from("k") }], None);
        assert!(rx.try_recv().is_err());
        hub.dispatch(vec![Event::Lease {
            kind: crate::keyspace::LeaseEvent::Released,
            key: Bytes::from("k"),
            owner: Bytes::from("o"),
            token: 1,
            ttl_ms: 1,
            held_ms: 1,
        }], None);
        assert_eq!(
            rx.try_recv().unwrap(),
            PushMsg::Message { channel: Bytes::from("__keyspace@0__:k"), payload: Bytes::from("lock.released") }
        );
        assert_eq!(
            rx.try_recv().unwrap(),
            PushMsg::PMessage {
                pattern: Bytes::from("__keyevent@0__:*"),
                channel: Bytes::from("__keyevent@0__:lock.released"),
                payload: Bytes::from("k")
            }
        );
        hub.set_notify_flags(parse_notify_flags("KA").unwrap());
        hub.dispatch(vec![Event::Key { class: 'g', name: "del", key: Bytes::from("k") }], None);
        assert_eq!(rx.try_recv().unwrap(), PushMsg::Message { channel: Bytes::from("__keyspace@0__:k"), payload: Bytes::from("del") });
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_message_counts_against_the_limit_until_written() {
        let msg = PushMsg::Message { channel: Bytes::from("c"), payload: Bytes::from(vec![b'x'; 100]) };
        let size = msg.size();
        let (sub, mut rx, overflow) = Subscriber::new(Arc::new(OutputLimit::new(3 * size, 0, 0)));
        assert!(sub.send(msg.clone()));
        assert!(sub.send(msg.clone()));
        // Taken from the queue by the connection, not yet written: it counts.
        rx.try_recv().unwrap();
        assert_eq!(sub.unsent().load(Ordering::Relaxed), 2 * size);
        assert!(sub.send(msg.clone()));
        assert!(!sub.send(msg.clone()), "a fourth message passed a limit of three");
        assert!(overflow.notified().now_or_never().is_some(), "the connection was not told");
        // Written: room again.
        sub.written(size);
        assert_eq!(sub.unsent().load(Ordering::Relaxed), 2 * size);
        assert!(sub.send(msg));
    }

    #[test]
    fn publish_counts_receivers_and_unsubscribe_stops_delivery() {
        let hub = Hub::new();
        let (a, _ra, _) = Subscriber::new(Arc::default());
        let (b, _rb, _) = Subscriber::new(Arc::default());
        let ch = Bytes::from("news");
        hub.subscribe(1, &a, &ch);
        hub.subscribe(2, &b, &ch);
        hub.psubscribe(2, &b, &Bytes::from("n*"));
        assert_eq!(hub.publish(&ch, &Bytes::from("x")), 3);
        assert_eq!(hub.numsub(b"news"), 2);
        hub.unsubscribe(1, &ch);
        hub.punsubscribe(2, &Bytes::from("n*"));
        assert_eq!(hub.publish(&ch, &Bytes::from("x")), 1);
        assert_eq!(hub.channels(Some(b"n*")), vec![ch]);
    }
}

/// Whether the key event `name` may have put elements where a blocked
/// `BLPOP`/`BLMOVE`/`BZPOPMIN` ... can take them: a push, a sorted-set add,
/// a key renamed, copied or stored there.
fn may_feed_a_blocked_pop(class: char, name: &str) -> bool {
    match class {
        'l' => name.ends_with("push") || name == "linsert" || name == "sortstore",
        'z' => matches!(name, "zadd" | "zincr") || name.ends_with("store"),
        'g' => matches!(name, "rename_to" | "copy_to" | "restore"),
        // A blocked XREAD or XREADGROUP is woken by any change to its keys
        // (`ListWake::streams`).
        't' => name == "xadd",
        _ => false,
    }
}
