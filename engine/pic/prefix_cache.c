/*
 * prefix_cache.c — token-prefix tree of 64-token blocks with attention KV
 * per block and linear-layer checkpoints at a few block ends
 * (prefix_cache.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "forward.h"
#include "prefix_cache.h"

typedef struct pic_pnode {
    struct pic_pnode *parent, *child, *sib;     /* tree */
    struct pic_pnode *lprev, *lnext;            /* recency: head = most recent */
    uint64_t          h;                        /* xxh64 of the block's tokens */
    int               end;                      /* position after the block */
    int              *tok;                      /* (block) */
    float            *kv;                       /* per full layer: K (Hkv, block, hd), V (Hkv, block, hd) */
    float            *ck;                       /* per linear layer: S (Hv, dk, dv), conv (C, K−1); or NULL */
    size_t            bytes;
} pic_pnode;

struct pic_prefix_cache {
    const pic_model  *m;
    pthread_mutex_t   mu;
    int               block;
    pic_ckpt_dp      *dp;
    pic_pnode         root;                     /* end 0, no block, not in the LRU */
    pic_pnode        *head, *tail;
    pic_prefix_stats  st;
    size_t            kv_floats;                /* per node */
    size_t            ck_floats;                /* per checkpoint */
    int               mmax;                     /* checkpoints per entry (M) */
};

/* --- nodes --- */

static void
pic_pc_lru_unlink(pic_prefix_cache *pc, pic_pnode *n)
{
    if (n->lprev) n->lprev->lnext = n->lnext; else pc->head = n->lnext;
    if (n->lnext) n->lnext->lprev = n->lprev; else pc->tail = n->lprev;
    n->lprev = n->lnext = NULL;
}

static void
pic_pc_lru_push(pic_prefix_cache *pc, pic_pnode *n)
{
    n->lprev = NULL;
    n->lnext = pc->head;
    if (pc->head) pc->head->lprev = n; else pc->tail = n;
    pc->head = n;
}

/* Make the path ending at n most recent, leaf first, ancestors after. */
static void
pic_pc_touch_locked(pic_prefix_cache *pc, pic_pnode *n)
{
    for (; n != NULL && n != &pc->root; n = n->parent) {
        pic_pc_lru_unlink(pc, n);
        pic_pc_lru_push(pc, n);
    }
}

static void
pic_pc_node_free(pic_pnode *n)
{
    free(n->tok);
    free(n->kv);
    free(n->ck);
    free(n);
}

static pic_pnode *
pic_pc_child(const pic_pnode *p, const int *tok, int block, uint64_t h)
{
    for (pic_pnode *c = p->child; c != NULL; c = c->sib) {
        if (c->h == h && !memcmp(c->tok, tok, (size_t) block * sizeof(int))) {
            return c;
        }
    }
    return NULL;
}

/* Evict least recently used leaves until the budget holds. */
static void
pic_pc_evict_locked(pic_prefix_cache *pc)
{
    pic_pnode *n = pc->tail;

    while (pc->st.bytes > pc->st.budget && n != NULL) {
        pic_pnode *prev = n->lprev;
        if (n->child == NULL) {
            pic_pnode **pp = &n->parent->child;
            while (*pp != n) {
                pp = &(*pp)->sib;
            }
            *pp = n->sib;
            pic_pc_lru_unlink(pc, n);
            pc->st.bytes -= n->bytes;
            pc->st.blocks--;
            pc->st.evictions++;
            pc->st.checkpoints -= n->ck != NULL;
            pic_pc_node_free(n);
            n = pc->tail;               /* the parent may now be a leaf */
            continue;
        }
        n = prev;
    }
}

/* --- init / free --- */

