/*
 * tls.c — OpenSSL contexts and bufferevent_openssl sockets for the pool's
 * connections (tls.h).
 */
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <event2/bufferevent_ssl.h>

#include "tls.h"

/* err = what, then OpenSSL's first queued reason (the queue is emptied). */
static void
pic_tls_error(char *err, size_t errlen, const char *what, const char *path)
{
    unsigned long e = ERR_get_error();
    char          reason[160] = "";

    if (e != 0) {
        ERR_error_string_n(e, reason, sizeof(reason));
    }
    ERR_clear_error();
    snprintf(err, errlen, "tls: %s %s%s%s", what, path ? path : "", reason[0] ? ": " : "",
             reason);
}

/* A context of method m with cert/key/ca loaded; verify: whether the peer
 * must present a certificate chaining to ca. */
static SSL_CTX *
pic_tls_ctx(const SSL_METHOD *m, const char *cert, const char *key, const char *ca,
            int server, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(m);

    if (ctx == NULL) {
        pic_tls_error(err, errlen, "cannot create a context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (cert != NULL && SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        pic_tls_error(err, errlen, "cannot load the certificate", cert);
        goto fail;
    }
    if (key != NULL && (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1
                        || SSL_CTX_check_private_key(ctx) != 1)) {
        pic_tls_error(err, errlen, "cannot load the key (or it does not match the "
                      "certificate)", key);
        goto fail;
    }
    if (ca != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
            pic_tls_error(err, errlen, "cannot load the CA", ca);
            goto fail;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER
                           | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), NULL);
        if (server) {
            /* the CA's name goes in the certificate request */
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);

            if (names != NULL) {
                SSL_CTX_set_client_CA_list(ctx, names);
            }
        }
    }
    return ctx;

fail:
    SSL_CTX_free(ctx);
    return NULL;
}

SSL_CTX *
pic_tls_server_ctx(const char *cert, const char *key, const char *ca, char *err,
                   size_t errlen)
{
    SSL_CTX *ctx;

    if (cert == NULL || key == NULL) {
        snprintf(err, errlen, "tls: a server needs a certificate and a key");
        return NULL;
    }
    ctx = pic_tls_ctx(TLS_server_method(), cert, key, ca, 1, err, errlen);
    if (ctx != NULL) {
        /* session resumption with client certificates needs an id context */
        SSL_CTX_set_session_id_context(ctx, (const unsigned char *) "pic-engine", 10);
    }
    return ctx;
}

SSL_CTX *
pic_tls_client_ctx(const char *cert, const char *key, const char *ca, char *err,
                   size_t errlen)
{
    if ((cert == NULL) != (key == NULL)) {
        snprintf(err, errlen, "tls: a client certificate needs its key");
        return NULL;
    }
    return pic_tls_ctx(TLS_client_method(), cert, key, ca, 0, err, errlen);
}

/* A bufferevent_openssl for a new SSL on ctx in state st (opts: BEV_OPT_*). */
static struct bufferevent *
pic_tls_bev(struct event_base *base, SSL_CTX *ctx, enum bufferevent_ssl_state st, int opts)
{
    SSL                *ssl = SSL_new(ctx);
    struct bufferevent *bev;

    if (ssl == NULL) {
        return NULL;
    }
    bev = bufferevent_openssl_socket_new(base, -1, ssl, st, opts);
    if (bev == NULL) {
        SSL_free(ssl);
        return NULL;
    }
    /* a peer that closes without close_notify ends the connection, not an error */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

struct bufferevent *
pic_tls_accept_bev(struct event_base *base, void *ctx)
{
    return pic_tls_bev(base, ctx, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
}

struct bufferevent *
pic_tls_connect_bev(struct event_base *base, SSL_CTX *ctx)
{
    /* as libevent's https client does */
    return pic_tls_bev(base, ctx, BUFFEREVENT_SSL_CONNECTING,
                       BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
}

void
pic_tls_ctx_free(SSL_CTX *ctx)
{
    SSL_CTX_free(ctx);
}

int
pic_tls_unread(struct bufferevent *bev)
{
    SSL *ssl = bev != NULL ? bufferevent_openssl_get_ssl(bev) : NULL;
    int  n;

    if (ssl == NULL) {
        return 0;
    }
    n = SSL_pending(ssl);
    if (n == 0 && SSL_has_pending(ssl)) {
        n = 1;                  /* a record not yet decrypted: size unknown */
    }
    return n;
}

