/*
 * reply.h — answers of the engine's HTTP side (reply.c): the bottom of
 * engine/serve/, called by every endpoint.
 */
#ifndef PIC_REPLY_H
#define PIC_REPLY_H

#include <stddef.h>

#include <event2/http.h>

#include <cjson/cJSON.h>

#include "pic_error.h"
#include "server_state.h"

/* Send body with content type and status code. */
void pic_reply(struct evhttp_request *req, int code, const char *ctype,
               const char *body, size_t len);

/* Send a cJSON document (consumed) as application/json. */
void pic_reply_json(struct evhttp_request *req, int code, cJSON *doc);

/* Send an OpenAI-shaped error {"error":{message,type,param,code}} and count
 * it; type NULL picks one from the status. */
void pic_reply_error(pic_server *srv, struct evhttp_request *req, int code,
                     const char *type, const char *message);

/* Same from a pic_error (status, message, type, param, code). */
void pic_reply_pic_error(pic_server *srv, struct evhttp_request *req,
                         const pic_error *err);

/* The HTTP status that answers a job failed for reason why (400 input, 422
 * too long, 503 unavailable, 504 timeout, 500 otherwise). */
int pic_job_error_status(pic_job_error why);

/* The OpenAI error object for status/type/message (caller owns it). */
cJSON *pic_error_doc(int status, const char *type, const char *param,
                     const char *code, const char *message);

/* Count an answer of status code (>= 400) in the HTTP counters. */
void pic_count_error(pic_server *srv, int code);

/* o[name] = a seam width w, or "off" when its class is recomputed. */
void pic_seam_json(cJSON *o, const char *name, int w, int recompute);

#endif /* PIC_REPLY_H */
