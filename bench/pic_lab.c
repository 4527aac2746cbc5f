/*
 * pic_lab.c — `pic-lab`: the experiment harness over the PIC state engine,
 * for tests and benchmarks (tests/integration/test_pic*.py, bench/fidelity.py,
 * bench/ttft.py, bench/checkpoints.py).  Built from libpic.a into
 * $(BUILD)/pic-lab; not part of pic-engine.
 *
 *   pic-lab run --model DIR [--spec FILE] [--threads N] [--weights F]
 *       JSON spec on stdin (or FILE): documents, seam widths, requests made
 *       of documents + a query, modes to run; prints one JSON object with
 *       entry sizes and build times, and per request and mode the TTFT,
 *       recomputed tokens, runs, composition FLOPs and — against full
 *       recompute — logit error, per-layer state rel-L2 / angle, teacher-
 *       forced KL and argmax match, first divergence of greedy decoding
 *       and the greedy ids themselves ("greedy", for exact-match accuracy).
 *   pic-lab dp
 *       checkpoint placement (checkpoint_dp.h) for a JSON op stream on stdin.
 *   pic-lab segment --model DIR [--marker M] (prompt on stdin)
 *       split a marked prompt into segments and token ids (PIC_SEPARATOR,
 *       the section "segment" below).
 *
 * Spec of `run` (every key optional except docs and requests):
 *   { "dtype": "f32"|"bf16", "ws": [8], "whole": true, "repeat": 1,
 *     "docs": [[ids...], ...],
 *     "requests": [ { "docs": [0, 1], "query": [ids...],
 *                     "modes": ["full", "prefix", "naive", "pic", "pic_ctx", "blend"],
 *                     "ws": [0, 8], "rs": [0.15], "compare": true, "teacher": [ids...],
 *                     "greedy": 16, "ideal": true, "logits": false } ] }
 * "pic" runs once per seam width (the request's ws, else the spec's);
 * "pic_ctx" uses oracle entries from the full-context forward (DESIGN §3.3
 * check 1); "blend" (all-attention models) runs once per ratio of "rs"
 * (default 0.15): selective recompute over the whole entries (blend.h).  Timings are the minimum over `repeat` runs, every mode alike (one
 * pic_assemble call each, state allocated before the timed region).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "assemble.h"
#include "blend.h"
#include "checkpoint_dp.h"
#include "drift.h"
#include "entry.h"
#include "forward.h"
#include "model.h"
#include "pic_buf.h"
#include "pic_kernels.h"
#include "pic_marker.h"
#include "pic_time.h"
#include "sample.h"
#include "state.h"
#include "tokenizer.h"

#define PIC_MAX_WS 16

static cJSON *
pic_read_json(const char *path, char *err, size_t errlen)
{
    FILE  *f = path == NULL || !strcmp(path, "-") ? stdin : fopen(path, "rb");
    size_t n = 0;
    char  *b;

    if (f == NULL) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    b = pic_read_stream(f, &n);
    if (f != stdin) {
        fclose(f);
    }
    if (b == NULL) {
        snprintf(err, errlen, "cannot read the spec");
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(b, n);
    free(b);
    if (j == NULL) {
        snprintf(err, errlen, "the spec is not valid JSON");
    }
    return j;
}

/* JSON array of ints (each in [0, vocab)) into a malloc'ed array; -1 if
 * malformed. */
static int
pic_json_ids(const cJSON *a, int vocab, int **ids, int *n)
{
    int cnt = cJSON_GetArraySize(a), i = 0;

    *ids = NULL;
    *n = 0;
    if (!cJSON_IsArray(a)) {
        return -1;
    }
    *ids = malloc((size_t) (cnt > 0 ? cnt : 1) * sizeof(int));
    if (*ids == NULL) {
        return -1;
    }
    for (const cJSON *x = a->child; x != NULL; x = x->next, i++) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= vocab) {
            free(*ids);
            *ids = NULL;
            return -1;
        }
        (*ids)[i] = (int) x->valuedouble;
    }
    *n = cnt;
    return 0;
}

static int
pic_json_int(const cJSON *o, const char *key, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    return cJSON_IsNumber(v) ? (int) v->valuedouble : (cJSON_IsBool(v) ? cJSON_IsTrue(v) : def);
}

/* --- comparison against full recompute --- */

typedef struct {
    double rel, angle;      /* rel-L2, angle in degrees */
} pic_diff;

static pic_diff
pic_vec_diff(const float *a, const float *b, size_t n)
{
    double num = 0.0, den = 0.0, aa = 0.0, ab = 0.0;
    pic_diff d;

    for (size_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        num += (x - y) * (x - y);
        den += y * y;
        aa += x * x;
        ab += x * y;
    }
    d.rel = den > 0 ? sqrt(num / den) : sqrt(num);
    double c = aa > 0 && den > 0 ? ab / sqrt(aa * den) : 1.0;
    c = c > 1.0 ? 1.0 : (c < -1.0 ? -1.0 : c);
    d.angle = acos(c) * 180.0 / M_PI;
    return d;
}

/* The reference: full recompute's state, last logits, teacher logits and
 * greedy continuation. */
typedef struct {
    pic_state *s;
    float     *last;        /* (V) */
    float     *teacher;     /* (nt, V) logits after each teacher token */
    int       *greedy;      /* (g) */
} pic_ref;

