/* server/serve.c - `moestream serve`: options, start-up and shutdown.
 *
 * Owns: the process-level parts of the server: parsing the command line (and
 *   MOESTREAM_API_KEY), opening the engine, starting the worker and the HTTP
 *   daemon, signals, and the shutdown sequence:
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

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_OK_ = 0, EXIT_RUNTIME_ = 1, EXIT_USAGE_ = 2 };

static void usage(FILE *f) {
    fprintf(f,
        "usage: moestream serve MODEL_DIR [options]\n"
        "\n"
        "An OpenAI-compatible HTTP server: POST /v1/chat/completions, POST /v1/completions,\n"
        "GET /v1/models, GET /health (docs/SERVER.md).\n"
        "\n"
        "  --host ADDR            address to listen on (default 127.0.0.1; 0.0.0.0 or :: = every interface)\n"
        "  --port N               TCP port (default 8080; 0 = any free port, printed at start)\n"
        "  --api-key KEY          require 'Authorization: Bearer KEY' (default: $MOESTREAM_API_KEY, else none)\n"
        "  --model-name NAME      the model id clients use (default: the model directory's name)\n"
        "  --ram SIZE             resident-memory ceiling (8G, min, auto, all; default all)\n"
        "  --threads N            compute threads (default: all cores)\n"
        "  --ctx N                context positions of the session (default 4096)\n"
        "  --thinking on|off      whether a request that does not say thinks first (default off)\n"
        "  --max-tokens N         largest max_tokens a request may ask for (default 4096)\n"
        "  --default-max-tokens N chat requests without max_tokens (default 1024; capped by the context)\n"
        "  --max-body SIZE        largest request body (default 4M)\n"
        "  --max-header SIZE      largest request line + headers (default 16K)\n"
        "  --max-messages N       most messages in one chat request (default 1024)\n"
        "  --max-queue N          most requests waiting for the engine; more get 429 (default 64)\n"
        "  --max-connections N    most open connections (default 128)\n"
        "  --prefill-chunk N      prompt tokens per engine call; a cancel is seen between calls\n"
        "                         (default: the engine's chunk, one pass over the weights per call)\n"
        "  --chunk N              prompt tokens per pass over the weights (default: chosen for\n"
        "                         --ram, 32 to 1024; 32 without --ram; a streamed model reads its\n"
        "                         weights once per chunk; planned within --ram)\n"
        "  --speculate K          decode: verify up to K prompt-lookup drafted tokens per pass\n"
        "                         over the weights (default 0 = off; same output bits; used while\n"
        "                         one request decodes alone)\n"
        "  --parallel N           requests served together (default 1): each has its own session\n"
        "                         (the plan counts N), and every pass over the weights serves all\n"
        "                         of them (their decode tokens and up to one prompt chunk)\n"
        "  --prompt-cache-ram SIZE  RAM for snapshots of prompts' state that later requests sharing\n"
        "                         a prefix restore (0 = none; default: what the plan leaves of --ram)\n"
        "  --shutdown-timeout S   on SIGTERM wait this long for in-flight requests (default 30)\n"
        "  --idle-timeout S       close idle keep-alive connections after S seconds (default 60)\n"
        "  --sums PATH            checksum sidecar (default MODEL_DIR/moestream.sums when present):\n"
        "                         every weight byte read is verified   --no-verify  do not verify\n"
        "  --pack PATH            packed trunk (default MODEL_DIR/moestream.pack when present, read\n"
        "                         only with the sidecar): ~0.75 of the trunk bytes, same bits\n"
        "  --no-pack              read the trunk from the shards only\n"
        "  --stages L1,L2,...     under mpirun -np N, a pipeline across machines: the layers where\n"
        "                         stages 1..N-1 begin (default: equal bytes per token per stage)\n"
        "  --stage-groups N       --parallel passes go through the stages in up to N groups at once\n"
        "                         (default: one per stage when every stage holds its trunk, else 1)\n"
        "  --quiet                log errors only\n");
}

static int64_t parse_size(const char *v) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || errno || !(x >= 0)) return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    x *= mul;
    if (x > 9.0e18) return -1;
    return (int64_t)x;
}

static int64_t parse_ram(const char *v) {
    if (!strcmp(v, "min")) return MS_RAM_MIN;
    if (!strcmp(v, "all")) return 0;
    if (!strcmp(v, "auto")) {
        FILE *f = fopen("/proc/meminfo", "r");
        char line[256];
        long long kb = -1;
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
        if (f) fclose(f);
        return kb > 0 ? (int64_t)(kb * 1024.0 * 0.9) : -2;
    }
    int64_t x = parse_size(v);
    return x > 0 ? x : -2;
}

static int parse_int(const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int parse_args(int argc, char **argv, srv_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_body = 4 << 20;
    o->max_header = 16 << 10;
    o->max_messages = 1024;
    o->max_tokens = 4096;
    o->default_max_tokens = 1024;
    o->max_queue = 64;
    o->max_connections = 128;
    o->prefill_chunk = 0;                   /* 0: the engine's chunk (set after open) */
    o->parallel = 1;
    o->shutdown_s = 30;
    o->idle_timeout_s = 60;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 1; }
        if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        if (!strcmp(a, "--no-verify")) { o->no_verify = 1; continue; }
        if (!strcmp(a, "--no-pack")) { o->no_pack = 1; continue; }
        if (a[0] != '-') {
            if (o->model_dir) { fprintf(stderr, "moestream serve: unexpected argument '%s'\n", a); return -1; }
            o->model_dir = a;
            continue;
        }
        if (i + 1 >= argc) { fprintf(stderr, "moestream serve: %s needs a value\n", a); return -1; }
        const char *v = argv[++i];
        int64_t x = 0;
        int bad = 0;
        if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--port")) { bad = parse_int(v, 0, 65535, &x); o->port = (int)x; }
        else if (!strcmp(a, "--api-key")) o->api_key = v;
        else if (!strcmp(a, "--sums")) o->sums_path = v;
        else if (!strcmp(a, "--pack")) o->pack_path = v;
        else if (!strcmp(a, "--stages")) o->stages = v;
        else if (!strcmp(a, "--stage-groups")) bad = parse_int(v, 0, 64, &o->stage_groups);
        else if (!strcmp(a, "--model-name")) o->model_name = v;
        else if (!strcmp(a, "--ram")) { o->ram = parse_ram(v); bad = o->ram < 0 && o->ram != MS_RAM_MIN; }
        else if (!strcmp(a, "--threads")) { bad = parse_int(v, 0, 1024, &x); o->threads = (int)x; }
        else if (!strcmp(a, "--ctx") || !strcmp(a, "--max-context")) bad = parse_int(v, 1, INT32_MAX, &o->max_context);
        else if (!strcmp(a, "--thinking")) {
            if (!strcmp(v, "on")) o->thinking = 1;
            else if (!strcmp(v, "off")) o->thinking = 0;
            else bad = 1;
        }
        else if (!strcmp(a, "--max-tokens")) bad = parse_int(v, 1, INT32_MAX, &o->max_tokens);
        else if (!strcmp(a, "--default-max-tokens")) bad = parse_int(v, 1, INT32_MAX, &o->default_max_tokens);
        else if (!strcmp(a, "--max-body")) { o->max_body = parse_size(v); bad = o->max_body < 2; }
        else if (!strcmp(a, "--max-header")) { o->max_header = parse_size(v); bad = o->max_header < 256 || o->max_header > (64 << 20); }
        else if (!strcmp(a, "--max-messages")) bad = parse_int(v, 1, INT32_MAX, &o->max_messages);
        else if (!strcmp(a, "--max-queue")) bad = parse_int(v, 1, 1 << 20, &o->max_queue);
        else if (!strcmp(a, "--max-connections")) bad = parse_int(v, 1, 65536, &o->max_connections);
        else if (!strcmp(a, "--prefill-chunk")) bad = parse_int(v, 1, 1 << 20, &o->prefill_chunk);
        else if (!strcmp(a, "--speculate")) { bad = parse_int(v, 0, 31, &x); o->speculate = (int)x; }
        else if (!strcmp(a, "--parallel")) { bad = parse_int(v, 1, SRV_MAX_PARALLEL, &x); o->parallel = (int)x; }
        else if (!strcmp(a, "--chunk")) bad = parse_int(v, 1, 65536, &o->chunk);
        else if (!strcmp(a, "--prompt-cache-ram")) { x = parse_size(v); bad = x < 0; o->prompt_cache = x ? x : MS_PROMPT_CACHE_OFF; }
        else if (!strcmp(a, "--shutdown-timeout")) { bad = parse_int(v, 0, 86400, &x); o->shutdown_s = (double)x; }
        else if (!strcmp(a, "--idle-timeout")) { bad = parse_int(v, 1, 86400, &x); o->idle_timeout_s = (int)x; }
        else { fprintf(stderr, "moestream serve: unknown option '%s' (see --help)\n", a); return -1; }
        if (bad) { fprintf(stderr, "moestream serve: bad value '%s' for %s\n", v, a); return -1; }
    }
    if (!o->model_dir) { usage(stderr); return -1; }
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

