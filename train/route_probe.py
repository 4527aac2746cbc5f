#!/usr/bin/env python3
"""route_probe.py — which layers carry the answer to the position that predicts it
(issue 11, train/README "Session 24"): the token-mixer outputs (Gated DeltaNet or
attention) of a set of layers are zeroed at that position only, and the first answer
token is predicted again; per set, how many held-out single-hop items greedy decoding
answers right keep their first token right (and how many it answers wrong get it).
A set whose zeroing keeps the right answers is not where the lookup happens.

    .venv-oracle/bin/python -m train.route_probe models/pic-qa --zero 3,7 --zero 0,1,2
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

from train import tasks   # noqa: E402


def first_tokens(model, tok, items, zero):
    """[argmax of the first answer token] of items with the mixers of the layers in
    `zero` zeroed at the last prompt position (route.RouteDrop's hooks)."""
    import torch
    from train import route
    drop = route.RouteDrop(model, zero, 1.0)
    out = []
    try:
        for it in items:
            ids = tok.encode(tasks.prompt_text(it)).ids
            drop.mask = torch.zeros(1, len(ids), 1)
            drop.mask[0, -1] = 1.0
            with torch.no_grad():
                out.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    finally:
        drop.remove()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("--zero", action="append", default=[],
                    help="a comma-separated set of layers to zero together (repeatable)")
    ap.add_argument("--first", type=int, default=0, help="first held-out seed")
    ap.add_argument("--n", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    from train import heldout
    from train import train
    model, tok, eos = heldout.load(a.ckpt, a.threads)
    items = [tasks.item("single", s, 0) for s in range(a.first, a.first + a.n)]
    ok = [tasks.answer_ok(train.greedy_text(model, tok, tok.encode(tasks.prompt_text(it)).ids,
                                            eos, 16), it["answer"]) for it in items]
    gold = [tok.encode(it["answer"]).ids[0] for it in items]
    rows = {}
    for z in [""] + a.zero:
        layers = [int(x) for x in z.split(",") if x]
        got = first_tokens(model, tok, items, layers)
        right = [g == t for g, t in zip(got, gold)]
        rows[z or "none"] = {
            "answered_right_keep": "%d/%d" % (sum(r for r, o in zip(right, ok) if o), sum(ok)),
            "answered_wrong_get": "%d/%d" % (sum(r for r, o in zip(right, ok) if not o),
                                             len(ok) - sum(ok))}
    print(json.dumps({"ckpt": a.ckpt, "first": a.first, "n": a.n, "zeroed": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
