/*
 * gguf_model.h — a GGUF file as the engine's checkpoint: what a Hugging
 * Face directory would hold, made from the file's metadata and tensors.
 *
 * config.json: the architecture's keys from {arch}.* metadata (model_type
 * llama, qwen2 or qwen3; any other general.architecture is refused by
 * name).  tokenizer.json: the byte-level BPE of tokenizer.ggml.* (tokens,
 * merges, token types; the pre-tokenizer from tokenizer.ggml.pre, known
 * types only).  Tensors: llama.cpp's names (blk.N.attn_q.weight, ...)
 * under transformers' (model.layers.N.self_attn.q_proj.weight, ...), in
 * transformers' shapes, read through dequantization to fp32; Llama's q and
 * k rows, which llama.cpp's converter interleaves per head for its rotary
 * layout, are read back in transformers' order.
 */
#ifndef PIC_GGUF_MODEL_H
#define PIC_GGUF_MODEL_H

#include <stddef.h>

#include "gguf.h"
#include "safetensors.h"

typedef struct {
    pic_gguf *g;                /* the open file */
    pic_st   *st;               /* its tensors under HF names (a view of g) */
    char     *config;           /* config.json text (config_len bytes, NUL-ended) */
    size_t    config_len;
    char     *tokenizer;        /* tokenizer.json text */
    size_t    tokenizer_len;
    char     *chat_template;    /* tokenizer.chat_template, or NULL */
    void     *priv;             /* the tensors' read descriptions */
} pic_gguf_ckpt;

/* 1 when path names a file that starts with the GGUF magic. */
int pic_gguf_is_file(const char *path);

/* Open path as a checkpoint into *out; 0, or -1 + err naming the key or
 * tensor (out left empty). */
int pic_gguf_ckpt_open(const char *path, pic_gguf_ckpt *out, char *err, size_t errlen);

/* The tokenizer.json text alone (malloc'd, *len bytes), or NULL + err. */
char *pic_gguf_tokenizer_json(const pic_gguf *g, size_t *len, char *err, size_t errlen);

/* Release what ckpt_open made (an empty one is fine). */
void pic_gguf_ckpt_close(pic_gguf_ckpt *c);

#endif /* PIC_GGUF_MODEL_H */
