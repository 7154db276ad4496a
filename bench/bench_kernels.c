/* bench/bench_kernels.c - throughput of the matrix kernels at the model's shapes.
 *
 * Owns: a measurement, nothing the engine uses. Prints GB/s of weight bytes
 *   streamed by matvec_bf16 (7168 x 12288) and matvec_mxfp4 (3072 x 3584 and
 *   3584 x 3072, packed + scales) for every kernel table the CPU supports, with 1 and 2
 *   threads (rows split by the engine's own thread pool, base/pool.h, as the
 *   model's mm_bf16 / mm_mxfp4 do: persistent workers, chunks of 16-row
 *   grains; until 2026-12-01 this program created a pthread per matrix, which
 *   cost ~0.1 ms in this VM against an expert matrix's ~0.25 ms and made the
 *   2-thread MXFP4 rows meaningless), next to a plain read bandwidth
 *   and memcpy bandwidth of the machine. "hot" reuses one matrix (it may sit
 *   in the last-level cache); "cold" rotates over copies larger than the LLC,
 *   as the engine does when it streams layer after layer. "in-cache" runs a
 *   small L2-resident matrix in thread CPU time: the compute ceiling.
 *   "attention" times att_scores / att_mix per (head, position) at gpt-oss's
 *   and K3's shapes, also in thread CPU time.
 * Build and run: `make bench-kernels` (bench/bench.mk; not part of `make`).
 * Does not: assert anything; numbers go to docs/PERFORMANCE.md by hand.
 */
#include "base/pool.h"
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

static void *xmalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) { fprintf(stderr, "out of memory (%zu bytes)\n", n); exit(1); }
    memset(p, 0, n);   /* touch every page before timing */
    return p;
}

typedef struct job {
    const ms_kern *k;
    int is_mx;
    const void *W;          /* bf16 matrix, or packed MXFP4 */
    const uint8_t *scales;
    const float *x;
    float *y;
    int64_t r0, r1, cols;
    uint64_t sum;           /* read-bandwidth job */
    const uint64_t *buf;
    int64_t nwords;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    if (j->buf) {
        uint64_t a = 0, b = 0, c = 0, d = 0;
        for (int64_t i = 0; i + 4 <= j->nwords; i += 4) {
            a += j->buf[i]; b += j->buf[i + 1]; c += j->buf[i + 2]; d += j->buf[i + 3];
        }
        j->sum = a + b + c + d;
    } else if (j->is_mx) {
        j->k->matvec_mxfp4(j->y, j->W, j->scales, j->x, j->r0, j->r1, j->cols);
    } else {
        j->k->matvec_bf16(j->y, j->W, j->x, j->r0, j->r1, j->cols);
    }
    return NULL;
}

/* run jobs[0..nt) concurrently (job 0 on this thread) */
static void run_parallel(job *jobs, int nt) {
    pthread_t th[8];
    for (int i = 1; i < nt; i++) pthread_create(&th[i], NULL, run_job, &jobs[i]);
    run_job(&jobs[0]);
    for (int i = 1; i < nt; i++) pthread_join(th[i], NULL);
}

static double bench_read(const uint64_t *buf, int64_t nwords, int nt) {
    job jobs[8];
    memset(jobs, 0, sizeof jobs);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < nt; i++) {
            jobs[i].buf = buf + nwords / nt * i;
            jobs[i].nwords = nwords / nt;
        }
        double t0 = now_s();
        run_parallel(jobs, nt);
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    if (jobs[0].sum == 42) printf(" ");   /* keep the sum alive */
    return (double)nwords * 8 / best / 1e9;
}

static ms_pool *g_pool[3];          /* by thread count: the engine's pool */

static void matvec_part(void *ctx, int64_t b, int64_t e) {
    job j = *(const job *)ctx;
    j.r0 = b;
    j.r1 = e;
    run_job(&j);
}

/* GB/s of matrix bytes; ncopy matrices of `bytes` each at base + i * stride */
static double bench_matvec(const ms_kern *k, int is_mx, const uint8_t *base, size_t stride,
                           size_t scale_off, int ncopy, const float *x, float *y,
                           int64_t rows, int64_t cols, size_t bytes, int nt, int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now_s();
        for (int c = 0; c < ncopy; c++) {
            job j = { .k = k, .is_mx = is_mx, .W = base + c * stride, .scales = base + c * stride + scale_off,
                      .x = x, .y = y, .cols = cols };
            ms_pool_for(g_pool[nt], rows, 16, matvec_part, &j);   /* as model/forward.c's mm_* */
        }
        double t = (now_s() - t0) / ncopy;
        if (t < best) best = t;
    }
    return (double)bytes / best / 1e9;
}

/* Compute ceiling: a small matrix resident in L2, timed in thread CPU time so
 * other processes on the machine do not count. Gelem/s for T = 1 and T = 4. */
