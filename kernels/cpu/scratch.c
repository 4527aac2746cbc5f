/*
 * scratch.c — per-thread scratch buffers of the CPU kernels (activation
 * rows, weight tiles, attention work items), grown once to the largest need
 * and reused by every later call: no allocation per op on the forward path.
 * They hang off a pthread key whose destructor frees them, so a thread that
 * ends (a server's worker, an OpenMP team that shrinks) leaves nothing
 * behind. pic_cpu_par, the one gate every op asks before it opens an
 * OpenMP team, lives here too: the ops of every file share it.
 */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>

#include "cpu_ops.h"

typedef struct {
    void   *p[PIC_CPU_NBUF];
    size_t  cap[PIC_CPU_NBUF];
} pic_cpu_bufs;

static pthread_key_t  pic_cpu_bufs_key;
static pthread_once_t pic_cpu_bufs_once = PTHREAD_ONCE_INIT;

static void
pic_cpu_bufs_free(void *arg)
{
    pic_cpu_bufs *b = arg;

    for (int i = 0; i < PIC_CPU_NBUF; i++) {
        free(b->p[i]);
    }
    free(b);
}

static void
pic_cpu_bufs_init(void)
{
    PIC_OP_CHECK(pthread_key_create(&pic_cpu_bufs_key, pic_cpu_bufs_free) == 0);
}

int
pic_cpu_par(int big)
{
    return big && !omp_in_parallel() && omp_get_max_threads() > 1;
}

void *
pic_cpu_thread_buf(int which, size_t bytes)
{
    pic_cpu_bufs *b;

    PIC_OP_CHECK(which >= 0 && which < PIC_CPU_NBUF);
    pthread_once(&pic_cpu_bufs_once, pic_cpu_bufs_init);
    b = pthread_getspecific(pic_cpu_bufs_key);
    if (b == NULL) {
        b = calloc(1, sizeof(*b));
        PIC_OP_CHECK(b != NULL);
        PIC_OP_CHECK(pthread_setspecific(pic_cpu_bufs_key, b) == 0);
    }
    if (bytes > b->cap[which]) {
        void *nb = NULL;

        /* half again as much as asked: a need that creeps up call by call
         * (keys of a prompt's micro-batches) regrows a few times, not at
         * every call — each regrowth is fresh pages, faulted in one by one
         * (warm chunk of 570 after 2,048: 6% of the time in clear_page) */
        if (b->cap[which] > 0) {
            bytes += bytes / 2;
        }
        PIC_OP_CHECK(posix_memalign(&nb, 64, bytes) == 0);
        free(b->p[which]);
        b->p[which] = nb;
        b->cap[which] = bytes;
    }
    return b->p[which];
}
