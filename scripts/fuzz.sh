#!/usr/bin/env bash
# Replays the saved reproducers of each libFuzzer harness of tests/fuzz, runs it for SECONDS
# over a copy of its seed corpus, then prints the executions and speed of each. Used by
# `make fuzz` and `make fuzz-smoke`.
#   scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]
# The copies, grown by what the fuzzer finds, are kept in BUILD_DIR/fuzz/<harness>/corpus; a
# crash, leak, timeout or out-of-memory input is written to BUILD_DIR/fuzz/<harness>/ and makes
# the script fail (after every harness has run). Save reproducers worth keeping under
# tests/fuzz/regressions/<harness>/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]}
shift 2
harnesses=("$@")
if ((${#harnesses[@]} == 0)); then
  harnesses=(wire_fuzz kernel_validation_fuzz store_fuzz request_fuzz tenancy_fuzz resident_fuzz)
fi
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:external_symbolizer_path=$symbolizer"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:external_symbolizer_path=$symbolizer"

failed=()
summary=()
for h in "${harnesses[@]}"; do
  binary="$build/tests/fuzz/$h"
  work="$build/fuzz/$h"
  mkdir -p "$work/corpus"
  cp -n tests/fuzz/corpus/"$h"/* "$work/corpus/" 2>/dev/null || true
  log="$work/last-run.log"
  limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$work/")
  echo "== $h: replaying tests/fuzz/regressions/$h, then ${seconds}s over" \
    "$(ls "$work/corpus" | wc -l) inputs"
  status=0
  # The reproducers stay out of the corpus: a few large ones would raise libFuzzer's input
  # size limit (the largest input) and slow every mutation.
  if [[ -d tests/fuzz/regressions/$h ]]; then
    "$binary" -runs=0 "${limits[@]}" tests/fuzz/regressions/"$h" >"$log" 2>&1 || status=$?
  fi
  if ((status == 0)); then
    "$binary" -max_total_time="$seconds" -print_final_stats=1 "${limits[@]}" "$work/corpus" \
      >"$log" 2>&1 || status=$?
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  summary+=("$(printf '%-24s %10s runs %8s exec/s  %s' "$h" "${runs:-?}" "${speed:-?}" \
    "$( ((status == 0)) && echo ok || echo "FAILED (exit $status), see $log")")")
  if ((status != 0)); then
    failed+=("$h")
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|artifact_prefix|Test unit written)' "$log" |
      head -20 || true
  fi
done
echo
printf '%s\n' "${summary[@]}"
if ((${#failed[@]} > 0)); then
  echo "fuzz: failures in ${failed[*]}" >&2
  exit 1
fi
