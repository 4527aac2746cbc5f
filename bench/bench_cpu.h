/*
 * bench_cpu.h — CPU-time clock of the benchmark helpers (warm_bench.c,
 * wmat_bench.c): the figure a shared machine disturbs least (time a thread
 * was not scheduled does not count; memory contention still does).
 */
#ifndef PIC_BENCH_CPU_H
#define PIC_BENCH_CPU_H

#include <time.h>

/* CPU seconds on clock: CLOCK_PROCESS_CPUTIME_ID (all the process's
 * threads) or CLOCK_THREAD_CPUTIME_ID (the calling thread). */
static inline double
bench_cpu_s(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif /* PIC_BENCH_CPU_H */
