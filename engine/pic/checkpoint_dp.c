/*
 * checkpoint_dp.c — checkpoint placement for exact prefix reuse
 * (checkpoint_dp.h): exponentially weighted depth histogram, periodic
 * snapshot, exact DP, fixed placements for comparison.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_dp.h"

struct pic_ckpt_dp {
    pic_ckpt_opts   o;
    pthread_mutex_t mu;
    double         *live;           /* (max_tokens+1) weight per depth, × scale */
    double         *snap;           /* (max_tokens+1) live / scale at the last re-solve */
    double          scale;          /* weight of the next observation */
    long            observed;
    long            resolves;
    int             have_snap;
};

/* --- the exact DP --- */

double
pic_ckpt_waste(const double *mass, const double *mass_d, int B, int block,
               const int *blk, int cnt)
{
    double w = 0.0;
    int    k = 0, c = 0;

    for (int j = 0; j <= B; j++) {
        while (k < cnt && blk[k] <= j) {
            c = blk[k++] * block;
        }
        w += mass_d[j] - mass[j] * c;
    }
    return w;
}

/* Row r of the DP by divide and conquer over i in [lo, hi], whose best
 * next checkpoint lies in [olo, ohi]: F[i] = max over i2 in (i, B+1] of
 * block·i·(P[i2] − P[i]) + Fp[i2] (Fp[B+1] = 0: no checkpoint after i).
 * The cross term block·i·P[i2] has increasing differences (P does not
 * decrease), so the largest maximiser i2*(i) does not decrease with i
 * (Topkis): the middle row's argmax splits the range of the others. */
static void
pic_ckpt_row_dc(const double *P, const double *Fp, double *F, int *nx, int B, int block,
                int lo, int hi, int olo, int ohi)
{
    while (lo <= hi) {
        int    mid = lo + (hi - lo) / 2, arg = -1;
        int    from = olo > mid + 1 ? olo : mid + 1;
        double best = -INFINITY;

        for (int i2 = from; i2 <= ohi; i2++) {
            double g = (double) block * mid * (P[i2] - P[mid]) + Fp[i2];
            if (g >= best) {
                best = g;
                arg = i2;
            }
        }
        F[mid] = best;
        nx[mid] = arg == B + 1 ? -1 : arg;
        /* left half: recurse; right half: loop (depth stays log B) */
        pic_ckpt_row_dc(P, Fp, F, nx, B, block, lo, mid - 1, olo, arg);
        lo = mid + 1;
        olo = arg;
    }
}

double
pic_ckpt_solve(const double *mass, const double *mass_d, int B, int block,
               int m, int *blk, int *cnt)
{
    /* The recurrence of pic_ckpt_solve_quadratic (gain Σ_t block·i_t·
     * Q(i_t, i_{t+1})), each row by divide and conquer: O(M·B log B). */
    double *P = NULL, *F = NULL, total = 0.0;
    int    *nx = NULL;

    *cnt = 0;
    for (int j = 0; j <= B; j++) {
        total += mass_d[j];
    }
    if (B < 1 || m < 1) {
        return total;
    }
    int    R = m < B ? m : B;
    size_t W = (size_t) B + 2;                  /* a row: i = 0..B+1 */
    P = malloc(W * sizeof(double));
    F = malloc((size_t) R * W * sizeof(double));
    nx = malloc((size_t) R * W * sizeof(int));
    if (P == NULL || F == NULL || nx == NULL) {
        free(P); free(F); free(nx);
        return -1.0;
    }
    P[0] = 0.0;
    for (int j = 0; j <= B; j++) {
        P[j + 1] = P[j] + mass[j];
    }
    for (int r = 0; r < R; r++) {
        double *Fr = F + (size_t) r * W;
        int    *nr = nx + (size_t) r * W;

        Fr[B + 1] = 0.0;
        if (r == 0) {
            for (int i = 1; i <= B; i++) {
                Fr[i] = (double) block * i * (P[B + 1] - P[i]);
                nr[i] = -1;
            }
        } else {
            pic_ckpt_row_dc(P, F + (size_t) (r - 1) * W, Fr, nr, B, block, 1, B, 2, B + 1);
        }
    }
    double best = 0.0;
    int    first = -1;
    for (int i = 1; i <= B; i++) {      /* ties: the later start, fewer checkpoints */
        if (F[(size_t) (R - 1) * W + i] > 0.0 && F[(size_t) (R - 1) * W + i] >= best) {
            best = F[(size_t) (R - 1) * W + i];
            first = i;
        }
    }
    for (int r = R - 1, i = first; i > 0 && r >= 0; r--) {
        blk[(*cnt)++] = i;
        i = nx[(size_t) r * W + i];
    }
    free(P); free(F); free(nx);
    return pic_ckpt_waste(mass, mass_d, B, block, blk, *cnt);
}

