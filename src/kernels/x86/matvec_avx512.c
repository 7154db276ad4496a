/* kernels/x86/matvec_avx512.c - the matrix products with AVX-512 (same bits as ref).
 *
 * Owns: ms_kern_avx512 and ms_kern_avx512_l2 (the same kernels; the second's
 *   matvec prefetches go to L2, see PREFETCH HINT). Compiled with -mavx512f/bw/vl/dq -mfma (file suffix);
 *   run only after ms_kernels_select has seen those features.
 * Idea: the 16 lanes of the T16 tree (kernels.h) are exactly one __m512
 *   accumulator: element c of a row goes to lane c % 16 because every load
 *   starts at a multiple of 16. One _mm512_fmadd_ps per 16 elements is the
 *   same single-rounding fmaf as the reference, lane by lane and in the same
 *   order; the final tree is the same sequence of float adds:
 *
 *     zmm acc[0..15] -> lo256 + hi256 = s8 -> lo128 + hi128 = s4
 *                    -> s4 + movehl(s4) = s2 -> s2[0] + s2[1]
 *
 *   Ragged tails (cols % 16) load with a mask and use a masked FMA that leaves
 *   the unused lanes untouched (an FMA with zeros would turn an accumulator of
 *   -0 into +0 and change the bits).
 *   Speed: several rows share each load of x (BF16 matvec: 4 rows), and matmat
 *   keeps a block of rows hot in cache while it loops over all tokens, each
 *   (token, row) still its own accumulator and tree.
 * MXFP4: 16 packed bytes = 32 elements of one group. Each half-group's 8
 *   bytes are broadcast (a plain load) and shifted per 64-bit lane so each
 *   dword holds one nibble in bits 0..3; vpermps looks it up in a constant
 *   table row MX_LUT[s] = signed twice-magnitudes {0,1,2,3,4,6,8,12} times
 *   the group scale 2^(s-128) (exact; a memory operand, no arithmetic per
 *   group). That decode fills the lanes in a fixed permuted order, so x is
 *   permuted the same way and each accumulator is permuted back before its
 *   tree (see PHYSICAL LANE ORDER below): every lane still sees exactly the
 *   reference's elements, FMAs and order. matvec runs 8 rows per block (x
 *   loaded and permuted once per 8 rows; mx_rows8_fast when the block has no
 *   skipped group, see FAST 8-ROW MATVEC); matmat decodes in natural lane
 *   order instead (mx_decode_nat), as one decode there serves 4 tokens
 *   (blocks of 4 rows x 4 tokens).
 *   Scale 255 skips the group, as in the reference.
 * Invariants: outputs written only in [r0, r1); no allocation, no state.
 */
#include "kernels/kernels.h"

#include <immintrin.h>

extern const ms_kern ms_kern_avx512, ms_kern_avx512_l2;

#define INLINE static inline __attribute__((always_inline))

