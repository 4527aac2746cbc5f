/*
 * model_load.c — a Hugging Face checkpoint directory into a pic_model
 * (MODEL.md §1–§2): config.json, *.safetensors (mmap, F32/F16/BF16, sharded
 * index) and tokenizer.json's stop tokens.
 *
 * Every tensor the config implies is looked up by name, its shape checked,
 * and converted into an owned buffer: fp32 for norms, gates, conv and the
 * like; the big projection matrices (pic_wmat) as the pic_weights_format
 * asks — fp32, bf16 (a bf16 checkpoint's bytes as stored, never through a
 * whole fp32 copy) or 8-bit blocks quantised at load, chunk by chunk.  The
 * files are unmapped before returning.  A Qwen3-Next in_proj_qkvz / in_proj_ba is unpacked into the
 * Qwen3.5 layout (in_qkv, in_z, in_b, in_a) on the way.  MoE experts end up
 * in two blocks per layer whatever the checkpoint's layout:
 * gate_up (E, 2*Ie, H) with gate rows first and down (E, H, Ie).
 */
#include "model.h"
#include "model_config.h"
#include "gguf_model.h"
#include "pic_buf.h"
#include "pic_time.h"
#include "safetensors.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define LD_MAX_CONFIG      (16u << 20)
#define LD_MAX_TOKENIZER   (512u << 20)
#define LD_PROGRESS_BYTES  (256ull << 20)
#define LD_CHUNK           (64u * 1024)     /* floats converted at a time */


/* loader-owned storage behind pic_model.priv */
typedef struct {
    void   **bufs;                  /* [n_bufs] malloc'd weights and arrays */
    size_t   n_bufs;
    size_t   cap_bufs;
} ld_store;

typedef struct {
    pic_model     *m;
    ld_store      *store;
    pic_st        *st;
    const char    *prefix;          /* "model." or "model.language_model." */
    unsigned char *used;            /* [pic_st_count] tensor consumed */
    uint64_t       total;           /* bytes of text-model tensors */
    uint64_t       done;
    uint64_t      *got;             /* [pic_st_count] bytes read per tensor */
    uint32_t       n_tensors;       /* text-model tensors */
    uint32_t       n_done;          /* ... read whole (or tied, not needed) */
    int            report;          /* print progress (big checkpoint, serve) */
    int            held;            /* the test hold was passed */
    int64_t        t0, t_line;      /* load start, last progress line (ns) */
    pic_load_progress *prog;        /* shared counters, or NULL */
    pic_wtype      wt;              /* storage of the big matrices */
    int            xbf16;           /* bf16dot: BF16 matrices get xbf16 */
    float         *chunk;           /* (LD_CHUNK) conversion buffer */
    char          *err;
    size_t         errlen;
} ld_ctx;


static void
ld_err(ld_ctx *L, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (L->err == NULL || L->errlen == 0) {
        return;
    }
    n = snprintf(L->err, L->errlen, "pic_model_load: ");
    va_start(ap, fmt);
    vsnprintf(L->err + n, L->errlen - (size_t) n, fmt, ap);
    va_end(ap);
}


/* --- storage --- */

static void *
ld_keep(ld_ctx *L, size_t bytes)
{
    ld_store *s = L->store;
    void     *p;

    if (pic_grow((void **) &s->bufs, &s->cap_bufs, s->n_bufs + 1, sizeof(*s->bufs)) != 0) {
        ld_err(L, "out of memory");
        return NULL;
    }
    p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        ld_err(L, "out of memory (%zu bytes)", bytes);
        return NULL;
    }
    s->bufs[s->n_bufs++] = p;
    return p;
}


/* An owned fp32 buffer of n floats, counted in weight_bytes. */
static float *
ld_floats(ld_ctx *L, uint64_t n)
{
    float *p = ld_keep(L, (size_t) n * sizeof(float));

    if (p != NULL) {
        L->m->weight_bytes += (size_t) n * sizeof(float);
    }
    return p;
}


/* --- tensors --- */

/* One progress line: tensors and bytes done / total. */
static void
ld_line(ld_ctx *L, const char *what)
{
    L->t_line = pic_now_ns();
    fprintf(stderr, "pic_model_load: %s %u/%u tensors, %llu/%llu bytes "
            "(%.0f%%, %.1f s)\n", what, L->n_done, L->n_tensors,
            (unsigned long long) L->done, (unsigned long long) L->total,
            L->total ? 100.0 * (double) L->done / (double) L->total : 100.0,
            (double) (L->t_line - L->t0) * 1e-9);
}


/* bytes more of tensor t are in (t NULL: none); publish, print at most one
 * line per PIC_LOAD_LINE_MS, honour cancel and the test hold; -1 when the
 * load was cancelled. */
static int
ld_progress(ld_ctx *L, const pic_st_tensor *t, uint64_t bytes)
{
    pic_load_progress *p = L->prog;
    size_t             i;

    L->done += bytes;
    if (t != NULL) {
        i = (size_t) (t - pic_st_get(L->st, 0));
        L->got[i] += bytes;
        if (L->got[i] == t->nbytes && bytes > 0) {
            L->n_done++;
        }
    }
    if (p != NULL) {
        __atomic_store_n(&p->bytes_done, L->done, __ATOMIC_RELAXED);
        __atomic_store_n(&p->tensors_done, L->n_done, __ATOMIC_RELAXED);
        if (__atomic_load_n(&p->cancel, __ATOMIC_RELAXED)) {
            ld_err(L, "%s: load cancelled", L->m->dir);
            return -1;
        }
        if (p->hold != NULL && !L->held && L->n_done >= 1) {
            struct timespec ts = { 0, 10 * 1000000 };

            L->held = 1;
            ld_line(L, "held at");
            while (access(p->hold, F_OK) == 0
                   && !__atomic_load_n(&p->cancel, __ATOMIC_RELAXED))
            {
                nanosleep(&ts, NULL);
            }
        }
    }
    if (L->report
        && pic_now_ns() - L->t_line >= (int64_t) PIC_LOAD_LINE_MS * 1000000)
    {
        ld_line(L, "loading");
    }
    return 0;
}


static const pic_st_tensor *
ld_find(ld_ctx *L, const char *name)
{
    const pic_st_tensor *t = pic_st_find(L->st, name);

    if (t != NULL) {
        L->used[t - pic_st_get(L->st, 0)] = 1;
    }
    return t;
}


static void
ld_fmt_shape(char *buf, size_t len, int ndim, const int64_t *d)
{
    size_t o = 0;
    int    i;

    o += snprintf(buf + o, len - o, "[");
    for (i = 0; i < ndim && o < len; i++) {
        o += snprintf(buf + o, len - o, "%s%lld", i ? ", " : "",
                      (long long) d[i]);
    }
    if (o < len) {
        snprintf(buf + o, len - o, "]");
    }
}


