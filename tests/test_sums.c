/* tests/test_sums.c - the checksum sidecar (format/sums.h) and `verify`
 * (ms_verify_checkpoint).
 *
 * On a generated two-shard checkpoint with a 2.5 MiB tensor (3 blocks, the
 * last one short), a 0-byte tensor and small ones:
 *   - build -> write -> load round trip; block counts; every tensor checks ok;
 *     whole-block sub-ranges check ok; ranges that are not whole blocks are
 *     refused (MS_E_INTERNAL); cover / block_end give block bounds;
 *   - one flipped byte in memory -> MS_E_IO naming the tensor and the block's
 *     file range; one flipped byte on disk -> compare reports exactly that
 *     tensor and block; ms_verify_checkpoint says the same;
 *   - a truncated, a tampered and another checkpoint's sidecar are refused
 *     with a message saying which;
 *   - the store verifying as data lands (store/store.h): on the same files,
 *     with 64 KiB I/O chunks (so every 1 MiB block straddles chunks that land
 *     in any order), every backend, hashing on the I/O threads and on the
 *     compute thread (verify_sync): the bytes handed out equal the file, every
 *     block is hashed exactly once (verify_bytes), nothing is hashed on the
 *     compute thread unless asked; a transient corruption of one read (fault
 *     kind 4, two blocks of one request) is re-read once and cured; a byte
 *     flipped on disk fails the start with the same one line in both modes;
 *     by-part reads keep the last verified piece: rows of one block cost one
 *     read, a row straddling two blocks reads both, and both modes read the
 *     same bytes the same number of times;
 *   - the real layout ($MS_TESTDATA/a): every region-sized tensor checks ok.
 */
#include "moestream.h"

#include "check.h"
#include "format/safetensors.h"
#include "format/sums.h"
#include "store/store.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>
#include <unistd.h>

#define MIB ((int64_t)1 << 20)

typedef struct tdef { const char *name; int64_t n, rows; } tdef;   /* rows > 0: shape [rows, n / rows] */

/* A U8 safetensors file with the given tensors; byte j of tensor i = (i * 31 + j * 7) & 255. */
static void write_shard(const char *path, const tdef *t, int n) {
    char hdr[4096];
    int len = snprintf(hdr, sizeof hdr, "{");
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        char shape[64];
        if (t[i].rows > 0) snprintf(shape, sizeof shape, "%lld, %lld", (long long)t[i].rows, (long long)(t[i].n / t[i].rows));
        else snprintf(shape, sizeof shape, "%lld", (long long)t[i].n);
        len += snprintf(hdr + len, sizeof hdr - (size_t)len, "%s\"%s\": {\"dtype\": \"U8\", \"shape\": [%s], \"data_offsets\": [%lld, %lld]}",
                        i ? ", " : "", t[i].name, shape, (long long)at, (long long)(at + t[i].n));
        at += t[i].n;
    }
    len += snprintf(hdr + len, sizeof hdr - (size_t)len, "}");
    while (len % 8) hdr[len++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t hl = (uint64_t)len;
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(hl >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < t[i].n; j++) fputc((int)((i * 31 + j * 7) & 255), f);
    fclose(f);
}

static uint8_t *read_range(const char *path, int64_t off, int64_t n) {
    FILE *f = fopen(path, "rb");
    uint8_t *b = malloc((size_t)n + 1);
    fseek(f, (long)off, SEEK_SET);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    if ((int64_t)got != n) { free(b); return NULL; }
    return b;
}

