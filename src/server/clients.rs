//! The registry of connected clients, for `CLIENT LIST`, `INFO clients` and
//! the `maxclients` limit.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// What `CLIENT LIST` / `CLIENT INFO` show about one connection.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub local_addr: Option<SocketAddr>,
    pub name: String,
    pub lib_name: String,
    pub lib_ver: String,
    pub resp: u8,
    pub channels: usize,
    pub patterns: usize,
    /// Shard channels (`SSUBSCRIBE`).
    pub shard_channels: usize,
    pub last_command: &'static str,
    /// Waiting in BLPOP/BRPOP.
    pub blocked: bool,
    pub created: Instant,
    pub last_active: Instant,
    /// The ACL user the client authenticated as.
    pub user: String,
    /// Wakes the connection to close it (`CLIENT KILL`).
    pub kill: std::sync::Arc<tokio::sync::Notify>,
    /// Ends its blocked command early (`CLIENT UNBLOCK`).
    pub unblock: std::sync::Arc<UnblockSignal>,
    /// Its messages and invalidations not yet written to the socket, in
    /// bytes as the pub/sub output limit counts them (`omem`).
    pub unsent_pushes: std::sync::Arc<AtomicU64>,
}

/// How `CLIENT UNBLOCK` ends a blocked command: as if its timeout had come
/// (the default), or with an `UNBLOCKED` error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unblocked {
    Timeout,
    Error,
}

impl Unblocked {
    /// The error a command unblocked with `ERROR` answers (Redis's text).
    pub const ERROR: &'static str = "UNBLOCKED client unblocked via CLIENT UNBLOCK";
}

/// A connection's `CLIENT UNBLOCK` mailbox. The reason is set only while
/// the client is marked blocked, and cleared when it is marked blocked and
/// when it stops being blocked (both under the registry's lock), so an
/// `UNBLOCK` never reaches a command other than the one it was sent to.
#[derive(Debug, Default)]
pub struct UnblockSignal {
    reason: Mutex<Option<Unblocked>>,
    notify: tokio::sync::Notify,
}

impl UnblockSignal {
    fn set(&self, reason: Option<Unblocked>) {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = reason;
    }

    /// Completes when `CLIENT UNBLOCK` is sent for this client, with how the
    /// blocked command should end. Cancel-safe.
    pub async fn wait(&self) -> Unblocked {
        loop {
            if let Some(reason) = self.reason.lock().unwrap_or_else(|p| p.into_inner()).take() {
                return reason;
            }
            // A notification sent between the check and here is kept as a
            // permit, so this wakes for it; one left over from an earlier
            // block only brings another look.
            self.notify.notified().await;
        }
    }
}

impl ClientInfo {
    /// One `CLIENT LIST` line, in Redis's `field=value` form.
    /// Subscribed to any channel, pattern or shard channel.
    pub fn subscribed(&self) -> bool {
        self.channels + self.patterns + self.shard_channels > 0
    }

    pub fn line(&self) -> String {
        let now = Instant::now();
        let omem = self.unsent_pushes.load(Ordering::Relaxed);
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db=0 sub={} psub={} ssub={} multi=-1 \
             qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 obl=0 oll=0 omem={omem} tot-mem={omem} events=r cmd={} user={} \
             redir=-1 resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.local_addr.map(|a| a.to_string()).unwrap_or_default(),
            self.name,
            now.duration_since(self.created).as_secs(),
            now.duration_since(self.last_active).as_secs(),
            if self.blocked {
                "b"
            } else if self.subscribed() {
                "P"
            } else {
                "N"
            },
            self.channels,
            self.patterns,
            self.shard_channels,
            self.last_command,
            if self.user.is_empty() { "default" } else { &self.user },
            self.resp,
            self.lib_name,
            self.lib_ver,
        )
    }
}

#[derive(Default)]
pub struct ClientRegistry {
    next_id: AtomicU64,
    clients: Mutex<BTreeMap<u64, ClientInfo>>,
}

