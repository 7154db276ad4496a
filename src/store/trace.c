/* store/trace.c - the expert request trace (see trace.h).
 *
 * Belady's MIN with batches: within a batch every requested region must be
 * resident at once, so a region of the current batch is never a victim. The
 * victim search is a max-heap on "position of the next request" with lazy
 * deletion (an entry is live while its region is resident and its stamp
 * equals the region's current next position). Regions of the current batch
 * carry next positions inside the batch, below every other resident's, so
 * the heap's top is a region of the batch only when nothing else is resident,
 * which the capacity check makes impossible when a victim is needed.
 */
#include "store/trace.h"

#include "store/cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ms_trace_writer {
    FILE *f;
    char *path;
    int failed;
    int saved_errno;
};

ms_status ms_trace_open(const char *path, ms_trace_writer **out, ms_err *err) {
    *out = NULL;
    ms_trace_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return ms_err_set(err, MS_E_NOMEM, "trace: out of memory");
    }
    w->f = fopen(path, "w");
    if (!w->f) {
        ms_status st = ms_err_set(err, MS_E_IO, "%s: cannot create the trace file: %s", path, strerror(errno));
        free(w->path);
        free(w);
        return st;
    }
    if (fputs("# moestream expert trace v1\n# batch region\n", w->f) < 0) {
        w->failed = 1;
        w->saved_errno = errno;
    }
    *out = w;
    return MS_OK;
}

void ms_trace_write(ms_trace_writer *w, int64_t batch, const int *regions, int n) {
    if (!w || w->failed) return;
    for (int i = 0; i < n; i++)
        if (fprintf(w->f, "%lld %d\n", (long long)batch, regions[i]) < 0) {
            w->failed = 1;
            w->saved_errno = errno;
            return;
        }
}

ms_status ms_trace_close(ms_trace_writer *w, ms_err *err) {
    if (!w) return MS_OK;
    if (fflush(w->f) != 0 && !w->failed) { w->failed = 1; w->saved_errno = errno; }
    if (fclose(w->f) != 0 && !w->failed) { w->failed = 1; w->saved_errno = errno; }
    ms_status st = MS_OK;
    if (w->failed)
        st = ms_err_set(err, MS_E_IO, "%s: writing the trace failed: %s", w->path, strerror(w->saved_errno));
    free(w->path);
    free(w);
    return st;
}

/* ------------------------------------------------------------------ load */

typedef struct trace {
    int32_t *key;           /* [n] */
    int64_t *bstart;        /* [n_batches + 1]: first request of each batch */
    int64_t n, n_batches;
    int n_keys;             /* max region id + 1 */
} trace;

static void trace_free(trace *t) {
    free(t->key);
    free(t->bstart);
    memset(t, 0, sizeof *t);
}

static ms_status push(trace *t, int64_t *cap_k, int64_t *cap_b, int32_t key, int new_batch,
                      ms_err *err) {
    if (t->n == *cap_k) {
        int64_t cap = *cap_k ? *cap_k * 2 : 4096;
        int32_t *k = realloc(t->key, (size_t)cap * sizeof *k);
        if (!k) return ms_err_set(err, MS_E_NOMEM, "trace: out of memory");
        t->key = k;
        *cap_k = cap;
    }
    if (new_batch) {
        if (t->n_batches + 2 > *cap_b) {
            int64_t cap = *cap_b ? *cap_b * 2 : 1024;
            int64_t *b = realloc(t->bstart, (size_t)cap * sizeof *b);
            if (!b) return ms_err_set(err, MS_E_NOMEM, "trace: out of memory");
            t->bstart = b;
            *cap_b = cap;
        }
        t->bstart[t->n_batches++] = t->n;
    }
    t->key[t->n++] = key;
    return MS_OK;
}

