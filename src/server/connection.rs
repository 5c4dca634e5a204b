//! One client connection: framing, dispatch through the command table, the
//! connection-local commands (HELLO, CLIENT, SUBSCRIBE, ...), RESP2 subscribed
//! mode and RESP3 pushes, and pipelining (every request already received is
//! answered before one write to the socket).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures_util::{FutureExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc, Notify};
use tokio_util::codec::FramedRead;

use super::hub::{format_notify_flags, parse_notify_flags, PushMsg, Subscriber};
use super::info::{self, REDIS_VERSION};
use super::Node;
use crate::commands::{
    self, arity_error, command_docs, command_info, unknown_command, CommandSpec, Handler, Request, COMMANDS,
};
use crate::protocol::{encode_reply, parse_i64, ProtocolError, Reply, RequestCodec};

/// Write buffered replies once they pass this size, even mid-pipeline.
const FLUSH_AT: usize = 256 * 1024;
/// Most pipelined writes sent to the leader as one request.
const MAX_PIPELINE: usize = 1024;

/// A client's byte streams: a TCP socket's halves, or a TLS session's.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

type Frames = FramedRead<Reader, RequestCodec>;

enum Next {
    Continue,
    Close,
}

struct Connection {
    id: u64,
    node: Arc<Node>,
    /// Error replies sent so far, and how the last one ended its command
    /// (`INFO commandstats`).
    errors_replied: u64,
    last_error: super::stats::Outcome,
    resp3: bool,
    channels: HashSet<Bytes>,
    patterns: HashSet<Bytes>,
    /// Shard channels (`SSUBSCRIBE`).
    shard_channels: HashSet<Bytes>,
    subscriber: Subscriber,
    /// The command being answered was queued in a transaction (counted
    /// in `INFO commandstats` when EXEC runs it).
    queued: bool,
    out: BytesMut,
    /// The size ([`PushMsg::size`]) of the messages in `out`: they count
    /// against the subscriber's limit until written.
    push_unsent: u64,
    /// Commands queued since `MULTI`.
    multi: Option<Vec<Vec<Bytes>>>,
    /// A command was refused while queueing: `EXEC` must abort.
    multi_failed: bool,
    /// Bytes of the commands queued since `MULTI`.
    multi_bytes: usize,
    /// `WATCH`ed keys and the version of their last write when watched.
    watched: Vec<(Bytes, u64)>,
    /// Whether the client may run commands: it authenticated, or no
    /// password is required.
    authenticated: bool,
    /// The ACL user it is (`default` until `AUTH` says otherwise), and that
    /// user's permissions (`None`: every permission, nothing to check) as
    /// of `acl_epoch`.
    user: String,
    perms: Option<Arc<commands::acl::Perms>>,
    acl_epoch: u64,
    /// `CLIENT TRACKING` options while on (a copy of what the hub has).
    tracking: Option<super::tracking::TrackingMode>,
    /// `CLIENT CACHING yes|no`, for the next command (or transaction).
    caching: Option<bool>,
    /// Notified by `CLIENT KILL` from another connection.
    kill: Arc<Notify>,
    /// Set by `CLIENT UNBLOCK` from another connection.
    unblock: Arc<super::clients::UnblockSignal>,
    /// `MONITOR`: the lines this connection is sent, while on.
    monitor: Option<super::monitor::Watch>,
    /// The client's address, for `MONITOR` lines.
    addr: String,
    /// `CLIENT REPLY OFF|SKIP`: replies not sent.
    silence: Silence,
}

/// Which replies `CLIENT REPLY` holds back (pushes still go).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Silence {
    /// `CLIENT REPLY ON`: every reply is sent.
    None,
    /// `CLIENT REPLY OFF`: none until `CLIENT REPLY ON`.
    Off,
    /// `CLIENT REPLY SKIP`: the next this many (its own, then the next
    /// command's).
    Skip(u8),
}

/// Serves one client until it disconnects, misbehaves or the node stops.
pub async fn serve(
    node: Arc<Node>,
    (reader, mut writer): (Reader, Writer),
    addr: SocketAddr,
    local: Option<SocketAddr>,
    mut shutdown: broadcast::Receiver<()>,
) {
    let (acl_epoch, acl) = node.consensus.acl();
    if node.auth.denies(addr.ip(), &acl) {
        let _ = send(&mut writer, super::auth::PROTECTED_MODE_DENIED.as_bytes()).await;
        let _ = writer.shutdown().await;
        return;
    }
    let limit = node.maxclients.load(Ordering::Relaxed);
    let Some(id) = node.clients.register(addr, local, limit) else {
        crate::metrics::record_rejected_connection();
        let _ = send(&mut writer, b"-ERR max number of clients reached\r\n").await;
        let _ = writer.shutdown().await;
        return;
    };
    let mut frames = FramedRead::new(reader, RequestCodec::new(node.config.limits()));
    let (subscriber, mut pushes, overflow) = Subscriber::new(node.hub.pubsub_limit().clone());
    let unsent = subscriber.unsent();
    node.clients.update(id, |c| c.unsent_pushes = unsent);
    let mut conn = Connection {
        id,
        node: node.clone(),
        resp3: false,
        channels: HashSet::new(),
        patterns: HashSet::new(),
        shard_channels: HashSet::new(),
        subscriber,
        queued: false,
        out: BytesMut::with_capacity(4096),
        push_unsent: 0,
        multi: None,
        multi_failed: false,
        multi_bytes: 0,
        watched: Vec::new(),
        authenticated: !node.auth.required(&acl),
        user: "default".into(),
        perms: None,
        acl_epoch,
        tracking: None,
        caching: None,
        kill: node.clients.get(id).map(|c| c.kill).unwrap_or_default(),
        unblock: node.clients.get(id).map(|c| c.unblock).unwrap_or_default(),
        monitor: None,
        addr: addr.to_string(),
        silence: Silence::None,
        errors_replied: 0,
        last_error: super::stats::Outcome::Failed,
    };
    conn.refresh_perms(&acl, acl_epoch);
    conn.run(&mut frames, &mut writer, &mut pushes, &overflow, &mut shutdown).await;
    conn.unsubscribe_all();
    node.hub.tracking.disable(id);
    node.clients.unregister(id);
}

impl Connection {
    async fn run(
        &mut self,
        frames: &mut Frames,
        writer: &mut Writer,
        pushes: &mut mpsc::Receiver<PushMsg>,
        overflow: &Notify,
        shutdown: &mut broadcast::Receiver<()>,
    ) {
        let mut acl_changes = self.node.consensus.acl_watch();
        let kill = self.kill.clone();
        loop {
            // Redis's `timeout`: an idle client is let go, unless it subscribes.
            let idle = self.node.idle_timeout_secs.load(Ordering::Relaxed);
            let idle_for = (idle > 0 && !self.subscribed()).then(|| std::time::Duration::from_secs(idle));
            let first = tokio::select! {
                _ = shutdown.recv() => return,
                // CLIENT KILL from another connection.
                _ = kill.notified() => return,
                // Its user changed: a deleted user, or channels it may no
                // longer listen to, end the connection (as Redis).
                Ok(()) = acl_changes.changed() => {
                    if !self.acl_current() {
                        return;
                    }
                    None
                }
                _ = async { match idle_for { Some(d) => tokio::time::sleep(d).await, None => std::future::pending().await } } => {
                    tracing::debug!(client = self.id, "idle client timed out");
                    return;
                }
                _ = overflow.notified() => {
                    tracing::warn!(client = self.id, "subscriber too slow: disconnected");
                    return;
                }
                Some(msg) = pushes.recv() => {
                    self.encode_push(msg);
                    None
                }
                line = async {
                    match &mut self.monitor {
                        Some(watch) => watch.lines.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    match line {
                        Ok(line) => self.out.extend_from_slice(&line),
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            tracing::warn!(client = self.id, lagged = n, "MONITOR client too slow: disconnected");
                            return;
                        }
                        Err(broadcast::error::RecvError::Closed) => self.monitor = None,
                    }
                    None
                }
                frame = frames.next() => Some(frame),
            };
            let mut close = false;
            // Answer everything already received before writing once.
            let mut next = first;
            while let Some(frame) = next.take() {
                if self.node.consensus.acl_epoch() != self.acl_epoch && !self.acl_current() {
                    close = true;
                    break;
                }
                if self.pipelinable(&frame) {
                    // Consecutive writes already received go to the leader
                    // together, as one request (one log entry), and are
                    // answered in order.
                    // Together no larger than one request may be.
                    let size = |f: &Option<Result<Vec<Bytes>, ProtocolError>>| match f {
                        Some(Ok(argv)) => commands::argv_size(argv),
                        _ => 0,
                    };
                    let mut bytes = size(&frame);
                    let mut group = vec![frame];
                    while group.len() < MAX_PIPELINE {
                        let Some(more) = frames.next().now_or_never() else { break };
                        if !self.pipelinable(&more) || bytes + size(&more) > self.node.config.max_request_len {
                            next = Some(more);
                            break;
                        }
                        bytes += size(&more);
                        group.push(more);
                    }
                    if group.len() == 1 {
                        close = matches!(self.on_frame(group.pop().flatten(), frames).await, Next::Close);
                    } else {
                        let commands = group.into_iter().filter_map(|f| f.and_then(Result::ok)).collect();
                        self.execute_pipeline(commands).await;
                    }
                } else {
                    close = matches!(self.on_frame(frame, frames).await, Next::Close);
                }
                if close {
                    break;
                }
                if self.out.len() >= FLUSH_AT {
                    self.take_pushes(pushes);
                    if !self.flush_out(writer, overflow).await {
                        return;
                    }
                }
                if next.is_none() {
                    next = frames.next().now_or_never();
                }
            }
            self.take_pushes(pushes);
            if !self.out.is_empty() && !self.flush_out(writer, overflow).await {
                return;
            }
            if close {
                let _ = writer.shutdown().await;
                return;
            }
        }
    }

    /// Whether `frame` is a write command that may go to the leader in one
    /// request with the writes around it ([`commands::pipelinable`]), outside
    /// `MULTI` and subscriptions.
    fn pipelinable(&self, frame: &Option<Result<Vec<Bytes>, ProtocolError>>) -> bool {
        let Some(Ok(argv)) = frame else { return false };
        // A user with limits: each command its rules allow, as they stand
        // (a refusal, or rules changed since, take the one-command path,
        // which logs the refusal or reads the rules again).
        let allowed = |spec: &CommandSpec| match &self.perms {
            None => true,
            Some(perms) => self.node.consensus.acl_epoch() == self.acl_epoch && perms.check(spec, argv).is_ok(),
        };
        self.authenticated
            && !self.node.memory.exceeded()
            && !self.node.consensus.disk().low()
            && self.multi.is_none()
            && !self.subscribed()
            && !self.node.pause.holds(true)
            && commands::lookup(&argv[0]).is_some_and(|spec| {
                spec.arity_ok(argv.len())
                    && commands::pipelinable(spec)
                    && !(spec.name == "lock.acquire" && super::waiting::waits(argv))
                    && allowed(spec)
            })
    }

    /// `ACL LOG`: this client was refused `object` (a command, key or
    /// channel); in a transaction when queued or at its EXEC (`multi`).
    fn log_refusal(&self, denied: &commands::acl::Denied, object: Bytes, multi: bool) {
        use super::acllog::Reason;
        use commands::acl::Denied;
        let reason = match denied {
            Denied::Command(_) => Reason::Command,
            Denied::Key => Reason::Key,
            Denied::Channel => Reason::Channel,
            // The command's own error, not an ACL refusal.
            Denied::Option(_) => return,
        };
        let info = self.node.clients.get(self.id).map(|c| c.line()).unwrap_or_default();
        self.node.acllog.record(reason, multi, object, &self.user, info);
    }

    /// `ACL LOG`: `AUTH` or `HELLO ... AUTH` (`command`, as sent) as
    /// `user` failed with `refused`. Only a wrong password or user counts
    /// (as in Redis; not `AUTH` without a password configured).
    fn log_failed_auth(&self, refused: &Reply, command: &Bytes, user: &[u8]) {
        if matches!(refused, Reply::Error(e) if e == super::auth::WRONGPASS) {
            let info = self.node.clients.get(self.id).map(|c| c.line()).unwrap_or_default();
            let user = String::from_utf8_lossy(user);
            self.node.acllog.record(super::acllog::Reason::Auth, self.multi.is_some(), command.clone(), &user, info);
        }
    }

    /// Whether `CLIENT PAUSE WRITE` holds this command: one Redis flags
    /// `write` or `may_replicate` (scripts, `PUBLISH`), or an `EXEC` of a
    /// transaction that queued one.
    fn writes(&self, spec: &CommandSpec) -> bool {
        let writes = |spec: &CommandSpec| spec.flags.iter().any(|f| matches!(*f, "write" | "may_replicate"));
        match (&self.multi, spec.name) {
            (Some(queue), "exec") => queue.iter().any(|c| commands::lookup(&c[0]).is_some_and(writes)),
            _ => writes(spec),
        }
    }

