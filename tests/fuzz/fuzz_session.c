/* tests/fuzz/fuzz_session.c - libFuzzer target: the session reader
 * (ms_session_load, engine/session_io.c).
 *
 * Owns: fuzzing ms_session_load on edited session files.
 * Idea: at startup an engine is opened on the fuzz model (MS_FUZZ_MODEL,
 *   default build-fuzz/model; max_context FZ_CONTEXT, so the limit is
 *   reachable) with one session, and two templates are saved from it: an
 *   empty session and one fed FZ_FED tokens (with logits). An input edits a
 *   template (fuzz_file.h): byte 1 bit 0 picks the template; flags bit 0
 *   recomputes the trailing FNV-1a over the payload (offset 96 to the last 8
 *   bytes); the fields are the header's (magic, model hash, the eight
 *   dimensions, the two identities of the weights) and the first ids; the
 *   FORMAT edit resizes the file to the size its (edited) header implies.
 *   The file goes to a memfd and is loaded into the one session by path.
 *   Properties:
 *     - refused: MS_E_USAGE with a message; the session holds either nothing
 *       (n_past 0) or exactly what it held before (saved, the same bytes as
 *       after the last load);
 *     - loaded: n_past equals the header's and is <= max_context, every id is
 *       in [0, n_vocab), the identity of the weights matches the engine's by
 *       the rule of docs/SECURITY.md, and the session saved again is
 *       byte-identical to the file loaded, but for that identity (bytes
 *       80..95), which is then the engine's, and the magic of format 02
 *       (the layout of 03 for a model without sliding layers), saved as 03;
 *     - flags bit 2: one token is then fed on the loaded state: MS_OK,
 *       MS_E_CONTEXT (full) or MS_E_UNSOUND (non-finite state), nothing else.
 * Does not: fuzz a pipeline's layer transfer (one stage here) or the save
 *   path beyond the round trip.
 */
#include "moestream.h"
#include "fuzz_file.h"

#define FZ_CONTEXT 64
#define FZ_FED 7
#define HEAD 96                 /* payload offset */

static ms_engine *g_e;
static ms_session *g_s;
static int64_t g_vocab;
static uint8_t *g_tpl[2];
static size_t g_tpl_n[2];
static fz_mem g_mf;
static char g_out[256];
static fz_img g_img, g_back;   /* g_back: the session saved after the last load */
static int g_have_last;         /* g_back is what the session holds */

static const fz_field g_fields[] = {
    { 0, 8 }, { 8, 8 }, { 16, 8 }, { 24, 8 }, { 32, 8 }, { 40, 8 }, { 48, 8 }, { 56, 8 },
    { 64, 8 }, { 72, 8 }, { 80, 8 }, { 88, 8 }, { 96, 4 }, { 100, 4 }, { 120, 4 }, { 16, 1 },
};

/* Not instrumented: a comparison per byte of the payload would be most of
 * an execution's time, and says nothing about the loader. */
__attribute__((no_sanitize("coverage"), noinline)) static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

/* FORMAT edit: resize to 96 + payload + 8 as the header's dimensions say. */
static void to_header_size(fz_img *m, uint8_t arg) {
    (void)arg;
    if (m->n < HEAD) return;
    int64_t d[8];
    for (int i = 0; i < 8; i++) d[i] = (int64_t)fz_get(m->p + 16 + 8 * i, 8);
    const int64_t cap = (int64_t)FZ_MAX_IMAGE;
    for (int i = 0; i < 8; i++)
        if (d[i] < 0 || d[i] > cap) return;
    /* n_past, n_vocab, kda_S, kda_conv, n_kda, mla_pos, n_mla, has_logits */
    const double f = 4.0 * ((double)d[0] + (d[7] ? (double)d[1] : 0) + (double)d[4] * (double)(d[2] + d[3]) +
                            (double)d[6] * (double)d[0] * (double)d[5]);
    if (f > (double)cap) return;
    fz_img_resize(m, HEAD + (size_t)f + 8);
}

static void save_template(int k) {
    if (ms_session_save(g_s, g_out) != MS_OK) fz_fail("cannot save a template: %s", ms_session_error(g_s));
    g_tpl[k] = fz_slurp(g_out, &g_tpl_n[k]);
    remove(g_out);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    ms_engine_params ep = ms_engine_default_params();
    ep.model_dir = fz_model_dir();
    ep.n_threads = 1;
    ep.max_context = FZ_CONTEXT;
    ep.no_verify = 1;
    ep.no_pack = 1;
    char errbuf[512];
    if (ms_engine_open(&ep, &g_e, errbuf, sizeof errbuf) != MS_OK)
        fz_fail("cannot open the model %s: %s (set MS_FUZZ_MODEL)", ep.model_dir, errbuf);
    ms_model_info info;
    ms_engine_info(g_e, &info);
    g_vocab = info.n_vocab;
    if (ms_session_open(g_e, &g_s) != MS_OK) fz_fail("cannot open a session");
    fz_tmp_path(g_out, sizeof g_out, "moestream-fuzz-session");
    save_template(1);
    int32_t ids[FZ_FED];
    for (int i = 0; i < FZ_FED; i++) ids[i] = (int32_t)((i * 37 + 5) % g_vocab);
    if (ms_session_feed(g_s, ids, FZ_FED, NULL) != MS_OK) fz_fail("cannot feed: %s", ms_session_error(g_s));
    save_template(0);
    fz_mem_open(&g_mf);
    return 0;
}

