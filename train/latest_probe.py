#!/usr/bin/env python3
"""latest_probe.py — a context where naive addition loses answers (issue 11): held-out
single-hop items (level 0, numeric answers, 2-3 documents) with the asked fact planted
again, with another value, at the end of every other document, so every document
answers the question.  The question names the same key for each, so which value the
model answers depends on more than the question's one lookup; `pic-lab run` (the
modes of bench/accuracy.py: full recompute, naive addition, PIC w=0 and 8, f32 entries,
the same segments) decodes each greedily, and the probe counts which document's value
each mode answered (first, middle, last document, or none) and how often naive and
PIC answer as full recompute does (tasks.answer_ok).  Needs build/pic-lab.

    .venv/bin/python -m train.latest_probe [--model models/pic-qa] [--n 150]
"""
import argparse
import collections
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from train import errors   # noqa: E402
from train import tasks    # noqa: E402


def probe_item(seed):
    """(item, [value of each document]) or None when the seed's single item does not fit
    (non-numeric answer, one document, the answer in two documents)."""
    it = tasks.item("single", seed, 0)
    ans = it["answer"]
    held = [i for i, d in enumerate(it["docs"]) if ans in d]
    if not ans.isdigit() or len(it["docs"]) < 2 or len(held) != 1:
        return None
    sent = errors.fact_sentence(it["docs"][held[0]], ans).strip().rstrip(".")
    r = random.Random(seed)
    docs, vals = [], []
    for i, d in enumerate(it["docs"]):
        v = ans if i == held[0] else str(r.randint(10 ** (len(ans) - 1), 10 ** len(ans) - 1))
        docs.append(d if i == held[0] else d + " " + sent.replace(ans, v) + ".")
        vals.append(v)
    u = it["messages"][-1]["content"]
    intro, q = u[:u.index("\n\n")], u[u.rindex("\n\nQuestion: ") + 2:]
    user = intro + "\n\n" + "\n\n".join("[%d] %s" % (i + 1, d) for i, d in enumerate(docs)) \
        + "\n\n" + q
    return dict(it, docs=docs, messages=it["messages"][:-1] + [
        {"role": "user", "content": user}]), vals


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "pic-qa"))
    ap.add_argument("--n", type=int, default=150)
    ap.add_argument("--build", default=os.environ.get("PIC_BUILD", "build"))
    a = ap.parse_args(argv)
    from bench import accuracy
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    eos = tok.token_to_id("<|im_end|>")
    vals, docs, reqs, seed = [], [], [], 0
    while len(vals) < a.n:
        p = probe_item(seed)
        seed += 1
        if p is None:
            continue
        segs = [tok.encode(x).ids for x in accuracy.segments(p[0])]
        base = len(docs)
        docs.extend(segs[:-1])
        reqs.append({"docs": list(range(base, len(docs))), "query": segs[-1], "teacher": [],
                     "greedy": 10, "compare": True, "ws": [0, 8],
                     "modes": ["full", "naive", "pic"]})
        vals.append(p[1])
    spec = {"ws": [0, 8], "dtype": "f32", "whole": True, "docs": docs, "requests": reqs}
    pr = subprocess.run([os.path.join(ROOT, a.build, "pic-lab"), "run", "--model", a.model,
                         "--threads", "1"], input=json.dumps(spec), capture_output=True, text=True)
    if pr.returncode != 0:
        sys.exit("pic-lab run failed: " + pr.stderr[-300:])
    picked = collections.defaultdict(collections.Counter)
    as_full = collections.Counter()
    for rq, vs in zip(json.loads(pr.stdout)["requests"], vals):
        ans = {}
        for run in rq["runs"]:
            g, m = run["greedy"], run["mode"]
            m = "pic w=%d" % run["w"] if m == "pic" else m
            ans[m] = tok.decode(g[:g.index(eos)] if eos in g else g)
            at = [i for i, v in enumerate(vs) if tasks.answer_ok(ans[m], v)]
            picked[m]["none" if not at else "last" if at[0] == len(vs) - 1
                      else "first" if at[0] == 0 else "middle"] += 1
        for m in ("naive", "pic w=0", "pic w=8"):
            as_full[m] += tasks.answer_ok(ans[m], ans["full"])
    print(json.dumps({"model": os.path.relpath(a.model, ROOT), "n": a.n, "seeds": [0, seed],
                      "picked": {m: dict(sorted(c.items())) for m, c in picked.items()},
                      "same_answer_as_full": dict(as_full)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
