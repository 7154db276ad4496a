/* tests/fuzz/fuzz_chat_json.c - libFuzzer target: the chat module's JSON writer.
 *
 * Owns: fuzzing ms_chat_json_normalize (text/chat.h), which rewrites untrusted
 *   tool definitions and call arguments before they reach the model.
 * Idea: on arbitrary bytes it either fails with MS_E_USAGE and a message or
 *   returns NUL-terminated text that (1) normalizes to itself (idempotent:
 *   floats as shortest repr read back to the same double, escapes stable) and
 *   (2) with keys sorted equals sorting the unsorted output.
 * Does not: compare with Python's json.dumps (test_chat.c).
 */
#include "text/chat.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *in = fz_strndup(data, size);
    if (!in) return 0;
    for (int sort = 0; sort < 2; sort++) {
        char *a = NULL, *b = NULL;
        ms_err err;
        ms_err_clear(&err);
        ms_status st = ms_chat_json_normalize(in, size, sort, &a, &err);
        if (st != MS_OK) {
            if (st != MS_E_USAGE && st != MS_E_NOMEM) fz_fail("status %d: %s", (int)st, err.msg);
            if (!err.msg[0]) fz_fail("failure without a message");
            free(a);
            continue;
        }
        if (!a) fz_fail("success without output");
        if (ms_chat_json_normalize(a, strlen(a), sort, &b, &err) != MS_OK)
            fz_fail("output does not parse again: %s | %s", err.msg, a);
        if (strcmp(a, b) != 0) fz_fail("not idempotent (sort %d):\n%s\n%s", sort, a, b);
        free(b);
        if (sort == 0) {
            char *s1 = NULL, *s2 = NULL;
            if (ms_chat_json_normalize(a, strlen(a), 1, &s1, &err) != MS_OK ||
                ms_chat_json_normalize(in, size, 1, &s2, &err) != MS_OK)
                fz_fail("sorted normalize failed: %s", err.msg);
            if (strcmp(s1, s2) != 0) fz_fail("sort(normalize(x)) != sort-normalize(x)");
            free(s1);
            free(s2);
        }
        free(a);
    }
    free(in);
    return 0;
}
