/* tests/test_pipe.c - the pipeline across processes (engine/pipe.c).
 *
 * Without arguments: the split (ms_pipe_split) against a brute force over
 * every contiguous split of small random layer costs: its largest stage cost
 * is the smallest there is, and its boundaries are the earliest of the
 * splits that reach it.
 *
 * With --dump MODEL_DIR OUT [--ram min] [--speculate K] [--chunk N]
 * [--stages L,...] [--stage-groups N]: run one fixed scenario through the public API and write
 * every logits row and picked id to OUT, for tests/t_pipeline.sh to compare
 * between one process and `mpirun -np N` (the bits must be equal):
 *   1. a prompt fed with every row's logits (ms_session_feed, all_logits);
 *   2. greedy ms_session_decode steps (with --speculate: drafts, verify
 *      passes, rollbacks in every stage);
 *   3. a copy of the session (ms_session_copy) and both decoding side by
 *      side in one pass per step (ms_sessions_feed), then greedy
 *      ms_sessions_decode steps of both (with --speculate: both drafts in
 *      one pass, each session's record and rollback in every stage), then a
 *      prompt each, fed together;
 *   4. a reset (ms_session_reset) and a new prompt of 23 tokens, no logits but
 *      the last (in a pipeline its chunks before the last go on without
 *      waiting).
 * With --built-with-mpi: exit 0 when the build has the pipeline (Open MPI),
 * 1 when it was built with make MPI=0 (the scripts' test for it).
 *
 * Prints "test_pipe: N passed, N failed" (stage 0 only).
 */
#include "check.h"
#include "engine/engine_int.h"
#include "moestream.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the split ---- */

static int64_t max_cost(const int64_t *cost, int64_t head, int n, const int *start) {
    int64_t worst = 0;
    for (int s = 0; s < n; s++) {
        int64_t c = s == 0 ? head : 0;
        for (int i = start[s]; i < start[s + 1]; i++) c += cost[i];
        if (c > worst) worst = c;
    }
    return worst;
}

/* Every split of L layers in n stages, in lexicographic order of the
 * boundaries; the first one with the smallest largest cost. */
static int64_t brute(const int64_t *cost, int L, int64_t head, int n, int *best) {
    int start[16];
    start[0] = 0;
    start[n] = L;
    for (int s = 1; s < n; s++) start[s] = s;
    int64_t best_v = INT64_MAX;
    for (;;) {
        int64_t v = max_cost(cost, head, n, start);
        if (v < best_v) { best_v = v; memcpy(best, start, (size_t)(n + 1) * sizeof *start); }
        int s = n - 1;          /* next combination: move the last boundary that can move */
        while (s >= 1 && start[s] == L - (n - s)) s--;
        if (s < 1) break;
        start[s]++;
        for (int t = s + 1; t < n; t++) start[t] = start[t - 1] + 1;
    }
    return best_v;
}

static void test_split(void) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int iter = 0; iter < 400; iter++) {
        int64_t cost[12];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const int L = 1 + (int)((x >> 33) % 12);
        const int n = 1 + (int)((x >> 40) % (uint64_t)(L < 6 ? L : 6));
        for (int i = 0; i < L; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            cost[i] = 1 + (int64_t)((x >> 35) % (iter % 3 == 0 ? 4 : 1000));   /* ties, too */
        }
        const int64_t head = iter % 2 ? (int64_t)((x >> 20) % 1500) : 0;
        int got[16], want[16];
        CHECK(ms_pipe_split(cost, L, head, n, got) == 0, "L %d n %d", L, n);
        const int64_t bv = brute(cost, L, head, n, want);
        CHECK(got[0] == 0 && got[n] == L, "ends");
        int mono = 1;
        for (int s = 0; s < n; s++) mono &= got[s] < got[s + 1];
        CHECK(mono, "every stage has a layer (L %d n %d)", L, n);
        CHECK(max_cost(cost, head, n, got) == bv, "iter %d: largest stage %lld, best %lld", iter,
              (long long)max_cost(cost, head, n, got), (long long)bv);
        CHECK(!memcmp(got, want, (size_t)(n + 1) * sizeof *got), "iter %d: not the earliest best split", iter);
    }
    int s[8];
    const int64_t c3[3] = { 1, 1, 1 };
    CHECK(ms_pipe_split(c3, 3, 0, 4, s) == -1, "more stages than layers");
    /* the head weighs on stage 0: a heavy head leaves it one layer */
    const int64_t c4[4] = { 10, 10, 10, 10 };
    CHECK(ms_pipe_split(c4, 4, 100, 2, s) == 0 && s[1] == 1, "heavy head: stage 1 from layer %d", s[1]);
    CHECK(ms_pipe_split(c4, 4, 0, 2, s) == 0 && s[1] == 2, "no head: halves (%d)", s[1]);
}