/* Per-layer comparison, teacher forcing, greedy, into o. */
static int
pic_compare(const pic_model *m, pic_state *s, const float *last, const pic_ref *ref,
            const int *teacher, int nt, int g, int n, cJSON *o, char *err,
            size_t errlen)
{
    const pic_config *c = &m->cfg;
    int               V = c->vocab, l0 = -1, deep = -1;
    cJSON            *layers = cJSON_AddArrayToObject(o, "layers");
    float             mx = 0.0f;

    for (int i = 0; i < V; i++) {
        mx = fmaxf(mx, fabsf(last[i] - ref->last[i]));
    }
    cJSON_AddNumberToObject(o, "logit_max_abs", mx);
    for (int l = 0; l < c->n_layers; l++) {
        cJSON   *lo = cJSON_CreateObject();
        pic_diff d;
        if (pic_layer_recurrent(c->layer_type[l])) {
            d = pic_vec_diff(s->S[l], ref->s->S[l], (size_t) s->Hv * s->dk * s->dv);
            l0 = l0 < 0 ? l : l0;
            deep = l;
            cJSON_AddStringToObject(lo, "type", "linear");
        } else {
            /* K over every position, heads concatenated */
            double num = 0.0, den = 0.0;
            for (int j = 0; j < s->Hkv; j++) {
                pic_diff dj = pic_vec_diff(s->kc[l] + (size_t) j * s->cap * s->hd,
                                           ref->s->kc[l] + (size_t) j * ref->s->cap * s->hd,
                                           (size_t) n * s->hd);
                num += dj.rel * dj.rel;
                den += 1.0;
            }
            d.rel = sqrt(num / den);
            d.angle = 0.0;
            cJSON_AddStringToObject(lo, "type", "full");
        }
        cJSON_AddNumberToObject(lo, "rel_l2", d.rel);
        cJSON_AddNumberToObject(lo, "angle_deg", d.angle);
        cJSON_AddItemToArray(layers, lo);
        if (l == l0) {
            cJSON_AddNumberToObject(o, "layer0_rel_l2", d.rel);
            cJSON_AddNumberToObject(o, "layer0_angle_deg", d.angle);
        }
        if (l == deep && pic_layer_recurrent(c->layer_type[l])) {
            cJSON_DeleteItemFromObject(o, "deep_rel_l2");
            cJSON_DeleteItemFromObject(o, "deep_angle_deg");
            cJSON_AddNumberToObject(o, "deep_rel_l2", d.rel);
            cJSON_AddNumberToObject(o, "deep_angle_deg", d.angle);
        }
    }
    cJSON_AddNumberToObject(o, "deep_layer", deep);

    /* greedy continuation from a copy, teacher forcing on s */
    if (g > 0) {
        pic_state *c2 = pic_state_clone(s);
        int       *gs = malloc((size_t) g * sizeof(int));
        if (c2 == NULL || gs == NULL
            || pic_drift_greedy(m, c2, last, n, g, gs, err, errlen) != 0) {
            pic_state_free(c2);
            free(gs);
            return -1;
        }
        int first = -1;
        for (int t = 0; t < g && first < 0; t++) {
            first = gs[t] != ref->greedy[t] ? t : -1;
        }
        cJSON_AddNumberToObject(o, "first_divergence", first);
        cJSON_AddNumberToObject(o, "greedy_tokens", g);
        cJSON *ga = cJSON_AddArrayToObject(o, "greedy");
        for (int t = 0; t < g; t++) {
            cJSON_AddItemToArray(ga, cJSON_CreateNumber(gs[t]));
        }
        pic_state_free(c2);
        free(gs);
    }
    pic_drift_stats d;
    if (pic_drift_teacher(m, s, last, ref->last, ref->teacher, teacher, nt, n, &d, err,
                          errlen) != 0) {
        return -1;
    }
    cJSON_AddNumberToObject(o, "kl_mean", d.kl_sum / d.positions);
    cJSON_AddNumberToObject(o, "kl_max", d.kl_max);
    cJSON_AddNumberToObject(o, "argmax_match", (double) d.matched / d.positions);
    cJSON_AddNumberToObject(o, "teacher_tokens", d.positions);
    return 0;
}

/* --- run --- */

static void
pic_bytes_json(cJSON *o, const char *key, const pic_entry *e)
{
    if (e == NULL) {
        return;
    }
    cJSON *b = cJSON_AddObjectToObject(o, key);
    cJSON_AddNumberToObject(b, "T", (double) e->bytes_T);
    cJSON_AddNumberToObject(b, "S", (double) e->bytes_S);
    cJSON_AddNumberToObject(b, "conv", (double) e->bytes_conv);
    cJSON_AddNumberToObject(b, "K", (double) e->bytes_K);
    cJSON_AddNumberToObject(b, "V", (double) e->bytes_V);
    cJSON_AddNumberToObject(b, "total", (double) e->bytes);
    cJSON_AddNumberToObject(b, "interior_tokens", e->i1 - e->i0);
}

