#!/usr/bin/env bash
# Runs every suite against the binaries in $BUILD, then the numerical suites
# again on every other SIMD path the CPU can run, and prints one closing line
#   N passed, M failed, K skipped (CPU: ...; SIMD paths: ...)
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
run_pytest() {  # tag ("" for the whole suite), environment ("" or VAR=value ...), pytest args...
  local tag=$1 envs=$2; shift 2
  local out="$LOG/pytest$tag"
  env $envs .venv/bin/python -m pytest -q -p no:cacheprovider --junitxml="$out.xml" "$@" \
    > "$out.log" 2>&1
  local p f s
  read -r p f s < <(.venv/bin/python - "$out.xml" <<'PY'
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
  if [ -z "$tag" ]; then
    tail -40 "$out.log"
  else
    printf '%-28s %3d passed %3d failed %3d skipped\n' "pytest$tag" "$p" "$f" "$s"
    [ "$f" -gt 0 ] && grep -E '^(FAILED|ERROR)' "$out.log" | head -20
  fi
  [ "$f" -gt 0 ] && failures+=("pytest$tag")
  return 0
}

echo "== integration tests (pytest)"
run_pytest "" "" tests/integration ${PYTEST_ARGS:-}

# --- the numerical suites on every other SIMD path this CPU can run ---
# The suites above ran on the path the engine picks here; a CI machine may
# pick another (AVX2 without AVX-512) and round differently, so the suites
# whose assertions are about rounding run once per path.  Each path runs
# with the BLAS kernels and GEMV order a CPU whose best path it is would
# get: avx2 as an AVX2-only AMD EPYC (OpenBLAS's Zen core = its Haswell
# kernels; one-tile GEMV), the others with this CPU's BLAS.
NUM_UNITS="test_kernels test_wmat test_forward test_forward_batch test_assemble test_entry test_exact_first"
NUM_PY="tests/integration/test_oracle.py tests/integration/test_weights.py
        tests/integration/test_device.py tests/integration/test_pic.py
        tests/integration/test_smollm2.py"
path_env() {  # path -> the environment that runs it
  case $1 in
    avx2) echo "PIC_SIMD=avx2 OPENBLAS_CORETYPE=Haswell PIC_GEMV_TILE=1";;
    *)    echo "PIC_SIMD=$1";;
  esac
}
all_paths=$("$BUILD/pic-engine" sysinfo --simd-paths 2>/dev/null || echo scalar)
default_path=${PIC_SIMD:-${all_paths%% *}}
ran_paths="$default_path"
if [ "${PIC_ONE_PATH:-0}" != 1 ]; then
  for path in $all_paths; do
    [ "$path" = "$default_path" ] && continue
    echo "== numerical suites on SIMD path $path ($(path_env "$path"))"
    for t in $NUM_UNITS; do
      [ -x "$BUILD/tests/$t" ] || continue
      run_tap "$t[$path]" env $(path_env "$path") "$BUILD/tests/$t"
    done
    # sanitized: the kernels' memory on every path (cmocka), the whole-model
    # numerics once (an ASan engine per path would double CI's time)
    [ "${ASAN:-0}" = 1 ] || run_pytest "[$path]" "$(path_env "$path")" $NUM_PY
    ran_paths="$ran_paths $path"
  done
fi
cpu=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*: *//')

echo
echo "logs: $LOG"
[ ${#failures[@]} -gt 0 ] && echo "failing suites: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped (CPU: ${cpu:-unknown}; SIMD paths: $ran_paths)"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
