//! What the fuzz targets share: turning fuzzer bytes into commands the way a
//! connection does, and applying them as log entries the way every replica
//! does, with the properties every run must keep.

use bytes::{Bytes, BytesMut};
use raftlock::commands::{apply_monitored, ClientCommand, Op, Origin, Proposal, Request};
use raftlock::keyspace::{ClientId, Keyspace, MAX_SNAPSHOT_LOG_TIME, MAX_SNAPSHOT_VERSION};
use raftlock::protocol::{Limits, Reply, RequestCodec};
use tokio_util::codec::Decoder;

/// Small limits, so the fuzzer reaches them.
pub fn limits() -> Limits {
    Limits { max_bulk_len: 4096, max_args: 64, max_request_len: 64 * 1024, max_inline_len: 4096 }
}

/// The commands framed from `data` as a connection frames them, until the
/// first protocol error or the end (at most `most`).
pub fn commands_from(data: &[u8], most: usize) -> Vec<Vec<Bytes>> {
    let mut codec = RequestCodec::new(limits());
    let mut buf = BytesMut::from(data);
    let mut out = Vec::new();
    while out.len() < most {
        match codec.decode(&mut buf) {
            Ok(Some(argv)) if !argv.is_empty() => out.push(argv),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    out
}

/// One replica's state machine, fed log entries.
pub struct Replica {
    pub ks: Keyspace,
    index: u64,
    time: u64,
    seq: u64,
}

impl Default for Replica {
    fn default() -> Self {
        Replica::new(Keyspace::new())
    }
}

impl Replica {
    pub fn new(ks: Keyspace) -> Replica {
        let time = ks.log_time();
        Replica { ks, index: 0, time, seq: 0 }
    }

    /// Applies `request` from client `client` as the next log entry, `step`
    /// ms of log time after the previous one.
    pub fn apply(&mut self, client: u64, request: Request, step: u64) -> Vec<Reply> {
        self.seq += 1;
        let origin = Origin { client: ClientId { node: 1, boot: 1, conn: client }, seq: self.seq };
        self.entry(Op::Commands(vec![ClientCommand { origin, request }]), step)
    }

    /// Applies an `Expire` entry.
    pub fn expire(&mut self, step: u64) -> Vec<Reply> {
        self.entry(Op::Expire, step)
    }

    fn entry(&mut self, op: Op, step: u64) -> Vec<Reply> {
        self.index += 1;
        // A decoded snapshot may start anywhere, up to the end of time.
        self.time = self.time.saturating_add(step);
        let proposal = Proposal { log_time: self.time, unix_ms: 1_700_000_000_000u64.saturating_add(self.time), op };
        // As on a node with a MONITOR client: scripts report their commands too.
        apply_monitored(&mut self.ks, self.index, &proposal, true).into_iter().map(|a| a.reply).collect()
    }
}

/// How `data`'s commands are grouped into log entries.
pub enum Grouping {
    /// One entry per command, from clients 1-3 in turn.
    Each,
    /// All in one pipelined entry.
    Pipeline,
    /// All as one MULTI/EXEC.
    Transaction,
}

/// Runs `commands` on a fresh replica; returns every reply and the replica.
pub fn run(commands: &[Vec<Bytes>], grouping: &Grouping, steps: &[u8]) -> (Vec<Reply>, Replica) {
    run_restoring(commands, grouping, steps, None)
}

/// [`run`], but with `Grouping::Each` the replica is replaced, before
/// command `at`, by one restored from its snapshot (as a follower that
/// installs a snapshot and goes on applying): what it answers from then on
/// must not tell the two apart.
pub fn run_restoring(commands: &[Vec<Bytes>], grouping: &Grouping, steps: &[u8], at: Option<usize>) -> (Vec<Reply>, Replica) {
    let mut r = Replica::default();
    let mut replies = Vec::new();
    let step = |i: usize| steps.get(i % steps.len().max(1)).copied().unwrap_or(1) as u64;
    match grouping {
        Grouping::Each => {
            for (i, argv) in commands.iter().enumerate() {
                if at == Some(i) {
                    let restored = Keyspace::decode(&r.ks.encode()).expect("a snapshot the node wrote must decode");
                    r.ks = restored;
                }
                replies.extend(r.apply(1 + (i as u64 % 3), Request::Command(argv.clone()), step(i)));
                if i % 8 == 7 {
                    replies.extend(r.expire(step(i + 1)));
                }
            }
        }
        Grouping::Pipeline => replies.extend(r.apply(1, Request::Pipeline(commands.to_vec()), 1)),
        Grouping::Transaction => {
            replies.extend(r.apply(1, Request::Transaction { watched: Vec::new(), commands: commands.to_vec() }, 1))
        }
    }
    replies.extend(r.expire(1000));
    (replies, r)
}

/// What must hold of any keyspace: a snapshot of it decodes to the same
/// keyspace, and encodes to the same bytes again. (A keyspace driven past
/// the limits a snapshot may carry, which only a snapshot that started near
/// them can reach, is refused as implausible instead.)
pub fn check_snapshot(ks: &Keyspace) {
    let bytes = ks.encode();
    match Keyspace::decode(&bytes) {
        Ok(back) => {
            assert_eq!(back.digest(), ks.digest(), "the snapshot decodes to another keyspace");
            assert!(back.encode() == bytes, "the decoded snapshot encodes differently");
        }
        Err(e) => assert!(
            ks.log_time() > MAX_SNAPSHOT_LOG_TIME || ks.last_version() > MAX_SNAPSHOT_VERSION,
            "a snapshot the node wrote does not decode: {e}"
        ),
    }
}
