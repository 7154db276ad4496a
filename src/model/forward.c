/* model/forward.c - the Kimi K3 forward pass over a chunk of T tokens.
 *
 * Reads like spec section 4: attention residuals (4.2) around each layer, KDA
 * (4.3, kda.c) or gated NoPE MLA (4.4, mla.c) as the mixer, a dense MLP
 * (layer 0) or the Stable LatentMoE (4.5, moe.c) as the FFN, and the final
 * read + norm + lm_head (the head).
 *
 * Owns: the layer loop, the head, the scratch layout (struct ms_fwd,
 * forward_int.h), the threaded matrix products, and the pass modes: how a
 * pass travels when the model is split into pipeline stages (pass_kind).
 *
 * Main idea: a chunk is processed layer by layer for all its tokens, so
 * each layer's weights are acquired once per chunk and each routed expert
 * once per layer per chunk, applied to every token that chose it.
 *
 * Invariants: every number a token gets is computed by the same operations
 * in the same order whatever T is and however rows are split across threads
 * (docs/DETERMINISM.md), so prefill in chunks is bit-identical to decoding
 * token by token.
 *
 * Precision: activations fp32; matrix products use the T16 tree of
 * kernels.h; norms, softmax and attention dot products accumulate in double in
 * index order; everything else is float arithmetic in the order written here
 * (the files are compiled without contraction).
 *
 * Does not: decide when experts are read or kept (expert_io.c), score
 * (score.c), record or roll back (rollback.c), or talk to other stages (the
 * engine does, through ms_fwd_ctx.next).
 */
#include "model/forward_int.h"
#include "model/oss/oss.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
void ms_mm_bf16(ms_fwd_ctx *c, float *Y, int64_t ldy, const uint8_t *base, const ms_wt *w, const float *X,
                int64_t ldx, int64_t T) {
    MS_ASSERT(w->dtype == MS_DT_BF16);
    for (int64_t t0 = 0; t0 < T; t0 += MS_MM_TILE) {
        const int64_t nt = T - t0 < MS_MM_TILE ? T - t0 : MS_MM_TILE;
        mm_job j = { c->m->kern, Y + t0 * ldy, ldy, base + w->off, NULL, X + t0 * ldx, ldx, nt, w->cols, 0, 0 };
        ms_pool_for(c->pool, w->rows, 16, mm_part, &j);
    }
}

void ms_mm_mxfp4(ms_fwd_ctx *c, float *Y, int64_t ldy, const uint8_t *packed, const uint8_t *scales, int64_t rows,
                 int64_t cols, const float *X, int64_t ldx, int64_t T) {
    for (int64_t t0 = 0; t0 < T; t0 += MS_MM_TILE) {
        const int64_t nt = T - t0 < MS_MM_TILE ? T - t0 : MS_MM_TILE;
        mm_job j = { c->m->kern, Y + t0 * ldy, ldy, packed, scales, X + t0 * ldx, ldx, nt, cols, 1, 0 };
        ms_pool_for(c->pool, rows, 16, mm_part, &j);
        if (t0 == 0) c->scale255 += j.n255;     /* once per scale byte, whatever T */
    }
}

/* Prefix the recorded error with what the model was reading, so a failed read
 * names the layer and expert. */
