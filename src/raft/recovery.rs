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

use super::audit::AuditLog;
use super::log_store::{self, LogStore};
use super::state_machine::{self, StateMachine};
use super::types::{LogId, NodeId, NodeInfo};
use crate::clock::LogClock;
use crate::keyspace::Keyspace;
use crate::storage::{Batch, Cf, Storage};

/// The first bytes of every backup file.
const MAGIC: &[u8; 16] = b"RAFTLOCK BACKUP\n";
/// The layout after [`MAGIC`]: a little-endian u32 version, the SHA-256 of
/// everything after it (the body), then the body: the length of the
/// [`BackupMeta`] (u64, little-endian), its bincode, and the encoded
/// keyspace to the end.
const VERSION: u32 = 1;
const HEADER: usize = 16 + 4 + 32;

/// A file in the data directory recording that `--force-new-cluster` made
/// it a one-node cluster, and at which log index.
pub const FORCED_MARKER: &str = "forced-new-cluster";

/// How far tokens jump in a recovered keyspace, at least: every write
/// command may take a version, and 2^40 of them is 127 days at 100,000 a
/// second. [`token_gap`] adds more for the time since the keyspace's last
/// entry. Far below the 2^61 a recovered keyspace may reach.
pub const TOKEN_GAP: u64 = 1 << 40;
/// Versions the old cluster is assumed to hand out per millisecond at most,
/// for as long as it may have run on without the recovered keyspace.
const VERSIONS_PER_MS: u64 = 1000;

/// The jump for a keyspace whose last entry was at Unix time `last_ms`.
fn token_gap(last_ms: u64) -> u64 {
    let now_ms = crate::clock::wall_unix_us() / 1000;
    TOKEN_GAP.saturating_add(now_ms.saturating_sub(last_ms).saturating_mul(VERSIONS_PER_MS))
}

/// The meta key under which a node keeps a salted digest of the cluster
/// secret it last ran with: a forced start must use another one.
const SECRET_DIGEST: &[u8] = b"cluster_secret_digest";

fn secret_digest(salt: &[u8], secret: &str) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"raftlock cluster secret\0");
    h.update(salt);
    h.update(secret.as_bytes());
    h.finalize().to_vec()
}

/// Whether `secret` is the one this node last ran with (as far as it
/// recorded one: older versions did not).
fn is_last_secret(db: &Storage, secret: &str) -> Result<bool, RecoveryError> {
    let Some(stored) = db.get(Cf::Meta, SECRET_DIGEST).map_err(fail)? else { return Ok(false) };
    let (salt, digest) = stored.split_at(stored.len().min(16));
    Ok(secret_digest(salt, secret) == digest)
}

/// Records (a salted digest of) the cluster secret this node starts with.
pub fn remember_secret(db: &Storage, secret: &str) -> Result<(), RecoveryError> {
    if is_last_secret(db, secret)? {
        return Ok(());
    }
    let mut salt = [0u8; 16];
    super::fill_random(&mut salt).map_err(fail)?;
    let mut value = salt.to_vec();
    value.extend(secret_digest(&salt, secret));
    let mut b = Batch::default();
    b.put(Cf::Meta, SECRET_DIGEST.to_vec(), value);
    db.write(b, true).map_err(fail)
}

/// Log entries applied at once while a forced start replays the log.
const REPLAY_CHUNK: u64 = 512;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RecoveryError(String);

fn fail(what: impl std::fmt::Display) -> RecoveryError {
    RecoveryError(what.to_string())
}

/// What a backup says of itself.
#[derive(Serialize, Deserialize)]
struct BackupMeta {
    taken_unix_ms: u64,
    /// The leader that took it, and its term then.
    node_id: NodeId,
    term: u64,
    /// The last entry applied to the keyspace.
    last_log_id: LogId,
    members: BTreeMap<NodeId, NodeInfo>,
}

/// A backup, checked: its checksum matched and its keyspace decodes.
pub struct Backup {
    meta: BackupMeta,
    keyspace: Keyspace,
    keyspace_bytes: usize,
}

