/*
 * arch_qwen3_5.c — Qwen3.5 (dense and MoE): the hybrid of Gated DeltaNet
 * and gated attention (MODEL.md §3–§4).  The released wrappers (qwen3_5,
 * qwen3_5_moe) nest the text model's keys under text_config; a text-only
 * save keeps them at the top level.  RMSNorms are zero-centred, x·(1+w);
 * q_proj carries the output gate; partial RoPE (0.25 by default); every
 * MoE layer renormalises its top-k weights.
 */
#include "arch.h"

#include <string.h>

static int
qwen3_5_config(pic_cfg_ctx *c, pic_config *cfg)
{
    const cJSON *tmt = cJSON_GetObjectItemCaseSensitive(c->tc, "model_type");
    int          moe = strcmp(cfg->model_type, "qwen3_5_moe") == 0
                       || strcmp(cfg->model_type, "qwen3_5_moe_text") == 0
                       || (cJSON_IsString(tmt)
                           && strcmp(tmt->valuestring, "qwen3_5_moe_text") == 0);

    return pic_cfg_hybrid(c, cfg, moe);
}

static const char *const qwen3_5_types[] = {
    "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", NULL,
};
static const char *const qwen3_5_wrappers[] = { "qwen3_5", "qwen3_5_moe", NULL };

const pic_arch_desc pic_arch_qwen3_5 = {
    .name = "qwen3_5",
    .arch = PIC_ARCH_QWEN3_5,
    .model_types = qwen3_5_types,
    .wrappers = qwen3_5_wrappers,
    .dialect = PIC_TEMPLATE_QWEN3_5,
    .config = qwen3_5_config,
};
