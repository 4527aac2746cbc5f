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

#endif /* PIC_TIME_H */
