#!/usr/bin/env bash
# The start command: installs prerequisites, builds in release mode and starts
# a one-node raftlock on 127.0.0.1:6379 (data in ./data, metrics on
# 127.0.0.1:9379). Extra arguments go to raftlock (see `--help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
# Built as the tests build it (dev-dependencies change a few features of
# shared crates: a plain `cargo build --bin` would compile RocksDB a second
# time when the tests run).
cargo test --release --no-run --test cluster
exec "$CARGO_TARGET_DIR/release/raftlock" "$@"
