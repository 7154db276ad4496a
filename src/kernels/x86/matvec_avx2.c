/* kernels/x86/matvec_avx2.c - the matrix products with AVX2 + FMA (same bits as ref).
 *
 * Owns: ms_kern_avx2. Compiled with -mavx2 -mfma -mf16c (file suffix); run
 *   only after ms_kernels_select has seen those features.
 * Idea: the 16 lanes of the T16 tree (kernels.h) are two __m256 accumulators,
 *   lo = lanes 0..7 and hi = lanes 8..15; every load starts at a multiple of
 *   16 elements, so element c lands in lane c % 16 as in the reference. One
 *   _mm256_fmadd_ps is the same single-rounding fmaf, lane by lane, in the
 *   same order; the final tree is the same sequence of float adds:
 *
 *     lo + hi = s8 -> lo128 + hi128 = s4 -> s4 + movehl(s4) = s2 -> s2[0] + s2[1]
 *
 *   Ragged tails (cols % 16) are copied to a 16-element stack block padded
 *   with weight -0.0 and x +0.0: fma(-0, +0, a) == a exactly for every a
 *   (including a = -0, which a +0 product would turn into +0), so the padded
 *   lanes are left bit-for-bit untouched.
 *   Speed: matvec runs 4 rows per pass sharing each load of x; matmat keeps a
 *   block of 2 rows hot in cache while it loops over all tokens 2 at a time.
 * MXFP4: 16 packed bytes = 32 elements of one group. Nibbles index a vpshufb
 *   table of signed int8 twice-magnitudes {0,1,2,3,4,6,8,12}, widened to
 *   int32, converted to float and multiplied by the group scale 2^(s-128)
 *   (all exact). matmat interleaves low/high codes so element order is kept
 *   (mx_decode); matvec skips that interleave and keeps even and odd elements
 *   in separate accumulators, x split the same way once per call (see "even /
 *   odd lanes" below). Scale 255 skips the group, as in the reference.
 * Invariants: outputs written only in [r0, r1); no allocation, no state.
 */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

extern const ms_kern ms_kern_avx2;

#define INLINE static inline __attribute__((always_inline))

/* The T16 tree on lanes lo = acc[0..7], hi = acc[8..15]. */
INLINE float t16_reduce(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* 8 weights at p as F32 (BF16 when Wb-mode: bits << 16, exact). */
INLINE __m256 load_w8(const uint16_t *pb, const float *pf) {
    if (pf) return _mm256_loadu_ps(pf);
    __m128i v = _mm_loadu_si128((const __m128i *)pb);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

/* ---- BF16 and F32: a block of NR rows x NT tokens ------------------------ */

/* One step of 16 elements: weights of row j at wb[j] / wf[j] (one of the two
 * is NULL), x of token t at x[t] (row stride sx between tokens). */
INLINE void step16(__m256 acc[4][4][2], const uint16_t *const *wb, const float *const *wf,
                   const float *x, int64_t sx, const int NR, const int NT) {
    __m256 w[4][2];
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++) {
        w[j][0] = load_w8(wb ? wb[j] : NULL, wf ? wf[j] : NULL);
        w[j][1] = load_w8(wb ? wb[j] + 8 : NULL, wf ? wf[j] + 8 : NULL);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        __m256 x0 = _mm256_loadu_ps(x + t * sx);
        __m256 x1 = _mm256_loadu_ps(x + t * sx + 8);
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) {
            acc[j][t][0] = _mm256_fmadd_ps(w[j][0], x0, acc[j][t][0]);
            acc[j][t][1] = _mm256_fmadd_ps(w[j][1], x1, acc[j][t][1]);
        }
    }
}

/* Y[t*ldy + r + j] = dot(W[r + j], X[t*ldx]) for j < NR, t < NT (compile-time
 * constants at every call). F32 weights when Wf != NULL, else BF16 Wb. */
