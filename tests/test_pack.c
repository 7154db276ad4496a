/* tests/test_pack.c - the packed trunk (format/pack.h, moestream.pack): lossless,
 * fewer bytes read, the same bits, and never a wrong byte from a bad pack.
 *
 *   - codec: ranges of bf16-like words (Gaussian, as trained and generated
 *     weights are), zeros, random bytes, many exponents (escapes), odd and
 *     chunk-edge lengths: encode, decode in place (portable and SIMD) and
 *     compare with the input; Gaussian words pack to < 0.8 of their bytes,
 *     random bytes stay raw (one header per chunk);
 *   - a region of 3 ranges at the store's layout (skews, pads) through the
 *     writer and the reader: the image lands at its shift and decodes in place,
 *     at once or in steps as it lands (random step sizes; no step writes
 *     over bytes not yet decoded from or past what has landed), and its block
 *     hashes refuse a flipped byte;
 *     2000 images with random bytes flipped decode to MS_OK or MS_E_MODEL,
 *     never outside the buffer (the sanitizer builds run this too);
 *   - the file: a pack loads against its checkpoint and is refused against
 *     another (table hash), truncated, or with an edited index;
 *   - the engine, on copies of models a and c: with the pack, teacher-forced
 *     logits at the floor, part-pinned and resident, 1 and 2 threads, are
 *     memcmp-equal to the run without it; at the floor the pack is read and
 *     the bytes it stood for equal the trunk bytes read without it, at < 0.8
 *     of them; a pack image with a payload byte flipped (with the sidecar) or
 *     a broken header (without) is given up and read from the shards, with
 *     the same bits; a pack of another model is refused when named and
 *     ignored (with a warning) when found in the model directory.
 */
#include "moestream.h"

#include "check.h"
#include "format/pack.h"
#include "format/safetensors.h"
#include "format/sums.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double unif(void) { return ((double)(next() >> 11) + 0.5) / 9007199254740992.0; }

static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* n bytes of little-endian bf16 words of N(0, sd) */
static void fill_gauss(uint8_t *p, int64_t n, double sd) {
    for (int64_t i = 0; i + 1 < n; i += 2) {
        double g = sd * sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif());
        uint16_t w = bf16_of((float)g);
        p[i] = (uint8_t)w;
        p[i + 1] = (uint8_t)(w >> 8);
    }
    if (n % 2) p[n - 1] = (uint8_t)next();
}

/* Encode src[n] as one range and decode it: the output at the buffer's
 * start, the image after it (the tight in-place case, output over its own
 * image, is region_and_file's and the engine's). Returns the image bytes, -1
 * on a mismatch. */
static int64_t roundtrip(const uint8_t *src, int64_t n, int use_simd) {
    const int64_t bound = ms_pack_range_bound(n);
    uint8_t *buf = malloc((size_t)(n + bound + 64)), *scratch = malloc(MS_PACK_CHUNK_BYTES);
    const int64_t img = ms_pack_encode_range(src, n, buf + n);
    ms_pack_range r = { 0, 0, n };
    int64_t pos = 0;
    ms_pack_entry e = { 1, &r, 0, img, n, n, NULL };
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_pack_decode_image(buf, n + img, &e, &pos, scratch, use_simd, &err);
    int64_t out = img;
    if (st != MS_OK || memcmp(buf + pos, src, (size_t)n) != 0) {
        fprintf(stderr, "roundtrip of %lld bytes: %s\n", (long long)n, st != MS_OK ? err.msg : "different bytes");
        out = -1;
    }
    free(buf);
    free(scratch);
    return out;
}

