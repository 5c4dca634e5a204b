#!/usr/bin/env bash
# Memory of one raftlock node under many locks (issue 11): starts a one-node
# raftlock on a free 127.0.0.1 port with its data in a temporary directory on
# disk, and prints its resident memory (VmRSS, and the peak VmHWM):
#   1. at start;
#   2. after N distinct lock keys were each acquired and released
#      (LOCK.ACQUIRE then LOCK.RELEASE with the token, pipelined);
#   3. after M more distinct keys were acquired and are still held.
# The server is stopped on exit.
#
# Usage: scripts/memory.sh [--released N] [--held M] [--binary PATH]
#   (defaults: N = 1000000, M = 100000)
# Environment: CARGO_TARGET_DIR (default /var/tmp/raftlock-target), BENCH_DIR
# (parent of the data directory, default /var/tmp).
set -euo pipefail

RELEASED=1000000
HELD=100000
BINARY=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --released) RELEASED="$2"; shift 2 ;;
        --held) HELD="$2"; shift 2 ;;
        --binary) BINARY="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "memory.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
if [[ -z "$BINARY" ]]; then
    cargo test --release --no-run --test cluster >&2 # as the tests build it
    BINARY="$CARGO_TARGET_DIR/release/raftlock"
fi

WORK="$(mktemp -d "${BENCH_DIR:-/var/tmp}/raftlock-memory.XXXXXX")"
PID=""
cleanup() {
    local rc=$?
    [[ -n "$PID" ]] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
PORT=$((20000 + RANDOM % 10000))
"$BINARY" --bind 127.0.0.1 --port "$PORT" --peer-port $((PORT + 1)) --data-dir "$WORK/data" \
    --metrics-addr off >"$WORK/raftlock.log" 2>&1 &
PID=$!

python3 - "$PORT" "$PID" "$RELEASED" "$HELD" <<'EOF'
import socket, sys, time

port, pid, released, held = (int(a) for a in sys.argv[1:5])

def rss():
    fields = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    return f"VmRSS {fields['VmRSS']}, peak VmHWM {fields['VmHWM']}"

deadline = time.time() + 60
while True:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("memory.sh: the server did not start")
        time.sleep(0.1)
reader = sock.makefile("rb")

def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

def reply():
    line = reader.readline()
    kind, rest = line[:1], line[1:-2]
    if kind in (b"+", b":"):
        return int(rest) if kind == b":" else rest
    if kind == b"-":
        raise SystemExit(f"memory.sh: server error: {rest.decode()}")
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else reader.read(n + 2)[:-2]
    raise SystemExit(f"memory.sh: unexpected reply {line!r}")

def pipeline(commands):
    sock.sendall(b"".join(commands))
    return [reply() for _ in commands]

pipeline([encode("PING")])
print(f"at start: {rss()}")
BATCH = 2000
start = time.time()
for base in range(0, released, BATCH):
    keys = [f"mem:released:{i}" for i in range(base, min(base + BATCH, released))]
    tokens = pipeline([encode("LOCK.ACQUIRE", k, "owner", 600000) for k in keys])
    assert all(isinstance(t, int) and t > 0 for t in tokens), tokens[:3]
    done = pipeline([encode("LOCK.RELEASE", k, "owner", t) for k, t in zip(keys, tokens)])
    assert all(d == 1 for d in done), done[:3]
print(f"after {released} distinct locks acquired and released ({time.time() - start:.0f} s): {rss()}, DBSIZE {pipeline([encode('DBSIZE')])[0]}")
start = time.time()
for base in range(0, held, BATCH):
    keys = [f"mem:held:{i}" for i in range(base, min(base + BATCH, held))]
    tokens = pipeline([encode("LOCK.ACQUIRE", k, "owner", 3600000) for k in keys])
    assert all(isinstance(t, int) and t > 0 for t in tokens), tokens[:3]
print(f"with {held} more held ({time.time() - start:.0f} s): {rss()}, DBSIZE {pipeline([encode('DBSIZE')])[0]}")
EOF
