/* model/forward_int.h - what the files of the forward pass share (private to
 * src/model).
 *
 * Owns: the scratch of a forward (struct ms_fwd; laid out and allocated in
 *   forward.c), the threaded matrix products and the small helpers every
 *   part uses, and the interfaces between the parts:
 *     forward.c    the layer loop, the head, the pass modes, the scratch layout
 *     kda.c        KDA (spec 4.3): projections, recurrence, output gate
 *     mla.c        gated NoPE MLA (spec 4.4) over the latent cache
 *     moe.c        the FFN: dense MLP, router, routed experts (spec 4.5)
 *     expert_io.c  which experts are read when, and which stay cached
 *     score.c      log-sum-exp and the scoring of a pass's rows
 *     rollback.c   the record of a forward and the rollback to a prefix of it
 * Invariants: every helper here computes the same bits whoever calls it; the
 *   expert I/O functions (ms_xio_*) change no bit of any result, only when
 *   reads happen and what the cache keeps.
 * Does not: leave src/model (nothing outside includes this header).
 */
#ifndef MS_MODEL_FORWARD_INT_H
#define MS_MODEL_FORWARD_INT_H

#include "model/model.h"

#include <stdint.h>
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
    /* gpt-oss: per KV group, its heads' queries as doubles [group * head_dim], and
       the values of a window that wraps around a sliding layer's ring, in one run
       [sliding_window * head_dim] */
    double *oqd;
    float *owin;
    /* FFN */
    float *fg, *fu;             /* [T, max(I, S, Im)] */
    float *rl;                  /* router logits [T, E] (also the next layer's guesses, expert_io.c) */
    int32_t *sel;               /* [T, k] */
    float *selw;                /* [T, k] */
    float *z, *zr;              /* [T, lat] */
    float *ey;                  /* expert outputs [T, k, lat] */
    float *zg, *eo;             /* gathered inputs / outputs [T, lat] */
    int32_t *etok, *eslot;      /* [T] */
    int32_t *ecount;            /* [E] */
    int *eregion;               /* [E] */
    const uint8_t **eptr;       /* [E] */
    int32_t *psel;              /* next-layer prediction: a token's top-k [k] */
    int *estate, *eorder;       /* [E] ms_store_expert_state of eregion[], the compute order
                                   (before it: the guesses' regions) */
    int32_t *tsel;              /* the last MS_LAST_TOKENS tokens' selections of a chunk, per
                                   layer [n_layer][MS_LAST_TOKENS][k] (ms_xio_chunk_end) */
    int32_t *tkeep;             /* per layer: how many of those ms_xio_chunk_end marks [n_layer] */
    int32_t *emark;             /* kept_tokens' marks, the guesses' votes [num_experts] */
    int *tregion;               /* their regions, [n_layer * MS_LAST_TOKENS * k] */
    float *y;                   /* final [T, H] */
    float *lt;                  /* scoring: logits of a vocabulary tile [T, MS_SCORE_ROWS] */
    ms_lse *sl;                 /* scoring: per row the fold [T] */
    float *sx;                  /* scoring: per row the target's logit [T] */
};

/* Chunk tokens whose experts the expert I/O policy keeps cached. */
enum { MS_LAST_TOKENS = 8 };

/* Vocabulary rows per lm_head product when the logits do not land in one
 * [T, V] array (scoring, several segments): f->lt holds [T, MS_SCORE_ROWS]
 * (2 MB for a 1024-token chunk, where all the logits of K3's 163,840-entry
 * vocabulary would take 671 MB). */
enum { MS_SCORE_ROWS = 512 };

/* ---- helpers (forward.c) ---- */

/* The F32 at p, whatever p's alignment: safetensors does not align data
 * offsets, and a writer that does not pad leaves an F32 tensor at 2 mod 4
 * after a BF16 run of odd length (odd head or width counts). BF16 offsets
 * stay even (bind.c). */
static inline float ms_ld_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Y[t][r] = W[r,:] . X[t,:] for t < T, the BF16 matrix w (in the region at
 * base), each output its own T16 dot; rows split across ctx->pool. */
