/*
 * arch_llama.c — Llama (and Mistral, which is Llama without a sliding
 * window in force): every layer GQA attention with full NeoX RoPE and a
 * dense SwiGLU MLP; RMSNorms are plain x·w; tied or untied embeddings.
 * RoPE scalings as transformers defines them: linear, dynamic (exact below
 * max_position_embeddings, which the engine never passes) and llama3.
 * attention_bias puts biases on q, k, v and o.
 */
#include "arch.h"

#include <string.h>

static int
llama_config(pic_cfg_ctx *c, pic_config *cfg)
{
    int bias, window;

    if (pic_cfg_bool(c, c->tc, "attention_bias", &bias, 0) != 0
        || pic_cfg_refuse(c, c->tc, "mlp_bias", "MLP biases are not implemented") != 0
        || pic_cfg_attention_layers(c, cfg) != 0
        || pic_cfg_attention(c, cfg, 1.0,
                             PIC_ROPE_SCALE_LINEAR | PIC_ROPE_SCALE_DYNAMIC
                             | PIC_ROPE_SCALE_LLAMA3) != 0
        || pic_cfg_ffn(c, cfg, 0, 0) != 0)
    {
        return -1;
    }
    cfg->attn_qkv_bias = bias;
    cfg->attn_o_bias = bias;
    /* a window at least the context long masks nothing */
    if (strcmp(cfg->model_type, "mistral") == 0
        && (pic_cfg_int(c, c->tc, "sliding_window", &window, 1, 1 << 30, 0, 1 << 30) != 0
            || window < cfg->max_position))
    {
        pic_cfg_err(c, "'sliding_window' shorter than max_position_embeddings: "
                    "sliding-window attention is not implemented");
        return -1;
    }
    return 0;
}

static const char *const llama_types[] = { "llama", "mistral", NULL };
static const char *const llama_wrappers[] = { NULL };

const pic_arch_desc pic_arch_llama = {
    .name = "llama",
    .arch = PIC_ARCH_LLAMA,
    .model_types = llama_types,
    .wrappers = llama_wrappers,
    .dialect = PIC_TEMPLATE_CHATML,
    .config = llama_config,
};
