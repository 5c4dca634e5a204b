//! openraft's own storage conformance suite, run against the RocksDB store.

use std::sync::Arc;

use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

use super::types::{NodeId, TypeConfig};
use super::{LogStore, StateMachine};
use crate::clock::LogClock;
use crate::storage::Storage;

struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), openraft::StorageError<NodeId>> {
        let io = |e: &dyn std::fmt::Display| {
            openraft::StorageError::from_io_error(
                openraft::ErrorSubject::Store,
                openraft::ErrorVerb::Write,
                std::io::Error::other(e.to_string()),
            )
        };
        let dir = tempfile::tempdir().map_err(|e| io(&e))?;
        let db = Arc::new(Storage::open(dir.path()).map_err(|e| io(&e))?);
        let clock = Arc::new(LogClock::system());
        let log = LogStore::open(db.clone(), clock.clone())?;
        let sm = StateMachine::open(db, clock, Arc::new(|_, _| 0))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn rocksdb_store_passes_the_openraft_suite() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    Suite::test_all(RocksBuilder).unwrap();
}
