/* tests/test_mspec.c - speculation for several sequences in one pass
 * (ms_sessions_decode).
 *
 * The reference: each of four sequences (different prompts, different
 * lengths) decoded alone by the plain loop - ms_session_feed one token at a
 * time, everything resident, one thread - with its ids, the logits row of
 * every pick and its saved session. Then k = 1..4 of them decoded together
 * by ms_sessions_decode with drafts, in a rotating order, some joining a few
 * steps late (their first call only picks) and each stopping at its own
 * limit (the company shrinks): every session's ids, every row its picker was
 * handed (memcmp), its final logits and its saved session bytes equal the
 * reference. Over:
 *   - $MS_TESTDATA/a and oss_a (random weights: greedy, seeded sampling with
 *     a repetition penalty, an argmax over three ids that makes drafts hold)
 *     and models/k3-tiny (greedy and seeded), resident and at the smallest
 *     plan (--ram min), 1 and 2 threads, --speculate 8 (cut to the pass: 4
 *     sequences draft at most 7 each) and auto;
 *   - a chunk of 9 (4 sequences draft 1 each) and a chunk of 2 with
 *     max_draft 1 (three or four sessions: no room for a draft, passes of
 *     two whole sessions);
 *   - always wrong: a with the draft model draft_a0 (its greedy id is 0, which
 *     the three-id argmax never takes), every draft rejected;
 *   - the counts: one pass per call while the sessions fit the chunk, each
 *     session's ms_session_decode_counts (tokens, passes, drafted and
 *     accepted by source) summing to the engine's ms_stats, drafts accepted
 *     where the picker makes them hold and rejected somewhere;
 *   - usage: a session given twice, one of another engine, a pending id past
 *     the context, no logits to pick from: refused, nothing fed, every
 *     session's error names the session.
 */
#include "moestream.h"

#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NSEQ = 4, MAXG = 32, MAXP = 32 };

static const char *build_dir(void) {
    const char *b = getenv("MS_BUILD");
    return b ? b : "build";
}

typedef struct econf {
    int64_t ram, chunk;
    int threads, max_draft, draft_auto;
    const char *draft_model;
} econf;

static ms_engine *open_engine(const char *dir, const econf *c) {
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.ram_bytes = c->ram;
    p.n_threads = c->threads;
    p.prefill_chunk = c->chunk;
    p.max_context = 256;
    p.n_seq = NSEQ;
    p.max_draft = c->max_draft;
    p.draft_auto = c->draft_auto;
    p.draft_model = c->draft_model;
    p.io_backend = "pread";     /* page-cached reads keep the streamed runs fast (no bit depends on it) */
    ms_engine *e = NULL;
    char msg[512];
    const ms_status st = ms_engine_open(&p, &e, msg, sizeof msg);
    CHECK(st == MS_OK, "open %s: %s", dir, msg);
    return st == MS_OK ? e : NULL;
}

/* ---- the picker ------------------------------------------------------------------- */

enum { GREEDY, SEEDED, FEW, N_PICKERS };
static const char *const picker_name[] = { "greedy", "seeded", "three-id argmax" };
static const int32_t few[] = { 3, 17, 33 };     /* never 0: draft_a0's drafts are always wrong */

typedef struct picker {
    int kind;
    ms_sampler *smp;
    int64_t V, n, max;
    int32_t gen[MAXG];
    float *rows;                /* [max][V]: every row handed to the picker */
    int stopped;
} picker;

static int32_t pick(void *user, const float *logits, const int32_t *hist, int64_t n_hist, int *stop) {
    picker *p = user;
    int32_t id;
    if (p->kind == SEEDED) {
        id = ms_sampler_next(p->smp, logits, hist, n_hist);
    } else if (p->kind == FEW) {
        id = few[0];
        for (int i = 1; i < 3; i++)
            if (logits[few[i]] > logits[id]) id = few[i];
    } else {
        id = ms_argmax(logits, p->V);
    }
    if (p->n < p->max) memcpy(p->rows + p->n * p->V, logits, (size_t)p->V * sizeof(float));
    if (p->n < MAXG) p->gen[p->n] = id;
    p->n++;
    if (p->n >= p->max) *stop = p->stopped = 1;
    return id;
}

