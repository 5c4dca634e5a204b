//! The command table and the two entry points that run commands against the
//! keyspace: [`apply`] for log entries (every node, in log order) and
//! [`execute_read`] for linearizable reads on the leader.
//!
//! One file per command family; each command documents its syntax and replies.
//! The table drives dispatch, arity errors, `COMMAND` and `COMMAND DOCS`.
//! Commands that only touch a connection or the node (`HELLO`, `SUBSCRIBE`,
//! `INFO`, ...) are listed here with [`Handler::Local`] and run in `server/`.

pub mod acl;
mod bitfield;
mod containers;
mod dump;
mod functions;
mod geo;
mod hashes;
mod hll;
mod keys;
mod lists;
mod locks;
mod long_double;
mod pubsub;
mod redis_specs;
mod scripts;
pub use scripts::showing_script_calls;
mod server;
mod sets;
pub mod sort;
mod streams;
mod strings;
mod table;
mod transactions;
mod zsets;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::keyspace::{ClientId, Event, ExecCtx, Keyspace, LogTime, ReadCtx, Seen, Version};
use crate::protocol::{ArgError, Args, Reply};

pub use lists::parse_block_timeout;
pub use streams::read_layout as stream_read_layout;
pub use table::{
    command_docs, command_info, key_flags, lookup, lookup_subcommand, row_of, stats_row, stats_row_name, stats_rows,
    stats_rows_named, subcommand_info, subcommand_names, CommandSpec, Handler, COMMANDS,
};

/// Why a command failed; turned into Redis's error text in one place.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CmdError {
    #[error(transparent)]
    Arg(#[from] ArgError),
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpire(&'static str),
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    /// `DECRBY key -9223372036854775808`, in Redis's words.
    #[error("ERR decrement would overflow")]
    DecrementOverflow,
    #[error("ERR invalid cursor")]
    InvalidCursor,
    #[error("ERR wrong number of arguments for '{0}' command")]
    Arity(&'static str),
    /// A lease check failed (`LOCK.RENEW`).
    #[error("LOCKLOST {0}")]
    LockLost(String),
    /// A fencing token below the highest honored (`LOCK.FENCE`).
    #[error("STALE {0}")]
    Stale(String),
    /// Any other error; the text starts with its code (`ERR ...`).
    #[error("{0}")]
    Other(String),
}

impl From<CmdError> for Reply {
    fn from(e: CmdError) -> Reply {
        Reply::Error(e.to_string())
    }
}

pub type CmdResult = Result<Reply, CmdError>;

/// Where a proposal came from, so a retried command can be recognised: the
/// client connection and that connection's command number (increasing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub client: ClientId,
    pub seq: u64,
}

impl Origin {
    /// A distinct origin for tests: client `n` of node 1, command 1.
    #[cfg(test)]
    pub fn test(n: u64) -> Origin {
        Origin { client: ClientId { node: 1, boot: 0, conn: n }, seq: 1 }
    }
}

/// What a client asks the leader to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// One command, its arguments exactly as received.
    Command(Vec<Bytes>),
    /// `MULTI` ... `EXEC`: the queued commands, applied together, or not at
    /// all if a `WATCH`ed key changed or a `LOCK.FENCE` among them is stale.
    Transaction { watched: Vec<(Bytes, Version)>, commands: Vec<Vec<Bytes>> },
    /// Write commands a client pipelined on one connection, applied in order
    /// in one log entry, each on its own (not a transaction: one failing does
    /// not stop the others). The reply is an array of their replies, which
    /// the connection sends back one by one. Only commands that
    /// [`pipelinable`] accepts.
    Pipeline(Vec<Vec<Bytes>>),
    /// The connection that sent `LOCK.ACQUIRE key owner ... WAIT` as its
    /// command `seq` leaves `key`'s queue (it closed, or stopped waiting).
    /// Never sent by a client: the node proposes it for the connection. The
    /// reply is how that wait ended: the token if it was granted first (even
    /// if the lease has run out since), else nil.
    Dequeue { key: Bytes, owner: Bytes, seq: u64 },
    /// `ACL SETUSER`/`DELUSER`/`LOAD`: a change of the replicated users.
    Acl(acl::AclOp),
    /// `request` from a client authenticated as `user`, whose permissions
    /// were checked by its node and bind the scripts it runs, on every node.
    AsUser { user: String, request: Box<Request> },
    /// `request` from a node over its `maxmemory`: the scripts in it without
    /// flags run, and a command they call that may add data (`denyoom`) is
    /// refused with Redis's `OOM` error, on every node alike (whether a node
    /// is over its limit is its own, so it travels in the entry).
    OverMaxmemory(Box<Request>),
}

/// Whether a connection may send `spec` in a [`Request::Pipeline`] with the
/// write commands around it: a plain write whose reply is its own (not
/// `PUBLISH`, whose reply the node rewrites after apply) and that does not
/// block (`BLPOP` waits on the connection).
pub fn pipelinable(spec: &CommandSpec) -> bool {
    matches!(spec.handler, Handler::Write(_)) && !is_publish(spec.name) && !spec.flags.contains(&"blocking")
}

/// `PUBLISH` and `SPUBLISH`: their reply is the count of receivers on the
/// node that took the command, filled in after apply.
pub fn is_publish(name: &str) -> bool {
    name.eq_ignore_ascii_case("publish") || name.eq_ignore_ascii_case("spublish")
}

/// This process's resident set in bytes (0 if unreadable).
pub fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages.saturating_mul(page.max(0) as u64)
}

/// The most this process has had resident, in bytes (`VmHWM`; 0 if
/// unreadable).
pub fn peak_resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib.saturating_mul(1024))
}

/// The largest client request (`--max-request-len`) or `MULTI` queue.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// Bytes a command's arguments count for, as a request's [`Request::size`]
/// counts them (each with a little for its framing).
pub fn argv_size(argv: &[Bytes]) -> usize {
    argv.iter().map(|a| a.len() + 16).sum()
}

impl Request {
    /// Whether the leader answers the request from the entry it proposes for
    /// it: a write that does not block (not `BLPOP`), not a read and not
    /// `RAFT.NODE` (a membership change). A follower gathers such requests
    /// to forward them together, so that they share the leader's next
    /// entry; the others gain nothing from waiting and go at once.
    pub fn answered_by_its_entry(&self) -> bool {
        match self {
            Request::Command(argv) => resolve(argv)
                .is_ok_and(|spec| spec.is_write() && spec.name != "raft.node" && !spec.flags.contains(&"blocking")),
            Request::Transaction { .. } | Request::Pipeline(_) | Request::Dequeue { .. } | Request::Acl(_) => true,
            Request::AsUser { request, .. } | Request::OverMaxmemory(request) => request.answered_by_its_entry(),
        }
    }

    /// Bytes of arguments the request carries.
    pub fn size(&self) -> usize {
        match self {
            Request::Command(argv) => argv_size(argv),
            Request::Transaction { watched, commands } => {
                watched.iter().map(|(k, _)| k.len() + 16).sum::<usize>() + commands.iter().map(|c| argv_size(c)).sum::<usize>()
            }
            Request::Pipeline(commands) => commands.iter().map(|c| argv_size(c)).sum::<usize>(),
            Request::Dequeue { key, owner, .. } => key.len() + owner.len() + 32,
            Request::Acl(op) => match op {
                acl::AclOp::SetUser { name, rules, base } => name.len() + argv_size(rules) + argv_size(base),
                acl::AclOp::DelUser { names } => names.iter().map(|n| n.len() + 16).sum(),
                acl::AclOp::Load { users } | acl::AclOp::LoadIfEmpty { users } => {
                    users.iter().map(|(n, r)| n.len() + argv_size(r)).sum()
                }
            },
            Request::AsUser { user, request } => user.len() + request.size(),
            Request::OverMaxmemory(request) => request.size(),
        }
    }
}

/// A client request as received, and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientCommand {
    pub origin: Origin,
    pub request: Request,
}

/// What a log entry asks the state machine to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Client commands, applied in order. Concurrent commands share one entry
    /// (and so one append and one fsync): group commit.
    Commands(Vec<ClientCommand>),
    /// Delete every key whose expiry has passed at this entry's log time.
    Expire,
}

