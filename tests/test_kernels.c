/* tests/test_kernels.c - the numeric kernels: reference semantics, and every
 * SIMD table bit-identical to the reference.
 *
 * Covers: the T16 tree (hand cases a naive sum or an unfused FMA gets wrong),
 *   the reference against an independent T16 written here (decoding done
 *   here too), every available SIMD table against ms_kern_ref with memcmp on
 *   many shapes (ragged cols, ragged row counts, row ranges not starting at 0,
 *   NaN-poisoned outputs outside the range, extreme values), MXFP4 decoding
 *   (nibble order, all 16 codes, all 256 scale bytes, 255 = skipped group and
 *   counted once), matmat == T x matvec bitwise, SiTU-GLU caps (sigmoid of the
 *   UNCAPPED gate), rmsnorm / l2norm / softmax on hand-checkable vectors, the
 *   portable transcendental functions against libm on millions of inputs,
 *   and ms_kernels_select.
 * A table the CPU lacks is reported as "skipped" and adds no checks.
 */
#include "kernels/kernels.h"

#include "check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------------- */

static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static uint64_t rng_u64(void) {
    rng_s ^= rng_s >> 12;
    rng_s ^= rng_s << 25;
    rng_s ^= rng_s >> 27;
    return rng_s * 0x2545F4914F6CDD1Dull;
}
static uint32_t rng_u32(void) { return (uint32_t)(rng_u64() >> 32); }
/* uniform in [-1, 1) */
static float rng_unit(void) { return (float)((double)(rng_u64() >> 11) * 0x1p-52 - 1.0); }

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* a NaN payload the kernels never produce (they only make the default NaN) */
static const uint32_t POISON = 0x7FC0DEADu;
static void poison(float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = u2f(POISON); }

/* float order as integers: adjacent floats differ by 1; +0 and -0 both 0 */
static int64_t ford(float f) {
    uint32_t u = f2u(f);
    return (u & 0x80000000u) ? -(int64_t)(u & 0x7FFFFFFFu) : (int64_t)u;
}
static int64_t ulp_dist(float a, float b) {
    if (a != a || b != b) return (a != a && b != b) ? 0 : INT64_MAX;
    int64_t d = ford(a) - ford(b);
    return d < 0 ? -d : d;
}

/* An independent T16 (kernels.h) with a skip flag per element: the reference
 * is checked against this, the SIMD tables against the reference. */
static float t16_dot(const float *w, const float *x, const unsigned char *skip, int64_t n) {
    float acc[16];
    for (int l = 0; l < 16; l++) acc[l] = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (!skip || !skip[i]) acc[i % 16] = fmaf(w[i], x[i], acc[i % 16]);
    float s8[8], s4[4], s2[2];
    for (int j = 0; j < 8; j++) s8[j] = acc[j] + acc[j + 8];
    for (int j = 0; j < 4; j++) s4[j] = s8[j] + s8[j + 4];
    for (int j = 0; j < 2; j++) s2[j] = s4[j] + s4[j + 2];
    return s2[0] + s2[1];
}

/* MXFP4 decode written from the spec (magnitude * 2^(s-127)); code 8 -> +0
 * as in kernels.h ("(float)(signed code2)"). */
static float mx_value(int code, int s) {
    static const float mag[8] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f };
    float m = mag[code & 7];
    if (m == 0.0f) return 0.0f;
    float v = ldexpf(m, s - 127);
    return (code & 8) ? -v : v;
}

static uint16_t f2bf16_trunc(float f) { return (uint16_t)(f2u(f) >> 16); }

/* A value for stress inputs: mostly ordinary, sometimes extreme (never NaN). */
static float extreme_f32(void) {
    switch (rng_u32() % 12) {
    case 0: return rng_unit() * 3.0e38f;                 /* huge */
    case 1: return rng_unit() * 1.0e-38f;                /* tiny normal / subnormal */
    case 2: return rng_unit() * 1.0e-43f;                /* deep subnormal */
    case 3: return -0.0f;
    case 4: return 0.0f;
    case 5: return (rng_u32() & 1) ? INFINITY : -INFINITY;
    case 6: { uint32_t u = rng_u32(); if ((u & 0x7F800000u) == 0x7F800000u) u &= 0xBF800000u;
              return u2f(u); }                           /* any non-NaN pattern */
    default: return rng_unit() * 4.0f;
    }
}
static uint16_t extreme_bf16(void) {
    uint16_t b = (uint16_t)rng_u32();
    if ((b & 0x7F80u) == 0x7F80u && (b & 0x7Fu)) b &= 0xFF80u;   /* NaN -> +-inf */
    return b;
}

/* the tables to compare; NULL when the CPU lacks them */
enum { N_TAB = 4 };
static const ms_kern *tables[N_TAB];
static const char *table_names[N_TAB] = { "ref", "avx2", "avx512", "avx512-l2" };

/* ---- the dispatch ------------------------------------------------------------ */

static void test_select(void) {
    const ms_kern *a = ms_kernels_select(NULL);
    const ms_kern *b = ms_kernels_select("auto");
    CHECK(a != NULL && a == b, "auto must give one table");
    CHECK(ms_kernels_select("ref") == &ms_kern_ref, "ref");
    CHECK(ms_kernels_select("nonsense") == NULL, "unknown names give NULL");
    CHECK(ms_kernels_select("") == NULL, "empty name gives NULL");
    for (int i = 0; i < N_TAB; i++) {
        tables[i] = ms_kernels_select(table_names[i]);
        if (tables[i]) CHECK(strcmp(tables[i]->name, table_names[i]) == 0, "name %s", table_names[i]);
    }
    CHECK(ms_kernels_select("avx512") == tables[2], "idempotent");
    CHECK(!tables[2] == !tables[3], "avx512 and avx512-l2 come together");
    /* auto picks the widest supported; of the two avx512 tables, the one
     * with the prefetches to L2 on every CPU but AMD family 0x1a (Zen 5) */
    int l2 = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax, ebx, ecx, edx, fam = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        fam = (eax >> 8) & 0xf;
        if (fam == 0xf) fam += (eax >> 20) & 0xff;
    }
    l2 = !(__builtin_cpu_is("amd") && fam == 0x1a);
#endif
    const char *best = tables[2] ? (l2 ? "avx512-l2" : "avx512") : tables[1] ? "avx2" : "ref";
    CHECK(a && strcmp(a->name, best) == 0, "auto picked %s, expected %s", a ? a->name : "-", best);
    for (int i = 1; i < N_TAB; i++)
        if (!tables[i]) printf("test_kernels: %s not supported by this CPU: its comparisons skipped\n",
                               table_names[i]);
}

static void test_scale_table(void) {
    int bad = 0;
    for (int s = 0; s < 255; s++)
        if (f2u(ms_mxfp4_scale[s]) != f2u(ldexpf(1.0f, s - 128))) bad++;
    CHECK(bad == 0, "%d scale entries differ from 2^(s-128)", bad);
    CHECK(f2u(ms_mxfp4_scale[255]) == 0u, "scale[255] must be +0.0f");
    CHECK(ms_mxfp4_scale[0] > 0.0f && ms_mxfp4_scale[0] < FLT_MIN, "2^-128 is a (nonzero) subnormal");
}

/* ---- the T16 tree ------------------------------------------------------------- */

