#!/usr/bin/env python3
"""binding_probe.py — how well a release checkpoint's residual stream names the
attribute of a planted fact (issue 11, train/README "Session 23"): a linear probe
(multinomial logistic regression, trained on 3/4 of the items, accuracy on the rest;
chance 1/12) of the attribute from the input of layer L at a position near each
planted value of held-out single-hop items, and of the asked attribute at the
position that predicts the answer (the lookup's query).  Positions: --at value (the
value's first token), before (the token before it), attr (the attribute's last
word in the fact sentence: the probe's own check, the attribute is there).

    .venv-oracle/bin/python -m train.binding_probe models/pic-qa --layer 7 --at value
"""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

from train import tasks   # noqa: E402


def collect(model, tok, n, layer, at):
    """([(hidden [H], attribute id, seed)] of planted values, [...] of answer positions)."""
    import torch
    attrs = [a for a, _ in tasks.ATTRS]
    keys, queries = [], []
    for seed in range(n):
        it = tasks.item("single", seed, 0)
        text = tasks.prompt_text(it)
        enc = tok.encode(text)
        with torch.no_grad():
            hs = model.model(input_ids=torch.tensor([enc.ids]),
                             output_hidden_states=True).hidden_states[layer][0]   # [L, H]
        tok_at = lambda c: min(j for j, (_, y) in enumerate(enc.offsets) if y > c)  # noqa: E731
        for v in [it["answer"]] + [v for _, v in it["qa"]]:
            m = list(re.finditer(r"(?<![\w-])%s(?![\w-])" % re.escape(v), text))
            if len(m) != 1:
                continue
            sent = text[max(0, text.rfind(".", 0, m[0].start() - 1)):m[0].start()]
            a = [i for i, x in enumerate(attrs) if x in sent]
            if len(a) != 1:
                continue
            if at == "attr":
                j = tok_at(text.rfind(attrs[a[0]], 0, m[0].start()) + len(attrs[a[0]]) - 1)
            else:
                j = tok_at(m[0].start()) - (at == "before")
            keys.append((hs[j], a[0], seed))
        q = re.search(r"Question: (.*)<\|im_end\|>", text).group(1)
        a = [i for i, x in enumerate(attrs) if x in q]
        if len(a) == 1:
            queries.append((hs[-1], a[0], seed))
    return keys, queries, len(attrs)


def probe(rows, k, steps=500):
    """(train n, test n, held-out accuracy) of a linear probe of rows' attribute."""
    import torch
    tr = [r for r in rows if r[2] % 4]
    te = [r for r in rows if r[2] % 4 == 0]
    x, y = torch.stack([r[0] for r in tr]), torch.tensor([r[1] for r in tr])
    mu, sd = x.mean(0), x.std(0) + 1e-5
    w = torch.zeros(x.shape[1], k, requires_grad=True)
    b = torch.zeros(k, requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy((x - mu) / sd @ w + b, y) + 1e-3 * (w ** 2).sum()
        loss.backward()
        opt.step()
    xt, yt = torch.stack([r[0] for r in te]), torch.tensor([r[1] for r in te])
    acc = float((((xt - mu) / sd @ w + b).argmax(-1) == yt).float().mean())
    return len(tr), len(te), round(acc, 3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("--layer", type=int, default=7, help="hidden_states index: the input of layer L")
    ap.add_argument("--at", default="value", choices=["value", "before", "attr"])
    ap.add_argument("--n", type=int, default=400, help="held-out single items, seeds [0, n)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    import json
    from train import heldout
    model, tok, _ = heldout.load(a.ckpt, a.threads)
    keys, queries, k = collect(model, tok, a.n, a.layer, a.at)
    print(json.dumps({"ckpt": a.ckpt, "layer": a.layer, "at": a.at, "n": a.n,
                      "facts": probe(keys, k), "question": probe(queries, k)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
