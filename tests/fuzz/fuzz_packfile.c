/* tests/fuzz/fuzz_packfile.c - libFuzzer target: the packed trunk's file
 * loader and its index (ms_pack_load, ms_pack_find; format/pack.h), and the
 * store's use of an entry it accepted.
 *
 * Owns: fuzzing ms_pack_load on edited packs.
 * Idea: at startup the fuzz model's checkpoint (MS_FUZZ_MODEL, default
 *   build-fuzz/model) is opened, its sidecar built in memory, and its trunk
 *   packed once as `moestream pack` does (engine/pack.c: store with the
 *   sidecar, the model's binding, ms_pack_write_trunk): the template. The
 *   TRUNK regions' layouts (ranges, positions, buffer size) and raw bytes
 *   are kept. An input edits the template (fuzz_file.h): flags bit 0
 *   recomputes the header hash (bytes 0..63, at 64), bit 1 the index hash
 *   (at 56, over the index the edited header points at; done first); the
 *   fields are the header's and, for the first entries, their five fields,
 *   their first two ranges' and their first block hash; the FORMAT edit
 *   appends a copy of entry (argument % n_entries) to the index (n_entries
 *   and index bytes follow). The file goes to a memfd.
 *   Properties:
 *     - refused: MS_E_MODEL with a message naming the path, nothing returned;
 *     - loaded: every entry lies inside the file (image at a multiple of
 *       4096 from 4096 on, ending at or before the index), its ranges inside
 *       their shards, their bytes summing to raw_bytes, shift a multiple of
 *       4096 in [0, raw_bytes + 2 pages per range and 2 more: the padding of
 *       the region buffer], ceil(image / 1 MiB) block hashes; entries
 *       sorted by first range, no two alike; ms_pack_find finds each;
 *     - the region byte 1 picks, when the pack has an entry for it that fits
 *       its buffer (the store's test, store/land.c), is used as the store
 *       does: image read at buf + shift, its blocks checked, decoded (bits
 *       2..3 of the flags: portable, best or SSSE3 decoder): MS_OK or
 *       MS_E_MODEL; when the image bytes are the template's and the decode
 *       succeeds, every range holds its raw bytes.
 * Does not: fuzz the codec on raw images (fuzz_pack.c does) or the writer.
 */
#include "base/io.h"
#include "engine/pack_write.h"
#include "format/config.h"
#include "format/pack.h"
#include "format/sums.h"
#include "model/model.h"
#include "fuzz_file.h"

#include <xxhash.h>

#define ENTRY_BYTES 40
#define RANGE_BYTES 24
#define MAX_FIELDS 256

typedef struct region {
    int n;
    ms_pack_range *ranges;
    int64_t *pos;
    int64_t buf_bytes;
    uint8_t *raw;               /* the region buffer as read (ranges at pos) */
    int64_t image_off, image_bytes;     /* its image in the template (0, 0: none) */
} region;

static ms_ckpt *g_ck;
static ms_sums *g_sums;
static uint8_t *g_tpl;
static size_t g_tpl_n;
static region *g_reg;
static int g_n_reg;
static fz_field g_fields[MAX_FIELDS];
static int g_n_fields;
static fz_mem g_mf;
static fz_img g_img;
static uint8_t *g_scratch;

static void add_field(size_t off, int width) {
    if (g_n_fields < MAX_FIELDS) g_fields[g_n_fields++] = (fz_field){ off, width };
}

/* The template's fields: the header's, then the first entries' own, their
 * first two ranges' and their first block hash. */
