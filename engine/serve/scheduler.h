/*
 * scheduler.h — compute scheduling for the engine server.
 *
 * The event loop never computes.  It hands a pic_job (prompt, sampling
 * parameters, deadline) to the scheduler; worker threads own the compute.
 * Each worker runs a batch of up to max_batch sequences and goes round the
 * batch one step at a time: a step is one prefill chunk (PIC_UBATCH tokens,
 * so chunking changes no bit of the result), a plan step, or one decode
 * token.  The decode tokens of a round are one pic_forward_batch over every
 * sequence past its prompt (the weights are streamed once per round, not
 * once per sequence); prefill chunks and plan steps go one at a time before
 * it.  Every running request therefore advances by one token per round, a
 * long prefill never stalls the others for more than one chunk, and a
 * cancelled or expired job is dropped before its next step ("within one
 * step").  Jobs wait in one bounded FIFO shared by the workers;
 * pic_sched_submit refuses when it is full.  A failed job ends with a reason
 * (pic_job_error, plan_exec.h) that the HTTP layer maps to a status.
 *
 * Threads and ownership.  The submitter fills the input fields, then only
 * touches a job through pic_job_take / pic_job_cancel until take reports
 * done; from then on the scheduler never touches it again and the
 * submitter frees it.  Workers publish text and counters under job->mu and
 * then call opts.notify (any thread), which the server turns into a wake-up
 * of its event loop (event_active).  The loop then takes from its jobs.
 *
 * CPU: each worker sets its own OpenMP thread count (the ICV is per thread);
 * OpenBLAS stays single-threaded (pic_kernels.c).  workers × threads should
 * not exceed the cores.
 */
#ifndef PIC_SCHEDULER_H
#define PIC_SCHEDULER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "grammar.h"
#include "plan_exec.h"
#include "sample.h"
#include "tokenizer.h"

#define PIC_JOB_MAX_STOP 4          /* stop strings per request (OpenAI: 4) */
#define PIC_JOB_MARKS    32         /* timeline marks kept per job (PIC_TRACE) */

/* One point of a job's wall-clock timeline (pic_job_mark). */
typedef struct {
    int64_t ns;                     /* CLOCK_MONOTONIC (pic_now_ns) */
    char    what[12];
} pic_job_mark_t;

typedef enum {
    PIC_FINISH_NONE = 0,            /* still running */
    PIC_FINISH_STOP,                /* stop token or stop string */
    PIC_FINISH_LENGTH,              /* max_tokens or the context is full */
    PIC_FINISH_CANCELLED,           /* pic_job_cancel (client went away) */
    PIC_FINISH_ERROR,               /* error / err_msg say why */
} pic_finish;

typedef struct pic_seq pic_seq;     /* worker-side run state (scheduler.c) */
struct pic_plan_job;                /* plan_exec.h */

