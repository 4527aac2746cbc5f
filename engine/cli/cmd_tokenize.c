/*
 * cmd_tokenize.c — `pic-engine tokenize`: text -> ids, ids -> text, with the
 * engine's tokenizer (tokenizer.h).
 *
 *   pic-engine tokenize (--model DIR | --tokenizer FILE)
 *                       [--text TEXT | --file PATH | (stdin)] [--split-special]
 *                       [--decode IDS [--skip-special] [--stream]] [--json]
 *                       [--time N [--lines] [--threads T]] [--batch]
 *
 * Encode prints the ids comma-separated on one line (--json: {"ids": [...]}).
 * Decode prints the text as is (--json: {"text": "..."}); --stream feeds the ids
 * one at a time to the streaming decoder and prints the chunks as a JSON
 * array of strings.  --time N encodes the input N times (--lines: each line
 * separately, over T threads) and prints {"bytes", "seconds", "mb_per_s", ...}.
 * --batch reads a JSON array of strings and prints a JSON array of id arrays.
 * --pieces prints the pre-tokenized pieces (JSON array of strings; with
 * --batch, an array of such arrays) instead of ids.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "cli_common.h"
#include "commands.h"
#include "pic_buf.h"
#include "pic_time.h"
#include "tokenizer.h"

typedef struct {
    const char *model_dir;
    const char *tok_path;
    const char *text;
    const char *file;
    const char *decode;
    const char *chat;           /* --chat: a request to render first */
    int         json;
    int         stream;
    int         skip_special;
    int         split_special;
    int         time_n;
    int         lines;
    int         threads;
    int         batch;
    int         pieces;
} pic_tokenize_args;

typedef struct {
    const pic_tokenizer *tok;
    const char          *buf;
    const size_t        *line_off;  /* (n_lines + 1) line starts; last = end */
    size_t               n_lines;
    unsigned             flags;
    int                  repeat;
    int                  stride, first;
    size_t               n_ids;
    int                  rc;
} pic_tokenize_job;

static void
usage(FILE *f)
{
    fprintf(f,
        "usage: pic-engine tokenize (--model DIR | --tokenizer FILE) [options]\n"
        "  --text TEXT       text to encode (default: --file, else stdin)\n"
        "  --file PATH       read the text to encode from PATH\n"
        "  --chat JSON       (--model) encode the prompt the model's chat template\n"
        "                    renders for an OpenAI messages array or chat request\n"
        "  --split-special   treat special tokens in the text as plain text\n"
        "  --decode IDS      decode comma-separated ids instead of encoding\n"
        "  --skip-special    (decode) drop special tokens\n"
        "  --stream          (decode) one id at a time; print the chunks as JSON\n"
        "  --json            JSON output\n"
        "  --time N          encode N times, print throughput as JSON\n"
        "  --lines           (--time) encode each line separately\n"
        "  --threads T       (--time --lines) threads, default 1\n"
        "  --batch           input is a JSON array of strings; print a JSON array\n"
        "                    of id arrays\n"
        "  --pieces          print the pre-tokenized pieces (JSON) instead of ids\n");
}

static const char *
rc_str(int rc)
{
    switch (rc) {
    case PIC_TOKENIZER_EUTF8:  return "input is not valid UTF-8";
    case PIC_TOKENIZER_ENOMEM: return "out of memory";
    case PIC_TOKENIZER_EREGEX: return "regex engine error";
    case PIC_TOKENIZER_EINVAL: return "bad argument";
    default:                   return "error";
    }
}

