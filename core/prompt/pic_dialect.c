/*
 * pic_dialect.c — the chat-template dialects' names and end-of-turn tokens
 * (pic_template.h).
 */
#include <string.h>

#include "pic_template.h"

int
pic_template_dialect_parse(const char *name, pic_template_dialect *out)
{
    if (!strcmp(name, "qwen3") || !strcmp(name, "qwen3_next")
        || !strcmp(name, "qwen3-next")) {
        *out = PIC_TEMPLATE_QWEN3;
        return 0;
    }
    if (!strcmp(name, "qwen3.5") || !strcmp(name, "qwen3_5") || !strcmp(name, "qwen35")
        || !strcmp(name, "qwen3_5_moe")) {
        *out = PIC_TEMPLATE_QWEN3_5;
        return 0;
    }
    if (!strcmp(name, "chatml")) {
        *out = PIC_TEMPLATE_CHATML;
        return 0;
    }
    if (!strcmp(name, "smollm2")) {
        *out = PIC_TEMPLATE_SMOLLM2;
        return 0;
    }
    if (!strcmp(name, "llama3")) {
        *out = PIC_TEMPLATE_LLAMA3;
        return 0;
    }
    if (!strcmp(name, "llama3.1")) {
        *out = PIC_TEMPLATE_LLAMA3_1;
        return 0;
    }
    if (!strcmp(name, "llama3.2")) {
        *out = PIC_TEMPLATE_LLAMA3_2;
        return 0;
    }
    if (!strcmp(name, "mistral")) {
        *out = PIC_TEMPLATE_MISTRAL;
        return 0;
    }
    if (!strcmp(name, "mistral-nemo")) {
        *out = PIC_TEMPLATE_MISTRAL_NEMO;
        return 0;
    }
    return -1;
}

const char *
pic_template_dialect_name(pic_template_dialect d)
{
    switch (d) {
    case PIC_TEMPLATE_QWEN3_5:       return "qwen3.5";
    case PIC_TEMPLATE_CHATML:        return "chatml";
    case PIC_TEMPLATE_SMOLLM2:       return "smollm2";
    case PIC_TEMPLATE_LLAMA3:        return "llama3";
    case PIC_TEMPLATE_LLAMA3_1:      return "llama3.1";
    case PIC_TEMPLATE_LLAMA3_2:      return "llama3.2";
    case PIC_TEMPLATE_MISTRAL:       return "mistral";
    case PIC_TEMPLATE_MISTRAL_NEMO:  return "mistral-nemo";
    default:                         return "qwen3";
    }
}

const char *
pic_template_end_of_turn(pic_template_dialect d)
{
    switch (d) {
    case PIC_TEMPLATE_LLAMA3:
    case PIC_TEMPLATE_LLAMA3_1:
    case PIC_TEMPLATE_LLAMA3_2:
        return "<|eot_id|>";
    case PIC_TEMPLATE_MISTRAL:
    case PIC_TEMPLATE_MISTRAL_NEMO:
        return "</s>";
    default:
        return "<|im_end|>";
    }
}
