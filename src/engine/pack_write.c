/* engine/pack_write.c - ms_pack_write_trunk (engine/pack_write.h): read
 * every TRUNK region of a store once, verified, and hand it to the pack
 * writer (format/pack.h), which keeps the images that shrink.
 *
 * Invariants: the regions are written in declaration order, each from one
 *   verified read of its ranges (ms_store_read_region), so a pack holds only
 *   bytes that matched the sidecar it names.
 * Does not: plan, start or keep anything of the store; memory is one buffer
 *   of the largest TRUNK region.
 */
#include "engine/pack_write.h"

#include "base/progress.h"
#include "base/bufalloc.h"
#include "base/clock.h"
#include "format/pack.h"

#include <stdlib.h>
#include <string.h>

/* The largest TRUNK region's buffer and the TRUNK regions' data bytes. */
static void trunk_sizes(const ms_store *s, int64_t *cap, int64_t *total) {
    *cap = *total = 0;
    for (int i = 0; i < ms_store_n_regions(s); i++) {
        ms_region_class cls;
        const ms_range *g;
        const int n = ms_store_region_layout(s, i, &cls, &g, NULL);
        if (cls != MS_REGION_TRUNK) continue;
        if (ms_store_region_bytes(s, i) > *cap) *cap = ms_store_region_bytes(s, i);
        for (int k = 0; k < n; k++) *total += g[k].n_bytes;
    }
}

/* A failure of the pack writer (st, in err) as the command reports it: the
 * output cannot be written where it was asked (a full disk, a read-only
 * directory): MS_E_USAGE, as `verify` reports a sidecar it cannot write
 * (docs/SECURITY.md, "Exit codes"), with the way out. */
static ms_status writer_failed(ms_status st, ms_err *err) {
    if (st != MS_E_IO) return st;
    ms_err e2;
    ms_err_clear(&e2);
    ms_err_set(&e2, MS_E_USAGE, "%s; write the pack elsewhere with --out PATH (and pass --pack PATH to run)", err->msg);
    *err = e2;
    return MS_E_USAGE;
}

/* Read TRUNK region i into buf and add it to w (counted in out). */
static ms_status pack_region(ms_store *s, int i, ms_pack_writer *w, uint8_t *buf, ms_pack_range *q,
                             ms_pack_result *out, int64_t *data, ms_err *err) {
    const ms_range *g;
    const int64_t *pos;
    const int n = ms_store_region_layout(s, i, NULL, &g, &pos);
    ms_status st = ms_store_read_region(s, i, buf, err);
    if (st != MS_OK) return st;
    *data = 0;
    for (int k = 0; k < n; k++) {
        q[k] = (ms_pack_range){ g[k].shard, g[k].offset, g[k].n_bytes };
        *data += g[k].n_bytes;
    }
    int64_t img = 0;
    st = ms_pack_writer_add(w, q, n, pos, buf, ms_store_region_bytes(s, i), &img, err);
    if (st != MS_OK) return writer_failed(st, err);
    out->n_regions++;
    out->raw_bytes += *data;
    if (img > 0) {
        out->n_packed++;
        out->packed_bytes += img;
        out->packed_raw_bytes += *data;
    }
    return MS_OK;
}

ms_status ms_pack_write_trunk(ms_store *s, const char *path, uint64_t table_hash, const ms_logger *log,
                              ms_pack_result *out, ms_err *err) {
    out->n_regions = out->n_packed = 0;
    out->raw_bytes = out->packed_bytes = out->packed_raw_bytes = 0;
    int64_t cap, total;
    trunk_sizes(s, &cap, &total);
    if (cap == 0) return ms_err_set(err, MS_E_MODEL, "store: no trunk regions to pack");
    const ms_sums *sums = ms_store_sums(s);
    if (!sums) return ms_err_set(err, MS_E_USAGE, "store: a pack is made against the checksum sidecar");
    int max_ranges = 1;
    for (int i = 0; i < ms_store_n_regions(s); i++) {
        const int n = ms_store_region_layout(s, i, NULL, NULL, NULL);
        if (n > max_ranges) max_ranges = n;
    }
    uint8_t *buf = ms_buf_alloc(cap, cap >= MS_BUF_HUGE_PAGE);
    ms_pack_range *q = malloc(((size_t)max_ranges + 1) * sizeof *q);
    ms_pack_writer *w = NULL;
    ms_status st = buf && q ? MS_OK : ms_err_set(err, MS_E_NOMEM, "store: out of memory");
    if (st == MS_OK) st = writer_failed(ms_pack_writer_open(path, table_hash, ms_sums_content_hash(sums), &w, err), err);
    int64_t done = 0, t_log = ms_now_ns();
    ms_progress_step ps;
    ms_progress_begin(&ps, "pack", total, 0);
    for (int i = 0; i < ms_store_n_regions(s) && st == MS_OK; i++) {
        ms_region_class cls;
        ms_store_region_layout(s, i, &cls, NULL, NULL);
        if (cls != MS_REGION_TRUNK) continue;
        int64_t data = 0;
        if ((st = pack_region(s, i, w, buf, q, out, &data, err)) != MS_OK) break;
        done += data;
        ms_progress_report(&ps, done, 0, done);
        if (!ms_progress_on() && ms_now_ns() - t_log > 5000000000LL) {
            t_log = ms_now_ns();
            ms_log(log, MS_LOG_INFO, "pack: %.1f of %.1f GB", (double)done / 1e9, (double)total / 1e9);
        }
    }
    if (st == MS_OK) st = writer_failed(ms_pack_writer_finish(w, err), err);
    else ms_pack_writer_abort(w);
    free(q);
    ms_buf_free(buf, cap, cap >= MS_BUF_HUGE_PAGE);
    return st;
}