static void
pic_stats_json(cJSON *o, const pic_assemble_stats *st)
{
    cJSON_AddNumberToObject(o, "ttft_s", st->t_total);
    cJSON_AddNumberToObject(o, "recomputed", st->n_recomputed);
    cJSON_AddNumberToObject(o, "reused", st->n_reused);
    cJSON_AddNumberToObject(o, "prefix_tokens", st->n_prefix);
    cJSON_AddNumberToObject(o, "runs", st->n_runs);
    cJSON_AddNumberToObject(o, "composed", st->n_composed);
    cJSON_AddNumberToObject(o, "rejected", st->n_rejected);
    cJSON_AddNumberToObject(o, "partial", st->n_partial);
    cJSON_AddNumberToObject(o, "compose_flops", st->compose_flops);
    cJSON_AddNumberToObject(o, "t_forward_s", st->t_forward);
    cJSON_AddNumberToObject(o, "t_compose_s", st->t_compose);
    cJSON_AddNumberToObject(o, "t_kv_s", st->t_kv);
    cJSON_AddNumberToObject(o, "t_kv_s", st->t_kv);
}

typedef struct {
    const pic_model *m;
    int              n_docs, n_ws;
    int            **doc;           /* [n_docs] token arrays */
    int             *doc_n;
    int              ws[PIC_MAX_WS];
    pic_entry      **seam[PIC_MAX_WS];  /* [n_ws][n_docs] */
    pic_entry      **whole;         /* [n_docs] or NULL */
    pic_dtype        dtype;
    int              repeat;
} pic_run_ctx;

static int
pic_ws_index(const pic_run_ctx *R, int w)
{
    for (int i = 0; i < R->n_ws; i++) {
        if (R->ws[i] == w) {
            return i;
        }
    }
    return -1;
}

/* One mode of one request: assemble (repeat times, keep the fastest),
 * compare against ref when given.  Appends an object to arr. */
static int
pic_run_mode(pic_run_ctx *R, const char *mode_name, pic_mode mode, int w, double ratio,
             pic_asm_segment *sg, int n_seg, const int *toks, int n, pic_ref *ref,
             const int *teacher, int nt, int g, int want_logits, pic_state *s,
             float *logits, cJSON *arr, char *err, size_t errlen)
{
    const pic_model   *m = R->m;
    pic_assemble_stats st, best = { 0 };
    int                reps = R->repeat;     /* every mode alike (DESIGN §5) */
    cJSON             *o = cJSON_CreateObject();

    cJSON_AddItemToArray(arr, o);
    cJSON_AddStringToObject(o, "mode", mode_name);
    if (w >= 0) {
        cJSON_AddNumberToObject(o, "w", w);
    }
    if (ratio >= 0) {
        cJSON_AddNumberToObject(o, "r", ratio);
    }
    best.t_total = DBL_MAX;
    for (int r = 0; r < reps; r++) {
        if (ratio >= 0 ? pic_assemble_blend(m, NULL, s, sg, n_seg, ratio, logits, &st, err,
                                            errlen) != 0
                       : pic_assemble(m, NULL, s, sg, n_seg, mode, logits, &st, err,
                                      errlen) != 0) {
            return -1;
        }
        if (st.t_total < best.t_total) {
            best = st;
        }
    }
    pic_stats_json(o, &best);
    cJSON_AddNumberToObject(o, "argmax", pic_sample_argmax(logits, m->cfg.vocab));
    char wtag[24] = "";
    if (w >= 0) {
        snprintf(wtag, sizeof(wtag), " w=%d", w);
    } else if (ratio >= 0) {
        snprintf(wtag, sizeof(wtag), " r=%.2f", ratio);
    }
    fprintf(stderr, "pic run: %d tokens, %s%s: %.3f s, %d recomputed\n", n, mode_name,
            wtag, best.t_total, best.n_recomputed);
    if (want_logits) {
        cJSON *la = cJSON_AddArrayToObject(o, "logits");
        for (int i = 0; i < m->cfg.vocab; i++) {
            cJSON_AddItemToArray(la, cJSON_CreateNumber(logits[i]));
        }
    }
    if (ref != NULL && ref->s != NULL
        && pic_compare(m, s, logits, ref, teacher, nt, g, n, o, err, errlen) != 0) {
        return -1;
    }
    (void) toks;
    return 0;
}

