#!/usr/bin/env bash
# Interoperability suite: real Redis client libraries, unchanged, against raftlock.
#
#   tests/interop/run.sh            # everything, against a one-node server and
#                                   # against a follower of a 3-node cluster
#   INTEROP_ONLY="redispy node" tests/interop/run.sh    # only some groups
#   INTEROP_TARGETS=single tests/interop/run.sh         # only one target
#   INTEROP_KEEP=1 tests/interop/run.sh                 # keep logs even on success
#   INTEROP_RECORD=DIR tests/interop/run.sh             # record what clients send (fuzz seeds)
#
# Groups: redispy (redis-py 8.x and 5.x, RESP2 and RESP3), prl (python-redis-lock),
# pottery, node (ioredis 5/6, node-redis 4/latest), redlock (node-redlock 5),
# rust (redis crate, rslock), go (go-redis v9, redsync v4, rueidis and
# rueidislock), java (Jedis 8,
# Lettuce 7, Redisson 3), cli (redis-cli in tmux, redis-benchmark), auth
# (redis-py, ioredis and node-redis with their password options, against a
# third target: a one-node server started with --requirepass), tls (redis-py,
# ioredis and node-redis with their TLS options, against a one-node server with
# a TLS port; certificates made with openssl).
#
# It installs what it needs, once, into ${INTEROP_CACHE:-/var/tmp/raftlock-interop}:
# two Python venvs (redis-py 8.x with python-redis-lock and pottery; redis-py 5.x),
# the npm packages, the Rust project tests/interop/rust (its own target dir),
# the Go module tests/interop/go (its module and build caches under go/), and the
# Maven project tests/interop/java (its local repository and build output under
# java/).
# Every case prints a RESULT line; a case passes only if the library reports
# success AND a separate plain client reads back the state the library believes
# in. The summary counts cases per library; the last line is `N passed, N failed`
# and the exit status is non-zero if any case failed.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${INTEROP_CACHE:-/var/tmp/raftlock-interop}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
BIN="$CARGO_TARGET_DIR/release/raftlock"
ONLY="${INTEROP_ONLY:-redispy prl pottery node redlock rust go java cli auth tls}"
TARGETS="${INTEROP_TARGETS:-single follower}"
PREFIX="interop-$$-$RANDOM"
TMUX_SOCKET="raftlock-interop-$$"
T_START=$(date +%s)

WORK="$(mktemp -d "${TMPDIR:-/tmp}/raftlock-interop.XXXXXX")"
RESULTS="$WORK/results.tsv"   # target \t library \t case \t PASS|FAIL \t detail
: >"$RESULTS"
SERVER_PIDS=()

say() { printf '[interop %3ds] %s\n' "$(($(date +%s) - T_START))" "$*"; }