static ms_status trace_load(const char *path, trace *t, ms_err *err) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) return ms_err_set(err, MS_E_IO, "%s: cannot open the trace: %s", path, strerror(errno));
    char line[256];
    int64_t lineno = 0, cap_k = 0, cap_b = 0, prev_batch = -1;
    ms_status st = MS_OK;
    while (st == MS_OK && fgets(line, sizeof line, f)) {
        lineno++;
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\n' || *p == '\r' || *p == '\0') continue;
        long long b, r;
        char tail[8];
        int got = sscanf(p, "%lld %lld %7s", &b, &r, tail);
        if (got != 2 || b < 0 || r < 0 || r > INT32_MAX - 1 || !strchr(line, '\n')) {
            st = ms_err_set(err, MS_E_MODEL, "%s:%lld: expected 'batch region' (two non-negative integers)",
                            path, (long long)lineno);
            break;
        }
        if (b < prev_batch) {
            st = ms_err_set(err, MS_E_MODEL, "%s:%lld: batch %lld after batch %lld (batch numbers must not go down)",
                            path, (long long)lineno, b, (long long)prev_batch);
            break;
        }
        st = push(t, &cap_k, &cap_b, (int32_t)r, b != prev_batch, err);
        prev_batch = b;
        if (r + 1 > t->n_keys) t->n_keys = (int)(r + 1);
    }
    if (st == MS_OK && ferror(f)) st = ms_err_set(err, MS_E_IO, "%s: read error", path);
    fclose(f);
    if (st == MS_OK && !t->bstart && !(t->bstart = malloc(sizeof *t->bstart)))
        st = ms_err_set(err, MS_E_NOMEM, "trace: out of memory");
    if (st != MS_OK) { trace_free(t); return st; }
    t->bstart[t->n_batches] = t->n;
    return MS_OK;
}

/* Checks distinct regions per batch; fills res->max_batch / n_regions. */
static ms_status trace_check(const char *path, const trace *t, ms_trace_result *res, ms_err *err) {
    int64_t *seen = malloc(((size_t)t->n_keys + 1) * sizeof *seen);
    if (!seen) return ms_err_set(err, MS_E_NOMEM, "trace: out of memory");
    for (int k = 0; k < t->n_keys; k++) seen[k] = -1;
    for (int64_t b = 0; b < t->n_batches; b++) {
        int64_t n = t->bstart[b + 1] - t->bstart[b];
        if (n > res->max_batch) res->max_batch = (int)n;
        for (int64_t i = t->bstart[b]; i < t->bstart[b + 1]; i++) {
            if (seen[t->key[i]] == b) {
                free(seen);
                return ms_err_set(err, MS_E_MODEL, "%s: region %d appears twice in batch %lld",
                                  path, t->key[i], (long long)b);
            }
            if (seen[t->key[i]] < 0) res->n_regions++;
            seen[t->key[i]] = b;
        }
    }
    free(seen);
    return MS_OK;
}

/* ---------------------------------------------------------------- replay */

static ms_status replay_cache(const trace *t, const char *policy, int capacity,
                              ms_trace_result *res, ms_err *err) {
    ms_cache c;
    ms_status st = ms_cache_init(&c, capacity, t->n_keys, policy, err);
    if (st != MS_OK) return st;
    for (int64_t b = 0; b < t->n_batches; b++) {
        const int64_t i0 = t->bstart[b], i1 = t->bstart[b + 1];
        for (int64_t i = i0; i < i1; i++) {
            int s = ms_cache_find(&c, t->key[i]);
            if (s < 0) continue;
            res->hits++;
            ms_cache_touch(&c, s);
            c.slots[s].pins++;
        }
        for (int64_t i = i0; i < i1; i++) {
            if (ms_cache_find(&c, t->key[i]) >= 0) continue;
            int ek, ep;
            int s = ms_cache_reserve(&c, t->key[i], &ek, &ep);
            MS_ASSERT(s >= 0);      /* capacity >= batch size, checked */
            if (ek >= 0) res->evictions++;
            ms_cache_publish(&c, s);
            c.slots[s].pins++;
        }
        for (int64_t i = i0; i < i1; i++) c.slots[ms_cache_find(&c, t->key[i])].pins--;
    }
    ms_cache_free(&c);
    return MS_OK;
}

typedef struct hent { int64_t next; int32_t key; } hent;

