/*
 * pic_cuda_check.cuh — PIC_CUDA_CHECK: every CUDA call and launch checked,
 * naming the statement, file and line; and the process-wide state every
 * op shares (runtime.cu): the stream, the cuBLAS handle, device scratch.
 */
#ifndef PIC_CUDA_CHECK_CUH
#define PIC_CUDA_CHECK_CUH

#include <stdio.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define PIC_CUDA_CHECK(stmt)                                                  \
    do {                                                                      \
        cudaError_t err_ = (stmt);                                            \
        if (err_ != cudaSuccess) {                                            \
            fprintf(stderr, "CUDA error %s: %s (%s:%d)\n", #stmt,             \
                    cudaGetErrorString(err_), __FILE__, __LINE__);            \
            return -1;                                                        \
        }                                                                     \
    } while (0)

#define PIC_CUDA_CHECK_LAUNCH() PIC_CUDA_CHECK(cudaGetLastError())

#define PIC_CUBLAS_CHECK(stmt)                                                \
    do {                                                                      \
        cublasStatus_t st_ = (stmt);                                          \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                   \
            fprintf(stderr, "cuBLAS error %d: %s (%s:%d)\n", (int) st_,       \
                    #stmt, __FILE__, __LINE__);                               \
            return -1;                                                        \
        }                                                                     \
    } while (0)

/* A bad argument to a pic_cuda_<op>(): message naming the op, then -1. */
#define PIC_CUDA_ARG(cond)                                                    \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s: bad argument: %s (%s:%d)\n", __func__,       \
                    #cond, __FILE__, __LINE__);                               \
            return -1;                                                        \
        }                                                                     \
    } while (0)

/* The stream every op is queued on (created on first use). */
cudaStream_t pic_cuda_stream_get(void);

/* The cuBLAS handle, bound to that stream, fp32 math without TF32; NULL
 * after a message when it cannot be created. */
cublasHandle_t pic_cuda_blas(void);

/* Scratch buffers of the ops, one per use so that one op can hold two. */
enum { PIC_CUDA_BUF_X, PIC_CUDA_BUF_W, PIC_CUDA_BUF_Q, PIC_CUDA_NBUF };

/* Device scratch `which` (PIC_CUDA_BUF_*), at least bytes long, valid
 * until the next call for the same `which` (stream order makes reuse by
 * the next op safe); NULL after a message. */
void *pic_cuda_scratch(int which, size_t bytes);

/* Blocks for n items of `per` each, for a grid's x dimension. */
static inline unsigned
pic_cuda_blocks(size_t n, unsigned per)
{
    return (unsigned) ((n + per - 1) / per);
}

#endif