ms_status ms_fwd_with_context(ms_err *err, ms_status st, const char *fmt, ...) {
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

/* A 1-D weight as floats (BF16 converted; F32 in place, or copied when the
 * file left it unaligned). */
const float *ms_fwd_vec(const uint8_t *base, const ms_wt *w, float *out) {
    const uint8_t *p = base + w->off;
    if (w->dtype == MS_DT_F32) {
        if ((uintptr_t)p % sizeof(float) == 0) return (const float *)(const void *)p;
        memcpy(out, p, (size_t)w->cols * sizeof(float));
        return out;
    }
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
void ms_res_read_token(ms_fwd *f, int64_t t, int nb, int64_t H, const float *wn, const float *wp, float eps,
                       float *out) {
    const float *cand[MS_MAX_LAYERS + 1];
    for (int j = 0; j < nb; j++) cand[j] = f->bank + (t * f->nb_max + j) * H;
    cand[nb] = f->run + t * H;
    res_read(out, cand, nb + 1, wn, wp, H, eps, f->tmp, f->sc);
}

/* ------------------------------------------------------------------------ */
/* the scratch layout                                                        */

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
    const int oss = c->family == MS_FAMILY_GPT_OSS;
    const int64_t E = c->num_experts, k = c->num_experts_per_token;
    /* the experts' input width, and the widest FFN hidden (gpt-oss: gate_up's 2I rows) */
    const int64_t lat = oss ? H : c->routed_expert_hidden_size;
    const int64_t S = c->num_shared_experts * c->moe_intermediate_size;
    int64_t wide = oss ? 2 * c->intermediate_size : c->intermediate_size;
    if (S > wide) wide = S;
    if (c->moe_intermediate_size > wide) wide = c->moe_intermediate_size;
    int64_t vmax = H;
    if (P > vmax) vmax = P;
    if (E > vmax) vmax = E;
    if (c->q_lora_rank > vmax) vmax = c->q_lora_rank;
    if (c->kv_lora_rank > vmax) vmax = c->kv_lora_rank;
    if (lat > vmax) vmax = lat;
    if (wide > vmax) vmax = wide;
    if (nh * c->head_dim > vmax) vmax = nh * c->head_dim;
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
    if (oss) {
        f->q = TF(T * nh * c->head_dim);
        f->ckv = TF(T * c->pos_floats);
        f->mo = TF(T * nh * c->head_dim);
        f->oqd = take(a, nh * c->head_dim, sizeof(double));
        f->owin = TF(c->num_key_value_heads * c->sliding_window * c->head_dim);
    }
    f->fg = TF(T * wide); f->fu = TF(T * wide);
    if (E > 0) {
        f->rl = TF(T * E); f->selw = TF(T * k);
        f->z = TF(T * lat); f->zr = TF(T * lat);
        f->ey = TF(T * k * lat); f->zg = TF(T * lat); f->eo = TF(T * lat);
        f->sel = TI(T * k); f->etok = TI(T * k); f->eslot = TI(T * k);
        f->ecount = TI(E); f->eregion = TI(E);
        f->eptr = take(a, E, sizeof(*f->eptr));
        f->psel = TI(k);
        f->estate = TI(E); f->eorder = TI(E);
        f->tsel = TI(m->n_layer * MS_LAST_TOKENS * k); f->tregion = TI(m->n_layer * MS_LAST_TOKENS * k);
        f->tkeep = TI(m->n_layer); f->emark = TI(E);
    }
    f->lt = TF(T * MS_SCORE_ROWS);
    f->sl = take(a, T, sizeof(ms_lse)); f->sx = TF(T);
}
#undef TF
#undef TI

/* Attention scratch per head: K3's MLA q [pw doubles = 2 pw floats], ol
 * [kvr], scores [n_ctx]; gpt-oss's scores [n_ctx]. */
static int64_t att_stride_for(const ms_config *c, int64_t n_ctx) {
    if (c->family == MS_FAMILY_GPT_OSS) return n_ctx + (n_ctx & 1);
    const int64_t pw = c->kv_lora_rank + c->qk_rope_head_dim;
    const int64_t n = 2 * pw + c->kv_lora_rank + n_ctx;
    return n + (n & 1);         /* even, so every head's q doubles stay 8-byte aligned */
}

static int64_t att_floats(const ms_config *c, int64_t n_ctx) {
    return c->n_pos_layers ? c->num_attention_heads * att_stride_for(c, n_ctx) : 0;
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
    if (c->n_pos_layers == 0) return MS_OK;
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
                    f->z, f->zr, f->ey, f->zg, f->eo, f->owin };
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) free(fl[i]);
    free(f->sel); free(f->etok); free(f->eslot); free(f->ecount); free(f->eregion);
    free(f->psel); free(f->estate); free(f->eorder);
    free(f->tsel); free(f->tregion); free(f->tkeep); free(f->emark);
    free(f->lt); free(f->sl); free(f->sx);
    free((void *)f->eptr);
    free(f->oqd);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* the layer loop                                                            */

