#!/usr/bin/env python3
"""oracle.py — reference logits from Hugging Face transformers for the committed tiny
checkpoints (tests/fixtures/models/<preset>/), written to tests/fixtures/oracle/.

Runs only in the oracle venv (torch + transformers + tokenizers + safetensors; see
scripts/fixtures.sh).  Everything is fp32 on CPU with eager attention and WITHOUT the
optional fused-kernel packages (flash-linear-attention, causal-conv1d, kernels), so
transformers runs its plain torch Gated DeltaNet (chunked prefill, chunk 64; per-token
recurrence for cached decode).  The script refuses to run if one of them is importable.

For each preset it first verifies the checkpoint layout (--verify does only this):
  * AutoModelForCausalLM loads it with no missing / unexpected / mismatched keys, no
    "newly initialized" warning, and every parameter equals the file's tensor (after
    the Qwen3-Next per-expert -> fused conversion transformers does on load);
  * tied models share embed_tokens and lm_head;
  * qwen3_5* checkpoints also load whole (vision tower included) into
    AutoModelForImageTextToText with no missing / unexpected keys;
  * config.json and generation_config.json re-saved by transformers are byte-identical.
Then, for 3 fixed prompts (token ids from the checkpoint's tokenizer.json via
`tokenizers`): logits at every prompt position (no cache), the 16-token greedy
continuation from generate(use_cache=True), confirmed token by token by a no-cache
forward over prompt + continuation, and that forward's logits for the continuation.

Output per preset: <preset>.json (ids, continuation, row layout, checks, versions)
and <preset>.logits.f32 (raw little-endian float32 [rows, vocab]; layout in the json).

Usage: oracle.py [--models DIR] [--out DIR] [--preset NAME ...] [--verify]
"""
import argparse
import datetime
import hashlib
import importlib.util
import inspect
import json
import logging
import os
import platform
import re
import sys
import tempfile

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from safetensors import safe_open
from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText,
                          GenerationConfig)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PRESETS = ["tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next", "tiny-realheads"]
N_NEW = 16

