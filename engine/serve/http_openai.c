/*
 * http_openai.c — the OpenAI endpoints of the engine: a request becomes a
 * scheduler job; the job's text comes back as SSE chunks or one JSON body.
 *
 *   POST /v1/chat/completions, POST /v1/completions, GET /v1/models
 *
 * Request life (loop thread):
 *   parse + validate (shared core pic_request) → segment (the gateway's plan
 *   in the body's "pic" when it fits the prompt we render, else the shared
 *   pipeline, pic_segment.h) → job (a plan job when segments can come from
 *   the pools, else a plain prefill) → pic_sched_submit (429 when the queue
 *   is full) → on each wake: take the job's new text → tool-call filter →
 *   SSE chunks (headers go out with the first token, so an error before it
 *   is a plain HTTP status) → finish reason, usage, [DONE].
 *
 * The request in flight (its job, its client's connection) is inflight.c's;
 * this file says what its news becomes for an OpenAI client.
 *
 * usage.prompt_tokens_details.cached_tokens is what the job reports: the
 * prompt tokens served from cached segment entries.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/socket.h>

#include <xxhash.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "pic_buf.h"
#include "pic_json.h"
#include "pic_plan.h"
#include "pic_request.h"
#include "pic_segment.h"
#include "pic_template.h"
#include "pic_time.h"
#include "pic_utf8.h"
#include "http_openai.h"
#include "inflight.h"
#include "reply.h"
#include "toolcall.h"


/* --- small helpers --- */

static void
pic_oai_make_id(char *buf, size_t size, const char *prefix)
{
    char tail[32];

    pic_toolcall_id(PIC_TOOLSYN_TAGS, tail, sizeof(tail));     /* "call_" + 24 alnum */
    snprintf(buf, size, "%s%s", prefix, tail + 5);
}

static uint64_t
pic_oai_random_seed(void)
{
    static uint64_t ctr;
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t) ts.tv_nsec * 0x9e3779b97f4a7c15ull) ^ (uint64_t) ts.tv_sec
           ^ ((uint64_t) getpid() << 32) ^ ++ctr;
}

static const char *
pic_oai_finish_name(pic_finish f, int tool_calls)
{
    if (tool_calls > 0 && f == PIC_FINISH_STOP) {
        return "tool_calls";
    }
    return f == PIC_FINISH_LENGTH ? "length" : "stop";
}

/* Only blanks? (content between tool calls is layout) */
static int
pic_oai_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r') {
            return 0;
        }
    }
    return 1;
}




/* --- JSON pieces --- */

/* obj[key] = the JSON string s[0..n), written with its length so that
 * embedded NULs (U+0000 is valid model output) survive: a cJSON raw item
 * holding the escaped literal (cJSON strings stop at the first NUL). */
static void
pic_oai_add_text(cJSON *obj, const char *key, const char *s, size_t n)
{
    pic_buf b;

    pic_buf_init(&b);
    if (pic_json_write_string(&b, s ? s : "", s ? n : 0) == 0 && !b.oom) {
        cJSON_AddRawToObject(obj, key, b.data);
    }
    pic_buf_free(&b);
}

static cJSON *
pic_oai_usage(const pic_job_update *u)
{
    cJSON *usage = cJSON_CreateObject();
    cJSON *det;

    cJSON_AddNumberToObject(usage, "prompt_tokens", u->n_prompt);
    cJSON_AddNumberToObject(usage, "completion_tokens", u->n_gen);
    cJSON_AddNumberToObject(usage, "total_tokens", u->n_prompt + u->n_gen);
    det = cJSON_AddObjectToObject(usage, "prompt_tokens_details");
    cJSON_AddNumberToObject(det, "cached_tokens", u->n_cached);
    /* vendor split of the prompt by how it was served (DESIGN §3.4: exact
     * first, then PIC): exact + pic + recomputed = prompt_tokens; cached
     * is exact + the pic tokens whose entries existed before the request */
    det = cJSON_AddObjectToObject(usage, "pic");
    cJSON_AddNumberToObject(det, "exact_tokens", u->n_exact);
    cJSON_AddNumberToObject(det, "pic_tokens", u->n_pic);
    cJSON_AddNumberToObject(det, "recomputed_tokens", u->n_prompt - u->n_exact - u->n_pic);
    return usage;
}

/* A token's text for logprobs: its bytes, each ill-formed byte as U+FFFD
 * (the exact bytes go in "bytes"). */
static void
pic_oai_token_text(pic_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t   k = pic_utf8_decode(s + i, n - i, &cp);

        if (k == 0) {
            pic_buf_appends(b, "\xef\xbf\xbd");
            i++;
        } else {
            pic_buf_append(b, s + i, k);
            i += k;
        }
    }
}

/* {"token","logprob","bytes"} of one id into obj. */
static void
pic_oai_lp_fields(pic_server *srv, cJSON *obj, int32_t id, float lp)
{
    size_t      n = 0;
    const char *tb = srv->tok ? pic_tokenizer_token_bytes(srv->tok, id, &n) : NULL;
    pic_buf     t;
    cJSON      *bytes;

    pic_buf_init(&t);
    pic_oai_token_text(&t, tb ? tb : "", tb ? n : 0);
    pic_oai_add_text(obj, "token", t.data ? t.data : "", t.len);
    pic_buf_free(&t);
    cJSON_AddNumberToObject(obj, "logprob", lp);
    bytes = cJSON_AddArrayToObject(obj, "bytes");
    for (size_t i = 0; tb != NULL && i < n; i++) {
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char) tb[i]));
    }
}

/* The choice's "logprobs" for the records held (they are consumed):
 * chat {"content":[{token, logprob, bytes, top_logprobs}]}, completions
 * {"tokens","token_logprobs","top_logprobs","text_offset"}; null when off. */
static void
pic_oai_add_logprobs(pic_inflight *c, cJSON *choice)
{
    pic_server *srv = c->srv;
    cJSON      *lp;

    if (!c->logprobs) {
        cJSON_AddNullToObject(choice, "logprobs");
        return;
    }
    lp = cJSON_AddObjectToObject(choice, "logprobs");
    if (c->kind == PIC_REQ_CHAT) {
        cJSON *arr = cJSON_AddArrayToObject(lp, "content");

        for (int i = 0; i < c->n_lps; i++) {
            const pic_token_logprob *r = &c->lps[i];
            cJSON *o = cJSON_CreateObject(), *top;

            pic_oai_lp_fields(srv, o, r->id, r->logprob);
            top = cJSON_AddArrayToObject(o, "top_logprobs");
            for (int k = 0; k < r->n_top; k++) {
                cJSON *t = cJSON_CreateObject();
                pic_oai_lp_fields(srv, t, r->top_id[k], r->top_lp[k]);
                cJSON_AddItemToArray(top, t);
            }
            cJSON_AddItemToArray(arr, o);
        }
    } else {
        cJSON *toks = cJSON_AddArrayToObject(lp, "tokens");
        cJSON *lps = cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON *tops = cJSON_AddArrayToObject(lp, "top_logprobs");

        cJSON_AddArrayToObject(lp, "text_offset");
        for (int i = 0; i < c->n_lps; i++) {
            const pic_token_logprob *r = &c->lps[i];
            cJSON *o = cJSON_CreateObject(), *top = cJSON_CreateObject();

            pic_oai_lp_fields(srv, o, r->id, r->logprob);
            cJSON_AddItemToArray(toks, cJSON_DetachItemFromObject(o, "token"));
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(r->logprob));
            for (int k = 0; k < r->n_top; k++) {
                cJSON *t = cJSON_CreateObject(), *name;
                pic_oai_lp_fields(srv, t, r->top_id[k], r->top_lp[k]);
                name = cJSON_GetObjectItemCaseSensitive(t, "token");
                /* a raw item holds the escaped literal: use it as the key */
                if (name != NULL && name->valuestring != NULL) {
                    cJSON *k2 = cJSON_Parse(name->valuestring);
                    if (cJSON_IsString(k2)
                        && !cJSON_GetObjectItemCaseSensitive(top, k2->valuestring)) {
                        cJSON_AddNumberToObject(top, k2->valuestring, r->top_lp[k]);
                    }
                    cJSON_Delete(k2);
                }
                cJSON_Delete(t);
            }
            cJSON_AddItemToArray(tops, top);
            cJSON_Delete(o);
        }
    }
    c->n_lps = 0;
}

