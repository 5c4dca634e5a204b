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
    pub last_command: &'static str,
    /// Waiting in BLPOP/BRPOP.
    pub blocked: bool,
    pub created: Instant,
    pub last_active: Instant,
    /// The ACL user the client authenticated as.
    pub user: String,
}

impl ClientInfo {
    /// One `CLIENT LIST` line, in Redis's `field=value` form.
    pub fn line(&self) -> String {
        let now = Instant::now();
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db=0 sub={} psub={} ssub=0 multi=-1 \
             qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} \
             redir=-1 resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.local_addr.map(|a| a.to_string()).unwrap_or_default(),
            self.name,
            now.duration_since(self.created).as_secs(),
            now.duration_since(self.last_active).as_secs(),
            if self.blocked {
                "b"
            } else if self.channels + self.patterns > 0 {
                "P"
            } else {
                "N"
            },
            self.channels,
            self.patterns,
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
                last_command: "NULL",
                blocked: false,
                created: now,
                last_active: now,
                user: "default".into(),
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

    pub fn pubsub_clients(&self) -> usize {
        self.lock().values().filter(|c| c.channels + c.patterns > 0).count()
    }
}
