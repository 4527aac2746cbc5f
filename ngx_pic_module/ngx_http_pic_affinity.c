/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: pic affinity (see ngx_http_pic_affinity.h).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "pic_route.h"
#include "pic_usage.h"

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"
#include "ngx_http_pic_engine.h"
#include "ngx_http_pic_error.h"
#include "ngx_http_pic_redis.h"
#include "ngx_http_pic_route.h"
#include "ngx_http_pic_affinity.h"


#define NGX_HTTP_PIC_AFFINITY_FORGET  64       /* chains sent to redis as
                                                * forgotten, a request */


/* one prefix chain recorded on one replica */
typedef struct {
    ngx_rbtree_node_t            node;         /* key: chain key ^ slot */
    ngx_queue_t                  queue;        /* its replica's LRU */
    uint64_t                     used;         /* sh->aff_clock then */
    uint32_t                     len;          /* the prefix's bytes */
    uint32_t                     bytes;        /* what its last segment adds */
    ngx_uint_t                   slot;
    u_char                       key[NGX_HTTP_PIC_KEY_LEN];
    u_char                       seg[NGX_HTTP_PIC_KEY_LEN]; /* last segment */
} ngx_http_pic_affinity_node_t;


/* what one record call forgot, for redis and the segment index */
typedef struct {
    u_char                       chains[NGX_HTTP_PIC_AFFINITY_FORGET]
                                       [NGX_HTTP_PIC_KEY_LEN];
    u_char                       segs[NGX_HTTP_PIC_AFFINITY_FORGET]
                                     [NGX_HTTP_PIC_KEY_LEN];
    ngx_uint_t                   n;
} ngx_http_pic_affinity_forgot_t;


static void ngx_http_pic_affinity_init_locked(ngx_http_pic_shctx_t *sh);
static void ngx_http_pic_affinity_rbtree_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static ngx_http_pic_affinity_node_t *ngx_http_pic_affinity_find_locked(
    ngx_http_pic_shctx_t *sh, u_char *key, ngx_uint_t slot);
static void ngx_http_pic_affinity_drop_locked(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_affinity_node_t *a, ngx_http_pic_affinity_forgot_t *f);
static void ngx_http_pic_affinity_record(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_ctx_t *ctx, ngx_uint_t n, ngx_uint_t slot, size_t cache,
    ngx_uint_t news, uint64_t *stamp);
static void ngx_http_pic_affinity_forgotten(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_affinity_forgot_t *f, ngx_uint_t slot);
static size_t ngx_http_pic_affinity_capacity(ngx_http_pic_engine_sh_t *e,
    size_t tokens);


static ngx_rbtree_key_t
ngx_http_pic_affinity_hash(u_char *key, ngx_uint_t slot)
{
    uint64_t  h;

    ngx_memcpy(&h, key, sizeof(uint64_t));

    return (ngx_rbtree_key_t) (h ^ ((uint64_t) slot * 0x9e3779b97f4a7c15ULL));
}


static ngx_int_t
ngx_http_pic_affinity_cmp(u_char *key, ngx_uint_t slot,
    ngx_http_pic_affinity_node_t *a)
{
    ngx_int_t  rc;

    rc = ngx_memcmp(key, a->key, NGX_HTTP_PIC_KEY_LEN);

    if (rc == 0) {
        rc = (ngx_int_t) slot - (ngx_int_t) a->slot;
    }

    return rc;
}


/* the record tree and the replicas' LRUs, made on first use (the zone is
 * zeroed when made; the caller holds the lock) */

static void
ngx_http_pic_affinity_init_locked(ngx_http_pic_shctx_t *sh)
{
    ngx_uint_t  i;

    if (sh->aff_rbtree.sentinel != NULL) {
        return;
    }

    ngx_rbtree_init(&sh->aff_rbtree, &sh->aff_sentinel,
                    ngx_http_pic_affinity_rbtree_insert_value);

    for (i = 0; i < NGX_HTTP_PIC_MAX_ENGINES; i++) {
        ngx_queue_init(&sh->aff_lru[i]);
    }
}