/* Keep new logprob records until a chunk (or the answer) carries them. */
static void
pic_oai_keep_logprobs(pic_inflight *c, const pic_token_logprob *lp, int n)
{
    if (n <= 0) {
        return;
    }
    if (pic_grow((void **) &c->lps, &c->cap_lps, (size_t) c->n_lps + (size_t) n,
                 sizeof(*c->lps)) != 0) {
        return;
    }
    memcpy(c->lps + c->n_lps, lp, (size_t) n * sizeof(*lp));
    c->n_lps += n;
}

static cJSON *
pic_oai_call_json(const pic_toolcall_out *tc, pic_toolsyntax syn, int index, int stream)
{
    cJSON *o = cJSON_CreateObject(), *fn;
    char   id[32];

    pic_toolcall_id(syn, id, sizeof(id));
    if (stream) {
        cJSON_AddNumberToObject(o, "index", index);
    }
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "function");
    fn = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(fn, "name", tc->name);
    pic_oai_add_text(fn, "arguments", tc->arguments, strlen(tc->arguments));
    return o;
}

/* A chunk envelope with one choice; returns the choice object. */
static cJSON *
pic_oai_chunk(pic_inflight *c, cJSON **doc)
{
    pic_server *srv = c->srv;
    cJSON      *choices, *ch;

    *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(*doc, "id", c->id);
    cJSON_AddStringToObject(*doc, "object", c->kind == PIC_REQ_CHAT
                                            ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(*doc, "created", (double) c->created);
    cJSON_AddStringToObject(*doc, "model", srv->model_name);
    choices = cJSON_AddArrayToObject(*doc, "choices");
    ch = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    return ch;
}

/* Write one SSE event "data: <json>\n\n" (doc consumed). */
static void
pic_oai_sse(pic_inflight *c, cJSON *doc)
{
    char            *s = cJSON_PrintUnformatted(doc);
    struct evbuffer *b = evbuffer_new();

    cJSON_Delete(doc);
    if (s != NULL && b != NULL) {
        evbuffer_add_printf(b, "data: %s\n\n", s);
        evhttp_send_reply_chunk(c->req, b);
    }
    free(s);
    if (b) {
        evbuffer_free(b);
    }
}

static void
pic_oai_sse_raw(pic_inflight *c, const char *text)
{
    struct evbuffer *b = evbuffer_new();

    if (b != NULL) {
        evbuffer_add(b, text, strlen(text));
        evhttp_send_reply_chunk(c->req, b);
        evbuffer_free(b);
    }
}

/* A planned request's 200: which of the plan's segments the pool holds
 * now (pic_plan.h), for the gateway's index; the gateway strips it. */
static void
pic_oai_held_header(pic_inflight *c)
{
    if (c->from_gateway) {
        evhttp_add_header(evhttp_request_get_output_headers(c->req), PIC_PLAN_HELD_HEADER,
                          c->held != NULL ? c->held : "0");
    }
}

/* Stream: headers and the opening chunk, once. */
static void
pic_oai_stream_start(pic_inflight *c)
{
    struct evkeyvalq *h;
    cJSON            *doc, *ch, *delta;

    if (c->headers_sent) {
        return;
    }
    c->headers_sent = 1;
    pic_oai_held_header(c);
    h = evhttp_request_get_output_headers(c->req);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_add_header(h, "X-Accel-Buffering", "no");
    evhttp_send_reply_start(c->req, 200, "OK");
    if (c->kind == PIC_REQ_CHAT) {
        ch = pic_oai_chunk(c, &doc);
        delta = cJSON_AddObjectToObject(ch, "delta");
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        cJSON_AddNullToObject(ch, "logprobs");
        cJSON_AddNullToObject(ch, "finish_reason");
        if (c->include_usage) {
            cJSON_AddNullToObject(doc, "usage");
        }
        pic_oai_sse(c, doc);
    }
}

/* Stream: a content (or, field "reasoning_content", a reasoning) delta;
 * it carries the logprob records held. */
static void
pic_oai_stream_field(pic_inflight *c, const char *field, const char *text, size_t len)
{
    cJSON *doc, *ch, *delta;

    if (len == 0 || (c->n_stream_calls > 0 && pic_oai_blank(text, len))) {
        return;
    }
    ch = pic_oai_chunk(c, &doc);
    if (c->kind == PIC_REQ_CHAT) {
        delta = cJSON_AddObjectToObject(ch, "delta");
        pic_oai_add_text(delta, field, text, len);
    } else {
        pic_oai_add_text(ch, "text", text, len);
    }
    pic_oai_add_logprobs(c, ch);
    cJSON_AddNullToObject(ch, "finish_reason");
    if (c->include_usage) {
        cJSON_AddNullToObject(doc, "usage");
    }
    pic_oai_sse(c, doc);
}

static void
pic_oai_stream_text(pic_inflight *c, const char *text, size_t len)
{
    pic_oai_stream_field(c, "content", text, len);
}

/* Stream: a tool_calls delta for call `index`: the opening one (id, type,
 * name, empty arguments) when id != NULL, else an arguments fragment. */
static void
pic_oai_stream_call_delta(pic_inflight *c, int index, const char *id, const char *name,
                          const char *args)
{
    cJSON *doc, *ch, *delta, *arr, *o, *fn;

    ch = pic_oai_chunk(c, &doc);
    delta = cJSON_AddObjectToObject(ch, "delta");
    arr = cJSON_AddArrayToObject(delta, "tool_calls");
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    if (id != NULL) {
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "type", "function");
    }
    fn = cJSON_AddObjectToObject(o, "function");
    if (name != NULL) {
        cJSON_AddStringToObject(fn, "name", name);
    }
    pic_oai_add_text(fn, "arguments", args, strlen(args));
    cJSON_AddItemToArray(arr, o);
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddNullToObject(ch, "finish_reason");
    if (c->include_usage) {
        cJSON_AddNullToObject(doc, "usage");
    }
    pic_oai_sse(c, doc);
}

/* Stream: the open call's arguments as far as they are certain (complete:
 * its block closed, body holds it). */
static void
pic_oai_stream_args(pic_inflight *c, const char *body, size_t len, int complete,
                    const char *fallback)
{
    pic_buf a;

    pic_buf_init(&a);
    if (pic_toolcall_stream_args(body, len, complete, c->tools, &a) != 0 || a.oom) {
        /* no stream for this form: the parsed arguments, whole, at the end */
        if (complete && c->args_sent == 0) {
            pic_oai_stream_call_delta(c, c->n_stream_calls, NULL, NULL, fallback);
        }
    } else if (a.len > c->args_sent) {
        pic_oai_stream_call_delta(c, c->n_stream_calls, NULL, NULL, a.data + c->args_sent);
        c->args_sent = a.len;
    }
    pic_buf_free(&a);
}

/* Stream: a block whose function name is known opens its call, then its
 * arguments grow as they come. */
