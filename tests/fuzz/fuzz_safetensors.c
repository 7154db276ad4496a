/* tests/fuzz/fuzz_safetensors.c - libFuzzer target: one safetensors shard.
 *
 * Owns: fuzzing ms_st_parse_header (format/safetensors.h) on arbitrary bytes.
 * Idea: the input is a whole shard file (8-byte length, JSON header, data), so
 *   file_bytes = the input size. Besides "no crash, no leak, no UB", every
 *   tensor the parser accepts is checked against the invariants the rest of
 *   the engine relies on (safetensors.h):
 *     - known dtype, 0 <= n_dim <= MS_MAX_DIMS, non-negative dims;
 *     - numel = product of dims, n_bytes = numel * dtype size;
 *     - 8 + N <= offset and offset + n_bytes <= file_bytes;
 *     - callbacks arrive in non-decreasing offset order, and non-empty
 *       ranges do not overlap;
 *   and a failure must come with a negative status and a one-line message.
 * Does not: open files (ms_ckpt_open is covered by tests/t_corrupt.sh).
 */
#include "format/safetensors.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

typedef struct seen {
    int64_t data_offset, file_bytes;
    int64_t last_off, max_end;
    int64_t n;
} seen;

static int on_tensor(void *user, const ms_tensor_info *t, ms_err *err) {
    seen *s = user;
    (void)err;
    if (!t->name) fz_fail("tensor without a name");
    int64_t esz = ms_dtype_size(t->dtype);
    if (esz <= 0) fz_fail("'%s': dtype %d out of range", t->name, (int)t->dtype);
    if (t->n_dim < 0 || t->n_dim > MS_MAX_DIMS) fz_fail("'%s': n_dim %d", t->name, t->n_dim);
    int64_t numel = 1;
    for (int i = 0; i < t->n_dim; i++) {
        if (t->shape[i] < 0) fz_fail("'%s': negative dim", t->name);
        if (ms_mul_i64(numel, t->shape[i], &numel) != 0) fz_fail("'%s': numel overflow accepted", t->name);
    }
    int64_t need;
    if (numel != t->numel) fz_fail("'%s': numel %lld != product %lld", t->name, (long long)t->numel, (long long)numel);
    if (ms_mul_i64(numel, esz, &need) != 0 || need != t->n_bytes)
        fz_fail("'%s': n_bytes %lld != numel * dtype size", t->name, (long long)t->n_bytes);
    if (t->offset < s->data_offset || t->offset > s->file_bytes || t->n_bytes > s->file_bytes - t->offset)
        fz_fail("'%s': [%lld, +%lld) outside the data section [%lld, %lld)", t->name, (long long)t->offset,
                (long long)t->n_bytes, (long long)s->data_offset, (long long)s->file_bytes);
    if (t->offset < s->last_off) fz_fail("'%s': callbacks not in offset order", t->name);
    if (t->n_bytes > 0) {
        if (t->offset < s->max_end) fz_fail("'%s': overlapping range accepted", t->name);
        s->max_end = t->offset + t->n_bytes;
    }
    s->last_off = t->offset;
    s->n++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    seen s;
    memset(&s, 0, sizeof s);
    s.file_bytes = (int64_t)size;
    if (size >= 8) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | data[i];
        s.data_offset = hlen > (uint64_t)size ? (int64_t)size : 8 + (int64_t)hlen;
    }
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_st_parse_header(data, size, (int64_t)size, "fuzz.safetensors", 0,
                                      on_tensor, &s, &err);
    if (st == MS_OK) {
        if (err.status != MS_OK || err.msg[0]) fz_fail("success with an error message: %s", err.msg);
    } else {
        if (st > 0) fz_fail("positive status %d", (int)st);
        if (!err.msg[0] || err.status != st) fz_fail("failure %d without its message", (int)st);
        if (strchr(err.msg, '\n')) fz_fail("message is not one line: %s", err.msg);
    }
    return 0;
}
