/* tests/test_prefix.c - the prompt cache (ms_session_reuse,
 * ms_session_feed_prompt): a prompt restored from a snapshot and fed the rest
 * gets the bits a cold feed gives.
 *
 * For tiny models a and c (K3) and oss_a and oss_b (gpt-oss) of $MS_TESTDATA,
 * each beside a model whose entries it must not take, the reference is each sequence
 * (a prompt, then four continuation tokens fed one at a time) fed cold in one
 * session with chunks of 32, everything resident. Then, in one engine per
 * configuration (chunks of 3, 5 and 32; 1 and 2 threads; resident, and at
 * the budget floor with an explicit cache), prompts go through
 * ms_session_feed_prompt in this order, and after each the logits of the
 * prompt's last position and of every continuation token are memcmp-equal to
 * the reference:
 *   - P1 = S + Q1 (cold: nothing reused);
 *   - P2 = S + Q2, a shared system prompt: the match ends inside a chunk
 *     (restored from a snapshot below it, or nothing), and the feed stops
 *     where P2 leaves P1, so that point is kept;
 *   - P3 = S + Q3: the match ends exactly at that snapshot (|S| reused);
 *   - P1 again: an identical prompt (all of it reused, nothing fed);
 *   - P1 with its last tokens edited (an edited last message);
 *   - P4, sharing nothing (nothing reused);
 * and with a cache the size of one prompt's snapshots, twenty prompts over three system
 * prompts: eviction keeps used <= cap, drops entries, and the bits hold.
 * The plan: --ram with the automatic size gives the cache what the store's
 * plan leaves; an explicit size the store's floor cannot spare is refused;
 * MS_PROMPT_CACHE_OFF keeps none.
 */
#include "moestream.h"

#include "check.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { MAXN = 40, NCONT = 4, NSYS = 13 };

static const int32_t SYS[NSYS] = { 3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43 };
static const int32_t CONT[NCONT] = { 17, 4, 250, 9 };

typedef struct seq {
    int32_t ids[MAXN + NCONT];
    int64_t n;                  /* prompt length; CONT follows */
} seq;

static seq make(const int32_t *sys, int64_t n_sys, const int32_t *tail, int64_t n_tail) {
    seq s;
    memcpy(s.ids, sys, (size_t)n_sys * sizeof *sys);
    memcpy(s.ids + n_sys, tail, (size_t)n_tail * sizeof *tail);
    s.n = n_sys + n_tail;
    memcpy(s.ids + s.n, CONT, sizeof CONT);
    return s;
}

typedef struct cfg {
    int64_t chunk, ram, cache;
    int threads;
} cfg;

static ms_status open_engine(const char *dir, const cfg *c, ms_engine **e) {
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.n_threads = c->threads;
    p.prefill_chunk = c->chunk;
    p.ram_bytes = c->ram;
    p.prompt_cache_bytes = c->cache;
    p.max_context = 64;
    char msg[512];
    ms_status st = ms_engine_open(&p, e, msg, sizeof msg);
    if (st != MS_OK) fprintf(stderr, "open %s: %s\n", dir, msg);
    return st;
}

/* rows [NCONT + 1][V]: the logits after the prompt's last token and after each continuation token */
static int run_seq(ms_session *s, const seq *q, int cached, int64_t V, float *rows, int64_t *n_cached) {
    *n_cached = 0;
    ms_status st = cached ? ms_session_feed_prompt(s, q->ids, q->n, n_cached)
                          : (ms_session_reset(s), ms_session_feed(s, q->ids, q->n, NULL));
    if (st != MS_OK || !ms_session_logits(s)) return -1;
    memcpy(rows, ms_session_logits(s), (size_t)V * sizeof *rows);
    for (int i = 0; i < NCONT; i++) {
        if (ms_session_feed(s, &q->ids[q->n + i], 1, NULL) != MS_OK) return -1;
        memcpy(rows + (i + 1) * V, ms_session_logits(s), (size_t)V * sizeof *rows);
    }
    return 0;
}

static float *reference(const char *dir, const seq *qs, int nq, int64_t *V) {
    const cfg c = { 32, 0, MS_PROMPT_CACHE_OFF, 2 };
    ms_engine *e;
    ms_session *s;
    if (open_engine(dir, &c, &e) != MS_OK) return NULL;
    ms_model_info info;
    ms_engine_info(e, &info);
    *V = info.n_vocab;
    float *ref = malloc((size_t)(nq * (NCONT + 1) * *V) * sizeof *ref);
    int ok = ref && ms_session_open(e, &s) == MS_OK;
    for (int i = 0; ok && i < nq; i++) {
        int64_t nc;
        ok = run_seq(s, &qs[i], 0, *V, ref + i * (NCONT + 1) * *V, &nc) == 0;
    }
    if (ok) ms_session_close(s);
    ms_engine_close(e);
    if (!ok) { free(ref); return NULL; }
    return ref;
}

