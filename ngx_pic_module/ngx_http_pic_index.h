/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the shared zone.  One slab pool holds the counters
 * shown by the status location, the engine table (health, load) and an
 * LRU-bounded index "segment key -> engines holding it", plus the record of
 * recently seen segment and prefix keys used by observe mode and by the
 * exact-prefix accounting.  Every access but the atomic counters holds the
 * zone mutex.
 */


#ifndef _NGX_HTTP_PIC_INDEX_H_INCLUDED_
#define _NGX_HTTP_PIC_INDEX_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_pic_module.h"


#define NGX_HTTP_PIC_HISTORY          64       /* recent requests kept */

/* an engine's cache mode, from its /status "cache": {"mode"} */
#define NGX_HTTP_PIC_CACHE_UNKNOWN    0        /* composes from segment 0 */
#define NGX_HTTP_PIC_CACHE_EXACT      1        /* exact prefix, then PIC */
#define NGX_HTTP_PIC_CACHE_PIC        2        /* PIC only, no prefix tree */
#define NGX_HTTP_PIC_CACHE_PREFIX     3        /* prefix tree only, no PIC */
#define NGX_HTTP_PIC_CACHE_FULL       4        /* no cache */

/* where an engine took its seam width (its /status cache.seam_source) */
#define NGX_HTTP_PIC_SEAM_UNKNOWN     0
#define NGX_HTTP_PIC_SEAM_DEFAULT     1        /* 8, nothing said */
#define NGX_HTTP_PIC_SEAM_FLAG        2        /* --seam */

/* an engine's seam "width" for a class it recomputes (--seam off, or a
 * calibration that met its bound at no width) */
#define NGX_HTTP_PIC_SEAM_OFF         ((ngx_uint_t) -1)
#define NGX_HTTP_PIC_SEAM_CALIBRATION 3        /* pic-engine calibrate's file */

/* first sightings (ngx_http_pic_index_seen_*): a direct-mapped table, as
 * bounded as an exact-first engine's doorkeeper (plan_exec.h), each entry
 * good for NGX_HTTP_PIC_SEEN_TTL; a hint for routing, never a holder */
#define NGX_HTTP_PIC_SEEN_SLOTS       4096
#define NGX_HTTP_PIC_SEEN_TTL         300000   /* ms */

#define NGX_HTTP_PIC_NODE_SEGMENT     1        /* engines hold this segment */
#define NGX_HTTP_PIC_NODE_SEEN        2        /* observe: segment seen */
#define NGX_HTTP_PIC_NODE_PREFIX      3        /* a prefix chain key: seen,
                                                  and engines holding it */


/*
 * One engine, shared by all workers.  A slot is reused for another engine
 * once no configuration of the last two generations names its engine (gen
 * counts the engines a slot has held).  Forgetting what an engine holds is
 * O(1): forgot is the zone's forget sequence at the time, and an index node
 * holder bit of this slot stamped before it is stale (see the index).
 */