    /// Runs pipelined write commands (each already checked by
    /// [`Connection::pipelinable`]) as one request, and replies to each.
    async fn execute_pipeline(&mut self, commands: Vec<Vec<Bytes>>) {
        let specs: Vec<&'static CommandSpec> =
            commands.iter().filter_map(|argv| commands::lookup(&argv[0])).collect();
        let n = commands.len();
        self.node.total_commands.fetch_add(n as u64, Ordering::Relaxed);
        if self.node.monitors.active() {
            for (spec, argv) in specs.iter().zip(&commands) {
                self.node.monitors.feed(&self.addr, spec.name, spec.flags, argv);
            }
        }
        if let Some(last) = specs.last() {
            self.node.clients.update(self.id, |c| {
                c.last_command = last.name;
                c.last_active = Instant::now();
            });
        }
        let tracked = self.track_reads(commands.iter().map(|c| &c[..]));
        self.caching = None;
        let attempts: Vec<Option<Bytes>> = commands.iter().map(|c| commands::attempted_lock(c).cloned()).collect();
        let subs: Vec<Option<Bytes>> = commands.iter().map(|c| c.get(1).cloned()).collect();
        let request = Request::Pipeline(commands);
        // Let in by `pipelinable` (the disk was not low): counted against
        // its free space until it is read again.
        self.node.consensus.disk().spend(request.size() as u64);
        let started = Instant::now();
        let (outcome, reflects) = self.on_leader_seen(request).await;
        // Each command's share of the request's time.
        let usec = started.elapsed().as_micros() as u64 / n.max(1) as u64;
        self.reads_answered(tracked, reflects);
        let replies = match outcome {
            Reply::Array(replies) if replies.len() == n => replies,
            // The request as a whole failed (no leader, timed out): every
            // command gets that answer.
            other => vec![other; n],
        };
        for (((spec, reply), attempt), sub) in specs.into_iter().zip(replies).zip(attempts).zip(subs) {
            crate::metrics::record_command(spec.name, &reply);
            super::top::record_if_refused(attempt.as_ref(), &reply);
            self.reply(&reply);
            let outcome = match &reply {
                Reply::Error(_) => self.last_error,
                _ => super::stats::Outcome::Answered,
            };
            self.node.stats.command(spec, sub.as_deref(), usec, outcome);
        }
    }

    async fn on_frame(&mut self, frame: Option<Result<Vec<Bytes>, ProtocolError>>, frames: &mut Frames) -> Next {
        match frame {
            None => Next::Close,
            Some(Err(ProtocolError::Invalid(msg))) => {
                self.reply(&Reply::Error(format!("ERR Protocol error: {msg}")));
                Next::Close
            }
            Some(Err(ProtocolError::Io(_))) => Next::Close,
            Some(Ok(argv)) => self.execute(argv, frames).await,
        }
    }

    /// Writes what is buffered; false if the connection must end: the
    /// write failed, or (`client-output-buffer-limit normal`, for clients
    /// that do not subscribe) the output is over the hard limit, or stays
    /// over the soft limit, unsent, for the soft seconds, or (`pubsub`) the
    /// messages that arrive while the socket is full pass that limit: the
    /// messages being written count until the socket has taken them all.
    async fn flush_out(&mut self, writer: &mut Writer, overflow: &Notify) -> bool {
        let out = self.out.split();
        let (hard, soft, soft_secs) =
            if self.subscribed() { (0, 0, 0) } else { self.node.hub.normal_limit().get() };
        let len = out.len() as u64;
        if hard > 0 && len > hard {
            tracing::warn!(client = self.id, bytes = len, "output over client-output-buffer-limit normal: disconnected");
            return false;
        }
        let soft_limit = (soft > 0 && len > soft).then(|| std::time::Duration::from_secs(soft_secs));
        let write = async {
            match soft_limit {
                None => send(writer, &out).await.is_ok(),
                Some(limit) => match tokio::time::timeout(limit, send(writer, &out)).await {
                    Ok(sent) => sent.is_ok(),
                    Err(_) => {
                        tracing::warn!(client = self.id, bytes = len, "output over the soft client-output-buffer-limit for too long: disconnected");
                        false
                    }
                },
            }
        };
        if self.push_unsent == 0 && !self.subscribed() {
            return write.await;
        }
        // Messages published while the socket is full queue up behind this
        // write: past the pub/sub limit the subscriber is let go now, not
        // once the write ends.
        let sent = tokio::select! {
            sent = write => sent,
            _ = overflow.notified() => {
                tracing::warn!(client = self.id, "subscriber too slow: disconnected");
                false
            }
        };
        self.subscriber.written(std::mem::take(&mut self.push_unsent));
        sent
    }

    /// `INFO commandstats` and `errorstats` for the commands an EXEC ran
    /// (`reply` its answer), as Redis counts them: each command when it
    /// runs, an error among the results as an error reply.
    fn count_transaction(&self, commands: &[Vec<Bytes>], reply: &Reply) {
        let Reply::Array(results) = reply else { return };
        for (argv, result) in commands.iter().zip(results) {
            let Some(spec) = commands::lookup(&argv[0]) else { continue };
            let outcome = match result {
                Reply::Error(e) => {
                    self.node.stats.error(e);
                    super::stats::Outcome::of_error(e)
                }
                _ => super::stats::Outcome::Answered,
            };
            self.node.stats.command(spec, argv.get(1).map(|b| &b[..]), 0, outcome);
        }
    }

    /// The error for `argv` if it may add data while the disk is nearly
    /// full (see [`crate::storage::disk`]).
    fn disk_refusal(&self, argv: &[Bytes]) -> Option<String> {
        self.node.consensus.command_disk_refusal(argv)
    }

    /// Whether `argv` is refused at once over `maxmemory`
    /// ([`commands::refused_over_maxmemory`]), as Redis refuses its
    /// `denyoom` commands and flagged scripts that may write. A script
    /// without flags runs, as in Redis, and is refused only the commands
    /// it calls that may add data.
    fn refused_over_maxmemory(&self, argv: &[Bytes]) -> bool {
        self.node.consensus.command_refused_over_maxmemory(argv)
    }

    fn reply(&mut self, reply: &Reply) {
        // Messages, subscription confirmations and invalidations are pushes,
        // not replies: `CLIENT REPLY` never holds them back (as Redis).
        if matches!(reply, Reply::Push(_)) {
            encode_reply(reply, self.resp3, &mut self.out);
            return;
        }
        if let Reply::Error(e) = reply {
            self.node.stats.error(e);
            self.errors_replied += 1;
            self.last_error = super::stats::Outcome::of_error(e);
        }
        match self.silence {
            Silence::None => encode_reply(reply, self.resp3, &mut self.out),
            Silence::Off => {}
            Silence::Skip(n) => self.silence = if n > 1 { Silence::Skip(n - 1) } else { Silence::None },
        }
    }

    /// A command that answered only with pushes ran: a `CLIENT REPLY SKIP`
    /// before it was for it, and is used up.
    fn command_without_reply(&mut self) {
        if self.silence == Silence::Skip(1) {
            self.silence = Silence::None;
        }
    }

    /// Puts the pushes already waiting (an invalidation caused by the
    /// command just answered, say) after the replies, so that they leave in
    /// the same write, as Redis sends them: a client that serves reads from
    /// a local cache looks for invalidations without waiting, right after
    /// its own write's reply.
    fn take_pushes(&mut self, pushes: &mut mpsc::Receiver<PushMsg>) {
        while let Ok(msg) = pushes.try_recv() {
            self.encode_push(msg);
        }
    }

    fn encode_push(&mut self, msg: PushMsg) {
        let size = msg.size();
        let items = match msg {
            // RESP2 has no pushes: a RESP2 client without a redirect gets
            // no invalidations (as Redis).
            PushMsg::Invalidate { via_channel: false, .. } if !self.resp3 => {
                self.subscriber.written(size);
                return;
            }
            PushMsg::Invalidate { keys, via_channel } => {
                // A redirect to a RESP3 connection is an `invalidate` push
                // there too, as Redis sends it; to RESP2, a Pub/Sub message.
                let via_channel = via_channel && !self.resp3;
                let keys = match keys {
                    Some(keys) => Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
                    None if via_channel => Reply::NilArray,
                    None => Reply::Nil,
                };
                if via_channel {
                    vec![Reply::text("message"), Reply::text(super::tracking::INVALIDATE_CHANNEL), keys]
                } else {
                    vec![Reply::text("invalidate"), keys]
                }
            }
            PushMsg::Message { channel, payload } => {
                vec![Reply::text("message"), Reply::Bulk(channel), Reply::Bulk(payload)]
            }
            PushMsg::SMessage { channel, payload } => {
                vec![Reply::text("smessage"), Reply::Bulk(channel), Reply::Bulk(payload)]
            }
            PushMsg::PMessage { pattern, channel, payload } => {
                vec![Reply::text("pmessage"), Reply::Bulk(pattern), Reply::Bulk(channel), Reply::Bulk(payload)]
            }
        };
        self.push_unsent += size;
        self.reply(&Reply::Push(items));
    }

    fn subscribed(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty() || !self.shard_channels.is_empty()
    }

    /// Runs one command read from the client, timing it for `SLOWLOG`,
    /// `LATENCY` and `INFO commandstats`.
    async fn execute(&mut self, argv: Vec<Bytes>, frames: &mut Frames) -> Next {
        let spec = commands::lookup(&argv[0]);
        // Neither counts a blocked command's wait, nor EXEC (its commands).
        let timed_spec = spec.filter(|spec| {
            self.multi.is_none()
                && !spec.flags.contains(&"blocking")
                && !spec.flags.contains(&"skip_slowlog")
                && !(spec.name == "lock.acquire" && super::waiting::waits(&argv))
        });
        let slowlog = timed_spec
            .is_some_and(|spec| self.node.slowlog.is_slow(u64::MAX) && !super::slowlog::skipped(spec.name, spec.flags));
        let kept = slowlog.then(|| argv.clone());
        let errors = self.errors_replied;
        let started = Instant::now();
        // A container's subcommand (`CONFIG GET`) is counted apart.
        let sub = argv.get(1).cloned();
        let next = self.execute_untimed(spec, argv, frames).await;
        let elapsed = started.elapsed();
        let micros = elapsed.as_micros() as u64;
        if let Some(spec) = spec.filter(|_| !std::mem::take(&mut self.queued)) {
            let outcome = if self.errors_replied > errors { self.last_error } else { super::stats::Outcome::Answered };
            self.node.stats.command(spec, sub.as_deref(), if timed_spec.is_some() { micros } else { 0 }, outcome);
        }
        let Some(timed_spec) = timed_spec else { return next };
        self.node.latency.record(timed_spec, sub.as_deref(), elapsed.as_nanos().min(u64::MAX as u128) as u64);
        if let Some(kept) = kept.filter(|_| self.node.slowlog.is_slow(micros)) {
            let (addr, name) = self.node.clients.get(self.id).map(|c| (c.addr.to_string(), c.name)).unwrap_or_default();
            self.node.slowlog.record(micros, &kept, addr, name);
        }
        next
    }

