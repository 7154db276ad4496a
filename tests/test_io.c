/* tests/test_io.c - the I/O layer (base/io) and aligned buffers (base/bufalloc).
 *
 * A temp file (mkdtemp under $TMPDIR or /tmp) of ~8 MiB of known pseudo-random
 * bytes with an unaligned size is read through every backend (pread, O_DIRECT,
 * io_uring - the last skipped with a note only when the ring cannot be created
 * for ENOSYS / EPERM) with random batches: unaligned offsets, n = 0 and 1,
 * spans crossing chunk boundaries, up to 3 MiB, batches of 1..32, several
 * tickets outstanding; every byte of every data window is compared with the
 * file. Then every injected fault on every backend at several request indices,
 * reads past end of file (at submit and after the file shrank), usage errors,
 * the O_DIRECT fallback, two threads sharing one layer, close with a ticket
 * outstanding, and the statistics. Then the check hook (checking as data
 * lands): with 4 KiB chunks and 10007-byte units that straddle several chunks
 * landing in any order, every unit of every request that asks for a check is
 * checked exactly once, on its landed bytes, before the wait returns, and no
 * other request is; a corruption of three units of one request is reported as
 * its first unit (ms_io_wait_checked hands it back apart, ms_io_wait returns
 * it); an EIO is an I/O error, not a check failure; asking for a check without
 * a hook is refused. Priorities and cancelling; the device activity counters. */
#include "base/bufalloc.h"
#include "base/clock.h"
#include "base/io.h"
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FILE_SIZE ((int64_t)8 * 1024 * 1024 + 1234) /* unaligned end on purpose */
#define MAX_N ((int64_t)3 * 1024 * 1024)

static uint8_t *g_data;
static char g_dir[512], g_path[600], g_shrink[600];

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int64_t rng_below(uint64_t *s, int64_t n) { return n > 0 ? (int64_t)(rng_next(s) % (uint64_t)n) : 0; }

static int write_file(const char *path, const uint8_t *data, int64_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, (size_t)n, f) == (size_t)n;
    ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

/* Open a layer; *skipped = 1 (and NULL) when io_uring is unavailable for
 * ENOSYS / EPERM, which is the only accepted reason to skip. */
static ms_io *open_io(const ms_io_params *p, int *skipped) {
    ms_io *io = NULL;
    ms_err err;
    ms_err_clear(&err);
    *skipped = 0;
    ms_status st = ms_io_open(p, &io, &err);
    if (st && p->kind == MS_IO_URING && strstr(err.msg, "io_uring unavailable") &&
        (strstr(err.msg, strerror(ENOSYS)) || strstr(err.msg, strerror(EPERM)))) {
        *skipped = 1;
        return NULL;
    }
    CHECK(st == MS_OK && io, "ms_io_open(%s): %s", ms_io_kind_name(p->kind), err.msg);
    return st ? NULL : io;
}

static int add_main_file(ms_io *io) {
    ms_err err;
    ms_err_clear(&err);
    int fi = -1;
    ms_status st = ms_io_add_file(io, g_path, &fi, &err);
    CHECK(st == MS_OK && fi >= 0, "add_file: %s", err.msg);
    return fi;
}

static ms_io_params params(ms_io_kind kind, int qd, int64_t chunk) {
    ms_io_params p = ms_io_default_params();
    p.kind = kind;
    p.queue_depth = qd;
    p.chunk_bytes = chunk;
    return p;
}

/* One request of a random shape; chunk is the layer's chunk size. */
static void random_req(uint64_t *s, int64_t chunk, int64_t *off, int64_t *n) {
    switch (rng_below(s, 8)) {
    case 0: *n = 0; *off = rng_below(s, FILE_SIZE + 1); break;
    case 1: *n = 1; *off = rng_below(s, FILE_SIZE); break;
    case 2: *n = 1 + rng_below(s, 10000); *off = rng_below(s, FILE_SIZE - *n + 1); break;
    case 3: *n = 1 + rng_below(s, MAX_N); *off = rng_below(s, FILE_SIZE - *n + 1); break;
    case 4: /* aligned both ends */
        *n = MS_IO_ALIGN * (1 + rng_below(s, 64));
        *off = MS_IO_ALIGN * rng_below(s, (FILE_SIZE - *n) / MS_IO_ALIGN);
        break;
    case 5: /* ends exactly at the unaligned end of file */
        *n = 1 + rng_below(s, 300000); *off = FILE_SIZE - *n; break;
    case 6: { /* straddles a chunk boundary (relative to the aligned start) */
        int64_t k = 1 + rng_below(s, FILE_SIZE / chunk - 1);
        *off = k * chunk - 1 - rng_below(s, 5000);
        *n = 2 + rng_below(s, 10000);
        if (*off + *n > FILE_SIZE) *n = FILE_SIZE - *off;
        break;
    }
    default: *n = 1 + rng_below(s, 600000); *off = rng_below(s, FILE_SIZE - *n + 1); break;
    }
}

typedef struct pending {
    uint64_t ticket;
    int n;
    ms_io_req reqs[32];
    int huge[32];
} pending;

static void free_bufs(pending *pd) {
    for (int i = 0; i < pd->n; i++) {
        ms_io_req *r = &pd->reqs[i];
        int64_t span = ms_io_span(r->offset, r->n_bytes);
        ms_buf_free(r->buf, span > 0 ? span : 1, pd->huge[i]);
    }
}

/* Bytes of a request's data window that differ from the file. */
static int64_t n_wrong(const ms_io_req *r) {
    int64_t bad = 0;
    const uint8_t *got = r->buf + ms_io_skew(r->offset);
    if (memcmp(got, g_data + r->offset, (size_t)r->n_bytes) == 0) return 0; /* fast path */
    for (int64_t i = 0; i < r->n_bytes; i++) bad += got[i] != g_data[r->offset + i];
    return bad;
}

