/* server/srv.h - internals shared by the files of `moestream serve`.
 *
 * Owns: the server object (options, the engine, the job queue), the job (one
 * generation request travelling from an HTTP thread to the engine worker and
 * its output travelling back), and the small helpers every file uses (a
 * growable byte buffer, UTF-8 repair, OpenAI error objects).
 *
 * Idea: three layers, one file each, talking through srv_job:
 *
 *   http.c    libmicrohttpd, one thread per connection: routing, auth, size
 *             limits, reading the body, waiting for a job, writing the
 *             response (SSE through a content-reader callback)
 *   api.c     OpenAI JSON in (validation, chat rendering to ids) and out
 *             (completion objects, stream chunks, error objects)
 *   worker.c  one engine thread: picks jobs from the queue fairly, reuses the
 *             live session's state when a prompt extends it, samples, turns
 *             ids into text and tool calls, hands api.c what to send
 *
 *   HTTP thread                         worker thread
 *   parse + render (api.c) --submit-->  queue --pick--> prefill, decode
 *   wait on job->cv  <--push bytes / complete---------  emit (api.c)
 *   client gone: job->cancel = 1  ------------------->  checked per token
 *
 * Invariants:
 *   1. Only the worker thread touches the session, the sampler and feeds the
 *      engine; HTTP threads only tokenize/render (read-only tokenizer).
 *   2. A job is reference counted: the HTTP request and a streaming response
 *      hold one reference each, the queue/worker one; the last unref frees.
 *   3. Everything a job shares (out, done, http_status, body) is read and
 *      written under job->mu; cancel is an atomic flag.
 *   4. Every byte handed to the client is valid UTF-8 (srv_utf8_clean).
 * Does not: batch several sequences through one pass yet (the worker runs
 *   one job at a time; see docs/SERVER.md for how the queue and the per-job
 *   state are laid out so that a batched step can replace the single one).
 */
#ifndef MS_SERVER_SRV_H
#define MS_SERVER_SRV_H

#include "moestream.h"

#include "cli/opts.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ---- options --------------------------------------------------------------- */

typedef struct srv_opts {
    cli_opts c;                 /* the engine options every command takes (cli/opts.h):
                                   model_dir, ram, threads, max_context, parallel, ... */
    const char *model_name;     /* the id clients name; default basename(model_dir) */
    const char *host;           /* default 127.0.0.1 */
    int port;                   /* default 8080; 0 = any free port (printed) */
    const char *api_key;        /* NULL = no auth */
    int64_t max_body;           /* bytes of a request body */
    int64_t max_header;         /* bytes of request line + headers */
    int64_t max_messages;       /* messages per chat request */
    int64_t max_tokens;         /* ceiling on max_tokens */
    int64_t default_max_tokens; /* when a request names none (still capped by the context) */
    int64_t max_queue;          /* jobs waiting; more are refused with 429 */
    int64_t max_connections;
    int64_t prefill_chunk;      /* tokens per feed while reading a prompt */
    int thinking;               /* default of "thinking" when a request does not say */
    double shutdown_s;          /* SIGTERM: wait at most this long for in-flight jobs */
    int idle_timeout_s;         /* close idle keep-alive connections after this */
    double header_timeout_s;    /* a request's line + headers + body must arrive within this */
    int64_t max_conn_per_ip;    /* open connections from one address (0: no limit) */
    const char *cors;           /* --cors: allowed origins, comma-separated ("*": any); NULL = off */
    int metrics_public;         /* /metrics needs no key */
} srv_opts;

/* ---- byte buffer ------------------------------------------------------------ */

typedef struct srv_buf {
    char *p;                    /* NUL terminated when not NULL */
    size_t n, cap;
} srv_buf;

/* Append n bytes (keeps a NUL after them). 0, or -1 when out of memory
 * (the buffer is then unchanged). */
int srv_buf_add(srv_buf *b, const void *s, size_t n);
int srv_buf_adds(srv_buf *b, const char *s);
void srv_buf_free(srv_buf *b);

/* ---- UTF-8 ------------------------------------------------------------------ */

/* Length of the longest prefix of s[0..n) that does not end inside an
 * incomplete (but so far valid) UTF-8 sequence: the bytes that can be sent
 * now without a later byte changing how they are read. */
