//! Metric names, descriptions and the Prometheus exporter (DESIGN.md §9).
//!
//! Labels never carry key names: cardinality stays bounded. Every metric is
//! recorded through a function here, so the names live in one place.

use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::keyspace::LeaseEvent;
use crate::protocol::Reply;

const COMMANDS: &str = "raftlock_commands_total";
const LOCK_GRANTS: &str = "raftlock_lock_grants_total";
const LOCK_DENIALS: &str = "raftlock_lock_denials_total";
const LOCK_RENEWALS: &str = "raftlock_lock_renewals_total";
const LOCK_RELEASES: &str = "raftlock_lock_releases_total";
const LEASE_EXPIRATIONS: &str = "raftlock_lease_expirations_total";
const FENCING_REJECTIONS: &str = "raftlock_fencing_rejections_total";
const LEASE_TTL: &str = "raftlock_lease_requested_ttl_seconds";
const LOCK_HOLD: &str = "raftlock_lock_hold_seconds";
const LEASE_HEADROOM: &str = "raftlock_lease_headroom_ratio";
const RAFT_TERM: &str = "raftlock_raft_term";
const RAFT_LEADER: &str = "raftlock_raft_is_leader";
const RAFT_LEADER_CHANGES: &str = "raftlock_raft_leader_changes_total";
const RAFT_ELECTIONS_STARTED: &str = "raftlock_raft_elections_started_total";
const RAFT_APPLIED: &str = "raftlock_raft_applied_index";
const RAFT_LAST_LOG: &str = "raftlock_raft_last_log_index";
const APPLY_LAG: &str = "raftlock_raft_apply_lag_entries";
const REPLICATION_LAG: &str = "raftlock_raft_replication_lag_entries";
const QUORUM_ACK_AGE: &str = "raftlock_raft_quorum_ack_age_seconds";
const PEER_CLOCK_OFFSET: &str = "raftlock_peer_clock_offset_seconds";
const PEER_RTT: &str = "raftlock_peer_rtt_seconds";
const COMMIT_LATENCY: &str = "raftlock_commit_latency_seconds";
const FSYNC_LATENCY: &str = "raftlock_log_fsync_seconds";
const FSYNC_BATCH: &str = "raftlock_log_fsync_batch_appends";
const READ_BATCH: &str = "raftlock_read_index_batch_reads";
const WRITE_BATCH: &str = "raftlock_log_entry_commands";
const FORWARD_BATCH: &str = "raftlock_forwarded_batch_commands";
const CLIENTS: &str = "raftlock_connected_clients";
const DISK_FREE: &str = "raftlock_disk_free_bytes";
const DISK_LOW: &str = "raftlock_disk_nearly_full";
const REJECTED: &str = "raftlock_rejected_connections_total";
const TLS_FAILED: &str = "raftlock_tls_handshake_failures_total";
const SNAPSHOT_BYTES: &str = "raftlock_snapshot_bytes";
const SNAPSHOT_BUILD: &str = "raftlock_snapshot_build_seconds";
const SNAPSHOT_FAILURES: &str = "raftlock_snapshot_failures_total";
const REPEATED: &str = "raftlock_repeated_commands_total";
const LOCK_WAITERS: &str = "raftlock_lock_waiters";
const LOCK_WAIT: &str = "raftlock_lock_wait_seconds";
const LOCK_HANDOFFS: &str = "raftlock_lock_handoffs_total";
const LOCK_WAIT_TIMEOUTS: &str = "raftlock_lock_wait_timeouts_total";

/// Commands this node's state machine answered from the client session
/// instead of running them (a retried copy of a command that had already
/// run), since the process started; also in `RAFT.INFO`.
static REPEATED_COMMANDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Installs the Prometheus recorder and describes every metric; the handle
/// renders `/metrics` (served by `server::dashboard`, which also runs the
/// recorder's upkeep).
pub fn install() -> Result<PrometheusHandle, String> {
    let latency = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
    let lease = [0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];
    let headroom = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
    let sizes = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(COMMIT_LATENCY.into()), &latency)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(FSYNC_LATENCY.into()), &latency))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(LEASE_TTL.into()), &lease))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(LOCK_HOLD.into()), &lease))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(LEASE_HEADROOM.into()), &headroom))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(LOCK_WAIT.into()), &latency))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(FSYNC_BATCH.into()), &sizes))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(READ_BATCH.into()), &sizes))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(WRITE_BATCH.into()), &sizes))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(FORWARD_BATCH.into()), &sizes))
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| format!("metrics recorder: {e}"))?;
    describe();
    let _ = HOT.set(Hot {
        grants: counter!(LOCK_GRANTS),
        lease_ttl: histogram!(LEASE_TTL),
        renewals_ok: counter!(LOCK_RENEWALS, "result" => "ok"),
        headroom: histogram!(LEASE_HEADROOM),
        releases: counter!(LOCK_RELEASES),
        expirations: counter!(LEASE_EXPIRATIONS),
        hold: histogram!(LOCK_HOLD),
    });
    let _ = RAFT_GAUGES.set(RaftGauges {
        term: gauge!(RAFT_TERM),
        leader: gauge!(RAFT_LEADER),
        applied: gauge!(RAFT_APPLIED),
        last_log: gauge!(RAFT_LAST_LOG),
        apply_lag: gauge!(APPLY_LAG),
        quorum_ack_age: gauge!(QUORUM_ACK_AGE),
        replication_lag: Default::default(),
    });
    Ok(handle)
}