/* The T16 tree on one 16-lane accumulator. */
INLINE float t16_reduce(__m512 acc) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* 16 BF16 -> 16 F32 (exact: bits << 16). */
INLINE __m512 bf16x16(__m256i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* PREFETCH HINT. The matvec kernels fetch the next block of rows ahead of
 * use; L2 (a compile-time constant at every call) says where to: 0 = every
 * cache level (T0; table "avx512"), 1 = L2 and beyond (T2; table
 * "avx512-l2"). Which is faster depends on the core, so ms_kernels_select
 * picks per CPU family (kernels/dispatch.c):
 *   - Zen 4: T2 is faster cold (MXFP4 and bf16 matvec) and about equal hot.
 *     Zen 4 keeps fewer L1 misses in flight than the stream needs; a T0
 *     prefetch holds an L1 miss buffer until its line arrives, a T2 prefetch
 *     only an L2 one.
 *   - Intel: T2 is faster cold on machine D (model 167, L3 480 MiB): bf16
 *     matvec x1.23 (77% -> 96% of the read bandwidth), MXFP4 x1.03-1.05;
 *     and on machine A (model 207, L3 300 MiB): bf16 x1.14-1.22 (81% -> 98%
 *     on 2 threads), MXFP4 x1.01-1.04.
 *   - Zen 5: T0 ahead of T1 / T2 in a standalone test of the access pattern
 *     (see PREFETCH below).
 *   So every AVX-512 CPU but Zen 5 gets the "avx512-l2" table.
 * (measured: docs/perf/history.md, "972531b: the avx512-l2 table";
 * docs/PERFORMANCE.md, "Measured effect of each knob") */
INLINE void pf_line(uintptr_t a, const int L2) {
    if (L2) _mm_prefetch((const char *)a, _MM_HINT_T2);
    else _mm_prefetch((const char *)a, _MM_HINT_T0);
}

/* ---- BF16 and F32: a block of NR rows x NT tokens ------------------------ */

/* Y[t*ldy + r + j] = dot(W[r + j], X[t*ldx]) for j < NR, t < NT. NR, NT are
 * compile-time constants at every call, so the loops unroll and the
 * accumulators live in registers. F32 weights when Wf != NULL. */
INLINE void block_dot(float *Y, int64_t ldy, const uint16_t *Wb, const float *Wf,
                      const float *X, int64_t ldx, int64_t r, int64_t cols,
                      const int NR, const int NT, const int L2) {
    __m512 acc[6][4];                   /* NR <= 6, NT <= 4 */
#pragma GCC unroll 8
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) acc[j][t] = _mm512_setzero_ps();
    int64_t c = 0;
    /* BF16 matvec (one token): prefetch the next block of rows (NR * cols * 2
     * contiguous bytes) as one front in address order, NR * 32 bytes per step
     * of 16 columns, so it is fetched while this block is consumed. Formed as
     * an integer: past the matrix end it is not a C pointer, and a prefetch
     * never faults. Faster cold than the hardware prefetchers alone; two
     * blocks ahead was not better (measured: docs/perf/history.md, "BF16
     * matvec: prefetch the next block of rows (66db991)").
     * Prompt chunks (NT > 1) reuse each block for T tokens and are not
     * memory-bound: no prefetch there. */
    const uintptr_t pf_next = (uintptr_t)Wb + (uintptr_t)((r + NR) * cols * 2);
    for (; c + 16 <= cols; c += 16) {
        if (NT == 1 && !Wf) {
#pragma GCC unroll 8
            for (int k = 0; k < NR / 2; k++)
                pf_line(pf_next + (uintptr_t)(c * 2 * NR + k * 64), L2);
        }
        __m512 w[6];
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++)
            w[j] = Wf ? _mm512_loadu_ps(Wf + (r + j) * cols + c)
                      : bf16x16(_mm256_loadu_si256((const __m256i *)(Wb + (r + j) * cols + c)));
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            __m512 x = _mm512_loadu_ps(X + t * ldx + c);
#pragma GCC unroll 8
            for (int j = 0; j < NR; j++) acc[j][t] = _mm512_fmadd_ps(w[j], x, acc[j][t]);
        }
    }
    if (c < cols) {
        /* ragged tail: lane l gets element c + l, as in the reference */
        __mmask16 k = (__mmask16)((1u << (cols - c)) - 1u);
        __m512 w[6];
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++)
            w[j] = Wf ? _mm512_maskz_loadu_ps(k, Wf + (r + j) * cols + c)
                      : bf16x16(_mm256_maskz_loadu_epi16(k, Wb + (r + j) * cols + c));
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            __m512 x = _mm512_maskz_loadu_ps(k, X + t * ldx + c);
#pragma GCC unroll 8
            for (int j = 0; j < NR; j++)
                acc[j][t] = _mm512_mask3_fmadd_ps(w[j], x, acc[j][t], k);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) Y[t * ldy + r + j] = t16_reduce(acc[j][t]);
}

/* One block of NR rows at r, for every token: 4 at a time, then singly. */
INLINE void block_all_tokens(float *Y, int64_t ldy, const uint16_t *Wb, const float *Wf,
                             const float *X, int64_t ldx, int64_t T, int64_t r, int64_t cols,
                             const int NR, const int L2) {
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, NR, 4, L2);
    for (; t < T; t++) block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, NR, 1, L2);
}

/* Rows [r0, r1) x tokens [0, T): blocks of 6 rows (T >= 4) or 4 rows; for
 * each block every token (4 at a time) while the block's weights are hot in
 * cache. */
INLINE void dense_rows(float *Y, int64_t ldy, const uint16_t *Wb, const float *Wf,
                       const float *X, int64_t ldx, int64_t T,
                       int64_t r0, int64_t r1, int64_t cols, const int L2) {
    int64_t r = r0;
    /* prompt chunks: 6 rows x 4 tokens (24 accumulators) share each weight
     * and x load more widely than 4 x 4; 4 x 6, 5 x 5, 7 x 3 and 8 x 2 gained
     * less (measured: docs/perf/history.md, "Prompt chunks") */
    if (T >= 4)
        for (; r + 6 <= r1; r += 6) block_all_tokens(Y, ldy, Wb, Wf, X, ldx, T, r, cols, 6, L2);
    for (; r + 4 <= r1; r += 4) block_all_tokens(Y, ldy, Wb, Wf, X, ldx, T, r, cols, 4, L2);
    for (; r < r1; r++) block_all_tokens(Y, ldy, Wb, Wf, X, ldx, T, r, cols, 1, L2);
}

