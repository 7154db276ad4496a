/* server/serve.c - `moestream serve`: options, start-up and shutdown.
 *
 * Owns: the process-level parts of the server: its options (the server's own
 *   table; the engine options are the table every command shares, cli/opts.h)
 *   and MOESTREAM_API_KEY, opening the engine and the worker's --parallel
 *   sessions (all before listening: a server that cannot hold them exits 2
 *   instead of answering 500s), starting the worker and the HTTP daemon,
 *   checking request deadlines (srv_http_watch, between signal waits),
 *   signals, and the shutdown sequence:
 *
 *     SIGTERM / SIGINT
 *       -> draining: new requests get 503, health says "draining"
 *       -> stop listening (quiesce)
 *       -> wait until queued and running jobs are done and their responses
 *          delivered, at most --shutdown-timeout seconds (a second signal
 *          cuts the wait short)
 *       -> cancel whatever is left: a stream ends with an error event and
 *          [DONE], a waiting request gets 503
 *       -> stop the daemon and the worker, close the engine, exit 0
 *
 * Signals are blocked in every thread (the mask is set before any thread
 * starts) and taken synchronously by the main thread with sigtimedwait, so no
 * handler runs in a random thread. SIGPIPE is ignored.
 */
#include "server/server.h"
#include "server/srv.h"

#include "cli/cmds.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_OK_ = 0, EXIT_RUNTIME_ = 1, EXIT_USAGE_ = 2 };
#define WATCH_S 0.1             /* how often request deadlines are checked (srv_http_watch) */

#define O(f) offsetof(srv_opts, f)
static const cli_opt serve_table[] = {
    { "--host", CLI_STR, O(host), "ADDR", 0, 0, "127.0.0.1", "address to listen on (0.0.0.0 or :: = every interface)", 0, NULL, NULL },
    { "--port", CLI_INT, O(port), "N", 0, 65535, "8080", "TCP port (0 = any free port, printed at start)", 0, NULL, NULL },
    { "--api-key", CLI_STR, O(api_key), "KEY", 0, 0, "$MOESTREAM_API_KEY, else none",
      "require 'Authorization: Bearer KEY'", 0, NULL, NULL },
    { "--model-name", CLI_STR, O(model_name), "NAME", 0, 0, "the model directory's name", "the model id clients use", 0, NULL, NULL },
    { "--thinking", CLI_ONOFF, O(thinking), NULL, 0, 0, "off", "whether a request that does not say thinks first", 0, NULL, NULL },
    { "--max-tokens", CLI_I64, O(max_tokens), "N", 1, INT32_MAX, "4096", "largest max_tokens a request may ask for", 0, NULL, NULL },
    { "--default-max-tokens", CLI_I64, O(default_max_tokens), "N", 1, INT32_MAX, "1024",
      "chat requests without max_tokens (capped by the context)", 0, NULL, NULL },
    { "--max-body", CLI_SIZE, O(max_body), "SIZE", 2, 9e18, "4M", "largest request body", 0, NULL, NULL },
    { "--max-header", CLI_SIZE, O(max_header), "SIZE", 256, 64 << 20, "16K", "largest request line + headers", 0, NULL, NULL },
    { "--max-messages", CLI_I64, O(max_messages), "N", 1, INT32_MAX, "1024", "most messages in one chat request", 0, NULL, NULL },
    { "--max-queue", CLI_I64, O(max_queue), "N", 1, 1 << 20, "64", "most requests waiting for the engine; more get 429", 0, NULL, NULL },
    { "--max-connections", CLI_I64, O(max_connections), "N", 1, 65536, "128",
      "connections served; up to N more get quick answers (503 to a POST)", 0, NULL, NULL },
    { "--max-conn-per-ip", CLI_I64, O(max_conn_per_ip), "N", 0, 1 << 20, "64",
      "open connections from one address; more are closed at once (0: no limit)", 0, NULL, NULL },
    { "--header-timeout", CLI_DOUBLE, O(header_timeout_s), "S", 0.1, 86400, "10",
      "a request's line, headers and body must arrive within S seconds (total, not idle)", 0, NULL, NULL },
    { "--prefill-chunk", CLI_I64, O(prefill_chunk), "N", 1, 1 << 20, "the engine's chunk",
      "prompt tokens per engine call; a cancel is seen between calls", 0, NULL, NULL },
    { "--shutdown-timeout", CLI_DOUBLE, O(shutdown_s), "S", 0, 86400, "30", "on SIGTERM wait this long for in-flight requests", 0, NULL, NULL },
    { "--idle-timeout", CLI_INT, O(idle_timeout_s), "S", 1, 86400, "60", "close idle keep-alive connections after S seconds", 0, NULL, NULL },
    { "--cors", CLI_STR, O(cors), "ORIGIN[,ORIGIN]", 0, 0, "off",
      "let browser pages from these origins call the API ('*': any)", 0, NULL, NULL },
    { "--metrics-public", CLI_FLAG, O(metrics_public), NULL, 0, 0, NULL, "GET /metrics needs no API key", 1, NULL, NULL },
    { NULL, 0, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL }
};
#undef O

