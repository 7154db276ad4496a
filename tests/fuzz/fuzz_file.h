/* tests/fuzz/fuzz_file.h - what the file-format targets share: edits of a
 * valid file (the template), checksums fixed up after them, and a memory file
 * the loaders open by path.
 *
 * Owns: fz_edit() (template + input -> edited image), fz_mem_* (one memfd and
 *   its /proc/self/fd path), fz_slurp(), fz_tmp_path(), fz_model_dir(),
 *   fz_get / fz_put (little-endian fields).
 * Idea: a loader behind a trailing checksum sees random bytes only as a
 *   checksum mismatch. So an input of these targets is not a file: it is a
 *   list of edits to a valid file the target made once at startup with the
 *   engine's own writer, and bits of its first byte ask the target to
 *   recompute the format's checksums after the edits, which takes the fuzzer
 *   past them to the checks behind. An input:
 *
 *     byte 0   flags: bit 0 fix the outer checksum up after the edits, bit 1
 *              the inner one (formats with two); bits 2..7 the target's
 *     byte 1   the target's argument (which region, template, decoder...)
 *     then edits until the input ends; each is an op byte o and operands
 *     (a u24 is 3 bytes little-endian; offsets wrap at the image's size):
 *       o % 6 == 0  FIELD   u8 field (mod the target's field table), u8 kind,
 *                           kind % 4: 0 the next 8 bytes (LE); 1 the template's
 *                           value + a signed byte; 2 an edge value chosen by a
 *                           byte (0, 1, -1, 2^31 - 1, 2^32, 2^63 - 1, ...);
 *                           3 the template's value times 2^(byte % 8)
 *       o % 6 == 1  PATCH   u24 offset, u8 n, n bytes over the image
 *       o % 6 == 2  RESIZE  u24 size: truncate, or extend with zeros
 *       o % 6 == 3  ERASE   u24 offset, u8 n: remove n bytes
 *       o % 6 == 4  INSERT  u24 offset, u8 n, n bytes
 *       o % 6 == 5  FORMAT  u8 argument: the target's own edit (fz_format.op)
 *
 *   A field is (offset, width 1/4/8) in the template's layout: header fields
 *   and the first records of a table, so a value lands where the loader
 *   reads it. The image is capped at FZ_MAX_IMAGE bytes.
 * Invariants: the image buffer is the target's, reused from input to input;
 *   the memfd is made once and rewritten for every input, then cut to the
 *   image's size (a regular file, as base/file.c requires; /proc/self/fd/N
 *   reopens it at offset 0).
 * Does not: know any format (the target passes its field table, its edit and
 *   its fixup).
 */
#ifndef MS_FUZZ_FILE_H
#define MS_FUZZ_FILE_H

#include "fuzz_fixture.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FZ_MAX_IMAGE ((size_t)4 << 20)

typedef struct fz_field {
    size_t off;
    int width;                  /* 1, 4 or 8 bytes, little-endian */
} fz_field;

typedef struct fz_img {
    uint8_t *p;
    size_t n, cap;
} fz_img;

typedef struct fz_format {
    const uint8_t *tpl;         /* the template */
    size_t tpl_n;
    const fz_field *fields;
    int n_fields;
    void (*op)(fz_img *m, uint8_t arg);     /* FORMAT edit; NULL: none */
} fz_format;

