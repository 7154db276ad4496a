/* store/store.c - the store: the region table, open / close, the start (plan,
 * allocate, read what is resident) and the entry points of store/store.h.
 *
 * Where a region's bytes live (decided once by the plan, store/plan.h):
 *
 *   GLOBAL          pinned block            acquire -> pointer, release no-op
 *   GLOBAL sparse   sparse block or disk    read_part only (bounce buffer)
 *   TRUNK pinned    pinned block            acquire -> pointer, release no-op
 *   TRUNK streamed  ring of n_ring slots    acquire waits / reads, read-ahead (ring.c)
 *   EXPERT          arena of equal slots    cache, hints, guesses (experts.c)
 *
 * Every region read is submitted, waited and judged (checksums, the packed
 *   trunk's decode) by land.c; the parts of struct ms_store and the files that
 *   own them are listed in store/store_int.h.
 * By-part reads (read_part) of a region not in memory go through the bounce
 *   buffer; with params.sums they read whole checksum blocks, checked the
 *   same way as region reads, then copy the part out; the last verified piece
 *   stays there (store_bounce) and serves the next parts that lie inside it.
 * Memory: every weight buffer is allocated in ms_store_start (blocks sized by
 *   the plan, plus scratch arrays sized by the slot counts; the request array
 *   grows with the regions' range counts as they are declared); acquire,
 *   release, read_part and hint allocate nothing.
 * Thread safety: the compute thread calls everything; the I/O layer's own
 *   threads only touch buffers between submit and wait (and land.c's hook).
 * Does not: know layers or tensors; write packs (engine/pack_write.c reads
 *   the regions through ms_store_read_region).
 */
#include "store/store_int.h"

#include "base/bufalloc.h"
#include "base/progress.h"

#include <stdlib.h>
#include <string.h>

/* the fewest reads in flight expert_depth keeps */
#define MS_STORE_MIN_DEPTH 4