INLINE void block_dot(float *Y, int64_t ldy, const uint16_t *Wb, const float *Wf,
                      const float *X, int64_t ldx, int64_t r, int64_t cols,
                      const int NR, const int NT) {
    __m256 acc[4][4][2];
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[j][t][0] = acc[j][t][1] = _mm256_setzero_ps();
    const uint16_t *wb[4];
    const float *wf[4];
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++) {
        wb[j] = Wb ? Wb + (r + j) * cols : NULL;
        wf[j] = Wf ? Wf + (r + j) * cols : NULL;
    }
    int64_t c = 0;
    /* BF16 matvec: the next block of rows prefetched as one front in address
     * order, NR * 32 bytes per step, as matvec_avx512.c's block_dot (faster
     * cold there; measured: docs/perf/history.md, "BF16 matvec: prefetch the
     * next block of rows (66db991)") */
    const uintptr_t pf_next = (uintptr_t)Wb + (uintptr_t)((r + NR) * cols * 2);
    for (; c + 16 <= cols; c += 16) {
        if (NT == 1 && !Wf) {
#pragma GCC unroll 4
            for (int k = 0; k < NR / 2; k++)
                _mm_prefetch((const char *)(pf_next + (uintptr_t)(c * 2 * NR + k * 64)), _MM_HINT_T0);
        }
        const uint16_t *pb[4];
        const float *pf[4];
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) {
            pb[j] = Wb ? wb[j] + c : NULL;
            pf[j] = Wf ? wf[j] + c : NULL;
        }
        step16(acc, Wb ? pb : NULL, Wf ? pf : NULL, X + c, ldx, NR, NT);
    }
    if (c < cols) {
        /* ragged tail: padded copies, weight -0.0 and x +0.0 (see the header) */
        int64_t n = cols - c;
        uint16_t tb[4][16];
        float tf[4][16], tx[4][16];
        const uint16_t *pb[4];
        const float *pf[4];
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) {
            for (int l = 0; l < 16; l++) { tb[j][l] = 0x8000; tf[j][l] = -0.0f; }
            if (Wb) memcpy(tb[j], wb[j] + c, (size_t)n * sizeof(uint16_t));
            if (Wf) memcpy(tf[j], wf[j] + c, (size_t)n * sizeof(float));
            pb[j] = tb[j];
            pf[j] = tf[j];
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            for (int l = 0; l < 16; l++) tx[t][l] = 0.0f;
            memcpy(tx[t], X + t * ldx + c, (size_t)n * sizeof(float));
        }
        step16(acc, Wb ? pb : NULL, Wf ? pf : NULL, &tx[0][0], 16, NR, NT);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) Y[t * ldy + r + j] = t16_reduce(acc[j][t][0], acc[j][t][1]);
}

/* Rows [r0, r1) x tokens [0, T). matvec (T == 1): 4 rows per pass. matmat:
 * 2 rows x 2 tokens per block (8 accumulators fit the 16 ymm registers), all
 * tokens for one row block while its weights are hot in cache. */
INLINE void dense_rows(float *Y, int64_t ldy, const uint16_t *Wb, const float *Wf,
                       const float *X, int64_t ldx, int64_t T,
                       int64_t r0, int64_t r1, int64_t cols) {
    int64_t r = r0;
    if (T == 1) {
        for (; r + 4 <= r1; r += 4) block_dot(Y, ldy, Wb, Wf, X, ldx, r, cols, 4, 1);
        for (; r < r1; r++) block_dot(Y, ldy, Wb, Wf, X, ldx, r, cols, 1, 1);
        return;
    }
    for (; r + 2 <= r1; r += 2) {
        int64_t t = 0;
        for (; t + 2 <= T; t += 2)
            block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, 2, 2);
        for (; t < T; t++)
            block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, 2, 1);
    }
    for (; r < r1; r++) {
        int64_t t = 0;
        for (; t + 2 <= T; t += 2)
            block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, 1, 2);
        for (; t < T; t++)
            block_dot(Y + t * ldy, ldy, Wb, Wf, X + t * ldx, ldx, r, cols, 1, 1);
    }
}

