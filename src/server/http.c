/* server/http.c - the HTTP side of `moestream serve` (libmicrohttpd).
 *
 * Owns: the daemon (one thread per connection, so a handler may block while
 *   its job waits for the engine), routing, authentication, the size limits,
 *   reading request bodies, waiting for jobs, and writing responses: JSON
 *   for everything but streamed completions, which are server-sent events
 *   pulled by a content-reader callback from the job's output buffer.
 *
 * Per request (MHD calls the access handler several times):
 *
 *   first call      headers only: size of the headers, route, method; for a
 *                   POST also auth, draining, Content-Length -> an early
 *                   error response (the connection then closes: its body was
 *                   not read), or wait for the body
 *   GET / OPTIONS   answered on the last call, once the request is read, so
 *                   the connection stays open (keep-alive for every method)
 *   upload calls    append to the body; beyond --max-body stop keeping it
 *   last call       parse JSON, validate + render (api.c), submit, then
 *                     non-stream: wait for the job, answer with its body
 *                     stream:     wait for its first bytes (so errors before
 *                                 the first byte still get a 4xx/5xx status),
 *                                 then a 200 text/event-stream response
 *   completed       (MHD_OPTION_NOTIFY_COMPLETED) a request that did not end
 *                   normally cancels its job; the worker sees it before the
 *                   next token
 *
 * Client disconnects are also noticed while a handler or the stream callback
 *   waits: every 100 ms the connection's socket is polled for hang-up
 *   (POLLRDHUP / a zero-byte peek). A client that half-closes its sending side
 *   is treated as gone.
 * CORS (--cors): a preflight OPTIONS gets 204 and the Access-Control-*
 *   headers without a key; every response to an allowed Origin carries
 *   Access-Control-Allow-Origin + Vary: Origin. Each answered request is
 *   counted by route and status for /metrics (metrics.c) when it completes.
 * Limits answered with an OpenAI error object: headers > --max-header (431),
 *   body > --max-body (413), unknown path (404), wrong method (405), missing
 *   or wrong key (401), a key repeated in the body (400), full queue (429 +
 *   Retry-After), a POST on a spare connection (503 + Retry-After, below),
 *   shutting down (503). Headers beyond the connection memory pool
 *   (4 x --max-header, at least 64 KiB) are refused by libmicrohttpd itself
 *   before they reach us.
 * Slow and many clients (docs/SERVER.md, "Slow and many clients"):
 *   - deadline: a request's line, headers and body must arrive within
 *     --header-timeout of its first byte (of the accept, for a connection's
 *     first request); libmicrohttpd's own timeout is an idle one, which a
 *     trickle defeats. Each connection is tracked from MHD's notify-connection
 *     callback; srv_http_watch (the main thread, every 0.1 s) shuts down the
 *     socket of one past its deadline, and its thread then reads EOF and
 *     closes it. No deadline runs while a request is answered or idle.
 *   - capacity: libmicrohttpd takes 2 x --max-connections (beyond that it
 *     closes a connection unanswered); a connection accepted while
 *     --max-connections were open is a spare one: a POST on it gets 503
 *     server_busy at once, GETs (/health) are answered, and it closes after
 *     its answer.
 *   - --max-conn-per-ip: libmicrohttpd closes an address's connections past
 *     it at accept.
 */
#include "server/srv.h"

#include "format/json_util.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 100
#define RETRY_AFTER "1"         /* seconds, on 429 queue_full and 503 busy */

typedef enum route {
    R_NONE, R_HEALTH, R_MODELS, R_MODEL, R_CHAT, R_COMPLETION, R_EMBEDDINGS, R_METRICS, R_PAGE, R_INFO, R_TOKENIZE,
    R_DETOKENIZE
} route;

typedef struct req {
    srv *s;
    route rt;
    srv_buf body;
    int too_big;
    int responded;              /* a response is queued; ignore further calls */
    int is_get;                 /* GET/HEAD/OPTIONS: answered on the request's last call */
    int preflight;              /* OPTIONS */
    int status;                 /* of the queued response (metrics) */
    int fd;
    int over;                   /* on a spare connection (beyond --max-connections): close after */
    int retry_after;            /* the answer carries Retry-After (429 / 503 busy) */
    char client[64];
    srv_job *job;               /* one reference while the request lives */
} req;

typedef struct stream_ctx {
    srv_job *job;               /* one reference */
    int fd;
} stream_ctx;

