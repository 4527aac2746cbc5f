/*
 * model.h — a decoder's configuration and weights (MODEL.md §1–§2): the
 * hybrid Qwen3.5 / Qwen3-Next and the all-attention transformers (Llama,
 * Qwen3, Qwen2), one layer list whose mixers are Gated DeltaNet or
 * attention and whose FFNs are dense or MoE.
 *
 * The loader (model_load.c) fills these from a Hugging Face checkpoint
 * directory, the architecture's file (arch_*.c) saying which keys and
 * tensors; the forward pass (forward.c) only reads them.  The big
 * projection matrices are pic_wmat (fp32, bf16 or q8 blocks, as
 * pic_weights_choose picks; pic_kernels.h), the small ones (norms, conv,
 * gates, router) plain fp32; all row-major [out, in] as stored (y = W x),
 * already normalised to the Qwen3.5 GDN layout (a Qwen3-Next in_proj_qkvz/ba
 * is unpacked at load time, MODEL.md §3.1).
 */
#ifndef PIC_MODEL_H
#define PIC_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "pic_kernels.h"

#define PIC_MAX_LAYERS 128

/* The architectures (arch.h: one file each, arch_*.c). */
typedef enum {
    PIC_ARCH_QWEN3_NEXT = 0,    /* model_type qwen3_next: keys at top level */
    PIC_ARCH_QWEN3_5,           /* qwen3_5 / qwen3_5_moe: keys in text_config */
    PIC_ARCH_LLAMA,             /* llama, mistral: plain GQA attention */
    PIC_ARCH_QWEN3,             /* qwen3: GQA with per-head q/k RMSNorm */
    PIC_ARCH_QWEN2,             /* qwen2: GQA with q/k/v biases */
    PIC_ARCH_DEEPSEEK_V2,       /* deepseek_v2: MLA, softmax-routed MoE */
    PIC_ARCH_DEEPSEEK_V3,       /* deepseek_v3 (Kimi, GLM): MLA, sigmoid-routed MoE */
    PIC_ARCH_BAMBA,             /* bamba: Mamba2 + GQA attention */
    PIC_ARCH_GRANITEMOEHYBRID,  /* granitemoehybrid (Granite 4.0-H): Mamba2 +
                                 * attention, multipliers, MoE + shared MLP */
} pic_arch;

/* The mixer of a layer.  Attention comes in the variants the config's
 * attn_* flags name (gate, q/k norm, biases); every attention layer keeps
 * K and V per position, every linear layer a recurrent state. */
typedef enum {
    PIC_LAYER_LINEAR = 0,       /* Gated DeltaNet */
    PIC_LAYER_FULL,             /* full (causal softmax) attention */
    PIC_LAYER_MAMBA2,           /* Mamba2 (SSD) mixer, MODEL.md §9 */
} pic_layer_type;

/* 1 for the layers that carry a recurrent state (S and a conv window in
 * pic_state) instead of a K/V cache: Gated DeltaNet and Mamba2. */
static inline int
pic_layer_recurrent(pic_layer_type t)
{
    return t == PIC_LAYER_LINEAR || t == PIC_LAYER_MAMBA2;
}

