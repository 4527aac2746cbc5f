/*
 * cmd_sysinfo.c — `pic-engine sysinfo`: the machine's rooflines measured with
 * the same BLAS and threads the engine uses (benchmarks print them beside
 * their own figures): sgemm GFLOP/s, memcpy GB/s (read + written) and the
 * read roofline of the decode GEMV (pic_kernels_read_bw), as one JSON
 * object.
 * `--simd-paths` prints, measuring nothing, the SIMD paths this CPU can run,
 * best (the default) first, on one line (scripts/test.sh runs the numerical
 * suites once per path).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "commands.h"
#include "pic_kernels.h"
#include "pic_time.h"

/* Best-of-reps GFLOP/s of the engine's matmul op on (n × k) · (m × k)ᵀ. */
static double
sysinfo_sgemm_gflops(int n, int k, int m, int reps)
{
    const pic_backend *be = pic_backend_cpu();
    float             *x = malloc((size_t) n * k * sizeof(float));
    float             *w = malloc((size_t) m * k * sizeof(float));
    float             *y = malloc((size_t) n * m * sizeof(float));
    double             best = 1e30;
    size_t             i;

    if (x == NULL || w == NULL || y == NULL) {
        free(x); free(w); free(y);
        return 0.0;
    }
    for (i = 0; i < (size_t) n * k; i++) x[i] = (float) ((i * 7) % 13) * 0.01f;
    for (i = 0; i < (size_t) m * k; i++) w[i] = (float) ((i * 5) % 11) * 0.01f;
    be->matmul(y, x, w, n, k, m, 0);                      /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = pic_now_s();
        be->matmul(y, x, w, n, k, m, 0);
        double dt = pic_now_s() - t0;
        if (dt < best) best = dt;
    }
    free(x); free(w); free(y);
    return 2.0 * n * k * m / best / 1e9;
}

/* Best-of-reps memcpy bandwidth in GB/s (bytes read + written) over nbytes. */
static double
sysinfo_memcpy_gbps(size_t nbytes, int reps)
{
    char   *a = malloc(nbytes), *b = malloc(nbytes);
    double  best = 1e30;

    if (a == NULL || b == NULL) {
        free(a); free(b);
        return 0.0;
    }
    memset(a, 1, nbytes);
    memset(b, 2, nbytes);
    for (int r = 0; r < reps; r++) {
        double t0 = pic_now_s();
        memcpy(b, a, nbytes);
        double dt = pic_now_s() - t0;
        if (dt < best) best = dt;
    }
    free(a); free(b);
    return 2.0 * nbytes / best / 1e9;
}

/* Best-of-reps read bandwidth in GB/s over nbytes (pic_kernels_read_bw). */
static double
sysinfo_read_gbps(size_t nbytes, int reps)
{
    float  *a = malloc(nbytes);
    double  bw;

    if (a == NULL) {
        return 0.0;
    }
    for (size_t i = 0; i < nbytes / sizeof(float); i++) {
        a[i] = (float) (i & 7);
    }
    pic_kernels_read_bw(a, nbytes, 1);                   /* warm-up */
    bw = pic_kernels_read_bw(a, nbytes, reps);
    free(a);
    return bw / 1e9;
}

int
pic_cmd_sysinfo(int argc, char **argv)
{
    int    quick = 0, threads = 0;
    char   cpu[256] = "unknown", line[512];
    FILE  *f;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--simd-paths")) {
            const char *names[16];
            size_t      n = pic_kernels_simd_paths(names, 16);

            for (size_t j = 0; j < n && j < 16; j++) {
                printf("%s%s", j ? " " : "", names[j]);
            }
            printf("\n");
            return 0;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: pic-engine sysinfo [--quick] [--threads N] | --simd-paths\n");
            return 2;
        }
    }
    pic_kernels_set_threads(threads);
    if ((f = fopen("/proc/cpuinfo", "r")) != NULL) {
        while (fgets(line, sizeof(line), f)) {
            if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
                snprintf(cpu, sizeof(cpu), "%s", strchr(line, ':') + 2);
                cpu[strcspn(cpu, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    int    s = quick ? 1024 : 2048;
    double gf = sysinfo_sgemm_gflops(s, s, s, quick ? 3 : 5);
    double bw = sysinfo_memcpy_gbps((size_t) 256 << 20, quick ? 3 : 5);
    double rd = sysinfo_read_gbps((size_t) 256 << 20, quick ? 3 : 5);

    printf("{\"cores\":%ld,\"threads\":%d,\"cpu\":\"%s\",\"sgemm_shape\":%d,"
           "\"sgemm_gflops\":%.2f,\"memcpy_gbps\":%.2f,\"read_gbps\":%.2f,"
           "\"blas_core\":\"%s\"}\n",
           sysconf(_SC_NPROCESSORS_ONLN), pic_kernels_threads(), cpu, s, gf, bw, rd,
           pic_kernels_blas_core());
    return 0;
}
