/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: configuration and request types shared by the
 * module's .c files (module/directives, handler, engine pool, redis,
 * shm index, status).
 */


#ifndef _NGX_HTTP_PIC_MODULE_H_INCLUDED_
#define _NGX_HTTP_PIC_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "pic_auth.h"
#include "pic_error.h"
#include "pic_cdc.h"
#include "pic_key.h"
#include "pic_marker.h"
#include "pic_segment.h"
#include "pic_template.h"
#include "pic_time.h"
#include "pic_usage.h"


#define NGX_HTTP_PIC_VERSION          "0.2.0"

#define NGX_HTTP_PIC_OFF              0
#define NGX_HTTP_PIC_ON               1
#define NGX_HTTP_PIC_OBSERVE          2
#define NGX_HTTP_PIC_AFFINITY         3        /* foreign replicas */

#define NGX_HTTP_PIC_MAX_ENGINES      64
#define NGX_HTTP_PIC_ENGINE_ID_LEN    63
#define NGX_HTTP_PIC_KEY_LEN          16       /* xxh3-128, binary */

#define NGX_HTTP_PIC_CDC_MIN          256
#define NGX_HTTP_PIC_CDC_AVG          1024
#define NGX_HTTP_PIC_CDC_MAX          4096
#define NGX_HTTP_PIC_MIN_SEGMENT      128
#define NGX_HTTP_PIC_BYTES_PER_TOKEN  4        /* of English text, about */
#define NGX_HTTP_PIC_VALUE_FLOOR      64       /* tokens: the shortest segment
                                                * worth an entry (seams and
                                                * placement against the
                                                * recompute it saves;
                                                * docs/SIZING.md) */

#define NGX_HTTP_PIC_SEG_FIRST        0x01     /* leading segment (sink) */
#define NGX_HTTP_PIC_SEG_DYNAMIC      0x02     /* trailing query: never hit */
#define NGX_HTTP_PIC_SEG_HIT          0x04     /* some healthy engine has it */
#define NGX_HTTP_PIC_SEG_REDIS        0x08     /* hit learned from redis */
#define NGX_HTTP_PIC_SEG_S1           0x10     /* S1 sub-window of a miss */
#define NGX_HTTP_PIC_SEG_NEW          0x20     /* prefix holder newly learned */

#define NGX_HTTP_PIC_EXACT_WEIGHT     2        /* pic_exact_weight default */
#define NGX_HTTP_PIC_PREFIX_TTL       3600     /* s, pic:pfx:{chain} in redis */


typedef struct ngx_http_pic_zone_ctx_s  ngx_http_pic_zone_ctx_t;
typedef struct ngx_http_pic_pool_s      ngx_http_pic_pool_t;
typedef struct ngx_http_pic_lookup_s    ngx_http_pic_lookup_t;


/* one engine as configured: an upstream server address or pic_engine */
typedef struct {
    ngx_str_t                    name;         /* "127.0.0.1:8001" */
    struct sockaddr             *sockaddr;
    socklen_t                    socklen;
    ngx_uint_t                   slot;         /* index in the shm table */
    uint64_t                     seed;         /* rendezvous hashing */
} ngx_http_pic_engine_conf_t;


/* an engine pool: pic_upstream NAME, or a list of pic_engine ADDRESS */
struct ngx_http_pic_pool_s {
    ngx_str_t                    name;
    ngx_http_upstream_srv_conf_t *upstream;    /* NULL for a pic_engine list */
    ngx_array_t                  engines;      /* ngx_http_pic_engine_conf_t */
    uint64_t                     mask;         /* shm slots of the engines */
};


typedef struct {
    ngx_str_t                    name;         /* client-visible model id */
    ngx_str_t                    fingerprint;  /* keys; empty: learned */
    ngx_int_t                    dialect;      /* -1: the location's */
} ngx_http_pic_model_t;


