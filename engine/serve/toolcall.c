/*
 * toolcall.c — the model's tool calls into OpenAI tool_calls (toolcall.h).
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pic_buf.h"
#include "pic_json.h"
#include "stopstr.h"
#include "toolcall.h"

#define PIC_TC_OPEN   "<tool_call>"
#define PIC_TC_CLOSE  "</tool_call>"

/* --- helpers --- */

static const char *
pic_find(const char *hay, size_t hlen, const char *needle)
{
    size_t nlen = strlen(needle);

    for (size_t i = 0; nlen <= hlen && i + nlen <= hlen; i++) {
        if (memcmp(hay + i, needle, nlen) == 0) {
            return hay + i;
        }
    }
    return NULL;
}

static void
pic_trim(const char **s, size_t *len)
{
    while (*len > 0 && isspace((unsigned char) (*s)[0])) {
        (*s)++;
        (*len)--;
    }
    while (*len > 0 && isspace((unsigned char) (*s)[*len - 1])) {
        (*len)--;
    }
}

static char *
pic_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);

    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* The JSON-schema type the tool `name` declares for parameter `param`, or
 * NULL when unknown. */
static const char *
pic_schema_type(const cJSON *tools, const char *name, const char *param)
{
    const cJSON *t;

    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *props, *p, *ty;

        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, name) != 0) {
            continue;
        }
        props = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(fn, "parameters"), "properties");
        p = cJSON_GetObjectItemCaseSensitive(props, param);
        ty = cJSON_GetObjectItemCaseSensitive(p, "type");
        return cJSON_IsString(ty) ? ty->valuestring : NULL;
    }
    return NULL;
}

/* --- one block --- */

/* One call object {"name": "...", "arguments" or "parameters": {...}}
 * into out; 0 or -1. */
static int
pic_toolcall_from_object(const cJSON *doc, pic_toolcall_out *out)
{
    const cJSON *name, *args;
    int          rc = -1;

    memset(out, 0, sizeof(*out));
    if (!cJSON_IsObject(doc)) {
        goto done;
    }
    name = cJSON_GetObjectItemCaseSensitive(doc, "name");
    args = cJSON_GetObjectItemCaseSensitive(doc, "arguments");
    if (args == NULL) {
        args = cJSON_GetObjectItemCaseSensitive(doc, "parameters");
    }
    if (!cJSON_IsString(name) || name->valuestring[0] == '\0') {
        goto done;
    }
    out->name = strdup(name->valuestring);
    if (args == NULL) {
        out->arguments = strdup("{}");
    } else if (cJSON_IsString(args)) {
        out->arguments = strdup(args->valuestring);
    } else if (cJSON_IsObject(args)) {
        out->arguments = cJSON_PrintUnformatted(args);
    } else {
        goto done;
    }
    rc = out->name != NULL && out->arguments != NULL ? 0 : -1;
done:
    if (rc != 0) {
        pic_toolcall_clear(out);
    }
    return rc;
}

/* {"name": "...", "arguments": {...}} */
static int
pic_toolcall_parse_json(const char *body, size_t len, pic_toolcall_out *out)
{
    cJSON *doc = cJSON_ParseWithLength(body, len);
    int    rc = pic_toolcall_from_object(doc, out);

    cJSON_Delete(doc);
    return rc;
}

