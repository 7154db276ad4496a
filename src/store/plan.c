/* store/plan.c - the RAM plan (see plan.h for the model and the contract).
 *
 * The search is exhaustive over k (the number of largest TRUNK regions
 * pinned): a model has a few hundred trunk regions, and the cost is not
 * monotonic in k, so no shortcut is safe. For a given k the expert arena's
 * cost is monotonic in the slot count except at the very top (one slot per
 * expert with the whole trunk pinned may drop the bounce buffer), so the top
 * is tried first and the rest bisected.
 */
#include "store/plan.h"

#include "base/bufalloc.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sizes beyond this are refused as corrupt, which keeps every sum and every
 * n_ring x slot product below INT64_MAX without per-step checks. */
#define PLAN_MAX_BYTES ((int64_t)1 << 50)
#define PLAN_MAX_RING 1024
/* A TRUNK region of at most 1/PLAN_SMALL_DIV of the largest one is pinned in
 * every plan (plan.h, "small regions"). */
#define PLAN_SMALL_DIV 32

typedef struct plan_ctx {
    const ms_plan_input *in;
    int *order;             /* the other TRUNK region ids, size descending */
    int64_t *prefix;        /* prefix[k] = bytes of the k largest of them */
    int n_trunk, ring;      /* n_trunk: TRUNK regions that are not small */
    int n_small;            /* small TRUNK regions, always pinned */
    int64_t small_sum;
    int64_t global_sum, sparse_sum;
    int n_sparse, n_global;
    int n_expert;
    int64_t slot;
    int64_t trunk_max;      /* the largest TRUNK region */
    int64_t bounce;
} plan_ctx;

int64_t ms_plan_alloc_bytes(int64_t n) {
    if (n <= 0) return 0;
    return ms_buf_alloc_size(n, n >= MS_BUF_HUGE_PAGE);
}

const char *ms_plan_human(int64_t bytes, char *buf, size_t n) {
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)bytes;
    int u = 0;
    while ((v >= 1024.0 || v <= -1024.0) && u < 4) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, n, "%lld B", (long long)bytes);
    else snprintf(buf, n, "%.1f %s", v, unit[u]);
    return buf;
}

static int ring_n(const plan_ctx *c, int k) {
    int streamed = c->n_trunk - k;
    return streamed < c->ring ? streamed : c->ring;
}

static int64_t ring_slot(const plan_ctx *c, int k) {
    return k < c->n_trunk ? c->in->regions[c->order[k]].bytes : 0;
}

/* Bytes of the pinned TRUNK regions: the small ones and the k largest. */
static int64_t pinned_sum(const plan_ctx *c, int k) { return c->small_sum + c->prefix[k]; }

static int64_t trunk_cost(const plan_ctx *c, int k) {
    return ms_plan_alloc_bytes(pinned_sum(c, k)) + ms_plan_alloc_bytes(ring_n(c, k) * ring_slot(c, k));
}

static int64_t expert_cost(const plan_ctx *c, int e) {
    return ms_plan_alloc_bytes((int64_t)e * c->slot);
}

static int needs_bounce(const plan_ctx *c, int k, int e, int sparse_res) {
    return !(k == c->n_trunk && e == c->n_expert && (sparse_res || c->n_sparse == 0));
}

static int64_t total(const plan_ctx *c, int k, int e, int sparse_res) {
    return ms_plan_alloc_bytes(c->global_sum) + trunk_cost(c, k) + expert_cost(c, e) +
           (sparse_res ? ms_plan_alloc_bytes(c->sparse_sum) : 0) +
           (needs_bounce(c, k, e, sparse_res) ? ms_plan_alloc_bytes(c->bounce) : 0);
}

static void fill(const plan_ctx *c, int k, int e, int sp, ms_plan *p) {
    p->n_trunk_pinned = c->n_small + k;
    p->trunk_pinned_region_bytes = pinned_sum(c, k);
    p->trunk_bytes = ms_plan_alloc_bytes(pinned_sum(c, k));
    p->streamed_region_bytes = c->prefix[c->n_trunk] - c->prefix[k];
    p->n_ring = ring_n(c, k);
    p->ring_slot_bytes = ring_slot(c, k);
    p->ring_bytes = ms_plan_alloc_bytes(p->n_ring * p->ring_slot_bytes);
    p->n_expert_slots = e;
    p->expert_bytes = expert_cost(c, e);
    p->experts_resident = c->n_expert > 0 && e == c->n_expert;
    p->sparse_resident = sp && c->n_sparse > 0;
    p->sparse_bytes = p->sparse_resident ? ms_plan_alloc_bytes(c->sparse_sum) : 0;
    p->bounce_bytes = needs_bounce(c, k, e, sp) ? ms_plan_alloc_bytes(c->bounce) : 0;
    p->total_bytes = p->global_bytes + p->trunk_bytes + p->ring_bytes + p->expert_bytes +
                     p->sparse_bytes + p->bounce_bytes;
}

