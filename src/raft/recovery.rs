//! Backups and disaster recovery: the backup file, a new one-node cluster
//! made from one (`raftlock restore`), and a surviving node's data turned
//! into a one-node cluster when a majority is lost for good
//! (`--force-new-cluster`).
//!
//! Both recoveries leave the data directory as a node that has just taken a
//! snapshot and purged its log: the snapshot holds the keyspace at the last
//! log id `L` it covers, its membership names this node alone as a voter,
//! the log is empty with `L` as its last purged id, and the vote is this
//! node's, uncommitted, in the term of `L` (or later). Started, the node
//! elects itself in a higher term and appends after `L`.
//!
//! Fencing tokens jump by [`TOKEN_GAP`]: the old cluster may have gone on
//! granting after the backup was taken (or the lost majority after the
//! survivor's last entry), with tokens the new cluster knows nothing of. A
//! fenced resource that saw one of them must never see it again, nor a lower
//! one, from a new holder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{RaftLogReader, RaftStateMachine};
use openraft::{Membership, SnapshotMeta, StoredMembership, Vote};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::log_store::{self, LogReader};
use super::state_machine::{self, StateMachine};
use super::types::{LogId, NodeId, NodeInfo};
use crate::clock::LogClock;
use crate::keyspace::Keyspace;
use crate::storage::Storage;

/// The first bytes of every backup file.
const MAGIC: &[u8; 16] = b"RAFTLOCK BACKUP\n";
/// The layout after [`MAGIC`]: a little-endian u32 version, the SHA-256 of
/// the body, the body (bincode of [`BackupBody`]).
const VERSION: u32 = 1;
const HEADER: usize = 16 + 4 + 32;

/// A file in the data directory recording that `--force-new-cluster` made
/// it a one-node cluster, and at which log index.
pub const FORCED_MARKER: &str = "forced-new-cluster";

/// How far tokens jump in a recovered keyspace: above any token the old
/// cluster can have granted since (2^40 grants is 35 years at 1,000 a
/// second), far below the 2^62 a snapshot may carry.
pub const TOKEN_GAP: u64 = 1 << 40;

/// Log entries applied at once while a forced start replays the log.
const REPLAY_CHUNK: u64 = 512;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RecoveryError(String);

fn fail(what: impl std::fmt::Display) -> RecoveryError {
    RecoveryError(what.to_string())
}

#[derive(Serialize, Deserialize)]
struct BackupBody {
    taken_unix_ms: u64,
    /// The leader that took it, and its term then.
    node_id: NodeId,
    term: u64,
    /// The last entry applied to `keyspace`.
    last_log_id: LogId,
    members: BTreeMap<NodeId, NodeInfo>,
    keyspace: Vec<u8>,
}

/// A backup, checked: its checksum matched and its keyspace decodes.
pub struct Backup {
    body: BackupBody,
    keyspace: Keyspace,
}

impl Backup {
    /// Encodes the state applied at `last_log_id` as a backup file's bytes.
    pub(super) fn encode(
        node_id: NodeId,
        term: u64,
        last_log_id: LogId,
        members: BTreeMap<NodeId, NodeInfo>,
        keyspace: &Keyspace,
    ) -> Vec<u8> {
        let body = BackupBody {
            taken_unix_ms: crate::clock::wall_unix_us() / 1000,
            node_id,
            term,
            last_log_id,
            members,
            keyspace: keyspace.encode(),
        };
        let body = bincode::serialize(&body).expect("serialising plain data cannot fail");
        let mut out = Vec::with_capacity(HEADER + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&Sha256::digest(&body));
        out.extend_from_slice(&body);
        out
    }

    /// Reads and checks a backup file's bytes.
    pub fn decode(raw: &[u8]) -> Result<Backup, RecoveryError> {
        if raw.len() < HEADER || &raw[..16] != MAGIC {
            return Err(fail("not a raftlock backup (no RAFTLOCK BACKUP header)"));
        }
        let version = u32::from_le_bytes(raw[16..20].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(fail(format!("backup format version {version}; this raftlock reads version {VERSION}")));
        }
        let body = &raw[HEADER..];
        if Sha256::digest(body)[..] != raw[20..HEADER] {
            return Err(fail("the backup is damaged: its checksum does not match"));
        }
        let body: BackupBody = bincode::deserialize(body).map_err(|e| fail(format!("the backup does not decode: {e}")))?;
        let keyspace =
            Keyspace::decode(&body.keyspace).map_err(|e| fail(format!("the backup's keyspace does not decode: {e}")))?;
        Ok(Backup { body, keyspace })
    }

    /// One line for an operator: where and when it was taken, and what it holds.
    pub fn describe(&self) -> String {
        let b = &self.body;
        format!(
            "taken by node {} (leader, term {}) at log index {}, unix time {} ms; {} keys, highest fencing token {}, {} bytes of keyspace; members then: {}",
            b.node_id,
            b.term,
            b.last_log_id.index,
            b.taken_unix_ms,
            self.keyspace.len(self.keyspace.log_time()),
            self.keyspace.last_version(),
            b.keyspace.len(),
            b.members.iter().map(|(id, n)| format!("{id}@{n}")).collect::<Vec<_>>().join(",")
        )
    }

    pub fn last_index(&self) -> u64 {
        self.body.last_log_id.index
    }

    pub fn keyspace(&self) -> &Keyspace {
        &self.keyspace
    }
}

/// Whether `dir` holds no data a restore could overwrite.
fn is_empty_dir(dir: &Path) -> Result<bool, RecoveryError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(fail(format!("{}: {e}", dir.display()))),
    }
}

