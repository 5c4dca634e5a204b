//! Raft RPCs to peers over the [`peer`](super::peer) transport.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, Timeout, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{LogId, RaftTypeConfig, Vote};

use super::log_store::Durable;
use super::peer::{PeerError, PeerPool, PeerRequest, PeerResponse};
use super::types::{NodeId, NodeInfo, TypeConfig};

/// Creates a [`PeerClient`] per peer.
#[derive(Clone)]
pub struct Network {
    pub pool: Arc<PeerPool>,
    pub node_id: NodeId,
    /// This node's log on disk: the commit index sent never passes it.
    pub durable: Durable,
}

/// Raft's view of one peer.
pub struct PeerClient {
    pool: Arc<PeerPool>,
    node_id: NodeId,
    target: NodeId,
    addr: String,
    durable: Durable,
    /// Heartbeats answered at once and sent a little later: see
    /// [`Notices`]. Each client has its own, so a client openraft makes for
    /// one request (the heartbeats that confirm leadership for a
    /// linearizable read) knows nothing yet and always sends.
    notices: Arc<Mutex<Notices>>,
}

/// How long a heartbeat may wait for entries to travel with.
///
/// openraft's replication of one follower sends one request at a time, and
/// sends a heartbeat (a request without entries) whenever the commit index
/// moves: so with a lone client every write cost each follower two
/// requests, the entry and then the news of its commit, and the next entry
/// waited for the answer to the second. The news rides on the next entry
/// instead, or goes alone after this delay (a follower applies an entry at
/// most this much later when nothing follows it; clients are answered by
/// the leader, which does not wait for it).
const NOTICE_DELAY: Duration = Duration::from_millis(2);

/// A heartbeat is answered `Success` on the follower's behalf only when the
/// follower answered `Success` to a request of the same vote that ended
/// where the heartbeat starts: its answer to this one can then only be
/// `Success`, or a higher vote, which the delayed send finds (the next
/// heartbeat then goes as it is, and openraft hears of it). Such an answer
/// carries no log position (openraft ignores heartbeats' matches), so no
/// commit ever counts it. What openraft reads of it besides is the time a
/// quorum last answered, only in its metrics (0.9.25, pinned: a later
/// openraft that confirms reads or a lease by replication's heartbeats must
/// not be given these answers).
#[derive(Default)]
struct Notices {
    /// The vote and the last log id of the follower's last `Success`.
    confirmed: Option<(Vote<NodeId>, Option<LogId<NodeId>>)>,
    /// The heartbeat answered early and not yet sent (only the latest:
    /// each carries all an earlier one did).
    pending: Option<(AppendEntriesRequest<TypeConfig>, Duration)>,
    /// A task is waiting to send `pending`.
    armed: bool,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &NodeInfo) -> PeerClient {
        PeerClient {
            pool: self.pool.clone(),
            node_id: self.node_id,
            target,
            addr: node.peer_addr.clone(),
            durable: self.durable.clone(),
            notices: Arc::default(),
        }
    }
}

type RpcErr<E = openraft::error::Infallible> = RPCError<NodeId, NodeInfo, RaftError<NodeId, E>>;

impl PeerClient {
    async fn call<E: std::error::Error>(&self, request: PeerRequest, option: &RPCOption) -> Result<PeerResponse, RpcErr<E>> {
        let ttl = option.hard_ttl();
        self.pool.call(self.target, &self.addr, request, ttl).await.map_err(|e| match e {
            PeerError::NotSent(..) | PeerError::Unreachable(..) => RPCError::Unreachable(Unreachable::new(&e)),
            PeerError::Timeout(_) => RPCError::Timeout(Timeout {
                action: openraft::network::RPCTypes::AppendEntries,
                id: self.node_id,
                target: self.target,
                timeout: ttl,
            }),
            PeerError::Refused(..) => RPCError::Network(NetworkError::new(&e)),
        })
    }

    fn unexpected<E: std::error::Error>(&self) -> RpcErr<E> {
        let e = std::io::Error::other(format!("unexpected answer from node {}", self.target));
        RPCError::Network(NetworkError::new(&e))
    }
}

