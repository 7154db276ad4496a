/* model/model.h - the model families (Kimi K3; gpt-oss in model/oss/):
 * weights bound by their released names, per-session state, and the forward
 * pass over a chunk of tokens.
 *
 * The family seam: ms_config.family picks the binding (bind.c or
 * oss/bind.c) and, per layer, the mixer, the FFN and the head's norm
 * (forward.c calls into oss/ for gpt-oss). Everything else - the store's
 * regions, expert I/O, the pass modes (batched, pipelined, scored,
 * recorded), the state's per-position caches, sessions - is shared.
 *
 * Owns: the mapping from tensor names to typed views inside store regions
 *   (shape and dtype checked at bind: a wrong or missing tensor is a load error
 *   naming it), the per-session state (KDA state S and conv history per KDA
 *   layer; the MLA cache in LATENT form, kv_lora_rank + qk_rope_head_dim
 *   floats per position per MLA layer), the forward pass (forward.c with
 *   kda.c, mla.c, moe.c, expert_io.c, score.c), and the rollback of a
 *   recorded forward to a prefix of its tokens (speculative decoding:
 *   ms_rollback, ms_state_rollback; rollback.c).
 * Regions: GLOBAL for embed_tokens (read by rows) and the final norms; TRUNK,
 *   in the order of use, for each layer's attention part and FFN part (one
 *   read each when their tensors are contiguous in one shard, else one read
 *   per contiguous run) and for lm_head in row chunks; one EXPERT region per
 *   routed expert (its six tensors).
 * Does not: open files (the store does), tokenize, sample.
 */
#ifndef MS_MODEL_MODEL_H
#define MS_MODEL_MODEL_H

#include "base/err.h"
#include "base/log.h"
#include "base/pool.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "store/plan.h"
#include "store/store.h"

#include <stdint.h>

/* A bound tensor: where it sits inside its region's buffer. */
typedef struct ms_wt {
    int region;                 /* -1 when the tensor does not exist for this layer */
    int64_t off;                /* byte offset inside the region buffer */
    int64_t rel;                /* offset in the region's ranges laid end to end (ms_store_read_part) */
    ms_dtype dtype;
    int64_t rows, cols;         /* 1-D tensors: rows = 1, cols = n */
    const char *name;           /* released name (owned by the checkpoint), NULL if unbound */
    const char *file;           /* its shard file name (owned by the checkpoint) */
} ms_wt;

enum { MS_EXP_W1P, MS_EXP_W1S, MS_EXP_W2P, MS_EXP_W2S, MS_EXP_W3P, MS_EXP_W3S, MS_EXP_N };
/* A gpt-oss expert's six slices of its layer's fused tensors, in the same slots. */
enum { MS_OSS_GU_P, MS_OSS_GU_S, MS_OSS_DN_P, MS_OSS_DN_S, MS_OSS_GU_B, MS_OSS_DN_B };

typedef struct ms_layer {
    int is_mla, is_dense;
    int attn_region;            /* norms, residual reads and the mixer (KDA or MLA) */
    int ffn_region;             /* dense MLP, or router + latent projections + shared experts */
    ms_wt input_norm, post_attn_norm, attn_res_norm, attn_res_proj, mlp_res_norm, mlp_res_proj;
    /* KDA */
    ms_wt q_proj, k_proj, v_proj, g_proj, o_proj, q_conv, k_conv, v_conv;
    ms_wt f_a, f_b, b_proj, dt_bias, a_log, o_norm;
    /* MLA (o_proj and g_proj shared with the names above) */
    ms_wt q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b;
    /* dense MLP */
    ms_wt mlp_gate, mlp_up, mlp_down;
    /* LatentMoE */
    ms_wt router, router_bias, lat_down, lat_norm, lat_up, sh_gate, sh_up, sh_down;
    int expert_region0;         /* expert ie is region expert_region0 + ie */
    int64_t (*expert_off)[MS_EXP_N];   /* [n_expert][6] byte offsets in its region */
    /* gpt-oss: GQA with biases and sinks (q/k/v/o_proj above); router and
     * router_bias above (MoE with biases) */
    ms_wt q_bias, k_bias, v_bias, o_bias, sinks;
    int is_sliding;             /* keys limited to the last cfg.sliding_window */
    int kda_index;              /* index among KDA layers, -1 if not one */
    int pos_index;              /* index among the layers with a cache per position
                                   (K3's MLA layers, every gpt-oss layer), -1 if not */
    int index;                  /* the layer's own index */
} ms_layer;

