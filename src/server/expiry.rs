//! The leader's expiry timer (DESIGN.md §4): when the earliest expiry in the
//! keyspace has passed in log time, propose one `Expire` entry; applying it
//! deletes every key still due at that entry's log time.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::raft::Consensus;

/// Longest sleep between checks: bounds how late a follower that becomes
/// leader notices expiries it inherited.
const MAX_IDLE: Duration = Duration::from_millis(100);

pub async fn run(consensus: Arc<Consensus>, mut shutdown: broadcast::Receiver<()>) {
    loop {
        let wait = match consensus.expiry_due() {
            Some((next, now)) if now > next => {
                if let Err(e) = consensus.expire().await {
                    tracing::debug!("expire entry not committed: {e}");
                    Some(MAX_IDLE)
                } else {
                    None
                }
            }
            // Due one millisecond after the expiry time (a key is gone once
            // log time is past it).
            Some((next, now)) => Some(Duration::from_millis(next + 1 - now).min(MAX_IDLE)),
            None => Some(MAX_IDLE),
        };
        let Some(wait) = wait else { continue };
        tokio::select! {
            _ = shutdown.recv() => return,
            _ = consensus.applied_signal().notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
