/* format/sums.c - the checksum sidecar (format and contract in sums.h).
 *
 * Lookup: per shard, the non-empty tensors sorted by offset (the table order
 * already is (shard, offset), but that is the parser's choice, so it is
 * re-sorted here); a byte is found by binary search. first[i] is the index of
 * tensor i's first block in the hash array.
 * Hashing reads the tensors in table order through the I/O layer (O_DIRECT,
 * several reads in flight) into two 64 MiB windows, and hashes one window
 * while the next is read.
 */
#include "format/sums.h"

#include "base/bufalloc.h"
#include "base/clock.h"
#include "base/file.h"
#include "base/progress.h"
#include "base/io.h"
#include "format/le.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define B MS_SUMS_BLOCK_BYTES
#define WIN_BYTES ((int64_t)64 << 20)    /* one read window (two are in use) */
#define WIN_PIECES 4096                  /* requests per window, at most */
#define SUMS_VERSION 3u
#define SUMS_V1_HEADER_BYTES 48          /* format 1: no metadata entries */
#define SUMS_V2_N_META 4                 /* format 2: no tokenizer.json entry */
#define META_ABSENT UINT64_MAX           /* a metadata entry's size when the file was absent */
#define META_CHUNK 65536
#define PROGRESS_NS ((int64_t)5000000000)

static const uint8_t MAGIC[8] = { 'M', 'S', 'S', 'U', 'M', 'S', 0, 1 };

struct ms_sums {
    const ms_ckpt *ck;
    int64_t n_tensors, n_blocks;
    int64_t *first;             /* [n_tensors + 1] first block of tensor i */
    int64_t *unit;              /* [n_tensors] bytes of tensor i's units (sums_unit) */
    uint64_t *hash;             /* [n_blocks] */
    uint64_t table_hash;
    int n_shards;
    int64_t **by_off;           /* [shard] non-empty tensor indices sorted by offset */
    int64_t *n_by_off;          /* [shard] */
    int version;                /* of the file it was loaded from (SUMS_VERSION when built) */
    int n_meta;                 /* metadata entries that format records (MS_SUMS_N_META when built) */
    uint64_t meta[MS_SUMS_N_META][2];   /* size (META_ABSENT) and XXH3-64 of each metadata file */
};

const char *const ms_sums_meta_files[MS_SUMS_N_META] = {
    "config.json", "model.safetensors.index.json", "tiktoken.model", "tokenizer_config.json", "tokenizer.json"
};
/* Each file's reader's own limit (docs/SECURITY.md, "Limits on metadata
 * files"): a larger file is refused here as its reader would, before it is
 * hashed. */
static const int64_t META_MAX[MS_SUMS_N_META] = {
    (int64_t)16 << 20, (int64_t)512 << 20, (int64_t)64 << 20, (int64_t)16 << 20, (int64_t)128 << 20
};


static int64_t n_blocks_of(int64_t n_bytes) { return (n_bytes + B - 1) / B; }

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* The bytes of a tensor's units: blocks are counted from each unit's start.
 * A unit is the whole tensor, except in a tensor that fuses a layer's
 * experts along its first dimension (gpt-oss: model.layers.N.mlp.experts.
 * *_blocks / *_scales / *_bias), where it is one expert's slice, so a read of
 * one expert is made of whole blocks and can be checked as it lands. */
static int64_t sums_unit(const ms_tensor_info *t) {
    const int fused = t->n_dim >= 2 && t->shape[0] > 1 && strstr(t->name, ".mlp.experts.") &&
                      (ends_with(t->name, "_blocks") || ends_with(t->name, "_scales") || ends_with(t->name, "_bias"));
    if (!fused || t->n_bytes % t->shape[0] != 0) return t->n_bytes > 0 ? t->n_bytes : 1;
    return t->n_bytes / t->shape[0];
}

static int64_t tensor_blocks(const ms_tensor_info *t, int64_t unit) {
    return t->n_bytes <= 0 ? 0 : (t->n_bytes / unit) * n_blocks_of(unit) + n_blocks_of(t->n_bytes % unit);
}

/* Tensor i's block holding its byte p: the block's index in hash[], and its
 * [*b0, *b1) in tensor bytes. */
