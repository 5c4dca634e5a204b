//! Transactions: what `EXEC` does on apply, and what `WATCH` records.
//!
//! `MULTI`/`EXEC`/`DISCARD`/`UNWATCH` are connection state (see
//! `server/connection`); the queued commands reach the log as one
//! [`Request::Transaction`](super::Request) and are applied here, together.

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx, Version};
use crate::protocol::{Args, Reply};

use super::{execute_write, CmdResult, ReplyRoom};

/// ```text
/// WATCH key [key ...]
/// ```
/// As the client sees it: `OK`. Inside, this read returns the version of the
/// last write to each key, which the connection keeps and `EXEC` compares.
pub fn watch(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    Ok(Reply::Array(args.rest().iter().map(|k| Reply::Int(ks.modified(k, ctx.now) as i64)).collect()))
}

/// Applies a transaction: a nil array if a watched key changed; `-STALE` (and
/// nothing applied) if a `LOCK.FENCE` in it is stale; otherwise every
/// command's reply, each charged to `room` as it is made (one that does not
/// fit is an error in its place; the command ran).
pub fn exec(
    ks: &mut Keyspace,
    ctx: &mut ExecCtx,
    watched: &[(Bytes, Version)],
    commands: &[Vec<Bytes>],
    room: &mut ReplyRoom,
) -> Reply {
    if watched.iter().any(|(key, seen)| ks.modified(key, ctx.log_time) != *seen) {
        return Reply::NilArray;
    }
    // A transaction with a fence may have to be undone as a whole: the
    // keyspace records the entries it changes, as they were before.
    let has_fence = commands.iter().any(|argv| argv.first().is_some_and(|n| n.eq_ignore_ascii_case(b"lock.fence")));
    let before = has_fence.then(|| (ctx.version, ctx.events.len()));
    if has_fence {
        ks.begin_undoable();
    }
    let mut replies = Vec::with_capacity(commands.len());
    for (i, argv) in commands.iter().enumerate() {
        if i > 0 {
            // Each command creates keys with its own version (token).
            ctx.version = ks.next_version(ctx.version);
        }
        let reply = super::execute_local(argv).unwrap_or_else(|| execute_write(ks, ctx, argv));
        if let (Some((version, events)), Reply::Error(e)) = (&before, &reply) {
            if e.starts_with("STALE") && argv[0].eq_ignore_ascii_case(b"lock.fence") {
                ks.undo();
                ctx.version = *version;
                ctx.events.truncate(*events);
                return Reply::Error(format!("{e}; the transaction was not applied"));
            }
        }
        replies.push(room.take(reply));
    }
    ks.keep_changes();
    Reply::Array(replies)
}
