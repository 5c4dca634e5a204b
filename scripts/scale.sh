#!/usr/bin/env bash
# Scale benchmark (issue 12): one raftlock node beside redis-server with the
# same durability (appendonly yes, appendfsync always), in one run.
#
# For each server: redis-benchmark's --clients clients insert --keys lock keys
# (SET lock:<random> owner NX PX 3600000), while two probes run beside them:
# a one-client lock loop (LOCK.ACQUIRE, LOCK.RENEW, LOCK.RELEASE on raftlock;
# SET NX PX, the compare-and-PEXPIRE and compare-and-delete scripts by EVALSHA
# on Redis; benches/loadgen.rs --renew, in 5-s windows) and a PING sampler
# (redis-cli --latency, one PING every 10 ms). Then it prints: insert rate,
# keys held, RSS and bytes per key, data directory size, the probes' worst
# p99.9 window and maximum (the lock loop's for each command, and the longest
# acquire-renew-release cycle), raftlock's last snapshot (build time, size),
# and the time from kill -9 to serving writes again after a restart, and the
# restarted node's RSS.
# With --cluster, a second phase follows (Redis and the one-node raftlock are
# stopped first): a three-node raftlock cluster, where redis-benchmark inserts
# the same --keys lock keys through the leader with the same probes beside it;
# it prints the insert rate, how much longer (after the insert's end and 2 s)
# the followers took to apply the leader's commit index, each node's RSS
# (bytes per key of the leader's DBSIZE), data directory and snapshot index,
# and the leader's last snapshot.
# With --learner, once the keys are in (in the cluster if --cluster ran,
# otherwise in the one-node raftlock, after its restart), a fresh empty node
# is started and added with RAFT.NODE ADD on the leader; it prints the time
# from the ADD until the new node's applied_index (RAFT.INFO) reaches the
# leader's commit_index read just before the ADD, what the ADD answered and
# when (it makes the node a voter once it has caught up, or answers an error
# after --request-timeout-ms, 5 s by default, and leaves it a learner), whether
# it caught up by an installed snapshot (its first state with anything applied
# already has a snapshot_index, and it built no snapshot itself: its
# raftlock_snapshot_bytes metric is unset) or by replaying the log, and its
# DBSIZE and RSS. The leader sends a snapshot only if it has purged the log
# the learner needs: with the default --snapshot-logs 20000 (entries, and the
# insert's commands share entries), small --keys runs may take no snapshot at
# all; RAFTLOCK_SNAPSHOT_LOGS=N in the environment reaches every node.
# Servers run on free 127.0.0.1 ports with their data in one temporary
# directory, and are stopped on exit; every wait has a time limit.
#
# Usage: scripts/scale.sh [--keys N] [--clients C] [--pipeline P]
#                         [--binary PATH] [--cluster] [--learner]
#                         [--no-build [--loadgen PATH]]
#   (defaults: N = 1000000, C = 50, P = 1)
#   --pipeline P: each insert client pipelines P commands (redis-benchmark
#   -P): raftlock then puts far more commands in each log entry, which is
#   what --snapshot-log-bytes bounds for the restart.
#   --no-build: run the binaries already built (--binary, default
#   $CARGO_TARGET_DIR/release/raftlock; --loadgen, default the newest
#   $CARGO_TARGET_DIR/release/deps/loadgen-*) instead of `cargo build
#   --release` and `cargo bench --no-run` first (which rebuild from the work
#   tree).
# Environment: CARGO_TARGET_DIR (default /var/tmp/raftlock-target), BENCH_DIR
# (parent of the data directory, default /var/tmp; keep it off tmpfs),
# KEEP_BENCH_DIR=1 keeps data and logs.
set -euo pipefail

KEYS=1000000
CLIENTS=50
PIPELINE=1
BINARY=""
CLUSTER=0
LEARNER=0
BUILD=1
LOADGEN_PATH=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --keys) KEYS="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --pipeline) PIPELINE="$2"; shift 2 ;;
        --binary) BINARY="$2"; shift 2 ;;
        --cluster) CLUSTER=1; shift ;;
        --learner) LEARNER=1; shift ;;
        --no-build) BUILD=0; shift ;;
        --loadgen) LOADGEN_PATH="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "scale.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
