/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the shared zone (counters, engine table, segment
 * index).  Laid out like ngx_http_limit_req_module: the zone is tagged with
 * the module, kept on reload, and every tree walk holds the slab mutex.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <xxhash.h>

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"


typedef struct {
    ngx_rbtree_node_t            node;         /* key: first 8 key bytes */
    ngx_queue_t                  queue;        /* LRU, most recent first */
    uint64_t                     engines;      /* slots holding the segment */
    uint64_t                     stamp;        /* zone seq when last set */
    ngx_msec_t                   used;
    uint32_t                     len;
    u_char                       kind;         /* NGX_HTTP_PIC_NODE_* */
    u_char                       key[NGX_HTTP_PIC_KEY_LEN];
} ngx_http_pic_index_node_t;


static void ngx_http_pic_index_rbtree_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel);
static ngx_http_pic_index_node_t *ngx_http_pic_index_find_locked(
    ngx_http_pic_shctx_t *sh, u_char *key, ngx_uint_t kind);
static ngx_http_pic_index_node_t *ngx_http_pic_index_add_locked(
    ngx_http_pic_zone_ctx_t *zc, u_char *key, ngx_uint_t kind, uint32_t len);
static void ngx_http_pic_index_expire_locked(ngx_http_pic_zone_ctx_t *zc,
    ngx_uint_t n);
static void ngx_http_pic_index_register_engines_locked(
    ngx_http_pic_zone_ctx_t *zc);
static uint64_t ngx_http_pic_index_holders_locked(ngx_http_pic_shctx_t *sh,
    ngx_http_pic_index_node_t *n);
static void ngx_http_pic_index_fresh_locked(ngx_http_pic_shctx_t *sh,
    ngx_http_pic_index_node_t *n);


ngx_int_t
ngx_http_pic_index_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_pic_zone_ctx_t  *octx = data;

    size_t                    len;
    ngx_http_pic_zone_ctx_t  *ctx;

    ctx = shm_zone->data;

    if (octx) {
        /* reload: keep the old zone and everything it learned */
        ctx->sh = octx->sh;
        ctx->shpool = octx->shpool;

        ngx_shmtx_lock(&ctx->shpool->mutex);
        ctx->sh->generation++;
        ngx_http_pic_index_register_engines_locked(ctx);
        ngx_shmtx_unlock(&ctx->shpool->mutex);

        return NGX_OK;
    }

    ctx->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        ctx->sh = ctx->shpool->data;
        return NGX_OK;
    }

    ctx->sh = ngx_slab_calloc(ctx->shpool, sizeof(ngx_http_pic_shctx_t));
    if (ctx->sh == NULL) {
        return NGX_ERROR;
    }

    ctx->shpool->data = ctx->sh;
    ctx->sh->started = ngx_time();

    ngx_rbtree_init(&ctx->sh->rbtree, &ctx->sh->sentinel,
                    ngx_http_pic_index_rbtree_insert_value);
    ngx_queue_init(&ctx->sh->lru);

    len = sizeof(" in pic zone \"\"") + shm_zone->shm.name.len;

    ctx->shpool->log_ctx = ngx_slab_alloc(ctx->shpool, len);
    if (ctx->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(ctx->shpool->log_ctx, " in pic zone \"%V\"%Z",
                &shm_zone->shm.name);

    /* a full zone evicts the least recently used entries, quietly */
    ctx->shpool->log_nomem = 0;

    ngx_http_pic_index_register_engines_locked(ctx);

    return NGX_OK;
}