static __attribute__((unused)) uint64_t fz_get(const uint8_t *p, int width) {
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static __attribute__((unused)) void fz_put(uint8_t *p, int width, uint64_t v) {
    for (int i = 0; i < width; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Make room for n bytes (n <= FZ_MAX_IMAGE); new bytes are zero. */
static int fz_img_resize(fz_img *m, size_t n) {
    if (n > FZ_MAX_IMAGE) return -1;
    if (n > m->cap) {
        size_t cap = n + n / 2 + 64;
        uint8_t *p = realloc(m->p, cap);
        if (!p) fz_fail("out of memory");
        m->p = p;
        m->cap = cap;
    }
    if (n > m->n) memset(m->p + m->n, 0, n - m->n);
    m->n = n;
    return 0;
}

/* A reader of the input's operands: missing bytes read as zero. */
typedef struct fz_in {
    const uint8_t *d;
    size_t n, at;
} fz_in;

static uint8_t fz_u8(fz_in *in) { return in->at < in->n ? in->d[in->at++] : 0; }
static size_t fz_u24(fz_in *in) {
    size_t v = fz_u8(in);
    v |= (size_t)fz_u8(in) << 8;
    return v | (size_t)fz_u8(in) << 16;
}

static uint64_t fz_edge(uint8_t k) {
    static const uint64_t v[] = {
        0, 1, 2, UINT64_MAX, 0x7fffffffu, 0x80000000u, 0xffffffffu, (uint64_t)1 << 32,
        (uint64_t)INT64_MAX, (uint64_t)1 << 63, 4096, 4095, 65536, (uint64_t)1 << 20, 7, 8,
    };
    return v[k % (sizeof v / sizeof v[0])];
}

static void fz_field_edit(const fz_format *f, fz_img *m, fz_in *in) {
    const fz_field *fd = &f->fields[fz_u8(in) % f->n_fields];
    const uint8_t kind = fz_u8(in);
    uint64_t v = fd->off + (size_t)fd->width <= f->tpl_n ? fz_get(f->tpl + fd->off, fd->width) : 0;
    switch (kind % 4) {
    case 0: v = 0; for (int i = 0; i < 8; i++) v |= (uint64_t)fz_u8(in) << (8 * i); break;
    case 1: v += (uint64_t)(int64_t)(int8_t)fz_u8(in); break;
    case 2: v = fz_edge(fz_u8(in)); break;
    default: v <<= fz_u8(in) % 8; break;
    }
    if (fd->off + (size_t)fd->width <= m->n) fz_put(m->p + fd->off, fd->width, v);
}

/* The template with the input's edits (see the header comment) in *m. */
static __attribute__((unused)) void fz_edit(const fz_format *f, const uint8_t *d, size_t n, fz_img *m) {
    m->n = 0;
    fz_img_resize(m, f->tpl_n);
    memcpy(m->p, f->tpl, f->tpl_n);
    fz_in in = { d, n, 0 };
    while (in.at < in.n) {
        const uint8_t o = fz_u8(&in);
        switch (o % 6) {
        case 0:
            fz_field_edit(f, m, &in);
            break;
        case 1: {
            const size_t off = m->n ? fz_u24(&in) % m->n : 0, k = fz_u8(&in);
            for (size_t i = 0; i < k; i++) {
                const uint8_t b = fz_u8(&in);
                if (off + i < m->n) m->p[off + i] = b;
            }
            break;
        }
        case 2:
            fz_img_resize(m, fz_u24(&in));
            break;
        case 3: {
            const size_t off = m->n ? fz_u24(&in) % m->n : 0;
            size_t k = fz_u8(&in);
            if (k > m->n - off) k = m->n - off;
            memmove(m->p + off, m->p + off + k, m->n - off - k);
            m->n -= k;
            break;
        }
        case 4: {
            const size_t off = m->n ? fz_u24(&in) % (m->n + 1) : 0, k = fz_u8(&in), n0 = m->n;
            if (fz_img_resize(m, n0 + k) != 0) { in.at += k; break; }
            memmove(m->p + off + k, m->p + off, n0 - off);
            for (size_t i = 0; i < k; i++) m->p[off + i] = fz_u8(&in);
            break;
        }
        default: {
            const uint8_t a = fz_u8(&in);
            if (f->op) f->op(m, a);
            break;
        }
        }
    }
}

/* ---- the memory file ---- */

typedef struct fz_mem {
    int fd;
    char path[64];
} fz_mem;

static __attribute__((unused)) void fz_mem_open(fz_mem *mf) {
    mf->fd = memfd_create("moestream-fuzz", MFD_CLOEXEC);
    if (mf->fd < 0) fz_fail("memfd_create failed");
    snprintf(mf->path, sizeof mf->path, "/proc/self/fd/%d", mf->fd);
}

/* The memory file now holds exactly p[0..n). */
static __attribute__((unused)) void fz_mem_set(fz_mem *mf, const uint8_t *p, size_t n) {
    for (size_t done = 0; done < n;) {
        const ssize_t k = pwrite(mf->fd, p + done, n - done, (off_t)done);
        if (k <= 0) fz_fail("pwrite to the memory file failed");
        done += (size_t)k;
    }
    if (ftruncate(mf->fd, (off_t)n) != 0) fz_fail("ftruncate failed");   /* shrinks only: pages stay */
}

/* ---- files of the setup ---- */

/* The whole file at path (malloc'd, *n bytes); aborts when it cannot be read. */
static __attribute__((unused)) uint8_t *fz_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fz_fail("cannot open %s", path);
    size_t cap = 1 << 16, k = 0;
    uint8_t *p = malloc(cap);
    for (size_t r; p && (r = fread(p + k, 1, cap - k, f)) > 0;) {
        k += r;
        if (k == cap) p = realloc(p, cap *= 2);
    }
    fclose(f);
    if (!p) fz_fail("out of memory");
    *n = k;
    return p;
}

/* A private path for a scratch file: /dev/shm/NAME.PID (else /tmp). */
static __attribute__((unused)) void fz_tmp_path(char *out, size_t len, const char *name) {
    struct stat sb;
    const char *dir = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(out, len, "%s/%s.%ld", dir, name, (long)getpid());
}

/* The model the targets use: MS_FUZZ_MODEL, default build-fuzz/model (fuzz.mk
 * makes it with tools/msgen.py --preset a). */
static __attribute__((unused)) const char *fz_model_dir(void) {
    const char *dir = getenv("MS_FUZZ_MODEL");
    return dir && dir[0] ? dir : "build-fuzz/model";
}

#endif