static struct MHD_Daemon *daemon_of(srv *s) { return (struct MHD_Daemon *)s->daemon; }

/* ---- responses ------------------------------------------------------------------ */

/* The request's Origin when --cors allows it, else NULL. */
static const char *cors_origin(srv *s, struct MHD_Connection *c) {
    if (!s->o.cors) return NULL;
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!o || !o[0]) return NULL;
    size_t n = strlen(o);
    for (const char *p = s->o.cors; *p;) {
        const char *q = strchr(p, ',');
        size_t k = q ? (size_t)(q - p) : strlen(p);
        if ((k == 1 && p[0] == '*') || (k == n && !strncmp(p, o, n))) return o;
        p += k + (q != NULL);
    }
    return NULL;
}

/* Access-Control-Allow-Origin (+ Vary) on a response to an allowed origin. */
static void add_cors(srv *s, struct MHD_Connection *c, struct MHD_Response *r) {
    const char *o = cors_origin(s, c);
    if (!o) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", o);
    MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result respond(req *rq, struct MHD_Connection *c, int status, char *body) {
    srv *s = rq->s;
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
    struct MHD_Response *r = body
        ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
        : MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    if (!r) { free(body); return MHD_NO; }
    if (!body) status = 500;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (status == 405) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, POST, OPTIONS");
    if (rq->retry_after) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER);
    if (rq->over) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    add_cors(s, c, r);
    rq->status = status;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

/* 200 text/plain: the Prometheus exposition (body malloc'd; NULL = out of memory). */
static enum MHD_Result respond_text(req *rq, struct MHD_Connection *c, char *body) {
    if (!body) return respond(rq, c, 500, NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    if (rq->over) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    add_cors(rq->s, c, r);
    rq->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result respond_err(req *r, struct MHD_Connection *c, const srv_err *e) {
    atomic_fetch_add(&r->s->n_errors, 1);
    return respond(r, c, e->status, srv_err_body(e));
}

static enum MHD_Result fail(req *r, struct MHD_Connection *c, int status, const char *type,
                            const char *code, const char *msg) {
    srv_err e;
    memset(&e, 0, sizeof e);
    srv_err_set(&e, status, type, NULL, code, "%s", msg);
    return respond_err(r, c, &e);
}

/* ---- helpers --------------------------------------------------------------------- */

static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = { fd, POLLIN | POLLRDHUP, 0 };
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return 1;
    if (p.revents & POLLIN) {
        char ch;
        return recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    return 0;
}

static void deadline_in(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += (long)ms * 1000000L;
    while (ts->tv_nsec >= 1000000000L) { ts->tv_nsec -= 1000000000L; ts->tv_sec++; }
}

static enum MHD_Result sum_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

static int auth_ok(srv *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return 0;
    h += 7;
    while (*h == ' ') h++;
    size_t n = strlen(h), k = strlen(s->o.api_key);
    unsigned diff = (unsigned)(n != k);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)h[i] ^ (unsigned char)s->o.api_key[i % (k ? k : 1)];
    return diff == 0;
}

static route route_of(const char *url, int *is_post) {
    if (!strncmp(url, "/v1/", 4)) url += 3;             /* "/v1/x" and "/x" are the same */
    *is_post = 0;
    if (!strcmp(url, "/health") || !strcmp(url, "/healthz")) return R_HEALTH;
    if (!strcmp(url, "/models")) return R_MODELS;
    if (!strncmp(url, "/models/", 8)) return R_MODEL;
    if (!strcmp(url, "/metrics")) return R_METRICS;
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) return R_PAGE;
    if (!strcmp(url, "/embeddings")) return R_EMBEDDINGS;
    if (!strcmp(url, "/server")) return R_INFO;
    *is_post = 1;
    if (!strcmp(url, "/chat/completions")) return R_CHAT;
    if (!strcmp(url, "/completions")) return R_COMPLETION;
    if (!strcmp(url, "/tokenize")) return R_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return R_DETOKENIZE;
    return R_NONE;
}

/* ---- connections: counts and the request deadline ----------------------------------------- */

/* Where a connection is in its current request. READING: the request line,
 * headers or body are still arriving, and must have arrived --header-timeout
 * after t0; READ: the request is in (its answer may take minutes); IDLE: a
 * keep-alive connection between requests (--idle-timeout is libmicrohttpd's).
 * The next request on an IDLE connection begins with its first byte, which
 * the kernel's TCP_INFO reveals (libmicrohttpd has already read it). */
typedef enum cstate { C_READING, C_READ, C_IDLE } cstate;

typedef struct conn {
    struct conn *prev, *next;
    int fd;
    cstate st;
    double t0;                  /* READING: when the request began */
    double t_idle;              /* IDLE: when the previous request completed */
    int cut;                    /* shut down by srv_http_watch */
    int spare;                  /* accepted with --max-connections already open: quick answers */
} conn;

typedef struct srv_conns {
    pthread_mutex_t mu;
    conn *head;
    long n;                     /* open connections */
    long n_cut;                 /* cut since the last log line (srv_http_watch only) */
    double t_log;               /* when that line was written */
} srv_conns;

/* MHD_OPTION_NOTIFY_CONNECTION: STARTED runs in the listening thread before
 * the connection's thread exists, CLOSED in the daemon's cleanup before the
 * socket is closed, so srv_http_watch never shuts down a reused descriptor. */
static void notify_conn(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code) {
    srv_conns *cs = ((srv *)cls)->conns;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn *k = calloc(1, sizeof *k);
        *socket_ctx = k;
        if (!k) return;                     /* out of memory: no deadline for this one */
        k->fd = ci ? ci->connect_fd : -1;
        k->st = C_READING;
        k->t0 = srv_now();
        pthread_mutex_lock(&cs->mu);
        k->spare = cs->n >= ((srv *)cls)->o.max_connections;
        k->next = cs->head;
        if (cs->head) cs->head->prev = k;
        cs->head = k;
        cs->n++;
        pthread_mutex_unlock(&cs->mu);
        return;
    }
    conn *k = *socket_ctx;
    if (!k) return;
    pthread_mutex_lock(&cs->mu);
    if (k->prev) k->prev->next = k->next;
    else cs->head = k->next;
    if (k->next) k->next->prev = k->prev;
    cs->n--;
    pthread_mutex_unlock(&cs->mu);
    free(k);
    *socket_ctx = NULL;
}

