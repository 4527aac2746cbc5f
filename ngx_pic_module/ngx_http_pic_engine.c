/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: engine pools, their health, and the pic_balancer
 * upstream method (built like ngx_http_upstream_hash_module: round-robin
 * peers, our own choice first, round robin for retries).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"
#include "ngx_http_pic_engine.h"


#define NGX_HTTP_PIC_PROBE_BUFSIZE  16384


typedef struct {
    ngx_http_upstream_rr_peer_data_t   rrp;     /* first: rr peer data */
    ngx_http_request_t                *request;
    ngx_uint_t                         chosen;  /* the plan's peer was tried */
} ngx_http_pic_balancer_peer_data_t;


typedef struct {
    ngx_peer_connection_t              peer;
    ngx_pool_t                        *pool;
    ngx_log_t                          log;     /* quiet: we log the outcome */
    ngx_buf_t                         *request;
    ngx_buf_t                         *response;
    ngx_uint_t                         slot;
    ngx_str_t                          name;
    ngx_http_pic_zone_ctx_t           *zc;
    ngx_http_pic_main_conf_t          *pmcf;
#if (NGX_HTTP_SSL)
    ngx_ssl_t                         *ssl;     /* pic_probe_ssl, or NULL */
    ngx_uint_t                         verify;  /* the engine's cert checked */
#endif
} ngx_http_pic_probe_t;


static ngx_http_pic_pool_t *ngx_http_pic_pool_add(ngx_conf_t *cf,
    ngx_http_pic_main_conf_t *pmcf);
static ngx_int_t ngx_http_upstream_init_pic(ngx_conf_t *cf,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_upstream_init_pic_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_upstream_get_pic_peer(ngx_peer_connection_t *pc,
    void *data);

static void ngx_http_pic_probe_timer(ngx_event_t *ev);
static void ngx_http_pic_probe_start(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_main_conf_t *pmcf, ngx_http_pic_engine_conf_t *ec,
    ngx_log_t *log);
static void ngx_http_pic_probe_write(ngx_event_t *wev);
static void ngx_http_pic_probe_read(ngx_event_t *rev);
#if (NGX_HTTP_SSL)
static void ngx_http_pic_probe_ssl_start(ngx_http_pic_probe_t *pr,
    ngx_connection_t *c);
static void ngx_http_pic_probe_ssl_done(ngx_connection_t *c);
#endif
static ngx_uint_t ngx_http_pic_probe_learn_locked(ngx_http_pic_engine_sh_t *e,
    cJSON *doc);
static ngx_uint_t ngx_http_pic_probe_string(cJSON *item, u_char *dst,
    size_t *len);
static void ngx_http_pic_probe_finish(ngx_http_pic_probe_t *pr,
    const char *failure);
static void ngx_http_pic_engine_mark(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_main_conf_t *pmcf, ngx_uint_t slot, ngx_uint_t ok,
    ngx_uint_t probe, const char *why, ngx_log_t *log);


static ngx_event_t  ngx_http_pic_probe_event;


/* --- configuration --- */


static ngx_http_pic_pool_t *
ngx_http_pic_pool_add(ngx_conf_t *cf, ngx_http_pic_main_conf_t *pmcf)
{
    ngx_http_pic_pool_t  *pool, **pp;

    pool = ngx_pcalloc(cf->pool, sizeof(ngx_http_pic_pool_t));
    if (pool == NULL) {
        return NULL;
    }

    if (ngx_array_init(&pool->engines, cf->pool, 4,
                       sizeof(ngx_http_pic_engine_conf_t))
        != NGX_OK)
    {
        return NULL;
    }

    pp = ngx_array_push(&pmcf->pools);
    if (pp == NULL) {
        return NULL;
    }

    *pp = pool;

    return pool;
}


char *
ngx_http_pic_upstream(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_loc_conf_t  *plcf = conf;

    ngx_str_t                     *value;
    ngx_url_t                      u;
    ngx_uint_t                     i;
    ngx_http_pic_pool_t          **pools, *pool;
    ngx_http_pic_main_conf_t      *pmcf;
    ngx_http_upstream_srv_conf_t  *uscf;

    if (plcf->pool != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url = value[1];
    u.no_resolve = 1;

    uscf = ngx_http_upstream_add(cf, &u, 0);
    if (uscf == NULL) {
        return NGX_CONF_ERROR;
    }

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_pic_module);

    pools = pmcf->pools.elts;

    for (i = 0; i < pmcf->pools.nelts; i++) {
        if (pools[i]->upstream == uscf) {
            plcf->pool = pools[i];
            return NGX_CONF_OK;
        }
    }

    pool = ngx_http_pic_pool_add(cf, pmcf);
    if (pool == NULL) {
        return NGX_CONF_ERROR;
    }

    pool->name = value[1];
    pool->upstream = uscf;
    plcf->pool = pool;

    return NGX_CONF_OK;
}


char *
ngx_http_pic_engine(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_loc_conf_t  *plcf = conf;

    ngx_str_t                   *value;
    ngx_url_t                    u;
    ngx_uint_t                   i;
    ngx_http_pic_pool_t         *pool;
    ngx_http_pic_main_conf_t    *pmcf;
    ngx_http_pic_engine_conf_t  *ec;

    value = cf->args->elts;

    if (plcf->pool != NGX_CONF_UNSET_PTR
        && (plcf->pool == NULL || plcf->pool->upstream))
    {
        return "cannot be combined with \"pic_upstream\"";
    }

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url = value[1];
    u.default_port = 80;
    u.no_resolve = 1;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
        if (u.err) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%s in \"%V\"", u.err, &u.url);
        }

        return NGX_CONF_ERROR;
    }

    if (u.naddrs != 1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must be one IP address and port "
                           "(names are not resolved)", &u.url);
        return NGX_CONF_ERROR;
    }

    if (plcf->pool == NGX_CONF_UNSET_PTR) {
        pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_pic_module);

        pool = ngx_http_pic_pool_add(cf, pmcf);
        if (pool == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_str_set(&pool->name, "pic_engine");
        plcf->pool = pool;
    }

    pool = plcf->pool;
    ec = pool->engines.elts;

    for (i = 0; i < pool->engines.nelts; i++) {
        if (ec[i].name.len == u.addrs[0].name.len
            && ngx_strncmp(ec[i].name.data, u.addrs[0].name.data,
                           ec[i].name.len) == 0)
        {
            return "is duplicate";
        }
    }

    ec = ngx_array_push(&pool->engines);
    if (ec == NULL) {
        return NGX_CONF_ERROR;
    }

    ec->name = u.addrs[0].name;
    ec->sockaddr = u.addrs[0].sockaddr;
    ec->socklen = u.addrs[0].socklen;
    ec->slot = NGX_HTTP_PIC_MAX_ENGINES;
    ec->seed = XXH3_64bits(ec->name.data, ec->name.len);

    return NGX_CONF_OK;
}