typedef struct pic_job {
    /* --- input: set before pic_sched_submit, read-only afterwards --- */
    char              *text;        /* prompt text, tokenized on the worker */
    size_t             text_len;
    int32_t           *prompt;      /* (n_prompt) ids instead of text; owned */
    int                n_prompt;
    int                max_tokens;  /* <= 0: until the context is full */
    pic_sample_params  sample;
    char              *stop[PIC_JOB_MAX_STOP];  /* owned, NUL-terminated */
    int                n_stop;
    int64_t            deadline_ns; /* CLOCK_MONOTONIC; 0: none */
    int                ignore_eos;  /* keep going past stop tokens */
    int32_t           *bias_id;     /* owned arrays behind sample.bias_id / .bias */
    float             *bias;
    int                logprobs;    /* record each generated token's logprob */
    int                top_logprobs;/* ... with this many alternatives (<= 20) */
    int32_t           *force;       /* (n_force) ids generated first whatever the
                                     * model says (tool_choice, scripted replies);
                                     * owned */
    int                n_force;
    int                force_stop;  /* end (stop) once the forced ids are out */
    int                json;        /* response_format: the answer is JSON
                                     * (constrained decoding, grammar.h) */
    cJSON             *json_schema; /* ... following this schema (owned), or NULL:
                                     * any JSON object */
    int                json_after_think;  /* constrain only after </think> */
    int                think_budget;      /* json_after_think: reasoning tokens before
                                           * the think block is closed for the model
                                           * (at most half of what it may generate) */
    int32_t           *think_close; /* (n_think_close) ids that close the think block
                                     * for the model (its budget spent, or a stop
                                     * token inside it), then open the constrained
                                     * answer (a forced call's opening); owned */
    int                n_think_close;
    int32_t           *think_after; /* (n_think_after) ids after the model's own
                                     * </think> (a forced call's opening); owned */
    int                n_think_after;
    int                json_or_tool;      /* a <tool_call> first lifts it */
    int                call;        /* with json: the answer is one tool call after
                                     * the forced "<tool_call>\n..." (tool_choice);
                                     * 1 + pic_gcall_syntax, 0: not a call */
    cJSON             *call_fns;    /* owned: [{"name", "parameters"}] to pick from,
                                     * or (call_named) the parameters schema; NULL
                                     * for a named function: any arguments */
    int                call_named;  /* the forced ids named the function */
    int                call_strict; /* tool_choice auto with strict tools: a
                                     * <tool_call> the model writes starts the call
                                     * grammar over call_fns (strict tools' schemas,
                                     * the others any arguments), lifted once the
                                     * call is complete; 1 + pic_gcall_syntax */
    int                strict_think;/* call_strict: the prompt opens a think block
                                     * (a <tool_call> counts after </think>) */
    int32_t           *call_nl;     /* (n_call_nl) ids after such a <tool_call>:
                                     * "\n"; owned */
    int                n_call_nl;
    int                one_call;    /* parallel_tool_calls false: a strict call,
                                     * once complete, ends the answer */
    int32_t            call_open1;  /* 1 + the special id that opens the model's
                                     * calls, kept in the text; 0: none */
    struct pic_plan_job *plan;      /* segments for the pools (owned), or NULL:
                                     * plain prefill of text / prompt */
    int                build_only;  /* a peer's prefill: frame every segment's
                                     * entry into the output (binary records,
                                     * transport.h), generate nothing */
    void              *user;        /* the submitter's context */

    /* --- shared with the worker: guarded by mu --- */
    pthread_mutex_t    mu;
    char              *out;         /* (out_len) text produced since the last take */
    size_t             out_len, out_cap;
    int                dirty;       /* something changed since the last take */
    int                n_prompt_tokens;   /* known once tokenized */
    int                n_cached;    /* prompt tokens found cached: n_exact + older entries' */
    int                n_exact;     /* resumed exactly (prefix tree, leading whole entry) */
    int                n_pic;       /* composed from PIC entries, whatever made them */
    int                n_gen;       /* tokens generated so far */
    int                n_prefilled; /* prompt positions in the state so far (restored
                                     * from a cache or computed): prefill progress */
    int                started;     /* a worker took it from the queue */
    pic_token_logprob *lp;          /* (n_lp) logprobs since the last take */
    int                n_lp;
    size_t             cap_lp;
    int                done;        /* the scheduler has let go of the job */
    pic_finish         finish;
    pic_job_error      error;       /* why, for PIC_FINISH_ERROR */
    char               err_msg[256];
    char              *held;        /* plan jobs, once assembled: the segments the
                                     * pool holds (X-PIC-Held hex, pic_plan.h);
                                     * set once, before the first token */
    int64_t            t_submit_ns, t_start_ns, t_first_ns, t_done_ns;
    pic_job_mark_t     marks[PIC_JOB_MARKS];    /* timeline: the loop thread's
                                                 * marks before submit and after
                                                 * done, the worker's between */
    int                n_marks;

    int64_t            cancel_ns;   /* atomic: when pic_job_cancel was called */
    int                stop_asked;  /* atomic: pic_job_stop was called */
    int                queued;      /* in the wait queue (queue lock) */
    struct pic_job    *qnext;       /* wait queue link (queue lock) */
    pic_seq           *seq;         /* worker-only */
} pic_job;

/* What pic_job_take hands over. */
typedef struct {
    char       *text;               /* new text (malloc'ed, maybe NULL), caller frees */
    size_t      len;
    int         n_prompt;
    int         n_cached;
    int         n_exact;            /* n_exact <= n_cached <= n_exact + n_pic */
    int         n_pic;
    int         n_gen;
    pic_token_logprob *lp;          /* (n_lp) new logprob records, caller frees */
    int         n_lp;
    int         started;            /* the first token exists (t_first_ns set) */
    int         done;
    pic_finish  finish;
    pic_job_error error;            /* PIC_FINISH_ERROR: why */
    const char *err_msg;            /* valid while the job lives */
    const char *held;               /* pic_job.held (valid while the job lives), or
                                     * NULL: not a plan job, or not assembled */
} pic_job_update;

