#!/usr/bin/env bash
# Fuzzes raftlock with cargo fuzz (libFuzzer): the RESP decoder (resp), every
# command with any arguments as replicas apply them (commands), the snapshot
# decoder (snapshot) and scripts in the Lua sandbox (script). The targets are
# in tests/fuzz (see its Cargo.toml and src/lib.rs for what each checks).
#
#   scripts/fuzz.sh                  # every target 15 s (scripts/test.sh runs this)
#   scripts/fuzz.sh resp 600         # one target, ten minutes
#   scripts/fuzz.sh all 3600         # every target, an hour each
#   scripts/fuzz.sh --record         # record the seed corpus again from the interop suite
#
# Every run first replays the inputs of crashes found and fixed
# (tests/fuzz/regressions/<target>/), then fuzzes from the committed seeds
# (tests/fuzz/corpus/<target>/, what the interop suite's clients sent) and
# the corpus earlier runs grew ($FUZZ_WORK/<target>, kept between runs).
# A crash stops the run with a non-zero status; its input is written to
# $FUZZ_WORK/artifacts/<target>/. Per target it prints
#   FUZZ <target> runs=<executions> seconds=<s> corpus=<inputs> result=ok|CRASH
#
# Needs cargo-fuzz (installed from crates.io if missing) and nightly compiler
# flags: the nightly toolchain if rustup has one, else stable with
# RUSTC_BOOTSTRAP=1. FUZZ_SANITIZER=address builds with AddressSanitizer
# (slower; the default, none, catches panics, overflows and hangs).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/raftlock-target}"
WORK="${FUZZ_WORK:-/var/tmp/raftlock-fuzz}"
TARGETS=(resp commands snapshot script)
SANITIZER="${FUZZ_SANITIZER:-none}"

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    CARGO=(cargo +nightly)
else
    export RUSTC_BOOTSTRAP=1
    CARGO=(cargo)
fi
if ! "${CARGO[@]}" fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz from crates.io" >&2
    cargo install cargo-fuzz --version 0.13.2 --locked >/dev/null
fi

if [ "${1:-}" = "--record" ]; then
    out="$PWD/tests/fuzz/corpus/requests"
    rm -rf "$out.new"
    INTEROP_RECORD="$out.new" INTEROP_TARGETS=single INTEROP_ONLY="redispy prl pottery node redlock rust cli" \
        tests/interop/run.sh
    if [ -z "$(ls -A "$out.new" 2>/dev/null)" ]; then
        echo "nothing was recorded (did the recording proxy start?); the seeds in $out are unchanged" >&2
        exit 1
    fi
    rm -rf "$out" && mv "$out.new" "$out"
    echo "recorded $(ls "$out" | wc -l) client connections into $out"
    # Keep the ones that reach code the others do not.
    "${CARGO[@]}" fuzz cmin --fuzz-dir tests/fuzz -s "$SANITIZER" commands "$out" -- -max_len=16384
    echo "kept $(ls "$out" | wc -l) of them"
    exit 0
fi

which="${1:-all}"
seconds="${2:-15}"
case "$which" in
    all) run=("${TARGETS[@]}") ;;
    resp|commands|snapshot|script) run=("$which") ;;
    *) echo "usage: $0 [all|resp|commands|snapshot|script] [seconds] | --record" >&2; exit 2 ;;
esac

# Every target (cargo fuzz build takes one or all).
"${CARGO[@]}" fuzz build --fuzz-dir tests/fuzz -s "$SANITIZER"

# Which committed seeds feed which target.
seeds() {
    case "$1" in
        resp|commands|snapshot) echo tests/fuzz/corpus/requests ;;
        script) echo tests/fuzz/corpus/scripts ;;
    esac
}

status=0
for t in "${run[@]}"; do
    mkdir -p "$WORK/$t" "$WORK/artifacts/$t"
    regressions=(tests/fuzz/regressions/"$t"/*)
    if [ -e "${regressions[0]}" ]; then
        if ! "${CARGO[@]}" fuzz run --fuzz-dir tests/fuzz -s "$SANITIZER" "$t" "${regressions[@]}" \
            -- -artifact_prefix="$WORK/artifacts/$t/" >"$WORK/$t.regressions.log" 2>&1; then
            echo "FUZZ $t: a fixed crash is back; see $WORK/$t.regressions.log" >&2
            tail -n 30 "$WORK/$t.regressions.log" >&2
            status=1
            continue
        fi
    fi
    log="$WORK/$t.log"
    start=$(date +%s)
    rc=0
    "${CARGO[@]}" fuzz run --fuzz-dir tests/fuzz -s "$SANITIZER" "$t" "$WORK/$t" "$(seeds "$t")" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
        -artifact_prefix="$WORK/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    corpus="$(ls "$WORK/$t" | wc -l)"
    if [ "$rc" -eq 0 ]; then
        echo "FUZZ $t runs=${runs:-0} seconds=$(($(date +%s) - start)) corpus=$corpus result=ok"
    else
        echo "FUZZ $t runs=${runs:-0} seconds=$(($(date +%s) - start)) corpus=$corpus result=CRASH (see $log)"
        grep -E "panicked|ERROR|SUMMARY|Test unit written" "$log" | head -n 8 >&2 || true
        status=1
    fi
done
exit "$status"
