/*
 * pic_lpt.h — longest-processing-time-first assignment (DESIGN.md §3.5).
 *
 * Cold segments of one request go to several workers at once: jobs sorted
 * by weight, heaviest first, each to the worker whose load (initial queue
 * depth + jobs assigned so far) is least.  Graham's bound: with equal
 * initial loads the makespan is at most (4/3 - 1/(3m)) times the optimum.
 * Ties are broken deterministically (lower job index first among equal
 * weights, lower worker index among equal loads), so every gateway computes
 * the same plan.
 *
 * The weight, everywhere (the plan's workers, the gateway's fallback without
 * Redis): a segment's token estimate, pic_segment_token_estimate(bytes); a
 * request already queued on a worker weighs the estimate of one average
 * chunk (the CDC avg_size, pic_cdc.h).
 */
#ifndef PIC_LPT_H
#define PIC_LPT_H

#include <stddef.h>
#include <stdint.h>

#include "pic_error.h"

/* A pin[] value that leaves the job to LPT. */
#define PIC_LPT_FREE  UINT32_MAX

/* Assigns n jobs of weights w[0..n) to m workers with initial loads
 * load0[0..m) (NULL = all zero): assign[i] gets job i's worker.  pin (NULL =
 * none) fixes job i to worker pin[i] < m: it still takes its turn in weight
 * order and adds to that worker's load (the gateway pins a segment to its
 * rendezvous home).  When loads_out is non-NULL it receives the m final
 * loads.  Returns 0, or -1 with err set when m == 0 while n > 0, on load
 * overflow, or on OOM. */
int pic_lpt_assign(const uint64_t *w, size_t n, const uint64_t *load0, size_t m,
                   const uint32_t *pin, uint32_t *assign, uint64_t *loads_out,
                   pic_error *err);

/* The makespan (largest final load) of an assignment; for tests and stats. */
uint64_t pic_lpt_makespan(const uint64_t *w, size_t n, const uint64_t *load0, size_t m,
                          const uint32_t *assign);

#endif /* PIC_LPT_H */
