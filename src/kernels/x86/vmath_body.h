/* kernels/x86/vmath_body.h - the transcendental functions of kernels/ref/math.c
 * on VM_W lanes, the KDA state update and the MLA attention sums (same bits as
 * the scalar ones).
 *
 * Owns: expf_n, sigmoidf_n, siluf_n, situ_glu, kda_update, att_scores and
 *   att_mix of one ISA table. Included by kernels/x86/vmath_avx2.c and vmath_avx512.c, each
 *   defining VM(name) (the table's name for each function) and VM_W (lanes:
 *   8 for AVX-512, one zmm of doubles; 4 for AVX2, one ymm) first; compiled
 *   only with that file's ISA flags.
 * Idea: each lane runs exactly the scalar code's IEEE-754 double operations
 *   (kernels/ref/math.c), in GCC vector extensions of VM_W doubles: the same Cody-Waite reduction, the same Horner
 *   polynomial, the same divisions and the same final rounding to float.
 *   Where the scalar code branches, both sides are computed and each lane
 *   keeps the side its scalar twin would have taken: expm1_pos's two ranges
 *   share one polynomial evaluation (r = y below 0.34, else the reduced
 *   argument), and the special inputs (NaN, saturation, +-0) are selected
 *   last, from the same expressions as the scalar returns. Lanes that are
 *   selected away may hold anything (NaN, infinities, wrapped integers);
 *   nothing traps in the default floating-point environment.
 *   2^k: t = y/ln2 + 1.5*2^52 holds round(y/ln2) in its low mantissa bits, so
 *   bits(t) - bits(1.5*2^52) is the integer k the scalar code gets from
 *   (int64_t)kd (exact for |k| < 2^51).
 *   Tails (n % VM_W) call the scalar functions themselves.
 * Invariants: -ffp-contract=off (Makefile), so no multiply-add is fused
 *   unless written (vm_fma, only where the product is exact);
 *   out may alias the inputs (each block is loaded before it is stored).
 */
#if !defined(VM) || !defined(VM_W)
#error "define VM(name) and VM_W before including kernels/x86/vmath_body.h"
#endif

#include "kernels/kernels.h"

#include <stdint.h>
#include <string.h>

typedef float vm_f8 __attribute__((vector_size(VM_W * 4)));
typedef int32_t vm_m8 __attribute__((vector_size(VM_W * 4)));  /* a float lane mask */
typedef double vm_d8 __attribute__((vector_size(VM_W * 8)));
typedef int64_t vm_l8 __attribute__((vector_size(VM_W * 8)));  /* a double lane mask */
typedef uint64_t vm_u8 __attribute__((vector_size(VM_W * 8)));

#define VM_INLINE static inline __attribute__((always_inline))

/* the constants of kernels/ref/math.c, bit for bit */
static const double VM_LN2_HI = 6.93147180369123816490e-01;
static const double VM_LN2_LO = 1.90821492927058770002e-10;
static const double VM_INV_LN2 = 1.44269504088896338700e+00;
static const double VM_ROUND_MAGIC = 6755399441055744.0;

VM_INLINE vm_d8 vm_splat(double v) {
    vm_d8 r = { 0 };             /* every lane is set below; the zeros keep -O1 quiet */
    for (int i = 0; i < VM_W; i++) r[i] = v;
    return r;
}
VM_INLINE vm_f8 vm_splatf(float v) {
    vm_f8 r = { 0 };             /* every lane is set below; the zeros keep -O1 quiet */
    for (int i = 0; i < VM_W; i++) r[i] = v;
    return r;
}
VM_INLINE vm_d8 vm_sel(vm_l8 m, vm_d8 a, vm_d8 b) { return (vm_d8)(((vm_l8)a & m) | ((vm_l8)b & ~m)); }
VM_INLINE vm_f8 vm_self(vm_m8 m, vm_f8 a, vm_f8 b) { return (vm_f8)(((vm_m8)a & m) | ((vm_m8)b & ~m)); }
VM_INLINE vm_d8 vm_wide(vm_f8 x) { return __builtin_convertvector(x, vm_d8); }
VM_INLINE vm_f8 vm_narrow(vm_d8 x) { return __builtin_convertvector(x, vm_f8); }
VM_INLINE vm_f8 vm_load(const float *p) { vm_f8 v; memcpy(&v, p, sizeof v); return v; }
VM_INLINE void vm_store(float *p, vm_f8 v) { memcpy(p, &v, sizeof v); }

/* expm1_small: e^r - 1 by the degree-13 Taylor polynomial in Horner form */
VM_INLINE vm_d8 vm_expm1_small(vm_d8 r) {
    vm_d8 p = vm_splat(1.0 / 6227020800.0);
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 1.0 / 2.0;
    p = p * r + 1.0;
    return p * r;
}