ngx_int_t
ngx_http_pic_engine_init_pools(ngx_conf_t *cf)
{
    ngx_uint_t                     i, j, k;
    ngx_http_pic_pool_t          **pools, *pool;
    ngx_http_pic_main_conf_t      *pmcf;
    ngx_http_pic_engine_conf_t    *ec;
    ngx_http_upstream_server_t    *server;
    ngx_http_upstream_srv_conf_t  *uscf;

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_pic_module);

    if (pmcf->poolless) {
        /* locations without a pool: one engine, whatever proxy_pass names */

        pool = ngx_http_pic_pool_add(cf, pmcf);
        if (pool == NULL) {
            return NGX_ERROR;
        }

        ngx_str_set(&pool->name, "proxy_pass");

        ec = ngx_array_push(&pool->engines);
        if (ec == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(ec, sizeof(ngx_http_pic_engine_conf_t));
        ngx_str_set(&ec->name, "proxy_pass");
        ec->slot = NGX_HTTP_PIC_MAX_ENGINES;

        pmcf->default_pool = pool;
    }

    pools = pmcf->pools.elts;

    for (i = 0; i < pmcf->pools.nelts; i++) {
        pool = pools[i];
        uscf = pool->upstream;

        if (uscf == NULL) {
            continue;
        }

        if (uscf->servers == NULL || uscf->servers->nelts == 0) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "pic: upstream \"%V\" in \"pic_upstream\" has no "
                          "servers", &pool->name);
            return NGX_ERROR;
        }

        server = uscf->servers->elts;

        for (j = 0; j < uscf->servers->nelts; j++) {

            if (server[j].backup) {
                continue;
            }

            for (k = 0; k < server[j].naddrs; k++) {
                ec = ngx_array_push(&pool->engines);
                if (ec == NULL) {
                    return NGX_ERROR;
                }

                ec->name = server[j].addrs[k].name;
                ec->sockaddr = server[j].addrs[k].sockaddr;
                ec->socklen = server[j].addrs[k].socklen;
                ec->slot = NGX_HTTP_PIC_MAX_ENGINES;
                ec->seed = XXH3_64bits(ec->name.data, ec->name.len);
            }
        }
    }

    return NGX_OK;
}


/* --- pic_balancer --- */


