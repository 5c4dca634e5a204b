//! Consensus: the only module that imports `openraft`.
//!
//! [`Consensus`] is the handle the server uses: [`Consensus::write`] stamps a
//! command with log time and commits it through the log; [`Consensus::read_keys`]
//! runs a read on the leader after a ReadIndex round shared by every read
//! waiting at that moment. Inside: the type configuration, the RocksDB log
//! store, the state machine adapter and the peer network.

mod applying;
mod audit;
pub mod busy_poll;
mod log_store;
mod network;
mod peer;
pub mod recovery;
mod state_machine;
mod types;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use openraft::{ServerState, SnapshotPolicy};
use tokio::sync::{mpsc, oneshot, watch};

use crate::clock::LogClock;
use bytes::Bytes;

use crate::commands::{ClientCommand, Op, Origin, Proposal, Request};
use crate::keyspace::{ClientId, Event, Keyspace, LogTime, ReadCtx};
use crate::protocol::Reply;
use crate::storage::disk::DiskReserve;
use crate::storage::Storage;

pub use audit::AuditLog;
pub use log_store::{log_on_disk, LogReader, LogStore};
pub use peer::{clock_offsets as peer_clock_offsets, fill_random, PeerPool};
pub use network::Network;
pub use state_machine::{EventSink, SharedState, StateMachine};
pub use types::{NodeId, NodeInfo, TypeConfig};

/// Why the cluster could not serve a command. The text is the RESP error.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ClusterError {
    #[error("CLUSTERDOWN no leader")]
    NoLeader,
    #[error("TRYAGAIN node {0} is the leader; this node cannot serve the command")]
    NotLeader(NodeId),
    #[error("TRYAGAIN timed out waiting for the cluster")]
    Timeout,
    #[error("TRYAGAIN the leader is unreachable: {0}")]
    Unreachable(String),
    #[error("ERR consensus stopped: {0}")]
    Fatal(String),
    #[error("BUSY {0}")]
    Busy(String),
}

impl ClusterError {
    /// Whether the command may be sent again (to whoever leads by then): it
    /// did not run, or it carries its origin and so runs at most once.
    fn worth_retrying(&self) -> bool {
        !matches!(self, ClusterError::Fatal(_) | ClusterError::Busy(_))
    }
}

/// Failure to start the Raft instance.
#[derive(Debug, thiserror::Error)]
#[error("cannot start raft: {0}")]
pub struct StartError(String);

/// What the node needs to start consensus.
#[derive(Debug, Clone)]
pub struct RaftSettings {
    pub node_id: NodeId,
    pub node: NodeInfo,
    /// The members to bootstrap with on first start (this node alone for a
    /// one-node cluster). Only the lowest id initialises the group, once.
    pub initial_members: BTreeMap<NodeId, NodeInfo>,
    /// Every peer connection must present this.
    pub cluster_secret: String,
    pub heartbeat_ms: u64,
    pub election_timeout_ms: u64,
    pub snapshot_logs: u64,
    /// A snapshot is also taken once commands of this many bytes were
    /// applied since the last one (see `snapshot_when_the_log_grows`).
    pub snapshot_log_bytes: u64,
    pub request_timeout: Duration,
    /// Where to write the audit log of lease events, if anywhere.
    pub audit_log: Option<std::path::PathBuf>,
    /// Log entries to apply as error replies (`--skip-entry`).
    pub skip_entries: std::collections::BTreeSet<u64>,
    /// Mutual TLS on peer links (`--tls-cluster yes`).
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// The free space kept on the data directory's disk (`--min-free-disk`).
    pub disk: Arc<DiskReserve>,
    /// How long the runtime's thread polls per log write (`--busy-poll-us`,
    /// see `busy_poll`).
    pub busy_poll: Duration,
    /// The node's `MONITOR` connections (see `StateMachine::with_monitors`).
    pub monitors: Arc<std::sync::atomic::AtomicUsize>,
}

/// A point-in-time view for `RAFT.INFO` and `INFO`.
#[derive(Debug, Clone)]
pub struct RaftStatus {
    pub node_id: NodeId,
    pub role: &'static str,
    pub term: u64,
    pub leader_id: Option<NodeId>,
    pub leader_addr: Option<String>,
    pub commit_index: u64,
    pub applied_index: u64,
    pub last_log_index: u64,
    pub snapshot_index: u64,
    /// The last log index purged behind a snapshot, on disk.
    pub purged_index: u64,
    /// Whether the runtime's thread polls while a log write is in flight
    /// (`--busy-poll-us` above 0; see `busy_poll`).
    pub busy_poll: bool,
    /// Times it polled so far (each a yield while a log write or a forward
    /// to the leader was in flight).
    pub busy_polls: u64,
    pub members: Vec<(NodeId, NodeInfo)>,
    /// The members that vote; the others are learners.
    pub voters: Vec<NodeId>,
}

type ReadWaiter = oneshot::Sender<Result<(), ClusterError>>;

/// A client command waiting to be proposed.
struct PendingWrite {
    command: ClientCommand,
    reply: oneshot::Sender<Result<Reply, ClusterError>>,
    /// A `LOCK.ACQUIRE ... WAIT` that will queue behind the lock's holder:
    /// its client waits anyway, so it may wait a moment for another command
    /// to share its entry (see [`DEFER_QUEUEING`]).
    deferrable: bool,
    /// Proposed in an entry of its own (`commands::proposed_alone`): it
    /// runs a script not known to be light, and the scripts of an entry
    /// share one budget.
    alone: bool,
}

/// Most commands in one log entry.
const MAX_BATCH: usize = 1024;
/// An entry stops taking commands once it holds this many bytes of them. With
/// one request at most `commands::MAX_REQUEST_BYTES`, every entry stays well under the
/// peer transport's frame limit (`peer::MAX_FRAME`), so it can replicate.
pub const MAX_BATCH_BYTES: usize = 64 * 1024 * 1024;
/// The longest one forward to the leader may wait before the command is sent
/// again (to whoever leads by then; it runs once, see `Consensus::execute`).
const FORWARD_ATTEMPT: Duration = Duration::from_secs(2);
/// Most entries of client commands proposed and not yet applied. One: every
/// entry costs openraft a fixed amount of work on each node, so fewer, fuller
/// entries win. Measured here (one node, 50 clients, LOCK.ACQUIRE + RELEASE):
/// 1 in flight about 26k pairs/s, 2 about 20k, 8 about 8k.
const MAX_IN_FLIGHT: usize = 1;
/// How often the batcher yields to the runtime, after waiting for the entry
/// in flight, before it closes the next batch (`write_batcher`). Measured as
/// above: none about 25k pairs/s, 8 about 31k, 16 about 32k; a lone client
/// never waits, so never yields.
const GATHER_YIELDS: usize = 16;
/// The gathering stops after this many yields in a row that brought no
/// command.
const GATHER_IDLE_YIELDS: usize = 4;

