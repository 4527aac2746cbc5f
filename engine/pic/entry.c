/*
 * entry.c — segment entries (entry.h): build from an isolated prefill or
 * from a full-context forward, storage conversion, reference counting and
 * the serialised payload.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "forward.h"
#include "state.h"
#include "transition.h"

/* --- storage conversion --- */

size_t
pic_dtype_size(pic_dtype dtype)
{
    return dtype == PIC_DTYPE_BF16 ? 2 : 4;
}

static inline uint16_t
pic_f32_to_bf16(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
        return (uint16_t) ((u >> 16) | 0x0040u);        /* quiet NaN */
    }
    u += 0x7fffu + ((u >> 16) & 1u);                    /* round to nearest even */
    return (uint16_t) (u >> 16);
}

static inline float
pic_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t) h << 16;
    float    f;

    memcpy(&f, &u, 4);
    return f;
}

void
pic_entry_load_f32(float *dst, const void *src, size_t n, pic_dtype dtype)
{
    if (dtype == PIC_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    const uint16_t *h = src;
    for (size_t i = 0; i < n; i++) {
        dst[i] = pic_bf16_to_f32(h[i]);
    }
}

void
pic_entry_store(void *dst, const float *src, size_t n, pic_dtype dtype)
{
    if (dtype == PIC_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++) {
        h[i] = pic_f32_to_bf16(src[i]);
    }
}

/* --- allocation --- */

int
pic_entry_head(const pic_config *cfg, int w)
{
    int k1 = pic_config_conv_k1(cfg);

    return w > k1 ? w : k1;
}

int
pic_entry_worth(const pic_config *cfg, int n, const pic_entry_opts *o)
{
    int mi = o->min_interior > 0 ? o->min_interior : PIC_ENTRY_MIN_INTERIOR;
    int k1 = pic_config_conv_k1(cfg);

    if (mi < k1) {
        mi = k1;        /* the conv tail must lie inside the interior */
    }
    return o->w >= 0 && n - o->w - pic_entry_head(cfg, o->w) >= (mi > 1 ? mi : 1);
}

/* A zeroed entry for model m over tokens (L) with seams h, w: every tensor
 * laid out in one allocation.  NULL on OOM. */
static pic_entry *
pic_entry_alloc(const pic_model *m, const int *tokens, int L, int h, int w,
                int has_T, pic_dtype dtype)
{
    const pic_config *c = &m->cfg;
    pic_entry        *e = calloc(1, sizeof(*e));
    size_t            es = pic_dtype_size(dtype), off = 0;

    if (e == NULL) {
        return NULL;
    }
    e->fingerprint = m->fingerprint;
    e->n_tokens = L;
    e->h = h;
    e->w = w;
    e->i0 = h;
    e->i1 = L - w;
    e->has_T = has_T;
    e->dtype = dtype;
    e->n_layers = c->n_layers;
    e->Hv = c->lin_v_heads;
    e->dk = c->lin_k_dim;
    e->dv = c->lin_v_dim;
    e->conv_ch = pic_config_conv_ch(c);
    e->conv_k1 = pic_config_conv_k1(c);
    e->Hkv = pic_config_cache_heads(c);
    e->hd = pic_config_cache_kdim(c);
    e->vd = pic_config_cache_vdim(c);
    memcpy(e->layer_type, c->layer_type, sizeof(e->layer_type));

    size_t nS = (size_t) e->Hv * e->dk * e->dv * es;
    size_t nC = (size_t) e->conv_ch * e->conv_k1 * sizeof(float);
    size_t nK = (size_t) e->Hkv * (e->i1 - e->i0) * e->hd * es;
    size_t nV = (size_t) e->Hkv * (e->i1 - e->i0) * e->vd * es;
    size_t tok = (size_t) L * sizeof(int);

    for (int l = 0; l < c->n_layers; l++) {
        if (pic_layer_recurrent(c->layer_type[l])) {
            e->bytes_T += has_T ? pic_transition_bytes(c, c->layer_type[l], es) : 0;
            e->bytes_S += nS;
            e->bytes_conv += nC;
        } else {
            e->bytes_K += nK;
            e->bytes_V += nV;
        }
    }
    size_t total = tok + e->bytes_T + e->bytes_S + e->bytes_conv + e->bytes_K
                   + e->bytes_V;
    unsigned char *p = NULL;
    if (posix_memalign((void **) &p, 64, total + 64) != 0) {
        free(e);
        return NULL;
    }
    e->data = p;
    e->tokens = (int *) p;
    memcpy(e->tokens, tokens, tok);
    off = (tok + 63) & ~(size_t) 63;
    for (int l = 0; l < c->n_layers; l++) {
        pic_entry_layer *el = &e->layer[l];
        if (pic_layer_recurrent(c->layer_type[l])) {
            if (has_T) {
                el->T = p + off;
                off += pic_transition_bytes(c, c->layer_type[l], es);
            }
            el->S = p + off;
            off += nS;
            el->conv = (float *) (p + off);
            off += nC;
        } else {
            el->K = p + off;
            off += nK;
            el->V = nV > 0 ? p + off : NULL;
            off += nV;
        }
    }
    e->bytes = sizeof(*e) + total + 64;
    e->refs = 1;
    return e;
}

pic_entry *
pic_entry_ref(pic_entry *e)
{
    if (e != NULL) {
        __atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
    }
    return e;
}

void
pic_entry_unref(pic_entry *e)
{
    if (e == NULL) {
        return;
    }
    if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(e->data);
        free(e);
    }
}