static void avx512_matvec_bf16(float *y, const uint16_t *W, const float *x,
                               int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(y, 0, W, NULL, x, 0, 1, r0, r1, cols, 0);
}

static void avx512l2_matvec_bf16(float *y, const uint16_t *W, const float *x,
                                 int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(y, 0, W, NULL, x, 0, 1, r0, r1, cols, 1);
}

/* prompt chunks: blocks of 4 tokens do not prefetch; a single token (T = 1,
 * or a chunk's last T % 4) prefetches as its table's matvec does */
static void avx512_matmat_bf16(float *Y, int64_t ldy, const uint16_t *W, const float *X,
                               int64_t ldx, int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(Y, ldy, W, NULL, X, ldx, T, r0, r1, cols, 0);
}

static void avx512l2_matmat_bf16(float *Y, int64_t ldy, const uint16_t *W, const float *X,
                                 int64_t ldx, int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(Y, ldy, W, NULL, X, ldx, T, r0, r1, cols, 1);
}

static void avx512_matvec_f32(float *y, const float *W, const float *x,
                              int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(y, 0, NULL, W, x, 0, 1, r0, r1, cols, 0);
}

/* ---- MXFP4 ----------------------------------------------------------------- */

/* The decoded values of every (scale byte, code): MX_LUT[s][n] = code2[n] *
 * 2^(s-128), exact (code2 = signed twice-magnitude; products need at most 4
 * significant bits and are >= 2^-128, so even the subnormal ones are exact;
 * 12 * 2^126 overflows to inf, as the reference's float multiply does). Row
 * 255 is all +0 and never read (the group is skipped). A compile-time
 * constant: 16 KiB read-only, 64-byte rows, so one vpermps with a memory
 * operand decodes 16 elements with no per-group table arithmetic. */
#define MX_P64(q) ((q) == 0 ? 1.0 : (q) == 1 ? 0x1p64 : (q) == 2 ? 0x1p128 : 0x1p192)
#define MX_SC(s) ((s) == 255 ? 0.0 : (double)(1ull << ((s) & 63)) * MX_P64((s) >> 6) * 0x1p-128)
#define MX_ROW(s) { (float)(0 * MX_SC(s)), (float)(1 * MX_SC(s)), (float)(2 * MX_SC(s)),          \
                    (float)(3 * MX_SC(s)), (float)(4 * MX_SC(s)), (float)(6 * MX_SC(s)),          \
                    (float)(8 * MX_SC(s)), (float)(12 * MX_SC(s)), (float)(0 * MX_SC(s)),         \
                    (float)(-1 * MX_SC(s)), (float)(-2 * MX_SC(s)), (float)(-3 * MX_SC(s)),       \
                    (float)(-4 * MX_SC(s)), (float)(-6 * MX_SC(s)), (float)(-8 * MX_SC(s)),       \
                    (float)(-12 * MX_SC(s)) }
#define MX_ROW4(s) MX_ROW(s), MX_ROW((s) + 1), MX_ROW((s) + 2), MX_ROW((s) + 3)
#define MX_ROW16(s) MX_ROW4(s), MX_ROW4((s) + 4), MX_ROW4((s) + 8), MX_ROW4((s) + 12)
#define MX_ROW64(s) MX_ROW16(s), MX_ROW16((s) + 16), MX_ROW16((s) + 32), MX_ROW16((s) + 48)
static const float MX_LUT[256][16] __attribute__((aligned(64))) = {
    MX_ROW64(0), MX_ROW64(64), MX_ROW64(128), MX_ROW64(192)
};

/* PHYSICAL LANE ORDER. Decoding puts element q of a 16-element half-group in
 * physical lane 2q and element 8+q in lane 2q+1 (q < 8):
 *
 *   physical lane p : 0 1 2 3 4  5 ... 14 15
 *   logical lane    : 0 8 1 9 2 10 ...  7 15      pi(2q) = q, pi(2q+1) = 8+q
 *
 * because that is what one 64-bit shift per lane pair gives: the 8 bytes of a
 * half-group are broadcast to every 64-bit lane (a plain load, no shuffle
 * port) and 64-bit lane q is shifted right by 4q, which leaves nibble q
 * (element q) in bits 0..3 of its low dword and nibble 8+q (element 8+q) in
 * bits 0..3 of its high dword; vpermps reads only bits 0..3 of each index.
 * x is permuted the same way (one vpermps per 16 x, shared by all rows of a
 * block), so every physical lane p is logical lane pi(p) throughout: it
 * receives exactly elements pi(p), 16+pi(p), 32+pi(p), ... in that order with
 * one FMA each, as in the reference. Before the T16 tree the accumulator is
 * permuted back to logical order, so the tree adds the same pairs.
 * Why: the previous decode (scaled table built per group, bytes unpacked and
 * zero-extended) spent ~6 shuffle-port uops per row and group on a core with
 * one shuffle port; this one spends 2 vpermps + 2 shifts (+ 2/8 for x) and
 * is much faster in cache (measured: docs/perf/history.md, "2026-12-01 00:05,
 * machine A: MXFP4 decode rewrite (281fe62)"). */
