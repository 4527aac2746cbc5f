/*
 * pic_time.c — the monotonic clock (see pic_time.h).
 */
#include <time.h>

#include "pic_time.h"

int64_t
pic_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}
