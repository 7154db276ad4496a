/* model/rollback.c - the record of a forward and the rollback of the state
 * to a prefix of its tokens (speculative decoding; model.h, ms_rollback).
 *
 * Owns: the layout of one KDA layer's record (model.h), its allocation, the
 * recording while a forward runs (ms_kda_record, called by kda.c before the
 * heads update the state), and ms_state_rollback.
 * Main idea: the MLA cache rolls back by moving n_past; a KDA layer's state
 * cannot, so the record keeps the state at the chunk start and each token's
 * recurrence inputs, and the rollback replays the kept tokens through
 * ms_kda_step, the same function the forward uses: the replayed state has the
 * bits of a forward over those tokens alone (tests/test_spec.c).
 * Invariants: a record is usable only once its forward has completed
 *   (rb->n_rec is set last, by the forward); a rollback consumes it.
 * Does not: read weights (the record holds the few the update needs).
 */
#include "model/forward_int.h"

#include <stdlib.h>
#include <string.h>

static int64_t rec_S(const ms_config *c) { return c->kda_num_heads * c->kda_head_dim * c->kda_head_dim; }
static int64_t rec_P(const ms_config *c) { return c->kda_num_heads * c->kda_head_dim; }
static int64_t rec_conv(const ms_config *c) { return 3 * rec_P(c) * (c->short_conv_kernel_size - 1); }
static int64_t rec_tok(const ms_config *c) { return 4 * rec_P(c) + c->kda_num_heads; }
/* offsets of the parts of one layer's record, in floats */
static int64_t rec_o_conv0(const ms_config *c) { return rec_S(c); }
static int64_t rec_o_taps(const ms_config *c) { return rec_o_conv0(c) + rec_conv(c); }
static int64_t rec_o_alog(const ms_config *c) { return rec_o_taps(c) + 3 * rec_P(c) * c->short_conv_kernel_size; }
static int64_t rec_o_dtb(const ms_config *c) { return rec_o_alog(c) + c->kda_num_heads; }
static int64_t rec_o_tok(const ms_config *c) { return rec_o_dtb(c) + rec_P(c); }
static int64_t rec_floats(const ms_config *c, int64_t max_T) { return rec_o_tok(c) + max_T * rec_tok(c); }

int64_t ms_rollback_bytes(const ms_model *m, int64_t max_T) {
    return (m->kda1 - m->kda0) * (rec_floats(&m->cfg, max_T) * (int64_t)sizeof(float) + (int64_t)sizeof(float *));
}

ms_status ms_rollback_init(ms_rollback *rb, const ms_model *m, int64_t max_T, ms_err *err) {
    const ms_config *c = &m->cfg;
    memset(rb, 0, sizeof *rb);
    rb->max_T = max_T;
    rb->kda = calloc((size_t)c->n_kda_layers + 1, sizeof *rb->kda);
    if (!rb->kda) goto oom;
    for (int64_t i = m->kda0; i < m->kda1; i++)
        if (!(rb->kda[i] = malloc((size_t)rec_floats(c, max_T) * sizeof(float)))) goto oom;
    return MS_OK;
oom:
    ms_rollback_free(rb, m);
    return ms_err_set(err, MS_E_NOMEM, "speculation record: out of memory (%lld tokens)", (long long)max_T);
}

void ms_rollback_free(ms_rollback *rb, const ms_model *m) {
    for (int64_t i = 0; rb->kda && i < m->cfg.n_kda_layers; i++) free(rb->kda[i]);
    free(rb->kda);
    memset(rb, 0, sizeof *rb);
}

/* Before the heads run: the state at the segment's start, the weights the
 * update reads, and each of its tokens' recurrence inputs (the projections,
 * pre-conv: the pass's rows t0..t0 + T - 1). */
