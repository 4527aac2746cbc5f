/*
 * cuda_backend_ops.c — every CUDA op against the CPU reference backend by
 * normalised MSE, as ggml's test-backend-ops.  Skips (and says so) when no
 * GPU is present.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime.h>

#include "pic_kernels.h"
#include "cuda/pic_cuda.h"

#define NMSE_TOL 1e-9

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float
frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float) ((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static float *
host_rand(size_t n, float scale)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

static float *
dev_copy(const float *h, size_t n)
{
    float *d = NULL;
    assert_int_equal(cudaMalloc((void **) &d, n * sizeof(float) + 1), cudaSuccess);
    assert_int_equal(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static float *
host_copy(const float *d, size_t n)
{
    float *h = malloc(n * sizeof(float));
    assert_int_equal(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
}

/* Σ(a−b)² / Σb² — ggml's normalised mean squared error. */
static double
nmse(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
        den += (double) b[i] * b[i];
    }
    return den > 0 ? num / den : num;
}

static int
need_gpu(void **state)
{
    if (pic_cuda_device_count() == 0) {
        print_message("no CUDA device: CUDA op tests skipped\n");
        skip();
    }
    return 0;
}

static void
test_rmsnorm_matches_cpu(void **state)
{
    const pic_backend *cpu = pic_backend_cpu();
    int shapes[][2] = { { 1, 64 }, { 7, 1024 }, { 33, 256 } };

    need_gpu(state);
    for (size_t s = 0; s < 3; s++) {
        int n = shapes[s][0], dim = shapes[s][1];
        for (int zc = 0; zc <= 1; zc++) {
            float *x = host_rand((size_t) n * dim, 3.0f), *w = host_rand(dim, 0.5f);
            float *ref = malloc((size_t) n * dim * sizeof(float));
            float *dx = dev_copy(x, (size_t) n * dim), *dw = dev_copy(w, dim);
            float *dy = dev_copy(x, (size_t) n * dim), *got;

            cpu->rmsnorm(ref, x, w, n, dim, 1e-6f, zc);
            assert_int_equal(pic_cuda_rmsnorm(dy, dx, dw, n, dim, 1e-6f, zc), 0);
            got = host_copy(dy, (size_t) n * dim);
            assert_true(nmse(got, ref, (size_t) n * dim) < NMSE_TOL);
            cudaFree(dx); cudaFree(dw); cudaFree(dy);
            free(x); free(w); free(ref); free(got);
        }
    }
}

static void
test_silu_matches_cpu(void **state)
{
    const pic_backend *cpu = pic_backend_cpu();
    size_t n = 100003;

    need_gpu(state);
    float *x = host_rand(n, 8.0f), *ref = malloc(n * sizeof(float));
    memcpy(ref, x, n * sizeof(float));
    cpu->silu(ref, n);
    float *dx = dev_copy(x, n);
    assert_int_equal(pic_cuda_silu(dx, n), 0);
    float *got = host_copy(dx, n);
    assert_true(nmse(got, ref, n) < NMSE_TOL);
    cudaFree(dx); free(x); free(ref); free(got);
}

static void
test_matmul_matches_cpu(void **state)
{
    const pic_backend *cpu = pic_backend_cpu();
    int shapes[][3] = { { 1, 256, 512 }, { 64, 1024, 384 }, { 5, 100, 7 } };

    need_gpu(state);
    for (size_t s = 0; s < 3; s++) {
        int n = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        float *x = host_rand((size_t) n * in, 1.0f), *w = host_rand((size_t) out * in, 0.1f);
        float *y0 = host_rand((size_t) n * out, 1.0f);
        for (int acc = 0; acc <= 1; acc++) {
            float *ref = malloc((size_t) n * out * sizeof(float));
            memcpy(ref, y0, (size_t) n * out * sizeof(float));
            cpu->matmul(ref, x, w, n, in, out, acc);
            float *dx = dev_copy(x, (size_t) n * in), *dw = dev_copy(w, (size_t) out * in);
            float *dy = dev_copy(y0, (size_t) n * out);
            assert_int_equal(pic_cuda_matmul(dy, dx, dw, n, in, out, acc), 0);
            float *got = host_copy(dy, (size_t) n * out);
            assert_true(nmse(got, ref, (size_t) n * out) < 1e-8);
            cudaFree(dx); cudaFree(dw); cudaFree(dy); free(ref); free(got);
        }
        free(x); free(w); free(y0);
    }
}

static void
test_gdn_step_matches_cpu(void **state)
{
    const pic_backend *cpu = pic_backend_cpu();
    int Hk = 2, Hv = 4, dk = 128, dv = 128;

    need_gpu(state);
    float *q = host_rand((size_t) Hk * dk, 1.0f), *k = host_rand((size_t) Hk * dk, 1.0f);
    float *v = host_rand((size_t) Hv * dv, 1.0f), *S = host_rand((size_t) Hv * dk * dv, 0.1f);
    float g[4], beta[4];
    for (int h = 0; h < Hv; h++) { g[h] = -0.1f * (h + 1); beta[h] = 0.2f + 0.15f * h; }
    cpu->l2norm(q, Hk, dk, dk, 1e-6f, 1.0f / sqrtf((float) dk));
    cpu->l2norm(k, Hk, dk, dk, 1e-6f, 1.0f);

    float *Sref = malloc((size_t) Hv * dk * dv * sizeof(float));
    float *oref = malloc((size_t) Hv * dv * sizeof(float));
    memcpy(Sref, S, (size_t) Hv * dk * dv * sizeof(float));
    pic_gdn_args a = { .n = 1, .Hk = Hk, .Hv = Hv, .dk = dk, .ds = dv,
                       .q = q, .ldq = Hk * dk, .k = k, .ldk = Hk * dk,
                       .v = v, .ldv = Hv * dv, .g = g, .beta = beta,
                       .S = Sref, .o = oref, .ldo = Hv * dv };
    cpu->gdn_recurrent(&a);

    float *dS = dev_copy(S, (size_t) Hv * dk * dv), *dq = dev_copy(q, (size_t) Hk * dk);
    float *dk_ = dev_copy(k, (size_t) Hk * dk), *dv_ = dev_copy(v, (size_t) Hv * dv);
    float *dg = dev_copy(g, Hv), *db = dev_copy(beta, Hv), *dout = dev_copy(v, (size_t) Hv * dv);
    assert_int_equal(pic_cuda_gdn_step(dS, dout, dq, dk_, dv_, dg, db, Hk, Hv, dk, dv), 0);
    float *Sgot = host_copy(dS, (size_t) Hv * dk * dv), *ogot = host_copy(dout, (size_t) Hv * dv);
    assert_true(nmse(Sgot, Sref, (size_t) Hv * dk * dv) < NMSE_TOL);
    assert_true(nmse(ogot, oref, (size_t) Hv * dv) < NMSE_TOL);
    cudaFree(dS); cudaFree(dq); cudaFree(dk_); cudaFree(dv_); cudaFree(dg); cudaFree(db);
    cudaFree(dout);
    free(q); free(k); free(v); free(S); free(Sref); free(oref); free(Sgot); free(ogot);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_matches_cpu),
        cmocka_unit_test(test_silu_matches_cpu),
        cmocka_unit_test(test_matmul_matches_cpu),
        cmocka_unit_test(test_gdn_step_matches_cpu),
    };
    return cmocka_run_group_tests_name("cuda_backend_ops", tests, NULL, NULL);
}