/* Find name (required), check it has exactly the shape dims[0..ndim). */
static const pic_st_tensor *
ld_expect(ld_ctx *L, const char *name, int ndim, const int64_t *dims)
{
    const pic_st_tensor *t = ld_find(L, name);
    char                 want[96], got[96];
    int                  i, ok;

    if (t == NULL) {
        ld_err(L, "%s: missing tensor '%s'", L->m->dir, name);
        return NULL;
    }
    ok = t->ndim == ndim;
    for (i = 0; ok && i < ndim; i++) {
        ok = t->shape[i] == dims[i];
    }
    if (!ok) {
        ld_fmt_shape(want, sizeof(want), ndim, dims);
        ld_fmt_shape(got, sizeof(got), t->ndim, t->shape);
        ld_err(L, "%s: tensor '%s': shape %s, expected %s", t->file, name,
               got, want);
        return NULL;
    }
    if (t->dtype == PIC_ST_DTYPE_OTHER) {
        ld_err(L, "%s: tensor '%s': dtype %s is not supported (need F32, "
               "F16 or BF16)", t->file, name, t->dtype_name);
        return NULL;
    }
    return t;
}


/* Convert elements [first, first+n) of t into dst, counting progress. */
static int
ld_read(ld_ctx *L, const pic_st_tensor *t, uint64_t first, uint64_t n,
        float *dst)
{
    char e[512];

    if (pic_st_read_f32(t, first, n, dst, e, sizeof(e)) != 0) {
        ld_err(L, "%s", e);
        return -1;
    }
    /* the file bytes these elements took (block types: a share of them) */
    uint64_t numel = t->numel ? t->numel : 1;
    uint64_t b = (uint64_t) ((unsigned __int128) (first + n) * t->nbytes / numel
                             - (unsigned __int128) first * t->nbytes / numel);

    return ld_progress(L, t, b);
}


/* The tensor prefix+name with shape (d0[, d1[, d2]]) as a new fp32 buffer. */
static float *
ld_tensor(ld_ctx *L, const char *name, int ndim, int64_t d0, int64_t d1,
          int64_t d2)
{
    const pic_st_tensor *t;
    int64_t              dims[3] = { d0, d1, d2 };
    float               *p;

    t = ld_expect(L, name, ndim, dims);
    if (t == NULL) {
        return NULL;
    }
    p = ld_floats(L, t->numel);
    if (p == NULL || ld_read(L, t, 0, t->numel, p) != 0) {
        return NULL;
    }
    return p;
}


/* name = prefix + "layers.<i>." + fmt ... */
static const char *
ld_name(ld_ctx *L, char *buf, size_t len, int layer, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (layer >= 0) {
        n = snprintf(buf, len, "%slayers.%d.", L->prefix, layer);
    } else {
        n = snprintf(buf, len, "%s", L->prefix);
    }
    va_start(ap, fmt);
    vsnprintf(buf + n, len - (size_t) n, fmt, ap);
    va_end(ap);
    return buf;
}


/* --- compact matrices --- */

/* A new matrix (rows, cols) in the load's format; Q8 needs cols % 32 == 0,
 * another width falls back to bf16 (no released shape does). */
static int
ld_wmat_alloc(ld_ctx *L, int64_t rows, int64_t cols, pic_wmat *w)
{
    uint64_t  n = (uint64_t) rows * (uint64_t) cols;
    pic_wtype t = L->wt;
    void     *d;

    if (rows <= 0 || cols <= 0 || rows > INT32_MAX || cols > INT32_MAX) {
        ld_err(L, "%s: matrix (%lld, %lld) out of range", L->m->dir,
               (long long) rows, (long long) cols);
        return -1;
    }
    if (t == PIC_WTYPE_Q8 && cols % PIC_Q8_BLOCK != 0) {
        t = PIC_WTYPE_BF16;
    }
    memset(w, 0, sizeof(*w));
    w->type = t;
    w->xbf16 = t == PIC_WTYPE_BF16 && L->xbf16;
    w->rows = (int) rows;
    w->cols = (int) cols;
    if (t == PIC_WTYPE_F32) {
        d = ld_floats(L, n);
        w->data = d;
        return d ? 0 : -1;
    }
    if (t == PIC_WTYPE_BF16) {
        d = ld_keep(L, (size_t) n * 2);
        w->data = d;
    } else {
        d = ld_keep(L, (size_t) n);
        w->data = d;
        w->scale = d ? ld_keep(L, (size_t) (n / PIC_Q8_BLOCK) * 2) : NULL;
        d = w->scale ? d : NULL;
    }
    if (d != NULL) {
        L->m->weight_bytes += pic_wmat_bytes(w);
    }
    return d ? 0 : -1;
}


/* Elements [first, first+n) of t into w at element offset at, converted in
 * chunks (Q8: first, n and at are whole rows, so whole blocks). */
static int
ld_wread(ld_ctx *L, const pic_st_tensor *t, uint64_t first, uint64_t n,
         const pic_wmat *w, uint64_t at)
{
    uint64_t done, k;

    if (w->type == PIC_WTYPE_F32) {
        return ld_read(L, t, first, n, (float *) w->data + at);
    }
    for (done = 0; done < n; done += k) {
        k = n - done < LD_CHUNK ? n - done : LD_CHUNK;
        if (ld_read(L, t, first + done, k, L->chunk) != 0) {
            return -1;
        }
        if (w->type == PIC_WTYPE_BF16) {
            pic_bf16_from_f32((uint16_t *) w->data + at + done, L->chunk, k);
        } else {
            pic_q8_from_f32((int8_t *) w->data + at + done,
                            (uint16_t *) w->scale + (at + done) / PIC_Q8_BLOCK,
                            L->chunk, k);
        }
    }
    return 0;
}


/* The 2-D tensor prefix+name with shape (rows, cols) as a matrix. */
static int
ld_wtensor(ld_ctx *L, const char *name, int64_t rows, int64_t cols,
           pic_wmat *w)
{
    const pic_st_tensor *t;
    int64_t              dims[2] = { rows, cols };

    t = ld_expect(L, name, 2, dims);
    if (t == NULL || ld_wmat_alloc(L, rows, cols, w) != 0) {
        return -1;
    }
    return ld_wread(L, t, 0, t->numel, w, 0);
}


/* --- layers --- */

/* Qwen3.5 layout: in_proj_qkv / z / b / a as stored. */
static int
ld_gdn_qwen35(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config *c = &L->m->cfg;
    int64_t           H = c->hidden, Hv = c->lin_v_heads;
    int64_t           kd = (int64_t) c->lin_k_heads * c->lin_k_dim;
    int64_t           vd = Hv * c->lin_v_dim;
    char              n[512];

    if (ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                   "linear_attn.in_proj_qkv.weight"), 2 * kd + vd, H,
                   &lw->in_qkv) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                      "linear_attn.in_proj_z.weight"), vd, H,
                      &lw->in_z) != 0)
    {
        return -1;
    }
    lw->in_b = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                         "linear_attn.in_proj_b.weight"), 2, Hv, H, 0);
    if (lw->in_b == NULL) {
        return -1;
    }
    lw->in_a = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                         "linear_attn.in_proj_a.weight"), 2, Hv, H, 0);
    return lw->in_a ? 0 : -1;
}