static const int32_t Q1[] = { 7, 1, 200, 45, 45 }, Q2[] = { 99, 120, 5, 64, 33, 2, 18 }, Q3[] = { 13, 8 },
                     Q1E[] = { 7, 1, 200, 46, 11 }, P4[] = { 250, 11, 0, 77, 31, 31, 8, 140, 66, 9, 101 };
enum { NQ = 6 };

static void sequences(seq *qs) {
    qs[0] = make(SYS, NSYS, Q1, 5);
    qs[1] = make(SYS, NSYS, Q2, 7);
    qs[2] = make(SYS, NSYS, Q3, 2);
    qs[3] = qs[0];
    qs[4] = make(SYS, NSYS, Q1E, 5);
    qs[5] = make(P4, 11, Q3, 2);
}

/* The cases of the header in one configuration. */
static void cases(const char *dir, const char *name, const cfg *c, const seq *qs, const float *ref, int64_t V) {
    ms_engine *e;
    ms_session *s;
    if (open_engine(dir, c, &e) != MS_OK) { CHECK(0, "%s: open", name); return; }
    if (ms_session_open(e, &s) != MS_OK) { CHECK(0, "%s: session", name); ms_engine_close(e); return; }
    float *rows = malloc((size_t)((NCONT + 1) * V) * sizeof *rows);
    int64_t got[NQ];
    for (int i = 0; i < NQ; i++) {
        int r = run_seq(s, &qs[i], 1, V, rows, &got[i]);
        CHECK(r == 0, "%s chunk %lld: prompt %d failed: %s", name, (long long)c->chunk, i, ms_session_error(s));
        CHECK(r == 0 && !memcmp(rows, ref + i * (NCONT + 1) * V, (size_t)((NCONT + 1) * V) * sizeof *rows),
              "%s chunk %lld threads %d: prompt %d (%lld reused): logits differ from a cold feed", name,
              (long long)c->chunk, c->threads, i, (long long)got[i]);
    }
    /* P1 cold; P2 reuses at most its chunk-end snapshots below |S|; P3 exactly |S| */
    CHECK(got[0] == 0, "%s: P1 reused %lld", name, (long long)got[0]);
    CHECK(got[1] <= NSYS && got[1] % c->chunk == 0, "%s: P2 reused %lld", name, (long long)got[1]);
    CHECK(got[2] == NSYS, "%s: P3 reused %lld, want %d", name, (long long)got[2], NSYS);
    CHECK(got[3] == qs[3].n, "%s: identical prompt reused %lld of %lld", name, (long long)got[3], (long long)qs[3].n);
    CHECK(got[4] >= NSYS && got[4] < qs[4].n, "%s: edited prompt reused %lld", name, (long long)got[4]);
    CHECK(got[5] == 0, "%s: unrelated prompt reused %lld", name, (long long)got[5]);
    ms_stats st;
    ms_engine_stats(e, &st);
    CHECK(st.prompt_cache_entries > 0 && st.prompt_cache_bytes <= st.prompt_cache_cap, "%s: %d entries, %lld of %lld bytes",
          name, st.prompt_cache_entries, (long long)st.prompt_cache_bytes, (long long)st.prompt_cache_cap);
    CHECK(st.prompt_tokens_reused == got[1] + got[2] + got[3] + got[4], "%s: stats count %lld reused", name,
          (long long)st.prompt_tokens_reused);
    free(rows);
    ms_session_close(s);
    ms_engine_close(e);
}

/* A cache of one prompt's snapshots (~20 positions): entries are evicted, the
 * bits hold (references fed cold in the same engine, cache bypassed). */