impl ClientRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ClientInfo>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a connection unless `limit` clients are connected already.
    pub fn register(&self, addr: SocketAddr, local_addr: Option<SocketAddr>, limit: usize) -> Option<u64> {
        let mut clients = self.lock();
        if clients.len() >= limit {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        clients.insert(
            id,
            ClientInfo {
                id,
                addr,
                local_addr,
                name: String::new(),
                lib_name: String::new(),
                lib_ver: String::new(),
                resp: 2,
                channels: 0,
                patterns: 0,
                shard_channels: 0,
                last_command: "NULL",
                blocked: false,
                created: now,
                last_active: now,
                user: "default".into(),
                kill: Default::default(),
                unblock: Default::default(),
                unsent_pushes: Default::default(),
            },
        );
        crate::metrics::set_clients(clients.len());
        Some(id)
    }

    pub fn unregister(&self, id: u64) {
        let mut clients = self.lock();
        clients.remove(&id);
        crate::metrics::set_clients(clients.len());
    }

    pub fn update(&self, id: u64, f: impl FnOnce(&mut ClientInfo)) {
        if let Some(info) = self.lock().get_mut(&id) {
            f(info);
        }
    }

    pub fn get(&self, id: u64) -> Option<ClientInfo> {
        self.lock().get(&id).cloned()
    }

    pub fn all(&self) -> Vec<ClientInfo> {
        self.lock().values().cloned().collect()
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    pub fn blocked_clients(&self) -> usize {
        self.lock().values().filter(|c| c.blocked).count()
    }

    /// `CLIENT KILL` with these filters (all must match): tells each
    /// matching connection to close; how many.
    pub fn kill(&self, matches: impl Fn(&ClientInfo) -> bool) -> usize {
        let clients = self.lock();
        let mut n = 0;
        for c in clients.values().filter(|c| matches(c)) {
            c.kill.notify_one();
            n += 1;
        }
        n
    }

    /// Marks client `id` blocked in a command (`CLIENT LIST` flag `b`), or
    /// no longer blocked; either way a `CLIENT UNBLOCK` not yet acted on is
    /// dropped.
    pub fn set_blocked(&self, id: u64, blocked: bool) {
        if let Some(c) = self.lock().get_mut(&id) {
            c.blocked = blocked;
            c.unblock.set(None);
        }
    }

    /// `CLIENT UNBLOCK id`: ends the blocked command of client `id` for
    /// `reason`; false if no such client is blocked.
    pub fn unblock(&self, id: u64, reason: Unblocked) -> bool {
        let clients = self.lock();
        match clients.get(&id) {
            Some(c) if c.blocked => {
                c.unblock.set(Some(reason));
                c.unblock.notify.notify_one();
                true
            }
            _ => false,
        }
    }

    pub fn pubsub_clients(&self) -> usize {
        self.lock().values().filter(|c| c.subscribed()).count()
    }
}

/// What `CLIENT LIST` shows: every client, or `TYPE normal|pubsub|master|
/// replica|slave` (one type), or `ID id [id ...]` (those clients, in that
/// order). Redis 7's rules and error texts.
pub enum ListFilter {
    All,
    /// Subscribers (true) or the others; `None`: a type no client has here.
    Type(Option<bool>),
    /// Any integer (0 and negative ones select nothing).
    Ids(Vec<i64>),
}

impl ListFilter {
    /// Parses the arguments after `LIST`.
    pub fn parse(args: &[bytes::Bytes]) -> Result<ListFilter, String> {
        let keyword = |i: usize| args.get(i).map(|a| a.to_ascii_lowercase());
        match (args.len(), keyword(0).as_deref()) {
            (0, _) => Ok(ListFilter::All),
            (2, Some(b"type")) => match args[1].to_ascii_lowercase().as_slice() {
                b"normal" => Ok(ListFilter::Type(Some(false))),
                b"pubsub" => Ok(ListFilter::Type(Some(true))),
                // There are no replica connections among clients.
                b"master" | b"replica" | b"slave" => Ok(ListFilter::Type(None)),
                _ => Err(format!("ERR Unknown client type '{}'", String::from_utf8_lossy(&args[1]))),
            },
            (n, Some(b"id")) if n >= 2 => args[1..]
                .iter()
                .map(|a| crate::protocol::parse_i64(a))
                .collect::<Option<Vec<i64>>>()
                .map(ListFilter::Ids)
                .ok_or_else(|| "ERR Invalid client ID".to_string()),
            _ => Err("ERR syntax error".into()),
        }
    }

    /// The clients of `all` it selects.
    pub fn select(&self, mut all: Vec<ClientInfo>) -> Vec<ClientInfo> {
        match self {
            ListFilter::All => all,
            ListFilter::Type(None) => Vec::new(),
            ListFilter::Type(Some(pubsub)) => {
                all.retain(|c| c.subscribed() == *pubsub);
                all
            }
            ListFilter::Ids(ids) => ids.iter().filter_map(|id| all.iter().find(|c| c.id as i64 == *id).cloned()).collect(),
        }
    }
}

/// What `CLIENT KILL` selects: the old form `CLIENT KILL addr:port`, or
/// filters `ID id`, `ADDR ip:port`, `LADDR ip:port`, `USER name`, `TYPE
/// normal|pubsub` (every one must match) and `SKIPME yes|no` (default yes:
/// not the connection that asks).
pub struct KillFilter {
    pub old_form: bool,
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    user: Option<String>,
    pubsub: Option<bool>,
    skip: Option<u64>,
}

impl KillFilter {
    /// Parses the arguments after `KILL`; `me` is the asking connection.
    /// Redis 7's error texts.
    pub fn parse(args: &[bytes::Bytes], me: u64) -> Result<KillFilter, String> {
        let text = |b: &bytes::Bytes| String::from_utf8_lossy(b).into_owned();
        let mut f = KillFilter { old_form: false, id: None, addr: None, laddr: None, user: None, pubsub: None, skip: Some(me) };
        if args.len() == 1 {
            f.old_form = true;
            f.addr = Some(text(&args[0]));
            f.skip = None;
            return Ok(f);
        }
        if args.is_empty() || args.len() % 2 != 0 {
            return Err("ERR syntax error".into());
        }
        for pair in args.chunks(2) {
            let value = text(&pair[1]);
            match text(&pair[0]).to_ascii_lowercase().as_str() {
                "id" => {
                    f.id = Some(
                        crate::protocol::parse_i64(&pair[1])
                            .filter(|n| *n > 0)
                            .ok_or("ERR client-id should be greater than 0")? as u64,
                    )
                }
                "addr" => f.addr = Some(value),
                "laddr" => f.laddr = Some(value),
                "user" => f.user = Some(value),
                "type" => {
                    f.pubsub = Some(match value.to_ascii_lowercase().as_str() {
                        "normal" => false,
                        "pubsub" => true,
                        // There are no replica connections among clients.
                        "master" | "replica" | "slave" => return Ok(KillFilter { id: Some(0), ..f }),
                        _ => return Err(format!("ERR Unknown client type '{value}'")),
                    })
                }
                "skipme" => {
                    f.skip = match value.to_ascii_lowercase().as_str() {
                        "yes" => Some(me),
                        "no" => None,
                        _ => return Err("ERR syntax error".into()),
                    }
                }
                _ => return Err("ERR syntax error".into()),
            }
        }
        Ok(f)
    }

    /// The user named by a `USER` filter.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    pub fn matches(&self, c: &ClientInfo) -> bool {
        self.id.is_none_or(|id| id == c.id)
            && self.addr.as_ref().is_none_or(|a| *a == c.addr.to_string())
            && self.laddr.as_ref().is_none_or(|a| c.local_addr.is_some_and(|l| *a == l.to_string()))
            && self.user.as_ref().is_none_or(|u| *u == c.user)
            && self.pubsub.is_none_or(|p| p == c.subscribed())
            && self.skip != Some(c.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_list_filters_parse_as_redis_7() {
        let args = |s: &str| s.split_whitespace().map(|w| bytes::Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>();
        assert!(matches!(ListFilter::parse(&args("")), Ok(ListFilter::All)));
        assert!(matches!(ListFilter::parse(&args("TYPE pubsub")), Ok(ListFilter::Type(Some(true)))));
        assert!(matches!(ListFilter::parse(&args("type NORMAL")), Ok(ListFilter::Type(Some(false)))));
        assert!(matches!(ListFilter::parse(&args("TYPE replica")), Ok(ListFilter::Type(None))));
        assert!(matches!(ListFilter::parse(&args("ID 3 1 2")), Ok(ListFilter::Ids(ids)) if ids == [3, 1, 2]));
        assert_eq!(ListFilter::parse(&args("TYPE bogus")).err().unwrap(), "ERR Unknown client type 'bogus'");
        assert_eq!(ListFilter::parse(&args("ID abc")).err().unwrap(), "ERR Invalid client ID");
        assert!(matches!(ListFilter::parse(&args("ID 0 -1")), Ok(ListFilter::Ids(ids)) if ids == [0, -1]));
        assert_eq!(ListFilter::parse(&args("ID 1.5")).err().unwrap(), "ERR Invalid client ID");
        for bad in ["ID", "TYPE", "foo", "TYPE normal extra"] {
            assert_eq!(ListFilter::parse(&args(bad)).err().unwrap(), "ERR syntax error", "{bad}");
        }
    }

    #[test]
    fn kill_filters() {
        let reg = ClientRegistry::default();
        let a = reg.register("127.0.0.1:1000".parse().unwrap(), None, 10).unwrap();
        let b = reg.register("127.0.0.1:2000".parse().unwrap(), None, 10).unwrap();
        reg.update(b, |c| c.user = "alice".into());
        let args = |s: &str| s.split(' ').map(|w| bytes::Bytes::copy_from_slice(w.as_bytes())).collect::<Vec<_>>();
        let kill = |s: &str, me: u64| {
            let f = KillFilter::parse(&args(s), me).unwrap();
            reg.kill(|c| f.matches(c))
        };
        assert_eq!(kill("127.0.0.1:2000", a), 1, "the old form");
        assert_eq!(kill("USER alice", b), 0, "SKIPME yes by default");
        assert_eq!(kill("USER alice SKIPME no", b), 1);
        assert_eq!(kill("TYPE normal", a), 1);
        assert_eq!(kill("ID 99", a), 0);
        assert_eq!(kill("TYPE replica", a), 0);
        assert!(KillFilter::parse(&args("ID 0"), a).is_err());
        assert!(KillFilter::parse(&args("TYPE weird"), a).is_err());
        assert!(KillFilter::parse(&args("FOO bar"), a).is_err());
    }
}
