/* tests/test_store.c - the store: plan, trunk ring, expert cache, faults, traces.
 *
 * Fixture: two shard files (9 and 7 MiB of seeded pseudo-random bytes, in a
 *   mkdtemp directory under $TMPDIR or /tmp) and a region table shaped like
 *   the model's: two GLOBAL regions (one small, one "embedding" marked sparse),
 *   seven TRUNK regions of varied sizes and 1..3 ranges at unaligned offsets
 *   across both shards, and 24 EXPERT regions of equal size declared between
 *   the trunk regions the way the model declares a layer's experts after its
 *   dense part. The workload walks the trunk in order (the cyclic pass), asks
 *   for a random batch of a "layer's" experts after every second trunk region,
 *   reads parts of the sparse region and of a trunk region, and compares
 *   EVERY byte handed out with the file's bytes.
 * Covered:
 *   - plan: hand-computed plans (non-monotonic trunk cost, floor, splits,
 *     overrides, refusals with both numbers in the message);
 *   - every budget from the floor to everything resident (8 points) x each
 *     backend x each policy x read-ahead (and hints) on / off;
 *   - the cache under pressure (4 slots for 24 experts);
 *   - statistics: resident hits vs prefetch hits, streamed bytes per pass at
 *     the floor, zero trunk / expert bytes when everything is resident,
 *     read-ahead counters;
 *   - faults at every request index of a short workload: EIO -> the call fails
 *     with MS_E_IO and hands out nothing (or, for a read-ahead, the demand
 *     re-read succeeds); TRANSIENT / SHORT -> identical bytes; CORRUPT -> the
 *     corrupted bytes ARE handed out: the store cannot detect silent
 *     corruption (no checksums in the format); this test documents that;
 *   - traces: hand-computed LRU / S3-FIFO / Belady hit counts, malformed
 *     traces, and a live run whose trace replays to the live hit count.
 */
#include "check.h"

#include "base/bufalloc.h"
#include "base/io.h"
#include "store/cache.h"
#include "store/plan.h"
#include "store/store.h"
#include "store/trace.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB ((int64_t)1 << 20)
#define N_SHARD 2
#define N_EXP 24
#define EXP_PER_LAYER 8
#define MAX_BATCH 4
#define MAX_RANGES 3
#define MAX_REGIONS 64

/* ------------------------------------------------------------ fixture */

typedef struct fixture {
    char dir[256];
    char path[N_SHARD][300];
    uint8_t *data[N_SHARD];
    int64_t size[N_SHARD];
    int64_t cursor[N_SHARD];
    uint64_t rng;
    /* declared regions */
    int n;
    ms_region_class cls[MAX_REGIONS];
    int n_ranges[MAX_REGIONS];
    ms_range ranges[MAX_REGIONS][MAX_RANGES];
    int64_t pos[MAX_REGIONS][MAX_RANGES];
    int sparse[MAX_REGIONS];
    int trunk[16], n_trunk;         /* TRUNK ids in declaration order */
    int expert[N_EXP];              /* EXPERT ids */
    int global_small, global_sparse;
} fixture;

static uint64_t rnd(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}

static int64_t carve(fixture *fx, int shard, int64_t n) {
    fx->cursor[shard] += (int64_t)(rnd(&fx->rng) % 5000);
    int64_t off = fx->cursor[shard];
    fx->cursor[shard] += n;
    if (fx->cursor[shard] > fx->size[shard]) { fprintf(stderr, "fixture overflow\n"); abort(); }
    return off;
}

/* Describe region i: n ranges of the given sizes on the given shards. A
 * range at an odd offset is marked `down` (moved to an even place once it
 * has landed, as BF16 data at an odd offset is) unless it is the first range
 * of every fourth region: both kinds go through every test below. */
static int describe(fixture *fx, ms_region_class cls, int n, const int64_t *bytes, const int *shard) {
    int i = fx->n++;
    fx->cls[i] = cls;
    fx->n_ranges[i] = n;
    for (int k = 0; k < n; k++) {
        const int64_t off = carve(fx, shard[k], bytes[k]);
        fx->ranges[i][k] = (ms_range){ shard[k], off, bytes[k], (int)(off & 1) && (k > 0 || i % 4 != 3) };
    }
    if (cls == MS_REGION_TRUNK) fx->trunk[fx->n_trunk++] = i;
    return i;
}

static int fixture_make(fixture *fx) {
    memset(fx, 0, sizeof *fx);
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof fx->dir, "%s/ms_store_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx->dir)) return -1;
    fx->size[0] = 9 * MIB + 123;
    fx->size[1] = 7 * MIB + 77;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    char dir[256];
    memcpy(dir, fx->dir, sizeof dir);
    for (int sh = 0; sh < N_SHARD; sh++) {
        snprintf(fx->path[sh], sizeof fx->path[sh], "%s/shard%d.bin", dir, sh);
        fx->data[sh] = malloc((size_t)fx->size[sh]);
        if (!fx->data[sh]) return -1;
        for (int64_t i = 0; i < fx->size[sh]; i++) fx->data[sh][i] = (uint8_t)(rnd(&seed) >> 24);
        FILE *f = fopen(fx->path[sh], "wb");
        if (!f) return -1;
        size_t w = fwrite(fx->data[sh], 1, (size_t)fx->size[sh], f);
        if (fclose(f) != 0 || w != (size_t)fx->size[sh]) return -1;
        fx->cursor[sh] = 4096 + 13 + sh * 1000;
    }
    fx->rng = 12345;
    int e = 0;
    fx->global_small = describe(fx, MS_REGION_GLOBAL, 2, (int64_t[]){ 3000, 2000 }, (int[]){ 0, 1 });
    fx->global_sparse = describe(fx, MS_REGION_GLOBAL, 1, (int64_t[]){ 600000 }, (int[]){ 1 });
    fx->sparse[fx->global_sparse] = 1;
#define EXPERTS() for (int k = 0; k < EXP_PER_LAYER; k++, e++) \
        fx->expert[e] = describe(fx, MS_REGION_EXPERT, 2, (int64_t[]){ 150000, 50000 }, \
                                 (int[]){ e % 2, e % 2 })
    describe(fx, MS_REGION_TRUNK, 1, (int64_t[]){ 700000 }, (int[]){ 0 });
    describe(fx, MS_REGION_TRUNK, 2, (int64_t[]){ 500000, 300000 }, (int[]){ 0, 1 });
    EXPERTS();
    describe(fx, MS_REGION_TRUNK, 1, (int64_t[]){ 1300000 }, (int[]){ 0 });
    describe(fx, MS_REGION_TRUNK, 3, (int64_t[]){ 200000, 250000, 100000 }, (int[]){ 1, 0, 1 });
    EXPERTS();
    describe(fx, MS_REGION_TRUNK, 1, (int64_t[]){ 900000 }, (int[]){ 1 });
    describe(fx, MS_REGION_TRUNK, 1, (int64_t[]){ 400000 }, (int[]){ 0 });
    EXPERTS();
    describe(fx, MS_REGION_TRUNK, 1, (int64_t[]){ 1100000 }, (int[]){ 1 });
#undef EXPERTS
    return 0;
}

