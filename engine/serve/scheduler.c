/*
 * scheduler.c — worker threads, the bounded wait queue and the round-robin
 * batch of running sequences, whose decode tokens go through one batched
 * forward per round (scheduler.h).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "forward.h"
#include "frame.h"
#include "pic_buf.h"
#include "pic_kernels.h"
#include "pic_time.h"
#include "plan_exec.h"
#include "scheduler.h"
#include "state.h"
#include "stopstr.h"
#include "transport.h"

/* worker-side run state of one job */
struct pic_seq {
    pic_state   *st;            /* borrowed from the worker's slot */
    pic_sampler  smp;
    int          have_smp;
    pic_detok    dt;
    int          have_dt;
    int          slot;
    int          tokenized;
    int          planning;      /* assembling a plan's segments */
    int          n_fed;         /* prompt tokens through the model */
    int          last;          /* last sampled id, fed by the next step */
    int          max_gen;       /* tokens this job may generate */
    int          stop_matched;  /* a stop string ended the output */
    int          n_forced;      /* forced ids generated so far */
    pic_token_logprob lp;       /* the chosen token's logprobs (job->logprobs) */
    int         *gen;           /* (n_gen) ids sampled so far, for the session state */
    int          n_gen;
    size_t       cap_gen;
    pic_gstate  *gs;            /* job->json: the document so far, or NULL */
    float       *masked;        /* (vocab) logits with refused tokens at -inf */
    uint8_t     *ok;            /* (tokenizer ids) tokens the grammar allows */
    int          json_wait;     /* json: still before </think> */
    int          json_off;      /* json: lifted by a tool call */
    int          think_left;    /* json_wait: reasoning tokens left (-1: not set) */
    const int32_t *inj;         /* (n_inj) ids generated next whatever the model
                                 * says: the think block's close, a call's opening,
                                 * the document's shortest completion */
    int          n_inj, i_inj;
    int32_t     *own_inj;       /* inj when it is the completion (owned) */
    int          strict_wait;   /* call_strict: still inside the think block */
    int          strict_on;     /* call_strict: a call's grammar is running */
    char        *hold;          /* (n_hold) text held back for stop strings */
    size_t       n_hold, cap_hold;
};

typedef struct {
    struct pic_sched *s;
    pthread_t         th;
    int               idx;
    int               started;
    pic_job         **run;      /* [max_batch] running jobs or NULL */
    pic_state       **st;       /* [max_batch] states, allocated on first use */
    pic_workspace     ws;       /* the one forward workspace of its states
                                 * (a worker runs one pass at a time) */
    float            *logits;   /* (max_batch, V); row 0 for single steps */
    int              *dslot;    /* [max_batch] slots decoding this round */
    pic_state       **dst;      /* [max_batch] their states */
    int              *dtok;     /* [max_batch] their input tokens */
} pic_worker;

struct pic_sched {
    pic_sched_opts   o;
    pthread_mutex_t  qmu;
    pthread_cond_t   qcv;
    pic_job         *qhead, *qtail;
    int              qlen;
    int              stopping;
    int              running;   /* under qmu */
    pic_worker      *w;
    pthread_mutex_t  stmu;
    pic_sched_stats  st;
    pthread_mutex_t  gvmu;
    pic_gvocab      *gv;        /* the vocabulary trie, made by the first
                                 * constrained job (under gvmu) */
    int              gv_failed;
    pthread_t        keeper;    /* cache upkeep off the request path */
    int              keeper_started;
};

/* --- jobs --- */

pic_job *
pic_job_new(void)
{
    pic_job *j = calloc(1, sizeof(*j));

    if (j == NULL) {
        return NULL;
    }
    if (pthread_mutex_init(&j->mu, NULL) != 0) {
        free(j);
        return NULL;
    }
    j->sample.top_p = 1.0f;
    return j;
}

void
pic_job_mark(pic_job *j, const char *what, int64_t ns)
{
    pic_job_mark_t *mk;

    if (j->n_marks == PIC_JOB_MARKS) {
        j->n_marks--;
    }
    mk = &j->marks[j->n_marks++];
    mk->ns = ns != 0 ? ns : pic_now_ns();
    snprintf(mk->what, sizeof(mk->what), "%s", what);
}

void
pic_job_free(pic_job *j)
{
    if (j == NULL) {
        return;
    }
    pthread_mutex_destroy(&j->mu);
    pic_plan_job_free(j->plan);
    free(j->text);
    free(j->prompt);
    for (int i = 0; i < j->n_stop; i++) {
        free(j->stop[i]);
    }
    free(j->out);
    free(j->held);
    free(j->lp);
    free(j->bias_id);
    free(j->bias);
    free(j->force);
    free(j->think_close);
    free(j->think_after);
    free(j->call_nl);
    cJSON_Delete(j->json_schema);
    cJSON_Delete(j->call_fns);
    free(j);
}

void
pic_job_stop(pic_job *j)
{
    __atomic_store_n(&j->stop_asked, 1, __ATOMIC_RELEASE);
}

