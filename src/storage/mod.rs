//! Durable storage on RocksDB: the only module that imports `rocksdb`.
//!
//! Four column families: small Raft metadata (`meta`: vote, committed,
//! purged), and, read only to move them out of an older version's data, the
//! Raft log (`log`, big-endian index keys) and the state-machine snapshot
//! (`snapshot`); the fourth, `log-in-files`, holds nothing and is there to be
//! refused (see [`Cf::LogInFiles`]). Writes are batches; durability is a
//! synced write or an explicit [`Storage::sync_wal`].
//!
//! The Raft log itself is in files of its own ([`wal`], in `raftlog/` beside
//! the database): appends there are written into space allocated ahead, which
//! makes each group commit's `fdatasync` cheaper than one after RocksDB's
//! appends (see [`wal`] for the figures).
//!
//! The latest snapshot is a file beside the database (`snapshot/current`),
//! not a RocksDB value: written through RocksDB, a snapshot of a big keyspace
//! would pass through the write-ahead log the Raft log shares, and every
//! append would wait behind it.
//!
//! A deleted snapshot file or log segment is freed a little at a time, off
//! the log's writer thread ([`freeing`]): freed at once, its blocks held
//! every log fsync for tens of milliseconds.

pub mod disk;
mod freeing;
pub mod wal;

use std::io::Write;
use std::sync::Arc;
use std::path::{Path, PathBuf};

use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB};

/// A column family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cf {
    Log,
    Meta,
    Snapshot,
    /// Empty. Its presence stops a version that kept the Raft log in
    /// RocksDB from opening this data: such a version opens its own list of
    /// column families, and RocksDB refuses to open a database with one
    /// missing from the list ("Column families not opened"). Started anyway,
    /// it would find no log (the log is in `raftlog/` now), and a member with
    /// an empty log and a saved vote can elect a leader that lacks committed
    /// entries. Created at every open, before the log is touched, so even a
    /// first start interrupted while moving an older log out is refused.
    LogInFiles,
}

impl Cf {
    const ALL: [Cf; 4] = [Cf::Log, Cf::Meta, Cf::Snapshot, Cf::LogInFiles];

    fn name(self) -> &'static str {
        match self {
            Cf::Log => "log",
            Cf::Meta => "meta",
            Cf::Snapshot => "snapshot",
            Cf::LogInFiles => "log-in-files",
        }
    }
}

/// Bytes of a snapshot file written between two fsyncs. A log fsync that
/// comes during one of them waits for it (one filesystem journal): 1 MB
/// took about 1 ms here, 8 MB 13 ms.
const SNAPSHOT_SYNC_EVERY: u64 = 1 << 20;

/// A file that is fsynced after every [`SNAPSHOT_SYNC_EVERY`] bytes: the
/// disk takes a big snapshot in slices, so the Raft log's fsyncs never queue
/// behind all of it at once.
struct SyncedEvery {
    file: std::fs::File,
    unsynced: u64,
}

impl std::io::Seek for SyncedEvery {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos)
    }
}

/// Where a snapshot file is written: it may go back to fill in what it only
/// knows at the end (a length).
pub trait SnapshotSink: Write + std::io::Seek {}

impl<T: Write + std::io::Seek> SnapshotSink for T {}

impl Write for SyncedEvery {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.unsynced == 0 {
            // Before the first bytes and after every sync: a snapshot as big
            // as the data must not take the room the log needs.
            disk::room_for_snapshot(&self.file)?;
        }
        let n = self.file.write(buf)?;
        self.unsynced += n as u64;
        if self.unsynced >= SNAPSHOT_SYNC_EVERY {
            self.file.sync_data()?;
            self.unsynced = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// A storage failure. Every one is fatal to the node's Raft instance: a node
/// whose disk fails must stop, not continue.
#[derive(Debug, thiserror::Error)]
#[error("storage: {0}")]
pub struct StorageError(String);

impl From<rocksdb::Error> for StorageError {
    fn from(e: rocksdb::Error) -> Self {
        StorageError(e.into_string())
    }
}

/// A set of writes applied atomically.
#[derive(Default)]
pub struct Batch {
    ops: Vec<BatchOp>,
}

enum BatchOp {
    Put(Cf, Vec<u8>, Vec<u8>),
    Delete(Cf, Vec<u8>),
    DeleteRange(Cf, Vec<u8>, Vec<u8>),
}

impl Batch {
    pub fn put(&mut self, cf: Cf, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp::Put(cf, key.into(), value.into()));
    }

    pub fn delete(&mut self, cf: Cf, key: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp::Delete(cf, key.into()));
    }

