/*
 * model_config.h — config.json (and tokenizer.json stop tokens) into a
 * validated pic_config (MODEL.md §1).
 */
#ifndef PIC_MODEL_CONFIG_H
#define PIC_MODEL_CONFIG_H

#include <stddef.h>

#include "model.h"
#include "pic_template.h"

/* Parse config.json text (len bytes, path for messages) into cfg and check
 * every range; -1 + err naming the file and key on error. */
int pic_config_parse(pic_config *cfg, const char *json, size_t len,
                     const char *path, char *err, size_t errlen);

/* Add id to cfg->eos_ids unless present or full; 0 added/present, -1 full. */
int pic_config_add_eos(pic_config *cfg, int id);

/* Add the ids of <|endoftext|> and of every dialect's end-of-turn token
 * (pic_template_end_of_turn: <|im_end|>, <|eot_id|>, </s>) from
 * tokenizer.json's added_tokens; number of ids found, -1 if the text is not
 * JSON. */
int pic_config_add_tokenizer_eos(pic_config *cfg, const char *json,
                                 size_t len);

/* The chat template of an architecture: qwen3.5 for PIC_ARCH_QWEN3_5, else
 * qwen3. */
pic_template_dialect pic_config_dialect(pic_arch arch);

#endif /* PIC_MODEL_CONFIG_H */