typedef struct {
    const pic_model     *model;
    const pic_tokenizer *tok;       /* needed for text prompts and output text */
    int                  workers;   /* compute threads, >= 1 */
    int                  threads;   /* OpenMP threads per worker, >= 1 */
    int                  max_batch; /* running sequences per worker, >= 1 */
    int                  max_queue; /* waiting jobs before submit refuses, >= 0 */
    int                  max_ctx;   /* positions per sequence */
    void               (*notify)(void *arg);    /* a job has news (any thread) */
    void                *notify_arg;
    const void          *plan_ctx;  /* const pic_plan_ctx * for jobs with a plan */
    int                  no_batch_decode;   /* decode one sequence per forward
                                             * (round-robin; for comparison) */
    const pic_backend   *be;        /* NULL: CPU; else a device backend: model's
                                     * weights and every state in its memory
                                     * (full recompute only: plan_ctx NULL) */
} pic_sched_opts;

typedef struct {
    uint64_t submitted, rejected, completed, cancelled, expired, failed;
    uint64_t prompt_tokens, gen_tokens, cached_tokens;
    uint64_t exact_tokens, pic_tokens;  /* exact <= cached <= exact + pic (plan jobs) */
    uint64_t recomputed_tokens;     /* plan jobs' prompt tokens run through the model */
    uint64_t sessions_kept;         /* finished requests kept as a tree checkpoint */
    uint64_t prefill_steps, decode_steps, rounds;
    uint64_t decode_batches;        /* forwards that ran the decode steps */
    double   cancel_latency_max_ms; /* longest cancel → compute released */
    uint64_t plan_jobs;             /* prompts assembled from segments */
    uint64_t seg_hits, seg_peer, seg_built, seg_rejected, seg_remote_failed;
    uint64_t plan_waits;            /* steps a job waited for a remote entry */
    uint64_t frames_sent;           /* entries framed for peers */
    double   assemble_s;            /* seconds in pic_assemble (combine forward) */
    double   build_s;               /* seconds building entries (prefill alone + T) */
    int      running, queued, workers, max_batch, max_queue, threads;
    double   busy_s;                /* seconds workers spent computing */
} pic_sched_stats;

typedef struct pic_sched pic_sched;

/* Start the worker threads; NULL + err on a bad option or failure. */
pic_sched *pic_sched_init(const pic_sched_opts *opts, char *err, size_t errlen);

/* Cancel everything, join the workers, free (NULL is fine).  Jobs still
 * held by the submitter end up done (cancelled) and are not freed here. */
void pic_sched_free(pic_sched *s);

/* Wake idle workers (a remote entry arrived); any thread. */
void pic_sched_wake(pic_sched *s);

/* 1 if a job submitted now would be admitted.  Only the loop thread
 * submits and workers only make room, so the answer holds until the loop's
 * next submit. */
int pic_sched_has_room(pic_sched *s);

/* Queue a job: 0, or -1 when the wait queue is full, or -2 when the
 * scheduler is shutting down. */
int pic_sched_submit(pic_sched *s, pic_job *j);

/* Counters and gauges (a consistent snapshot of the counters). */
void pic_sched_stats_get(pic_sched *s, pic_sched_stats *st);

/* A zeroed job with its mutex ready; NULL on allocation failure. */
pic_job *pic_job_new(void);

/* Add what at time ns (0: now) to j's timeline; marks past PIC_JOB_MARKS
 * are dropped (the last one is overwritten).  Only the thread that owns
 * the job at that moment calls it (the submitter before submit and after
 * done, the worker in between). */
void pic_job_mark(pic_job *j, const char *what, int64_t ns);

/* Free a job that was never submitted or whose take reported done. */
void pic_job_free(pic_job *j);

/* Ask the scheduler to drop the job before its next step (any thread). */
void pic_job_cancel(pic_job *j);

/* Ask the scheduler to end the job normally (finish "stop") before its
 * next step, e.g. once the one tool call allowed is complete (any thread). */
void pic_job_stop(pic_job *j);

/* Move the job's news into u; returns 1 if anything changed since the last
 * take, else 0.  u->text and u->lp must be freed by the caller. */
int pic_job_take(pic_job *j, pic_job_update *u);

/* Where a job stands, for /status (any thread; takes nothing). */
typedef struct {
    int started;                    /* out of the wait queue */
    int n_prompt;                   /* prompt tokens, 0 until tokenized */
    int n_prefilled;                /* of which in the state so far */
    int n_cached;                   /* of which from caches (once assembled) */
    int n_gen;                      /* tokens generated */
} pic_job_progress;

void pic_job_progress_get(pic_job *j, pic_job_progress *p);


#endif /* PIC_SCHEDULER_H */