size_t srv_utf8_ready(const char *s, size_t n);
/* Append s[0..n) to out as valid UTF-8: each byte that does not start a valid
 * sequence (invalid, overlong, surrogate, > U+10FFFF, or cut off at the end)
 * becomes U+FFFD. Cleaning a text in pieces cut at srv_utf8_ready boundaries
 * gives the same bytes as cleaning it whole. 0 or -1 (out of memory). */
int srv_utf8_clean(srv_buf *out, const char *s, size_t n);

/* ---- errors ---------------------------------------------------------------- */

/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}}. */
typedef struct srv_err {
    int status;                 /* HTTP status */
    const char *type;           /* "invalid_request_error", ... */
    const char *param;          /* NULL = null */
    const char *code;           /* NULL = null */
    char msg[512];
} srv_err;

/* Fill e (first error wins: a second call on a set error does nothing) and
 * return -1. */
int srv_err_set(srv_err *e, int status, const char *type, const char *param,
                const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The JSON body of e (malloc'd). NULL only when out of memory. */
char *srv_err_body(const srv_err *e);

/* ---- jobs ------------------------------------------------------------------ */

#define SRV_MAX_PARALLEL 64     /* --parallel: sessions the worker steps together */

typedef enum srv_kind { SRV_CHAT = 0, SRV_COMPLETION = 1 } srv_kind;

typedef struct srv_tools srv_tools;    /* toolcall.c: a request's tools, for the constraint */
typedef struct srv_hspec srv_hspec;    /* harmony.c: a gpt-oss reply's constraint */

typedef struct srv_job {
    /* set by the HTTP thread before srv_submit, read-only afterwards */
    srv_kind kind;
    int stream, include_usage, echo;
    char id[48];                /* "chatcmpl-..." / "cmpl-..." */
    int64_t created;            /* unix seconds */
    char client[64];            /* fairness key: "user:NAME" or the peer address */
    int32_t *prompt;            /* ids to read before generating */
    int64_t n_prompt;
    char *schema;               /* response_format json_schema: the schema's JSON text (NUL-terminated) */
    size_t n_schema;
    int json_mode;              /* response_format: 0 text, 1 json_object, 2 json_schema */
    int32_t *forced;            /* ids forced as the start of the output (tool_choice) */
    int64_t n_forced;
    int forced_done;            /* forced ids close the message: nothing to sample */
    int calls_off;              /* tool_choice "none": a call the model writes anyway is not presented */
    srv_tools *tools;           /* chat with tools (tool_choice not "none"), else NULL */
    srv_hspec *hspec;           /* gpt-oss (harmony) with response_format json, or tools
                                   under any tool_choice but "none": the reply's
                                   constraint, else NULL */
    ms_sample_params sp;
    int64_t max_tokens;         /* sampled tokens, >= 1 */
    char **stop;                /* stop strings (content / text), malloc'd */
    int n_stop;
    int thinking;               /* chat: which generation prompt was rendered */
    int ignore_eos;             /* do not stop at the stop token (benchmarks, tests) */
    char *echo_text;            /* completion with echo: the prompt text */
    int logprobs;               /* -1: none; else the alternatives per token (0..MS_TOP_MAX):
                                   completions' "logprobs", chat's "top_logprobs" */
    int n_choices;              /* "n": choices sampled (1..--parallel), choice i with seed + i */
    double t_submit;            /* srv_now() when submitted (time-to-first-token) */
    /* worker only */
    size_t lp_offset[SRV_MAX_PARALLEL];     /* stream: text_offset of each choice's next entry */
    int n_ended, failed;        /* choices ended; one failed (the job completed with its error) */
    json_t *choices;            /* n > 1, not streamed: the finished choices' objects by index */
    int64_t sum_completion, sum_reasoning, min_cached;  /* n > 1: usage of the ended choices */
    ms_decode_counts sum_spec;  /* and their drafted / accepted ids (--speculate) */
    int32_t *bias_ids;          /* logit_bias (sp.bias_ids / sp.bias point here) */
    float *bias;

    /* shared with the worker, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;                   /* no more output will come */
    srv_buf out;                /* streamed bytes not yet taken by HTTP */
    int pushed;                 /* some bytes were streamed (the status is 200 then) */
    int http_status;            /* non-stream: the response */
    char *body;
    int refs;
    atomic_int cancel;          /* 1 client gone, 2 server shutting down */

    /* owned by the queue / worker */
    uint64_t arrival;
    struct srv_job *next;
} srv_job;

/* A new job with one reference; NULL when out of memory. */
srv_job *srv_job_new(void);
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);
/* Worker: append bytes for a streaming response and wake the HTTP side. */
void srv_job_push(srv_job *j, const char *s, size_t n);
/* Worker: no more output. Non-stream jobs pass the response (body is taken
 * over; NULL for a streaming job). Wakes the HTTP side. */
void srv_job_complete(srv_job *j, int http_status, char *body);

/* ---- the server ------------------------------------------------------------- */

#define SRV_MAX_CLIENTS 64      /* fairness table entries */
#define SRV_MAX_BIAS 1024       /* logit_bias entries per request */

typedef struct srv {
    srv_opts o;
    ms_engine *e;
    ms_model_info info;
    int32_t stop_ids[8];        /* eos_id, <|end_of_msg|>, [EOS], ms_stop_ids (distinct, >= 0) */
    int n_stop_ids;
    int32_t id_open, id_close, id_sep;
    int64_t started;            /* unix seconds */

    /* queue (qmu) */
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    srv_job *queue;             /* in arrival order */
    int64_t n_queued;
    srv_job *running[SRV_MAX_PARALLEL];     /* the jobs in the worker's slots */
    int n_running;
    int stop_worker;
    uint64_t n_arrivals, n_served;
    struct { char key[64]; uint64_t last; } clients[SRV_MAX_CLIENTS];
    pthread_t worker;
    int worker_started;
    ms_session *ses[SRV_MAX_PARALLEL];  /* the slots' sessions, opened by serve.c before it
                                           listens; the worker owns them once started */

    /* HTTP */
    void *daemon;               /* struct MHD_Daemon * */
    struct srv_conns *conns;    /* http.c: the open connections (deadlines, counts) */
    int bound_port;
    atomic_int draining;        /* SIGTERM seen: refuse new work */
    atomic_long active;         /* requests between first byte and completion */
    atomic_ullong next_id;      /* response and tool-call ids */
    uint64_t id_salt;
    atomic_llong n_requests, n_errors;
    atomic_llong n_steps, n_step_tokens;   /* decode steps of the worker, tokens they decoded */
    atomic_llong n_prompt_fed;             /* prompt tokens the worker read (reused ones not) */
    int verify_on, pack_on;                /* the engine's, read once at open (/health) */
    int64_t ram_budget;                    /* the plan's --ram ceiling in bytes (0: none) */
} srv;

/* worker.c */
int srv_worker_start(srv *s);
/* Cancel everything still queued or running (reason 2), wait for the worker
 * to finish them, join it. */
void srv_worker_stop(srv *s);

/* queue.c */
/* Queue a job (takes a reference). -1 when the queue is full or the server is
 * shutting down (the job is untouched). */
int srv_submit(srv *s, srv_job *j);
/* Jobs waiting + running. */
int64_t srv_queue_depth(srv *s);
/* Under qmu, queue not empty: the job to run next (fair order), and taking it
 * out of the queue (its client counts as served now). */
srv_job *srv_queue_next(srv *s);
srv_job *srv_queue_take(srv *s);
/* Set cancel = reason on every queued and running job. */
void srv_cancel_all(srv *s, int reason);

/* api.c: requests */
/* Validate a chat completion request and fill j (prompt ids, sampling,
 * limits). 0, or -1 with e set (a 4xx; 500 only when out of memory). */
int srv_api_chat(srv *s, const json_t *req, srv_job *j, srv_err *e);
int srv_api_completion(srv *s, const json_t *req, srv_job *j, srv_err *e);
/* The body's "model", when there, names the served model; with `required` it
 * must be there. 0, or -1 with e set. */
int srv_api_check_model(srv *s, const json_t *req, int required, srv_err *e);
/* The array a (of the body's param) as token ids of the vocabulary: *ids
 * malloc'd (the caller frees it, also after an error), *n_ids. 0, or -1. */
int srv_api_ids(srv *s, const json_t *a, const char *param, int32_t **ids, int64_t *n_ids, srv_err *e);
/* api_tokenize.c: POST /tokenize and /detokenize, answered at once (never
 * queued). 0 with *body (malloc'd JSON), or -1 with e set. */
int srv_api_tokenize(srv *s, const json_t *req, char **body, srv_err *e);
int srv_api_detokenize(srv *s, const json_t *req, char **body, srv_err *e);
/* GET /v1/models and /v1/models/{id} bodies (malloc'd). */
char *srv_api_models(srv *s);
char *srv_api_model(srv *s);
/* The /tokenize answer {"count", "max_model_len", "tokens"} and the
 * /detokenize one {"prompt", "content"} (text cleaned to UTF-8); malloc'd,
 * NULL when out of memory. */
char *srv_api_tokenized(srv *s, const int32_t *ids, int64_t n);
char *srv_api_detokenized(const char *text, size_t len);
char *srv_api_health(srv *s);

/* api.c: output, called by the worker */
typedef struct srv_call_out {
    const char *name;           /* valid UTF-8 */
    const char *arguments;      /* valid UTF-8 JSON text */
} srv_call_out;

/* One token's log-probability (natural log, the model's distribution before
 * sampling) and its top alternatives; lp NAN: none (an echoed first token). */
typedef struct srv_lp {
    int32_t id;
    int n_top;
    double lp;
    int32_t top_id[MS_TOP_MAX];
    double top_lp[MS_TOP_MAX];
} srv_lp;

typedef struct srv_result {
    int choice;                 /* which of the job's n_choices */
    const char *finish;         /* "stop" | "length" | "tool_calls"; NULL = failed */
    int err_status;             /* failed: HTTP status and message */
    const char *err_msg;
    const char *err_type;
    int64_t n_prompt, n_cached, n_completion, n_reasoning;
    int spec;                   /* the server speculates (--speculate): usage.speculation */
    ms_decode_counts dec;       /* the choice's decode steps: passes that fed its tokens, drafted and
                                   accepted ids by source (ms_session_decode_counts' difference) */
    const char *reasoning;      /* chat, valid UTF-8 ("" = none) */
    const char *content;        /* chat: the answer; completion: the text */
    const srv_call_out *calls;  /* call i gets the id "call_<job id hex>_<i>" */
    int64_t n_calls;
    const srv_lp *lp;           /* logprobs >= 0: the echoed prompt's tokens (completions
                                   with echo), then every sampled token */
    int64_t n_lp;
    int64_t n_lp_sent;          /* stream: entries already sent with earlier chunks */
} srv_result;

/* Stream: the first chunk (chat: the role; completions with echo: the prompt,
 * with its logprobs entries lp[0, n_lp) when asked for). */
void srv_api_emit_start(srv *s, srv_job *j, int choice, const srv_lp *lp, int64_t n_lp);
/* Stream: a piece of reasoning and/or content (valid UTF-8, may be empty) and
 * the logprobs entries of the tokens sampled since the last piece. */
void srv_api_emit_delta(srv *s, srv_job *j, int choice, const char *reasoning, size_t n_reasoning,
                        const char *content, size_t n_content, const srv_lp *lp, int64_t n_lp);
/* Stream: tool call number i, whole. */
void srv_api_emit_call(srv *s, srv_job *j, int choice, int64_t i, const srv_call_out *c);
/* The end of choice r->choice: stream -> its last chunk, and after the last
 * choice the usage + [DONE]; otherwise, after the last choice, the whole
 * response. Completes the job when every choice has ended, or at the first
 * that failed (the others are then cancelled; their ends are ignored). */
void srv_api_finish(srv *s, srv_job *j, const srv_result *r);

/* toolcall.c: tool calls whose arguments validate (docs/SERVER.md, tool calls) */
/* The request's tools (a validated array): each parameters schema checked
 * (400 naming a keyword outside the subset), call tags, json-segment ids.
 * required: the first tag after the forced ids must be a call. 0 or -1 with e. */
int srv_tools_build(srv *s, const json_t *tools, int required, srv_tools **out, srv_err *e);
void srv_tools_free(srv_tools *t);
/* JSON text without the whitespace outside strings (arguments as sent). */
void srv_json_compact(srv_buf *out, const char *t, size_t n);
/* The schema of a tool without parameters: exactly {}. */
extern const char srv_no_params_schema[];

/* One choice's constraint state (worker only; see toolcall.c's diagram). */
typedef struct srv_tcall {
    srv *s;
    const srv_tools *t;         /* NULL: not in use */
    ms_sampler *smp;            /* gets the arguments' grammar while they are open */
    ms_grammar *g;
    int state, tool;
    int64_t pos, n_calls;
    char *tag;                  /* the open tag's bytes so far */
    size_t n_tag;
    char **alt;                 /* the call tags a tool call may have now */
    size_t *alt_len;
    float *w;                   /* masked logits [n_vocab] */
    char msg[256];
} srv_tcall;

/* 0, or -1 when out of memory (free it anyway). */
int srv_tcall_init(srv_tcall *c, srv *s, const srv_tools *t, ms_sampler *smp);
void srv_tcall_free(srv_tcall *c);
/* The next id's logits (logits, or a masked copy), or *forced >= 0: the id to
 * take without sampling. */
const float *srv_tcall_logits(srv_tcall *c, const float *logits, int32_t *forced);
/* After every output id, forced or sampled. -1 when out of memory. */
int srv_tcall_observe(srv_tcall *c, int32_t id);
/* 1 inside a call (its tag was read, its close(call) was not). */
int srv_tcall_in_call(const srv_tcall *c);

/* harmony.c: response_format and forced tool calls on a gpt-oss model (see its
 * diagram; docs/SERVER.md, "gpt-oss (harmony)") */
/* j->hspec for j's response_format (j->json_mode set), or else for a forced
 * tool choice over tools (forced_name: that tool; NULL: "required", any of
 * them); every tool's parameters checked (400 naming a keyword outside the
 * subset or a name a header cannot carry). 0 or -1 with e (j->hspec may be
 * set: the job frees it). */
int srv_hspec_build(srv *s, srv_job *j, const json_t *tools, const char *forced_name, srv_err *e);
/* j->hspec for tool_choice "auto" over tools (the reply stays the model's; a
 * call it opens names one of the tools and its arguments follow the tool's
 * parameters); the same checks and errors. */
int srv_hspec_auto(srv *s, srv_job *j, const json_t *tools, srv_err *e);
void srv_hspec_free(srv_hspec *h);

/* One choice's state (worker only). */
typedef struct srv_hcon {
    srv *s;
    const srv_hspec *h;         /* NULL: not in use */
    ms_sampler *smp;            /* gets the body's grammar while it is open */
    ms_grammar *g;
    int state, later, target;   /* target: the candidate header taken */
    int64_t pos;                /* ids of the header read */
    unsigned char *viable;      /* per candidate header: still matches */
    int32_t end_id;             /* the body's end token */
    float *w;                   /* masked logits [n_vocab] */
    /* tool_choice "auto": the header part being written (0 role, 1 channel,
       2 constrain), the last bytes of each (where "to=" may begin), and the
       recipient written after "to=" (as much of "functions.NAME" as is read) */
    int part;
    unsigned char last[3][2], n_last[3];
    char *rcp;
    size_t n_rcp;
    char msg[256];
} srv_hcon;

/* 0, or -1 when out of memory (free it anyway). */
int srv_hcon_init(srv_hcon *c, srv *s, const srv_hspec *h, ms_sampler *smp);
void srv_hcon_free(srv_hcon *c);
/* The next id's logits (logits, or a masked copy), or *forced >= 0. */
const float *srv_hcon_logits(srv_hcon *c, const float *logits, int32_t *forced);
/* After every output id. -1 when the body's grammar cannot be opened (c->msg says why). */
int srv_hcon_observe(srv_hcon *c, int32_t id);
/* 1 while a call's body is open (its <|call|> not yet read). */
int srv_hcon_in_call(const srv_hcon *c);

/* gen.c: one choice's output while a slot serves it (worker only) */
typedef struct srv_gen {
    int choice;                 /* which of the job's choices */
    int32_t *ids;               /* forced + sampled ids */
    int64_t n, cap;
    int64_t n_sampled;
    double t_last;              /* when the last token was sampled (metrics; 0: none yet) */
    size_t max_stop;            /* longest stop string */
    int stopped;                /* a stop string was found at stop_at */
    size_t stop_at;
    size_t searched;            /* stop strings were searched up to here (start positions) */
    size_t sent_r, sent_c;      /* raw bytes of reasoning / content (text) already sent */
    int64_t calls_sent;
    srv_buf text;               /* completions: the generated bytes */
    srv_buf scratch, scratch2;
    srv_lp *lp;                 /* logprobs: echoed prompt tokens, then sampled ones */
    int64_t n_lp, cap_lp;
    int64_t lp_sent;            /* stream: entries sent with a chunk */
    int lp_pending;             /* chat: the last entry's token is not yet known to be content */
    size_t content_len;         /* chat with logprobs: the answer's length after the last token */
} srv_gen;

/* The next logprobs entry (grown as needed); NULL when out of memory. */
srv_lp *srv_gen_lp_next(srv_gen *g);
/* Append id; -1 when out of memory. */
int srv_gen_push(srv_gen *g, int32_t id);
/* Feed ids[0, n) scoring them (completions with echo and logprobs): one
 * entry per token. -1 when out of memory (the session may have advanced;
 * the job fails). */
int srv_gen_score_feed(const srv_job *j, srv_gen *g, ms_session *ses, const int32_t *ids, int64_t n, ms_status *st);
/* 1 when id ends generation (end of message, EOS). */
int srv_is_stop_id(const srv *s, int32_t id);
/* After a new token: stop strings, streamed deltas. */
void srv_gen_on_token(srv *s, srv_job *j, srv_gen *g, int32_t id);
/* Send the new reasoning / content bytes (final: everything left). */
void srv_gen_emit_text(srv *s, srv_job *j, srv_gen *g, const char *r, size_t nr, const char *c, size_t nc, int final);
/* A tool call as sent: name and arguments (compact) cleaned into bn / ba,
 * which out points into. */
void srv_gen_clean_call(const ms_tool_call *tc, srv_buf *bn, srv_buf *ba, srv_call_out *out);
/* Send the tool calls of r not yet sent, up to index upto. */
void srv_gen_emit_calls(srv *s, srv_job *j, srv_gen *g, const ms_reply *r, int64_t upto);
/* Reasoning tokens: up to and including the <|sep|> of close(think) (gpt-oss:
 * the <|end|> of its last analysis message). */
int64_t srv_gen_count_reasoning(srv *s, const srv_job *j, const srv_gen *g);
/* Free what g holds (it may be reused after a memset). */
void srv_gen_free(srv_gen *g);

/* http.c */
int srv_http_start(srv *s);
/* Close every connection whose request (line, headers and body) has taken
 * longer than --header-timeout: serve.c calls it a few times a second. */
void srv_http_watch(srv *s);
/* Stop accepting new connections (listening socket closed). */
void srv_http_quiesce(srv *s);
void srv_http_stop(srv *s);

/* metrics.c (GET /metrics; docs/SERVER.md, "Metrics") */
/* http.c: a request answered with status on route (a static string). */
void srv_metrics_request(const char *route, int status);
/* Worker: a token was sampled for a job submitted at t_submit; *t_last is the
   job's previous token's time (0: none yet; updated). */
void srv_metrics_token(double t_submit, double *t_last);
/* Worker: a choice ended: its tokens (the prompt counted for choice 0), and a
   fresh copy of the engine's counters (the worker is the engine's only caller). */
void srv_metrics_job(srv *s, int choice, int64_t n_prompt, int64_t n_cached, int64_t n_completion);
/* serve.c at start: the engine's counters before the worker runs. */
void srv_metrics_engine(const ms_stats *est);
/* The exposition text (malloc'd; NULL when out of memory). */
char *srv_metrics_text(srv *s);

/* page.c: GET / - the chat page compiled into the binary. Queues the response
   (with Access-Control-Allow-Origin when cors_ok) and sets *status. */
struct MHD_Connection;
int srv_page_respond(srv *s, struct MHD_Connection *c, int *status, const char *cors_origin);
/* GET /v1/server: {"model", "context_length", "ram_budget", "parallel", "thinking"} (malloc'd). */
char *srv_page_info(srv *s);

/* serve.c: a log line on stderr (unless --quiet for INFO). */
void srv_log(srv *s, int is_error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Monotonic seconds. */
double srv_now(void);

#endif