/*
 * Qwen3-Next layout, grouped by key head g (r = Hv/Hk value heads each):
 *   in_proj_qkvz block g = [q_g (dk) | k_g (dk) | v (r*dv) | z (r*dv)] rows
 *   in_proj_ba   block g = [b (r) | a (r)] rows
 * unpacked row by row into in_qkv [q all | k all | v all], in_z, in_b, in_a.
 */
static int
ld_gdn_qwen3next(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config    *c = &L->m->cfg;
    const pic_st_tensor *qkvz, *ba;
    int64_t              H = c->hidden, Hk = c->lin_k_heads;
    int64_t              Hv = c->lin_v_heads, dk = c->lin_k_dim;
    int64_t              dv = c->lin_v_dim, r = Hv / Hk;
    int64_t              blk = 2 * dk + 2 * r * dv, g, dims[2];
    char                 n[512];

    dims[0] = Hk * blk;
    dims[1] = H;
    qkvz = ld_expect(L, ld_name(L, n, sizeof(n), i,
                     "linear_attn.in_proj_qkvz.weight"), 2, dims);
    if (qkvz == NULL) {
        return -1;
    }
    dims[0] = 2 * Hv;
    ba = ld_expect(L, ld_name(L, n, sizeof(n), i,
                   "linear_attn.in_proj_ba.weight"), 2, dims);
    if (ba == NULL) {
        return -1;
    }

    if (ld_wmat_alloc(L, 2 * Hk * dk + Hv * dv, H, &lw->in_qkv) != 0
        || ld_wmat_alloc(L, Hv * dv, H, &lw->in_z) != 0)
    {
        return -1;
    }
    lw->in_b = ld_floats(L, (uint64_t) Hv * H);
    lw->in_a = ld_floats(L, (uint64_t) Hv * H);
    if (!lw->in_b || !lw->in_a) {
        return -1;
    }

    for (g = 0; g < Hk; g++) {
        int64_t src = g * blk;              /* first source row of block g */

        if (ld_wread(L, qkvz, (src) * H, dk * H, &lw->in_qkv,
                     (g * dk) * H) != 0
            || ld_wread(L, qkvz, (src + dk) * H, dk * H, &lw->in_qkv,
                        (Hk * dk + g * dk) * H) != 0
            || ld_wread(L, qkvz, (src + 2 * dk) * H, r * dv * H, &lw->in_qkv,
                        (2 * Hk * dk + g * r * dv) * H) != 0
            || ld_wread(L, qkvz, (src + 2 * dk + r * dv) * H, r * dv * H,
                        &lw->in_z, (g * r * dv) * H) != 0
            || ld_read(L, ba, (g * 2 * r) * H, r * H,
                       lw->in_b + (g * r) * H) != 0
            || ld_read(L, ba, (g * 2 * r + r) * H, r * H,
                       lw->in_a + (g * r) * H) != 0)
        {
            return -1;
        }
    }
    return 0;
}


static int
ld_gdn(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config *c = &L->m->cfg;
    int64_t           H = c->hidden, Hv = c->lin_v_heads;
    int64_t           C = pic_config_conv_ch(c);
    char              n[512];
    int               rc;

    /* the tensors present pick the layout; the config's family the default */
    if (pic_st_find(L->st, ld_name(L, n, sizeof(n), i,
                    "linear_attn.in_proj_qkv.weight")) != NULL)
    {
        rc = ld_gdn_qwen35(L, lw, i);
    } else if (pic_st_find(L->st, ld_name(L, n, sizeof(n), i,
                           "linear_attn.in_proj_qkvz.weight")) != NULL)
    {
        rc = ld_gdn_qwen3next(L, lw, i);
    } else if (c->arch == PIC_ARCH_QWEN3_NEXT) {
        rc = ld_gdn_qwen3next(L, lw, i);    /* reports the missing tensor */
    } else {
        rc = ld_gdn_qwen35(L, lw, i);
    }
    if (rc != 0) {
        return -1;
    }

    lw->conv_w = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                           "linear_attn.conv1d.weight"), 3, C, 1,
                           c->conv_kernel);
    if (lw->conv_w == NULL) {
        return -1;
    }
    lw->dt_bias = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                            "linear_attn.dt_bias"), 1, Hv, 0, 0);
    if (lw->dt_bias == NULL) {
        return -1;
    }
    lw->A_log = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                          "linear_attn.A_log"), 1, Hv, 0, 0);
    if (lw->A_log == NULL) {
        return -1;
    }
    lw->gdn_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                             "linear_attn.norm.weight"), 1, c->lin_v_dim,
                             0, 0);
    if (lw->gdn_norm == NULL) {
        return -1;
    }
    return ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                      "linear_attn.out_proj.weight"), H, Hv * c->lin_v_dim,
                      &lw->out_proj);
}


/* Attention in the config's variant: q_proj twice as tall with the gate,
 * per-head q/k norms, q/k/v and o biases only where the flags say. */
static int
ld_attn(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config *c = &L->m->cfg;
    int64_t           H = c->hidden, hd = c->head_dim;
    int64_t           q = (int64_t) c->n_q_heads * hd;
    int64_t           kv = (int64_t) c->n_kv_heads * hd;
    char              n[512];

    if (ld_wtensor(L, ld_name(L, n, sizeof(n), i, "self_attn.q_proj.weight"),
                   c->attn_gate ? 2 * q : q, H, &lw->wq) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                      "self_attn.k_proj.weight"), kv, H, &lw->wk) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                      "self_attn.v_proj.weight"), kv, H, &lw->wv) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                      "self_attn.o_proj.weight"), H, q, &lw->wo) != 0)
    {
        return -1;
    }
    if (c->attn_qk_norm
        && (!(lw->q_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                     "self_attn.q_norm.weight"), 1, hd, 0, 0))
            || !(lw->k_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                        "self_attn.k_norm.weight"), 1, hd, 0, 0))))
    {
        return -1;
    }
    if (c->attn_qkv_bias
        && (!(lw->bq = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                 "self_attn.q_proj.bias"), 1, q, 0, 0))
            || !(lw->bk = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                    "self_attn.k_proj.bias"), 1, kv, 0, 0))
            || !(lw->bv = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                    "self_attn.v_proj.bias"), 1, kv, 0, 0))))
    {
        return -1;
    }
    if (c->attn_o_bias
        && !(lw->bo = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                "self_attn.o_proj.bias"), 1, H, 0, 0)))
    {
        return -1;
    }
    return 0;
}


/* The 2-D tensor name (rows, cols) as a matrix whose row r is the file's
 * row src[r]. */
