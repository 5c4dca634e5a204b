//! The Raft log ([`crate::storage::wal`]: segment files of its own) and the
//! vote, committed and purged log ids (RocksDB's `meta` family), as openraft's
//! `RaftLogStorage` (storage-v2).
//!
//! Appends are handed to the log's writer thread, which fsyncs once for
//! every append queued behind it and then acknowledges them all: group
//! commit, with no disk I/O on the runtime's threads.
//!
//! A leader's own entries are acknowledged to openraft as soon as they are
//! readable, before their fsync, so that openraft (0.9, whose core waits for
//! every append to be acknowledged before it does anything else) sends them
//! to the followers while the leader's disk writes them: the two fsyncs of a
//! commit run side by side instead of one after the other. openraft then
//! counts the leader towards a quorum early, so [`Durable`] makes up for it:
//! - the state machine applies an entry only once it is durable here
//!   ([`Durable::wait`]), so no reply, read, event or snapshot shows an entry
//!   before a majority holds it on disk (the leader and a follower that
//!   acknowledged it after its own fsync);
//! - the commit index sent to followers is never past the leader's durable
//!   log ([`Durable::clamp`]), so no follower applies such an entry earlier;
//! - no committed id past the durable log is saved;
//! - the vote changes only once the early entries are on disk: under a new
//!   vote openraft takes every entry the node holds as written;
//! - a node whose saved vote is its own starts as a candidate, not as the
//!   leader of that term again ([`LogStore::as_restarted`]);
//! - membership entries, and every entry after one until it is durable, wait
//!   for their fsync as before: a joint configuration must really be on a
//!   majority of both configurations before the next change is proposed.
//!
//! Entries a follower appends, and a leader's entries from another term,
//! are acknowledged only once on disk. Nothing is acknowledged to a client
//! before it is on disk on a majority.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use tokio::sync::watch;
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftLogId, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::busy_poll::BusyPoll;
use super::types::{Entry, LogId, NodeId, StorageIoError, TypeConfig};
use crate::clock::LogClock;
use crate::keyspace::LogTime;
use crate::storage::wal::{self, Wal};
use crate::storage::{Batch, Cf, Storage};

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const LAST_PURGED: &[u8] = b"last_purged";

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn io_err(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: impl std::fmt::Display) -> StorageIoError {
    StorageIoError::from_io_error(subject, verb, std::io::Error::other(e.to_string()))
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serialize(v).expect("serialising plain data cannot fail")
}

fn decode<T: DeserializeOwned>(raw: &[u8], subject: ErrorSubject<NodeId>) -> Result<T, StorageIoError> {
    bincode::deserialize(raw).map_err(|e| io_err(subject, ErrorVerb::Read, e))
}

fn read_meta<T: DeserializeOwned>(db: &Storage, key: &[u8]) -> Result<Option<T>, StorageIoError> {
    let raw = db.get(Cf::Meta, key).map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Read, e))?;
    raw.map(|r| decode(&r, ErrorSubject::Store)).transpose()
}

fn read_purged(db: &Storage) -> Result<Option<LogId>, StorageIoError> {
    Ok(read_meta::<Option<LogId>>(db, LAST_PURGED)?.flatten())
}

/// Reads log entries; cloned for each replication task.
#[derive(Clone)]
pub struct LogReader {
    wal: Wal,
}

impl LogReader {
    fn entries(&self, start: u64, end_inclusive: Option<u64>) -> Result<Vec<Entry>, StorageIoError> {
        let end = end_inclusive.map_or(u64::MAX, |e| e.saturating_add(1));
        let records = self.wal.read(start, end).map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        records.iter().map(|(_, raw)| decode(raw, ErrorSubject::Logs)).collect()
    }

    /// The entry at `index`, if the log holds it.
    fn entry(&self, index: u64) -> Result<Option<Entry>, StorageIoError> {
        Ok(self.entries(index, Some(index))?.pop())
    }

    /// The index of the last entry, if the log holds any.
    pub(super) fn last_index(&self) -> Option<u64> {
        self.wal.last_index()
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageIoError> {
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => Some(i),
            Bound::Excluded(&0) => return Ok(vec![]),
            Bound::Excluded(&i) => Some(i - 1),
            Bound::Unbounded => None,
        };
        self.entries(start, end)
    }
}

/// How far this node's log is on disk: the id of the last entry known
/// durable, or why the log stopped (a failed write or fsync). Cloning shares
/// it.
#[derive(Clone)]
pub struct Durable(Arc<watch::Sender<DurableState>>);

#[derive(Debug, Clone, Default)]
struct DurableState {
    last: Option<LogId>,
    failed: Option<String>,
    /// The highest commit index [`Durable::clamp`] kept from a follower.
    withheld: Option<u64>,
}

impl Durable {
    fn new(last: Option<LogId>) -> Durable {
        Durable(Arc::new(watch::Sender::new(DurableState {
            last,
            failed: None,
            withheld: None,
        })))
    }

    /// The last entry known to be on disk.
    pub fn last(&self) -> Option<LogId> {
        self.0.borrow().last
    }

    fn last_index(&self) -> Option<u64> {
        self.last().map(|l| l.index)
    }

    /// The writer has synced every entry through `upto`, or failed.
    fn synced(&self, upto: LogId, result: &std::io::Result<()>) {
        self.0.send_if_modified(|s| match result {
            Ok(()) if s.last.map_or(true, |l| l.index < upto.index) => {
                s.last = Some(upto);
                true
            }
            Ok(()) => false,
            Err(e) => {
                s.failed.get_or_insert_with(|| e.to_string());
                true
            }
        });
    }

