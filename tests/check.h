/* tests/check.h - the minimal test harness every test binary uses.
 *
 * CHECK(cond, fmt, ...) counts a pass or prints the failure with file:line and
 * counts a failure; checks never stop the binary. CHECK_DONE() prints the
 * closing line "NAME: N passed, N failed" and returns the exit code.
 * check_same_file(a, b): 1 when both files can be read and their bytes are
 * equal (saved sessions compared byte for byte). */
#ifndef MS_TESTS_CHECK_H
#define MS_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_n_pass, check_n_fail;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (cond) { check_n_pass++; }                                           \
        else {                                                                  \
            check_n_fail++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, "" __VA_ARGS__);                                    \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

static inline int check_same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        const int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

#define CHECK_DONE(name)                                                        \
    (printf("%s: %d passed, %d failed\n", (name), check_n_pass, check_n_fail),  \
     check_n_fail ? 1 : 0)

#endif
