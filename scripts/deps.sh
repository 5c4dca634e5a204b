#!/usr/bin/env bash
# Installs what building and testing raftlock needs on a fresh Debian machine
# that has only the Rust toolchain: libclang (RocksDB's bindings), a C++
# compiler, make (jemalloc's build, tikv-jemalloc-sys), and Redis's client
# tools (redis-cli, redis-benchmark) plus redis-server (the benchmark's
# baseline), tmux (interactive redis-cli test),
# and for the chaos harness (tests/chaos) iproute2 and iptables (network
# namespaces, partitions), libfaketime (wall-clock faults) and gcc (the fsync
# shim), openssl (test certificates for TLS), and Chromium (the dashboard test,
# tests/dashboard.rs, renders the page headless). Does nothing if all are present.
set -euo pipefail

need=()
for pkg in libclang-dev clang g++ gcc make redis-tools redis-server tmux iproute2 iptables libfaketime openssl chromium; do
    # "install ok installed" only: a removed package keeps a dpkg record.
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
echo "installing: ${need[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${need[@]}" >/dev/null
