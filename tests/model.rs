//! A model of raftlock's lock and of log time across leader changes, checked
//! exhaustively with stateright (issue 10 §6; DESIGN.md §2-4). The abstraction
//! and its simplifications are described in `tests/model.md`. Run with
//!
//! ```text
//! cargo test --release --test model -- --nocapture
//! ```
//!
//! The model is self-contained: it restates in a few lines the semantics of
//! `src/commands/locks.rs` (grant, same-owner refresh, renew, release, fence; a
//! key is gone once `now > expires_at`) and the anchoring rule of
//! `src/clock.rs`, and reduces Raft to what log time depends on.
//!
//! - `log_end_anchoring_is_safe` (3 nodes) and `two_nodes_are_safe`: an
//!   exhaustive BFS finds no counterexample to the four safety properties; on
//!   3 nodes it also reaches every sanity ("sometimes") property, so the
//!   checks are not vacuous.
//! - `old_anchoring_shortens_a_lease`: with the model flag `old_anchoring` (a
//!   new leader continues from the highest log time it ever saw or stamped,
//!   the planted bug `LogTimeFromUncommitted`) the checker finds a failover
//!   that shortens a lease (issue 10 §1) and prints it.
//! - `reads_at_the_leader_clock_are_not_linearizable`: with the flag
//!   `reads_at_leader_clock` (planted bug `ReadsAtLeaderClock`) it finds a
//!   read that sees an expiry the log later undoes (issue 10 §2).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model, Path, Property};

/// Real time and log time, in ticks. Both clocks count the same unit (ms in
/// raftlock); a tick stands for "some time passes".
type Time = u8;
/// A 1-based log index. A grant's fencing token is its log index (one command
/// per entry here, so the version is exactly the index).
type Index = u8;
type Term = u8;
type Id = u8;

// ---------------------------------------------------------------------------
// Parameters.

#[derive(Clone, Debug)]
struct LockModel {
    nodes: usize,
    clients: usize,
    /// Real time runs from 0 to `max_time`.
    max_time: Time,
    /// Terms run from 1 (the initial leader's) to `max_term`.
    max_term: Term,
    /// Entries per log, the initial one included.
    max_log: usize,
    /// Every lease is requested with this ttl.
    ttl: Time,
    /// Writes the clients may send in all. (Reads cost nothing: every state
    /// is checked as if a read were served in it.)
    writes: u8,
    /// The old anchoring rule: a new leader continues from the highest log
    /// time it ever saw or stamped, truncated and never-committed entries
    /// included, instead of from the last entry of its own log.
    old_anchoring: bool,
    /// The old read path (issue 10 §2, planted bug `ReadsAtLeaderClock`):
    /// reads judge expiry at the leader's live clock instead of at the log
    /// time of the applied state.
    reads_at_leader_clock: bool,
    /// Symmetry reduction: nodes are interchangeable, and so are clients, so
    /// each state is replaced by the least of its renamings (nodes sorted,
    /// clients swapped if that sorts first). Nothing in the model or in the
    /// properties depends on a node's or a client's name.
    symmetry: bool,
}

