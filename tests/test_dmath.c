/* tests/test_dmath.c - the double-precision functions of kernels/ref/math.c
 * (ms_exp_d, ms_log_d, ms_pow_d, ms_sincos_d).
 *
 * 1. Accuracy against libm's long double functions (64-bit significands, so
 *    a double's error is measured to 1/2048 ulp): within 1 ulp on random
 *    inputs over each function's range, near the hard places (multiples of
 *    pi/2 for sin and cos, 1 for log, the overflow and subnormal edges of
 *    exp), and on the angles gpt-oss's RoPE table takes (positions to 131072
 *    times the released configs' frequencies); ms_pow_d on bases and
 *    exponents across the range of normal results, and at the RoPE's.
 * 2. Special values: NaN, infinities, zeros of both signs, the domain edge of
 *    ms_sincos_d (|x| <= 2^30).
 * 3. The bits: a digest of the results on a fixed input set, equal to the
 *    one recorded here. These functions exist so that a result's bits do not
 *    follow the CPU, the compiler or the C library; a build where they do
 *    fails this check. (A deliberate change of the functions records the new
 *    digest in the same commit, with the reason.)
 */
#include "check.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng_s = 0x243F6A8885A308D3ull;
static uint64_t rng_u64(void) {               /* xorshift64* */
    rng_s ^= rng_s >> 12;
    rng_s ^= rng_s << 25;
    rng_s ^= rng_s >> 27;
    return rng_s * 0x2545F4914F6CDD1Dull;
}
static double rng_in(double lo, double hi) { return lo + (hi - lo) * ((double)(rng_u64() >> 11) * 0x1p-53); }

static uint64_t d2u(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
static double u2d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

/* |got - want| in ulps of the double nearest want (its binade's ulp). */
static double ulps(double got, long double want) {
    const double w = (double)want;
    if (w == 0.0) return got == 0.0 ? 0.0 : INFINITY;
    int e;
    frexp(w, &e);
    const long double ulp = ldexpl(1.0L, (e - 53) < -1074 ? -1074 : e - 53);
    return (double)(fabsl((long double)got - want) / ulp);
}

typedef struct worst { double err, at; long n; } worst;
static void note(worst *w, double err, double at) {
    w->n++;
    if (err > w->err || err != err) { w->err = err; w->at = at; }
}

static void sc_check(worst *w, double x) {
    double s, c;
    ms_sincos_d(x, &s, &c);
    const double es = ulps(s, sinl((long double)x)), ec = ulps(c, cosl((long double)x));
    note(w, es > ec ? es : ec, x);
}

/* ms_oss_rope_freqs's frequencies for head_dim 64, theta 150000, YaRN
 * factor 32 over 4096 (the released configs), computed here with long
 * double libm: what the angles' table multiplies positions by. */
static void rope_freqs(double *f) {
    const long double d = 64, base = 150000, factor = 32, two_pi = 2 * 3.14159265358979323846264338L;
    const long double lo = d * logl(4096 / (32 * two_pi)) / (2 * logl(base));
    const long double hi = d * logl(4096 / (1 * two_pi)) / (2 * logl(base));
    for (int i = 0; i < 32; i++) {
        const long double pf = powl(base, (long double)(2 * i) / d);
        long double ramp = ((long double)i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        f[i] = (double)((1 / (factor * pf)) * ramp + (1 / pf) * (1 - ramp));
    }
}

static void test_sincos(void) {
    worst w = { 0, 0, 0 };
    for (int i = 0; i < 400000; i++) sc_check(&w, rng_in(-4.0, 4.0));
    for (int i = 0; i < 400000; i++) sc_check(&w, rng_in(-2e5, 2e5));
    for (int i = 0; i < 200000; i++) sc_check(&w, rng_in(-0x1p30, 0x1p30));
    for (int i = 0; i < 100000; i++) sc_check(&w, rng_in(-1e-6, 1e-6));
    /* the doubles nearest k pi/2, and their neighbours: the reduction's hard cases */
    for (int64_t k = 1; k < 2000000; k += 1 + (k >> 4)) {
        const double x = (double)((long double)k * 1.57079632679489661923132169163975144L);
        for (int d = -3; d <= 3; d++) sc_check(&w, u2d(d2u(x) + (uint64_t)(int64_t)d));
    }
    double f[32];
    rope_freqs(f);
    for (int64_t p = 0; p <= 131072; p += 1 + p / 64)
        for (int i = 0; i < 32; i++) sc_check(&w, (double)p * f[i]);
    CHECK(w.err < 1.0, "sin / cos: worst %.3f ulp at %.17g (%ld inputs)", w.err, w.at, w.n);
    printf("sincos: worst %.3f ulp over %ld inputs\n", w.err, w.n);

    const double odd[] = { 0.0, -0.0, 0x1p-1074, -0x1p-1022, 1e-300, 0x1p30, -0x1p30 };
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
        double s, c;
        ms_sincos_d(odd[i], &s, &c);
        CHECK(d2u(s) == d2u((double)sinl(odd[i])) && d2u(c) == d2u((double)cosl(odd[i])),
              "sincos(%a) = %a, %a; libm %a, %a", odd[i], s, c, (double)sinl(odd[i]), (double)cosl(odd[i]));
    }
    const double bad[] = { NAN, INFINITY, -INFINITY, 0x1p30 * (1 + 0x1p-52), -1e300 };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        double s = 0, c = 0;
        ms_sincos_d(bad[i], &s, &c);
        CHECK(isnan(s) && isnan(c), "sincos(%a) outside the domain: %a, %a", bad[i], s, c);
    }
}