static void fill_batch(pending *pd, uint64_t *s, int fi, int64_t chunk, int n) {
    pd->n = n;
    for (int i = 0; i < n; i++) {
        ms_io_req *r = &pd->reqs[i];
        r->file = fi;
        r->check = 0;
        random_req(s, chunk, &r->offset, &r->n_bytes);
        int64_t span = ms_io_span(r->offset, r->n_bytes);
        pd->huge[i] = (int)rng_below(s, 2);
        r->buf = ms_buf_alloc(span > 0 ? span : 1, pd->huge[i]);
        CHECK(r->buf != NULL, "buffer of %lld bytes", (long long)span);
    }
}

/* Random batches, several tickets outstanding, every byte checked. */
static void test_random(ms_io_kind kind, int qd, int64_t chunk, int rounds, uint64_t seed) {
    int skipped;
    ms_io_params p = params(kind, qd, chunk);
    ms_io *io = open_io(&p, &skipped);
    if (!io) {
        if (skipped) printf("test_io: note: io_uring unavailable here, uring backend skipped\n");
        return;
    }
    int fi = add_main_file(io);
    CHECK(ms_io_file_size(io, fi) == FILE_SIZE, "size %lld", (long long)ms_io_file_size(io, fi));
    CHECK(ms_io_file_size(io, fi + 1) == -1, "unknown index must give -1");
    CHECK(ms_io_file_path(io, fi) && strcmp(ms_io_file_path(io, fi), g_path) == 0, "path");
    if (kind == MS_IO_PREAD) CHECK(ms_io_file_is_direct(io, fi) == 0, "pread is buffered");
    else CHECK(ms_io_file_is_direct(io, fi) >= 0, "is_direct on a known file");

    uint64_t s = seed;
    int64_t want_bytes = 0, n_requests = 0, bad_reqs = 0;
    pending pd[3];
    for (int round = 0; round < rounds; round++) {
        int n_t = 1 + (int)rng_below(&s, 3);
        for (int t = 0; t < n_t; t++) {
            fill_batch(&pd[t], &s, fi, chunk, 1 + (int)rng_below(&s, 32));
            ms_err err;
            ms_err_clear(&err);
            ms_status st = ms_io_submit(io, pd[t].reqs, pd[t].n, &pd[t].ticket, &err);
            CHECK(st == MS_OK, "%s submit: %s", ms_io_kind_name(kind), err.msg);
            for (int i = 0; i < pd[t].n; i++) want_bytes += pd[t].reqs[i].n_bytes;
            n_requests += pd[t].n;
        }
        /* wait in an order different from submission */
        for (int k = 0; k < n_t; k++) {
            int t = (k + round) % n_t;
            ms_err err;
            ms_err_clear(&err);
            ms_status st = ms_io_wait(io, pd[t].ticket, &err);
            CHECK(st == MS_OK, "%s wait: %s", ms_io_kind_name(kind), err.msg);
            for (int i = 0; i < pd[t].n; i++) {
                int64_t w = n_wrong(&pd[t].reqs[i]);
                if (w) {
                    bad_reqs++;
                    fprintf(stderr, "%s: request offset %lld n %lld: %lld wrong bytes\n",
                            ms_io_kind_name(kind), (long long)pd[t].reqs[i].offset,
                            (long long)pd[t].reqs[i].n_bytes, (long long)w);
                }
            }
            free_bufs(&pd[t]);
        }
    }
    CHECK(bad_reqs == 0, "%s chunk %lld: %lld requests with wrong bytes", ms_io_kind_name(kind),
          (long long)chunk, (long long)bad_reqs);
    ms_io_stats st;
    ms_io_get_stats(io, &st);
    CHECK(st.requests == n_requests, "requests %lld, expected %lld", (long long)st.requests,
          (long long)n_requests);
    CHECK(st.bytes_read >= want_bytes, "bytes_read %lld < requested %lld",
          (long long)st.bytes_read, (long long)want_bytes);
    CHECK(st.reads_issued > 0 && st.retries == 0, "reads %lld retries %lld",
          (long long)st.reads_issued, (long long)st.retries);
    /* a used ticket is gone */
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_io_wait(io, pd[0].ticket, &err) == MS_E_USAGE, "second wait on a ticket");
    ms_io_close(io);
}

/* ------------------------------------------------------------------ faults */

#define FB 5 /* requests per fault batch */

static void fault_batch(pending *pd, int fi, uint64_t seed) {
    uint64_t s = seed;
    pd->n = FB;
    for (int i = 0; i < FB; i++) {
        ms_io_req *r = &pd->reqs[i];
        r->file = fi;
        r->check = 0;
        r->n_bytes = 80000 + rng_below(&s, 200000); /* spans several 64 KiB chunks */
        r->offset = 1 + rng_below(&s, FILE_SIZE - r->n_bytes - 1);
        pd->huge[i] = 0;
        r->buf = ms_buf_alloc(ms_io_span(r->offset, r->n_bytes), 0);
        CHECK(r->buf != NULL, "fault buffer");
    }
}