typedef struct {
    pic_arch arch;
    char     model_type[32];
    int      hidden;            /* H */
    int      n_layers;
    int      vocab;             /* V */
    int      intermediate;      /* dense MLP I */
    float    rms_eps;
    int      tie_embeddings;
    pic_layer_type layer_type[PIC_MAX_LAYERS];

    /* full attention */
    int      n_q_heads;         /* Hq */
    int      n_kv_heads;        /* Hkv */
    int      head_dim;          /* hd */
    int      rotary_dim;        /* hd * partial_rotary_factor */
    float    rope_theta;
    pic_rope rope;              /* the frequencies every rope op turns by */
    int      attn_gate;         /* q_proj rows [q_h | gate_h] per head; the
                                 * output is σ(gate)-gated (Qwen3.5, Next) */
    int      attn_qk_norm;      /* per-head RMSNorm of q and k before RoPE */
    int      attn_qkv_bias;     /* q/k/v projections carry biases */
    int      attn_o_bias;       /* o_proj carries a bias */
    int      norm_offset;       /* 1: every RMSNorm weight zero-centred,
                                 * x·(1+w) (Qwen3.5, Next); 0: x·w */

    /* multi-head latent attention (mla != 0, MODEL.md §4.2): every
     * attention layer caches one latent row per position, [k_pe (dr) |
     * c_KV (r)], and head_dim / n_kv_heads are unused */
    int      mla;
    int      q_lora_rank;       /* qr (0: q_proj straight from x) */
    int      kv_lora_rank;      /* r */
    int      qk_nope_dim;       /* dn */
    int      qk_rope_dim;       /* dr (= rope.dim) */
    int      v_head_dim;        /* dv */
    int      mla_hdp;           /* max(dn+dr, dv): the padded head of the
                                 * expanded prefill (the attention op) */
    float    mla_scale;         /* softmax scale: (dn+dr)^-1/2 · mscale² */
    float    rope_attn_factor;  /* yarn's attention factor on cos and sin */
    int      mla_interleave;    /* rotary pairs (2i, 2i+1) on disk (V2, V3's
                                 * rope_interleave): de-interleaved at load */

    /* gated deltanet */
    int      lin_k_heads;       /* Hk */
    int      lin_v_heads;       /* Hv */
    int      lin_k_dim;         /* dk */
    int      lin_v_dim;         /* dv */
    int      conv_kernel;       /* K */

    /* MoE (n_experts == 0: dense everywhere) */
    int      n_experts;         /* E */
    int      n_experts_per_tok; /* top-k */
    int      moe_intermediate;  /* Ie */
    int      shared_intermediate; /* Is (0: no shared expert) */
    int      norm_topk_prob;
    int      layer_is_moe[PIC_MAX_LAYERS];
    /* DeepSeek routing (moe_route_grouped; moe_grouped 0: moe_route) */
    int      moe_grouped;
    int      moe_sigmoid;       /* 1: sigmoid scores + correction bias (V3),
                                 * 0: softmax (V2) */
    int      moe_groups;        /* n_group (1: no group limit) */
    int      moe_topk_groups;   /* topk_group */
    float    moe_scale;         /* routed_scaling_factor */

    int      max_position;      /* max_position_embeddings */
    int      eos_ids[4];        /* stop tokens from config (-1 unused) */

    /* Mamba2 (layer_type == PIC_LAYER_MAMBA2; ssm_heads 0: none).  The
     * recurrent state's shape is also in the GDN fields above, so that
     * every state consumer (pic_state, checkpoints, entries) sizes it the
     * same way: lin_v_heads = ssm_heads, lin_k_heads = ssm_groups,
     * lin_k_dim = ssm_head_dim, lin_v_dim = ssm_state, conv_kernel = K;
     * S per head is (P, N) and the conv runs over I + 2·G·N channels. */
    int      ssm_heads;         /* Hm */
    int      ssm_head_dim;      /* P (Hm·P = I, the mixer's inner width) */
    int      ssm_state;         /* N */
    int      ssm_groups;        /* G: heads h·G/Hm share B, C (Hm % G == 0) */
    int      ssm_chunk;         /* mamba_chunk_size (the SSD grid) */
    int      ssm_conv_bias;     /* conv1d carries a bias */
    float    ssm_dt_min;        /* dt clamped to [min, max] (time_step_limit) */
    float    ssm_dt_max;
    /* Granite's scalars (1.0 elsewhere; 0 read as 1) */
    float    embed_mult;        /* embeddings × this */
    float    resid_mult;        /* every mixer and FFN output × this */
    float    attn_scale;        /* softmax scale (0: 1/sqrt(hd)) */
    float    logits_div;        /* logits ÷ this */
    int      rope_none;         /* attention without positions (nope) */
} pic_config;

