/*
 * pic_route.h — the gateway's routing policy over plain arrays (DESIGN.md
 * §2.1, §3.5, §6): the combine node among the candidate engines, the
 * rendezvous home of a segment, the workers of the misses while Redis is
 * unknown.  The nginx module fills the candidates from its shared-memory
 * index and engine table and keeps the counters; nothing here is nginx's.
 *
 * The combine node is the candidate with the most cached bytes among those
 * whose load is within `imbalance` of the least loaded one (cache affinity
 * never sends a request to an overloaded engine): an exact-prefix byte
 * counts `weight` times (it is served with no recompute and no
 * approximation), a PIC hit byte past that prefix once, a miss byte the
 * engine saw first 1/PIC_ROUTE_SEEN_DIV (it pools it after the first
 * sighting or on this second one, so it weighs less than any byte held),
 * and a home byte (no Redis: the rendezvous home of a miss no engine saw)
 * 1/PIC_ROUTE_HOME_DIV (a guess where a future entry should live, worth
 * less than where one is being built);
 * ties go to the least load, then to the rendezvous home of the request's
 * first segment, so that equal cold requests spread without all landing on
 * one engine.
 */
#ifndef PIC_ROUTE_H
#define PIC_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "pic_error.h"

#define PIC_ROUTE_KEY_LEN     16           /* a segment key, binary (xxh3-128) */
#define PIC_ROUTE_SEEN_DIV    2            /* a byte seen once: 1/2 of one held */
#define PIC_ROUTE_HOME_DIV    4            /* a byte homed here: 1/4 of one held */
#define PIC_ROUTE_INDEX_ONLY  SIZE_MAX     /* weight: the segment index alone */

/* One engine a request may go to, and what it would find there (bytes). */
typedef struct {
    uint64_t seed;      /* its rendezvous seed */
    uint64_t load;      /* requests in flight + its reported load */
    size_t   exact;     /* the deepest exact prefix chain it served */
    size_t   depth;     /* ... in segments */
    size_t   held;      /* hit bytes inside that prefix */
    size_t   local;     /* hit bytes past it (and S1 window bytes) */
    size_t   home;      /* miss bytes homed here (rendezvous, no Redis) */
    size_t   seen;      /* miss bytes it saw first */
} pic_route_cand;

/* The rendezvous home of key (PIC_ROUTE_KEY_LEN bytes) among c[0..n), n > 0:
 * the candidate whose seeded hash of the key is highest. */
size_t pic_route_home(const unsigned char *key, const pic_route_cand *c, size_t n);

/* The combine node among c[0..n), n > 0 (module doc): weight is what an
 * exact-prefix byte counts (PIC_ROUTE_INDEX_ONLY: every hit byte once,
 * exact prefixes unknown, to count the requests the prefix decided); seen
 * 0 leaves out the first-sighting bytes (to count the requests that hint
 * decided); first_key, the request's first segment key, breaks the last
 * ties (NULL: the first candidate). */
size_t pic_route_pick(const pic_route_cand *c, size_t n, uint64_t imbalance, size_t weight,
                      int seen, const unsigned char *first_key);

/* Affinity routing for foreign OpenAI-compatible replicas, which keep an
 * exact-prefix cache of their own (vLLM, SGLang, llama-server): among
 * c[0..n), n > 0, whose load is within imbalance of the least, the one with
 * the longest exact prefix recorded (c.exact bytes; one shorter than floor
 * counts as none: not worth more than the load it would pile up), then the
 * most segment bytes it holds past that prefix (c.local: a later prefix may
 * start there), then the least load, then the rendezvous home of tie_key
 * (NULL: the first of the tied; the module passes the prompt's first prefix
 * chain past its leading segment, so that cold sessions that differ early
 * spread and those that share their opening land together).  Byte counts
 * are compared as they are: a replica serves a cached prefix with no
 * recompute, so no weight applies. */
size_t pic_route_affinity(const pic_route_cand *c, size_t n, uint64_t imbalance,
                          size_t floor, const unsigned char *tie_key);

/* Without Redis: the workers of m misses, LPT over their token estimates
 * w[0..m) (pic_lpt.h), each pinned to its rendezvous home home[k] unless
 * that candidate's load is past the least load + imbalance; a queued
 * request weighs unit tokens.  assign[k] gets miss k's candidate.  0, or -1
 * with err set (OOM, or n == 0 while m > 0). */
int pic_route_misses(const pic_route_cand *c, size_t n, const uint64_t *w,
                     const size_t *home, size_t m, uint64_t imbalance, uint64_t unit,
                     uint32_t *assign, pic_error *err);

#endif /* PIC_ROUTE_H */
