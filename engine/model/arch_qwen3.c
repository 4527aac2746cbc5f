/*
 * arch_qwen3.c — Qwen3 (dense): every layer GQA attention whose q and k
 * are RMSNorm-ed per head (plain x·w) before full NeoX RoPE, a dense
 * SwiGLU MLP, plain RMSNorms; attention_bias puts biases on q, k, v and o.
 */
#include "arch.h"

static int
qwen3_config(pic_cfg_ctx *c, pic_config *cfg)
{
    int bias;

    cfg->attn_qk_norm = 1;
    if (pic_cfg_bool(c, c->tc, "attention_bias", &bias, 0) != 0
        || pic_cfg_refuse(c, c->tc, "use_sliding_window",
                          "sliding-window attention is not implemented") != 0
        || pic_cfg_attention_layers(c, cfg) != 0
        || pic_cfg_attention(c, cfg, 1.0, PIC_ROPE_SCALE_LINEAR | PIC_ROPE_SCALE_DYNAMIC
                                          | PIC_ROPE_SCALE_LLAMA3) != 0
        || pic_cfg_ffn(c, cfg, 0, 0) != 0)
    {
        return -1;
    }
    cfg->attn_qkv_bias = bias;
    cfg->attn_o_bias = bias;
    return 0;
}

static const char *const qwen3_types[] = { "qwen3", NULL };
static const char *const qwen3_wrappers[] = { NULL };

const pic_arch_desc pic_arch_qwen3 = {
    .name = "qwen3",
    .arch = PIC_ARCH_QWEN3,
    .model_types = qwen3_types,
    .wrappers = qwen3_wrappers,
    .dialect = PIC_TEMPLATE_QWEN3,
    .config = qwen3_config,
};