static int
parse_args(int argc, char **argv, pic_tokenize_args *a)
{
    int i;

    memset(a, 0, sizeof(*a));
    a->threads = 1;
    for (i = 1; i < argc; i++) {
        const char *o = argv[i];
        int         has = i + 1 < argc;

        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(o, "--model") && has) {
            a->model_dir = argv[++i];
        } else if (!strcmp(o, "--tokenizer") && has) {
            a->tok_path = argv[++i];
        } else if (!strcmp(o, "--text") && has) {
            a->text = argv[++i];
        } else if (!strcmp(o, "--file") && has) {
            a->file = argv[++i];
        } else if (!strcmp(o, "--chat") && has) {
            a->chat = argv[++i];
        } else if (!strcmp(o, "--decode") && has) {
            a->decode = argv[++i];
        } else if (!strcmp(o, "--time") && has) {
            a->time_n = atoi(argv[++i]);
        } else if (!strcmp(o, "--threads") && has) {
            a->threads = atoi(argv[++i]);
        } else if (!strcmp(o, "--json")) {
            a->json = 1;
        } else if (!strcmp(o, "--stream")) {
            a->stream = 1;
        } else if (!strcmp(o, "--skip-special")) {
            a->skip_special = 1;
        } else if (!strcmp(o, "--split-special")) {
            a->split_special = 1;
        } else if (!strcmp(o, "--pieces")) {
            a->pieces = 1;
        } else if (!strcmp(o, "--batch")) {
            a->batch = 1;
        } else if (!strcmp(o, "--lines")) {
            a->lines = 1;
        } else {
            fprintf(stderr, "pic-engine tokenize: unknown or incomplete option '%s'\n", o);
            usage(stderr);
            return -1;
        }
    }
    if ((a->model_dir == NULL) == (a->tok_path == NULL)) {
        fprintf(stderr, "pic-engine tokenize: give exactly one of --model, --tokenizer\n");
        return -1;
    }
    if ((a->text != NULL) + (a->file != NULL) + (a->chat != NULL) > 1) {
        fprintf(stderr, "pic-engine tokenize: give at most one of --text, --file, --chat\n");
        return -1;
    }
    if (a->chat != NULL && (a->model_dir == NULL || a->decode != NULL || a->batch)) {
        fprintf(stderr, "pic-engine tokenize: --chat needs --model (its template) and "
                "excludes --decode and --batch\n");
        return -1;
    }
    if (a->threads < 1 || a->threads > 256 || a->time_n < 0) {
        fprintf(stderr, "pic-engine tokenize: bad --threads or --time\n");
        return -1;
    }
    return 0;
}

/* Parse "1,2, 3" into a malloc'ed array; -1 on a malformed list. */
static int
parse_ids(const char *s, int32_t **ids, size_t *n)
{
    size_t   cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof(*v));

    if (v == NULL) {
        return -1;
    }
    while (*s) {
        char *end;
        long  x;

        while (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t') {
            s++;
        }
        if (*s == '\0') {
            break;
        }
        errno = 0;
        x = strtol(s, &end, 10);
        if (end == s || errno != 0 || x < 0 || x > INT32_MAX
            || !(*end == '\0' || *end == ',' || *end == ' ' || *end == '\n')) {
            free(v);
            return -1;
        }
        if (pic_grow((void **) &v, &cap, k + 1, sizeof(*v)) != 0) {
            free(v);
            return -1;
        }
        v[k++] = (int32_t)x;
        s = end;
    }
    *ids = v;
    *n = k;
    return 0;
}

static int
run_decode(const pic_tokenizer *tok, const pic_tokenize_args *a)
{
    int32_t *ids;
    size_t   n, len, i;
    char    *text, *js;
    cJSON   *arr, *obj;
    int      rc;

    if (parse_ids(a->decode, &ids, &n) != 0) {
        fprintf(stderr, "pic-engine tokenize: --decode wants comma-separated ids\n");
        return 2;
    }
    if (a->stream) {
        pic_detok   d;
        const char *chunk;

        arr = cJSON_CreateArray();
        pic_detok_init(&d, tok, a->skip_special);
        for (i = 0; i <= n; i++) {
            chunk = i < n ? pic_detok_feed(&d, ids[i], &len) : pic_detok_flush(&d, &len);
            if (chunk == NULL || arr == NULL) {
                fprintf(stderr, "pic-engine tokenize: out of memory\n");
                pic_detok_free(&d);
                cJSON_Delete(arr);
                free(ids);
                return 1;
            }
            cJSON_AddItemToArray(arr, cJSON_CreateString(chunk));
        }
        pic_detok_free(&d);
        js = cJSON_PrintUnformatted(arr);
        cJSON_Delete(arr);
        free(ids);
        if (js == NULL) {
            return 1;
        }
        printf("%s\n", js);
        free(js);
        return 0;
    }
    rc = pic_tokenizer_decode(tok, ids, n, a->skip_special, &text, &len);
    free(ids);
    if (rc != 0) {
        fprintf(stderr, "pic-engine tokenize: decode: %s\n", rc_str(rc));
        return 1;
    }
    if (a->json) {
        obj = cJSON_CreateObject();
        cJSON_AddStringToObject(obj, "text", text);
        js = cJSON_PrintUnformatted(obj);
        cJSON_Delete(obj);
        if (js != NULL) {
            printf("%s\n", js);
        }
        free(js);
    } else {
        fwrite(text, 1, len, stdout);
    }
    free(text);
    return 0;
}

