/*
 * checkpoint.h — what a model path names, for every part that opens one:
 * a Hugging Face checkpoint directory (config.json, tokenizer.json,
 * tokenizer_config.json, *.safetensors) or a GGUF file (gguf_model.h).
 */
#ifndef PIC_CHECKPOINT_H
#define PIC_CHECKPOINT_H

#include <stddef.h>

#include "model.h"
#include "pic_template.h"
#include "tokenizer.h"

/* The tokenizer of the checkpoint at path; NULL + err. */
pic_tokenizer *pic_checkpoint_tokenizer(const char *path, char *err, size_t errlen);

/* The config of the checkpoint at path (no weights read); 0, or -1 + err. */
int pic_checkpoint_config(const char *path, pic_config *cfg, char *err, size_t errlen);

/* The chat template dialect that renders what the checkpoint's own template
 * renders: the architecture's, checked against the checkpoint's template
 * text where it has one (a Llama-family checkpoint must ship a ChatML
 * template; another is refused by name until its dialect exists).  0, or
 * -1 + err. */
int pic_checkpoint_dialect(const char *path, pic_template_dialect *d, char *err,
                           size_t errlen);

/* Where the checkpoint's seam calibration lives (pic-engine calibrate writes
 * it, serve reads it): DIR/pic_calibration.json for a directory, NAME's
 * directory/NAME-without-.gguf.pic_calibration.json for a GGUF file. */
void pic_checkpoint_calibration_path(const char *path, char *out, size_t n);

#endif /* PIC_CHECKPOINT_H */