    /// Runs one command; `spec` is its row of the table, if it has one.
    async fn execute_untimed(&mut self, spec: Option<&'static CommandSpec>, argv: Vec<Bytes>, frames: &mut Frames) -> Next {
        self.node.total_commands.fetch_add(1, Ordering::Relaxed);
        let Some(spec) = spec else {
            self.multi_failed |= self.multi.is_some();
            self.reply(&unknown_command(&argv));
            return Next::Continue;
        };
        // `client|id` for a container's subcommand, as Redis's CLIENT LIST.
        let shown = commands::stats_row(spec, argv.get(1).map(|a| &a[..])).and_then(commands::stats_row_name).unwrap_or(spec.name);
        self.node.clients.update(self.id, |c| {
            c.last_command = shown;
            c.last_active = Instant::now();
        });
        if !self.authenticated && !super::auth::allowed_before_auth(spec.name) {
            self.multi_failed |= self.multi.is_some();
            self.reply(&Reply::error(super::auth::NOAUTH));
            return Next::Continue;
        }
        if !spec.arity_ok(argv.len()) {
            self.multi_failed |= self.multi.is_some();
            self.reply(&arity_error(spec.name));
            return Next::Continue;
        }
        if self.authenticated && !super::auth::allowed_before_auth(spec.name) {
            if self.node.consensus.acl_epoch() != self.acl_epoch {
                let (epoch, acl) = self.node.consensus.acl();
                if !self.refresh_perms(&acl, epoch) {
                    // Its user was deleted: as Redis, the client goes too.
                    return Next::Close;
                }
            }
            if let Some(perms) = &self.perms {
                if let Err((denied, object)) = perms.check_naming(spec, &argv) {
                    self.log_refusal(&denied, object, self.multi.is_some());
                    self.multi_failed |= self.multi.is_some();
                    self.reply(&denied.reply());
                    return Next::Continue;
                }
            }
        }
        if self.node.memory.exceeded() && self.refused_over_maxmemory(&argv) {
            self.multi_failed |= self.multi.is_some();
            self.reply(&Reply::error(super::memory::OOM));
            return Next::Continue;
        }
        if let Some(refusal) = self.disk_refusal(&argv) {
            self.multi_failed |= self.multi.is_some();
            self.reply(&Reply::Error(refusal));
            return Next::Continue;
        }
        // CLIENT PAUSE: held here (queueing in MULTI included, as in
        // Redis) until the pause ends; a client that leaves meanwhile runs
        // nothing.
        let writes = self.writes(spec);
        if self.node.pause.holds(writes) {
            let node = self.node.clone();
            let limit = node.config.max_request_len;
            let kill = self.kill.clone();
            let frames = &mut *frames;
            let id = self.id;
            // Boxed, as the blocking commands' futures are (the read buffer
            // of `closed` would grow every command's future).
            let left = Box::pin(async move {
                // Counted as blocked meanwhile, as Redis counts it (INFO's
                // blocked_clients, CLIENT LIST's flag b).
                let _blocked = Blocked::new(&node, id);
                tokio::select! {
                    _ = node.pause.until_released(writes) => false,
                    _ = closed(frames, limit) => true,
                    _ = kill.notified() => true,
                }
            })
            .await;
            if left {
                return Next::Close;
            }
        }
        if let Some(queue) = &mut self.multi {
            if !matches!(spec.name, "exec" | "discard" | "multi" | "watch" | "quit" | "reset") {
                self.multi_bytes += commands::argv_size(&argv);
                let reply = if matches!(spec.handler, Handler::Local) && !answered_in_multi(spec, &argv) {
                    self.multi_failed = true;
                    Reply::error(format!("ERR '{}' is not allowed inside a transaction", spec.name))
                } else if self.multi_bytes > self.node.config.max_request_len {
                    // EXEC is one log entry: it must fit one, as a request must.
                    self.multi_failed = true;
                    Reply::error("ERR the transaction is larger than the largest request (max-request-len)")
                } else {
                    queue.push(argv);
                    // Counted when EXEC runs it, as Redis counts it.
                    self.queued = true;
                    Reply::Status("QUEUED".into())
                };
                self.reply(&reply);
                return Next::Continue;
            }
        }
        if self.subscribed()
            && !self.resp3
            && !matches!(
                spec.name,
                "subscribe"
                    | "psubscribe"
                    | "ssubscribe"
                    | "unsubscribe"
                    | "punsubscribe"
                    | "sunsubscribe"
                    | "ping"
                    | "quit"
                    | "reset"
            )
        {
            self.reply(&Reply::error(format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                spec.name
            )));
            return Next::Continue;
        }
        if self.node.monitors.active() {
            if let (Some(queue), "exec") = (&self.multi, spec.name) {
                for c in queue {
                    if let Some(s) = commands::lookup(&c[0]) {
                        self.node.monitors.feed(&self.addr, s.name, s.flags, c);
                    }
                }
            }
            self.node.monitors.feed(&self.addr, spec.name, spec.flags, &argv);
        }
        // CLIENT CACHING counts for the next command, or the next
        // transaction until its EXEC.
        let sets_caching = spec.name == "client" && argv.get(1).is_some_and(|s| s.eq_ignore_ascii_case(b"caching"));
        let attempt = commands::attempted_lock(&argv).cloned();
        let (reply, next) = match spec.handler {
            _ if spec.name == "watch" => (Some(self.watch(argv).await), Next::Continue),
            // The blocking commands' futures (a read buffer for the hang-up
            // watch among them) are boxed: held inline they made every
            // command's future 14 KB, copied as each command began.
            // With BLOCK (without it, a read or write like any other).
            _ if matches!(spec.name, "xread" | "xreadgroup")
                && commands::stream_read_layout(&argv).is_some_and(|(block, _)| block.is_some()) =>
            {
                match Box::pin(self.blocking_stream_read(spec, argv, frames)).await {
                    Some(reply) => (Some(reply), Next::Continue),
                    None => (None, Next::Close),
                }
            }
            _ if spec.flags.contains(&"blocking") && !matches!(spec.name, "xread" | "xreadgroup") => {
                match Box::pin(self.blocking_pop(spec, argv, frames)).await {
                    Some(reply) => (Some(reply), Next::Continue),
                    None => (None, Next::Close),
                }
            }
            _ if spec.name == "lock.acquire" && super::waiting::waits(&argv) => {
                let limit = self.node.config.max_request_len;
                let unblock = self.unblock.clone();
                match Box::pin(super::waiting::acquire(&self.node, self.id, argv, closed(frames, limit), &unblock)).await {
                    Some(reply) => (Some(reply), Next::Continue),
                    None => (None, Next::Close),
                }
            }
            // Replicated state: runs on the leader (here, or forwarded to it).
            Handler::Write(_) | Handler::Read(_) => {
                let tracked = self.track_reads([&argv[..]]);
                let publish = commands::is_publish(spec.name).then(|| (argv.get(1).cloned(), spec.name == "spublish"));
                let (mut reply, reflects) = self.on_leader_seen(Request::Command(argv)).await;
                self.reads_answered(tracked, reflects);
                // Answered by the leader, a PUBLISH counts the leader's
                // receivers; the client asked this node, whose own
                // subscribers get the message as it applies the entry (as
                // in a Redis Cluster, the count is the node's it was sent to).
                if let (Some((Some(channel), shard)), Some(_), Reply::Int(_)) = (publish, reflects, &reply) {
                    reply = Reply::Int(self.node.hub.receivers(&channel, shard) as i64);
                }
                (Some(reply), Next::Continue)
            }
            Handler::Local => self.local(spec, &argv).await,
        };
        if let Some(reply) = reply {
            crate::metrics::record_command(spec.name, &reply);
            super::top::record_if_refused(attempt.as_ref(), &reply);
            self.reply(&reply);
        }
        if !sets_caching && self.multi.is_none() {
            self.caching = None;
        }
        next
    }

    /// With `CLIENT TRACKING` on: the keys of the read commands among
    /// `commands` are tracked, before they are sent (see `tracking`). A
    /// script's declared keys count as read: it runs in the state machine,
    /// where its reads cannot be seen from here, and a script names the
    /// keys it touches (rueidislock's scripts read their lock key so that
    /// a waiter hears of its release).
    ///
    /// Returns the keys, for [`Connection::reads_answered`] once the reply is back.
    fn track_reads<'a>(&self, commands: impl IntoIterator<Item = &'a [Bytes]>) -> Vec<Bytes> {
        let Some(mode) = &self.tracking else { return Vec::new() };
        if mode.bcast || !super::tracking::tracks(mode, self.caching) {
            return Vec::new();
        }
        let mut tracked = Vec::new();
        for argv in commands {
            let reads = |s: &&CommandSpec| matches!(s.handler, Handler::Read(_)) || s.name.starts_with("eval");
            if let Some(spec) = commands::lookup(&argv[0]).filter(reads) {
                let keys: Vec<Bytes> = spec.keys(argv).cloned().collect();
                self.node.hub.remember_reads(self.id, keys.iter());
                tracked.extend(keys);
            }
        }
        tracked
    }

    /// Connection-local and node-local commands. Returns the reply, or `None`
    /// when the command wrote its own replies (subscriptions).
    async fn local(&mut self, spec: &'static CommandSpec, argv: &[Bytes]) -> (Option<Reply>, Next) {
        let arg = |i: usize| String::from_utf8_lossy(&argv[i]).to_ascii_lowercase();
        let reply = match spec.name {
            "ping" => match argv.len() {
                1 | 2 if self.subscribed() && !self.resp3 => Reply::Array(vec![
                    Reply::text("pong"),
                    Reply::Bulk(argv.get(1).cloned().unwrap_or_default()),
                ]),
                1 => Reply::Status("PONG".into()),
                2 => Reply::Bulk(argv[1].clone()),
                _ => arity_error("ping"),
            },
            "echo" => Reply::Bulk(argv[1].clone()),
            "quit" => return (Some(Reply::ok()), Next::Close),
            "reset" => {
                self.monitor = None;
                self.multi = None;
                self.watched.clear();
                self.unsubscribe_all();
                self.node.hub.tracking.disable(self.id);
                self.tracking = None;
                self.caching = None;
                self.silence = Silence::None;
                self.resp3 = false;
                // Back to the default user: authenticated only if it needs no password.
                let (epoch, acl) = self.node.consensus.acl();
                self.authenticated = !self.node.auth.required(&acl);
                self.set_user("default", &acl, epoch);
                self.node.clients.update(self.id, |c| {
                    c.name.clear();
                    c.resp = 2;
                });
                Reply::Status("RESET".into())
            }
            "hello" => self.hello(argv),
            "auth" => {
                if argv.len() > 3 {
                    return (Some(Reply::error("ERR syntax error")), Next::Continue);
                }
                let (user, password) = if argv.len() == 3 { (Some(&argv[1][..]), &argv[2]) } else { (None, &argv[1]) };
                let (epoch, acl) = self.node.consensus.acl();
                match self.node.auth.check(user, password, &acl) {
                    Ok(name) => {
                        self.authenticated = true;
                        self.set_user(&name, &acl, epoch);
                        Reply::ok()
                    }
                    Err(refused) => {
                        self.log_failed_auth(&refused, &argv[0], user.unwrap_or(b"default"));
                        refused
                    }
                }
            }
            // Snapshots: SAVE waits for one, the others only start it.
            "save" => match self.node.consensus.snapshot_now(Some(SAVE_WAIT)).await {
                Ok(()) => Reply::ok(),
                Err(e) => Reply::Error(e),
            },
            "bgsave" if argv.len() > 2 || argv.len() == 2 && !argv[1].eq_ignore_ascii_case(b"schedule") => {
                Reply::error("ERR syntax error")
            }
            "bgsave" | "bgrewriteaof" => match self.node.consensus.snapshot_now(None).await {
                Ok(()) if spec.name == "bgsave" => Reply::Status("Background saving started".into()),
                Ok(()) => Reply::Status("Background append only file rewriting started".into()),
                Err(e) => Reply::Error(e),
            },
            "slowlog" => self.node.slowlog.command(&argv[1..]),
            "monitor" => {
                if self.monitor.is_none() {
                    self.monitor = Some(self.node.monitors.watch());
                }
                Reply::ok()
            }
            "latency" => self.node.latency.command(&argv[1..]),
            "shutdown" => {
                let (mut save, mut nosave, mut force, mut abort) = (false, false, false, false);
                for a in &argv[1..] {
                    match a.to_ascii_lowercase().as_slice() {
                        b"save" => save = true,
                        b"nosave" => nosave = true,
                        b"force" => force = true,
                        // Nothing waits here (no replica to catch up: every
                        // acknowledged write is on a majority's disk).
                        b"now" => {}
                        b"abort" => abort = true,
                        _ => return (Some(Reply::error("ERR syntax error")), Next::Continue),
                    }
                }
                if abort && argv.len() > 2 || save && nosave {
                    return (Some(Reply::error("ERR syntax error")), Next::Continue);
                }
                if abort {
                    return (Some(Reply::error("ERR No shutdown in progress.")), Next::Continue);
                }
                if save {
                    if let Err(e) = self.node.consensus.snapshot_now(Some(SAVE_WAIT)).await {
                        tracing::warn!("SHUTDOWN SAVE: the snapshot failed: {e}");
                        if !force {
                            return (Some(Reply::error("ERR Errors trying to SHUTDOWN. Check logs.")), Next::Continue);
                        }
                    }
                }
                tracing::info!(client = self.id, save, "SHUTDOWN: stopping the node");
                // As Redis: no reply, the connection closes as the node stops.
                self.node.stop.notify_one();
                return (None, Next::Close);
            }
            // Only database 0 exists (Redis's `databases 1`).
            "move" => match parse_i64(&argv[2]) {
                Some(db) if i32::try_from(db).is_err() => {
                    Reply::error("ERR value is out of range, value must between -2147483648 and 2147483647")
                }
                Some(0) => Reply::error("ERR source and destination objects are the same"),
                Some(_) => Reply::error("ERR DB index is out of range"),
                None => Reply::error("ERR value is not an integer or out of range"),
            },
            "swapdb" => match (parse_i64(&argv[1]), parse_i64(&argv[2])) {
                (None, _) => Reply::error("ERR invalid first DB index"),
                (_, None) => Reply::error("ERR invalid second DB index"),
                (Some(0), Some(0)) => Reply::ok(),
                _ => Reply::error("ERR DB index is out of range"),
            },
            "select" => match parse_i64(&argv[1]) {
                Some(0) => Reply::ok(),
                Some(_) => Reply::error("ERR DB index is out of range"),
                None => Reply::error("ERR value is not an integer or out of range"),
            },
            "client" => self.client(argv),
            "info" => {
                let sections: Vec<String> = (1..argv.len()).map(arg).collect();
                Reply::Verbatim(info::info(&self.node, &sections).await)
            }
            "raft.info" => Reply::Verbatim(info::raft_info(&self.node).await),
            "lock.top" => lock_top(argv),
            // It holds every key and the users' password hashes.
            "raft.backup" if self.perms.as_ref().is_some_and(|p| !p.unrestricted()) => {
                Reply::error("NOPERM RAFT.BACKUP needs a user with every permission (+@all ~* &*): a backup holds every key and every user")
            }
            "raft.backup" => match self.node.consensus.backup().await {
                Ok(file) => Reply::bulk(file),
                Err(crate::raft::ClusterError::NotLeader(id)) => Reply::Error(format!(
                    "TRYAGAIN RAFT.BACKUP runs on the leader: node {id} at {}",
                    self.node.consensus.client_addr_of(id).unwrap_or_default()
                )),
                Err(e) => Reply::Error(e.to_string()),
            },
            "raft.digest" => {
                let (index, digest) = self.node.consensus.digest();
                Reply::Array(vec![Reply::Int(index as i64), Reply::bulk(digest)])
            }
            // Checked here; run as it is (a membership change is not a script).
            "raft.node" => self.node.consensus.execute(self.id, Request::Command(argv.to_vec())).await.unwrap_or_else(|e| Reply::Error(e.to_string())),
            "multi" if self.multi.is_some() => Reply::error("ERR MULTI calls can not be nested"),
            "multi" => {
                self.multi = Some(Vec::new());
                self.multi_failed = false;
                self.multi_bytes = 0;
                Reply::ok()
            }
            "exec" => match self.multi.take() {
                None => Reply::error("ERR EXEC without MULTI"),
                Some(_) if self.multi_failed => {
                    self.watched.clear();
                    Reply::error("EXECABORT Transaction discarded because of previous errors.")
                }
                Some(commands)
                    if self.node.memory.exceeded()
                        && commands.iter().any(|c| self.refused_over_maxmemory(c)) =>
                {
                    self.watched.clear();
                    Reply::error(format!("EXECABORT Transaction discarded because of: {}", super::memory::OOM))
                }
                // Checked when queued, and again now: the disk may have
                // filled since.
                Some(commands) if commands.iter().any(|c| self.disk_refusal(c).is_some()) => {
                    self.watched.clear();
                    Reply::Error(self.node.consensus.disk().refusal())
                }
                // Checked when queued, and again now: the rules may have
                // changed since.
                Some(commands)
                    if self.perms.as_ref().is_some_and(|perms| {
                        commands.iter().any(|c| commands::lookup(&c[0]).is_some_and(|spec| perms.check(spec, c).is_err()))
                    }) =>
                {
                    let perms = self.perms.clone();
                    let refused = commands.iter().find_map(|c| {
                        let spec = commands::lookup(&c[0])?;
                        perms.as_ref()?.check_naming(spec, c).err()
                    });
                    if let Some((denied, object)) = refused {
                        self.log_refusal(&denied, object, true);
                    }
                    self.watched.clear();
                    Reply::error("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call; the transaction was discarded")
                }
                Some(commands) => {
                    let watched = std::mem::take(&mut self.watched);
                    let tracked = self.track_reads(commands.iter().map(|c| &c[..]));
                    // This node answers its own commands (TIME, INFO,
                    // CLIENT ...) in their places; the rest is one entry.
                    let here = |c: &Vec<Bytes>| commands::lookup(&c[0]).is_some_and(|s| answered_here(s, c));
                    let replicated: Vec<Vec<Bytes>> = commands.iter().filter(|c| !here(c)).cloned().collect();
                    let (reply, reflects) = self.on_leader_seen(Request::Transaction { watched, commands: replicated }).await;
                    self.reads_answered(tracked, reflects);
                    let reply = match reply {
                        Reply::Array(results) if commands.iter().any(here) => {
                            let mut results = results.into_iter();
                            let mut merged = Vec::with_capacity(commands.len());
                            for c in &commands {
                                match commands::lookup(&c[0]).filter(|s| answered_here(s, c)) {
                                    Some(spec) => merged.push(Box::pin(self.local(spec, c)).await.0.unwrap_or(Reply::Nil)),
                                    None => merged.push(results.next().unwrap_or(Reply::Nil)),
                                }
                            }
                            Reply::Array(merged)
                        }
                        other => other,
                    };
                    self.count_transaction(&commands, &reply);
                    reply
                }
            },
            "discard" => match self.multi.take() {
                None => Reply::error("ERR DISCARD without MULTI"),
                Some(_) => {
                    self.watched.clear();
                    Reply::ok()
                }
            },
            "unwatch" => {
                self.watched.clear();
                Reply::ok()
            }
            "command" => command(argv),
            "config" => self.config(argv),
            "acl" => self.acl(argv).await,
            // Every write is on disk (the log's fsync) before it is
            // acknowledged: what a client could ask LASTSAVE for is saved
            // as of now, as INFO's `rdb_changes_since_last_save:0` says.
            "lastsave" => Reply::Int(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64),
            ),
            // Redis's master with no replicas, as `INFO replication` says:
            // every node takes writes, and replication is Raft's
            // (`RAFT.INFO`), which no Redis client should manage.
            "cluster" | "readonly" | "readwrite" | "asking" => Reply::error("ERR This instance has cluster support disabled"),
            "debug" => Reply::error(
                "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.",
            ),
            "role" => Reply::Array(vec![Reply::text("master"), Reply::Int(0), Reply::Array(Vec::new())]),
            "module" => module(argv),
            "replicaof" | "slaveof" => replicaof(argv),
            "lolwut" => lolwut(argv),
            "wait" => wait(argv, false),
            "waitaof" => wait(argv, true),
            "time" => {
                let micros = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_micros())
                    .unwrap_or(0);
                Reply::Array(vec![
                    Reply::text(&(micros / 1_000_000).to_string()),
                    Reply::text(&(micros % 1_000_000).to_string()),
                ])
            }
            "subscribe" | "psubscribe" => {
                for target in &argv[1..] {
                    self.subscribe(spec.name == "psubscribe", target.clone());
                }
                self.command_without_reply();
                return (None, Next::Continue);
            }
            "unsubscribe" | "punsubscribe" => {
                self.unsubscribe(spec.name == "punsubscribe", &argv[1..]);
                self.command_without_reply();
                return (None, Next::Continue);
            }
            "ssubscribe" => {
                for target in &argv[1..] {
                    self.ssubscribe(target.clone());
                }
                self.command_without_reply();
                return (None, Next::Continue);
            }
            "sunsubscribe" => {
                self.sunsubscribe(&argv[1..]);
                self.command_without_reply();
                return (None, Next::Continue);
            }
            "pubsub" => {
                // Another client's SUBSCRIBE sent a moment before this may
                // have arrived in the same wake-up, and the runtime runs the
                // task woken last first: let it run before counting, so that
                // the counts see what was sent before (as Redis, which reads
                // its sockets in the order they became ready).
                for _ in 0..PUBSUB_YIELDS {
                    tokio::task::yield_now().await;
                }
                self.pubsub(argv)
            }
            other => Reply::error(format!("ERR '{other}' is not available on this connection")),
        };
        (Some(reply), Next::Continue)
    }

    /// Runs a request on the leader (here or forwarded); errors as replies.
    /// `ACL ...`: changes go through the log (every node enforces the same
    /// users); reads answer from this node's applied state.
    async fn acl(&mut self, argv: &[Bytes]) -> Reply {
        use commands::acl::{self as rules, AclOp};
        let sub = String::from_utf8_lossy(&argv[1]).to_ascii_lowercase();
        let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        let (_, table) = self.node.consensus.acl();
        let user_of = |name: &str| -> Option<crate::keyspace::acl::User> {
            if name == "default" {
                Some(self.node.auth.default_user(&table))
            } else {
                table.users.get(name).cloned()
            }
        };
        let mut names: Vec<String> = table.users.keys().cloned().collect();
        if !table.users.contains_key("default") {
            names.push("default".into());
            names.sort();
        }
        match (sub.as_str(), argv.len()) {
            ("setuser", n) if n >= 3 => {
                let name = text(&argv[2]);
                if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '\0') {
                    return Reply::error("ERR Usernames can't contain spaces or null characters");
                }
                let rules = match rules::merge_selector_args(&argv[3..]) {
                    Ok(rules) => rules,
                    Err(e) => return Reply::Error(format!("ERR {e}")),
                };
                // Checked here first, for the error text without a log write.
                let mut scratch = user_of(&name).unwrap_or_default();
                for rule in &rules {
                    if let Err(e) = rules::apply_rule(&mut scratch, rule) {
                        return Reply::Error(format!("ERR Error in ACL SETUSER modifier '{}': {e}", text(rule)));
                    }
                }
                // The built-in default (this node's password) becomes the
                // log's the first time it is changed: it starts from what it
                // is here, unless the log defined it first.
                let base = if name == "default" {
                    rules::describe(&self.node.auth.default_user(&table))
                        .split(' ')
                        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                        .collect()
                } else {
                    Vec::new()
                };
                self.acl_change(AclOp::SetUser { name, rules, base }).await
            }
            ("deluser", n) if n >= 3 => self.acl_change(AclOp::DelUser { names: argv[2..].iter().map(text).collect() }).await,
            ("getuser", 3) => user_of(&text(&argv[2])).map_or(Reply::Nil, |u| rules::getuser_reply(&u)),
            ("list", 2) => Reply::Array(
                names
                    .iter()
                    .filter_map(|n| user_of(n).map(|u| Reply::bulk(format!("user {n} {}", rules::describe(&u)))))
                    .collect(),
            ),
            ("users", 2) => Reply::Array(names.iter().map(|n| Reply::bulk(n.clone())).collect()),
            ("whoami", 2) => Reply::bulk(self.user.clone()),
            ("cat", 2) => Reply::Array(rules::CATEGORIES.iter().map(|c| Reply::bulk(*c)).collect()),
            ("cat", 3) => {
                let cat = text(&argv[2]).to_ascii_lowercase();
                if !rules::CATEGORIES.contains(&cat.as_str()) {
                    return Reply::Error(format!("ERR Unknown category '{cat}'"));
                }
                Reply::Array(
                    COMMANDS
                        .iter()
                        .filter(|c| rules::categories(c, None).contains(&cat.as_str()))
                        .map(|c| Reply::bulk(c.name))
                        .collect(),
                )
            }
            ("genpass", 2 | 3) => {
                let bits = match argv.get(2).map(|b| parse_i64(b)) {
                    None => 256,
                    Some(Some(b)) if (1..=4096).contains(&b) => b as usize,
                    Some(_) => return Reply::error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096"),
                };
                let mut bytes = vec![0u8; bits.div_ceil(8)];
                if crate::raft::fill_random(&mut bytes).is_err() {
                    return Reply::error("ERR no random bytes available");
                }
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                Reply::bulk(hex[..bits.div_ceil(4)].to_string())
            }
            ("dryrun", n) if n >= 4 => {
                let Some(u) = user_of(&text(&argv[2])) else {
                    return Reply::Error(format!("ERR User '{}' not found", text(&argv[2])));
                };
                let cmd = &argv[3..];
                let Some(spec) = commands::lookup(&cmd[0]) else {
                    return Reply::Error(format!("ERR Command '{}' not found", text(&cmd[0])));
                };
                if !spec.arity_ok(cmd.len()) {
                    return Reply::Error(format!("ERR wrong number of arguments for '{}' command", spec.name));
                }
                // Redis 7's texts, naming the key or channel refused.
                match rules::Perms::compile(&u).check_naming(spec, cmd) {
                    Ok(()) => Reply::ok(),
                    Err((rules::Denied::Command(name), _)) => {
                        Reply::bulk(format!("This user has no permissions to run the '{name}' command"))
                    }
                    Err((rules::Denied::Key, key)) => {
                        Reply::bulk(format!("This user has no permissions to access the '{}' key", text(&key)))
                    }
                    Err((rules::Denied::Channel, channel)) => {
                        Reply::bulk(format!("This user has no permissions to access the '{}' channel", text(&channel)))
                    }
                    // The command's own error when it runs, not the ACL's.
                    Err((rules::Denied::Option(_), _)) => Reply::ok(),
                }
            }
            ("load", 2) | ("save", 2) if self.node.config.aclfile.is_none() => Reply::error(
                "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.",
            ),
            ("load", 2) => {
                let path = self.node.config.aclfile.clone().unwrap_or_default();
                let contents = match tokio::fs::read_to_string(&path).await {
                    Ok(c) => c,
                    Err(e) => return Reply::Error(format!("ERR Error loading ACLs, opening file '{}': {e}", path.display())),
                };
                match rules::parse_acl_file(&contents) {
                    Ok(users) => self.acl_change(AclOp::Load { users }).await,
                    Err(e) => Reply::Error(format!("ERR /{}:{e}", path.display())),
                }
            }
            ("save", 2) => {
                let path = self.node.config.aclfile.clone().unwrap_or_default();
                let body = rules::acl_file(&table);
                match save_file(&path, body).await {
                    Ok(()) => Reply::ok(),
                    Err(e) => Reply::Error(format!("ERR There was an error trying to save the ACLs. Please check the server logs for more information ({e})")),
                }
            }
            ("log", 2 | 3) => self.node.acllog.command(&argv[2..]),
            ("help", 2) => Reply::Array(
                [
                    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "CAT [<category>]", "DELUSER <username> [<username> ...]", "DRYRUN <username> <command> [<arg> ...]",
                    "GETUSER <username>", "LIST", "USERS", "SETUSER <username> <attribute> [<attribute> ...]", "WHOAMI",
                    "LOG [<count> | RESET]", "GENPASS [<bits>]", "LOAD", "SAVE", "HELP",
                ]
                .iter()
                .map(|l| Reply::Status((*l).into()))
                .collect(),
            ),
            ("setuser" | "deluser" | "getuser" | "list" | "users" | "whoami" | "cat" | "genpass" | "dryrun" | "load" | "save" | "help" | "log", _) => {
                arity_error(&format!("acl|{sub}"))
            }
            _ => Reply::Error(format!("ERR unknown subcommand '{}'. Try ACL HELP.", text(&argv[1]))),
        }
    }

    /// Proposes an ACL change; this connection sees it (and its own
    /// permissions as they now are) before the reply.
    async fn acl_change(&mut self, op: commands::acl::AclOp) -> Reply {
        let before = self.node.consensus.acl_epoch();
        let reply = self
            .node
            .consensus
            .execute(self.id, Request::Acl(op))
            .await
            .unwrap_or_else(|e| Reply::Error(e.to_string()));
        // A follower applies the change a moment after the leader answered:
        // wait for it here, so that this client's next command (AUTH as the
        // new user, ACL GETUSER) sees it.
        let changed = matches!(&reply, Reply::Status(_)) || matches!(&reply, Reply::Int(n) if *n > 0);
        let deadline = Instant::now() + std::time::Duration::from_millis(self.node.config.request_timeout_ms);
        while changed && self.node.consensus.acl_epoch() == before && Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let (epoch, acl) = self.node.consensus.acl();
        self.refresh_perms(&acl, epoch);
        reply
    }

    /// Sends `request` to the leader; a user with limits sends it as
    /// itself, so the scripts it runs keep to its permissions.
    async fn on_leader(&self, request: Request) -> Reply {
        self.on_leader_seen(request).await.0
    }

    /// [`Connection::on_leader`], with the log index the reply reflects if
    /// another node answered (see [`crate::raft::Consensus::execute_seen`]).
    async fn on_leader_seen(&self, request: Request) -> (Reply, Option<u64>) {
        // Over `maxmemory`, the scripts' commands that may add data are
        // refused where the entry is applied (see Request::OverMaxmemory).
        let request = if self.node.memory.exceeded() && commands::request_runs_scripts(&request) {
            Request::OverMaxmemory(Box::new(request))
        } else {
            request
        };
        let request = match &self.perms {
            Some(_) => Request::AsUser { user: self.user.clone(), request: Box::new(request) },
            None => request,
        };
        let (outcome, reflects) = self.node.consensus.execute_seen(self.id, request).await;
        (outcome.unwrap_or_else(|e| Reply::Error(e.to_string())), reflects)
    }

    /// The reads of `tracked` (from [`Connection::track_reads`]) were
    /// answered, reflecting the log up to `reflects` when the leader
    /// answered: their tracking goes on as usual once this node has applied
    /// that far (entries before, applied here after the answer, would
    /// otherwise end it with a change the reader has already seen, and the
    /// next change would not be told).
    fn reads_answered(&self, tracked: Vec<Bytes>, reflects: Option<u64>) {
        if tracked.is_empty() {
            return;
        }
        let hub = &self.node.hub;
        if let Some(index) = reflects.filter(|_| !crate::planted::active(crate::planted::Bug::TrackingAnsweredEarly)) {
            let mut keys = Some(tracked);
            let applied = self.node.consensus.applied_or_later(index, || {
                hub.tracking.answered_at(index, self.id, keys.take().unwrap_or_default())
            });
            if let (true, Some(keys)) = (applied, keys) {
                hub.reads_answered(self.id, &keys);
            }
            return;
        }
        hub.reads_answered(self.id, &tracked);
    }

    /// Becomes `user` (just authenticated as it).
    fn set_user(&mut self, user: &str, acl: &crate::keyspace::acl::AclTable, epoch: u64) {
        self.user = user.to_string();
        self.node.clients.update(self.id, |c| c.user = user.to_string());
        self.refresh_perms(acl, epoch);
    }

    /// Brings the user's permissions up to date; false if the connection
    /// must end: its user was deleted, or it listens to channels it may no
    /// longer.
    fn acl_current(&mut self) -> bool {
        if !self.authenticated {
            return true;
        }
        let (epoch, acl) = self.node.consensus.acl();
        if !self.refresh_perms(&acl, epoch) {
            return false;
        }
        let Some(perms) = &self.perms else { return true };
        let allowed = |name: &str, target: &Bytes| {
            let spec = commands::lookup(name.as_bytes()).expect("in the table");
            perms.check(spec, &[Bytes::copy_from_slice(name.as_bytes()), target.clone()]).is_ok()
        };
        self.channels.iter().all(|c| allowed("subscribe", c))
            && self.patterns.iter().all(|p| allowed("psubscribe", p))
            && self.shard_channels.iter().all(|c| allowed("ssubscribe", c))
    }

    /// Works out the user's permissions from `acl` (numbered `epoch`);
    /// false if the user no longer exists.
    fn refresh_perms(&mut self, acl: &crate::keyspace::acl::AclTable, epoch: u64) -> bool {
        self.acl_epoch = epoch;
        let user = if self.user == "default" {
            self.node.auth.default_user(acl)
        } else {
            match acl.users.get(&self.user) {
                Some(u) => u.clone(),
                None => {
                    self.perms = Some(Arc::new(commands::acl::Perms::compile(&Default::default())));
                    return false;
                }
            }
        };
        let perms = commands::acl::Perms::compile(&user);
        self.perms = (!perms.unrestricted()).then(|| Arc::new(perms));
        true
    }

    /// `BLPOP`, `BRPOP`, `BLMOVE`, `BZPOPMIN` ... (the table's `blocking`
    /// commands): tries to pop through the log; while there is nothing to
    /// pop (the attempt replies nil), waits for a push to one of the keys
    /// (applied on this node, whoever made it), then tries again, until the
    /// timeout. `None` if the client went away while blocked.
    async fn blocking_pop(&mut self, spec: &CommandSpec, argv: Vec<Bytes>, frames: &mut Frames) -> Option<Reply> {
        // Listening before the first attempt: no push in between is missed.
        let keys: Vec<Bytes> = spec.keys(&argv).cloned().collect();
        let node = self.node.clone();
        let waiter = node.hub.wait_for_lists(&keys);
        let id = self.id;
        let _blocked = Blocked::new(&node, id);
        let mut deadline = None;
        let mut retry: Option<Vec<Bytes>> = None;
        let mut woken: Option<Bytes> = None;
        for attempt in 0u64.. {
            let this = retry.take().unwrap_or_else(|| argv.clone());
            let reply = self.on_leader(Request::Command(this)).await;
            if let (Some(_), Reply::Error(e)) = (woken.take(), &reply) {
                // Woken for a key that holds another type by now (a
                // transaction that pushed, deleted and set it): as Redis,
                // the client stays blocked until a value of its type comes.
                // Not a command with a destination (`BLMOVE`): its
                // WRONGTYPE may be the destination's, which is its reply.
                if e.starts_with("WRONGTYPE") && !matches!(spec.name, "brpoplpush" | "blmove") {
                    if let Some(end) = self.wait_blocked(&waiter.wake, deadline, frames).await {
                        return end;
                    }
                    woken = waiter.wake.take_first();
                    retry = woken.as_ref().and_then(|key| spec.with_key_first(&argv, key));
                    continue;
                }
            }
            if !matches!(reply, Reply::NilArray | Reply::Nil) {
                return Some(reply);
            }
            if attempt == 0 {
                // The first attempt checked every argument in Redis's order,
                // so the timeout parses. It comes just before the key count
                // in the commands that have one (BLMPOP, BZMPOP), last in
                // the others.
                let at = if spec.numkeys_at > 0 { spec.numkeys_at - 1 } else { argv.len() - 1 };
                let timeout = match commands::parse_block_timeout(&argv[at]) {
                    Ok(t) => t,
                    Err(e) => return Some(Reply::from(e)),
                };
                // A deadline over a year away is no deadline at all (and
                // needs no arithmetic that could overflow).
                const YEAR_SECS: f64 = 365.0 * 24.0 * 3600.0;
                deadline = (timeout > 0.0 && timeout < YEAR_SECS)
                    .then(|| tokio::time::Instant::now() + std::time::Duration::from_secs_f64(timeout));
            }
            if let Some(end) = self.wait_blocked(&waiter.wake, deadline, frames).await {
                return end;
            }
            woken = waiter.wake.take_first();
            retry = woken.as_ref().and_then(|key| spec.with_key_first(&argv, key));
        }
        None
    }

    /// A blocked command's wait for `wake`: `None` when woken (try again),
    /// else how the command ends. As Redis: a timeout answers a nil array
    /// (whatever the command answers when not blocking); a client that
    /// disconnects or is killed is unblocked with no reply (and nothing is
    /// taken for it); `CLIENT UNBLOCK` answers as a timeout or an error.
    async fn wait_blocked(
        &mut self,
        wake: &super::hub::ListWake,
        deadline: Option<tokio::time::Instant>,
        frames: &mut Frames,
    ) -> Option<Option<Reply>> {
        tokio::select! {
            _ = wake.notify.notified() => None,
            _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                Some(Some(Reply::NilArray))
            }
            _ = closed(frames, self.node.config.max_request_len) => Some(None),
            _ = self.kill.notified() => Some(None),
            reason = self.unblock.wait() => Some(Some(match reason {
                super::clients::Unblocked::Timeout => Reply::NilArray,
                super::clients::Unblocked::Error => Reply::error(super::clients::Unblocked::ERROR),
            })),
        }
    }

    /// `XREAD` and `XREADGROUP`: without `BLOCK`, one attempt. With it, while
    /// an attempt finds nothing (a nil reply), waits for an `XADD` to one of
    /// the streams (applied on this node, whoever made it) and tries again,
    /// until the timeout (milliseconds; 0 waits forever). `XREAD`'s `$` is
    /// the stream's last ID when the wait begins. `None` if the client went
    /// away while blocked.
    async fn blocking_stream_read(&mut self, spec: &CommandSpec, mut argv: Vec<Bytes>, frames: &mut Frames) -> Option<Reply> {
        let Some((Some(block_at), streams_at)) = commands::stream_read_layout(&argv) else {
            return Some(self.on_leader(Request::Command(argv)).await);
        };
        let timeout = match parse_i64(&argv[block_at + 1]) {
            None => return Some(Reply::error("ERR timeout is not an integer or out of range")),
            Some(ms) if ms < 0 => return Some(Reply::error("ERR timeout is negative")),
            Some(ms) => ms as u64,
        };
        let keys: Vec<Bytes> = spec.keys(&argv).cloned().collect();
        let node = self.node.clone();
        // Listening before the first attempt: no XADD in between is missed.
        let waiter = node.hub.wait_for_streams(&keys);
        let _blocked = Blocked::new(&node, self.id);
        if spec.name == "xread" {
            // `$`: the last ID now, read from the leader (a missing stream's is
            // 0-0). Any other error (a key of another type, no leader) is the
            // reply: a `$` left in place would be read again at each attempt,
            // and no entry would ever come after it.
            for (i, key) in keys.iter().enumerate() {
                let at = streams_at + 1 + keys.len() + i;
                if argv.get(at).is_some_and(|id| &id[..] == b"$") {
                    let info = Request::Command(vec![Bytes::from_static(b"XINFO"), Bytes::from_static(b"STREAM"), key.clone()]);
                    match self.on_leader(info).await {
                        Reply::Map(fields) => {
                            let last = fields.into_iter().find(|(k, _)| matches!(k, Reply::Bulk(b) if &b[..] == b"last-generated-id"));
                            if let Some((_, Reply::Bulk(id))) = last {
                                argv[at] = id;
                            }
                        }
                        Reply::Error(e) if e == "ERR no such key" => argv[at] = Bytes::from_static(b"0-0"),
                        Reply::Error(e) => return Some(Reply::Error(e)),
                        _ => {}
                    }
                }
            }
        }
        // A deadline over a year away is no deadline at all.
        const YEAR_MS: u64 = 365 * 24 * 3600 * 1000;
        let deadline = (timeout > 0 && timeout < YEAR_MS)
            .then(|| tokio::time::Instant::now() + std::time::Duration::from_millis(timeout));
        for attempt in 0u64.. {
            let reply = self.on_leader(Request::Command(argv.clone())).await;
            // A blocked XREADGROUP whose stream or group went away: Redis's
            // words for it (the key's type tells which).
            if let (true, Reply::Error(e)) = (attempt > 0 && spec.name == "xreadgroup", &reply) {
                if e.starts_with("NOGROUP") || e.starts_with("WRONGTYPE") {
                    let kind = Request::Command(vec![Bytes::from_static(b"TYPE"), keys[0].clone()]);
                    let stream = keys.len() == 1 && matches!(self.on_leader(kind).await, Reply::Status(t) if t == "stream");
                    return Some(Reply::error(if stream {
                        "NOGROUP the consumer group this client was blocked on no longer exists"
                    } else {
                        "UNBLOCKED the stream key no longer exists"
                    }));
                }
            }
            // A stream that became another type: `XREAD` stays blocked, as
            // on Redis, until a stream is there again.
            let wrong_type = attempt > 0 && matches!(&reply, Reply::Error(e) if e.starts_with("WRONGTYPE"));
            if !matches!(reply, Reply::NilArray) && !wrong_type {
                return Some(reply);
            }
            if let Some(end) = self.wait_blocked(&waiter.wake, deadline, frames).await {
                return end;
            }
            waiter.wake.take_first();
        }
        None
    }

    /// `WATCH key [key ...]`: remembers the version of each key's last write.
    async fn watch(&mut self, argv: Vec<Bytes>) -> Reply {
        if self.multi.is_some() {
            return Reply::error("ERR WATCH inside MULTI is not allowed");
        }
        let keys: Vec<Bytes> = argv[1..].to_vec();
        match self.on_leader(Request::Command(argv)).await {
            Reply::Array(versions) if versions.len() == keys.len() => {
                for (key, v) in keys.into_iter().zip(versions) {
                    if let Reply::Int(v) = v {
                        self.watched.push((key, v as u64));
                    }
                }
                Reply::ok()
            }
            Reply::Error(e) => Reply::Error(e),
            other => Reply::error(format!("ERR unexpected WATCH result: {other:?}")),
        }
    }

    /// `HELLO [protover [AUTH username password] [SETNAME clientname]]`
    fn hello(&mut self, argv: &[Bytes]) -> Reply {
        let mut resp3 = self.resp3;
        let mut i = 1;
        if let Some(ver) = argv.get(1) {
            match parse_i64(ver) {
                Some(2) => resp3 = false,
                Some(3) => resp3 = true,
                Some(_) => return Reply::error("NOPROTO unsupported protocol version"),
                None => return Reply::error("ERR Protocol version is not an integer or out of range"),
            }
            i = 2;
        }
        let mut name = None;
        let mut authenticated = self.authenticated;
        let mut as_user = None;
        let (epoch, acl) = self.node.consensus.acl();
        while i < argv.len() {
            let opt = String::from_utf8_lossy(&argv[i]).to_ascii_uppercase();
            match opt.as_str() {
                "AUTH" if i + 2 < argv.len() => {
                    match self.node.auth.check(Some(&argv[i + 1][..]), &argv[i + 2], &acl) {
                        Ok(user) => as_user = Some(user),
                        Err(refused) => {
                            self.log_failed_auth(&refused, &argv[0], &argv[i + 1]);
                            return refused;
                        }
                    }
                    authenticated = true;
                    i += 3;
                }
                "SETNAME" if i + 1 < argv.len() => {
                    if let Err(e) = valid_client_name(&argv[i + 1]) {
                        return e;
                    }
                    name = Some(String::from_utf8_lossy(&argv[i + 1]).into_owned());
                    i += 2;
                }
                _ => return Reply::error(format!("ERR Syntax error in HELLO option '{opt}'")),
            }
        }
        if !authenticated {
            return Reply::error(super::auth::NOAUTH_HELLO);
        }
        self.authenticated = true;
        if let Some(user) = as_user {
            self.set_user(&user, &acl, epoch);
        }
        self.resp3 = resp3;
        self.node.clients.update(self.id, |c| {
            c.resp = if resp3 { 3 } else { 2 };
            if let Some(n) = name {
                c.name = n;
            }
        });
        Reply::Map(vec![
            (Reply::text("server"), Reply::text("redis")),
            (Reply::text("version"), Reply::text(REDIS_VERSION)),
            (Reply::text("proto"), Reply::Int(if resp3 { 3 } else { 2 })),
            (Reply::text("id"), Reply::Int(self.id as i64)),
            (Reply::text("mode"), Reply::text("standalone")),
            (Reply::text("role"), Reply::text("master")),
            (Reply::text("modules"), Reply::Array(vec![])),
        ])
    }

    fn client(&mut self, argv: &[Bytes]) -> Reply {
        let sub = String::from_utf8_lossy(&argv[1]).to_ascii_uppercase();
        let n = argv.len();
        let wrong = || arity_error(&format!("client|{}", sub.to_ascii_lowercase()));
        match sub.as_str() {
            "ID" if n == 2 => Reply::Int(self.id as i64),
            "SETNAME" if n == 3 => match valid_client_name(&argv[2]) {
                Err(e) => e,
                Ok(()) => {
                    let name = String::from_utf8_lossy(&argv[2]).into_owned();
                    self.node.clients.update(self.id, |c| c.name = name);
                    Reply::ok()
                }
            },
            "GETNAME" if n == 2 => match self.node.clients.get(self.id) {
                Some(c) if !c.name.is_empty() => Reply::text(&c.name),
                _ => Reply::Nil,
            },
            "SETINFO" if n == 4 => {
                let attr = String::from_utf8_lossy(&argv[2]).to_ascii_uppercase();
                let value = String::from_utf8_lossy(&argv[3]).into_owned();
                if value.chars().any(|c| c == ' ' || c == '\n' || c == '\r') {
                    return Reply::error(format!("ERR {attr} cannot contain spaces, newlines or special characters."));
                }
                match attr.as_str() {
                    "LIB-NAME" => self.node.clients.update(self.id, |c| c.lib_name = value),
                    "LIB-VER" => self.node.clients.update(self.id, |c| c.lib_ver = value),
                    _ => return Reply::error(format!("ERR Unrecognized option '{}'", String::from_utf8_lossy(&argv[2]))),
                }
                Reply::ok()
            }
            "INFO" if n == 2 => match self.node.clients.get(self.id) {
                Some(c) => Reply::Verbatim(format!("{}\n", c.line())),
                None => Reply::Nil,
            },
            "LIST" => match super::clients::ListFilter::parse(&argv[2..]) {
                Err(e) => Reply::error(e),
                Ok(filter) => {
                    let lines: String = filter.select(self.node.clients.all()).iter().map(|c| format!("{}\n", c.line())).collect();
                    Reply::Verbatim(lines)
                }
            },
            "REPLY" if n == 3 => {
                match argv[2].to_ascii_lowercase().as_slice() {
                    b"on" => self.silence = Silence::None,
                    b"off" => self.silence = Silence::Off,
                    // Its own reply and the next command's; while off, off.
                    b"skip" if self.silence != Silence::Off => self.silence = Silence::Skip(2),
                    b"skip" => {}
                    _ => return Reply::error("ERR syntax error"),
                }
                Reply::ok()
            }
            // Eviction and LRU/LFU touches do not exist here: either answer is fine.
            "NO-EVICT" | "NO-TOUCH" if n == 3 => match argv[2].to_ascii_lowercase().as_slice() {
                b"on" | b"off" => Reply::ok(),
                _ => Reply::error("ERR syntax error"),
            },
            "KILL" if n >= 3 => match super::clients::KillFilter::parse(&argv[2..], self.id) {
                Err(e) => Reply::error(e),
                Ok(filter) if filter.user().is_some_and(|u| u != "default" && !self.node.consensus.acl().1.users.contains_key(u)) => {
                    Reply::error(format!("ERR No such user '{}'", filter.user().unwrap_or_default()))
                }
                Ok(filter) => {
                    let killed = self.node.clients.kill(|c| filter.matches(c));
                    match (filter.old_form, killed) {
                        (true, 0) => Reply::error("ERR No such client"),
                        (true, _) => Reply::ok(),
                        (false, n) => Reply::Int(n as i64),
                    }
                }
            },
            "PAUSE" if n == 3 || n == 4 => {
                let all = match argv.get(3).map(|m| m.to_ascii_lowercase()) {
                    None => true,
                    Some(m) if m == b"all" => true,
                    Some(m) if m == b"write" => false,
                    Some(_) => return Reply::error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
                };
                match parse_i64(&argv[2]) {
                    None => Reply::error("ERR timeout is not an integer or out of range"),
                    Some(ms) if ms < 0 => Reply::error("ERR timeout is negative"),
                    Some(ms) => {
                        // Past any real deadline: as good as forever.
                        let now = tokio::time::Instant::now();
                        let until = now
                            .checked_add(std::time::Duration::from_millis(ms as u64))
                            .unwrap_or(now + std::time::Duration::from_secs(100 * 365 * 24 * 3600));
                        self.node.pause.pause(until, all);
                        Reply::ok()
                    }
                }
            }
            "UNPAUSE" if n == 2 => {
                self.node.pause.unpause();
                Reply::ok()
            }
            "UNBLOCK" if n == 3 || n == 4 => {
                use super::clients::Unblocked;
                let reason = match argv.get(3).map(|r| r.to_ascii_lowercase()) {
                    None => Unblocked::Timeout,
                    Some(r) if r == b"timeout" => Unblocked::Timeout,
                    Some(r) if r == b"error" => Unblocked::Error,
                    Some(_) => return Reply::error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
                };
                match parse_i64(&argv[2]) {
                    None => Reply::error("ERR value is not an integer or out of range"),
                    Some(id) => Reply::Int(u64::try_from(id).is_ok_and(|id| self.node.clients.unblock(id, reason)) as i64),
                }
            }
            "TRACKING" if n >= 3 => {
                let clients = &self.node.clients;
                match super::tracking::parse_tracking(&argv[1..], |id| clients.get(id).is_some()) {
                    Err(e) => Reply::error(e),
                    Ok(None) => {
                        self.node.hub.tracking.disable(self.id);
                        self.tracking = None;
                        Reply::ok()
                    }
                    Ok(Some(mode)) => {
                        self.node.hub.tracking.enable(self.id, mode.clone(), &self.subscriber);
                        self.tracking = Some(mode);
                        Reply::ok()
                    }
                }
            }
            "CACHING" if n == 3 => {
                let value = match argv[2].to_ascii_lowercase().as_slice() {
                    b"yes" => true,
                    b"no" => false,
                    _ => return Reply::error("ERR syntax error"),
                };
                match &self.tracking {
                    Some(m) if (m.optin && value) || (m.optout && !value) => {
                        self.caching = Some(value);
                        Reply::ok()
                    }
                    Some(m) if m.optin || m.optout => Reply::error(if m.optin {
                        "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
                    } else {
                        "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
                    }),
                    _ => Reply::error(
                        "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
                    ),
                }
            }
            "GETREDIR" if n == 2 => Reply::Int(match &self.tracking {
                None => -1,
                Some(m) => m.redirect.map_or(0, |id| id as i64),
            }),
            "TRACKINGINFO" if n == 2 => {
                let (flags, redirect, prefixes) = match &self.tracking {
                    None => (vec!["off"], -1, vec![]),
                    Some(m) => {
                        let mut flags = vec!["on"];
                        for (set, name) in [(m.bcast, "bcast"), (m.optin, "optin"), (m.optout, "optout"), (m.noloop, "noloop")] {
                            if set {
                                flags.push(name);
                            }
                        }
                        match self.caching {
                            Some(true) => flags.push("caching-yes"),
                            Some(false) => flags.push("caching-no"),
                            None => {}
                        }
                        (flags, m.redirect.map_or(0, |id| id as i64), m.prefixes.clone())
                    }
                };
                Reply::Map(vec![
                    (Reply::text("flags"), Reply::Set(flags.into_iter().map(Reply::text).collect())),
                    (Reply::text("redirect"), Reply::Int(redirect)),
                    (Reply::text("prefixes"), Reply::Array(prefixes.into_iter().map(Reply::Bulk).collect())),
                ])
            }
            "HELP" => Reply::Array(
                [
                    "CLIENT <subcommand> [<arg> ...]. Subcommands are:",
                    "ID, GETNAME, SETNAME <name>, SETINFO LIB-NAME|LIB-VER <value>, INFO, LIST,",
                    "NO-EVICT|NO-TOUCH|REPLY <on|off>, TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST]",
                    "[OPTIN] [OPTOUT] [NOLOOP], CACHING yes|no, GETREDIR, TRACKINGINFO,",
                    "KILL addr | KILL [ID id] [ADDR addr] [LADDR addr] [USER name] [TYPE normal|pubsub] [SKIPME yes|no],",
                    "UNBLOCK <clientid> [TIMEOUT|ERROR], PAUSE <timeout> [WRITE|ALL], UNPAUSE, HELP",
                ]
                .iter()
                .map(|s| Reply::Status(s.to_string()))
                .collect(),
            ),
            // Their arity is at least 3 (Redis's table): more than they take
            // is Redis's syntax error.
            "UNBLOCK" | "PAUSE" if n > 4 => Reply::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(&argv[1])
            )),
            "ID" | "SETNAME" | "GETNAME" | "SETINFO" | "INFO" | "NO-EVICT" | "NO-TOUCH" | "REPLY" | "KILL" | "TRACKING" | "CACHING"
            | "GETREDIR" | "TRACKINGINFO" | "UNBLOCK" | "PAUSE" | "UNPAUSE" => wrong(),
            _ => Reply::error(format!(
                "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(&argv[1])
            )),
        }
    }

    fn config(&mut self, argv: &[Bytes]) -> Reply {
        let sub = String::from_utf8_lossy(&argv[1]).to_ascii_uppercase();
        match sub.as_str() {
            "GET" if argv.len() >= 3 => {
                let mut params = self.config_params();
                params.extend(self.node.params.all());
                let mut pairs: Vec<(String, String)> = Vec::new();
                for pattern in &argv[2..] {
                    let pattern = String::from_utf8_lossy(pattern);
                    let lower = pattern.to_ascii_lowercase();
                    let is_glob = lower.contains(['*', '?', '[']);
                    for (name, value) in &params {
                        // As Redis: an exact name is answered under the
                        // name as the client wrote it.
                        let (hit, shown) = if is_glob {
                            (crate::keyspace::glob_match(lower.as_bytes(), name.as_bytes()), name.to_string())
                        } else {
                            (lower == *name, pattern.to_string())
                        };
                        if hit && !pairs.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                            pairs.push((shown, value.clone()));
                        }
                    }
                }
                Reply::Map(pairs.into_iter().map(|(n, v)| (Reply::text(&n), Reply::text(&v))).collect())
            }
            "SET" if argv.len() >= 4 && argv.len() % 2 == 1 => Reply::from(crate::commands::CmdError::Arg(crate::protocol::ArgError::Syntax)),
            "SET" if argv.len() >= 4 => {
                let failed = |name: &str, why: &str| {
                    Reply::error(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"))
                };
                // As Redis, every name is known and named once, and every
                // stored value is valid, before anything changes.
                let honoured = self.config_params();
                let mut seen: Vec<&str> = Vec::new();
                let mut stored: Vec<(String, String)> = Vec::new();
                for pair in argv[2..].chunks(2) {
                    let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                    let canonical = match super::params::StoredParams::canonical(&name) {
                        Some(c) => c,
                        None => match honoured.iter().find(|(n, _)| *n == name) {
                            Some((n, _)) => n,
                            None if name == "requirepass" => "requirepass",
                            None => {
                                return Reply::error(format!(
                                    "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                                ))
                            }
                        },
                    };
                    if seen.contains(&canonical) {
                        return failed(&name, "duplicate parameter");
                    }
                    seen.push(canonical);
                    if super::params::StoredParams::canonical(&name).is_some() {
                        match super::params::StoredParams::check(&name, &String::from_utf8_lossy(&pair[1])) {
                            Ok(value) => stored.push((name, value)),
                            Err(why) => return failed(&name, &why),
                        }
                    }
                }
                // The TLS files change together (a new certificate with its
                // key), once every argument is read.
                let mut tls_edits: Vec<(String, String)> = Vec::new();
                for pair in argv[2..].chunks(2) {
                    let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                    if super::params::StoredParams::canonical(&name).is_some() {
                        continue;
                    }
                    let value = String::from_utf8_lossy(&pair[1]).into_owned();
                    let result = match (name.as_str(), &self.node.tls) {
                        ("tls-cert-file" | "tls-key-file" | "tls-ca-cert-file" | "tls-auth-clients", Some(_)) => {
                            // Checked now, applied below.
                            set_tls_file(&mut crate::tls::TlsFiles::placeholder(), &name, &value).map(|()| {
                                tls_edits.push((name.clone(), value.clone()));
                            })
                        }
                        _ => self.config_set(&name, &value),
                    };
                    if let Err(e) = result {
                        return Reply::error(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{name}') - {e}"
                        ));
                    }
                }
                if let (Some((last, _)), Some(tls)) = (tls_edits.last(), &self.node.tls) {
                    let last = last.clone();
                    let edit = |files: &mut crate::tls::TlsFiles| {
                        tls_edits.iter().try_for_each(|(name, value)| set_tls_file(files, name, value))
                    };
                    if let Err(e) = tls.update(edit) {
                        return Reply::error(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{last}') - Unable to update TLS configuration. {e}"
                        ));
                    }
                    tracing::info!("CONFIG SET: TLS certificates reloaded");
                }
                for (name, value) in stored {
                    self.node.slowlog.configure(&name, &value);
                    self.node.latency.configure(&name, &value);
                    self.node.acllog.configure(&name, &value);
                    self.node.params.set(&name, value);
                }
                Reply::ok()
            }
            "RESETSTAT" if argv.len() == 2 => {
                self.node.acllog.reset_counts();
                self.node.stats.reset();
                self.node.latency.reset_histograms();
                self.node.total_commands.store(0, Ordering::Relaxed);
                self.node.total_connections.store(0, Ordering::Relaxed);
                Reply::ok()
            }
            "REWRITE" if argv.len() == 2 => Reply::error("ERR The server is running without a config file"),
            "GET" | "SET" | "RESETSTAT" | "REWRITE" => arity_error(&format!("config|{}", sub.to_ascii_lowercase())),
            _ => Reply::error(format!(
                "ERR unknown subcommand '{}'. Try CONFIG HELP.",
                String::from_utf8_lossy(&argv[1])
            )),
        }
    }

    fn config_params(&self) -> Vec<(&'static str, String)> {
        let c = &self.node.config;
        let tls = self.node.tls.as_ref().map(|t| t.files());
        vec![
            ("maxclients", self.node.maxclients.load(Ordering::Relaxed).to_string()),
            ("notify-keyspace-events", format_notify_flags(self.node.hub.notify_flags())),
            ("port", c.port.to_string()),
            ("bind", c.bind.clone()),
            ("dir", c.data_dir.display().to_string()),
            ("databases", "1".into()),
            // Every write is in the fsynced Raft log before it is acknowledged.
            ("appendonly", "yes".into()),
            ("appendfsync", "always".into()),
            ("save", String::new()),
            ("timeout", self.node.idle_timeout_secs.load(Ordering::Relaxed).to_string()),
            ("proto-max-bulk-len", c.proto_max_bulk_len.to_string()),
            ("maxmemory", self.node.memory.limit().to_string()),
            ("maxmemory-policy", "noeviction".into()),
            ("min-free-disk", self.node.consensus.disk().reserve().to_string()),
            ("cluster-enabled", "no".into()),
            ("protected-mode", if self.node.auth.protected_mode() { "yes" } else { "no" }.into()),
            ("aclfile", c.aclfile.as_ref().map(|p| p.display().to_string()).unwrap_or_default()),
            ("client-output-buffer-limit", {
                let (nh, ns, nt) = self.node.hub.normal_limit().get();
                let (ph, ps, pt) = self.node.hub.pubsub_limit().get();
                format!("normal {nh} {ns} {nt} slave 268435456 67108864 60 pubsub {ph} {ps} {pt}")
            }),
            ("tls-port", c.tls_port.to_string()),
            ("tls-cluster", if c.tls_cluster { "yes" } else { "no" }.into()),
            ("tls-cert-file", tls.as_ref().map(|f| f.cert.display().to_string()).unwrap_or_default()),
            ("tls-key-file", tls.as_ref().map(|f| f.key.display().to_string()).unwrap_or_default()),
            (
                "tls-ca-cert-file",
                tls.as_ref().and_then(|f| f.ca.as_ref()).map(|p| p.display().to_string()).unwrap_or_default(),
            ),
            ("tls-auth-clients", tls.as_ref().map_or(c.tls_auth_clients, |f| f.auth_clients).as_str().into()),
        ]
    }

    fn config_set(&self, name: &str, value: &str) -> Result<(), String> {
        match name {
            "notify-keyspace-events" => {
                let flags = parse_notify_flags(value)
                    .ok_or("Invalid event class character. Use 'Ag$lshzxeKEtmdnL'.")?;
                self.node.hub.set_notify_flags(flags);
                Ok(())
            }
            // Not in CONFIG GET: only its digest is kept.
            "requirepass" => {
                if self.node.consensus.acl().1.users.contains_key("default") {
                    return Err("the default user is defined through ACL for the whole cluster: use ACL SETUSER default resetpass >password".into());
                }
                self.node.auth.set_password(Some(value));
                Ok(())
            }
            "protected-mode" => {
                self.node.auth.set_protected_mode(crate::config::parse_yes_no(value)?);
                Ok(())
            }
            "maxmemory" => {
                let bytes = super::memory::parse_bytes(value).ok_or("argument must be a memory value")?;
                self.node.memory.set_limit(bytes);
                Ok(())
            }
            // This node's only: as --min-free-disk.
            "min-free-disk" => {
                let bytes = super::memory::parse_bytes(value).ok_or("argument must be a memory value")?;
                self.node.consensus.disk().set_reserve(bytes);
                self.node.consensus.disk().guard_snapshots();
                Ok(())
            }
            "maxmemory-policy" => {
                const POLICIES: &[&str] = &[
                    "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru", "allkeys-lfu",
                    "allkeys-random", "noeviction",
                ];
                match value.to_ascii_lowercase().as_str() {
                    "noeviction" => Ok(()),
                    known if POLICIES.contains(&known) => {
                        Err("raftlock never evicts a key (a lock must not vanish to make room): only noeviction is supported".into())
                    }
                    _ => Err(format!("argument(s) must be one of the following: {}", POLICIES.join(", "))),
                }
            }
            "timeout" => {
                let secs: i64 = value.parse().map_err(|_| "argument couldn't be parsed into an integer")?;
                if !(0..=i64::from(i32::MAX)).contains(&secs) {
                    return Err("argument must be between 0 and 2147483647 inclusive".into());
                }
                self.node.idle_timeout_secs.store(secs as u64, Ordering::Relaxed);
                Ok(())
            }
            "client-output-buffer-limit" => {
                // Groups of <class> <hard> <soft> <soft-seconds>. There are
                // no replicas: that class is accepted and does nothing.
                let words: Vec<&str> = value.split_whitespace().collect();
                if words.is_empty() || words.len() % 4 != 0 {
                    return Err("Wrong number of arguments in buffer limit configuration.".into());
                }
                let (mut pubsub, mut normal) = (None, None);
                for group in words.chunks(4) {
                    let class = group[0].to_ascii_lowercase();
                    if !matches!(class.as_str(), "normal" | "replica" | "slave" | "pubsub") {
                        return Err("Invalid client class specified in buffer limit configuration.".into());
                    }
                    let hard = super::memory::parse_bytes(group[1]);
                    let soft = super::memory::parse_bytes(group[2]);
                    let secs = group[3].parse::<u64>().ok();
                    let (Some(hard), Some(soft), Some(secs)) = (hard, soft, secs) else {
                        return Err("Error in hard, soft or soft_seconds setting in buffer limit configuration.".into());
                    };
                    match class.as_str() {
                        "pubsub" => pubsub = Some((hard, soft, secs)),
                        "normal" => normal = Some((hard, soft, secs)),
                        _ => {}
                    }
                }
                pubsub.into_iter().for_each(|l| self.node.hub.pubsub_limit().set(l));
                normal.into_iter().for_each(|l| self.node.hub.normal_limit().set(l));
                Ok(())
            }
            "maxclients" => {
                let n: usize = value.parse().ok().filter(|n| *n > 0).ok_or("argument must be a positive integer")?;
                self.node.maxclients.store(n, Ordering::Relaxed);
                Ok(())
            }
            _ if self.config_params().iter().any(|(n, _)| *n == name) => Err("can't set immutable config".into()),
            _ => Err(format!("Unknown option or number of arguments for CONFIG SET - '{name}'")),
        }
    }

    fn subscribe(&mut self, pattern: bool, target: Bytes) {
        let hub = &self.node.hub;
        if pattern {
            if self.patterns.insert(target.clone()) {
                hub.psubscribe(self.id, &self.subscriber, &target);
            }
        } else if self.channels.insert(target.clone()) {
            hub.subscribe(self.id, &self.subscriber, &target);
        }
        self.sync_counts();
        let kind = if pattern { "psubscribe" } else { "subscribe" };
        let count = (self.channels.len() + self.patterns.len()) as i64;
        self.reply(&Reply::Push(vec![Reply::text(kind), Reply::Bulk(target), Reply::Int(count)]));
    }

    fn unsubscribe(&mut self, pattern: bool, targets: &[Bytes]) {
        let kind = if pattern { "punsubscribe" } else { "unsubscribe" };
        let mut targets: Vec<Bytes> = targets.to_vec();
        if targets.is_empty() {
            let set = if pattern { &self.patterns } else { &self.channels };
            targets = set.iter().cloned().collect();
            targets.sort();
            if targets.is_empty() {
                let count = (self.channels.len() + self.patterns.len()) as i64;
                self.reply(&Reply::Push(vec![Reply::text(kind), Reply::Nil, Reply::Int(count)]));
                return;
            }
        }
        for target in targets {
            if pattern {
                if self.patterns.remove(&target) {
                    self.node.hub.punsubscribe(self.id, &target);
                }
            } else if self.channels.remove(&target) {
                self.node.hub.unsubscribe(self.id, &target);
            }
            let count = (self.channels.len() + self.patterns.len()) as i64;
            self.reply(&Reply::Push(vec![Reply::text(kind), Reply::Bulk(target), Reply::Int(count)]));
        }
        self.sync_counts();
    }

    /// `SSUBSCRIBE`: shard channels count apart from the others, as in
    /// Redis 7.0.
    fn ssubscribe(&mut self, target: Bytes) {
        if self.shard_channels.insert(target.clone()) {
            self.node.hub.ssubscribe(self.id, &self.subscriber, &target);
        }
        self.sync_counts();
        let count = self.shard_channels.len() as i64;
        self.reply(&Reply::Push(vec![Reply::text("ssubscribe"), Reply::Bulk(target), Reply::Int(count)]));
    }

    fn sunsubscribe(&mut self, targets: &[Bytes]) {
        let mut targets: Vec<Bytes> = targets.to_vec();
        if targets.is_empty() {
            targets = self.shard_channels.iter().cloned().collect();
            targets.sort();
            if targets.is_empty() {
                let count = self.shard_channels.len() as i64;
                self.reply(&Reply::Push(vec![Reply::text("sunsubscribe"), Reply::Nil, Reply::Int(count)]));
                return;
            }
        }
        for target in targets {
            if self.shard_channels.remove(&target) {
                self.node.hub.sunsubscribe(self.id, &target);
            }
            let count = self.shard_channels.len() as i64;
            self.reply(&Reply::Push(vec![Reply::text("sunsubscribe"), Reply::Bulk(target), Reply::Int(count)]));
        }
        self.sync_counts();
    }

    fn unsubscribe_all(&mut self) {
        for ch in self.channels.drain() {
            self.node.hub.unsubscribe(self.id, &ch);
        }
        for ch in self.shard_channels.drain() {
            self.node.hub.sunsubscribe(self.id, &ch);
        }
        for p in self.patterns.drain() {
            self.node.hub.punsubscribe(self.id, &p);
        }
        self.sync_counts();
    }

    fn sync_counts(&self) {
        let (channels, patterns, shard) = (self.channels.len(), self.patterns.len(), self.shard_channels.len());
        self.node.clients.update(self.id, |c| {
            c.channels = channels;
            c.patterns = patterns;
            c.shard_channels = shard;
        });
    }

    fn pubsub(&self, argv: &[Bytes]) -> Reply {
        let sub = String::from_utf8_lossy(&argv[1]).to_ascii_uppercase();
        let hub = &self.node.hub;
        match sub.as_str() {
            // Shard channels are a namespace of their own, asked the same way.
            "CHANNELS" | "SHARDCHANNELS" if argv.len() <= 3 => {
                let pattern = argv.get(2).map(|p| &p[..]);
                let names = if sub == "CHANNELS" { hub.channels(pattern) } else { hub.shard_channels(pattern) };
                Reply::Array(names.into_iter().map(Reply::Bulk).collect())
            }
            "NUMSUB" | "SHARDNUMSUB" => Reply::Array(
                argv[2..]
                    .iter()
                    .flat_map(|ch| {
                        let n = if sub == "NUMSUB" { hub.numsub(ch) } else { hub.shard_numsub(ch) };
                        [Reply::Bulk(ch.clone()), Reply::Int(n as i64)]
                    })
                    .collect(),
            ),
            "NUMPAT" if argv.len() == 2 => Reply::Int(hub.numpat() as i64),
            "NUMPAT" => arity_error("pubsub|numpat"),
            // Redis's own check of these subcommands' arguments.
            "CHANNELS" | "SHARDCHANNELS" => Reply::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
                String::from_utf8_lossy(&argv[1])
            )),
            _ => Reply::error(format!(
                "ERR unknown subcommand '{}'. Try PUBSUB HELP.",
                String::from_utf8_lossy(&argv[1])
            )),
        }
    }
}