/* run[0, T) = the tokens' embedding rows, used as is (no scaling). */
static ms_status embed(ms_fwd_ctx *c, ms_fwd *f, const int32_t *ids, int64_t T, ms_err *err) {
    const ms_model *m = c->m;
    const int64_t H = m->cfg.hidden_size;
    for (int64_t t = 0; t < T; t++) {
        uint16_t *row = (uint16_t *)(f->h + t * H);     /* h is free until layer 0 */
        const ms_status s = ms_store_read_part(c->store, m->embed_region, m->embed.rel + (int64_t)ids[t] * H * 2, H * 2,
                                               row, err);
        if (s != MS_OK) return ms_fwd_with_context(err, s, "layer input: embedding row of token %d", ids[t]);
        for (int64_t i = H - 1; i >= 0; i--) f->run[t * H + i] = ms_bf16_to_f32(row[i]);
    }
    return MS_OK;
}

/* The first half of layer L: read(bank + [run]) - at a block boundary the
 * bank takes run as a snapshot and run starts over - then the mixer, then
 * read(bank + [run]) again into the FFN's input f->x. *nb: the snapshots. */
static ms_status attention_part(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L, int64_t T,
                                int *nb, ms_err *err) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size;
    const float eps = (float)cf->rms_norm_eps;
    const uint8_t *base = ms_store_acquire(c->store, L->attn_region, err);
    if (!base) return ms_fwd_with_context(err, err->status, "layer %d attention weights", L->index);
    /* h = read(bank + [run]) once the bank has something, else run */
    const float *wn = ms_fwd_vec(base, &L->attn_res_norm, f->vec0);
    const float *wp = ms_fwd_vec(base, &L->attn_res_proj, f->vec1);
    for (int64_t t = 0; t < T; t++) {
        if (*nb > 0) ms_res_read_token(f, t, *nb, H, wn, wp, eps, f->h + t * H);
        else memcpy(f->h + t * H, f->run + t * H, (size_t)H * sizeof(float));
    }
    /* block boundary: snapshot, then clear (trap: test trap_attnres_no_clear) */
    int run_empty = 0;
    if (L->index % cf->attn_res_block_size == 0) {
        for (int64_t t = 0; t < T; t++)
            memcpy(f->bank + (t * f->nb_max + *nb) * H, f->run + t * H, (size_t)H * sizeof(float));
        (*nb)++;
        run_empty = 1;
    }
    const float *in_n = ms_fwd_vec(base, &L->input_norm, f->vec2);
    for (int64_t t = 0; t < T; t++) ms_rmsnorm(f->x + t * H, f->h + t * H, in_n, H, eps);
    if (L->is_mla) ms_mla_forward(c, f, seg, nseg, L, base, T);
    else ms_kda_forward(c, f, seg, nseg, L, base, T);
    for (int64_t i = 0; i < T * H; i++) f->run[i] = run_empty ? f->a[i] : f->run[i] + f->a[i];
    /* h2 = read(bank + [run]), always */
    wn = ms_fwd_vec(base, &L->mlp_res_norm, f->vec0);
    wp = ms_fwd_vec(base, &L->mlp_res_proj, f->vec1);
    for (int64_t t = 0; t < T; t++) ms_res_read_token(f, t, *nb, H, wn, wp, eps, f->h + t * H);
    const float *pn = ms_fwd_vec(base, &L->post_attn_norm, f->vec2);
    for (int64_t t = 0; t < T; t++) ms_rmsnorm(f->x + t * H, f->h + t * H, pn, H, eps);
    ms_store_release(c->store, L->attn_region);
    return MS_OK;
}

