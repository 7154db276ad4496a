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
 *     0.1 ln(factor) + 1, cos/sin in double (libm). A pair (x_i, x_{i+d/2})
 *     becomes (x_i cos_i - x_{i+d/2} sin_i, x_{i+d/2} cos_i + x_i sin_i).
 *   - score of key j: (float)(acc / sqrt(head_dim)), acc the double sum in
 *     index order of q[i] k_j[i] (as ms_mla_scores).
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
    double lo = (double)d * log((double)c->rope_original_max / (c->rope_beta_fast * two_pi)) / (2.0 * log(base));
    double hi = (double)d * log((double)c->rope_original_max / (c->rope_beta_slow * two_pi)) / (2.0 * log(base));
    if (c->rope_truncate) { lo = floor(lo); hi = ceil(hi); }
    if (lo < 0) lo = 0;
    if (hi > (double)(d - 1)) hi = (double)(d - 1);
    if (lo == hi) hi += 0.001;
    for (int64_t i = 0; i < half; i++) {
        const double pos_freq = pow(base, (double)(2 * i) / (double)d);
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
    const double mscale = 0.1 * log(c->rope_factor) + 1.0;
    for (int64_t i = 0; i < half; i++) {
        const double a = (double)pos * inv_freq[i];
        cs[i] = (float)(cos(a) * mscale);
        cs[half + i] = (float)(sin(a) * mscale);
    }
}

/* y[t][i] += b[i] for t < T (a bias after a matrix product). */
static void add_bias(float *y, int64_t ldy, const float *b, int64_t n, int64_t T) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < n; i++) y[t * ldy + i] = y[t * ldy + i] + b[i];
}

typedef struct attn_job {
    const ms_config *c;
    ms_fwd *f;
    const float *cache, *sinks;
    int64_t t0, T, p0;          /* the segment's tokens [t0, t0 + T) of the pass, at positions p0.. */
    int64_t slots;              /* position p's keys and values are in slot p mod slots */
    int sliding;
} attn_job;

/* n keys (or values) in position order at b, b + pw, ...: a cache's keys are
 * one run, or two where they wrap around a sliding layer's ring */
typedef struct key_run {
    const float *b;
    int64_t n;
} key_run;

/* sc[s] = (float)(scale * sum over i in order of q[i] k_s[i]) in double, for
 * the n keys at kb, kb + pw, ...: the definition above, key by key. Four keys
 * at a time, each sum in its own register: the dot product of one key is a
 * chain of head_dim dependent additions, and four chains overlap in the core;
 * each key's sum keeps its order, so the bits are those of one key at a time. */
static void scores(const double *q, const float *kb, int64_t pw, int64_t n, int64_t hd, double scale, float *sc) {
    int64_t s = 0;
    for (; s + 4 <= n; s += 4) {
        const float *k0 = kb + s * pw, *k1 = k0 + pw, *k2 = k1 + pw, *k3 = k2 + pw;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int64_t i = 0; i < hd; i++) {
            const double qi = q[i];
            a0 += qi * (double)k0[i];
            a1 += qi * (double)k1[i];
            a2 += qi * (double)k2[i];
            a3 += qi * (double)k3[i];
        }
        sc[s + 0] = (float)(a0 * scale);
        sc[s + 1] = (float)(a1 * scale);
        sc[s + 2] = (float)(a2 * scale);
        sc[s + 3] = (float)(a3 * scale);
    }
    for (; s < n; s++) {
        const float *k = kb + s * pw;
        double acc = 0.0;
        for (int64_t i = 0; i < hd; i++) acc += q[i] * (double)k[i];
        sc[s] = (float)(acc * scale);
    }
}

/* out[i] = (float)(sum over keys s in order of (double)p[s] v_s[i]) for the
 * values of the two runs, the first's then the second's: eight elements at a
 * time, each in its own register across all the keys (an array in memory made
 * every addition a load and a store), each element's sum still in key order. */