# --- cleanup: every server we started is stopped, whatever happens -------------
cleanup() {
    local pid
    for pid in "${SERVER_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in "${SERVER_PIDS[@]}"; do
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    tmux -L "$TMUX_SOCKET" kill-server >/dev/null 2>&1
    if [ -n "${KEEP_WORK:-}" ] || [ -n "${INTEROP_KEEP:-}" ]; then
        echo "[interop] logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A failed step that is not a library case (install, server start) still counts.
record() { # target library case PASS|FAIL detail
    printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$(echo "$5" | tr '\t\n' '  ' | cut -c1-400)" >>"$RESULTS"
}

wanted() { case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# --- prerequisites --------------------------------------------------------------
apt_install() {
    local SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y -qq "$@" >/dev/null
}

# libclang etc. for the server build, redis-tools (redis-cli, redis-benchmark), tmux.
"$ROOT/scripts/deps.sh" || say "scripts/deps.sh failed"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm || say "could not install nodejs/npm"
fi
if wanted go && ! command -v go >/dev/null; then
    apt_install golang-go || say "could not install golang-go"
fi
if wanted java && { ! command -v mvn >/dev/null || ! command -v java >/dev/null; }; then
    apt_install maven default-jdk-headless || say "could not install maven/default-jdk-headless"
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt_install python3-venv || say "could not install python3-venv"
fi

mkdir -p "$CACHE"
# Two runs sharing the cache must not install into it at the same time.
exec 9>"$CACHE/.install.lock"
flock -w 1200 9 || say "waited 20 min for $CACHE/.install.lock; going on"

# venv DIR CHECK PIP-SPECS...: (re)install only if CHECK fails.
venv() {
    local dir="$CACHE/$1" check="$2"
    shift 2
    if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c "$check" 2>/dev/null; then
        return 0
    fi
    say "installing into $dir: $*"
    rm -rf "$dir"
    python3 -m venv "$dir" &&
        timeout 900 "$dir/bin/pip" install -q --disable-pip-version-check --timeout 60 "$@" &&
        "$dir/bin/python" -c "$check"
}

PY8="$CACHE/py8/bin/python"
PY5="$CACHE/py5/bin/python"
if wanted redispy || wanted prl || wanted pottery; then
    venv py8 'import redis, redis_lock, pottery; assert redis.__version__.startswith("8.")' \
        'redis>=8,<9' python-redis-lock pottery ||
        record setup "python venv (redis-py 8.x)" install FAIL "pip install redis>=8,<9 python-redis-lock pottery failed"
fi
if wanted redispy; then
    venv py5 'import redis; assert redis.__version__.startswith("5.")' 'redis>=5,<6' ||
        record setup "python venv (redis-py 5.x)" install FAIL "pip install redis>=5,<6 failed"
fi

NODE_DIR="$CACHE/node"
node_ok() {
    (cd "$NODE_DIR" 2>/dev/null && NODE_PATH="$NODE_DIR/node_modules" node -e '
        const v = (a) => require(require.resolve(a).replace(/(node_modules\/[^/]+)\/.*/, "$1/package.json")).version;
        for (const a of ["ioredis5", "ioredis6", "redis4", "redislatest", "redlock5"]) require.resolve(a);
        if (!v("ioredis5").startsWith("5.") || !v("redis4").startsWith("4.")) process.exit(1);
    ') >/dev/null 2>&1
}
if (wanted node || wanted redlock) && ! node_ok; then
    say "installing npm packages into $NODE_DIR"
    mkdir -p "$NODE_DIR"
    IOREDIS6="ioredis@6"
    if [ -z "$(timeout 120 npm view 'ioredis@6' version 2>/dev/null)" ]; then
        say "NOTE: ioredis 6 is not on the npm registry; using ioredis@latest in its place"
        IOREDIS6="ioredis@latest"
    fi
    # redlock 5 exists only as betas (npm's `latest` tag is 4.x): ^5.0.0-beta.2
    # takes the newest 5.x, beta or release.
    cat >"$NODE_DIR/package.json" <<EOF
{
  "name": "raftlock-interop-deps",
  "private": true,
  "dependencies": {
    "ioredis5": "npm:ioredis@5",
    "ioredis6": "npm:$IOREDIS6",
    "redis4": "npm:redis@4",
    "redislatest": "npm:redis@latest",
    "redlock5": "npm:redlock@^5.0.0-beta.2"
  }
}
EOF
    rm -rf "$NODE_DIR/node_modules" "$NODE_DIR/package-lock.json"
    (cd "$NODE_DIR" && timeout 900 npm install --no-audit --no-fund --loglevel=error) ||
        say "npm install failed"
    node_ok || record setup "npm packages" install FAIL "npm install of ioredis@5 $IOREDIS6 redis@4 redis@latest redlock@5 failed"
fi
export NODE_PATH="$NODE_DIR/node_modules"

RUST_BIN="$CACHE/rust-target/release/raftlock-interop"
if wanted rust; then
    say "building tests/interop/rust (redis crate + rslock)"
    if ! (CARGO_TARGET_DIR="$CACHE/rust-target" timeout 1800 cargo build --release --locked --quiet \
        --manifest-path "$HERE/rust/Cargo.toml" >"$WORK/rust-build.log" 2>&1); then
        tail -20 "$WORK/rust-build.log"
        record setup "rust interop project" build FAIL "cargo build of tests/interop/rust failed: $(tail -3 "$WORK/rust-build.log")"
    fi
fi

# The Go module's dependencies (go.mod, go.sum) and build cache live in the
# interop cache; a go older than go.mod's `go` line fetches that toolchain
# itself. Built on every run (the build cache makes it quick).
GO_BIN="$CACHE/go/bin/raftlock-interop-go"
go_env() {
    env GOPATH="$CACHE/go" GOMODCACHE="$CACHE/go/pkg/mod" GOCACHE="$CACHE/go/cache" \
        GOFLAGS="-mod=mod -buildvcs=false" "$@"
}
if wanted go; then
    rm -f "$GO_BIN"
    if command -v go >/dev/null; then
        say "building tests/interop/go (go-redis v9, redsync v4, rueidis)"
        if ! (cd "$HERE/go" && go_env timeout 900 go build -o "$GO_BIN" . >"$WORK/go-build.log" 2>&1); then
            tail -20 "$WORK/go-build.log"
            record setup "go interop program" build FAIL "go build of tests/interop/go failed: $(tail -3 "$WORK/go-build.log")"
        fi
    else
        record setup "go toolchain" install FAIL "go is not installed and apt-get install golang-go failed"
    fi
fi

# The Maven project (Jedis, Lettuce, Redisson, pinned in its pom.xml): Maven's local
# repository and the build output live in the interop cache, nothing is written
# under tests/. Built once per run into one shaded jar (the local repository
# makes it quick after the first run).
JAVA_DIR="$CACHE/java"
JAVA_JAR="$JAVA_DIR/target/raftlock-interop-java.jar"
if wanted java; then
    rm -f "$JAVA_JAR"
    if command -v mvn >/dev/null && command -v java >/dev/null; then
        say "building tests/interop/java (Jedis, Lettuce, Redisson)"
        if ! (cd "$HERE/java" && timeout 900 mvn -B -ntp -Dstyle.color=never -Dmaven.repo.local="$JAVA_DIR/m2" \
            -Dinterop.build.dir="$JAVA_DIR/target" clean package >"$WORK/java-build.log" 2>&1) || [ ! -f "$JAVA_JAR" ]; then
            tail -20 "$WORK/java-build.log"
            rm -f "$JAVA_JAR"
            record setup "java interop program" build FAIL "mvn package of tests/interop/java failed: $(grep -m3 '^\[ERROR\]' "$WORK/java-build.log" || tail -3 "$WORK/java-build.log")"
        fi
    else
        record setup "java toolchain" install FAIL "mvn or java is not installed and apt-get install maven default-jdk-headless failed"
    fi
fi

flock -u 9

say "building the server (cargo test --release --no-run --test cluster)"
# Built as the tests build it (cargo test ... --test cluster): dev-dependencies
# change a few features of shared crates, so a plain `cargo build --bin` would
# compile RocksDB a second time.
if ! (cd "$ROOT" && timeout 3000 cargo test --release --no-run --test cluster --quiet >"$WORK/server-build.log" 2>&1); then
    tail -30 "$WORK/server-build.log"
    record setup raftlock build FAIL "the release build of raftlock failed: $(tail -3 "$WORK/server-build.log")"
fi

# --- servers --------------------------------------------------------------------
free_ports() { # N: distinct free 127.0.0.1 ports
    python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

start_node() { # name id port peer-port [extra args...]
    local name="$1" id="$2" port="$3" peer="$4"
    shift 4
    mkdir -p "$WORK/$name"
    # A developer's RAFTLOCK_* variables must not change the configuration under test.
    env $(env | sed -n 's/^\(RAFTLOCK_[A-Za-z0-9_]*\)=.*/-u \1/p') RAFTLOCK_CLUSTER_SECRET="interop-$$" \
        "$BIN" --bind 127.0.0.1 --node-id "$id" --port "$port" --peer-port "$peer" \
        --data-dir "$WORK/$name/data" --metrics-addr off "$@" \
        </dev/null >"$WORK/$name/server.log" 2>&1 &
    SERVER_PIDS+=($!)
}

cli() { timeout 10 redis-cli -h 127.0.0.1 -p "$@" 2>&1 | tr -d '\r'; }

wait_writable() { # port seconds
    local deadline=$(($(date +%s) + $2))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if [ "$(cli "$1" SET "$PREFIX:ready" 1)" = "OK" ]; then
            cli "$1" DEL "$PREFIX:ready" >/dev/null
            return 0
        fi
        sleep 0.2
    done
    return 1
}

raft_field() { cli "$1" RAFT.INFO | sed -n "s/^$2://p" | head -1; }

SINGLE_PORT=""
FOLLOWER_PORT=""
LEADER_PORT=""
if [ -x "$BIN" ] && ! grep -q $'^setup\traftlock\t' "$RESULTS"; then
    if [[ " $TARGETS " == *" single "* ]]; then
        read -r p pp <<<"$(free_ports 2)"
        start_node single 1 "$p" "$pp"
        if wait_writable "$p" 30; then
            SINGLE_PORT="$p"
            say "one-node raftlock on 127.0.0.1:$p"
            if [ -n "${INTEROP_RECORD:-}" ]; then
                # What the clients send, recorded as the fuzzers' seeds.
                read -r rp <<<"$(free_ports 1)"
                python3 "$ROOT/tests/fuzz/record.py" "$rp" "$p" "$INTEROP_RECORD" >"$WORK/single/record.log" 2>&1 &
                SERVER_PIDS+=($!)
                if wait_writable "$rp" 10; then
                    SINGLE_PORT="$rp"
                    say "recording the single target's traffic into $INTEROP_RECORD (proxy on 127.0.0.1:$rp)"
                fi
            fi
        else
            record single raftlock start FAIL "one-node server on port $p did not accept a write within 30 s: $(tail -5 "$WORK/single/server.log")"
        fi
    fi
    if [[ " $TARGETS " == *" follower "* ]]; then
        read -r p1 p2 p3 q1 q2 q3 <<<"$(free_ports 6)"
        members="1=127.0.0.1:$q1/127.0.0.1:$p1,2=127.0.0.1:$q2/127.0.0.1:$p2,3=127.0.0.1:$q3/127.0.0.1:$p3"
        start_node node1 1 "$p1" "$q1" --initial-cluster "$members"
        start_node node2 2 "$p2" "$q2" --initial-cluster "$members"
        start_node node3 3 "$p3" "$q3" --initial-cluster "$members"
        deadline=$(($(date +%s) + 60))
        while [ "$(date +%s)" -lt "$deadline" ]; do
            leader="" follower=""
            for p in "$p1" "$p2" "$p3"; do
                case "$(raft_field "$p" role)" in
                    leader) leader="$p" ;;
                    follower) [ -n "$(raft_field "$p" leader_id | grep -v '^0*$')" ] && follower="$p" ;;
                esac
            done
            if [ -n "$leader" ] && [ -n "$follower" ] && wait_writable "$follower" 10; then
                FOLLOWER_PORT="$follower"
                LEADER_PORT="$leader"
                break
            fi
            sleep 0.3
        done
        if [ -n "$FOLLOWER_PORT" ]; then
            say "3-node cluster on 127.0.0.1:$p1,$p2,$p3: leader $LEADER_PORT, cases run against follower $FOLLOWER_PORT"
        else
            record follower raftlock start FAIL "3-node cluster did not elect a leader with a writable follower within 60 s: $(for n in 1 2 3; do tail -2 "$WORK/node$n/server.log"; done)"
        fi
    fi
fi

# --- cases ----------------------------------------------------------------------
# run_group TARGET GROUP TIMEOUT-S COMMAND...: the RESULT lines it prints are
# recorded; a crash, a time-out or a non-zero exit without a failed case is one
# more failed case.
run_group() {
    local target="$1" group="$2" limit="$3"
    shift 3
    local out="$WORK/$target-$group.out" err="$WORK/$target-$group.err" rc
    (cd "$HERE" && timeout -k 5 "$limit" "$@") >"$out" 2>"$err"
    rc=$?
    grep $'^RESULT\t' "$out" | while IFS=$'\t' read -r _ lib case status detail; do
        record "$target" "$lib" "$case" "$status" "$detail"
        if [ "$status" = PASS ]; then
            printf '  %-8s %-28s %-52s PASS\n' "$target" "$lib" "$case"
        else
            printf '  %-8s %-28s %-52s %s  %s\n' "$target" "$lib" "$case" "$status" "$detail"
        fi
    done
    if [ "$rc" -ne 0 ] && ! grep -q $'^RESULT\t.*\tFAIL\t' "$out"; then
        local why="exit status $rc"
        [ "$rc" -eq 124 ] && why="timed out after ${limit}s"
        record "$target" "$group" "(runner)" FAIL "$why: $(tail -5 "$err" | tr '\n' ' ')"
        printf '  %-8s %-28s %-52s FAIL  %s\n' "$target" "$group" "(runner)" "$why"
        tail -5 "$err" | sed 's/^/      /'
    fi
}

run_target() { # target port check-port
    local t="$1" port="$2" check="$3"
    local a=(--port "$port" --check-port "$check" --prefix "$PREFIX-$t")
    say "== $t: clients on 127.0.0.1:$port, checks on 127.0.0.1:$check"
    if wanted redispy; then
        for proto in 2 3; do
            [ -x "$PY8" ] && run_group "$t" "redis-py-8-resp$proto" 120 "$PY8" python/redispy_lock.py "${a[@]}" --protocol "$proto"
            [ -x "$PY5" ] && run_group "$t" "redis-py-5-resp$proto" 120 "$PY5" python/redispy_lock.py "${a[@]}" --protocol "$proto"
            # GEO, BITFIELD, sharded pub/sub, MEMORY: each result beside a real redis-server's.
            [ -x "$PY8" ] && run_group "$t" "redis-py-8-breadth-resp$proto" 60 "$PY8" python/redispy_breadth.py "${a[@]}" --protocol "$proto"
            [ -x "$PY5" ] && run_group "$t" "redis-py-5-breadth-resp$proto" 60 "$PY5" python/redispy_breadth.py "${a[@]}" --protocol "$proto"
        done
    fi
    if wanted prl && [ -x "$PY8" ]; then
        run_group "$t" python-redis-lock 120 "$PY8" python/python_redis_lock_cases.py "${a[@]}"
    fi
    if wanted pottery && [ -x "$PY8" ]; then
        run_group "$t" pottery 120 "$PY8" python/pottery_cases.py "${a[@]}"
    fi
    if wanted node && node_ok; then
        run_group "$t" ioredis5 90 node node/setnx_lua.js --lib ioredis5 "${a[@]}"
        run_group "$t" ioredis6 90 node node/setnx_lua.js --lib ioredis6 "${a[@]}"
        run_group "$t" ioredis6-resp2 90 node node/setnx_lua.js --lib ioredis6 --resp 2 "${a[@]}"
        run_group "$t" node-redis4 90 node node/setnx_lua.js --lib redis4 "${a[@]}"
        run_group "$t" node-redis-latest 90 node node/setnx_lua.js --lib redislatest "${a[@]}"
        run_group "$t" node-redis-latest-resp2 90 node node/setnx_lua.js --lib redislatest --resp 2 "${a[@]}"
    fi
    if wanted redlock && node_ok; then
        run_group "$t" redlock5 90 node node/redlock5.js "${a[@]}"
    fi
    if wanted rust && [ -x "$RUST_BIN" ]; then
        run_group "$t" rust 120 "$RUST_BIN" "${a[@]}"
    fi
    if wanted go && [ -x "$GO_BIN" ]; then
        for proto in 2 3; do
            run_group "$t" "go-resp$proto" 90 "$GO_BIN" "${a[@]}" --protocol "$proto"
        done
        # rueidis speaks RESP3 only (HELLO 3; CLIENT TRACKING unless DisableCache).
        run_group "$t" rueidis 90 "$GO_BIN" "${a[@]}" --only rueidis
        # rueidislock in three modes; a waiter the server never wakes fails at its own timeout.
        run_group "$t" rueidislock 150 "$GO_BIN" "${a[@]}" --only rueidislock
    fi
    if wanted java && [ -f "$JAVA_JAR" ]; then
        for proto in 2 3; do
            run_group "$t" "java-resp$proto" 60 java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$JAVA_JAR" "${a[@]}" --protocol "$proto" \
                --only jedis,lettuce
            # Redisson: about 25 s of cases (a watchdog held 5.5 s, a second JVM paused past its lease).
            run_group "$t" "redisson-resp$proto" 120 java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$JAVA_JAR" "${a[@]}" --protocol "$proto" \
                --only redisson
        done
    fi
    if wanted cli; then
        run_group "$t" cli 240 python3 python/cli_cases.py "${a[@]}" --tmux-socket "$TMUX_SOCKET"
    fi
}

[ -n "$SINGLE_PORT" ] && run_target single "$SINGLE_PORT" "$SINGLE_PORT"
# Against the follower; the plain checker reads from the leader, so what it sees
# went through Raft rather than being a follower-local answer.
[ -n "$FOLLOWER_PORT" ] && run_target follower "$FOLLOWER_PORT" "$LEADER_PORT"

# Authentication: the libraries' own password options against a node that
# requires one (the password is random per run).
if wanted auth && [ -x "$BIN" ] && ! grep -q $'^setup\traftlock\t' "$RESULTS"; then
    read -r p pp <<<"$(free_ports 2)"
    AUTH_PASS="interop$$x$RANDOM"
    start_node auth 1 "$p" "$pp" --requirepass "$AUTH_PASS"
    AUTH_PORT=""
    deadline=$(($(date +%s) + 30))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if [ "$(cli "$p" --no-auth-warning -a "$AUTH_PASS" SET "$PREFIX:ready" 1)" = "OK" ]; then
            AUTH_PORT="$p"
            break
        fi
        sleep 0.2
    done
    if [ -z "$AUTH_PORT" ]; then
        record auth raftlock start FAIL "the server with --requirepass on port $p did not accept an authenticated write within 30 s: $(tail -5 "$WORK/auth/server.log")"
    else
        say "== auth: a one-node raftlock with --requirepass on 127.0.0.1:$AUTH_PORT"
        a=(--port "$AUTH_PORT" --check-port "$AUTH_PORT" --prefix "$PREFIX-auth" --password "$AUTH_PASS")
        # An ACL user that may lock its own keys and nothing else.
        ACL_PASS="acl$$x$RANDOM"
        acl_ok="$(cli "$AUTH_PORT" --no-auth-warning -a "$AUTH_PASS" ACL SETUSER interop-locker on ">$ACL_PASS" \
            +@lock +@scripting +get +set +del +exists +pexpire +pttl +evalsha +script "~$PREFIX-auth-acl:*")"
        [ "$acl_ok" = "OK" ] || record auth raftlock "ACL SETUSER" FAIL "ACL SETUSER answered: $acl_ok"
        for proto in 2 3; do
            [ -x "$PY8" ] && run_group auth "redis-py-8-auth-resp$proto" 60 "$PY8" python/auth_cases.py "${a[@]}" --protocol "$proto" \
                --acl-user interop-locker --acl-pass "$ACL_PASS"
            [ -x "$PY5" ] && run_group auth "redis-py-5-auth-resp$proto" 60 "$PY5" python/auth_cases.py "${a[@]}" --protocol "$proto" \
                --acl-user interop-locker --acl-pass "$ACL_PASS"
        done
        if node_ok; then
            run_group auth ioredis6-auth 60 node node/auth_cases.js --lib ioredis6 "${a[@]}"
            run_group auth node-redis-latest-auth 60 node node/auth_cases.js --lib redislatest "${a[@]}"
        fi
    fi
fi

# TLS: the libraries' own TLS options against a node's TLS port, which asks
# for a client certificate (--tls-auth-clients yes).
if wanted tls && [ -x "$BIN" ] && ! grep -q $'^setup\traftlock\t' "$RESULTS"; then
    read -r p tp pp <<<"$(free_ports 3)"
    PKI="$WORK/tls/pki"
    mkdir -p "$PKI"
    printf 'basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >"$PKI/leaf.ext"
    if (cd "$PKI" &&
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 30 \
            -subj "/CN=raftlock interop CA" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign &&
        for n in server client; do
            openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$n.key" -out "$n.csr" -subj "/CN=$n" &&
            openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$n.crt" -days 30 -extfile leaf.ext || exit 1
        done) >"$WORK/tls/openssl.log" 2>&1; then
        start_node tls 1 "$p" "$pp" --tls-port "$tp" --tls-cert-file "$PKI/server.crt" --tls-key-file "$PKI/server.key" \
            --tls-ca-cert-file "$PKI/ca.crt" --tls-auth-clients yes
        if ! wait_writable "$p" 30; then
            record tls raftlock start FAIL "the server with --tls-port did not accept a write within 30 s: $(tail -5 "$WORK/tls/server.log")"
        else
            say "== tls: a one-node raftlock with a TLS port on 127.0.0.1:$tp (plain port $p for the checker)"
            a=(--port "$tp" --check-port "$p" --prefix "$PREFIX-tls" --ca "$PKI/ca.crt" --cert "$PKI/client.crt" --key "$PKI/client.key")
            for proto in 2 3; do
                [ -x "$PY8" ] && run_group tls "redis-py-8-tls-resp$proto" 60 "$PY8" python/tls_cases.py "${a[@]}" --protocol "$proto"
                [ -x "$PY5" ] && run_group tls "redis-py-5-tls-resp$proto" 60 "$PY5" python/tls_cases.py "${a[@]}" --protocol "$proto"
            done
            if node_ok; then
                run_group tls ioredis6-tls 60 node node/tls_cases.js --lib ioredis6 "${a[@]}"
                run_group tls node-redis-latest-tls 60 node node/tls_cases.js --lib redislatest "${a[@]}"
            fi
        fi
    else
        record tls raftlock certificates FAIL "openssl could not make the test certificates: $(tail -5 "$WORK/tls/openssl.log")"
    fi
fi

# Did any server die during the run?
for i in "${!SERVER_PIDS[@]}"; do
    if ! kill -0 "${SERVER_PIDS[$i]}" 2>/dev/null; then
        record server raftlock "process ${SERVER_PIDS[$i]} alive at the end" FAIL "a raftlock process exited during the run"
    fi
done

# --- summary --------------------------------------------------------------------
echo
echo "=== interop summary ($(($(date +%s) - T_START)) s; cases per library: passed/failed on each target) ==="
awk -F'\t' '
    { lib[$2] = 1; tg[$1] = 1
      if ($4 == "PASS") p[$2 SUBSEP $1]++; else if ($4 == "FAIL") f[$2 SUBSEP $1]++ }
    END {
        nt = split("setup single follower auth tls server", order, " ")
        header = sprintf("%-30s", "library")
        for (i = 1; i <= nt; i++) if (order[i] in tg) header = header sprintf("  %-20s", order[i])
        print header
        n = 0; for (l in lib) names[++n] = l
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (names[j] < names[i]) { t = names[i]; names[i] = names[j]; names[j] = t }
        for (i = 1; i <= n; i++) {
            row = sprintf("%-30s", names[i])
            for (k = 1; k <= nt; k++) if (order[k] in tg) {
                key = names[i] SUBSEP order[k]
                cell = (key in p || key in f) ? sprintf("pass %d  fail %d", p[key] + 0, f[key] + 0) : "-"
                row = row sprintf("  %-20s", cell)
            }
            print row
        }
    }' "$RESULTS"

if grep -q $'\tFAIL\t' "$RESULTS"; then
    echo
    echo "failed cases:"
    awk -F'\t' '$4 == "FAIL" { printf "  [%s] %s / %s: %s\n", $1, $2, $3, $5 }' "$RESULTS"
    KEEP_WORK=1
fi
PASSED=$(awk -F'\t' '$4 == "PASS"' "$RESULTS" | wc -l)
FAILED=$(awk -F'\t' '$4 == "FAIL"' "$RESULTS" | wc -l)
if [ "$PASSED" -eq 0 ] && [ "$FAILED" -eq 0 ]; then
    record setup interop "ran any case" FAIL "no case ran"
    FAILED=1
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
