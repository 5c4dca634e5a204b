#!/usr/bin/env bash
# Shows that the chaos checkers catch real bugs: for each planted bug
# (src/planted.rs, plus a resource that does not check tokens) it runs the
# harness up to three times with faults that can expose it, stopping at the
# first failing run, and prints which checkers failed.
#
#   scripts/chaos-planted.sh [--duration 45] [--seed 11] [bug ...]
#
# Exits non-zero if some bug went uncaught in all three runs.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=45
seed=11
bugs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) duration="$2"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        *) bugs+=("$1"); shift ;;
    esac
done
if [ ${#bugs[@]} -eq 0 ]; then
    bugs=(stale-reads wall-clock-lease ack-before-fsync token-reuse resource-no-check)
fi
faults_for() {
    case "$1" in
        stale-reads) echo partition-isolate,partition-leader-minority,net-delay ;;
        wall-clock-lease) echo clock-jump,kill-leader ;;
        ack-before-fsync) echo kill-all,kill-leader ;;
        token-reuse) echo kill-all,kill-leader,kill-follower ;;
        resource-no-check) echo pause-client,kill-leader ;;
        *) echo "unknown planted bug $1" >&2; exit 2 ;;
    esac
}
missed=0
for bug in "${bugs[@]}"; do
    caught=""
    for run in 1 2 3; do
        s=$((seed + run - 1))
        out="/var/tmp/raftlock-chaos/planted-$bug-$s"
        log="$out.log"
        mkdir -p /var/tmp/raftlock-chaos
        if scripts/chaos.sh --planted "$bug" --duration "$duration" --seed "$s" \
            --faults "$(faults_for "$bug")" --out "$out" >"$log" 2>&1; then
            echo "$bug: run $run (seed $s) passed: not caught"
        else
            failed=$(grep -oE '\] [a-z-]+: FAIL' "$log" | sed 's/^\] //; s/: FAIL//' | sort -u | tr '\n' ' ')
            echo "$bug: CAUGHT in run $run (seed $s) by: ${failed:-harness error, see $log}"
            caught=yes
            break
        fi
    done
    if [ -z "$caught" ]; then
        missed=$((missed + 1))
    fi
done
exit $((missed > 0))