for v in "$KEYS" "$CLIENTS" "$PIPELINE"; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "scale.sh: --keys, --clients and --pipeline are whole numbers >= 1" >&2; exit 2; }
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
log() { echo "scale.sh: $*" >&2; }

scripts/deps.sh >&2
command -v redis-benchmark >/dev/null 2>&1 || { log "redis-benchmark (redis-tools) is missing"; exit 1; }
if [[ $BUILD == 1 ]]; then
    log "building (release) into $CARGO_TARGET_DIR"
    timeout 3600 cargo build --release >&2
fi
RAFTLOCK="${BINARY:-$CARGO_TARGET_DIR/release/raftlock}"
[[ -x "$RAFTLOCK" ]] || { log "no raftlock executable at $RAFTLOCK"; exit 1; }

WORK="$(mktemp -d "${BENCH_DIR:-/var/tmp}/raftlock-scale.XXXXXX")"
declare -A PIDS=()
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
if [[ $BUILD == 1 ]]; then
    LOADGEN="$(loadgen_binary 3600)"
else
    LOADGEN="${LOADGEN_PATH:-$(find "$CARGO_TARGET_DIR/release/deps" -maxdepth 1 -type f -name 'loadgen-*' ! -name '*.*' -perm -u+x -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -n 1 | cut -d' ' -f2-)}"
    log "not building: raftlock $RAFTLOCK, loadgen ${LOADGEN:-(none found)}"
fi
[[ -n "$LOADGEN" && -x "$LOADGEN" ]] || { log "could not build the loadgen bench"; exit 1; }

free_port REDIS_PORT
free_port RL_PORT
free_port RL_PEER
free_port RL_METRICS
mkdir -p "$WORK/redis" "$WORK/raftlock"
# The one-node raftlock takes a learner only with --learner and no --cluster:
# a node joins with a cluster secret, so the one node needs one too.
if [[ $LEARNER == 1 && $CLUSTER == 0 ]]; then
    export RAFTLOCK_CLUSTER_SECRET="scale-$$-$RANDOM"
fi
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --appendonly yes --appendfsync always \
    --save '' --dir "$WORK/redis" --daemonize no --logfile "$WORK/redis.log" >/dev/null 2>&1 &
PIDS[redis]=$!
start_raftlock() {
    "$RAFTLOCK" --bind 127.0.0.1 --port "$RL_PORT" --peer-port "$RL_PEER" --data-dir "$WORK/raftlock" \
        --metrics-addr "127.0.0.1:$RL_METRICS" >>"$WORK/raftlock.log" 2>&1 &
    PIDS[raftlock]=$!
}
start_raftlock
wait_ready "$REDIS_PORT" "${PIDS[redis]}" redis-server "$WORK/redis.log"
wait_ready "$RL_PORT" "${PIDS[raftlock]}" raftlock "$WORK/raftlock.log"

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
metric() { metric_at "$RL_METRICS" "$1"; } # metric-name: its value on the raftlock node