static void make_fields(void) {
    static const size_t head[][2] = { { 0, 8 }, { 8, 4 }, { 12, 4 }, { 16, 8 }, { 24, 8 }, { 32, 8 },
                                      { 40, 8 }, { 48, 8 }, { 56, 8 }, { 64, 8 } };
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) add_field(head[i][0], (int)head[i][1]);
    const uint64_t ne = fz_get(g_tpl + 32, 8), ix = fz_get(g_tpl + 40, 8);
    size_t at = (size_t)ix;
    for (uint64_t k = 0; k < ne && g_n_fields + 12 <= MAX_FIELDS && at + ENTRY_BYTES <= g_tpl_n; k++) {
        const uint32_t nr = (uint32_t)fz_get(g_tpl + at, 4);
        const uint64_t ib = fz_get(g_tpl + at + 16, 8);
        add_field(at, 4);
        add_field(at + 4, 4);
        for (int f = 1; f < 5; f++) add_field(at + 8 * (size_t)f, 8);
        for (uint32_t r = 0; r < nr && r < 2; r++) {
            const size_t q = at + ENTRY_BYTES + RANGE_BYTES * r;
            add_field(q, 4);
            add_field(q + 8, 8);
            add_field(q + 16, 8);
        }
        const size_t hashes = at + ENTRY_BYTES + RANGE_BYTES * (size_t)nr;
        add_field(hashes, 8);
        at = hashes + 8 * (size_t)((ib + MS_PACK_HASH_BYTES - 1) / MS_PACK_HASH_BYTES);
    }
}

/* FORMAT edit: append a copy of one entry's record to the index. */
static void dup_entry(fz_img *m, uint8_t arg) {
    if (m->n < 72) return;
    const uint64_t ne = fz_get(m->p + 32, 8), ix = fz_get(m->p + 40, 8), il = fz_get(m->p + 48, 8);
    if (ne == 0 || ix > m->n || il > m->n - ix) return;
    size_t at = (size_t)ix, end = (size_t)(ix + il), rec = 0;
    for (uint64_t k = 0; k <= arg % ne; k++) {
        at += rec;
        if (end - at < ENTRY_BYTES) return;
        const uint64_t nr = fz_get(m->p + at, 4), ib = fz_get(m->p + at + 16, 8);
        if (ib > FZ_MAX_IMAGE) return;
        rec = ENTRY_BYTES + RANGE_BYTES * (size_t)nr + 8 * (size_t)((ib + MS_PACK_HASH_BYTES - 1) / MS_PACK_HASH_BYTES);
        if (rec > end - at) return;
    }
    const size_t n0 = m->n;
    if (fz_img_resize(m, n0 + rec) != 0) return;
    memmove(m->p + end + rec, m->p + end, n0 - end);
    memcpy(m->p + end, m->p + at, rec);
    fz_put(m->p + 32, 8, ne + 1);
    fz_put(m->p + 48, 8, il + rec);
}

static void fix_hashes(fz_img *m, uint8_t flags) {
    if (m->n < 72) return;
    const uint64_t ix = fz_get(m->p + 40, 8), il = fz_get(m->p + 48, 8);
    if ((flags & 2) && ix <= m->n && il <= m->n - ix) fz_put(m->p + 56, 8, XXH3_64bits(m->p + ix, (size_t)il));
    if (flags & 1) fz_put(m->p + 64, 8, XXH3_64bits(m->p, 64));
}

/* Open the store over ck with the sidecar, bind the model, keep the TRUNK
 * regions' layouts and bytes, and write the pack to path. */