typedef struct ms_model {
    ms_config cfg;
    int n_layer;
    ms_layer *layers;
    /* The part this process runs (a pipeline stage, engine/pipe.c; the whole
     * model otherwise): layers [layer0, layer1), with `head` the embedding,
     * the final norms and lm_head. Layers outside are not bound (regions -1),
     * and the per-session state holds only the part's KDA layers
     * [kda0, kda1) and position-cache layers [pos0, pos1) (indices kda_index /
     * pos_index; the other entries NULL). */
    int layer0, layer1, head;
    int kda0, kda1, pos0, pos1;
    int embed_region, final_region;
    ms_wt embed, final_norm, out_res_norm, out_res_proj;
    /* lm_head is split by rows into regions no larger than the largest layer
     * region, so a streamed lm_head fits the trunk ring's slots */
    int n_lm_chunks;
    int *lm_region;             /* [n_lm_chunks] */
    int64_t *lm_row0;           /* [n_lm_chunks + 1] row bounds */
    int64_t *lm_off;            /* [n_lm_chunks] offset of the rows in their region */
    ms_wt lm_head;              /* whole-tensor view (dtype, rows, cols); off unused */
    const ms_kern *kern;
    int64_t expert_bytes;       /* bytes of one routed expert (six tensors) */
    /* dry run (ms_model_bind with no checkpoint): the regions as the planner sees them */
    ms_plan_region *plan_regions;
    int n_plan_regions, cap_plan_regions;
} ms_model;

/* Bind every tensor of the checkpoint described by cfg, declare the regions
 * in the store. All problems are load errors (MS_E_MODEL) naming the tensor.
 * Dry run: ckpt == NULL and store == NULL bind tensors synthesised from the
 * config (expected shapes, contiguous) and only record the regions' sizes in
 * m->plan_regions, for planning memory from a config.json alone. */
ms_status ms_model_bind(ms_model *m, const ms_config *cfg, const ms_ckpt *ckpt,
                        ms_store *store, ms_err *err);
/* The same for a part of the model: layers [layer0, layer1) and, if head,
 * the embedding, the final norms and lm_head (ms_model_bind binds
 * [0, n_layer) with the head). */
ms_status ms_model_bind_part(ms_model *m, const ms_config *cfg, const ms_ckpt *ckpt, ms_store *store,
                             int layer0, int layer1, int head, ms_err *err);
void ms_model_free(ms_model *m);

/* Load-time checks that need a few weight bytes: every 1-D weight (norms,
 * residual projections, biases, A_log) must be finite. Reads only those
 * bytes (ms_store_read_part). MS_E_MODEL naming the tensor otherwise. */
ms_status ms_model_validate(const ms_model *m, ms_store *store, ms_err *err);

/* ---- per-session state ----
 * A layer with a cache per position keeps position p in slot p mod its slot
 * count: max_ctx slots (one per position), or, for a sliding layer (gpt-oss),
 * a ring of `ring` = window + max_back slots. A query at p sees keys
 * p - window < j <= p, so the ring holds every key a query needs while a
 * forward writes at most max_back + 1 positions before attending (model/oss/
 * attn.c writes a chunk's keys in blocks of that many), and a rollback moves
 * back at most max_back + 1 positions (ms_state_rewind). */
typedef struct ms_state {
    int64_t n_past;
    int64_t pipe_id;            /* names the state to the other stages of a pipeline */
    int64_t max_ctx;
    int64_t ring;               /* slots of a sliding layer's cache (max_ctx: no ring) */
    float **kda_S;              /* [n_kda][heads * dk * dv] */
    float **kda_conv;           /* [n_kda][3 * C * (K-1)]  q,k,v histories, oldest first */
    float **pos_cache;          /* [n_pos_layers][slots * cfg.pos_floats] */
} ms_state;

/* max_back: the farthest, in positions, a rollback or a draft model's mark
 * goes back (the engine's max_draft). */
