#!/usr/bin/env bash
# Benchmark raftlock against redis-server with the same durability, in one run
# on this machine.
#
# Starts a one-node raftlock and a redis-server (appendonly yes, appendfsync
# always: every acknowledged write is fsynced, as raftlock's Raft log is) on
# free 127.0.0.1 ports, with their data in one temporary directory on disk,
# runs benches/loadgen.rs against each (1 client; N clients on distinct keys;
# N clients on one shared key), prints a side-by-side table, and stops both
# servers on exit. Every step is bounded in time.
#
# Usage: scripts/bench.sh [--duration-secs S] [--warmup-secs S] [--clients N]
# Environment: CARGO_TARGET_DIR (default /var/tmp/raftlock-target), BENCH_DIR (parent of the
# temporary data directory, default /var/tmp: keep it off tmpfs, or fsync is
# free), BUILD_TIMEOUT (seconds, default 3600), KEEP_BENCH_DIR=1 keeps data/logs.
# Exit status: 0 when both servers completed every scenario without an
# unexpected reply, non-zero otherwise.
set -euo pipefail

DURATION=10
WARMUP=1
CLIENTS=50
while [[ $# -gt 0 ]]; do
    case "$1" in
        --duration-secs) DURATION="$2"; shift 2 ;;
        --warmup-secs) WARMUP="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "bench.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
for v in "$DURATION" "$WARMUP" "$CLIENTS"; do
    [[ "$v" =~ ^[0-9]+$ ]] || { echo "bench.sh: durations and --clients are whole numbers" >&2; exit 2; }