char *
ngx_http_pic_balancer(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_upstream_srv_conf_t  *uscf;

    uscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_upstream_module);

    if (uscf->peer.init_upstream) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "load balancing method redefined");
    }

    uscf->peer.init_upstream = ngx_http_upstream_init_pic;

    uscf->flags = NGX_HTTP_UPSTREAM_CREATE
                  |NGX_HTTP_UPSTREAM_WEIGHT
                  |NGX_HTTP_UPSTREAM_MAX_CONNS
                  |NGX_HTTP_UPSTREAM_MAX_FAILS
                  |NGX_HTTP_UPSTREAM_FAIL_TIMEOUT
                  |NGX_HTTP_UPSTREAM_DOWN
                  |NGX_HTTP_UPSTREAM_BACKUP;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_upstream_init_pic(ngx_conf_t *cf, ngx_http_upstream_srv_conf_t *us)
{
    if (ngx_http_upstream_init_round_robin(cf, us) != NGX_OK) {
        return NGX_ERROR;
    }

    us->peer.init = ngx_http_upstream_init_pic_peer;

    return NGX_OK;
}


static ngx_int_t
ngx_http_upstream_init_pic_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_pic_balancer_peer_data_t  *bp;

    bp = ngx_palloc(r->pool, sizeof(ngx_http_pic_balancer_peer_data_t));
    if (bp == NULL) {
        return NGX_ERROR;
    }

    r->upstream->peer.data = &bp->rrp;

    if (ngx_http_upstream_init_round_robin_peer(r, us) != NGX_OK) {
        return NGX_ERROR;
    }

    r->upstream->peer.get = ngx_http_upstream_get_pic_peer;

    bp->request = r;
    bp->chosen = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_upstream_get_pic_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_pic_balancer_peer_data_t  *bp = data;

    time_t                        now;
    uintptr_t                     m;
    ngx_uint_t                    n, p;
    ngx_http_pic_ctx_t           *ctx;
    ngx_http_upstream_rr_peer_t  *peer;

    ctx = ngx_http_get_module_ctx(bp->request, ngx_http_pic_module);

    if (bp->chosen || ctx == NULL || ctx->combine_name.len == 0
        || bp->rrp.peers->single)
    {
        return ngx_http_upstream_get_round_robin_peer(pc, &bp->rrp);
    }

    bp->chosen = 1;

    now = ngx_time();

    pc->cached = 0;
    pc->connection = NULL;

    ngx_http_upstream_rr_peers_rlock(bp->rrp.peers);

    for (peer = bp->rrp.peers->peer, p = 0; peer; peer = peer->next, p++) {

        if (peer->name.len != ctx->combine_name.len
            || ngx_strncmp(peer->name.data, ctx->combine_name.data,
                           peer->name.len) != 0)
        {
            continue;
        }

        n = p / (8 * sizeof(uintptr_t));
        m = (uintptr_t) 1 << p % (8 * sizeof(uintptr_t));

        if (bp->rrp.tried[n] & m) {
            break;
        }

        ngx_http_upstream_rr_peer_lock(bp->rrp.peers, peer);

        if (peer->down
            || (peer->max_fails
                && peer->fails >= peer->max_fails
                && now - peer->checked <= peer->fail_timeout)
            || (peer->max_conns && peer->conns >= peer->max_conns))
        {
            ngx_http_upstream_rr_peer_unlock(bp->rrp.peers, peer);
            break;
        }

        bp->rrp.current = peer;

        pc->sockaddr = peer->sockaddr;
        pc->socklen = peer->socklen;
        pc->name = &peer->name;

        peer->conns++;

        if (now - peer->checked > peer->fail_timeout) {
            peer->checked = now;
        }

        ngx_http_upstream_rr_peer_unlock(bp->rrp.peers, peer);
        ngx_http_upstream_rr_peers_unlock(bp->rrp.peers);

        bp->rrp.tried[n] |= m;

        return NGX_OK;
    }

    ngx_http_upstream_rr_peers_unlock(bp->rrp.peers);

    return ngx_http_upstream_get_round_robin_peer(pc, &bp->rrp);
}


/* --- health --- */


uint64_t
ngx_http_pic_engine_eligible(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_main_conf_t *pmcf, ngx_http_pic_pool_t *pool)
{
    time_t                       now;
    uint64_t                     mask, unconfirmed;
    ngx_uint_t                   i;
    ngx_http_pic_engine_sh_t    *e;
    ngx_http_pic_engine_conf_t  *ec;

    now = ngx_time();
    mask = 0;
    unconfirmed = 0;
    ec = pool->engines.elts;

    for (i = 0; i < pool->engines.nelts; i++) {

        if (ec[i].slot >= NGX_HTTP_PIC_MAX_ENGINES) {
            continue;
        }

        e = &zc->sh->engines[ec[i].slot];

        /* without probes a failed engine is retried after fail_timeout */
        if (e->healthy
            || (pmcf->probe_interval == 0
                && now - e->failed_at >= pmcf->fail_timeout))
        {
            mask |= (uint64_t) 1 << ec[i].slot;

        } else if (!e->probe_down) {
            unconfirmed |= (uint64_t) 1 << ec[i].slot;
        }
    }

    /*
     * Every engine is out: those only failed requests took out (no probe
     * confirmed it) are still worth a try rather than a refusal.
     */

    return mask ? mask : unconfirmed;
}