void
pic_job_cancel(pic_job *j)
{
    int64_t zero = 0;

    __atomic_compare_exchange_n(&j->cancel_ns, &zero, pic_now_ns(), 0,
                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* 1 once pic_job_cancel was called. */
static int
pic_job_cancelled(pic_job *j)
{
    return __atomic_load_n(&j->cancel_ns, __ATOMIC_ACQUIRE) != 0;
}

int
pic_job_take(pic_job *j, pic_job_update *u)
{
    int changed;

    memset(u, 0, sizeof(*u));
    pthread_mutex_lock(&j->mu);
    changed = j->dirty;
    j->dirty = 0;
    if (j->out_len > 0) {
        u->text = j->out;
        u->len = j->out_len;
        j->out = NULL;
        j->out_len = j->out_cap = 0;
    }
    u->n_prompt = j->n_prompt_tokens;
    u->n_cached = j->n_cached;
    u->n_exact = j->n_exact;
    u->n_pic = j->n_pic;
    u->n_gen = j->n_gen;
    u->lp = j->lp;
    u->n_lp = j->n_lp;
    j->lp = NULL;
    j->n_lp = j->cap_lp = 0;
    u->started = j->t_first_ns != 0;
    u->done = j->done;
    u->finish = j->finish;
    u->error = j->error;
    u->err_msg = j->err_msg;
    u->held = j->held;
    pthread_mutex_unlock(&j->mu);
    return changed;
}

void
pic_job_progress_get(pic_job *j, pic_job_progress *p)
{
    pthread_mutex_lock(&j->mu);
    p->started = j->started;
    p->n_prompt = j->n_prompt_tokens;
    p->n_prefilled = j->n_prefilled;
    p->n_cached = j->n_cached;
    p->n_gen = j->n_gen;
    pthread_mutex_unlock(&j->mu);
}

/* --- publishing (worker side) --- */

/* Prefill progress: n prompt positions are in the job's state. */
static void
pic_job_prefilled(pic_job *j, int n)
{
    pthread_mutex_lock(&j->mu);
    j->n_prefilled = n;
    pthread_mutex_unlock(&j->mu);
}

/* Prompt positions a plan job has in its state: restored from the tree,
 * then the exact run's; the rest arrives with the assembly (DONE). */
static int
pic_plan_job_prefilled(const pic_plan_job *pj)
{
    return pj->phase >= 2 ? pj->pos : pj->phase == 1 ? pj->resume : 0;
}

static void
pic_sched_count(pic_sched *s, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&s->stmu);
    *field += n;
    pthread_mutex_unlock(&s->stmu);
}

/* Append text to the job's outbox; caller holds j->mu.  -1 on ENOMEM. */
static int
pic_job_append_locked(pic_job *j, const char *txt, size_t n)
{
    if (n == 0) {
        return 0;
    }
    if (pic_grow((void **) &j->out, &j->out_cap, j->out_len + n + 1, 1) != 0) {
        return -1;
    }
    memcpy(j->out + j->out_len, txt, n);
    j->out_len += n;
    j->out[j->out_len] = '\0';
    return 0;
}

/* Publish new text (and a first-token time stamp); notify the loop. */
static void
pic_job_publish(pic_sched *s, pic_job *j, const char *txt, size_t n, int new_token)
{
    pthread_mutex_lock(&j->mu);
    if (pic_job_append_locked(j, txt, n) != 0) {
        pic_job_cancel(j);          /* out of memory: stop at the next step */
    }
    if (new_token) {
        j->n_gen++;
        if (j->t_first_ns == 0) {
            j->t_first_ns = pic_now_ns();
            pic_job_mark(j, "token", j->t_first_ns);
        }
    }
    j->dirty = 1;
    pthread_mutex_unlock(&j->mu);
    s->o.notify(s->o.notify_arg);
}

/* Session continuation (DESIGN §3.4): a plan job whose prompt was
 * computed exactly leaves its final state, prompt + generated ids fed so
 * far, in the prefix tree, where the next turn of the conversation resumes. */
static void
pic_seq_keep_session(pic_sched *s, pic_job *j)
{
    pic_seq            *q = j->seq;
    const pic_plan_job *pj = j->plan;
    const pic_plan_ctx *ctx = s->o.plan_ctx;
    int                 fed, n, *ids;

    if (pj == NULL || j->build_only || ctx == NULL || ctx->prefix == NULL
        || !pj->exact_all || q->st == NULL || q->planning) {
        return;
    }
    fed = q->st->pos - pj->n_prompt;
    if (fed <= 0 || fed > q->n_gen) {
        return;
    }
    n = pj->n_prompt + fed;
    ids = malloc((size_t) n * sizeof(int));
    if (ids == NULL) {
        return;
    }
    memcpy(ids, pj->ids, (size_t) pj->n_prompt * sizeof(int));
    memcpy(ids + pj->n_prompt, q->gen, (size_t) fed * sizeof(int));
    pic_plan_keep_session(ctx, pj, q->st, ids, n);
    free(ids);
    pic_sched_count(s, &s->st.sessions_kept, 1);
}

/* Last touch of a job by the scheduler: text, finish reason, done. */
static void
pic_job_finish(pic_sched *s, pic_job *j, pic_finish fin, pic_job_error why,
               const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void
pic_job_finish(pic_sched *s, pic_job *j, pic_finish fin, pic_job_error why,
               const char *fmt, ...)
{
    pic_seq *q = j->seq;
    va_list  ap;

    pthread_mutex_lock(&s->stmu);
    switch (fin) {
    case PIC_FINISH_STOP:
    case PIC_FINISH_LENGTH: s->st.completed++; break;
    case PIC_FINISH_CANCELLED: {
        int64_t lat = pic_now_ns() - __atomic_load_n(&j->cancel_ns, __ATOMIC_ACQUIRE);
        double  ms = j->cancel_ns != 0 && lat > 0 ? (double) lat * 1e-6 : 0.0;

        s->st.cancelled++;
        if (ms > s->st.cancel_latency_max_ms) {
            s->st.cancel_latency_max_ms = ms;
        }
        break;
    }
    case PIC_FINISH_ERROR:
        if (why == PIC_JOB_ERROR_TIMEOUT) {
            s->st.expired++;
        } else {
            s->st.failed++;
        }
        break;
    default: break;
    }
    pthread_mutex_unlock(&s->stmu);

    if (q != NULL && (fin == PIC_FINISH_STOP || fin == PIC_FINISH_LENGTH)) {
        pic_seq_keep_session(s, j);
    }
    pthread_mutex_lock(&j->mu);
    if (q != NULL) {
        /* a normal end shows what the stop-string filter still holds and
         * the detokenizer's tail (an incomplete UTF-8 sequence becomes
         * U+FFFD), unless a stop string cut the text */
        if ((fin == PIC_FINISH_STOP || fin == PIC_FINISH_LENGTH) && !q->stop_matched) {
            size_t      len = 0;
            const char *tail = q->have_dt ? pic_detok_flush(&q->dt, &len) : NULL;

            pic_job_append_locked(j, q->hold, q->n_hold);
            if (tail != NULL) {
                pic_job_append_locked(j, tail, len);
            }
        }
        if (q->have_dt) {
            pic_detok_free(&q->dt);
        }
        if (q->have_smp) {
            pic_sampler_free(&q->smp);
        }
        free(q->hold);
        free(q->gen);
        free(q->gs);
        free(q->masked);
        free(q->ok);
        free(q->own_inj);
        free(q);
        j->seq = NULL;
    }
    j->finish = fin;
    j->error = why;
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(j->err_msg, sizeof(j->err_msg), fmt, ap);
        va_end(ap);
    }
    j->t_done_ns = pic_now_ns();
    pic_job_mark(j, "done", j->t_done_ns);
    j->dirty = 1;
    j->done = 1;
    pthread_mutex_unlock(&j->mu);
    /* j may be freed by the loop from here on */
    s->o.notify(s->o.notify_arg);
}

/* --- one job's steps --- */

/* Tokenize (when given text), check the context, set up sampler and
 * detokenizer; 0, or -1 after finishing the job with an error. */
static int
pic_seq_begin(pic_sched *s, pic_job *j)
{
    pic_seq *q = j->seq;
    int      V = s->o.model->cfg.vocab;

    if (j->plan != NULL) {
        /* plan_exec tokenizes the segments; the checks follow there */
        if (s->o.tok == NULL || s->o.plan_ctx == NULL) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_UNAVAILABLE, "%s",
                           "the engine cannot execute plans");
            return -1;
        }
        q->planning = 1;
        q->max_gen = s->o.max_ctx;      /* set once the prompt length is known */
        if (j->build_only) {
            q->tokenized = 1;
            return 0;
        }
        goto sampler;
    }
    if (j->prompt == NULL) {
        int32_t *ids = NULL;
        size_t   n = 0;
        int      rc;

        if (s->o.tok == NULL) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_UNAVAILABLE, "%s",
                           "the engine has no tokenizer");
            return -1;
        }
        rc = pic_tokenizer_encode(s->o.tok, j->text, j->text_len, &ids, &n);
        if (rc != PIC_TOKENIZER_OK) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, rc == PIC_TOKENIZER_EUTF8
                           ? PIC_JOB_ERROR_INPUT : PIC_JOB_ERROR_INTERNAL,
                           "cannot tokenize the prompt (%s)",
                           rc == PIC_TOKENIZER_EUTF8 ? "invalid UTF-8" : "tokenizer error");
            return -1;
        }
        if (n > 0x7fffffff) {
            free(ids);
            n = 0x7fffffff;
            ids = NULL;
        }
        j->prompt = ids;
        j->n_prompt = (int) n;
        pic_job_mark(j, "tokenize", 0);
    }
    if (j->n_prompt <= 0) {
        pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INPUT, "%s",
                       "the prompt is empty");
        return -1;
    }
    for (int i = 0; i < j->n_prompt; i++) {
        if (j->prompt[i] < 0 || j->prompt[i] >= V) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INPUT,
                           "token id %d is outside the vocabulary (%d)", j->prompt[i], V);
            return -1;
        }
    }
    if (j->n_prompt >= s->o.max_ctx) {
        pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_TOO_LONG,
                       "the prompt has %d tokens; this model's context is %d tokens "
                       "(room is needed for at least one generated token)",
                       j->n_prompt, s->o.max_ctx);
        return -1;
    }
    q->max_gen = s->o.max_ctx - j->n_prompt;
    if (j->max_tokens > 0 && j->max_tokens < q->max_gen) {
        q->max_gen = j->max_tokens;
    }
