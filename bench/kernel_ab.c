/* bench/kernel_ab.c - one kernel file, old against new, in one process: the MXFP4 matvec A/B.
 *
 * Owns: a measurement, nothing the engine uses.
 * Idea: on a shared, noisy machine two benchmark binaries run minutes apart see
 *   different loads; the ratio of two kernels is only trustworthy when they
 *   alternate closely. `make bench-kernel-ab` (bench/bench.mk) compiles an old
 *   version of one ISA file (git show OLD:src/kernels/x86/matvec_ISA.c) and the
 *   working tree's under two names (ms_kern_ab_old, ms_kern_ab_new) and links
 *   both here. Each round measures the read bandwidth (8 interleaved streams of
 *   16-byte loads over 1 GiB, as bench/membw.c, 1 and 2 threads), then old and
 *   new in alternating order: matvec_mxfp4 cold (one pass over 96 copies of the
 *   matrix, > the 300 MiB LLC) and hot (best of 8 on one copy) at both expert
 *   shapes (gate/up 3072 x 3584, down 3584 x 3072), 1 and 2 threads (rows split
 *   by the engine's pool, base/pool.h, grain 16), matmat_mxfp4 at T = 4 and
 *   matvec_mxfp4 on a 256 x 3584 matrix in L2 (thread CPU time), prompt
 *   chunks (matmat_bf16 T = 32, matmat_mxfp4 T = 8) and bf16 matvec cold over
 *   8 copies of 4096 x 7168, 1 and 2 threads. Printed: medians over rounds, the
 *   median of the per-round new/old ratios, and cold / read bandwidth per round.
 *   Before timing, old and new outputs are compared bit for bit (exit 1 if not).
 * Does not: assert a speed; pin threads; check the old header is compatible (the
 *   old file is compiled against the working tree's kernels/kernels.h).
 * Usage: kernel_ab [rounds [old-table new-table]]   (default 15; tables by
 *   name, "avx512" or "avx512-l2" for the avx512 file: the second is the same
 *   kernels with the matvec prefetches to L2, ms_kern_avx512_l2, compiled
 *   under the names ms_kern_ab_old_l2 / ms_kern_ab_new_l2 where the file
 *   defines it)
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

extern const ms_kern ms_kern_ab_old, ms_kern_ab_new;
extern const ms_kern ms_kern_ab_old_l2 __attribute__((weak)), ms_kern_ab_new_l2 __attribute__((weak));
static const ms_kern *kern[2] = { &ms_kern_ab_old, &ms_kern_ab_new };

/* The table of one side (old or new) named `name`, or NULL. */
static const ms_kern *side_table(int v, const char *name) {
    const ms_kern *c[2] = { v ? &ms_kern_ab_new : &ms_kern_ab_old, v ? &ms_kern_ab_new_l2 : &ms_kern_ab_old_l2 };
    for (int i = 0; i < 2; i++)
        if (c[i] && !strcmp(c[i]->name, name)) return c[i];
    return NULL;
}

enum { MAX_ROUNDS = 101, N_COPY = 96, N_MEAS = 14 };
static const int64_t shape[2][2] = { { 3072, 3584 }, { 3584, 3072 } };
static const size_t READ_BYTES = (size_t)1 << 30;

static uint8_t *mat[2];                 /* N_COPY x (packed, scales) per shape */
static size_t packed_bytes[2], mat_bytes[2];
static float *xv[2], *yv;
static uint64_t *rbuf;

static void *xalloc(size_t n) {
    void *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    if (!p) { fprintf(stderr, "kernel_ab: out of memory (%zu bytes)\n", n); exit(1); }
    return p;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *a, int n) {
    double b[MAX_ROUNDS];
    memcpy(b, a, (size_t)n * sizeof *a);
    qsort(b, (size_t)n, sizeof *b, cmp_d);
    return n % 2 ? b[n / 2] : 0.5 * (b[n / 2 - 1] + b[n / 2]);
}

typedef struct job {
    const ms_kern *k;       /* NULL: a read-bandwidth job over buf */
    int is, copy;
    int64_t r0, r1;
    const unsigned char *buf;
    size_t n_bytes;
    long long sink;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    if (!j->k) {
        typedef long long v2i __attribute__((vector_size(16)));
        size_t per = j->n_bytes / 8 / 64 * 64;
        const v2i *q[8];
        v2i s[8];
        memset(s, 0, sizeof s);
        for (int k = 0; k < 8; k++) q[k] = (const v2i *)(const void *)(j->buf + per * (size_t)k);
        for (size_t i = 0; i < per / sizeof(v2i); i += 4)
            for (int k = 0; k < 8; k++) s[k] ^= q[k][i] ^ q[k][i + 1] ^ q[k][i + 2] ^ q[k][i + 3];
        for (int k = 0; k < 8; k++) j->sink ^= s[k][0] ^ s[k][1];
        return NULL;
    }
    const uint8_t *m = mat[j->is] + (size_t)j->copy * mat_bytes[j->is];
    j->k->matvec_mxfp4(yv, m, m + packed_bytes[j->is], xv[j->is], j->r0, j->r1, shape[j->is][1]);
    return NULL;
}