/// The payload of one Raft log entry (DESIGN.md §5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub log_time: LogTime,
    /// The leader's wall clock at stamping; only converts `EXAT`/`PXAT`.
    pub unix_ms: u64,
    pub op: Op,
}

impl Proposal {
    /// About how many bytes the entry holds: its commands' arguments, and a
    /// little for each command and for the entry.
    pub fn size(&self) -> u64 {
        let commands = match &self.op {
            Op::Commands(cmds) => cmds.iter().map(|c| c.request.size() as u64 + 32).sum(),
            Op::Expire => 0,
        };
        commands + 32
    }
}

/// The outcome of one command of an applied entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub reply: Reply,
    pub events: Vec<Event>,
    /// The command was `PUBLISH`: its reply is the number of local receivers,
    /// which the node that delivers the events fills in.
    pub is_publish: bool,
    /// A retried copy of a command that had already run: `reply` is the
    /// first copy's, and nothing ran.
    pub repeated: bool,
}

/// Applies one committed entry: one [`Applied`] per command (one for
/// `Expire`). Deterministic: the same keyspace, index and proposal give the
/// same replies, events and resulting keyspace on every node.
pub fn apply(ks: &mut Keyspace, index: u64, proposal: &Proposal) -> Vec<Applied> {
    apply_monitored(ks, index, proposal, false)
}

/// [`apply`] on a node that has a `MONITOR` client (`monitored`): scripts
/// report the commands they run as events ([`Event::ScriptCall`]).
pub fn apply_monitored(ks: &mut Keyspace, index: u64, proposal: &Proposal, monitored: bool) -> Vec<Applied> {
    // The entry's scripts share one instruction budget.
    let _budget = crate::scripting::EntryBudget::begin();
    let log_time = ks.advance_to(proposal.log_time);
    ks.sessions_mut().expire(log_time);
    match &proposal.op {
        Op::Expire => {
            let mut ctx = ExecCtx::new(ks.next_version(index), log_time, proposal.unix_ms);
            ks.expire_due(&mut ctx);
            ks.expire_waiters(&mut ctx);
            ks.hand_off(&mut ctx);
            vec![Applied { reply: Reply::ok(), events: ctx.events, is_publish: false, repeated: false }]
        }
        Op::Commands(commands) => {
            let mut room = ReplyRoom::entry();
            commands
                .iter()
                .map(|cmd| {
                    match ks.sessions().check(&cmd.origin.client, cmd.origin.seq) {
                        Seen::New => {}
                        // A retry of a command that ran: its reply, nothing else.
                        Seen::Again(reply) => {
                            let reply = room.take(reply);
                            return Applied { reply, events: Vec::new(), is_publish: false, repeated: true };
                        }
                        Seen::Stale => {
                            let reply = Reply::error("ERR a newer command of this client already ran; this one did not");
                            return Applied { reply, events: Vec::new(), is_publish: false, repeated: false };
                        }
                    }
                    let mut ctx = ExecCtx::new(ks.next_version(index), log_time, proposal.unix_ms);
                    ctx.monitored = monitored;
                    let (reply, is_publish) = run_request(ks, &mut ctx, index, &cmd.origin, &cmd.request, &mut room);
                    ks.sessions_mut().record(cmd.origin.client, cmd.origin.seq, &reply, log_time);
                    Applied { reply, events: ctx.events, is_publish, repeated: false }
                })
                .collect()
        }
    }
}

/// The most values (each string, number, nil and container counts one) the
/// replies of one log entry's commands may hold in all, every command of its
/// transactions and pipelines counted.
pub const ENTRY_REPLY_VALUES: usize = 16_000_000;

/// The most bytes of strings the replies of one log entry may hold in all.
pub const ENTRY_REPLY_BYTES: usize = 1 << 30;

/// What is left of the room for the replies of one log entry
/// ([`ENTRY_REPLY_VALUES`], [`ENTRY_REPLY_BYTES`]).
///
/// Every node makes the replies of every entry it applies, and holds them
/// all until the entry is applied. Each command's reply is bounded (a
/// script's, `SRANDMEMBER`'s with repetition), but many of them queued in
/// one transaction, or sent together, asked for as much as a client wanted:
/// twelve `SRANDMEMBER s -10000000` in one `MULTI` made 6 GB of replies, and
/// a node stopped by that allocation stops again on the same entry after
/// every restart, as does every other node. So each reply is charged as it
/// is made, in the entry's order, and one that does not fit in what is left
/// is replaced by an error saying that the command ran. The charge depends
/// on the replies alone: every node drops the same ones.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplyRoom {
    values: usize,
    bytes: usize,
}

impl ReplyRoom {
    /// The room of one entry.
    pub fn entry() -> ReplyRoom {
        ReplyRoom::new(ENTRY_REPLY_VALUES, ENTRY_REPLY_BYTES)
    }

    pub fn new(values: usize, bytes: usize) -> ReplyRoom {
        ReplyRoom { values, bytes }
    }

    /// `reply`, charged to the room, if it fits in what is left; otherwise
    /// an error in its place, charged nothing.
    pub fn take(&mut self, reply: Reply) -> Reply {
        let mut left = *self;
        if left.charge(&reply) {
            *self = left;
            reply
        } else {
            Reply::error(format!(
                "ERR the command ran, but its reply was dropped: the replies of commands applied together \
                 (a transaction, a pipeline, one log entry) may hold at most {ENTRY_REPLY_VALUES} values \
                 and {ENTRY_REPLY_BYTES} bytes"
            ))
        }
    }

    /// Takes `reply`'s values and bytes from the room; false (the room
    /// then undefined) as soon as they do not fit.
    fn charge(&mut self, reply: &Reply) -> bool {
        let Some(values) = self.values.checked_sub(1) else { return false };
        self.values = values;
        let bytes = match reply {
            Reply::Status(s) | Reply::Error(s) | Reply::Verbatim(s) | Reply::BigNumber(s) | Reply::DoubleText(s) => s.len(),
            Reply::Bulk(b) => b.len(),
            _ => 0,
        };
        let Some(bytes) = self.bytes.checked_sub(bytes) else { return false };
        self.bytes = bytes;
        match reply {
            Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => items.iter().all(|r| self.charge(r)),
            Reply::Map(pairs) | Reply::Pairs(pairs) | Reply::NestedMap(pairs) => {
                pairs.iter().all(|(k, v)| self.charge(k) && self.charge(v))
            }
            Reply::ScorePairs(pairs) => pairs.iter().all(|(member, _)| {
                match (self.values.checked_sub(2), self.bytes.checked_sub(member.len())) {
                    (Some(values), Some(bytes)) => {
                        (self.values, self.bytes) = (values, bytes);
                        true
                    }
                    _ => false,
                }
            }),
            _ => true,
        }
    }
}

