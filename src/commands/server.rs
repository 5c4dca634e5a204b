//! Server commands that touch replicated state: DBSIZE, FLUSHDB, FLUSHALL.

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx};
use crate::protocol::{Args, Reply};

use super::{CmdError, CmdResult};

/// ```text
/// DBSIZE
/// ```
pub fn dbsize(ks: &Keyspace, ctx: &ReadCtx, _args: Args) -> CmdResult {
    Ok(Reply::Int(ks.len(ctx.now) as i64))
}

/// ```text
/// FLUSHDB [ASYNC | SYNC]
/// FLUSHALL [ASYNC | SYNC]
/// ```
/// Deletes every key (one database exists). No per-key notifications, as Redis.
pub fn flush(ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    if args.remaining() > 1 {
        return Err(CmdError::Arg(crate::protocol::ArgError::Syntax));
    }
    if args.remaining() == 1 && !matches!(args.next_keyword()?.as_str(), "ASYNC" | "SYNC") {
        return Err(CmdError::Arg(crate::protocol::ArgError::Syntax));
    }
    ks.clear();
    ctx.events.push(crate::keyspace::Event::Flushed);
    Ok(Reply::ok())
}