done
[[ "$DURATION" -ge 1 && "$CLIENTS" -ge 1 ]] || { echo "bench.sh: --duration-secs and --clients must be >= 1" >&2; exit 2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# One target directory shared by every build on this machine (as scripts/test.sh).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
TARGET_DIR="$CARGO_TARGET_DIR"
BUILD_TIMEOUT="${BUILD_TIMEOUT:-3600}"
log() { echo "bench.sh: $*" >&2; }

# --- prerequisites (installed only when absent) -----------------------------
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
if ! dpkg -s libclang-dev >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
    missing+=(libclang-dev)          # bindgen for RocksDB's bindings
fi
command -v c++ >/dev/null 2>&1 || missing+=(g++)    # RocksDB is C++
if [[ ${#missing[@]} -gt 0 ]]; then
    log "installing ${missing[*]}"
    SUDO=""
    [[ "$(id -u)" -eq 0 ]] || SUDO="sudo"
    timeout 900 $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- build -------------------------------------------------------------------
log "building (release) into $TARGET_DIR"
timeout "$BUILD_TIMEOUT" cargo build --release
LOADGEN="$(timeout "$BUILD_TIMEOUT" cargo bench --bench loadgen --no-run --message-format=json-render-diagnostics \
    | grep '"reason":"compiler-artifact"' | grep '"kind":\["bench"\]' | grep '"name":"loadgen"' \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1 || true)"
[[ -n "$LOADGEN" && -x "$LOADGEN" ]] || { log "could not build the loadgen bench"; exit 1; }
RAFTLOCK="$TARGET_DIR/release/raftlock"
[[ -x "$RAFTLOCK" ]] || { log "no binary at $RAFTLOCK"; exit 1; }

# --- servers -------------------------------------------------------------------
WORK="$(mktemp -d "${BENCH_DIR:-/var/tmp}/raftlock-bench.XXXXXX")"
mkdir -p "$WORK/raftlock" "$WORK/redis"
RAFTLOCK_PID=""
REDIS_PID=""

stop_server() { # pid name
    local pid="$1" i
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$2 did not stop within 10 s of SIGTERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_server "$RAFTLOCK_PID" raftlock
    stop_server "$REDIS_PID" redis-server
    if [[ "${KEEP_BENCH_DIR:-0}" == 1 ]]; then
        log "kept $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

used_ports=" "
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # below Linux's ephemeral range, not handed out yet in this run
    local p i
    for i in $(seq 1 500); do
        p=$((20000 + RANDOM % 12000))
        [[ "$used_ports" == *" $p "* ]] && continue
        if ! port_busy "$p"; then
            used_ports+="$p "
            echo "$p"
            return 0
        fi
    done
    log "no free port found"
    return 1
}
wait_ready() { # port pid name logfile
    local i
    for i in $(seq 1 600); do # 60 s
        if ! kill -0 "$2" 2>/dev/null; then
            log "$3 exited during start-up; last lines of its log:"
            tail -n 30 "$4" >&2 || true
            return 1
        fi
        if [[ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null || true)" == PONG ]]; then
            return 0
        fi
        sleep 0.1
    done
    log "$3 did not answer PING on port $1 within 60 s; last lines of its log:"
    tail -n 30 "$4" >&2 || true
    return 1
}

RL_PORT="$(free_port)"
RL_PEER_PORT="$(free_port)"
REDIS_PORT="$(free_port)"

log "starting raftlock on 127.0.0.1:$RL_PORT (peer port $RL_PEER_PORT), data in $WORK/raftlock"
"$RAFTLOCK" --bind 127.0.0.1 --port "$RL_PORT" --peer-port "$RL_PEER_PORT" \
    --data-dir "$WORK/raftlock" --metrics-addr off >"$WORK/raftlock.log" 2>&1 &
RAFTLOCK_PID=$!
log "starting redis-server on 127.0.0.1:$REDIS_PORT (appendonly yes, appendfsync always), data in $WORK/redis"
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --appendonly yes --appendfsync always \
    --save '' --dir "$WORK/redis" --daemonize no --logfile "$WORK/redis.log" >/dev/null 2>&1 &
REDIS_PID=$!
wait_ready "$RL_PORT" "$RAFTLOCK_PID" raftlock "$WORK/raftlock.log"
wait_ready "$REDIS_PORT" "$REDIS_PID" redis-server "$WORK/redis.log"

# --- load ----------------------------------------------------------------------
# Scenario by scenario, raftlock then redis, so that both see the same machine
# (a shared machine's load drifts; back-to-back runs keep the comparison fair).
LOAD_TIMEOUT=$((WARMUP + DURATION + 90))
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
status=0
: >"$WORK/raftlock.out"
: >"$WORK/redis.out"
run_load() { # mode port scenario
    local rc=0
    log "load: $1, scenario $3"
    timeout "$LOAD_TIMEOUT" "$LOADGEN" --host 127.0.0.1 --port "$2" --mode "$1" --scenario "$3" \
        --clients "$CLIENTS" --duration-secs "$DURATION" --warmup-secs "$WARMUP" \
        >>"$WORK/$1.out" 2>"$WORK/$1.err" || rc=$?
    if [[ $rc -ne 0 ]]; then
        log "loadgen against $1 ($3) failed (status $rc$([[ $rc -eq 124 ]] && echo ', timed out')); its messages:"
        cat "$WORK/$1.err" >&2
        status=1
    fi
    sleep 1
}
for scenario in single distinct shared; do
    run_load raftlock "$RL_PORT" "$scenario"
    run_load redis "$REDIS_PORT" "$scenario"
done
cat "$WORK/raftlock.out" "$WORK/redis.out"

# --- report --------------------------------------------------------------------
echo
echo "raftlock $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '(no commit)') vs $(redis-server --version | awk '{print $3}' | sed 's/v=/redis-server /')," \
    "$(nproc) CPUs, $(uname -r), data on $(df -PT "$WORK" | awk 'NR==2 {print $2}')," \
    "load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "each scenario: ${WARMUP} s warm-up + ${DURATION} s measured; a pair = acquire + release; latencies in ms"
awk -v clients="$CLIENTS" '
    /^RESULT / {
        delete f
        for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        k = f["mode"] SUBSEP f["scenario"]
        for (x in f) r[k, x] = f[x]
        if (!(f["scenario"] in seen)) { seen[f["scenario"]] = 1; order[++n] = f["scenario"] }
    }
    function v(m, s, x) { return ((m, s, x) in r) ? r[m, s, x] : "-" }
    END {
        printf "%-20s | %12s %8s %8s | %12s %8s %8s | %6s\n", "scenario", "raftlock/s", "p50", "p99", "redis/s", "p50", "p99", "ratio"
        for (i = 1; i <= n; i++) {
            s = order[i]
            a = v("raftlock", s, "pairs_per_s"); b = v("redis", s, "pairs_per_s")
            ratio = (a != "-" && b != "-" && b + 0 > 0) ? sprintf("%.2f", a / b) : "-"
            printf "%-20s | %12s %8s %8s | %12s %8s %8s | %6s\n", s, a, v("raftlock", s, "p50_ms"), v("raftlock", s, "p99_ms"), b, v("redis", s, "p50_ms"), v("redis", s, "p99_ms"), ratio
        }
        for (i = 1; i <= n; i++) {
            s = order[i]
            if (s ~ /shared/)
                printf "%s: attempts/s (granted or denied) raftlock %s, redis %s; time to acquire p50/p99 raftlock %s/%s ms, redis %s/%s ms\n", s, v("raftlock", s, "attempts_per_s"), v("redis", s, "attempts_per_s"), v("raftlock", s, "acquire_p50_ms"), v("raftlock", s, "acquire_p99_ms"), v("redis", s, "acquire_p50_ms"), v("redis", s, "acquire_p99_ms")
        }
        for (i = 1; i <= n; i++) {
            s = order[i]; e1 = v("raftlock", s, "errors"); e2 = v("redis", s, "errors")
            if (e1 != "0" || e2 != "0") printf "%s: errors raftlock %s, redis %s\n", s, e1, e2
        }
    }' "$WORK/raftlock.out" "$WORK/redis.out"
exit "$status"
