/* model/expert_io.c - the expert I/O policy of the forward pass.
 *
 * Owns: every decision about WHEN routed experts are read and WHICH stay
 * cached: the wanted set a layer confirms to the store, the hints that keep
 * reads in flight ahead of the computation, the order experts compute in,
 * the guesses of the next layer's experts (decoding: first from its router
 * applied early, then refined once this layer is done; a chunk of several
 * tokens: the refined ones, for all its tokens), and which
 * experts of a prompt's last tokens are kept for the decode that follows.
 * Main idea: the disk is the bottleneck where experts stream, so it should
 * never wait for the computation, and a guess should be read only while it
 * is likely right. The math (moe.c) asks for experts only through
 * ms_xio_layer_begin / acquire / release (forward_int.h); the layer loop
 * tells this file when a layer or a chunk ends.
 * Invariants: nothing here changes a bit of any result: a guess, a hint, an
 * order or a mark only moves reads earlier or later and chooses what the
 * cache keeps (test_budget: the same bits at every budget, prediction on and off).
 * Does not: compute a layer (it may run a router early, into its own
 * scratch), or choose the cache's eviction policy (the store does).
 */
#include "model/forward_int.h"
#include "model/oss/oss.h"

#include <string.h>

/* Guesses per layer: the predictor's k/2 most confident choices. Its accuracy
 * falls with rank, a wrong guess that is read costs the disk as much as a
 * right one saves, and the disk is the bottleneck where guesses matter; k/2
 * reads fewer expert bytes than k and is as fast or faster
 * (docs/perf/history.md, "guesses, I/O priorities and cancellation"). */
static int64_t guesses_per_layer(const ms_config *cf) {
    return cf->num_experts_per_token > 1 ? cf->num_experts_per_token / 2 : 1;
}

/* Guess layer N's experts for the T tokens whose router inputs are f->x
 * [T, H]: N's router (its FFN weights at nb, in memory) gives each token's
 * choice, of which its n_max most confident (of k) are guessed; the union is
 * read as guesses, the experts more tokens chose first, among equals in the
 * order they were first chosen (one token: most confident first). Own
 * scratch (rl, psel, emark, eorder, vec0; at a layer's end or before its
 * experts run, where none of them is in use). */
