#!/usr/bin/env bash
# Runs every suite against the binaries in $BUILD and prints one closing line
#   N passed, M failed, K skipped
# Exits non-zero on any failure.  Called by `make test` / `make test-asan`.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export PIC_BUILD=$BUILD
LOG=$BUILD/test-logs
rm -rf "$LOG"; mkdir -p "$LOG"
passed=0; failed=0; skipped=0; failures=()

if [ "${ASAN:-0}" = 1 ]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_odr_violation=0:abort_on_error=0:halt_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=0:suppressions=$PWD/tests/ubsan.supp}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}
fi

# --- C unit tests (cmocka, TAP output) ---
run_tap() {  # name, command...
  local name=$1; shift
  local out="$LOG/$name.tap"
  CMOCKA_MESSAGE_OUTPUT=TAP "$@" > "$out" 2>&1
  local rc=$?
  local p f s
  p=$(grep -E '^ok ' "$out" | grep -vc '# SKIP')
  s=$(grep -E '^(not )?ok .*# SKIP' "$out" | wc -l)
  f=$(grep -E '^not ok ' "$out" | grep -vc '# SKIP')
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # crashed before reporting
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  printf '%-28s %3d passed %3d failed %3d skipped\n' "$name" "$p" "$f" "$s"
  if [ "$f" -gt 0 ]; then failures+=("$name"); grep -E '^not ok|ERROR|error|Assert' "$out" | head -20; fi
}

echo "== C unit tests"
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  run_tap "$(basename "$t")" "$t"
done

echo "== CUDA"
if [ -x "$BUILD/tests/cuda_backend_ops" ]; then
  run_tap cuda_backend_ops "$BUILD/tests/cuda_backend_ops"
elif command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "cuda: no CUDA sources yet; compile check had nothing to compile"
else
  echo "cuda: nvcc not found: CUDA compile check skipped"; skipped=$((skipped + 1))
fi

echo "== fuzz smoke (libFuzzer, ${FUZZ_SECONDS:-5} s per target)"
for t in "$BUILD"/fuzz/fuzz_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t"); corpus="$LOG/$name-corpus"; mkdir -p "$corpus"
  seeds=tests/fuzz/corpus/${name#fuzz_}
  if "$t" -max_total_time="${FUZZ_SECONDS:-5}" -rss_limit_mb=2048 "$corpus" \
       $( [ -d "$seeds" ] && echo "$seeds" ) > "$LOG/$name.log" 2>&1; then
    passed=$((passed + 1)); printf '%-28s passed (%s)\n' "$name" "$(grep -o 'Done [0-9]* runs' "$LOG/$name.log" | tail -1)"
  else
    failed=$((failed + 1)); failures+=("$name"); tail -20 "$LOG/$name.log"
  fi
done

# --- integration tests (pytest: real nginx, pic-engine, redis-server) ---
echo "== integration tests (pytest)"
.venv/bin/python -m pytest tests/integration -q -p no:cacheprovider \
  --junitxml="$LOG/pytest.xml" ${PYTEST_ARGS:-} 2>&1 | tee "$LOG/pytest.log" | tail -40
read -r p f s < <(.venv/bin/python - "$LOG/pytest.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0, 1, 0); sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
k = sum(int(s.get("skipped", 0)) for s in suites)
print(t - f - k, f, k)
PY
)
passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
[ "$f" -gt 0 ] && failures+=("pytest")

echo
echo "logs: $LOG"
[ ${#failures[@]} -gt 0 ] && echo "failing suites: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