ms_status ms_state_init(ms_state *st, const ms_model *m, int64_t max_ctx, int64_t max_back, ms_err *err);
/* Bytes ms_state_init allocates (for m's part of the model). */
int64_t ms_state_bytes(const ms_model *m, int64_t max_ctx, int64_t max_back);
/* Slots of layer L's cache in st (L has a cache per position). */
int64_t ms_state_slots(const ms_state *st, const ms_layer *L);
/* How many positions a forward may write before its queries attend, and a
 * rewind may move back, with every key a query needs still in the ring:
 * ring - window + 1 (max_back + 1); INT64_MAX without a ring. */
int64_t ms_state_span(const ms_state *st, const ms_model *m);
/* Layer il's state at n_past positions as sessions on disk and the prompt
 * cache keep it: a KDA layer's S (part[0]) and conv history (part[1]); a
 * layer with a cache per position, the cache of the positions a later query
 * can see, in position order: [0, n_past), or for a sliding layer the last
 * window - 1 of them, which may wrap around its ring (part[0] then part[1]).
 * n[] floats each. The pointers are NULL when the layer is not in m's part
 * (another pipeline stage holds it) or st is NULL; the sizes are always given
 * (their sum does not depend on st). */
void ms_state_layer(const ms_state *st, const ms_model *m, int il, int64_t n_past, float *part[2], int64_t n[2]);
/* 1 when some layer of m slides (its state at n keeps only a window). */
int ms_state_has_ring(const ms_model *m);
/* What a session's state holds, for `plan`: "keys and values at 4096
 * positions, 159 in a sliding layer". */
void ms_state_what(const ms_model *m, int64_t max_ctx, int64_t max_back, char *out, size_t n);
/* Floats of layers [l0, l1)'s state at n positions (ms_state_layer's sizes). */
int64_t ms_state_floats(const ms_model *m, int l0, int l1, int64_t n);
void ms_state_free(ms_state *st, const ms_model *m);
void ms_state_reset(ms_state *st, const ms_model *m);
/* dst = src (the positions [0, src->n_past) hold; dst->max_ctx >= src->n_past,
 * the same ring). */
void ms_state_copy(ms_state *dst, const ms_state *src, const ms_model *m);
/* Move st's positions back to n <= n_past (KDA layers do not move: ms_state_
 * rollback): 0, st unchanged, when a sliding layer's ring no longer holds
 * the keys position n needs (n_past - n > ms_state_span). */
int ms_state_rewind(ms_state *st, int64_t n, const ms_model *m);

/* ---- rollback inside the last forward (speculative decoding) ----
 * The MLA cache rolls back by moving n_past (later positions are overwritten).
 * A KDA layer's S and conv history do not: a recorded forward keeps, per KDA
 * layer, S and conv as they were at the chunk start, the few weights the
 * state update reads (conv taps, A_log, dt_bias as f32), and the per-token
 * inputs of the recurrence (pre-conv q, k, v, the decay input f, the beta
 * logit b: 4P + nh floats per token). ms_state_rollback restores the copy and
 * replays the first n tokens through ms_kda_step, the one function the forward
 * pass itself uses for the state update, so the replayed state has the bits
 * of a forward over those n tokens alone (tests/test_spec.c). Layout of one
 * KDA layer's record, floats:
 *
 *   S0 [nh*dk*dv] | conv0 [3*P*(K-1)] | conv taps [3*P*K] | A_log [nh] |
 *   dt_bias [P] | token 0 [q P | k P | v P | f P | b nh] | token 1 ... (max_T)
 */
typedef struct ms_rollback {
    int64_t max_T;              /* tokens one recorded forward may hold */
    int64_t n_rec;              /* tokens recorded by the last forward (0: none) */
    int64_t n_past0;            /* st->n_past when that forward started */
    float **kda;                /* [n_kda] records, layout above */
} ms_rollback;

/* Bytes ms_rollback_init allocates for chunks of up to max_T tokens (for m's
 * part of the model). */
int64_t ms_rollback_bytes(const ms_model *m, int64_t max_T);
ms_status ms_rollback_init(ms_rollback *rb, const ms_model *m, int64_t max_T, ms_err *err);
void ms_rollback_free(ms_rollback *rb, const ms_model *m);

