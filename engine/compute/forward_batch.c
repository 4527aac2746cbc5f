/*
 * forward_batch.c — batched decode (forward.h): one token for each of
 * several sequences, each at its own position on its own state, through
 * the layer pass of forward.c with one span per sequence, so every weight
 * matrix is streamed once per step however many sequences run.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward_impl.h"

/* Check the batch before anything moves; 0 or -1 + err. */
static int
pic_forward_batch_check(const pic_model *m, pic_state *const *states,
                        const int *tokens, int n_seq, char *err, size_t errlen)
{
    const pic_config *c = &m->cfg;

    for (int i = 0; i < n_seq; i++) {
        pic_state *s = states[i];

        if (s == NULL || s->n_layers != c->n_layers) {
            snprintf(err, errlen, "%s: state %d missing or made for another model",
                     __func__, i);
            return -1;
        }
        if (tokens[i] < 0 || tokens[i] >= c->vocab) {
            snprintf(err, errlen, "%s: token id %d of sequence %d outside [0, %d)",
                     __func__, tokens[i], i, c->vocab);
            return -1;
        }
        if (s->pos < 0 || s->pos == INT32_MAX) {
            snprintf(err, errlen, "%s: bad position %d of sequence %d", __func__,
                     s->pos, i);
            return -1;
        }
        for (int j = 0; j < i; j++) {
            if (states[j] == s) {
                snprintf(err, errlen, "%s: sequences %d and %d share a state",
                         __func__, j, i);
                return -1;
            }
        }
        if (pic_state_reserve(s, s->pos + 1, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

int
pic_forward_batch(const pic_model *m, const pic_backend *be,
                  pic_state *const *states, const int *tokens, int n_seq,
                  float *logits, char *err, size_t errlen)
{
    const pic_config *c = &m->cfg;
    const pic_wmat   *lm = m->w.lm_head.data ? &m->w.lm_head : &m->w.embed;
    int               H = c->hidden, V = c->vocab;
    int               nb_max = n_seq < PIC_UBATCH ? n_seq : PIC_UBATCH;
    pic_fwd_span      sp[PIC_UBATCH];   /* one micro-batch; no per-step malloc */
    pic_ws            w;

    if (be == NULL) {                   /* the states' */
        be = states != NULL && n_seq > 0 && states[0] != NULL ? states[0]->be
                                                                : pic_backend_cpu();
    }
    if (n_seq <= 0 || states == NULL || tokens == NULL || logits == NULL) {
        snprintf(err, errlen, "%s: bad batch (n_seq=%d)", __func__, n_seq);
        return -1;
    }
    if (pic_forward_batch_check(m, states, tokens, n_seq, err, errlen) != 0) {
        return -1;
    }
    if (m->be != NULL ? m->be != be : !be->host) {
        snprintf(err, errlen, "%s: weights on backend %s, forward on %s", __func__,
                 m->be != NULL ? m->be->name : "cpu", be->name);
        return -1;
    }
    for (int i = 0; i < n_seq; i++) {
        if (states[i]->be != be && !(states[i]->be->host && be->host)) {
            snprintf(err, errlen, "%s: state %d on backend %s, forward on %s",
                     __func__, i, states[i]->be->name, be->name);
            return -1;
        }
    }
    if (pic_ws_get(c, states[0], nb_max, nb_max, &w) != 0) {  /* grows once, then reused */
        snprintf(err, errlen, "%s: out of memory for the workspace", __func__);
        return -1;
    }

    for (int u0 = 0; u0 < n_seq; u0 += PIC_UBATCH) {
        int nb = n_seq - u0 < PIC_UBATCH ? n_seq - u0 : PIC_UBATCH;

        float *out = be->host ? logits + (size_t) u0 * V : w.lg;

        for (int t = 0; t < nb; t++) {
            pic_state *s = states[u0 + t];

            w.h_ids[t] = tokens[u0 + t];
            sp[t] = (pic_fwd_span) { .s = s, .row = t, .n = 1, .p0 = s->pos };
        }
        pic_ws_put(be, w.ids, w.h_ids, (size_t) nb * sizeof(int));
        be->gather_rows(w.x, &m->w.embed, w.ids, nb);
        pic_forward_scale_embed(m, be, w.x, nb);
        if (pic_forward_layers(m, be, &w, nb, sp, nb, NULL) != 0) {
            snprintf(err, errlen, "%s: out of memory for the attention scratch", __func__);
            return -1;
        }
        be->rmsnorm(w.xn, w.x, m->w.final_norm, nb, H, c->rms_eps, c->norm_offset);
        be->matmul_w(out, w.xn, lm, nb, 0);
        pic_forward_scale_logits(m, be, out, nb);
        if (!be->host) {
            be->mem_download(logits + (size_t) u0 * V, out,
                             (size_t) nb * V * sizeof(float));
        }
        for (int t = 0; t < nb; t++) {
            states[u0 + t]->pos++;
        }
    }
    return 0;
}