static void fixture_free(fixture *fx) {
    for (int sh = 0; sh < N_SHARD; sh++) {
        unlink(fx->path[sh]);
        free(fx->data[sh]);
    }
    char p[400];
    snprintf(p, sizeof p, "%s/trace.txt", fx->dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/hand.txt", fx->dir);
    unlink(p);
    rmdir(fx->dir);
}

static int64_t region_data_bytes(const fixture *fx, int i) {
    int64_t n = 0;
    for (int k = 0; k < fx->n_ranges[i]; k++) n += fx->ranges[i][k].n_bytes;
    return n;
}

/* Mismatching bytes between a handed-out region buffer and the files. */
static int64_t verify_region(const fixture *fx, int i, const uint8_t *p) {
    int64_t bad = 0;
    for (int k = 0; k < fx->n_ranges[i]; k++) {
        const ms_range *g = &fx->ranges[i][k];
        const uint8_t *want = fx->data[g->shard] + g->offset;
        if (memcmp(p + fx->pos[i][k], want, (size_t)g->n_bytes) != 0)
            for (int64_t j = 0; j < g->n_bytes; j++) bad += p[fx->pos[i][k] + j] != want[j];
    }
    return bad;
}

/* The bytes [rel, rel + n) of region i's concatenated ranges, from the files. */
static void expect_part(const fixture *fx, int i, int64_t rel, int64_t n, uint8_t *out) {
    for (int k = 0; k < fx->n_ranges[i] && n > 0; k++) {
        const ms_range *g = &fx->ranges[i][k];
        if (rel >= g->n_bytes) { rel -= g->n_bytes; continue; }
        int64_t take = g->n_bytes - rel < n ? g->n_bytes - rel : n;
        memcpy(out, fx->data[g->shard] + g->offset + rel, (size_t)take);
        out += take; n -= take; rel = 0;
    }
}

typedef struct cfg {
    int64_t ram;
    ms_io_kind kind;
    const char *policy;
    int readahead, hints;
    int min_slots;
    int64_t trunk_bytes, expert_bytes;
    ms_io_fault fault;
    const char *trace;
    int ring;               /* ring slots (0 = default 2) */
} cfg;

/* reads in flight of the stores store_make opens (test_depth raises it) */
static int g_qd = 3;

static ms_status store_make(fixture *fx, const cfg *c, ms_store **out, ms_err *err) {
    ms_io_params io = ms_io_default_params();
    io.kind = c->kind;
    io.queue_depth = g_qd;
    io.chunk_bytes = 128 << 10;     /* several chunks per region */
    io.fault = c->fault;
    ms_store_params p = ms_store_default_params();
    p.ram_bytes = c->ram;
    p.trunk_bytes = c->trunk_bytes;
    p.expert_bytes = c->expert_bytes;
    p.min_expert_slots = c->min_slots ? c->min_slots : MAX_BATCH;
    p.no_readahead = !c->readahead;
    p.policy = c->policy;
    p.trace_path = c->trace;
    p.ring_slots = c->ring;
    p.io = &io;
    const char *paths[N_SHARD] = { fx->path[0], fx->path[1] };
    ms_status st = ms_store_open_paths(&p, paths, N_SHARD, out, err);
    if (st != MS_OK) return st;
    for (int i = 0; i < fx->n; i++) {
        int id = ms_store_add_region(*out, fx->cls[i], fx->ranges[i], fx->n_ranges[i], fx->pos[i], err);
        if (id != i) return id < 0 ? (ms_status)id : MS_E_INTERNAL;
        if (fx->sparse[i]) ms_store_mark_sparse(*out, i);
    }
    return ms_store_start(*out, err);
}

/* The plan a store opened with c makes (a throwaway store; ms_plan holds
 * only numbers, so the copy outlives it). */
static ms_plan probe_plan(fixture *fx, const cfg *c) {
    ms_store *s = NULL;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = store_make(fx, c, &s, &err);
    const ms_plan *p = ms_store_get_plan(s);
    CHECK(p != NULL, "probe plan: %s", st ? err.msg : "no plan");
    ms_plan out;
    if (p) out = *p;
    else memset(&out, 0, sizeof out);
    ms_store_close(s);
    return out;
}

/* --------------------------------------------------------------- workload */

typedef struct wl_result {
    int64_t bad;            /* mismatching bytes handed out */
    int64_t handed_on_fail; /* pointers handed out by a failing call */
    int64_t batches;
    int last[MAX_BATCH], n_last;    /* the last expert batch asked for */
} wl_result;

/* `cycles` passes over the trunk (the first `n_trunk` regions of it), expert
 * batches after every odd trunk region, parts of the sparse region and of a
 * trunk region. Returns the first failing status (the run stops there). */
static ms_status workload(fixture *fx, ms_store *s, int cycles, int n_trunk, uint64_t seed, int hints,
                          wl_result *res, ms_err *err) {
    uint64_t rs = seed | 1;
    int cap = ms_store_expert_capacity(s);
    int bmax = cap < MAX_BATCH ? cap : MAX_BATCH;
    /* the batch after trunk region 2l+1 uses layer l's experts; precompute
     * every batch of the run so a hint can name the next one */
    enum { MAXB = 64 };
    int batch[MAXB][MAX_BATCH], bn[MAXB], nb = 0;
    for (int c = 0; c < cycles; c++)
        for (int t = 1; t < n_trunk; t += 2) {
            int layer = (t / 2) % 3;
            MS_ASSERT(nb < MAXB);
            bn[nb] = 1 + (int)(rnd(&rs) % (uint64_t)bmax);
            for (int j = 0; j < bn[nb]; j++) {
                int e, dup;
                do {
                    e = fx->expert[layer * EXP_PER_LAYER + (int)(rnd(&rs) % EXP_PER_LAYER)];
                    dup = 0;
                    for (int q = 0; q < j; q++) dup |= batch[nb][q] == e;
                } while (dup);
                batch[nb][j] = e;
            }
            nb++;
        }
    int ib = 0;
    uint8_t *part = malloc(70000), *want = malloc(70000);
    ms_status st = MS_OK;
    for (int c = 0; c < cycles && st == MS_OK; c++) {
        const uint8_t *g = ms_store_acquire(s, fx->global_small, err);
        if (!g) { st = err->status; break; }
        res->bad += verify_region(fx, fx->global_small, g);
        ms_store_release(s, fx->global_small);
        /* a row of the sparse region */
        int64_t rel = (int64_t)(rnd(&rs) % 599) * 1000, n = 1000 + (int64_t)(rnd(&rs) % 7);
        if (rel + n > 600000) n = 600000 - rel;
        memset(part, 0, (size_t)n);
        if ((st = ms_store_read_part(s, fx->global_sparse, rel, n, part, err)) != MS_OK) break;
        expect_part(fx, fx->global_sparse, rel, n, want);
        for (int64_t i = 0; i < n; i++) res->bad += part[i] != want[i];
        for (int t = 0; t < n_trunk && st == MS_OK; t++) {
            int id = fx->trunk[t];
            const uint8_t *p = ms_store_acquire(s, id, err);
            if (!p) { st = err->status; break; }
            res->bad += verify_region(fx, id, p);
            if (t % 2 == 1) {
                const uint8_t *ptrs[MAX_BATCH];
                for (int j = 0; j < MAX_BATCH; j++) ptrs[j] = (const uint8_t *)1;
                st = ms_store_acquire_batch(s, batch[ib], bn[ib], ptrs, err);
                res->batches++;
                memcpy(res->last, batch[ib], sizeof res->last);
                res->n_last = bn[ib];
                if (st != MS_OK) {
                    for (int j = 0; j < bn[ib]; j++) res->handed_on_fail += ptrs[j] != NULL;
                    ms_store_release(s, id);
                    break;
                }
                for (int j = 0; j < bn[ib]; j++) res->bad += verify_region(fx, batch[ib][j], ptrs[j]);
                for (int j = 0; j < bn[ib]; j++) ms_store_release(s, batch[ib][j]);
                ib++;
                if (hints && ib < nb) {
                    /* a hint that is half right: the next batch plus a wrong guess */
                    int h[MAX_BATCH + 1], nh = 0;
                    for (int j = 0; j < bn[ib]; j += 2) h[nh++] = batch[ib][j];
                    h[nh++] = fx->expert[(int)(rnd(&rs) % N_EXP)];
                    int dup = 0;
                    for (int j = 0; j + 1 < nh; j++) dup |= h[j] == h[nh - 1];
                    ms_store_hint(s, h, nh - dup);
                }
            }
            /* a part of a trunk region now and then (may be streamed) */
            if (t == 2) {
                int64_t dbytes = region_data_bytes(fx, id);
                int64_t r0 = (int64_t)(rnd(&rs) % (uint64_t)(dbytes - 65536)), pn = 65536;
                if ((st = ms_store_read_part(s, id, r0, pn, part, err)) != MS_OK) {
                    ms_store_release(s, id);
                    break;
                }
                expect_part(fx, id, r0, pn, want);
                for (int64_t i = 0; i < pn; i++) res->bad += part[i] != want[i];
            }
            ms_store_release(s, id);
        }
    }
    free(part);
    free(want);
    return st;
}

/* After a failed call: every region can still be acquired (the fault hit one
 * request) and every byte is right - a failed read left no slot READY with
 * stale or partial bytes. Returns the number of failed acquires. */
static int recheck(fixture *fx, ms_store *s, wl_result *res) {
    ms_err err;
    int fails = 0;
    /* the batch that may have failed first, before other misses evict its slots */
    const uint8_t *ptrs[MAX_BATCH];
    ms_err_clear(&err);
    if (res->n_last > 0 && ms_store_acquire_batch(s, res->last, res->n_last, ptrs, &err) == MS_OK) {
        for (int j = 0; j < res->n_last; j++) res->bad += verify_region(fx, res->last[j], ptrs[j]);
        for (int j = 0; j < res->n_last; j++) ms_store_release(s, res->last[j]);
    } else if (res->n_last > 0) {
        fails++;
    }
    for (int i = 0; i < fx->n; i++) {
        if (fx->sparse[i]) continue;
        ms_err_clear(&err);
        const uint8_t *p = ms_store_acquire(s, i, &err);
        if (!p) { fails++; continue; }
        res->bad += verify_region(fx, i, p);
        ms_store_release(s, i);
    }
    return fails;
}

/* -------------------------------------------------------------- plan tests */

static void test_plan_hand(void) {
    /* GLOBAL 2 MiB; TRUNK 8, 6, 2 MiB; 10 EXPERTs of 2 MiB. Trunk cost of
     * pinning the k largest with 2 ring slots: k=0: 0+2x8=16, k=1: 8+2x6=20,
     * k=2: 14+2x2=18, k=3: 16+0=16 MiB - not monotonic. */
    ms_plan_region r[14];
    r[0] = (ms_plan_region){ MS_REGION_GLOBAL, 2 * MIB, 0 };
    r[1] = (ms_plan_region){ MS_REGION_TRUNK, 6 * MIB, 0 };
    r[2] = (ms_plan_region){ MS_REGION_TRUNK, 8 * MIB, 0 };
    r[3] = (ms_plan_region){ MS_REGION_TRUNK, 2 * MIB, 0 };
    for (int i = 0; i < 10; i++) r[4 + i] = (ms_plan_region){ MS_REGION_EXPERT, 2 * MIB, 0 };
    ms_plan_input in = { r, 14, 0, 0, 0, 2, 2, 256 << 10 };
    ms_plan p;
    uint8_t res[14];
    ms_err err;
    const int64_t bounce = 256 << 10;

    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_OK, "%s", err.msg);
    CHECK(p.floor_bytes == 2 * MIB + 16 * MIB + 4 * MIB + bounce, "floor %lld", (long long)p.floor_bytes);
    CHECK(p.full_bytes == 38 * MIB, "full %lld", (long long)p.full_bytes);
    CHECK(p.total_bytes == 38 * MIB && p.n_trunk_pinned == 3 && p.experts_resident && p.bounce_bytes == 0,
          "unlimited: total %lld pinned %d", (long long)p.total_bytes, p.n_trunk_pinned);
    CHECK(res[1] && res[2] && res[3] && res[4], "unlimited: all resident");

    /* at the floor the planner takes the k with most bytes saved: all pinned */
    in.ram_bytes = p.floor_bytes;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_OK, "%s", err.msg);
    CHECK(p.n_trunk_pinned == 3 && p.n_ring == 0 && p.n_expert_slots == 2 && p.total_bytes == in.ram_bytes,
          "floor plan: pinned %d ring %d slots %d", p.n_trunk_pinned, p.n_ring, p.n_expert_slots);
    CHECK(res[2] && !res[4], "floor plan residency");

    /* 30 MiB: trunk first (16), then 5 expert slots (10), bounce */
    in.ram_bytes = 30 * MIB;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_OK, "%s", err.msg);
    CHECK(p.n_trunk_pinned == 3 && p.n_expert_slots == 5 && p.total_bytes == 28 * MIB + bounce,
          "30 MiB: pinned %d slots %d total %lld", p.n_trunk_pinned, p.n_expert_slots,
          (long long)p.total_bytes);

    /* below the floor: refused with both numbers */
    in.ram_bytes = 22 * MIB;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_E_BUDGET, "22 MiB accepted");
    char need[64], have[64];
    snprintf(need, sizeof need, "needs %lld bytes", (long long)(22 * MIB + bounce));
    snprintf(have, sizeof have, "budget %lld bytes", (long long)(22 * MIB));
    CHECK(strstr(err.msg, need) && strstr(err.msg, have), "message: %s", err.msg);
    CHECK(p.floor_bytes == 22 * MIB + bounce && p.total_bytes == p.floor_bytes && p.n_expert_slots == 2,
          "the refused floor plan is returned");

    /* trunk override: 17 MiB allows k=0 or k=3 (16): the most pinned wins */
    in.ram_bytes = 0;
    in.trunk_bytes = 17 * MIB;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_OK && p.n_trunk_pinned == 3, "trunk 17 MiB");
    in.trunk_bytes = 15 * MIB;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_E_BUDGET && strstr(err.msg, "16777216"),
          "trunk 15 MiB: %s", err.msg);
    /* expert override: 7 MiB = 3 slots; 3 MiB < 2 slots -> refused */
    in.trunk_bytes = 0;
    in.expert_bytes = 7 * MIB;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_OK && p.n_expert_slots == 3 && p.n_trunk_pinned == 3,
          "expert 7 MiB: %d slots", p.n_expert_slots);
    in.expert_bytes = 3 * MIB;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_E_BUDGET, "expert 3 MiB accepted");
    /* expert override inside a budget: trunk gets the rest */
    in.expert_bytes = 4 * MIB;
    in.ram_bytes = 23 * MIB;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_OK && p.n_expert_slots == 2 &&
          p.total_bytes <= 23 * MIB, "expert override in budget: %s", err.msg);
    /* a single ring slot is a usage error */
    in.expert_bytes = 0;
    in.ram_bytes = 0;
    in.ring_slots = 1;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in, &p, res, &err) == MS_E_USAGE, "1 ring slot accepted");
    in.ring_slots = 2;

    /* a sparse GLOBAL stays on disk unless everything else is resident */
    ms_plan_region r2[3] = { { MS_REGION_GLOBAL, 4 * MIB, 1 }, { MS_REGION_TRUNK, 2 * MIB, 0 },
                             { MS_REGION_TRUNK, 2 * MIB, 0 } };
    ms_plan_input in2 = { r2, 3, 0, 0, 0, 0, 0, 0 };
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in2, &p, res, &err) == MS_OK && p.sparse_resident && res[0], "sparse unlimited");
    in2.ram_bytes = 6 * MIB;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in2, &p, res, &err) == MS_OK && !p.sparse_resident && !res[0] &&
          p.n_trunk_pinned == 2 && p.bounce_bytes == MS_PLAN_DEFAULT_BOUNCE, "sparse on disk");
    char table[2048];
    int len = ms_plan_format(&p, table, sizeof table);
    CHECK(len > 0 && strstr(table, "on disk") && strstr(table, "trunk pinned"), "table:\n%s", table);

    /* small TRUNK regions (at most 1/32 of the largest) are pinned in every
     * plan, the floor included; one a byte larger streams */
    ms_plan_region r3[6] = { { MS_REGION_TRUNK, 64 * MIB, 0 }, { MS_REGION_TRUNK, 2 * MIB, 0 },
                             { MS_REGION_TRUNK, 64 * MIB, 0 }, { MS_REGION_TRUNK, 2 * MIB + 1, 0 },
                             { MS_REGION_EXPERT, 4 * MIB, 0 }, { MS_REGION_EXPERT, 4 * MIB, 0 } };
    ms_plan_input in3 = { r3, 6, 0, 0, 0, 1, 2, 0 };
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in3, &p, res, &err) == MS_OK, "%s", err.msg);
    in3.ram_bytes = p.floor_bytes;
    ms_err_clear(&err);
    CHECK(ms_plan_compute(&in3, &p, res, &err) == MS_OK, "small regions floor: %s", err.msg);
    CHECK(p.n_trunk == 4 && p.n_trunk_pinned == 1 && p.trunk_pinned_region_bytes == 2 * MIB && p.n_ring == 2 &&
              p.ring_slot_bytes == 64 * MIB && p.streamed_region_bytes == 130 * MIB + 1,
          "small regions floor: pinned %d (%lld B) of %d, ring %d x %lld, streamed %lld", p.n_trunk_pinned,
          (long long)p.trunk_pinned_region_bytes, p.n_trunk, p.n_ring, (long long)p.ring_slot_bytes,
          (long long)p.streamed_region_bytes);
    CHECK(res[1] && !res[0] && !res[2] && !res[3], "small regions floor: residency %d %d %d %d", res[0], res[1],
          res[2], res[3]);
    CHECK(p.total_bytes == ms_plan_alloc_bytes(2 * MIB) + ms_plan_alloc_bytes(128 * MIB) +
                               ms_plan_alloc_bytes(4 * MIB) + ms_plan_alloc_bytes(MS_PLAN_DEFAULT_BOUNCE),
          "small regions floor: total %lld", (long long)p.total_bytes);
}

