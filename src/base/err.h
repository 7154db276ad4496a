/* base/err.h - status codes and the first-error-wins message record.
 *
 * Owns: the error record that every fallible internal function fills.
 * Idea: a function that can fail takes `ms_err *err` and returns a negative
 *   ms_status on failure after calling ms_err_set(); the FIRST error set on a
 *   record wins, later ones are ignored, so the message names the root cause.
 * Invariants: err->status == MS_OK iff err->msg is empty.
 * Does not: print, exit, or allocate.
 */
#ifndef MS_BASE_ERR_H
#define MS_BASE_ERR_H

#include "moestream.h"

#include <stdarg.h>
#include <stdint.h>

typedef struct ms_err {
    ms_status status;
    char msg[512];
} ms_err;

/* Reset to MS_OK / empty message. */
void ms_err_clear(ms_err *err);

/* Record `status` (must be negative) with a printf-style one-line message,
 * unless an error is already recorded. Returns `status` so callers can write
 * `return ms_err_set(err, MS_E_MODEL, "...")`. err may be NULL. */
ms_status ms_err_set(ms_err *err, ms_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ms_status ms_err_setv(ms_err *err, ms_status status, const char *fmt, va_list ap);

/* Overflow-checked arithmetic on non-negative int64 sizes: return 0 and set
 * *out on success, -1 on overflow or negative input. */
int ms_mul_i64(int64_t a, int64_t b, int64_t *out);
int ms_add_i64(int64_t a, int64_t b, int64_t *out);

/* Always-on invariant check (class 1 errors in STYLE.md): file:line, abort. */
#define MS_ASSERT(cond) \
    do { if (!(cond)) ms_assert_fail(#cond, __FILE__, __LINE__); } while (0)
_Noreturn void ms_assert_fail(const char *what, const char *file, int line);

#endif