double
pic_ckpt_solve_quadratic(const double *mass, const double *mass_d, int B, int block,
               int m, int *blk, int *cnt)
{
    /* Maximise the gain Σ_j mass[j]·c_j.  With Q(a, b) = Σ_{a ≤ j < b}
     * mass[j] and checkpoints i_1 < … < i_k, gain = Σ_t block·i_t·
     * Q(i_t, i_{t+1}) with i_{k+1} = B+1.  F[r][i] = the best gain from
     * bins ≥ i with a checkpoint at i and at most r more after it. */
    double *P = NULL, *F = NULL, total = 0.0;
    int    *nx = NULL;

    *cnt = 0;
    for (int j = 0; j <= B; j++) {
        total += mass_d[j];
    }
    if (B < 1 || m < 1) {
        return total;
    }
    int R = m < B ? m : B;
    P = malloc((size_t) (B + 2) * sizeof(double));
    F = malloc((size_t) R * (B + 1) * sizeof(double));
    nx = malloc((size_t) R * (B + 1) * sizeof(int));
    if (P == NULL || F == NULL || nx == NULL) {
        free(P); free(F); free(nx);
        return -1.0;
    }
    P[0] = 0.0;
    for (int j = 0; j <= B; j++) {
        P[j + 1] = P[j] + mass[j];
    }
#define Q(a, b) (P[(b)] - P[(a)])
    for (int r = 0; r < R; r++) {
        for (int i = B; i >= 1; i--) {
            double best = (double) block * i * Q(i, B + 1);
            int    arg = -1;
            for (int i2 = i + 1; r > 0 && i2 <= B; i2++) {
                double g = (double) block * i * Q(i, i2) + F[(size_t) (r - 1) * (B + 1) + i2];
                if (g > best) {
                    best = g;
                    arg = i2;
                }
            }
            F[(size_t) r * (B + 1) + i] = best;
            nx[(size_t) r * (B + 1) + i] = arg;
        }
    }
#undef Q
    double best = 0.0;
    int    first = -1;
    for (int i = 1; i <= B; i++) {      /* ties: the later start, fewer checkpoints */
        if (F[(size_t) (R - 1) * (B + 1) + i] > 0.0
            && F[(size_t) (R - 1) * (B + 1) + i] >= best) {
            best = F[(size_t) (R - 1) * (B + 1) + i];
            first = i;
        }
    }
    for (int r = R - 1, i = first; i > 0 && r >= 0; r--) {
        blk[(*cnt)++] = i;
        i = nx[(size_t) r * (B + 1) + i];
    }
    free(P); free(F); free(nx);
    return pic_ckpt_waste(mass, mass_d, B, block, blk, *cnt);
}

/* --- fixed placements --- */

static int
pic_ckpt_dedup(int *pos, int cnt)
{
    int k = 0;

    for (int i = 0; i < cnt; i++) {
        if (pos[i] > 0 && (k == 0 || pos[i] != pos[k - 1])) {
            pos[k++] = pos[i];
        }
    }
    return k;
}