static void pack_once(const char *dir, const char *path) {
    ms_err err;
    ms_err_clear(&err);
    char cp[4200];
    snprintf(cp, sizeof cp, "%s/config.json", dir);
    ms_config cfg;
    if (ms_config_load(cp, &cfg, &err) != MS_OK) fz_fail("%s", err.msg);
    ms_store_params sp = ms_store_default_params();
    sp.sums = g_sums;
    ms_store *store = NULL;
    ms_model m;
    m.kern = NULL;
    if (ms_store_open(&sp, g_ck, &store, &err) != MS_OK || ms_model_bind(&m, &cfg, g_ck, store, &err) != MS_OK)
        fz_fail("cannot bind the model: %s", err.msg);
    g_reg = calloc((size_t)ms_store_n_regions(store) + 1, sizeof *g_reg);
    for (int i = 0; i < ms_store_n_regions(store); i++) {
        ms_region_class cls;
        const ms_range *g;
        const int64_t *pos;
        const int n = ms_store_region_layout(store, i, &cls, &g, &pos);
        if (cls != MS_REGION_TRUNK) continue;
        region *r = &g_reg[g_n_reg++];
        r->n = n;
        r->buf_bytes = ms_store_region_bytes(store, i);
        r->ranges = malloc((size_t)n * sizeof *r->ranges);
        r->pos = malloc((size_t)n * sizeof *r->pos);
        for (int k = 0; k < n; k++) {
            r->ranges[k] = (ms_pack_range){ g[k].shard, g[k].offset, g[k].n_bytes };
            r->pos[k] = pos[k];
        }
        r->raw = aligned_alloc(MS_IO_ALIGN, (size_t)(r->buf_bytes + MS_IO_ALIGN - 1) / MS_IO_ALIGN * MS_IO_ALIGN);
        if (!r->raw || ms_store_read_region(store, i, r->raw, &err) != MS_OK) fz_fail("cannot read region %d: %s", i, err.msg);
    }
    ms_pack_result res;
    if (ms_pack_write_trunk(store, path, ms_sums_table_hash(g_ck), NULL, &res, &err) != MS_OK)
        fz_fail("cannot write the pack: %s", err.msg);
    if (res.n_packed < 1) fz_fail("the template pack holds no image");
    ms_model_free(&m);
    ms_store_close(store);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = fz_model_dir();
    ms_err err;
    ms_err_clear(&err);
    if (ms_ckpt_open(dir, &g_ck, &err) != MS_OK) fz_fail("cannot open %s: %s (set MS_FUZZ_MODEL)", dir, err.msg);
    if (ms_sums_build(g_ck, NULL, &g_sums, &err) != MS_OK) fz_fail("cannot build the sidecar: %s", err.msg);
    char path[256];
    fz_tmp_path(path, sizeof path, "moestream-fuzz.pack");
    pack_once(dir, path);
    g_tpl = fz_slurp(path, &g_tpl_n);
    ms_pack *p = NULL;
    if (ms_pack_load(path, g_ck, g_sums, &p, &err) != MS_OK) fz_fail("the template does not load: %s", err.msg);
    remove(path);
    for (int i = 0; i < g_n_reg; i++) {
        const ms_pack_entry *e = ms_pack_find(p, g_reg[i].ranges, g_reg[i].n);
        if (e) g_reg[i].image_off = e->image_off, g_reg[i].image_bytes = e->image_bytes;
    }
    ms_pack_free(p);
    make_fields();
    g_scratch = malloc(MS_PACK_CHUNK_BYTES);
    fz_mem_open(&g_mf);
    return 0;
}

static void check_entries(const ms_pack *p, const fz_img *m) {
    const int64_t ix = (int64_t)fz_get(m->p + 40, 8), n = ms_pack_n_entries(p);
    if (n != (int64_t)fz_get(m->p + 32, 8)) fz_fail("%lld entries, the header says %lld", (long long)n, (long long)fz_get(m->p + 32, 8));
    for (int64_t k = 0; k < n; k++) {
        const ms_pack_entry *e = ms_pack_entry_at(p, k);
        if (e->image_off < MS_PACK_ALIGN || e->image_off % MS_PACK_ALIGN || e->image_bytes <= 0 ||
            e->image_off + e->image_bytes > ix || ix > (int64_t)m->n)
            fz_fail("entry %lld: image [%lld, +%lld) outside [4096, index at %lld)", (long long)k,
                    (long long)e->image_off, (long long)e->image_bytes, (long long)ix);
        if (e->shift < 0 || e->shift % MS_PACK_ALIGN || e->n_ranges < 1 ||
            e->shift - e->raw_bytes > ((int64_t)e->n_ranges + 1) * 2 * MS_PACK_ALIGN)     /* format/pack.c's bound */
            fz_fail("entry %lld: shift %lld, raw %lld, %d ranges", (long long)k, (long long)e->shift,
                    (long long)e->raw_bytes, e->n_ranges);
        int64_t sum = 0;
        for (int i = 0; i < e->n_ranges; i++) {
            const ms_pack_range *g = &e->ranges[i];
            if (g->shard < 0 || g->shard >= ms_ckpt_n_shards(g_ck) || g->offset < 0 || g->n_bytes <= 0 ||
                g->offset + g->n_bytes > ms_ckpt_shard(g_ck, g->shard)->file_bytes)
                fz_fail("entry %lld range %d: shard %d [%lld, +%lld) outside its shard", (long long)k, i, g->shard,
                        (long long)g->offset, (long long)g->n_bytes);
            sum += g->n_bytes;
        }
        if (sum != e->raw_bytes) fz_fail("entry %lld: ranges of %lld bytes, raw %lld", (long long)k, (long long)sum, (long long)e->raw_bytes);
        if (ms_pack_n_blocks(e) != (e->image_bytes + MS_PACK_HASH_BYTES - 1) / MS_PACK_HASH_BYTES)
            fz_fail("entry %lld: %lld blocks", (long long)k, (long long)ms_pack_n_blocks(e));
        if (k > 0) {
            const ms_pack_range *a = &ms_pack_entry_at(p, k - 1)->ranges[0], *b = &e->ranges[0];
            if (a->shard > b->shard || (a->shard == b->shard && a->offset >= b->offset))
                fz_fail("entries %lld and %lld out of order or alike", (long long)k - 1, (long long)k);
        }
        if (ms_pack_find(p, e->ranges, e->n_ranges) != e) fz_fail("entry %lld is not found by its ranges", (long long)k);
    }
}

