/* format/json_util.c - see json_util.h. */
#include "format/json_util.h"

#include <stdio.h>

const char *ms_json_type_name(const json_t *v) {
    if (!v) return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "real";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "unknown";
}

int ms_json_dup_key(const char *text, size_t n, const json_error_t *je,
                    char *out, size_t cap) {
    if (!text || !je || !out || cap == 0) return -1;
    out[0] = '\0';
    if (json_error_code(je) != json_error_duplicate_key) return -1;
    if (je->position <= 0 || (size_t)je->position > n) return -1;
    size_t close_q = (size_t)je->position - 1;
    if (text[close_q] != '"') return -1;
    /* walk back to the opening quote: a quote preceded by an even number of
     * backslashes (an escaped quote \" belongs to the key) */
    size_t i = close_q;
    while (i > 0) {
        i--;
        if (text[i] != '"') continue;
        size_t n_bs = 0;
        while (n_bs < i && text[i - 1 - n_bs] == '\\') n_bs++;
        if (n_bs % 2 == 0) break;
        if (i == 0) return -1;
    }
    if (text[i] != '"' || i == close_q) return -1;
    json_error_t je2;
    json_t *k = json_loadb(text + i, close_q - i + 1, JSON_DECODE_ANY, &je2);
    if (!k || !json_is_string(k)) {
        json_decref(k);
        return -1;
    }
    snprintf(out, cap, "%s", json_string_value(k));
    json_decref(k);
    return 0;
}
