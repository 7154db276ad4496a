/* sample/json_schema.c - the byte matcher (see json_schema.h).
 *
 * Frames and their sub-states:
 *
 *   F_VALUE  before a value of `node` (whitespace counted in ws); the first
 *            other byte replaces the frame by the value's own frame, and an
 *            anyOf node forks the stack, one copy per alternative
 *   F_OBJ    O_FIRST -'"'-> O_IN_KEY -(key done)-> O_COLON -':'-> O_IN_VALUE
 *            -(value done)-> O_AFTER -','-> O_NEXT -'"'-> O_IN_KEY ...
 *            '}' from O_FIRST / O_AFTER once every required property is seen
 *   F_ARR    A_FIRST -(value byte)-> A_IN_VALUE -(done)-> A_AFTER -','-> A_IN_VALUE
 *            ']' from A_FIRST / A_AFTER
 *   F_STR    0 plain, 1 after '\', 2..5 in \uXXXX; pos = UTF-8 bytes pending
 *   F_NUM    the JSON number automaton below; pos = bytes so far
 *   F_LIT    set = literals still matching, pos = bytes matched
 *   F_KEY    set = unseen property names still matching, pos = bytes matched
 *
 * A finished frame is popped and its parent told (child_done). Numbers and
 * literals finish when the next byte cannot continue them: the byte is then
 * offered to the parent in the same step.
 */
#include "sample/json_schema_int.h"

#include <assert.h>
#include <string.h>

enum { F_VALUE = 1, F_OBJ, F_ARR, F_STR, F_NUM, F_LIT, F_KEY };
enum { O_FIRST, O_NEXT, O_IN_KEY, O_COLON, O_IN_VALUE, O_AFTER };
enum { A_FIRST, A_IN_VALUE, A_AFTER };
#define END_BYTE (-1)
#define MAX_FORK 16

