/* tests/test_draft.c - the draft sources and the choice rule (engine/draft.c).
 *
 *   - the choice rule: K3-like costs (a pass 100 GB, a token 25.8 GB) draft
 *     at p = 0.5 and not at p = 0.1; a pass-dominated cost drafts longer; a
 *     pass that costs nothing beyond its tokens never drafts; the chosen k is
 *     the brute-force maximum of the formula on random inputs;
 *   - the rule with a second branch: a likely runner-up beside a dear pass
 *     pays, a rare one or dear tokens do not, no costs or no branch ids give
 *     none, and the chosen length is the brute-force maximum; the drafter
 *     offers the index's runner-up continuation (chained on) beside the
 *     chain, none when tokens are dear or there is no second continuation;
 *   - chains: the longest suffix wins over a more frequent shorter one,
 *     counts give q, ties go to the newest occurrence, no match crosses a
 *     separator, the index keeps its newer half at its bound;
 *   - prompt lookup drafts a short cycle for its whole length;
 *   - the drafter: an output remembered by one session drafts for another
 *     (fixed and automatic length), not for itself while its run goes on, automatic drafting stops where it
 *     cannot pay, and a missing corpus is a usage error naming the flag;
 *   - sequences sharing a pass: each weighs the pass's cost / their number
 *     (before and after measured passes), so four draft shorter than one,
 *     at the length the choice rule gives with that share; the draft model's
 *     "more" follows the same share.
 */
#include "engine/draft.h"

#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_choose(void) {
    double p[8];
    const double GB = 1e9;
    for (int i = 0; i < 8; i++) p[i] = 0.5;
    int k = ms_draft_choose(p, 8, 100 * GB, 25.8 * GB, NULL);
    CHECK(k >= 1, "K3 costs, p 0.5: k %d, want >= 1", k);
    for (int i = 0; i < 8; i++) p[i] = 0.1;
    k = ms_draft_choose(p, 8, 100 * GB, 25.8 * GB, NULL);
    CHECK(k == 0, "K3 costs, p 0.1: k %d, want 0", k);
    for (int i = 0; i < 8; i++) p[i] = 0.7;
    const int k_k3 = ms_draft_choose(p, 8, 100 * GB, 25.8 * GB, NULL);
    const int k_pass = ms_draft_choose(p, 8, 100 * GB, 1 * GB, NULL);
    CHECK(k_pass > k_k3, "a pass-dominated cost drafts longer: %d vs %d", k_pass, k_k3);
    for (int i = 0; i < 8; i++) p[i] = 1.0;
    CHECK(ms_draft_choose(p, 8, 100, 1, NULL) == 8, "certain drafts, cheap tokens: the whole draft");
    for (int i = 0; i < 8; i++) p[i] = 0.99;
    CHECK(ms_draft_choose(p, 8, 0, 1, NULL) == 0, "no cost per pass: drafting never pays");
    CHECK(ms_draft_choose(p, 8, 0, 0, NULL) == 0, "no costs: 0");
    CHECK(ms_draft_choose(p, 0, 100, 1, NULL) == 0, "K 0: 0");
    /* the brute-force maximum (ties to the shorter draft) */
    srand(7);
    int bad = 0;
    for (int t = 0; t < 2000; t++) {
        const int K = rand() % 9;
        for (int i = 0; i < K; i++) p[i] = (double)rand() / RAND_MAX;
        const double cp = (double)(rand() % 1000), ct = 1 + (double)(rand() % 300);
        double g;
        const int kk = ms_draft_choose(p, K, cp, ct, &g);
        double best = -1;
        int arg = -1;
        for (int k2 = 0; k2 <= K; k2++) {
            double num = 1, prod = 1;
            for (int i = 1; i <= k2; i++) { prod *= p[i - 1]; num += prod; }
            const double v = num / (cp + (k2 + 1) * ct);
            if (v > best * (1 + 1e-12)) { best = v; arg = k2; }
        }
        if (kk != arg || fabs(g - best) > 1e-12 * best) bad++;
    }
    CHECK(bad == 0, "choice rule differs from the brute-force maximum in %d of 2000 cases", bad);
}

/* the rule with a second branch: it pays where the runner-up is likely and a
   token's experts cheap beside the pass, not where it is rare or tokens dear;
   the k chosen is the brute-force maximum of the formula */