static void test_t16_tree(void) {
    /* 2^24 in lane 0, 1 in lanes 1 and 9. Sequentially each +1 is lost
     * (2^24 + 1 rounds to 2^24); T16 adds lane 1 and lane 9 first (s8[1] = 2)
     * and 2^24 + 2 is exact. A tree pairing adjacent lanes also loses them. */
    float w[32], x[32];
    for (int i = 0; i < 32; i++) { w[i] = 0.0f; x[i] = 1.0f; }
    w[0] = 16777216.0f; w[1] = 1.0f; w[9] = 1.0f;
    float naive = 0.0f;
    for (int i = 0; i < 10; i++) naive = naive + w[i] * x[i];
    CHECK(naive == 16777216.0f, "the case must defeat a sequential sum (%.1f)", naive);
    CHECK(t16_dot(w, x, NULL, 10) == 16777218.0f, "test-side T16");
    uint16_t wb[32];
    for (int i = 0; i < 32; i++) wb[i] = f2bf16_trunc(w[i]);   /* all exact in bf16 */
    for (int k = 0; k < N_TAB; k++) {
        if (!tables[k]) continue;
        for (int n = 10; n <= 32; n += 22) {   /* ragged and full-width */
            float y = 0.0f, yf = 0.0f;
            tables[k]->matvec_bf16(&y, wb, x, 0, 1, n);
            tables[k]->matvec_f32(&yf, w, x, 0, 1, n);
            CHECK(y == 16777218.0f, "%s bf16 T16 n=%d: %.1f", table_names[k], n, y);
            CHECK(yf == 16777218.0f, "%s f32 T16 n=%d: %.1f", table_names[k], n, yf);
        }
    }
    /* Fusion: lane 0 gets -1*1 then (1+2^-12)^2 = 1 + 2^-11 + 2^-24 (exact in
     * an FMA). Rounding the product first loses 2^-24 (a tie to even). Element
     * 16 must also land in lane 0 (i % 16), on top of element 0. */
    float wf[17], xf[17];
    for (int i = 0; i < 17; i++) { wf[i] = 0.0f; xf[i] = 0.0f; }
    wf[0] = -1.0f; xf[0] = 1.0f;
    wf[16] = 1.0f + 0x1p-12f; xf[16] = 1.0f + 0x1p-12f;
    float expect = 0x1p-11f + 0x1p-24f;
    volatile float prod = wf[16] * xf[16];
    CHECK(prod + -1.0f != expect, "the case must defeat an unfused multiply-add");
    for (int k = 0; k < N_TAB; k++) {
        if (!tables[k]) continue;
        float y = 0.0f;
        tables[k]->matvec_f32(&y, wf, xf, 0, 1, 17);
        CHECK(f2u(y) == f2u(expect), "%s fused lane: %a vs %a", table_names[k], y, expect);
    }
    /* Negative zero survives the tree only if every lane holds -0. Each
     * product -1e-30 * 1e-30 underflows to -0, so every lane is -0 and the
     * result is -0. In a ragged tail the unused lanes must be left alone: an
     * FMA of +0 * +0 there would turn -0 into +0 (result +0). */
    float wz[40], xz[40];
    uint16_t wzb[40];
    for (int i = 0; i < 40; i++) { wz[i] = -1e-30f; xz[i] = 1e-30f; wzb[i] = f2bf16_trunc(wz[i]); }
    static const int nz[] = { 16, 17, 20, 31, 32, 33, 40 };
    for (int k = 0; k < N_TAB; k++) {
        if (!tables[k]) continue;
        for (size_t i = 0; i < sizeof nz / sizeof nz[0]; i++) {
            float yb = 1.0f, yf = 1.0f;
            tables[k]->matvec_bf16(&yb, wzb, xz, 0, 1, nz[i]);
            tables[k]->matvec_f32(&yf, wz, xz, 0, 1, nz[i]);
            CHECK(f2u(yb) == 0x80000000u && f2u(yf) == 0x80000000u,
                  "%s: all -0 lanes, cols %d: got %g %g, expected -0 -0", table_names[k], nz[i], yb, yf);
        }
    }
}

/* ---- dense products against the reference -------------------------------------- */

enum { NROWS = 13 };
static const int64_t dense_cols[] = { 0, 1, 15, 16, 17, 31, 32, 33, 64, 100, 4095, 7168 };
static const int64_t ranges[][2] = { { 0, NROWS }, { 1, NROWS }, { 3, 10 }, { 5, 6 }, { 7, 7 }, { 2, 11 } };
enum { NRANGES = sizeof ranges / sizeof ranges[0] };

/* y[r0..r1) must equal want bitwise; every other entry must still be POISON */
static int check_range(const float *y, const float *want, int64_t n, int64_t r0, int64_t r1) {
    for (int64_t r = 0; r < n; r++) {
        if (r >= r0 && r < r1) {
            if (f2u(y[r]) != f2u(want[r])) return (int)r + 1;
        } else if (f2u(y[r]) != POISON) {
            return -(int)r - 1;
        }
    }
    return 0;
}

static void test_dense_vs_ref(void) {
    for (size_t ic = 0; ic < sizeof dense_cols / sizeof dense_cols[0]; ic++) {
        int64_t cols = dense_cols[ic];
        for (int mode = 0; mode < 2; mode++) {
            int64_t nw = NROWS * cols;
            uint16_t *Wb = malloc((size_t)(nw + 1) * sizeof *Wb);
            float *Wf = malloc((size_t)(nw + 1) * sizeof *Wf);
            float *Wd = malloc((size_t)(nw + 1) * sizeof *Wd);
            float *x = malloc((size_t)(cols + 1) * sizeof *x);
            float want_b[NROWS], want_f[NROWS], y[NROWS];
            for (int64_t i = 0; i < nw; i++) {
                Wb[i] = mode ? extreme_bf16() : f2bf16_trunc(rng_unit());
                Wf[i] = mode ? extreme_f32() : rng_unit();
                Wd[i] = ms_bf16_to_f32(Wb[i]);
            }
            for (int64_t i = 0; i < cols; i++) x[i] = mode ? extreme_f32() : rng_unit();

            /* the reference against the independent T16 */
            ms_kern_ref.matvec_bf16(want_b, Wb, x, 0, NROWS, cols);
            ms_kern_ref.matvec_f32(want_f, Wf, x, 0, NROWS, cols);
            int bad = 0;
            for (int r = 0; r < NROWS; r++) {
                float tb = t16_dot(Wd + r * cols, x, NULL, cols);
                float tf = t16_dot(Wf + r * cols, x, NULL, cols);
                if (f2u(tb) != f2u(want_b[r]) || f2u(tf) != f2u(want_f[r])) bad++;
            }
            CHECK(bad == 0, "ref != test T16 on %d rows (cols %lld mode %d)", bad, (long long)cols, mode);

            for (int k = 0; k < N_TAB; k++) {
                if (!tables[k]) continue;
                for (int ir = 0; ir < NRANGES; ir++) {
                    int64_t r0 = ranges[ir][0], r1 = ranges[ir][1];
                    poison(y, NROWS);
                    tables[k]->matvec_bf16(y, Wb, x, r0, r1, cols);
                    int e = check_range(y, want_b, NROWS, r0, r1);
                    CHECK(e == 0, "%s bf16 cols %lld mode %d [%lld,%lld): row %d %s", table_names[k],
                          (long long)cols, mode, (long long)r0, (long long)r1, abs(e) - 1,
                          e > 0 ? "differs" : "written outside the range");
                    CHECK(r1 <= r0 || memcmp(y + r0, want_b + r0, (size_t)(r1 - r0) * 4) == 0,
                          "memcmp bf16");
                    poison(y, NROWS);
                    tables[k]->matvec_f32(y, Wf, x, r0, r1, cols);
                    e = check_range(y, want_f, NROWS, r0, r1);
                    CHECK(e == 0, "%s f32 cols %lld mode %d [%lld,%lld): row %d %s", table_names[k],
                          (long long)cols, mode, (long long)r0, (long long)r1, abs(e) - 1,
                          e > 0 ? "differs" : "written outside the range");
                }
            }
            free(Wb); free(Wf); free(Wd); free(x);
        }
    }
}

/* ---- MXFP4 ----------------------------------------------------------------------- */

/* 8192 and 8224: the avx512 matvec's fast 8-row block takes cols <= 8192 */
static const int64_t mx_cols[] = { 0, 32, 64, 96, 160, 3072, 3584, 4096, 7168, 8192, 8224 };

/* independent expectation for one row, with scale-255 groups removed */
static float mx_expect(const uint8_t *packed, const uint8_t *sc, const float *x, int64_t cols) {
    float *w = malloc((size_t)(cols + 1) * sizeof *w);
    unsigned char *skip = malloc((size_t)cols + 1);
    for (int64_t i = 0; i < cols; i++) {
        int s = sc[i / 32];
        int code = (i % 2 == 0) ? (packed[i / 2] & 15) : (packed[i / 2] >> 4);
        skip[i] = s == 255;
        w[i] = s == 255 ? 0.0f : mx_value(code, s);
    }
    float v = t16_dot(w, x, skip, cols);
    free(w); free(skip);
    return v;
}

