/*
 * calibrate.c — measure the drift of each seam width on sample prompts and
 * choose one; the calibration file (calibrate.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "assemble.h"
#include "calibrate.h"
#include "drift.h"
#include "forward.h"
#include "pic_buf.h"
#include "sample.h"
#include "state.h"

/* Sums of one variant over the prompts it measured. */
typedef struct {
    double kl_prompts;      /* Σ over prompts of the prompt's mean KL */
    double kl_max;
    long   matched;         /* answer positions whose argmax agrees */
    long   positions;       /* answer positions compared */
    long   same;            /* prompts with full recompute's greedy answer */
    long   pic_tokens;      /* tokens served from seam entries */
    long   tokens;          /* prompt tokens */
    long   prompts;
} pic_calib_sum;

/* How a variant serves the PIC segments of each class: a width, or -1
 * (recomputed).  class_only: a prompt without a segment of the composed
 * class is not measured (its answer would be full recompute's). */
typedef struct {
    int w_doc, w_other;
    int class_only;
} pic_calib_variant;

/* The reference of one prompt: full recompute's answer and its logits. */
typedef struct {
    float *last;            /* (V) logits of the last prompt token */
    float *teacher;         /* (k − 1, V) logits after each answer token but the last */
    int   *answer;          /* (k) greedy answer, up to a stop token */
    int    k;
} pic_calib_ref;

/* Compare state s (a prompt of n tokens, last logits last (V)) composed at
 * one width against ref into sum; s is advanced.  0 or -1 + err. */
static int
pic_calib_compare(const pic_model *m, pic_state *s, const float *last, int n,
                  const pic_calib_ref *ref, pic_calib_sum *sum, char *err, size_t errlen)
{
    int              k = ref->k, rc = -1;
    int             *g = malloc((size_t) k * sizeof(int));     /* (k) */
    pic_state       *c = pic_state_clone(s);
    pic_drift_stats  d;

    if (g == NULL || c == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        goto done;
    }
    if (pic_drift_greedy(m, c, last, n, k, g, err, errlen) != 0
        || pic_drift_teacher(m, s, last, ref->last, ref->teacher, ref->answer, k - 1, n, &d,
                             err, errlen) != 0) {
        goto done;
    }
    sum->same += memcmp(g, ref->answer, (size_t) k * sizeof(int)) == 0;
    sum->kl_prompts += d.kl_sum / d.positions;
    sum->kl_max = fmax(sum->kl_max, d.kl_max);
    sum->matched += d.matched;
    sum->positions += d.positions;
    sum->prompts++;
    rc = 0;
done:
    pic_state_free(c);
    free(g);
    return rc;
}

/* Full recompute of the prompt in sg (n tokens) into ref, with s as
 * scratch.  0 or -1 + err. */
