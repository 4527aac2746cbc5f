/*
 * http_peer.h — the endpoints engines call on each other (http_peer.c).
 */
#ifndef PIC_HTTP_PEER_H
#define PIC_HTTP_PEER_H

#include <event2/http.h>

#include "server_state.h"

/* GET /v1/pic/segments/{key}?bytes=N&fingerprint=F: a pooled entry's frame;
 * returns the status it answered. */
int pic_peer_segment(pic_server *srv, struct evhttp_request *req, const char *key);

/* POST /v1/pic/prefill: prefill segments for a combine node, stream frames;
 * returns the status it answered, or 0 when the job answers later. */
int pic_peer_prefill(pic_server *srv, struct evhttp_request *req);

/* One stderr line about a peer-endpoint request (its caller's address, the
 * method and path, then what printf(fmt, ...) says): every peer request is
 * logged when it arrives and when it is answered, on the serving engine, so
 * a remote prefill that stalls can be placed from both engines' logs. */
void pic_peer_log(pic_server *srv, struct evhttp_request *req, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* PIC_HTTP_PEER_H */