/* --- capture from a run state --- */

/* Copy the attention K/V of positions [p0, p0+n) from s into e (interior
 * rows), rotating K by R(delta) (delta 0: no rotation). */
static int
pic_entry_take_kv(pic_entry *e, const pic_model *m, const pic_backend *be,
                  const pic_state *s, int p0, int n, int delta)
{
    const pic_config *c = &m->cfg;
    size_t            rows = (size_t) n * e->hd, es = pic_dtype_size(e->dtype);
    size_t            vrows = (size_t) n * e->vd;
    float            *tmp = NULL;
    int              *pos = NULL;

    if (delta != 0) {
        tmp = malloc(rows * sizeof(float));
        pos = malloc((size_t) (n > 0 ? n : 1) * sizeof(int));
        if (tmp == NULL || pos == NULL) {
            free(tmp);
            free(pos);
            return -1;
        }
        for (int t = 0; t < n; t++) {
            pos[t] = delta;
        }
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] != PIC_LAYER_FULL) {
            continue;
        }
        for (int j = 0; j < e->Hkv; j++) {
            const float   *ks = s->kc[l] + ((size_t) j * s->cap + p0) * e->hd;
            unsigned char *kd = (unsigned char *) e->layer[l].K + j * rows * es;

            /* MLA: rope.dim = dr, so only k_pe, first in the row, turns */
            if (delta != 0) {
                memcpy(tmp, ks, rows * sizeof(float));
                be->rope(tmp, e->hd, pos, n, 1, e->hd, &c->rope);
                ks = tmp;
            }
            pic_entry_store(kd, ks, rows, e->dtype);
            if (e->vd > 0) {
                const float   *vs = s->vc[l] + ((size_t) j * s->cap + p0) * e->vd;
                unsigned char *vd = (unsigned char *) e->layer[l].V + j * vrows * es;

                pic_entry_store(vd, vs, vrows, e->dtype);
            }
        }
    }
    free(tmp);
    free(pos);
    return 0;
}

/* Conv windows of every linear layer of s into e. */
static void
pic_entry_take_conv(pic_entry *e, const pic_state *s)
{
    for (int l = 0; l < e->n_layers; l++) {
        if (e->layer[l].conv != NULL) {
            memcpy(e->layer[l].conv, s->conv[l],
                   (size_t) e->conv_ch * e->conv_k1 * sizeof(float));
        }
    }
}

/* --- T and S|0 accumulation through the on_gdn hook --- */

