/* bench/mx_bound.c - the core's ceiling for the MXFP4 matvec under the T16 tree.
 *
 * Owns: a measurement, nothing the engine uses. The T16 tree (kernels.h) asks
 *   for one single-rounding f32 FMA per weight element, in a fixed lane order,
 *   and MXFP4 packs 32 elements into 17 bytes (16 of nibbles + 1 scale), so a
 *   core can stream MXFP4 no faster than its FMA rate allows, whatever the
 *   memory does. This program measures that ceiling and the cost of the
 *   decode on top of it, with the weights in L1 (no memory traffic at all):
 *     fma      2 zmm FMAs per 32 elements, weights already in registers
 *     +index   + the avx512 kernels' index work: 2 broadcast loads, 2 vpsrlvq
 *     +lookup  + 2 vpermps from the scale's table row: the kernels' decode
 *   8 rows x 16 groups per pass, 8 accumulators (as mx_rows8_fast), 1 and 2
 *   threads (each its own copy). Reported as ns per row and group (32
 *   elements) and as GB/s of MXFP4 bytes per thread and in all: a kernel that
 *   must reach a share of the memory bandwidth needs this ceiling above it.
 *   Then the same whole decode fed from DRAM (second table): an expert-shaped
 *   matrix (3584 columns, blocks of 8 rows; 512 MiB per thread, read 4 times)
 *   in the checkpoint's row-major layout ("rows": 8 interleaved row streams,
 *   what the kernels read) and in a linear one ("linear": each block's groups
 *   in order, one ascending stream, what a repack on arrival would give), each
 *   with the hardware prefetchers alone or the kernels' software prefetch of
 *   the next block (T0 or T2). x sits in L1 and one table row serves all
 *   groups (no scale bytes read: cheaper than the real kernel), so this is the
 *   best a kernel with this decode can do from DRAM in either layout.
 * Build and run: `make bench-mx-bound` (bench/bench.mk; not part of `make`).
 *   On a CPU without AVX-512 it says so and exits 0.
 * Does not: compute correct products (the values are whatever the bits give;
 *   only the instruction mix matters), assert anything.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"), noinline))

enum { NR = 8, NG = 16, PASSES = 400000, MODES = 3 };
enum { SX = 3584, STREAM_PASSES = 4 };              /* stream modes: columns, reads of the buffer */
#define STREAM_BYTES ((size_t)512 << 20)

typedef struct lane {
    uint8_t packed[NR][NG * 16] __attribute__((aligned(64)));
    float lut[16] __attribute__((aligned(64)));
    float x[NG * 32] __attribute__((aligned(64)));
    int mode;
    double secs;
    float sink;
    const uint8_t *stream;      /* STREAM_BYTES of nibbles (stream modes) */
    float sx[SX] __attribute__((aligned(64)));   /* x of the stream modes */
    int linear;                 /* stream layout: 0 rows, 1 linear */
    int pf;                     /* 0 hardware only, 1 T0, 2 T2 */
} lane;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One mode, PASSES passes over NR x NG row-groups. MODE is a constant at each
 * call (the switch below), so each loop holds only its own instructions. */
static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
float mix(lane *L, const int MODE) {
    const __m512i sh = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);
    const __m512 lut = _mm512_load_ps(L->lut);
    const __m512 wc0 = _mm512_set1_ps(1.0f), wc1 = _mm512_set1_ps(-0.5f);
    __m512 acc[NR];
    for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_ps();
    for (long pass = 0; pass < PASSES; pass++) {
        for (int g = 0; g < NG; g++) {
            const __m512 x0 = _mm512_load_ps(L->x + g * 32), x1 = _mm512_load_ps(L->x + g * 32 + 16);
#pragma GCC unroll 8
            for (int j = 0; j < NR; j++) {
                __m512 w0 = wc0, w1 = wc1;
                if (MODE >= 1) {
                    int64_t q0, q1;
                    memcpy(&q0, L->packed[j] + g * 16, 8);
                    memcpy(&q1, L->packed[j] + g * 16 + 8, 8);
                    __m512i i0 = _mm512_srlv_epi64(_mm512_set1_epi64(q0), sh);
                    __m512i i1 = _mm512_srlv_epi64(_mm512_set1_epi64(q1), sh);
                    if (MODE == 1) {
                        w0 = _mm512_castsi512_ps(i0);
                        w1 = _mm512_castsi512_ps(i1);
                    } else {
                        w0 = _mm512_permutexvar_ps(i0, lut);
                        w1 = _mm512_permutexvar_ps(i1, lut);
                    }
                }
                acc[j] = _mm512_fmadd_ps(w0, x0, acc[j]);
                acc[j] = _mm512_fmadd_ps(w1, x1, acc[j]);
            }
        }
        __asm__ volatile("" ::: "memory");   /* the data may have changed: reload */
    }
    __m512 s = acc[0];
    for (int j = 1; j < NR; j++) s = _mm512_add_ps(s, acc[j]);
    return _mm512_reduce_add_ps(s);
}

