/* kernels/x86/matvec_avx512.c - the matrix products with AVX-512 (same bits as ref).
 *
 * Owns: ms_kern_avx512. Compiled with -mavx512f/bw/vl/dq -mfma (file suffix);
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
 *   Speed: several rows share each load of x (matvec: 4 rows), and matmat
 *   keeps a block of rows hot in cache while it loops over all tokens, each
 *   (token, row) still its own accumulator and tree.
 * MXFP4: 16 packed bytes = 32 elements of one group. Nibbles index (vpermps)
 *   a 16-float table of the signed twice-magnitudes {0,1,2,3,4,6,8,12} times
 *   the group scale 2^(s-128) (products exact, identical to converting the
 *   int8 code and multiplying), low/high interleaved so element order is
 *   kept. Scale 255 skips the group, as in the reference.
 * Invariants: outputs written only in [r0, r1); no allocation, no state.
 */
#include "kernels/kernels.h"

#include <immintrin.h>

extern const ms_kern ms_kern_avx512;

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

/* ---- BF16 and F32: a block of NR rows x NT tokens ------------------------ */

/* Y[t*ldy + r + j] = dot(W[r + j], X[t*ldx]) for j < NR, t < NT. NR, NT are
 * compile-time constants at every call, so the loops unroll and the
 * accumulators live in registers. F32 weights when Wf != NULL. */
INLINE void block_dot(float *Y, int64_t ldy, const uint16_t *Wb, const float *Wf,
                      const float *X, int64_t ldx, int64_t r, int64_t cols,
                      const int NR, const int NT) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[j][t] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        __m512 w[4];
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++)
            w[j] = Wf ? _mm512_loadu_ps(Wf + (r + j) * cols + c)
                      : bf16x16(_mm256_loadu_si256((const __m256i *)(Wb + (r + j) * cols + c)));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m512 x = _mm512_loadu_ps(X + t * ldx + c);
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++) acc[j][t] = _mm512_fmadd_ps(w[j], x, acc[j][t]);
        }
    }
    if (c < cols) {
        /* ragged tail: lane l gets element c + l, as in the reference */
        __mmask16 k = (__mmask16)((1u << (cols - c)) - 1u);
        __m512 w[4];
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++)
            w[j] = Wf ? _mm512_maskz_loadu_ps(k, Wf + (r + j) * cols + c)
                      : bf16x16(_mm256_maskz_loadu_epi16(k, Wb + (r + j) * cols + c));
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m512 x = _mm512_maskz_loadu_ps(k, X + t * ldx + c);
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++)
                acc[j][t] = _mm512_mask3_fmadd_ps(w[j], x, acc[j][t], k);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) Y[t * ldy + r + j] = t16_reduce(acc[j][t]);
}

/* Rows [r0, r1) x tokens [0, T): blocks of 4 rows; for each block every token
 * (4 at a time) while the block's weights are hot in cache. */
INLINE void dense_rows(float *Y, int64_t ldy, const uint16_t *Wb, const float *Wf,
                       const float *X, int64_t ldx, int64_t T,
                       int64_t r0, int64_t r1, int64_t cols) {
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4)
            block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, 4, 4);
        for (; t < T; t++)
            block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, 4, 1);
    }
    for (; r < r1; r++) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4)
            block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, 1, 4);
        for (; t < T; t++)
            block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, 1, 1);
    }
}

static void avx512_matvec_bf16(float *y, const uint16_t *W, const float *x,
                               int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(y, 0, W, NULL, x, 0, 1, r0, r1, cols);
}

static void avx512_matmat_bf16(float *Y, int64_t ldy, const uint16_t *W, const float *X,
                               int64_t ldx, int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(Y, ldy, W, NULL, X, ldx, T, r0, r1, cols);
}

static void avx512_matvec_f32(float *y, const float *W, const float *x,
                              int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(y, 0, NULL, W, x, 0, 1, r0, r1, cols);
}

/* ---- MXFP4 ----------------------------------------------------------------- */

/* One group (16 bytes -> 32 elements) decoded exactly: elements 0..15 in *w0,
 * 16..31 in *w1. The 16-entry float table (signed twice-magnitude * scale,
 * one exact multiply per group) is indexed with vpermps, which reads only
 * bits 0..3 of each 32-bit index: so a byte zero-extended to 32 bits selects
 * by its LOW nibble, and the byte shifted right by 4 by its HIGH nibble, with
 * no masking. Interleaving byte i with (byte i >> 4) puts element 2i before
 * element 2i+1. Same values as vpshufb -> int8 -> cvt -> mul (each table
 * entry IS that product), and faster: 12.5 vs 9.7 Gelem/s per core on an
 * L2-resident 256 x 3584 matvec ("in-cache" in bench/bench_kernels.c). */