/// How long a batch holding only deferrable commands (waiters that will
/// queue behind a held lock) waits for another command to share its entry.
/// Under contention every grant is followed by two commands: the new
/// holder's next one (often its release) and the old holder's next `WAIT`;
/// in one entry they cost one append, fsync and replication round instead of
/// two, which halves the time between handoffs. A waiter loses nothing: it
/// waits for the holder in any case.
const DEFER_QUEUEING: Duration = Duration::from_millis(2);

/// Stamps and proposes entries; shared by the handle and the write batcher.
struct Proposer {
    raft: types::Raft,
    clock: Arc<LogClock>,
    node_id: NodeId,
    request_timeout: Duration,
    metrics: watch::Receiver<openraft::RaftMetrics<NodeId, NodeInfo>>,
}

/// The node's handle on consensus.
pub struct Consensus {
    proposer: Arc<Proposer>,
    shared: Arc<SharedState>,
    /// Tells this process's clients apart from those of earlier starts.
    boot: u64,
    /// The next command number (`Origin::seq`), increasing for every
    /// connection of this process.
    next_request: AtomicU64,
    writes: mpsc::UnboundedSender<PendingWrite>,
    reads: mpsc::UnboundedSender<ReadWaiter>,
    pool: Arc<PeerPool>,
    disk: Arc<DiskReserve>,
    /// The log store's last purge on disk ([`LogStore::purged_on_disk`]).
    purged: Arc<AtomicU64>,
    /// Whether this node polls while its log write is in flight.
    busy_poll: Arc<busy_poll::BusyPoll>,
    /// This node's `MONITOR` connections, and where what read-only scripts
    /// run is shown to them (as the state machine shows the others').
    monitors: Arc<std::sync::atomic::AtomicUsize>,
    sink: EventSink,
}

/// Where a command should run.
enum Route {
    Here,
    Leader(NodeId, String),
}

/// Runs commands forwarded by followers on this node, without forwarding
/// them again.
struct ForwardedCommands(std::sync::Weak<Consensus>);

impl ForwardedCommands {
    /// Runs one forwarded command here, if this node leads.
    async fn run(consensus: &Consensus, command: ClientCommand) -> Result<Reply, ClusterError> {
        consensus.leader_term()?;
        // The follower judged the command by its own disk; this node's log
        // must take it too.
        match consensus.disk_refusal(&command.request) {
            Some(refusal) => Ok(Reply::Error(refusal)),
            None => consensus.execute_here(command).await,
        }
    }
}

impl peer::ForwardHandler for ForwardedCommands {
    fn forward(&self, command: ClientCommand) -> futures_util::future::BoxFuture<'static, (Result<Reply, ClusterError>, u64)> {
        let consensus = self.0.upgrade();
        Box::pin(async move {
            let Some(consensus) = consensus else { return (Err(ClusterError::NoLeader), 0) };
            let result = Self::run(&consensus, command).await;
            // Read after the reply: at least the index it reflects.
            (result, consensus.shared.applied_index())
        })
    }
}

impl Proposer {
    /// The current term if this node is the leader.
    fn leader_term(&self) -> Result<u64, ClusterError> {
        let m = self.metrics.borrow();
        match (m.state, m.current_leader) {
            (ServerState::Leader, _) => Ok(m.current_term),
            (ServerState::Shutdown, _) => Err(ClusterError::Fatal("shut down".into())),
            (_, Some(leader)) if leader != self.node_id => Err(ClusterError::NotLeader(leader)),
            _ => Err(ClusterError::NoLeader),
        }
    }

    /// Stamps `op` with log time, commits it, and returns the replies the
    /// state machine produced on apply (one per command).
    async fn propose(&self, op: Op) -> Result<Vec<Reply>, ClusterError> {
        let term = self.leader_term()?;
        let proposal = Proposal { log_time: self.clock.stamp(term), unix_ms: self.clock.unix_ms(), op };
        let started = Instant::now();
        match tokio::time::timeout(self.request_timeout, self.raft.client_write(proposal)).await {
            Err(_) => Err(ClusterError::Timeout),
            Ok(Ok(resp)) => {
                crate::metrics::record_commit(started.elapsed());
                Ok(resp.data)
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => match f.leader_id {
                Some(id) if id != self.node_id => Err(ClusterError::NotLeader(id)),
                _ => Err(ClusterError::NoLeader),
            },
            Ok(Err(e)) => Err(ClusterError::Fatal(e.to_string())),
        }
    }
}

/// Who leads, as far as `m` knows: the leader and its term.
fn leader_of(m: &openraft::RaftMetrics<NodeId, NodeInfo>) -> (Option<NodeId>, u64) {
    (m.current_leader, m.current_term)
}

/// Group commit: proposes every command waiting at that moment as one log
/// entry. While an entry is in flight the next batch gathers, so many clients
/// share each append, fsync and replication round.
async fn write_batcher(proposer: Arc<Proposer>, mut rx: mpsc::UnboundedReceiver<PendingWrite>) {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut last_batch = 0;
    // A request proposed alone, taken while a batch gathered: the first of
    // the next batch, where it stands alone.
    let mut carried: Option<PendingWrite> = None;
    loop {
        let first = match carried.take() {
            Some(w) => w,
            None => match rx.recv().await {
                Some(w) => w,
                None => return,
            },
        };
        let waited = in_flight.available_permits() == 0;
        let Ok(permit) = in_flight.clone().acquire_owned().await else { return };
        if waited || last_batch > 1 {
            // The entry that just finished has woken the clients it answered;
            // let them write their replies and read their next commands
            // before this batch closes, or they all miss it and wait a whole
            // round for the one after. A lone client never waits here.
            // Stops early once yields bring nothing more: a handoff under
            // contention has its two commands in hand at once, and should
            // not wait for clients that are not coming.
            let mut idle = 0;
            for _ in 0..GATHER_YIELDS {
                let queued = rx.len();
                tokio::task::yield_now().await;
                idle = if rx.len() == queued { idle + 1 } else { 0 };
                if idle == GATHER_IDLE_YIELDS {
                    break;
                }
            }
        }
        let mut bytes = first.command.request.size();
        let alone = first.alone;
        let mut batch = vec![first];
        // Adds `w` to the batch, or carries it to the next if it goes
        // alone; false once the batch is closed.
        let mut add = |w: PendingWrite, batch: &mut Vec<PendingWrite>, bytes: &mut usize| {
            if w.alone {
                carried = Some(w);
                return false;
            }
            *bytes += w.command.request.size();
            batch.push(w);
            true
        };
        let mut open = !alone;
        while open && batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(w) => open = add(w, &mut batch, &mut bytes),
                Err(_) => break,
            }
        }
        if open && batch.iter().all(|w| w.deferrable) {
            let until = tokio::time::Instant::now() + DEFER_QUEUEING;
            while open && batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(w)) => {
                        let urgent = !w.deferrable;
                        open = add(w, &mut batch, &mut bytes);
                        if urgent {
                            break;
                        }
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            while open && batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
                let Ok(w) = rx.try_recv() else { break };
                open = add(w, &mut batch, &mut bytes);
            }
        }
        // Clients that gave up waiting get nothing proposed on their behalf.
        batch.retain(|w| !w.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        last_batch = batch.len();
        crate::metrics::record_write_batch(batch.len());
        let proposer = proposer.clone();
        tokio::spawn(async move {
            let (commands, waiters): (Vec<ClientCommand>, Vec<_>) =
                batch.into_iter().map(|w| (w.command, w.reply)).unzip();
            match proposer.propose(Op::Commands(commands)).await {
                Ok(replies) if replies.len() == waiters.len() => {
                    for (waiter, reply) in waiters.into_iter().zip(replies) {
                        let _ = waiter.send(Ok(reply));
                    }
                }
                Ok(replies) => {
                    let e = ClusterError::Fatal(format!("{} replies for {} commands", replies.len(), waiters.len()));
                    waiters.into_iter().for_each(|w| drop(w.send(Err(e.clone()))));
                }
                Err(e) => waiters.into_iter().for_each(|w| drop(w.send(Err(e.clone())))),
            }
            drop(permit);
        });
    }
}

