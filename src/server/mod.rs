//! The node: client listener, connections, the pub/sub hub, the expiry timer,
//! and the wiring of storage, consensus and metrics. Connection state (protocol
//! version, subscriptions, name) lives here and never enters the log.

mod acllog;
mod auth;
mod clients;
mod connection;
mod dashboard;
mod expiry;
mod hub;
mod info;
mod latency;
mod memory;
mod monitor;
mod params;
mod pause;
mod slowlog;
mod stats;
mod top;
mod tracking;
mod waiting;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::broadcast;

use crate::clock::LogClock;
use crate::config::Config;
use crate::keyspace::Event;
use crate::raft::{Consensus, NodeInfo, RaftSettings};
use crate::storage::disk::DiskReserve;
use crate::storage::Storage;

pub use clients::{ClientInfo, ClientRegistry};
pub use memory::parse_bytes;

/// The stack of every runtime thread. Log entries are applied on these
/// threads, scripts included: every recursion a client controls is bounded
/// (a script's reply depth, Lua's own C-call limit, the pattern matcher's
/// depth), and this size leaves those bounds a wide margin. It is address
/// space; only the pages a thread touches take memory.
pub const WORKER_STACK_BYTES: usize = 64 * 1024 * 1024;
pub use hub::{format_notify_flags, parse_notify_flags, Hub, PushMsg, Subscriber};

/// A failure that stops the node.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    #[error(transparent)]
    Raft(#[from] crate::raft::StartError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
}

/// Everything the connections share.
pub struct Node {
    pub config: Config,
    pub auth: auth::Auth,
    pub consensus: Arc<Consensus>,
    pub hub: Arc<Hub>,
    pub clients: ClientRegistry,
    pub clock: Arc<LogClock>,
    pub started: Instant,
    /// `CONFIG SET maxclients` takes effect for new connections.
    pub maxclients: AtomicUsize,
    /// `CONFIG SET timeout`: seconds after which an idle client is
    /// disconnected (0: never), as Redis; subscribers are exempt.
    pub idle_timeout_secs: std::sync::atomic::AtomicU64,
    /// `maxmemory` (noeviction).
    pub memory: memory::MemoryLimit,
    pub total_commands: std::sync::atomic::AtomicU64,
    pub total_connections: std::sync::atomic::AtomicU64,
    /// TLS, when a TLS port or `--tls-cluster` is configured.
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// Redis parameters kept only to be shown back (`CONFIG SET`/`GET`).
    pub params: params::StoredParams,
    /// `SLOWLOG`: this node's slow commands.
    pub slowlog: slowlog::SlowLog,
    /// `CLIENT PAUSE`: this node's clients' commands held.
    pub pause: pause::Pause,
    /// `MONITOR`: the connections watching this node's commands.
    pub monitors: monitor::Monitors,
    /// `ACL LOG`: this node's refusals.
    pub acllog: acllog::AclLog,
    /// `LATENCY`: this node's latency monitor and command histograms.
    pub latency: latency::Latency,
    /// `INFO commandstats` and `errorstats`.
    pub stats: stats::Stats,
    /// `SHUTDOWN`: stops the node as SIGTERM does.
    pub stop: tokio::sync::Notify,
}

/// Longest a client may take over its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Most TLS handshakes in progress at once; a connection beyond them is
/// closed at once.
const MAX_HANDSHAKES: usize = 1024;

