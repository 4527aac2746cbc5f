/*
 * prefix_cache.c — token-prefix tree of 64-token blocks with attention KV
 * per block and linear-layer checkpoints at a few block ends
 * (prefix_cache.h).
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "forward.h"
#include "gds.h"
#include "pic_buf.h"
#include "pic_pages.h"
#include "pic_time.h"
#include "prefix_cache.h"

typedef struct pic_pnode {
    struct pic_pnode *parent, *child, *sib;     /* tree */
    struct pic_pnode *lprev, *lnext;            /* recency: head = most recent */
    struct pic_pnode *fprev, *fnext;            /* leaves only, same order */
    uint64_t          h;                        /* xxh64 of the block's tokens; scope */
    uint64_t          id;                       /* serial, never reused */
    int               end;                      /* position after the block */
    int               n_tok;                    /* block; < block: a tail; 0: a scope */
    int              *tok;                      /* (n_tok) */
    float            *kv;                       /* per full layer: K (Hkv, n_tok, hd), V (Hkv, n_tok, hd);
                                                 * MLA: the latent rows (1, n_tok, dr + r) only */
    float            *ck;                       /* per linear layer: S (Hv, dk, dv), conv (C, K−1); or NULL */
    size_t            bytes;
    int64_t           used;                     /* pic_now_ns when last touched */
    double            tclock;                   /* the cost clock L when last touched */
    pic_gds_node      gn;                       /* a leaf's place in the cost heap */
    /* checkpoint placement (blocks only) */
    double            hw, hwd;                  /* Σ w, Σ w·d of depths d in [end, end+block),
                                                 * w in units of the cache's scale */
    long              n_obs;                    /* depths observed here */
    int               pend;                     /* ... since the edge's last re-solve */
    int               plan;                     /* the placement wants a checkpoint here */
    int               solved;                   /* an edge's head: its length in blocks
                                                 * when last solved (0: never) */
} pic_pnode;

/* Checkpoint buffers faulted in ahead of need.  A new checkpoint is fresh
 * memory, and its first touch costs a page fault per 4 KiB: in a request's
 * exact forward the copies of three checkpoints of models/mid (6.4 MB
 * each) took 52-92 ms of a 560 ms turn (PIC_TRACE snap=; AMD EPYC VM,
 * first touch 2.1-3.9 us a page against 0.16 once mapped).  The keeper
 * faults up to PIC_PREFIX_SPARES of them in while no request runs
 * (pic_prefix_cache_prefault; while one runs, its faults on two cores
 * stalled the forward's threads: turns went 560 -> 700 ms); a request
 * takes one instead of malloc, and a checkpoint the placement or the
 * budget drops goes back to the stock.  With it the snaps of a turn took
 * 1.7-3.3 ms and its insert 1-2 ms (was ~20).  The buffers themselves are
 * pic_pages' (huge pages, populated by one call): when the stock runs dry
 * (turns back to back, no idle spell between them), a replay of the mid
 * agent loop with one engine and no gaps took 541-599 ms a turn against
 * 580-899 with malloc's (snap 1.3-2.8 ms against 34-104). */
typedef struct {
    pthread_mutex_t mu;                         /* after the tree's mu, never before */
    float          *buf[PIC_PREFIX_SPARES];     /* (ck_floats) each, written once */
    int             n;
} pic_pc_spares;

struct pic_prefix_cache {
    const pic_model  *m;
    pic_pc_spares    *spares;                   /* mutable through a const cache */
    pthread_mutex_t   mu;
    pthread_mutex_t   maint_mu;                 /* one maintain at a time */
    int               block;
    pic_ckpt_opts     co;                       /* m, resolve_every, min_history, decay */
    double            scale;                    /* weight of the next observation */
    int               pend_obs;                 /* observations since maintain */
    int               dirty;                    /* the shape changed since maintain */
    pic_pnode       **chain;                    /* (chain_cap) scratch: one edge's blocks */
    size_t            chain_cap;
    pic_pnode         root;                     /* end 0, no block, not in the LRU */
    pic_pnode        *head, *tail;
    pic_pnode        *lhead, *ltail;            /* the leaves (no child), by recency */
    pic_prefix_stats  st;
    size_t            kv_floats;                /* per node */
    size_t            ck_floats;                /* per checkpoint */
    int               mmax;                     /* checkpoints per edge (M) */
    uint64_t          next_id;                  /* pic_pnode.id */
    void            (*solve_hook)(void *);      /* tests: runs while maintain solves */
    void             *solve_arg;
    /* cost-aware eviction (gds.h): on when per_token > 0 */
    double            per_token;                /* FLOPs per token of the model */
    double            own_clock;
    double           *clock;                    /* the shared L (own_clock or the budget's) */
    pic_gds_heap      heap;                     /* the leaves by H */
};

static __thread int pic_pc_in_request;          /* pic_prefix_cache_mark_request */

/* A checkpoint buffer: a spare when one is ready, else malloc (NULL on OOM). */
static float *
pic_pc_ck_alloc(const pic_prefix_cache *pc)
{
    pic_pc_spares *sp = pc->spares;
    float         *ck = NULL;

    pthread_mutex_lock(&sp->mu);
    if (sp->n > 0) {
        ck = sp->buf[--sp->n];
    }
    pthread_mutex_unlock(&sp->mu);
    return ck != NULL ? ck : pic_pages_alloc(pc->ck_floats * sizeof(float));
}

/* ck back to the stock, or freed when the stock is full. */
static void
pic_pc_ck_recycle(const pic_prefix_cache *pc, float *ck)
{
    pic_pc_spares *sp = pc->spares;

    if (ck == NULL) {
        return;
    }
    pthread_mutex_lock(&sp->mu);
    if (sp->n < PIC_PREFIX_SPARES) {
        sp->buf[sp->n++] = ck;
        ck = NULL;
    }
    pthread_mutex_unlock(&sp->mu);
    pic_pages_free(ck, pc->ck_floats * sizeof(float));
}

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
    n->used = pic_now_ns();
    n->tclock = pc->clock != NULL ? pic_gds_clock(pc->clock) : 0.0;
}

/* Cost-aware: what losing leaf n costs, in tokens to recompute: with a
 * checkpoint, back to the checkpoint above it (a request resumes there
 * instead); without, its own tokens. */
static double
pic_pc_cost_tokens(const pic_prefix_cache *pc, const pic_pnode *n)
{
    const pic_pnode *a = n->parent;

    if (n->ck == NULL) {
        return n->n_tok;
    }
    while (a != NULL && a != &pc->root && a->ck == NULL) {
        a = a->parent;
    }
    return n->end - (a != NULL && a != &pc->root ? a->end : 0);
}

/* Cost-aware: leaf n's H = L at its last touch + cost / bytes, into the
 * heap or moved there. */
static void
pic_pc_prioritize_locked(pic_prefix_cache *pc, pic_pnode *n)
{
    if (pc->per_token <= 0.0) {
        return;
    }
    n->gn.key = n->tclock + pic_pc_cost_tokens(pc, n) * pc->per_token / (double) n->bytes;
    if (n->gn.idx != 0) {
        pic_gds_update(&pc->heap, &n->gn);
    } else {
        pic_gds_push(&pc->heap, &n->gn);
    }
}