/// Runs one client request of an entry; the reply, and whether it was
/// `PUBLISH` or `SPUBLISH`.
fn run_request(
    ks: &mut Keyspace,
    ctx: &mut ExecCtx,
    index: u64,
    origin: &Origin,
    request: &Request,
    room: &mut ReplyRoom,
) -> (Reply, bool) {
    match request {
        Request::Command(argv) => {
            // Only LOCK.ACQUIRE itself may wait; not one a script calls.
            if argv.first().is_some_and(|n| n.eq_ignore_ascii_case(b"lock.acquire")) {
                ctx.blocking_origin = Some((origin.client, origin.seq));
            }
            let reply = room.take(contain_panic(index, || command_name(argv), || execute_write(ks, ctx, argv)));
            ks.hand_off(ctx);
            (reply, argv.first().is_some_and(|n| is_publish(&String::from_utf8_lossy(n))))
        }
        Request::Transaction { watched, commands } => {
            // Each command's reply is charged to the room as it is made.
            let reply = contain_panic(index, || "exec", || transactions::exec(ks, ctx, watched, commands, room));
            // A panic may have left the undo record open.
            ks.keep_changes();
            ks.hand_off(ctx);
            (reply, false)
        }
        Request::Dequeue { key, owner, seq } => {
            (room.take(locks::dequeue(ks, ctx, &origin.client, *seq, key, owner)), false)
        }
        Request::Pipeline(commands) => {
            let mut replies = Vec::with_capacity(commands.len());
            for (i, argv) in commands.iter().enumerate() {
                if i > 0 {
                    // Each command creates keys with its own version (token).
                    ctx.version = ks.next_version(ctx.version);
                }
                let reply = match resolve(argv) {
                    Ok(spec) if pipelinable(spec) => {
                        let reply = contain_panic(index, || command_name(argv), || execute_write(ks, ctx, argv));
                        ks.hand_off(ctx);
                        reply
                    }
                    // Connections never send these; a pipeline
                    // from elsewhere gets an error for them.
                    Ok(spec) => Reply::error(format!("ERR '{}' cannot be pipelined", spec.name)),
                    Err(reply) => reply,
                };
                replies.push(room.take(reply));
            }
            (Reply::Array(replies), false)
        }
        Request::Acl(op) => (contain_panic(index, || "acl", || acl::apply_op(ks, op)), false),
        Request::AsUser { user, request } => {
            if matches!(**request, Request::AsUser { .. } | Request::Acl(_) | Request::Dequeue { .. }) {
                return (Reply::error("ERR this request cannot be run as a user"), false);
            }
            let perms = acl::perms_of(ks, user);
            let perms = (!perms.unrestricted()).then_some(perms);
            acl::with_user(perms, || run_request(ks, ctx, index, origin, request, room))
        }
        Request::OverMaxmemory(request) => {
            if matches!(**request, Request::OverMaxmemory(_) | Request::Acl(_) | Request::Dequeue { .. }) {
                return (Reply::error("ERR this request cannot be run over maxmemory"), false);
            }
            scripts::over_maxmemory(|| run_request(ks, ctx, index, origin, request, room))
        }
    }
}

/// The replies of an entry the operator skipped (`--skip-entry`, for an entry
/// that stops every node that applies it): an error for each command, and the
/// keyspace does not change.
pub fn skip(index: u64, proposal: &Proposal) -> Vec<Applied> {
    let error = || Applied {
        reply: Reply::error(format!("ERR log entry {index} was skipped by the operator (--skip-entry)")),
        events: Vec::new(),
        is_publish: false,
        repeated: false,
    };
    match &proposal.op {
        Op::Expire => vec![error()],
        Op::Commands(commands) => commands.iter().map(|_| error()).collect(),
    }
}

/// The command of an entry most likely to be the reason it failed: its first
/// script or transaction, else its first command. For crash reports.
pub fn suspect_command(proposal: &Proposal) -> &'static str {
    let Op::Commands(commands) = &proposal.op else { return "(expire)" };
    fn name(request: &Request) -> &'static str {
        match request {
            Request::Command(argv) => command_name(argv),
            Request::Transaction { .. } => "exec",
            Request::Pipeline(commands) => {
                commands.iter().find(|a| is_script(a)).or(commands.first()).map_or("(none)", |a| command_name(a))
            }
            Request::Dequeue { .. } => "lock.acquire",
            Request::Acl(_) => "acl",
            Request::AsUser { request, .. } | Request::OverMaxmemory(request) => name(request),
        }
    }
    // Runs for every entry: only the chosen command's name is looked up.
    fn risky(request: &Request) -> bool {
        match request {
            Request::Command(argv) => is_script(argv),
            Request::Transaction { .. } => true,
            Request::Pipeline(commands) => commands.iter().any(|a| is_script(a)),
            Request::Dequeue { .. } | Request::Acl(_) => false,
            Request::AsUser { request, .. } | Request::OverMaxmemory(request) => risky(request),
        }
    }
    let name = |cmd: &ClientCommand| name(&cmd.request);
    let risky = |cmd: &&ClientCommand| risky(&cmd.request);
    commands.iter().find(risky).or_else(|| commands.first()).map_or("(none)", name)
}

/// Whether applying `proposal` may keep a thread busy for long (milliseconds,
/// not microseconds): true unless every command in it is one Redis flags
/// `fast`, a `SET`, a lock script that runs without Lua, or a command whose
/// work is bounded by small values at its keys
/// ([`CommandSpec::bounded_by_keys`]). Decides only whether the apply first
/// hands the runtime's other tasks to another thread
/// (`raft::state_machine`), which costs a thread wake-up; never what is
/// applied, so nodes may judge it differently.
pub fn may_run_long(ks: &Keyspace, proposal: &Proposal) -> bool {
    fn request(ks: &Keyspace, r: &Request) -> bool {
        match r {
            Request::Command(argv) => may_run_long_command(ks, argv),
            Request::Transaction { commands, .. } | Request::Pipeline(commands) => {
                commands.iter().any(|argv| may_run_long_command(ks, argv))
            }
            Request::Dequeue { .. } => false,
            Request::Acl(_) => true,
            Request::AsUser { request: r, .. } | Request::OverMaxmemory(r) => request(ks, r),
        }
    }
    match &proposal.op {
        // Deletes every key due, however many.
        Op::Expire => true,
        Op::Commands(commands) => commands.iter().any(|c| request(ks, &c.request)),
    }
}

/// The most work ([`Value::weight`] summed over a command's keys, at least 1
/// a key) that a command [`CommandSpec::bounded_by_keys`] may have and still
/// run on the runtime's thread: 1,024 elements read, written or freed take tens to
/// hundreds of microseconds. Handing the other tasks to another thread
/// first costs a thread wake-up and a switch back, several times the
/// command itself on a small value (`LRANGE key 0 99` of a 600-element
/// list, one node, 50 clients: 29.9 µs of CPU each, Redis 10.6).
const QUICK_WEIGHT: usize = 1024;

/// [`may_run_long`] for one command; also for reads (`raft::Consensus`).
pub fn may_run_long_command(ks: &Keyspace, argv: &[Bytes]) -> bool {
    let Some(spec) = argv.first().and_then(|name| lookup(name)) else { return false };
    if fast_here(spec) || spec.name == "set" {
        return false;
    }
    if spec.bounded_by_keys || LINEAR_HERE.contains(&spec.name) {
        let now = ks.log_time();
        let mut weight = 0usize;
        for key in spec.keys(argv) {
            weight += ks.get(key, now).map_or(1, |e| e.value.weight().max(1));
            if weight > QUICK_WEIGHT {
                return true;
            }
        }
        return false;
    }
    if !matches!(spec.name, "eval" | "eval_ro" | "evalsha" | "evalsha_ro") {
        return true;
    }
    // A missing script or argument is an error reply: quick.
    script_of(ks, spec, argv).is_some_and(|(body, _)| !crate::scripting::runs_without_vm(body))
}

/// The script that an `EVAL` or `EVALSHA` (`spec`, or its read-only form)
/// runs: its argument, or the body cached for its SHA, with that SHA
/// (lowercased). `None` when the argument is missing or the SHA unknown
/// (the command then replies an error at once).
fn script_of<'a>(ks: &'a Keyspace, spec: &CommandSpec, argv: &'a [Bytes]) -> Option<(&'a [u8], Option<String>)> {
    let arg = argv.get(1)?;
    if spec.name.starts_with("evalsha") {
        let sha = String::from_utf8_lossy(arg).to_ascii_lowercase();
        return ks.script(&sha).map(|body| (&body[..], Some(sha)));
    }
    Some((&arg[..], None))
}

