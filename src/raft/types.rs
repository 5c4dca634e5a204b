//! The openraft type configuration and the node description peers exchange.

use std::io::Cursor;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use crate::storage::{ScratchFile, SnapshotBytes};

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
        SnapshotData = SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type Raft = openraft::Raft<TypeConfig>;
pub type StorageIoError = openraft::StorageError<NodeId>;

/// A snapshot's data as openraft reads it (to send it to a follower) or
/// writes it (receiving one).
pub enum SnapshotData {
    /// In memory (tests, and the empty snapshot of a build that failed).
    Memory(Cursor<Vec<u8>>),
    /// One being received from a leader, written to a file as its chunks
    /// arrive (never held in memory whole), then installed from that file.
    Receiving(Receiving),
    /// Where the snapshot file lies (mapped), not read into memory: openraft
    /// asks for the current snapshot at every start, for its meta alone.
    Stored(Cursor<StoredData>),
}

/// A snapshot's data as it is received: `file` writes to `scratch`'s file.
pub struct Receiving {
    pub file: tokio::fs::File,
    pub scratch: ScratchFile,
}

impl Receiving {
    pub fn new(scratch: ScratchFile) -> std::io::Result<Receiving> {
        Ok(Receiving { file: tokio::fs::File::from_std(scratch.file().try_clone()?), scratch })
    }
}

/// The data part (`range`) of a snapshot file's bytes.
pub struct StoredData {
    pub bytes: SnapshotBytes,
    pub range: Range<usize>,
}

impl AsRef<[u8]> for StoredData {
    fn as_ref(&self) -> &[u8] {
        &self.bytes.as_ref()[self.range.clone()]
    }
}

impl SnapshotData {
    pub fn in_memory(data: Vec<u8>) -> SnapshotData {
        SnapshotData::Memory(Cursor::new(data))
    }
}

impl AsyncRead for SnapshotData {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotData::Memory(c) => Pin::new(c).poll_read(cx, buf),
            SnapshotData::Receiving(r) => Pin::new(&mut r.file).poll_read(cx, buf),
            SnapshotData::Stored(c) => Pin::new(c).poll_read(cx, buf),
        }
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, position: std::io::SeekFrom) -> std::io::Result<()> {
        match self.get_mut() {
            SnapshotData::Memory(c) => Pin::new(c).start_seek(position),
            SnapshotData::Receiving(r) => Pin::new(&mut r.file).start_seek(position),
            SnapshotData::Stored(c) => Pin::new(c).start_seek(position),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        match self.get_mut() {
            SnapshotData::Memory(c) => Pin::new(c).poll_complete(cx),
            SnapshotData::Receiving(r) => Pin::new(&mut r.file).poll_complete(cx),
            SnapshotData::Stored(c) => Pin::new(c).poll_complete(cx),
        }
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            SnapshotData::Memory(c) => Pin::new(c).poll_write(cx, buf),
            SnapshotData::Receiving(r) => Pin::new(&mut r.file).poll_write(cx, buf),
            SnapshotData::Stored(_) => Poll::Ready(Err(std::io::Error::other("a stored snapshot is not written to"))),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotData::Memory(c) => Pin::new(c).poll_flush(cx),
            SnapshotData::Receiving(r) => Pin::new(&mut r.file).poll_flush(cx),
            SnapshotData::Stored(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotData::Memory(c) => Pin::new(c).poll_shutdown(cx),
            SnapshotData::Receiving(r) => Pin::new(&mut r.file).poll_shutdown(cx),
            SnapshotData::Stored(_) => Poll::Ready(Ok(())),
        }
    }
}