typedef struct {
    const pic_backend *be;
    int                active;          /* accumulate only while set */
    const pic_transition *tr[PIC_MAX_LAYERS];  /* the layer's family, or NULL */
    float             *T[PIC_MAX_LAYERS];   /* (Hv, head_floats(dk)) fp32:
                                             * (Hv, dk, dk) dense, (Hv) scalar */
    float             *S[PIC_MAX_LAYERS];   /* (Hv, dk, dv) fp32 */
    int                Hv, dk, dv;
} pic_tacc;

static void
pic_tacc_hook(void *user, int layer, int p0, const pic_gdn_args *a)
{
    pic_tacc *t = user;

    (void) p0;

    if (!t->active || t->T[layer] == NULL) {
        return;
    }
    pic_gdn_args ta = *a, za = *a;

    ta.q = NULL;
    ta.o = NULL;
    ta.v = NULL;
    ta.ds = a->dk;
    ta.S = t->T[layer];
    t->be->gdn_chunked(&ta);

    za.q = NULL;
    za.o = NULL;
    za.S = t->S[layer];
    t->be->gdn_chunked(&za);
}

/* Mamba2: S|0 and Π a of the tokens a describes, advanced from the
 * accumulator's (a zero start and 1 at the interior's first token). */
static void
pic_tacc_ssd_hook(void *user, int layer, int p0, const pic_ssd_args *a)
{
    pic_tacc *t = user;

    (void) p0;

    if (!t->active || t->T[layer] == NULL) {
        return;
    }
    pic_ssd_args za = *a;

    za.C = NULL;
    za.y = NULL;
    za.S = t->S[layer];
    za.decay = t->T[layer];
    t->be->ssd_scan(&za);
}

/* T = I, S = 0 for every linear layer. */
static void
pic_tacc_reset(pic_tacc *t, int n_layers)
{
    for (int l = 0; l < n_layers; l++) {
        if (t->T[l] == NULL) {
            continue;
        }
        size_t nh = t->tr[l]->head_floats(t->dk);

        memset(t->S[l], 0, (size_t) t->Hv * t->dk * t->dv * sizeof(float));
        for (int h = 0; h < t->Hv; h++) {
            t->tr[l]->identity(t->T[l] + (size_t) h * nh, t->dk);
        }
    }
}

static void
pic_tacc_free(pic_tacc *t, int n_layers)
{
    for (int l = 0; l < n_layers; l++) {
        free(t->T[l]);
        free(t->S[l]);
    }
}

static int
pic_tacc_init(pic_tacc *t, const pic_model *m, const pic_backend *be)
{
    const pic_config *c = &m->cfg;

    memset(t, 0, sizeof(*t));
    t->be = be;
    t->Hv = c->lin_v_heads;
    t->dk = c->lin_k_dim;
    t->dv = c->lin_v_dim;
    for (int l = 0; l < c->n_layers; l++) {
        t->tr[l] = pic_transition_of(c->layer_type[l]);
        if (t->tr[l] == NULL) {
            continue;
        }
        t->T[l] = malloc((size_t) t->Hv * t->tr[l]->head_floats(t->dk) * sizeof(float));
        t->S[l] = malloc((size_t) t->Hv * t->dk * t->dv * sizeof(float));
        if (t->T[l] == NULL || t->S[l] == NULL) {
            pic_tacc_free(t, c->n_layers);
            return -1;
        }
    }
    pic_tacc_reset(t, c->n_layers);
    return 0;
}

/* Store the accumulated T and S|0 into e. */
static void
pic_tacc_store(const pic_tacc *t, pic_entry *e)
{
    for (int l = 0; l < e->n_layers; l++) {
        if (t->T[l] == NULL) {
            continue;
        }
        pic_entry_store(e->layer[l].T, t->T[l],
                        (size_t) t->Hv * t->tr[l]->head_floats(t->dk), e->dtype);
        pic_entry_store(e->layer[l].S, t->S[l], (size_t) t->Hv * t->dk * t->dv,
                        e->dtype);
    }
}

/* --- build --- */