static int
pic_run_request(pic_run_ctx *R, const cJSON *rq, cJSON *out_arr, char *err,
                size_t errlen)
{
    const pic_model *m = R->m;
    int              V = m->cfg.vocab, rc = -1;
    const cJSON     *jd = cJSON_GetObjectItemCaseSensitive(rq, "docs");
    const cJSON     *jm = cJSON_GetObjectItemCaseSensitive(rq, "modes");
    const cJSON     *jw = cJSON_GetObjectItemCaseSensitive(rq, "ws");
    const cJSON     *jr = cJSON_GetObjectItemCaseSensitive(rq, "rs");
    double           rs[PIC_MAX_WS] = { 0.15 };
    int              n_rs = 1;
    int             *query = NULL, nq = 0, *teacher = NULL, nt = 0;
    int              n_seg = 0, n = 0, g = pic_json_int(rq, "greedy", 0);
    int              compare = pic_json_int(rq, "compare", 0);
    int              ideal = pic_json_int(rq, "ideal", 0);
    int              want_logits = pic_json_int(rq, "logits", 0);
    int              ws[PIC_MAX_WS], n_ws = 0;
    int             *toks = NULL, *seg_len = NULL, *doc_ids = NULL;
    pic_asm_segment *sg = NULL;
    pic_state       *s = NULL;
    float           *logits = NULL;
    pic_ref          ref = { 0 };
    pic_entry      **ctx = NULL;
    cJSON           *o = cJSON_CreateObject(), *runs;

    cJSON_AddItemToArray(out_arr, o);
    if (!cJSON_IsArray(jd) || !cJSON_IsArray(jm)) {
        snprintf(err, errlen, "a request needs docs and modes arrays");
        return -1;
    }
    if (pic_json_ids(cJSON_GetObjectItemCaseSensitive(rq, "query"), V, &query, &nq) != 0
        && cJSON_GetObjectItemCaseSensitive(rq, "query") != NULL) {
        snprintf(err, errlen, "bad query ids");
        return -1;
    }
    if (cJSON_GetObjectItemCaseSensitive(rq, "teacher") != NULL
        && pic_json_ids(cJSON_GetObjectItemCaseSensitive(rq, "teacher"), V, &teacher,
                        &nt) != 0) {
        snprintf(err, errlen, "bad teacher ids");
        goto done;
    }
    if (cJSON_IsArray(jw)) {
        for (const cJSON *x = jw->child; x && n_ws < PIC_MAX_WS; x = x->next) {
            ws[n_ws++] = (int) x->valuedouble;
        }
    } else {
        n_ws = R->n_ws;
        memcpy(ws, R->ws, sizeof(int) * (size_t) n_ws);
    }
    if (cJSON_IsArray(jr)) {
        n_rs = 0;
        for (const cJSON *x = jr->child; x && n_rs < PIC_MAX_WS; x = x->next) {
            rs[n_rs++] = x->valuedouble;
        }
    }
    int nd = cJSON_GetArraySize(jd);
    n_seg = nd + (nq > 0);
    sg = calloc((size_t) n_seg + 1, sizeof(*sg));
    seg_len = calloc((size_t) n_seg + 1, sizeof(int));
    doc_ids = calloc((size_t) nd + 1, sizeof(int));
    if (sg == NULL || seg_len == NULL || doc_ids == NULL) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    int k = 0;
    for (const cJSON *x = jd->child; x != NULL; x = x->next, k++) {
        int d = (int) x->valuedouble;
        if (!cJSON_IsNumber(x) || d < 0 || d >= R->n_docs) {
            snprintf(err, errlen, "request names doc %d of %d", d, R->n_docs);
            goto done;
        }
        doc_ids[k] = d;
        seg_len[k] = R->doc_n[d];
        n += R->doc_n[d];
    }
    seg_len[nd] = nq;
    n += nq;
    toks = malloc((size_t) (n + nt + 1) * sizeof(int));
    logits = malloc((size_t) V * sizeof(float));
    s = pic_state_init(&m->cfg, 0, err, errlen);
    if (toks == NULL || logits == NULL || s == NULL) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int i = 0, off = 0; i < n_seg; off += seg_len[i], i++) {
        const int *src = i < nd ? R->doc[doc_ids[i]] : query;
        memcpy(toks + off, src, (size_t) seg_len[i] * sizeof(int));
        sg[i].tokens = toks + off;
        sg[i].n = seg_len[i];
    }
    cJSON_AddNumberToObject(o, "n_tokens", n);
    cJSON_AddNumberToObject(o, "n_segments", n_seg);
    runs = cJSON_AddArrayToObject(o, "runs");

    /* the reference first when anything is compared */
    if (compare) {
        ref.last = malloc((size_t) V * sizeof(float));
        ref.teacher = malloc((size_t) (nt > 0 ? nt : 1) * V * sizeof(float));
        ref.greedy = malloc((size_t) (g > 0 ? g : 1) * sizeof(int));
        ref.s = pic_state_init(&m->cfg, 0, err, errlen);
        if (ref.last == NULL || ref.teacher == NULL || ref.greedy == NULL || ref.s == NULL) {
            snprintf(err, errlen, "out of memory");
            goto done;
        }
        for (int i = 0; i < n_seg; i++) {
            sg[i].entry = NULL;
        }
        pic_assemble_stats st;
        if (pic_assemble(m, NULL, ref.s, sg, n_seg, PIC_MODE_FULL, ref.last, &st, err,
                         errlen) != 0) {
            goto done;
        }
        if (g > 0) {
            pic_state *c2 = pic_state_clone(ref.s);
            if (c2 == NULL || pic_drift_greedy(m, c2, ref.last, n, g, ref.greedy, err,
                                         errlen) != 0) {
                pic_state_free(c2);
                goto done;
            }
            pic_state_free(c2);
        }
        if (nt > 0) {
            pic_state *c2 = pic_state_clone(ref.s);
            if (c2 == NULL || pic_forward(m, NULL, c2, teacher, nt, n, PIC_LOGITS_ALL,
                                          ref.teacher, NULL, err, errlen) != 0) {
                pic_state_free(c2);
                goto done;
            }
            pic_state_free(c2);
        }
    }

    for (const cJSON *x = jm->child; x != NULL; x = x->next) {
        const char *name = cJSON_IsString(x) ? x->valuestring : "";
        pic_mode    mode;
        int         is_ctx = !strcmp(name, "pic_ctx"), is_blend = !strcmp(name, "blend");

        if (!is_ctx && !is_blend && pic_mode_parse(name, &mode) != 0) {
            snprintf(err, errlen, "unknown mode '%s'", name);
            goto done;
        }
        if (is_ctx) {
            mode = PIC_MODE_PIC;
        }
        if (is_blend) {
            mode = PIC_MODE_NAIVE;          /* its entries: the whole ones */
            if (R->whole == NULL) {
                snprintf(err, errlen, "blend needs whole entries (spec \"whole\": true)");
                goto done;
            }
        }
        int n_pass = mode == PIC_MODE_PIC ? n_ws : is_blend ? n_rs : 1;
        for (int p = 0; p < n_pass; p++) {
            int    w = mode == PIC_MODE_PIC ? ws[p] : -1;
            double ratio = is_blend ? rs[p] : -1.0;
            int wi = w >= 0 ? pic_ws_index(R, w) : -1;

            if (mode == PIC_MODE_PIC && !is_ctx && wi < 0) {
                snprintf(err, errlen, "no entries built for w=%d", w);
                goto done;
            }
            for (int i = 0; i < n_seg; i++) {
                pic_entry *e = NULL;
                if (i < nd) {
                    int d = doc_ids[i];
                    switch (mode) {
                    case PIC_MODE_FULL:
                        break;
                    case PIC_MODE_PREFIX:
                    case PIC_MODE_NAIVE:
                        e = R->whole ? R->whole[d] : NULL;
                        break;
                    case PIC_MODE_PIC:
                        e = (i == 0 && R->whole) ? R->whole[d] : R->seam[wi < 0 ? 0 : wi][d];
                        break;
                    }
                }
                sg[i].entry = e;
            }
            if (is_ctx) {
                pic_entry_opts eo = { .w = w, .dtype = R->dtype };
                ctx = calloc((size_t) n_seg, sizeof(*ctx));
                if (ctx == NULL || pic_entry_build_context(m, NULL, toks, n, seg_len,
                                                           n_seg, &eo, ctx, err,
                                                           errlen) != 0) {
                    goto done;
                }
                for (int i = 0; i < n_seg; i++) {
                    sg[i].entry = i < nd ? ctx[i] : NULL;
                }
            }
            if (pic_run_mode(R, name, mode, w, ratio, sg, n_seg, toks, n,
                             compare ? &ref : NULL, teacher, nt, g, want_logits, s,
                             logits, runs, err, errlen) != 0) {
                goto done;
            }
            if (ctx != NULL) {
                for (int i = 0; i < n_seg; i++) {
                    pic_entry_unref(ctx[i]);
                }
                free(ctx);
                ctx = NULL;
            }
            /* ideal: the recomputed tokens alone, one prefill from 0 */
            if (ideal && mode == PIC_MODE_PIC && !is_ctx) {
                cJSON *last = cJSON_GetArrayItem(runs, cJSON_GetArraySize(runs) - 1);
                int    nr = (int) cJSON_GetObjectItem(last, "recomputed")->valuedouble;
                double best = DBL_MAX;
                for (int r = 0; r < R->repeat && nr > 0; r++) {
                    double t0 = pic_now_s();
                    pic_state_reset(s);
                    if (pic_forward(m, NULL, s, toks, nr, 0, PIC_LOGITS_LAST, logits,
                                    NULL, err, errlen) != 0) {
                        goto done;
                    }
                    best = fmin(best, pic_now_s() - t0);
                }
                cJSON_AddNumberToObject(last, "ideal_prefill_s", nr > 0 ? best : 0.0);
            }
        }
    }
    rc = 0;

