/* model/moe.c - the FFN of a layer: the dense MLP and the Stable LatentMoE
 * (spec 4.5).
 *
 * Owns: the SiTU-GLU MLP (the dense layers' FFN and the shared experts), the
 * router (sigmoid scores, bias-steered top-k, renormalised weights), the
 * routed experts in the latent space, and their weighted, normed sum.
 * Main idea: a chunk is routed for all its tokens first; then each routed
 * expert is read once per chunk and applied to every token that chose it.
 * Which expert computes when, and which reads are asked for ahead, is the
 * expert I/O policy's business (expert_io.c, ms_xio_*): this file only asks
 * for the experts it needs and computes.
 * Invariants: an expert's outputs land in f->ey by (token, slot) and are
 * summed in selection order, so the order experts arrive in changes no bit.
 * Does not: talk to the store except through ms_xio_*.
 */
#include "model/forward_int.h"

#include <string.h>

typedef struct situ_job {
    const ms_kern *k;
    float *out;
    const float *g, *u;
    float b1, b2;
} situ_job;

static void situ_part(void *ctx, int64_t i0, int64_t i1) {
    situ_job *j = ctx;
    j->k->situ_glu(j->out + i0, j->g + i0, j->u + i0, i1 - i0, j->b1, j->b2);
}

/* out = SiTU-GLU(g, u) over n elements, split across the pool (elementwise,
 * so the split changes no bit) */
static void situ_rows(ms_fwd_ctx *c, float *out, const float *g, const float *u, int64_t n) {
    const ms_config *cf = &c->m->cfg;
    situ_job j = { c->m->kern, out, g, u, (float)cf->activation_situ_beta,
                   (float)cf->activation_situ_linear_beta };
    ms_pool_for(c->pool, n, 1024, situ_part, &j);
}

void ms_dense_mlp(ms_fwd_ctx *c, ms_fwd *f, const ms_wt *wg, const ms_wt *wu, const ms_wt *wd, const uint8_t *base,
                  const float *X, float *Y, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, I = wg->rows;
    ms_mm_bf16(c, f->fg, I, base, wg, X, H, T);
    ms_mm_bf16(c, f->fu, I, base, wu, X, H, T);
    situ_rows(c, f->fg, f->fg, f->fu, T * I);
    ms_mm_bf16(c, Y, H, base, wd, f->fg, I, T);
}

void ms_topk(const float *choice, int64_t E, int64_t k, int32_t *idx) {
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t q = 0; q < j; q++) taken |= idx[q] == e;
            if (taken) continue;
            if (best < 0 || choice[e] > choice[best]) best = e;
        }
        idx[j] = (int32_t)best;
    }
}

/* The router: per token its k experts f->sel [T, k] and their weights
 * f->selw [T, k]. Sigmoid scores in fp32 from T16 logits; the bias steers
 * the selection only (trap: test trap_router_bias_weights). */
static void route(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, const uint8_t *base, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, E = cf->num_experts, k = cf->num_experts_per_token;
    ms_mm_bf16(c, f->rl, E, base, &L->router, f->x, H, T);
    const float *bias = ms_fwd_vec(base, &L->router_bias, f->vec0);
    for (int64_t t = 0; t < T; t++) {
        float *s = f->rl + t * E, *choice = f->tmp;
        c->m->kern->sigmoidf_n(s, s, E);
        for (int64_t e = 0; e < E; e++) choice[e] = s[e] + bias[e];
        int32_t *idx = f->sel + t * k;
        float *w = f->selw + t * k;
        ms_topk(choice, E, k, idx);
        float sum = 0.0f;
        for (int64_t j = 0; j < k; j++) { w[j] = s[idx[j]]; sum = sum + w[j]; }
        const float denom = sum + 1e-20f, rsf = (float)cf->routed_scaling_factor;
        for (int64_t j = 0; j < k; j++) {
            if (cf->moe_renormalize) w[j] = w[j] / denom;
            w[j] = w[j] * rsf;
        }
    }
}

int64_t ms_moe_gather(ms_fwd *f, const float *src, int64_t e, int64_t T, int64_t k, int64_t width) {
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++)
            if (f->sel[t * k + j] == e) {
                f->etok[n] = (int32_t)t;
                f->eslot[n] = (int32_t)j;
                memcpy(f->zg + n * width, src + t * width, (size_t)width * sizeof(float));
                n++;
            }
    return n;
}