    /// The log was cut back to end at `last`.
    fn truncated(&self, last: Option<LogId>) {
        self.0.send_if_modified(|s| {
            if s.last.map(|l| l.index) > last.map(|l| l.index) {
                s.last = last;
                return true;
            }
            false
        });
    }

    /// Waits until the entry at `index` is on disk here. Fails if the log
    /// stopped first: the entry may never be.
    pub async fn wait(&self, index: u64) -> Result<(), String> {
        let reached =
            |s: &DurableState| s.failed.is_some() || s.last.is_some_and(|l| l.index >= index);
        if !reached(&self.0.borrow()) {
            let mut rx = self.0.subscribe();
            rx.wait_for(reached)
                .await
                .map_err(|_| "the log closed".to_string())?;
        }
        match &self.0.borrow().failed {
            Some(e) => Err(format!("the Raft log failed: {e}")),
            None => Ok(()),
        }
    }

    /// `commit`, or the last durable entry if that is older.
    fn on_disk(&self, commit: Option<LogId>) -> Option<LogId> {
        match (commit, self.last()) {
            (Some(c), Some(d)) if d.index < c.index => Some(d),
            (Some(_), None) => None,
            _ => commit,
        }
    }

    /// `commit`, or the last durable entry if that is older: the commit
    /// index a leader may tell its followers.
    pub fn clamp(&self, commit: Option<LogId>) -> Option<LogId> {
        let clamped = self.on_disk(commit);
        if clamped == commit {
            return commit;
        }
        if let Some(c) = commit {
            self.0.send_if_modified(|s| {
                let newer = s.withheld < Some(c.index);
                if newer {
                    s.withheld = Some(c.index);
                }
                newer
            });
        }
        clamped
    }

    /// Waits until the disk has caught up with a commit index [`clamp`]
    /// kept from a follower (then the leader sends a heartbeat, so that
    /// followers learn of it without waiting for the next one). Fails once
    /// the log has stopped.
    ///
    /// [`clamp`]: Durable::clamp
    pub async fn caught_up_with_withheld(&self) -> Result<(), String> {
        let mut rx = self.0.subscribe();
        let reached = |s: &DurableState| {
            s.failed.is_some()
                || s.withheld
                    .is_some_and(|w| s.last.is_some_and(|l| l.index >= w))
        };
        rx.wait_for(reached)
            .await
            .map_err(|_| "the log closed".to_string())?;
        let mut failed = None;
        self.0.send_if_modified(|s| {
            failed = s.failed.clone();
            if s.withheld
                .is_some_and(|w| s.last.is_some_and(|l| l.index >= w))
            {
                s.withheld = None;
            }
            false
        });
        failed.map_or(Ok(()), Err)
    }
}

/// The log store handed to openraft.
pub struct LogStore {
    reader: LogReader,
    db: Arc<Storage>,
    clock: Arc<LogClock>,
    durable: Durable,
    /// This node, once known ([`LogStore::for_node`]): until then nothing is
    /// acknowledged early.
    me: Option<NodeId>,
    /// The vote last saved: while it is committed and names this node, the
    /// entries of its term are this node's own, as the leader.
    vote: Option<Vote<NodeId>>,
    /// The index of the newest membership entry appended (at a start, the
    /// log's last index): until it is durable, nothing is acknowledged early.
    membership_at: Option<u64>,
    /// The last entry acknowledged before its fsync.
    early_upto: Option<u64>,
    committed: CommittedSaver,
    /// Held by a purge until its mark is durable and its files removed.
    purging: Arc<tokio::sync::Mutex<()>>,
    /// The last purge, on disk or on its way there: read from disk at the
    /// open, then set only by [`RaftLogStorage::purge`] (nothing else records
    /// one while a store is open; `reset` runs with none).
    last_purged: Option<LogId>,
    /// The index of the last purge whose mark is on disk and whose files are
    /// gone (0 for none): what a start after a kill finds (`RAFT.INFO`
    /// `purged_index`).
    purged_on_disk: Arc<AtomicU64>,
    /// Keeps the runtime's thread awake while a write is in flight (see
    /// [`BusyPoll`]).
    busy_poll: Option<Arc<BusyPoll>>,
    /// Tests hold it to keep a purge from writing its mark.
    #[cfg(test)]
    purge_hold: Arc<std::sync::Mutex<()>>,
}

/// Saves the committed log id on a thread of its own (`raftlock-commit`).
/// openraft saves it between a commit and its apply, on the runtime's
/// thread; RocksDB's write, even without an fsync, is a `write` to its own
/// log that can wait on the file system's journal, and has no place there.
/// Only the newest id handed over is written, at most once every
/// [`COMMITTED_PACE`]: the thread wakes for the first id after a quiet spell
/// and then on its own, so a busy node does not wake it once per entry. A
/// saved id may lag: a start then replays fewer entries before it serves,
/// and the leader commits the rest again (a lower committed id is always
/// safe; see `read_committed`).
struct CommittedSaver {
    slot: Arc<(std::sync::Mutex<CommittedSlot>, std::sync::Condvar)>,
}

/// The least time between two writes of the committed id.
const COMMITTED_PACE: Duration = Duration::from_millis(10);

#[derive(Default)]
struct CommittedSlot {
    /// The newest id handed over in this process, written or not.
    newest: Option<Option<LogId>>,
    /// `newest` is not written yet.
    unsaved: bool,
    /// The writer waits for an id (and must be woken for one).
    idle: bool,
    /// The store is gone: the writer stops.
    closed: bool,
}

