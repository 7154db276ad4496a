/* tests/test_pcpipe.c - the prompt cache (engine/prefix_cache.c) gives a
 * cold run's bits, in one process and in a pipeline across processes.
 *
 * The scenario (two sessions, prompts of ids): a system prompt with a first
 * question; the same system prompt with another question (in the other
 * session); the first prompt again (identical); the first prompt with its
 * last message edited; the first prompt, its answer and a follow-up. Each
 * prompt goes in through ms_session_feed_prompt (restoring the longest
 * prefix the cache holds), then 6 greedy steps; every logits row the
 * scenario reads (the prompt's last, each step's) and every picked id is
 * recorded, with the tokens each prompt restored.
 *
 * Without arguments: the scenario on the test models b (K3: KDA and MLA
 * layers) and oss_b (gpt-oss) from $MS_TESTDATA, with the cache and without,
 * at --ram none and min: every recorded row equal bit for bit, and the cache
 * used (the second prompt restores part of the system prompt, the third all
 * of itself, the fourth and fifth more than the system prompt).
 *
 * With --dump MODEL_DIR OUT [--ram min] [--cache BYTES|off] [--chunk N]
 * [--want-evictions] [--want-off] [--disk DIR] [--piece FLOATS] [--resume]:
 * the scenario once (under mpirun -np N: a pipeline; --disk: with the prompt
 * cache on disk in DIR; --piece: a layer's state crosses the pipeline in
 * pieces of FLOATS; --resume: first a conversation resumed in one session,
 * prompt 0, its steps and the follow-up, printing "resumed a b"),
 * every recorded row and id to OUT, for tests/t_pcpipe.sh to compare with a
 * one-process cold run; prints "cached a b c d e", the weight bytes every
 * stage read, and the entries held and evicted. With the cache it checks the hits as above (--want-evictions, a
 * share too small for them all: that entries were evicted and some prefix
 * still restored), and that every stage's part of the cache holds what stage
 * 0 counts for it (ms_stats.stage_prompt_cache_bytes against
 * ms_pcache_stage_used) within its share. --want-off: that there is no
 * cache (another stage, started with --cache off, has no share).
 *
 * Prints "test_pcpipe: N passed, N failed" (stage 0 only).
 */
#include "check.h"
#include "engine/engine_int.h"
#include "engine/prefix_cache.h"
#include "moestream.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_REQ 5
#define N_SYS 40
#define N_STEPS 6

typedef struct rec {
    float *f;
    size_t n, cap;
} rec;

static void put(rec *r, const float *x, size_t n) {
    if (r->n + n > r->cap) {
        r->cap = (r->n + n) * 2;
        r->f = realloc(r->f, r->cap * sizeof *r->f);
        if (!r->f) { fprintf(stderr, "test_pcpipe: out of memory\n"); exit(1); }
    }
    memcpy(r->f + r->n, x, n * sizeof *x);
    r->n += n;
}

/* Prompt k of the scenario into ids (its answer so far: gen, N_STEPS ids of
 * request 0); its length. */
static int64_t prompt_of(int k, int32_t V, const int32_t *gen, int32_t *ids) {
    int64_t n = 0;
    for (int i = 0; i < N_SYS; i++) ids[n++] = (int32_t)(3 + (i * 11) % 29) % V;
    const int q = k == 1 ? 1 : 0;               /* the question: 0 or 1 */
    for (int i = 0; i < 5 + q; i++) ids[n++] = (int32_t)(40 + i * 5 + q * 3) % V;
    if (k == 3) ids[n - 1] = (ids[n - 1] + 1) % V, ids[n - 2] = (ids[n - 2] + 2) % V;   /* edited */
    if (k == 4) {
        for (int i = 0; i < N_STEPS; i++) ids[n++] = gen[i];
        for (int i = 0; i < 4; i++) ids[n++] = (int32_t)(90 + i) % V;
    }
    return n;
}

/* The scenario on e: recorded into out, each prompt's restored tokens into
 * cached. */
static void scenario(ms_engine *e, rec *out, int64_t *cached) {
    ms_model_info info;
    ms_engine_info(e, &info);
    const int32_t V = (int32_t)info.n_vocab;
    ms_session *s[2];
    CHECK(ms_session_open(e, &s[0]) == MS_OK && ms_session_open(e, &s[1]) == MS_OK, "sessions: %s",
          ms_engine_error(e));
    int32_t ids[N_SYS + 32], gen[N_STEPS] = { 0 };
    const int who[N_REQ] = { 0, 1, 0, 1, 1 };
    for (int k = 0; k < N_REQ; k++) {
        ms_session *x = s[who[k]];
        const int64_t n = prompt_of(k, V, gen, ids);
        cached[k] = -1;
        ms_status st = ms_session_feed_prompt(x, ids, n, &cached[k]);
        CHECK(st == MS_OK, "prompt %d: %s", k, ms_session_error(x));
        if (st != MS_OK) continue;
        put(out, ms_session_logits(x), (size_t)V);
        for (int t = 0; t < N_STEPS && st == MS_OK; t++) {
            const int32_t id = ms_argmax(ms_session_logits(x), V);
            if (k == 0) gen[t] = id;
            const float fid = (float)id;
            put(out, &fid, 1);
            st = ms_session_feed(x, &id, 1, NULL);
            CHECK(st == MS_OK, "prompt %d step %d: %s", k, t, ms_session_error(x));
            if (st == MS_OK) put(out, ms_session_logits(x), (size_t)V);
        }
    }
    ms_session_close(s[0]);
    ms_session_close(s[1]);
}