static void test_branch_choose(void) {
    const double GB = 1e9;
    const double pa[3] = { 0.5, 0.8, 0.8 }, pb[3] = { 0.4, 0.8, 0.8 }, rare[3] = { 0.02, 0.8, 0.8 };
    double g, g_chain;
    ms_draft_choose(pa, 3, 100 * GB, 5 * GB, &g_chain);
    int k = ms_draft_branch_choose(pa, 3, pb, 3, 100 * GB, 5 * GB, &g);
    CHECK(k >= 1 && g > g_chain, "a likely runner-up, a dear pass: a branch of %d (gain %g vs the chain's %g)", k, g,
          g_chain);
    k = ms_draft_branch_choose(pa, 3, rare, 3, 100 * GB, 5 * GB, &g);
    CHECK(k == 0 && fabs(g - g_chain) < 1e-12 * g_chain, "a rare runner-up: no branch (k %d)", k);
    k = ms_draft_branch_choose(pa, 3, pb, 3, 100 * GB, 100 * GB, NULL);
    CHECK(k == 0, "tokens as dear as the pass, p 0.4: no branch (k %d)", k);
    CHECK(ms_draft_branch_choose(pa, 3, pb, 3, 0, 0, NULL) == 0, "no costs: no branch");
    CHECK(ms_draft_branch_choose(pa, 3, pb, 0, 100, 1, NULL) == 0, "Kb 0: no branch");
    double a[8], b[8];
    srand(11);
    int bad = 0;
    for (int t = 0; t < 2000; t++) {
        const int ka = rand() % 9, kb = rand() % 9;
        for (int i = 0; i < ka; i++) a[i] = (double)rand() / RAND_MAX;
        for (int i = 0; i < kb; i++) b[i] = (double)rand() / RAND_MAX;
        if (ka > 0 && kb > 0) b[0] *= 1 - a[0];             /* exclusive first ids */
        const double cp = (double)(rand() % 1000), ct = 1 + (double)(rand() % 300);
        const int kk = ms_draft_branch_choose(a, ka, b, kb, cp, ct, &g);
        double ea = 1, prod = 1;
        for (int i = 0; i < ka; i++) { prod *= a[i]; ea += prod; }
        double best = ea / (cp + (ka + 1) * ct), eb = 0;
        int arg = 0;
        prod = 1;
        for (int k2 = 1; k2 <= kb; k2++) {
            prod *= b[k2 - 1];
            eb += prod;
            const double v = (ea + eb) / (cp + (ka + 1 + k2) * ct);
            if (v > best * (1 + 1e-12)) { best = v; arg = k2; }
        }
        if (kk != arg || fabs(g - best) > 1e-12 * best) bad++;
    }
    CHECK(bad == 0, "branch rule differs from the brute-force maximum in %d of 2000 cases", bad);
}

/* the drafter's branch: the runner-up continuation of h in the index, chained
   on, only while it pays */
static void test_branch_drafter(void) {
    ms_drafter d;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_drafter_init(&d, 1, 100, 1, &err) == MS_OK, "drafter init");
    d.given = 1;
    /* after "1 2": 3 4 three times, 5 6 twice (the corpus) */
    const int32_t seq[] = { 1, 2, 3, 4, -1, 1, 2, 5, 6, -1, 1, 2, 3, 4, -1, 1, 2, 5, 6, -1, 1, 2, 3, 4 };
    ms_draft_index_add(&d.corpus, seq, (int64_t)(sizeof seq / sizeof *seq));
    const int64_t sid = ms_drafter_sid(&d);
    const int32_t ctx[] = { 9, 1 };
    int32_t a[8], b[8];
    double pa[8];
    int src = -1, bsrc = -1;
    const int64_t ma = ms_drafter_draft(&d, sid, ctx, 2, 2, 4, 1, NULL, a, &src, pa);
    CHECK(ma >= 1 && a[0] == 3 && src == MS_DRAFT_CORPUS && fabs(pa[0] - 0.6 * 0.5) < 1e-12,
          "the chain: m %lld, %d from %d, p %g", (long long)ma, a[0], src, pa[0]);
    int64_t mb = ms_drafter_branch(&d, sid, ctx, 2, 2, a, pa, ma, 4, b, &bsrc);
    CHECK(mb >= 1 && b[0] == 5 && bsrc == MS_DRAFT_CORPUS && (mb < 2 || b[1] == 6),
          "the branch: m %lld, %d from %d (want 5 6 from the corpus)", (long long)mb, mb ? b[0] : -1, bsrc);
    /* tokens as dear as the pass: the chain alone */
    d.c_tok0 = 100;
    CHECK(ms_drafter_branch(&d, sid, ctx, 2, 2, a, pa, ma, 4, b, &bsrc) == 0, "dear tokens: no branch");
    /* one continuation only: no runner-up */
    d.c_tok0 = 1;
    const int32_t ctx2[] = { 1, 2 };
    int64_t m = ms_drafter_draft(&d, sid, ctx2, 2, 5, 4, 1, NULL, a, &src, pa);
    CHECK(m >= 1 && a[0] == 6 && ms_drafter_branch(&d, sid, ctx2, 2, 5, a, pa, m, 4, b, &bsrc) == 0,
          "a single continuation: no branch (chain %lld)", (long long)m);
    ms_drafter_free(&d);
}

