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

/* Per-width sums over the prompts. */
typedef struct {
    double kl_prompts;      /* Σ over prompts of the prompt's mean KL */
    double kl_max;
    long   matched;         /* answer positions whose argmax agrees */
    long   same;            /* prompts with full recompute's greedy answer */
    long   pic_tokens;      /* tokens served from seam entries */
} pic_calib_sum;

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

/* One prompt at every width into sums (o->n_ws).  0 or -1 + err. */
static int
pic_calib_one(const pic_model *m, const pic_calib_prompt *p, const pic_calib_opts *o,
              pic_calib_sum *sums, long *n_tokens, long *n_positions, char *err,
              size_t errlen)
{
    int              n = 0, rc = -1;
    int             *toks = NULL;
    pic_asm_segment *sg = calloc((size_t) p->n_seg + 1, sizeof(*sg));
    pic_entry      **seam = calloc((size_t) p->n_seg + 1, sizeof(*seam));
    pic_entry       *whole = NULL;
    pic_state       *s = pic_state_init(&m->cfg, 0, err, errlen);
    float           *last = malloc((size_t) m->cfg.vocab * sizeof(float));   /* (V) */
    pic_calib_ref    ref = { 0 };

    if (sg == NULL || seam == NULL || s == NULL || last == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        goto done;
    }
    for (int i = 0; i < p->n_seg; i++) {
        if (p->n[i] < 0 || (p->kind[i] == PIC_SEG_PREFIX && i != 0)) {
            snprintf(err, errlen, "segment %d: bad length or a prefix after position 0", i);
            goto done;
        }
        n += p->n[i];
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
    *n_tokens += n;
    *n_positions += ref.k;
    if (p->n_seg > 0 && p->kind[0] == PIC_SEG_PREFIX && p->n[0] > 0) {
        /* the exact prefix: stored in f32, as exact as the prefix tree */
        pic_entry_opts eo = { .w = 0, .dtype = PIC_DTYPE_F32 };

        if (pic_entry_build(m, NULL, p->tokens[0], p->n[0], &eo, NULL, &whole, err,
                            errlen) != 0) {
            goto done;
        }
    }
    for (int wi = 0; wi < o->n_ws; wi++) {
        pic_entry_opts     eo = { .w = o->ws[wi], .dtype = o->dtype };
        pic_assemble_stats st;

        for (int i = 0; i < p->n_seg; i++) {
            seam[i] = NULL;
            if (p->kind[i] == PIC_SEG_PIC && p->n[i] > 0
                && pic_entry_build(m, NULL, p->tokens[i], p->n[i], &eo, &seam[i], NULL,
                                   err, errlen) != 0) {
                goto done;
            }
            sg[i].entry = p->kind[i] == PIC_SEG_PREFIX ? whole : seam[i];
        }
        if (pic_assemble(m, NULL, s, sg, p->n_seg, PIC_MODE_PIC, last, &st, err,
                         errlen) != 0
            || pic_calib_compare(m, s, last, n, &ref, &sums[wi], err, errlen) != 0) {
            goto done;
        }
        sums[wi].pic_tokens += st.n_reused - st.n_prefix;
        for (int i = 0; i < p->n_seg; i++) {
            pic_entry_unref(seam[i]);
            seam[i] = NULL;
        }
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
    return rc;
}

int
pic_calibrate(const pic_model *m, const pic_calib_prompt *prompts, int n_prompts,
              const pic_calib_opts *o, pic_calib_row *rows, int *met,
              void (*progress)(int done, int total, void *arg), void *arg, char *err,
              size_t errlen)
{
    pic_calib_sum sums[PIC_CALIB_MAX_WS];
    long          n_tokens = 0, n_positions = 0;
    int           chosen = -1;

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
    memset(sums, 0, sizeof(sums));
    for (int i = 0; i < n_prompts; i++) {
        char e2[256];

        if (pic_calib_one(m, &prompts[i], o, sums, &n_tokens, &n_positions, e2,
                          sizeof(e2)) != 0) {
            snprintf(err, errlen, "prompt %d: %s", i + 1, e2);
            return -1;
        }
        if (progress != NULL) {
            progress(i + 1, n_prompts, arg);
        }
    }
    *met = 0;
    for (int wi = 0; wi < o->n_ws; wi++) {
        pic_calib_row *r = &rows[wi];

        r->w = o->ws[wi];
        r->kl_mean = sums[wi].kl_prompts / n_prompts;
        r->kl_max = sums[wi].kl_max;
        r->argmax_match = (double) sums[wi].matched / (double) n_positions;
        r->greedy_same = (double) sums[wi].same / n_prompts;
        r->pic_share = (double) sums[wi].pic_tokens / (double) n_tokens;
        if (chosen < 0 && r->kl_mean <= o->kl_bound) {
            chosen = wi;
            *met = 1;
        }
    }
    if (chosen < 0) {
        chosen = 0;
        for (int wi = 1; wi < o->n_ws; wi++) {
            chosen = rows[wi].kl_mean < rows[chosen].kl_mean ? wi : chosen;
        }
    }
    return chosen;
}

/* --- the calibration file --- */

cJSON *
pic_calib_json(const pic_model *m, const char *model_name, const pic_calib_opts *o,
               int n_prompts, long prompt_tokens, const pic_calib_row *rows, int chosen,
               int met)
{
    cJSON *doc = cJSON_CreateObject(), *a, *c;
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
    a = cJSON_AddArrayToObject(doc, "seams");
    for (int wi = 0; a != NULL && wi < o->n_ws; wi++) {
        cJSON *r = cJSON_CreateObject();

        cJSON_AddNumberToObject(r, "w", rows[wi].w);
        cJSON_AddNumberToObject(r, "kl_mean", rows[wi].kl_mean);
        cJSON_AddNumberToObject(r, "kl_max", rows[wi].kl_max);
        cJSON_AddNumberToObject(r, "argmax_match", rows[wi].argmax_match);
        cJSON_AddNumberToObject(r, "greedy_same", rows[wi].greedy_same);
        cJSON_AddNumberToObject(r, "pic_share", rows[wi].pic_share);
        cJSON_AddItemToArray(a, r);
    }
    c = cJSON_AddObjectToObject(doc, "chosen");
    if (c != NULL) {
        cJSON_AddNumberToObject(c, "w", rows[chosen].w);
        cJSON_AddNumberToObject(c, "kl_mean", rows[chosen].kl_mean);
        cJSON_AddBoolToObject(c, "met", met);
    }
    return doc;
}

int
pic_calib_load(const char *path, const pic_model *m, int *w, cJSON **doc, char *err,
               size_t errlen)
{
    FILE        *f = fopen(path, "rb");
    size_t       len = 0;
    char        *text, fp[32];
    cJSON       *d;
    const cJSON *o, *jfp, *jc, *jw;

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
    if (jw->valuedouble < 0 || jw->valuedouble > PIC_ENTRY_MAX_W
        || jw->valuedouble != (int) jw->valuedouble) {
        snprintf(err, errlen, "%s: chosen.w must be an integer in 0..%d", path,
                 PIC_ENTRY_MAX_W);
        cJSON_Delete(d);
        return -1;
    }
    *w = (int) jw->valuedouble;
    *doc = d;
    return 0;
}
