/*
 * sample.h — next-token selection: greedy, temperature, top-k, top-p, with
 * an own deterministic PRNG (same seed, same choices on every machine), and
 * the stop-token test.
 */
#ifndef PIC_SAMPLE_H
#define PIC_SAMPLE_H

#include <stdint.h>

#include "model.h"

typedef struct {
    float    temperature;   /* <= 0: greedy (argmax) */
    int      top_k;         /* <= 0: no top-k cut */
    float    top_p;         /* in (0, 1): nucleus cut; 0 or >= 1: none */
    uint64_t seed;
} pic_sample_params;

typedef struct {
    pic_sample_params p;
    uint64_t          rng;      /* xorshift64* state, never 0 */
    int               vocab;
    int              *idx;      /* (vocab) candidate ids */
    float            *prob;     /* (vocab) candidate probabilities */
} pic_sampler;

/* Prepare a sampler for logits of `vocab` entries; -1 on allocation failure. */
int pic_sampler_init(pic_sampler *s, const pic_sample_params *p, int vocab);

/* Free the sampler's buffers. */
void pic_sampler_free(pic_sampler *s);

/* Choose the next id from logits (vocab); logits are not modified. */
int pic_sampler_sample(pic_sampler *s, const float *logits);

/* Index of the largest logit (the lowest index among ties). */
int pic_sample_argmax(const float *logits, int n);

/* Next PRNG value (xorshift64*) and a uniform float in [0, 1). */
uint64_t pic_rng_next(uint64_t *state);
float    pic_rng_uniform(uint64_t *state);

/* 1 if id is one of the config's stop tokens (cfg->eos_ids), else 0. */
int pic_sample_is_stop(const pic_config *cfg, int id);

#endif /* PIC_SAMPLE_H */