// ---------------------------------------------------------------------------
// State.

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct State {
    /// Real time. Only stamping reads it: a leader stamps `now - behind` (its
    /// monotonic clock since it won, added to its anchor), a client records
    /// `now` as a request's send time.
    now: Time,
    /// Writes the clients may still send.
    writes_left: u8,
    /// History for the read check: the first read that found free a lock its
    /// applied state still held. Only a read judged ahead of its applied
    /// state can, so this stays `None` unless `reads_at_leader_clock`.
    read_free: Option<ReadFree>,
    nodes: Vec<Node>,
    clients: Vec<Client>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct ReadFree {
    /// The token of the lease the read found expired.
    token: Index,
    /// For each term, the highest index of an entry of that term that existed
    /// anywhere when the read was served: an entry above it was proposed
    /// after the read returned, so it must be ordered after the read.
    frontier: [Index; 4],
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Node {
    term: Term,
    /// `Some(behind)` while this node believes it leads: its log time is real
    /// time minus `behind`. (Anchored at log time `a` at real time `r`, it
    /// stamps `a + (now - r)`; only `r - a` matters, and it is never negative
    /// as log time never runs ahead of real time. Keeping the difference
    /// instead of the pair merges states that behave identically.)
    leader: Option<Time>,
    log: Vec<Entry>,
    /// Entries `1..=commit` are committed and applied (apply is immediate).
    commit: Index,
    /// Highest log time ever appended here, truncated or not, own stamps
    /// included (`LogClock::seen_ever`). Only the old rule reads it; it stays
    /// 0 otherwise so that it does not split states.
    seen_ever: Time,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Entry {
    term: Term,
    /// `None` for the blank entry a new leader appends (openraft's, which
    /// carries no proposal and so no log time).
    log_time: Option<Time>,
    op: Op,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Op {
    Blank,
    /// The leader's expiry timer: deletes the lock if due at this entry's
    /// log time (a renewal applied before it wins).
    Expire,
    /// `LOCK.ACQUIRE k owner ttl` (one key, so `k` is implicit).
    Acquire {
        owner: Id,
    },
    /// `LOCK.RENEW k owner token ttl`.
    Renew {
        owner: Id,
        token: Index,
    },
    /// `LOCK.RELEASE k owner token`.
    Release {
        owner: Id,
        token: Index,
    },
    /// `LOCK.FENCE resource token` (one resource).
    Fence {
        token: Index,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Client {
    /// The one request in flight: the entry it became, and its send time.
    pending: Option<Pending>,
    /// The lease this client believes it holds: its token, and the end of the
    /// lease by the client's own reckoning, `send time + ttl` of the request
    /// (grant, refresh or renewal) whose success it was last told of. It acts
    /// on the lock through real time `until`, inclusive.
    lease: Option<Lease>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Pending {
    index: Index,
    term: Term,
    sent: Time,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Lease {
    token: Index,
    until: Time,
}

// ---------------------------------------------------------------------------
// The state machine: src/commands/locks.rs for one lock key and one fenced
// resource. Applied state is recomputed from the log when needed, so the model
// state holds no keyspace of its own.

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Keyspace {
    lock: Option<Held>,
    /// Highest token honored by `LOCK.FENCE`.
    fence: Option<Index>,
    /// Log time of the applied state (`Keyspace::advance_to`).
    log_time: Time,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    owner: Id,
    token: Index,
    expires_at: Time,
}

/// The reply a command gets when applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Nothing,
    Granted(Index),
    /// The owner already held it: lease refreshed, same token.
    Refreshed(Index),
    Nil,
    Renewed,
    LockLost,
    Released(bool),
    Fenced,
    Stale,
}

impl Keyspace {
    /// The live lock at the applied log time (a key is gone once now > expiry).
    fn holder(&self) -> Option<Held> {
        self.lock.filter(|h| self.log_time <= h.expires_at)
    }

    fn apply(&mut self, index: Index, entry: &Entry, ttl: Time) -> Outcome {
        if let Some(t) = entry.log_time {
            self.log_time = self.log_time.max(t);
        }
        let now = self.log_time;
        // Lazy expiry (`Keyspace::get_mut`), and all that `Expire` does.
        if self.lock.is_some_and(|h| now > h.expires_at) {
            self.lock = None;
        }
        match entry.op {
            Op::Blank | Op::Expire => Outcome::Nothing,
            Op::Acquire { owner } => match &mut self.lock {
                Some(h) if h.owner != owner => Outcome::Nil,
                Some(h) => {
                    h.expires_at = now + ttl;
                    Outcome::Refreshed(h.token)
                }
                None => {
                    self.lock = Some(Held { owner, token: index, expires_at: now + ttl });
                    Outcome::Granted(index)
                }
            },
            Op::Renew { owner, token } => match &mut self.lock {
                Some(h) if h.owner == owner && h.token == token => {
                    h.expires_at = now + ttl;
                    Outcome::Renewed
                }
                _ => Outcome::LockLost,
            },
            Op::Release { owner, token } => match self.lock {
                Some(h) if h.owner == owner && h.token == token => {
                    self.lock = None;
                    Outcome::Released(true)
                }
                _ => Outcome::Released(false),
            },
            Op::Fence { token } => {
                if self.fence.is_some_and(|high| token < high) {
                    Outcome::Stale
                } else {
                    self.fence = Some(token);
                    Outcome::Fenced
                }
            }
        }
    }
}

/// Applies `entries` (a log prefix) in order; `each` sees every step.
fn replay(entries: &[Entry], ttl: Time, mut each: impl FnMut(Index, &Entry, &Keyspace, Outcome)) -> Keyspace {
    let mut ks = Keyspace::default();
    for (i, entry) in entries.iter().enumerate() {
        let index = i as Index + 1;
        let outcome = ks.apply(index, entry, ttl);
        each(index, entry, &ks, outcome);
    }
    ks
}

/// The node's committed (and so applied) entries. (A log shorter than its
/// commit index would mean Raft truncated a committed entry; property 1 then
/// sees the nodes' applied logs disagree.)
fn applied(n: &Node) -> &[Entry] {
    &n.log[..(n.commit as usize).min(n.log.len())]
}

fn applied_state(n: &Node, ttl: Time) -> Keyspace {
    replay(applied(n), ttl, |_, _, _, _| {})
}

// ---------------------------------------------------------------------------
// Actions.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Request {
    Acquire,
    Renew,
    Release,
    Fence,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// Real time advances one tick, everywhere at once.
    Tick,
    /// `node` stands for the next term and wins it with the votes of
    /// `voters` (a bit set: a majority, itself included, each of which had a
    /// lower term and a log no more up to date than the candidate's).
    Elect { node: Id, voters: u8 },
    /// AppendEntries from `leader` (its log and commit index) reaches
    /// `follower`, and the answer returns: the leader commits what a majority
    /// now holds, or steps down if the follower knows a later term.
    Replicate { leader: Id, follower: Id },
    /// The leader's expiry timer proposes an `Expire` entry.
    Expire(Id),
    /// A client's write reaches `node`, which believes it leads, and is
    /// stamped and appended there (forwarding from a follower takes no time).
    Send { client: Id, node: Id, request: Request },
    /// A read served by `node` finds the lock free although its applied state
    /// holds it (recorded for the read check; only with `reads_at_leader_clock`).
    Read(Id),
    /// The client stops waiting for a request whose entry no log holds any
    /// more (it was truncated): it will never commit.
    GiveUp(Id),
}

// ---------------------------------------------------------------------------
// Raft and log time.

impl LockModel {
    fn majority(&self) -> usize {
        assert!(self.max_term < 4, "ReadFree::frontier has room for terms 1-3");
        self.nodes / 2 + 1
    }

    /// Log time of the last entry that has one in the node's log, or of the
    /// applied state if later (`LogClock::log_end_time`).
    fn log_end_time(&self, n: &Node) -> Time {
        let last = n.log.iter().rev().find_map(|e| e.log_time).unwrap_or(0);
        last.max(applied_state(n, self.ttl).log_time)
    }

    /// The log time a node that wins an election continues from (its anchor).
    fn anchor(&self, n: &Node) -> Time {
        if self.old_anchoring {
            // The planted bug: also its own stamps of an earlier term and
            // entries a truncation removed.
            self.log_end_time(n).max(n.seen_ever)
        } else {
            // DESIGN §4: the last entry of its own log.
            self.log_end_time(n)
        }
    }

    /// The leader's current log time (`LogClock::now`).
    fn leader_time(s: &State, n: &Node) -> Option<Time> {
        n.leader.map(|behind| s.now - behind)
    }

    fn append(&self, n: &mut Node, entry: Entry) {
        if self.old_anchoring {
            if let Some(t) = entry.log_time {
                n.seen_ever = n.seen_ever.max(t);
            }
        }
        n.log.push(entry);
    }

    /// `n` learns of a later term and steps down.
    fn adopt_term(n: &mut Node, term: Term) {
        if term > n.term {
            n.term = term;
            n.leader = None;
        }
    }

    /// Raft's election restriction: the candidate's log is at least as up to
    /// date as the voter's (last term, then length).
    fn up_to_date(candidate: &Node, voter: &Node) -> bool {
        let last = |n: &Node| (n.log.last().map_or(0, |e| e.term), n.log.len());
        last(candidate) >= last(voter)
    }

    fn can_elect(&self, s: &State, node: usize, voters: u8) -> bool {
        let c = &s.nodes[node];
        let term = c.term + 1;
        term <= self.max_term
            && voters & (1 << node) != 0
            && voters.count_ones() as usize >= self.majority()
            && (0..self.nodes)
                .filter(|&v| voters & (1 << v) != 0)
                .all(|v| s.nodes[v].term < term && Self::up_to_date(c, &s.nodes[v]))
    }

    /// The commit index a leader may advance to: the highest entry of its own
    /// term that a majority holds with the same prefix. (Counting the logs as
    /// they are stands for the acknowledgments they sent.)
    fn new_commit(&self, s: &State, id: usize) -> Option<Index> {
        let l = &s.nodes[id];
        ((l.commit as usize + 1)..=l.log.len())
            .rev()
            .find(|&i| {
                l.log[i - 1].term == l.term
                    && s.nodes.iter().filter(|m| m.log.len() >= i && m.log[..i] == l.log[..i]).count()
                        >= self.majority()
            })
            .map(|i| i as Index)
    }

    /// The leader's expiry timer fires: the lock in its applied state is due
    /// at its current log time, and no `Expire` is in flight yet.
    fn expiry_due(&self, s: &State, id: usize) -> bool {
        let n = &s.nodes[id];
        let Some(now) = Self::leader_time(s, n) else { return false };
        n.log.len() < self.max_log
            && applied_state(n, self.ttl).lock.is_some_and(|h| now > h.expires_at)
            && !n.log[applied(n).len()..].iter().any(|e| e.op == Op::Expire)
    }

    /// The node where a request's entry has committed, if any.
    fn committed_on(s: &State, p: &Pending) -> Option<usize> {
        s.nodes
            .iter()
            .position(|n| n.commit >= p.index && n.log.get(p.index as usize - 1).is_some_and(|e| e.term == p.term))
    }

    /// Replies reach their clients as soon as their entries commit. (A later
    /// reply changes nothing a property sees: the client's lease runs from
    /// its send time, not from the reply.)
    fn deliver_replies(&self, s: &mut State) {
        for c in 0..s.clients.len() {
            let Some(p) = s.clients[c].pending else { continue };
            let Some(on) = Self::committed_on(s, &p) else { continue };
            let mut outcome = Outcome::Nothing;
            replay(&s.nodes[on].log[..p.index as usize], self.ttl, |i, _, _, o| {
                if i == p.index {
                    outcome = o;
                }
            });
            let until = p.sent + self.ttl;
            let client = &mut s.clients[c];
            client.pending = None;
            match outcome {
                Outcome::Granted(token) | Outcome::Refreshed(token) => client.lease = Some(Lease { token, until }),
                Outcome::Renewed => {
                    if let Some(l) = &mut client.lease {
                        l.until = until;
                    }
                }
                // Another owner holds it, the lease was lost, or a higher
                // token was honored: the client stops relying on it.
                Outcome::Nil | Outcome::LockLost | Outcome::Stale => client.lease = None,
                Outcome::Released(_) | Outcome::Fenced | Outcome::Nothing => {}
            }
        }
    }

    /// The log time a read served now by `n` is judged at.
    fn read_time(&self, s: &State, n: &Node) -> Time {
        let applied = applied_state(n, self.ttl).log_time;
        if self.reads_at_leader_clock {
            Self::leader_time(s, n).unwrap_or(applied)
        } else {
            applied
        }
    }

    /// A read node `id` may serve now that finds free a lock its applied
    /// state holds.
    fn read_ahead(&self, s: &State, id: usize) -> Option<ReadFree> {
        let n = &s.nodes[id];
        let held = applied_state(n, self.ttl).holder()?;
        if !self.can_read(s, id) || self.read_time(s, n) <= held.expires_at {
            return None;
        }
        let mut frontier = [0; 4];
        for e in s.nodes.iter().flat_map(|m| m.log.iter().enumerate()) {
            let (index, term) = (e.0 as Index + 1, e.1.term as usize);
            frontier[term] = frontier[term].max(index);
        }
        Some(ReadFree { token: held.token, frontier })
    }

    /// Whether node `id` may serve a read now: it leads, has committed an
    /// entry of its own term, and its ReadIndex round reaches a majority that
    /// has not moved to a later term (so no later leader exists).
    fn can_read(&self, s: &State, id: usize) -> bool {
        let n = &s.nodes[id];
        n.leader.is_some()
            && applied(n).last().is_some_and(|e| e.term == n.term)
            && s.nodes.iter().filter(|m| m.term <= n.term).count() >= self.majority()
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // Node 0 leads term 1 at log time 0, real time 0; every node holds its
        // committed blank entry. Starting here skips the first election, which
        // cannot matter: nothing is locked yet.
        let nodes = (0..self.nodes)
            .map(|i| Node {
                term: 1,
                leader: (i == 0).then_some(0),
                log: vec![Entry { term: 1, log_time: None, op: Op::Blank }],
                commit: 1,
                seen_ever: 0,
            })
            .collect();
        let clients = (0..self.clients).map(|_| Client { pending: None, lease: None }).collect();
        vec![State { now: 0, writes_left: self.writes, read_free: None, nodes, clients }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.max_time {
            actions.push(Action::Tick);
        }
        for i in 0..self.nodes {
            let n = &s.nodes[i];
            for voters in 1..(1u8 << self.nodes) {
                if self.can_elect(s, i, voters) {
                    actions.push(Action::Elect { node: i as Id, voters });
                }
            }
            if n.leader.is_none() {
                continue;
            }
            for j in (0..self.nodes).filter(|&j| j != i) {
                let action = Action::Replicate { leader: i as Id, follower: j as Id };
                // Only deliveries that change something.
                if self.step(s, action).is_some_and(|t| t != *s) {
                    actions.push(action);
                }
            }
            if self.expiry_due(s, i) {
                actions.push(Action::Expire(i as Id));
            }
            if s.read_free.is_none() && self.read_ahead(s, i).is_some() {
                actions.push(Action::Read(i as Id));
            }
        }
        for (c, client) in s.clients.iter().enumerate() {
            if let Some(p) = client.pending {
                let gone = !s.nodes.iter().any(|n| n.log.get(p.index as usize - 1).is_some_and(|e| e.term == p.term));
                if gone {
                    actions.push(Action::GiveUp(c as Id));
                }
                continue;
            }
            if s.writes_left == 0 {
                continue;
            }
            let requests: &[Request] = if client.lease.is_some() {
                // Re-acquiring a lock one holds is the idempotent retry.
                &[Request::Acquire, Request::Renew, Request::Release, Request::Fence]
            } else {
                &[Request::Acquire]
            };
            for (i, n) in s.nodes.iter().enumerate() {
                if n.leader.is_some() && n.log.len() < self.max_log {
                    for &request in requests {
                        actions.push(Action::Send { client: c as Id, node: i as Id, request });
                    }
                }
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let s = self.step(s, action)?;
        Some(if self.symmetry { canonical(s) } else { s })
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_HOLDER, |m, s| m.one_holder_in_log_time(s)),
            Property::always(TOKENS, |m, s| m.tokens_increase_never_reused(s)),
            Property::always(NO_EARLY_EXPIRY, |_, s| no_lease_ends_early_in_real_time(s)),
            Property::always(READS, |m, s| m.reads_linearizable(s)),
            // Sanity: the bounded space reaches the situations that matter.
            Property::sometimes(SANITY[0], |_, s: &State| s.clients.iter().any(|c| c.lease.is_some())),
            Property::sometimes(SANITY[1], |m, s| m.renewed(s)),
            Property::sometimes(SANITY[2], |m, s| m.lock_changed_hands(s)),
            Property::sometimes(SANITY[3], |m, s| m.read_sees_expired(s)),
            Property::sometimes(SANITY[4], |_, s: &State| deposed_leader_ahead(s)),
            Property::sometimes(SANITY[5], |_, s: &State| s.nodes.iter().any(|n| n.leader.is_some() && n.term == 3)),
        ]
    }

    fn format_action(&self, action: &Action) -> String {
        describe_action(action)
    }
}

impl LockModel {
    /// One transition, then the replies it makes due; no renaming.
    fn step(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Tick => s.now += 1,
            Action::Elect { node, voters } => {
                let term = s.nodes[node as usize].term + 1;
                for v in (0..self.nodes).filter(|&v| voters & (1 << v) != 0) {
                    Self::adopt_term(&mut s.nodes[v], term);
                }
                let base = self.anchor(&s.nodes[node as usize]);
                let n = &mut s.nodes[node as usize];
                n.leader = Some(s.now.checked_sub(base).expect("log time never runs ahead of real time"));
                if n.log.len() < self.max_log {
                    self.append(n, Entry { term, log_time: None, op: Op::Blank });
                }
            }
            Action::Replicate { leader, follower } => {
                let (l, f) = (leader as usize, follower as usize);
                let lterm = s.nodes[l].term;
                if s.nodes[f].term > lterm {
                    // The answer carries the later term: the leader steps down.
                    let t = s.nodes[f].term;
                    Self::adopt_term(&mut s.nodes[l], t);
                    return Some(s);
                }
                let (llog, lcommit) = (s.nodes[l].log.clone(), s.nodes[l].commit);
                let fnode = &mut s.nodes[f];
                Self::adopt_term(fnode, lterm);
                // AppendEntries: keep matching entries, truncate at the first
                // conflict (same index, other term), append the rest. Entries
                // past the leader's log are kept unless they conflict.
                if let Some(i) = (0..llog.len()).find(|&i| fnode.log.get(i).is_none_or(|e| e.term != llog[i].term)) {
                    fnode.log.truncate(i);
                    for e in &llog[i..] {
                        self.append(fnode, e.clone());
                    }
                }
                fnode.commit = fnode.commit.max(lcommit.min(llog.len() as Index));
                if let Some(c) = self.new_commit(&s, l) {
                    s.nodes[l].commit = c;
                }
            }
            Action::Expire(id) => {
                let t = Self::leader_time(&s, &s.nodes[id as usize])?;
                let n = &mut s.nodes[id as usize];
                let term = n.term;
                self.append(n, Entry { term, log_time: Some(t), op: Op::Expire });
            }
            Action::Send { client, node, request } => {
                let t = Self::leader_time(&s, &s.nodes[node as usize])?;
                let now = s.now;
                s.writes_left -= 1;
                let cl = &mut s.clients[client as usize];
                let token = cl.lease.map(|l| l.token);
                let op = match request {
                    Request::Acquire => Op::Acquire { owner: client },
                    Request::Renew => Op::Renew { owner: client, token: token? },
                    Request::Release => Op::Release { owner: client, token: token? },
                    Request::Fence => Op::Fence { token: token? },
                };
                if request == Request::Release {
                    // A client stops relying on its lease when it lets go.
                    cl.lease = None;
                }
                let n = &mut s.nodes[node as usize];
                let term = n.term;
                self.append(n, Entry { term, log_time: Some(t), op });
                let index = n.log.len() as Index;
                s.clients[client as usize].pending = Some(Pending { index, term, sent: now });
            }
            Action::Read(id) => s.read_free = self.read_ahead(&s, id as usize),
            Action::GiveUp(client) => s.clients[client as usize].pending = None,
        }
        self.deliver_replies(&mut s);
        Some(s)
    }
}

const ONE_HOLDER: &str = "at most one holder per key in log time";
const TOKENS: &str = "fencing tokens strictly increase and are never reused";
const NO_EARLY_EXPIRY: &str = "no lease ends in real time before send time + ttl";
const READS: &str = "reads are linearizable";
const SAFETY: [&str; 4] = [ONE_HOLDER, TOKENS, NO_EARLY_EXPIRY, READS];
const SANITY: [&str; 6] = [
    "a client is told it holds the lock",
    "a renewal extends a lease",
    "the lock passes to the other client",
    "a read finds the lock expired",
    "a deposed leader stamps ahead of its successor",
    "a third leader is elected",
];

// ---------------------------------------------------------------------------
// Symmetry.

/// The least renaming of `s`: clients permuted (owners in log entries
/// follow), then nodes sorted (no state refers to a node by name).
fn canonical(s: State) -> State {
    let mut best: Option<State> = None;
    for perm in permutations(s.clients.len()) {
        let mut t = s.clone();
        for (from, &to) in perm.iter().enumerate() {
            t.clients[to] = s.clients[from].clone();
        }
        let rename = |c: &mut Id| *c = perm[*c as usize] as Id;
        for n in &mut t.nodes {
            for e in &mut n.log {
                match &mut e.op {
                    Op::Acquire { owner } | Op::Renew { owner, .. } | Op::Release { owner, .. } => rename(owner),
                    Op::Blank | Op::Expire | Op::Fence { .. } => {}
                }
            }
        }
        t.nodes.sort();
        if best.as_ref().is_none_or(|b| t < *b) {
            best = Some(t);
        }
    }
    best.expect("at least the identity")
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for at in 0..n {
            let mut q = p.clone();
            q.insert(at, n - 1);
            out.push(q);
        }
    }
    out
}

/// Replays a path found with symmetry reduction in the model without it, so
/// that nodes and clients keep their names from step to step: each step is
/// the action whose result is a renaming of the next state on the path.
fn concrete_path(m: &LockModel, path: &Path<State, Action>) -> Vec<(State, Option<Action>)> {
    let plain = LockModel { symmetry: false, ..m.clone() };
    let abstract_states = path.clone().into_states();
    let mut state = plain.init_states().remove(0);
    let mut out = Vec::new();
    for next in &abstract_states[1..] {
        let mut actions = Vec::new();
        plain.actions(&state, &mut actions);
        let (action, after) = actions
            .into_iter()
            .find_map(|a| plain.step(&state, a).filter(|t| canonical(t.clone()) == *next).map(|t| (a, t)))
            .expect("every step has a concrete counterpart");
        out.push((state, Some(action)));
        state = after;
    }
    out.push((state, None));
    out
}

// ---------------------------------------------------------------------------
// Properties.

impl LockModel {
    /// Every node applies the same entries (one applied log is a prefix of the
    /// other), and in each applied log a lease is granted only after the
    /// previous one ended in log time (expired, `now > expires_at`, or
    /// released). Checked independently of `Keyspace::apply`'s own test.
    fn one_holder_in_log_time(&self, s: &State) -> bool {
        for a in &s.nodes {
            for b in &s.nodes {
                let (x, y) = (applied(a), applied(b));
                let k = x.len().min(y.len());
                if x[..k] != y[..k] {
                    return false;
                }
            }
        }
        s.nodes.iter().all(|n| {
            // The current lease: (end in log time, ended by a release).
            let mut lease: Option<(Time, bool)> = None;
            let mut ok = true;
            replay(applied(n), self.ttl, |_, _, ks, outcome| match outcome {
                Outcome::Granted(_) => {
                    if let Some((end, released)) = lease {
                        ok &= if released { ks.log_time >= end } else { ks.log_time > end };
                    }
                    lease = Some((ks.log_time + self.ttl, false));
                }
                Outcome::Refreshed(_) | Outcome::Renewed => lease = Some((ks.log_time + self.ttl, false)),
                Outcome::Released(true) => lease = Some((ks.log_time, true)),
                _ => {}
            });
            ok
        })
    }

    /// In every applied log, grants carry strictly increasing tokens and the
    /// fenced resource's highest token never decreases; no two clients are
    /// told the same token; a client's token is a committed grant to it.
    fn tokens_increase_never_reused(&self, s: &State) -> bool {
        for n in &s.nodes {
            let mut ok = true;
            let (mut grant, mut fence) = (0, None);
            replay(applied(n), self.ttl, |_, _, ks, outcome| {
                if let Outcome::Granted(t) = outcome {
                    ok &= t > grant;
                    grant = t;
                }
                ok &= ks.fence >= fence;
                fence = ks.fence;
            });
            if !ok {
                return false;
            }
        }
        let tokens: Vec<Index> = s.clients.iter().filter_map(|c| c.lease.map(|l| l.token)).collect();
        if tokens.iter().collect::<BTreeSet<_>>().len() != tokens.len() {
            return false;
        }
        s.clients.iter().enumerate().all(|(c, client)| {
            let Some(lease) = client.lease else { return true };
            s.nodes.iter().any(|n| {
                applied(n).get(lease.token as usize - 1).is_some_and(|e| e.op == Op::Acquire { owner: c as Id })
            })
        })
    }

    /// A read (`LOCK.INFO`, `GET`) served now by any node that may serve one:
    /// (1) it reflects every entry committed anywhere, hence every completed
    /// write and every earlier read (no stale read); (2) it shows the lock
    /// held by each client that holds it now by its own reckoning and whose
    /// grant it reflects. And (3): once a read found a lease expired, no
    /// command proposed after that read may find the same lease still live
    /// (a renewal succeeding, a re-acquire refreshing it, another owner
    /// refused): the read must be ordered before that command, and nothing
    /// brings an expired lease back (issue 10 §2).
    fn reads_linearizable(&self, s: &State) -> bool {
        let max_commit = s.nodes.iter().map(|n| applied(n).len()).max().unwrap_or(0);
        let served = (0..self.nodes).filter(|&i| self.can_read(s, i)).all(|i| {
            let n = &s.nodes[i];
            let mut ks = applied_state(n, self.ttl);
            ks.log_time = self.read_time(s, n);
            let holder = ks.holder();
            applied(n).len() >= max_commit
                && s.clients.iter().enumerate().all(|(c, client)| match client.lease {
                    Some(l) if (l.token as usize) <= applied(n).len() && s.now <= l.until => {
                        holder.is_some_and(|h| h.owner == c as Id && h.token == l.token)
                    }
                    _ => true,
                })
        });
        let history = s.read_free.is_none_or(|read| {
            s.nodes.iter().all(|n| {
                let mut ok = true;
                replay(applied(n), self.ttl, |index, entry, ks, outcome| {
                    let after_read = index > read.frontier[entry.term as usize];
                    let saw_live = matches!(outcome, Outcome::Renewed | Outcome::Refreshed(_) | Outcome::Nil);
                    ok &= !(after_read && saw_live && ks.lock.is_some_and(|h| h.token == read.token));
                });
                ok
            })
        });
        served && history
    }

    fn renewed(&self, s: &State) -> bool {
        s.nodes.iter().any(|n| {
            let mut renewed = false;
            replay(applied(n), self.ttl, |_, _, _, o| renewed |= o == Outcome::Renewed);
            renewed
        })
    }

    fn lock_changed_hands(&self, s: &State) -> bool {
        s.nodes.iter().any(|n| {
            let mut owners = BTreeSet::new();
            replay(applied(n), self.ttl, |_, e, _, o| {
                if let (Outcome::Granted(_), Op::Acquire { owner }) = (o, e.op) {
                    owners.insert(owner);
                }
            });
            owners.len() > 1
        })
    }

    /// A read finds free a lock that was granted and not released since.
    fn read_sees_expired(&self, s: &State) -> bool {
        (0..self.nodes).filter(|&i| self.can_read(s, i)).any(|i| {
            let mut granted_unreleased = false;
            let ks = replay(applied(&s.nodes[i]), self.ttl, |_, _, _, o| match o {
                Outcome::Granted(_) => granted_unreleased = true,
                Outcome::Released(true) => granted_unreleased = false,
                _ => {}
            });
            granted_unreleased && ks.holder().is_none()
        })
    }
}

/// DESIGN §4: a client may rely on its lease until its request's send time +
/// ttl. So no two clients may, at the same real time, both be within leases
/// they were told they hold: the one told last was granted the key (no
/// earlier than it was told) before the other's send time + ttl.
fn no_lease_ends_early_in_real_time(s: &State) -> bool {
    s.clients.iter().filter(|c| c.lease.is_some_and(|l| s.now <= l.until)).count() <= 1
}

/// Two logs disagree at an index, and the older term's entry there carries a
/// later log time than the newer term's: a deposed leader went on stamping
/// ahead of its successor (issue 10 §1, step 3).
fn deposed_leader_ahead(s: &State) -> bool {
    s.nodes.iter().any(|a| {
        s.nodes.iter().any(|b| {
            a.log
                .iter()
                .zip(&b.log)
                .any(|(x, y)| x.term < y.term && matches!((x.log_time, y.log_time), (Some(tx), Some(ty)) if tx > ty))
        })
    })
}

// ---------------------------------------------------------------------------
// Printing a path.

fn describe_action(action: &Action) -> String {
    match *action {
        Action::Tick => "a tick of real time".into(),
        Action::Elect { node, voters } => {
            let voters: Vec<String> = (0..8).filter(|v| voters & (1 << v) != 0).map(|v| format!("n{v}")).collect();
            format!("n{node} is elected for the next term by {}", voters.join(", "))
        }
        Action::Replicate { leader, follower } => format!("n{leader} replicates to n{follower}"),
        Action::Expire(n) => format!("n{n} proposes an expiry"),
        Action::Send { client, node, request } => format!("c{client} sends {request:?} to n{node}"),
        Action::Read(n) => format!("a read on n{n} finds the lock free"),
        Action::GiveUp(c) => format!("c{c} gives up on its lost request"),
    }
}

fn describe_op(op: &Op) -> String {
    match *op {
        Op::Blank => "blank".into(),
        Op::Expire => "expire".into(),
        Op::Acquire { owner } => format!("acquire c{owner}"),
        Op::Renew { owner, token } => format!("renew c{owner} #{token}"),
        Op::Release { owner, token } => format!("release c{owner} #{token}"),
        Op::Fence { token } => format!("fence #{token}"),
    }
}

fn describe_state(m: &LockModel, s: &State) -> String {
    let mut out = format!("real time {}\n", s.now);
    for (i, n) in s.nodes.iter().enumerate() {
        let _ = write!(out, "      n{i} term {}", n.term);
        if let Some(t) = LockModel::leader_time(s, n) {
            let _ = write!(out, " LEADER at log time {t}");
        }
        out.push_str(" log");
        for (j, e) in n.log.iter().enumerate() {
            let t = e.log_time.map_or("-".to_string(), |t| t.to_string());
            let commit = if j + 1 == n.commit as usize { " |" } else { "" };
            let _ = write!(out, " [{} t{} @{t} {}]{commit}", j + 1, e.term, describe_op(&e.op));
        }
        if m.old_anchoring {
            let _ = write!(out, "  seen_ever {}", n.seen_ever);
        }
        out.push('\n');
    }
    for (i, c) in s.clients.iter().enumerate() {
        let _ = write!(out, "      c{i}");
        match c.lease {
            Some(l) => {
                let _ = write!(out, " holds #{} until real time {}", l.token, l.until);
            }
            None => out.push_str(" holds nothing"),
        }
        if let Some(p) = c.pending {
            let _ = write!(out, ", waits for entry {} (term {}) sent at {}", p.index, p.term, p.sent);
        }
        out.push('\n');
    }
    out
}

fn describe_path(m: &LockModel, name: &str, path: &Path<State, Action>) -> String {
    let steps = concrete_path(m, path);
    let mut out = format!(
        "Counterexample to \"{name}\", {} steps ([index term @log-time op], `|` after the commit index):\n",
        steps.len() - 1
    );
    for (step, (state, action)) in steps.into_iter().enumerate() {
        let _ = write!(out, "  {step:>2}. {}", describe_state(m, &state));
        if let Some(a) = action {
            let _ = writeln!(out, "      --> {}", describe_action(&a));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The tests.

/// The configuration checked: 3 nodes (the smallest cluster in which a leader
/// can be deposed without hearing of it), 2 clients, one lock key and one
/// fenced resource, 3 ticks of real time, terms 1-3, 5 log entries, 3 writes.
/// About 12.4 million states after symmetry reduction; see tests/model.md.
fn model() -> LockModel {
    LockModel {
        nodes: 3,
        clients: 2,
        max_time: 3,
        max_term: 3,
        max_log: 5,
        ttl: 1,
        writes: 3,
        old_anchoring: false,
        reads_at_leader_clock: false,
        symmetry: true,
    }
}

/// Explores every reachable state breadth-first; prints counts and time, and
/// any counterexample; fails on one. (Each test prints its report at once, as
/// tests run in parallel.)
fn check_exhaustively(m: &LockModel) -> impl Checker<LockModel> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(2);
    let started = Instant::now();
    let checker = m.clone().checker().threads(threads).spawn_bfs().join();
    let mut report = format!(
        "{m:?}\nexhaustive BFS: {} unique states ({} generated), max depth {}, {:.1?} on {threads} threads\n",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    assert!(checker.is_done());
    let discoveries = checker.discoveries();
    for name in SANITY {
        let _ = match discoveries.get(name) {
            Some(path) => writeln!(report, "  reached \"{name}\" ({} steps)", path.clone().into_actions().len()),
            None => writeln!(report, "  never reached \"{name}\""),
        };
    }
    for name in SAFETY {
        if let Some(path) = discoveries.get(name) {
            report.push_str(&describe_path(m, name, path));
        }
    }
    println!("{report}");
    for name in SAFETY {
        assert!(!discoveries.contains_key(name), "counterexample to \"{name}\"");
    }
    checker
}

#[test]
fn log_end_anchoring_is_safe() {
    let checker = check_exhaustively(&model());
    // Every sanity property reached: the bounded space holds grants, renewals,
    // expiries, hand-overs, deposed leaders stamping ahead and a third term.
    checker.assert_properties();
}

/// Two nodes: a leader is deposed only by voting for its successor, so it
/// never stamps ahead; the old anchoring is safe here too. Quick.
#[test]
fn two_nodes_are_safe() {
    check_exhaustively(&LockModel { nodes: 2, ..model() });
    check_exhaustively(&LockModel { nodes: 2, old_anchoring: true, ..model() });
}

/// Checks `m` breadth-first on one thread (so that the path found is a
/// shortest one) until `property` has a counterexample, and prints it.
fn find_counterexample(m: LockModel, property: &'static str) {
    let started = Instant::now();
    let checker = m
        .clone()
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .timeout(Duration::from_secs(600))
        .spawn_bfs()
        .join();
    let mut report = format!(
        "{m:?}\nBFS stopped at the first counterexample: {} unique states ({} generated), depth {}, {:.1?}\n",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    let path = checker.discovery(property).unwrap_or_else(|| panic!("no counterexample to \"{property}\""));
    report.push_str(&describe_path(&m, property, &path));
    for (name, other) in checker.discoveries() {
        if name != property && SAFETY.contains(&name) {
            let _ = writeln!(report, "(also violated: \"{name}\", in {} steps)", other.into_actions().len());
        }
    }
    println!("{report}");
}

/// Issue 10 §1: with the old anchoring rule a failover shortens a lease.
#[test]
fn old_anchoring_shortens_a_lease() {
    find_counterexample(LockModel { old_anchoring: true, ..model() }, NO_EARLY_EXPIRY);
}

/// Issue 10 §2: a read judged at the leader's live clock sees an expiry that
/// the log later undoes.
#[test]
fn reads_at_the_leader_clock_are_not_linearizable() {
    find_counterexample(LockModel { reads_at_leader_clock: true, ..model() }, READS);
}