ms_store_params ms_store_default_params(void) {
    ms_store_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* ------------------------------------------------------------ open/close */

static ms_status check_open_params(const ms_store_params *p, int n_paths, ms_err *err) {
    if (p->ram_bytes < 0 || p->trunk_bytes < 0 || p->expert_bytes < 0 || p->min_expert_slots < 0 ||
        p->bounce_bytes < 0 || p->ring_slots < 0 || p->ring_slots == 1 || n_paths < 0)
        return ms_err_set(err, MS_E_USAGE,
                          "store: negative size or count, or 1 ring slot (at least 2 are needed)");
    if (p->policy && !ms_policy_find(p->policy))
        return ms_err_set(err, MS_E_USAGE, "unknown cache policy '%s' (known: %s)", p->policy,
                          ms_policy_names());
    return MS_OK;
}

/* Start the I/O layer (falling back from io_uring to O_DIRECT pread) and add
 * the shards, then the pack, as its files. */
static ms_status open_files(ms_store *s, const char *const *paths, int n_paths, ms_err *err) {
    ms_err e2;
    ms_err_clear(&e2);
    ms_status st = ms_io_open(&s->io_p, &s->io, &e2);
    if (st != MS_OK && s->io_p.kind == MS_IO_URING) {
        ms_log(s->p.log, MS_LOG_WARN, "store: %s; using O_DIRECT pread instead", e2.msg);
        s->io_p.kind = MS_IO_DIRECT;
        st = ms_io_open(&s->io_p, &s->io, err);
    } else if (st != MS_OK) {
        ms_err_set(err, st, "%s", e2.msg);
    }
    for (int i = 0; i < n_paths && st == MS_OK; i++) {
        st = ms_io_add_file(s->io, paths[i], &s->file_of[i], err);
        if (st == MS_OK) s->file_bytes[i] = ms_io_file_size(s->io, s->file_of[i]);
        MS_ASSERT(st != MS_OK || s->file_of[i] == i);   /* store_io_check takes file index = shard */
    }
    if (st == MS_OK && s->pk.pack) st = ms_io_add_file(s->io, ms_pack_path(s->pk.pack), &s->pk.file, err);
    return st;
}

ms_status ms_store_open_paths(const ms_store_params *p, const char *const *paths, int n_paths,
                              ms_store **out, ms_err *err) {
    *out = NULL;
    ms_status st = check_open_params(p, n_paths, err);
    if (st != MS_OK) return st;
    ms_store *s = calloc(1, sizeof *s);
    if (!s) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    s->p = *p;
    s->io_p = p->io ? *p->io : ms_io_default_params();
    s->p.io = NULL;
    s->sums = p->sums;
    s->p.sums = NULL;
    s->bc.shard = -1;
    s->pk.pack = p->pack;
    s->p.pack = NULL;
    s->pk.file = -1;
    if ((s->sums && !s->p.verify_sync) || s->pk.pack) {
        s->io_p.check = store_io_check;
        s->io_p.check_user = s;
    }
    /* by-part reads then read the enclosing blocks: two of them (a part that
     * straddles a block boundary) plus the alignment of both ends */
    const int64_t verify_bounce = 2 * MS_SUMS_BLOCK_BYTES + 2 * MS_IO_ALIGN;
    if (s->sums && (s->p.bounce_bytes == 0 ? MS_PLAN_DEFAULT_BOUNCE : s->p.bounce_bytes) < verify_bounce)
        s->p.bounce_bytes = verify_bounce;
    s->policy = p->policy ? strdup(p->policy) : NULL;
    s->trace_path = p->trace_path ? strdup(p->trace_path) : NULL;
    s->p.policy = s->policy;
    s->p.trace_path = s->trace_path;
    s->file_of = calloc((size_t)n_paths + 1, sizeof *s->file_of);
    s->file_bytes = calloc((size_t)n_paths + 1, sizeof *s->file_bytes);
    if ((p->policy && !s->policy) || (p->trace_path && !s->trace_path) || !s->file_of || !s->file_bytes) {
        ms_store_close(s);
        return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    }
    st = open_files(s, paths, n_paths, err);
    if (st != MS_OK) { ms_store_close(s); return st; }
    s->n_files = n_paths;
    *out = s;
    return MS_OK;
}

ms_status ms_store_open(const ms_store_params *p, const ms_ckpt *ckpt,
                        ms_store **out, ms_err *err) {
    *out = NULL;
    int n = ms_ckpt_n_shards(ckpt);
    const char **paths = calloc((size_t)n + 1, sizeof *paths);
    if (!paths) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    for (int i = 0; i < n; i++) paths[i] = ms_ckpt_shard(ckpt, i)->path;
    ms_status st = ms_store_open_paths(p, paths, n, out, err);
    free(paths);
    return st;
}

void ms_store_close(ms_store *s) {
    if (!s) return;
    ms_io_close(s->io);                 /* drains every outstanding read first */
    if (s->trace) {
        ms_err e2;
        ms_err_clear(&e2);
        if (ms_trace_close(s->trace, &e2) != MS_OK) ms_log(s->p.log, MS_LOG_WARN, "store: %s", e2.msg);
    }
    for (int i = 0; i < BK_N; i++) {
        block *b = &s->blk[i];
        ms_buf_free(b->p, b->bytes, b->bytes >= MS_BUF_HUGE_PAGE);
    }
    for (int i = 0; i < s->n_regions; i++) {
        free(s->regions[i].ranges);
        free(s->regions[i].pos);
    }
    free(s->regions);
    ring_free(s);
    experts_free(s);
    store_pack_free(s);
    free(s->reqs);
    free(s->file_of);
    free(s->file_bytes);
    free(s->policy);
    free(s->trace_path);
    free(s);
}

/* --------------------------------------------------------------- regions */

/* Range i of a new region (index n_regions) lies inside its file and, with
 * the sums, is made of whole checksum blocks. */
static ms_status check_range(const ms_store *s, const ms_range *g, int i, ms_err *err) {
    if (g->shard < 0 || g->shard >= s->n_files || g->offset < 0 || g->n_bytes < 0 ||
        g->offset > s->file_bytes[g->shard] - g->n_bytes)
        return ms_err_set(err, MS_E_MODEL,
                          "store: region %d range %d (shard %d, offset %lld, %lld bytes) lies outside its file",
                          s->n_regions, i, g->shard, (long long)g->offset, (long long)g->n_bytes);
    int64_t c0, c1;
    if (s->sums && g->n_bytes > 0 &&
        (ms_sums_cover(s->sums, g->shard, g->offset, g->n_bytes, &c0, &c1, err) != MS_OK ||
         c0 != g->offset || c1 != g->offset + g->n_bytes))
        return ms_err_set(err, MS_E_INTERNAL,
                          "store: region %d range %d (shard %d, offset %lld, %lld bytes) is not made of whole"
                          " checksum blocks, so it cannot be verified", s->n_regions, i, g->shard,
                          (long long)g->offset, (long long)g->n_bytes);
    return MS_OK;
}

/* Room for one more region, and for the requests of n_ranges ranges. */
static ms_status grow_tables(ms_store *s, int n_ranges, ms_err *err) {
    if (s->n_regions == s->cap_regions) {
        int cap = s->cap_regions ? s->cap_regions * 2 : 256;
        region *r = realloc(s->regions, (size_t)cap * sizeof *r);
        if (!r) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
        s->regions = r;
        s->cap_regions = cap;
    }
    if (n_ranges > s->max_ranges || !s->reqs) {
        const int n = n_ranges > s->max_ranges ? n_ranges : s->max_ranges;
        ms_io_req *q = realloc(s->reqs, ((size_t)n + 1) * sizeof *q);
        if (!q) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
        s->reqs = q;
        s->max_ranges = n;
    }
    return MS_OK;
}

/* Range i lands at a buffer offset congruent to its file offset mod 4096, so
 * its aligned read superset starts on a page of the buffer; a `down` range
 * needs one byte below that on the same page (a page more when it lands at a
 * page's start), where its bytes move once they have landed. */
int64_t ms_store_layout(const ms_range *r, int n, int64_t *pos) {
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const int64_t skew = r[i].offset % STORE_ALIGN;
        MS_ASSERT(r[i].down == 0 || r[i].down == 1);
        at = (at + STORE_ALIGN - 1) / STORE_ALIGN * STORE_ALIGN + (skew < r[i].down ? STORE_ALIGN : 0) + skew;
        pos[i] = at - r[i].down;
        at += r[i].n_bytes;
    }
    at = (at + STORE_ALIGN - 1) / STORE_ALIGN * STORE_ALIGN;
    return at ? at : STORE_ALIGN;
}

