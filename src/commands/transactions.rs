//! Transactions: what `EXEC` does on apply, and what `WATCH` records.
//!
//! `MULTI`/`EXEC`/`DISCARD`/`UNWATCH` are connection state (see
//! `server/connection`); the queued commands reach the log as one
//! [`Request::Transaction`](super::Request) and are applied here, together.

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx, Value, Version};
use crate::protocol::{parse_i64, Args, Reply};

use super::{execute_write, CmdResult};

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
/// command's reply.
pub fn exec(ks: &mut Keyspace, ctx: &mut ExecCtx, watched: &[(Bytes, Version)], commands: &[Vec<Bytes>]) -> Reply {
    if watched.iter().any(|(key, seen)| ks.modified(key, ctx.log_time) != *seen) {
        return Reply::NilArray;
    }
    if let Some(stale) = stale_fence(ks, ctx, commands) {
        return stale;
    }
    let mut replies = Vec::with_capacity(commands.len());
    for (i, argv) in commands.iter().enumerate() {
        if i > 0 {
            // Each command creates keys with its own version (token).
            ctx.version = ks.next_version(ctx.version);
        }
        replies.push(execute_write(ks, ctx, argv));
    }
    Reply::Array(replies)
}

/// Checks every `LOCK.FENCE` of the transaction, in order, against the
/// resource's highest token (and earlier fences in the same transaction),
/// before anything is applied.
fn stale_fence(ks: &Keyspace, ctx: &ExecCtx, commands: &[Vec<Bytes>]) -> Option<Reply> {
    let mut highest: Vec<(Bytes, i64)> = Vec::new();
    for argv in commands {
        if argv.len() != 3 || !argv[0].eq_ignore_ascii_case(b"lock.fence") {
            continue;
        }
        let (resource, token) = (&argv[1], parse_i64(&argv[2])?);
        let current = match highest.iter().find(|(r, _)| r == resource) {
            Some((_, t)) => Some(*t),
            None => match ks.get(resource, ctx.log_time).map(|e| &e.value) {
                Some(Value::Str(v)) => parse_i64(v),
                _ => None,
            },
        };
        if let Some(current) = current {
            if token < current {
                return Some(Reply::Error(format!(
                    "STALE token {token} is lower than {current}, the highest honored for this resource; \
                     the transaction was not applied"
                )));
            }
        }
        highest.retain(|(r, _)| r != resource);
        highest.push((resource.clone(), token));
    }
    None
}
