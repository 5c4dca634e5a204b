#!/usr/bin/env bash
# The test command: installs prerequisites, then runs every test (unit tests,
# openraft's storage suite, and integration tests against the real binary).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# One target directory shared by every build on this machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
cargo test --release "$@"
