/* model/state.c - per-session state: KDA recurrent state and conv history per
 * KDA layer, and a cache per position for every other layer: K3's latent MLA
 * cache (kv_lora_rank normed c_kv + qk_rope_head_dim k_rope floats; spec
 * 4.4), gpt-oss's keys and values (2 * kv heads * head_dim floats); fp32.
 * cfg.pos_floats is the floats per position either way. A gpt-oss sliding
 * layer's cache is a ring of window + max_back slots (model.h). */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t kda_S_floats(const ms_config *c) {
    return c->kda_num_heads * c->kda_head_dim * c->kda_head_dim;
}
static int64_t kda_conv_floats(const ms_config *c) {
    return 3 * c->kda_num_heads * c->kda_head_dim * (c->short_conv_kernel_size - 1);
}

/* min(max_ctx, window + max_back) when the model has sliding layers */
static int64_t ring_slots(const ms_config *c, int64_t max_ctx, int64_t max_back) {
    const int64_t r = c->sliding_window + max_back;
    return c->sliding_window > 0 && r < max_ctx ? r : max_ctx;
}

static int64_t slots_of(const ms_layer *L, int64_t max_ctx, int64_t ring) { return L->is_sliding ? ring : max_ctx; }

int64_t ms_state_slots(const ms_state *st, const ms_layer *L) { return slots_of(L, st->max_ctx, st->ring); }

int64_t ms_state_span(const ms_state *st, const ms_model *m) {
    return st->ring < st->max_ctx ? st->ring - m->cfg.sliding_window + 1 : INT64_MAX;
}

int64_t ms_state_bytes(const ms_model *m, int64_t max_ctx, int64_t max_back) {
    const ms_config *c = &m->cfg;
    const int64_t ring = ring_slots(c, max_ctx, max_back);
    int64_t pos = 0;
    for (int il = m->layer0; il < m->layer1; il++)
        if (m->layers[il].pos_index >= 0) pos += slots_of(&m->layers[il], max_ctx, ring);
    return (int64_t)sizeof(float) *
           ((m->kda1 - m->kda0) * (kda_S_floats(c) + kda_conv_floats(c) + 1) + pos * c->pos_floats);
}

void ms_state_layer(const ms_state *st, const ms_model *m, int il, int64_t n_past, float *part[2], int64_t n[2]) {
    const ms_config *c = &m->cfg;
    const ms_layer *L = &m->layers[il];
    const int here = il >= m->layer0 && il < m->layer1 && st;
    part[0] = part[1] = NULL;
    if (L->pos_index < 0) {
        n[0] = kda_S_floats(c);
        n[1] = kda_conv_floats(c);
        if (here) { part[0] = st->kda_S[L->kda_index]; part[1] = st->kda_conv[L->kda_index]; }
        return;
    }
    const int64_t pw = c->pos_floats;
    const int64_t keep = L->is_sliding && n_past > c->sliding_window - 1 ? c->sliding_window - 1 : n_past;
    n[0] = keep * pw;
    n[1] = 0;
    if (!here) return;
    const int64_t slots = ms_state_slots(st, L), s0 = (n_past - keep) % slots;
    const int64_t run = keep < slots - s0 ? keep : slots - s0;
    part[0] = st->pos_cache[L->pos_index] + s0 * pw;
    n[0] = run * pw;
    if (run < keep) { part[1] = st->pos_cache[L->pos_index]; n[1] = (keep - run) * pw; }
}

int ms_state_has_ring(const ms_model *m) {
    for (int il = 0; il < m->n_layer; il++)
        if (m->layers[il].pos_index >= 0 && m->layers[il].is_sliding) return 1;
    return 0;
}

void ms_state_what(const ms_model *m, int64_t max_ctx, int64_t max_back, char *out, size_t n) {
    const int64_t ring = ring_slots(&m->cfg, max_ctx, max_back);
    const int n_out = snprintf(out, n, "%s at %lld positions",
                               m->cfg.family == MS_FAMILY_GPT_OSS ? "keys and values" : "KDA state, latent MLA cache",
                               (long long)max_ctx);
    if (ms_state_has_ring(m) && ring < max_ctx && n_out >= 0 && (size_t)n_out < n)
        snprintf(out + n_out, n - (size_t)n_out, ", %lld in a sliding layer", (long long)ring);
}