static void weighted_values(const float *p, const key_run run[2], int64_t pw, int64_t hd, float *out) {
    int64_t i0 = 0;
    for (; i0 + 8 <= hd; i0 += 8) {
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
        for (int r = 0; r < 2; r++) {
            const float *pr = r ? p + run[0].n : p;
            for (int64_t s = 0; s < run[r].n; s++) {
                const double ps = (double)pr[s];
                const float *v = run[r].b + s * pw + i0;
                a0 += ps * (double)v[0];
                a1 += ps * (double)v[1];
                a2 += ps * (double)v[2];
                a3 += ps * (double)v[3];
                a4 += ps * (double)v[4];
                a5 += ps * (double)v[5];
                a6 += ps * (double)v[6];
                a7 += ps * (double)v[7];
            }
        }
        out[i0 + 0] = (float)a0;
        out[i0 + 1] = (float)a1;
        out[i0 + 2] = (float)a2;
        out[i0 + 3] = (float)a3;
        out[i0 + 4] = (float)a4;
        out[i0 + 5] = (float)a5;
        out[i0 + 6] = (float)a6;
        out[i0 + 7] = (float)a7;
    }
    for (; i0 < hd; i0++) {
        double a = 0;
        for (int r = 0; r < 2; r++) {
            const float *pr = r ? p + run[0].n : p;
            for (int64_t s = 0; s < run[r].n; s++) a += (double)pr[s] * (double)run[r].b[s * pw + i0];
        }
        out[i0] = (float)a;
    }
}

/* Heads [h0, h1) of every token of the segment. */
static void attn_heads(void *ctx, int64_t h0, int64_t h1) {
    const attn_job *j = ctx;
    const ms_config *c = j->c;
    ms_fwd *f = j->f;
    const int64_t nh = c->num_attention_heads, hd = c->head_dim, kvh = c->num_key_value_heads;
    const int64_t pw = c->pos_floats, group = nh / kvh;
    const double scale = 1.0 / sqrt((double)hd);
    for (int64_t h = h0; h < h1; h++) {
        float *sc = f->att + h * f->att_stride;
        const int64_t g = h / group;
        for (int64_t t = j->t0; t < j->t0 + j->T; t++) {
            const int64_t p = j->p0 + (t - j->t0);
            const int64_t k0 = j->sliding && p + 1 > c->sliding_window ? p + 1 - c->sliding_window : 0;
            const int64_t n = p + 1 - k0, s0 = k0 % j->slots, n0 = n < j->slots - s0 ? n : j->slots - s0;
            const key_run keys[2] = { { j->cache + s0 * pw + g * hd, n0 }, { j->cache + g * hd, n - n0 } };
            const key_run vals[2] = { { keys[0].b + kvh * hd, n0 }, { keys[1].b + kvh * hd, n - n0 } };
            const float *q = f->q + (t * nh + h) * hd;
            double qd[MS_OSS_MAX_HEAD_DIM];
            for (int64_t i = 0; i < hd; i++) qd[i] = (double)q[i];
            scores(qd, keys[0].b, pw, keys[0].n, hd, scale, sc);
            scores(qd, keys[1].b, pw, keys[1].n, hd, scale, sc + n0);
            float mx = j->sinks[h];
            for (int64_t s = 0; s < n; s++)
                if (sc[s] > mx) mx = sc[s];
            double sum = 0.0;
            for (int64_t s = 0; s < n; s++) {
                sc[s] = ms_expf(sc[s] - mx);
                sum += (double)sc[s];
            }
            sum += (double)ms_expf(j->sinks[h] - mx);
            for (int64_t s = 0; s < n; s++) sc[s] = (float)((double)sc[s] / sum);
            weighted_values(sc, vals, pw, hd, f->mo + (t * nh + h) * hd);
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
        const int64_t block = slots < st->max_ctx ? slots - cf->sliding_window + 1 : seg[is].T;
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
            attn_job j = { cf, f, cache, sinks, b0, b1 - b0, p0, slots, L->is_sliding };
            ms_pool_for(c->pool, nh, 1, attn_heads, &j);
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