static void test_chain(void) {
    int32_t out[8];
    double q[8];
    /* h = 7 1 2 7 1 3 7 1 2 | 7: "7 1 2 7" (4 ids) is seen once, followed by 1 */
    const int32_t ctx[] = { 7, 1, 2, 7, 1, 3, 7, 1, 2 };
    int64_t m = ms_draft_chain(NULL, 0, ctx, 9, 7, 2, out, q);
    CHECK(m == 2 && out[0] == 1 && out[1] == 3 && q[0] == 1.0 && q[1] == 1.0,
          "context chain: m %lld, %d %d (want 1 3: the longest suffix, not the most frequent)", (long long)m, out[0],
          out[1]);
    /* counts: after "5 1", 2 twice and 3 once; "1 2" is followed only by separators */
    ms_draft_index x;
    CHECK(ms_draft_index_init(&x, 1000) == 0, "index init");
    const int32_t seq[] = { 5, 1, 2, -1, 5, 1, 2, -1, 5, 1, 3 };
    ms_draft_index_add(&x, seq, 11);
    const int32_t c5[] = { 5 };
    m = ms_draft_chain(&x, x.n, c5, 1, 1, 4, out, q);
    CHECK(m == 1 && out[0] == 2 && fabs(q[0] - 2.0 / 3.0) < 1e-12, "counted chain: m %lld, %d, q %g", (long long)m,
          out[0], q[0]);
    ms_draft_index_free(&x);
    /* ties: the newest */
    CHECK(ms_draft_index_init(&x, 1000) == 0, "index init");
    const int32_t tie[] = { 1, 2, -1, 1, 3 };
    ms_draft_index_add(&x, tie, 5);
    m = ms_draft_chain(&x, x.n, NULL, 0, 1, 1, out, q);
    CHECK(m == 1 && out[0] == 3 && q[0] == 0.5, "tie: %d q %g (want the newest, 3)", out[0], q[0]);
    ms_draft_index_free(&x);
    /* the bound: at most max ids, the newest kept */
    CHECK(ms_draft_index_init(&x, 16) == 0, "index init");
    for (int32_t i = 0; i < 40; i++) ms_draft_index_add(&x, &i, 1);
    CHECK(x.n <= 16 && x.tok[x.n - 1] == 39, "bounded index: %lld ids, last %d", (long long)x.n, x.tok[x.n - 1]);
    const int32_t c36[] = { 36 };
    m = ms_draft_chain(&x, x.n, c36, 1, 37, 3, out, q);
    CHECK(m == 2 && out[0] == 38 && out[1] == 39, "bounded index still chains: m %lld", (long long)m);
    ms_draft_index_free(&x);
}

static void test_lookup(void) {
    int32_t out[8];
    const int32_t tok[] = { 1, 2, 3, 1, 2 };
    const int64_t m = ms_draft_lookup(tok, 5, 3, 5, out);
    const int32_t want[] = { 1, 2, 3, 1, 2 };
    CHECK(m == 5 && !memcmp(out, want, sizeof want), "prompt lookup drafts the cycle: m %lld", (long long)m);
    CHECK(ms_draft_lookup(tok, 5, 9, 5, out) == 0, "prompt lookup: no match, no draft");
}

/* a draft model's offer: fixed length takes it whole; auto weighs it like the
   other sources (its q, its running acceptance) and asks for more only while
   a longer draft could pay */
