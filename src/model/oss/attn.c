/* model/oss/attn.c - the attention half of a gpt-oss layer (spec gpt-oss
 * section 3): RMSNorm, GQA with biases, half-split RoPE with YaRN, sinks,
 * sliding windows, o_proj with bias, the residual add, and the norm before
 * the MoE.
 *
 * Owns: the keys and values of each position in the layer's cache
 *   (cfg.pos_floats = [k: kv heads x head_dim | v: kv heads x head_dim],
 *   keys rotated; position p in slot p mod the cache's slots, a sliding
 *   layer's a ring: model.h, ms_state), and attention over them.
 * Definitions (fp32 where not said; the files are compiled without
 *   contraction):
 *   - RoPE: inv_freq[i] (i < head_dim/2) in double as Hugging Face's YaRN
 *     (extrapolated 1/theta^(2i/d) and interpolated 1/(factor theta^(2i/d))
 *     blended by a linear ramp between the correction dims of beta_fast and
 *     beta_slow, not truncated unless the config says so); per position p,
 *     cos_i = (float)(cos(p inv_freq[i]) * mscale), sin_i likewise, mscale =
 *     0.1 ln(factor) + 1; log, pow, cos and sin in double, the engine's own
 *     (ms_log_d, ms_pow_d, ms_sincos_d: kernels.h), not libm's. A pair (x_i, x_{i+d/2})
 *     becomes (x_i cos_i - x_{i+d/2} sin_i, x_{i+d/2} cos_i + x_i sin_i).
 *   - score of key j: (float)(acc / sqrt(head_dim)), acc the double sum in
 *     index order of q[i] k_j[i] (as ms_att_scores).
 *   - softmax with the head's sink S: m = max(S, scores); e_j = ms_expf(s_j -
 *     m), e_S = ms_expf(S - m); sum in double, keys in order then the sink;
 *     p_j = (float)(e_j / sum). The sink takes its share and is dropped.
 *   - out[i] = (float) of the double sum over keys in order of p_j v_j[i].
 *   - a sliding layer's query at position p sees keys p - window < j <= p.
 * Invariants: every number a token gets is computed the same way whatever
 *   the chunk, batch or thread split (docs/DETERMINISM.md).
 * Does not: read from the store except the layer's attention region.
 */
#include "model/oss/oss.h"

#include <math.h>
#include <string.h>

enum { OSS_MAX_HALF = MS_OSS_MAX_HEAD_DIM / 2 };

void ms_oss_rope_freqs(const ms_config *c, double *inv_freq) {
    const int64_t d = c->head_dim, half = d / 2;
    const double base = c->rope_theta, factor = c->rope_factor, two_pi = 2.0 * 3.14159265358979323846;
    /* the dimension whose wavelength makes n rotations over the original context */
    const double lb = ms_log_d(base);
    double lo = (double)d * ms_log_d((double)c->rope_original_max / (c->rope_beta_fast * two_pi)) / (2.0 * lb);
    double hi = (double)d * ms_log_d((double)c->rope_original_max / (c->rope_beta_slow * two_pi)) / (2.0 * lb);
    if (c->rope_truncate) { lo = floor(lo); hi = ceil(hi); }
    if (lo < 0) lo = 0;
    if (hi > (double)(d - 1)) hi = (double)(d - 1);
    if (lo == hi) hi += 0.001;
    for (int64_t i = 0; i < half; i++) {
        const double pos_freq = ms_pow_d(base, (double)(2 * i) / (double)d);
        double ramp = ((double)i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        const double extrap = 1.0 - ramp;   /* weight of the extrapolated frequency */
        inv_freq[i] = (1.0 / (factor * pos_freq)) * (1.0 - extrap) + (1.0 / pos_freq) * extrap;
    }
}

/* x [head_dim] rotated for position pos (cs: cos [half] then sin [half]). */
static void rotate(float *x, const float *cs, int64_t half) {
    for (int64_t i = 0; i < half; i++) {
        const float x1 = x[i], x2 = x[i + half], co = cs[i], si = cs[half + i];
        x[i] = x1 * co - x2 * si;
        x[i + half] = x2 * co + x1 * si;
    }
}

static void rope_table(const ms_config *c, const double *inv_freq, int64_t pos, float *cs) {
    const int64_t half = c->head_dim / 2;
    const double mscale = 0.1 * ms_log_d(c->rope_factor) + 1.0;
    for (int64_t i = 0; i < half; i++) {
        double sn, co;
        ms_sincos_d((double)pos * inv_freq[i], &sn, &co);
        cs[i] = (float)(co * mscale);
        cs[half + i] = (float)(sn * mscale);
    }
}

/* y[t][i] += b[i] for t < T (a bias after a matrix product). */
static void add_bias(float *y, int64_t ldy, const float *b, int64_t n, int64_t T) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < n; i++) y[t * ldy + i] = y[t * ldy + i] + b[i];
}