static int
ld_wtensor_rows(ld_ctx *L, const char *name, int64_t rows, int64_t cols,
                const int *src, pic_wmat *w)
{
    const pic_st_tensor *t;
    int64_t              dims[2] = { rows, cols };
    float               *row;

    t = ld_expect(L, name, 2, dims);
    if (t == NULL || ld_wmat_alloc(L, rows, cols, w) != 0) {
        return -1;
    }
    row = malloc((size_t) cols * sizeof(float));
    if (row == NULL) {
        ld_err(L, "out of memory");
        return -1;
    }
    for (int64_t r = 0; r < rows; r++) {
        uint64_t at = (uint64_t) (r * cols);

        if (ld_read(L, t, (uint64_t) src[r] * (uint64_t) cols, (uint64_t) cols, row) != 0) {
            free(row);
            return -1;
        }
        if (w->type == PIC_WTYPE_F32) {
            memcpy((float *) w->data + at, row, (size_t) cols * sizeof(float));
        } else if (w->type == PIC_WTYPE_BF16) {
            pic_bf16_from_f32((uint16_t *) w->data + at, row, (size_t) cols);
        } else {
            pic_q8_from_f32((int8_t *) w->data + at,
                            (uint16_t *) w->scale + at / PIC_Q8_BLOCK, row, (size_t) cols);
        }
    }
    free(row);
    return 0;
}


/* Rotary dim j of the engine's NeoX order as the file's dim: interleaved
 * pairs (2i, 2i+1) de-interleaved into halves, else as is. */
static int
ld_rope_src(const pic_config *c, int j)
{
    int half = c->qk_rope_dim / 2;

    if (!c->mla_interleave) {
        return j;
    }
    return j < half ? 2 * j : 2 * (j - half) + 1;
}


/* Multi-head latent attention (MODEL.md §4.2): q rows per head moved to
 * [q_pe | q_nope], kv_a rows to [k_pe | c_KV], rotary dims in NeoX order
 * (a row permutation: every format rounds the file's rows as they are). */
static int
ld_mla(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config *c = &L->m->cfg;
    int64_t           H = c->hidden, Hq = c->n_q_heads, r = c->kv_lora_rank;
    int64_t           dn = c->qk_nope_dim, dr = c->qk_rope_dim, dv = c->v_head_dim;
    int64_t           hq = dn + dr, qrows = Hq * hq;
    int64_t           qin = c->q_lora_rank > 0 ? c->q_lora_rank : H;
    int              *src = malloc((size_t) (qrows + dr + r) * sizeof(int));
    char              n[512];
    int               rc = -1;

    if (src == NULL) {
        ld_err(L, "out of memory");
        goto done;
    }
    for (int64_t h = 0; h < Hq; h++) {
        for (int64_t j = 0; j < hq; j++) {
            int64_t o = h * hq + j;

            src[o] = (int) (j < dr ? h * hq + dn + ld_rope_src(c, (int) j)
                                   : h * hq + (j - dr));
        }
    }
    if (c->q_lora_rank > 0
        && (ld_wtensor(L, ld_name(L, n, sizeof(n), i, "self_attn.q_a_proj.weight"),
                       qin, H, &lw->q_a) != 0
            || !(lw->q_a_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                          "self_attn.q_a_layernorm.weight"), 1, qin,
                                          0, 0))))
    {
        goto done;
    }
    if (ld_wtensor_rows(L, ld_name(L, n, sizeof(n), i, c->q_lora_rank > 0
                                   ? "self_attn.q_b_proj.weight"
                                   : "self_attn.q_proj.weight"),
                        qrows, qin, src, &lw->q_b) != 0)
    {
        goto done;
    }
    for (int64_t j = 0; j < dr + r; j++) {
        src[j] = (int) (j < dr ? r + ld_rope_src(c, (int) j) : j - dr);
    }
    if (ld_wtensor_rows(L, ld_name(L, n, sizeof(n), i,
                        "self_attn.kv_a_proj_with_mqa.weight"), dr + r, H, src,
                        &lw->kv_a) != 0
        || !(lw->kv_a_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                       "self_attn.kv_a_layernorm.weight"), 1, r, 0, 0))
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i, "self_attn.kv_b_proj.weight"),
                      Hq * (dn + dv), r, &lw->kv_b) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i, "self_attn.o_proj.weight"),
                      H, Hq * dv, &lw->wo) != 0)
    {
        goto done;
    }
    rc = 0;
done:
    free(src);
    return rc;
}


static int
ld_mlp(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config *c = &L->m->cfg;
    int64_t           H = c->hidden, I = c->intermediate;
    char              n[512];

    if (ld_wtensor(L, ld_name(L, n, sizeof(n), i, "mlp.gate_proj.weight"),
                   I, H, &lw->mlp_gate) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i, "mlp.up_proj.weight"),
                      I, H, &lw->mlp_up) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i, "mlp.down_proj.weight"),
                      H, I, &lw->mlp_down) != 0)
    {
        return -1;
    }
    return 0;
}


/* Experts, fused (mlp.experts.gate_up_proj / down_proj) or one by one
 * (mlp.experts.<e>.{gate,up,down}_proj.weight), into two blocks. */
static int
ld_experts(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config    *c = &L->m->cfg;
    const pic_st_tensor *t;
    int64_t              E = c->n_experts, Ie = c->moe_intermediate;
    int64_t              H = c->hidden, e, dims[3];
    pic_wmat             gu, down;          /* (E*2*Ie, H), (E*H, Ie) */
    char                 n[512];

    lw->experts = ld_keep(L, (size_t) E * sizeof(*lw->experts));
    if (lw->experts == NULL || ld_wmat_alloc(L, E * 2 * Ie, H, &gu) != 0
        || ld_wmat_alloc(L, E * H, Ie, &down) != 0)
    {
        return -1;
    }

    if (pic_st_find(L->st, ld_name(L, n, sizeof(n), i,
                    "mlp.experts.gate_up_proj")) != NULL)
    {
        dims[0] = E;
        dims[1] = 2 * Ie;
        dims[2] = H;
        t = ld_expect(L, n, 3, dims);
        if (t == NULL || ld_wread(L, t, 0, t->numel, &gu, 0) != 0) {
            return -1;
        }
        dims[1] = H;
        dims[2] = Ie;
        t = ld_expect(L, ld_name(L, n, sizeof(n), i, "mlp.experts.down_proj"),
                      3, dims);
        if (t == NULL || ld_wread(L, t, 0, t->numel, &down, 0) != 0) {
            return -1;
        }
    } else {
        for (e = 0; e < E; e++) {
            uint64_t g = (uint64_t) (e * 2 * Ie * H);  /* gate rows of e */

            dims[0] = Ie;
            dims[1] = H;
            t = ld_expect(L, ld_name(L, n, sizeof(n), i,
                          "mlp.experts.%lld.gate_proj.weight", (long long) e),
                          2, dims);
            if (t == NULL || ld_wread(L, t, 0, t->numel, &gu, g) != 0) {
                return -1;
            }
            t = ld_expect(L, ld_name(L, n, sizeof(n), i,
                          "mlp.experts.%lld.up_proj.weight", (long long) e),
                          2, dims);
            if (t == NULL
                || ld_wread(L, t, 0, t->numel, &gu, g + Ie * H) != 0)
            {
                return -1;
            }
            dims[0] = H;
            dims[1] = Ie;
            t = ld_expect(L, ld_name(L, n, sizeof(n), i,
                          "mlp.experts.%lld.down_proj.weight", (long long) e),
                          2, dims);
            if (t == NULL
                || ld_wread(L, t, 0, t->numel, &down, e * H * Ie) != 0)
            {
                return -1;
            }
        }
    }

    for (e = 0; e < E; e++) {
        lw->experts[e].gate = pic_wmat_view(&gu, (int) (e * 2 * Ie), (int) Ie);
        lw->experts[e].up = pic_wmat_view(&gu, (int) (e * 2 * Ie + Ie),
                                          (int) Ie);
        lw->experts[e].down = pic_wmat_view(&down, (int) (e * H), (int) H);
    }
    return 0;
}


