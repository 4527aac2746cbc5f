#!/usr/bin/env python3
"""make_models.py — the project's own small random-weight checkpoints, in the real
Hugging Face layout of Qwen3.5 (dense and MoE) and Qwen3-Next, and of the plain
transformers Llama, Qwen2 and Qwen3.

Each preset becomes a directory OUT/<preset>/ with what a released checkpoint has:
config.json (what transformers 5.x `save_pretrained` writes for that model_type),
generation_config.json, model.safetensors, tokenizer.json and tokenizer_config.json
(tests/tools/make_tokenizer.py).  Needs only numpy and tokenizers: no torch.

Output is byte-for-byte deterministic: weights come from a counter-based hash
(splitmix64) of (preset, tensor name, element index) turned into values with exact
IEEE arithmetic only, so numpy version and CPU do not matter.

Layout facts (checked against transformers 5.23 by tests/tools/oracle.py --verify):
  * qwen3_5 / qwen3_5_moe are vision-language wrappers: text keys under
    "text_config", tensors under "model.language_model.", and a (tiny, random)
    vision tower under "model.visual." that a text engine must skip.  Load the text
    model with AutoModelForCausalLM (-> Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM).
  * qwen3_5_moe experts are FUSED on disk, as in the released checkpoints:
    "mlp.experts.gate_up_proj" [E, 2*Ie, H] (gate rows first) and
    "mlp.experts.down_proj" [E, H, Ie], both without a ".weight" suffix.
  * qwen3_next: top-level config keys, "model." prefix, experts one by one
    ("mlp.experts.{e}.gate_proj.weight"), GDN projections in_proj_qkvz / in_proj_ba
    grouped by key head (MODEL.md section 3).
  * Tied embeddings: no lm_head.weight in the file.
  * llama / qwen2 / qwen3 ("plain" families): top-level keys, "model." prefix, every
    layer full attention, RMSNorm weights used as x * w (centred on 1, not the
    zero-centred (1 + w) of Qwen3.5 / Qwen3-Next).  qwen2 has q/k/v biases (no o
    bias) and head_dim = H / Hq; qwen3 has per-head q_norm / k_norm [hd] and an
    explicit head_dim.  A preset with legacy_config=True writes config.json as the
    released checkpoints do (transformers 4.x: top-level rope_theta, "rope_scaling",
    "torch_dtype"; qwen2 also sliding_window set with use_sliding_window false);
    transformers 5.x loads that and re-saves it as "rope_parameters" (oracle.py
    checks the two mean the same).

Presets (tiny-* are committed under tests/fixtures/models/; mid and demo are made
on demand): see PRESETS below.

Usage:
  make_models.py --out DIR [--preset NAME ...]   write DIR/<preset>/ (default: demo)
  make_models.py --check                          regenerate the committed fixture
                                                  models into a temp dir, byte-compare
  make_models.py --list                           list presets with their dims
"""
import argparse
import filecmp
import hashlib
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
from tests.tools.make_tokenizer import make_tokenizer  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
FIXTURE_DIR = os.path.join(ROOT, "tests", "fixtures", "models")
TEMPLATE_DIR = os.path.join(ROOT, "tests", "fixtures", "templates")
FIXTURE_PRESETS = ["tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next", "tiny-realheads",
                   "tiny-llama", "tiny-llama-tied", "tiny-qwen3", "tiny-qwen2",
                   "tiny-deepseek-v2", "tiny-deepseek-v3",
                   "tiny-bamba", "tiny-granite-h", "tiny-granite-h-dense"]

# transformers version whose save_pretrained output the json files reproduce
TRANSFORMERS_VERSION = "5.23.0"
# what legacy_config presets' config.json names (the layout of 4.x saves)
LEGACY_TRANSFORMERS_VERSION = "4.45.0"

L, F = "linear_attention", "full_attention"

# families without Gated DeltaNet: every layer full attention, norms x * w
PLAIN = ("llama", "qwen2", "qwen3")
# multi-head latent attention (every layer), dense first layers, then MoE; norms x * w
DEEPSEEK = ("deepseek_v2", "deepseek_v3")
# Mamba2 + attention hybrids: L marks a Mamba2 layer, F an attention layer; norms x * w
MAMBA = ("bamba", "granitemoehybrid")