static void
ngx_http_pic_index_register_engines_locked(ngx_http_pic_zone_ctx_t *zc)
{
    ngx_int_t                    slot;
    ngx_uint_t                   i, j;
    ngx_http_pic_pool_t        **pools, *pool;
    ngx_http_pic_engine_conf_t  *ec;

    if (zc->pmcf == NULL) {
        return;
    }

    pools = zc->pmcf->pools.elts;

    for (i = 0; i < zc->pmcf->pools.nelts; i++) {
        pool = pools[i];
        pool->mask = 0;
        ec = pool->engines.elts;

        for (j = 0; j < pool->engines.nelts; j++) {
            slot = ngx_http_pic_engine_slot_locked(zc->sh, &ec[j].name, 1);

            if (slot < 0) {
                ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                              "pic: more than %d engines, \"%V\" ignored",
                              NGX_HTTP_PIC_MAX_ENGINES, &ec[j].name);
                ec[j].slot = NGX_HTTP_PIC_MAX_ENGINES;
                continue;
            }

            ec[j].slot = slot;
            zc->sh->engines[slot].configured = zc->sh->generation;
            pool->mask |= (uint64_t) 1 << slot;
        }
    }
}


ngx_int_t
ngx_http_pic_engine_slot_locked(ngx_http_pic_shctx_t *sh, ngx_str_t *name,
    ngx_uint_t add)
{
    ngx_uint_t                 i, gen;
    ngx_http_pic_engine_sh_t  *e;

    for (i = 0; i < sh->nengines; i++) {
        e = &sh->engines[i];

        if (e->name_len == name->len
            && ngx_strncmp(e->name, name->data, name->len) == 0)
        {
            return i;
        }
    }

    if (!add || name->len >= NGX_SOCKADDR_STRLEN) {
        return -1;
    }

    if (sh->nengines < NGX_HTTP_PIC_MAX_ENGINES) {
        i = sh->nengines++;

    } else {
        /*
         * Full: reuse the slot of an engine that neither this configuration
         * nor the previous one names (workers of the previous one may still
         * finish requests; a reload that failed after the zone was set up
         * leaves the previous one running).
         */

        for (i = 0; i < sh->nengines; i++) {
            if (sh->engines[i].configured + 1 < sh->generation) {
                break;
            }
        }

        if (i == sh->nengines) {
            return -1;
        }

        sh->reclaimed++;
    }

    e = &sh->engines[i];
    gen = e->gen + 1;

    ngx_memzero(e, sizeof(ngx_http_pic_engine_sh_t));

    ngx_memcpy(e->name, name->data, name->len);
    e->name_len = name->len;
    e->gen = gen;

    /* whatever the index says a previous engine of this slot held */
    e->forgot = ++sh->seq;

    /* healthy until a request or a probe says otherwise */
    e->healthy = 1;
    e->dialect = -1;

    return i;
}


ngx_uint_t
ngx_http_pic_engine_acquire(ngx_http_pic_zone_ctx_t *zc, ngx_uint_t slot)
{
    ngx_uint_t                 gen;
    ngx_http_pic_engine_sh_t  *e;

    e = &zc->sh->engines[slot];

    ngx_shmtx_lock(&zc->shpool->mutex);

    e->inflight++;
    gen = e->gen;

    ngx_shmtx_unlock(&zc->shpool->mutex);

    return gen;
}