    /// Deletes keys in `[from, to)`.
    pub fn delete_range(&mut self, cf: Cf, from: impl Into<Vec<u8>>, to: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp::DeleteRange(cf, from.into(), to.into()));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// An open RocksDB database.
pub struct Storage {
    db: DB,
    snapshot_dir: PathBuf,
    log_dir: PathBuf,
    /// The snapshot file in place, while anything has it open: every
    /// mapping of one file shares its one handle, so the file is freed
    /// only once the last of them is gone ([`Held`]). Locked while the
    /// file is opened or replaced.
    current: std::sync::Mutex<std::sync::Weak<Held>>,
}

impl Storage {
    /// Opens (creating if needed) the database in `dir`.
    pub fn open(dir: &Path) -> Result<Storage, StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| StorageError(format!("cannot create {}: {e}", dir.display())))?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        // A torn last WAL record after a crash is dropped; every record before
        // it must be intact (records acknowledged were fsynced).
        opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords);
        opts.set_keep_log_file_num(4);
        let cfs = Cf::ALL.iter().map(|cf| ColumnFamilyDescriptor::new(cf.name(), Options::default()));
        let db = DB::open_cf_descriptors(&opts, dir, cfs)?;
        let snapshot_dir = dir.join("snapshot");
        std::fs::create_dir_all(&snapshot_dir)
            .map_err(|e| StorageError(format!("cannot create {}: {e}", snapshot_dir.display())))?;
        // Snapshot files a crash left unfinished (the database's lock, held
        // from here on, keeps any other process out of this directory).
        let unfinished = std::fs::read_dir(&snapshot_dir)
            .map_err(|e| StorageError(format!("cannot list {}: {e}", snapshot_dir.display())))?;
        for file in unfinished.flatten() {
            if file.file_name().to_string_lossy().starts_with(NEW_SNAPSHOT_PREFIX) {
                std::fs::remove_file(file.path())
                    .map_err(|e| StorageError(format!("cannot remove {}: {e}", file.path().display())))?;
            }
        }
        Ok(Storage { db, snapshot_dir, log_dir: dir.join("raftlog"), current: Default::default() })
    }

    /// Where the Raft log's segment files are ([`wal`]).
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// Replaces the snapshot file with what `write` writes, durably: written and fsynced
    /// beside it, then renamed over it, then the directory fsynced. A crash
    /// at any point leaves the old file or the new one, whole. The value
    /// `legacy_key` of the snapshot column family (where an older version kept
    /// the snapshot) is deleted: it is superseded. Returns the new file,
    /// mapped (as [`Storage::map_snapshot_file`] would). Blocking.
    pub fn write_snapshot_file(
        &self,
        write: impl FnOnce(&mut dyn SnapshotSink) -> std::io::Result<()>,
        legacy_key: &[u8],
    ) -> Result<SnapshotBytes, StorageError> {
        let new = self.new_snapshot_file(write)?;
        self.replace_snapshot_file(new, legacy_key)
    }

    /// Writes and fsyncs a snapshot file beside the current one, under a
    /// name of its own (a snapshot this node builds and one it is sent may
    /// be written at the same time), for [`Storage::replace_snapshot_file`].
    /// Blocking.
    pub fn new_snapshot_file(
        &self,
        write: impl FnOnce(&mut dyn SnapshotSink) -> std::io::Result<()>,
    ) -> Result<NewSnapshotFile, StorageError> {
        let err = |what: &str, e: std::io::Error| StorageError(format!("snapshot file: {what}: {e}"));
        // From here on, a failure deletes the file (the guard's drop).
        let (f, name) = self.create_unplaced().map_err(|e| err("create", e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, SyncedEvery { file: f, unsynced: 0 });
        write(&mut w).map_err(|e| err("write", e))?;
        let f = w.into_inner().map_err(|e| err("write", e.into_error()))?.file;
        f.sync_all().map_err(|e| err("fsync", e))?;
        let held = Held::new(f);
        let bytes = map_file(&held).map_err(|e| err("map", e))?;
        Ok(NewSnapshotFile { name, bytes, held })
    }

    /// A new file beside the snapshot file, under a name of its own, and the
    /// guard that deletes it (a crash leaves it to [`Storage::open`]).
    fn create_unplaced(&self) -> std::io::Result<(std::fs::File, Unplaced)> {
        static NUMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number = NUMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.snapshot_dir.join(format!("{NEW_SNAPSHOT_PREFIX}{number}"));
        let file = std::fs::File::options().read(true).write(true).create_new(true).open(&path)?;
        Ok((file, Unplaced(Some(path))))
    }

    /// A file to receive a snapshot's data into as a leader sends it, in
    /// chunks: on disk, not in memory (700 MB at 10 M keys). Deleted once
    /// dropped. Blocking.
    pub fn receiving_snapshot_file(&self) -> Result<ScratchFile, StorageError> {
        let (file, name) =
            self.create_unplaced().map_err(|e| StorageError(format!("snapshot file: create: {e}")))?;
        Ok(ScratchFile { _name: name, held: Held::new(file) })
    }

    /// Puts `new` in place of the current snapshot file: renamed over it,
    /// then the directory fsynced. The value `legacy_key` of the snapshot
    /// column family (where an older version kept the snapshot) is deleted.
    /// Returns the new file's bytes. Blocking.
    pub fn replace_snapshot_file(&self, mut new: NewSnapshotFile, legacy_key: &[u8]) -> Result<SnapshotBytes, StorageError> {
        let err = |what: &str, e: std::io::Error| StorageError(format!("snapshot file: {what}: {e}"));
        let tmp = new.name.0.as_ref().expect("an unplaced file has its path");
        let path = self.snapshot_dir.join("current");
        let old = {
            let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            // The file replaced is kept open across the rename, which then
            // only takes its name: it is freed gradually once its last
            // holder is gone.
            let old = match current.upgrade() {
                Some(held) => Some(held),
                None => open_to_free(&path).ok().map(Held::new),
            };
            // A failed rename leaves the file to the guard, which deletes it.
            std::fs::rename(tmp, &path).map_err(|e| err("rename", e))?;
            new.name.0 = None;
            *current = Arc::downgrade(&new.held);
            old
        };
        std::fs::File::open(&self.snapshot_dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| err("fsync directory", e))?;
        drop(old);
        let mut b = Batch::default();
        b.delete(Cf::Snapshot, legacy_key.to_vec());
        self.write(b, false)?;
        Ok(new.bytes)
    }

    /// The snapshot file's contents (or, from an older version, the value
    /// `legacy_key` of the snapshot column family), if there is one. The file
    /// is mapped into memory rather than read: its pages are the page
    /// cache's, not copied into fresh memory (at 10 M keys, reading it took
    /// about 2 s of a restart). The file is only ever replaced by a rename,
    /// never written in place, so the mapping keeps the snapshot it was made
    /// of. Blocking.
    pub fn map_snapshot_file(&self, legacy_key: &[u8]) -> Result<Option<SnapshotBytes>, StorageError> {
        let err = |what: &str, e: std::io::Error| StorageError(format!("snapshot file: {what}: {e}"));
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let held = match current.upgrade() {
            Some(held) => held,
            None => match open_to_free(&self.snapshot_dir.join("current")) {
                Ok(file) => {
                    let held = Held::new(file);
                    *current = Arc::downgrade(&held);
                    held
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(self.get(Cf::Snapshot, legacy_key)?.map(SnapshotBytes::Owned));
                }
                Err(e) => return Err(err("open", e)),
            },
        };
        map_file(&held).map(Some).map_err(|e| err("map", e))
    }

    fn handle(&self, cf: Cf) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(cf.name()).expect("column families are created at open")
    }

    pub fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.db.get_cf(self.handle(cf), key)?)
    }

    /// Applies `batch` atomically; with `sync`, fsyncs the WAL before returning.
    pub fn write(&self, batch: Batch, sync: bool) -> Result<(), StorageError> {
        let mut wb = WriteBatch::default();
        for op in batch.ops {
            match op {
                BatchOp::Put(cf, k, v) => wb.put_cf(self.handle(cf), k, v),
                BatchOp::Delete(cf, k) => wb.delete_cf(self.handle(cf), k),
                BatchOp::DeleteRange(cf, from, to) => wb.delete_range_cf(self.handle(cf), from, to),
            }
        }
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        Ok(self.db.write_opt(wb, &opts)?)
    }

    /// Makes every write so far durable: one fsync for all of them.
    pub fn sync_wal(&self) -> Result<(), StorageError> {
        Ok(self.db.flush_wal(true)?)
    }

    /// Stops flushes and compactions and waits for those running. Call before
    /// the process exits: RocksDB's background threads must not outlive it.
    pub fn stop_background_work(&self) {
        self.db.cancel_all_background_work(true);
    }

    /// Calls `visit` for each entry with key `>= from`, in key order, while it
    /// returns true.
    pub fn scan(
        &self,
        cf: Cf,
        from: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        for item in self.db.iterator_cf(self.handle(cf), IteratorMode::From(from, Direction::Forward)) {
            let (k, v) = item?;
            if !visit(&k, &v)? {
                break;
            }
        }
        Ok(())
    }

    /// Calls `visit` from the last entry backwards while it returns true.
    pub fn scan_back(
        &self,
        cf: Cf,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        for item in self.db.iterator_cf(self.handle(cf), IteratorMode::End) {
            let (k, v) = item?;
            if !visit(&k, &v)? {
                break;
            }
        }
        Ok(())
    }
}