INLINE __m512i mx_xperm(void) {          /* x lane p <- x[pi(p)] */
    return _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
}
INLINE __m512i mx_unperm(void) {         /* logical lane j <- physical lane pi^-1(j) */
    return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
}

/* Indices of 16 elements (8 bytes at p) in physical lane order (see above). */
INLINE __m512i mx_index(const uint8_t *p, __m512i shifts) {
    int64_t q;
    __builtin_memcpy(&q, p, 8);
    return _mm512_srlv_epi64(_mm512_set1_epi64(q), shifts);
}

/* One group (16 bytes at p -> 32 elements) in NATURAL lane order: elements
 * 0..15 in *w0, 16..31 in *w1. vpermps reads only bits 0..3 of each 32-bit
 * index, so a byte zero-extended to 32 bits selects by its low nibble and the
 * byte shifted right by 4 by its high nibble; interleaving byte i with
 * (byte i >> 4) puts element 2i before element 2i+1. Costs ~4 more shuffle
 * uops than mx_index, but x needs no permutation: matmat uses it, where one
 * decode serves 4 tokens and permuting 4 x vectors would cost more. */
INLINE void mx_decode_nat(const uint8_t *p, __m512 lut, __m512 *w0, __m512 *w1) {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m128i h = _mm_srli_epi16(b, 4);           /* byte i's bits 0..3 = its high nibble */
    __m128i e0 = _mm_unpacklo_epi8(b, h);       /* elements 0..15 (in bits 0..3) */
    __m128i e1 = _mm_unpackhi_epi8(b, h);       /* elements 16..31 */
    *w0 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(e0), lut);
    *w1 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(e1), lut);
}

/* PREFETCH (matvec). A block of 8 rows is 8 * cols/2 CONTIGUOUS bytes that
 * the FMAs read as 8 interleaved streams cols/2 bytes apart. The software
 * prefetch of the next block used to follow the same pattern (one line per
 * row every 4 groups), so the L1 misses reaching L2 came as 8 strided
 * streams, 2-3 of them inside each 4 KiB page, and cold the matvec stayed
 * well below the read bandwidth. With the same scheme and equal bytes,
 * shorter rows are slower, i.e. the more row streams share a page, the
 * worse. No hardware counters in this VM, so the mechanism is inferred: the
 * L2 streamer follows one ascending stream per 4 KiB page and several
 * interleaved streams in a page defeat it.
 * Now the next block is prefetched as two halves, each in address order at
 * half the rate this block consumes bytes (NR * 8 bytes per group per half):
 * two ascending fronts, each over 1.5-1.75 pages at the expert shapes, the
 * same lines and the same number of prefetches as before. Faster cold than
 * the old pattern and than ONE front over the whole next block; more fronts
 * were worse (8 fronts = one per row = the old pattern).
 * Also tried: longer distances (not better), T1 / T2 hints (equal), NTA
 * (slower), prefetching the scale bytes (no gain), 16 rows per block
 * (worse). matmat keeps the per-row prefetch (each block serves T tokens
 * there). (measured: docs/perf/history.md, "2026-12-01 02:45-03:30,
 * machine A: MXFP4 matvec prefetch as two ascending fronts; AVX2 even / odd
 * lanes (kern branch)") */

/* NR rows x NT tokens of MXFP4 (cols % 32 == 0), lanes in the physical order
 * of mx_index when PERM, else natural (mx_decode_nat). Returns the number of
 * skipped (scale 255) groups in the NR rows. */
INLINE int64_t mx_block(float *Y, int64_t ldy, const uint8_t *packed, const uint8_t *scales,
                        const float *X, int64_t ldx, int64_t r, int64_t cols,
                        const int NR, const int NT, const int PERM, const int L2) {
    const int64_t ng = cols / 32;
    const __m512i xperm = mx_xperm();
    const __m512i shifts = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);
    int64_t n255 = 0;
    const uintptr_t pf_next = (uintptr_t)packed + (uintptr_t)((r + NR) * (cols / 2));
    __m512 acc[8][4];