/// Whether the leader should propose `request` in a log entry of its own:
/// it runs a script not known to be light (see
/// [`crate::scripting::shares_entries`]) with `EVAL`, `EVALSHA` or their
/// read-only forms, or runs `FCALL`, `FCALL_RO` or `FUNCTION`, alone or in
/// a transaction or pipeline, or it is a transaction or pipeline with a
/// command that [`may_run_long_command`]. The scripts of an entry, and the
/// work of its commands on big values, share one budget
/// (`scripting::EntryBudget`).
pub fn proposed_alone(ks: &Keyspace, request: &Request) -> bool {
    let command = |argv: &Vec<Bytes>| {
        let Some(spec) = argv.first().and_then(|name| lookup(name)) else { return false };
        match spec.name {
            "fcall" | "fcall_ro" | "function" => true,
            // A missing script is an error reply: quick.
            "eval" | "eval_ro" | "evalsha" | "evalsha_ro" => script_of(ks, spec, argv)
                .is_some_and(|(body, sha)| !crate::scripting::shares_entries(body, sha.as_deref())),
            _ => false,
        }
    };
    match request {
        Request::Command(argv) => command(argv),
        // Many commands on big values may spend the entry's budget (their
        // work is charged to it too), where one alone cannot.
        Request::Transaction { commands, .. } | Request::Pipeline(commands) => {
            commands.iter().any(|argv| command(argv) || may_run_long_command(ks, argv))
        }
        Request::Dequeue { .. } | Request::Acl(_) => false,
        Request::AsUser { request, .. } | Request::OverMaxmemory(request) => proposed_alone(ks, request),
    }
}

/// Whether `argv` may add data: a command flagged `denyoom` (as in Redis's
/// table), or a script other than the lock scripts run without Lua (see
/// [`crate::scripting::runs_without_vm`]: a `GET`, then a `DEL` or a
/// `PEXPIRE`). Refused while the disk is nearly full (`storage::disk`).
pub fn may_add_data(ks: &Keyspace, argv: &[Bytes]) -> bool {
    let Some(spec) = argv.first().and_then(|name| lookup(name)) else { return false };
    if may_add_data_spec(spec, argv) {
        return true;
    }
    if !matches!(spec.name, "eval" | "evalsha") {
        return false;
    }
    // An unknown script is a `NOSCRIPT` error: it adds nothing.
    script_of(ks, spec, argv).is_some_and(|(body, _)| !crate::scripting::runs_without_vm(body))
}

/// Whether `argv` (resolved to `spec`) is a command Redis flags `denyoom`,
/// itself or its subcommand (`FUNCTION LOAD`, `XGROUP CREATE`).
pub(crate) fn may_add_data_spec(spec: &CommandSpec, argv: &[Bytes]) -> bool {
    if spec.flags.contains(&"denyoom") {
        return true;
    }
    let Some(sub) = argv.get(1) else { return false };
    redis_specs::SUBCOMMANDS.iter().any(|s| {
        s.flags.contains(&"denyoom")
            && s.name.split_once('|').is_some_and(|(c, n)| c == spec.name && n.as_bytes().eq_ignore_ascii_case(sub))
    })
}

/// Whether a node over its `maxmemory` refuses `argv` at once, as Redis
/// does: a command that may add data, a function or a script with flags
/// that neither reads only (`no-writes`) nor says `allow-oom`. A script
/// without flags runs, and only the commands it calls that may add data
/// are refused (see [`Request::OverMaxmemory`]); the lock scripts run
/// without Lua add nothing.
pub fn refused_over_maxmemory(ks: &Keyspace, argv: &[Bytes]) -> bool {
    let Some(spec) = argv.first().and_then(|name| lookup(name)) else { return false };
    if may_add_data_spec(spec, argv) {
        return true;
    }
    match spec.name {
        "eval" | "evalsha" => script_of(ks, spec, argv).is_some_and(|(body, _)| {
            functions::script_shebang(body).is_ok_and(|(flags, _)| !flags.compat && !flags.no_writes && !flags.allow_oom)
        }),
        "fcall" => functions::flags_of(ks, argv).is_some_and(|flags| !flags.no_writes && !flags.allow_oom),
        _ => false,
    }
}

/// [`may_add_data`] of any command of `request`.
pub fn request_may_add_data(ks: &Keyspace, request: &Request) -> bool {
    match request {
        Request::Command(argv) => may_add_data(ks, argv),
        Request::Transaction { commands, .. } | Request::Pipeline(commands) => commands.iter().any(|c| may_add_data(ks, c)),
        Request::AsUser { request, .. } | Request::OverMaxmemory(request) => request_may_add_data(ks, request),
        Request::Dequeue { .. } | Request::Acl(_) => false,
    }
}

/// Whether `request` has an `EVAL`-family command: a node over its
/// `maxmemory` sends such a request as [`Request::OverMaxmemory`].
pub fn request_runs_scripts(request: &Request) -> bool {
    match request {
        Request::Command(argv) => is_script(argv),
        Request::Transaction { commands, .. } | Request::Pipeline(commands) => commands.iter().any(|c| is_script(c)),
        Request::AsUser { request, .. } | Request::OverMaxmemory(request) => request_runs_scripts(request),
        Request::Dequeue { .. } | Request::Acl(_) => false,
    }
}

fn is_script(argv: &[Bytes]) -> bool {
    argv.first().is_some_and(|n| n.len() >= 4 && n[..4].eq_ignore_ascii_case(b"eval"))
}

/// The command's name, for logs (never its arguments: they may be secrets).
pub fn command_name(argv: &[Bytes]) -> &'static str {
    argv.first().and_then(|name| lookup(name)).map_or("(unknown)", |spec| spec.name)
}

/// Runs one command of an applied entry so that a panic in it (a bug here or
/// in a dependency) becomes an error reply instead of stopping the node and
/// leaving an entry that stops it again on every replay. Every node runs the
/// same code on the same input, so every node panics at the same point and
/// gives the same reply; whatever the command changed before it panicked is
/// kept, the same everywhere. The panic itself is logged by the panic hook.
fn contain_panic(index: u64, name: impl FnOnce() -> &'static str, run: impl FnOnce() -> Reply) -> Reply {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(reply) => reply,
        Err(_) => {
            let name = name();
            tracing::error!(index, command = name, "a command panicked while being applied; it replied an error");
            Reply::error(format!("ERR internal error while applying '{name}' (log entry {index}); the server logged it"))
        }
    }
}

/// Runs one command as part of an applied entry (or of a script).
pub(crate) fn execute_write(ks: &mut Keyspace, ctx: &mut ExecCtx, argv: &[Bytes]) -> Reply {
    match resolve(argv) {
        Err(reply) => reply,
        Ok(spec) => {
            let charged = charged_for_work(spec);
            if charged && crate::scripting::entry_spent() {
                return Reply::error(ENTRY_SPENT);
            }
            // Charged once it ran, a command naming one big key many times
            // would first run for hours (64,000 repeats of a 1 M-member set
            // in one SUNIONSTORE): it runs only if its work fits what is left.
            if charged
                && repeats_a_key(spec, argv)
                && crate::scripting::entry_left().is_some_and(|left| work_of(ks, spec, argv) > left)
            {
                return Reply::error(ENTRY_SPENT);
            }
            let reply = match spec.handler {
                Handler::Write(f) => run_write(f, spec, ks, ctx, argv),
                Handler::Read(f) => {
                    let read = ctx.read_ctx();
                    f(ks, &read, Args::new(argv)).unwrap_or_else(Reply::from)
                }
                Handler::Local => Reply::error(format!("ERR '{}' cannot be replicated", spec.name)),
            };
            if charged {
                crate::scripting::charge_entry(work_of(ks, spec, argv));
            }
            reply
        }
    }
}

/// The reply of a command not run because its log entry's budget was spent.
const ENTRY_SPENT: &str = "ERR this log entry's budget of 50000000 instructions (its scripts, and its \
    commands' work on big values) is spent; this command did not run";

/// Commands Redis flags `fast` that take time here in proportion to the
/// value at their key: `APPEND` copies the string, `SPOP` and `ZPOPMIN`
/// list the members, `ZRANK` and `ZCOUNT` count them, `XAUTOCLAIM` scans up
/// to ten times its `COUNT` of pending entries. A transaction of
/// 200 `APPEND`s to a 32 MiB string held every node's apply for 18 s (and
/// would again at every replay).
const LINEAR_HERE: &[&str] = &[
    "append", "spop", "zpopmin", "zpopmax", "bzpopmin", "bzpopmax", "zrank", "zrevrank", "zcount", "zlexcount", "xautoclaim",
];

/// Whether a command is quick whatever its key holds: Redis flags it `fast`
/// and it is not one of [`LINEAR_HERE`].
fn fast_here(spec: &CommandSpec) -> bool {
    spec.flags.contains(&"fast") && !LINEAR_HERE.contains(&spec.name)
}