int
pic_ckpt_place(pic_ckpt_placement how, int block, int m, int n, int *pos)
{
    int B = block > 0 ? n / block : 0, cnt = 0;

    if (B < 1 || m < 1) {
        return 0;
    }
    switch (how) {
    case PIC_CKPT_BALANCED:
        for (int k = 1; k <= m; k++) {
            pos[cnt++] = (int) (((long) k * B + m / 2) / m) * block;
        }
        break;
    case PIC_CKPT_BLOCK:
        for (int k = 1; k <= m && (long) k * 16 * block <= n; k++) {
            pos[cnt++] = k * 16 * block;
        }
        break;
    case PIC_CKPT_LOG: {
        int tmp[64], t = 0;
        for (long d = n; d >= block && t < m && t < 64; d /= 2) {
            tmp[t++] = (int) (d / block) * block;
        }
        for (int i = t - 1; i >= 0; i--) {
            pos[cnt++] = tmp[i];
        }
        break;
    }
    }
    return pic_ckpt_dedup(pos, cnt);
}

/* The DP returns fewer than m positions when more have no expected gain
 * under the histogram; extra checkpoints can only lower the waste, so
 * filling up to m with balanced positions keeps the optimum and hedges
 * against depths not seen yet.  pos (cnt, ascending) grows in place. */
static int
pic_ckpt_fill(int *pos, int cnt, int block, int m, int n)
{
    int bal[m > 0 ? m : 1], nb = pic_ckpt_place(PIC_CKPT_BALANCED, block, m, n, bal);

    for (int i = nb - 1; i >= 0 && cnt < m; i--) {
        int have = 0;
        for (int k = 0; k < cnt; k++) {
            have |= pos[k] == bal[i];
        }
        if (!have) {
            pos[cnt++] = bal[i];
        }
    }
    for (int i = 1; i < cnt; i++) {             /* insertion sort: cnt <= m */
        for (int k = i; k > 0 && pos[k - 1] > pos[k]; k--) {
            int t = pos[k];
            pos[k] = pos[k - 1];
            pos[k - 1] = t;
        }
    }
    return cnt;
}

int
pic_ckpt_solve_fill(const double *mass, const double *mass_d, int B, int block, int m,
                    int *blk)
{
    int cnt = 0, *pos = malloc((size_t) (m > 0 ? m : 1) * sizeof(int));

    if (pos == NULL || B < 1 || m < 1) {
        free(pos);
        return 0;
    }
    if (pic_ckpt_solve(mass, mass_d, B, block, m, blk, &cnt) < 0) {
        cnt = 0;
    }
    for (int i = 0; i < cnt; i++) {
        pos[i] = blk[i] * block;
    }
    cnt = pic_ckpt_fill(pos, cnt, block, m, B * block);
    for (int i = 0; i < cnt; i++) {
        blk[i] = pos[i] / block;
    }
    free(pos);
    return cnt;
}

/* --- the live policy --- */

