#!/usr/bin/env python3
"""check_model.py — check a release checkpoint of the trained model (oracle venv).

  1. transformers loads it: AutoModelForCausalLM (text) with no missing/unexpected
     keys and tied embeddings, and AutoModelForImageTextToText (whole VL wrapper).
  2. The chat template: tasks.render() == tokenizer.apply_chat_template() (the
     Jinja template in tokenizer_config.json) on items of every task.
  3. The engine: `pic-engine logits` on an item's token ids against the
     transformers fp32 forward (max abs diff), and `pic-engine generate --chat`
     (the engine's own template, core/prompt/pic_template.c) against
     `generate --tokens` of tasks.render()'s ids (same greedy continuation).

Usage:  check_model.py [--model DIR] [--engine build/pic-engine] [--n N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from train import tasks   # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "pic-qa"))
    ap.add_argument("--engine", default=os.path.join(ROOT, "build", "pic-engine"))
    ap.add_argument("--n", type=int, default=3, help="items per task")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer
    from tokenizers import Tokenizer
    torch.set_num_threads(a.threads)
    transformers.logging.set_verbosity_error()
    bad = 0

    m, info = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                                   output_loading_info=True)
    keys = {k: v for k, v in info.items() if v and k != "error_msgs"}
    tied = m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    print("transformers text model: %s, %d params, tied=%s, loading issues=%s"
          % (type(m).__name__, sum(p.numel() for p in m.parameters()), tied, keys or "none"))
    bad += bool(keys) + (not tied)
    vl, info = AutoModelForImageTextToText.from_pretrained(a.model, output_loading_info=True)
    keys = {k: v for k, v in info.items() if v and k != "error_msgs"}
    print("transformers VL wrapper: %s, loading issues=%s" % (type(vl).__name__, keys or "none"))
    bad += bool(keys)
    del vl

    hf_tok = AutoTokenizer.from_pretrained(a.model)
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    n_tmpl = 0
    for task in tasks.TASKS:
        for s in range(a.n):
            it = tasks.item(task, s, 1)
            mine = tasks.prompt_text(it)
            theirs = hf_tok.apply_chat_template(it["messages"], tools=it["tools"],
                                                tokenize=False, add_generation_prompt=True,
                                                enable_thinking=False)
            if mine != theirs:
                bad += 1
                print("TEMPLATE MISMATCH %s/%d" % (task, s))
            n_tmpl += 1
    print("chat template: render() == apply_chat_template on %d items" % n_tmpl)

    m.eval()
    worst = 0.0
    for task in tasks.TASKS:
        it = tasks.item(task, 1, 0)
        ids = tok.encode(tasks.prompt_text(it)).ids
        with torch.no_grad():
            ref = m(input_ids=torch.tensor([ids])).logits[0].float().numpy()
        with tempfile.NamedTemporaryFile(suffix=".f32") as f:
            subprocess.run([a.engine, "logits", "--model", a.model, "--tokens",
                            ",".join(map(str, ids)), "--out", f.name,
                            "--threads", str(a.threads)],
                           check=True, stdout=subprocess.DEVNULL)
            got = np.fromfile(f.name, dtype="<f4").reshape(len(ids), -1)[:, :ref.shape[1]]
        d = float(np.abs(got - ref).max())
        worst = max(worst, d)
        print("engine logits vs transformers, %s (%d tokens): max abs diff %.2e "
              "(logit scale %.1f)" % (task, len(ids), d, float(np.abs(ref).max())))
        gen = []
        for how in (["--chat", json.dumps(tasks.request_json(it))],
                    ["--tokens", ",".join(map(str, ids))]):
            out = subprocess.run([a.engine, "generate", "--model", a.model] + how +
                                 ["--max-tokens", "12", "--ids", "--ignore-eos",
                                  "--threads", str(a.threads)],
                                 check=True, capture_output=True, text=True).stdout.strip()
            gen.append(out)
        same = gen[0] == gen[1]
        bad += not same
        print("engine template == render(), %s: %s" % (task, "same continuation" if same
                                                        else "DIFFERENT %s" % gen))
    bad += worst > 1e-3
    print("check_model: %s" % ("ok" if not bad else "%d problem(s)" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