static void picker_open(picker *p, int kind, int64_t V, int64_t max, int seq) {
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->V = V;
    p->max = max;
    p->rows = malloc((size_t)(max * V) * sizeof(float));
    if (kind == SEEDED) {
        ms_sample_params sp = ms_sample_default_params();
        sp.temperature = 0.8f;
        sp.top_k = 20;
        sp.repeat_penalty = 1.1f;
        sp.repeat_last_n = 16;
        sp.seed = 1234 + (uint64_t)seq;
        char msg[128];
        p->smp = ms_sampler_open(&sp, V, msg, sizeof msg);
    }
}

static void picker_close(picker *p) {
    ms_sampler_close(p->smp);
    free(p->rows);
}

/* ---- the sequences ---------------------------------------------------------------- */

typedef struct seqs {
    const char *dir;
    int32_t prompt[NSEQ][MAXP];
    int64_t n_prompt[NSEQ];
    int64_t n_gen[NSEQ];
    int64_t V;
    /* the reference, per picker kind: ids, rows, final logits, saved session */
    picker ref[N_PICKERS][NSEQ];
    float *ref_logits[N_PICKERS][NSEQ];
    char ref_file[N_PICKERS][NSEQ][512];
} seqs;

static const int64_t GEN[NSEQ] = { 20, 13, 26, 7 };

/* the plain loop of a front end before speculation: pick, stop, feed one */
static void reference(seqs *q, int kind) {
    const econf c = { 0, 0, 1, 0, 0, NULL };
    ms_engine *e = open_engine(q->dir, &c);
    if (!e) return;
    for (int j = 0; j < NSEQ; j++) {
        picker *p = &q->ref[kind][j];
        picker_open(p, kind, q->V, q->n_gen[j], j);
        ms_session *s;
        ms_session_open(e, &s);
        CHECK(ms_session_feed(s, q->prompt[j], q->n_prompt[j], NULL) == MS_OK, "reference prompt");
        while (!p->stopped) {
            int64_t nh;
            const int32_t *h = ms_session_tokens(s, &nh);
            int stop = 0;
            int32_t id = pick(p, ms_session_logits(s), h, nh, &stop);
            if (stop) break;
            if (ms_session_feed(s, &id, 1, NULL) != MS_OK) { CHECK(0, "reference feed"); break; }
        }
        q->ref_logits[kind][j] = malloc((size_t)q->V * sizeof(float));
        memcpy(q->ref_logits[kind][j], ms_session_logits(s), (size_t)q->V * sizeof(float));
        snprintf(q->ref_file[kind][j], sizeof q->ref_file[kind][j], "%s/test_mspec_ref_%d_%d.sess", build_dir(), kind, j);
        CHECK(ms_session_save(s, q->ref_file[kind][j]) == MS_OK, "reference save");
        ms_session_close(s);
    }
    ms_engine_close(e);
}

typedef struct tally {
    int64_t drafted, accepted, calls, one_pass_calls, model_drafted, model_accepted;
} tally;

/* k sequences (order: seq[0..k)) decoded together with drafts of up to K ids
 * (0: as many as max_draft), the sequence in place i joining at call
 * join[i]; everything checked against the reference of picker `kind`. */