static int64_t block_at(const ms_sums *s, int64_t i, int64_t p, int64_t *b0, int64_t *b1) {
    const int64_t U = s->unit[i], u = p / U, k = (p % U) / B, n = ms_ckpt_tensor(s->ck, i)->n_bytes;
    *b0 = u * U + k * B;
    *b1 = *b0 + B;
    if (*b1 > (u + 1) * U) *b1 = (u + 1) * U;
    if (*b1 > n) *b1 = n;
    return s->first[i] + u * n_blocks_of(U) + k;
}

uint64_t ms_sums_table_hash(const ms_ckpt *ck) {
    XXH3_state_t *x = XXH3_createState();
    MS_ASSERT(x != NULL);
    XXH3_64bits_reset(x);
    uint8_t w[8];
    const int ns = ms_ckpt_n_shards(ck);
    ms_put64(w, (uint64_t)ns);
    XXH3_64bits_update(x, w, 8);
    for (int i = 0; i < ns; i++) {
        const char *f = ms_ckpt_shard(ck, i)->file;
        XXH3_64bits_update(x, f, strlen(f) + 1);
    }
    const int64_t n = ms_ckpt_n_tensors(ck);
    ms_put64(w, (uint64_t)n);
    XXH3_64bits_update(x, w, 8);
    for (int64_t i = 0; i < n; i++) {
        const ms_tensor_info *t = ms_ckpt_tensor(ck, i);
        XXH3_64bits_update(x, t->name, strlen(t->name) + 1);
        uint64_t v[4 + MS_MAX_DIMS];
        int k = 0;
        v[k++] = (uint64_t)t->dtype;
        v[k++] = (uint64_t)t->n_dim;
        for (int d = 0; d < t->n_dim; d++) v[k++] = (uint64_t)t->shape[d];
        v[k++] = (uint64_t)t->shard;
        for (int j = 0; j < k; j++) { ms_put64(w, v[j]); XXH3_64bits_update(x, w, 8); }
        ms_put64(w, (uint64_t)t->offset); XXH3_64bits_update(x, w, 8);
        ms_put64(w, (uint64_t)t->n_bytes); XXH3_64bits_update(x, w, 8);
    }
    uint64_t h = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    return h;
}

void ms_sums_free(ms_sums *s) {
    if (!s) return;
    for (int i = 0; i < s->n_shards; i++) free(s->by_off ? s->by_off[i] : NULL);
    free(s->by_off);
    free(s->n_by_off);
    free(s->first);
    free(s->unit);
    free(s->hash);
    free(s);
}

int64_t ms_sums_n_blocks(const ms_sums *s) { return s->n_blocks; }
int64_t ms_sums_n_tensors(const ms_sums *s) { return s->n_tensors; }

