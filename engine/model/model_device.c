/*
 * model_device.c — the weights of a loaded model copied once into a
 * backend's memory (model.h, pic_model_to_backend): every weight pointer of
 * the copy is device memory, so the same forward (engine/compute) runs on
 * it with that backend's ops.  Matrices go up as the loader holds them
 * (f32, bf16 or q8 blocks + fp16 scales; bf16dot only on a CPU backend);
 * vectors as fp32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

typedef struct {
    void  **dptr;               /* [n] backend allocations */
    size_t  n, cap;
    void   *experts[PIC_MAX_LAYERS];   /* host arrays of expert views */
} pic_dev_store;

/* Upload bytes of host p into a new backend buffer recorded in st; NULL
 * when p is NULL or on OOM (*bad set). */
static void *
pic_dev_put(const pic_backend *be, pic_dev_store *st, const void *p,
            size_t bytes, int *bad)
{
    void *d;

    if (p == NULL || *bad) {
        return NULL;
    }
    if (st->n == st->cap) {
        size_t  cap = st->cap ? st->cap * 2 : 256;
        void  **np = realloc(st->dptr, cap * sizeof(*np));

        if (np == NULL) {
            *bad = 1;
            return NULL;
        }
        st->dptr = np;
        st->cap = cap;
    }
    d = be->mem_alloc(bytes);
    if (d == NULL) {
        *bad = 1;
        return NULL;
    }
    be->mem_upload(d, p, bytes);
    st->dptr[st->n++] = d;
    return d;
}

/* Bytes of w's values and of its scales. */
static void
pic_dev_wmat_sizes(const pic_wmat *w, size_t *data, size_t *scale)
{
    size_t n = (size_t) w->rows * w->cols;

    *data = w->type == PIC_WTYPE_F32 ? n * sizeof(float)
          : w->type == PIC_WTYPE_BF16 ? n * sizeof(uint16_t) : n;
    *scale = w->type == PIC_WTYPE_Q8 ? n / PIC_Q8_BLOCK * sizeof(uint16_t) : 0;
}

/* *d = *w with its storage uploaded. */
static void
pic_dev_wmat(const pic_backend *be, pic_dev_store *st, pic_wmat *d,
             const pic_wmat *w, int *bad)
{
    size_t nd, ns;

    *d = *w;
    if (w->data == NULL) {
        return;
    }
    pic_dev_wmat_sizes(w, &nd, &ns);
    d->data = pic_dev_put(be, st, w->data, nd, bad);
    d->scale = w->scale ? pic_dev_put(be, st, w->scale, ns, bad) : NULL;
}

#define PIC_DEV_VEC(field, count)                                             \
    d->field = pic_dev_put(be, st, h->field, (size_t) (count) * sizeof(float), &bad)