/// Runs a node until Ctrl-C or SIGTERM.
pub async fn run(mut config: Config) -> Result<(), ServerError> {
    // Only its digest is kept.
    let auth = auth::Auth::new(config.requirepass.take().as_deref(), config.protected_mode);
    // From the start: a SIGHUP while the node starts must not stop it.
    #[cfg(unix)]
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    #[cfg(not(unix))]
    let hangups = None::<()>;
    let tls = match config.tls_files() {
        Some(files) => Some(crate::tls::Tls::new(files, config.tls_cluster).map_err(ServerError::Config)?),
        None => None,
    };
    let storage = Arc::new(Storage::open(&config.data_dir)?);
    let disk = Arc::new(DiskReserve::new(config.data_dir.clone(), config.min_free_disk));
    disk.guard_snapshots();
    let clock = Arc::new(LogClock::system());
    let hub = Arc::new(Hub::new());
    let sink_hub = hub.clone();
    let initial_members = config
        .initial_members()
        .map_err(ServerError::Config)?
        .into_iter()
        .map(|(id, (peer_addr, client_addr))| (id, NodeInfo { peer_addr, client_addr }))
        .collect();
    let monitors = monitor::Monitors::default();
    let settings = RaftSettings {
        node_id: config.node_id,
        node: NodeInfo { peer_addr: config.advertised_peer_addr(), client_addr: config.client_addr() },
        initial_members,
        cluster_secret: config.cluster_secret.clone(),
        heartbeat_ms: config.heartbeat_ms,
        election_timeout_ms: config.election_timeout_ms,
        snapshot_logs: config.snapshot_logs,
        snapshot_log_bytes: config.snapshot_log_bytes,
        request_timeout: Duration::from_millis(config.request_timeout_ms),
        audit_log: config.audit_log.clone(),
        skip_entries: config.skip_entry.iter().copied().collect(),
        tls: tls.clone().filter(|t| t.cluster()),
        disk,
        busy_poll: Duration::from_micros(config.busy_poll_us),
        monitors: monitors.watching(),
    };
    if config.force_new_cluster {
        let forced = crate::raft::recovery::force_new_cluster(
            &config.data_dir,
            storage.clone(),
            clock.clone(),
            config.node_id,
            settings.node.clone(),
            settings.skip_entries.clone(),
            match &settings.audit_log {
                Some(path) => Some(Arc::new(
                    crate::raft::AuditLog::open(path, config.node_id)
                        .map_err(|e| ServerError::Config(format!("audit log {}: {e}", path.display())))?,
                )),
                None => None,
            },
            &config.cluster_secret,
        )
        .await
        .map_err(|e| ServerError::Config(format!("--force-new-cluster: {e}")))?;
        if forced.changed {
            tracing::warn!(
                node_id = config.node_id,
                replayed = forced.replayed,
                last_index = forced.last_index,
                previous_members = ?forced.previous_members,
                "--force-new-cluster: this node is now a one-node cluster; never start the old members with their data again; remove the flag"
            );
        } else {
            tracing::warn!("--force-new-cluster: this node is a one-node cluster of itself already; nothing changed; remove the flag");
        }
    }
    crate::raft::recovery::remember_secret(&storage, &config.cluster_secret)
        .map_err(|e| ServerError::Config(format!("cannot record the cluster secret's digest: {e}")))?;
    let peer_listener = TcpListener::bind(config.peer_addr())
        .await
        .map_err(|source| ServerError::Listen { addr: config.peer_addr(), source })?;
    let sink_monitors = monitors.clone();
    let sink = Arc::new(move |events: Vec<Event>, origin| {
        for event in &events {
            if let Event::ScriptCall { shown } = event {
                sink_monitors.feed_script_call(shown);
            }
        }
        sink_hub.dispatch(events, origin)
    });
    // The recorder first, so that what Raft records as it starts is kept.
    let metrics_addr = config.metrics_socket().map_err(ServerError::Config)?;
    let metrics = metrics_addr.map(|_| crate::metrics::install()).transpose().map_err(ServerError::Config)?;
    let consensus = Consensus::start(settings, peer_listener, storage.clone(), clock.clone(), sink).await?;
    let applied_hub = hub.clone();
    consensus.on_applied(Box::new(move |index| applied_hub.tracking.applied_through(index)));
    let me = consensus.client_id(0);
    hub.set_local_identity(me.node, me.boot);
    if let (Some(addr), Some(handle)) = (metrics_addr, metrics) {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Listen { addr: addr.to_string(), source })?;
        tokio::spawn(dashboard::serve(listener, handle));
    }
    let mut listeners = Vec::new();
    for (addr, tls) in [(config.plain_addr(), None), (config.tls_addr(), tls.clone())] {
        let Some(addr) = addr else { continue };
        let listener =
            TcpListener::bind(&addr).await.map_err(|source| ServerError::Listen { addr: addr.clone(), source })?;
        listeners.push((listener, tls));
    }
    tracing::info!(
        node_id = config.node_id,
        clients = %config.plain_addr().unwrap_or_else(|| "off".into()),
        tls_clients = %config.tls_addr().unwrap_or_else(|| "off".into()),
        tls_peers = config.tls_cluster,
        peers = %config.peer_addr(),
        metrics = %metrics_addr.map(|a| a.to_string()).unwrap_or_else(|| "off".into()),
        data_dir = %config.data_dir.display(),
        "raftlock started"
    );
    let node = Arc::new(Node {
        maxclients: AtomicUsize::new(config.maxclients),
        idle_timeout_secs: Default::default(),
        memory: Default::default(),
        config,
        auth,
        consensus: consensus.clone(),
        hub,
        clients: ClientRegistry::default(),
        clock,
        started: Instant::now(),
        total_commands: Default::default(),
        total_connections: Default::default(),
        tls: tls.clone(),
        params: params::StoredParams::default(),
        slowlog: slowlog::SlowLog::default(),
        pause: pause::Pause::default(),
        monitors,
        acllog: acllog::AclLog::default(),
        latency: latency::Latency::default(),
        stats: stats::Stats::default(),
        stop: tokio::sync::Notify::new(),
    });
    let (shutdown_tx, _) = broadcast::channel::<()>(1);
    if let Some(path) = node.config.aclfile.clone() {
        tokio::spawn(load_acl_file_at_start(consensus.clone(), path));
    }
    let expiry = tokio::spawn(expiry::run(consensus.clone(), shutdown_tx.subscribe()));
    {
        // Holds the node weakly, so that shutdown is never kept waiting.
        let node = Arc::downgrade(&node);
        let mut shutdown = shutdown_tx.subscribe();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(memory::SAMPLE_EVERY);
            loop {
                tokio::select! {
                    _ = shutdown.recv() => return,
                    _ = tick.tick() => {}
                }
                let Some(node) = node.upgrade() else { return };
                if node.memory.limit() > 0 {
                    node.memory.sample();
                }
                node.consensus.disk().sample();
            }
        });
    }
    let loops: Vec<_> = listeners
        .into_iter()
        .map(|(listener, tls)| tokio::spawn(accept_loop(node.clone(), listener, tls, shutdown_tx.clone())))
        .collect();
    let reloads = tokio::spawn(reload_on_sighup(tls, hangups));
    tokio::select! {
        _ = shutdown_signal() => {}
        _ = node.stop.notified() => tracing::info!("SHUTDOWN asked by a client"),
    }
    reloads.abort();
    loops.iter().for_each(|l| l.abort());
    for l in loops {
        let _ = l.await;
    }
    tracing::info!("shutting down");
    let _ = shutdown_tx.send(());
    let _ = expiry.await;
    consensus.shutdown().await;
    // Give connections a moment to write their last replies.
    let deadline = Instant::now() + Duration::from_secs(2);
    while node.clients.count() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(node);
    drop(consensus);
    // Close RocksDB here, not during process exit: wait until the log store,
    // its fsync thread and the state machine have let go of it.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Arc::strong_count(&storage) > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    storage.stop_background_work();
    if Arc::strong_count(&storage) > 1 {
        tracing::warn!("storage still in use at shutdown; background work stopped");
    }
    drop(storage);
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `--aclfile`: the users of a cluster that has none yet come from the file
/// (through the log, so every node has them). Once the cluster has users,
/// the file changes them only by `ACL LOAD`.
async fn load_acl_file_at_start(consensus: Arc<Consensus>, path: std::path::PathBuf) {
    let contents = match tokio::fs::read_to_string(&path).await {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            tracing::error!("cannot read the ACL file {}: {e}", path.display());
            return;
        }
    };
    let users = match crate::commands::acl::parse_acl_file(&contents) {
        Ok(users) => users,
        Err(e) => {
            tracing::error!("the ACL file {} is not valid, not loaded: {e}", path.display());
            return;
        }
    };
    if !consensus.wait_for_leader(Duration::from_secs(60)).await || !consensus.acl().1.users.is_empty() {
        return;
    }
    // Decided when applied: a cluster that has users keeps them.
    let op = crate::commands::acl::AclOp::LoadIfEmpty { users };
    match consensus.execute(0, crate::commands::Request::Acl(op)).await {
        Ok(crate::protocol::Reply::Error(e)) => tracing::info!("the ACL file {} was not loaded: {e}", path.display()),
        Ok(_) => tracing::info!("loaded the ACL users of {}", path.display()),
        Err(e) => tracing::error!("could not load the ACL file {}: {e}", path.display()),
    }
}

