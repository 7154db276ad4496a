/* kernels/ref/math.c - portable expf, tanhf, sigmoidf, siluf with fixed bits,
 * and exp, log, pow, sin/cos in double (the second half of the file).
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

/* 2^k as a double for k in [-1022, 1023]. */
static double pow2_d(int64_t k) {
    union { uint64_t u; double d; } v;
    v.u = (uint64_t)(k + 1023) << 52;
    return v.d;
}

/* e^y in double for y in [-200, 200] (callers clamp): relative error < 1e-15.
 * The float functions' core, whose operations the vector tables repeat
 * (kernels/x86/vmath_body.h): exp_dd below is the double functions' own. */
static double exp_d(double y) {
    double kd = (y * INV_LN2 + ROUND_MAGIC) - ROUND_MAGIC;
    double r = (y - kd * LN2_HI) - kd * LN2_LO;     /* |r| <= ln2/2 + tiny */
    return (1.0 + expm1_small(r)) * pow2_d((int64_t)kd);   /* k in [-289, 289] */
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

/* ---- double precision: RoPE tables and log-probabilities ----------------
 * The same rules in double: explicit IEEE operations only, so the bits are
 * the same on every CPU, libc and compiler. Each function carries what a
 * rounding would lose as a second double (an exact two-sum or product error)
 * until its last add, so the result is within 1 ulp of the true value
 * (tests/test_dmath.c measures them against long double libm and pins a
 * digest of their bits). */

/* *hi + *lo += v, exactly (Knuth's two-sum into hi, its error into lo). */
static void acc_d(double *hi, double *lo, double v) {
    const double s = *hi + v, bb = s - *hi;
    *lo += (*hi - (s - bb)) + (v - bb);
    *hi = s;
}

/* a = hi + lo with hi holding the upper 26 bits (Veltkamp's split; |a| < 2^995). */
static void split_d(double a, double *hi, double *lo) {
    const double c = 134217729.0 * a;               /* 2^27 + 1 */
    *hi = c - (c - a);
    *lo = a - *hi;
}

/* a b - p exactly, for p = a * b rounded (Dekker's product; no overflow). */
static double prod_err(double a, double b, double p) {
    double ah, al, bh, bl;
    split_d(a, &ah, &al);
    split_d(b, &bh, &bl);
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl;
}

/* e^(y + yl) for y in [-745.2, 709.79]: y = k ln2 + r + rl (r's rounding
 * kept in rl), e^r = 1 + r + r^2 P(r) with P the Taylor tail from 1/2 (to
 * r^13: < 2e-17), 1 + r two-summed; 2^k applied last, through 2^-200 when the
 * result is subnormal so that it rounds once. */
static double exp_dd(double y, double yl) {
    const double kd = (y * INV_LN2 + ROUND_MAGIC) - ROUND_MAGIC;
    const double rh = y - kd * LN2_HI;             /* exact: k ln2_hi has 43 bits, near y */
    const double q = kd * LN2_LO, r = rh - q;
    const double rl = ((rh - r) - q) + yl;         /* q's own rounding: < 2^-75, left out */
    /* P = C2 + C3 r + ... + C13 r^11 in Estrin's form (pairs, then pairs of
       pairs): four dependent steps instead of eleven, the same sum to 2^-55 */
    const double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    const double a0 = C2 + C3 * r, a1 = C4 + C5 * r, a2 = C6 + C7 * r;
    const double a3 = C8 + C9 * r, a4 = C10 + C11 * r, a5 = C12 + C13 * r;
    const double P = ((a0 + a1 * r2) + (a2 + a3 * r2) * r4) + (a4 + a5 * r2) * r8;
    const double s1 = 1.0 + r, e1 = (1.0 - s1) + r;  /* exact: |r| < 1 */
    const double w = r2 * P;                        /* e^(r + rl) = (s1 + e1 + w)(1 + rl) */
    const double p = s1 + (e1 + (w + (s1 + w) * rl));
    const int64_t k = (int64_t)kd;
    if (k > 1023) return p * pow2_d(1023) * 2.0;    /* k = 1024: p < 1 there */
    if (k < -1022) return (p * pow2_d(k + 200)) * pow2_d(-200);
    return p * pow2_d(k);
}

/* See kernels.h. */
double ms_exp_d(double y) {
    if (y != y) return y + y;
    if (y > 709.782712893384) return INFINITY;      /* e^y > DBL_MAX */
    if (y < -745.2) return 0.0;                     /* e^y < 2^-1075 */
    return exp_dd(y, 0.0);
}

/* 2/(2n+1) for n = 1..10: the series of log(1+f) below, in s^2. */
static const double L1 = 2.0 / 3.0, L2 = 2.0 / 5.0, L3 = 2.0 / 7.0, L4 = 2.0 / 9.0, L5 = 2.0 / 11.0;
static const double L6 = 2.0 / 13.0, L7 = 2.0 / 15.0, L8 = 2.0 / 17.0, L9 = 2.0 / 19.0, L10 = 2.0 / 21.0;
static const double L1_LO = 0x1.5555555555555p-55;   /* 2/3 - L1: L1 as two doubles */

/* log x = *hi + *lo for finite x > 0. x = 2^e m with m in [sqrt(1/2),
 * sqrt(2)), f = m - 1 (exact); with s = f / (2 + f), log(1 + f) = 2 atanh(s)
 * = 2s + s R(s^2), R = 2s^2/3 + 2s^4/5 + ... (|s| <= 0.172: ten terms leave
 * < 1e-19), and as 2s = f - s f, log(1 + f) = f - (h - s (h + R)) with h =
 * f^2/2. e ln2_hi (exact) + f (exact) are two-summed, the small rest added to
 * the low part: its rounding is ~2^-53 of at most 0.1, not of the result. */
static void log_dd(double x, double *hi, double *lo) {
    union { uint64_t u; double d; } v = { .d = x };
    int64_t e = 0;
    if ((v.u >> 52) == 0) {                         /* subnormal: scale to normal */
        v.d = x * 0x1p54;
        e = -54;
    }
    e += (int64_t)(v.u >> 52) - 1023;
    v.u = (v.u & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;   /* m in [1, 2) */
    if (v.d > 1.4142135623730951) {                 /* to [sqrt(1/2), sqrt(2)) */
        v.d = v.d * 0.5;
        e += 1;
    }
    const double f = v.d - 1.0, d = 2.0 + f, dl = (2.0 - d) + f;   /* 2 + f = d + dl, exact */
    const double s = f / d, sp = s * d;                               /* s + sl = f / (d + dl) */
    const double sl = (((f - sp) - prod_err(s, d, sp)) - s * dl) / d;
    const double z = s * s, zl = prod_err(s, s, z) + 2.0 * s * sl;    /* s^2 = z + zl */
    const double ff = f * f, h = 0.5 * ff, hl = 0.5 * prod_err(f, f, ff);
    double W = L10;                                 /* R = (z + zl) (L1 + z W) */
    W = W * z + L9;
    W = W * z + L8;
    W = W * z + L7;
    W = W * z + L6;
    W = W * z + L5;
    W = W * z + L4;
    W = W * z + L3;
    W = W * z + L2;
    double q = L1, ql = L1_LO;
    acc_d(&q, &ql, z * W);
    const double R = z * q, Rl = prod_err(z, q, R) + (z * ql + zl * q);
    double g = h, gl = hl + Rl;                     /* s (h + R) = (s + sl) (g + gl) */
    acc_d(&g, &gl, R);
    const double t = s * g, tl = prod_err(s, g, t) + (s * gl + sl * g);
    const double ed = (double)e;
    *hi = ed * LN2_HI;
    *lo = 0.0;
    acc_d(hi, lo, f);
    acc_d(hi, lo, -h);
    acc_d(hi, lo, t);
    *lo += (tl - hl) + ed * LN2_LO;
}

/* See kernels.h. */
double ms_log_d(double x) {
    if (x != x) return x + x;
    if (x < 0.0) return NAN;
    if (x == 0.0) return -INFINITY;
    if (x == INFINITY) return x;
    double hi, lo;
    log_dd(x, &hi, &lo);
    return hi + lo;
}

/* See kernels.h: b^y = e^(y log b), y log b carried as two doubles. */
double ms_pow_d(double b, double y) {
    if (b != b || y != y || b < 0.0) return NAN;
    if (y == 0.0 || b == 1.0) return 1.0;
    if (b == 0.0 || b == INFINITY) return (y > 0) == (b == 0.0) ? 0.0 : INFINITY;
    double lh, ll;
    log_dd(b, &lh, &ll);
    const double t = y * lh;
    if (t != t || t > 709.79 || t < -745.3) return ms_exp_d(t);
    const double tl = prod_err(y, lh, t) + y * ll;
    const double th = t + tl;
    if (th > 709.782712893384) return INFINITY;
    if (th < -745.2) return 0.0;
    return exp_dd(th, tl - (th - t));
}

/* pi/2 as three doubles (their sum is pi/2 to ~2^-160) and 2/pi. */
static const double PIO2_1 = 0x1.921fb54442d18p+0;
static const double PIO2_2 = 0x1.1a62633145c07p-54;
static const double PIO2_3 = -0x1.f1976b7ed8fbcp-110;
static const double INV_PIO2 = 0x1.45f306dc9c883p-1;

/* 1 / (n (n + 1)): the ratios of consecutive Taylor terms, innermost first:
 * sin r = r (1 - z/6 (1 - z/20 (... (1 - z/420)))) and cos r = 1 - z/2 (1 -
 * z/12 (... (1 - z/462))), z = r^2 (the outer 1/6 and 1/2 are applied apart). */
static const double SIN_RATIOS[] = { 1.0 / 420, 1.0 / 342, 1.0 / 272, 1.0 / 210, 1.0 / 156,
                                     1.0 / 110, 1.0 / 72, 1.0 / 42, 1.0 / 20 };
static const double COS_RATIOS[] = { 1.0 / 462, 1.0 / 380, 1.0 / 306, 1.0 / 240, 1.0 / 182,
                                     1.0 / 132, 1.0 / 90, 1.0 / 56, 1.0 / 30 };

/* 1 - z q[n-1] (1 - z q[n-2] (... (1 - z q[0]))): the nested series above. */
static double nested(double z, const double *q, int n) {
    double u = 1.0 - z * q[0];
    for (int i = 1; i < n; i++) u = 1.0 - z * q[i] * u;
    return u;
}

/* See kernels.h. x = k pi/2 + r: k rounded from x 2/pi, r = x - k pi/2 as
 * r + rl from the three parts of pi/2 (the products' errors exact, the sum
 * two-summed, so r keeps ~100 bits however close x is to a multiple of
 * pi/2 while |k| < 2^31). On |r| <= pi/4 sin and cos are their Taylor series
 * to r^21 and r^22 (truncation < 2e-22) in nested form: sin = r + (small),
 * cos = (1 - r^2/2, two-summed) + (small), the tail rl added to first order;
 * k mod 4 picks the signs and which is which. */
void ms_sincos_d(double x, double *sn, double *cs) {
    if (!(x >= -0x1p30 && x <= 0x1p30)) {           /* NaN, inf, or too large */
        *sn = *cs = NAN;
        return;
    }
    if (x == 0.0) {                                 /* sin keeps the sign of zero */
        *sn = x;
        *cs = 1.0;
        return;
    }
    const double kd = (x * INV_PIO2 + ROUND_MAGIC) - ROUND_MAGIC;
    const double p1 = kd * PIO2_1, p2 = kd * PIO2_2;
    double r = x - p1, rl = 0.0;                    /* exact: x and p1 are within a factor 2 */
    acc_d(&r, &rl, -prod_err(kd, PIO2_1, p1));
    acc_d(&r, &rl, -p2);
    acc_d(&r, &rl, -(prod_err(kd, PIO2_2, p2) + kd * PIO2_3));
    const double rh = r + rl;                       /* renormalized: |rl| <= ulp(rh) / 2 */
    rl = rl - (rh - r);
    r = rh;
    const double z = r * r, zl = prod_err(r, r, z);
    const double u = nested(z, SIN_RATIOS, (int)(sizeof SIN_RATIOS / sizeof *SIN_RATIOS));
    const double s = r + (rl * (1.0 - z * 0.5) - r * (z * (1.0 / 6) * u));
    const double v = nested(z, COS_RATIOS, (int)(sizeof COS_RATIOS / sizeof *COS_RATIOS));
    const double hz = z * 0.5, c1 = 1.0 - hz, e1 = (1.0 - c1) - hz;   /* exact: hz <= 0.31 */
    const double c = c1 + (e1 + (hz * (z * (1.0 / 12) * v) - (zl * 0.5 + rl * r)));
    switch ((int64_t)kd & 3) {
    case 0: *sn = s; *cs = c; break;
    case 1: *sn = c; *cs = -s; break;
    case 2: *sn = -s; *cs = -c; break;
    default: *sn = -c; *cs = s; break;
    }
}