int ms_store_add_region(ms_store *s, ms_region_class cls, const ms_range *ranges,
                        int n_ranges, int64_t *range_pos, ms_err *err) {
    MS_ASSERT(!s->started && !s->start_failed && n_ranges >= 1);
    MS_ASSERT(cls == MS_REGION_GLOBAL || cls == MS_REGION_TRUNK || cls == MS_REGION_EXPERT);
    ms_status st = MS_OK;
    for (int i = 0; i < n_ranges && st == MS_OK; i++) st = check_range(s, &ranges[i], i, err);
    if (st == MS_OK) st = grow_tables(s, n_ranges, err);
    if (st != MS_OK) return st;
    region *r = &s->regions[s->n_regions];
    memset(r, 0, sizeof *r);
    r->cls = cls;
    r->n_ranges = n_ranges;
    r->stream_pos = r->ring_slot = r->key = -1;
    r->ranges = malloc((size_t)n_ranges * sizeof *r->ranges);
    r->pos = malloc((size_t)n_ranges * sizeof *r->pos);
    if (!r->ranges || !r->pos) {
        free(r->ranges); free(r->pos);
        return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    }
    r->buf_bytes = ms_store_layout(ranges, n_ranges, r->pos);
    for (int i = 0; i < n_ranges; i++) {
        r->ranges[i] = ranges[i];
        if (range_pos) range_pos[i] = r->pos[i];
        r->data_bytes += ranges[i].n_bytes;
    }
    if (cls == MS_REGION_EXPERT) r->key = s->n_expert++;
    if (cls == MS_REGION_TRUNK && s->pk.pack) r->pk = store_pack_entry(s, r);
    return s->n_regions++;
}

void ms_store_mark_sparse(ms_store *s, int region_id) {
    MS_ASSERT(!s->started && region_id >= 0 && region_id < s->n_regions);
    MS_ASSERT(s->regions[region_id].cls == MS_REGION_GLOBAL);
    s->regions[region_id].sparse = 1;
}

int64_t ms_store_region_bytes(const ms_store *s, int region_id) {
    MS_ASSERT(region_id >= 0 && region_id < s->n_regions);
    return s->regions[region_id].buf_bytes;
}

int ms_store_n_regions(const ms_store *s) { return s->n_regions; }

int ms_store_region_layout(const ms_store *s, int region_id, ms_region_class *cls,
                           const ms_range **ranges, const int64_t **pos) {
    MS_ASSERT(region_id >= 0 && region_id < s->n_regions);
    const region *r = &s->regions[region_id];
    if (cls) *cls = r->cls;
    if (ranges) *ranges = r->ranges;
    if (pos) *pos = r->pos;
    return r->n_ranges;
}

int ms_store_region_resident(const ms_store *s, int region_id) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    const region *r = &s->regions[region_id];
    return r->resident || (r->cls == MS_REGION_EXPERT && s->plan.experts_resident);
}

const ms_plan *ms_store_get_plan(const ms_store *s) {
    return (s->started || s->start_failed) ? &s->plan : NULL;
}