sampler:
    if (pic_sampler_init(&q->smp, &j->sample, V) != 0) {
        pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INTERNAL, "%s", "out of memory");
        return -1;
    }
    q->have_smp = 1;
    if (j->json) {
        q->gs = malloc(sizeof(*q->gs));
        q->masked = malloc((size_t) V * sizeof(float));
        if (q->gs == NULL || q->masked == NULL || s->o.tok == NULL) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INTERNAL, "%s",
                           "out of memory");
            return -1;
        }
        if (j->call) {
            pic_gstate_init_call(q->gs, (pic_gcall_syntax) (j->call - 1),
                                 j->call_named ? NULL : j->call_fns,
                                 j->call_named ? j->call_fns : NULL);
        } else {
            pic_gstate_init(q->gs, j->json_schema);
        }
        q->json_wait = j->json_after_think;
        q->think_left = -1;
    }
    q->strict_wait = j->strict_think;
    if (s->o.tok != NULL) {
        pic_detok_init(&q->dt, s->o.tok, 1);
        pic_detok_keep(&q->dt, j->call_open1 - 1);
        q->have_dt = 1;
    }
    q->tokenized = 1;
    if (q->planning) {
        return 0;
    }
    pthread_mutex_lock(&j->mu);
    j->n_prompt_tokens = j->n_prompt;
    j->dirty = 1;
    pthread_mutex_unlock(&j->mu);
    pic_sampler_prompt(&q->smp, j->prompt, j->n_prompt);
    pic_sched_count(s, &s->st.prompt_tokens, (uint64_t) j->n_prompt);
    return 0;
}

/* Can token id extend the JSON document of g?  (g unchanged) */
static int
pic_seq_json_ok(const pic_tokenizer *tok, const pic_gstate *g, int id)
{
    pic_gstate  t;
    size_t      n = 0;
    const char *b;

    if (pic_tokenizer_is_special(tok, id)
        || (b = pic_tokenizer_token_bytes(tok, id, &n)) == NULL || n == 0) {
        return 0;
    }
    t = *g;
    return pic_gstate_feed(&t, b, n) == 0;
}

/* The vocabulary trie, made once; NULL when it could not be. */
static const pic_gvocab *
pic_sched_gvocab(pic_sched *s)
{
    pthread_mutex_lock(&s->gvmu);
    if (s->gv == NULL && !s->gv_failed) {
        s->gv = pic_gvocab_new(s->o.tok);
        s->gv_failed = s->gv == NULL;
    }
    pthread_mutex_unlock(&s->gvmu);
    return s->gv;
}

/* logits into q->masked with every token the grammar refuses at -inf (but
 * keep, the <tool_call> of json_or_tool). */
static void
pic_seq_mask(pic_sched *s, pic_seq *q, const float *logits, int vocab, int keep)
{
    const pic_gvocab *gv = pic_sched_gvocab(s);
    int               n_ids = (int) pic_tokenizer_vocab_size(s->o.tok);

    if (gv != NULL && q->ok == NULL) {
        q->ok = malloc((size_t) (n_ids ? n_ids : 1));
    }
    if (gv != NULL && q->ok != NULL && pic_gvocab_mask(gv, q->gs, q->ok) >= 0) {
        for (int i = 0; i < vocab; i++) {
            q->masked[i] = i == keep || (i < n_ids && q->ok[i]) ? logits[i] : -INFINITY;
        }
        return;
    }
    for (int i = 0; i < vocab; i++) {   /* no memory for the trie: one by one */
        q->masked[i] = i == keep || pic_seq_json_ok(s->o.tok, q->gs, i) ? logits[i]
                                                                        : -INFINITY;
    }
}

/* Inject n ids (borrowed from the job) from the next choice on. */
static void
pic_seq_inject(pic_seq *q, const int32_t *ids, int n)
{
    q->inj = ids;
    q->n_inj = n;
    q->i_inj = 0;
}

/* A <tool_call> the model wrote with strict tools on offer: the call
 * grammar over them from the "\n" after it; 0, or -1 (no memory: the call
 * stays free). */
static int
pic_seq_strict_start(pic_sched *s, pic_job *j, pic_seq *q)
{
    int V = s->o.model->cfg.vocab;

    if (q->gs == NULL) {
        q->gs = malloc(sizeof(*q->gs));
    }
    if (q->masked == NULL) {
        q->masked = malloc((size_t) V * sizeof(float));
    }
    if (q->gs == NULL || q->masked == NULL) {
        return -1;
    }
    pic_gstate_init_call(q->gs, (pic_gcall_syntax) (j->call_strict - 1), j->call_fns, NULL);
    q->json_off = 0;
    q->strict_on = 1;
    pic_seq_inject(q, j->call_nl, j->n_call_nl);
    return 0;
}

/* The sampler's choice among the tokens that keep the answer valid JSON
 * (the sampled one when it does, else a draw with the others masked); the
 * end of the answer once the document is complete. */
