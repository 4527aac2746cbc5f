/*
 * matmul.cu — y = x Wᵀ in fp32 with cuBLAS sgemm (row-major operands; the
 * handle's math mode keeps TF32 off, as the CPU reference is plain fp32).
 */
#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

static int
matmul_launch(float *y, const float *x, const float *w, int n, int in,
              int out, int accumulate)
{
    const float    one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasHandle_t h = pic_cuda_blas();

    if (h == NULL) {
        return -1;
    }
    /* row-major y(n,out) = x(n,in) W(out,in)ᵀ is column-major
     * yᵀ(out,n) = (W as col-major (in,out))ᵀ · (x as col-major (in,n)) */
    PIC_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one,
                                 w, in, x, in, &beta, y, out));
    return 0;
}

extern "C" int
pic_cuda_matmul(float *y, const float *x, const float *w, int n, int in,
                int out, int accumulate)
{
    PIC_CUDA_ARG(y != NULL && x != NULL && w != NULL);
    PIC_CUDA_ARG(n >= 0 && in > 0 && out > 0);
    if (n == 0) {
        return 0;
    }
    return matmul_launch(y, x, w, n, in, out, accumulate);
}