static void *
time_worker(void *arg)
{
    pic_tokenize_job *j = arg;
    int               r;
    size_t            l, n;
    int32_t          *ids;

    for (r = 0; r < j->repeat; r++) {
        for (l = (size_t)j->first; l < j->n_lines; l += (size_t)j->stride) {
            j->rc = pic_tokenizer_encode_flags(j->tok, j->buf + j->line_off[l],
                                               j->line_off[l + 1] - j->line_off[l],
                                               j->flags, &ids, &n);
            if (j->rc != 0) {
                return NULL;
            }
            j->n_ids += n;
            free(ids);
        }
    }
    return NULL;
}

static int
run_time(const pic_tokenizer *tok, const pic_tokenize_args *a, const char *buf,
         size_t len, unsigned flags)
{
    pic_tokenize_job *jobs;
    pthread_t        *th;
    size_t           *off, n_lines = 0, i, n_ids = 0;
    int               t, rc = 0, nt = a->lines ? a->threads : 1;
    double            t0, dt;

    off = malloc((len + 2) * sizeof(*off));
    jobs = calloc((size_t)nt, sizeof(*jobs));
    th = calloc((size_t)nt, sizeof(*th));
    if (off == NULL || jobs == NULL || th == NULL) {
        fprintf(stderr, "pic-engine tokenize: out of memory\n");
        free(off);
        free(jobs);
        free(th);
        return 1;
    }
    off[0] = 0;
    if (a->lines) {
        for (i = 0; i < len; i++) {
            if (buf[i] == '\n') {
                off[++n_lines] = i + 1;
            }
        }
        if (off[n_lines] < len) {
            off[++n_lines] = len;
        }
    } else {
        off[1] = len;
        n_lines = 1;
    }
    for (t = 0; t < nt; t++) {
        jobs[t] = (pic_tokenize_job){ tok, buf, off, n_lines, flags, a->time_n, nt, t, 0, 0 };
    }
    t0 = pic_now_s();
    for (t = 0; t < nt; t++) {
        if (pthread_create(&th[t], NULL, time_worker, &jobs[t]) != 0) {
            time_worker(&jobs[t]);
            th[t] = 0;
        }
    }
    for (t = 0; t < nt; t++) {
        if (th[t]) {
            pthread_join(th[t], NULL);
        }
        n_ids += jobs[t].n_ids;
        rc = rc ? rc : jobs[t].rc;
    }
    dt = pic_now_s() - t0;
    if (rc != 0) {
        fprintf(stderr, "pic-engine tokenize: encode: %s\n", rc_str(rc));
    } else {
        printf("{\"bytes\": %zu, \"repeat\": %d, \"threads\": %d, \"lines\": %zu, "
               "\"ids\": %zu, \"seconds\": %.6f, \"mb_per_s\": %.3f}\n",
               len, a->time_n, nt, n_lines, n_ids / (size_t)a->time_n, dt,
               dt > 0 ? (double)len * a->time_n / dt / 1e6 : 0.0);
    }
    free(off);
    free(jobs);
    free(th);
    return rc ? 1 : 0;
}

static int
add_piece(void *ctx, const char *piece, size_t len, int32_t added_id)
{
    cJSON *arr = ctx, *str;
    char  *z = malloc(len + 1);

    (void) added_id;

    if (z == NULL) {
        return PIC_TOKENIZER_ENOMEM;
    }
    memcpy(z, piece, len);
    z[len] = '\0';
    str = cJSON_CreateString(z);
    free(z);
    if (str == NULL) {
        return PIC_TOKENIZER_ENOMEM;
    }
    cJSON_AddItemToArray(arr, str);
    return 0;
}

/* Print the pieces of text[0..len) as a JSON array of strings. */
static int
print_pieces(const pic_tokenizer *tok, const char *text, size_t len, unsigned flags)
{
    cJSON *arr = cJSON_CreateArray();
    char  *js;
    int    rc;

    if (arr == NULL) {
        return PIC_TOKENIZER_ENOMEM;
    }
    rc = pic_tokenizer_split(tok, text, len, flags, add_piece, arr);
    js = rc == 0 ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (rc == 0 && js == NULL) {
        rc = PIC_TOKENIZER_ENOMEM;
    }
    if (js != NULL) {
        fputs(js, stdout);
        free(js);
    }
    return rc;
}