/* A conversation resumed in one session (--resume, before the scenario):
 * prompt 0 and its 6 greedy steps, then the follow-up (prompt 4), whose
 * prefix the session holds itself; recorded into out (the follow-up's rows),
 * each prompt's restored tokens into cached[2]. */
static void resume(ms_engine *e, rec *out, int64_t *cached) {
    ms_model_info info;
    ms_engine_info(e, &info);
    const int32_t V = (int32_t)info.n_vocab;
    ms_session *s;
    CHECK(ms_session_open(e, &s) == MS_OK, "session: %s", ms_engine_error(e));
    int32_t ids[N_SYS + 32], gen[N_STEPS] = { 0 };
    for (int k = 0; k < 2; k++) {
        const int64_t n = prompt_of(k ? 4 : 0, V, gen, ids);
        ms_status st = ms_session_feed_prompt(s, ids, n, &cached[k]);
        CHECK(st == MS_OK, "resume %d: %s", k, ms_session_error(s));
        if (k) put(out, ms_session_logits(s), (size_t)V);
        for (int t = 0; t < N_STEPS && st == MS_OK; t++) {
            gen[t] = ms_argmax(ms_session_logits(s), V);
            st = ms_session_feed(s, &gen[t], 1, NULL);
            CHECK(st == MS_OK, "resume %d step %d: %s", k, t, ms_session_error(s));
            if (st == MS_OK && k) put(out, ms_session_logits(s), (size_t)V);
        }
    }
    ms_session_close(s);
}

/* The hits a warm scenario must show (the system prompt is N_SYS ids). */
static void check_hits(const char *tag, const int64_t *c) {
    CHECK(c[1] > 0 && c[1] <= N_SYS, "%s: the second prompt restored %lld", tag, (long long)c[1]);
    CHECK(c[2] == N_SYS + 5, "%s: the identical prompt restored %lld of %d", tag, (long long)c[2], N_SYS + 5);
    CHECK(c[3] >= N_SYS, "%s: the edited prompt restored %lld", tag, (long long)c[3]);
    CHECK(c[4] >= N_SYS + 5, "%s: the follow-up restored %lld", tag, (long long)c[4]);
}

/* Warnings to stderr (a stage that could not keep its part says so). */
static void warn_line(void *user, ms_log_level level, const char *line) {
    (void)user;
    (void)level;
    fprintf(stderr, "%s\n", line);
}

static ms_status open_engine(const char *dir, int64_t ram, int64_t cache, int64_t chunk, const char *disk,
                             ms_engine **e) {
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.prompt_cache_dir = disk;
    p.max_context = 128;
    p.n_seq = 2;
    p.ram_bytes = ram;
    p.prompt_cache_bytes = cache;
    p.prefill_chunk = chunk;
    p.log = warn_line;
    p.log_level = MS_LOG_WARN;
    ms_pipe_serve_if_worker(&p);        /* a pipeline's stage r > 0 serves and ends here */
    char msg[512];
    const ms_status st = ms_engine_open(&p, e, msg, sizeof msg);
    if (st != MS_OK) fprintf(stderr, "test_pcpipe: %s: %s\n", dir, msg);
    return st;
}

/* Every stage's part as stage 0 counts it, within the share. */
static void check_stages(ms_engine *e, int64_t cache) {
    ms_stats st;
    ms_engine_stats(e, &st);
    for (int r = 0; r < st.n_stages; r++) {
        const int64_t have = st.n_stages > 1 ? st.stage_prompt_cache_bytes[r] : st.prompt_cache_bytes;
        CHECK(have == ms_pcache_stage_used(e->pcache, r) && (have > 0) == (ms_pcache_count(e->pcache) > 0) &&
              (cache <= 0 || have <= cache),
              "stage %d holds %lld bytes of the cache, stage 0 counts %lld (share %lld)", r, (long long)have,
              (long long)ms_pcache_stage_used(e->pcache, r), (long long)cache);
    }
}

