/* kernels/kernels.h - the numeric kernels of the engine, and their dispatch.
 *
 * Owns: every floating-point primitive the model uses. kernels/ref/ holds the
 *   plain-C reference of each (the specification); kernels/x86/ holds SIMD
 *   versions that must produce THE SAME BITS (docs/DETERMINISM.md).
 * Idea: the model calls only through `ms_kern` (a table of function pointers
 *   chosen once at start-up by ms_kernels_select). Row ranges let the caller
 *   split work across threads; a row's bits never depend on the split.
 * Invariants: kernels do no I/O, allocate nothing, keep no state, and are
 *   thread-safe on disjoint outputs.
 *
 * THE DOT TREE ("T16"), used by every matrix product here:
 *   dot(w, x, n): 16 lanes acc[0..15] = +0.0f; for i = 0..n-1 in increasing
 *   order: acc[i % 16] = fmaf(w[i], x[i], acc[i % 16]) (one fused multiply-add,
 *   single rounding). Then s8[j] = acc[j] + acc[j+8] (j < 8),
 *   s4[j] = s8[j] + s8[j+4] (j < 4), s2[j] = s4[j] + s4[j+2] (j < 2),
 *   result = s2[0] + s2[1]. w[i] is the weight decoded to f32 EXACTLY:
 *     BF16: bits << 16.
 *     MXFP4: value = (float)(signed code2[c]) * ms_mxfp4_scale[s], where
 *       code2 = twice the magnitude {0,1,2,3,4,6,8,12}, sign = bit 3 of the
 *       nibble, and ms_mxfp4_scale[s] = 2^(s-128) for s < 255. A group whose
 *       scale byte is 255 is SKIPPED (its lanes are left unchanged, so the
 *       result equals the sum without that group even when x there is inf)
 *       and counted; the table holds 0.0f there only as a guard. Element 2i of a
 *       row is the LOW nibble of byte i, element 2i+1 the HIGH nibble.
 *   A matrix-matrix product computes every (token, row) with the same tree, so
 *   a chunk of tokens gives the same bits as one token at a time.
 */
#ifndef MS_KERNELS_H
#define MS_KERNELS_H

#include <stdint.h>

/* BF16 -> F32, exact. */
static inline float ms_bf16_to_f32(uint16_t b) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}

/* 2^(s-128) for s in 0..254, 0.0f for 255. Filled by ms_kernels_select(). */
extern float ms_mxfp4_scale[256];

/* Portable transcendental functions computed in double with explicit
 * operations (no libm, no contraction), so their bits are identical on every
 * ISA and libc. Accuracy: within 1 ulp of the true float result. */
float ms_expf(float x);
float ms_tanhf(float x);
float ms_sigmoidf(float x);     /* 1 / (1 + exp(-x)), saturating, no overflow */
float ms_siluf(float x);        /* x * sigmoid(x) */
/* The same over arrays, element by element (y may alias x): the reference
 * forms of the tables' expf_n, sigmoidf_n, siluf_n. */
void ms_expf_n(float *y, const float *x, int64_t n);
void ms_sigmoidf_n(float *y, const float *x, int64_t n);
void ms_siluf_n(float *y, const float *x, int64_t n);
/* The same rules in double, for what is computed once per position or row
 * (gpt-oss's RoPE table, log-probabilities), where libm's bits could follow
 * the CPU or the libc release. Within 1 ulp of the true value; special values
 * as C's exp, log, pow (b >= 0). */
double ms_exp_d(double y);
double ms_log_d(double x);
double ms_pow_d(double b, double y);
/* *s = sin x, *c = cos x for |x| <= 2^30; NaN both beyond (and for NaN, inf). */
void ms_sincos_d(double x, double *s, double *c);

