/* format/pack.c - the packed trunk: chunk codec, in-place image decode, the
 * pack file's writer and reader (format/pack.h has the format).
 *
 * The decode has two forms that give the same bytes: a portable loop and an
 * SSSE3 one (16 words per step: one byte shuffle looks up 16 exponents), chosen
 * per call from the CPU. Tests compare both with the encoder's input.
 */
#include "format/pack.h"

#include "format/le.h"
#include "format/sums.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MS_PACK_X86 1
#endif

#define R MS_PACK_CHUNK_BYTES
#define HEADER_BYTES 72
#define INDEX_ENTRY_BYTES 40
#define INDEX_RANGE_BYTES 24
#define HB MS_PACK_HASH_BYTES

static int64_t n_hashes_of(int64_t image_bytes) {
    return (image_bytes + HB - 1) / HB;
}

static const uint8_t MAGIC[8] = { 'M', 'S', 'P', 'A', 'C', 'K', 0, 1 };

/* ------------------------------------------------------------------ codec */

/* Packed payload bytes of a chunk of W words with E escapes. */
static int64_t packed_payload(int64_t W, int64_t E) { return 16 + W + (W + 1) / 2 + 3 * E; }

int64_t ms_pack_range_bound(int64_t n) { return n + 4 * ((n + R - 1) / R); }

/* The exponent of a little-endian bf16 word whose bytes are lo, hi. */
static inline int exp_of(uint8_t lo, uint8_t hi) { return (lo >> 7) | (hi & 0x7f) << 1; }

/* Encode one chunk of n <= R bytes; returns the bytes written (payload +
 * trailer). The histogram is kept in four parts (consecutive words often
 * share an exponent, and one table would make each increment wait for the
 * last), and the codes are written two words (one nibble byte) at a time. */
static int64_t encode_chunk(const uint8_t *src, int64_t n, uint8_t *dst) {
    const int64_t W = n / 2;
    int64_t count[256] = { 0 };
    if (n % 2 == 0) {
        uint32_t part[4][256];
        memset(part, 0, sizeof part);
        int64_t w = 0;
        for (; w + 4 <= W; w += 4) {
            const uint8_t *p = src + 2 * w;
            part[0][exp_of(p[0], p[1])]++;
            part[1][exp_of(p[2], p[3])]++;
            part[2][exp_of(p[4], p[5])]++;
            part[3][exp_of(p[6], p[7])]++;
        }
        for (; w < W; w++) part[0][exp_of(src[2 * w], src[2 * w + 1])]++;
        for (int e = 0; e < 256; e++) count[e] = (int64_t)part[0][e] + part[1][e] + part[2][e] + part[3][e];
    }
    /* the 15 most frequent exponents, ties to the smaller exponent */
    uint8_t tab[16] = { 0 }, code[256];
    uint8_t used[256] = { 0 };
    memset(code, 15, sizeof code);
    int64_t E = W;
    for (int k = 0; k < 15; k++) {
        int best = -1;
        for (int e = 0; e < 256; e++)
            if (!used[e] && count[e] > 0 && (best < 0 || count[e] > count[best])) best = e;
        if (best < 0) break;
        used[best] = 1;
        tab[k] = (uint8_t)best;
        code[best] = (uint8_t)k;
        E -= count[best];
    }
    if (n % 2 != 0 || packed_payload(W, E) >= n) {
        ms_put32(dst, MS_PACK_RAW_FLAG);
        memcpy(dst + 4, src, (size_t)n);
        return n + 4;
    }
    ms_put32(dst, (uint32_t)E);
    dst += 4;
    uint8_t *sm = dst + 16, *nib = sm + W, *epos = nib + (W + 1) / 2, *eexp = epos + 2 * E;
    memcpy(dst, tab, 16);
    int64_t k = 0;
    for (int64_t w = 0; w < W; w += 2) {
        const uint8_t *p = src + 2 * w;
        const int e0 = exp_of(p[0], p[1]), c0 = code[e0];
        sm[w] = (uint8_t)((p[1] & 0x80) | (p[0] & 0x7f));
        int e1 = 0, c1 = 0;
        if (w + 1 < W) {
            e1 = exp_of(p[2], p[3]);
            c1 = code[e1];
            sm[w + 1] = (uint8_t)((p[3] & 0x80) | (p[2] & 0x7f));
        }
        nib[w / 2] = (uint8_t)(c0 | c1 << 4);
        if (__builtin_expect(c0 == 15 || c1 == 15, 0)) {
            if (c0 == 15) {
                epos[2 * k] = (uint8_t)w;
                epos[2 * k + 1] = (uint8_t)(w >> 8);
                eexp[k++] = (uint8_t)e0;
            }
            if (c1 == 15) {
                epos[2 * k] = (uint8_t)(w + 1);
                epos[2 * k + 1] = (uint8_t)((w + 1) >> 8);
                eexp[k++] = (uint8_t)e1;
            }
        }
    }
    return 4 + packed_payload(W, E);
}

int64_t ms_pack_encode_range(const uint8_t *src, int64_t n, uint8_t *dst) {
    int64_t out = 0;
    for (int64_t at = 0; at < n; at += R) out += encode_chunk(src + at, n - at < R ? n - at : R, dst + out);
    return out;
}

