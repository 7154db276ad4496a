/* tests/fuzz/fuzz_sums.c - libFuzzer target: the checksum sidecar's loader
 * (ms_sums_load, format/sums.h).
 *
 * Owns: fuzzing ms_sums_load on edited sidecars, and the lookups and checks
 *   of a sidecar it accepted.
 * Idea: at startup the fuzz model's checkpoint (MS_FUZZ_MODEL, default
 *   build-fuzz/model) is opened and its sidecar built with ms_sums_build and
 *   ms_sums_hash_meta and written once: the template; the shards are read
 *   into memory. An input edits the template (fuzz_file.h): flags bit 0
 *   recomputes the trailing XXH3-64 over every byte before it; the fields are
 *   the header's (magic, version, reserved, block bytes, table hash,
 *   n_tensors, n_blocks), the metadata entries and the first block hashes;
 *   the FORMAT edit (argument % 3): 0 rewrites the file as format 1 (no
 *   metadata entries, version 1), 1 resizes it to what its header's n_blocks
 *   says, 2 sets n_blocks from its size. The file goes to a memfd.
 *   Properties:
 *     - refused: MS_E_MODEL with a message naming the path, nothing returned;
 *     - loaded (sums.h invariant 1): n_tensors is the checkpoint's, n_blocks
 *       is the sum of its tensors' ceil(n_bytes / 2^20), the file is exactly
 *       136 + 8 n_blocks bytes (56 + 8 n_blocks in format 1, 120 in format 2); the content hash
 *       is the XXH3-64 of the file's block hashes (it holds what was read);
 *     - a block of a real tensor (byte 1 picks which) passes ms_sums_check
 *       with the shard's bytes exactly when the file's hash for it is the
 *       template's; ms_sums_cover / ms_sums_block_end around it agree;
 *     - flags bit 2: ms_sums_check_meta on the model directory is MS_OK when
 *       the file's metadata entries are the template's (or format 1).
 * Does not: fuzz ms_sums_build / ms_sums_compare (they read the shards).
 */
#include "format/sums.h"
#include "fuzz_file.h"

#include <xxhash.h>

#define HB1 48                  /* header bytes, format 1 */
#define HB2 112                 /* format 2 */
#define HB3 MS_SUMS_HEADER_BYTES /* format 3, as written (128) */

static ms_ckpt *g_ck;
static uint8_t *g_tpl;
static size_t g_tpl_n;
static uint8_t **g_shard;       /* [shard] its bytes */
static int64_t *g_first;        /* [tensor] its first block */
static int64_t g_n_blocks;
static fz_mem g_mf;
static fz_img g_img;

static const fz_field g_fields[] = {
    { 0, 8 }, { 8, 4 }, { 12, 4 }, { 16, 8 }, { 24, 8 }, { 32, 8 }, { 40, 8 }, { 48, 8 }, { 56, 8 },
    { 64, 8 }, { 72, 8 }, { 80, 8 }, { 88, 8 }, { 96, 8 }, { 104, 8 }, { 128, 8 }, { 136, 8 }, { 8, 1 },
    { 112, 8 }, { 120, 8 },
};

static int64_t header_bytes(const fz_img *m) {
    const uint64_t v = m->n >= 12 ? fz_get(m->p + 8, 4) : 0;
    return v == 1 ? HB1 : v == 2 ? HB2 : HB3;
}

