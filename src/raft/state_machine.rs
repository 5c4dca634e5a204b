//! The openraft state machine adapter: applies committed entries to the pure
//! keyspace through `commands::apply`, hands the resulting events to the node,
//! and builds, stores and installs snapshots (in RocksDB's `snapshot` family).

use std::collections::BTreeSet;
use std::io::Cursor;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, SnapshotMeta, StorageError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

use super::applying;
use super::audit::AuditLog;
use super::types::{Entry, LogId, NodeId, NodeInfo, Receiving, SnapshotData, StorageIoError, StoredData, TypeConfig};
use crate::clock::LogClock;
use crate::commands;
use crate::keyspace::acl::AclTable;
use crate::keyspace::{Event, Keyspace};
use crate::planted::{self, Bug};

use crate::protocol::Reply;
use crate::storage::{NewSnapshotFile, ScratchFile, Storage};

const CURRENT: &[u8] = b"current";

/// Receives the events of applied entries; returns how many subscribers got
/// the `PUBLISH` messages among them (the reply `PUBLISH` gives).
pub type EventSink = Arc<dyn Fn(Vec<Event>, Option<crate::keyspace::ClientId>) -> usize + Send + Sync>;

/// The applied state, shared with the read path.
pub struct Applied {
    pub keyspace: Keyspace,
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership<NodeId, NodeInfo>,
    /// Log time and leader's wall clock of the last applied entry: where
    /// reads convert log time back into Unix time (`EXPIRETIME`), exactly as
    /// that entry converted an absolute expiry into log time.
    pub wall_clock: Option<(crate::keyspace::LogTime, u64)>,
    /// Bytes of the commands applied since this process started (see
    /// [`commands::Proposal::size`]), and how many of them the snapshot in
    /// the file covers: their difference is what a restart would replay.
    pub applied_bytes: u64,
    pub snapshot_bytes_mark: u64,
}

impl Applied {
    /// Bytes of commands applied since the snapshot in the file was taken.
    pub fn bytes_since_snapshot(&self) -> u64 {
        self.applied_bytes.saturating_sub(self.snapshot_bytes_mark)
    }
}

/// State shared between the state machine and the node.
pub struct SharedState {
    applied: Mutex<Applied>,
    /// Signalled after each applied batch (the expiry timer re-plans).
    pub changed: Notify,
    /// The ACL users as last applied, for connections to read without the
    /// state lock, and how many times they changed.
    acl: std::sync::RwLock<Arc<AclTable>>,
    acl_epoch: std::sync::atomic::AtomicU64,
    /// Told each new epoch (idle connections re-check their user then).
    acl_watch: tokio::sync::watch::Sender<u64>,
    /// The index of the last applied entry (0: none), set at the end of
    /// each applied batch, under the state lock.
    applied_index: std::sync::atomic::AtomicU64,
    /// Called with that index at the end of each applied batch (and
    /// installed snapshot), under the state lock, after the batch's events
    /// were delivered.
    applied_hook: std::sync::OnceLock<AppliedHook>,
}

/// See [`SharedState::on_applied`].
pub type AppliedHook = Box<dyn Fn(u64) + Send + Sync>;

/// How many times [`SharedState::lock`] tries the lock before it waits.
const LOCK_SPINS: usize = 64;