static int cmp_off(const void *a, const void *b, void *ck) {
    const ms_tensor_info *x = ms_ckpt_tensor(ck, *(const int64_t *)a);
    const ms_tensor_info *y = ms_ckpt_tensor(ck, *(const int64_t *)b);
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* A sidecar skeleton for ck: counts, block index, lookup tables, zeroed hashes. */
static ms_status skeleton(const ms_ckpt *ck, ms_sums **out, ms_err *err) {
    *out = NULL;
    ms_sums *s = calloc(1, sizeof *s);
    if (!s) return ms_err_set(err, MS_E_NOMEM, "sums: out of memory");
    s->ck = ck;
    s->n_tensors = ms_ckpt_n_tensors(ck);
    s->n_shards = ms_ckpt_n_shards(ck);
    s->first = malloc(((size_t)s->n_tensors + 1) * sizeof *s->first);
    s->unit = malloc(((size_t)s->n_tensors + 1) * sizeof *s->unit);
    s->by_off = calloc((size_t)s->n_shards + 1, sizeof *s->by_off);
    s->n_by_off = calloc((size_t)s->n_shards + 1, sizeof *s->n_by_off);
    if (!s->first || !s->unit || !s->by_off || !s->n_by_off) goto nomem;
    int64_t nb = 0;
    for (int64_t i = 0; i < s->n_tensors; i++) {
        const ms_tensor_info *t = ms_ckpt_tensor(ck, i);
        s->first[i] = nb;
        s->unit[i] = sums_unit(t);
        nb += tensor_blocks(t, s->unit[i]);
        if (t->n_bytes > 0) s->n_by_off[t->shard]++;
    }
    s->first[s->n_tensors] = nb;
    s->n_blocks = nb;
    s->hash = calloc((size_t)nb + 1, sizeof *s->hash);
    if (!s->hash) goto nomem;
    for (int i = 0; i < s->n_shards; i++) {
        s->by_off[i] = malloc(((size_t)s->n_by_off[i] + 1) * sizeof **s->by_off);
        if (!s->by_off[i]) goto nomem;
        s->n_by_off[i] = 0;
    }
    for (int64_t i = 0; i < s->n_tensors; i++) {
        const ms_tensor_info *t = ms_ckpt_tensor(ck, i);
        if (t->n_bytes > 0) s->by_off[t->shard][s->n_by_off[t->shard]++] = i;
    }
    for (int i = 0; i < s->n_shards; i++)
        qsort_r(s->by_off[i], (size_t)s->n_by_off[i], sizeof **s->by_off, cmp_off, (void *)ck);
    s->table_hash = ms_sums_table_hash(ck);
    s->version = SUMS_VERSION;
    s->n_meta = MS_SUMS_N_META;
    for (int k = 0; k < MS_SUMS_N_META; k++) s->meta[k][0] = META_ABSENT, s->meta[k][1] = 0;
    *out = s;
    return MS_OK;
nomem:
    ms_sums_free(s);
    return ms_err_set(err, MS_E_NOMEM, "sums: out of memory");
}

/* One window of reads: pieces of tensors (whole checksum blocks from a
 * tensor's start, but for its last), each at a 4096-aligned place in buf. */
typedef struct window {
    uint8_t *buf;
    int n;                      /* pieces */
    int64_t used;               /* bytes of buf taken */
    int64_t bytes;              /* data bytes */
    ms_io_req *req;             /* [WIN_PIECES] */
    int64_t *blk;               /* [WIN_PIECES] index of the piece's first block in hash[] */
    uint64_t ticket;
} window;

/* Fill w with the next pieces, from tensor *i at byte *at of it. */
static void window_fill(const ms_sums *s, const int *file, window *w, int64_t *i, int64_t *at) {
    w->n = 0;
    w->used = w->bytes = 0;
    while (*i < s->n_tensors && w->n < WIN_PIECES) {
        const ms_tensor_info *t = ms_ckpt_tensor(s->ck, *i);
        if (t->n_bytes - *at <= 0) { (*i)++; *at = 0; continue; }
        /* a piece stays inside one unit: its blocks are consecutive in hash[] */
        const int64_t U = s->unit[*i], unit_end = (*at / U + 1) * U;
        const int64_t left = (unit_end < t->n_bytes ? unit_end : t->n_bytes) - *at;
        const int64_t off = t->offset + *at, room = WIN_BYTES - w->used;
        /* as many whole blocks as fit (all that is left when it fits) */
        int64_t take = left;
        if (ms_io_span(off, take) > room) {
            take = (room - 2 * MS_IO_ALIGN) / B * B;
            if (take <= 0) break;
        }
        w->req[w->n] = (ms_io_req){ file[t->shard], off, take, w->buf + w->used, 0 };
        int64_t b0, b1;
        w->blk[w->n] = block_at(s, *i, *at, &b0, &b1);
        w->n++;
        w->used += ms_io_span(off, take);
        w->bytes += take;
        *at += take;
    }
}

/* Hash every tensor of s->ck into hash[] (n_blocks entries): O_DIRECT reads
 * through the I/O layer (queue depth 4, 2 MiB pieces, no copy into the page
 * cache) into two windows, one hashed while the other is read. */
static ms_status hash_all(const ms_sums *s, const ms_logger *log, uint64_t *hash, ms_err *err) {
    int64_t total = 0, done = 0;
    for (int64_t i = 0; i < s->n_tensors; i++) total += ms_ckpt_tensor(s->ck, i)->n_bytes;
    const int n_shards = ms_ckpt_n_shards(s->ck);
    int *file = calloc((size_t)n_shards + 1, sizeof *file);
    window w[2];
    memset(w, 0, sizeof w);
    ms_io *io = NULL;
    ms_io_params p = ms_io_default_params();
    ms_status st = file ? ms_io_open(&p, &io, err) : ms_err_set(err, MS_E_NOMEM, "sums: out of memory");
    for (int k = 0; k < n_shards && st == MS_OK; k++)
        st = ms_io_add_file(io, ms_ckpt_shard(s->ck, k)->path, &file[k], err);
    for (int k = 0; k < 2 && st == MS_OK; k++) {
        w[k].buf = ms_buf_alloc(WIN_BYTES, 1);
        w[k].req = malloc(WIN_PIECES * sizeof *w[k].req);
        w[k].blk = malloc(WIN_PIECES * sizeof *w[k].blk);
        if (!w[k].buf || !w[k].req || !w[k].blk) st = ms_err_set(err, MS_E_NOMEM, "sums: out of memory");
    }
    const int64_t t0 = ms_now_ns();
    int64_t last = t0, i = 0, at = 0;
    ms_progress_step ps;
    ms_progress_begin(&ps, "verify", total, 0);
    int cur = 0, pending = 0;   /* w[cur] is in flight when pending (never on leaving the loop) */
    if (st == MS_OK) {
        window_fill(s, file, &w[cur], &i, &at);
        if (w[cur].n > 0 && (st = ms_io_submit(io, w[cur].req, w[cur].n, &w[cur].ticket, err)) == MS_OK) pending = 1;
    }
    while (st == MS_OK && pending) {
        window *a = &w[cur], *b = &w[cur ^ 1];
        window_fill(s, file, b, &i, &at);   /* the next window reads while this one is hashed */
        st = ms_io_wait(io, a->ticket, err);
        pending = 0;
        if (st == MS_OK && b->n > 0) {
            if ((st = ms_io_submit(io, b->req, b->n, &b->ticket, err)) != MS_OK) break;
            pending = 1;
        }
        for (int k = 0; k < a->n; k++) {
            const uint8_t *d = a->req[k].buf + ms_io_skew(a->req[k].offset);
            const int64_t n = a->req[k].n_bytes;
            int64_t blk = a->blk[k];
            for (int64_t q = 0; q < n; q += B) hash[blk++] = XXH3_64bits(d + q, (size_t)(n - q < B ? n - q : B));
        }
        done += a->bytes;
        const int64_t now = ms_now_ns();
        ms_progress_report(&ps, done, 0, done);
        if (!ms_progress_on() && now - last >= PROGRESS_NS) {
            last = now;
            double sec = 1e-9 * (double)(now - t0);
            ms_log(log, MS_LOG_INFO, "sums: hashed %.1f of %.1f GB (%.0f%%), %.0f MB/s",
                   (double)done / 1e9, (double)total / 1e9, 100.0 * (double)done / (double)total,
                   (double)done / 1e6 / sec);
        }
        cur ^= 1;
    }
    ms_io_close(io);
    for (int k = 0; k < 2; k++) {
        ms_buf_free(w[k].buf, WIN_BYTES, 1);
        free(w[k].req);
        free(w[k].blk);
    }
    free(file);
    return st;
}

ms_status ms_sums_build(const ms_ckpt *ck, const ms_logger *log, ms_sums **out, ms_err *err) {
    ms_status st = skeleton(ck, out, err);
    if (st != MS_OK) return st;
    if ((st = hash_all(*out, log, (*out)->hash, err)) != MS_OK) {
        ms_sums_free(*out);
        *out = NULL;
    }
    return st;
}

ms_status ms_sums_write(const ms_sums *s, const char *path, ms_err *err) {
    const size_t n = (size_t)MS_SUMS_HEADER_BYTES + 8 * (size_t)s->n_blocks + 8;
    uint8_t *img = malloc(n);
    if (!img) return ms_err_set(err, MS_E_NOMEM, "sums: out of memory");
    memcpy(img, MAGIC, 8);
    ms_put32(img + 8, SUMS_VERSION);
    ms_put32(img + 12, 0);
    ms_put64(img + 16, (uint64_t)B);
    ms_put64(img + 24, s->table_hash);
    ms_put64(img + 32, (uint64_t)s->n_tensors);
    ms_put64(img + 40, (uint64_t)s->n_blocks);
    for (int k = 0; k < MS_SUMS_N_META; k++) {
        ms_put64(img + SUMS_V1_HEADER_BYTES + 16 * k, s->meta[k][0]);
        ms_put64(img + SUMS_V1_HEADER_BYTES + 16 * k + 8, s->meta[k][1]);
    }
    for (int64_t i = 0; i < s->n_blocks; i++) ms_put64(img + MS_SUMS_HEADER_BYTES + 8 * i, s->hash[i]);
    ms_put64(img + n - 8, XXH3_64bits(img, n - 8));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    ms_status st = MS_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = ms_err_set(err, MS_E_IO, "cannot write %s: %s", path, strerror(errno));
    } else {
        for (size_t done = 0; done < n && st == MS_OK;) {
            ssize_t w = write(fd, img + done, n - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) st = ms_err_set(err, MS_E_IO, "cannot write %s: %s", tmp, strerror(errno));
            else done += (size_t)w;
        }
        if (st == MS_OK && fsync(fd) != 0) st = ms_err_set(err, MS_E_IO, "cannot write %s: %s", tmp, strerror(errno));
        if (close(fd) != 0 && st == MS_OK) st = ms_err_set(err, MS_E_IO, "cannot write %s: %s", tmp, strerror(errno));
        if (st == MS_OK && rename(tmp, path) != 0) st = ms_err_set(err, MS_E_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (st != MS_OK) unlink(tmp);
    }
    free(img);
    return st;
}

/* Metadata entries of a sidecar of format `version`, and its header bytes
 * (0: a version this build does not read). */
static int meta_entries(uint32_t version) {
    return version == 1 ? 0 : version == 2 ? SUMS_V2_N_META : MS_SUMS_N_META;
}

static int64_t header_bytes(uint32_t version) {
    return version >= 1 && version <= SUMS_VERSION ? SUMS_V1_HEADER_BYTES + 16 * meta_entries(version) : 0;
}

/* The checks of a sidecar image: img holds the file's first n_img bytes (the
 * whole file when size == want, else just its first 48 bytes, which are
 * enough to say why it does not belong here). */
static ms_status check_image(const char *path, const ms_sums *s, const uint8_t *img, int64_t size,
                             int64_t want, ms_err *err) {
#define BAD(...) return ms_err_set(err, MS_E_MODEL, __VA_ARGS__)
    if (memcmp(img, MAGIC, 8) != 0) BAD("%s: not a moestream.sums file (bad magic)", path);
    const int64_t hb = header_bytes(ms_get32(img + 8));
    if (!hb) BAD("%s: version %u, expected 1 to %u", path, ms_get32(img + 8), SUMS_VERSION);
    const uint64_t n_blocks = ms_get64(img + 40);
    const int64_t size_says = n_blocks > ((uint64_t)1 << 37) ? -1 : hb + 8 * (int64_t)n_blocks + 8;
    if (size_says != size)
        BAD("%s: truncated or damaged: %lld bytes, its header says %lld; rebuild it with 'moestream verify MODEL_DIR --write'",
            path, (long long)size, (long long)size_says);
    if (size == want) {
        const uint64_t tail = ms_get64(img + size - 8), calc = XXH3_64bits(img, (size_t)size - 8);
        if (tail != calc)
            BAD("%s: damaged: its trailing checksum is %016llx, its contents hash to %016llx; rebuild it with 'moestream verify MODEL_DIR --write'",
                path, (unsigned long long)tail, (unsigned long long)calc);
    }
    if (ms_get64(img + 16) != (uint64_t)B)
        BAD("%s: block size %llu, expected %lld", path, (unsigned long long)ms_get64(img + 16), (long long)B);
    if (ms_get64(img + 24) != s->table_hash || ms_get64(img + 32) != (uint64_t)s->n_tensors || size_says != want)
        BAD("%s: belongs to a different checkpoint (tensor table hash %016llx, %llu tensors; this checkpoint: %016llx, %lld tensors); "
            "rebuild it with 'moestream verify MODEL_DIR --write' or run with --no-verify",
            path, (unsigned long long)ms_get64(img + 24), (unsigned long long)ms_get64(img + 32),
            (unsigned long long)s->table_hash, (long long)s->n_tensors);
#undef BAD
    return MS_OK;
}

/* Reads at most the size this checkpoint's sidecar has (`want`): a file of
 * another size is judged by its header alone, so a huge or endless file costs
 * nothing (docs/SECURITY.md, "Limits on metadata files"). Format 1 (no
 * metadata entries) loads; ms_sums_check_meta then warns. */
ms_status ms_sums_load(const char *path, const ms_ckpt *ck, ms_sums **out, ms_err *err) {
    *out = NULL;
    ms_sums *s = NULL;
    ms_status st = skeleton(ck, &s, err);
    if (st != MS_OK) return st;
    int fd;
    int64_t size, hb = 0;
    uint8_t *img = NULL, head[SUMS_V1_HEADER_BYTES];
    if ((st = ms_file_open(path, INT64_MAX, &fd, &size, err)) != MS_OK) goto done;
    if (size < SUMS_V1_HEADER_BYTES + 8) {
        st = ms_err_set(err, MS_E_MODEL, "%s: truncated: %lld bytes, a sidecar has at least %d; rebuild it with 'moestream verify MODEL_DIR --write'",
                        path, (long long)size, SUMS_V1_HEADER_BYTES + 8);
    } else if ((st = ms_file_pread_full(fd, head, sizeof head, 0, path, err)) == MS_OK) {
        hb = header_bytes(ms_get32(head + 8));
        const int64_t want = (hb ? hb : MS_SUMS_HEADER_BYTES) + 8 * s->n_blocks + 8;
        const int64_t n_img = size == want ? size : SUMS_V1_HEADER_BYTES;
        img = malloc((size_t)n_img);
        if (!img) st = ms_err_set(err, MS_E_NOMEM, "sums: out of memory");
        else st = ms_file_pread_full(fd, img, (size_t)n_img, 0, path, err);
        if (st == MS_OK) st = check_image(path, s, img, size, want, err);
    }
    close(fd);
    if (st == MS_OK) {
        s->version = (int)ms_get32(img + 8);
        s->n_meta = meta_entries((uint32_t)s->version);
        for (int k = 0; k < s->n_meta; k++) {
            s->meta[k][0] = ms_get64(img + SUMS_V1_HEADER_BYTES + 16 * k);
            s->meta[k][1] = ms_get64(img + SUMS_V1_HEADER_BYTES + 16 * k + 8);
        }
        for (int64_t i = 0; i < s->n_blocks; i++) s->hash[i] = ms_get64(img + hb + 8 * i);
    }
done:
    free(img);
    if (st != MS_OK) { ms_sums_free(s); return st; }
    *out = s;
    return MS_OK;
}

/* Size and XXH3-64 of model_dir/name, read in 64 KiB pieces (nothing is
 * kept): *size = META_ABSENT when there is no such file. */
static ms_status hash_meta(const char *model_dir, int k, uint64_t *size, uint64_t *hash, ms_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", model_dir, ms_sums_meta_files[k]);
    *size = META_ABSENT;
    *hash = 0;
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) return MS_OK;
    int fd;
    int64_t n;
    ms_status st = ms_file_open(path, META_MAX[k], &fd, &n, err);
    if (st != MS_OK) return st;
    XXH3_state_t *x = XXH3_createState();
    uint8_t *buf = malloc(META_CHUNK);
    if (!x || !buf) st = ms_err_set(err, MS_E_NOMEM, "sums: out of memory");
    if (x) XXH3_64bits_reset(x);
    for (int64_t at = 0; at < n && st == MS_OK; at += META_CHUNK) {
        const size_t k = (size_t)(n - at < META_CHUNK ? n - at : META_CHUNK);
        if ((st = ms_file_pread_full(fd, buf, k, at, path, err)) == MS_OK) XXH3_64bits_update(x, buf, k);
    }
    close(fd);
    if (st == MS_OK) { *size = (uint64_t)n; *hash = XXH3_64bits_digest(x); }
    if (x) XXH3_freeState(x);
    free(buf);
    return st;
}