static int
run_batch(const pic_tokenizer *tok, const char *buf, size_t len, unsigned flags,
          int pieces)
{
    cJSON   *in, *item;
    int32_t *ids;
    size_t   n, i, k = 0;
    int      rc;

    in = cJSON_ParseWithLength(buf, len);
    if (!cJSON_IsArray(in)) {
        fprintf(stderr, "pic-engine tokenize: --batch wants a JSON array of strings\n");
        cJSON_Delete(in);
        return 2;
    }
    printf("[");
    cJSON_ArrayForEach(item, in) {
        if (!cJSON_IsString(item)) {
            fprintf(stderr, "pic-engine tokenize: --batch item %zu is not a string\n", k);
            cJSON_Delete(in);
            return 2;
        }
        if (pieces) {
            printf(k ? ", " : "");
            rc = print_pieces(tok, item->valuestring, strlen(item->valuestring), flags);
            if (rc != 0) {
                fprintf(stderr, "pic-engine tokenize: split item %zu: %s\n", k, rc_str(rc));
                cJSON_Delete(in);
                return 1;
            }
            k++;
            continue;
        }
        rc = pic_tokenizer_encode_flags(tok, item->valuestring, strlen(item->valuestring),
                                        flags, &ids, &n);
        if (rc != 0) {
            fprintf(stderr, "pic-engine tokenize: encode item %zu: %s\n", k, rc_str(rc));
            cJSON_Delete(in);
            return 1;
        }
        printf(k ? ", [" : "[");
        for (i = 0; i < n; i++) {
            printf(i ? ", %d" : "%d", ids[i]);
        }
        printf("]");
        free(ids);
        k++;
    }
    printf("]\n");
    cJSON_Delete(in);
    return 0;
}

static int
run_encode(const pic_tokenizer *tok, const pic_tokenize_args *a)
{
    char     *buf = NULL;
    size_t    len = 0, n, i;
    int32_t  *ids;
    unsigned  flags = a->split_special ? PIC_TOKENIZER_SPLIT_SPECIAL : 0;
    int       rc;
    FILE     *f;

    if (a->text != NULL) {
        len = strlen(a->text);
        buf = strdup(a->text);
    } else {
        f = a->file ? fopen(a->file, "rb") : stdin;
        if (f == NULL) {
            fprintf(stderr, "pic-engine tokenize: cannot open %s: %s\n", a->file,
                    strerror(errno));
            return 1;
        }
        buf = pic_read_stream(f, &len);
        if (f != stdin) {
            fclose(f);
        }
    }
    if (buf == NULL) {
        fprintf(stderr, "pic-engine tokenize: cannot read the input\n");
        return 1;
    }
    if (a->batch) {
        rc = run_batch(tok, buf, len, flags, a->pieces);
        free(buf);
        return rc;
    }
    if (a->time_n > 0) {
        rc = run_time(tok, a, buf, len, flags);
        free(buf);
        return rc;
    }
    if (a->pieces) {
        rc = print_pieces(tok, buf, len, flags);
        free(buf);
        if (rc != 0) {
            fprintf(stderr, "pic-engine tokenize: split: %s\n", rc_str(rc));
            return 1;
        }
        printf("\n");
        return 0;
    }
    rc = pic_tokenizer_encode_flags(tok, buf, len, flags, &ids, &n);
    free(buf);
    if (rc != 0) {
        fprintf(stderr, "pic-engine tokenize: encode: %s\n", rc_str(rc));
        return 1;
    }
    printf(a->json ? "{\"ids\": [" : "");
    for (i = 0; i < n; i++) {
        printf(i ? (a->json ? ", %d" : ",%d") : "%d", ids[i]);
    }
    printf(a->json ? "]}\n" : "\n");
    free(ids);
    return 0;
}

int
pic_cmd_tokenize(int argc, char **argv)
{
    pic_tokenize_args a;
    pic_tokenizer    *tok;
    char             *rendered = NULL;
    char              err[512], path[4096];
    int               rc;

    rc = parse_args(argc, argv, &a);
    if (rc != 0) {
        return rc > 0 ? 0 : 2;
    }
    if (a.model_dir != NULL) {
        tok = pic_checkpoint_tokenizer(a.model_dir, err, sizeof(err));
    } else {
        snprintf(path, sizeof(path), "%s", a.tok_path);
        tok = pic_tokenizer_load(path, err, sizeof(err));
    }
    if (tok == NULL) {
        fprintf(stderr, "pic-engine tokenize: %s\n", err);
        return 1;
    }
    if (a.chat != NULL) {
        pic_template_dialect d;

        if (pic_cli_model_dialect(a.model_dir, &d, err, sizeof(err)) != 0
            || (rendered = pic_cli_render_chat(a.chat, d, err, sizeof(err))) == NULL) {
            fprintf(stderr, "pic-engine tokenize: --chat: %s\n", err);
            pic_tokenizer_free(tok);
            return 2;
        }
        a.text = rendered;
    }
    rc = a.decode != NULL ? run_decode(tok, &a) : run_encode(tok, &a);
    fflush(stdout);
    pic_tokenizer_free(tok);
    free(rendered);
    return rc;
}
