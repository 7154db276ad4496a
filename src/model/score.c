/* model/score.c - log-probabilities without the [T, V] logits: the
 * one-pass log-sum-exp (ms_lse, model.h) and the scoring of a pass's rows.
 *
 * Owns: ms_lse_* and the scored head: lm_head a tile of MS_SCORE_ROWS
 * vocabulary rows at a time, each tile folded into every scored row's sum
 * in vocabulary order, the target's logit noted as its tile passes.
 * Invariants: ms_lse_fold is one sequential fold, so how the vocabulary is
 * cut into tiles and chunks changes no bit; the tiles' logits are the same
 * products as the unscored head's.
 * Does not: choose which rows are scored (the engine sets ms_fwd_ctx.score_*).
 */
#include "model/forward_int.h"

#include <math.h>
#include <string.h>

void ms_lse_init(ms_lse *s, int k) {
    s->m = -INFINITY;
    s->z = 0.0;
    s->k = k < 0 ? 0 : k > MS_LSE_TOP_MAX ? MS_LSE_TOP_MAX : k;
    s->n_top = 0;
}

void ms_lse_fold(ms_lse *s, const float *x, int64_t n, int64_t id0) {
    double mm = s->m, zz = s->z;
    for (int64_t i = 0; i < n; i++) {
        const double v = x[i];
        if (v > mm) {
            zz = zz * ms_exp_d(mm - v) + 1.0;
            mm = v;
        } else {
            zz += ms_exp_d(v - mm);
        }
        /* top k: x enters when it beats the k-th (strictly: an equal later id
           stays out), after every kept value >= it */
        if (s->k > 0 && (s->n_top < s->k || x[i] > s->top_x[s->n_top - 1])) {
            int j = s->n_top < s->k ? s->n_top++ : s->k - 1;
            for (; j > 0 && !(s->top_x[j - 1] >= x[i]); j--) {
                s->top_x[j] = s->top_x[j - 1];
                s->top_id[j] = s->top_id[j - 1];
            }
            s->top_x[j] = x[i];
            s->top_id[j] = (int32_t)(id0 + i);
        }
    }
    s->m = mm;
    s->z = zz;
}

double ms_lse_logprob(const ms_lse *s, float x) {
    return ((double)x - s->m) - ms_log_d(s->z);
}

void ms_lse_top(const ms_lse *s, int k, int32_t *ids, double *logprobs) {
    for (int i = 0; i < k; i++) {
        ids[i] = i < s->n_top ? s->top_id[i] : -1;
        logprobs[i] = i < s->n_top ? ms_lse_logprob(s, s->top_x[i]) : NAN;
    }
}

void ms_lm_tile(ms_fwd_ctx *c, ms_fwd *f, const uint8_t *lb, int ic, int64_t r0, int64_t nr, int64_t n) {
    const ms_model *m = c->m;
    ms_wt part = m->lm_head;
    part.off = m->lm_off[ic] + (r0 - m->lm_row0[ic]) * m->cfg.hidden_size * 2;
    part.rows = nr;
    ms_mm_bf16(c, f->lt, MS_SCORE_ROWS, lb, &part, f->y, m->cfg.hidden_size, n);
}

typedef struct score_job {
    const ms_fwd_ctx *c;
    ms_fwd *f;
    int64_t r0, nr;             /* the tile's vocabulary rows */
} score_job;

/* Rows [t0, t1): fold the tile into each row's sum; note the target's logit. */
static void score_part(void *ctx, int64_t t0, int64_t t1) {
    const score_job *j = ctx;
    ms_fwd *f = j->f;
    for (int64_t t = t0; t < t1; t++) {
        const float *x = f->lt + t * MS_SCORE_ROWS;
        ms_lse_fold(&f->sl[t], x, j->nr, j->r0);
        const int64_t d = (int64_t)j->c->score_target[t] - j->r0;
        if (d >= 0 && d < j->nr) f->sx[t] = x[d];
    }
}

/* Scoring: lm_head chunk ic (its region's bytes at lb) in tiles of MS_SCORE_ROWS
 * vocabulary rows; each tile's logits are folded into the rows' sums in
 * vocabulary order (the chunks come in order) and the last row's are kept in
 * `logits` [V]. The logits are the same products as the unscored path's. */
void ms_score_rows(ms_fwd_ctx *c, ms_fwd *f, const uint8_t *lb, int ic, int64_t T, float *logits) {
    const ms_model *m = c->m;
    if (ic == 0)
        for (int64_t t = 0; t < c->score_n; t++) {
            ms_lse_init(&f->sl[t], c->score_k);
            f->sx[t] = NAN;
        }
    for (int64_t r0 = m->lm_row0[ic]; r0 < m->lm_row0[ic + 1]; r0 += MS_SCORE_ROWS) {
        const int64_t nr = m->lm_row0[ic + 1] - r0 < MS_SCORE_ROWS ? m->lm_row0[ic + 1] - r0 : MS_SCORE_ROWS;
        ms_lm_tile(c, f, lb, ic, r0, nr, T);
        memcpy(logits + r0, f->lt + (T - 1) * MS_SCORE_ROWS, (size_t)nr * sizeof(float));
        score_job j = { c, f, r0, nr };
        if (c->score_n > 0) ms_pool_for(c->pool, c->score_n, 1, score_part, &j);
    }
}

void ms_score_finish(ms_fwd_ctx *c, ms_fwd *f) {
    for (int64_t t = 0; t < c->score_n; t++) {
        c->score_lp[t] = ms_lse_logprob(&f->sl[t], f->sx[t]);
        if (c->score_k > 0)
            ms_lse_top(&f->sl[t], c->score_k, c->score_top_ids + t * c->score_k, c->score_top_lp + t * c->score_k);
    }
}