static int
pic_entry_opts_check(const pic_model *m, const pic_entry_opts *o, char *err,
                     size_t errlen)
{
    if (o->w < 0 || o->w > PIC_ENTRY_MAX_W) {
        snprintf(err, errlen, "%s: seam width %d outside [0, %d]", __func__,
                 o->w, PIC_ENTRY_MAX_W);
        return -1;
    }
    if (o->dtype != PIC_DTYPE_F32 && o->dtype != PIC_DTYPE_BF16) {
        snprintf(err, errlen, "%s: unknown storage dtype %d", __func__, o->dtype);
        return -1;
    }
    if (m->cfg.n_layers > PIC_MAX_LAYERS) {
        snprintf(err, errlen, "%s: too many layers", __func__);
        return -1;
    }
    return 0;
}

int
pic_entry_build(const pic_model *m, const pic_backend *be, const int *tokens,
                int n, const pic_entry_opts *o, pic_entry **seam,
                pic_entry **whole, char *err, size_t errlen)
{
    const pic_config *c = &m->cfg;
    pic_entry        *se = NULL, *we = NULL;
    pic_state        *s = NULL;
    pic_tacc          acc;
    int               acc_ok = 0, rc = -1;
    int               h = pic_entry_head(c, o->w), w = o->w;

    if (seam != NULL) {
        *seam = NULL;
    }
    if (whole != NULL) {
        *whole = NULL;
    }
    if (be == NULL) {
        be = pic_backend_cpu();
    }
    if (pic_entry_opts_check(m, o, err, errlen) != 0) {
        return -1;
    }
    if (tokens == NULL || n <= 0) {
        snprintf(err, errlen, "%s: empty segment", __func__);
        return -1;
    }
    int want_seam = seam != NULL && pic_entry_worth(c, n, o);

    s = pic_state_init(c, n, err, errlen);
    if (s == NULL) {
        return -1;
    }
    if (want_seam) {
        se = pic_entry_alloc(m, tokens, n, h, w, 1, o->dtype);
        if (se == NULL || pic_tacc_init(&acc, m, be) != 0) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            goto done;
        }
        acc_ok = 1;
        pic_forward_hooks hooks = { .user = &acc, .on_gdn = pic_tacc_hook,
                                    .on_ssd = pic_tacc_ssd_hook };

        if (h > 0 && pic_forward(m, be, s, tokens, h, 0, PIC_LOGITS_NONE, NULL,
                                 NULL, err, errlen) != 0) {
            goto done;
        }
        acc.active = 1;
        if (pic_forward(m, be, s, tokens + h, n - w - h, h, PIC_LOGITS_NONE,
                        NULL, &hooks, err, errlen) != 0) {
            goto done;
        }
        pic_tacc_store(&acc, se);
        pic_entry_take_conv(se, s);
        if (pic_entry_take_kv(se, m, be, s, h, n - w - h, 0) != 0) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            goto done;
        }
    }
    if (whole != NULL) {
        int done_to = want_seam ? n - w : 0;
        if (done_to < n && pic_forward(m, be, s, tokens + done_to, n - done_to,
                                       done_to, PIC_LOGITS_NONE, NULL, NULL,
                                       err, errlen) != 0) {
            goto done;
        }
        we = pic_entry_alloc(m, tokens, n, 0, 0, 0, o->dtype);
        if (we == NULL) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            goto done;
        }
        for (int l = 0; l < c->n_layers; l++) {
            if (we->layer[l].S != NULL) {
                pic_entry_store(we->layer[l].S, s->S[l],
                                (size_t) we->Hv * we->dk * we->dv, o->dtype);
            }
        }
        pic_entry_take_conv(we, s);
        if (pic_entry_take_kv(we, m, be, s, 0, n, 0) != 0) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            goto done;
        }
    }
    rc = 0;

done:
    if (acc_ok) {
        pic_tacc_free(&acc, c->n_layers);
    }
    pic_state_free(s);
    if (rc != 0) {
        pic_entry_unref(se);
        pic_entry_unref(we);
        return -1;
    }
    if (seam != NULL) {
        *seam = se;
    }
    if (whole != NULL) {
        *whole = we;
    }
    return 0;
}