pic_prefix_cache *
pic_prefix_cache_init(const pic_model *m, const pic_prefix_opts *o, char *err,
                      size_t errlen)
{
    const pic_config *c = &m->cfg;
    pic_prefix_cache *pc = calloc(1, sizeof(*pc));
    pic_ckpt_opts     co = o->ckpt;

    if (pc == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    co.block = co.block > 0 ? co.block : 64;
    pc->dp = pic_ckpt_dp_init(&co, err, errlen);
    if (pc->dp == NULL) {
        free(pc);
        return NULL;
    }
    pc->m = m;
    pc->block = co.block;
    pc->mmax = co.m > 0 ? co.m : 4;
    pc->st.budget = o->budget;
    int C = 2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim;
    int K1 = c->conv_kernel > 0 ? c->conv_kernel - 1 : 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            pc->ck_floats += (size_t) c->lin_v_heads * c->lin_k_dim * c->lin_v_dim
                             + (size_t) C * K1;
        } else {
            pc->kv_floats += 2 * (size_t) c->n_kv_heads * pc->block * c->head_dim;
        }
    }
    pthread_mutex_init(&pc->mu, NULL);
    return pc;
}

void
pic_prefix_cache_free(pic_prefix_cache *pc)
{
    if (pc == NULL) {
        return;
    }
    for (pic_pnode *n = pc->head, *nx; n != NULL; n = nx) {
        nx = n->lnext;
        pic_pc_node_free(n);
    }
    pic_ckpt_dp_free(pc->dp);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

/* --- copies between nodes and a run state --- */

static void
pic_pc_kv_to_state(const pic_prefix_cache *pc, const pic_pnode *n, pic_state *s)
{
    const pic_config *c = &pc->m->cfg;
    const float      *src = n->kv;
    size_t            rows = (size_t) pc->block * c->head_dim;
    int               p0 = n->end - pc->block;

    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] != PIC_LAYER_FULL) {
            continue;
        }
        for (int j = 0; j < c->n_kv_heads; j++, src += rows) {
            memcpy(s->kc[l] + ((size_t) j * s->cap + p0) * c->head_dim, src,
                   rows * sizeof(float));
        }
        for (int j = 0; j < c->n_kv_heads; j++, src += rows) {
            memcpy(s->vc[l] + ((size_t) j * s->cap + p0) * c->head_dim, src,
                   rows * sizeof(float));
        }
    }
}

static void
pic_pc_kv_from_state(const pic_prefix_cache *pc, pic_pnode *n, const pic_state *s)
{
    const pic_config *c = &pc->m->cfg;
    float            *dst = n->kv;
    size_t            rows = (size_t) pc->block * c->head_dim;
    int               p0 = n->end - pc->block;

    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] != PIC_LAYER_FULL) {
            continue;
        }
        for (int j = 0; j < c->n_kv_heads; j++, dst += rows) {
            memcpy(dst, s->kc[l] + ((size_t) j * s->cap + p0) * c->head_dim,
                   rows * sizeof(float));
        }
        for (int j = 0; j < c->n_kv_heads; j++, dst += rows) {
            memcpy(dst, s->vc[l] + ((size_t) j * s->cap + p0) * c->head_dim,
                   rows * sizeof(float));
        }
    }
}

/* Linear states of s into a new checkpoint buffer (NULL on OOM). */
static float *
pic_pc_ck_take(const pic_prefix_cache *pc, const pic_state *s)
{
    const pic_config *c = &pc->m->cfg;
    float            *ck = malloc(pc->ck_floats * sizeof(float)), *d = ck;
    size_t            nS = (size_t) s->Hv * s->dk * s->dv;
    size_t            nC = (size_t) s->conv_ch * s->conv_k1;

    for (int l = 0; ck != NULL && l < c->n_layers; l++) {
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            memcpy(d, s->S[l], nS * sizeof(float));
            memcpy(d + nS, s->conv[l], nC * sizeof(float));
            d += nS + nC;
        }
    }
    return ck;
}

static void
pic_pc_ck_to_state(const pic_prefix_cache *pc, const float *ck, pic_state *s)
{
    const pic_config *c = &pc->m->cfg;
    size_t            nS = (size_t) s->Hv * s->dk * s->dv;
    size_t            nC = (size_t) s->conv_ch * s->conv_k1;

    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            memcpy(s->S[l], ck, nS * sizeof(float));
            memcpy(s->conv[l], ck + nS, nC * sizeof(float));
            ck += nS + nC;
        }
    }
}

/* --- lookup --- */

/* Walk the full blocks of tokens (at most max_blocks) into path; returns the
 * count matched; *depth = the token-level shared prefix length. */
