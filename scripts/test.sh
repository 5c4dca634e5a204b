#!/usr/bin/env bash
# The test command: installs prerequisites, then runs every test: unit tests,
# openraft's storage suite, integration tests against the real binary, and
# (unless cargo arguments narrow the run) the interoperability suite with real
# client libraries (tests/interop, which installs them from PyPI, npm and
# crates.io into a cache on first use) and a 2-minute fault-injection run
# (tests/chaos: its checkers' own unit tests, then scripts/chaos.sh), and a
# bounded fuzzing run (scripts/fuzz.sh: every target 15 s, after replaying the
# inputs of crashes fixed before).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# One target directory shared by every build on this machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
# deps.sh installed redis-cli, redis-benchmark, tmux, libfaketime and gcc: no
# test may skip (nor a chaos fault kind be left out) for want of them.
export RAFTLOCK_REQUIRE_CLIENT_TOOLS=1
cargo test --release "$@"
if [ $# -eq 0 ]; then
    tests/interop/run.sh
    python3 -m unittest discover -s tests/chaos -p 'test_*.py'
    scripts/fuzz.sh all "${RAFTLOCK_FUZZ_SECONDS:-15}"
    # This runs as root: the chaos run must use network namespaces (real
    # partitions), not fall back to loopback.
    RAFTLOCK_CHAOS_REQUIRE_NETNS=1 scripts/chaos.sh --duration "${RAFTLOCK_CHAOS_DURATION:-120}"
fi