/* 0 parsed, 1 --help printed, -1 usage error (printed). */
static int parse_args(int argc, char **argv, srv_opts *o) {
    memset(o, 0, sizeof *o);
    cli_opts_generating(&o->c);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_body = 4 << 20;
    o->max_header = 16 << 10;
    o->max_messages = 1024;
    o->max_tokens = 4096;
    o->default_max_tokens = 1024;
    o->max_queue = 64;
    o->max_connections = 128;
    o->max_conn_per_ip = 64;
    o->header_timeout_s = 10;
    o->prefill_chunk = 0;                   /* 0: the engine's chunk (set after open) */
    o->c.parallel = 1;
    o->shutdown_s = 30;
    o->idle_timeout_s = 60;
    const cli_cmd cmd = { "serve", "MODEL_DIR [options]",
                          "An OpenAI-compatible HTTP server: POST /v1/chat/completions, POST /v1/completions,\n"
                          "GET /v1/models, GET /health, GET /metrics, a chat page at / (docs/SERVER.md). --parallel N serves N requests together.\n",
                          &o->c.model_dir, 1,
                          { { "server", serve_table, o }, { "engine", cli_common_opts, &o->c }, { NULL, NULL, NULL } } };
    int r = cli_parse(&cmd, argc, argv);
    if (r != 0) return r;
    if (!o->c.model_dir) { fprintf(stderr, "moestream serve: MODEL_DIR is missing (moestream serve --help)\n"); return -1; }
    if (!o->api_key) o->api_key = getenv("MOESTREAM_API_KEY");
    if (o->api_key && !o->api_key[0]) o->api_key = NULL;
    if (o->default_max_tokens > o->max_tokens) o->default_max_tokens = o->max_tokens;
    return 0;
}

/* ---- logging ---------------------------------------------------------------------- */

static int g_quiet;

void srv_log(srv *s, int is_error, const char *fmt, ...) {
    (void)s;
    if (!is_error && g_quiet) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "moestream serve: %s%s\n", is_error ? "error: " : "", line);
}

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void engine_log(void *user, ms_log_level level, const char *line) {
    (void)user;
    if (level <= MS_LOG_WARN || !g_quiet) fprintf(stderr, "moestream serve: engine: %s\n", line);
}

/* ---- main ------------------------------------------------------------------------- */

static uint64_t random_salt(void) {
    uint64_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&x, sizeof x, 1, f) != 1) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_nsec * 6364136223846793005ull ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid() << 32;
    }
    if (f) fclose(f);
    return x;
}

static const char *base_name(const char *path, char *buf, size_t n) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(buf, n, "%.*s", (int)(len - start), path + start);
    return buf;
}