/* --------------------------------------------------------------- budgets */

/* ms_store_layout: a range lands at a place congruent to its file offset mod
 * 4096 and a `down` one sits one byte below it (so data at an odd offset
 * in it is at an even address); no two ranges' landing pages
 * (their I/O supersets) or final bytes overlap; the size covers them all. */
static void test_layout(void) {
    const ms_range r[] = {
        { 0, 8193, 100, 1 },        /* odd, down, skew 1: one byte below on its page */
        { 0, 4096, 10, 1 },         /* down at a page's start: a page more (its odd data follows
                                       an odd-sized tensor) */
        { 1, 4095, 4097, 1 },       /* down across pages */
        { 1, 77, 3, 0 },            /* odd, not down */
        { 0, 0, 0, 1 },             /* empty */
        { 1, 12288, 4096, 0 },      /* whole page */
    };
    const int n = (int)(sizeof r / sizeof r[0]);
    int64_t pos[sizeof r / sizeof r[0]];
    const int64_t bytes = ms_store_layout(r, n, pos);
    CHECK(bytes > 0 && bytes % 4096 == 0, "layout: size %lld", (long long)bytes);
    int64_t io_end = 0, data_end = 0;
    for (int i = 0; i < n; i++) {
        const int64_t land = pos[i] + r[i].down, io0 = land - r[i].offset % 4096;
        CHECK(land % 4096 == r[i].offset % 4096, "layout: range %d lands at %lld", i, (long long)land);
        CHECK((pos[i] - r[i].offset + r[i].down) % 2 == 0, "layout: range %d: %lld is not its offset - down, mod 2", i,
              (long long)pos[i]);
        CHECK(io0 >= io_end && pos[i] >= data_end, "layout: range %d overlaps the one before", i);
        CHECK(land + r[i].n_bytes <= bytes, "layout: range %d ends past the buffer", i);
        io_end = (land + r[i].n_bytes + 4095) / 4096 * 4096;
        data_end = pos[i] + r[i].n_bytes;
    }
    CHECK(ms_store_layout(r, 0, pos) == 4096, "layout: no ranges, one page");
}

static void test_budgets(fixture *fx) {
    ms_store *s = NULL;
    ms_err err;
    ms_err_clear(&err);
    cfg c = { 1, MS_IO_PREAD, "lru", 1, 1, 0, 0, 0, { 0 }, NULL, 0 };
    ms_status st = store_make(fx, &c, &s, &err);
    CHECK(st == MS_E_BUDGET, "1-byte budget: %d %s", st, err.msg);
    const ms_plan *pl = s ? ms_store_get_plan(s) : NULL;
    CHECK(pl != NULL, "plan after refusal");
    if (!pl) { ms_store_close(s); return; }
    const int64_t floor = pl->floor_bytes, full = pl->full_bytes;
    ms_store_close(s);
    CHECK(floor > 0 && full > floor, "floor %lld full %lld", (long long)floor, (long long)full);
    printf("store fixture: floor %lld bytes, everything resident %lld bytes\n", (long long)floor,
           (long long)full);

    /* below the floor: refused, the message names both numbers */
    ms_err_clear(&err);
    c.ram = floor - 1;
    st = store_make(fx, &c, &s, &err);
    char need[64], have[64];
    snprintf(need, sizeof need, "needs %lld bytes", (long long)floor);
    snprintf(have, sizeof have, "budget %lld bytes", (long long)(floor - 1));
    CHECK(st == MS_E_BUDGET && strstr(err.msg, need) && strstr(err.msg, have), "floor-1: %s", err.msg);
    ms_store_close(s);

    const int64_t budgets[] = { floor, floor + 300000, floor + (full - floor) / 4, floor + (full - floor) / 2,
                                floor + 3 * (full - floor) / 4, full - 1, full, 0 };
    const int nbud = (int)(sizeof budgets / sizeof budgets[0]);
    const ms_io_kind kinds[] = { MS_IO_PREAD, MS_IO_DIRECT, MS_IO_URING };
    const char *pols[] = { "lru", "s3fifo" };
    int runs = 0, failed_runs = 0;
    int64_t total_bad = 0;
    for (int ib = 0; ib < nbud; ib++)
        for (int ik = 0; ik < 3; ik++)
            for (int ip = 0; ip < 2; ip++)
                for (int ra = 0; ra < 2; ra++) {
                    cfg cc = { budgets[ib], kinds[ik], pols[ip], ra, ra, 0, 0, 0, { 0 }, NULL, 0 };
                    ms_err_clear(&err);
                    st = store_make(fx, &cc, &s, &err);
                    if (st != MS_OK) {
                        failed_runs++;
                        CHECK(0, "budget %lld %s %s ra %d: start: %s", (long long)budgets[ib],
                              ms_io_kind_name(kinds[ik]), pols[ip], ra, err.msg);
                        ms_store_close(s);
                        continue;
                    }
                    const ms_plan *p = ms_store_get_plan(s);
                    ms_store_stats ss;
                    ms_store_get_stats(s, &ss);
                    CHECK(budgets[ib] == 0 || (p->total_bytes <= budgets[ib] && ss.resident_bytes <= budgets[ib]),
                          "budget %lld: plan %lld", (long long)budgets[ib], (long long)p->total_bytes);
                    CHECK(ss.resident_bytes == p->total_bytes, "resident bytes = plan total");
                    if (ib == 0)
                        CHECK(ms_store_expert_capacity(s) < N_EXP, "floor: cache under pressure (%d slots)",
                              ms_store_expert_capacity(s));
                    wl_result wr = { 0 };
                    ms_err_clear(&err);
                    ms_store_reset_stats(s);        /* count the run, not the start */
                    st = workload(fx, s, 2, fx->n_trunk, 1000 + (uint64_t)runs, ra, &wr, &err);
                    CHECK(st == MS_OK, "budget %lld %s %s ra %d: %s", (long long)budgets[ib],
                          ms_io_kind_name(kinds[ik]), pols[ip], ra, err.msg);
                    CHECK(wr.bad == 0, "budget %lld %s %s ra %d: %lld bad bytes", (long long)budgets[ib],
                          ms_io_kind_name(kinds[ik]), pols[ip], ra, (long long)wr.bad);
                    total_bad += wr.bad;
                    ms_store_get_stats(s, &ss);
                    if (!ra) CHECK(ss.ra_issued == 0 && ss.prefetch_issued == 0, "read-ahead off");
                    if (budgets[ib] == 0)
                        CHECK(ss.trunk_bytes_read == 0 && ss.expert_hits == ss.expert_requests,
                              "everything resident: trunk %lld, hits %lld / %lld", (long long)ss.trunk_bytes_read,
                              (long long)ss.expert_hits, (long long)ss.expert_requests);
                    runs++;
                    ms_store_close(s);
                }
    printf("store matrix: %d runs (%d budgets x 3 backends x 2 policies x read-ahead on/off), %lld bad bytes\n",
           runs, nbud, (long long)total_bad);
    CHECK(failed_runs == 0, "%d runs failed to start", failed_runs);
}

