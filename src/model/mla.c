/* model/mla.c - gated NoPE MLA, the full-attention mixer (spec 4.4), in the
 * absorbed form over the latent cache.
 *
 * Owns: MLA's projections, the write of each token's latent (normed c_kv and
 * the unrotated k_rope) into its sequence's cache, attention over the cache,
 * and the output gate.
 * Main idea: the cache holds kv_lora_rank + qk_rope_head_dim floats per
 * position, never per-head keys or values: W_UK is absorbed into the query
 * and W_UV applied after attention. Heads are split across the pool in
 * groups that share each read of the cache.
 * Invariants: every score and mix is a dot product in index order in double
 * (kernels.h, ms_att_scores / ms_att_mix), so a token's numbers do not depend
 * on T or on the split across threads (docs/DETERMINISM.md).
 * Does not: read weights from the store (the layer loop hands it the region).
 */
#include "model/forward_int.h"

#include <math.h>
#include <string.h>

typedef struct mla_job {
    const ms_config *c;
    const ms_kern *k;
    ms_fwd *f;
    const uint8_t *base;
    const ms_layer *L;
    const float *cache;
    int64_t t0, T, p0;          /* the segment's tokens [t0, t0 + T) of the pass, at positions p0.. */
} mla_job;

enum { MLA_CHUNK = 64 };   /* double accumulators per pass of the absorb and the output */

static void mla_heads(void *ctx, int64_t h0, int64_t h1) {
    mla_job *j = ctx;
    const ms_config *c = j->c;
    ms_fwd *f = j->f;
    const int64_t nh = c->num_attention_heads, dn = c->qk_nope_head_dim, dr = c->qk_rope_head_dim;
    const int64_t dvh = c->v_head_dim, kvr = c->kv_lora_rank, pw = kvr + dr;
    const int64_t qw = dn + dr, kvw = dn + dvh, lda = f->att_stride, nq = h1 - h0;
    /* scale over the full q/k width (trap: test trap_mla_scale_128) */
    const double scale = 1.0 / sqrt((double)(dn + dr));
    const uint16_t *kvb = (const uint16_t *)(j->base + j->L->kv_b.off);
    /* per head h: its query as doubles [pw] (the absorbed q_nope, then q_rope),
     * ol [kvr], the scores [n_pos] */
    double *const qd0 = (double *)(void *)(f->att + h0 * lda);
    float *const ol0 = f->att + h0 * lda + 2 * pw, *const sc0 = ol0 + kvr;
    for (int64_t t = j->t0; t < j->t0 + j->T; t++) {
        const int64_t n_pos = j->p0 + (t - j->t0) + 1;
        for (int64_t h = h0; h < h1; h++) {
            const float *q = f->q + t * nh * qw + h * qw;   /* [q_nope | q_rope] */
            const uint16_t *wk = kvb + h * kvw * kvr;        /* k_nope rows [dn, kvr] */
            double *qd = qd0 + (h - h0) * (lda / 2);
            /* absorb W_UK: qa[i] = sum over n ascending of q_nope[n] * W_k[n][i],
             * in double, rounded to float. Computed MLA_CHUNK outputs at a time
             * with n outermost, so the inner loop reads W_k rows contiguously and
             * runs across independent outputs; each output still adds the same
             * exact products in the same order. The full-chunk loop has a
             * constant trip count because that is what GCC vectorises at -O2
             * (the loop bounded by ni alone stayed scalar); the other is the tail. */
            for (int64_t i0 = 0; i0 < kvr; i0 += MLA_CHUNK) {
                const int64_t ni = kvr - i0 < MLA_CHUNK ? kvr - i0 : MLA_CHUNK;
                double acc[MLA_CHUNK] = { 0 };
                for (int64_t n = 0; n < dn; n++) {
                    const double qn = (double)q[n];
                    const uint16_t *wr = wk + n * kvr + i0;
                    if (ni == MLA_CHUNK)
                        for (int64_t i = 0; i < MLA_CHUNK; i++) acc[i] += qn * (double)ms_bf16_to_f32(wr[i]);
                    else
                        for (int64_t i = 0; i < ni; i++) acc[i] += qn * (double)ms_bf16_to_f32(wr[i]);
                }
                for (int64_t i = 0; i < ni; i++) qd[i0 + i] = (double)(float)acc[i];
            }
            /* the rope slots are scored UNROTATED against the one shared k_rope
             * (trap: test trap_mla_rope_rotated) */
            for (int64_t r = 0; r < dr; r++) qd[kvr + r] = (double)q[dn + r];
        }
        /* every head's scores: one dot product per position over [c_kv | k_rope],
         * its terms in order (kernels.h, ms_att_scores) */
        j->k->att_scores(sc0, lda, qd0, lda / 2, nq, j->cache, pw, pw, n_pos, scale);
        for (int64_t h = 0; h < nq; h++) ms_softmax_inplace(sc0 + h * lda, n_pos);
        /* ol[i] = sum over positions ascending of p[s] * c_kv[s][i], in double */
        j->k->att_mix(ol0, lda, sc0, lda, nq, j->cache, pw, kvr, n_pos);
        for (int64_t h = h0; h < h1; h++) {
            float *ol = ol0 + (h - h0) * lda;
            const uint16_t *wv = kvb + h * kvw * kvr + dn * kvr;   /* v rows [dvh, kvr] */
            float *o = f->mo + t * nh * dvh + h * dvh;
            j->k->matvec_bf16(o, wv, ol, 0, dvh, kvr);       /* W_UV after attention */
            float *g = f->mg + t * nh * dvh + h * dvh;      /* read only here: gated in place */
            j->k->sigmoidf_n(g, g, dvh);                     /* gate before o_proj */
            for (int64_t b = 0; b < dvh; b++) o[b] = o[b] * g[b];
        }
    }
}