void
ngx_http_pic_engine_account(ngx_http_request_t *r, ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_ctx_t *ctx)
{
    ngx_int_t                   slot;
    ngx_uint_t                  i, ok;
    ngx_http_pic_main_conf_t   *pmcf;
    ngx_http_upstream_state_t  *state;

    if (r->upstream_states == NULL) {
        return;
    }

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pic_module);
    state = r->upstream_states->elts;

    for (i = 0; i < r->upstream_states->nelts; i++) {

        if (state[i].peer == NULL) {
            continue;
        }

        ngx_shmtx_lock(&zc->shpool->mutex);
        slot = ngx_http_pic_engine_slot_locked(zc->sh, state[i].peer, 0);
        ngx_shmtx_unlock(&zc->shpool->mutex);

        if (slot < 0) {
            continue;
        }

        /*
         * Health is judged at the connection level only (DESIGN 4.5): an
         * engine that sent a response header is up, whatever its status
         * (its own 504 is a deadline, not an outage); no header and a
         * 502/504 from nginx is a failed connect, reset or read timeout; no
         * status at all is a request ended from the client's side (a
         * hang-up), which says nothing about the engine.
         */

        if (state[i].header_time != (ngx_msec_t) -1) {
            ok = 1;

        } else if (state[i].status == NGX_HTTP_BAD_GATEWAY
                   || state[i].status == NGX_HTTP_GATEWAY_TIME_OUT
                   || (state[i].status == 0
                       && !r->connection->error
                       && r->headers_out.status
                          != NGX_HTTP_CLIENT_CLOSED_REQUEST))
        {
            ok = 0;
            (void) ngx_atomic_fetch_add(&zc->sh->stats.upstream_errors, 1);
            (void) ngx_atomic_fetch_add(&zc->sh->engines[slot].failures, 1);

        } else {
            continue;
        }

        ngx_http_pic_engine_mark(zc, pmcf, slot, ok, 0, "a request failed",
                                 r->connection->log);
    }
}


/*
 * One outcome for an engine: of a request (probe 0) or of a health probe
 * (probe 1).  Failed requests take it out at `fails` in a row, failed
 * probes at `probe_fails` in a row (then the outage is probe-confirmed:
 * probe_down); it comes back at `probe_passes` good probes in a row since
 * it went out, or at one request that succeeds when no probe confirmed the
 * outage.
 */

static void
ngx_http_pic_engine_mark(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_main_conf_t *pmcf, ngx_uint_t slot, ngx_uint_t ok,
    ngx_uint_t probe, const char *why, ngx_log_t *log)
{
    ngx_uint_t                 up, down, forget, warned;
    ngx_http_pic_engine_sh_t  *e;

    up = 0;
    down = 0;
    forget = 0;
    warned = 0;

    ngx_shmtx_lock(&zc->shpool->mutex);

    e = &zc->sh->engines[slot];

    if (probe) {
        if (ok) {
            e->probe_passes++;
            e->probe_fails = 0;

        } else {
            e->probe_fails++;
            e->probe_passes = 0;
        }
    }

    if (ok) {
        e->fails = 0;

        if (e->healthy) {
            e->probe_down = 0;

        } else if (probe ? e->probe_passes >= pmcf->probe_passes
                         : !e->probe_down)
        {
            e->healthy = 1;
            e->probe_down = 0;
            up = 1;

            /*
             * It may have restarted with an empty cache.  When its probes
             * tell its start time, a restart is seen there (the probe
             * forgets it: ngx_http_pic_probe_learn_locked), and a return
             * after a slow probe or failed requests keeps what it holds;
             * else the index cannot tell, and forgets.
             */
            forget = (e->started == 0);
        }

    } else if (probe) {
        e->failed_at = ngx_time();

        if (e->probe_fails >= pmcf->probe_fails) {
            e->probe_down = 1;

            if (e->healthy) {
                e->healthy = 0;
                down = 1;
            }

        } else if (e->healthy) {
            warned = e->probe_fails;    /* still in rotation */
        }

    } else {
        e->fails++;
        e->failed_at = ngx_time();

        if (e->healthy && e->fails >= pmcf->max_fails) {
            e->healthy = 0;
            e->probe_passes = 0;        /* good probes count from here */
            down = 1;
        }
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);

    if (down) {
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "pic: engine %*s is unhealthy (%s), out of rotation",
                      e->name_len, e->name, why);

    } else if (warned) {
        ngx_log_error(NGX_LOG_INFO, log, 0,
                      "pic: engine %*s probe failed (%s), %ui of %ui",
                      e->name_len, e->name, why, warned, pmcf->probe_fails);
    }

    if (forget) {
        ngx_http_pic_index_forget_engine(zc, slot);
    }

    if (up) {
        ngx_log_error(NGX_LOG_NOTICE, log, 0,
                      "pic: engine %*s is healthy again",
                      e->name_len, e->name);
    }
}