static void
pic_oai_stream_call_open(pic_inflight *c)
{
    char        name[256];
    size_t      len;
    const char *body;

    if (!c->header_open) {
        if (!pic_toolstream_pending_name(&c->ts, name, sizeof(name))) {
            return;
        }
        pic_toolcall_id(c->ts.syntax, c->open_id, sizeof(c->open_id));
        c->header_open = 1;
        c->args_sent = 0;
        pic_oai_stream_call_delta(c, c->n_stream_calls, c->open_id, name, "");
    }
    body = pic_toolstream_block(&c->ts, &len);
    if (body != NULL) {
        pic_oai_stream_args(c, body, len, 0, NULL);
    }
}

/* Stream: one finished tool call: its opening delta unless sent already,
 * then the rest of its arguments. */
static void
pic_oai_stream_call(pic_inflight *c, const pic_toolcall_out *tc)
{
    if (!c->header_open) {
        pic_toolcall_id(c->ts.syntax, c->open_id, sizeof(c->open_id));
        c->args_sent = 0;
        pic_oai_stream_call_delta(c, c->n_stream_calls, c->open_id, tc->name, "");
    }
    pic_oai_stream_args(c, tc->body ? tc->body : "", tc->body_len, 1, tc->arguments);
    c->header_open = 0;
    c->n_stream_calls++;
}

/* --- output path --- */

/* New model text: reasoning split off, the rest through the tool-call
 * filter, to the client (stream) or into the answer (non-stream).  final
 * flushes both filters. */
static void
pic_oai_output(pic_inflight *c, const char *text, size_t len, int final)
{
    char             *content = NULL;
    size_t            clen = 0;
    pic_toolcall_out *calls = NULL;
    int               n = 0;
    pic_buf           rbuf, cbuf;

    pic_buf_init(&rbuf);
    pic_buf_init(&cbuf);
    if (c->split_think) {
        if (pic_think_feed(&c->think, text, len, final, &rbuf, &cbuf) != 0) {
            pic_job_cancel(c->job);
            goto done;
        }
        text = cbuf.data;
        len = cbuf.len;
        if (c->stream) {
            pic_oai_stream_field(c, "reasoning_content", rbuf.data, rbuf.len);
        } else if (rbuf.len > 0) {
            pic_buf_append(&c->reasoning, rbuf.data, rbuf.len);
        }
    }
    if (c->one_call && c->ts.total_calls > 0) {
        len = 0;                            /* the one call allowed is out */
    }
    if (c->parse_tools) {
        if (pic_toolstream_feed(&c->ts, text, len, final, &content, &clen) != 0) {
            pic_job_cancel(c->job);
            goto done;
        }
        n = pic_toolstream_take(&c->ts, &calls);
        text = content;
        len = clen;
        if (c->one_call && n > 0) {
            for (int i = 1; i < n; i++) {
                pic_toolcall_clear(&calls[i]);
            }
            n = 1;
            len = 0;
            pic_job_stop(c->job);           /* parallel_tool_calls: false */
        }
    }
    c->srv->hs.tool_calls += (uint64_t) n;
    if (c->stream) {
        pic_oai_stream_text(c, text, len);
        for (int i = 0; i < n; i++) {
            pic_oai_stream_call(c, &calls[i]);
            pic_toolcall_clear(&calls[i]);
        }
        if (c->header_open && !c->ts.in_block && n == 0) {
            /* the opened block did not parse (its text went to content):
             * the call that went out ends as far as it got ({} if empty) */
            if (c->args_sent == 0) {
                pic_oai_stream_call_delta(c, c->n_stream_calls, NULL, NULL, "{}");
            }
            c->n_stream_calls++;
            c->header_open = 0;
        }
        if (c->parse_tools && !final && !(c->one_call && c->ts.total_calls > 0)) {
            pic_oai_stream_call_open(c);    /* never a second call's header */
        }
    } else {
        if (len > 0) {
            pic_buf_append(&c->content, text, len);
        }
        for (int i = 0; i < n; i++) {
            if (pic_grow((void **) &c->calls, &c->cap_calls, (size_t) c->n_calls + 1,
                         sizeof(*c->calls)) != 0) {
                pic_toolcall_clear(&calls[i]);
                continue;
            }
            c->calls[c->n_calls++] = calls[i];
        }
    }
done:
    free(calls);
    free(content);
    pic_buf_free(&rbuf);
    pic_buf_free(&cbuf);
}

static void
pic_oai_log(pic_inflight *c, int status, const pic_job_update *u)
{
    int64_t now = pic_now_ns();

    fprintf(stderr, "pic-engine[%s]: %s %d prompt=%d gen=%d cached=%d %s%.1f ms%s\n",
            c->srv->opts->id, c->kind == PIC_REQ_CHAT ? "chat" : "completion", status,
            u->n_prompt, u->n_gen, u->n_cached, c->stream ? "stream " : "",
            (double) (now - c->t0_ns) * 1e-6, c->gone ? " (client gone)" : "");
}