impl Backup {
    /// Encodes the state applied at `last_log_id` as a backup file's bytes,
    /// in one buffer (the keyspace is encoded straight into it).
    pub(super) fn encode(
        node_id: NodeId,
        term: u64,
        last_log_id: LogId,
        members: BTreeMap<NodeId, NodeInfo>,
        keyspace: &Keyspace,
    ) -> Vec<u8> {
        let meta = BackupMeta { taken_unix_ms: crate::clock::wall_unix_us() / 1000, node_id, term, last_log_id, members };
        let meta = bincode::serialize(&meta).expect("serialising plain data cannot fail");
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0; 32]);
        out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
        out.extend_from_slice(&meta);
        keyspace.encode_into(&mut out);
        let digest = Sha256::digest(&out[HEADER..]);
        out[20..HEADER].copy_from_slice(&digest);
        out
    }

    /// Reads and checks a backup file's bytes.
    pub fn decode(raw: &[u8]) -> Result<Backup, RecoveryError> {
        if raw.len() < HEADER + 8 || &raw[..16] != MAGIC {
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
        let meta_len = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        let rest = &body[8..];
        let meta_len = usize::try_from(meta_len).ok().filter(|n| *n <= rest.len()).ok_or_else(|| fail("the backup's header is damaged"))?;
        let meta: BackupMeta =
            bincode::deserialize(&rest[..meta_len]).map_err(|e| fail(format!("the backup does not decode: {e}")))?;
        let data = &rest[meta_len..];
        let keyspace = Keyspace::decode(data).map_err(|e| fail(format!("the backup's keyspace does not decode: {e}")))?;
        Ok(Backup { meta, keyspace, keyspace_bytes: data.len() })
    }

    /// One line for an operator: where and when it was taken, and what it holds.
    pub fn describe(&self) -> String {
        let b = &self.meta;
        format!(
            "taken by node {} (leader, term {}) at log index {}, unix time {} ms; {} keys, highest fencing token {}, {} bytes of keyspace; members then: {}",
            b.node_id,
            b.term,
            b.last_log_id.index,
            b.taken_unix_ms,
            self.keyspace.len(self.keyspace.log_time()),
            self.keyspace.last_version(),
            self.keyspace_bytes,
            b.members.iter().map(|(id, n)| format!("{id}@{n}")).collect::<Vec<_>>().join(",")
        )
    }

    pub fn last_index(&self) -> u64 {
        self.meta.last_log_id.index
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
///
/// Built beside it (`DIR.restoring`) and renamed into place once complete:
/// an interrupted restore leaves no `DIR`, never one that would start as
/// an empty cluster (handing out tokens again from 1).
pub fn restore(backup: &Backup, dir: &Path, id: NodeId, node: NodeInfo) -> Result<(), RecoveryError> {
    if !is_empty_dir(dir)? {
        return Err(fail(format!(
            "{} is not empty: restore makes a new node and never overwrites data (choose a new --data-dir)",
            dir.display()
        )));
    }
    let mut keyspace = backup.keyspace.clone();
    keyspace.drop_waiters();
    keyspace.skip_versions(token_gap(backup.meta.taken_unix_ms)).map_err(fail)?;
    let name = dir.file_name().ok_or_else(|| fail(format!("{}: not a directory name", dir.display())))?;
    let building = dir.with_file_name(format!("{}.restoring", name.to_string_lossy()));
    let io = |what: &str, e: std::io::Error| fail(format!("{what}: {e}"));
    if building.exists() {
        std::fs::remove_dir_all(&building).map_err(|e| io(&format!("{}", building.display()), e))?;
    }
    {
        let db = Storage::open(&building).map_err(fail)?;
        let last = backup.meta.last_log_id;
        install_alone(&db, last, last.leader_id.term.max(backup.meta.term), id, node, &keyspace.encode())?;
        db.sync_wal().map_err(fail)?;
        db.stop_background_work();
    }
    // An empty `dir` (a mount point, say) is replaced by the new one.
    if dir.exists() {
        std::fs::remove_dir(dir).map_err(|e| io(&format!("{}", dir.display()), e))?;
    }
    std::fs::rename(&building, dir).map_err(|e| io("rename into place", e))?;
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(parent).and_then(|d| d.sync_all()).map_err(|e| io("fsync the parent directory", e))
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
#[allow(clippy::too_many_arguments)]
pub async fn force_new_cluster(
    dir: &Path,
    db: Arc<Storage>,
    clock: Arc<LogClock>,
    id: NodeId,
    node: NodeInfo,
    skipped: BTreeSet<u64>,
    audit: Option<Arc<AuditLog>>,
    secret: &str,
) -> Result<Forced, RecoveryError> {
    let sink: state_machine::EventSink = Arc::new(|_, _| 0);
    let mut sm = StateMachine::open(db.clone(), clock.clone(), sink).map_err(fail)?.with_skipped_entries(skipped);
    if let Some(audit) = audit {
        sm = sm.with_audit(audit);
    }
    let (applied, _) = sm.applied_state().await.map_err(fail)?;
    let log = LogStore::open(db.clone(), clock).map_err(fail)?;
    let mut reader = log.reader();
    drop(log);
    let mut next = applied.map_or(0, |l| l.index + 1);
    let mut replayed = 0;
    let log_end = reader.last_index();
    while log_end.is_some_and(|end| next <= end) {
        let entries = reader.try_get_log_entries(next..next + REPLAY_CHUNK).await.map_err(fail)?;
        for (i, entry) in entries.iter().enumerate() {
            if entry.log_id.index != next + i as u64 {
                return Err(fail(format!(
                    "the log has a gap: entry {} where {} should be; nothing was changed",
                    entry.log_id.index,
                    next + i as u64
                )));
            }
        }
        if entries.is_empty() {
            return Err(fail(format!("the log has a gap: no entry {next} below its last; nothing was changed")));
        }
        next += entries.len() as u64;
        replayed += entries.len() as u64;
        sm.apply(entries).await.map_err(fail)?;
    }
    // The log's files are closed before anything below may remove them.
    drop(reader);
    let (last, membership) = sm.applied_state().await.map_err(fail)?;
    let Some(last) = last else {
        return Err(fail("this node has no data: there is nothing to force a cluster from"));
    };
    let previous_members: Vec<NodeId> = membership.membership().nodes().map(|(id, _)| *id).collect();
    let marker = dir.join(FORCED_MARKER);
    if previous_members == [id] {
        // Already a one-node cluster of this node (forced before, or never
        // more): nothing to do, but to make sure the marker is there (a
        // crash may have come between the two) for the guard below.
        if !marker.exists() {
            write_marker(&marker, last.index)?;
        }
        return Ok(Forced { replayed, last_index: last.index, previous_members, changed: false });
    }
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
    if is_last_secret(&db, secret)? {
        return Err(fail(
            "start it with a new --cluster-secret: the lost members, should they ever come back with their data, still have the old one, and with it they could elect a leader of their own over this node's log; nothing was changed",
        ));
    }
    let vote = log_store::read_vote(&db).map_err(fail)?;
    let term = vote.map_or(0, |v| v.leader_id().term).max(last.leader_id.term);
    let shared = sm.shared();
    let data = {
        let mut applied = shared.lock();
        let last_ms = applied.wall_clock.map_or(0, |(_, unix_ms)| unix_ms);
        applied.keyspace.drop_waiters();
        applied.keyspace.skip_versions(token_gap(last_ms)).map_err(fail)?;
        applied.keyspace.encode()
    };
    // The marker first: a crash after it and before the data is complete
    // forces again on the next start with the flag (the membership has not
    // changed since); a crash after the data finds the node alone.
    write_marker(&marker, last.index)?;
    install_alone(&db, last, term, id, node, &data)?;
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

fn write_marker(marker: &Path, index: u64) -> Result<(), RecoveryError> {
    let note = format!("{index} forced at this log index, unix time {} ms\n", crate::clock::wall_unix_us() / 1000);
    write_synced(marker, note.as_bytes()).map_err(|e| fail(format!("{}: {e}", marker.display())))
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