/// How the names of snapshot files not yet in place begin.
const NEW_SNAPSHOT_PREFIX: &str = "next";

/// A snapshot file written and fsynced beside the current one
/// ([`Storage::new_snapshot_file`]). Dropped before it is put in place
/// ([`Storage::replace_snapshot_file`]), it is deleted.
pub struct NewSnapshotFile {
    name: Unplaced,
    bytes: SnapshotBytes,
    held: Arc<Held>,
}

impl NewSnapshotFile {
    /// Deletes the file, keeping its bytes (mapped: they outlive the name).
    pub fn discard(self) -> SnapshotBytes {
        self.bytes
    }
}

/// A file beside the snapshot file that is never put in place
/// ([`Storage::receiving_snapshot_file`]): deleted when dropped.
pub struct ScratchFile {
    // Dropped in this order: the name goes first, so the last holder of
    // the file finds it deleted.
    _name: Unplaced,
    held: Arc<Held>,
}

impl ScratchFile {
    pub fn file(&self) -> &std::fs::File {
        &self.held.file
    }

    /// The whole file, mapped read-only. Blocking.
    pub fn map(&self) -> Result<SnapshotBytes, StorageError> {
        map_file(&self.held).map_err(|e| StorageError(format!("snapshot file: map: {e}")))
    }
}