/* The job is over: the answer's end, or an error, or nothing (gone). */
static void
pic_oai_finish(pic_inflight *c, const pic_job_update *u)
{
    pic_server *srv = c->srv;

    if (u->started && c->job->t_first_ns > 0) {
        int64_t ttft_ns = c->job->t_first_ns - c->job->t_submit_ns;

        srv->hs.ttft_sum_s += (double) ttft_ns * 1e-9;
        srv->hs.ttft_n++;
        srv->hs.ttft_hist[pic_ttft_bucket((uint64_t) (ttft_ns + 999999) / 1000000)]++;
    }
    srv->hs.latency_sum_s += (double) (pic_now_ns() - c->t0_ns) * 1e-9;
    srv->hs.latency_n++;

    if (c->gone) {
        pic_oai_log(c, 499, u);
        pic_inflight_drop_http(c);
        return;
    }
    if (u->finish == PIC_FINISH_ERROR || u->finish == PIC_FINISH_CANCELLED) {
        int         status = u->finish == PIC_FINISH_CANCELLED
                             ? 503 : pic_job_error_status(u->error);
        const char *msg = u->finish == PIC_FINISH_CANCELLED ? "the server is shutting down"
                                                            : u->err_msg;
        if (status == 504) {
            srv->hs.expired_504++;
        } else if (status == 422) {
            srv->hs.too_long_422++;
        }
        pic_oai_log(c, status, u);
        pic_inflight_release_conn(c);
        if (!c->headers_sent) {
            pic_reply_error(srv, c->req, status, NULL, msg);
        } else {
            /* mid-stream: an error event, as OpenAI streams send them */
            cJSON *doc = pic_error_doc(status, status == 504 ? "timeout" : "server_error",
                                       NULL, NULL, msg);
            srv->hs.errors++;
            pic_oai_sse(c, doc);
            evhttp_send_reply_end(c->req);
        }
        c->req = NULL;
        return;
    }

    /* a normal end: flush the filter, then the closing pieces */
    pic_oai_output(c, NULL, 0, 1);
    int         n_calls = c->stream ? c->n_stream_calls : c->n_calls;
    const char *reason = pic_oai_finish_name(u->finish, n_calls);

    pic_oai_log(c, 200, u);
    if (c->stream) {
        cJSON *doc, *ch;

        pic_oai_stream_start(c);
        ch = pic_oai_chunk(c, &doc);
        if (c->kind == PIC_REQ_CHAT) {
            cJSON_AddObjectToObject(ch, "delta");
        } else {
            cJSON_AddStringToObject(ch, "text", "");
        }
        pic_oai_add_logprobs(c, ch);
        cJSON_AddStringToObject(ch, "finish_reason", reason);
        if (c->include_usage) {
            cJSON_AddNullToObject(doc, "usage");
        }
        pic_oai_sse(c, doc);
        if (c->include_usage) {
            doc = cJSON_CreateObject();
            cJSON_AddStringToObject(doc, "id", c->id);
            cJSON_AddStringToObject(doc, "object", c->kind == PIC_REQ_CHAT
                                    ? "chat.completion.chunk" : "text_completion");
            cJSON_AddNumberToObject(doc, "created", (double) c->created);
            cJSON_AddStringToObject(doc, "model", srv->model_name);
            cJSON_AddArrayToObject(doc, "choices");
            cJSON_AddItemToObject(doc, "usage", pic_oai_usage(u));
            pic_oai_sse(c, doc);
        } else if (c->from_gateway) {
            /* the gateway's per-request history reads usage.pic; clients
             * ignore SSE comments */
            pic_buf line;
            char   *s;

            doc = cJSON_CreateObject();
            cJSON_AddItemToObject(doc, "usage", pic_oai_usage(u));
            s = cJSON_PrintUnformatted(doc);
            cJSON_Delete(doc);
            pic_buf_init(&line);
            pic_buf_printf(&line, ": %s\n\n", s ? s : "{}");
            if (s != NULL && !line.oom) {
                pic_oai_sse_raw(c, line.data);
            }
            pic_buf_free(&line);
            free(s);
        }
        pic_inflight_release_conn(c);
        pic_oai_sse_raw(c, "data: [DONE]\n\n");
        evhttp_send_reply_end(c->req);
    } else {
        cJSON *doc = cJSON_CreateObject(), *choices, *ch;
        const char *text = c->content.data ? c->content.data : "";

        cJSON_AddStringToObject(doc, "id", c->id);
        cJSON_AddStringToObject(doc, "object", c->kind == PIC_REQ_CHAT
                                ? "chat.completion" : "text_completion");
        cJSON_AddNumberToObject(doc, "created", (double) c->created);
        cJSON_AddStringToObject(doc, "model", srv->model_name);
        choices = cJSON_AddArrayToObject(doc, "choices");
        ch = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, ch);
        cJSON_AddNumberToObject(ch, "index", 0);
        if (c->kind == PIC_REQ_CHAT) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            if (c->n_calls > 0 && pic_oai_blank(text, c->content.len)) {
                cJSON_AddNullToObject(msg, "content");
            } else {
                pic_oai_add_text(msg, "content", text, c->content.len);
            }
            if (c->reasoning.len > 0) {
                pic_oai_add_text(msg, "reasoning_content", c->reasoning.data,
                                 c->reasoning.len);
            }
            if (c->n_calls > 0) {
                cJSON *arr = cJSON_AddArrayToObject(msg, "tool_calls");
                for (int i = 0; i < c->n_calls; i++) {
                    cJSON_AddItemToArray(arr, pic_oai_call_json(&c->calls[i], c->ts.syntax, i, 0));
                }
            }
        } else {
            pic_oai_add_text(ch, "text", text, c->content.len);
        }
        pic_oai_add_logprobs(c, ch);
        cJSON_AddStringToObject(ch, "finish_reason", reason);
        cJSON_AddItemToObject(doc, "usage", pic_oai_usage(u));
        pic_inflight_release_conn(c);
        pic_oai_held_header(c);
        pic_reply_json(c->req, 200, doc);
    }
    c->req = NULL;
}


/* With PIC_TRACE set in the environment, one stderr line per finished
 * request: its wall-clock timeline (pic_job_mark), each mark as the
 * milliseconds since the one before it (recv: the request was read;
 * parse; render: rendered and segmented; submit: queued; pickup: a worker
 * took it; tokenize; step / wait: a prefill or plan step; prompt: the
 * last prompt logits; token: the first sampled; done: the worker let go;
 * woken: the loop took the news; replied: the answer handed to libevent). */
static void
pic_oai_trace(const pic_inflight *c)
{
    static int     on = -1;
    const pic_job *j = c->job;
    char           line[1024];
    int            at;

    if (on < 0) {
        on = getenv("PIC_TRACE") != NULL;
    }
    if (!on || j->n_marks == 0) {
        return;
    }
    at = snprintf(line, sizeof(line), "pic-trace: request %s total=%.2fms", c->id,
                  1e-6 * (double) (j->marks[j->n_marks - 1].ns - j->marks[0].ns));
    for (int i = 0; i < j->n_marks && at > 0 && (size_t) at < sizeof(line); i++) {
        at += snprintf(line + at, sizeof(line) - (size_t) at, " %s=%.2f", j->marks[i].what,
                       i == 0 ? 0.0 : 1e-6 * (double) (j->marks[i].ns - j->marks[i - 1].ns));
    }
    fprintf(stderr, "%s\n", line);
}

/* Move one request's news to its client; 1 when the context is finished. */
static int
pic_oai_progress(pic_inflight *c)
{
    pic_job_update u;

    if (!pic_job_take(c->job, &u)) {
        free(u.text);
        free(u.lp);
        return 0;
    }
    pic_oai_keep_logprobs(c, u.lp, u.n_lp);
    free(u.lp);
    if (u.held != NULL) {
        c->held = u.held;
    }
    if (!c->gone && (u.len > 0 || u.started)) {
        if (c->stream) {
            pic_oai_stream_start(c);
        }
        pic_oai_output(c, u.text, u.len, 0);
    }
    free(u.text);
    if (!u.done) {
        return 0;
    }
    pic_job_mark(c->job, "woken", 0);
    pic_oai_finish(c, &u);
    pic_job_mark(c->job, "replied", 0);
    pic_oai_trace(c);
    return 1;
}


/* --- intake --- */

/* Header value as a positive integer, or 0. */
static int64_t
pic_oai_header_int(struct evhttp_request *req, const char *name)
{
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), name);
    char       *end;
    long long   x;

    if (v == NULL) {
        return 0;
    }
    x = strtoll(v, &end, 10);
    return (*end == '\0' && x > 0) ? x : 0;
}

/* The text of a request's last message (its content, text parts joined). */
static void
pic_oai_last_text(const pic_request *r, pic_buf *b)
{
    const pic_message *m;

    if (r->kind == PIC_REQ_COMPLETION) {
        pic_buf_append(b, r->prompt.ptr, r->prompt.len);
        return;
    }
    if (r->n_messages == 0) {
        return;
    }
    m = &r->messages[r->n_messages - 1];
    if (m->content_kind == PIC_CONTENT_STRING) {
        pic_buf_append(b, m->content.ptr, m->content.len);
    }
    for (size_t i = 0; m->content_kind == PIC_CONTENT_PARTS && i < m->n_parts; i++) {
        pic_buf_append(b, m->parts[i].ptr, m->parts[i].len);
    }
}

/* What closes a think block for the model (the Qwen templates' layout). */
#define PIC_OAI_THINK_CLOSE "\n</think>\n\n"

/* Tokens forced at the start of the answer: ids of text into the job. */
static int
pic_oai_force_text(pic_server *srv, pic_job *j, const char *text, size_t len, int stop,
                   pic_error *err)
{
    int32_t *ids = NULL;
    size_t   n = 0;

    if (srv->tok == NULL
        || pic_tokenizer_encode(srv->tok, text, len, &ids, &n) != PIC_TOKENIZER_OK) {
        return pic_error_oom(err, __func__);
    }
    free(j->force);
    j->force = ids;
    j->n_force = (int) n;
    j->force_stop = stop;
    return 0;
}

/* ids of text (special tokens parsed) into *ids / *n; 0 or -1 with err. */
static int
pic_oai_ids(pic_server *srv, const char *text, size_t len, int32_t **ids, int *n,
            pic_error *err)
{
    size_t cnt = 0;

    free(*ids);
    *ids = NULL;
    *n = 0;
    if (srv->tok == NULL
        || pic_tokenizer_encode(srv->tok, text, len, ids, &cnt) != PIC_TOKENIZER_OK) {
        return pic_error_oom(err, __func__);
    }
    *n = (int) cnt;
    return 0;
}

