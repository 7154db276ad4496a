/* model/kda.c - Kimi Delta Attention, the linear mixer (spec 4.3).
 *
 * Owns: KDA's projections, its per-token state update (ms_kda_step, the ONE
 * definition: the forward and the rollback's replay both run it, so a
 * replayed state has the forward's bits) and its output gate.
 * Main idea: the projections run over all the pass's tokens together; the
 * recurrence runs one segment (sequence) at a time on that segment's state,
 * its heads split across the pool (each head's state is its own).
 * Invariants: a token's numbers do not depend on T or on how heads are split
 * across threads (docs/DETERMINISM.md).
 * Does not: read weights from the store (the layer loop hands it the region).
 */
#include "model/forward_int.h"

#include <math.h>
#include <string.h>

void ms_kda_step(const ms_config *c, const ms_kern *kern, int64_t h, const uint8_t *const wconv[3], float A,
                 const float *dtb, float *const x[3], float *conv, const float *fr, float b, float *S, float qscale,
                 float *o) {
    const int64_t dk = c->kda_head_dim, dv = dk, P = c->kda_num_heads * dk;
    const int64_t K = c->short_conv_kernel_size;
    const float lb = (float)c->gate_lower_bound;
    float alpha[1024];
    /* causal depthwise conv of q, k, v (oldest tap first) + SiLU, in place,
     * shifting the head's conv history */
    for (int s = 0; s < 3; s++) {
        float *xs = x[s];
        float *hist = conv + (int64_t)s * P * (K - 1);
        for (int64_t i = 0; i < dk; i++) {
            int64_t ch = h * dk + i;
            const uint8_t *w = wconv[s] + ch * K * (int64_t)sizeof(float);
            float *hc = hist + ch * (K - 1);
            float acc = 0.0f;
            for (int64_t tap = 0; tap < K - 1; tap++) acc = acc + ms_ld_f32(w + tap * 4) * hc[tap];
            acc = acc + ms_ld_f32(w + (K - 1) * 4) * xs[i];
            for (int64_t tap = 0; tap + 1 < K - 1; tap++) hc[tap] = hc[tap + 1];
            if (K > 1) hc[K - 2] = xs[i];
            xs[i] = acc;
        }
        kern->siluf_n(xs, xs, dk);
    }
    float *q = x[0], *k = x[1];
    const float *v = x[2];
    /* L2 norm by the SUM of squares (trap: test trap_l2_mean); v is not normed */
    ms_l2norm_inplace(q, dk, 1e-6f);
    ms_l2norm_inplace(k, dk, 1e-6f);
    /* alpha = exp(lb * sigmoid(A * (fr + dt_bias))), each step rounded to float */
    for (int64_t i = 0; i < dk; i++) alpha[i] = A * (fr[i] + dtb[i]);
    kern->sigmoidf_n(alpha, alpha, dk);
    for (int64_t i = 0; i < dk; i++) alpha[i] = lb * alpha[i];
    kern->expf_n(alpha, alpha, dk);
    const float beta = ms_sigmoidf(b);
    /* 1. decay rows; 2. u = S^T k; 3. delta-rule write; 4. o = S^T q * qscale
     * (when o is given) */
    kern->kda_update(S, alpha, k, v, beta, q, qscale, o, dk, dv);
}

const float *ms_kda_dtb(const uint8_t *base, const ms_layer *L, int64_t h, int64_t dk, float *buf) {
    if (L->dt_bias.dtype == MS_DT_F32) {
        const uint8_t *p = base + L->dt_bias.off + h * dk * (int64_t)sizeof(float);
        if ((uintptr_t)p % sizeof(float) == 0) return (const float *)(const void *)p;
        memcpy(buf, p, (size_t)dk * sizeof(float));
        return buf;
    }
    const uint16_t *bb = (const uint16_t *)(base + L->dt_bias.off) + h * dk;
    for (int64_t i = 0; i < dk; i++) buf[i] = ms_bf16_to_f32(bb[i]);
    return buf;
}