/// An open snapshot file, shared by its mappings (and by whoever writes it).
/// Dropped by the last of them, a file that no longer has a name (replaced
/// or discarded) has its blocks freed gradually ([`freeing`]) rather than
/// all at once as it closes.
struct Held {
    file: std::fs::File,
}

impl Held {
    fn new(file: std::fs::File) -> Arc<Held> {
        Arc::new(Held { file })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if freeing::is_deleted(&self.file) {
            if let Ok(file) = self.file.try_clone() {
                freeing::free_gradually(file, Vec::new());
            }
        }
    }
}

/// The path of a snapshot file not (yet) in place: deleted when dropped,
/// unless taken.
struct Unplaced(Option<PathBuf>);

impl Drop for Unplaced {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Opens a snapshot file to map, or to hold through its replacement:
/// writable, since its last holder shrinks it once it is deleted
/// ([`freeing`]); nothing writes it.
fn open_to_free(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::options().read(true).write(true).open(path)
}

/// The whole of `held`'s file, mapped read-only (an empty file maps to no
/// bytes). The mapping holds the file.
fn map_file(held: &Arc<Held>) -> std::io::Result<SnapshotBytes> {
    let file = &held.file;
    let len = file.metadata()?.len();
    let len = usize::try_from(len).map_err(|_| std::io::Error::other(format!("{len} bytes")))?;
    if len == 0 {
        return Ok(SnapshotBytes::Owned(Vec::new()));
    }
    // SAFETY: a read-only, private mapping of a whole open file; the
    // pointer is checked, and unmapped once, by `Mapping`'s drop.
    let ptr = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, std::os::fd::AsRawFd::as_raw_fd(file), 0)
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(SnapshotBytes::Mapped(Mapping { ptr, len, _file: held.clone() }))
}