static void together(ms_engine *e, seqs *q, int kind, int k, const int *seq, const int *join, int K, int clamp,
                     const char *what, tally *t) {
    ms_session *ss[NSEQ];
    picker pk[NSEQ];
    int32_t pending[NSEQ], outbuf[NSEQ][MAXG + 1];
    ms_decode_counts c0[NSEQ];
    int64_t fed_calls[NSEQ] = { 0 };
    ms_model_info info;
    ms_engine_info(e, &info);
    const int64_t V = q->V;
    for (int i = 0; i < k; i++) {
        ms_session_open(e, &ss[i]);
        picker_open(&pk[i], kind, V, q->n_gen[seq[i]], seq[i]);
        pending[i] = -1;
        ms_session_decode_counts(ss[i], &c0[i]);
    }
    /* the prompts together (one ms_sessions_feed) */
    const int32_t *ids[NSEQ];
    int64_t n[NSEQ];
    for (int i = 0; i < k; i++) { ids[i] = q->prompt[seq[i]]; n[i] = q->n_prompt[seq[i]]; }
    CHECK(ms_sessions_feed(ss, k, ids, n) == MS_OK, "%s: prompts", what);
    ms_stats a, b;
    ms_engine_stats(e, &a);
    int failed = 0;
    for (int call = 0; !failed; call++) {
        ms_session *cs[NSEQ];
        int32_t cp[NSEQ], *co[NSEQ];
        int cd[NSEQ], who[NSEQ], m = 0, feeding = 0;
        void *cu[NSEQ];
        int64_t cn[NSEQ];
        for (int i = 0; i < k; i++) {
            if (pk[i].stopped || call < join[i]) continue;
            const int64_t room = pk[i].max - pk[i].n - 1;
            cs[m] = ss[i];
            cp[m] = pending[i];
            cd[m] = clamp && room < K ? (int)room : K;
            cu[m] = &pk[i];
            co[m] = outbuf[i];
            feeding += pending[i] >= 0;
            fed_calls[i] += pending[i] >= 0;
            who[m++] = i;
        }
        if (m == 0) {
            int all = 1;
            for (int i = 0; i < k; i++) all &= pk[i].stopped;
            if (all) break;
            continue;
        }
        ms_stats sa, sb;
        ms_engine_stats(e, &sa);
        const ms_status st = ms_sessions_decode(cs, m, cp, cd, pick, cu, co, cn);
        ms_engine_stats(e, &sb);
        if (st != MS_OK) {
            CHECK(0, "%s: call %d: %s: %s", what, call, ms_status_name(st), ms_session_error(cs[0]));
            failed = 1;
            break;
        }
        if (feeding > 0) {
            t->calls++;
            t->one_pass_calls += sb.spec_passes - sa.spec_passes == 1;
        }
        for (int x = 0; x < m; x++) {
            const int i = who[x];
            CHECK(cn[x] >= 1, "%s: call %d: nothing picked", what, call);
            if (cn[x] >= 1) pending[i] = outbuf[i][cn[x] - 1];
        }
    }
    ms_engine_stats(e, &b);
    int64_t drafted = 0, accepted = 0, passes_ok = 1;
    for (int i = 0; i < k && !failed; i++) {
        const int j = seq[i];
        const picker *r = &q->ref[kind][j];
        char w[700];
        snprintf(w, sizeof w, "%s: sequence %d (place %d of %d)", what, j, i, k);
        CHECK(pk[i].n == r->n && !memcmp(pk[i].gen, r->gen, (size_t)r->n * sizeof *r->gen), "%s: ids differ", w);
        int rows = pk[i].n == r->n;
        for (int64_t g = 0; rows && g < r->n; g++)
            rows = !memcmp(pk[i].rows + g * V, r->rows + g * V, (size_t)V * sizeof(float));
        CHECK(rows, "%s: a row handed to the picker differs", w);
        const float *lg = ms_session_logits(ss[i]);
        CHECK(lg && !memcmp(lg, q->ref_logits[kind][j], (size_t)V * sizeof(float)), "%s: final logits differ", w);
        char path[600];
        snprintf(path, sizeof path, "%s/test_mspec_got.sess", build_dir());
        CHECK(ms_session_save(ss[i], path) == MS_OK && check_same_file(path, q->ref_file[kind][j]), "%s: saved sessions differ",
              w);
        remove(path);
        ms_decode_counts c1;
        ms_session_decode_counts(ss[i], &c1);
        CHECK(c1.tokens - c0[i].tokens == r->n - 1 && c1.passes - c0[i].passes == fed_calls[i],
              "%s: counts: %lld tokens in %lld passes, want %lld in %lld", w, (long long)(c1.tokens - c0[i].tokens),
              (long long)(c1.passes - c0[i].passes), (long long)(r->n - 1), (long long)fed_calls[i]);
        for (int s = 0; s < MS_DRAFT_SOURCES; s++) {
            drafted += c1.drafted[s] - c0[i].drafted[s];
            accepted += c1.accepted[s] - c0[i].accepted[s];
        }
        t->model_drafted += c1.drafted[MS_DRAFT_MODEL] - c0[i].drafted[MS_DRAFT_MODEL];
        t->model_accepted += c1.accepted[MS_DRAFT_MODEL] - c0[i].accepted[MS_DRAFT_MODEL];
    }
    if (!failed) {
        passes_ok = b.spec_drafted - a.spec_drafted == drafted && b.spec_accepted - a.spec_accepted == accepted;
        CHECK(passes_ok, "%s: the sessions' drafted / accepted (%lld / %lld) are not the engine's (%lld / %lld)", what,
              (long long)drafted, (long long)accepted, (long long)(b.spec_drafted - a.spec_drafted),
              (long long)(b.spec_accepted - a.spec_accepted));
        int64_t sum = 0;
        for (int i = 0; i < k; i++) sum += pk[i].n - 1;
        CHECK(b.n_tokens_decode - a.n_tokens_decode == sum, "%s: decode tokens %lld, want %lld", what,
              (long long)(b.n_tokens_decode - a.n_tokens_decode), (long long)sum);
    }
    t->drafted += drafted;
    t->accepted += accepted;
    for (int i = 0; i < k; i++) {
        ms_session_close(ss[i]);
        picker_close(&pk[i]);
    }
}

/* k = 1..4 under one engine, orders rotating with `rot`, joins staggered when `stagger` */
static void all_k(ms_engine *e, seqs *q, int kind, int K, int rot, int stagger, const char *what, tally *t) {
    for (int k = 1; k <= NSEQ; k++) {
        int seq[NSEQ], join[NSEQ];
        for (int i = 0; i < k; i++) {
            seq[i] = (i + rot + k) % NSEQ;
            join[i] = stagger ? i : 0;
        }
        char w[600];
        snprintf(w, sizeof w, "%s, k %d", what, k);
        together(e, q, kind, k, seq, join, K, (rot + k) % 2, w, t);
    }
}

static void check_model(seqs *q, int n_kinds, int want_accept) {
    for (int kind = 0; kind < n_kinds; kind++) reference(q, kind);
    static const int64_t rams[] = { 0, MS_RAM_MIN };
    tally tot = { 0 };
    int cfg = 0;
    for (int ir = 0; ir < 2; ir++)
        for (int threads = 1; threads <= 2; threads++)
            for (int au = 0; au < 2; au++) {
                const econf c = { rams[ir], 0, threads, 8, au, NULL };
                ms_engine *e = open_engine(q->dir, &c);
                if (!e) continue;
                for (int kind = 0; kind < n_kinds; kind++, cfg++) {
                    char w[512];
                    snprintf(w, sizeof w, "%s %s, %d threads, %s, %s", q->dir, ir ? "--ram min" : "resident", threads,
                             au ? "auto" : "--speculate 8", picker_name[kind]);
                    tally t = { 0 };
                    all_k(e, q, kind, 8, cfg, cfg % 2, w, &t);
                    CHECK(t.one_pass_calls == t.calls, "%s: %lld of %lld calls made more than one pass", w,
                          (long long)(t.calls - t.one_pass_calls), (long long)t.calls);
                    /* under auto, oss_a's resident passes cost about one token's compute per
                       fed token: drafting may not pay, and auto may decline */
                    const int may_decline = au && ir == 0 && strstr(q->dir, "oss_");
                    if (kind == want_accept && !may_decline) CHECK(t.accepted > 0, "%s: no draft accepted", w);
                    tot.drafted += t.drafted;
                    tot.accepted += t.accepted;
                    if (threads == 1 && ir == 1)
                        printf("%s: drafted %lld, accepted %lld\n", w, (long long)t.drafted, (long long)t.accepted);
                }
                ms_engine_close(e);
            }
    CHECK(tot.accepted > 0 && tot.accepted < tot.drafted, "%s: drafts accepted %lld of %lld (some of each wanted)",
          q->dir, (long long)tot.accepted, (long long)tot.drafted);
    /* small chunks: 9 (four sessions draft one id each), and 2 with max_draft 1 (no
       room for a draft: passes of two whole sessions) */
    for (int small = 0; small < 2; small++) {
        const econf c = { MS_RAM_MIN, small ? 2 : 9, 2, small ? 1 : 8, 0, NULL };
        ms_engine *e = open_engine(q->dir, &c);
        if (!e) continue;
        char w[512];
        snprintf(w, sizeof w, "%s --ram min, chunk %d", q->dir, small ? 2 : 9);
        tally t = { 0 };
        all_k(e, q, n_kinds - 1, 8, small, 1, w, &t);
        /* chunk 2: three or four sessions take two passes a call */
        if (small) CHECK(t.one_pass_calls < t.calls, "%s: all %lld calls in one pass", w, (long long)t.calls);
        else CHECK(t.drafted > 0 && t.one_pass_calls == t.calls, "%s: drafted %lld, %lld of %lld calls in one pass", w,
                   (long long)t.drafted, (long long)t.one_pass_calls, (long long)t.calls);
        ms_engine_close(e);
    }
}