static int
pic_int_cmp(const void *a, const void *b)
{
    int x = *(const int *) a, y = *(const int *) b;

    return (x > y) - (x < y);
}

int
pic_entry_build_context(const pic_model *m, const pic_backend *be,
                        const int *tokens, int n, const int *seg_len,
                        int n_seg, const pic_entry_opts *o, pic_entry **out,
                        char *err, size_t errlen)
{
    const pic_config *c = &m->cfg;
    pic_state        *s = NULL;
    pic_tacc          acc;
    int               acc_ok = 0, rc = -1, n_cut = 0, total = 0;
    int               h = pic_entry_head(c, o->w), w = o->w;
    int              *cuts = NULL, *off = NULL;

    if (be == NULL) {
        be = pic_backend_cpu();
    }
    for (int i = 0; i < n_seg; i++) {
        out[i] = NULL;
    }
    if (pic_entry_opts_check(m, o, err, errlen) != 0) {
        return -1;
    }
    for (int i = 0; i < n_seg; i++) {
        if (seg_len[i] <= 0 || seg_len[i] > n - total) {
            snprintf(err, errlen, "%s: segment %d length %d does not fit", __func__,
                     i, seg_len[i]);
            return -1;
        }
        total += seg_len[i];
    }
    if (total != n) {
        snprintf(err, errlen, "%s: segments cover %d of %d tokens", __func__,
                 total, n);
        return -1;
    }
    cuts = malloc((size_t) (2 * n_seg + 2) * sizeof(int));
    off = malloc((size_t) (n_seg + 1) * sizeof(int));
    s = pic_state_init(c, n, err, errlen);
    if (cuts == NULL || off == NULL || s == NULL || pic_tacc_init(&acc, m, be) != 0) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        goto done;
    }
    acc_ok = 1;
    off[0] = 0;
    cuts[n_cut++] = 0;
    cuts[n_cut++] = n;
    for (int i = 0; i < n_seg; i++) {
        off[i + 1] = off[i] + seg_len[i];
        if (pic_entry_worth(c, seg_len[i], o)) {
            out[i] = pic_entry_alloc(m, tokens + off[i], seg_len[i], h, w, 1, o->dtype);
            if (out[i] == NULL) {
                snprintf(err, errlen, "%s: out of memory", __func__);
                goto done;
            }
            cuts[n_cut++] = off[i] + h;
            cuts[n_cut++] = off[i] + seg_len[i] - w;
        }
    }
    qsort(cuts, n_cut, sizeof(int), pic_int_cmp);

    pic_forward_hooks hooks = { .user = &acc, .on_gdn = pic_tacc_hook,
                                    .on_ssd = pic_tacc_ssd_hook };
    int               seg = 0;

    for (int k = 0; k + 1 < n_cut; k++) {
        int a = cuts[k], b = cuts[k + 1];
        if (b <= a) {
            continue;
        }
        while (seg < n_seg && off[seg + 1] <= a) {
            seg++;
        }
        /* [a, b) is either one segment's interior or lies outside all */
        pic_entry *e = seg < n_seg ? out[seg] : NULL;
        int        in_int = e != NULL && a == off[seg] + e->i0;

        if (in_int) {
            pic_tacc_reset(&acc, c->n_layers);
        }
        acc.active = in_int;
        if (pic_forward(m, be, s, tokens + a, b - a, a, PIC_LOGITS_NONE, NULL,
                        &hooks, err, errlen) != 0) {
            goto done;
        }
        if (in_int) {
            pic_tacc_store(&acc, e);
            pic_entry_take_conv(e, s);
        }
    }
    for (int i = 0; i < n_seg; i++) {
        pic_entry *e = out[i];
        if (e != NULL && pic_entry_take_kv(e, m, be, s, off[i] + e->i0,
                                           e->i1 - e->i0, -off[i]) != 0) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            goto done;
        }
    }
    rc = 0;

