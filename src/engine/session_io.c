/* engine/session_io.c - sessions on disk.
 *
 * A saved session resumes with a bit-identical continuation: it holds every
 * piece of per-sequence state (ids fed, KDA state S and conv history per KDA
 * layer, the cache per position of every other layer, the last logits).
 *
 *   offset  field (little-endian)
 *   0       magic "MSSESS03"
 *   8       u64 model hash (config + tensor table, see open.c)
 *   16      i64 n_past, n_vocab, kda_S_floats, kda_conv_floats, n_kda,
 *           mla_pos_floats, n_mla, has_logits            (8 x 8 bytes)
 *   80      u64 weights' sums digest (0: saved without a sidecar), u64
 *           weights' sampled fingerprint (ms_weights_identity)
 *   96      payload: i32 ids[n_past]; f32 logits[n_vocab] (if has_logits);
 *           per KDA layer f32 S[kda_S_floats], conv[kda_conv_floats];
 *           per position-cache layer (K3's MLA, gpt-oss's) f32 cache of the
 *           positions a later query sees, in position order: [0, n_past),
 *           a sliding layer the last sliding_window - 1 (ms_state_layer)
 *   end     u64 FNV-1a of the payload
 *
 * Written to PATH.tmp then renamed, so a crash never leaves a torn file.
 * Format 02 kept every position of a sliding layer; it is read for a model
 * without one (the layouts are the same), and re-saved as 03.
 * Refused at load (MS_E_USAGE, exit 2, nothing of the session changed): a
 * file of format 01 (no identity of the weights), one of format 02 for a
 * model with sliding layers, another model, other
 * weights (docs/SECURITY.md, "Identity of the weights"; the message names
 * both identities), other state dimensions, more positions than the
 * session's max_context, a bad checksum, and ids outside the vocabulary.
 */
#include "engine/engine_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[8] = { 'M', 'S', 'S', 'E', 'S', 'S', '0', '3' };
static const char MAGIC_02[8] = { 'M', 'S', 'S', 'E', 'S', 'S', '0', '2' };
static const char MAGIC_01[8] = { 'M', 'S', 'S', 'E', 'S', 'S', '0', '1' };

typedef struct dims {
    int64_t n_past, n_vocab, kda_S, kda_conv, n_kda, mla_pos, n_mla, has_logits;
} dims;

static dims session_dims(const ms_session *s) {
    const ms_config *c = &s->e->cfg;
    dims d;
    d.n_past = s->st.n_past;
    d.n_vocab = c->vocab_size;
    d.kda_S = c->kda_num_heads * c->kda_head_dim * c->kda_head_dim;
    d.kda_conv = 3 * c->kda_num_heads * c->kda_head_dim * (c->short_conv_kernel_size - 1);
    d.n_kda = c->n_kda_layers;
    d.mla_pos = c->pos_floats;
    d.n_mla = c->n_pos_layers;
    d.has_logits = s->has_logits;
    return d;
}

typedef struct io {
    FILE *f;
    uint64_t h;
    int bad;
    int err;                    /* errno of the first failed write (0: none seen) */
} io;

static void put(io *w, const void *p, size_t n) {
    if (w->bad || n == 0) return;
    w->h = ms_fnv1a(w->h, p, n);
    errno = 0;
    if (fwrite(p, 1, n, w->f) != n) { w->bad = 1; w->err = errno; }
}

static void get(io *r, void *p, size_t n) {
    if (r->bad || n == 0) return;
    if (fread(p, 1, n, r->f) != n) { r->bad = 1; return; }
    r->h = ms_fnv1a(r->h, p, n);
}

static ms_status fail(ms_session *s, ms_status st, const char *fmt, const char *path, const char *what) {
    snprintf(s->error, sizeof s->error, fmt, path, what);
    return st;
}

/* One layer's state, in the file's order: S then conv for a KDA layer, the
 * cache of n_past positions for an MLA layer. In a pipeline, a layer another
 * stage holds travels through `scratch` (ms_pipe_layer_state). */
