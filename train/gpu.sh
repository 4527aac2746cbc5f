#!/usr/bin/env bash
# train/gpu.sh — one call of training on a lent GPU machine (issue 11), run THERE
# from the repository root by the `device` tool; train/README.md "On a lent GPU".
#
#   bash train/gpu.sh MINUTES [train.py arguments ...]
#
# Starts from the committed release (models/pic-qa), grown to $PRESET first when
# that is another size (train/grow.py: same logits; PRESET defaults to the
# committed model's own: PRESET=h256x12 grows h256x8 one 3:1 group deeper),
# trains MINUTES with the arguments of GPU_ARGS below plus the ones given (later
# ones win), and leaves under $OUT (at most 8 files, 16 MiB each, the device
# tool's limits):
#   final.tar.part-NN  the release of the state at the end (config, weights,
#           train_state, log), as final/ in a tar cut into 15 MiB parts
#   best.tar.part-NN   best/: model.safetensors + train_state.json of train.py's
#           release (best held-out evaluation of the run), when one was written
#   train.log  what train.py printed
# Unpack here: cat FILES_AT/final.tar.part-* | tar -xf - -C DIR (makes DIR/final/).
# Carried (ignored paths, `carry`): .whl (the transformers wheel of
# scripts/fixtures.sh's version: the machine's is older) and .gpu/prose.txt (the
# prose corpus of this machine's Python, `python3 train/tasks.py --dump-prose
# .gpu/prose.txt`: the device's Python has other docstrings, so other items).
# DEVICE=cpu runs the same on this machine (a check of the script, not training).
set -euo pipefail
cd "$(dirname "$0")/.."

MIN=${1:?usage: train/gpu.sh MINUTES [train.py arguments]}
shift
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
RUN=.gpu/run
OUT=${OUT:-.gpu/out}

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
[ -f .gpu/prose.txt ] || { echo "gpu.sh: .gpu/prose.txt missing (carry it)" >&2; exit 2; }
export PIC_PROSE=$PWD/.gpu/prose.txt PYTHONUNBUFFERED=1
# h256x8 at 65,536-token batches of consecutive items (~150 k right-padded positions)
# ran out of the H100's 80 GB; 32,768 (~75 k positions) fit: ~125 k tokens/s at 3.8
# steps/s (h128x8 at 65,536 ran 3.2: the step time hardly follows the batch; session
# 15).  --group 8 batches items of near-equal length (~1.1 positions per token), so
# 65,536 tokens are ~75 k positions again; a step that runs out of memory splits into
# micro-batches (train.py --micro) instead of failing.
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}

mkdir -p "$RUN/release" "$OUT"
cp models/pic-qa/tokenizer.json models/pic-qa/tokenizer_config.json \
   models/pic-qa/train_log.jsonl "$RUN/release/"     # the lineage's log goes on
have=$("$PY" -c "import json; print(json.load(open('models/pic-qa/train_state.json'))['state'].get('preset', 'h256x8'))")
PRESET=${PRESET:-$have}
if [ ! -f "$RUN/state.pt" ]; then
  if [ "$have" != "$PRESET" ]; then
    "$PY" -m train.grow models/pic-qa "$RUN/state.pt" --preset "$PRESET"
  else
    cp models/pic-qa/* "$RUN/release/"
    RESUME=--resume-from-release
  fi
fi

# run L11's recipe (train/README.md) on item stream 2 (stream 1 never trained the
# mix's tool items: session 16), on run R1's mix (hard confusions, agent rounds that
# ask first: session 20); the cosine fitted to the measured step rate
GPU_ARGS=(--device "$DEVICE" --workers 12 --threads 4 --stream 2 --level 1 --max-level 1
  --promote-on digits --promote 0.85 --mix hard,rounds,single,tool --follow 8
  --q-w 0.5 --lm-w 0 --dense-frac 0.25 --dense-shape line,sep --raw-eval-n 0
  --batch-tokens 65536 --group 8 --lr 1.5e-3 --lr-min 1e-4 --warmup 100
  --decay-minutes "$(awk "BEGIN { print $MIN * 0.9 }")"
  --eval-level 0 --eval-tasks single,distract,tool --eval-n 100
  --eval-every "$(awk "BEGIN { print $MIN / 3.2 }")" --log-every 40 --seed 1234)

"$PY" -m train.train --run "$RUN" --out "$RUN/release" --minutes "$MIN" \
  "${GPU_ARGS[@]}" ${RESUME:-} "$@" 2>&1 | grep -v "falling back to its reference" | tee "$OUT/train.log"

rm -rf "$RUN/out"
mkdir -p "$RUN/out/best" "$RUN/out/final"
if [ -f "$RUN/release/model.safetensors" ]; then
  cp "$RUN/release/model.safetensors" "$RUN/release/train_state.json" "$RUN/out/best/"
fi
"$PY" -m train.release "$RUN/state.pt" "$RUN/final" --like "$RUN/release" 2>&1 \
  | grep -v "falling back to its reference"
for f in config.json generation_config.json model.safetensors train_state.json train_log.jsonl; do
  cp "$RUN/final/$f" "$RUN/out/final/"
done
# each folder as one tar cut into 15 MiB parts: a deeper model's weights (h256x12,
# ~20 MB) are over the 16 MiB a returned file may have, and the parts stay within
# its 8 files; here: cat final.tar.part-* | tar -xf - -C DIR
for d in final best; do
  tar -cf - -C "$RUN/out" "$d" | split -b 15M -d - "$OUT/$d.tar.part-"
done
ls -la "$OUT"
tar -tvf <(cat "$OUT"/final.tar.part-*)