done:
    if (acc_ok) {
        pic_tacc_free(&acc, c->n_layers);
    }
    pic_state_free(s);
    free(cuts);
    free(off);
    if (rc != 0) {
        for (int i = 0; i < n_seg; i++) {
            pic_entry_unref(out[i]);
            out[i] = NULL;
        }
    }
    return rc;
}

/* --- checks --- */

/* Shapes of e against cfg; 0 when they agree. */
static int
pic_entry_shapes_ok(const pic_entry *e, const pic_config *c)
{
    if (e->n_layers != c->n_layers || e->Hv != c->lin_v_heads
        || e->dk != c->lin_k_dim || e->dv != c->lin_v_dim
        || e->conv_ch != pic_config_conv_ch(c) || e->conv_k1 != pic_config_conv_k1(c)
        || e->Hkv != pic_config_cache_heads(c) || e->hd != pic_config_cache_kdim(c)
        || e->vd != pic_config_cache_vdim(c)) {
        return 0;
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (e->layer_type[l] != c->layer_type[l]) {
            return 0;
        }
    }
    return 1;
}

int
pic_entry_check(const pic_entry *e, const pic_model *m, const int *tokens,
                int n, char *err, size_t errlen)
{
    if (e->fingerprint != m->fingerprint) {
        snprintf(err, errlen, "%s: entry built for model %016llx, not %016llx",
                 __func__, (unsigned long long) e->fingerprint,
                 (unsigned long long) m->fingerprint);
        return -1;
    }
    if (!pic_entry_shapes_ok(e, &m->cfg)) {
        snprintf(err, errlen, "%s: entry shapes differ from the model's", __func__);
        return -1;
    }
    if (e->n_tokens != n || (tokens != NULL
                             && memcmp(e->tokens, tokens, (size_t) n * sizeof(int)))) {
        snprintf(err, errlen, "%s: entry holds other tokens (%d vs %d)", __func__,
                 e->n_tokens, n);
        return -1;
    }
    return 0;
}

/* --- tensors --- */

int
pic_entry_tensors(const pic_entry *e, pic_entry_tensor *out, int max)
{
    int    cnt = 0, ni = e->i1 - e->i0;
    size_t es = pic_dtype_size(e->dtype);

#define PIC_ADD(l_, kind_, dt_, nd_, a_, b_, c_, p_, esz_)                    \
    do {                                                                      \
        if (cnt < max) {                                                      \
            pic_entry_tensor *t = &out[cnt];                                  \
            t->layer = (l_);                                                  \
            t->kind = (kind_);                                                \
            t->dtype = (dt_);                                                 \
            t->ndim = (nd_);                                                  \
            t->shape[0] = (a_);                                               \
            t->shape[1] = (b_);                                               \
            t->shape[2] = (c_);                                               \
            t->data = (p_);                                                   \
            t->bytes = (size_t) (a_) * (b_) * ((nd_) == 3 ? (c_) : 1) * (esz_); \
        }                                                                     \
        cnt++;                                                                \
    } while (0)

    for (int l = 0; l < e->n_layers; l++) {
        const pic_entry_layer *el = &e->layer[l];
        if (pic_layer_recurrent(e->layer_type[l])) {
            int tk = e->layer_type[l] == PIC_LAYER_MAMBA2 ? 1 : e->dk;  /* scalar: (Hv, 1, 1) */

            if (e->has_T) {
                PIC_ADD(l, PIC_TENSOR_T, e->dtype, 3, e->Hv, tk, tk, el->T, es);
            }
            PIC_ADD(l, PIC_TENSOR_S, e->dtype, 3, e->Hv, e->dk, e->dv, el->S, es);
            PIC_ADD(l, PIC_TENSOR_CONV, PIC_DTYPE_F32, 2, e->conv_ch, e->conv_k1, 1,
                    el->conv, 4);
        } else {
            PIC_ADD(l, PIC_TENSOR_K, e->dtype, 3, e->Hkv, ni, e->hd, el->K, es);
            if (e->vd > 0) {
                PIC_ADD(l, PIC_TENSOR_V, e->dtype, 3, e->Hkv, ni, e->vd, el->V, es);
            }
        }
    }
#undef PIC_ADD
    return cnt;
}

