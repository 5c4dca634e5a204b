//! The peer transport: persistent, authenticated connections between nodes on
//! the peer port, carrying Raft RPCs and forwarded client commands.
//!
//! Framing: a 4-byte big-endian length, then a bincode `(request id, body)`.
//! A connection starts with a handshake in which each side proves it knows
//! the cluster secret without sending it: the caller's `Hello` carries a
//! random nonce; the peer answers `Challenge` with a nonce of its own and an
//! HMAC-SHA256 of both under the secret; the caller checks it, and only then
//! answers `Proof` with its own HMAC; the peer checks that and says
//! `HelloOk`. A node told to connect to an address where no member listens
//! (`RAFT.NODE ADD` of a stranger's address) so learns nothing of the secret,
//! and a peer that cannot prove it is disconnected. Requests on one connection are
//! served concurrently and answered by id, so a slow forwarded command never
//! delays a heartbeat. Connections are made lazily and remade with backoff.
//! With `--tls-cluster yes` every connection is mutual TLS first (see
//! [`crate::tls`]), and the handshake above runs inside it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{SinkExt, StreamExt};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use super::types::{NodeId, Raft, TypeConfig};
use super::ClusterError;
use crate::commands::ClientCommand;
use crate::protocol::Reply;

/// Largest peer frame: a batch of entries or a snapshot chunk.
pub const MAX_FRAME: usize = 256 * 1024 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Longest a peer's TLS handshake may take.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Most requests one connection buffers before it flushes them.
const MAX_COALESCED: usize = 256;
/// How often a connection with forwarded commands in hand yields for more
/// before it sends them (`run_conn`), and after how many yields in a row
/// that brought none it stops. Measured (3 nodes, 50 clients through a
/// follower, `LOCK.*`): one yield made entries of 26 commands, 74.6% of the
/// leader's pairs/s; these, 40 commands and 81.9%.
const COMPANY_YIELDS: usize = 16;
const COMPANY_IDLE_YIELDS: usize = 4;
/// A `ForwardMany` stops taking commands once it holds this many bytes of
/// them; a larger command goes alone, as `Forward`.
const MAX_FORWARD_MANY_BYTES: usize = 1024 * 1024;

/// What a node can do beyond the first version of this protocol, sent after
/// `HelloOk` as 8 bytes (little-endian): a node of an older version sends
/// none and ignores those it is sent, so each side uses only what the other
/// says it has.
const FEATURES: u64 = FEATURE_FORWARD_MANY;
/// `PeerRequest::ForwardMany` is understood.
const FEATURE_FORWARD_MANY: u64 = 1;

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    /// The caller's first frame. The node id comes last (the chaos
    /// harness's proxy reads it from the frame's last 8 bytes).
    Hello { nonce: [u8; 32], node_id: NodeId },
    /// The caller's HMAC of both nonces (after it checked the peer's).
    Proof([u8; 32]),
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// A client command taken by a follower, for the leader to run. The same
    /// command (same origin) may come again if its answer was lost.
    Forward(ClientCommand),
    /// Several, taken at once, in one frame: the frame's id is the first
    /// command's, and each next command has the next id. Each is answered
    /// as if forwarded alone (`PeerResponse::Forward` under its id) as soon
    /// as it is done, so none waits for another. Only to a peer that said
    /// it has [`FEATURE_FORWARD_MANY`].
    ForwardMany(Vec<ClientCommand>),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    HelloOk,
    /// The peer's nonce, and its HMAC of both nonces.
    Challenge { nonce: [u8; 32], proof: [u8; 32] },
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// The command's reply, or why the leader could not run it (then the
    /// follower tries again, wherever the leader is by then).
    Forward(Result<Reply, ClusterError>),
    Refused(String),
}

/// Why a peer call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    /// The request never left this node: safe to retry, even for a write.
    #[error("peer {0} unreachable: {1}")]
    NotSent(NodeId, String),
    /// The link failed after the request was sent: it may have run.
    #[error("peer {0} unreachable: {1}")]
    Unreachable(NodeId, String),
    #[error("peer {0} did not answer in time")]
    Timeout(NodeId),
    #[error("peer {0} refused: {1}")]
    Refused(NodeId, String),
}

/// Runs commands forwarded by followers (implemented by the server).
pub trait ForwardHandler: Send + Sync + 'static {
    /// The command's outcome, and this node's applied index once it was
    /// reached (at least the index the reply reflects).
    fn forward(&self, command: ClientCommand) -> BoxFuture<'static, (Result<Reply, ClusterError>, u64)>;
}

