"""bench/mla.py — multi-head latent attention against GQA and the hybrid at one size.

Three random-weight checkpoints of one size (tests/tools/make_models.py presets, made
under models/ on first use): bench-mla (DeepSeek-V3 layout: 8 heads, q_lora 256, kv_lora
r 256, nope/rope/v 64/32/64), bench-gqa (Llama, 8 query / 2 kv heads of 64) and
bench-hybrid (Qwen3.5: 3 Gated DeltaNet layers + 1 gated attention layer); all H 512,
4 layers, dense MLP 1024.  `pic-lab run` (bench/pic_lab.c) builds isolated PIC entries
of DOCS documents of DOC_LEN tokens, f32 and bf16, and assembles them behind the exact
prefix in front of a 16-token query (modes full and pic, w = 8, best of REPEAT).

Reported per model:
  cache_bytes_per_token    the attention cache one position costs in the run state
                           (fp32; MLA: the latent row [k_pe | c_KV], dr + r floats per
                           layer; GQA: K and V of every kv head), and what the same query
                           heads would cost kept as GQA keys and values (MLA only);
  entry_bytes_per_token    an entry's K + V bytes per interior token (bf16 entries), and
                           its fixed part (the hybrid's GDN T, S and conv; 0 otherwise);
  place_us_per_token       assembly's placement of cached interiors (pic_assemble_place_kv:
                           copy and re-rotation; MLA turns k_pe only, dr of dr + r dims per
                           layer, GQA every kv head's rotary dims), microseconds per placed
                           token; compose_us_per_token the hybrid's S composition;
  ttft_pic_over_full       TTFT of the PIC-assembled request over full recompute.
Summary: mla_cache_bytes_vs_gqa (MLA's cache per token over the GQA model's) and
mla_place_vs_gqa (placement time per token, MLA over GQA).
QUICK=1: shorter documents, fewer repeats.
"""
import json
import os
import subprocess
import sys

import numpy as np

from bench import common

MODELS = ["bench-mla", "bench-gqa", "bench-hybrid"]
DOCS = 6
DOC_LEN = 256 if common.QUICK else 1024
REPEAT = 2 if common.QUICK else 5


def cache_bytes(cfg):
    """(per-token fp32 attention cache bytes of the run state, the GQA-equivalent or None)."""
    tc = cfg.get("text_config", cfg)
    n_attn = sum(1 for t in tc.get("layer_types", ["full_attention"] * tc["num_hidden_layers"])
                 if t == "full_attention")
    if tc["model_type"].startswith("deepseek"):
        lat = n_attn * (tc["qk_rope_head_dim"] + tc["kv_lora_rank"]) * 4
        gqa = n_attn * tc["num_attention_heads"] * (
            tc["qk_nope_head_dim"] + tc["qk_rope_head_dim"] + tc["v_head_dim"]) * 4
        return lat, gqa
    hd = tc.get("head_dim") or tc["hidden_size"] // tc["num_attention_heads"]
    return n_attn * 2 * tc["num_key_value_heads"] * hd * 4, None


def run(model_dir, dtype):
    rng = np.random.default_rng(11)
    docs = [rng.integers(0, 2000, size=DOC_LEN).tolist() for _ in range(DOCS)]
    query = rng.integers(0, 2000, size=16).tolist()
    spec = {"ws": [8], "dtype": dtype, "repeat": REPEAT, "docs": docs,
            "requests": [{"docs": list(range(DOCS)), "query": query,
                          "modes": ["full", "pic"], "compare": True}]}
    p = subprocess.run([common.PIC_LAB, "run", "--model", model_dir, "--threads", "1"],
                       input=json.dumps(spec), capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit("pic-lab failed on %s: %s" % (model_dir, p.stderr))
    return json.loads(p.stdout)


def main():
    common.need_binary(common.PIC_LAB)
    rows = []
    for name in MODELS:
        d = common.ensure_model(name)
        cfg = json.load(open(os.path.join(d, "config.json")))
        cb, gqa = cache_bytes(cfg)
        out = run(d, "bf16")
        e = out["entries"][1]["seam_bytes"]
        req = out["requests"][0]
        r = {(x["mode"], x.get("w")): x for x in req["runs"]}
        pic, full = r[("pic", 8)], r[("full", None)]
        placed = pic["reused"]
        rows.append({
            "model": name, "model_type": cfg.get("model_type"),
            "cache_bytes_per_token": cb, "cache_bytes_per_token_as_gqa": gqa,
            "entry_bytes_per_token": (e["K"] + e["V"]) / e["interior_tokens"],
            "entry_fixed_bytes": e["T"] + e["S"] + e["conv"],
            "place_us_per_token": pic["t_kv_s"] / placed * 1e6 if placed else None,
            "compose_us_per_token": pic["t_compose_s"] / placed * 1e6 if placed else None,
            "ttft_full_s": full["ttft_s"], "ttft_pic_s": pic["ttft_s"],
            "ttft_pic_over_full": pic["ttft_s"] / full["ttft_s"],
            "reused_tokens": placed, "recomputed_tokens": pic["recomputed"],
            "pic_logit_max_abs": pic.get("logit_max_abs"),
        })
    common.table(rows, ["model", "cache_bytes_per_token", "cache_bytes_per_token_as_gqa",
                        "entry_bytes_per_token", "entry_fixed_bytes", "place_us_per_token",
                        "compose_us_per_token", "ttft_pic_over_full"],
                 "MLA vs GQA vs hybrid (H 512, 4 layers)")
    by = {r["model"]: r for r in rows}
    summary = {
        "mla_cache_bytes_vs_gqa": by["bench-mla"]["cache_bytes_per_token"]
        / by["bench-gqa"]["cache_bytes_per_token"],
        "mla_cache_bytes_vs_same_heads_as_gqa": by["bench-mla"]["cache_bytes_per_token"]
        / by["bench-mla"]["cache_bytes_per_token_as_gqa"],
        "mla_place_vs_gqa": by["bench-mla"]["place_us_per_token"]
        / by["bench-gqa"]["place_us_per_token"],
    }
    common.write_results("mla", summary, {"docs": DOCS, "doc_len": DOC_LEN, "repeat": REPEAT,
                                          "w": 8, "entry_dtype": "bf16", "threads": 1},
                         common.machine(1), rows=rows)


if __name__ == "__main__":
    main()