done:
    if (ctx != NULL) {
        for (int i = 0; i < n_seg; i++) {
            pic_entry_unref(ctx[i]);
        }
        free(ctx);
    }
    pic_state_free(ref.s);
    free(ref.last);
    free(ref.teacher);
    free(ref.greedy);
    pic_state_free(s);
    free(logits);
    free(toks);
    free(sg);
    free(seg_len);
    free(doc_ids);
    free(query);
    free(teacher);
    return rc;
}

static int
pic_pic_run(int argc, char **argv)
{
    const char  *dir = NULL, *spec = "-", *weights = NULL;
    int          threads = 0, rc = 1;
    pic_weights_format wf;
    pic_model   *m = NULL;
    cJSON       *j = NULL, *out = NULL;
    pic_run_ctx  R;
    char         err[512];

    memset(&R, 0, sizeof(R));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "pic-lab run: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--model")) {
            dir = v;
        } else if (!strcmp(a, "--spec")) {
            spec = v;
        } else if (!strcmp(a, "--threads")) {
            threads = atoi(v);
        } else if (!strcmp(a, "--weights")) {
            weights = v;
        } else {
            fprintf(stderr, "pic-lab run: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (dir == NULL) {
        fprintf(stderr, "usage: pic-lab run --model DIR [--spec FILE] [--threads N] [--weights F]\n");
        return 2;
    }
    if (pic_weights_choose(weights, 1, &wf, err, sizeof(err)) != 0) {
        fprintf(stderr, "pic-lab run: %s\n", err);
        return 2;
    }
    pic_kernels_set_threads(threads);
    j = pic_read_json(spec, err, sizeof(err));
    if (j == NULL) {
        fprintf(stderr, "pic-lab run: %s\n", err);
        return 2;
    }
    double t0 = pic_now_s();
    m = pic_model_load_as(dir, wf, err, sizeof(err));
    if (m == NULL) {
        fprintf(stderr, "pic-lab run: %s\n", err);
        goto done;
    }
    R.m = m;
    out = cJSON_CreateObject();
    cJSON *mo = cJSON_AddObjectToObject(out, "model");
    char   fp[32];
    snprintf(fp, sizeof(fp), "%016llx", (unsigned long long) m->fingerprint);
    cJSON_AddStringToObject(mo, "dir", dir);
    cJSON_AddStringToObject(mo, "fingerprint", fp);
    cJSON_AddNumberToObject(mo, "layers", m->cfg.n_layers);
    cJSON_AddNumberToObject(mo, "hidden", m->cfg.hidden);
    cJSON_AddNumberToObject(mo, "load_s", pic_now_s() - t0);
    cJSON_AddNumberToObject(mo, "threads", pic_kernels_threads());

    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(j, "docs");
    const cJSON *jw = cJSON_GetObjectItemCaseSensitive(j, "ws");
    const cJSON *jt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(j, "requests");
    if (!cJSON_IsArray(jd) || !cJSON_IsArray(jr)) {
        fprintf(stderr, "pic-lab run: the spec needs docs and requests\n");
        goto done;
    }
    R.dtype = cJSON_IsString(jt) && !strcmp(jt->valuestring, "bf16") ? PIC_DTYPE_BF16
                                                                      : PIC_DTYPE_F32;
    R.repeat = pic_json_int(j, "repeat", 1);
    R.repeat = R.repeat < 1 ? 1 : R.repeat;
    if (cJSON_IsArray(jw)) {
        for (const cJSON *x = jw->child; x && R.n_ws < PIC_MAX_WS; x = x->next) {
            R.ws[R.n_ws++] = (int) x->valuedouble;
        }
    } else {
        R.ws[R.n_ws++] = 8;
    }
    R.n_docs = cJSON_GetArraySize(jd);
    R.doc = calloc((size_t) R.n_docs + 1, sizeof(int *));
    R.doc_n = calloc((size_t) R.n_docs + 1, sizeof(int));
    R.whole = pic_json_int(j, "whole", 1) ? calloc((size_t) R.n_docs + 1, sizeof(pic_entry *))
                                          : NULL;
    for (int wi = 0; wi < R.n_ws; wi++) {
        R.seam[wi] = calloc((size_t) R.n_docs + 1, sizeof(pic_entry *));
    }
    /* warm-up: thread pools and page faults out of the first timing */
    {
        pic_state *ws = pic_state_init(&m->cfg, 0, err, sizeof(err));
        int        wt[16] = { 0 };
        if (ws != NULL) {
            (void) pic_forward(m, NULL, ws, wt, 16, 0, PIC_LOGITS_NONE, NULL, NULL,
                               err, sizeof(err));
        }
        pic_state_free(ws);
    }
    cJSON *ents = cJSON_AddArrayToObject(out, "entries");
    int    d = 0;
    for (const cJSON *x = jd->child; x != NULL; x = x->next, d++) {
        if (pic_json_ids(x, m->cfg.vocab, &R.doc[d], &R.doc_n[d]) != 0 || R.doc_n[d] == 0) {
            fprintf(stderr, "pic-lab run: doc %d: bad token ids\n", d);
            goto done;
        }
        for (int wi = 0; wi < R.n_ws; wi++) {
            pic_entry_opts eo = { .w = R.ws[wi], .dtype = R.dtype };
            double         tb = pic_now_s();
            if (pic_entry_build(m, NULL, R.doc[d], R.doc_n[d], &eo, &R.seam[wi][d],
                                wi == 0 && R.whole ? &R.whole[d] : NULL, err,
                                sizeof(err)) != 0) {
                fprintf(stderr, "pic-lab run: doc %d: %s\n", d, err);
                goto done;
            }
            fprintf(stderr, "pic run: doc %d (%d tokens) w=%d built in %.2f s\n", d,
                    R.doc_n[d], R.ws[wi], pic_now_s() - tb);
            cJSON *eo_j = cJSON_CreateObject();
            cJSON_AddNumberToObject(eo_j, "doc", d);
            cJSON_AddNumberToObject(eo_j, "w", R.ws[wi]);
            cJSON_AddNumberToObject(eo_j, "n_tokens", R.doc_n[d]);
            cJSON_AddNumberToObject(eo_j, "build_s", pic_now_s() - tb);
            pic_bytes_json(eo_j, "seam_bytes", R.seam[wi][d]);
            if (wi == 0 && R.whole) {
                pic_bytes_json(eo_j, "whole_bytes", R.whole[d]);
            }
            cJSON_AddItemToArray(ents, eo_j);
        }
    }
    cJSON *reqs = cJSON_AddArrayToObject(out, "requests");
    for (const cJSON *x = jr->child; x != NULL; x = x->next) {
        if (pic_run_request(&R, x, reqs, err, sizeof(err)) != 0) {
            fprintf(stderr, "pic-lab run: %s\n", err);
            goto done;
        }
    }
    char *txt = cJSON_PrintUnformatted(out);
    if (txt != NULL) {
        puts(txt);
        free(txt);
        rc = 0;
    }

done:
    for (int i = 0; i < R.n_docs; i++) {
        free(R.doc ? R.doc[i] : NULL);
        for (int wi = 0; wi < R.n_ws; wi++) {
            pic_entry_unref(R.seam[wi] ? R.seam[wi][i] : NULL);
        }
        pic_entry_unref(R.whole ? R.whole[i] : NULL);
    }
    for (int wi = 0; wi < R.n_ws; wi++) {
        free(R.seam[wi]);
    }
    free(R.doc);
    free(R.doc_n);
    free(R.whole);
    cJSON_Delete(j);
    cJSON_Delete(out);
    pic_model_free(m);
    return rc;
}