static void eviction(const char *dir, const char *name, int64_t V) {
    const cfg probe = { 5, 0, (int64_t)1 << 30, 1 };
    ms_engine *e;
    ms_session *s, *cold;
    if (open_engine(dir, &probe, &e) != MS_OK) { CHECK(0, "%s: open", name); return; }
    /* one snapshot's size, from the stats after one prompt */
    seq q = make(SYS, NSYS, Q2, 7);
    int64_t nc;
    ms_session_open(e, &s);
    ms_session_feed_prompt(s, q.ids, q.n, &nc);
    ms_stats st;
    ms_engine_stats(e, &st);
    const int64_t one = st.prompt_cache_bytes;       /* its chunk ends and its end */
    const int n_one = st.prompt_cache_entries;
    ms_session_close(s);
    ms_engine_close(e);
    const cfg tight = { 5, 0, one, 1 };
    if (open_engine(dir, &tight, &e) != MS_OK) { CHECK(0, "%s: open", name); return; }
    ms_session_open(e, &s);
    ms_session_open(e, &cold);
    float *rows = malloc((size_t)((NCONT + 1) * V) * sizeof *rows), *want = malloc((size_t)((NCONT + 1) * V) * sizeof *want);
    int n_bad = 0, n_fail = 0;
    int64_t reused = 0;
    for (int i = 0; i < 20; i++) {
        int32_t sys[NSYS];
        for (int k = 0; k < NSYS; k++) sys[k] = (int32_t)((SYS[k] + 37 * (i / 2 % 3)) % 256);
        const int32_t tail[3] = { (int32_t)(i * 11 % 256), (int32_t)(i * 7 % 256), 5 };
        q = make(sys, NSYS, tail, 3);
        if (run_seq(s, &q, 1, V, rows, &nc) != 0 || run_seq(cold, &q, 0, V, want, &nc) != 0) { n_fail++; continue; }
        n_bad += memcmp(rows, want, (size_t)((NCONT + 1) * V) * sizeof *rows) != 0;
        ms_engine_stats(e, &st);
        CHECK(st.prompt_cache_bytes <= st.prompt_cache_cap, "%s: %lld bytes held, cap %lld", name,
              (long long)st.prompt_cache_bytes, (long long)st.prompt_cache_cap);
    }
    ms_engine_stats(e, &st);
    reused = st.prompt_tokens_reused;
    CHECK(n_fail == 0 && n_bad == 0, "%s: tight cache: %d failed, %d differ from cold", name, n_fail, n_bad);
    CHECK(st.prompt_cache_entries <= 2 * n_one && reused > 0, "%s: tight cache: %d entries, %lld reused", name,
          st.prompt_cache_entries, (long long)reused);
    free(rows);
    free(want);
    ms_session_close(s);
    ms_session_close(cold);
    ms_engine_close(e);
}

/* The plan counts the cache (see the header). */
static void budget(const char *dir, const char *name) {
    ms_engine *e;
    const cfg at_min = { 0, MS_RAM_MIN, 0, 1 };
    ms_stats st;
    if (open_engine(dir, &at_min, &e) == MS_OK) {
        ms_engine_stats(e, &st);
        CHECK(st.prompt_cache_cap == 0, "%s: --ram min, automatic: cache %lld", name, (long long)st.prompt_cache_cap);
        ms_engine_close(e);
    }
    const cfg roomy = { 0, (int64_t)1 << 30, 0, 1 };
    if (open_engine(dir, &roomy, &e) == MS_OK) {
        ms_engine_stats(e, &st);
        CHECK(st.prompt_cache_cap > 0 && st.prompt_cache_cap < roomy.ram, "%s: 1 GiB, automatic: cache %lld", name,
              (long long)st.prompt_cache_cap);
        ms_engine_close(e);
    } else {
        CHECK(0, "%s: open at 1 GiB", name);
    }
    const cfg greedy = { 0, (int64_t)1 << 30, (int64_t)1 << 30, 1 };
    e = NULL;
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.ram_bytes = greedy.ram;
    p.prompt_cache_bytes = greedy.cache;
    char msg[512];
    CHECK(ms_engine_open(&p, &e, msg, sizeof msg) == MS_E_BUDGET, "%s: a cache of the whole budget was not refused", name);
    ms_engine_close(e);
    const cfg off = { 0, 0, MS_PROMPT_CACHE_OFF, 1 };
    if (open_engine(dir, &off, &e) == MS_OK) {
        ms_engine_stats(e, &st);
        CHECK(st.prompt_cache_cap == 0, "%s: off: cache %lld", name, (long long)st.prompt_cache_cap);
        ms_engine_close(e);
    }
}

/* ---- the cache on disk ---- */

static int n_warn;
static void on_log(void *user, ms_log_level level, const char *line) {
    (void)user;
    if (level == MS_LOG_WARN && strstr(line, "prompt cache:")) n_warn++;
}

/* An engine of model dir with the cache on disk in cdir (cap bytes, fault_write). */
static ms_status open_disk(const char *dir, const char *cdir, int64_t ram_cache, int64_t cap, int64_t fault,
                           ms_engine **e) {
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.n_threads = 1;
    p.prefill_chunk = 5;
    p.prompt_cache_bytes = ram_cache;
    p.prompt_cache_dir = cdir;
    p.prompt_cache_disk_bytes = cap;
    p.prompt_cache_fault_write = fault;
    p.max_context = 64;
    p.log = on_log;
    p.log_level = MS_LOG_WARN;
    char msg[512];
    ms_status st = ms_engine_open(&p, e, msg, sizeof msg);
    if (st != MS_OK) fprintf(stderr, "open %s with %s: %s\n", dir, cdir, msg);
    return st;
}

