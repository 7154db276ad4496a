/* sample/json_schema.h - a byte-level JSON matcher for structured output.
 *
 * Owns: compiling a JSON Schema (the subset OpenAI's strict mode accepts:
 *   object, properties, required, additionalProperties false, array + items,
 *   string, number, integer, boolean, null, enum / const, anyOf,
 *   $ref / $defs, nesting; annotations are ignored) or "any JSON object" into
 *   a table of nodes, and a matcher state that is advanced byte by byte.
 * Idea: the state is a small set of pushdown stacks (one per live anyOf
 *   alternative), each a stack of frames (value / object / array / string /
 *   number / literal / key). A byte is accepted iff at least one stack can
 *   take it. The state is a plain struct: copy it to try a token's bytes.
 *   Numbers and literals end implicitly: the byte after them pops the frame.
 * Invariants:
 *   1. Never a dead end: from every state reached by accepted bytes, some
 *      byte or the end can be accepted (whitespace runs are bounded by
 *      MS_JSON_MAX_WS, numbers by MS_JSON_MAX_NUM bytes, an object offers ','
 *      only while a property is left, '}' only once every required one is in).
 *   2. Everything accepted up to ms_json_can_end() is a document the schema
 *      validates. Enum values are matched in their compact serialisation and
 *      property names literally (names that need escapes are refused).
 *   3. Deterministic: no randomness, no hashing of pointers; the same bytes
 *      give the same state bits.
 * Does not: know about tokens (sample/mask.c does), allocate while matching
 *   (only ms_json_schema_compile allocates), support keywords outside the
 *   subset (compile refuses and names the keyword).
 */
#ifndef MS_SAMPLE_JSON_SCHEMA_H
#define MS_SAMPLE_JSON_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#define MS_JSON_MAX_DEPTH 32   /* nesting of objects / arrays */
#define MS_JSON_MAX_ALT 8      /* live anyOf alternatives; more are dropped (narrower, never wrong) */
#define MS_JSON_MAX_WS 4       /* whitespace bytes in a row */
#define MS_JSON_MAX_NUM 24     /* bytes of a number before it must end */
#define MS_JSON_MAX_SET 64     /* properties of one object, values of one enum */

typedef struct ms_json_frame {
    uint8_t kind, sub, ws, pad;
    uint16_t pos;              /* literal / key position, pending UTF-8 bytes, number length */
    uint16_t cur;              /* object: current property; string: next-byte range */
    int32_t node;
    uint64_t set;              /* object: properties seen; literal / key: candidates */
} ms_json_frame;

typedef struct ms_json_stack {
    int32_t depth;             /* 0: the root value is complete */
    int32_t ws;                /* trailing whitespace after the root */
    ms_json_frame f[MS_JSON_MAX_DEPTH];
} ms_json_stack;

typedef struct ms_json_state {
    int32_t n;                 /* live stacks; 0 = rejected */
    ms_json_stack s[MS_JSON_MAX_ALT];
} ms_json_state;

typedef struct ms_json_schema ms_json_schema;

/* Compile `schema` (JSON text of n bytes) or, when schema is NULL, "any JSON
 * object" (response_format json_object). Returns NULL on an error with a
 * message in err that names the keyword ("unsupported keyword 'pattern' at
 * #/properties/zip"); *keyword (if not NULL) points into err at the keyword
 * name or is set to "" when the error is not about one keyword.
 * Allocates; free with ms_json_schema_free. Thread-safe after compile (read-only). */
ms_json_schema *ms_json_schema_compile(const char *schema, size_t n, char *err, size_t err_len);
void ms_json_schema_free(ms_json_schema *js);

/* The state before the first byte of the document. */
void ms_json_start(const ms_json_schema *js, ms_json_state *st);
/* Advance *st by n bytes. Returns 1 when every byte was accepted (*st is the
 * new state), 0 when one was rejected (*st is then unspecified). No allocation. */
int ms_json_advance(const ms_json_schema *js, ms_json_state *st, const uint8_t *b, size_t n);
/* Copy-free advance: *out = in advanced by b[0..n); returns as above. */
int ms_json_advance_to(const ms_json_schema *js, const ms_json_state *in, const uint8_t *b, size_t n,
                       ms_json_state *out);
/* 1 when the bytes so far form a complete document the schema accepts. */
int ms_json_can_end(const ms_json_schema *js, const ms_json_state *st);
/* Copy only the live part of a state (cheaper than a struct copy). */
void ms_json_state_copy(ms_json_state *dst, const ms_json_state *src);

#endif