/* words [w0, W) of a packed chunk, portable */
static void decode_words_ref(uint8_t *out, const uint8_t *tab, const uint8_t *sm, const uint8_t *nib,
                             int64_t w0, int64_t W) {
    for (int64_t w = w0; w < W; w++) {
        const uint8_t e = tab[(nib[w / 2] >> (4 * (w & 1))) & 15], s = sm[w];
        out[2 * w] = (uint8_t)((s & 0x7f) | (e << 7));
        out[2 * w + 1] = (uint8_t)((s & 0x80) | (e >> 1));
    }
}

#ifdef MS_PACK_X86
/* 16 words per step; the tail goes to the portable loop. Returns words done. */
__attribute__((target("ssse3")))
static int64_t decode_words_ssse3(uint8_t *out, const uint8_t *tab, const uint8_t *sm, const uint8_t *nib,
                                  int64_t W) {
    const __m128i t = _mm_loadu_si128((const __m128i *)tab);
    const __m128i m0f = _mm_set1_epi8(0x0f), m7f = _mm_set1_epi8(0x7f), m80 = _mm_set1_epi8((char)0x80);
    int64_t w = 0;
    for (; w + 16 <= W; w += 16) {
        const __m128i nb = _mm_loadl_epi64((const __m128i *)(nib + w / 2));
        const __m128i lo = _mm_and_si128(nb, m0f);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(nb, 4), m0f);
        const __m128i codes = _mm_unpacklo_epi8(lo, hi);            /* word order */
        const __m128i e = _mm_shuffle_epi8(t, codes);
        const __m128i s = _mm_loadu_si128((const __m128i *)(sm + w));
        const __m128i lb = _mm_or_si128(_mm_and_si128(s, m7f), _mm_and_si128(_mm_slli_epi16(e, 7), m80));
        const __m128i hb = _mm_or_si128(_mm_and_si128(s, m80), _mm_and_si128(_mm_srli_epi16(e, 1), m7f));
        _mm_storeu_si128((__m128i *)(out + 2 * w), _mm_unpacklo_epi8(lb, hb));
        _mm_storeu_si128((__m128i *)(out + 2 * w + 16), _mm_unpackhi_epi8(lb, hb));
    }
    return w;
}

/* 32 words per step. out 32-byte aligned: non-temporal stores (the region is
 * read by the compute thread later, usually from memory: no read for ownership). */
__attribute__((target("avx2")))
static int64_t decode_words_avx2(uint8_t *out, const uint8_t *tab, const uint8_t *sm, const uint8_t *nib,
                                 int64_t W) {
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tab));
    const __m128i n0f = _mm_set1_epi8(0x0f);
    const __m256i m7f = _mm256_set1_epi8(0x7f), m80 = _mm256_set1_epi8((char)0x80);
    const int nt = ((uintptr_t)out & 31) == 0;
    int64_t w = 0;
    for (; w + 32 <= W; w += 32) {
        const __m128i nb = _mm_loadu_si128((const __m128i *)(nib + w / 2));
        const __m128i lo = _mm_and_si128(nb, n0f), hi = _mm_and_si128(_mm_srli_epi16(nb, 4), n0f);
        const __m256i codes = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
        const __m256i e = _mm256_shuffle_epi8(t, codes);
        const __m256i s = _mm256_loadu_si256((const __m256i *)(sm + w));
        const __m256i lb = _mm256_or_si256(_mm256_and_si256(s, m7f), _mm256_and_si256(_mm256_slli_epi16(e, 7), m80));
        const __m256i hb = _mm256_or_si256(_mm256_and_si256(s, m80), _mm256_and_si256(_mm256_srli_epi16(e, 1), m7f));
        const __m256i a = _mm256_unpacklo_epi8(lb, hb), b = _mm256_unpackhi_epi8(lb, hb);   /* [0-7|16-23], [8-15|24-31] */
        const __m256i o0 = _mm256_permute2x128_si256(a, b, 0x20), o1 = _mm256_permute2x128_si256(a, b, 0x31);
        if (nt) {
            _mm256_stream_si256((__m256i *)(out + 2 * w), o0);
            _mm256_stream_si256((__m256i *)(out + 2 * w + 32), o1);
        } else {
            _mm256_storeu_si256((__m256i *)(out + 2 * w), o0);
            _mm256_storeu_si256((__m256i *)(out + 2 * w + 32), o1);
        }
    }
    return w;
}

static int x86_level(void) {    /* 0 portable, 1 ssse3, 2 avx2 */
    static int v = -1;
    if (v < 0) v = __builtin_cpu_supports("avx2") ? 2 : __builtin_cpu_supports("ssse3") ? 1 : 0;
    return v;
}
#endif

const char *ms_pack_decoder_name(void) {
#ifdef MS_PACK_X86
    static const char *names[] = { "portable", "ssse3", "avx2" };
    return names[x86_level()];
#endif
    return "portable";
}