impl CommittedSaver {
    fn start(db: &Arc<Storage>) -> Result<CommittedSaver, StorageIoError> {
        let slot: Arc<(std::sync::Mutex<CommittedSlot>, std::sync::Condvar)> = Default::default();
        // Not a handle that keeps the database open after its last user.
        let db = Arc::downgrade(db);
        let shared = slot.clone();
        std::thread::Builder::new()
            .name("raftlock-commit".into())
            .spawn(move || {
                let (lock, wake) = &*shared;
                let mut failing = false;
                loop {
                    let (committed, last) = {
                        let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
                        while !s.unsaved && !s.closed {
                            s.idle = true;
                            s = wake.wait(s).unwrap_or_else(|p| p.into_inner());
                        }
                        s.idle = false;
                        if !s.unsaved {
                            break;
                        }
                        // A store that closes still saves the newest id.
                        s.unsaved = false;
                        (s.newest.flatten(), s.closed)
                    };
                    let Some(db) = db.upgrade() else { break };
                    let mut b = Batch::default();
                    b.put(Cf::Meta, COMMITTED, encode(&committed));
                    match db.write(b, false) {
                        Ok(()) => failing = false,
                        Err(e) if !failing => {
                            failing = true;
                            tracing::error!(error = %e, "cannot save the committed log id (a restart replays less)");
                        }
                        Err(_) => {}
                    }
                    drop(db);
                    if last {
                        break;
                    }
                    std::thread::sleep(COMMITTED_PACE);
                }
            })
            .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, e))?;
        Ok(CommittedSaver { slot })
    }

    fn save(&self, committed: Option<LogId>) {
        let (lock, wake) = &*self.slot;
        let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
        s.newest = Some(committed);
        s.unsaved = true;
        if std::mem::take(&mut s.idle) {
            wake.notify_one();
        }
    }

    /// The newest id handed over in this process, if any.
    fn newest(&self) -> Option<Option<LogId>> {
        self.slot.0.lock().unwrap_or_else(|p| p.into_inner()).newest
    }
}

impl Drop for CommittedSaver {
    fn drop(&mut self) {
        let (lock, wake) = &*self.slot;
        lock.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        wake.notify_one();
    }
}

impl LogStore {
    /// Opens the log of `db` and starts its writer thread, moving a log an
    /// older version kept in RocksDB into the log's files first. Recovers
    /// the highest log time in the log into `clock`.
    pub fn open(db: Arc<Storage>, clock: Arc<LogClock>) -> Result<LogStore, StorageIoError> {
        let err = |e: &dyn std::fmt::Display| io_err(ErrorSubject::Logs, ErrorVerb::Read, e);
        move_legacy_log(&db)?;
        let purged = read_purged(&db)?;
        let wal = Wal::open(db.log_dir(), purged.map(|l| l.index)).map_err(|e| err(&e))?;
        let reader = LogReader { wal };
        let last = match reader.last_index() {
            Some(index) => reader.entry(index)?.map(|e| e.log_id),
            None => purged,
        };
        let vote = read_vote(&db)?;
        let membership_at = last.map(|l| l.index);
        let committed = CommittedSaver::start(&db)?;
        let store = LogStore {
            reader,
            db,
            clock,
            durable: Durable::new(last),
            me: None,
            vote,
            membership_at,
            early_upto: None,
            committed,
            purging: Arc::default(),
            last_purged: purged,
            purged_on_disk: Arc::new(AtomicU64::new(purged.map_or(0, |l| l.index))),
            busy_poll: None,
            #[cfg(test)]
            purge_hold: Arc::default(),
        };
        store.recover_log_time()?;
        Ok(store)
    }

    /// The log of node `me`: the entries it appends as the leader are
    /// acknowledged before their fsync (see the module's notes).
    pub fn for_node(mut self, me: NodeId) -> LogStore {
        self.me = Some(me);
        self.vote = self.vote.map(|v| self.as_restarted(v));
        self
    }

    /// A store whose writes keep `busy_poll`'s thread awake while in flight.
    pub fn with_busy_poll(mut self, busy_poll: Arc<BusyPoll>) -> LogStore {
        self.busy_poll = Some(busy_poll);
        self
    }

    /// The vote a start goes on from. openraft restores a node whose saved
    /// vote is its own as leader, in the same term, at once. But this node's
    /// own entries were acknowledged before their fsync: the followers may
    /// hold entries of that term this process never wrote, and a leader
    /// going on in the term would give other entries their log ids. So the
    /// vote is read back as not committed: the node must win an election
    /// in a new term, which it can only with a log as long as a majority's.
    fn as_restarted(&self, vote: Vote<NodeId>) -> Vote<NodeId> {
        let leader = *vote.leader_id();
        let planted = crate::planted::active(crate::planted::Bug::AppliedBeforeDurable);
        if vote.is_committed() && Some(leader.node_id) == self.me && !planted {
            return Vote::new(leader.term, leader.node_id);
        }
        vote
    }

    /// How far this log is on disk.
    pub fn durable(&self) -> Durable {
        self.durable.clone()
    }

    /// The index of the last purge that is on disk, files removed (0 for
    /// none), as it changes.
    pub fn purged_on_disk(&self) -> Arc<AtomicU64> {
        self.purged_on_disk.clone()
    }