/* ---- forward (forward.c; the parts: forward_int.h) ---- */
#define MS_PIPE_MAX_GROUPS 64   /* groups of one batched pass in flight (ms_next_stage.max_groups) */
typedef struct ms_fwd ms_fwd;   /* scratch for chunks of up to max_T tokens */

ms_status ms_fwd_init(ms_fwd **out, const ms_model *m, int64_t max_T, ms_err *err);
/* Bytes ms_fwd_init allocates, plus the attention scratch at max_ctx. */
int64_t ms_fwd_bytes(const ms_model *m, int64_t max_T, int64_t max_ctx);
void ms_fwd_free(ms_fwd *f);

/* One sequence's part of a forward: T >= 1 tokens at positions st->n_past..
 * of that sequence. Its outputs: logits [n_vocab] receives the logits after
 * its last token, or, when all_logits is set, all_logits [T, n_vocab] one row
 * per token (logits unused). rec (not NULL): record the segment so that
 * ms_state_rollback can keep a prefix of it (T <= rec->max_T); every layer
 * kind records what it cannot move back by n_past (KDA: model.h, ms_rollback;
 * MLA's latent cache and gpt-oss's keys and values roll back by position).
 * A pass's segments each choose these for themselves: speculation verifies
 * several sequences' drafts in one pass, each segment with its rows and its
 * record (ms_sessions_decode). */
typedef struct ms_fseg {
    ms_state *st;
    int64_t T;
    float *logits;
    float *all_logits;
    ms_rollback *rec;
} ms_fseg;

/* What stage 0 of a pipeline asks of the next stage (engine/pipe.c) for a
 * pass's activations after its last layer: run [T, H] and the bank
 * [T, nb_max, H] with *nb snapshots per token. */
typedef enum ms_pass_op {
    MS_PASS_ROUND,      /* the rest of the layers, and wait: run / bank / *nb are
                           left as they are after the last layer */
    MS_PASS_SEND,       /* one group of a batched pass, not awaited: its answer
                           comes with a later MS_PASS_RECV */
    MS_PASS_RECV,       /* the oldest group's answer, into run / bank (the
                           group's own tokens) and *nb; groups come back in order */
    MS_PASS_ASYNC,      /* a chunk whose output nobody reads: sent on, never
                           awaited by this forward (the engine collects the
                           answers: ms_pipe_drain, or the next MS_PASS_ROUND) */
} ms_pass_op;

struct ms_fwd_ctx;
/* The next stage of a pipeline, as stage 0 sees it: one narrow interface. */
typedef struct ms_next_stage {
    /* NULL: this process runs every layer after layer1 itself (no later stage) */
    ms_status (*pass)(const struct ms_fwd_ctx *c, ms_pass_op op, const ms_fseg *seg, int nseg, int64_t T,
                      float *run, float *bank, int64_t nb_max, int *nb, ms_err *err);
    /* a batched pass (nseg > 1) goes in up to max_groups groups of whole
       segments, each sent as soon as this stage's layers are done with it
       (MS_PASS_SEND, then MS_PASS_RECV per group); <= 1: in one piece */
    int max_groups;
    int group_tokens;           /* ... and at least this many tokens per group (0 = 1) */
} ms_next_stage;

/* What one forward runs on, and its mode. */
typedef struct ms_fwd_ctx {
    const ms_model *m;
    ms_store *store;
    ms_pool *pool;
    int64_t scale255;           /* counter: MXFP4 groups with scale byte 255 used */
    int predict;                /* decode: prefetch the next layer's predicted experts */
    /* Scoring (score_lp not NULL): rows t < score_n get score_lp[t] = the
       log-probability of score_target[t] under row t's logits (ms_lse), and
       with score_k > 0 their score_k most likely ids and log-probabilities
       (score_top_ids / score_top_lp, [score_n * score_k]), computed a tile of
       vocabulary rows at a time: no [T, n_vocab] logits are held. `logits`
       then receives the last row's logits only. */
    const int32_t *score_target;
    int64_t score_n;
    double *score_lp;
    int score_k;
    int32_t *score_top_ids;
    double *score_top_lp;
    /* A pipeline (engine/pipe.c). Stage 0 (the head, and layers left after
       layer1): next runs them, pass_user is its object. pass_async: nobody
       reads this chunk's output (a prompt chunk before the last, no logits,
       not scored or recorded): after this stage's layers it goes on with
       MS_PASS_ASYNC and the forward returns without waiting (no logits;
       n_past advanced), so the next stages work on it while this one starts
       the next chunk. A stage without the head (ms_forward_stage): stage_nb
       is the snapshots of the bank on entry, and on return. */
    ms_next_stage next;
    void *pass_user;
    int pass_async;
    int stage_nb;
} ms_fwd_ctx;