static int dump(int argc, char **argv) {
    if (ms_pipe_boot(&argc, &argv) != 0) return 1;
    if (argc < 4) { fprintf(stderr, "usage: test_pcpipe --dump MODEL_DIR OUT [options]\n"); return 2; }
    int64_t ram = 0, cache = 0, chunk = 0;
    int want_ev = 0, want_off = 0, want_resume = 0;
    const char *disk = NULL;
    for (int i = 4; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--ram")) ram = !strcmp(v, "min") ? MS_RAM_MIN : atoll(v), i++;
        else if (!strcmp(argv[i], "--cache")) cache = !strcmp(v, "off") ? MS_PROMPT_CACHE_OFF : atoll(v), i++;
        else if (!strcmp(argv[i], "--chunk")) chunk = atoll(v), i++;
        else if (!strcmp(argv[i], "--want-evictions")) want_ev = 1;
        else if (!strcmp(argv[i], "--want-off")) want_off = 1;
        else if (!strcmp(argv[i], "--disk")) disk = v, i++;
        else if (!strcmp(argv[i], "--resume")) want_resume = 1;
        else if (!strcmp(argv[i], "--piece")) ms_pipe_set_state_piece(atoll(v)), i++;
        else { fprintf(stderr, "test_pcpipe: unknown option %s\n", argv[i]); return 2; }
    }
    ms_engine *e;
    if (open_engine(argv[2], ram, cache, chunk, disk, &e) != MS_OK) return 1;
    rec out = { 0 };
    int64_t c[N_REQ], rc[2];
    if (want_resume) {
        resume(e, &out, rc);
        printf("resumed %lld %lld\n", (long long)rc[0], (long long)rc[1]);
    }
    scenario(e, &out, c);
    FILE *f = fopen(argv[3], "wb");
    CHECK(f && fwrite(out.f, sizeof *out.f, out.n, f) == out.n, "write %s", argv[3]);
    if (f) fclose(f);
    ms_stats sn;
    ms_engine_stats(e, &sn);
    printf("cached %lld %lld %lld %lld %lld\nbytes read %lld (every stage)\n", (long long)c[0], (long long)c[1],
           (long long)c[2], (long long)c[3], (long long)c[4], (long long)(sn.trunk_bytes_read + sn.expert_bytes_read));
    if (disk)
        printf("disk hits %lld writes %lld failed %lld refused %lld\n", (long long)sn.prompt_disk_hits,
               (long long)sn.prompt_disk_writes, (long long)sn.prompt_disk_write_failures,
               (long long)sn.prompt_disk_rejected);
    if (want_off) {
        /* another stage has no share: no cache at all */
        CHECK(e->pcache == NULL && c[1] + c[2] + c[3] + c[4] == 0, "a cache with a stage of no share");
    } else if (cache != MS_PROMPT_CACHE_OFF) {
        /* a tight share: entries evicted, some prefix still restored */
        if (want_ev)
            CHECK(ms_pcache_evictions(e->pcache) > 0 && c[1] + c[2] + c[3] + c[4] > 0, "evictions %lld",
                  (long long)ms_pcache_evictions(e->pcache));
        else
            check_hits(argv[2], c);
        check_stages(e, cache);
        printf("entries %d evictions %lld\n", ms_pcache_count(e->pcache), (long long)ms_pcache_evictions(e->pcache));
    }
    free(out.f);
    ms_engine_close(e);
    return CHECK_DONE("test_pcpipe");
}

/* One process: warm against cold on model `name`. */
static void one_process(const char *name, int64_t ram, int64_t cache) {
    const char *td = getenv("MS_TESTDATA");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", td ? td : "build/testdata", name);
    rec w = { 0 }, c = { 0 };
    int64_t cw[N_REQ], cc[N_REQ];
    ms_engine *e;
    if (open_engine(dir, ram, cache, 8, NULL, &e) != MS_OK) { CHECK(0, "open %s", dir); return; }
    scenario(e, &w, cw);
    check_hits(dir, cw);
    check_stages(e, cache);
    ms_engine_close(e);
    if (open_engine(dir, ram, MS_PROMPT_CACHE_OFF, 8, NULL, &e) != MS_OK) { CHECK(0, "open %s", dir); return; }
    scenario(e, &c, cc);
    ms_engine_close(e);
    CHECK(w.n > 0 && w.n == c.n && memcmp(w.f, c.f, w.n * sizeof *w.f) == 0, "%s ram %lld: rows differ with the cache",
          dir, (long long)ram);
    for (int k = 0; k < N_REQ; k++) CHECK(cc[k] == 0, "%s: %lld restored without a cache", dir, (long long)cc[k]);
    free(w.f);
    free(c.f);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--dump")) return dump(argc, argv);
    one_process("b", 0, 0);
    one_process("b", MS_RAM_MIN, 1 << 20);
    one_process("oss_b", 0, 0);
    one_process("oss_b", MS_RAM_MIN, 1 << 20);
    return CHECK_DONE("test_pcpipe");
}