static void
ngx_http_pic_affinity_rbtree_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_rbtree_node_t             **p;
    ngx_http_pic_affinity_node_t   *a, *t;

    a = (ngx_http_pic_affinity_node_t *) node;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else {
            t = (ngx_http_pic_affinity_node_t *) temp;
            p = (ngx_http_pic_affinity_cmp(a->key, a->slot, t) < 0)
                ? &temp->left : &temp->right;
        }

        if (*p == sentinel) {
            break;
        }

        temp = *p;
    }

    *p = node;
    node->parent = temp;
    node->left = sentinel;
    node->right = sentinel;
    ngx_rbt_red(node);
}


static ngx_http_pic_affinity_node_t *
ngx_http_pic_affinity_find_locked(ngx_http_pic_shctx_t *sh, u_char *key,
    ngx_uint_t slot)
{
    ngx_int_t                      rc;
    ngx_rbtree_key_t               hash;
    ngx_rbtree_node_t             *node, *sentinel;
    ngx_http_pic_affinity_node_t  *a;

    hash = ngx_http_pic_affinity_hash(key, slot);

    node = sh->aff_rbtree.root;
    sentinel = sh->aff_rbtree.sentinel;

    while (node != sentinel) {

        if (hash < node->key) {
            node = node->left;
            continue;
        }

        if (hash > node->key) {
            node = node->right;
            continue;
        }

        a = (ngx_http_pic_affinity_node_t *) node;

        rc = ngx_http_pic_affinity_cmp(key, slot, a);

        if (rc == 0) {
            return a;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    return NULL;
}


void
ngx_http_pic_affinity_lookup(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *chains, ngx_uint_t n, uint64_t mask)
{
    uint64_t                       m;
    ngx_uint_t                     i, s;
    ngx_http_pic_affinity_node_t  *a;

    ngx_shmtx_lock(&zc->shpool->mutex);

    ngx_http_pic_affinity_init_locked(zc->sh);

    for (i = 0; i < n; i++) {
        for (m = mask, s = 0; m; m >>= 1, s++) {
            if (!(m & 1)) {
                continue;
            }

            a = ngx_http_pic_affinity_find_locked(zc->sh, chains[i].key, s);

            if (a && a->len == chains[i].len) {
                chains[i].holders |= (uint64_t) 1 << s;
            }
        }
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


/* forget one record (the caller holds the lock) */

static void
ngx_http_pic_affinity_drop_locked(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_affinity_node_t *a, ngx_http_pic_affinity_forgot_t *f)
{
    ngx_http_pic_engine_sh_t  *e;

    e = &zc->sh->engines[a->slot];

    if (f && f->n < NGX_HTTP_PIC_AFFINITY_FORGET) {
        ngx_memcpy(f->chains[f->n], a->key, NGX_HTTP_PIC_KEY_LEN);
        ngx_memcpy(f->segs[f->n], a->seg, NGX_HTTP_PIC_KEY_LEN);
        f->n++;
    }

    e->aff_held -= ngx_min(e->aff_held, a->bytes);
    e->aff_forgot++;

    ngx_queue_remove(&a->queue);
    ngx_rbtree_delete(&zc->sh->aff_rbtree, &a->node);
    ngx_slab_free_locked(zc->shpool, a);

    zc->sh->aff_nodes--;
}


/*
 * The replica in slot holds the prompt's prefixes chains[0..n): each is
 * touched or added, the deepest first so that the shallower stay ahead of
 * it in the LRU (a prefix is used whenever a longer one is); then the
 * replica's oldest records go until its bytes fit its cache.  news: flag
 * the new ones for redis.  *stamp (when not NULL): the last use of the
 * deepest prefix already recorded, before this one.
 */

static void
ngx_http_pic_affinity_record(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_ctx_t *ctx, ngx_uint_t n, ngx_uint_t slot, size_t cache,
    ngx_uint_t news, uint64_t *stamp)
{
    size_t                          cap;
    ngx_uint_t                      i, fresh, stamped;
    ngx_queue_t                    *q, *lru;
    ngx_http_pic_segment_t         *c;
    ngx_http_pic_engine_sh_t       *e;
    ngx_http_pic_affinity_node_t   *a;
    ngx_http_pic_affinity_forgot_t  f;

    f.n = 0;
    fresh = 0;
    stamped = 0;

    if (stamp) {
        *stamp = 0;
    }

    ngx_shmtx_lock(&zc->shpool->mutex);

    ngx_http_pic_affinity_init_locked(zc->sh);

    e = &zc->sh->engines[slot];
    lru = &zc->sh->aff_lru[slot];

    for (i = n; i-- > 0; /* void */) {
        c = &ctx->chains[i];

        a = ngx_http_pic_affinity_find_locked(zc->sh, c->key, slot);

        if (a && a->len != c->len) {
            /* a key collision of two prompts: the newer wins */
            ngx_http_pic_affinity_drop_locked(zc, a, NULL);
            a = NULL;
        }

        if (a) {
            if (stamp && !stamped) {
                *stamp = a->used;
                stamped = 1;
            }

            ngx_queue_remove(&a->queue);

        } else {
            a = ngx_slab_alloc_locked(zc->shpool,
                                      sizeof(ngx_http_pic_affinity_node_t));

            while (a == NULL && !ngx_queue_empty(lru)) {
                /* a full zone: this replica's oldest records make room */
                q = ngx_queue_last(lru);
                ngx_http_pic_affinity_drop_locked(zc,
                        ngx_queue_data(q, ngx_http_pic_affinity_node_t, queue),
                        &f);

                a = ngx_slab_alloc_locked(zc->shpool,
                                      sizeof(ngx_http_pic_affinity_node_t));
            }

            if (a == NULL) {
                break;
            }

            ngx_memcpy(a->key, c->key, NGX_HTTP_PIC_KEY_LEN);
            ngx_memcpy(a->seg, ctx->segs[i].key, NGX_HTTP_PIC_KEY_LEN);
            a->slot = slot;
            a->len = c->len;
            a->bytes = ctx->segs[i].len;
            a->node.key = ngx_http_pic_affinity_hash(c->key, slot);

            ngx_rbtree_insert(&zc->sh->aff_rbtree, &a->node);
            zc->sh->aff_nodes++;
            e->aff_held += a->bytes;

            if (news) {
                c->flags |= NGX_HTTP_PIC_SEG_NEW;
                fresh++;
            }
        }

        a->used = ++zc->sh->aff_clock;
        ngx_queue_insert_head(lru, &a->queue);
    }

    /* what the replica cannot still hold: its least recently used */

    cap = ngx_http_pic_affinity_capacity(e, cache);

    while (cap && e->aff_held > cap && !ngx_queue_empty(lru)) {
        q = ngx_queue_last(lru);
        ngx_http_pic_affinity_drop_locked(zc,
                        ngx_queue_data(q, ngx_http_pic_affinity_node_t, queue),
                        &f);
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);

    if (fresh) {
        ngx_http_pic_redis_record_prefix(zc, ctx->chains, n, slot);
    }

    ngx_http_pic_index_learn(zc, ctx->segs, n, (ngx_int_t) slot);

    ngx_http_pic_affinity_forgotten(zc, &f, slot);
}


/* tell redis and the segment index what a replica was found to forget
 * (the segment may be held under another prefix too: a hint is lost, never
 * a wrong one kept) */

static void
ngx_http_pic_affinity_forgotten(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_affinity_forgot_t *f, ngx_uint_t slot)
{
    ngx_uint_t  i;

    if (f->n == 0) {
        return;
    }

    ngx_http_pic_redis_forget_prefix(zc, &f->chains[0][0], f->n, slot);

    for (i = 0; i < f->n; i++) {
        ngx_http_pic_index_holder(zc, f->segs[i], slot, 0);
    }
}


/* a replica's cache in prompt bytes (0: unbounded), from its tokens at the
 * bytes per token it reported */

static size_t
ngx_http_pic_affinity_capacity(ngx_http_pic_engine_sh_t *e, size_t tokens)
{
    ngx_uint_t  bpt;

    bpt = e->aff_bpt ? e->aff_bpt : NGX_HTTP_PIC_AFFINITY_BPT;

    return tokens * bpt / 1000;
}


ngx_int_t
ngx_http_pic_affinity_route(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx)
{
    uint64_t                     eligible, bit;
    ngx_uint_t                   i, j, n, best, *slot;
    u_char                      *tie;
    ngx_uint_t                   deepest[NGX_HTTP_PIC_MAX_ENGINES];
    pic_error                    err;
    pic_route_cand              *rc;
    ngx_http_pic_pool_t         *pool;
    ngx_pool_cleanup_t          *cln;
    ngx_http_pic_segment_t      *c;
    ngx_http_pic_zone_ctx_t     *zc;
    ngx_http_pic_loc_conf_t     *plcf;
    ngx_http_pic_main_conf_t    *pmcf;
    ngx_http_pic_engine_sh_t    *e;
    ngx_http_pic_engine_conf_t  *ec, **conf;

    zc = ngx_http_pic_zone(r);
    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);
    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pic_module);

    pool = plcf->pool;

    if (pool == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "pic affinity: no \"pic_upstream\" here");
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    eligible = ngx_http_pic_engine_eligible(zc, pmcf, pool);

    if (eligible == 0) {
        pic_error_set(&err, NGX_HTTP_SERVICE_UNAVAILABLE, "server_error",
                      NULL, "no_healthy_engine",
                      "no healthy replica in \"%.*s\"",
                      (int) pool->name.len, pool->name.data);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.no_engine, 1);
        return ngx_http_pic_error(r, ctx, &err, NGX_LOG_ERR);
    }

    rc = ngx_pcalloc(r->pool, pool->engines.nelts * sizeof(pic_route_cand));
    conf = ngx_pcalloc(r->pool, pool->engines.nelts
                                * sizeof(ngx_http_pic_engine_conf_t *));
    slot = ngx_pcalloc(r->pool, pool->engines.nelts * sizeof(ngx_uint_t));

    if (rc == NULL || conf == NULL || slot == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = 0;
    ec = pool->engines.elts;

    for (i = 0; i < pool->engines.nelts; i++) {
        if (ec[i].slot >= NGX_HTTP_PIC_MAX_ENGINES
            || !(eligible & ((uint64_t) 1 << ec[i].slot)))
        {
            continue;
        }

        e = &zc->sh->engines[ec[i].slot];

        conf[n] = &ec[i];
        slot[n] = ec[i].slot;
        rc[n].seed = ec[i].seed;
        rc[n].load = e->inflight + e->load;
        deepest[n] = 0;
        n++;
    }

    /* what redis taught: a replica holding a prefix holds the shorter ones,
     * recorded here (not sent back) */

    for (j = 0; j < n; j++) {
        bit = (uint64_t) 1 << slot[j];

        for (i = ctx->nsegs; i-- > 0; /* void */) {
            c = &ctx->chains[i];

            if ((c->flags & NGX_HTTP_PIC_SEG_REDIS) && (c->holders & bit)) {
                ctx->redis_hits++;
                ngx_http_pic_affinity_record(zc, ctx, i + 1, slot[j],
                                             plcf->replica_cache, 0, NULL);
                break;
            }
        }
    }

    /* the longest exact prefix each replica has, then its segment bytes
     * past that prefix */

    for (i = 0; i < ctx->nsegs; i++) {
        c = &ctx->chains[i];

        for (j = 0; j < n; j++) {
            if (c->holders & ((uint64_t) 1 << slot[j])) {
                rc[j].exact = c->len;
                rc[j].depth = i + 1;
                deepest[j] = i + 1;
            }
        }
    }

    for (i = 0; i < ctx->nsegs; i++) {
        ctx->segs[i].holders &= eligible;

        if (ctx->segs[i].holders) {
            ctx->segs[i].flags |= NGX_HTTP_PIC_SEG_HIT;
            ctx->hits++;
            ctx->hit_bytes += ctx->segs[i].len;
        }

        for (j = 0; j < n; j++) {
            if (i >= deepest[j]
                && (ctx->segs[i].holders & ((uint64_t) 1 << slot[j])))
            {
                rc[j].local += ctx->segs[i].len;
            }
        }
    }

    /* cold ties: the home of the prompt's opening past its leading
     * segment (a template's header is the same for everyone) */

    tie = NULL;

    if (ctx->nsegs) {
        tie = ctx->chains[ctx->nsegs > 1 ? 1 : 0].key;
    }

    best = pic_route_affinity(rc, n, plcf->imbalance, ctx->min_segment, tie);

    ctx->combine = slot[best];
    ctx->combine_name = conf[best]->name;
    ctx->exact_bytes = rc[best].exact;
    ctx->exact_segs = rc[best].depth;
    ctx->prefix_bytes = rc[best].exact;
    ctx->aff_answered = -1;

    /* recorded now, so that the next request with this prefix finds it
     * even while this one is still being computed */

    ngx_http_pic_affinity_record(zc, ctx, ctx->nsegs, ctx->combine,
                                 plcf->replica_cache, 1, &ctx->aff_stamp);

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* ngx_http_pic_route_done (via ngx_http_pic_route_planned) gives the
     * in-flight count back, even after an internal redirect */
    ngx_http_pic_route_cleanup(cln, ctx);

    pic_usage_init(&ctx->reuse);

    ctx->planned = 1;
    ctx->affinity = 1;
    ctx->inflight = 1;
    ctx->zc = zc;

    e = &zc->sh->engines[ctx->combine];
    ctx->combine_gen = ngx_http_pic_engine_acquire(zc, ctx->combine);

    (void) ngx_atomic_fetch_add(&e->requests, 1);
    (void) ngx_atomic_fetch_add(&e->aff_requests, 1);
    (void) ngx_atomic_fetch_add(&zc->sh->stats.affinity_routed, 1);
    (void) ngx_atomic_fetch_add(&zc->sh->stats.planned, 1);

    if (ctx->exact_bytes >= ctx->min_segment && ctx->exact_bytes) {
        /* routed on it: a prefix under the floor decided nothing */
        (void) ngx_atomic_fetch_add(&e->aff_hits, 1);
        (void) ngx_atomic_fetch_add(&e->aff_predicted,
                                    ctx->exact_bytes * 1000
                                    / (e->aff_bpt ? e->aff_bpt
                                                  : NGX_HTTP_PIC_AFFINITY_BPT));
        (void) ngx_atomic_fetch_add(&e->exact_requests, 1);
        (void) ngx_atomic_fetch_add(&e->exact_bytes, ctx->exact_bytes);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.affinity_hits, 1);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.exact_routed, 1);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.bytes_exact_routed,
                                    ctx->exact_bytes);
    }

    (void) ngx_atomic_fetch_add(&zc->sh->stats.segments, ctx->nsegs);
    (void) ngx_atomic_fetch_add(&zc->sh->stats.seg_hits, ctx->hits);
    (void) ngx_atomic_fetch_add(&zc->sh->stats.bytes_total, ctx->total_bytes);
    (void) ngx_atomic_fetch_add(&zc->sh->stats.bytes_hit, ctx->hit_bytes);
    (void) ngx_atomic_fetch_add(&zc->sh->stats.bytes_prefix,
                                ctx->prefix_bytes);
    (void) ngx_atomic_fetch_add(&zc->sh->stats.bytes_novel,
                                ctx->total_bytes - ctx->prefix_bytes);

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "pic affinity: %ui segments, prefix %uz of %uz bytes, "
                   "replica %V", ctx->nsegs, ctx->exact_bytes,
                   ctx->total_bytes, &ctx->combine_name);

    return NGX_DECLINED;
}