/// Writes `body` to `path` whole or not at all (a temporary file renamed
/// over it), off the runtime's threads.
async fn save_file(path: &std::path::Path, body: String) -> std::io::Result<()> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, body)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &path)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Writes `bytes` and flushes: a TLS session may hold the end of what it
/// was given until flushed (plain TCP flushes at once).
async fn send(writer: &mut Writer, bytes: &[u8]) -> std::io::Result<()> {
    writer.write_all(bytes).await?;
    writer.flush().await
}

/// `LOLWUT [VERSION v [size ...]]`: Redis's version line (raftlock draws
/// nothing), after the arguments' checks Redis makes: `v` an integer, and
/// the sizes of versions 5 and 6 (the ones that draw) integers too.
fn lolwut(argv: &[Bytes]) -> Reply {
    const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
    if argv.len() >= 3 && argv[1].eq_ignore_ascii_case(b"version") {
        let Some(version) = parse_i64(&argv[2]) else { return Reply::error(NOT_AN_INTEGER) };
        if matches!(version, 5 | 6) && argv[3..].iter().any(|a| parse_i64(a).is_none()) {
            return Reply::error(NOT_AN_INTEGER);
        }
    }
    Reply::Verbatim(format!("Redis ver. {REDIS_VERSION}\n"))
}