/* --- serialisation --- */

/* 1 if every element of t is finite. */
static int
pic_tensor_finite(const pic_entry_tensor *t)
{
    if (t->dtype == PIC_DTYPE_BF16) {
        const uint16_t *h = t->data;
        for (size_t i = 0; i < t->bytes / 2; i++) {
            if ((h[i] & 0x7f80u) == 0x7f80u) {
                return 0;
            }
        }
        return 1;
    }
    const float *f = t->data;
    for (size_t i = 0; i < t->bytes / 4; i++) {
        if (!isfinite(f[i])) {
            return 0;
        }
    }
    return 1;
}

#define PIC_ENTRY_MAGIC   0x45434950u      /* "PICE" little-endian */
#define PIC_ENTRY_VERSION 1
#define PIC_ENTRY_HDR     (4 + 2 + 1 + 1 + 8 + 4 * 11)

static void
pic_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char) (v >> (8 * i));
    }
}

static uint32_t
pic_get_u32(const unsigned char *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}

size_t
pic_entry_serialized_size(const pic_entry *e)
{
    return PIC_ENTRY_HDR + (size_t) e->n_layers + (size_t) e->n_tokens * 4
           + e->bytes_T + e->bytes_S + e->bytes_conv + e->bytes_K + e->bytes_V;
}

size_t
pic_entry_serialize(const pic_entry *e, void *buf, size_t cap)
{
    size_t         need = pic_entry_serialized_size(e);
    unsigned char *p = buf;
    int            nt;

    if (cap < need) {
        return 0;
    }
    pic_put_u32(p, PIC_ENTRY_MAGIC);
    p[4] = PIC_ENTRY_VERSION & 0xff;
    p[5] = PIC_ENTRY_VERSION >> 8;
    p[6] = (unsigned char) e->dtype;
    p[7] = (unsigned char) (e->has_T ? 1 : 0);
    pic_put_u32(p + 8, (uint32_t) e->fingerprint);
    pic_put_u32(p + 12, (uint32_t) (e->fingerprint >> 32));
    int hdr[11] = { e->n_tokens, e->h, e->w, e->n_layers, e->Hv, e->dk, e->dv,
                    e->conv_ch, e->conv_k1, e->Hkv, e->hd };
    for (int i = 0; i < 11; i++) {
        pic_put_u32(p + 16 + 4 * i, (uint32_t) hdr[i]);
    }
    p += PIC_ENTRY_HDR;
    for (int l = 0; l < e->n_layers; l++) {
        *p++ = (unsigned char) e->layer_type[l];
    }
    for (int t = 0; t < e->n_tokens; t++, p += 4) {
        pic_put_u32(p, (uint32_t) e->tokens[t]);
    }
    nt = pic_entry_tensors(e, NULL, 0);
    pic_entry_tensor *ts = malloc((size_t) (nt > 0 ? nt : 1) * sizeof(*ts));
    if (ts == NULL) {
        return 0;
    }
    pic_entry_tensors(e, ts, nt);
    for (int i = 0; i < nt; i++) {
        memcpy(p, ts[i].data, ts[i].bytes);     /* host order: little-endian */
        p += ts[i].bytes;
    }
    free(ts);
    return need;
}