    /// Appends `entries`; `ack` is called once openraft may count them as
    /// stored here: at once for a leader's own entries (see the module's
    /// notes), else once they are on disk.
    fn append_acking(
        &mut self,
        entries: impl IntoIterator<Item = Entry>,
        ack: wal::Done,
    ) -> Result<(), StorageIoError> {
        let mut records = Vec::new();
        let mut end = None;
        let mut last = None;
        let mut own = self
            .vote
            .is_some_and(|v| v.is_committed() && Some(v.leader_id().node_id) == self.me);
        let mut membership = false;
        for entry in entries {
            match &entry.payload {
                EntryPayload::Normal(p) => end = Some((entry.log_id.index, p.log_time)),
                EntryPayload::Membership(_) => {
                    membership = true;
                    self.membership_at = Some(entry.log_id.index);
                }
                EntryPayload::Blank => {}
            }
            if self
                .vote
                .is_some_and(|v| v.leader_id() != &entry.log_id.leader_id)
            {
                own = false;
            }
            last = Some(entry.log_id);
            records.push((entry.log_id.index, encode(&entry)));
        }
        let Some(last) = last else {
            ack(Ok(()));
            return Ok(());
        };
        if let Some((index, t)) = end {
            self.clock.log_appended(index, t);
        }
        let early = own && !membership && self.durable.last_index() >= self.membership_at;
        if early {
            self.early_upto = Some(last.index);
        }
        if early
            && (crate::planted::active(crate::planted::Bug::AppliedBeforeDurable)
                || crate::planted::active(crate::planted::Bug::LeaderLogLag))
        {
            self.reader.wal.planted_lag();
        }
        let durable = self.durable.clone();
        let writing = self.busy_poll.as_ref().and_then(|b| b.begin());
        let (done, ack): (wal::Done, Option<wal::Done>) = if early {
            (
                Box::new(move |result| {
                    durable.synced(last, &result);
                    drop(writing);
                }),
                Some(ack),
            )
        } else {
            (
                Box::new(move |result| {
                    durable.synced(last, &result);
                    drop(writing);
                    ack(result)
                }),
                None,
            )
        };
        // Readable when this returns, durable when the writer has synced it.
        self.reader
            .wal
            .append(records, done)
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        if let Some(ack) = ack {
            ack(Ok(()));
        }
        Ok(())
    }


    /// A reader of this log.
    pub(super) fn reader(&self) -> LogReader {
        self.reader.clone()
    }

    /// Tells the clock where the log ends after a restart.
    fn recover_log_time(&self) -> Result<(), StorageIoError> {
        if let Some((index, t)) = self.last_log_time(u64::MAX)? {
            self.clock.log_appended(index, t);
        }
        Ok(())
    }

    /// The newest entry below `below` that carries a log time: (index, time).
    fn last_log_time(&self, below: u64) -> Result<Option<(u64, LogTime)>, StorageIoError> {
        let Some(last) = self.reader.last_index() else { return Ok(None) };
        let Some(mut index) = below.checked_sub(1).map(|b| b.min(last)) else { return Ok(None) };
        let first = self.reader.wal.first_index();
        while index >= first {
            if let Some(entry) = self.reader.entry(index)? {
                if let EntryPayload::Normal(p) = entry.payload {
                    return Ok(Some((index, p.log_time)));
                }
            }
            if index == 0 {
                break;
            }
            index -= 1;
        }
        Ok(None)
    }
}

/// Runs blocking `work` on the runtime's blocking pool (outside a runtime,
/// here).
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => rt.spawn_blocking(work).await.map_err(|e| e.to_string()),
        Err(_) => Ok(work()),
    }
}

/// Moves the entries of the RocksDB `log` family (where versions before the
/// log's own files kept them) into the log's files, once: written as one
/// segment, durably, before they are deleted from RocksDB. A crash in
/// between leaves both, and the next start keeps the files.
fn move_legacy_log(db: &Storage) -> Result<(), StorageIoError> {
    let err = |e: &dyn std::fmt::Display| io_err(ErrorSubject::Logs, ErrorVerb::Write, e);
    let mut any = false;
    db.scan(Cf::Log, &index_key(0), |_, _| {
        any = true;
        Ok(false)
    })
    .map_err(|e| err(&e))?;
    if !any {
        return Ok(());
    }
    if wal::is_empty(db.log_dir()).map_err(|e| err(&e))? {
        let mut records = Vec::new();
        db.scan(Cf::Log, &index_key(0), |k, v| {
            let index = u64::from_be_bytes(k.try_into().unwrap_or([0xff; 8]));
            records.push((index, v.to_vec()));
            Ok(true)
        })
        .map_err(|e| err(&e))?;
        let moved = wal::import(db.log_dir(), records).map_err(|e| err(&e))?;
        tracing::info!(entries = moved, "moved the Raft log out of RocksDB into {}", db.log_dir().display());
    }
    let mut b = Batch::default();
    b.delete_range(Cf::Log, index_key(0), index_key(u64::MAX));
    db.write(b, true).map_err(|e| err(&e))
}

/// The vote stored in `db`, read without opening the log store.
pub(super) fn read_vote(db: &Storage) -> Result<Option<Vote<NodeId>>, StorageIoError> {
    read_meta(db, VOTE)
}

/// The first and last index of the log of `db` on disk (None if it holds no
/// entry), read without changing anything. For tests and tools: the node
/// must be stopped.
pub fn log_on_disk(db: &Storage) -> Result<Option<(u64, u64)>, String> {
    let purged = read_purged(db).map_err(|e| e.to_string())?;
    wal::span(db.log_dir(), purged.map(|l| l.index)).map_err(|e| e.to_string())
}

