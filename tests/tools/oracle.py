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
  * config.json and generation_config.json re-saved by transformers are byte-identical
    (a plain-family config.json in the released 4.x layout: identical once its legacy
    keys are renamed as transformers does, v5_config).
The plain families (llama, qwen2, qwen3) have no GDN; their checks are the same.
Then, for 3 fixed prompts (token ids from the checkpoint's tokenizer.json via
`tokenizers`; `chat` is CHAT_MESSAGES rendered by the checkpoint's own chat template
through apply_chat_template when that template is not the fixtures' ChatML one, the
Llama 3 presets', else the Qwen3 rendering written out): logits at every prompt position (no cache), the 16-token greedy
continuation from generate(use_cache=True), confirmed token by token by a no-cache
forward over prompt + continuation, and that forward's logits for the continuation.

Then the same checkpoint runs in float64 over exactly the same token sequences (the
prompt alone, and prompt + continuation[:15], no cache) as the exact-model reference.
`dtype=torch.float64` alone is not enough: transformers hard-codes float32 in places
(RMSNorm, the gated RMSNorm, the whole Gated DeltaNet kernel, the decay g, the softmax,
RoPE frequencies, the MoE router).  While the float64 model is loaded and run, the
model's modeling module and transformers.modeling_rope_utils (the scaled RoPE types such
as llama3 compute inv_freq there) see `torch.float32` / `torch.float` as float64 and
`Tensor.float()` as `Tensor.double()`, experts use the "eager" implementation, the
inv_freq buffers are compared with float64 numpy (expected_inv_freq), a torch dispatch
mode checks that every floating-point tensor going into or out of every aten op is
float64 and forward hooks that every module's output is (the script stops otherwise).

Output per preset: <preset>.json (ids, continuation, row layout, checks, versions),
<preset>.logits.f32 (raw little-endian float32 [rows, vocab]; layout in the json) and
<preset>.logits64.f32 (the float64 logits rounded to float32, same layout).

Usage: oracle.py [--models DIR] [--out DIR] [--preset NAME ...] [--verify]
"""
import argparse
import contextlib
import datetime
import hashlib
import importlib.util
import inspect
import json
import logging
import math
import os
import platform
import re
import sys
import tempfile
import types

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from safetensors import safe_open
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText,
                          GenerationConfig)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PRESETS = ["tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next", "tiny-realheads",
           "tiny-llama", "tiny-llama-tied", "tiny-qwen3", "tiny-qwen2",
           "tiny-bamba", "tiny-granite-h", "tiny-granite-h-dense"]
GDN_TYPES = ("qwen3_5", "qwen3_5_moe", "qwen3_next")
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

# the `chat` prompt's conversation, for a checkpoint whose template renders it
CHAT_MESSAGES = [{"role": "user",
                  "content": "What does a position-independent cache store? Answer briefly."}]


def prompt_texts(mdir):
    """(name, text, messages or None) of each prompt for the checkpoint at mdir."""
    with open(os.path.join(mdir, "tokenizer_config.json"), encoding="utf-8") as f:
        tmpl = json.load(f).get("chat_template")
    out = []
    for name, text in PROMPTS:
        if name == "chat" and tmpl is not None and "<|im_start|>" not in tmpl:
            tok = transformers.AutoTokenizer.from_pretrained(mdir)
            text = tok.apply_chat_template(CHAT_MESSAGES, tokenize=False,
                                           add_generation_prompt=True)
            out.append((name, text, CHAT_MESSAGES))
        else:
            out.append((name, text, None))
    return out


OPTIONAL_KERNELS = ["fla", "causal_conv1d", "kernels", "flash_attn", "mamba_ssm"]
# Mamba2 hybrids: without mamba_ssm / causal_conv1d / kernels transformers runs its torch
# Mamba2 (mamba2_chunk_scan, chunked SSD with the config's chunk size, for prefill and
# no-cache forwards; mamba2_selective_state_update for cached decode)
MAMBA_TYPES = ("bamba", "granitemoehybrid")
GDN_FUNCS = ["torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule",
             "causal_conv1d_fn", "causal_conv1d_update"]


class _Collect(logging.Handler):
    """Keeps every transformers log record emitted while attached."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


