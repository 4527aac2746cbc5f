/*
 * sample.c — next-token selection (sample.h).
 *
 * Order, as in common LLM servers: logit bias and penalties adjust the
 * logits (a copy), temperature scales them, top-k keeps the k largest,
 * softmax over the kept ones, min-p drops those below min_p times the most
 * likely one, top-p keeps
 * the smallest prefix (by descending probability) whose mass reaches p, and
 * one draw from the renormalised rest.  Ties order by id so that the result
 * never depends on sort stability.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

/* --- PRNG --- */

static uint64_t
pic_splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t
pic_rng_next(uint64_t *state)
{
    uint64_t x = *state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

float
pic_rng_uniform(uint64_t *state)
{
    return (float) (pic_rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

/* --- sampler --- */

int
pic_sampler_init(pic_sampler *s, const pic_sample_params *p, int vocab)
{
    memset(s, 0, sizeof(*s));
    s->p = *p;
    s->vocab = vocab;
    s->rng = pic_splitmix64(p->seed);
    if (s->rng == 0) {
        s->rng = 1;
    }
    s->idx = malloc((size_t) vocab * sizeof(int));
    s->prob = malloc((size_t) vocab * sizeof(float));
    if (vocab <= 0 || s->idx == NULL || s->prob == NULL) {
        pic_sampler_free(s);
        return -1;
    }
    if (p->n_bias > 0 || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f
        || (p->repetition_penalty > 0.0f && p->repetition_penalty != 1.0f)) {
        s->work = malloc((size_t) vocab * sizeof(float));
        s->count = calloc((size_t) vocab, sizeof(int32_t));
        s->seen = calloc((size_t) vocab, 1);
        if (s->work == NULL || s->count == NULL || s->seen == NULL) {
            pic_sampler_free(s);
            return -1;
        }
    }
    return 0;
}

void
pic_sampler_free(pic_sampler *s)
{
    free(s->idx);
    free(s->prob);
    free(s->work);
    free(s->count);
    free(s->seen);
    s->idx = NULL;
    s->prob = NULL;
    s->work = NULL;
    s->count = NULL;
    s->seen = NULL;
}

void
pic_sampler_prompt(pic_sampler *s, const int32_t *ids, int n)
{
    if (s->seen == NULL || ids == NULL) {
        return;
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < s->vocab) {
            s->seen[ids[i]] = 1;
        }
    }
}

void
pic_sampler_accept(pic_sampler *s, int id)
{
    if (s->count != NULL && id >= 0 && id < s->vocab) {
        s->count[id]++;
        s->seen[id] = 1;
    }
}

/* logits with bias and penalties applied, in s->work (or logits itself). */
static const float *
pic_sampler_adjust(pic_sampler *s, const float *logits)
{
    const pic_sample_params *p = &s->p;
    float                   *w = s->work;
    int                      rep = p->repetition_penalty > 0.0f
                                   && p->repetition_penalty != 1.0f;

    if (w == NULL) {
        return logits;
    }
    memcpy(w, logits, (size_t) s->vocab * sizeof(float));
    for (int i = 0; i < s->vocab; i++) {
        if (rep && s->seen[i]) {
            w[i] = w[i] > 0.0f ? w[i] / p->repetition_penalty : w[i] * p->repetition_penalty;
        }
        if (s->count[i] > 0) {
            w[i] -= p->frequency_penalty * (float) s->count[i] + p->presence_penalty;
        }
    }
    for (int i = 0; i < p->n_bias; i++) {
        if (p->bias_id[i] >= 0 && p->bias_id[i] < s->vocab) {
            w[p->bias_id[i]] += p->bias[i];
        }
    }
    return w;
}

void
pic_sample_logprob(const float *logits, int vocab, int id, int n_top,
                   pic_token_logprob *out)
{
    float  mx = -INFINITY;
    double sum = 0.0;
    float  lse;

    if (n_top > 20) {
        n_top = 20;
    }
    if (n_top > vocab) {
        n_top = vocab;
    }
    for (int i = 0; i < vocab; i++) {
        mx = logits[i] > mx ? logits[i] : mx;
    }
    for (int i = 0; i < vocab; i++) {
        sum += exp((double) (logits[i] - mx));
    }
    lse = mx + (float) log(sum);
    out->id = id;
    out->logprob = logits[id] - lse;
    out->n_top = 0;
    for (int i = 0; i < vocab && n_top > 0; i++) {
        float v = logits[i];
        int   j;

        /* a descending list of n_top; on ties the lower id stays first */
        if (out->n_top == n_top && v <= out->top_lp[n_top - 1]) {
            continue;
        }
        j = out->n_top < n_top ? out->n_top++ : n_top - 1;
        while (j > 0 && v > out->top_lp[j - 1]) {
            out->top_lp[j] = out->top_lp[j - 1];
            out->top_id[j] = out->top_id[j - 1];
            j--;
        }
        out->top_lp[j] = v;
        out->top_id[j] = i;
    }
    for (int i = 0; i < out->n_top; i++) {
        out->top_lp[i] -= lse;
    }
}

int
pic_sample_argmax(const float *logits, int n)
{
    int best = 0;

    for (int i = 1; i < n; i++) {
        if (logits[i] > logits[best]) {
            best = i;
        }
    }
    return best;
}

/* qsort over (prob, idx) pairs: descending probability, then ascending id */
typedef struct {
    float p;
    int   id;
} pic_cand;

static int
pic_cand_cmp(const void *a, const void *b)
{
    const pic_cand *x = a, *y = b;

    if (x->p != y->p) {
        return x->p > y->p ? -1 : 1;
    }
    return x->id - y->id;
}

/* Sort the n candidates of s (idx/prob) by descending probability. */
static int
pic_sort_cands(pic_sampler *s, int n)
{
    pic_cand *c = malloc((size_t) n * sizeof(*c));

    if (c == NULL) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        c[i].p = s->prob[i];
        c[i].id = s->idx[i];
    }
    qsort(c, n, sizeof(*c), pic_cand_cmp);
    for (int i = 0; i < n; i++) {
        s->prob[i] = c[i].p;
        s->idx[i] = c[i].id;
    }
    free(c);
    return 0;
}

int
pic_sampler_sample(pic_sampler *s, const float *logits)
{
    int   V = s->vocab, n = V;
    float inv_t, mx, sum;

    logits = pic_sampler_adjust(s, logits);
    if (s->p.temperature <= 0.0f || s->p.top_k == 1) {
        return pic_sample_argmax(logits, V);
    }
    inv_t = 1.0f / s->p.temperature;

    /* candidates = everything, or the top k (partial selection sort on a
     * heap would be faster; k is small and this runs once per token) */
    for (int i = 0; i < V; i++) {
        s->idx[i] = i;
        s->prob[i] = logits[i] * inv_t;
    }
    if (s->p.top_k > 0 && s->p.top_k < V) {
        int k = s->p.top_k;
        /* keep a descending list of the k best in the first k slots */
        pic_cand *best = malloc((size_t) k * sizeof(*best));
        int       cnt = 0;
        if (best == NULL) {
            return pic_sample_argmax(logits, V);
        }
        for (int i = 0; i < V; i++) {
            pic_cand c = { s->prob[i], i };
            if (cnt == k && pic_cand_cmp(&c, &best[k - 1]) >= 0) {
                continue;
            }
            int j = cnt < k ? cnt++ : k - 1;
            while (j > 0 && pic_cand_cmp(&c, &best[j - 1]) < 0) {
                best[j] = best[j - 1];
                j--;
            }
            best[j] = c;
        }
        for (int i = 0; i < k; i++) {
            s->idx[i] = best[i].id;
            s->prob[i] = best[i].p;
        }
        free(best);
        n = k;
    }

    /* softmax over the candidates (fp32, max subtracted) */
    mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        mx = s->prob[i] > mx ? s->prob[i] : mx;
    }
    sum = 0.0f;
    for (int i = 0; i < n; i++) {
        s->prob[i] = expf(s->prob[i] - mx);
        sum += s->prob[i];
    }
    for (int i = 0; i < n; i++) {
        s->prob[i] /= sum;
    }

    /* min-p: drop what is less likely than min_p times the best */
    if (s->p.min_p > 0.0f) {
        float pmax = 0.0f;
        int   m = 0;
        for (int i = 0; i < n; i++) {
            pmax = s->prob[i] > pmax ? s->prob[i] : pmax;
        }
        for (int i = 0; i < n; i++) {
            if (s->prob[i] >= s->p.min_p * pmax) {
                s->idx[m] = s->idx[i];
                s->prob[m++] = s->prob[i];
            }
        }
        n = m;
        sum = 0.0f;
        for (int i = 0; i < n; i++) {
            sum += s->prob[i];
        }
        for (int i = 0; i < n; i++) {
            s->prob[i] /= sum;
        }
    }

    /* nucleus: tokens below (1−p)/n together hold less than 1−p of the mass,
     * so the nucleus lies inside the rest; sort only that */
    if (s->p.top_p > 0.0f && s->p.top_p < 1.0f) {
        float cut = (1.0f - s->p.top_p) / (float) n, acc = 0.0f;
        int   m = 0;
        for (int i = 0; i < n; i++) {
            if (s->prob[i] >= cut) {
                s->idx[m] = s->idx[i];
                s->prob[m++] = s->prob[i];
            }
        }
        if (m == 0 || pic_sort_cands(s, m) != 0) {
            return pic_sample_argmax(logits, V);
        }
        n = m;
        for (int i = 0; i < m; i++) {
            acc += s->prob[i];
            if (acc >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }

    /* one draw from the renormalised candidates */
    sum = 0.0f;
    for (int i = 0; i < n; i++) {
        sum += s->prob[i];
    }
    float r = pic_rng_uniform(&s->rng) * sum, acc = 0.0f;
    for (int i = 0; i < n; i++) {
        acc += s->prob[i];
        if (r < acc) {
            return s->idx[i];
        }
    }
    return s->idx[n - 1];
}

int
pic_sample_is_stop(const pic_config *cfg, int id)
{
    for (size_t i = 0; i < sizeof(cfg->eos_ids) / sizeof(cfg->eos_ids[0]); i++) {
        if (cfg->eos_ids[i] >= 0 && cfg->eos_ids[i] == id) {
            return 1;
        }
    }
    return 0;
}