/// Makes `dir` (which must be empty or absent) the data directory of a new
/// one-node cluster of node `id` at `node`, holding `backup`'s keyspace.
pub fn restore(backup: &Backup, dir: &Path, id: NodeId, node: NodeInfo) -> Result<(), RecoveryError> {
    if !is_empty_dir(dir)? {
        return Err(fail(format!(
            "{} is not empty: restore makes a new node and never overwrites data (choose a new --data-dir)",
            dir.display()
        )));
    }
    let mut keyspace = backup.keyspace.clone();
    keyspace.skip_versions(TOKEN_GAP).map_err(fail)?;
    let db = Storage::open(dir).map_err(fail)?;
    let last = backup.body.last_log_id;
    install_alone(&db, last, last.leader_id.term.max(backup.body.term), id, node, &keyspace.encode())?;
    db.stop_background_work();
    Ok(())
}

/// What a forced start did.
pub struct Forced {
    /// False if the node was a one-node cluster of itself already.
    pub changed: bool,
    pub replayed: u64,
    pub last_index: u64,
    pub previous_members: Vec<NodeId>,
}

/// `--force-new-cluster`: applies every entry of this node's log (committed
/// as far as it knows or not: an entry it holds may have been acknowledged
/// by the lost majority's leader), then makes the result a one-node cluster
/// of this node. Does nothing to a node that is a one-node cluster of
/// itself already; refuses if the data was forced before and members have
/// joined since: that node is part of a cluster again, and forcing it would
/// split it from them.
pub async fn force_new_cluster(
    dir: &Path,
    db: Arc<Storage>,
    clock: Arc<LogClock>,
    id: NodeId,
    node: NodeInfo,
    skipped: BTreeSet<u64>,
) -> Result<Forced, RecoveryError> {
    let sink: state_machine::EventSink = Arc::new(|_, _| 0);
    let mut sm = StateMachine::open(db.clone(), clock, sink).map_err(fail)?.with_skipped_entries(skipped);
    let (applied, _) = sm.applied_state().await.map_err(fail)?;
    let mut reader = LogReader::new(db.clone());
    let mut next = applied.map_or(0, |l| l.index + 1);
    let mut replayed = 0;
    loop {
        let entries = reader.try_get_log_entries(next..next + REPLAY_CHUNK).await.map_err(fail)?;
        let Some(last) = entries.last() else { break };
        if entries[0].log_id.index != next {
            return Err(fail(format!(
                "the log has a gap: entry {} follows the applied index {}",
                entries[0].log_id.index,
                next.saturating_sub(1)
            )));
        }
        next = last.log_id.index + 1;
        replayed += entries.len() as u64;
        sm.apply(entries).await.map_err(fail)?;
    }
    let (last, membership) = sm.applied_state().await.map_err(fail)?;
    let Some(last) = last else {
        return Err(fail("this node has no data: there is nothing to force a cluster from"));
    };
    let previous_members: Vec<NodeId> = membership.membership().nodes().map(|(id, _)| *id).collect();
    if previous_members == [id] {
        // Already a one-node cluster of this node (forced before, or never
        // more): nothing to do.
        return Ok(Forced { replayed, last_index: last.index, previous_members, changed: false });
    }
    let marker = dir.join(FORCED_MARKER);
    if let Ok(text) = std::fs::read_to_string(&marker) {
        let forced_at: u64 = text.split_whitespace().next().and_then(|t| t.parse().ok()).unwrap_or(0);
        let changed_at = membership.log_id().map_or(0, |l| l.index);
        if changed_at > forced_at {
            return Err(fail(format!(
                "--force-new-cluster already made this node a one-node cluster at log index {forced_at}, and its members changed since (at index {changed_at}, now {previous_members:?}): forcing again would split it from them. Start it without --force-new-cluster. If that cluster has lost its majority for good too, delete {} and start with the flag again.",
                marker.display()
            )));
        }
    }
    let vote = log_store::read_vote(&db).map_err(fail)?;
    let term = vote.map_or(0, |v| v.leader_id().term).max(last.leader_id.term);
    let shared = sm.shared();
    let data = {
        let mut applied = shared.lock();
        applied.keyspace.skip_versions(TOKEN_GAP).map_err(fail)?;
        applied.keyspace.encode()
    };
    install_alone(&db, last, term, id, node, &data)?;
    let note = format!("{} forced at this log index, unix time {} ms\n", last.index, crate::clock::wall_unix_us() / 1000);
    write_synced(&marker, note.as_bytes()).map_err(|e| fail(format!("{}: {e}", marker.display())))?;
    Ok(Forced { replayed, last_index: last.index, previous_members, changed: true })
}

/// Writes the snapshot of `keyspace` (encoded) at `last`, naming node `id`
/// the only member, then empties the log up to `last` and makes the vote
/// this node's in `term`, uncommitted. The snapshot file goes first: a crash
/// after it leaves a node whose snapshot covers its log, which starts alone.
fn install_alone(
    db: &Storage,
    last: LogId,
    term: u64,
    id: NodeId,
    node: NodeInfo,
    keyspace: &[u8],
) -> Result<(), RecoveryError> {
    let membership = Membership::new(vec![BTreeSet::from([id])], BTreeMap::from([(id, node)]));
    let meta = SnapshotMeta {
        last_log_id: Some(last),
        last_membership: StoredMembership::new(Some(last), membership),
        snapshot_id: format!("alone-{}-{}-{}", last.leader_id.term, last.leader_id.node_id, last.index),
    };
    state_machine::write_snapshot_of(db, meta, keyspace).map_err(fail)?;
    log_store::reset(db, last, Vote::new(term, id)).map_err(fail)
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    f.sync_all()?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