static void codec(void) {
    const int64_t R = MS_PACK_CHUNK_BYTES;
    const int64_t lens[] = { 2, 30, 32, 34, 1000, R - 2, R, R + 2, 2 * R, 3 * R + 4098, 7 * R + 1 };
    for (int simd = 0; simd < 3; simd++) {
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            const int64_t n = lens[k];
            uint8_t *src = malloc((size_t)n);
            fill_gauss(src, n, 0.02);
            int64_t img = roundtrip(src, n, simd);
            CHECK(img >= 0, "gauss %lld simd %d", (long long)n, simd);
            if (n >= 1000 && n % 2 == 0)
                CHECK(img < n * 8 / 10, "gauss %lld: %lld image bytes, want < 0.8", (long long)n, (long long)img);
            for (int64_t i = 0; i < n; i++) src[i] = (uint8_t)next();
            img = roundtrip(src, n, simd);
            CHECK(img == n + 4 * ((n + R - 1) / R), "random %lld: %lld image bytes, want raw", (long long)n,
                  (long long)img);
            memset(src, 0, (size_t)n);
            CHECK(roundtrip(src, n, simd) >= 0, "zeros %lld", (long long)n);
            /* many exponents: 90% in 8 binades, the rest spread over 40 (escapes) */
            for (int64_t i = 0; i + 1 < n; i += 2) {
                int b = next() % 10 ? (int)(next() % 8) : (int)(next() % 40);
                uint16_t w = bf16_of((float)(ldexp(1.0 + unif(), b - 20) * (next() & 1 ? 1 : -1)));
                src[i] = (uint8_t)w;
                src[i + 1] = (uint8_t)(w >> 8);
            }
            img = roundtrip(src, n, simd);
            CHECK(img >= 0, "escapes %lld simd %d", (long long)n, simd);
            if (n >= 1000 && n % 2 == 0) CHECK(img < n, "escapes %lld: %lld image bytes", (long long)n, (long long)img);
            free(src);
        }
    }
}

/* the store's layout: range i at the next page + offset % 4096 */
static int64_t layout(const ms_pack_range *r, int n, int64_t *pos) {
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        at = (at + 4095) / 4096 * 4096 + r[i].offset % 4096;
        pos[i] = at;
        at += r[i].n_bytes;
    }
    return (at + 4095) / 4096 * 4096;
}