# Common fields: family, hidden H, layer_types, Hq/Hkv/hd (full attention),
# Hk/Hv/dk/dv (Gated DeltaNet), K conv kernel, I dense intermediate, tied,
# dtype policy, vision tower, MoE fields.  vocab is the tokenizer's size unless set.
PRESETS = {
    # Qwen3.5 dense, small; dk != dv so that a transposed state shows up
    "tiny-qwen35": dict(
        family="qwen3_5", H=64, layer_types=[L, L, L, F],
        Hq=4, Hkv=2, hd=32, Hk=2, Hv=2, dk=16, dv=24, I=128,
        tied=True, dtype="f32"),
    # Qwen3.5-MoE: fused experts, untied head, Hv = 2 Hk, GQA 4:1, bf16 + f32 mix
    "tiny-qwen35-moe": dict(
        family="qwen3_5_moe", H=64, layer_types=[L, L, L, F],
        Hq=4, Hkv=1, hd=32, Hk=2, Hv=4, dk=16, dv=16,
        E=8, topk=2, Ie=32, Is=48,
        tied=False, dtype="bf16-mixed"),
    # Qwen3-Next: grouped qkvz/ba, per-expert MoE, r = 2, MoE only on layers 1 and 5
    # (decoder_sparse_step 2, mlp_only_layers [3]), no top-k renormalisation
    "tiny-qwen3next": dict(
        family="qwen3_next", H=64, layer_types=[L, L, L, F, L, F],
        Hq=4, Hkv=2, hd=32, Hk=2, Hv=4, dk=16, dv=16, I=96,
        E=8, topk=3, Ie=32, Is=48, decoder_sparse_step=2, mlp_only_layers=[3],
        norm_topk_prob=False,
        tied=False, dtype="bf16-alog"),
    # Qwen3.5 dense with the released head shapes (hd 256, dk = dv = 128)
    "tiny-realheads": dict(
        family="qwen3_5", H=128, layer_types=[L, L, F],
        Hq=2, Hkv=1, hd=256, Hk=1, Hv=2, dk=128, dv=128, I=192,
        tied=True, dtype="bf16-mixed"),
    # Llama 3.x style: GQA 3:1, head_dim explicit and != H / Hq (Hq * hd = 144 != 96),
    # llama3 RoPE scaling with original_max_position_embeddings 256: at theta 1e4 and
    # hd 24, frequency pairs 0-3 (wavelength < 64) are kept, pair 4 (135) is smoothed,
    # pairs 5-11 (wavelength > 256) are divided by 8 -- all within the tested
    # positions.  config.json in the released (4.x) layout; all tensors BF16.
    "tiny-llama": dict(
        family="llama", H=96, layer_types=[F, F, F], Hq=6, Hkv=2, hd=24, I=160,
        tied=False, dtype="bf16-all", rope_theta=10000.0, rms_eps=1e-05,
        rope_scaling={"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 256, "rope_type": "llama3"},
        max_pos=2048, legacy_config=True, chat="llama-3.1"),
    # Llama, tied head, MHA (Hq = Hkv), plain RoPE, 5.x config layout, F32
    "tiny-llama-tied": dict(
        family="llama", H=64, layer_types=[F, F], Hq=4, Hkv=4, hd=16, I=128,
        tied=True, dtype="f32", rope_theta=500000.0, rms_eps=1e-05, max_pos=8192,
        chat="llama-3.0"),
    # Qwen3: per-head q_norm / k_norm, head_dim 32 != H / Hq = 16, tied, BF16
    "tiny-qwen3": dict(
        family="qwen3", H=64, layer_types=[F, F, F], Hq=4, Hkv=2, hd=32, I=128,
        tied=True, dtype="bf16-all", rope_theta=1000000.0, rms_eps=1e-06,
        max_pos=40960),
    # Qwen2.5: q/k/v bias, untied, F32; config.json in the released (4.x) layout with
    # sliding_window 32768 but use_sliding_window false (i.e. no sliding window)
    "tiny-qwen2": dict(
        family="qwen2", H=64, layer_types=[F, F], Hq=4, Hkv=2, hd=16, I=112,
        tied=False, dtype="f32", rope_theta=1000000.0, rms_eps=1e-06,
        max_pos=32768, legacy_config=True),
    # DeepSeek-V2 layout: q_proj straight from x (no q_lora), head dims that differ
    # (nope 16, rope 8, v 12: the expanded head pads V to 24), YaRN with mscale !=
    # mscale_all_dim (attention factor 1.065 on cos/sin, softmax scale x 1.14),
    # layer 0 dense, layers 1-2 MoE routed group-limited (4 groups of 2, best 2
    # groups), rms_norm_eps 1e-5 (the low-rank norms keep 1e-6), tied, BF16 matrices
    "tiny-deepseek-v2": dict(
        family="deepseek_v2", H=64, layer_types=[F, F, F], Hq=4, Hkv=4, hd=8, I=96,
        q_lora=None, kv_lora=32, dn=16, dr=8, dv=12, E=8, topk=2, Ie=24, n_shared=1,
        first_dense=1, n_group=4, topk_group=2, topk_method="group_limited_greedy",
        routed_scale=1.5, tied=True, dtype="bf16-mixed", rms_eps=1e-05, max_pos=4096,
        rope_parameters={"beta_fast": 32, "beta_slow": 1, "factor": 4.0, "mscale": 1.0,
                         "mscale_all_dim": 0.5, "original_max_position_embeddings": 1024,
                         "rope_theta": 10000.0, "rope_type": "yarn"}),
    # DeepSeek-V3 layout: q_lora 24, v_head_dim 32 > nope + rope 24 (the expanded head
    # pads K), interleaved rotary pairs, default RoPE, sigmoid router with a
    # correction bias, 4 groups ranked by their two best, top-3 renormalised, x 2.5,
    # one shared expert, layer 0 dense; untied, BF16 matrices with F32 norms / bias
    "tiny-deepseek-v3": dict(
        family="deepseek_v3", H=64, layer_types=[F, F, F], Hq=4, Hkv=4, hd=8, I=96,
        q_lora=24, kv_lora=32, dn=16, dr=8, dv=32, E=8, topk=3, Ie=24, n_shared=1,
        first_dense=1, n_group=4, topk_group=2, routed_scale=2.5, norm_topk_prob=True,
        tied=False, dtype="bf16-mixed", rms_eps=1e-05, max_pos=4096,
        rope_parameters={"rope_theta": 10000.0, "rope_type": "default"}),
    # bench/mla.py's three of one size (H 512, 4 layers, dense 1024, 8 query heads;
    # not committed): MLA in the V3 layout (q_lora 256, kv_lora 256, nope/rope/v
    # 64/32/64), GQA (Llama, 8/2 heads of 64) and the hybrid (3 GDN + 1 attention)
    "bench-mla": dict(
        family="deepseek_v3", H=512, layer_types=[F, F, F, F], Hq=8, Hkv=8, hd=32, I=1024,
        q_lora=256, kv_lora=256, dn=64, dr=32, dv=64, E=8, topk=2, Ie=64, n_shared=1,
        first_dense=4, n_group=1, topk_group=1, routed_scale=1.0, norm_topk_prob=True,
        tied=True, dtype="bf16-mixed", rms_eps=1e-06, max_pos=32768,
        rope_parameters={"rope_theta": 10000.0, "rope_type": "default"}),
    "bench-gqa": dict(
        family="llama", H=512, layer_types=[F, F, F, F], Hq=8, Hkv=2, hd=64, I=1024,
        tied=True, dtype="bf16-all", rope_theta=10000.0, rms_eps=1e-05, max_pos=32768),
    "bench-hybrid": dict(
        family="qwen3_5", H=512, layer_types=[L, L, L, F], Hq=8, Hkv=2, hd=64,
        Hk=4, Hv=4, dk=64, dv=64, I=1024, tied=True, dtype="bf16-mixed"),
    # Bamba: Mamba2 (Hm 8 heads of P 16, N 12, 2 groups, chunk 16: the prompts cross
    # chunk edges) + GQA attention with partial RoPE (0.5) on layer 2, dense MLP
    "tiny-bamba": dict(
        family="bamba", H=64, layer_types=[L, L, F, L], Hq=4, Hkv=2, hd=16,
        Hm=8, G=2, N=12, K=4, expand=2, chunk=16, I=96,
        tied=True, dtype="bf16-mixed"),
    # Granite 4.0-H: Mamba2 + RoPE attention, MoE (4 experts, top 2) + shared MLP,
    # the four multipliers away from 1
    "tiny-granite-h": dict(
        family="granitemoehybrid", H=64, layer_types=[L, F, L, L, F], Hq=4, Hkv=2, hd=16,
        Hm=8, G=2, N=12, K=4, expand=2, chunk=16, E=4, topk=2, Ie=32, Is=48, rope=True,
        emb_mult=1.25, resid_mult=0.8, attn_mult=0.2, logits_scaling=2.0,
        tied=True, dtype="bf16-mixed"),
    # Granite 4.0-H without experts (the shared MLP alone) and without positions
    # (position_embedding_type null), 4 groups of B/C, N 8
    "tiny-granite-h-dense": dict(
        family="granitemoehybrid", H=64, layer_types=[L, L, F, L], Hq=4, Hkv=1, hd=16,
        Hm=8, G=4, N=8, K=4, expand=2, chunk=16, E=0, Is=96, rope=False,
        emb_mult=2.0, resid_mult=0.7, attn_mult=0.3, logits_scaling=1.5,
        tied=True, dtype="bf16-mixed"),
    # a grown Granite 4.0-H for timing (not committed, ~70 MB): 6 Mamba2 layers (Hm 16
    # heads of 64, N 128, one group, Granite-4.0-H-Tiny's mixer shapes per head) + 2 attention
    "mid-granite-h": dict(
        family="granitemoehybrid", H=512, layer_types=[L, L, L, F, L, L, L, F], Hq=4, Hkv=2,
        hd=128, Hm=16, G=1, N=128, K=4, expand=2, chunk=256, E=0, Is=1536, rope=True,
        emb_mult=1.25, resid_mult=0.8, attn_mult=0.088, logits_scaling=2.0,
        tied=True, dtype="bf16-mixed"),
    # benchmark model: Qwen3.5-0.8B shapes, 8 layers (not committed, ~850 MB)
    "mid": dict(
        family="qwen3_5", H=1024, layer_types=[L, L, L, F, L, L, L, F],
        Hq=8, Hkv=2, hd=256, Hk=16, Hv=16, dk=128, dv=128, I=3584, vocab=248320,
        tied=True, dtype="bf16-mixed"),
    # the model `make run` serves: small enough for fast CPU decoding
    "demo": dict(
        family="qwen3_5", H=256, layer_types=[L, L, L, F, L, L, L, F],
        Hq=4, Hkv=2, hd=64, Hk=4, Hv=4, dk=64, dv=64, I=768,
        tied=True, dtype="bf16-mixed"),
}

# tiny vision tower written into every qwen3_5* checkpoint (real ones have one)
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
              temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16,
              in_channels=3)