declare -A ROW=()
measure() { # name port pid mode datadir
    local name="$1" port="$2" pid="$3" mode="$4" dir="$5" started ended bench_pid
    log "$name: inserting $KEYS lock keys with $CLIENTS clients, probes running"
    : >"$WORK/$name.probe"
    : >"$WORK/$name.ping"
    timeout 7200 redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -P "$PIPELINE" -n "$KEYS" -r 1000000000 -q \
        SET 'lock:__rand_int__' owner NX PX 3600000 >"$WORK/$name.bench" 2>&1 &
    bench_pid=$!
    started="$(date +%s%N)"
    while kill -0 "$bench_pid" 2>/dev/null; do
        timeout 60 "$LOADGEN" --host 127.0.0.1 --port "$port" --mode "$mode" --scenario custom --clients 1 --renew \
            --keys distinct --duration-secs 5 --warmup-secs 0 --label "$name" >>"$WORK/$name.probe" 2>>"$WORK/$name.probe.err" &
        local probe=$!
        local i
        for i in 1 2 3 4 5; do
            timeout 10 redis-cli -h 127.0.0.1 -p "$port" --latency --raw >>"$WORK/$name.ping" 2>/dev/null || true
        done
        wait "$probe" || log "$name: a probe window failed: $(tail -n 3 "$WORK/$name.probe.err" | tr '\n' ' ')"
    done
    wait "$bench_pid" || { log "$name: redis-benchmark failed:"; cat "$WORK/$name.bench" >&2; return 1; }
    ended="$(date +%s%N)"
    sleep 2
    local rate keys rss bytes
    rate="$(tr '\r' '\n' <"$WORK/$name.bench" | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -n 1)"
    keys="$(timeout 10 redis-cli -h 127.0.0.1 -p "$port" DBSIZE)"
    rss="$(rss_kb "$pid")"
    bytes="$(du -sb "$dir" | cut -f1)"
    ROW[$name.rate]="${rate:-?} req/s ($(( (ended - started) / 1000000000 )) s)"
    ROW[$name.keys]="$keys"
    ROW[$name.rss]="$((rss / 1024)) MB, $(( rss * 1024 / (keys > 0 ? keys : 1) )) bytes/key"
    ROW[$name.disk]="$((bytes / 1024 / 1024)) MB"
    ROW[$name.probe]="$(awk '/^RESULT/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        if (v["cmd_p999_ms"] > p) p = v["cmd_p999_ms"]; if (v["cmd_max_ms"] > m) m = v["cmd_max_ms"]
        if (v["max_ms"] > c) c = v["max_ms"]; n += v["commands"] }
        END { printf "each command: worst p99.9 %.1f ms, max %.1f ms (%d commands); longest cycle %.1f ms", p, m, n, c }' "$WORK/$name.probe")"
    ROW[$name.ping]="$(awk '{ if ($2 > m) m = $2; n += $4 } END { printf "max %d ms (%d PINGs)", m, n }' "$WORK/$name.ping")"
}

measure redis "$REDIS_PORT" "${PIDS[redis]}" redis-evalsha "$WORK/redis"
measure raftlock "$RL_PORT" "${PIDS[raftlock]}" raftlock "$WORK/raftlock"
SNAP_SECS="$(metric raftlock_snapshot_build_seconds)"
SNAP_BYTES="$(metric raftlock_snapshot_bytes)"

log "raftlock: kill -9, restart, time to serving writes"
kill -KILL "${PIDS[raftlock]}"
wait "${PIDS[raftlock]}" 2>/dev/null || true
killed="$(date +%s%N)"
start_raftlock
RESTART="no answer within 600 s"
for i in $(seq 1 6000); do
    if [[ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$RL_PORT" SET scale:restarted 1 2>/dev/null || true)" == OK ]]; then
        RESTART="$(( ($(date +%s%N) - killed) / 1000000 )) ms"
        break
    fi
    kill -0 "${PIDS[raftlock]}" 2>/dev/null || { RESTART="the node exited; see its log"; tail -n 20 "$WORK/raftlock.log" >&2; break; }
    sleep 0.1
done
# What the restarted node holds: the keyspace decoded from its snapshot and
# the log replayed after it, once it serves.
sleep 2
RESTARTED_RSS="?"
if kill -0 "${PIDS[raftlock]}" 2>/dev/null; then
    rss="$(rss_kb "${PIDS[raftlock]}")"
    keys="$(timeout 10 redis-cli -h 127.0.0.1 -p "$RL_PORT" DBSIZE || echo 0)"
    RESTARTED_RSS="$((rss / 1024)) MB, $(( rss * 1024 / (keys > 0 ? keys : 1) )) bytes/key"
fi

dbsize() { timeout 10 redis-cli -h 127.0.0.1 -p "$1" DBSIZE 2>/dev/null || echo 0; }
# Waits until the node at port $1 has applied index $2 (at most $3 s); prints
# the ms waited, or "" if it never did.
wait_applied() { # port index seconds
    local start applied
    start="$(date +%s%N)"
    while (( $(date +%s%N) - start < $3 * 1000000000 )); do
        applied="$(raft_field "$1" applied_index)"
        if [[ -n "$applied" && "$applied" -ge "$2" ]]; then
            echo $(( ($(date +%s%N) - start) / 1000000 ))
            return 0
        fi
        sleep 0.05
    done
}
mb() { echo "$(( $1 / 1024 / 1024 )) MB"; }