/* Decode one packed chunk's payload p (len bytes, W words, E escapes) to out. */
static ms_status decode_chunk(uint8_t *out, const uint8_t *p, int64_t W, int64_t E, int use_simd,
                              ms_err *err) {
    const uint8_t *tab = p, *sm = p + 16, *nib = sm + W, *epos = nib + (W + 1) / 2, *eexp = epos + 2 * E;
    if (tab[15] != 0) return ms_err_set(err, MS_E_MODEL, "pack: chunk table entry 15 is not 0");
    int64_t w0 = 0;
#ifdef MS_PACK_X86
    /* use_simd: 0 portable, 1 the best the CPU has, 2 at most ssse3 (tests) */
    const int lv = use_simd ? x86_level() : 0;
    if (lv == 2 && use_simd == 1) w0 = decode_words_avx2(out, tab, sm, nib, W);
    if (lv >= 1) w0 += decode_words_ssse3(out + 2 * w0, tab, sm + w0, nib + w0 / 2, W - w0);
#else
    (void)use_simd;
#endif
    decode_words_ref(out, tab, sm, nib, w0, W);
    for (int64_t k = 0; k < E; k++) {
        const int64_t w = epos[2 * k] | (int64_t)epos[2 * k + 1] << 8;
        if (w >= W) return ms_err_set(err, MS_E_MODEL, "pack: escape at word %lld of a %lld-word chunk",
                                      (long long)w, (long long)W);
        const uint8_t e = eexp[k];
        out[2 * w] = (uint8_t)((out[2 * w] & 0x7f) | (e << 7));
        out[2 * w + 1] = (uint8_t)((out[2 * w + 1] & 0x80) | (e >> 1));
    }
    return MS_OK;
}

void ms_pack_cursor_init(ms_pack_cursor *c, const ms_pack_entry *e) {
    c->in = e->shift;
    c->range = 0;
    c->chunk = 0;
    c->done = 0;
}

ms_status ms_pack_decode_upto(uint8_t *buf, int64_t buf_bytes, const ms_pack_entry *e,
                              const int64_t *pos, ms_pack_cursor *cur, int64_t avail,
                              uint8_t *scratch, int use_simd, ms_err *err) {
    const int64_t end = e->shift + e->image_bytes;
    if (e->shift < 0 || e->image_bytes < 0 || end > buf_bytes)
        return ms_err_set(err, MS_E_MODEL, "pack: image [%lld, %lld) outside its %lld-byte buffer",
                          (long long)e->shift, (long long)end, (long long)buf_bytes);
    if (avail > end) avail = end;
    int64_t in = cur->in;
    int decoded = 0;
    ms_status st = MS_OK;
    while (cur->range < e->n_ranges) {
        const int i = cur->range;
        const int64_t n = e->ranges[i].n_bytes, k_last = (n + R - 1) / R - 1;
        if (pos[i] < 0 || n < 0 || pos[i] > buf_bytes - n) {
            st = ms_err_set(err, MS_E_MODEL, "pack: range %d outside its buffer", i);
            break;
        }
        if (cur->chunk > k_last) {  /* this range is done (or empty) */
            cur->range++;
            cur->chunk = 0;
            continue;
        }
        const int64_t c = cur->chunk, nc = n - c * R < R ? n - c * R : R;
        uint8_t *out = buf + pos[i] + c * R;
        if (end - in < 4) { st = ms_err_set(err, MS_E_MODEL, "pack: image too short"); break; }
        if (avail - in < 4) break;  /* the header has not landed yet */
        const uint32_t hd = ms_get32(buf + in);
        int64_t len;
        if (hd == MS_PACK_RAW_FLAG) len = nc;
        else if (hd & MS_PACK_RAW_FLAG || nc % 2 || (int64_t)hd > nc / 2) {
            st = ms_err_set(err, MS_E_MODEL, "pack: bad chunk header %08x", (unsigned)hd);
            break;
        } else if ((len = packed_payload(nc / 2, hd)) >= nc) {
            st = ms_err_set(err, MS_E_MODEL, "pack: a packed chunk no smaller than its output");
            break;
        }
        const int64_t next = in + 4 + len;
        /* the output may cover this chunk's input (copied first), never a later chunk's */
        const int last = i == e->n_ranges - 1 && c == k_last;
        if (next > end || (!last && out + nc > buf + next)) {
            st = ms_err_set(err, MS_E_MODEL, "pack: chunk %lld of range %d lies outside the image"
                            " or its output reaches the next chunk", (long long)c, i);
            break;
        }
        if (next > avail) break;    /* the payload has not landed yet */
        if (hd == MS_PACK_RAW_FLAG) {
            memmove(out, buf + in + 4, (size_t)nc);
        } else {
            const uint8_t *src = buf + in + 4;
            if (out + nc > src) {   /* the output covers its own input: copy it first */
                memcpy(scratch, src, (size_t)len);
                src = scratch;
            }
            if ((st = decode_chunk(out, src, nc / 2, hd, use_simd, err)) != MS_OK) break;
        }
        decoded = 1;
        in = next;
        cur->chunk++;
    }
#ifdef MS_PACK_X86
    if (decoded && use_simd && x86_level() == 2) _mm_sfence();  /* the non-temporal stores, before anyone reads */
#else
    (void)decoded;
#endif
    cur->in = in;
    if (st != MS_OK) return st;
    if (cur->range == e->n_ranges) {
        if (in != end)
            return ms_err_set(err, MS_E_MODEL, "pack: %lld image bytes left over", (long long)(end - in));
        cur->done = 1;
    }
    return MS_OK;
}