pic_entry *
pic_entry_deserialize(const pic_model *m, const void *buf, size_t len,
                      char *err, size_t errlen)
{
    const pic_config    *c = &m->cfg;
    const unsigned char *p = buf;
    pic_entry           *e = NULL;
    int                  hdr[11];

    if (buf == NULL || len < PIC_ENTRY_HDR) {
        snprintf(err, errlen, "%s: payload of %zu bytes is too short", __func__, len);
        return NULL;
    }
    if (pic_get_u32(p) != PIC_ENTRY_MAGIC
        || (p[4] | p[5] << 8) != PIC_ENTRY_VERSION) {
        snprintf(err, errlen, "%s: bad magic or version", __func__);
        return NULL;
    }
    if (p[6] > PIC_DTYPE_BF16 || p[7] > 1) {
        snprintf(err, errlen, "%s: bad dtype %d or flags %d", __func__, p[6], p[7]);
        return NULL;
    }
    uint64_t fp = pic_get_u32(p + 8) | (uint64_t) pic_get_u32(p + 12) << 32;
    if (fp != m->fingerprint) {
        snprintf(err, errlen, "%s: entry of model %016llx, not %016llx", __func__,
                 (unsigned long long) fp, (unsigned long long) m->fingerprint);
        return NULL;
    }
    for (int i = 0; i < 11; i++) {
        hdr[i] = (int) pic_get_u32(p + 16 + 4 * i);
    }
    int L = hdr[0], h = hdr[1], w = hdr[2], nl = hdr[3], has_T = p[7];
    if (nl != c->n_layers || hdr[4] != c->lin_v_heads || hdr[5] != c->lin_k_dim
        || hdr[6] != c->lin_v_dim || hdr[7] != pic_config_conv_ch(c)
        || hdr[8] != pic_config_conv_k1(c)
        || hdr[9] != pic_config_cache_heads(c) || hdr[10] != pic_config_cache_kdim(c)) {
        snprintf(err, errlen, "%s: shapes differ from the model's", __func__);
        return NULL;
    }
    if (L <= 0 || L > (1 << 24) || h < 0 || w < 0 || w > PIC_ENTRY_MAX_W
        || h > L || w > L - h || (has_T && L - w - h < 1)
        || (has_T ? h != pic_entry_head(c, w) : (h != 0 || w != 0))) {
        snprintf(err, errlen, "%s: bad token count %d or seams h=%d w=%d",
                 __func__, L, h, w);
        return NULL;
    }
    size_t pre = PIC_ENTRY_HDR + (size_t) nl + (size_t) L * 4;
    if (len < pre) {
        snprintf(err, errlen, "%s: payload truncated in the header", __func__);
        return NULL;
    }
    for (int l = 0; l < nl; l++) {
        if (p[PIC_ENTRY_HDR + l] != (unsigned char) c->layer_type[l]) {
            snprintf(err, errlen, "%s: layer %d type differs", __func__, l);
            return NULL;
        }
    }
    int *tok = malloc((size_t) L * sizeof(int));
    if (tok == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    for (int t = 0; t < L; t++) {
        uint32_t v = pic_get_u32(p + PIC_ENTRY_HDR + nl + 4 * (size_t) t);
        if (v >= (uint32_t) c->vocab) {
            snprintf(err, errlen, "%s: token %u at %d outside the vocab", __func__,
                     v, t);
            free(tok);
            return NULL;
        }
        tok[t] = (int) v;
    }
    e = pic_entry_alloc(m, tok, L, h, w, has_T, (pic_dtype) p[6]);
    free(tok);
    if (e == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    if (len != pic_entry_serialized_size(e)) {
        snprintf(err, errlen, "%s: payload is %zu bytes, expected %zu", __func__,
                 len, pic_entry_serialized_size(e));
        pic_entry_unref(e);
        return NULL;
    }
    int               nt = pic_entry_tensors(e, NULL, 0);
    pic_entry_tensor *ts = malloc((size_t) nt * sizeof(*ts));
    if (ts == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        pic_entry_unref(e);
        return NULL;
    }
    pic_entry_tensors(e, ts, nt);
    const unsigned char *q = p + pre;
    for (int i = 0; i < nt; i++) {
        memcpy((void *) ts[i].data, q, ts[i].bytes);
        q += ts[i].bytes;
    }
    /* a non-finite value would poison every request that composes it */
    for (int i = 0; i < nt; i++) {
        if (!pic_tensor_finite(&ts[i])) {
            snprintf(err, errlen, "%s: non-finite values in layer %d", __func__,
                     ts[i].layer);
            free(ts);
            pic_entry_unref(e);
            return NULL;
        }
    }
    free(ts);
    return e;
}