INLINE void mx_decode(const uint8_t *p, __m512 scale, __m512 *w0, __m512 *w1) {
    const __m512 code2 = _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    __m512 lut = _mm512_mul_ps(code2, scale);
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m128i h = _mm_srli_epi16(b, 4);           /* byte i's bits 0..3 = its high nibble */
    __m128i e0 = _mm_unpacklo_epi8(b, h);       /* elements 0..15 (in bits 0..3) */
    __m128i e1 = _mm_unpackhi_epi8(b, h);       /* elements 16..31 */
    *w0 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(e0), lut);
    *w1 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(e1), lut);
}

/* NR rows x NT tokens of MXFP4 (cols % 32 == 0). Returns the number of
 * skipped (scale 255) groups in the NR rows. */
INLINE int64_t mx_block(float *Y, int64_t ldy, const uint8_t *packed, const uint8_t *scales,
                        const float *X, int64_t ldx, int64_t r, int64_t cols,
                        const int NR, const int NT) {
    const int64_t ng = cols / 32;
    int64_t n255 = 0;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[j][t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m512 x0[4], x1[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            x0[t] = _mm512_loadu_ps(X + t * ldx + g * 32);
            x1[t] = _mm512_loadu_ps(X + t * ldx + g * 32 + 16);
        }
        if ((g & 3) == 0) {
            /* Software prefetch of the next row block, one 64-byte line per
             * row every 4 groups: rows are short (cols/2 bytes), and the
             * hardware prefetcher alone left a cold 3072 x 3584 matvec at
             * ~2.3 GB/s against ~3.2 with this (bench/bench_kernels.c). The
             * address is formed as an integer: past the matrix end it is not a
             * C pointer into the object, and a prefetch never faults. */
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++)
                _mm_prefetch((const char *)((uintptr_t)packed +
                                            (uintptr_t)((r + NR + j) * (cols / 2) + g * 16)),
                             _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) {
            uint8_t s = scales[(r + j) * ng + g];
            if (s == 255) { n255++; continue; }
            __m512 w0, w1;
            mx_decode(packed + (r + j) * (cols / 2) + g * 16, _mm512_set1_ps(ms_mxfp4_scale[s]),
                      &w0, &w1);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                acc[j][t] = _mm512_fmadd_ps(w0, x0[t], acc[j][t]);
                acc[j][t] = _mm512_fmadd_ps(w1, x1[t], acc[j][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) Y[t * ldy + r + j] = t16_reduce(acc[j][t]);
    return n255;
}

static int64_t avx512_matvec_mxfp4(float *y, const uint8_t *packed, const uint8_t *scales,
                                   const float *x, int64_t r0, int64_t r1, int64_t cols) {
    int64_t n255 = 0, r = r0;
    for (; r + 4 <= r1; r += 4) n255 += mx_block(y, 0, packed, scales, x, 0, r, cols, 4, 1);
    for (; r < r1; r++) n255 += mx_block(y, 0, packed, scales, x, 0, r, cols, 1, 1);
    return n255;
}

static int64_t avx512_matmat_mxfp4(float *Y, int64_t ldy, const uint8_t *packed,
                                   const uint8_t *scales, const float *X, int64_t ldx,
                                   int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    if (T == 1) return avx512_matvec_mxfp4(Y, packed, scales, X, r0, r1, cols);
    int64_t n255 = 0;   /* once per scale byte, not once per token */
    for (int64_t i = r0 * (cols / 32); i < r1 * (cols / 32); i++) n255 += scales[i] == 255;
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4)
            mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, 2, 4);
        for (; t < T; t++)
            mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, 2, 1);
    }
    for (; r < r1; r++) {
        int64_t t = 0;
        for (; t + 4 <= T; t += 4)
            mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, 1, 4);
        for (; t < T; t++)
            mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, 1, 1);
    }
    return n255;
}

/* The AVX-512 table (F + BW + VL + DQ + FMA). */
const ms_kern ms_kern_avx512 = {
    .name = "avx512",
    .matvec_bf16 = avx512_matvec_bf16,
    .matmat_bf16 = avx512_matmat_bf16,
    .matvec_f32 = avx512_matvec_f32,
    .matvec_mxfp4 = avx512_matvec_mxfp4,
    .matmat_mxfp4 = avx512_matmat_mxfp4,
};