/* Reads in flight after start (store.c, expert_depth): the whole queue depth
 * while the trunk streams or every expert is resident; one expert's reads
 * (the largest expert region's 128 KiB chunks, at least 4) when the trunk is
 * pinned and only experts stream. */
static void test_depth(fixture *fx) {
    int64_t most = 0;
    for (int i = 0; i < fx->n; i++) {
        if (fx->cls[i] != MS_REGION_EXPERT) continue;
        int64_t n = 0;
        for (int k = 0; k < fx->n_ranges[i]; k++)
            n += (ms_io_span(fx->ranges[i][k].offset, fx->ranges[i][k].n_bytes) + (128 << 10) - 1) / (128 << 10);
        if (n > most) most = n;
    }
    const int want_pinned = most > 4 ? (int)most : 4;
    cfg c = { 1, MS_IO_URING, "lru", 1, 1, 0, 0, 0, { 0 }, NULL, 0 };
    g_qd = 32;
    const ms_plan floor_plan = probe_plan(fx, &c);
    int seen_stream = 0, seen_pinned = 0, seen_resident = 0;
    for (int step = 0; step <= 16; step++) {
        c.ram = step == 16 ? 0 : floor_plan.floor_bytes + (floor_plan.full_bytes - floor_plan.floor_bytes) * step / 16;
        ms_store *s = NULL;
        ms_err err;
        ms_err_clear(&err);
        if (store_make(fx, &c, &s, &err) != MS_OK) {
            CHECK(0, "depth: budget %lld: %s", (long long)c.ram, err.msg);
            ms_store_close(s);
            continue;
        }
        const ms_plan *p = ms_store_get_plan(s);
        const int pinned = p->n_ring == 0 && !p->experts_resident;
        const int want = pinned ? (want_pinned < 32 ? want_pinned : 32) : 32;
        const int got = ms_io_depth(ms_store_io(s));
        CHECK(got == want, "depth: budget %lld (ring %d, experts resident %d): %d reads in flight, want %d",
              (long long)c.ram, p->n_ring, p->experts_resident, got, want);
        seen_stream |= p->n_ring > 0;
        seen_pinned |= pinned;
        seen_resident |= p->experts_resident;
        ms_store_close(s);
    }
    g_qd = 3;
    CHECK(seen_stream && seen_pinned && seen_resident, "depth: budgets cover a streamed trunk (%d), a pinned one "
          "with streamed experts (%d) and resident experts (%d)", seen_stream, seen_pinned, seen_resident);
}

/* ------------------------------------------------------------- statistics */

