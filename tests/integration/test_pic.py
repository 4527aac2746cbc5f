"""test_pic.py — the PIC state engine through `pic-lab run` (DESIGN.md 3.3).

* Oracle entries (computed from the full-context forward) assembled in PIC
  mode reproduce transformers' logits (tests/fixtures/oracle, written by
  transformers in fp32) for w in {0, 8} on every tiny fixture layout, the
  all-attention ones (Llama, Qwen2, Qwen3: K/V entries re-rotated) too: the
  engine's PIC path against an independent implementation, not against
  itself.
* Isolated entries: the first linear layer's composed state equals full
  recompute (rel-L2 <= 1e-5); naive addition is measurably worse than PIC
  (layer 0, deepest layer, logits); the exact prefix equals full recompute.
* Bookkeeping of every mode (tokens recomputed, runs), bf16 entries, entry
  sizes, and a malformed spec refused with a message.
"""
import json
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PIC_BUILD", "build")
PIC_LAB = os.path.join(ROOT, BUILD, "pic-lab")  # bench/pic_lab.c
ORACLE_DIR = os.path.join(ROOT, "tests", "fixtures", "oracle")
MODELS = ["tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next", "tiny-realheads",
          # Mamba2 hybrids: the scalar transition family (one decay per head)
          "tiny-bamba", "tiny-granite-h", "tiny-granite-h-dense"]
# all-attention architectures: an entry is K/V only (no state, no conv window);
# MLA (DeepSeek): the latent rows [k_pe | c_KV] only, k_pe re-rotated at placement
ATTN_MODELS = ["tiny-llama", "tiny-llama-tied", "tiny-qwen3", "tiny-qwen2",
               "tiny-deepseek-v2", "tiny-deepseek-v3"]


def model_dir(name):
    return os.path.join(ROOT, "tests", "fixtures", "models", name)


def pic_run(model, spec, check=True):
    p = subprocess.run([PIC_LAB, "run", "--model", model_dir(model), "--threads", "2"],
                       input=json.dumps(spec), capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)
    return p


def runs_by(req):
    return {(r["mode"], r.get("w")): r for r in req["runs"]}


def oracle(model, name):
    with open(os.path.join(ORACLE_DIR, model + ".json")) as f:
        meta = json.load(f)
    p = next(x for x in meta["prompts"] if x["name"] == name)
    rows = np.fromfile(os.path.join(ORACLE_DIR, meta["logits_file"]), dtype="<f4")
    rows = rows.reshape(meta["logits_shape"])[p["row_offset"]:p["row_offset"] + p["n_rows"]]
    return p["ids"] + p["continuation"][:15], rows


@pytest.mark.parametrize("model", MODELS + ATTN_MODELS)
def test_context_entries_match_transformers(model):
    ids, rows = oracle(model, "long")           # 144 ids, rows[i] predicts ids[i+1]
    cuts = [0, 37, 80, 121, len(ids)]           # three documents + the query
    docs = [ids[a:b] for a, b in zip(cuts[:-2], cuts[1:-1])]
    spec = {"ws": [0, 8], "docs": docs,
            "requests": [{"docs": [0, 1, 2], "query": ids[cuts[-2]:],
                          "modes": ["full", "pic_ctx"], "ws": [0, 8],
                          "compare": True, "logits": True}]}
    out = pic_run(model, spec)
    req = out["requests"][0]
    assert req["n_tokens"] == len(ids)
    want = rows[len(ids) - 1]
    full = np.array(runs_by(req)[("full", None)]["logits"], dtype=np.float32)
    base = float(np.max(np.abs(full - want)))   # the engine's own distance to transformers
    assert base <= 1e-4, base
    for w in (0, 8):
        r = runs_by(req)[("pic_ctx", w)]
        got = np.array(r["logits"], dtype=np.float32)
        err = float(np.max(np.abs(got - want)))
        assert err <= 1e-4 + base, (w, err, base)
        assert r["logit_max_abs"] <= 1e-4
        assert max(layer["rel_l2"] for layer in r["layers"]) <= 1e-4
        assert r["composed"] == 3 and r["rejected"] == 0
        if model in MODELS or w > 0:
            assert r["runs"] == 4               # [H1] [T1 H2] [T2 H3] [T3 Q]
        else:
            assert r["runs"] == 1               # no seams, no conv window: [Q]


def random_docs(lens, seed, vocab=2009):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=n).tolist() for n in lens]


@pytest.mark.parametrize("model", MODELS)
def test_isolated_entries_layer0_exact_naive_worse(model):
    docs = random_docs([50, 70, 45, 60], seed=3)
    query = random_docs([9], seed=4)[0]
    spec = {"ws": [8], "docs": docs,
            "requests": [{"docs": [0, 1, 2, 3], "query": query,
                          "modes": ["full", "prefix", "naive", "pic"],
                          "compare": True, "teacher": random_docs([6], seed=5)[0],
                          "greedy": 4}]}
    req = pic_run(model, spec)["requests"][0]
    r = runs_by(req)
    pic, naive, prefix, full = r[("pic", 8)], r[("naive", None)], r[("prefix", None)], \
        r[("full", None)]
    assert full["logit_max_abs"] == 0 and full["kl_mean"] == 0
    assert pic["layer0_rel_l2"] <= 1e-5
    assert prefix["layer0_rel_l2"] <= 1e-5 and prefix["deep_rel_l2"] <= 1e-5
    assert prefix["logit_max_abs"] <= 1e-4
    assert naive["layer0_rel_l2"] > 1e-2
    assert naive["layer0_rel_l2"] > 100 * pic["layer0_rel_l2"]
    assert naive["deep_rel_l2"] > pic["deep_rel_l2"]
    assert naive["kl_mean"] > pic["kl_mean"]
    # bookkeeping: what each mode recomputes
    n = sum(map(len, docs)) + len(query)
    assert full["recomputed"] == n and full["runs"] == 1
    assert prefix["recomputed"] == n - len(docs[0]) and prefix["prefix_tokens"] == len(docs[0])
    assert naive["recomputed"] == len(query) and naive["composed"] == 4
    h = 8                                       # max(w, K-1) with K = 4
    assert pic["recomputed"] == 3 * (h + 8) + len(query)    # doc 0 is the exact prefix
    assert pic["reused"] + pic["recomputed"] == n
    assert pic["compose_flops"] > 0 and naive["compose_flops"] == 0


