/*
 * pic_lpt.c — LPT assignment (see pic_lpt.h).
 */
#include <stdlib.h>
#include <string.h>

#include "pic_lpt.h"

typedef struct {
    uint64_t w;
    size_t   i;
} pic_lpt_job;

static int
pic_lpt_cmp(const void *a, const void *b)
{
    const pic_lpt_job *x = a, *y = b;
    if (x->w != y->w) {
        return x->w > y->w ? -1 : 1;        /* heavier first */
    }
    return x->i < y->i ? -1 : x->i > y->i;  /* then lower index */
}

int
pic_lpt_assign(const uint64_t *w, size_t n, const uint64_t *load0, size_t m,
               const uint32_t *pin, uint32_t *assign, uint64_t *loads_out,
               pic_error *err)
{
    if (n == 0) {
        for (size_t k = 0; loads_out && k < m; k++) {
            loads_out[k] = load0 ? load0[k] : 0;
        }
        return 0;
    }
    if (m == 0 || m > UINT32_MAX) {
        return pic_error_invalid(err, NULL, "invalid_value",
                                 "%s: %zu jobs need at least one worker", __func__, n);
    }
    pic_lpt_job *jobs = malloc(n * sizeof(*jobs));
    uint64_t    *load = malloc(m * sizeof(*load));
    if (!jobs || !load) {
        free(jobs);
        free(load);
        return pic_error_oom(err, __func__);
    }
    for (size_t i = 0; i < n; i++) {
        jobs[i].w = w[i];
        jobs[i].i = i;
    }
    for (size_t k = 0; k < m; k++) {
        load[k] = load0 ? load0[k] : 0;
    }
    qsort(jobs, n, sizeof(*jobs), pic_lpt_cmp);

    int rc = 0;
    for (size_t j = 0; j < n; j++) {
        size_t best = 0;
        if (pin && pin[jobs[j].i] < m) {
            best = pin[jobs[j].i];
        } else {
            for (size_t k = 1; k < m; k++) {
                if (load[k] < load[best]) {
                    best = k;
                }
            }
        }
        if (__builtin_add_overflow(load[best], jobs[j].w, &load[best])) {
            rc = pic_error_invalid(err, NULL, "invalid_value",
                                   "%s: worker load overflows", __func__);
            break;
        }
        assign[jobs[j].i] = (uint32_t) best;
    }
    if (rc == 0 && loads_out) {
        memcpy(loads_out, load, m * sizeof(*load));
    }
    free(jobs);
    free(load);
    return rc;
}

uint64_t
pic_lpt_makespan(const uint64_t *w, size_t n, const uint64_t *load0, size_t m,
                 const uint32_t *assign)
{
    uint64_t span = 0;
    for (size_t k = 0; k < m; k++) {
        uint64_t l = load0 ? load0[k] : 0;
        for (size_t i = 0; i < n; i++) {
            if (assign[i] == k) {
                l += w[i];
            }
        }
        if (l > span) {
            span = l;
        }
    }
    return span;
}