/* The whole decode from DRAM over an expert-shaped matrix (3584 columns =
 * 112 groups, rows of RB = 1792 bytes) in blocks of 8 rows, in one of two
 * layouts: ROWS as the checkpoint stores it (row j of a block at j * RB,
 * group g at 16 * g: 8 interleaved row streams, what the kernels read) or
 * LINEAR (group g of row j at 16 * (8 * g + j): one ascending stream).
 * PF: 0 = the hardware prefetchers alone, 1 = T0, 2 = T2 software prefetch of
 * the next block, 2 lines per group in address order (the kernels' scheme). */
enum { SNG = SX / 32, RB = SX / 2, BLOCK = NR * RB };

static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
float stream(lane *L, const int LINEAR, const int PF) {
    const __m512i sh = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);
    const __m512 lut = _mm512_load_ps(L->lut);
    __m512 acc[NR];
    for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_ps();
    for (size_t b = 0; b + BLOCK <= STREAM_BYTES; b += BLOCK) {
        const uint8_t *blk = L->stream + b;
        const uintptr_t next = (uintptr_t)blk + BLOCK;   /* past the end: a prefetch never faults */
        for (int g = 0; g < SNG; g++) {
            const __m512 x0 = _mm512_load_ps(L->sx + g * 32), x1 = _mm512_load_ps(L->sx + g * 32 + 16);
            if (PF == 1) {
                _mm_prefetch((const char *)(next + (uintptr_t)g * 128), _MM_HINT_T0);
                _mm_prefetch((const char *)(next + (uintptr_t)g * 128 + 64), _MM_HINT_T0);
            } else if (PF == 2) {
                _mm_prefetch((const char *)(next + (uintptr_t)g * 128), _MM_HINT_T2);
                _mm_prefetch((const char *)(next + (uintptr_t)g * 128 + 64), _MM_HINT_T2);
            }
#pragma GCC unroll 8
            for (int j = 0; j < NR; j++) {
                const uint8_t *p = LINEAR ? blk + 16 * (NR * g + j) : blk + (size_t)j * RB + 16 * g;
                int64_t q0, q1;
                memcpy(&q0, p, 8);
                memcpy(&q1, p + 8, 8);
                __m512 w0 = _mm512_permutexvar_ps(_mm512_srlv_epi64(_mm512_set1_epi64(q0), sh), lut);
                __m512 w1 = _mm512_permutexvar_ps(_mm512_srlv_epi64(_mm512_set1_epi64(q1), sh), lut);
                acc[j] = _mm512_fmadd_ps(w0, x0, acc[j]);
                acc[j] = _mm512_fmadd_ps(w1, x1, acc[j]);
            }
        }
    }
    __m512 s = acc[0];
    for (int j = 1; j < NR; j++) s = _mm512_add_ps(s, acc[j]);
    return _mm512_reduce_add_ps(s);
}

AVX512 static float rows_hw(lane *L) { return stream(L, 0, 0); }
AVX512 static float rows_t0(lane *L) { return stream(L, 0, 1); }
AVX512 static float rows_t2(lane *L) { return stream(L, 0, 2); }
AVX512 static float linear_hw(lane *L) { return stream(L, 1, 0); }
AVX512 static float linear_t0(lane *L) { return stream(L, 1, 1); }
AVX512 static float linear_t2(lane *L) { return stream(L, 1, 2); }
static float (*const stream_fn[2][3])(lane *) = { { rows_hw, rows_t0, rows_t2 },
                                                  { linear_hw, linear_t0, linear_t2 } };

static void *run_stream(void *arg) {
    lane *L = arg;
    double t = now();
    L->sink = 0;
    for (int r = 0; r < STREAM_PASSES; r++) L->sink += stream_fn[L->linear][L->pf](L);
    L->secs = now() - t;
    return NULL;
}

AVX512 static float mix_fma(lane *L) { return mix(L, 0); }
AVX512 static float mix_index(lane *L) { return mix(L, 1); }
AVX512 static float mix_lookup(lane *L) { return mix(L, 2); }

