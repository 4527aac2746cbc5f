/*
 * remote.c — the combine node's client side of a gateway plan (DESIGN.md
 * §3.5): for every segment of the plan that can come from a pool and is not
 * in the local one, pull it from a holder (the first that is not this
 * engine), else ask its assigned worker to prefill it (one request per
 * worker with all its segments, in prompt order, so the worker streams each
 * entry as soon as it is built).  Those segments are marked PENDING before
 * the job is submitted; frames land in the segment (ARRIVED) and wake the
 * workers; an error, a deadline (--peer-timeout-ms) or a segment without a
 * record marks it FAILED, and the combine node computes it itself
 * (plan_exec.h): the request completes whatever the peers do, and /status
 * counts the failures.  One request opens at most PIC_REMOTE_OPS_MAX
 * connections (pulls + prefills); segments past the cap are computed here.
 * Engine ids in a plan are "host:port" addresses (what the gateway uses); an
 * id that is not one, or names this engine, is not contacted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "remote.h"

#define PIC_REMOTE_OPS_MAX 16     /* connections one request opens to peers */

struct pic_fetch {
    pic_remote       *r;
    pic_transport_op *op;
    struct pic_fetch *next;
    char              peer[PIC_ENGINE_ID_MAX + 1];
    int               n;
    int               idx[];        /* (n) plan segment of each position */
};

static void
pic_fetch_unlink(pic_fetch *f)
{
    pic_fetch **pp = &f->r->fetches;

    while (*pp != NULL && *pp != f) {
        pp = &(*pp)->next;
    }
    if (*pp == f) {
        *pp = f->next;
    }
}

static void
pic_fetch_on_frame(void *arg, int pos, void *buf, size_t len)
{
    pic_fetch    *f = arg;
    pic_server   *srv = f->r->srv;
    pic_plan_job *pj = f->r->job->plan;
    pic_job_segment *g;

    if (pos < 0 || pos >= f->n || pj == NULL) {
        free(buf);
        return;
    }
    g = &pj->segs[f->idx[pos]];
    if (__atomic_load_n(&g->remote, __ATOMIC_ACQUIRE) != PIC_REMOTE_PENDING) {
        free(buf);
        return;
    }
    g->frame = buf;
    g->frame_len = len;
    __atomic_store_n(&g->remote, PIC_REMOTE_ARRIVED, __ATOMIC_RELEASE);
    srv->hs.peer_frames++;
    pic_sched_wake(srv->sched);
}

