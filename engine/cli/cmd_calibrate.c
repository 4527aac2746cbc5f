/*
 * cmd_calibrate.c — `pic-engine calibrate`: measure how far PIC answers drift
 * from full recompute at each seam width on sample requests, choose the
 * width for this checkpoint and write the calibration file that `serve`
 * reads (calibrate.h).
 *
 *   pic-engine calibrate --model DIR --prompts FILE [--out FILE] [options]
 *
 * FILE holds JSON Lines: one OpenAI request body per line, chat
 * ({"messages": [...], "tools": [...]}) or completions ({"prompt": "..."});
 * blank lines and lines starting with '#' are skipped.  Each is rendered
 * and segmented as `serve` segments a request sent to it directly (the
 * chat template, documents between --marker, --min-segment) and tokenized
 * as one text, each token going to the segment its first byte lies in.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "calibrate.h"
#include "cli_common.h"
#include "commands.h"
#include "model.h"
#include "model_config.h"
#include "pic_buf.h"
#include "pic_kernels.h"
#include "pic_marker.h"
#include "pic_request.h"
#include "pic_segment.h"
#include "pic_template.h"
#include "tokenizer.h"

static void
calib_usage(FILE *f)
{
    fprintf(f,
        "usage: pic-engine calibrate --model DIR --prompts FILE [options]\n"
        "  --prompts FILE          sample requests, JSON Lines (chat or completions bodies)\n"
        "  --out FILE              the calibration file (default DIR/pic_calibration.json;\n"
        "                          - for stdout); serve reads DIR/pic_calibration.json\n"
        "  --ws LIST               candidate seam widths (default 0,4,8,16,32)\n"
        "  --kl-bound X            drift bound: mean KL on the answer tokens (default %g)\n"
        "  --answer-tokens N       answer positions compared per prompt (default 8)\n"
        "  --entry-dtype T         storage of the entries measured: bf16 (default) or f32\n"
        "  --min-segment BYTES     shorter segments are recomputed (default 128, as serve)\n"
        "  --marker S              document delimiter (default <|pic_sep|>, as serve)\n"
        "  --template NAME         chat template: qwen3, qwen3.5, chatml, smollm2, llama3, llama3.1,\n"
        "                          llama3.2, mistral or mistral-nemo (default: from the model)\n"
        "  --weights F             big matrices as " PIC_WEIGHTS_NAMES " (default auto)\n"
        "  --threads N             OpenMP threads (default: all cores)\n",
        PIC_CALIB_KL_BOUND);
}

/* The prompts of the file, segmented and tokenized. */
typedef struct {
    pic_calib_prompt *p;        /* (n) */
    int               n;
    long              tokens;
} calib_set;

static void
calib_set_free(calib_set *cs)
{
    for (int i = 0; i < cs->n; i++) {
        pic_calib_prompt *p = &cs->p[i];

        for (int k = 0; k < p->n_seg; k++) {
            free((void *) p->tokens[k]);
        }
        free((void *) p->tokens);
        free((void *) p->n);
        free((void *) p->kind);
        free((void *) p->doc);
    }
    free(cs->p);
    memset(cs, 0, sizeof(*cs));
}