#pragma GCC unroll 8
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[j][t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m512 x0[4], x1[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            x0[t] = _mm512_loadu_ps(X + t * ldx + g * 32);
            x1[t] = _mm512_loadu_ps(X + t * ldx + g * 32 + 16);
            if (PERM) {
                x0[t] = _mm512_permutexvar_ps(xperm, x0[t]);
                x1[t] = _mm512_permutexvar_ps(xperm, x1[t]);
            }
        }
        /* Software prefetch of the packed bytes one block ahead. Addresses
         * are formed as integers: past the matrix end they are not C pointers
         * into the object, and a prefetch never faults. */
        if (PERM) {
            /* matvec: the next block (NR * cols/2 contiguous bytes) as two
             * halves, each in ADDRESS order at NR * 8 bytes per group, so
             * both fronts finish with this block (see "PREFETCH" above):
             * one 64-byte line per half every 64 / (NR * 8) groups. */
            if (((g * NR * 8) & 63) == 0) {
                pf_line(pf_next + (uintptr_t)(g * NR * 8), L2);
                pf_line(pf_next + (uintptr_t)(NR * (cols / 4) + g * NR * 8), L2);
            }
        } else if ((g & 3) == 0) {
            /* matmat: the next NR rows, one line per row every 4 groups */
#pragma GCC unroll 8
            for (int j = 0; j < NR; j++)
                _mm_prefetch((const char *)((uintptr_t)packed +
                                            (uintptr_t)((r + NR + j) * (cols / 2) + g * 16)),
                             _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++) {
            uint8_t s = scales[(r + j) * ng + g];
            if (s == 255) { n255++; continue; }
            const uint8_t *p = packed + (r + j) * (cols / 2) + g * 16;
            __m512 lut = _mm512_load_ps(MX_LUT[s]);
            __m512 w0, w1;
            if (PERM) {
                w0 = _mm512_permutexvar_ps(mx_index(p, shifts), lut);
                w1 = _mm512_permutexvar_ps(mx_index(p + 8, shifts), lut);
            } else {
                mx_decode_nat(p, lut, &w0, &w1);
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                acc[j][t] = _mm512_fmadd_ps(w0, x0[t], acc[j][t]);
                acc[j][t] = _mm512_fmadd_ps(w1, x1[t], acc[j][t]);
            }
        }
    }
    const __m512i unperm = mx_unperm();
#pragma GCC unroll 8
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
            Y[t * ldy + r + j] = t16_reduce(PERM ? _mm512_permutexvar_ps(unperm, acc[j][t]) : acc[j][t]);
    return n255;
}

/* FAST 8-ROW MATVEC (mx_rows8_fast): the same lanes, decode, FMAs and order as
 * mx_block(PERM, NR 8, NT 1), with less bookkeeping per row and group:
 *   - no test for scale 255 (a block with one takes the general path;
 *     mx_block_slow checks the block's 8 x ng scale bytes first);
 *   - each (row, group)'s LUT offset read from a table built once per block
 *     (16 scale bytes -> 16 offsets in 4 ops);
 *   - the 8 rows addressed from 3 bases and one stride (base + stride * 1, 2
 *     or 4), so no row pointer is spilled to the stack and reloaded (the
 *     general block reloads 2 per row and group);
 *   - the next block prefetched as ONE front in address order, 2 lines per
 *     group (8 rows x 16 bytes), where the general block uses two half-block
 *     fronts (see PREFETCH): on Zen 5 one front is faster cold;
 *   - the group loop unrolled by 2 (faster cold, about equal hot; by 4 was
 *     worse).
 * Faster than the general block cold at both expert shapes and thread
 * counts, and somewhat faster hot and in L2.
 * What is left: in L2 the block takes more cycles per row and group than the
 * same vector ops in a synthetic loop (no PMU counters to say why). Cold, the
 * memory pattern alone (decode removed, same loads and prefetches) stays
 * below the read bandwidth: 8 interleaved row streams of 16 bytes read slower
 * than one linear stream on Zen 5, and no prefetch distance or hint tried
 * changed that (next block or the one after, T0 / T1 / T2, 1, 2 or 4 fronts,
 * demand loads ahead).
 * (measured: docs/perf/history.md, "What bounds the MXFP4 matvec on Zen 5") */
enum { MX_FAST_NG = 256 };               /* the offset table's width: cols <= 8192 */

/* Rows [r, r + 8): cols / 32 <= MX_FAST_NG and no scale byte 255 there (with
 * SUB, none below MX_SUB_MIN_SCALE either; xs, fs: SUBNORMAL x below).
 * Called only through the instances below (not inlined into the block
 * loop: it gets all registers to itself). */