/// One `CONFIG SET tls-…` argument, applied to the files to load.
fn set_tls_file(files: &mut crate::tls::TlsFiles, name: &str, value: &str) -> Result<(), String> {
    match name {
        "tls-cert-file" => files.cert = value.into(),
        "tls-key-file" => files.key = value.into(),
        "tls-ca-cert-file" => files.ca = (!value.is_empty()).then(|| value.into()),
        _ => files.auth_clients = crate::tls::ClientAuth::parse(value)?,
    }
    Ok(())
}

/// Completes when the client closes the connection (or it fails), while a
/// command of it is blocked. What the client pipelines meanwhile is read
/// into the request buffer, where it waits until the blocked command is
/// answered, so that a disconnect behind it is still seen; past `limit`
/// buffered bytes reading stops (and this never completes). Cancel-safe.
async fn closed(frames: &mut Frames, limit: usize) {
    let mut chunk = [0u8; 4096];
    loop {
        if frames.read_buffer().len() > limit {
            return std::future::pending().await;
        }
        match frames.get_mut().read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => frames.read_buffer_mut().extend_from_slice(&chunk[..n]),
        }
    }
}

/// Marks a client as blocked (`CLIENT LIST` flag `b`, `INFO`'s
/// `blocked_clients`) for as long as it lives.
pub(super) struct Blocked<'a> {
    node: &'a Node,
    id: u64,
}

