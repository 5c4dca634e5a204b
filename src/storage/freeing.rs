//! Frees the blocks of deleted files a little at a time, on a thread of its
//! own.
//!
//! A file's blocks are freed when its last name and its last open handle
//! are gone, all of them in one filesystem journal commit. Every fsync of
//! the Raft log waits for that commit: deleting a 700 MB snapshot file
//! (10 M keys) held another file's 100-byte `fdatasync` for 20 ms here (ext4,
//! mounted with `discard`), a 200 MB one for 10 ms, and a node replaces its
//! snapshot file after each snapshot and deletes 64 MB log segments after
//! each purge. Shrunk 8 MB at a time, each step in a commit of its own, the
//! same deletion held it for 2 ms at most.
//!
//! The steps are also spaced out ([`STEP_PAUSE`]): taken back to back, the
//! eight steps of a 64 MB segment slowed every fsync of the log for ~20 ms
//! together. Under contention each lock handoff waits for one, so the 50
//! waiters queued at that moment each waited ~30 ms instead of ~9 ms (one
//! node, 50 `LOCK.ACQUIRE ... WAIT` clients on one key, a segment purged
//! after a snapshot).
//!
//! A file is handed over once it has no name left ([`free_gradually`]), with
//! the handles others may still read it through: it is not shrunk until
//! they are gone, since a read past its new end would fail.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

/// Bytes freed at each step.
const STEP: u64 = 8 << 20;

/// The pause after each step, for the log's fsyncs to run at their usual
/// speed in between: a 64 MB segment is freed in under a second, a 700 MB
/// snapshot file in about nine.
pub(super) const STEP_PAUSE: Duration = Duration::from_millis(100);

/// How often a file still being read is looked at again.
const READERS_POLL: Duration = Duration::from_millis(10);

/// How long a file's readers are waited for.
const READERS_PATIENCE: Duration = Duration::from_secs(10);

struct Deleted {
    file: File,
    readers: Vec<Arc<File>>,
}

/// Frees the blocks of `file`, which has no name left (it was deleted while
/// open), gradually, once nothing holds `readers` (other handles on it)
/// but this. A file that still has a name is only closed. If the freeing
/// thread cannot run, the file is closed here, which frees it at once.
pub fn free_gradually(file: File, readers: Vec<Arc<File>>) {
    static JOBS: OnceLock<Option<mpsc::Sender<Deleted>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Deleted>();
        std::thread::Builder::new()
            .name("raftlock-free".into())
            .spawn(move || {
                for deleted in rx {
                    free(deleted);
                }
            })
            .ok()
            .map(|_| tx)
    });
    if let Some(jobs) = jobs {
        // A send fails only if the thread is gone; the file then closes
        // as it drops here.
        let _ = jobs.send(Deleted { file, readers });
    }
}

fn free(Deleted { file, readers }: Deleted) {
    // Readers hold their clone for the length of a read: nothing can clone
    // one any more (the file is no longer reachable by name or index). One
    // that holds on longer is not waited for: the file is then left to be
    // freed at once by the last close, and the files behind it go on.
    let since = std::time::Instant::now();
    while readers.iter().any(|r| Arc::strong_count(r) > 1) {
        if since.elapsed() >= READERS_PATIENCE {
            return;
        }
        std::thread::sleep(READERS_POLL);
    }
    drop(readers);
    let Ok(meta) = file.metadata() else { return };
    if meta.nlink() != 0 {
        return;
    }
    let mut size = meta.len();
    while size > STEP {
        size -= STEP;
        // A failure leaves the rest to the close.
        if file.set_len(size).is_err() || file.sync_data().is_err() {
            return;
        }
        std::thread::sleep(STEP_PAUSE);
    }
}

/// Whether `file` has no name left.
pub fn is_deleted(file: &File) -> bool {
    file.metadata().is_ok_and(|m| m.nlink() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn file_of(dir: &std::path::Path, name: &str, len: u64) -> (std::path::PathBuf, File) {
        let path = dir.join(name);
        let f = File::options().read(true).write(true).create_new(true).open(&path).unwrap();
        f.set_len(len).unwrap();
        f.write_all_at(b"end", len - 3).unwrap();
        (path, f)
    }

    #[test]
    fn a_deleted_file_is_shrunk_once_its_readers_are_done() {
        let dir = tempfile::tempdir().unwrap();
        let (path, f) = file_of(dir.path(), "big", 5 * STEP / 2);
        let watch = f.try_clone().unwrap();
        let reader = Arc::new(f.try_clone().unwrap());
        let reading = reader.clone();
        std::fs::remove_file(&path).unwrap();
        free_gradually(f, vec![reader]);
        // While a reader holds its handle, the file keeps its bytes.
        std::thread::sleep(Duration::from_millis(100));
        let mut tail = [0u8; 3];
        reading.read_exact_at(&mut tail, 5 * STEP / 2 - 3).unwrap();
        assert_eq!(&tail, b"end");
        assert_eq!(watch.metadata().unwrap().len(), 5 * STEP / 2);
        drop(reading);
        wait_for("the file shrunk to its last step", || watch.metadata().unwrap().len() <= STEP);
        assert_eq!(watch.metadata().unwrap().len(), STEP / 2);
    }

    #[test]
    fn the_steps_are_spaced_out() {
        let dir = tempfile::tempdir().unwrap();
        let (path, f) = file_of(dir.path(), "spaced", 3 * STEP + 1);
        let watch = f.try_clone().unwrap();
        std::fs::remove_file(&path).unwrap();
        let handed = std::time::Instant::now();
        free_gradually(f, Vec::new());
        // Three steps, each followed by a pause: the last one starts two
        // pauses after the first at the earliest.
        wait_for("the file shrunk to its last step", || watch.metadata().unwrap().len() <= STEP);
        assert!(handed.elapsed() >= 2 * STEP_PAUSE, "three steps in {:?}", handed.elapsed());
        assert_eq!(watch.metadata().unwrap().len(), 1);
    }

    #[test]
    fn a_file_that_still_has_a_name_is_left_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (path, f) = file_of(dir.path(), "named", 3 * STEP);
        let (marker_path, marker) = file_of(dir.path(), "marker", 2 * STEP);
        let watch = marker.try_clone().unwrap();
        std::fs::remove_file(marker_path).unwrap();
        free_gradually(f, Vec::new());
        // Jobs run in order: once the deleted marker behind it is shrunk,
        // the named file has been seen to.
        free_gradually(marker, Vec::new());
        wait_for("the marker shrunk", || watch.metadata().unwrap().len() == STEP);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * STEP);
    }
}