/* One or several sequences through the model in ONE pass over the weights:
 * the segments' tokens, ids concatenated in segment order (sum of T <= max_T).
 * Every projection, router and expert runs over all the pass's tokens
 * together, each (token, row) its own T16 dot, and attention runs per
 * segment on its own state, so each segment gets the bits a pass of its
 * tokens alone gives it, and those of its tokens fed one at a time
 * (test_batch, test_mspec). Each segment's outputs and record are its own
 * (ms_fseg). Each state's n_past += its T. Scored (ctx->score_lp) only with
 * one segment, neither recorded nor with every row; no expert guesses with
 * several segments (they follow one token). On failure every segment's
 * state is unusable (the caller marks the sessions unsound). */
ms_status ms_forward_batch(ms_fwd_ctx *ctx, ms_fwd *f, const ms_fseg *seg, int nseg, const int32_t *ids,
                           ms_err *err);

/* A pipeline stage without the head (model bound by ms_model_bind_part with
 * head 0): the segments' T = sum of seg[].T tokens through layers
 * [layer0, layer1), from the activations in ms_fwd_run / ms_fwd_bank (with
 * ctx->stage_nb snapshots), leaving the output there. Each state's n_past +=
 * its T; each segment recorded when its rec is set, as ms_forward_batch does. */
ms_status ms_forward_stage(ms_fwd_ctx *ctx, ms_fwd *f, const ms_fseg *seg, int nseg, ms_err *err);
/* The most attention-residual snapshots a token's bank holds (nb_max). */
int64_t ms_bank_snapshots(const ms_config *c);
/* The stage activations: run [max_T, H], bank [max_T, nb_max, H]. */
float *ms_fwd_run(ms_fwd *f);
float *ms_fwd_bank(ms_fwd *f);
int64_t ms_fwd_nb_max(const ms_fwd *f);

/* Log-softmax of a row of logits in one pass, in index order (scoring): for
 * each x, in double, if x > m then z = z * exp(m - x) + 1 and m = x, else
 * z += exp(x - m), from m = -INFINITY, z = 0; the log-probability of logit xt
 * is then (xt - m) - log(z). Also keeps the k largest logits and their ids
 * (ties: the lower id first). One sequential fold, so nothing depends on how
 * the row is cut into calls. */
#define MS_LSE_TOP_MAX 20
typedef struct ms_lse {
    double m, z;
    int k, n_top;               /* kept: n_top <= k <= MS_LSE_TOP_MAX, largest first */
    int32_t top_id[MS_LSE_TOP_MAX];
    float top_x[MS_LSE_TOP_MAX];
} ms_lse;
void ms_lse_init(ms_lse *s, int k);
/* Fold x[0, n), the logits of ids id0 .. id0 + n - 1. */
void ms_lse_fold(ms_lse *s, const float *x, int64_t n, int64_t id0);
double ms_lse_logprob(const ms_lse *s, float x);
/* The k (<= s->k) kept entries, best first, as ids and log-probabilities;
 * -1 / NAN past s->n_top. */
void ms_lse_top(const ms_lse *s, int k, int32_t *ids, double *logprobs);

/* Keep only the first n_keep (1 <= n_keep <= rb->n_rec) tokens of the last
 * recorded forward: afterwards st is bit for bit the state a forward over
 * those tokens alone would have left (n_past = rb->n_past0 + n_keep). Reads
 * no weights, allocates nothing; the heads are replayed on `pool`. The
 * record is consumed (rb->n_rec = 0). */
void ms_state_rollback(ms_state *st, ms_rollback *rb, const ms_model *m, ms_pool *pool,
                       int64_t n_keep);

#endif