# Phase 2 (--cluster): three nodes, the same insert through the leader.
declare -A C_PORT=() C_PEER=() C_METRICS=()
MEMBERS=""
LEADER=""
if [[ $CLUSTER == 1 ]]; then
    log "stopping redis-server and the one-node raftlock before the cluster phase"
    stop_server "${PIDS[redis]}" redis
    unset 'PIDS[redis]'
    stop_server "${PIDS[raftlock]}" raftlock
    unset 'PIDS[raftlock]'
    cluster_ports
    SECRET="scale-$$-$RANDOM"
    log "starting a three-node raftlock cluster ($MEMBERS)"
    for id in 1 2 3; do start_cluster_node "$id" "$WORK/cluster/node$id"; done
    for id in 1 2 3; do wait_ready "${C_PORT[$id]}" "${PIDS[node$id]}" "node $id" "$WORK/node$id.log"; done
    # A leader that every node names, and that says so itself (60 s at most).
    for i in $(seq 1 300); do
        LEADER="$(cluster_leader)"
        [[ -n "$LEADER" ]] && break
        sleep 0.2
    done
    [[ -n "$LEADER" ]] || { log "the cluster did not agree on a leader within 60 s"; exit 1; }
    log "cluster: node $LEADER leads"
    measure cluster "${C_PORT[$LEADER]}" "${PIDS[node$LEADER]}" raftlock "$WORK/cluster/node$LEADER"
    C_COMMIT="$(raft_field "${C_PORT[$LEADER]}" commit_index)"
    C_KEYS="$(dbsize "${C_PORT[$LEADER]}")"
    C_FOLLOWED=""
    for id in 1 2 3; do
        [[ "$id" == "$LEADER" ]] && continue
        waited="$(wait_applied "${C_PORT[$id]}" "${C_COMMIT:-0}" 600)"
        [[ -n "$waited" ]] && waited+=" ms" || waited="not within 600 s"
        C_FOLLOWED+="${C_FOLLOWED:+, }node $id $waited"
    done
    declare -A C_ROW=()
    C_DISK="" C_SNAP="" C_APPLIED=""
    for id in 1 2 3; do
        rss="$(rss_kb "${PIDS[node$id]}" 2>/dev/null || echo 0)"
        info="$(raft_info "${C_PORT[$id]}")"
        C_ROW[$id]="$((rss / 1024)) MB, $(( rss * 1024 / (C_KEYS > 0 ? C_KEYS : 1) )) bytes/key"
        C_DISK+="${C_DISK:+, }$(mb "$(du -sb "$WORK/cluster/node$id" | cut -f1)")"
        C_APPLIED+="${C_APPLIED:+, }$(field_of applied_index "$info")"
        C_SNAP+="${C_SNAP:+, }$(field_of snapshot_index "$info")"
    done
    C_SNAP_SECS="$(metric_at "${C_METRICS[$LEADER]}" raftlock_snapshot_build_seconds)"
    C_SNAP_BYTES="$(metric_at "${C_METRICS[$LEADER]}" raftlock_snapshot_bytes)"
fi

