#!/usr/bin/env python3
"""Grow a train.py state to a deeper or wider preset without changing what it computes.

Usage:  grow.py STATE_IN STATE_OUT [--preset h128x8] [--tok models/pic-qa] [--seed 0]

STATE_IN is a train.py state (state.pt) or a release checkpoint directory
(models/pic-qa: its weights and train_state.json counters, no AdamW moments).

Run L10 (session 9): L9's step-7,400 state (h128x4) grown to h128x8 and resumed
with train.py (train/README.md):

    .venv-oracle/bin/python -m train.grow train/run/L9/snap/t124211.pt train/run/L10/state.pt

The new preset's first layers take the old state's layers as they are; each
added layer is a copy of the old layer of the same type at the same position in
the old model's last 3:1 group (its weights a trained starting point, trained on
the residual stream that high up) with its residual outputs
zeroed (GDN out_proj, attention o_proj, MLP down_proj), so the grown model's
logits equal the old model's (checked here) and training starts from the old
accuracy with the new layers' capacity (a second attention layer: one to find
the key, one to read the value).  AdamW moments of the old parameters carry
over; the added ones start at zero.  The state's step, item and schedule
continue; its preset becomes the new one.

Deeper by one group (h256x8 -> h256x12, a third attention layer; session 19):

    .venv-oracle/bin/python -m train.grow train/run/W6/state.pt train/run/D1/state.pt --preset h256x12

Ungrouped (more key-value heads, the same query heads: each new KV head a
copy of the one its query heads shared, so repeat_kv hands every query head
the same keys and values as before; exact; AdamW moments copied alike; the
step 22,818 release to h256x8k, session 22):

    .venv-oracle/bin/python -m train.grow models/pic-qa train/run/K1/state.pt --preset h256x8k

Wider (same layer types, larger H / heads / I; the step 11,353 release grown
from h128x8 to h256x8 for a lent GPU, train/README.md):

    .venv-oracle/bin/python -m train.grow models/pic-qa train/run/W1/state.pt --preset h256x8

The old weights become the leading block of every new tensor (old heads first,
old residual and MLP units first); the new residual units start at zero: the
embedding's new columns and every residual output's new rows are zero, as are
the residual outputs' columns of the new heads and MLP units, so nothing new
reaches the residual stream yet.  The new units' inputs (new columns of every
projection that reads the residual stream, the new heads' and units' rows) are
a fresh model's initialisation: they see zeros now and carry the gradient that
grows the new units.  The zero-centred RMSNorms over H keep their outputs: the
mean of x^2 over twice the units, half of them zero, is half the old one, so
(1 + w) is scaled by sqrt(H_old / H_new).  AdamW moments restart (their shapes
changed); the logits equal the old ones up to the norms' eps (checked).
"""
import argparse
import copy
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

from train import ckpt     # noqa: E402

ZEROED = ("linear_attn.out_proj.weight", "self_attn.o_proj.weight", "mlp.down_proj.weight")


