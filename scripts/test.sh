#!/usr/bin/env bash
# The test command: installs prerequisites, then runs every test: unit tests,
# openraft's storage suite, integration tests against the real binary, and
# (unless cargo arguments narrow the run) the interoperability suite with real
# client libraries (tests/interop, which installs them from PyPI, npm and
# crates.io into a cache on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# One target directory shared by every build on this machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
cargo test --release "$@"
if [ $# -eq 0 ]; then
    tests/interop/run.sh
fi