/* --- probes --- */


ngx_int_t
ngx_http_pic_engine_init_process(ngx_cycle_t *cycle)
{
    ngx_http_pic_main_conf_t  *pmcf;

    pmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_pic_module);

    if (pmcf == NULL || pmcf->shm_zone == NULL || pmcf->pools.nelts == 0
        || pmcf->probe_interval == 0)
    {
        return NGX_OK;
    }

    ngx_http_pic_probe_event.handler = ngx_http_pic_probe_timer;
    ngx_http_pic_probe_event.data = pmcf;
    ngx_http_pic_probe_event.log = cycle->log;
    ngx_http_pic_probe_event.cancelable = 1;

    /* a little jitter so that workers do not wake together */
    ngx_add_timer(&ngx_http_pic_probe_event, 1 + ngx_random() % 50);

    return NGX_OK;
}


static void
ngx_http_pic_probe_timer(ngx_event_t *ev)
{
    ngx_http_pic_main_conf_t *pmcf = ev->data;

    uint64_t                     seen;
    ngx_uint_t                   i, j, go;
    ngx_http_pic_pool_t        **pools;
    ngx_http_pic_zone_ctx_t     *zc;
    ngx_http_pic_engine_conf_t  *ec;

    if (ngx_exiting || ngx_quit || ngx_terminate) {
        return;
    }

    zc = pmcf->shm_zone->data;

    ngx_shmtx_lock(&zc->shpool->mutex);

    go = ((ngx_msec_int_t) (ngx_current_msec - zc->sh->probe_next) >= 0
          || zc->sh->probe_next == 0);

    if (go) {
        zc->sh->probe_next = ngx_current_msec + pmcf->probe_interval;
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);

    if (go) {
        seen = 0;
        pools = pmcf->pools.elts;

        for (i = 0; i < pmcf->pools.nelts; i++) {
            ec = pools[i]->engines.elts;

            for (j = 0; j < pools[i]->engines.nelts; j++) {

                if (ec[j].slot >= NGX_HTTP_PIC_MAX_ENGINES
                    || ec[j].sockaddr == NULL
                    || (seen & ((uint64_t) 1 << ec[j].slot)))
                {
                    continue;
                }

                seen |= (uint64_t) 1 << ec[j].slot;

                ngx_http_pic_probe_start(zc, pmcf, &ec[j], ev->log);
            }
        }
    }

    ngx_add_timer(ev, pmcf->probe_interval);
}


static void
ngx_http_pic_probe_start(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_main_conf_t *pmcf, ngx_http_pic_engine_conf_t *ec,
    ngx_log_t *log)
{
    ngx_int_t              rc;
    ngx_pool_t            *pool;
    ngx_connection_t      *c;
    ngx_http_pic_probe_t  *pr;

    pool = ngx_create_pool(1024, log);
    if (pool == NULL) {
        return;
    }

    pr = ngx_pcalloc(pool, sizeof(ngx_http_pic_probe_t));
    if (pr == NULL) {
        ngx_destroy_pool(pool);
        return;
    }

    pr->pool = pool;
    pr->zc = zc;
    pr->pmcf = pmcf;
    pr->slot = ec->slot;
    pr->name = ec->name;

    /* connect errors are ours to report, once, as a state change */
    pr->log = *log;
    pr->log.log_level = NGX_LOG_EMERG;
    pr->log.next = NULL;

    pr->request = ngx_create_temp_buf(pool, sizeof("GET  HTTP/1.0" CRLF
                                                   "Host: " CRLF
                                                   "User-Agent: ngx_pic"
                                                   CRLF CRLF)
                                            + pmcf->probe_uri.len
                                            + ec->name.len);
    pr->response = ngx_create_temp_buf(pool, NGX_HTTP_PIC_PROBE_BUFSIZE);

    if (pr->request == NULL || pr->response == NULL) {
        ngx_destroy_pool(pool);
        return;
    }

    pr->request->last = ngx_sprintf(pr->request->last,
                                    "GET %V HTTP/1.0" CRLF
                                    "Host: %V" CRLF
                                    "User-Agent: ngx_pic" CRLF CRLF,
                                    &pmcf->probe_uri, &ec->name);

    pr->peer.sockaddr = ec->sockaddr;
    pr->peer.socklen = ec->socklen;
    pr->peer.name = &pr->name;
    pr->peer.get = ngx_event_get_peer;
    pr->peer.log = &pr->log;
    pr->peer.log_error = NGX_ERROR_ERR;

#if (NGX_HTTP_SSL)
    pr->ssl = pmcf->probe_ssl_ctx;
    pr->verify = pmcf->probe_ssl_trusted_certificate.len != 0;
#endif

    (void) ngx_atomic_fetch_add(&zc->sh->engines[ec->slot].probes, 1);

    rc = ngx_event_connect_peer(&pr->peer);

    if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
        if (pr->peer.connection) {
            ngx_close_connection(pr->peer.connection);
            pr->peer.connection = NULL;
        }

        ngx_http_pic_probe_finish(pr, "connect() failed");
        return;
    }

    c = pr->peer.connection;
    c->data = pr;
    c->pool = pool;
    c->read->handler = ngx_http_pic_probe_read;
    c->write->handler = ngx_http_pic_probe_write;

    ngx_add_timer(c->write, pmcf->probe_timeout);
    ngx_add_timer(c->read, pmcf->probe_timeout);

    if (rc == NGX_OK) {
        ngx_http_pic_probe_write(c->write);
    }
}