static ms_status layer_state(ms_session *s, int il, int saving, const dims *d, float *scratch, io *f,
                             char *msg, size_t len) {
    float *part[2];
    int64_t n[2];
    ms_state_layer(&s->st, &s->e->model, il, d->n_past, part, n);
    const int here = part[0] != NULL;
    if (!here) {
        part[0] = scratch;
        part[1] = scratch + n[0];
        if (saving) {
            const ms_status st = ms_engine_pipe_layer_state(s->e, 1, s->st.pipe_id, il, d->n_past, scratch, n[0] + n[1], msg, len);
            if (st != MS_OK) return st;
        }
    }
    for (int k = 0; k < 2; k++) {
        if (saving) put(f, part[k], (size_t)n[k] * sizeof(float));
        else get(f, part[k], (size_t)n[k] * sizeof(float));
    }
    if (!here && !saving && !f->bad)
        return ms_engine_pipe_layer_state(s->e, 0, s->st.pipe_id, il, d->n_past, scratch, n[0] + n[1], msg, len);
    return MS_OK;
}

/* Every layer's state: KDA layers, then MLA layers, each in layer order. */
static ms_status all_states(ms_session *s, int saving, const dims *d, io *f, char *msg, size_t len) {
    const ms_model *m = &s->e->model;
    float *scratch = NULL;
    if (s->e->n_stages > 1) {
        const int64_t mla = d->n_past * d->mla_pos, kda = d->kda_S + d->kda_conv;
        scratch = malloc((size_t)(mla > kda ? mla : kda) * sizeof(float) + sizeof(float));
        if (!scratch) { snprintf(msg, len, "out of memory"); return MS_E_NOMEM; }
    }
    ms_status st = MS_OK;
    for (int pass = 0; pass < 2 && st == MS_OK; pass++)
        for (int il = 0; il < m->n_layer && st == MS_OK; il++)
            if ((m->layers[il].pos_index >= 0) == pass) st = layer_state(s, il, saving, d, scratch, f, msg, len);
    free(scratch);
    return st;
}

ms_status ms_session_save(const ms_session *cs, const char *path) {
    ms_session *s = (ms_session *)cs;      /* only the error message is written */
    if (s->sticky != MS_OK) return fail(s, MS_E_UNSOUND, "%s: %s", path, "the session is unsound; not saved");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return fail(s, MS_E_IO, "%.200s: cannot create the file: %.200s", path, strerror(errno));
    dims d = session_dims(s);
    io w = { f, MS_FNV_INIT, 0, 0 };
    const uint64_t head[2] = { s->e->weights_id.sums, s->e->weights_id.sample };
    uint64_t hash = s->e->model_hash;
    errno = 0;
    if (fwrite(MAGIC, 1, 8, f) != 8 || fwrite(&hash, 8, 1, f) != 1 || fwrite(&d, sizeof d, 1, f) != 1 ||
        fwrite(head, 8, 2, f) != 2) { w.bad = 1; w.err = errno; }
    put(&w, s->tokens, (size_t)d.n_past * sizeof(int32_t));
    if (d.has_logits) put(&w, s->logits, (size_t)d.n_vocab * sizeof(float));
    char msg[512];
    const ms_status ps = all_states(s, 1, &d, &w, msg, sizeof msg);
    errno = 0;
    if (!w.bad && (fwrite(&w.h, 8, 1, f) != 1 || fflush(f) != 0)) { w.bad = 1; w.err = errno; }
    errno = 0;
    if (fclose(f) != 0 && !w.bad) { w.bad = 1; w.err = errno; }
    errno = 0;
    if (ps == MS_OK && !w.bad && rename(tmp, path) != 0) { w.bad = 1; w.err = errno; }
    if (ps != MS_OK || w.bad) {
        remove(tmp);
        if (ps != MS_OK) return fail(s, ps, "%.200s: %.300s", path, msg);
        return fail(s, MS_E_IO, "%.200s: write failed: %.200s", path, w.err ? strerror(w.err) : "unknown error");
    }
    return MS_OK;
}

/* The header of a session file open on f against session s: MS_OK with *d
 * filled, or the refusal (message in s->error). Reads nothing of the state. */
