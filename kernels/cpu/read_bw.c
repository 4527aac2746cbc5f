/*
 * read_bw.c — the read roofline of the decode kernels: the engine's OpenMP
 * threads each stream their own contiguous share of a buffer with the
 * widest loads the CPU has (AVX-512 when present, else AVX2), four
 * independent sums a step, as the decode GEMV streams W, with its software
 * prefetch 16 KiB ahead (without it one core read ~14 GB/s, with it ~15.3:
 * the anchor must not be slower than the kernels it measures).  A kernel at
 * this rate is at its roofline.  `pic-engine sysinfo` prints it beside
 * memcpy; forward_bench and wmat_bench hold the decode against it.
 */
#include <immintrin.h>
#include <omp.h>
#include <stddef.h>
#include <time.h>

#include "cpu_ops.h"

static double
pic_read_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

#define PIC_READ_PF(p) _mm_prefetch((const char *) (p) + 16384, _MM_HINT_T0)

__attribute__((target("avx512f")))
static float
pic_read_avx512(const float *a, size_t n)             /* n % 64 == 0 */
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;

    for (size_t i = 0; i < n; i += 64) {
        PIC_READ_PF(a + i);
        PIC_READ_PF(a + i + 16);
        PIC_READ_PF(a + i + 32);
        PIC_READ_PF(a + i + 48);
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(a + i));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(a + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_loadu_ps(a + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_loadu_ps(a + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1),
                                              _mm512_add_ps(s2, s3)));
}

__attribute__((target("avx2")))
static float
pic_read_avx2(const float *a, size_t n)               /* n % 32 == 0 */
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    float  out[8], t = 0.0f;

    for (size_t i = 0; i < n; i += 32) {
        PIC_READ_PF(a + i);
        PIC_READ_PF(a + i + 16);
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(a + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(a + i + 24));
    }
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (int j = 0; j < 8; j++) {
        t += out[j];
    }
    return t;
}

double
pic_kernels_read_bw(const float *a, size_t n, int reps)
{
    size_t          nf = n / sizeof(float);
    int             wide;
    double          best = 0.0;
    volatile float  sink;

    __builtin_cpu_init();
    wide = __builtin_cpu_supports("avx512f");
    for (int r = 0; r < reps; r++) {
        double t0 = pic_read_now();
        float  tot = 0.0f;

        #pragma omp parallel reduction(+:tot)
        {
            int    t = omp_get_thread_num(), T = omp_get_num_threads();
            size_t per = (nf / T) & ~(size_t) 63;
            const float *p = a + (size_t) t * per;

            tot += wide ? pic_read_avx512(p, per) : pic_read_avx2(p, per);
        }
        double dt = pic_read_now() - t0;
        sink = tot;
        best = n / dt > best ? n / dt : best;
    }
    (void) sink;
    return best;
}