static void check_loaded(const fz_img *m) {
    const int64_t n_past = ms_session_n_past(g_s);
    if (n_past != (int64_t)fz_get(m->p + 16, 8)) fz_fail("loaded n_past %lld, the file says %lld", (long long)n_past,
                                                         (long long)fz_get(m->p + 16, 8));
    if (n_past < 0 || n_past > FZ_CONTEXT) fz_fail("loaded n_past %lld outside [0, %d]", (long long)n_past, FZ_CONTEXT);
    int64_t n = -1;
    const int32_t *t = ms_session_tokens(g_s, &n);
    if (n != n_past) fz_fail("%lld tokens for n_past %lld", (long long)n, (long long)n_past);
    for (int64_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= g_vocab) fz_fail("loaded id %d at %lld outside [0, %lld)", t[i], (long long)i, (long long)g_vocab);
    if (ms_session_save(g_s, g_out) != MS_OK) fz_fail("a loaded session does not save: %s", ms_session_error(g_s));
    free(g_back.p);
    g_back.p = fz_slurp(g_out, &g_back.n);
    remove(g_out);
    /* the identity of the weights is the engine's: a file's may differ where
     * the rule of docs/SECURITY.md ("Identity of the weights") lets it; a
     * file of format 02 (the fuzz model has no sliding layer) saves as 03 */
    if (g_back.n != m->n || memcmp(g_back.p, "MSSESS03", 8) != 0 ||
        (memcmp(m->p, "MSSESS03", 8) != 0 && memcmp(m->p, "MSSESS02", 8) != 0) ||
        memcmp(g_back.p + 8, m->p + 8, 72) != 0 || memcmp(g_back.p + 96, m->p + 96, m->n - 96) != 0)
        fz_fail("saved again: %zu bytes, other than the %zu loaded", g_back.n, m->n);
    if (memcmp(g_back.p + 80, g_tpl[0] + 80, 16) != 0) fz_fail("saved again with another identity of the weights");
    const uint64_t sums = fz_get(m->p + 80, 8), sample = fz_get(m->p + 88, 8), here = fz_get(g_tpl[0] + 88, 8);
    if (sample != here && !(sums && fz_get(g_tpl[0] + 80, 8) == sums))
        fz_fail("loaded with sampled identity %016llx, these weights %016llx", (unsigned long long)sample,
                (unsigned long long)here);
}

/* A refusal that kept n_past kept the whole session: it saves as it did
 * after the last load. */
static void same_as_last(void) {
    if (ms_session_save(g_s, g_out) != MS_OK) fz_fail("a refused load left a session that does not save: %s", ms_session_error(g_s));
    size_t n = 0;
    uint8_t *p = fz_slurp(g_out, &n);
    remove(g_out);
    if (n != g_back.n || memcmp(p, g_back.p, n) != 0) fz_fail("a refused load changed the session (n_past kept)");
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const int k = data[1] & 1;
    const fz_format f = { g_tpl[k], g_tpl_n[k], g_fields, (int)(sizeof g_fields / sizeof g_fields[0]), to_header_size };
    fz_edit(&f, data + 2, size - 2, &g_img);
    fz_img *m = &g_img;
    if ((data[0] & 1) && m->n >= HEAD + 8) fz_put(m->p + m->n - 8, 8, fnv1a(m->p + HEAD, m->n - 8 - HEAD));
    fz_mem_set(&g_mf, m->p, m->n);
    const int64_t before = ms_session_n_past(g_s);
    const ms_status st = ms_session_load(g_s, g_mf.path);
    if (st != MS_OK) {
        const char *msg = ms_session_error(g_s);
        if (st != MS_E_USAGE || !msg || !msg[0]) fz_fail("refused with %s, message '%s'", ms_status_name(st), msg ? msg : "");
        const int64_t after = ms_session_n_past(g_s);
        if (after != before && after != 0) fz_fail("refused, and n_past went from %lld to %lld", (long long)before, (long long)after);
        if (after == before && after > 0 && g_have_last) same_as_last();
        return 0;
    }
    check_loaded(m);
    g_have_last = 1;
    if (data[0] & 4) {
        g_have_last = 0;
        const int32_t id = (int32_t)(data[1] >> 1) % (int32_t)g_vocab;
        const ms_status fs = ms_session_feed(g_s, &id, 1, NULL);
        if (fs != MS_OK && fs != MS_E_CONTEXT && fs != MS_E_UNSOUND)
            fz_fail("feeding a loaded session: %s (%s)", ms_status_name(fs), ms_session_error(g_s));
    }
    return 0;
}