/* <function=NAME><parameter=P>VALUE</parameter>...</function> */
static int
pic_toolcall_parse_xml(const char *body, size_t len, const cJSON *tools,
                       pic_toolcall_out *out)
{
    const char *p = body + strlen("<function="), *end = body + len, *gt, *fend;
    cJSON      *args = cJSON_CreateObject();
    char       *name = NULL;
    int         rc = -1;

    gt = memchr(p, '>', (size_t) (end - p));
    if (args == NULL || gt == NULL || gt == p) {
        goto done;
    }
    name = pic_strndup(p, (size_t) (gt - p));
    if (name == NULL || strpbrk(name, "<\n") != NULL) {
        goto done;
    }
    fend = pic_find(gt, (size_t) (end - gt), "</function>");
    if (fend == NULL) {
        goto done;
    }
    p = gt + 1;
    for (;;) {
        const char *v, *vend, *next, *close;
        char       *pname;
        size_t      vlen;
        const char *type;
        cJSON      *item = NULL;

        while (p < fend && isspace((unsigned char) *p)) {
            p++;
        }
        if (p == fend) {
            break;
        }
        if ((size_t) (fend - p) < 11 || memcmp(p, "<parameter=", 11) != 0) {
            goto done;
        }
        p += 11;
        gt = memchr(p, '>', (size_t) (fend - p));
        if (gt == NULL || gt == p) {
            goto done;
        }
        pname = pic_strndup(p, (size_t) (gt - p));
        if (pname == NULL) {
            goto done;
        }
        v = gt + 1;
        /* the value ends at </parameter>, or (tolerated) at the next
         * <parameter= or at </function> */
        close = pic_find(v, (size_t) (fend - v), "</parameter>");
        next = pic_find(v, (size_t) (fend - v), "<parameter=");
        vend = close && (!next || close < next) ? close : (next ? next : fend);
        p = vend == close ? close + strlen("</parameter>") : vend;
        /* one newline after the tag and one before the end tag are layout */
        if (vend > v && v[0] == '\n') {
            v++;
        }
        if (vend > v && vend[-1] == '\n') {
            vend--;
        }
        vlen = (size_t) (vend - v);
        type = pic_schema_type(tools, name, pname);
        if (type == NULL || strcmp(type, "string") != 0) {
            item = cJSON_ParseWithLength(v, vlen);
            if (item != NULL && vlen > 0 && isspace((unsigned char) v[0])) {
                /* keep " 42" as written */
                cJSON_Delete(item);
                item = NULL;
            }
        }
        if (item == NULL) {
            /* the literal is written with its length: a cJSON string
             * would stop at an embedded NUL */
            pic_buf lit;

            pic_buf_init(&lit);
            if (pic_json_write_string(&lit, v, vlen) == 0 && !lit.oom) {
                item = cJSON_CreateRaw(lit.data);
            }
            pic_buf_free(&lit);
        }
        if (item == NULL) {
            free(pname);
            goto done;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(args, pname);
        cJSON_AddItemToObject(args, pname, item);
        free(pname);
    }
    /* nothing but blanks after </function> */
    for (p = fend + strlen("</function>"); p < end; p++) {
        if (!isspace((unsigned char) *p)) {
            goto done;
        }
    }
    out->name = name;
    name = NULL;
    out->arguments = cJSON_PrintUnformatted(args);
    rc = out->arguments != NULL ? 0 : -1;
done:
    free(name);
    cJSON_Delete(args);
    if (rc != 0) {
        pic_toolcall_clear(out);
    }
    return rc;
}

int
pic_toolcall_parse_body(const char *body, size_t len, const cJSON *tools,
                        pic_toolcall_out *out)
{
    memset(out, 0, sizeof(*out));
    pic_trim(&body, &len);
    if (len > 0 && body[0] == '{') {
        return pic_toolcall_parse_json(body, len, out);
    }
    if (len > 10 && memcmp(body, "<function=", 10) == 0) {
        return pic_toolcall_parse_xml(body, len, tools, out);
    }
    return -1;
}

void
pic_toolcall_clear(pic_toolcall_out *c)
{
    free(c->name);
    free(c->arguments);
    free(c->body);
    c->name = NULL;
    c->arguments = NULL;
    c->body = NULL;
    c->body_len = 0;
}

pic_toolsyntax
pic_toolsyntax_of(pic_template_dialect d)
{
    switch (d) {
    case PIC_TEMPLATE_LLAMA3:
    case PIC_TEMPLATE_LLAMA3_1:
    case PIC_TEMPLATE_LLAMA3_2:
        return PIC_TOOLSYN_LLAMA_JSON;
    case PIC_TEMPLATE_MISTRAL:
    case PIC_TEMPLATE_MISTRAL_NEMO:
        return PIC_TOOLSYN_MISTRAL;
    default:
        return PIC_TOOLSYN_TAGS;
    }
}

const char *
pic_toolsyntax_opening(pic_toolsyntax syn)
{
    return syn == PIC_TOOLSYN_MISTRAL ? "[TOOL_CALLS]"
           : syn == PIC_TOOLSYN_LLAMA_JSON ? "<|python_tag|>" : PIC_TC_OPEN;
}

void
pic_toolcall_id(pic_toolsyntax syn, char *buf, size_t size)
{
    static const char alnum[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static uint64_t   ctr;
    uint64_t          x;
    struct timespec   ts;
    size_t            i;

    clock_gettime(CLOCK_REALTIME, &ts);
    x = ((uint64_t) ts.tv_nsec << 20) ^ (uint64_t) ts.tv_sec ^ ((uint64_t) getpid() << 40)
        ^ (__atomic_add_fetch(&ctr, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull);
    if (size < 30) {
        if (size > 0) {
            buf[0] = '\0';
        }
        return;
    }
    size_t head = syn == PIC_TOOLSYN_MISTRAL ? 0 : 5;
    size_t n = syn == PIC_TOOLSYN_MISTRAL ? 9 : 24;

    memcpy(buf, "call_", head);
    for (i = 0; i < n; i++) {
        /* splitmix64 steps */
        x += 0x9e3779b97f4a7c15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        buf[head + i] = alnum[z % (sizeof(alnum) - 1)];
    }
    buf[head + n] = '\0';
}

/* --- streaming --- */

void
pic_toolstream_init(pic_toolstream *ts, const cJSON *tools, pic_toolsyntax syn)
{
    memset(ts, 0, sizeof(*ts));
    ts->tools = tools;
    ts->syntax = syn;
}

void
pic_toolstream_free(pic_toolstream *ts)
{
    for (int i = 0; i < ts->n_calls; i++) {
        pic_toolcall_clear(&ts->calls[i]);
    }
    free(ts->calls);
    free(ts->buf);
    memset(ts, 0, sizeof(*ts));
}

/* Append n bytes to a growing NUL-terminated string. */
static int
pic_str_add(char **s, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (pic_grow((void **) s, cap, *len + n + 1, 1) != 0) {
        return -1;
    }
    memcpy(*s + *len, p, n);
    *len += n;
    (*s)[*len] = '\0';
    return 0;
}

/* Drop the first n bytes of the held text. */
static void
pic_ts_consume(pic_toolstream *ts, size_t n)
{
    if (ts->buf == NULL || n == 0) {
        return;
    }
    memmove(ts->buf, ts->buf + n, ts->len - n);
    ts->len -= n;
    if (ts->buf) {
        ts->buf[ts->len] = '\0';
    }
}

/* Outside a block: the held text before the opening open (all of it when
 * final and there is none) to content; 1 if the buffer now starts with
 * the opening, 0 if not, -1 on ENOMEM. */
static int
pic_ts_to_open(pic_toolstream *ts, const char *open, int final, char **content,
               size_t *content_len, size_t *out_cap)
{
    int    matched;
    size_t n = pic_stop_scan(ts->buf, ts->len, &open, 1, &matched);

    if (final && !matched) {
        n = ts->len;
    }
    if (n > 0 && pic_str_add(content, content_len, out_cap, ts->buf, n) != 0) {
        return -1;
    }
    pic_ts_consume(ts, n);
    return matched;
}

/* Move a parsed call into ts->calls; -1 on ENOMEM (c cleared). */
static int
pic_ts_add_call(pic_toolstream *ts, pic_toolcall_out *c)
{
    if (pic_grow((void **) &ts->calls, &ts->cap_calls, (size_t) ts->n_calls + 1,
                 sizeof(*ts->calls)) != 0) {
        pic_toolcall_clear(c);
        return -1;
    }
    ts->calls[ts->n_calls++] = *c;
    ts->total_calls++;
    return 0;
}

/* The calls of a whole-answer block (b, n bytes after its opening): Llama's
 * ";"-separated objects or Mistral's array (or one object).  Every call or
 * none: 1 if they parsed (and are in ts->calls), 0 if not, -1 on ENOMEM. */
static int
pic_ts_parse_whole(pic_toolstream *ts, const char *b, size_t n)
{
    pic_toolcall_out got[16];
    int              k = 0, ok = 1;
    cJSON           *doc = NULL;

    pic_trim(&b, &n);
    if (ts->syntax == PIC_TOOLSYN_MISTRAL) {
        const cJSON *o;

        doc = cJSON_ParseWithLength(b, n);
        if (cJSON_IsObject(doc)) {
            ok = pic_toolcall_from_object(doc, &got[k]) == 0 && ++k;
        } else if (cJSON_IsArray(doc) && cJSON_GetArraySize(doc) > 0) {
            cJSON_ArrayForEach(o, doc) {
                if (k == 16 || pic_toolcall_from_object(o, &got[k]) != 0) {
                    ok = 0;
                    break;
                }
                k++;
            }
        } else {
            ok = 0;
        }
        cJSON_Delete(doc);
    } else {
        const char *p = b, *end = b + n, *stop;

        while (ok && p < end) {
            doc = cJSON_ParseWithLengthOpts(p, (size_t) (end - p), &stop, 0);
            ok = doc != NULL && k < 16 && pic_toolcall_from_object(doc, &got[k]) == 0;
            cJSON_Delete(doc);
            if (!ok) {
                break;
            }
            k++;
            for (p = stop; p < end && (isspace((unsigned char) *p) || *p == ';'); p++) {
            }
        }
        ok = ok && k > 0;
    }
    for (int i = 0; i < k; i++) {
        if (!ok) {
            pic_toolcall_clear(&got[i]);
        } else if (pic_ts_add_call(ts, &got[i]) != 0) {
            for (int j = i + 1; j < k; j++) {
                pic_toolcall_clear(&got[j]);
            }
            return -1;
        }
    }
    return ok;
}

/* Llama's and Mistral's calls, which end with the answer. */
static int
pic_ts_feed_whole(pic_toolstream *ts, int final, char **content, size_t *content_len)
{
    const char        *pytag = pic_toolsyntax_opening(PIC_TOOLSYN_LLAMA_JSON);
    const char        *open = pic_toolsyntax_opening(PIC_TOOLSYN_MISTRAL);
    size_t             out_cap = 0;
    int                matched, rc;

    if (!ts->in_block && ts->syntax == PIC_TOOLSYN_LLAMA_JSON && !ts->lead) {
        /* the answer's start decides: a JSON object (maybe after the
         * python tag) is a call, anything else is content */
        size_t i = 0, r, t = strlen(pytag);

        while (i < ts->len && isspace((unsigned char) ts->buf[i])) {
            i++;
        }
        r = ts->len - i;
        if (!final && (r == 0 || (r < t && memcmp(ts->buf + i, pytag, r) == 0))) {
            return 0;                   /* not decided yet */
        }
        ts->lead = 1;
        ts->in_block = r >= t && memcmp(ts->buf + i, pytag, t) == 0;
        if (ts->in_block) {
            i += t;
        }
        ts->in_block = ts->in_block || (i < ts->len && ts->buf[i] == '{');
        ts->skip = i;
    }
    if (!ts->in_block) {
        if (ts->syntax == PIC_TOOLSYN_LLAMA_JSON) {
            /* decided: content to the end */
            if (ts->len > 0
                && pic_str_add(content, content_len, &out_cap, ts->buf, ts->len) != 0) {
                return -1;
            }
            pic_ts_consume(ts, ts->len);
            return 0;
        }
        matched = pic_ts_to_open(ts, open, final, content, content_len, &out_cap);
        if (matched <= 0) {
            return matched;
        }
        ts->in_block = 1;
        ts->skip = strlen(open);
    }
    if (!final) {
        return 0;
    }
    rc = pic_ts_parse_whole(ts, ts->buf + ts->skip, ts->len - ts->skip);
    if (rc < 0) {
        return -1;
    }
    if (rc == 0 && ts->len > 0
        && pic_str_add(content, content_len, &out_cap, ts->buf, ts->len) != 0) {
        return -1;                      /* did not parse: the text as it came */
    }
    pic_ts_consume(ts, ts->len);
    ts->in_block = 0;
    return 0;
}

int
pic_toolstream_feed(pic_toolstream *ts, const char *text, size_t len,
                    int final, char **content, size_t *content_len)
{
    size_t out_cap = 0;

    *content = NULL;
    *content_len = 0;
    if (len > 0 && pic_str_add(&ts->buf, &ts->len, &ts->cap, text, len) != 0) {
        return -1;
    }
    if (ts->syntax != PIC_TOOLSYN_TAGS) {
        return pic_ts_feed_whole(ts, final, content, content_len);
    }
    for (;;) {
        if (!ts->in_block) {
            int matched = pic_ts_to_open(ts, PIC_TC_OPEN, final, content, content_len,
                                         &out_cap);

            if (matched < 0) {
                return -1;
            }
            if (!matched) {
                break;
            }
            pic_ts_consume(ts, strlen(PIC_TC_OPEN));
            ts->in_block = 1;
        } else {
            const char   *close = ts->len ? pic_find(ts->buf, ts->len, PIC_TC_CLOSE) : NULL;
            pic_toolcall_out c;

            if (close == NULL) {
                if (final) {
                    /* an unterminated block is shown as it came */
                    if (pic_str_add(content, content_len, &out_cap, PIC_TC_OPEN,
                                    strlen(PIC_TC_OPEN)) != 0
                        || pic_str_add(content, content_len, &out_cap, ts->buf,
                                       ts->len) != 0) {
                        return -1;
                    }
                    pic_ts_consume(ts, ts->len);
                    ts->in_block = 0;
                }
                break;
            }
            size_t blen = (size_t) (close - ts->buf);
            if (pic_toolcall_parse_body(ts->buf, blen, ts->tools, &c) == 0) {
                c.body = pic_strndup(ts->buf, blen);    /* NULL: arguments whole */
                c.body_len = c.body != NULL ? blen : 0;
                if (pic_ts_add_call(ts, &c) != 0) {
                    return -1;
                }
            } else if (pic_str_add(content, content_len, &out_cap, PIC_TC_OPEN,
                                   strlen(PIC_TC_OPEN)) != 0
                       || pic_str_add(content, content_len, &out_cap, ts->buf,
                                      blen + strlen(PIC_TC_CLOSE)) != 0) {
                return -1;
            }
            pic_ts_consume(ts, blen + strlen(PIC_TC_CLOSE));
            ts->in_block = 0;
        }
    }
    return 0;
}

/* --- streamed arguments --- */

/* Length of the longest tail of s[0..n) that may start a value's end: a
 * proper prefix of an end tag, optionally after the layout newline. */
static size_t
pic_value_tail(const char *s, size_t n)
{
    static const char *const ends[] = { "</parameter>", "<parameter=", "</function>" };
    size_t best = n > 0 && s[n - 1] == '\n' ? 1 : 0;

    for (size_t e = 0; e < 3; e++) {
        size_t m = strlen(ends[e]);
        for (size_t k = m - 1 < n ? m - 1 : n; k > best; k--) {
            if (memcmp(s + n - k, ends[e], k) == 0) {
                best = n - k > 0 && s[n - k - 1] == '\n' ? k + 1 : k;
                break;
            }
        }
    }
    return best;
}

/* Append the JSON literal of a string without its quotes. */
static void
pic_escaped(pic_buf *out, const char *v, size_t n)
{
    pic_buf lit;

    pic_buf_init(&lit);
    pic_json_write_string(&lit, v, n);
    if (lit.len >= 2) {
        pic_buf_append(out, lit.data + 1, lit.len - 2);
    }
    pic_buf_free(&lit);
}

static int
pic_stream_args_xml(const char *b, size_t len, int complete, const cJSON *tools,
                    pic_buf *out)
{
    const char *end = b + len, *p = pic_find(b, len, "<function="), *gt;
    char       *name;
    int         first = 1;

    if (p == NULL || (gt = memchr(p, '>', (size_t) (end - p))) == NULL) {
        return 0;
    }
    p += strlen("<function=");
    name = pic_strndup(p, (size_t) (gt - p));
    if (name == NULL) {
        return -1;
    }
    p = gt + 1;
    for (;;) {
        const char *v, *vend, *close, *next, *fend, *type;
        size_t      rest;
        char       *pname;

        while (p < end && isspace((unsigned char) *p)) {
            p++;
        }
        rest = (size_t) (end - p);
        if (rest >= 11 && memcmp(p, "</function>", 11) == 0) {
            pic_buf_appends(out, first ? "{}" : "}");
            break;
        }
        if (rest < 11 && (memcmp(p, "</function>", rest) == 0
                          || memcmp(p, "<parameter=", rest) == 0)) {
            if (complete) {
                pic_buf_appends(out, first ? "{}" : "}");
            }
            break;                      /* a tag still coming */
        }
        if (rest < 11 || memcmp(p, "<parameter=", 11) != 0
            || (gt = memchr(p + 11, '>', rest - 11)) == NULL) {
            break;                      /* not (yet) a parameter: no more is certain */
        }
        pname = pic_strndup(p + 11, (size_t) (gt - p - 11));
        if (pname == NULL) {
            break;
        }
        pic_buf_appends(out, first ? "{" : ",");
        first = 0;
        pic_json_write_string(out, pname, strlen(pname));
        pic_buf_appendc(out, ':');
        v = gt + 1;
        close = pic_find(v, (size_t) (end - v), "</parameter>");
        next = pic_find(v, (size_t) (end - v), "<parameter=");
        fend = pic_find(v, (size_t) (end - v), "</function>");
        vend = close;
        if (next && (!vend || next < vend)) {
            vend = next;
        }
        if (fend && (!vend || fend < vend)) {
            vend = fend;
        }
        type = pic_schema_type(tools, name, pname);
        free(pname);
        if (vend == NULL) {
            /* the value is still coming: a string grows, others wait */
            if (type != NULL && strcmp(type, "string") == 0) {
                size_t n = (size_t) (end - v);
                if (n > 0 && v[0] == '\n') {
                    v++;
                    n--;
                }
                pic_buf_appendc(out, '"');
                pic_escaped(out, v, n - pic_value_tail(v, n));
            }
            break;
        }
        p = vend == close ? close + strlen("</parameter>") : vend;
        if (vend > v && v[0] == '\n') {
            v++;
        }
        if (vend > v && vend[-1] == '\n') {
            vend--;
        }
        {
            size_t vlen = (size_t) (vend - v);
            cJSON *item = NULL;
            char  *txt;

            if (type == NULL || strcmp(type, "string") != 0) {
                item = cJSON_ParseWithLength(v, vlen);
                if (item != NULL && vlen > 0 && isspace((unsigned char) v[0])) {
                    cJSON_Delete(item);
                    item = NULL;
                }
            }
            if (item != NULL && (txt = cJSON_PrintUnformatted(item)) != NULL) {
                pic_buf_appends(out, txt);
                free(txt);
            } else {
                pic_json_write_string(out, v, vlen);
            }
            cJSON_Delete(item);
        }
    }
    free(name);
    return out->oom ? -1 : 0;
}

static int
pic_stream_args_json(const char *b, size_t len, int complete, pic_buf *out)
{
    const char *end = b + len, *p = pic_find(b, len, "\"arguments\""), *v;
    int         depth = 0, in_str = 0, esc = 0;

    if (p == NULL) {
        p = pic_find(b, len, "\"parameters\"");
    }
    if (p == NULL) {
        return complete ? -1 : 0;
    }
    p = memchr(p + 1, '"', (size_t) (end - p - 1)) + 1;
    while (p < end && isspace((unsigned char) *p)) {
        p++;
    }
    if (p < end && *p != ':') {
        return -1;
    }
    for (p++; p < end && isspace((unsigned char) *p); p++) {
    }
    if (p >= end) {
        return complete ? -1 : 0;
    }
    if (*p != '{') {
        return -1;                      /* a string or worse: the parser decides */
    }
    for (v = p; p < end; p++) {
        if (in_str) {
            esc = !esc && *p == '\\';
            in_str = esc || *p != '"';
            continue;
        }
        if (*p == '"') {
            in_str = 1;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if ((*p == '}' || *p == ']') && --depth == 0) {
            p++;
            break;
        }
    }
    pic_buf_append(out, v, (size_t) (p - v));
    return out->oom ? -1 : 0;
}

int
pic_toolcall_stream_args(const char *body, size_t len, int complete, const cJSON *tools,
                         pic_buf *out)
{
    const char *b = body;

    pic_trim(&b, &len);
    if (len > 0 && b[0] == '{') {
        return pic_stream_args_json(b, len, complete, out);
    }
    if (len >= 10 && memcmp(b, "<function=", 10) == 0) {
        return pic_stream_args_xml(b, len, complete, tools, out);
    }
    return len < 10 && (memcmp(b, "<function=", len) == 0) && !complete ? 0 : -1;
}

const char *
pic_toolstream_block(const pic_toolstream *ts, size_t *len)
{
    int open = ts->in_block && ts->syntax == PIC_TOOLSYN_TAGS;

    *len = open ? ts->len : 0;
    return open ? ts->buf : NULL;
}

int
pic_toolstream_pending_name(const pic_toolstream *ts, char *name, size_t size)
{
    const char *b = ts->buf, *p, *e, *end = ts->buf + ts->len;

    if (!ts->in_block || ts->syntax != PIC_TOOLSYN_TAGS || b == NULL || size == 0) {
        return 0;
    }
    if ((p = pic_find(b, ts->len, "<function=")) != NULL) {
        p += strlen("<function=");
        e = memchr(p, '>', (size_t) (end - p));
    } else if ((p = pic_find(b, ts->len, "\"name\"")) != NULL) {
        p += strlen("\"name\"");
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) {
            p++;
        }
        if (p >= end || *p != ':') {
            return 0;
        }
        p++;
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) {
            p++;
        }
        if (p >= end || *p != '"') {
            return 0;
        }
        p++;
        e = memchr(p, '"', (size_t) (end - p));
        if (e != NULL && memchr(p, '\\', (size_t) (e - p)) != NULL) {
            return 0;                   /* escapes: wait for the whole block */
        }
    } else {
        return 0;
    }
    if (e == NULL || e == p || (size_t) (e - p) >= size) {
        return 0;
    }
    memcpy(name, p, (size_t) (e - p));
    name[e - p] = '\0';
    return 1;
}

int
pic_toolstream_take(pic_toolstream *ts, pic_toolcall_out **calls)
{
    int n = ts->n_calls;

    *calls = ts->calls;
    ts->calls = NULL;
    ts->n_calls = ts->cap_calls = 0;
    return n;
}
