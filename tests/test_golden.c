/* tests/test_golden.c - the engine against the Python reference (tools/msref.py).
 *
 * For each tiny model in $MS_TESTDATA (a, b, c, d: differently shaped, d with
 * odd expert, head and width counts and F32 data at unaligned offsets; d_odd:
 * d's tensors with BF16 data at odd offsets; oss_a, oss_b, oss_c: gpt-oss
 * against tools/ossref.py, windows of 4, 7 and 4 keys, oss_c with 32 heads of
 * 64 over a hidden size of 64; see tests/make_testdata.sh):
 *   - teacher forcing over tf_ids: argmax at every position equals the
 *     reference's, logits within TOL of the reference's float64 logits;
 *   - the same feed one token at a time gives the same logits BITS as one
 *     chunked feed (prefill chunks == decode);
 *   - 2, 3 and 7 threads give the same bits as 1 thread (chunked and token by token);
 *   - the smallest budget (--ram min: the floor probe, then everything streamed)
 *     gives the same bits, and the memory plan of its config.json is made;
 *   - every kernel table the CPU runs (ref, avx2, avx512, avx512-l2: ms_engine_params
 *     .kernels) gives the same bits as the automatic choice, chunked and token by token;
 *   - greedy decode of the prompt reproduces greedy_ids exactly, and a full
 *     recompute at every step gives the same ids and logits bits.
 * d and d_odd give the same logits bits, resident and at --ram min.
 * For each trap fixture (trap_NAME, K3's and trap_oss_NAME, gpt-oss's): the engine matches the correct reference
 * (golden/) and the reference with the trap sprung (golden_wrong/) differs
 * from it by far more than TOL - so a plausible wrong engine fails here.
 */
#include "moestream.h"

#include "check.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Tolerance between fp32 engine logits and the float64 reference, relative
 * to the largest reference logit magnitude of that model. */
#define TOL_REL 1e-3

typedef struct golden {
    int32_t *prompt, *greedy, *tf, *tf_argmax;
    int64_t n_prompt, n_greedy, n_tf, n_vocab;
    float *tf_logits;           /* [n_tf, n_vocab] */
    double scale;
} golden;

static int64_t json_ids(json_t *a, int32_t **out) {
    if (!json_is_array(a)) return -1;
    int64_t n = (int64_t)json_array_size(a);
    *out = malloc((size_t)(n + 1) * sizeof **out);
    for (int64_t i = 0; i < n; i++) (*out)[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return n;
}

static float *read_f32(const char *path, int64_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *p = malloc((size_t)n * sizeof *p);
    size_t got = fread(p, sizeof *p, (size_t)n, f);
    fclose(f);
    if ((int64_t)got != n) { free(p); return NULL; }
    return p;
}

static int load_golden(const char *dir, golden *g) {
    memset(g, 0, sizeof *g);
    char path[4096];
    snprintf(path, sizeof path, "%s/golden.json", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) { fprintf(stderr, "cannot read %s: %s\n", path, je.text); return -1; }
    g->n_prompt = json_ids(json_object_get(j, "prompt_ids"), &g->prompt);
    g->n_greedy = json_ids(json_object_get(j, "greedy_ids"), &g->greedy);
    g->n_tf = json_ids(json_object_get(j, "tf_ids"), &g->tf);
    json_ids(json_object_get(j, "tf_argmax"), &g->tf_argmax);
    g->n_vocab = json_integer_value(json_object_get(j, "n_vocab"));
    json_decref(j);
    snprintf(path, sizeof path, "%s/tf_logits.f32", dir);
    g->tf_logits = read_f32(path, g->n_tf * g->n_vocab);
    if (!g->tf_logits || g->n_tf <= 0 || g->n_vocab <= 0) { fprintf(stderr, "bad golden in %s\n", dir); return -1; }
    g->scale = 0;
    for (int64_t i = 0; i < g->n_tf * g->n_vocab; i++)
        if (fabs(g->tf_logits[i]) > g->scale) g->scale = fabs(g->tf_logits[i]);
    return 0;
}

static void free_golden(golden *g) {
    free(g->prompt); free(g->greedy); free(g->tf); free(g->tf_argmax); free(g->tf_logits);
}

/* kernels: a table's name, or NULL = auto; ram_bytes as ms_engine_params. NULL
 * (no failure) when that table is not on this CPU. */
static ms_engine *open_engine_with(const char *dir, int threads, const char *kernels, int64_t ram_bytes) {
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.n_threads = threads;
    p.kernels = kernels;
    p.ram_bytes = ram_bytes;
    ms_engine *e = NULL;
    char msg[1024];
    ms_status st = ms_engine_open(&p, &e, msg, sizeof msg);
    if (kernels && st == MS_E_USAGE && strstr(msg, "lacks it")) return NULL;
    CHECK(st == MS_OK, "open %s: %s", dir, msg);
    return e;
}

static ms_engine *open_engine_k(const char *dir, int threads, const char *kernels) {
    return open_engine_with(dir, threads, kernels, 0);
}

static ms_engine *open_engine(const char *dir, int threads) { return open_engine_k(dir, threads, NULL); }

/* Teacher forcing: logits for every position of ids, in one feed (chunked
 * internally) or one token per feed. */
static float *teacher_force(ms_engine *e, const int32_t *ids, int64_t n, int64_t V, int one_by_one) {
    ms_session *s;
    if (ms_session_open(e, &s) != MS_OK) return NULL;
    float *lg = malloc((size_t)(n * V) * sizeof *lg);
    ms_status st = MS_OK;
    if (one_by_one) {
        for (int64_t i = 0; i < n && st == MS_OK; i++) {
            st = ms_session_feed(s, ids + i, 1, NULL);
            if (st == MS_OK) memcpy(lg + i * V, ms_session_logits(s), (size_t)V * sizeof *lg);
        }
    } else {
        st = ms_session_feed(s, ids, n, lg);
    }
    CHECK(st == MS_OK, "feed: %s", ms_session_error(s));
    ms_session_close(s);
    if (st != MS_OK) { free(lg); return NULL; }
    return lg;
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;           /* NaN propagates as a failure */
    }
    return m;
}

