/* model/forward.c - the Kimi K3 forward pass over a chunk of T tokens.
 *
 * Reads like spec section 4: attention residuals (4.2) around each layer, KDA
 * (4.3) or gated NoPE MLA (4.4) as the mixer, a dense MLP (layer 0) or the
 * Stable LatentMoE (4.5) as the FFN, and the final read + norm + lm_head.
 *
 * A chunk is processed layer by layer for all its tokens, so each layer's
 * weights are acquired once per chunk and each routed expert once per layer
 * per chunk, applied to every token that chose it. Every number a token gets
 * is computed by the same operations in the same order whatever T is and
 * however rows are split across threads (docs/DETERMINISM.md), so prefill in
 * chunks is bit-identical to decoding token by token.
 *
 * Rollback (speculative decoding, model.h): a forward run with ctx->rec keeps
 * what ms_state_rollback needs to keep only a prefix of the chunk; the KDA
 * state update is one function, kda_step, used by the forward and the replay.
 *
 * Precision: activations fp32; matrix products use the T16 tree of
 * kernels.h; norms, softmax and attention dot products accumulate in double in
 * index order; everything else is float arithmetic in the order written here
 * (the file is compiled without contraction).
 */
#include "model/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ms_fwd {
    int64_t max_T;
    int64_t nb_max;             /* bank capacity: snapshots per token */
    float *run, *h, *x, *a, *ffn, *bank;
    float *vec0, *vec1, *vec2;  /* converted 1-D weights [max width] */
    float *tmp;                 /* [max(H, ...)] */
    float *sc;                  /* residual-read scores [nb_max + 1] */
    /* KDA */
    float *kq, *kk, *kv, *kg, *kfa, *kf, *kb, *ky;
    /* MLA */
    float *cq, *q, *ckv, *mg, *mo;
    float *att;                 /* per head: q [pw doubles] + ol [kvr] + scores [max_ctx] */
    int64_t att_stride;
    /* FFN */
    float *fg, *fu;             /* [T, max(I, S, Im)] */
    float *rl;                  /* router logits [T, E] */
    int32_t *sel;               /* [T, k] */
    float *selw;                /* [T, k] */
    float *z, *zr;              /* [T, lat] */
    float *ey;                  /* expert outputs [T, k, lat] */
    float *zg, *eo;             /* gathered inputs / outputs [T, lat] */
    int32_t *etok, *eslot;      /* [T] */
    int32_t *ecount;            /* [E] */
    int *eregion;               /* [E] */
    const uint8_t **eptr;       /* [E] */
    float *prl;                 /* next-layer prediction: router logits [E] */
    int32_t *psel;              /* its top-k [k] */
    int *pregion;               /* their regions [k] */
    int *estate, *eorder;       /* [E] ms_store_expert_state of eregion[], the compute order */
    int32_t *tsel;              /* the last LAST_TOKENS tokens' selections of a chunk, per
                                   layer [n_layer][LAST_TOKENS][k] (keep_last_experts) */
    int32_t *tkeep;             /* per layer: how many of those keep_last_experts marks [n_layer] */
    int32_t *emark;             /* kept_tokens' marks, [num_experts] */
    int *tregion;               /* their regions, [n_layer * LAST_TOKENS * k] */
    float *y;                   /* final [T, H] */
    float *lt;                  /* scoring: logits of a vocabulary tile [T, SCORE_ROWS] */
    ms_lse *sl;                 /* scoring: per row the fold [T] */
    float *sx;                  /* scoring: per row the target's logit [T] */
};

/* Chunk tokens whose experts keep_last_experts marks as just used. */
enum { LAST_TOKENS = 8 };

/* Scoring: vocabulary rows per lm_head product (f->lt holds [T, SCORE_ROWS]:
 * 2 MB for a 1024-token chunk, where all the logits of K3's 163,840-entry
 * vocabulary would take 671 MB). */
enum { SCORE_ROWS = 512 };

/* ------------------------------------------------------------------------ */
/* threaded matrix products                                                  */

typedef struct mm_job {
    const ms_kern *k;
    float *Y;
    int64_t ldy;
    const void *W;
    const uint8_t *scales;      /* MXFP4 only */
    const float *X;
    int64_t ldx, T, cols;
    int kind;                   /* 0 bf16, 1 mxfp4 */
    int64_t n255;
} mm_job;

static void mm_part(void *ctx, int64_t r0, int64_t r1) {
    mm_job *j = ctx;
    if (j->kind == 0) {
        if (j->T == 1) j->k->matvec_bf16(j->Y, j->W, j->X, r0, r1, j->cols);
        else j->k->matmat_bf16(j->Y, j->ldy, j->W, j->X, j->ldx, j->T, r0, r1, j->cols);
    } else {
        int64_t n = j->T == 1
            ? j->k->matvec_mxfp4(j->Y, j->W, j->scales, j->X, r0, r1, j->cols)
            : j->k->matmat_mxfp4(j->Y, j->ldy, j->W, j->scales, j->X, j->ldx, j->T, r0, r1, j->cols);
        if (n) __atomic_fetch_add(&j->n255, n, __ATOMIC_RELAXED);
    }
}

/* Tokens per pass of the pool over a matrix's rows. A chunk's matrix products
 * run in tiles of this many tokens, so each tile's inputs stay in the core's
 * L2 while every row block meets them (rows outer, tokens inner: the kernels
 * read a tile's X once per row block). Longer chunks would re-read their X
 * from memory per row block; a resident matrix is re-read once per tile
 * instead. Every output is its own dot product: tiles change no bit. */
#ifndef MS_MM_TILE
#define MS_MM_TILE 32
#endif

/* Y[t][r] = W[r,:] . X[t,:] for a BF16 matrix W [rows, cols]. */
static void mm_bf16(ms_fwd_ctx *c, float *Y, int64_t ldy, const uint8_t *base, const ms_wt *w,
                    const float *X, int64_t ldx, int64_t T) {
    MS_ASSERT(w->dtype == MS_DT_BF16);
    for (int64_t t0 = 0; t0 < T; t0 += MS_MM_TILE) {
        const int64_t nt = T - t0 < MS_MM_TILE ? T - t0 : MS_MM_TILE;
        mm_job j = { c->m->kern, Y + t0 * ldy, ldy, base + w->off, NULL, X + t0 * ldx, ldx, nt, w->cols, 0, 0 };
        ms_pool_for(c->pool, w->rows, 16, mm_part, &j);
    }
}

static void mm_mxfp4(ms_fwd_ctx *c, float *Y, int64_t ldy, const uint8_t *packed,
                     const uint8_t *scales, int64_t rows, int64_t cols, const float *X,
                     int64_t ldx, int64_t T) {
    for (int64_t t0 = 0; t0 < T; t0 += MS_MM_TILE) {
        const int64_t nt = T - t0 < MS_MM_TILE ? T - t0 : MS_MM_TILE;
        mm_job j = { c->m->kern, Y + t0 * ldy, ldy, packed, scales, X + t0 * ldx, ldx, nt, cols, 1, 0 };
        ms_pool_for(c->pool, rows, 16, mm_part, &j);
        if (t0 == 0) c->scale255 += j.n255;     /* once per scale byte, whatever T */
    }
}

/* Prefix the recorded error with what the model was reading, so a failed read
 * names the layer and expert. */