static void avx2_matvec_bf16(float *y, const uint16_t *W, const float *x,
                             int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(y, 0, W, NULL, x, 0, 1, r0, r1, cols);
}

static void avx2_matmat_bf16(float *Y, int64_t ldy, const uint16_t *W, const float *X,
                             int64_t ldx, int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(Y, ldy, W, NULL, X, ldx, T, r0, r1, cols);
}

static void avx2_matvec_f32(float *y, const float *W, const float *x,
                            int64_t r0, int64_t r1, int64_t cols) {
    dense_rows(y, 0, NULL, W, x, 0, 1, r0, r1, cols);
}

/* ---- MXFP4 ----------------------------------------------------------------- */

/* One group (16 bytes -> 32 elements) decoded exactly and scaled: w[q] holds
 * elements 8q .. 8q+7. */
INLINE void mx_decode(const uint8_t *p, __m256 scale, __m256 w[4]) {
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(b, m4));
    __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), m4));
    /* byte i: low nibble = element 2i, high nibble = element 2i+1 */
    __m128i e0 = _mm_unpacklo_epi8(lo, hi);
    __m128i e1 = _mm_unpackhi_epi8(lo, hi);
    w[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e0)), scale);
    w[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e0, 8))), scale);
    w[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e1)), scale);
    w[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e1, 8))), scale);
}

/* NR rows x NT tokens of MXFP4 (cols % 32 == 0). Returns the number of
 * skipped (scale 255) groups in the NR rows. */
INLINE int64_t mx_block(float *Y, int64_t ldy, const uint8_t *packed, const uint8_t *scales,
                        const float *X, int64_t ldx, int64_t r, int64_t cols,
                        const int NR, const int NT) {
    const int64_t ng = cols / 32;
    int64_t n255 = 0;
    __m256 acc[4][4][2];
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[j][t][0] = acc[j][t][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        if ((g & 3) == 0) {
            /* Software prefetch of the next row block, one 64-byte line per
             * row every 4 groups: rows are short (cols/2 bytes), and the
             * hardware prefetcher alone left a cold matvec clearly slower. The
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
            __m256 w[4];
            mx_decode(packed + (r + j) * (cols / 2) + g * 16, _mm256_set1_ps(ms_mxfp4_scale[s]), w);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const float *x = X + t * ldx + g * 32;
                /* elements 0..15 then 16..31: lanes 0..7 / 8..15 twice, in order */
                acc[j][t][0] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(x), acc[j][t][0]);
                acc[j][t][1] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x + 8), acc[j][t][1]);
                acc[j][t][0] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x + 16), acc[j][t][0]);
                acc[j][t][1] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x + 24), acc[j][t][1]);
            }
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) Y[t * ldy + r + j] = t16_reduce(acc[j][t][0], acc[j][t][1]);
    return n255;
}

/* ---- MXFP4 matvec: even / odd lanes ----------------------------------------
 *
 * mx_decode spends 4 cross-lane widenings (vpmovsxbd, port 5 only) + 2 byte
 * shifts + 2 unpacks of the low and high nibble codes per row and group; with
 * the conversions, scale multiplies and FMAs (ports 0/1) that is ~27 vector
 * uops per 32 elements on 3 ports, the ceiling of matvec hot. The
 * unpacks only restore the element order. Without them the low-nibble codes
 * are elements 0, 2, .., 30 and the high-nibble codes 1, 3, .., 31, so:
 *
 *   accE (8 lanes) = logical T16 lanes 0, 2, .., 14: gets elements 2k, then 16+2k
 *   accO (8 lanes) = logical T16 lanes 1, 3, .., 15: gets elements 2k+1, then 17+2k
 *
 * Each logical lane still receives exactly its reference elements in the
 * reference order, one FMA each. x is split the same way once per call into
 * a stack copy (xsplit: per group E(0..15), O(0..15), E(16..31), O(16..31)).
 * The tree adds the same pairs as kernels.h, read from the split lanes:
 *   s8[even j] = accE[j/2] + accE[j/2+4]        (low 128 + high 128 of accE)
 *   s8[odd j]  = accO[(j-1)/2] + accO[(j-1)/2+4] (same for accO)
 *   s4[0] = s8[0]+s8[4], s4[2] = s8[2]+s8[6]     (from the accE half)
 *   s4[1] = s8[1]+s8[5], s4[3] = s8[3]+s8[7]     (from the accO half)
 *   s2[0] = s4[0]+s4[2], s2[1] = s4[1]+s4[3], result = s2[0]+s2[1].
 * ~23 uops per row and group. Prefetch: the next block as two ascending
 * fronts, as in matvec_avx512.c ("PREFETCH"). Used when cols <= MX_SPLIT_MAX (the x copy
 * lives on the stack; both expert shapes fit); larger cols take mx_block. */