void ms_mm_bf16(ms_fwd_ctx *c, float *Y, int64_t ldy, const uint8_t *base, const ms_wt *w, const float *X,
                int64_t ldx, int64_t T);
/* The same for an MXFP4 matrix [rows, cols] (packed codes and scales);
 * counts the scale-255 groups used into ctx->scale255. */
void ms_mm_mxfp4(ms_fwd_ctx *c, float *Y, int64_t ldy, const uint8_t *packed, const uint8_t *scales, int64_t rows,
                 int64_t cols, const float *X, int64_t ldx, int64_t T);
/* A 1-D weight as floats: F32 in place when aligned, else copied into out;
 * BF16 converted into out. */
const float *ms_fwd_vec(const uint8_t *base, const ms_wt *w, float *out);
/* Prefix the recorded error with what the model was reading; returns st. */
ms_status ms_fwd_with_context(ms_err *err, ms_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The attention-residual read of token t (spec 4.2): its nb bank snapshots
 * and run mixed by the softmax of their normed scores, into out [H]. */
void ms_res_read_token(ms_fwd *f, int64_t t, int nb, int64_t H, const float *wn, const float *wp, float eps,
                       float *out);

/* ---- the mixers: f->x [T, H] in, f->a [T, H] out; each segment on its own state ---- */
void ms_kda_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L, const uint8_t *base,
                    int64_t T);
void ms_mla_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L, const uint8_t *base,
                    int64_t T);

/* The one definition of KDA's per-token state update (kda.c; the forward and
 * ms_state_rollback's replay both call it): head h's causal conv of q, k, v
 * (x[3] [dk] in place, conv the layer's history), L2 norms, decay gate from fr,
 * beta from b, the delta-rule write into S, and when o is given o = S^T q * qscale.
 * wconv[s]: the conv taps [P, K] as F32 bytes at any alignment. */
void ms_kda_step(const ms_config *c, const ms_kern *kern, int64_t h, const uint8_t *const wconv[3], float A,
                 const float *dtb, float *const x[3], float *conv, const float *fr, float b, float *S, float qscale,
                 float *o);
/* Head h's dt_bias as floats (F32 in place when aligned, else copied into
 * buf [dk]; BF16 converted into buf). */
const float *ms_kda_dtb(const uint8_t *base, const ms_layer *L, int64_t h, int64_t dk, float *buf);
/* Before the heads run (rollback.c): a segment's state at its start, the
 * weights the update reads and the recurrence inputs of its tokens (rows
 * t0..t0 + T - 1 of the pass), into r. */
void ms_kda_record(const ms_config *c, ms_fwd *f, const ms_layer *L, const uint8_t *base, const float *S,
                   const float *conv, float *r, int64_t t0, int64_t T);

/* ---- the FFN (moe.c): f->x [T, H] in, f->ffn [T, H] out ---- */
/* Y = down(SiTU-GLU(gate X, up X)) for the dense MLP or the shared experts. */
void ms_dense_mlp(ms_fwd_ctx *c, ms_fwd *f, const ms_wt *wg, const ms_wt *wu, const ms_wt *wd, const uint8_t *base,
                  const float *X, float *Y, int64_t T);
/* The Stable LatentMoE of layer L. keep: the T tokens are one sequence's, in
 * order (ms_xio_layer_begin). Fails only when an expert read fails. */
ms_status ms_moe_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, const uint8_t *base, int64_t T, int keep,
                         ms_err *err);
/* top-k of choice[0, E) by value, ties to the lower index, in descending order */
void ms_topk(const float *choice, int64_t E, int64_t k, int32_t *idx);
/* The rows src [T, width] of the tokens that chose expert e (f->sel [T, k]),
 * in token order, into f->zg (f->etok / f->eslot: each row's token and
 * slot); how many. */
int64_t ms_moe_gather(ms_fwd *f, const float *src, int64_t e, int64_t T, int64_t k, int64_t width);
/* One routed expert (its tensors at offsets off in its region, at eb) over
 * the n rows ms_moe_gather left in f->zg, its outputs to f->ey (ms_moe_scatter). */
