#!/usr/bin/env bash
# make fuzz-long: every libFuzzer target for a chosen time (outside CI).
#   scripts/fuzz-long.sh BUILD SECONDS
# The corpus of each target grows under BUILD/fuzz-corpus/NAME (seeded from
# tests/fuzz/corpus/NAME when it exists); crashes land in BUILD/fuzz-crashes/.
# Prints one line per target: executions, exec/s, corpus size, crashes.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; SECONDS_EACH=${2:-600}
mkdir -p "$BUILD/fuzz-crashes"
status=0
for t in "$BUILD"/fuzz/fuzz_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t"); corpus="$BUILD/fuzz-corpus/$name"; mkdir -p "$corpus"
  seeds=tests/fuzz/corpus/${name#fuzz_}
  log="$BUILD/fuzz-crashes/$name.log"
  "$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$BUILD/fuzz-crashes/$name-" "$corpus" \
       $( [ -d "$seeds" ] && echo "$seeds" ) > "$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(ls "$BUILD/fuzz-crashes/$name-"* 2>/dev/null | wc -l)
  printf '%-20s %12s execs %8s exec/s %6s corpus %3s crashes%s\n' "$name" "${execs:-?}" \
    "${rate:-?}" "$(ls "$corpus" | wc -l)" "$crashes" "$([ $rc -ne 0 ] && echo "  (rc $rc, see $log)")"
  [ $rc -eq 0 ] || status=1
done
exit $status