/* The attention cache of a layer: heads × slots × K row width, and the V
 * row width (0: no V cache).  GQA: Hkv, hd, hd; MLA: 1, dr + r, 0 (the
 * latent row [k_pe | c_KV] is the K row; V comes from it). */
static inline int
pic_config_cache_heads(const pic_config *c)
{
    return c->mla ? 1 : c->n_kv_heads;
}

static inline int
pic_config_cache_kdim(const pic_config *c)
{
    return c->mla ? c->qk_rope_dim + c->kv_lora_rank : c->head_dim;
}

static inline int
pic_config_cache_vdim(const pic_config *c)
{
    return c->mla ? 0 : c->head_dim;
}

/* GDN conv channels C = 2*Hk*dk + Hv*dv: q, k and v go through the conv. */
static inline int
pic_config_conv_ch(const pic_config *c)
{
    if (c->ssm_heads > 0) {             /* Mamba2: x (I), B and C (G·N each) */
        return c->ssm_heads * c->ssm_head_dim + 2 * c->ssm_groups * c->ssm_state;
    }
    return 2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim;
}

/* GDN conv state width K-1: the past inputs the causal conv keeps per channel. */
static inline int
pic_config_conv_k1(const pic_config *c)
{
    return c->conv_kernel > 0 ? c->conv_kernel - 1 : 0;
}

typedef struct {
    pic_wmat gate;             /* (Ie, H) */
    pic_wmat up;               /* (Ie, H) */
    pic_wmat down;             /* (H, Ie) */
} pic_expert_weights;

typedef struct {
    float *input_norm;          /* (H) x·(1+w) or x·w (norm_offset) */
    float *post_norm;           /* (H) */

    /* GDN (layer_type == PIC_LAYER_LINEAR) — Qwen3.5 layout */
    pic_wmat in_qkv;            /* (2*Hk*dk + Hv*dv, H) rows [q | k | v], head-major */
    pic_wmat in_z;              /* (Hv*dv, H) */
    float *in_b;                /* (Hv, H) */
    float *in_a;                /* (Hv, H) */
    float *conv_w;              /* (C, K), C = 2*Hk*dk + Hv*dv */
    float *dt_bias;             /* (Hv) */
    float *A_log;               /* (Hv) */
    float *gdn_norm;            /* (dv) plain weight, shared by heads */
    pic_wmat out_proj;          /* (H, Hv*dv) */

    /* full attention (layer_type == PIC_LAYER_FULL) */
    pic_wmat wq;                /* (Hq*2*hd, H) per head [q (hd) | gate (hd)]
                                 * with attn_gate, else (Hq*hd, H) */
    pic_wmat wk;                /* (Hkv*hd, H) */
    pic_wmat wv;                /* (Hkv*hd, H) */
    pic_wmat wo;                /* (H, Hq*hd) */
    float *q_norm;              /* (hd) or NULL (no attn_qk_norm) */
    float *k_norm;              /* (hd) or NULL */
    float *bq;                  /* (Hq*hd) or NULL (no attn_qkv_bias) */
    float *bk;                  /* (Hkv*hd) or NULL */
    float *bv;                  /* (Hkv*hd) or NULL */
    float *bo;                  /* (H) or NULL (no attn_o_bias) */

    /* MLA (cfg.mla): q rows per head [q_pe (dr) | q_nope (dn)], scaled by
     * mla_scale·sqrt(mla_hdp) (q_pe also by rope_attn_factor²) and with
     * interleaved rotary pairs de-interleaved at load; wo (H, Hq*dv) */
    pic_wmat q_a;               /* (qr, H) or data NULL (no q_lora) */
    float *q_a_norm;            /* (qr) or NULL */
    pic_wmat q_b;               /* (Hq*(dr+dn), qr), or (Hq*(dr+dn), H) as q_proj */
    pic_wmat kv_a;              /* (dr + r, H) rows [k_pe | c_KV] */
    float *kv_a_norm;           /* (r) */
    pic_wmat kv_b;              /* (Hq*(dn+dv), r) per head [W_UK (dn) | W_UV (dv)] */

    /* dense MLP (layer_is_moe == 0) */
    pic_wmat mlp_gate;          /* (I, H) */
    pic_wmat mlp_up;            /* (I, H) */
    pic_wmat mlp_down;          /* (H, I) */

    /* MoE (layer_is_moe == 1) */
    float *router;              /* (E, H) */
    pic_expert_weights *experts;/* [E] */
    pic_expert_weights shared;  /* (Is, H)/(H, Is); data NULL if absent */
    float *shared_gate;         /* (1, H) or NULL */
    float *router_bias;         /* (E) e_score_correction_bias or NULL */

    /* Mamba2 (layer_type == PIC_LAYER_MAMBA2); I = Hm·P, C = I + 2·G·N */
    pic_wmat ssm_in_z;          /* (I, H) in_proj rows [0, I): the gate z */
    pic_wmat ssm_in_xbc;        /* (C, H) rows [I, I+C): x | B | C */
    pic_wmat ssm_in_dt;         /* (Hm, H) rows [I+C, I+C+Hm): dt */
    float *ssm_conv_w;          /* (C, K) */
    float *ssm_conv_b;          /* (C) or NULL (no ssm_conv_bias) */
    float *ssm_dt_bias;         /* (Hm) */
    float *ssm_A;               /* (Hm) A = −exp(A_log), made at load */
    float *ssm_D;               /* (Hm) skip */
    float *ssm_norm;            /* (I) gated RMSNorm weight, G groups */
    pic_wmat ssm_out;           /* (H, I) */
} pic_layer_weights;