/* Segment and tokenize the rendered segmentation sg into p; 0 or -1 + err. */
static int
calib_tokenize(const pic_tokenizer *tok, const pic_segmentation *sg, pic_calib_prompt *p,
               long *total, char *err, size_t errlen)
{
    const char *text = sg->render.text.data ? sg->render.text.data : "";
    size_t      len = sg->render.text.len, n_ids = 0, t = 0, byte = 0;
    int32_t    *ids = NULL;
    int         ns = (int) sg->n_segs;
    int       **tokens = calloc((size_t) ns + 1, sizeof(*tokens));
    int        *n = calloc((size_t) ns + 1, sizeof(*n));
    pic_seg_kind *kind = calloc((size_t) ns + 1, sizeof(*kind));
    unsigned char *doc = calloc((size_t) ns + 1, 1);

    p->tokens = (const int **) tokens;
    p->n = n;
    p->kind = kind;
    p->doc = doc;
    p->n_seg = 0;
    if (tokens == NULL || n == NULL || kind == NULL || doc == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (pic_tokenizer_encode(tok, text, len, &ids, &n_ids) != PIC_TOKENIZER_OK) {
        snprintf(err, errlen, "cannot tokenize the prompt");
        return -1;
    }
    for (int i = 0; i < ns; i++) {
        size_t t0 = t;

        pic_tokenizer_advance(tok, ids, n_ids, sg->segs[i].start + sg->segs[i].len,
                              i == ns - 1, &t, &byte);
        if (t == t0) {
            continue;       /* every byte inside the previous segment's last token */
        }
        int k = p->n_seg;
        tokens[k] = malloc((t - t0) * sizeof(int));
        if (tokens[k] == NULL) {
            free(ids);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (size_t x = t0; x < t; x++) {
            tokens[k][x - t0] = ids[x];
        }
        n[k] = (int) (t - t0);
        kind[k] = sg->segs[i].kind;
        doc[k] = (sg->segs[i].flags & PIC_SEG_FLAG_DOC) != 0;
        p->n_seg = k + 1;
    }
    *total += (long) n_ids;
    free(ids);
    return 0;
}

/* Read and segment every request of path into cs; 0 or -1 (message printed). */
static int
calib_read(const char *path, const pic_segment_cfg *cfg, const pic_tokenizer *tok,
           calib_set *cs)
{
    FILE   *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    char   *line = NULL, err[512];
    size_t  cap = 0, pcap = 0;
    ssize_t got;
    int     lineno = 0, rc = -1;

    memset(cs, 0, sizeof(*cs));
    if (f == NULL) {
        fprintf(stderr, "pic-engine calibrate: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    while ((got = getline(&line, &cap, f)) >= 0) {
        pic_request      req;
        pic_error        perr;
        pic_segmentation sg;
        cJSON           *j;
        size_t           l = (size_t) got;

        lineno++;
        while (l > 0 && (line[l - 1] == '\n' || line[l - 1] == '\r' || line[l - 1] == ' ')) {
            l--;
        }
        if (l == 0 || line[0] == '#') {
            continue;
        }
        /* the model is this one: a body without "model" is taken as it is */
        j = cJSON_ParseWithLength(line, l);
        pic_req_kind kind = cJSON_GetObjectItemCaseSensitive(j, "messages") != NULL
                            ? PIC_REQ_CHAT : PIC_REQ_COMPLETION;
        char *body = NULL;
        if (cJSON_IsObject(j) && cJSON_GetObjectItemCaseSensitive(j, "model") == NULL) {
            cJSON_AddStringToObject(j, "model", "calibration");
            body = cJSON_PrintUnformatted(j);
        }
        cJSON_Delete(j);
        memset(&req, 0, sizeof(req));
        int prc = pic_request_parse(&req, kind, body ? body : line, body ? strlen(body) : l,
                                    NULL, &perr);
        free(body);
        if (prc != 0) {
            fprintf(stderr, "pic-engine calibrate: %s:%d: %s\n", path, lineno, perr.message);
            goto done;
        }
        pic_segmentation_init(&sg);
        if (pic_segment_request(cfg, &req, &sg, &perr) != 0 || sg.n_segs == 0) {
            fprintf(stderr, "pic-engine calibrate: %s:%d: %s\n", path, lineno,
                    sg.n_segs == 0 && perr.status == 0 ? "no text to segment (token ids?)"
                                                       : perr.message);
            pic_segmentation_free(&sg);
            pic_request_free(&req);
            goto done;
        }
        if (pic_grow((void **) &cs->p, &pcap, (size_t) cs->n + 1, sizeof(*cs->p)) != 0) {
            fprintf(stderr, "pic-engine calibrate: out of memory\n");
            pic_segmentation_free(&sg);
            pic_request_free(&req);
            goto done;
        }
        memset(&cs->p[cs->n], 0, sizeof(cs->p[cs->n]));
        int trc = calib_tokenize(tok, &sg, &cs->p[cs->n], &cs->tokens, err, sizeof(err));
        cs->n++;
        pic_segmentation_free(&sg);
        pic_request_free(&req);
        if (trc != 0) {
            fprintf(stderr, "pic-engine calibrate: %s:%d: %s\n", path, lineno, err);
            goto done;
        }
    }
    if (cs->n == 0) {
        fprintf(stderr, "pic-engine calibrate: %s holds no request\n", path);
        goto done;
    }
    rc = 0;
done:
    free(line);
    if (f != stdin) {
        fclose(f);
    }
    if (rc != 0) {
        calib_set_free(cs);
    }
    return rc;
}

/* Parse "0,4,8" into ascending distinct widths; -1 if malformed. */
static int
calib_parse_ws(const char *s, pic_calib_opts *o)
{
    int *ids = NULL, n = 0;

    if (pic_cli_parse_ids(s, &ids, &n) != 0 || n > PIC_CALIB_MAX_WS) {
        free(ids);
        return -1;
    }
    o->n_ws = 0;
    for (int i = 0; i < n; i++) {          /* insertion sort, duplicates dropped */
        int v = ids[i], k = o->n_ws;

        if (v > PIC_ENTRY_MAX_W) {
            free(ids);
            return -1;
        }
        while (k > 0 && o->ws[k - 1] > v) {
            k--;
        }
        if (k > 0 && o->ws[k - 1] == v) {
            continue;
        }
        memmove(&o->ws[k + 1], &o->ws[k], (size_t) (o->n_ws - k) * sizeof(int));
        o->ws[k] = v;
        o->n_ws++;
    }
    free(ids);
    return 0;
}

static void
calib_progress(int done, int total, void *arg)
{
    (void) arg;
    if (done == total || done % 10 == 0) {
        fprintf(stderr, "pic-engine calibrate: %d/%d prompts\n", done, total);
    }
}

/* Write doc to path ("-": stdout) through a temporary file; 0 or -1. */
static int
calib_write(const char *path, const cJSON *doc)
{
    char *txt = cJSON_Print(doc), tmp[4300];
    FILE *f;
    int   ok;

    if (txt == NULL) {
        return -1;
    }
    if (!strcmp(path, "-")) {
        ok = puts(txt) >= 0;
        free(txt);
        return ok ? 0 : -1;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    ok = f != NULL && fputs(txt, f) >= 0 && fputc('\n', f) != EOF;
    ok = (f != NULL && fclose(f) == 0) && ok;
    free(txt);
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "pic-engine calibrate: cannot write %s: %s\n", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

/* Print class c's figures at every width, row `chosen` marked (-1: none). */
/* "w = N", or "recomputed" for PIC_CALIB_RECOMPUTE, into out (n bytes). */
static void
calib_width(char *out, size_t n, int w)
{
    if (w == PIC_CALIB_RECOMPUTE) {
        snprintf(out, n, "recomputed");
    } else {
        snprintf(out, n, "w = %d", w);
    }
}

static void
calib_table(const char *title, const pic_calib_class *c, const pic_calib_opts *o, int chosen)
{
    fprintf(stderr, "%s: %d prompts\n", title, c->prompts);
    if (c->prompts == 0) {
        return;
    }
    fprintf(stderr, "%5s %10s %10s %8s %12s %13s\n", "w", "KL mean", "KL max", "argmax",
            "same answer", "from entries");
    for (int wi = 0; wi < o->n_ws; wi++) {
        const pic_calib_row *r = &c->rows[wi];

        fprintf(stderr, "%5d %10.2e %10.2e %8.3f %12.3f %13.3f%s\n", r->w, r->kl_mean,
                r->kl_max, r->argmax_match, r->greedy_same, r->pic_share,
                wi == chosen ? "  <- chosen" : "");
    }
}

int
pic_cmd_calibrate(int argc, char **argv)
{
    pic_cli_opts       co = { .cmd = "calibrate" };
    pic_cli_model      cm = { NULL };
    const char        *prompts = NULL, *out = NULL, *marker = NULL, *tmpl = NULL;
    pic_calib_opts     o = { .ws = { 0, 4, 8, 16, 32 }, .n_ws = 5, .dtype = PIC_DTYPE_BF16,
                             .answer_tokens = 8, .kl_bound = PIC_CALIB_KL_BOUND };
    long               min_segment = 128;
    int                rc = 1, took;
    const pic_model   *m = NULL;
    pic_tokenizer     *tok = NULL;
    pic_marker         mk;
    pic_key_ctx        keys = { 0 };
    pic_segment_cfg    cfg;
    pic_error          perr;
    calib_set          cs = { 0 };
    pic_calib_result   res;
    cJSON             *doc = NULL;
    char               err[512], path[4200], fp[32];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char       *end = NULL;

        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            calib_usage(stdout);
            return 0;
        }
        if (v == NULL) {
            fprintf(stderr, "pic-engine calibrate: %s needs a value\n", a);
            return 2;
        }
        i++;
        if ((took = pic_cli_option(&co, a, v)) < 0) {
            return 2;
        }
        if (took) {
            continue;
        }
        if (!strcmp(a, "--prompts")) {
            prompts = v;
        } else if (!strcmp(a, "--out")) {
            out = v;
        } else if (!strcmp(a, "--marker")) {
            marker = v;
        } else if (!strcmp(a, "--template")) {
            tmpl = v;
        } else if (!strcmp(a, "--ws")) {
            if (calib_parse_ws(v, &o) != 0) {
                fprintf(stderr, "pic-engine calibrate: --ws wants up to %d widths in 0..%d "
                        "like 0,8,16\n", PIC_CALIB_MAX_WS, PIC_ENTRY_MAX_W);
                return 2;
            }
        } else if (!strcmp(a, "--kl-bound")) {
            o.kl_bound = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || !(o.kl_bound > 0)) {
                fprintf(stderr, "pic-engine calibrate: --kl-bound wants a positive number\n");
                return 2;
            }
        } else if (!strcmp(a, "--answer-tokens") || !strcmp(a, "--min-segment")) {
            long x = strtol(v, &end, 10);

            if (*v == '\0' || *end != '\0' || x < 0 || x > (1L << 30)
                || (x < 1 && !strcmp(a, "--answer-tokens"))) {
                fprintf(stderr, "pic-engine calibrate: invalid %s '%s'\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--answer-tokens")) {
                o.answer_tokens = (int) (x > 256 ? 256 : x);
            } else {
                min_segment = x;
            }
        } else if (!strcmp(a, "--entry-dtype")) {
            if (strcmp(v, "bf16") != 0 && strcmp(v, "f32") != 0) {
                fprintf(stderr, "pic-engine calibrate: --entry-dtype must be bf16 or f32\n");
                return 2;
            }
            o.dtype = !strcmp(v, "bf16") ? PIC_DTYPE_BF16 : PIC_DTYPE_F32;
        } else {
            fprintf(stderr, "pic-engine calibrate: unknown option %s\n", a);
            calib_usage(stderr);
            return 2;
        }
    }
    if (co.model == NULL || prompts == NULL) {
        calib_usage(stderr);
        return 2;
    }
    if (co.device != NULL) {
        fprintf(stderr, "pic-engine calibrate: runs on the CPU (no --device)\n");
        return 2;
    }
    if (pic_marker_init(&mk, marker, marker ? strlen(marker) : 0, &perr) != 0) {
        fprintf(stderr, "pic-engine calibrate: --marker: %s\n", perr.message);
        return 2;
    }
    if (pic_cli_load(&co, &cm) != 0) {
        return 1;
    }
    m = cm.host;
    tok = pic_checkpoint_tokenizer(co.model, err, sizeof(err));
    if (tok == NULL) {
        fprintf(stderr, "pic-engine calibrate: %s\n", err);
        goto done;
    }
    memset(&cfg, 0, sizeof(cfg));
    if (tmpl == NULL && pic_checkpoint_dialect(co.model, &cfg.dialect, err, sizeof(err)) != 0) {
        fprintf(stderr, "pic-engine calibrate: %s\n", err);
        goto done;
    }
    if (tmpl != NULL && pic_template_dialect_parse(tmpl, &cfg.dialect) != 0) {
        fprintf(stderr, "pic-engine calibrate: unknown chat template '%s'\n", tmpl);
        goto done;
    }
    snprintf(fp, sizeof(fp), "%016llx", (unsigned long long) m->fingerprint);
    if (pic_key_ctx_init(&keys, fp, strlen(fp), "", 0, &perr) != 0) {
        fprintf(stderr, "pic-engine calibrate: %s\n", perr.message);
        goto done;
    }
    cfg.marker = &mk;
    cfg.split_parts = 1;
    cfg.keys = &keys;
    cfg.min_pic_bytes = (size_t) min_segment;
    cfg.unmarked_docs = 1;          /* serve cuts unmarked documents apart too */
    if (calib_read(prompts, &cfg, tok, &cs) != 0) {
        goto done;
    }
    fprintf(stderr, "pic-engine calibrate: %d prompts, %ld tokens, %s entries, %d answer "
            "tokens, bound %.2g\n", cs.n, cs.tokens,
            o.dtype == PIC_DTYPE_BF16 ? "bf16" : "f32", o.answer_tokens, o.kl_bound);
    if (pic_calibrate(m, cs.p, cs.n, &o, &res, calib_progress, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "pic-engine calibrate: %s\n", err);
        goto done;
    }
    calib_table("every PIC segment at w", &res.all, &o, res.chosen);
    if (!res.met) {
        fprintf(stderr, "no width is within the bound %.2g (least drift at w = %d)\n",
                o.kl_bound, res.all.rows[res.chosen].w);
    }
    calib_table("client-delimited documents alone at w (the rest recomputed)", &res.doc, &o,
                -1);
    calib_table("the other PIC segments alone at w (documents recomputed)", &res.other, &o,
                -1);
    if (res.have_split) {
        char wd[16], wo[16];

        calib_width(wd, sizeof(wd), res.split_w_doc);
        calib_width(wo, sizeof(wo), res.split.w);
        fprintf(stderr, "documents %s, the others %s: KL mean %.2e (estimated %.2e), "
                "same answer %.3f, from entries %.3f: %s\n", wd, wo,
                res.split.kl_mean, res.split_estimate, res.split.greedy_same,
                res.split.pic_share, res.split_met ? "within the bound, served"
                                                   : "above the bound, not served");
    }
    if (res.w == PIC_CALIB_RECOMPUTE || res.w_doc == PIC_CALIB_RECOMPUTE) {
        char wd[16], wo[16];

        calib_width(wd, sizeof(wd), res.w_doc);
        calib_width(wo, sizeof(wo), res.w);
        fprintf(stderr, "served: documents %s, the other PIC segments %s (a recomputed class "
                "is served exactly: no width kept its drift within the bound)\n", wd, wo);
    }
    char mname[256];
    pic_model_dir_name(co.model, mname, sizeof(mname));
    doc = pic_calib_json(m, mname, &o, cs.n, cs.tokens, &res);
    if (doc == NULL) {
        fprintf(stderr, "pic-engine calibrate: out of memory\n");
        goto done;
    }
    cJSON_AddNumberToObject(doc, "min_segment_bytes", (double) min_segment);
    cJSON_AddStringToObject(doc, "weights", pic_model_weights_name(m));
    if (out == NULL) {
        pic_checkpoint_calibration_path(co.model, path, sizeof(path));
        out = path;
    }
    if (calib_write(out, doc) != 0) {
        goto done;
    }
    if (strcmp(out, "-") != 0) {
        fprintf(stderr, "pic-engine calibrate: serve w = %d, documents w = %d, written to "
                "%s\n", res.w, res.w_doc, out);
    }
    rc = 0;
done:
    cJSON_Delete(doc);
    calib_set_free(&cs);
    if (keys.base != NULL) {
        pic_key_ctx_free(&keys);
    }
    pic_tokenizer_free(tok);
    pic_cli_model_free(&cm);
    return rc;
}
