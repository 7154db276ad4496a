/* model/oss/moe.c - the MoE of a gpt-oss layer (spec gpt-oss section 3):
 * router with bias, softmax over the chosen top-k only, experts with
 * interleaved gate/up rows, the clamped SwiGLU with +1, and the expert
 * biases inside the weighted sum.
 *
 * Main idea: as K3's (moe.c): the chunk is routed for all its tokens first,
 * then each chosen expert is read once per chunk (ms_xio_*) and applied to
 * every token that chose it.
 * Definitions (fp32; no contraction):
 *   - logits = T16 products of the router rows, then + bias; the top k of
 *     the logits (ms_topk: ties to the lower index), and their weights the
 *     softmax of those k logits (ms_softmax_inplace).
 *   - h = W1 x + b1 [2I]; gate = h[2i], up = h[2i+1];
 *     g = gate > limit ? limit : gate; u = up clamped to [-limit, limit];
 *     a = (g * sigmoid(1.702 g)) * (u + 1) (sigmoid: the kernels' sigmoidf).
 *   - o = W2 a + b2; y = w_0 o_0, then y = y + w_j o_j in selection order.
 * Invariants: an expert's outputs land by (token, slot) and are summed in
 *   selection order, so the order experts arrive in changes no bit.
 * Does not: talk to the store except through ms_xio_*.
 */
#include "model/oss/oss.h"

void ms_oss_router_logits(ms_fwd_ctx *c, float *logits, const ms_layer *L, const uint8_t *base, const float *X,
                          int64_t T, float *bias_buf) {
    const ms_config *cf = &c->m->cfg;
    const int64_t E = cf->num_experts;
    ms_mm_bf16(c, logits, E, base, &L->router, X, cf->hidden_size, T);
    const float *b = ms_fwd_vec(base, &L->router_bias, bias_buf);
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < E; e++) logits[t * E + e] = logits[t * E + e] + b[e];
}

/* Per token its k experts f->sel [T, k] and weights f->selw [T, k]. */
static void route(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, const uint8_t *base, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t E = cf->num_experts, k = cf->num_experts_per_token;
    ms_oss_router_logits(c, f->rl, L, base, f->x, T, f->vec0);
    for (int64_t t = 0; t < T; t++) {
        const float *l = f->rl + t * E;
        int32_t *idx = f->sel + t * k;
        float *w = f->selw + t * k;
        ms_topk(l, E, k, idx);
        /* softmax over the chosen k only (trap: test trap_oss_softmax_before_topk) */
        for (int64_t j = 0; j < k; j++) w[j] = l[idx[j]];
        ms_softmax_inplace(w, k);
    }
}

/* y[r][i] += b[i] (BF16) for the n rows of y [n, w]. */
static void add_bias_bf16(float *y, const uint8_t *b, int64_t w, int64_t n) {
    const uint16_t *bb = (const uint16_t *)(const void *)b;
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < w; i++) y[r * w + i] = y[r * w + i] + ms_bf16_to_f32(bb[i]);
}

/* One expert (its six slices at eb) over the n gathered rows of f->zg. */
static void expert(ms_fwd_ctx *c, ms_fwd *f, const int64_t *off, const uint8_t *eb, int64_t n) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, I = cf->intermediate_size, k = cf->num_experts_per_token;
    const float lim = (float)cf->swiglu_limit;
    ms_mm_mxfp4(c, f->fg, 2 * I, eb + off[MS_OSS_GU_P], eb + off[MS_OSS_GU_S], 2 * I, H, f->zg, H, n);
    add_bias_bf16(f->fg, eb + off[MS_OSS_GU_B], 2 * I, n);
    for (int64_t r = 0; r < n; r++) {
        const float *h = f->fg + r * 2 * I;
        float *a = f->fu + r * I, *z = f->tmp;
        for (int64_t i = 0; i < I; i++) {
            const float gate = h[2 * i];            /* rows interleaved (trap: test trap_oss_gate_up_halves) */
            const float g = gate > lim ? lim : gate;
            z[i] = g * 1.702f;
        }
        c->m->kern->sigmoidf_n(z, z, I);
        for (int64_t i = 0; i < I; i++) {
            const float gate = h[2 * i], up = h[2 * i + 1];
            const float g = gate > lim ? lim : gate;
            const float u = up > lim ? lim : up < -lim ? -lim : up;
            a[i] = (g * z[i]) * (u + 1.0f);
        }
    }
    ms_mm_mxfp4(c, f->eo, H, eb + off[MS_OSS_DN_P], eb + off[MS_OSS_DN_S], H, I, f->fu, I, n);
    add_bias_bf16(f->eo, eb + off[MS_OSS_DN_B], H, n);      /* inside the weighted sum */
    ms_moe_scatter(f, n, k, H);
}

ms_status ms_oss_moe_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, const uint8_t *base, int64_t T, int keep,
                             ms_err *err) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, k = cf->num_experts_per_token;
    const float *pn = ms_fwd_vec(base, &L->post_attn_norm, f->vec2);
    for (int64_t t = 0; t < T; t++) ms_rmsnorm(f->x + t * H, f->run + t * H, pn, H, (float)cf->rms_norm_eps);
    route(c, f, L, base, T);
    ms_xio x;
    ms_xio_layer_begin(c, f, L, T, keep, &x);
    const ms_status st = ms_moe_experts(c, f, L, &x, f->x, H, T, expert, err);
    if (st != MS_OK) return st;
    for (int64_t t = 0; t < T; t++) ms_moe_weighted_sum(f, t, k, H, f->ffn + t * H);
    return MS_OK;
}
