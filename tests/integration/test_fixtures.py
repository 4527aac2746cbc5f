"""The committed test models are exactly what the generator makes (so `make run`'s
demo model and the fixtures come from one deterministic recipe), and the oracle
files are consistent with their json descriptions."""
import json
import os
import subprocess
import sys

import numpy as np

from tests import harness

FIX = os.path.join(harness.ROOT, "tests", "fixtures")


def test_generator_reproduces_committed_models():
    r = subprocess.run([sys.executable, os.path.join(harness.ROOT, "tests", "tools",
                                                     "make_models.py"), "--check"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_oracle_files_match_their_descriptions():
    oracle = os.path.join(FIX, "oracle")
    metas = harness.oracle_metas()
    assert len(metas) >= 8
    for doc in metas:
        name = doc["preset"]
        raw = np.fromfile(os.path.join(oracle, name + ".logits.f32"), dtype="<f4")
        text = json.dumps(doc)
        assert "transformers" in text and "torch" in text, name
        assert raw.size == int(np.prod(doc["logits_shape"])) and np.isfinite(raw).all(), name
    others = sorted(f for f in os.listdir(oracle) if f.endswith(".json")
                    and json.load(open(os.path.join(oracle, f))).get("generator")
                    != "tests/tools/oracle.py")
    assert others == ["chat_templates.json", "smollm2.json"]


def _lse(x):
    m = x.max()
    return m + np.log(np.exp(x - m).sum())


def test_smollm2_slice_is_consistent():
    """oracle_gguf.py's slice: the full last-prompt rows agree with the json's top-64,
    max and logsumexp there, their fp64 argmax is the continuation's first token, and
    the slice stays small (committed: under 2 MB)."""
    oracle = os.path.join(FIX, "oracle")
    doc = json.load(open(os.path.join(oracle, "smollm2.json")))
    path = os.path.join(oracle, doc["rows_file"])
    rows = np.fromfile(path, dtype="<f4").reshape(doc["rows_shape"]).astype(np.float64)
    V = doc["config"]["vocab_size"]
    assert rows.shape == (len(doc["prompts"]), 2, V) and np.isfinite(rows).all()
    assert os.path.getsize(path) + os.path.getsize(os.path.join(oracle, "smollm2.json")) < 2e6
    for k, p in enumerate(doc["prompts"]):
        n = p["n_prompt"]
        assert len(p["ids"]) == n and len(p["continuation"]) == 16
        assert all(0 <= i < V for i in p["ids"] + p["continuation"])
        last = [q for q in p["positions"] if q["row"] == n - 1]
        assert len(last) == 1 and len(p["positions"]) >= 6, p["name"]
        q = last[0]
        r32, r64 = rows[k, 0], rows[k, 1]
        ids = q["top_ids"]
        assert np.array_equal(r32[ids], np.array(q["top_fp32"], dtype=np.float32))
        assert np.abs(r64[ids] - q["top_fp64"]).max() <= 4e-6      # fp64 rounded to fp32
        assert np.argsort(-r32, kind="stable")[:len(ids)].tolist() == ids
        assert abs(_lse(r32) - q["logsumexp_fp32"]) <= 1e-5
        assert abs(_lse(r64) - q["logsumexp_fp64"]) <= 1e-5
        assert abs(np.abs(r32 - r64).max() - q["max_abs_diff_fp32_vs_fp64"]) <= 4e-6
        assert int(r64.argmax()) == p["continuation"][0] == ids[0]
        assert p["fp64_argmax_is_continuation"]
        for q in p["positions"]:
            assert q["max_abs_diff_fp32_vs_fp64"] <= 2e-4
            assert q["top_fp32"] == sorted(q["top_fp32"], reverse=True)