/* The leaf list: the nodes without children in the order of the recency
 * list, so that its tail is the least recently used leaf (O(1)). */
static int
pic_pc_is_leafed(const pic_prefix_cache *pc, const pic_pnode *n)
{
    return n->fprev != NULL || pc->lhead == n;
}

static void
pic_pc_leaf_unlink(pic_prefix_cache *pc, pic_pnode *n)
{
    if (!pic_pc_is_leafed(pc, n)) {
        return;
    }
    if (n->fprev) n->fprev->fnext = n->fnext; else pc->lhead = n->fnext;
    if (n->fnext) n->fnext->fprev = n->fprev; else pc->ltail = n->fprev;
    n->fprev = n->fnext = NULL;
    pic_gds_remove(&pc->heap, &n->gn);
}

/* Leaf n (just touched or made) as the most recent leaf. */
static void
pic_pc_leaf_push(pic_prefix_cache *pc, pic_pnode *n)
{
    n->fprev = NULL;
    n->fnext = pc->lhead;
    if (pc->lhead) pc->lhead->fprev = n; else pc->ltail = n;
    pc->lhead = n;
    pic_pc_prioritize_locked(pc, n);
}

/* A node an eviction left without children into the leaf list by its
 * recency (n->used), searched from the tail: its descendants were the
 * least recently used leaves, so it lands at or next to the tail. */
static void
pic_pc_leaf_put_aged(pic_prefix_cache *pc, pic_pnode *n)
{
    pic_pnode *newer = pc->ltail;

    while (newer != NULL && newer->used < n->used) {
        newer = newer->fprev;
    }
    n->fprev = newer;
    n->fnext = newer != NULL ? newer->fnext : pc->lhead;
    if (n->fnext) n->fnext->fprev = n; else pc->ltail = n;
    if (newer) newer->fnext = n; else pc->lhead = n;
    pic_pc_prioritize_locked(pc, n);
}

/* The next leaf to evict: the least recently used, or under cost-aware
 * eviction the one of smallest H (by recency if the heap lost leaves to
 * OOM). */
static pic_pnode *
pic_pc_victim_locked(pic_prefix_cache *pc)
{
    pic_gds_node *g = pc->per_token > 0.0 ? pic_gds_min(&pc->heap) : NULL;

    if (g == NULL || g->idx == 0) {
        return pc->ltail;
    }
    return (pic_pnode *) ((char *) g - offsetof(pic_pnode, gn));
}

/* Make the path ending at n most recent, leaf first, ancestors after. */
static void
pic_pc_touch_locked(pic_prefix_cache *pc, pic_pnode *n)
{
    for (; n != NULL && n != &pc->root; n = n->parent) {
        pic_pc_lru_unlink(pc, n);
        pic_pc_lru_push(pc, n);
        if (n->child == NULL) {
            pic_pc_leaf_unlink(pc, n);
            pic_pc_leaf_push(pc, n);
        }
    }
}

static void
pic_pc_node_free(const pic_prefix_cache *pc, pic_pnode *n)
{
    free(n->tok);
    free(n->kv);
    pic_pages_free(n->ck, pc->ck_floats * sizeof(float));
    free(n);
}

static pic_pnode *
pic_pc_child(const pic_pnode *p, const int *tok, int block, uint64_t h)
{
    for (pic_pnode *c = p->child; c != NULL; c = c->sib) {
        if (c->n_tok == block && c->h == h
            && !memcmp(c->tok, tok, (size_t) block * sizeof(int))) {
            return c;
        }
    }
    return NULL;
}

/* --- edges: paths of blocks between branch points --- */

/* Block children of p; *only = the single one when there is exactly one. */
static int
pic_pc_block_children(const pic_prefix_cache *pc, const pic_pnode *p, pic_pnode **only)
{
    int k = 0;

    *only = NULL;
    for (pic_pnode *c = p->child; c != NULL; c = c->sib) {
        if (c->n_tok == pc->block) {
            k++;
            *only = c;
        }
    }
    if (k != 1) {
        *only = NULL;
    }
    return k;
}

/* The first block of the edge holding block n. */
static pic_pnode *
pic_pc_edge_head(const pic_prefix_cache *pc, pic_pnode *n)
{
    pic_pnode *only;

    while (n->parent != NULL && n->parent->n_tok == pc->block
           && pic_pc_block_children(pc, n->parent, &only) == 1) {
        n = n->parent;
    }
    return n;
}

/* The edge starting at head into pc->chain; its length in blocks, or -1
 * on ENOMEM. */
static int
pic_pc_edge_chain_locked(pic_prefix_cache *pc, pic_pnode *head)
{
    size_t     L = 0;
    pic_pnode *n = head, *only;

    for (;;) {
        if (pic_grow((void **) &pc->chain, &pc->chain_cap, L + 1, sizeof(*pc->chain)) != 0) {
            return -1;
        }
        pc->chain[L++] = n;
        if (pic_pc_block_children(pc, n, &only) != 1) {
            break;
        }
        n = only;
    }
    return (int) L;
}

/* Every block that heads an edge, depth first over every scope, into a new
 * array *heads (the caller frees it); their count (fewer on ENOMEM). */
static size_t
pic_pc_edge_heads_locked(const pic_prefix_cache *pc, pic_pnode ***heads)
{
    pic_pnode **stack = NULL;
    size_t      cap = 0, top = 0, hcap = 0, nh = 0;

    *heads = NULL;
    for (pic_pnode *c = pc->root.child; c != NULL; c = c->sib) {
        if (pic_grow((void **) &stack, &cap, top + 1, sizeof(*stack)) == 0) {
            stack[top++] = c;
        }
    }
    while (top > 0) {
        pic_pnode *n = stack[--top], *only;

        for (pic_pnode *c = n->child; c != NULL; c = c->sib) {
            if (c->n_tok == pc->block
                && pic_grow((void **) &stack, &cap, top + 1, sizeof(*stack)) == 0) {
                stack[top++] = c;
            }
        }
        if (n->n_tok != pc->block
            || (n->parent->n_tok == pc->block
                && pic_pc_block_children(pc, n->parent, &only) == 1)) {
            continue;                   /* not the head of an edge */
        }
        if (pic_grow((void **) heads, &hcap, nh + 1, sizeof(**heads)) == 0) {
            (*heads)[nh++] = n;
        }
    }
    free(stack);
    return nh;
}

static void
pic_pc_ck_drop_locked(pic_prefix_cache *pc, pic_pnode *n)
{
    pic_pc_ck_recycle(pc, n->ck);
    n->ck = NULL;
    n->bytes -= pc->ck_floats * sizeof(float);
    pc->st.bytes -= pc->ck_floats * sizeof(float);
    pc->st.checkpoints--;
    if (n->gn.idx != 0) {
        pic_pc_prioritize_locked(pc, n);
    }
}