typedef struct kda_job {
    const ms_config *c;
    const ms_kern *k;
    ms_fwd *f;
    const uint8_t *base;
    const ms_layer *L;
    float *S, *conv;
    int64_t t0, T;              /* the segment's tokens [t0, t0 + T) of the pass */
} kda_job;

static void kda_heads(void *ctx, int64_t h0, int64_t h1) {
    kda_job *j = ctx;
    const ms_config *c = j->c;
    ms_fwd *f = j->f;
    const int64_t nh = c->kda_num_heads, dk = c->kda_head_dim, dv = dk, P = nh * dk;
    const float eps = (float)c->rms_norm_eps;
    const float qscale = (float)(1.0 / sqrt((double)dk));
    const uint8_t *const wconv[3] = { j->base + j->L->q_conv.off, j->base + j->L->k_conv.off,
                                      j->base + j->L->v_conv.off };
    const uint8_t *a_log = j->base + j->L->a_log.off;     /* F32, any alignment */
    float o[1024], onorm_w[1024];
    MS_ASSERT(dk <= 1024);
    const float *onw = ms_fwd_vec(j->base, &j->L->o_norm, onorm_w);
    float dtb_buf[1024];
    for (int64_t h = h0; h < h1; h++) {
        float *S = j->S + h * dk * dv;
        /* A_log is indexed PER HEAD (trap: test trap_alog_per_channel) */
        const float A = ms_expf(ms_ld_f32(a_log + h * 4));
        const float *dtb = ms_kda_dtb(j->base, j->L, h, dk, dtb_buf);
        for (int64_t t = j->t0; t < j->t0 + j->T; t++) {
            float *q = f->kq + t * P + h * dk, *k = f->kk + t * P + h * dk, *v = f->kv + t * P + h * dv;
            float *const x[3] = { q, k, v };
            /* o = S^T q/sqrt(dk) after the update */
            ms_kda_step(c, j->k, h, wconv, A, dtb, x, j->conv, f->kf + t * P + h * dk, f->kb[t * nh + h], S,
                        qscale, o);
            /* RMSNorm FIRST, then the sigmoid gate (trap: test trap_kda_gate_then_norm) */
            float *y = f->ky + t * P + h * dv;
            float *gt = f->kg + t * P + h * dv;              /* read only here: gated in place */
            ms_rmsnorm(y, o, onw, dv, eps);
            j->k->sigmoidf_n(gt, gt, dv);
            for (int64_t b = 0; b < dv; b++) y[b] = y[b] * gt[b];
        }
    }
}

void ms_kda_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L, const uint8_t *base,
                    int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, P = cf->kda_num_heads * cf->kda_head_dim;
    ms_mm_bf16(c, f->kq, P, base, &L->q_proj, f->x, H, T);
    ms_mm_bf16(c, f->kk, P, base, &L->k_proj, f->x, H, T);
    ms_mm_bf16(c, f->kv, P, base, &L->v_proj, f->x, H, T);
    ms_mm_bf16(c, f->kg, P, base, &L->g_proj, f->x, H, T);
    ms_mm_bf16(c, f->kfa, L->f_a.rows, base, &L->f_a, f->x, H, T);
    ms_mm_bf16(c, f->kf, P, base, &L->f_b, f->kfa, L->f_a.rows, T);
    ms_mm_bf16(c, f->kb, cf->kda_num_heads, base, &L->b_proj, f->x, H, T);
    /* the recurrence, one segment (sequence) at a time on its own state */
    for (int is = 0, t0 = 0; is < nseg; t0 += (int)seg[is].T, is++) {
        float *S = seg[is].st->kda_S[L->kda_index], *conv = seg[is].st->kda_conv[L->kda_index];
        if (seg[is].rec) ms_kda_record(cf, f, L, base, S, conv, seg[is].rec->kda[L->kda_index], t0, seg[is].T);
        kda_job j = { cf, c->m->kern, f, base, L, S, conv, t0, seg[is].T };
        ms_pool_for(c->pool, cf->kda_num_heads, 1, kda_heads, &j);
    }
    ms_mm_bf16(c, f->a, H, base, &L->o_proj, f->ky, P, T);
}