# ---------------------------------------------------------------- random values


def _splitmix64(x):
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _key(seed, name):
    """64-bit stream key for one tensor."""
    return int.from_bytes(hashlib.sha256(("%s/%s" % (seed, name)).encode()).digest()[:8],
                          "little")


def _bits(seed, name, start, count):
    """count uint64 hash values for elements start.. of tensor `name`."""
    idx = np.arange(start, start + count, dtype=np.uint64)
    return _splitmix64(idx * np.uint64(0xD1B54A32D192ED03) + np.uint64(_key(seed, name)))


def randn(seed, name, n, start=0):
    """n values with mean 0, variance 1 (Irwin-Hall of four 16-bit uniforms);
    float64, exact arithmetic only."""
    with np.errstate(over="ignore"):
        z = _bits(seed, name, start, n)
    m = np.uint64(0xFFFF)
    s = ((z & m).astype(np.float64) + ((z >> np.uint64(16)) & m).astype(np.float64)
         + ((z >> np.uint64(32)) & m).astype(np.float64) + (z >> np.uint64(48)).astype(np.float64))
    # each 16-bit piece has mean 32767.5: centre, scale to var 1/3, then to 1
    return ((s + 2.0) / 65536.0 - 2.0) * 1.7320508075688772


def rand_uniform(seed, name, n):
    """n values uniform in [0, 1) (53-bit), float64."""
    with np.errstate(over="ignore"):
        z = _bits(seed, name, 0, n)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


# ---------------------------------------------------------------- tensor specs

def text_dims(p, vocab):
    """Derived dims of preset p."""
    d = dict(p)
    d["V"] = p.get("vocab", vocab)
    d["n_layers"] = len(p["layer_types"])
    if p["family"] in PLAIN or p["family"] in DEEPSEEK:
        return d
    if p["family"] in MAMBA:
        d["Im"] = p["expand"] * p["H"]
        d["P"] = d["Im"] // p["Hm"]
        d["conv"] = d["Im"] + 2 * p["G"] * p["N"]
        return d
    d["K"] = p.get("K", 4)
    d["conv"] = 2 * p["Hk"] * p["dk"] + p["Hv"] * p["dv"]
    return d


def is_moe_layer(d, i):
    """Which layers carry a sparse MoE block (MODEL.md section 1)."""
    if d["family"] == "qwen3_5_moe":
        return True
    if d["family"] == "qwen3_next":
        return (i not in d.get("mlp_only_layers", []) and d.get("E", 0) > 0
                and (i + 1) % d.get("decoder_sparse_step", 1) == 0)
    return False


# Init scales.  Projections: std gain/sqrt(fan_in) (in 1, out OUT_GAIN).  Embedding
# (and lm_head) std EMB_SCALE/sqrt(H): logits with std ~EMB_SCALE.  A larger embedding
# makes tied models repeat their input token forever (weak tests).
EMB_SCALE = 1.5
OUT_GAIN = 1.0
A_GAIN = 0.5         # GDN decay-gate input a (and b in Qwen3-Next in_proj_ba)
QK_BIAS_STD = 0.5    # qwen2 q/k biases (the released ones are large), v bias 0.2
V_BIAS_STD = 0.2
PLAIN_NORM_STD = 0.1  # plain-family RMSNorm weights ~ 1 +- 0.1 (q_norm / k_norm 0.2)
QK_NORM_STD = 0.2