impl SharedState {
    /// Locks the applied state. Never held across an `.await`.
    ///
    /// An apply or a read holds it for microseconds, except one that runs a
    /// script (up to its budget) or a command over millions of keys. A
    /// runtime thread that blocked here on such a one would stop every task
    /// queued behind it: with one worker thread, the whole node (its PINGs,
    /// heartbeats and elections). So a waiter that has not got the lock
    /// after a short spin hands the runtime to another thread first.
    pub fn lock(&self) -> MutexGuard<'_, Applied> {
        for _ in 0..LOCK_SPINS {
            match self.applied.try_lock() {
                Ok(guard) => return guard,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
            }
        }
        cpu_bound(|| self.applied.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Publishes `keyspace`'s ACL users if they changed.
    fn publish_acl(&self, keyspace: &Keyspace) {
        if Arc::ptr_eq(&self.acl.read().unwrap_or_else(|p| p.into_inner()), keyspace.acl()) {
            return;
        }
        let mut current = self.acl.write().unwrap_or_else(|p| p.into_inner());
        if !Arc::ptr_eq(&current, keyspace.acl()) {
            *current = keyspace.acl().clone();
            let epoch = self.acl_epoch.fetch_add(1, std::sync::atomic::Ordering::Release) + 1;
            self.acl_watch.send_replace(epoch);
        }
    }

    /// The users and their epoch, read together (the epoch changes under
    /// the write lock).
    pub fn acl(&self) -> (u64, Arc<AclTable>) {
        let table = self.acl.read().unwrap_or_else(|p| p.into_inner());
        (self.acl_epoch(), table.clone())
    }

    pub fn acl_epoch(&self) -> u64 {
        self.acl_epoch.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn acl_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.acl_watch.subscribe()
    }

    /// The index of the last applied entry (0 before any), without the lock.
    /// Read after a command's reply, it is at least the index the reply
    /// reflects.
    pub fn applied_index(&self) -> u64 {
        self.applied_index.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sets the one hook told the applied index after each applied batch
    /// (see `applied_hook`); a second call changes nothing.
    pub fn on_applied(&self, hook: AppliedHook) {
        let _ = self.applied_hook.set(hook);
    }

    /// The batch that ended at `applied` (its events delivered) is done.
    /// Called under the state lock.
    fn batch_applied(&self, applied: &Applied) {
        let index = applied.last_applied.map_or(0, |id| id.index);
        self.applied_index.store(index, std::sync::atomic::Ordering::Release);
        if let Some(hook) = self.applied_hook.get() {
            hook(index);
        }
    }
}

/// A snapshot as its file holds it; read back as [`StoredSnapshotRef`].
#[derive(Serialize)]
struct StoredSnapshot<'a> {
    meta: &'a SnapshotMeta<NodeId, NodeInfo>,
    /// Written as one length and one run of bytes: the derived `Vec<u8>`
    /// code goes a byte at a time (serde has no special case for bytes).
    /// bincode writes a `Vec<u8>` as the same length and bytes, so files
    /// are unchanged (`snapshot_files_keep_their_bytes`).
    #[serde(serialize_with = "as_bytes")]
    data: &'a [u8],
}

fn as_bytes<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(v)
}

/// [`StoredSnapshot`] read in place: the same bytes, the data borrowed.
#[derive(Deserialize)]
struct StoredSnapshotRef<'a> {
    meta: SnapshotMeta<NodeId, NodeInfo>,
    data: &'a [u8],
}

/// Runs `work`, which may keep a thread busy for seconds (a client's script
/// runs up to its budget), telling the runtime first: the other tasks of this
/// worker thread (heartbeats, elections, connections) move to another thread
/// meanwhile, so a long apply cannot cost this node its leadership.
pub(super) fn cpu_bound<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(work),
        _ => work(),
    }
}

fn io_err(verb: ErrorVerb, e: impl std::fmt::Display) -> StorageIoError {
    StorageError::from_io_error(ErrorSubject::StateMachine, verb, std::io::Error::other(e.to_string()))
}

/// The state machine handed to openraft.
#[derive(Clone)]
pub struct StateMachine {
    shared: Arc<SharedState>,
    db: Arc<Storage>,
    clock: Arc<LogClock>,
    sink: EventSink,
    audit: Option<Arc<AuditLog>>,
    /// Entries the operator asked to skip (`--skip-entry`).
    skipped: Arc<BTreeSet<u64>>,
    /// How far this node's log is on disk: an entry is applied only once it
    /// is (a leader's own entries are committed by openraft before their
    /// fsync here; see [`super::log_store`]).
    durable: Option<super::log_store::Durable>,
    /// The last log id of the snapshot in the snapshot file. openraft builds
    /// a snapshot in a task of its own and may install one it is sent
    /// meanwhile (newer than anything applied, so than the one being
    /// built); a built snapshot replaces the file only if it is newer than
    /// what the file holds by then, under this lock. Without it, the older
    /// built one could replace the installed one, whose log was purged: the
    /// node would no longer start.
    snapshot_file: Arc<Mutex<Option<LogId>>>,
    /// See [`StateMachine::snapshot_not_written`].
    snapshot_retry: std::time::Duration,
    /// The node's `MONITOR` connections: while there are any, scripts
    /// report the commands they run.
    monitors: Arc<std::sync::atomic::AtomicUsize>,
}

