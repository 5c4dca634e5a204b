#!/usr/bin/env bash
# Benchmark raftlock against redis-server with the same durability, in one run
# on this machine, and print the table of issue 11.
#
# Starts, on free 127.0.0.1 ports with their data in one temporary directory
# on disk: a redis-server (appendonly yes, appendfsync always: every
# acknowledged write is fsynced, as raftlock's Raft log is), a one-node
# raftlock, and a three-node raftlock cluster. benches/loadgen.rs runs
# acquire+release pairs against each (1 client, and N clients on distinct
# keys), in two protocols:
#   * SET key token NX PX ms + the compare-and-delete script by EVALSHA (what
#     redis-py's Lock sends), against Redis, raftlock, and the cluster's leader;
#   * LOCK.ACQUIRE + LOCK.RELEASE, against raftlock, the leader and a follower.
# Every figure is the median of --repeats runs. Then the cluster's leader is
# killed (kill -9) --failovers times; each time the time from the kill to the
# first LOCK.ACQUIRE granted through a survivor is measured, and the node is
# restarted. Servers are stopped on exit. Every step is bounded in time.
#
# --contention runs the contention table instead (issue 13): N clients on ONE
# key, each taking and releasing it in a loop: Redis with clients spinning on
# SET NX PX (a denied attempt is retried at once), raftlock spinning the same
# way with SET NX PX and with LOCK.ACQUIRE, and raftlock with LOCK.ACQUIRE ...
# WAIT (queued, handed over by the release), on one node and on the cluster's
# leader and a follower. It prints successful acquisitions/s, attempts/s and
# the time from a client's first attempt to its grant (p50, p99, max, mean),
# the most grants to other clients inside one client's wait (fairness: below
# the number of clients when waiters are served in turn, whatever the disk's
# speed), and the log entries each raftlock target wrote per acquisition.
#
# --redis-benchmark runs the table of issue 17 instead: redis-benchmark -q with
# its default test list (-n REQUESTS, default 100000, -c N clients) against
# Redis, the one-node raftlock, and the cluster's leader and a follower, one
# after the other, median of --repeats runs per test; requests/s side by side,
# with raftlock's one node as a ratio of Redis. Fails on any error line.
#
# --soak-minutes M runs the stability check instead: the three-node cluster
# (default timing) under N clients of LOCK.* through the leader and 10 of
# SET NX PX + EVALSHA through a follower for M minutes; it fails unless every
# node's raftlock_raft_leader_changes_total and the term are what they were
# before the load (no election, spurious or not).
#
# Usage: scripts/bench.sh [--duration-secs S] [--warmup-secs S] [--clients N]
#                         [--repeats R] [--failovers F] [--binary PATH]
#                         [--soak-minutes M] [--contention]
#                         [--redis-benchmark [--requests REQUESTS]]
# --binary benchmarks another raftlock build (e.g. an older commit's) instead
# of building this checkout's.
# Environment: CARGO_TARGET_DIR (default /var/tmp/raftlock-target), BENCH_DIR (parent of the
# temporary data directory, default /var/tmp: keep it off tmpfs, or fsync is
# free), BUILD_TIMEOUT (seconds, default 3600), KEEP_BENCH_DIR=1 keeps data/logs.
# Exit status: 0 when every target completed every run without an unexpected
# reply, non-zero otherwise.
set -euo pipefail

DURATION=10
WARMUP=1
CLIENTS=50
REPEATS=3
FAILOVERS=5
BINARY=""
SOAK=0
CONTENTION=0
REDIS_BENCHMARK=0
REQUESTS=100000
while [[ $# -gt 0 ]]; do
    case "$1" in
        --duration-secs) DURATION="$2"; shift 2 ;;
        --warmup-secs) WARMUP="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --repeats) REPEATS="$2"; shift 2 ;;
        --failovers) FAILOVERS="$2"; shift 2 ;;
        --binary) BINARY="$2"; shift 2 ;;
        --soak-minutes) SOAK="$2"; shift 2 ;;
        --contention) CONTENTION=1; shift ;;
        --redis-benchmark) REDIS_BENCHMARK=1; shift ;;
        --requests) REQUESTS="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "bench.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
