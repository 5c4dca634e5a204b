#!/usr/bin/env bash
# Try raftlock with the stock Redis tools, the way a user would:
#   1. redis-cli one-shot commands (SET/GET/LOCK.ACQUIRE/LOCK.INFO/LOCK.FENCE/LOCK.RELEASE)
#   2. redis-cli interactive (under tmux: it sends COMMAND DOCS at start and must not crash)
#   3. redis-benchmark -q -n 2000 with its default test list, failing on any
#      error line or a test that does not complete
# then stops the server with SIGTERM and checks that it shut down cleanly.
#
# Usage: scripts/clients.sh [PATH-TO-RAFTLOCK-BINARY]
#   Without an argument it builds the release binary with cargo (honouring
#   CARGO_TARGET_DIR). Missing redis-tools / tmux are installed with apt-get unless
#   CLIENTS_NO_INSTALL=1. Exits non-zero on any failure. Everything listens on
#   127.0.0.1 only, on free ports, with data in a temporary directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TIMEOUT_READY=60   # seconds for the node to accept a write
STEP_TIMEOUT=15    # seconds for each interactive step

say()  { printf '[clients.sh] %s\n' "$*"; }
fail() { printf '[clients.sh] FAIL: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- prerequisites
need_pkgs=()
command -v redis-cli >/dev/null 2>&1 || need_pkgs+=(redis-tools)
command -v redis-benchmark >/dev/null 2>&1 || need_pkgs+=(redis-tools)
command -v tmux >/dev/null 2>&1 || need_pkgs+=(tmux)
command -v timeout >/dev/null 2>&1 || need_pkgs+=(coreutils)
if ((${#need_pkgs[@]})); then
    if [[ "${CLIENTS_NO_INSTALL:-0}" == 1 ]]; then
        fail "missing ${need_pkgs[*]} and CLIENTS_NO_INSTALL=1"
    fi
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    say "installing ${need_pkgs[*]} with apt-get"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# ---------------------------------------------------------------- the binary
BIN="${1:-}"
if [[ -z "$BIN" ]]; then
    TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
    say "building raftlock (release) in $TARGET_DIR"
    # As the tests build it: a plain `cargo build --bin` would compile
    # RocksDB again with other features of shared crates.
    (cd "$ROOT" && cargo test --release --no-run --test cluster)
    BIN="$TARGET_DIR/release/raftlock"
fi
[[ -x "$BIN" ]] || fail "raftlock binary not found or not executable: $BIN"

# ---------------------------------------------------------------- workspace & cleanup
WORK="$(mktemp -d "${TMPDIR:-/tmp}/raftlock-clients.XXXXXX")"
LOG="$WORK/raftlock.log"
TMUX_SOCK="raftlock-clients-$$"
SERVER_PID=""
STATUS=1

cleanup() {
    tmux -L "$TMUX_SOCK" kill-server >/dev/null 2>&1 || true
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -9 "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ $STATUS -ne 0 && -f "$LOG" ]]; then
        echo "----- raftlock log (tail) -----" >&2
        tail -n 60 "$LOG" >&2 || true
        echo "----- end of log -----" >&2
    fi
    rm -rf "$WORK"
}
trap 'STATUS=$?; cleanup; exit $STATUS' EXIT

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() {
    local p
    for _ in $(seq 1 200); do
        p=$((20000 + RANDOM % 40000))
        if ! port_in_use "$p"; then echo "$p"; return 0; fi
    done
    fail "no free port found"
}

cli() { timeout 20 redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }

# ---------------------------------------------------------------- start the server
start_server() {
    PORT=$(pick_port)
    PEER_PORT=$(pick_port)
    METRICS_PORT=$(pick_port)
    [[ $PORT != "$PEER_PORT" && $PORT != "$METRICS_PORT" && $PEER_PORT != "$METRICS_PORT" ]] || return 1
    say "starting $BIN on 127.0.0.1:$PORT (peer $PEER_PORT, metrics $METRICS_PORT)"
    "$BIN" --bind 127.0.0.1 --port "$PORT" --peer-port "$PEER_PORT" \
        --data-dir "$WORK/data" --metrics-addr "127.0.0.1:$METRICS_PORT" --node-id 1 \
        >>"$LOG" 2>&1 </dev/null &
    SERVER_PID=$!
    local deadline=$((SECONDS + TIMEOUT_READY))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            wait "$SERVER_PID" 2>/dev/null || true
            SERVER_PID=""
            return 1
        fi
        if [[ "$(cli SET __ready 1 2>/dev/null || true)" == "OK" ]]; then
            cli DEL __ready >/dev/null
            return 0
        fi
        sleep 0.2
    done
    fail "raftlock did not accept a write within ${TIMEOUT_READY}s"
}
started=0
for _ in 1 2 3; do
    if start_server; then started=1; break; fi
    say "server exited early (port clash?), retrying"
    rm -rf "$WORK/data"
done
((started)) || fail "raftlock exited during start-up"

# ---------------------------------------------------------------- 1. one-shot redis-cli
expect_eq() { # description expected actual
    if [[ "$3" != "$2" ]]; then fail "$1: expected [$2], got [$3]"; fi
    say "ok: $1"
}

expect_eq "PING" "PONG" "$(cli PING)"
expect_eq "SET" "OK" "$(cli SET cli:one hello)"
expect_eq "GET" "hello" "$(cli GET cli:one)"
expect_eq "SET NX PX on held key" "" "$(cli SET cli:one other NX PX 10000)"

TOKEN="$(cli LOCK.ACQUIRE cli:lock alice 30000)"
[[ "$TOKEN" =~ ^[0-9]+$ ]] || fail "LOCK.ACQUIRE: expected an integer token, got [$TOKEN]"
say "ok: LOCK.ACQUIRE -> token $TOKEN"
expect_eq "LOCK.ACQUIRE same owner" "$TOKEN" "$(cli LOCK.ACQUIRE cli:lock alice 30000)"
expect_eq "LOCK.ACQUIRE other owner" "" "$(cli LOCK.ACQUIRE cli:lock bob 30000)"

INFO="$(cli LOCK.INFO cli:lock)"
mapfile -t F <<<"$INFO"
# The last field, next-waiter, is nil: an empty line, which $(...) drops.
[[ ${#F[@]} -eq 9 && "${F[0]}" == owner && "${F[1]}" == alice && "${F[2]}" == token \
   && "${F[3]}" == "$TOKEN" && "${F[4]}" == ttl-ms && "${F[5]}" =~ ^[0-9]+$ \
   && "${F[6]}" == waiters && "${F[7]}" == 0 && "${F[8]}" == next-waiter ]] \
    || fail "LOCK.INFO: expected owner/alice/token/$TOKEN/ttl-ms/N/waiters/0/next-waiter/(nil), got [$(echo $INFO)]"
say "ok: LOCK.INFO"
expect_eq "GET on lock key shows owner" "alice" "$(cli GET cli:lock)"
expect_eq "LOCK.FENCE" "$TOKEN" "$(cli LOCK.FENCE cli:resource "$TOKEN")"
STALE="$(cli LOCK.FENCE cli:resource $((TOKEN - 1)) 2>&1 || true)"
[[ "$STALE" == *STALE* ]] || fail "LOCK.FENCE with a lower token: expected a STALE error, got [$STALE]"
say "ok: LOCK.FENCE lower token -> STALE"
expect_eq "LOCK.RELEASE" "1" "$(cli LOCK.RELEASE cli:lock alice "$TOKEN")"
expect_eq "LOCK.INFO when free" "" "$(cli LOCK.INFO cli:lock)"
UNKNOWN="$(cli DPING 2>&1 || true)"
[[ "$UNKNOWN" == *"ERR unknown command 'DPING'"* ]] || fail "unknown command text: [$UNKNOWN]"
say "ok: unknown command error text"

# ---------------------------------------------------------------- 2. interactive redis-cli
say "interactive redis-cli under tmux"
PROMPT="127.0.0.1:$PORT>"
tmux -L "$TMUX_SOCK" -f /dev/null new-session -d -s rl -x 220 -y 60 \
    "redis-cli -h 127.0.0.1 -p $PORT; echo REDIS_CLI_EXITED=\$?; sleep 30"
pane() { tmux -L "$TMUX_SOCK" capture-pane -p -J -S -200 -t rl 2>/dev/null || true; }
wait_screen() { # fixed-string, description
    local deadline=$((SECONDS + STEP_TIMEOUT))
    while ((SECONDS < deadline)); do
        local now
        now="$(pane)"
        if grep -qF -- "$1" <<<"$now"; then return 0; fi
        if grep -q "REDIS_CLI_EXITED=" <<<"$now"; then
            echo "$now" >&2
            fail "redis-cli exited during: $2"
        fi
        sleep 0.1
    done
    pane >&2
    fail "interactive: no [$1] within ${STEP_TIMEOUT}s ($2)"
}
# the reply printed right after the line that echoes the command
reply_after() { pane | grep -F -A1 -- "$PROMPT $1" | tail -n 1; }
type_cmd() { # command, fixed-string expected in the reply line, description
    tmux -L "$TMUX_SOCK" send-keys -t rl -l -- "$1"
    tmux -L "$TMUX_SOCK" send-keys -t rl Enter
    local deadline=$((SECONDS + STEP_TIMEOUT))
    while ((SECONDS < deadline)); do
        local r
        r="$(reply_after "$1")"
        if [[ -n "$r" && "$r" != "$PROMPT"* ]]; then
            [[ "$r" == *"$2"* ]] || { pane >&2; fail "interactive $1: expected [$2] in [$r]"; }
            say "ok: interactive $3 -> $r"
            return 0
        fi
        sleep 0.1
    done
    pane >&2
    fail "interactive: no reply to [$1] within ${STEP_TIMEOUT}s"
}
wait_screen "$PROMPT" "the prompt (after COMMAND DOCS at start-up)"
type_cmd "SET cli:int value-1" "OK" "SET"
type_cmd "GET cli:int" '"value-1"' "GET"
type_cmd "LOCK.ACQUIRE cli:ilock carol 30000" "(integer) " "LOCK.ACQUIRE"
type_cmd "LOCK.INFO cli:ilock" '"owner"' "LOCK.INFO"
wait_screen '"carol"' "LOCK.INFO shows the owner"
type_cmd "PING" "PONG" "PING"
tmux -L "$TMUX_SOCK" send-keys -t rl -l -- "quit"
tmux -L "$TMUX_SOCK" send-keys -t rl Enter
wait_screen "REDIS_CLI_EXITED=0" "quit"
if pane | grep -qiE "segmentation|panic|assert|core dumped"; then
    pane >&2
    fail "interactive redis-cli printed a crash"
fi
tmux -L "$TMUX_SOCK" kill-server >/dev/null 2>&1 || true

# ---------------------------------------------------------------- 3. redis-benchmark
say "redis-benchmark -q -n 2000 (the default test list)"
BENCH="$WORK/bench.txt"
if ! timeout 300 redis-benchmark -h 127.0.0.1 -p "$PORT" -n 2000 -q \
        >"$BENCH" 2>&1 </dev/null; then
    tr '\r' '\n' <"$BENCH" >&2
    fail "redis-benchmark exited non-zero"
fi
tr '\r' '\n' <"$BENCH" | grep -v '^[[:space:]]*$' | grep -v 'rps=' >"$BENCH.lines" || true
cat "$BENCH.lines"
if grep -qiE "error|ERR " "$BENCH.lines"; then
    fail "redis-benchmark reported an error"
fi
for t in PING_INLINE PING_MBULK SET GET INCR LPUSH RPUSH LPOP RPOP SADD HSET SPOP ZADD ZPOPMIN \
        "LRANGE_100 \(first 100 elements\)" "LRANGE_300 \(first 300 elements\)" \
        "LRANGE_500 \(first 500 elements\)" "LRANGE_600 \(first 600 elements\)" "MSET \(10 keys\)"; do
    grep -qE "^$t: [0-9.]+ requests per second" "$BENCH.lines" \
        || fail "redis-benchmark did not complete $t"
done
say "ok: redis-benchmark completed its default tests without errors"
expect_eq "server still answers after the benchmark" "PONG" "$(cli PING)"

# ---------------------------------------------------------------- stop
say "stopping raftlock with SIGTERM"
kill -TERM "$SERVER_PID"
rc=0
for _ in $(seq 1 100); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$SERVER_PID" 2>/dev/null; then
    fail "raftlock did not exit within 10s of SIGTERM"
fi
wait "$SERVER_PID" || rc=$?
SERVER_PID=""
[[ $rc -eq 0 ]] || fail "raftlock exited with status $rc after SIGTERM (expected a clean shutdown, 0)"
say "all client checks passed"