enum { MX_SPLIT_MAX = 4096 };

/* x [cols] -> xs in the split order above (cols % 32 == 0) */
INLINE void mx_split_x(float *xs, const float *x, int64_t cols) {
    for (int64_t c = 0; c < cols; c += 16) {
        __m256 a = _mm256_loadu_ps(x + c), b = _mm256_loadu_ps(x + c + 8);
        /* shuffle_ps picks (a0 a2 b0 b2 | a4 a6 b4 b6); 64-bit order 0 2 1 3 fixes it */
        __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
        __m256 o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
        /* c = 32g: E(0..15) at 32g, O at 32g + 8; c = 32g + 16: E at 32g + 16, O at 32g + 24 */
        _mm256_store_ps(xs + c, e);
        _mm256_store_ps(xs + c + 8, o);
    }
}

/* SUBNORMAL x, as in matvec_avx512.c: an FMA with a subnormal input is slow
 * on Intel cores (a microcode assist), so the lanes where x is subnormal run
 * as (code * (scale * 2^-24)) * (x * 2^24): the same exact product, both
 * factors normal while the scale byte is >= MX_SUB_MIN_SCALE; blocks with a
 * smaller byte take the plain split x. mx_split_sub makes x' and the lane
 * factors in the split order; 0 (and nothing written) when x has no
 * subnormal. */
enum { MX_SUB_MIN_SCALE = 26 };

/* The lanes of v that are subnormal (nonzero, |v| < 2^-126), all bits set. */
INLINE __m256 mx_sub_lanes(__m256 v) {
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    return _mm256_and_ps(_mm256_cmp_ps(a, _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ),
                         _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_NEQ_OQ));
}

static int mx_has_sub(const float *x, int64_t cols) {
    __m256 any = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; c += 8) any = _mm256_or_ps(any, mx_sub_lanes(_mm256_loadu_ps(x + c)));
    return _mm256_movemask_ps(any) != 0;
}

static int mx_split_sub(float *xs2, float *fs, const float *xs, const float *x, int64_t cols) {
    if (!mx_has_sub(x, cols)) return 0;
    const __m256 up = _mm256_set1_ps(0x1p24f), down = _mm256_set1_ps(0x1p-24f), one = _mm256_set1_ps(1.0f);
    for (int64_t c = 0; c < cols; c += 8) {
        const __m256 v = _mm256_load_ps(xs + c), m = mx_sub_lanes(v);
        _mm256_store_ps(xs2 + c, _mm256_blendv_ps(v, _mm256_mul_ps(v, up), m));
        _mm256_store_ps(fs + c, _mm256_blendv_ps(one, down, m));
    }
    return 1;
}

/* Any of the n scale bytes below MX_SUB_MIN_SCALE (255, skipped, is not). */
static int mx_any_small(const uint8_t *s, int64_t n) {
    const __m256i lim = _mm256_set1_epi8(MX_SUB_MIN_SCALE - 1);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(s + i));
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(v, lim), v))) return 1;
    }
    for (; i < n; i++)
        if (s[i] < MX_SUB_MIN_SCALE) return 1;
    return 0;
}

/* NR rows of the matvec with x split (xs); returns the skipped groups. With
 * SUB, xs is x' and fs the lane factors (SUBNORMAL x). */