INLINE void mx_rows8_fast(float *y, const uint8_t *packed, const uint8_t *scales, const float *x,
                          const float *xs, const float *fs, int64_t r, int64_t cols, const int L2,
                          const int SUB) {
    const int64_t ng = cols / 32, rb = cols / 2;
    uint32_t off[8][MX_FAST_NG] __attribute__((aligned(64)));   /* byte offset of MX_LUT[s] */
    for (int j = 0; j < 8; j++) {
        const uint8_t *s = scales + (r + j) * ng;
        int64_t g = 0;
        for (; g + 16 <= ng; g += 16)
            _mm512_store_si512((void *)&off[j][g],
                               _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + g))), 6));
        for (; g < ng; g++) off[j][g] = (uint32_t)s[g] << 6;
    }
    const __m512i xperm = mx_xperm();
    const __m512i shifts = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);
    const char *lut = (const char *)MX_LUT;
    const uint8_t *q0 = packed + r * rb, *q3 = q0 + 3 * rb, *q6 = q0 + 6 * rb;
    const uintptr_t pf_next = (uintptr_t)packed + (uintptr_t)((r + 8) * rb);   /* never faults */
    int64_t stride = rb;
    __m512 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) acc[j] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int64_t g = 0; g < ng; g++) {
        __m512 x0, x1, f0 = _mm512_setzero_ps(), f1 = f0;
        if (SUB) {
            x0 = _mm512_load_ps(xs + g * 32);
            x1 = _mm512_load_ps(xs + g * 32 + 16);
            f0 = _mm512_load_ps(fs + g * 32);
            f1 = _mm512_load_ps(fs + g * 32 + 16);
        } else {
            x0 = _mm512_permutexvar_ps(xperm, _mm512_loadu_ps(x + g * 32));
            x1 = _mm512_permutexvar_ps(xperm, _mm512_loadu_ps(x + g * 32 + 16));
        }
        pf_line(pf_next + (uintptr_t)(g * 128), L2);
        pf_line(pf_next + (uintptr_t)(g * 128 + 64), L2);
        /* the stride made opaque to the compiler each group, so it addresses
         * rows as base + stride * {1, 2, 4} instead of keeping 8 row pointers */
        __asm__("" : "+r"(stride));
        const uint8_t *row[8] = { q0, q0 + stride, q0 + 2 * stride, q3, q0 + 4 * stride,
                                  q3 + 2 * stride, q6, q6 + stride };
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m512 l = _mm512_load_ps((const float *)(lut + off[j][g]));
            __m512 w0 = _mm512_permutexvar_ps(mx_index(row[j], shifts), l);
            __m512 w1 = _mm512_permutexvar_ps(mx_index(row[j] + 8, shifts), l);
            if (SUB) {
                w0 = _mm512_mul_ps(w0, f0);
                w1 = _mm512_mul_ps(w1, f1);
            }
            acc[j] = _mm512_fmadd_ps(w0, x0, acc[j]);
            acc[j] = _mm512_fmadd_ps(w1, x1, acc[j]);
        }
        q0 += 16;
        q3 += 16;
        q6 += 16;
    }
    const __m512i unperm = mx_unperm();
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) y[r + j] = t16_reduce(_mm512_permutexvar_ps(unperm, acc[j]));
}

/* 8 rows per block: x is loaded and permuted once per 8 rows (faster than 4
 * rows in L2 and hot, equal cold; measured: docs/perf/history.md,
 * "2026-12-01 00:05, machine A: MXFP4 decode rewrite (281fe62)"); tails of 4
 * and 1 rows. A block without skipped groups (the normal case) takes
 * mx_rows8_fast. */
#define MX_ROWS8(name, L2, SUB)                                                                    \
    __attribute__((noinline)) static void name(float *y, const uint8_t *packed,                     \
                                               const uint8_t *scales, const float *x,              \
                                               const float *xs, const float *fs, int64_t r,        \
                                               int64_t cols) {                                     \
        mx_rows8_fast(y, packed, scales, x, xs, fs, r, cols, L2, SUB);                             \
    }
MX_ROWS8(mx_rows8_fast_t0, 0, 0)
MX_ROWS8(mx_rows8_fast_l2, 1, 0)
MX_ROWS8(mx_rows8_sub_t0, 0, 1)
MX_ROWS8(mx_rows8_sub_l2, 1, 1)

/* SUBNORMAL x (mx_matvec). On some cores (Intel's, measured on machine D) an
 * FMA with a subnormal input takes a microcode assist: with 1 x element in
 * 100 subnormal the matvec ran at 3.0 GB/s instead of 21, and a gpt-oss
 * expert's down projection meets such inputs where the clamped SwiGLU's
 * sigmoid underflows. The same sums without them: x' = x * 2^24 in the
 * subnormal lanes (normal, exact) and w' = w * 2^-24 in the same lanes
 * (exact and normal when the group's scale byte s is >= MX_SUB_MIN_SCALE:
 * the smallest nonzero |w| is 2^(s-128), and 2^(s-128-24) >= 2^-126), so
 * w' * x' is exactly w * x and each FMA rounds exactly as the reference's.
 * Blocks with a smaller scale byte (or a skipped group) take mx_block with x
 * as it is: the same bits, at the assists' speed. mx_sub_prepare builds x'
 * (in physical lane order) and the per-lane factor once per call; 0 when x
 * has no subnormal. */