@pytest.mark.parametrize("model", ATTN_MODELS)
def test_selective_recompute_spans_naive_to_full(model):
    """Selective recompute (engine/pic/blend.h) over isolated whole entries:
    at ratio 1 every cached token runs through every layer in context, so it
    is full recompute (the oracle) within the float noise of a longer GEMM
    path; at ratio 0 only the selection pass (layers 0-1 of every token) and
    the query are recomputed, and that already repairs layer 1, so it drifts
    less than naive reuse.  Bookkeeping: the first document is the exact
    prefix, the ratio of the other cached tokens plus the query are chosen."""
    docs = random_docs([50, 70, 45, 60], seed=3)
    query = random_docs([9], seed=4)[0]
    rs = [0.0, 0.3, 1.0]
    spec = {"ws": [0], "whole": True, "docs": docs,
            "requests": [{"docs": [0, 1, 2, 3], "query": query,
                          "modes": ["full", "naive", "blend"], "rs": rs,
                          "compare": True, "teacher": random_docs([6], seed=5)[0]}]}
    req = pic_run(model, spec)["requests"][0]
    by = {(r["mode"], r.get("r")): r for r in req["runs"]}
    full, naive = by[("full", None)], by[("naive", None)]
    n, cached = sum(map(len, docs)) + len(query), sum(map(len, docs[1:]))
    for r in rs:
        b = by[("blend", r)]
        assert b["prefix_tokens"] == len(docs[0]) and b["partial"] == n - len(docs[0])
        assert b["recomputed"] == len(query) + int(np.ceil(r * cached - 1e-9)), b
        assert b["composed"] == 4 and b["rejected"] == 0
    one = by[("blend", 1.0)]
    assert one["logit_max_abs"] <= 1e-4 and max(x["rel_l2"] for x in one["layers"]) <= 1e-4
    zero, mid = by[("blend", 0.0)], by[("blend", 0.3)]
    assert zero["kl_mean"] < naive["kl_mean"], (zero["kl_mean"], naive["kl_mean"])
    assert mid["kl_mean"] <= zero["kl_mean"] * 1.05, (mid["kl_mean"], zero["kl_mean"])
    assert full["kl_mean"] == 0


def test_selective_recompute_refuses_recurrent_models():
    docs = random_docs([40, 40], seed=6)
    spec = {"ws": [0], "whole": True, "docs": docs,
            "requests": [{"docs": [0, 1], "query": [5, 6, 7], "modes": ["blend"]}]}
    p = pic_run("tiny-qwen35", spec, check=False)
    assert p.returncode != 0 and "all-attention" in p.stderr, p.stderr[-300:]


def test_bf16_entries_and_sizes():
    docs = random_docs([80, 90], seed=7)
    base = {"ws": [8], "docs": docs, "requests": [{"docs": [0, 1], "query": [5, 6, 7],
                                                    "modes": ["pic"], "compare": True}]}
    f32 = pic_run("tiny-qwen3next", base)
    bf16 = pic_run("tiny-qwen3next", dict(base, dtype="bf16"))
    e32, e16 = f32["entries"][1], bf16["entries"][1]
    for k in ("T", "S", "K", "V"):
        assert e16["seam_bytes"][k] * 2 == e32["seam_bytes"][k], k
    assert e16["seam_bytes"]["conv"] == e32["seam_bytes"]["conv"]      # conv stays fp32
    assert e32["seam_bytes"]["interior_tokens"] == 90 - 8 - 8
    assert e32["whole_bytes"]["T"] == 0
    r = bf16["requests"][0]["runs"][0]
    assert r["layer0_rel_l2"] < 1e-2
    assert r["layer0_rel_l2"] > f32["requests"][0]["runs"][0]["layer0_rel_l2"]


def test_bad_spec_is_refused():
    p = pic_run("tiny-qwen35", {"docs": [[1, 2, 3]], "requests": [{"docs": [4], "modes": ["pic"]}]},
                check=False)
    assert p.returncode != 0 and "doc 4" in p.stderr
    p = pic_run("tiny-qwen35", {"docs": [[1, 2, 99999]], "requests": []}, check=False)
    assert p.returncode != 0 and "bad token ids" in p.stderr
    p = pic_run("tiny-qwen35", {"docs": [[1, 2, 3]], "requests": [{"docs": [0], "modes": ["zip"]}]},
                check=False)
    assert p.returncode != 0 and "unknown mode" in p.stderr