typedef struct {
    ngx_shm_zone_t              *shm_zone;     /* pic_zone, NULL when unset */
    ngx_array_t                  pools;        /* ngx_http_pic_pool_t * */

    ngx_addr_t                  *redis;        /* pic_redis, NULL when unset */
    ngx_str_t                    redis_name;
    ngx_str_t                    redis_user;     /* AUTH user (ACL), or empty */
    ngx_str_t                    redis_password; /* AUTH password, or empty;
                                                    never logged */
    ngx_msec_t                   redis_connect_timeout;

    ngx_msec_t                   probe_interval;
    ngx_msec_t                   probe_timeout;
    ngx_str_t                    probe_uri;
    ngx_uint_t                   max_fails;    /* failed requests */
    ngx_uint_t                   probe_fails;  /* failed probes: out */
    ngx_uint_t                   probe_passes; /* good probes: back */
    time_t                       fail_timeout;

    ngx_flag_t                   probe_ssl;    /* pic_probe_ssl */
    ngx_str_t                    probe_ssl_certificate;
    ngx_str_t                    probe_ssl_certificate_key;
    ngx_str_t                    probe_ssl_trusted_certificate;
#if (NGX_HTTP_SSL)
    ngx_ssl_t                   *probe_ssl_ctx; /* NULL: plain probes */
#endif

    pic_auth                    *secret;       /* pic_pool_secret_file, or NULL */

    ngx_http_pic_pool_t         *default_pool; /* the proxy_pass target */
    ngx_uint_t                   enabled;      /* some location has pic */
    ngx_uint_t                   poolless;     /* ... without engines */
} ngx_http_pic_main_conf_t;


typedef struct {
    ngx_uint_t                   mode;         /* pic off|on|observe */
    ngx_flag_t                   status;       /* pic_status here */
    ngx_http_pic_pool_t         *pool;         /* pic_upstream / pic_engine */
    ngx_str_t                    marker_str;   /* pic_marker */
    pic_marker                   marker;
    ngx_flag_t                   split;        /* pic_split_documents */
    size_t                       cdc_min;      /* pic_cdc min avg max */
    size_t                       cdc_avg;
    size_t                       cdc_max;
    pic_cdc                     *cdc;          /* its gear table */
    size_t                       min_segment;  /* pic_min_segment */
    ngx_flag_t                   cdc_auto;     /* neither configured: from */
    ngx_flag_t                   min_segment_auto; /* the engines' L* */
    ngx_flag_t                   s1;           /* pic_s1_fallback */
    ngx_http_complex_value_t    *scope;        /* pic_scope, NULL: global */
    size_t                       body_max;     /* pic_body_max */
    void                        *thread_pool;  /* pic_thread_pool, or NULL */
    size_t                       thread_min;   /* ... for bodies this long */
    ngx_msec_t                   redis_timeout;/* pic_redis_timeout */
    ngx_uint_t                   imbalance;    /* pic_imbalance */
    ngx_uint_t                   exact_weight; /* pic_exact_weight */
    size_t                       replica_cache;/* pic_replica_cache, tokens;
                                                  0: unbounded */
    ngx_uint_t                   dialect;      /* pic_template, or unset */
    ngx_array_t                 *models;       /* ngx_http_pic_model_t */
} ngx_http_pic_loc_conf_t;


/* one segment of a request as the gateway sees it */
typedef struct {
    u_char                       key[NGX_HTTP_PIC_KEY_LEN];
    uint32_t                     off;          /* in the rendered prompt */
    uint32_t                     len;
    uint32_t                     flags;        /* NGX_HTTP_PIC_SEG_* */
    int32_t                      worker;       /* slot computing a miss */
    uint64_t                     holders;      /* engine slots holding it */
} ngx_http_pic_segment_t;