for v in "$DURATION" "$WARMUP" "$CLIENTS" "$REPEATS" "$FAILOVERS" "$SOAK" "$REQUESTS"; do
    [[ "$v" =~ ^[0-9]+$ ]] || { echo "bench.sh: durations and --clients are whole numbers" >&2; exit 2; }
done
[[ "$DURATION" -ge 1 && "$CLIENTS" -ge 1 && "$REPEATS" -ge 1 ]] || { echo "bench.sh: --duration-secs, --clients and --repeats must be >= 1" >&2; exit 2; }

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
RAFTLOCK="${BINARY:-$TARGET_DIR/release/raftlock}"
[[ -x "$RAFTLOCK" ]] || { log "no binary at $RAFTLOCK"; exit 1; }

# --- servers -------------------------------------------------------------------
WORK="$(mktemp -d "${BENCH_DIR:-/var/tmp}/raftlock-bench.XXXXXX")"
mkdir -p "$WORK/redis"
declare -A PIDS=()

# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
LOADGEN="$(loadgen_binary "$BUILD_TIMEOUT")"
[[ -n "$LOADGEN" && -x "$LOADGEN" ]] || { log "could not build the loadgen bench"; exit 1; }

free_port REDIS_PORT
free_port RL_PORT
free_port RL_PEER_PORT
declare -A C_PORT=() C_PEER=() C_METRICS=()
cluster_ports
SECRET="bench-$$-$RANDOM"

wait_cluster() { # until all three agree on a leader and each serves a write
    local i id leader
    for i in $(seq 1 300); do # 60 s
        leader="$(cluster_leader)"
        if [[ -n "$leader" ]]; then
            local ok=1
            for id in 1 2 3; do
                [[ "$(timeout 5 redis-cli -h 127.0.0.1 -p "${C_PORT[$id]}" SET "bench:ready:$id" 1 2>/dev/null)" == OK ]] || ok=0
            done
            [[ $ok -eq 1 ]] && { echo "$leader"; return 0; }
        fi
        sleep 0.2
    done
    log "the cluster did not settle within 60 s"
    return 1
}

log "starting redis-server on 127.0.0.1:$REDIS_PORT (appendonly yes, appendfsync always)"
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --appendonly yes --appendfsync always \
    --save '' --dir "$WORK/redis" --daemonize no --logfile "$WORK/redis.log" >/dev/null 2>&1 &
PIDS[redis]=$!
log "starting a one-node raftlock on 127.0.0.1:$RL_PORT ($RAFTLOCK)"
mkdir -p "$WORK/raftlock"
"$RAFTLOCK" --bind 127.0.0.1 --port "$RL_PORT" --peer-port "$RL_PEER_PORT" \
    --data-dir "$WORK/raftlock" --metrics-addr off >"$WORK/raftlock.log" 2>&1 &
PIDS[raftlock]=$!
log "starting a three-node raftlock cluster ($MEMBERS)"
for id in 1 2 3; do start_cluster_node "$id"; done
wait_ready "$REDIS_PORT" "${PIDS[redis]}" redis-server "$WORK/redis.log"
wait_ready "$RL_PORT" "${PIDS[raftlock]}" raftlock "$WORK/raftlock.log"
for id in 1 2 3; do wait_ready "${C_PORT[$id]}" "${PIDS[node$id]}" "node $id" "$WORK/node$id.log"; done
LEADER="$(wait_cluster)"