int ms_serve_main(int argc, char **argv) {
    static srv server;                  /* one per process; zeroed */
    srv *s = &server;
    int pr = parse_args(argc, argv, &s->o);
    if (pr != 0) return pr > 0 ? EXIT_OK_ : EXIT_USAGE_;
    g_quiet = s->o.quiet;
    char name_buf[256];
    if (!s->o.model_name) s->o.model_name = base_name(s->o.model_dir, name_buf, sizeof name_buf);

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);    /* before any thread starts */
    signal(SIGPIPE, SIG_IGN);
    json_object_seed(0);

    ms_engine_params ep = ms_engine_default_params();
    ep.model_dir = s->o.model_dir;
    ep.n_threads = s->o.threads;
    ep.ram_bytes = s->o.ram;
    ep.max_context = s->o.max_context;
    ep.max_draft = s->o.speculate;
    ep.n_seq = s->o.parallel;
    ep.prefill_chunk = s->o.chunk;
    ep.prompt_cache_bytes = s->o.prompt_cache;
    ep.sums_path = s->o.sums_path;
    ep.no_verify = s->o.no_verify;
    ep.pack_path = s->o.pack_path;
    ep.no_pack = s->o.no_pack;
    ep.log = engine_log;
    ep.log_level = s->o.quiet ? MS_LOG_WARN : MS_LOG_INFO;
    ep.stages = s->o.stages;
    ep.stage_groups = (int)s->o.stage_groups;
    ms_pipe_serve_if_worker(&ep);           /* a pipeline's stage r > 0 serves and ends here */
    char errbuf[512];
    ms_status st = ms_engine_open(&ep, &s->e, errbuf, sizeof errbuf);
    if (st != MS_OK) {
        fprintf(stderr, "moestream serve: %s\n", errbuf);
        return st == MS_E_MODEL || st == MS_E_USAGE || st == MS_E_BUDGET ? EXIT_USAGE_ : EXIT_RUNTIME_;
    }
    if (!ms_engine_has_tokenizer(s->e)) {
        fprintf(stderr, "moestream serve: %s has no tokenizer (tiktoken.model); the server needs one\n", s->o.model_dir);
        ms_engine_close(s->e);
        return EXIT_USAGE_;
    }
    ms_engine_info(s->e, &s->info);
    ms_stats est;
    ms_engine_stats(s->e, &est);    /* before the worker starts: nothing else calls the engine */
    s->verify_on = est.verify_on;
    s->pack_on = est.pack_on;
    /* one engine call per pass over the weights: a call shorter than the engine's chunk
       would make its own pass and read a streamed model once more */
    if (s->o.prefill_chunk == 0) s->o.prefill_chunk = s->info.prefill_chunk;
    const int32_t cand[3] = { (int32_t)s->info.eos_id, ms_special_id(s->e, "<|end_of_msg|>"), ms_special_id(s->e, "[EOS]") };
    for (int i = 0; i < 3; i++) {
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

    int rc = EXIT_OK_;
    if (srv_worker_start(s) != 0) {
        fprintf(stderr, "moestream serve: cannot start the engine thread\n");
        rc = EXIT_RUNTIME_;
    } else if (srv_http_start(s) != 0) {
        rc = EXIT_RUNTIME_;
    } else {
        /* one line, always: scripts wait for it (and read the port from it) */
        fprintf(stderr, "moestream serve: listening on http://%s%s%s:%d/v1 (model '%s', context %lld%s)\n",
                strchr(s->o.host, ':') ? "[" : "", s->o.host, strchr(s->o.host, ':') ? "]" : "",
                s->bound_port, s->o.model_name, (long long)s->info.max_context,
                s->o.api_key ? ", API key required" : "");
        fflush(stderr);
        while (!wait_signal(&sigs, 3600.0)) { }
        srv_log(s, 0, "shutting down: finishing %lld request(s), at most %.0f s",
                (long long)srv_queue_depth(s), s->o.shutdown_s);
        atomic_store(&s->draining, 1);
        srv_http_quiesce(s);
        double end = srv_now() + s->o.shutdown_s;
        while (srv_now() < end && (srv_queue_depth(s) > 0 || atomic_load(&s->active) > 0))
            if (wait_signal(&sigs, 0.05)) break;         /* a second signal: stop waiting */
        if (srv_queue_depth(s) > 0) srv_log(s, 0, "cancelling %lld unfinished request(s)", (long long)srv_queue_depth(s));
        srv_cancel_all(s, 2);
        end = srv_now() + 5.0;                          /* let handlers send what they have */
        while (srv_now() < end && atomic_load(&s->active) > 0) wait_signal(&sigs, 0.02);
    }
    srv_worker_stop(s);
    srv_http_stop(s);
    ms_engine_close(s->e);
    pthread_cond_destroy(&s->qcv);
    pthread_mutex_destroy(&s->qmu);
    if (rc == EXIT_OK_) srv_log(s, 0, "stopped");
    return rc;
}