impl Consensus {
    /// Opens the log and state machine in `db`, starts Raft, and initialises a
    /// one-member cluster on first start (a restart recovers it instead).
    pub async fn start(
        settings: RaftSettings,
        peer_listener: tokio::net::TcpListener,
        db: Arc<Storage>,
        clock: Arc<LogClock>,
        sink: EventSink,
    ) -> Result<Arc<Consensus>, StartError> {
        let err = |e: &dyn std::fmt::Display| StartError(e.to_string());
        let config = openraft::Config {
            cluster_name: "raftlock".into(),
            heartbeat_interval: settings.heartbeat_ms,
            election_timeout_min: settings.election_timeout_ms,
            election_timeout_max: settings.election_timeout_ms + settings.election_timeout_ms / 3,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(settings.snapshot_logs),
            max_in_snapshot_log_to_keep: 1000,
            purge_batch_size: 1024,
            max_payload_entries: 1000,
            ..Default::default()
        }
        .validate()
        .map_err(|e| err(&e))?;
        let busy_poll = busy_poll::BusyPoll::new(settings.busy_poll);
        tokio::spawn(busy_poll.clone().run());
        let log = LogStore::open(db.clone(), clock.clone())
            .map_err(|e| err(&e))?
            .for_node(settings.node_id)
            .with_busy_poll(busy_poll.clone());
        let durable = log.durable();
        let purged = log.purged_on_disk();
        let mut sm = StateMachine::open(db, clock.clone(), sink.clone())
            .map_err(|e| err(&e))?
            .with_skipped_entries(settings.skip_entries.clone())
            .with_durable(durable.clone())
            .with_monitors(settings.monitors.clone());
        applying::install_crash_report();
        if let Some(path) = &settings.audit_log {
            let audit = AuditLog::open(path, settings.node_id)
                .map_err(|e| StartError(format!("audit log {}: {e}", path.display())))?;
            sm = sm.with_audit(Arc::new(audit));
        }
        let shared = sm.shared();
        let pool = PeerPool::new(settings.node_id, settings.cluster_secret.clone(), settings.tls.clone());
        let network = Network { pool: pool.clone(), node_id: settings.node_id, durable: durable.clone() };
        // openraft applies the committed entries that follow the snapshot
        // before it returns.
        let (restored, started) = (shared.applied_index(), Instant::now());
        let raft = types::Raft::new(settings.node_id, Arc::new(config), network, log, sm)
            .await
            .map_err(|e| err(&e))?;
        let replayed = shared.applied_index().saturating_sub(restored);
        tracing::info!(replayed, ms = started.elapsed().as_millis() as u64, "raft started: committed log entries replayed");
        {
            // A commit index kept from the followers because the leader's own
            // disk was behind (log_store::Durable) is sent as soon as the disk
            // catches up, not at the next heartbeat.
            let raft = raft.clone();
            tokio::spawn(async move {
                while durable.caught_up_with_withheld().await.is_ok() {
                    if raft.trigger().heartbeat().await.is_err() {
                        break;
                    }
                }
            });
        }
        let lowest = settings.initial_members.keys().next().copied().unwrap_or(settings.node_id);
        if !raft.is_initialized().await.map_err(|e| err(&e))? && lowest == settings.node_id {
            let n = settings.initial_members.len();
            raft.initialize(settings.initial_members.clone()).await.map_err(|e| err(&e))?;
            tracing::info!(node_id = settings.node_id, members = n, "initialised a new cluster");
        }
        tokio::spawn(snapshot_when_the_log_grows(raft.clone(), shared.clone(), settings.snapshot_log_bytes));
        let (reads, read_rx) = mpsc::unbounded_channel();
        tokio::spawn(read_batcher(raft.clone(), read_rx));
        tokio::spawn(watch_metrics(raft.metrics()));
        let proposer = Arc::new(Proposer {
            metrics: raft.metrics(),
            raft: raft.clone(),
            clock,
            node_id: settings.node_id,
            request_timeout: settings.request_timeout,
        });
        let (writes, write_rx) = mpsc::unbounded_channel();
        tokio::spawn(write_batcher(proposer.clone(), write_rx));
        let disk = settings.disk.clone();
        let consensus = Arc::new(Consensus {
            proposer,
            shared,
            boot: boot_id(),
            next_request: AtomicU64::new(1),
            writes,
            reads,
            pool,
            disk,
            purged,
            busy_poll: busy_poll.clone(),
            monitors: settings.monitors.clone(),
            sink,
        });
        let handler = Arc::new(ForwardedCommands(Arc::downgrade(&consensus)));
        tokio::spawn(peer::serve(peer_listener, raft, settings.cluster_secret, handler, settings.tls));
        Ok(consensus)
    }

    fn leader_term(&self) -> Result<u64, ClusterError> {
        self.proposer.leader_term()
    }

    pub fn is_leader(&self) -> bool {
        self.leader_term().is_ok()
    }

    /// Waits until this node is leader or `limit` passes.
    pub async fn wait_for_leader(&self, limit: Duration) -> bool {
        let mut rx = self.proposer.metrics.clone();
        let became_leader = tokio::time::timeout(limit, rx.wait_for(|m| m.state == ServerState::Leader)).await;
        matches!(became_leader, Ok(Ok(_)))
    }