impl StateMachine {
    /// Opens the state machine, restoring the last snapshot if there is one.
    pub fn open(db: Arc<Storage>, clock: Arc<LogClock>, sink: EventSink) -> Result<StateMachine, StorageIoError> {
        let mut applied = Applied {
            keyspace: Keyspace::new(),
            last_applied: None,
            membership: StoredMembership::default(),
            wall_clock: None,
            applied_bytes: 0,
            snapshot_bytes_mark: 0,
        };
        let started = std::time::Instant::now();
        let raw = db.map_snapshot_file(CURRENT).map_err(|e| io_err(ErrorVerb::Read, e))?;
        let read_ms = started.elapsed().as_millis() as u64;
        // Decoded from the file's bytes where they lie: the keyspace's part
        // is not copied out first (a gigabyte at 10 M keys).
        let stored = raw.as_ref().map(|raw| bincode::deserialize::<StoredSnapshotRef>(raw.as_ref())).transpose();
        if let Some(snap) = stored.map_err(|e| io_err(ErrorVerb::Read, e))? {
            applied.keyspace = Keyspace::decode(snap.data).map_err(|e| io_err(ErrorVerb::Read, e))?;
            tracing::info!(
                index = snap.meta.last_log_id.map_or(0, |id| id.index),
                bytes = snap.data.len(),
                keys = applied.keyspace.len(applied.keyspace.log_time()),
                read_ms,
                decode_ms = started.elapsed().as_millis() as u64 - read_ms,
                "snapshot restored"
            );
            if planted::active(Bug::TokenReuse) {
                applied.keyspace.planted_forget_last_version();
            }
            applied.last_applied = snap.meta.last_log_id;
            applied.membership = snap.meta.last_membership.clone();
            clock.applied(applied.keyspace.log_time());
        }
        let acl = std::sync::RwLock::new(applied.keyspace.acl().clone());
        let shared = Arc::new(SharedState {
            applied: Mutex::new(applied),
            changed: Notify::new(),
            acl,
            acl_epoch: Default::default(),
            acl_watch: tokio::sync::watch::channel(0).0,
            applied_index: Default::default(),
            applied_hook: Default::default(),
        });
        shared.batch_applied(&shared.lock());
        let snapshot_file = Arc::new(Mutex::new(shared.lock().last_applied));
        Ok(StateMachine {
            shared,
            db,
            clock,
            sink,
            audit: None,
            skipped: Arc::default(),
            durable: None,
            snapshot_file,
            snapshot_retry: SNAPSHOT_RETRY,
            monitors: Arc::default(),
        })
    }

    /// Scripts report the commands they run while `monitors` is not zero.
    pub fn with_monitors(mut self, monitors: Arc<std::sync::atomic::AtomicUsize>) -> StateMachine {
        self.monitors = monitors;
        self
    }

    /// Applies an entry only once `durable` shows it on disk.
    pub fn with_durable(mut self, durable: super::log_store::Durable) -> StateMachine {
        self.durable = Some(durable);
        self
    }

    /// Records every applied lease event in `audit`.
    pub fn with_audit(mut self, audit: Arc<AuditLog>) -> StateMachine {
        self.audit = Some(audit);
        self
    }

    /// Applies each entry in `indexes` as an error reply that changes nothing.
    pub fn with_skipped_entries(mut self, indexes: BTreeSet<u64>) -> StateMachine {
        self.skipped = Arc::new(indexes);
        self
    }

    /// Hands a command's events to the node; `PUBLISH` replies the number of
    /// subscribers that received the message here.
    fn deliver(&self, outcome: commands::Applied, origin: Option<crate::keyspace::ClientId>) -> Reply {
        let commands::Applied { mut reply, events, is_publish, repeated } = outcome;
        if repeated {
            crate::metrics::record_repeated_command();
        }
        if !events.is_empty() {
            let receivers = (self.sink)(events, origin);
            if is_publish && !reply.is_error() {
                reply = Reply::Int(receivers as i64);
            }
        }
        reply
    }

    pub fn shared(&self) -> Arc<SharedState> {
        self.shared.clone()
    }

    /// The current snapshot, mapped from its file: its meta, and its data
    /// where it lies in the mapping (openraft asks for it at every start,
    /// for the meta alone, and to send it to a follower).
    fn read_snapshot(db: &Storage) -> Result<Option<(SnapshotMeta<NodeId, NodeInfo>, StoredData)>, StorageIoError> {
        let Some(raw) = db.map_snapshot_file(CURRENT).map_err(|e| io_err(ErrorVerb::Read, e))? else {
            return Ok(None);
        };
        let (meta, start, len) = {
            let all = raw.as_ref();
            let stored: StoredSnapshotRef = bincode::deserialize(all).map_err(|e| io_err(ErrorVerb::Read, e))?;
            (stored.meta, stored.data.as_ptr() as usize - all.as_ptr() as usize, stored.data.len())
        };
        Ok(Some((meta, StoredData { bytes: raw, range: start..start + len })))
    }
}

/// Stores `snap` as the current snapshot (durably). Blocking: call it from a
/// blocking thread.
fn write_snapshot(db: &Storage, snap: &StoredSnapshot) -> Result<(), StorageIoError> {
    // Streamed into the file: no second copy of the snapshot in memory.
    db.write_snapshot_file(|w| bincode::serialize_into(w, snap).map_err(std::io::Error::other), CURRENT)
        .map(drop)
        .map_err(|e| io_err(ErrorVerb::Write, e))
}