ms_status ms_sums_hash_meta(ms_sums *s, const char *model_dir, ms_err *err) {
    for (int k = 0; k < MS_SUMS_N_META; k++) {
        const ms_status st = hash_meta(model_dir, k, &s->meta[k][0], &s->meta[k][1], err);
        if (st != MS_OK) return st;
    }
    return MS_OK;
}

/* Why model_dir/name (index k) differs from the sidecar, into m. */
static void meta_why(const ms_sums *s, int k, const char *model_dir, uint64_t size, uint64_t hash, char *m, size_t len) {
    const char *f = ms_sums_meta_files[k];
    if (s->meta[k][0] == META_ABSENT)
        snprintf(m, len, "%s/%s: not covered by %s (the file was absent when it was written); "
                 "rebuild it with 'moestream verify %s --write'", model_dir, f, MS_SUMS_FILE, model_dir);
    else if (size == META_ABSENT)
        snprintf(m, len, "%s/%s: missing, but %s holds its checksum", model_dir, f, MS_SUMS_FILE);
    else
        snprintf(m, len, "%s/%s: checksum mismatch (%s): %llu bytes hashing to %016llx, the sidecar says %llu"
                 " bytes hashing to %016llx", model_dir, f, MS_SUMS_FILE, (unsigned long long)size,
                 (unsigned long long)hash, (unsigned long long)s->meta[k][0], (unsigned long long)s->meta[k][1]);
}