ms_status ms_pack_decode_image(uint8_t *buf, int64_t buf_bytes, const ms_pack_entry *e,
                               const int64_t *pos, uint8_t *scratch, int use_simd, ms_err *err) {
    ms_pack_cursor c;
    ms_pack_cursor_init(&c, e);
    ms_status st = ms_pack_decode_upto(buf, buf_bytes, e, pos, &c, INT64_MAX, scratch, use_simd, err);
    if (st == MS_OK && !c.done)     /* cannot happen: with everything landed it decodes to the end */
        return ms_err_set(err, MS_E_MODEL, "pack: image not decoded to its end");
    return st;
}

/* ----------------------------------------------------------------- writer */

struct ms_pack_writer {
    char *path, *tmp;
    int anon;                   /* 1: fd is an unnamed O_TMPFILE file, linked as tmp at finish */
    int fd;
    int dfd;                    /* the same file with O_DIRECT, for the images (4096-aligned
                                   and padded): no copy into the page cache; -1 = none */
    uint64_t table_hash, sums_hash;
    int64_t at;                 /* next image offset */
    uint8_t *img;               /* scratch for one image */
    int64_t img_cap;
    XXH3_state_t *xs;           /* the ranges' hash, before and after the decode back */
    uint8_t *scratch;           /* the decoder's, MS_PACK_CHUNK_BYTES */
    uint8_t *index;             /* serialized entries */
    int64_t index_len, index_cap;
    int64_t n_entries;
};

