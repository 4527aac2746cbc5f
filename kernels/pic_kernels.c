/*
 * pic_kernels.c — backend tables and thread settings (pic_kernels.h).
 */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "pic_kernels.h"
#include "cpu/cpu_ops.h"

#define PIC_OMP_SPIN "2000"     /* GOMP_SPINCOUNT unless the user set one */

static const pic_backend pic_cpu_backend = {
    .name          = "cpu",
    .matmul        = pic_cpu_matmul,
    .matmul_w      = pic_cpu_matmul_w,
    .matmul_w_multi = pic_cpu_matmul_w_multi,
    .wmat_rows     = pic_cpu_wmat_rows,
    .rmsnorm       = pic_cpu_rmsnorm,
    .silu          = pic_cpu_silu,
    .sigmoid       = pic_cpu_sigmoid,
    .softplus      = pic_cpu_softplus,
    .conv1d        = pic_cpu_conv1d,
    .l2norm        = pic_cpu_l2norm,
    .rope          = pic_cpu_rope,
    .attention     = pic_cpu_attention,
    .gdn_chunked   = pic_cpu_gdn_chunked,
    .gdn_recurrent = pic_cpu_gdn_recurrent,
};

/* OpenMP owns the cores: OpenBLAS always runs in the calling thread (two
 * thread pools spinning on the same cores slow small ops down 100x). */
static void
pic_cpu_blas_init(void)
{
    openblas_set_num_threads(1);
}

const pic_backend *
pic_backend_cpu(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, pic_cpu_blas_init);
    return &pic_cpu_backend;
}

void
pic_kernels_set_threads(int n)
{
    if (n <= 0) {
        n = omp_get_num_procs();
    }
    omp_set_num_threads(n);
    pic_backend_cpu();
}

int
pic_kernels_threads(void)
{
    return omp_get_max_threads();
}

int
pic_cpu_blas_serial_begin(void)
{
    int n = openblas_get_num_threads();

    if (n > 1) {                /* only if someone raised it since init */
        openblas_set_num_threads(1);
    }
    return n;
}

void
pic_cpu_blas_serial_end(int saved)
{
    if (saved > 1) {
        openblas_set_num_threads(saved);
    }
}

/*
 * Debian's OpenBLAS picks its kernels at load time from the CPU model, and
 * a model it does not know (new Xeons, many virtual CPUs that report a
 * generic "Intel Xeon Processor") falls back to its SSE3 "Prescott" kernels:
 * measured 4.5x slower prefill (93 vs 418 tok/s on models/mid, 2 threads,
 * AVX-512 Xeon).  We name the core from the features the CPU reports, but
 * only when OpenBLAS's own choice is one of its pre-AVX2 cores, so a CPU it
 * knows keeps its tuned kernels.
 */
static const char *
pic_blas_wanted_core(void)
{
    static const char *legacy[] = {
        "prescott", "katmai", "coppermine", "northwood", "core2", "penryn",
        "dunnington", "nehalem", "atom", "sandybridge", "unknown", "generic",
        "barcelona", "bobcat", "bulldozer", "piledriver", "steamroller",
        "excavator", "opteron", "athlon"
    };
    const char *have = openblas_get_corename();
    size_t      i;
    int         old = (have == NULL);

    for (i = 0; !old && i < sizeof(legacy) / sizeof(legacy[0]); i++) {
        old = (strcasecmp(have, legacy[i]) == 0);
    }
    if (!old) {
        return NULL;
    }
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
        && __builtin_cpu_supports("avx512cd"))
    {
        return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        return __builtin_cpu_is("amd") ? "Zen" : "Haswell";
    }
    return NULL;
}

void
pic_kernels_process_env(char **argv)
{
    const char *core;
    int         changed = 0;

    /* Spin, then park: an idle OpenMP thread spins PIC_OMP_SPIN pauses
     * (~25 us at 12 ns a pause here) before it sleeps, so the next of
     * decode's ~35 parallel regions a token, a few microseconds of serial
     * work later, finds it awake; longer spins stall decode on a shared
     * machine (measured: 4 tok/s instead of 17 with one busy neighbour
     * spinning for ever; 2 threads, load 10: 2000 pauses as fast as none,
     * 10000 1.2-1.7x slower, 50000 2.4x).  libgomp spins not at all when
     * its threads outnumber the cores (passive: throttled count 0).
     * Export OMP_WAIT_POLICY=active on a dedicated machine. */
    if (getenv("OMP_WAIT_POLICY") == NULL) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        if (getenv("GOMP_SPINCOUNT") == NULL) {
            setenv("GOMP_SPINCOUNT", PIC_OMP_SPIN, 1);
        }
        changed = 1;
    }
    if (getenv("OPENBLAS_CORETYPE") == NULL) {
        core = pic_blas_wanted_core();
        if (core != NULL) {
            setenv("OPENBLAS_CORETYPE", core, 1);
            changed = 1;
        }
    }
    if (changed) {
        execv("/proc/self/exe", argv);
        /* exec failed: carry on with the libraries' defaults */
    }
}

const char *
pic_kernels_blas_core(void)
{
    const char *name = openblas_get_corename();

    return name != NULL ? name : "unknown";
}