typedef struct {
    pic_wmat embed;             /* (V, H) */
    float *final_norm;          /* (H) as input_norm */
    pic_wmat lm_head;           /* (V, H); data == embed's when tied */
    pic_layer_weights layers[PIC_MAX_LAYERS];
} pic_weights;

typedef struct pic_model {
    pic_config  cfg;
    pic_weights w;
    char        dir[4096];      /* checkpoint directory */
    uint64_t    fingerprint;    /* xxh64 over config + tensor bytes + tokenizer */
    size_t      weight_bytes;   /* bytes held for weights (all formats) */
    pic_wtype   wtype;          /* storage of the big matrices */
    int         xbf16;          /* --weights bf16dot: every BF16 matrix has
                                 * pic_wmat.xbf16 (x rounded to bf16) */
    void       *priv;           /* loader-owned storage (mmaps, buffers) */
    const pic_backend *be;      /* NULL: weights in host memory (the loader's);
                                 * else every weight pointer is be's memory
                                 * (pic_model_to_backend) */
    void       *dev;            /* pic_model_to_backend's allocations */
} pic_model;

/* How the big matrices are held (--weights). */
typedef enum {
    PIC_WEIGHTS_AUTO = 0,       /* bf16 when the checkpoint stores them all in
                                   bf16 (exact), else f32 */
    PIC_WEIGHTS_F32,
    PIC_WEIGHTS_BF16,
    PIC_WEIGHTS_Q8,             /* 8-bit blocks made at load (PIC_WTYPE_Q8) */
    PIC_WEIGHTS_BF16DOT,        /* bf16, and x rounded to bf16 at each of their
                                   matmuls (bf16 dot products, fp32 sums: what
                                   llama.cpp's BF16 computes; pic_wmat.xbf16) */
} pic_weights_format;

/* The --weights values, for messages: "auto, f32, bf16, bf16dot or q8". */
#define PIC_WEIGHTS_NAMES "auto, f32, bf16, bf16dot or q8"

