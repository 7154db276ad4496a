/* kernels/ref/matvec.c - the reference matrix products: the T16 tree in plain C.
 *
 * Owns: ms_kern_ref, the specification every SIMD table must match bit for bit.
 * Idea: one function computes the T16 dot product of kernels.h literally:
 *   16 lanes, element i goes to lane i % 16 through fmaf (a correctly rounded
 *   fused multiply-add, so it equals a hardware FMA), then the fixed tree
 *
 *     acc[0..15] --(j, j+8)--> s8[0..7] --(j, j+4)--> s4[0..3]
 *                --(j, j+2)--> s2[0..1] --> s2[0] + s2[1]
 *
 *   Weights are decoded to f32 exactly before the FMA (BF16: bits << 16;
 *   MXFP4: signed twice-magnitude code * 2^(s-128)).
 * MXFP4 scale byte 255: the group is SKIPPED (no FMA at all) and counted.
 *   This is "the group contributes zero" in its strongest form: the result
 *   equals the dot product with that group removed even when x holds inf or
 *   NaN there (multiplying by 0.0f would give NaN) or an accumulator is -0.
 *   Every ISA skips in the same way.
 * Invariants: y is written only in [r0, r1); nothing is allocated.
 * Does not: aim for speed (kernels/x86/ does); NaN payloads are not part of
 *   the bit contract (every NaN the kernels create is the default NaN; NaN
 *   INPUTS give NaN, but which payload survives may differ between ISAs).
 *   Equal bits assume the default FP environment (round to nearest even, no
 *   flush-to-zero / denormals-are-zero), which the engine never changes.
 */
#include "kernels/kernels.h"

#include <math.h>

/* signed twice-magnitude of each MXFP4 code: bit 3 = sign, low 3 bits index
 * {0, 0.5, 1, 1.5, 2, 3, 4, 6}; code 8 ("-0") decodes to +0 */
static const int8_t mxfp4_code2[16] = { 0, 1, 2, 3, 4, 6, 8, 12,
                                        0, -1, -2, -3, -4, -6, -8, -12 };

static float t16_reduce(const float acc[16]) {
    float s8[8], s4[4], s2[2];
    for (int j = 0; j < 8; j++) s8[j] = acc[j] + acc[j + 8];
    for (int j = 0; j < 4; j++) s4[j] = s8[j] + s8[j + 4];
    for (int j = 0; j < 2; j++) s2[j] = s4[j] + s4[j + 2];
    return s2[0] + s2[1];
}

static float dot_bf16(const uint16_t *w, const float *x, int64_t n) {
    float acc[16] = { 0 };
    for (int64_t i = 0; i < n; i++)
        acc[i & 15] = fmaf(ms_bf16_to_f32(w[i]), x[i], acc[i & 15]);
    return t16_reduce(acc);
}

static float dot_f32(const float *w, const float *x, int64_t n) {
    float acc[16] = { 0 };
    for (int64_t i = 0; i < n; i++)
        acc[i & 15] = fmaf(w[i], x[i], acc[i & 15]);
    return t16_reduce(acc);
}

/* One MXFP4 row: packed [n/2], scales [n/32]; adds the skipped groups to *n255. */
static float dot_mxfp4(const uint8_t *packed, const uint8_t *scales, const float *x,
                       int64_t n, int64_t *n255) {
    float acc[16] = { 0 };
    for (int64_t g = 0; g < n / 32; g++) {
        uint8_t s = scales[g];
        if (s == 255) { (*n255)++; continue; }
        float scale = ms_mxfp4_scale[s];
        for (int64_t k = 0; k < 16; k++) {
            uint8_t b = packed[g * 16 + k];
            int64_t i = g * 32 + 2 * k;     /* low nibble = even element */
            float w0 = (float)mxfp4_code2[b & 15] * scale;
            float w1 = (float)mxfp4_code2[b >> 4] * scale;
            acc[i & 15] = fmaf(w0, x[i], acc[i & 15]);
            acc[(i + 1) & 15] = fmaf(w1, x[i + 1], acc[(i + 1) & 15]);
        }
    }
    return t16_reduce(acc);
}

static void ref_matvec_bf16(float *y, const uint16_t *W, const float *x,
                            int64_t r0, int64_t r1, int64_t cols) {
    for (int64_t r = r0; r < r1; r++) y[r] = dot_bf16(W + r * cols, x, cols);
}

static void ref_matmat_bf16(float *Y, int64_t ldy, const uint16_t *W, const float *X,
                            int64_t ldx, int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    for (int64_t t = 0; t < T; t++)
        ref_matvec_bf16(Y + t * ldy, W, X + t * ldx, r0, r1, cols);
}

static void ref_matvec_f32(float *y, const float *W, const float *x,
                           int64_t r0, int64_t r1, int64_t cols) {
    for (int64_t r = r0; r < r1; r++) y[r] = dot_f32(W + r * cols, x, cols);
}

static int64_t ref_matvec_mxfp4(float *y, const uint8_t *packed, const uint8_t *scales,
                                const float *x, int64_t r0, int64_t r1, int64_t cols) {
    int64_t n255 = 0;
    for (int64_t r = r0; r < r1; r++)
        y[r] = dot_mxfp4(packed + r * (cols / 2), scales + r * (cols / 32), x, cols, &n255);
    return n255;
}

static int64_t ref_matmat_mxfp4(float *Y, int64_t ldy, const uint8_t *packed,
                                const uint8_t *scales, const float *X, int64_t ldx,
                                int64_t T, int64_t r0, int64_t r1, int64_t cols) {
    int64_t n255 = 0;   /* counted once per scale byte, independent of T */
    for (int64_t i = r0 * (cols / 32); i < r1 * (cols / 32); i++) n255 += scales[i] == 255;
    for (int64_t t = 0; t < T; t++)
        ref_matvec_mxfp4(Y + t * ldy, packed, scales, X + t * ldx, r0, r1, cols);
    return n255;
}

/* The reference table: plain C, correct on every CPU. */
const ms_kern ms_kern_ref = {
    .name = "ref",
    .matvec_bf16 = ref_matvec_bf16,
    .matmat_bf16 = ref_matmat_bf16,
    .matvec_f32 = ref_matvec_f32,
    .matvec_mxfp4 = ref_matvec_mxfp4,
    .matmat_mxfp4 = ref_matmat_mxfp4,
    .expf_n = ms_expf_n,
    .sigmoidf_n = ms_sigmoidf_n,
    .siluf_n = ms_siluf_n,
    .situ_glu = ms_situ_glu,
    .kda_update = ms_kda_update,
    .att_scores = ms_att_scores,
    .att_mix = ms_att_mix,
};
