/*
 * arch.c — the table of architectures (arch.h).
 */
#include "arch.h"

#include <stdio.h>
#include <string.h>

static const pic_arch_desc *const pic_archs[] = {
    &pic_arch_qwen3_next, &pic_arch_qwen3_5, &pic_arch_llama, &pic_arch_qwen3,
    &pic_arch_qwen2, &pic_arch_deepseek_v2, &pic_arch_deepseek_v3, &pic_arch_bamba,
    &pic_arch_granitemoehybrid,
};

#define PIC_N_ARCHS (sizeof(pic_archs) / sizeof(pic_archs[0]))

const pic_arch_desc *
pic_arch_find(const char *model_type)
{
    for (size_t i = 0; i < PIC_N_ARCHS; i++) {
        for (const char *const *t = pic_archs[i]->model_types; *t != NULL; t++) {
            if (strcmp(*t, model_type) == 0) {
                return pic_archs[i];
            }
        }
    }
    return NULL;
}

const pic_arch_desc *
pic_arch_of(pic_arch arch)
{
    for (size_t i = 0; i < PIC_N_ARCHS; i++) {
        if (pic_archs[i]->arch == arch) {
            return pic_archs[i];
        }
    }
    return pic_archs[0];
}

void
pic_arch_list(char *out, size_t n)
{
    size_t o = 0;

    if (n == 0) {
        return;
    }
    out[0] = '\0';
    for (size_t i = 0; i < PIC_N_ARCHS; i++) {
        for (const char *const *t = pic_archs[i]->model_types; *t != NULL && o < n; t++) {
            int k = snprintf(out + o, n - o, "%s%s", o ? ", " : "", *t);

            o += k > 0 ? (size_t) k : 0;
        }
    }
}

int
pic_arch_is_wrapper(const pic_arch_desc *a, const char *model_type)
{
    for (const char *const *t = a->wrappers; *t != NULL; t++) {
        if (strcmp(*t, model_type) == 0) {
            return 1;
        }
    }
    return 0;
}