static void test_mxfp4_vs_ref(void) {
    for (size_t ic = 0; ic < sizeof mx_cols / sizeof mx_cols[0]; ic++) {
        int64_t cols = mx_cols[ic], ng = cols / 32;
        /* mode 0: ordinary scales and x; 1: every scale byte (255 included) in
         * turn, ordinary x; 2: the same with extreme x; 3: every scale byte
         * but 255 (blocks without a skipped group: the avx512 fast block)
         * with extreme x */
        for (int mode = 0; mode < 4; mode++) {
            uint8_t *P = malloc((size_t)(NROWS * cols / 2 + 1));
            uint8_t *S = malloc((size_t)(NROWS * ng + 1));
            float *x = malloc((size_t)(cols + 1) * sizeof *x);
            for (int64_t i = 0; i < NROWS * cols / 2; i++) P[i] = (uint8_t)rng_u32();
            for (int64_t i = 0; i < NROWS * ng; i++) {
                if (mode == 0) S[i] = (uint8_t)(120 + rng_u32() % 16);
                else if (mode == 3) S[i] = (uint8_t)((i * 37 + 11) % 255);   /* 0..254 */
                else S[i] = (uint8_t)((i * 37 + 11) % 256);   /* every byte incl. 0 and 255 */
            }
            for (int64_t i = 0; i < cols; i++) x[i] = mode >= 2 ? extreme_f32() : rng_unit();

            float want[NROWS], y[NROWS];
            int64_t cnt_all = ms_kern_ref.matvec_mxfp4(want, P, S, x, 0, NROWS, cols);
            int bad = 0;
            for (int r = 0; r < NROWS; r++)
                if (f2u(mx_expect(P + r * cols / 2, S + r * ng, x, cols)) != f2u(want[r])) bad++;
            CHECK(bad == 0, "ref mxfp4 != test decode+T16 on %d rows (cols %lld mode %d)", bad,
                  (long long)cols, mode);
            for (int k = 0; k < N_TAB; k++) {
                if (!tables[k]) continue;
                for (int ir = 0; ir < NRANGES; ir++) {
                    int64_t r0 = ranges[ir][0], r1 = ranges[ir][1], n255 = 0;
                    for (int64_t i = r0 * ng; i < r1 * ng; i++) n255 += S[i] == 255;
                    if (ir == 0) CHECK(cnt_all == n255, "ref count %lld vs %lld", (long long)cnt_all,
                                       (long long)n255);
                    poison(y, NROWS);
                    int64_t cnt = tables[k]->matvec_mxfp4(y, P, S, x, r0, r1, cols);
                    int e = check_range(y, want, NROWS, r0, r1);
                    CHECK(e == 0, "%s mxfp4 cols %lld mode %d [%lld,%lld): row %d %s", table_names[k],
                          (long long)cols, mode, (long long)r0, (long long)r1, abs(e) - 1,
                          e > 0 ? "differs" : "written outside the range");
                    CHECK(cnt == n255, "%s mxfp4 count %lld, expected %lld", table_names[k],
                          (long long)cnt, (long long)n255);
                }
            }
            free(P); free(S); free(x);
        }
    }
}

/* every scale byte 0..255 on its own row; row 255 must equal the row without
 * that group (also when x is inf there, which a multiply by 0 would turn to NaN) */
static void test_mxfp4_scales(void) {
    enum { R = 256, C = 64 };
    static uint8_t P[R * C / 2], S[R * C / 32];
    float x[C], y[R];
    for (int i = 0; i < R * C / 2; i++) P[i] = (uint8_t)rng_u32();
    for (int r = 0; r < R; r++) { S[r * 2] = (uint8_t)r; S[r * 2 + 1] = 127; }
    for (int i = 0; i < C; i++) x[i] = rng_unit();
    for (int k = 0; k < N_TAB; k++) {
        if (!tables[k]) continue;
        poison(y, R);
        int64_t cnt = tables[k]->matvec_mxfp4(y, P, S, x, 0, R, C);
        CHECK(cnt == 1, "%s: one group with scale 255, counted %lld", table_names[k], (long long)cnt);
        int bad = 0;
        for (int r = 0; r < R; r++)
            if (f2u(y[r]) != f2u(mx_expect(P + r * C / 2, S + r * 2, x, C))) bad++;
        CHECK(bad == 0, "%s: %d rows of the all-scales matrix differ", table_names[k], bad);
    }
    /* row 255 alone: group 0 skipped; the result is the dot of group 1 */
    float w1[C], x2[C];
    for (int i = 0; i < C; i++) {
        int code = (i % 2 == 0) ? (P[255 * 32 + i / 2] & 15) : (P[255 * 32 + i / 2] >> 4);
        w1[i] = i < 32 ? 0.0f : mx_value(code, 127);
        x2[i] = i < 32 ? INFINITY : x[i];
    }
    float only1 = t16_dot(w1, x, NULL, C);
    for (int k = 0; k < N_TAB; k++) {
        if (!tables[k]) continue;
        float v = 0.0f, vinf = 0.0f;
        tables[k]->matvec_mxfp4(&v, P + 255 * 32, S + 255 * 2, x, 0, 1, C);
        tables[k]->matvec_mxfp4(&vinf, P + 255 * 32, S + 255 * 2, x2, 0, 1, C);
        CHECK(f2u(v) == f2u(only1), "%s: scale 255 group must contribute nothing", table_names[k]);
        CHECK(f2u(vinf) == f2u(only1), "%s: skipped group with inf x gave %g", table_names[k], vinf);
    }
    /* the group scale really is 2^(s-128) on the twice-magnitude code:
     * code 2 (magnitude 1) with s = 127 + e gives 2^e */
    uint8_t p1[16] = { 0x02 }, s1[1];
    float xo[32] = { 1.0f };
    for (int e = -127; e <= 127; e += 127) {
        s1[0] = (uint8_t)(127 + e);
        for (int k = 0; k < N_TAB; k++) {
            if (!tables[k]) continue;
            float v = 0.0f;
            tables[k]->matvec_mxfp4(&v, p1, s1, xo, 0, 1, 32);
            CHECK(v == ldexpf(1.0f, e), "%s: scale byte %d gave %a", table_names[k], 127 + e, v);
        }
    }
}

static void test_mxfp4_codes(void) {
    static const float expect[16] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6 };
    uint8_t p[16], s[1] = { 127 };   /* multiplier 2^(127-127) = 1 */
    float x[32];
    for (int k = 0; k < N_TAB; k++) {
        if (!tables[k]) continue;
        for (int c = 0; c < 16; c++) {
            for (int h = 0; h < 2; h++) {   /* low nibble -> element 0, high -> element 1 */
                memset(p, 0, sizeof p);
                memset(x, 0, sizeof x);
                p[0] = (uint8_t)(h ? c << 4 : c);
                x[h] = 1.0f;
                float v = 99.0f;
                tables[k]->matvec_mxfp4(&v, p, s, x, 0, 1, 32);
                CHECK(v == expect[c], "%s: code %d (%s nibble) decoded %g, expected %g",
                      table_names[k], c, h ? "high" : "low", v, expect[c]);
            }
        }
        /* nibble order: byte 0 = 0x12 -> element 0 = code 2 (1.0), element 1 =
         * code 1 (0.5); with x = (1, 1000) that is 501; swapped it is 1000.5 */
        memset(p, 0, sizeof p);
        memset(x, 0, sizeof x);
        p[0] = 0x12; x[0] = 1.0f; x[1] = 1000.0f;
        float v = 0.0f;
        tables[k]->matvec_mxfp4(&v, p, s, x, 0, 1, 32);
        CHECK(v == 501.0f, "%s: nibble order: got %g (1000.5 means swapped)", table_names[k], v);
        /* and the last byte of a group maps to elements 30, 31 */
        memset(p, 0, sizeof p);
        memset(x, 0, sizeof x);
        p[15] = 0x7A; x[30] = 1.0f; x[31] = 10.0f;   /* elem 30 = code A (-1), 31 = code 7 (6) */
        tables[k]->matvec_mxfp4(&v, p, s, x, 0, 1, 32);
        CHECK(v == 59.0f, "%s: elements 30/31 gave %g", table_names[k], v);
    }
}

/* The expert shapes themselves (gate/up 3072 x 3584, down 3584 x 3072): many
 * full row blocks, tails, row ranges on and off the pool's 16-row grain, with
 * skipped groups and extreme x; matvec and matmat (T = 1, 3, 4) against ref. */