pic_ckpt_dp *
pic_ckpt_dp_init(const pic_ckpt_opts *in, char *err, size_t errlen)
{
    pic_ckpt_opts o = *in;
    pic_ckpt_dp  *dp;

    o.block = o.block > 0 ? o.block : 64;
    o.m = o.m > 0 ? o.m : 4;
    o.resolve_every = o.resolve_every > 0 ? o.resolve_every : 10;
    o.min_history = o.min_history > 0 ? o.min_history : 10;
    o.max_tokens = o.max_tokens > 0 ? o.max_tokens : 1 << 17;
    o.decay = o.decay > 0.0 ? o.decay : 0.99;
    if (o.decay > 1.0 || o.m > 4096 || o.max_tokens > (1 << 26)) {
        snprintf(err, errlen, "%s: decay must be in (0, 1], M <= 4096, "
                 "max_tokens <= 2^26", __func__);
        return NULL;
    }
    dp = calloc(1, sizeof(*dp));
    if (dp == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    dp->o = o;
    dp->scale = 1.0;
    dp->live = calloc((size_t) o.max_tokens + 1, sizeof(double));
    dp->snap = calloc((size_t) o.max_tokens + 1, sizeof(double));
    if (dp->live == NULL || dp->snap == NULL) {
        pic_ckpt_dp_free(dp);
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    pthread_mutex_init(&dp->mu, NULL);
    return dp;
}

void
pic_ckpt_dp_free(pic_ckpt_dp *dp)
{
    if (dp == NULL) {
        return;
    }
    if (dp->live != NULL && dp->snap != NULL) {
        pthread_mutex_destroy(&dp->mu);
    }
    free(dp->live);
    free(dp->snap);
    free(dp);
}

static void
pic_ckpt_snapshot_locked(pic_ckpt_dp *dp)
{
    for (int d = 0; d <= dp->o.max_tokens; d++) {
        dp->snap[d] = dp->live[d] / dp->scale;
    }
    dp->have_snap = 1;
    dp->resolves++;
}

void
pic_ckpt_dp_observe(pic_ckpt_dp *dp, int depth)
{
    int mt = dp->o.max_tokens;

    depth = depth < 0 ? 0 : (depth > mt ? mt : depth);
    pthread_mutex_lock(&dp->mu);
    /* old weights × decay ⇔ the new one × 1/decay (lazy scale) */
    dp->scale /= dp->o.decay;
    dp->live[depth] += dp->scale;
    if (dp->scale > 1e150) {
        for (int d = 0; d <= mt; d++) {
            dp->live[d] /= dp->scale;
        }
        dp->scale = 1.0;
    }
    dp->observed++;
    if (dp->observed == dp->o.min_history
        || (dp->observed > dp->o.min_history
            && (dp->observed - dp->o.min_history) % dp->o.resolve_every == 0)) {
        pic_ckpt_snapshot_locked(dp);
    }
    pthread_mutex_unlock(&dp->mu);
}

/* The DP for n tokens over histogram h (max_tokens+1 weights). */
static int
pic_ckpt_solve_hist(const pic_ckpt_dp *dp, const double *h, double scale, int n,
                    int *pos)
{
    int     block = dp->o.block, B = n / block, cnt = 0;
    double *mass = calloc((size_t) B + 1, sizeof(double));
    double *mass_d = calloc((size_t) B + 1, sizeof(double));
    int    *blk = malloc((size_t) (dp->o.m > 0 ? dp->o.m : 1) * sizeof(int));

    if (B < 1 || mass == NULL || mass_d == NULL || blk == NULL) {
        free(mass); free(mass_d); free(blk);
        return 0;
    }
    for (int d = 0; d <= dp->o.max_tokens; d++) {
        if (h[d] == 0.0) {
            continue;
        }
        int    de = d < n ? d : n;              /* an entry of n tokens */
        int    j = de / block;
        double w = h[d] / scale;
        mass[j] += w;
        mass_d[j] += w * de;
    }
    if (pic_ckpt_solve(mass, mass_d, B, block, dp->o.m, blk, &cnt) < 0) {
        cnt = 0;
    }
    for (int i = 0; i < cnt; i++) {
        pos[i] = blk[i] * block;
    }
    free(mass); free(mass_d); free(blk);
    return pic_ckpt_fill(pos, cnt, block, dp->o.m, n);
}

int
pic_ckpt_dp_plan(pic_ckpt_dp *dp, int n, int *pos)
{
    int cnt;

    pthread_mutex_lock(&dp->mu);
    if (!dp->have_snap) {
        cnt = pic_ckpt_place(PIC_CKPT_BALANCED, dp->o.block, dp->o.m, n, pos);
    } else {
        cnt = pic_ckpt_solve_hist(dp, dp->snap, 1.0, n, pos);
    }
    pthread_mutex_unlock(&dp->mu);
    return cnt;
}

int
pic_ckpt_dp_solve_now(pic_ckpt_dp *dp, int n, int *pos)
{
    int cnt;

    pthread_mutex_lock(&dp->mu);
    cnt = pic_ckpt_solve_hist(dp, dp->live, dp->scale, n, pos);
    pthread_mutex_unlock(&dp->mu);
    return cnt;
}

void
pic_ckpt_dp_counts(pic_ckpt_dp *dp, long *observed, long *resolves)
{
    pthread_mutex_lock(&dp->mu);
    *observed = dp->observed;
    *resolves = dp->resolves;
    pthread_mutex_unlock(&dp->mu);
}