static void test_offer(void) {
    ms_drafter d;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_drafter_init(&d, 0, 100, 1, &err) == MS_OK, "drafter init");
    const int64_t sid = ms_drafter_sid(&d);
    const int32_t ctx[] = { 5, 6, 7, 8, 9 };   /* nothing repeats: no other source drafts */
    ms_draft_offer o = { 3, { 70, 71, 72 }, { 0.9, 0.9, 0.9 } };
    int32_t out[8];
    int src = -1;
    int64_t m = ms_drafter_draft(&d, sid, ctx, 5, 10, 4, 1, &o, out, &src, NULL);
    CHECK(m == 3 && src == MS_DRAFT_MODEL && out[0] == 70 && out[2] == 72,
          "fixed length: the model's offer (m %lld, source %d)", (long long)m, src);
    m = ms_drafter_draft(&d, sid, ctx, 5, 10, 2, 1, &o, out, &src, NULL);
    CHECK(m == 2 && src == MS_DRAFT_MODEL, "fixed length: the offer cut to the length asked (m %lld)", (long long)m);
    CHECK(ms_drafter_model_more(&d, o.q, 3, 1) == 1, "fixed length: the model drafts as long as asked");
    d.auto_len = 1;
    /* a pass costs 100 bytes, a token 1: a likely draft pays, longer ones too */
    m = ms_drafter_draft(&d, sid, ctx, 5, 10, 4, 1, &o, out, &src, NULL);
    CHECK(m == 3 && src == MS_DRAFT_MODEL, "auto: a likely offer is taken whole (m %lld, source %d)", (long long)m, src);
    CHECK(ms_drafter_model_more(&d, o.q, 3, 1) == 1, "auto, pass-dominated: more may pay");
    /* every model draft rejected at once: its acceptance falls, context wins */
    for (int i = 0; i < 40; i++) {
        ms_drafter_verified(&d, MS_DRAFT_MODEL, 3, 0);
        ms_drafter_measured(&d, 1, 10, 40, 4);                     /* a token costs a pass */
        ms_drafter_model_verified(&d, 0.9);                        /* the first id, rejected */
    }
    CHECK(d.rejected[MS_DRAFT_MODEL] == 40 && d.drafted[MS_DRAFT_MODEL] == 120, "model source counted");
    m = ms_drafter_draft(&d, sid, ctx, 5, 10, 4, 1, &o, out, &src, NULL);
    CHECK(src != MS_DRAFT_MODEL, "auto: a model always wrong is not chosen (source %d, m %lld)", src, (long long)m);
    /* tokens cost as much as passes: an unlikely id cannot make a longer draft pay */
    const double low[] = { 0.05, 0.05 };
    CHECK(ms_drafter_model_more(&d, low, 2, 1) == 0, "auto: no more ids once they cannot pay");
    ms_drafter_free(&d);
}

/* the model source's acceptance is its calibration: a model whose ids held more
   often than its probabilities said drafts longer */
static void test_calibration(void) {
    ms_drafter d;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_drafter_init(&d, 1, 100, 50, &err) == MS_OK, "drafter init");
    const int64_t sid = ms_drafter_sid(&d);
    const int32_t ctx[] = { 5, 6, 7, 8, 9 };
    ms_draft_offer o = { 3, { 70, 71, 72 }, { 0.5, 0.5, 0.5 } };
    int32_t out[8];
    int src = -1;
    int64_t m = ms_drafter_draft(&d, sid, ctx, 5, 10, 3, 1, &o, out, &src, NULL);
    CHECK(m == 1 && src == MS_DRAFT_MODEL, "uncalibrated, q 0.5: one id pays (m %lld)", (long long)m);
    for (int i = 0; i < 30; i++) {
        ms_drafter_verified(&d, MS_DRAFT_MODEL, 3, 3);
        ms_drafter_measured(&d, 1, 100, 200, 4);
        ms_drafter_model_verified(&d, 1.5);
    }
    m = ms_drafter_draft(&d, sid, ctx, 5, 10, 3, 1, &o, out, &src, NULL);
    CHECK(m == 3 && src == MS_DRAFT_MODEL, "every id held at q 0.5: the whole offer (m %lld)", (long long)m);
    ms_drafter_free(&d);
}

/* a pass verifying `share` sequences' drafts reads its trunk once for all:
   each weighs c_pass / share (ms_drafter_costs), so company drafts shorter -
   the length is the choice rule's with that share, measured or not, and the
   draft model asks for more ids only while they could pay at that share */