/* Keep at most M block checkpoints on the edge holding block n: drop
 * unplanned ones first, the one closest to the checkpoint before it
 * first. */
static void
pic_pc_trim_locked(pic_prefix_cache *pc, pic_pnode *n)
{
    int L, held = 0;

    if (n == NULL || n->n_tok != pc->block) {
        return;
    }
    L = pic_pc_edge_chain_locked(pc, pic_pc_edge_head(pc, n));
    for (int i = 0; i < L; i++) {
        held += pc->chain[i]->ck != NULL;
    }
    while (held > pc->mmax) {
        int victim = -1, gap = 0, vplan = 1, prev = pc->chain[0]->end - pc->block;

        for (int i = 0; i < L; i++) {
            pic_pnode *c = pc->chain[i];
            if (c->ck == NULL) {
                continue;
            }
            if (victim < 0 || (!c->plan && vplan) || (c->plan == vplan && c->end - prev < gap)) {
                victim = i;
                gap = c->end - prev;
                vplan = c->plan;
            }
            prev = c->end;
        }
        pic_pc_ck_drop_locked(pc, pc->chain[victim]);
        pc->st.trims++;
        held--;
    }
}

/* Evict least recently used leaves (the leaf list's tail) until the
 * budget holds (one leaf at most when one). */
static size_t
pic_pc_evict_locked(pic_prefix_cache *pc, int one)
{
    pic_pnode *n;
    size_t     freed = 0;

    while ((one || pc->st.bytes > pc->st.budget) && (n = pic_pc_victim_locked(pc)) != NULL) {
        pic_pnode **pp = &n->parent->child, *par = n->parent, *only;

        if (pc->per_token > 0.0 && n->gn.idx != 0) {
            pic_gds_raise(pc->clock, n->gn.key);
        }

        freed += n->bytes;
        while (*pp != n) {
            pp = &(*pp)->sib;
        }
        *pp = n->sib;
        pic_pc_lru_unlink(pc, n);
        pic_pc_leaf_unlink(pc, n);
        pc->dirty = 1;
        pc->st.bytes -= n->bytes;
        pc->st.blocks -= n->n_tok == pc->block;
        pc->st.evictions += n->n_tok > 0;
        pc->st.checkpoints -= n->ck != NULL;
        pc->st.tails -= n->n_tok > 0 && n->n_tok < pc->block;
        pic_pc_node_free(pc, n);
        if (par != &pc->root && par->child == NULL) {
            pic_pc_leaf_put_aged(pc, par);      /* the parent is a leaf now */
        }
        if (par->n_tok == pc->block && pic_pc_block_children(pc, par, &only) == 1) {
            pic_pc_trim_locked(pc, par);        /* two edges became one */
        }
        if (one) {
            break;
        }
    }
    return freed;
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
    co.m = co.m > 0 ? co.m : 4;
    co.resolve_every = co.resolve_every > 0 ? co.resolve_every : 10;
    co.min_history = co.min_history > 0 ? co.min_history : 10;
    co.decay = co.decay > 0.0 ? co.decay : 0.99;
    if (co.decay > 1.0 || co.m > 4096) {
        snprintf(err, errlen, "%s: decay must be in (0, 1], M <= 4096", __func__);
        free(pc);
        return NULL;
    }
    pc->co = co;
    pc->scale = 1.0;
    pc->clock = &pc->own_clock;
    pc->m = m;
    pc->block = co.block;
    pc->mmax = co.m;
    pc->st.ck_per_edge = co.m;
    pc->st.budget = o->budget;
    int C = pic_config_conv_ch(c);
    int K1 = pic_config_conv_k1(c);
    for (int l = 0; l < c->n_layers; l++) {
        if (pic_layer_recurrent(c->layer_type[l])) {
            pc->ck_floats += (size_t) c->lin_v_heads * c->lin_k_dim * c->lin_v_dim
                             + (size_t) C * K1;
        } else {
            /* MLA: the latent rows only (no V cache) */
            pc->kv_floats += (size_t) pic_config_cache_heads(c) * pc->block
                             * (pic_config_cache_kdim(c) + pic_config_cache_vdim(c));
        }
    }
    pc->spares = calloc(1, sizeof(*pc->spares));
    if (pc->spares == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        free(pc);
        return NULL;
    }
    pthread_mutex_init(&pc->spares->mu, NULL);
    pthread_mutex_init(&pc->mu, NULL);
    pthread_mutex_init(&pc->maint_mu, NULL);
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
        pic_pc_node_free(pc, n);
    }
    free(pc->chain);
    pic_gds_free(&pc->heap);
    for (int i = 0; i < pc->spares->n; i++) {
        pic_pages_free(pc->spares->buf[i], pc->ck_floats * sizeof(float));
    }
    pthread_mutex_destroy(&pc->spares->mu);
    free(pc->spares);
    pthread_mutex_destroy(&pc->mu);
    pthread_mutex_destroy(&pc->maint_mu);
    free(pc);
}

/* --- copies between nodes and a run state --- */

/* Nodes and checkpoints live in host memory; a state lives on its backend
 * (s->be): copies out of it are mem_download, into it mem_upload (memcpy on
 * the CPU). */

static void
pic_pc_kv_to_state(const pic_prefix_cache *pc, const pic_pnode *n, pic_state *s)
{
    const pic_config *c = &pc->m->cfg;
    const float      *src = n->kv;
    int               Hc = pic_config_cache_heads(c);
    int               kd = pic_config_cache_kdim(c), vd = pic_config_cache_vdim(c);
    int               p0 = n->end - n->n_tok;

    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] != PIC_LAYER_FULL) {
            continue;
        }
        for (int j = 0; j < Hc; j++, src += (size_t) n->n_tok * kd) {
            s->be->mem_upload(s->kc[l] + ((size_t) j * s->cap + p0) * kd, src,
                              (size_t) n->n_tok * kd * sizeof(float));
        }
        for (int j = 0; j < Hc && vd > 0; j++, src += (size_t) n->n_tok * vd) {
            s->be->mem_upload(s->vc[l] + ((size_t) j * s->cap + p0) * vd, src,
                              (size_t) n->n_tok * vd * sizeof(float));
        }
    }
}

static void
pic_pc_kv_from_state(const pic_prefix_cache *pc, pic_pnode *n, const pic_state *s)
{
    const pic_config *c = &pc->m->cfg;
    float            *dst = n->kv;
    int               Hc = pic_config_cache_heads(c);
    int               kd = pic_config_cache_kdim(c), vd = pic_config_cache_vdim(c);
    int               p0 = n->end - n->n_tok;

    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] != PIC_LAYER_FULL) {
            continue;
        }
        for (int j = 0; j < Hc; j++, dst += (size_t) n->n_tok * kd) {
            s->be->mem_download(dst, s->kc[l] + ((size_t) j * s->cap + p0) * kd,
                                (size_t) n->n_tok * kd * sizeof(float));
        }
        for (int j = 0; j < Hc && vd > 0; j++, dst += (size_t) n->n_tok * vd) {
            s->be->mem_download(dst, s->vc[l] + ((size_t) j * s->cap + p0) * vd,
                                (size_t) n->n_tok * vd * sizeof(float));
        }
    }
}