void ms_mla_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L,
                    const uint8_t *base, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, nh = cf->num_attention_heads;
    const int64_t qr = cf->q_lora_rank, kvr = cf->kv_lora_rank, dr = cf->qk_rope_head_dim;
    const int64_t qw = cf->qk_nope_head_dim + dr, pw = kvr + dr;
    const float eps = (float)cf->rms_norm_eps;
    ms_mm_bf16(c, f->cq, qr, base, &L->q_a, f->x, H, T);
    const float *qan = ms_fwd_vec(base, &L->q_a_norm, f->vec0);
    for (int64_t t = 0; t < T; t++) ms_rmsnorm(f->cq + t * qr, f->cq + t * qr, qan, qr, eps);
    ms_mm_bf16(c, f->q, nh * qw, base, &L->q_b, f->cq, qr, T);
    ms_mm_bf16(c, f->ckv, pw, base, &L->kv_a, f->x, H, T);
    const float *kvn = ms_fwd_vec(base, &L->kv_a_norm, f->vec1);
    ms_mm_bf16(c, f->mg, nh * cf->v_head_dim, base, &L->g_proj, f->x, H, T);
    /* attention, one segment (sequence) at a time over its own cache */
    for (int is = 0, t0 = 0; is < nseg; t0 += (int)seg[is].T, is++) {
        const ms_state *st = seg[is].st;
        float *cache = st->pos_cache[L->pos_index];
        for (int64_t t = t0; t < t0 + seg[is].T; t++) {
            float *ce = cache + (st->n_past + t - t0) * pw;
            ms_rmsnorm(ce, f->ckv + t * pw, kvn, kvr, eps);         /* c_kv normed */
            memcpy(ce + kvr, f->ckv + t * pw + kvr, (size_t)dr * sizeof(float)); /* k_rope, not normed */
        }
        mla_job j = { cf, c->m->kern, f, base, L, cache, t0, seg[is].T, st->n_past };
        ms_pool_for(c->pool, nh, 8, mla_heads, &j);     /* 8 heads share each read of the cache */
    }
    ms_mm_bf16(c, f->a, H, base, &L->o_proj, f->mo, nh * cf->v_head_dim, T);
}
