/*
 * matmul.cu — y = x Wᵀ with cuBLAS sgemm (row-major operands, one handle
 * per process created on first use).
 */
#include <cublas_v2.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

static cublasHandle_t pic_cublas;

#define PIC_CUBLAS_CHECK(stmt)                                                \
    do {                                                                      \
        cublasStatus_t st_ = (stmt);                                          \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                   \
            fprintf(stderr, "cuBLAS error %d: %s (%s:%d)\n", (int) st_,       \
                    #stmt, __FILE__, __LINE__);                               \
            return -1;                                                        \
        }                                                                     \
    } while (0)

static int
matmul_launch(float *y, const float *x, const float *w, int n, int in,
              int out, int accumulate)
{
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;

    if (pic_cublas == NULL) {
        PIC_CUBLAS_CHECK(cublasCreate(&pic_cublas));
    }
    /* row-major y(n,out) = x(n,in) W(out,in)^T  is column-major
     * y^T(out,n) = W^T... : C(out,n) = op(A=W as col-major (in,out))^T · B(x as (in,n)) */
    PIC_CUBLAS_CHECK(cublasSgemm(pic_cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in,
                                 &one, w, in, x, in, &beta, y, out));
    return 0;
}

extern "C" int
pic_cuda_matmul(float *y, const float *x, const float *w, int n, int in,
                int out, int accumulate)
{
    if (n < 0 || in <= 0 || out <= 0) {
        fprintf(stderr, "%s: bad shape n=%d in=%d out=%d\n", __func__, n, in, out);
        return -1;
    }
    if (n == 0) {
        return 0;
    }
    return matmul_launch(y, x, w, n, in, out, accumulate);
}
