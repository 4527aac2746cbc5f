/*
 * pic_kernels.c — backend tables and thread settings (pic_kernels.h).
 */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>

#include "pic_kernels.h"
#include "cpu/cpu_ops.h"

static const pic_backend pic_cpu_backend = {
    .name          = "cpu",
    .matmul        = pic_cpu_matmul,
    .matmul_w      = pic_cpu_matmul_w,
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