enum { MX_SUB_MIN_SCALE = 26 };

/* The lanes of v that are subnormal (nonzero, |v| < 2^-126). */
INLINE __mmask16 mx_sub_lanes(__m512 v) {
    const __m512 a = _mm512_abs_ps(v);
    return _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-126f), _CMP_LT_OQ) &
           _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_NEQ_OQ);
}

static int mx_has_sub(const float *x, int64_t cols) {
    __mmask16 any = 0;
    for (int64_t c = 0; c < cols; c += 16) any |= mx_sub_lanes(_mm512_loadu_ps(x + c));
    return any != 0;
}

static int mx_sub_prepare(const float *x, int64_t cols, float *xs, float *fs) {
    const __m512 up = _mm512_set1_ps(0x1p24f), down = _mm512_set1_ps(0x1p-24f), one = _mm512_set1_ps(1.0f);
    const __m512i xperm = mx_xperm();
    if (!mx_has_sub(x, cols)) return 0;
    for (int64_t c = 0; c < cols; c += 16) {
        __m512 v = _mm512_permutexvar_ps(xperm, _mm512_loadu_ps(x + c));
        __mmask16 sub = mx_sub_lanes(v);
        _mm512_store_ps(xs + c, _mm512_mask_mul_ps(v, sub, v, up));
        _mm512_store_ps(fs + c, _mm512_mask_mov_ps(one, sub, down));
    }
    return 1;
}

/* Any scale byte in [0, n) that is 255 (a skipped group) or below lo. */
static int mx_block_slow(const uint8_t *s, int64_t n, uint8_t lo_byte) {
    const __m512i ff = _mm512_set1_epi8((char)0xff), lo = _mm512_set1_epi8((char)lo_byte);
    for (int64_t i = 0; i < n; i += 64) {
        __mmask64 k = n - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n - i)) - 1;
        __m512i v = _mm512_maskz_loadu_epi8(k, s + i);
        if (_mm512_mask_cmpeq_epi8_mask(k, v, ff) | _mm512_mask_cmplt_epu8_mask(k, v, lo)) return 1;
    }
    return 0;
}

INLINE int64_t mx_matvec(float *y, const uint8_t *packed, const uint8_t *scales, const float *x,
                         int64_t r0, int64_t r1, int64_t cols, const int L2) {
    int64_t n255 = 0, r = r0;
    const int fast = cols / 32 <= MX_FAST_NG;
    float xs[MX_FAST_NG * 32] __attribute__((aligned(64))), fs[MX_FAST_NG * 32] __attribute__((aligned(64)));
    const int sub = fast && r1 - r0 >= 8 && mx_sub_prepare(x, cols, xs, fs);
    for (; r + 8 <= r1; r += 8) {
        if (fast && !mx_block_slow(scales + r * (cols / 32), 8 * (cols / 32), sub ? MX_SUB_MIN_SCALE : 0)) {
            if (sub) (L2 ? mx_rows8_sub_l2 : mx_rows8_sub_t0)(y, packed, scales, x, xs, fs, r, cols);
            else (L2 ? mx_rows8_fast_l2 : mx_rows8_fast_t0)(y, packed, scales, x, NULL, NULL, r, cols);
        } else {
            n255 += mx_block(y, 0, packed, scales, x, 0, r, cols, 8, 1, 1, L2);
        }
    }
    for (; r + 4 <= r1; r += 4) n255 += mx_block(y, 0, packed, scales, x, 0, r, cols, 4, 1, 1, L2);
    for (; r < r1; r++) n255 += mx_block(y, 0, packed, scales, x, 0, r, cols, 1, 1, 1, L2);
    return n255;
}

static int64_t avx512_matvec_mxfp4(float *y, const uint8_t *packed, const uint8_t *scales,
                                   const float *x, int64_t r0, int64_t r1, int64_t cols) {
    return mx_matvec(y, packed, scales, x, r0, r1, cols, 0);
}

static int64_t avx512l2_matvec_mxfp4(float *y, const uint8_t *packed, const uint8_t *scales,
                                     const float *x, int64_t r0, int64_t r1, int64_t cols) {
    return mx_matvec(y, packed, scales, x, r0, r1, cols, 1);
}

/* One block of NR MXFP4 rows at r (natural lane order), for every token: 4 at
 * a time, then singly. Skipped groups are counted by the caller. */