ms_status ms_sums_check_meta(const ms_sums *s, const char *model_dir, const ms_logger *log, int *n_bad, ms_err *err) {
    if (n_bad) *n_bad = 0;
    if (s->version == 1) {
        ms_log(log, MS_LOG_WARN, "checksums: the sidecar has format 1, which does not cover config.json,"
               " the index or the tokenizer files: they are not verified (rebuild it with 'moestream verify %s --write')",
               model_dir);
        return MS_OK;
    }
    for (int k = 0; k < MS_SUMS_N_META; k++) {
        uint64_t size, hash;
        const ms_status st = hash_meta(model_dir, k, &size, &hash, err);
        if (st != MS_OK) return st;
        if (k >= s->n_meta) {       /* an older format does not record this file */
            if (size != META_ABSENT)
                ms_log(log, MS_LOG_WARN, "checksums: the sidecar has format %d, which does not cover %s: it is not"
                       " verified (rebuild it with 'moestream verify %s --write')", s->version,
                       ms_sums_meta_files[k], model_dir);
            continue;
        }
        if (size == s->meta[k][0] && hash == s->meta[k][1]) continue;
        char m[sizeof err->msg];
        meta_why(s, k, model_dir, size, hash, m, sizeof m);
        if (!n_bad) return ms_err_set(err, MS_E_MODEL, "%s", m);
        ms_log(log, MS_LOG_ERROR, "%s", m);
        (*n_bad)++;
    }
    return MS_OK;
}

