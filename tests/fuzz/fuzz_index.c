/* tests/fuzz/fuzz_index.c - libFuzzer target: model.safetensors.index.json.
 *
 * Owns: fuzzing ms_index_parse (format/safetensors.h) on arbitrary bytes.
 * Idea: every (name, shard file) pair the parser hands out must be usable as
 *   is: both non-NULL, the file a plain name (non-empty, no '/', no ".."),
 *   so it can never point outside the model directory; names are unique.
 *   A failure needs a negative status and a one-line message.
 * Does not: check that shards exist (ms_ckpt_open; tests/t_corrupt.sh).
 */
#include "format/safetensors.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static int on_entry(void *user, const char *name, const char *file, ms_err *err) {
    names *s = user;
    (void)err;
    if (!name || !file) fz_fail("NULL name or file");
    if (!file[0] || strchr(file, '/') || strstr(file, ".."))
        fz_fail("shard file '%s' escapes the model directory", file);
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0) fz_fail("name '%s' handed out twice", name);
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 16;
        char **v = realloc(s->v, nc * sizeof *v);
        if (!v) return ms_err_set(err, MS_E_NOMEM, "fuzz: out of memory");
        s->v = v;
        s->cap = nc;
    }
    s->v[s->n] = strdup(name);
    if (!s->v[s->n]) return ms_err_set(err, MS_E_NOMEM, "fuzz: out of memory");
    s->n++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    names s = { NULL, 0, 0 };
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_index_parse((const char *)data, size, "fuzz.index.json", on_entry, &s, &err);
    if (st != MS_OK && (!err.msg[0] || strchr(err.msg, '\n'))) fz_fail("bad failure message '%s'", err.msg);
    if (st == MS_OK && err.msg[0]) fz_fail("success with message '%s'", err.msg);
    for (size_t i = 0; i < s.n; i++) free(s.v[i]);
    free(s.v);
    return 0;
}