static int
ld_moe(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config *c = &L->m->cfg;
    int64_t           H = c->hidden, Is = c->shared_intermediate;
    char              n[512];

    lw->router = ld_tensor(L, ld_name(L, n, sizeof(n), i, "mlp.gate.weight"),
                           2, c->n_experts, H, 0);
    if (lw->router == NULL || ld_experts(L, lw, i) != 0) {
        return -1;
    }
    if (c->moe_sigmoid
        && !(lw->router_bias = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                         "mlp.gate.e_score_correction_bias"), 1,
                                         c->n_experts, 0, 0)))
    {
        return -1;
    }
    if (Is == 0) {
        return 0;
    }
    if (c->mla) {               /* DeepSeek: n_shared experts as one, ungated */
        return ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                          "mlp.shared_experts.gate_proj.weight"), Is, H,
                          &lw->shared.gate) != 0
               || ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                             "mlp.shared_experts.up_proj.weight"), Is, H,
                             &lw->shared.up) != 0
               || ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                             "mlp.shared_experts.down_proj.weight"), H, Is,
                             &lw->shared.down) != 0 ? -1 : 0;
    }
    if (ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                   "mlp.shared_expert.gate_proj.weight"), Is, H,
                   &lw->shared.gate) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                      "mlp.shared_expert.up_proj.weight"), Is, H,
                      &lw->shared.up) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i,
                      "mlp.shared_expert.down_proj.weight"), H, Is,
                      &lw->shared.down) != 0
        || !(lw->shared_gate = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                               "mlp.shared_expert_gate.weight"), 2, 1, H,
                               0)))
    {
        return -1;
    }
    return 0;
}


static int ld_layer_mamba_hybrid(ld_ctx *L, int i);

static int
ld_layer(ld_ctx *L, int i)
{
    const pic_config  *c = &L->m->cfg;
    pic_layer_weights *lw = &L->m->w.layers[i];
    char               n[512];

    if (c->arch == PIC_ARCH_BAMBA || c->arch == PIC_ARCH_GRANITEMOEHYBRID) {
        return ld_layer_mamba_hybrid(L, i);
    }
    if (!(lw->input_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                     "input_layernorm.weight"), 1, c->hidden,
                                     0, 0))
        || !(lw->post_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                       "post_attention_layernorm.weight"), 1,
                                       c->hidden, 0, 0)))
    {
        return -1;
    }
    if ((c->layer_type[i] == PIC_LAYER_LINEAR ? ld_gdn(L, lw, i)
         : c->mla ? ld_mla(L, lw, i) : ld_attn(L, lw, i)) != 0)
    {
        return -1;
    }
    return c->layer_is_moe[i] ? ld_moe(L, lw, i) : ld_mlp(L, lw, i);
}


/* --- Mamba2 hybrids (Bamba, Granite 4.0-H) --- */

/* A Mamba2 mixer: in_proj (I + C + Hm, H) read whole and viewed as its
 * z, xBC and dt rows; conv1d (C, 1, K) (+ bias); dt_bias, A_log (kept as
 * A = −exp(A_log), what the scan multiplies by), D, the gated norm (I),
 * out_proj (H, I). */
static int
ld_mamba2(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config    *c = &L->m->cfg;
    const pic_st_tensor *t;
    int64_t              H = c->hidden, Hm = c->ssm_heads;
    int64_t              I = Hm * c->ssm_head_dim, C = pic_config_conv_ch(c);
    int64_t              dims[2] = { I + C + Hm, H };
    pic_wmat             in;
    char                 n[512];

    t = ld_expect(L, ld_name(L, n, sizeof(n), i, "mamba.in_proj.weight"), 2, dims);
    if (t == NULL || ld_wmat_alloc(L, I + C + Hm, H, &in) != 0
        || ld_wread(L, t, 0, t->numel, &in, 0) != 0)
    {
        return -1;
    }
    lw->ssm_in_z = pic_wmat_view(&in, 0, (int) I);
    lw->ssm_in_xbc = pic_wmat_view(&in, (int) I, (int) C);
    lw->ssm_in_dt = pic_wmat_view(&in, (int) (I + C), (int) Hm);
    if (!(lw->ssm_conv_w = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                     "mamba.conv1d.weight"), 3, C, 1, c->conv_kernel))
        || (c->ssm_conv_bias
            && !(lw->ssm_conv_b = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                            "mamba.conv1d.bias"), 1, C, 0, 0)))
        || !(lw->ssm_dt_bias = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                         "mamba.dt_bias"), 1, Hm, 0, 0))
        || !(lw->ssm_A = ld_tensor(L, ld_name(L, n, sizeof(n), i, "mamba.A_log"), 1,
                                   Hm, 0, 0))
        || !(lw->ssm_D = ld_tensor(L, ld_name(L, n, sizeof(n), i, "mamba.D"), 1, Hm,
                                   0, 0))
        || !(lw->ssm_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                      "mamba.norm.weight"), 1, I, 0, 0)))
    {
        return -1;
    }
    for (int64_t h = 0; h < Hm; h++) {
        lw->ssm_A[h] = -expf(lw->ssm_A[h]);
    }
    return ld_wtensor(L, ld_name(L, n, sizeof(n), i, "mamba.out_proj.weight"), H, I,
                      &lw->ssm_out);
}


/* A SwiGLU MLP under prefix (gate_proj / up_proj / down_proj). */
static int
ld_mlp_at(ld_ctx *L, pic_layer_weights *lw, int i, const char *prefix)
{
    const pic_config *c = &L->m->cfg;
    int64_t           H = c->hidden, I = c->intermediate;
    char              n[512];

    if (ld_wtensor(L, ld_name(L, n, sizeof(n), i, "%s.gate_proj.weight", prefix),
                   I, H, &lw->mlp_gate) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i, "%s.up_proj.weight", prefix),
                      I, H, &lw->mlp_up) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i, "%s.down_proj.weight", prefix),
                      H, I, &lw->mlp_down) != 0)
    {
        return -1;
    }
    return 0;
}


/* Granite's FFN: shared_mlp (input_linear (2·Is, H) = [gate | up],
 * output_linear (H, Is)) as the dense MLP, or as the shared expert beside
 * block_sparse_moe (router.layer (E, H), input_linear (E, 2·Ie, H) gate
 * rows first, output_linear (E, H, Ie)). */