/* The reasoning budget of a constrained answer: the request's
 * thinking_budget (an extension, as Qwen's API names it) or the server's
 * default; 0 or -1 with err (400). */
static int
pic_oai_think_budget(pic_server *srv, const pic_request *r, pic_job *j, pic_error *err)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(r->root, "thinking_budget");

    j->think_budget = srv->opts->reasoning_budget;
    if (b == NULL || cJSON_IsNull(b)) {
        return 0;
    }
    if (!cJSON_IsNumber(b) || b->valuedouble < 0 || b->valuedouble > 1e9
        || b->valuedouble != (double) (int) b->valuedouble) {
        return pic_error_invalid(err, "thinking_budget", "invalid_value",
                                 "'thinking_budget' must be a non-negative integer "
                                 "(reasoning tokens before a constrained answer).");
    }
    j->think_budget = (int) b->valuedouble;
    return 0;
}

/* The grammar of a forced call (tool_choice "required" or named) in syntax
 * syn: the functions to pick from as [{"name", "parameters"}], or the named
 * one's parameters (NULL: any arguments).  A schema outside the grammar's
 * subset constrains only the arguments' JSON shape, and a function whose
 * name a call could not carry is left out (no function left: only the
 * opening is forced).  0 or -1 (ENOMEM). */
static int
pic_oai_call_grammar(const pic_request *r, pic_gcall_syntax syn, pic_job *j, int strict_only)
{
    const cJSON *t;
    char         path[200], msg[256];
    int          named = !strict_only && r->tool_choice == PIC_TOOL_CHOICE_FUNCTION, found = 0;
    int          strict = 0;

    if (!named && (j->call_fns = cJSON_CreateArray()) == NULL) {
        return -1;
    }
    cJSON_ArrayForEach(t, r->tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        cJSON       *item;

        if (!cJSON_IsString(nm) || nm->valuestring[0] == '\0'
            || strpbrk(nm->valuestring, "\"\\<>\n\r\t") != NULL
            || (named && strcmp(nm->valuestring, r->tool_choice_name.ptr) != 0)) {
            continue;
        }
        if (strict_only && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fn, "strict"))) {
            ps = NULL;                  /* tool_choice auto: only strict tools' schemas */
        }
        if (ps != NULL && pic_grammar_check(ps, path, sizeof(path), msg, sizeof(msg)) != 0) {
            ps = NULL;
        }
        strict += ps != NULL;
        found++;
        if (named) {
            if (ps != NULL && (j->call_fns = cJSON_Duplicate(ps, 1)) == NULL) {
                return -1;
            }
            break;
        }
        item = cJSON_CreateObject();
        if (item == NULL || cJSON_AddStringToObject(item, "name", nm->valuestring) == NULL
            || (ps != NULL ? !cJSON_AddItemToObject(item, "parameters", cJSON_Duplicate(ps, 1))
                           : cJSON_AddNullToObject(item, "parameters") == NULL)) {
            cJSON_Delete(item);
            return -1;
        }
        cJSON_AddItemToArray(j->call_fns, item);
    }
    if (found == 0 || (strict_only && strict == 0)) {
        cJSON_Delete(j->call_fns);
        j->call_fns = NULL;
        return 0;
    }
    if (strict_only) {
        j->call_strict = 1 + (int) syn;
        return 0;
    }
    j->json = 1;
    j->call = 1 + (int) syn;
    j->call_named = named;
    return 0;
}

/* The client document delimiter, NULL when documents are not split. */
static const pic_marker *
pic_oai_split(const pic_server *srv)
{
    return srv->opts->no_split_documents ? NULL : &srv->marker;
}

/* The grammar syntax of the served model's tool calls. */
static pic_gcall_syntax
pic_oai_gcall(const pic_server *srv)
{
    switch (pic_toolsyntax_of(srv->dialect)) {
    case PIC_TOOLSYN_LLAMA_JSON:
        return PIC_GCALL_LLAMA;
    case PIC_TOOLSYN_MISTRAL:
        return PIC_GCALL_MISTRAL;
    default:
        return srv->dialect == PIC_TEMPLATE_QWEN3_5 ? PIC_GCALL_XML : PIC_GCALL_JSON;
    }
}

/* The forced opening of a call in syntax syn into f: the tag the model
 * opens calls with, then, for a named function (name, len; NULL: the
 * model picks), the call's text up to its arguments. */
static void
pic_oai_call_opening(pic_buf *f, pic_gcall_syntax syn, pic_template_dialect d,
                     const char *name, size_t len)
{
    if (syn == PIC_GCALL_XML || syn == PIC_GCALL_JSON) {
        pic_buf_appends(f, pic_toolsyntax_opening(PIC_TOOLSYN_TAGS));
        pic_buf_appends(f, "\n");
    } else if (syn == PIC_GCALL_MISTRAL) {
        /* as the dialect renders a call turn: "[TOOL_CALLS] [" or "[TOOL_CALLS][" */
        pic_buf_appends(f, pic_toolsyntax_opening(PIC_TOOLSYN_MISTRAL));
        if (d == PIC_TEMPLATE_MISTRAL) {
            pic_buf_appends(f, " ");
        }
    }
    if (name == NULL) {
        return;
    }
    if (syn == PIC_GCALL_XML) {
        pic_buf_printf(f, "<function=%s>\n", name);
        return;
    }
    pic_buf_appends(f, syn == PIC_GCALL_MISTRAL ? "[{\"name\": " : "{\"name\": ");
    pic_json_write_string(f, name, len);
    pic_buf_appends(f, syn == PIC_GCALL_LLAMA ? ", \"parameters\": " : ", \"arguments\": ");
}

/* Penalties, bias, logprobs, tool_choice, scripted replies and the output
 * splitters of a job; 0 or -1 with err (400 naming the parameter). */
