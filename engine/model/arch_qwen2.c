/*
 * arch_qwen2.c — Qwen2 / Qwen2.5: every layer GQA attention with biases on
 * q, k and v (never o), full NeoX RoPE, a dense SwiGLU MLP, plain
 * RMSNorms.
 */
#include "arch.h"

static int
qwen2_config(pic_cfg_ctx *c, pic_config *cfg)
{
    cfg->attn_qkv_bias = 1;
    if (pic_cfg_refuse(c, c->tc, "use_sliding_window",
                       "sliding-window attention is not implemented") != 0
        || pic_cfg_attention_layers(c, cfg) != 0
        || pic_cfg_attention(c, cfg, 1.0, PIC_ROPE_SCALE_LINEAR | PIC_ROPE_SCALE_DYNAMIC
                                          | PIC_ROPE_SCALE_LLAMA3) != 0)
    {
        return -1;
    }
    return pic_cfg_ffn(c, cfg, 0, 0);
}

static const char *const qwen2_types[] = { "qwen2", NULL };
static const char *const qwen2_wrappers[] = { NULL };

const pic_arch_desc pic_arch_qwen2 = {
    .name = "qwen2",
    .arch = PIC_ARCH_QWEN2,
    .model_types = qwen2_types,
    .wrappers = qwen2_wrappers,
    .dialect = PIC_TEMPLATE_QWEN3,
    .config = qwen2_config,
};