/// SIGHUP reads the TLS certificates again (and, as in Redis, never stops
/// the node).
#[cfg(unix)]
async fn reload_on_sighup(tls: Option<Arc<crate::tls::Tls>>, hangups: Option<tokio::signal::unix::Signal>) {
    let Some(mut hup) = hangups else { return };
    while hup.recv().await.is_some() {
        match &tls {
            Some(tls) => match tls.reload() {
                Ok(()) => tracing::info!("SIGHUP: TLS certificates reloaded"),
                Err(e) => tracing::error!("SIGHUP: TLS certificates not reloaded, the old ones stay: {e}"),
            },
            None => tracing::info!("SIGHUP ignored: no TLS certificates to reload"),
        }
    }
}

#[cfg(not(unix))]
async fn reload_on_sighup(_tls: Option<Arc<crate::tls::Tls>>, _hangups: Option<()>) {}

async fn accept_loop(node: Arc<Node>, listener: TcpListener, tls: Option<Arc<crate::tls::Tls>>, shutdown: broadcast::Sender<()>) {
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    let mut backoff = Duration::from_millis(5);
    loop {
        let (socket, addr) = match listener.accept().await {
            Ok(pair) => {
                backoff = Duration::from_millis(5);
                pair
            }
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        node.total_connections.fetch_add(1, Ordering::Relaxed);
        let node = node.clone();
        let shutdown = shutdown.subscribe();
        let local = socket.local_addr().ok();
        let Some(tls) = &tls else {
            let (reader, writer) = socket.into_split();
            tokio::spawn(connection::serve(node, (Box::new(reader), Box::new(writer)), addr, local, shutdown));
            continue;
        };
        // Connections that do not finish their handshake must not hold up
        // the others: past the bound, a new one is closed at once.
        let Ok(permit) = handshakes.clone().try_acquire_owned() else {
            tracing::debug!(%addr, "too many TLS handshakes in progress: connection closed");
            crate::metrics::record_tls_handshake_failure();
            continue;
        };
        let acceptor = tls.client_acceptor();
        let mut stopping = shutdown.resubscribe();
        tokio::spawn(async move {
            let stream = tokio::select! {
                _ = stopping.recv() => return,
                done = crate::tls::accept(&acceptor, socket, TLS_HANDSHAKE_TIMEOUT) => match done {
                    Ok(stream) => stream,
                    Err(why) => {
                        tracing::debug!(%addr, "{why}");
                        return;
                    }
                },
            };
            drop(permit);
            let (reader, writer) = tokio::io::split(stream);
            connection::serve(node, (Box::new(reader), Box::new(writer)), addr, local, shutdown).await;
        });
    }
}
