/*
 * sample.h — next-token selection: logit bias, repetition / presence /
 * frequency penalties, greedy, temperature, top-k, min-p, top-p, with an own
 * deterministic PRNG (same seed, same choices on every machine); the
 * model's log-probabilities of a chosen token and its best alternatives;
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
    float    min_p;         /* in (0, 1]: drop p < min_p * p_max; 0: none */
    float    presence_penalty;      /* logit -= pp once a token was generated */
    float    frequency_penalty;     /* logit -= fp * times it was generated */
    float    repetition_penalty;    /* HF: prompt and generated tokens, logit
                                     * > 0 divided, else multiplied; 0 or 1 off */
    const int32_t *bias_id;         /* (n_bias) logit_bias ids (< vocab) */
    const float   *bias;            /* (n_bias) added to their logits */
    int      n_bias;
    uint64_t seed;
} pic_sample_params;

typedef struct {
    pic_sample_params p;
    uint64_t          rng;      /* xorshift64* state, never 0 */
    int               vocab;
    int              *idx;      /* (vocab) candidate ids */
    float            *prob;     /* (vocab) candidate probabilities */
    float            *work;     /* (vocab) adjusted logits, or NULL: none needed */
    int32_t          *count;    /* (vocab) times generated, or NULL */
    uint8_t          *seen;     /* (vocab) in prompt or generated (repetition), or NULL */
} pic_sampler;

/* One token's log-probability and its best alternatives (OpenAI logprobs). */
typedef struct {
    int32_t id;
    float   logprob;
    int     n_top;
    int32_t top_id[20];     /* (n_top) best ids, descending */
    float   top_lp[20];     /* (n_top) their log-probabilities */
} pic_token_logprob;

/* Prepare a sampler for logits of `vocab` entries; -1 on allocation failure. */
int pic_sampler_init(pic_sampler *s, const pic_sample_params *p, int vocab);

/* Free the sampler's buffers. */
void pic_sampler_free(pic_sampler *s);

/* Choose the next id from logits (vocab); logits are not modified. */
int pic_sampler_sample(pic_sampler *s, const float *logits);

/* Record the prompt ids for the repetition penalty (no-op without it). */
void pic_sampler_prompt(pic_sampler *s, const int32_t *ids, int n);

/* Record a generated id (penalties count it). */
void pic_sampler_accept(pic_sampler *s, int id);

/* out = log_softmax(logits)[id] and the n_top (<= 20) most likely ids with
 * theirs (ties by lower id): the model's distribution, before bias,
 * penalties and temperature. */
void pic_sample_logprob(const float *logits, int vocab, int id, int n_top,
                        pic_token_logprob *out);

/* Index of the largest logit (the lowest index among ties). */
int pic_sample_argmax(const float *logits, int n);

/* Next PRNG value (xorshift64*) and a uniform float in [0, 1). */
uint64_t pic_rng_next(uint64_t *state);
float    pic_rng_uniform(uint64_t *state);

/* 1 if id is one of the config's stop tokens (cfg->eos_ids), else 0. */
int pic_sample_is_stop(const pic_config *cfg, int id);

#endif /* PIC_SAMPLE_H */
