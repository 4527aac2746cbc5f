/*
 * pic_time.h — the monotonic clock of the core, the engine and the tools
 * (the nginx module's request timing uses it too; nginx's own cached
 * ngx_current_msec / ngx_time stay where nginx style wants them).
 */
#ifndef PIC_TIME_H
#define PIC_TIME_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t pic_now_ns(void);

/* CLOCK_MONOTONIC in seconds (for durations and rates). */
static inline double
pic_now_s(void)
{
    return 1e-9 * (double) pic_now_ns();
}

/* The TTFT histogram of the gateway's status and the engine's /metrics:
 * upper bounds (ms) of every bucket but the last, which is +Inf. */
#define PIC_TTFT_BUCKETS 12
extern const uint64_t pic_ttft_bounds_ms[PIC_TTFT_BUCKETS - 1];

/* The bucket of a time to first token of ms milliseconds: the first whose
 * bound is >= ms, else the last (0 .. PIC_TTFT_BUCKETS - 1). */
int pic_ttft_bucket(uint64_t ms);

#endif /* PIC_TIME_H */
