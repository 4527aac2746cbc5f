/*
 * state.c — per-sequence run state (state.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"

#define PIC_KV_MIN_SLOTS 256

/* n zeroed bytes of s->be's memory, or NULL. */
static void *
pic_state_zalloc(const pic_state *s, size_t n)
{
    void *p = s->be->mem_alloc(n);

    if (p != NULL) {
        s->be->mem_zero(p, n);
    }
    return p;
}

pic_state *
pic_state_init(const pic_config *cfg, int max_ctx, char *err, size_t errlen)
{
    return pic_state_init_on(cfg, max_ctx, NULL, err, errlen);
}

pic_state *
pic_state_init_on(const pic_config *cfg, int max_ctx, const pic_backend *be,
                  char *err, size_t errlen)
{
    pic_state *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    s->be = be != NULL ? be : pic_backend_cpu();
    s->n_layers = cfg->n_layers;
    s->max_ctx = max_ctx > 0 ? max_ctx
               : (cfg->max_position > 0 ? cfg->max_position : 1 << 20);
    s->Hv = cfg->lin_v_heads;
    s->dk = cfg->lin_k_dim;
    s->dv = cfg->lin_v_dim;
    s->conv_ch = pic_config_conv_ch(cfg);
    s->conv_k1 = pic_config_conv_k1(cfg);
    s->Hkv = pic_config_cache_heads(cfg);
    s->hd = pic_config_cache_kdim(cfg);
    s->vd = pic_config_cache_vdim(cfg);

    for (int l = 0; l < cfg->n_layers; l++) {
        if (!pic_layer_recurrent(cfg->layer_type[l])) {
            continue;
        }
        s->S[l] = pic_state_zalloc(s, (size_t) s->Hv * s->dk * s->dv * sizeof(float));
        s->conv[l] = pic_state_zalloc(s, (size_t) s->conv_ch * (s->conv_k1 + 1)
                                             * sizeof(float));
        if (s->S[l] == NULL || s->conv[l] == NULL) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            pic_state_free(s);
            return NULL;
        }
    }
    return s;
}

void
pic_state_free(pic_state *s)
{
    if (s == NULL) {
        return;
    }
    for (int l = 0; l < s->n_layers; l++) {
        s->be->mem_free(s->S[l]);
        s->be->mem_free(s->conv[l]);
        s->be->mem_free(s->kc[l]);
        s->be->mem_free(s->vc[l]);
    }
    pic_workspace_free(s->be, &s->own);
    free(s);
}

void
pic_workspace_free(const pic_backend *be, pic_workspace *w)
{
    if (w == NULL) {
        return;
    }
    be->mem_free(w->ws);
    be->mem_free(w->xs);
    free(w->hws);
    *w = (pic_workspace) { 0 };
}

void
pic_state_share_workspace(pic_state *s, pic_workspace *w)
{
    pic_workspace_free(s->be, &s->own);
    s->shared = w;
}

void
pic_state_reset(pic_state *s)
{
    for (int l = 0; l < s->n_layers; l++) {
        if (s->S[l] != NULL) {
            s->be->mem_zero(s->S[l], (size_t) s->Hv * s->dk * s->dv * sizeof(float));
            s->be->mem_zero(s->conv[l], (size_t) s->conv_ch * s->conv_k1 * sizeof(float));
        }
    }
    s->pos = 0;
}

/* Re-lay one (Hkv, old, hd) cache as (Hkv, cap, hd) in be's memory. */
static float *
pic_state_grow_kv(const pic_backend *be, const float *old, int Hkv, int old_cap,
                  int cap, int hd)
{
    float *kv = be->mem_alloc((size_t) Hkv * cap * hd * sizeof(float));

    if (kv == NULL) {
        return NULL;
    }
    for (int h = 0; h < Hkv && old != NULL; h++) {
        be->mem_copy(kv + (size_t) h * cap * hd, old + (size_t) h * old_cap * hd,
                     (size_t) old_cap * hd * sizeof(float));
    }
    return kv;
}