/* Wait for a signal in `set` for up to `s` seconds; 1 if one came. */
static int wait_signal(const sigset_t *set, double s) {
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    return sigtimedwait(set, NULL, &ts) > 0;
}

/* Open the engine for the options; prints why and returns the exit code when it cannot. */
static int serve_open(srv *s) {
    ms_engine_params ep;
    cli_engine_params(&s->o.c, &ep);
    ep.log = engine_log;
    ep.log_level = s->o.c.quiet ? MS_LOG_WARN : MS_LOG_INFO;
    ms_pipe_serve_if_worker(&ep);           /* a pipeline's stage r > 0 serves and ends here */
    char errbuf[512];
    s->ram_budget = ep.ram_bytes > 0 ? ep.ram_bytes : 0;
    ms_status st = ms_engine_open(&ep, &s->e, errbuf, sizeof errbuf);
    if (st != MS_OK) {
        fprintf(stderr, "moestream serve: %s\n", errbuf);
        return st == MS_E_MODEL || st == MS_E_USAGE || st == MS_E_BUDGET ? EXIT_USAGE_ : EXIT_RUNTIME_;
    }
    if (!ms_engine_has_tokenizer(s->e)) {
        fprintf(stderr, "moestream serve: %s has no tokenizer (tiktoken.model); the server needs one\n", s->o.c.model_dir);
        ms_engine_close(s->e);
        return EXIT_USAGE_;
    }
    return EXIT_OK_;
}

/* What the worker and the handlers read from the opened engine, and the counters. */
static void serve_init(srv *s) {
    ms_engine_info(s->e, &s->info);
    ms_stats est;
    ms_engine_stats(s->e, &est);    /* before the worker starts: nothing else calls the engine */
    s->verify_on = est.verify_on;
    s->pack_on = est.pack_on;
    srv_metrics_engine(&est);
    /* one engine call per pass over the weights: a call shorter than the engine's chunk
       would make its own pass and read a streamed model once more */
    if (s->o.prefill_chunk == 0) s->o.prefill_chunk = s->info.prefill_chunk;
    /* eos_token_id, the chat format's stop tokens (ms_stop_ids; gpt-oss: <|return|>,
       <|call|>, <|endoftext|>), and K3's <|end_of_msg|> and [EOS] when the vocabulary has them */
    int32_t cand[8] = { (int32_t)s->info.eos_id, ms_special_id(s->e, "<|end_of_msg|>"), ms_special_id(s->e, "[EOS]") };
    const int n_cand = 3 + ms_stop_ids(s->e, cand + 3, 5);
    for (int i = 0; i < n_cand && s->n_stop_ids < 8; i++) {
        int dup = cand[i] < 0 || cand[i] >= s->info.n_vocab;
        for (int k = 0; k < s->n_stop_ids; k++) dup |= s->stop_ids[k] == cand[i];
        if (!dup) s->stop_ids[s->n_stop_ids++] = cand[i];
    }
    s->id_open = ms_special_id(s->e, "<|open|>");
    s->id_close = ms_special_id(s->e, "<|close|>");
    s->id_sep = ms_special_id(s->e, "<|sep|>");
    s->started = (int64_t)time(NULL);
    s->id_salt = random_salt();
    pthread_mutex_init(&s->qmu, NULL);
    pthread_cond_init(&s->qcv, NULL);
    atomic_init(&s->draining, 0);
    atomic_init(&s->active, 0);
    atomic_init(&s->next_id, 1);
    atomic_init(&s->n_requests, 0);
    atomic_init(&s->n_errors, 0);
}

/* Close the sessions serve_slots opened (before the worker took them). */
static void serve_slots_close(srv *s) {
    for (int i = 0; i < SRV_MAX_PARALLEL; i++) {
        ms_session_close(s->ses[i]);
        s->ses[i] = NULL;
    }
}