static ms_status refuse(const plan_ctx *c, int k, int e, int sp, ms_plan *p, const char *what,
                        ms_err *err) {
    fill(c, k, e, sp, p);
    const ms_plan q = *p;
    char h[7][32];
    return ms_err_set(err, MS_E_BUDGET,
                      "RAM budget too small: %s needs %lld bytes (%s: global %s + trunk pinned %s"
                      " + ring %d x %s + experts %d x %s + bounce %s), budget %lld bytes (%s)",
                      what, (long long)q.total_bytes, ms_plan_human(q.total_bytes, h[0], 32),
                      ms_plan_human(q.global_bytes + q.sparse_bytes, h[1], 32),
                      ms_plan_human(q.trunk_bytes, h[2], 32), q.n_ring,
                      ms_plan_human(q.ring_slot_bytes, h[3], 32), q.n_expert_slots,
                      ms_plan_human(q.expert_slot_bytes, h[4], 32),
                      ms_plan_human(q.bounce_bytes, h[5], 32), (long long)c->in->ram_bytes,
                      ms_plan_human(c->in->ram_bytes, h[6], 32));
}

/* Largest e in [lo, n_expert] with total(k, e, 0) <= budget, or -1. */
static int max_slots(const plan_ctx *c, int k, int lo, int64_t budget) {
    if (total(c, k, c->n_expert, 0) <= budget) return c->n_expert;
    if (lo >= c->n_expert || total(c, k, lo, 0) > budget) return -1;
    int good = lo, bad = c->n_expert;       /* total(good) fits, total(bad) does not */
    while (bad - good > 1) {
        int mid = good + (bad - good) / 2;
        if (total(c, k, mid, 0) <= budget) good = mid; else bad = mid;
    }
    return good;
}

