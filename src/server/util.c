/* server/util.c - the server's small shared pieces: byte buffers, UTF-8
 * repair, OpenAI error objects, the job's lifetime and hand-over.
 *
 * UTF-8 repair: the model may produce any bytes (a token can end in the
 * middle of a character, a small model can produce invalid sequences), but a
 * JSON string must be valid UTF-8. srv_utf8_clean reads left to right; at
 * each position either a whole valid sequence is copied or exactly one byte
 * is replaced by U+FFFD. Because a decision at position i depends only on
 * bytes i..i+3, cutting the text where srv_utf8_ready says (never inside a
 * sequence that may still complete) and cleaning the pieces gives the same
 * bytes as cleaning the whole: the streamed text equals the non-streamed one.
 */
#include "server/srv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_buf_add(srv_buf *b, const void *s, size_t n) {
    if (n > SIZE_MAX / 2 - b->n - 1) return -1;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int srv_buf_adds(srv_buf *b, const char *s) { return srv_buf_add(b, s, strlen(s)); }

void srv_buf_free(srv_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- UTF-8 ------------------------------------------------------------------ */

/* At s[i] (i < n): the length of the valid sequence starting there (1..4),
 * 0 when s[i] does not start a valid sequence, or -k when the k bytes left
 * are a valid but incomplete start. */
static int seq_at(const unsigned char *s, size_t i, size_t n) {
    unsigned c = s[i];
    int len;
    unsigned lo = 0x80, hi = 0xBF;      /* range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;        /* overlong */
        if (c == 0xED) hi = 0x9F;        /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;        /* overlong */
        if (c == 0xF4) hi = 0x8F;        /* > U+10FFFF */
    } else return 0;
    for (int k = 1; k < len; k++) {
        if (i + (size_t)k >= n) return -(int)(n - i);
        unsigned d = s[i + (size_t)k];
        if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return 0;
    }
    return len;
}

size_t srv_utf8_ready(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        int k = seq_at(s, i, n);
        if (k < 0) return i;
        i += k > 0 ? (size_t)k : 1;
    }
    return n;
}

int srv_utf8_clean(srv_buf *out, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, run = 0;              /* s[run..i) is valid and not yet copied */
    while (i < n) {
        int k = seq_at(s, i, n);
        if (k > 0) { i += (size_t)k; continue; }
        if (srv_buf_add(out, s + run, i - run) != 0 || srv_buf_add(out, "\xEF\xBF\xBD", 3) != 0) return -1;
        i++;
        run = i;
    }
    return srv_buf_add(out, s + run, n - run);
}

/* ---- errors ----------------------------------------------------------------- */

int srv_err_set(srv_err *e, int status, const char *type, const char *param,
                const char *code, const char *fmt, ...) {
    if (e->status != 0) return -1;
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

char *srv_err_body(const srv_err *e) {
    srv_buf clean = {0};
    if (srv_utf8_clean(&clean, e->msg, strlen(e->msg)) != 0) return NULL;
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error",
                          "message", clean.p,
                          "type", e->type ? e->type : "invalid_request_error",
                          "param", e->param ? json_string(e->param) : json_null(),
                          "code", e->code ? json_string(e->code) : json_null());
    srv_buf_free(&clean);
    if (!o) return NULL;
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return body;
}

/* ---- jobs ------------------------------------------------------------------- */

srv_job *srv_job_new(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    atomic_init(&j->cancel, 0);
    j->sp = ms_sample_default_params();
    j->logprobs = -1;
    return j;
}

void srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    free(j->prompt);
    free(j->forced);
    free(j->schema);
    srv_tools_free(j->tools);
    srv_hspec_free(j->hspec);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->stop);
    free(j->echo_text);
    free(j->bias_ids);
    free(j->bias);
    free(j->body);
    json_decref(j->choices);
    srv_buf_free(&j->out);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void srv_job_push(srv_job *j, const char *s, size_t n) {
    pthread_mutex_lock(&j->mu);
    if (srv_buf_add(&j->out, s, n) != 0) atomic_store(&j->cancel, 2);  /* out of memory: end it */
    j->pushed = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_complete(srv_job *j, int http_status, char *body) {
    pthread_mutex_lock(&j->mu);
    j->http_status = http_status;
    free(j->body);
    j->body = body;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}
