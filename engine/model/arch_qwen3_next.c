/*
 * arch_qwen3_next.c — Qwen3-Next: the hybrid of Gated DeltaNet and gated
 * attention with its keys at the top level, MoE on the layers
 * decoder_sparse_step and mlp_only_layers pick (top-k renormalised only
 * when norm_topk_prob), and in_proj_qkvz / in_proj_ba that the loader
 * unpacks into the Qwen3.5 layout (MODEL.md §3.1).
 */
#include "arch.h"

static int
qwen3_next_config(pic_cfg_ctx *c, pic_config *cfg)
{
    int any_lin = 0, any_full = 0;

    cfg->norm_offset = 1;
    cfg->attn_gate = 1;
    cfg->attn_qk_norm = 1;
    if (pic_cfg_refuse(c, c->tc, "attention_bias", "attention biases are not part of "
                       "this architecture") != 0
        || pic_cfg_hybrid_layers(c, cfg) != 0)
    {
        return -1;
    }
    for (int i = 0; i < cfg->n_layers; i++) {
        any_lin |= cfg->layer_type[i] == PIC_LAYER_LINEAR;
        any_full |= cfg->layer_type[i] == PIC_LAYER_FULL;
    }
    if ((any_full && pic_cfg_attention(c, cfg, 0.25, 0) != 0)
        || (any_lin && pic_cfg_gdn(c, cfg) != 0))
    {
        return -1;
    }
    return pic_cfg_ffn(c, cfg, 1, 0);
}

static const char *const qwen3_next_types[] = { "qwen3_next", NULL };
static const char *const qwen3_next_wrappers[] = { NULL };

const pic_arch_desc pic_arch_qwen3_next = {
    .name = "qwen3_next",
    .arch = PIC_ARCH_QWEN3_NEXT,
    .model_types = qwen3_next_types,
    .wrappers = qwen3_next_wrappers,
    .dialect = PIC_TEMPLATE_QWEN3,
    .config = qwen3_next_config,
};