typedef struct {
    u_char                       name[NGX_SOCKADDR_STRLEN];
    size_t                       name_len;
    u_char                       id[NGX_HTTP_PIC_ENGINE_ID_LEN + 1];
    size_t                       id_len;       /* learned from probes */
    ngx_uint_t                   configured;   /* generation last seen */
    ngx_uint_t                   gen;          /* engines this slot held */
    uint64_t                     forgot;       /* seq of the last forget */

    ngx_uint_t                   healthy;
    ngx_uint_t                   probe_down;   /* probes took it out */
    ngx_uint_t                   fails;        /* consecutive failed requests */
    ngx_uint_t                   probe_fails;  /* consecutive failed probes */
    ngx_uint_t                   probe_passes; /* consecutive good probes */
    time_t                       failed_at;
    time_t                       probed_at;
    ngx_uint_t                   load;         /* reported by the engine */
    u_char                       fingerprint[NGX_HTTP_PIC_ENGINE_ID_LEN + 1];
    size_t                       fp_len;       /* its model's, from probes */
    ngx_int_t                    dialect;      /* its chat template, or -1 */
    ngx_uint_t                   cache;        /* NGX_HTTP_PIC_CACHE_* */
    ngx_uint_t                   break_even;   /* its L*, tokens; 0: unknown */
    ngx_uint_t                   seam;         /* its seam width + 1; 0: unknown;
                                                * NGX_HTTP_PIC_SEAM_OFF: recomputed */
    ngx_uint_t                   seam_doc;     /* that of client-delimited documents + 1 */
    ngx_uint_t                   seam_source;  /* NGX_HTTP_PIC_SEAM_* */
    time_t                       started;      /* now - its uptime */

    ngx_atomic_t                 inflight;     /* routed here, not finished */
    ngx_atomic_t                 requests;
    ngx_atomic_t                 failures;
    ngx_atomic_t                 hit_bytes;    /* local hits when combining */
    ngx_atomic_t                 exact_requests; /* combined here on the
                                                    exact prefix it held */
    ngx_atomic_t                 exact_bytes;  /* ... that prefix's bytes */
    ngx_atomic_t                 probes;
    ngx_atomic_t                 probe_failures;

    /* pic affinity: a foreign replica (ngx_http_pic_affinity.h) */
    ngx_atomic_t                 aff_requests; /* routed here */
    ngx_atomic_t                 aff_hits;     /* ... onto a recorded prefix */
    ngx_atomic_t                 aff_predicted;/* its tokens, estimated */
    ngx_atomic_t                 aff_reports;  /* answers saying cached tokens */
    ngx_atomic_t                 aff_cached;   /* ... the tokens they said */
    ngx_atomic_t                 aff_prompt;   /* ... of prompts this long */
    ngx_atomic_t                 aff_misses;   /* said far less than predicted */
    ngx_atomic_t                 aff_forgot;   /* prefixes forgotten (LRU) */
    size_t                       aff_held;     /* bytes recorded, its cache */
    ngx_uint_t                   aff_bpt;      /* prompt bytes per 1000 tokens
                                                  it reported; 0: unknown */
} ngx_http_pic_engine_sh_t;


/* every number the status location shows */
typedef struct {
    ngx_atomic_t                 requests;     /* in pic locations */
    ngx_atomic_t                 errors;       /* answered >= 400 */
    ngx_atomic_t                 status_requests;
    ngx_atomic_t                 passed;       /* not completions: untouched */
    ngx_atomic_t                 planned;
    ngx_atomic_t                 observed;
    ngx_atomic_t                 rejected;     /* bad input, 4xx by us */
    ngx_atomic_t                 offloaded;    /* parsed on pic_thread_pool */
    ngx_atomic_t                 no_engine;
    ngx_atomic_t                 upstream_errors;
    ngx_atomic_t                 fallback;     /* rendezvous plans */

    ngx_atomic_t                 segments;
    ngx_atomic_t                 seg_hits;
    ngx_atomic_t                 seg_misses;   /* cacheable, nobody holds */
    ngx_atomic_t                 seg_dynamic;  /* recomputed every time */
    ngx_atomic_t                 bytes_total;
    ngx_atomic_t                 bytes_hit;
    ngx_atomic_t                 bytes_prefix; /* an exact-prefix cache */
    ngx_atomic_t                 bytes_above_prefix;
    ngx_atomic_t                 bytes_novel;
    ngx_atomic_t                 s1_hits;
    ngx_atomic_t                 s1_bytes;

    ngx_atomic_t                 exact_routed; /* combine held an exact prefix */
    ngx_atomic_t                 bytes_exact_routed;
    ngx_atomic_t                 exact_decided;/* PIC bytes alone chose other */
    ngx_atomic_t                 seen_routed;  /* combine had seen misses */
    ngx_atomic_t                 seen_decided; /* ... and without that hint
                                                  another engine was chosen */
    ngx_atomic_t                 seg_exact_local; /* misses kept off workers:
                                                     an exact-first combine
                                                     recomputes them */

    ngx_atomic_t                 cdc_bytes;
    ngx_atomic_t                 cdc_usec;     /* render + mark + cdc + key */
    ngx_atomic_t                 cdc_chunks;
    ngx_atomic_t                 markers;
    ngx_atomic_t                 escapes;

    ngx_atomic_t                 redis_lookups;
    ngx_atomic_t                 redis_keys;
    ngx_atomic_t                 redis_hits;
    ngx_atomic_t                 redis_timeouts;
    ngx_atomic_t                 redis_errors;
    ngx_atomic_t                 redis_connects;
    ngx_atomic_t                 redis_up;     /* workers connected */
    ngx_atomic_t                 redis_events; /* pic:events applied */
    ngx_msec_t                   redis_ok_at;  /* ngx_current_msec */

    ngx_atomic_t                 ttft[PIC_TTFT_BUCKETS];
    ngx_atomic_t                 ttft_count;
    ngx_atomic_t                 ttft_sum_ms;

    ngx_atomic_t                 affinity_routed; /* pic affinity requests */
    ngx_atomic_t                 affinity_hits;   /* ... onto a recorded prefix */
    ngx_atomic_t                 affinity_misses; /* ... the replica lacked */

    ngx_atomic_t                 usage_reports; /* answers with usage.pic */
    ngx_atomic_t                 tokens_exact;  /* their prompt tokens: */
    ngx_atomic_t                 tokens_pic;
    ngx_atomic_t                 tokens_recomputed;
} ngx_http_pic_stats_t;