static void test_stats(fixture *fx) {
    ms_err err;
    ms_store *s = NULL;
    /* 1. streamed bytes per pass at the floor, read-ahead on and off */
    for (int ra = 0; ra < 2; ra++) {
        ms_err_clear(&err);
        cfg c0 = { 1, MS_IO_PREAD, "lru", ra, 0, 0, 0, 0, { 0 }, NULL, 0 };
        int64_t floor = probe_plan(fx, &c0).floor_bytes;
        cfg c = { floor, MS_IO_PREAD, "lru", ra, 0, 0, 0, 0, { 0 }, NULL, 0 };
        ms_err_clear(&err);
        if (store_make(fx, &c, &s, &err) != MS_OK) { CHECK(0, "%s", err.msg); ms_store_close(s); return; }
        const ms_plan *p = ms_store_get_plan(s);
        int64_t streamed = 0;
        int n_streamed = 0;
        for (int t = 0; t < fx->n_trunk; t++)
            if (!ms_store_region_resident(s, fx->trunk[t])) {
                streamed += region_data_bytes(fx, fx->trunk[t]);
                n_streamed++;
            }
        CHECK(n_streamed == p->n_trunk - p->n_trunk_pinned && n_streamed > p->n_ring,
              "floor streams %d regions through %d slots", n_streamed, p->n_ring);
        CHECK(streamed > 0 && streamed <= p->streamed_region_bytes &&
              p->streamed_region_bytes - streamed < (int64_t)n_streamed * 3 * 4096,
              "streamed data bytes %lld vs plan's buffer bytes %lld", (long long)streamed,
              (long long)p->streamed_region_bytes);
        /* a pass of the trunk only, no experts: bytes per pass == streamed */
        for (int cyc = 0; cyc < 3; cyc++) {
            if (cyc == 2) ms_store_reset_stats(s);
            for (int t = 0; t < fx->n_trunk; t++) {
                const uint8_t *b = ms_store_acquire(s, fx->trunk[t], &err);
                CHECK(b && verify_region(fx, fx->trunk[t], b) == 0, "pass bytes");
                ms_store_release(s, fx->trunk[t]);
            }
        }
        ms_store_stats ss;
        ms_store_get_stats(s, &ss);
        /* with read-ahead every slot is busy: each streamed region is read
         * exactly once per pass. Without it the ring's farthest-next-use
         * choice keeps one slot's region for a further pass (Belady on a
         * cyclic walk), so a pass reads less than the streamed bytes, never
         * more, and every streamed acquire is a read or a ring hit */
        if (ra) {
            CHECK(ss.trunk_bytes_read == streamed, "one pass read %lld trunk bytes, streamed %lld",
                  (long long)ss.trunk_bytes_read, (long long)streamed);
            CHECK(ss.ra_issued == n_streamed && ss.ra_used == n_streamed && ss.trunk_sync_reads == 0 &&
                  ss.trunk_ring_hits == 0, "read-ahead: issued %lld used %lld sync %lld", (long long)ss.ra_issued,
                  (long long)ss.ra_used, (long long)ss.trunk_sync_reads);
        } else {
            CHECK(ss.trunk_bytes_read < streamed && ss.trunk_sync_reads + ss.trunk_ring_hits == n_streamed &&
                  ss.trunk_ring_hits >= 1 && ss.ra_issued == 0, "no read-ahead: %lld bytes (streamed %lld), "
                  "%lld reads, %lld ring hits", (long long)ss.trunk_bytes_read, (long long)streamed,
                  (long long)ss.trunk_sync_reads, (long long)ss.trunk_ring_hits);
        }
        CHECK(ss.expert_bytes_read == 0 && ss.peak_bytes == ss.resident_bytes, "no expert bytes");
        ms_store_close(s);
    }

    /* 1b. three ring slots: read-ahead runs two regions ahead, still one read
     * per region per pass; out-of-order acquires and two regions held at once
     * still hand out the right bytes */
    {
        ms_err_clear(&err);
        cfg c0 = { 1, MS_IO_URING, "lru", 1, 0, 0, 0, 0, { 0 }, NULL, 3 };
        int64_t floor = probe_plan(fx, &c0).floor_bytes;
        cfg c = { floor, MS_IO_URING, "lru", 1, 0, 0, 0, 0, { 0 }, NULL, 3 };
        ms_err_clear(&err);
        if (store_make(fx, &c, &s, &err) != MS_OK) { CHECK(0, "%s", err.msg); ms_store_close(s); return; }
        const ms_plan *p = ms_store_get_plan(s);
        int64_t streamed = 0;
        int n_streamed = 0;
        for (int t = 0; t < fx->n_trunk; t++)
            if (!ms_store_region_resident(s, fx->trunk[t])) {
                streamed += region_data_bytes(fx, fx->trunk[t]);
                n_streamed++;
            }
        CHECK(p->n_ring == 3 && n_streamed > 3, "3-slot ring streams %d regions", n_streamed);
        ms_store_stats ss;
        ms_store_reset_stats(s);
        for (int cyc = 0; cyc < 3; cyc++) {
            if (cyc == 1) {
                /* the first pass: only its first streamed region is read at
                 * acquire time; that read already starts the read-ahead */
                ms_store_get_stats(s, &ss);
                CHECK(ss.trunk_sync_reads == 1 && ss.ra_used == n_streamed - 1, "first pass: %lld sync reads",
                      (long long)ss.trunk_sync_reads);
            }
            if (cyc == 2) ms_store_reset_stats(s);
            for (int t = 0; t < fx->n_trunk; t++) {
                const uint8_t *b = ms_store_acquire(s, fx->trunk[t], &err);
                CHECK(b && verify_region(fx, fx->trunk[t], b) == 0, "pass bytes");
                ms_store_release(s, fx->trunk[t]);
            }
        }
        ms_store_get_stats(s, &ss);
        CHECK(ss.trunk_bytes_read == streamed && ss.ra_issued == n_streamed && ss.ra_used == n_streamed &&
              ss.ra_wasted == 0 && ss.trunk_sync_reads == 0, "3 slots: %lld bytes (streamed %lld), ra issued "
              "%lld used %lld wasted %lld, sync %lld", (long long)ss.trunk_bytes_read, (long long)streamed,
              (long long)ss.ra_issued, (long long)ss.ra_used, (long long)ss.ra_wasted,
              (long long)ss.trunk_sync_reads);
        uint64_t rs = 99;
        int64_t bad = 0, nulls = 0;
        for (int it = 0; it < 40; it++) {
            int a = fx->trunk[rnd(&rs) % (uint64_t)fx->n_trunk], b = fx->trunk[rnd(&rs) % (uint64_t)fx->n_trunk];
            const uint8_t *pa = ms_store_acquire(s, a, &err);
            const uint8_t *pb = a != b && it % 2 ? ms_store_acquire(s, b, &err) : NULL;
            nulls += !pa;
            if (pa) bad += verify_region(fx, a, pa);
            if (pb) bad += verify_region(fx, b, pb);
            if (pa) bad += verify_region(fx, a, pa);    /* still intact with b in the ring */
            if (pb) ms_store_release(s, b);
            if (pa) ms_store_release(s, a);
        }
        ms_store_get_stats(s, &ss);
        CHECK(bad == 0 && nulls == 0 && ss.ra_wasted > 0, "out of order: %lld bad, %lld failed, %lld wasted",
              (long long)bad, (long long)nulls, (long long)ss.ra_wasted);
        ms_store_close(s);
    }

    /* 2. hits are resident hits: 4 slots (expert override), LRU, no trunk streaming */
    {
        ms_err_clear(&err);
        cfg c0 = { 0, MS_IO_PREAD, "lru", 1, 0, 1, 0, 0, { 0 }, NULL, 0 };
        int64_t slot = probe_plan(fx, &c0).expert_slot_bytes;
        cfg c = { 0, MS_IO_PREAD, "lru", 1, 0, 1, 0, 4 * slot, { 0 }, NULL, 0 };
        ms_err_clear(&err);
        if (store_make(fx, &c, &s, &err) != MS_OK) { CHECK(0, "%s", err.msg); ms_store_close(s); return; }
        CHECK(ms_store_expert_capacity(s) == 4, "capacity %d", ms_store_expert_capacity(s));
        ms_store_reset_stats(s);
        const int *E = fx->expert;
        const uint8_t *pt[4];
        ms_store_stats ss;
#define BATCH(...) do {                                                                   \
            int ids_[] = { __VA_ARGS__ };                                                 \
            int n_ = (int)(sizeof ids_ / sizeof ids_[0]);                                 \
            CHECK(ms_store_acquire_batch(s, ids_, n_, pt, &err) == MS_OK, "%s", err.msg); \
            for (int j_ = 0; j_ < n_; j_++) {                                             \
                CHECK(verify_region(fx, ids_[j_], pt[j_]) == 0, "expert bytes");          \
                ms_store_release(s, ids_[j_]);                                            \
            }                                                                             \
        } while (0)
        BATCH(E[0], E[1]);
        ms_store_get_stats(s, &ss);
        CHECK(ss.expert_hits == 0 && ss.expert_misses == 2 && ss.expert_requests == 2, "cold misses");
        BATCH(E[0]);
        ms_store_get_stats(s, &ss);
        CHECK(ss.expert_hits == 1, "demand-loaded reuse is a hit (%lld)", (long long)ss.expert_hits);
        ms_store_hint(s, (int[]){ E[2] }, 1);
        BATCH(E[2]);
        ms_store_get_stats(s, &ss);
        CHECK(ss.prefetch_issued == 1 && ss.prefetch_hits == 1 && ss.expert_hits == 1 && ss.expert_misses == 2,
              "first use of a prefetch is not a hit: hits %lld prefetch hits %lld", (long long)ss.expert_hits,
              (long long)ss.prefetch_hits);
        BATCH(E[2]);
        ms_store_get_stats(s, &ss);
        CHECK(ss.expert_hits == 2, "second use of a prefetched expert is a hit");
        /* a prefetch evicted unused is wasted: slots E0 E1 E2 + E3 (prefetch);
         * a batch of 4 new experts needs every slot */
        ms_store_hint(s, (int[]){ E[3] }, 1);
        BATCH(E[4], E[5], E[6], E[7]);
        ms_store_get_stats(s, &ss);
        CHECK(ss.prefetch_wasted == 1 && ss.expert_misses == 6 && ss.expert_hits == 2,
              "wasted %lld misses %lld", (long long)ss.prefetch_wasted, (long long)ss.expert_misses);
        /* a prefetch that arrived (drained) before its first use: still a
         * prefetch hit, not a hit. Hold E4 E5, hint E8 E9 (all 4 slots taken),
         * then a miss (E10) drains the prefetches and evicts one of them */
        {
            int held[2] = { E[4], E[5] };
            CHECK(ms_store_acquire_batch(s, held, 2, pt, &err) == MS_OK, "%s", err.msg);
            ms_store_hint(s, (int[]){ E[8], E[9] }, 2);
            ms_store_stats s0;
            ms_store_get_stats(s, &s0);
            BATCH(E[10]);
            ms_store_release(s, E[4]);
            ms_store_release(s, E[5]);
            BATCH(E[8], E[9]);
            ms_store_get_stats(s, &ss);
            CHECK(ss.prefetch_issued - s0.prefetch_issued == 0 && s0.prefetch_issued == 4 &&
                  ss.prefetch_wasted - s0.prefetch_wasted == 1 && ss.prefetch_hits - s0.prefetch_hits == 1 &&
                  ss.expert_hits - s0.expert_hits == 0 && ss.expert_misses - s0.expert_misses == 2,
                  "drained prefetch: issued %lld wasted +%lld prefetch hits +%lld hits +%lld misses +%lld",
                  (long long)s0.prefetch_issued, (long long)(ss.prefetch_wasted - s0.prefetch_wasted),
                  (long long)(ss.prefetch_hits - s0.prefetch_hits), (long long)(ss.expert_hits - s0.expert_hits),
                  (long long)(ss.expert_misses - s0.expert_misses));
        }
        /* hints on cached experts cost nothing; hints on non-experts are ignored */
        ms_store_hint(s, (int[]){ E[8], fx->trunk[0], E[10] }, 3);
        ms_store_get_stats(s, &ss);
        CHECK(ss.prefetch_issued == 4, "hint on cached experts issued %lld", (long long)ss.prefetch_issued);
        /* single acquire of an expert goes through the cache too */
        const int64_t h0 = ss.expert_hits, r0 = ss.expert_requests;
        const uint8_t *b = ms_store_acquire(s, E[10], &err);
        CHECK(b && verify_region(fx, E[10], b) == 0, "single expert acquire");
        ms_store_release(s, E[10]);
        ms_store_get_stats(s, &ss);
        CHECK(ss.expert_hits == h0 + 1 && ss.expert_requests == r0 + 1, "hits %lld requests %lld",
              (long long)ss.expert_hits, (long long)ss.expert_requests);
#undef BATCH
        ms_store_close(s);
    }
}

/* ----------------------------------------------------------------- faults */

static void test_faults(fixture *fx) {
    ms_err err;
    ms_store *s = NULL;
    ms_err_clear(&err);
    cfg c0 = { 1, MS_IO_PREAD, "lru", 0, 0, 0, 0, 0, { 0 }, NULL, 0 };
    const int64_t floor = probe_plan(fx, &c0).floor_bytes;
    const ms_io_kind kinds[] = { MS_IO_PREAD, MS_IO_DIRECT, MS_IO_URING };
    const int n_trunk = 4;      /* a short workload: half a pass, two expert batches */
    for (int mode = 0; mode < 4; mode++) {
        /* modes 0..2: each backend, read-ahead off: every read is a demand read.
         * mode 3: uring with read-ahead and hints: a failed speculative read is
         * re-read on demand, so EIO may be recovered */
        ms_io_kind kind = kinds[mode < 3 ? mode : 2];
        int ra = mode == 3;
        cfg c = { floor, kind, "s3fifo", ra, ra, 0, 0, 0, { 0 }, NULL, 0 };
        ms_err_clear(&err);
        if (store_make(fx, &c, &s, &err) != MS_OK) { CHECK(0, "%s", err.msg); ms_store_close(s); continue; }
        wl_result wr = { 0 };
        CHECK(workload(fx, s, 1, n_trunk, 77, ra, &wr, &err) == MS_OK && wr.bad == 0, "clean run: %s", err.msg);
        ms_store_stats ss;
        ms_store_get_stats(s, &ss);
        const int64_t n_req = ss.reads_issued;
        ms_store_close(s);
        int n_eio_fail = 0, n_eio_ok = 0, n_bad_runs = 0;
        for (int64_t at = 0; at < n_req; at++)
            for (int fk = 0; fk < 3; fk++) {
                ms_fault_kind f = fk == 0 ? MS_FAULT_EIO : fk == 1 ? MS_FAULT_TRANSIENT : MS_FAULT_SHORT;
                c.fault = (ms_io_fault){ f, at, 0, 0 };
                ms_err_clear(&err);
                ms_status st = store_make(fx, &c, &s, &err);
                wl_result r = { 0 };
                int started = st == MS_OK, refails = 0;
                if (st == MS_OK) st = workload(fx, s, 1, n_trunk, 77, ra, &r, &err);
                if (started && st != MS_OK) refails = recheck(fx, s, &r);
                CHECK(refails == 0, "after the failure at %lld, %d acquires failed", (long long)at, refails);
                ms_store_close(s);
                if (r.bad || r.handed_on_fail) n_bad_runs++;
                CHECK(r.bad == 0 && r.handed_on_fail == 0, "%s fault %d at %lld: %lld bad bytes, %lld handed out",
                      ms_io_kind_name(kind), f, (long long)at, (long long)r.bad, (long long)r.handed_on_fail);
                if (f == MS_FAULT_EIO) {
                    if (st == MS_OK) n_eio_ok++;
                    else {
                        n_eio_fail++;
                        CHECK(st == MS_E_IO && strstr(err.msg, "shard"), "EIO at %lld: status %d '%s'",
                              (long long)at, st, err.msg);
                    }
                } else {
                    CHECK(st == MS_OK, "%s fault %d at %lld: %s", ms_io_kind_name(kind), f, (long long)at, err.msg);
                }
            }
        if (!ra) CHECK(n_eio_fail == n_req && n_eio_ok == 0, "%s: EIO failed %d of %lld runs",
                       ms_io_kind_name(kind), n_eio_fail, (long long)n_req);
        else CHECK(n_eio_fail > 0 && n_eio_ok > 0, "read-ahead: EIO failed %d, recovered %d", n_eio_fail, n_eio_ok);
        printf("store faults %s%s: %lld request indices x 3 kinds, EIO failed %d recovered %d\n",
               ms_io_kind_name(kind), ra ? " +read-ahead" : "", (long long)n_req, n_eio_fail, n_eio_ok);
    }
    /* CORRUPT: documented limit - silent corruption reaches the caller */
    {
        cfg c = { floor, MS_IO_PREAD, "lru", 0, 0, 0, 0, 0, { MS_FAULT_CORRUPT, 0, 10, 20 }, NULL, 0 };
        ms_err_clear(&err);
        wl_result r = { 0 };
        if (store_make(fx, &c, &s, &err) == MS_OK) workload(fx, s, 1, n_trunk, 77, 0, &r, &err);
        CHECK(r.bad == 10, "CORRUPT of 10 bytes: %lld bad bytes handed out (the store cannot detect it)",
              (long long)r.bad);
        ms_store_close(s);
    }
}

