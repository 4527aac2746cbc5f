#!/usr/bin/env python3
"""The weight average of release checkpoints of one lineage (a "model soup"):
every tensor the weighted mean of the same tensor in each, in f32, stored in
the first one's dtype; the other files copied from the first, its
train_state.json with a "soup" record of the ingredients.

    .venv-oracle/bin/python -m train.soup OUT models/pic-qa train/run/A1/rel \
        train/run/T1/rel=2

An ingredient may carry a weight (PATH=W, default 1).  Session 26: the mean
of fine-tunes that started from one release answers no better than the best
of them (train/README.md, "Session 26").
"""
import argparse
import json
import os
import shutil

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

WEIGHTS = "model.safetensors"
SKIP = {WEIGHTS, "pic_calibration.json"}   # the calibration is the ingredient's, not the soup's


def ingredients(specs):
    """[(path, weight)] of PATH[=W] arguments."""
    out = []
    for s in specs:
        path, _, w = s.partition("=")
        out.append((path, float(w) if w else 1.0))
    return out


def soup(out, parts):
    """Write the weighted mean of parts' weights (and the first's other files) to out."""
    sds = [load_file(os.path.join(p, WEIGHTS)) for p, _ in parts]
    keys = set(sds[0])
    for (p, _), sd in zip(parts, sds):
        if set(sd) != keys or any(sd[k].shape != sds[0][k].shape for k in keys):
            raise SystemExit(f"{p}: not the same tensors as {parts[0][0]}")
    total = sum(w for _, w in parts)
    mean = {k: (sum(w * sd[k].float() for (_, w), sd in zip(parts, sds)) / total)
            .to(sds[0][k].dtype).contiguous() for k in sorted(keys)}
    with safe_open(os.path.join(parts[0][0], WEIGHTS), "pt") as f:
        meta = f.metadata()
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(parts[0][0]):
        if name not in SKIP:
            shutil.copy(os.path.join(parts[0][0], name), out)
    save_file(mean, os.path.join(out, WEIGHTS), metadata=meta)
    state = os.path.join(out, "train_state.json")
    if os.path.exists(state):
        with open(state) as f:
            doc = json.load(f)
        doc["soup"] = [{"path": p, "weight": w} for p, w in parts]
        for k in ("heldout", "heldout_level", "heldout_n", "heldout_digit_acc"):
            doc.pop(k, None)              # measured on the first, not on this
        with open(state, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("parts", nargs="+", help="release directories, PATH or PATH=WEIGHT")
    a = ap.parse_args()
    soup(a.out, ingredients(a.parts))
    print(f"soup of {len(a.parts)} -> {a.out}")


if __name__ == "__main__":
    main()