/* exp_d's range reduction: the reduced argument *r and 2^k */
VM_INLINE vm_d8 vm_reduce(vm_d8 y, vm_d8 *r) {
    vm_d8 t = y * VM_INV_LN2 + VM_ROUND_MAGIC;
    vm_d8 kd = t - VM_ROUND_MAGIC;
    *r = (y - kd * VM_LN2_HI) - kd * VM_LN2_LO;
    vm_u8 k = (vm_u8)t - (vm_u8)vm_splat(VM_ROUND_MAGIC);
    return (vm_d8)((k + 1023) << 52);
}

/* exp_d: e^y for lanes in [-200, 200] */
VM_INLINE vm_d8 vm_exp_d(vm_d8 y) {
    vm_d8 r, two_k = vm_reduce(y, &r);
    return (1.0 + vm_expm1_small(r)) * two_k;
}

/* sigmoid_d: 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below */
VM_INLINE vm_d8 vm_sigmoid_d(vm_d8 x) {
    vm_l8 pos = x >= 0.0;
    vm_d8 e = vm_exp_d(vm_sel(pos, -x, x));
    return vm_sel(pos, vm_splat(1.0), e) / (1.0 + e);
}

/* ms_expf */
VM_INLINE vm_f8 vm_expf(vm_f8 x) {
    vm_f8 f = vm_narrow(vm_exp_d(vm_wide(x)));
    f = vm_self(x < -104.0f, vm_splatf(0.0f), f);
    f = vm_self(x > 89.0f, vm_splatf(__builtin_inff()), f);
    return vm_self(x != x, x + x, f);
}

/* ms_sigmoidf */
VM_INLINE vm_f8 vm_sigmoidf(vm_f8 x) {
    vm_f8 f = vm_narrow(vm_sigmoid_d(vm_wide(x)));
    f = vm_self(x < -110.0f, vm_splatf(0.0f), f);
    f = vm_self(x > 40.0f, vm_splatf(1.0f), f);
    return vm_self(x != x, x + x, f);
}

/* ms_siluf */
VM_INLINE vm_f8 vm_siluf(vm_f8 x) {
    vm_d8 xd = vm_wide(x);
    vm_f8 f = vm_narrow(xd * vm_sigmoid_d(xd));
    f = vm_self(x < -110.0f, vm_splatf(-0.0f), f);
    f = vm_self(x > 40.0f, x, f);
    return vm_self(x != x, x + x, f);
}

/* ms_tanhf: (e^2a - 1) / (e^2a + 1) with e^2a - 1 from expm1_pos */
VM_INLINE vm_f8 vm_tanhf(vm_f8 x) {
    vm_m8 neg = x < 0.0f;
    vm_d8 xd = vm_wide(x);
    vm_d8 a = vm_sel(xd < 0.0, -xd, xd);
    vm_d8 y = 2.0 * a;
    vm_l8 small = y < 0.34;
    vm_d8 r, two_k = vm_reduce(y, &r);
    vm_d8 p = vm_expm1_small(vm_sel(small, y, r));
    vm_d8 em = vm_sel(small, p, (1.0 + p) * two_k - 1.0);
    vm_d8 t = vm_sel(a > 20.0, vm_splat(1.0), em / (em + 2.0));
    vm_f8 f = vm_narrow(t);
    f = vm_self(neg, -f, f);
    f = vm_self(x == 0.0f, x, f);
    return vm_self(x != x, x + x, f);
}

static void VM(expf_n)(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + VM_W <= n; i += VM_W) vm_store(y + i, vm_expf(vm_load(x + i)));
    for (; i < n; i++) y[i] = ms_expf(x[i]);
}

static void VM(sigmoidf_n)(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + VM_W <= n; i += VM_W) vm_store(y + i, vm_sigmoidf(vm_load(x + i)));
    for (; i < n; i++) y[i] = ms_sigmoidf(x[i]);
}

static void VM(siluf_n)(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + VM_W <= n; i += VM_W) vm_store(y + i, vm_siluf(vm_load(x + i)));
    for (; i < n; i++) y[i] = ms_siluf(x[i]);
}

/* ms_situ_glu, operation for operation */
static void VM(situ_glu)(float *out, const float *g, const float *u, int64_t n, float b1, float b2) {
    int64_t i = 0;
    for (; i + VM_W <= n; i += VM_W) {
        vm_f8 gi = vm_load(g + i), ui = vm_load(u + i);
        vm_f8 gate = (b1 * vm_tanhf(gi / b1)) * vm_sigmoidf(gi);
        vm_store(out + i, gate * (b2 * vm_tanhf(ui / b2)));
    }
    if (i < n) ms_situ_glu(out + i, g + i, u + i, n - i, b1, b2);
}

