/* bench/devbench.c - the device's read bandwidth, measured the way the engine reads.
 *
 * Owns: a measurement program, nothing the engine uses.
 * Idea: every byte goes through the engine's own I/O layer (base/io.h) into
 *   buffers from base/bufalloc.h, with the engine's chunking, so the numbers
 *   are what the store can get from the disk, not what dd or fio get. Two
 *   access patterns, the two the store issues:
 *
 *     expert  batches of `batch` requests of expert_bytes (17,547,264 = one
 *             K3 routed expert) at random 4096-aligned offsets of the files,
 *             one batch submitted and waited at a time (one MoE layer's
 *             demand reads);
 *     layer   one request of layer_bytes (a streamed trunk region) at a
 *             cursor walking the files in order.
 *
 *   For every (backend, buffer kind, pattern, queue depth) it reads at least
 *   --bytes (and at least two submissions) after one untimed warm-up
 *   submission, and prints one JSON line: GB/s = requested bytes / wall time.
 *   Buffer kinds: "huge" = 2 MiB-aligned, MADV_HUGEPAGE (the store's blocks);
 *   "4k" = 4 KiB pages, MADV_NOHUGEPAGE. The disk of the target machine takes
 *   at most 254 segments per request, so the buffer's page size changes how
 *   much one request can carry. Each line says how many bytes of the buffer
 *   really sat on huge pages (AnonHugePages of the process before / after the
 *   buffer was touched) and whether the files were read with O_DIRECT.
 * Usage: devbench [options] FILE...   (see usage() below)
 * Does not: assert anything, write, or defeat caches below O_DIRECT (a
 *   virtual disk may be cached by its host; the numbers say what this guest
 *   sees).
 */
#include "base/bufalloc.h"
#include "base/err.h"
#include "base/io.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "bench_util.h"

#define MAX_FILES 256
#define MAX_LIST 16
#define K3_EXPERT_BYTES 17547264LL

typedef struct opts {
    const char *files[MAX_FILES];
    int n_files;
    const char *backends[MAX_LIST];
    int n_backends;
    const char *bufs[MAX_LIST];
    int n_bufs;
    const char *patterns[MAX_LIST];
    int n_patterns;
    int qds[MAX_LIST];
    int n_qds;
    int64_t expert_bytes, layer_bytes, chunk_bytes, min_bytes;
    int batch;
    uint64_t seed;
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: devbench [options] FILE...\n"
            "  --backend LIST      direct,uring,pread (default direct,uring)\n"
            "  --buf LIST          huge,4k (default huge,4k)\n"
            "  --pattern LIST      expert,layer (default expert,layer)\n"
            "  --qd LIST           queue depths (default 1,2,4,8,16)\n"
            "  --expert-bytes N    one expert request (default 17547264)\n"
            "  --batch N           expert requests per submission (default 16)\n"
            "  --layer-bytes N     one layer request (default 850000000, capped at\n"
            "                      the largest file)\n"
            "  --chunk N           I/O layer chunk bytes (default 2 MiB, the engine's)\n"
            "  --bytes N           bytes to read per configuration (default 2 GiB)\n"
            "  --seed N            offsets of the expert pattern (default 1)\n"
            "Sizes take K/M/G suffixes (powers of 1024). Output: one JSON line per\n"
            "configuration on stdout.\n");
}

/* Split a comma list in place into out[]; returns the count or -1. */
static int split_list(char *s, const char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max) return -1;
        out[n++] = tok;
    }
    return n;
}

/* AnonHugePages of this process in bytes (0 when unknown). */
static int64_t anon_huge_bytes(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %lld kB", &kb) == 1) break;
    fclose(f);
    return (int64_t)kb * 1024;
}