static int
pic_seq_choose_json(pic_sched *s, pic_job *j, const float *logits, int vocab)
{
    const pic_tokenizer *tok = s->o.tok;
    pic_seq             *q = j->seq;
    int                  id, tool = j->json_or_tool && !q->strict_on
                                    ? pic_tokenizer_token_id(tok, "<tool_call>") : -1;
    size_t               n = 0;
    const char          *b;

    if (pic_gstate_done(q->gs)) {
        return s->o.model->cfg.eos_ids[0] >= 0 ? s->o.model->cfg.eos_ids[0] : 0;
    }
    id = pic_sampler_sample(&q->smp, logits);
    if (id != tool && !pic_seq_json_ok(tok, q->gs, id)) {
        pic_seq_mask(s, q, logits, vocab, tool);
        id = pic_sampler_sample(&q->smp, q->masked);
        if (q->masked[id] == -INFINITY) {
            return s->o.model->cfg.eos_ids[0] >= 0 ? s->o.model->cfg.eos_ids[0] : 0;
        }
    }
    if (id == tool && tool >= 0 && j->call_strict && pic_seq_strict_start(s, j, q) == 0) {
        return id;                      /* a call instead, following its schema */
    }
    if (id == tool && tool >= 0) {
        /* a tool call instead of the answer: the grammar's buffers go */
        q->json_off = 1;
        free(q->gs);
        free(q->masked);
        free(q->ok);
        q->gs = NULL;
        q->masked = NULL;
        q->ok = NULL;
    } else if ((b = pic_tokenizer_token_bytes(tok, id, &n)) != NULL) {
        pic_gstate_feed(q->gs, b, n);
    }
    return id;
}

/* When max_tokens comes within reach of the document's end, the grammar's
 * shortest completion is generated as is.  Its bytes bound its tokens (a
 * token the model writes itself may not: "</tool_call>" is one added token
 * when injected, many once the model has begun it byte by byte), and a few
 * tokens' slack covers a model token that lengthens the completion.  1 when
 * q->inj now holds it (q->gs is then done), else 0. */
#define PIC_SEQ_CLOSE_SLACK 8

static int
pic_seq_close_due(pic_sched *s, pic_job *j, pic_seq *q)
{
    char     tail[4096];
    int      left = q->max_gen - j->n_gen, k;
    int32_t *ids = NULL;
    size_t   n = 0;

    k = pic_gstate_complete(q->gs, tail, sizeof(tail));
    if (k <= 0 || k + PIC_SEQ_CLOSE_SLACK < left) {
        return 0;
    }
    if (pic_tokenizer_encode(s->o.tok, tail, (size_t) k, &ids, &n) != PIC_TOKENIZER_OK
        || n == 0) {
        free(ids);
        return 0;
    }
    pic_gstate_feed(q->gs, tail, (size_t) k);
    free(q->own_inj);
    q->own_inj = ids;
    q->inj = ids;
    q->n_inj = (int) n;
    q->i_inj = 0;
    return 1;
}

/* The reasoning of a constrained answer: the sampled id, unless the budget
 * is spent or the model would stop inside its think block; then the ids
 * that close it (and open a forced call).  The model's own </think> ends
 * the wait (a forced call's opening follows). */
static int
pic_seq_choose_think(pic_sched *s, pic_job *j, const float *logits)
{
    pic_seq *q = j->seq;
    int      id;

    if (q->think_left < 0) {
        /* half of what is left once the close and the answer's shortest
         * form are set aside */
        char     tail[4096];
        int      k = pic_gstate_complete(q->gs, tail, sizeof(tail)), room;
        int32_t *ids = NULL;
        size_t   n = k > 0 ? (size_t) k : 0;

        if (k > 0 && pic_tokenizer_encode(s->o.tok, tail, (size_t) k, &ids, &n)
                     != PIC_TOKENIZER_OK) {
            n = (size_t) k;             /* bytes: at least its tokens */
        }
        free(ids);
        room = (q->max_gen - j->n_gen - j->n_think_close - (int) n) / 2;
        q->think_left = j->think_budget < room ? j->think_budget : room;
        q->think_left = q->think_left > 0 ? q->think_left : 0;
    }
    id = q->think_left > 0 ? pic_sampler_sample(&q->smp, logits) : -1;
    if (id >= 0 && id == pic_tokenizer_token_id(s->o.tok, "</think>")) {
        q->json_wait = 0;               /* the answer (JSON, or the call) starts now */
        pic_seq_inject(q, j->think_after, j->n_think_after);
        return id;
    }
    if (id < 0 || pic_sample_is_stop(&s->o.model->cfg, id)) {
        q->json_wait = 0;
        if (j->n_think_close > 0) {
            pic_seq_inject(q, j->think_close, j->n_think_close);
            return q->inj[q->i_inj++];
        }
        return id >= 0 ? id : pic_sampler_sample(&q->smp, logits);
    }
    q->think_left--;
    return id;
}

/* The next id from a job's logits: a forced or injected id while any is
 * left, else the sampler's (inside the JSON grammar when one applies, the
 * reasoning bounded before it); its logprobs noted for pic_seq_emit. */
static int
pic_seq_choose(pic_sched *s, pic_job *j, const float *logits, int vocab)
{
    pic_seq *q = j->seq;
    int      id;

    if (q->n_forced < j->n_force) {
        id = j->force[q->n_forced++];
    } else if (q->i_inj < q->n_inj) {
        id = q->inj[q->i_inj++];
    } else if (q->gs != NULL && q->json_wait && !q->json_off) {
        id = pic_seq_choose_think(s, j, logits);
    } else if (q->gs != NULL && !q->json_off && pic_seq_close_due(s, j, q)) {
        id = q->inj[q->i_inj++];
    } else if (q->gs != NULL && !q->json_off) {
        id = pic_seq_choose_json(s, j, logits, vocab);
    } else {
        id = pic_sampler_sample(&q->smp, logits);
        if (j->call_strict && !q->strict_wait && !q->strict_on
            && id == pic_tokenizer_token_id(s->o.tok, "<tool_call>")) {
            pic_seq_strict_start(s, j, q);
        }
    }
    if (q->json_wait && id == pic_tokenizer_token_id(s->o.tok, "</think>")) {
        q->json_wait = 0;           /* the answer (JSON) starts now */
    }
    if (q->strict_wait && id == pic_tokenizer_token_id(s->o.tok, "</think>")) {
        q->strict_wait = 0;
    }
    pic_sampler_accept(&q->smp, id);
    if (j->logprobs) {
        pic_sample_logprob(logits, vocab, id, j->top_logprobs, &q->lp);
    }
    return id;
}

/* 1 once the constrained answer is complete (nothing left to inject). */
static int
pic_seq_doc_done(const pic_seq *q)
{
    return q->gs != NULL && !q->json_off && !q->json_wait && !q->strict_on
           && q->i_inj >= q->n_inj && pic_gstate_done(q->gs);
}

/* Keep the chosen token's logprobs for the loop; caller holds j->mu. */
static void
pic_job_add_lp_locked(pic_job *j, const pic_token_logprob *lp)
{
    if (pic_grow((void **) &j->lp, &j->cap_lp, (size_t) j->n_lp + 1, sizeof(*j->lp)) != 0) {
        return;                     /* logprobs are best effort under OOM */
    }
    j->lp[j->n_lp++] = *lp;
}

