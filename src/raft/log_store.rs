//! The Raft log and vote on RocksDB (openraft `RaftLogStorage`, storage-v2).
//!
//! Appends are written at once (readable immediately) and made durable by a
//! flusher thread that fsyncs the WAL once for every append queued behind it,
//! then acknowledges them all: group commit. Nothing is acknowledged before it
//! is on disk.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftLogId, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::types::{Entry, LogId, NodeId, StorageIoError, TypeConfig};
use crate::keyspace::LogTime;
use crate::clock::LogClock;
use crate::storage::{Batch, Cf, Storage};

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const LAST_PURGED: &[u8] = b"last_purged";

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn io_err(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageIoError {
    StorageIoError::from_io_error(subject, verb, std::io::Error::other(e.to_string()))
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serialize(v).expect("serialising plain data cannot fail")
}

fn decode<T: DeserializeOwned>(raw: &[u8], subject: ErrorSubject<NodeId>) -> Result<T, StorageIoError> {
    bincode::deserialize(raw).map_err(|e| io_err(subject, ErrorVerb::Read, e))
}

/// Reads log entries; cloned for each replication task.
#[derive(Clone)]
pub struct LogReader {
    db: Arc<Storage>,
}

impl LogReader {
    pub(super) fn new(db: Arc<Storage>) -> LogReader {
        LogReader { db }
    }

    fn entries(&self, start: u64, end_inclusive: Option<u64>) -> Result<Vec<Entry>, StorageIoError> {
        let mut out = Vec::new();
        self.db
            .scan(Cf::Log, &index_key(start), |k, v| {
                let index = u64::from_be_bytes(k.try_into().unwrap_or([0xff; 8]));
                if end_inclusive.is_some_and(|end| index > end) {
                    return Ok(false);
                }
                out.push(v.to_vec());
                Ok(true)
            })
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        out.iter().map(|raw| decode(raw, ErrorSubject::Logs)).collect()
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

/// The log store handed to openraft.
pub struct LogStore {
    reader: LogReader,
    clock: Arc<LogClock>,
    flusher: mpsc::Sender<LogFlushed<TypeConfig>>,
}

impl LogStore {
    /// Opens the log in `db` and starts its flusher thread. Recovers the
    /// highest log time in the log into `clock`.
    pub fn open(db: Arc<Storage>, clock: Arc<LogClock>) -> Result<LogStore, StorageIoError> {
        let (tx, rx) = mpsc::channel::<LogFlushed<TypeConfig>>();
        let flush_db = db.clone();
        std::thread::Builder::new()
            .name("raftlock-fsync".into())
            .spawn(move || flush_loop(flush_db, rx))
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        let store = LogStore { reader: LogReader { db }, clock, flusher: tx };
        store.recover_log_time()?;
        Ok(store)
    }

    fn db(&self) -> &Storage {
        &self.reader.db
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
        let mut found = None;
        self.db()
            .scan_back(Cf::Log, |_, v| {
                if let Ok(entry) = bincode::deserialize::<Entry>(v) {
                    if entry.log_id.index < below {
                        if let EntryPayload::Normal(p) = entry.payload {
                            found = Some((entry.log_id.index, p.log_time));
                            return Ok(false);
                        }
                    }
                }
                Ok(true)
            })
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        Ok(found)
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StorageIoError> {
        let raw = self.db().get(Cf::Meta, key).map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Read, e))?;
        raw.map(|r| decode(&r, ErrorSubject::Store)).transpose()
    }
}

/// The vote stored in `db`, read without opening the log store.
pub(super) fn read_vote(db: &Storage) -> Result<Option<Vote<NodeId>>, StorageIoError> {
    let raw = db.get(Cf::Meta, VOTE).map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Read, e))?;
    raw.map(|r| decode(&r, ErrorSubject::Vote)).transpose()
}

/// The index of the last entry in the log of `db`, if it has one.
pub(super) fn last_index(db: &Storage) -> Result<Option<u64>, StorageIoError> {
    let mut last = None;
    db.scan_back(Cf::Log, |k, _| {
        last = k.try_into().ok().map(u64::from_be_bytes);
        Ok(false)
    })
    .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
    Ok(last)
}