/// A snapshot file's bytes ([`Storage::map_snapshot_file`]).
pub enum SnapshotBytes {
    Mapped(Mapping),
    /// An empty file, or a snapshot an older version kept in RocksDB.
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for SnapshotBytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            SnapshotBytes::Mapped(m) => {
                // SAFETY: `ptr` maps `len` readable bytes until `m` drops, and
                // nothing writes them (a private, read-only mapping of a file
                // that is replaced by rename, never changed in place).
                unsafe { std::slice::from_raw_parts(m.ptr.cast::<u8>(), m.len) }
            }
            SnapshotBytes::Owned(v) => v,
        }
    }
}

/// A read-only mapping of a whole file, unmapped on drop.
pub struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
    /// Dropped after the unmapping (fields drop after `drop`).
    _file: Arc<Held>,
}

// SAFETY: the mapping is read-only memory owned by this value alone; reading
// it from any thread is as safe as reading a `&[u8]`.
unsafe impl Send for Mapping {}
// SAFETY: as above; nothing mutates it through a shared reference.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are exactly what mmap returned and was
        // given, and this is the only unmap.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a version that kept the Raft log in RocksDB opened.
    const BEFORE_LOG_IN_FILES: [&str; 3] = ["log", "meta", "snapshot"];

    fn open_as_before_log_in_files(dir: &Path) -> Result<DB, rocksdb::Error> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let cfs = BEFORE_LOG_IN_FILES.iter().map(|name| ColumnFamilyDescriptor::new(*name, Options::default()));
        DB::open_cf_descriptors(&opts, dir, cfs)
    }

    #[test]
    fn a_version_that_kept_the_log_in_rocksdb_cannot_open_this_data() {
        let dir = tempfile::tempdir().unwrap();
        // Data an older version wrote opens here, and is then refused to it.
        drop(open_as_before_log_in_files(dir.path()).unwrap());
        drop(Storage::open(dir.path()).unwrap());
        let refused = open_as_before_log_in_files(dir.path()).err().expect("an older version must not open this data");
        assert!(refused.into_string().contains("Column families not opened"));
        // Still opens here, again and again.
        drop(Storage::open(dir.path()).unwrap());
        drop(Storage::open(dir.path()).unwrap());
    }

    #[test]
    fn batches_scans_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Storage::open(dir.path()).unwrap();
            let mut b = Batch::default();
            for i in 0u64..10 {
                b.put(Cf::Log, i.to_be_bytes(), vec![i as u8]);
            }
            b.put(Cf::Meta, b"vote".to_vec(), b"x".to_vec());
            s.write(b, false).unwrap();
            s.sync_wal().unwrap();
            let mut b = Batch::default();
            b.delete_range(Cf::Log, 0u64.to_be_bytes(), 3u64.to_be_bytes());
            s.write(b, true).unwrap();
        }
        let s = Storage::open(dir.path()).unwrap();
        let mut seen = vec![];
        s.scan(Cf::Log, &0u64.to_be_bytes(), |_, v| {
            seen.push(v[0]);
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen, (3..10).collect::<Vec<u8>>());
        let mut last = None;
        s.scan_back(Cf::Log, |_, v| {
            last = Some(v[0]);
            Ok(false)
        })
        .unwrap();
        assert_eq!(last, Some(9));
        assert_eq!(s.get(Cf::Meta, b"vote").unwrap(), Some(b"x".to_vec()));
    }

    /// A snapshot an older version kept in RocksDB is read until the first
    /// snapshot file replaces it; the file survives a reopen, and the
    /// superseded value is gone.
    #[test]
    fn snapshot_file_replaces_the_legacy_value() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Storage::open(dir.path()).unwrap();
            assert_eq!(s.map_snapshot_file(b"current").unwrap().map(|b| b.as_ref().to_vec()), None);
            let mut b = Batch::default();
            b.put(Cf::Snapshot, b"current".to_vec(), b"old".to_vec());
            s.write(b, true).unwrap();
            assert_eq!(s.map_snapshot_file(b"current").unwrap().map(|b| b.as_ref().to_vec()), Some(b"old".to_vec()));
            s.write_snapshot_file(|w| w.write_all(b"new"), b"current").unwrap();
            s.write_snapshot_file(|w| w.write_all(b"newer"), b"current").unwrap();
            s.sync_wal().unwrap();
        }
        let s = Storage::open(dir.path()).unwrap();
        assert_eq!(s.map_snapshot_file(b"current").unwrap().map(|b| b.as_ref().to_vec()), Some(b"newer".to_vec()));
        assert_eq!(s.get(Cf::Snapshot, b"current").unwrap(), None);
        assert!(!dir.path().join("snapshot/next").exists(), "the temporary file is renamed into place");
    }

    #[test]
    fn a_mapped_snapshot_file_keeps_what_it_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(dir.path()).unwrap();
        let mapped = |s: &Storage| s.map_snapshot_file(b"current").unwrap().map(|b| b.as_ref().to_vec());
        assert_eq!(mapped(&s), None);
        let mut b = Batch::default();
        b.put(Cf::Snapshot, b"current".to_vec(), b"legacy".to_vec());
        s.write(b, true).unwrap();
        assert_eq!(mapped(&s), Some(b"legacy".to_vec()));
        s.write_snapshot_file(|_| Ok(()), b"current").unwrap();
        assert_eq!(mapped(&s), Some(Vec::new()), "an empty file");
        let big: Vec<u8> = (0..3 * 4096 + 17).map(|i| (i % 251) as u8).collect();
        s.write_snapshot_file(|w| w.write_all(&big), b"current").unwrap();
        let first = s.map_snapshot_file(b"current").unwrap().unwrap();
        assert_eq!(first.as_ref(), &big[..]);
        s.write_snapshot_file(|w| w.write_all(b"replaced"), b"current").unwrap();
        assert_eq!(first.as_ref(), &big[..], "a mapping outlives the file's replacement");
        assert_eq!(mapped(&s), Some(b"replaced".to_vec()));
        drop(first);
    }

    #[test]
    fn a_replaced_snapshot_file_is_freed_only_after_its_last_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(dir.path()).unwrap();
        let big: Vec<u8> = (0..(20 << 20) + 17).map(|i| (i % 251) as u8).collect();
        let written = s.write_snapshot_file(|w| w.write_all(&big), b"current").unwrap();
        let one = s.map_snapshot_file(b"current").unwrap().unwrap();
        let two = s.map_snapshot_file(b"current").unwrap().unwrap();
        // Another handle on the same file, to watch its size.
        let watch = std::fs::File::open(dir.path().join("snapshot/current")).unwrap();
        s.write_snapshot_file(|w| w.write_all(b"replaced"), b"current").unwrap();
        drop(written);
        drop(one);
        // One mapping is left: the file keeps every byte (a shrunk file
        // would fault on the read below).
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(watch.metadata().unwrap().len(), big.len() as u64);
        assert!(two.as_ref() == &big[..], "the last mapping reads what it mapped");
        drop(two);
        // Then it is freed, a step at a time, by the freeing thread.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while watch.metadata().unwrap().len() == big.len() as u64 {
            assert!(std::time::Instant::now() < deadline, "the replaced file was never shrunk");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(s.map_snapshot_file(b"current").unwrap().unwrap().as_ref(), b"replaced");
    }
}