typedef struct dir_list {
    int n, n_tmp;
    int64_t bytes;
    char names[64][256];
    int64_t len[64];            /* the entry's n, from its name */
} dir_list;

static void list_dir(const char *d, dir_list *l) {
    memset(l, 0, sizeof *l);
    DIR *dd = opendir(d);
    for (struct dirent *de; dd && (de = readdir(dd)) != NULL;) {
        char path[4200];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", d, de->d_name);
        if (de->d_name[0] == '.' && strncmp(de->d_name, ".tmp-", 5) != 0) continue;
        if (stat(path, &sb) != 0) continue;
        l->bytes += (int64_t)sb.st_size;
        if (de->d_name[0] == '.') { l->n_tmp++; continue; }
        const char *dash = strrchr(de->d_name, '-');
        if (l->n < 64) {
            snprintf(l->names[l->n], sizeof l->names[l->n], "%s", de->d_name);
            l->len[l->n++] = dash ? atoll(dash + 1) : -1;
        }
    }
    if (dd) closedir(dd);
}

static void remove_dir(const char *d) {
    dir_list l;
    list_dir(d, &l);
    DIR *dd = opendir(d);
    for (struct dirent *de; dd && (de = readdir(dd)) != NULL;) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", d, de->d_name);
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) unlink(path);
    }
    if (dd) closedir(dd);
    rmdir(d);
}

/* The NQ prompts in e, each checked against ref; got[i]: tokens reused. */
static void disk_pass(ms_engine *e, const char *what, const seq *qs, const float *ref, int64_t V, int64_t *got) {
    ms_session *s;
    if (ms_session_open(e, &s) != MS_OK) { CHECK(0, "%s: session", what); return; }
    float *rows = malloc((size_t)((NCONT + 1) * V) * sizeof *rows);
    for (int i = 0; i < NQ; i++) {
        const int r = run_seq(s, &qs[i], 1, V, rows, &got[i]);
        CHECK(r == 0 && !memcmp(rows, ref + i * (NCONT + 1) * V, (size_t)((NCONT + 1) * V) * sizeof *rows),
              "%s: prompt %d (%lld reused): logits differ from a cold feed", what, i, (long long)got[i]);
    }
    free(rows);
    ms_session_close(s);
}

/* What to do to the files of entries of length n: flip a byte, cut it in
 * half, or replace its bytes with those of `from` (another model's entry). */
static int damage(const char *d, int64_t n, int how, const char *from) {
    dir_list l;
    list_dir(d, &l);
    int done = 0;
    for (int i = 0; i < l.n; i++) {
        if (l.len[i] != n) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", d, l.names[i]);
        struct stat sb;
        if (stat(path, &sb) != 0) continue;
        if (how == 0) {
            FILE *f = fopen(path, "r+b");
            if (!f) continue;
            fseek(f, (long)sb.st_size / 2, SEEK_SET);
            const int c = fgetc(f);
            fseek(f, (long)sb.st_size / 2, SEEK_SET);
            fputc(c ^ 0x10, f);
            fclose(f);
        } else if (how == 1) {
            if (truncate(path, sb.st_size / 2) != 0) continue;
        } else {
            FILE *in = fopen(from, "rb"), *out = fopen(path, "wb");
            int c;
            while (in && out && (c = fgetc(in)) != EOF) fputc(c, out);
            if (in) fclose(in);
            if (out) fclose(out);
        }
        done++;
    }
    return done;
}

/* Restarts (new engines on the same directory) get the bits of a cold feed
 * and reuse whole prompts; damaged, truncated and foreign entries are refused
 * with a warning; a write that fails halfway leaves nothing; the cap holds. */