ms_io *ms_store_io(ms_store *s) {
    return s->io;
}

const ms_sums *ms_store_sums(const ms_store *s) {
    return s->sums;
}

/* ----------------------------------------------------------------- start */

/* Compute the plan (logged at INFO either way); res[i] = 1 for the regions
 * it keeps resident. */
static ms_status plan_regions(ms_store *s, uint8_t *res, ms_err *err) {
    ms_plan_region *pr = calloc((size_t)s->n_regions + 1, sizeof *pr);
    if (!pr) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    for (int i = 0; i < s->n_regions; i++)
        pr[i] = (ms_plan_region){ (int)s->regions[i].cls, s->regions[i].buf_bytes, s->regions[i].sparse };
    ms_plan_input in = { pr, s->n_regions, s->p.ram_bytes, s->p.trunk_bytes, s->p.expert_bytes,
                         s->p.min_expert_slots, s->p.ring_slots, s->p.bounce_bytes };
    ms_status st = ms_plan_compute(&in, &s->plan, res, err);
    if (st == MS_E_BUDGET && s->p.ram_floor && s->plan.floor_bytes > 0) {
        /* the smallest plan: the one at the floor the refusal names */
        in.ram_bytes = s->p.ram_bytes = s->plan.floor_bytes;
        memset(res, 0, (size_t)s->n_regions + 1);
        if (err) ms_err_clear(err);
        st = ms_plan_compute(&in, &s->plan, res, err);
    }
    free(pr);
    char table[2048];
    ms_plan_format(&s->plan, table, sizeof table);
    ms_log(s->p.log, MS_LOG_INFO, "%s", table);
    if (st != MS_OK) ms_log(s->p.log, MS_LOG_ERROR, "store: %s", err ? err->msg : "plan refused");
    return st;
}

static ms_status alloc_block(ms_store *s, int which, int64_t bytes, ms_err *err) {
    if (bytes <= 0) return MS_OK;
    uint8_t *p = ms_buf_alloc(bytes, bytes >= MS_BUF_HUGE_PAGE);
    if (!p) return ms_err_set(err, MS_E_NOMEM, "store: cannot allocate %lld bytes", (long long)bytes);
    s->blk[which] = (block){ p, bytes };
    return MS_OK;
}

/* Mark the resident regions (res[]), allocate the plan's blocks exactly as
 * it accounted them and place the resident regions in theirs. */
static ms_status alloc_blocks(ms_store *s, const uint8_t *res, ms_err *err) {
    int64_t g = 0, t = 0, sp = 0;
    for (int i = 0; i < s->n_regions; i++) {
        region *r = &s->regions[i];
        if (r->cls == MS_REGION_EXPERT || !res[i]) continue;
        r->resident = 1;
        if (r->cls == MS_REGION_TRUNK) t += r->buf_bytes;
        else if (r->sparse) sp += r->buf_bytes;
        else g += r->buf_bytes;
    }
    const ms_plan *pl = &s->plan;
    ms_status st;
    if ((st = alloc_block(s, BK_GLOBAL, g, err)) != MS_OK ||
        (st = alloc_block(s, BK_TRUNK, t, err)) != MS_OK ||
        (st = alloc_block(s, BK_SPARSE, sp, err)) != MS_OK ||
        (st = alloc_block(s, BK_RING, (int64_t)pl->n_ring * pl->ring_slot_bytes, err)) != MS_OK ||
        (st = alloc_block(s, BK_ARENA, (int64_t)pl->n_expert_slots * pl->expert_slot_bytes, err)) != MS_OK ||
        (st = alloc_block(s, BK_BOUNCE, pl->bounce_bytes, err)) != MS_OK)
        return st;
    /* Map the ring, the expert arena and the bounce buffer now. Their pages
     * are first written by reads during tokens, and an O_DIRECT read into
     * unmapped pages faults and zeroes them in the read's path: the first
     * token that fills a slot further than any before (and a prompt, for
     * every first use) would pay it (docs/perf/history.md, "First-touch
     * page faults"); here it is paid once, at start. Resident blocks need nothing:
     * ms_store_start reads them in full. */
    for (int i = BK_RING; i <= BK_BOUNCE; i++)
        ms_buf_prefault(s->blk[i].p, s->blk[i].bytes, s->blk[i].bytes >= MS_BUF_HUGE_PAGE);
    int64_t acc = 0;
    for (int i = 0; i < BK_N; i++) acc += ms_plan_alloc_bytes(s->blk[i].bytes);
    MS_ASSERT(acc == pl->total_bytes);     /* every byte the plan promised, no more */
    int64_t at[3] = { 0, 0, 0 };
    for (int i = 0; i < s->n_regions; i++) {
        region *r = &s->regions[i];
        if (!r->resident) continue;
        int which = r->cls == MS_REGION_TRUNK ? BK_TRUNK : r->sparse ? BK_SPARSE : BK_GLOBAL;
        int64_t *a = &at[which];
        r->buf = s->blk[which].p + *a;
        *a += r->buf_bytes;
    }
    return MS_OK;
}