static void test_mxfp4_real_shapes(void) {
    static const int64_t shp[2][2] = { { 3072, 3584 }, { 3584, 3072 } };
    for (int is = 0; is < 2; is++) {
        const int64_t rows = shp[is][0], cols = shp[is][1], ng = cols / 32, TT = 4;
        const int64_t rr[][2] = { { 0, rows }, { 16, rows - 16 }, { 5, 1000 }, { rows - 13, rows },
                                  { rows / 2 - 21, rows / 2 + 19 } };
        uint8_t *P = malloc((size_t)(rows * cols / 2));
        uint8_t *S = malloc((size_t)(rows * ng));
        float *X = malloc((size_t)(TT * cols) * sizeof *X);
        float *want = malloc((size_t)(TT * rows) * sizeof *want);
        float *Y = malloc((size_t)(TT * rows) * sizeof *Y);
        for (int64_t i = 0; i < rows * cols / 2; i++) P[i] = (uint8_t)rng_u32();
        /* skipped groups in the first half of the rows only, so the second
         * half runs avx512's fast 8-row block and a range can mix both */
        for (int64_t i = 0; i < rows * ng; i++)
            S[i] = (uint8_t)(i < rows / 2 * ng && rng_u32() % 97 == 0 ? 255 : 112 + rng_u32() % 24);
        /* finite results only (an inf or NaN row would hide any order change):
         * ordinary x with some exact zeros and subnormals */
        for (int64_t i = 0; i < TT * cols; i++)
            X[i] = i % 211 == 0 ? 0.0f : i % 223 == 0 ? rng_unit() * 1e-40f : rng_unit();
        int64_t n255_all = 0, n_finite = 0;
        for (int64_t t = 0; t < TT; t++)
            n255_all = ms_kern_ref.matvec_mxfp4(want + t * rows, P, S, X + t * cols, 0, rows, cols);
        for (int64_t i = 0; i < TT * rows; i++) n_finite += isfinite(want[i]) && want[i] != 0.0f;
        CHECK(n255_all > 0 && n_finite == TT * rows, "the shape test needs skipped groups (%lld) and "
              "finite nonzero results (%lld of %lld)", (long long)n255_all, (long long)n_finite,
              (long long)(TT * rows));
        for (int k = 1; k < N_TAB; k++) {
            if (!tables[k]) continue;
            for (size_t ir = 0; ir < sizeof rr / sizeof rr[0]; ir++) {
                int64_t r0 = rr[ir][0], r1 = rr[ir][1], n255 = 0;
                for (int64_t i = r0 * ng; i < r1 * ng; i++) n255 += S[i] == 255;
                poison(Y, rows);
                int64_t cnt = tables[k]->matvec_mxfp4(Y, P, S, X, r0, r1, cols);
                int e = check_range(Y, want, rows, r0, r1);
                CHECK(e == 0 && cnt == n255, "%s mxfp4 %lldx%lld [%lld,%lld): row %d %s, count %lld of %lld",
                      table_names[k], (long long)rows, (long long)cols, (long long)r0, (long long)r1,
                      abs(e) - 1, e > 0 ? "differs" : e < 0 ? "written outside the range" : "ok",
                      (long long)cnt, (long long)n255);
                static const int64_t Ts[] = { 1, 3, 4 };
                for (size_t it = 0; it < sizeof Ts / sizeof Ts[0]; it++) {
                    int64_t T = Ts[it], bad = 0;
                    poison(Y, TT * rows);
                    cnt = tables[k]->matmat_mxfp4(Y, rows, P, S, X, cols, T, r0, r1, cols);
                    for (int64_t t = 0; t < T; t++)
                        bad += check_range(Y + t * rows, want + t * rows, rows, r0, r1) != 0;
                    CHECK(bad == 0 && cnt == n255, "%s matmat_mxfp4 %lldx%lld T %lld [%lld,%lld): %lld tokens differ",
                          table_names[k], (long long)rows, (long long)cols, (long long)T, (long long)r0,
                          (long long)r1, (long long)bad);
                }
            }
        }
        free(P); free(S); free(X); free(want); free(Y);
    }
}

/* Subnormal x through the MXFP4 matvec. avx512 runs the lanes where x is
 * subnormal as (w * 2^-24) * (x * 2^24), which is exact only while the group's
 * scale byte keeps w * 2^-24 normal (>= 26); blocks with a smaller byte must
 * take the plain path. Scale bytes around that bound, x with subnormals
 * everywhere / in the first groups only / scattered (some rows' sums and
 * partial sums subnormal), row ranges on and off the 8-row blocks: every
 * table equal to ref bit for bit. */
static void test_mxfp4_subnormal_x(void) {
    enum { R = 96, C = 256, NG = C / 32 };
    static uint8_t P[R * C / 2], S[R * NG];
    static float x[C], want[R], y[R];
    for (int i = 0; i < R * C / 2; i++) P[i] = (uint8_t)rng_u32();
    for (int b = 0; b < R / 8; b++)         /* block b: bytes around 26, or ordinary, or tiny */
        for (int i = 0; i < 8 * NG; i++)
            S[b * 8 * NG + i] = (uint8_t)(b % 3 == 0 ? 20 + rng_u32() % 12
                                          : b % 3 == 1 ? 26 + rng_u32() % 100 : rng_u32() % 8);
    for (int pat = 0; pat < 3; pat++) {
        for (int i = 0; i < C; i++) {
            const float sub = rng_unit() * 0x1p-127f, norm = rng_unit() * (pat == 2 ? 0x1p-110f : 1.0f);
            x[i] = pat == 0 ? sub : pat == 1 ? (i < 40 ? sub : norm) : (i % 7 == 3 ? sub : norm);
        }
        ms_kern_ref.matvec_mxfp4(want, P, S, x, 0, R, C);
        int n_sub = 0;
        for (int r = 0; r < R; r++) n_sub += want[r] != 0.0f && fabsf(want[r]) < FLT_MIN;
        CHECK(pat != 0 || n_sub > 0, "pattern 0 must give subnormal sums (%d)", n_sub);
        static const int rr[][2] = { { 0, R }, { 3, R - 5 }, { 8, 24 } };
        for (int k = 1; k < N_TAB; k++) {
            if (!tables[k]) continue;
            for (size_t ir = 0; ir < sizeof rr / sizeof rr[0]; ir++) {
                poison(y, R);
                tables[k]->matvec_mxfp4(y, P, S, x, rr[ir][0], rr[ir][1], C);
                int e = check_range(y, want, R, rr[ir][0], rr[ir][1]);
                CHECK(e == 0, "%s mxfp4 subnormal x, pattern %d, rows [%d,%d): row %d %s", table_names[k], pat,
                      rr[ir][0], rr[ir][1], abs(e) - 1, e > 0 ? "differs" : "written outside the range");
            }
        }
    }
    /* Where w * 2^-24 would round to zero (scale bytes 0, 1, 2) the sign of a
     * zero sum shows it: weights -2^(s-128) (bytes 0x99, codes -0.5), x =
     * +2^-127: every product underflows to -0 from +0, so every row is -0; a
     * scaled weight of -0 would give +0 + -0 = +0. Eight rows per byte. */
    enum { R0 = 24, C0 = 32 };
    uint8_t p0[R0 * C0 / 2], s0[R0];
    float x0[C0], y0[R0];
    memset(p0, 0x99, sizeof p0);
    for (int r = 0; r < R0; r++) s0[r] = (uint8_t)(r / 8);
    for (int i = 0; i < C0; i++) x0[i] = 0x1p-127f;
    for (int k = 0; k < N_TAB; k++) {
        if (!tables[k]) continue;
        poison(y0, R0);
        tables[k]->matvec_mxfp4(y0, p0, s0, x0, 0, R0, C0);
        int bad = 0;
        for (int r = 0; r < R0; r++) bad += f2u(y0[r]) != 0x80000000u;
        CHECK(bad == 0, "%s mxfp4 subnormal x at scale bytes 0-2: %d of %d rows not -0", table_names[k], bad, R0);
    }
}

/* Negative zero through MXFP4 (as test_select does for BF16 / F32): every
 * byte 0x99 (two codes -0.5) at scale byte 0 is a weight of -2^-128, and with
 * x = 1e-30 every product underflows to -0, so every lane and the result are
 * -0. A skipped group (scale 255, x = inf there) must leave that -0 alone
 * (an FMA with a zero weight would make it +0, or NaN with the inf); one code
 * 8 ("-0", decoded as +0 by kernels.h) makes its lane +0 and the result +0;
 * a row whose groups are all skipped is the tree of sixteen +0 lanes: +0. */
