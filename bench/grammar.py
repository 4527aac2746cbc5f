#!/usr/bin/env python3
"""grammar.py — cost per token of masking the vocabulary for constrained
decoding (response_format JSON, forced tool-call arguments; issue 14).

A Qwen3.5-layout byte-level BPE tokenizer with the released vocabulary size
(248,044 BPE ids + the added tokens, trained by tests/tools/make_tokenizer.py
on its built-in corpus, cached under $BUILD/bench/grammar-tok; QUICK=1 uses
a 32k vocabulary) is loaded by bench/grammar_bench.c, which masks it in ten
grammar states (JSON documents and an XML tool call) two ways, interleaved,
R rounds: the old way (a copy of the grammar state fed each token's bytes,
token after token) and the vocabulary trie (pic_gvocab_mask: depth-first,
refused bytes prune their subtree, free-string bytes share the parent's
state).  The masks must be equal.  Figures are ms per masked token (best
and median) and the speed-up, side by side in one run.

The scheduler masks only when the sampled token breaks the grammar (a
trained model rarely does), so these are the worst case per generated token.

Writes bench/results/grammar.json ("summary", "machine", "config", "rows").
"""
import json
import os
import platform
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

sys.path.insert(0, os.path.join(common.ROOT, "tests", "tools"))
from make_tokenizer import make_tokenizer  # noqa: E402

HELPER = os.path.join(common.BUILD, "bench", "grammar_bench")
VOCAB = 32000 if common.QUICK else 248044
REPS = 3 if common.QUICK else 7


def main():
    common.need_binary(HELPER)
    out_dir = os.path.join(common.BUILD, "bench", "grammar-tok-%d" % VOCAB)
    path = os.path.join(out_dir, "tokenizer.json")
    if not os.path.exists(path):
        print("training a %d-token BPE vocabulary (once, cached in %s)" % (VOCAB, out_dir))
        os.makedirs(out_dir, exist_ok=True)
        path = make_tokenizer(out_dir, "qwen3_5", VOCAB)
    cmd = [HELPER, path, "--reps", str(REPS)]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    rows = out["states"]
    for r in rows:
        r["speedup_median"] = round(r["each_ms_median"] / max(r["trie_ms_median"], 1e-6), 1)
    common.table(rows, ["state", "allowed", "each_ms_best", "each_ms_median", "trie_ms_best",
                        "trie_ms_median", "speedup_median"],
                 title="mask of a %d-id vocabulary, ms per generated token (best/median of %d)"
                       % (out["vocab"], REPS))
    summary = {
        "vocab": out["vocab"],
        "each_ms_median_max": max(r["each_ms_median"] for r in rows),
        "trie_ms_median_max": max(r["trie_ms_median"] for r in rows),
        "speedup_median_min": min(r["speedup_median"] for r in rows),
        "speedup_median_geomean": round(statistics.geometric_mean(
            [r["speedup_median"] for r in rows]), 1),
        "trie_build_ms": out["trie_build_ms"],
        "masks_equal": all(r["same_mask"] for r in rows),
    }
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "note": "shared machine; figures are ratios taken side by side"}
    config = {"rounds": REPS, "tokenizer": "tests/tools/make_tokenizer.py qwen3_5, vocab %d"
              % VOCAB, "states": [r["state"] for r in rows]}
    common.write_results("grammar", summary, config, info, rows=rows)


if __name__ == "__main__":
    main()
