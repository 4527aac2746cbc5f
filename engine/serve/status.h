/*
 * status.h — the engine's health, status and metrics endpoints (status.c).
 */
#ifndef PIC_STATUS_H
#define PIC_STATUS_H

#include <event2/http.h>

#include "registry.h"
#include "server_state.h"

/* GET /healthz: {"status": "ok"} once ready, 503 {"status": "loading"} before. */
void pic_endpoint_healthz(pic_server *srv, struct evhttp_request *req);

/* GET /status: JSON (model, caches, scheduler, requests, counters, registry). */
void pic_endpoint_status(pic_server *srv, struct evhttp_request *req);

/* GET /metrics: Prometheus text. */
void pic_endpoint_metrics(pic_server *srv, struct evhttp_request *req);

/* The load figures registered in Redis (registry.h's load callback; arg: srv). */
void pic_server_load(void *arg, pic_registry_load *out);

#endif /* PIC_STATUS_H */