/// The handles of the series recorded for every lease event, made once the
/// recorder is installed. Each `counter!`/`histogram!` looks its series up in
/// the recorder's registry (a hash of name and labels under a lock): about
/// 3% of the worker thread under pipelined writes. Unset without a recorder
/// (`--metrics-addr off`, or the library in tests): then nothing is
/// recorded, as the macros would record nothing.
struct Hot {
    grants: Counter,
    lease_ttl: Histogram,
    renewals_ok: Counter,
    headroom: Histogram,
    releases: Counter,
    expirations: Counter,
    hold: Histogram,
}

static HOT: std::sync::OnceLock<Hot> = std::sync::OnceLock::new();

/// The handles of the Raft gauges, set at every change of openraft's
/// metrics (several times per log entry), made once the recorder is
/// installed as [`Hot`]'s are: looking each up by name cost the leader's
/// worker thread 4% in a three-node run (the lag's peer label a new string
/// each time).
struct RaftGauges {
    term: Gauge,
    leader: Gauge,
    applied: Gauge,
    last_log: Gauge,
    apply_lag: Gauge,
    quorum_ack_age: Gauge,
    /// `raftlock_raft_replication_lag_entries` by peer, made as peers appear.
    replication_lag: std::sync::Mutex<std::collections::BTreeMap<u64, Gauge>>,
}

static RAFT_GAUGES: std::sync::OnceLock<RaftGauges> = std::sync::OnceLock::new();

