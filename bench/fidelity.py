"""bench/fidelity.py — how close PIC assembly stays to full recompute (DESIGN.md 5).

For each model (the four tiny fixture layouts and the mid preset) and a few requests made of
documents prefilled alone plus a query, every mode is compared with full recompute of the same
prompt:
  * layer-0 composed GDN state: rel-L2 and angle (exact for PIC by construction: layer-0 inputs
    are embeddings, independent of context);
  * deepest linear layer's state: rel-L2 and angle (the approximation left in PIC: deeper
    interiors were computed without cross-segment context);
  * per-token KL(full || mode) and argmax agreement under teacher forcing (the prompt's last
    position plus a continuation fed as a prefill);
  * first divergence of greedy decoding (-1: none within the horizon).
Modes: naive addition (S_C|0 only, no seams), PIC with w in {0, 4, 8, 16, 32}, PIC with oracle
entries from the full-context forward ("pic_ctx", DESIGN 3.3 check 1: must be ~0), and full.

THE MODELS HAVE RANDOM WEIGHTS.  These numbers exercise the machinery (composition, seams,
re-rotation) and show what T_C and the seams buy over naive addition; they say nothing about
task accuracy on real checkpoints, whose attention patterns and state dynamics differ.

QUICK=1: fewer requests, shorter documents on mid, w in {0, 8}; under two minutes.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

from bench.common import PIC_LAB, QUICK, ROOT, ensure_model, machine, table, write_results  # noqa: E402

TINY = ["tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next", "tiny-realheads"]
MID = os.environ.get("PIC_BENCH_MODEL", os.path.join(ROOT, "models", "mid"))


def vocab_of(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return cfg.get("text_config", cfg)["vocab_size"]


def run_model(name, path, doc_len, n_docs, n_req, ws, teacher, greedy, seed):
    V = vocab_of(path)
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, V, doc_len).tolist() for _ in range(n_docs + 2)]
    reqs = []
    for r in range(n_req):
        order = rng.permutation(len(docs))[:n_docs].tolist()    # re-ranked documents
        reqs.append({"docs": order, "query": rng.integers(0, V, 16).tolist(),
                     "teacher": rng.integers(0, V, teacher).tolist(), "greedy": greedy,
                     "compare": True, "ws": ws,
                     "modes": ["full", "naive", "pic", "pic_ctx"]})
    spec = {"ws": ws, "dtype": "f32", "whole": True, "docs": docs, "requests": reqs}
    p = subprocess.run([PIC_LAB, "run", "--model", path, "--threads", "0"],
                       input=json.dumps(spec), stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"pic-lab run failed on {name}")
    out = json.loads(p.stdout)
    rows = {}
    for rq in out["requests"]:
        for r in rq["runs"]:
            key = r["mode"] if r["mode"] in ("full", "naive") else f'{r["mode"]} w={r["w"]}'
            rows.setdefault(key, []).append(r)
    agg = []
    order = ["naive"] + [f"pic w={w}" for w in ws] + [f"pic_ctx w={w}" for w in ws] + ["full"]
    for key in order:
        rs = rows.get(key, [])
        if not rs:
            continue
        fd = [r["first_divergence"] for r in rs]
        agg.append({
            "model": name, "mode": key,
            "layer0_rel_l2": max(r["layer0_rel_l2"] for r in rs),
            "layer0_angle_deg": max(r["layer0_angle_deg"] for r in rs),
            "deep_rel_l2": float(np.mean([r["deep_rel_l2"] for r in rs])),
            "deep_angle_deg": float(np.mean([r["deep_angle_deg"] for r in rs])),
            "kl_mean": float(np.mean([r["kl_mean"] for r in rs])),
            "kl_max": max(r["kl_max"] for r in rs),
            "argmax_match": float(np.mean([r["argmax_match"] for r in rs])),
            "first_div": min([d for d in fd if d >= 0], default=-1),
            "recomputed": int(np.mean([r["recomputed"] for r in rs])),
        })
    return agg, {"doc_tokens": doc_len, "docs_per_request": n_docs, "requests": n_req,
                 "teacher_tokens": teacher, "greedy_tokens": greedy,
                 "n_tokens": out["requests"][0]["n_tokens"]}


def main():
    ensure_model(MID)
    info = machine()
    t0 = time.time()
    ws_full = [0, 4, 8, 16, 32]
    all_rows, cfg = [], {}
    for i, name in enumerate(TINY):
        path = os.path.join(ROOT, "tests", "fixtures", "models", name)
        rows, c = run_model(name, path, doc_len=96 if QUICK else 160, n_docs=4,
                            n_req=2 if QUICK else 4, ws=ws_full, teacher=16, greedy=16,
                            seed=100 + i)
        all_rows += rows
        cfg[name] = c
        print(f"{name}: done ({time.time() - t0:.0f} s)", flush=True)
    mid_ws = [0, 8] if QUICK else ws_full
    rows, c = run_model("mid", MID, doc_len=128 if QUICK else 512, n_docs=4,
                        n_req=1 if QUICK else 2, ws=mid_ws, teacher=8 if QUICK else 16,
                        greedy=4 if QUICK else 8, seed=7)
    all_rows += rows
    cfg["mid"] = c
    print(f"mid: done ({time.time() - t0:.0f} s)", flush=True)

    print("\nRandom-weight models: these figures test the machinery, not task accuracy.")
    cols = ["model", "mode", "layer0_rel_l2", "layer0_angle_deg", "deep_rel_l2",
            "deep_angle_deg", "kl_mean", "kl_max", "argmax_match", "first_div", "recomputed"]
    table(all_rows, cols, title="Fidelity against full recompute (mean over requests; "
                                "layer 0 and KL max: worst request)")

    def pick(model, mode, key):
        return next(r[key] for r in all_rows if r["model"] == model and r["mode"] == mode)

    pic_modes = [r for r in all_rows if r["mode"].startswith("pic ")]
    summary = {
        "layer0_rel_l2": max(r["layer0_rel_l2"] for r in pic_modes),
        "deep_rel_l2_pic_w8": pick("mid", "pic w=8", "deep_rel_l2"),
        "deep_rel_l2_naive": pick("mid", "naive", "deep_rel_l2"),
        "kl_mean_pic_w8": pick("mid", "pic w=8", "kl_mean"),
        "kl_mean_naive": pick("mid", "naive", "kl_mean"),
        "argmax_match_pic_w8": pick("mid", "pic w=8", "argmax_match"),
        "argmax_match_naive": pick("mid", "naive", "argmax_match"),
        "oracle_entries_max_kl": max(r["kl_max"] for r in all_rows
                                     if r["mode"].startswith("pic_ctx")),
        "pic_beats_naive_everywhere": all(
            pick(m, "pic w=8", "deep_rel_l2") < pick(m, "naive", "deep_rel_l2")
            and pick(m, "pic w=8", "kl_mean") < pick(m, "naive", "kl_mean")
            for m in TINY + ["mid"]),
        "weights": "random: machinery, not task accuracy",
    }
    config = {"models": cfg, "ws": ws_full, "mid_ws": mid_ws, "entry_dtype": "f32",
              "wall_s": time.time() - t0,
              "note": "deep = the deepest linear (GDN) layer; layer0 = the first linear layer"}
    write_results("fidelity", summary, config, info, rows=all_rows)


if __name__ == "__main__":
    main()