static void
ngx_http_pic_probe_write(ngx_event_t *wev)
{
    ssize_t                n;
    ngx_connection_t      *c;
    ngx_http_pic_probe_t  *pr;

    c = wev->data;
    pr = c->data;

    if (wev->timedout) {
        ngx_http_pic_probe_finish(pr, "timed out");
        return;
    }

#if (NGX_HTTP_SSL)
    if (pr->ssl && c->ssl == NULL) {
        /* connected: the handshake first, then this again */
        ngx_http_pic_probe_ssl_start(pr, c);
        return;
    }
#endif

    while (pr->request->pos < pr->request->last) {
        n = c->send(c, pr->request->pos, pr->request->last - pr->request->pos);

        if (n == NGX_AGAIN) {
            if (ngx_handle_write_event(wev, 0) != NGX_OK) {
                ngx_http_pic_probe_finish(pr, "event error");
            }

            return;
        }

        if (n <= 0) {
            ngx_http_pic_probe_finish(pr, "connection refused or reset");
            return;
        }

        pr->request->pos += n;
    }

    if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    wev->handler = ngx_http_empty_handler;

    if (c->read->ready) {
        ngx_http_pic_probe_read(c->read);
    }
}


static void
ngx_http_pic_probe_read(ngx_event_t *rev)
{
    u_char                *body, *p;
    cJSON                 *doc;
    ssize_t                n;
    ngx_uint_t             status, forget;
    ngx_connection_t      *c;
    ngx_http_pic_probe_t  *pr;

    c = rev->data;
    pr = c->data;

    if (rev->timedout) {
        ngx_http_pic_probe_finish(pr, "timed out");
        return;
    }

    for ( ;; ) {
        if (pr->response->last == pr->response->end) {
            break;
        }

        n = c->recv(c, pr->response->last,
                    pr->response->end - pr->response->last);

        if (n == NGX_AGAIN) {
            if (ngx_handle_read_event(rev, 0) != NGX_OK) {
                ngx_http_pic_probe_finish(pr, "event error");
            }

            return;
        }

        if (n == NGX_ERROR) {
#if (NGX_HTTP_SSL)
            if (c->ssl && pr->response->last > pr->response->pos) {
                /* an engine may close TLS without close_notify after its
                 * answer: what came is judged below */
                break;
            }
#endif
            ngx_http_pic_probe_finish(pr, "connection refused or reset");
            return;
        }

        if (n == 0) {
            break;
        }

        pr->response->last += n;
    }

    /* "HTTP/1.x 200 ..." then the JSON body after the blank line */

    p = pr->response->pos;
    n = pr->response->last - p;

    if (n < 12 || ngx_strncmp(p, "HTTP/1.", 7) != 0) {
        ngx_http_pic_probe_finish(pr, "not an HTTP response");
        return;
    }

    status = ngx_atoi(p + 9, 3);

    if (status != NGX_HTTP_OK) {
        ngx_http_pic_probe_finish(pr, "status is not 200");
        return;
    }

    body = ngx_strlcasestrn(p, pr->response->last, (u_char *) CRLF CRLF, 3);
    forget = 0;

    if (body) {
        body += 4;
        doc = cJSON_ParseWithLength((char *) body, pr->response->last - body);

        if (doc) {
            ngx_shmtx_lock(&pr->zc->shpool->mutex);
            forget = ngx_http_pic_probe_learn_locked(
                                          &pr->zc->sh->engines[pr->slot], doc);
            ngx_shmtx_unlock(&pr->zc->shpool->mutex);

            cJSON_Delete(doc);
        }
    }

    if (forget) {
        /* another engine, or the same restarted: its cache is not ours */
        ngx_http_pic_index_forget_engine(pr->zc, pr->slot);
    }

    ngx_http_pic_probe_finish(pr, NULL);
}


/*
 * What a probe teaches, from the engine's GET /status (pic-engine) or any
 * JSON with the same fields: "id", "uptime_s", "model": {"fingerprint",
 * "template"}, "cache": {"mode"}, and the load as "load" or "scheduler":
 * {"running", "queued"}.
 * Returns 1 when the engine at this address changed or restarted.
 */