/* A new token: stop tests, text, publication.  1 if the job finished. */
static int
pic_seq_emit(pic_sched *s, pic_job *j, int id)
{
    pic_seq    *q = j->seq;
    const char *txt = NULL;
    size_t      len = 0, emit;
    int         matched = 0;

    if (!j->ignore_eos && pic_sample_is_stop(&s->o.model->cfg, id)) {
        pic_job_finish(s, j, PIC_FINISH_STOP, PIC_JOB_ERROR_NONE, NULL);
        return 1;
    }
    pic_sched_count(s, &s->st.gen_tokens, 1);
    if (j->logprobs) {
        pthread_mutex_lock(&j->mu);
        pic_job_add_lp_locked(j, &q->lp);
        pthread_mutex_unlock(&j->mu);
    }
    if (j->plan != NULL && q->n_gen < (1 << 24)) {
        if (pic_grow((void **) &q->gen, &q->cap_gen, (size_t) q->n_gen + 1,
                     sizeof(*q->gen)) == 0) {
            q->gen[q->n_gen++] = id;
        }
    }
    if (q->have_dt) {
        txt = pic_detok_feed(&q->dt, id, &len);
        if (txt == NULL) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INTERNAL, "%s",
                           "out of memory");
            return 1;
        }
    }
    if (j->n_stop == 0) {
        pic_job_publish(s, j, txt, len, 1);
    } else {
        /* stop strings: keep back any tail that may start one */
        if (pic_grow((void **) &q->hold, &q->cap_hold, q->n_hold + len + 1, 1) != 0) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INTERNAL, "%s",
                           "out of memory");
            return 1;
        }
        memcpy(q->hold + q->n_hold, txt, len);
        q->n_hold += len;
        emit = pic_stop_scan(q->hold, q->n_hold, (const char *const *) j->stop,
                             j->n_stop, &matched);
        pic_job_publish(s, j, q->hold, emit, 1);
        if (matched) {
            q->n_hold = 0;
            q->stop_matched = 1;
            pic_job_finish(s, j, PIC_FINISH_STOP, PIC_JOB_ERROR_NONE, NULL);
            return 1;
        }
        memmove(q->hold, q->hold + emit, q->n_hold - emit);
        q->n_hold -= emit;
    }
    q->last = id;
    if (q->strict_on && q->i_inj >= q->n_inj && pic_gstate_done(q->gs)) {
        q->strict_on = 0;               /* the call is complete: free text again */
        q->json_off = 1;
        if (j->one_call) {
            pic_job_finish(s, j, PIC_FINISH_STOP, PIC_JOB_ERROR_NONE, NULL);
            return 1;
        }
    }
    if ((j->force_stop && q->n_forced >= j->n_force) || pic_seq_doc_done(q)) {
        pic_job_finish(s, j, PIC_FINISH_STOP, PIC_JOB_ERROR_NONE, NULL);
        return 1;
    }
    if (j->n_gen >= q->max_gen) {
        pic_job_finish(s, j, PIC_FINISH_LENGTH, PIC_JOB_ERROR_NONE, NULL);
        return 1;
    }
    return 0;
}

/* A plan job's step: -1 the job was finished (an error), 0 not done yet
 * (*progress: whether work was done), 1 the prompt is assembled and
 * w->logits hold its last token's logits. */
static int
pic_seq_plan_step(pic_sched *s, pic_worker *w, pic_job *j, int *progress)
{
    pic_seq      *q = j->seq;
    pic_plan_job *pj = j->plan;
    int           was_tokenized = pj->tokenized, rc;
    pic_job_error why;
    char          err[256];
    char         *held;

    int64_t t0 = pic_now_ns();
    pj->defer_insert = 1;               /* pic_seq_step runs it after the first token */
    rc = pic_plan_step(s->o.plan_ctx, pj, s->o.model, s->o.tok, j->text, j->text_len, q->st,
                       w->logits, &why, err, sizeof(err));
    pic_job_mark(j, !was_tokenized ? "tokenize" : rc == PIC_PLAN_WAIT ? "wait"
                    : rc == PIC_PLAN_DONE ? "prompt" : "step", 0);
    if (rc == PIC_PLAN_MORE && was_tokenized) {
        pthread_mutex_lock(&s->stmu);
        s->st.build_s += (double) (pic_now_ns() - t0) * 1e-9;
        pthread_mutex_unlock(&s->stmu);
    }
    if (rc == PIC_PLAN_ERROR) {
        pic_job_finish(s, j, PIC_FINISH_ERROR, why, "%s", err);
        return -1;
    }
    if (rc == PIC_PLAN_WAIT) {
        *progress = 0;
        pic_sched_count(s, &s->st.plan_waits, 1);
        return 0;
    }
    *progress = 1;
    if (!was_tokenized) {
        if (pj->n_prompt <= 0) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INPUT, "%s",
                           "the prompt is empty");
            return -1;
        }
        if (pj->n_prompt >= s->o.max_ctx) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_TOO_LONG,
                           "the prompt has %d tokens; this model's context is %d tokens "
                           "(room is needed for at least one generated token)",
                           pj->n_prompt, s->o.max_ctx);
            return -1;
        }
        pthread_mutex_lock(&j->mu);
        j->n_prompt_tokens = pj->n_prompt;
        j->dirty = 1;
        pthread_mutex_unlock(&j->mu);
    }
    if (rc == PIC_PLAN_MORE) {
        pic_job_prefilled(j, pic_plan_job_prefilled(pj));
        pic_sched_count(s, &s->st.prefill_steps, 1);
        return 0;
    }
    /* assembled: from here on an ordinary sequence */
    for (int i = 0; i < pj->n_segs; i++) {
        pic_sampler_prompt(&q->smp, pj->segs[i].ids, pj->segs[i].n_ids);
    }
    j->n_prompt = pj->n_prompt;
    q->n_fed = pj->n_prompt;
    q->planning = 0;
    q->max_gen = s->o.max_ctx - j->n_prompt;
    if (j->max_tokens > 0 && j->max_tokens < q->max_gen) {
        q->max_gen = j->max_tokens;
    }
    held = pic_plan_held(s->o.plan_ctx, pj);
    /* after held: X-PIC-Held names what the pool held when the prompt was
     * served, never an entry the keeper built since */
    pic_plan_defer(s->o.plan_ctx, pj, s->o.model);
    pthread_mutex_lock(&j->mu);
    if (j->held == NULL) {
        j->held = held;
        held = NULL;
    }
    j->n_prefilled = pj->n_prompt;
    j->n_cached = pj->n_cached;
    j->n_exact = pj->n_exact;
    j->n_pic = pj->n_pic;
    j->dirty = 1;
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&s->stmu);
    s->st.prefill_steps++;
    s->st.plan_jobs++;
    s->st.prompt_tokens += (uint64_t) pj->n_prompt;
    s->st.cached_tokens += (uint64_t) pj->n_cached;
    s->st.exact_tokens += (uint64_t) pj->n_exact;
    s->st.pic_tokens += (uint64_t) pj->n_pic;
    s->st.recomputed_tokens += (uint64_t) (pj->n_prompt - pj->n_exact - pj->n_pic);
    s->st.seg_hits += (uint64_t) pj->n_hits;
    s->st.seg_peer += (uint64_t) pj->n_peer;
    s->st.seg_built += (uint64_t) pj->n_built;
    s->st.seg_rejected += (uint64_t) pj->n_rejected;
    s->st.seg_remote_failed += (uint64_t) pj->n_remote_failed;
    s->st.assemble_s += pj->as.t_total;
    pthread_mutex_unlock(&s->stmu);
    free(held);
    return 1;
}