static ms_status plan_and_allocate(ms_store *s, ms_err *err) {
    uint8_t *res = calloc((size_t)s->n_regions + 1, 1);
    if (!res) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    ms_status st = plan_regions(s, res, err);
    if (st == MS_OK) st = alloc_blocks(s, res, err);
    free(res);
    if (st == MS_OK) st = ring_init(s, err);
    if (st == MS_OK) st = experts_init(s, err);
    if (st != MS_OK) return st;
    s->stats.resident_bytes = s->plan.total_bytes;
    s->stats.peak_bytes = s->plan.total_bytes;
    return MS_OK;
}

/* Reads in flight at start: one ticket per region keeps the request arrays
 * small, a window of outstanding tickets keeps the I/O queue full. */
enum { WINDOW = 16 };
typedef struct window {
    uint64_t tk[WINDOW];
    int region[WINDOW];
    uint8_t *dst[WINDOW];
    int n;
} window;

/* Land every read in w while st is MS_OK (after a failure: wait and drop
 * them). Returns the first failure. */
static ms_status drain_window(ms_store *s, window *w, ms_status st, ms_err *err) {
    for (int j = 0; j < w->n; j++) {
        ms_status x = st == MS_OK ? store_land(s, &s->regions[w->region[j]], w->dst[j], w->tk[j], NULL, err)
                                  : store_wait(s, w->tk[j], NULL, NULL, NULL);
        if (st == MS_OK) st = x;
    }
    w->n = 0;
    return st;
}

/* Read every resident region (and, when all fit, every expert) at start. */
static ms_status load_resident(ms_store *s, ms_err *err) {
    window w = { .n = 0 };
    ms_status st = MS_OK;
    int64_t total = 0, done = 0;            /* bytes, for the "open" progress */
    for (int i = 0; i < s->n_regions; i++)
        if (s->regions[i].resident || (s->regions[i].cls == MS_REGION_EXPERT && s->plan.experts_resident))
            total += s->regions[i].data_bytes;
    ms_progress_step ps;
    ms_progress_begin(&ps, "open", total, 0);
    for (int i = 0; i < s->n_regions && st == MS_OK; i++) {
        region *r = &s->regions[i];
        uint8_t *dst = NULL;
        if (r->resident) dst = r->buf;
        else if (r->cls == MS_REGION_EXPERT && s->plan.experts_resident) dst = experts_resident_slot(s, r);
        if (!dst) continue;
        if (w.n == WINDOW) {
            int64_t landed = 0;
            for (int j = 0; j < w.n; j++) landed += s->regions[w.region[j]].data_bytes;
            if ((st = drain_window(s, &w, st, err)) != MS_OK) break;
            done += landed;
            ms_progress_report(&ps, done, 0, done);
        }
        st = store_submit(s, r, dst, &w.tk[w.n], err);
        if (st == MS_OK) { w.region[w.n] = i; w.dst[w.n] = dst; w.n++; }
    }
    st = drain_window(s, &w, st, err);
    if (st != MS_OK) return st;
    ms_progress_report(&ps, total, 0, total);
    if (s->plan.experts_resident) experts_publish_resident(s);
    return MS_OK;
}

/* Reads in flight while only experts stream (no trunk region streams, the
 * experts do not all fit): the reads of the largest expert, at least
 * MS_STORE_MIN_DEPTH; else 0 (keep the queue depth). Reads in flight
 * together land together, so with the whole queue depth a layer's experts
 * (gpt-oss: 4 x 10 reads) all land at its end and their computation waits
 * for the last byte of the last one; with one expert's reads in flight they
 * land one after another in the order they are needed, each computed while
 * the next is read, and the next layer's guesses queue behind them instead
 * of sharing the disk with them. The trunk's streaming keeps the full depth
 * (docs/perf/history.md, "32 reads in flight by default";
 * "one expert's reads in flight when only experts stream"). */