static void run_parallel(job *jobs, int nt) {
    pthread_t th[2];
    for (int i = 1; i < nt; i++)
        if (pthread_create(&th[i], NULL, run_job, &jobs[i])) { fprintf(stderr, "pthread_create\n"); exit(1); }
    run_job(&jobs[0]);
    for (int i = 1; i < nt; i++) pthread_join(th[i], NULL);
}

static long long g_sink;

static double read_gbps(int nt) {
    double best = 1e30;
    for (int rep = 0; rep < 2; rep++) {
        job jobs[2];
        for (int i = 0; i < nt; i++)
            jobs[i] = (job){ .buf = (const unsigned char *)rbuf + READ_BYTES / (size_t)nt * (size_t)i,
                             .n_bytes = READ_BYTES / (size_t)nt };
        double t0 = now_s();
        run_parallel(jobs, nt);
        double t = now_s() - t0;
        if (t < best) best = t;
        for (int i = 0; i < nt; i++) g_sink ^= jobs[i].sink;
    }
    return (double)READ_BYTES / best / 1e9;
}

static ms_pool *g_pool[3];          /* by thread count: the engine's pool */

static void matvec_part(void *ctx, int64_t b, int64_t e) {
    job j = *(const job *)ctx;
    j.r0 = b;
    j.r1 = e;
    run_job(&j);
}

/* GB/s of matrix bytes (packed + scales); rows split by the engine's pool
 * (grain 16, as model/forward.c's mm_*), not a thread created per matrix,
 * whose start-up (~0.1 ms) is comparable to one expert matrix */
static double matvec_gbps(int v, int is, int nt, int cold) {
    int64_t rows = shape[is][0];
    int n = cold ? N_COPY : 1, reps = cold ? 1 : 8;
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now_s();
        for (int c = 0; c < n; c++) {
            job j = { .k = kern[v], .is = is, .copy = c };
            ms_pool_for(g_pool[nt], rows, 16, matvec_part, &j);
        }
        double t = (now_s() - t0) / n;
        if (t < best) best = t;
    }
    return (double)mat_bytes[is] / best / 1e9;
}

/* Gelem/s of matmat_mxfp4 (T = 4) or matvec_mxfp4 (T = 1), 256 x 3584
 * (L2-resident), thread CPU time */
static double matmat_gelems(int v, int T) {
    enum { R = 256, C = 3584, TMAX = 4, REPS = 100 };
    static uint8_t P[R * C / 2], S[R * C / 32];
    static float X[TMAX * C], Y[TMAX * R];
    if (!S[0]) {
        for (size_t i = 0; i < sizeof P; i++) P[i] = (uint8_t)(i * 2654435761u >> 13);
        for (size_t i = 0; i < sizeof S; i++) S[i] = (uint8_t)(120 + i % 9);
        for (size_t i = 0; i < TMAX * C; i++) X[i] = (float)(i % 7) - 3.0f;
    }
    double t0 = thread_cpu_s();
    for (int r = 0; r < REPS; r++) {
        if (T == 1) kern[v]->matvec_mxfp4(Y, P, S, X, 0, R, C);
        else kern[v]->matmat_mxfp4(Y, R, P, S, X, C, T, 0, R, C);
    }
    return (double)R * C * T * REPS / (thread_cpu_s() - t0) / 1e9;
}

/* Prompt chunks, one thread, wall time: Gelem-token/s of matmat_bf16 at T = 32
 * on the first copy of a 4096 x 7168 matrix (58 MB; a prompt chunk is
 * compute-bound, so whether it is cached hardly matters) and of matmat_mxfp4 at T = 8 on the gate/up expert
 * shape (a 32-token prompt gives each of 64 experts ~8 tokens). Before the
 * first timing, old and new must give the same bits (exit 1 if not), as for
 * the bf16 matvec below. */
enum { PF_R = 4096, PF_C = 7168, PF_T = 32, PF_TX = 8, BF_COPY = 8 };
static uint16_t *pf_w;                  /* BF_COPY copies of the 4096 x 7168 matrix (470 MB) */
static float *pf_x, *pf_y[2];

