#!/usr/bin/env bash
# Fault-injection run (tests/chaos, issue 5): a real cluster of raftlock
# processes in network namespaces, broken on purpose while clients lock and
# write, then every safety checker over the history.
#
#   scripts/chaos.sh                               # 2 minutes, 3 nodes, random seed
#   scripts/chaos.sh --duration 30m --seed 7 --nodes 5
#   scripts/chaos.sh --planted wall-clock-lease --faults clock-jump,kill-leader
#
# Every other flag goes to tests/chaos/run.py (--help lists them). `--planted
# BUG` builds raftlock with the `planted-bugs` feature and switches BUG on
# (see src/planted.rs); `--planted resource-no-check` plants the bug in the
# harness's protected resource instead. Ends with one summary line (the fault
# kinds that ran, skipped or were not drawn, and a verdict per checker) and
# writes verdict.json beside the history. Exits 1 if a checker found a
# violation, 2 if the run proves nothing (a harness error, missing evidence),
# printing the seed and where the history is.
# Needs root (namespaces, iptables); falls back to loopback and says so, unless
# RAFTLOCK_CHAOS_REQUIRE_NETNS=1 (scripts/test.sh), which makes that an error.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"

args=()
planted=()
while [ $# -gt 0 ]; do
    case "$1" in
        --planted) planted+=("$2"); shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done

binary="$CARGO_TARGET_DIR/release/raftlock"
bugs=()
for bug in "${planted[@]+"${planted[@]}"}"; do
    if [ "$bug" = resource-no-check ]; then
        args+=(--resource-no-check)
    else
        bugs+=(--plant-bug "$bug")
    fi
done
if [ ${#bugs[@]} -gt 0 ]; then
    # Built as the tests build it (cargo test ... --test cluster): dev-dependencies
    # change a few features of shared crates, so a plain `cargo build --bin` would
    # compile RocksDB a second time.
    cargo test --release --no-run --features planted-bugs --test cluster >&2
    mkdir -p "$CARGO_TARGET_DIR/planted"
    cp "$CARGO_TARGET_DIR/release/raftlock" "$CARGO_TARGET_DIR/planted/raftlock"
    binary="$CARGO_TARGET_DIR/planted/raftlock"
    # Put the normal binary back for everything else.
    cargo test --release --no-run --test cluster >&2
else
    cargo test --release --no-run --test cluster >&2
fi
exec python3 tests/chaos/run.py --binary "$binary" "${bugs[@]+"${bugs[@]}"}" "${args[@]+"${args[@]}"}"