static int expert_depth(const ms_store *s) {
    const ms_plan *pl = &s->plan;
    if (pl->n_ring > 0 || pl->experts_resident || pl->n_expert_regions == 0) return 0;
    const int64_t cb = (s->io_p.chunk_bytes + MS_IO_ALIGN - 1) / MS_IO_ALIGN * MS_IO_ALIGN;
    int64_t most = 0;
    for (int i = 0; i < s->n_regions; i++) {
        const region *r = &s->regions[i];
        if (r->cls != MS_REGION_EXPERT) continue;
        int64_t n = 0;
        for (int j = 0; j < r->n_ranges; j++)
            if (r->ranges[j].n_bytes > 0) n += (ms_io_span(r->ranges[j].offset, r->ranges[j].n_bytes) + cb - 1) / cb;
        if (n > most) most = n;
    }
    return most > MS_STORE_MIN_DEPTH ? (int)most : MS_STORE_MIN_DEPTH;
}

ms_status ms_store_start(ms_store *s, ms_err *err) {
    MS_ASSERT(!s->started && !s->start_failed);
    ms_status st = plan_and_allocate(s, err);
    if (st == MS_OK) st = store_pack_index(s, err);
    if (st == MS_OK && s->trace_path) st = ms_trace_open(s->trace_path, &s->trace, err);
    if (st == MS_OK) st = load_resident(s, err);
    if (st != MS_OK) { s->start_failed = 1; return st; }
    const int depth = expert_depth(s);
    if (depth > 0) ms_io_set_depth(s->io, depth);
    s->started = 1;
    return MS_OK;
}

/* ---------------------------------------------------------- acquire API */

const uint8_t *ms_store_acquire(ms_store *s, int region_id, ms_err *err) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    region *r = &s->regions[region_id];
    if (r->resident) return r->buf;
    if (r->cls == MS_REGION_TRUNK) return ring_acquire(s, region_id, err);
    MS_ASSERT(r->cls == MS_REGION_EXPERT);  /* a sparse GLOBAL is read by parts only */
    const uint8_t *p = NULL;
    int idx = 0;
    if (experts_batch(s, &region_id, &idx, 1, &p, err) != MS_OK) return NULL;
    return p;
}

ms_status ms_store_acquire_batch(ms_store *s, const int *regions, int n,
                                 const uint8_t **ptrs, ms_err *err) {
    MS_ASSERT(s->started && n >= 0);
    int n_exp = 0;
    for (int i = 0; i < n; i++) {
        MS_ASSERT(regions[i] >= 0 && regions[i] < s->n_regions);
        ptrs[i] = NULL;
        if (s->regions[regions[i]].cls == MS_REGION_EXPERT) n_exp++;
    }
    MS_ASSERT(n_exp == 0 || (s->ex.on && n_exp <= s->ex.cache.n_slots));
    int k = 0;
    for (int i = 0; i < n; i++)
        if (s->regions[regions[i]].cls == MS_REGION_EXPERT) s->ex.b_idx[k++] = i;
    ms_status st = MS_OK;
    for (int i = 0; i < n && st == MS_OK; i++) {
        if (s->regions[regions[i]].cls == MS_REGION_EXPERT) continue;
        if (!(ptrs[i] = ms_store_acquire(s, regions[i], err))) st = err ? err->status : MS_E_IO;
    }
    if (st == MS_OK && n_exp > 0) st = experts_batch(s, regions, s->ex.b_idx, n_exp, ptrs, err);
    if (st != MS_OK) {
        for (int i = 0; i < n; i++)
            if (ptrs[i] && s->regions[regions[i]].cls != MS_REGION_EXPERT) {
                ms_store_release(s, regions[i]);
                ptrs[i] = NULL;
            }
        if (st >= 0) st = MS_E_IO;
    }
    return st;
}

void ms_store_release(ms_store *s, int region_id) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    region *r = &s->regions[region_id];
    if (r->resident) return;
    if (r->cls == MS_REGION_TRUNK) {
        ring_release(s, r);
        return;
    }
    MS_ASSERT(r->cls == MS_REGION_EXPERT);
    expert_release(s, r);
}

ms_status ms_store_read_region(ms_store *s, int region_id, uint8_t *buf, ms_err *err) {
    MS_ASSERT(!s->started && !s->pk.pack && region_id >= 0 && region_id < s->n_regions);
    region *r = &s->regions[region_id];
    uint64_t t;
    ms_status st = store_submit(s, r, buf, &t, err);
    if (st == MS_OK) st = store_land(s, r, buf, t, NULL, err);
    return st;
}

/* ------------------------------------------------------------- read_part */

/* Bytes of region r in memory right now (resident, a READY ring slot or a
 * READY cache slot), or NULL. */
