/*
 * pic_time.c — the monotonic clock (see pic_time.h).
 */
#include <time.h>

#include "pic_time.h"

const uint64_t pic_ttft_bounds_ms[PIC_TTFT_BUCKETS - 1] = {
    10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000
};

int
pic_ttft_bucket(uint64_t ms)
{
    int i;

    for (i = 0; i < PIC_TTFT_BUCKETS - 1; i++) {
        if (ms <= pic_ttft_bounds_ms[i]) {
            break;
        }
    }
    return i;
}

int64_t
pic_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}
