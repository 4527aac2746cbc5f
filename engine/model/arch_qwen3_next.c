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
    return pic_cfg_hybrid(c, cfg, 0);
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