static void region_and_file(const char *tmp, const char *model_a, const char *model_c) {
    ms_ckpt *ck = NULL, *ck2 = NULL;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_ckpt_open(model_a, &ck, &err) == MS_OK, "open a: %s", err.msg);
    CHECK(ms_ckpt_open(model_c, &ck2, &err) == MS_OK, "open c: %s", err.msg);
    if (!ck || !ck2) { ms_ckpt_close(ck); ms_ckpt_close(ck2); return; }
    ms_sums *sums = NULL, *sums2 = NULL;
    CHECK(ms_sums_build(ck, NULL, &sums, &err) == MS_OK && ms_sums_build(ck2, NULL, &sums2, &err) == MS_OK,
          "sums: %s", err.msg);
    const int64_t fb = ms_ckpt_shard(ck, 0)->file_bytes;
    /* three ranges inside shard 0, with three skews; the first starts with
     * words that do not pack (raw chunk first: the image needs a shift) */
    ms_pack_range r[3] = { { 0, 4096, 70000 }, { 0, 80100, 131072 + 6 }, { 0, 0, 9000 } };
    if (r[1].offset + r[1].n_bytes > fb) r[1].n_bytes = fb - r[1].offset - 2;
    r[2].offset = 5;
    int64_t pos[3];
    const int64_t bb = layout(r, 3, pos);
    uint8_t *buf = calloc(1, (size_t)bb), *want = calloc(1, (size_t)bb), *scratch = malloc(MS_PACK_CHUNK_BYTES);
    for (int i = 0; i < 3; i++) fill_gauss(want + pos[i], r[i].n_bytes, 0.01);
    for (int64_t i = 0; i < 40000; i++) want[pos[0] + i] = (uint8_t)next();
    char path[4200];
    snprintf(path, sizeof path, "%s/t.pack", tmp);
    ms_pack_writer *w = NULL;
    int64_t img = 0, img2 = 0;
    CHECK(ms_pack_writer_open(path, ms_sums_table_hash(ck), ms_sums_content_hash(sums), &w, &err) == MS_OK,
          "writer: %s", err.msg);
    if (!w) goto out;
    memcpy(buf, want, (size_t)bb);     /* the writer decodes back in the buffer it is given */
    CHECK(ms_pack_writer_add(w, r, 3, pos, buf, bb, &img, &err) == MS_OK && img > 0, "add: %s", err.msg);
    {
        int same = 1;
        for (int i = 0; i < 3; i++) same = same && memcmp(buf + pos[i], want + pos[i], (size_t)r[i].n_bytes) == 0;
        CHECK(same, "the ranges after add are not their bytes");
    }
    /* a region that does not shrink is left out */
    ms_pack_range rr = { 0, 200000, 8192 };
    int64_t p1 = 0;
    const int64_t bb1 = layout(&rr, 1, &p1);
    uint8_t *rnd = malloc((size_t)bb1);
    for (int64_t i = 0; i < bb1; i++) rnd[i] = (uint8_t)next();
    CHECK(ms_pack_writer_add(w, &rr, 1, &p1, rnd, bb1, &img2, &err) == MS_OK && img2 == 0, "random region packed");
    free(rnd);
    CHECK(ms_pack_writer_finish(w, &err) == MS_OK, "finish: %s", err.msg);
    {   /* two images: each at a multiple of 4096, the bytes between them zero
         * (written as padding with O_DIRECT, a hole through the page cache) */
        char p2[4200];
        snprintf(p2, sizeof p2, "%s/two.pack", tmp);
        ms_pack_writer *w2 = NULL;
        int64_t i1 = 0, i2 = 0;
        CHECK(ms_pack_writer_open(p2, ms_sums_table_hash(ck), ms_sums_content_hash(sums), &w2, &err) == MS_OK,
              "two: %s", err.msg);
        if (w2) {
            memcpy(buf, want, (size_t)bb);
            CHECK(ms_pack_writer_add(w2, r, 3, pos, buf, bb, &i1, &err) == MS_OK && i1 > 0, "two, 1: %s", err.msg);
            memcpy(buf, want, (size_t)bb);
            CHECK(ms_pack_writer_add(w2, r, 3, pos, buf, bb, &i2, &err) == MS_OK && i2 == i1, "two, 2: %s", err.msg);
            CHECK(ms_pack_writer_finish(w2, &err) == MS_OK, "two: finish: %s", err.msg);
            const int64_t span = (i1 + 4095) / 4096 * 4096;
            uint8_t *f = malloc((size_t)(4096 + 2 * span));
            FILE *fp = fopen(p2, "rb");
            int ok = fp && fread(f, 1, (size_t)(4096 + 2 * span), fp) == (size_t)(4096 + 2 * span);
            if (fp) fclose(fp);
            for (int64_t i = 4096 + i1; ok && i < 4096 + span; i++) ok = f[i] == 0;
            ok = ok && memcmp(f + 4096, f + 4096 + span, (size_t)i1) == 0;
            CHECK(ok, "two images: not at 4096 and 4096 + %lld with zeros between", (long long)span);
            free(f);
            unlink(p2);
        }
    }
    ms_pack *pk = NULL;
    CHECK(ms_pack_load(path, ck, sums, &pk, &err) == MS_OK, "load: %s", err.msg);
    if (pk) {
        CHECK(ms_pack_n_entries(pk) == 1, "entries %lld", (long long)ms_pack_n_entries(pk));
        const ms_pack_entry *e = ms_pack_find(pk, r, 3);
        CHECK(e != NULL && e->image_bytes == img && e->shift > 0 && e->shift % 4096 == 0 &&
              e->shift + (img + 4095) / 4096 * 4096 == bb,
              "entry: shift %lld", e ? (long long)e->shift : -1LL);
        CHECK(ms_pack_find(pk, r, 2) == NULL, "a prefix of the ranges matched");
        if (e) {
            uint8_t *image = malloc((size_t)e->image_bytes);
            FILE *f = fopen(path, "rb");
            CHECK(f && fseek(f, e->image_off, SEEK_SET) == 0 &&
                  fread(image, 1, (size_t)e->image_bytes, f) == (size_t)e->image_bytes, "read image");
            if (f) fclose(f);
            ms_err_clear(&err);
            CHECK(ms_pack_check_blocks(e, image, 0, ms_pack_n_blocks(e), path, &err) == MS_OK, "image hashes: %s", err.msg);
            image[e->image_bytes - 1] ^= 4;
            CHECK(ms_pack_check_blocks(e, image, 0, ms_pack_n_blocks(e), path, &err) == MS_E_IO && strstr(err.msg, "checksum mismatch"),
                  "a flipped image byte passed its hash");
            image[e->image_bytes - 1] ^= 4;
            for (int simd = 0; simd < 3; simd++) {
                memset(buf, 0xAB, (size_t)bb);
                memcpy(buf + e->shift, image, (size_t)e->image_bytes);
                ms_err_clear(&err);
                ms_status st = ms_pack_decode_image(buf, bb, e, pos, scratch, simd, &err);
                int same = st == MS_OK;
                for (int i = 0; i < 3; i++)
                    same = same && memcmp(buf + pos[i], want + pos[i], (size_t)r[i].n_bytes) == 0;
                CHECK(same, "region decode simd %d: %s", simd, err.msg);
            }
            /* as it lands: the image arrives in pieces of random sizes (past what
             * has landed the buffer holds junk, 0xAB: a bad chunk header) and is
             * decoded after each; no step reads or writes past what has landed,
             * and the result is the whole decode's */
            uint8_t *junk = malloc((size_t)e->image_bytes);
            memset(junk, 0xAB, (size_t)e->image_bytes);
            for (int t = 0; t < 40; t++) {
                memset(buf, 0xAB, (size_t)bb);
                ms_pack_cursor cur;
                ms_pack_cursor_init(&cur, e);
                ms_err_clear(&err);
                int64_t k = 0;
                int ok = 1, steps = 0;
                while (ok && !cur.done && steps < 100000) {
                    const uint64_t u = next();
                    const int64_t k0 = k;
                    k += t == 0 ? 13 : t == 1 ? 4096 : (int64_t)(u % (t < 20 ? 5000 : 70000));
                    if (k > e->image_bytes) k = e->image_bytes;
                    memcpy(buf + e->shift + k0, image + k0, (size_t)(k - k0));
                    const int64_t at = cur.in;
                    ok = ms_pack_decode_upto(buf, bb, e, pos, &cur, e->shift + k, scratch, t % 3, &err) == MS_OK &&
                         memcmp(buf + e->shift + k, junk, (size_t)(e->image_bytes - k)) == 0 &&
                         cur.in >= at && cur.in <= e->shift + k;
                    steps++;
                }
                int same = ok && cur.done && cur.in == e->shift + e->image_bytes;
                for (int i = 0; i < 3; i++)
                    same = same && memcmp(buf + pos[i], want + pos[i], (size_t)r[i].n_bytes) == 0;
                CHECK(same, "stepwise decode %d (%d steps, at %lld of %lld): %s", t, steps, (long long)k,
                      (long long)e->image_bytes, err.msg);
                /* a finished cursor stays finished */
                CHECK(ms_pack_decode_upto(buf, bb, e, pos, &cur, e->shift + e->image_bytes, scratch, 1, &err) == MS_OK &&
                      cur.done, "a second call on a finished cursor");
            }
            free(junk);
            {   /* nothing landed past the first header's 3 bytes: nothing decoded */
                memcpy(buf + e->shift, image, (size_t)e->image_bytes);
                ms_pack_cursor cur;
                ms_pack_cursor_init(&cur, e);
                CHECK(ms_pack_decode_upto(buf, bb, e, pos, &cur, e->shift + 3, scratch, 1, &err) == MS_OK &&
                      !cur.done && cur.in == e->shift && cur.range == 0 && cur.chunk == 0,
                      "decoded with 3 bytes landed");
            }
            /* the same image at the buffer's start breaks the ordering rule: refused */
            ms_pack_entry e0 = *e;
            e0.shift = 0;
            memcpy(buf, image, (size_t)e->image_bytes);
            ms_err_clear(&err);
            CHECK(ms_pack_decode_image(buf, bb, &e0, pos, scratch, 1, &err) == MS_E_MODEL, "no shift accepted");
            /* random flips: MS_OK or MS_E_MODEL, and the sanitizers watch the bounds */
            int n_err = 0;
            for (int t = 0; t < 2000; t++) {
                memcpy(buf + e->shift, image, (size_t)e->image_bytes);
                for (int k = 0; k < 1 + t % 4; k++) {
                    int64_t at = t % 3 == 0 ? (int64_t)(next() % 4)     /* the first header */
                                            : (int64_t)(next() % (uint64_t)e->image_bytes);
                    buf[e->shift + at] ^= (uint8_t)(1 + next() % 255);
                }
                ms_err_clear(&err);
                ms_status st = ms_pack_decode_image(buf, bb, e, pos, scratch, t % 3, &err);
                CHECK(st == MS_OK || st == MS_E_MODEL, "flip %d: status %d", t, (int)st);
                n_err += st != MS_OK;
            }
            CHECK(n_err > 100, "only %d of 2000 damaged images were refused", n_err);
            free(image);
        }
        ms_pack_free(pk);
    }
    pk = NULL;
    ms_err_clear(&err);
    CHECK(ms_pack_load(path, ck2, sums2, &pk, &err) == MS_E_MODEL && strstr(err.msg, "another checkpoint"),
          "another checkpoint's pack: %s", err.msg);
    ms_pack_free(pk);
    /* the same table, other bytes: a pack written against other checksums */
    char path2[4300];
    snprintf(path2, sizeof path2, "%s.other", path);
    w = NULL;
    CHECK(ms_pack_writer_open(path2, ms_sums_table_hash(ck), ms_sums_content_hash(sums) + 1, &w, &err) == MS_OK &&
          ms_pack_writer_add(w, r, 3, pos, memcpy(buf, want, (size_t)bb), bb, &img, &err) == MS_OK &&
          ms_pack_writer_finish(w, &err) == MS_OK,
          "write other: %s", err.msg);
    pk = NULL;
    ms_err_clear(&err);
    CHECK(ms_pack_load(path2, ck, sums, &pk, &err) == MS_E_MODEL && strstr(err.msg, "other bytes"),
          "a pack of other bytes: %s", err.msg);
    ms_pack_free(pk);
    unlink(path2);
    /* an edited index, then a truncated file */
    FILE *f = fopen(path, "r+b");
    struct stat sb;
    stat(path, &sb);
    if (f) {
        fseek(f, (long)sb.st_size - 3, SEEK_SET);
        int c = fgetc(f);
        fseek(f, (long)sb.st_size - 3, SEEK_SET);
        fputc(c ^ 1, f);
        fclose(f);
    }
    ms_err_clear(&err);
    pk = NULL;
    CHECK(ms_pack_load(path, ck, sums, &pk, &err) == MS_E_MODEL && strstr(err.msg, "index hash"), "edited index: %s", err.msg);
    ms_pack_free(pk);
    CHECK(truncate(path, sb.st_size - 40) == 0, "truncate");
    ms_err_clear(&err);
    pk = NULL;
    CHECK(ms_pack_load(path, ck, sums, &pk, &err) == MS_E_MODEL, "truncated: %s", err.msg);
    ms_pack_free(pk);
    unlink(path);