static void test_fault(ms_io_kind kind, ms_fault_kind fk, int64_t at_read) {
    static const char *names[] = {"none", "eio", "transient", "short", "corrupt", "nodirect"};
    int skipped;
    ms_io_params p = params(kind, 3, 64 * 1024);
    p.fault.kind = fk;
    p.fault.at_read = at_read;
    /* the second window crosses the first chunk boundary of the data */
    p.fault.corrupt_begin = at_read == 0 ? 10 : 60000;
    p.fault.corrupt_end = at_read == 0 ? 50 : 70000;
    ms_io *io = open_io(&p, &skipped);
    if (!io) return;
    int fi = add_main_file(io);
    const char *what = names[fk];
    const char *kn = ms_io_kind_name(kind);

    /* requests before at_read live in earlier batches of FB */
    int64_t batch_no = at_read / FB, pos = at_read % FB;
    pending pd;
    ms_err err;
    for (int64_t b = 0; b < batch_no; b++) {
        fault_batch(&pd, fi, 1000 + (uint64_t)b);
        ms_err_clear(&err);
        CHECK(ms_io_read(io, pd.reqs, pd.n, &err) == MS_OK, "%s %s pre-batch: %s", kn, what,
              err.msg);
        for (int i = 0; i < pd.n; i++) CHECK(n_wrong(&pd.reqs[i]) == 0, "pre-batch bytes");
        free_bufs(&pd);
    }
    ms_io_stats st0, st1;
    ms_io_get_stats(io, &st0);
    fault_batch(&pd, fi, 77 + (uint64_t)at_read);
    const ms_io_req *fr = &pd.reqs[pos];
    ms_err_clear(&err);
    ms_status rc = ms_io_read(io, pd.reqs, pd.n, &err);
    ms_io_get_stats(io, &st1);
    if (fk == MS_FAULT_EIO) {
        char want[64];
        snprintf(want, sizeof want, "offset %lld", (long long)fr->offset);
        CHECK(rc == MS_E_IO, "%s eio@%lld: status %d", kn, (long long)at_read, (int)rc);
        CHECK(strstr(err.msg, g_path) != NULL, "%s eio message names the file: %s", kn, err.msg);
        CHECK(strstr(err.msg, want) != NULL, "%s eio message names '%s': %s", kn, want, err.msg);
        CHECK(st1.retries - st0.retries == p.max_retries, "%s eio retries %lld", kn,
              (long long)(st1.retries - st0.retries));
        /* the layer is still usable and the failure left nothing behind */
        free_bufs(&pd);
        fault_batch(&pd, fi, 77 + (uint64_t)at_read);
        ms_err_clear(&err);
        CHECK(ms_io_read(io, pd.reqs, pd.n, &err) == MS_OK, "%s read after eio: %s", kn, err.msg);
        for (int i = 0; i < pd.n; i++) CHECK(n_wrong(&pd.reqs[i]) == 0, "bytes after eio");
    } else {
        CHECK(rc == MS_OK, "%s %s@%lld: %s", kn, what, (long long)at_read, err.msg);
        for (int i = 0; i < pd.n; i++) {
            if (fk == MS_FAULT_CORRUPT && i == pos) continue;
            CHECK(n_wrong(&pd.reqs[i]) == 0, "%s %s@%lld: request %d bytes differ", kn, what,
                  (long long)at_read, i);
        }
        if (fk == MS_FAULT_TRANSIENT)
            CHECK(st1.retries - st0.retries == 1, "%s transient: retries %lld", kn,
                  (long long)(st1.retries - st0.retries));
        if (fk == MS_FAULT_SHORT)
            CHECK(st1.short_reads - st0.short_reads >= 1 && st1.retries == st0.retries,
                  "%s short: short_reads %lld retries %lld", kn,
                  (long long)(st1.short_reads - st0.short_reads),
                  (long long)(st1.retries - st0.retries));
        if (fk == MS_FAULT_CORRUPT) {
            const uint8_t *got = fr->buf + ms_io_skew(fr->offset);
            int64_t n_bad = 0;
            for (int64_t i = 0; i < fr->n_bytes; i++) {
                int in = i >= p.fault.corrupt_begin && i < p.fault.corrupt_end;
                uint8_t want = (uint8_t)(in ? g_data[fr->offset + i] ^ 0xFF : g_data[fr->offset + i]);
                n_bad += got[i] != want;
            }
            CHECK(n_bad == 0, "%s corrupt@%lld: %lld bytes not as injected", kn,
                  (long long)at_read, (long long)n_bad);
        }
    }
    free_bufs(&pd);
    ms_io_close(io);
}

/* Every O_DIRECT read refused with EINVAL: the file falls back to buffered
 * reads at its first read, and the bytes are right. */
static void test_nodirect(ms_io_kind kind) {
    int skipped;
    ms_io_params p = params(kind, 2, 64 * 1024);
    p.fault.kind = MS_FAULT_NODIRECT;
    ms_io *io = open_io(&p, &skipped);
    if (!io) return;
    int fi = add_main_file(io);
    int before = ms_io_file_is_direct(io, fi);
    pending pd;
    fault_batch(&pd, fi, 5);
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_io_read(io, pd.reqs, pd.n, &err) == MS_OK, "%s nodirect: %s",
          ms_io_kind_name(kind), err.msg);
    for (int i = 0; i < pd.n; i++) CHECK(n_wrong(&pd.reqs[i]) == 0, "nodirect bytes");
    if (before == 1)
        CHECK(ms_io_file_is_direct(io, fi) == 0, "%s: no fallback to buffered",
              ms_io_kind_name(kind));
    else
        printf("test_io: note: O_DIRECT refused at open under %s; fallback checked at open only\n",
               g_dir);
    ms_io_stats st;
    ms_io_get_stats(io, &st);
    CHECK(st.retries == 0, "the fallback is not a retry (%lld)", (long long)st.retries);
    free_bufs(&pd);
    ms_io_close(io);
}

/* ------------------------------------------------------ end of file, usage */