/* "auto", "f32", "bf16", "q8" or "bf16dot" into *f; -1 for anything else. */
int pic_weights_parse(const char *s, pic_weights_format *f);

/* The format a load uses, in one place for every caller: name (an option),
 * else $PIC_WEIGHTS (the operator's default), else auto; on a device backend
 * (host 0) bf16 unless one of those names a format.  0, or -1 with err
 * naming the bad value. */
int pic_weights_choose(const char *name, int host, pic_weights_format *f, char *err,
                       size_t errlen);

/* The format m's big matrices were loaded as ("f32", "bf16", "bf16dot",
 * "q8"). */
const char *pic_model_weights_name(const pic_model *m);

/* Load a checkpoint directory with format $PIC_WEIGHTS (auto when unset or
 * bad: pic_weights_choose for a host backend); NULL on error with a message
 * naming the file and tensor in err.  Never aborts on bad input. */
pic_model *pic_model_load(const char *dir, char *err, size_t errlen);

/* pic_model_load with the big matrices held as f asks. */
pic_model *pic_model_load_as(const char *dir, pic_weights_format f,
                             char *err, size_t errlen);

/* What a load has done so far (pic_model_load_progress): the loading
 * thread writes the counters, any thread may read them with
 * pic_load_progress_get; another thread sets cancel to make the load fail
 * at its next tensor.  Totals cover the text model's tensors as the
 * safetensors headers list them (vision and MTP tensors are skipped). */
typedef enum {
    PIC_LOAD_OPENING = 0,       /* config.json, safetensors headers */
    PIC_LOAD_HASHING,           /* the fingerprint over every file */
    PIC_LOAD_TENSORS,           /* weights read and converted */
    PIC_LOAD_SETUP,             /* after the weights: the caller's (tokenizer,
                                 * caches, workers) */
} pic_load_phase;

typedef struct {
    uint64_t    bytes_done, bytes_total;
    uint32_t    tensors_done, tensors_total;
    int         phase;          /* atomic: pic_load_phase */
    int         cancel;         /* atomic: set to stop the load */
    const char *hold;           /* tests: after the first tensor, wait while
                                 * this file exists (NULL: never) */
} pic_load_progress;

/* pic_model_load_as that reports into p (NULL: as pic_model_load_as) and
 * prints progress lines to stderr: the totals, at most one line per
 * PIC_LOAD_LINE_MS while loading, and the counts at the end. */
pic_model *pic_model_load_progress(const char *dir, pic_weights_format f,
                                   pic_load_progress *p, char *err,
                                   size_t errlen);

#define PIC_LOAD_LINE_MS 250

/* A consistent-enough snapshot of p's counters into out (any thread). */
void pic_load_progress_get(const pic_load_progress *p, pic_load_progress *out);

/* "opening", "hashing", "tensors" or "setup". */
const char *pic_load_phase_name(int phase);

/* A checkpoint's model id: its last path component (trailing '/'
 * ignored; a GGUF file's without ".gguf"), into out (n bytes, truncated). */
void pic_model_dir_name(const char *dir, char *out, size_t n);

/* Release everything pic_model_load allocated (NULL is fine). */
void pic_model_free(pic_model *m);

/* A copy of m whose weights live in be's memory, uploaded once as m holds
 * them (load m with PIC_WEIGHTS_BF16 for bf16 on a GPU; tied lm_head shares
 * the embedding); m stays valid and owned by the caller.  be->host: NULL +
 * err (use m itself).  Free with pic_model_free.  NULL + err on OOM. */
pic_model *pic_model_to_backend(const pic_model *m, const pic_backend *be,
                                char *err, size_t errlen);

/* Free the backend memory and host arrays pic_model_to_backend gave m
 * (pic_model_free calls it; m itself stays). */
void pic_model_backend_release(pic_model *m);

#endif /* PIC_MODEL_H */