/* The second half of layer L: run += FFN(f->x). keep: see ms_moe_forward. */
static ms_status ffn_part(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, int64_t T, int keep, ms_err *err) {
    const int64_t H = c->m->cfg.hidden_size;
    const uint8_t *base = ms_store_acquire(c->store, L->ffn_region, err);
    if (!base) return ms_fwd_with_context(err, err->status, "layer %d FFN weights", L->index);
    if (L->is_dense) {
        ms_xio_dense_layer(c, f, L, T);
        ms_dense_mlp(c, f, &L->mlp_gate, &L->mlp_up, &L->mlp_down, base, f->x, f->ffn, T);
    } else {
        const ms_status s = c->m->cfg.family == MS_FAMILY_GPT_OSS ? ms_oss_moe_forward(c, f, L, base, T, keep, err)
                                                                   : ms_moe_forward(c, f, L, base, T, keep, err);
        if (s != MS_OK) { ms_store_release(c->store, L->ffn_region); return s; }
    }
    for (int64_t i = 0; i < T * H; i++) f->run[i] = f->run[i] + f->ffn[i];
    ms_store_release(c->store, L->ffn_region);
    return MS_OK;
}

/* This process's layers [layer0, layer1) over the T tokens of the segments,
 * from run / bank (*nb snapshots) in f; *nb is updated. */
static ms_status layers(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, int64_t T, int keep, int *nb,
                        ms_err *err) {
    const ms_model *m = c->m;
    ms_status s;
    for (int il = m->layer0; il < m->layer1; il++) {
        const ms_layer *L = &m->layers[il];
        s = m->cfg.family == MS_FAMILY_GPT_OSS ? ms_oss_attention_part(c, f, seg, nseg, L, T, err)
                                               : attention_part(c, f, seg, nseg, L, T, nb, err);
        if (s != MS_OK) return s;
        if ((s = ffn_part(c, f, L, T, keep, err)) != MS_OK) return s;
        ms_xio_layer_end(c, f, il, *nb, T);
    }
    return MS_OK;
}

/* ------------------------------------------------------------------------ */
/* the head                                                                  */

/* y = RMSNorm(read(bank + [run]; output_attn_res_*); norm) into f->y, for
 * every token (every: scoring), else for each token of a segment with
 * all_logits and the last one of each other segment; how many rows. */
static ms_status head_rows(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, int64_t T, int nb, int every,
                           int64_t *n_rows, ms_err *err) {
    const ms_model *m = c->m;
    const int64_t H = m->cfg.hidden_size;
    const float eps = (float)m->cfg.rms_norm_eps;
    const int oss = m->cfg.family == MS_FAMILY_GPT_OSS;     /* a plain final norm: no residual read */
    const uint8_t *fb = ms_store_acquire(c->store, m->final_region, err);
    if (!fb) return ms_fwd_with_context(err, err->status, "after the last layer: final norms");
    const float *wn = oss ? NULL : ms_fwd_vec(fb, &m->out_res_norm, f->vec0);
    const float *wp = oss ? NULL : ms_fwd_vec(fb, &m->out_res_proj, f->vec1);
    const float *fn = ms_fwd_vec(fb, &m->final_norm, f->vec2);
    int64_t n = 0, want = 0;
    for (int is = 0; is < nseg; is++) want += every || seg[is].all_logits ? seg[is].T : 1;
    for (int64_t t = 0, is = 0, end = seg[0].T; t < T; t++) {
        const int last = t == end - 1, all = seg[is].all_logits != NULL;
        if (last && ++is < nseg) end += seg[is].T;
        if (!every && !all && !last) continue;
        if (oss) {
            ms_rmsnorm(f->y + n * H, f->run + t * H, fn, H, eps);
        } else {
            ms_res_read_token(f, t, nb, H, wn, wp, eps, f->h + t * H);
            ms_rmsnorm(f->y + n * H, f->h + t * H, fn, H, eps);
        }
        n++;
    }
    MS_ASSERT(n == want);
    ms_store_release(c->store, m->final_region);
    *n_rows = n;
    return MS_OK;
}

/* The head over the pass's tokens: logits = lm_head y, a chunk of lm_head
 * rows at a time - scored (ctx->score_lp), or per segment every row into its
 * all_logits [T, V] or its last row into its logits. */