static void test_eof_and_usage(ms_io_kind kind) {
    int skipped;
    ms_io_params p = params(kind, 2, 64 * 1024);
    ms_io *io = open_io(&p, &skipped);
    if (!io) return;
    int fi = add_main_file(io);
    const char *kn = ms_io_kind_name(kind);
    uint8_t *buf = ms_buf_alloc(1 << 20, 0);
    ms_err err;
    uint64_t t;

    ms_io_req r = {fi, FILE_SIZE - 10, 11, buf, 0};
    ms_err_clear(&err);
    CHECK(ms_io_submit(io, &r, 1, &t, &err) == MS_E_IO && strstr(err.msg, g_path),
          "%s: one byte past EOF must fail at submit: %s", kn, err.msg);
    r = (ms_io_req){fi, FILE_SIZE + 4096, 0, buf, 0};
    ms_err_clear(&err);
    CHECK(ms_io_read(io, &r, 1, &err) == MS_E_IO, "%s: empty read beyond EOF", kn);
    r = (ms_io_req){fi, FILE_SIZE, 0, buf, 0};
    ms_err_clear(&err);
    CHECK(ms_io_read(io, &r, 1, &err) == MS_OK, "%s: empty read at EOF: %s", kn, err.msg);
    r = (ms_io_req){fi, FILE_SIZE - 100, 100, buf, 0};
    memset(buf, 0, 8192);
    ms_err_clear(&err);
    CHECK(ms_io_read(io, &r, 1, &err) == MS_OK && n_wrong(&r) == 0, "%s: tail read: %s", kn,
          err.msg);
    ms_err_clear(&err);
    CHECK(ms_io_read(io, NULL, 0, &err) == MS_OK, "%s: empty batch: %s", kn, err.msg);

    /* usage errors reject the batch */
    r = (ms_io_req){fi, 0, 100, buf + 16, 0};
    ms_err_clear(&err);
    CHECK(ms_io_read(io, &r, 1, &err) == MS_E_USAGE, "%s: unaligned buffer", kn);
    r = (ms_io_req){fi + 5, 0, 100, buf, 0};
    ms_err_clear(&err);
    CHECK(ms_io_read(io, &r, 1, &err) == MS_E_USAGE, "%s: unknown file", kn);
    r = (ms_io_req){fi, -1, 100, buf, 0};
    ms_err_clear(&err);
    CHECK(ms_io_read(io, &r, 1, &err) == MS_E_USAGE, "%s: negative offset", kn);
    ms_err_clear(&err);
    CHECK(ms_io_wait(io, 987654321, &err) == MS_E_USAGE, "%s: unknown ticket", kn);
    ms_err_clear(&err);
    int dummy;
    CHECK(ms_io_add_file(io, "/nonexistent/moestream/x", &dummy, &err) == MS_E_IO, "%s: open",
          kn);

    /* the file shrinks after add_file: the read meets EOF early -> MS_E_IO */
    int fs = -1;
    CHECK(write_file(g_shrink, g_data, 1 << 20) == 0, "write shrink file");
    ms_err_clear(&err);
    CHECK(ms_io_add_file(io, g_shrink, &fs, &err) == MS_OK, "add shrink: %s", err.msg);
    CHECK(truncate(g_shrink, 512 * 1024) == 0, "truncate");
    r = (ms_io_req){fs, 600 * 1024 + 3, 100000, buf, 0};
    ms_err_clear(&err);
    CHECK(ms_io_read(io, &r, 1, &err) == MS_E_IO && strstr(err.msg, g_shrink),
          "%s: read after shrink must fail: %s", kn, err.msg);
    r = (ms_io_req){fs, 512 * 1024 - 5000, 5000, buf, 0};
    ms_err_clear(&err);
    CHECK(ms_io_read(io, &r, 1, &err) == MS_OK && n_wrong(&r) == 0,
          "%s: read inside the shrunk file: %s", kn, err.msg);
    ms_buf_free(buf, 1 << 20, 0);
    ms_io_close(io);
}

/* ------------------------------------------------- two threads, one layer */

typedef struct worker {
    ms_io *io;
    int fi;
    uint64_t seed;
    int64_t n_bad, n_err;
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    uint64_t s = w->seed;
    for (int it = 0; it < 15; it++) {
        pending pd;
        int n = 1 + (int)rng_below(&s, 8);
        pd.n = n;
        for (int i = 0; i < n; i++) {
            ms_io_req *r = &pd.reqs[i];
            r->file = w->fi;
            r->check = 0;
            r->n_bytes = rng_below(&s, 200000);
            r->offset = rng_below(&s, FILE_SIZE - r->n_bytes + 1);
            pd.huge[i] = 0;
            int64_t span = ms_io_span(r->offset, r->n_bytes);
            r->buf = ms_buf_alloc(span > 0 ? span : 1, 0);
        }
        ms_err err;
        ms_err_clear(&err);
        if (ms_io_submit(w->io, pd.reqs, n, &pd.ticket, &err) ||
            ms_io_wait(w->io, pd.ticket, &err))
            w->n_err++;
        for (int i = 0; i < n; i++) w->n_bad += n_wrong(&pd.reqs[i]) != 0;
        free_bufs(&pd);
    }
    return NULL;
}

static void test_threads(ms_io_kind kind) {
    int skipped;
    ms_io_params p = params(kind, 3, 32 * 1024);
    ms_io *io = open_io(&p, &skipped);
    if (!io) return;
    int fi = add_main_file(io);
    worker w[2] = {{io, fi, 11, 0, 0}, {io, fi, 22, 0, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0, "thread");
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        CHECK(w[i].n_bad == 0 && w[i].n_err == 0, "%s thread %d: %lld bad, %lld errors",
              ms_io_kind_name(kind), i, (long long)w[i].n_bad, (long long)w[i].n_err);

    /* close with a ticket outstanding: drains, then frees (sanitizers watch) */
    pending pd;
    uint64_t s = 3;
    fill_batch(&pd, &s, fi, 32 * 1024, 8);
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_io_submit(io, pd.reqs, pd.n, &pd.ticket, &err) == MS_OK, "submit before close");
    ms_io_close(io);
    free_bufs(&pd);
}

/* ---------------------------------------------------------------- bufalloc */

/* ---- the check hook: units [CK_BASE + k CK_UNIT, + CK_UNIT) of the file */
#define CK_UNIT 10007
#define CK_BASE 333
#define CK_NU ((FILE_SIZE - CK_BASE) / CK_UNIT)
static int g_unit_hits[CK_NU];

static ms_status unit_check(void *user, int file, int64_t rb, int64_t re, int64_t nb, int64_t ne,
                            const uint8_t *run, int64_t *n_checked, ms_err *err) {
    *n_checked = 0;
    ms_status st = MS_OK;
    for (int64_t k = (nb - CK_BASE) / CK_UNIT; k * CK_UNIT + CK_BASE < ne; k++) {
        int64_t ub = CK_BASE + k * CK_UNIT, ue = ub + CK_UNIT;
        if (ub < rb || ue > re) continue;   /* not all landed yet: a later chunk checks it */
        __atomic_fetch_add(&g_unit_hits[k], 1, __ATOMIC_RELAXED);
        if (memcmp(run + (ub - rb), g_data + ub, CK_UNIT)) {
            if (st == MS_OK) st = ms_err_set(err, MS_E_IO, "unit %lld differs", (long long)k);
        } else {
            *n_checked += CK_UNIT;
        }
    }
    return st;
}

/* One batch of 8 requests of whole units (the 4th without a check) through a
 * layer with the hook; fault as given; plain = wait with ms_io_wait. */