static void
pic_fetch_on_done(void *arg, int ok, const char *why)
{
    pic_fetch    *f = arg;
    pic_server   *srv = f->r->srv;
    pic_plan_job *pj = f->r->job->plan;
    int           missing = 0;

    for (int i = 0; pj != NULL && i < f->n; i++) {
        pic_job_segment *g = &pj->segs[f->idx[i]];
        int       want = PIC_REMOTE_PENDING;

        if (__atomic_compare_exchange_n(&g->remote, &want, PIC_REMOTE_FAILED, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            missing++;
        }
    }
    if (!ok || missing > 0) {
        srv->hs.peer_failures++;
        fprintf(stderr, "pic-engine[%s]: peer %s: %s; computing %d segment(s) here\n",
                srv->opts->id, f->peer, ok ? "segments missing" : why, missing);
    }
    f->op = NULL;               /* the transport lets go of it after this */
    pic_fetch_unlink(f);
    free(f);
    pic_sched_wake(srv->sched);
}

/* 1 if engine id names this engine. */
static int
pic_remote_is_self(pic_server *srv, const char *id)
{
    return strcmp(id, srv->opts->id) == 0 || strcmp(id, srv->addr) == 0;
}

static pic_fetch *
pic_fetch_new(pic_remote *r, const char *peer, int n)
{
    pic_fetch *f = calloc(1, sizeof(*f) + (size_t) n * sizeof(int));

    if (f != NULL) {
        f->r = r;
        snprintf(f->peer, sizeof(f->peer), "%s", peer);
    }
    return f;
}

void
pic_remote_dispatch(pic_remote *r, const pic_plan *plan)
{
    pic_server   *srv = r->srv;
    pic_plan_job *pj = r->job->plan;
    const char   *text = r->job->text;
    int           timeout = srv->opts->peer_timeout_ms > 0 ? srv->opts->peer_timeout_ms
                                                           : 30000;
    int          *worker_of, ops = 0;

    if (srv->transport == NULL || pj == NULL || (size_t) pj->n_segs != plan->n_segs
        || srv->plan.mode == PIC_MODE_FULL) {
        return;
    }
    worker_of = malloc(plan->n_segs * sizeof(int));
    if (worker_of == NULL) {
        return;
    }
    for (size_t i = 0; i < plan->n_segs; i++) {
        const pic_plan_segment *ps = &plan->segs[i];
        pic_job_segment    *g = &pj->segs[i];
        const char         *holder = NULL;

        worker_of[i] = -1;
        if (ps->kind == PIC_SEG_DYNAMIC || (ps->kind == PIC_SEG_PREFIX && i != 0)
            || (srv->plan.mode == PIC_MODE_PREFIX && ps->kind != PIC_SEG_PREFIX)
            || pic_pool_contains(srv->pool, g->key, g->len)) {
            continue;
        }
        for (int h = 0; h < ps->n_holders; h++) {
            const char *id = plan->engines[ps->holders[h]].id;
            if (!pic_remote_is_self(srv, id)) {
                holder = id;
                break;
            }
        }
        if (holder != NULL && ops >= PIC_REMOTE_OPS_MAX) {
            continue;           /* over the cap: computed here */
        }
        if (holder != NULL) {
            pic_fetch *f = pic_fetch_new(r, holder, 1);
            if (f == NULL) {
                continue;
            }
            f->n = 1;
            f->idx[0] = (int) i;
            g->remote_cached = 1;
            __atomic_store_n(&g->remote, PIC_REMOTE_PENDING, __ATOMIC_RELEASE);
            f->next = r->fetches;
            r->fetches = f;
            srv->hs.peer_fetches++;
            ops++;
            f->op = srv->transport->ops->pull(srv->transport, holder, g->key, g->len,
                                              srv->key_fp, timeout, pic_fetch_on_frame,
                                              pic_fetch_on_done, f);
            if (f->op == NULL) {
                __atomic_store_n(&g->remote, PIC_REMOTE_NONE, __ATOMIC_RELEASE);
                pic_fetch_unlink(f);
                free(f);
                srv->hs.peer_failures++;
            }
            continue;
        }
        if (ps->worker >= 0 && !pic_remote_is_self(srv, plan->engines[ps->worker].id)) {
            worker_of[i] = ps->worker;
        }
    }
    /* one remote prefill per worker, its segments in prompt order */
    for (size_t w = 0; w < plan->n_engines; w++) {
        pic_remote_segment *ts;
        pic_fetch         *f;
        char             **texts;
        int                n = 0;

        for (size_t i = 0; i < plan->n_segs; i++) {
            n += worker_of[i] == (int) w;
        }
        if (n == 0 || ops >= PIC_REMOTE_OPS_MAX) {
            continue;
        }
        ops++;
        f = pic_fetch_new(r, plan->engines[w].id, n);
        ts = calloc((size_t) n, sizeof(*ts));
        texts = calloc((size_t) n, sizeof(char *));
        if (f == NULL || ts == NULL || texts == NULL) {
            free(f);
            free(ts);
            free(texts);
            continue;
        }
        for (size_t i = 0; i < plan->n_segs; i++) {
            pic_job_segment *g = &pj->segs[i];
            if (worker_of[i] != (int) w) {
                continue;
            }
            texts[f->n] = strndup(text + g->offset, g->len);
            ts[f->n].index = (int) i;
            ts[f->n].key = g->key;
            ts[f->n].bytes = g->len;
            ts[f->n].kind = pic_seg_kind_name(g->kind);
            ts[f->n].doc = (g->flags & PIC_SEG_FLAG_DOC) != 0;
            ts[f->n].text = texts[f->n] ? texts[f->n] : "";
            f->idx[f->n++] = (int) i;
        }
        for (int k = 0; k < f->n; k++) {
            __atomic_store_n(&pj->segs[f->idx[k]].remote, PIC_REMOTE_PENDING,
                             __ATOMIC_RELEASE);
        }
        f->next = r->fetches;
        r->fetches = f;
        srv->hs.peer_fetches++;
        f->op = srv->transport->ops->prefill(srv->transport, f->peer, ts, f->n, srv->key_fp,
                                             plan->scope, timeout, pic_fetch_on_frame,
                                             pic_fetch_on_done, f);
        if (f->op == NULL) {
            for (int k = 0; k < f->n; k++) {
                __atomic_store_n(&pj->segs[f->idx[k]].remote, PIC_REMOTE_NONE,
                                 __ATOMIC_RELEASE);
            }
            pic_fetch_unlink(f);
            free(f);
            srv->hs.peer_failures++;
        }
        for (int k = 0; k < n; k++) {
            free(texts[k]);
        }
        free(texts);
        free(ts);
    }
    free(worker_of);
}

void
pic_remote_cancel(pic_remote *r)
{
    pic_fetch *f = r->fetches, *next;

    for (; f != NULL; f = next) {
        next = f->next;
        if (f->op != NULL) {
            r->srv->transport->ops->cancel(f->op);
        }
        free(f);
    }
    r->fetches = NULL;
}