uint64_t ms_sums_content_hash(const ms_sums *s) {
    XXH3_state_t *x = XXH3_createState();
    MS_ASSERT(x != NULL);
    XXH3_64bits_reset(x);
    uint8_t buf[8 * 512];
    for (int64_t i = 0; i < s->n_blocks; i += 512) {
        const int64_t k = s->n_blocks - i < 512 ? s->n_blocks - i : 512;
        for (int64_t j = 0; j < k; j++) ms_put64(buf + 8 * j, s->hash[i + j]);
        XXH3_64bits_update(x, buf, (size_t)(8 * k));
    }
    const uint64_t h = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    return h;
}

/* Index (into the table) of the tensor holding byte `offset` of `shard`, or -1. */
static int64_t find_tensor(const ms_sums *s, int shard, int64_t offset) {
    if (shard < 0 || shard >= s->n_shards) return -1;
    const int64_t *v = s->by_off[shard];
    int64_t lo = 0, hi = s->n_by_off[shard];          /* first with offset > `offset` */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ms_ckpt_tensor(s->ck, v[mid])->offset <= offset) lo = mid + 1; else hi = mid;
    }
    if (lo == 0) return -1;
    const ms_tensor_info *t = ms_ckpt_tensor(s->ck, v[lo - 1]);
    return offset < t->offset + t->n_bytes ? v[lo - 1] : -1;
}