ms_status ms_pack_writer_open(const char *path, uint64_t table_hash, uint64_t sums_hash,
                              ms_pack_writer **out, ms_err *err) {
    *out = NULL;
    ms_pack_writer *w = calloc(1, sizeof *w);
    if (!w) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    w->fd = w->dfd = -1;
    w->path = strdup(path);
    w->tmp = malloc(strlen(path) + 5);
    w->scratch = malloc((size_t)R);
    w->xs = XXH3_createState();
    if (!w->path || !w->tmp || !w->scratch || !w->xs) { ms_pack_writer_abort(w); return ms_err_set(err, MS_E_NOMEM, "out of memory"); }
    sprintf(w->tmp, "%s.tmp", path);
    (void)unlink(w->tmp);               /* a leftover of a run killed before this writer kept it unnamed */
    /* unnamed until it is complete: a killed run leaves nothing behind */
    char *slash = strrchr(w->path, '/');
    if (slash) *slash = '\0';
    w->fd = open(slash ? (slash == w->path ? "/" : w->path) : ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (slash) *slash = '/';
    w->anon = w->fd >= 0;
    if (!w->anon) w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);   /* no O_TMPFILE here */
    if (w->fd < 0) {
        ms_err_set(err, MS_E_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
        ms_pack_writer_abort(w);
        return MS_E_IO;
    }
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", w->fd);
    w->dfd = open(w->anon ? self : w->tmp, O_WRONLY | O_DIRECT | O_CLOEXEC);     /* refused on some filesystems */
    w->table_hash = table_hash;
    w->sums_hash = sums_hash;
    w->at = MS_PACK_ALIGN;
    *out = w;
    return MS_OK;
}

static ms_status write_all(int fd, const uint8_t *p, int64_t n, int64_t off, const char *path, ms_err *err) {
    while (n > 0) {
        ssize_t k = pwrite(fd, p, (size_t)(n < ((int64_t)1 << 30) ? n : (int64_t)1 << 30), (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return ms_err_set(err, MS_E_IO, "%s: write failed: %s", path, k < 0 ? strerror(errno) : "no progress");
        p += k; n -= k; off += k;
    }
    return MS_OK;
}

static ms_status grow(uint8_t **p, int64_t *cap, int64_t need, ms_err *err) {
    if (need <= *cap) return MS_OK;
    int64_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    uint8_t *q = realloc(*p, (size_t)c);
    if (!q) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    *p = q;
    *cap = c;
    return MS_OK;
}

/* As grow, 4096-aligned (for O_DIRECT); the old contents are not kept. */
static ms_status grow_aligned(uint8_t **p, int64_t *cap, int64_t need, ms_err *err) {
    if (need <= *cap) return MS_OK;
    int64_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    free(*p);
    *p = aligned_alloc(MS_PACK_ALIGN, (size_t)c);
    *cap = *p ? c : 0;
    return *p ? MS_OK : ms_err_set(err, MS_E_NOMEM, "out of memory");
}

/* Write an image (len bytes at w->img) at w->at: with O_DIRECT when the file
 * takes it (padded with zeros to span, which a hole would read as anyway),
 * else through the page cache. */
static ms_status write_image(ms_pack_writer *w, int64_t len, int64_t span, ms_err *err) {
    if (w->dfd >= 0) {
        memset(w->img + len, 0, (size_t)(span - len));
        int64_t done = 0;
        while (done < span) {
            ssize_t k = pwrite(w->dfd, w->img + done, (size_t)(span - done), (off_t)(w->at + done));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0 || k % MS_PACK_ALIGN) break;
            done += k;
        }
        if (done == span) return MS_OK;
        close(w->dfd);          /* refused or short: the page cache from here on (rewriting all) */
        w->dfd = -1;
    }
    return write_all(w->fd, w->img, len, w->at, w->tmp, err);
}

/* XXH3-64 of the region's ranges, in order */
static uint64_t ranges_hash(XXH3_state_t *xs, const ms_pack_range *ranges, int n_ranges,
                            const int64_t *pos, const uint8_t *buf) {
    XXH3_64bits_reset(xs);
    for (int i = 0; i < n_ranges; i++) XXH3_64bits_update(xs, buf + pos[i], (size_t)ranges[i].n_bytes);
    return XXH3_64bits_digest(xs);
}

ms_status ms_pack_writer_add(ms_pack_writer *w, const ms_pack_range *ranges, int n_ranges,
                             const int64_t *pos, uint8_t *buf, int64_t buf_bytes,
                             int64_t *image_bytes, ms_err *err) {
    *image_bytes = 0;
    int64_t bound = 0, raw = 0;
    for (int i = 0; i < n_ranges; i++) {
        bound += ms_pack_range_bound(ranges[i].n_bytes);
        raw += ranges[i].n_bytes;
    }
    ms_status st = grow_aligned(&w->img, &w->img_cap, (bound + MS_PACK_ALIGN - 1) / MS_PACK_ALIGN * MS_PACK_ALIGN, err);
    if (st != MS_OK) return st;
    /* encode; the image goes at the end of the buffer (shift = buf_bytes - its
     * 4096-rounded size), and every chunk's output but the last must end at or
     * before the next chunk's input: out_end(k) <= shift + prefix(k + 1) */
    int64_t len = 0, need = 0;
    for (int i = 0; i < n_ranges; i++) {
        const int64_t n = ranges[i].n_bytes;
        for (int64_t at = 0; at < n; at += R) {
            const int64_t nc = n - at < R ? n - at : R;
            len += encode_chunk(buf + pos[i] + at, nc, w->img + len);
            const int last = i == n_ranges - 1 && at + nc == n;
            if (!last && pos[i] + at + nc - len > need) need = pos[i] + at + nc - len;
        }
    }
    const int64_t span = (len + MS_PACK_ALIGN - 1) / MS_PACK_ALIGN * MS_PACK_ALIGN;
    const int64_t shift = (buf_bytes - span) / MS_PACK_ALIGN * MS_PACK_ALIGN;
    if (len >= raw || shift < 0 || shift < need) return MS_OK;
    /* every image decodes, in place, to the bytes it was made of, or it is not
     * written: decoded back over the raw bytes themselves, compared by hash */
    const uint64_t want = ranges_hash(w->xs, ranges, n_ranges, pos, buf);
    memcpy(buf + shift, w->img, (size_t)len);
    ms_pack_entry e = { n_ranges, ranges, w->at, len, shift, raw, NULL };
    st = ms_pack_decode_image(buf, buf_bytes, &e, pos, w->scratch, 1, err);
    if (st == MS_OK && ranges_hash(w->xs, ranges, n_ranges, pos, buf) != want)
        st = ms_err_set(err, MS_E_INTERNAL, "pack: an image did not decode to its bytes");
    if (st != MS_OK) return st;
    if ((st = write_image(w, len, span, err)) != MS_OK) return st;
    const int64_t nh = n_hashes_of(len);
    if ((st = grow(&w->index, &w->index_cap, w->index_len + INDEX_ENTRY_BYTES +
                   (int64_t)n_ranges * INDEX_RANGE_BYTES + 8 * nh, err)) != MS_OK) return st;
    uint8_t *q = w->index + w->index_len;
    ms_put32(q, (uint32_t)n_ranges);
    ms_put32(q + 4, 0);
    ms_put64(q + 8, (uint64_t)w->at);
    ms_put64(q + 16, (uint64_t)len);
    ms_put64(q + 24, (uint64_t)shift);
    ms_put64(q + 32, (uint64_t)raw);
    q += INDEX_ENTRY_BYTES;
    for (int i = 0; i < n_ranges; i++, q += INDEX_RANGE_BYTES) {
        ms_put32(q, (uint32_t)ranges[i].shard);
        ms_put32(q + 4, 0);
        ms_put64(q + 8, (uint64_t)ranges[i].offset);
        ms_put64(q + 16, (uint64_t)ranges[i].n_bytes);
    }
    for (int64_t b = 0; b < nh; b++, q += 8)
        ms_put64(q, XXH3_64bits(w->img + b * HB, (size_t)(len - b * HB < HB ? len - b * HB : HB)));
    w->index_len = q - w->index;
    w->at += span;
    w->n_entries++;
    *image_bytes = len;
    return MS_OK;
}

ms_status ms_pack_writer_finish(ms_pack_writer *w, ms_err *err) {
    uint8_t h[HEADER_BYTES] = { 0 };
    memcpy(h, MAGIC, 8);
    ms_put32(h + 8, 1);
    ms_put32(h + 12, (uint32_t)R);
    ms_put64(h + 16, w->table_hash);
    ms_put64(h + 24, w->sums_hash);
    ms_put64(h + 32, (uint64_t)w->n_entries);
    ms_put64(h + 40, (uint64_t)w->at);
    ms_put64(h + 48, (uint64_t)w->index_len);
    ms_put64(h + 56, XXH3_64bits(w->index, (size_t)w->index_len));
    ms_put64(h + 64, XXH3_64bits(h, 64));
    ms_status st = write_all(w->fd, w->index, w->index_len, w->at, w->tmp, err);
    if (st == MS_OK) st = write_all(w->fd, h, HEADER_BYTES, 0, w->tmp, err);
    if (st == MS_OK && fsync(w->fd) != 0) st = ms_err_set(err, MS_E_IO, "%s: fsync failed: %s", w->tmp, strerror(errno));
    if (st == MS_OK && w->anon) {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", w->fd);
        if (linkat(AT_FDCWD, self, AT_FDCWD, w->tmp, AT_SYMLINK_FOLLOW) != 0)
            st = ms_err_set(err, MS_E_IO, "%s: cannot link the written file: %s", w->tmp, strerror(errno));
        w->anon = 0;                    /* named now: abort removes it */
    }
    /* the engine reads the pack with O_DIRECT: written pages left in the page
     * cache would only make its first reads invalidate them (and hold memory) */
    if (st == MS_OK) (void)posix_fadvise(w->fd, 0, 0, POSIX_FADV_DONTNEED);
    if (st == MS_OK && close(w->fd) != 0) st = ms_err_set(err, MS_E_IO, "%s: close failed: %s", w->tmp, strerror(errno));
    w->fd = -1;
    if (w->dfd >= 0) close(w->dfd);
    w->dfd = -1;
    if (st == MS_OK && rename(w->tmp, w->path) != 0)
        st = ms_err_set(err, MS_E_IO, "rename %s -> %s: %s", w->tmp, w->path, strerror(errno));
    if (st != MS_OK) { ms_pack_writer_abort(w); return st; }
    free(w->path); free(w->tmp); free(w->img); if (w->xs) XXH3_freeState(w->xs); free(w->scratch); free(w->index);
    free(w);
    return MS_OK;
}

void ms_pack_writer_abort(ms_pack_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->dfd >= 0) close(w->dfd);
    if (w->tmp && !w->anon) unlink(w->tmp);
    free(w->path); free(w->tmp); free(w->img); if (w->xs) XXH3_freeState(w->xs); free(w->scratch); free(w->index);
    free(w);
}

/* ----------------------------------------------------------------- reader */

struct ms_pack {
    char *path;
    ms_pack_entry *entries;     /* sorted by (shard, offset) of the first range */
    ms_pack_range *ranges;
    uint64_t *hashes;
    int64_t n_entries, n_ranges;
};

static ms_status read_at(int fd, uint8_t *p, int64_t n, int64_t off, const char *path, ms_err *err) {
    while (n > 0) {
        ssize_t k = pread(fd, p, (size_t)n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return ms_err_set(err, MS_E_IO, "%s: read: %s", path, strerror(errno));
        if (k == 0) return ms_err_set(err, MS_E_MODEL, "%s: truncated", path);
        p += k; n -= k; off += k;
    }
    return MS_OK;
}

static int range_cmp(const ms_pack_range *a, const ms_pack_range *b) {
    if (a->shard != b->shard) return a->shard < b->shard ? -1 : 1;
    if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
    return 0;
}

static int entry_cmp(const void *a, const void *b) {
    const ms_pack_entry *x = a, *y = b;
    return range_cmp(&x->ranges[0], &y->ranges[0]);
}

/* The header's fields past the checks of pack_header. */
typedef struct pack_hdr {
    uint64_t n_entries, ix_off, ix_len, ix_hash;
} pack_hdr;

/* Read and check the header of the pack open on fd (fsize bytes): magic and
 * header hash, version and chunk size, the checkpoint's table and the
 * sidecar's content, the index inside the file. */
static ms_status pack_header(int fd, int64_t fsize, const char *path, const ms_ckpt *ck, const ms_sums *sums,
                             pack_hdr *hd, ms_err *err) {
    uint8_t h[HEADER_BYTES];
    ms_status st = read_at(fd, h, HEADER_BYTES, 0, path, err);
    if (st != MS_OK) return st;
    if (memcmp(h, MAGIC, 8) != 0 || ms_get64(h + 64) != XXH3_64bits(h, 64))
        return ms_err_set(err, MS_E_MODEL, "%s: not a moestream pack (bad magic or header hash)", path);
    if (ms_get32(h + 8) != 1 || ms_get32(h + 12) != (uint32_t)R)
        return ms_err_set(err, MS_E_MODEL, "%s: version %u, chunk %u bytes; this build reads version 1, %lld",
                          path, ms_get32(h + 8), ms_get32(h + 12), (long long)R);
    if (ms_get64(h + 16) != ms_sums_table_hash(ck))
        return ms_err_set(err, MS_E_MODEL, "%s was packed from another checkpoint (or tensors moved since):"
                          " run 'moestream pack' again", path);
    if (ms_get64(h + 24) != ms_sums_content_hash(sums))
        return ms_err_set(err, MS_E_MODEL, "%s was packed from other bytes than the checksum sidecar describes"
                          " (the checkpoint or its sidecar changed since): run 'moestream pack' again", path);
    *hd = (pack_hdr){ ms_get64(h + 32), ms_get64(h + 40), ms_get64(h + 48), ms_get64(h + 56) };
    if (hd->ix_off > (uint64_t)fsize || hd->ix_len > (uint64_t)fsize - hd->ix_off ||
        hd->n_entries > hd->ix_len / INDEX_ENTRY_BYTES)
        return ms_err_set(err, MS_E_MODEL, "%s: index outside the file (truncated?)", path);
    return MS_OK;
}

/* The index's first pass: the ranges and image hashes its entries hold, each
 * entry checked to lie inside the index. */
static ms_status count_index(const uint8_t *ix, const pack_hdr *hd, int64_t *n_ranges, int64_t *n_hashes,
                             const char *path, ms_err *err) {
    *n_ranges = *n_hashes = 0;
    for (uint64_t k = 0, at = 0; k < hd->n_entries; k++) {
        if (hd->ix_len - at < INDEX_ENTRY_BYTES) return ms_err_set(err, MS_E_MODEL, "%s: short index", path);
        const uint32_t nr = ms_get32(ix + at);
        const uint64_t ib = ms_get64(ix + at + 16);
        const uint64_t nh = ib <= hd->ix_off ? (uint64_t)n_hashes_of((int64_t)ib) : UINT64_MAX / 16;
        const uint64_t left = hd->ix_len - at - INDEX_ENTRY_BYTES;
        if (nr == 0 || left / INDEX_RANGE_BYTES < nr || (left - (uint64_t)nr * INDEX_RANGE_BYTES) / 8 < nh)
            return ms_err_set(err, MS_E_MODEL, "%s: short index", path);
        *n_ranges += nr;
        *n_hashes += (int64_t)nh;
        at += INDEX_ENTRY_BYTES + (uint64_t)nr * INDEX_RANGE_BYTES + 8 * nh;
    }
    return MS_OK;
}

/* Fill entry k of p from the index bytes at *q (advanced past it), its ranges
 * from p->ranges[*r] and its hashes from p->hashes[*hk] on (both advanced). */
static ms_status parse_entry(ms_pack *p, uint64_t k, const uint8_t **q, const pack_hdr *hd, const ms_ckpt *ck,
                             int64_t *r, int64_t *hk, const char *path, ms_err *err) {
    const uint8_t *x = *q;
    ms_pack_entry *e = &p->entries[k];
    const int64_t ix_off = (int64_t)hd->ix_off;
    e->n_ranges = (int)ms_get32(x);
    e->image_off = (int64_t)ms_get64(x + 8);
    e->image_bytes = (int64_t)ms_get64(x + 16);
    e->shift = (int64_t)ms_get64(x + 24);
    e->raw_bytes = (int64_t)ms_get64(x + 32);
    e->ranges = &p->ranges[*r];
    /* the region's buffer holds its ranges each at its file offset's place in a
     * page (up to a page of padding per range, and one for the aligned read), so
     * the image's shift may exceed the raw bytes by that much; the store checks
     * the image against the buffer's real size before any read (land.c) */
    if (e->image_off < MS_PACK_ALIGN || e->image_off % MS_PACK_ALIGN || e->image_bytes <= 0 ||
        e->image_off > ix_off || e->image_bytes > ix_off - e->image_off || e->n_ranges <= 0 ||
        e->shift < 0 || e->shift % MS_PACK_ALIGN || e->raw_bytes <= 0 ||
        e->shift - e->raw_bytes > ((int64_t)e->n_ranges + 1) * 2 * MS_PACK_ALIGN)
        return ms_err_set(err, MS_E_MODEL, "%s: entry %llu is malformed", path, (unsigned long long)k);
    const int ns = ms_ckpt_n_shards(ck);
    int64_t sum = 0;
    x += INDEX_ENTRY_BYTES;
    for (int i = 0; i < e->n_ranges; i++, x += INDEX_RANGE_BYTES, (*r)++) {
        ms_pack_range *g = &p->ranges[*r];
        g->shard = (int)ms_get32(x);
        g->offset = (int64_t)ms_get64(x + 8);
        g->n_bytes = (int64_t)ms_get64(x + 16);
        if (g->shard < 0 || g->shard >= ns || g->offset < 0 || g->n_bytes <= 0 ||
            g->n_bytes > ms_ckpt_shard(ck, g->shard)->file_bytes ||
            g->offset > ms_ckpt_shard(ck, g->shard)->file_bytes - g->n_bytes)
            return ms_err_set(err, MS_E_MODEL, "%s: entry %llu range %d lies outside its shard", path,
                              (unsigned long long)k, i);
        sum += g->n_bytes;
    }
    if (sum != e->raw_bytes)
        return ms_err_set(err, MS_E_MODEL, "%s: entry %llu is malformed", path, (unsigned long long)k);
    e->hashes = &p->hashes[*hk];
    for (int64_t b = 0; b < n_hashes_of(e->image_bytes); b++, x += 8) p->hashes[(*hk)++] = ms_get64(x);
    *q = x;
    return MS_OK;
}

/* Read the index of the pack open on fd and fill p's entries, sorted. */
static ms_status load_index(ms_pack *p, int fd, const pack_hdr *hd, const ms_ckpt *ck, const char *path,
                            ms_err *err) {
    uint8_t *ix = malloc(hd->ix_len ? hd->ix_len : 1);
    if (!ix) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    ms_status st = read_at(fd, ix, (int64_t)hd->ix_len, (int64_t)hd->ix_off, path, err);
    if (st == MS_OK && XXH3_64bits(ix, hd->ix_len) != hd->ix_hash)
        st = ms_err_set(err, MS_E_MODEL, "%s: index hash mismatch", path);
    /* two passes: count the ranges and image hashes, then fill */
    int64_t n_ranges = 0, n_hashes = 0;
    if (st == MS_OK) st = count_index(ix, hd, &n_ranges, &n_hashes, path, err);
    if (st == MS_OK) {
        p->entries = calloc(hd->n_entries ? hd->n_entries : 1, sizeof *p->entries);
        p->ranges = calloc(n_ranges ? (size_t)n_ranges : 1, sizeof *p->ranges);
        p->hashes = calloc(n_hashes ? (size_t)n_hashes : 1, sizeof *p->hashes);
        p->path = strdup(path);
        if (!p->entries || !p->ranges || !p->hashes || !p->path) st = ms_err_set(err, MS_E_NOMEM, "out of memory");
    }
    int64_t r = 0, hk = 0;
    const uint8_t *q = ix;
    for (uint64_t k = 0; k < hd->n_entries && st == MS_OK; k++)
        st = parse_entry(p, k, &q, hd, ck, &r, &hk, path, err);
    free(ix);
    if (st != MS_OK) return st;
    p->n_entries = (int64_t)hd->n_entries;
    p->n_ranges = n_ranges;
    qsort(p->entries, hd->n_entries, sizeof *p->entries, entry_cmp);
    for (int64_t k = 1; k < p->n_entries; k++)
        if (entry_cmp(&p->entries[k - 1], &p->entries[k]) == 0)
            return ms_err_set(err, MS_E_MODEL, "%s: two entries start at the same range", path);
    return MS_OK;
}

ms_status ms_pack_load(const char *path, const ms_ckpt *ck, const ms_sums *sums, ms_pack **out,
                       ms_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ms_err_set(err, MS_E_IO, "%s: %s", path, strerror(errno));
    ms_pack *p = calloc(1, sizeof *p);
    struct stat sb;
    pack_hdr hd = { 0, 0, 0, 0 };
    ms_status st = fstat(fd, &sb) == 0 ? MS_OK : ms_err_set(err, MS_E_IO, "%s: %s", path, strerror(errno));
    if (st == MS_OK && !p) st = ms_err_set(err, MS_E_NOMEM, "out of memory");
    if (st == MS_OK) st = pack_header(fd, sb.st_size, path, ck, sums, &hd, err);
    if (st == MS_OK) st = load_index(p, fd, &hd, ck, path, err);
    close(fd);
    if (st != MS_OK) { ms_pack_free(p); return st; }
    *out = p;
    return MS_OK;
}

void ms_pack_free(ms_pack *p) {
    if (!p) return;
    free(p->path);
    free(p->entries);
    free(p->ranges);
    free(p->hashes);
    free(p);
}

int64_t ms_pack_n_blocks(const ms_pack_entry *e) { return n_hashes_of(e->image_bytes); }

ms_status ms_pack_check_blocks(const ms_pack_entry *e, const uint8_t *img, int64_t b0, int64_t b1,
                               const char *path, ms_err *err) {
    for (int64_t b = b0; b < b1; b++) {
        const int64_t n = e->image_bytes - b * HB < HB ? e->image_bytes - b * HB : HB;
        if (XXH3_64bits(img + b * HB, (size_t)n) != e->hashes[b])
            return ms_err_set(err, MS_E_IO, "%s: image at byte %lld (for shard %d, offset %lld): block %lld"
                              " checksum mismatch", path, (long long)e->image_off, e->ranges[0].shard,
                              (long long)e->ranges[0].offset, (long long)b);
    }
    return MS_OK;
}

const char *ms_pack_path(const ms_pack *p) { return p->path; }
int64_t ms_pack_n_entries(const ms_pack *p) { return p->n_entries; }
const ms_pack_entry *ms_pack_entry_at(const ms_pack *p, int64_t i) { return &p->entries[i]; }

const ms_pack_entry *ms_pack_find(const ms_pack *p, const ms_pack_range *ranges, int n_ranges) {
    int64_t a = 0, b = p->n_entries;
    while (a < b) {
        int64_t m = a + (b - a) / 2;
        if (range_cmp(&p->entries[m].ranges[0], &ranges[0]) < 0) a = m + 1;
        else b = m;
    }
    if (a == p->n_entries) return NULL;
    const ms_pack_entry *e = &p->entries[a];
    if (e->n_ranges != n_ranges) return NULL;
    for (int i = 0; i < n_ranges; i++)
        if (e->ranges[i].shard != ranges[i].shard || e->ranges[i].offset != ranges[i].offset ||
            e->ranges[i].n_bytes != ranges[i].n_bytes) return NULL;
    return e;
}
