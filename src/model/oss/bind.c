/* model/oss/bind.c - binding gpt-oss's released tensor names (the Hugging
 * Face layout, spec gpt-oss section 2) to typed views and store regions.
 *
 * Owns: the names, dtypes and shapes of gpt-oss's tensors, and how they
 *   group into regions.
 * Main idea: as for K3 (bind.c, whose machinery this uses): per layer one
 *   TRUNK region for the attention part (its norm, q/k/v/o with biases,
 *   sinks) and one for the FFN's norm and router, then one EXPERT region per
 *   routed expert. The FFN's norm goes with the router: the expert predictor
 *   (expert_io.c) then needs only that small region, which every plan pins
 *   (store/plan.h, "small regions"), to guess a layer's experts. The
 *   release fuses a layer's experts into six tensors (gate_up and down:
 *   blocks, scales, bias) whose first dimension is the expert, so expert e is
 *   the slice [e] of each: an expert region of six ranges, read and counted
 *   like K3's.
 * Invariants: regions in the order of use (embedding, each layer's
 *   attention, router and experts, the final norm, lm_head).
 * Does not: read weights, compute.
 */
#include "model/bind_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME(...) (snprintf(name, sizeof name, "model.layers.%d." __VA_ARGS__), name)
#define WANT(wt, dtm, ...) \
    if (!ms_bind_want(bd, g, (wt), NULL, name, (dtm), __VA_ARGS__, 0, err)) return err->status
#define WANTV(wt, n) \
    if (!ms_bind_want(bd, g, (wt), NULL, name, DT_BF16 | DT_F32, D1(n), 1, err)) return err->status

/* The input norm, GQA projections with biases, sinks. */
static ms_status bind_attention(binder *bd, group *g, ms_layer *L, int il, ms_err *err) {
    const ms_config *c = &bd->m->cfg;
    const int64_t H = c->hidden_size, q = c->num_attention_heads * c->head_dim;
    const int64_t kv = c->num_key_value_heads * c->head_dim;
    char name[256];
    NAME("input_layernorm.weight", il);           WANTV(&L->input_norm, H);
    NAME("self_attn.q_proj.weight", il);          WANT(&L->q_proj, DT_BF16, D2(q, H));
    NAME("self_attn.q_proj.bias", il);            WANTV(&L->q_bias, q);
    NAME("self_attn.k_proj.weight", il);          WANT(&L->k_proj, DT_BF16, D2(kv, H));
    NAME("self_attn.k_proj.bias", il);            WANTV(&L->k_bias, kv);
    NAME("self_attn.v_proj.weight", il);          WANT(&L->v_proj, DT_BF16, D2(kv, H));
    NAME("self_attn.v_proj.bias", il);            WANTV(&L->v_bias, kv);
    NAME("self_attn.o_proj.weight", il);          WANT(&L->o_proj, DT_BF16, D2(H, q));
    NAME("self_attn.o_proj.bias", il);            WANTV(&L->o_bias, H);
    NAME("self_attn.sinks", il);                  WANTV(&L->sinks, c->num_attention_heads);
    return MS_OK;
}

/* The FFN's input norm, the router with its bias. */
static ms_status bind_router(binder *bd, group *g, ms_layer *L, int il, ms_err *err) {
    const ms_config *c = &bd->m->cfg;
    char name[256];
    NAME("post_attention_layernorm.weight", il);  WANTV(&L->post_attn_norm, c->hidden_size);
    NAME("mlp.router.weight", il);                WANT(&L->router, DT_BF16, D2(c->num_experts, c->hidden_size));
    NAME("mlp.router.bias", il);                  WANTV(&L->router_bias, c->num_experts);
    return MS_OK;
}
#undef WANT
#undef WANTV

/* The six fused expert tensors of layer il, then one EXPERT region per
 * expert: its slice of each (slot order MS_OSS_*). */