int64_t ms_sums_block_end(const ms_sums *s, int shard, int64_t offset) {
    int64_t i = find_tensor(s, shard, offset);
    if (i < 0) return -1;
    const ms_tensor_info *t = ms_ckpt_tensor(s->ck, i);
    int64_t b0, b1;
    block_at(s, i, offset - t->offset, &b0, &b1);
    return t->offset + b1;
}

ms_status ms_sums_cover(const ms_sums *s, int shard, int64_t offset, int64_t n_bytes,
                        int64_t *begin, int64_t *end, ms_err *err) {
    MS_ASSERT(n_bytes > 0);
    int64_t a = find_tensor(s, shard, offset), z = find_tensor(s, shard, offset + n_bytes - 1);
    if (a < 0 || z < 0)
        return ms_err_set(err, MS_E_INTERNAL, "sums: bytes [%lld, %lld) of shard %d are not all tensor bytes",
                          (long long)offset, (long long)(offset + n_bytes), shard);
    const ms_tensor_info *ta = ms_ckpt_tensor(s->ck, a);
    int64_t b0, b1;
    block_at(s, a, offset - ta->offset, &b0, &b1);
    *begin = ta->offset + b0;
    *end = ms_sums_block_end(s, shard, offset + n_bytes - 1);
    return MS_OK;
}