/* ---- the KDA state update (kernels.h, ms_kda_update) ----
 * Fused in two passes over S: per element, decay then its term of u; then the
 * write then its term of o. Each S[a][b], u[b] and o[b] sees the reference's
 * float operations in the reference's order (a ascending); only independent
 * elements are interleaved. Columns go in blocks of 4 vectors of 2 * VM_W
 * floats (a whole zmm or ymm each), rows innermost, so the accumulators stay
 * in registers; the last columns (dv % (2 * VM_W)) go one at a time. */
typedef float vm_fw __attribute__((vector_size(VM_W * 8)));
enum { VM_FW = 2 * VM_W, VM_KB = 4 * VM_FW };

VM_INLINE vm_fw vm_loadw(const float *p) { vm_fw v; memcpy(&v, p, sizeof v); return v; }
VM_INLINE void vm_storew(float *p, vm_fw v) { memcpy(p, &v, sizeof v); }
VM_INLINE vm_fw vm_splatw(float v) {
    vm_fw r = { 0 };             /* every lane is set below; the zeros keep -O1 quiet */
    for (int i = 0; i < VM_FW; i++) r[i] = v;
    return r;
}

/* S[a][b] = m[a] * S[a][b] (mode 0) or S[a][b] + m[a] * e[b] (mode 1) for every
 * a, and acc[b] = acc[b] + S[a][b] * w[a] over a from acc[b] = +0, into acc. */
VM_INLINE void vm_kda_pass(float *S, const float *m, const float *e, const float *w, float *acc,
                           int64_t dk, int64_t dv, int mode) {
    int64_t b0 = 0;
    for (; b0 + VM_KB <= dv; b0 += VM_KB) {
        vm_fw a0 = vm_splatw(0.0f), a1 = a0, a2 = a0, a3 = a0;
        vm_fw e0 = a0, e1 = a0, e2 = a0, e3 = a0;
        if (mode) {
            e0 = vm_loadw(e + b0); e1 = vm_loadw(e + b0 + VM_FW);
            e2 = vm_loadw(e + b0 + 2 * VM_FW); e3 = vm_loadw(e + b0 + 3 * VM_FW);
        }
        for (int64_t a = 0; a < dk; a++) {
            float *r = S + a * dv + b0;
            const float ma = m[a], wa = w[a];
            vm_fw s0 = vm_loadw(r), s1 = vm_loadw(r + VM_FW);
            vm_fw s2 = vm_loadw(r + 2 * VM_FW), s3 = vm_loadw(r + 3 * VM_FW);
            if (mode) {
                s0 = s0 + ma * e0; s1 = s1 + ma * e1; s2 = s2 + ma * e2; s3 = s3 + ma * e3;
            } else {
                s0 = ma * s0; s1 = ma * s1; s2 = ma * s2; s3 = ma * s3;
            }
            vm_storew(r, s0); vm_storew(r + VM_FW, s1);
            vm_storew(r + 2 * VM_FW, s2); vm_storew(r + 3 * VM_FW, s3);
            a0 = a0 + s0 * wa; a1 = a1 + s1 * wa; a2 = a2 + s2 * wa; a3 = a3 + s3 * wa;
        }
        vm_storew(acc + b0, a0); vm_storew(acc + b0 + VM_FW, a1);
        vm_storew(acc + b0 + 2 * VM_FW, a2); vm_storew(acc + b0 + 3 * VM_FW, a3);
    }
    for (; b0 < dv; b0++) {
        float t = 0.0f;
        for (int64_t a = 0; a < dk; a++) {
            float *r = S + a * dv + b0;
            *r = mode ? *r + m[a] * e[b0] : m[a] * *r;
            t = t + *r * w[a];
        }
        acc[b0] = t;
    }
}

static void VM(kda_update)(float *S, const float *alpha, const float *k, const float *v, float beta,
                           const float *q, float qscale, float *o, int64_t dk, int64_t dv) {
    float u[1024], d[1024], qa[1024];
    vm_kda_pass(S, alpha, NULL, k, u, dk, dv, 0);           /* decay, u */
    for (int64_t b = 0; b < dv; b++) d[b] = beta * (v[b] - u[b]);
    if (!o) {                                                /* write only */
        for (int64_t a = 0; a < dk; a++)
            for (int64_t b = 0; b < dv; b++) S[a * dv + b] = S[a * dv + b] + k[a] * d[b];
        return;
    }
    for (int64_t a = 0; a < dk; a++) qa[a] = q[a] * qscale;
    vm_kda_pass(S, k, d, qa, o, dk, dv, 1);                  /* write, o */
}