/* Region r used as the store uses a pack entry (store/land.c). */
static void use_region(const ms_pack *p, const region *r, const fz_img *m, int mode) {
    const ms_pack_entry *e = ms_pack_find(p, r->ranges, r->n);
    if (!e || e->shift + ms_io_span(e->image_off, e->image_bytes) > r->buf_bytes) return;
    uint8_t *buf = malloc((size_t)r->buf_bytes);
    if (!buf) fz_fail("out of memory");
    memset(buf, 0xA5, (size_t)r->buf_bytes);
    uint8_t *img = buf + e->shift;
    memcpy(img, m->p + e->image_off, (size_t)e->image_bytes);
    ms_err err;
    ms_err_clear(&err);
    if (ms_pack_check_blocks(e, img, 0, ms_pack_n_blocks(e), g_mf.path, &err) == MS_OK) {
        const ms_status st = ms_pack_decode_image(buf, r->buf_bytes, e, r->pos, g_scratch, mode, &err);
        if (st != MS_OK && st != MS_E_MODEL) fz_fail("decode returned %s", ms_status_name(st));
        const int same = e->image_bytes == r->image_bytes &&
                         memcmp(m->p + e->image_off, g_tpl + r->image_off, (size_t)r->image_bytes) == 0;
        for (int i = 0; st == MS_OK && same && i < r->n; i++)
            if (memcmp(buf + r->pos[i], r->raw + r->pos[i], (size_t)r->ranges[i].n_bytes) != 0)
                fz_fail("the template's image decoded to other bytes (range %d)", i);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const fz_format f = { g_tpl, g_tpl_n, g_fields, g_n_fields, dup_entry };
    fz_edit(&f, data + 2, size - 2, &g_img);
    fz_img *m = &g_img;
    fix_hashes(m, data[0]);
    fz_mem_set(&g_mf, m->p, m->n);
    ms_pack *p = (ms_pack *)&g_mf;      /* must be overwritten */
    ms_err err;
    ms_err_clear(&err);
    const ms_status st = ms_pack_load(g_mf.path, g_ck, g_sums, &p, &err);
    if (st != MS_OK) {
        if (st != MS_E_MODEL || p != NULL || !strstr(err.msg, g_mf.path))
            fz_fail("refused with %s, out %p, message '%s'", ms_status_name(st), (void *)p, err.msg);
        return 0;
    }
    if (strcmp(ms_pack_path(p), g_mf.path) != 0) fz_fail("loaded pack named %s", ms_pack_path(p));
    check_entries(p, m);
    use_region(p, &g_reg[data[1] % g_n_reg], m, (data[0] >> 2) % 3);
    ms_pack_free(p);
    return 0;
}