static void test_exp(void) {
    worst w = { 0, 0, 0 };
    for (int i = 0; i < 400000; i++) {
        const double y = rng_in(-745.0, 709.7);
        note(&w, ulps(ms_exp_d(y), expl(y)), y);
    }
    for (int i = 0; i < 200000; i++) {
        const double y = rng_in(-1.0, 1.0);
        note(&w, ulps(ms_exp_d(y), expl(y)), y);
    }
    CHECK(w.err < 1.0, "exp: worst %.3f ulp at %.17g", w.err, w.at);
    printf("exp: worst %.3f ulp over %ld inputs\n", w.err, w.n);
    const double edge[] = { 0.0, -0.0, 709.78, 709.782712893384, -708.4, -708.3964185322641, -744.4, -745.13, 1e-300 };
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
        const double g = ms_exp_d(edge[i]), want = (double)expl(edge[i]);
        CHECK(ulps(g, expl(edge[i])) < 1.0 || g == want, "exp(%.17g) = %a, libm %a", edge[i], g, want);
    }
    CHECK(ms_exp_d(709.8) == INFINITY && ms_exp_d(INFINITY) == INFINITY, "exp overflow");
    CHECK(ms_exp_d(-746.0) == 0.0 && ms_exp_d(-INFINITY) == 0.0, "exp underflow");
    CHECK(isnan(ms_exp_d(NAN)), "exp(NaN)");
}