    /// Where commands go now: here if leader, else the leader's peer address.
    /// With no leader known, waits for an election up to the request timeout.
    async fn route(&self, deadline: Instant) -> Result<Route, ClusterError> {
        let mut rx = self.proposer.metrics.clone();
        loop {
            match self.leader_term() {
                Ok(_) => return Ok(Route::Here),
                Err(ClusterError::NotLeader(id)) => {
                    let m = rx.borrow();
                    return match m.membership_config.nodes().find(|(nid, _)| **nid == id) {
                        Some((_, node)) => Ok(Route::Leader(id, node.peer_addr.clone())),
                        None => Err(ClusterError::NoLeader),
                    };
                }
                Err(ClusterError::NoLeader) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || tokio::time::timeout(left, rx.changed()).await.is_err() {
                        return Err(ClusterError::NoLeader);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs a command of client connection `conn` (write, read or
    /// `RAFT.NODE`) on the leader: here, or forwarded over the peer
    /// connection with the reply relayed.
    ///
    /// Until the request timeout, a command that met no leader, a leader
    /// change, or a lost answer is sent again, to whoever leads by then. It
    /// keeps its origin, so if an earlier copy did commit, the state machine
    /// answers the retry with that copy's reply and runs nothing twice
    /// (`keyspace::Sessions`). Only when time runs out does the client get
    /// `TRYAGAIN`/`CLUSTERDOWN`, and then the command may or may not have run.
    pub async fn execute(&self, conn: u64, request: Request) -> Result<Reply, ClusterError> {
        self.execute_seen(conn, request).await.0
    }

    /// [`Consensus::execute`], with the log index the reply reflects when it
    /// came from another node (the leader's applied index once it had
    /// answered): this node may not have applied that far yet. `None` when
    /// this node answered, or an older leader did not say.
    pub async fn execute_seen(&self, conn: u64, request: Request) -> (Result<Reply, ClusterError>, Option<u64>) {
        let seq = self.next_request.fetch_add(1, Ordering::Relaxed);
        self.execute_as(conn, seq, request).await
    }

    /// [`Consensus::execute`], for a caller that needs the command's number
    /// (`Origin::seq`): to name it later, should its answer be lost.
    pub async fn execute_numbered(&self, conn: u64, request: Request) -> (u64, Result<Reply, ClusterError>) {
        let seq = self.next_request.fetch_add(1, Ordering::Relaxed);
        (seq, self.execute_as(conn, seq, request).await.0)
    }

    /// Whether this node has applied the entry at `index`; if not, `later`
    /// runs once it has (from the apply path, under the state lock: see
    /// [`SharedState::on_applied`]), and false is returned.
    pub fn applied_or_later(&self, index: u64, later: impl FnOnce()) -> bool {
        let applied = self.shared.lock();
        if applied.last_applied.map_or(0, |id| id.index) >= index {
            return true;
        }
        later();
        false
    }

    /// Sets the hook told this node's applied index after each batch.
    pub fn on_applied(&self, hook: state_machine::AppliedHook) {
        self.shared.on_applied(hook);
    }

    async fn execute_as(&self, conn: u64, seq: u64, request: Request) -> (Result<Reply, ClusterError>, Option<u64>) {
        if crate::planted::active(crate::planted::Bug::StaleReads) {
            if let Some(reply) = self.planted_local_read(&request) {
                return (Ok(reply), None);
            }
        }
        let client = ClientId { node: self.proposer.node_id, boot: self.boot, conn };
        let command = ClientCommand { origin: Origin { client, seq }, request };
        // One deadline for finding the leader and hearing back from it.
        let deadline = Instant::now() + self.proposer.request_timeout;
        // RAFT.NODE changes membership outside the log's client sessions: a
        // second copy would run again. It is sent again only if the first
        // surely never reached the leader.
        let unrepeatable = matches!(&command.request, Request::Command(argv)
            if argv.first().is_some_and(|name| name.eq_ignore_ascii_case(b"raft.node")));
        let mut pause = Duration::from_millis(10);
        let mut leadership = self.proposer.metrics.clone();
        loop {
            let seen = leader_of(&leadership.borrow_and_update());
            let mut may_have_run = false;
            let mut reflects = None;
            let outcome = match self.route(deadline).await {
                Err(e) => Err(e),
                Ok(Route::Here) => self.execute_here(command.clone()).await,
                Ok(Route::Leader(id, addr)) => {
                    // One attempt waits at most FORWARD_ATTEMPT: a leader that
                    // stopped (paused, partitioned away) is replaced within an
                    // election, and the command goes to its successor.
                    let left = deadline.saturating_duration_since(Instant::now());
                    let ttl = if unrepeatable { left } else { left.min(FORWARD_ATTEMPT) }.max(Duration::from_millis(50));
                    let _polling = self.busy_poll.begin();
                    match self.pool.call_with_trailer(id, &addr, peer::PeerRequest::Forward(command.clone()), ttl).await {
                        Ok(peer::Answer { response: peer::PeerResponse::Forward(result), applied }) => {
                            reflects = applied;
                            result
                        }
                        Ok(_) => Err(ClusterError::Fatal("unexpected answer to a forwarded command".into())),
                        Err(e) => {
                            may_have_run = !matches!(e, peer::PeerError::NotSent(..));
                            match e {
                                peer::PeerError::Timeout(_) => Err(ClusterError::Timeout),
                                // Not sent, or sent and the answer lost: either
                                // way the command runs at most once (its origin
                                // is recognised), so send it again.
                                e => Err(ClusterError::Unreachable(e.to_string())),
                            }
                        }
                    }
                }
            };
            match outcome {
                Err(e) if e.worth_retrying() && !(unrepeatable && may_have_run) && Instant::now() + pause < deadline => {
                    tracing::debug!(error = %e, "retrying a command");
                    // Sooner if this node learns of another leader meanwhile
                    // (a failover ends the moment it does).
                    let changed = async {
                        while leadership.changed().await.is_ok() {
                            if leader_of(&leadership.borrow_and_update()) != seen {
                                return;
                            }
                        }
                        std::future::pending::<()>().await
                    };
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = changed => {}
                    }
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                other => return (other, reflects),
            }
        }
    }

    /// Planted bug `StaleReads`: a read answered from this node's applied
    /// state, whatever its role, with no leadership check.
    fn planted_local_read(&self, request: &Request) -> Option<Reply> {
        let Request::Command(argv) = request else { return None };
        let spec = crate::commands::resolve(argv).ok()?;
        if spec.is_write() || spec.name == "raft.node" {
            return None;
        }
        let applied = self.shared.lock();
        let now = applied.keyspace.log_time();
        let clock_now = self.proposer.clock.estimate_from(now);
        let ctx = ReadCtx { now, clock_now, unix_ms: self.proposer.clock.unix_ms(), seed: read_seed() };
        Some(crate::commands::execute_read(&applied.keyspace, argv, &ctx))
    }

    /// The last applied index here and a digest of the keyspace at it, for
    /// comparing replicas (`RAFT.DIGEST`).
    pub fn digest(&self) -> (u64, String) {
        let applied = self.shared.lock();
        (applied.last_applied.map(|l| l.index).unwrap_or(0), applied.keyspace.digest())
    }

    /// Runs a command on this node, which must be the leader.
    async fn execute_here(&self, command: ClientCommand) -> Result<Reply, ClusterError> {
        let alone = |command: &ClientCommand| {
            let applied = self.shared.lock();
            crate::commands::proposed_alone(&applied.keyspace, &command.request)
        };
        let (argv, user) = match &command.request {
            Request::Transaction { .. } | Request::Pipeline(_) => {
                let alone = alone(&command);
                return self.write(command, false, alone).await;
            }
            Request::Dequeue { .. } | Request::Acl(_) => return self.write(command, false, false).await,
            Request::OverMaxmemory(_) => {
                let alone = alone(&command);
                return self.write(command, false, alone).await;
            }
            Request::Command(argv) => (argv, None),
            Request::AsUser { user, request } => match &**request {
                Request::Command(argv) => (argv, Some(user.as_str())),
                _ => {
                    let alone = alone(&command);
                    return self.write(command, false, alone).await;
                }
            },
        };
        match crate::commands::resolve(argv) {
            Err(reply) => Ok(reply),
            // Boxed: a membership change's future is 3 KB, and held inline
            // it made every command's future that size (copied as it is
            // made, boxed for a forwarded command).
            Ok(spec) if spec.name == "raft.node" => Box::pin(self.admin(argv)).await,
            Ok(spec) if spec.is_write() => {
                if crate::commands::is_lock_attempt(argv) && self.refused_without_writing(argv).await? {
                    return Ok(Reply::Nil);
                }
                let (deferrable, alone) = {
                    let applied = self.shared.lock();
                    let ks = &applied.keyspace;
                    (crate::commands::queues_behind_holder(ks, argv), crate::commands::proposed_alone(ks, &command.request))
                };
                self.write(command, deferrable, alone).await
            }
            Ok(spec) => {
                let monitored = self.monitors.load(Ordering::Relaxed) > 0;
                let keys: Vec<Bytes> = spec.keys(argv).cloned().collect();
                let (reply, shown) = self
                    .read_keys(&keys, move |ks, ctx| {
                        // A read-only script obeys its caller's permissions.
                        let perms = user.map(|u| crate::commands::acl::perms_of(ks, u)).filter(|p| !p.unrestricted());
                        // And shows what it runs to this node's monitors.
                        let run = || {
                            crate::commands::showing_script_calls(monitored, || {
                                crate::commands::acl::with_user(perms, || crate::commands::execute_read(ks, argv, ctx))
                            })
                        };
                        // `KEYS *` of millions of keys, a script up to its budget:
                        // the runtime's other tasks move to another thread first.
                        if crate::commands::may_run_long_command(ks, argv) {
                            state_machine::cpu_bound(run)
                        } else {
                            run()
                        }
                    })
                    .await?;
                if !shown.is_empty() {
                    (self.sink)(shown.into_iter().map(|shown| Event::ScriptCall { shown }).collect(), None);
                }
                Ok(reply)
            }
        }
    }

    /// The free space kept on the data directory's disk.
    pub fn disk(&self) -> &DiskReserve {
        &self.disk
    }

    /// The error for `request` if it may add data while this node's disk is
    /// nearly full (see [`crate::storage::disk`]); a request let in counts
    /// against the free space until the disk is read again.
    pub fn disk_refusal(&self, request: &Request) -> Option<String> {
        self.refused_if_disk_low(request.size(), || self.may_add_data(request))
    }

    /// [`Consensus::disk_refusal`] of one command.
    pub fn command_disk_refusal(&self, argv: &[Bytes]) -> Option<String> {
        self.refused_if_disk_low(crate::commands::argv_size(argv), || self.command_may_add_data(argv))
    }

    fn refused_if_disk_low(&self, size: usize, may_add_data: impl FnOnce() -> bool) -> Option<String> {
        if self.disk.low() && may_add_data() {
            return Some(self.disk.refusal());
        }
        self.disk.spend(size as u64);
        None
    }

    /// Whether `request` may add data ([`crate::commands::may_add_data`]),
    /// the scripts it names as applied here.
    pub fn may_add_data(&self, request: &Request) -> bool {
        crate::commands::request_may_add_data(&self.shared.lock().keyspace, request)
    }

    /// Whether this node, over its `maxmemory`, refuses `argv` at once
    /// ([`crate::commands::refused_over_maxmemory`]).
    pub fn command_refused_over_maxmemory(&self, argv: &[Bytes]) -> bool {
        crate::commands::refused_over_maxmemory(&self.shared.lock().keyspace, argv)
    }

    /// [`Consensus::may_add_data`] of one command.
    pub fn command_may_add_data(&self, argv: &[Bytes]) -> bool {
        crate::commands::may_add_data(&self.shared.lock().keyspace, argv)
    }

    /// The ACL users as applied here, and a number that changes whenever
    /// they do (connections re-read their user's permissions then).
    pub fn acl(&self) -> (u64, Arc<crate::keyspace::acl::AclTable>) {
        self.shared.acl()
    }

    pub fn acl_epoch(&self) -> u64 {
        self.shared.acl_epoch()
    }

    /// Changes whenever the ACL users do.
    pub fn acl_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.acl_watch()
    }

    /// Whether a lock attempt (see [`crate::commands::is_lock_attempt`]) is
    /// refused as things stand: then it is answered nil as a read (after a
    /// ReadIndex round), with no log write, so clients spinning on a held
    /// lock do not grow the log. Refusing changes nothing, so the answer is
    /// the one the command would have had at that point of the log. A lock
    /// that looks free here is proposed at once, as any write: only what
    /// looks refused pays for the extra round.
    async fn refused_without_writing(&self, argv: &[Bytes]) -> Result<bool, ClusterError> {
        // A lookup, not a run of the command: the path of every acquire.
        if !crate::commands::may_be_refused(&self.shared.lock().keyspace, argv) {
            return Ok(false);
        }
        let keys: Vec<Bytes> = crate::commands::attempted_lock(argv).into_iter().cloned().collect();
        self.read_keys(&keys, |ks, ctx| crate::commands::refused(ks, argv, ctx)).await
    }

    /// The cluster-wide id of this node's client connection `conn`, as the
    /// origin of its commands names it.
    pub fn client_id(&self, conn: u64) -> ClientId {
        ClientId { node: self.proposer.node_id, boot: self.boot, conn }
    }

    /// `RAFT.NODE ADD id peer-addr client-addr` / `RAFT.NODE REMOVE id`, on the leader.
    async fn admin(&self, argv: &[Bytes]) -> Result<Reply, ClusterError> {
        let text = |i: usize| argv.get(i).map(|a| String::from_utf8_lossy(a).into_owned());
        let id = text(2).and_then(|s| s.parse::<NodeId>().ok()).filter(|id| *id > 0);
        let raft = &self.proposer.raft;
        let fatal = |e: &dyn std::fmt::Display| ClusterError::Fatal(e.to_string());
        match (text(1).map(|s| s.to_ascii_uppercase()).as_deref(), id, argv.len()) {
            (Some("ADD"), Some(id), 5) => {
                let node = NodeInfo { peer_addr: text(3).unwrap_or_default(), client_addr: text(4).unwrap_or_default() };
                // Joins as a learner and catches up (by snapshot if the log was
                // purged) before it becomes a voter.
                let added = match raft.add_learner(id, node, false).await {
                    Ok(added) => added.log_id.index,
                    Err(e) => return Ok(Reply::Error(format!("ERR cannot add node {id}: {e}"))),
                };
                // Only a node that answers becomes a voter: a member that
                // cannot be reached (wrong address, secret or certificate)
                // would count in every quorum and cost the cluster the
                // failure it could tolerate. openraft's own wait counts a
                // learner as caught up while the log is short, reached or not.
                let wait = self.proposer.request_timeout.max(Duration::from_secs(2));
                let reached = raft
                    .wait(Some(wait))
                    .metrics(
                        |m| {
                            m.replication.as_ref().and_then(|r| r.get(&id)).and_then(|l| l.as_ref()).is_some_and(|l| l.index >= added)
                        },
                        "the new learner acknowledged the log",
                    )
                    .await;
                if reached.is_err() {
                    return Ok(Reply::Error(format!(
                        "ERR node {id} has not caught up within {} ms (is it running, at that address, with this cluster's secret and certificates?); it stays a learner, not a voter: run RAFT.NODE ADD again once it has caught up; if the address was wrong, RAFT.NODE REMOVE {id} first",
                        wait.as_millis()
                    )));
                }
                let voters = std::collections::BTreeSet::from([id]);
                match raft.change_membership(openraft::ChangeMembers::AddVoterIds(voters), false).await {
                    Ok(_) => Ok(Reply::ok()),
                    Err(RaftError::Fatal(e)) => Err(fatal(&e)),
                    Err(e) => Ok(Reply::Error(format!("ERR cannot make node {id} a voter: {e}"))),
                }
            }
            (Some("REMOVE"), Some(id), 3) => {
                let m = self.proposer.metrics.borrow().clone();
                let is_voter = m.membership_config.membership().voter_ids().any(|v| v == id);
                let ids = std::collections::BTreeSet::from([id]);
                let change = if is_voter {
                    openraft::ChangeMembers::RemoveVoters(ids)
                } else {
                    openraft::ChangeMembers::RemoveNodes(ids)
                };
                match raft.change_membership(change, false).await {
                    Ok(_) => Ok(Reply::ok()),
                    Err(RaftError::Fatal(e)) => Err(fatal(&e)),
                    Err(e) => Ok(Reply::Error(format!("ERR cannot remove node {id}: {e}"))),
                }
            }
            _ => Ok(Reply::error(
                "ERR syntax: RAFT.NODE ADD <id> <peer-addr> <client-addr> | RAFT.NODE REMOVE <id>",
            )),
        }
    }

    /// Commits a client command through the log (sharing an entry with every
    /// command waiting at the same moment); the reply is the one the state
    /// machine produced when it applied the command. This node must lead.
    async fn write(&self, command: ClientCommand, deferrable: bool, alone: bool) -> Result<Reply, ClusterError> {
        self.leader_term()?;
        let (tx, rx) = oneshot::channel();
        let pending = PendingWrite { command, reply: tx, deferrable, alone };
        self.writes.send(pending).map_err(|_| ClusterError::Fatal("write path stopped".into()))?;
        // A command still queued when this gives up is dropped by the batcher
        // (its waiter is gone), so a timed-out command is never proposed late.
        match tokio::time::timeout(self.proposer.request_timeout, rx).await {
            Err(_) => Err(ClusterError::Timeout),
            Ok(Err(_)) => Err(ClusterError::Fatal("write path stopped".into())),
            Ok(Ok(result)) => result,
        }
    }

    /// Commits one `Expire` entry (the leader's expiry timer).
    pub async fn expire(&self) -> Result<(), ClusterError> {
        self.proposer.propose(Op::Expire).await.map(|_| ())
    }

    /// Waits until this node, the leader, has applied every write committed
    /// before the call (one ReadIndex round, shared with every read waiting
    /// then); returns the term it leads in.
    async fn read_index(&self) -> Result<u64, ClusterError> {
        let term = self.leader_term()?;
        let (tx, rx) = oneshot::channel();
        self.reads.send(tx).map_err(|_| ClusterError::Fatal("read path stopped".into()))?;
        match tokio::time::timeout(self.proposer.request_timeout, rx).await {
            Err(_) => Err(ClusterError::Timeout),
            Ok(Err(_)) => Err(ClusterError::Fatal("read path stopped".into())),
            Ok(Ok(result)) => result.map(|()| term),
        }
    }

    /// `RAFT.BACKUP`: a backup file's bytes (`recovery::Backup`), on the
    /// leader only: the state applied after a ReadIndex round, so it holds
    /// every write acknowledged before the call. The keyspace is cloned
    /// under the state lock (O(1)) and encoded on a blocking thread.
    pub async fn backup(&self) -> Result<Vec<u8>, ClusterError> {
        // One at a time: each holds a copy of the whole keyspace.
        static RUNNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        struct Running;
        impl Drop for Running {
            fn drop(&mut self) {
                RUNNING.store(false, Ordering::Release);
            }
        }
        if RUNNING.swap(true, Ordering::AcqRel) {
            return Err(ClusterError::Busy("a backup is being taken on this node already".into()));
        }
        let _running = Running;
        let term = self.read_index().await?;
        let (keyspace, last, members) = {
            let applied = self.shared.lock();
            let members = applied.membership.membership().nodes().map(|(id, n)| (*id, n.clone())).collect();
            (applied.keyspace.clone(), applied.last_applied, members)
        };
        let Some(last) = last else { return Err(ClusterError::NoLeader) };
        let node_id = self.proposer.node_id;
        tokio::task::spawn_blocking(move || recovery::Backup::encode(node_id, term, last, members, &keyspace))
            .await
            .map_err(|e| ClusterError::Fatal(e.to_string()))
    }

    /// The client address of node `id`, if it is a member.
    pub fn client_addr_of(&self, id: NodeId) -> Option<String> {
        let m = self.proposer.metrics.borrow();
        let addr = m.membership_config.nodes().find(|(nid, _)| **nid == id).map(|(_, n)| n.client_addr.clone());
        addr
    }

    /// Runs `f` on the keyspace once it reflects every write committed before
    /// this call (ReadIndex), at the log time of the applied state.
    ///
    /// For a command on `keys`: a key whose expiry has
    /// come by this leader's log clock but is not applied yet (the entry that
    /// deletes it is on its way: a millisecond or two) is waited for, up to
    /// [`DUE_EXPIRY_WAIT`]: the read then answers as Redis would just past
    /// the deadline (the key gone; a `SET NX` on it not refused here, but
    /// proposed), from a state at least as new as its ReadIndex, so still
    /// linearizable. Without the wait the key stayed readable 1-4 ms past
    /// its deadline (Redisson's `testTrySetPermits`, python-redis-lock's
    /// `test_signal_expiration`).
    async fn read_keys<T>(&self, keys: &[Bytes], f: impl FnOnce(&Keyspace, &ReadCtx) -> T) -> Result<T, ClusterError> {
        let term = self.read_index().await?;
        let clock = &self.proposer.clock;
        if !keys.is_empty() {
            let started = Instant::now();
            loop {
                let due = {
                    // The log time the expiring entry gets (this leader's
                    // clock): a key past its expiry there is deleted by it.
                    let Some(leader_now) = clock.peek(term) else { break };
                    let applied = self.shared.lock();
                    let ks = &applied.keyspace;
                    let now = ks.log_time();
                    // Most reads: nothing anywhere is due.
                    ks.next_expiry().is_some_and(|next| next < leader_now)
                        && keys.iter().any(|k| ks.get(k, now).and_then(|e| e.expires_at()).is_some_and(|at| at < leader_now))
                };
                if !due || started.elapsed() >= DUE_EXPIRY_WAIT {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let applied = self.shared.lock();
        // At the log time of the applied state, never at the leader's live
        // clock: that is a time no entry carries, and a read judged there
        // could see an expiry that the log later undoes (a renewal already in
        // flight, or a new leader that continues from an earlier time). A key
        // stays visible until the entry that expires it is applied.
        let now = if crate::planted::active(crate::planted::Bug::ReadsAtLeaderClock) {
            clock.now(term)
        } else {
            applied.keyspace.log_time()
        };
        // The wall clock at `now`, as the last entry mapped log time to it,
        // so that an absolute expiry reads back as it was set (EXPIRETIME).
        let unix_ms = match applied.wall_clock {
            Some((log_time, unix_ms)) => unix_ms.saturating_add(now.saturating_sub(log_time)),
            None => clock.unix_ms().saturating_sub(clock.now(term).saturating_sub(now)),
        };
        let clock_now = clock.estimate_from(now).max(now);
        let ctx = ReadCtx { now, clock_now, unix_ms, seed: read_seed() };
        Ok(f(&applied.keyspace, &ctx))
    }

    /// The earliest key expiry and the leader's current log time, when leader.
    pub fn expiry_due(&self) -> Option<(LogTime, LogTime)> {
        let term = self.leader_term().ok()?;
        let next = self.shared.lock().keyspace.next_expiry()?;
        Some((next, self.proposer.clock.now(term)))
    }

    /// (scripts cached, functions, libraries) as applied here, for `INFO`.
    pub fn script_counts(&self) -> (usize, usize, usize) {
        self.shared.lock().keyspace.script_counts()
    }

    /// (keys, keys with an expiry) as applied on this node, for `INFO`.
    pub fn key_counts(&self) -> (usize, usize) {
        let applied = self.shared.lock();
        let ks = &applied.keyspace;
        (ks.len(ks.log_time()), ks.expires_count())
    }

    /// Signalled whenever entries are applied.
    pub fn applied_signal(&self) -> &tokio::sync::Notify {
        &self.shared.changed
    }

    pub async fn status(&self) -> RaftStatus {
        let raft = &self.proposer.raft;
        let committed = raft.with_raft_state(|st| st.committed.map(|c| c.index)).await.ok().flatten();
        let m = self.proposer.metrics.borrow().clone();
        let members: Vec<(NodeId, NodeInfo)> =
            m.membership_config.nodes().map(|(id, node)| (*id, node.clone())).collect();
        let leader_addr = m
            .current_leader
            .and_then(|l| members.iter().find(|(id, _)| *id == l).map(|(_, n)| n.client_addr.clone()));
        RaftStatus {
            node_id: self.proposer.node_id,
            role: match m.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            },
            term: m.current_term,
            leader_id: m.current_leader,
            leader_addr,
            commit_index: committed.unwrap_or(0),
            applied_index: m.last_applied.map(|l| l.index).unwrap_or(0),
            last_log_index: m.last_log_index.unwrap_or(0),
            snapshot_index: m.snapshot.map(|l| l.index).unwrap_or(0),
            purged_index: self.purged.load(Ordering::Acquire),
            busy_poll: self.busy_poll.enabled(),
            busy_polls: self.busy_poll.polls(),
            voters: m.membership_config.membership().voter_ids().collect(),
            members,
        }
    }

    /// `SAVE`, `BGSAVE`, `BGREWRITEAOF`: asks this node for a snapshot of
    /// its state machine now. Every applied command is already on disk in
    /// the log; a snapshot shortens the log a restart replays. With `wait`,
    /// returns once a snapshot covers every entry applied when asked (asking
    /// again while an older build is under way: openraft ignores a request
    /// during a build), or the error after `wait`.
    pub async fn snapshot_now(&self, wait: Option<Duration>) -> Result<(), String> {
        let raft = &self.proposer.raft;
        let applied = self.proposer.metrics.borrow().last_applied.map(|l| l.index);
        raft.trigger().snapshot().await.map_err(|e| format!("ERR snapshot not started: {e}"))?;
        let (Some(limit), Some(target)) = (wait, applied) else { return Ok(()) };
        let covered = |m: &openraft::RaftMetrics<NodeId, NodeInfo>| m.snapshot.is_some_and(|s| s.index >= target);
        let deadline = Instant::now() + limit;
        let mut metrics = self.proposer.metrics.clone();
        loop {
            let step = deadline.saturating_duration_since(Instant::now()).min(Duration::from_secs(1));
            if step.is_zero() {
                return Err(format!("ERR no snapshot covered index {target} within {} s", limit.as_secs()));
            }
            // Whether it came (the metrics' guard dropped before any await).
            let came = tokio::time::timeout(step, metrics.wait_for(covered)).await.map(|seen| seen.is_ok());
            match came {
                Ok(true) => return Ok(()),
                Ok(false) => return Err("ERR Raft has stopped".into()),
                Err(_) => {
                    raft.trigger().snapshot().await.map_err(|e| format!("ERR snapshot not started: {e}"))?;
                }
            }
        }
    }

    pub async fn shutdown(&self) {
        if let Err(e) = self.proposer.raft.shutdown().await {
            tracing::warn!("raft shutdown: {e}");
        }
    }
}

/// A number that differs between starts of this process: the time of the
/// start and the process id, mixed.
fn boot_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 40)
}

/// Serves waiting reads in batches: one `ensure_linearizable` round answers
/// every read that arrived before it started.
async fn read_batcher(raft: types::Raft, mut rx: mpsc::UnboundedReceiver<ReadWaiter>) {
    while let Some(first) = rx.recv().await {
        let mut waiters = vec![first];
        while let Ok(w) = rx.try_recv() {
            waiters.push(w);
        }
        let result = match raft.ensure_linearizable().await {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(f))) => match f.leader_id {
                Some(id) => Err(ClusterError::NotLeader(id)),
                None => Err(ClusterError::NoLeader),
            },
            Err(RaftError::APIError(_)) => Err(ClusterError::NoLeader),
            Err(e) => Err(ClusterError::Fatal(e.to_string())),
        };
        crate::metrics::record_read_batch(waiters.len());
        for w in waiters {
            let _ = w.send(result.clone());
        }
    }
}

/// The longest a read waits for the expiry of a key that is due by the
/// clock to be applied (see [`Consensus::read_keys`]); past it (a leader
/// that cannot commit), the read answers from what is applied.
const DUE_EXPIRY_WAIT: Duration = Duration::from_millis(50);

/// How often [`snapshot_when_the_log_grows`] looks.
const SNAPSHOT_CHECK: Duration = Duration::from_millis(100);

/// Asks for a snapshot once the commands applied since the last one hold
/// `limit` bytes (`--snapshot-log-bytes`). openraft's own policy counts log
/// entries (`--snapshot-logs`), and one entry may hold a thousand commands,
/// each a pipeline of any length: by entries alone, the log a restart
/// replays could reach millions of commands (25 s for 5 M pipelined `SET`s
/// on 2 vCPUs). After a restart, the replayed entries count: a node that
/// replayed a long log takes a snapshot soon after. openraft builds one
/// snapshot at a time and ignores a request meanwhile, so asking at every
/// look while over the limit asks once per build (and, after a snapshot
/// that could not be written, again once `SNAPSHOT_RETRY` has passed).
async fn snapshot_when_the_log_grows(raft: types::Raft, shared: Arc<SharedState>, limit: u64) {
    if limit == 0 {
        return;
    }
    let mut tick = tokio::time::interval(SNAPSHOT_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let since = shared.lock().bytes_since_snapshot();
        if since >= limit {
            tracing::debug!(since, limit, "asking for a snapshot: the log since the last one is long");
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
        }
    }
}

/// Mirrors Raft's own metrics into Prometheus gauges and counters, and stops
/// the process if Raft stops on an error.
async fn watch_metrics(mut rx: watch::Receiver<openraft::RaftMetrics<NodeId, NodeInfo>>) {
    let mut last_leader = None;
    // Every member ever reported, so that one that left reads 0, not its
    // last lag.
    let mut reported = std::collections::BTreeSet::new();
    // The highest term this node has voted in; the vote read back at start
    // is not an election of this process.
    let mut voted_term = None;
    loop {
        {
            let m = rx.borrow_and_update();
            if let Err(fatal) = &m.running_state {
                stop_on_fatal(fatal);
            }
            let vote = m.vote.leader_id();
            if voted_term.is_some_and(|t| vote.term > t) && vote.voted_for() == Some(m.id) {
                crate::metrics::record_election_started();
            }
            voted_term = voted_term.max(Some(vote.term));
            if m.current_leader != last_leader {
                if m.current_leader.is_some() {
                    crate::metrics::record_leader_change();
                }
                last_leader = m.current_leader;
            }
            crate::metrics::record_raft_state(
                m.current_term,
                m.state == ServerState::Leader,
                m.last_applied.map(|l| l.index).unwrap_or(0),
                m.last_log_index.unwrap_or(0),
            );
            // On the leader, how far each member's log is behind its own.
            let last_log = m.last_log_index.unwrap_or(0);
            let lags: Vec<(NodeId, u64)> = m
                .membership_config
                .nodes()
                .filter(|(id, _)| **id != m.id)
                .map(|(id, _)| {
                    let matched = m.replication.as_ref().and_then(|r| r.get(id).copied().flatten()).map_or(0, |l| l.index);
                    (*id, if m.replication.is_some() { last_log.saturating_sub(matched) } else { 0 })
                })
                .collect();
            reported.extend(lags.iter().map(|(id, _)| *id));
            crate::metrics::record_replication(&lags, &reported, m.millis_since_quorum_ack);
        }
        if rx.changed().await.is_err() {
            if let Err(fatal) = &rx.borrow().running_state {
                stop_on_fatal(fatal);
            }
            return;
        }
    }
}

static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says that the process is stopping: from now on Raft stopping on an error
/// is part of that, not a reason to abort (see [`stop_on_fatal`]).
pub fn process_stopping() {
    STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Raft stopped. A normal shutdown is fine; any other reason (a storage
/// error, such as a failed fsync of the vote or the log) leaves this node
/// unable to take part safely, so the process stops instead of lingering and
/// answering errors: a restart recovers from what is really on disk.
///
/// Not while the process is stopping anyway ([`process_stopping`]): its
/// runtime's shutdown cancels the storage tasks in flight, which openraft
/// reports as a storage error, and an abort then would hide the reason the
/// process stopped (a port already in use, say) behind a SIGABRT.
fn stop_on_fatal(fatal: &openraft::error::Fatal<NodeId>) {
    if matches!(fatal, openraft::error::Fatal::Stopped) || STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    tracing::error!("raft stopped on an error, stopping this node: {fatal}");
    std::process::abort();
}

#[cfg(test)]
mod store_tests;

/// A fresh seed for a read on the leader that chooses at random
/// (`SRANDMEMBER`): reads are not replicated, so any value will do, as long
/// as two reads do not get the same one.
fn read_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: std::sync::OnceLock<AtomicU64> = std::sync::OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let mut start = [0u8; 8];
        let _ = fill_random(&mut start);
        AtomicU64::new(u64::from_le_bytes(start))
    });
    crate::keyspace::mix64(next.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod future_sizes {
    use super::*;

    /// The size of the future `f` returns (never called).
    fn future_of<'a, F, Fut>(_: F) -> usize
    where
        F: FnOnce(&'a Consensus, ClientCommand) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// Every command's future holds the path it takes; one the size of
    /// the rarest (a membership change, 3 KB) is copied as it is made and
    /// boxed whole for every forwarded command. 3,912 and 3,696 bytes with
    /// `RAFT.NODE`'s future held inline; about 1,000 and 800 boxed.
    #[test]
    fn a_command_s_future_is_not_the_size_of_a_membership_change() {
        let command = future_of(|c, cmd| c.execute_as(cmd.origin.client.conn, cmd.origin.seq, cmd.request));
        let forwarded = future_of(|c, cmd| ForwardedCommands::run(c, cmd));
        assert!(command < 2048, "a command's future takes {command} bytes");
        assert!(forwarded < 2048, "a forwarded command's future takes {forwarded} bytes");
    }
}