fn encode(id: u64, body: &impl Serialize) -> Bytes {
    Bytes::from(bincode::serialize(&(id, body)).expect("serialising plain data cannot fail"))
}

/// A response frame, followed by this node's wall clock (Unix microseconds,
/// 8 bytes little-endian) as it sends it, from which the caller estimates the
/// offset between their clocks (see [`ClockEstimate`]); for a forwarded
/// command, then by the leader's applied index after it (8 bytes, see
/// [`Answer::applied`]). A node of an older version ignores the trailing
/// bytes (bincode allows them; it reads no clock from a trailer of 16
/// bytes), and a response without them is read as before.
fn encode_stamped(id: u64, body: &PeerResponse, applied: Option<u64>) -> Bytes {
    let mut frame = bincode::serialize(&(id, body)).expect("serialising plain data cannot fail");
    frame.extend_from_slice(&crate::clock::wall_unix_us().to_le_bytes());
    if let Some(applied) = applied {
        frame.extend_from_slice(&applied.to_le_bytes());
    }
    Bytes::from(frame)
}

/// What follows the response in `frame`: the peer's wall clock, and the
/// applied index of a forwarded command's answer, each if there.
fn trailer_of(frame: &[u8], id: u64, response: &PeerResponse) -> (Option<u64>, Option<u64>) {
    let Some(size) = bincode::serialized_size(&(id, response)).ok() else { return (None, None) };
    let field = |at: usize| -> Option<u64> {
        let bytes: [u8; 8] = frame.get(size as usize + at..)?.get(..8)?.try_into().ok()?;
        Some(u64::from_le_bytes(bytes))
    };
    (field(0), field(8))
}

/// A response, with the applied index the answering node sent after it
/// (forwarded commands only; `None` from a node of an older version).
pub struct Answer {
    pub response: PeerResponse,
    pub applied: Option<u64>,
}