static void test_share(void) {
    ms_drafter d;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_drafter_init(&d, 1, 100, 50, &err) == MS_OK, "drafter init");
    const int64_t sid = ms_drafter_sid(&d);
    const int32_t ctx[] = { 1, 2, 3, 1, 2, 3, 1, 2 };   /* a cycle: context q = 1, acceptance 1/2 */
    const double p[4] = { 0.5, 0.5, 0.5, 0.5 };
    int32_t out[8];
    int src = -1, seen[2] = { 0, 0 };
    for (int round = 0; round < 2; round++) {
        if (round == 1) ms_drafter_measured(&d, 2, 400, 100, 10);     /* a pass 200 bytes, a token 10 */
        for (int share = 1; share <= 8; share++) {
            double cp, ct, cp1, ct1;
            ms_drafter_costs(&d, share, &cp, &ct);
            ms_drafter_costs(&d, 1, &cp1, &ct1);
            CHECK(cp == cp1 / share && ct == ct1, "round %d, share %d: costs %g %g (alone %g %g)", round, share, cp,
                  ct, cp1, ct1);
            const int want = ms_draft_choose(p, 4, cp, ct, NULL);
            const int64_t m = ms_drafter_draft(&d, sid, ctx, 8, 3, 4, share, NULL, out, &src, NULL);
            CHECK(m == want && (m == 0 || (src == MS_DRAFT_CONTEXT && out[0] == 1)),
                  "round %d, share %d: drafted %lld, the rule says %d", round, share, (long long)m, want);
            if (share == 1) seen[round] = (int)m;
            if (share == 4)
                CHECK(m < seen[round], "round %d: 4 sequences a pass draft shorter than one (%lld vs %d)", round,
                      (long long)m, seen[round]);
        }
    }
    ms_drafter_free(&d);
    /* the draft model: q 0.9 twice, calibration 1; alone more pays, shared by 16 not */
    CHECK(ms_drafter_init(&d, 1, 100, 50, &err) == MS_OK, "drafter init");
    const double q[2] = { 0.9, 0.9 };
    CHECK(ms_drafter_model_more(&d, q, 2, 1) == 1, "draft model alone: a third id may pay");
    CHECK(ms_drafter_model_more(&d, q, 2, 16) == 0, "draft model, 16 sequences a pass: a third id cannot pay");
    ms_drafter_free(&d);
}

static void test_drafter(void) {
    ms_drafter d;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_drafter_init(&d, 0, 100, 1, &err) == MS_OK, "drafter init");
    const int64_t a = ms_drafter_sid(&d), b = ms_drafter_sid(&d);
    CHECK(a != b, "session ids differ");
    const int32_t run[] = { 40, 41, 10, 11, 12, 13, 14 };
    int64_t end_a = -1;
    ms_drafter_remember(&d, a, &end_a, run, 2, 7);
    CHECK(end_a == 7 && d.hist.n == 1 + 2 + 5, "remembered: separator, lead, output (%lld ids)", (long long)d.hist.n);
    int32_t out[8];
    int src = -1;
    const int32_t mine[] = { 10, 11 };
    int64_t m = ms_drafter_draft(&d, b, mine, 2, 12, 4, 1, NULL, out, &src, NULL);
    CHECK(m == 2 && src == MS_DRAFT_HISTORY && out[0] == 13 && out[1] == 14,
          "fixed length: another session drafts from the history (m %lld, source %d)", (long long)m, src);
    m = ms_drafter_draft(&d, a, mine, 2, 12, 4, 1, NULL, out, &src, NULL);
    CHECK(m == 0, "a session's own current run is not drafted from the history (m %lld)", (long long)m);
    d.auto_len = 1;
    m = ms_drafter_draft(&d, b, mine, 2, 12, 4, 1, NULL, out, &src, NULL);
    CHECK(m >= 1 && src == MS_DRAFT_HISTORY, "auto, pass-dominated: drafts (m %lld)", (long long)m);
    /* measured: a pass reads nothing beyond its tokens: no draft pays */
    ms_drafter_verified(&d, MS_DRAFT_CONTEXT, 0, 0);
    ms_drafter_measured(&d, 1, 0, 1000, 1);
    m = ms_drafter_draft(&d, b, mine, 2, 12, 4, 1, NULL, out, &src, NULL);
    CHECK(m == 0, "auto, measured token-only costs: no draft (m %lld)", (long long)m);
    ms_drafter_free(&d);
    test_offer();
    test_calibration();
    test_share();
    ms_err_clear(&err);
    const ms_status st = ms_draft_corpus_check("/nonexistent/corpus.txt", &err);
    CHECK(st == MS_E_USAGE && strstr(err.msg, "--draft-corpus") && strstr(err.msg, "/nonexistent/corpus.txt"),
          "missing corpus: %d '%s'", (int)st, err.msg);
}

int main(void) {
    test_choose();
    test_branch_choose();
    test_branch_drafter();
    test_chain();
    test_lookup();
    test_drafter();
    return CHECK_DONE("test_draft");
}