static void guess_with_router(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *N, const uint8_t *nb, int64_t T,
                              int64_t n_max) {
    const ms_config *cf = &c->m->cfg;
    const int64_t H = cf->hidden_size, E = cf->num_experts, k = cf->num_experts_per_token;
    const int oss = cf->family == MS_FAMILY_GPT_OSS;
    if (oss) ms_oss_router_logits(c, f->rl, N, nb, f->x, T, f->vec0);      /* the router's own choice */
    else ms_mm_bf16(c, f->rl, E, nb, &N->router, f->x, H, T);
    const float *bias = oss ? NULL : ms_fwd_vec(nb, &N->router_bias, f->vec0);
    const int64_t n = n_max < k ? n_max : k;
    int32_t *votes = f->emark, *order = f->eorder;
    memset(votes, 0, (size_t)E * sizeof *votes);
    int n_guess = 0;
    for (int64_t t = 0; t < T; t++) {
        float *choice = f->rl + t * E;
        if (!oss) {
            c->m->kern->sigmoidf_n(choice, choice, E);
            for (int64_t e = 0; e < E; e++) choice[e] = choice[e] + bias[e];
        }
        ms_topk(choice, E, k, f->psel);
        for (int64_t j = 0; j < n; j++)
            if (votes[f->psel[j]]++ == 0) order[n_guess++] = f->psel[j];
    }
    /* most votes first, stable (insertion: n_guess <= E, and T > 1 only where
       experts stream, so the disk is the bottleneck) */
    for (int i = 1; i < n_guess; i++) {
        const int32_t e = order[i];
        int j = i;
        for (; j > 0 && votes[order[j - 1]] < votes[e]; j--) order[j] = order[j - 1];
        order[j] = e;
    }
    for (int i = 0; i < n_guess; i++) order[i] += N->expert_region0;
    ms_store_predict(c->store, order, n_guess);
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
 * (ms_xio_chunk_end): the most whose distinct experts here fit in this
 * layer's share of the slots, the cache less `working` (equal shares over
 * the layers that stream experts), at most MS_LAST_TOKENS; 0 for one token,
 * or when nothing streams. Marked while the chunk runs, with working = this
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
    while (kept < T && kept < MS_LAST_TOKENS) {
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
 * layer's FFN input f->x (the "next-layer router" predictor) and read up to
 * n_max of the predicted experts as guesses (ms_store_predict), most
 * confident first. Called as soon as this layer's own reads are issued, so
 * the disk goes on from them to the predicted ones while this layer's
 * experts and the next layer's attention compute, instead of idling until
 * the next router has run; that layer's ms_store_confirm then promotes the
 * right guesses and cancels the wrong ones still queued. Only when that
 * router is in memory (no read is issued or waited for to get it). A guess
 * never changes a result: it only moves reads earlier (own scratch: this
 * layer's selection stays intact). How often it is right:
 * docs/perf/history.md, "guesses, I/O priorities and cancellation". */
static void guess_next_layer(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, int64_t n_max) {
    const ms_layer *N = next_to_guess(c, L->index);
    if (!N || n_max <= 0) return;
    /* its router, if in memory now (pinned, or streamed and already read
     * ahead); the pointer is used before the next store call */
    const uint8_t *nb = ms_store_peek(c->store, N->ffn_region);
    if (!nb) return;
    guess_with_router(c, f, N, nb, 1, n_max);
}

void ms_xio_dense_layer(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, int64_t T) {
    if (T == 1 && c->predict) guess_next_layer(c, f, L, guesses_per_layer(&c->m->cfg));
}

/* Second guesses for layer N = il + 1 once layer il is done: N's
 * router input is approximated by what it will be minus N's attention -
 * read(bank + [run]) with N's weights (gpt-oss: run), N's post-attention norm - which is much
 * closer than il's FFN input, with less lead time (only N's attention). Its
 * top k are guessed (those already cached or in flight cost nothing), and
 * they replace the first guesses: ms_store_predict cancels the first guesses
 * they leave out that are still queued. What they save: docs/perf/history.md,
 * "second guesses" and "second guesses replace the first".
 * A chunk of T > 1 tokens (a prompt chunk, a verify pass, sequences fed
 * together) makes only these, for every token; their union, the experts more
 * tokens chose first, so the ones read while N's attention runs are the
 * likeliest and the rarely chosen still queued at N's confirm are cancelled
 * unread (docs/PERFORMANCE.md, "Measured effect of each knob").
 * Only when the weights it reads are in memory (K3: N's attention and FFN
 * regions; gpt-oss: N's FFN region, which holds the norm); own scratch (f->h,
 * f->x are rewritten at N's start anyway). Changes no result. */
void ms_xio_layer_end(ms_fwd_ctx *c, ms_fwd *f, int il, int nb, int64_t T) {
    const ms_config *cf = &c->m->cfg;
    if (!c->predict) return;
    const ms_layer *N = next_to_guess(c, il);
    const int oss = cf->family == MS_FAMILY_GPT_OSS;    /* no attention residuals: the residual stream is run */
    if (!N || cf->num_experts_per_token <= 0 || (nb <= 0 && !oss)) return;
    const int64_t H = cf->hidden_size;
    const float eps = (float)cf->rms_norm_eps;
    /* the norm's weights: in N's attention region (K3), with its router (gpt-oss) */
    const uint8_t *ab = ms_store_peek(c->store, oss ? N->ffn_region : N->attn_region);
    if (!ab) return;
    const float *wn = oss ? NULL : ms_fwd_vec(ab, &N->mlp_res_norm, f->vec0);
    const float *wp = oss ? NULL : ms_fwd_vec(ab, &N->mlp_res_proj, f->vec1);
    const float *pn = ms_fwd_vec(ab, &N->post_attn_norm, f->vec2);
    for (int64_t t = 0; t < T; t++) {
        if (!oss) ms_res_read_token(f, t, nb, H, wn, wp, eps, f->h + t * H);
        ms_rmsnorm(f->x + t * H, (oss ? f->run : f->h) + t * H, pn, H, eps);
    }
    const uint8_t *nb2 = ms_store_peek(c->store, N->ffn_region);
    if (!nb2) return;
    guess_with_router(c, f, N, nb2, T, cf->num_experts_per_token);
}

/* The experts the chunk needs (f->sel), in expert order, into f->eregion;
 * how many. */
static int wanted(ms_fwd *f, const ms_layer *L, int64_t E, int64_t n_sel) {
    int n_used = 0;
    for (int64_t e = 0; e < E; e++) f->ecount[e] = 0;
    for (int64_t i = 0; i < n_sel; i++) f->ecount[f->sel[i]]++;
    for (int64_t e = 0; e < E; e++)
        if (f->ecount[e]) f->eregion[n_used++] = L->expert_region0 + (int)e;
    return n_used;
}

/* Compute the experts already in memory first, then those whose reads were in
 * flight before this layer's, then the ones just asked for (each group keeps
 * its order): computation covers the reads still to come. By f->estate, the
 * states before this layer's reads. */
static void compute_order(ms_fwd *f, int n_used) {
    if (n_used <= 1) return;
    int n_ord = 0;
    for (int want = MS_EXPERT_READY; want >= MS_EXPERT_ABSENT; want--)
        for (int iu = 0; iu < n_used; iu++)
            if (f->estate[iu] == want) f->eorder[n_ord++] = f->eregion[iu];
    MS_ASSERT(n_ord == n_used);
    memcpy(f->eregion, f->eorder, (size_t)n_used * sizeof *f->eregion);
}

void ms_xio_layer_begin(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, int64_t T, int keep, ms_xio *x) {
    const ms_config *cf = &c->m->cfg;
    const int64_t k = cf->num_experts_per_token;
    memset(x, 0, sizeof *x);
    x->L = L;
    x->T = T;
    x->region = f->eregion;
    if (keep) {
        /* the chunk's last tokens' choices, for ms_xio_chunk_end */
        const int64_t m_last = T < MS_LAST_TOKENS ? T : MS_LAST_TOKENS;
        memcpy(f->tsel + (int64_t)L->index * MS_LAST_TOKENS * k, f->sel + (T - m_last) * k,
               (size_t)(m_last * k) * sizeof *f->sel);
    }
    x->n_used = wanted(f, L, cf->num_experts, T * k);
    if (keep) {
        x->m_keep = kept_tokens(c, f, T, x->n_used);
        f->tkeep[L->index] = (int32_t)kept_tokens(c, f, T, 0);
    }
    /* the wanted set of this step: guesses among them become demand reads,
     * the other guesses still queued are cancelled */
    ms_store_confirm(c->store, f->eregion, x->n_used);
    /* where each one is before any new read: in memory, in flight (a
     * prediction or a cache slot still loading), or not yet asked for */
    for (int iu = 0; iu < x->n_used; iu++) f->estate[iu] = ms_store_expert_state(c->store, f->eregion[iu]);
    const int cap = ms_store_expert_capacity(c->store);
    ms_store_hint(c->store, f->eregion, x->n_used < cap ? x->n_used : cap);
    /* after each expert the hint is renewed over the next cap - 1 (the slot
     * just released takes the next read), so the disk never waits for the
     * computation */
    x->window = cap > 1 ? cap - 1 : 1;
    /* the next layer's likely experts queue behind this layer's reads (as
     * guesses: behind every demand read, never evicting this layer's) */
    if (T == 1 && c->predict) guess_next_layer(c, f, L, guesses_per_layer(cf));
    compute_order(f, x->n_used);
}

ms_status ms_xio_acquire(ms_fwd_ctx *c, ms_xio *x, int iu, int64_t last_tok, const uint8_t **eb, ms_err *err) {
    const int left = x->n_used - iu;
    if (iu > 0) ms_store_hint(c->store, x->region + iu, left < x->window ? left : x->window);
    const ms_status st = ms_store_acquire_batch(c->store, x->region + iu, 1, eb, err);
    if (st != MS_OK)
        return ms_fwd_with_context(err, st, "layer %d, expert %d", x->L->index, x->region[iu] - x->L->expert_region0);
    /* an expert of the chunk's last tokens is marked used as soon as it is in
     * memory, before the later layers' experts of this chunk come in: S3-FIFO
     * then moves it to its main queue instead of evicting it
     * (ms_xio_chunk_end, after the chunk, only reaches the survivors) */
    if (last_tok >= 0 && last_tok >= x->T - x->m_keep) ms_store_touch(c->store, x->region + iu, 1);
    return MS_OK;
}

void ms_xio_release(ms_fwd_ctx *c, ms_xio *x, int iu) { ms_store_release(c->store, x->region[iu]); }

/* After a chunk of T > 1 tokens (a prompt, a verify pass): mark the experts
 * of its last tokens as just used in the expert cache, oldest token first,
 * in each layer as many tokens as kept_tokens chose there. A chunk uses
 * nearly every expert of every layer in layer order, which leaves the cache
 * holding the LAST layers' experts: the next decode token then misses most
 * of its early layers, and each miss evicts an expert of a later layer it is
 * about to use. The next token shares experts with the last ones far more
 * than with the rest of the chunk (docs/perf/history.md, "Experts kept
 * after a prompt"), so those are the ones to keep. The layers already marked them
 * while the chunk ran (ms_xio_acquire), which is what keeps them under
 * S3-FIFO; this pass orders them for LRU, and reaches a few more tokens
 * (kept_tokens). Changes no bit: only which experts stay cached. */
void ms_xio_chunk_end(ms_fwd_ctx *c, ms_fwd *f, int64_t T) {
    const ms_model *m = c->m;
    const int64_t k = m->cfg.num_experts_per_token;
    const int64_t m_last = T < MS_LAST_TOKENS ? T : MS_LAST_TOKENS;   /* rows recorded per layer */
    int n = 0;
    for (int64_t back = m_last - 1; back >= 0; back--)          /* oldest token first */
        for (int il = 0; il < m->n_layer; il++) {
            const ms_layer *N = streamed_moe(c, il);
            if (!N || f->tkeep[il] <= back) continue;
            const int32_t *sel = f->tsel + ((int64_t)il * MS_LAST_TOKENS + m_last - 1 - back) * k;
            for (int64_t j = 0; j < k; j++) f->tregion[n++] = N->expert_region0 + sel[j];
        }
    if (n > 0) ms_store_touch(c->store, f->tregion, n);
}