thread_local! {
    /// `raftlock_commands_total`'s handles by command name (a `&'static str`
    /// of the command table, keyed by its address and length) and result, once the
    /// recorder is installed.
    static COMMAND_COUNTERS: std::cell::RefCell<std::collections::HashMap<(usize, usize, bool), Counter>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Counters exported from the start, at 0: a series that appears only
/// with its first event has no rate before it, and an alert on it cannot fire.
fn register_counters() {
    for name in [LOCK_GRANTS, LOCK_DENIALS, LOCK_RELEASES, LEASE_EXPIRATIONS, FENCING_REJECTIONS, RAFT_LEADER_CHANGES, RAFT_ELECTIONS_STARTED, SNAPSHOT_FAILURES, REJECTED, TLS_FAILED, REPEATED, LOCK_HANDOFFS, LOCK_WAIT_TIMEOUTS] {
        counter!(name).increment(0);
    }
    for result in ["ok", "lost"] {
        counter!(LOCK_RENEWALS, "result" => result).increment(0);
    }
}

fn describe() {
    register_counters();
    describe_counter!(COMMANDS, "Commands served, by command name and result (ok or error).");
    describe_counter!(LOCK_GRANTS, "Locks granted (LOCK.ACQUIRE or SET NX with expiry on a free key).");
    describe_counter!(LOCK_DENIALS, "LOCK.ACQUIRE calls refused because another owner held the lock.");
    describe_counter!(LOCK_RENEWALS, "Lease renewals, by result: ok, or lost (LOCKLOST).");
    describe_counter!(LOCK_RELEASES, "Locks released by their holder.");
    describe_counter!(LEASE_EXPIRATIONS, "Leases that expired while held: a holder died or stalled.");
    describe_counter!(FENCING_REJECTIONS, "LOCK.FENCE calls rejected with STALE.");
    describe_histogram!(LEASE_TTL, Unit::Seconds, "Lease length requested at grant.");
    describe_histogram!(
        LEASE_HEADROOM,
        "At each renewal, the lease time that was left, as a fraction of the TTL it is renewed for (near 0: holders renew at the last moment and are about to lose their locks)."
    );
    describe_histogram!(LOCK_HOLD, Unit::Seconds, "How long a lock was held until release or expiry.");
    describe_gauge!(RAFT_TERM, "Current Raft term.");
    describe_gauge!(RAFT_LEADER, "1 if this node is the leader.");
    describe_counter!(RAFT_LEADER_CHANGES, "Times a (new) leader became known to this node.");
    describe_counter!(RAFT_ELECTIONS_STARTED, "Elections this node stood in (it voted for itself in a new term).");
    describe_gauge!(RAFT_APPLIED, "Last log index applied to the state machine.");
    describe_gauge!(RAFT_LAST_LOG, "Last log index in this node's log (apply lag = last log - applied).");
    describe_gauge!(APPLY_LAG, "Entries in this node's log not yet applied to its state machine (last log index - applied index; an upper bound of commit - applied).");
    describe_gauge!(REPLICATION_LAG, "On the leader: log entries each member (label peer = node id) has not yet acknowledged; 0 on followers.");
    describe_gauge!(QUORUM_ACK_AGE, Unit::Seconds, "On the leader: time since a quorum last acknowledged it; 0 on followers.");
    describe_gauge!(PEER_CLOCK_OFFSET, Unit::Seconds, "How far each peer's wall clock (label peer = node id) is ahead of this node's (negative: behind), measured on the peer calls this node makes, within half the round trip below. Leases do not depend on it.");
    describe_gauge!(PEER_RTT, Unit::Seconds, "The round trip the peer's clock offset was measured on.");
    describe_histogram!(COMMIT_LATENCY, Unit::Seconds, "Time from proposing a command to its reply.");
    describe_histogram!(FSYNC_LATENCY, Unit::Seconds, "Time of one fsync of the Raft log.");
    describe_histogram!(FSYNC_BATCH, "Appends made durable by one fsync (group commit).");
    describe_histogram!(READ_BATCH, "Reads served by one ReadIndex round.");
    describe_histogram!(WRITE_BATCH, "Client commands proposed in one log entry (group commit).");
    describe_histogram!(FORWARD_BATCH, "Client commands a follower forwarded in one message, as the leader received them.");
    describe_gauge!(CLIENTS, "Connected clients.");
    describe_gauge!(DISK_FREE, Unit::Bytes, "Free space on the data directory's disk, read every 100 ms.");
    describe_gauge!(DISK_LOW, "1 while the free space is below --min-free-disk: commands that may add data are refused (MISCONF).");
    describe_counter!(REJECTED, "Connections refused over maxclients.");
    describe_counter!(TLS_FAILED, "TLS handshakes that failed or timed out (clients and peers).");
    describe_gauge!(SNAPSHOT_BYTES, "Size of the last snapshot built.");
    describe_counter!(SNAPSHOT_FAILURES, "Snapshots this node could not write (it keeps its log and tries again).");
    describe_gauge!(SNAPSHOT_BUILD, "Time the last snapshot took to encode and write (off the apply path).");
    describe_gauge!(LOCK_WAITERS, "Owners queued for locks (LOCK.ACQUIRE ... WAIT), on every key together.");
    describe_histogram!(LOCK_WAIT, Unit::Seconds, "How long a waiter waited, until its grant or its timeout (log time).");
    describe_counter!(LOCK_HANDOFFS, "Locks handed to a waiter by the entry that freed them.");
    describe_counter!(LOCK_WAIT_TIMEOUTS, "Waiters whose WAIT ran out before the lock was theirs.");
    describe_counter!(
        REPEATED,
        "Retried copies of commands that had already run, answered with the first reply instead of running again."
    );
}

/// Counts a command and the lock outcomes visible only in its reply.
pub fn record_command(name: &'static str, reply: &Reply) {
    if HOT.get().is_none() {
        return;
    }
    let error = reply.is_error();
    COMMAND_COUNTERS.with(|counters| {
        let make = || counter!(COMMANDS, "command" => name, "result" => if error { "error" } else { "ok" });
        counters.borrow_mut().entry((name.as_ptr() as usize, name.len(), error)).or_insert_with(make).increment(1)
    });
    match (name, reply) {
        ("lock.acquire", Reply::Nil) => counter!(LOCK_DENIALS).increment(1),
        ("lock.renew", Reply::Error(e)) if e.starts_with("LOCKLOST") => {
            counter!(LOCK_RENEWALS, "result" => "lost").increment(1)
        }
        ("lock.fence", Reply::Error(e)) if e.starts_with("STALE") => counter!(FENCING_REJECTIONS).increment(1),
        _ => {}
    }
}

/// Records a lease transition applied on this node.
pub fn record_lease(kind: LeaseEvent, ttl_ms: u64, held_ms: u64) {
    let Some(hot) = HOT.get() else { return };
    let secs = |ms: u64| ms as f64 / 1000.0;
    match kind {
        LeaseEvent::Acquired => {
            hot.grants.increment(1);
            hot.lease_ttl.record(secs(ttl_ms));
        }
        LeaseEvent::Renewed { left_ms } => {
            hot.renewals_ok.increment(1);
            // What was left of the lease, against the length it is renewed
            // for (the TTL a holder asks for each time).
            if ttl_ms > 0 {
                hot.headroom.record((left_ms as f64 / ttl_ms as f64).min(1.0));
            }
        }
        LeaseEvent::Released => {
            hot.releases.increment(1);
            hot.hold.record(secs(held_ms));
        }
        LeaseEvent::Expired => {
            hot.expirations.increment(1);
            hot.hold.record(secs(held_ms));
        }
    }
}

/// Records the end of a wait applied on this node: a handoff, or a timeout.
pub fn record_wait(granted: bool, waited_ms: u64) {
    counter!(if granted { LOCK_HANDOFFS } else { LOCK_WAIT_TIMEOUTS }).increment(1);
    histogram!(LOCK_WAIT).record(waited_ms as f64 / 1000.0);
}

/// Owners queued for locks, as applied on this node.
pub fn set_waiters(n: usize) {
    gauge!(LOCK_WAITERS).set(n as f64);
}

pub fn record_raft_state(term: u64, leader: bool, applied: u64, last_log: u64) {
    let Some(g) = RAFT_GAUGES.get() else { return };
    g.term.set(term as f64);
    g.leader.set(if leader { 1.0 } else { 0.0 });
    g.applied.set(applied as f64);
    g.last_log.set(last_log as f64);
    g.apply_lag.set(last_log.saturating_sub(applied) as f64);
}

/// On the leader, each member's replication lag in log entries (0 for a
/// member no longer in the configuration, and everywhere on a follower), and
/// how long ago a quorum last acknowledged the leader.
pub fn record_replication(lags: &[(u64, u64)], reported: &std::collections::BTreeSet<u64>, quorum_ack_ms: Option<u64>) {
    let Some(g) = RAFT_GAUGES.get() else { return };
    let mut by_peer = g.replication_lag.lock().unwrap_or_else(|e| e.into_inner());
    for id in reported {
        let lag = lags.iter().find(|(n, _)| n == id).map_or(0, |(_, l)| *l);
        by_peer.entry(*id).or_insert_with(|| gauge!(REPLICATION_LAG, "peer" => id.to_string())).set(lag as f64);
    }
    g.quorum_ack_age.set(quorum_ack_ms.map_or(0.0, |ms| ms as f64 / 1000.0));
}

/// The last estimate of `peer`'s wall-clock offset from this node's (positive:
/// the peer's clock is ahead), and the round trip it was measured on.
pub fn record_peer_clock(peer: u64, offset_us: i64, rtt_us: u64) {
    gauge!(PEER_CLOCK_OFFSET, "peer" => peer.to_string()).set(offset_us as f64 / 1e6);
    gauge!(PEER_RTT, "peer" => peer.to_string()).set(rtt_us as f64 / 1e6);
}

pub fn record_leader_change() {
    counter!(RAFT_LEADER_CHANGES).increment(1);
}

pub fn record_election_started() {
    counter!(RAFT_ELECTIONS_STARTED).increment(1);
}

pub fn record_commit(elapsed: Duration) {
    histogram!(COMMIT_LATENCY).record(elapsed.as_secs_f64());
}

pub fn record_fsync(elapsed: Duration, appends: usize) {
    histogram!(FSYNC_LATENCY).record(elapsed.as_secs_f64());
    histogram!(FSYNC_BATCH).record(appends as f64);
}

pub fn record_read_batch(reads: usize) {
    histogram!(READ_BATCH).record(reads as f64);
}

pub fn record_write_batch(commands: usize) {
    histogram!(WRITE_BATCH).record(commands as f64);
}

pub fn record_forward_batch(commands: usize) {
    histogram!(FORWARD_BATCH).record(commands as f64);
}

pub fn set_disk(free_bytes: u64, nearly_full: bool) {
    gauge!(DISK_FREE).set(free_bytes as f64);
    gauge!(DISK_LOW).set(if nearly_full { 1.0 } else { 0.0 });
}

pub fn set_clients(n: usize) {
    gauge!(CLIENTS).set(n as f64);
}

pub fn record_tls_handshake_failure() {
    counter!(TLS_FAILED).increment(1);
}

pub fn record_rejected_connection() {
    counter!(REJECTED).increment(1);
}

pub fn record_repeated_command() {
    REPEATED_COMMANDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    counter!(REPEATED).increment(1);
}

/// See [`record_repeated_command`].
pub fn repeated_commands() -> u64 {
    REPEATED_COMMANDS.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn record_snapshot_failure() {
    counter!(SNAPSHOT_FAILURES).increment(1);
}

pub fn record_snapshot(bytes: usize, build: Duration) {
    gauge!(SNAPSHOT_BYTES).set(bytes as f64);
    gauge!(SNAPSHOT_BUILD).set(build.as_secs_f64());
}