static ms_status head(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, int64_t T, int nb, ms_err *err) {
    const ms_model *m = c->m;
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    int64_t n_rows = 0;
    ms_status s = head_rows(c, f, seg, nseg, T, nb, c->score_lp != NULL, &n_rows, err);
    if (s != MS_OK) return s;
    for (int ic = 0; ic < m->n_lm_chunks; ic++) {
        const uint8_t *lb = ms_store_acquire(c->store, m->lm_region[ic], err);
        if (!lb) return ms_fwd_with_context(err, err->status, "after the last layer: lm_head rows %lld..%lld",
                                            (long long)m->lm_row0[ic], (long long)m->lm_row0[ic + 1]);
        const int64_t r0 = m->lm_row0[ic], r1 = m->lm_row0[ic + 1];
        if (c->score_lp) {
            ms_score_rows(c, f, lb, ic, T, seg[0].logits);
        } else if (nseg == 1) {
            ms_wt part = m->lm_head;
            part.off = m->lm_off[ic];
            part.rows = r1 - r0;
            ms_mm_bf16(c, (seg[0].all_logits ? seg[0].all_logits : seg[0].logits) + r0, V, lb, &part, f->y, H,
                       n_rows);
        } else {
            /* the segments' rows land in separate arrays: a tile at a time, row n
               of f->y to its segment's row (every row of one with all_logits) */
            for (int64_t q0 = r0; q0 < r1; q0 += MS_SCORE_ROWS) {
                const int64_t nr = r1 - q0 < MS_SCORE_ROWS ? r1 - q0 : MS_SCORE_ROWS;
                ms_lm_tile(c, f, lb, ic, q0, nr, n_rows);
                for (int is = 0, n = 0; is < nseg; is++) {
                    const int64_t rows = seg[is].all_logits ? seg[is].T : 1;
                    for (int64_t j = 0; j < rows; j++, n++) {
                        float *dst = seg[is].all_logits ? seg[is].all_logits + j * V : seg[is].logits;
                        memcpy(dst + q0, f->lt + n * MS_SCORE_ROWS, (size_t)nr * sizeof(float));
                    }
                }
            }
        }
        ms_store_release(c->store, m->lm_region[ic]);
    }
    if (c->score_lp) ms_score_finish(c, f);
    return MS_OK;
}

/* ------------------------------------------------------------------------ */
/* pass modes                                                                */

/* How a pass travels, chosen once per pass (pass_begin). */
typedef enum pass_kind {
    PASS_WHOLE,         /* every layer here, then the head */
    PASS_ROUND,         /* stage 0: its layers, the rest on the next stages and back (MS_PASS_ROUND), the head */
    PASS_GROUPS,        /* stage 0: in groups through the stages (MS_PASS_SEND, MS_PASS_RECV), the head */
    PASS_ASYNC,         /* stage 0: its layers, on to the next stages unawaited (MS_PASS_ASYNC); no head */
    PASS_STAGE,         /* a stage without the head: its layers, from and to the stage activations */
} pass_kind;

typedef struct pass {
    pass_kind kind;
    int64_t T;          /* the tokens of every segment */
    int G;              /* PASS_GROUPS: groups */
    int keep;           /* one sequence's consecutive tokens: keep its last tokens' experts cached */
    int nb;             /* snapshots in the bank (the same for every token) */
} pass;

/* The groups a pass of nseg segments and T tokens goes to the next stage in
 * (in_groups): at most next.max_groups, one segment and next.group_tokens
 * tokens each at least; < 2: the pass goes as one piece. */
static int n_groups(const ms_fwd_ctx *c, int nseg, int64_t T) {
    const int64_t per_group = c->next.group_tokens > 1 ? c->next.group_tokens : 1;
    int64_t G = c->next.max_groups < nseg ? c->next.max_groups : nseg;
    if (G > T / per_group) G = T / per_group;
    return (int)G;
}

static pass_kind kind_of(const ms_fwd_ctx *c, int nseg, int64_t T, int *G) {
    const ms_model *m = c->m;
    *G = 1;
    if (!m->head) return PASS_STAGE;
    if (m->layer1 == m->n_layer) return PASS_WHOLE;
    MS_ASSERT(c->next.pass);            /* later layers run in other stages */
    if ((*G = n_groups(c, nseg, T)) > 1) return PASS_GROUPS;
    return c->pass_async ? PASS_ASYNC : PASS_ROUND;
}