/* ----------------------------------------------------------------- traces */

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static void replay3(const char *path, int cap, int64_t lru, int64_t s3, int64_t bel, const char *what) {
    ms_trace_result r;
    ms_err err;
    const char *names[3] = { "lru", "s3fifo", "belady" };
    const int64_t want[3] = { lru, s3, bel };
    for (int i = 0; i < 3; i++) {
        ms_err_clear(&err);
        ms_status st = ms_trace_replay(path, names[i], cap, &r, &err);
        CHECK(st == MS_OK && r.hits == want[i], "%s %s cap %d: hits %lld want %lld (%s)", what, names[i], cap,
              (long long)r.hits, (long long)want[i], err.msg);
        CHECK(r.misses + r.hits == r.requests, "misses + hits");
    }
}

static void test_traces(fixture *fx) {
    char path[400];
    snprintf(path, sizeof path, "%s/hand.txt", fx->dir);
    /* 1 2 3 4 1 2 5 1 2 3 4 5, 3 slots: LRU 2 hits, Belady 5 (the textbook
     * string); S3-FIFO (S = 1 slot, ghosts = 2): 1 and 2 come back as ghosts
     * into M and hit at positions 7 and 8 -> 2 hits */
    write_file(path, "# hand\n0 1\n1 2\n2 3\n3 4\n4 1\n5 2\n6 5\n7 1\n8 2\n9 3\n10 4\n11 5\n");
    replay3(path, 3, 2, 2, 5, "textbook");
    /* hot 1 2 with scans 10 11 12 / 13 14 15, 4 slots: LRU loses the hot keys
     * to each scan (2 hits); S3-FIFO promotes 1 and 2 to M and lets the scans
     * pass through S (6 hits) = Belady (6) */
    write_file(path, "0 1\n1 2\n2 1\n3 2\n4 10\n5 11\n6 12\n7 1\n8 2\n9 13\n10 14\n11 15\n12 1\n13 2\n");
    replay3(path, 4, 2, 6, 6, "scan");
    ms_trace_result r;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_trace_replay(path, "lru", 64, &r, &err) == MS_OK && r.hits == 14 - 8 && r.n_regions == 8 &&
          r.evictions == 0, "big cache: only cold misses (%lld hits)", (long long)r.hits);
    CHECK(r.hit_rate > 6.0 / 14 - 1e-9 && r.hit_rate < 6.0 / 14 + 1e-9, "hit rate %f", r.hit_rate);
    /* ghosts, 3 slots: 1 is evicted from S by 4, comes back as a ghost into M
     * and survives the scan 5 6 7 that LRU (and S3-FIFO without ghosts) lose
     * it to: LRU 0, S3-FIFO 1, Belady 2 (keeps 1 and drops never-used keys) */
    write_file(path, "0 1\n1 2\n2 3\n3 4\n4 1\n5 5\n6 6\n7 7\n8 1\n");
    replay3(path, 3, 0, 1, 2, "ghost");
    /* batches, 2 slots: {1,2} {3} {1,3}. LRU: 3 evicts 1; batch 3 hits 3, 1
     * evicts 2 -> 1 hit. Belady: 3 evicts 2 (never used again) -> 2 hits.
     * S3-FIFO: 3 evicts 1 (S tail); 1 is no longer a ghost (g_cap 1, 2 evicted
     * after it) -> 1 hit */
    write_file(path, "0 1\n0 2\n1 3\n2 1\n2 3\n");
    replay3(path, 2, 1, 1, 2, "batched");
    ms_err_clear(&err);
    CHECK(ms_trace_replay(path, "min", 1, &r, &err) == MS_E_USAGE && strstr(err.msg, "largest batch"),
          "capacity below a batch: %s", err.msg);
    write_file(path, "0 1\n0 1\n");
    ms_err_clear(&err);
    CHECK(ms_trace_replay(path, "lru", 4, &r, &err) == MS_E_MODEL, "duplicate in batch");
    write_file(path, "0 1\nx 2\n");
    ms_err_clear(&err);
    CHECK(ms_trace_replay(path, "lru", 4, &r, &err) == MS_E_MODEL && strstr(err.msg, ":2:"), "malformed: %s",
          err.msg);
    write_file(path, "3 1\n2 2\n");
    ms_err_clear(&err);
    CHECK(ms_trace_replay(path, "lru", 4, &r, &err) == MS_E_MODEL, "batch going down");
    ms_err_clear(&err);
    CHECK(ms_trace_replay(path, "fifo", 4, &r, &err) == MS_E_USAGE, "unknown policy");

    /* a live run's trace replays to the live hit count (same directory code) */
    for (int ip = 0; ip < 2; ip++) {
        const char *pol = ip ? "s3fifo" : "lru";
        char tpath[400];
        snprintf(tpath, sizeof tpath, "%s/trace.txt", fx->dir);
        ms_store *s = NULL;
        ms_err_clear(&err);
        cfg c0 = { 1, MS_IO_PREAD, pol, 0, 0, 0, 0, 0, { 0 }, NULL, 0 };
        int64_t floor = probe_plan(fx, &c0).floor_bytes;
        cfg c = { floor + 600000, MS_IO_PREAD, pol, 0, 0, 0, 0, 0, { 0 }, tpath, 0 };
        ms_err_clear(&err);
        if (store_make(fx, &c, &s, &err) != MS_OK) { CHECK(0, "%s", err.msg); ms_store_close(s); continue; }
        int cap = ms_store_expert_capacity(s);
        wl_result wr = { 0 };
        CHECK(workload(fx, s, 4, fx->n_trunk, 5, 0, &wr, &err) == MS_OK && wr.bad == 0, "traced run");
        ms_store_stats ss;
        ms_store_get_stats(s, &ss);
        ms_store_close(s);
        ms_err_clear(&err);
        CHECK(ms_trace_replay(tpath, pol, cap, &r, &err) == MS_OK, "%s", err.msg);
        CHECK(r.requests == ss.expert_requests && r.hits == ss.expert_hits && r.batches == wr.batches,
              "%s: replay %lld/%lld hits, live %lld/%lld", pol, (long long)r.hits, (long long)r.requests,
              (long long)ss.expert_hits, (long long)ss.expert_requests);
        ms_trace_result rb;
        ms_err_clear(&err);
        CHECK(ms_trace_replay(tpath, "belady", cap, &rb, &err) == MS_OK && rb.hits >= r.hits,
              "belady %lld >= %s %lld", (long long)rb.hits, pol, (long long)r.hits);
        unlink(tpath);
    }
}

/* -------------------------------------------------------- cache directory */

static void test_cache_states(void) {
    ms_cache c;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_cache_init(&c, 2, 10, "nope", &err) == MS_E_USAGE && strstr(err.msg, "s3fifo"), "unknown policy");
    /* no policy named: S3-FIFO, the default */
    ms_err_clear(&err);
    CHECK(ms_cache_init(&c, 2, 10, NULL, &err) == MS_OK && c.pol && strcmp(c.pol->name, "s3fifo") == 0,
          "default policy: %s", c.pol ? c.pol->name : err.msg);
    ms_cache_free(&c);
    for (int ip = 0; ip < 2; ip++) {
        ms_err_clear(&err);
        CHECK(ms_cache_init(&c, 2, 10, ip ? "s3fifo" : "lru", &err) == MS_OK, "%s", err.msg);
        int ek, ep;
        int a = ms_cache_reserve(&c, 1, &ek, &ep), b = ms_cache_reserve(&c, 2, &ek, &ep);
        CHECK(a >= 0 && b >= 0 && a != b && ek < 0, "two free slots");
        /* both LOADING: no victim (a LOADING slot is never evicted) */
        CHECK(ms_cache_reserve(&c, 3, &ek, &ep) == -1, "loading slots are not victims");
        ms_cache_publish(&c, a);
        c.slots[a].pins = 1;
        CHECK(ms_cache_reserve(&c, 3, &ek, &ep) == -1, "pinned slots are not victims");
        c.slots[a].pins = 0;
        ms_cache_abort(&c, b);          /* failed read: back to FREE, unmapped */
        CHECK(ms_cache_find(&c, 2) == -1, "aborted key unmapped");
        int d = ms_cache_reserve(&c, 3, &ek, &ep);
        CHECK(d == b && ek < 0, "free slot reused before eviction");
        ms_cache_publish(&c, d);
        int e = ms_cache_reserve(&c, 4, &ek, &ep);
        CHECK(e >= 0 && (ek == 1 || ek == 3) && ms_cache_find(&c, ek) == -1 && c.evictions == 1, "eviction");
        ms_cache_free(&c);
    }
}