/* An engine's /status seam width as kept (index.h: width + 1, or
 * NGX_HTTP_PIC_SEAM_OFF for "off"); dflt when it says neither. */
static ngx_uint_t
ngx_http_pic_engine_seam(const cJSON *j, ngx_uint_t dflt)
{
    if (cJSON_IsString(j) && ngx_strcmp(j->valuestring, "off") == 0) {
        return NGX_HTTP_PIC_SEAM_OFF;
    }

    if (cJSON_IsNumber(j) && j->valuedouble >= 0 && j->valuedouble <= 1024) {
        return (ngx_uint_t) j->valuedouble + 1;
    }

    return dflt;
}

static ngx_uint_t
ngx_http_pic_probe_learn_locked(ngx_http_pic_engine_sh_t *e, cJSON *doc)
{
    u_char                buf[NGX_HTTP_PIC_ENGINE_ID_LEN + 1];
    size_t                len;
    time_t                started;
    cJSON                *item, *obj, *sub;
    ngx_uint_t            changed;
    pic_template_dialect  d;

    changed = 0;

    item = cJSON_GetObjectItemCaseSensitive(doc, "id");

    if (ngx_http_pic_probe_string(item, buf, &len)) {
        if (e->id_len && (len != e->id_len || ngx_memcmp(e->id, buf, len))) {
            changed = 1;
        }

        ngx_memcpy(e->id, buf, len);
        e->id_len = len;
    }

    item = cJSON_GetObjectItemCaseSensitive(doc, "uptime_s");

    if (cJSON_IsNumber(item) && item->valuedouble >= 0) {
        started = ngx_time() - (time_t) item->valuedouble;

        if (e->started && started > e->started + 2) {
            changed = 1;
        }

        e->started = started;

    } else {
        e->started = 0;     /* no uptime now: a return cannot tell a restart */
    }

    obj = cJSON_GetObjectItemCaseSensitive(doc, "model");

    if (cJSON_IsObject(obj)) {
        item = cJSON_GetObjectItemCaseSensitive(obj, "fingerprint");

        if (ngx_http_pic_probe_string(item, buf, &len)) {
            if (e->fp_len
                && (len != e->fp_len || ngx_memcmp(e->fingerprint, buf, len)))
            {
                changed = 1;
            }

            ngx_memcpy(e->fingerprint, buf, len);
            e->fp_len = len;
        }

        item = cJSON_GetObjectItemCaseSensitive(obj, "template");

        if (cJSON_IsString(item)
            && pic_template_dialect_parse(item->valuestring, &d) == 0)
        {
            e->dialect = d;
        }
    }

    obj = cJSON_GetObjectItemCaseSensitive(doc, "cache");
    item = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, "mode")
                               : NULL;

    /* its seam widths and where it took them (a calibration file or not) */

    if (cJSON_IsObject(obj)) {
        sub = cJSON_GetObjectItemCaseSensitive(obj, "seam");

        e->seam = ngx_http_pic_engine_seam(sub, e->seam);

        sub = cJSON_GetObjectItemCaseSensitive(obj, "seam_doc");

        e->seam_doc = ngx_http_pic_engine_seam(sub, e->seam);

        sub = cJSON_GetObjectItemCaseSensitive(obj, "seam_source");

        e->seam_source = !cJSON_IsString(sub) ? NGX_HTTP_PIC_SEAM_UNKNOWN
                     : ngx_strcmp(sub->valuestring, "calibration") == 0
                       ? NGX_HTTP_PIC_SEAM_CALIBRATION
                     : ngx_strcmp(sub->valuestring, "--seam") == 0
                       ? NGX_HTTP_PIC_SEAM_FLAG
                     : ngx_strcmp(sub->valuestring, "default") == 0
                       ? NGX_HTTP_PIC_SEAM_DEFAULT : NGX_HTTP_PIC_SEAM_UNKNOWN;
    }

    /* its break-even length, to size segments (docs/SIZING.md) */

    obj = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj,
                                                                 "capacity")
                              : NULL;
    obj = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj,
                                                         "break_even_tokens")
                              : NULL;

    if (cJSON_IsNumber(obj) && obj->valuedouble >= 1
        && obj->valuedouble < (double) (1 << 20))
    {
        e->break_even = (ngx_uint_t) (obj->valuedouble + 0.5);
    }

    if (cJSON_IsString(item)) {
        if (ngx_strcmp(item->valuestring, "exact") == 0) {
            e->cache = NGX_HTTP_PIC_CACHE_EXACT;

        } else if (ngx_strcmp(item->valuestring, "pic") == 0) {
            e->cache = NGX_HTTP_PIC_CACHE_PIC;

        } else if (ngx_strcmp(item->valuestring, "prefix") == 0) {
            e->cache = NGX_HTTP_PIC_CACHE_PREFIX;

        } else if (ngx_strcmp(item->valuestring, "full") == 0) {
            e->cache = NGX_HTTP_PIC_CACHE_FULL;

        } else {
            e->cache = NGX_HTTP_PIC_CACHE_UNKNOWN;
        }
    }

    item = cJSON_GetObjectItemCaseSensitive(doc, "load");

    if (cJSON_IsNumber(item) && item->valuedouble >= 0) {
        e->load = (ngx_uint_t) item->valuedouble;

    } else {
        obj = cJSON_GetObjectItemCaseSensitive(doc, "scheduler");

        if (cJSON_IsObject(obj)) {
            e->load = 0;

            item = cJSON_GetObjectItemCaseSensitive(obj, "running");
            if (cJSON_IsNumber(item) && item->valuedouble >= 0) {
                e->load += (ngx_uint_t) item->valuedouble;
            }

            item = cJSON_GetObjectItemCaseSensitive(obj, "queued");
            if (cJSON_IsNumber(item) && item->valuedouble >= 0) {
                e->load += (ngx_uint_t) item->valuedouble;
            }
        }
    }

    e->probed_at = ngx_time();

    return changed;
}