/* The pass's arguments checked, its mode chosen, the attention scratch sized
 * for its context, and the segments' records (seg[].rec) started. */
static ms_status pass_begin(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const int32_t *ids, pass *p,
                            ms_err *err) {
    const ms_model *m = c->m;
    const int64_t V = m->cfg.vocab_size;
    int64_t n_ctx = 0, T = 0;
    int outputs = 0;            /* segments with every row's logits or a record */
    for (int is = 0; is < nseg; is++) {
        const ms_state *st = seg[is].st;
        MS_ASSERT(seg[is].T >= 1 && (!seg[is].rec || seg[is].T <= seg[is].rec->max_T));
        outputs += seg[is].all_logits || seg[is].rec;
        T += seg[is].T;
        if (st->n_past + seg[is].T > st->max_ctx)
            return ms_err_set(err, MS_E_CONTEXT, "context full: %lld + %lld tokens > max_context %lld",
                              (long long)st->n_past, (long long)seg[is].T, (long long)st->max_ctx);
        if (st->n_past + seg[is].T > n_ctx) n_ctx = st->n_past + seg[is].T;
    }
    MS_ASSERT(T <= f->max_T && nseg >= 1);
    MS_ASSERT(!c->score_lp || (nseg == 1 && !outputs && c->score_n >= 0 && c->score_n <= T &&
                               c->score_k >= 0 && c->score_k <= MS_LSE_TOP_MAX));
    MS_ASSERT((ids != NULL) == m->head);
    for (int64_t t = 0; ids && t < T; t++)
        if (ids[t] < 0 || ids[t] >= V)
            return ms_err_set(err, MS_E_USAGE, "token id %d out of range [0, %lld)", ids[t], (long long)V);
    const ms_status s = ensure_att(f, &m->cfg, n_ctx, err);
    if (s != MS_OK) return s;
    p->T = T;
    p->kind = kind_of(c, nseg, T, &p->G);
    MS_ASSERT(p->kind != PASS_ASYNC || (!outputs && !c->score_lp));
    p->keep = p->kind != PASS_GROUPS && nseg == 1 && T > 1;
    p->nb = m->head ? 0 : c->stage_nb;
    for (int is = 0; is < nseg; is++) {
        ms_rollback *rec = seg[is].rec;
        if (!rec) continue;
        rec->n_rec = 0;                     /* valid only once the forward completes */
        rec->n_past0 = seg[is].st->n_past;
    }
    return MS_OK;
}

/* The pass is done: every segment's state has read its tokens; a recorded
 * segment can now be rolled back. */
static ms_status pass_end(const ms_fseg *seg, int nseg) {
    for (int is = 0; is < nseg; is++) {
        seg[is].st->n_past += seg[is].T;
        if (seg[is].rec) seg[is].rec->n_rec = seg[is].T;
    }
    return MS_OK;
}

/* This process's part of the pass over all its tokens: the embedding (with
 * the head), the layers, then the chunk's experts kept (p->keep). */
static ms_status this_part(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const int32_t *ids, pass *p,
                           ms_err *err) {
    ms_status s;
    if (c->m->head && (s = embed(c, f, ids, p->T, err)) != MS_OK) return s;
    if ((s = layers(c, f, seg, nseg, p->T, p->keep, &p->nb, err)) != MS_OK) return s;
    if (p->keep && c->m->cfg.num_experts > 0) ms_xio_chunk_end(c, f, p->T);
    return MS_OK;
}

/* A batched pass in groups of whole segments, about T / G tokens each:
 * group g runs through this stage's layers and goes on to the next stage at
 * once (MS_PASS_SEND), so while the next stages work on it this one works on
 * group g + 1; then the groups come back in order (MS_PASS_RECV) to their
 * places in run / bank, and the head runs over all the tokens as one pass.
 * Each segment's tokens meet only their own state, so the bits are those of
 * one pass (DETERMINISM item 11). This stage reads its layers once per
 * group: the engine asks for groups only when every stage holds its trunk
 * (engine/pipe.c), and by default only for passes of many tokens
 * (next.group_tokens per group): a decode step's pass costs about one read
 * of the weights from memory whatever its tokens, so splitting it costs
 * more than the stages gain by working at once (docs/PERFORMANCE.md, the
 * pipeline across processes). */