/* --- dp --- */

/* Ops on stdin: {"block":64, "M":4, "every":10, "decay":0.99, "min_history":20,
 *   "ops": [["observe", d], ["plan", n], ["solve", n], ...]}
 * "plan" uses the live policy (balanced until enough history, then the
 * DP re-solved every `every` observations); "solve" forces the DP on the
 * current histogram; "balanced"/"block"/"log" give the fixed placements.
 * Prints {"plans": [[positions...] per plan/solve op]}. */
static int
pic_pic_dp(int argc, char **argv)
{
    char   err[256];
    cJSON *j = pic_read_json(argc > 1 ? argv[1] : "-", err, sizeof(err));
    int    rc = 1;

    if (j == NULL) {
        fprintf(stderr, "pic-lab dp: %s\n", err);
        return 2;
    }
    pic_ckpt_opts o = {
        .block = pic_json_int(j, "block", 64),
        .m = pic_json_int(j, "M", 4),
        .resolve_every = pic_json_int(j, "every", 10),
        .min_history = pic_json_int(j, "min_history", 0),
        .max_tokens = pic_json_int(j, "max_tokens", 1 << 17),
    };
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(j, "decay");
    o.decay = cJSON_IsNumber(jd) ? jd->valuedouble : 0.99;
    pic_ckpt_dp *dp = pic_ckpt_dp_init(&o, err, sizeof(err));
    cJSON       *out = cJSON_CreateObject(), *plans = cJSON_AddArrayToObject(out, "plans");
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(j, "ops");
    int         *pos = malloc((size_t) (o.m > 0 ? o.m : 1) * sizeof(int));

    if (dp == NULL || pos == NULL || !cJSON_IsArray(ops)) {
        fprintf(stderr, "pic-lab dp: %s\n", dp == NULL ? err : "bad ops");
        goto done;
    }
    for (const cJSON *x = ops->child; x != NULL; x = x->next) {
        const cJSON *op = cJSON_GetArrayItem(x, 0), *arg = cJSON_GetArrayItem(x, 1);
        if (!cJSON_IsString(op) || !cJSON_IsNumber(arg)) {
            fprintf(stderr, "pic-lab dp: bad op\n");
            goto done;
        }
        int v = (int) arg->valuedouble, cnt = -1;
        if (!strcmp(op->valuestring, "observe")) {
            pic_ckpt_dp_observe(dp, v);
            continue;
        } else if (!strcmp(op->valuestring, "plan")) {
            cnt = pic_ckpt_dp_plan(dp, v, pos);
        } else if (!strcmp(op->valuestring, "solve")) {
            cnt = pic_ckpt_dp_solve_now(dp, v, pos);
        } else if (!strcmp(op->valuestring, "balanced")) {
            cnt = pic_ckpt_place(PIC_CKPT_BALANCED, o.block, o.m, v, pos);
        } else if (!strcmp(op->valuestring, "block")) {
            cnt = pic_ckpt_place(PIC_CKPT_BLOCK, o.block, o.m, v, pos);
        } else if (!strcmp(op->valuestring, "log")) {
            cnt = pic_ckpt_place(PIC_CKPT_LOG, o.block, o.m, v, pos);
        } else {
            fprintf(stderr, "pic-lab dp: unknown op %s\n", op->valuestring);
            goto done;
        }
        cJSON *pa = cJSON_CreateArray();
        for (int i = 0; i < cnt; i++) {
            cJSON_AddItemToArray(pa, cJSON_CreateNumber(pos[i]));
        }
        cJSON_AddItemToArray(plans, pa);
    }
    char *txt = cJSON_PrintUnformatted(out);
    if (txt != NULL) {
        puts(txt);
        free(txt);
        rc = 0;
    }

done:
    free(pos);
    pic_ckpt_dp_free(dp);
    cJSON_Delete(out);
    cJSON_Delete(j);
    return rc;
}