int
pic_state_reserve(pic_state *s, int n_pos, char *err, size_t errlen)
{
    if (n_pos <= s->cap) {
        return 0;
    }
    if (n_pos > s->max_ctx) {
        snprintf(err, errlen, "%s: %d positions exceed the context limit %d",
                 __func__, n_pos, s->max_ctx);
        return -1;
    }
    int cap = s->cap > 0 ? s->cap : PIC_KV_MIN_SLOTS;
    while (cap < n_pos) {
        cap = cap > s->max_ctx / 2 ? s->max_ctx : cap * 2;
    }
    if (cap > s->max_ctx) {
        cap = s->max_ctx;
    }
    for (int l = 0; l < s->n_layers; l++) {
        if (s->S[l] != NULL) {
            continue;
        }
        float *k = pic_state_grow_kv(s->be, s->kc[l], s->Hkv, s->cap, cap, s->hd);
        float *v = s->vd > 0 ? pic_state_grow_kv(s->be, s->vc[l], s->Hkv, s->cap, cap,
                                                 s->vd) : NULL;
        if (k == NULL || (v == NULL && s->vd > 0)) {
            s->be->mem_free(k);
            s->be->mem_free(v);
            snprintf(err, errlen, "%s: out of memory for %d KV slots",
                     __func__, cap);
            return -1;
        }
        s->be->mem_free(s->kc[l]);
        s->be->mem_free(s->vc[l]);
        s->kc[l] = k;
        s->vc[l] = v;
    }
    s->cap = cap;
    return 0;
}

/* Deep copy of src into a new state on be (src's own backend or the CPU):
 * copy within one backend, download from a device one to the CPU. */
static pic_state *
pic_state_copy_to(const pic_state *src, const pic_backend *be)
{
    pic_state *s = calloc(1, sizeof(*s));
    int        ok = s != NULL, down = be != src->be;
    void     (*cp)(void *, const void *, size_t) =
        down ? src->be->mem_download : src->be->mem_copy;

    if (!ok) {
        return NULL;
    }
    *s = *src;
    s->be = be;
    s->own = (pic_workspace) { 0 };
    s->shared = NULL;
    for (int l = 0; l < src->n_layers; l++) {
        s->S[l] = s->conv[l] = s->kc[l] = s->vc[l] = NULL;
    }
    for (int l = 0; l < src->n_layers && ok; l++) {
        if (src->S[l] != NULL) {
            size_t ns = (size_t) src->Hv * src->dk * src->dv * sizeof(float);
            size_t nc = (size_t) src->conv_ch * (src->conv_k1 + 1) * sizeof(float);
            s->S[l] = be->mem_alloc(ns);
            s->conv[l] = be->mem_alloc(nc);
            ok = s->S[l] != NULL && s->conv[l] != NULL;
            if (ok) {
                cp(s->S[l], src->S[l], ns);
                cp(s->conv[l], src->conv[l], nc);
            }
        } else if (src->cap > 0) {
            size_t nk = (size_t) src->Hkv * src->cap * src->hd * sizeof(float);
            size_t nv = (size_t) src->Hkv * src->cap * src->vd * sizeof(float);

            s->kc[l] = be->mem_alloc(nk);
            s->vc[l] = nv > 0 ? be->mem_alloc(nv) : NULL;
            ok = s->kc[l] != NULL && (nv == 0 || s->vc[l] != NULL);
            if (ok) {
                cp(s->kc[l], src->kc[l], nk);
                if (nv > 0) {
                    cp(s->vc[l], src->vc[l], nv);
                }
            }
        }
    }
    if (!ok) {
        pic_state_free(s);
        return NULL;
    }
    return s;
}

pic_state *
pic_state_clone(const pic_state *src)
{
    return pic_state_copy_to(src, src->be);
}

pic_state *
pic_state_to_host(const pic_state *src)
{
    return pic_state_copy_to(src, pic_backend_cpu());
}

size_t
pic_state_bytes(const pic_state *s)
{
    size_t b = 0;

    for (int l = 0; l < s->n_layers; l++) {
        if (s->S[l] != NULL) {
            b += (size_t) s->Hv * s->dk * s->dv * sizeof(float);
            b += (size_t) s->conv_ch * s->conv_k1 * sizeof(float);
        } else {
            b += (size_t) s->Hkv * s->cap * (s->hd + s->vd) * sizeof(float);
        }
    }
    return b;
}