typedef struct ms_kern {
    const char *name;           /* "ref", "avx2", "avx512", "avx512-l2" */

    /* SHAPES       W [rows, cols] BF16 row-major (row stride = cols); x [cols]; y [rows]
     * DEFINITION   y[r] = T16 dot(W[r, :], x) for r in [r0, r1)
     * REGULARITIES any cols >= 0 (ragged tails allowed); y written only in [r0, r1) */
    void (*matvec_bf16)(float *y, const uint16_t *W, const float *x,
                        int64_t r0, int64_t r1, int64_t cols);
    /* SHAPES       W [rows, cols] BF16; X [T, cols] (row stride ldx); Y [T, *] (row stride ldy)
     * DEFINITION   Y[t][r] = T16 dot(W[r, :], X[t, :]) for t in [0, T), r in [r0, r1)
     *              -- bit-identical to T calls of matvec_bf16 */
    void (*matmat_bf16)(float *Y, int64_t ldy, const uint16_t *W, const float *X,
                        int64_t ldx, int64_t T, int64_t r0, int64_t r1, int64_t cols);
    /* Same as matvec_bf16 with F32 weights. */
    void (*matvec_f32)(float *y, const float *W, const float *x,
                       int64_t r0, int64_t r1, int64_t cols);
    /* SHAPES       packed [rows, cols/2] U8; scales [rows, cols/32] U8; x [cols]; y [rows]
     * DEFINITION   y[r] = T16 dot(decode(W[r, :]), x) for r in [r0, r1)
     * REGULARITIES cols % 32 == 0; returns the number of scale bytes == 255 seen in rows [r0, r1) */
    int64_t (*matvec_mxfp4)(float *y, const uint8_t *packed, const uint8_t *scales,
                            const float *x, int64_t r0, int64_t r1, int64_t cols);
    /* As matvec_mxfp4 for T tokens (X row stride ldx, Y row stride ldy); the count
     * returned is per row range (each scale byte counted once, not T times). */
    int64_t (*matmat_mxfp4)(float *Y, int64_t ldy, const uint8_t *packed,
                            const uint8_t *scales, const float *X, int64_t ldx,
                            int64_t T, int64_t r0, int64_t r1, int64_t cols);

    /* DEFINITION   y[i] = ms_expf(x[i]) / ms_sigmoidf(x[i]) / ms_siluf(x[i]) for i < n,
     *              bit for bit (NaN payloads included); y may alias x */
    void (*expf_n)(float *y, const float *x, int64_t n);
    void (*sigmoidf_n)(float *y, const float *x, int64_t n);
    void (*siluf_n)(float *y, const float *x, int64_t n);
    /* DEFINITION   the bits of ms_situ_glu(out, g, u, n, b1, b2); out may alias g or u */
    void (*situ_glu)(float *out, const float *g, const float *u, int64_t n, float b1, float b2);
    /* DEFINITION   the bits of ms_kda_update (below) */
    void (*kda_update)(float *S, const float *alpha, const float *k, const float *v, float beta,
                       const float *q, float qscale, float *o, int64_t dk, int64_t dv);
    /* DEFINITION   the bits of ms_att_scores and ms_att_mix (below) */
    void (*att_scores)(float *S, int64_t lds, const double *Q, int64_t ldq, int64_t nq,
                       const float *C, int64_t pw, int64_t width, int64_t n, double scale);
    void (*att_mix)(float *O, int64_t ldo, const float *P, int64_t ldp, int64_t nq,
                    const float *C, int64_t pw, int64_t width, int64_t n);
} ms_kern;

/* The reference table (plain C). */
extern const ms_kern ms_kern_ref;

/* Pick the best table the CPU supports; `force` = NULL/"auto", "ref", "avx2",
 * "avx512", "avx512-l2" (the avx512 kernels with the matvec prefetches to L2:
 * auto's choice on Zen 4). Returns NULL if a forced ISA is not supported.
 * Idempotent. */
const ms_kern *ms_kernels_select(const char *force);

/* 1 if `name` names a table on some CPU (NULL and "auto" included), else 0:
 * tells "unknown" from "not on this CPU" when ms_kernels_select says NULL. */