INLINE void mx_all_tokens(float *Y, int64_t ldy, const uint8_t *packed, const uint8_t *scales,
                          const float *X, int64_t ldx, int64_t T, int64_t r, int64_t cols,
                          const int NR) {
    int64_t t = 0;
    for (; t + 4 <= T; t += 4)
        mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, NR, 4, 0, 0);
    for (; t < T; t++) mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, NR, 1, 0, 0);
}

/* Rows [r0, r1) for the T tokens at X: blocks of 4 rows x 4 tokens (16
 * accumulators), then 2 and 1 rows, each block for all T; faster than 2 rows
 * x 4 tokens (measured: docs/perf/history.md, "Prompt chunks"). */
INLINE void mx_rows_all_tokens(float *Y, int64_t ldy, const uint8_t *packed, const uint8_t *scales,
                               const float *X, int64_t ldx, int64_t T, int64_t r0, int64_t r1,
                               int64_t cols) {
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) mx_all_tokens(Y, ldy, packed, scales, X, ldx, T, r, cols, 4);
    for (; r + 2 <= r1; r += 2) mx_all_tokens(Y, ldy, packed, scales, X, ldx, T, r, cols, 2);
    for (; r < r1; r++) mx_all_tokens(Y, ldy, packed, scales, X, ldx, T, r, cols, 1);
}

/* A token whose x has a subnormal takes the matvec (SUBNORMAL x; the same
 * bits, as matmat == T x matvec); the others go in runs of consecutive tokens
 * through the blocks of 4 tokens. The row range is one pool chunk, so the
 * passes after the first read it from L2. */
INLINE int64_t mx_matmat(float *Y, int64_t ldy, const uint8_t *packed, const uint8_t *scales,
                         const float *X, int64_t ldx, int64_t T, int64_t r0, int64_t r1,
                         int64_t cols, const int L2) {
    if (T == 1) return mx_matvec(Y, packed, scales, X, r0, r1, cols, L2);
    int64_t n255 = 0;   /* once per scale byte, not once per token */
    for (int64_t i = r0 * (cols / 32); i < r1 * (cols / 32); i++) n255 += scales[i] == 255;
    const int subs = cols / 32 <= MX_FAST_NG && r1 - r0 >= 8;
    int64_t t0 = 0;
    for (int64_t t = 0; t <= T; t++) {
        if (t < T && !(subs && mx_has_sub(X + t * ldx, cols))) continue;
        if (t > t0) mx_rows_all_tokens(Y + t0 * ldy, ldy, packed, scales, X + t0 * ldx, ldx, t - t0, r0, r1, cols);
        if (t < T) mx_matvec(Y + t * ldy, packed, scales, X + t * ldx, r0, r1, cols, L2);
        t0 = t + 1;
    }
    return n255;
}

static int64_t avx512_matmat_mxfp4(float *Y, int64_t ldy, const uint8_t *packed,
                                   const uint8_t *scales, const float *X, int64_t ldx,
                                   int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    return mx_matmat(Y, ldy, packed, scales, X, ldx, T, r0, r1, cols, 0);
}

static int64_t avx512l2_matmat_mxfp4(float *Y, int64_t ldy, const uint8_t *packed,
                                     const uint8_t *scales, const float *X, int64_t ldx,
                                     int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    return mx_matmat(Y, ldy, packed, scales, X, ldx, T, r0, r1, cols, 1);
}

/* The AVX-512 table (F + BW + VL + DQ + FMA). */
#define VM(name) avx512_##name
#define VM_W 8
#include "kernels/x86/vmath_body.h"

/* What the two tables share: every kernel that does not prefetch rows. */
#define AVX512_SHARED                                                             \
    .matvec_f32 = avx512_matvec_f32,                                              \
    .expf_n = avx512_expf_n, .sigmoidf_n = avx512_sigmoidf_n,                     \
    .siluf_n = avx512_siluf_n, .situ_glu = avx512_situ_glu,                       \
    .kda_update = avx512_kda_update, .att_scores = avx512_att_scores,             \
    .att_mix = avx512_att_mix

const ms_kern ms_kern_avx512 = {
    .name = "avx512",
    .matvec_bf16 = avx512_matvec_bf16,
    .matmat_bf16 = avx512_matmat_bf16,
    .matvec_mxfp4 = avx512_matvec_mxfp4,
    .matmat_mxfp4 = avx512_matmat_mxfp4,
    AVX512_SHARED,
};

/* The same kernels with the matvec prefetches to L2 (PREFETCH HINT). */
const ms_kern ms_kern_avx512_l2 = {
    .name = "avx512-l2",
    .matvec_bf16 = avx512l2_matvec_bf16,
    .matmat_bf16 = avx512l2_matmat_bf16,
    .matvec_mxfp4 = avx512l2_matvec_mxfp4,
    .matmat_mxfp4 = avx512l2_matmat_mxfp4,
    AVX512_SHARED,
};