def tensor_specs(d):
    """List of (name, shape, init) for preset dims d.  init is a tuple:
    ("normal", std) | ("normal_around", centre, std) | ("A_log",) | ("uniform", lo, hi)."""
    H, V = d["H"], d["V"]
    fam = d["family"]
    if fam in DEEPSEEK:
        return deepseek_tensor_specs(d)
    if fam in PLAIN:
        return plain_tensor_specs(d)
    if fam in MAMBA:
        return mamba_tensor_specs(d)
    pre = "model." if fam == "qwen3_next" else "model.language_model."
    emb_std = EMB_SCALE / math.sqrt(H)
    specs = []

    def lin(name, out_f, in_f, gain=1.0):
        specs.append((name, (out_f, in_f), ("normal", gain / math.sqrt(in_f))))

    def rms(name, n):                       # zero-centred (1 + w) RMSNorm weight
        specs.append((name, (n,), ("normal", 0.1)))

    specs.append((pre + "embed_tokens.weight", (V, H), ("normal", emb_std)))
    for i, lt in enumerate(d["layer_types"]):
        lp = "%slayers.%d." % (pre, i)
        rms(lp + "input_layernorm.weight", H)
        rms(lp + "post_attention_layernorm.weight", H)
        if lt == L:
            a = lp + "linear_attn."
            Hk, Hv, dk, dv = d["Hk"], d["Hv"], d["dk"], d["dv"]
            if fam == "qwen3_next":
                lin(a + "in_proj_qkvz.weight", 2 * Hk * dk + 2 * Hv * dv, H)
                lin(a + "in_proj_ba.weight", 2 * Hv, H, A_GAIN)
            else:
                lin(a + "in_proj_qkv.weight", 2 * Hk * dk + Hv * dv, H)
                lin(a + "in_proj_z.weight", Hv * dv, H)
                lin(a + "in_proj_b.weight", Hv, H)
                lin(a + "in_proj_a.weight", Hv, H, A_GAIN)
            specs.append((a + "conv1d.weight", (d["conv"], 1, d["K"]),
                          ("normal", 1.0 / math.sqrt(d["K"]))))
            # softplus(a + dt_bias) mostly in [1e-3, 0.3]: a mix of slow and fast decay
            specs.append((a + "dt_bias", (Hv,), ("uniform", -6.0, -2.0)))
            specs.append((a + "A_log", (Hv,), ("A_log",)))
            specs.append((a + "norm.weight", (dv,), ("normal_around", 1.0, 0.1)))
            lin(a + "out_proj.weight", H, Hv * dv, OUT_GAIN)
        else:
            s = lp + "self_attn."
            lin(s + "q_proj.weight", d["Hq"] * d["hd"] * 2, H)
            lin(s + "k_proj.weight", d["Hkv"] * d["hd"], H)
            lin(s + "v_proj.weight", d["Hkv"] * d["hd"], H)
            lin(s + "o_proj.weight", H, d["Hq"] * d["hd"], OUT_GAIN)
            rms(s + "q_norm.weight", d["hd"])
            rms(s + "k_norm.weight", d["hd"])
        m = lp + "mlp."
        if is_moe_layer(d, i):
            E, Ie, Is = d["E"], d["Ie"], d["Is"]
            lin(m + "gate.weight", E, H)
            if fam == "qwen3_5_moe":
                specs.append((m + "experts.gate_up_proj", (E, 2 * Ie, H),
                              ("normal", 1.0 / math.sqrt(H))))
                specs.append((m + "experts.down_proj", (E, H, Ie),
                              ("normal", OUT_GAIN / math.sqrt(Ie))))
            else:
                for e in range(E):
                    x = "%sexperts.%d." % (m, e)
                    lin(x + "gate_proj.weight", Ie, H)
                    lin(x + "up_proj.weight", Ie, H)
                    lin(x + "down_proj.weight", H, Ie, OUT_GAIN)
            lin(m + "shared_expert.gate_proj.weight", Is, H)
            lin(m + "shared_expert.up_proj.weight", Is, H)
            lin(m + "shared_expert.down_proj.weight", H, Is, OUT_GAIN)
            lin(m + "shared_expert_gate.weight", 1, H)
        else:
            lin(m + "gate_proj.weight", d["I"], H)
            lin(m + "up_proj.weight", d["I"], H)
            lin(m + "down_proj.weight", H, d["I"], OUT_GAIN)
    rms(pre + "norm.weight", H)
    if not d["tied"]:
        specs.append(("lm_head.weight", (V, H), ("normal", emb_std)))
    if fam != "qwen3_next":
        specs += vision_specs(H)
    return sorted(specs, key=lambda s: s[0])


def plain_tensor_specs(d):
    """(name, shape, init) of a llama / qwen2 / qwen3 checkpoint (norm weights ~1)."""
    H, V, fam = d["H"], d["V"], d["family"]
    hq, hkv = d["Hq"] * d["hd"], d["Hkv"] * d["hd"]
    emb_std = EMB_SCALE / math.sqrt(H)
    specs = []

    def lin(name, out_f, in_f, gain=1.0):
        specs.append((name, (out_f, in_f), ("normal", gain / math.sqrt(in_f))))

    def rms(name, n, std=PLAIN_NORM_STD):     # plain x * w RMSNorm weight
        specs.append((name, (n,), ("normal_around", 1.0, std)))

    specs.append(("model.embed_tokens.weight", (V, H), ("normal", emb_std)))
    for i in range(d["n_layers"]):
        lp = "model.layers.%d." % i
        rms(lp + "input_layernorm.weight", H)
        rms(lp + "post_attention_layernorm.weight", H)
        s = lp + "self_attn."
        lin(s + "q_proj.weight", hq, H)
        lin(s + "k_proj.weight", hkv, H)
        lin(s + "v_proj.weight", hkv, H)
        lin(s + "o_proj.weight", H, hq, OUT_GAIN)
        if fam == "qwen2":
            specs.append((s + "q_proj.bias", (hq,), ("normal", QK_BIAS_STD)))
            specs.append((s + "k_proj.bias", (hkv,), ("normal", QK_BIAS_STD)))
            specs.append((s + "v_proj.bias", (hkv,), ("normal", V_BIAS_STD)))
        if fam == "qwen3":
            rms(s + "q_norm.weight", d["hd"], QK_NORM_STD)
            rms(s + "k_norm.weight", d["hd"], QK_NORM_STD)
        m = lp + "mlp."
        lin(m + "gate_proj.weight", d["I"], H)
        lin(m + "up_proj.weight", d["I"], H)
        lin(m + "down_proj.weight", H, d["I"], OUT_GAIN)
    rms("model.norm.weight", H)
    if not d["tied"]:
        specs.append(("lm_head.weight", (V, H), ("normal", emb_std)))
    return sorted(specs, key=lambda s: s[0])