static int
pic_pc_walk_locked(pic_prefix_cache *pc, const int *tokens, int n, int max_blocks,
                   pic_pnode **path, int *depth)
{
    int        B = pc->block, nb = 0;
    pic_pnode *cur = &pc->root;

    while ((nb + 1) * B <= n) {
        const int *tb = tokens + (size_t) nb * B;
        pic_pnode *c = pic_pc_child(cur, tb, B, XXH64(tb, (size_t) B * sizeof(int), 0));
        if (c == NULL) {
            break;
        }
        if (path != NULL && nb < max_blocks) {
            path[nb] = c;
        }
        cur = c;
        nb++;
    }
    /* into the next block: the longest partial match among the children */
    int part = 0, rest = n - nb * B;
    for (pic_pnode *c = cur->child; c != NULL; c = c->sib) {
        int k = 0;
        while (k < rest && k < B && c->tok[k] == tokens[nb * B + k]) {
            k++;
        }
        part = k > part ? k : part;
    }
    *depth = nb * B + part;
    return nb < max_blocks ? nb : max_blocks;
}

void
pic_prefix_cache_lookup(pic_prefix_cache *pc, const int *tokens, int n, int *depth,
                        int *resume)
{
    int         usable = n > 0 ? (n - 1) / pc->block : 0;
    pic_pnode **path = malloc((size_t) (usable > 0 ? usable : 1) * sizeof(*path));
    int         nb;

    *depth = 0;
    *resume = 0;
    if (path == NULL || n <= 0) {
        free(path);
        return;
    }
    pthread_mutex_lock(&pc->mu);
    nb = pic_pc_walk_locked(pc, tokens, n, usable, path, depth);
    for (int b = nb - 1; b >= 0; b--) {
        if (path[b]->ck != NULL) {
            *resume = path[b]->end;
            break;
        }
    }
    pthread_mutex_unlock(&pc->mu);
    free(path);
}

/* --- prefill --- */