static void check_batch(ms_io_kind kind, int64_t chunk, ms_fault_kind fk, int plain, uint64_t seed) {
    const char *kn = ms_io_kind_name(kind);
    ms_io_params p = params(kind, 4, chunk);
    p.check = unit_check;
    p.fault.kind = fk;
    p.fault.at_read = 2;
    p.fault.corrupt_begin = CK_UNIT + 5;        /* units 1, 2 and 3 of request 2 */
    p.fault.corrupt_end = 3 * CK_UNIT + 5;
    int skipped;
    ms_io *io = open_io(&p, &skipped);
    if (!io) return;
    int fi = add_main_file(io);
    memset(g_unit_hits, 0, sizeof g_unit_hits);
    uint64_t s = seed;
    ms_io_req reqs[8];
    int64_t first[8], n_units[8], at = rng_below(&s, 5), want_bytes = 0;
    for (int i = 0; i < 8; i++) {
        first[i] = at;
        n_units[i] = 4 + rng_below(&s, 60);
        at += n_units[i] + rng_below(&s, 3);
        MS_ASSERT(at <= CK_NU);
        int64_t off = CK_BASE + first[i] * CK_UNIT, n = n_units[i] * CK_UNIT;
        reqs[i] = (ms_io_req){ fi, off, n, ms_buf_alloc(ms_io_span(off, n), 0), i != 3 };
        if (i != 3) want_bytes += n;
    }
    /* issue order differs from request order */
    ms_io_req t = reqs[0]; reqs[0] = reqs[7]; reqs[7] = t;
    int64_t tf = first[0]; first[0] = first[7]; first[7] = tf;
    int64_t tn = n_units[0]; n_units[0] = n_units[7]; n_units[7] = tn;
    ms_io_stats st0, st1;
    ms_io_get_stats(io, &st0);
    uint64_t ticket;
    ms_err err, check;
    ms_err_clear(&err);
    ms_status st = ms_io_submit(io, reqs, 8, &ticket, &err);
    CHECK(st == MS_OK, "%s check submit: %s", kn, err.msg);
    if (st == MS_OK) st = plain ? ms_io_wait(io, ticket, &err) : ms_io_wait_checked(io, ticket, &check, &err);
    ms_io_get_stats(io, &st1);
    int64_t bad_hits = 0;
    for (int i = 0; i < 8; i++)
        for (int64_t k = first[i]; k < first[i] + n_units[i]; k++)
            bad_hits += g_unit_hits[k] != (i == 3 ? 0 : 1);
    if (fk == MS_FAULT_NONE) {
        CHECK(st == MS_OK && check.status == MS_OK, "%s check: %d %s %s", kn, st, err.msg, check.msg);
        CHECK(bad_hits == 0, "%s chunk %lld: %lld units not checked exactly once", kn, (long long)chunk,
              (long long)bad_hits);
        CHECK(st1.check_bytes - st0.check_bytes == want_bytes && st1.checks > st0.checks && st1.check_ns >= st0.check_ns,
              "%s check stats: %lld bytes, want %lld", kn, (long long)(st1.check_bytes - st0.check_bytes),
              (long long)want_bytes);
        for (int i = 0; i < 8; i++) CHECK(n_wrong(&reqs[i]) == 0, "%s check bytes", kn);
    } else if (fk == MS_FAULT_CORRUPT) {
        char want[64];
        snprintf(want, sizeof want, "unit %lld differs", (long long)(first[2] + 1));
        if (plain) CHECK(st == MS_E_IO && !strcmp(err.msg, want), "%s plain wait: %d '%s', want '%s'", kn, st, err.msg, want);
        else CHECK(st == MS_OK && check.status == MS_E_IO && !strcmp(check.msg, want),
                   "%s checked wait: %d, check %d '%s', want '%s'", kn, st, check.status, check.msg, want);
        CHECK(bad_hits == 0, "%s corrupt: every unit still checked exactly once (%lld not)", kn, (long long)bad_hits);
    } else {
        CHECK(st == MS_E_IO && (plain || check.status == MS_OK) && strstr(err.msg, "injected"),
              "%s EIO with checks: %d '%s'", kn, st, err.msg);
    }
    for (int i = 0; i < 8; i++) ms_buf_free(reqs[i].buf, ms_io_span(reqs[i].offset, reqs[i].n_bytes), 0);
    ms_io_close(io);
}

static void test_check(ms_io_kind kind) {
    for (int r = 0; r < 4; r++) {
        check_batch(kind, 4096, MS_FAULT_NONE, 0, 7 + (uint64_t)r);
        check_batch(kind, 12288, MS_FAULT_NONE, 0, 70 + (uint64_t)r);
    }
    check_batch(kind, (int64_t)2 << 20, MS_FAULT_NONE, 0, 99);
    for (int plain = 0; plain < 2; plain++) {
        check_batch(kind, 4096, MS_FAULT_CORRUPT, plain, 5);
        check_batch(kind, 8192, MS_FAULT_CORRUPT, plain, 6);
        check_batch(kind, 4096, MS_FAULT_EIO, plain, 8);
    }
    /* a check without a hook */
    ms_io_params p = params(kind, 2, 4096);
    int skipped;
    ms_io *io = open_io(&p, &skipped);
    if (!io) return;
    int fi = add_main_file(io);
    uint8_t *buf = ms_buf_alloc(8192, 0);
    ms_io_req r = { fi, 100, 1000, buf, 1 };
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_io_read(io, &r, 1, &err) == MS_E_USAGE && strstr(err.msg, "hook"), "%s check without hook: '%s'",
          ms_io_kind_name(kind), err.msg);
    ms_buf_free(buf, 8192, 0);
    ms_io_close(io);
}