/* Linear states of s into a new checkpoint buffer (NULL on OOM). */
static float *
pic_pc_ck_take(const pic_prefix_cache *pc, const pic_state *s)
{
    const pic_config *c = &pc->m->cfg;
    float            *ck = pic_pc_ck_alloc(pc), *d = ck;
    size_t            nS = (size_t) s->Hv * s->dk * s->dv;
    size_t            nC = (size_t) s->conv_ch * s->conv_k1;

    for (int l = 0; ck != NULL && l < c->n_layers; l++) {
        if (pic_layer_recurrent(c->layer_type[l])) {
            s->be->mem_download(d, s->S[l], nS * sizeof(float));
            s->be->mem_download(d + nS, s->conv[l], nC * sizeof(float));
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
        if (pic_layer_recurrent(c->layer_type[l])) {
            s->be->mem_upload(s->S[l], ck, nS * sizeof(float));
            s->be->mem_upload(s->conv[l], ck + nS, nC * sizeof(float));
            ck += nS + nC;
        }
    }
}

/* --- lookup --- */

/* The scope's subtree (created when make; NULL if absent or OOM). */
static pic_pnode *
pic_pc_scope_locked(pic_prefix_cache *pc, uint64_t scope, int make)
{
    pic_pnode *c;

    for (c = pc->root.child; c != NULL; c = c->sib) {
        if (c->h == scope) {
            return c;
        }
    }
    if (!make || (c = calloc(1, sizeof(*c))) == NULL) {
        return NULL;
    }
    c->h = scope;
    c->id = ++pc->next_id;
    c->parent = &pc->root;
    c->sib = pc->root.child;
    pc->root.child = c;
    c->bytes = sizeof(*c);
    pc->st.bytes += c->bytes;
    pic_pc_lru_push(pc, c);
    pic_pc_leaf_push(pc, c);
    return c;
}

/* A tail child of p whose tokens all equal tokens[p->end ..] and that ends
 * at or before lim; the deepest such, or NULL. */
static pic_pnode *
pic_pc_tail_locked(const pic_prefix_cache *pc, const pic_pnode *p, const int *tokens,
                   int lim)
{
    pic_pnode *best = NULL;

    for (pic_pnode *c = p->child; c != NULL; c = c->sib) {
        if (c->n_tok > 0 && c->n_tok < pc->block && c->end <= lim && c->ck != NULL
            && !memcmp(c->tok, tokens + p->end, (size_t) c->n_tok * sizeof(int))
            && (best == NULL || c->end > best->end)) {
            best = c;
        }
    }
    return best;
}

/* Walk the full blocks of tokens under the scope node sc (at most
 * max_blocks) into path; returns the count matched; *depth = the
 * token-level shared prefix length. */
static int
pic_pc_walk_locked(pic_prefix_cache *pc, pic_pnode *sc, const int *tokens, int n,
                   int max_blocks, pic_pnode **path, int *depth)
{
    int        B = pc->block, nb = 0;
    pic_pnode *cur = sc;

    *depth = 0;
    if (sc == NULL) {
        return 0;
    }
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
        while (k < rest && k < c->n_tok && c->tok[k] == tokens[nb * B + k]) {
            k++;
        }
        part = k > part ? k : part;
    }
    *depth = nb * B + part;
    return nb < max_blocks ? nb : max_blocks;
}

/* The resume point for tokens (n) under sc: the deepest checkpoint (a
 * block's or a tail's) ending at or before n − 1 on the shared path.
 * *rb = its path index (−1: the scope node), *tail = a tail node or NULL;
 * returns the position (0: none). */
static int
pic_pc_resume_locked(pic_prefix_cache *pc, pic_pnode *sc, pic_pnode **path, int nb,
                     const int *tokens, int n, int *rb, pic_pnode **tail)
{
    int best = 0;

    *rb = -1;
    *tail = NULL;
    if (sc == NULL) {
        return 0;
    }
    for (int b = -1; b < nb; b++) {
        pic_pnode *p = b < 0 ? sc : path[b];
        pic_pnode *t;

        if (b >= 0 && p->ck != NULL && p->end > best) {
            best = p->end;
            *rb = b;
            *tail = NULL;
        }
        t = pic_pc_tail_locked(pc, p, tokens, n - 1);
        if (t != NULL && t->end > best) {
            best = t->end;
            *rb = b;
            *tail = t;
        }
    }
    return best;
}

void
pic_prefix_cache_lookup_scope(pic_prefix_cache *pc, uint64_t scope, const int *tokens,
                              int n, int *depth, int *resume)
{
    int         usable = n > 0 ? (n - 1) / pc->block : 0, nb, rb;
    pic_pnode **path = malloc((size_t) (usable > 0 ? usable : 1) * sizeof(*path));
    pic_pnode  *sc, *tail;

    *depth = 0;
    *resume = 0;
    if (path == NULL || n <= 0) {
        free(path);
        return;
    }
    pthread_mutex_lock(&pc->mu);
    sc = pic_pc_scope_locked(pc, scope, 0);
    nb = pic_pc_walk_locked(pc, sc, tokens, n, usable, path, depth);
    *resume = pic_pc_resume_locked(pc, sc, path, nb, tokens, n, &rb, &tail);
    pthread_mutex_unlock(&pc->mu);
    free(path);
}

void
pic_prefix_cache_lookup(pic_prefix_cache *pc, const int *tokens, int n, int *depth,
                        int *resume)
{
    pic_prefix_cache_lookup_scope(pc, 0, tokens, n, depth, resume);
}

/* --- restore, capture, insert --- */

/* Observe depth on the block it ends in (path: the nb full blocks matched). */
static void
pic_pc_observe_locked(pic_prefix_cache *pc, pic_pnode **path, int nb, int depth)
{
    int        b = depth / pc->block;
    pic_pnode *a = b >= 1 && b <= nb ? path[b - 1] : NULL;

    pc->st.observations++;
    if (a == NULL) {
        return;                         /* inside the first block: no checkpoint helps */
    }
    /* old weights × decay ⇔ the new one × 1/decay (lazy scale) */
    pc->scale /= pc->co.decay;
    a->hw += pc->scale;
    a->hwd += pc->scale * depth;
    a->n_obs++;
    a->pend++;
    pc->pend_obs++;
    if (pc->scale > 1e150) {
        for (pic_pnode *n = pc->head; n != NULL; n = n->lnext) {
            n->hw /= pc->scale;
            n->hwd /= pc->scale;
        }
        pc->scale = 1.0;
    }
}