/* per-request state */
typedef struct {
    ngx_http_request_t          *request;
    ngx_int_t                    status;       /* the phase handler's answer */
    ngx_uint_t                   mode;
    ngx_uint_t                   kind;         /* pic_req_kind */
    ngx_uint_t                   dialect;      /* pic_template_dialect */

    ngx_str_t                    body;         /* the client body, one piece */
    ngx_str_t                    model;
    ngx_str_t                    fingerprint;
    u_char                       scope[32];    /* hashed scope, hex */
    size_t                       scope_len;

    pic_segmentation            *segmentation; /* the core's result */
    pic_key_ctx                 *key_ctx;

    ngx_http_pic_segment_t      *segs;         /* the same, gateway's view */
    ngx_uint_t                   nsegs;
    size_t                       total_bytes;
    size_t                       hit_bytes;
    size_t                       prefix_bytes; /* an exact-prefix cache's */
    ngx_uint_t                   hits;
    ngx_uint_t                   redis_hits;   /* holders only redis knew */

    ngx_http_pic_segment_t      *chains;       /* prefix chain i: key =
                                                  H(chain i-1, key i), len =
                                                  bytes of segments 0..i,
                                                  holders = engines holding
                                                  that exact prefix */
    size_t                       exact_bytes;  /* the combine's exact prefix */
    ngx_uint_t                   exact_segs;   /* ... in segments */
    ngx_uint_t                   exact_end;    /* first segment composed */

    ngx_http_pic_segment_t      *wins;         /* S1 windows of misses */
    ngx_uint_t                   nwins;
    ngx_uint_t                   s1_hits;
    size_t                       s1_bytes;

    pic_cdc                     *cdc;          /* this request's sizes */
    size_t                       cdc_min;
    size_t                       cdc_avg;
    size_t                       min_segment;
    ngx_int_t                    combine;      /* shm slot, -1: none */
    ngx_uint_t                   combine_gen;  /* its engine's, see index */
    ngx_str_t                    combine_name;
    u_char                       plan_id[17];

    void                        *work;         /* on a thread: its work */
    ngx_http_pic_lookup_t       *lookup;       /* redis lookup in flight */
    ngx_event_t                  lookup_event; /* its deadline or its end */

    pic_error                    err;          /* answered as OpenAI JSON */
    ngx_buf_t                   *err_body;

    ngx_msec_t                   ttft;         /* first body byte, ms */
    off_t                        body_sent;    /* bytes of the answer */

    /* usage.pic found in the answer (ngx_http_pic_usage_scan) */
    ngx_uint_t                   usage_pos;    /* bytes of the pattern met */
    ngx_uint_t                   usage_field;  /* number being read */
    uint64_t                     usage_val[3];
    uint64_t                     usage[3];     /* exact, pic, recomputed */

    ngx_http_pic_zone_ctx_t     *zc;           /* set with inflight */

    /* pic affinity (ngx_http_pic_affinity.h) */
    pic_usage                    reuse;        /* what the answer says */
    uint64_t                     aff_stamp;    /* LRU stamp of the prefix
                                                  routed on, before */
    ngx_int_t                    aff_answered; /* slot that answered, -1 */

    unsigned                     planned:1;
    unsigned                     observed:1;
    unsigned                     fallback:1;   /* rendezvous, redis unknown */
    unsigned                     inflight:1;   /* counted in engine load */
    unsigned                     first_byte:1;
    unsigned                     replace_body:1;
    unsigned                     rejected:1;
    unsigned                     usage_digits:1;
    unsigned                     usage_seen:1;
    unsigned                     confirmed:1;  /* holders recorded */
    unsigned                     finished:1;   /* counted in the status */
    unsigned                     affinity:1;   /* routed by pic affinity */
} ngx_http_pic_ctx_t;


extern ngx_module_t  ngx_http_pic_module;


/* ngx_http_pic_handler.c */

/* installs the precontent and log phase handlers and the header and body
 * filters */
ngx_int_t ngx_http_pic_handler_init(ngx_conf_t *cf);

/* registers the $pic_* variables */
ngx_int_t ngx_http_pic_add_variables(ngx_conf_t *cf);

/* log phase, the first handler of it: counters, TTFT, history, engine load
 * and health of a request that did not send its last byte (those that did
 * were counted just before it: ngx_http_pic_finish) */
ngx_int_t ngx_http_pic_log_handler(ngx_http_request_t *r);

/* ngx_http_pic_status.c */

/* content handler of pic_status: JSON, Prometheus text or the dashboard */
ngx_int_t ngx_http_pic_status_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_PIC_MODULE_H_INCLUDED_ */