# --learner: a fresh node joins the phase that ran last, through its leader.
if [[ $LEARNER == 1 ]]; then
    if [[ $CLUSTER == 1 ]]; then
        L_LEADER_PORT="${C_PORT[$LEADER]}"
        L_ID=4
        L_WHERE="node 4 added to the 3-node cluster (leader node $LEADER)"
    else
        L_LEADER_PORT="$RL_PORT"
        L_ID=2
        SECRET="$RAFTLOCK_CLUSTER_SECRET"
        MEMBERS="1=127.0.0.1:$RL_PEER/127.0.0.1:$RL_PORT"
        L_WHERE="node 2 added to the one-node raftlock (after its restart)"
    fi
    free_port L_PORT
    free_port L_PEER
    free_port L_METRICS
    mkdir -p "$WORK/learner"
    "$RAFTLOCK" --node-id "$L_ID" --bind 127.0.0.1 --port "$L_PORT" --peer-port "$L_PEER" \
        --data-dir "$WORK/learner" --metrics-addr "127.0.0.1:$L_METRICS" --cluster-secret "$SECRET" \
        --initial-cluster "$MEMBERS,$L_ID=127.0.0.1:$L_PEER/127.0.0.1:$L_PORT" >>"$WORK/learner.log" 2>&1 &
    PIDS[learner]=$!
    wait_ready "$L_PORT" "${PIDS[learner]}" "node $L_ID (learner)" "$WORK/learner.log"
    info="$(raft_info "$L_LEADER_PORT")"
    L_TARGET="$(field_of commit_index "$info")"
    [[ -n "$L_TARGET" ]] || { log "learner: the leader (port $L_LEADER_PORT) did not answer RAFT.INFO"; exit 1; }
    L_BEFORE="commit $L_TARGET, last log $(field_of last_log_index "$info"), snapshot $(field_of snapshot_index "$info")"
    L_LEADER_KEYS="$(dbsize "$L_LEADER_PORT")"
    log "learner: RAFT.NODE ADD $L_ID on the leader (its $L_BEFORE); waiting for node $L_ID to apply index $L_TARGET"
    added="$(date +%s%N)"
    ( reply="$(timeout 300 redis-cli -h 127.0.0.1 -p "$L_LEADER_PORT" RAFT.NODE ADD "$L_ID" "127.0.0.1:$L_PEER" "127.0.0.1:$L_PORT" 2>&1 | tr -d '\r' | tr '\n' ' ')" || true
      echo "$(date +%s%N) ${reply:-no answer within 300 s}" >"$WORK/learner.add" ) &
    PIDS[learner-add]=$!
    L_CAUGHT="not within 600 s"
    L_FIRST=""
    while (( $(date +%s%N) - added < 600 * 1000000000 )); do
        info="$(raft_info "$L_PORT")"
        a="$(field_of applied_index "$info")"
        s="$(field_of snapshot_index "$info")"
        [[ -z "$L_FIRST" && -n "$a" && "$a" -gt 0 ]] && L_FIRST="$a $s"
        if [[ -n "$a" && "$a" -ge "$L_TARGET" ]]; then
            L_CAUGHT="$(( ($(date +%s%N) - added) / 1000000 )) ms"
            break
        fi
        kill -0 "${PIDS[learner]}" 2>/dev/null || { L_CAUGHT="node $L_ID exited; see its log"; tail -n 20 "$WORK/learner.log" >&2; break; }
        sleep 0.05
    done
    wait "${PIDS[learner-add]}" 2>/dev/null || true
    unset 'PIDS[learner-add]'
    read -r add_done L_ADD <"$WORK/learner.add" || L_ADD="?"
    L_ADD="${L_ADD% } ($(( (${add_done:-$added} - added) / 1000000 )) ms after it was sent)"
    if [[ "$L_ADD" != OK* ]]; then
        # It answers an error when the node has not caught up within the
        # request timeout, and leaves it a learner: ask again, now it has.
        again="$(timeout 60 redis-cli -h 127.0.0.1 -p "$L_LEADER_PORT" RAFT.NODE ADD "$L_ID" "127.0.0.1:$L_PEER" "127.0.0.1:$L_PORT" 2>&1 | tr -d '\r' | tr '\n' ' ' || true)"
        L_ADD+="; again after the catch-up: ${again% }"
    fi
    sleep 1
    info="$(raft_info "$L_PORT")"
    L_SNAP_INDEX="$(field_of snapshot_index "$info")"
    L_ROLE="$(field_of role "$info")"
    L_BUILT="$(metric_at "$L_METRICS" raftlock_snapshot_bytes)"
    read -r first_applied first_snap <<<"${L_FIRST:-0 0}"
    if [[ "${first_snap:-0}" -gt 0 && -z "$L_BUILT" ]]; then
        L_INSTALLED="yes: its first state with anything applied was applied $first_applied, snapshot $first_snap, and it built no snapshot itself"
    elif [[ "${first_snap:-0}" -gt 0 ]]; then
        L_INSTALLED="probably: its first state with anything applied was applied $first_applied, snapshot $first_snap, but it has built a snapshot of its own since ($(awk -v b="$L_BUILT" 'BEGIN { printf "%d MB", b / 1048576 }'))"
    else
        L_INSTALLED="no: it replayed the log (first state seen: applied $first_applied, no snapshot); its snapshot index now ${L_SNAP_INDEX:-?}"
    fi
    L_KEYS="$(dbsize "$L_PORT")"
    rss="$(rss_kb "${PIDS[learner]}" 2>/dev/null || echo 0)"
    hwm="$(awk '/^VmHWM:/ { print $2 }' "/proc/${PIDS[learner]}/status" 2>/dev/null || echo 0)"
    L_RSS="$((rss / 1024)) MB, $(( rss * 1024 / (L_KEYS > 0 ? L_KEYS : 1) )) bytes/key; peak $((hwm / 1024)) MB"
    L_DISK="$(mb "$(du -sb "$WORK/learner" | cut -f1)")"