static int
pic_oai_job_params(pic_server *srv, pic_inflight *c, const pic_request *r, pic_error *err)
{
    pic_job *j = c->job;
    int      V = srv->model->cfg.vocab, open_think = 0;

    j->sample.min_p = r->has_min_p ? (float) r->min_p : 0.0f;
    j->sample.presence_penalty = (float) r->presence_penalty;
    j->sample.frequency_penalty = (float) r->frequency_penalty;
    j->sample.repetition_penalty = (float) r->repetition_penalty;
    if (r->logit_bias != NULL) {
        int n = cJSON_GetArraySize(r->logit_bias), i = 0;
        const cJSON *b;

        j->bias_id = malloc((size_t) n * sizeof(int32_t));
        j->bias = malloc((size_t) n * sizeof(float));
        if (j->bias_id == NULL || j->bias == NULL) {
            return pic_error_oom(err, __func__);
        }
        cJSON_ArrayForEach(b, r->logit_bias) {
            long id = strtol(b->string, NULL, 10);
            if (id >= V) {
                char param[PIC_ERROR_PARAM_MAX];
                snprintf(param, sizeof(param), "logit_bias.%s", b->string);
                return pic_error_invalid(err, param, "invalid_value",
                                         "Token id %ld in 'logit_bias' is outside the "
                                         "vocabulary (%d tokens).", id, V);
            }
            j->bias_id[i] = (int32_t) id;
            j->bias[i++] = (float) b->valuedouble;
        }
        j->sample.bias_id = j->bias_id;
        j->sample.bias = j->bias;
        j->sample.n_bias = i;
    }
    j->logprobs = r->logprobs;
    j->top_logprobs = r->top_logprobs;
    c->logprobs = r->logprobs;
    if (r->kind != PIC_REQ_CHAT) {
        goto script;
    }
    open_think = j->text != NULL && pic_think_prompt_open(j->text, j->text_len);
    if (pic_oai_think_budget(srv, r, j, err) != 0) {
        return -1;
    }
    if (r->response_format != PIC_RESPONSE_TEXT && r->tool_choice != PIC_TOOL_CHOICE_REQUIRED
        && r->tool_choice != PIC_TOOL_CHOICE_FUNCTION) {
        /* constrained decoding of the answer (after any reasoning); with
         * tools on offer a tool call may come instead */
        char path[200], msg[256];

        if (pic_grammar_check(r->json_schema, path, sizeof(path), msg, sizeof(msg)) != 0) {
            pic_buf pb;
            int     rc;

            pic_buf_init(&pb);
            pic_buf_printf(&pb, "response_format.json_schema.schema%s%s", path[0] ? "." : "",
                           path);
            rc = pb.oom ? pic_error_oom(err, __func__)
                        : pic_error_invalid(err, pb.data, "unsupported_schema",
                                            "Unsupported JSON schema at '%s': %s.", pb.data,
                                            msg);
            pic_buf_free(&pb);
            return rc;
        }
        j->json = 1;
        if (r->json_schema != NULL
            && (j->json_schema = cJSON_Duplicate(r->json_schema, 1)) == NULL) {
            return pic_error_oom(err, __func__);
        }
        j->json_after_think = open_think;
        j->json_or_tool = r->tools != NULL && r->tool_choice == PIC_TOOL_CHOICE_AUTO;
        if (open_think
            && pic_oai_ids(srv, PIC_OAI_THINK_CLOSE, strlen(PIC_OAI_THINK_CLOSE),
                           &j->think_close, &j->n_think_close, err) != 0) {
            return -1;
        }
    }
    c->split_think = 1;
    pic_think_init(&c->think, open_think);
    c->one_call = !r->parallel_tool_calls;
    j->one_call = c->one_call;
    if (r->tool_choice == PIC_TOOL_CHOICE_REQUIRED || r->tool_choice == PIC_TOOL_CHOICE_FUNCTION) {
        /* the answer opens a call (of that function) and the rest of it
         * follows the tool's schema; with a think block open the model
         * reasons first (bounded), and the opening follows its close */
        pic_buf f;
        int     rc;

        pic_gcall_syntax syn = pic_oai_gcall(srv);

        if (pic_oai_call_grammar(r, syn, j, 0) != 0) {
            return pic_error_oom(err, __func__);
        }
        pic_buf_init(&f);
        if (open_think) {
            pic_buf_appends(&f, PIC_OAI_THINK_CLOSE);
        }
        pic_oai_call_opening(&f, syn, srv->dialect,
                             r->tool_choice == PIC_TOOL_CHOICE_FUNCTION
                             ? r->tool_choice_name.ptr : NULL, r->tool_choice_name.len);
        if (f.oom) {
            rc = pic_error_oom(err, __func__);
        } else if (open_think && j->json) {
            /* after the model's own </think>: the template's blank line, then
             * the opening */
            size_t nc = strlen(PIC_OAI_THINK_CLOSE);
            pic_buf a;

            pic_buf_init(&a);
            pic_buf_appends(&a, "\n\n");
            pic_buf_append(&a, f.data + nc, f.len - nc);
            j->json_after_think = 1;
            rc = a.oom ? pic_error_oom(err, __func__)
                 : pic_oai_ids(srv, f.data, f.len, &j->think_close, &j->n_think_close, err)
                   != 0 ? -1
                 : pic_oai_ids(srv, a.data, a.len, &j->think_after, &j->n_think_after, err);
            pic_buf_free(&a);
        } else if (f.len > 0) {
            /* thinking off (or no schema to follow): forced first tokens */
            rc = pic_oai_force_text(srv, j, f.data, f.len, 0, err);
        } else {
            rc = 0;                     /* Llama's call has no opening: the grammar's */
        }
        pic_buf_free(&f);
        if (rc != 0) {
            return -1;
        }
    }
    if (r->tool_choice == PIC_TOOL_CHOICE_AUTO && r->tools != NULL && srv->tok != NULL
        && pic_tokenizer_token_id(srv->tok, "<tool_call>") >= 0) {
        /* strict tools: a call the model opens itself follows its schema */
        if (pic_oai_call_grammar(r, pic_oai_gcall(srv), j, 1) != 0
            || (j->call_strict
                && pic_oai_ids(srv, "\n", 1, &j->call_nl, &j->n_call_nl,
                               err) != 0)) {
            return pic_error_oom(err, __func__);
        }
        j->strict_think = open_think;
    }
script:
    if (srv->script != NULL) {
        const cJSON *rule;
        pic_buf      last;

        pic_buf_init(&last);
        pic_oai_last_text(r, &last);
        cJSON_ArrayForEach(rule, srv->script) {
            const char *when = cJSON_GetObjectItemCaseSensitive(rule, "when")->valuestring;
            const char *reply = cJSON_GetObjectItemCaseSensitive(rule, "reply")->valuestring;

            if (last.data != NULL && strstr(last.data, when) != NULL) {
                int rc = pic_oai_force_text(srv, j, reply, strlen(reply), 1, err);
                pic_buf_free(&last);
                return rc;
            }
        }
        pic_buf_free(&last);
    }
    return 0;
}

/* Fill the job from the parsed request; 0 or -1 with err. */
static int
pic_oai_job_from_request(pic_server *srv, pic_inflight *c, const pic_request *r,
                         pic_render *rd, pic_error *err)
{
    const pic_server_opts *o = srv->opts;
    pic_job               *j = c->job;
    int64_t                timeout_ms = o->request_timeout_ms, hdr;

    if (r->kind == PIC_REQ_COMPLETION && r->prompt_tokens != NULL) {
        j->prompt = malloc((r->n_prompt_tokens ? r->n_prompt_tokens : 1) * sizeof(int32_t));
        if (j->prompt == NULL) {
            return pic_error_oom(err, __func__);
        }
        memcpy(j->prompt, r->prompt_tokens, r->n_prompt_tokens * sizeof(int32_t));
        j->n_prompt = (int) r->n_prompt_tokens;
        if (j->n_prompt == 0) {
            return pic_error_invalid(err, "prompt", "empty_prompt", "The prompt is empty.");
        }
    } else {
        j->text = pic_buf_detach(&rd->text, &j->text_len);
        if (j->text == NULL) {
            return pic_error_oom(err, __func__);
        }
        if (j->text_len == 0) {
            return pic_error_invalid(err, r->kind == PIC_REQ_CHAT ? "messages" : "prompt",
                                     "empty_prompt", "The prompt is empty.");
        }
    }
    j->max_tokens = r->max_tokens > 0 ? (int) (r->max_tokens > 0x7fffffff ? 0x7fffffff
                                                                          : r->max_tokens)
                                      : o->default_max_tokens;
    j->sample.temperature = r->has_temperature ? (float) r->temperature : 1.0f;
    j->sample.top_p = r->has_top_p ? (float) r->top_p : 1.0f;
    j->sample.top_k = r->has_top_k && r->top_k > 0 ? (int) r->top_k : 0;
    j->sample.seed = r->has_seed ? (uint64_t) r->seed : pic_oai_random_seed();
    for (size_t i = 0; i < r->n_stop && i < PIC_JOB_MAX_STOP; i++) {
        if (r->stop[i].len == 0) {
            continue;
        }
        j->stop[j->n_stop] = strdup(r->stop[i].ptr);
        if (j->stop[j->n_stop] == NULL) {
            return pic_error_oom(err, __func__);
        }
        j->n_stop++;
    }
    /* vLLM's extension: generate up to max_tokens whatever the stop tokens */
    const cJSON *ie = cJSON_GetObjectItemCaseSensitive(r->root, "ignore_eos");
    if (ie != NULL && !cJSON_IsNull(ie)) {
        if (!cJSON_IsBool(ie)) {
            return pic_error_invalid(err, "ignore_eos", "invalid_type",
                                     "'ignore_eos' must be a boolean.");
        }
        j->ignore_eos = cJSON_IsTrue(ie);
    }
    if (pic_oai_job_params(srv, c, r, err) != 0) {
        return -1;
    }
    /* a deadline from the gateway only: covered by its credential */
    hdr = c->authenticated ? pic_oai_header_int(c->req, "X-PIC-Timeout-Ms") : 0;
    if (hdr > 0 && (timeout_ms <= 0 || hdr < timeout_ms)) {
        timeout_ms = hdr;
    }
    j->deadline_ns = timeout_ms > 0 ? pic_now_ns() + timeout_ms * 1000000 : 0;
    j->user = c;
    return 0;
}