/* A peer's prefill: one segment's entry, framed into a record.  -1 the job
 * was finished (done or an error), 0 more to come. */
static int
pic_seq_build_step(pic_sched *s, pic_job *j)
{
    pic_plan_job *pj = j->plan;
    pic_entry    *e = NULL;
    unsigned char hdr[PIC_RECORD_HDR];
    void         *frame = NULL;
    size_t        flen = 0;
    int           idx = 0, rc;
    pic_job_error why;
    char          err[256];

    int64_t t0 = pic_now_ns();
    rc = pic_plan_build_step(s->o.plan_ctx, pj, s->o.model, s->o.tok, j->text, j->text_len,
                             &idx, &e, &why, err, sizeof(err));
    pthread_mutex_lock(&s->stmu);
    s->st.build_s += (double) (pic_now_ns() - t0) * 1e-9;
    pthread_mutex_unlock(&s->stmu);
    if (rc == PIC_PLAN_ERROR) {
        pic_job_finish(s, j, PIC_FINISH_ERROR, why, "%s", err);
        return -1;
    }
    if (rc == PIC_PLAN_DONE) {
        pic_job_finish(s, j, PIC_FINISH_STOP, PIC_JOB_ERROR_NONE, NULL);
        return -1;
    }
    if (e != NULL) {
        frame = pic_frame_from_entry(e, pj->segs[idx].key, pj->segs[idx].len, &flen);
        pic_entry_unref(e);
    }
    /* u32 "PICR" | u32 index | u64 frame_len (0: could not build) | frame */
    uint32_t magic = PIC_RECORD_MAGIC, ix = (uint32_t) idx;
    uint64_t fl = frame ? flen : 0;
    memcpy(hdr, &magic, 4);
    memcpy(hdr + 4, &ix, 4);
    memcpy(hdr + 8, &fl, 8);                /* x86-64 and aarch64: little-endian */
    pthread_mutex_lock(&j->mu);
    if (pic_job_append_locked(j, (const char *) hdr, sizeof(hdr)) != 0
        || (frame && pic_job_append_locked(j, frame, flen) != 0)) {
        pic_job_cancel(j);
    }
    j->dirty = 1;
    pthread_mutex_unlock(&j->mu);
    free(frame);
    pic_sched_count(s, &s->st.frames_sent, fl > 0);
    pic_sched_count(s, &s->st.prefill_steps, 1);
    s->o.notify(s->o.notify_arg);
    return 0;
}

/* Slot k lets go of its job (finished already). */
static void
pic_worker_release(pic_sched *s, pic_worker *w, int k)
{
    w->run[k] = NULL;
    pthread_mutex_lock(&s->qmu);
    s->running--;
    pthread_mutex_unlock(&s->qmu);
}

/* Finish j if it was cancelled or ran past its deadline; 1 if it was. */
static int
pic_seq_expired(pic_sched *s, pic_job *j)
{
    if (pic_job_cancelled(j)) {
        pic_job_finish(s, j, PIC_FINISH_CANCELLED, PIC_JOB_ERROR_NONE, "%s",
                       "the client went away");
        return 1;
    }
    if (j->deadline_ns != 0 && pic_now_ns() > j->deadline_ns) {
        pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_TIMEOUT, "%s",
                       "the request ran past its deadline");
        return 1;
    }
    if (__atomic_load_n(&j->stop_asked, __ATOMIC_ACQUIRE)) {
        pic_job_finish(s, j, PIC_FINISH_STOP, PIC_JOB_ERROR_NONE, NULL);
        return 1;
    }
    return 0;
}

/* 1 if j's next step is a decode token (its prompt is through the model). */
static int
pic_seq_decoding(const pic_job *j)
{
    const pic_seq *q = j->seq;

    return q->tokenized && !j->build_only && !q->planning && q->n_fed >= j->n_prompt;
}

/* One step of job j in slot k: a prefill chunk, a plan step or one decode
 * token.  Returns 1 if it did work, 0 if the job only waited. */
static int
pic_seq_step(pic_sched *s, pic_worker *w, int k)
{
    pic_job         *j = w->run[k];
    pic_seq         *q = j->seq;
    pic_plan_insert *ins = NULL;        /* the prompt's insertion into the tree */
    char             err[256];
    int              rc, id;

    if (pic_seq_expired(s, j)) {
        goto released;
    }
    if (!q->tokenized && pic_seq_begin(s, j) != 0) {
        goto released;
    }
    if (j->build_only) {
        if (pic_seq_build_step(s, j) < 0) {
            goto released;
        }
        return 1;
    }
    if (q->planning) {
        int progress = 1;

        rc = pic_seq_plan_step(s, w, j, &progress);
        if (rc < 0) {
            goto released;
        }
        if (rc == 0) {
            return progress;
        }
        ins = pic_plan_take_insert(j->plan);
    } else if (q->n_fed < j->n_prompt) {
        int n = j->n_prompt - q->n_fed, last;

        if (n > PIC_UBATCH) {
            n = PIC_UBATCH;
        }
        last = q->n_fed + n == j->n_prompt;
        rc = pic_forward(s->o.model, s->o.be, q->st, j->prompt + q->n_fed, n, q->n_fed,
                         last ? PIC_LOGITS_LAST : PIC_LOGITS_NONE, w->logits, NULL,
                         err, sizeof(err));
        pic_sched_count(s, &s->st.prefill_steps, 1);
        if (rc != 0) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INTERNAL, "forward: %s", err);
            goto released;
        }
        q->n_fed += n;
        pic_job_mark(j, last ? "prompt" : "step", 0);
        pic_job_prefilled(j, q->n_fed);
        if (!last) {
            return 1;
        }
    } else {
        rc = pic_forward(s->o.model, s->o.be, q->st, &q->last, 1, q->st->pos,
                         PIC_LOGITS_LAST, w->logits, NULL, err, sizeof(err));
        pthread_mutex_lock(&s->stmu);
        s->st.decode_steps++;
        s->st.decode_batches++;
        pthread_mutex_unlock(&s->stmu);
        if (rc != 0) {
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INTERNAL, "forward: %s", err);
            goto released;
        }
    }
    id = pic_seq_choose(s, j, w->logits, s->o.model->cfg.vocab);
    rc = pic_seq_emit(s, j, id);
    /* the first token is out (the whole reply, when it was the last): now
     * the tree takes the prompt's blocks and states from the slot's state,
     * which nothing has advanced since (j may be gone: ins is ours) */
    pic_plan_run_insert(s->o.plan_ctx, ins, w->st[k]);
    if (rc) {
        goto released;
    }
    return 1;

released:
    pic_worker_release(s, w, k);
    return 1;
}

/* The decode tokens of the jobs in slots w->dslot[0..n): one batched
 * forward, then each job samples from its row.  A job cancelled or expired
 * meanwhile is dropped first.  Should the batch be refused (out of memory),
 * every job steps alone, so that only a job that cannot run fails. */
