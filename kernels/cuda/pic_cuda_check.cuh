/*
 * pic_cuda_check.cuh — PIC_CUDA_CHECK: every CUDA call and launch checked,
 * naming the statement, file and line.
 */
#ifndef PIC_CUDA_CHECK_CUH
#define PIC_CUDA_CHECK_CUH

#include <stdio.h>
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

#endif