static void pf_init(void) {
    pf_w = xalloc((size_t)BF_COPY * PF_R * PF_C * 2);
    pf_x = xalloc((size_t)PF_T * PF_C * 4);
    for (int k = 0; k < 2; k++) pf_y[k] = xalloc((size_t)PF_T * PF_R * 4);
    for (size_t i = 0; i < (size_t)BF_COPY * PF_R * PF_C; i++)
        pf_w[i] = (uint16_t)(0x3c00 + (i % ((size_t)PF_R * PF_C) * 2654435761u >> 20) % 0x800);   /* finite bf16 */
    for (size_t i = 0; i < (size_t)PF_T * PF_C; i++) pf_x[i] = (float)(i % 13) - 6.0f;
}

static double prefill_gelems(int v, int mx) {
    const int64_t rows = mx ? shape[0][0] : PF_R, cols = mx ? shape[0][1] : PF_C;
    const int64_t T = mx ? PF_TX : PF_T;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        if (mx) kern[v]->matmat_mxfp4(pf_y[v], rows, mat[0], mat[0] + packed_bytes[0], pf_x, cols, T, 0, rows, cols);
        else kern[v]->matmat_bf16(pf_y[v], rows, pf_w, pf_x, cols, T, 0, rows, cols);
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    return (double)rows * cols * T / best / 1e9;
}

typedef struct bf_job { int v, copy; } bf_job;

static void bf16_part(void *ctx, int64_t b, int64_t e) {
    const bf_job *j = ctx;
    kern[j->v]->matvec_bf16(pf_y[j->v], pf_w + (size_t)j->copy * PF_R * PF_C, pf_x, b, e, PF_C);
}

/* GB/s of bf16 matvec, cold: one pass over each of BF_COPY copies of the
 * 4096 x 7168 matrix (470 MB in all, so no copy is still cached when it comes
 * round), rows split by the engine's pool as in the model */