typedef struct attn_job {
    const ms_config *c;
    const ms_kern *k;
    ms_fwd *f;
    const float *cache, *sinks;
    int64_t t0, T, p0;          /* the segment's tokens [t0, t0 + T) of the pass, at positions p0.. */
    int64_t slots;              /* position p's keys and values are in slot p mod slots */
    int sliding;
} attn_job;

/* sc[s] = the softmax of the n scores with the sink: max m of the sink and
 * the scores, e_s = ms_expf(sc[s] - m) (the table's expf_n: the same bits),
 * the sum in double in key order then the sink's term, sc[s] = (float)(e_s /
 * sum). */
static void softmax_sink(const ms_kern *k, float *sc, int64_t n, float sink) {
    float mx = sink;
    for (int64_t s = 0; s < n; s++)
        if (sc[s] > mx) mx = sc[s];
    for (int64_t s = 0; s < n; s++) sc[s] = sc[s] - mx;
    k->expf_n(sc, sc, n);
    double sum = 0.0;
    for (int64_t s = 0; s < n; s++) sum += (double)sc[s];
    sum += (double)ms_expf(sink - mx);
    for (int64_t s = 0; s < n; s++) sc[s] = (float)((double)sc[s] / sum);
}

/* KV groups [g0, g1) of every token of the block: a group's heads together
 * through the kernel table's attention (kernels.h, ms_att_scores / ms_att_mix:
 * the definitions above, each key and value read once for all the heads). */
static void attn_groups(void *ctx, int64_t g0, int64_t g1) {
    const attn_job *j = ctx;
    const ms_config *c = j->c;
    const ms_kern *k = j->k;
    ms_fwd *f = j->f;
    const int64_t nh = c->num_attention_heads, hd = c->head_dim, kvh = c->num_key_value_heads;
    const int64_t pw = c->pos_floats, group = nh / kvh, ld = f->att_stride;
    const double scale = 1.0 / sqrt((double)hd);
    for (int64_t g = g0; g < g1; g++) {
        const int64_t h0 = g * group;
        const float *kb = j->cache + g * hd, *vb = kb + kvh * hd;
        float *sc = f->att + h0 * ld;
        double *qd = f->oqd + h0 * hd;
        for (int64_t t = j->t0; t < j->t0 + j->T; t++) {
            const int64_t p = j->p0 + (t - j->t0);
            const int64_t k0 = j->sliding && p + 1 > c->sliding_window ? p + 1 - c->sliding_window : 0;
            /* keys k0..p: slots s0.. then, where they wrap around a ring, 0.. */
            const int64_t n = p + 1 - k0, s0 = k0 % j->slots, n0 = n < j->slots - s0 ? n : j->slots - s0;
            const float *q = f->q + (t * nh + h0) * hd;
            for (int64_t i = 0; i < group * hd; i++) qd[i] = (double)q[i];
            k->att_scores(sc, ld, qd, hd, group, kb + s0 * pw, pw, hd, n0, scale);
            if (n0 < n) k->att_scores(sc + n0, ld, qd, hd, group, kb, pw, hd, n - n0, scale);
            for (int64_t h = 0; h < group; h++) softmax_sink(k, sc + h * ld, n, j->sinks[h0 + h]);
            /* the mix is one sum over the window in position order: a wrapped
               window's values go into one run first */
            const float *vw = vb + s0 * pw;
            int64_t vstride = pw;
            if (n0 < n) {
                MS_ASSERT(n <= c->sliding_window);
                float *w = f->owin + g * c->sliding_window * hd;
                for (int64_t s = 0; s < n; s++)
                    memcpy(w + s * hd, vb + (s < n0 ? s0 + s : s - n0) * pw, (size_t)hd * sizeof(float));
                vw = w;
                vstride = hd;
            }
            k->att_mix(f->mo + (t * nh + h0) * hd, hd, sc, ld, group, vw, vstride, hd, n);
        }
    }
}