/* --- segment: the PIC_SEPARATOR split ---
 *
 * HYPIC's PIC_SEPARATOR prompts, kept as an experiment of this harness (the
 * engine and the gateway segment through the core pipeline, pic_segment.h):
 * a plain prompt containing the separator marker is split at the markers,
 * and each segment is tokenized on its own, so a document yields the same
 * ids wherever it appears.  The markers themselves are removed.  A prompt
 * that is exactly marker + one document + marker is a cache-warming request
 * (warm_only).  The marker is the core's (pic_marker.h: default
 * "<|pic_sep|>", any 2..64-byte marker it accepts).
 */

typedef struct {
    size_t  offset;         /* the segment's bytes in the prompt */
    size_t  length;
    int    *ids;            /* (n_ids) its tokens, encoded alone */
    size_t  n_ids;
} pic_split_segment;

typedef struct {
    pic_split_segment *seg;   /* (n) non-empty pieces in prompt order */
    int                  n;
    int                  marked;    /* the prompt contained the marker */
    int                  warm_only; /* marker + one document + marker */
} pic_segmented;

/* Free what pic_segmenter_split put in s (s itself is the caller's). */
static void
pic_segmented_free(pic_segmented *s)
{
    if (s == NULL) {
        return;
    }
    for (int i = 0; i < s->n; i++) {
        free(s->seg[i].ids);
    }
    free(s->seg);
    memset(s, 0, sizeof(*s));
}