static double bf16_matvec_gbps(int v, int nt) {
    double t0 = now_s();
    for (int c = 0; c < BF_COPY; c++) {
        bf_job j = { v, c };
        ms_pool_for(g_pool[nt], PF_R, 16, bf16_part, &j);
    }
    return (double)BF_COPY * PF_R * PF_C * 2 / (now_s() - t0) / 1e9;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 15;
    if (rounds < 1 || rounds > MAX_ROUNDS) { fprintf(stderr, "kernel_ab: rounds in 1..%d\n", MAX_ROUNDS); return 2; }
    if (argc == 4) {
        for (int v = 0; v < 2; v++)
            if (!(kern[v] = side_table(v, argv[2 + v]))) {
                fprintf(stderr, "kernel_ab: the %s file has no table \"%s\"\n", v ? "new" : "old", argv[2 + v]);
                return 2;
            }
    } else if (argc != 1 && argc != 2) {
        fprintf(stderr, "usage: kernel_ab [rounds [old-table new-table]]\n");
        return 2;
    }
    for (int nt = 1; nt <= 2; nt++) {
        ms_err err;
        ms_err_clear(&err);
        if (ms_pool_open(nt, &g_pool[nt], &err) != MS_OK) { fprintf(stderr, "%s\n", err.msg); return 1; }
    }
    yv = xalloc(4096 * sizeof *yv);
    rbuf = xalloc(READ_BYTES);
    for (size_t i = 0; i < READ_BYTES / 8; i++) rbuf[i] = i;    /* touch every page */
    for (int is = 0; is < 2; is++) {
        int64_t rows = shape[is][0], cols = shape[is][1];
        size_t sb = (size_t)(rows * cols / 32);
        packed_bytes[is] = (size_t)(rows * cols / 2);
        mat_bytes[is] = packed_bytes[is] + sb;
        mat[is] = xalloc(mat_bytes[is] * N_COPY);
        for (int c = 0; c < N_COPY; c++) {
            uint8_t *p = mat[is] + (size_t)c * mat_bytes[is];
            for (size_t i = 0; i < packed_bytes[is]; i++) p[i] = (uint8_t)(i * 2654435761u >> 13);
            for (size_t i = 0; i < sb; i++) p[packed_bytes[is] + i] = (uint8_t)(118 + i % 12);
        }
        xv[is] = xalloc((size_t)cols * sizeof *xv[is]);
        for (int64_t i = 0; i < cols; i++) xv[is][i] = (float)(i % 5) - 2.0f;
        float *y0 = xalloc((size_t)rows * 4), *y1 = xalloc((size_t)rows * 4);
        int64_t n0 = kern[0]->matvec_mxfp4(y0, mat[is], mat[is] + packed_bytes[is], xv[is], 0, rows, cols);
        int64_t n1 = kern[1]->matvec_mxfp4(y1, mat[is], mat[is] + packed_bytes[is], xv[is], 0, rows, cols);
        if (n0 != n1 || memcmp(y0, y1, (size_t)rows * 4) != 0) {
            fprintf(stderr, "kernel_ab: old and new give different bits at %lld x %lld\n",
                    (long long)rows, (long long)cols);
            return 1;
        }
        free(y0);
        free(y1);
    }
    pf_init();
    static const char *const pf_what[3] = { "matmat_bf16", "matmat_mxfp4", "matvec_bf16" };
    for (int m = 0; m < 3; m++) {
        for (int v = 0; v < 2; v++) {
            if (m < 2) prefill_gelems(v, m);
            else bf16_matvec_gbps(v, 1);
        }
        size_t n = m == 0 ? (size_t)PF_T * PF_R : m == 1 ? (size_t)PF_TX * (size_t)shape[0][0] : (size_t)PF_R;
        if (memcmp(pf_y[0], pf_y[1], n * 4) != 0) {
            fprintf(stderr, "kernel_ab: old and new %s give different bits\n", pf_what[m]);
            return 1;
        }
    }
    static const char *const name[N_MEAS] = {
        "gate/up 3072x3584 1 thr cold", "gate/up 3072x3584 1 thr hot", "gate/up 3072x3584 2 thr cold",
        "gate/up 3072x3584 2 thr hot", "down 3584x3072 1 thr cold", "down 3584x3072 1 thr hot",
        "down 3584x3072 2 thr cold", "down 3584x3072 2 thr hot", "matmat T=4 256x3584 L2 Gelem/s",
        "matvec 256x3584 L2 Gelem/s", "matmat bf16 T=32 4096x7168 Gel*T/s",
        "matmat mxfp4 T=8 3072x3584 Gel*T/s", "bf16 matvec 4096x7168 1 thr GB/s",
        "bf16 matvec 4096x7168 2 thr GB/s" };
    static double res[2][N_MEAS][MAX_ROUNDS], bw[2][MAX_ROUNDS];
    for (int rd = 0; rd < rounds; rd++) {
        bw[0][rd] = read_gbps(1);
        bw[1][rd] = read_gbps(2);
        for (int k = 0; k < 2; k++) {
            int v = (k + rd) % 2;      /* old first in even rounds, new first in odd */
            for (int is = 0; is < 2; is++)
                for (int nt = 1; nt <= 2; nt++)
                    for (int hot = 0; hot < 2; hot++)
                        res[v][is * 4 + (nt - 1) * 2 + hot][rd] = matvec_gbps(v, is, nt, !hot);
            res[v][8][rd] = matmat_gelems(v, 4);
            res[v][9][rd] = matmat_gelems(v, 1);
            res[v][10][rd] = prefill_gelems(v, 0);
            res[v][11][rd] = prefill_gelems(v, 1);
            res[v][12][rd] = bf16_matvec_gbps(v, 1);
            res[v][13][rd] = bf16_matvec_gbps(v, 2);
        }
    }
    printf("kernel_ab: old %s, new %s, %d rounds (medians); read bandwidth 1 thr %.2f GB/s, 2 thr %.2f GB/s\n",
           kern[0]->name, kern[1]->name, rounds, median(bw[0], rounds), median(bw[1], rounds));
    for (int m = 0; m < N_MEAS; m++) {
        double ratio[MAX_ROUNDS], f_old[MAX_ROUNDS], f_new[MAX_ROUNDS];
        for (int rd = 0; rd < rounds; rd++) {
            double b = m == 12 ? bw[0][rd] : m == 13 ? bw[1][rd] : (m % 4 < 2) ? bw[0][rd] : bw[1][rd];
            ratio[rd] = res[1][m][rd] / res[0][m][rd];
            f_old[rd] = res[0][m][rd] / b;
            f_new[rd] = res[1][m][rd] / b;
        }
        printf("  %-31s old %6.2f  new %6.2f  new/old %5.3f", name[m], median(res[0][m], rounds),
               median(res[1][m], rounds), median(ratio, rounds));
        if ((m < 8 && m % 2 == 0) || m >= 12)
            printf("  cold/read bw: old %3.0f%%  new %3.0f%%", 100 * median(f_old, rounds),
                   100 * median(f_new, rounds));
        printf("\n");
    }
    if (g_sink == 42) printf(" \n");
    for (int nt = 1; nt <= 2; nt++) ms_pool_close(g_pool[nt]);
    return 0;
}