/// Whether `argv` names one key twice or more (`SUNIONSTORE d s s s ...`):
/// its work is then the key's size times the repeats, which its arguments
/// alone do not show.
fn repeats_a_key(spec: &CommandSpec, argv: &[Bytes]) -> bool {
    let mut seen = std::collections::HashSet::new();
    spec.keys(argv).any(|k| !seen.insert(&k[..]))
}

/// Whether a command's work is charged to its log entry's budget (see
/// [`work_of`]): every command but the quick ones ([`fast_here`]), `SET`,
/// the `LOCK.*` commands (each O(1) or O(log n)) and the scripts (charged by
/// their own instructions).
pub(crate) fn charged_for_work(spec: &CommandSpec) -> bool {
    !(fast_here(spec)
        || spec.name == "set"
        || spec.name.starts_with("lock.")
        || spec.name.starts_with("eval")
        || spec.name.starts_with("fcall"))
}

/// The work a command did (for [`charged_for_work`] commands), in script
/// instructions, from what its keys hold once it ran: a string's bytes / 16
/// (as a script's `redis.call` arguments are charged), 4 per element of a
/// container, `LCS` the product of its strings' lengths / 16, and a command
/// without keys that walks the keyspace (`KEYS`, `SCAN`, `FLUSHALL`) 1 per
/// key. Its entry's commands and scripts share one budget
/// (`scripting::EntryBudget`); before it, a transaction of sixty
/// `SETRANGE key 67108764 x` (3 KB) built 3.8 GB on every node at every
/// replay, and a script calling `LCS` on two 4 KB strings in a loop would
/// have held every node for days. Depends only on the keyspace: the same on
/// every node.
pub(crate) fn work_of(ks: &Keyspace, spec: &CommandSpec, argv: &[Bytes]) -> u64 {
    let now = ks.log_time();
    let size = |key: &Bytes| -> u64 {
        ks.get(key, now).map_or(0, |e| match &e.value {
            crate::keyspace::Value::Str(s) => s.as_slice().len() as u64 / 16,
            other => other.weight() as u64 * 4,
        })
    };
    if spec.name == "lcs" {
        let mut keys = spec.keys(argv);
        let mut len = || {
            keys.next().and_then(|k| ks.get(k, now)).map_or(0, |e| match &e.value {
                crate::keyspace::Value::Str(s) => s.as_slice().len() as u64,
                _ => 0,
            })
        };
        return len().saturating_mul(len()) / 16;
    }
    if matches!(spec.name, "keys" | "scan" | "flushall" | "flushdb") {
        return ks.len(now) as u64;
    }
    if spec.name == "randomkey" {
        // It walks to a random key among at most this many.
        return (ks.len(now) as u64).min(100_000);
    }
    if let Some(elements) = streams::work(ks, now, spec.name, argv) {
        return elements.saturating_mul(4);
    }
    let named: u64 = spec.keys(argv).map(size).sum();
    if matches!(spec.name, "sort" | "sort_ro") {
        return named.saturating_add(sort::pattern_work(ks, now, argv));
    }
    named
}

/// The connection commands that mean the same inside a script or a
/// transaction (`PING`, `ECHO`); `None` for every other command.
pub(crate) fn execute_local(argv: &[Bytes]) -> Option<Reply> {
    let name = argv.first()?;
    if name.eq_ignore_ascii_case(b"ping") {
        return Some(match argv.len() {
            1 => Reply::Status("PONG".into()),
            2 => Reply::Bulk(argv[1].clone()),
            _ => arity_error("ping"),
        });
    }
    if name.eq_ignore_ascii_case(b"echo") {
        return Some(if argv.len() == 2 { Reply::Bulk(argv[1].clone()) } else { arity_error("echo") });
    }
    None
}

/// Runs a write handler and records, for `WATCH`, that it wrote its keys.
pub(super) fn run_write(
    f: fn(&mut Keyspace, &mut ExecCtx, Args) -> CmdResult,
    spec: &CommandSpec,
    ks: &mut Keyspace,
    ctx: &mut ExecCtx,
    argv: &[Bytes],
) -> Reply {
    // The keys it may create that do not exist yet, for the `new` event.
    // (A script's own writes report theirs.)
    let scripted = spec.name.starts_with("eval") || spec.name.starts_with("fcall");
    let absent: Vec<&Bytes> = if NEW_KEY_EVENTS.load(std::sync::atomic::Ordering::Relaxed) && !scripted {
        acl::key_access(spec, argv)
            .into_iter()
            .filter(|(key, access)| access & crate::keyspace::acl::KEY_WRITE != 0 && !ks.contains(key, ctx.log_time))
            .map(|(key, _)| key)
            .collect()
    } else {
        Vec::new()
    };
    let events_before = ctx.events.len();
    let reply = f(ks, ctx, Args::new(argv)).unwrap_or_else(Reply::from);
    if !absent.is_empty() {
        report_new_keys(ks, ctx, absent, events_before);
    }
    // A refused lock attempt wrote nothing (as in Redis, a WATCH on its key
    // holds; and so it is when the leader refuses it without the log).
    if reply == Reply::Nil && is_lock_attempt(argv) {
        return reply;
    }
    // The keys it writes; not a STORE's sources, nor a script's declared
    // keys (the writes inside the script count on their own).
    if !spec.name.starts_with("eval") {
        for (key, access) in acl::key_access(spec, argv) {
            if access & crate::keyspace::acl::KEY_WRITE != 0 {
                ks.touch(key, ctx.version);
            }
        }
    }
    reply
}

/// Whether any node of this process reports the `new` keyspace event
/// (`notify-keyspace-events` with `n`): only then does a write look for
/// the keys it creates. A node's own setting, not replicated state: it
/// decides only which notifications are made, never what is applied.
pub static NEW_KEY_EVENTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Adds a `new` event for each of `absent` that the command created, as
/// Redis does when a key is added: before the command's first event about
/// that key (`new`, then `set`; `MSET`'s keys one after the other).
fn report_new_keys(ks: &Keyspace, ctx: &mut ExecCtx, absent: Vec<&Bytes>, events_before: usize) {
    let mut seen = std::collections::HashSet::new();
    for key in absent {
        if !seen.insert(key) || !ks.contains(key, ctx.log_time) {
            continue;
        }
        let new = Event::Key { class: 'n', name: "new", key: key.clone() };
        let first = ctx.events[events_before..]
            .iter()
            .position(|e| matches!(e, Event::Key { key: k, .. } if k == key))
            .map(|at| events_before + at);
        match first {
            Some(at) => ctx.events.insert(at, new),
            None => ctx.events.push(new),
        }
    }
}

/// The key `argv` tries to lock, if it is a lock attempt that answers nil
/// when refused (and only then): `LOCK.ACQUIRE`, with or without `WAIT`, and
/// `SET` with `NX` and without `GET` (with `GET`, nil means the key was free
/// and is now set).
pub fn attempted_lock(argv: &[Bytes]) -> Option<&Bytes> {
    let name = argv.first()?;
    let attempt = if name.eq_ignore_ascii_case(b"lock.acquire") {
        argv.len() == 4 || argv.len() == 6
    } else {
        name.eq_ignore_ascii_case(b"set")
            && argv.len() > 3
            && argv[3..].iter().any(|a| a.eq_ignore_ascii_case(b"nx"))
            && !argv[3..].iter().any(|a| a.eq_ignore_ascii_case(b"get"))
    };
    attempt.then(|| &argv[1])
}

/// Whether `argv` only tries to take a lock, so that refused it changes
/// nothing and replies nil: an [`attempted_lock`] without `WAIT` (which
/// queues its owner when refused).
pub fn is_lock_attempt(argv: &[Bytes]) -> bool {
    attempted_lock(argv).is_some() && !(argv[0].eq_ignore_ascii_case(b"lock.acquire") && argv.len() == 6)
}