int64_t ms_state_floats(const ms_model *m, int l0, int l1, int64_t n) {
    int64_t all = 0;
    for (int il = l0; il < l1; il++) {
        float *part[2];
        int64_t k[2];
        ms_state_layer(NULL, m, il, n, part, k);
        all += k[0] + k[1];
    }
    return all;
}

ms_status ms_state_init(ms_state *st, const ms_model *m, int64_t max_ctx, int64_t max_back, ms_err *err) {
    memset(st, 0, sizeof *st);
    const ms_config *c = &m->cfg;
    st->max_ctx = max_ctx;
    st->ring = ring_slots(c, max_ctx, max_back);
    st->kda_S = calloc((size_t)(c->n_kda_layers + 1), sizeof *st->kda_S);
    st->kda_conv = calloc((size_t)(c->n_kda_layers + 1), sizeof *st->kda_conv);
    st->pos_cache = calloc((size_t)(c->n_pos_layers + 1), sizeof *st->pos_cache);
    if (!st->kda_S || !st->kda_conv || !st->pos_cache) goto oom;
    for (int64_t i = m->kda0; i < m->kda1; i++) {
        st->kda_S[i] = calloc((size_t)kda_S_floats(c), sizeof(float));
        st->kda_conv[i] = calloc((size_t)kda_conv_floats(c) + 1, sizeof(float));
        if (!st->kda_S[i] || !st->kda_conv[i]) goto oom;
    }
    for (int il = m->layer0; il < m->layer1; il++) {
        const ms_layer *L = &m->layers[il];
        if (L->pos_index < 0) continue;
        st->pos_cache[L->pos_index] = malloc((size_t)(ms_state_slots(st, L) * c->pos_floats) * sizeof(float));
        if (!st->pos_cache[L->pos_index]) goto oom;
    }
    return MS_OK;
oom:
    ms_state_free(st, m);
    return ms_err_set(err, MS_E_NOMEM, "session state: out of memory (max_context %lld)",
                      (long long)max_ctx);
}

void ms_state_free(ms_state *st, const ms_model *m) {
    const ms_config *c = &m->cfg;
    for (int64_t i = 0; st->kda_S && i < c->n_kda_layers; i++) free(st->kda_S[i]);
    for (int64_t i = 0; st->kda_conv && i < c->n_kda_layers; i++) free(st->kda_conv[i]);
    for (int64_t i = 0; st->pos_cache && i < c->n_pos_layers; i++) free(st->pos_cache[i]);
    free(st->kda_S);
    free(st->kda_conv);
    free(st->pos_cache);
    memset(st, 0, sizeof *st);
}

void ms_state_copy(ms_state *dst, const ms_state *src, const ms_model *m) {
    const ms_config *c = &m->cfg;
    MS_ASSERT(dst->max_ctx >= src->n_past && dst->ring == src->ring);
    for (int64_t i = m->kda0; i < m->kda1; i++) {
        memcpy(dst->kda_S[i], src->kda_S[i], (size_t)kda_S_floats(c) * sizeof(float));
        memcpy(dst->kda_conv[i], src->kda_conv[i], (size_t)kda_conv_floats(c) * sizeof(float));
    }
    for (int il = m->layer0; il < m->layer1; il++) {
        const ms_layer *L = &m->layers[il];
        if (L->pos_index < 0) continue;
        const int64_t slots = ms_state_slots(src, L), used = src->n_past < slots ? src->n_past : slots;
        memcpy(dst->pos_cache[L->pos_index], src->pos_cache[L->pos_index], (size_t)(used * c->pos_floats) * sizeof(float));
    }
    dst->n_past = src->n_past;
}

int ms_state_rewind(ms_state *st, int64_t n, const ms_model *m) {
    MS_ASSERT(n >= 0 && n <= st->n_past);
    if (st->n_past - n > ms_state_span(st, m)) return 0;
    st->n_past = n;
    return 1;
}

void ms_state_reset(ms_state *st, const ms_model *m) {
    const ms_config *c = &m->cfg;
    for (int64_t i = m->kda0; i < m->kda1; i++) {
        memset(st->kda_S[i], 0, (size_t)kda_S_floats(c) * sizeof(float));
        memset(st->kda_conv[i], 0, (size_t)kda_conv_floats(c) * sizeof(float));
    }
    st->n_past = 0;
}
