/* tests/fuzz/fuzz_pack.c - libFuzzer target: the packed trunk's codec.
 *
 * Owns: fuzzing ms_pack_encode_range / ms_pack_decode_image (format/pack.h).
 * Idea: the first byte chooses:
 *   even: the rest is a range's raw bytes: encode it, decode the image (output
 *     at the buffer's start, image after it) with the portable, SSSE3 and best
 *     decoders; each must return MS_OK and the input bytes (a lossless codec);
 *   odd: the rest is an image for a region of 1-3 ranges whose lengths and
 *     skews come from the next bytes, placed at the end of an exact-size heap
 *     buffer: the decoder must return MS_OK or MS_E_MODEL, and the sanitizers
 *     see every access (a malformed image never reads or writes outside).
 *     The same image then lands in pieces (sizes from the input; junk past
 *     what has landed) and is decoded after each (ms_pack_decode_upto): the
 *     same status, and on MS_OK the same buffer, as the decode at once.
 * Does not: read files (the pack's loader hashes its index: a fuzzed index
 *   would only test the hash).
 */
#include "format/pack.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint8_t scratch[MS_PACK_CHUNK_BYTES];

static void roundtrip(const uint8_t *src, int64_t n) {
    const int64_t bound = ms_pack_range_bound(n);
    uint8_t *buf = malloc((size_t)(n + bound));
    for (int mode = 0; mode < 3; mode++) {
        const int64_t img = ms_pack_encode_range(src, n, buf + n);
        if (img > bound) fz_fail("image of %lld bytes over its bound %lld", (long long)img, (long long)bound);
        ms_pack_range r = { 0, 0, n };
        ms_pack_entry e = { 1, &r, 0, img, n, n, NULL };
        int64_t pos = 0;
        ms_err err;
        ms_err_clear(&err);
        if (ms_pack_decode_image(buf, n + img, &e, &pos, scratch, mode, &err) != MS_OK)
            fz_fail("decode of a fresh image failed: %s", err.msg);
        if (memcmp(buf, src, (size_t)n) != 0) fz_fail("decode (mode %d) changed the bytes", mode);
    }
    free(buf);
}

static void decode_any(const uint8_t *d, size_t size) {
    if (size < 8) return;
    ms_pack_range r[3];
    int64_t pos[3];
    const int n = 1 + d[0] % 3;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        r[i] = (ms_pack_range){ 0, d[1 + i] * 16, 1 + ((int64_t)d[4 + i] << 10) + d[7] };
        at = (at + 4095) / 4096 * 4096 + r[i].offset % 4096;
        pos[i] = at;
        at += r[i].n_bytes;
    }
    const uint8_t *img = d + 8;
    const int64_t len = (int64_t)size - 8;
    const int64_t bb = at > len ? at : len;
    uint8_t *buf = malloc((size_t)bb + 1);
    memset(buf, 0, (size_t)bb);
    memcpy(buf + bb - len, img, (size_t)len);
    ms_pack_entry e = { n, r, 0, len, bb - len, at, NULL };
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_pack_decode_image(buf, bb, &e, pos, scratch, d[0] / 3 % 3, &err);
    if (st != MS_OK && st != MS_E_MODEL) fz_fail("decode returned %d", (int)st);
    /* as it lands */
    uint8_t *b2 = malloc((size_t)bb + 1);
    memset(b2, 0, (size_t)(bb - len));
    memset(b2 + bb - len, 0xAB, (size_t)len);
    ms_pack_cursor cur;
    ms_pack_cursor_init(&cur, &e);
    const int64_t step = 1 + (int64_t)d[7] * 97;
    ms_status s2 = MS_OK;
    for (int64_t k = 0; s2 == MS_OK && !cur.done;) {
        const int64_t k0 = k;
        k = k + step < len ? k + step : len;
        memcpy(b2 + bb - len + k0, img + k0, (size_t)(k - k0));
        s2 = ms_pack_decode_upto(b2, bb, &e, pos, &cur, bb - len + k, scratch, d[0] / 3 % 3, &err);
        if (s2 == MS_OK && k == len && !cur.done) s2 = MS_E_MODEL;   /* all landed, not finished */
    }
    if (s2 != st) fz_fail("decoded as it lands: status %d, at once %d", (int)s2, (int)st);
    if (st == MS_OK && memcmp(b2, buf, (size_t)bb) != 0) fz_fail("decoded as it lands: other bytes");
    free(b2);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1 << 18)) return 0;
    if (data[0] % 2 == 0) roundtrip(data + 1, (int64_t)size - 1);
    else decode_any(data + 1, size - 1);
    return 0;
}