static ms_status with_context(ms_err *err, ms_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ms_status with_context(ms_err *err, ms_status st, const char *fmt, ...) {
    char ctx[160], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t lc = strlen(ctx), lo = strnlen(old, sizeof old - 1);
    if (lc + 2 + lo >= sizeof err->msg) lo = sizeof err->msg - lc - 3;
    memcpy(err->msg, ctx, lc);
    memcpy(err->msg + lc, ": ", 2);
    memcpy(err->msg + lc + 2, old, lo);
    err->msg[lc + 2 + lo] = '\0';
    return st;
}

/* A 1-D weight as floats (BF16 or F32 in the file). */
static const float *vec(const uint8_t *base, const ms_wt *w, float *out) {
    const uint8_t *p = base + w->off;
    if (w->dtype == MS_DT_F32) return (const float *)p;
    const uint16_t *b = (const uint16_t *)p;
    for (int64_t i = 0; i < w->cols; i++) out[i] = ms_bf16_to_f32(b[i]);
    return out;
}

/* ------------------------------------------------------------------------ */
/* attention residuals (spec 4.2)                                            */

/* out = sum_j softmax_j(s)_j * V_j, s_j = RMSNorm(V_j; wn) . wp. Mixes the RAW
 * candidates (trap: not the normalised ones; test trap_attnres_mix_normed). */
static void res_read(float *out, const float *const *cand, int n, const float *wn,
                     const float *wp, int64_t H, float eps, float *tmp, float *s) {
    for (int j = 0; j < n; j++) {
        ms_rmsnorm(tmp, cand[j], wn, H, eps);
        double acc = 0.0;
        for (int64_t i = 0; i < H; i++) acc += (double)tmp[i] * (double)wp[i];
        s[j] = (float)acc;
    }
    ms_softmax_inplace(s, n);
    for (int64_t i = 0; i < H; i++) out[i] = s[0] * cand[0][i];
    for (int j = 1; j < n; j++)
        for (int64_t i = 0; i < H; i++) out[i] = out[i] + s[j] * cand[j][i];
}

/* Candidates of token t: its bank snapshots, then run. */
static void res_read_token(ms_fwd *f, int64_t t, int nb, int64_t H, const float *wn,
                           const float *wp, float eps, float *out) {
    const float *cand[MS_MAX_LAYERS + 1];
    for (int j = 0; j < nb; j++) cand[j] = f->bank + (t * f->nb_max + j) * H;
    cand[nb] = f->run + t * H;
    res_read(out, cand, nb + 1, wn, wp, H, eps, f->tmp, f->sc);
}

/* ------------------------------------------------------------------------ */
/* KDA (spec 4.3)                                                            */

/* One token through one head's recurrence, the ONE definition of the KDA
 * state update (ms_forward and ms_state_rollback both call it, so a replayed
 * state has the forward's bits): causal depthwise conv of q, k, v (oldest tap
 * first) + SiLU, in place on x[s] [dk], shifting the head's conv history;
 * L2 norm of q and k; decay gate alpha from fr [dk]; beta from the logit b;
 * then decay + delta-rule write into the head's S [dk, dv] and, when o is given,
 * the head's output o [dv] = S^T q * qscale (all in kern->kda_update).
 * wconv[s] [P, K] conv taps, A = exp(A_log[h]), dtb [dk] the head's dt_bias. */
static void kda_step(const ms_config *c, const ms_kern *kern, int64_t h, const float *const wconv[3],
                     float A, const float *dtb, float *const x[3], float *conv, const float *fr,
                     float b, float *S, float qscale, float *o) {
    const int64_t dk = c->kda_head_dim, dv = dk, P = c->kda_num_heads * dk;
    const int64_t K = c->short_conv_kernel_size;
    const float lb = (float)c->gate_lower_bound;
    float alpha[1024];
    for (int s = 0; s < 3; s++) {
        float *xs = x[s];
        float *hist = conv + (int64_t)s * P * (K - 1);
        for (int64_t i = 0; i < dk; i++) {
            int64_t ch = h * dk + i;
            const float *w = wconv[s] + ch * K;
            float *hc = hist + ch * (K - 1);
            float acc = 0.0f;
            for (int64_t tap = 0; tap < K - 1; tap++) acc = acc + w[tap] * hc[tap];
            acc = acc + w[K - 1] * xs[i];
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

/* A head's dt_bias as floats (F32 in place, BF16 converted exactly into buf). */
static const float *kda_dtb(const uint8_t *base, const ms_layer *L, int64_t h, int64_t dk, float *buf) {
    if (L->dt_bias.dtype == MS_DT_F32) return (const float *)(base + L->dt_bias.off) + h * dk;
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
    const float *wconv[3] = {
        (const float *)(j->base + j->L->q_conv.off), (const float *)(j->base + j->L->k_conv.off),
        (const float *)(j->base + j->L->v_conv.off) };
    const float *a_log = (const float *)(j->base + j->L->a_log.off);
    float o[1024], onorm_w[1024];
    MS_ASSERT(dk <= 1024);
    const float *onw = vec(j->base, &j->L->o_norm, onorm_w);
    float dtb_buf[1024];
    for (int64_t h = h0; h < h1; h++) {
        float *S = j->S + h * dk * dv;
        /* A_log is indexed PER HEAD (trap: test trap_alog_per_channel) */
        const float A = ms_expf(a_log[h]);
        const float *dtb = kda_dtb(j->base, j->L, h, dk, dtb_buf);
        for (int64_t t = j->t0; t < j->t0 + j->T; t++) {
            float *q = f->kq + t * P + h * dk, *k = f->kk + t * P + h * dk, *v = f->kv + t * P + h * dv;
            float *const x[3] = { q, k, v };
            /* o = S^T q/sqrt(dk) after the update */
            kda_step(c, j->k, h, wconv, A, dtb, x, j->conv, f->kf + t * P + h * dk, f->kb[t * nh + h], S,
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

/* ---- the rollback record (model.h) ---- */

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

/* Before the heads run: the state at the chunk start, the weights the update
 * reads, and each token's recurrence inputs (the projections, pre-conv). */
static void kda_record(const ms_config *c, ms_fwd *f, const ms_layer *L, const uint8_t *base,
                       const float *S, const float *conv, float *r, int64_t T) {
    const int64_t P = rec_P(c), nh = c->kda_num_heads, K = c->short_conv_kernel_size;
    memcpy(r, S, (size_t)rec_S(c) * sizeof(float));
    memcpy(r + rec_o_conv0(c), conv, (size_t)rec_conv(c) * sizeof(float));
    const ms_wt *taps[3] = { &L->q_conv, &L->k_conv, &L->v_conv };
    for (int s = 0; s < 3; s++)
        memcpy(r + rec_o_taps(c) + s * P * K, base + taps[s]->off, (size_t)(P * K) * sizeof(float));
    memcpy(r + rec_o_alog(c), base + L->a_log.off, (size_t)nh * sizeof(float));
    for (int64_t h = 0; h < nh; h++) {
        float *dst = r + rec_o_dtb(c) + h * c->kda_head_dim;
        const float *src = kda_dtb(base, L, h, c->kda_head_dim, dst);
        if (src != dst) memcpy(dst, src, (size_t)c->kda_head_dim * sizeof(float));
    }
    for (int64_t t = 0; t < T; t++) {
        float *rt = r + rec_o_tok(c) + t * rec_tok(c);
        memcpy(rt, f->kq + t * P, (size_t)P * sizeof(float));
        memcpy(rt + P, f->kk + t * P, (size_t)P * sizeof(float));
        memcpy(rt + 2 * P, f->kv + t * P, (size_t)P * sizeof(float));
        memcpy(rt + 3 * P, f->kf + t * P, (size_t)P * sizeof(float));
        memcpy(rt + 4 * P, f->kb + t * nh, (size_t)nh * sizeof(float));
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
    const float *wconv[3] = { r + rec_o_taps(c), r + rec_o_taps(c) + P * K, r + rec_o_taps(c) + 2 * P * K };
    float xq[1024], xk[1024], xv[1024];
    float *const x[3] = { xq, xk, xv };
    for (int64_t h = h0; h < h1; h++) {
        float *S = j->S + h * dk * dk;
        const float A = ms_expf(r[rec_o_alog(c) + h]);
        const float *dtb = r + rec_o_dtb(c) + h * dk;
        for (int64_t t = 0; t < j->n; t++) {
            const float *rt = r + rec_o_tok(c) + t * rec_tok(c);
            for (int s = 0; s < 3; s++) memcpy(x[s], rt + s * P + h * dk, (size_t)dk * sizeof(float));
            kda_step(c, j->k, h, wconv, A, dtb, x, j->conv, rt + 3 * P + h * dk, rt[4 * P + h], S, 0.0f, NULL);
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
    st->n_past = rb->n_past0 + n_keep;     /* MLA positions past it are overwritten later */
    rb->n_rec = 0;
}

static void kda_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L,
                        const uint8_t *base, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, P = cf->kda_num_heads * cf->kda_head_dim;
    mm_bf16(c, f->kq, P, base, &L->q_proj, f->x, H, T);
    mm_bf16(c, f->kk, P, base, &L->k_proj, f->x, H, T);
    mm_bf16(c, f->kv, P, base, &L->v_proj, f->x, H, T);
    mm_bf16(c, f->kg, P, base, &L->g_proj, f->x, H, T);
    mm_bf16(c, f->kfa, L->f_a.rows, base, &L->f_a, f->x, H, T);
    mm_bf16(c, f->kf, P, base, &L->f_b, f->kfa, L->f_a.rows, T);
    mm_bf16(c, f->kb, cf->kda_num_heads, base, &L->b_proj, f->x, H, T);
    /* the recurrence, one segment (sequence) at a time on its own state */
    for (int is = 0, t0 = 0; is < nseg; t0 += (int)seg[is].T, is++) {
        float *S = seg[is].st->kda_S[L->kda_index], *conv = seg[is].st->kda_conv[L->kda_index];
        if (c->rec) kda_record(cf, f, L, base, S, conv, c->rec->kda[L->kda_index], T);   /* nseg == 1 */
        kda_job j = { cf, c->m->kern, f, base, L, S, conv, t0, seg[is].T };
        ms_pool_for(c->pool, cf->kda_num_heads, 1, kda_heads, &j);
    }
    mm_bf16(c, f->a, H, base, &L->o_proj, f->ky, P, T);
}

/* ------------------------------------------------------------------------ */
/* gated NoPE MLA (spec 4.4), absorbed form over the latent cache            */

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
         * its terms in order (kernels.h, ms_mla_scores) */
        j->k->mla_scores(sc0, lda, qd0, lda / 2, nq, j->cache, pw, n_pos, scale);
        for (int64_t h = 0; h < nq; h++) ms_softmax_inplace(sc0 + h * lda, n_pos);
        /* ol[i] = sum over positions ascending of p[s] * c_kv[s][i], in double */
        j->k->mla_mix(ol0, lda, sc0, lda, nq, j->cache, pw, kvr, n_pos);
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

static void mla_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L,
                        const uint8_t *base, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, nh = cf->num_attention_heads;
    const int64_t qr = cf->q_lora_rank, kvr = cf->kv_lora_rank, dr = cf->qk_rope_head_dim;
    const int64_t qw = cf->qk_nope_head_dim + dr, pw = kvr + dr;
    const float eps = (float)cf->rms_norm_eps;
    mm_bf16(c, f->cq, qr, base, &L->q_a, f->x, H, T);
    const float *qan = vec(base, &L->q_a_norm, f->vec0);
    for (int64_t t = 0; t < T; t++) ms_rmsnorm(f->cq + t * qr, f->cq + t * qr, qan, qr, eps);
    mm_bf16(c, f->q, nh * qw, base, &L->q_b, f->cq, qr, T);
    mm_bf16(c, f->ckv, pw, base, &L->kv_a, f->x, H, T);
    const float *kvn = vec(base, &L->kv_a_norm, f->vec1);
    mm_bf16(c, f->mg, nh * cf->v_head_dim, base, &L->g_proj, f->x, H, T);
    /* attention, one segment (sequence) at a time over its own cache */
    for (int is = 0, t0 = 0; is < nseg; t0 += (int)seg[is].T, is++) {
        const ms_state *st = seg[is].st;
        float *cache = st->mla_cache[L->mla_index];
        for (int64_t t = t0; t < t0 + seg[is].T; t++) {
            float *ce = cache + (st->n_past + t - t0) * pw;
            ms_rmsnorm(ce, f->ckv + t * pw, kvn, kvr, eps);         /* c_kv normed */
            memcpy(ce + kvr, f->ckv + t * pw + kvr, (size_t)dr * sizeof(float)); /* k_rope, not normed */
        }
        mla_job j = { cf, c->m->kern, f, base, L, cache, t0, seg[is].T, st->n_past };
        ms_pool_for(c->pool, nh, 8, mla_heads, &j);     /* 8 heads share each read of the cache */
    }
    mm_bf16(c, f->a, H, base, &L->o_proj, f->mo, nh * cf->v_head_dim, T);
}

/* ------------------------------------------------------------------------ */
/* FFN: dense MLP and Stable LatentMoE (spec 4.5)                            */

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

static void dense_mlp(ms_fwd_ctx *c, ms_fwd *f, const ms_wt *wg, const ms_wt *wu, const ms_wt *wd,
                      const uint8_t *base, const float *X, float *Y, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, I = wg->rows;
    mm_bf16(c, f->fg, I, base, wg, X, H, T);
    mm_bf16(c, f->fu, I, base, wu, X, H, T);
    situ_rows(c, f->fg, f->fg, f->fu, T * I);
    mm_bf16(c, Y, H, base, wd, f->fg, I, T);
}

/* top-k of choice[] by value, ties to the lower index, in descending order */
static void topk(const float *choice, int64_t E, int64_t k, int32_t *idx) {
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

/* Guesses per layer: the predictor's k/2 most confident choices. Its accuracy
 * falls with rank (bench checkpoint: 96% for the first, 36% for the 16th); a
 * wrong guess that is read costs the disk as much as a right one saves, and
 * the disk is the bottleneck where guesses matter. Measured on the bench
 * checkpoint (docs/PERFORMANCE.md, run 6): k/2 reads 3.5% fewer expert bytes
 * than k at 8.33G and 13% fewer at 11.18G, and is as fast or faster. */
static int64_t guesses_per_layer(const ms_config *cf) {
    return cf->num_experts_per_token > 1 ? cf->num_experts_per_token / 2 : 1;
}

/* Guess layer N's top n_max experts (of its k): N's router (its FFN weights
 * at nb, in memory) applied to f->x, most confident first. Own scratch
 * (prl, tmp, psel, pregion, vec0). */
static void guess_with_router(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *N, const uint8_t *nb,
                              int64_t n_max) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, E = cf->num_experts, k = cf->num_experts_per_token;
    mm_bf16(c, f->prl, E, nb, &N->router, f->x, H, 1);
    const float *bias = vec(nb, &N->router_bias, f->vec0);
    float *choice = f->tmp;
    c->m->kern->sigmoidf_n(choice, f->prl, E);
    for (int64_t e = 0; e < E; e++) choice[e] = choice[e] + bias[e];
    topk(choice, E, k, f->psel);
    const int64_t n = n_max < k ? n_max : k;
    for (int64_t j = 0; j < n; j++) f->pregion[j] = N->expert_region0 + f->psel[j];
    ms_store_predict(c->store, f->pregion, (int)n);
}

/* Layer il when it is an MoE layer whose experts stream, else NULL. */
static const ms_layer *streamed_moe(const ms_fwd_ctx *c, int il) {
    const ms_model *m = c->m;
    if (il < m->layer0 || il >= m->layer1) return NULL;   /* not this process's part */
    const ms_layer *N = &m->layers[il];
    if (N->is_dense || ms_store_region_resident(c->store, N->expert_region0)) return NULL;
    return N;
}

/* How many of a chunk's last tokens keep this layer's experts in the cache
 * (keep_last_experts): the most whose distinct experts here fit in this
 * layer's share of the slots, the cache less `working` (equal shares over
 * the layers that stream experts), at most LAST_TOKENS; 0 for one token, or
 * when nothing streams. Marked while the chunk runs, with working = this
 * layer's n_used experts: the kept experts of every layer and one layer's
 * working set then fit together, and none has to evict another (test_budget
 * keep_last). Marked after the chunk (only those still cached), with
 * working = 0: more tokens, and no eviction either way. Counting distinct
 * experts rather than tokens x k keeps more tokens where neighbours share
 * experts. */
static int64_t kept_tokens(const ms_fwd_ctx *c, ms_fwd *f, int64_t T, int working) {
    const ms_model *m = c->m;
    const int64_t E = m->cfg.num_experts, k = m->cfg.num_experts_per_token;
    const int cap = ms_store_expert_capacity(c->store);
    if (T <= 1 || k <= 0 || cap <= 0) return 0;
    int n_moe = 0;
    for (int il = 0; il < m->n_layer; il++) n_moe += streamed_moe(c, il) != NULL;
    if (n_moe == 0) return 0;
    const int64_t share = (cap - working) / n_moe;
    if (share <= 0) return 0;
    memset(f->emark, 0, (size_t)E * sizeof *f->emark);
    int64_t kept = 0, distinct = 0;
    while (kept < T && kept < LAST_TOKENS) {
        const int32_t *sel = f->sel + (T - 1 - kept) * k;
        for (int64_t j = 0; j < k; j++)
            if (!f->emark[sel[j]]) { f->emark[sel[j]] = 1; distinct++; }
        if (distinct > share) break;
        kept++;
    }
    return kept;
}

/* The layer after layer il when it is worth guessing (streamed_moe), else NULL. */
static const ms_layer *next_to_guess(const ms_fwd_ctx *c, int il) { return streamed_moe(c, il + 1); }

/* Guesses for the NEXT MoE layer during decode: apply its router to this
 * layer's FFN input f->x (the "next-layer router" predictor: ~59% of K3's
 * choices, 63% on the bench checkpoint) and read up to n_max of the predicted
 * experts as guesses (ms_store_predict), most confident first. Called as soon
 * as this layer's own reads are issued, so the disk goes on from them to the
 * predicted ones while this layer's experts and the next layer's attention
 * compute, instead of idling until the next router has run; that layer's
 * ms_store_confirm then promotes the right guesses and cancels the wrong ones
 * still queued. Only when that router is in memory (no read is issued or
 * waited for to get it). A guess never changes a result: it only moves reads
 * earlier (own scratch: this layer's selection stays intact). */
static void guess_next_layer(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, int64_t n_max) {
    const ms_layer *N = next_to_guess(c, L->index);
    if (!N || n_max <= 0) return;
    /* its router, if in memory now (pinned, or streamed and already read
     * ahead); the pointer is used before the next store call */
    const uint8_t *nb = ms_store_peek(c->store, N->ffn_region);
    if (!nb) return;
    guess_with_router(c, f, N, nb, n_max);
}

/* Second guesses for layer N = L + 1 once layer L is done (decode): N's
 * router input is approximated by what it will be minus N's attention -
 * read(bank + [run]) with N's weights, N's post-attention norm - which is much
 * closer than L's FFN input, with less lead time (only N's attention). Its
 * top n_max are guessed (those already cached or in flight cost nothing), and
 * they replace the first guesses: ms_store_predict cancels the first guesses
 * they leave out that are still queued (at 1.7 GB/s, 8.33G: -3.6% bytes and
 * -4% s/token; docs/PERFORMANCE.md, "Second guesses replace the first").
 * On the bench checkpoint it lifts the share of expert uses served by a guess
 * from 36% to 92% at 8.33G, and cuts the waits at 11.18G by a third
 * (docs/PERFORMANCE.md, "Second guesses").
 * Only when N's attention and FFN weights are in memory; own scratch (f->h,
 * f->x are rewritten at N's start anyway). Changes no result. */
static void refine_next_layer(ms_fwd_ctx *c, ms_fwd *f, int il, int nb, int64_t n_max) {
    const ms_config *cf = &c->m->cfg;
    const ms_layer *N = next_to_guess(c, il);
    if (!N || n_max <= 0 || nb <= 0) return;
    const int64_t H = cf->hidden_size;
    const float eps = (float)cf->rms_norm_eps;
    const uint8_t *ab = ms_store_peek(c->store, N->attn_region);
    if (!ab) return;
    res_read_token(f, 0, nb, H, vec(ab, &N->mlp_res_norm, f->vec0), vec(ab, &N->mlp_res_proj, f->vec1),
                   eps, f->h);
    ms_rmsnorm(f->x, f->h, vec(ab, &N->post_attn_norm, f->vec2), H, eps);
    const uint8_t *nb2 = ms_store_peek(c->store, N->ffn_region);
    if (nb2) guess_with_router(c, f, N, nb2, n_max);
}

/* keep: the T tokens are one sequence's, in order (a prompt chunk): its
 * last tokens' experts are kept in the cache for the decode that follows. */
static ms_status moe_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, const uint8_t *base,
                             int64_t T, int keep, ms_err *err) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, E = cf->num_experts, k = cf->num_experts_per_token;
    const int64_t lat = cf->routed_expert_hidden_size, Im = cf->moe_intermediate_size;
    const float eps = (float)cf->rms_norm_eps;
    /* router: sigmoid scores in fp32 from T16 logits; the bias steers selection
     * only (trap: test trap_router_bias_weights) */
    mm_bf16(c, f->rl, E, base, &L->router, f->x, H, T);
    const float *bias = vec(base, &L->router_bias, f->vec0);
    for (int64_t t = 0; t < T; t++) {
        float *s = f->rl + t * E, *choice = f->tmp;
        c->m->kern->sigmoidf_n(s, s, E);
        for (int64_t e = 0; e < E; e++) choice[e] = s[e] + bias[e];
        int32_t *idx = f->sel + t * k;
        float *w = f->selw + t * k;
        topk(choice, E, k, idx);
        float sum = 0.0f;
        for (int64_t j = 0; j < k; j++) { w[j] = s[idx[j]]; sum = sum + w[j]; }
        const float denom = sum + 1e-20f, rsf = (float)cf->routed_scaling_factor;
        for (int64_t j = 0; j < k; j++) {
            if (cf->moe_renormalize) w[j] = w[j] / denom;
            w[j] = w[j] * rsf;
        }
    }
    int64_t m_keep = 0;                 /* for keep_last_experts */
    if (keep) {
        const int64_t m_last = T < LAST_TOKENS ? T : LAST_TOKENS;
        memcpy(f->tsel + (int64_t)L->index * LAST_TOKENS * k, f->sel + (T - m_last) * k,
               (size_t)(m_last * k) * sizeof *f->sel);
    }
    /* the experts this chunk needs, in expert order; their reads start now and
     * overlap the latent projection and the shared experts below */
    int n_used = 0;
    for (int64_t e = 0; e < E; e++) f->ecount[e] = 0;
    for (int64_t i = 0; i < T * k; i++) f->ecount[f->sel[i]]++;
    for (int64_t e = 0; e < E; e++)
        if (f->ecount[e]) f->eregion[n_used++] = L->expert_region0 + (int)e;
    if (keep) {
        m_keep = kept_tokens(c, f, T, n_used);
        f->tkeep[L->index] = (int32_t)kept_tokens(c, f, T, 0);
    }
    /* the wanted set of this step: guesses among them become demand reads,
     * the other guesses still queued are cancelled */
    ms_store_confirm(c->store, f->eregion, n_used);
    /* where each one is before any new read: in memory, in flight (a
     * prediction or a cache slot still loading), or not yet asked for */
    for (int iu = 0; iu < n_used; iu++) f->estate[iu] = ms_store_expert_state(c->store, f->eregion[iu]);
    const int cap_hint = ms_store_expert_capacity(c->store);
    ms_store_hint(c->store, f->eregion, n_used < cap_hint ? n_used : cap_hint);
    /* the next layer's likely experts queue behind this layer's reads (as
     * guesses: behind every demand read, never evicting this layer's) */
    if (T == 1 && c->predict) guess_next_layer(c, f, L, guesses_per_layer(cf));
    /* latent input */
    mm_bf16(c, f->z, lat, base, &L->lat_down, f->x, H, T);
    /* shared experts on the ORIGINAL x, added unweighted (trap: test trap_shared_weighted);
     * f->a (the mixer's output) is free again: run already holds it */
    dense_mlp(c, f, &L->sh_gate, &L->sh_up, &L->sh_down, base, f->x, f->a, T);
    /* compute the experts already in memory first, then those whose reads
     * were in flight before this layer's, then the ones just asked for (each
     * group keeps its order): computation covers the reads still to come */
    if (n_used > 1) {
        int n_ord = 0;
        for (int want = MS_EXPERT_READY; want >= MS_EXPERT_ABSENT; want--)
            for (int iu = 0; iu < n_used; iu++)
                if (f->estate[iu] == want) f->eorder[n_ord++] = f->eregion[iu];
        MS_ASSERT(n_ord == n_used);
        memcpy(f->eregion, f->eorder, (size_t)n_used * sizeof *f->eregion);
    }
    /* one expert at a time, in that order: expert iu is
     * computed while the reads of the next ones are in flight, and after each
     * expert the hint is renewed over the next cap - 1 (the slot just released
     * takes the next read), so the disk never waits for the computation. Each
     * expert is read once per chunk; its outputs land in f->ey by (token, slot)
     * and are summed below in selection order, so the order experts arrive in
     * changes no bit. */
    const int win = cap_hint > 1 ? cap_hint - 1 : 1;
    for (int iu = 0; iu < n_used; iu++) {
        if (iu > 0) ms_store_hint(c->store, f->eregion + iu, n_used - iu < win ? n_used - iu : win);
        ms_status st = ms_store_acquire_batch(c->store, f->eregion + iu, 1, f->eptr + iu, err);
        if (st != MS_OK) return with_context(err, st, "layer %d, expert %d", L->index,
                                             f->eregion[iu] - L->expert_region0);
        const int64_t e = f->eregion[iu] - L->expert_region0;
        const uint8_t *eb = f->eptr[iu];
        const int64_t *off = L->expert_off[e];
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < k; j++)
                if (f->sel[t * k + j] == e) {
                    f->etok[n] = (int32_t)t;
                    f->eslot[n] = (int32_t)j;
                    memcpy(f->zg + n * lat, f->z + t * lat, (size_t)lat * sizeof(float));
                    n++;
                }
        /* an expert of the chunk's last tokens is marked used as soon as it
         * is in memory, before the later layers' experts of this chunk come
         * in: S3-FIFO then moves it to its main queue instead of evicting it
         * (keep_last_experts, after the chunk, only reaches the survivors) */
        if (n > 0 && f->etok[n - 1] >= T - m_keep) ms_store_touch(c->store, f->eregion + iu, 1);
        mm_mxfp4(c, f->fg, Im, eb + off[MS_EXP_W1P], eb + off[MS_EXP_W1S], Im, lat, f->zg, lat, n);
        mm_mxfp4(c, f->fu, Im, eb + off[MS_EXP_W3P], eb + off[MS_EXP_W3S], Im, lat, f->zg, lat, n);
        situ_rows(c, f->fg, f->fg, f->fu, n * Im);
        mm_mxfp4(c, f->eo, lat, eb + off[MS_EXP_W2P], eb + off[MS_EXP_W2S], lat, Im, f->fg, Im, n);
        for (int64_t r = 0; r < n; r++)
            memcpy(f->ey + ((int64_t)f->etok[r] * k + f->eslot[r]) * lat, f->eo + r * lat,
                   (size_t)lat * sizeof(float));
        ms_store_release(c->store, f->eregion[iu]);
    }
    /* weighted sum in selection order, then ONE RMSNorm on the aggregate
     * (trap: test trap_latent_norm_per_expert) */
    const float *ln = vec(base, &L->lat_norm, f->vec1);
    for (int64_t t = 0; t < T; t++) {
        float *r = f->zr + t * lat;
        const float *w = f->selw + t * k;
        const float *y0 = f->ey + t * k * lat;
        for (int64_t i = 0; i < lat; i++) r[i] = w[0] * y0[i];
        for (int64_t j = 1; j < k; j++) {
            const float *yj = f->ey + (t * k + j) * lat;
            for (int64_t i = 0; i < lat; i++) r[i] = r[i] + w[j] * yj[i];
        }
        ms_rmsnorm(r, r, ln, lat, eps);
    }
    mm_bf16(c, f->ffn, H, base, &L->lat_up, f->zr, lat, T);
    for (int64_t i = 0; i < T * H; i++) f->ffn[i] = f->ffn[i] + f->a[i];
    return MS_OK;
}

/* ------------------------------------------------------------------------ */
/* the whole model                                                           */

/* Scratch layout: one function both counts the bytes (for the memory plan)
 * and allocates them, so the two can never disagree. */
typedef struct fwd_alloc {
    int count_only;
    int64_t bytes;
    int ok;
} fwd_alloc;

static void *take(fwd_alloc *a, int64_t n, size_t elem) {
    if (n < 1) n = 1;
    a->bytes += n * (int64_t)elem;
    if (a->count_only) return NULL;
    void *p = malloc((size_t)n * elem);
    if (!p) a->ok = 0;
    return p;
}
#define TF(n) take(a, (n), sizeof(float))
#define TI(n) take(a, (n), sizeof(int32_t))

static void fwd_layout(ms_fwd *f, const ms_model *m, int64_t T, fwd_alloc *a) {
    const ms_config *c = &m->cfg;
    const int64_t H = c->hidden_size;
    const int64_t P = c->kda_num_heads * c->kda_head_dim, nh = c->num_attention_heads;
    const int64_t E = c->num_experts, k = c->num_experts_per_token, lat = c->routed_expert_hidden_size;
    const int64_t S = c->num_shared_experts * c->moe_intermediate_size;
    int64_t wide = c->intermediate_size;
    if (S > wide) wide = S;
    if (c->moe_intermediate_size > wide) wide = c->moe_intermediate_size;
    int64_t vmax = H;
    if (P > vmax) vmax = P;
    if (E > vmax) vmax = E;
    if (c->q_lora_rank > vmax) vmax = c->q_lora_rank;
    if (c->kv_lora_rank > vmax) vmax = c->kv_lora_rank;
    if (lat > vmax) vmax = lat;
    int64_t fa_rank = c->kda_head_dim;
    for (int il = 0; il < m->n_layer; il++)
        if (!m->layers[il].is_mla && m->layers[il].f_a.rows > fa_rank) fa_rank = m->layers[il].f_a.rows;
    f->max_T = T;
    f->nb_max = ms_bank_snapshots(c);
    f->run = TF(T * H); f->h = TF(T * H); f->x = TF(T * H);
    f->a = TF(T * H); f->ffn = TF(T * H); f->y = TF(T * H);
    f->bank = TF(T * f->nb_max * H);
    f->vec0 = TF(vmax); f->vec1 = TF(vmax); f->vec2 = TF(vmax); f->tmp = TF(vmax);
    f->sc = TF(f->nb_max + 1);
    if (c->n_kda_layers > 0) {
        f->kq = TF(T * P); f->kk = TF(T * P); f->kv = TF(T * P);
        f->kg = TF(T * P); f->kf = TF(T * P); f->ky = TF(T * P);
        f->kfa = TF(T * fa_rank); f->kb = TF(T * c->kda_num_heads);
    }
    if (c->n_mla_layers > 0) {
        const int64_t qw = c->qk_nope_head_dim + c->qk_rope_head_dim;
        f->cq = TF(T * c->q_lora_rank);
        f->q = TF(T * nh * qw);
        f->ckv = TF(T * (c->kv_lora_rank + c->qk_rope_head_dim));
        f->mg = TF(T * nh * c->v_head_dim);
        f->mo = TF(T * nh * c->v_head_dim);
    }
    f->fg = TF(T * wide); f->fu = TF(T * wide);
    if (E > 0) {
        f->rl = TF(T * E); f->selw = TF(T * k);
        f->z = TF(T * lat); f->zr = TF(T * lat);
        f->ey = TF(T * k * lat); f->zg = TF(T * lat); f->eo = TF(T * lat);
        f->sel = TI(T * k); f->etok = TI(T * k); f->eslot = TI(T * k);
        f->ecount = TI(E); f->eregion = TI(E);
        f->eptr = take(a, E, sizeof(*f->eptr));
        f->prl = TF(E); f->psel = TI(k); f->pregion = TI(k);
        f->estate = TI(E); f->eorder = TI(E);
        f->tsel = TI(m->n_layer * LAST_TOKENS * k); f->tregion = TI(m->n_layer * LAST_TOKENS * k);
        f->tkeep = TI(m->n_layer); f->emark = TI(E);
    }
    f->lt = TF(T * SCORE_ROWS);
    f->sl = take(a, T, sizeof(ms_lse)); f->sx = TF(T);
}
#undef TF
#undef TI

/* Attention scratch per head: q [pw doubles = 2 pw floats], ol [kvr], scores [n_ctx]. */
static int64_t att_stride_for(const ms_config *c, int64_t n_ctx) {
    const int64_t pw = c->kv_lora_rank + c->qk_rope_head_dim;
    const int64_t n = 2 * pw + c->kv_lora_rank + n_ctx;
    return n + (n & 1);         /* even, so every head's q doubles stay 8-byte aligned */
}

static int64_t att_floats(const ms_config *c, int64_t n_ctx) {
    return c->n_mla_layers ? c->num_attention_heads * att_stride_for(c, n_ctx) : 0;
}

int64_t ms_fwd_bytes(const ms_model *m, int64_t max_T, int64_t max_ctx) {
    ms_fwd f;
    memset(&f, 0, sizeof f);
    fwd_alloc a = { 1, (int64_t)sizeof f, 1 };
    fwd_layout(&f, m, max_T, &a);
    return a.bytes + att_floats(&m->cfg, max_ctx) * (int64_t)sizeof(float);
}

ms_status ms_fwd_init(ms_fwd **out, const ms_model *m, int64_t max_T, ms_err *err) {
    ms_fwd *f = calloc(1, sizeof *f);
    if (!f) return ms_err_set(err, MS_E_NOMEM, "forward scratch: out of memory");
    fwd_alloc a = { 0, 0, 1 };
    fwd_layout(f, m, max_T, &a);
    if (!a.ok) {
        ms_fwd_free(f);
        return ms_err_set(err, MS_E_NOMEM, "forward scratch: out of memory (chunk %lld)", (long long)max_T);
    }
    *out = f;
    return MS_OK;
}

/* Attention scratch depends on the context length: [nh][att_stride_for(n_ctx)]. */
static ms_status ensure_att(ms_fwd *f, const ms_config *c, int64_t n_ctx, ms_err *err) {
    if (c->n_mla_layers == 0) return MS_OK;
    int64_t need = att_stride_for(c, n_ctx);
    if (f->att && f->att_stride >= need) return MS_OK;
    int64_t stride = need < 1024 ? 1024 : need;      /* both even */
    float *p = realloc(f->att, (size_t)(stride * c->num_attention_heads) * sizeof(float));
    if (!p) return ms_err_set(err, MS_E_NOMEM, "attention scratch: out of memory");
    f->att = p;
    f->att_stride = stride;
    return MS_OK;
}

void ms_fwd_free(ms_fwd *f) {
    if (!f) return;
    float *fl[] = { f->run, f->h, f->x, f->a, f->ffn, f->y, f->bank, f->vec0, f->vec1, f->vec2,
                    f->tmp, f->sc, f->kq, f->kk, f->kv, f->kg, f->kf, f->ky, f->kfa, f->kb,
                    f->cq, f->q, f->ckv, f->mg, f->mo, f->att, f->fg, f->fu, f->rl, f->selw,
                    f->z, f->zr, f->ey, f->zg, f->eo, f->prl };
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) free(fl[i]);
    free(f->sel); free(f->etok); free(f->eslot); free(f->ecount); free(f->eregion);
    free(f->psel); free(f->pregion); free(f->estate); free(f->eorder);
    free(f->tsel); free(f->tregion); free(f->tkeep); free(f->emark);
    free(f->lt); free(f->sl); free(f->sx);
    free((void *)f->eptr);
    free(f);
}

/* After a chunk of T > 1 tokens (a prompt, a verify pass): mark the experts
 * of its last tokens as just used in the expert cache, oldest token first,
 * in each layer as many tokens as kept_tokens chose there. A chunk uses
 * nearly every expert of every layer in layer order, which leaves the cache
 * holding the LAST layers' experts: the next decode token then misses most
 * of its early layers, and each miss evicts an expert of a later layer it is
 * about to use. The next token shares experts with the last ones far more
 * than with the rest of the chunk (bench checkpoint: 37% of a token's experts
 * were used by the token before, 59% by one of the two before, against 25% at
 * random), so those are the ones to keep. moe_forward already marked them
 * while the chunk ran, which is what keeps them under S3-FIFO; this pass
 * orders them for LRU, and reaches a few more tokens (kept_tokens). Changes
 * no bit: only which experts stay cached. */
static void keep_last_experts(ms_fwd_ctx *c, ms_fwd *f, int64_t T) {
    const ms_model *m = c->m;
    const int64_t k = m->cfg.num_experts_per_token;
    const int64_t m_last = T < LAST_TOKENS ? T : LAST_TOKENS;     /* rows recorded per layer */
    int n = 0;
    for (int64_t back = m_last - 1; back >= 0; back--)          /* oldest token first */
        for (int il = 0; il < m->n_layer; il++) {
            const ms_layer *N = streamed_moe(c, il);
            if (!N || f->tkeep[il] <= back) continue;
            const int32_t *sel = f->tsel + ((int64_t)il * LAST_TOKENS + m_last - 1 - back) * k;
            for (int64_t j = 0; j < k; j++) f->tregion[n++] = N->expert_region0 + sel[j];
        }
    if (n > 0) ms_store_touch(c->store, f->tregion, n);
}

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
            zz = zz * exp(mm - v) + 1.0;
            mm = v;
        } else {
            zz += exp(v - mm);
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
    return ((double)x - s->m) - log(s->z);
}

void ms_lse_top(const ms_lse *s, int k, int32_t *ids, double *logprobs) {
    for (int i = 0; i < k; i++) {
        ids[i] = i < s->n_top ? s->top_id[i] : -1;
        logprobs[i] = i < s->n_top ? ms_lse_logprob(s, s->top_x[i]) : NAN;
    }
}

/* lm_head rows [r0, r0 + nr) of chunk ic (its region's bytes at lb) for the
 * first n rows of f->y, into f->lt [n][SCORE_ROWS]. */
static void lm_tile(ms_fwd_ctx *c, ms_fwd *f, const uint8_t *lb, int ic, int64_t r0, int64_t nr, int64_t n) {
    const ms_model *m = c->m;
    ms_wt part = m->lm_head;
    part.off = m->lm_off[ic] + (r0 - m->lm_row0[ic]) * m->cfg.hidden_size * 2;
    part.rows = nr;
    mm_bf16(c, f->lt, SCORE_ROWS, lb, &part, f->y, m->cfg.hidden_size, n);
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
        const float *x = f->lt + t * SCORE_ROWS;
        ms_lse_fold(&f->sl[t], x, j->nr, j->r0);
        const int64_t d = (int64_t)j->c->score_target[t] - j->r0;
        if (d >= 0 && d < j->nr) f->sx[t] = x[d];
    }
}

/* Scoring: lm_head chunk ic (its region's bytes at lb) in tiles of SCORE_ROWS
 * vocabulary rows; each tile's logits are folded into the rows' sums in
 * vocabulary order (the chunks come in order) and the last row's are kept in
 * `logits` [V]. The logits are the same products as the unscored path's. */
static void score_rows(ms_fwd_ctx *c, ms_fwd *f, const uint8_t *lb, int ic, int64_t T, float *logits) {
    const ms_model *m = c->m;
    if (ic == 0)
        for (int64_t t = 0; t < c->score_n; t++) {
            ms_lse_init(&f->sl[t], c->score_k);
            f->sx[t] = NAN;
        }
    for (int64_t r0 = m->lm_row0[ic]; r0 < m->lm_row0[ic + 1]; r0 += SCORE_ROWS) {
        const int64_t nr = m->lm_row0[ic + 1] - r0 < SCORE_ROWS ? m->lm_row0[ic + 1] - r0 : SCORE_ROWS;
        lm_tile(c, f, lb, ic, r0, nr, T);
        memcpy(logits + r0, f->lt + (T - 1) * SCORE_ROWS, (size_t)nr * sizeof(float));
        score_job j = { c, f, r0, nr };
        if (c->score_n > 0) ms_pool_for(c->pool, c->score_n, 1, score_part, &j);
    }
}

/* run[0, T) = the tokens' embedding rows, used as is (no scaling). */
static ms_status embed(ms_fwd_ctx *c, ms_fwd *f, const int32_t *ids, int64_t T, ms_err *err) {
    const ms_model *m = c->m;
    const int64_t H = m->cfg.hidden_size;
    for (int64_t t = 0; t < T; t++) {
        uint16_t *row = (uint16_t *)(f->h + t * H);     /* h is free until layer 0 */
        const ms_status s = ms_store_read_part(c->store, m->embed_region, m->embed.rel + (int64_t)ids[t] * H * 2, H * 2,
                                               row, err);
        if (s != MS_OK) return with_context(err, s, "layer input: embedding row of token %d", ids[t]);
        for (int64_t i = H - 1; i >= 0; i--) f->run[t * H + i] = ms_bf16_to_f32(row[i]);
    }
    return MS_OK;
}

/* This process's layers [layer0, layer1) over the T tokens of the segments,
 * from run / bank (*nb_io snapshots) in f; *nb_io is updated. */
static ms_status layers(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, int64_t T, int keep, int *nb_io,
                        ms_err *err) {
    const ms_model *m = c->m;
    const ms_config *cf = &m->cfg;
    const int64_t H = cf->hidden_size, B = cf->attn_res_block_size;
    const float eps = (float)cf->rms_norm_eps;
    ms_status s;
    int nb = *nb_io;
    for (int il = m->layer0; il < m->layer1; il++) {
        const ms_layer *L = &m->layers[il];
        const uint8_t *base = ms_store_acquire(c->store, L->attn_region, err);
        if (!base) return with_context(err, err->status, "layer %d attention weights", il);
        /* h = read(bank + [run]) once the bank has something, else run */
        const float *wn = vec(base, &L->attn_res_norm, f->vec0);
        const float *wp = vec(base, &L->attn_res_proj, f->vec1);
        for (int64_t t = 0; t < T; t++) {
            if (nb > 0) res_read_token(f, t, nb, H, wn, wp, eps, f->h + t * H);
            else memcpy(f->h + t * H, f->run + t * H, (size_t)H * sizeof(float));
        }
        /* block boundary: snapshot, then clear (trap: test trap_attnres_no_clear) */
        int run_empty = 0;
        if (il % B == 0) {
            for (int64_t t = 0; t < T; t++)
                memcpy(f->bank + (t * f->nb_max + nb) * H, f->run + t * H, (size_t)H * sizeof(float));
            nb++;
            run_empty = 1;
        }
        const float *in_n = vec(base, &L->input_norm, f->vec2);
        for (int64_t t = 0; t < T; t++) ms_rmsnorm(f->x + t * H, f->h + t * H, in_n, H, eps);
        if (L->is_mla) mla_forward(c, f, seg, nseg, L, base, T);
        else kda_forward(c, f, seg, nseg, L, base, T);
        for (int64_t i = 0; i < T * H; i++) f->run[i] = run_empty ? f->a[i] : f->run[i] + f->a[i];
        /* h2 = read(bank + [run]), always */
        wn = vec(base, &L->mlp_res_norm, f->vec0);
        wp = vec(base, &L->mlp_res_proj, f->vec1);
        for (int64_t t = 0; t < T; t++) res_read_token(f, t, nb, H, wn, wp, eps, f->h + t * H);
        const float *pn = vec(base, &L->post_attn_norm, f->vec2);
        for (int64_t t = 0; t < T; t++) ms_rmsnorm(f->x + t * H, f->h + t * H, pn, H, eps);
        ms_store_release(c->store, L->attn_region);
        if (!(base = ms_store_acquire(c->store, L->ffn_region, err)))
            return with_context(err, err->status, "layer %d FFN weights", il);
        if (L->is_dense) {
            if (T == 1 && c->predict) guess_next_layer(c, f, L, guesses_per_layer(cf));
            dense_mlp(c, f, &L->mlp_gate, &L->mlp_up, &L->mlp_down, base, f->x, f->ffn, T);
        } else {
            s = moe_forward(c, f, L, base, T, keep, err);
            if (s != MS_OK) { ms_store_release(c->store, L->ffn_region); return s; }
        }
        for (int64_t i = 0; i < T * H; i++) f->run[i] = f->run[i] + f->ffn[i];
        ms_store_release(c->store, L->ffn_region);
        if (T == 1 && c->predict) refine_next_layer(c, f, il, nb, cf->num_experts_per_token);
    }

    *nb_io = nb;
    return MS_OK;
}

/* A batched pass in groups of whole segments, about T / pass_groups tokens
 * each: group g runs through this stage's layers and goes on to the next
 * stage at once (pass_group SEND), so while the next stages work on it this
 * one works on group g + 1; then the groups come back in order (RECV) to
 * their places in run / bank, and the head runs over all the tokens as one
 * pass. Each segment's tokens meet only their own state, so the bits are
 * those of one pass (DETERMINISM item 11). This stage reads its layers once
 * per group: the engine asks for groups only when every stage holds its
 * trunk (engine/pipe.c), and by default only for passes of many tokens
 * (pass_group_tokens per group): a decode step's pass costs about one read of
 * the weights from memory whatever its tokens, so splitting it costs more
 * than the stages gain by working at once (docs/PERFORMANCE.md). */
static ms_status in_groups(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const int32_t *ids, int64_t T,
                           int G, int *nb_out, ms_err *err) {
    const int64_t H = c->m->cfg.hidden_size;
    int s0[MS_PIPE_MAX_GROUPS + 1];
    int64_t t0[MS_PIPE_MAX_GROUPS + 1];
    MS_ASSERT(G <= MS_PIPE_MAX_GROUPS);
    /* groups of whole segments, the g-th ending at the first segment end at or past (g + 1) T / G */
    s0[0] = 0;
    t0[0] = 0;
    int ng = 1;
    int64_t acc = 0;
    for (int is = 0; is < nseg - 1; is++) {
        acc += seg[is].T;
        /* close group ng - 1 here if it holds its share and segments remain for the rest */
        if (ng < G && nseg - is - 1 >= G - ng && acc * G >= (int64_t)ng * T) {
            s0[ng] = is + 1;
            t0[ng] = acc;
            ng++;
        }
    }
    s0[ng] = nseg;
    t0[ng] = T;
    ms_status s = MS_OK;
    int sent = 0, nb = 0;
    for (int g = 0; g < ng && s == MS_OK; g++) {
        const int64_t Tg = t0[g + 1] - t0[g];
        nb = 0;
        if ((s = embed(c, f, ids + t0[g], Tg, err)) != MS_OK) break;
        if ((s = layers(c, f, seg + s0[g], s0[g + 1] - s0[g], Tg, 0, &nb, err)) != MS_OK) break;
        if ((s = c->pass_group(c, 0, seg + s0[g], s0[g + 1] - s0[g], Tg, f->run, f->bank, f->nb_max, &nb, err)) != MS_OK)
            break;
        sent++;
    }
    /* every group sent comes back, also after a failure (the ring stays in step) */
    for (int g = 0; g < sent; g++) {
        ms_err e2;
        ms_err_clear(&e2);
        int nbg = nb;
        const ms_status r = c->pass_group(c, 1, seg + s0[g], s0[g + 1] - s0[g], t0[g + 1] - t0[g], f->run + t0[g] * H,
                                          f->bank + t0[g] * f->nb_max * H, f->nb_max, &nbg, s == MS_OK ? err : &e2);
        if (s == MS_OK) { s = r; *nb_out = nbg; }
    }
    return s;
}

/* The groups a pass of nseg segments and T tokens goes to the next stage in
 * (in_groups): at most pass_groups, one segment and pass_group_tokens tokens
 * each at least; < 2: the pass goes as one piece. */
static int n_groups(const ms_fwd_ctx *c, int nseg, int64_t T) {
    const ms_model *m = c->m;
    if (!m->head || m->layer1 == m->n_layer || !c->pass_group) return 1;
    const int64_t per_group = c->pass_group_tokens > 1 ? c->pass_group_tokens : 1;
    int64_t G = c->pass_groups < nseg ? c->pass_groups : nseg;
    if (G > T / per_group) G = T / per_group;
    return (int)G;
}

/* The whole model over the pass's tokens: segments seg[0..nseg) in order,
 * ids concatenated. all_logits ([T, V], nseg 1): every row, else each
 * segment's last row into seg[i].logits. A pipeline stage runs its part
 * (model.h, ms_fwd_ctx.pass_on). */
static ms_status forward(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const int32_t *ids,
                         float *all_logits, ms_err *err) {
    const ms_model *m = c->m;
    const ms_config *cf = &m->cfg;
    const int64_t H = cf->hidden_size, V = cf->vocab_size;
    const float eps = (float)cf->rms_norm_eps;
    int64_t n_ctx = 0, T = 0;
    for (int is = 0; is < nseg; is++) {
        const ms_state *st = seg[is].st;
        MS_ASSERT(seg[is].T >= 1);
        T += seg[is].T;
        if (st->n_past + seg[is].T > st->max_ctx)
            return ms_err_set(err, MS_E_CONTEXT, "context full: %lld + %lld tokens > max_context %lld",
                              (long long)st->n_past, (long long)seg[is].T, (long long)st->max_ctx);
        if (st->n_past + seg[is].T > n_ctx) n_ctx = st->n_past + seg[is].T;
    }
    MS_ASSERT(T <= f->max_T && nseg >= 1);
    MS_ASSERT(nseg == 1 || (!all_logits && !c->rec && !c->score_lp));
    MS_ASSERT(!c->score_lp || (!all_logits && c->score_n >= 0 && c->score_n <= T &&
                               c->score_k >= 0 && c->score_k <= MS_LSE_TOP_MAX));
    MS_ASSERT((ids != NULL) == m->head);
    for (int64_t t = 0; ids && t < T; t++)
        if (ids[t] < 0 || ids[t] >= V)
            return ms_err_set(err, MS_E_USAGE, "token id %d out of range [0, %lld)", ids[t], (long long)V);
    ms_status s = ensure_att(f, cf, n_ctx, err);
    if (s != MS_OK) return s;
    if (c->rec) {
        MS_ASSERT(T <= c->rec->max_T);
        c->rec->n_rec = 0;                  /* valid only once the forward completes */
        c->rec->n_past0 = seg[0].st->n_past;
    }
    /* one sequence's consecutive tokens: keep its last tokens' experts cached */
    const int keep = nseg == 1 && T > 1;

    int nb = m->head ? 0 : c->stage_nb;     /* snapshots in the bank (same for every token) */
    const int rest = m->head && m->layer1 < m->n_layer;    /* later layers run in other stages */
    const int G = n_groups(c, nseg, T);
    if (G > 1) {
        /* several groups in flight through the stages */
        if ((s = in_groups(c, f, seg, nseg, ids, T, G, &nb, err)) != MS_OK) return s;
    } else {
        if (m->head && (s = embed(c, f, ids, T, err)) != MS_OK) return s;
        if ((s = layers(c, f, seg, nseg, T, keep, &nb, err)) != MS_OK) return s;
        if (keep && m->cfg.num_experts > 0) keep_last_experts(c, f, T);
        if (!m->head || (rest && c->pass_async)) {
            /* a stage's output, or a chunk sent on unawaited: no head here */
            if (rest) {
                MS_ASSERT(c->pass_group && !all_logits && !c->rec && !c->score_lp);
                if ((s = c->pass_group(c, 2, seg, nseg, T, f->run, f->bank, f->nb_max, &nb, err)) != MS_OK) return s;
            } else {
                c->stage_nb = nb;
                if (c->rec) c->rec->n_rec = T;
            }
            for (int is = 0; is < nseg; is++) seg[is].st->n_past += seg[is].T;
            return MS_OK;
        }
        if (rest) {
            MS_ASSERT(c->pass_on);
            if ((s = c->pass_on(c, seg, nseg, T, f->run, f->bank, f->nb_max, &nb, err)) != MS_OK) return s;
        }
    }

    /* y = RMSNorm(read(bank + [run]; output_attn_res_*); norm); logits = lm_head y,
     * for every token (all_logits, scoring) or each segment's last one */
    const uint8_t *fb = ms_store_acquire(c->store, m->final_region, err);
    if (!fb) return with_context(err, err->status, "after the last layer: final norms");
    const float *wn = vec(fb, &m->out_res_norm, f->vec0);
    const float *wp = vec(fb, &m->out_res_proj, f->vec1);
    const float *fn = vec(fb, &m->final_norm, f->vec2);
    const int every = all_logits || c->score_lp;
    int64_t n_rows = 0;
    for (int64_t t = 0, is = 0, end = seg[0].T; t < T; t++) {
        const int last = t == end - 1;
        if (last && ++is < nseg) end += seg[is].T;
        if (!every && !last) continue;
        res_read_token(f, t, nb, H, wn, wp, eps, f->h + t * H);
        ms_rmsnorm(f->y + n_rows * H, f->h + t * H, fn, H, eps);
        n_rows++;
    }
    MS_ASSERT(n_rows == (every ? T : nseg));
    ms_store_release(c->store, m->final_region);
    for (int ic = 0; ic < m->n_lm_chunks; ic++) {
        const uint8_t *lb = ms_store_acquire(c->store, m->lm_region[ic], err);
        if (!lb) return with_context(err, err->status, "after the last layer: lm_head rows %lld..%lld",
                                     (long long)m->lm_row0[ic], (long long)m->lm_row0[ic + 1]);
        const int64_t r0 = m->lm_row0[ic];
        if (c->score_lp) {
            score_rows(c, f, lb, ic, T, seg[0].logits);
        } else if (nseg == 1) {
            ms_wt part = m->lm_head;
            part.off = m->lm_off[ic];
            part.rows = m->lm_row0[ic + 1] - r0;
            mm_bf16(c, (all_logits ? all_logits : seg[0].logits) + r0, V, lb, &part, f->y, H, n_rows);
        } else {
            /* the segments' rows land in separate arrays: a tile at a time */
            for (int64_t q0 = r0; q0 < m->lm_row0[ic + 1]; q0 += SCORE_ROWS) {
                const int64_t nr = m->lm_row0[ic + 1] - q0 < SCORE_ROWS ? m->lm_row0[ic + 1] - q0 : SCORE_ROWS;
                lm_tile(c, f, lb, ic, q0, nr, nseg);
                for (int is = 0; is < nseg; is++)
                    memcpy(seg[is].logits + q0, f->lt + is * SCORE_ROWS, (size_t)nr * sizeof(float));
            }
        }
        ms_store_release(c->store, m->lm_region[ic]);
    }
    for (int64_t t = 0; c->score_lp && t < c->score_n; t++) {
        c->score_lp[t] = ms_lse_logprob(&f->sl[t], f->sx[t]);
        if (c->score_k > 0)
            ms_lse_top(&f->sl[t], c->score_k, c->score_top_ids + t * c->score_k, c->score_top_lp + t * c->score_k);
    }
    for (int is = 0; is < nseg; is++) seg[is].st->n_past += seg[is].T;
    if (c->rec) c->rec->n_rec = T;
    return MS_OK;
}

ms_status ms_forward(ms_fwd_ctx *c, ms_fwd *f, ms_state *st, const int32_t *ids,
                     int64_t T, float *logits, int all_logits, ms_err *err) {
    const ms_fseg seg = { st, T, all_logits ? NULL : logits };
    return forward(c, f, &seg, 1, ids, all_logits ? logits : NULL, err);
}

ms_status ms_forward_batch(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const int32_t *ids,
                           ms_err *err) {
    return forward(c, f, seg, nseg, ids, NULL, err);
}

ms_status ms_forward_stage(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, ms_err *err) {
    MS_ASSERT(!c->m->head && c->stage_nb >= 0 && c->stage_nb <= f->nb_max);
    return forward(c, f, seg, nseg, NULL, NULL, err);
}

int64_t ms_bank_snapshots(const ms_config *c) {
    return (c->num_hidden_layers + c->attn_res_block_size - 1) / c->attn_res_block_size + 1;
}

float *ms_fwd_run(ms_fwd *f) { return f->run; }
float *ms_fwd_bank(ms_fwd *f) { return f->bank; }
int64_t ms_fwd_nb_max(const ms_fwd *f) { return f->nb_max; }