static void disk(const char *dir, const char *other, const char *name, const seq *qs, const float *ref, int64_t V) {
    char d[] = "/tmp/test_prefix_XXXXXX", dc[] = "/tmp/test_prefix_XXXXXX";
    if (!mkdtemp(d) || !mkdtemp(dc)) { CHECK(0, "%s: mkdtemp", name); return; }
    int64_t got[NQ];
    ms_stats st;
    ms_engine *e;
    /* the first process: the RAM cache and the disk */
    if (open_disk(dir, d, 0, 0, 0, &e) != MS_OK) { CHECK(0, "%s: open", name); return; }
    disk_pass(e, "disk, first", qs, ref, V, got);
    ms_engine_stats(e, &st);
    CHECK(st.prompt_disk_writes >= NQ - 1 && st.prompt_disk_write_failures == 0, "%s: %lld entries written", name,
          (long long)st.prompt_disk_writes);
    ms_engine_close(e);
    /* a restart: every prompt is on disk whole (P1 again: in RAM by then) */
    if (open_disk(dir, d, 0, 0, 0, &e) != MS_OK) { CHECK(0, "%s: open", name); return; }
    disk_pass(e, "disk, restarted", qs, ref, V, got);
    ms_engine_stats(e, &st);
    for (int i = 0; i < NQ; i++)
        CHECK(got[i] == qs[i].n, "%s: restarted: prompt %d reused %lld of %lld", name, i, (long long)got[i], (long long)qs[i].n);
    CHECK(st.prompt_disk_hits == NQ - 1 && st.prompt_disk_rejected == 0, "%s: restarted: %lld disk hits, %lld refused", name,
          (long long)st.prompt_disk_hits, (long long)st.prompt_disk_rejected);
    ms_engine_close(e);
    /* the other model's entry of P3 (same ids) */
    dir_list lc;
    char from[4200] = "";
    if (open_disk(other, dc, MS_PROMPT_CACHE_OFF, 0, 0, &e) == MS_OK) {
        ms_session *s;
        int64_t nc;
        if (ms_session_open(e, &s) == MS_OK) {
            ms_session_feed_prompt(s, qs[2].ids, qs[2].n, &nc);
            ms_session_close(s);
        }
        ms_engine_close(e);
    }
    list_dir(dc, &lc);
    for (int i = 0; i < lc.n; i++)
        if (lc.len[i] == qs[2].n) snprintf(from, sizeof from, "%s/%s", dc, lc.names[i]);
    CHECK(from[0] != '\0', "%s: no entry of the other model", name);
    /* P1 and P1E (18) flipped, P2 (20) truncated, P3 (15) the other model's */
    const int n_bad = damage(d, qs[0].n, 0, NULL) + damage(d, qs[1].n, 1, NULL) + damage(d, qs[2].n, 2, from);
    n_warn = 0;
    if (open_disk(dir, d, 0, 0, 0, &e) != MS_OK) { CHECK(0, "%s: open", name); return; }
    disk_pass(e, "disk, damaged", qs, ref, V, got);
    ms_engine_stats(e, &st);
    CHECK(n_bad == 4 && st.prompt_disk_rejected == n_bad && n_warn == n_bad, "%s: %d damaged, %lld refused, %d warnings",
          name, n_bad, (long long)st.prompt_disk_rejected, n_warn);
    CHECK(got[0] < qs[0].n && got[1] < qs[1].n && got[2] < qs[2].n, "%s: damaged entries used: %lld %lld %lld", name,
          (long long)got[0], (long long)got[1], (long long)got[2]);
    ms_engine_close(e);
    remove_dir(d);
    remove_dir(dc);
}

/* ENOSPC halfway through the first write: a warning, no file at all; the
 * next write goes through. Then a cap of about two entries under twenty
 * prompts: the directory stays under it. */