/* A plan job for n segments, useful of which can come from a pool or the
 * prefix tree (always: the tree is on); NULL when none can (the plain path
 * then tokenizes the whole text: the same ids) or, with err, out of memory.
 * The caller fills each segment with pic_oai_plan_seg. */
static pic_plan_job *
pic_oai_plan_job(size_t n, size_t useful, int always, pic_error *err)
{
    pic_plan_job *pj;

    if ((useful == 0 && !always) || n == 0 || n > 0x7fffffff) {
        return NULL;
    }
    pj = pic_plan_job_new((int) n);
    if (pj == NULL) {
        pic_error_oom(err, __func__);
    }
    return pj;
}

/* Segment i of pj: bytes [off, off + len) of the prompt, its kind, flags
 * (PIC_SEG_FLAG_DOC and PIC_SEG_FLAG_AHEAD of pic_segment.h; the others
 * are not used) and key. */
static void
pic_oai_plan_seg(pic_plan_job *pj, size_t i, size_t off, size_t len, pic_seg_kind kind,
                 uint32_t flags, const char *key)
{
    pj->segs[i].offset = off;
    pj->segs[i].len = len;
    pj->segs[i].kind = kind;
    pj->segs[i].flags = flags & (PIC_SEG_FLAG_DOC | PIC_SEG_FLAG_AHEAD);
    snprintf(pj->segs[i].key, sizeof(pj->segs[i].key), "%s", key);
}

/* Segments for the pools: the gateway's plan when it fits the prompt we
 * render, else our own segmentation (the shared pipeline).  Fills *text
 * (the rendered prompt, detached) and *pj (NULL: plain prefill).  0, or -1
 * with err. */