static int
ld_granite_ffn(ld_ctx *L, pic_layer_weights *lw, int i)
{
    const pic_config    *c = &L->m->cfg;
    const pic_st_tensor *t;
    int                  moe = c->layer_is_moe[i];
    int64_t              H = c->hidden, E = c->n_experts, Ie = c->moe_intermediate;
    int64_t              Is = moe ? c->shared_intermediate : c->intermediate, dims[3];
    pic_wmat             gu, down, *g = moe ? &lw->shared.gate : &lw->mlp_gate;
    char                 n[512];

    if (ld_wtensor(L, ld_name(L, n, sizeof(n), i, "shared_mlp.input_linear.weight"),
                   2 * Is, H, &gu) != 0
        || ld_wtensor(L, ld_name(L, n, sizeof(n), i, "shared_mlp.output_linear.weight"),
                      H, Is, moe ? &lw->shared.down : &lw->mlp_down) != 0)
    {
        return -1;
    }
    *g = pic_wmat_view(&gu, 0, (int) Is);
    *(moe ? &lw->shared.up : &lw->mlp_up) = pic_wmat_view(&gu, (int) Is, (int) Is);
    if (!moe) {
        return 0;
    }
    lw->router = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                           "block_sparse_moe.router.layer.weight"), 2, E, H, 0);
    lw->experts = ld_keep(L, (size_t) E * sizeof(*lw->experts));
    if (lw->router == NULL || lw->experts == NULL
        || ld_wmat_alloc(L, E * 2 * Ie, H, &gu) != 0
        || ld_wmat_alloc(L, E * H, Ie, &down) != 0)
    {
        return -1;
    }
    dims[0] = E;
    dims[1] = 2 * Ie;
    dims[2] = H;
    t = ld_expect(L, ld_name(L, n, sizeof(n), i, "block_sparse_moe.input_linear.weight"),
                  3, dims);
    if (t == NULL || ld_wread(L, t, 0, t->numel, &gu, 0) != 0) {
        return -1;
    }
    dims[1] = H;
    dims[2] = Ie;
    t = ld_expect(L, ld_name(L, n, sizeof(n), i,
                  "block_sparse_moe.output_linear.weight"), 3, dims);
    if (t == NULL || ld_wread(L, t, 0, t->numel, &down, 0) != 0) {
        return -1;
    }
    for (int64_t e = 0; e < E; e++) {
        lw->experts[e].gate = pic_wmat_view(&gu, (int) (e * 2 * Ie), (int) Ie);
        lw->experts[e].up = pic_wmat_view(&gu, (int) (e * 2 * Ie + Ie), (int) Ie);
        lw->experts[e].down = pic_wmat_view(&down, (int) (e * H), (int) H);
    }
    return 0;
}


/* A Bamba or Granite 4.0-H layer: input_layernorm, the mixer (mamba.* or
 * self_attn.*), the FFN's norm (pre_ff_layernorm / post_attention_layernorm)
 * and FFN (feed_forward.* / shared_mlp + block_sparse_moe). */
static int
ld_layer_mamba_hybrid(ld_ctx *L, int i)
{
    const pic_config  *c = &L->m->cfg;
    pic_layer_weights *lw = &L->m->w.layers[i];
    int                bamba = c->arch == PIC_ARCH_BAMBA;
    char               n[512];

    if (!(lw->input_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                     "input_layernorm.weight"), 1, c->hidden, 0, 0))
        || !(lw->post_norm = ld_tensor(L, ld_name(L, n, sizeof(n), i,
                                       bamba ? "pre_ff_layernorm.weight"
                                             : "post_attention_layernorm.weight"),
                                       1, c->hidden, 0, 0))
        || (c->layer_type[i] == PIC_LAYER_MAMBA2 ? ld_mamba2(L, lw, i)
                                                 : ld_attn(L, lw, i)) != 0)
    {
        return -1;
    }
    return bamba ? ld_mlp_at(L, lw, i, "feed_forward") : ld_granite_ffn(L, lw, i);
}


/* --- files, fingerprint --- */

/* Read dir/name whole; NULL with *len 0 when absent (err set if present
 * but unreadable or larger than max: *bad = 1). */
static char *
ld_slurp(ld_ctx *L, const char *dir, const char *name, size_t max,
         size_t *len, int *bad)
{
    struct stat  sb;
    FILE        *fp;
    char        *buf, path[4096 + 64];

    *len = 0;
    *bad = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "rb");
    if (fp == NULL) {
        return NULL;
    }
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)
        || sb.st_size < 0 || (uint64_t) sb.st_size > max)
    {
        ld_err(L, "%s: not a regular file of at most %zu bytes", path, max);
        fclose(fp);
        *bad = 1;
        return NULL;
    }
    buf = malloc((size_t) sb.st_size + 1);
    if (buf == NULL
        || fread(buf, 1, (size_t) sb.st_size, fp) != (size_t) sb.st_size)
    {
        ld_err(L, "%s: read failed", path);
        free(buf);
        fclose(fp);
        *bad = 1;
        return NULL;
    }
    fclose(fp);
    buf[sb.st_size] = '\0';
    *len = (size_t) sb.st_size;
    return buf;
}


/* Hash a length-prefixed blob; mapped file bytes are hashed in 64 MB steps
 * and released behind the hash (pic_st_release), so the fingerprint never
 * makes the whole checkpoint resident. */
static void
ld_hash_blob(XXH3_state_t *h, const void *p, size_t len, int mapped)
{
    const size_t   step = (size_t) 64 << 20;
    const uint8_t *b = p;
    uint64_t       n = len;
    size_t         off, k;

    XXH3_64bits_update(h, &n, sizeof(n));
    for (off = 0; off < len; off += k) {
        k = len - off < step ? len - off : step;
        XXH3_64bits_update(h, b + off, k);
        if (mapped) {
            pic_st_release(b + off, k);
        }
    }
}


/* xxh3-64 over config.json, tokenizer.json and every safetensors file. */
static int
ld_fingerprint(ld_ctx *L, const char *config, size_t config_len,
               const char *tok, size_t tok_len)
{
    XXH3_state_t *h = XXH3_createState();
    size_t        i, nf, len;

    if (h == NULL) {
        ld_err(L, "out of memory");
        return -1;
    }
    XXH3_64bits_reset(h);
    ld_hash_blob(h, "pic-model-v1", 12, 0);
    ld_hash_blob(h, config, config_len, 0);
    ld_hash_blob(h, tok, tok_len, 0);
    nf = pic_st_file_count(L->st);
    for (i = 0; i < nf; i++) {
        const uint8_t *p = pic_st_file_bytes(L->st, i, &len);

        if (L->report && len > LD_PROGRESS_BYTES) {
            fprintf(stderr, "pic_model_load: hashing %s (%zu/%zu, %.2f GB)\n",
                    pic_st_file_path(L->st, i), i + 1, nf, len / 1e9);
        }
        ld_hash_blob(h, p, len, 1);
    }
    L->m->fingerprint = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return 0;
}