static const uint8_t *in_memory(const ms_store *s, const region *r) {
    if (r->resident) return r->buf;
    if (r->cls == MS_REGION_TRUNK) return ring_in_memory(s, r);
    if (r->cls == MS_REGION_EXPERT) return expert_in_memory(s, r);
    return NULL;
}

const uint8_t *ms_store_peek(ms_store *s, int region_id) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    const region *r = &s->regions[region_id];
    if (r->cls == MS_REGION_TRUNK) ring_reap(s, r);
    return in_memory(s, r);
}

static void count_part(ms_store *s, const region *r, int64_t len) {
    s->stats.reads_issued++;
    if (r->cls == MS_REGION_TRUNK) s->stats.trunk_bytes_read += len;
    else if (r->cls == MS_REGION_EXPERT) s->stats.expert_bytes_read += len;
    else s->stats.global_bytes_read += len;
}

/* Copy the part [off, off + n) shares with [cur, end), which lies in the
 * bounce buffer from its byte skew(from) on as file bytes from `from` on. */
static void copy_piece(const ms_store *s, int64_t from, int64_t cur, int64_t end, int64_t off, int64_t n,
                       uint8_t *out) {
    int64_t a = cur > off ? cur : off, b = end < off + n ? end : off + n;
    if (b > a) memcpy(out + (a - off), s->blk[BK_BOUNCE].p + ms_io_skew(from) + (a - from), (size_t)(b - a));
}

/* Read whole checksum blocks [cur, end) of shard g->shard into the bounce
 * buffer and check them (once more on a mismatch); on success they become
 * the kept piece (store_bounce). */
static ms_status bounce_verified(ms_store *s, const region *r, const ms_range *g, int64_t cur, int64_t end,
                                 ms_err *err) {
    const block *bb = &s->blk[BK_BOUNCE];
    for (int attempt = 0;; attempt++) {
        ms_io_req q = { s->file_of[g->shard], cur, end - cur, bb->p, !s->p.verify_sync };
        uint64_t t;
        ms_err check;
        ms_status st = ms_io_submit(s->io, &q, 1, &t, err);
        if (st == MS_OK) st = store_wait(s, t, NULL, &check, err);
        if (st != MS_OK) return st;
        count_part(s, r, end - cur);
        ms_err e1;
        ms_err_clear(&e1);
        if (s->p.verify_sync) {
            st = store_check_sync(s, g->shard, cur, end - cur, bb->p + ms_io_skew(cur), attempt ? err : &e1);
        } else {
            st = check.status;
            if (st != MS_OK) ms_err_set(attempt ? err : &e1, st, "%s", check.msg);
        }
        if (st == MS_OK) {
            s->bc = (store_bounce){ g->shard, cur, end };
            return MS_OK;
        }
        if (attempt) { s->stats.verify_failures++; return st; }
        s->stats.verify_retries++;
        ms_log(s->p.log, MS_LOG_WARN, "store: %s; reading it again", e1.msg);
    }
}

/* Read bytes [off, off + n) of range g (of region r) into out, verified: the
 * enclosing checksum blocks are read through the bounce buffer in pieces of
 * whole blocks, each piece checked (and read once more on a mismatch) before
 * its share of the part is copied out. The last verified piece stays in the
 * bounce buffer (store_bounce): blocks inside it are copied out without a
 * read (the next embedding row of the same block costs no I/O and no
 * hashing). */
static ms_status read_part_verified(ms_store *s, const region *r, const ms_range *g, int64_t off,
                                    int64_t n, uint8_t *out, ms_err *err) {
    const block *bb = &s->blk[BK_BOUNCE];
    int64_t c0, c1;
    ms_status st = ms_sums_cover(s->sums, g->shard, off, n, &c0, &c1, err);
    if (st != MS_OK) return st;
    for (int64_t cur = c0; cur < c1;) {
        int64_t end = cur;
        if (s->bc.shard == g->shard && cur >= s->bc.begin && cur < s->bc.end) {
            /* cur is a block start and bc.end a block end (the piece was whole
             * blocks), so [cur, end) is whole verified blocks */
            end = s->bc.end < c1 ? s->bc.end : c1;
            s->stats.part_hits++;
            copy_piece(s, s->bc.begin, cur, end, off, n, out);
            cur = end;
            continue;
        }
        s->bc.shard = -1;   /* the bounce buffer is about to be overwritten */
        for (;;) {          /* as many whole blocks as the bounce buffer holds */
            int64_t nx = ms_sums_block_end(s->sums, g->shard, end);
            MS_ASSERT(nx > end && nx <= c1);
            if (end > cur && ms_io_span(cur, nx - cur) > bb->bytes) break;
            end = nx;
            if (end == c1) break;
        }
        MS_ASSERT(bb->p && ms_io_span(cur, end - cur) <= bb->bytes);   /* >= one block + alignment */
        if ((st = bounce_verified(s, r, g, cur, end, err)) != MS_OK) return st;
        copy_piece(s, cur, cur, end, off, n, out);
        cur = end;
    }
    return MS_OK;
}