class _Float64Only(TorchDispatchMode):
    """Counts aten ops and the ones that see a floating-point tensor (argument or result)
    that is not float64."""

    def __init__(self):
        super().__init__()
        self.n_ops = 0
        self.bad = {}

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.n_ops += 1
        for t in tree_flatten((args, kwargs, out))[0]:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64:
                key = "%s(%s)" % (func, t.dtype)
                self.bad[key] = self.bad.get(key, 0) + 1
        return out


class _Torch64(types.ModuleType):
    """`torch` as a modeling module sees it in float64 mode: float32 means float64."""

    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        if name in ("float32", "float"):
            return torch.float64
        return getattr(torch, name)


def float64_modules(module):
    """The modules whose float32 casts float64 mode redirects: the model's modeling
    module and transformers.modeling_rope_utils (the scaled RoPE types, e.g. llama3,
    compute inv_freq there, in float32)."""
    return [module, sys.modules["transformers.modeling_rope_utils"]]


@contextlib.contextmanager
def float64_casts(module):
    """Within: the explicit float32 casts of `module` and of the RoPE helpers
    (float64_modules) and every Tensor.float() give float64."""
    mods = float64_modules(module)
    real = [m.__dict__["torch"] for m in mods]
    real_float = torch.Tensor.float
    for m in mods:
        m.__dict__["torch"] = _Torch64()
    torch.Tensor.float = torch.Tensor.double
    try:
        yield
    finally:
        for m, t in zip(mods, real):
            m.__dict__["torch"] = t
        torch.Tensor.float = real_float


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
    # Granite 4.0-H: released expert names, renamed on load
    for new, old in (("block_sparse_moe.experts.gate_up_proj", "block_sparse_moe.input_linear.weight"),
                     ("block_sparse_moe.experts.down_proj", "block_sparse_moe.output_linear.weight"),
                     ("block_sparse_moe.router.weight", "block_sparse_moe.router.layer.weight")):
        if name.endswith(new) and name[:-len(new)] + old in keys:
            return f.get_tensor(name[:-len(new)] + old).float()
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


def v5_config(cfg):
    """A released-layout (transformers 4.x) plain-family config.json as transformers 5.x
    re-saves it; returns (dict, list of what changed).  Top-level rope_theta +
    rope_scaling become rope_parameters (rope_scaling's "type" is the old name of
    "rope_type"), torch_dtype becomes dtype, qwen2 / qwen3 sliding_window is null unless
    use_sliding_window, and qwen2 / qwen3 gain layer_types."""
    c, changed = dict(cfg), []
    if "rope_theta" in c or "rope_scaling" in c:
        rp = {"rope_theta": c.pop("rope_theta", 10000.0), "rope_type": "default"}
        rs = c.pop("rope_scaling", None)
        if rs:
            rs = dict(rs)
            rs["rope_type"] = rs.pop("rope_type", rs.pop("type", "default"))
            rp.update(rs)
        c["rope_parameters"] = rp
        changed.append("rope_theta + rope_scaling -> rope_parameters %s" % json.dumps(rp))
    if "torch_dtype" in c:
        c["dtype"] = c.pop("torch_dtype")
        changed.append("torch_dtype -> dtype")
    if c.get("model_type") in ("qwen2", "qwen3"):
        if not c.get("use_sliding_window") and c.get("sliding_window") is not None:
            changed.append("sliding_window %s -> null (use_sliding_window false)"
                           % c["sliding_window"])
            c["sliding_window"] = None
        if "layer_types" not in c:
            c["layer_types"] = ["full_attention"] * c["num_hidden_layers"]
            changed.append("layer_types added (all full_attention)")
    return c, changed