/* a segment key first seen (not held) by the engine in slot */
typedef struct {
    uint64_t                     hash;         /* of the key, | 1; 0: free */
    ngx_msec_t                   at;           /* ngx_current_msec then */
    ngx_uint_t                   slot;
    ngx_uint_t                   gen;          /* the slot's engine then */
} ngx_http_pic_seen_t;


/* one finished request of the recent history */
typedef struct {
    uint64_t                     start_ms;     /* arrival, ms since the epoch */
    uint64_t                     at_ms;        /* end, ms since the epoch */
    uint32_t                     ttft_ms;
    uint32_t                     prompt_bytes;
    int32_t                      exact;        /* usage.pic tokens, or -1 */
    int32_t                      pic;
    int32_t                      recomputed;
    uint16_t                     status;
    int16_t                      engine;       /* combine slot, or -1 */
    uint8_t                      has_ttft;
    uint8_t                      planned;      /* 0: observed */
} ngx_http_pic_history_t;


typedef struct {
    ngx_http_pic_stats_t         stats;
    time_t                       started;
    ngx_uint_t                   generation;   /* reloads survived */
    ngx_msec_t                   probe_next;   /* who probes next */
    uint64_t                     seq;          /* forgets, ever */
    ngx_uint_t                   reclaimed;    /* engine slots reused */

    /* the one worker subscribed to pic:events, and its lease */
    ngx_pid_t                    sub_pid;
    ngx_uint_t                   sub_generation;
    ngx_msec_t                   sub_until;

    ngx_uint_t                   nengines;
    ngx_http_pic_engine_sh_t     engines[NGX_HTTP_PIC_MAX_ENGINES];

    ngx_rbtree_t                 rbtree;
    ngx_rbtree_node_t            sentinel;
    ngx_queue_t                  lru;
    ngx_uint_t                   nodes;
    ngx_atomic_t                 evictions;

    ngx_http_pic_seen_t          seen[NGX_HTTP_PIC_SEEN_SLOTS];

    /* pic affinity: the prefixes recorded per replica, each replica's
     * least recently used last (ngx_http_pic_affinity.c) */
    ngx_rbtree_t                 aff_rbtree;
    ngx_rbtree_node_t            aff_sentinel;
    ngx_queue_t                  aff_lru[NGX_HTTP_PIC_MAX_ENGINES];
    ngx_uint_t                   aff_nodes;
    uint64_t                     aff_clock;    /* uses, ever: LRU stamps */

    ngx_uint_t                   history_count; /* recorded ever */
    ngx_http_pic_history_t       history[NGX_HTTP_PIC_HISTORY]; /* ring */
} ngx_http_pic_shctx_t;


struct ngx_http_pic_zone_ctx_s {
    ngx_http_pic_shctx_t        *sh;
    ngx_slab_pool_t             *shpool;
    ngx_http_pic_main_conf_t    *pmcf;
};


/* Shm zone init: new zone, or the old one kept on reload; registers the
 * engines of every configured pool. */
ngx_int_t ngx_http_pic_index_init_zone(ngx_shm_zone_t *shm_zone, void *data);