/* ---- the scenario ---- */

static FILE *g_out;
static int64_t g_rollbacks;

static int32_t pick_argmax(void *user, const float *logits, const int32_t *tokens, int64_t n_past, int *stop) {
    (void)user; (void)tokens; (void)n_past; (void)stop;
    return ms_argmax(logits, *(const int64_t *)user);
}

static void put_row(const float *row, int64_t V) {
    fwrite(row, sizeof *row, (size_t)V, g_out);
}

static int dump(int argc, char **argv) {
    if (ms_pipe_boot(&argc, &argv) != 0) return 1;
    if (argc < 4) { fprintf(stderr, "usage: test_pipe --dump MODEL_DIR OUT [options]\n"); return 2; }
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = argv[2];
    p.max_context = 256;
    p.n_seq = 2;
    int leave = 0;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ram")) p.ram_bytes = !strcmp(argv[i + 1], "min") ? MS_RAM_MIN : atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--speculate")) p.max_draft = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk")) p.prefill_chunk = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--stages")) p.stages = argv[i + 1];
        else if (!strcmp(argv[i], "--stage-groups")) p.stage_groups = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--leave")) leave = 1;    /* exit without closing the engine */
        else { fprintf(stderr, "test_pipe: unknown option %s\n", argv[i]); return 2; }
    }
    ms_pipe_serve_if_worker(&p);
    ms_engine *e;
    char msg[512];
    if (ms_engine_open(&p, &e, msg, sizeof msg) != MS_OK) { fprintf(stderr, "test_pipe: %s\n", msg); return 1; }
    g_out = fopen(argv[3], "wb");
    if (!g_out) return 1;
    ms_model_info info;
    ms_engine_info(e, &info);
    int64_t V = info.n_vocab;
    ms_session *a, *b;
    CHECK(ms_session_open(e, &a) == MS_OK && ms_session_open(e, &b) == MS_OK, "sessions");
    /* 1. a prompt that repeats (prompt lookup finds drafts), every row: text
       when the model has a tokenizer, else ids */
    int32_t prompt[24];
    static const char text[] = "And the LORD spake unto Moses, saying, And the LORD spake unto Moses, saying, "
                               "And the LORD spake unto Moses, saying, And the LORD";
    int32_t *tk = NULL;
    int64_t nt = 0;
    if (ms_engine_has_tokenizer(e) && ms_tokenize(e, text, sizeof text - 1, &tk, &nt) == MS_OK && nt >= 24)
        memcpy(prompt, tk, sizeof prompt);
    else
        for (int i = 0; i < 24; i++) prompt[i] = (int32_t)(1 + (i * 7) % 9) % (int32_t)V;
    free(tk);
    float *rows = malloc((size_t)(24 * V) * sizeof *rows);
    CHECK(ms_session_feed(a, prompt, 24, rows) == MS_OK, "prompt: %s", ms_session_error(a));
    for (int i = 0; i < 24; i++) put_row(rows + i * V, V);
    /* 2. greedy decode, drafting up to max_draft tokens a pass */
    int32_t pending = ms_argmax(ms_session_logits(a), V), out[40];
    int64_t drafted_rejected = 0;
    for (int step = 0; step < 12; step++) {
        int64_t n = 0;
        CHECK(ms_session_decode(a, pending, p.max_draft, pick_argmax, &V, out, &n) == MS_OK && n >= 1,
              "decode: %s", ms_session_error(a));
        if (n < 1) break;
        fwrite(out, sizeof *out, (size_t)n, g_out);
        /* a pass that kept fewer tokens than it verified rolled back */
        ms_stats sn;
        ms_engine_stats(e, &sn);
        if (sn.spec_drafted - sn.spec_accepted > drafted_rejected) g_rollbacks++;
        drafted_rejected = sn.spec_drafted - sn.spec_accepted;
        put_row(ms_session_logits(a), V);
        pending = out[n - 1];
    }
    /* 3. a copy, then both side by side */
    CHECK(ms_session_copy(b, a) == MS_OK, "copy");
    int32_t ta = pending, tb = (pending + 1) % (int32_t)V;
    for (int step = 0; step < 4; step++) {
        ms_session *ss[2] = { a, b };
        const int32_t *ids[2] = { &ta, &tb };
        const int64_t n[2] = { 1, 1 };
        CHECK(ms_sessions_feed(ss, 2, ids, n) == MS_OK, "batch: %s", ms_session_error(a));
        put_row(ms_session_logits(a), V);
        put_row(ms_session_logits(b), V);
        ta = ms_argmax(ms_session_logits(a), V);
        tb = ms_argmax(ms_session_logits(b), V);
    }
    /* both decoding side by side with their drafts, one pass a step */
    for (int step = 0; step < 6; step++) {
        ms_session *ss[2] = { a, b };
        int32_t pend[2] = { ta, tb }, oa[40], ob[40], *outs[2] = { oa, ob };
        const int nd[2] = { p.max_draft, p.max_draft };
        void *const us[2] = { &V, &V };
        int64_t no[2] = { 0, 0 };
        CHECK(ms_sessions_decode(ss, 2, pend, nd, pick_argmax, us, outs, no) == MS_OK && no[0] >= 1 && no[1] >= 1,
              "decode side by side: %s", ms_session_error(a));
        if (no[0] < 1 || no[1] < 1) break;
        fwrite(oa, sizeof *oa, (size_t)no[0], g_out);
        fwrite(ob, sizeof *ob, (size_t)no[1], g_out);
        put_row(ms_session_logits(a), V);
        put_row(ms_session_logits(b), V);
        ta = oa[no[0] - 1];
        tb = ob[no[1] - 1];
    }
    /* prompts of both side by side (a pass of many tokens: in groups when the
       stages hold their trunks, by default) */
    {
        ms_session *ss[2] = { a, b };
        const int32_t *ids[2] = { prompt, prompt + 2 };
        const int64_t n[2] = { 20, 20 };
        CHECK(ms_sessions_feed(ss, 2, ids, n) == MS_OK, "prompts side by side: %s", ms_session_error(a));
        put_row(ms_session_logits(a), V);
        put_row(ms_session_logits(b), V);
    }
    /* 4. reset and a new prompt */
    ms_session_reset(a);
    CHECK(ms_session_feed(a, prompt + 1, 23, NULL) == MS_OK, "after reset: %s", ms_session_error(a));
    put_row(ms_session_logits(a), V);
    CHECK(ms_session_save(a, "/nonexistent/x") != MS_OK, "save");
    ms_stats st;
    ms_engine_stats(e, &st);
    int64_t tr = 0, ex = 0;
    for (int r = 0; r < st.n_stages; r++) { tr += st.stage_trunk_bytes[r]; ex += st.stage_expert_bytes[r]; }
    CHECK(st.n_stages == ms_pipe_size(), "stages %d", st.n_stages);
    CHECK(tr == st.trunk_bytes_read && ex == st.expert_bytes_read, "stage bytes add up");
    printf("stage bytes:");
    for (int r = 0; r < st.n_stages; r++)
        printf(" %lld", (long long)(st.stage_trunk_bytes[r] + st.stage_expert_bytes[r]));
    printf("\ndrafted %lld accepted %lld rolled back %lld\ngrouped passes %lld\nasync chunks %lld\n",
           (long long)st.spec_drafted, (long long)st.spec_accepted, (long long)g_rollbacks,
           (long long)st.stage_group_passes, (long long)st.stage_async_chunks);
    free(rows);
    fclose(g_out);
    if (leave) exit(CHECK_DONE("test_pipe"));
    ms_session_close(a);
    ms_session_close(b);
    ms_engine_close(e);
    return CHECK_DONE("test_pipe");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--dump")) return dump(argc, argv);
    /* for the scripts: exit 0 when this build has the pipeline (MPI), 1 when not (make MPI=0) */
    if (argc > 1 && !strcmp(argv[1], "--built-with-mpi")) return ms_pipe_built ? 0 : 1;
    test_split();
    return CHECK_DONE("test_pipe");
}
