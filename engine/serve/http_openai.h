/*
 * http_openai.h — the engine's OpenAI endpoints (http_openai.c).
 */
#ifndef PIC_HTTP_OPENAI_H
#define PIC_HTTP_OPENAI_H

#include <event2/http.h>

#include "scheduler.h"
#include "server_state.h"

/* POST /v1/chat/completions (kind CHAT) or /v1/completions. */
void pic_oai_handle(pic_server *srv, struct evhttp_request *req, pic_req_kind kind);

/* GET /v1/models. */
void pic_oai_models(pic_server *srv, struct evhttp_request *req);

#endif /* PIC_HTTP_OPENAI_H */
