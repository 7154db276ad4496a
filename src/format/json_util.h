/* format/json_util.h - small helpers shared by the JSON readers of format/.
 *
 * Owns: naming jansson value types in messages, naming the key behind a
 *   duplicate-key parse error, and reading a whole (small) file into memory
 *   with a size cap.
 * Idea: the readers of config.json and model.safetensors.index.json both treat
 *   their input as untrusted and report "expected X, found Y"; the type names
 *   and the capped whole-file read live here so both say it the same way.
 * Invariants: a buffer returned by ms_json_read_file is NUL-terminated (one
 *   extra byte beyond *n) so it can also be used as a C string.
 * Does not: parse JSON itself (jansson does), keep file descriptors open.
 */
#ifndef MS_FORMAT_JSON_UTIL_H
#define MS_FORMAT_JSON_UTIL_H

#include "base/err.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* "object", "array", "string", "integer", "real", "boolean", "null" for a
 * jansson value; "nothing" for NULL. Returns a static string; no allocation. */
const char *ms_json_type_name(const json_t *v);

/* Read the whole file at `path` into a fresh malloc'd buffer (caller frees),
 * refusing files larger than `max_bytes`. On success *out holds n bytes plus a
 * terminating NUL. Errors: MS_E_IO (cannot open / read; message names the path
 * and errno text), MS_E_MODEL (larger than max_bytes or not a regular file),
 * MS_E_NOMEM. Allocates; thread-safe (no shared state). */
ms_status ms_json_read_file(const char *path, int64_t max_bytes, char **out,
                            size_t *n, ms_err *err);

/* After json_loadb(text, n, JSON_REJECT_DUPLICATES, je) failed with
 * json_error_duplicate_key, recover the repeated key (jansson's own message
 * does not name it): the error position is just past the key's closing quote.
 * Writes the decoded key, truncated to cap - 1 bytes, into out and returns 0;
 * returns -1 if the key cannot be recovered. No allocation survives the call. */
int ms_json_dup_key(const char *text, size_t n, const json_error_t *je,
                    char *out, size_t cap);

#endif