static void
pic_worker_decode(pic_sched *s, pic_worker *w, int n)
{
    int  V = s->o.model->cfg.vocab, nb = 0, rc;
    char err[256];

    for (int i = 0; i < n; i++) {
        int      k = w->dslot[i];
        pic_job *j = w->run[k];

        if (pic_seq_expired(s, j)) {
            pic_worker_release(s, w, k);
            continue;
        }
        w->dslot[nb] = k;               /* compacts in place: nb <= i */
        w->dst[nb] = j->seq->st;
        w->dtok[nb] = j->seq->last;
        nb++;
    }
    if (nb == 0) {
        return;
    }
    rc = pic_forward_batch(s->o.model, s->o.be, w->dst, w->dtok, nb, w->logits, err,
                           sizeof(err));
    if (rc != 0) {
        for (int r = 0; r < nb; r++) {
            pic_seq_step(s, w, w->dslot[r]);
        }
        return;
    }
    pthread_mutex_lock(&s->stmu);
    s->st.decode_steps += (uint64_t) nb;
    s->st.decode_batches++;
    pthread_mutex_unlock(&s->stmu);
    for (int r = 0; r < nb; r++) {
        pic_job *j = w->run[w->dslot[r]];
        int      id = pic_seq_choose(s, j, w->logits + (size_t) r * V, V);

        if (pic_seq_emit(s, j, id)) {
            pic_worker_release(s, w, w->dslot[r]);
        }
    }
}

/* --- the wait queue --- */

/* Unlink j from the queue; caller holds qmu. */
static void
pic_queue_remove_locked(pic_sched *s, pic_job *prev, pic_job *j)
{
    if (prev) {
        prev->qnext = j->qnext;
    } else {
        s->qhead = j->qnext;
    }
    if (s->qtail == j) {
        s->qtail = prev;
    }
    j->qnext = NULL;
    j->queued = 0;
    s->qlen--;
}

/* Finish queued jobs that were cancelled or ran out of time; caller holds
 * qmu (lock order: qmu, then a job's mu). */
static void
pic_queue_reap_locked(pic_sched *s)
{
    pic_job *prev = NULL, *j = s->qhead, *next;
    int64_t  now = pic_now_ns();

    while (j != NULL) {
        next = j->qnext;
        if (pic_job_cancelled(j) || s->stopping) {
            pic_queue_remove_locked(s, prev, j);
            pic_job_finish(s, j, PIC_FINISH_CANCELLED, PIC_JOB_ERROR_NONE, "%s",
                           "cancelled while queued");
        } else if (j->deadline_ns != 0 && now > j->deadline_ns) {
            pic_queue_remove_locked(s, prev, j);
            pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_TIMEOUT, "%s",
                           "the request waited in the queue past its deadline");
        } else {
            prev = j;
        }
        j = next;
    }
}

int
pic_sched_submit(pic_sched *s, pic_job *j)
{
    int rc = 0;

    j->t_submit_ns = pic_now_ns();
    pic_job_mark(j, "submit", j->t_submit_ns);
    pthread_mutex_lock(&s->qmu);
    if (s->stopping) {
        rc = -2;
    } else if (s->qlen >= s->o.workers * s->o.max_batch - s->running + s->o.max_queue) {
        /* full: the free batch slots and max_queue waiting places are taken */
        rc = -1;
    } else {
        j->queued = 1;
        j->qnext = NULL;
        if (s->qtail) {
            s->qtail->qnext = j;
        } else {
            s->qhead = j;
        }
        s->qtail = j;
        s->qlen++;
        pthread_cond_broadcast(&s->qcv);
    }
    pthread_mutex_unlock(&s->qmu);
    pthread_mutex_lock(&s->stmu);
    if (rc == 0) {
        s->st.submitted++;
    } else {
        s->st.rejected++;
    }
    pthread_mutex_unlock(&s->stmu);
    return rc;
}

int
pic_sched_has_room(pic_sched *s)
{
    int room;

    pthread_mutex_lock(&s->qmu);
    room = !s->stopping
           && s->qlen < s->o.workers * s->o.max_batch - s->running + s->o.max_queue;
    pthread_mutex_unlock(&s->qmu);
    return room;
}

/* --- workers --- */

static void *
pic_worker_main(void *arg)
{
    pic_worker *w = arg;
    pic_sched  *s = w->s;
    int         B = s->o.max_batch;

    pic_kernels_set_threads(s->o.threads);      /* the OpenMP ICV is per thread */
    for (;;) {
        int n_run = 0;

        pthread_mutex_lock(&s->qmu);
        pic_queue_reap_locked(s);
        for (int k = 0; k < B; k++) {
            if (w->run[k] != NULL) {
                n_run++;
            }
        }
        /* admit: with several workers, one job per round each, so that
         * a burst spreads over the workers */
        for (int k = 0, took = 0; k < B && s->qhead != NULL && !s->stopping
                                  && !(s->o.workers > 1 && took > 0); k++) {
            pic_job *j;
            char     err[128];

            if (w->run[k] != NULL) {
                continue;
            }
            if (w->st[k] == NULL) {
                w->st[k] = pic_state_init_on(&s->o.model->cfg, s->o.max_ctx, s->o.be, err,
                                          sizeof(err));
                if (w->st[k] == NULL) {
                    break;              /* no memory for a slot: wait for one */
                }
                pic_state_share_workspace(w->st[k], &w->ws);
            }
            j = s->qhead;
            pic_queue_remove_locked(s, NULL, j);
            j->seq = calloc(1, sizeof(pic_seq));
            if (j->seq == NULL) {
                pic_job_finish(s, j, PIC_FINISH_ERROR, PIC_JOB_ERROR_INTERNAL, "%s",
                               "out of memory");
                continue;
            }
            pic_state_reset(w->st[k]);
            j->seq->st = w->st[k];
            j->seq->slot = k;
            pthread_mutex_lock(&j->mu);     /* lock order: qmu, then mu */
            j->started = 1;
            pthread_mutex_unlock(&j->mu);
            j->t_start_ns = pic_now_ns();
            pic_job_mark(j, "pickup", j->t_start_ns);
            w->run[k] = j;
            s->running++;
            n_run++;
            took++;
        }
        if (n_run == 0) {
            if (s->stopping) {
                pthread_mutex_unlock(&s->qmu);
                break;
            }
            pthread_cond_wait(&s->qcv, &s->qmu);
            pthread_mutex_unlock(&s->qmu);
            continue;
        }
        pthread_mutex_unlock(&s->qmu);

        /* one round: every running sequence advances one step; the
         * decode steps together in one forward at the end */
        int64_t t0 = pic_now_ns();
        int     progress = 0, nd = 0;
        for (int k = 0; k < B; k++) {
            if (w->run[k] == NULL) {
                continue;
            }
            if (s->stopping) {
                pic_job_cancel(w->run[k]);
            }
            if (!s->o.no_batch_decode && pic_seq_decoding(w->run[k])) {
                w->dslot[nd++] = k;
                continue;
            }
            progress |= pic_seq_step(s, w, k);
        }
        if (nd > 0) {
            pic_worker_decode(s, w, nd);
            progress = 1;
        }
        pthread_mutex_lock(&s->stmu);
        s->st.rounds++;
        s->st.busy_s += (double) (pic_now_ns() - t0) * 1e-9;
        pthread_mutex_unlock(&s->stmu);
        if (!progress) {
            /* every running job waits for a remote entry: sleep until one
             * arrives (pic_sched_wake), a job comes, or 10 ms pass */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 10 * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_mutex_lock(&s->qmu);
            if (!s->stopping && s->qhead == NULL) {
                pthread_cond_timedwait(&s->qcv, &s->qmu, &ts);
            }
            pthread_mutex_unlock(&s->qmu);
        }
    }
    return NULL;
}