def mamba_tensor_specs(d):
    """(name, shape, init) of a bamba / granitemoehybrid checkpoint (released names:
    Granite's experts as block_sparse_moe.input_linear / output_linear / router.layer)."""
    H, V, fam = d["H"], d["V"], d["family"]
    Hm, G, N, K, Im, C = d["Hm"], d["G"], d["N"], d["K"], d["Im"], d["conv"]
    emb_std = EMB_SCALE / math.sqrt(H)
    specs = []

    def lin(name, out_f, in_f, gain=1.0):
        specs.append((name, (out_f, in_f), ("normal", gain / math.sqrt(in_f))))

    def rms(name, n):
        specs.append((name, (n,), ("normal_around", 1.0, PLAIN_NORM_STD)))

    specs.append(("model.embed_tokens.weight", (V, H), ("normal", emb_std)))
    for i, lt in enumerate(d["layer_types"]):
        lp = "model.layers.%d." % i
        rms(lp + "input_layernorm.weight", H)
        rms(lp + ("pre_ff_layernorm.weight" if fam == "bamba"
                  else "post_attention_layernorm.weight"), H)
        if lt == L:
            a = lp + "mamba."
            lin(a + "in_proj.weight", Im + C + Hm, H)
            specs.append((a + "conv1d.weight", (C, 1, K), ("normal", 1.0 / math.sqrt(K))))
            specs.append((a + "conv1d.bias", (C,), ("normal", 0.1)))
            # softplus(dt + dt_bias) mostly in [3e-3, 0.3]: slow and fast heads
            specs.append((a + "dt_bias", (Hm,), ("uniform", -6.0, -2.0)))
            specs.append((a + "A_log", (Hm,), ("A_log",)))
            specs.append((a + "D", (Hm,), ("normal_around", 1.0, 0.2)))
            specs.append((a + "norm.weight", (Im,), ("normal_around", 1.0, 0.1)))
            lin(a + "out_proj.weight", H, Im, OUT_GAIN)
        else:
            s = lp + "self_attn."
            lin(s + "q_proj.weight", d["Hq"] * d["hd"], H)
            lin(s + "k_proj.weight", d["Hkv"] * d["hd"], H)
            lin(s + "v_proj.weight", d["Hkv"] * d["hd"], H)
            lin(s + "o_proj.weight", H, d["Hq"] * d["hd"], OUT_GAIN)
        if fam == "bamba":
            m = lp + "feed_forward."
            lin(m + "gate_proj.weight", d["I"], H)
            lin(m + "up_proj.weight", d["I"], H)
            lin(m + "down_proj.weight", H, d["I"], OUT_GAIN)
            continue
        lin(lp + "shared_mlp.input_linear.weight", 2 * d["Is"], H)
        lin(lp + "shared_mlp.output_linear.weight", H, d["Is"], OUT_GAIN)
        if d["E"] > 0:
            E, Ie = d["E"], d["Ie"]
            b = lp + "block_sparse_moe."
            lin(b + "router.layer.weight", E, H)
            specs.append((b + "input_linear.weight", (E, 2 * Ie, H),
                          ("normal", 1.0 / math.sqrt(H))))
            specs.append((b + "output_linear.weight", (E, H, Ie),
                          ("normal", OUT_GAIN / math.sqrt(Ie))))
    rms("model.final_layernorm.weight" if fam == "bamba" else "model.norm.weight", H)
    if not d["tied"]:
        specs.append(("lm_head.weight", (V, H), ("normal", emb_std)))
    return sorted(specs, key=lambda s: s[0])


def mamba_config(d, special):
    """config.json of a bamba / granitemoehybrid preset as transformers 5.x saves it."""
    fam = d["family"]
    eot, im_end = special["<|endoftext|>"], special["<|im_end|>"]
    c = {
        "architectures": [{"bamba": "BambaForCausalLM",
                           "granitemoehybrid": "GraniteMoeHybridForCausalLM"}[fam]],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": eot,
        "dtype": "float32" if d["dtype"] == "f32" else "bfloat16",
        "eos_token_id": im_end,
        "hidden_act": "silu",
        "hidden_size": d["H"],
        "initializer_range": 0.02,
        "mamba_chunk_size": d["chunk"],
        "mamba_conv_bias": True,
        "mamba_d_conv": d["K"],
        "mamba_d_head": d["P"],
        "mamba_d_state": d["N"],
        "mamba_expand": d["expand"],
        "mamba_n_groups": d["G"],
        "mamba_n_heads": d["Hm"],
        "mamba_proj_bias": False,
        "model_type": fam,
        "num_attention_heads": d["Hq"],
        "num_hidden_layers": d["n_layers"],
        "num_key_value_heads": d["Hkv"],
        "pad_token_id": eot,
        "tie_word_embeddings": d["tied"],
        "time_step_limit": [0.0, {"__float__": "Infinity"}],
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": d["V"],
    }
    if d["hd"] != d["H"] // d["Hq"]:
        raise ValueError("%s has head_dim = hidden_size / num_attention_heads" % fam)
    if fam == "bamba":
        c.update({
            "attn_layer_indices": [i for i, t in enumerate(d["layer_types"]) if t == F],
            "intermediate_size": d["I"], "max_position_embeddings": 262144,
            "mlp_bias": False, "num_logits_to_keep": 1, "rms_norm_eps": 1e-05,
            "rope_parameters": {"partial_rotary_factor": 0.5, "rope_theta": 10000.0,
                                "rope_type": "default"},
            "z_loss_coefficient": 0.0})
    else:
        c.update({
            "attention_multiplier": d["attn_mult"], "embedding_multiplier": d["emb_mult"],
            "intermediate_size": d.get("Ie", 32),
            "layer_types": list(d["layer_types"]), "logits_scaling": d["logits_scaling"],
            "max_position_embeddings": 131072, "num_experts_per_tok": d.get("topk", 2),
            "num_local_experts": d["E"], "output_router_logits": False,
            "position_embedding_type": "rope" if d["rope"] else None,
            "residual_multiplier": d["resid_mult"], "rms_norm_eps": 1e-06,
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
            "router_aux_loss_coef": 0.001, "shared_intermediate_size": d["Is"]})
    return c


def vision_specs(out_hidden):
    """Tensors of the tiny Qwen3.5 vision tower (never used by a text engine)."""
    v = VISION
    vh, vi, m2 = v["hidden_size"], v["intermediate_size"], v["spatial_merge_size"] ** 2
    p = "model.visual."
    w = lambda *shape: ("normal", 0.02)  # noqa: E731
    specs = [
        (p + "patch_embed.proj.weight",
         (vh, v["in_channels"], v["temporal_patch_size"], v["patch_size"], v["patch_size"]), w()),
        (p + "patch_embed.proj.bias", (vh,), w()),
        (p + "pos_embed.weight", (v["num_position_embeddings"], vh), w()),
        (p + "merger.norm.weight", (vh,), ("normal_around", 1.0, 0.02)),
        (p + "merger.norm.bias", (vh,), w()),
        (p + "merger.linear_fc1.weight", (vh * m2, vh * m2), w()),
        (p + "merger.linear_fc1.bias", (vh * m2,), w()),
        (p + "merger.linear_fc2.weight", (out_hidden, vh * m2), w()),
        (p + "merger.linear_fc2.bias", (out_hidden,), w()),
    ]
    for b in range(v["depth"]):
        q = "%sblocks.%d." % (p, b)
        specs += [
            (q + "norm1.weight", (vh,), ("normal_around", 1.0, 0.02)),
            (q + "norm1.bias", (vh,), w()),
            (q + "norm2.weight", (vh,), ("normal_around", 1.0, 0.02)),
            (q + "norm2.bias", (vh,), w()),
            (q + "attn.qkv.weight", (3 * vh, vh), w()),
            (q + "attn.qkv.bias", (3 * vh,), w()),
            (q + "attn.proj.weight", (vh, vh), w()),
            (q + "attn.proj.bias", (vh,), w()),
            (q + "mlp.linear_fc1.weight", (vi, vh), w()),
            (q + "mlp.linear_fc1.bias", (vi,), w()),
            (q + "mlp.linear_fc2.weight", (vh, vi), w()),
            (q + "mlp.linear_fc2.bias", (vh,), w()),
        ]
    return specs


