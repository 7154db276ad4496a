/* store/store.c - the store: region table and the resident backend.
 *
 * This first backend keeps every region resident: ms_store_start reads each
 * region once into its own buffer; acquire returns it, release is a no-op.
 * The streaming backends (trunk ring, expert cache) replace the body of
 * acquire/release without changing the interface.
 */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORE_ALIGN 4096

typedef struct region {
    ms_region_class cls;
    int n_ranges;
    ms_range *ranges;
    int64_t *pos;
    int64_t buf_bytes;
    uint8_t *buf;
} region;

struct ms_store {
    ms_store_params p;
    const ms_ckpt *ckpt;
    region *regions;
    int n_regions, cap_regions;
    int started;
    ms_store_stats stats;
};

ms_status ms_store_open(const ms_store_params *p, const ms_ckpt *ckpt,
                        ms_store **out, ms_err *err) {
    *out = NULL;
    ms_store *s = calloc(1, sizeof *s);
    if (!s) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    s->p = *p;
    s->ckpt = ckpt;
    *out = s;
    return MS_OK;
}

void ms_store_close(ms_store *s) {
    if (!s) return;
    for (int i = 0; i < s->n_regions; i++) {
        free(s->regions[i].ranges);
        free(s->regions[i].pos);
        free(s->regions[i].buf);
    }
    free(s->regions);
    free(s);
}

int ms_store_add_region(ms_store *s, ms_region_class cls, const ms_range *ranges,
                        int n_ranges, int64_t *range_pos, ms_err *err) {
    MS_ASSERT(!s->started && n_ranges >= 1);
    if (s->n_regions == s->cap_regions) {
        int cap = s->cap_regions ? s->cap_regions * 2 : 256;
        region *r = realloc(s->regions, (size_t)cap * sizeof *r);
        if (!r) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
        s->regions = r;
        s->cap_regions = cap;
    }
    region *r = &s->regions[s->n_regions];
    memset(r, 0, sizeof *r);
    r->cls = cls;
    r->n_ranges = n_ranges;
    r->ranges = malloc((size_t)n_ranges * sizeof *r->ranges);
    r->pos = malloc((size_t)n_ranges * sizeof *r->pos);
    if (!r->ranges || !r->pos) {
        free(r->ranges); free(r->pos);
        return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    }
    int64_t at = 0;
    for (int i = 0; i < n_ranges; i++) {
        const ms_range *g = &ranges[i];
        MS_ASSERT(g->shard >= 0 && g->shard < ms_ckpt_n_shards(s->ckpt));
        MS_ASSERT(g->offset >= 0 && g->n_bytes >= 0);
        at = (at + STORE_ALIGN - 1) / STORE_ALIGN * STORE_ALIGN + g->offset % STORE_ALIGN;
        r->ranges[i] = *g;
        r->pos[i] = at;
        if (range_pos) range_pos[i] = at;
        at += g->n_bytes;
    }
    r->buf_bytes = (at + STORE_ALIGN - 1) / STORE_ALIGN * STORE_ALIGN;
    return s->n_regions++;
}

static ms_status read_full(int fd, uint8_t *dst, int64_t n, int64_t off,
                           const char *file, ms_err *err) {
    while (n > 0) {
        ssize_t got = pread(fd, dst, (size_t)(n > (1 << 30) ? (1 << 30) : n), (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            return ms_err_set(err, MS_E_IO, "%s: read of %lld bytes at offset %lld failed: %s",
                              file, (long long)n, (long long)off, strerror(errno));
        }
        if (got == 0)
            return ms_err_set(err, MS_E_IO, "%s: unexpected end of file at offset %lld",
                              file, (long long)off);
        dst += got; n -= got; off += got;
    }
    return MS_OK;
}

ms_status ms_store_start(ms_store *s, ms_err *err) {
    MS_ASSERT(!s->started);
    int n_shards = ms_ckpt_n_shards(s->ckpt);
    int *fds = malloc((size_t)n_shards * sizeof *fds);
    if (!fds) return ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    for (int i = 0; i < n_shards; i++) fds[i] = -1;
    ms_status st = MS_OK;
    int64_t total = 0;
    for (int ir = 0; ir < s->n_regions && st == MS_OK; ir++) {
        region *r = &s->regions[ir];
        r->buf = aligned_alloc(STORE_ALIGN, (size_t)r->buf_bytes);
        if (!r->buf) { st = ms_err_set(err, MS_E_NOMEM, "store: cannot allocate %lld bytes", (long long)r->buf_bytes); break; }
        total += r->buf_bytes;
        for (int i = 0; i < r->n_ranges && st == MS_OK; i++) {
            const ms_range *g = &r->ranges[i];
            const ms_shard_info *sh = ms_ckpt_shard(s->ckpt, g->shard);
            if (fds[g->shard] < 0) {
                fds[g->shard] = open(sh->path, O_RDONLY | O_CLOEXEC);
                if (fds[g->shard] < 0) {
                    st = ms_err_set(err, MS_E_IO, "%s: cannot open: %s", sh->file, strerror(errno));
                    break;
                }
            }
            st = read_full(fds[g->shard], r->buf + r->pos[i], g->n_bytes, g->offset, sh->file, err);
            s->stats.reads_issued++;
            if (r->cls == MS_REGION_TRUNK) s->stats.trunk_bytes_read += g->n_bytes;
            else if (r->cls == MS_REGION_EXPERT) s->stats.expert_bytes_read += g->n_bytes;
            else s->stats.global_bytes_read += g->n_bytes;
        }
    }
    for (int i = 0; i < n_shards; i++) if (fds[i] >= 0) close(fds[i]);
    free(fds);
    s->stats.resident_bytes = total;
    s->started = 1;
    return st;
}

const uint8_t *ms_store_acquire(ms_store *s, int region_id, ms_err *err) {
    MS_ASSERT(s->started && region_id >= 0 && region_id < s->n_regions);
    region *r = &s->regions[region_id];
    if (r->cls == MS_REGION_EXPERT) { s->stats.expert_requests++; s->stats.expert_hits++; }
    return r->buf;
}

ms_status ms_store_acquire_batch(ms_store *s, const int *regions, int n,
                                 const uint8_t **ptrs, ms_err *err) {
    for (int i = 0; i < n; i++) {
        ptrs[i] = ms_store_acquire(s, regions[i], err);
        if (!ptrs[i]) return err ? err->status : MS_E_IO;
    }
    return MS_OK;
}

void ms_store_release(ms_store *s, int region_id) {
    MS_ASSERT(region_id >= 0 && region_id < s->n_regions);
}

void ms_store_get_stats(const ms_store *s, ms_store_stats *st) { *st = s->stats; }

void ms_store_reset_stats(ms_store *s) {
    int64_t resident = s->stats.resident_bytes;
    memset(&s->stats, 0, sizeof s->stats);
    s->stats.resident_bytes = resident;
}