static void test_mxfp4_negzero(void) {
    enum { R = 13, C = 96, NGZ = C / 32 };
    static uint8_t P[R * C / 2], S[R * NGZ];
    float x[C], xi[C], y[R];
    for (int i = 0; i < C; i++) { x[i] = 1e-30f; xi[i] = (i >= 32 && i < 64) ? INFINITY : 1e-30f; }
    for (int k = 0; k < N_TAB; k++) {
        if (!tables[k]) continue;
        for (int variant = 0; variant < 4; variant++) {
            memset(P, 0x99, sizeof P);
            memset(S, 0, sizeof S);
            if (variant == 1) for (int r = 0; r < R; r++) S[r * NGZ + 1] = 255;   /* group 1 skipped */
            if (variant == 2) for (int r = 0; r < R; r++) P[r * C / 2 + 40] = 0x88; /* elements 80, 81 */
            if (variant == 3) memset(S, 255, sizeof S);
            const uint32_t expect = variant >= 2 ? 0u : 0x80000000u;
            for (int T = 1; T <= 5; T += 4) {
                float Yt[5 * R];
                float *X = variant == 1 ? xi : x;
                float Xt[5 * C];
                for (int t = 0; t < T; t++) memcpy(Xt + t * C, X, sizeof x);
                poison(Yt, 5 * R);
                if (T == 1) tables[k]->matvec_mxfp4(Yt, P, S, X, 0, R, C);
                else tables[k]->matmat_mxfp4(Yt, R, P, S, Xt, C, T, 0, R, C);
                int bad = 0;
                for (int i = 0; i < T * R; i++) bad += f2u(Yt[i]) != expect;
                memcpy(y, Yt, sizeof y);
                CHECK(bad == 0, "%s mxfp4 %s zero, variant %d, T %d: %d of %d results wrong (row 0: %g, bits %08x)",
                      table_names[k], expect ? "negative" : "positive", variant, T, bad, T * R, y[0], f2u(y[0]));
            }
        }
    }
}

/* ---- matmat == T x matvec --------------------------------------------------------- */

static void test_matmat(void) {
    static const int64_t Ts[] = { 0, 1, 2, 3, 4, 5, 9 };
    static const int64_t cols_b[] = { 17, 64, 100, 7168 };
    /* 17 rows in the range: avx512 runs bf16 prompt chunks in blocks of 6
     * rows (6 + 6 + 4 + 1 here) and MXFP4 ones in blocks of 4 (4 x 4 + 1) */
    enum { R = 19 };
    const int64_t r0 = 1, r1 = 18;
    for (size_t ic = 0; ic < sizeof cols_b / sizeof cols_b[0]; ic++) {
        int64_t cols = cols_b[ic], ldx = cols + 3, ldy = R + 5;
        int64_t Tmax = 9;
        uint16_t *W = malloc((size_t)(R * cols) * sizeof *W);
        float *X = malloc((size_t)(Tmax * ldx) * sizeof *X);
        float *Y = malloc((size_t)(Tmax * ldy) * sizeof *Y);
        float *want = malloc((size_t)(Tmax * ldy) * sizeof *want);
        for (int64_t i = 0; i < R * cols; i++) W[i] = f2bf16_trunc(rng_unit());
        for (int64_t i = 0; i < Tmax * ldx; i++) X[i] = rng_unit();
        poison(want, Tmax * ldy);
        for (int64_t t = 0; t < Tmax; t++) ms_kern_ref.matvec_bf16(want + t * ldy, W, X + t * ldx, r0, r1, cols);
        for (int k = 0; k < N_TAB; k++) {
            if (!tables[k]) continue;
            for (size_t it = 0; it < sizeof Ts / sizeof Ts[0]; it++) {
                int64_t T = Ts[it];
                poison(Y, Tmax * ldy);
                tables[k]->matmat_bf16(Y, ldy, W, X, ldx, T, r0, r1, cols);
                /* rows of tokens >= T must be untouched: compare with poison there */
                int bad = 0;
                for (int64_t i = 0; i < Tmax * ldy; i++) {
                    uint32_t w = i < T * ldy ? f2u(want[i]) : POISON;
                    if (f2u(Y[i]) != w) bad++;
                }
                CHECK(bad == 0, "%s matmat_bf16 cols %lld T %lld: %d entries differ", table_names[k],
                      (long long)cols, (long long)T, bad);
            }
        }
        free(W); free(X); free(Y); free(want);
    }
    static const int64_t cols_m[] = { 32, 96, 7168 };
    for (size_t ic = 0; ic < sizeof cols_m / sizeof cols_m[0]; ic++) {
        int64_t cols = cols_m[ic], ng = cols / 32, ldx = cols + 8, ldy = R + 3, Tmax = 9;
        uint8_t *P = malloc((size_t)(R * cols / 2));
        uint8_t *S = malloc((size_t)(R * ng));
        float *X = malloc((size_t)(Tmax * ldx) * sizeof *X);
        float *Y = malloc((size_t)(Tmax * ldy) * sizeof *Y);
        float *want = malloc((size_t)(Tmax * ldy) * sizeof *want);
        for (int64_t i = 0; i < R * cols / 2; i++) P[i] = (uint8_t)rng_u32();
        for (int64_t i = 0; i < R * ng; i++) S[i] = (uint8_t)(rng_u32() % 5 == 0 ? 255 : 110 + rng_u32() % 30);
        S[r0 * ng] = 255;   /* at least one skipped group inside the range */
        for (int64_t i = 0; i < Tmax * ldx; i++) X[i] = rng_unit();
        poison(want, Tmax * ldy);
        int64_t n255 = 0;
        for (int64_t t = 0; t < Tmax; t++)
            n255 = ms_kern_ref.matvec_mxfp4(want + t * ldy, P, S, X + t * ldx, r0, r1, cols);
        for (int k = 0; k < N_TAB; k++) {
            if (!tables[k]) continue;
            for (size_t it = 0; it < sizeof Ts / sizeof Ts[0]; it++) {
                int64_t T = Ts[it];
                poison(Y, Tmax * ldy);
                int64_t cnt = tables[k]->matmat_mxfp4(Y, ldy, P, S, X, ldx, T, r0, r1, cols);
                int bad = 0;
                for (int64_t i = 0; i < Tmax * ldy; i++) {
                    uint32_t w = i < T * ldy ? f2u(want[i]) : POISON;
                    if (f2u(Y[i]) != w) bad++;
                }
                CHECK(bad == 0, "%s matmat_mxfp4 cols %lld T %lld: %d entries differ", table_names[k],
                      (long long)cols, (long long)T, bad);
                if (T > 0)
                    CHECK(cnt == n255, "%s matmat_mxfp4 T %lld counted %lld, expected %lld (once per byte)",
                          table_names[k], (long long)T, (long long)cnt, (long long)n255);
            }
        }
        free(P); free(S); free(X); free(Y); free(want);
    }
}

/* ---- SiTU-GLU ------------------------------------------------------------------------ */

static double sig_d(double g) { return g >= 0 ? 1.0 / (1.0 + exp(-g)) : exp(g) / (1.0 + exp(g)); }