/* f->x [T, H] (normed) in, f->a [T, H] out; each segment's keys and values
 * into its own cache before its queries attend, in blocks a sliding layer's
 * ring holds beside the window - 1 keys before them (model.h, ms_state). */
static void attention(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L,
                      const uint8_t *base, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, nh = cf->num_attention_heads, hd = cf->head_dim, half = hd / 2;
    const int64_t kv = cf->num_key_value_heads * hd, pw = cf->pos_floats;
    ms_mm_bf16(c, f->q, nh * hd, base, &L->q_proj, f->x, H, T);
    add_bias(f->q, nh * hd, ms_fwd_vec(base, &L->q_bias, f->vec0), nh * hd, T);
    ms_mm_bf16(c, f->ckv, pw, base, &L->k_proj, f->x, H, T);
    add_bias(f->ckv, pw, ms_fwd_vec(base, &L->k_bias, f->vec0), kv, T);
    ms_mm_bf16(c, f->ckv + kv, pw, base, &L->v_proj, f->x, H, T);
    add_bias(f->ckv + kv, pw, ms_fwd_vec(base, &L->v_bias, f->vec0), kv, T);
    double inv_freq[OSS_MAX_HALF];
    float cs[MS_OSS_MAX_HEAD_DIM];
    ms_oss_rope_freqs(cf, inv_freq);
    const float *sinks = ms_fwd_vec(base, &L->sinks, f->vec1);
    for (int is = 0, t0 = 0; is < nseg; t0 += (int)seg[is].T, is++) {
        const ms_state *st = seg[is].st;
        float *cache = st->pos_cache[L->pos_index];
        const int64_t slots = ms_state_slots(st, L), end = t0 + seg[is].T;
        const int64_t span = L->is_sliding ? ms_state_span(st, c->m) : INT64_MAX;
        const int64_t block = span < seg[is].T ? span : seg[is].T;
        MS_ASSERT(block >= 1);
        for (int64_t b0 = t0; b0 < end; b0 += block) {
            const int64_t b1 = b0 + block < end ? b0 + block : end, p0 = st->n_past + b0 - t0;
            for (int64_t t = b0; t < b1; t++) {
                rope_table(cf, inv_freq, p0 + t - b0, cs);
                for (int64_t h = 0; h < nh; h++) rotate(f->q + (t * nh + h) * hd, cs, half);
                float *ce = cache + ((p0 + t - b0) % slots) * pw;
                memcpy(ce, f->ckv + t * pw, (size_t)pw * sizeof(float));
                for (int64_t g = 0; g < cf->num_key_value_heads; g++) rotate(ce + g * hd, cs, half);
            }
            attn_job j = { cf, c->m->kern, f, cache, sinks, b0, b1 - b0, p0, slots, L->is_sliding };
            ms_pool_for(c->pool, cf->num_key_value_heads, 1, attn_groups, &j);
        }
    }
    ms_mm_bf16(c, f->a, H, base, &L->o_proj, f->mo, nh * hd, T);
    add_bias(f->a, H, ms_fwd_vec(base, &L->o_bias, f->vec0), H, T);
}

ms_status ms_oss_attention_part(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L,
                                int64_t T, ms_err *err) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size;
    const float eps = (float)cf->rms_norm_eps;
    const uint8_t *base = ms_store_acquire(c->store, L->attn_region, err);
    if (!base) return ms_fwd_with_context(err, err->status, "layer %d attention weights", L->index);
    const float *in_n = ms_fwd_vec(base, &L->input_norm, f->vec2);
    for (int64_t t = 0; t < T; t++) ms_rmsnorm(f->x + t * H, f->run + t * H, in_n, H, eps);
    attention(c, f, seg, nseg, L, base, T);
    for (int64_t i = 0; i < T * H; i++) f->run[i] = f->run[i] + f->a[i];
    ms_store_release(c->store, L->attn_region);
    return MS_OK;
}