/* Tokenize text[off, off+len) into piece p. */
static int
pic_segmenter_encode(const pic_tokenizer *tok, const char *text, size_t off,
                     size_t len, pic_split_segment *p, char *err, size_t errlen)
{
    int32_t *ids = NULL;
    size_t   n = 0;
    int      rc = pic_tokenizer_encode(tok, text + off, len, &ids, &n);

    if (rc != PIC_TOKENIZER_OK) {
        snprintf(err, errlen, "%s: segment at byte %zu: %s", __func__, off,
                 rc == PIC_TOKENIZER_EUTF8 ? "invalid UTF-8" : "tokenizer error");
        return -1;
    }
    p->offset = off;
    p->length = len;
    p->n_ids = n;
    p->ids = malloc((n > 0 ? n : 1) * sizeof(int));
    if (p->ids == NULL) {
        free(ids);
        snprintf(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        p->ids[i] = (int) ids[i];
    }
    free(ids);
    return 0;
}

/* Split text (len bytes) at marker (NULL: PIC_MARKER_DEFAULT) into out and
 * tokenize each piece with tok; a prompt without the marker is one
 * segment.  -1 + err on a bad marker, invalid UTF-8 or OOM (out is then
 * empty). */
static int
pic_segmenter_split(const pic_tokenizer *tok, const char *marker,
                    const char *text, size_t len, pic_segmented *out,
                    char *err, size_t errlen)
{
    pic_marker mk;
    pic_error  perr;
    size_t     pos = 0, start, end, cap = 8;

    memset(out, 0, sizeof(*out));
    if (pic_marker_init(&mk, marker, marker != NULL ? strlen(marker) : 0, &perr) != 0) {
        snprintf(err, errlen, "%s: %s", __func__, perr.message);
        return -1;
    }
    out->seg = calloc(cap, sizeof(*out->seg));
    if (out->seg == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    out->marked = pic_marker_find(&mk, text, len, 0) < len;
    while (pic_marker_next(&mk, text, len, &pos, &start, &end)) {
        if (end == start) {
            continue;
        }
        if (pic_grow((void **) &out->seg, &cap, (size_t) out->n + 1, sizeof(*out->seg)) != 0) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            pic_segmented_free(out);
            return -1;
        }
        if (pic_segmenter_encode(tok, text, start, end - start, &out->seg[out->n],
                                 err, errlen) != 0) {
            pic_segmented_free(out);
            return -1;
        }
        out->n++;
    }
    /* warm-only: marker first, marker last, one document between */
    out->warm_only = out->marked && out->n == 1 && len >= 2 * mk.len
                     && memcmp(text, mk.str, mk.len) == 0
                     && memcmp(text + len - mk.len, mk.str, mk.len) == 0;
    return 0;
}

static int
pic_pic_segment(int argc, char **argv)
{
    const char     *dir = NULL, *marker = NULL;
    char            err[512];
    size_t          len = 0;
    int             rc = 1;
    pic_tokenizer  *tok = NULL;
    pic_segmented   sp;
    char           *text = NULL;

    memset(&sp, 0, sizeof(sp));
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) {
            dir = argv[i + 1];
        } else if (!strcmp(argv[i], "--marker")) {
            marker = argv[i + 1];
        } else {
            fprintf(stderr, "pic-lab segment: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (dir == NULL) {
        fprintf(stderr, "usage: pic-lab segment --model DIR [--marker M] < prompt\n");
        return 2;
    }
    tok = pic_checkpoint_tokenizer(dir, err, sizeof(err));
    text = pic_read_stream(stdin, &len);
    if (tok == NULL || text == NULL) {
        fprintf(stderr, "pic-lab segment: %s\n", tok == NULL ? err : "cannot read");
        goto done;
    }
    if (pic_segmenter_split(tok, marker, text, len, &sp, err, sizeof(err)) != 0) {
        fprintf(stderr, "pic-lab segment: %s\n", err);
        goto done;
    }
    cJSON *out = cJSON_CreateObject(), *segs = cJSON_AddArrayToObject(out, "segments");
    cJSON_AddBoolToObject(out, "warm_only", sp.warm_only);
    cJSON_AddBoolToObject(out, "marked", sp.marked);
    for (int i = 0; i < sp.n; i++) {
        cJSON *so = cJSON_CreateObject(), *ids = cJSON_AddArrayToObject(so, "ids");
        cJSON_AddNumberToObject(so, "offset", (double) sp.seg[i].offset);
        cJSON_AddNumberToObject(so, "length", (double) sp.seg[i].length);
        for (size_t t = 0; t < sp.seg[i].n_ids; t++) {
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(sp.seg[i].ids[t]));
        }
        cJSON_AddItemToArray(segs, so);
    }
    char *txt = cJSON_PrintUnformatted(out);
    if (txt != NULL) {
        puts(txt);
        free(txt);
        rc = 0;
    }
    cJSON_Delete(out);

done:
    pic_segmented_free(&sp);
    pic_tokenizer_free(tok);
    free(text);
    return rc;
}

int
main(int argc, char **argv)
{
    pic_kernels_process_env(argv);

    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: pic-lab run --model DIR [--spec FILE] [--threads N] [--weights F]\n"
                "       pic-lab dp [FILE]\n"
                "       pic-lab segment --model DIR [--marker M] < prompt\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "run")) {
        return pic_pic_run(argc - 1, argv + 1);
    }
    if (!strcmp(argv[1], "dp")) {
        return pic_pic_dp(argc - 1, argv + 1);
    }
    if (!strcmp(argv[1], "segment")) {
        return pic_pic_segment(argc - 1, argv + 1);
    }
    fprintf(stderr, "pic-lab: unknown subcommand %s\n", argv[1]);
    return 2;
}