/* The keeper: cache upkeep that no request waits for (pic_plan_idle: the
 * prefix tree's checkpoint re-solve), on one thread of its own at a lower
 * priority (nice + 10: the workers' requests come first wherever they
 * compete for a core), with one thread while a request is queued or
 * running and the workers' threads while none is. */
static void *
pic_keeper_main(void *arg)
{
    pic_sched *s = arg;
    pid_t      tid = (pid_t) syscall(SYS_gettid);

    errno = 0;
    int nv = getpriority(PRIO_PROCESS, (id_t) tid);
    if (errno == 0) {
        (void) setpriority(PRIO_PROCESS, (id_t) tid, nv + 10 > 19 ? 19 : nv + 10);
    }
    int        was_busy = 1;

    pic_kernels_set_threads(1);
    for (;;) {
        struct timespec ts;

        int busy;

        pthread_mutex_lock(&s->qmu);
        if (s->stopping) {
            pthread_mutex_unlock(&s->qmu);
            break;
        }
        busy = s->running > 0 || s->qlen > 0;
        pthread_mutex_unlock(&s->qmu);
        /* an idle engine's cores are the keeper's: a build queued at a first
         * sighting is done before the next request more often (a request
         * arriving meanwhile still comes first: the keeper is niced) */
        if (busy != was_busy) {
            pic_kernels_set_threads(busy ? 1 : s->o.threads);
            was_busy = busy;
        }
        if (pic_plan_idle(s->o.plan_ctx, busy)) {
            continue;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&s->qmu);
        if (!s->stopping) {
            pthread_cond_timedwait(&s->qcv, &s->qmu, &ts);
        }
        pthread_mutex_unlock(&s->qmu);
    }
    return NULL;
}

/* --- lifetime --- */

pic_sched *
pic_sched_init(const pic_sched_opts *opts, char *err, size_t errlen)
{
    pic_sched *s;

    if (opts->model == NULL || opts->notify == NULL || opts->workers < 1
        || opts->threads < 1 || opts->max_batch < 1 || opts->max_queue < 0
        || opts->max_ctx < 2) {
        snprintf(err, errlen, "%s: bad options", __func__);
        return NULL;
    }
    if (opts->be != NULL && !opts->be->host
        && (opts->plan_ctx != NULL || opts->workers != 1)) {
        snprintf(err, errlen, "%s: --device %s serves --cache-mode full with one "
                 "worker (the prefix tree, PIC entries and checkpoints hold host "
                 "states)", __func__, opts->be->name);
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    s->o = *opts;
    pthread_mutex_init(&s->qmu, NULL);
    pthread_cond_init(&s->qcv, NULL);
    pthread_mutex_init(&s->stmu, NULL);
    pthread_mutex_init(&s->gvmu, NULL);
    s->w = calloc((size_t) opts->workers, sizeof(pic_worker));
    if (s->w == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        pic_sched_free(s);
        return NULL;
    }
    for (int i = 0; i < opts->workers; i++) {
        pic_worker *w = &s->w[i];

        w->s = s;
        w->idx = i;
        w->run = calloc((size_t) opts->max_batch, sizeof(pic_job *));
        w->st = calloc((size_t) opts->max_batch, sizeof(pic_state *));
        w->logits = malloc((size_t) opts->max_batch * opts->model->cfg.vocab
                           * sizeof(float));
        w->dslot = calloc((size_t) opts->max_batch, sizeof(int));
        w->dst = calloc((size_t) opts->max_batch, sizeof(pic_state *));
        w->dtok = calloc((size_t) opts->max_batch, sizeof(int));
        if (w->run == NULL || w->st == NULL || w->logits == NULL || w->dslot == NULL
            || w->dst == NULL || w->dtok == NULL) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            pic_sched_free(s);
            return NULL;
        }
        if (pthread_create(&w->th, NULL, pic_worker_main, w) != 0) {
            snprintf(err, errlen, "%s: cannot start a worker thread: %s", __func__,
                     strerror(errno));
            pic_sched_free(s);
            return NULL;
        }
        w->started = 1;
    }
    const pic_plan_ctx *pctx = opts->plan_ctx;
    if (pctx != NULL && pctx->prefix != NULL) {
        if (pthread_create(&s->keeper, NULL, pic_keeper_main, s) != 0) {
            snprintf(err, errlen, "%s: cannot start the keeper thread: %s", __func__,
                     strerror(errno));
            pic_sched_free(s);
            return NULL;
        }
        s->keeper_started = 1;
    }
    return s;
}

void
pic_sched_free(pic_sched *s)
{
    if (s == NULL) {
        return;
    }
    pthread_mutex_lock(&s->qmu);
    s->stopping = 1;
    pic_queue_reap_locked(s);
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    if (s->keeper_started) {
        pthread_join(s->keeper, NULL);
    }
    for (int i = 0; s->w != NULL && i < s->o.workers; i++) {
        pic_worker *w = &s->w[i];

        if (w->started) {
            pthread_join(w->th, NULL);
        }
        for (int k = 0; w->st != NULL && k < s->o.max_batch; k++) {
            pic_state_free(w->st[k]);
        }
        pic_workspace_free(s->o.be != NULL ? s->o.be : pic_backend_cpu(), &w->ws);
        free(w->st);
        free(w->run);
        free(w->logits);
        free(w->dslot);
        free(w->dst);
        free(w->dtok);
    }
    free(s->w);
    pic_gvocab_free(s->gv);
    pthread_mutex_destroy(&s->gvmu);
    pthread_mutex_destroy(&s->qmu);
    pthread_cond_destroy(&s->qcv);
    pthread_mutex_destroy(&s->stmu);
    free(s);
}

void
pic_sched_wake(pic_sched *s)
{
    pthread_mutex_lock(&s->qmu);
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
}

void
pic_sched_stats_get(pic_sched *s, pic_sched_stats *st)
{
    pthread_mutex_lock(&s->stmu);
    *st = s->st;
    pthread_mutex_unlock(&s->stmu);
    pthread_mutex_lock(&s->qmu);
    st->running = s->running;
    st->queued = s->qlen;
    pthread_mutex_unlock(&s->qmu);
    st->workers = s->o.workers;
    st->max_batch = s->o.max_batch;
    st->max_queue = s->o.max_queue;
    st->threads = s->o.threads;
}