static void check_model(const char *dir, const char *name) {
    char gdir[4200];
    snprintf(gdir, sizeof gdir, "%s/golden", dir);
    golden g;
    if (load_golden(gdir, &g) != 0) { CHECK(0, "%s: no golden", name); return; }
    ms_engine *e1 = open_engine(dir, 1);
    if (!e1) { free_golden(&g); return; }
    ms_model_info info;
    ms_engine_info(e1, &info);
    CHECK(info.n_vocab == g.n_vocab, "%s: vocab %lld vs %lld", name, (long long)info.n_vocab, (long long)g.n_vocab);
    const int64_t V = g.n_vocab, n = g.n_tf;

    /* teacher forcing vs the reference */
    float *lg = teacher_force(e1, g.tf, n, V, 0);
    if (lg) {
        int n_bad = 0;
        for (int64_t i = 0; i < n; i++) {
            int32_t am = ms_argmax(lg + i * V, V);
            if (am != g.tf_argmax[i]) {
                if (n_bad++ < 3) fprintf(stderr, "%s: position %lld argmax %d, reference %d\n", name, (long long)i, am, g.tf_argmax[i]);
            }
        }
        CHECK(n_bad == 0, "%s: %d teacher-forcing positions disagree with the reference", name, n_bad);
        double d = max_abs_diff(lg, g.tf_logits, n * V);
        printf("%s: max |logit - reference| = %.3g (max |logit| %.3g, relative %.3g, tolerance %.1g)\n",
               name, d, g.scale, d / g.scale, TOL_REL);
        CHECK(d <= TOL_REL * g.scale, "%s: logits differ from the reference by %.3g (> %.3g)", name, d, TOL_REL * g.scale);

        /* one token at a time: the same bits */
        float *lg1 = teacher_force(e1, g.tf, n, V, 1);
        CHECK(lg1 && memcmp(lg, lg1, (size_t)(n * V) * sizeof *lg) == 0,
              "%s: token-by-token logits differ from chunked prefill bits", name);
        free(lg1);

        /* 2, 3 and 7 threads (more threads than cores: the dynamic chunks of
         * the pool land on threads in a different order every run): the same bits */
        static const int n_thr[] = { 2, 3, 7 };
        for (int it = 0; it < 3; it++) {
            ms_engine *e2 = open_engine(dir, n_thr[it]);
            CHECK(e2 != NULL, "%s: open with %d threads", name, n_thr[it]);
            if (!e2) continue;
            float *lg2 = teacher_force(e2, g.tf, n, V, it == 2);
            CHECK(lg2 && memcmp(lg, lg2, (size_t)(n * V) * sizeof *lg) == 0,
                  "%s: %d-thread logits differ from 1-thread bits", name, n_thr[it]);
            free(lg2);
            ms_engine_close(e2);
        }

        /* the smallest plan (the open plans from the config's layout, then
         * probes the store for its floor): every weight streamed, the same
         * bits; and the plan of the config alone */
        ms_engine *em = open_engine_with(dir, 2, NULL, MS_RAM_MIN);
        if (em) {
            float *lgm = teacher_force(em, g.tf, n, V, 0);
            CHECK(lgm && memcmp(lg, lgm, (size_t)(n * V) * sizeof *lg) == 0,
                  "%s: logits at the smallest budget differ from the unlimited run's bits", name);
            free(lgm);
            ms_engine_close(em);
        }
        char cfg[4200], table[8192];
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        const ms_status ps = ms_plan_describe(cfg, (int64_t)512 << 20, 0, 0, 0, 1, table, sizeof table);
        CHECK(ps == MS_OK, "%s: plan of config.json at 512M: status %d: %.300s", name, (int)ps, table);

        /* every kernel table this CPU runs, chunked (matrix-matrix kernels) and token by
         * token (matrix-vector): the same bits as the automatic choice */
        static const char *const tabs[] = { "ref", "avx2", "avx512", "avx512-l2" };
        for (int it = 0; it < 4; it++) {
            ms_engine *ek = open_engine_k(dir, 2, tabs[it]);
            if (!ek) { printf("%s: kernels %s not on this CPU: skipped\n", name, tabs[it]); continue; }
            ms_model_info ki;
            ms_engine_info(ek, &ki);
            CHECK(ki.kernels && !strcmp(ki.kernels, tabs[it]), "%s: asked for kernels %s, got %s", name, tabs[it],
                  ki.kernels ? ki.kernels : "-");
            for (int by_one = 0; by_one < 2; by_one++) {
                float *lgk = teacher_force(ek, g.tf, n, V, by_one);
                CHECK(lgk && memcmp(lg, lgk, (size_t)(n * V) * sizeof *lg) == 0,
                      "%s: kernels %s (%s) give other logits bits than %s", name, tabs[it],
                      by_one ? "token by token" : "chunked", info.kernels);
                free(lgk);
            }
            ms_engine_close(ek);
        }
        free(lg);
    }

    /* greedy decode: incremental and full recompute */
    if (g.n_greedy > 0) {
        ms_session *s = NULL, *r = NULL;
        CHECK(ms_session_open(e1, &s) == MS_OK && ms_session_open(e1, &r) == MS_OK, "%s: session", name);
        int64_t n_all = g.n_prompt + g.n_greedy;
        int32_t *all = malloc((size_t)n_all * sizeof *all);
        memcpy(all, g.prompt, (size_t)g.n_prompt * sizeof *all);
        int64_t have = g.n_prompt;
        ms_status st = ms_session_feed(s, g.prompt, g.n_prompt, NULL);
        int same_bits = 1, same_ids = 1;
        for (int64_t i = 0; st == MS_OK && i < g.n_greedy; i++) {
            ms_session_reset(r);
            ms_status str = ms_session_feed(r, all, have, NULL);
            if (str != MS_OK || memcmp(ms_session_logits(s), ms_session_logits(r), (size_t)V * sizeof(float)) != 0)
                same_bits = 0;
            int32_t next = ms_argmax(ms_session_logits(s), V);
            if (next != ms_argmax(ms_session_logits(r), V)) same_ids = 0;
            all[have++] = next;
            if (i + 1 < g.n_greedy) st = ms_session_feed(s, &next, 1, NULL);
        }
        CHECK(st == MS_OK, "%s: decode: %s", name, ms_session_error(s));
        CHECK(have == n_all && memcmp(all + g.n_prompt, g.greedy, (size_t)g.n_greedy * sizeof *all) == 0,
              "%s: greedy ids differ from the reference", name);
        CHECK(same_ids && same_bits, "%s: incremental and recompute differ (ids %d, bits %d)", name, same_ids, same_bits);
        free(all);
        ms_session_close(s);
        ms_session_close(r);
    }
    ms_engine_close(e1);
    free_golden(&g);
}