def deepseek_tensor_specs(d):
    """(name, shape, init) of a DeepSeek-V2 / V3 checkpoint: MLA projections
    (q_proj, or q_a_proj + q_a_layernorm + q_b_proj; kv_a_proj_with_mqa [r + dr, H],
    kv_a_layernorm, kv_b_proj [Hq (dn + dv), r]), dense MLP on the first
    first_dense layers, then router (+ V3 e_score_correction_bias), experts one by
    one and the shared experts as one MLP of n_shared * Ie."""
    H, V, fam = d["H"], d["V"], d["family"]
    Hq, dn, dr, dv, r = d["Hq"], d["dn"], d["dr"], d["dv"], d["kv_lora"]
    emb_std = EMB_SCALE / math.sqrt(H)
    specs = []

    def lin(name, out_f, in_f, gain=1.0):
        specs.append((name, (out_f, in_f), ("normal", gain / math.sqrt(in_f))))

    def rms(name, n, std=PLAIN_NORM_STD):
        specs.append((name, (n,), ("normal_around", 1.0, std)))

    def mlp(pre, inter):
        lin(pre + "gate_proj.weight", inter, H)
        lin(pre + "up_proj.weight", inter, H)
        lin(pre + "down_proj.weight", H, inter, OUT_GAIN)

    specs.append(("model.embed_tokens.weight", (V, H), ("normal", emb_std)))
    for i in range(d["n_layers"]):
        lp = "model.layers.%d." % i
        rms(lp + "input_layernorm.weight", H)
        rms(lp + "post_attention_layernorm.weight", H)
        s = lp + "self_attn."
        if d["q_lora"]:
            lin(s + "q_a_proj.weight", d["q_lora"], H)
            rms(s + "q_a_layernorm.weight", d["q_lora"])
            lin(s + "q_b_proj.weight", Hq * (dn + dr), d["q_lora"])
        else:
            lin(s + "q_proj.weight", Hq * (dn + dr), H)
        lin(s + "kv_a_proj_with_mqa.weight", r + dr, H)
        rms(s + "kv_a_layernorm.weight", r)
        lin(s + "kv_b_proj.weight", Hq * (dn + dv), r)
        lin(s + "o_proj.weight", H, Hq * dv, OUT_GAIN)
        m = lp + "mlp."
        if i < d["first_dense"]:
            mlp(m, d["I"])
            continue
        lin(m + "gate.weight", d["E"], H)
        if fam == "deepseek_v3":
            specs.append((m + "gate.e_score_correction_bias", (d["E"],), ("normal", 0.05)))
        for e in range(d["E"]):
            mlp(m + "experts.%d." % e, d["Ie"])
        mlp(m + "shared_experts.", d["n_shared"] * d["Ie"])
    rms("model.norm.weight", H)
    if not d["tied"]:
        specs.append(("lm_head.weight", (V, H), ("normal", emb_std)))
    return sorted(specs, key=lambda s: s[0])


def storage_dtype(policy, name):
    """'F32' or 'BF16' for tensor `name` under a preset's dtype policy."""
    if policy == "f32" or name.endswith("e_score_correction_bias"):
        return "F32"
    if policy == "bf16-all":
        return "BF16"
    if name.endswith("A_log"):
        return "F32"
    if policy == "bf16-mixed" and (name.endswith("dt_bias") or name.endswith("norm.weight")
                                   or "layernorm" in name):
        return "F32"
    return "BF16"


def values(seed, name, shape, init, start=0, count=None):
    """float64 values of elements start..start+count of a tensor."""
    n = int(np.prod(shape)) if count is None else count
    kind = init[0]
    if kind == "normal":
        return randn(seed, name, n, start) * init[1]
    if kind == "normal_around":
        return init[1] + randn(seed, name, n, start) * init[2]
    if kind == "uniform":
        return init[1] + rand_uniform(seed, name, n) * (init[2] - init[1])
    if kind == "A_log":                    # A ~ uniform(1, 16); libm log per element
        u = rand_uniform(seed, name, n)
        return np.array([math.log(1.0 + 15.0 * x) for x in u], dtype=np.float64)
    raise ValueError("unknown init %r" % (init,))


def to_bytes(x64, dtype):
    """Little-endian bytes of float64 values stored as F32 or BF16 (round to nearest even)."""
    f32 = x64.astype("<f4")
    if dtype == "F32":
        return f32.tobytes()
    b = f32.view("<u4").astype(np.uint64)
    b = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return b.astype("<u2").tobytes()


# ---------------------------------------------------------------- safetensors

def write_safetensors(path, seed, specs, policy, chunk=1 << 23):
    """Stream tensors into a safetensors file (header: {"format": "pt"} metadata,
    tensors in name order, offsets contiguous, header padded to 8 bytes)."""
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, shape, _ in specs:
        dt = storage_dtype(policy, name)
        nbytes = int(np.prod(shape)) * (4 if dt == "F32" else 2)
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    hj = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for name, shape, init in specs:
            dt = storage_dtype(policy, name)
            n = int(np.prod(shape))
            for s in range(0, n, chunk):
                c = min(chunk, n - s)
                f.write(to_bytes(values(seed, name, shape, init, s, c)
                                 if init[0] in ("normal", "normal_around")
                                 else values(seed, name, shape, init)[s:s + c], dt))
    return off


# ---------------------------------------------------------------- json files