pic_model *
pic_model_to_backend(const pic_model *m, const pic_backend *be, char *err,
                     size_t errlen)
{
    const pic_config *c = &m->cfg;
    pic_model        *dm;
    pic_dev_store    *st;
    int               bad = 0;
    int               H = c->hidden, Hv = c->lin_v_heads, C = pic_config_conv_ch(c);

    if (be == NULL || be->host) {
        snprintf(err, errlen, "%s: backend %s holds host memory: use the model as "
                 "loaded", __func__, be ? be->name : "(null)");
        return NULL;
    }
    if (m->xbf16 && strncmp(be->name, "cpu", 3) != 0) {
        snprintf(err, errlen, "--weights bf16dot rounds x in the CPU kernels; "
                 "on %s use --weights bf16", be->name);
        return NULL;
    }
    dm = malloc(sizeof(*dm));
    st = calloc(1, sizeof(*st));
    if (dm == NULL || st == NULL) {
        free(dm);
        free(st);
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    *dm = *m;
    dm->priv = NULL;
    dm->be = be;
    dm->dev = st;

    pic_dev_wmat(be, st, &dm->w.embed, &m->w.embed, &bad);
    if (m->w.lm_head.data == m->w.embed.data) {
        dm->w.lm_head = dm->w.embed;            /* tied: one copy */
        dm->w.lm_head.rows = m->w.lm_head.rows;
    } else {
        pic_dev_wmat(be, st, &dm->w.lm_head, &m->w.lm_head, &bad);
    }
    dm->w.final_norm = pic_dev_put(be, st, m->w.final_norm, (size_t) H * sizeof(float),
                                   &bad);
    for (int l = 0; l < c->n_layers && !bad; l++) {
        const pic_layer_weights *h = &m->w.layers[l];
        pic_layer_weights       *d = &dm->w.layers[l];

        PIC_DEV_VEC(input_norm, H);
        PIC_DEV_VEC(post_norm, H);
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            pic_dev_wmat(be, st, &d->in_qkv, &h->in_qkv, &bad);
            pic_dev_wmat(be, st, &d->in_z, &h->in_z, &bad);
            pic_dev_wmat(be, st, &d->out_proj, &h->out_proj, &bad);
            PIC_DEV_VEC(in_b, (size_t) Hv * H);
            PIC_DEV_VEC(in_a, (size_t) Hv * H);
            PIC_DEV_VEC(conv_w, (size_t) C * c->conv_kernel);
            PIC_DEV_VEC(dt_bias, Hv);
            PIC_DEV_VEC(A_log, Hv);
            PIC_DEV_VEC(gdn_norm, c->lin_v_dim);
        } else if (c->mla) {
            pic_dev_wmat(be, st, &d->q_a, &h->q_a, &bad);     /* data NULL stays */
            pic_dev_wmat(be, st, &d->q_b, &h->q_b, &bad);
            pic_dev_wmat(be, st, &d->kv_a, &h->kv_a, &bad);
            pic_dev_wmat(be, st, &d->kv_b, &h->kv_b, &bad);
            pic_dev_wmat(be, st, &d->wo, &h->wo, &bad);
            PIC_DEV_VEC(q_a_norm, c->q_lora_rank);
            PIC_DEV_VEC(kv_a_norm, c->kv_lora_rank);
        } else if (c->layer_type[l] == PIC_LAYER_MAMBA2) {
            size_t mi = (size_t) c->ssm_heads * c->ssm_head_dim;

            pic_dev_wmat(be, st, &d->ssm_in_z, &h->ssm_in_z, &bad);
            pic_dev_wmat(be, st, &d->ssm_in_xbc, &h->ssm_in_xbc, &bad);
            pic_dev_wmat(be, st, &d->ssm_in_dt, &h->ssm_in_dt, &bad);
            pic_dev_wmat(be, st, &d->ssm_out, &h->ssm_out, &bad);
            PIC_DEV_VEC(ssm_conv_w, (size_t) C * c->conv_kernel);
            PIC_DEV_VEC(ssm_conv_b, C);                 /* NULL stays NULL */
            PIC_DEV_VEC(ssm_dt_bias, c->ssm_heads);
            PIC_DEV_VEC(ssm_A, c->ssm_heads);
            PIC_DEV_VEC(ssm_D, c->ssm_heads);
            PIC_DEV_VEC(ssm_norm, mi);
        } else {
            pic_dev_wmat(be, st, &d->wq, &h->wq, &bad);
            pic_dev_wmat(be, st, &d->wk, &h->wk, &bad);
            pic_dev_wmat(be, st, &d->wv, &h->wv, &bad);
            pic_dev_wmat(be, st, &d->wo, &h->wo, &bad);
            PIC_DEV_VEC(q_norm, c->head_dim);          /* NULL stays NULL */
            PIC_DEV_VEC(k_norm, c->head_dim);
            PIC_DEV_VEC(bq, (size_t) c->n_q_heads * c->head_dim);
            PIC_DEV_VEC(bk, (size_t) c->n_kv_heads * c->head_dim);
            PIC_DEV_VEC(bv, (size_t) c->n_kv_heads * c->head_dim);
            PIC_DEV_VEC(bo, H);
        }
        if (!c->layer_is_moe[l]) {
            pic_dev_wmat(be, st, &d->mlp_gate, &h->mlp_gate, &bad);
            pic_dev_wmat(be, st, &d->mlp_up, &h->mlp_up, &bad);
            pic_dev_wmat(be, st, &d->mlp_down, &h->mlp_down, &bad);
            continue;
        }
        PIC_DEV_VEC(router, (size_t) c->n_experts * H);
        PIC_DEV_VEC(shared_gate, H);
        PIC_DEV_VEC(router_bias, c->n_experts);
        pic_dev_wmat(be, st, &d->shared.gate, &h->shared.gate, &bad);
        pic_dev_wmat(be, st, &d->shared.up, &h->shared.up, &bad);
        pic_dev_wmat(be, st, &d->shared.down, &h->shared.down, &bad);
        d->experts = calloc((size_t) c->n_experts, sizeof(*d->experts));
        st->experts[l] = d->experts;
        bad = bad || d->experts == NULL;
        for (int e = 0; e < c->n_experts && !bad; e++) {
            pic_dev_wmat(be, st, &d->experts[e].gate, &h->experts[e].gate, &bad);
            pic_dev_wmat(be, st, &d->experts[e].up, &h->experts[e].up, &bad);
            pic_dev_wmat(be, st, &d->experts[e].down, &h->experts[e].down, &bad);
        }
    }
    if (bad) {
        snprintf(err, errlen, "%s: out of %s memory for the weights", __func__,
                 be->name);
        pic_model_backend_release(dm);      /* dm owns no host buffers */
        free(dm);
        return NULL;
    }
    return dm;
}

void
pic_model_backend_release(pic_model *m)
{
    pic_dev_store *st = m->dev;

    if (st == NULL) {
        return;
    }
    for (size_t i = 0; i < st->n; i++) {
        m->be->mem_free(st->dptr[i]);
    }
    for (int l = 0; l < PIC_MAX_LAYERS; l++) {
        free(st->experts[l]);
    }
    free(st->dptr);
    free(st);
    m->dev = NULL;
}
