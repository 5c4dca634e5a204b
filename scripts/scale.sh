#!/usr/bin/env bash
# Scale benchmark (issue 12): one raftlock node beside redis-server with the
# same durability (appendonly yes, appendfsync always), in one run.
#
# For each server: redis-benchmark's --clients clients insert --keys lock keys
# (SET lock:<random> owner NX PX 3600000), while two probes run beside them:
# a one-client lock loop (LOCK.ACQUIRE + LOCK.RELEASE on raftlock, SET NX PX +
# EVALSHA release on Redis; benches/loadgen.rs, in 5-s windows) and a PING
# sampler (redis-cli --latency, one PING every 10 ms). Then it prints: insert
# rate, keys held, RSS and bytes per key, data directory size, the probes'
# worst p99.9 window and maximum, raftlock's last snapshot (build time, size),
# and the time from kill -9 to serving writes again after a restart, and the
# restarted node's RSS.
# Servers run on free 127.0.0.1 ports with their data in one temporary
# directory, and are stopped on exit.
#
# Usage: scripts/scale.sh [--keys N] [--clients C] [--binary PATH]
#   (defaults: N = 1000000, C = 50)
# Environment: CARGO_TARGET_DIR (default /var/tmp/raftlock-target), BENCH_DIR
# (parent of the data directory, default /var/tmp; keep it off tmpfs),
# KEEP_BENCH_DIR=1 keeps data and logs.
set -euo pipefail

KEYS=1000000
CLIENTS=50
BINARY=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --keys) KEYS="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --binary) BINARY="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "scale.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
for v in "$KEYS" "$CLIENTS"; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "scale.sh: --keys and --clients are whole numbers >= 1" >&2; exit 2; }
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
log() { echo "scale.sh: $*" >&2; }

scripts/deps.sh >&2
command -v redis-benchmark >/dev/null 2>&1 || { log "redis-benchmark (redis-tools) is missing"; exit 1; }
log "building (release) into $CARGO_TARGET_DIR"
timeout 3600 cargo build --release >&2
RAFTLOCK="${BINARY:-$CARGO_TARGET_DIR/release/raftlock}"

WORK="$(mktemp -d "${BENCH_DIR:-/var/tmp}/raftlock-scale.XXXXXX")"
declare -A PIDS=()
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
LOADGEN="$(loadgen_binary 3600)"
[[ -n "$LOADGEN" && -x "$LOADGEN" ]] || { log "could not build the loadgen bench"; exit 1; }

REDIS_PORT="$(free_port)"
RL_PORT="$(free_port)"
RL_PEER="$(free_port)"
RL_METRICS="$(free_port)"
mkdir -p "$WORK/redis" "$WORK/raftlock"
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
    timeout 7200 redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$KEYS" -r 1000000000 -q \
        SET 'lock:__rand_int__' owner NX PX 3600000 >"$WORK/$name.bench" 2>&1 &
    bench_pid=$!
    started="$(date +%s%N)"
    while kill -0 "$bench_pid" 2>/dev/null; do
        timeout 60 "$LOADGEN" --host 127.0.0.1 --port "$port" --mode "$mode" --scenario custom --clients 1 \
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
        if (v["p999_ms"] > p) p = v["p999_ms"]; if (v["max_ms"] > m) m = v["max_ms"]; n += v["pairs"] }
        END { printf "worst p99.9 %.1f ms, max %.1f ms (%d pairs)", p, m, n }' "$WORK/$name.probe")"
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

echo
echo "raftlock $( [[ -n "$BINARY" ]] && echo "$BINARY" || git -C "$ROOT" describe --always --dirty 2>/dev/null) vs $(redis-server --version | awk '{print $3}' | sed 's/v=/redis-server /') (appendfsync always), $(nproc) CPUs, data on $(df -PT "$WORK" | awk 'NR==2 {print $2}')"
echo "| $KEYS lock keys, $CLIENTS clients | Redis AOF-always | raftlock 1 node |"
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