static void disk_full(const char *dir, const char *name, const seq *qs, const float *ref, int64_t V) {
    char d[] = "/tmp/test_prefix_XXXXXX";
    if (!mkdtemp(d)) { CHECK(0, "%s: mkdtemp", name); return; }
    ms_engine *e;
    ms_session *s, *cold;
    ms_stats st;
    dir_list l;
    int64_t nc;
    n_warn = 0;
    if (open_disk(dir, d, MS_PROMPT_CACHE_OFF, 0, 1, &e) != MS_OK || ms_session_open(e, &s) != MS_OK) {
        CHECK(0, "%s: open", name);
        return;
    }
    float *rows = malloc((size_t)((NCONT + 1) * V) * sizeof *rows), *want = malloc((size_t)((NCONT + 1) * V) * sizeof *want);
    CHECK(run_seq(s, &qs[0], 1, V, rows, &nc) == 0 && !memcmp(rows, ref, (size_t)((NCONT + 1) * V) * sizeof *rows),
          "%s: ENOSPC: logits differ", name);
    list_dir(d, &l);
    ms_engine_stats(e, &st);
    CHECK(l.n == 0 && l.n_tmp == 0 && l.bytes == 0 && st.prompt_disk_write_failures == 1 && n_warn == 1,
          "%s: ENOSPC: %d entries, %d temporary files, %lld failures, %d warnings", name, l.n, l.n_tmp,
          (long long)st.prompt_disk_write_failures, n_warn);
    run_seq(s, &qs[1], 1, V, rows, &nc);
    list_dir(d, &l);
    CHECK(l.n == 1 && l.n_tmp == 0, "%s: after ENOSPC: %d entries, %d temporary", name, l.n, l.n_tmp);
    const int64_t one = l.bytes;
    ms_session_close(s);
    ms_engine_close(e);
    remove_dir(d);
    memcpy(d + strlen(d) - 6, "XXXXXX", 6);
    if (!mkdtemp(d)) { CHECK(0, "%s: mkdtemp", name); return; }
    const int64_t cap = one * 5 / 2;
    if (open_disk(dir, d, MS_PROMPT_CACHE_OFF, cap, 0, &e) != MS_OK) { CHECK(0, "%s: open", name); return; }
    ms_session_open(e, &s);
    ms_session_open(e, &cold);
    int n_bad = 0, n_over = 0, n_miss = 0;
    for (int i = 0; i < 20; i++) {
        int32_t sys[NSYS];
        for (int k = 0; k < NSYS; k++) sys[k] = (int32_t)((SYS[k] + 37 * (i / 2 % 3)) % 256);
        /* each prompt twice in a row: the second is restored from the disk */
        const int32_t tail[3] = { (int32_t)(i / 2 * 11 % 256), (int32_t)(i / 2 * 7 % 256), 5 };
        seq q = make(sys, NSYS, tail, 3);
        int64_t nw = 0;
        if (run_seq(s, &q, 1, V, rows, &nw) != 0 || run_seq(cold, &q, 0, V, want, &nc) != 0) { n_bad++; continue; }
        n_bad += memcmp(rows, want, (size_t)((NCONT + 1) * V) * sizeof *rows) != 0;
        n_miss += i % 2 == 1 && nw != q.n;
        list_dir(d, &l);
        n_over += l.bytes > cap;
    }
    ms_engine_stats(e, &st);
    CHECK(n_bad == 0 && n_over == 0 && n_miss == 0 && st.prompt_disk_writes == 10 && st.prompt_disk_hits == 10,
          "%s: cap %lld: %d differ, %d times over the cap, %d repeats missed, %lld written, %lld disk hits", name,
          (long long)cap, n_bad, n_over, n_miss, (long long)st.prompt_disk_writes, (long long)st.prompt_disk_hits);
    free(rows);
    free(want);
    ms_session_close(s);
    ms_session_close(cold);
    ms_engine_close(e);
    remove_dir(d);
}

static void model(const char *dir, const char *other, const char *name) {
    seq qs[NQ];
    sequences(qs);
    int64_t V = 0;
    float *ref = reference(dir, qs, NQ, &V);
    if (!ref) { CHECK(0, "%s: reference", name); return; }
    const int64_t chunks[] = { 3, 5, 32 };
    for (int k = 0; k < 3; k++)
        for (int t = 1; t <= 2; t++) {
            const cfg resident = { chunks[k], 0, 0, t };
            cases(dir, name, &resident, qs, ref, V);
        }
    const cfg floor = { 5, MS_RAM_MIN, (int64_t)64 << 20, 2 };
    cases(dir, name, &floor, qs, ref, V);
    eviction(dir, name, V);
    budget(dir, name);
    disk(dir, other, name, qs, ref, V);
    disk_full(dir, name, qs, ref, V);
    free(ref);
}

/* A cut costs a pass, so ms_session_feed_prompt cuts only where a snapshot
 * can be kept. models/k3-tiny (it has a tokenizer, so a chat has message
 * ends) at the budget floor: a system message and a user message, fed through
 * the prompt cache, are cut after the system message when the cache (in RAM,
 * or on disk) can hold a snapshot there (two passes: each asks for the
 * experts its tokens use, more uses than one pass's), and go in as with no
 * cache, the same expert uses, when it is too small for one; the logits are
 * the same in all of them. */
static void one_cut(ms_engine_params *p, const int32_t *ids, int64_t n, int64_t V, int64_t *uses, float *logits,
                    int64_t *mark) {
    ms_engine *e = NULL;
    ms_session *s = NULL;
    char msg[512] = "";
    *uses = -1;
    if (ms_engine_open(p, &e, msg, sizeof msg) != MS_OK || ms_session_open(e, &s) != MS_OK) {
        CHECK(0, "marks: open: %s", msg);
        ms_engine_close(e);
        return;
    }
    *mark = ms_session_prompt_mark(s, ids, n, 0);
    ms_stats st;
    ms_engine_stats_reset(e);
    if (ms_session_feed_prompt(s, ids, n, NULL) == MS_OK && ms_session_logits(s)) {
        ms_engine_stats(e, &st);
        *uses = st.expert_requests;
        memcpy(logits, ms_session_logits(s), (size_t)V * sizeof *logits);
    }
    ms_session_close(s);
    ms_engine_close(e);
}