void
ngx_http_pic_engine_release(ngx_http_pic_zone_ctx_t *zc, ngx_uint_t slot,
    ngx_uint_t gen)
{
    ngx_http_pic_engine_sh_t  *e;

    e = &zc->sh->engines[slot];

    ngx_shmtx_lock(&zc->shpool->mutex);

    /* a slot reused since the request began counts its new engine only */
    if (e->gen == gen && e->inflight > 0) {
        e->inflight--;
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


ngx_http_pic_zone_ctx_t *
ngx_http_pic_zone(ngx_http_request_t *r)
{
    ngx_http_pic_main_conf_t  *pmcf;

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pic_module);

    if (pmcf == NULL || pmcf->shm_zone == NULL) {
        return NULL;
    }

    return pmcf->shm_zone->data;
}


static void
ngx_http_pic_index_rbtree_insert_value(ngx_rbtree_node_t *temp,
    ngx_rbtree_node_t *node, ngx_rbtree_node_t *sentinel)
{
    ngx_int_t                   rc;
    ngx_rbtree_node_t         **p;
    ngx_http_pic_index_node_t  *n, *t;

    for ( ;; ) {

        if (node->key < temp->key) {
            p = &temp->left;

        } else if (node->key > temp->key) {
            p = &temp->right;

        } else { /* node->key == temp->key */

            n = (ngx_http_pic_index_node_t *) node;
            t = (ngx_http_pic_index_node_t *) temp;

            rc = ngx_memcmp(n->key, t->key, NGX_HTTP_PIC_KEY_LEN);

            if (rc == 0) {
                rc = (ngx_int_t) n->kind - (ngx_int_t) t->kind;
            }

            p = (rc < 0) ? &temp->left : &temp->right;
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


static ngx_rbtree_key_t
ngx_http_pic_index_hash(u_char *key)
{
    uint64_t  h;

    ngx_memcpy(&h, key, sizeof(uint64_t));

    return (ngx_rbtree_key_t) h;
}


static ngx_http_pic_index_node_t *
ngx_http_pic_index_find_locked(ngx_http_pic_shctx_t *sh, u_char *key,
    ngx_uint_t kind)
{
    ngx_int_t                   rc;
    ngx_rbtree_key_t            hash;
    ngx_rbtree_node_t          *node, *sentinel;
    ngx_http_pic_index_node_t  *n;

    hash = ngx_http_pic_index_hash(key);

    node = sh->rbtree.root;
    sentinel = sh->rbtree.sentinel;

    while (node != sentinel) {

        if (hash < node->key) {
            node = node->left;
            continue;
        }

        if (hash > node->key) {
            node = node->right;
            continue;
        }

        /* hash == node->key */

        n = (ngx_http_pic_index_node_t *) node;

        rc = ngx_memcmp(key, n->key, NGX_HTTP_PIC_KEY_LEN);

        if (rc == 0) {
            rc = (ngx_int_t) kind - (ngx_int_t) n->kind;
        }

        if (rc == 0) {
            return n;
        }

        node = (rc < 0) ? node->left : node->right;
    }

    return NULL;
}


static ngx_http_pic_index_node_t *
ngx_http_pic_index_add_locked(ngx_http_pic_zone_ctx_t *zc, u_char *key,
    ngx_uint_t kind, uint32_t len)
{
    ngx_http_pic_index_node_t  *n;

    n = ngx_http_pic_index_find_locked(zc->sh, key, kind);

    if (n) {
        ngx_queue_remove(&n->queue);
        ngx_queue_insert_head(&zc->sh->lru, &n->queue);
        n->used = ngx_current_msec;
        return n;
    }

    n = ngx_slab_alloc_locked(zc->shpool, sizeof(ngx_http_pic_index_node_t));

    if (n == NULL) {
        ngx_http_pic_index_expire_locked(zc, 16);

        n = ngx_slab_alloc_locked(zc->shpool,
                                  sizeof(ngx_http_pic_index_node_t));
        if (n == NULL) {
            return NULL;
        }
    }

    ngx_memcpy(n->key, key, NGX_HTTP_PIC_KEY_LEN);
    n->node.key = ngx_http_pic_index_hash(key);
    n->kind = (u_char) kind;
    n->len = len;
    n->engines = 0;
    n->stamp = zc->sh->seq;
    n->used = ngx_current_msec;

    ngx_rbtree_insert(&zc->sh->rbtree, &n->node);
    ngx_queue_insert_head(&zc->sh->lru, &n->queue);
    zc->sh->nodes++;

    return n;
}


static void
ngx_http_pic_index_expire_locked(ngx_http_pic_zone_ctx_t *zc, ngx_uint_t n)
{
    ngx_queue_t                *q;
    ngx_http_pic_index_node_t  *node;

    while (n-- && !ngx_queue_empty(&zc->sh->lru)) {
        q = ngx_queue_last(&zc->sh->lru);
        node = ngx_queue_data(q, ngx_http_pic_index_node_t, queue);

        ngx_queue_remove(q);
        ngx_rbtree_delete(&zc->sh->rbtree, &node->node);
        ngx_slab_free_locked(zc->shpool, node);

        zc->sh->nodes--;
        (void) ngx_atomic_fetch_add(&zc->sh->evictions, 1);
    }
}


void
ngx_http_pic_index_lookup(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n)
{
    ngx_uint_t                  i;
    ngx_http_pic_index_node_t  *node;

    ngx_shmtx_lock(&zc->shpool->mutex);

    for (i = 0; i < n; i++) {
        node = ngx_http_pic_index_find_locked(zc->sh, segs[i].key,
                                              NGX_HTTP_PIC_NODE_SEGMENT);

        if (node == NULL || (node->len && node->len != segs[i].len)) {
            continue;
        }

        segs[i].holders |= ngx_http_pic_index_holders_locked(zc->sh, node);

        ngx_queue_remove(&node->queue);
        ngx_queue_insert_head(&zc->sh->lru, &node->queue);
        node->used = ngx_current_msec;
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


void
ngx_http_pic_index_learn(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n, ngx_int_t slot)
{
    uint64_t                    mask;
    ngx_uint_t                  i;
    ngx_http_pic_index_node_t  *node;

    ngx_shmtx_lock(&zc->shpool->mutex);

    for (i = 0; i < n; i++) {

        if (segs[i].flags & NGX_HTTP_PIC_SEG_DYNAMIC) {
            continue;
        }

        mask = (slot >= 0) ? (uint64_t) 1 << slot : segs[i].holders;

        if (mask == 0) {
            continue;
        }

        node = ngx_http_pic_index_add_locked(zc, segs[i].key,
                                             NGX_HTTP_PIC_NODE_SEGMENT,
                                             segs[i].len);
        if (node == NULL) {
            break;
        }

        ngx_http_pic_index_fresh_locked(zc->sh, node);

        if (node->len == 0) {
            /* announced by an engine: the first request tells the length */
            node->len = segs[i].len;

        } else if (node->len != segs[i].len) {
            /* a key with another length: believe the newest */
            node->len = segs[i].len;
            node->engines = 0;
        }

        node->engines |= mask;
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


static ngx_http_pic_seen_t *
ngx_http_pic_index_seen_slot(ngx_http_pic_zone_ctx_t *zc, u_char *key,
    uint64_t *hash)
{
    *hash = XXH3_64bits(key, NGX_HTTP_PIC_KEY_LEN) | 1;

    return &zc->sh->seen[*hash % NGX_HTTP_PIC_SEEN_SLOTS];
}


void
ngx_http_pic_index_seen_record(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n, u_char *held, ngx_int_t slot)
{
    uint64_t              hash;
    ngx_uint_t            i;
    ngx_http_pic_seen_t  *e;

    if (slot < 0 || slot >= NGX_HTTP_PIC_MAX_ENGINES) {
        return;
    }

    ngx_shmtx_lock(&zc->shpool->mutex);

    for (i = 0; i < n; i++) {

        if ((held && held[i]) || (segs[i].flags & NGX_HTTP_PIC_SEG_DYNAMIC)) {
            continue;
        }

        e = ngx_http_pic_index_seen_slot(zc, segs[i].key, &hash);
        e->hash = hash;
        e->at = ngx_current_msec;
        e->slot = slot;
        e->gen = zc->sh->engines[slot].gen;
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


void
ngx_http_pic_index_seen_lookup(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n, ngx_int_t *seen)
{
    uint64_t              hash;
    ngx_uint_t            i;
    ngx_http_pic_seen_t  *e;

    ngx_shmtx_lock(&zc->shpool->mutex);

    for (i = 0; i < n; i++) {
        e = ngx_http_pic_index_seen_slot(zc, segs[i].key, &hash);

        seen[i] = (e->hash == hash
                   && ngx_current_msec - e->at < NGX_HTTP_PIC_SEEN_TTL
                   && e->gen == zc->sh->engines[e->slot].gen)
                  ? (ngx_int_t) e->slot : -1;
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


void
ngx_http_pic_index_holder(ngx_http_pic_zone_ctx_t *zc, u_char *key,
    ngx_uint_t slot, ngx_uint_t add)
{
    uint64_t                    bit;
    ngx_http_pic_index_node_t  *node;

    bit = (uint64_t) 1 << slot;

    ngx_shmtx_lock(&zc->shpool->mutex);

    if (add) {
        node = ngx_http_pic_index_add_locked(zc, key,
                                             NGX_HTTP_PIC_NODE_SEGMENT, 0);
        if (node) {
            ngx_http_pic_index_fresh_locked(zc->sh, node);
            node->engines |= bit;
        }

    } else {
        node = ngx_http_pic_index_find_locked(zc->sh, key,
                                              NGX_HTTP_PIC_NODE_SEGMENT);
        if (node) {
            ngx_http_pic_index_fresh_locked(zc->sh, node);
            node->engines &= ~bit;
        }
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


/*
 * Forgetting is O(1) under the lock, whatever the index holds: the slot
 * records the zone's forget sequence, and a node's bit of that slot counts
 * only when the node was stamped at or after it.  A node is stamped
 * whenever a bit is set, after its stale bits are cleared
 * (ngx_http_pic_index_fresh_locked), so every bit it keeps was valid at its
 * stamp: a forget since then is the only way it can have gone stale.
 */

void
ngx_http_pic_index_forget_engine(ngx_http_pic_zone_ctx_t *zc, ngx_uint_t slot)
{
    ngx_shmtx_lock(&zc->shpool->mutex);

    zc->sh->engines[slot].forgot = ++zc->sh->seq;

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


static uint64_t
ngx_http_pic_index_holders_locked(ngx_http_pic_shctx_t *sh,
    ngx_http_pic_index_node_t *n)
{
    uint64_t    m, valid;
    ngx_uint_t  s;

    valid = 0;

    for (m = n->engines, s = 0; m; m >>= 1, s++) {
        if ((m & 1) && sh->engines[s].forgot <= n->stamp) {
            valid |= (uint64_t) 1 << s;
        }
    }

    return valid;
}


static void
ngx_http_pic_index_fresh_locked(ngx_http_pic_shctx_t *sh,
    ngx_http_pic_index_node_t *n)
{
    n->engines = ngx_http_pic_index_holders_locked(sh, n);
    n->stamp = sh->seq;
}


size_t
ngx_http_pic_index_prefix(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_http_pic_segment_t *chains,
    ngx_uint_t n, ngx_uint_t record_seen)
{
    size_t                      prefix;
    ngx_uint_t                  i, deepest;
    ngx_http_pic_index_node_t  *node;

    prefix = 0;
    deepest = 0;

    ngx_shmtx_lock(&zc->shpool->mutex);

    for (i = 0; i < n; i++) {

        if (deepest == i
            && ngx_http_pic_index_find_locked(zc->sh, chains[i].key,
                                              NGX_HTTP_PIC_NODE_PREFIX))
        {
            deepest = i + 1;
            prefix = chains[i].len;
        }

        if (record_seen && !(segs[i].flags & NGX_HTTP_PIC_SEG_DYNAMIC)) {
            node = ngx_http_pic_index_find_locked(zc->sh, segs[i].key,
                                                  NGX_HTTP_PIC_NODE_SEEN);
            if (node && node->len == segs[i].len) {
                segs[i].flags |= NGX_HTTP_PIC_SEG_HIT;
            }

            (void) ngx_http_pic_index_add_locked(zc, segs[i].key,
                                                 NGX_HTTP_PIC_NODE_SEEN,
                                                 segs[i].len);
        }

        (void) ngx_http_pic_index_add_locked(zc, chains[i].key,
                                             NGX_HTTP_PIC_NODE_PREFIX,
                                             chains[i].len);
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);

    return prefix;
}


void
ngx_http_pic_index_lookup_prefix(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *chains, ngx_uint_t n)
{
    uint64_t                    holders;
    ngx_uint_t                  i;
    ngx_http_pic_index_node_t  *node;

    ngx_shmtx_lock(&zc->shpool->mutex);

    for (i = 0; i < n; i++) {
        node = ngx_http_pic_index_find_locked(zc->sh, chains[i].key,
                                              NGX_HTTP_PIC_NODE_PREFIX);

        if (node == NULL || node->len != chains[i].len) {
            continue;
        }

        holders = ngx_http_pic_index_holders_locked(zc->sh, node);

        if (holders == 0) {
            continue;
        }

        chains[i].holders |= holders;

        ngx_queue_remove(&node->queue);
        ngx_queue_insert_head(&zc->sh->lru, &node->queue);
        node->used = ngx_current_msec;
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


ngx_uint_t
ngx_http_pic_index_learn_prefix(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *chains, ngx_uint_t n, ngx_int_t slot)
{
    uint64_t                    mask;
    ngx_uint_t                  i, fresh;
    ngx_http_pic_index_node_t  *node;

    fresh = 0;

    ngx_shmtx_lock(&zc->shpool->mutex);

    for (i = 0; i < n; i++) {

        if (chains[i].flags & NGX_HTTP_PIC_SEG_DYNAMIC) {
            continue;
        }

        mask = (slot >= 0) ? (uint64_t) 1 << slot : chains[i].holders;

        if (mask == 0) {
            continue;
        }

        node = ngx_http_pic_index_add_locked(zc, chains[i].key,
                                             NGX_HTTP_PIC_NODE_PREFIX,
                                             chains[i].len);
        if (node == NULL) {
            break;
        }

        ngx_http_pic_index_fresh_locked(zc->sh, node);

        if (node->len != chains[i].len) {
            node->len = chains[i].len;
            node->engines = 0;
        }

        if ((node->engines & mask) != mask) {
            chains[i].flags |= NGX_HTTP_PIC_SEG_NEW;
            fresh++;
        }

        node->engines |= mask;
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);

    return fresh;
}


void
ngx_http_pic_index_seen(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n)
{
    ngx_uint_t                  i;
    ngx_http_pic_index_node_t  *node;

    ngx_shmtx_lock(&zc->shpool->mutex);

    for (i = 0; i < n; i++) {
        node = ngx_http_pic_index_find_locked(zc->sh, segs[i].key,
                                              NGX_HTTP_PIC_NODE_SEEN);
        if (node && node->len == segs[i].len) {
            segs[i].flags |= NGX_HTTP_PIC_SEG_HIT;
        }

        (void) ngx_http_pic_index_add_locked(zc, segs[i].key,
                                             NGX_HTTP_PIC_NODE_SEEN,
                                             segs[i].len);
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


void
ngx_http_pic_index_history(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_history_t *h)
{
    ngx_uint_t              i, n;
    ngx_http_pic_stats_t   *st;
    ngx_http_pic_history_t *ring;

    st = &zc->sh->stats;

    if (h->exact >= 0) {
        (void) ngx_atomic_fetch_add(&st->usage_reports, 1);
        (void) ngx_atomic_fetch_add(&st->tokens_exact, h->exact);
        (void) ngx_atomic_fetch_add(&st->tokens_pic, h->pic);
        (void) ngx_atomic_fetch_add(&st->tokens_recomputed, h->recomputed);
    }

    ngx_shmtx_lock(&zc->shpool->mutex);

    /*
     * The log phase of a request can run after a later request of the same
     * client has finished (another worker, the upstream connection closed
     * after the client had the last byte): insert by arrival, so the ring
     * reads oldest .. newest as the clients sent them.
     */

    ring = zc->sh->history;
    n = ngx_min(zc->sh->history_count, NGX_HTTP_PIC_HISTORY - 1);

    for (i = zc->sh->history_count; n > 0; i--, n--) {
        if (ring[(i - 1) % NGX_HTTP_PIC_HISTORY].start_ms <= h->start_ms) {
            break;
        }

        ring[i % NGX_HTTP_PIC_HISTORY] = ring[(i - 1) % NGX_HTTP_PIC_HISTORY];
    }

    ring[i % NGX_HTTP_PIC_HISTORY] = *h;
    zc->sh->history_count++;

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


void
ngx_http_pic_index_ttft(ngx_http_pic_zone_ctx_t *zc, ngx_msec_t ms)
{
    ngx_http_pic_stats_t  *st;

    st = &zc->sh->stats;

    (void) ngx_atomic_fetch_add(&st->ttft[pic_ttft_bucket(ms)], 1);
    (void) ngx_atomic_fetch_add(&st->ttft_count, 1);
    (void) ngx_atomic_fetch_add(&st->ttft_sum_ms, ms);
}