impl<'a> Blocked<'a> {
    pub(super) fn new(node: &'a Node, id: u64) -> Self {
        node.clients.set_blocked(id, true);
        Blocked { node, id }
    }
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        self.node.clients.set_blocked(self.id, false);
    }
}

fn valid_client_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(Reply::error("ERR Client names cannot contain spaces, newlines or special characters."));
    }
    Ok(())
}

/// Times `PUBSUB` yields before it counts (see its call).
const PUBSUB_YIELDS: usize = 3;

/// How long `SAVE` waits for its snapshot (10 M keys take about 6 s).
const SAVE_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// `COMMAND`, `COMMAND COUNT|LIST|INFO|DOCS`, from the one command table.
fn command(argv: &[Bytes]) -> Reply {
    let Some(sub) = argv.get(1) else {
        return Reply::Array(COMMANDS.iter().map(command_info).collect());
    };
    let sub = String::from_utf8_lossy(sub).to_ascii_uppercase();
    let named = || argv[2..].iter().map(|n| (n, commands::lookup(n)));
    match sub.as_str() {
        "COUNT" if argv.len() == 2 => Reply::Int(COMMANDS.len() as i64),
        "LIST" => command_list(&argv[2..]),
        "INFO" if argv.len() == 2 => Reply::Array(COMMANDS.iter().map(command_info).collect()),
        "INFO" => Reply::Array(
            named()
                .map(|(name, c)| match c {
                    Some(c) => command_info(c),
                    None => commands::lookup_subcommand(name)
                        .map_or(Reply::Nil, |(container, sub)| commands::subcommand_info(container, sub)),
                })
                .collect(),
        ),
        "DOCS" if argv.len() == 2 => {
            Reply::Map(COMMANDS.iter().map(|c| (Reply::text(c.name), command_docs(c))).collect())
        }
        "DOCS" => Reply::Map(
            named().filter_map(|(_, c)| c).map(|c| (Reply::text(c.name), command_docs(c))).collect(),
        ),
        "GETKEYS" if argv.len() >= 4 => command_getkeys(&argv[2..], false),
        "GETKEYS" => arity_error("command|getkeys"),
        "GETKEYSANDFLAGS" if argv.len() >= 4 => command_getkeys(&argv[2..], true),
        "GETKEYSANDFLAGS" => arity_error("command|getkeysandflags"),
        "COUNT" => arity_error("command|count"),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(&argv[1])
        )),
    }
}