def dump_json(path, obj):
    """Write json as transformers does (indent 2, sorted keys, trailing newline)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def rope_parameters(d):
    """rope_parameters block; Qwen3.5 carries the (text-only: inert) MRoPE sections."""
    rp = {"partial_rotary_factor": 0.25, "rope_theta": 10000000.0, "rope_type": "default"}
    if d["family"] != "qwen3_next":
        half = int(d["hd"] * 0.25) // 2
        s3 = half // 3
        s1 = (half - s3) // 2
        rp["mrope_interleaved"] = True
        rp["mrope_section"] = [half - s1 - s3, s1, s3]   # [11, 11, 10] for hd 256
    return rp


def text_config(d, special):
    """Text-model keys as transformers 5.x saves them for this family."""
    c = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "eos_token_id": special["<|endoftext|>"],
        "head_dim": d["hd"],
        "hidden_act": "silu",
        "hidden_size": d["H"],
        "initializer_range": 0.02,
        "layer_types": list(d["layer_types"]),
        "linear_conv_kernel_dim": d["K"],
        "linear_key_head_dim": d["dk"],
        "linear_num_key_heads": d["Hk"],
        "linear_num_value_heads": d["Hv"],
        "linear_value_head_dim": d["dv"],
        "max_position_embeddings": 262144,
        "num_attention_heads": d["Hq"],
        "num_hidden_layers": d["n_layers"],
        "num_key_value_heads": d["Hkv"],
        "pad_token_id": None,
        "rms_norm_eps": 1e-06,
        "rope_parameters": rope_parameters(d),
        "tie_word_embeddings": d["tied"],
        "use_cache": True,
        "vocab_size": d["V"],
    }
    fam = d["family"]
    if fam in ("qwen3_5", "qwen3_next"):
        c["intermediate_size"] = d["I"]
    if fam in ("qwen3_5_moe", "qwen3_next"):
        c.update({"moe_intermediate_size": d["Ie"], "num_experts": d["E"],
                  "num_experts_per_tok": d["topk"], "output_router_logits": False,
                  "router_aux_loss_coef": 0.001,
                  "shared_expert_intermediate_size": d["Is"]})
    if fam == "qwen3_next":
        c.update({"decoder_sparse_step": d.get("decoder_sparse_step", 1),
                  "mlp_only_layers": list(d.get("mlp_only_layers", [])),
                  "norm_topk_prob": d.get("norm_topk_prob", True),
                  "bos_token_id": special["<|endoftext|>"],
                  "eos_token_id": special["<|im_end|>"]})
    c["model_type"] = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text",
                       "qwen3_next": "qwen3_next"}[fam]
    return c


def llama3_ids(d, special):
    """(bos_token_id, eos_token_id) of a preset with Llama 3's specials, as Meta's
    config.json has them: 3.1 stops on end_of_text, eom and eot; 3.0 Instruct's
    config names end_of_text only (its template's <|eot_id|> is in
    generation_config)."""
    bos, eos = special["<|begin_of_text|>"], special["<|end_of_text|>"]
    if d["chat"] == "llama-3.0":
        return bos, eos
    return bos, [eos, special["<|eom_id|>"], special["<|eot_id|>"]]


def plain_config(d, special):
    """config.json of a llama / qwen2 / qwen3 preset: what transformers 5.x
    save_pretrained writes, or with legacy_config the released 4.x layout."""
    fam = d["family"]
    if d.get("chat"):
        eot, im_end = llama3_ids(d, special)
    else:
        eot, im_end = special["<|endoftext|>"], special["<|im_end|>"]
    c = {
        "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                           "qwen3": "Qwen3ForCausalLM"}[fam]],
        "attention_dropout": 0.0,
        "bos_token_id": eot,
        "dtype": "float32" if d["dtype"] == "f32" else "bfloat16",
        "eos_token_id": im_end,
        "hidden_act": "silu",
        "hidden_size": d["H"],
        "initializer_range": 0.02,
        "intermediate_size": d["I"],
        "max_position_embeddings": d["max_pos"],
        "model_type": fam,
        "num_attention_heads": d["Hq"],
        "num_hidden_layers": d["n_layers"],
        "num_key_value_heads": d["Hkv"],
        "pad_token_id": None,
        "rms_norm_eps": d["rms_eps"],
        "tie_word_embeddings": d["tied"],
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": d["V"],
    }
    if fam in ("llama", "qwen3"):
        c["attention_bias"] = False
        c["head_dim"] = d["hd"]
    elif d["hd"] != d["H"] // d["Hq"]:
        raise ValueError("qwen2 has head_dim = hidden_size / num_attention_heads")
    if fam == "llama":
        c.update({"mlp_bias": False, "pretraining_tp": 1})
    else:
        c.update({"max_window_layers": d["n_layers"], "sliding_window": None,
                  "use_sliding_window": False})
    rs = d.get("rope_scaling")
    if d.get("legacy_config"):
        c["rope_theta"] = d["rope_theta"]
        c["rope_scaling"] = dict(rs) if rs else None
        c["torch_dtype"] = c.pop("dtype")
        c["transformers_version"] = LEGACY_TRANSFORMERS_VERSION
        if fam == "qwen2":
            c["sliding_window"] = d["max_pos"]   # inert: use_sliding_window is false
    else:
        rp = {"rope_theta": d["rope_theta"], "rope_type": "default"}
        rp.update(rs or {})
        c["rope_parameters"] = rp
        if fam != "llama":
            c["layer_types"] = list(d["layer_types"])
    return c


def deepseek_config(d, special):
    """config.json of a DeepSeek-V2 / V3 preset as transformers 5.x save_pretrained
    writes it (head_dim and qk_head_dim are derived keys it saves)."""
    fam, v3 = d["family"], d["family"] == "deepseek_v3"
    c = {
        "architectures": ["DeepseekV3ForCausalLM" if v3 else "DeepseekV2ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": special["<|endoftext|>"],
        "dtype": "float32" if d["dtype"] == "f32" else "bfloat16",
        "eos_token_id": special["<|im_end|>"],
        "first_k_dense_replace": d["first_dense"],
        "head_dim": d["dr"],
        "hidden_act": "silu",
        "hidden_size": d["H"],
        "initializer_range": 0.02,
        "intermediate_size": d["I"],
        "kv_lora_rank": d["kv_lora"],
        "max_position_embeddings": d["max_pos"],
        "model_type": fam,
        "moe_intermediate_size": d["Ie"],
        "n_group": d["n_group"],
        "n_routed_experts": d["E"],
        "n_shared_experts": d["n_shared"],
        "norm_topk_prob": d.get("norm_topk_prob", False),
        "num_attention_heads": d["Hq"],
        "num_experts_per_tok": d["topk"],
        "num_hidden_layers": d["n_layers"],
        "num_key_value_heads": d["Hkv"],
        "output_router_logits": False,
        "pad_token_id": None,
        "pretraining_tp": 1,
        "q_lora_rank": d["q_lora"],
        "qk_head_dim": d["dn"] + d["dr"],
        "qk_nope_head_dim": d["dn"],
        "qk_rope_head_dim": d["dr"],
        "rms_norm_eps": d["rms_eps"],
        "rope_parameters": dict(d["rope_parameters"]),
        "routed_scaling_factor": d["routed_scale"],
        "tie_word_embeddings": d["tied"],
        "topk_group": d["topk_group"],
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "v_head_dim": d["dv"],
        "vocab_size": d["V"],
    }
    if v3:
        c.update({"num_nextn_predict_layers": 1, "rope_interleave": True})
    else:
        c.update({"mlp_bias": False, "topk_method": d["topk_method"]})
    return c


def model_config(d, special):
    """The whole config.json."""
    fam = d["family"]
    if fam in DEEPSEEK:
        return deepseek_config(d, special)
    if fam in PLAIN:
        return plain_config(d, special)
    if fam in MAMBA:
        return mamba_config(d, special)
    dtype = "float32" if d["dtype"] == "f32" else "bfloat16"
    tc = text_config(d, special)
    if fam == "qwen3_next":
        tc.update({"architectures": ["Qwen3NextForCausalLM"], "dtype": dtype,
                   "transformers_version": TRANSFORMERS_VERSION})
        return tc
    v = dict(VISION)
    v.update({"hidden_act": "gelu_pytorch_tanh", "initializer_range": 0.02,
              "out_hidden_size": d["H"],
              "rope_parameters": {"rope_theta": 10000.0, "rope_type": "axial"},
              "model_type": fam + "_vision"})
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration" if fam == "qwen3_5"
                          else "Qwen3_5MoeForConditionalGeneration"],
        "dtype": dtype,
        # the real Qwen3.5 ids; no image/video token exists in this vocab
        "image_token_id": 248056,
        "model_type": fam,
        "text_config": tc,
        "tie_word_embeddings": d["tied"],
        "transformers_version": TRANSFORMERS_VERSION,
        "video_token_id": 248057,
        "vision_config": v,
        "vision_end_token_id": 248054,
        "vision_start_token_id": 248053,
    }


def generation_config(special, family="qwen3_5", chat=None):
    """generation_config.json in the shape Qwen (or Meta, for llama) ships (ids from
    our tokenizer)."""
    if chat:
        bos = special["<|begin_of_text|>"]
        eos = [special["<|end_of_text|>"], special["<|eot_id|>"]]
        if chat != "llama-3.0":
            eos.insert(1, special["<|eom_id|>"])
        return {"bos_token_id": bos, "do_sample": True, "eos_token_id": eos,
                "temperature": 0.6, "top_p": 0.9,
                "transformers_version": TRANSFORMERS_VERSION}
    eot, im_end = special["<|endoftext|>"], special["<|im_end|>"]
    if family == "llama":
        return {"bos_token_id": eot, "do_sample": True, "eos_token_id": [im_end, eot],
                "temperature": 0.6, "top_p": 0.9,
                "transformers_version": TRANSFORMERS_VERSION}
    return {"bos_token_id": eot, "do_sample": True, "eos_token_id": [im_end, eot],
            "pad_token_id": eot, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
            "transformers_version": TRANSFORMERS_VERSION}


# ---------------------------------------------------------------- driver

def make_model(out_root, preset):
    """Write out_root/<preset>/ and return its path."""
    p = PRESETS[preset]
    out = os.path.join(out_root, preset)
    os.makedirs(out, exist_ok=True)
    # the Qwen2/3/Next regex (and merges as "a b" strings) for every family but Qwen3.5
    variant = "qwen3_5" if p["family"] in ("qwen3_5", "qwen3_5_moe") else "qwen3_next"
    if p.get("chat"):
        # a Llama 3 instruct checkpoint: its specials and its released chat template
        with open(os.path.join(TEMPLATE_DIR, p["chat"] + ".jinja"), encoding="utf-8") as f:
            tok_path = make_tokenizer(out, variant, specials="llama3", chat_template=f.read())
    else:
        tok_path = make_tokenizer(out, variant)
    with open(tok_path, encoding="utf-8") as f:
        tj = json.load(f)
    special = {a["content"]: a["id"] for a in tj["added_tokens"]}
    n_tok = len(tj["model"]["vocab"]) + len(tj["added_tokens"])
    d = text_dims(p, n_tok)
    if d["V"] < n_tok:
        raise ValueError("%s: vocab %d smaller than the tokenizer (%d)" % (preset, d["V"], n_tok))
    specs = tensor_specs(d)
    write_safetensors(os.path.join(out, "model.safetensors"), "pic/" + preset, specs, d["dtype"])
    dump_json(os.path.join(out, "config.json"), model_config(d, special))
    dump_json(os.path.join(out, "generation_config.json"),
              generation_config(special, p["family"], p.get("chat")))
    return out


def describe(preset, vocab=None):
    """One line of dims for --list."""
    p = PRESETS[preset]
    lt = "".join("L" if t == L else "F" for t in p["layer_types"])
    s = ("%-16s %-11s H=%d layers=%s Hq/Hkv/hd=%d/%d/%d"
         % (preset, p["family"], p["H"], lt, p["Hq"], p["Hkv"], p["hd"]))
    if p["family"] in DEEPSEEK:
        s += " q_lora=%s kv_lora=%d dn/dr/dv=%d/%d/%d rope=%s" % (
            p["q_lora"], p["kv_lora"], p["dn"], p["dr"], p["dv"],
            p["rope_parameters"]["rope_type"])
    if p["family"] in MAMBA:
        s += " Hm/G/N/K=%d/%d/%d/%d chunk=%d" % (p["Hm"], p["G"], p["N"], p["K"], p["chunk"])
    elif p["family"] in PLAIN:
        s += " theta=%g eps=%g" % (p["rope_theta"], p["rms_eps"])
        if p.get("rope_scaling"):
            s += " rope=%s" % p["rope_scaling"]["rope_type"]
    else:
        s += " Hk/Hv/dk/dv=%d/%d/%d/%d" % (p["Hk"], p["Hv"], p["dk"], p["dv"])
    if "I" in p:
        s += " I=%d" % p["I"]
    if p.get("E"):
        s += " E=%d top%d Ie=%d Is=%d" % (p["E"], p["topk"], p["Ie"],
                                          p.get("Is", p.get("n_shared", 0) * p["Ie"]))
    s += " vocab=%s %s %s" % (p.get("vocab", "tok"), "tied" if p["tied"] else "untied",
                              p["dtype"])
    return s


def check():
    """Regenerate the fixture presets into a temp dir and byte-compare them with
    tests/fixtures/models/.  Returns the number of differing files."""
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for preset in FIXTURE_PRESETS:
            make_model(tmp, preset)
            a, b = os.path.join(tmp, preset), os.path.join(FIXTURE_DIR, preset)
            names = sorted(set(os.listdir(a)) | set(os.listdir(b) if os.path.isdir(b) else []))
            for n in names:
                fa, fb = os.path.join(a, n), os.path.join(b, n)
                same = (os.path.isfile(fa) and os.path.isfile(fb)
                        and filecmp.cmp(fa, fb, shallow=False))
                print("%s %s/%s" % ("ok  " if same else "DIFF", preset, n))
                bad += not same
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="parent directory; each preset goes to OUT/<preset>/")
    ap.add_argument("--preset", action="append", choices=sorted(PRESETS) + ["fixtures"],
                    help="preset to write (repeatable; 'fixtures' = all committed tiny "
                         "presets; default: demo)")
    ap.add_argument("--check", action="store_true",
                    help="byte-compare regenerated fixture models with the committed ones")
    ap.add_argument("--list", action="store_true", help="list presets")
    args = ap.parse_args(argv)
    if args.list:
        for k in PRESETS:
            print(describe(k))
        return 0
    if args.check:
        bad = check()
        print("make_models --check: %s" % ("all fixture models match" if not bad
                                           else "%d file(s) differ" % bad))
        return 1 if bad else 0
    if not args.out:
        ap.error("--out is required (or --check / --list)")
    presets = []
    for name in args.preset or ["demo"]:
        presets += FIXTURE_PRESETS if name == "fixtures" else [name]
    for name in presets:
        out = make_model(args.out, name)
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
        print("%s: %s (%.1f MB)" % (out, describe(name), size / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