static int
pic_oai_segment(pic_server *srv, const pic_request *r, char **text, size_t *text_len,
                pic_plan_job **pj, pic_plan *planp, int *have_plan, pic_error *err)
{
    const cJSON      *node = cJSON_GetObjectItemCaseSensitive(r->root, "pic");
    pic_segment_cfg   cfg;
    pic_segmentation  seg;
    pic_plan          plan;
    int               rc = -1;

    *pj = NULL;
    *text = NULL;
    *have_plan = 0;
    pic_segmentation_init(&seg);
    pic_plan_init(&plan);
    if (node != NULL) {
        pic_template_opts topts = { .dialect = srv->dialect, .split = pic_oai_split(srv),
                                    .split_parts = !srv->opts->no_split_documents };
        char             *js = cJSON_PrintUnformatted(node);
        uint64_t          covered = 0;

        srv->hs.plans_received++;
        if (js == NULL) {
            return pic_error_oom(err, __func__);
        }
        if (pic_plan_decode(&plan, js, strlen(js), err) != 0) {
            free(js);
            snprintf(err->param, sizeof(err->param), "pic");
            goto done;
        }
        free(js);
        if (pic_template_render(&topts, r, &seg.render, err) != 0) {
            goto done;
        }
        /* the documents of unmarked text, as the gateway's pipeline cut them */
        if (pic_docsplit_render(&seg.render, PIC_DOCSPLIT_SOFT_MIN) != 0) {
            pic_error_oom(err, __func__);
            goto done;
        }
        for (size_t i = 0; i < plan.n_segs; i++) {
            covered += plan.segs[i].key.len;
        }
        if (covered == seg.render.text.len && plan.n_segs > 0) {
            size_t useful = 0;

            for (size_t i = 0; i < plan.n_segs; i++) {
                useful += plan.segs[i].kind != PIC_SEG_DYNAMIC;
            }
            pic_render_span newest;

            pic_render_newest(&seg.render, &newest);
            *pj = pic_oai_plan_job(plan.n_segs, useful, srv->prefix != NULL, err);
            for (size_t i = 0; *pj != NULL && i < plan.n_segs; i++) {
                /* client documents: the engine's own render of the request
                 * knows them (the plan carries no flag) */
                pic_oai_plan_seg(*pj, i, plan.segs[i].offset, plan.segs[i].key.len,
                                 plan.segs[i].kind,
                                 (pic_render_client_doc(&seg.render, plan.segs[i].offset)
                                  ? PIC_SEG_FLAG_DOC : 0)
                                 | (pic_render_ahead_of(&seg.render, &newest,
                                                        plan.segs[i].offset)
                                    ? PIC_SEG_FLAG_AHEAD : 0), plan.segs[i].key.hex);
            }
            if (*pj == NULL && err->status != 0) {
                goto done;
            }
            *text = pic_buf_detach(&seg.render.text, text_len);
            rc = *text != NULL ? 0 : pic_error_oom(err, __func__);
            if (rc == 0 && *pj != NULL && plan.scope[0] != '\0') {
                /* the prefix tree of the plan's cache scope */
                (*pj)->scope = XXH64(plan.scope, strlen(plan.scope), 0) | 1;
            }
            if (rc == 0) {
                /* the caller dispatches the remote parts */
                *planp = plan;
                pic_plan_init(&plan);
                *have_plan = 1;
            }
            goto done;
        }
        /* rendered differently (another template or marker setting): the
         * plan's scope cannot be honoured, so nothing is cached (never our
         * own cut, which would key the segments under the global scope) */
        srv->hs.plans_ignored++;
        *text = pic_buf_detach(&seg.render.text, text_len);
        rc = *text != NULL ? 0 : pic_error_oom(err, __func__);
        goto done;
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.dialect = srv->dialect;
    cfg.marker = pic_oai_split(srv);
    cfg.split_parts = !srv->opts->no_split_documents;
    cfg.keys = &srv->keys;
    cfg.min_pic_bytes = srv->opts->min_segment;
    cfg.unmarked_docs = !srv->opts->no_split_documents;
    if (pic_segment_request(&cfg, r, &seg, err) != 0) {
        goto done;
    }
    if (seg.n_segs > 0) {
        size_t useful = 0;

        for (size_t i = 0; i < seg.n_segs; i++) {
            useful += seg.segs[i].kind != PIC_SEG_DYNAMIC;
        }
        *pj = pic_oai_plan_job(seg.n_segs, useful, srv->prefix != NULL, err);
        for (size_t i = 0; *pj != NULL && i < seg.n_segs; i++) {
            pic_oai_plan_seg(*pj, i, seg.segs[i].start, seg.segs[i].len, seg.segs[i].kind,
                             seg.segs[i].flags, seg.segs[i].key.hex);
        }
        if (*pj == NULL && err->status != 0) {
            goto done;
        }
    }
    *text = pic_buf_detach(&seg.render.text, text_len);
    rc = *text != NULL ? 0 : pic_error_oom(err, __func__);
done:
    if (rc != 0) {
        pic_plan_job_free(*pj);
        *pj = NULL;
    }
    pic_segmentation_free(&seg);
    pic_plan_free(&plan);
    return rc;
}


void
pic_oai_handle(pic_server *srv, struct evhttp_request *req, pic_req_kind kind)
{
    struct evbuffer   *in = evhttp_request_get_input_buffer(req);
    size_t             len = evbuffer_get_length(in);
    pic_request        r;
    pic_render         rd;
    pic_template_opts  topts = { .dialect = srv->dialect, .split = pic_oai_split(srv) };
    pic_error          err;
    pic_inflight       *c = NULL;
    pic_plan_job      *pj = NULL;
    pic_plan           plan;
    int                have_plan = 0, authenticated;
    const char        *body;
    int64_t            t_recv = pic_now_ns(), t_parsed = 0;

    memset(&r, 0, sizeof(r));
    pic_render_init(&rd);
    pic_plan_init(&plan);
    pic_error_clear(&err);
    if (srv->model == NULL || srv->sched == NULL) {
        pic_reply_error(srv, req, 503, "server_error", "no model is loaded on this engine");
        return;
    }
    if (srv->stopping) {
        pic_reply_error(srv, req, 503, "server_error", "the server is shutting down");
        return;
    }
    if (len > srv->opts->max_body) {
        char msg[128];
        snprintf(msg, sizeof(msg), "the request body is %zu bytes; the limit is %zu", len,
                 srv->opts->max_body);
        srv->hs.too_large_413++;
        pic_reply_error(srv, req, 413, "invalid_request_error", msg);
        return;
    }
    body = (const char *) evbuffer_pullup(in, -1);
    if (pic_request_parse(&r, kind, body ? body : "", len, NULL, &err) != 0) {
        pic_reply_pic_error(srv, req, &err);
        goto done;
    }
    t_parsed = pic_now_ns();
    authenticated = srv->auth.len > 0 && pic_plan_authorized(srv, req, body ? body : "", len);
    if (!authenticated && !(srv->auth.len == 0 && srv->opts->insecure_pool)
        && cJSON_GetObjectItemCaseSensitive(r.root, "pic") != NULL) {
        /* a plan names peers and keys: only the gateway may send one */
        if (srv->auth.len == 0) {
            srv->hs.auth_failures++;
        }
        pic_error_set(&err, 403, "permission_error", "pic", "pool_auth_failed",
                      srv->auth.len > 0
                      ? "a request with a plan ('pic') needs the pool credential (X-PIC-Auth)"
                      : "a request with a plan ('pic') needs the pool credential: this "
                        "engine has none (--pool-secret-file), so it takes no plans");
        pic_reply_pic_error(srv, req, &err);
        goto done;
    }
    if (srv->pool != NULL && r.prompt_tokens == NULL) {
        /* segments for the pools; the prompt text comes with them */
        char  *text = NULL;
        size_t tlen = 0;

        if (pic_oai_segment(srv, &r, &text, &tlen, &pj, &plan, &have_plan, &err) != 0) {
            pic_reply_pic_error(srv, req, &err);
            goto done;
        }
        pic_buf_free(&rd.text);
        rd.text.data = text;
        rd.text.len = tlen;
        rd.text.cap = tlen + 1;
    } else if (pic_template_render(&topts, &r, &rd, &err) != 0) {
        pic_reply_pic_error(srv, req, &err);
        goto done;
    }
    c = pic_inflight_new(srv, req, kind);
    if (c == NULL) {
        goto done;
    }
    pic_job_mark(c->job, "recv", t_recv);
    pic_job_mark(c->job, "parse", t_parsed);
    pic_job_mark(c->job, "render", c->t0_ns);
    c->progress = pic_oai_progress;
    c->authenticated = authenticated;
    c->stream = r.stream;
    c->include_usage = r.stream && r.include_usage;
    c->from_gateway = cJSON_GetObjectItemCaseSensitive(r.root, "pic") != NULL;
    pic_oai_make_id(c->id, sizeof(c->id), kind == PIC_REQ_CHAT ? "chatcmpl-" : "cmpl-");
    if (kind == PIC_REQ_CHAT && r.tools != NULL && r.tool_choice != PIC_TOOL_CHOICE_NONE) {
        c->tools = cJSON_Duplicate(r.tools, 1);
        c->parse_tools = c->tools != NULL;
        pic_toolstream_init(&c->ts, c->tools, pic_toolsyntax_of(srv->dialect));
        if (srv->tok != NULL) {
            /* the model's call opening, a special token, stays in the text */
            int open = pic_tokenizer_token_id(srv->tok, pic_toolsyntax_opening(c->ts.syntax));

            c->job->call_open1 = open >= 0 && pic_tokenizer_is_special(srv->tok, open)
                                 ? open + 1 : 0;
        }
    }
    c->job->plan = pj;          /* the job owns it from here */
    pj = NULL;
    if (pic_oai_job_from_request(srv, c, &r, &rd, &err) != 0) {
        pic_reply_pic_error(srv, req, &err);
        pic_inflight_free(c);
        goto done;
    }
    if (have_plan && c->job->plan != NULL && pic_sched_has_room(srv->sched)) {
        /* mark what peers will send before a worker can look; only for a
         * job that will be admitted (a 429 fans out to no peer) */
        pic_remote_dispatch(&c->remote, &plan);
    }
    if (pic_inflight_start(srv, c) != 0) {
        goto done;
    }
    srv->hs.completions++;
    srv->hs.streams += (uint64_t) c->stream;

done:
    pic_plan_job_free(pj);
    pic_plan_free(&plan);
    pic_render_free(&rd);
    pic_request_free(&r);
}

void
pic_oai_models(pic_server *srv, struct evhttp_request *req)
{
    cJSON *doc = cJSON_CreateObject(), *data, *m, *pic;

    cJSON_AddStringToObject(doc, "object", "list");
    data = cJSON_AddArrayToObject(doc, "data");
    if (srv->model != NULL) {
        char fp[24];

        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", srv->model_name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", (double) srv->started);
        cJSON_AddStringToObject(m, "owned_by", "pic-engine");
        cJSON_AddNumberToObject(m, "max_model_len", srv->max_ctx);
        snprintf(fp, sizeof(fp), "%016llx", (unsigned long long) srv->model->fingerprint);
        cJSON_AddStringToObject(m, "fingerprint", fp);
        cJSON_AddStringToObject(m, "chat_template", pic_template_dialect_name(srv->dialect));
        pic = cJSON_AddObjectToObject(m, "pic");
        cJSON_AddStringToObject(pic, "cache_mode", srv->pool ? pic_mode_name(srv->plan.mode)
                                                             : "full");
        if (srv->pool) {
            pic_seam_json(pic, "seam", srv->plan.seam.w, srv->plan.recompute);
            cJSON_AddStringToObject(pic, "seam_source", srv->seam_source);
            pic_seam_json(pic, "seam_doc", srv->plan.seam_doc.w, srv->plan.recompute_doc);
            cJSON_AddStringToObject(pic, "seam_doc_source", srv->seam_doc_source);
            cJSON_AddStringToObject(pic, "entry_dtype",
                                    srv->plan.seam.dtype == PIC_DTYPE_BF16 ? "bf16" : "f32");
            cJSON_AddNumberToObject(pic, "min_segment_bytes",
                                    (double) srv->opts->min_segment);
            cJSON_AddNumberToObject(pic, "cache_bytes", (double) srv->opts->cache_bytes);
        }
        cJSON_AddItemToArray(data, m);
    }
    pic_reply_json(req, 200, doc);
}