static void marks(void) {
    const char *dir = "models/k3-tiny";
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.n_threads = 1;
    p.ram_bytes = MS_RAM_MIN;
    p.max_context = 256;
    ms_engine *e = NULL;
    char msg[512];
    if (ms_engine_open(&p, &e, msg, sizeof msg) != MS_OK) { CHECK(0, "marks: open %s: %s", dir, msg); return; }
    ms_model_info info;
    ms_engine_info(e, &info);
    const int64_t V = info.n_vocab;
    const ms_message msgs[2] = { { .role = "system", .content = "You are a careful assistant." },
                                 { .role = "user", .content = "Say something about the sea." } };
    const ms_chat_format fmt = { NULL, 0, NULL, 1 };
    int32_t *ids = NULL;
    int64_t n = 0;
    const ms_status cs = ms_chat_tokens(e, msgs, 2, &fmt, 0, &ids, &n, msg, sizeof msg);
    ms_engine_close(e);
    if (cs != MS_OK) { CHECK(0, "marks: chat tokens: %s", msg); return; }
    char d[] = "/tmp/test_prefix_XXXXXX";
    if (!mkdtemp(d)) { CHECK(0, "marks: mkdtemp"); free(ids); return; }
    float *lg = malloc((size_t)(5 * V) * sizeof *lg);
    int64_t uses[5], mark[5];
    /* no cache; RAM 64 MiB; RAM 4 KiB; disk 64 MiB; disk 4 KiB */
    const int64_t ram[5] = { MS_PROMPT_CACHE_OFF, (int64_t)64 << 20, 4096, MS_PROMPT_CACHE_OFF, MS_PROMPT_CACHE_OFF };
    const int64_t disk[5] = { 0, 0, 0, (int64_t)64 << 20, 4096 };
    for (int i = 0; lg && i < 5; i++) {
        char sub[64];
        snprintf(sub, sizeof sub, "%s/%d", d, i);
        p.prompt_cache_bytes = ram[i];
        p.prompt_cache_dir = disk[i] ? sub : NULL;
        p.prompt_cache_disk_bytes = disk[i];
        one_cut(&p, ids, n, V, &uses[i], lg + i * V, &mark[i]);
    }
    CHECK(lg && uses[0] > 0 && mark[0] == n, "marks: no cache: %lld expert uses, mark %lld of %lld",
          (long long)uses[0], (long long)mark[0], (long long)n);
    for (int i = 1; lg && i < 5; i++) {
        const int fits = i == 1 || i == 3;
        CHECK(fits ? mark[i] < n && uses[i] > uses[0] : mark[i] == n && uses[i] == uses[0],
              "marks: case %d (a snapshot %s): mark %lld of %lld, %lld expert uses against %lld with no cache", i,
              fits ? "fits" : "does not fit", (long long)mark[i], (long long)n, (long long)uses[i], (long long)uses[0]);
        CHECK(!memcmp(lg, lg + i * V, (size_t)V * sizeof *lg), "marks: case %d: logits differ from no cache's", i);
    }
    for (int i = 3; i < 5; i++) {              /* the disk caches' folders */
        char sub[64];
        snprintf(sub, sizeof sub, "%s/%d", d, i);
        remove_dir(sub);
    }
    remove_dir(d);
    free(lg);
    free(ids);
}

/* MS_PREFIX_MEASURE=MODEL_DIR (not part of the suite): at the budget floor
 * with a 256 MiB cache and 256-token chunks, the bytes read and the seconds
 * before the first token of a prompt of 1,000 ids, then of a second one
 * sharing its first 976, then of the second fed cold; then a chat of 10 turns
 * resent whole each turn (measure_chat). docs/PERFORMANCE.md quotes them. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A chat resent whole each turn, served by two sessions in turn (as two
 * server slots would: a turn never finds its own state, only the cache's):
 * turn k sends the conversation so far plus a 40-id question, then decodes
 * a 20-id answer one token at a time, and the session's state after the
 * answer is remembered, as the server does when a reply ends. Per turn:
 * ids reused, ids fed and weight bytes read by the prompt. */
