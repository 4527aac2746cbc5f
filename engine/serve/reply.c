/*
 * reply.c — answers of the engine's HTTP side: a body, a JSON document, an
 * OpenAI-shaped error (counted), and the HTTP status of a failed job.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include <cjson/cJSON.h>

#include "reply.h"

void
pic_reply(struct evhttp_request *req, int code, const char *ctype, const char *body,
          size_t len)
{
    struct evbuffer *buf = evbuffer_new();

    if (buf == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evbuffer_add(buf, body, len);
    evhttp_send_reply(req, code, NULL, buf);
    evbuffer_free(buf);
}

void
pic_reply_json(struct evhttp_request *req, int code, cJSON *doc)
{
    char *s = cJSON_PrintUnformatted(doc);

    cJSON_Delete(doc);
    if (s == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    pic_reply(req, code, "application/json", s, strlen(s));
    free(s);
}

int
pic_job_error_status(pic_job_error why)
{
    switch (why) {
    case PIC_JOB_ERROR_INPUT: return 400;
    case PIC_JOB_ERROR_TOO_LONG: return 422;
    case PIC_JOB_ERROR_UNAVAILABLE: return 503;
    case PIC_JOB_ERROR_TIMEOUT: return 504;
    default: return 500;
    }
}

static const char *
pic_error_type_for(int code)
{
    switch (code) {
    case 400: case 404: case 405: case 413: case 422: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 504: return "timeout";
    default: return code >= 500 ? "server_error" : "invalid_request_error";
    }
}

cJSON *
pic_error_doc(int status, const char *type, const char *param, const char *code,
              const char *message)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON *err = cJSON_AddObjectToObject(doc, "error");

    cJSON_AddStringToObject(err, "message", message ? message : "");
    cJSON_AddStringToObject(err, "type", type && type[0] ? type : pic_error_type_for(status));
    if (param && param[0]) {
        cJSON_AddStringToObject(err, "param", param);
    } else {
        cJSON_AddNullToObject(err, "param");
    }
    if (code && code[0]) {
        cJSON_AddStringToObject(err, "code", code);
    } else {
        cJSON_AddNullToObject(err, "code");
    }
    return doc;
}

void
pic_count_error(pic_server *srv, int code)
{
    srv->hs.errors++;
    if (code >= 500) {
        srv->hs.status_5xx++;
    } else {
        srv->hs.status_4xx++;
    }
}

void
pic_reply_error(pic_server *srv, struct evhttp_request *req, int code, const char *type,
                const char *message)
{
    pic_count_error(srv, code);
    pic_reply_json(req, code, pic_error_doc(code, type, NULL, NULL, message));
}

void
pic_reply_pic_error(pic_server *srv, struct evhttp_request *req, const pic_error *err)
{
    int code = err->status >= 400 && err->status <= 599 ? err->status : 500;

    pic_count_error(srv, code);
    pic_reply_json(req, code, pic_error_doc(code, err->type, err->param, err->code,
                                            err->message));
}


void
pic_seam_json(cJSON *o, const char *name, int w, int recompute)
{
    if (recompute) {
        cJSON_AddStringToObject(o, name, "off");
    } else {
        cJSON_AddNumberToObject(o, name, w);
    }
}
