/* store/plan.h - the RAM plan: which regions stay resident, how big the trunk
 * ring and the expert cache are, and whether it all fits the budget.
 *
 * Owns: the pure function that turns a list of (class, bytes) regions and the
 *   budget knobs into a plan, and the formatter that prints it as a table.
 *   It reads no file and needs no checkpoint, so a `plan` command can show the
 *   plan of a model from its config alone.
 * Idea: every allocation the store will make is one of five blocks, each
 *   rounded the way base/bufalloc.h rounds it (ms_plan_alloc_bytes):
 *
 *     global  pinned GLOBAL regions (final norms ...), always resident
 *     trunk   pinned TRUNK regions: the small ones, then the k largest
 *             (greedy by size)
 *     ring    n_ring x the largest STREAMED trunk region (>= 2 slots)
 *     experts n_slots x the largest EXPERT region (one arena of equal slots)
 *     sparse  GLOBAL regions marked sparse (read only by parts, e.g. the
 *             embedding table): resident only when everything else is,
 *             else read through
 *     bounce  a small aligned buffer for by-part reads of anything on disk
 *
 *   Pinning a trunk region saves its bytes on every pass; pinning the LARGEST
 *   regions also shrinks the ring slot, so the trunk cost of pinning the k
 *   largest is  alloc(sum of k largest) + alloc(n_ring x (k+1)-th largest),
 *   which is not monotonic in k. The planner evaluates every k and takes the
 *   largest k (most bytes saved per pass) that fits with the expert floor;
 *   the smallest total over all k is the floor reported on refusal.
 *   Small regions: a TRUNK region of at most 1/32 of the largest one (a
 *   gpt-oss layer's FFN norm and router: 0.18 MB in the 20b, 0.74 MB in the
 *   120b, beside 53 MB attention regions) is pinned in every plan. Streamed,
 *   it would hold a ring slot sized for the largest region while in use, and
 *   the expert predictor, which runs a router only when it is in memory,
 *   could not guess at the floor (docs/perf/history.md, "small trunk regions
 *   pinned"). n of them cost at most n/32 of a ring slot.
 *   Split (auto): trunk first, then experts get what is left (capped at one
 *   slot per expert region: then every expert is resident).
 * Invariants (of a successful plan):
 *   1. total_bytes <= ram_bytes when ram_bytes > 0;
 *   2. n_expert_slots >= min(min_expert_slots, n_expert_regions);
 *   3. n_ring >= min(2, n_trunk_streamed) and n_ring <= n_trunk_streamed;
 *   4. total_bytes equals the sum of the block sizes (every byte accounted).
 * Does not: allocate, read, or know layers.
 */
#ifndef MS_STORE_PLAN_H
#define MS_STORE_PLAN_H

#include "base/err.h"

#include <stddef.h>
#include <stdint.h>

/* One region as the planner sees it. cls is an ms_region_class value. */
typedef struct ms_plan_region {
    int cls;
    int64_t bytes;              /* region buffer bytes (ranges + alignment padding) */
    int sparse;                 /* GLOBAL only: read only by ms_store_read_part */
} ms_plan_region;

typedef struct ms_plan_input {
    const ms_plan_region *regions;
    int n_regions;
    int64_t ram_bytes;          /* ceiling; 0 = none (everything resident unless overridden) */
    int64_t trunk_bytes;        /* > 0: ceiling for pinned trunk + ring; 0 = auto */
    int64_t expert_bytes;       /* > 0: ceiling for the expert arena; 0 = auto */
    int min_expert_slots;       /* floor of the expert arena (capped at the expert count); <= 0 -> 1 */
    int ring_slots;             /* ring slots wanted; <= 0 -> 2; must be >= 2 otherwise */
    int64_t bounce_bytes;       /* by-part read buffer; <= 0 -> MS_PLAN_DEFAULT_BOUNCE */
} ms_plan_input;

#define MS_PLAN_DEFAULT_BOUNCE ((int64_t)256 << 10)
#define MS_PLAN_MIN_BOUNCE ((int64_t)16 << 10)

typedef struct ms_plan {
    int64_t ram_bytes;          /* the budget planned for (0 = none) */
    /* GLOBAL */
    int n_global_pinned, n_sparse;
    int64_t global_bytes;       /* alloc of the pinned (non-sparse) GLOBAL regions */
    int sparse_resident;        /* 1: sparse regions resident (in their own block) */
    int64_t sparse_region_bytes, sparse_bytes;  /* their bytes; alloc (0 when on disk) */
    /* TRUNK */
    int n_trunk, n_trunk_pinned;
    int64_t trunk_region_bytes;         /* all TRUNK regions */
    int64_t trunk_pinned_region_bytes;  /* the pinned ones */
    int64_t trunk_bytes;                /* alloc of the pinned block */
    int64_t streamed_region_bytes;      /* streamed TRUNK bytes read per pass */
    int n_ring;
    int64_t ring_slot_bytes, ring_bytes;
    /* EXPERT */
    int n_expert_regions, n_expert_slots;
    int64_t expert_slot_bytes, expert_bytes;
    int experts_resident;       /* one slot per expert region: loaded at start */
    /* the rest */
    int64_t bounce_bytes;       /* alloc of the bounce buffer (0 when nothing is on disk) */
    int64_t total_bytes;        /* sum of the blocks above */
    int64_t floor_bytes;        /* smallest budget any plan fits in */
    int64_t full_bytes;         /* budget with which everything is resident */
} ms_plan;

/* Bytes really reserved for a block of n bytes: the store allocates blocks
 * of 2 MiB or more on huge pages (rounded to 2 MiB), smaller ones rounded to
 * 4096. 0 for n <= 0, -1 on overflow. Pure. */
int64_t ms_plan_alloc_bytes(int64_t n);

/* Compute the plan for in->regions. On success fills *out and, for every
 * region i, resident[i] = 1 when region i is pinned in memory for the whole
 * run (GLOBAL / TRUNK / sparse regions of the plan; EXPERT regions get 1 only
 * when every expert is resident) else 0. resident may be NULL.
 * Errors (message says what is needed and what is available):
 *   MS_E_BUDGET  the floor does not fit ram_bytes ("needs X bytes ..., budget
 *                Y bytes"), or an override is below its part's floor, or the
 *                overrides together exceed ram_bytes;
 *   MS_E_USAGE   ring_slots == 1, a negative size, bounce below 16 KiB;
 *   MS_E_MODEL   a size overflows.
 * On MS_E_BUDGET *out still holds floor_bytes and full_bytes (and the counts)
 * so a caller can print them; when the floor (or the overrides' plan) does
 * not fit, *out is that refused plan, its total_bytes what it needs (resident
 * is then not filled). Pure; allocates a temporary index of the TRUNK
 * regions (MS_E_NOMEM). */
ms_status ms_plan_compute(const ms_plan_input *in, ms_plan *out, uint8_t *resident,
                          ms_err *err);

/* Print the plan as a human table (several lines, '\n'-separated) into buf
 * (always NUL-terminated when n > 0). Returns the length snprintf would
 * have produced. Pure. */
int ms_plan_format(const ms_plan *p, char *buf, size_t n);

/* "12.3 GiB" / "512.0 KiB" / "17 B" into buf (n >= 16). Returns buf. Pure. */
const char *ms_plan_human(int64_t bytes, char *buf, size_t n);

#endif