# --- soak (--soak-minutes) ----------------------------------------------------
metric() { metric_at "${C_METRICS[$1]}" "$2"; } # node-id metric-name
if [[ "$SOAK" -gt 0 ]]; then
    FOLLOWER=$(( LEADER % 3 + 1 ))
    declare -A CHANGES_BEFORE=()
    for id in 1 2 3; do CHANGES_BEFORE[$id]="$(metric "$id" raftlock_raft_leader_changes_total)"; done
    TERM_BEFORE="$(raft_field "${C_PORT[$LEADER]}" term)"
    log "soak: $((SOAK * 60)) s, $CLIENTS clients of LOCK.* through node $LEADER (leader), 10 of EVALSHA through node $FOLLOWER"
    LOAD_TIMEOUT=$((SOAK * 60 + 120))
    timeout "$LOAD_TIMEOUT" "$LOADGEN" --host 127.0.0.1 --port "${C_PORT[$LEADER]}" --mode raftlock --scenario custom \
        --clients "$CLIENTS" --keys distinct --duration-secs $((SOAK * 60)) --warmup-secs 1 --label soak-leader \
        >"$WORK/soak-leader" 2>&1 &
    soak_leader=$!
    timeout "$LOAD_TIMEOUT" "$LOADGEN" --host 127.0.0.1 --port "${C_PORT[$FOLLOWER]}" --mode redis-evalsha --scenario custom \
        --clients 10 --keys distinct --duration-secs $((SOAK * 60)) --warmup-secs 1 --label soak-follower \
        >"$WORK/soak-follower" 2>&1 &
    soak_follower=$!
    status=0
    wait "$soak_leader" || { log "the leader's load failed:"; cat "$WORK/soak-leader" >&2; status=1; }
    wait "$soak_follower" || { log "the follower's load failed:"; cat "$WORK/soak-follower" >&2; status=1; }
    grep -h '^RESULT' "$WORK/soak-leader" "$WORK/soak-follower" || true
    TERM_AFTER="$(raft_field "${C_PORT[$LEADER]}" term)"
    echo "term before the load: $TERM_BEFORE, after: $TERM_AFTER"
    for id in 1 2 3; do
        after="$(metric "$id" raftlock_raft_leader_changes_total)"
        echo "node $id raftlock_raft_leader_changes_total before: ${CHANGES_BEFORE[$id]:-?}, after: ${after:-?}"
        [[ -n "$after" && "$after" == "${CHANGES_BEFORE[$id]}" ]] || status=1
    done
    [[ -n "$TERM_AFTER" && "$TERM_AFTER" == "$TERM_BEFORE" ]] || status=1
    if [[ $status -eq 0 ]]; then echo "SOAK PASS: no leader change in $SOAK min"; else echo "SOAK FAIL"; fi
    exit "$status"
fi

# --- redis-benchmark's default tests (--redis-benchmark) -----------------------
if [[ "$REDIS_BENCHMARK" -eq 1 ]]; then
    status=0
    : >"$WORK/rb"
    rb() { # label port
        local out="$WORK/rb-$1-$round"
        log "redis-benchmark -q -n $REQUESTS -c $CLIENTS against $1 (run $round)"
        if ! timeout 1800 redis-benchmark -h 127.0.0.1 -p "$2" -q -n "$REQUESTS" -c "$CLIENTS" </dev/null 2>&1 \
                | tr '\r' '\n' | grep -v 'rps=' | grep -v '^[[:space:]]*$' >"$out"; then
            log "redis-benchmark against $1 failed"; status=1
        fi
        if grep -qiE 'error|ERR ' "$out"; then
            log "redis-benchmark against $1 reported errors:"; grep -iE 'error|ERR ' "$out" >&2; status=1
        fi
        sed -n 's/^\(.*\): \([0-9.]*\) requests per second.*/\1\t\2/p' "$out" | sed "s/^/$1\t/" >>"$WORK/rb"
    }
    for round in $(seq 1 "$REPEATS"); do
        LEADER="$(wait_cluster)" || { status=1; break; }
        FOLLOWER=$(( LEADER % 3 + 1 ))
        rb redis "$REDIS_PORT"
        rb raftlock-1 "$RL_PORT"
        rb leader "${C_PORT[$LEADER]}"
        rb follower "${C_PORT[$FOLLOWER]}"
    done
    echo
    echo "raftlock $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '(no commit)') vs $(redis-server --version | awk '{print $3}' | sed 's/v=/redis-server /') (appendfsync always), $(nproc) CPUs;" \
        "redis-benchmark -q -n $REQUESTS -c $CLIENTS, requests/s, median of $REPEATS runs"
    awk -F'\t' '
        { v[$1 "\t" $2] = v[$1 "\t" $2] " " $3; if (!($2 in seen)) { seen[$2] = 1; order[n++] = $2 } }
        function median(list,   a, k, i, j, t) {
            k = split(list, a, " "); if (k == 0) return "-"
            for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
            return a[int((k + 1) / 2)]
        }
        END {
            printf "| test | Redis AOF-always | raftlock 1 node | ratio | 3 nodes, leader | 3 nodes, follower |\n|---|---|---|---|---|---|\n"
            for (i = 0; i < n; i++) {
                t = order[i]; r = median(v["redis\t" t]); o = median(v["raftlock-1\t" t])
                printf "| %s | %s | %s | %s | %s | %s |\n", t, r, o, (r + 0 > 0 && o != "-") ? sprintf("%.2fx", o / r) : "-", median(v["leader\t" t]), median(v["follower\t" t])
            }
        }' "$WORK/rb"
    exit "$status"