static void flip_file_byte(const char *path, int64_t at) {
    FILE *f = fopen(path, "r+b");
    fseek(f, (long)at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, (long)at, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

typedef struct bad_seen { int n; char name[256]; int64_t begin, end, n_bad; } bad_seen;
static void on_bad(void *u, const ms_tensor_info *t, const char *file, int64_t b, int64_t e, int64_t n) {
    bad_seen *s = u;
    s->n++;
    snprintf(s->name, sizeof s->name, "%s", t->name);
    s->begin = b; s->end = e; s->n_bad = n;
}

static int g_n_err_lines;
static char g_last_err[1024];
static void log_fn(void *u, ms_log_level lv, const char *line) {
    if (lv == MS_LOG_ERROR) { g_n_err_lines++; snprintf(g_last_err, sizeof g_last_err, "%s", line); }
}

static void copy_file(const char *from, const char *to, int64_t cut, int64_t flip_at) {
    FILE *f = fopen(from, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    if (flip_at >= 0 && flip_at < n) b[flip_at] ^= 1;
    f = fopen(to, "wb");
    fwrite(b, 1, got - (size_t)(cut > 0 ? cut : 0), f);
    fclose(f);
    free(b);
}

typedef struct store_run {
    ms_status st;
    char msg[512];
    ms_store_stats ss;
    int64_t n_wrong;            /* bytes handed out that differ from the file */
    int64_t reads_after_rows;   /* reads_issued after each part read */
    int64_t reads[6];
} store_run;

/* Open a store over ck's shards with the sidecar: the four tensors of shard a
 * as one GLOBAL region, "big" again as a sparse GLOBAL read by parts, and the
 * two tensors of shard b as EXPERT regions with room for one (so not
 * everything is resident and the sparse region stays on disk), then compare
 * what is handed out with the file. */
static void store_run_one(const ms_ckpt *ck, const ms_sums *sums, const char *s1, ms_io_kind kind,
                          int sync, int fault_at, store_run *out) {
    memset(out, 0, sizeof *out);
    const ms_tensor_info *ta0 = ms_ckpt_find(ck, "small.a"), *ta3 = ms_ckpt_find(ck, "small.b");
    const ms_tensor_info *tb = ms_ckpt_find(ck, "big");
    ms_io_params iop = ms_io_default_params();
    iop.kind = kind;
    iop.chunk_bytes = 64 << 10;
    if (fault_at >= 0) {
        /* request 0 (the region): two blocks of "big" inside it, bytes MIB+10
           of "big" (its block 1) and 2 MiB+10 (block 2); request 1 (the
           first part read, block 0 of "big"): its bytes 10..20 */
        iop.fault.kind = MS_FAULT_CORRUPT;
        iop.fault.at_read = fault_at;
        iop.fault.corrupt_begin = fault_at ? 10 : tb->offset - ta0->offset + MIB + 10;
        iop.fault.corrupt_end = fault_at ? 20 : tb->offset - ta0->offset + 2 * MIB + 11;
    }
    ms_store_params sp = ms_store_default_params();
    sp.ram_bytes = 16 * MIB;
    sp.expert_bytes = MIB + 8192;
    sp.sums = sums;
    sp.verify_sync = sync;
    sp.io = &iop;
    ms_err err;
    ms_err_clear(&err);
    ms_store *s = NULL;
    out->st = ms_store_open(&sp, ck, &s, &err);
    int g = -1, sparse = -1;
    int64_t pos = 0;
    if (out->st == MS_OK) {
        ms_range ra = { ta0->shard, ta0->offset, ta3->offset + ta3->n_bytes - ta0->offset, 0 };
        ms_range rb = { tb->shard, tb->offset, tb->n_bytes, 0 };
        const ms_tensor_info *t1 = ms_ckpt_find(ck, "exactly.one"), *t2 = ms_ckpt_find(ck, "tail");
        ms_range re1 = { t1->shard, t1->offset, t1->n_bytes, 0 }, re2 = { t2->shard, t2->offset, t2->n_bytes, 0 };
        if (ms_store_add_region(s, MS_REGION_EXPERT, &re1, 1, NULL, &err) < 0 ||
            ms_store_add_region(s, MS_REGION_EXPERT, &re2, 1, NULL, &err) < 0)
            out->st = MS_E_INTERNAL;
        g = ms_store_add_region(s, MS_REGION_GLOBAL, &ra, 1, &pos, &err);
        sparse = ms_store_add_region(s, MS_REGION_GLOBAL, &rb, 1, NULL, &err);
        if (g < 0 || sparse < 0) out->st = g < 0 ? g : sparse;
        else if (out->st == MS_OK) ms_store_mark_sparse(s, sparse);
    }
    if (out->st == MS_OK) out->st = ms_store_start(s, &err);
    if (out->st == MS_OK) {
        const uint8_t *p = ms_store_acquire(s, g, &err);
        int64_t n = ta3->offset + ta3->n_bytes - ta0->offset;
        uint8_t *want = read_range(s1, ta0->offset, n);
        if (!p || !want) out->n_wrong = -1;
        else
            for (int64_t i = 0; i < n; i++) out->n_wrong += p[pos + i] != want[i];
        free(want);
        if (p) ms_store_release(s, g);
        /* rows: three in block 0 (one read), one straddling blocks 0 and 1
           (block 0 from the kept piece, block 1 read), one inside block 1
           (kept), one in the short block 2 (read) */
        const int64_t rows[6][2] = { { 0, 1000 }, { 1000, 1000 }, { 5000, 300 }, { MIB - 500, 1000 },
                                     { MIB + 4000, 1000 }, { 2 * MIB + 7, 100 } };
        uint8_t *bigw = read_range(s1, tb->offset, tb->n_bytes);
        for (int k = 0; k < 6 && out->st == MS_OK && bigw; k++) {
            uint8_t row[1000];
            out->st = ms_store_read_part(s, sparse, rows[k][0], rows[k][1], row, &err);
            if (out->st == MS_OK && memcmp(row, bigw + rows[k][0], (size_t)rows[k][1])) out->n_wrong++;
            ms_store_stats ss;
            ms_store_get_stats(s, &ss);
            out->reads[k] = ss.reads_issued;
        }
        free(bigw);
    }
    if (s) ms_store_get_stats(s, &out->ss);
    snprintf(out->msg, sizeof out->msg, "%s", err.msg);
    ms_store_close(s);
}

static void store_checks(const ms_ckpt *ck, const ms_sums *sums, const char *s1) {
    const ms_tensor_info *ta0 = ms_ckpt_find(ck, "small.a"), *ta3 = ms_ckpt_find(ck, "small.b");
    const ms_tensor_info *tb = ms_ckpt_find(ck, "big");
    const int64_t region_bytes = ta3->offset + ta3->n_bytes - ta0->offset;
    const ms_io_kind kinds[] = { MS_IO_PREAD, MS_IO_DIRECT, MS_IO_URING };
    store_run ref;
    store_run_one(ck, sums, s1, MS_IO_PREAD, 1, -1, &ref);
    CHECK(ref.st == MS_OK && ref.n_wrong == 0, "sync reference: %d %s (%lld wrong)", ref.st, ref.msg,
          (long long)ref.n_wrong);
    /* reads: 1 for the region, then rows: block 0 read once for three rows,
       block 1 for the straddling row (block 0 kept) and the next, block 2 */
    const int64_t want_reads[6] = { 2, 2, 2, 3, 3, 4 };
    CHECK(!memcmp(ref.reads, want_reads, sizeof want_reads) && ref.ss.part_hits == 4,
          "part reads %lld %lld %lld %lld %lld %lld, part hits %lld", (long long)ref.reads[0], (long long)ref.reads[1],
          (long long)ref.reads[2], (long long)ref.reads[3], (long long)ref.reads[4], (long long)ref.reads[5],
          (long long)ref.ss.part_hits);
    CHECK(ref.ss.verify_sync_ns > 0 && ref.ss.verify_sync_ns == ref.ss.verify_ns, "sync: all hashing on the compute thread");
    for (int k = 0; k < 3; k++)
        for (int sync = 0; sync < 2; sync++) {
            const char *kn = ms_io_kind_name(kinds[k]);
            store_run r;
            store_run_one(ck, sums, s1, kinds[k], sync, -1, &r);
            CHECK(r.st == MS_OK && r.n_wrong == 0, "%s sync=%d: %d %s", kn, sync, r.st, r.msg);
            /* each block hashed once: the region, then blocks 0, 1, 2 of "big" */
            CHECK(r.ss.verify_bytes == ref.ss.verify_bytes && r.ss.verify_bytes == region_bytes + tb->n_bytes,
                  "%s sync=%d: verify_bytes %lld, want %lld", kn, sync, (long long)r.ss.verify_bytes,
                  (long long)(region_bytes + tb->n_bytes));
            CHECK(!memcmp(r.reads, ref.reads, sizeof r.reads) && r.ss.global_bytes_read == ref.ss.global_bytes_read,
                  "%s sync=%d: same reads and bytes as the reference", kn, sync);
            CHECK(sync ? r.ss.verify_sync_ns > 0 : r.ss.verify_sync_ns == 0 && r.ss.verify_ns > 0,
                  "%s sync=%d: verify_sync_ns %lld of %lld", kn, sync, (long long)r.ss.verify_sync_ns,
                  (long long)r.ss.verify_ns);
            CHECK(r.ss.verify_retries == 0 && r.ss.verify_failures == 0, "%s sync=%d: no retries", kn, sync);
            /* a transient corruption of two blocks of the region's read: one re-read cures it */
            store_run c;
            store_run_one(ck, sums, s1, kinds[k], sync, 0, &c);
            CHECK(c.st == MS_OK && c.n_wrong == 0 && c.ss.verify_retries == 1 && c.ss.verify_failures == 0,
                  "%s sync=%d corrupt: %d %s, %lld wrong, %lld retries, %lld failures", kn, sync, c.st, c.msg,
                  (long long)c.n_wrong, (long long)c.ss.verify_retries, (long long)c.ss.verify_failures);
            /* the same on a part read (request 1: the first row's block) */
            store_run_one(ck, sums, s1, kinds[k], sync, 1, &c);
            CHECK(c.st == MS_OK && c.n_wrong == 0 && c.ss.verify_retries == 1, "%s sync=%d corrupt part: %d %s",
                  kn, sync, c.st, c.msg);
        }
    /* a byte flipped on disk in block 1 of "big": the start fails after one
       re-read, with the same line whichever thread hashes */
    flip_file_byte(s1, tb->offset + MIB + 3);
    char want[256];
    snprintf(want, sizeof want, "tensor 'big' bytes [%lld, %lld) of the file: checksum mismatch (moestream.sums)",
             (long long)(tb->offset + MIB), (long long)(tb->offset + 2 * MIB));
    store_run bad[2];
    for (int sync = 0; sync < 2; sync++) {
        store_run_one(ck, sums, s1, MS_IO_URING, sync, -1, &bad[sync]);
        CHECK(bad[sync].st == MS_E_IO && strstr(bad[sync].msg, want) && strstr(bad[sync].msg, "a.safetensors") &&
              bad[sync].ss.verify_retries == 1 && bad[sync].ss.verify_failures == 1,
              "sync=%d flipped byte: %d '%s'", sync, bad[sync].st, bad[sync].msg);
    }
    CHECK(!strcmp(bad[0].msg, bad[1].msg), "same message: '%s' vs '%s'", bad[0].msg, bad[1].msg);
    flip_file_byte(s1, tb->offset + MIB + 3);
}

static void generated(const char *tmp) {
    char d1[4200], d2[4200], s1[4300], s2[4300], sums[4300], bad[4300];
    snprintf(d1, sizeof d1, "%s/ck1", tmp);
    snprintf(d2, sizeof d2, "%s/ck2", tmp);
    mkdir(d1, 0755);
    mkdir(d2, 0755);
    const int64_t big = 5 * MIB / 2 + 123;
    const tdef a[] = { { "small.a", 100, 0 }, { "big", big, 0 }, { "empty", 0, 0 }, { "small.b", 4096, 0 } };
    const tdef b[] = { { "exactly.one", MIB, 0 }, { "tail", 7, 0 } };
    snprintf(s1, sizeof s1, "%s/a.safetensors", d1);
    snprintf(s2, sizeof s2, "%s/b.safetensors", d1);
    write_shard(s1, a, 4);
    write_shard(s2, b, 2);
    ms_err err;
    ms_err_clear(&err);
    ms_ckpt *ck = NULL;
    CHECK(ms_ckpt_open(d1, &ck, &err) == MS_OK, "%s", err.msg);
    if (!ck) return;
    ms_sums *sm = NULL;
    CHECK(ms_sums_build(ck, NULL, &sm, &err) == MS_OK, "build: %s", err.msg);
    if (!sm) { ms_ckpt_close(ck); return; }
    /* 1 + 3 + 0 + 1 + 1 + 1 blocks */
    CHECK(ms_sums_n_blocks(sm) == 7, "n_blocks %lld, want 7", (long long)ms_sums_n_blocks(sm));
    CHECK(ms_sums_n_tensors(sm) == 6, "n_tensors %lld", (long long)ms_sums_n_tensors(sm));
    snprintf(sums, sizeof sums, "%s/moestream.sums", d1);
    CHECK(ms_sums_write(sm, sums, &err) == MS_OK, "write: %s", err.msg);
    struct stat sb;
    CHECK(stat(sums, &sb) == 0 && sb.st_size == MS_SUMS_HEADER_BYTES + 8 * 7 + 8, "sidecar size %lld",
          (long long)sb.st_size);
    ms_sums *ld = NULL;
    CHECK(ms_sums_load(sums, ck, &ld, &err) == MS_OK, "load: %s", err.msg);
    if (!ld) { ms_sums_free(sm); ms_ckpt_close(ck); return; }

    /* every tensor checks whole; sub-ranges of whole blocks too */
    const ms_tensor_info *tb = ms_ckpt_find(ck, "big");
    for (int64_t i = 0; i < ms_ckpt_n_tensors(ck); i++) {
        const ms_tensor_info *t = ms_ckpt_tensor(ck, i);
        if (t->n_bytes == 0) continue;
        uint8_t *bytes = read_range(ms_ckpt_shard(ck, t->shard)->path, t->offset, t->n_bytes);
        ms_err_clear(&err);
        CHECK(bytes && ms_sums_check(ld, t->shard, t->offset, t->n_bytes, bytes, &err) == MS_OK,
              "tensor %s: %s", t->name, err.msg);
        free(bytes);
    }
    /* the four tensors of shard a as one range (how bind.c merges adjacent tensors) */
    const ms_tensor_info *ta0 = ms_ckpt_find(ck, "small.a"), *ta3 = ms_ckpt_find(ck, "small.b");
    int64_t all_n = ta3->offset + ta3->n_bytes - ta0->offset;
    uint8_t *all = read_range(s1, ta0->offset, all_n);
    ms_err_clear(&err);
    CHECK(all && ms_sums_check(ld, ta0->shard, ta0->offset, all_n, all, &err) == MS_OK, "merged range: %s", err.msg);
    const uint8_t *bigb = all + (tb->offset - ta0->offset);
    ms_err_clear(&err);
    CHECK(ms_sums_check(ld, tb->shard, tb->offset + MIB, MIB, bigb + MIB, &err) == MS_OK, "block 1: %s", err.msg);
    ms_err_clear(&err);
    CHECK(ms_sums_check(ld, tb->shard, tb->offset + 2 * MIB, big - 2 * MIB, bigb + 2 * MIB, &err) == MS_OK,
          "short last block: %s", err.msg);
    ms_err_clear(&err);
    CHECK(ms_sums_check(ld, tb->shard, tb->offset + 10, MIB, bigb + 10, &err) == MS_E_INTERNAL,
          "a range starting inside a block is refused (got '%s')", err.msg);
    ms_err_clear(&err);
    CHECK(ms_sums_check(ld, tb->shard, tb->offset, MIB + 5, bigb, &err) == MS_E_INTERNAL,
          "a range ending inside a block is refused (got '%s')", err.msg);
    ms_err_clear(&err);
    CHECK(ms_sums_check(ld, tb->shard, 0, 8, all, &err) == MS_E_INTERNAL, "header bytes are no tensor bytes");
    int64_t c0 = 0, c1 = 0;
    ms_err_clear(&err);
    CHECK(ms_sums_cover(ld, tb->shard, tb->offset + MIB + 5, MIB, &c0, &c1, &err) == MS_OK &&
          c0 == tb->offset + MIB && c1 == tb->offset + big, "cover [%lld, %lld)", (long long)c0, (long long)c1);
    CHECK(ms_sums_cover(ld, tb->shard, ta0->offset + 50, tb->offset - ta0->offset, &c0, &c1, &err) == MS_OK &&
          c0 == ta0->offset && c1 == tb->offset + MIB, "cover across tensors [%lld, %lld)", (long long)c0, (long long)c1);
    CHECK(ms_sums_block_end(ld, tb->shard, tb->offset) == tb->offset + MIB, "block_end of block 0");
    CHECK(ms_sums_block_end(ld, tb->shard, tb->offset + 2 * MIB + 1) == tb->offset + big, "block_end of the short block");
    CHECK(ms_sums_block_end(ld, tb->shard, 3) == -1, "block_end in the header");

    /* one flipped byte in memory: MS_E_IO naming tensor and block */
    all[(tb->offset - ta0->offset) + 2 * MIB + 77] ^= 0x40;
    ms_err_clear(&err);
    ms_status st = ms_sums_check(ld, ta0->shard, ta0->offset, all_n, all, &err);
    char want[256];
    snprintf(want, sizeof want, "bytes [%lld, %lld)", (long long)(tb->offset + 2 * MIB), (long long)(tb->offset + big));
    CHECK(st == MS_E_IO && strstr(err.msg, "a.safetensors") && strstr(err.msg, "'big'") &&
          strstr(err.msg, want) && strstr(err.msg, "checksum mismatch (moestream.sums)"),
          "flipped byte: status %d, message '%s'", st, err.msg);
    free(all);

    /* one flipped byte on disk: compare names that tensor and block only */
    flip_file_byte(s1, tb->offset + MIB + 3);
    bad_seen bs;
    memset(&bs, 0, sizeof bs);
    int64_t nt = -1, nb = -1;
    ms_err_clear(&err);
    CHECK(ms_sums_compare(ld, NULL, on_bad, &bs, &nt, &nb, &err) == MS_OK, "compare: %s", err.msg);
    CHECK(nt == 1 && nb == 1 && bs.n == 1 && !strcmp(bs.name, "big") && bs.begin == tb->offset + MIB &&
          bs.end == tb->offset + 2 * MIB, "compare found %lld tensors %lld blocks (%s [%lld, %lld))",
          (long long)nt, (long long)nb, bs.name, (long long)bs.begin, (long long)bs.end);
    ms_verify_result vr;
    char msg[1024];
    g_n_err_lines = 0;
    st = ms_verify_checkpoint(d1, NULL, 0, log_fn, NULL, MS_LOG_INFO, &vr, msg, sizeof msg);
    CHECK(st == MS_OK && !vr.wrote && vr.n_bad_tensors == 1 && vr.n_bad_blocks == 1 && g_n_err_lines == 1 &&
          strstr(g_last_err, "'big'") && strstr(g_last_err, "a.safetensors") && strstr(g_last_err, "checksum mismatch"),
          "verify with a bad byte: status %d, %lld bad tensors, %d error lines, last '%s'", st,
          (long long)vr.n_bad_tensors, g_n_err_lines, g_last_err);
    flip_file_byte(s1, tb->offset + MIB + 3);
    st = ms_verify_checkpoint(d1, NULL, 0, log_fn, NULL, MS_LOG_INFO, &vr, msg, sizeof msg);
    CHECK(st == MS_OK && vr.n_bad_tensors == 0 && vr.n_blocks == 7, "verify after the repair: %d %lld", st,
          (long long)vr.n_bad_tensors);
    store_checks(ck, ld, s1);

    /* refused sidecars */
    snprintf(bad, sizeof bad, "%s/cut.sums", tmp);
    copy_file(sums, bad, 8, -1);
    ms_sums *x = NULL;
    ms_err_clear(&err);
    CHECK(ms_sums_load(bad, ck, &x, &err) == MS_E_MODEL && strstr(err.msg, "truncated") && strstr(err.msg, "cut.sums"),
          "truncated: '%s'", err.msg);
    ms_sums_free(x);
    copy_file(sums, bad, 0, MS_SUMS_HEADER_BYTES + 8 * 3 + 2);
    x = NULL;
    ms_err_clear(&err);
    CHECK(ms_sums_load(bad, ck, &x, &err) == MS_E_MODEL && strstr(err.msg, "damaged"), "tampered: '%s'", err.msg);
    ms_sums_free(x);
    copy_file(sums, bad, 60, -1);
    x = NULL;
    ms_err_clear(&err);
    CHECK(ms_sums_load(bad, ck, &x, &err) == MS_E_MODEL && strstr(err.msg, "truncated"), "cut to the header: '%s'", err.msg);
    ms_sums_free(x);
    /* another checkpoint: same sizes, one tensor renamed */
    const tdef a2[] = { { "small.a", 100, 0 }, { "big", big, 0 }, { "empty", 0, 0 }, { "small.c", 4096, 0 } };
    char s3[4300], s4[4300], sums2[4300];
    snprintf(s3, sizeof s3, "%s/a.safetensors", d2);
    snprintf(s4, sizeof s4, "%s/b.safetensors", d2);
    write_shard(s3, a2, 4);
    write_shard(s4, b, 2);
    snprintf(sums2, sizeof sums2, "%s/moestream.sums", d2);
    st = ms_verify_checkpoint(d2, NULL, 0, NULL, NULL, MS_LOG_INFO, &vr, msg, sizeof msg);
    CHECK(st == MS_OK && vr.wrote && vr.n_blocks == 7, "verify writes a missing sidecar: %d %s", st, msg);
    x = NULL;
    ms_err_clear(&err);
    CHECK(ms_sums_load(sums2, ck, &x, &err) == MS_E_MODEL && strstr(err.msg, "different checkpoint"),
          "another checkpoint's sidecar: '%s'", err.msg);
    ms_sums_free(x);
    st = ms_verify_checkpoint(d1, sums2, 0, NULL, NULL, MS_LOG_INFO, &vr, msg, sizeof msg);
    CHECK(st == MS_E_MODEL && strstr(msg, "different checkpoint"), "verify --sums OTHER: %d '%s'", st, msg);
    /* a sidecar that cannot be written says where else to put it */
    st = ms_verify_checkpoint(d1, "/nonexistent-dir/x.sums", 1, NULL, NULL, MS_LOG_INFO, &vr, msg, sizeof msg);
    CHECK(st == MS_E_IO && strstr(msg, "--sums"), "unwritable sidecar: %d '%s'", st, msg);
    ms_sums_free(ld);
    ms_sums_free(sm);
    ms_ckpt_close(ck);
}

/* The real layout: build over testdata a, every tensor checks (each is one block here). */
static void real_layout(const char *dir) {
    ms_err err;
    ms_err_clear(&err);
    ms_ckpt *ck = NULL;
    CHECK(ms_ckpt_open(dir, &ck, &err) == MS_OK, "%s", err.msg);
    if (!ck) return;
    ms_sums *sm = NULL;
    CHECK(ms_sums_build(ck, NULL, &sm, &err) == MS_OK, "%s", err.msg);
    int n_ok = 0;
    for (int64_t i = 0; sm && i < ms_ckpt_n_tensors(ck); i++) {
        const ms_tensor_info *t = ms_ckpt_tensor(ck, i);
        if (t->n_bytes == 0) { n_ok++; continue; }
        uint8_t *b = read_range(ms_ckpt_shard(ck, t->shard)->path, t->offset, t->n_bytes);
        n_ok += b && ms_sums_check(sm, t->shard, t->offset, t->n_bytes, b, &err) == MS_OK;
        free(b);
    }
    CHECK(n_ok == ms_ckpt_n_tensors(ck), "%d of %lld tensors check: %s", n_ok, (long long)ms_ckpt_n_tensors(ck), err.msg);
    CHECK(ms_sums_table_hash(ck) != 0, "table hash");
    ms_sums_free(sm);
    ms_ckpt_close(ck);
}

/* Sidecar format 2's metadata entries: hashed by ms_sums_hash_meta, checked
 * by ms_sums_check_meta (an edit, a new file, a removed file), and a sidecar
 * of format 1 (no entries) that loads with a warning. */
/* Format 3 covers tokenizer.json (gpt-oss's tokenizer): an edit is found. The
 * same sidecar as format 2 (without its entry) loads, and leaves the file
 * unverified with a warning, not an error. */
static int g_n_warn_lines;
static void warn_fn(void *u, ms_log_level lv, const char *line) {
    if (lv == MS_LOG_WARN && strstr(line, "does not cover tokenizer.json")) g_n_warn_lines++;
    if (lv == MS_LOG_ERROR) g_n_err_lines++;
}

static void tokenizer_json(const char *d, const ms_ckpt *ck) {
    char tj[4300], sums[4300], v2[4300];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", d);
    snprintf(sums, sizeof sums, "%s/moestream.sums", d);
    FILE *f = fopen(tj, "w");
    if (f) { fputs("{\"model\": {\"type\": \"BPE\"}}\n", f); fclose(f); }
    ms_err err;
    ms_err_clear(&err);
    ms_sums *sm = NULL, *ld = NULL, *old = NULL;
    CHECK(ms_sums_build(ck, NULL, &sm, &err) == MS_OK && ms_sums_hash_meta(sm, d, &err) == MS_OK &&
          ms_sums_write(sm, sums, &err) == MS_OK && ms_sums_load(sums, ck, &ld, &err) == MS_OK, "%s", err.msg);
    CHECK(ld && ms_sums_check_meta(ld, d, NULL, NULL, &err) == MS_OK, "tokenizer.json unchanged: %s", err.msg);
    f = fopen(tj, "w");
    if (f) { fputs("{\"model\": {\"type\": \"WordPiece\"}}\n", f); fclose(f); }
    ms_err_clear(&err);
    CHECK(ld && ms_sums_check_meta(ld, d, NULL, NULL, &err) == MS_E_MODEL &&
          strstr(err.msg, "tokenizer.json: checksum mismatch"), "edited tokenizer.json: '%s'", err.msg);
    /* format 2: the entries but the last */
    FILE *in = fopen(sums, "rb");
    uint8_t img[4096];
    const size_t n = in ? fread(img, 1, sizeof img, in) : 0;
    if (in) fclose(in);
    CHECK(n > (size_t)MS_SUMS_HEADER_BYTES, "sidecar of %zu bytes", n);
    if (n > (size_t)MS_SUMS_HEADER_BYTES) {
        memmove(img + MS_SUMS_HEADER_BYTES - 16, img + MS_SUMS_HEADER_BYTES, n - MS_SUMS_HEADER_BYTES);
        const size_t n2 = n - 16;
        img[8] = 2;
        const uint64_t h = XXH3_64bits(img, n2 - 8);
        for (int i = 0; i < 8; i++) img[n2 - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
        snprintf(v2, sizeof v2, "%s/v2.sums", d);
        FILE *out = fopen(v2, "wb");
        if (out) { fwrite(img, 1, n2, out); fclose(out); }
        ms_err_clear(&err);
        CHECK(ms_sums_load(v2, ck, &old, &err) == MS_OK, "format 2: %s", err.msg);
        const ms_logger lg = { warn_fn, NULL, MS_LOG_DEBUG };
        int n_bad = -1;
        g_n_err_lines = g_n_warn_lines = 0;
        CHECK(old && ms_sums_content_hash(old) == ms_sums_content_hash(ld), "format 2: other block hashes");
        CHECK(old && ms_sums_check_meta(old, d, &lg, &n_bad, &err) == MS_OK && n_bad == 0 && g_n_err_lines == 0 &&
              g_n_warn_lines == 1, "format 2 with tokenizer.json: n_bad %d, %d errors, %d warnings", n_bad,
              g_n_err_lines, g_n_warn_lines);
    }
    remove(tj);
    ms_sums_free(old);
    ms_sums_free(ld);
    ms_sums_free(sm);
}

static void meta_files(const char *tmp) {
    char d[4200], shard[4300], cfg[4300], tok[4300], sums[4300], v1[4300];
    snprintf(d, sizeof d, "%s/meta", tmp);
    mkdir(d, 0755);
    snprintf(shard, sizeof shard, "%s/a.safetensors", d);
    const tdef a[] = { { "x", 3000, 0 }, { "y", 10, 0 } };
    write_shard(shard, a, 2);
    snprintf(cfg, sizeof cfg, "%s/config.json", d);
    snprintf(tok, sizeof tok, "%s/tiktoken.model", d);
    FILE *f = fopen(cfg, "w");
    if (f) { fputs("{\"rms_norm_eps\": 1e-05}\n", f); fclose(f); }
    ms_err err;
    ms_err_clear(&err);
    ms_ckpt *ck = NULL;
    CHECK(ms_ckpt_open(d, &ck, &err) == MS_OK, "%s", err.msg);
    if (!ck) return;
    ms_sums *sm = NULL, *ld = NULL;
    CHECK(ms_sums_build(ck, NULL, &sm, &err) == MS_OK, "build: %s", err.msg);
    CHECK(sm && ms_sums_hash_meta(sm, d, &err) == MS_OK, "hash_meta: %s", err.msg);
    snprintf(sums, sizeof sums, "%s/moestream.sums", d);
    CHECK(sm && ms_sums_write(sm, sums, &err) == MS_OK, "write: %s", err.msg);
    CHECK(ms_sums_load(sums, ck, &ld, &err) == MS_OK, "load: %s", err.msg);
    if (!sm || !ld) { ms_sums_free(sm); ms_ckpt_close(ck); return; }
    int n_bad = -1;
    CHECK(ms_sums_check_meta(ld, d, NULL, NULL, &err) == MS_OK, "unchanged: %s", err.msg);
    f = fopen(cfg, "w");
    if (f) { fputs("{\"rms_norm_eps\": 2e-05}\n", f); fclose(f); }
    CHECK(ms_sums_check_meta(ld, d, NULL, NULL, &err) == MS_E_MODEL && strstr(err.msg, "config.json: checksum mismatch"),
          "edited config: '%s'", err.msg);
    f = fopen(tok, "w");
    if (f) { fputs("QQ== 0\n", f); fclose(f); }
    const ms_logger lg = { log_fn, NULL, MS_LOG_DEBUG };
    g_n_err_lines = 0;
    CHECK(ms_sums_check_meta(ld, d, &lg, &n_bad, &err) == MS_OK && n_bad == 2 && g_n_err_lines == 2,
          "two files differ: n_bad %d, %d lines", n_bad, g_n_err_lines);
    CHECK(strstr(g_last_err, "tiktoken.model: not covered"), "new file: '%s'", g_last_err);
    CHECK(remove(tok) == 0 && remove(cfg) == 0, "remove");
    ms_err_clear(&err);
    CHECK(ms_sums_check_meta(ld, d, NULL, NULL, &err) == MS_E_MODEL && strstr(err.msg, "config.json: missing"),
          "removed config: '%s'", err.msg);
    /* format 1: the same sidecar without the entries */
    FILE *in = fopen(sums, "rb");
    uint8_t img[4096];
    const size_t n = in ? fread(img, 1, sizeof img, in) : 0;
    if (in) fclose(in);
    CHECK(n == (size_t)MS_SUMS_HEADER_BYTES + 8 * 2 + 8, "sidecar of %zu bytes", n);
    memmove(img + 48, img + MS_SUMS_HEADER_BYTES, n - MS_SUMS_HEADER_BYTES);
    const size_t n1 = n - (MS_SUMS_HEADER_BYTES - 48);
    img[8] = 1;
    const uint64_t h = XXH3_64bits(img, n1 - 8);
    for (int i = 0; i < 8; i++) img[n1 - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
    snprintf(v1, sizeof v1, "%s/v1.sums", d);
    FILE *out = fopen(v1, "wb");
    if (out) { fwrite(img, 1, n1, out); fclose(out); }
    ms_sums *old = NULL;
    CHECK(ms_sums_load(v1, ck, &old, &err) == MS_OK, "format 1: %s", err.msg);
    g_n_err_lines = 0;
    if (old) {
        CHECK(ms_sums_content_hash(old) == ms_sums_content_hash(ld), "format 1: other block hashes");
        CHECK(ms_sums_check_meta(old, d, &lg, &n_bad, &err) == MS_OK && n_bad == 0 && g_n_err_lines == 0,
              "format 1 check (a warning only): n_bad %d, %d error lines", n_bad, g_n_err_lines);
    }
    ms_sums_free(old);
    ms_sums_free(ld);
    ms_sums_free(sm);
    tokenizer_json(d, ck);
    ms_ckpt_close(ck);
}

/* A tensor fusing a layer's experts along its first dimension (gpt-oss's
 * mlp.experts.*_blocks / _scales / _bias) is hashed per expert slice, so one
 * expert's slice is a range of whole blocks; any other tensor is hashed from
 * its start. Slices of 1.5 MiB: two blocks each (1 MiB and 0.5 MiB). */
static void fused_units(const char *tmp) {
    char d[4200], s1[4300];
    snprintf(d, sizeof d, "%s/fused", tmp);
    mkdir(d, 0755);
    const int64_t slice = 3 * MIB / 2;
    const tdef t[] = { { "model.layers.0.mlp.experts.gate_up_proj_blocks", 3 * slice, 3 },
                       { "model.layers.0.mlp.router.weight", 3 * slice, 3 } };
    snprintf(s1, sizeof s1, "%s/model.safetensors", d);
    write_shard(s1, t, 2);
    ms_err err;
    ms_err_clear(&err);
    ms_ckpt *ck = NULL;
    ms_sums *sm = NULL;
    CHECK(ms_ckpt_open(d, &ck, &err) == MS_OK, "%s", err.msg);
    if (!ck) return;
    CHECK(ms_sums_build(ck, NULL, &sm, &err) == MS_OK, "build: %s", err.msg);
    if (!sm) { ms_ckpt_close(ck); return; }
    CHECK(ms_sums_n_blocks(sm) == 3 * 2 + 5, "n_blocks %lld, want 11 (3 slices x 2, then 5)",
          (long long)ms_sums_n_blocks(sm));
    const ms_tensor_info *fu = ms_ckpt_find(ck, t[0].name), *ro = ms_ckpt_find(ck, t[1].name);
    int64_t c0 = 0, c1 = 0;
    ms_err_clear(&err);
    CHECK(ms_sums_cover(sm, fu->shard, fu->offset + slice, slice, &c0, &c1, &err) == MS_OK &&
          c0 == fu->offset + slice && c1 == fu->offset + 2 * slice, "a fused slice is whole blocks: [%lld, %lld)",
          (long long)(c0 - fu->offset), (long long)(c1 - fu->offset));
    ms_err_clear(&err);
    CHECK(ms_sums_cover(sm, ro->shard, ro->offset + slice, slice, &c0, &c1, &err) == MS_OK &&
          c0 == ro->offset + MIB && c1 == ro->offset + 3 * MIB, "another tensor's blocks run from its start: [%lld, %lld)",
          (long long)(c0 - ro->offset), (long long)(c1 - ro->offset));
    uint8_t *b = read_range(s1, fu->offset + slice, slice);
    ms_err_clear(&err);
    CHECK(b && ms_sums_check(sm, fu->shard, fu->offset + slice, slice, b, &err) == MS_OK, "slice 1: %s", err.msg);
    ms_err_clear(&err);
    CHECK(b && ms_sums_check(sm, fu->shard, fu->offset + slice + MIB, slice - MIB, b + MIB, &err) == MS_OK,
          "slice 1's short block: %s", err.msg);
    ms_err_clear(&err);
    CHECK(b && ms_sums_check(sm, fu->shard, fu->offset + slice, MIB + 5, b, &err) == MS_E_INTERNAL,
          "a range ending inside a slice's block is refused (got '%s')", err.msg);
    if (b) b[slice - 1] ^= 1;
    ms_err_clear(&err);
    CHECK(b && ms_sums_check(sm, fu->shard, fu->offset + slice, slice, b, &err) == MS_E_IO && strstr(err.msg, t[0].name),
          "a changed byte of slice 1 is found: '%s'", err.msg);
    free(b);
    /* compare names slice 2's second block */
    flip_file_byte(s1, fu->offset + 2 * slice + MIB + 9);
    bad_seen seen = { 0 };
    int64_t nt = 0, nb = 0;
    ms_err_clear(&err);
    CHECK(ms_sums_compare(sm, NULL, on_bad, &seen, &nt, &nb, &err) == MS_OK && nt == 1 && nb == 1 &&
          seen.begin == fu->offset + 2 * slice + MIB && seen.end == fu->offset + 3 * slice,
          "compare: %lld tensors %lld blocks, [%lld, %lld)", (long long)nt, (long long)nb,
          (long long)(seen.begin - fu->offset), (long long)(seen.end - fu->offset));
    ms_sums_free(sm);
    ms_ckpt_close(ck);
}

int main(void) {
    char tmp[] = "/tmp/ms_test_sums_XXXXXX";
    if (!mkdtemp(tmp)) { CHECK(0, "mkdtemp"); return CHECK_DONE("test_sums"); }
    generated(tmp);
    fused_units(tmp);
    meta_files(tmp);
    const char *td = getenv("MS_TESTDATA");
    if (td) {
        char path[4200];
        snprintf(path, sizeof path, "%s/a", td);
        real_layout(path);
    }
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmp);
    return CHECK_DONE("test_sums");
}