/// Writes a snapshot file of `keyspace` with `meta`, encoding the keyspace
/// straight into it: the same bytes as [`write_snapshot`] of a
/// [`StoredSnapshot`] of `keyspace.encode()`, without that encoding in memory
/// (700 MB at 10 M keys). Returns the file, not yet in place, and where the
/// keyspace's encoding lies in it. Blocking.
fn write_built_snapshot(
    db: &Storage,
    meta: &SnapshotMeta<NodeId, NodeInfo>,
    keyspace: &Keyspace,
) -> Result<(NewSnapshotFile, std::ops::Range<usize>), StorageIoError> {
    use std::io::SeekFrom;
    let mut range = 0..0;
    let new = db
        .new_snapshot_file(
            |w| {
                bincode::serialize_into(&mut *w, meta).map_err(std::io::Error::other)?;
                // The data as bincode writes a byte string: its length (a
                // little-endian u64), then the bytes. The length is known
                // at the end.
                let length_at = w.stream_position()?;
                w.write_all(&0u64.to_le_bytes())?;
                keyspace.encode_to(&mut *w)?;
                let end = w.stream_position()?;
                w.seek(SeekFrom::Start(length_at))?;
                w.write_all(&(end - length_at - 8).to_le_bytes())?;
                w.seek(SeekFrom::Start(end))?;
                range = (length_at + 8) as usize..end as usize;
                Ok(())
            },
        )
        .map_err(|e| io_err(ErrorVerb::Write, e))?;
    Ok((new, range))
}

/// Puts the built snapshot `new` of `last_log_id` in place of the snapshot
/// file if it is newer than what the file holds (`file`; see
/// [`StateMachine::snapshot_file`]); otherwise deletes it. Either way returns
/// its data. Blocking.
fn keep_if_newest(
    db: &Storage,
    file: &Mutex<Option<LogId>>,
    new: NewSnapshotFile,
    range: std::ops::Range<usize>,
    last_log_id: Option<LogId>,
) -> Result<StoredData, StorageIoError> {
    let mut stored = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let bytes = if last_log_id > *stored {
        let bytes = db.replace_snapshot_file(new, CURRENT).map_err(|e| io_err(ErrorVerb::Write, e))?;
        *stored = last_log_id;
        bytes
    } else {
        tracing::info!(
            built = ?last_log_id,
            stored = ?*stored,
            "a snapshot was installed while this one was built: the built one is not kept"
        );
        new.discard()
    };
    Ok(StoredData { bytes, range })
}

/// Stores a snapshot of the encoded keyspace `data` with `meta` as the
/// current one (`raft::recovery`). Blocking.
pub(super) fn write_snapshot_of(
    db: &Storage,
    meta: SnapshotMeta<NodeId, NodeInfo>,
    data: &[u8],
) -> Result<(), StorageIoError> {
    write_snapshot(db, &StoredSnapshot { meta: &meta, data })
}

/// A snapshot's data as it is installed: the received file (deleted once
/// installed: the snapshot file is written from it), or bytes in memory.
enum Received {
    Memory(Vec<u8>),
    Stored(StoredData),
    File(ScratchFile),
}

/// Runs `work` on the runtime's blocking pool (outside a runtime, here).
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, StorageIoError> {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => rt.spawn_blocking(work).await.map_err(|e| io_err(ErrorVerb::Write, e)),
        Err(_) => Ok(work()),
    }
}

/// Runs `work` on a thread of its own, in the background (nice +10, a short
/// slice: `crate::sched`): encoding a big keyspace takes a core for seconds
/// (4.6 s at 10 M keys), and on a busy machine the threads that answer
/// clients and write the log must come first.
async fn in_background<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, StorageIoError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("raftlock-snapshot".into())
        .spawn(move || {
            crate::sched::background();
            let _ = tx.send(work());
        })
        .map_err(|e| io_err(ErrorVerb::Write, e))?;
    // A panic in `work` drops the sender: an error here.
    rx.await.map_err(|e| io_err(ErrorVerb::Write, e))
}

/// How long a node that could not write a snapshot waits before openraft
/// may try again (it would at its next apply).
const SNAPSHOT_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