static int
pic_calib_reference(const pic_model *m, pic_state *s, pic_asm_segment *sg, int n_seg,
                    int n, int answer_tokens, pic_calib_ref *ref, char *err,
                    size_t errlen)
{
    int V = m->cfg.vocab;

    ref->last = malloc((size_t) V * sizeof(float));
    ref->answer = malloc((size_t) answer_tokens * sizeof(int));
    ref->teacher = malloc((size_t) answer_tokens * V * sizeof(float));
    if (ref->last == NULL || ref->answer == NULL || ref->teacher == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    for (int i = 0; i < n_seg; i++) {
        sg[i].entry = NULL;
    }
    if (pic_assemble(m, NULL, s, sg, n_seg, PIC_MODE_FULL, ref->last, NULL, err,
                     errlen) != 0) {
        return -1;
    }
    pic_state *c = pic_state_clone(s);
    if (c == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    int rc = pic_drift_greedy(m, c, ref->last, n, answer_tokens, ref->answer, err, errlen);
    pic_state_free(c);
    if (rc != 0) {
        return -1;
    }
    ref->k = answer_tokens;
    for (int t = 0; t < answer_tokens; t++) {
        if (pic_sample_is_stop(&m->cfg, ref->answer[t])) {
            ref->k = t + 1;
            break;
        }
    }
    if (ref->k > 1 && pic_forward(m, NULL, s, ref->answer, ref->k - 1, n, PIC_LOGITS_ALL,
                                  ref->teacher, NULL, err, errlen) != 0) {
        return -1;
    }
    return 0;
}

/* The width variant v gives segment i of p (-1: no seam entry). */
static int
pic_calib_want(const pic_calib_prompt *p, int i, const pic_calib_variant *v)
{
    if (p->kind[i] != PIC_SEG_PIC || p->n[i] == 0) {
        return -1;
    }
    return p->doc != NULL && p->doc[i] ? v->w_doc : v->w_other;
}

/* One prompt under every variant (n_v) into sums (n_v).  A variant that
 * gives every segment the widths of an earlier one is not assembled again:
 * it takes that one's figures.  0 or -1 + err. */
static int
pic_calib_one(const pic_model *m, const pic_calib_prompt *p, const pic_calib_opts *o,
              const pic_calib_variant *vs, int n_v, pic_calib_sum *sums, char *err,
              size_t errlen)
{
    int              n = 0, rc = -1;
    int             *toks = NULL;
    int             *built = calloc((size_t) p->n_seg + 1, sizeof(int));  /* (n_seg) w of seam[i] */
    int             *want = calloc((size_t) (n_v + 1) * (p->n_seg + 1), sizeof(int)); /* (n_v, n_seg) */
    pic_calib_sum   *mine = calloc((size_t) n_v + 1, sizeof(*mine));     /* (n_v) this prompt's */
    pic_asm_segment *sg = calloc((size_t) p->n_seg + 1, sizeof(*sg));
    pic_entry      **seam = calloc((size_t) p->n_seg + 1, sizeof(*seam));
    pic_entry       *whole = NULL;
    pic_state       *s = pic_state_init(&m->cfg, 0, err, errlen);
    float           *last = malloc((size_t) m->cfg.vocab * sizeof(float));   /* (V) */
    pic_calib_ref    ref = { 0 };

    if (built == NULL || want == NULL || mine == NULL || sg == NULL || seam == NULL
        || s == NULL || last == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        goto done;
    }
    for (int i = 0; i < p->n_seg; i++) {
        if (p->n[i] < 0 || (p->kind[i] == PIC_SEG_PREFIX && i != 0)) {
            snprintf(err, errlen, "segment %d: bad length or a prefix after position 0", i);
            goto done;
        }
        n += p->n[i];
        built[i] = -1;
    }
    if (n == 0) {
        snprintf(err, errlen, "an empty prompt");
        goto done;
    }
    toks = malloc((size_t) n * sizeof(int));
    if (toks == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        goto done;
    }
    for (int i = 0, off = 0; i < p->n_seg; off += p->n[i], i++) {
        memcpy(toks + off, p->tokens[i], (size_t) p->n[i] * sizeof(int));
        sg[i].tokens = toks + off;
        sg[i].n = p->n[i];
    }
    if (pic_calib_reference(m, s, sg, p->n_seg, n, o->answer_tokens, &ref, err,
                            errlen) != 0) {
        goto done;
    }
    if (p->n_seg > 0 && p->kind[0] == PIC_SEG_PREFIX && p->n[0] > 0) {
        /* the exact prefix: stored in f32, as exact as the prefix tree */
        pic_entry_opts eo = { .w = 0, .dtype = PIC_DTYPE_F32 };

        if (pic_entry_build(m, NULL, p->tokens[0], p->n[0], &eo, NULL, &whole, err,
                            errlen) != 0) {
            goto done;
        }
    }
    for (int v = 0; v < n_v; v++) {
        int               *wv = want + (size_t) v * p->n_seg, composed = 0, same = -1;
        pic_assemble_stats st;

        for (int i = 0; i < p->n_seg; i++) {
            wv[i] = pic_calib_want(p, i, &vs[v]);
            composed += wv[i] >= 0;
        }
        if (vs[v].class_only && composed == 0) {
            continue;           /* no segment of the class: not measured */
        }
        for (int u = 0; u < v && same < 0; u++) {
            if (mine[u].prompts > 0
                && memcmp(want + (size_t) u * p->n_seg, wv, (size_t) p->n_seg * sizeof(int))
                   == 0) {
                same = u;
            }
        }
        if (same >= 0) {
            mine[v] = mine[same];
            continue;
        }
        for (int i = 0; i < p->n_seg; i++) {
            if (wv[i] >= 0 && built[i] != wv[i]) {
                pic_entry_opts eo = { .w = wv[i], .dtype = o->dtype };

                pic_entry_unref(seam[i]);
                seam[i] = NULL;
                built[i] = -1;
                if (pic_entry_build(m, NULL, p->tokens[i], p->n[i], &eo, &seam[i], NULL,
                                    err, errlen) != 0) {
                    goto done;
                }
                built[i] = wv[i];
            }
            sg[i].entry = p->kind[i] == PIC_SEG_PREFIX ? whole : wv[i] >= 0 ? seam[i] : NULL;
        }
        if (pic_assemble(m, NULL, s, sg, p->n_seg, PIC_MODE_PIC, last, &st, err,
                         errlen) != 0
            || pic_calib_compare(m, s, last, n, &ref, &mine[v], err, errlen) != 0) {
            goto done;
        }
        mine[v].pic_tokens = st.n_reused - st.n_prefix;
        mine[v].tokens = n;
    }
    for (int v = 0; v < n_v; v++) {
        pic_calib_sum *a = &sums[v], *b = &mine[v];

        a->kl_prompts += b->kl_prompts;
        a->kl_max = fmax(a->kl_max, b->kl_max);
        a->matched += b->matched;
        a->positions += b->positions;
        a->same += b->same;
        a->pic_tokens += b->pic_tokens;
        a->tokens += b->tokens;
        a->prompts += b->prompts;
    }
    rc = 0;
done:
    for (int i = 0; seam != NULL && i < p->n_seg; i++) {
        pic_entry_unref(seam[i]);
    }
    pic_entry_unref(whole);
    pic_state_free(s);
    free(ref.last);
    free(ref.teacher);
    free(ref.answer);
    free(last);
    free(toks);
    free(seam);
    free(sg);
    free(mine);
    free(want);
    free(built);
    return rc;
}

/* Row of width w from a variant's sums. */
static void
pic_calib_fill(pic_calib_row *r, int w, const pic_calib_sum *a)
{
    memset(r, 0, sizeof(*r));
    r->w = w;
    if (a->prompts == 0) {
        return;
    }
    r->kl_mean = a->kl_prompts / (double) a->prompts;
    r->kl_max = a->kl_max;
    r->argmax_match = (double) a->matched / (double) a->positions;
    r->greedy_same = (double) a->same / (double) a->prompts;
    r->pic_share = (double) a->pic_tokens / (double) a->tokens;
}

/* The rule: the first row within the bound (*met), else the least drift. */
static int
pic_calib_choose(const pic_calib_row *rows, int n_ws, double bound, int *met)
{
    int chosen = 0;

    for (int wi = 0; wi < n_ws; wi++) {
        if (rows[wi].kl_mean <= bound) {
            *met = 1;
            return wi;
        }
    }
    *met = 0;
    for (int wi = 1; wi < n_ws; wi++) {
        chosen = rows[wi].kl_mean < rows[chosen].kl_mean ? wi : chosen;
    }
    return chosen;
}

/* The pair of widths (documents *wd, others *wo: indices into the widths,
 * or -1: the class recomputed) with the largest share from entries whose
 * drift, estimated from the classes' sums (of pic_calibrate's first pass),
 * is within the bound and whose share beats share0; 0 if there is none.
 * A recomputed class adds no drift and no share, so a pair with one class
 * recomputed is the other class measured alone. */
static int
pic_calib_pair(const pic_calib_sum *sums, int n_ws, int n_prompts, double bound,
               double share0, int *wd, int *wo, double *estimate)
{
    static const pic_calib_sum none;
    double best = share0;
    int    found = 0;

    if (sums[1].prompts == 0 && sums[2].prompts == 0) {
        return 0;
    }
    for (int d = -1; d < n_ws; d++) {
        for (int t = -1; t < n_ws; t++) {
            const pic_calib_sum *a = d < 0 ? &none : &sums[3 * d + 1];
            const pic_calib_sum *b = t < 0 ? &none : &sums[3 * t + 2];
            double est = (a->kl_prompts + b->kl_prompts) / n_prompts;
            double share = (double) (a->pic_tokens + b->pic_tokens) / (double) sums[0].tokens;

            if ((d != t || d < 0) && est <= bound && share > best) {
                best = share;
                *wd = d;
                *wo = t;
                *estimate = est;
                found = 1;
            }
        }
    }
    return found;
}

/* One pass of every prompt under vs (n_v) into sums; 0 or -1 + err. */
static int
pic_calib_pass(const pic_model *m, const pic_calib_prompt *prompts, int n_prompts,
               const pic_calib_opts *o, const pic_calib_variant *vs, int n_v,
               pic_calib_sum *sums, void (*progress)(int done, int total, void *arg),
               void *arg, char *err, size_t errlen)
{
    for (int i = 0; i < n_prompts; i++) {
        char e2[256];

        if (pic_calib_one(m, &prompts[i], o, vs, n_v, sums, e2, sizeof(e2)) != 0) {
            snprintf(err, errlen, "prompt %d: %s", i + 1, e2);
            return -1;
        }
        if (progress != NULL) {
            progress(i + 1, n_prompts, arg);
        }
    }
    return 0;
}

int
pic_calibrate(const pic_model *m, const pic_calib_prompt *prompts, int n_prompts,
              const pic_calib_opts *o, pic_calib_result *r,
              void (*progress)(int done, int total, void *arg), void *arg, char *err,
              size_t errlen)
{
    pic_calib_variant vs[3 * PIC_CALIB_MAX_WS];
    pic_calib_sum     sums[3 * PIC_CALIB_MAX_WS];
    int               wd = 0, wo = 0;

    if (n_prompts < 1 || o->n_ws < 1 || o->n_ws > PIC_CALIB_MAX_WS || o->answer_tokens < 1
        || !(o->kl_bound > 0)) {
        snprintf(err, errlen, "calibration needs prompts, 1..%d widths, answer tokens >= 1 "
                 "and a positive bound", PIC_CALIB_MAX_WS);
        return -1;
    }
    for (int wi = 0; wi < o->n_ws; wi++) {
        if (o->ws[wi] < 0 || o->ws[wi] > PIC_ENTRY_MAX_W
            || (wi > 0 && o->ws[wi] <= o->ws[wi - 1])) {
            snprintf(err, errlen, "seam widths must ascend within 0..%d", PIC_ENTRY_MAX_W);
            return -1;
        }
    }
    memset(r, 0, sizeof(*r));
    memset(sums, 0, sizeof(sums));
    for (int wi = 0; wi < o->n_ws; wi++) {
        int w = o->ws[wi];

        vs[3 * wi] = (pic_calib_variant) { w, w, 0 };
        vs[3 * wi + 1] = (pic_calib_variant) { w, -1, 1 };
        vs[3 * wi + 2] = (pic_calib_variant) { -1, w, 1 };
    }
    if (pic_calib_pass(m, prompts, n_prompts, o, vs, 3 * o->n_ws, sums, progress, arg, err,
                       errlen) != 0) {
        return -1;
    }
    r->all.prompts = n_prompts;
    r->doc.prompts = (int) sums[1].prompts;
    r->other.prompts = (int) sums[2].prompts;
    r->all.tokens = sums[0].tokens;
    r->doc.tokens = sums[1].tokens;
    r->other.tokens = sums[2].tokens;
    for (int wi = 0; wi < o->n_ws; wi++) {
        pic_calib_fill(&r->all.rows[wi], o->ws[wi], &sums[3 * wi]);
        pic_calib_fill(&r->doc.rows[wi], o->ws[wi], &sums[3 * wi + 1]);
        pic_calib_fill(&r->other.rows[wi], o->ws[wi], &sums[3 * wi + 2]);
    }
    r->chosen = pic_calib_choose(r->all.rows, o->n_ws, o->kl_bound, &r->met);
    /* no width within the bound: every class recomputed (a PIC answer this
     * far from full recompute's is a wrong answer), unless a pair serves one */
    r->w = r->w_doc = r->met ? o->ws[r->chosen] : PIC_CALIB_RECOMPUTE;
    if (pic_calib_pair(sums, o->n_ws, n_prompts, o->kl_bound,
                       r->met ? r->all.rows[r->chosen].pic_share : 0.0, &wd, &wo,
                       &r->split_estimate)) {
        pic_calib_variant sv = { wd < 0 ? -1 : o->ws[wd], wo < 0 ? -1 : o->ws[wo], 0 };
        pic_calib_sum     ss;

        memset(&ss, 0, sizeof(ss));
        if (pic_calib_pass(m, prompts, n_prompts, o, &sv, 1, &ss, progress, arg, err,
                           errlen) != 0) {
            return -1;
        }
        pic_calib_fill(&r->split, sv.w_other, &ss);
        r->split_w_doc = sv.w_doc;
        r->have_split = 1;
        r->split_met = r->split.kl_mean <= o->kl_bound;
        if (r->split_met) {
            r->w = sv.w_other;
            r->w_doc = sv.w_doc;
        }
    }
    return 0;
}

/* --- the calibration file --- */

/* A row's figures into the object r. */
static void
pic_calib_row_json(cJSON *r, const pic_calib_row *row)
{
    cJSON_AddNumberToObject(r, "w", row->w);
    cJSON_AddNumberToObject(r, "kl_mean", row->kl_mean);
    cJSON_AddNumberToObject(r, "kl_max", row->kl_max);
    cJSON_AddNumberToObject(r, "argmax_match", row->argmax_match);
    cJSON_AddNumberToObject(r, "greedy_same", row->greedy_same);
    cJSON_AddNumberToObject(r, "pic_share", row->pic_share);
}

/* A class's figures at every width into obj's array "seams". */
static void
pic_calib_class_json(cJSON *obj, const pic_calib_class *c, int n_ws)
{
    cJSON *a = cJSON_AddArrayToObject(obj, "seams");

    for (int wi = 0; a != NULL && c->prompts > 0 && wi < n_ws; wi++) {
        cJSON *r = cJSON_CreateObject();

        if (r != NULL) {
            pic_calib_row_json(r, &c->rows[wi]);
            cJSON_AddItemToArray(a, r);
        }
    }
}

cJSON *
pic_calib_json(const pic_model *m, const char *model_name, const pic_calib_opts *o,
               int n_prompts, long prompt_tokens, const pic_calib_result *r)
{
    cJSON *doc = cJSON_CreateObject(), *cl, *x;
    char   fp[32];

    if (doc == NULL) {
        return NULL;
    }
    snprintf(fp, sizeof(fp), "%016llx", (unsigned long long) m->fingerprint);
    cJSON_AddStringToObject(doc, "object", "pic.calibration");
    cJSON_AddStringToObject(doc, "model", model_name);
    cJSON_AddStringToObject(doc, "fingerprint", fp);
    cJSON_AddNumberToObject(doc, "created", (double) time(NULL));
    cJSON_AddStringToObject(doc, "entry_dtype", o->dtype == PIC_DTYPE_BF16 ? "bf16" : "f32");
    cJSON_AddNumberToObject(doc, "answer_tokens", o->answer_tokens);
    cJSON_AddNumberToObject(doc, "kl_bound", o->kl_bound);
    cJSON_AddNumberToObject(doc, "prompts", n_prompts);
    cJSON_AddNumberToObject(doc, "prompt_tokens", (double) prompt_tokens);
    pic_calib_class_json(doc, &r->all, o->n_ws);
    x = cJSON_AddObjectToObject(doc, "chosen");
    if (x != NULL) {
        cJSON_AddNumberToObject(x, "w", r->all.rows[r->chosen].w);
        cJSON_AddNumberToObject(x, "kl_mean", r->all.rows[r->chosen].kl_mean);
        cJSON_AddBoolToObject(x, "met", r->met);
    }
    cl = cJSON_AddObjectToObject(doc, "classes");
    if (cl != NULL && (x = cJSON_AddObjectToObject(cl, "documents")) != NULL) {
        cJSON_AddNumberToObject(x, "prompts", r->doc.prompts);
        cJSON_AddNumberToObject(x, "prompt_tokens", (double) r->doc.tokens);
        pic_calib_class_json(x, &r->doc, o->n_ws);
    }
    if (cl != NULL && (x = cJSON_AddObjectToObject(cl, "other")) != NULL) {
        cJSON_AddNumberToObject(x, "prompts", r->other.prompts);
        cJSON_AddNumberToObject(x, "prompt_tokens", (double) r->other.tokens);
        pic_calib_class_json(x, &r->other, o->n_ws);
    }
    if (r->have_split && (x = cJSON_AddObjectToObject(doc, "split")) != NULL) {
        pic_calib_row_json(x, &r->split);
        cJSON_AddNumberToObject(x, "w_doc", r->split_w_doc);
        cJSON_AddNumberToObject(x, "kl_estimate", r->split_estimate);
        cJSON_AddBoolToObject(x, "met", r->split_met);
    }
    if ((x = cJSON_AddObjectToObject(doc, "served")) != NULL) {
        cJSON_AddNumberToObject(x, "w", r->w);
        cJSON_AddNumberToObject(x, "w_doc", r->w_doc);
    }
    return doc;
}

/* 1 if j is an integer width in lo..PIC_ENTRY_MAX_W. */
static int
pic_calib_width_ok(const cJSON *j, int lo)
{
    return cJSON_IsNumber(j) && j->valuedouble >= lo && j->valuedouble <= PIC_ENTRY_MAX_W
           && j->valuedouble == (int) j->valuedouble;
}

int
pic_calib_load(const char *path, const pic_model *m, int *w, int *w_doc, cJSON **doc,
               char *err, size_t errlen)
{
    FILE        *f = fopen(path, "rb");
    size_t       len = 0;
    char        *text, fp[32];
    cJSON       *d;
    const cJSON *o, *jfp, *jc, *jw, *js, *jsw, *jsd;

    *doc = NULL;
    if (f == NULL) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    text = pic_read_stream(f, &len);
    fclose(f);
    if (text == NULL) {
        snprintf(err, errlen, "cannot read %s", path);
        return -1;
    }
    d = cJSON_ParseWithLength(text, len);
    free(text);
    o = cJSON_GetObjectItemCaseSensitive(d, "object");
    jfp = cJSON_GetObjectItemCaseSensitive(d, "fingerprint");
    jc = cJSON_GetObjectItemCaseSensitive(d, "chosen");
    jw = cJSON_GetObjectItemCaseSensitive(jc, "w");
    if (d == NULL || !cJSON_IsString(o) || strcmp(o->valuestring, "pic.calibration") != 0
        || !cJSON_IsString(jfp) || !cJSON_IsNumber(jw)) {
        snprintf(err, errlen, "%s is not a calibration file (pic-engine calibrate writes one)",
                 path);
        cJSON_Delete(d);
        return -1;
    }
    snprintf(fp, sizeof(fp), "%016llx", (unsigned long long) m->fingerprint);
    if (strcmp(jfp->valuestring, fp) != 0) {
        snprintf(err, errlen, "%s was measured on another checkpoint (fingerprint %s, this "
                 "one %s): run pic-engine calibrate again", path, jfp->valuestring, fp);
        cJSON_Delete(d);
        return -1;
    }
    js = cJSON_GetObjectItemCaseSensitive(d, "served");
    jsw = cJSON_GetObjectItemCaseSensitive(js, "w");
    jsd = cJSON_GetObjectItemCaseSensitive(js, "w_doc");
    if (!pic_calib_width_ok(jw, 0)
        || (js != NULL && (!pic_calib_width_ok(jsw, PIC_CALIB_RECOMPUTE)
                           || !pic_calib_width_ok(jsd, PIC_CALIB_RECOMPUTE)))) {
        snprintf(err, errlen, "%s: chosen.w must be an integer in 0..%d%s", path,
                 PIC_ENTRY_MAX_W, js != NULL ? ", served.w and served.w_doc one in -1..that"
                 " (-1: recomputed)" : "");
        cJSON_Delete(d);
        return -1;
    }
    *w = (int) (js != NULL ? jsw : jw)->valuedouble;
    *w_doc = (int) (js != NULL ? jsd : jw)->valuedouble;
    *doc = d;
    return 0;
}
