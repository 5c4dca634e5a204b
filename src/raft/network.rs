//! Raft RPC transport to peers.
//!
//! A one-node cluster never sends an RPC; this transport reports every peer
//! unreachable. The peer transport (persistent, authenticated connections on
//! the peer port) replaces it when clusters of several nodes arrive.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};

use super::types::{NodeId, NodeInfo, TypeConfig};

/// Creates a [`PeerClient`] per peer.
#[derive(Clone, Default)]
pub struct Network;

/// The connection to one peer.
pub struct PeerClient {
    target: NodeId,
}

impl PeerClient {
    fn unreachable<E: std::error::Error>(&self) -> RPCError<NodeId, NodeInfo, E> {
        let e = std::io::Error::other(format!("node {} is not reachable: no peer transport in a one-node cluster", self.target));
        RPCError::Unreachable(Unreachable::new(&e))
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, _node: &NodeInfo) -> PeerClient {
        PeerClient { target }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        Err(self.unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId, InstallSnapshotError>>> {
        Err(self.unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        Err(self.unreachable())
    }
}
