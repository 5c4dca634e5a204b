#!/usr/bin/env bash
# A local 3-node raftlock cluster for trying things out.
#
#   scripts/cluster.sh start    # nodes 1-3: clients on 127.0.0.1:7001-7003
#   scripts/cluster.sh status   # RAFT.INFO of each node
#   scripts/cluster.sh stop     # stop all three (data stays in ./cluster-data)
#   scripts/cluster.sh clean    # stop and delete the data
#
# Any node takes any command: followers forward to the leader.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
DATA="${RAFTLOCK_CLUSTER_DATA:-$PWD/cluster-data}"
BIN="$CARGO_TARGET_DIR/release/raftlock"
SECRET="${RAFTLOCK_CLUSTER_SECRET:-local-cluster-secret}"
MEMBERS="1=127.0.0.1:17001/127.0.0.1:7001,2=127.0.0.1:17002/127.0.0.1:7002,3=127.0.0.1:17003/127.0.0.1:7003"

# A node counts as running if its process exists and is not a zombie.
running() {
    local pid
    pid="$(cat "$DATA/node$1.pid" 2>/dev/null)" || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    case "$(ps -o stat= -p "$pid" 2>/dev/null)" in Z*|"") return 1 ;; esac
}

start() {
    if [ ! -x "$BIN" ]; then
        scripts/deps.sh
        # As the tests build it (a plain `cargo build --bin` would compile
        # RocksDB again with other features of shared crates).
        cargo test --release --no-run --test cluster
    fi
    mkdir -p "$DATA"
    for id in 1 2 3; do
        if running "$id"; then
            echo "node $id already running"
            continue
        fi
        RAFTLOCK_CLUSTER_SECRET="$SECRET" "$BIN" --node-id "$id" --port "700$id" --peer-port "1700$id" \
            --data-dir "$DATA/node$id" --metrics-addr "127.0.0.1:900$id" \
            --initial-cluster "$MEMBERS" >"$DATA/node$id.log" 2>&1 &
        echo $! >"$DATA/node$id.pid"
        echo "node $id: clients 127.0.0.1:700$id, log $DATA/node$id.log"
    done
}

stop() {
    for id in 1 2 3; do
        if [ -f "$DATA/node$id.pid" ]; then
            kill "$(cat "$DATA/node$id.pid")" 2>/dev/null || true
            rm -f "$DATA/node$id.pid"
        fi
    done
}

status() {
    for id in 1 2 3; do
        echo "--- node $id (127.0.0.1:700$id)"
        redis-cli -p "700$id" RAFT.INFO 2>&1 | tr -d '\r' | grep -E '^(role|term|leader_id|commit_index|members)' || echo "down"
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    clean) stop; sleep 1; rm -rf "$DATA" ;;
    *) echo "usage: $0 start|status|stop|clean" >&2; exit 2 ;;
esac
