"""bench/ttft.py — time to first token with every segment a cache hit (HYPIC Fig. 12 shape).

Workload (deterministic random token ids on the mid model, models/mid: hidden 1024,
8 layers LLLFLLLF, Qwen3.5-0.8B head shapes):
  (a) 4 segments x {1k, 2k, 4k} tokens + a 32-token query;
  (b) {4, 8, 16} segments x 1k + the query.
Every segment's entries (PIC seam entry, w = 8, and the whole-segment entry used by exact
prefix and naive addition) are built first, alone, and not timed as TTFT, in the dtype the
server stores them in (`pic-engine serve --entry-dtype`, bf16 by default).  Every mode is
timed the same way: the fastest of REPEAT runs of one pic_assemble call each, with the run
state allocated before the timed region.  Columns, all in one run of one engine process:
  full     recompute every token;
  prefix   exact prefix cache: the first segment's state reused, the rest recomputed;
  naive    naive addition (S <- S + S_C|0, KV re-rotated, no seams): only the query runs;
  pic      PIC: T_C composition + seams (runs [T_i H_i+1] and [T_n Q], one layer-major pass);
  ideal    prefill of PIC's recomputed tokens alone (one batch from position 0) plus the
           composition FLOPs at the sgemm rate measured in this run (`pic-engine sysinfo`).
Goals: PIC >= 30x faster than full at 16k tokens, within 2x of ideal, and the
added cost per extra hit segment <= 2.5% of full recompute's cost per segment.

QUICK=1: segments of 128/256 tokens, (b) up to 8 segments; under two minutes.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

from bench.common import PIC_LAB, QUICK, ROOT, ensure_model, machine, table, write_results  # noqa: E402

MODEL = os.environ.get("PIC_BENCH_MODEL", os.path.join(ROOT, "models", "mid"))
W = 8
QUERY = 32
REPEAT = 2 if QUICK else 3     # every mode: fastest of REPEAT runs
DTYPE = os.environ.get("PIC_ENTRY_DTYPE", "bf16")   # the served default


def model_vocab():
    ensure_model(MODEL)
    with open(os.path.join(MODEL, "config.json")) as f:
        cfg = json.load(f)
    return cfg.get("text_config", cfg)["vocab_size"]


def main():
    vocab = model_vocab()
    info = machine()
    print(f"machine: {info}", flush=True)
    unit = 128 if QUICK else 1024
    sizes_a = [1, 2] if QUICK else [1, 2, 4]            # in units
    counts_b = [4, 8] if QUICK else [4, 8, 16]
    rng = np.random.default_rng(20261122)

    docs, by_size = [], {}
    n1 = max(counts_b)
    by_size[1] = list(range(n1))
    docs += [rng.integers(0, vocab, unit).tolist() for _ in range(n1)]
    for k in sizes_a:
        if k == 1:
            continue
        by_size[k] = list(range(len(docs), len(docs) + 4))
        docs += [rng.integers(0, vocab, unit * k).tolist() for _ in range(4)]
    query = rng.integers(0, vocab, QUERY).tolist()

    reqs, labels = [], []
    for k in sizes_a:
        reqs.append(by_size[k][:4])
        labels.append(("a", f"4 x {unit * k}"))
    for c in counts_b:
        if c == 4:
            continue                                    # (b) 4 x 1 unit = (a) first row
        reqs.append(by_size[1][:c])
        labels.append(("b", f"{c} x {unit}"))
    spec = {"ws": [W], "dtype": DTYPE, "whole": True, "repeat": REPEAT, "docs": docs,
            "requests": [{"docs": r, "query": query, "ideal": True,
                          "modes": ["full", "prefix", "naive", "pic"]} for r in reqs]}
    t0 = time.time()
    p = subprocess.run([PIC_LAB, "run", "--model", MODEL, "--threads", "0"],
                       input=json.dumps(spec), stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"pic-lab run failed ({p.returncode})")
    out = json.loads(p.stdout)
    wall = time.time() - t0
    gflops = info["sgemm_gflops"]

    rows = []
    for (shape, label), rq in zip(labels, out["requests"]):
        r = {x["mode"]: x for x in rq["runs"]}
        pic = r["pic"]
        ideal = pic["ideal_prefill_s"] + pic["compose_flops"] / (gflops * 1e9)
        rows.append({
            "shape": shape, "segments": label, "tokens": rq["n_tokens"],
            "n_seg": len(reqs[len(rows)]),
            "full_s": r["full"]["ttft_s"], "prefix_s": r["prefix"]["ttft_s"],
            "naive_s": r["naive"]["ttft_s"], "pic_s": pic["ttft_s"], "ideal_s": ideal,
            "pic_recomputed": pic["recomputed"], "pic_runs": pic["runs"],
            "pic_forward_s": pic["t_forward_s"], "pic_compose_s": pic["t_compose_s"],
            "pic_kv_s": pic["t_kv_s"], "compose_gflop": pic["compose_flops"] / 1e9,
            "speedup_full": r["full"]["ttft_s"] / pic["ttft_s"],
            "speedup_prefix": r["prefix"]["ttft_s"] / pic["ttft_s"],
            "pic_over_ideal": pic["ttft_s"] / ideal,
        })
    # (b) 4 x unit is the first (a) row
    b_rows = [dict(rows[0], shape="b")] + [x for x in rows if x["shape"] == "b"]
    a_rows = [x for x in rows if x["shape"] == "a"]
    cols = ["segments", "tokens", "full_s", "prefix_s", "naive_s", "pic_s", "ideal_s",
            "speedup_full", "pic_over_ideal", "pic_recomputed"]
    table(a_rows, cols, title="(a) 4 segments of growing length, all hits (seconds)")
    table(b_rows, cols, title="(b) growing number of 1-unit segments, all hits (seconds)")
    table(rows, ["segments", "pic_forward_s", "pic_compose_s", "pic_kv_s", "compose_gflop",
                 "pic_runs"], title="PIC time split")

    # bytes per entry, per interior token
    ent = []
    for e in out["entries"]:
        sb, wb = e["seam_bytes"], e["whole_bytes"]
        L = e["n_tokens"]
        if any(x["n_tokens"] == L for x in ent):
            continue
        ent.append({"n_tokens": L, "T_MB": sb["T"] / 2**20, "S_MB": sb["S"] / 2**20,
                    "conv_KB": sb["conv"] / 2**10, "KV_MB": (sb["K"] + sb["V"]) / 2**20,
                    "total_MB": sb["total"] / 2**20,
                    "KV_KB_per_token": (sb["K"] + sb["V"]) / sb["interior_tokens"] / 2**10,
                    "total_KB_per_token": sb["total"] / L / 2**10,
                    "whole_MB": wb["total"] / 2**20, "build_s": e["build_s"]})
    table(ent, list(ent[0].keys()), title=f"PIC entry sizes ({DTYPE}, w = 8)")

    # summary: 16k = (a) 4 x 4k (and (b) 16 x 1k); quick runs report their largest row
    big_a = a_rows[-1]
    big_b = b_rows[-1]
    ns = np.array([x["n_seg"] for x in b_rows], dtype=float)
    pic_t = np.array([x["pic_s"] for x in b_rows])
    slope = float(np.polyfit(ns, pic_t, 1)[0]) if len(ns) > 1 else float("nan")
    full_per_seg = big_b["full_s"] / big_b["n_seg"]
    summary = {
        "tokens_a": big_a["tokens"], "tokens_b": big_b["tokens"],
        "pic_speedup_vs_full_16k": big_a["speedup_full"],
        "pic_speedup_vs_full_16k_16x1k": big_b["speedup_full"],
        "pic_over_ideal_16k": big_a["pic_over_ideal"],
        "pic_over_ideal_16k_16x1k": big_b["pic_over_ideal"],
        "extra_segment_cost_ratio": slope / full_per_seg,
        "extra_segment_cost_s": slope,
        "full_cost_per_segment_s": full_per_seg,
        "goals": {"pic_speedup_vs_full_16k": ">= 30", "pic_over_ideal_16k": "<= 2",
                  "extra_segment_cost_ratio": "<= 0.025"},
    }
    summary["goals_met"] = {
        "pic_speedup_vs_full_16k": summary["pic_speedup_vs_full_16k"] >= 30,
        "pic_over_ideal_16k": summary["pic_over_ideal_16k"] <= 2,
        "extra_segment_cost_ratio": summary["extra_segment_cost_ratio"] <= 0.025,
    }
    if QUICK:
        summary["note"] = ("QUICK run: segments of 128/256 tokens, so the '16k' keys are "
                           "measured at %d tokens; run without QUICK for the real figures"
                           % big_a["tokens"])
    config = {"model": os.path.relpath(MODEL, ROOT), "w": W, "query_tokens": QUERY,
              "unit_tokens": unit, "sizes_a_units": sizes_a, "counts_b": counts_b,
              "entry_dtype": DTYPE, "repeat_every_mode": REPEAT, "wall_s": wall,
              "engine_threads": out["model"]["threads"],
              "weights": "random (mid preset): timings only"}
    write_results("ttft", summary, config, info, rows=rows, entries=ent)


if __name__ == "__main__":
    main()