static void test_situ_glu(void) {
    static const float vals[] = { 1000.0f, -1000.0f, 10.0f, -10.0f, 0.0f, 1.0f, -3.0f };
    enum { NV = sizeof vals / sizeof vals[0] };
    float g[NV * NV], u[NV * NV], out[NV * NV];
    for (int i = 0; i < NV; i++)
        for (int j = 0; j < NV; j++) { g[i * NV + j] = vals[i]; u[i * NV + j] = vals[j]; }
    ms_situ_glu(out, g, u, NV * NV, 4.0f, 25.0f);
    for (int i = 0; i < NV * NV; i++) {
        double e = (4.0 * tanh(g[i] / 4.0) * sig_d(g[i])) * (25.0 * tanh(u[i] / 25.0));
        CHECK(fabs(out[i] - e) <= 2e-6 * fabs(e), "situ(%g, %g) = %.9g, expected %.9g", g[i], u[i], out[i], e);
        CHECK(fabsf(out[i]) <= 100.0f, "|out| <= 100");
    }
    /* the named cases: g = 1000 -> 4 * 1 * 25 tanh(u/25); g = -1000 -> 0
     * (a capped sigmoid would give sigmoid(-4) ~ 0.018, far from 0) */
    float gg[4] = { 1000.0f, 1000.0f, -1000.0f, -10.0f }, uu[4] = { 1000.0f, 10.0f, 10.0f, 10.0f }, o[4];
    ms_situ_glu(o, gg, uu, 4, 4.0f, 25.0f);
    CHECK(o[0] == 100.0f, "situ(1000, 1000) = %.9g, expected 100", o[0]);
    CHECK(fabs(o[1] - 100.0 * tanh(0.4)) < 1e-5, "situ(1000, 10) = %.9g", o[1]);
    CHECK(o[2] == 0.0f, "situ(-1000, 10) = %g: the sigmoid must take the UNCAPPED gate", o[2]);
    double capped = 4.0 * tanh(-2.5) * sig_d(4.0 * tanh(-2.5)) * 25.0 * tanh(0.4);
    double right = 4.0 * tanh(-2.5) * sig_d(-10.0) * 25.0 * tanh(0.4);
    CHECK(fabs(o[3] - right) < 1e-6 && fabs(o[3] - capped) > 1e-3, "situ(-10, 10) = %.9g", o[3]);
    /* bounded everywhere, including the infinities and random extremes */
    float eg[6] = { INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, INFINITY, 88.0f };
    float eu[6] = { INFINITY, INFINITY, -FLT_MAX, FLT_MAX, -INFINITY, -1e30f };
    float o6[6];
    ms_situ_glu(o6, eg, eu, 6, 4.0f, 25.0f);
    CHECK(o6[0] == 100.0f && o6[4] == -100.0f, "situ(inf, +-inf) = %g %g", o6[0], o6[4]);
    int bad = 0;
    for (int i = 0; i < 6; i++) bad += !(fabsf(o6[i]) <= 100.0f);
    for (int i = 0; i < 20000; i++) {
        float a = extreme_f32(), b = extreme_f32(), r;
        ms_situ_glu(&r, &a, &b, 1, 4.0f, 25.0f);
        bad += !(fabsf(r) <= 100.0f);
    }
    CHECK(bad == 0, "%d SiTU-GLU outputs outside [-100, 100] or NaN", bad);
    /* in place (out aliasing g) gives the same as out of place */
    float ga[3] = { 2.0f, -7.0f, 30.0f }, ua[3] = { -5.0f, 50.0f, 0.5f }, ob[3];
    ms_situ_glu(ob, ga, ua, 3, 4.0f, 25.0f);
    ms_situ_glu(ga, ga, ua, 3, 4.0f, 25.0f);
    CHECK(memcmp(ga, ob, sizeof ob) == 0, "in-place SiTU-GLU");
}

/* Every table's array forms against the scalar functions, bit for bit: any
 * bit pattern (NaN payloads, subnormals, infinities), the range where the
 * scalar code switches branches, and odd lengths (vector blocks + scalar
 * tail), out of place and in place. */
static float vm_input(int64_t i, int64_t n) {
    static const float sp[] = { 0.0f, -0.0f, INFINITY, -INFINITY, 88.72283f, 88.7229f, 89.0f, 89.00001f,
                                -104.0f, -104.00001f, -103.99999f, 40.0f, 40.000004f, -110.0f, -110.00001f,
                                20.0f, 20.000002f, 10.0f, 10.000001f, 0.17f, 0.16999999f, 0.17000002f,
                                -0.17f, 1e-45f, -1e-45f, 1e-40f, 1.17549435e-38f, FLT_MAX, -FLT_MAX };
    enum { NSP = sizeof sp / sizeof sp[0] };
    if (i < NSP) return sp[i];
    switch (i % 4) {
    case 0: return u2f(rng_u32());                                      /* any bit pattern */
    case 1: return (float)(-120.0 + 240.0 * (double)i / (double)n);     /* the branch range */
    case 2: return ldexpf(rng_unit(), (int)(rng_u32() % 40) - 30);       /* moderate, random exponents */
    default: return (float)(-0.5 + (double)i / (double)n);               /* near 0, where tanh switches */
    }
}

/* Equal bits, or two NaNs: where two NaN operands meet (g and u both NaN in
 * SiTU-GLU), IEEE 754 lets either payload through and compilers may swap the
 * operands of a commutative multiply (clang does, in one form and not the
 * other), so only NaN-ness is fixed there. One NaN operand keeps its payload. */
static int same_or_nans(uint32_t a, uint32_t b) {
    return a == b || (isnan(u2f(a)) && isnan(u2f(b)) && a != POISON && b != POISON);
}

static void test_vmath_tables(void) {
    const int64_t N = (1 << 18) + 7;
    float *x = malloc((size_t)N * sizeof *x), *x2 = malloc((size_t)N * sizeof *x2);
    float *y = malloc((size_t)N * sizeof *y), *want = malloc((size_t)N * sizeof *want);
    CHECK(x && x2 && y && want, "alloc");
    if (!x || !x2 || !y || !want) return;
    for (int64_t i = 0; i < N; i++) { x[i] = vm_input(i, N); x2[i] = vm_input(i, N); }
    float (*const scalar[3])(float) = { ms_expf, ms_sigmoidf, ms_siluf };
    static const char *names[3] = { "expf_n", "sigmoidf_n", "siluf_n" };
    for (int k = 0; k < N_TAB; k++) {
        if (!tables[k]) continue;
        void (*const arr[3])(float *, const float *, int64_t) = { tables[k]->expf_n, tables[k]->sigmoidf_n,
                                                                   tables[k]->siluf_n };
        for (int f = 0; f < 3; f++) {
            for (int64_t i = 0; i < N; i++) want[i] = scalar[f](x[i]);
            int64_t bad = 0, first = -1;
            for (int64_t len = N; len >= N - 7; len -= 7) {     /* two lengths: tails 7 and 0 mod 8 */
                poison(y, N);
                arr[f](y, x, len);
                for (int64_t i = 0; i < N; i++) {
                    uint32_t got = f2u(y[i]), w = i < len ? f2u(want[i]) : POISON;
                    if (got != w) { bad++; if (first < 0) first = i; }
                }
            }
            memcpy(y, x, (size_t)N * sizeof *y);
            arr[f](y, y, N);                                     /* in place */
            for (int64_t i = 0; i < N; i++)
                if (f2u(y[i]) != f2u(want[i])) { bad++; if (first < 0) first = i; }
            CHECK(bad == 0, "%s %s: %lld results differ from the scalar function (first x = %a)",
                  table_names[k], names[f], (long long)bad, first >= 0 ? x[first] : 0.0f);
        }
        /* situ_glu: random pairs at the model's betas; then g = 1000 and b1 = b2 = 1,
         * which makes out = tanh(u) exactly, so tanh is checked over every input */
        static const float betas[2][2] = { { 4.0f, 25.0f }, { 1.0f, 1.0f } };
        for (int b = 0; b < 2; b++) {
            if (b == 1) for (int64_t i = 0; i < N; i++) x2[i] = 1000.0f;
            const float *g = b ? x2 : x, *u = b ? x : x2;
            if (b == 0) for (int64_t i = 0; i < N; i++) x2[i] = vm_input((i * 7919) % N, N);
            ms_situ_glu(want, g, u, N, betas[b][0], betas[b][1]);
            int64_t bad = 0, first = -1;
            poison(y, N);
            tables[k]->situ_glu(y, g, u, N - 3, betas[b][0], betas[b][1]);
            for (int64_t i = 0; i < N; i++) {
                uint32_t w = i < N - 3 ? f2u(want[i]) : POISON;
                if (!same_or_nans(f2u(y[i]), w)) { bad++; if (first < 0) first = i; }
            }
            memcpy(y, u, (size_t)N * sizeof *y);
            tables[k]->situ_glu(y, g, y, N, betas[b][0], betas[b][1]);   /* out aliasing u */
            for (int64_t i = 0; i < N; i++)
                if (!same_or_nans(f2u(y[i]), f2u(want[i]))) { bad++; if (first < 0) first = i; }
            CHECK(bad == 0, "%s situ_glu (betas %g, %g): %lld results differ from ms_situ_glu (first g = %a, u = %a)",
                  table_names[k], betas[b][0], betas[b][1], (long long)bad, first >= 0 ? g[first] : 0.0f,
                  first >= 0 ? u[first] : 0.0f);
            if (b == 1) {
                int64_t off = 0;
                for (int64_t i = 0; i < N; i++) off += f2u(want[i]) != f2u(ms_tanhf(u[i])) && !isnan(u[i]);
                CHECK(off == 0, "situ_glu(1000, u; 1, 1) is tanh(u): %lld differ", (long long)off);
            }
        }
    }
    free(x); free(x2); free(y); free(want);
}

/* kda_update of every table against ms_kda_update, bit for bit: S and o, with and
 * without o, at widths with and without a vector tail; one case starts from S = 0
 * with q < 0, so every term of o is -0 (an accumulator seeded with its first
 * term instead of +0 would keep -0 there). */