/* Read bytes [off, off + n) of range g (of region r) into out through the
 * bounce buffer, unverified, in pieces whose aligned span fits it. */
static ms_status read_part_plain(ms_store *s, const region *r, const ms_range *g, int64_t off, int64_t n,
                                 uint8_t *out, ms_err *err) {
    const block *bb = &s->blk[BK_BOUNCE];
    MS_ASSERT(bb->p && bb->bytes > 2 * STORE_ALIGN);
    const int64_t piece_max = bb->bytes - 2 * STORE_ALIGN;
    for (int64_t done = 0; done < n;) {
        int64_t len = n - done < piece_max ? n - done : piece_max;
        int64_t at = off + done;
        ms_io_req q = { s->file_of[g->shard], at, len, bb->p, 0 };
        uint64_t t;
        ms_status st = ms_io_submit(s->io, &q, 1, &t, err);
        if (st == MS_OK) st = store_wait(s, t, NULL, NULL, err);
        if (st != MS_OK) return st;
        count_part(s, r, len);
        memcpy(out + done, bb->p + ms_io_skew(at), (size_t)len);
        done += len;
    }
    return MS_OK;
}

ms_status ms_store_read_part(ms_store *s, int region_id, int64_t rel, int64_t n_bytes,
                             void *dst, ms_err *err) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    region *r = &s->regions[region_id];
    if (rel < 0 || n_bytes < 0 || rel > r->data_bytes - n_bytes)
        return ms_err_set(err, MS_E_INTERNAL, "store: part [%lld, +%lld) lies outside region %d (%lld bytes)",
                          (long long)rel, (long long)n_bytes, region_id, (long long)r->data_bytes);
    const uint8_t *mem = in_memory(s, r);
    uint8_t *out = dst;
    for (int i = 0; i < r->n_ranges && n_bytes > 0; i++) {
        const ms_range *g = &r->ranges[i];
        if (rel >= g->n_bytes) { rel -= g->n_bytes; continue; }
        int64_t take = g->n_bytes - rel < n_bytes ? g->n_bytes - rel : n_bytes;
        ms_status st = MS_OK;
        if (mem) memcpy(out, mem + r->pos[i] + rel, (size_t)take);
        else if (s->sums) st = read_part_verified(s, r, g, g->offset + rel, take, out, err);
        else st = read_part_plain(s, r, g, g->offset + rel, take, out, err);
        if (st != MS_OK) return st;
        out += take;
        n_bytes -= take;
        rel = 0;
    }
    MS_ASSERT(n_bytes == 0);
    return MS_OK;
}

/* ----------------------------------------------------------------- stats */

void ms_store_get_stats(const ms_store *s, ms_store_stats *st) {
    *st = s->stats;
    st->unpack_ns = __atomic_load_n(&s->pk.unpack_ns, __ATOMIC_RELAXED);
    if (!s->io) return;
    /* the hashing done on the I/O threads (counted there since open, like verify_*) */
    ms_io_stats io;
    ms_io_get_stats(s->io, &io);
    st->verify_ns += io.check_ns;
    st->verify_bytes += io.check_bytes;
    st->io_busy_ns = io.busy_ns - s->io_busy0;
    st->io_depth_ns = io.depth_ns - s->io_depth0;
}

void ms_store_reset_stats(ms_store *s) {
    const ms_store_stats keep = s->stats;
    memset(&s->stats, 0, sizeof s->stats);
    s->stats.resident_bytes = keep.resident_bytes;
    s->stats.peak_bytes = keep.peak_bytes;
    s->stats.verify_bytes = keep.verify_bytes;
    s->stats.verify_retries = keep.verify_retries;
    s->stats.verify_failures = keep.verify_failures;
    s->stats.verify_ns = keep.verify_ns;
    s->stats.verify_sync_ns = keep.verify_sync_ns;
    s->stats.packed_regions = keep.packed_regions;
    __atomic_store_n(&s->pk.unpack_ns, 0, __ATOMIC_RELAXED);
    if (s->io) {
        ms_io_stats io;
        ms_io_get_stats(s->io, &io);
        s->io_busy0 = io.busy_ns;
        s->io_depth0 = io.depth_ns;
    }
}