int
pic_prefix_cache_prefill(pic_prefix_cache *pc, const pic_backend *be, pic_state *s,
                         const int *tokens, int n, float *logits,
                         pic_prefix_result *r, char *err, size_t errlen)
{
    const pic_model  *m = pc->m;
    pic_prefix_result local;
    int               B = pc->block, usable, nb, depth = 0, resume = 0, rc = -1;
    int               full = n / B, n_cut = 0;
    pic_pnode       **path = NULL;
    int              *plan = NULL, *cuts = NULL;
    float           **snap = NULL;

    if (r == NULL) {
        r = &local;
    }
    memset(r, 0, sizeof(*r));
    if (tokens == NULL || n <= 0) {
        snprintf(err, errlen, "%s: empty prompt", __func__);
        return -1;
    }
    usable = (n - 1) / B;               /* the last token is always recomputed */
    path = malloc((size_t) (full + 1) * sizeof(*path));
    plan = malloc((size_t) (pc->mmax + 1) * sizeof(int));
    cuts = malloc((size_t) (pc->mmax + 1) * sizeof(int));
    snap = calloc((size_t) (pc->mmax + 1), sizeof(float *));
    pic_state_reset(s);
    if (path == NULL || plan == NULL || cuts == NULL || snap == NULL
        || pic_state_reserve(s, n, err, errlen) != 0) {
        if (path == NULL || plan == NULL || cuts == NULL || snap == NULL) {
            snprintf(err, errlen, "%s: out of memory", __func__);
        }
        goto done;
    }

    /* 1. walk, restore KV [0, c) and the checkpoint at c, under the lock */
    pthread_mutex_lock(&pc->mu);
    nb = pic_pc_walk_locked(pc, tokens, n, usable, path, &depth);
    int rb = -1;
    for (int b = nb - 1; b >= 0; b--) {
        if (path[b]->ck != NULL) {
            rb = b;
            break;
        }
    }
    if (rb >= 0) {
        for (int b = 0; b <= rb; b++) {
            pic_pc_kv_to_state(pc, path[b], s);
        }
        pic_pc_ck_to_state(pc, path[rb]->ck, s);
        resume = path[rb]->end;
        pic_pc_touch_locked(pc, path[rb]);
    }
    /* checkpoints this request should add: planned, past the resume point,
     * not already held on the shared path */
    int np = pic_ckpt_dp_plan(pc->dp, full * B, plan);
    for (int i = 0; i < np; i++) {
        int b = plan[i] / B - 1;
        if (plan[i] <= resume || plan[i] > full * B
            || (b < nb && path[b]->ck != NULL)) {
            continue;
        }
        cuts[n_cut++] = plan[i];
    }
    pc->st.lookups++;
    pc->st.hits += resume > 0;
    pc->st.tokens_reused += (uint64_t) resume;
    pc->st.tokens_recomputed += (uint64_t) (n - resume);
    pc->st.tokens_skippable += (uint64_t) (depth - resume);
    pthread_mutex_unlock(&pc->mu);
    pic_ckpt_dp_observe(pc->dp, depth);
    s->pos = resume;

    /* 2. the forward from c, cut at the checkpoints to capture */
    int pos = resume;
    for (int k = 0; k < n_cut; k++) {
        if (cuts[k] >= n) {
            break;
        }
        if (pic_forward(m, be, s, tokens + pos, cuts[k] - pos, pos, PIC_LOGITS_NONE,
                        NULL, NULL, err, errlen) != 0) {
            goto done;
        }
        pos = cuts[k];
        snap[k] = pic_pc_ck_take(pc, s);
    }
    if (pic_forward(m, be, s, tokens + pos, n - pos, pos,
                    logits != NULL ? PIC_LOGITS_LAST : PIC_LOGITS_NONE, logits, NULL,
                    err, errlen) != 0) {
        goto done;
    }
    for (int k = 0; k < n_cut; k++) {
        if (cuts[k] == n) {
            snap[k] = pic_pc_ck_take(pc, s);
        }
    }

    /* 3. insert the full blocks and the captured checkpoints */
    pthread_mutex_lock(&pc->mu);
    pic_pnode *cur = &pc->root;
    for (int b = 0; b < full; b++) {
        const int *tb = tokens + (size_t) b * B;
        uint64_t   h = XXH64(tb, (size_t) B * sizeof(int), 0);
        pic_pnode *c = pic_pc_child(cur, tb, B, h);

        if (c == NULL) {
            c = calloc(1, sizeof(*c));
            if (c != NULL) {
                c->tok = malloc((size_t) B * sizeof(int));
                c->kv = malloc(pc->kv_floats * sizeof(float));
            }
            if (c == NULL || c->tok == NULL || c->kv == NULL) {
                if (c != NULL) {
                    pic_pc_node_free(c);
                }
                break;                  /* best effort: the cache stops here */
            }
            memcpy(c->tok, tb, (size_t) B * sizeof(int));
            c->h = h;
            c->end = (b + 1) * B;
            c->parent = cur;
            c->sib = cur->child;
            cur->child = c;
            pic_pc_kv_from_state(pc, c, s);
            c->bytes = sizeof(*c) + (size_t) B * sizeof(int) + pc->kv_floats * sizeof(float);
            pc->st.bytes += c->bytes;
            pc->st.blocks++;
            pc->st.insertions++;
            pic_pc_lru_push(pc, c);
            r->new_blocks++;
        }
        for (int k = 0; k < n_cut; k++) {
            if (cuts[k] == c->end && snap[k] != NULL && c->ck == NULL) {
                c->ck = snap[k];
                snap[k] = NULL;
                c->bytes += pc->ck_floats * sizeof(float);
                pc->st.bytes += pc->ck_floats * sizeof(float);
                pc->st.checkpoints++;
                r->new_checkpoints++;
            }
        }
        cur = c;
    }
    pic_pc_touch_locked(pc, cur);
    pic_pc_evict_locked(pc);
    pthread_mutex_unlock(&pc->mu);

    r->depth = depth;
    r->resume = resume;
    r->recomputed = n - resume;
    rc = 0;

done:
    for (int k = 0; snap != NULL && k <= pc->mmax; k++) {
        free(snap[k]);
    }
    free(snap);
    free(path);
    free(plan);
    free(cuts);
    return rc;
}

void
pic_prefix_cache_stats_get(pic_prefix_cache *pc, pic_prefix_stats *st)
{
    pthread_mutex_lock(&pc->mu);
    *st = pc->st;
    pthread_mutex_unlock(&pc->mu);
}