/// `MODULE`, as a Redis with no module loaded and `enable-module-command
/// no` (its default) answers it: code that probes for modules finds none.
fn module(argv: &[Bytes]) -> Reply {
    const REFUSED: &str = "ERR MODULE command not allowed. If the enable-module-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.";
    let sub = String::from_utf8_lossy(&argv[1]).to_ascii_lowercase();
    match (sub.as_str(), argv.len()) {
        ("list", 2) => Reply::Array(Vec::new()),
        ("load" | "loadex", n) if n >= 3 => Reply::error(REFUSED),
        ("unload", 3) => Reply::error(REFUSED),
        ("help", 2) => Reply::Array(
            [
                "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "LIST",
                "    Return a list of loaded modules.",
                "LOAD <path> [<arg> ...]",
                "    Load a module library from <path>, passing to it any optional arguments.",
                "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
                "    Load a module library from <path>, while passing it module configurations and optional arguments.",
                "UNLOAD <name>",
                "    Unload a module.",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|l| Reply::Status((*l).into()))
            .collect(),
        ),
        ("list" | "load" | "loadex" | "unload" | "help", _) => arity_error(&format!("module|{sub}")),
        _ => Reply::error(format!("ERR unknown subcommand '{}'. Try MODULE HELP.", String::from_utf8_lossy(&argv[1]))),
    }
}

