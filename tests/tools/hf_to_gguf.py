"""hf_to_gguf.py — write a Llama-layout Hugging Face checkpoint directory as a GGUF
file the way llama.cpp's converter lays one out, for the engine's GGUF tests: tensor
names (token_embd, blk.N.attn_q, ...), q/k rows interleaved for ggml's rotary layout,
F32 tensors, the llama.* metadata keys, the tokenizer as tokenizer.ggml.* (byte-level
BPE) and, for a llama3 RoPE scaling, the per-frequency divisor table rope_freqs.weight
that llama.cpp's converter computes from the config (the published formula; the GGUF
file then carries no scaling parameters).

Usage: python tests/tools/hf_to_gguf.py DIR OUT.gguf [--pre qwen2]
Needs numpy and gguf (the test venv has them).
"""
import json
import math
import os
import sys

import gguf
import numpy as np

LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def interleave(w, heads):
    """HF's rotate-half rows of each head as ggml's adjacent pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]) \
        .swapaxes(1, 2).reshape(w.shape)


def llama3_factors(cfg, dim):
    """Per-frequency divisors of llama3 scaling (1 / the scale on each inv_freq)."""
    rs = cfg["rope_scaling"]
    base = cfg.get("rope_theta", 10000.0)
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    out = []
    for i in range(0, dim, 2):
        freq = 1.0 / (base ** (i / dim))
        wl = 2 * math.pi / freq
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def bf16_to_f32(a):
    if a.dtype == np.float32:
        return a
    return (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def load_raw(d):
    """name -> fp32 array, BF16 widened exactly."""
    import struct
    out = {}
    for name in sorted(os.listdir(d)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(d, name), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = json.loads(f.read(n))
            data = f.read()
        for k, v in head.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            dt = {"BF16": np.uint16, "F32": np.float32, "F16": np.float16}[v["dtype"]]
            arr = np.frombuffer(data[a:b], dtype=dt).reshape(v["shape"])
            out[k] = bf16_to_f32(arr) if v["dtype"] == "BF16" else arr.astype(np.float32)
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    pre = sys.argv[sys.argv.index("--pre") + 1] if "--pre" in sys.argv else "qwen2"
    cfg = json.load(open(os.path.join(src, "config.json")))
    tok = json.load(open(os.path.join(src, "tokenizer.json")))
    tcfg = json.load(open(os.path.join(src, "tokenizer_config.json")))
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    w = gguf.GGUFWriter(dst, "llama")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(H)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    # byte-level BPE: the vocabulary by id, padded to the model's size
    vocab = {v: k for k, v in tok["model"]["vocab"].items()}
    for a in tok.get("added_tokens", []):
        vocab[a["id"]] = a["content"]
    tokens = [vocab.get(i, "[PAD%d]" % i) for i in range(cfg["vocab_size"])]
    types = [gguf.TokenType.CONTROL if any(a["id"] == i for a in tok.get("added_tokens", []))
             else gguf.TokenType.NORMAL if i in vocab else gguf.TokenType.UNUSED
             for i in range(cfg["vocab_size"])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if cfg.get("bos_token_id") is not None:
        w.add_bos_token_id(cfg["bos_token_id"])
    eos = cfg.get("eos_token_id")
    if eos is not None:
        w.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)
    if tcfg.get("chat_template"):
        w.add_chat_template(tcfg["chat_template"])

    t = load_raw(src)
    for k, a in sorted(t.items()):
        if k == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif k == "model.norm.weight":
            name = "output_norm.weight"
        elif k == "lm_head.weight":
            name = "output.weight"
        else:
            parts = k.split(".")
            layer, rest = int(parts[2]), ".".join(parts[3:])
            name = "blk.%d.%s" % (layer, LAYER[rest])
            if rest == "self_attn.q_proj.weight":
                a = interleave(a, nh)
            elif rest == "self_attn.k_proj.weight":
                a = interleave(a, nkv)
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_factors(cfg, hd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