out:
    free(buf); free(want); free(scratch);
    ms_sums_free(sums);
    ms_sums_free(sums2);
    ms_ckpt_close(ck);
    ms_ckpt_close(ck2);
}

/* ------------------------------------------------------------ the engine */

static const int32_t IDS[] = { 3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32 };
enum { N_IDS = sizeof IDS / sizeof IDS[0] };

typedef struct cfg {
    int64_t ram, trunk;
    int threads, no_pack, no_verify;
    const char *pack_path;
    int64_t io_chunk;           /* 0: the default 2 MiB reads */
} cfg;

/* teacher-forced logits [N_IDS, V] one token at a time (decode, with guesses) */
static float *logits(const char *dir, const cfg *c, int64_t *V, ms_stats *stats, char *msg, size_t len) {
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.n_threads = c->threads;
    p.ram_bytes = c->ram;
    p.trunk_bytes = c->trunk;
    p.no_pack = c->no_pack;
    p.no_verify = c->no_verify;
    p.pack_path = c->pack_path;
    p.io_chunk_bytes = c->io_chunk;
    ms_engine *e;
    if (ms_engine_open(&p, &e, msg, len) != MS_OK) return NULL;
    ms_model_info info;
    ms_engine_info(e, &info);
    *V = info.n_vocab;
    ms_session *s;
    float *lg = malloc((size_t)(N_IDS * *V) * sizeof *lg);
    ms_status st = ms_session_open(e, &s);
    for (int i = 0; i < N_IDS && st == MS_OK; i++) {
        st = ms_session_feed(s, IDS + i, 1, NULL);
        if (st == MS_OK) memcpy(lg + i * *V, ms_session_logits(s), (size_t)*V * sizeof *lg);
        else snprintf(msg, len, "%s", ms_session_error(s));
    }
    if (st == MS_OK) ms_session_close(s);
    ms_engine_stats(e, stats);
    ms_engine_close(e);
    if (st != MS_OK) { free(lg); return NULL; }
    return lg;
}

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int ok = a && b;
    char blk[65536];
    size_t k;
    while (ok && (k = fread(blk, 1, sizeof blk, a)) > 0) ok = fwrite(blk, 1, k, b) == k;
    if (a) fclose(a);
    if (b && fclose(b) != 0) ok = 0;
    return ok;
}