ms_status ms_moe_experts(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, ms_xio *x, const float *src, int64_t width,
                         int64_t T, ms_expert_fn fn, ms_err *err) {
    const int64_t k = c->m->cfg.num_experts_per_token;
    /* one expert at a time, in the order the policy gives, each read once per chunk */
    for (int iu = 0; iu < x->n_used; iu++) {
        const int64_t e = x->region[iu] - L->expert_region0;
        const int64_t n = ms_moe_gather(f, src, e, T, k, width);
        const uint8_t *eb;
        const ms_status st = ms_xio_acquire(c, x, iu, n > 0 ? f->etok[n - 1] : -1, &eb, err);
        if (st != MS_OK) return st;
        fn(c, f, L->expert_off[e], eb, n);
        ms_xio_release(c, x, iu);
    }
    return MS_OK;
}

void ms_moe_weighted_sum(const ms_fwd *f, int64_t t, int64_t k, int64_t width, float *out) {
    const float *w = f->selw + t * k, *y0 = f->ey + t * k * width;
    for (int64_t i = 0; i < width; i++) out[i] = w[0] * y0[i];
    for (int64_t j = 1; j < k; j++) {
        const float *yj = f->ey + (t * k + j) * width;
        for (int64_t i = 0; i < width; i++) out[i] = out[i] + w[j] * yj[i];
    }
}

void ms_moe_scatter(ms_fwd *f, int64_t n, int64_t k, int64_t width) {
    for (int64_t r = 0; r < n; r++)
        memcpy(f->ey + ((int64_t)f->etok[r] * k + f->eslot[r]) * width, f->eo + r * width,
               (size_t)width * sizeof(float));
}

/* One routed expert (its six tensors at eb) over the n gathered rows:
 * w2 (SiTU-GLU(w1 z, w3 z)), each output row into f->ey at its (token, slot). */
static void expert(ms_fwd_ctx *c, ms_fwd *f, const int64_t *off, const uint8_t *eb, int64_t n) {
    const ms_config *cf = &c->m->cfg;
    const int64_t k = cf->num_experts_per_token, lat = cf->routed_expert_hidden_size;
    const int64_t Im = cf->moe_intermediate_size;
    ms_mm_mxfp4(c, f->fg, Im, eb + off[MS_EXP_W1P], eb + off[MS_EXP_W1S], Im, lat, f->zg, lat, n);
    ms_mm_mxfp4(c, f->fu, Im, eb + off[MS_EXP_W3P], eb + off[MS_EXP_W3S], Im, lat, f->zg, lat, n);
    situ_rows(c, f->fg, f->fg, f->fu, n * Im);
    ms_mm_mxfp4(c, f->eo, lat, eb + off[MS_EXP_W2P], eb + off[MS_EXP_W2S], lat, Im, f->fg, Im, n);
    ms_moe_scatter(f, n, k, lat);
}

/* f->ffn = lat_up(RMSNorm(sum_j w_j y_j)) + the shared experts' output (in
 * f->a): the weighted sum in selection order, then ONE RMSNorm on the
 * aggregate (trap: test trap_latent_norm_per_expert). */
static void combine(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, const uint8_t *base, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, k = cf->num_experts_per_token, lat = cf->routed_expert_hidden_size;
    const float eps = (float)cf->rms_norm_eps;
    const float *ln = ms_fwd_vec(base, &L->lat_norm, f->vec1);
    for (int64_t t = 0; t < T; t++) {
        float *r = f->zr + t * lat;
        ms_moe_weighted_sum(f, t, k, lat, r);
        ms_rmsnorm(r, r, ln, lat, eps);
    }
    ms_mm_bf16(c, f->ffn, H, base, &L->lat_up, f->zr, lat, T);
    for (int64_t i = 0; i < T * H; i++) f->ffn[i] = f->ffn[i] + f->a[i];
}

ms_status ms_moe_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, const uint8_t *base, int64_t T, int keep,
                         ms_err *err) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, lat = cf->routed_expert_hidden_size;
    route(c, f, L, base, T);
    /* the experts this chunk needs: their reads start now and overlap the
     * latent projection and the shared experts below */
    ms_xio x;
    ms_xio_layer_begin(c, f, L, T, keep, &x);
    ms_mm_bf16(c, f->z, lat, base, &L->lat_down, f->x, H, T);
    /* shared experts on the ORIGINAL x, added unweighted (trap: test trap_shared_weighted);
     * f->a (the mixer's output) is free again: run already holds it */
    ms_dense_mlp(c, f, &L->sh_gate, &L->sh_up, &L->sh_down, base, f->x, f->a, T);
    const ms_status st = ms_moe_experts(c, f, L, &x, f->z, lat, T, expert, err);
    if (st != MS_OK) return st;
    combine(c, f, L, base, T);
    return MS_OK;
}