typedef void (*ms_expert_fn)(ms_fwd_ctx *c, ms_fwd *f, const int64_t *off, const uint8_t *eb, int64_t n);
struct ms_xio;
/* Every expert the layer's selection uses, in the order x gives, each read
 * once: gather its tokens' rows of src [T, width], acquire it, fn, release.
 * Fails only when an expert read fails. */
ms_status ms_moe_experts(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, struct ms_xio *x, const float *src,
                         int64_t width, int64_t T, ms_expert_fn fn, ms_err *err);
/* out [width] = w_0 y_0, then out = out + w_j y_j for j = 1..k-1: token t's
 * expert outputs f->ey [T, k, width] weighted by f->selw, in selection order. */
void ms_moe_weighted_sum(const ms_fwd *f, int64_t t, int64_t k, int64_t width, float *out);
/* The expert's n output rows f->eo [n, width] to f->ey at their (token, slot). */
void ms_moe_scatter(ms_fwd *f, int64_t n, int64_t k, int64_t width);

/* ---- expert I/O policy (expert_io.c) ----
 * The math asks for one layer's routed experts through this interface and
 * nothing else: begin (once the chunk's selection is in f->sel), then per
 * expert, in the order x->region gives: acquire, compute, release. */
typedef struct ms_xio {
    const ms_layer *L;
    int n_used;                 /* distinct experts the chunk's tokens chose */
    int *region;                /* [n_used] their regions, in compute order (f->eregion) */
    int window;                 /* reads kept hinted ahead of the expert computing */
    int64_t T, m_keep;          /* experts of tokens [T - m_keep, T) are marked used at once */
} ms_xio;

/* The layer's wanted set from f->sel [T, k]: confirms it to the store (right
 * guesses become demand reads, wrong ones still queued are cancelled), hints
 * the reads, guesses the next layer's experts (decode), and orders x->region
 * so that experts in memory compute first. keep: the T tokens are one
 * sequence's, in order (a prompt chunk): its last tokens' experts are kept
 * cached for the decode that follows (ms_xio_chunk_end). */
void ms_xio_layer_begin(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, int64_t T, int keep, ms_xio *x);
/* Expert iu (of x->region) in memory, its bytes in *eb: renews the hint over
 * the next ones and waits for its read. last_tok: the last token that chose
 * it (-1: none). A failure names the layer and the expert. */
ms_status ms_xio_acquire(ms_fwd_ctx *c, ms_xio *x, int iu, int64_t last_tok, const uint8_t **eb, ms_err *err);
/* Expert iu computed: its slot goes back to the store. */
void ms_xio_release(ms_fwd_ctx *c, ms_xio *x, int iu);
/* A dense FFN layer L is about to run (decode: guess the next layer's experts). */
void ms_xio_dense_layer(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, int64_t T);
/* Layer il is done, the bank holding nb snapshots (decode: refine the guesses
 * for layer il + 1). Rewrites f->h and f->x. */
void ms_xio_layer_end(ms_fwd_ctx *c, ms_fwd *f, int il, int nb, int64_t T);
/* A chunk of one sequence's T > 1 tokens is done: keep its last tokens'
 * experts cached for the decode that follows. */
void ms_xio_chunk_end(ms_fwd_ctx *c, ms_fwd *f, int64_t T);

/* ---- scoring (score.c) ---- */
/* lm_head rows [r0, r0 + nr) of chunk ic (its region's bytes at lb) for the
 * first n rows of f->y, into f->lt [n][MS_SCORE_ROWS]. */
void ms_lm_tile(ms_fwd_ctx *c, ms_fwd *f, const uint8_t *lb, int ic, int64_t r0, int64_t nr, int64_t n);
/* Scoring: lm_head chunk ic folded into every scored row's sum; the last
 * row's logits into logits [V]. */
void ms_score_rows(ms_fwd_ctx *c, ms_fwd *f, const uint8_t *lb, int ic, int64_t T, float *logits);
/* Scoring, after the last chunk: the log-probabilities and top lists out. */
void ms_score_finish(ms_fwd_ctx *c, ms_fwd *f);

#endif