static void test_kda_update(void) {
    static const int64_t dims[][2] = { { 128, 128 }, { 32, 32 }, { 16, 20 }, { 7, 70 }, { 3, 1 }, { 64, 96 } };
    enum { MAXE = 128 * 128 };
    float *S0 = malloc(MAXE * sizeof *S0), *Sw = malloc(MAXE * sizeof *Sw), *Sg = malloc(MAXE * sizeof *Sg);
    CHECK(S0 && Sw && Sg, "alloc");
    if (!S0 || !Sw || !Sg) return;
    float alpha[128], k[128], v[128], q[128], ow[128], og[128];
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        for (int zero = 0; zero < 2; zero++) {
            const int64_t dk = dims[di][0], dv = dims[di][1];
            for (int64_t i = 0; i < dk * dv; i++) S0[i] = zero ? 0.0f : rng_unit() * 4.0f;
            for (int64_t a = 0; a < dk; a++) {
                alpha[a] = 0.5f + 0.5f * fabsf(rng_unit());
                k[a] = zero ? -0.25f - fabsf(rng_unit()) : rng_unit();
                q[a] = zero ? -0.5f - fabsf(rng_unit()) : rng_unit();
            }
            for (int64_t b = 0; b < dv; b++) v[b] = zero ? 0.0f : rng_unit() * 3.0f;
            for (int with_o = 0; with_o < 2; with_o++) {
                memcpy(Sw, S0, (size_t)(dk * dv) * sizeof *Sw);
                poison(ow, 128);
                ms_kda_update(Sw, alpha, k, v, 0.75f, q, 0.125f, with_o ? ow : NULL, dk, dv);
                for (int t = 0; t < N_TAB; t++) {
                    if (!tables[t]) continue;
                    memcpy(Sg, S0, (size_t)(dk * dv) * sizeof *Sg);
                    poison(og, 128);
                    tables[t]->kda_update(Sg, alpha, k, v, 0.75f, q, 0.125f, with_o ? og : NULL, dk, dv);
                    int64_t bad = 0;
                    for (int64_t i = 0; i < dk * dv; i++) bad += f2u(Sg[i]) != f2u(Sw[i]);
                    for (int64_t b = 0; b < 128; b++) bad += f2u(og[b]) != f2u(ow[b]);
                    CHECK(bad == 0, "%s kda_update %lldx%lld (S %s, o %s): %lld values differ", table_names[t],
                          (long long)dk, (long long)dv, zero ? "zero" : "random", with_o ? "on" : "off",
                          (long long)bad);
                }
                if (zero && with_o) {
                    int64_t plus0 = 0;
                    for (int64_t b = 0; b < dv; b++) plus0 += f2u(ow[b]) == 0u;
                    CHECK(plus0 == dv, "S = 0, q < 0: every o is +0 + -0 + ... = +0 (%lld of %lld)",
                          (long long)plus0, (long long)dv);
                }
            }
        }
    }
    free(S0); free(Sw); free(Sg);
}

/* att_scores / att_mix of every table against the reference, bit for bit, at
 * head counts around the groups of 8, position counts around the vector width,
 * cache widths with and without a column tail (the released 576 = 512 + 64 among
 * them), scores over the whole row and over a prefix of it, and padded row
 * strides. One case makes every product -0 (q < 0 and
 * p < 0 against a cache of +0), where a sum seeded with its first term instead
 * of +0.0 would end at -0. */
static void test_attention(void) {
    static const int64_t shapes[][4] = {   /* nq, n, pw, width */
        { 1, 1, 48, 32 }, { 4, 9, 48, 32 }, { 8, 8, 576, 512 }, { 12, 37, 576, 512 },
        { 16, 300, 576, 512 }, { 3, 17, 70, 50 }, { 9, 15, 24, 20 }, { 8, 64, 1100, 1030 },
        { 8, 130, 1024, 64 },   /* gpt-oss: a KV group's 8 heads, head_dim 64 of a 2 x 8 x 64 row */
    };
    enum { LDX = 7 };   /* extra floats per row of S, P and O */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t nq = shapes[si][0], n = shapes[si][1], pw = shapes[si][2], width = shapes[si][3];
        const int64_t ldq = pw + 3, lds = n + LDX, ldo = width + LDX;
        double *Q = malloc((size_t)(nq * ldq) * sizeof *Q);
        float *C = malloc((size_t)(n * pw) * sizeof *C);
        float *Sw = malloc((size_t)(nq * lds) * sizeof *Sw), *Sg = malloc((size_t)(nq * lds) * sizeof *Sg);
        float *Ow = malloc((size_t)(nq * ldo) * sizeof *Ow), *Og = malloc((size_t)(nq * ldo) * sizeof *Og);
        CHECK(Q && C && Sw && Sg && Ow && Og, "alloc");
        if (!Q || !C || !Sw || !Sg || !Ow || !Og) return;
        for (int v = 0; v < 4; v++) {
            /* scores over the whole row (K3's MLA) and over its first `width` columns (gpt-oss) */
            const int zero = v & 1;
            const int64_t sw = v & 2 ? width : pw;
            for (int64_t i = 0; i < nq * ldq; i++) Q[i] = zero ? -0.5 - fabs((double)rng_unit()) : (double)rng_unit();
            for (int64_t i = 0; i < n * pw; i++) C[i] = zero ? 0.0f : rng_unit() * 3.0f;
            poison(Sw, nq * lds);
            ms_att_scores(Sw, lds, Q, ldq, nq, C, pw, sw, n, 0.0625);
            if (zero) {
                int64_t plus0 = 0;
                for (int64_t h = 0; h < nq; h++) for (int64_t s = 0; s < n; s++) plus0 += f2u(Sw[h * lds + s]) == 0u;
                CHECK(plus0 == nq * n, "reference scores of -0 terms are +0 (%lld of %lld)", (long long)plus0,
                      (long long)(nq * n));
            }
            /* the scores are also the mix's weights: in the zero case make them negative */
            if (zero) for (int64_t h = 0; h < nq; h++) for (int64_t s = 0; s < n; s++) Sw[h * lds + s] = -0.25f;
            poison(Ow, nq * ldo);
            ms_att_mix(Ow, ldo, Sw, lds, nq, C, pw, width, n);
            if (zero) {
                int64_t plus0 = 0;
                for (int64_t h = 0; h < nq; h++) for (int64_t i = 0; i < width; i++) plus0 += f2u(Ow[h * ldo + i]) == 0u;
                CHECK(plus0 == nq * width, "reference mix of -0 terms is +0 (%lld of %lld)", (long long)plus0,
                      (long long)(nq * width));
            }
            for (int t = 0; t < N_TAB; t++) {
                if (!tables[t]) continue;
                poison(Sg, nq * lds);
                tables[t]->att_scores(Sg, lds, Q, ldq, nq, C, pw, sw, n, 0.0625);
                int64_t bs = 0, bo = 0;
                for (int64_t h = 0; h < nq; h++)
                    for (int64_t s = 0; s < lds; s++)   /* the zero case against +0, before the weights */
                        bs += f2u(Sg[h * lds + s]) != (zero && s < n ? 0u : f2u(Sw[h * lds + s]));
                poison(Og, nq * ldo);
                tables[t]->att_mix(Og, ldo, Sw, lds, nq, C, pw, width, n);
                for (int64_t i = 0; i < nq * ldo; i++) bo += f2u(Og[i]) != f2u(Ow[i]);
                CHECK(bs == 0 && bo == 0,
                      "%s attention nq %lld n %lld pw %lld width %lld, scores over %lld (%s): %lld scores, %lld outputs differ",
                      table_names[t], (long long)nq, (long long)n, (long long)pw, (long long)width, (long long)sw,
                      zero ? "-0 terms" : "random", (long long)bs, (long long)bo);
            }
        }
        free(Q); free(C); free(Sw); free(Sg); free(Ow); free(Og);
    }
}

/* ---- norms and softmax ----------------------------------------------------------------- */

