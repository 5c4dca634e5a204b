//! PUBLISH and SPUBLISH, the pub/sub commands that go through the log (so a
//! publish reaches subscribers on every node). Subscriptions are connection state and
//! live in `server/`.

use crate::keyspace::{Event, ExecCtx, Keyspace};
use crate::protocol::{Args, Reply};

use super::CmdResult;

/// ```text
/// PUBLISH channel message
/// ```
/// The number of subscribers that received the message on the node that took
/// the command (the node fills the count in when it delivers the event).
pub fn publish(_ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let channel = args.next_bytes()?.clone();
    let message = args.next_bytes()?.clone();
    ctx.events.push(Event::Publish { channel, message });
    Ok(Reply::Int(0))
}

/// ```text
/// SPUBLISH shardchannel message
/// ```
/// As PUBLISH, to the subscribers of the shard channel (`SSUBSCRIBE`), a
/// namespace of its own. A raftlock cluster is one shard: every node's
/// shard subscribers receive it.
pub fn spublish(_ks: &mut Keyspace, ctx: &mut ExecCtx, mut args: Args) -> CmdResult {
    let channel = args.next_bytes()?.clone();
    let message = args.next_bytes()?.clone();
    ctx.events.push(Event::SPublish { channel, message });
    Ok(Reply::Int(0))
}
