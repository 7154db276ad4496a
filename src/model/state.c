/* model/state.c - per-session state: KDA recurrent state and conv history per
 * KDA layer, and a cache per position for every other layer: K3's latent MLA
 * cache (kv_lora_rank normed c_kv + qk_rope_head_dim k_rope floats; spec
 * 4.4), gpt-oss's keys and values (2 * kv heads * head_dim floats); fp32.
 * cfg.pos_floats is the floats per position either way. */
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

static int64_t kda_S_floats(const ms_config *c) {
    return c->kda_num_heads * c->kda_head_dim * c->kda_head_dim;
}
static int64_t kda_conv_floats(const ms_config *c) {
    return 3 * c->kda_num_heads * c->kda_head_dim * (c->short_conv_kernel_size - 1);
}

int64_t ms_state_bytes(const ms_model *m, int64_t max_ctx) {
    const ms_config *c = &m->cfg;
    return (int64_t)sizeof(float) * ((m->kda1 - m->kda0) * (kda_S_floats(c) + kda_conv_floats(c) + 1) +
                                     (m->pos1 - m->pos0) * max_ctx * c->pos_floats);
}

void ms_state_layer(const ms_state *st, const ms_model *m, int il, int64_t n_past, float *part[2], int64_t n[2]) {
    const ms_config *c = &m->cfg;
    const ms_layer *L = &m->layers[il];
    const int here = il >= m->layer0 && il < m->layer1 && st;
    n[0] = L->pos_index >= 0 ? n_past * c->pos_floats : kda_S_floats(c);
    n[1] = L->pos_index >= 0 ? 0 : kda_conv_floats(c);
    part[0] = !here ? NULL : L->pos_index >= 0 ? st->pos_cache[L->pos_index] : st->kda_S[L->kda_index];
    part[1] = !here || L->pos_index >= 0 ? NULL : st->kda_conv[L->kda_index];
}

ms_status ms_state_init(ms_state *st, const ms_model *m, int64_t max_ctx, ms_err *err) {
    memset(st, 0, sizeof *st);
    const ms_config *c = &m->cfg;
    st->max_ctx = max_ctx;
    st->kda_S = calloc((size_t)(c->n_kda_layers + 1), sizeof *st->kda_S);
    st->kda_conv = calloc((size_t)(c->n_kda_layers + 1), sizeof *st->kda_conv);
    st->pos_cache = calloc((size_t)(c->n_pos_layers + 1), sizeof *st->pos_cache);
    if (!st->kda_S || !st->kda_conv || !st->pos_cache) goto oom;
    for (int64_t i = m->kda0; i < m->kda1; i++) {
        st->kda_S[i] = calloc((size_t)kda_S_floats(c), sizeof(float));
        st->kda_conv[i] = calloc((size_t)kda_conv_floats(c) + 1, sizeof(float));
        if (!st->kda_S[i] || !st->kda_conv[i]) goto oom;
    }
    for (int64_t i = m->pos0; i < m->pos1; i++) {
        st->pos_cache[i] = malloc((size_t)(max_ctx * c->pos_floats) * sizeof(float));
        if (!st->pos_cache[i]) goto oom;
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
    MS_ASSERT(dst->max_ctx >= src->n_past);
    for (int64_t i = m->kda0; i < m->kda1; i++) {
        memcpy(dst->kda_S[i], src->kda_S[i], (size_t)kda_S_floats(c) * sizeof(float));
        memcpy(dst->kda_conv[i], src->kda_conv[i], (size_t)kda_conv_floats(c) * sizeof(float));
    }
    for (int64_t i = m->pos0; i < m->pos1; i++)
        memcpy(dst->pos_cache[i], src->pos_cache[i], (size_t)(src->n_past * c->pos_floats) * sizeof(float));
    dst->n_past = src->n_past;
}

void ms_state_reset(ms_state *st, const ms_model *m) {
    const ms_config *c = &m->cfg;
    for (int64_t i = m->kda0; i < m->kda1; i++) {
        memset(st->kda_S[i], 0, (size_t)kda_S_floats(c) * sizeof(float));
        memset(st->kda_conv[i], 0, (size_t)kda_conv_floats(c) * sizeof(float));
    }
    st->n_past = 0;
}