static ms_status in_groups(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const int32_t *ids, pass *p,
                           ms_err *err) {
    const int64_t H = c->m->cfg.hidden_size, T = p->T;
    const int G = p->G;
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
        const int ns = s0[g + 1] - s0[g];
        nb = 0;
        if ((s = embed(c, f, ids + t0[g], Tg, err)) != MS_OK) break;
        if ((s = layers(c, f, seg + s0[g], ns, Tg, 0, &nb, err)) != MS_OK) break;
        if ((s = c->next.pass(c, MS_PASS_SEND, seg + s0[g], ns, Tg, f->run, f->bank, f->nb_max, &nb, err)) != MS_OK)
            break;
        sent++;
    }
    /* every group sent comes back, also after a failure (the ring stays in step) */
    for (int g = 0; g < sent; g++) {
        ms_err e2;
        ms_err_clear(&e2);
        int nbg = nb;
        const ms_status r = c->next.pass(c, MS_PASS_RECV, seg + s0[g], s0[g + 1] - s0[g], t0[g + 1] - t0[g],
                                         f->run + t0[g] * H, f->bank + t0[g] * f->nb_max * H, f->nb_max, &nbg,
                                         s == MS_OK ? err : &e2);
        if (s == MS_OK) { s = r; p->nb = nbg; }
    }
    return s;
}

/* The whole model over the pass's tokens: segments seg[0..nseg) in order,
 * ids concatenated, each segment's logits as it asks (ms_fseg). With later
 * stages (a pipeline), this process runs its part and the pass travels as
 * pass_kind says. */
static ms_status forward(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const int32_t *ids, ms_err *err) {
    pass p;
    ms_status s = pass_begin(c, f, seg, nseg, ids, &p, err);
    if (s != MS_OK) return s;
    MS_ASSERT(p.kind != PASS_STAGE);    /* ms_forward_stage */
    if (p.kind == PASS_GROUPS) {
        s = in_groups(c, f, seg, nseg, ids, &p, err);
    } else {
        s = this_part(c, f, seg, nseg, ids, &p, err);
        /* the layers after this process's: on the next stages and back, or
         * (nobody reads this chunk's output) sent on without waiting */
        const ms_pass_op op = p.kind == PASS_ASYNC ? MS_PASS_ASYNC : MS_PASS_ROUND;
        if (s == MS_OK && p.kind != PASS_WHOLE)
            s = c->next.pass(c, op, seg, nseg, p.T, f->run, f->bank, f->nb_max, &p.nb, err);
    }
    if (s == MS_OK && p.kind != PASS_ASYNC) s = head(c, f, seg, nseg, p.T, p.nb, err);
    return s == MS_OK ? pass_end(seg, nseg) : s;
}

ms_status ms_forward_batch(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const int32_t *ids,
                           ms_err *err) {
    return forward(c, f, seg, nseg, ids, err);
}

ms_status ms_forward_stage(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, ms_err *err) {
    MS_ASSERT(!c->m->head && c->stage_nb >= 0 && c->stage_nb <= f->nb_max);
    pass p;
    ms_status s = pass_begin(c, f, seg, nseg, NULL, &p, err);
    if (s == MS_OK) s = this_part(c, f, seg, nseg, NULL, &p, err);
    if (s != MS_OK) return s;
    c->stage_nb = p.nb;
    return pass_end(seg, nseg);
}

int64_t ms_bank_snapshots(const ms_config *c) {
    if (c->family == MS_FAMILY_GPT_OSS) return 0;       /* no attention residuals */
    return (c->num_hidden_layers + c->attn_res_block_size - 1) / c->attn_res_block_size + 1;
}

float *ms_fwd_run(ms_fwd *f) { return f->run; }
float *ms_fwd_bank(ms_fwd *f) { return f->bank; }
int64_t ms_fwd_nb_max(const ms_fwd *f) { return f->nb_max; }