/// `REPLICAOF host port`: a node is never a Redis replica (`ROLE` says
/// master); `NO ONE` asks for what it already is.
fn replicaof(argv: &[Bytes]) -> Reply {
    if argv[1].eq_ignore_ascii_case(b"no") && argv[2].eq_ignore_ascii_case(b"one") {
        return Reply::ok();
    }
    if !parse_i64(&argv[2]).is_some_and(|port| (0..=65535).contains(&port)) {
        return Reply::error("ERR Invalid master port");
    }
    Reply::error(
        "ERR raftlock nodes do not replicate as Redis replicas: every node is a member of one Raft cluster (add one with RAFT.NODE ADD)",
    )
}

/// `COMMAND GETKEYS command arg ...`: the keys of a command as the table
/// finds them (ACLs, tracking and blocking use the same), with Redis's
/// errors for an unknown command, one without keys, a wrong argument count,
/// and key counts the arguments cannot hold. `GETKEYSANDFLAGS`
/// (`with_flags`): each key with its key spec's flags, as Redis 7 gives
/// them.
fn command_getkeys(argv: &[Bytes], with_flags: bool) -> Reply {
    let Some(spec) = commands::lookup(&argv[0]) else {
        return Reply::error("ERR Invalid command specified");
    };
    if spec.first_key == 0 && !spec.flags.contains(&"movablekeys") {
        return Reply::error("ERR The command has no key arguments");
    }
    if !spec.arity_ok(argv.len()) {
        return Reply::error("ERR Invalid number of arguments specified for command");
    }
    let positions: Vec<usize> = spec.key_positions(argv).collect();
    let keys: Vec<Reply> = if with_flags {
        let flags = commands::key_flags(spec, argv, &positions);
        positions
            .iter()
            .zip(flags)
            .map(|(&at, flags)| {
                let flags = Reply::Set(flags.into_iter().map(|f| Reply::Status(f.to_string())).collect());
                Reply::Array(vec![Reply::Bulk(argv[at].clone()), flags])
            })
            .collect()
    } else {
        positions.iter().map(|&at| Reply::Bulk(argv[at].clone())).collect()
    };
    let counted = (spec.numkeys_at > 0).then(|| argv.get(spec.numkeys_at).and_then(|n| parse_i64(n)));
    let all_counted = match counted {
        // The count must be one the arguments hold.
        Some(Some(n)) => n >= 0 && (n as usize) <= argv.len().saturating_sub(spec.numkeys_at + 1),
        Some(None) => false,
        None => true,
    };
    if keys.is_empty() && !spec.flags.contains(&"no_mandatory_keys") || !all_counted {
        if spec.flags.contains(&"no_mandatory_keys") {
            return Reply::Array(Vec::new());
        }
        return Reply::error("ERR Invalid arguments specified for command");
    }
    Reply::Array(keys)
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN glob]`:
/// the commands' names, all of them or those the filter keeps (no command
/// comes from a module; the pattern is matched ignoring case, as Redis does).
fn command_list(args: &[Bytes]) -> Reply {
    // Every command, then every `container|subcommand` (with the container,
    // its row, and the subcommand's short name).
    let names = |keep: &dyn Fn(&str, &CommandSpec, Option<&str>) -> bool| {
        let subcommands = commands::subcommand_names().map(|(c, sub)| {
            let short = sub.name.split_once('|').map_or(sub.name, |(_, s)| s);
            (sub.name, c, Some(short))
        });
        Reply::Array(
            COMMANDS
                .iter()
                .map(|c| (c.name, c, None))
                .chain(subcommands)
                .filter(|(name, c, sub)| keep(name, c, *sub))
                .map(|(name, _, _)| Reply::text(name))
                .collect(),
        )
    };
    match args {
        [] => names(&|_, _, _| true),
        [filterby, kind, arg] if filterby.eq_ignore_ascii_case(b"FILTERBY") => {
            match String::from_utf8_lossy(kind).to_ascii_uppercase().as_str() {
                "MODULE" => Reply::Array(Vec::new()),
                "ACLCAT" => {
                    let category = String::from_utf8_lossy(arg).to_ascii_lowercase();
                    names(&|_, c, sub| crate::commands::acl::categories(c, sub).contains(&category.as_str()))
                }
                "PATTERN" => {
                    let pattern = arg.to_ascii_lowercase();
                    names(&|name, _, _| crate::keyspace::glob_match(&pattern, name.as_bytes()))
                }
                _ => Reply::error("ERR syntax error"),
            }
        }
        _ => Reply::error("ERR syntax error"),
    }
}

/// `WAIT numreplicas timeout` and `WAITAOF numlocal numreplicas timeout`,
/// answered at once after Redis's argument checks: no node is a Redis
/// replica (`ROLE`, `INFO replication`), so none acknowledges, and waiting
/// would only delay the same answer (Redis, with no replicas, waits out the
/// timeout, forever for 0). What a client asks WAIT for is already done
/// before any write is acknowledged: the write is fsynced on a majority of
/// the Raft cluster. WAITAOF's local count is 1: this node's log is fsynced
/// before every acknowledgement.
fn wait(argv: &[Bytes], aof: bool) -> Reply {
    let counts = if aof { &argv[1..3] } else { &argv[1..2] };
    if counts.iter().any(|n| parse_i64(n).is_none()) {
        return Reply::error("ERR value is not an integer or out of range");
    }
    match parse_i64(&argv[argv.len() - 1]) {
        None => Reply::error("ERR timeout is not an integer or out of range"),
        Some(t) if t < 0 => Reply::error("ERR timeout is negative"),
        Some(_) if aof => Reply::Array(vec![Reply::Int(1), Reply::Int(0)]),
        Some(_) => Reply::Int(0),
    }
}

/// The connection and node commands a transaction may queue and this node
/// answers in their place at `EXEC` (Redis runs them inside the
/// transaction; they touch nothing replicated). Not those that change the
/// connection's protocol, subscriptions, transaction or user.
fn answered_here(spec: &CommandSpec, argv: &[Bytes]) -> bool {
    let sub = |names: &[&str]| argv.get(1).is_some_and(|s| names.iter().any(|n| s.eq_ignore_ascii_case(n.as_bytes())));
    match spec.name {
        "time" | "info" | "command" | "select" | "lastsave" | "role" | "wait" | "waitaof" | "move" | "swapdb" | "lolwut" => true,
        "client" => sub(&[
            "id", "getname", "setname", "setinfo", "info", "list", "getredir", "trackinginfo", "no-evict", "no-touch", "unblock",
            "pause", "unpause",
        ]),
        "config" => sub(&["get"]),
        "acl" => sub(&["whoami", "cat", "genpass"]),
        _ => false,
    }
}

/// Whether a connection-local command may be queued in `MULTI`: answered
/// here at `EXEC`, or by the state machine (`PING`, `ECHO`).
fn answered_in_multi(spec: &CommandSpec, argv: &[Bytes]) -> bool {
    answered_here(spec, argv) || commands::execute_local(argv).is_some()
}

/// `LOCK.TOP [count]`: each ranking of `top`, as a map of name to
/// `[[key, count], ...]`, highest first.
fn lock_top(argv: &[Bytes]) -> Reply {
    let count = match argv.get(1).map(|a| parse_i64(a)) {
        None => 10,
        Some(Some(n)) if n > 0 => (n as usize).min(super::top::CAPACITY),
        Some(Some(_)) => return Reply::error("ERR count must be positive"),
        Some(None) => return Reply::error("ERR value is not an integer or out of range"),
    };
    if argv.len() > 2 {
        return Reply::error("ERR syntax error");
    }
    let rankings = super::top::report(count)
        .into_iter()
        .map(|(ranking, keys)| {
            let keys = keys.into_iter().map(|(k, n)| Reply::Array(vec![Reply::Bulk(k), Reply::Int(n.min(i64::MAX as u64) as i64)]));
            (Reply::bulk(ranking.name()), Reply::Array(keys.collect()))
        })
        .collect();
    Reply::Map(rankings)
}

#[cfg(test)]
mod future_sizes {
    use super::*;

    /// The size of the future a connection's `f` returns (never called).
    fn future_of<'a, F, Fut>(_: F) -> usize
    where
        F: FnOnce(&'a mut Connection, Vec<Bytes>, &'a mut Frames) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// Every command's future holds any path it may take: with a blocking
    /// command's held inline (a 4 KB read buffer among them) it was 14,136
    /// bytes, copied as each command began; with those boxed, 1,880.
    #[test]
    fn a_command_s_future_is_not_the_size_of_a_blocking_one() {
        let size = future_of(|c, argv, frames| c.execute(argv, frames));
        assert!(size < 4096, "a command's future takes {size} bytes");
    }
}
