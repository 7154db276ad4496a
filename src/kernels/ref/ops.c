/* kernels/ref/ops.c - the scalar building blocks shared by every ISA.
 *
 * Owns: RMSNorm, L2 normalisation, SiTU-GLU, the KDA state update, the MLA
 *   scores and value mix, and softmax (kernels.h); the reference forms of the
 *   tables' situ_glu, kda_update, att_scores and att_mix.
 * Idea: these are cheap next to the matrix products, so there is one plain-C
 *   version used by every kernel table; reductions accumulate in DOUBLE in
 *   increasing index order and transcendental functions come from
 *   kernels/ref/math.c, so the bits never depend on the ISA.
 * Invariants: no allocation, no state; n <= 0 is a no-op.
 * Does not: check for NaN/inf (they propagate as IEEE arithmetic says).
 */
#include "kernels/kernels.h"

#include <math.h>       /* sqrt: correctly rounded by IEEE-754, same bits everywhere */

static double sum_squares(const float *x, int64_t n) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    return ss;
}

/* See kernels.h. n <= 0 returns 1.0f (nothing to scale). */
float ms_rms_inv(const float *x, int64_t n, float eps) {
    if (n <= 0) return 1.0f;
    double ss = sum_squares(x, n);
    return (float)(1.0 / sqrt(ss / (double)n + (double)eps));
}

/* See kernels.h. y may alias x (each element is read before it is written). */
void ms_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    if (n <= 0) return;
    float inv = ms_rms_inv(x, n, eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * inv) * w[i];
}

/* See kernels.h: divides by the root of the SUM of squares (spec 4.3). */
void ms_l2norm_inplace(float *x, int64_t n, float eps) {
    if (n <= 0) return;
    double ss = sum_squares(x, n);
    float inv = (float)(1.0 / sqrt(ss + (double)eps));
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* See kernels.h. |out| <= b1*b2 because every factor is bounded exactly:
 * |tanh| <= 1 and 0 <= sigmoid <= 1 in their float results. */
void ms_situ_glu(float *out, const float *g, const float *u, int64_t n, float b1, float b2) {
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];    /* read both inputs first: out may alias g or u */
        float ui = u[i];
        float gate = (b1 * ms_tanhf(gi / b1)) * ms_sigmoidf(gi);   /* sigmoid of the UNCAPPED g */
        out[i] = gate * (b2 * ms_tanhf(ui / b2));
    }
}

/* See kernels.h: the four steps one after the other, as the spec writes them. */
void ms_kda_update(float *S, const float *alpha, const float *k, const float *v, float beta,
                   const float *q, float qscale, float *o, int64_t dk, int64_t dv) {
    float u[1024], d[1024];
    for (int64_t a = 0; a < dk; a++)
        for (int64_t b = 0; b < dv; b++) S[a * dv + b] = alpha[a] * S[a * dv + b];
    for (int64_t b = 0; b < dv; b++) u[b] = 0.0f;
    for (int64_t a = 0; a < dk; a++)
        for (int64_t b = 0; b < dv; b++) u[b] = u[b] + S[a * dv + b] * k[a];
    for (int64_t b = 0; b < dv; b++) d[b] = beta * (v[b] - u[b]);
    for (int64_t a = 0; a < dk; a++)
        for (int64_t b = 0; b < dv; b++) S[a * dv + b] = S[a * dv + b] + k[a] * d[b];
    if (!o) return;
    for (int64_t b = 0; b < dv; b++) o[b] = 0.0f;
    for (int64_t a = 0; a < dk; a++) {
        const float qa = q[a] * qscale;
        for (int64_t b = 0; b < dv; b++) o[b] = o[b] + S[a * dv + b] * qa;
    }
}

/* See kernels.h: one dot product per (head, position), its terms in order. */
void ms_att_scores(float *S, int64_t lds, const double *Q, int64_t ldq, int64_t nq,
                   const float *C, int64_t pw, int64_t width, int64_t n, double scale) {
    for (int64_t h = 0; h < nq; h++)
        for (int64_t s = 0; s < n; s++) {
            const double *q = Q + h * ldq;
            const float *c = C + s * pw;
            double acc = 0.0;
            for (int64_t j = 0; j < width; j++) acc = acc + q[j] * (double)c[j];
            S[h * lds + s] = (float)(acc * scale);
        }
}

/* See kernels.h: one sum over the positions per (head, column). */
void ms_att_mix(float *O, int64_t ldo, const float *P, int64_t ldp, int64_t nq,
                const float *C, int64_t pw, int64_t width, int64_t n) {
    for (int64_t h = 0; h < nq; h++)
        for (int64_t i = 0; i < width; i++) {
            double acc = 0.0;
            for (int64_t s = 0; s < n; s++) acc = acc + (double)P[h * ldp + s] * (double)C[s * pw + i];
            O[h * ldo + i] = (float)acc;
        }
}

/* See kernels.h. NaN anywhere gives NaN everywhere; an all -inf row gives
 * NaN (there is no defined distribution); a single +inf max gives NaN too
 * (inf - inf). Callers mask with finite large negatives or skip entries. */
void ms_softmax_inplace(float *x, int64_t n) {
    if (n <= 0) return;
    float m = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float e = ms_expf(x[i] - m);
        x[i] = e;
        sum += (double)e;
    }
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)x[i] / sum);
}
