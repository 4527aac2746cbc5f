#!/usr/bin/env bash
# train/gpu_prep.sh — make here what train/gpu.sh needs carried to a lent GPU
# machine (issue 11; train/README.md "On a lent GPU"): .whl/ with the transformers
# wheel of scripts/fixtures.sh's version (the machine has an older one and no
# network) and .gpu/prose.txt (this machine's prose corpus: the items equal the
# ones trained here).  Both ignored through .git/info/exclude.  Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

TRANSFORMERS=$(grep -o 'transformers==[0-9.]*' scripts/fixtures.sh)
EXCLUDE="$(git rev-parse --git-dir)/info/exclude"
mkdir -p "$(dirname "$EXCLUDE")"
for p in /.whl/ /.gpu/; do
  grep -qxF "$p" "$EXCLUDE" 2>/dev/null || echo "$p" >> "$EXCLUDE"
done
if ! ls .whl/"${TRANSFORMERS/==/-}"-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d .whl "$TRANSFORMERS"
fi
mkdir -p .gpu
python3 train/tasks.py --dump-prose .gpu/prose.txt
ls -la .whl .gpu/prose.txt
tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)   # one du: one total
carry=$(du -cb .whl .gpu/prose.txt | tail -1 | cut -f1)
awk -v t="$tree" -v c="$carry" 'BEGIN { printf "gpu_prep: tracked %.1f MiB + carried %.1f MiB = %.1f of the 64 MiB a device call takes\n", t/2^20, c/2^20, (t+c)/2^20 }'
echo "gpu_prep: carry .whl and .gpu/prose.txt; run: bash train/gpu.sh MINUTES"