/* --------------------------------------------------------------- guesses */

/* ms_store_predict / ms_store_confirm with the I/O layer paused, so what is
 * queued when is known: a guess takes only slots no wanted expert holds; a
 * wrong guess still queued at confirm is cancelled (its bytes never read, not
 * counted); a right one is promoted and served as a guess hit; every byte
 * handed out is the file's. */
static void test_guesses(fixture *fx) {
    ms_err err;
    ms_store *s = NULL;
    ms_err_clear(&err);
    cfg c0 = { 0, MS_IO_PREAD, "lru", 1, 0, 1, 0, 0, { 0 }, NULL, 0 };
    const int64_t slot = probe_plan(fx, &c0).expert_slot_bytes;
    cfg c = { 0, MS_IO_PREAD, "lru", 1, 0, 1, 0, 4 * slot, { 0 }, NULL, 0 };
    ms_err_clear(&err);
    if (store_make(fx, &c, &s, &err) != MS_OK) { CHECK(0, "%s", err.msg); ms_store_close(s); return; }
    CHECK(ms_store_expert_capacity(s) == 4, "capacity %d", ms_store_expert_capacity(s));
    const int *E = fx->expert;
    const int64_t eb = region_data_bytes(fx, E[0]);
    ms_store_reset_stats(s);
    ms_store_stats ss;
    const uint8_t *pt[4];
#define GET(...) do {                                                                     \
        int ids_[] = { __VA_ARGS__ };                                                     \
        int n_ = (int)(sizeof ids_ / sizeof ids_[0]);                                     \
        CHECK(ms_store_acquire_batch(s, ids_, n_, pt, &err) == MS_OK, "%s", err.msg);     \
        for (int j_ = 0; j_ < n_; j_++) {                                                 \
            CHECK(verify_region(fx, ids_[j_], pt[j_]) == 0, "expert %d bytes", ids_[j_]); \
            ms_store_release(s, ids_[j_]);                                                \
        }                                                                                 \
    } while (0)
    ms_io *io = ms_store_io(s);
    ms_io_pause(io, 1);
    /* step 1 wants E0 E1 (hinted: demand reads, queued); guesses E2 E3 E4:
     * two free slots, then nothing evictable (E0 E1 wanted, the rest loading) */
    ms_store_confirm(s, (int[]){ E[0], E[1] }, 2);
    ms_store_hint(s, (int[]){ E[0], E[1] }, 2);
    ms_store_predict(s, (int[]){ E[2], E[3], E[4] }, 3);
    ms_store_get_stats(s, &ss);
    CHECK(ss.guess_issued == 2 && ss.prefetch_issued == 4, "guesses into free slots only: %lld of %lld",
          (long long)ss.guess_issued, (long long)ss.prefetch_issued);
    CHECK(ms_store_expert_state(s, E[2]) == MS_EXPERT_LOADING &&
          ms_store_expert_state(s, E[4]) == MS_EXPERT_ABSENT, "E2 loading, E4 never asked for");
    /* step 2 wants E3 (a right guess) and E0: E2, still queued, is cancelled */
    ms_store_confirm(s, (int[]){ E[3], E[0] }, 2);
    ms_store_get_stats(s, &ss);
    CHECK(ss.guess_cancelled == 1 && ss.expert_bytes_read == 3 * eb,
          "wrong queued guess cancelled (%lld), its bytes not counted (%lld read, %lld expected)",
          (long long)ss.guess_cancelled, (long long)ss.expert_bytes_read, (long long)(3 * eb));
    CHECK(ms_store_expert_state(s, E[2]) == MS_EXPERT_ABSENT, "a cancelled guess is absent");
    ms_io_pause(io, 0);
    GET(E[3], E[0]);
    GET(E[1]);
    ms_store_get_stats(s, &ss);
    CHECK(ss.guess_hits == 1 && ss.prefetch_hits == 3 && ss.expert_misses == 0,
          "guess hits %lld, prefetch hits %lld, misses %lld", (long long)ss.guess_hits,
          (long long)ss.prefetch_hits, (long long)ss.expert_misses);
    /* the cancelled guess's slot comes back; E2 is read on demand, intact */
    GET(E[2]);
    ms_store_get_stats(s, &ss);
    CHECK(ss.expert_misses == 1 && ss.expert_bytes_read == 4 * eb && ss.prefetch_failed == 0,
          "E2 on demand: misses %lld, bytes %lld, failed %lld", (long long)ss.expert_misses,
          (long long)ss.expert_bytes_read, (long long)ss.prefetch_failed);
    /* cached E0 E1 E2 E3, all READY: step 3 wants E0 E1; guesses may evict only E2 E3 */
    ms_store_confirm(s, (int[]){ E[0], E[1] }, 2);
    ms_store_predict(s, (int[]){ E[5], E[6], E[7] }, 3);
    ms_store_get_stats(s, &ss);
    CHECK(ss.guess_issued == 4, "two more guesses, then none (%lld)", (long long)ss.guess_issued);
    CHECK(ms_store_expert_state(s, E[0]) == MS_EXPERT_READY && ms_store_expert_state(s, E[1]) == MS_EXPERT_READY,
          "a guess evicted a wanted expert");
    const int64_t h0 = ss.expert_hits;
    GET(E[0], E[1]);
    GET(E[5], E[6]);
    ms_store_get_stats(s, &ss);
    CHECK(ss.expert_hits == h0 + 2 && ss.guess_hits == 3, "hits +%lld, guess hits %lld",
          (long long)(ss.expert_hits - h0), (long long)ss.guess_hits);
    /* a right guess that arrived before the confirm: not cancelled, a hit */
    ms_store_confirm(s, (int[]){ E[9] }, 1);
    ms_store_predict(s, (int[]){ E[8] }, 1);
    const int64_t c1 = ss.guess_cancelled;
    for (int i = 0; i < 2000 && ms_store_expert_state(s, E[8]) != MS_EXPERT_READY; i++) {
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
        ms_store_hint(s, NULL, 0);  /* publishes finished prefetches */
    }
    CHECK(ms_store_expert_state(s, E[8]) == MS_EXPERT_READY, "a finished guess is published without a wait");
    ms_store_confirm(s, (int[]){ E[10] }, 1);   /* E8 was wrong, but already read: kept */
    ms_store_get_stats(s, &ss);
    CHECK(ss.guess_cancelled == c1 && ms_store_expert_state(s, E[8]) == MS_EXPERT_READY,
          "an arrived guess is kept, not cancelled");
    GET(E[8]);
    /* a later guess list replaces the earlier one: the queued guesses it drops
     * are cancelled (their bytes not counted), those it keeps stay queued; a
     * guess the step wants is never cancelled by a new list */
    ms_store_get_stats(s, &ss);
    const int64_t c2 = ss.guess_cancelled, b2 = ss.expert_bytes_read, h2 = ss.guess_hits,
                  m2 = ss.expert_misses;
    ms_io_pause(io, 1);
    ms_store_confirm(s, (int[]){ E[8] }, 1);
    ms_store_predict(s, (int[]){ E[11], E[12] }, 2);
    ms_store_predict(s, (int[]){ E[12], E[13] }, 2);
    ms_store_get_stats(s, &ss);
    CHECK(ss.guess_cancelled == c2 + 1 && ss.expert_bytes_read == b2 + 2 * eb &&
          ms_store_expert_state(s, E[11]) == MS_EXPERT_ABSENT &&
          ms_store_expert_state(s, E[12]) == MS_EXPERT_LOADING &&
          ms_store_expert_state(s, E[13]) == MS_EXPERT_LOADING,
          "a dropped guess is cancelled: cancelled %lld, bytes %lld (expected %lld)",
          (long long)(ss.guess_cancelled - c2), (long long)(ss.expert_bytes_read - b2), (long long)(2 * eb));
    ms_store_confirm(s, (int[]){ E[13] }, 1);   /* E12 wrong: cancelled; E13 wanted */
    ms_store_predict(s, (int[]){ E[14] }, 1);   /* must not cancel E13 */
    ms_store_get_stats(s, &ss);
    CHECK(ss.guess_cancelled == c2 + 2 && ms_store_expert_state(s, E[13]) == MS_EXPERT_LOADING &&
          ms_store_expert_state(s, E[14]) == MS_EXPERT_LOADING, "a wanted guess survives a new list");
    ms_io_pause(io, 0);
    GET(E[13]);
    GET(E[8], E[14]);
    ms_store_get_stats(s, &ss);
    CHECK(ss.guess_hits == h2 + 2 && ss.expert_bytes_read == b2 + 2 * eb && ss.expert_misses == m2,
          "guess hits +%lld, bytes +%lld", (long long)(ss.guess_hits - h2), (long long)(ss.expert_bytes_read - b2));
#undef GET
    ms_store_close(s);
}

/* ms_store_touch: cached experts marked as just used outlive the others (LRU
 * and S3-FIFO); touching an expert not cached reads nothing. */