static int
ld_is_skipped(const char *name)
{
    return strncmp(name, "model.visual.", 13) == 0
           || strncmp(name, "mtp.", 4) == 0;
}


/* Warn (not fail) about text-model tensors nothing asked for: they mean the
 * config and the checkpoint disagree in a way the shapes did not show. */
static void
ld_warn_unused(ld_ctx *L)
{
    size_t i, n = pic_st_count(L->st), unused = 0;

    for (i = 0; i < n; i++) {
        const char *name = pic_st_get(L->st, i)->name;

        if (L->used[i] || ld_is_skipped(name)) {
            continue;
        }
        if (unused < 5) {
            fprintf(stderr, "pic_model_load: %s: warning: tensor '%s' is not "
                    "used\n", L->m->dir, name);
        }
        unused++;
    }
    if (unused > 5) {
        fprintf(stderr, "pic_model_load: %s: warning: %zu tensors unused in "
                "all\n", L->m->dir, unused);
    }
}


/* --- the loader --- */

int
pic_weights_parse(const char *s, pic_weights_format *f)
{
    static const char *names[] = { "auto", "f32", "bf16", "q8", "bf16dot" };

    for (int i = 0; i < 5; i++) {
        if (s != NULL && strcmp(s, names[i]) == 0) {
            *f = (pic_weights_format) i;
            return 0;
        }
    }
    return -1;
}


int
pic_weights_choose(const char *name, int host, pic_weights_format *f, char *err,
                   size_t errlen)
{
    const char *from = "--weights";

    if (name == NULL || name[0] == '\0') {
        name = getenv("PIC_WEIGHTS");
        from = "PIC_WEIGHTS";
    }
    if (name == NULL || name[0] == '\0') {
        *f = host ? PIC_WEIGHTS_AUTO : PIC_WEIGHTS_BF16;
        return 0;
    }
    if (pic_weights_parse(name, f) != 0) {
        snprintf(err, errlen, "%s=%s is not " PIC_WEIGHTS_NAMES, from, name);
        return -1;
    }
    return 0;
}


const char *
pic_model_weights_name(const pic_model *m)
{
    return m->xbf16 ? "bf16dot" : pic_wtype_name(m->wtype);
}

void
pic_model_dir_name(const char *dir, char *out, size_t n)
{
    const char *end = dir + strlen(dir), *base;

    while (end > dir + 1 && end[-1] == '/') {
        end--;
    }
    base = end;
    while (base > dir && base[-1] != '/') {
        base--;
    }
    /* a GGUF file is named without its extension, as llama.cpp names it */
    if (end - base > 5 && memcmp(end - 5, ".gguf", 5) == 0) {
        end -= 5;
    }
    snprintf(out, n, "%.*s", (int) (end - base), base);
}


/* auto: bf16 when every text-model matrix (ndim >= 2) is stored in bf16,
 * so that holding them as bf16 loses nothing; else f32. */
static pic_wtype
ld_pick_wtype(ld_ctx *L, pic_weights_format f)
{
    size_t i, n = pic_st_count(L->st);

    switch (f) {
    case PIC_WEIGHTS_F32:
        return PIC_WTYPE_F32;
    case PIC_WEIGHTS_BF16:
    case PIC_WEIGHTS_BF16DOT:
        return PIC_WTYPE_BF16;
    case PIC_WEIGHTS_Q8:
        return PIC_WTYPE_Q8;
    default:
        break;
    }
    for (i = 0; i < n; i++) {
        const pic_st_tensor *t = pic_st_get(L->st, i);

        if (ld_is_skipped(t->name)
            || (strncmp(t->name, L->prefix, strlen(L->prefix)) != 0
                && strcmp(t->name, "lm_head.weight") != 0))
        {
            continue;
        }
        if (t->ndim >= 2 && t->dtype != PIC_ST_DTYPE_BF16) {
            return PIC_WTYPE_F32;
        }
    }
    return PIC_WTYPE_BF16;
}


pic_model *
pic_model_load(const char *dir, char *err, size_t errlen)
{
    pic_weights_format f;
    char               why[128];

    if (pic_weights_choose(NULL, 1, &f, why, sizeof(why)) != 0) {
        fprintf(stderr, "pic_model_load: %s; using auto\n", why);
        f = PIC_WEIGHTS_AUTO;
    }
    return pic_model_load_as(dir, f, err, errlen);
}


pic_model *
pic_model_load_as(const char *dir, pic_weights_format f, char *err,
                  size_t errlen)
{
    return pic_model_load_progress(dir, f, NULL, err, errlen);
}


void
pic_load_progress_get(const pic_load_progress *p, pic_load_progress *out)
{
    memset(out, 0, sizeof(*out));
    out->bytes_total = __atomic_load_n(&p->bytes_total, __ATOMIC_RELAXED);
    out->tensors_total = __atomic_load_n(&p->tensors_total, __ATOMIC_RELAXED);
    out->bytes_done = __atomic_load_n(&p->bytes_done, __ATOMIC_RELAXED);
    out->tensors_done = __atomic_load_n(&p->tensors_done, __ATOMIC_RELAXED);
    out->phase = __atomic_load_n(&p->phase, __ATOMIC_RELAXED);
}


const char *
pic_load_phase_name(int phase)
{
    static const char *const names[] = { "opening", "hashing", "tensors", "setup" };

    return phase >= 0 && phase < 4 ? names[phase] : "unknown";
}


