/*
 * arch_bamba.c — Bamba: Mamba2 mixers (MODEL.md §9) with GQA attention on
 * the layers attn_layer_indices lists (partial NeoX RoPE, 0.5 of head_dim
 * as transformers hard-codes it), plain x·w RMSNorms, a dense SwiGLU
 * feed_forward after pre_ff_layernorm on every layer.
 */
#include "arch.h"

static int
bamba_config(pic_cfg_ctx *c, pic_config *cfg)
{
    if (pic_cfg_refuse(c, c->tc, "attention_bias", "attention biases are not "
                       "implemented for bamba") != 0
        || pic_cfg_refuse(c, c->tc, "mlp_bias", "MLP biases are not implemented") != 0
        || pic_cfg_mamba_hybrid(c, cfg, 0.5) != 0)
    {
        return -1;
    }
    return pic_cfg_ffn(c, cfg, 0, 0);
}

static const char *const bamba_types[] = { "bamba", NULL };
static const char *const bamba_wrappers[] = { NULL };

const pic_arch_desc pic_arch_bamba = {
    .name = "bamba",
    .arch = PIC_ARCH_BAMBA,
    .model_types = bamba_types,
    .wrappers = bamba_wrappers,
    .dialect = PIC_TEMPLATE_CHATML,
    .config = bamba_config,
};