/// Empties the log of `db` up to and including `last` (a snapshot covers
/// it), records `last` as purged and committed, and stores `vote`: one
/// synced batch (`raft::recovery`).
pub(super) fn reset(db: &Storage, last: LogId, vote: Vote<NodeId>) -> Result<(), StorageIoError> {
    let mut b = Batch::default();
    b.delete_range(Cf::Log, index_key(0), index_key(u64::MAX));
    b.put(Cf::Meta, LAST_PURGED, encode(&Some(last)));
    b.put(Cf::Meta, COMMITTED, encode(&Some(last)));
    b.put(Cf::Meta, VOTE, encode(&vote));
    db.write(b, true).map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, e))
}

/// Fsyncs the WAL once per batch of queued appends, then acknowledges them.
fn flush_loop(db: Arc<Storage>, rx: mpsc::Receiver<LogFlushed<TypeConfig>>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let started = Instant::now();
        let result = db.sync_wal();
        crate::metrics::record_fsync(started.elapsed(), batch.len());
        match result {
            Ok(()) => batch.into_iter().for_each(|cb| cb.log_io_completed(Ok(()))),
            Err(e) => {
                // After a failed fsync the kernel may have dropped the dirty
                // pages: nothing written since the last good fsync can be
                // trusted, and a retry could "succeed" without them. Failing
                // the waiters stops openraft's core with a storage error, and
                // a core that stops on an error stops the process
                // (`raft::stop_on_fatal`); a restart recovers from what is
                // really on disk and catches up.
                tracing::error!("fsync of the Raft log failed: {e}");
                for cb in batch {
                    cb.log_io_completed(Err(std::io::Error::other(e.to_string())));
                }
            }
        }
    }
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
        let last_purged = self.read_meta::<Option<LogId>>(LAST_PURGED)?.flatten();
        let mut last = None;
        self.db()
            .scan_back(Cf::Log, |_, v| {
                last = Some(v.to_vec());
                Ok(false)
            })
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        let last_log_id = match last {
            Some(raw) => Some(*decode::<Entry>(&raw, ErrorSubject::Logs)?.get_log_id()),
            None => last_purged,
        };
        Ok(LogState { last_purged_log_id: last_purged, last_log_id })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        self.reader.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageIoError> {
        let mut b = Batch::default();
        b.put(Cf::Meta, VOTE, encode(vote));
        self.db().write(b, true).map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageIoError> {
        self.read_meta(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageIoError> {
        let mut b = Batch::default();
        b.put(Cf::Meta, COMMITTED, encode(&committed));
        self.db().write(b, false).map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageIoError> {
        Ok(self.read_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageIoError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut b = Batch::default();
        let mut end = None;
        for entry in entries {
            if let EntryPayload::Normal(p) = &entry.payload {
                end = Some((entry.log_id.index, p.log_time));
            }
            b.put(Cf::Log, index_key(entry.log_id.index), encode(&entry));
        }
        if let Some((index, t)) = end {
            self.clock.log_appended(index, t);
        }
        // Written now (so readable when we return), durable when the flusher
        // has synced the WAL behind it.
        self.db().write(b, false).map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        self.flusher
            .send(callback)
            .map_err(|_| io_err(ErrorSubject::Logs, ErrorVerb::Write, std::io::Error::other("flusher stopped")))
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageIoError> {
        let mut b = Batch::default();
        b.delete_range(Cf::Log, index_key(log_id.index), index_key(u64::MAX));
        self.db().write(b, true).map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
        // The removed entries' times must not outlive them (a later election
        // would continue from them).
        let remaining = self.last_log_time(log_id.index)?;
        self.clock.log_truncated(log_id.index, remaining);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageIoError> {
        let mut b = Batch::default();
        b.put(Cf::Meta, LAST_PURGED, encode(&Some(log_id)));
        b.delete_range(Cf::Log, index_key(0), index_key(log_id.index + 1));
        self.db().write(b, false).map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }
}