/// Whether `argv` is a `LOCK.ACQUIRE ... WAIT` that would queue behind
/// another owner's lock, as `ks` stands (at its own log time).
pub fn queues_behind_holder(ks: &Keyspace, argv: &[Bytes]) -> bool {
    argv.len() == 6
        && argv[0].eq_ignore_ascii_case(b"lock.acquire")
        && argv[4].eq_ignore_ascii_case(b"wait")
        && ks.get(&argv[1], ks.log_time()).is_some_and(|e| e.owner_name() != &argv[2][..])
}

/// Whether the lock attempt `argv` ([`is_lock_attempt`]) might be refused,
/// as `ks` stands: its key is live (held by another owner, for
/// `LOCK.ACQUIRE`) or has waiters. A lookup, for the leader to decide
/// whether [`refused`] (which runs the command) is worth a ReadIndex round;
/// an attempt that looks free is proposed.
pub fn may_be_refused(ks: &Keyspace, argv: &[Bytes]) -> bool {
    if !is_lock_attempt(argv) {
        return false;
    }
    let key = &argv[1];
    let acquire = argv[0].eq_ignore_ascii_case(b"lock.acquire");
    let held = ks.get(key, ks.log_time()).is_some_and(|e| !acquire || e.owner_name() != &argv[2][..]);
    held || ks.waiters().has(key)
}

/// Whether the lock attempt `argv` ([`is_lock_attempt`]) would be refused
/// (reply nil) if applied to `ks` at `ctx.now`: it is run on a copy (O(1),
/// the maps are persistent), which is then dropped.
pub fn refused(ks: &Keyspace, argv: &[Bytes], ctx: &ReadCtx) -> bool {
    if !is_lock_attempt(argv) {
        return false;
    }
    let run = || {
        let mut scratch = ks.clone();
        let version = scratch.next_version(0);
        let mut ctx = ExecCtx::new(version, ctx.now, ctx.unix_ms);
        execute_write(&mut scratch, &mut ctx, argv) == Reply::Nil
    };
    // A panic here is a bug; the command then goes through the log, where
    // it is contained (see `contain_panic`).
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or(false)
}

/// Runs a read-only command against the keyspace at log time `ctx.now`.
pub fn execute_read(ks: &Keyspace, argv: &[Bytes], ctx: &ReadCtx) -> Reply {
    match resolve(argv) {
        Err(reply) => reply,
        Ok(spec) => match spec.handler {
            Handler::Read(f) => f(ks, ctx, Args::new(argv)).unwrap_or_else(Reply::from),
            _ => Reply::error(format!("ERR '{}' is not a read command", spec.name)),
        },
    }
}

/// Looks a command up and checks its arity, with Redis's error texts.
pub fn resolve(argv: &[Bytes]) -> Result<&'static CommandSpec, Reply> {
    let name = argv.first().ok_or_else(|| Reply::error("ERR empty command"))?;
    let spec = lookup(name).ok_or_else(|| unknown_command(argv))?;
    if !spec.arity_ok(argv.len()) {
        return Err(arity_error(spec.name));
    }
    Ok(spec)
}

pub fn arity_error(name: &str) -> Reply {
    Reply::error(format!("ERR wrong number of arguments for '{}' command", name.to_ascii_lowercase()))
}

/// `ERR unknown command 'x', with args beginning with: 'a' 'b' `, as Redis.
pub fn unknown_command(argv: &[Bytes]) -> Reply {
    let shown = |b: &Bytes| String::from_utf8_lossy(&b[..b.len().min(128)]).into_owned();
    let mut text = format!("ERR unknown command '{}', with args beginning with: ", shown(&argv[0]));
    for arg in argv.iter().skip(1) {
        if text.len() > 256 {
            break;
        }
        text.push_str(&format!("'{}' ", shown(arg)));
    }
    Reply::Error(text)
}