/* A trap fixture: the engine follows golden/, and golden_wrong/ is far away. */
static void check_trap(const char *dir, const char *name) {
    char gdir[4200], wdir[4200];
    snprintf(gdir, sizeof gdir, "%s/golden", dir);
    snprintf(wdir, sizeof wdir, "%s/golden_wrong", dir);
    golden g, w;
    if (load_golden(gdir, &g) != 0 || load_golden(wdir, &w) != 0) { CHECK(0, "%s: no goldens", name); return; }
    CHECK(g.n_tf == w.n_tf && g.n_vocab == w.n_vocab, "%s: golden shapes differ", name);
    const int64_t V = g.n_vocab, n = g.n_tf;
    double sep = max_abs_diff(g.tf_logits, w.tf_logits, n * V);
    CHECK(sep > 10 * TOL_REL * g.scale, "%s: the sprung trap changes logits by only %.3g: the fixture cannot catch it", name, sep);
    ms_engine *e = open_engine(dir, 2);
    if (e) {
        float *lg = teacher_force(e, g.tf, n, V, 0);
        if (lg) {
            double d = max_abs_diff(lg, g.tf_logits, n * V), dw = max_abs_diff(lg, w.tf_logits, n * V);
            printf("%s: engine vs correct %.3g, vs trap %.3g (scale %.3g)\n", name, d, dw, g.scale);
            CHECK(d <= TOL_REL * g.scale, "%s: engine differs from the correct reference by %.3g", name, d);
            int n_bad = 0;
            for (int64_t i = 0; i < n; i++) n_bad += ms_argmax(lg + i * V, V) != g.tf_argmax[i];
            CHECK(n_bad == 0, "%s: %d argmax positions differ", name, n_bad);
            free(lg);
        }
        ms_engine_close(e);
    }
    free_golden(&g);
    free_golden(&w);
}

