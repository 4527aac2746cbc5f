/*
 * pic_kernels.c — backend tables and thread settings (pic_kernels.h).
 */
#include <cblas.h>
#include <dlfcn.h>
#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
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
    .attention_dot = pic_cpu_attention_dot,
    .gdn_chunked   = pic_cpu_gdn_chunked,
    .gdn_recurrent = pic_cpu_gdn_recurrent,
    .mul           = pic_cpu_mul,
    .add_rows      = pic_cpu_add_rows,
    .copy_rows     = pic_cpu_copy_rows,
    .l2norm_heads  = pic_cpu_l2norm_heads,
    .gather_rows   = pic_cpu_gather_rows,
    .scatter_add   = pic_cpu_scatter_add,
    .gdn_gates     = pic_cpu_gdn_gates,
    .kv_store      = pic_cpu_kv_store,
    .moe_route     = pic_cpu_moe_route,
    .mla_attention = pic_cpu_mla_attention,
    .scale_rows    = pic_cpu_scale_rows,
    .moe_route_grouped = pic_cpu_moe_route_grouped,
    .ssd_scan      = pic_cpu_ssd_scan,
    .gated_rmsnorm = pic_cpu_gated_rmsnorm,
    .scale_add     = pic_cpu_scale_add,
    .host          = 1,
    .mem_alloc     = pic_cpu_mem_alloc,
    .mem_free      = pic_cpu_mem_free,
    .mem_upload    = pic_cpu_mem_copy,
    .mem_download  = pic_cpu_mem_copy,
    .mem_copy      = pic_cpu_mem_copy,
    .mem_zero      = pic_cpu_mem_zero,
};

/* OpenMP owns the cores: OpenBLAS always runs in the calling thread (two
 * thread pools spinning on the same cores slow small ops down 100x). */
static void
pic_cpu_blas_init(void)
{
    openblas_set_num_threads(1);
}

int
pic_rope_init(pic_rope *r, int dim, float theta)
{
    memset(r, 0, sizeof(*r));
    if (dim < 2 || dim % 2 != 0 || dim > 2 * PIC_ROPE_MAX_PAIRS || !(theta > 0.0f)) {
        return -1;
    }
    r->dim = dim;
    for (int i = 0; i < dim / 2; i++) {
        /* fp32 throughout, as transformers computes inv_freq */
        r->inv_freq[i] = 1.0f / powf(theta, (float) (2 * i) / (float) dim);
    }
    return 0;
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

static pic_backend pic_cpu_dev_backend;

static void
pic_cpu_dev_init(void)
{
    pic_cpu_dev_backend = *pic_backend_cpu();
    pic_cpu_dev_backend.name = "cpu-dev";
    pic_cpu_dev_backend.host = 0;
}

const pic_backend *
pic_backend_cpu_dev(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, pic_cpu_dev_init);
    return &pic_cpu_dev_backend;
}

/* The slots a loaded backend must fill for the forward to run on it. */
static int
pic_backend_complete(const pic_backend *b)
{
    return b->matmul && b->matmul_w && b->matmul_w_multi && b->wmat_rows
           && b->rmsnorm && b->silu && b->sigmoid && b->softplus && b->conv1d
           && b->l2norm && b->rope && b->attention && b->gdn_chunked
           && b->gdn_recurrent && b->mul && b->add_rows && b->copy_rows && b->l2norm_heads
           && b->gather_rows && b->scatter_add && b->gdn_gates && b->kv_store
           && b->moe_route && b->ssd_scan && b->gated_rmsnorm && b->scale_add
           && b->mem_alloc && b->mem_free && b->mem_upload
           && b->mem_download && b->mem_copy && b->mem_zero;
}

const pic_backend *
pic_backend_load(const char *name, char *err, size_t errlen)
{
    char               path[PATH_MAX];
    const char        *env = getenv("PIC_CUDA_LIB");
    void              *lib;
    pic_backend_entry  entry;
    const pic_backend *b;

    if (name == NULL || strcmp(name, "cpu") == 0) {
        return pic_backend_cpu();
    }
    if (strcmp(name, "cpu-dev") == 0) {
        return pic_backend_cpu_dev();
    }
    if (strcmp(name, "cuda") != 0) {
        snprintf(err, errlen, "unknown device '%s' (cpu, cuda or cpu-dev)", name);
        return NULL;
    }
    if (env != NULL && env[0] != '\0') {
        snprintf(path, sizeof(path), "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
        char   *slash;

        path[n > 0 ? n : 0] = '\0';
        slash = strrchr(path, '/');
        if (slash == NULL || (size_t) (slash - path) + 20 >= sizeof(path)) {
            snprintf(path, sizeof(path), "libpic_cuda.so");
        } else {
            strcpy(slash + 1, "libpic_cuda.so");
        }
    }
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(err, errlen, "--device cuda: cannot load %s (%s); build it with "
                 "`make cuda` where nvcc exists, or set PIC_CUDA_LIB", path, dlerror());
        return NULL;
    }
    *(void **) &entry = dlsym(lib, PIC_BACKEND_CUDA_ENTRY);
    if (entry == NULL) {
        snprintf(err, errlen, "--device cuda: %s has no %s()", path,
                 PIC_BACKEND_CUDA_ENTRY);
        dlclose(lib);
        return NULL;
    }
    b = entry();
    if (b == NULL) {
        snprintf(err, errlen, "--device cuda: no usable CUDA device (%s found "
                 "no GPU or no driver)", path);
        dlclose(lib);
        return NULL;
    }
    if (!pic_backend_complete(b)) {
        snprintf(err, errlen, "--device cuda: the backend in %s leaves op slots "
                 "empty (an older library?)", path);
        dlclose(lib);
        return NULL;
    }
    return b;                   /* the library stays loaded for the process */
}