static ms_status bind_experts(binder *bd, ms_layer *L, int il, ms_err *err) {
    const ms_config *c = &bd->m->cfg;
    const int64_t E = c->num_experts, H = c->hidden_size, I = c->intermediate_size;
    char name[256];
    group *fused = calloc(1, sizeof *fused);    /* holds the dry run's synthesised tensors */
    L->expert_off = calloc((size_t)E, sizeof *L->expert_off);
    if (!fused || !L->expert_off) {
        free(fused);
        return ms_err_set(err, MS_E_NOMEM, "out of memory binding experts");
    }
    const ms_tensor_info *t[MS_EXP_N];
    ms_status st = MS_OK;
#define FUSED(slot, part, dtm, ...) \
    if (st == MS_OK && !(t[slot] = ms_bind_want(bd, fused, NULL, NULL, NAME("mlp.experts." part, il), dtm, \
                                                __VA_ARGS__, 0, err))) st = err->status
    FUSED(MS_OSS_GU_P, "gate_up_proj_blocks", DT_U8, D4(E, 2 * I, H / 32, 16));
    FUSED(MS_OSS_GU_S, "gate_up_proj_scales", DT_U8, D3(E, 2 * I, H / 32));
    FUSED(MS_OSS_GU_B, "gate_up_proj_bias", DT_BF16, D2(E, 2 * I));
    FUSED(MS_OSS_DN_P, "down_proj_blocks", DT_U8, D4(E, H, I / 32, 16));
    FUSED(MS_OSS_DN_S, "down_proj_scales", DT_U8, D3(E, H, I / 32));
    FUSED(MS_OSS_DN_B, "down_proj_bias", DT_BF16, D2(E, H));
#undef FUSED
    for (int64_t ie = 0; ie < E && st == MS_OK; ie++) {
        group eg = {0};
        for (int k = 0; k < MS_EXP_N; k++) ms_bind_slice(&eg, &L->expert_off[ie][k], t[k], ie);
        const int rid = ms_bind_region(bd, MS_REGION_EXPERT, &eg, err);
        if (rid < 0) { st = (ms_status)rid; break; }
        if (ie == 0) L->expert_region0 = rid;
        MS_ASSERT(rid == L->expert_region0 + ie);
    }
    free(fused);
    return st;
}
#undef NAME

static ms_status bind_layer(binder *bd, int il, ms_err *err) {
    ms_layer *L = &bd->m->layers[il];
    group g = {0};
    ms_status st = bind_attention(bd, &g, L, il, err);
    if (st != MS_OK) return st;
    int id = ms_bind_region(bd, MS_REGION_TRUNK, &g, err);
    if (id < 0) return (ms_status)id;
    L->attn_region = id;
    memset(&g, 0, sizeof g);
    if ((st = bind_router(bd, &g, L, il, err)) != MS_OK) return st;
    if ((id = ms_bind_region(bd, MS_REGION_TRUNK, &g, err)) < 0) return (ms_status)id;
    L->ffn_region = id;
    return bind_experts(bd, L, il, err);
}

ms_status ms_oss_bind(binder *bd, ms_err *err) {
    ms_model *m = bd->m;
    ms_status st;
    if (m->head && (st = ms_bind_embed(bd, "model.embed_tokens.weight", err)) != MS_OK) return st;
    for (int il = m->layer0; il < m->layer1; il++)
        if ((st = bind_layer(bd, il, err)) != MS_OK) return st;
    if (!m->head) return MS_OK;
    group g = {0};
    if (!ms_bind_want(bd, &g, &m->final_norm, NULL, "model.norm.weight", DT_BF16 | DT_F32, D1(m->cfg.hidden_size), 1,
                      err))
        return err->status;
    const int id = ms_bind_region(bd, MS_REGION_GLOBAL, &g, err);
    if (id < 0) return (ms_status)id;
    m->final_region = id;
    return ms_bind_lm_head(bd, "lm_head.weight", err);
}