static void test_bufalloc(void) {
    CHECK(ms_buf_alloc(0, 0) == NULL && ms_buf_alloc(-5, 1) == NULL, "empty buffers");
    CHECK(ms_buf_alloc_size(1, 0) == 4096 && ms_buf_alloc_size(4097, 0) == 8192, "small sizes");
    CHECK(ms_buf_alloc_size(1, 1) == MS_BUF_HUGE_PAGE &&
          ms_buf_alloc_size(5 << 20, 1) == 3 * MS_BUF_HUGE_PAGE, "huge sizes");
    CHECK(ms_buf_alloc_size(INT64_MAX, 1) == -1, "overflow");
    for (int huge = 0; huge < 2; huge++) {
        for (int k = 0; k < 3; k++) {
            int64_t bytes = k == 0 ? 1 : k == 1 ? (5 << 20) + 3 : 4096 * 7;
            uint8_t *b = ms_buf_alloc(bytes, huge);
            CHECK(b != NULL, "alloc %lld huge %d", (long long)bytes, huge);
            if (!b) continue;
            int64_t align = huge ? MS_BUF_HUGE_PAGE : MS_IO_ALIGN;
            CHECK((uintptr_t)b % (uintptr_t)align == 0, "alignment of %p (huge %d)", (void *)b,
                  huge);
            CHECK(b[0] == 0 && b[bytes - 1] == 0, "zero-filled");
            int64_t cap = ms_buf_alloc_size(bytes, huge);
            memset(b, 0x5A, (size_t)cap); /* the whole reserved size is usable */
            CHECK(b[cap - 1] == 0x5A, "usable to the end");
            ms_buf_free(b, bytes, huge);
        }
    }
    ms_buf_free(NULL, 10, 0);
    /* prefault: untouched pages are not mapped; after ms_buf_prefault every
     * page of the reserved size is, and the buffer still reads as zeros */
    for (int huge = 0; huge < 2; huge++) {
        const int64_t bytes = (6 << 20) + 5;
        uint8_t *b = ms_buf_alloc(bytes, huge);
        CHECK(b != NULL, "alloc for prefault (huge %d)", huge);
        if (!b) continue;
        const int64_t cap = ms_buf_alloc_size(bytes, huge), pg = 4096, n_pg = cap / pg;
        unsigned char *vec = malloc((size_t)n_pg);
        int64_t before = 0, after = 0, nonzero = 0;
        if (vec && mincore(b, (size_t)cap, vec) == 0)
            for (int64_t i = 0; i < n_pg; i++) before += vec[i] & 1;
        ms_buf_prefault(b, bytes, huge);
        if (vec && mincore(b, (size_t)cap, vec) == 0)
            for (int64_t i = 0; i < n_pg; i++) after += vec[i] & 1;
        for (int64_t i = 0; i < cap; i += 997) nonzero += b[i] != 0;
        CHECK(vec && before == 0 && after == n_pg && nonzero == 0,
              "prefault (huge %d): %lld of %lld pages mapped before, %lld after, %lld nonzero bytes",
              huge, (long long)before, (long long)n_pg, (long long)after, (long long)nonzero);
        free(vec);
        ms_buf_free(b, bytes, huge);
    }
}

/* ---------------------------------------------------------------- main */


/* ------------------------------------------------ priorities, cancel, poll */

#define ISSUE_MAX 64
static int64_t g_issued[ISSUE_MAX];
static int g_n_issued;

static void record_issue(void *user, int file, int64_t offset) {
    (void)user;
    (void)file;
    if (g_n_issued < ISSUE_MAX) g_issued[g_n_issued] = offset;
    g_n_issued++;
}

typedef struct wait_arg { ms_io *io; uint64_t ticket; ms_status st; } wait_arg;

static void *wait_main(void *arg) {
    wait_arg *w = arg;
    w->st = ms_io_wait(w->io, w->ticket, NULL);
    return NULL;
}

/* One aligned request of n_chunks 4 KiB chunks at offset `off` into a fresh buffer. */
static uint64_t submit_at(ms_io *io, int fi, int64_t off, int n_chunks, int prio, uint8_t **buf) {
    *buf = ms_buf_alloc(n_chunks * 4096, 0);
    memset(*buf, 0, (size_t)n_chunks * 4096);
    ms_io_req r = {fi, off, (int64_t)n_chunks * 4096, *buf, 0};
    uint64_t t = 0;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_io_submit_prio(io, &r, 1, prio, &t, &err);
    CHECK(st == MS_OK && t > 0, "submit prio %d: %s", prio, err.msg);
    return t;
}

static void expect_data(const uint8_t *buf, int64_t off, int n_chunks, const char *what) {
    CHECK(memcmp(buf, g_data + off, (size_t)n_chunks * 4096) == 0, "%s: bytes differ from the file", what);
}

/* Device activity (busy_ns, depth_ns): nothing counts while reads only wait
 * in the queue (paused) or nothing is queued; once the reads run, the busy
 * time lies inside the stretch from un-pausing to the wait's return, and the
 * reads in flight integrated over it lie between 1 and queue_depth times it. */
static void test_busy(ms_io_kind kind) {
    ms_io_params p = params(kind, 4, 4096);
    int skipped;
    ms_io *io = open_io(&p, &skipped);
    if (!io) return;
    int fi = add_main_file(io);
    const char *kn = ms_io_kind_name(kind);
    ms_io_stats st;
    ms_io_pause(io, 1);
    uint8_t *buf;
    const uint64_t t = submit_at(io, fi, 8192, 256, MS_IO_PRIO_DEMAND, &buf);
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    ms_io_get_stats(io, &st);
    CHECK(st.busy_ns == 0 && st.depth_ns == 0, "%s: queued but paused, yet busy %lld ns, depth %lld ns",
          kn, (long long)st.busy_ns, (long long)st.depth_ns);
    const int64_t t0 = ms_now_ns();
    ms_io_pause(io, 0);
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_io_wait(io, t, &err) == MS_OK, "%s: wait: %s", kn, err.msg);
    const int64_t t1 = ms_now_ns();
    expect_data(buf, 8192, 256, "busy");
    ms_io_get_stats(io, &st);
    CHECK(st.busy_ns > 0 && st.busy_ns <= t1 - t0, "%s: busy %lld ns outside (0, %lld]", kn,
          (long long)st.busy_ns, (long long)(t1 - t0));
    CHECK(st.depth_ns >= st.busy_ns && st.depth_ns <= 4 * st.busy_ns,
          "%s: depth %lld ns not within 1..4 x busy %lld ns", kn, (long long)st.depth_ns, (long long)st.busy_ns);
    const ms_io_stats before = st;
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    ms_io_get_stats(io, &st);
    CHECK(st.busy_ns == before.busy_ns && st.depth_ns == before.depth_ns,
          "%s: idle, yet busy grew %lld -> %lld ns", kn, (long long)before.busy_ns, (long long)st.busy_ns);
    ms_io_close(io);
    ms_buf_free(buf, 256 * 4096, 0);
}

