//! Raft RPCs to peers over the [`peer`](super::peer) transport.

use std::sync::Arc;

use openraft::error::{InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, Timeout, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::RaftTypeConfig;

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
        match self.call(PeerRequest::AppendEntries(rpc), &option).await? {
            PeerResponse::AppendEntries(r) => r.map_err(|e| remote(self.target, &self.node(), e)),
            _ => Err(self.unexpected()),
        }
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

impl PeerClient {
    fn node(&self) -> <TypeConfig as RaftTypeConfig>::Node {
        NodeInfo { peer_addr: self.addr.clone(), client_addr: String::new() }
    }
}
