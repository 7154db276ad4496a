/* format/json_util.h - small helpers shared by the JSON readers of format/.
 *
 * Owns: naming jansson value types in messages, and naming the key behind a
 *   duplicate-key parse error.
 * Idea: the readers of config.json and model.safetensors.index.json both treat
 *   their input as untrusted and report "expected X, found Y"; the type names
 *   live here so both say it the same way. (Reading the files, checked and
 *   bounded, is base/file.h.)
 * Invariants: none beyond the contracts below (no state).
 * Does not: parse JSON itself (jansson does), open files.
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

/* After json_loadb(text, n, JSON_REJECT_DUPLICATES, je) failed with
 * json_error_duplicate_key, recover the repeated key (jansson's own message
 * does not name it): the error position is just past the key's closing quote.
 * Writes the decoded key, truncated to cap - 1 bytes, into out and returns 0;
 * returns -1 if the key cannot be recovered. No allocation survives the call. */
int ms_json_dup_key(const char *text, size_t n, const json_error_t *je,
                    char *out, size_t cap);

#endif