/* xorshift64*: offsets of the expert pattern, reproducible from the seed. */
static uint64_t rnd(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

typedef struct bench_buf {
    uint8_t *p;
    int64_t bytes;
    int huge;
    int64_t huge_backed;   /* bytes of it on huge pages after touching */
} bench_buf;

static int buf_make(bench_buf *b, int64_t bytes, int huge) {
    memset(b, 0, sizeof *b);
    b->bytes = bytes;
    b->huge = huge;
    int64_t before = anon_huge_bytes();
    b->p = ms_buf_alloc(bytes, huge);
    if (!b->p) return -1;
#ifdef MADV_NOHUGEPAGE
    if (!huge) madvise(b->p, (size_t)ms_buf_alloc_size(bytes, 0), MADV_NOHUGEPAGE);
#endif
    /* touch every page now, as a long-running store has: fault-in is not I/O */
    memset(b->p, 0, (size_t)ms_buf_alloc_size(bytes, huge));
    b->huge_backed = anon_huge_bytes() - before;
    if (b->huge_backed < 0) b->huge_backed = 0;
    return 0;
}

static void buf_drop(bench_buf *b) {
    if (b->p) ms_buf_free(b->p, b->bytes, b->huge);
    b->p = NULL;
}

typedef struct file_set {
    int n;
    int64_t size[MAX_FILES];
    int64_t total;
    /* layer cursor */
    int cur_file;
    int64_t cur_off;
} file_set;

/* Offsets for one expert batch: file chosen in proportion to its size. */
static void expert_reqs(const file_set *fs, const bench_buf *b, int64_t expert_bytes, int batch,
                        uint64_t *seed, ms_io_req *reqs) {
    int64_t slot = ms_io_span(0, expert_bytes);
    for (int i = 0; i < batch; i++) {
        int f = 0;
        for (int tries = 0; tries < 1000; tries++) {
            int64_t pick = (int64_t)(rnd(seed) % (uint64_t)fs->total);
            for (f = 0; f < fs->n - 1 && pick >= fs->size[f]; f++) pick -= fs->size[f];
            if (fs->size[f] >= expert_bytes) break;
        }
        int64_t room = fs->size[f] - expert_bytes;
        int64_t off = (int64_t)(rnd(seed) % (uint64_t)(room / MS_IO_ALIGN + 1)) * MS_IO_ALIGN;
        reqs[i] = (ms_io_req){ .file = f, .offset = off, .n_bytes = expert_bytes,
                               .buf = b->p + (int64_t)i * slot };
    }
}

/* One layer request at the cursor; the cursor then moves on (wrapping). */
static void layer_req(file_set *fs, const bench_buf *b, int64_t layer_bytes, ms_io_req *req) {
    for (int guard = 0; guard <= fs->n; guard++) {
        if (fs->cur_off + layer_bytes <= fs->size[fs->cur_file]) break;
        fs->cur_file = (fs->cur_file + 1) % fs->n;
        fs->cur_off = 0;
    }
    *req = (ms_io_req){ .file = fs->cur_file, .offset = fs->cur_off, .n_bytes = layer_bytes,
                        .buf = b->p };
    fs->cur_off += (layer_bytes + MS_IO_ALIGN - 1) / MS_IO_ALIGN * MS_IO_ALIGN;
}

static ms_io_kind kind_of(const char *name, int *ok) {
    *ok = 1;
    if (!strcmp(name, "direct")) return MS_IO_DIRECT;
    if (!strcmp(name, "uring")) return MS_IO_URING;
    if (!strcmp(name, "pread")) return MS_IO_PREAD;
    *ok = 0;
    return MS_IO_DIRECT;
}

static void print_json(json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s) { printf("%s\n", s); fflush(stdout); free(s); }
    json_decref(o);
}