static void bench_in_cache(const ms_kern *k) {
    enum { R = 256, C = 3584, TT = 4 };
    static uint16_t W[64 * 4096];
    static uint8_t P[R * C / 2], S[R * C / 32];
    static float X[TT * 4096], Y[TT * R];
    for (size_t i = 0; i < sizeof W / 2; i++) W[i] = (uint16_t)(0x3C00 + i % 0x400);
    for (size_t i = 0; i < sizeof P; i++) P[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t i = 0; i < sizeof S; i++) S[i] = (uint8_t)(120 + i % 9);
    for (size_t i = 0; i < TT * 4096; i++) X[i] = (float)(i % 7) - 3.0f;
    for (int T = 1; T <= TT; T += TT - 1) {
        int reps = k == &ms_kern_ref ? 2 : 400;
        double t0 = thread_cpu_s();
        for (int r = 0; r < reps; r++) k->matmat_bf16(Y, R, W, X, 4096, T, 0, 64, 4096);
        const double tb = thread_cpu_s() - t0;
        t0 = thread_cpu_s();
        for (int r = 0; r < reps; r++) k->matmat_mxfp4(Y, R, P, S, X, C, T, 0, R, C);
        const double tm = thread_cpu_s() - t0;
        printf("in-cache %-6s T=%d: bf16 64x4096 %6.2f Gelem/s   mxfp4 256x3584 %6.2f Gelem/s\n",
               k->name, T, 64.0 * 4096 * T * reps / tb / 1e9, (double)R * C * T * reps / tm / 1e9);
    }
}

/* The attention kernels in L2/L3, thread CPU time: ns per (head, position)
 * of att_scores and of att_mix at two shapes - gpt-oss (one KV group: 8 query
 * heads, head_dim 64, a row of 1024 floats per position: every group's keys
 * and values; 1024 positions) and K3's MLA (96 heads, the 576-float latent
 * row, the mix over its first 512; 1024 positions). */
static void bench_attention(const ms_kern *k) {
    static const struct { const char *name; int64_t nq, pw, width, wmix, n; } sh[2] = {
        { "gpt-oss", 8, 1024, 64, 64, 1024 }, { "k3-mla", 96, 576, 576, 512, 1024 } };
    for (int i = 0; i < 2; i++) {
        const int64_t nq = sh[i].nq, pw = sh[i].pw, n = sh[i].n, w = sh[i].width;
        float *C = xmalloc((size_t)(n * pw) * 4), *S = xmalloc((size_t)(nq * n) * 4);
        float *O = xmalloc((size_t)(nq * pw) * 4);
        double *Q = xmalloc((size_t)(nq * w) * 8);
        for (int64_t j = 0; j < n * pw; j++) C[j] = (float)((j * 2654435761u >> 16) % 2001) * 1e-3f - 1.0f;
        for (int64_t j = 0; j < nq * w; j++) Q[j] = (double)((j * 40503u) % 1999) * 1e-3 - 1.0;
        for (int64_t j = 0; j < nq * n; j++) S[j] = 1.0f / (float)n;
        int reps = k == &ms_kern_ref ? 1 : 20;
        double t0 = thread_cpu_s();
        for (int r = 0; r < reps; r++) k->att_scores(S, n, Q, w, nq, C, pw, w, n, 0.125);
        const double ts = thread_cpu_s() - t0;
        t0 = thread_cpu_s();
        for (int r = 0; r < reps; r++) k->att_mix(O, pw, S, n, nq, C, pw, sh[i].wmix, n);
        const double tm = thread_cpu_s() - t0;
        printf("attention %-9s %-7s %3lld heads x %lld positions: scores %6.2f ns, mix %6.2f ns per (head, position)\n",
               k->name, sh[i].name, (long long)nq, (long long)n, ts / reps / (double)(nq * n) * 1e9,
               tm / reps / (double)(nq * n) * 1e9);
        free(C); free(S); free(O); free(Q);
    }
}