static void measure_chat(ms_engine *e, ms_session *const ss[2], int64_t n_vocab, const char *dir) {
    enum { TURNS = 10, Q = 40, A = 20 };
    static int32_t conv[TURNS * (Q + A)];
    int64_t len = 0, sent_total = 0, fed_total = 0, bytes_total = 0;
    for (int k = 0; k < TURNS; k++) {
        ms_session *s = ss[k % 2];
        for (int i = 0; i < Q; i++, len++) conv[len] = (int32_t)((len * 7919 + 13) % (n_vocab - 8));
        int64_t nc = 0;
        ms_stats st;
        ms_engine_stats_reset(e);
        const double t0 = now_s();
        const ms_status rc = ms_session_feed_prompt(s, conv, len, &nc);
        const double dt = now_s() - t0;
        ms_engine_stats(e, &st);
        const int64_t bytes = st.trunk_bytes_read + st.expert_bytes_read;
        sent_total += len;
        fed_total += len - nc;
        bytes_total += bytes;
        printf("measure %s: chat turn %d: status %d, prompt %lld, reused %lld, fed %lld, bytes read %lld, %.2f s\n", dir,
               k + 1, rc, (long long)len, (long long)nc, (long long)(len - nc), (long long)bytes, dt);
        for (int i = 0; i < A && rc == MS_OK; i++, len++) {
            conv[len] = (int32_t)((len * 104729 + 5) % (n_vocab - 8));
            ms_session_feed(s, conv + len, 1, NULL);
        }
        ms_session_remember(s, 0);
    }
    printf("measure %s: chat: %lld ids sent in %d turns (%lld distinct), %lld fed as prompt, %lld bytes read by prompts\n",
           dir, (long long)sent_total, TURNS, (long long)(len - A), (long long)fed_total, (long long)bytes_total);
}

static void measure(const char *dir) {
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.ram_bytes = MS_RAM_MIN;
    p.prompt_cache_bytes = (int64_t)256 << 20;
    p.prefill_chunk = 256;
    p.max_context = 2048;
    ms_engine *e;
    ms_session *s, *s2;
    char msg[512];
    p.n_seq = 2;
    if (ms_engine_open(&p, &e, msg, sizeof msg) != MS_OK || ms_session_open(e, &s) != MS_OK ||
        ms_session_open(e, &s2) != MS_OK) {
        fprintf(stderr, "measure: %s\n", msg);
        return;
    }
    ms_model_info info;
    ms_engine_info(e, &info);
    enum { N = 1000, TAIL = 24 };
    static int32_t a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = (int32_t)((i * 7919 + 13) % (info.n_vocab - 8));
    for (int i = N - TAIL; i < N; i++) b[i] = (int32_t)((i * 104729 + 5) % (info.n_vocab - 8));
    const int32_t *prompts[3] = { a, b, b };
    const char *what[3] = { "first", "second, sharing 976", "second, cold" };
    for (int k = 0; k < 3; k++) {
        int64_t nc = 0;
        ms_engine_stats_reset(e);
        const double t0 = now_s();
        ms_status st = k < 2 ? ms_session_feed_prompt(s, prompts[k], N, &nc)
                             : (ms_session_reset(s), ms_session_feed(s, prompts[k], N, NULL));
        const double dt = now_s() - t0;
        ms_stats stt;
        ms_engine_stats(e, &stt);
        printf("measure %s: %s: status %d, %.2f s, chunk %lld, reused %lld, fed %lld, bytes read %lld, cache %lld bytes in %d\n", dir,
               what[k], st, dt, (long long)info.prefill_chunk, (long long)nc, (long long)stt.n_tokens_prefill,
               (long long)(stt.trunk_bytes_read + stt.expert_bytes_read), (long long)stt.prompt_cache_bytes,
               stt.prompt_cache_entries);
    }
    ms_session_reset(s);
    ms_session *const ss[2] = { s, s2 };
    measure_chat(e, ss, info.n_vocab, dir);
    ms_session_close(s2);
    ms_session_close(s);
    ms_engine_close(e);
}

int main(void) {
    if (getenv("MS_PREFIX_MEASURE")) {
        measure(getenv("MS_PREFIX_MEASURE"));
        return 0;
    }
    const char *td = getenv("MS_TESTDATA");
    if (!td) { CHECK(0, "MS_TESTDATA not set"); return CHECK_DONE("test_prefix"); }
    /* each with another model (of the other family too) whose entries must not be taken */
    const char *models[] = { "a", "c", "oss_a", "oss_b" }, *others[] = { "c", "oss_a", "a", "oss_a" };
    for (int i = 0; i < 4; i++) {
        char path[4096], other[4096];
        snprintf(path, sizeof path, "%s/%s", td, models[i]);
        snprintf(other, sizeof other, "%s/%s", td, others[i]);
        model(path, other, models[i]);
    }
    marks();
    return CHECK_DONE("test_prefix");
}