/* copy the model's config, index and shards (not its goldens) to dst */
static int copy_model(const char *src, const char *dst) {
    if (mkdir(dst, 0755) != 0) return 0;
    ms_ckpt *ck;
    ms_err err;
    if (ms_ckpt_open(src, &ck, &err) != MS_OK) return 0;
    char a[8400], b[8400];
    int ok = 1;
    for (int i = 0; i < ms_ckpt_n_shards(ck) && ok; i++) {
        snprintf(a, sizeof a, "%s/%s", src, ms_ckpt_shard(ck, i)->file);
        snprintf(b, sizeof b, "%s/%s", dst, ms_ckpt_shard(ck, i)->file);
        ok = copy_file(a, b);
    }
    ms_ckpt_close(ck);
    const char *more[] = { "config.json", "model.safetensors.index.json" };
    for (int i = 0; i < 2 && ok; i++) {
        snprintf(a, sizeof a, "%s/%s", src, more[i]);
        snprintf(b, sizeof b, "%s/%s", dst, more[i]);
        ok = access(a, F_OK) != 0 || copy_file(a, b);
    }
    return ok;
}

/* flip one byte at `at` of the first image in the pack at path */
static int damage_first_image(const char *path, const char *model, int header) {
    ms_ckpt *ck;
    ms_err err;
    if (ms_ckpt_open(model, &ck, &err) != MS_OK) return 0;
    ms_pack *pk = NULL;
    ms_sums *sums = NULL;
    char sp[4400];
    snprintf(sp, sizeof sp, "%s/%s", model, MS_SUMS_FILE);
    int ok = ms_sums_load(sp, ck, &sums, &err) == MS_OK && ms_pack_load(path, ck, sums, &pk, &err) == MS_OK;
    int64_t at = 0;
    if (ok) {
        const ms_pack_entry *e = ms_pack_entry_at(pk, 0);
        at = header ? e->image_off + 1 : e->image_off + 4 + 16 + 5;
    }
    ms_pack_free(pk);
    ms_sums_free(sums);
    ms_ckpt_close(ck);
    FILE *f = ok ? fopen(path, "r+b") : NULL;
    if (!f) return 0;
    fseek(f, (long)at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, (long)at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
    return 1;
}

static void engine(const char *tmp, const char *src, const char *name, const char *other) {
    char dir[4200], pk[4400], msg[1024];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    if (!copy_model(src, dir)) { CHECK(0, "%s: copy", name); return; }
    snprintf(pk, sizeof pk, "%s/%s", dir, MS_PACK_FILE);
    int64_t V = 0;
    ms_stats s0, s1;
    cfg ref_c = { 0, 0, 2, 1, 0, NULL, 0 };
    float *ref = logits(dir, &ref_c, &V, &s0, msg, sizeof msg);
    CHECK(ref != NULL, "%s: reference: %s", name, msg);
    ms_pack_result pr;
    ms_status st = ms_pack_checkpoint(dir, NULL, NULL, NULL, NULL, MS_LOG_ERROR, &pr, msg, sizeof msg);
    CHECK(st == MS_E_USAGE && strstr(msg, "moestream verify"), "%s: pack without a sidecar: %s", name, msg);
    ms_verify_result vr;
    st = ms_verify_checkpoint(dir, NULL, 1, NULL, NULL, MS_LOG_ERROR, &vr, msg, sizeof msg);
    CHECK(st == MS_OK, "%s: sums: %s", name, msg);
    cfg floor_np = { MS_RAM_MIN, 0, 2, 1, 0, NULL, 0 };    /* the bytes a floor run reads without the pack */
    float *fl = logits(dir, &floor_np, &V, &s0, msg, sizeof msg);
    CHECK(fl && ref && memcmp(fl, ref, (size_t)(N_IDS * V) * 4) == 0, "%s: floor without a pack", name);
    free(fl);
    st = ms_pack_checkpoint(dir, NULL, NULL, NULL, NULL, MS_LOG_ERROR, &pr, msg, sizeof msg);
    CHECK(st == MS_OK && pr.n_packed > 0 && pr.n_packed <= pr.n_regions && pr.packed_bytes < pr.packed_raw_bytes,
          "%s: pack: %s (%d of %d)", name, msg, pr.n_packed, pr.n_regions);
    if (!ref || st != MS_OK) { free(ref); return; }
    /* the same bits at every budget and thread count, with the pack */
    const int64_t trunk_mid = pr.raw_bytes * 6 / 10;       /* most of the trunk pinned, the rest streamed */
    /* the last two read in 4 and 8 KiB pieces: every image lands in many pieces,
     * out of order, on both checker threads, and is decoded as far as it has
     * landed (streamed at the floor; pinned at open) */
    cfg rungs[] = { { MS_RAM_MIN, 0, 1, 0, 0, NULL, 0 }, { MS_RAM_MIN, 0, 2, 0, 0, NULL, 0 },
                    { 0, trunk_mid, 2, 0, 0, NULL, 0 }, { 0, 0, 1, 0, 0, NULL, 0 },
                    { MS_RAM_MIN, 0, 2, 0, 0, NULL, 4096 }, { 0, 0, 2, 0, 0, NULL, 8192 } };
    for (size_t k = 0; k < sizeof rungs / sizeof rungs[0]; k++) {
        float *lg = logits(dir, &rungs[k], &V, &s1, msg, sizeof msg);
        CHECK(lg && memcmp(lg, ref, (size_t)(N_IDS * V) * 4) == 0, "%s: rung %zu with the pack: %s", name, k,
              lg ? "different bits" : msg);
        CHECK(s1.pack_on == 1 && s1.packed_regions == pr.n_packed && s1.pack_fallbacks == 0,
              "%s: rung %zu: pack_on %d, regions %lld, fallbacks %lld", name, k, s1.pack_on,
              (long long)s1.packed_regions, (long long)s1.pack_fallbacks);
        if (k == 0) {
            CHECK(s1.trunk_packed_read > 0 && s1.trunk_bytes_read - s1.trunk_packed_read + s1.trunk_unpacked_bytes ==
                  s0.trunk_bytes_read, "%s: floor: %lld read (%lld packed for %lld) vs %lld without the pack", name,
                  (long long)s1.trunk_bytes_read, (long long)s1.trunk_packed_read,
                  (long long)s1.trunk_unpacked_bytes, (long long)s0.trunk_bytes_read);
            CHECK(s1.trunk_packed_read < s1.trunk_unpacked_bytes * 8 / 10, "%s: packed %lld for %lld", name,
                  (long long)s1.trunk_packed_read, (long long)s1.trunk_unpacked_bytes);
            CHECK(s1.expert_requests == s0.expert_requests, "%s: expert uses %lld vs %lld", name,
                  (long long)s1.expert_requests, (long long)s0.expert_requests);
        }
        if (k == 2) CHECK(s1.trunk_packed_read > 0 && s1.trunk_packed_read < s0.trunk_bytes_read,
                          "%s: part-pinned read %lld packed", name, (long long)s1.trunk_packed_read);
        free(lg);
    }
    /* without the sidecar the pack is not read: ignored when found, refused when named */
    cfg nv = { MS_RAM_MIN, 0, 2, 0, 1, NULL, 0 };
    float *lg0 = logits(dir, &nv, &V, &s1, msg, sizeof msg);
    CHECK(lg0 && memcmp(lg0, ref, (size_t)(N_IDS * V) * 4) == 0 && s1.pack_on == 0 && s1.trunk_packed_read == 0,
          "%s: --no-verify: %s, pack_on %d", name, lg0 ? "ran" : msg, s1.pack_on);
    free(lg0);
    cfg nvp = { MS_RAM_MIN, 0, 2, 0, 1, pk, 0 };
    lg0 = logits(dir, &nvp, &V, &s1, msg, sizeof msg);
    CHECK(!lg0 && strstr(msg, "checksum sidecar"), "%s: --no-verify --pack: %s", name, lg0 ? "ran" : msg);
    free(lg0);
    /* a damaged image (a payload byte: a checksum mismatch; a header byte: a
     * decode error): given up, read from the shards, same bits */
    for (int header = 0; header < 2; header++) {
        st = ms_pack_checkpoint(dir, NULL, NULL, NULL, NULL, MS_LOG_ERROR, &pr, msg, sizeof msg);
        CHECK(st == MS_OK && damage_first_image(pk, dir, header), "%s: damage", name);
        cfg c = { MS_RAM_MIN, 0, 2, 0, 0, NULL, 0 };
        float *lg = logits(dir, &c, &V, &s1, msg, sizeof msg);
        CHECK(lg && memcmp(lg, ref, (size_t)(N_IDS * V) * 4) == 0, "%s: damaged (header %d): %s", name, header,
              lg ? "different bits" : msg);
        CHECK(s1.pack_fallbacks == 1 && s1.verify_failures == 0, "%s: damaged (header %d): fallbacks %lld",
              name, header, (long long)s1.pack_fallbacks);
        free(lg);
    }
    /* another model's pack: refused when named, ignored when found */
    char opk[4400];
    snprintf(opk, sizeof opk, "%s/%s/%s", tmp, other, MS_PACK_FILE);
    if (access(opk, F_OK) == 0) {
        cfg named = { 0, 0, 2, 0, 0, opk, 0 };
        float *lg = logits(dir, &named, &V, &s1, msg, sizeof msg);
        CHECK(!lg && strstr(msg, "another checkpoint"), "%s: another model's pack named: %s", name, msg);
        free(lg);
        CHECK(copy_file(opk, pk), "copy pack");
        cfg found = { MS_RAM_MIN, 0, 2, 0, 0, NULL, 0 };
        lg = logits(dir, &found, &V, &s1, msg, sizeof msg);
        CHECK(lg && memcmp(lg, ref, (size_t)(N_IDS * V) * 4) == 0 && s1.pack_on == 0,
              "%s: another model's pack found: %s, pack_on %d", name, lg ? "ran" : msg, s1.pack_on);
        free(lg);
    }
    /* leave a good pack for the other model's check */
    st = ms_pack_checkpoint(dir, NULL, NULL, NULL, NULL, MS_LOG_ERROR, &pr, msg, sizeof msg);
    CHECK(st == MS_OK, "%s: repack: %s", name, msg);
    free(ref);
}

int main(void) {
    const char *td = getenv("MS_TESTDATA");
    if (!td) { CHECK(0, "MS_TESTDATA not set"); return CHECK_DONE("test_pack"); }
    char tmp[] = "/tmp/ms_test_pack_XXXXXX";
    if (!mkdtemp(tmp)) { CHECK(0, "mkdtemp"); return CHECK_DONE("test_pack"); }
    char a[4096], c[4096];
    snprintf(a, sizeof a, "%s/a", td);
    snprintf(c, sizeof c, "%s/c", td);
    codec();
    region_and_file(tmp, a, c);
    engine(tmp, a, "a", "c");
    engine(tmp, c, "c", "a");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK(system(cmd) == 0, "cleanup");
    return CHECK_DONE("test_pack");
}