/* The zone context of this cycle, or NULL without pic_zone. */
ngx_http_pic_zone_ctx_t *ngx_http_pic_zone(ngx_http_request_t *r);

/* Fill segs[i].holders from the index (SEGMENT nodes), touching the LRU. */
void ngx_http_pic_index_lookup(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n);

/* Record that engine slot holds segs[i] (or, slot < 0, just the holders
 * each seg carries, as learned from redis). */
void ngx_http_pic_index_learn(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n, ngx_int_t slot);

/* Record that the engine in slot saw segs[i] without holding it after the
 * request (held[i] == 0; held NULL: none held): an exact-first engine pools
 * a segment on its second sighting, so the next request with it should go
 * there.  Dynamic segments are skipped.  Never an index holder, never sent
 * to redis. */
void ngx_http_pic_index_seen_record(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n, u_char *held, ngx_int_t slot);

/* seen[i] = the slot whose engine saw segs[i] within NGX_HTTP_PIC_SEEN_TTL
 * (and still has that engine), else -1. */
void ngx_http_pic_index_seen_lookup(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n, ngx_int_t *seen);

/* An engine announced (pic:events) that it added or evicted a segment:
 * set or clear its bit; the length is unknown until a request learns it. */
void ngx_http_pic_index_holder(ngx_http_pic_zone_ctx_t *zc, u_char *key,
    ngx_uint_t slot, ngx_uint_t add);

/* Drop engine slot from every node (the engine restarted or left), in
 * O(1): the nodes' bits of slot older than now read as unset. */
void ngx_http_pic_index_forget_engine(ngx_http_pic_zone_ctx_t *zc,
    ngx_uint_t slot);

/* Exact-prefix and observe accounting: the bytes of the deepest prefix of
 * segs already seen as a whole (chains: ngx_http_pic_segment_chains),
 * whether each segment was seen before (sets NGX_HTTP_PIC_SEG_HIT when
 * record_seen), then records all of them.  Returns the prefix bytes. */
size_t ngx_http_pic_index_prefix(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_http_pic_segment_t *chains,
    ngx_uint_t n, ngx_uint_t record_seen);

/* Fill chains[i].holders with the engines known to hold that exact prefix
 * (PREFIX nodes of the same byte length), touching the LRU. */
void ngx_http_pic_index_lookup_prefix(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *chains, ngx_uint_t n);

/* Record that engine slot (or, slot < 0, each chain's holders) holds every
 * non-dynamic prefix of chains; flags NGX_HTTP_PIC_SEG_NEW on the chains
 * that taught the index something and returns how many did. */
ngx_uint_t ngx_http_pic_index_learn_prefix(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *chains, ngx_uint_t n, ngx_int_t slot);

/* Observe mode: flag NGX_HTTP_PIC_SEG_HIT on segs[i] seen before (SEEN
 * nodes), then record them all as seen. */
void ngx_http_pic_index_seen(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *segs, ngx_uint_t n);

/* Add one TTFT sample (ms) to the histogram. */
void ngx_http_pic_index_ttft(ngx_http_pic_zone_ctx_t *zc, ngx_msec_t ms);

/* Record a finished request in the history ring, in order of arrival (a
 * request logged after a later one is placed before it), and its usage.pic
 * tokens (exact >= 0) in the totals. */
void ngx_http_pic_index_history(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_history_t *h);

/* A request is routed to slot: one more in flight there; returns the
 * slot's generation for ngx_http_pic_engine_release. */
ngx_uint_t ngx_http_pic_engine_acquire(ngx_http_pic_zone_ctx_t *zc,
    ngx_uint_t slot);

/* A request routed to slot (of generation gen) is over: its in-flight count
 * back, unless the slot now holds another engine. */
void ngx_http_pic_engine_release(ngx_http_pic_zone_ctx_t *zc,
    ngx_uint_t slot, ngx_uint_t gen);

/* Engine slot with this name (registering it when add, in a free slot or
 * one no configuration of the last two generations names); -1 when full. */
ngx_int_t ngx_http_pic_engine_slot_locked(ngx_http_pic_shctx_t *sh,
    ngx_str_t *name, ngx_uint_t add);


#endif /* _NGX_HTTP_PIC_INDEX_H_INCLUDED_ */