/* ---- attention scores and value mix (kernels.h, ms_att_scores / ms_att_mix) ----
 * Each product of two floats is exact in double, so a sum's bits depend only
 * on the order of its adds, which is kept: one lane is one (head, position)
 * sum in scores and one (head, column) sum in the mix, and its terms are added
 * in the reference's order. Heads go 8 at a time, so each row of the cache
 * read serves 8 heads (the reference reads the whole cache once per head).
 * Scores: a block of VM_W positions is copied transposed, as doubles, into T
 * [width][VM_W] once for all heads (VM_W x VM_W blocks widened and transposed
 * in registers; the block after is prefetched, since gpt-oss's rows are a page
 * apart); lane p of a head's accumulator is position s0 + p. Each term is
 * added by a fused multiply-add: the product is exact, so it rounds as the
 * add alone would (half the instructions). Mix: 2 * VM_W columns per pair of
 * accumulators (fused the same way); positions in blocks
 * of VM_MLA_PB whose probabilities are widened once per block, the sums parked
 * in acc between blocks. A group of fewer than 8 heads runs against zero rows
 * whose results are dropped. Widths above VM_MLA_MAXW and the position /
 * column tails use the reference itself. */
enum { VM_MLA_MAXW = 1024, VM_MLA_PB = 256 };
static const double vm_zero_row[VM_MLA_MAXW];

#define VM_HEADS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

/* a * b + c rounded once: the attention sums' products are exact in double,
 * so this is the bits of the multiply and then the add (and one instruction) */
VM_INLINE vm_d8 vm_fma(vm_d8 a, vm_d8 b, vm_d8 c) {
#if VM_W == 8
    return (vm_d8)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#else
    return (vm_d8)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#endif
}

/* r[p][i] -> r[i][p] for a VM_W x VM_W block of doubles (log2 VM_W stages of
 * two-input shuffles; lane p of the result i is element i of row p) */
VM_INLINE void vm_transpose(vm_d8 *r) {
#if VM_W == 8
    const __m512i lo2 = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi2 = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    __m512d t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_pd((__m512d)r[i], (__m512d)r[i + 1]);       /* 0 8 2 10 4 12 6 14 */
        t[i + 1] = _mm512_unpackhi_pd((__m512d)r[i], (__m512d)r[i + 1]);   /* 1 9 3 11 5 13 7 15 */
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4)
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) {
            u[i + k] = _mm512_permutex2var_pd(t[i + k], lo2, t[i + k + 2]);
            u[i + k + 2] = _mm512_permutex2var_pd(t[i + k], hi2, t[i + k + 2]);
        }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        r[k] = (vm_d8)_mm512_shuffle_f64x2(u[k], u[k + 4], 0x44);          /* 0 1 2 3 8 9 10 11 */
        r[k + 4] = (vm_d8)_mm512_shuffle_f64x2(u[k], u[k + 4], 0xee);      /* 4 5 6 7 12 13 14 15 */
    }
#else
    const __m256d t0 = _mm256_unpacklo_pd((__m256d)r[0], (__m256d)r[1]), t1 = _mm256_unpackhi_pd((__m256d)r[0], (__m256d)r[1]);
    const __m256d t2 = _mm256_unpacklo_pd((__m256d)r[2], (__m256d)r[3]), t3 = _mm256_unpackhi_pd((__m256d)r[2], (__m256d)r[3]);
    r[0] = (vm_d8)_mm256_permute2f128_pd(t0, t2, 0x20);
    r[2] = (vm_d8)_mm256_permute2f128_pd(t0, t2, 0x31);
    r[1] = (vm_d8)_mm256_permute2f128_pd(t1, t3, 0x20);
    r[3] = (vm_d8)_mm256_permute2f128_pd(t1, t3, 0x31);
#endif
}