pic_model *
pic_model_load_progress(const char *dir, pic_weights_format f,
                        pic_load_progress *p, char *err, size_t errlen)
{
    const pic_st_tensor *t;
    pic_config          *c;
    pic_model           *m;
    ld_ctx               L;
    uint64_t             file_bytes;
    size_t               config_len, tok_len, i, n, len;
    char                *config = NULL, *tok = NULL, name[512], e[1024];
    char                 path[4096 + 64];
    int                  bad, li, big, gguf = 0;
    pic_gguf_ckpt        gc;

    memset(&L, 0, sizeof(L));
    memset(&gc, 0, sizeof(gc));
    L.prog = p;
    L.t0 = pic_now_ns();
    L.err = err;
    L.errlen = errlen;
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    m = calloc(1, sizeof(*m));
    L.store = calloc(1, sizeof(*L.store));
    if (m == NULL || L.store == NULL) {
        free(m);
        free(L.store);
        ld_err(&L, "out of memory");
        return NULL;
    }
    m->priv = L.store;
    L.m = m;
    c = &m->cfg;
    if (strlen(dir) >= sizeof(m->dir)) {
        ld_err(&L, "directory path too long");
        goto fail;
    }
    snprintf(m->dir, sizeof(m->dir), "%s", dir);

    if (pic_gguf_is_file(dir)) {
        /* a GGUF file: the same three texts and tensors, made from it */
        if (pic_gguf_ckpt_open(dir, &gc, e, sizeof(e)) != 0) {
            ld_err(&L, "%s", e);
            goto fail;
        }
        config = gc.config;
        config_len = gc.config_len;
        tok = gc.tokenizer;
        tok_len = gc.tokenizer_len;
        gc.config = gc.tokenizer = NULL;
        L.st = gc.st;
        gguf = 1;
        snprintf(path, sizeof(path), "%s", dir);
    } else {
        config = ld_slurp(&L, dir, "config.json", LD_MAX_CONFIG, &config_len, &bad);
        if (config == NULL) {
            if (!bad) {
                ld_err(&L, "%s/config.json: cannot open", dir);
            }
            goto fail;
        }
        snprintf(path, sizeof(path), "%s/config.json", dir);
        tok = ld_slurp(&L, dir, "tokenizer.json", LD_MAX_TOKENIZER, &tok_len, &bad);
        if (bad) {
            goto fail;
        }
    }
    if (pic_config_parse(c, config, config_len, path, e, sizeof(e)) != 0) {
        ld_err(&L, "%s", e);
        goto fail;
    }
    if (tok != NULL && pic_config_add_tokenizer_eos(c, tok, tok_len) < 0) {
        ld_err(&L, "%s: tokenizer.json: not JSON", dir);
        goto fail;
    }

    /* the weights' files */
    if (!gguf) {
        L.st = pic_st_open_dir(dir, e, sizeof(e));
    }
    if (L.st == NULL) {
        ld_err(&L, "%s", e);
        goto fail;
    }
    n = pic_st_count(L.st);
    L.used = calloc(n ? n : 1, 1);
    L.got = calloc(n ? n : 1, sizeof(*L.got));
    if (L.used == NULL || L.got == NULL) {
        ld_err(&L, "out of memory");
        goto fail;
    }
    file_bytes = 0;
    for (i = 0; i < pic_st_file_count(L.st); i++) {
        pic_st_file_bytes(L.st, i, &len);
        file_bytes += len;
    }
    big = file_bytes > LD_PROGRESS_BYTES;
    L.report = big || p != NULL;

    /* Qwen3.5 wrappers nest the text model under model.language_model. */
    L.prefix = pic_st_find(L.st, "model.language_model.embed_tokens.weight")
               ? "model.language_model." : "model.";
    for (i = 0; i < n; i++) {
        t = pic_st_get(L.st, i);
        if (!ld_is_skipped(t->name)
            && (strncmp(t->name, L.prefix, strlen(L.prefix)) == 0
                || strcmp(t->name, "lm_head.weight") == 0))
        {
            L.total += t->nbytes;
            L.n_tensors++;
        }
    }
    if (p != NULL) {
        __atomic_store_n(&p->bytes_total, L.total, __ATOMIC_RELAXED);
        __atomic_store_n(&p->tensors_total, L.n_tensors, __ATOMIC_RELAXED);
    }
    if (L.report) {
        fprintf(stderr, "pic_model_load: %s: %s, %d layers, %zu files, "
                "%u tensors, %llu bytes of tensors\n", dir, c->model_type,
                c->n_layers, pic_st_file_count(L.st), L.n_tensors,
                (unsigned long long) L.total);
        L.t_line = pic_now_ns();
    }
    if (p != NULL) {
        __atomic_store_n(&p->phase, PIC_LOAD_HASHING, __ATOMIC_RELAXED);
    }
    if (ld_fingerprint(&L, config, config_len, tok, tok_len) != 0) {
        goto fail;
    }
    if (p != NULL) {
        __atomic_store_n(&p->phase, PIC_LOAD_TENSORS, __ATOMIC_RELAXED);
    }
    L.wt = ld_pick_wtype(&L, f);
    L.xbf16 = f == PIC_WEIGHTS_BF16DOT;
    m->wtype = L.wt;
    m->xbf16 = L.xbf16;
    if (L.wt != ld_pick_wtype(&L, PIC_WEIGHTS_AUTO) || L.xbf16) {
        /* a lossy format is another model for cached entries (DESIGN §4.1) */
        uint64_t mix[2] = { m->fingerprint, (uint64_t) L.wt | (uint64_t) L.xbf16 << 8 };

        m->fingerprint = XXH3_64bits(mix, sizeof(mix));
    }
    L.chunk = malloc(LD_CHUNK * sizeof(float));
    if (L.chunk == NULL) {
        ld_err(&L, "out of memory");
        goto fail;
    }

    /* embeddings, final norm, head */
    if (ld_wtensor(&L, ld_name(&L, name, sizeof(name), -1,
                   "embed_tokens.weight"), c->vocab, c->hidden,
                   &m->w.embed) != 0)
    {
        goto fail;
    }
    m->w.final_norm = ld_tensor(&L, ld_name(&L, name, sizeof(name), -1,
                                c->arch == PIC_ARCH_BAMBA ? "final_layernorm.weight"
                                                          : "norm.weight"),
                                1, c->hidden, 0, 0);
    if (m->w.final_norm == NULL) {
        goto fail;
    }
    if (c->tie_embeddings) {
        m->w.lm_head = m->w.embed;
        t = ld_find(&L, "lm_head.weight");  /* present or not, unused */
        if (t != NULL && ld_progress(&L, t, t->nbytes) != 0) {
            goto fail;
        }
    } else {
        if (pic_st_find(L.st, "lm_head.weight") == NULL) {
            ld_err(&L, "%s: missing tensor 'lm_head.weight' "
                   "(tie_word_embeddings is false)", dir);
            goto fail;
        }
        if (ld_wtensor(&L, "lm_head.weight", c->vocab, c->hidden,
                       &m->w.lm_head) != 0)
        {
            goto fail;
        }
    }

    for (li = 0; li < c->n_layers; li++) {
        if (ld_layer(&L, li) != 0) {
            goto fail;
        }
    }

    ld_warn_unused(&L);
    if (L.report) {
        ld_line(&L, "loaded");
        fprintf(stderr, "pic_model_load: %s: %.2f GB held (%s), fingerprint "
                "%016llx\n", dir, m->weight_bytes / 1e9, pic_model_weights_name(m),
                (unsigned long long) m->fingerprint);
    }
    if (gguf) {
        pic_gguf_ckpt_close(&gc);
    } else {
        pic_st_close(L.st);
    }
    free(L.chunk);
    free(L.used);
    free(L.got);
    free(config);
    free(tok);
    return m;

fail:
    if (gguf) {
        pic_gguf_ckpt_close(&gc);
    } else {
        pic_st_close(L.st);
    }
    free(L.chunk);
    free(L.used);
    free(L.got);
    free(config);
    free(tok);
    pic_model_free(m);
    return NULL;
}


void
pic_model_free(pic_model *m)
{
    ld_store *s;
    size_t    i;

    if (m == NULL) {
        return;
    }
    if (m->be != NULL) {
        pic_model_backend_release(m);
    }
    s = m->priv;
    if (s != NULL) {
        for (i = 0; i < s->n_bufs; i++) {
            free(s->bufs[i]);
        }
        free(s->bufs);
        free(s);
    }
    free(m);
}