static void test_touch(fixture *fx) {
    const char *pols[] = { "lru", "s3fifo" };
    for (int ip = 0; ip < 2; ip++) {
        ms_err err;
        ms_store *s = NULL;
        ms_err_clear(&err);
        cfg c0 = { 0, MS_IO_PREAD, pols[ip], 1, 0, 1, 0, 0, { 0 }, NULL, 0 };
        const int64_t slot = probe_plan(fx, &c0).expert_slot_bytes;
        cfg c = { 0, MS_IO_PREAD, pols[ip], 1, 0, 1, 0, 4 * slot, { 0 }, NULL, 0 };
        if (store_make(fx, &c, &s, &err) != MS_OK) { CHECK(0, "%s", err.msg); ms_store_close(s); return; }
        CHECK(ms_store_expert_capacity(s) == 4, "capacity %d", ms_store_expert_capacity(s));
        const int *E = fx->expert;
        const uint8_t *pt[1];
        /* E0..E3 cached in that order, each used once */
        for (int i = 0; i < 4; i++) {
            CHECK(ms_store_acquire_batch(s, &E[i], 1, pt, &err) == MS_OK, "%s", err.msg);
            ms_store_release(s, E[i]);
        }
        ms_store_reset_stats(s);
        /* touch E0 and E1 (and E9, not cached: ignored, nothing read) */
        ms_store_touch(s, (int[]){ E[0], E[9], E[1] }, 3);
        ms_store_stats ss;
        ms_store_get_stats(s, &ss);
        CHECK(ss.expert_bytes_read == 0 && ss.expert_hits == 0 && ms_store_expert_state(s, E[9]) == MS_EXPERT_ABSENT,
              "%s: a touch reads and counts nothing", pols[ip]);
        /* two new experts evict two of the untouched E2 E3, never E0 E1 */
        for (int i = 4; i < 6; i++) {
            CHECK(ms_store_acquire_batch(s, &E[i], 1, pt, &err) == MS_OK, "%s", err.msg);
            CHECK(verify_region(fx, E[i], pt[0]) == 0, "expert %d bytes", i);
            ms_store_release(s, E[i]);
        }
        CHECK(ms_store_expert_state(s, E[0]) == MS_EXPERT_READY && ms_store_expert_state(s, E[1]) == MS_EXPERT_READY &&
              ms_store_expert_state(s, E[2]) == MS_EXPERT_ABSENT && ms_store_expert_state(s, E[3]) == MS_EXPERT_ABSENT,
              "%s: the touched experts outlive the others (E0 %d E1 %d E2 %d E3 %d)", pols[ip],
              ms_store_expert_state(s, E[0]), ms_store_expert_state(s, E[1]), ms_store_expert_state(s, E[2]),
              ms_store_expert_state(s, E[3]));
        ms_store_close(s);
    }
}

/* ms_store_peek: bytes of what is in memory now, nothing else; a streamed
 * region whose read-ahead finished is taken without a wait, and its acquire
 * still counts as served by the read-ahead. */
static void test_peek(fixture *fx) {
    ms_err err;
    ms_store *s = NULL;
    ms_err_clear(&err);
    cfg c0 = { 0, MS_IO_PREAD, "lru", 1, 0, 0, 0, 0, { 0 }, NULL, 0 };
    const int64_t floor = probe_plan(fx, &c0).floor_bytes;
    cfg c = { floor, MS_IO_PREAD, "lru", 1, 0, 0, 0, 0, { 0 }, NULL, 0 };
    ms_err_clear(&err);
    if (store_make(fx, &c, &s, &err) != MS_OK) { CHECK(0, "%s", err.msg); ms_store_close(s); return; }
    int st[16], n_st = 0;
    for (int t = 0; t < fx->n_trunk; t++)
        if (!ms_store_region_resident(s, fx->trunk[t])) st[n_st++] = fx->trunk[t];
    CHECK(n_st >= 4, "the floor streams %d trunk regions", n_st);
    /* a pinned region (the floor pins no trunk region; GLOBALs always are) */
    const uint8_t *g = ms_store_peek(s, fx->global_small);
    CHECK(g && verify_region(fx, fx->global_small, g) == 0, "peek of a pinned region");
    ms_store_reset_stats(s);
    const uint8_t *b = ms_store_acquire(s, st[0], &err);     /* reads st[0], reads st[1] ahead */
    CHECK(b && verify_region(fx, st[0], b) == 0, "acquire %s", err.msg);
    CHECK(ms_store_peek(s, st[3]) == NULL, "a streamed region not in the ring is not in memory");
    const uint8_t *pk = NULL;
    for (int i = 0; i < 5000 && !(pk = ms_store_peek(s, st[1])); i++)
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    CHECK(pk && verify_region(fx, st[1], pk) == 0, "a finished read-ahead is peeked without a wait");
    ms_store_stats ss;
    ms_store_get_stats(s, &ss);
    CHECK(ss.trunk_bytes_read == region_data_bytes(fx, st[0]) + region_data_bytes(fx, st[1]) &&
          ss.ra_issued == 1 && ss.trunk_sync_reads == 1, "peeks read nothing: %lld bytes, %lld read-aheads",
          (long long)ss.trunk_bytes_read, (long long)ss.ra_issued);
    ms_store_release(s, st[0]);
    b = ms_store_acquire(s, st[1], &err);
    CHECK(b == pk && verify_region(fx, st[1], b) == 0, "acquire after peek: same bytes");
    ms_store_get_stats(s, &ss);
    CHECK(ss.ra_used == 1 && ss.trunk_sync_reads == 1, "the peeked read-ahead serves the acquire (%lld used)",
          (long long)ss.ra_used);
    ms_store_release(s, st[1]);
    ms_store_close(s);
}

/* ms_store_read_region (the pack writer's read, before start): every region
 * declared is described back as declared and read whole, byte for byte, on
 * every backend; an EIO fails that read with MS_E_IO and the next one still
 * succeeds. */
static void test_read_region(fixture *fx) {
    const ms_io_kind kinds[] = { MS_IO_PREAD, MS_IO_DIRECT, MS_IO_URING };
    for (int mode = 0; mode < 4; mode++) {
        ms_io_params io = ms_io_default_params();
        io.kind = kinds[mode < 3 ? mode : 0];
        io.chunk_bytes = 128 << 10;
        if (mode == 3) io.fault = (ms_io_fault){ MS_FAULT_EIO, 0, 0, 0 };
        ms_store_params p = ms_store_default_params();
        p.io = &io;
        const char *paths[N_SHARD] = { fx->path[0], fx->path[1] };
        ms_store *s = NULL;
        ms_err err;
        ms_err_clear(&err);
        if (ms_store_open_paths(&p, paths, N_SHARD, &s, &err) != MS_OK) { CHECK(0, "open: %s", err.msg); continue; }
        for (int i = 0; i < fx->n; i++)
            CHECK(ms_store_add_region(s, fx->cls[i], fx->ranges[i], fx->n_ranges[i], fx->pos[i], &err) == i, "add %d", i);
        CHECK(ms_store_n_regions(s) == fx->n, "n_regions %d", ms_store_n_regions(s));
        CHECK(ms_store_sums(s) == NULL, "no sidecar given");
        int64_t cap = 0;
        for (int i = 0; i < fx->n; i++) if (ms_store_region_bytes(s, i) > cap) cap = ms_store_region_bytes(s, i);
        uint8_t *buf = aligned_alloc(4096, (size_t)cap);
        for (int i = 0; i < fx->n && buf; i++) {
            ms_region_class cls;
            const ms_range *g;
            const int64_t *pos;
            const int n = ms_store_region_layout(s, i, &cls, &g, &pos);
            int same = n == fx->n_ranges[i] && cls == fx->cls[i];
            for (int k = 0; same && k < n; k++)
                same = g[k].shard == fx->ranges[i][k].shard && g[k].offset == fx->ranges[i][k].offset &&
                       g[k].n_bytes == fx->ranges[i][k].n_bytes && pos[k] == fx->pos[i][k];
            CHECK(same, "mode %d: region %d described back as declared", mode, i);
            ms_err_clear(&err);
            ms_status st = ms_store_read_region(s, i, buf, &err);
            if (mode == 3 && i == 0)
                CHECK(st == MS_E_IO, "mode 3: the injected EIO fails the read (%d: %s)", (int)st, err.msg);
            else
                CHECK(st == MS_OK && verify_region(fx, i, buf) == 0, "mode %d: region %d read: %s", mode, i,
                      err.msg);
        }
        free(buf);
        ms_store_close(s);
    }
}

/* Resident pages of this process (/proc/self/statm), or -1. */
static int64_t rss_pages(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, res = -1;
    if (!f) return -1;
    if (fscanf(f, "%lld %lld", &size, &res) != 2) res = -1;
    fclose(f);
    return res;
}

/* ms_store_start maps the ring and the expert arena (their pages are first
 * written by reads during tokens, which would fault them in the read's path):
 * right after start the process holds at least their bytes more than before,
 * at the floor, where the resident part is small. */
static void test_prefault(fixture *fx) {
    ms_err err;
    ms_err_clear(&err);
    cfg c0 = { 1, MS_IO_PREAD, "lru", 1, 0, 0, 0, 0, { 0 }, NULL, 0 };
    ms_plan pl = probe_plan(fx, &c0);
    cfg c = { pl.floor_bytes, MS_IO_PREAD, "lru", 1, 0, 0, 0, 0, { 0 }, NULL, 0 };
    ms_store *s = NULL;
    int64_t r0 = rss_pages();
    if (store_make(fx, &c, &s, &err) != MS_OK) { CHECK(0, "%s", err.msg); ms_store_close(s); return; }
    int64_t r1 = rss_pages();
    const ms_plan *p = ms_store_get_plan(s);
    const int64_t need = p->ring_bytes + p->expert_bytes;
    CHECK(r0 > 0 && r1 > 0 && need > 0 && (r1 - r0) * 4096 >= need,
          "start maps ring + arena: RSS grew by %lld bytes, ring %lld + arena %lld",
          (long long)((r1 - r0) * 4096), (long long)p->ring_bytes, (long long)p->expert_bytes);
    ms_store_close(s);
}

int main(void) {
    test_plan_hand();
    test_layout();
    test_cache_states();
    fixture fx;
    if (fixture_make(&fx) != 0) {
        CHECK(0, "cannot build the fixture in %s", fx.dir);
        return CHECK_DONE("test_store");
    }
    test_budgets(&fx);
    test_depth(&fx);
    test_stats(&fx);
    test_guesses(&fx);
    test_peek(&fx);
    test_touch(&fx);
    test_prefault(&fx);
    test_faults(&fx);
    test_read_region(&fx);
    test_traces(&fx);
    fixture_free(&fx);
    return CHECK_DONE("test_store");
}