int
pic_prefix_cache_restore(pic_prefix_cache *pc, uint64_t scope, pic_state *s,
                         const int *tokens, int n, int *depth, int *resume, char *err,
                         size_t errlen)
{
    int         usable, nb, rb, c;
    pic_pnode **path, *sc, *tail;

    *depth = 0;
    *resume = 0;
    if (tokens == NULL || n <= 0) {
        snprintf(err, errlen, "%s: empty prompt", __func__);
        return -1;
    }
    usable = (n - 1) / pc->block;           /* the last token is always recomputed */
    path = malloc((size_t) (n / pc->block + 1) * sizeof(*path));
    pic_state_reset(s);
    if (path == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    if (pic_state_reserve(s, n, err, errlen) != 0) {
        free(path);
        return -1;
    }
    pthread_mutex_lock(&pc->mu);
    sc = pic_pc_scope_locked(pc, scope, 0);
    nb = pic_pc_walk_locked(pc, sc, tokens, n, n / pc->block, path, depth);
    pic_pc_observe_locked(pc, path, nb, *depth);
    c = pic_pc_resume_locked(pc, sc, path, nb < usable ? nb : usable, tokens, n, &rb, &tail);
    if (c > 0) {
        for (int b = 0; b <= rb; b++) {
            pic_pc_kv_to_state(pc, path[b], s);
        }
        if (tail != NULL) {
            pic_pc_kv_to_state(pc, tail, s);
            pic_pc_ck_to_state(pc, tail->ck, s);
            pic_pc_touch_locked(pc, tail);
        } else {
            pic_pc_ck_to_state(pc, path[rb]->ck, s);
            pic_pc_touch_locked(pc, path[rb]);
        }
    }
    pc->st.lookups++;
    pc->st.hits += c > 0;
    pc->st.tail_hits += tail != NULL;
    pc->st.tokens_reused += (uint64_t) c;
    pc->st.tokens_recomputed += (uint64_t) (n - c);
    pc->st.tokens_skippable += (uint64_t) (*depth > c ? *depth - c : 0);
    pthread_mutex_unlock(&pc->mu);
    free(path);
    s->pos = c;
    *resume = c;
    return 0;
}

int
pic_prefix_cache_cuts(pic_prefix_cache *pc, uint64_t scope, const int *tokens, int n,
                      int from, int to, int *pos)
{
    int         B = pc->block, nb, depth, k = 0, e0, E, M = pc->mmax;
    pic_pnode **path = malloc((size_t) (n / B + 1) * sizeof(*path));
    pic_pnode  *sc, *p, *only;
    int        *bal = malloc((size_t) M * sizeof(int));

    if (path == NULL || bal == NULL || n <= 0) {
        free(path);
        free(bal);
        return 0;
    }
    pthread_mutex_lock(&pc->mu);
    sc = pic_pc_scope_locked(pc, scope, 0);
    nb = pic_pc_walk_locked(pc, sc, tokens, n, n / B, path, &depth);
    /* planned block ends on the shared path that hold no checkpoint yet */
    for (int i = 0; i < nb && k < M; i++) {
        if (path[i]->end > from && path[i]->end <= to && path[i]->plan
            && path[i]->ck == NULL) {
            pos[k++] = path[i]->end;
        }
    }
    /* the blocks past the tree: balanced over the edge they will form,
     * which continues the last matched block's edge when that block is
     * an edge's end, or starts at it */
    p = nb > 0 ? path[nb - 1] : sc;
    e0 = nb * B;
    if (p != NULL && p->n_tok == B && pic_pc_block_children(pc, p, &only) == 0) {
        e0 = pic_pc_edge_head(pc, p)->end - B;
    }
    pthread_mutex_unlock(&pc->mu);
    E = (to / B) * B;
    if (E > nb * B) {
        int cnt = pic_ckpt_place(PIC_CKPT_BALANCED, B, M, E - e0, bal);

        for (int i = 0; i < cnt; i++) {
            int at = e0 + bal[i];
            if (at > nb * B && at > from && at <= to) {
                pos[k++] = at;
            }
        }
    }
    free(path);
    free(bal);
    return k;
}

int
pic_prefix_cache_max_cuts(const pic_prefix_cache *pc)
{
    return 2 * pc->mmax;
}

float *
pic_prefix_cache_snap(const pic_prefix_cache *pc, const pic_state *s)
{
    return pic_pc_ck_take(pc, s);
}

float *
pic_prefix_cache_ck_new(const pic_prefix_cache *pc)
{
    return pic_pc_ck_alloc(pc);
}

void
pic_prefix_cache_ck_free(const pic_prefix_cache *pc, float *ck)
{
    pic_pc_ck_recycle(pc, ck);
}

int
pic_prefix_cache_prefault(pic_prefix_cache *pc)
{
    pic_pc_spares *sp = pc->spares;
    float         *ck;
    int            need;

    pthread_mutex_lock(&sp->mu);
    need = sp->n < PIC_PREFIX_SPARES;
    pthread_mutex_unlock(&sp->mu);
    if (!need || (ck = pic_pages_alloc(pc->ck_floats * sizeof(float))) == NULL) {
        return 0;
    }
    pic_pc_ck_recycle(pc, ck);
    return 1;
}

int
pic_prefix_cache_spares(pic_prefix_cache *pc)
{
    int n;

    pthread_mutex_lock(&pc->spares->mu);
    n = pc->spares->n;
    pthread_mutex_unlock(&pc->spares->mu);
    return n;
}

void
pic_prefix_cache_snap_layer(const pic_prefix_cache *pc, const pic_state *s, int layer,
                            float *ck)
{
    const pic_config *c = &pc->m->cfg;
    size_t            nS = (size_t) s->Hv * s->dk * s->dv;
    size_t            nC = (size_t) s->conv_ch * s->conv_k1;

    if (ck == NULL || layer < 0 || layer >= c->n_layers
        || !pic_layer_recurrent(c->layer_type[layer])) {
        return;
    }
    for (int l = 0; l < layer; l++) {       /* the layers before it, as ck_take */
        if (pic_layer_recurrent(c->layer_type[l])) {
            ck += nS + nC;
        }
    }
    s->be->mem_download(ck, s->S[layer], nS * sizeof(float));
    s->be->mem_download(ck + nS, s->conv[layer], nC * sizeof(float));
}

/* A new node under parent for tokens tb (nt of them) ending at end, its KV
 * from s; NULL on OOM. */
static pic_pnode *
pic_pc_node_new_locked(pic_prefix_cache *pc, pic_pnode *parent, const int *tb, int nt,
                       int end, uint64_t h, const pic_state *s)
{
    pic_pnode *c = calloc(1, sizeof(*c));
    size_t     kvf = pc->kv_floats / (size_t) pc->block * (size_t) nt;

    if (c != NULL) {
        c->tok = malloc((size_t) nt * sizeof(int));
        c->kv = malloc(kvf * sizeof(float));
    }
    if (c == NULL || c->tok == NULL || c->kv == NULL) {
        if (c != NULL) {
            pic_pc_node_free(pc, c);
        }
        return NULL;
    }
    memcpy(c->tok, tb, (size_t) nt * sizeof(int));
    c->h = h;
    c->id = ++pc->next_id;
    c->n_tok = nt;
    c->end = end;
    c->parent = parent;
    c->sib = parent->child;
    parent->child = c;
    pic_pc_kv_from_state(pc, c, s);
    c->bytes = sizeof(*c) + (size_t) nt * sizeof(int) + kvf * sizeof(float);
    pc->st.bytes += c->bytes;
    pic_pc_lru_push(pc, c);
    pic_pc_leaf_unlink(pc, parent);     /* has a child now */
    pic_pc_leaf_push(pc, c);
    return c;
}

static void
pic_pc_attach_ck_locked(pic_prefix_cache *pc, pic_pnode *c, float **ck, int *added)
{
    if (c->ck != NULL || *ck == NULL) {
        return;
    }
    (*added)++;
    c->ck = *ck;
    *ck = NULL;
    c->bytes += pc->ck_floats * sizeof(float);
    pc->st.bytes += pc->ck_floats * sizeof(float);
    pc->st.checkpoints++;
    if (c->gn.idx != 0) {
        pic_pc_prioritize_locked(pc, c);
    }
}

/* The tail of tokens[par->end, p) under par (found or made, its KV from s),
 * given the checkpoint *ck; NULL on OOM. */
static pic_pnode *
pic_pc_tail_put_locked(pic_prefix_cache *pc, pic_pnode *par, const int *tokens, int p,
                       const pic_state *s, float **ck, int *nck)
{
    const int *tb = tokens + par->end;
    int        nt = p - par->end;
    pic_pnode *t = NULL;

    for (pic_pnode *c = par->child; c != NULL; c = c->sib) {
        if (c->n_tok == nt && !memcmp(c->tok, tb, (size_t) nt * sizeof(int))) {
            t = c;
            break;
        }
    }
    if (t == NULL) {
        t = pic_pc_node_new_locked(pc, par, tb, nt, p, 0, s);
        if (t == NULL) {
            return NULL;
        }
        pc->st.tails++;
    }
    pic_pc_attach_ck_locked(pc, t, ck, nck);
    return t;
}

int
pic_prefix_cache_insert(pic_prefix_cache *pc, uint64_t scope, const pic_state *s,
                        const int *tokens, int n, const int *cpos, float **ck, int n_ck,
                        int tail, int *new_blocks, int *new_checkpoints)
{
    int        B = pc->block, full = n / B, nb = 0, nck = 0, nt = 0;
    pic_pnode *cur, *last = NULL, *touched[8];
    pic_pnode *tail_par = NULL, *tail_at = NULL;    /* where s's own checkpoint goes */
    float     *tck = NULL;

    if (new_blocks == NULL) {
        new_blocks = &nb;
    }
    *new_blocks = 0;
    tail = tail && s->pos == n && n > 0;
    pthread_mutex_lock(&pc->mu);
    cur = pic_pc_scope_locked(pc, scope, 1);
    for (int b = 0; cur != NULL && b <= full; b++) {
        /* checkpoints inside block b: tails under the node at b·B */
        for (int k = 0; k < n_ck; k++) {
            if (cpos[k] > b * B && cpos[k] < (b + 1) * B && cpos[k] <= n && ck[k] != NULL) {
                pic_pc_tail_put_locked(pc, cur, tokens, cpos[k], s, &ck[k], &nck);
            }
        }
        if (tail && n > b * B && n < (b + 1) * B) {
            tail_par = cur;
        }
        if (b == full) {
            break;
        }
        const int *tb = tokens + (size_t) b * B;
        uint64_t   h = XXH64(tb, (size_t) B * sizeof(int), 0);
        pic_pnode *c = pic_pc_child(cur, tb, B, h);
        int        fresh = c == NULL;

        if (c == NULL) {
            c = pic_pc_node_new_locked(pc, cur, tb, B, (b + 1) * B, h, s);
            if (c == NULL) {
                break;                  /* best effort: the cache stops here */
            }
            pc->st.blocks++;
            pc->st.insertions++;
            (*new_blocks)++;
        }
        int had = c->ck != NULL;
        for (int k = 0; k < n_ck; k++) {
            if (cpos[k] == c->end) {
                pic_pc_attach_ck_locked(pc, c, &ck[k], &nck);
                c->plan |= fresh;       /* a new block's balanced position */
            }
        }
        if (tail && c->end == n) {
            tail_at = c;
        }
        if (!had && c->ck != NULL) {
            /* one per edge is enough to trim it */
            if (nt == 0 || pic_pc_edge_head(pc, touched[nt - 1]) != pic_pc_edge_head(pc, c)) {
                if (nt < 8) {
                    touched[nt++] = c;
                } else {
                    pic_pc_trim_locked(pc, c);
                }
            }
        }
        cur = c;
    }
    for (int i = 0; i < nt; i++) {
        pic_pc_trim_locked(pc, touched[i]);
    }
    for (int k = 0; k < n_ck; k++) {
        pic_pc_ck_recycle(pc, ck[k]);           /* not taken: back to the stock */
        ck[k] = NULL;
    }
    /* s's own checkpoint last, so that it takes a buffer the trims and the
     * untaken cuts just gave back instead of mapping a new one (10-15 ms of
     * fresh pages on models/mid in a VM when the stock ran dry) */
    if ((tail_par != NULL || (tail_at != NULL && tail_at->ck == NULL))
        && (tck = pic_pc_ck_take(pc, s)) != NULL) {
        if (tail_par != NULL) {
            last = pic_pc_tail_put_locked(pc, tail_par, tokens, n, s, &tck, &nck);
        } else {
            pic_pc_attach_ck_locked(pc, tail_at, &tck, &nck);
            pic_pc_trim_locked(pc, tail_at);
        }
    }
    if (*new_blocks > 0 || nck > 0) {
        pc->dirty = 1;
    }
    if (last != NULL) {
        pic_pc_touch_locked(pc, last);
    } else if (cur != NULL) {
        pic_pc_touch_locked(pc, cur);
    }
    pic_pc_evict_locked(pc, 0);
    pthread_mutex_unlock(&pc->mu);
    if (new_checkpoints != NULL) {
        *new_checkpoints = nck;
    }
    pic_pc_ck_recycle(pc, tck);
    return 0;
}

/* --- prefill --- */

typedef struct {
    const pic_prefix_cache *pc;
    const pic_state        *s;
    float                 **snap;       /* (n_cut) one buffer per cut */
} pic_pc_cut_ctx;

static void
pic_pc_cut_hook(void *user, int layer, int cut)
{
    pic_pc_cut_ctx *cc = user;

    pic_prefix_cache_snap_layer(cc->pc, cc->s, layer, cc->snap[cut]);
}

int
pic_prefix_cache_prefill(pic_prefix_cache *pc, const pic_backend *be, pic_state *s,
                         const int *tokens, int n, float *logits,
                         pic_prefix_result *r, char *err, size_t errlen)
{
    const pic_model  *m = pc->m;
    pic_prefix_result local;
    int               depth = 0, resume = 0, rc = -1, n_cut;
    int              *cuts = NULL;
    float           **snap = NULL;

    if (r == NULL) {
        r = &local;
    }
    memset(r, 0, sizeof(*r));
    pic_prefix_cache_mark_request(1);
    cuts = malloc((size_t) (2 * pc->mmax + 1) * sizeof(int));
    snap = calloc((size_t) (2 * pc->mmax + 1), sizeof(float *));
    if (cuts == NULL || snap == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        goto done;
    }
    if (pic_prefix_cache_restore(pc, 0, s, tokens, n, &depth, &resume, err, errlen) != 0) {
        goto done;
    }
    n_cut = pic_prefix_cache_cuts(pc, 0, tokens, n, resume, n, cuts);

    /* one forward from c, the checkpoints captured inside it */
    for (int k = 0; k < n_cut; k++) {
        snap[k] = pic_prefix_cache_ck_new(pc);      /* NULL on OOM: skipped */
    }
    pic_pc_cut_ctx cc = { .pc = pc, .s = s, .snap = snap };
    pic_forward_hooks h = { .user = &cc, .on_cut = pic_pc_cut_hook };
    if (pic_forward_cuts(m, be, s, tokens + resume, n - resume, resume, cuts, n_cut,
                         logits != NULL ? PIC_LOGITS_LAST : PIC_LOGITS_NONE, logits,
                         n_cut > 0 ? &h : NULL, err, errlen) != 0) {
        goto done;
    }
    pic_prefix_cache_insert(pc, 0, s, tokens, n, cuts, snap, n_cut, 0, &r->new_blocks,
                            &r->new_checkpoints);
    r->depth = depth;
    r->resume = resume;
    r->recomputed = n - resume;
    rc = 0;

done:
    for (int k = 0; snap != NULL && k <= 2 * pc->mmax; k++) {
        pic_pc_ck_recycle(pc, snap[k]);
    }
    free(snap);
    free(cuts);
    pic_prefix_cache_mark_request(0);
    return rc;
}

/* --- placement, off the request path --- */

void
pic_prefix_cache_mark_request(int on)
{
    pic_pc_in_request += on ? 1 : -1;
}

int
pic_prefix_cache_due(pic_prefix_cache *pc)
{
    int due;

    pthread_mutex_lock(&pc->mu);
    due = pc->dirty || pc->pend_obs >= pc->co.resolve_every;
    pthread_mutex_unlock(&pc->mu);
    return due;
}

/* One edge's re-solve, from its snapshot to the placement applied. */
typedef struct {
    int       L;                /* blocks */
    int       dp;               /* history enough for the DP (else balanced) */
    uint64_t *id;               /* (L) the blocks' ids: the edge unchanged iff equal */
    int      *pend;             /* (L) observations pending at the snapshot */
    double   *mass, *mass_d;    /* (L + 1) the histogram, as pic_ckpt_solve */
    int      *blk;              /* (M) the placement: block indices in 1..L */
    int       cnt;
} pic_pc_solve;

static void
pic_pc_solve_free(pic_pc_solve *v)
{
    free(v->id);
    free(v->pend);
    free(v->mass);
    free(v->mass_d);
    free(v->blk);
}

/* Snapshot the edge in pc->chain (L blocks) into v when it is due; 1 if
 * it was (v then owns arrays), 0 if not due, -1 on ENOMEM. */
static int
pic_pc_snapshot_edge_locked(pic_prefix_cache *pc, int L, pic_pc_solve *v)
{
    pic_pnode *head = pc->chain[0];
    long       obs = 0;
    int        pend = 0, held = 0, B = pc->block, e0 = head->end - B;

    for (int i = 0; i < L; i++) {
        obs += pc->chain[i]->n_obs;
        pend += pc->chain[i]->pend;
        held += pc->chain[i]->ck != NULL;
    }
    if (pend < pc->co.resolve_every && head->solved == L && held <= pc->mmax) {
        return 0;
    }
    memset(v, 0, sizeof(*v));
    v->L = L;
    v->dp = obs >= pc->co.min_history;
    v->id = malloc((size_t) L * sizeof(uint64_t));
    v->pend = malloc((size_t) L * sizeof(int));
    v->mass = malloc(((size_t) L + 1) * sizeof(double));
    v->mass_d = malloc(((size_t) L + 1) * sizeof(double));
    v->blk = malloc((size_t) pc->mmax * sizeof(int));
    if (v->id == NULL || v->pend == NULL || v->mass == NULL || v->mass_d == NULL
        || v->blk == NULL) {
        pic_pc_solve_free(v);
        return -1;
    }
    /* bin j = depths in [e0 + j·B, e0 + (j+1)·B): block j−1's; bin 0 (the
     * parent's last block) gains nothing from any checkpoint here */
    v->mass[0] = v->mass_d[0] = 0.0;
    for (int i = 0; i < L; i++) {
        const pic_pnode *c = pc->chain[i];
        v->id[i] = c->id;
        v->pend[i] = c->pend;
        v->mass[i + 1] = c->hw / pc->scale;
        v->mass_d[i + 1] = (c->hwd - c->hw * e0) / pc->scale;
    }
    return 1;
}

/* The placement of a snapshot (no lock: the DP is the slow part). */
static void
pic_pc_solve_edge(const pic_prefix_cache *pc, pic_pc_solve *v)
{
    int B = pc->block;

    if (!v->dp) {
        v->cnt = pic_ckpt_place(PIC_CKPT_BALANCED, B, pc->mmax, v->L * B, v->blk);
        for (int i = 0; i < v->cnt; i++) {
            v->blk[i] /= B;
        }
    } else {
        v->cnt = pic_ckpt_solve_fill(v->mass, v->mass_d, v->L, B, pc->mmax, v->blk);
    }
}

/* Apply v to the edge in pc->chain (L blocks) if it is the edge solved
 * (same blocks); 1 if applied. */
static int
pic_pc_apply_edge_locked(pic_prefix_cache *pc, int L, const pic_pc_solve *v)
{
    pic_pnode *head = pc->chain[0];

    if (L != v->L) {
        return 0;
    }
    for (int i = 0; i < L; i++) {
        if (pc->chain[i]->id != v->id[i]) {
            return 0;
        }
    }
    for (int i = 0; i < L; i++) {
        pc->chain[i]->plan = 0;
        pc->chain[i]->pend -= v->pend[i];       /* those observed meanwhile stay */
    }
    for (int i = 0; i < v->cnt; i++) {
        if (v->blk[i] >= 1 && v->blk[i] <= L) {
            pc->chain[v->blk[i] - 1]->plan = 1;
        }
    }
    head->solved = L;
    pc->st.resolves++;
    pc->st.resolves_in_request += pic_pc_in_request > 0;
    pic_pc_trim_locked(pc, head);
    return 1;
}

static int
pic_pc_solve_cmp(const void *a, const void *b)
{
    uint64_t x = ((const pic_pc_solve *) a)->id[0], y = ((const pic_pc_solve *) b)->id[0];

    return x < y ? -1 : x > y;
}

int
pic_prefix_cache_maintain(pic_prefix_cache *pc)
{
    pic_pnode  **heads = NULL;
    pic_pc_solve *v = NULL;
    size_t       nh, nv = 0, vcap = 0;
    int          done = 0, stale = 0;

    /* 1. under the lock: snapshot the due edges' histograms */
    pthread_mutex_lock(&pc->maint_mu);
    pthread_mutex_lock(&pc->mu);
    pc->dirty = 0;
    pc->pend_obs = 0;
    nh = pic_pc_edge_heads_locked(pc, &heads);
    for (size_t h = 0; h < nh; h++) {
        int L = pic_pc_edge_chain_locked(pc, heads[h]);
        if (L < 1 || pic_grow((void **) &v, &vcap, nv + 1, sizeof(*v)) != 0) {
            continue;
        }
        if (pic_pc_snapshot_edge_locked(pc, L, &v[nv]) == 1) {
            nv++;
        }
    }
    pthread_mutex_unlock(&pc->mu);
    free(heads);
    if (nv == 0) {
        pthread_mutex_unlock(&pc->maint_mu);
        free(v);
        return 0;
    }

    /* 2. unlocked: the DP (requests walk and insert meanwhile) */
    if (pc->solve_hook != NULL) {
        pc->solve_hook(pc->solve_arg);
    }
    for (size_t k = 0; k < nv; k++) {
        pic_pc_solve_edge(pc, &v[k]);
    }
    qsort(v, nv, sizeof(*v), pic_pc_solve_cmp);

    /* 3. under the lock: apply to each edge that is still the one solved;
     * an edge that changed meanwhile is due again (its shape changed) */
    pthread_mutex_lock(&pc->mu);
    nh = pic_pc_edge_heads_locked(pc, &heads);
    for (size_t h = 0; h < nh; h++) {
        pic_pc_solve key = { .id = &heads[h]->id }, *hit;

        hit = bsearch(&key, v, nv, sizeof(*v), pic_pc_solve_cmp);
        if (hit == NULL) {
            continue;
        }
        int L = pic_pc_edge_chain_locked(pc, heads[h]);
        if (L >= 1 && pic_pc_apply_edge_locked(pc, L, hit)) {
            done++;
            hit->cnt = -1;                      /* applied */
        }
    }
    for (size_t k = 0; k < nv; k++) {
        stale += v[k].cnt >= 0;
    }
    pc->st.resolves_dropped += (uint64_t) stale;
    if (stale > 0) {
        pc->dirty = 1;
    }
    pthread_mutex_unlock(&pc->mu);
    pthread_mutex_unlock(&pc->maint_mu);
    free(heads);
    for (size_t k = 0; k < nv; k++) {
        pic_pc_solve_free(&v[k]);
    }
    free(v);
    return done;
}

void
pic_prefix_cache_set_solve_hook(pic_prefix_cache *pc, void (*fn)(void *), void *arg)
{
    pc->solve_hook = fn;
    pc->solve_arg = arg;
}

void
pic_prefix_cache_edges(pic_prefix_cache *pc, int *n_edges, int *max_ck)
{
    pic_pnode **heads = NULL;
    size_t      nh;

    *n_edges = 0;
    *max_ck = 0;
    pthread_mutex_lock(&pc->mu);
    nh = pic_pc_edge_heads_locked(pc, &heads);
    for (size_t h = 0; h < nh; h++) {
        int L = pic_pc_edge_chain_locked(pc, heads[h]), held = 0;
        for (int i = 0; i < L; i++) {
            held += pc->chain[i]->ck != NULL;
        }
        (*n_edges)++;
        *max_ck = held > *max_ck ? held : *max_ck;
    }
    pthread_mutex_unlock(&pc->mu);
    free(heads);
}

void
pic_prefix_cache_stats_get(pic_prefix_cache *pc, pic_prefix_stats *st)
{
    pthread_mutex_lock(&pc->mu);
    *st = pc->st;
    pthread_mutex_unlock(&pc->mu);
}

int64_t
pic_prefix_cache_oldest(pic_prefix_cache *pc)
{
    pic_pnode *n;
    int64_t    t;

    pthread_mutex_lock(&pc->mu);
    n = pc->ltail;
    t = n != NULL ? n->used : 0;
    pthread_mutex_unlock(&pc->mu);
    return t;
}

size_t
pic_prefix_cache_evict_one(pic_prefix_cache *pc)
{
    size_t freed;

    pthread_mutex_lock(&pc->mu);
    freed = pic_pc_evict_locked(pc, 1);
    pthread_mutex_unlock(&pc->mu);
    return freed;
}

void
pic_prefix_cache_bytes(pic_prefix_cache *pc, size_t *blocks, size_t *checkpoints,
                       size_t *tails)
{
    size_t ckb = pc->ck_floats * sizeof(float);

    *blocks = *checkpoints = *tails = 0;
    pthread_mutex_lock(&pc->mu);
    for (pic_pnode *n = pc->head; n != NULL; n = n->lnext) {
        if (n->n_tok > 0 && n->n_tok < pc->block) {
            *tails += n->bytes;
        } else if (n->ck != NULL) {
            *checkpoints += ckb;
            *blocks += n->bytes - ckb;
        } else {
            *blocks += n->bytes;
        }
    }
    pthread_mutex_unlock(&pc->mu);
}

int
pic_prefix_cache_check(pic_prefix_cache *pc)
{
    size_t nodes = 0, leaves = 0, listed = 0, bytes = 0;
    int    ok = 1;

    pthread_mutex_lock(&pc->mu);
    for (pic_pnode *n = pc->head; n != NULL; n = n->lnext) {
        nodes++;
        bytes += n->bytes;
        leaves += n->child == NULL;
        ok &= (n->child == NULL) == pic_pc_is_leafed(pc, n);
    }
    for (pic_pnode *n = pc->lhead; n != NULL; n = n->fnext) {
        listed++;
        ok &= n->child == NULL && (n->fnext == NULL || n->fnext->used <= n->used);
        ok &= n->fnext != NULL || pc->ltail == n;
        if (listed > nodes) {
            ok = 0;
            break;
        }
    }
    ok &= listed == leaves && bytes == pc->st.bytes;
    ok &= pc->per_token <= 0.0 || pc->heap.n == leaves;
    pthread_mutex_unlock(&pc->mu);
    return ok;
}

void
pic_prefix_cache_set_cost(pic_prefix_cache *pc, double per_token, double *clock)
{
    pthread_mutex_lock(&pc->mu);
    pc->per_token = per_token > 0.0 ? per_token : 0.0;
    pc->clock = clock != NULL ? clock : &pc->own_clock;
    for (pic_pnode *n = pc->lhead; n != NULL; n = n->fnext) {
        if (pc->per_token > 0.0) {
            pic_pc_prioritize_locked(pc, n);
        } else {
            pic_gds_remove(&pc->heap, &n->gn);
        }
    }
    pthread_mutex_unlock(&pc->mu);
}

double
pic_prefix_cache_victim_priority(pic_prefix_cache *pc)
{
    pic_pnode *n;
    double     h;

    pthread_mutex_lock(&pc->mu);
    n = pic_pc_victim_locked(pc);
    h = n == NULL ? INFINITY : n->gn.idx != 0 ? n->gn.key : -INFINITY;
    pthread_mutex_unlock(&pc->mu);
    return h;
}