static int cmp_desc(const void *a, const void *b, void *u) {
    const ms_plan_region *r = u;
    int x = *(const int *)a, y = *(const int *)b;
    if (r[x].bytes != r[y].bytes) return r[x].bytes > r[y].bytes ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* A TRUNK region of at most 1/PLAN_SMALL_DIV of the largest (c->trunk_max). */
static int is_small(const plan_ctx *c, const ms_plan_region *r) {
    return r->cls == MS_REGION_TRUNK && r->bytes <= c->trunk_max / PLAN_SMALL_DIV;
}

static ms_status compute(plan_ctx *c, ms_plan *out, uint8_t *resident, ms_err *err) {
    const ms_plan_input *in = c->in;
    const int nT = c->n_trunk, nE = c->n_expert;
    const int emin = nE == 0 ? 0 : (in->min_expert_slots > nE ? nE :
                                    in->min_expert_slots < 1 ? 1 : in->min_expert_slots);
    /* floor and full */
    int k_floor = 0, floor_sp = 0;
    int64_t floor = INT64_MAX, trunk_floor = INT64_MAX;
    for (int k = 0; k <= nT; k++) {
        int64_t t = total(c, k, emin, 0);
        if (t < floor) { floor = t; k_floor = k; floor_sp = 0; }
        if (k == nT && emin == nE && c->n_sparse > 0 && total(c, k, emin, 1) < floor) {
            floor = total(c, k, emin, 1); k_floor = k; floor_sp = 1;
        }
        if (trunk_cost(c, k) < trunk_floor) trunk_floor = trunk_cost(c, k);
    }
    out->floor_bytes = floor;
    out->full_bytes = total(c, nT, nE, 1);

    const int64_t B = in->ram_bytes;
    int k = -1, e = -1, sp = 0;
    char h[2][32];
    if (in->trunk_bytes > 0) {
        for (int i = 0; i <= nT; i++) if (trunk_cost(c, i) <= in->trunk_bytes) k = i;
        if (k < 0)
            return ms_err_set(err, MS_E_BUDGET,
                              "trunk budget too small: the trunk needs at least %lld bytes (%s),"
                              " trunk budget %lld bytes (%s)", (long long)trunk_floor,
                              ms_plan_human(trunk_floor, h[0], 32), (long long)in->trunk_bytes,
                              ms_plan_human(in->trunk_bytes, h[1], 32));
    }
    if (in->expert_bytes > 0) {
        e = c->slot > 0 ? (int)(in->expert_bytes / c->slot) : nE;
        if (e > nE) e = nE;
        while (e > 0 && expert_cost(c, e) > in->expert_bytes) e--;
        if (e < emin)
            return ms_err_set(err, MS_E_BUDGET,
                              "expert budget too small: %d expert slots need %lld bytes (%s),"
                              " expert budget %lld bytes (%s)", emin,
                              (long long)expert_cost(c, emin),
                              ms_plan_human(expert_cost(c, emin), h[0], 32),
                              (long long)in->expert_bytes, ms_plan_human(in->expert_bytes, h[1], 32));
    }
    if (B == 0) {
        if (k < 0) k = nT;
        if (e < 0) e = nE;
        sp = k == nT && e == nE;
    } else {
        if (k < 0 && e < 0) {
            for (int i = 0; i <= nT; i++) if (total(c, i, emin, 0) <= B) k = i;
            if (k < 0 && floor_sp && floor <= B) {
                /* no experts (a pipeline stage of dense layers): a sparse region
                   held whole can cost less than its bounce buffer */
                k = nT;
                e = emin;
            } else {
                if (k < 0) return refuse(c, k_floor, emin, floor_sp, out, "the smallest plan", err);
                e = max_slots(c, k, emin, B);
            }
        } else if (k < 0) {
            for (int i = 0; i <= nT; i++) if (total(c, i, e, 0) <= B) k = i;
            if (k < 0) {
                int kb = 0;
                for (int i = 0; i <= nT; i++) if (total(c, i, e, 0) < total(c, kb, e, 0)) kb = i;
                return refuse(c, kb, e, 0, out, "the plan with the expert override", err);
            }
        } else if (e < 0) {
            e = max_slots(c, k, emin, B);
            if (e < 0) return refuse(c, k, emin, 0, out, "the plan with the trunk override", err);
        }
        MS_ASSERT(k >= 0 && e >= 0);
        sp = k == nT && e == nE && c->n_sparse > 0 && total(c, k, e, 1) <= B;
        if (total(c, k, e, sp) > B) return refuse(c, k, e, sp, out, "the plan with both overrides", err);
    }
    fill(c, k, e, sp, out);
    MS_ASSERT(B == 0 || out->total_bytes <= B);
    if (resident) {
        for (int i = 0; i < in->n_regions; i++) {
            const ms_plan_region *r = &in->regions[i];
            resident[i] = r->cls == MS_REGION_GLOBAL ? (!r->sparse || out->sparse_resident) :
                          r->cls == MS_REGION_EXPERT ? (uint8_t)out->experts_resident : 0;
        }
        for (int i = 0; i < k; i++) resident[c->order[i]] = 1;
        for (int i = 0; i < in->n_regions; i++)
            if (is_small(c, &in->regions[i])) resident[i] = 1;
    }
    return MS_OK;
}

ms_status ms_plan_compute(const ms_plan_input *in, ms_plan *out, uint8_t *resident,
                          ms_err *err) {
    memset(out, 0, sizeof *out);
    out->ram_bytes = in->ram_bytes;
    plan_ctx c;
    memset(&c, 0, sizeof c);
    c.in = in;
    c.ring = in->ring_slots <= 0 ? 2 : in->ring_slots;
    c.bounce = in->bounce_bytes <= 0 ? MS_PLAN_DEFAULT_BOUNCE : in->bounce_bytes;
    if (c.ring < 2 || c.ring > PLAN_MAX_RING)
        return ms_err_set(err, MS_E_USAGE, "plan: ring slots must be 2..%d, got %d", PLAN_MAX_RING, c.ring);
    if (c.bounce < MS_PLAN_MIN_BOUNCE || c.bounce > PLAN_MAX_BYTES)
        return ms_err_set(err, MS_E_USAGE, "plan: bounce buffer must be at least %lld bytes, got %lld",
                          (long long)MS_PLAN_MIN_BOUNCE, (long long)c.bounce);
    if (in->ram_bytes < 0 || in->trunk_bytes < 0 || in->expert_bytes < 0 || in->n_regions < 0)
        return ms_err_set(err, MS_E_USAGE, "plan: negative budget or region count");
    int64_t sum = 0;
    for (int i = 0; i < in->n_regions; i++) {
        const ms_plan_region *r = &in->regions[i];
        if (r->bytes < 0 || r->bytes > PLAN_MAX_BYTES - sum)
            return ms_err_set(err, MS_E_MODEL, "plan: region %d: size %lld is negative or the total overflows",
                              i, (long long)r->bytes);
        sum += r->bytes;
        switch (r->cls) {
        case MS_REGION_GLOBAL:
            if (r->sparse) { c.n_sparse++; c.sparse_sum += r->bytes; }
            else { c.n_global++; c.global_sum += r->bytes; }
            break;
        case MS_REGION_TRUNK:
            c.n_trunk++;
            if (r->bytes > c.trunk_max) c.trunk_max = r->bytes;
            break;
        case MS_REGION_EXPERT:
            c.n_expert++;
            if (r->bytes > c.slot) c.slot = r->bytes;
            break;
        default:
            return ms_err_set(err, MS_E_USAGE, "plan: region %d has unknown class %d", i, r->cls);
        }
    }
    out->n_global_pinned = c.n_global;
    out->n_sparse = c.n_sparse;
    out->global_bytes = ms_plan_alloc_bytes(c.global_sum);
    out->sparse_region_bytes = c.sparse_sum;
    out->n_trunk = c.n_trunk;
    out->n_expert_regions = c.n_expert;
    out->expert_slot_bytes = c.slot;
    c.order = malloc(((size_t)c.n_trunk + 1) * sizeof *c.order);
    c.prefix = malloc(((size_t)c.n_trunk + 1) * sizeof *c.prefix);
    if (!c.order || !c.prefix) {
        free(c.order); free(c.prefix);
        return ms_err_set(err, MS_E_NOMEM, "plan: out of memory");
    }
    int n = 0;
    for (int i = 0; i < in->n_regions; i++) {
        const ms_plan_region *r = &in->regions[i];
        if (r->cls != MS_REGION_TRUNK) continue;
        if (is_small(&c, r)) { c.n_small++; c.small_sum += r->bytes; }
        else c.order[n++] = i;
    }
    c.n_trunk = n;      /* from here on: the TRUNK regions that are not small */
    qsort_r(c.order, (size_t)n, sizeof *c.order, cmp_desc, (void *)in->regions);
    c.prefix[0] = 0;
    for (int i = 0; i < n; i++) c.prefix[i + 1] = c.prefix[i] + in->regions[c.order[i]].bytes;
    out->trunk_region_bytes = c.small_sum + c.prefix[n];
    ms_status st = compute(&c, out, resident, err);
    free(c.order);
    free(c.prefix);
    return st;
}

int ms_plan_format(const ms_plan *p, char *buf, size_t n) {
    char a[32], b[32], d[32], t[32];
    int len = 0;
#define OUT(...) do {                                                              \
        int w_ = snprintf(n > (size_t)len ? buf + len : NULL,                      \
                          n > (size_t)len ? n - (size_t)len : 0, __VA_ARGS__);     \
        if (w_ > 0) len += w_;                                                     \
    } while (0)
    if (n) buf[0] = '\0';
    if (p->ram_bytes > 0) OUT("RAM plan for a budget of %s (%lld bytes)\n",
                              ms_plan_human(p->ram_bytes, a, 32), (long long)p->ram_bytes);
    else OUT("RAM plan without a budget (everything resident)\n");
    OUT("  %-16s %10s %12s  %s\n", "part", "count", "bytes", "note");
    OUT("  %-16s %10d %12s  %s\n", "global pinned", p->n_global_pinned,
        ms_plan_human(p->global_bytes, a, 32), "");
    if (p->n_sparse)
        OUT("  %-16s %10d %12s  %s\n", "global by parts", p->n_sparse,
            ms_plan_human(p->sparse_bytes, a, 32),
            p->sparse_resident ? "resident" : "on disk, read by parts");
    OUT("  %-16s %10d %12s  of %d trunk regions (%s)\n", "trunk pinned", p->n_trunk_pinned,
        ms_plan_human(p->trunk_bytes, a, 32), p->n_trunk, ms_plan_human(p->trunk_region_bytes, b, 32));
    OUT("  %-16s %10d %12s  %d slots of %s; %s streamed per pass\n", "trunk ring",
        p->n_trunk - p->n_trunk_pinned, ms_plan_human(p->ring_bytes, a, 32), p->n_ring,
        ms_plan_human(p->ring_slot_bytes, b, 32), ms_plan_human(p->streamed_region_bytes, d, 32));
    OUT("  %-16s %10d %12s  slots of %s for %d experts%s\n", "expert cache", p->n_expert_slots,
        ms_plan_human(p->expert_bytes, a, 32), ms_plan_human(p->expert_slot_bytes, b, 32),
        p->n_expert_regions, p->experts_resident ? " (all resident)" : "");
    OUT("  %-16s %10s %12s  %s\n", "bounce", "", ms_plan_human(p->bounce_bytes, a, 32), "");
    OUT("  %-16s %10s %12s  floor %s, everything resident %s\n", "total", "",
        ms_plan_human(p->total_bytes, t, 32), ms_plan_human(p->floor_bytes, a, 32),
        ms_plan_human(p->full_bytes, b, 32));
#undef OUT
    return len;
}