/* Move c's connection to state st (from its own thread). Returns whether it
 * is a spare connection. */
static int conn_mark(srv *s, struct MHD_Connection *c, cstate st) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn *k = ci ? ci->socket_context : NULL;
    if (!k) return 0;
    pthread_mutex_lock(&s->conns->mu);
    if (st == C_READING && k->st == C_IDLE) k->t0 = srv_now();  /* watch did not see its start */
    if (st != C_READING || k->st == C_IDLE) k->st = st;
    if (st == C_IDLE) k->t_idle = srv_now();
    const int spare = k->spare;
    pthread_mutex_unlock(&s->conns->mu);
    return spare;
}

/* Whether bytes arrived on fd in the last `age` seconds. */
static int data_since(int fd, double age) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return 0;
    return (double)ti.tcpi_last_data_recv + 20.0 < age * 1000.0;   /* 20 ms: clock ticks */
}

void srv_http_watch(srv *s) {
    srv_conns *cs = s->conns;
    if (!cs) return;
    const double now = srv_now();
    pthread_mutex_lock(&cs->mu);
    for (conn *k = cs->head; k; k = k->next) {
        if (k->st == C_IDLE && data_since(k->fd, now - k->t_idle)) {
            k->st = C_READING;
            k->t0 = now;
        }
        if (k->st == C_READING && !k->cut && k->fd >= 0 && now - k->t0 > s->o.header_timeout_s) {
            shutdown(k->fd, SHUT_RDWR);     /* its thread reads EOF and closes the connection */
            k->cut = 1;
            cs->n_cut++;
        }
    }
    pthread_mutex_unlock(&cs->mu);
    if (cs->n_cut > 0 && now - cs->t_log >= 10.0) {     /* at most a line per 10 s under a flood */
        srv_log(s, 0, "closed %ld connection(s) whose request did not arrive within --header-timeout %g s",
                cs->n_cut, s->o.header_timeout_s);
        cs->n_cut = 0;
        cs->t_log = now;
    }
}

