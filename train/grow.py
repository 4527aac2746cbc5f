#!/usr/bin/env python3
"""Grow a train.py state to a deeper preset without changing what it computes.

Usage:  grow.py STATE_IN STATE_OUT [--preset h128x8] [--tok models/pic-qa]

Run L10 (session 9): L9's step-7,400 state (h128x4) grown to h128x8 and resumed
with train.py (train/README.md):

    .venv-oracle/bin/python train/grow.py train/run/L9/snap/t124211.pt train/run/L10/state.pt

The new preset's first layers take the old state's layers as they are; each
added layer is a copy of the old layer of the same type at the same position in
its 3:1 group (its weights a trained starting point) with its residual outputs
zeroed (GDN out_proj, attention o_proj, MLP down_proj), so the grown model's
logits equal the old model's (checked here) and training starts from the old
accuracy with the new layers' capacity (a second attention layer: one to find
the key, one to read the value).  AdamW moments of the old parameters carry
over; the added ones start at zero.  The state's step, item and schedule
continue; its preset becomes the new one.
"""
import argparse
import copy
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ckpt     # noqa: E402

ZEROED = ("linear_attn.out_proj.weight", "self_attn.o_proj.weight", "mlp.down_proj.weight")


def grow_state_dict(old_sd, n_old, n_new):
    """old_sd of n_old layers -> a state dict of n_new layers (a multiple of n_old,
    the layer types repeated): layers < n_old copied, layer j >= n_old a copy of
    layer j % n_old (same type) with its ZEROED outputs set to zero."""
    import torch
    new = {}
    for k, v in old_sd.items():
        m = re.match(r"model\.layers\.(\d+)\.(.*)", k)
        if not m:
            new[k] = v.clone()
            continue
        i, rest = int(m.group(1)), m.group(2)
        for j in range(i, n_new, n_old):
            x = v.clone()
            if j >= n_old and rest in ZEROED:
                x = torch.zeros_like(v)
            new["model.layers.%d.%s" % (j, rest)] = x
    return new


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("state_in")
    ap.add_argument("state_out")
    ap.add_argument("--preset", default="h128x8")
    ap.add_argument("--tok", default=os.path.join(ckpt.ROOT, "models", "pic-qa"),
                    help="a release whose tokenizer the state's model uses")
    a = ap.parse_args(argv)

    import torch
    import train
    s = torch.load(a.state_in, weights_only=False, map_location="cpu")
    old_preset = s["st"].get("preset", ckpt.LEGACY_PRESET)
    ckpt.use_preset(old_preset)
    old = train.make_model(ckpt.text_config_dict(a.tok), 0)
    old.load_state_dict(s["model"])
    n_old = len(ckpt.PRESET["layer_types"])
    old_types = list(ckpt.PRESET["layer_types"])

    ckpt.use_preset(a.preset)
    new_types = list(ckpt.PRESET["layer_types"])
    n_new = len(new_types)
    if n_new % n_old or new_types != old_types * (n_new // n_old):
        sys.exit("grow: %s's layer types are not %s's repeated" % (a.preset, old_preset))
    for k in ("H", "Hq", "Hkv", "hd", "Hk", "Hv", "dk", "dv", "I"):
        if ckpt.PRESETS[old_preset][k] != ckpt.PRESET[k]:
            sys.exit("grow: %s differs from %s in %s" % (a.preset, old_preset, k))
    new = train.make_model(ckpt.text_config_dict(a.tok), 0)
    new.load_state_dict(grow_state_dict(s["model"], n_old, n_new), strict=True)
    new.tie_weights()

    # the grown model computes what the old one did
    ids = torch.randint(0, old.config.vocab_size, (1, 96), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        lo, ln = old(ids).logits, new(ids).logits
    err = (lo - ln).abs().max().item()
    print("grow: %s (%d layers) -> %s (%d layers): max |logit diff| %.2e"
          % (old_preset, n_old, a.preset, n_new, err))
    if err > 1e-4:
        sys.exit("grow: the grown model does not compute the old one's logits")

    # AdamW moments by parameter name: old ones carry over, new ones start empty
    old_names = [n for n, _ in old.named_parameters()]
    new_names = [n for n, _ in new.named_parameters()]
    opt = torch.optim.AdamW(new.parameters(), lr=s["opt"]["param_groups"][0]["lr"],
                            betas=(0.9, 0.95), weight_decay=s["opt"]["param_groups"][0]["weight_decay"])
    osd = opt.state_dict()
    idx = {n: i for i, n in enumerate(old_names)}
    carried = 0
    for j, n in enumerate(new_names):
        i = idx.get(n)
        if i is not None and i in s["opt"]["state"]:
            osd["state"][j] = copy.deepcopy(s["opt"]["state"][i])
            carried += 1
    opt.load_state_dict(osd)
    st = dict(s["st"], preset=a.preset, grown_from=old_preset, grown_at=s["st"]["step"])
    torch.save({"model": new.state_dict(), "opt": opt.state_dict(), "st": st}, a.state_out)
    print("grow: wrote %s (step %d; AdamW moments of %d of %d parameters carried)"
          % (a.state_out, st["step"], carried, len(new_names)))


if __name__ == "__main__":
    main()