/* a short identifier: 1-63 chars of [A-Za-z0-9._:@/-] (safe to print in
 * JSON and Prometheus labels unescaped) */

static ngx_uint_t
ngx_http_pic_probe_string(cJSON *item, u_char *dst, size_t *len)
{
    u_char  *s, c;
    size_t   n, i;

    if (!cJSON_IsString(item)) {
        return 0;
    }

    s = (u_char *) item->valuestring;
    n = ngx_strlen(s);

    if (n == 0 || n > NGX_HTTP_PIC_ENGINE_ID_LEN) {
        return 0;
    }

    for (i = 0; i < n; i++) {
        c = s[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':'
              || c == '@' || c == '/' || c == '-'))
        {
            return 0;
        }
    }

    ngx_memcpy(dst, s, n);
    *len = n;

    return 1;
}


static void
ngx_http_pic_probe_finish(ngx_http_pic_probe_t *pr, const char *failure)
{
    ngx_http_pic_engine_sh_t  *e;

    e = &pr->zc->sh->engines[pr->slot];

    if (failure) {
        (void) ngx_atomic_fetch_add(&e->probe_failures, 1);
    }

    ngx_http_pic_engine_mark(pr->zc, pr->pmcf, pr->slot, failure == NULL, 1,
                             failure ? failure : "", ngx_cycle->log);

    if (pr->peer.connection) {
#if (NGX_HTTP_SSL)
        if (pr->peer.connection->ssl) {
            /* the answer is in: no close_notify round trip */
            pr->peer.connection->ssl->no_wait_shutdown = 1;
            pr->peer.connection->ssl->no_send_shutdown = 1;
            (void) ngx_ssl_shutdown(pr->peer.connection);
        }
#endif
        ngx_close_connection(pr->peer.connection);
    }

    ngx_destroy_pool(pr->pool);
}


#if (NGX_HTTP_SSL)

/* TLS on a connected probe (pic_probe_ssl); the request follows the
 * handshake */

static void
ngx_http_pic_probe_ssl_start(ngx_http_pic_probe_t *pr, ngx_connection_t *c)
{
    if (ngx_ssl_create_connection(pr->ssl, c, NGX_SSL_BUFFER|NGX_SSL_CLIENT)
        != NGX_OK)
    {
        ngx_http_pic_probe_finish(pr, "TLS failed");
        return;
    }

    if (ngx_ssl_handshake(c) == NGX_AGAIN) {
        c->ssl->handler = ngx_http_pic_probe_ssl_done;
        return;
    }

    ngx_http_pic_probe_ssl_done(c);
}


static void
ngx_http_pic_probe_ssl_done(ngx_connection_t *c)
{
    long                   rc;
    X509                  *cert;
    ngx_http_pic_probe_t  *pr;

    pr = c->data;

    if (c->read->timedout || c->write->timedout) {
        ngx_http_pic_probe_finish(pr, "timed out");
        return;
    }

    if (!c->ssl->handshaked) {
        ngx_http_pic_probe_finish(pr, "TLS handshake failed");
        return;
    }

    if (pr->verify) {
        rc = SSL_get_verify_result(c->ssl->connection);
        cert = SSL_get_peer_certificate(c->ssl->connection);

        if (cert) {
            X509_free(cert);
        }

        if (rc != X509_V_OK || cert == NULL) {
            ngx_http_pic_probe_finish(pr, "the engine's certificate is not "
                                          "a pool certificate");
            return;
        }
    }

    c->read->handler = ngx_http_pic_probe_read;
    c->write->handler = ngx_http_pic_probe_write;

    ngx_http_pic_probe_write(c->write);
}

#endif
