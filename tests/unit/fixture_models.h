/*
 * fixture_models.h — helpers shared by the unit tests that run the committed
 * tiny checkpoints (tests/fixtures/models, or $PIC_FIXTURES).
 */
#ifndef PIC_TEST_FIXTURE_MODELS_H
#define PIC_TEST_FIXTURE_MODELS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model.h"

#define PIC_TEST_UNUSED __attribute__((unused))

/* Every committed fixture preset: both tensor layouts, dense and MoE, real head shapes. */
static const char *const fixture_models[] PIC_TEST_UNUSED = {
    "tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next", "tiny-realheads"
};

/* Load fixture preset `name`; NULL (and a message) when it cannot be loaded. */
static PIC_TEST_UNUSED pic_model *
fixture_load(const char *name)
{
    const char *base = getenv("PIC_FIXTURES");
    char        dir[1024], err[512];
    pic_model  *m;

    snprintf(dir, sizeof(dir), "%s/%s", base ? base : "tests/fixtures/models", name);
    m = pic_model_load(dir, err, sizeof(err));
    if (m == NULL) {
        fprintf(stderr, "cannot load %s: %s\n", dir, err);
    }
    return m;
}

/* n deterministic token ids below vocab (malloc'd), varied by seed. */
static PIC_TEST_UNUSED int *
fixture_tokens(int n, int vocab, unsigned seed)
{
    int *t = malloc((size_t) n * sizeof(int));

    for (int i = 0; t != NULL && i < n; i++) {
        t[i] = (int) (((unsigned) i * 2654435761u + seed * 40503u + 7u) % (unsigned) vocab);
    }
    return t;
}

/* ‖a − b‖ / ‖b‖ in double (‖a − b‖ when b is zero). */
static PIC_TEST_UNUSED double
fixture_rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0.0, den = 0.0;

    for (size_t i = 0; i < n; i++) {
        num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
        den += (double) b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif
