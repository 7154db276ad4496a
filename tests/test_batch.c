/* tests/test_batch.c - several sequences fed together (ms_sessions_feed):
 * each one's logits bits equal those it gets alone, at every budget, chunk
 * and thread count; a step of k one-token sequences reads a streamed trunk
 * once; bad calls feed nothing.
 *
 * For tiny models a, b and c (K3) and oss_b (gpt-oss) of $MS_TESTDATA:
 *   - the reference: each of three sequences fed alone, one token per feed,
 *     everything resident; its logits after every position;
 *   - a schedule of ms_sessions_feed calls that mixes prompts and one-token
 *     steps, sequences joining late and finishing early, passes that split a
 *     session's tokens (chunks of 2, 5 and 32 tokens), at the budget floor,
 *     half the trunk pinned, and everything resident, 1 and 2 threads: after
 *     every call, each fed session's logits are memcmp-equal to its
 *     reference row, and its n_past and ids are right;
 *   - at the floor, a step of three one-token sequences reads exactly the
 *     trunk bytes of one one-token feed (the trunk is streamed once per pass);
 *   - ms_session_copy: a session forked mid-sequence goes on exactly as the
 *     original (fed together and apart);
 *   - usage: a session given twice, no tokens, an id out of range, a full
 *     context, a session of another engine: refused, nothing fed; the plan
 *     counts n_seq sessions' state and one scratch.
 */
#include "moestream.h"

#include "check.h"
#include "engine/engine_int.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

enum { NSEQ = 3, MAXN = 24 };

static const int32_t SEQ[NSEQ][MAXN] = {
    { 3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84, 19 },
    { 7, 1, 200, 45, 45, 45, 13, 99, 120, 5, 64, 33, 2, 18 },
    { 250, 11, 0, 77, 31, 31, 8, 140, 66, 9, 101 },
};
static const int64_t SEQ_N[NSEQ] = { 20, 14, 11 };

typedef struct cfg {
    int64_t trunk, expert, chunk;
    int threads;
} cfg;

static ms_status open_engine(const char *dir, const cfg *c, int n_seq, ms_engine **e) {
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.n_threads = c->threads;
    p.trunk_bytes = c->trunk;
    p.expert_bytes = c->expert;
    p.prefill_chunk = c->chunk;
    p.n_seq = n_seq;
    p.max_context = 64;
    char msg[512];
    ms_status st = ms_engine_open(&p, e, msg, sizeof msg);
    if (st != MS_OK) fprintf(stderr, "open %s: %s\n", dir, msg);
    return st;
}

/* ref[s][i * V ..] = sequence s's logits after its token i, fed alone one token at a time */
static float *reference(const char *dir, int64_t *V) {
    const cfg c = { 0, 0, 0, 2 };
    ms_engine *e;
    if (open_engine(dir, &c, 1, &e) != MS_OK) return NULL;
    ms_model_info info;
    ms_engine_info(e, &info);
    *V = info.n_vocab;
    float *ref = malloc((size_t)(NSEQ * MAXN * *V) * sizeof *ref);
    for (int s = 0; s < NSEQ; s++) {
        ms_session *ses;
        if (ms_session_open(e, &ses) != MS_OK) { free(ref); ms_engine_close(e); return NULL; }
        for (int64_t i = 0; i < SEQ_N[s]; i++) {
            if (ms_session_feed(ses, &SEQ[s][i], 1, NULL) != MS_OK) {
                fprintf(stderr, "reference feed: %s\n", ms_session_error(ses));
                free(ref);
                ms_session_close(ses);
                ms_engine_close(e);
                return NULL;
            }
            memcpy(ref + ((int64_t)s * MAXN + i) * *V, ms_session_logits(ses), (size_t)*V * sizeof *ref);
        }
        ms_session_close(ses);
    }
    ms_engine_close(e);
    return ref;
}

/* The schedule: per call, how many tokens each sequence feeds (0 = not in
 * the call). Prompts of 6 and 3, then one-token steps; sequence 2 joins at
 * call 3 with a prompt of 4; sequence 1 finishes early; a late call feeds 2
 * tokens of one and 1 of another. */
static const int SCHED[][NSEQ] = {
    { 6, 3, 0 }, { 1, 1, 0 }, { 1, 1, 0 }, { 1, 1, 4 }, { 1, 1, 1 }, { 1, 0, 1 },
    { 2, 1, 1 }, { 1, 1, 0 }, { 1, 2, 1 }, { 1, 1, 1 }, { 1, 1, 1 }, { 1, 1, 0 },
    { 0, 0, 1 }, { 1, 0, 0 }, { 1, 0, 0 },
};

/* Run the schedule under c; every call's logits checked against ref. Returns
 * the number of calls whose bits differed (or -1 when something failed). */
static int run_schedule(const char *dir, const char *name, const cfg *c, const float *ref, int64_t V) {
    ms_engine *e;
    if (open_engine(dir, c, NSEQ, &e) != MS_OK) return -1;
    ms_session *ses[NSEQ];
    for (int s = 0; s < NSEQ; s++)
        if (ms_session_open(e, &ses[s]) != MS_OK) { ms_engine_close(e); return -1; }
    int64_t at[NSEQ] = { 0 };
    int bad = 0, failed = 0;
    for (size_t call = 0; call < sizeof SCHED / sizeof SCHED[0] && !failed; call++) {
        ms_session *ss[NSEQ];
        const int32_t *ids[NSEQ];
        int64_t n[NSEQ];
        int k = 0, who[NSEQ];
        /* sessions in a rotating order, so a session is not always first */
        for (int q = 0; q < NSEQ; q++) {
            const int s = (int)((q + call) % NSEQ);
            if (SCHED[call][s] == 0) continue;
            ss[k] = ses[s];
            ids[k] = &SEQ[s][at[s]];
            n[k] = SCHED[call][s];
            who[k++] = s;
        }
        ms_status st = ms_sessions_feed(ss, k, ids, n);
        if (st != MS_OK) {
            fprintf(stderr, "%s: call %zu: %s: %s\n", name, call, ms_status_name(st), ms_session_error(ss[0]));
            failed = 1;
            break;
        }
        for (int q = 0; q < k; q++) {
            const int s = who[q];
            at[s] += n[q];
            const float *want = ref + ((int64_t)s * MAXN + at[s] - 1) * V;
            const float *got = ms_session_logits(ses[s]);
            int64_t nt = 0;
            const int32_t *tok = ms_session_tokens(ses[s], &nt);
            const int ok = got && !memcmp(got, want, (size_t)V * sizeof *got) && nt == at[s] &&
                           ms_session_n_past(ses[s]) == at[s] && !memcmp(tok, SEQ[s], (size_t)nt * sizeof *tok);
            if (!ok) {
                bad++;
                fprintf(stderr, "%s: chunk %lld trunk %lld threads %d: call %zu, sequence %d at %lld: %s\n", name,
                        (long long)c->chunk, (long long)c->trunk, c->threads, call, s, (long long)at[s],
                        got ? "different bits or ids" : "no logits");
            }
        }
    }
    for (int s = 0; s < NSEQ; s++) {
        CHECK(failed || at[s] == SEQ_N[s], "%s: the schedule fed sequence %d %lld of %lld tokens", name, s,
              (long long)at[s], (long long)SEQ_N[s]);
        ms_session_close(ses[s]);
    }
    ms_engine_close(e);
    return failed ? -1 : bad;
}

/* The smallest trunk share the engine accepts (found by asking). */
static int64_t trunk_floor(const char *dir) {
    int64_t lo = 1, hi = (int64_t)1 << 32;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const cfg c = { mid, (int64_t)1 << 40, 0, 1 };
        ms_engine_params p = ms_engine_default_params();
        p.model_dir = dir;
        p.trunk_bytes = c.trunk;
        p.expert_bytes = c.expert;
        ms_engine *e;
        char msg[512];
        if (ms_engine_open(&p, &e, msg, sizeof msg) == MS_OK) { ms_engine_close(e); hi = mid; } else lo = mid + 1;
    }
    return lo;
}

/* At the floor: trunk bytes of one step of NSEQ one-token sequences vs one
 * one-token feed of one of them. */
static void trunk_once(const char *dir, const char *name, int64_t floor_trunk) {
    const cfg c = { floor_trunk, 0, 0, 2 };
    ms_engine *e;
    if (open_engine(dir, &c, NSEQ, &e) != MS_OK) { CHECK(0, "%s: open at the floor", name); return; }
    ms_session *ses[NSEQ];
    for (int s = 0; s < NSEQ; s++) ms_session_open(e, &ses[s]);
    const int32_t *ids[NSEQ];
    int64_t n[NSEQ];
    for (int s = 0; s < NSEQ; s++) { ids[s] = SEQ[s]; n[s] = 3; }
    ms_status st = ms_sessions_feed(ses, NSEQ, ids, n);         /* prompts */
    ms_stats a, b, d;
    ms_engine_stats(e, &a);
    for (int s = 0; s < NSEQ; s++) { ids[s] = SEQ[s] + 3; n[s] = 1; }
    if (st == MS_OK) st = ms_sessions_feed(ses, NSEQ, ids, n);  /* one step of three */
    ms_engine_stats(e, &b);
    if (st == MS_OK) st = ms_session_feed(ses[0], SEQ[0] + 4, 1, NULL);   /* one token alone */
    ms_engine_stats(e, &d);
    CHECK(st == MS_OK, "%s: floor feeds: %s", name, ms_session_error(ses[0]));
    /* the same streamed trunk; each token's embedding row (counted as trunk bytes) besides */
    ms_model_info info;
    ms_engine_info(e, &info);
    const int64_t step = b.trunk_bytes_read - a.trunk_bytes_read, one = d.trunk_bytes_read - b.trunk_bytes_read;
    const int64_t row = info.n_embd * 2;
    CHECK(one > row && step == one + (NSEQ - 1) * row,
          "%s: a step of %d sequences read %lld trunk bytes, one token alone %lld (embedding row %lld)", name, NSEQ,
          (long long)step, (long long)one, (long long)row);
    CHECK(b.n_tokens_decode - a.n_tokens_decode == NSEQ, "%s: the step counted %lld decode tokens", name,
          (long long)(b.n_tokens_decode - a.n_tokens_decode));
    for (int s = 0; s < NSEQ; s++) ms_session_close(ses[s]);
    ms_engine_close(e);
}

/* ms_session_copy: a session forked after 6 tokens of sequence 0 goes on as
 * the original does (both fed together, then apart), at the floor. */
static void fork_check(const char *dir, const char *name, const float *ref, int64_t V, int64_t floor_trunk) {
    const cfg c = { floor_trunk, 0, 5, 2 };
    ms_engine *e;
    if (open_engine(dir, &c, 2, &e) != MS_OK) { CHECK(0, "%s: open", name); return; }
    ms_session *a, *b;
    ms_session_open(e, &a);
    ms_session_open(e, &b);
    ms_status st = ms_session_feed(b, SEQ[1], 4, NULL);         /* b holds something else first */
    if (st == MS_OK) st = ms_session_feed(a, SEQ[0], 6, NULL);
    if (st == MS_OK) st = ms_session_copy(b, a);
    int64_t nb = 0;
    const int32_t *tb = ms_session_tokens(b, &nb);
    CHECK(st == MS_OK && nb == 6 && !memcmp(tb, SEQ[0], 6 * sizeof *tb) && ms_session_n_past(b) == 6 &&
              !memcmp(ms_session_logits(b), ref + 5 * V, (size_t)V * sizeof(float)),
          "%s: the copy holds the original's ids and logits", name);
    ms_session *both[2] = { a, b };
    int bad = 0;
    for (int64_t i = 6; st == MS_OK && i < 12; i++) {
        const int32_t *ids[2] = { &SEQ[0][i], &SEQ[0][i] };
        int64_t n[2] = { 1, 1 };
        if (i < 9) st = ms_sessions_feed(both, 2, ids, n);      /* together, then apart */
        else if ((st = ms_session_feed(b, &SEQ[0][i], 1, NULL)) == MS_OK) st = ms_session_feed(a, &SEQ[0][i], 1, NULL);
        bad += memcmp(ms_session_logits(a), ref + i * V, (size_t)V * sizeof(float)) != 0;
        bad += memcmp(ms_session_logits(b), ref + i * V, (size_t)V * sizeof(float)) != 0;
    }
    CHECK(st == MS_OK && bad == 0, "%s: after the copy, %d rows differ from the sequence alone (%s)", name, bad,
          ms_session_error(a));
    CHECK(ms_session_copy(a, a) == MS_E_USAGE, "%s: a copy onto itself", name);
    ms_engine *e2;
    if (open_engine(dir, &c, 1, &e2) == MS_OK) {
        ms_session *o;
        ms_session_open(e2, &o);
        CHECK(ms_session_copy(o, a) == MS_E_USAGE, "%s: a copy across engines", name);
        ms_session_close(o);
        ms_engine_close(e2);
    }
    ms_session_close(a);
    ms_session_close(b);
    ms_engine_close(e);
}

static void usage(const char *dir, const char *name) {
    const cfg c = { 0, 0, 0, 1 };
    ms_engine *e, *e2;
    if (open_engine(dir, &c, 2, &e) != MS_OK || open_engine(dir, &c, 1, &e2) != MS_OK) {
        CHECK(0, "%s: open", name);
        return;
    }
    ms_session *a, *b, *o;
    ms_session_open(e, &a);
    ms_session_open(e, &b);
    ms_session_open(e2, &o);
    const int32_t good[2] = { 1, 2 }, oor[2] = { 1, 1 << 20 };
    int64_t n2[2] = { 2, 2 };
    ms_session *twice[2] = { a, a }, *pair[2] = { a, b }, *other[2] = { a, o };
    const int32_t *ids[2] = { good, good };
    CHECK(ms_sessions_feed(twice, 2, ids, n2) == MS_E_USAGE, "%s: a session given twice", name);
    CHECK(ms_sessions_feed(other, 2, ids, n2) == MS_E_USAGE, "%s: a session of another engine", name);
    CHECK(ms_sessions_feed(pair, 0, ids, n2) == MS_E_USAGE, "%s: k = 0", name);
    int64_t n0[2] = { 2, 0 };
    CHECK(ms_sessions_feed(pair, 2, ids, n0) == MS_E_USAGE, "%s: no tokens", name);
    const int32_t *bad_ids[2] = { good, oor };
    CHECK(ms_sessions_feed(pair, 2, bad_ids, n2) == MS_E_USAGE && strstr(ms_session_error(a), "session 1") &&
              strstr(ms_session_error(b), "session 1"),
          "%s: an id out of range: %s / %s", name, ms_session_error(a), ms_session_error(b));
    int32_t many[70] = { 0 };
    const int32_t *full_ids[2] = { good, many };
    int64_t nfull[2] = { 2, 65 };
    CHECK(ms_sessions_feed(pair, 2, full_ids, nfull) == MS_E_CONTEXT, "%s: a full context", name);
    CHECK(ms_session_n_past(a) == 0 && ms_session_n_past(b) == 0 && !ms_session_logits(a),
          "%s: a refused call fed something", name);
    CHECK(ms_sessions_feed(pair, 2, ids, n2) == MS_OK && ms_session_n_past(a) == 2 && ms_session_n_past(b) == 2,
          "%s: a good call after the refused ones: %s", name, ms_session_error(a));
    ms_session_close(a);
    ms_session_close(b);
    ms_session_close(o);
    ms_engine_close(e);
    ms_engine_close(e2);

    /* the plan: n_seq states, one scratch */
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ms_config cfg;
    ms_err err;
    ms_err_clear(&err);
    ms_model m;
    if (ms_config_load(path, &cfg, &err) == MS_OK && ms_model_bind(&m, &cfg, NULL, NULL, &err) == MS_OK) {
        const int64_t s1 = ms_session_bytes(&m, 256, 0, 32, 1), s2 = ms_session_bytes(&m, 256, 0, 32, 2);
        const int64_t s5 = ms_session_bytes(&m, 256, 0, 32, 5);
        const int64_t one = ms_state_bytes(&m, 256, 0) + cfg.vocab_size * 4 + 256 * 4;
        CHECK(s2 - s1 == one && s5 - s1 == 4 * one && s1 == one + ms_fwd_bytes(&m, 32, 256),
              "%s: session bytes %lld / %lld / %lld, one state %lld", name, (long long)s1, (long long)s2,
              (long long)s5, (long long)one);
        ms_model_free(&m);
    } else {
        CHECK(0, "%s: bind: %s", name, err.msg);
    }
    char out[8192];
    ms_status st = ms_plan_describe(dir, 0, 256, 0, 32, 3, out, sizeof out);
    CHECK(st == MS_OK && strstr(out, "3 sessions"), "%s: plan with 3 sessions: %s", name, out);
    CHECK(ms_plan_describe(dir, 0, 256, 0, 32, MS_MAX_SEQ + 1, out, sizeof out) == MS_E_USAGE,
          "%s: plan with too many sessions", name);
}

static void model(const char *dir, const char *name) {
    int64_t V = 0;
    float *ref = reference(dir, &V);
    CHECK(ref != NULL, "%s: reference", name);
    if (!ref) return;
    const int64_t fl = trunk_floor(dir);
    const cfg cfgs[] = {
        { 0, 0, 32, 2 },                    /* resident */
        { 0, 0, 5, 1 },
        { fl, 0, 2, 2 },                    /* floor, 2-token passes: sessions split across passes */
        { fl, 0, 5, 1 },
        { fl, 0, 32, 2 },
        { fl * 2, 0, 5, 2 },                /* part of the trunk pinned */
    };
    int n_bad = 0;
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        int b = run_schedule(dir, name, &cfgs[i], ref, V);
        CHECK(b >= 0, "%s: config %zu failed to run", name, i);
        if (b > 0) n_bad += b;
    }
    CHECK(n_bad == 0, "%s: %d fed sessions' logits differ from the sequence alone", name, n_bad);
    trunk_once(dir, name, fl);
    fork_check(dir, name, ref, V, fl);
    usage(dir, name);
    free(ref);
}

int main(void) {
    const char *td = getenv("MS_TESTDATA");
    if (!td) { CHECK(0, "MS_TESTDATA not set"); return CHECK_DONE("test_batch"); }
    const char *models[] = { "a", "b", "c", "oss_b" };
    for (int i = 0; i < 4; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", td, models[i]);
        model(path, models[i]);
    }
    return CHECK_DONE("test_batch");
}