/* One configuration; prints its line. Returns 0, or -1 after printing an error line. */
static int run_config(const opts *o, file_set *fs, const char *backend, const bench_buf *b,
                      const char *pattern, int qd, uint64_t *seed) {
    int ok;
    ms_io_params p = ms_io_default_params();
    p.kind = kind_of(backend, &ok);
    p.queue_depth = qd;
    p.chunk_bytes = o->chunk_bytes;
    ms_err err;
    ms_err_clear(&err);
    ms_io *io = NULL;
    int rc = -1;
    int is_expert = !strcmp(pattern, "expert");
    int n_req = is_expert ? o->batch : 1;
    int64_t req_bytes = is_expert ? o->expert_bytes : o->layer_bytes;
    ms_io_req reqs[256];
    int direct = 1;
    double t = 0;
    int64_t bytes = 0, subs = 0;
    ms_io_stats st0, st1;
    memset(&st0, 0, sizeof st0);
    memset(&st1, 0, sizeof st1);
    if (ms_io_open(&p, &io, &err) != MS_OK) goto out;
    for (int i = 0; i < o->n_files; i++) {
        int idx;
        if (ms_io_add_file(io, o->files[i], &idx, &err) != MS_OK) goto out;
    }
    /* warm-up: threads running, descriptors proven direct (or fallen back) */
    if (is_expert) expert_reqs(fs, b, o->expert_bytes, 1, seed, reqs);
    else expert_reqs(fs, b, MS_IO_ALIGN * 16, 1, seed, reqs);
    if (ms_io_read(io, reqs, 1, &err) != MS_OK) goto out;
    for (int i = 0; i < o->n_files; i++)
        if (ms_io_file_is_direct(io, i) != 1) direct = 0;
    ms_io_get_stats(io, &st0);
    double t0 = now_s();
    while (bytes < o->min_bytes || subs < 2) {
        if (is_expert) expert_reqs(fs, b, o->expert_bytes, n_req, seed, reqs);
        else layer_req(fs, b, o->layer_bytes, reqs);
        if (ms_io_read(io, reqs, n_req, &err) != MS_OK) goto out;
        bytes += req_bytes * n_req;
        subs++;
    }
    t = now_s() - t0;
    ms_io_get_stats(io, &st1);
    rc = 0;
out:
    if (io) ms_io_close(io);
    json_t *j = json_object();
    json_object_set_new(j, "backend", json_string(backend));
    json_object_set_new(j, "buf", json_string(b->huge ? "huge" : "4k"));
    json_object_set_new(j, "pattern", json_string(pattern));
    json_object_set_new(j, "qd", json_integer(qd));
    json_object_set_new(j, "request_bytes", json_integer(req_bytes));
    json_object_set_new(j, "requests_per_submit", json_integer(n_req));
    json_object_set_new(j, "chunk_bytes", json_integer(o->chunk_bytes));
    if (rc == 0) {
        json_object_set_new(j, "bytes", json_integer(bytes));
        json_object_set_new(j, "submits", json_integer(subs));
        json_object_set_new(j, "seconds", json_real(t));
        json_object_set_new(j, "gbps", json_real(t > 0 ? (double)bytes / t / 1e9 : 0.0));
        json_object_set_new(j, "reads_issued", json_integer(st1.reads_issued - st0.reads_issued));
        json_object_set_new(j, "direct", json_boolean(direct));
        json_object_set_new(j, "buf_huge_backed_bytes", json_integer(b->huge_backed));
        json_object_set_new(j, "buf_bytes", json_integer(ms_buf_alloc_size(b->bytes, b->huge)));
    } else {
        json_object_set_new(j, "error", json_string(err.msg[0] ? err.msg : "failed"));
    }
    print_json(j);
    return rc;
}