def type_period(types):
    """The length of the shortest group the layer types repeat ([L, L, L, F] x 2: 4)."""
    n = len(types)
    return next(p for p in range(1, n + 1) if n % p == 0 and types == types[:p] * (n // p))


def grow_source(j, n_old, g):
    """The old layer whose copy is new layer j: j itself below n_old, else the one of
    the same place in the old model's last group of g layers (the same type, and
    weights trained on the residual stream that high up)."""
    return j if j < n_old else n_old - g + (j - n_old) % g


def grow_state_dict(old_sd, n_old, n_new, g):
    """old_sd of n_old layers (types repeating with period g) -> a state dict of
    n_new layers (n_old plus whole groups): layers < n_old copied, layer j >= n_old
    a copy of layer grow_source(j) with its ZEROED outputs set to zero."""
    import torch
    new = {}
    for k, v in old_sd.items():
        m = re.match(r"model\.layers\.(\d+)\.(.*)", k)
        if not m:
            new[k] = v.clone()
            continue
        i, rest = int(m.group(1)), m.group(2)
        for j in range(n_new):
            if grow_source(j, n_old, g) != i:
                continue
            x = v.clone()
            if j >= n_old and rest in ZEROED:
                x = torch.zeros_like(v)
            new["model.layers.%d.%s" % (j, rest)] = x
    return new


# which axis of a (per-layer) tensor is which dimension; "H" the residual stream.
# "-": an axis that keeps its size.  ZEROED (above) are the residual outputs.
WIDTH_AXES = {
    "embed_tokens.weight": ("V", "H"),
    "norm.weight": ("Hnorm",),
    "input_layernorm.weight": ("Hnorm",),
    "post_attention_layernorm.weight": ("Hnorm",),
    "linear_attn.in_proj_qkv.weight": ("gdn_qkv", "H"),
    "linear_attn.in_proj_z.weight": ("gdn_v", "H"),
    "linear_attn.in_proj_b.weight": ("gdn_h", "H"),
    "linear_attn.in_proj_a.weight": ("gdn_h", "H"),
    "linear_attn.conv1d.weight": ("gdn_qkv", "-", "-"),
    "linear_attn.dt_bias": ("gdn_h",),
    "linear_attn.A_log": ("gdn_h",),
    "linear_attn.norm.weight": ("-",),
    "linear_attn.out_proj.weight": ("H", "gdn_v"),
    "self_attn.q_proj.weight": ("attn_q", "H"),
    "self_attn.k_proj.weight": ("attn_kv", "H"),
    "self_attn.v_proj.weight": ("attn_kv", "H"),
    "self_attn.o_proj.weight": ("H", "attn_o"),
    "self_attn.q_norm.weight": ("-",),
    "self_attn.k_norm.weight": ("-",),
    "mlp.gate_proj.weight": ("I", "H"),
    "mlp.up_proj.weight": ("I", "H"),
    "mlp.down_proj.weight": ("H", "I"),
}
WIDTH_ZERO_NEW = ("embed_tokens.weight",) + ZEROED     # everything outside the old block is 0


def width_index(axis, o, n):
    """New indices of the old entries along axis (o, n: old and new preset dims);
    None: the axis keeps its size."""
    import torch
    ar = torch.arange
    if axis in ("H", "Hnorm"):
        return ar(o["H"])
    if axis == "attn_q":                 # per head [query hd | gate hd], head-major
        return ar(o["Hq"] * o["hd"] * 2)
    if axis == "attn_kv":
        return ar(o["Hkv"] * o["hd"])
    if axis == "attn_o":
        return ar(o["Hq"] * o["hd"])
    if axis == "gdn_qkv":                # [q Hk*dk | k Hk*dk | v Hv*dv], each head-major
        qk = o["Hk"] * o["dk"]
        return torch.cat([ar(qk), n["Hk"] * n["dk"] + ar(qk),
                          2 * n["Hk"] * n["dk"] + ar(o["Hv"] * o["dv"])])
    if axis == "gdn_v":
        return ar(o["Hv"] * o["dv"])
    if axis == "gdn_h":
        return ar(o["Hv"])
    if axis == "I":
        return ar(o["I"])
    return None


def widen_state_dict(old_sd, fresh_sd, o, n):
    """old_sd of preset dims o -> a state dict of the wider dims n (same layer
    types); fresh_sd a fresh model of dims n (the new entries' initialisation)."""
    import torch
    s = math.sqrt(o["H"] / n["H"])
    new = {}
    for k, fresh in fresh_sd.items():
        rest = re.sub(r"^model\.(layers\.\d+\.)?", "", k)
        if k == "lm_head.weight":
            continue
        axes = WIDTH_AXES.get(rest)
        if axes is None or k not in old_sd:
            sys.exit("grow: no width rule for %s" % k)
        old = old_sd[k].float()
        if "Hnorm" in axes:                  # zero-centred: (1 + w) * s - 1
            x = torch.full_like(fresh, s - 1.0)
            x[:old.shape[0]] = (1.0 + old) * s - 1.0
            new[k] = x
            continue
        x = torch.zeros_like(fresh) if rest in WIDTH_ZERO_NEW else fresh.clone().float()
        # the old block, scattered axis by axis into the new size, with its mask
        block, mask = old, torch.ones(old.shape, dtype=torch.bool)
        for d, axis in enumerate(axes):
            ix = width_index(axis, o, n)
            if ix is None:
                if old.shape[d] != x.shape[d]:
                    sys.exit("grow: %s axis %d changes size without a rule" % (k, d))
                continue
            shp = list(block.shape)
            shp[d] = x.shape[d]
            block = torch.zeros(shp, dtype=block.dtype).index_copy_(d, ix, block)
            mask = torch.zeros(shp, dtype=torch.bool).index_copy_(d, ix, mask)
        new[k] = torch.where(mask, block, x)
    return new


KV_ROWS = ("self_attn.k_proj.weight", "self_attn.v_proj.weight")


def ungroup_index(o, n):
    """Old rows of each new KV-projection row when Hkv grows from o's to n's
    (query heads unchanged): new KV head j is old head j // (n_Hkv / o_Hkv)."""
    import torch
    r = n["Hkv"] // o["Hkv"]
    heads = torch.arange(n["Hkv"]) // r
    return (heads[:, None] * o["hd"] + torch.arange(o["hd"])[None, :]).reshape(-1)


def ungroup_tensor(name, t, ix):
    """t (a parameter or a moment of it) with its KV rows copied by ix."""
    rest = re.sub(r"^model\.layers\.\d+\.", "", name)
    return t.index_select(0, ix).clone() if rest in KV_ROWS else t.clone()


def load_any(path, tok):
    """(model state dict, st counters, opt state or None) of a train.py state or a
    release checkpoint directory."""
    import torch
    from train import train
    if os.path.isdir(path):
        with open(os.path.join(path, "train_state.json")) as f:
            rel = json.load(f)
        st = dict(rel["state"])
        st.setdefault("level", rel.get("level", 0))
        ckpt.use_preset(st.get("preset", ckpt.LEGACY_PRESET))
        m = train.make_model(ckpt.text_config_dict(tok), 0)
        ckpt.load_weights(m, path)
        return m.state_dict(), st, None
    s = torch.load(path, weights_only=False, map_location="cpu")
    return s["model"], s["st"], s["opt"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("state_in")
    ap.add_argument("state_out")
    ap.add_argument("--preset", default="h128x8")
    ap.add_argument("--tok", default=os.path.join(ckpt.ROOT, "models", "pic-qa"),
                    help="a release whose tokenizer the state's model uses")
    ap.add_argument("--seed", type=int, default=0,
                    help="initialisation of the new entries when widening")
    a = ap.parse_args(argv)

    import torch
    from train import train
    old_sd, old_st, old_opt = load_any(a.state_in, a.tok)
    old_preset = old_st.get("preset", ckpt.LEGACY_PRESET)
    ckpt.use_preset(old_preset)
    o = dict(ckpt.PRESET)
    old = train.make_model(ckpt.text_config_dict(a.tok), 0)
    old.load_state_dict(old_sd)
    n_old = len(o["layer_types"])
    old_types = list(o["layer_types"])

    ckpt.use_preset(a.preset)
    n = dict(ckpt.PRESET)
    new_types = list(n["layer_types"])
    n_new = len(new_types)
    widths = ("H", "Hq", "Hkv", "hd", "Hk", "Hv", "dk", "dv", "I")
    wider = [k for k in widths if o[k] != n[k]]
    new = train.make_model(ckpt.text_config_dict(a.tok), a.seed)
    ungroup = wider == ["Hkv"] and n["Hkv"] % o["Hkv"] == 0 and new_types == old_types
    if ungroup:
        ix = ungroup_index(o, n)
        new.load_state_dict({k: ungroup_tensor(k, v, ix) for k, v in old_sd.items()},
                            strict=True)
    elif wider:
        if new_types != old_types:
            sys.exit("grow: widening keeps the layer types (%s has other ones)" % a.preset)
        if any(n[k] < o[k] for k in wider) or n["hd"] != o["hd"] or n["dk"] != o["dk"] \
                or n["dv"] != o["dv"] or n["Hq"] // n["Hkv"] != o["Hq"] // o["Hkv"] \
                or n["Hv"] // n["Hk"] != o["Hv"] // o["Hk"]:
            sys.exit("grow: %s is not a widening of %s (more heads of the same size, "
                     "the same grouping, larger H and I)" % (a.preset, old_preset))
        new.load_state_dict(widen_state_dict(old_sd, new.state_dict(), o, n), strict=False)
    else:
        g = type_period(old_types)
        if n_new <= n_old or (n_new - n_old) % g or \
                new_types != [old_types[grow_source(j, n_old, g)] for j in range(n_new)]:
            sys.exit("grow: %s's layer types are not %s's plus whole groups of %s"
                     % (a.preset, old_preset, old_types[:g]))
        new.load_state_dict(grow_state_dict(old_sd, n_old, n_new, g), strict=True)
    new.tie_weights()

    # the grown model computes what the old one did
    ids = torch.randint(0, old.config.vocab_size, (1, 96), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        lo, ln = old(ids).logits, new(ids).logits
    err = (lo - ln).abs().max().item()
    # widening moves the norms' eps against a halved mean square: relative 1e-4
    tol = 1e-4 * (lo.abs().max().item() if wider and not ungroup else 1.0)
    print("grow: %s (%d layers) -> %s (%d layers): max |logit diff| %.2e (max |logit| %.1f)"
          % (old_preset, n_old, a.preset, n_new, err, lo.abs().max().item()), flush=True)
    if err > tol:
        sys.exit("grow: the grown model does not compute the old one's logits")

    # AdamW moments by parameter name: old ones carry over, new ones start empty
    old_names = [n for n, _ in old.named_parameters()]
    new_names = [n for n, _ in new.named_parameters()]
    pg = old_opt["param_groups"][0] if old_opt else {"lr": 1e-3, "weight_decay": 0.01}
    opt = torch.optim.AdamW(new.parameters(), lr=pg["lr"], betas=(0.9, 0.95),
                            weight_decay=pg["weight_decay"])
    osd = opt.state_dict()
    idx = {nm: i for i, nm in enumerate(old_names)}
    carried = 0
    for j, nm in enumerate(new_names):
        i = idx.get(nm)
        if old_opt and (ungroup or not wider) and i is not None and i in old_opt["state"]:
            m = copy.deepcopy(old_opt["state"][i])
            if ungroup:
                m = {k: ungroup_tensor(nm, v, ix) if torch.is_tensor(v) and v.dim() else v
                     for k, v in m.items()}
            osd["state"][j] = m
            carried += 1
    opt.load_state_dict(osd)
    st = dict(old_st, preset=a.preset, grown_from=old_preset, grown_at=old_st["step"])
    os.makedirs(os.path.dirname(os.path.abspath(a.state_out)), exist_ok=True)
    torch.save({"model": new.state_dict(), "opt": opt.state_dict(), "st": st}, a.state_out)
    print("grow: wrote %s (step %d; AdamW moments of %d of %d parameters carried)"
          % (a.state_out, st["step"], carried, len(new_names)))


if __name__ == "__main__":
    main()