/* ms_io_set_depth: clamped to 1 .. queue_depth; with 64 chunks queued and a
 * depth of 2 no more than 2 are ever in flight (the ring fills its depth
 * before it waits, so it reaches exactly 2); raised to the queue depth, the
 * ring has all 8 in flight at once, and the workers at most 8; the data is
 * intact either way. */
static void test_depth(ms_io_kind kind) {
    ms_io_params p = params(kind, 8, 4096);
    int skipped;
    ms_io *io = open_io(&p, &skipped);
    if (!io) return;
    int fi = add_main_file(io);
    const char *kn = ms_io_kind_name(kind);
    CHECK(ms_io_depth(io) == 8, "%s: depth starts at the queue depth, got %d", kn, ms_io_depth(io));
    ms_io_set_depth(io, 0);
    CHECK(ms_io_depth(io) == 1, "%s: depth 0 is clamped to 1, got %d", kn, ms_io_depth(io));
    ms_io_set_depth(io, 1000);
    CHECK(ms_io_depth(io) == 8, "%s: depth 1000 is clamped to 8, got %d", kn, ms_io_depth(io));
    for (int round = 0; round < 2; round++) {
        const int depth = round == 0 ? 2 : 8;
        ms_io_set_depth(io, depth);
        ms_io_stats before, st;
        ms_io_get_stats(io, &before);
        ms_io_pause(io, 1);
        uint8_t *buf;
        const uint64_t t = submit_at(io, fi, 4096 * (int64_t)round * 64, 64, MS_IO_PRIO_DEMAND, &buf);
        ms_io_pause(io, 0);
        ms_err err;
        ms_err_clear(&err);
        CHECK(ms_io_wait(io, t, &err) == MS_OK, "%s: wait at depth %d: %s", kn, depth, err.msg);
        expect_data(buf, 4096 * (int64_t)round * 64, 64, "depth");
        ms_io_get_stats(io, &st);
        CHECK(st.reading_peak >= before.reading_peak, "%s: the peak never falls", kn);
        if (round == 0) CHECK(st.reading_peak <= 2, "%s: depth 2, yet %lld reads in flight at once", kn, (long long)st.reading_peak);
        if (kind == MS_IO_URING)
            CHECK(st.reading_peak == depth, "%s: the ring keeps its depth %d in flight, peak %lld", kn, depth,
                  (long long)st.reading_peak);
        CHECK(st.reading_peak <= 8, "%s: more reads in flight (%lld) than the queue depth", kn, (long long)st.reading_peak);
        ms_buf_free(buf, 64 * 4096, 0);
    }
    ms_io_close(io);
}

/* Queued while paused, read after: DEMAND (and what was promoted to it) first,
 * then AHEAD, then SPECULATIVE, each FIFO; a cancelled batch reads nothing and
 * fails "cancelled"; a batch cancelled after it completed is intact. */