static void heap_push(hent *h, int64_t *n, hent e) {
    int64_t i = (*n)++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (h[p].next >= e.next) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static hent heap_pop(hent *h, int64_t *n) {
    hent top = h[0], last = h[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].next > h[c].next) c++;
        if (h[c].next <= last.next) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static ms_status replay_belady(const trace *t, int capacity, ms_trace_result *res, ms_err *err) {
    const int64_t never = INT64_MAX;
    int64_t *next_occ = malloc(((size_t)t->n + 1) * sizeof *next_occ);
    int64_t *last = malloc(((size_t)t->n_keys + 1) * sizeof *last);
    int64_t *cur = malloc(((size_t)t->n_keys + 1) * sizeof *cur);
    uint8_t *res_in = calloc((size_t)t->n_keys + 1, 1);
    hent *heap = malloc(((size_t)t->n * 2 + 1) * sizeof *heap);
    if (!next_occ || !last || !cur || !res_in || !heap) {
        free(next_occ); free(last); free(cur); free(res_in); free(heap);
        return ms_err_set(err, MS_E_NOMEM, "trace: out of memory");
    }
    for (int k = 0; k < t->n_keys; k++) last[k] = never;
    for (int64_t i = t->n - 1; i >= 0; i--) {
        next_occ[i] = last[t->key[i]];
        last[t->key[i]] = i;
    }
    int64_t hn = 0;
    int n_res = 0;
    for (int64_t b = 0; b < t->n_batches; b++) {
        const int64_t i0 = t->bstart[b], i1 = t->bstart[b + 1];
        for (int64_t i = i0; i < i1; i++)
            if (res_in[t->key[i]]) res->hits++;
        for (int64_t i = i0; i < i1; i++) {
            const int32_t k = t->key[i];
            if (res_in[k]) continue;
            if (n_res == capacity) {
                for (;;) {
                    MS_ASSERT(hn > 0);
                    hent e = heap_pop(heap, &hn);
                    if (!res_in[e.key] || cur[e.key] != e.next) continue;     /* stale */
                    MS_ASSERT(e.next >= i1);    /* never a region of this batch */
                    res_in[e.key] = 0;
                    n_res--;
                    res->evictions++;
                    break;
                }
            }
            res_in[k] = 1;
            n_res++;
            cur[k] = i;
            heap_push(heap, &hn, (hent){ i, k });
        }
        for (int64_t i = i0; i < i1; i++) {
            cur[t->key[i]] = next_occ[i];
            heap_push(heap, &hn, (hent){ next_occ[i], t->key[i] });
        }
        /* keep the heap bounded: drop stale entries when it doubles the live count */
        if (hn > 2 * (int64_t)capacity + 2 * (i1 - i0) + 64) {
            int64_t w = 0;
            for (int64_t j = 0; j < hn; j++)
                if (res_in[heap[j].key] && cur[heap[j].key] == heap[j].next) heap[w++] = heap[j];
            int64_t m = 0;
            for (int64_t j = 0; j < w; j++) heap_push(heap, &m, heap[j]);
            hn = m;
        }
    }
    free(next_occ); free(last); free(cur); free(res_in); free(heap);
    return MS_OK;
}

ms_status ms_trace_replay(const char *path, const char *policy, int capacity,
                          ms_trace_result *res, ms_err *err) {
    memset(res, 0, sizeof *res);
    const char *name = policy ? policy : "lru";
    int belady = strcmp(name, "belady") == 0 || strcmp(name, "min") == 0;
    if (!belady && !ms_policy_find(name))
        return ms_err_set(err, MS_E_USAGE, "unknown replay policy '%s' (known: %s, belady, min)",
                          name, ms_policy_names());
    if (capacity < 1) return ms_err_set(err, MS_E_USAGE, "replay: capacity must be >= 1, got %d", capacity);
    trace t;
    ms_status st = trace_load(path, &t, err);
    if (st != MS_OK) return st;
    if ((st = trace_check(path, &t, res, err)) == MS_OK) {
        if (res->max_batch > capacity)
            st = ms_err_set(err, MS_E_USAGE, "replay: capacity %d is smaller than the largest batch (%d regions)",
                            capacity, res->max_batch);
        else if (belady) st = replay_belady(&t, capacity, res, err);
        else st = replay_cache(&t, name, capacity, res, err);
    }
    res->requests = t.n;
    res->batches = t.n_batches;
    res->misses = res->requests - res->hits;
    res->hit_rate = t.n > 0 ? (double)res->hits / (double)t.n : 0.0;
    trace_free(&t);
    return st;
}