/* always wrong: draft_a0 drafts id 0, which the three-id argmax never picks */
static void check_wrong(seqs *q, const char *draft) {
    for (int threads = 1; threads <= 2; threads++) {
        const econf c = { threads == 2 ? MS_RAM_MIN : 0, 0, threads, 4, 0, draft };
        ms_engine *e = open_engine(q->dir, &c);
        if (!e) continue;
        char w[512];
        snprintf(w, sizeof w, "%.200s with the draft model %.200s, %d threads", q->dir, draft, threads);
        tally t = { 0 };
        all_k(e, q, FEW, 4, threads, threads - 1, w, &t);
        CHECK(t.model_drafted > 0 && t.model_accepted == 0 && t.accepted == 0,
              "%s: the draft model's drafts: %lld, accepted %lld (always wrong)", w, (long long)t.model_drafted,
              (long long)t.model_accepted);
        ms_engine_close(e);
    }
}

/* bad calls feed nothing and say why in every session */
static void check_usage(seqs *q) {
    const econf c = { 0, 0, 1, 4, 0, NULL };
    ms_engine *e = open_engine(q->dir, &c), *e2 = open_engine(q->dir, &c);
    if (!e || !e2) { ms_engine_close(e); ms_engine_close(e2); return; }
    ms_session *a, *b, *x;
    ms_session_open(e, &a);
    ms_session_open(e, &b);
    ms_session_open(e2, &x);
    ms_session_feed(a, q->prompt[0], q->n_prompt[0], NULL);
    ms_session_feed(x, q->prompt[1], q->n_prompt[1], NULL);
    picker pa, pb;
    picker_open(&pa, GREEDY, q->V, 8, 0);
    picker_open(&pb, GREEDY, q->V, 8, 1);
    int32_t oa[8], ob[8], *out[2] = { oa, ob };
    void *user[2] = { &pa, &pb };
    int nd[2] = { 4, 4 };
    int64_t no[2];
    const int64_t na = ms_session_n_past(a);
    ms_session *twice[2] = { a, a }, *other[2] = { a, x }, *nolog[2] = { a, b };
    int32_t p1[2] = { 5, 6 }, pn[2] = { 5, -1 }, pbad[2] = { 5, (int32_t)q->V };
    CHECK(ms_sessions_decode(twice, 2, p1, nd, pick, user, out, no) == MS_E_USAGE &&
          strstr(ms_session_error(a), "session 1") && strstr(ms_session_error(a), "twice"),
          "a session given twice: '%s'", ms_session_error(a));
    CHECK(ms_sessions_decode(other, 2, p1, nd, pick, user, out, no) == MS_E_USAGE &&
          strstr(ms_session_error(a), "engine"), "a session of another engine: '%s'", ms_session_error(a));
    CHECK(ms_sessions_decode(nolog, 2, pn, nd, pick, user, out, no) == MS_E_USAGE &&
          strstr(ms_session_error(b), "session 1") && strstr(ms_session_error(b), "no logits"),
          "a session with no logits to pick from: '%s'", ms_session_error(b));
    ms_session_feed(b, q->prompt[2], q->n_prompt[2], NULL);
    CHECK(ms_sessions_decode(nolog, 2, pbad, nd, pick, user, out, no) == MS_E_USAGE &&
          strstr(ms_session_error(a), "out of range"), "an id out of range: '%s'", ms_session_error(a));
    CHECK(pa.n == 0 && pb.n == 0 && ms_session_n_past(a) == na, "refused calls picked or fed nothing");
    /* a full context: the pending id does not fit */
    int32_t fill[256];
    for (int i = 0; i < 256; i++) fill[i] = (int32_t)(i % q->V);
    ms_session_reset(b);
    ms_session_feed(b, fill, 256, NULL);
    CHECK(ms_sessions_decode(nolog, 2, p1, nd, pick, user, out, no) == MS_E_CONTEXT &&
          strstr(ms_session_error(a), "context full"), "a full context: '%s'", ms_session_error(a));
    CHECK(pa.n == 0 && ms_session_n_past(a) == na, "the refused call fed nothing");
    picker_close(&pa);
    picker_close(&pb);
    ms_session_close(a);
    ms_session_close(b);
    ms_session_close(x);
    ms_engine_close(e);
    ms_engine_close(e2);
}

