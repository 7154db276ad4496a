/* text/chat_json.c - the chat format's JSON writer (see chat.h, chat_int.h).
 *
 * Owns: writing a jansson value as the reference writes it (compact, keys
 *   optionally sorted, reals as Python's repr(float), non-ASCII kept as UTF-8),
 *   and ms_chat_json_normalize on top of it.
 * Idea: tool definitions and call arguments go into the prompt as JSON text;
 *   the bytes must equal the reference's so the ids do, whatever spacing or
 *   key order the caller used.
 * Invariants: output is valid UTF-8 JSON that jansson reads back to an equal
 *   value; a buffer out of memory leaves its oom flag set, never a partial
 *   result handed out.
 * Does not: parse model output (chat.c) or render segments (chat_render.c).
 */
#include "text/chat_int.h"

#include <stdio.h>

/* ---- JSON writer --------------------------------------------------------- */

/* Shortest digits that read back as x, laid out as Python's repr(float):
 * fixed notation for decimal exponents in [-4, 16), else d.ddde+XX. */
static void put_real(strbuf *b, double x) {
    char buf[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    char dig[24];
    int nd = 0;
    const char *p = buf;
    if (*p == '-') { sb_putc(b, '-'); p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < (int)sizeof dig) dig[nd++] = *p;
    int e = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) sb_putc(b, i < nd ? dig[i] : '0');
            sb_putc(b, '.');
            if (nd > e + 1) sb_put(b, dig + e + 1, (size_t)(nd - e - 1));
            else sb_putc(b, '0');
        } else {
            sb_puts(b, "0.");
            for (int i = 0; i < -e - 1; i++) sb_putc(b, '0');
            sb_put(b, dig, (size_t)nd);
        }
    } else {
        sb_putc(b, dig[0]);
        if (nd > 1) {
            sb_putc(b, '.');
            sb_put(b, dig + 1, (size_t)(nd - 1));
        }
        char eb[16];
        snprintf(eb, sizeof eb, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
        sb_puts(b, eb);
    }
}

/* A JSON string as Python's json.dumps(ensure_ascii=False) writes it. */
static void put_jstr(strbuf *b, const char *s, size_t n) {
    sb_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            sb_put(b, s + run, i - run);
            sb_puts(b, esc);
            run = i + 1;
        }
    }
    sb_put(b, s + run, n - run);
    sb_putc(b, '"');
}

typedef struct kv {
    const char *k;
    size_t kl;
    json_t *v;
} kv;

static int kv_cmp(const void *a, const void *b) {
    const kv *x = a, *y = b;
    size_t m = x->kl < y->kl ? x->kl : y->kl;
    int c = memcmp(x->k, y->k, m);
    if (c) return c;
    return (x->kl > y->kl) - (x->kl < y->kl);
}

/* Compact JSON: no spaces, "," and ":"; keys sorted by byte (= code point)
 * order when sort, else in jansson's insertion order. */
void chat_put_json(strbuf *b, json_t *v, int sort) {
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        kv *a = n ? malloc(n * sizeof *a) : NULL;
        if (n && !a) { b->oom = 1; return; }
        const char *k;
        size_t kl;
        json_t *x;
        json_object_keylen_foreach(v, k, kl, x) {
            if (i < n) a[i++] = (kv){k, kl, x};
        }
        if (sort && i > 1) qsort(a, i, sizeof *a, kv_cmp);
        sb_putc(b, '{');
        for (size_t j = 0; j < i; j++) {
            if (j) sb_putc(b, ',');
            put_jstr(b, a[j].k, a[j].kl);
            sb_putc(b, ':');
            chat_put_json(b, a[j].v, sort);
        }
        sb_putc(b, '}');
        free(a);
        break;
    }
    case JSON_ARRAY:
        sb_putc(b, '[');
        for (size_t j = 0; j < json_array_size(v); j++) {
            if (j) sb_putc(b, ',');
            chat_put_json(b, json_array_get(v, j), sort);
        }
        sb_putc(b, ']');
        break;
    case JSON_STRING: put_jstr(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        sb_puts(b, num);
        break;
    case JSON_REAL: put_real(b, json_real_value(v)); break;
    case JSON_TRUE: sb_puts(b, "true"); break;
    case JSON_FALSE: sb_puts(b, "false"); break;
    case JSON_NULL: sb_puts(b, "null"); break;
    }
}

/* The spec's type attribute of a value. */
const char *chat_jtype(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER:
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "null";
}

ms_status ms_chat_json_normalize(const char *text, size_t n, int sort_keys, char **out,
                                 ms_err *err) {
    *out = NULL;
    json_error_t je;
    json_t *v = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v)
        return ms_err_set(err, MS_E_USAGE, "chat: expected JSON, found an error at line %d column %d: %s",
                          je.line, je.column, je.text);
    strbuf b = {0};
    chat_put_json(&b, v, sort_keys);
    json_decref(v);
    *out = sb_take(&b, NULL);
    if (!*out) return ms_err_set(err, MS_E_NOMEM, "chat: out of memory writing JSON");
    return MS_OK;
}

