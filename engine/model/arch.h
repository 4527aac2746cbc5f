/*
 * arch.h — the architectures the engine loads, as a table (arch.c), one
 * file per architecture (arch_*.c), as llama.cpp keeps src/models/.
 *
 * An architecture says which model_type values it answers to, where its
 * text keys live, and reads the keys that are its own: its layer kinds
 * (pic_cfg_hybrid_layers or pic_cfg_attention_layers), its attention
 * variant (gate, q/k norm, biases) and RoPE scalings, its FFN (dense or
 * MoE), and the settings it refuses by name.  The common keys (sizes,
 * eps, activation, tying, stop tokens) are model_config.c's.  The tensor
 * names follow from the layer kinds and flags (model_load.c): every
 * architecture here keeps Hugging Face's model.layers.<i>.* names.
 */
#ifndef PIC_ARCH_H
#define PIC_ARCH_H

#include "config_keys.h"
#include "pic_template.h"

typedef struct {
    const char          *name;          /* for messages: "llama" */
    pic_arch             arch;
    const char *const   *model_types;   /* the model_type values, NULL-ended */
    const char *const   *wrappers;      /* those whose text keys sit under
                                         * text_config (NULL-ended; may be
                                         * empty) */
    pic_template_dialect dialect;       /* the chat template it ships with */
    /* Its own keys into cfg (cfg->hidden, n_layers, vocab already read;
     * c->tc the text object); 0, or -1 + err naming the key. */
    int (*config)(pic_cfg_ctx *c, pic_config *cfg);
} pic_arch_desc;

/* The architecture answering to model_type, or NULL. */
const pic_arch_desc *pic_arch_find(const char *model_type);

/* The architecture of a loaded config (never NULL for a parsed one). */
const pic_arch_desc *pic_arch_of(pic_arch arch);

/* Every model_type the engine loads, comma-separated, into out (n bytes),
 * for the refusal of any other. */
void pic_arch_list(char *out, size_t n);

/* 1 when model_type nests its text keys under text_config. */
int pic_arch_is_wrapper(const pic_arch_desc *a, const char *model_type);

extern const pic_arch_desc pic_arch_qwen3_next;
extern const pic_arch_desc pic_arch_qwen3_5;
extern const pic_arch_desc pic_arch_llama;
extern const pic_arch_desc pic_arch_qwen3;
extern const pic_arch_desc pic_arch_qwen2;
extern const pic_arch_desc pic_arch_deepseek_v2;
extern const pic_arch_desc pic_arch_deepseek_v3;
extern const pic_arch_desc pic_arch_bamba;
extern const pic_arch_desc pic_arch_granitemoehybrid;

#endif /* PIC_ARCH_H */
