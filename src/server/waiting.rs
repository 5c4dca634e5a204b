//! A connection blocked in `LOCK.ACQUIRE key owner ttl-ms WAIT ms`.
//!
//! The command goes through the log like any other. If the lock is free (or
//! already the owner's) the reply is the token, at once. If not, the state
//! machine queues the owner (replicated, see `keyspace::Waiters`) and replies
//! [`Reply::Queued`]; the connection then blocks until this node applies the
//! entry that ends its wait:
//!
//! * the entry that frees the lock (a release, an expiry, a deletion) grants
//!   it to the first waiter in the same entry: the reply is the new token;
//! * once the deadline has passed in log time, the leader's expiry timer
//!   proposes an `Expire` entry that ends the wait: the reply is nil.
//!
//! The connection registers for the end of its waits before it proposes the
//! command, so an end applied at any moment after is not missed. If the
//! client disconnects, the node proposes its removal from the queue
//! ([`Request::Dequeue`]). If no end arrives by the deadline plus a grace
//! period (no leader could propose the timeout, or this node installed a
//! snapshot over the entry), the connection leaves the queue itself through
//! the log, and the `Dequeue` reply says whether the lock was granted first.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::clients::{UnblockSignal, Unblocked};
use super::Node;
use crate::commands::Request;
use crate::keyspace::WaitStep;
use crate::protocol::{parse_i64, Reply};

/// How long past its `WAIT` a blocked connection waits for the entry that
/// ends its wait before it leaves the queue itself.
const GRACE: Duration = Duration::from_millis(500);
/// A wait longer than this (a year) is waited for as if it were this long.
const LONGEST_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Whether `argv` (a `LOCK.ACQUIRE`) asks to wait.
pub fn waits(argv: &[Bytes]) -> bool {
    argv.len() > 4
}

/// Runs `LOCK.ACQUIRE ... WAIT` for connection `conn`; `None` if the client
/// went away while blocked (`closed` completes when it does).
pub async fn acquire(
    node: &Arc<Node>,
    conn: u64,
    argv: Vec<Bytes>,
    closed: impl Future<Output = ()>,
    unblock: &UnblockSignal,
) -> Option<Reply> {
    // A malformed WAIT gets the command's own error from the state machine.
    let wait = argv.get(5).and_then(|a| parse_i64(a)).filter(|ms| *ms > 0).map_or(Duration::ZERO, |ms| {
        Duration::from_millis(ms as u64)
    });
    let (key, owner) = (argv[1].clone(), argv[2].clone());
    let mut registration = node.hub.await_lock(node.consensus.client_id(conn));
    let reply = match node.consensus.execute_numbered(conn, Request::Command(argv)).await {
        (_, Ok(reply)) => reply,
        (seq, Err(e)) => {
            // No answer (no leader, timed out): the WAIT may have queued
            // all the same. Leave the queue, so no grant goes to a client
            // that is not waiting for it.
            let node = node.clone();
            tokio::spawn(async move {
                let _ = node.consensus.execute(conn, Request::Dequeue { key, owner, seq }).await;
            });
            return Some(Reply::Error(e.to_string()));
        }
    };
    let Reply::Queued { seq } = reply else { return Some(reply) };

    let _blocked = super::connection::Blocked::new(node, conn);
    let fallback = tokio::time::sleep(wait.min(LONGEST_WAIT) + GRACE);
    tokio::pin!(fallback, closed);
    loop {
        tokio::select! {
            end = registration.outcomes.recv() => match end {
                Some((s, WaitStep::Granted { token })) if s == seq => return Some(Reply::Int(token as i64)),
                Some((s, WaitStep::TimedOut)) if s == seq => return Some(Reply::Nil),
                // The end of an earlier wait of this connection (one that
                // failed with an error after it had queued).
                Some(_) => {}
                None => break,
            },
            _ = &mut fallback => break,
            // CLIENT UNBLOCK: the wait ends now, through the log, so no
            // grant goes to a client that stopped waiting. A grant applied
            // first stands (the reply is its token); else, as a timeout
            // (nil), or the UNBLOCKED error.
            reason = unblock.wait() => {
                let reply = execute(node, conn, Request::Dequeue { key, owner, seq }).await;
                return Some(match (reason, reply) {
                    (Unblocked::Error, Reply::Nil) => Reply::error(Unblocked::ERROR),
                    (_, reply) => reply,
                });
            }
            _ = &mut closed => {
                // A waiter whose connection closes leaves the queue; a grant
                // that came first lapses by its lease, as a crashed holder's.
                let node = node.clone();
                tokio::spawn(async move {
                    let _ = node.consensus.execute(conn, Request::Dequeue { key, owner, seq }).await;
                });
                return None;
            }
        }
    }
    // No end by the deadline (no leader could end it, or this node installed
    // a snapshot over the entry that did): leave the queue through the log.
    // Its reply is how the wait ended: the token if it was granted first.
    tracing::debug!(conn, "no end of a lock wait by its deadline: leaving the queue");
    Some(execute(node, conn, Request::Dequeue { key, owner, seq }).await)
}

async fn execute(node: &Node, conn: u64, request: Request) -> Reply {
    node.consensus.execute(conn, request).await.unwrap_or_else(|e| Reply::Error(e.to_string()))
}