fn remote<E: std::error::Error>(target: NodeId, node: &NodeInfo, e: RaftError<NodeId, E>) -> RpcErr<E> {
    RPCError::RemoteError(openraft::error::RemoteError::new_with_node(target, node.clone(), e))
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        // openraft counts the leader towards the commit before its own fsync
        // (see `log_store`): a follower learns of a commit only once the
        // leader's disk holds the entry too, so it never applies an entry a
        // majority has not stored.
        if !crate::planted::active(crate::planted::Bug::AppliedBeforeDurable) {
            rpc.leader_commit = self.durable.clamp(rpc.leader_commit);
        }
        // A frame over the transport's limit would break the link, and the
        // same entries would be sent again forever: ask openraft for fewer
        // (one entry always fits: client requests and entries are capped).
        let entries = rpc.entries.len() as u64;
        if entries > 1 && bincode::serialized_size(&rpc).map_or(true, |n| n as usize > super::peer::MAX_FRAME / 2) {
            return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(entries / 2)));
        }
        if rpc.entries.is_empty() {
            let mut notices = self.notices.lock().unwrap_or_else(|e| e.into_inner());
            if notices.confirmed == Some((rpc.vote, rpc.prev_log_id))
                || crate::planted::active(crate::planted::Bug::HeartbeatsAnsweredUnseen)
            {
                notices.pending = Some((rpc, option.hard_ttl()));
                if !notices.armed {
                    notices.armed = true;
                    tokio::spawn(send_notices(self.pool.clone(), self.target, self.addr.clone(), self.notices.clone()));
                }
                return Ok(AppendEntriesResponse::Success);
            }
        }
        // This request carries the vote and the commit index of any
        // heartbeat still waiting (the same replication stream, whose commit
        // index only grows), so that one need not go.
        {
            // Until its answer comes nothing is confirmed: openraft may drop
            // this call at its timeout, before the answer is read.
            let mut notices = self.notices.lock().unwrap_or_else(|e| e.into_inner());
            notices.pending = None;
            notices.confirmed = None;
        }
        let (vote, last) = (rpc.vote, rpc.entries.last().map(|e| e.log_id).or(rpc.prev_log_id));
        let answer = match self.call(PeerRequest::AppendEntries(rpc), &option).await {
            Ok(PeerResponse::AppendEntries(r)) => r.map_err(|e| remote(self.target, &self.node(), e)),
            Ok(_) => Err(self.unexpected()),
            Err(e) => Err(e),
        };
        self.notices.lock().unwrap_or_else(|e| e.into_inner()).confirmed = match &answer {
            Ok(AppendEntriesResponse::Success) => Some((vote, last)),
            Ok(AppendEntriesResponse::PartialSuccess(matching)) => Some((vote, *matching)),
            _ => None,
        };
        answer
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId, InstallSnapshotError>>> {
        match self.call(PeerRequest::InstallSnapshot(rpc), &option).await? {
            PeerResponse::InstallSnapshot(r) => r.map_err(|e| remote(self.target, &self.node(), e)),
            _ => Err(self.unexpected()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        match self.call(PeerRequest::Vote(rpc), &option).await? {
            PeerResponse::Vote(r) => r.map_err(|e| remote(self.target, &self.node(), e)),
            _ => Err(self.unexpected()),
        }
    }

    /// How long the leader waits before it tries an unreachable peer again
    /// (openraft's default is 500 ms). A node that restarts after leading
    /// holds its own vote, read back as not committed (`log_store`), so it
    /// stands for election once its election timeout (250 to 333 ms by
    /// default) passes without word from a leader; it must hear from the
    /// leader first. Standing with a stale log, it was refused, and on the
    /// way it deposed a leader of the same term with a lower id (openraft
    /// orders leaders of one term by id), and its refusal made it wait two
    /// more election timeouts at its next election: failovers after such a
    /// restart took 1.3 s, not 0.65 s.
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(REACH_AGAIN))
    }
}

/// See [`PeerClient::backoff`]; with the peer pool's own reconnection delay
/// (at most 100 ms, `peer::MAX_RECONNECT_DELAY`) a restarted peer hears from
/// the leader well within an election timeout.
const REACH_AGAIN: std::time::Duration = std::time::Duration::from_millis(50);

/// Sends the heartbeats [`PeerClient::append_entries`] answered early, each
/// [`NOTICE_DELAY`] after the last, while there are any.
async fn send_notices(pool: Arc<PeerPool>, target: NodeId, addr: String, notices: Arc<Mutex<Notices>>) {
    loop {
        tokio::time::sleep(NOTICE_DELAY).await;
        let (rpc, ttl) = {
            let mut n = notices.lock().unwrap_or_else(|e| e.into_inner());
            match n.pending.take() {
                Some(p) => p,
                None => {
                    n.armed = false;
                    return;
                }
            }
        };
        let answer = pool.call(target, &addr, PeerRequest::AppendEntries(rpc), ttl).await;
        if !matches!(answer, Ok(PeerResponse::AppendEntries(Ok(AppendEntriesResponse::Success)))) {
            // A higher vote, a conflict, no answer: openraft must hear it,
            // so its next heartbeat goes as it is.
            notices.lock().unwrap_or_else(|e| e.into_inner()).confirmed = None;
        }
    }
}

impl PeerClient {
    fn node(&self) -> <TypeConfig as RaftTypeConfig>::Node {
        NodeInfo { peer_addr: self.addr.clone(), client_addr: String::new() }
    }
}
