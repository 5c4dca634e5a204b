//! The openraft type configuration and the node description peers exchange.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::commands::Proposal;
use crate::protocol::Reply;

/// What the cluster knows about a member: where peers and clients reach it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub peer_addr: String,
    pub client_addr: String,
}

impl std::fmt::Display for NodeInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.peer_addr, self.client_addr)
    }
}

openraft::declare_raft_types!(
    /// raftlock's Raft types: entries carry [`Proposal`]s; the response to an
    /// entry is one [`Reply`] per command in it.
    pub TypeConfig:
        D = Proposal,
        R = Vec<Reply>,
        NodeId = u64,
        Node = NodeInfo,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type Raft = openraft::Raft<TypeConfig>;
pub type StorageIoError = openraft::StorageError<NodeId>;