INLINE int64_t mx_block_split(float *y, const uint8_t *packed, const uint8_t *scales,
                              const float *xs, const float *fs, int64_t r, int64_t cols, const int NR,
                              const int SUB) {
    const int64_t ng = cols / 32;
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const uintptr_t pf_next = (uintptr_t)packed + (uintptr_t)((r + NR) * (cols / 2));
    int64_t n255 = 0;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        /* the next block as two halves in address order, NR * 8 bytes per
         * group each (integer addresses: past the matrix end they are not C
         * pointers, and a prefetch never faults) */
        if (((g * NR * 8) & 63) == 0) {
            _mm_prefetch((const char *)(pf_next + (uintptr_t)(g * NR * 8)), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf_next + (uintptr_t)(NR * (cols / 4) + g * NR * 8)), _MM_HINT_T0);
        }
        const float *xg = xs + g * 32;
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) {
            uint8_t s = scales[(r + j) * ng + g];
            if (s == 255) { n255++; continue; }
            const __m256 scale = _mm256_set1_ps(ms_mxfp4_scale[s]);
            __m256 sc0 = scale, sc1 = scale, sc2 = scale, sc3 = scale;
            if (SUB) {
                sc0 = _mm256_mul_ps(scale, _mm256_load_ps(fs + g * 32));
                sc1 = _mm256_mul_ps(scale, _mm256_load_ps(fs + g * 32 + 8));
                sc2 = _mm256_mul_ps(scale, _mm256_load_ps(fs + g * 32 + 16));
                sc3 = _mm256_mul_ps(scale, _mm256_load_ps(fs + g * 32 + 24));
            }
            __m128i b = _mm_loadu_si128((const __m128i *)(packed + (r + j) * (cols / 2) + g * 16));
            __m128i ev = _mm_shuffle_epi8(lut, _mm_and_si128(b, m4));                     /* 0, 2, .., 30 */
            __m128i od = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), m4));  /* 1, 3, .., 31 */
            __m256 w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(ev)), sc0);
            __m256 w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(od)), sc1);
            __m256 w2 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(ev, 8))), sc2);
            __m256 w3 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(od, 8))), sc3);
            acc[j][0] = _mm256_fmadd_ps(w0, _mm256_load_ps(xg), acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(w1, _mm256_load_ps(xg + 8), acc[j][1]);
            acc[j][0] = _mm256_fmadd_ps(w2, _mm256_load_ps(xg + 16), acc[j][0]);
            acc[j][1] = _mm256_fmadd_ps(w3, _mm256_load_ps(xg + 24), acc[j][1]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++) {
        __m256 ae = acc[j][0], ao = acc[j][1];
        __m128 s8e = _mm_add_ps(_mm256_castps256_ps128(ae), _mm256_extractf128_ps(ae, 1));
        __m128 s8o = _mm_add_ps(_mm256_castps256_ps128(ao), _mm256_extractf128_ps(ao, 1));
        __m128 s4e = _mm_add_ps(s8e, _mm_movehl_ps(s8e, s8e));     /* s4[0], s4[2] */
        __m128 s4o = _mm_add_ps(s8o, _mm_movehl_ps(s8o, s8o));     /* s4[1], s4[3] */
        __m128 s20 = _mm_add_ss(s4e, _mm_shuffle_ps(s4e, s4e, 1)); /* s2[0] */
        __m128 s21 = _mm_add_ss(s4o, _mm_shuffle_ps(s4o, s4o, 1)); /* s2[1] */
        y[r + j] = _mm_cvtss_f32(_mm_add_ss(s20, s21));
    }
    return n255;
}