int main(void) {
    for (int nt = 1; nt <= 2; nt++) {
        ms_err err;
        ms_err_clear(&err);
        if (ms_pool_open(nt, &g_pool[nt], &err) != MS_OK) { fprintf(stderr, "%s\n", err.msg); return 1; }
    }
    enum { N_TAB = 4 };
    const ms_kern *tabs[N_TAB] = { ms_kernels_select("ref"), ms_kernels_select("avx2"),
                                   ms_kernels_select("avx512"), ms_kernels_select("avx512-l2") };
    for (int t = 0; t < N_TAB; t++)
        if (tabs[t]) bench_in_cache(tabs[t]);
    for (int t = 0; t < N_TAB; t++)
        if (tabs[t]) bench_attention(tabs[t]);
    /* read / memcpy bandwidth on 1 GiB (larger than any LLC here) */
    size_t big = (size_t)1 << 30;
    uint64_t *buf = xmalloc(big), *dst = xmalloc(big);
    for (size_t i = 0; i < big / 8; i++) buf[i] = i;
    for (int nt = 1; nt <= 2; nt++)
        printf("read bandwidth, %d thread%s: %.1f GB/s\n", nt, nt > 1 ? "s" : "",
               bench_read(buf, (int64_t)(big / 8), nt));
    double t0 = now_s();
    memcpy(dst, buf, big);
    double tc = now_s() - t0;
    t0 = now_s();
    memcpy(dst, buf, big);
    double tc2 = now_s() - t0;
    if (tc2 < tc) tc = tc2;
    printf("memcpy 1 thread: %.1f GB/s copied (%.1f GB/s read+write)\n", big / tc / 1e9, 2 * big / tc / 1e9);
    free(dst);
    free(buf);

    /* BF16 7168 x 12288 */
    {
        int64_t rows = 7168, cols = 12288;
        size_t bytes = (size_t)(rows * cols) * 2;
        int ncold = 4;   /* 4 x 176 MB > 300 MB LLC */
        uint8_t *W = xmalloc(bytes * ncold);
        uint16_t *w16 = (uint16_t *)W;
        for (size_t i = 0; i < bytes * ncold / 2; i++) w16[i] = (uint16_t)(0x3C00 + (i * 2654435761u >> 20) % 0x800);
        float *x = xmalloc((size_t)cols * 4), *y = xmalloc((size_t)rows * 4);
        for (int64_t i = 0; i < cols; i++) x[i] = (float)(i % 7) - 3.0f;
        for (int t = 0; t < N_TAB; t++) {
            if (!tabs[t]) continue;
            for (int nt = 1; nt <= 2; nt++) {
                int reps = t == 0 ? 1 : 5;
                double hot = bench_matvec(tabs[t], 0, W, 0, 0, 1, x, y, rows, cols, bytes, nt, reps);
                double cold = bench_matvec(tabs[t], 0, W, bytes, 0, t == 0 ? 1 : ncold, x, y, rows, cols,
                                           bytes, nt, t == 0 ? 1 : 2);
                printf("matvec_bf16  %-6s 7168x12288 %d thr: hot %6.1f GB/s  cold %6.1f GB/s  (%.2f ms cold)\n",
                       tabs[t]->name, nt, hot, cold, bytes / cold / 1e6);
            }
        }
        free(W); free(x); free(y);
    }
    /* MXFP4 at both expert shapes (gate/up 3072 x 3584, down 3584 x 3072):
     * packed then scales, contiguous per copy */
    static const int64_t mx_shape[2][2] = { { 3072, 3584 }, { 3584, 3072 } };
    for (int is = 0; is < 2; is++) {
        int64_t rows = mx_shape[is][0], cols = mx_shape[is][1];
        size_t pbytes = (size_t)(rows * cols / 2), sbytes = (size_t)(rows * cols / 32);
        size_t bytes = pbytes + sbytes;
        int ncold = 96;   /* 96 x 5.9 MB > 300 MB LLC: like many experts */
        uint8_t *M = xmalloc(bytes * ncold);
        for (size_t c = 0; c < (size_t)ncold; c++) {
            uint8_t *p = M + c * bytes;
            for (size_t i = 0; i < pbytes; i++) p[i] = (uint8_t)(i * 2654435761u >> 13);
            for (size_t i = 0; i < sbytes; i++) p[pbytes + i] = (uint8_t)(118 + i % 12);
        }
        float *x = xmalloc((size_t)cols * 4), *y = xmalloc((size_t)rows * 4);
        for (int64_t i = 0; i < cols; i++) x[i] = (float)(i % 5) - 2.0f;
        for (int t = 0; t < N_TAB; t++) {
            if (!tabs[t]) continue;
            for (int nt = 1; nt <= 2; nt++) {
                double hot = bench_matvec(tabs[t], 1, M, 0, pbytes, 1, x, y, rows, cols, bytes, nt,
                                          t == 0 ? 1 : 20);
                double cold = bench_matvec(tabs[t], 1, M, bytes, pbytes, t == 0 ? 1 : ncold, x, y, rows,
                                           cols, bytes, nt, t == 0 ? 1 : 2);
                printf("matvec_mxfp4 %-6s %lldx%lld  %d thr: hot %6.1f GB/s  cold %6.1f GB/s  (%.3f ms cold)\n",
                       tabs[t]->name, (long long)rows, (long long)cols, nt, hot, cold, bytes / cold / 1e6);
            }
        }
        free(M); free(x); free(y);
    }
    for (int nt = 1; nt <= 2; nt++) ms_pool_close(g_pool[nt]);
    return 0;
}