/* ---- streaming ------------------------------------------------------------------- */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    srv_job *j = sc->job;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out.n > 0) {
            size_t n = j->out.n < max ? j->out.n : max;
            memcpy(buf, j->out.p, n);
            memmove(j->out.p, j->out.p + n, j->out.n - n);
            j->out.n -= n;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->done) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        struct timespec ts;
        deadline_in(&ts, WAIT_MS);
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!j->done && j->out.n == 0 && client_gone(sc->fd)) {
            atomic_store(&j->cancel, 1);
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    srv_job_unref(sc->job);
    free(sc);
}

/* ---- the POST endpoints ------------------------------------------------------------ */

static enum MHD_Result run_post(srv *s, struct MHD_Connection *c, req *r) {
    if (r->too_big) {
        char m[128];
        snprintf(m, sizeof m, "the request body is larger than this server's limit of %lld bytes", (long long)s->o.max_body);
        return fail(r, c, 413, "invalid_request_error", "request_too_large", m);
    }
    json_error_t jerr;
    const char *text = r->body.p ? r->body.p : "";
    json_t *req_json = json_loadb(text, r->body.n, JSON_REJECT_DUPLICATES, &jerr);
    if (!req_json) {
        srv_err e;
        memset(&e, 0, sizeof e);
        char key[128];
        if (ms_json_dup_key(text, r->body.n, &jerr, key, sizeof key) == 0)
            srv_err_set(&e, 400, "invalid_request_error", NULL, "duplicate_key",
                        "the body repeats the key '%s' (line %d, column %d): each key may appear once in an object",
                        key, jerr.line, jerr.column);
        srv_err_set(&e, 400, "invalid_request_error", NULL, "invalid_json",
                    "the body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
        return respond_err(r, c, &e);
    }
    if (!json_is_object(req_json)) {
        json_decref(req_json);
        return fail(r, c, 400, "invalid_request_error", "invalid_json", "the body must be a JSON object");
    }
    if (r->rt == R_TOKENIZE || r->rt == R_DETOKENIZE) {     /* answered here, never queued */
        srv_err e;
        memset(&e, 0, sizeof e);
        char *body;
        const int rc = r->rt == R_TOKENIZE ? srv_api_tokenize(s, req_json, &body, &e)
                                           : srv_api_detokenize(s, req_json, &body, &e);
        json_decref(req_json);
        return rc < 0 ? respond_err(r, c, &e) : respond(r, c, 200, body);
    }
    srv_job *j = srv_job_new();
    if (!j) { json_decref(req_json); return fail(r, c, 500, "server_error", NULL, "out of memory"); }
    j->created = (int64_t)time(NULL);
    snprintf(j->client, sizeof j->client, "%s", r->client);
    srv_err e;
    memset(&e, 0, sizeof e);
    int rc = r->rt == R_CHAT ? srv_api_chat(s, req_json, j, &e) : srv_api_completion(s, req_json, j, &e);
    json_decref(req_json);
    if (rc < 0) { srv_job_unref(j); return respond_err(r, c, &e); }
    j->t_submit = srv_now();
    if (atomic_load(&s->draining) || srv_submit(s, j) != 0) {
        int draining = atomic_load(&s->draining);
        srv_job_unref(j);
        if (draining) return fail(r, c, 503, "server_error", "shutting_down", "the server is shutting down");
        r->retry_after = 1;
        return fail(r, c, 429, "rate_limit_error", "queue_full", "the server's queue is full; retry later");
    }
    r->job = j;
    /* wait: non-stream until done, stream until the first bytes (or done) */
    pthread_mutex_lock(&j->mu);
    while (!j->done && !(j->stream && j->out.n > 0)) {
        struct timespec ts;
        deadline_in(&ts, WAIT_MS);
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!j->done && client_gone(r->fd)) {
            atomic_store(&j->cancel, 1);
            pthread_mutex_unlock(&j->mu);
            return MHD_NO;                  /* close; the completed callback drops the job */
        }
    }
    int streaming = j->stream && j->pushed;
    int status = j->http_status;
    char *body = j->body;
    j->body = NULL;
    pthread_mutex_unlock(&j->mu);
    if (!streaming) {
        if (status >= 400) atomic_fetch_add(&s->n_errors, 1);
        return respond(r, c, status ? status : 500, body);
    }
    free(body);
    stream_ctx *sc = malloc(sizeof *sc);
    if (!sc) { atomic_store(&j->cancel, 1); return MHD_NO; }
    srv_job_ref(j);
    sc->job = j;
    sc->fd = r->fd;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc, stream_free);
    if (!resp) { stream_free(sc); atomic_store(&j->cancel, 1); return MHD_NO; }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    add_cors(s, c, resp);
    r->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- the GET / OPTIONS endpoints --------------------------------------------------------- */