static void VM(att_scores)(float *S, int64_t lds, const double *Q, int64_t ldq, int64_t nq,
                           const float *C, int64_t pw, int64_t width, int64_t n, double scale) {
    if (width > VM_MLA_MAXW) {
        ms_att_scores(S, lds, Q, ldq, nq, C, pw, width, n, scale);
        return;
    }
    double T[VM_MLA_MAXW * VM_W] __attribute__((aligned(64)));
    const int64_t wv = width - width % VM_W;    /* columns transposed a block at a time */
    int64_t s0 = 0;
    for (; s0 + VM_W <= n; s0 += VM_W) {
        if (s0 + 2 * VM_W <= n)     /* the next block's rows: a row per page where pw is large */
            for (int p = 0; p < VM_W; p++)
                for (int64_t j = 0; j < width; j += 16) __builtin_prefetch(C + (s0 + VM_W + p) * pw + j);
        for (int64_t j0 = 0; j0 < wv; j0 += VM_W) {
            vm_d8 r[VM_W];
#pragma GCC unroll 8
            for (int p = 0; p < VM_W; p++) r[p] = vm_wide(vm_load(C + (s0 + p) * pw + j0));
            vm_transpose(r);
            memcpy(T + j0 * VM_W, r, sizeof r);
        }
        for (int p = 0; p < VM_W; p++) {
            const float *c = C + (s0 + p) * pw;
            for (int64_t j = wv; j < width; j++) T[j * VM_W + p] = (double)c[j];
        }
        for (int64_t h0 = 0; h0 < nq; h0 += 8) {
#define VM_Q(k) const double *q##k = h0 + k < nq ? Q + (h0 + k) * ldq : vm_zero_row; \
                vm_d8 a##k = vm_splat(0.0);
            VM_HEADS8(VM_Q)
#undef VM_Q
            for (int64_t j = 0; j < width; j++) {
                vm_d8 x;
                memcpy(&x, T + j * VM_W, sizeof x);
#define VM_ACC(k) a##k = vm_fma(vm_splat(q##k[j]), x, a##k);
                VM_HEADS8(VM_ACC)
#undef VM_ACC
            }
#define VM_OUT(k) if (h0 + k < nq) vm_store(S + (h0 + k) * lds + s0, vm_narrow(a##k * scale));
            VM_HEADS8(VM_OUT)
#undef VM_OUT
        }
    }
    if (s0 < n) ms_att_scores(S + s0, lds, Q, ldq, nq, C + s0 * pw, pw, width, n - s0, scale);
}

static void VM(att_mix)(float *O, int64_t ldo, const float *P, int64_t ldp, int64_t nq,
                        const float *C, int64_t pw, int64_t width, int64_t n) {
    const int64_t wv = width - width % (2 * VM_W);     /* columns in whole pairs of vectors */
    if (width > VM_MLA_MAXW) {
        ms_att_mix(O, ldo, P, ldp, nq, C, pw, width, n);
        return;
    }
    double acc[8][VM_MLA_MAXW], pd[8][VM_MLA_PB];
    for (int64_t h0 = 0; h0 < nq; h0 += 8) {
        for (int k = 0; k < 8; k++)
            for (int64_t i = 0; i < wv; i++) acc[k][i] = 0.0;
        for (int64_t sb = 0; sb < n; sb += VM_MLA_PB) {
            const int64_t nb = n - sb < VM_MLA_PB ? n - sb : VM_MLA_PB;
            for (int k = 0; k < 8; k++)
                for (int64_t s = 0; s < nb; s++)
                    pd[k][s] = h0 + k < nq ? (double)P[(h0 + k) * ldp + sb + s] : 0.0;
            for (int64_t i0 = 0; i0 < wv; i0 += 2 * VM_W) {
#define VM_LD(k) vm_d8 a##k##l, a##k##h; memcpy(&a##k##l, acc[k] + i0, sizeof a##k##l); \
                 memcpy(&a##k##h, acc[k] + i0 + VM_W, sizeof a##k##h);
                VM_HEADS8(VM_LD)
#undef VM_LD
                for (int64_t s = 0; s < nb; s++) {
                    const float *c = C + (sb + s) * pw + i0;
                    const vm_d8 cl = vm_wide(vm_load(c)), ch = vm_wide(vm_load(c + VM_W));
#define VM_ACC(k) { const vm_d8 p = vm_splat(pd[k][s]); a##k##l = vm_fma(p, cl, a##k##l); a##k##h = vm_fma(p, ch, a##k##h); }
                    VM_HEADS8(VM_ACC)
#undef VM_ACC
                }
#define VM_ST(k) memcpy(acc[k] + i0, &a##k##l, sizeof a##k##l); memcpy(acc[k] + i0 + VM_W, &a##k##h, sizeof a##k##h);
                VM_HEADS8(VM_ST)
#undef VM_ST
            }
        }
        for (int k = 0; k < 8 && h0 + k < nq; k++)
            for (int64_t i = 0; i < wv; i++) O[(h0 + k) * ldo + i] = (float)acc[k][i];
    }
    if (wv < width) ms_att_mix(O + wv, ldo, P, ldp, nq, C + wv, pw, width - wv, n);
}
#undef VM_HEADS8