fi

echo
echo "raftlock $( [[ -n "$BINARY" ]] && echo "$BINARY" || git -C "$ROOT" describe --always --dirty 2>/dev/null) vs $(redis-server --version | awk '{print $3}' | sed 's/v=/redis-server /') (appendfsync always), $(nproc) CPUs, data on $(df -PT "$WORK" | awk 'NR==2 {print $2}')"
echo "| $KEYS lock keys, $CLIENTS clients, pipeline $PIPELINE | Redis AOF-always | raftlock 1 node |"
echo "|---|---|---|"
echo "| insert (SET key owner NX PX 3600000) | ${ROW[redis.rate]} | ${ROW[raftlock.rate]} |"
echo "| keys held (DBSIZE) | ${ROW[redis.keys]} | ${ROW[raftlock.keys]} |"
echo "| RSS | ${ROW[redis.rss]} | ${ROW[raftlock.rss]} |"
echo "| data directory | ${ROW[redis.disk]} | ${ROW[raftlock.disk]} |"
echo "| 1-client lock loop during the insert | ${ROW[redis.probe]} | ${ROW[raftlock.probe]} |"
echo "| PING every 10 ms during the insert | ${ROW[redis.ping]} | ${ROW[raftlock.ping]} |"
echo "| last snapshot: build (off the apply path), size | - | ${SNAP_SECS:-?} s, $(( ${SNAP_BYTES:-0} / 1024 / 1024 )) MB |"
echo "| kill -9, restart, first write answered | - | $RESTART |"
echo "| RSS after the restart | - | $RESTARTED_RSS |"
if [[ $CLUSTER == 1 ]]; then
    echo
    echo "| $KEYS lock keys, $CLIENTS clients, pipeline $PIPELINE | raftlock 3 nodes |"
    echo "|---|---|"
    echo "| insert through the leader (node $LEADER) | ${ROW[cluster.rate]} |"
    echo "| keys held (DBSIZE on the leader) | ${ROW[cluster.keys]} |"
    echo "| followers at the leader's commit index ($C_COMMIT), waited beyond the insert's end + 2 s | $C_FOLLOWED |"
    for id in 1 2 3; do
        echo "| RSS, node $id$( [[ "$id" == "$LEADER" ]] && echo " (leader)") | ${C_ROW[$id]} |"
    done
    echo "| data directory, nodes 1, 2, 3 | $C_DISK |"
    echo "| applied index, nodes 1, 2, 3 | $C_APPLIED |"
    echo "| snapshot index, nodes 1, 2, 3 | $C_SNAP |"
    echo "| 1-client lock loop through the leader during the insert | ${ROW[cluster.probe]} |"
    echo "| PING to the leader every 10 ms during the insert | ${ROW[cluster.ping]} |"
    echo "| the leader's last snapshot: build (off the apply path), size | $( [[ -n "$C_SNAP_SECS" ]] && echo "$C_SNAP_SECS s, $(( ${C_SNAP_BYTES:-0} / 1024 / 1024 )) MB" || echo "none built") |"
fi
if [[ $LEARNER == 1 ]]; then
    echo
    echo "| learner catch-up | $L_WHERE |"
    echo "|---|---|"
    echo "| the leader before the ADD | $L_BEFORE |"
    echo "| RAFT.NODE ADD answered | $L_ADD |"
    echo "| from the ADD until the learner applied index $L_TARGET | $L_CAUGHT |"
    echo "| caught up by an installed snapshot | $L_INSTALLED |"
    echo "| keys held (DBSIZE), learner / leader | $L_KEYS / $L_LEADER_KEYS |"
    echo "| the new node's RSS (and its peak, VmHWM); data directory | $L_RSS; $L_DISK |"
    echo "| the new node's role after | ${L_ROLE:-?} |"
fi
