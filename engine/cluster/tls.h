/*
 * tls.h — TLS for the pool's own connections (DESIGN.md §4.5, docs/TRUST.md):
 * the engine's listener (gateway → engine, engine → engine)
 * and its pulls and remote prefills as a client, over libevent's
 * bufferevent_openssl with OpenSSL contexts built here.
 *
 * One pool CA signs every pool certificate (gateway and engines).  A server
 * context with a CA accepts only clients that present a certificate chaining
 * to it; a client context with a CA accepts only servers that do.  Names are
 * not checked: the pool CA's signature is the membership (issue no pool
 * certificate to anything that is not a pool member).
 */
#ifndef PIC_TLS_H
#define PIC_TLS_H

#include <stddef.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

typedef struct ssl_ctx_st SSL_CTX;

/* Server context from PEM cert + key; with ca (PEM bundle) non-NULL, clients
 * must present a certificate that chains to it.  NULL with err filled. */
SSL_CTX *pic_tls_server_ctx(const char *cert, const char *key, const char *ca,
                            char *err, size_t errlen);

/* Client context: presents cert + key (both NULL: none); with ca non-NULL
 * the server's certificate must chain to it.  NULL with err filled. */
SSL_CTX *pic_tls_client_ctx(const char *cert, const char *key, const char *ca,
                            char *err, size_t errlen);

/* A bufferevent that accepts one TLS connection on ctx (evhttp_set_bevcb's
 * callback: arg is the SSL_CTX); NULL on ENOMEM. */
struct bufferevent *pic_tls_accept_bev(struct event_base *base, void *ctx);

/* A bufferevent that opens one TLS connection on ctx, for
 * evhttp_connection_base_bufferevent_new (fd -1); NULL on ENOMEM. */
struct bufferevent *pic_tls_connect_bev(struct event_base *base, SSL_CTX *ctx);

/* Free a context (NULL: nothing). */
void pic_tls_ctx_free(SSL_CTX *ctx);

/* Bytes the SSL of a pic_tls_*_bev bufferevent holds that libevent has not
 * read into the bufferevent (0 for a plain socket; 1 when only an
 * undecrypted record is pending): what a stalled peer call's deadline log
 * reports beside the socket's own count. */
int pic_tls_unread(struct bufferevent *bev);

#endif /* PIC_TLS_H */