def expected_inv_freq(cfg):
    """RoPE inverse frequencies of a config.json (text part), computed here in float64
    numpy from the published formulas (default; llama3 and yarn scaling)."""
    tc = cfg.get("text_config", cfg)
    tc, _ = v5_config(tc)
    rp = tc["rope_parameters"]
    hd = tc.get("head_dim") or tc["hidden_size"] // tc["num_attention_heads"]
    dim = int(hd * rp.get("partial_rotary_factor", 1.0))
    inv = 1.0 / (rp["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if rp["rope_type"] == "llama3":
        f, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        wl = 2 * np.pi / inv
        smooth = (old / wl - lo) / (hi - lo)
        mid = (1 - smooth) * inv / f + smooth * inv
        inv = np.where(wl > old / lo, inv / f, np.where(wl < old / hi, inv, mid))
    elif rp["rope_type"] == "yarn":
        base, f = rp["rope_theta"], rp["factor"]
        old = rp["original_max_position_embeddings"]
        fast, slow = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

        def corr(rot):
            return dim * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = corr(fast), corr(slow)
        if rp.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        keep = 1 - ramp
        inv = inv / f * (1 - keep) + inv * keep
    elif rp["rope_type"] != "default":
        raise SystemExit("oracle: no reference for rope_type %s" % rp["rope_type"])
    return inv


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

    legacy = "torch_dtype" in cfg or "rope_theta" in cfg or "rope_scaling" in cfg
    with tempfile.TemporaryDirectory() as t:
        AutoConfig.from_pretrained(model_dir).save_pretrained(t)
        GenerationConfig.from_pretrained(model_dir).save_pretrained(t)
        for fn in ("config.json", "generation_config.json"):
            a = _without_version(open(os.path.join(model_dir, fn), encoding="utf-8").read())
            b = _without_version(open(os.path.join(t, fn), encoding="utf-8").read())
            if fn == "config.json" and legacy:
                a5, changed = v5_config(json.loads(a))
                if a5 != json.loads(b):
                    raise SystemExit("%s: %s (released layout) does not mean what "
                                     "transformers re-saves: %s vs %s" % (model_dir, fn, a5, b))
                out["legacy_config"] = changed
            elif a != b:
                raise SystemExit("%s: %s differs from transformers' re-save" % (model_dir, fn))
    if legacy:
        out["json_resave"] = ("config.json in the released 4.x layout equals transformers' "
                              "re-save after legacy_config's renames; generation_config.json "
                              "byte-identical (transformers_version line aside)")
    else:
        out["json_resave"] = ("config.json and generation_config.json byte-identical to "
                              "transformers' re-save (transformers_version line aside)")
    if mt in GDN_TYPES:
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


def load64(model_dir, model32):
    """The float64 model (see module doc) and its modeling module; every parameter equals
    the float32 model's, upcast, and every parameter and buffer is float64."""
    mod = sys.modules[type(model32.model).__module__]
    with float64_casts(mod):
        model, info = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float64, attn_implementation="eager",
            experts_implementation="eager", output_loading_info=True)
    model.eval()
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit("%s: float64 loading info not clean: %s" % (model_dir, problems))
    p32 = dict(model32.named_parameters())
    for name, p in model.named_parameters():
        if p.dtype != torch.float64 or not torch.equal(p.detach(), p32[name].detach().double()):
            raise SystemExit("%s: float64 parameter %s != float32 one" % (model_dir, name))
    for name, b in model.named_buffers():
        if b.is_floating_point() and b.dtype != torch.float64:
            raise SystemExit("%s: float64 model buffer %s is %s" % (model_dir, name, b.dtype))
    # the RoPE frequencies are computed at construction, outside the checked forward:
    # compare them with float64 numpy (a float32 computation cast up is ~1e-8 off)
    want = expected_inv_freq(json.load(open(os.path.join(model_dir, "config.json"))))
    errs = []
    for name, b in model.named_buffers():
        if name.endswith("inv_freq"):
            got = b.detach().numpy()
            err = float(np.max(np.abs(got - want) / want)) if got.shape == want.shape else 1.0
            if err > 4e-16:
                raise SystemExit("%s: float64 %s is %.3g (relative) from float64 numpy"
                                 % (model_dir, name, err))
            errs.append(err)
    nope = getattr(model.config, "position_embedding_type", "rope") != "rope" \
        and model.config.model_type == "granitemoehybrid"
    if not errs and nope:
        model.inv_freq_check = {"buffers": 0, "what": "no RoPE (position_embedding_type null)"}
        return model, mod
    if not errs:
        raise SystemExit("%s: float64 model has no inv_freq buffer" % model_dir)
    b32 = [b for n, b in model32.named_buffers() if n.endswith("inv_freq")][0]
    model.inv_freq_check = {
        "buffers": len(errs),
        "max_rel_err_fp64_vs_numpy": max(errs),
        "fp32_model_max_rel_err_vs_numpy": float(np.max(np.abs(
            b32.detach().double().numpy() - want) / want)),
        "rope_frequencies_changed_by_scaling": int(np.sum(np.abs(
            want - expected_inv_freq_unscaled(model_dir)) > 0)),
    }
    return model, mod


def expected_inv_freq_unscaled(model_dir):
    """expected_inv_freq of the same config with its RoPE scaling removed."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    tc = dict(cfg.get("text_config", cfg))
    tc, _ = v5_config(tc)
    rp = tc["rope_parameters"]
    tc["rope_parameters"] = {"rope_theta": rp["rope_theta"], "rope_type": "default"}
    if "partial_rotary_factor" in rp:
        tc["rope_parameters"]["partial_rotary_factor"] = rp["partial_rotary_factor"]
    return expected_inv_freq(tc)


@torch.no_grad()
def run_prompt64(model, mod, ids, cont, rows32):
    """Float64 logits over the same sequences as run_prompt, [P+15, V] (float64), and stats
    against rows32 (the float32 rows)."""
    P = len(ids)
    check = _Float64Only()
    seen = {}

    def hook(m, args, out):
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                k = "%s:%s" % (type(m).__name__, str(t.dtype).replace("torch.", ""))
                seen[k] = seen.get(k, 0) + 1

    hooks = [m.register_forward_hook(hook) for m in model.modules()]
    try:
        with float64_casts(mod), check:
            prompt_logits = model(torch.tensor([ids]), use_cache=False).logits[0]
            full = model(torch.tensor([ids + cont[:-1]]), use_cache=False).logits[0]
    finally:
        for h in hooks:
            h.remove()
    if check.bad or prompt_logits.dtype != torch.float64:
        raise SystemExit("float64 run saw other floating types: %s" % check.bad)
    not64 = [k for k in seen if not k.endswith(":float64")]
    if not64:
        raise SystemExit("float64 run: module outputs not float64: %s" % not64)
    rows = torch.cat([prompt_logits, full[P:]], 0)
    argmax = full[P - 1:].argmax(-1).tolist()
    top2 = full[P - 1:].topk(2, -1).values
    diff = (rows32.double() - rows).abs().max(-1).values                   # [P+15]
    stats = {
        "max_abs_diff_fp32_vs_fp64": float(diff.max()),
        "max_rel_diff_fp32_vs_fp64": float((diff / rows.abs().max(-1).values).max()),
        "fp32_vs_fp64_rows_over_1e-5": int((diff > 1e-5).sum()),
        "fp64_max_abs_diff_prompt_vs_extended_forward": float(
            (full[:P] - prompt_logits).abs().max()),
        "fp64_argmax_is_continuation": argmax == cont,
        "fp64_greedy_margin_min": float((top2[:, 0] - top2[:, 1]).min()),
    }
    return rows, stats, (check.n_ops, seen)


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
    pad = special.get("<|endoftext|>", special.get("<|end_of_text|>"))
    for name, text, messages in prompt_texts(mdir):
        ids = tok.encode(text, add_special_tokens=False).ids
        rows, cont, stats = run_prompt(model, ids, pad)
        assert rows.shape == (len(ids) + N_NEW - 1, V)
        prompts.append({
            "name": name, "text": text, **({"messages": messages} if messages else {}),
            "ids": ids, "n_prompt": len(ids),
            "continuation": cont,
            "continuation_text": tok.decode(cont, skip_special_tokens=False),
            "row_offset": row, "n_rows": rows.shape[0], **stats})
        all_rows.append(rows.numpy().astype("<f4"))
        row += rows.shape[0]
        print("  %-5s %3d prompt tokens -> %s  (margin %.3g, cached-vs-uncached %.2g)" % (
            name, len(ids), cont, stats["greedy_margin_min"],
            stats["max_abs_diff_cached_generate_vs_no_cache"]))

    # the float64 reference, after every float32 result is in
    model64, mod = load64(mdir, model)
    all_rows64, ops64 = [], []
    for p, rows32 in zip(prompts, all_rows):
        rows64, stats64, (n_ops, seen) = run_prompt64(model64, mod, p["ids"],
                                                      p["continuation"],
                                                      torch.from_numpy(rows32))
        if not stats64["fp64_argmax_is_continuation"]:
            raise SystemExit("%s/%s: float64 greedy differs from the float32 continuation"
                             % (preset, p["name"]))
        p.update(stats64)
        all_rows64.append(rows64.numpy().astype("<f4"))
        ops64.append(n_ops)
        module_outputs = seen
        print("  %-5s float64: max |fp32 - fp64| %.3g (%d rows > 1e-5), margin %.3g" % (
            p["name"], stats64["max_abs_diff_fp32_vs_fp64"],
            stats64["fp32_vs_fp64_rows_over_1e-5"], stats64["fp64_greedy_margin_min"]))
    inv_freq_check = model64.inv_freq_check
    del model64

    logits = np.concatenate(all_rows, 0)
    logits64 = np.concatenate(all_rows64, 0)
    assert logits64.shape == logits.shape
    os.makedirs(out_dir, exist_ok=True)
    lpath = os.path.join(out_dir, preset + ".logits.f32")
    with open(lpath, "wb") as f:
        f.write(logits.tobytes())
    lpath64 = os.path.join(out_dir, preset + ".logits64.f32")
    with open(lpath64, "wb") as f:
        f.write(logits64.tobytes())
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
        "fp64_reference": {
            "logits_file": os.path.basename(lpath64),
            "logits_dtype": "float32 little-endian (float64 results rounded to nearest)",
            "logits_shape": [int(logits64.shape[0]), int(logits64.shape[1])],
            "layout": "as logits_file (same rows, same token sequences)",
            "what": ("the exact model: the same checkpoint run in float64 (weights upcast "
                     "exactly), no cache, over the prompt alone and over prompt + "
                     "continuation[:15]"),
            "settings": {"dtype": "float64", "device": "cpu", "attn_implementation": "eager",
                         "experts_implementation": "eager",
                         "float32_casts": ("torch.float32 / torch.float inside %s and "
                                           "Tensor.float() mean float64 while loading and "
                                           "running" % " and ".join(
                                               m.__name__ for m in float64_modules(mod)))},
            "check": ("every floating-point tensor into or out of every aten op is float64 "
                      "(torch dispatch mode): %s ops per prompt, none other"
                      % "/".join(map(str, ops64))),
            "module_outputs": ("forward hooks on every submodule, last prompt: the "
                               "floating-point outputs per module class and dtype (all "
                               "float64): %s" % json.dumps(module_outputs, sort_keys=True)),
            "inv_freq": dict(inv_freq_check) if "what" in inv_freq_check else dict(inv_freq_check, what=(
                "RoPE inv_freq buffers of the float64 model vs float64 numpy from the "
                "config (default / llama3 formulas); the float32 model's for scale; how "
                "many frequencies the config's RoPE scaling changes")),
            "per_prompt": ("max_abs_diff_fp32_vs_fp64 = max |logits_file - fp64| over the "
                           "prompt's rows (transformers' own float32 error), "
                           "max_rel_diff_fp32_vs_fp64 (a row's max |fp32 - fp64| over its "
                           "max |fp64|, the largest row), "
                           "fp32_vs_fp64_rows_over_1e-5, fp64_argmax_is_continuation, "
                           "fp64_greedy_margin_min, "
                           "fp64_max_abs_diff_prompt_vs_extended_forward"),
            "max_abs_diff_fp32_vs_fp64": max(p["max_abs_diff_fp32_vs_fp64"] for p in prompts),
        },
        "versions": versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generator": "tests/tools/oracle.py",
    }
    with open(os.path.join(out_dir, preset + ".json"), "w", encoding="utf-8") as f:
        f.write(compact_lists(json.dumps(doc, indent=1, ensure_ascii=False)) + "\n")
    print("  wrote %s and %s (%d rows x %d, %.2f MB each)" % (
        lpath, os.path.basename(lpath64), logits.shape[0], V, logits.nbytes / 1e6))


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