static void free_seqs(seqs *q) {
    for (int kind = 0; kind < N_PICKERS; kind++)
        for (int j = 0; j < NSEQ; j++) {
            picker_close(&q->ref[kind][j]);
            free(q->ref_logits[kind][j]);
            if (q->ref_file[kind][j][0]) remove(q->ref_file[kind][j]);
        }
}

/* repeated patterns, one prompt each: drafts come from the prompt at once */
static void ids_seqs(seqs *q, const char *dir) {
    static const int32_t P[NSEQ][14] = {
        { 17, 200, 33, 99, 3, 17, 200, 33, 99, 3, 17, 200, 33, 0 },
        { 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 0 },
        { 250, 11, 0, 77, 31, 250, 11, 0, 77, 0 },
        { 1, 2, 3, 1, 2, 3, 1, 2, 0 },
    };
    static const int64_t N[NSEQ] = { 13, 10, 9, 8 };
    memset(q, 0, sizeof *q);
    q->dir = dir;
    const econf c = { 0, 0, 1, 0, 0, NULL };
    ms_engine *e = open_engine(dir, &c);
    ms_model_info info;
    if (e) {
        ms_engine_info(e, &info);
        q->V = info.n_vocab;
        ms_engine_close(e);
    }
    for (int j = 0; j < NSEQ; j++) {
        for (int64_t i = 0; i < N[j]; i++) q->prompt[j][i] = (int32_t)(P[j][i] % q->V);
        q->n_prompt[j] = N[j];
        q->n_gen[j] = GEN[j];
    }
}

int main(void) {
    const char *td = getenv("MS_TESTDATA");
    char a[4096], oss[4096], a0[4096];
    snprintf(a, sizeof a, "%s/a", td ? td : "build/testdata");
    snprintf(oss, sizeof oss, "%s/oss_a", td ? td : "build/testdata");
    snprintf(a0, sizeof a0, "%s/draft_a0", td ? td : "build/testdata");
    seqs *q = malloc(sizeof *q);
    ids_seqs(q, a);
    check_model(q, N_PICKERS, FEW);
    check_wrong(q, a0);
    check_usage(q);
    free_seqs(q);
    /* gpt-oss: keys and values roll back by position; oss_a's window of 4 is crossed by drafts */
    ids_seqs(q, oss);
    check_model(q, N_PICKERS, FEW);
    free_seqs(q);
    /* the bundled model: text that repeats itself, greedy and seeded */
    memset(q, 0, sizeof *q);
    q->dir = "models/k3-tiny";
    const econf c = { 0, 0, 1, 0, 0, NULL };
    ms_engine *e = open_engine(q->dir, &c);
    if (e) {
        static const char *const text[NSEQ] = {
            "And the LORD spake unto Moses, saying, And the LORD spake unto",
            "In the beginning God created the heaven and the earth. In the beginning",
            "And it came to pass, when men began to multiply, And it came to pass",
            "Blessed is the man that walketh not. Blessed is the man",
        };
        ms_model_info info;
        ms_engine_info(e, &info);
        q->V = info.n_vocab;
        int ok = 1;
        for (int j = 0; j < NSEQ; j++) {
            int32_t *ids = NULL;
            int64_t n = 0;
            ok &= ms_tokenize(e, text[j], strlen(text[j]), &ids, &n) == MS_OK && n <= MAXP;
            if (ok) memcpy(q->prompt[j], ids, (size_t)n * sizeof *ids);
            q->n_prompt[j] = n;
            q->n_gen[j] = GEN[j];
            free(ids);
        }
        ms_engine_close(e);
        CHECK(ok, "k3-tiny prompts");
        if (ok) check_model(q, SEEDED + 1, GREEDY);
        free_seqs(q);
    }
    free(q);
    return CHECK_DONE("test_mspec");
}
