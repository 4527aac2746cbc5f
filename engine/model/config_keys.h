/*
 * config_keys.h — reading config.json's keys into a pic_config, for the
 * config parser (model_config.c) and the architectures (arch_*.c): typed,
 * range-checked key access and the parsers of the parts several
 * architectures share (attention and RoPE, Gated DeltaNet, layer lists,
 * dense and MoE FFNs).  Every failure names the file and the key.
 */
#ifndef PIC_CONFIG_KEYS_H
#define PIC_CONFIG_KEYS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "model.h"

/* generous upper bounds: products of any three stay far below 2^63 */
#define CFG_MAX_HIDDEN      65536
#define CFG_MAX_VOCAB       (1 << 22)
#define CFG_MAX_HEADS       1024
#define CFG_MAX_HEAD_DIM    4096
#define CFG_MAX_INTER       (1 << 20)
#define CFG_MAX_EXPERTS     4096
#define CFG_MAX_CONV        64

/* The RoPE scalings an architecture accepts (pic_cfg_attention). */
#define PIC_ROPE_SCALE_LINEAR   1   /* positions divided by factor */
#define PIC_ROPE_SCALE_DYNAMIC  2   /* NTK past max_position: exact below it */
#define PIC_ROPE_SCALE_LLAMA3   4   /* Llama 3.1's per-band frequencies */
#define PIC_ROPE_SCALE_YARN     8   /* YaRN: ramped interpolation, attention
                                     * factor into cfg->rope_attn_factor */

typedef struct {
    const cJSON *tc;                /* object holding the text keys */
    const cJSON *root;              /* the whole config.json */
    const char  *path;
    char        *err;
    size_t       errlen;
} pic_cfg_ctx;

/* err ← "pic_config_parse: <path>: " + the formatted message. */
void pic_cfg_err(pic_cfg_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* obj[key] as an int in [lo, hi]; def when absent (required: an error).
 * 0, or -1 + err. */
int pic_cfg_int(pic_cfg_ctx *c, const cJSON *obj, const char *key, int *out,
                int lo, int hi, int required, int def);

/* obj[key] as a finite double in (lo, hi]; def when absent. */
int pic_cfg_num(pic_cfg_ctx *c, const cJSON *obj, const char *key, double *out,
                double lo, double hi, double def);

/* obj[key] as a flag (true/false or 0/1); def when absent. */
int pic_cfg_bool(pic_cfg_ctx *c, const cJSON *obj, const char *key, int *out,
                 int def);

/* -1 + err when obj[key] is present, not null and not false/0: a setting
 * the architecture does not implement, refused by name (why says why). */
int pic_cfg_refuse(pic_cfg_ctx *c, const cJSON *obj, const char *key,
                   const char *why);

/* layer_types (linear_attention / full_attention) or full_attention_interval
 * (default 4) into cfg->layer_type. */
int pic_cfg_hybrid_layers(pic_cfg_ctx *c, pic_config *cfg);

/* Every layer attention; layer_types, when given, may only say
 * full_attention (or sliding_attention with no window in force). */
int pic_cfg_attention_layers(pic_cfg_ctx *c, pic_config *cfg);

/* Heads, head_dim (default hidden / heads) and RoPE: rope_theta (default
 * 10000), partial_rotary_factor (default prf), the scalings in scalings
 * (PIC_ROPE_SCALE_*; any other rope_type is refused by name) into
 * cfg->rope. */
int pic_cfg_attention(pic_cfg_ctx *c, pic_config *cfg, double prf, int scalings);

/* RoPE over dim dims per head: rope_theta (default 10000) and the
 * scalings in scalings into cfg->rope (rope_attn_factor 1 unless YaRN
 * sets it); for layouts whose rotary part is not head_dim's share. */
int pic_cfg_rope(pic_cfg_ctx *c, pic_config *cfg, int dim, int scalings);

/* The rope dict that names the scaling (its rope_type or type) with *type
 * set, or NULL and *type "default". */
const cJSON *pic_cfg_rope_dict(pic_cfg_ctx *c, const char **type);

/* YaRN's mscale: 1 for factor <= 1, else 0.1·m·ln(factor) + 1. */
double pic_yarn_mscale(double factor, double m);

/* The Qwen3.5 / Qwen3-Next hybrid: (1+w) norms, gated attention with q/k
 * norms (no biases), GDN and attention layers, their keys, the FFN
 * (qwen35_moe: pic_cfg_ffn's). */
int pic_cfg_hybrid(pic_cfg_ctx *c, pic_config *cfg, int qwen35_moe);

/* The Gated DeltaNet keys (linear_*). */
int pic_cfg_gdn(pic_cfg_ctx *c, pic_config *cfg);

/* MoE keys: qwen35_moe (every layer MoE, top-k renormalised) or the
 * Qwen3-Next rules (decoder_sparse_step, mlp_only_layers, norm_topk_prob);
 * then intermediate_size when a layer is dense. */
int pic_cfg_ffn(pic_cfg_ctx *c, pic_config *cfg, int moe, int qwen35_moe);

/* --- Mamba2 hybrids (config_mamba.c) --- */

/* The Mamba2 mixer's keys (mamba_n_heads, _n_groups, _d_state, _d_head,
 * _d_conv, _expand, _chunk_size, _conv_bias; time_step_limit; proj biases
 * refused) into cfg->ssm_*, and the state's shape into the lin_* fields. */
int pic_cfg_mamba2(pic_cfg_ctx *c, pic_config *cfg);

/* Every layer Mamba2 but those layer_types names attention ("full_attention"
 * or "attention"; the others "linear_attention" or "mamba"), or, without
 * layer_types, those attn_layer_indices lists. */
int pic_cfg_mamba_layers(pic_cfg_ctx *c, pic_config *cfg);

/* A Mamba2 + attention hybrid with plain x·w norms: the layer list, the
 * attention keys (partial_rotary_factor default prf) where a layer attends,
 * the mixer's keys where one is Mamba2.  The FFN is the caller's. */
int pic_cfg_mamba_hybrid(pic_cfg_ctx *c, pic_config *cfg, double prf);

#endif /* PIC_CONFIG_KEYS_H */