void
ngx_http_pic_affinity_answered(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx)
{
    ngx_int_t                 s;
    ngx_http_pic_zone_ctx_t  *zc;
    ngx_http_pic_loc_conf_t  *plcf;

    zc = ctx->zc;

    if (ctx->confirmed || zc == NULL || r->upstream == NULL
        || r->upstream->peer.name == NULL)
    {
        return;
    }

    ctx->confirmed = 1;

    ngx_shmtx_lock(&zc->shpool->mutex);
    s = ngx_http_pic_engine_slot_locked(zc->sh, r->upstream->peer.name, 0);
    ngx_shmtx_unlock(&zc->shpool->mutex);

    ctx->aff_answered = s;

    if (s >= 0 && s != ctx->combine) {
        /* nginx passed it on (proxy_next_upstream): that one has it now */
        plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);
        ngx_http_pic_affinity_record(zc, ctx, ctx->nsegs, (ngx_uint_t) s,
                                     plcf->replica_cache, 1, NULL);
    }
}


void
ngx_http_pic_affinity_finish(ngx_http_request_t *r,
    ngx_http_pic_zone_ctx_t *zc, ngx_http_pic_ctx_t *ctx)
{
    int64_t                        cached, prompt;
    uint64_t                       bpt, stamp;
    ngx_int_t                      s;
    ngx_queue_t                   *q, *lru;
    ngx_http_pic_engine_sh_t      *e;
    ngx_http_pic_affinity_node_t  *a;
    ngx_http_pic_affinity_forgot_t f;

    s = ctx->aff_answered >= 0 ? ctx->aff_answered : ctx->combine;

    if (s < 0 || r->headers_out.status != NGX_HTTP_OK) {
        return;
    }

    cached = pic_usage_cached(&ctx->reuse);
    prompt = pic_usage_prompt(&ctx->reuse);

    e = &zc->sh->engines[s];

    if (prompt > 0 && ctx->total_bytes) {
        /* its tokenizer on these prompts, smoothed (1/8 a request) */
        bpt = (uint64_t) ctx->total_bytes * 1000 / (uint64_t) prompt;

        ngx_shmtx_lock(&zc->shpool->mutex);
        e->aff_bpt = e->aff_bpt ? (7 * e->aff_bpt + bpt) / 8 : bpt;
        ngx_shmtx_unlock(&zc->shpool->mutex);
    }

    if (cached < 0) {
        return;
    }

    (void) ngx_atomic_fetch_add(&e->aff_reports, 1);
    (void) ngx_atomic_fetch_add(&e->aff_cached, (ngx_atomic_uint_t) cached);

    if (prompt > 0) {
        (void) ngx_atomic_fetch_add(&e->aff_prompt, (ngx_atomic_uint_t) prompt);
    }

    if (s != ctx->combine || ctx->exact_bytes == 0) {
        return;
    }

    bpt = e->aff_bpt ? e->aff_bpt : NGX_HTTP_PIC_AFFINITY_BPT;

    if ((uint64_t) cached * bpt / 1000 * 2 >= ctx->exact_bytes) {
        return;
    }

    /*
     * It kept less than half of the prefix recorded there: it evicted it,
     * or restarted.  Under LRU whatever it used before that prefix is gone
     * as well: those records go (this request's, just made, stay).
     */

    (void) ngx_atomic_fetch_add(&e->aff_misses, 1);
    (void) ngx_atomic_fetch_add(&zc->sh->stats.affinity_misses, 1);

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "pic affinity: replica \"%V\" reused %L tokens of a "
                  "recorded prefix of %uz bytes, forgetting what it used "
                  "before", &ctx->combine_name, cached, ctx->exact_bytes);

    f.n = 0;
    stamp = ctx->aff_stamp;

    ngx_shmtx_lock(&zc->shpool->mutex);

    ngx_http_pic_affinity_init_locked(zc->sh);

    lru = &zc->sh->aff_lru[s];

    while (!ngx_queue_empty(lru)) {
        q = ngx_queue_last(lru);
        a = ngx_queue_data(q, ngx_http_pic_affinity_node_t, queue);

        if (a->used > stamp) {
            break;
        }

        ngx_http_pic_affinity_drop_locked(zc, a, &f);
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);

    ngx_http_pic_affinity_forgotten(zc, &f, (ngx_uint_t) s);
}
