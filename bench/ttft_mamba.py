"""bench/ttft_mamba.py — time to first token on a Mamba2 hybrid (the scalar transition
family, DESIGN.md 3.8) with every segment a cache hit, HYPIC's Fig. 12 shape.

Model: models/mid-granite-h (tests/tools/make_models.py preset, made when missing):
Granite 4.0-H layout, hidden 512, 8 layers LLLFLLLF, Mamba2 16 heads x 64, state 128, one
group (Granite-4.0-H-Tiny's per-head mixer shapes), bf16.  Workload: 16 segments of 1,024
deterministic random token ids + a 32-token query (16,416 tokens).  Every segment's PIC
entry (w = 8, bf16) is built first, alone, untimed; then one pic_assemble call per mode:
full recompute, and PIC (S <- (prod a) S + S|0 per Mamba2 layer and head, K/V re-rotated,
seams recomputed).  Also reports the entry's bytes (T is one bf16 number per head and
Mamba2 layer) and its break-even length L* (docs/SIZING.md).

QUICK=1: 4 segments of 256 tokens.
"""
import json
import os
import subprocess
import sys

import numpy as np

from bench.common import PIC_LAB, QUICK, ensure_model, machine, write_results

MODEL = os.environ.get("PIC_BENCH_MODEL", "mid-granite-h")


def main():
    model = ensure_model(MODEL)
    with open(os.path.join(model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    info = machine()
    n_docs, unit = (4, 256) if QUICK else (16, 1024)
    rng = np.random.default_rng(20261202)
    docs = [rng.integers(0, vocab, unit).tolist() for _ in range(n_docs)]
    query = rng.integers(0, vocab, 32).tolist()
    spec = {"ws": [8], "dtype": "bf16", "repeat": 1, "docs": docs,
            "requests": [{"docs": list(range(n_docs)), "query": query, "ideal": True,
                          "modes": ["full", "pic"], "compare": True}]}
    p = subprocess.run([PIC_LAB, "run", "--model", model, "--threads", "0"],
                       input=json.dumps(spec), stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"pic-lab run failed ({p.returncode})")
    out = json.loads(p.stdout)
    req = out["requests"][0]
    r = {x["mode"]: x for x in req["runs"]}
    sb = out["entries"][1]["seam_bytes"]
    kv_tok = (sb["K"] + sb["V"]) / sb["interior_tokens"]
    fixed = sb["T"] + sb["S"] + sb["conv"]
    summary = {
        "tokens": req["n_tokens"], "full_s": r["full"]["ttft_s"], "pic_s": r["pic"]["ttft_s"],
        "pic_speedup_vs_full": r["full"]["ttft_s"] / r["pic"]["ttft_s"],
        "pic_recomputed": r["pic"]["recomputed"], "pic_compose_s": r["pic"]["t_compose_s"],
        "pic_ideal_prefill_s": r["pic"]["ideal_prefill_s"], "pic_kl_mean": r["pic"]["kl_mean"],
        "entry_T_bytes": sb["T"], "entry_S_bytes": sb["S"], "entry_conv_bytes": sb["conv"],
        "kv_bytes_per_token": kv_tok, "break_even_tokens": fixed / kv_tok,
    }
    write_results("ttft_mamba", summary, {"model": model, "docs": n_docs, "unit": unit,
                                          "w": 8, "dtype": "bf16"}, info)


if __name__ == "__main__":
    main()