static void sums_op(fz_img *m, uint8_t arg) {
    if (m->n < HB3) return;
    switch (arg % 3) {
    case 0:     /* format 1: drop the metadata entries */
        memmove(m->p + HB1, m->p + HB3, m->n - HB3);
        m->n -= HB3 - HB1;
        fz_put(m->p + 8, 4, 1);
        break;
    case 1: {
        const uint64_t nb = fz_get(m->p + 40, 8);
        if (nb < FZ_MAX_IMAGE / 8) fz_img_resize(m, (size_t)header_bytes(m) + 8 * nb + 8);
        break;
    }
    default:
        if (m->n >= (size_t)header_bytes(m) + 8) fz_put(m->p + 40, 8, (m->n - (size_t)header_bytes(m) - 8) / 8);
        break;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = fz_model_dir();
    ms_err err;
    ms_err_clear(&err);
    if (ms_ckpt_open(dir, &g_ck, &err) != MS_OK) fz_fail("cannot open %s: %s (set MS_FUZZ_MODEL)", dir, err.msg);
    ms_sums *s = NULL;
    if (ms_sums_build(g_ck, NULL, &s, &err) != MS_OK || ms_sums_hash_meta(s, dir, &err) != MS_OK)
        fz_fail("cannot build the sidecar of %s: %s", dir, err.msg);
    char path[256];
    fz_tmp_path(path, sizeof path, "moestream-fuzz.sums");
    if (ms_sums_write(s, path, &err) != MS_OK) fz_fail("cannot write the sidecar: %s", err.msg);
    ms_sums_free(s);
    g_tpl = fz_slurp(path, &g_tpl_n);
    remove(path);
    const int ns = ms_ckpt_n_shards(g_ck);
    g_shard = calloc((size_t)ns, sizeof *g_shard);
    for (int i = 0; i < ns; i++) {
        size_t n = 0;
        g_shard[i] = fz_slurp(ms_ckpt_shard(g_ck, i)->path, &n);
    }
    const int64_t nt = ms_ckpt_n_tensors(g_ck);
    g_first = malloc(((size_t)nt + 1) * sizeof *g_first);
    for (int64_t i = 0; i < nt; i++) {
        g_first[i] = g_n_blocks;
        g_n_blocks += (ms_ckpt_tensor(g_ck, i)->n_bytes + MS_SUMS_BLOCK_BYTES - 1) / MS_SUMS_BLOCK_BYTES;
    }
    if ((int64_t)g_tpl_n != HB3 + 8 * g_n_blocks + 8) fz_fail("template of %zu bytes", g_tpl_n);
    fz_mem_open(&g_mf);
    return 0;
}

/* A block of tensor (pick) checks exactly when the file's hash is the template's. */
static void check_block(const ms_sums *s, const fz_img *m, int64_t hb, uint8_t pick) {
    const int64_t nt = ms_ckpt_n_tensors(g_ck);
    const ms_tensor_info *t = NULL;
    int64_t ti = 0;
    for (int64_t k = 0; k < nt && !t; k++) {
        ti = (pick + k) % nt;
        if (ms_ckpt_tensor(g_ck, ti)->n_bytes > 0) t = ms_ckpt_tensor(g_ck, ti);
    }
    if (!t) return;
    const int64_t n = t->n_bytes < MS_SUMS_BLOCK_BYTES ? t->n_bytes : MS_SUMS_BLOCK_BYTES;
    const int same = memcmp(m->p + hb + 8 * g_first[ti], g_tpl + HB3 + 8 * g_first[ti], 8) == 0;
    ms_err err;
    ms_err_clear(&err);
    const ms_status st = ms_sums_check(s, t->shard, t->offset, n, g_shard[t->shard] + t->offset, &err);
    if (st != (same ? MS_OK : MS_E_IO)) fz_fail("block 0 of '%s': check says %s, the hash %s the template's", t->name,
                                                ms_status_name(st), same ? "is" : "is not");
    int64_t b = 0, e = 0;
    const int64_t at = t->offset + (pick * 7919) % t->n_bytes;
    if (ms_sums_cover(s, t->shard, at, 1, &b, &e, &err) != MS_OK || b > at || e <= at || b < t->offset ||
        e > t->offset + t->n_bytes || e != ms_sums_block_end(s, t->shard, at))
        fz_fail("cover of byte %lld of '%s': [%lld, %lld)", (long long)at, t->name, (long long)b, (long long)e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const fz_format f = { g_tpl, g_tpl_n, g_fields, (int)(sizeof g_fields / sizeof g_fields[0]), sums_op };
    fz_edit(&f, data + 2, size - 2, &g_img);
    fz_img *m = &g_img;
    if ((data[0] & 1) && m->n >= 8) fz_put(m->p + m->n - 8, 8, XXH3_64bits(m->p, m->n - 8));
    fz_mem_set(&g_mf, m->p, m->n);
    ms_sums *s = (ms_sums *)&g_mf;      /* must be overwritten */
    ms_err err;
    ms_err_clear(&err);
    const ms_status st = ms_sums_load(g_mf.path, g_ck, &s, &err);
    if (st != MS_OK) {
        if (st != MS_E_MODEL || s != NULL || !strstr(err.msg, g_mf.path))
            fz_fail("refused with %s, out %p, message '%s'", ms_status_name(st), (void *)s, err.msg);
        return 0;
    }
    const int64_t hb = header_bytes(m), nb = ms_sums_n_blocks(s);
    if (ms_sums_n_tensors(s) != ms_ckpt_n_tensors(g_ck) || nb != g_n_blocks)
        fz_fail("loaded %lld tensors, %lld blocks; the checkpoint has %lld, %lld", (long long)ms_sums_n_tensors(s),
                (long long)nb, (long long)ms_ckpt_n_tensors(g_ck), (long long)g_n_blocks);
    if ((int64_t)m->n != hb + 8 * nb + 8) fz_fail("loaded a file of %zu bytes for %lld blocks", m->n, (long long)nb);
    if (ms_sums_content_hash(s) != XXH3_64bits(m->p + hb, (size_t)(8 * nb)))
        fz_fail("the loaded block hashes are not the file's");
    check_block(s, m, hb, data[1]);
    if (data[0] & 4) {
        /* the entries a file's format records are the template's (format 2: the first four) */
        const int same = memcmp(m->p + HB1, g_tpl + HB1, (size_t)(hb - HB1)) == 0;
        const ms_status ms = ms_sums_check_meta(s, fz_model_dir(), NULL, NULL, &err);
        if (same && ms != MS_OK) fz_fail("metadata entries as built, yet: %s", err.msg);
    }
    ms_sums_free(s);
    return 0;
}