impl StateMachine {
    /// A snapshot could not be written (a full disk, a directory gone): the
    /// node keeps serving on its log, which grows, and tries again after
    /// [`SNAPSHOT_RETRY`]. An error returned to openraft would stop the node,
    /// and after a restart the same snapshot would stop it again. openraft
    /// keeps the snapshot it has when handed one that is no newer (it reads
    /// only the meta of a built one): this returns an empty one of no log
    /// id, and the file keeps the snapshot it had.
    async fn snapshot_not_written(&self, error: StorageIoError) -> Result<Snapshot<TypeConfig>, StorageIoError> {
        tracing::error!(
            error = %error,
            retry_in_s = self.snapshot_retry.as_secs(),
            "could not write a snapshot: the log is kept (it grows until a snapshot is written)"
        );
        crate::metrics::record_snapshot_failure();
        tokio::time::sleep(self.snapshot_retry).await;
        Ok(Snapshot {
            meta: SnapshotMeta { last_log_id: None, last_membership: StoredMembership::default(), snapshot_id: "none".into() },
            snapshot: Box::new(SnapshotData::in_memory(Vec::new())),
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageIoError> {
        // The clone costs O(1) (persistent maps): applying goes on at once,
        // and the encoding, as long as the keyspace is big, happens on a
        // blocking thread.
        let (keyspace, last_log_id, last_membership, bytes_covered) = {
            let applied = self.shared.lock();
            (applied.keyspace.clone(), applied.last_applied, applied.membership.clone(), applied.applied_bytes)
        };
        let snapshot_id = match last_log_id {
            Some(id) => format!("{}-{}-{}", id.leader_id.term, id.leader_id.node_id, id.index),
            None => "empty".to_string(),
        };
        let meta = SnapshotMeta { last_log_id, last_membership, snapshot_id };
        let db = self.db.clone();
        let started = std::time::Instant::now();
        let file = self.snapshot_file.clone();
        let built = in_background({
            let meta = meta.clone();
            move || {
                let (new, range) = write_built_snapshot(&db, &meta, &keyspace)?;
                drop(keyspace);
                keep_if_newest(&db, &file, new, range, meta.last_log_id)
            }
        })
        .await
        .and_then(|built| built);
        let data = match built {
            Ok(data) => data,
            Err(e) => return self.snapshot_not_written(e).await,
        };
        {
            let mut applied = self.shared.lock();
            applied.snapshot_bytes_mark = applied.snapshot_bytes_mark.max(bytes_covered);
        }
        let bytes = data.range.len();
        tracing::debug!(bytes, elapsed = ?started.elapsed(), "snapshot built");
        crate::metrics::record_snapshot(bytes, started.elapsed());
        Ok(Snapshot { meta, snapshot: Box::new(SnapshotData::Stored(Cursor::new(data))) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership<NodeId, NodeInfo>), StorageIoError> {
        let applied = self.shared.lock();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<Reply>>, StorageIoError>
    where
        I: IntoIterator<Item = Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut replies = Vec::new();
        let entries: Vec<Entry> = entries.into_iter().collect();
        if let (Some(durable), Some(last)) = (&self.durable, entries.last()) {
            if !planted::active(Bug::AppliedBeforeDurable) {
                durable.wait(last.log_id.index).await.map_err(|e| io_err(ErrorVerb::Write, e))?;
            }
        }
        let mut applied = self.shared.lock();
        let long = entries.iter().any(|e| match &e.payload {
            EntryPayload::Normal(proposal) => commands::may_run_long(&applied.keyspace, proposal),
            _ => false,
        });
        let monitored = self.monitors.load(std::sync::atomic::Ordering::Relaxed) > 0;
        let apply_all = || {
            for entry in entries {
                applied.last_applied = Some(entry.log_id);
                let entry_replies = match entry.payload {
                    EntryPayload::Blank => Vec::new(),
                    EntryPayload::Normal(proposal) => {
                        applied.applied_bytes += proposal.size();
                        self.clock.applied(proposal.log_time);
                        applied.wall_clock = Some((proposal.log_time, proposal.unix_ms));
                        let index = entry.log_id.index;
                        applying::begin(index, commands::suspect_command(&proposal));
                        let outcomes = if self.skipped.contains(&index) {
                            tracing::warn!(index, "skipping log entry {index} as --skip-entry asks");
                            commands::skip(index, &proposal)
                        } else if planted::active(Bug::WallClockLease) || planted::active(Bug::TokenReuse) {
                            let mut p = proposal.clone();
                            if planted::active(Bug::WallClockLease) {
                                p.log_time += planted::wall_clock_skew(p.log_time, p.unix_ms);
                            }
                            let index = if planted::active(Bug::TokenReuse) { 0 } else { index };
                            commands::apply_monitored(&mut applied.keyspace, index, &p, monitored)
                        } else {
                            commands::apply_monitored(&mut applied.keyspace, index, &proposal, monitored)
                        };
                        if let Some(audit) = &self.audit {
                            for outcome in &outcomes {
                                audit.record(index, proposal.log_time, &outcome.events);
                            }
                        }
                        applying::end();
                        let origins: Vec<_> = match &proposal.op {
                            commands::Op::Commands(cmds) => cmds.iter().map(|c| Some(c.origin.client)).collect(),
                            commands::Op::Expire => Vec::new(),
                        };
                        let origin_of = |i: usize| origins.get(i).copied().flatten();
                        outcomes.into_iter().enumerate().map(|(i, outcome)| self.deliver(outcome, origin_of(i))).collect()
                    }
                    EntryPayload::Membership(m) => {
                        applied.membership = StoredMembership::new(Some(entry.log_id), m);
                        Vec::new()
                    }
                };
                replies.push(entry_replies);
            }
            crate::metrics::set_waiters(applied.keyspace.waiters().total());
            self.shared.publish_acl(&applied.keyspace);
            self.shared.batch_applied(&applied);
        };
        // Most entries apply in microseconds: handing the runtime to another
        // thread first would cost more than they do.
        if long {
            cpu_bound(apply_all);
        } else {
            apply_all();
        }
        drop(applied);
        if let Some(audit) = &self.audit {
            audit.flush();
        }
        self.shared.changed.notify_one();
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> StateMachine {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageIoError> {
        let db = self.db.clone();
        let scratch = off_runtime(move || db.receiving_snapshot_file()).await?.map_err(|e| io_err(ErrorVerb::Write, e))?;
        let receiving = Receiving::new(scratch).map_err(|e| io_err(ErrorVerb::Write, e))?;
        Ok(Box::new(SnapshotData::Receiving(receiving)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, NodeInfo>,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageIoError> {
        let data = match *snapshot {
            SnapshotData::Memory(c) => Received::Memory(c.into_inner()),
            SnapshotData::Stored(c) => Received::Stored(c.into_inner()),
            SnapshotData::Receiving(mut r) => {
                // openraft shut the writer down (every chunk written); make
                // sure, before the file is read through another handle.
                r.file.flush().await.map_err(|e| io_err(ErrorVerb::Write, e))?;
                Received::File(r.scratch)
            }
        };
        let (db, file, meta_owned) = (self.db.clone(), self.snapshot_file.clone(), meta.clone());
        let keyspace = off_runtime(move || {
            let mapped;
            let bytes: &[u8] = match &data {
                Received::Memory(v) => v,
                Received::Stored(d) => d.as_ref(),
                Received::File(scratch) => {
                    mapped = scratch.map().map_err(|e| io_err(ErrorVerb::Read, e))?;
                    mapped.as_ref()
                }
            };
            let mut keyspace = Keyspace::decode(bytes).map_err(|e| io_err(ErrorVerb::Read, e))?;
            if planted::active(Bug::TokenReuse) {
                keyspace.planted_forget_last_version();
            }
            // openraft installs only a snapshot newer than everything
            // applied, so newer than any being built.
            let mut in_file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            write_snapshot(&db, &StoredSnapshot { meta: &meta_owned, data: bytes })?;
            *in_file = meta_owned.last_log_id;
            Ok::<_, StorageIoError>(keyspace)
        })
        .await??;
        self.clock.applied(keyspace.log_time());
        let replaced = {
            let mut applied = self.shared.lock();
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
            applied.snapshot_bytes_mark = applied.applied_bytes;
            let replaced = std::mem::replace(&mut applied.keyspace, keyspace);
            self.shared.publish_acl(&applied.keyspace);
            self.shared.batch_applied(&applied);
            replaced
        };
        // Freed outside the lock, and off the runtime.
        let _ = off_runtime(move || drop(replaced)).await;
        self.shared.changed.notify_one();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageIoError> {
        let db = self.db.clone();
        Ok(off_runtime(move || Self::read_snapshot(&db))
            .await??
            .map(|(meta, data)| Snapshot { meta, snapshot: Box::new(SnapshotData::Stored(Cursor::new(data))) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(index: u64) -> SnapshotMeta<NodeId, NodeInfo> {
        SnapshotMeta {
            last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(3, 1), index)),
            last_membership: StoredMembership::default(),
            snapshot_id: format!("3-1-{index}"),
        }
    }

    /// Files written before the data was written as bytes must still be read,
    /// and new files must be readable by the code that wrote them before.
    #[test]
    fn snapshot_files_keep_their_bytes() {
        #[derive(Serialize)]
        struct Before {
            meta: SnapshotMeta<NodeId, NodeInfo>,
            data: Vec<u8>,
        }
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let now = bincode::serialize(&StoredSnapshot { meta: &meta(7), data: &data }).unwrap();
        let before = bincode::serialize(&Before { meta: meta(7), data: data.clone() }).unwrap();
        assert_eq!(now, before);
        let read: StoredSnapshotRef = bincode::deserialize(&before).unwrap();
        assert_eq!((read.meta, read.data), (meta(7), &data[..]));
    }

    /// A built snapshot is encoded straight into its file; the file must hold
    /// what a StoredSnapshot of the keyspace's encoding holds, and read back
    /// (and decode) as that keyspace.
    #[test]
    fn a_snapshot_encoded_into_its_file_is_the_stored_snapshot_of_the_keyspace() {
        let dir = tempfile::tempdir().unwrap();
        let db = Storage::open(dir.path()).unwrap();
        let keyspace = keyspace_of(0..50_000);
        let (new, range) = write_built_snapshot(&db, &meta(9), &keyspace).unwrap();
        let written = StoredData { bytes: db.replace_snapshot_file(new, CURRENT).unwrap(), range };
        let expected = bincode::serialize(&StoredSnapshot { meta: &meta(9), data: &keyspace.encode() }).unwrap();
        assert_eq!(written.bytes.as_ref(), &expected[..], "the file's bytes");
        assert_eq!(written.as_ref(), &keyspace.encode()[..], "the range returned");
        let (read_meta, read) = StateMachine::read_snapshot(&db).unwrap().expect("a snapshot");
        assert_eq!(read_meta, meta(9));
        let decoded = Keyspace::decode(read.as_ref()).unwrap();
        assert_eq!(decoded.encode(), keyspace.encode());
        assert_eq!(decoded.len(0), 50_000);
    }

    fn keyspace_of(keys: std::ops::Range<u64>) -> Keyspace {
        let mut keyspace = Keyspace::new();
        for i in keys {
            let value = bytes::Bytes::from(format!("owner-{i}"));
            keyspace.insert(bytes::Bytes::from(format!("lock:{i:08}")), crate::keyspace::Entry::string(value, i + 1, i));
        }
        keyspace
    }

    fn leftovers(dir: &std::path::Path) -> Vec<String> {
        let names = std::fs::read_dir(dir.join("snapshot")).unwrap().map(|f| f.unwrap().file_name().to_string_lossy().into_owned());
        names.filter(|n| n != "current").collect()
    }

    /// openraft builds a snapshot in a task of its own, and may install one
    /// it is sent meanwhile (newer than anything applied). The older one
    /// built must not then replace the installed one in the file: the log
    /// before the installed one is purged, and a node that restarted from
    /// the older snapshot would miss entries.
    #[tokio::test]
    async fn a_snapshot_built_while_a_newer_one_is_installed_does_not_replace_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Storage::open(dir.path()).unwrap());
        let mut sm = StateMachine::open(db.clone(), Arc::new(LogClock::system()), Arc::new(|_, _| 0)).unwrap();
        let (older, newer) = (keyspace_of(0..1_000), keyspace_of(500..3_000));
        let install = |ks: &Keyspace| Box::new(SnapshotData::in_memory(ks.encode()));
        sm.install_snapshot(&meta(100), install(&older)).await.unwrap();
        // A build at index 100 writes its file; a snapshot of index 200
        // is installed; then the build finishes.
        let (built, range) = write_built_snapshot(&db, &meta(100), &older).unwrap();
        sm.install_snapshot(&meta(200), install(&newer)).await.unwrap();
        let data = keep_if_newest(&db, &sm.snapshot_file, built, range, meta(100).last_log_id).unwrap();
        assert_eq!(data.as_ref(), &older.encode()[..], "the built snapshot's data is still whole");
        let (in_file, _) = StateMachine::read_snapshot(&db).unwrap().expect("a snapshot");
        assert_eq!(in_file, meta(200), "the installed snapshot stays in the file");
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        drop(sm);
        let restarted = StateMachine::open(db.clone(), Arc::new(LogClock::system()), Arc::new(|_, _| 0)).unwrap();
        assert_eq!(restarted.shared.lock().last_applied, meta(200).last_log_id);
        assert_eq!(restarted.shared.lock().keyspace.encode(), newer.encode());

        // A newer build does replace it, and a restart starts from it.
        let newest = keyspace_of(0..4_000);
        let (built, range) = write_built_snapshot(&db, &meta(300), &newest).unwrap();
        keep_if_newest(&db, &restarted.snapshot_file, built, range, meta(300).last_log_id).unwrap();
        assert_eq!(StateMachine::read_snapshot(&db).unwrap().expect("a snapshot").0, meta(300));
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    /// A snapshot a leader sends is written to a file of its own as its
    /// chunks arrive (openraft seeks to each chunk's offset and writes it),
    /// never held whole in memory; installing decodes it from that file,
    /// writes the snapshot file from it, and deletes it. A restart starts
    /// from what was installed.
    #[tokio::test]
    async fn a_received_snapshot_is_written_to_a_file_and_installed_from_it() {
        use tokio::io::{AsyncSeekExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Storage::open(dir.path()).unwrap());
        let mut sm = StateMachine::open(db.clone(), Arc::new(LogClock::system()), Arc::new(|_, _| 0)).unwrap();
        let sent = keyspace_of(0..20_000);
        let encoded = sent.encode();
        let mut receiving = sm.begin_receiving_snapshot().await.unwrap();
        assert!(matches!(*receiving, SnapshotData::Receiving(_)), "received into a file, not memory");
        assert_eq!(leftovers(dir.path()).len(), 1, "the file being received into");
        // Chunks of 64 KiB; the second one is sent again (a retried chunk
        // arrives at its offset again).
        let chunks: Vec<(usize, &[u8])> = encoded.chunks(64 * 1024).enumerate().map(|(i, c)| (i * 64 * 1024, c)).collect();
        assert!(chunks.len() > 3);
        for (n, (offset, chunk)) in chunks.iter().chain(chunks[1..2].iter()).chain(chunks[2..].iter()).enumerate() {
            if n == 0 || n == chunks.len() || n == chunks.len() + 1 {
                receiving.seek(std::io::SeekFrom::Start(*offset as u64)).await.unwrap();
            }
            receiving.write_all(chunk).await.unwrap();
        }
        receiving.shutdown().await.unwrap();
        sm.install_snapshot(&meta(400), receiving).await.unwrap();
        assert_eq!(sm.shared.lock().keyspace.encode(), encoded, "the installed keyspace");
        assert_eq!(sm.shared.lock().last_applied, meta(400).last_log_id);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new(), "the received file is gone once installed");
        let (in_file, data) = StateMachine::read_snapshot(&db).unwrap().expect("a snapshot");
        assert_eq!(in_file, meta(400));
        assert_eq!(data.as_ref(), &encoded[..]);
        drop(sm);
        let restarted = StateMachine::open(db.clone(), Arc::new(LogClock::system()), Arc::new(|_, _| 0)).unwrap();
        assert_eq!(restarted.shared.lock().keyspace.encode(), encoded);

        // One abandoned halfway (the leader moved on) leaves no file.
        let mut sm = restarted;
        let mut abandoned = sm.begin_receiving_snapshot().await.unwrap();
        abandoned.write_all(&encoded[..1000]).await.unwrap();
        drop(abandoned);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    /// A snapshot that cannot be written must not stop the node (openraft
    /// stops on an error from the builder, and after a restart the same
    /// snapshot would stop it again): the build hands back an empty snapshot
    /// openraft does not keep, the file keeps the one it has, and the node
    /// goes on.
    #[tokio::test]
    async fn a_snapshot_that_cannot_be_written_leaves_the_current_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Storage::open(dir.path()).unwrap());
        let mut sm = StateMachine::open(db.clone(), Arc::new(LogClock::system()), Arc::new(|_, _| 0)).unwrap();
        sm.snapshot_retry = std::time::Duration::from_millis(10);
        sm.install_snapshot(&meta(100), Box::new(SnapshotData::in_memory(keyspace_of(0..1_000).encode()))).await.unwrap();
        sm.shared.lock().last_applied = meta(150).last_log_id;
        // No file can be made where the snapshot directory was.
        let moved = dir.path().join("moved");
        std::fs::rename(dir.path().join("snapshot"), &moved).unwrap();
        let handed_back = sm.get_snapshot_builder().await.build_snapshot().await.expect("no error for openraft");
        assert_eq!(handed_back.meta.last_log_id, None, "a snapshot openraft does not keep");
        std::fs::rename(&moved, dir.path().join("snapshot")).unwrap();
        assert_eq!(StateMachine::read_snapshot(&db).unwrap().expect("a snapshot").0, meta(100), "the file kept");
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        // Once files can be written again, the next build is kept.
        let built = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
        assert_eq!(built.meta.last_log_id, meta(150).last_log_id);
        assert_eq!(StateMachine::read_snapshot(&db).unwrap().expect("a snapshot").0.last_log_id, meta(150).last_log_id);
    }

    /// A crash can leave a snapshot file that was being written; the next
    /// start removes it (each write has a name of its own, so they would pile up).
    #[test]
    fn unfinished_snapshot_files_are_removed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let db = Storage::open(dir.path()).unwrap();
        let unplaced = db.new_snapshot_file(|w| w.write_all(b"half")).unwrap();
        std::mem::forget(unplaced);
        write_snapshot(&db, &StoredSnapshot { meta: &meta(5), data: b"whole" }).unwrap();
        assert_eq!(leftovers(dir.path()).len(), 1);
        drop(db);
        let db = Storage::open(dir.path()).unwrap();
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        let (read_meta, read) = StateMachine::read_snapshot(&db).unwrap().expect("a snapshot");
        assert_eq!((read_meta, read.as_ref()), (meta(5), &b"whole"[..]));
    }

    #[test]
    fn the_current_snapshot_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let db = Storage::open(dir.path()).unwrap();
        assert!(StateMachine::read_snapshot(&db).unwrap().is_none());
        for data in [Vec::new(), b"x".to_vec(), (0..100_000u32).map(|i| (i * 7) as u8).collect()] {
            write_snapshot(&db, &StoredSnapshot { meta: &meta(data.len() as u64), data: &data }).unwrap();
            let (read_meta, read) = StateMachine::read_snapshot(&db).unwrap().expect("a snapshot");
            assert_eq!((read_meta, read.as_ref()), (meta(data.len() as u64), &data[..]));
        }
    }
}
