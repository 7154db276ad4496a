/* engine/draft_tree.c - a second branch beside a decode pass's draft
 * (ms_engine_params.draft_tree, `--draft-tree 1`).
 *
 * Owns: the engine's branch session (opened with the engine, no draft model
 *   state of its own); per pass, whether a second branch is drafted and its
 *   copy of the session; the pick between the two branches, the exchange
 *   that makes the winning branch the session, and the branch's counters.
 * Idea: a chain drafts the most frequent continuation a1 of h = ids +
 *   pending; when the counted index also saw another one, b1, a pass can
 *   verify both: A = [pending, a1, ...] in the session and B = [pending, b1,
 *   ...] in a copy of it made just before, two segments of ONE pass over the
 *   weights (ms_forward_batch: the trunk is read once, each expert once, so
 *   the repeated pending costs no expert bytes). Both first rows are the
 *   logits after h from the same state and token, so the same bits
 *   (docs/DETERMINISM.md): the picker sees row 0 once and picks x. x = a1:
 *   A's rows go on as a chain's; x = b1: the session and the copy exchange
 *   their buffers (state, ids, logits, rollback record, rows, draft), so the
 *   session IS branch B, and B's rows go on; otherwise x is emitted and A is
 *   rolled back as a chain is. The other branch is dropped unread.
 * Invariants: the picker is called exactly as a plain loop calls it (row 0
 *   once, then only rows of the branch whose first id it picked); the
 *   session keeps its identity (history run, draft model state, counters,
 *   error); a branch that is never picked changes no bit. The running
 *   acceptance counts branch B only on passes whose first pick was not a1
 *   (B's first id is verified only then, as a chain's later ids are only
 *   once the earlier ones held).
 * Does not: choose whether a branch pays (engine/draft.c,
 *   ms_drafter_branch), feed or roll back (engine/engine.c), serve several
 *   sessions in a pass (ms_sessions_decode with k > 1 keeps chains), run in
 *   a pipeline (refused at open).
 */
#include "engine/engine_int.h"

#include <stdio.h>
#include <string.h>

ms_status ms_tree_open(ms_engine *e, ms_err *err) {
    ms_session *b = NULL;
    const ms_status st = ms_session_open(e, &b);
    if (st != MS_OK) return ms_err_set(err, st, "the second branch's session: %s", e->error);
    ms_dm_sess_close(b->dm);                /* drafts are the session's; the branch only verifies */
    b->dm = NULL;
    e->tree_b = b;
    return MS_OK;
}

void ms_tree_close(ms_engine *e) {
    ms_session_close(e->tree_b);
    e->tree_b = NULL;
}

int ms_tree_branch(ms_session *s, int32_t pending, int n_draft) {
    ms_engine *e = s->e;
    ms_session *b = e->tree_b;
    if (s->ver_m < 1 || !e->draft || !e->draft->auto_len || s->sticky != MS_OK) return 0;
    /* both segments in one pass of at most prefill_chunk tokens, within the context */
    int64_t want = n_draft < s->max_draft ? n_draft : s->max_draft;
    if (want > e->p.prefill_chunk - (s->ver_m + 1) - 1) want = e->p.prefill_chunk - (s->ver_m + 1) - 1;
    if (want > s->st.max_ctx - s->st.n_past - 1) want = s->st.max_ctx - s->st.n_past - 1;
    b->ver_m = 0;
    if (want < 1) return 0;
    b->ver_m = ms_drafter_branch(e->draft, s->draft_sid, s->tokens, s->st.n_past, pending, s->ver_ids + 1, s->ver_p,
                                 s->ver_m, want, b->ver_ids + 1, &b->ver_src);
    if (b->ver_m == 0) return 0;
    /* the copy: the state after h (no pipeline: nothing held elsewhere) */
    ms_state_copy(&b->st, &s->st, &e->model);
    memcpy(b->tokens, s->tokens, (size_t)s->st.n_past * sizeof *b->tokens);
    b->rb.n_rec = 0;
    b->has_logits = 0;
    b->sticky = MS_OK;
    b->error[0] = '\0';
    return 1;
}

/* what a session keeps whatever branch won: its identity, its draft model
   state and offer, its counters and its error */
static void keep_own(ms_session *x, const ms_session *was) {
    x->prompt_progress = was->prompt_progress;
    x->draft_sid = was->draft_sid;
    x->draft_end = was->draft_end;
    x->dm = was->dm;
    x->ver_offer = was->ver_offer;
    x->dec = was->dec;
    x->sticky = was->sticky;
    memcpy(x->error, was->error, sizeof x->error);
}

/* s becomes the branch b held and b what s held: every buffer is exchanged
   (state, ids, logits, rollback record, rows, draft), nothing copied */
static void exchange(ms_session *s, ms_session *b) {
    const ms_session sa = *s, sb = *b;
    *s = sb;
    *b = sa;
    keep_own(s, &sa);
    keep_own(b, &sb);
}

ms_status ms_tree_verify(ms_session *s, ms_pick_fn pick, void *user, int32_t *out, int64_t *n_out) {
    ms_engine *e = s->e;
    ms_session *b = e->tree_b;
    const int64_t V = e->cfg.vocab_size, n0 = s->st.n_past - (s->ver_m + 1), mb = b->ver_m;
    const int32_t a1 = s->ver_ids[1], b1 = b->ver_ids[1];
    const int src_a = s->ver_src, src_b = b->ver_src;
    const int64_t ma = s->ver_m;
    /* row 0, once (a non-finite one: ms_decode_verify says so, as a plain loop would) */
    int stop = 0, pre = 0;
    if (ms_first_nonfinite(s->ver_logits, V) < 0) {
        out[0] = pick(user, s->ver_logits, s->tokens, n0 + 1, &stop);
        pre = 1;
    }
    const int took_b = pre && !stop && out[0] == b1;
    if (took_b) exchange(s, b);
    const ms_status st = ms_decode_verify(s, pick, user, out, n_out, pre, stop);
    /* the branch dropped (now in b): its drafted ids verified, none kept */
    e->stats.spec_drafted += b->ver_m;
    e->stats.spec_src_drafted[b->ver_src] += b->ver_m;
    s->dec.drafted[b->ver_src] += b->ver_m;
    const int64_t kept_b = took_b ? *n_out - 1 : 0;
    e->stats.spec_tree_passes++;
    e->stats.spec_tree_drafted += mb;
    e->stats.spec_tree_accepted += kept_b;
    s->dec.tree_passes++;
    s->dec.tree_drafted += mb;
    s->dec.tree_accepted += kept_b;
    if (took_b) {
        ms_drafter_verified(e->draft, src_a, ma, 0);
        if (src_a == MS_DRAFT_MODEL) ms_drafter_model_verified(e->draft, s->ver_offer.q[0]);
    } else if (pre && out[0] != a1) {
        ms_drafter_verified(e->draft, src_b, mb, 0);
    }
    b->rb.n_rec = 0;
    return st;
}
