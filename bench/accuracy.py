"""accuracy.py — answer accuracy of the trained model (models/pic-qa) under PIC (issue 11).

Held-out items of train/tasks.py (seeds below tasks.HELDOUT_SEEDS, never trained on)
are split into segments as a RAG / agent prompt is cached: the part before the first
document (system, tools, request), each document or tool turn, and the query tail
(question + generation prompt).  Each segment is tokenized alone.  `pic-lab run`
(bench/pic_lab.c) serves every item in every mode from the same segments:

  full      full recompute of the whole prompt (the reference)
  prefix    exact-prefix reuse
  naive     cached entries added without transition operators or seams
  pic w=W   PIC with seam width W in {0, 4, 8, 16, 32}

with f32 and bf16 entries, and decodes greedily.  Exact match: the greedy ids equal
the answer's ids followed by <|im_end|>.  Per task and mode: accuracy with a 95%
Wilson interval, and against full recompute the teacher-forced KL and argmax
agreement on the answer tokens and the first divergence of greedy decoding.

Summary keys (issue 11 goals): full_accuracy_single_hop, pic_points_below_full
(at the default seam 8, f32, over single + distract + tool), naive_points_below_full,
bf16_vs_f32_points (PIC w=8), multihop_full / multihop_pic.

Not done yet: the same items through nginx (the gateway's own segmentation and CDC
cuts); this benchmark drives the state engine directly.

Usage: make bench-accuracy [QUICK=1]   (PIC_ACC_MODEL=DIR, PIC_ACC_N=items per task)
"""
import json
import math
import os
import subprocess
import sys
import time

from common import PIC_LAB, QUICK, ROOT, machine, need_binary, table, write_results

sys.path.insert(0, os.path.join(ROOT, "train"))
import tasks  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

MODEL = os.environ.get("PIC_ACC_MODEL", os.path.join(ROOT, "models", "pic-qa"))
N = int(os.environ.get("PIC_ACC_N", "10" if QUICK else "50"))
LEVEL = int(os.environ.get("PIC_ACC_LEVEL", "0"))
WS = [8] if QUICK else [0, 4, 8, 16, 32]
DTYPES = ["f32"] if QUICK else ["f32", "bf16"]
DEFAULT_W = 8


def segments(it):
    """The prompt text of an item cut into cacheable pieces (concatenation = prompt)."""
    text = tasks.prompt_text(it)
    cuts = []
    if it["tools"] is None:
        # documents: "[k] " blocks of the last user message
        for k in range(1, len(it["docs"]) + 1):
            i = text.find("\n\n[%d] " % k)
            if i >= 0:
                cuts.append(i + 2)
        q = text.rfind("\n\nQuestion: ")
        if q >= 0:
            cuts.append(q + 2)
    else:
        # agent turns: each <|im_start|> after the system turn, last user turn = query
        i = text.find("<|im_start|>", 1)
        while i >= 0:
            cuts.append(i)
            i = text.find("<|im_start|>", i + 1)
        last_user = text.rfind("<|im_start|>user")
        cuts = [c for c in cuts if c <= last_user] or [text.rfind("<|im_start|>assistant")]
    cuts = sorted(set(c for c in cuts if 0 < c < len(text)))
    bounds = [0] + cuts + [len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def wilson(k, n, z=1.96):
    """95% Wilson interval of k successes out of n."""
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def run_task(tok, eos, task, dtype):
    """pic-lab over N held-out items of one task: {mode key: [per-item result]}."""
    docs, reqs, golds = [], [], []
    for s in range(N):
        it = tasks.item(task, s, LEVEL)
        segs = [tok.encode(x).ids for x in segments(it)]
        gold = tok.encode(it["answer"]).ids + [eos]
        base = len(docs)
        docs.extend(segs[:-1])
        reqs.append({"docs": list(range(base, len(docs))), "query": segs[-1],
                     "teacher": gold[:-1], "greedy": len(gold), "compare": True,
                     "ws": WS, "modes": ["full", "prefix", "naive", "pic"]})
        golds.append(gold)
    spec = {"ws": WS, "dtype": dtype, "whole": True, "docs": docs, "requests": reqs}
    p = subprocess.run([PIC_LAB, "run", "--model", MODEL, "--threads", "0"],
                       input=json.dumps(spec), stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    if p.returncode != 0:
        sys.exit("pic-lab run failed on %s/%s" % (task, dtype))
    out = json.loads(p.stdout)
    res = {}
    for rq, gold in zip(out["requests"], golds):
        for r in rq["runs"]:
            key = r["mode"] if r["mode"] in ("full", "prefix", "naive") else \
                "%s w=%d" % (r["mode"], r["w"])
            res.setdefault(key, []).append({
                "ok": r.get("greedy", [])[:len(gold)] == gold,
                "kl": r.get("kl_mean", 0.0), "agree": r.get("argmax_match", 1.0),
                "first_div": r.get("first_divergence", -1)})
    return res


def main():
    need_binary(PIC_LAB)
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        sys.exit("%s missing (the committed model: models/pic-qa)" % MODEL)
    tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    eos = next(a["id"] for a in json.load(open(os.path.join(MODEL, "tokenizer.json")))
               ["added_tokens"] if a["content"] == "<|im_end|>")
    info = machine()
    t0 = time.time()
    rows = []
    acc = {}
    for dtype in DTYPES:
        for task in tasks.TASKS:
            res = run_task(tok, eos, task, dtype)
            for key, rs in res.items():
                k = sum(r["ok"] for r in rs)
                lo, hi = wilson(k, len(rs))
                fd = [r["first_div"] for r in rs if r["first_div"] >= 0]
                row = {"dtype": dtype, "task": task, "mode": key, "n": len(rs),
                       "accuracy": k / len(rs), "ci_lo": lo, "ci_hi": hi,
                       "kl_mean": sum(r["kl"] for r in rs) / len(rs),
                       "argmax_agree": sum(r["agree"] for r in rs) / len(rs),
                       "diverged": len(fd)}
                rows.append(row)
                acc[(dtype, task, key)] = row["accuracy"]
    table(rows, ["dtype", "task", "mode", "n", "accuracy", "ci_lo", "ci_hi", "kl_mean",
                 "argmax_agree", "diverged"], title="exact-match accuracy (95% Wilson)")

    def pts(mode, dtype="f32", ts=("single", "distract", "tool")):
        return 100.0 * sum(acc[(dtype, t, "full")] - acc[(dtype, t, mode)] for t in ts) / len(ts)

    pic = "pic w=%d" % DEFAULT_W
    summary = {
        "full_accuracy_single_hop": acc[("f32", "single", "full")],
        "pic_points_below_full": pts(pic),
        "naive_points_below_full": pts("naive"),
        "prefix_points_below_full": pts("prefix"),
        "multihop_full": acc[("f32", "multihop", "full")],
        "multihop_pic": acc[("f32", "multihop", pic)],
    }
    if "bf16" in DTYPES:
        summary["bf16_vs_f32_points"] = 100.0 * sum(
            acc[("f32", t, pic)] - acc[("bf16", t, pic)]
            for t in ("single", "distract", "tool")) / 3
    config = {"model": os.path.relpath(MODEL, ROOT), "items_per_task": N, "level": LEVEL,
              "heldout_seeds": [0, N], "ws": WS, "dtypes": DTYPES, "default_w": DEFAULT_W,
              "seconds": round(time.time() - t0, 1)}
    write_results("accuracy", summary, config, info, rows=rows)


if __name__ == "__main__":
    main()
