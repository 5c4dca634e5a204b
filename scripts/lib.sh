# Shared by scripts/bench.sh and scripts/scale.sh (sourced): start, probe and
# stop local servers on free ports. Callers set WORK (a temporary directory),
# declare PIDS (name -> pid) and define log().

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
    local rc=$? name
    trap - EXIT INT TERM
    for name in "${!PIDS[@]}"; do
        stop_server "${PIDS[$name]}" "$name"
    done
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
free_port() { # variable: sets it to a port below Linux's ephemeral range, not handed out yet in this run
    # Not called in $(...): a subshell's record of the ports it handed out
    # would be lost, and two servers of one run could draw the same port.
    local p i
    for i in $(seq 1 500); do
        p=$((20000 + RANDOM % 12000))
        [[ "$used_ports" == *" $p "* ]] && continue
        if ! port_busy "$p"; then
            used_ports+="$p "
            printf -v "$1" '%s' "$p"
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
# RAFT.INFO of the node at client port $1 ("" if it does not answer), one
# field of such a text, and one field read from a node.
raft_info() { timeout 2 redis-cli -h 127.0.0.1 -p "$1" RAFT.INFO 2>/dev/null | tr -d '\r' || true; }
field_of() { sed -n "s/^$1://p" <<<"$2" | head -n 1; } # field raft-info-text
raft_field() { field_of "$2" "$(raft_info "$1")"; } # port field

# Three-node clusters (bench.sh, scale.sh). The caller declares
# `declare -A C_PORT=() C_PEER=() C_METRICS=() PIDS=()` and sets RAFTLOCK,
# WORK and SECRET. cluster_ports picks free ports for nodes 1-3 and sets
# MEMBERS (the --initial-cluster list).
cluster_ports() {
    local id
    MEMBERS=""
    for id in 1 2 3; do
        free_port "C_PORT[$id]"
        free_port "C_PEER[$id]"
        free_port "C_METRICS[$id]"
        MEMBERS+="${MEMBERS:+,}$id=127.0.0.1:${C_PEER[$id]}/127.0.0.1:${C_PORT[$id]}"
    done
}
start_cluster_node() { # id [data-dir, default $WORK/node<id>]; log in $WORK/node<id>.log
    local dir="${2:-$WORK/node$1}"
    mkdir -p "$dir"
    "$RAFTLOCK" --node-id "$1" --bind 127.0.0.1 --port "${C_PORT[$1]}" --peer-port "${C_PEER[$1]}" \
        --data-dir "$dir" --metrics-addr "127.0.0.1:${C_METRICS[$1]}" --cluster-secret "$SECRET" \
        --initial-cluster "$MEMBERS" >>"$WORK/node$1.log" 2>&1 &
    PIDS[node$1]=$!
}
# The id of the node every running node names as leader (empty until they agree).
cluster_leader() {
    local id l leader=""
    for id in 1 2 3; do
        kill -0 "${PIDS[node$id]:-0}" 2>/dev/null || continue
        l="$(raft_field "${C_PORT[$id]}" leader_id)"
        [[ -n "$l" ]] || return 0
        [[ -z "$leader" || "$leader" == "$l" ]] || return 0
        leader="$l"
    done
    [[ -n "$leader" && "$(raft_field "${C_PORT[$leader]}" role)" == leader ]] && echo "$leader"
    return 0
}


# Builds benches/loadgen.rs (cargo's bench profile) within $1 seconds and
# prints the path of its executable ("" if the build failed).
loadgen_binary() { # timeout-seconds
    timeout "$1" cargo bench --bench loadgen --no-run --message-format=json-render-diagnostics \
        | grep '"reason":"compiler-artifact"' | grep '"kind":\["bench"\]' | grep '"name":"loadgen"' \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1 || true
}

# The value of metric $2 on the Prometheus endpoint at 127.0.0.1:$1 ("" if
# unreadable).
metric_at() { # port metric-name
    local body
    body="$(timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3 && cat <&3' _ "$1" 2>/dev/null || true)"
    awk -v m="$2" '$1 == m { print $2; exit }' <<<"$body" | tr -d '\r'
}