/// The last clock offset measured of each peer, in ms (see [`ClockEstimate`]).
pub fn clock_offsets() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<NodeId, i64>> {
    static OFFSETS: std::sync::OnceLock<Mutex<std::collections::BTreeMap<NodeId, i64>>> = std::sync::OnceLock::new();
    OFFSETS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// How far a peer's wall clock is from ours, from the calls made to it: each
/// response carries the peer's clock, read against our wall clock at the
/// midpoint of the call (the wall clock at the send, plus half the round
/// trip as the monotonic clock measures it, so that a step of our wall
/// clock during the call does not make a short round trip). Of each
/// second's samples the one with the shortest round trip is kept (the least
/// queueing, so the least error: at most half its round trip), and exported
/// as the peer's offset. Only for operators: leases never depend on it.
struct ClockEstimate {
    peer: NodeId,
    since: Instant,
    best: Option<(u64, i64)>,
}

impl ClockEstimate {
    const WINDOW: Duration = Duration::from_secs(1);

    fn new(peer: NodeId) -> ClockEstimate {
        ClockEstimate { peer, since: Instant::now(), best: None }
    }

    /// A response stamped `peer_us`, to a call sent at `sent_us` on our wall
    /// clock, `rtt` ago.
    fn sample(&mut self, sent_us: u64, rtt: Duration, peer_us: u64) {
        let rtt = rtt.as_micros() as u64;
        let midpoint = sent_us.saturating_add(rtt / 2);
        let offset = peer_us as i64 - midpoint as i64;
        if self.best.is_none_or(|(best_rtt, _)| rtt < best_rtt) {
            self.best = Some((rtt, offset));
        }
        if self.since.elapsed() >= Self::WINDOW {
            if let Some((rtt, offset)) = self.best.take() {
                crate::metrics::record_peer_clock(self.peer, offset, rtt);
                clock_offsets().insert(self.peer, offset / 1000);
            }
            self.since = Instant::now();
        }
    }
}

/// A peer link's bytes: plain TCP, or TLS over it.
trait PeerStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> PeerStream for T {}
type PeerSocket = Box<dyn PeerStream>;

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(MAX_FRAME).new_codec()
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// What a side of the handshake (`role`: `b"server"` for the side that was
/// called, `b"client"` for the caller) shows to prove it knows `secret`.
fn proof(secret: &str, role: &[u8], caller_nonce: &[u8; 32], peer_nonce: &[u8; 32]) -> HmacSha256 {
    use hmac::Mac;
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(b"raftlock peer handshake ");
    mac.update(role);
    mac.update(caller_nonce);
    mac.update(peer_nonce);
    mac
}

fn prove(secret: &str, role: &[u8], caller_nonce: &[u8; 32], peer_nonce: &[u8; 32]) -> [u8; 32] {
    use hmac::Mac;
    proof(secret, role, caller_nonce, peer_nonce).finalize().into_bytes().into()
}

/// Checks a proof in constant time.
fn proven(secret: &str, role: &[u8], caller_nonce: &[u8; 32], peer_nonce: &[u8; 32], shown: &[u8; 32]) -> bool {
    use hmac::Mac;
    proof(secret, role, caller_nonce, peer_nonce).verify_slice(shown).is_ok()
}

/// Fills `out` with random bytes from the kernel.
pub fn fill_random(out: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < out.len() {
        // SAFETY: writes at most the rest of `out`.
        let n = unsafe { libc::getrandom(out[filled..].as_mut_ptr().cast(), out.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// 32 random bytes from the kernel.
fn nonce() -> [u8; 32] {
    let mut out = [0u8; 32];
    fill_random(&mut out).unwrap_or_else(|e| panic!("the kernel has no random bytes to give: {e}"));
    out
}

/// Accepts peer connections until the listener fails.
pub async fn serve(
    listener: TcpListener,
    raft: Raft,
    secret: String,
    handler: Arc<dyn ForwardHandler>,
    tls: Option<Arc<crate::tls::Tls>>,
) {
    loop {
        let (socket, addr) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!("peer accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let (raft, secret, handler) = (raft.clone(), secret.clone(), handler.clone());
        let acceptor = tls.as_ref().and_then(|t| t.peer()).map(|(acceptor, _)| acceptor);
        tokio::spawn(async move {
            let socket: PeerSocket = match acceptor {
                None => Box::new(socket),
                Some(acceptor) => match crate::tls::accept(&acceptor, socket, TLS_HANDSHAKE_TIMEOUT).await {
                    Ok(stream) => Box::new(stream),
                    Err(why) => {
                        tracing::warn!(%addr, "refused a peer connection: {why}");
                        return;
                    }
                },
            };
            if let Err(e) = serve_conn(socket, raft, secret, handler).await {
                tracing::debug!(%addr, "peer connection closed: {e}");
            }
        });
    }
}

async fn serve_conn(socket: PeerSocket, raft: Raft, secret: String, handler: Arc<dyn ForwardHandler>) -> Result<(), String> {
    let (mut sink, mut stream) = Framed::new(socket, codec()).split();
    let mut next_frame = async || -> Result<Bytes, String> {
        Ok(tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .map_err(|_| "no handshake")?
            .ok_or("closed during the handshake")?
            .map_err(|e| e.to_string())?
            .freeze())
    };
    let first = next_frame().await?;
    let Ok((id, PeerRequest::Hello { nonce: caller, .. })) = bincode::deserialize::<(u64, PeerRequest)>(&first) else {
        let _ = sink.send(encode(0, &PeerResponse::Refused("no hello".into()))).await;
        return Err("a peer connection did not start with hello".into());
    };
    let ours = nonce();
    let challenge = PeerResponse::Challenge { nonce: ours, proof: prove(&secret, b"server", &caller, &ours) };
    sink.send(encode(id, &challenge)).await.map_err(|e| e.to_string())?;
    let second = next_frame().await?;
    match bincode::deserialize::<(u64, PeerRequest)>(&second) {
        Ok((id, PeerRequest::Proof(shown))) if proven(&secret, b"client", &caller, &ours, &shown) => {
            let mut ok = encode(id, &PeerResponse::HelloOk).to_vec();
            ok.extend_from_slice(&FEATURES.to_le_bytes());
            sink.send(Bytes::from(ok)).await.map_err(|e| e.to_string())?;
        }
        _ => {
            tracing::warn!("refused a peer connection: wrong cluster secret");
            let _ = sink.send(encode(0, &PeerResponse::Refused("wrong cluster secret".into()))).await;
            return Err("peer presented a wrong cluster secret".into());
        }
    }
    let (tx, mut rx) = mpsc::channel::<Bytes>(1024);
    // Requests being served: their answers are still to come.
    let serving = Arc::new(AtomicUsize::new(0));
    let writer = {
        let serving = serving.clone();
        tokio::spawn(async move {
            // Every answer ready at this moment goes out in one write.
            'frames: while let Some(frame) = rx.recv().await {
                if sink.feed(frame).await.is_err() {
                    break;
                }
                let mut yielded = false;
                loop {
                    while let Ok(frame) = rx.try_recv() {
                        if sink.feed(frame).await.is_err() {
                            break 'frames;
                        }
                    }
                    // An answer wakes this task, which then runs before the
                    // other tasks woken with it (the runtime's LIFO slot):
                    // without a yield each answer of a commit's batch went
                    // out in a write (and a TCP segment) of its own. While
                    // other requests are in hand, let the tasks ready now
                    // run first, once (see `yield_for_company`).
                    if yielded || serving.load(Ordering::Acquire) == 0 {
                        break;
                    }
                    yield_for_company().await;
                    yielded = true;
                }
                if sink.flush().await.is_err() {
                    break;
                }
            }
        })
    };
    while let Some(frame) = stream.next().await {
        let frame = frame.map_err(|e| e.to_string())?;
        let (id, request): (u64, PeerRequest) = bincode::deserialize(&frame).map_err(|e| e.to_string())?;
        let (raft, handler, tx) = (raft.clone(), handler.clone(), tx.clone());
        // Forwarded commands come many at a time and their answers are
        // written together (one commit answers them all); a Raft RPC's
        // answer goes out alone.
        let serving = matches!(request, PeerRequest::Forward(_) | PeerRequest::ForwardMany(_))
            .then(|| Serving::start(&serving));
        if let PeerRequest::ForwardMany(commands) = request {
            crate::metrics::record_forward_batch(commands.len());
            let mut serving = serving;
            tokio::spawn(async move {
                // Polled first in order, each command reaches the write
                // batcher before the next starts, so the writes share an
                // entry; each answer goes out as soon as it is ready, under
                // its own id (the writer joins the answers ready together
                // into one write), so none waits for another.
                let mut runs: futures_util::stream::FuturesUnordered<_> = commands
                    .into_iter()
                    .zip(id..)
                    .map(|(command, id)| {
                        let run = handler.forward(command);
                        async move { (id, run.await) }
                    })
                    .collect();
                let mut left = runs.len();
                while let Some((id, (result, applied))) = runs.next().await {
                    let frame = encode_stamped(id, &PeerResponse::Forward(result), Some(applied));
                    left -= 1;
                    if left == 0 {
                        drop(serving.take());
                    }
                    let _ = tx.send(frame).await;
                }
            });
            continue;
        }
        tokio::spawn(async move {
            let (response, applied) = match request {
                PeerRequest::Hello { .. } | PeerRequest::Proof(_) => {
                    (PeerResponse::Refused("already past the handshake".into()), None)
                }
                PeerRequest::AppendEntries(rpc) => (PeerResponse::AppendEntries(raft.append_entries(rpc).await), None),
                PeerRequest::Vote(rpc) => (PeerResponse::Vote(raft.vote(rpc).await), None),
                PeerRequest::InstallSnapshot(rpc) => (PeerResponse::InstallSnapshot(raft.install_snapshot(rpc).await), None),
                PeerRequest::Forward(command) => {
                    crate::metrics::record_forward_batch(1);
                    let (result, applied) = handler.forward(command).await;
                    (PeerResponse::Forward(result), Some(applied))
                }
                PeerRequest::ForwardMany(_) => unreachable!("served above"),
            };
            let frame = encode_stamped(id, &response, applied);
            // Counted out as it is queued: the writer, which drains the
            // queue before it flushes, finds it there (or, on another
            // thread, in its next write).
            drop(serving);
            let _ = tx.send(frame).await;
        });
    }
    writer.abort();
    Ok(())
}

type Waiter = oneshot::Sender<Result<Answer, PeerError>>;

/// Lets every task that is ready to run do so before this one goes on: the
/// runtime defers a yielding task until its run queue is empty (and has
/// polled for I/O), so what those tasks send meanwhile joins the caller's
/// write. With nothing else ready it costs one poll of the I/O driver.
async fn yield_for_company() {
    tokio::task::yield_now().await;
}

/// Counts a request of a peer's connection while it is served.
struct Serving(Arc<AtomicUsize>);

impl Serving {
    fn start(count: &Arc<AtomicUsize>) -> Serving {
        count.fetch_add(1, Ordering::AcqRel);
        Serving(count.clone())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One persistent connection to a peer, shared by every caller.
struct PeerConn {
    requests: mpsc::Sender<(PeerRequest, Waiter)>,
}

/// Connections to every peer, made on first use.
pub struct PeerPool {
    node_id: NodeId,
    secret: String,
    tls: Option<Arc<crate::tls::Tls>>,
    conns: Mutex<HashMap<(NodeId, String), Arc<PeerConn>>>,
}

impl PeerPool {
    pub fn new(node_id: NodeId, secret: String, tls: Option<Arc<crate::tls::Tls>>) -> Arc<PeerPool> {
        Arc::new(PeerPool { node_id, secret, tls, conns: Mutex::new(HashMap::new()) })
    }

    fn conn(&self, target: NodeId, addr: &str) -> Arc<PeerConn> {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns
            .entry((target, addr.to_string()))
            .or_insert_with(|| {
                let (tx, rx) = mpsc::channel(4096);
                tokio::spawn(run_conn(target, addr.to_string(), self.node_id, self.secret.clone(), self.tls.clone(), rx));
                Arc::new(PeerConn { requests: tx })
            })
            .clone()
    }

    /// Sends `request` to `target` at `addr` and waits up to `ttl` for the answer.
    pub async fn call(&self, target: NodeId, addr: &str, request: PeerRequest, ttl: Duration) -> Result<PeerResponse, PeerError> {
        self.call_with_trailer(target, addr, request, ttl).await.map(|a| a.response)
    }

    /// [`PeerPool::call`], with what the answer carried after it.
    pub async fn call_with_trailer(&self, target: NodeId, addr: &str, request: PeerRequest, ttl: Duration) -> Result<Answer, PeerError> {
        let conn = self.conn(target, addr);
        let (tx, rx) = oneshot::channel();
        conn.requests
            .try_send((request, tx))
            .map_err(|_| PeerError::NotSent(target, "too many requests queued".into()))?;
        match tokio::time::timeout(ttl, rx).await {
            Err(_) => Err(PeerError::Timeout(target)),
            Ok(Err(_)) => Err(PeerError::Unreachable(target, "connection task stopped".into())),
            Ok(Ok(result)) => result,
        }
    }
}

/// The longest a peer connection waits before it tries to connect again
/// after a failure (from 20 ms, doubling). Short: a restarted peer must hear
/// from the leader within an election timeout (`network::REACH_AGAIN`), and
/// a failed connect to a live host costs little.
pub(super) const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// Owns the connection to one peer: connects when there is work, sends
/// requests, routes answers by id, and fails waiters when the link drops.
async fn run_conn(
    target: NodeId,
    addr: String,
    node_id: NodeId,
    secret: String,
    tls: Option<Arc<crate::tls::Tls>>,
    mut requests: mpsc::Receiver<(PeerRequest, Waiter)>,
) {
    let mut backoff = Duration::from_millis(20);
    let mut next_id: u64 = 1;
    while let Some(first) = requests.recv().await {
        let (socket, features) = match connect(&addr, node_id, &secret, tls.as_deref()).await {
            Ok(s) => {
                backoff = Duration::from_millis(20);
                s
            }
            Err(e) => {
                let _ = first.1.send(Err(PeerError::NotSent(target, e)));
                // Fail what queued meanwhile, then wait before trying again.
                let until = Instant::now() + backoff;
                while let Ok(Some((_, w))) = tokio::time::timeout_at(until.into(), requests.recv()).await {
                    let _ = w.send(Err(PeerError::NotSent(target, "reconnecting".into())));
                }
                backoff = (backoff * 2).min(MAX_RECONNECT_DELAY);
                continue;
            }
        };
        let (mut sink, mut stream) = socket.split();
        // Each call's waiter, and when it was sent (wall clock and monotonic).
        let mut inflight: HashMap<u64, (Waiter, u64, Instant)> = HashMap::new();
        let many = features & FEATURE_FORWARD_MANY != 0;
        let mut clock = ClockEstimate::new(target);
        let mut pending = Some(first);
        let mut last_batch = 0;
        loop {
            if let Some(first) = pending.take() {
                // Every request queued at this moment goes out in one write.
                // A request counts as sent (it may run) once its frame is
                // buffered: a failure after that is `Unreachable`, never
                // `NotSent`.
                let mut next = Some(first);
                let mut fed = 0;
                let mut failed = false;
                // Other callers are about (requests in flight, or the last
                // write carried several): their requests may be on their
                // way, from tasks this one's wake-up ran ahead of.
                let company = !inflight.is_empty() || last_batch > 1;
                let (mut yields, mut idle) = (0, 0);
                // Whether a request went into the write alone (a Raft RPC, a
                // read): then the gathering stops at one yield, as before
                // forwarded writes waited longer, so that it goes out now.
                let mut alone = false;
                // Forwarded writes go together, as one `ForwardMany`, to a
                // peer that has it: one frame for them all, which the leader
                // takes into one log entry, answering each as it is done.
                // Reads and blocking commands go on their own.
                let mut forwards: Vec<(ClientCommand, Waiter)> = Vec::new();
                let mut forward_bytes = 0;
                while let Some((request, waiter)) = next.take() {
                    match request {
                        PeerRequest::Forward(command)
                            if many
                                && forward_bytes + command.request.size() <= MAX_FORWARD_MANY_BYTES
                                && command.request.answered_by_its_entry() =>
                        {
                            forward_bytes += command.request.size();
                            forwards.push((command, waiter));
                        }
                        request => {
                            let id = next_id;
                            next_id += 1;
                            if sink.feed(encode(id, &request)).await.is_err() {
                                let _ = waiter.send(Err(PeerError::NotSent(target, "send failed".into())));
                                failed = true;
                                break;
                            }
                            inflight.insert(id, (waiter, crate::clock::wall_unix_us(), Instant::now()));
                            alone = true;
                        }
                    }
                    fed += 1;
                    if fed < MAX_COALESCED {
                        next = requests.try_recv().ok();
                        // Forwarded commands wait longer: the clients a
                        // commit answered come back together, and one
                        // message, one entry, for them all costs the
                        // leader and every node a round less.
                        let most = if forwards.is_empty() || alone { 1 } else { COMPANY_YIELDS };
                        while next.is_none() && company && yields < most && idle < COMPANY_IDLE_YIELDS {
                            yield_for_company().await;
                            yields += 1;
                            next = requests.try_recv().ok();
                            idle = if next.is_some() { 0 } else { idle + 1 };
                        }
                    }
                }
                if !forwards.is_empty() {
                    // The commands take the ids from the frame's on, each
                    // answered under its own.
                    let first = next_id;
                    next_id += forwards.len() as u64;
                    let (commands, waiters): (Vec<_>, Vec<_>) = forwards.into_iter().unzip();
                    let request = match commands.len() {
                        1 => PeerRequest::Forward(commands.into_iter().next().expect("one")),
                        _ => PeerRequest::ForwardMany(commands),
                    };
                    if failed || sink.feed(encode(first, &request)).await.is_err() {
                        for w in waiters {
                            let _ = w.send(Err(PeerError::NotSent(target, "send failed".into())));
                        }
                        failed = true;
                    } else {
                        let sent_us = crate::clock::wall_unix_us();
                        for (w, id) in waiters.into_iter().zip(first..) {
                            inflight.insert(id, (w, sent_us, Instant::now()));
                        }
                    }
                }
                last_batch = fed;
                if failed || sink.flush().await.is_err() {
                    break;
                }
            }
            tokio::select! {
                next = requests.recv() => match next {
                    Some(item) => pending = Some(item),
                    None => return,
                },
                frame = stream.next() => {
                    let Some(Ok(frame)) = frame else { break };
                    match bincode::deserialize::<(u64, PeerResponse)>(&frame) {
                        Ok((id, response)) => {
                            if let Some((w, sent_us, sent_at)) = inflight.remove(&id) {
                                let (stamp, applied) = trailer_of(&frame, id, &response);
                                if let Some(peer_us) = stamp {
                                    clock.sample(sent_us, sent_at.elapsed(), peer_us);
                                }
                                let _ = w.send(Ok(Answer { response, applied }));
                            }
                        }
                        Err(_) => break,
                    }
                }
            }
        }
        for (_, (w, _, _)) in inflight.drain() {
            let _ = w.send(Err(PeerError::Unreachable(target, "connection lost".into())));
        }
    }
}

async fn connect(
    addr: &str,
    node_id: NodeId,
    secret: &str,
    tls: Option<&crate::tls::Tls>,
) -> Result<(Framed<PeerSocket, LengthDelimitedCodec>, u64), String> {
    let socket = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let _ = socket.set_nodelay(true);
    let socket: PeerSocket = match tls.and_then(|t| t.peer()) {
        None => Box::new(socket),
        Some((_, connector)) => Box::new(crate::tls::connect(&connector, addr, socket, TLS_HANDSHAKE_TIMEOUT).await?),
    };
    let mut framed = Framed::new(socket, codec());
    let ours = nonce();
    framed.send(encode(0, &PeerRequest::Hello { nonce: ours, node_id })).await.map_err(|e| e.to_string())?;
    let (peer, shown) = match answer(&mut framed).await?.0 {
        PeerResponse::Challenge { nonce, proof } => (nonce, proof),
        PeerResponse::Refused(why) => return Err(why),
        _ => return Err("bad answer to hello".into()),
    };
    // Nothing that depends on the secret leaves this node before the peer
    // has shown it knows the secret.
    if !proven(secret, b"server", &ours, &peer, &shown) {
        tracing::warn!(addr, "refused a peer: it could not prove the cluster secret (wrong cluster secret)");
        return Err("wrong cluster secret: the peer does not know the cluster secret".into());
    }
    framed.send(encode(0, &PeerRequest::Proof(prove(secret, b"client", &ours, &peer)))).await.map_err(|e| e.to_string())?;
    match answer(&mut framed).await? {
        // What follows `HelloOk` says what the peer can do (see [`FEATURES`]).
        (PeerResponse::HelloOk, frame) => {
            let size = bincode::serialized_size(&(0u64, PeerResponse::HelloOk)).unwrap_or(0) as usize;
            let features = frame.get(size..size + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
            Ok((framed, features))
        }
        (PeerResponse::Refused(why), _) => Err(why),
        _ => Err("bad answer to the proof".into()),
    }
}

/// The next frame of the handshake, as the called peer's answer, and the frame.
async fn answer(framed: &mut Framed<PeerSocket, LengthDelimitedCodec>) -> Result<(PeerResponse, Bytes), String> {
    let frame = tokio::time::timeout(CONNECT_TIMEOUT, framed.next())
        .await
        .map_err(|_| "the handshake timed out".to_string())?
        .ok_or("closed during the handshake")?
        .map_err(|e| e.to_string())?;
    let frame = frame.freeze();
    bincode::deserialize::<(u64, PeerResponse)>(&frame).map(|(_, r)| (r, frame.clone())).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_depend_on_the_secret_the_role_and_both_nonces() {
        let (a, b) = (nonce(), nonce());
        assert_ne!(a, b);
        let p = prove("s3cret", b"server", &a, &b);
        assert!(proven("s3cret", b"server", &a, &b, &p));
        assert!(!proven("s3cret", b"client", &a, &b, &p), "a server's proof must not pass as a client's");
        assert!(!proven("other", b"server", &a, &b, &p));
        assert!(!proven("s3cret", b"server", &b, &a, &p));
    }

    /// A node told to connect where no member listens (`RAFT.NODE ADD` of a
    /// stranger's address) gives the stranger nothing of the secret: its
    /// hello carries only a nonce, and it stops when the stranger cannot
    /// prove the secret.
    #[tokio::test]
    async fn a_stranger_learns_nothing_of_the_secret() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stranger = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut framed = Framed::new(socket, codec());
            let mut heard = Vec::new();
            let hello = framed.next().await.unwrap().unwrap();
            heard.extend_from_slice(&hello);
            let bluff = PeerResponse::Challenge { nonce: nonce(), proof: nonce() };
            framed.send(encode(0, &bluff)).await.unwrap();
            // Whatever else the node sends before it hangs up.
            while let Ok(Some(Ok(frame))) = tokio::time::timeout(Duration::from_millis(300), framed.next()).await {
                heard.extend_from_slice(&frame);
            }
            (hello.len(), heard)
        });
        let secret = "topsecret-7f3a9c";
        let result = connect(&addr, 1, secret, None).await;
        assert!(matches!(&result, Err(e) if e.contains("does not know the cluster secret")), "{:?}", result.err());
        let (hello_len, heard) = stranger.await.unwrap();
        assert_eq!(heard.len(), hello_len, "the node sent more than its hello");
        assert!(!heard.windows(secret.len()).any(|w| w == secret.as_bytes()), "the secret crossed the wire");
    }

    /// A peer that passes the handshake, sending `features` after `HelloOk`
    /// (none, as an older version, for `None`), then records how forwarded
    /// commands arrive ("one" or "many:N") and answers each with its key,
    /// those of a `ForwardMany` last first; `hang_up` closes the connection
    /// instead of answering a `ForwardMany`.
    async fn forwarding_peer(secret: &'static str, features: Option<u64>, hang_up: bool) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut framed = Framed::new(Box::new(socket) as PeerSocket, codec());
            let request = |frame: bytes::BytesMut| bincode::deserialize::<(u64, PeerRequest)>(&frame).unwrap();
            let Some(Ok(frame)) = framed.next().await else { return };
            let (_, PeerRequest::Hello { nonce: caller, .. }) = request(frame) else { panic!("no hello") };
            let ours = nonce();
            let challenge = PeerResponse::Challenge { nonce: ours, proof: prove(secret, b"server", &caller, &ours) };
            framed.send(encode(0, &challenge)).await.unwrap();
            let Some(Ok(frame)) = framed.next().await else { return };
            assert!(matches!(request(frame), (_, PeerRequest::Proof(_))));
            let mut ok = encode(0, &PeerResponse::HelloOk).to_vec();
            if let Some(f) = features {
                ok.extend_from_slice(&f.to_le_bytes());
            }
            framed.send(Bytes::from(ok)).await.unwrap();
            let key = |c: &ClientCommand| match &c.request {
                crate::commands::Request::Command(argv) => Ok(Reply::Bulk(argv[1].clone())),
                other => panic!("unexpected {other:?}"),
            };
            while let Some(Ok(frame)) = framed.next().await {
                let answers: Vec<(u64, PeerResponse)> = match request(frame) {
                    (id, PeerRequest::Forward(c)) => {
                        log.lock().unwrap().push("one".to_string());
                        vec![(id, PeerResponse::Forward(key(&c)))]
                    }
                    (id, PeerRequest::ForwardMany(cs)) => {
                        log.lock().unwrap().push(format!("many:{}", cs.len()));
                        if hang_up {
                            return;
                        }
                        let mut answers: Vec<_> = cs.iter().zip(id..).map(|(c, id)| (id, PeerResponse::Forward(key(c)))).collect();
                        answers.reverse();
                        answers
                    }
                    (_, other) => panic!("unexpected {other:?}"),
                };
                for (id, response) in answers {
                    framed.send(encode_stamped(id, &response, Some(7))).await.unwrap();
                }
            }
        });
        (addr, seen)
    }

    /// Forwards `argvs` at once through a new pool, as the callers of
    /// one moment do; each caller's outcome.
    async fn forward_all(addr: &str, secret: &str, argvs: &[&[&str]]) -> Vec<Result<Answer, PeerError>> {
        let pool = PeerPool::new(1, secret.to_string(), None);
        let calls = argvs.iter().enumerate().map(|(i, argv)| {
            let command = ClientCommand {
                origin: crate::commands::Origin::test(i as u64 + 1),
                request: crate::commands::Request::Command(argv.iter().map(|a| Bytes::from(a.to_string())).collect()),
            };
            pool.call_with_trailer(2, addr, PeerRequest::Forward(command), Duration::from_secs(5))
        });
        futures_util::future::join_all(calls).await
    }

    fn forwarded_key(answer: &Result<Answer, PeerError>) -> Option<Bytes> {
        match answer {
            Ok(Answer { response: PeerResponse::Forward(Ok(Reply::Bulk(key))), applied: Some(7) }) => Some(key.clone()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn forwarded_writes_travel_together_and_each_caller_gets_its_own_answer_in_any_order() {
        let secret = "forward-many-secret";
        let (addr, seen) = forwarding_peer(secret, Some(FEATURES), false).await;
        let argvs: Vec<Vec<String>> = (0..5).map(|i| vec!["SET".into(), format!("k{i}"), "v".into()]).collect();
        let mut argvs: Vec<Vec<&str>> = argvs.iter().map(|a| a.iter().map(|s| s.as_str()).collect()).collect();
        // A read goes alone: it must not wait for the writes, nor they for it.
        argvs.insert(2, vec!["GET", "r"]);
        let argvs: Vec<&[&str]> = argvs.iter().map(|a| &a[..]).collect();
        let answers = forward_all(&addr, secret, &argvs).await;
        let keys: Vec<Option<Bytes>> = answers.iter().map(forwarded_key).collect();
        let want: Vec<Option<Bytes>> = argvs.iter().map(|a| Some(Bytes::from(a[1].to_string()))).collect();
        assert_eq!(keys, want, "{:?}", answers.iter().map(|a| a.as_ref().err()).collect::<Vec<_>>());
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, vec!["many:5", "one"]);
    }

    #[tokio::test]
    async fn a_peer_of_an_older_version_gets_forwarded_commands_one_by_one() {
        let secret = "forward-one-secret";
        let (addr, seen) = forwarding_peer(secret, None, false).await;
        let answers = forward_all(&addr, secret, &[&["SET", "a", "1"], &["SET", "b", "2"], &["SET", "c", "3"]]).await;
        let keys: Vec<Option<Bytes>> = answers.iter().map(forwarded_key).collect();
        assert_eq!(keys, vec![Some(Bytes::from("a")), Some(Bytes::from("b")), Some(Bytes::from("c"))]);
        assert_eq!(*seen.lock().unwrap(), vec!["one", "one", "one"]);
    }

    #[tokio::test]
    async fn forwarded_commands_lost_with_their_connection_fail_each_as_possibly_run() {
        let secret = "forward-lost-secret";
        let (addr, _) = forwarding_peer(secret, Some(FEATURES), true).await;
        let answers = forward_all(&addr, secret, &[&["SET", "a", "1"], &["SET", "b", "2"]]).await;
        for a in &answers {
            assert!(matches!(a, Err(PeerError::Unreachable(2, _))), "{:?}", a.as_ref().err());
        }
    }

}