static void test_log(void) {
    worst w = { 0, 0, 0 };
    for (int i = 0; i < 400000; i++) {       /* any positive finite double, by its bits */
        const double x = u2d(rng_u64() % 0x7FF0000000000000ull);
        if (x > 0) note(&w, ulps(ms_log_d(x), logl(x)), x);
    }
    for (int i = 0; i < 400000; i++) {
        const double x = rng_in(0.5, 2.0);
        note(&w, ulps(ms_log_d(x), logl(x)), x);
    }
    for (int d = -2000; d <= 2000; d++) {    /* the doubles around 1 */
        const double x = u2d(d2u(1.0) + (uint64_t)(int64_t)d);
        if (d != 0) note(&w, ulps(ms_log_d(x), logl(x)), x);
    }
    CHECK(w.err < 1.0, "log: worst %.3f ulp at %a", w.err, w.at);
    printf("log: worst %.3f ulp over %ld inputs\n", w.err, w.n);
    CHECK(ms_log_d(1.0) == 0.0 && !signbit(ms_log_d(1.0)), "log(1) = +0");
    CHECK(ms_log_d(0.0) == -INFINITY && ms_log_d(-0.0) == -INFINITY, "log(0) = -inf");
    CHECK(ms_log_d(INFINITY) == INFINITY, "log(inf) = inf");
    CHECK(isnan(ms_log_d(-1.0)) && isnan(ms_log_d(-INFINITY)) && isnan(ms_log_d(NAN)), "log of negatives, NaN");
    CHECK(ulps(ms_log_d(0x1p-1074), logl(0x1p-1074L)) < 1.0, "log of the smallest subnormal");
}

static void test_pow(void) {
    worst w = { 0, 0, 0 };
    for (int i = 0; i < 400000; i++) {
        const double b = rng_in(1e-6, 1e6), y = rng_in(-2.0, 2.0);
        note(&w, ulps(ms_pow_d(b, y), powl(b, y)), b);
    }
    for (int i = 0; i < 300000; i++) {       /* results across the range of normal doubles */
        const double b = rng_in(1e-3, 1e3), y = rng_in(-100.0, 100.0);
        if (fabs(y * log(b)) < 700) note(&w, ulps(ms_pow_d(b, y), powl(b, y)), b);
    }
    for (int i = 0; i < 64; i++) note(&w, ulps(ms_pow_d(150000.0, i / 64.0), powl(150000.0L, i / 64.0L)), i);
    CHECK(w.err < 1.0, "pow: worst %.3f ulp at b = %.17g", w.err, w.at);
    printf("pow: worst %.3f ulp over %ld inputs\n", w.err, w.n);
    CHECK(ms_pow_d(150000.0, 0.0) == 1.0 && ms_pow_d(1.0, 1e300) == 1.0 && ms_pow_d(2.0, 10.0) == 1024.0 && ms_pow_d(10.0, 3.0) == 1000.0,
          "pow's exact cases");
    CHECK(ms_pow_d(0.0, 2.0) == 0.0 && ms_pow_d(0.0, -2.0) == INFINITY, "pow of 0");
    CHECK(isnan(ms_pow_d(-2.0, 0.5)) && isnan(ms_pow_d(NAN, 1.0)), "pow of negatives, NaN");
}

/* FNV-1a over the results' bits on a fixed input set (its own generator, so
 * the checks above can change without moving it). */
static uint64_t fnv(uint64_t h, double d) {
    uint64_t u = d2u(d);
    for (int i = 0; i < 8; i++) {
        h ^= (u >> (8 * i)) & 0xFF;
        h *= 0x100000001B3ull;
    }
    return h;
}

static void test_digest(void) {
    uint64_t h = 0xCBF29CE484222325ull;
    rng_s = 0x13198A2E03707344ull;
    for (int i = 0; i < 100000; i++) {
        double s, c;
        const double x = rng_in(-0x1p20, 0x1p20);
        ms_sincos_d(x, &s, &c);
        h = fnv(fnv(h, s), c);
        h = fnv(h, ms_exp_d(rng_in(-740.0, 709.0)));
        h = fnv(h, ms_log_d(u2d(rng_u64() % 0x7FF0000000000000ull)));
        const double b = rng_in(1.0, 2e5), y = rng_in(-1.0, 1.0);   /* in this order */
        h = fnv(h, ms_pow_d(b, y));
    }
    const uint64_t want = 0xe691008ba82ca422ull;
    CHECK(h == want, "digest of the results' bits %016llx, recorded %016llx", (unsigned long long)h,
          (unsigned long long)want);
}

int main(void) {
    test_sincos();
    test_exp();
    test_log();
    test_pow();
    test_digest();
    return CHECK_DONE("test_dmath");
}