static int64_t avx2_matvec_mxfp4(float *y, const uint8_t *packed, const uint8_t *scales,
                                 const float *x, int64_t r0, int64_t r1, int64_t cols) {
    int64_t n255 = 0, r = r0;
    if (cols <= MX_SPLIT_MAX) {
        float xs[MX_SPLIT_MAX] __attribute__((aligned(32))), xs2[MX_SPLIT_MAX] __attribute__((aligned(32))),
              fs[MX_SPLIT_MAX] __attribute__((aligned(32)));
        mx_split_x(xs, x, cols);
        const int sub = mx_split_sub(xs2, fs, xs, x, cols);
        for (; r + 4 <= r1; r += 4) {
            if (sub && !mx_any_small(scales + r * (cols / 32), 4 * (cols / 32)))
                n255 += mx_block_split(y, packed, scales, xs2, fs, r, cols, 4, 1);
            else
                n255 += mx_block_split(y, packed, scales, xs, NULL, r, cols, 4, 0);
        }
        for (; r < r1; r++) n255 += mx_block_split(y, packed, scales, xs, NULL, r, cols, 1, 0);
        return n255;
    }
    for (; r + 4 <= r1; r += 4) n255 += mx_block(y, 0, packed, scales, x, 0, r, cols, 4, 1);
    for (; r < r1; r++) n255 += mx_block(y, 0, packed, scales, x, 0, r, cols, 1, 1);
    return n255;
}

/* Rows [r0, r1) for the T tokens at X: blocks of 2 rows x 2 tokens. */
static void mx_rows_tokens(float *Y, int64_t ldy, const uint8_t *packed, const uint8_t *scales,
                           const float *X, int64_t ldx, int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2) {
        int64_t t = 0;
        for (; t + 2 <= T; t += 2)
            mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, 2, 2);
        for (; t < T; t++)
            mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, 2, 1);
    }
    for (; r < r1; r++) {
        int64_t t = 0;
        for (; t + 2 <= T; t += 2)
            mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, 1, 2);
        for (; t < T; t++)
            mx_block(Y + t * ldy, ldy, packed, scales, X + t * ldx, ldx, r, cols, 1, 1);
    }
}

static int64_t avx2_matmat_mxfp4(float *Y, int64_t ldy, const uint8_t *packed,
                                 const uint8_t *scales, const float *X, int64_t ldx,
                                 int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    if (T == 1) return avx2_matvec_mxfp4(Y, packed, scales, X, r0, r1, cols);
    int64_t n255 = 0;   /* once per scale byte, not once per token */
    for (int64_t i = r0 * (cols / 32); i < r1 * (cols / 32); i++) n255 += scales[i] == 255;
    /* a token whose x has a subnormal takes the matvec (SUBNORMAL x; the same
     * bits, as matmat == T x matvec); the others go in runs of consecutive
     * tokens through the blocks */
    const int subs = cols <= MX_SPLIT_MAX;
    int64_t t0 = 0;
    for (int64_t t = 0; t <= T; t++) {
        if (t < T && !(subs && mx_has_sub(X + t * ldx, cols))) continue;
        if (t > t0) mx_rows_tokens(Y + t0 * ldy, ldy, packed, scales, X + t0 * ldx, ldx, t - t0, r0, r1, cols);
        if (t < T) avx2_matvec_mxfp4(Y + t * ldy, packed, scales, X + t * ldx, r0, r1, cols);
        t0 = t + 1;
    }
    return n255;
}

/* The AVX2 table (AVX2 + FMA + F16C). */
#define VM(name) avx2_##name
#define VM_W 4
#include "kernels/x86/vmath_body.h"

const ms_kern ms_kern_avx2 = {
    .name = "avx2",
    .matvec_bf16 = avx2_matvec_bf16,
    .matmat_bf16 = avx2_matmat_bf16,
    .matvec_f32 = avx2_matvec_f32,
    .matvec_mxfp4 = avx2_matvec_mxfp4,
    .matmat_mxfp4 = avx2_matmat_mxfp4,
    .expf_n = avx2_expf_n,
    .sigmoidf_n = avx2_sigmoidf_n,
    .siluf_n = avx2_siluf_n,
    .situ_glu = avx2_situ_glu,
    .kda_update = avx2_kda_update,
    .att_scores = avx2_att_scores,
    .att_mix = avx2_att_mix,
};