PROMPTS = [
    ("short", "The quick brown fox jumps."),
    ("chat", "<|im_start|>user\nWhat does a position-independent cache store? "
             "Answer briefly.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    # > 64 tokens: crosses a Gated DeltaNet chunk boundary, ends in a partial chunk
    ("long", "Hybrid models mix linear attention layers with full attention layers, so the "
             "recurrent state must be carried across segment boundaries. The engine measured "
             "2718 tokens per second on 16 cores; latency fell from 12.5 ms to 3.1 ms.\n"
             "def cache_key(model, scope, text):\n"
             "    return xxh3_128(model + scope + text)\n"
             "我们今天去公园散步。 Café résumé 👍"),
]

OPTIONAL_KERNELS = ["fla", "causal_conv1d", "kernels", "flash_attn"]
GDN_FUNCS = ["torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule",
             "causal_conv1d_fn", "causal_conv1d_update"]


class _Collect(logging.Handler):
    """Keeps every transformers log record emitted while attached."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def compact_lists(text):
    """Put each list of numbers of an indented json text on one line."""
    return re.sub(r"\[\s+([-+.eE\d,\s]+?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def versions():
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "safetensors": safetensors.__version__, "numpy": np.__version__}


def check_no_fast_kernels():
    found = [m for m in OPTIONAL_KERNELS if importlib.util.find_spec(m) is not None]
    if found:
        raise SystemExit("oracle: optional kernel packages importable (%s): the oracle must "
                         "use the plain torch path; use a venv without them" % ", ".join(found))


def load(model_dir, cls=AutoModelForCausalLM):
    """Load fp32/eager; return (model, loading_info, log messages)."""
    tlog = logging.getLogger("transformers")
    h = _Collect()
    tlog.addHandler(h)
    try:
        model, info = cls.from_pretrained(model_dir, dtype=torch.float32,
                                          attn_implementation="eager",
                                          output_loading_info=True)
    finally:
        tlog.removeHandler(h)
    model.eval()
    return model, info, h.records


def file_tensor_for(param_name, model_type, f):
    """The file's tensor (as fp32 torch) that a text-model parameter must equal."""
    keys = set(f.keys())
    name = param_name
    if model_type in ("qwen3_5", "qwen3_5_moe") and name.startswith("model."):
        name = "model.language_model." + name[len("model."):]
    if name in keys:
        return f.get_tensor(name).float()
    # Qwen3-Next: per-expert tensors on disk, fused in memory
    if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
        base = name.rsplit(".", 1)[0]
        e = 0
        per = []
        while "%s.%d.down_proj.weight" % (base, e) in keys:
            if name.endswith("gate_up_proj"):
                per.append(torch.cat([f.get_tensor("%s.%d.gate_proj.weight" % (base, e)),
                                      f.get_tensor("%s.%d.up_proj.weight" % (base, e))], 0))
            else:
                per.append(f.get_tensor("%s.%d.down_proj.weight" % (base, e)))
            e += 1
        if per:
            return torch.stack(per).float()
    return None


def _without_version(text):
    """json text minus its "transformers_version" line (it names the saving version)."""
    return "".join(l for l in text.splitlines(True) if '"transformers_version"' not in l)


def kernel_paths(model):
    """Which implementation each GDN kernel entry point of the model's module resolves
    to; raises unless all are transformers' own torch reference functions."""
    mod = sys.modules[type(model.model).__module__]
    out = {}
    for fn in GDN_FUNCS:
        f = getattr(mod, fn)
        nl = inspect.getclosurevars(f).nonlocals
        if nl.get("is_new_implementation", True) or nl.get("implementation") is not nl.get(
                "torch_function"):
            raise SystemExit("oracle: %s.%s is not the torch reference" % (mod.__name__, fn))
        out[fn] = "torch reference (%s)" % mod.__name__
    return out


def verify(model_dir):
    """Layout checks (see module doc).  Returns (model, dict of findings); raises on failure."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    mt = cfg["model_type"]
    model, info, logs = load(model_dir)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit("%s: loading info not clean: %s" % (model_dir, problems))
    bad_logs = [m for m in logs if "newly initialized" in m or "not initialized" in m
                or "were not used" in m or "missing" in m.lower()]
    if bad_logs:
        raise SystemExit("%s: suspicious load messages: %s" % (model_dir, bad_logs))

    st = os.path.join(model_dir, "model.safetensors")
    used = 0
    with safe_open(st, "pt") as f:
        file_keys = list(f.keys())
        text_keys = [k for k in file_keys if not k.startswith("model.visual.")]
        for pname, p in model.named_parameters():
            ref = file_tensor_for(pname, mt, f)
            if ref is None and pname == "lm_head.weight" and model.config.tie_word_embeddings:
                continue
            if ref is None:
                raise SystemExit("%s: no file tensor for parameter %s" % (model_dir, pname))
            if tuple(ref.shape) != tuple(p.shape) or not torch.equal(ref, p.detach()):
                raise SystemExit("%s: parameter %s differs from the file" % (model_dir, pname))
            used += 1
    tied = model.config.tie_word_embeddings
    if tied and model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        raise SystemExit("%s: tied model does not share lm_head and embed_tokens" % model_dir)

    out = {"class": type(model).__name__, "params_checked": used,
           "file_tensors": len(file_keys), "file_text_tensors": len(text_keys),
           "loading_info": "no missing/unexpected/mismatched keys", "tied": bool(tied)}

    if mt in ("qwen3_5", "qwen3_5_moe"):
        full, finfo, flogs = load(model_dir, AutoModelForImageTextToText)
        fprob = {k: v for k, v in finfo.items() if v}
        if fprob:
            raise SystemExit("%s: whole-model load not clean: %s" % (model_dir, fprob))
        n_full = sum(1 for _ in full.named_parameters())
        out["full_class"] = type(full).__name__
        out["full_params"] = n_full
        del full

    with tempfile.TemporaryDirectory() as t:
        AutoConfig.from_pretrained(model_dir).save_pretrained(t)
        GenerationConfig.from_pretrained(model_dir).save_pretrained(t)
        for fn in ("config.json", "generation_config.json"):
            a = _without_version(open(os.path.join(model_dir, fn), encoding="utf-8").read())
            b = _without_version(open(os.path.join(t, fn), encoding="utf-8").read())
            if a != b:
                raise SystemExit("%s: %s differs from transformers' re-save" % (model_dir, fn))
    out["json_resave"] = ("config.json and generation_config.json byte-identical to "
                          "transformers' re-save (transformers_version line aside)")
    out["gdn_kernels"] = kernel_paths(model)
    return model, out


@torch.no_grad()
def run_prompt(model, ids, eot):
    """Logits and greedy continuation for one prompt (see module doc)."""
    x = torch.tensor([ids])
    P = len(ids)
    prompt_logits = model(x, use_cache=False).logits[0].float()            # [P, V]

    gc = GenerationConfig(max_new_tokens=N_NEW, do_sample=False, use_cache=True,
                          eos_token_id=None, pad_token_id=eot, bos_token_id=None,
                          output_logits=True, return_dict_in_generate=True)
    model.generation_config.eos_token_id = None     # never stop early: always 16 tokens
    gen = model.generate(x, attention_mask=torch.ones_like(x), generation_config=gc)
    cont = gen.sequences[0, P:].tolist()
    if len(cont) != N_NEW:
        raise SystemExit("generate produced %d tokens, want %d" % (len(cont), N_NEW))
    gen_logits = torch.stack([s[0] for s in gen.logits]).float()            # [16, V]

    seq = torch.tensor([ids + cont[:-1]])
    full = model(seq, use_cache=False).logits[0].float()                    # [P+15, V]
    check = full[P - 1:]                                                     # rows predicting cont
    argmax = check.argmax(-1).tolist()
    if argmax != cont:
        raise SystemExit("cached greedy %s != no-cache argmax %s" % (cont, argmax))
    top2 = check.topk(2, -1).values
    margins = (top2[:, 0] - top2[:, 1]).tolist()
    rows = torch.cat([prompt_logits, full[P:]], 0)                           # [P+15, V]
    stats = {
        "max_abs_diff_prompt_vs_extended_forward": float((full[:P] - prompt_logits).abs().max()),
        "max_abs_diff_cached_generate_vs_no_cache": float((gen_logits - check).abs().max()),
        "greedy_margin_min": float(min(margins)),
    }
    return rows, cont, stats


def run_preset(models_dir, out_dir, preset, verify_only):
    mdir = os.path.join(models_dir, preset)
    model, ver = verify(mdir)
    print("%s: layout ok (%s, %d params checked; %s)" % (
        preset, ver["class"], ver["params_checked"], ver["json_resave"]))
    if verify_only:
        return
    tok = tokenizers.Tokenizer.from_file(os.path.join(mdir, "tokenizer.json"))
    tj = json.load(open(os.path.join(mdir, "tokenizer.json"), encoding="utf-8"))
    special = {a["content"]: a["id"] for a in tj["added_tokens"]}
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    V = model.config.vocab_size
    torch.manual_seed(0)

    all_rows, prompts, row = [], [], 0
    for name, text in PROMPTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        rows, cont, stats = run_prompt(model, ids, special["<|endoftext|>"])
        assert rows.shape == (len(ids) + N_NEW - 1, V)
        prompts.append({
            "name": name, "text": text, "ids": ids, "n_prompt": len(ids),
            "continuation": cont,
            "continuation_text": tok.decode(cont, skip_special_tokens=False),
            "row_offset": row, "n_rows": rows.shape[0], **stats})
        all_rows.append(rows.numpy().astype("<f4"))
        row += rows.shape[0]
        print("  %-5s %3d prompt tokens -> %s  (margin %.3g, cached-vs-uncached %.2g)" % (
            name, len(ids), cont, stats["greedy_margin_min"],
            stats["max_abs_diff_cached_generate_vs_no_cache"]))

    logits = np.concatenate(all_rows, 0)
    os.makedirs(out_dir, exist_ok=True)
    lpath = os.path.join(out_dir, preset + ".logits.f32")
    with open(lpath, "wb") as f:
        f.write(logits.tobytes())
    doc = {
        "preset": preset,
        "model_dir": os.path.relpath(mdir, ROOT),
        "model_type": cfg["model_type"],
        "model_safetensors_sha256": sha256(os.path.join(mdir, "model.safetensors")),
        "config_sha256": sha256(os.path.join(mdir, "config.json")),
        "tokenizer_sha256": sha256(os.path.join(mdir, "tokenizer.json")),
        "vocab_size": V,
        "logits_file": os.path.basename(lpath),
        "logits_dtype": "float32 little-endian",
        "logits_shape": [int(logits.shape[0]), int(logits.shape[1])],
        "layout": ("Rows of vocab_size floats.  Prompt k owns rows row_offset .. "
                   "row_offset+n_rows-1, n_rows = n_prompt + 15.  Row row_offset+i is the "
                   "logit vector after consuming token i of ids + continuation (i.e. it "
                   "predicts token i+1).  Rows i < n_prompt come from a no-cache forward "
                   "over the prompt alone; rows i >= n_prompt from a no-cache forward over "
                   "prompt + continuation[:15].  argmax of rows n_prompt-1 .. n_prompt+14 "
                   "is the continuation.  Prompts are concatenated in the order listed."),
        "prompts": prompts,
        "greedy": {"max_new_tokens": N_NEW, "do_sample": False, "use_cache": True,
                   "stop_tokens": "none (eos ignored: always 16 tokens)",
                   "confirmed_by": "no-cache forward over prompt + continuation, argmax"},
        "settings": {"dtype": "float32", "device": "cpu", "attn_implementation": "eager",
                     "threads": torch.get_num_threads(),
                     "fast_kernels": "none installed (%s absent); torch reference path"
                                     % ", ".join(OPTIONAL_KERNELS)},
        "layout_check": ver,
        "versions": versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generator": "tests/tools/oracle.py",
    }
    with open(os.path.join(out_dir, preset + ".json"), "w", encoding="utf-8") as f:
        f.write(compact_lists(json.dumps(doc, indent=1, ensure_ascii=False)) + "\n")
    print("  wrote %s (%d rows x %d, %.2f MB)" % (lpath, logits.shape[0], V, logits.nbytes / 1e6))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "tests", "fixtures", "models"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "oracle"))
    ap.add_argument("--preset", action="append",
                    help="checkpoint directory name under --models (default: the tiny presets)")
    ap.add_argument("--verify", action="store_true", help="layout checks only, write nothing")
    args = ap.parse_args(argv)
    check_no_fast_kernels()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for p in args.preset or PRESETS:
        run_preset(args.models, args.out, p, args.verify)
    print("oracle: %s with %s" % ("verified" if args.verify else "done", versions()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
