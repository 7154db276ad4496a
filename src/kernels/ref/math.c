/* kernels/ref/math.c - portable expf, tanhf, sigmoidf, siluf with fixed bits.
 *
 * Owns: the transcendental functions of the model (kernels.h).
 * Idea: evaluate in DOUBLE with explicit operations only - a Cody-Waite
 *   range reduction x = k*ln2 + r, a fixed Taylor polynomial for e^r in
 *   Horner form, and 2^k built from its bits - then round once to float.
 *   Every step is an IEEE-754 double add/mul/div (no libm call, contraction is
 *   off), so the result bits are the same on every ISA, compiler and libc.
 * Accuracy: the double result carries a relative error below 1e-15, so after
 *   the single rounding to float the result is the correctly rounded value or
 *   (rarely, when the true value is within 1e-15 of a float midpoint) its
 *   neighbour: always within 1 ulp. tests/test_kernels.c checks millions of
 *   inputs against libm's double exp/tanh rounded to float.
 * Special values (documented behaviour, all tested):
 *   expf:    NaN -> NaN; +inf and x > 89 -> +inf (overflow, like libm);
 *            -inf and x < -104 -> +0; subnormal results are rounded once.
 *   tanhf:   NaN -> NaN; tanh(+-0) = +-0; tiny x -> x; |x| > 20 -> +-1.
 *   sigmoid: NaN -> NaN; never overflows: x < -110 -> +0, x > 40 -> 1.
 *   silu:    NaN -> NaN; +inf -> +inf; x < -110 (and -inf) -> -0.
 * Does not: touch errno, the FP environment, or any global state. Assumes the
 *   default environment (round to nearest even), which the engine never changes.
 */
#include "kernels/kernels.h"

#include <math.h>     /* INFINITY only: no libm function is called */
#include <stdint.h>

/* ln2 split so that k * LN2_HI is exact for |k| < 2^11 (LN2_HI has 32
 * significant bits); LN2_LO carries the rest. */
static const double LN2_HI = 6.93147180369123816490e-01; /* 0x3FE62E42FEE00000 */
static const double LN2_LO = 1.90821492927058770002e-10; /* 0x3DEA39EF35793C76 */
static const double INV_LN2 = 1.44269504088896338700e+00;
/* Adding then subtracting 1.5 * 2^52 rounds a double of magnitude < 2^51
 * to the nearest integer (ties to even) in the default rounding mode. */
static const double ROUND_MAGIC = 6755399441055744.0;

/* 1/n! for n = 2..13, evaluated by the compiler (correctly rounded). */
static const double C2 = 1.0 / 2.0;
static const double C3 = 1.0 / 6.0;
static const double C4 = 1.0 / 24.0;
static const double C5 = 1.0 / 120.0;
static const double C6 = 1.0 / 720.0;
static const double C7 = 1.0 / 5040.0;
static const double C8 = 1.0 / 40320.0;
static const double C9 = 1.0 / 362880.0;
static const double C10 = 1.0 / 3628800.0;
static const double C11 = 1.0 / 39916800.0;
static const double C12 = 1.0 / 479001600.0;
static const double C13 = 1.0 / 6227020800.0;

/* e^r - 1 for |r| <= 0.35: Taylor to degree 13 (truncation < 2e-17 relative). */
static double expm1_small(double r) {
    double p = C13;
    p = p * r + C12;
    p = p * r + C11;
    p = p * r + C10;
    p = p * r + C9;
    p = p * r + C8;
    p = p * r + C7;
    p = p * r + C6;
    p = p * r + C5;
    p = p * r + C4;
    p = p * r + C3;
    p = p * r + C2;
    p = p * r + 1.0;
    return p * r;
}

/* e^y in double for y in [-200, 200] (callers clamp): relative error < 1e-15. */
static double exp_d(double y) {
    double kd = (y * INV_LN2 + ROUND_MAGIC) - ROUND_MAGIC;
    double r = (y - kd * LN2_HI) - kd * LN2_LO;     /* |r| <= ln2/2 + tiny */
    int64_t k = (int64_t)kd;
    union { uint64_t u; double d; } two_k;
    two_k.u = (uint64_t)(k + 1023) << 52;           /* 2^k, k in [-289, 289] */
    return (1.0 + expm1_small(r)) * two_k.d;
}

/* e^y - 1 for y in [0, 40], relative error < 1e-15 (no cancellation for
 * small y: the series is used directly). */
static double expm1_pos(double y) {
    if (y < 0.34) return expm1_small(y);
    return exp_d(y) - 1.0;                          /* e^y >= 1.4: benign */
}

/* sigma(x) in double for finite x in [-110, 40]; both branches avoid overflow. */
static double sigmoid_d(double x) {
    if (x >= 0.0) return 1.0 / (1.0 + exp_d(-x));
    double e = exp_d(x);
    return e / (1.0 + e);
}

static int is_nan(float x) { return x != x; }

/* See kernels.h: e^x, within 1 ulp; pure, thread-safe, allocates nothing. */
float ms_expf(float x) {
    if (is_nan(x)) return x + x;                    /* quiet the NaN */
    if (x > 89.0f) return INFINITY;                  /* e^89 > FLT_MAX */
    if (x < -104.0f) return 0.0f;                   /* e^-104 < 2^-150: rounds to 0 */
    return (float)exp_d((double)x);
}

/* See kernels.h: tanh(x), within 1 ulp, odd (keeps the sign of zero). */
float ms_tanhf(float x) {
    if (is_nan(x)) return x + x;
    int neg = x < 0.0f;
    double a = neg ? -(double)x : (double)x;        /* tanh(-0) keeps its sign below */
    double t;
    if (a > 20.0) {
        t = 1.0;                                    /* 1 - tanh(20) ~ 8e-18: rounds to 1 */
    } else {
        /* tanh(a) = (e^2a - 1) / (e^2a + 1); expm1 keeps small a accurate */
        double em = expm1_pos(2.0 * a);
        t = em / (em + 2.0);
    }
    float f = (float)t;
    if (x == 0.0f) return x;                        /* +-0 exactly */
    return neg ? -f : f;
}

/* See kernels.h: 1 / (1 + e^-x), within 1 ulp, never overflows. */
float ms_sigmoidf(float x) {
    if (is_nan(x)) return x + x;
    if (x > 40.0f) return 1.0f;                     /* 1 - 4e-18 rounds to 1 */
    if (x < -110.0f) return 0.0f;                   /* e^-110 < 2^-150 */
    return (float)sigmoid_d((double)x);
}

/* See kernels.h: x * sigmoid(x), rounded once from double, within 1 ulp. */
float ms_siluf(float x) {
    if (is_nan(x)) return x + x;
    if (x > 40.0f) return x;                        /* x * (1 - tiny) rounds to x */
    if (x < -110.0f) return -0.0f;                  /* |x e^x| < 2^-150: rounds to -0 */
    return (float)((double)x * sigmoid_d((double)x));
}

/* See kernels.h: the array forms, element by element. */
void ms_expf_n(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ms_expf(x[i]);
}

void ms_sigmoidf_n(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ms_sigmoidf(x[i]);
}

void ms_siluf_n(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ms_siluf(x[i]);
}