static int parse_args(int argc, char **argv, opts *o) {
    static char backends[256] = "direct,uring", bufs[64] = "huge,4k", patterns[64] = "expert,layer",
                qds[128] = "1,2,4,8,16";
    memset(o, 0, sizeof *o);
    o->expert_bytes = K3_EXPERT_BYTES;
    o->layer_bytes = 850000000;
    o->chunk_bytes = (int64_t)2 << 20;
    o->min_bytes = (int64_t)2 << 30;
    o->batch = 16;
    o->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        if (a[0] != '-') {
            if (o->n_files == MAX_FILES) { fprintf(stderr, "devbench: too many files\n"); return -1; }
            o->files[o->n_files++] = a;
            continue;
        }
        if (!v) { fprintf(stderr, "devbench: %s needs a value\n", a); return -1; }
        i++;
        if (!strcmp(a, "--backend")) snprintf(backends, sizeof backends, "%s", v);
        else if (!strcmp(a, "--buf")) snprintf(bufs, sizeof bufs, "%s", v);
        else if (!strcmp(a, "--pattern")) snprintf(patterns, sizeof patterns, "%s", v);
        else if (!strcmp(a, "--qd")) snprintf(qds, sizeof qds, "%s", v);
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10) | 1;
        else if ((n = parse_size(v)) <= 0) { fprintf(stderr, "devbench: bad value '%s' for %s\n", v, a); return -1; }
        else if (!strcmp(a, "--expert-bytes")) o->expert_bytes = n;
        else if (!strcmp(a, "--layer-bytes")) o->layer_bytes = n;
        else if (!strcmp(a, "--chunk")) o->chunk_bytes = n;
        else if (!strcmp(a, "--bytes")) o->min_bytes = n;
        else if (!strcmp(a, "--batch")) o->batch = (int)(n > 256 ? 256 : n);
        else { fprintf(stderr, "devbench: unknown option '%s'\n", a); return -1; }
    }
    if (o->n_files == 0) { usage(stderr); return -1; }
    const char *qs[MAX_LIST];
    if ((o->n_backends = split_list(backends, o->backends, MAX_LIST)) <= 0 ||
        (o->n_bufs = split_list(bufs, o->bufs, MAX_LIST)) <= 0 ||
        (o->n_patterns = split_list(patterns, o->patterns, MAX_LIST)) <= 0 ||
        (o->n_qds = split_list(qds, qs, MAX_LIST)) <= 0) {
        fprintf(stderr, "devbench: bad list\n");
        return -1;
    }
    for (int i = 0; i < o->n_backends; i++) {
        int ok;
        kind_of(o->backends[i], &ok);
        if (!ok) { fprintf(stderr, "devbench: unknown backend '%s'\n", o->backends[i]); return -1; }
    }
    for (int i = 0; i < o->n_bufs; i++)
        if (strcmp(o->bufs[i], "huge") && strcmp(o->bufs[i], "4k")) {
            fprintf(stderr, "devbench: unknown buffer kind '%s'\n", o->bufs[i]);
            return -1;
        }
    for (int i = 0; i < o->n_patterns; i++)
        if (strcmp(o->patterns[i], "expert") && strcmp(o->patterns[i], "layer")) {
            fprintf(stderr, "devbench: unknown pattern '%s'\n", o->patterns[i]);
            return -1;
        }
    for (int i = 0; i < o->n_qds; i++) {
        o->qds[i] = atoi(qs[i]);
        if (o->qds[i] < 1 || o->qds[i] > MS_IO_MAX_QUEUE_DEPTH) {
            fprintf(stderr, "devbench: bad queue depth '%s'\n", qs[i]);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    opts o;
    if (parse_args(argc, argv, &o) != 0) return 2;
    /* file sizes through the I/O layer itself */
    file_set fs;
    memset(&fs, 0, sizeof fs);
    {
        ms_io_params p = ms_io_default_params();
        p.kind = MS_IO_PREAD;
        p.queue_depth = 1;
        ms_err err;
        ms_err_clear(&err);
        ms_io *io;
        if (ms_io_open(&p, &io, &err) != MS_OK) { fprintf(stderr, "devbench: %s\n", err.msg); return 1; }
        for (int i = 0; i < o.n_files; i++) {
            int idx;
            if (ms_io_add_file(io, o.files[i], &idx, &err) != MS_OK) {
                fprintf(stderr, "devbench: %s\n", err.msg);
                ms_io_close(io);
                return 1;
            }
            fs.size[i] = ms_io_file_size(io, idx);
            fs.total += fs.size[i];
        }
        fs.n = o.n_files;
        ms_io_close(io);
    }
    int64_t largest = 0;
    for (int i = 0; i < fs.n; i++) if (fs.size[i] > largest) largest = fs.size[i];
    if (o.layer_bytes > largest) o.layer_bytes = largest / MS_IO_ALIGN * MS_IO_ALIGN;
    if (o.expert_bytes > largest) { fprintf(stderr, "devbench: files smaller than one expert\n"); return 1; }
    int64_t expert_span = 0;
    if (ms_mul_i64(ms_io_span(0, o.expert_bytes), o.batch, &expert_span) != 0) return 1;
    int64_t need = ms_io_span(0, o.layer_bytes);
    if (expert_span > need) need = expert_span;
    uint64_t seed = o.seed * 0x9E3779B97F4A7C15ULL | 1;
    int failures = 0;
    for (int ib = 0; ib < o.n_bufs; ib++) {
        bench_buf b;
        int huge = !strcmp(o.bufs[ib], "huge");
        if (buf_make(&b, need, huge) != 0) { fprintf(stderr, "devbench: cannot allocate %lld bytes\n", (long long)need); return 1; }
        for (int ik = 0; ik < o.n_backends; ik++)
            for (int ip = 0; ip < o.n_patterns; ip++)
                for (int iq = 0; iq < o.n_qds; iq++)
                    if (run_config(&o, &fs, o.backends[ik], &b, o.patterns[ip], o.qds[iq], &seed) != 0)
                        failures++;
        buf_drop(&b);
    }
    return failures ? 1 : 0;
}