/// Empties the log of `db` up to and including `last` (a snapshot covers
/// it), records `last` as purged and committed, and stores `vote`
/// (`raft::recovery`). The records first, durably; then the log's files go.
pub(super) fn reset(db: &Storage, last: LogId, vote: Vote<NodeId>) -> Result<(), StorageIoError> {
    let mut b = Batch::default();
    b.delete_range(Cf::Log, index_key(0), index_key(u64::MAX));
    b.put(Cf::Meta, LAST_PURGED, encode(&Some(last)));
    b.put(Cf::Meta, COMMITTED, encode(&Some(last)));
    b.put(Cf::Meta, VOTE, encode(&vote));
    db.write(b, true).map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, e))?;
    wal::remove_all(db.log_dir()).map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageIoError> {
        self.reader.try_get_log_entries(range).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageIoError> {
        let last_purged = self.last_purged;
        let last_log_id = match self.reader.last_index() {
            Some(index) => match self.reader.entry(index)? {
                Some(entry) => Some(*entry.get_log_id()),
                None => last_purged,
            },
            None => last_purged,
        };
        Ok(LogState { last_purged_log_id: last_purged, last_log_id })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        self.reader.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageIoError> {
        // Under a new vote this node may answer as a follower or a voter, and
        // openraft then takes every entry in its log as on disk (a follower
        // acknowledges an entry it holds already without writing it again).
        // Its own entries acknowledged early must be first.
        if self.vote.as_ref() != Some(vote)
            && !crate::planted::active(crate::planted::Bug::AppliedBeforeDurable)
        {
            if let Some(index) = self.early_upto {
                self.durable
                    .wait(index)
                    .await
                    .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, e))?;
            }
        }
        let mut b = Batch::default();
        b.put(Cf::Meta, VOTE, encode(vote));
        // Synced: off the runtime's threads.
        let db = self.db.clone();
        off_runtime(move || db.write(b, true))
            .await
            .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, e))?
            .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, e))?;
        self.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageIoError> {
        Ok(read_meta(&self.db, VOTE)?.map(|v| self.as_restarted(v)))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageIoError> {
        // openraft may commit a leader's entry before its fsync here. Saved
        // as it is, a restart that lost the entry would read back the log's
        // new end as committed, and that end may by then be another
        // leader's entry that never was: only what is on disk here is saved.
        let committed = if crate::planted::active(crate::planted::Bug::AppliedBeforeDurable) {
            committed
        } else {
            self.durable.on_disk(committed)
        };
        self.committed.save(committed);
        Ok(())
    }


    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageIoError> {
        // What this process handed to the writer is at least as new as what
        // it wrote.
        let saved = match self.committed.newest() {
            Some(newest) => newest,
            None => read_meta::<Option<LogId>>(&self.db, COMMITTED)?.flatten(),
        };
        // openraft saves the committed id as soon as it learns it, which on
        // a follower can be before the log's writer has written the entries
        // it covers; a process that dies in between comes back with a
        // committed id past its log, and openraft could not start (it
        // re-applies up to it). No more than the log holds is reported: a
        // lower committed id is always safe (the leader tells it again).
        let Some(saved) = saved else { return Ok(None) };
        let LogState { last_log_id, .. } = self.get_log_state().await?;
        Ok(Some(match last_log_id {
            Some(last) if last.index < saved.index => last,
            Some(_) => saved,
            None => return Ok(None),
        }))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageIoError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.append_acking(
            entries,
            Box::new(move |result| callback.log_io_completed(result)),
        )
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageIoError> {
        let err = |e: &dyn std::fmt::Display| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e);
        let done = self.reader.wal.truncate(log_id.index).map_err(|e| err(&e))?;
        // Waited for off the runtime's threads: the writer first finishes
        // the appends queued before the truncation.
        off_runtime(move || done.recv()).await.map_err(|e| err(&e))?.map_err(|e| err(&e))?.map_err(|e| err(&e))?;
        // The removed entries' times must not outlive them (a later election
        // would continue from them).
        let remaining = self.last_log_time(log_id.index)?;
        self.clock.log_truncated(log_id.index, remaining);
        let before = match log_id.index.checked_sub(1) {
            Some(i) => self.reader.entry(i)?.map(|e| e.log_id).or(self.last_purged),
            None => None,
        };
        self.durable.truncated(before);
        // The entries this node acknowledged early from `log_id` on are gone
        // (and the writer synced those below before it cut the log): a vote
        // change must not wait for the log to grow back past them, which
        // it may never do, and not while openraft's core waits on the vote.
        if !crate::planted::active(crate::planted::Bug::VoteWaitsForTruncated) {
            self.early_upto = self.early_upto.filter(|upto| *upto < log_id.index);
        }
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageIoError> {
        // openraft's core waits for this, and with it every append and
        // commit: the synced write of the mark, which waits for whatever
        // the file system's journal is doing (just after a snapshot, its
        // file's fsyncs: 10 ms here), goes on in the background. The purged
        // records are forgotten at once; their files stay until the mark is
        // durable, so a start never finds records missing above the purged
        // index it knows (one that finds records below it skips them). The
        // turns keep the marks in order.
        let turn = self.purging.clone().lock_owned().await;
        let purged = self.reader.wal.forget(log_id.index);
        self.last_purged = self.last_purged.max(Some(log_id));
        let mut b = Batch::default();
        b.put(Cf::Meta, LAST_PURGED, encode(&Some(log_id)));
        let (db, wal) = (self.db.clone(), self.reader.wal.clone());
        let on_disk = self.purged_on_disk.clone();
        #[cfg(test)]
        let hold = self.purge_hold.clone();
        let work = move || {
            let _turn = turn;
            #[cfg(test)]
            let _held = hold.lock().unwrap_or_else(|p| p.into_inner());
            match db.write(b, true) {
                Ok(()) => {
                    if let Err(e) = wal.remove(purged) {
                        tracing::warn!("cannot remove purged log segments: {e}");
                    }
                    on_disk.fetch_max(log_id.index, Ordering::Release);
                }
                // The files stay: a start reads their records back.
                Err(e) => tracing::error!(index = log_id.index, "cannot record the purged log index: {e}"),
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(work)),
            Err(_) => work(),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn blank(index: u64) -> Entry {
        Entry { log_id: LogId::new(CommittedLeaderId::new(2, 1), index), payload: EntryPayload::Blank }
    }

    /// A log an older version kept in RocksDB is moved into the log's files
    /// at the first start, entry for entry, and then read from there.
    #[tokio::test]
    async fn a_log_kept_in_rocksdb_is_moved_into_the_files() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Storage::open(dir.path()).unwrap();
            let mut b = Batch::default();
            for i in 5..12 {
                b.put(Cf::Log, index_key(i), encode(&blank(i)));
            }
            b.put(Cf::Meta, LAST_PURGED, encode(&Some(*blank(4).get_log_id())));
            db.write(b, true).unwrap();
            db.stop_background_work();
        }
        let db = Arc::new(Storage::open(dir.path()).unwrap());
        let mut log = LogStore::open(db.clone(), Arc::new(LogClock::system())).unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id.map(|l| l.index), Some(11));
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(4));
        let got = log.try_get_log_entries(0..100).await.unwrap();
        assert_eq!(got.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), (5..12).collect::<Vec<_>>());
        let mut left = 0;
        db.scan(Cf::Log, &index_key(0), |_, _| {
            left += 1;
            Ok(true)
        })
        .unwrap();
        assert_eq!(left, 0, "the RocksDB copy is deleted once the files hold it");
        assert_eq!(log_on_disk(&db).unwrap(), Some((5, 11)));
    }

    /// A log of `n` blank entries, from index 0, in a new database.
    fn log_of_blanks(n: u64) -> (tempfile::TempDir, Arc<Storage>, LogStore) {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Storage::open(dir.path()).unwrap());
        wal::import(db.log_dir(), (0..n).map(|i| (i, encode(&blank(i))))).unwrap();
        let log = LogStore::open(db.clone(), Arc::new(LogClock::system())).unwrap();
        (dir, db, log)
    }

    /// A committed id saved past the entries the log holds (they were never
    /// written: the process died first) reads back as the log's last id.
    #[tokio::test]
    async fn a_committed_id_past_the_log_reads_back_as_the_logs_end() {
        let (_dir, _db, mut log) = log_of_blanks(6);
        assert_eq!(log.read_committed().await.unwrap(), None);
        log.save_committed(Some(*blank(3).get_log_id())).await.unwrap();
        assert_eq!(log.read_committed().await.unwrap().map(|l| l.index), Some(3));
        log.save_committed(Some(*blank(9).get_log_id())).await.unwrap();
        assert_eq!(log.read_committed().await.unwrap().map(|l| l.index), Some(5));
    }

    /// The committed id is written by a thread of its own, the newest of
    /// those handed over last, and read back at once meanwhile.
    #[tokio::test]
    async fn the_newest_committed_id_reaches_the_disk() {
        let (_dir, db, mut log) = log_of_blanks(2000);
        for i in 1..=1500 {
            log.save_committed(Some(*blank(i).get_log_id())).await.unwrap();
        }
        assert_eq!(log.read_committed().await.unwrap().map(|l| l.index), Some(1500));
        committed_on_disk_becomes(&db, 1500).await;
        // Nothing older is written after it.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let on_disk = read_meta::<Option<LogId>>(&db, COMMITTED).unwrap().flatten().map(|l| l.index);
        assert_eq!(on_disk, Some(1500));
        // Handed over while the writer rests after a write, and after it
        // has gone idle: each reaches the disk.
        log.save_committed(Some(*blank(1600).get_log_id())).await.unwrap();
        committed_on_disk_becomes(&db, 1600).await;
        log.save_committed(Some(*blank(1700).get_log_id())).await.unwrap();
        committed_on_disk_becomes(&db, 1700).await;
        tokio::time::sleep(COMMITTED_PACE * 5).await;
        log.save_committed(Some(*blank(1800).get_log_id())).await.unwrap();
        committed_on_disk_becomes(&db, 1800).await;
    }

    #[tokio::test]
    async fn a_closing_store_still_saves_the_newest_committed_id() {
        let (_dir, db, mut log) = log_of_blanks(100);
        log.save_committed(Some(*blank(10).get_log_id())).await.unwrap();
        committed_on_disk_becomes(&db, 10).await;
        // The writer rests after its write; the store closes meanwhile.
        log.save_committed(Some(*blank(20).get_log_id())).await.unwrap();
        drop(log);
        committed_on_disk_becomes(&db, 20).await;
    }

    /// A purge returns before its mark is on disk (openraft's core waits for
    /// it); the files of the records it forgot stay until the mark is on
    /// disk, and then go.
    #[tokio::test]
    async fn purged_files_go_only_once_the_purge_is_on_disk() {
        let (_dir, db, mut log) = log_of_blanks(10);
        log.reader.wal.end_segment();
        let (tx, rx) = std::sync::mpsc::channel();
        let records = (10..20).map(|i| (i, encode(&blank(i)))).collect();
        log.reader.wal.append(records, Box::new(move |r| tx.send(r.is_ok()).unwrap())).unwrap();
        assert!(rx.recv().unwrap());
        let segments = || {
            let names = std::fs::read_dir(db.log_dir()).unwrap().map(|e| e.unwrap().file_name());
            names.filter(|name| name.to_string_lossy().ends_with(".seg")).count()
        };
        let purged_on_disk = || read_meta::<Option<LogId>>(&db, LAST_PURGED).unwrap().flatten().map(|l| l.index);
        assert_eq!(segments(), 2);

        let hold = log.purge_hold.clone();
        let held = hold.lock().unwrap();
        log.purge(*blank(12).get_log_id()).await.unwrap();
        assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id.map(|l| l.index), Some(12));
        assert_eq!(log.try_get_log_entries(13..20).await.unwrap().len(), 7);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(purged_on_disk(), None);
        assert_eq!(segments(), 2, "a segment went before the purge was on disk");
        let reported = log.purged_on_disk();
        assert_eq!(reported.load(Ordering::Acquire), 0, "RAFT.INFO would report a purge not yet on disk");

        drop(held);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while purged_on_disk() != Some(12) || segments() != 1 {
            assert!(std::time::Instant::now() < deadline, "purged {:?}, {} segments", purged_on_disk(), segments());
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // A second purge waits its turn and lands after the first.
        log.purge(*blank(15).get_log_id()).await.unwrap();
        let _turn = log.purging.clone().lock_owned().await;
        assert_eq!(purged_on_disk(), Some(15));
        assert_eq!(reported.load(Ordering::Acquire), 15);
    }

    /// Waits (at most 10 s) for RocksDB to hold `index` as the committed id.
    async fn committed_on_disk_becomes(db: &Storage, index: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let on_disk = read_meta::<Option<LogId>>(db, COMMITTED).unwrap().flatten().map(|l| l.index);
            if on_disk == Some(index) {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "on disk: {on_disk:?}, wanted {index}");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    fn entry(term: u64, leader: NodeId, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, leader), index),
            payload: EntryPayload::Blank,
        }
    }

    fn membership(term: u64, leader: NodeId, index: u64) -> Entry {
        let m = openraft::Membership::new(vec![std::collections::BTreeSet::from([1, 2, 3])], None);
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, leader), index),
            payload: EntryPayload::Membership(m),
        }
    }

    /// A fresh log of node 1 in a temporary directory (kept while the
    /// returned guard lives).
    fn node_one_log() -> (tempfile::TempDir, LogStore) {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Storage::open(dir.path()).unwrap());
        let log = LogStore::open(db, Arc::new(LogClock::system())).unwrap().for_node(1);
        (dir, log)
    }

    /// Appends `entries` and reports whether openraft was told they are
    /// stored before the writer wrote them.
    fn acked_at_once(
        log: &mut LogStore,
        entries: Vec<Entry>,
    ) -> std::sync::mpsc::Receiver<std::io::Result<()>> {
        let (tx, rx) = std::sync::mpsc::channel();
        log.append_acking(entries, Box::new(move |r| tx.send(r).unwrap()))
            .unwrap();
        rx
    }

    async fn pending(durable: &Durable, index: u64) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(30), durable.wait(index))
            .await
            .is_err()
    }

    /// A leader's own entries are acknowledged to openraft before the
    /// writer has them on disk, but `Durable` (which the state machine and
    /// the commit index sent to followers wait for) shows them only once
    /// they are synced.
    #[tokio::test]
    async fn a_leaders_own_entries_are_acknowledged_early_and_shown_durable_only_once_synced() {
        let (_dir, mut log) = node_one_log();
        let wal = log.reader.wal.clone();
        log.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        let durable = log.durable();
        let rx = acked_at_once(&mut log, vec![entry(2, 1, 0), entry(2, 1, 1)]);
        durable.wait(1).await.unwrap();
        assert!(rx.try_recv().unwrap().is_ok());

        let held = wal.hold_writes();
        let rx = acked_at_once(&mut log, vec![entry(2, 1, 2), entry(2, 1, 3)]);
        assert!(
            rx.try_recv().unwrap().is_ok(),
            "the leader's entries are acknowledged before they are written"
        );
        assert!(
            pending(&durable, 2).await,
            "not durable while the writer is held"
        );
        assert_eq!(durable.last().map(|l| l.index), Some(1));
        let commit = Some(*entry(2, 1, 3).get_log_id());
        assert_eq!(
            durable.clamp(commit).map(|l| l.index),
            Some(1),
            "followers hear of no commit past the disk"
        );
        log.save_committed(commit).await.unwrap();
        let saved = log.read_committed().await.unwrap().map(|l| l.index);
        assert_eq!(saved, Some(1), "no commit past the disk is saved");
        let caught_up = {
            let durable = durable.clone();
            tokio::spawn(async move { durable.caught_up_with_withheld().await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert!(
            !caught_up.is_finished(),
            "the withheld commit is not sent before the disk has it"
        );
        drop(held);
        durable.wait(3).await.unwrap();
        caught_up.await.unwrap().unwrap();
        assert_eq!(durable.clamp(commit), commit);
    }

    /// Entries this node appends as a follower, and a membership entry (and
    /// what follows it until it is on disk), are acknowledged only once
    /// synced.
    #[tokio::test]
    async fn a_followers_entries_and_membership_changes_are_acknowledged_only_once_synced() {
        let (_dir, mut log) = node_one_log();
        let wal = log.reader.wal.clone();
        let durable = log.durable();
        // Node 2 leads term 2: its entries, which node 1 holds as a follower.
        log.save_vote(&Vote::new_committed(2, 2)).await.unwrap();
        let held = wal.hold_writes();
        let rx = acked_at_once(&mut log, vec![entry(2, 2, 0), entry(2, 2, 1)]);
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(30))
                .is_err(),
            "a follower acknowledges only what is on disk"
        );
        drop(held);
        assert!(rx.recv().unwrap().is_ok());
        durable.wait(1).await.unwrap();

        // Node 1 leads term 3; its own log id from an older term of its own
        // is not early either.
        log.save_vote(&Vote::new_committed(3, 1)).await.unwrap();
        let held = wal.hold_writes();
        let rx = acked_at_once(&mut log, vec![membership(3, 1, 2)]);
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(30))
                .is_err(),
            "a membership entry waits for its fsync"
        );
        let after = acked_at_once(&mut log, vec![entry(3, 1, 3)]);
        assert!(
            after
                .recv_timeout(std::time::Duration::from_millis(30))
                .is_err(),
            "so does what follows it, until it is durable"
        );
        drop(held);
        assert!(rx.recv().unwrap().is_ok());
        assert!(after.recv().unwrap().is_ok());
        durable.wait(3).await.unwrap();
        let held = wal.hold_writes();
        let rx = acked_at_once(&mut log, vec![entry(3, 1, 4)]);
        assert!(
            rx.try_recv().unwrap().is_ok(),
            "once it is, the leader acknowledges early again"
        );
        drop(held);
        durable.wait(4).await.unwrap();

        // An unconfirmed vote for itself (a candidate) is not a leader's.
        log.save_vote(&Vote::new(4, 1)).await.unwrap();
        let held = wal.hold_writes();
        let rx = acked_at_once(&mut log, vec![entry(3, 1, 5)]);
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(30))
            .is_err());
        drop(held);
        assert!(rx.recv().unwrap().is_ok());
    }

    /// A log cut back (a follower's conflicting entries) is durable only
    /// through where it now ends.
    #[tokio::test]
    async fn truncation_moves_the_durable_end_back() {
        let (_dir, mut log) = node_one_log();
        log.save_vote(&Vote::new_committed(2, 2)).await.unwrap();
        let rx = acked_at_once(&mut log, (0..6).map(|i| entry(2, 2, i)).collect());
        assert!(rx.recv().unwrap().is_ok());
        assert_eq!(log.durable().last().map(|l| l.index), Some(5));
        log.truncate(*entry(2, 2, 3).get_log_id()).await.unwrap();
        assert_eq!(log.durable().last(), Some(*entry(2, 2, 2).get_log_id()));
        let commit = Some(*entry(3, 3, 4).get_log_id());
        assert_eq!(
            log.durable().clamp(commit),
            Some(*entry(2, 2, 2).get_log_id())
        );
    }

    /// The state machine applies a leader's entry, which openraft commits
    /// before its fsync here, only once the entry is on disk.
    #[tokio::test]
    async fn the_state_machine_applies_an_entry_only_once_it_is_durable() {
        use openraft::storage::RaftStateMachine;
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Storage::open(dir.path()).unwrap());
        let clock = Arc::new(LogClock::system());
        let mut log = LogStore::open(db.clone(), clock.clone())
            .unwrap()
            .for_node(1);
        let wal = log.reader.wal.clone();
        let mut sm = super::super::StateMachine::open(db, clock, Arc::new(|_, _| 0))
            .unwrap()
            .with_durable(log.durable());
        log.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        let held = wal.hold_writes();
        let rx = acked_at_once(&mut log, vec![entry(2, 1, 0), entry(2, 1, 1)]);
        assert!(rx.try_recv().unwrap().is_ok());
        let applying = tokio::spawn(async move {
            sm.apply(vec![entry(2, 1, 0), entry(2, 1, 1)])
                .await
                .unwrap();
            sm.applied_state().await.unwrap().0
        });
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert!(
            !applying.is_finished(),
            "applied before the entries were on disk"
        );
        drop(held);
        assert_eq!(applying.await.unwrap().map(|l| l.index), Some(1));
    }

    /// Under a new vote a node answers as a follower or a voter, taking
    /// every entry it holds as on disk: its own entries acknowledged early
    /// must be first.
    #[tokio::test]
    async fn a_leader_steps_down_only_once_its_own_entries_are_on_disk() {
        let (_dir, mut log) = node_one_log();
        let wal = log.reader.wal.clone();
        let durable = log.durable();
        log.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        let held = wal.hold_writes();
        let rx = acked_at_once(&mut log, vec![entry(2, 1, 0), entry(2, 1, 1)]);
        assert!(rx.try_recv().unwrap().is_ok());
        let voted = tokio::spawn(async move { log.save_vote(&Vote::new(3, 2)).await });
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert!(
            !voted.is_finished(),
            "the vote changed before the leader's own entries were on disk"
        );
        drop(held);
        voted.await.unwrap().unwrap();
        assert_eq!(durable.last().map(|l| l.index), Some(1));
    }

    /// A deposed leader whose own entries (acknowledged early) were cut off
    /// by the next leader's log can change its vote again: it does not wait
    /// for the log to grow back past them (a chaos run found a node whose
    /// core waited there for good, its applies stopped).
    #[tokio::test]
    async fn a_vote_change_after_a_truncation_waits_for_no_entry_that_is_gone() {
        let (_dir, mut log) = node_one_log();
        log.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        let rx = acked_at_once(&mut log, (0..6).map(|i| entry(2, 1, i)).collect());
        assert!(rx.recv().unwrap().is_ok());
        log.save_vote(&Vote::new_committed(3, 2)).await.unwrap();
        log.truncate(*entry(2, 1, 3).get_log_id()).await.unwrap();
        let voted = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            log.save_vote(&Vote::new(4, 3)),
        )
        .await;
        assert!(
            voted.is_ok(),
            "the vote change waited for early-acknowledged entries the truncation removed"
        );
        voted.unwrap().unwrap();
    }

    /// A node that was the leader does not start as the leader again in the
    /// same term: its own entries were acknowledged before their fsync, and
    /// followers may hold some of that term it never wrote.
    #[tokio::test]
    async fn a_restarted_leader_must_be_elected_again() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Arc::new(Storage::open(dir.path()).unwrap());
            let mut log = LogStore::open(db.clone(), Arc::new(LogClock::system()))
                .unwrap()
                .for_node(1);
            log.save_vote(&Vote::new_committed(4, 1)).await.unwrap();
            log.save_vote(&Vote::new_committed(4, 1)).await.unwrap();
            db.stop_background_work();
        }
        let db = Arc::new(Storage::open(dir.path()).unwrap());
        let mut log = LogStore::open(db.clone(), Arc::new(LogClock::system()))
            .unwrap()
            .for_node(1);
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(4, 1)));
        // Another node's committed vote is read back as it is.
        log.save_vote(&Vote::new_committed(5, 2)).await.unwrap();
        assert_eq!(
            log.read_vote().await.unwrap(),
            Some(Vote::new_committed(5, 2))
        );
    }
}