static void *run(void *arg) {
    lane *L = arg;
    double t = now();
    L->sink = L->mode == 0 ? mix_fma(L) : L->mode == 1 ? mix_index(L) : mix_lookup(L);
    L->secs = now() - t;
    return NULL;
}

static void fill(lane *L) {
    for (int j = 0; j < NR; j++)
        for (int i = 0; i < NG * 16; i++) L->packed[j][i] = (uint8_t)(i * 37 + j * 11);
    for (int i = 0; i < 16; i++) L->lut[i] = (float)(i & 7) * ((i & 8) ? -0.25f : 0.25f);
    for (int i = 0; i < NG * 32; i++) L->x[i] = 1e-3f * (float)(i % 7);
}

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl")) {
        printf("mx_bound: this CPU has no AVX-512 (F/BW/DQ/VL); nothing to measure\n");
        return 0;
    }
    static lane lanes[2];
    fill(&lanes[0]);
    fill(&lanes[1]);
    static const char *name[MODES] = { "fma", "+index", "+lookup" };
    const double rg = (double)PASSES * NR * NG;          /* row-groups per thread */
    float sink = 0;
    printf("mode     threads  ns/row-group  Gelem/s/thread  GB/s of MXFP4 (per thread / all)\n");
    for (int round = 0; round < 3; round++) {
        for (int nt = 1; nt <= 2; nt++) {
            for (int m = 0; m < MODES; m++) {
                pthread_t th;
                for (int i = 0; i < nt; i++) lanes[i].mode = m;
                if (nt == 2 && pthread_create(&th, NULL, run, &lanes[1]) != 0) {
                    fprintf(stderr, "mx_bound: pthread_create failed\n");
                    return 1;
                }
                run(&lanes[0]);
                if (nt == 2) pthread_join(th, NULL);
                double secs = lanes[0].secs;
                if (nt == 2 && lanes[1].secs > secs) secs = lanes[1].secs;
                for (int i = 0; i < nt; i++) sink += lanes[i].sink;
                const double per = rg / secs;                 /* row-groups/s per thread */
                printf("%-8s %7d  %12.3f  %14.1f  %8.1f / %5.1f\n", name[m], nt, 1e9 / per,
                       per * 32 / 1e9, per * 17 / 1e9, per * 17 * nt / 1e9);
            }
        }
        if (round < 2) printf("\n");
    }

    /* From DRAM: each thread its own buffer, touched first (no page faults timed). */
    for (int i = 0; i < 2; i++) {
        uint8_t *b = aligned_alloc(2 << 20, STREAM_BYTES);
        if (!b) {
            fprintf(stderr, "mx_bound: out of memory\n");
            return 1;
        }
        for (size_t k = 0; k < STREAM_BYTES; k++) b[k] = (uint8_t)(k * 2654435761u >> 13);
        lanes[i].stream = b;
    }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < SX; k++) lanes[i].sx[k] = 1e-3f * (float)(k % 7);
    static const char *layout[2] = { "rows", "linear" }, *pfname[3] = { "hw only", "T0", "T2" };
    const double srg = (double)(STREAM_BYTES / BLOCK * BLOCK) / 16 * STREAM_PASSES;   /* per thread */
    printf("\nfrom DRAM, 3584 columns   threads  prefetch  ns/row-group  GB/s of MXFP4 (per thread / all)\n");
    for (int round = 0; round < 3; round++) {
        for (int nt = 1; nt <= 2; nt++) {
            for (int lin = 0; lin <= 1; lin++) {
                for (int pf = 0; pf < 3; pf++) {
                    pthread_t th;
                    for (int i = 0; i < nt; i++) {
                        lanes[i].linear = lin;
                        lanes[i].pf = pf;
                    }
                    if (nt == 2 && pthread_create(&th, NULL, run_stream, &lanes[1]) != 0) {
                        fprintf(stderr, "mx_bound: pthread_create failed\n");
                        return 1;
                    }
                    run_stream(&lanes[0]);
                    if (nt == 2) pthread_join(th, NULL);
                    double secs = lanes[0].secs;
                    if (nt == 2 && lanes[1].secs > secs) secs = lanes[1].secs;
                    for (int i = 0; i < nt; i++) sink += lanes[i].sink;
                    const double per = srg / secs;
                    printf("%-24s  %7d  %-8s  %12.3f  %8.1f / %5.1f\n", layout[lin], nt, pfname[pf],
                           1e9 / per, per * 17 / 1e9, per * 17 * nt / 1e9);
                }
            }
        }
        if (round < 2) printf("\n");
    }
    printf("(sink %g)\n", (double)sink);
    return 0;
}