/* A CORS preflight: 204, and the Access-Control-* headers for an allowed origin. No key needed
   (browsers never send credentials with a preflight). */
static enum MHD_Result preflight(req *r, struct MHD_Connection *c) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, POST, OPTIONS");
    if (r->over) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (cors_origin(r->s, c)) {
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        add_cors(r->s, c, resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", h && h[0] ? h : "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    r->status = 204;
    enum MHD_Result ret = MHD_queue_response(c, 204, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* GET, HEAD and OPTIONS, answered once the request is read (so the connection stays open). */
static enum MHD_Result run_get(req *r, struct MHD_Connection *c, const char *url) {
    srv *s = r->s;
    if (r->preflight) return preflight(r, c);
    if (r->rt == R_HEALTH) return respond(r, c, atomic_load(&s->draining) ? 503 : 200, srv_api_health(s));
    if (r->rt == R_PAGE) return (enum MHD_Result)srv_page_respond(s, c, &r->status, cors_origin(s, c));
    if (!(r->rt == R_METRICS && s->o.metrics_public) && !auth_ok(s, c))
        return fail(r, c, 401, "invalid_request_error", "invalid_api_key",
                    "missing or incorrect API key (send 'Authorization: Bearer KEY')");
    if (r->rt == R_METRICS) return respond_text(r, c, srv_metrics_text(s));
    if (atomic_load(&s->draining)) return fail(r, c, 503, "server_error", "shutting_down", "the server is shutting down");
    if (r->rt == R_MODELS) return respond(r, c, 200, srv_api_models(s));
    if (r->rt == R_INFO) return respond(r, c, 200, srv_page_info(s));
    const char *id = strstr(url, "/models/") + 8;
    if (strcmp(id, s->o.model_name) != 0) {
        char m[200];
        snprintf(m, sizeof m, "the model '%.100s' does not exist", id);
        return fail(r, c, 404, "invalid_request_error", "model_not_found", m);
    }
    return respond(r, c, 200, srv_api_model(s));
}

/* ---- the access handler --------------------------------------------------------------- */

/* The first call: headers only. Returns MHD_YES with r->responded 0 to read the rest. */
static enum MHD_Result first_call(req *r, struct MHD_Connection *c, const char *url, const char *method) {
    srv *s = r->s;
    r->responded = 1;                       /* every return below but the last two answers */
    r->over = conn_mark(s, c, C_READING);   /* (a kept-alive connection's next request) */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->fd = ci->connect_fd;
    ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, r->client, sizeof r->client);
        else if (sa->sa_family == AF_INET6) inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, r->client, sizeof r->client);
    }
    size_t hdr = strlen(url) + strlen(method) + 16;
    MHD_get_connection_values(c, MHD_HEADER_KIND, sum_header, &hdr);
    if ((int64_t)hdr > s->o.max_header) {
        char m[128];
        snprintf(m, sizeof m, "the request headers are larger than this server's limit of %lld bytes", (long long)s->o.max_header);
        return fail(r, c, 431, "invalid_request_error", "headers_too_large", m);
    }
    int want_post;
    r->rt = route_of(url, &want_post);
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int is_post = !strcmp(method, "POST");
    r->preflight = !strcmp(method, "OPTIONS") && r->rt != R_NONE;
    if (r->rt == R_NONE) {
        char m[160];
        snprintf(m, sizeof m, "unknown path '%.100s' (see docs/SERVER.md)", url);
        return fail(r, c, 404, "invalid_request_error", "not_found", m);
    }
    if (!r->preflight && r->rt == R_EMBEDDINGS) {
        if (!auth_ok(s, c))
            return fail(r, c, 401, "invalid_request_error", "invalid_api_key",
                        "missing or incorrect API key (send 'Authorization: Bearer KEY')");
        char m[200];
        snprintf(m, sizeof m, "'%.100s' is not an embedding model: this server has no embeddings endpoint", s->o.model_name);
        return fail(r, c, 404, "invalid_request_error", "model_not_found", m);
    }
    if (!r->preflight && (want_post ? !is_post : !is_get)) {
        char m[160];
        snprintf(m, sizeof m, "method %.16s is not allowed on %.100s (use %s)", method, url, want_post ? "POST" : "GET");
        return fail(r, c, 405, "invalid_request_error", "method_not_allowed", m);
    }
    r->responded = 0;
    if (!want_post || r->preflight) { r->is_get = 1; return MHD_YES; }
    if (!auth_ok(s, c))
        return fail(r, c, 401, "invalid_request_error", "invalid_api_key",
                    "missing or incorrect API key (send 'Authorization: Bearer KEY')");
    if (atomic_load(&s->draining)) return fail(r, c, 503, "server_error", "shutting_down", "the server is shutting down");
    if (r->over) {
        char m[160];
        snprintf(m, sizeof m, "the server is busy (more than %lld open connections); retry later", (long long)s->o.max_connections);
        r->retry_after = 1;
        return fail(r, c, 503, "server_error", "server_busy", m);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoll(cl, NULL, 10) > s->o.max_body) {
        r->too_big = 1;
        r->responded = 1;
        return run_post(s, c, r);           /* answer now; the body is never read */
    }
    return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = cls;
    req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->s = s;
        r->fd = -1;
        *con_cls = r;
        atomic_fetch_add(&s->active, 1);
        atomic_fetch_add(&s->n_requests, 1);
        enum MHD_Result ret = first_call(r, c, url, method);
        if (r->responded) conn_mark(s, c, C_READ);
        return ret;
    }
    if (r->responded) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!r->too_big && (int64_t)(r->body.n + *upload_size) > s->o.max_body) {
            r->too_big = 1;
            srv_buf_free(&r->body);
        }
        if (!r->too_big && srv_buf_add(&r->body, upload, *upload_size) != 0) r->too_big = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    r->responded = 1;
    conn_mark(s, c, C_READ);                /* the whole request is in: no deadline while it runs */
    return r->is_get ? run_get(r, c, url) : run_post(s, c, r);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    conn_mark(s, c, C_IDLE);
    req *r = *con_cls;
    if (!r) return;
    if (r->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) atomic_store(&r->job->cancel, 1);
        srv_job_unref(r->job);
    }
    static const char *const names[] = { "other", "health", "models", "model", "chat", "completions",
                                         "embeddings", "metrics", "page", "server", "tokenize", "detokenize" };
    if (r->status) srv_metrics_request(r->preflight ? "preflight" : names[r->rt], r->status);
    srv_buf_free(&r->body);
    free(r);
    *con_cls = NULL;
    atomic_fetch_sub(&s->active, 1);
}

