/*
 * runtime.cu — the CUDA backend's process-wide state (one stream, one
 * cuBLAS handle, device scratch) and the device memory helpers of
 * pic_cuda.h.
 */
#include <stdint.h>
#include <string.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

static cudaStream_t   pic_stream;
static cublasHandle_t pic_cublas;
static void          *pic_scratch[PIC_CUDA_NBUF];
static size_t         pic_scratch_len[PIC_CUDA_NBUF];

cudaStream_t
pic_cuda_stream_get(void)
{
    if (pic_stream == NULL) {
        if (cudaStreamCreateWithFlags(&pic_stream, cudaStreamNonBlocking)
            != cudaSuccess)
        {
            (void) cudaGetLastError();
            pic_stream = NULL;          /* the legacy default stream */
        }
    }
    return pic_stream;
}

cublasHandle_t
pic_cuda_blas(void)
{
    cublasStatus_t st;

    if (pic_cublas != NULL) {
        return pic_cublas;
    }
    st = cublasCreate(&pic_cublas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "%s: cublasCreate failed (%d)\n", __func__, (int) st);
        pic_cublas = NULL;
        return NULL;
    }
    /* the CPU reference is plain fp32: no TF32 in sgemm */
    cublasSetMathMode(pic_cublas, CUBLAS_PEDANTIC_MATH);
    cublasSetStream(pic_cublas, pic_cuda_stream_get());
    return pic_cublas;
}

void *
pic_cuda_scratch(int which, size_t bytes)
{
    if (bytes <= pic_scratch_len[which]) {
        return pic_scratch[which];
    }
    if (pic_scratch[which] != NULL) {
        cudaStreamSynchronize(pic_cuda_stream_get());
        cudaFree(pic_scratch[which]);
        pic_scratch[which] = NULL;
        pic_scratch_len[which] = 0;
    }
    bytes = (bytes + 4095) & ~(size_t) 4095;
    if (cudaMalloc(&pic_scratch[which], bytes) != cudaSuccess) {
        fprintf(stderr, "%s: cudaMalloc of %zu bytes failed: %s\n", __func__,
                bytes, cudaGetErrorString(cudaGetLastError()));
        pic_scratch[which] = NULL;
        return NULL;
    }
    pic_scratch_len[which] = bytes;
    return pic_scratch[which];
}

extern "C" int
pic_cuda_device_count(void)
{
    int n = 0;

    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void) cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" const char *
pic_cuda_device_name(void)
{
    static char         name[320];
    cudaDeviceProp      p;
    int                 dev = 0;

    if (pic_cuda_device_count() == 0 || cudaGetDevice(&dev) != cudaSuccess
        || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
    {
        (void) cudaGetLastError();
        return "none";
    }
    snprintf(name, sizeof(name), "%s, sm_%d%d, %d SMs, %.1f GiB", p.name,
             p.major, p.minor, p.multiProcessorCount,
             (double) p.totalGlobalMem / (1 << 30));
    return name;
}

extern "C" void *
pic_cuda_malloc(size_t bytes)
{
    void *p = NULL;

    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        fprintf(stderr, "%s: %zu bytes: %s\n", __func__, bytes,
                cudaGetErrorString(cudaGetLastError()));
        return NULL;
    }
    return p;
}

extern "C" void
pic_cuda_free(void *p)
{
    if (p != NULL) {
        cudaStreamSynchronize(pic_cuda_stream_get());
        cudaFree(p);
    }
}

extern "C" int
pic_cuda_upload(void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = pic_cuda_stream_get();

    if (bytes == 0) {
        return 0;
    }
    PIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    PIC_CUDA_CHECK(cudaStreamSynchronize(s));
    return 0;
}

extern "C" int
pic_cuda_download(void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = pic_cuda_stream_get();

    if (bytes == 0) {
        return 0;
    }
    PIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    PIC_CUDA_CHECK(cudaStreamSynchronize(s));
    return 0;
}

extern "C" int
pic_cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) {
        return 0;
    }
    PIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                   pic_cuda_stream_get()));
    return 0;
}

extern "C" int
pic_cuda_memset(void *dst, int value, size_t bytes)
{
    if (bytes == 0) {
        return 0;
    }
    PIC_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, pic_cuda_stream_get()));
    return 0;
}

extern "C" int
pic_cuda_sync(void)
{
    PIC_CUDA_CHECK(cudaStreamSynchronize(pic_cuda_stream_get()));
    PIC_CUDA_CHECK(cudaGetLastError());
    return 0;
}

extern "C" void *
pic_cuda_stream(void)
{
    return (void *) pic_cuda_stream_get();
}

extern "C" int
pic_cuda_wmat_upload(pic_wmat *dst, const pic_wmat *src)
{
    size_t n = (size_t) src->rows * src->cols;
    size_t esz = src->type == PIC_WTYPE_F32 ? 4 : src->type == PIC_WTYPE_BF16 ? 2 : 1;
    void  *d = NULL, *s = NULL;

    PIC_CUDA_ARG(src->data != NULL && src->rows > 0 && src->cols > 0);
    PIC_CUDA_ARG(src->type != PIC_WTYPE_Q8
                 || (src->cols % PIC_Q8_BLOCK == 0 && src->scale != NULL));
    memset(dst, 0, sizeof(*dst));
    d = pic_cuda_malloc(n * esz);
    if (d == NULL || pic_cuda_upload(d, src->data, n * esz) != 0) {
        pic_cuda_free(d);
        return -1;
    }
    if (src->type == PIC_WTYPE_Q8) {
        size_t sb = n / PIC_Q8_BLOCK * sizeof(uint16_t);

        s = pic_cuda_malloc(sb);
        if (s == NULL || pic_cuda_upload(s, src->scale, sb) != 0) {
            pic_cuda_free(d);
            pic_cuda_free(s);
            return -1;
        }
    }
    dst->type = src->type;
    dst->rows = src->rows;
    dst->cols = src->cols;
    dst->data = d;
    dst->scale = (const uint16_t *) s;
    return 0;
}

extern "C" void
pic_cuda_wmat_free(pic_wmat *w)
{
    pic_cuda_free((void *) w->data);
    pic_cuda_free((void *) w->scale);
    memset(w, 0, sizeof(*w));
}