int ms_kernels_known(const char *name);

/* ---- scalar building blocks (kernels/ref/ops.c), shared by every ISA ----
 * Reductions here accumulate in DOUBLE in increasing index order. */

/* SHAPES x, w, y [n] (y may alias x)
 * DEFINITION ss = sum x[i]^2 (double, in order); inv = (float)(1 / sqrt(ss/n + eps));
 *            y[i] = (x[i] * inv) * w[i]   (float ops) */
void ms_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
/* inv only (the factor above), for callers that fuse. */
float ms_rms_inv(const float *x, int64_t n, float eps);
/* DEFINITION ss = sum x[i]^2 (double, in order); inv = (float)(1/sqrt(ss + eps)); x[i] *= inv
 *            (L2 normalisation by the SUM of squares, spec 4.3) */
void ms_l2norm_inplace(float *x, int64_t n, float eps);
/* DEFINITION y = b1*tanh(g/b1)*sigmoid(g) * b2*tanh(u/b2), sigmoid on the UNCAPPED g.
 *            out[i] = ((b1 * ms_tanhf(g[i]/b1)) * ms_sigmoidf(g[i])) * (b2 * ms_tanhf(u[i]/b2)) */
void ms_situ_glu(float *out, const float *g, const float *u, int64_t n, float b1, float b2);
/* One KDA head's state update for one token (spec 4.3), and optionally its output.
 * SHAPES     S [dk, dv] row-major; alpha, k, q [dk]; v, o [dv]; dk, dv <= 1024
 * DEFINITION every step a float op, in this order:
 *            1. S[a][b] = alpha[a] * S[a][b]                       (decay)
 *            2. u[b] = +0; for a = 0..dk-1: u[b] = u[b] + S[a][b] * k[a]
 *            3. d[b] = beta * (v[b] - u[b])
 *            4. S[a][b] = S[a][b] + k[a] * d[b]                    (delta-rule write)
 *            5. if o: qa = q[a] * qscale; o[b] = +0; for a = 0..dk-1: o[b] = o[b] + S[a][b] * qa
 *            Steps 1-2 and 4-5 may be fused per element: each S[a][b], u[b] and o[b]
 *            sees the same operations in the same order either way. */
void ms_kda_update(float *S, const float *alpha, const float *k, const float *v, float beta,
                   const float *q, float qscale, float *o, int64_t dk, int64_t dv);
/* Attention of nq heads over n cached positions: K3's MLA (spec 4.4, absorbed
 * form: every head against the whole latent row, width = pw) and gpt-oss's GQA
 * (the heads of one KV group against its keys, then its values: width =
 * head_dim columns of each row). Q holds floats widened to double, so every
 * product of two floats is exact in double and each sum below rounds only in
 * its adds, which run in the stated order (a fused multiply-add gives the same
 * bits as the multiply and the add).
 * SHAPES     C [n, pw] (row stride pw); Q [nq, ldq] doubles; S [nq, lds];
 *            P [nq, ldp]; O [nq, ldo]; width <= pw
 * ms_att_scores: S[h][s] = (float)(acc * scale), acc = +0.0, then for j = 0..width-1:
 *            acc = acc + Q[h][j] * (double)C[s][j]
 * ms_att_mix:    O[h][i] = (float)acc for i < width, acc = +0.0, then for s = 0..n-1:
 *            acc = acc + (double)P[h][s] * (double)C[s][i] */
void ms_att_scores(float *S, int64_t lds, const double *Q, int64_t ldq, int64_t nq,
                   const float *C, int64_t pw, int64_t width, int64_t n, double scale);
void ms_att_mix(float *O, int64_t ldo, const float *P, int64_t ldp, int64_t nq,
                const float *C, int64_t pw, int64_t width, int64_t n);
/* In-place softmax: m = max; e[i] = ms_expf(x[i]-m); sum in double in order;
 * x[i] = (float)(e[i] / sum). */
void ms_softmax_inplace(float *x, int64_t n);

#endif