/* Open the worker's --parallel sessions before listening: a server that could not
   hold them would answer every request with 500 (under an address-space cap, say).
   Prints why and returns the exit code when one cannot be opened. */
static int serve_slots(srv *s) {
    const int P = s->o.c.parallel >= 1 && s->o.c.parallel <= SRV_MAX_PARALLEL ? s->o.c.parallel : 1;
    for (int i = 0; i < P; i++) {
        if (ms_session_open(s->e, &s->ses[i]) == MS_OK) continue;
        fprintf(stderr, "moestream serve: cannot open session %d of %d (--parallel %d): %s\n",
                i + 1, P, P, ms_engine_error(s->e));
        serve_slots_close(s);
        return EXIT_USAGE_;
    }
    return EXIT_OK_;
}

/* Serve until a signal, then the shutdown sequence of the header comment. */
static void serve_until_signal(srv *s, const sigset_t *sigs) {
    /* one line, always: scripts wait for it (and read the port from it) */
    fprintf(stderr, "moestream serve: listening on http://%s%s%s:%d/v1 (model '%s', context %lld%s)\n",
            strchr(s->o.host, ':') ? "[" : "", s->o.host, strchr(s->o.host, ':') ? "]" : "",
            s->bound_port, s->o.model_name, (long long)s->info.max_context,
            s->o.api_key ? ", API key required" : "");
    fflush(stderr);
    while (!wait_signal(sigs, WATCH_S)) srv_http_watch(s);
    srv_log(s, 0, "shutting down: finishing %lld request(s), at most %.0f s",
            (long long)srv_queue_depth(s), s->o.shutdown_s);
    atomic_store(&s->draining, 1);
    srv_http_quiesce(s);
    double end = srv_now() + s->o.shutdown_s;
    while (srv_now() < end && (srv_queue_depth(s) > 0 || atomic_load(&s->active) > 0)) {
        if (wait_signal(sigs, 0.05)) break;          /* a second signal: stop waiting */
        srv_http_watch(s);
    }
    if (srv_queue_depth(s) > 0) srv_log(s, 0, "cancelling %lld unfinished request(s)", (long long)srv_queue_depth(s));
    srv_cancel_all(s, 2);
    end = srv_now() + 5.0;                          /* let handlers send what they have */
    while (srv_now() < end && atomic_load(&s->active) > 0) wait_signal(sigs, 0.02);
}

int ms_serve_main(int argc, char **argv) {
    static srv server;                  /* one per process; zeroed */
    srv *s = &server;
    int rc = parse_args(argc, argv, &s->o);
    if (rc != 0) return rc > 0 ? EXIT_OK_ : EXIT_USAGE_;
    g_quiet = s->o.c.quiet;
    char name_buf[256];
    if (!s->o.model_name) s->o.model_name = base_name(s->o.c.model_dir, name_buf, sizeof name_buf);

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);    /* before any thread starts */
    signal(SIGPIPE, SIG_IGN);
    json_object_seed(0);
    if ((rc = serve_open(s)) != EXIT_OK_) return rc;
    serve_init(s);
    if ((rc = serve_slots(s)) != EXIT_OK_) {
        /* nothing started: close the engine below */
    } else if (srv_worker_start(s) != 0) {
        fprintf(stderr, "moestream serve: cannot start the engine thread\n");
        serve_slots_close(s);
        rc = EXIT_RUNTIME_;
    } else if (srv_http_start(s) != 0) {
        rc = EXIT_RUNTIME_;
    } else {
        serve_until_signal(s, &sigs);
    }
    srv_worker_stop(s);
    srv_http_stop(s);
    ms_engine_close(s->e);
    pthread_cond_destroy(&s->qcv);
    pthread_mutex_destroy(&s->qmu);
    if (rc == EXIT_OK_) srv_log(s, 0, "stopped");
    return rc;
}