static void test_prio(ms_io_kind kind) {
    ms_io_params p = params(kind, 1, 4096);
    p.on_issue = record_issue;
    int skipped;
    ms_io *io = open_io(&p, &skipped);
    if (!io) return;
    int fi = add_main_file(io);
    ms_err err;
    g_n_issued = 0;
    ms_io_pause(io, 1);
    uint8_t *ba, *bb, *bc, *bd, *be;
    const uint64_t ta = submit_at(io, fi, 0, 4, MS_IO_PRIO_SPECULATIVE, &ba);
    const uint64_t tb = submit_at(io, fi, 65536, 2, MS_IO_PRIO_AHEAD, &bb);
    const uint64_t tc = submit_at(io, fi, 131072, 2, MS_IO_PRIO_DEMAND, &bc);
    const uint64_t td = submit_at(io, fi, 196608, 3, MS_IO_PRIO_SPECULATIVE, &bd);
    const uint64_t te = submit_at(io, fi, 262144, 2, MS_IO_PRIO_SPECULATIVE, &be);
    CHECK(ms_io_poll(io, ta) == 0 && ms_io_poll(io, tc) == 0, "%s: queued batches are not done",
          ms_io_kind_name(kind));
    CHECK(ms_io_cancel(io, td) == 3 * 4096, "%s: cancel drops the 3 queued chunks' bytes", ms_io_kind_name(kind));
    CHECK(ms_io_poll(io, td) == 1, "%s: a fully cancelled batch is done at once", ms_io_kind_name(kind));
    ms_io_promote(io, te);
    CHECK(g_n_issued == 0, "%s: paused, yet %d chunks issued", ms_io_kind_name(kind), g_n_issued);
    ms_io_pause(io, 0);
    /* waited in the order they are read: a wait promotes its batch */
    ms_err_clear(&err);
    CHECK(ms_io_wait(io, tc, &err) == MS_OK && ms_io_wait(io, te, &err) == MS_OK &&
          ms_io_wait(io, tb, &err) == MS_OK && ms_io_wait(io, ta, &err) == MS_OK,
          "wait c, e, b, a: %s", err.msg);
    ms_err_clear(&err);
    CHECK(ms_io_wait(io, td, &err) == MS_E_IO && strstr(err.msg, "cancelled"),
          "%s: a cancelled batch fails: %s", ms_io_kind_name(kind), err.msg);
    expect_data(ba, 0, 4, "a");
    expect_data(bb, 65536, 2, "b");
    expect_data(bc, 131072, 2, "c");
    expect_data(be, 262144, 2, "e (promoted)");
    const int64_t want[] = {131072, 135168, 262144, 266240, 65536, 69632, 0, 4096, 8192, 12288};
    int same = g_n_issued == 10;
    for (int i = 0; same && i < 10; i++) same = g_issued[i] == want[i];
    CHECK(same, "%s: issue order (demand, promoted, ahead, speculative) wrong: %d issued, first %lld",
          ms_io_kind_name(kind), g_n_issued, g_n_issued ? (long long)g_issued[0] : -1LL);
    ms_io_stats st;
    ms_io_get_stats(io, &st);
    CHECK(st.cancelled_chunks == 3 && st.cancelled_bytes == 3 * 4096, "%s: cancelled %lld chunks, %lld bytes",
          ms_io_kind_name(kind), (long long)st.cancelled_chunks, (long long)st.cancelled_bytes);
    CHECK(ms_io_cancel(io, ta) == -1 && ms_io_poll(io, ta) == -1, "waited tickets are unknown to cancel and poll");
    /* cancelled after it completed: nothing dropped, the batch is intact */
    uint8_t *bf;
    const uint64_t tf = submit_at(io, fi, 327680, 2, MS_IO_PRIO_SPECULATIVE, &bf);
    while (ms_io_poll(io, tf) == 0) nanosleep(&(struct timespec){0, 100000}, NULL);
    CHECK(ms_io_cancel(io, tf) == 0, "%s: a completed batch has nothing to drop", ms_io_kind_name(kind));
    ms_err_clear(&err);
    CHECK(ms_io_wait(io, tf, &err) == MS_OK, "wait f after a late cancel: %s", err.msg);
    expect_data(bf, 327680, 2, "f");
    ms_err_clear(&err);
    uint64_t t;
    ms_io_req r = {fi, 0, 4096, ba, 0};
    CHECK(ms_io_submit_prio(io, &r, 1, MS_IO_N_PRIO, &t, &err) == MS_E_USAGE, "priority out of range");
    /* a wait promotes: X (speculative) queued behind Y (ahead) is read first
     * once someone waits for it (poll says -1 while a wait is under way) */
    g_n_issued = 0;
    ms_io_pause(io, 1);
    uint8_t *bx, *by;
    const uint64_t ty = submit_at(io, fi, 65536, 2, MS_IO_PRIO_AHEAD, &by);
    wait_arg wx = {io, submit_at(io, fi, 0, 2, MS_IO_PRIO_SPECULATIVE, &bx), MS_E_INTERNAL};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, wait_main, &wx) == 0, "pthread_create");
    while (ms_io_poll(io, wx.ticket) != -1) nanosleep(&(struct timespec){0, 100000}, NULL);
    ms_io_pause(io, 0);
    pthread_join(th, NULL);
    ms_err_clear(&err);
    CHECK(wx.st == MS_OK && ms_io_wait(io, ty, &err) == MS_OK, "waits x, y: %s", err.msg);
    CHECK(g_n_issued == 4 && g_issued[0] == 0 && g_issued[1] == 4096 && g_issued[2] == 65536,
          "%s: the waited speculative batch was not read first (%d issued, first %lld)", ms_io_kind_name(kind),
          g_n_issued, (long long)g_issued[0]);
    expect_data(bx, 0, 2, "x");
    ms_buf_free(bx, 2 * 4096, 0);
    ms_buf_free(by, 2 * 4096, 0);
    ms_io_close(io);
    uint8_t *bufs[] = {ba, bb, bc, bd, be, bf};
    const int64_t sizes[] = {4 * 4096, 2 * 4096, 2 * 4096, 3 * 4096, 2 * 4096, 2 * 4096};
    for (int i = 0; i < 6; i++) ms_buf_free(bufs[i], sizes[i], 0);
}

int main(void) {
    alarm(120); /* a hung read (a reissue loop, a lost wake-up) fails the test, not CI */
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/ms_test_io_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp %s: %s", g_dir, strerror(errno));
        return CHECK_DONE("test_io");
    }
    snprintf(g_path, sizeof g_path, "%s/data.bin", g_dir);
    snprintf(g_shrink, sizeof g_shrink, "%s/shrink.bin", g_dir);
    g_data = malloc((size_t)FILE_SIZE);
    uint64_t s = 42;
    for (int64_t i = 0; i < FILE_SIZE; i += 8) {
        uint64_t v = rng_next(&s);
        for (int k = 0; k < 8 && i + k < FILE_SIZE; k++) g_data[i + k] = (uint8_t)(v >> (8 * k));
    }
    CHECK(write_file(g_path, g_data, FILE_SIZE) == 0, "write %s", g_path);

    test_bufalloc();

    const ms_io_kind kinds[] = {MS_IO_PREAD, MS_IO_DIRECT, MS_IO_URING};
    for (int k = 0; k < 3; k++) {
        test_random(kinds[k], 4, 256 * 1024, 6, 1 + (uint64_t)k);
        test_random(kinds[k], 2, (int64_t)2 << 20, 4, 100 + (uint64_t)k); /* default chunk */
        test_random(kinds[k], 2, 4096, 2, 200 + (uint64_t)k);             /* smallest chunk */
        const ms_fault_kind faults[] = {MS_FAULT_EIO, MS_FAULT_TRANSIENT, MS_FAULT_SHORT,
                                        MS_FAULT_CORRUPT};
        const int64_t at[] = {0, 2, FB - 1, FB + 2}; /* first, middle, last; a later batch */
        for (int f = 0; f < 4; f++)
            for (int a = 0; a < 4; a++) test_fault(kinds[k], faults[f], at[a]);
        if (kinds[k] != MS_IO_PREAD) test_nodirect(kinds[k]);
        test_eof_and_usage(kinds[k]);
        test_threads(kinds[k]);
        test_check(kinds[k]);
        test_prio(kinds[k]);
        test_busy(kinds[k]);
        test_depth(kinds[k]);
    }

    /* parameter validation */
    ms_io *io = NULL;
    ms_err err;
    ms_io_params p = ms_io_default_params();
    p.queue_depth = 0;
    ms_err_clear(&err);
    CHECK(ms_io_open(&p, &io, &err) == MS_E_USAGE && io == NULL, "queue_depth 0");
    p = ms_io_default_params();
    p.fault.kind = MS_FAULT_CORRUPT;
    p.fault.corrupt_begin = 5;
    p.fault.corrupt_end = 4;
    ms_err_clear(&err);
    CHECK(ms_io_open(&p, &io, &err) == MS_E_USAGE, "inverted corrupt window");

    unlink(g_path);
    unlink(g_shrink);
    rmdir(g_dir);
    free(g_data);
    return CHECK_DONE("test_io");
}