/* ---- the daemon ------------------------------------------------------------------------ */

int srv_http_start(srv *s) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    int gai = getaddrinfo(s->o.host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        srv_log(s, 1, "cannot resolve --host '%s': %s", s->o.host, gai_strerror(gai));
        return -1;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    size_t pool = (size_t)(4 * s->o.max_header);
    if (pool < 65536) pool = 65536;
    srv_conns *cs = calloc(1, sizeof *cs);
    if (!cs) { freeaddrinfo(ai); srv_log(s, 1, "out of memory"); return -1; }
    pthread_mutex_init(&cs->mu, NULL);
    s->conns = cs;
    /* libmicrohttpd closes a connection past its limit unanswered: it takes twice
       --max-connections, and the second half gets quick answers (first_call) */
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)s->o.port, NULL, NULL, handler, s,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * s->o.max_connections),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->o.max_conn_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool,
        MHD_OPTION_NOTIFY_COMPLETED, completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, notify_conn, s,
        MHD_OPTION_END);                /* no LISTENING_ADDRESS_REUSE: it would let two servers share a port */
    freeaddrinfo(ai);
    if (!d) {
        srv_log(s, 1, "cannot listen on %s:%d (address in use or not available?)", s->o.host, s->o.port);
        return -1;
    }
    s->daemon = d;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    s->bound_port = di && di->port ? di->port : s->o.port;
    return 0;
}

void srv_http_quiesce(srv *s) {
    if (!s->daemon) return;
    MHD_socket fd = MHD_quiesce_daemon(daemon_of(s));
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void srv_http_stop(srv *s) {
    if (s->daemon) MHD_stop_daemon(daemon_of(s));
    s->daemon = NULL;
    if (s->conns) {                 /* every connection is closed now (NOTIFY_CLOSED) */
        pthread_mutex_destroy(&s->conns->mu);
        free(s->conns);
        s->conns = NULL;
    }
}