/* The same tensors at other file offsets give the same logits bits: d_odd is
 * d with every shard's header one byte longer (BF16 data at odd offsets,
 * which the store moves to even addresses), resident and at the floor. */
static void check_same_bits(const char *dir, const char *other) {
    golden g;
    char gdir[4200];
    snprintf(gdir, sizeof gdir, "%s/golden", dir);
    if (load_golden(gdir, &g) != 0) { CHECK(0, "load golden %s", gdir); return; }
    const int64_t n = g.n_tf, V = g.n_vocab;
    const int64_t ram[] = { 0, MS_RAM_MIN };
    for (int k = 0; k < 2; k++) {
        ms_engine *a = open_engine_with(dir, 2, NULL, ram[k]), *b = open_engine_with(other, 2, NULL, ram[k]);
        float *la = a ? teacher_force(a, g.tf, n, V, 0) : NULL, *lb = b ? teacher_force(b, g.tf, n, V, k) : NULL;
        CHECK(la && lb && memcmp(la, lb, (size_t)(n * V) * sizeof *la) == 0,
              "%s and %s (%s): different logits bits", dir, other, ram[k] ? "--ram min" : "resident");
        free(la); free(lb);
        ms_engine_close(a);
        ms_engine_close(b);
    }
    free_golden(&g);
}

int main(void) {
    const char *td = getenv("MS_TESTDATA");
    if (!td) { fprintf(stderr, "MS_TESTDATA not set\n"); CHECK(0, "MS_TESTDATA"); return CHECK_DONE("test_golden"); }
    char path[4096];
    const char *models[] = { "a", "b", "c", "d", "d_odd", "oss_a", "oss_b", "oss_c" };
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "%s/%s", td, models[i]);
        check_model(path, models[i]);
    }
    char odd[4200];
    snprintf(path, sizeof path, "%s/d", td);
    snprintf(odd, sizeof odd, "%s/d_odd", td);
    check_same_bits(path, odd);
    DIR *d = opendir(td);
    int n_traps = 0;
    if (d) {
        struct dirent *de;
        char *names[64];
        while ((de = readdir(d)) && n_traps < 64)
            if (!strncmp(de->d_name, "trap_", 5)) names[n_traps++] = strdup(de->d_name);
        closedir(d);
        for (int i = 0; i < n_traps; i++) {
            snprintf(path, sizeof path, "%s/%s", td, names[i]);
            check_trap(path, names[i]);
            free(names[i]);
        }
    }
    CHECK(n_traps >= 24, "only %d trap fixtures found (14 of K3, 10 of gpt-oss)", n_traps);
    return CHECK_DONE("test_golden");
}