static int is_ws(int c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static size_t stack_bytes(const ms_json_stack *s) {
    return offsetof(ms_json_stack, f) + (size_t)s->depth * sizeof s->f[0];
}

static void emit(ms_json_state *out, const ms_json_stack *s) {
    size_t nb = stack_bytes(s);
    for (int32_t i = 0; i < out->n; i++)
        if (out->s[i].depth == s->depth && !memcmp(&out->s[i], s, nb)) return;
    if (out->n < MS_JSON_MAX_ALT) memcpy(&out->s[out->n++], s, nb);
}

static const jnode *resolve(const ms_json_schema *js, int32_t ni) {
    while (js->node[ni].type == N_REF) ni = js->node[ni].ref;
    return &js->node[ni];
}

static int push(ms_json_stack *s, int kind, int32_t node) {
    if (s->depth >= MS_JSON_MAX_DEPTH) return 0;
    ms_json_frame *f = &s->f[s->depth++];
    memset(f, 0, sizeof *f);
    f->kind = (uint8_t)kind;
    f->node = node;
    return 1;
}

static void child_done(ms_json_stack *s) {
    s->depth--;
    if (s->depth == 0) { s->ws = 0; return; }
    ms_json_frame *p = &s->f[s->depth - 1];
    if (p->kind == F_OBJ) p->sub = p->sub == O_IN_KEY ? O_COLON : O_AFTER;
    else if (p->kind == F_ARR) p->sub = A_AFTER;
    p->ws = 0;
}

/* JSON numbers: 0 start, 1 '-', 2 '0', 3 int digits, 4 '.', 5 frac digits,
 * 6 'e', 7 exponent sign, 8 exponent digits. Accepting: 2 3 5 8. */
static int num_accepting(int q) { return q == 2 || q == 3 || q == 5 || q == 8; }
static int num_next(int q, int c, int integer) {
    switch (q) {
    case 0: return c == '-' ? 1 : c == '0' ? 2 : is_digit(c) ? 3 : -1;
    case 1: return c == '0' ? 2 : is_digit(c) ? 3 : -1;
    case 2: case 3:
        if (q == 3 && is_digit(c)) return 3;
        if (integer) return -1;
        return c == '.' ? 4 : (c == 'e' || c == 'E') ? 6 : -1;
    case 4: case 5: return is_digit(c) ? 5 : (q == 5 && (c == 'e' || c == 'E')) ? 6 : -1;
    case 6: return (c == '+' || c == '-') ? 7 : is_digit(c) ? 8 : -1;
    case 7: case 8: return is_digit(c) ? 8 : -1;
    }
    return -1;
}

enum { R_FAIL, R_TOOK, R_POP };    /* R_POP: value finished, byte not taken */

/* Bounds keep every number finite as a double and every integer part inside
 * int64: at most MAX_INT_DIGITS before the point, MAX_EXP_DIGITS in the
 * exponent, MS_JSON_MAX_NUM bytes in all; cur counts the current part's digits. */
#define MAX_INT_DIGITS 18
#define MAX_EXP_DIGITS 2
static int step_num(ms_json_frame *f, const jnode *n, int c) {
    int q = num_next(f->sub, c, n->type == N_INT);
    int digit_cap = f->sub >= 6 ? MAX_EXP_DIGITS : f->sub <= 3 ? MAX_INT_DIGITS : MS_JSON_MAX_NUM;
    int ok = q >= 0;
    if (ok && q == f->sub && f->cur >= digit_cap) ok = 0;
    /* from an accepting state, stop early enough that a non-accepting one
     * (after '-', '.', 'e', a sign) always has room for its digit */
    if (ok && num_accepting(f->sub) && f->pos + 3 > MS_JSON_MAX_NUM) ok = 0;
    if (ok) {
        if (is_digit(c)) f->cur = (uint16_t)(q == f->sub || q == 3 || q == 5 || q == 8 ? f->cur + 1 : 1);
        else f->cur = 0;
        f->sub = (uint8_t)q;
        f->pos++;
        return R_TOOK;
    }
    return num_accepting(f->sub) ? R_POP : R_FAIL;
}

/* Literals (F_LIT) and constrained keys (F_KEY, closing quote implied). */
static int step_lit(ms_json_stack *s, ms_json_frame *f, const jnode *n, int c) {
    uint64_t keep = 0;
    int done = -1;
    int key = f->kind == F_KEY;
    for (int i = 0; i < (key ? n->n_prop : n->n_lit); i++) {
        if (!(f->set >> i & 1)) continue;
        const char *t = key ? n->prop_name[i] : n->lit[i];
        size_t len = key ? n->prop_len[i] : n->lit_len[i];
        if (f->pos < len && c >= 0 && (unsigned char)t[f->pos] == c) keep |= 1ull << i;
        else if (f->pos == len) done = i;
    }
    if (keep) { f->set = keep; f->pos++; return R_TOOK; }
    if (done < 0) return R_FAIL;
    if (!key) return R_POP;
    if (c != '"') return R_FAIL;
    ms_json_frame *p = f - 1;
    p->cur = (uint16_t)done;
    p->set |= 1ull << done;
    child_done(s);
    return R_TOOK;
}

static int step_str(ms_json_stack *s, ms_json_frame *f, int c) {
    if (c < 0) return R_FAIL;
    if (f->pos) {                                   /* UTF-8 continuation */
        int lo = f->cur ? (f->cur >> 8) & 0xFF : 0x80, hi = f->cur ? f->cur & 0xFF : 0xBF;
        if (c < lo || c > hi) return R_FAIL;
        f->pos--;
        f->cur = 0;
        return R_TOOK;
    }
    if (f->sub == 1) {
        if (c == 'u') f->sub = 2;
        else if (strchr("\"\\/bfnrt", c) && c) f->sub = 0;
        else return R_FAIL;
        return R_TOOK;
    }
    if (f->sub >= 2) {
        if (!is_hex(c)) return R_FAIL;
        f->sub = f->sub == 5 ? 0 : f->sub + 1;
        return R_TOOK;
    }
    if (c == '"') { child_done(s); return R_TOOK; }
    if (c == '\\') { f->sub = 1; return R_TOOK; }
    if (c < 0x20) return R_FAIL;
    if (c < 0x80) return R_TOOK;
    /* lead bytes; the first continuation's range excludes overlongs and surrogates */
    if (c >= 0xC2 && c <= 0xDF) { f->pos = 1; return R_TOOK; }
    if (c >= 0xE0 && c <= 0xEF) {
        f->pos = 2;
        f->cur = (uint16_t)(c == 0xE0 ? 0xA0BF : c == 0xED ? 0x809F : 0);
        return R_TOOK;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        f->pos = 3;
        f->cur = (uint16_t)(c == 0xF0 ? 0x90BF : c == 0xF4 ? 0x808F : 0);
        return R_TOOK;
    }
    return R_FAIL;
}

static uint64_t all_props(const jnode *n) {
    return n->n_prop >= 64 ? ~0ull : (1ull << n->n_prop) - 1;
}

static int step_obj(const ms_json_schema *js, ms_json_stack *s, ms_json_frame *f, int c) {
    const jnode *n = resolve(js, f->node);
    int free_obj = n->n_prop < 0;
    if (is_ws(c)) {
        if (f->ws >= MS_JSON_MAX_WS) return R_FAIL;
        f->ws++;
        return R_TOOK;
    }
    f->ws = 0;
    int can_close = free_obj || (n->required & ~f->set) == 0;
    int more = free_obj || (all_props(n) & ~f->set) != 0;
    if ((f->sub == O_FIRST || f->sub == O_AFTER) && c == '}' && can_close) { child_done(s); return R_TOOK; }
    if (f->sub == O_AFTER) {
        if (c != ',' || !more) return R_FAIL;
        f->sub = O_NEXT;
        return R_TOOK;
    }
    if (f->sub == O_FIRST || f->sub == O_NEXT) {
        if (c != '"' || !more) return R_FAIL;
        f->sub = O_IN_KEY;
        if (free_obj) return push(s, F_STR, 0) ? R_TOOK : R_FAIL;
        if (!push(s, F_KEY, f->node)) return R_FAIL;
        s->f[s->depth - 1].set = all_props(n) & ~f->set;
        return R_TOOK;
    }
    if (f->sub == O_COLON && c == ':') {
        f->sub = O_IN_VALUE;
        return push(s, F_VALUE, free_obj ? js->any_val : n->prop_node[f->cur]) ? R_TOOK : R_FAIL;
    }
    return R_FAIL;
}

/* F_ARR: returns R_POP-like "not taken" as R_FAIL only when the byte is
 * wrong; a value's first byte pushes the item frame and is re-offered. */
enum { R_AGAIN = 3 };
static int step_arr(const ms_json_schema *js, ms_json_stack *s, ms_json_frame *f, int c) {
    if (is_ws(c)) {
        if (f->ws >= MS_JSON_MAX_WS) return R_FAIL;
        f->ws++;
        return R_TOOK;
    }
    f->ws = 0;
    const jnode *n = resolve(js, f->node);
    if (c == ']') { child_done(s); return R_TOOK; }
    if (f->sub == A_AFTER) {
        if (c != ',') return R_FAIL;
        f->sub = A_IN_VALUE;
        return push(s, F_VALUE, n->items) ? R_TOOK : R_FAIL;
    }
    if (c < 0) return R_FAIL;
    f->sub = A_IN_VALUE;
    return push(s, F_VALUE, n->items) ? R_AGAIN : R_FAIL;
}

/* The first byte of a value of node n (not anyOf, not a ref): replace the
 * F_VALUE frame on top by the value's frame. */
static int start_value(const ms_json_schema *js, ms_json_stack *s, int32_t ni, int c) {
    const jnode *n = &js->node[ni];
    ms_json_frame *f = &s->f[s->depth - 1];
    memset(f, 0, sizeof *f);
    f->node = ni;
    int ty = n->type;
    if (ty == N_ANY) {
        if (c == '{') { f->node = js->any_obj; ty = N_OBJ; }
        else if (c == '[') ty = N_ARR;
        else if (c == '"') ty = N_STR;
        else if (c == '-' || is_digit(c)) ty = N_NUM;
        else ty = N_LIT;
    }
    switch (ty) {
    case N_OBJ: f->kind = F_OBJ; return c == '{';
    case N_ARR: f->kind = F_ARR; return c == '[';
    case N_STR: f->kind = F_STR; return c == '"';
    case N_NUM: case N_INT:
        f->kind = F_NUM;
        return step_num(f, n, c) == R_TOOK;
    case N_LIT:
        f->kind = F_LIT;
        f->set = n->n_lit >= 64 ? ~0ull : (1ull << n->n_lit) - 1;
        return step_lit(s, f, n, c) == R_TOOK;
    }
    return 0;
}

/* Offer byte c (or END_BYTE) to one stack; every stack it can become is added
 * to out. Forks on anyOf; fork_depth bounds anyOf-of-anyOf chains. */
static void feed(const ms_json_schema *js, const ms_json_stack *in, int c, ms_json_state *out, int fork_depth) {
    ms_json_stack st;
    memcpy(&st, in, stack_bytes(in));
    for (;;) {
        if (st.depth == 0) {
            if (c == END_BYTE) emit(out, &st);
            else if (is_ws(c) && st.ws < MS_JSON_MAX_WS) { st.ws++; emit(out, &st); }
            return;
        }
        ms_json_frame *f = &st.f[st.depth - 1];
        int r = R_FAIL;
        switch (f->kind) {
        case F_VALUE: {
            if (c == END_BYTE) return;
            if (is_ws(c)) {
                if (f->ws < MS_JSON_MAX_WS) { f->ws++; emit(out, &st); }
                return;
            }
            int32_t ni = f->node;
            while (js->node[ni].type == N_REF) ni = js->node[ni].ref;
            if (js->node[ni].type == N_ANYOF) {
                if (fork_depth >= MAX_FORK) return;
                for (int32_t a = 0; a < js->node[ni].n_alt; a++) {
                    f->node = js->node[ni].alt[a];
                    feed(js, &st, c, out, fork_depth + 1);
                }
                return;
            }
            r = start_value(js, &st, ni, c) ? R_TOOK : R_FAIL;
            break;
        }
        case F_OBJ: r = c == END_BYTE ? R_FAIL : step_obj(js, &st, f, c); break;
        case F_ARR: r = step_arr(js, &st, f, c); break;
        case F_STR: r = step_str(&st, f, c); break;
        case F_NUM: r = step_num(f, resolve(js, f->node), c); break;
        case F_LIT: case F_KEY: r = step_lit(&st, f, resolve(js, f->node), c); break;
        default: assert(!"json matcher: bad frame kind");
        }
        if (r == R_FAIL) return;
        if (r == R_TOOK) { emit(out, &st); return; }
        if (r == R_POP) child_done(&st);
        /* R_POP and R_AGAIN: offer the same byte to the new top */
    }
}

void ms_json_start(const ms_json_schema *js, ms_json_state *st) {
    st->n = 1;
    memset(&st->s[0], 0, sizeof st->s[0]);
    push(&st->s[0], F_VALUE, 0);
}

void ms_json_state_copy(ms_json_state *dst, const ms_json_state *src) {
    dst->n = src->n;
    for (int32_t i = 0; i < src->n; i++) memcpy(&dst->s[i], &src->s[i], stack_bytes(&src->s[i]));
}

static void step_set(const ms_json_schema *js, const ms_json_state *in, int c, ms_json_state *out) {
    out->n = 0;
    for (int32_t i = 0; i < in->n; i++) feed(js, &in->s[i], c, out, 0);
}

int ms_json_advance_to(const ms_json_schema *js, const ms_json_state *in, const uint8_t *b, size_t n,
                       ms_json_state *out) {
    if (n == 0) { ms_json_state_copy(out, in); return in->n > 0; }
    ms_json_state tmp;
    /* alternate so that the last byte lands in out */
    const ms_json_state *cur = in;
    for (size_t i = 0; i < n; i++) {
        ms_json_state *dst = ((n - 1 - i) & 1) ? &tmp : out;
        step_set(js, cur, b[i], dst);
        if (dst->n == 0) { out->n = 0; return 0; }
        cur = dst;
    }
    return 1;
}

int ms_json_advance(const ms_json_schema *js, ms_json_state *st, const uint8_t *b, size_t n) {
    ms_json_state tmp;
    int ok = ms_json_advance_to(js, st, b, n, &tmp);
    ms_json_state_copy(st, &tmp);
    return ok;
}

int ms_json_can_end(const ms_json_schema *js, const ms_json_state *st) {
    ms_json_state tmp;
    step_set(js, st, END_BYTE, &tmp);
    return tmp.n > 0;
}