ms_status ms_sums_check(const ms_sums *s, int shard, int64_t offset, int64_t n_bytes,
                        const uint8_t *bytes, ms_err *err) {
    int64_t at = offset;
    const int64_t end = offset + n_bytes;
    while (at < end) {
        int64_t i = find_tensor(s, shard, at);
        const ms_tensor_info *t = i >= 0 ? ms_ckpt_tensor(s->ck, i) : NULL;
        if (!t || (at - t->offset) % s->unit[i] % B != 0)
            return ms_err_set(err, MS_E_INTERNAL, "sums: cannot check bytes [%lld, %lld) of shard %d: byte %lld %s",
                              (long long)offset, (long long)end, shard, (long long)at,
                              t ? "is not on a block boundary of its tensor" : "lies in no tensor");
        int64_t stop = t->offset + t->n_bytes < end ? t->offset + t->n_bytes : end;
        if (stop != t->offset + t->n_bytes && (stop - t->offset) % s->unit[i] % B != 0)
            return ms_err_set(err, MS_E_INTERNAL, "sums: cannot check bytes [%lld, %lld) of shard %d: it ends inside a block of tensor '%s'",
                              (long long)offset, (long long)end, shard, t->name);
        while (at < stop) {
            int64_t b0, b1;
            const int64_t blk = block_at(s, i, at - t->offset, &b0, &b1);
            const int64_t len = b1 - b0;
            if (at + len > stop)
                return ms_err_set(err, MS_E_INTERNAL, "sums: cannot check bytes [%lld, %lld) of shard %d: it ends inside a block of tensor '%s'",
                                  (long long)offset, (long long)end, shard, t->name);
            if (XXH3_64bits(bytes + (at - offset), (size_t)len) != s->hash[blk])
                return ms_err_set(err, MS_E_IO, "%s: tensor '%s' bytes [%lld, %lld) of the file: checksum mismatch (moestream.sums)",
                                  ms_ckpt_shard(s->ck, shard)->file, t->name, (long long)at, (long long)(at + len));
            at += len;
        }
    }
    return MS_OK;
}

ms_status ms_sums_compare(const ms_sums *s, const ms_logger *log, ms_sums_bad_fn bad, void *user,
                          int64_t *n_bad_tensors, int64_t *n_bad_blocks, ms_err *err) {
    *n_bad_tensors = *n_bad_blocks = 0;
    uint64_t *h = malloc(((size_t)s->n_blocks + 1) * sizeof *h);
    if (!h) return ms_err_set(err, MS_E_NOMEM, "sums: out of memory");
    ms_status st = hash_all(s, log, h, err);
    for (int64_t i = 0; i < s->n_tensors && st == MS_OK; i++) {
        const ms_tensor_info *t = ms_ckpt_tensor(s->ck, i);
        int64_t first_bad = -1, last_bad = -1, n_bad = 0;
        for (int64_t b = s->first[i]; b < s->first[i + 1]; b++)
            if (h[b] != s->hash[b]) {
                if (first_bad < 0) first_bad = b - s->first[i];
                last_bad = b - s->first[i];
                n_bad++;
            }
        if (!n_bad) continue;
        (*n_bad_tensors)++;
        *n_bad_blocks += n_bad;
        /* block j of the tensor: unit j / per, block j % per of it */
        const int64_t per = n_blocks_of(s->unit[i]);
        int64_t a0, a1, z0, z1;
        block_at(s, i, first_bad / per * s->unit[i] + first_bad % per * B, &a0, &a1);
        block_at(s, i, last_bad / per * s->unit[i] + last_bad % per * B, &z0, &z1);
        if (bad) bad(user, t, ms_ckpt_shard(s->ck, t->shard)->file, t->offset + a0, t->offset + z1, n_bad);
    }
    free(h);
    return st;
}