void ms_kda_record(const ms_config *c, ms_fwd *f, const ms_layer *L, const uint8_t *base, const float *S,
                   const float *conv, float *r, int64_t t0, int64_t T) {
    const int64_t P = rec_P(c), nh = c->kda_num_heads, K = c->short_conv_kernel_size;
    memcpy(r, S, (size_t)rec_S(c) * sizeof(float));
    memcpy(r + rec_o_conv0(c), conv, (size_t)rec_conv(c) * sizeof(float));
    const ms_wt *taps[3] = { &L->q_conv, &L->k_conv, &L->v_conv };
    for (int s = 0; s < 3; s++)
        memcpy(r + rec_o_taps(c) + s * P * K, base + taps[s]->off, (size_t)(P * K) * sizeof(float));
    memcpy(r + rec_o_alog(c), base + L->a_log.off, (size_t)nh * sizeof(float));
    for (int64_t h = 0; h < nh; h++) {
        float *dst = r + rec_o_dtb(c) + h * c->kda_head_dim;
        const float *src = ms_kda_dtb(base, L, h, c->kda_head_dim, dst);
        if (src != dst) memcpy(dst, src, (size_t)c->kda_head_dim * sizeof(float));
    }
    for (int64_t t = 0; t < T; t++) {
        float *rt = r + rec_o_tok(c) + t * rec_tok(c);
        const int64_t u = t0 + t;
        memcpy(rt, f->kq + u * P, (size_t)P * sizeof(float));
        memcpy(rt + P, f->kk + u * P, (size_t)P * sizeof(float));
        memcpy(rt + 2 * P, f->kv + u * P, (size_t)P * sizeof(float));
        memcpy(rt + 3 * P, f->kf + u * P, (size_t)P * sizeof(float));
        memcpy(rt + 4 * P, f->kb + u * nh, (size_t)nh * sizeof(float));
    }
}

typedef struct replay_job {
    const ms_config *c;
    const ms_kern *k;
    const float *r;             /* the layer's record */
    float *S, *conv;
    int64_t n;
} replay_job;

static void replay_heads(void *ctx, int64_t h0, int64_t h1) {
    replay_job *j = ctx;
    const ms_config *c = j->c;
    const int64_t dk = c->kda_head_dim, P = rec_P(c), K = c->short_conv_kernel_size;
    const float *r = j->r;
    const float *taps = r + rec_o_taps(c);
    const uint8_t *const wconv[3] = { (const uint8_t *)taps, (const uint8_t *)(taps + P * K),
                                      (const uint8_t *)(taps + 2 * P * K) };
    float xq[1024], xk[1024], xv[1024];
    float *const x[3] = { xq, xk, xv };
    for (int64_t h = h0; h < h1; h++) {
        float *S = j->S + h * dk * dk;
        const float A = ms_expf(r[rec_o_alog(c) + h]);
        const float *dtb = r + rec_o_dtb(c) + h * dk;
        for (int64_t t = 0; t < j->n; t++) {
            const float *rt = r + rec_o_tok(c) + t * rec_tok(c);
            for (int s = 0; s < 3; s++) memcpy(x[s], rt + s * P + h * dk, (size_t)dk * sizeof(float));
            ms_kda_step(c, j->k, h, wconv, A, dtb, x, j->conv, rt + 3 * P + h * dk, rt[4 * P + h], S, 0.0f, NULL);
        }
    }
}

void ms_state_rollback(ms_state *st, ms_rollback *rb, const ms_model *m, ms_pool *pool, int64_t n_keep) {
    const ms_config *c = &m->cfg;
    MS_ASSERT(n_keep >= 1 && n_keep <= rb->n_rec);
    if (n_keep < rb->n_rec) {
        for (int64_t i = m->kda0; i < m->kda1; i++) {
            const float *r = rb->kda[i];
            memcpy(st->kda_S[i], r, (size_t)rec_S(c) * sizeof(float));
            memcpy(st->kda_conv[i], r + rec_o_conv0(c), (size_t)rec_conv(c) * sizeof(float));
            replay_job j = { c, m->kern, r, st->kda_S[i], st->kda_conv[i], n_keep };
            ms_pool_for(pool, c->kda_num_heads, 1, replay_heads, &j);
        }
    }
    /* positions past it are overwritten later; a ring keeps max_back + 1 behind */
    const int moved = ms_state_rewind(st, rb->n_past0 + n_keep, m);
    MS_ASSERT(moved);
    rb->n_rec = 0;
}