/// Parses an expiry given in `unit_ms` units relative to now into log time.
fn relative_expiry(ctx: &ExecCtx, amount: i64, unit_ms: i64, cmd: &'static str) -> Result<LogTime, CmdError> {
    let invalid = || CmdError::InvalidExpire(cmd);
    let ms = amount.checked_mul(unit_ms).ok_or_else(invalid)?;
    // As Redis: the time it comes to, in Unix milliseconds (the entry's
    // wall clock, the same on every node), must fit a signed 64-bit count.
    i64::try_from(ctx.unix_ms).ok().and_then(|now| now.checked_add(ms)).ok_or_else(invalid)?;
    let at = (ctx.log_time as i64).checked_add(ms).ok_or_else(invalid)?;
    Ok(at.max(0) as LogTime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn entry(requests: Vec<Request>) -> Proposal {
        let commands = requests.into_iter().enumerate().map(|(i, request)| ClientCommand { origin: Origin::test(i as u64), request });
        Proposal { log_time: 1, unix_ms: 0, op: Op::Commands(commands.collect()) }
    }

    const RELEASE: &str = "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

    fn dropped(reply: &Reply) -> bool {
        matches!(reply, Reply::Error(e) if e.starts_with("ERR the command ran, but its reply was dropped"))
    }

    #[test]
    fn a_reply_is_kept_while_it_fits_in_what_is_left_of_the_room() {
        let bulk = |s: &str| Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()));
        let mut room = ReplyRoom::new(5, 10);
        assert_eq!(room.take(Reply::Int(1)), Reply::Int(1));
        let two = Reply::Array(vec![bulk("abcd"), bulk("efgh")]);
        assert_eq!(room.take(two.clone()), two, "3 values and 8 bytes fit in 4 and 10");
        // One value and two bytes left.
        assert!(dropped(&room.take(bulk("abc"))), "3 bytes kept where 2 were left");
        assert!(dropped(&room.take(Reply::Array(vec![Reply::Nil]))), "2 values kept where 1 was left");
        assert_eq!(room.take(bulk("ab")), bulk("ab"), "a refused reply took room");
        assert!(dropped(&room.take(Reply::Nil)), "a value kept where none was left");
        // Members with scores are two values each.
        let pairs = |n: usize| Reply::ScorePairs((0..n).map(|i| (Bytes::from(vec![b'm'; i]), 1.0)).collect());
        assert_eq!(ReplyRoom::new(5, 100).take(pairs(2)), pairs(2));
        assert!(dropped(&ReplyRoom::new(5, 100).take(pairs(3))));
        assert!(dropped(&ReplyRoom::new(100, 2).take(pairs(3))), "3 bytes of members kept where 2 were left");
        // Maps and strings of every kind count.
        let map = Reply::Map(vec![(bulk("k"), Reply::Status("OK".into()))]);
        assert_eq!(ReplyRoom::new(3, 3).take(map.clone()), map);
        assert!(dropped(&ReplyRoom::new(2, 3).take(map.clone())));
        assert!(dropped(&ReplyRoom::new(3, 2).take(map)));
    }

    #[test]
    fn commands_redis_calls_fast_that_are_linear_here_and_repeated_keys_are_bounded() {
        let mut ks = Keyspace::default();
        let mut ctx = ExecCtx::new(1, 0, 0);
        let mut zadd = vec!["ZADD".to_string(), "z".to_string()];
        let mut sadd = vec!["SADD".to_string(), "s".to_string()];
        for i in 0..100_000 {
            zadd.extend([i.to_string(), format!("m{i}")]);
            sadd.push(format!("m{i}"));
        }
        let owned = |words: &[String]| words.iter().map(|w| Bytes::from(w.clone())).collect::<Vec<_>>();
        assert_eq!(execute_write(&mut ks, &mut ctx, &owned(&zadd)), Reply::Int(100_000));
        assert_eq!(execute_write(&mut ks, &mut ctx, &owned(&sadd)), Reply::Int(100_000));
        assert_eq!(execute_write(&mut ks, &mut ctx, &argv(&["SETRANGE", "big", "16777215", "x"])), Reply::Int(16 << 20));
        let spent = |r: &Reply| matches!(r, Reply::Error(e) if e.as_str() == ENTRY_SPENT);
        // Each ZCOUNT walks 100,000 members (400,000 of the 50,000,000);
        // each APPEND copies 16 MiB (1,048,576); each RANDOMKEY walks up to
        // the 20,000 keys there are.
        let mut mset = vec!["MSET".to_string()];
        (0..19_997).for_each(|i| mset.extend([format!("k{i}"), "v".to_string()]));
        assert_eq!(execute_write(&mut ks, &mut ctx, &owned(&mset)), Reply::ok());
        let checks = [(vec!["ZCOUNT", "z", "-inf", "+inf"], 125), (vec!["APPEND", "big", "y"], 48), (vec!["RANDOMKEY"], 2500)];
        for (index, (command, fit)) in (10..).zip(checks) {
            let queued = vec![argv(&command); fit + 10];
            let transaction = Request::Transaction { watched: vec![], commands: queued };
            let one = ClientCommand { origin: Origin::test(index), request: transaction };
            let applied = apply(&mut ks, index, &Proposal { log_time: 1, unix_ms: 0, op: Op::Commands(vec![one]) });
            let Reply::Array(replies) = &applied[0].reply else { panic!("{:?}", applied[0].reply) };
            let ran = replies.iter().take_while(|r| !spent(r)).count();
            assert_eq!(ran, fit, "{command:?}: {:?}", &replies[..3]);
            assert!(replies[ran..].iter().all(spent), "{command:?}");
        }
        // One SUNIONSTORE naming the set 200 times (80,000,000 of work) does
        // not run at all; naming it 100 times (40,000,000) runs.
        let union = |times: usize| {
            let mut words = vec!["SUNIONSTORE", "d"];
            words.extend(std::iter::repeat("s").take(times));
            Request::Command(argv(&words))
        };
        let one = |index: u64, request: Request| Proposal {
            log_time: 1,
            unix_ms: 0,
            op: Op::Commands(vec![ClientCommand { origin: Origin::test(index), request }]),
        };
        let applied = apply(&mut ks, 20, &one(20, union(200)));
        assert!(spent(&applied[0].reply), "{:?}", applied[0].reply);
        let applied = apply(&mut ks, 21, &one(21, union(100)));
        assert_eq!(applied[0].reply, Reply::Int(100_000));
    }

    #[test]
    fn a_sort_may_not_build_or_return_more_than_its_bounds() {
        let mut ks = Keyspace::default();
        let mut ctx = ExecCtx::new(1, 0, 0);
        let element = "e".repeat(1 << 20);
        assert_eq!(execute_write(&mut ks, &mut ctx, &argv(&["RPUSH", "src", &element])), Reply::Int(1));
        // 600 copies of a 1 MiB element: past the 512 MiB a SORT may return
        // or store (they would share one buffer, and no DUMP or snapshot
        // could hold them).
        let mut words = vec!["SORT", "src", "BY", "nosort"];
        (0..600).for_each(|_| words.extend(["GET", "#"]));
        words.extend(["STORE", "dst"]);
        let reply = execute_write(&mut ks, &mut ctx, &argv(&words));
        assert_eq!(reply, Reply::error("ERR SORT would return more than 536870912 bytes"));
        assert_eq!(execute_write(&mut ks, &mut ctx, &argv(&["EXISTS", "dst"])), Reply::Int(0));
        // 500 copies fit.
        let mut words = vec!["SORT", "src", "BY", "nosort"];
        (0..500).for_each(|_| words.extend(["GET", "#"]));
        words.extend(["STORE", "dst"]);
        assert_eq!(execute_write(&mut ks, &mut ctx, &argv(&words)), Reply::Int(500));
        // 1,100 GET patterns with the 1 MiB element in place of their `*`:
        // over 1 GiB of key names.
        let mut words = vec!["SORT", "src", "BY", "nosort"];
        (0..1100).for_each(|_| words.extend(["GET", "k*"]));
        let reply = execute_write(&mut ks, &mut ctx, &argv(&words));
        assert!(matches!(&reply, Reply::Error(e) if e.contains("bytes of key names")), "{reply:?}");
    }

    #[test]
    fn the_work_of_an_entrys_commands_on_big_values_is_bounded_with_its_scripts() {
        // A 16 MiB string: each write to it costs 1,048,576 of the entry's
        // 50,000,000 (a byte in 16), so 48 run (the last overshoots), and
        // nothing charged runs after them. (Sixty `SETRANGE k<i> 67108764 x` in one MULTI built 3.8 GB.)
        let mut ks = Keyspace::default();
        let mut ctx = ExecCtx::new(1, 0, 0);
        assert_eq!(execute_write(&mut ks, &mut ctx, &argv(&["SETRANGE", "big", "16777215", "x"])), Reply::Int(16 << 20));
        let spent = |r: &Reply| matches!(r, Reply::Error(e) if e.as_str() == ENTRY_SPENT);
        assert!(ENTRY_SPENT.contains(&format!(" {} ", crate::scripting::INSTRUCTION_BUDGET)), "{ENTRY_SPENT}");
        let mut queued = vec![argv(&["SETRANGE", "big", "0", "y"]); 60];
        queued.push(argv(&["SET", "plain", "1"]));
        queued.push(argv(&["SETRANGE", "grown", "10", "x"]));
        queued.push(argv(&["EVAL", "redis.call('set', 'scripted', '1') return 1", "0"]));
        let transaction = Request::Transaction { watched: vec![], commands: queued };
        let applied = apply(&mut ks, 2, &entry(vec![transaction.clone()]));
        let Reply::Array(replies) = &applied[0].reply else { panic!("{:?}", applied[0].reply) };
        let ran = replies[..60].iter().take_while(|r| **r == Reply::Int(16 << 20)).count();
        assert_eq!(ran, 48, "{:?}", &replies[ran]);
        assert!(replies[ran..60].iter().all(spent), "{:?}", &replies[ran]);
        // SET is never charged, nor refused; the others did not run.
        assert_eq!(replies[60], Reply::ok());
        assert!(spent(&replies[61]));
        assert!(matches!(&replies[62], Reply::Error(e) if e.contains("budget of 0 Lua instructions")), "{:?}", replies[62]);
        let mut read = ExecCtx::new(ks.next_version(10), 2, 0);
        for (key, present) in [("plain", 1), ("grown", 0), ("scripted", 0)] {
            assert_eq!(execute_write(&mut ks, &mut read, &argv(&["EXISTS", key])), Reply::Int(present), "{key}");
        }
        // The next entry has a budget of its own; a script calling the same
        // command in a loop stops at it, at the same call every time.
        let looped = "local n = 0 while true do redis.call('setrange', 'big', 0, 'z') n = n + 1 redis.call('set', 'calls', n) end";
        for index in [3, 4] {
            let eval = Request::Command(argv(&["EVAL", looped, "0"]));
            let one = ClientCommand { origin: Origin::test(index), request: eval };
            let applied = apply(&mut ks, index, &Proposal { log_time: 3, unix_ms: 0, op: Op::Commands(vec![one]) });
            assert!(matches!(&applied[0].reply, Reply::Error(e) if e.contains("budget of 50000000")), "{:?}", applied[0].reply);
            let mut read = ExecCtx::new(ks.next_version(10), 3, 0);
            assert_eq!(execute_write(&mut ks, &mut read, &argv(&["GET", "calls"])), Reply::Bulk(Bytes::from_static(b"47")));
        }
    }

    #[test]
    fn the_replies_of_one_entry_are_bounded_and_the_commands_still_run() {
        // Twelve `SRANDMEMBER s -10000000` queued in one MULTI made 6 GB of
        // replies on every node, which stopped each of them on the same
        // entry at every restart. Here with 1 KiB members: each reply
        // repeats 410 MB of strings, three pass the entry's 1 GiB.
        let mut ks = Keyspace::default();
        let mut ctx = ExecCtx::new(1, 0, 0);
        let member = "m".repeat(1024);
        assert_eq!(execute_write(&mut ks, &mut ctx, &argv(&["SADD", "s", &member])), Reply::Int(1));
        let draw = || argv(&["SRANDMEMBER", "s", "-400000"]);
        let transaction = |commands| Request::Transaction { watched: vec![], commands };
        let drawn = |reply: &Reply| matches!(reply, Reply::Array(items) if items.len() == 400_000);
        let entry = |log_time: LogTime, requests: Vec<(u64, Request)>| {
            let commands = requests.into_iter().map(|(n, request)| ClientCommand { origin: Origin::test(n), request });
            Proposal { log_time, unix_ms: 0, op: Op::Commands(commands.collect()) }
        };
        let queued = vec![draw(), argv(&["SET", "after", "1"]), draw(), draw(), argv(&["SET", "after", "2"])];
        let applied = apply(&mut ks, 2, &entry(2, vec![(1, transaction(queued))]));
        let Reply::Array(replies) = &applied[0].reply else { panic!("{:?}", applied[0].reply) };
        assert!(drawn(&replies[0]) && drawn(&replies[2]), "{:?}", &replies[0]);
        assert_eq!(replies[1], Reply::ok());
        assert!(dropped(&replies[3]), "{:?}", &replies[3]);
        assert_eq!(replies[4], Reply::ok());
        // The command whose reply was dropped, and those after it, ran.
        let read = |ks: &mut Keyspace, key: &str| {
            let mut ctx = ExecCtx::new(ks.next_version(100), 2, 0);
            execute_write(ks, &mut ctx, &argv(&["GET", key]))
        };
        assert_eq!(read(&mut ks, "after"), Reply::Bulk(Bytes::from_static(b"2")));
        // The room is the entry's: another client's command after it, in
        // the same entry, is charged to what is left.
        let last = Request::Command(argv(&["SET", "last", "2"]));
        let applied = apply(&mut ks, 3, &entry(3, vec![(2, transaction(vec![draw(), draw()])), (3, Request::Command(draw())), (4, last)]));
        assert!(matches!(&applied[0].reply, Reply::Array(r) if drawn(&r[0]) && drawn(&r[1])));
        assert!(dropped(&applied[1].reply));
        assert_eq!(applied[2].reply, Reply::ok());
        assert_eq!(read(&mut ks, "last"), Reply::Bulk(Bytes::from_static(b"2")));
        // Each entry has a room of its own.
        let applied = apply(&mut ks, 4, &entry(4, (5..8).map(|n| (n, Request::Command(draw()))).collect()));
        assert!(drawn(&applied[0].reply) && drawn(&applied[1].reply) && dropped(&applied[2].reply));
        // A retry gets the reply kept for it: the error.
        let applied = apply(&mut ks, 5, &entry(5, vec![(7, Request::Command(draw()))]));
        assert!(applied[0].repeated && dropped(&applied[0].reply));
        // Pipelined writes are charged one by one: a 60 MiB string read
        // back by 18 GETEX is 1,080 MiB of replies (shared, here).
        let mut ctx = ExecCtx::new(ks.next_version(100), 5, 0);
        assert_eq!(execute_write(&mut ks, &mut ctx, &argv(&["SETRANGE", "big", "62914559", "x"])), Reply::Int(62914560));
        let reads = vec![argv(&["GETEX", "big"]); 18];
        let applied = apply(&mut ks, 6, &entry(6, vec![(8, Request::Pipeline(reads))]));
        let Reply::Array(replies) = &applied[0].reply else { panic!("{:?}", applied[0].reply) };
        assert!(replies[..17].iter().all(|r| matches!(r, Reply::Bulk(b) if b.len() == 62914560)));
        assert!(dropped(&replies[17]), "{:?}", &replies[17]);
    }

    #[test]
    fn only_commands_that_may_run_long_are_judged_long() {
        let mut ks = Keyspace::default();
        let sha = crate::scripting::sha1hex(RELEASE.as_bytes());
        let one = |ks: &Keyspace, words: &[&str]| may_run_long(ks, &entry(vec![Request::Command(argv(words))]));
        // The lock path: microseconds each.
        for quick in [
            &["SET", "k", "v", "NX", "PX", "1000"][..],
            &["LOCK.ACQUIRE", "k", "o", "1000"],
            &["LOCK.RELEASE", "k", "o", "1"],
            &["INCR", "n"],
            &["EVAL", RELEASE, "1", "k", "v"],
            &["NOSUCHCOMMAND"],
            // Not cached yet: a NOSCRIPT error.
            &["EVALSHA", &sha, "1", "k", "v"],
        ] {
            assert!(!one(&ks, quick), "{quick:?} judged long");
        }
        for slow in [
            &["EVAL", "while true do end", "0"][..],
            &["KEYS", "*"],
            &["FLUSHALL"],
            // Counts and offsets given as arguments, whatever the value.
            &["SRANDMEMBER", "a", "-100000000"],
            &["SETRANGE", "a", "60000000", "x"],
            &["HSCAN", "a", "0", "MATCH", "*x*"],
        ] {
            assert!(one(&ks, slow), "{slow:?} judged quick");
        }
        // Commands bounded by the values at their keys: quick while those
        // are small, long once they are big (or are many keys).
        let mut ctx = ExecCtx::new(1, 0, 0);
        let mut push = vec!["RPUSH".to_string(), "small".into()];
        push.extend((0..100).map(|i| i.to_string()));
        let push: Vec<&str> = push.iter().map(|s| s.as_str()).collect();
        assert_eq!(execute_write(&mut ks, &mut ctx, &argv(&push)), Reply::Int(100));
        let mut push = vec!["SADD".to_string(), "big".into()];
        push.extend((0..=QUICK_WEIGHT).map(|i| i.to_string()));
        let push: Vec<&str> = push.iter().map(|s| s.as_str()).collect();
        assert_eq!(execute_write(&mut ks, &mut ctx, &argv(&push)), Reply::Int(QUICK_WEIGHT as i64 + 1));
        for quick in [
            &["DEL", "a", "b"][..],
            &["DEL", "small"],
            &["LRANGE", "small", "0", "-1"],
            &["LRANGE", "missing", "0", "-1"],
            &["SUNIONSTORE", "d", "a", "b"],
            &["HGETALL", "small"],
        ] {
            assert!(!one(&ks, quick), "{quick:?} judged long");
        }
        let many_keys: Vec<String> = std::iter::once("DEL".to_string()).chain((0..=QUICK_WEIGHT).map(|i| format!("k{i}"))).collect();
        let many_keys: Vec<&str> = many_keys.iter().map(|s| s.as_str()).collect();
        for slow in [&["DEL", "big"][..], &["SMEMBERS", "big"], &["SUNIONSTORE", "d", "small", "big"], &many_keys] {
            assert!(one(&ks, slow), "{:?} judged quick", &slow[..slow.len().min(3)]);
        }
        assert!(!may_run_long(&ks, &entry(vec![Request::Transaction { watched: vec![], commands: vec![argv(&["LRANGE", "small", "0", "-1"])] }])));
        assert!(may_run_long(&ks, &entry(vec![Request::Transaction { watched: vec![], commands: vec![argv(&["SMEMBERS", "big"])] }])));
        // EVALSHA is judged by the cached body it names, whatever the case of its SHA.
        ks.add_script(sha.clone(), Bytes::from_static(RELEASE.as_bytes()));
        assert!(!one(&ks, &["EVALSHA", &sha.to_uppercase(), "1", "k", "v"]));
        let loop_sha = crate::scripting::sha1hex(b"while true do end");
        ks.add_script(loop_sha.clone(), Bytes::from_static(b"while true do end"));
        assert!(one(&ks, &["EVALSHA", &loop_sha, "0"]));
        // One slow command makes the whole entry long, wherever it is.
        let quick = Request::Command(argv(&["SET", "a", "1"]));
        let slow = Request::Command(argv(&["KEYS", "*"]));
        assert!(!may_run_long(&ks, &entry(vec![quick.clone(), quick.clone()])));
        assert!(may_run_long(&ks, &entry(vec![quick.clone(), slow.clone()])));
        assert!(may_run_long(&ks, &entry(vec![Request::Pipeline(vec![argv(&["SET", "a", "1"]), argv(&["KEYS", "*"])])])));
        assert!(may_run_long(&ks, &entry(vec![Request::AsUser { user: "u".into(), request: Box::new(slow) }])));
        assert!(!may_run_long(&ks, &entry(vec![Request::AsUser { user: "u".into(), request: Box::new(quick) }])));
        // Expiry deletes every key that is due, however many.
        assert!(may_run_long(&ks, &Proposal { log_time: 1, unix_ms: 0, op: Op::Expire }));
    }
}