fi

# --- load ----------------------------------------------------------------------
LOAD_TIMEOUT=$((WARMUP + DURATION + 90))
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
status=0
: >"$WORK/results"
# User and system CPU time, in clock ticks, of the given processes together.
cpu_ticks() { # pid...
    local pid t=0 v
    for pid in "$@"; do
        v="$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null)" && t=$((t + v))
    done
    echo "$t"
}
# The server processes a target's label names: a cluster counts all three.
server_pids() { # label
    case "$1" in
        redis) echo "${PIDS[redis]}" ;;
        raftlock-1) echo "${PIDS[raftlock]}" ;;
        raftlock-3-*) echo "${PIDS[node1]} ${PIDS[node2]} ${PIDS[node3]}" ;;
    esac
}
CLK_TCK="$(getconf CLK_TCK)"
run_load() { # label port mode clients [keys]
    local rc=0 pids end sampler
    log "load: $1, $3, $4 client(s)${5:+, $5 key}"
    # The servers' CPU time over the measured part of the run (after the
    # warm-up), appended as server_cpu_ms: CPU per pair moves far less with
    # a shared machine's noise than pairs/s does.
    read -ra pids <<<"$(server_pids "$1")"
    rm -f "$WORK/cpu.start"
    ( sleep "$WARMUP"; cpu_ticks "${pids[@]}" >"$WORK/cpu.start" ) &
    sampler=$!
    timeout "$LOAD_TIMEOUT" "$LOADGEN" --host 127.0.0.1 --port "$2" --mode "$3" --scenario custom \
        --clients "$4" --keys "${5:-distinct}" --duration-secs "$DURATION" --warmup-secs "$WARMUP" --label "$1" \
        >>"$WORK/results" 2>"$WORK/loadgen.err" || rc=$?
    end="$(cpu_ticks "${pids[@]}")"
    wait "$sampler" 2>/dev/null || true
    if [[ $rc -eq 0 && ${#pids[@]} -gt 0 && -s "$WORK/cpu.start" ]]; then
        sed -i '$ s/$/ server_cpu_ms='"$(( (end - $(cat "$WORK/cpu.start")) * 1000 / CLK_TCK ))"'/' "$WORK/results"
    fi
    if [[ $rc -ne 0 ]]; then
        log "loadgen against $1 ($3, $4 clients) failed (status $rc$([[ $rc -eq 124 ]] && echo ', timed out')); its messages:"
        cat "$WORK/loadgen.err" >&2
        status=1
    fi
    sleep 1
}
TERM_BEFORE="$(raft_field "${C_PORT[$LEADER]}" term)"

# --- contention (--contention) ---------------------------------------------------
if [[ "$CONTENTION" -eq 1 ]]; then
    # Log entries a raftlock target wrote during one load: last_log_index
    # before and after, appended to the RESULT line.
    contend() { # label port mode
        local before after
        before="$(raft_field "$2" last_log_index)"
        run_load "$1" "$2" "$3" "$CLIENTS" shared
        after="$(raft_field "$2" last_log_index)"
        [[ -n "$before" && -n "$after" ]] && sed -i '$ s/$/ log_entries='"$((after - before))"'/' "$WORK/results"
    }
    for round in $(seq 1 "$REPEATS"); do
        LEADER="$(wait_cluster)" || { status=1; break; }
        FOLLOWER=$(( LEADER % 3 + 1 ))
        log "cluster leader: node $LEADER; follower used: node $FOLLOWER"
        run_load redis "$REDIS_PORT" redis-evalsha "$CLIENTS" shared
        contend raftlock-1 "$RL_PORT" redis-evalsha
        contend raftlock-1 "$RL_PORT" raftlock
        contend raftlock-1 "$RL_PORT" raftlock-wait
        contend raftlock-3-leader "${C_PORT[$LEADER]}" raftlock
        contend raftlock-3-leader "${C_PORT[$LEADER]}" raftlock-wait
        contend raftlock-3-follower "${C_PORT[$FOLLOWER]}" raftlock-wait
    done
    echo
    echo "raftlock $( [[ -n "$BINARY" ]] && echo "$BINARY" || git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '(no commit)') vs $(redis-server --version | awk '{print $3}' | sed 's/v=/redis-server /') (appendfsync always)," \
        "$(nproc) CPUs, $(uname -r), load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "$CLIENTS clients on one key, each acquiring and releasing in a loop; median of $REPEATS runs of ${DURATION} s after ${WARMUP} s warm-up (by acquisitions/s)."
    echo "wait: from a client's first attempt to its grant, ms. passed over: the most grants to other clients inside one client's wait (first come, first served keeps it below $CLIENTS)."
    echo "log entries: what the target's Raft log grew by over the whole run, per acquisition at the measured rate."
    awk -v secs="$((DURATION + WARMUP))" '
        /^RESULT / {
            delete f
            for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
            k = f["label"] SUBSEP f["mode"]
            if (!(k in n)) order[++rows] = k
            n[k]++
            line[k, n[k]] = $0
            rate[k, n[k]] = f["pairs_per_s"] + 0
            errs[k] += f["errors"]
        }
        function field(s, name,    i, a, kv) {
            split(s, a, " ")
            for (i in a) { split(a[i], kv, "="); if (kv[1] == name) return kv[2] }
            return ""
        }
        END {
            print "| target | protocol | acquisitions/s | attempts/s | wait p50 | p99 | max | mean | max/mean | passed over | log entries per acquisition |"
            print "|---|---|---|---|---|---|---|---|---|---|---|"
            for (r = 1; r <= rows; r++) {
                k = order[r]; m = n[k]
                # the run with the median rate
                for (i = 1; i <= m; i++) idx[i] = i
                for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (rate[k, idx[j]] < rate[k, idx[i]]) { t = idx[i]; idx[i] = idx[j]; idx[j] = t }
                s = line[k, idx[int((m + 1) / 2)]]
                split(k, p, SUBSEP)
                mean = field(s, "acquire_mean_ms") + 0
                ent = field(s, "log_entries")
                pairs = field(s, "pairs") + 0
                printf "| %s | %s | %.0f | %.0f | %s | %s | %s | %.3f | %s | %s | %s |\n", p[1], p[2], field(s, "pairs_per_s"), field(s, "attempts_per_s"),
                    field(s, "acquire_p50_ms"), field(s, "acquire_p99_ms"), field(s, "acquire_max_ms"), mean,
                    (mean > 0) ? sprintf("%.1f", field(s, "acquire_max_ms") / mean) : "-", field(s, "overtaken_max"),
                    (ent != "" && pairs > 0) ? sprintf("%.2f", ent / (field(s, "pairs_per_s") * secs)) : "-"
            }
            for (k in errs) if (errs[k] > 0) { split(k, p, SUBSEP); printf "errors: %s %s: %d\n", p[1], p[2], errs[k] }
        }' "$WORK/results"
    exit "$status"
fi

# Round by round, every target in turn, so that all see the same machine (a
# shared machine's load drifts).
for round in $(seq 1 "$REPEATS"); do
    for clients in "$CLIENTS" 1; do
        LEADER="$(wait_cluster)" || { status=1; break 2; }
        FOLLOWER=$(( LEADER % 3 + 1 ))
        log "cluster leader: node $LEADER; follower used: node $FOLLOWER"
        run_load redis "$REDIS_PORT" redis-evalsha "$clients"
        run_load raftlock-1 "$RL_PORT" redis-evalsha "$clients"
        run_load raftlock-3-leader "${C_PORT[$LEADER]}" redis-evalsha "$clients"
        run_load raftlock-1 "$RL_PORT" raftlock "$clients"
        run_load raftlock-3-leader "${C_PORT[$LEADER]}" raftlock "$clients"
        run_load raftlock-3-follower "${C_PORT[$FOLLOWER]}" raftlock "$clients"
    done
done
TERM_AFTER="$(raft_field "${C_PORT[$(wait_cluster)]}" term)"

# --- failover ------------------------------------------------------------------
# kill -9 of the leader; time to the first LOCK.ACQUIRE granted through either
# survivor (a command sent to a survivor waits for the new leader).
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
: >"$WORK/failover"
for f in $(seq 1 "$FAILOVERS"); do
    leader="$(wait_cluster)" || { status=1; break; }
    survivors=()
    for id in 1 2 3; do [[ "$id" == "$leader" ]] || survivors+=("$id"); done
    kill -KILL "${PIDS[node$leader]}"
    killed="$(now_ms)"
    wait "${PIDS[node$leader]}" 2>/dev/null || true
    granted=""
    for i in $(seq 1 200); do
        id="${survivors[$((i % 2))]}"
        reply="$(timeout 5 redis-cli -h 127.0.0.1 -p "${C_PORT[$id]}" LOCK.ACQUIRE "bench:failover:$f" "probe-$i" 10000 2>/dev/null || true)"
        if [[ "$reply" =~ ^[0-9]+$ ]]; then granted="$(now_ms)"; break; fi
    done
    if [[ -z "$granted" ]]; then
        log "failover $f: no grant through nodes ${survivors[*]}"
        status=1
    else
        echo $((granted - killed)) >>"$WORK/failover"
        log "failover $f: node $leader killed, first grant after $((granted - killed)) ms"
    fi
    start_cluster_node "$leader"
    wait_ready "${C_PORT[$leader]}" "${PIDS[node$leader]}" "node $leader" "$WORK/node$leader.log"
    sleep 2
done

# --- report --------------------------------------------------------------------
echo
echo "raftlock $( [[ -n "$BINARY" ]] && echo "$BINARY" || git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '(no commit)') vs $(redis-server --version | awk '{print $3}' | sed 's/v=/redis-server /') (appendfsync always)," \
    "$(nproc) CPUs, $(uname -r), data on $(df -PT "$WORK" | awk 'NR==2 {print $2}')," \
    "load average before: $LOAD_BEFORE, after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cluster term before the load: $TERM_BEFORE, after: $TERM_AFTER (a higher term means an election during the load)"
echo "pairs/s (acquire + release), median of $REPEATS runs of ${DURATION} s after ${WARMUP} s warm-up; p99 of the pair in ms; N = $CLIENTS clients on distinct keys"
awk -v n="$CLIENTS" -v failover="$(sort -n "$WORK/failover" | tr '\n' ' ')" '
    /^RESULT / {
        delete f
        for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        k = f["label"] SUBSEP f["mode"] SUBSEP f["clients"]
        cnt[k]++
        rate[k, cnt[k]] = f["pairs_per_s"] + 0
        p99[k, cnt[k]] = f["p99_ms"] + 0
        cpu[k, cnt[k]] = ("server_cpu_ms" in f && f["pairs"] > 0) ? f["server_cpu_ms"] * 1000 / f["pairs"] : -1
        errs[k] += f["errors"]
    }
    function median(arr, k,    m, i, j, t, v) {
        m = cnt[k]
        for (i = 1; i <= m; i++) v[i] = arr[k, i]
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
    }
    function cell(label, mode, c,    k) {
        k = label SUBSEP mode SUBSEP c
        if (!(k in cnt)) return "-"
        return sprintf("%.0f (p99 %.1f)", median(rate, k), median(p99, k))
    }
    function ratio(label, mode, c,    a, b) {
        a = label SUBSEP mode SUBSEP c; b = "redis" SUBSEP "redis-evalsha" SUBSEP c
        if (!(a in cnt) || !(b in cnt) || median(rate, b) == 0) return ""
        return sprintf(" %.2fx", median(rate, a) / median(rate, b))
    }
    function row(name, mode, c) {
        printf "| %s | %s | %s%s | %s | %s |\n", name, cell("redis", "redis-evalsha", c), cell("raftlock-1", mode, c), ratio("raftlock-1", mode, c), cell("raftlock-3-leader", mode, c), cell("raftlock-3-follower", mode, c)
    }
    function cpu_cell(label, mode, c,    k, m) {
        k = label SUBSEP mode SUBSEP c
        if (!(k in cnt)) return "-"
        m = median(cpu, k)
        return (m < 0) ? "-" : sprintf("%.0f", m)
    }
    function cpu_row(name, mode, c) {
        printf "| %s | %s | %s | %s | %s |\n", name, cpu_cell("redis", "redis-evalsha", c), cpu_cell("raftlock-1", mode, c), cpu_cell("raftlock-3-leader", mode, c), cpu_cell("raftlock-3-follower", mode, c)
    }
    END {
        print "| workload | Redis AOF-always | raftlock 1 node (vs Redis) | raftlock 3 nodes, leader | 3 nodes, via a follower |"
        print "|---|---|---|---|---|"
        row("SET NX PX + EVALSHA release, " n " clients", "redis-evalsha", n)
        row("SET NX PX + EVALSHA release, 1 client", "redis-evalsha", 1)
        row("LOCK.ACQUIRE + LOCK.RELEASE, " n " clients", "raftlock", n)
        row("LOCK.ACQUIRE + LOCK.RELEASE, 1 client", "raftlock", 1)
        m = split(failover, fo, " ")
        med = (m == 0) ? "-" : ((m % 2) ? fo[(m + 1) / 2] : (fo[m / 2] + fo[m / 2 + 1]) / 2) " ms"
        printf "| first grant after kill -9 of the leader (median of %d: %s) | - | - | %s | |\n", m, failover, med
        print ""
        print "server CPU per pair, µs (user + system time of the server processes of each target, all three for a cluster, over the measured part; median):"
        print "| workload | Redis AOF-always | raftlock 1 node | raftlock 3 nodes, leader | 3 nodes, via a follower |"
        print "|---|---|---|---|---|"
        cpu_row("SET NX PX + EVALSHA release, " n " clients", "redis-evalsha", n)
        cpu_row("SET NX PX + EVALSHA release, 1 client", "redis-evalsha", 1)
        cpu_row("LOCK.ACQUIRE + LOCK.RELEASE, " n " clients", "raftlock", n)
        cpu_row("LOCK.ACQUIRE + LOCK.RELEASE, 1 client", "raftlock", 1)
        for (k in errs) if (errs[k] > 0) { split(k, p, SUBSEP); printf "errors: %s %s %s clients: %d\n", p[1], p[2], p[3], errs[k] }
    }' "$WORK/results"
exit "$status"