static ms_status load_header(ms_session *s, FILE *f, const char *path, dims *d) {
    char magic[8], m[400];
    uint64_t hash, head[2];
    const dims want = session_dims(s);
    if (fread(magic, 1, 8, f) != 8 ||
        (memcmp(magic, MAGIC, 8) != 0 && memcmp(magic, MAGIC_02, 8) != 0 && memcmp(magic, MAGIC_01, 8) != 0))
        return fail(s, MS_E_USAGE, "%s: %s", path, "not a moestream session file");
    if (memcmp(magic, MAGIC_01, 8) == 0)
        return fail(s, MS_E_USAGE, "%s: %s", path, "a session file of format 01, which does not record the identity of"
                    " its weights: it cannot be checked against these weights, so it is not loaded (save it again)");
    if (memcmp(magic, MAGIC_02, 8) == 0 && ms_state_has_ring(&s->e->model))
        return fail(s, MS_E_USAGE, "%s: %s", path, "a session file of format 02, which keeps every position of the"
                    " sliding-window layers (format 03 keeps their window): not loaded, feed its text again");
    if (fread(&hash, 8, 1, f) != 1 || fread(d, sizeof *d, 1, f) != 1 || fread(head, 8, 2, f) != 2)
        return fail(s, MS_E_USAGE, "%s: %s", path, "truncated header");
    if (hash != s->e->model_hash)
        return fail(s, MS_E_USAGE, "%s: %s", path, "saved with a different model (model hash differs)");
    const ms_weights_id saved = { head[0], head[1] }, here = ms_weights_identity(s->e);
    if (!ms_weights_id_same(saved, here)) {
        char a[96], b[96];
        snprintf(m, sizeof m, "saved with other weights (the session's: %s; these weights: %s)",
                 ms_weights_id_str(saved, a, sizeof a), ms_weights_id_str(here, b, sizeof b));
        return fail(s, MS_E_USAGE, "%s: %s", path, m);
    }
    if (d->n_vocab != want.n_vocab || d->kda_S != want.kda_S || d->kda_conv != want.kda_conv ||
        d->n_kda != want.n_kda || d->mla_pos != want.mla_pos || d->n_mla != want.n_mla ||
        d->has_logits < 0 || d->has_logits > 1 || d->n_past < 0)
        return fail(s, MS_E_USAGE, "%s: %s", path, "state dimensions differ from this model");
    if (d->n_past > s->st.max_ctx) {
        snprintf(m, sizeof m, "holds %lld positions, more than max_context %lld (--max-context) allows",
                 (long long)d->n_past, (long long)s->st.max_ctx);
        return fail(s, MS_E_USAGE, "%s: %s", path, m);
    }
    return MS_OK;
}

ms_status ms_session_load(ms_session *s, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        char m[256];
        snprintf(m, sizeof m, "cannot open: %s", strerror(errno));
        return fail(s, MS_E_IO, "%s: %s", path, m);
    }
    dims d;
    ms_status st = load_header(s, f, path, &d);
    if (st != MS_OK) { fclose(f); return st; }
    /* read into the live state; on any failure the session is reset */
    io r = { f, MS_FNV_INIT, 0, 0 };
    get(&r, s->tokens, (size_t)d.n_past * sizeof(int32_t));
    if (d.has_logits) get(&r, s->logits, (size_t)d.n_vocab * sizeof(float));
    char msg[512];
    const ms_status ps = all_states(s, 0, &d, &r, msg, sizeof msg);
    if (ps != MS_OK) {
        fclose(f);
        ms_session_reset(s);
        return fail(s, ps, "%.200s: %.300s", path, msg);
    }
    uint64_t sum = 0;
    int extra = 0;
    if (!r.bad && fread(&sum, 8, 1, f) != 1) r.bad = 1;
    if (!r.bad && fgetc(f) != EOF) extra = 1;
    fclose(f);
    if (r.bad || sum != r.h || extra) {
        ms_session_reset(s);
        return fail(s, MS_E_USAGE, "%s: %s", path, r.bad ? "truncated" : "checksum mismatch (corrupted file)");
    }
    for (int64_t i = 0; i < d.n_past; i++)
        if (s->tokens[i] < 0 || s->tokens[i] >= d.n_vocab) {
            snprintf(msg, sizeof msg, "position %lld holds id %d, outside the vocabulary [0, %lld)", (long long)i,
                     (int)s->tokens[i], (long long)d.n_vocab);
            ms_session_reset(s);
            return fail(s, MS_E_USAGE, "%.200s: %.300s", path, msg);
        }
    if ((st = ms_engine_pipe_op(s->e, MS_PIPE_SET_PAST, s->st.pipe_id, d.n_past, msg, sizeof msg)) != MS_OK) {
        ms_session_reset(s);
        return fail(s, st, "%.200s: %.300s", path, msg);
    }
    s->st.n_past = d.n_past;
    s->rb.n_rec = 0;
    s->has_logits = (int)d.has_logits;
    s->sticky = MS_OK;
    return MS_OK;
}
