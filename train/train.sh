#!/usr/bin/env bash
# `make train`: continue training the committed model (models/pic-qa/) on
# train/tasks.py.  Not part of CI.  Uses the oracle venv of scripts/fixtures.sh
# (torch + transformers from PyPI, pinned there; created here if missing).
# Arguments go to train/train.py (e.g. --minutes 120, --until 20:30, --threads 16).
# Resumes from train/run/state.pt when it exists (same machine), else from the
# release checkpoint's weights and counters (models/pic-qa/train_state.json).
set -euo pipefail
cd "$(dirname "$0")/.."

REQS=$(sed -n 's/^ORACLE_REQS=(\(.*\))$/\1/p' scripts/fixtures.sh)
if [ -n "${ORACLE_VENV:-}" ]; then
  VENV=$ORACLE_VENV
else
  VENV=.venv-oracle
fi
PY="$VENV/bin/python"
if ! "$PY" -c "import torch, transformers, tokenizers, safetensors, numpy" 2>/dev/null; then
  echo "train: creating $VENV ($REQS)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q --disable-pip-version-check $REQS
fi
exec nice -n "${NICE:-15}" "$PY" -m train.train --resume-from-release "$@"
