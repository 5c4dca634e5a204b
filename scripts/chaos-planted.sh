#!/usr/bin/env bash
# Shows that the chaos checkers catch real bugs: for each planted bug
# (src/planted.rs, plus a resource that does not check tokens) it runs the
# harness up to three times with a fault schedule that can expose it, stopping
# at the first run in which a checker found a violation, and prints which
# checkers did.
#
#   scripts/chaos-planted.sh [--duration 45] [--seed 11] [bug ...]
#
# Only a checker's violation counts as catching a bug. A run that fails for
# any other reason (a build failure, a harness error, missing evidence: see
# tests/chaos/run.py) is reported as such and does not count. Each run's
# verdict is read from its verdict.json (tests/chaos/FORMATS.md).
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
    bugs=(stale-reads wall-clock-lease ack-before-fsync token-reuse resource-no-check
          log-time-from-uncommitted reads-at-leader-clock version-kept-on-write wait-lifo
          applied-before-durable vote-waits-for-truncated)
fi
# The faults (and their timing) that can expose each bug.
schedule_for() {
    case "$1" in
        stale-reads) echo --faults partition-isolate,partition-leader-minority,net-delay ;;
        wall-clock-lease) echo --faults clock-jump,kill-leader ;;
        ack-before-fsync) echo --faults kill-all,kill-leader ;;
        token-reuse) echo --faults kill-all,kill-leader,kill-follower ;;
        resource-no-check) echo --faults pause-client,kill-leader ;;
        # A deposed leader stamps writes that never commit, then is elected
        # again before the log catches up (nemesis.py do_leader_returns).
        log-time-from-uncommitted) echo --faults leader-returns --quiet 1,2 ;;
        # Reads near a lease's end while a late renewal is in flight (the
        # workload aims at that), slowed down by link delays, or around a
        # leader that dies or stalls before an expiry commits.
        reads-at-leader-clock) echo --faults net-delay,kill-leader,pause-leader ;;
        # The workload rewrites lock keys in place (APPEND) in every run; the
        # faults only add failovers around it.
        version-kept-on-write) echo --faults kill-leader,net-delay ;;
        # Clients WAIT in every run; a LIFO queue shows as soon as two queue.
        wait-lifo) echo --faults kill-leader,net-delay ;;
        # A leader acknowledges its own entries before their fsync (as it
        # always does) but applies them, and tells followers they are
        # committed, before they are on its disk, which lags a second. Such
        # an entry is on one follower's disk only: killing every node at once
        # lets the other follower and the old leader, both without it, elect
        # a leader that never had it.
        applied-before-durable) echo --faults kill-all,kill-leader ;;
        # A deposed leader whose own entries the next leader's log cuts off,
        # then a second election (leader-returns pauses the new leaders):
        # its vote change waits on entries that are gone, and it stops
        # applying; the convergence check before the final restart sees it.
        vote-waits-for-truncated) echo --faults leader-returns --quiet 1,2 ;;
        *) echo "unknown planted bug $1" >&2; return 2 ;;
    esac
}
# One line from a run's verdict.json: "FAIL <checkers>", "ERROR <why>" or "PASS".
judge() {
    python3 - "$1" "$2" <<'EOF'
import json, os, sys
path, status = sys.argv[1], sys.argv[2]
if not os.path.isfile(path):
    print("ERROR no verdict.json (exit status %s): the build or the harness's setup failed" % status)
    sys.exit()
v = json.load(open(path))
faults = " ".join("%s=%s" % kv for kv in sorted(v.get("faults", {}).items()))
back = v.get("leader_returns") or {}
if back.get("returned") or back.get("not"):
    faults += " (old leader elected again %s of %s times)" % (back.get("returned", 0), back.get("returned", 0) + back.get("not", 0))
if v["status"] == "FAIL":
    named = ", ".join("%s (%d)" % kv for kv in sorted(v["violations"].items()))
    extra = "; also harness errors: %s" % "; ".join(v["harness_errors"]) if v["harness_errors"] else ""
    print("FAIL %s%s [faults: %s]" % (named, extra, faults))
elif v["status"] == "ERROR":
    why = list(v["harness_errors"]) + ["%s lacks %s" % (k, "; ".join(m)) for k, m in sorted(v["missing"].items())]
    print("ERROR %s [faults: %s]" % (" | ".join(why), faults))
else:
    print("PASS [faults: %s]" % faults)
EOF
}
for bug in "${bugs[@]}"; do
    schedule_for "$bug" >/dev/null  # an unknown name stops the script before any run
done
missed=0
mkdir -p /var/tmp/raftlock-chaos
for bug in "${bugs[@]}"; do
    schedule=$(schedule_for "$bug")
    caught=""
    for run in 1 2 3; do
        s=$((seed + run - 1))
        out="/var/tmp/raftlock-chaos/planted-$bug-$s"
        log="$out.log"
        # A verdict left by an earlier run of the same name must not count.
        rm -rf "$out"
        status=0
        # shellcheck disable=SC2086 # $schedule is a list of arguments
        scripts/chaos.sh --planted "$bug" --duration "$duration" --seed "$s" $schedule \
            --out "$out" >"$log" 2>&1 || status=$?
        verdict=$(judge "$out/verdict.json" "$status") || verdict="ERROR unreadable verdict.json"
        case "$verdict" in
            FAIL*)
                echo "$bug: CAUGHT in run $run (seed $s) by: ${verdict#FAIL }"
                caught=yes
                break ;;
            ERROR*) echo "$bug: run $run (seed $s): not counted, ${verdict#ERROR }; see $log" ;;
            *) echo "$bug: run $run (seed $s) passed: not caught ${verdict#PASS }" ;;
        esac
    done
    if [ -z "$caught" ]; then
        echo "$bug: NOT CAUGHT in 3 runs"
        missed=$((missed + 1))
    fi
done
exit $((missed > 0))