static void test_norms(void) {
    float x[4] = { 2, 2, 2, 2 }, w[4] = { 1, 2, 3, 4 }, y[4];
    ms_rmsnorm(y, x, w, 4, 0.0f);   /* mean(x^2) = 4 -> inv 0.5 exactly */
    CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 4, "rmsnorm(2,2,2,2) = %g %g %g %g", y[0], y[1], y[2], y[3]);
    float a[2] = { 3, 4 }, one[2] = { 1, 1 };
    ms_rmsnorm(a, a, one, 2, 0.0f);   /* in place; MEAN of squares 12.5 */
    CHECK(fabs(a[0] - 3 / sqrt(12.5)) < 1e-6 && fabs(a[1] - 4 / sqrt(12.5)) < 1e-6,
          "rmsnorm(3,4) = %.9g %.9g", a[0], a[1]);
    float z[3] = { 0, 0, 0 };
    CHECK(fabs(ms_rms_inv(z, 3, 1e-5f) - 1 / sqrt(1e-5)) < 1e-3, "rms_inv with eps");
    CHECK(ms_rms_inv(x, 4, 0.0f) == 0.5f, "rms_inv(2,2,2,2) = %g", ms_rms_inv(x, 4, 0.0f));
    ms_rmsnorm(y, z, w, 3, 1e-5f);
    CHECK(y[0] == 0 && y[1] == 0 && y[2] == 0, "rmsnorm of zeros is zero");

    float b[2] = { 3, 4 };
    ms_l2norm_inplace(b, 2, 0.0f);   /* SUM of squares 25 -> /5 */
    CHECK(fabs(b[0] - 0.6) < 1e-7 && fabs(b[1] - 0.8) < 1e-7, "l2norm(3,4) = %.9g %.9g (0.849 = mean)", b[0], b[1]);
    float c[4] = { 1, 1, 1, 1 };
    ms_l2norm_inplace(c, 4, 1e-6f);
    CHECK(fabs(c[0] - 0.5) < 1e-6, "l2norm(1,1,1,1) = %.9g", c[0]);

    float s1[4] = { 0, 0, 0, 0 };
    ms_softmax_inplace(s1, 4);
    CHECK(s1[0] == 0.25f && s1[3] == 0.25f, "softmax of zeros");
    float s2[2] = { 1000, 1000 };
    ms_softmax_inplace(s2, 2);
    CHECK(s2[0] == 0.5f && s2[1] == 0.5f, "softmax(1000, 1000) = %g %g (max subtracted)", s2[0], s2[1]);
    float s3[2] = { 0, logf(3.0f) };
    ms_softmax_inplace(s3, 2);
    CHECK(fabs(s3[0] - 0.25) < 1e-7 && fabs(s3[1] - 0.75) < 1e-7, "softmax(0, ln 3) = %g %g", s3[0], s3[1]);
    float s4[3] = { -INFINITY, 0, -1e30f };
    ms_softmax_inplace(s4, 3);
    CHECK(s4[0] == 0 && s4[1] == 1 && s4[2] == 0, "softmax with -inf");
    float s5[3] = { 1, 2, 3 };
    ms_softmax_inplace(s5, 3);
    double den = exp(1) + exp(2) + exp(3);
    CHECK(fabs(s5[0] - exp(1) / den) < 1e-7 && fabs(s5[2] - exp(3) / den) < 1e-7, "softmax(1,2,3)");
    float s6[1] = { -42 };
    ms_softmax_inplace(s6, 1);
    CHECK(s6[0] == 1.0f, "softmax of one value");
}

/* ---- transcendental functions ------------------------------------------------------------ */

static float ref_exp(float x) { return (float)exp((double)x); }
static float ref_tanh(float x) { return (float)tanh((double)x); }
static float ref_sig(float x) { return (float)sig_d((double)x); }
static float ref_silu(float x) {
    if (isinf(x)) return x > 0 ? x : -0.0f;
    return (float)((double)x * sig_d((double)x));
}

static void test_math_accuracy(void) {
    struct { const char *name; float (*mine)(float); float (*ref)(float); } fn[4] = {
        { "expf", ms_expf, ref_exp }, { "tanhf", ms_tanhf, ref_tanh },
        { "sigmoidf", ms_sigmoidf, ref_sig }, { "siluf", ms_siluf, ref_silu },
    };
    const int64_t N = 1 << 21;
    for (int f = 0; f < 4; f++) {
        int64_t worst = 0, n_off = 0;
        float worst_x = 0;
        for (int64_t i = 0; i < N; i++) {
            float x;
            if (i % 4 == 0) {   /* any bit pattern (NaN included) */
                x = u2f(rng_u32());
            } else if (i % 4 == 1) {   /* the interesting range, densely */
                x = (float)(-120.0 + 240.0 * (double)i / (double)N);
            } else {   /* moderate magnitudes with random exponents */
                x = ldexpf(rng_unit(), (int)(rng_u32() % 40) - 30);
            }
            float a = fn[f].mine(x), b = fn[f].ref(x);
            int64_t d = ulp_dist(a, b);
            if (d != 0) n_off++;
            if (d > worst) { worst = d; worst_x = x; }
        }
        CHECK(worst <= 1, "%s: %lld ulp at x = %a", fn[f].name, (long long)worst, worst_x);
        /* the double evaluation is ~1e-15 accurate: a 1-ulp miss needs the true
         * value within 1e-15 of a float midpoint, so misses must be rare (a
         * truncated polynomial that still stays within 1 ulp fails here) */
        CHECK(n_off * 10000 <= N, "%s: %lld of %lld inputs off by 1 ulp", fn[f].name,
              (long long)n_off, (long long)N);
        printf("test_kernels: %s: %lld inputs, %lld differ by 1 ulp from libm (double) rounded\n",
               fn[f].name, (long long)N, (long long)n_off);
    }
    /* special and extreme values */
    static const float sp[] = { 0.0f, -0.0f, INFINITY, -INFINITY, 88.7f, -88.7f, 88.72283f, 88.7229f,
                                -103.9f, -104.0f, 1000.0f, -1000.0f, 1e-45f, -1e-45f, 1e-40f, 1e-30f,
                                FLT_MAX, -FLT_MAX, 0.5f, 9.01f, 20.0f, 40.0f, -110.0f, 89.0f };
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++)
        for (int f = 0; f < 4; f++)
            CHECK(ulp_dist(fn[f].mine(sp[i]), fn[f].ref(sp[i])) <= 1, "%s(%a) = %a, libm %a", fn[f].name,
                  sp[i], fn[f].mine(sp[i]), fn[f].ref(sp[i]));
    float qnan = u2f(0x7FC00000u);
    for (int f = 0; f < 4; f++) CHECK(isnan(fn[f].mine(qnan)), "%s(NaN) is NaN", fn[f].name);
    CHECK(ms_expf(-INFINITY) == 0.0f && ms_expf(INFINITY) == INFINITY && ms_expf(100.0f) == INFINITY, "exp limits");
    CHECK(ms_expf(0.0f) == 1.0f && ms_expf(-0.0f) == 1.0f && ms_expf(-1000.0f) == 0.0f, "exp(0), exp(-1000)");
    CHECK(f2u(ms_tanhf(-0.0f)) == 0x80000000u && f2u(ms_tanhf(0.0f)) == 0u, "tanh keeps the sign of zero");
    CHECK(ms_tanhf(1e-40f) == 1e-40f && ms_tanhf(INFINITY) == 1.0f && ms_tanhf(-INFINITY) == -1.0f, "tanh limits");
    CHECK(ms_sigmoidf(-1000.0f) == 0.0f && ms_sigmoidf(1000.0f) == 1.0f, "sigmoid(+-1000)");
    CHECK(ms_sigmoidf(-INFINITY) == 0.0f && ms_sigmoidf(INFINITY) == 1.0f && ms_sigmoidf(0.0f) == 0.5f, "sigmoid limits");
    CHECK(f2u(ms_siluf(-1000.0f)) == 0x80000000u && f2u(ms_siluf(-INFINITY)) == 0x80000000u, "silu(-big) = -0");
    CHECK(ms_siluf(INFINITY) == INFINITY && ms_siluf(1000.0f) == 1000.0f, "silu(+big)");
    CHECK(ms_expf(1.0f) == 2.71828183f, "e");
}

int main(void) {
    test_select();
    test_scale_table();
    test_t16_tree();
    test_dense_vs_ref();
    test_mxfp4_vs_ref();
    test_mxfp4_scales();
    test_mxfp4_codes();
    test_mxfp4_real_shapes();
    test_mxfp4_subnormal_x();
    test_mxfp4_negzero();
    test_matmat();
    test_situ_glu();
    test_vmath_tables();
    test_kda_update();
    test_attention();
    test_norms();
    test_math_accuracy();
    return CHECK_DONE("test_kernels");
}
