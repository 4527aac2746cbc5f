"""The committed test models are exactly what the generator makes (so `make run`'s
demo model and the fixtures come from one deterministic recipe), and the oracle
files are consistent with their json descriptions."""
import json
import os
import subprocess
import sys

import numpy as np

import harness

FIX = os.path.join(harness.ROOT, "tests", "fixtures")


def test_generator_reproduces_committed_models():
    r = subprocess.run([sys.executable, os.path.join(harness.ROOT, "tests", "tools",
                                                     "make_models.py"), "--check"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_oracle_files_match_their_descriptions():
    oracle = os.path.join(FIX, "oracle")
    names = sorted(f[:-5] for f in os.listdir(oracle) if f.endswith(".json"))
    assert len(names) >= 4
    for name in names:
        doc = json.load(open(os.path.join(oracle, name + ".json")))
        raw = np.fromfile(os.path.join(oracle, name + ".logits.f32"), dtype="<f4")
        text = json.dumps(doc)
        assert "transformers" in text and "torch" in text, name
        assert raw.size > 0 and np.isfinite(raw).all(), name
