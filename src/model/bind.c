/* model/bind.c - binding the released tensor names to typed views.
 *
 * Owns: the names, dtypes and shapes the model expects (spec section 3),
 * the regions the store reads them in, and the dry-run layout a plan is
 * made from when there is no checkpoint (a config.json alone).
 * Main idea: every tensor the model uses is looked up by its released name,
 * its dtype and shape are checked against the config, and it is assigned to
 * a store region. A region's ranges are the region's tensors sorted by file
 * offset and coalesced where one ends exactly where the next begins: in the
 * released layout a layer's dense part and each expert's six tensors are one
 * range each (one read); anything else falls back to one range per run.
 * Invariants: regions are declared in the order of use (embedding, each
 * layer's attention part, FFN part and experts, the final norms, lm_head);
 * every bound tensor has a region and an offset inside it, or region -1 when
 * it does not exist for that layer.
 * Does not: read weight bytes (except ms_model_validate's few), open files.
 */
#include "model/bind_int.h"

#include "format/sums.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PFX "language_model.model."
static void fmt_shape(char *buf, size_t n, int nd, const int64_t *d) {
    size_t at = 0;
    at += (size_t)snprintf(buf + at, n - at, "[");
    for (int i = 0; i < nd && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

static const char *dt_set_name(int mask) {
    if (mask == DT_BF16) return "BF16";
    if (mask == DT_F32) return "F32";
    if (mask == DT_U8) return "U8";
    return "BF16 or F32";
}

/* Look up `name`, check dtype in `dt_mask` and shape == dims[0..nd) (for
 * `flat`, only the element count must equal dims[0] with any shape), add it to
 * group g. Returns the tensor info or NULL with err set. */
static const char *shard_file(const binder *bd, int shard) {
    return bd->ck ? ms_ckpt_shard(bd->ck, shard)->file : "(config)";
}

const ms_tensor_info *ms_bind_find(const binder *bd, const char *name) {
    return bd->ck ? ms_ckpt_find(bd->ck, name) : NULL;
}

/* Dry run: the tensor as the config says it should be, placed right after the previous one. */
static const ms_tensor_info *synth(binder *bd, group *g, int dt_mask, int nd, const int64_t *dims) {
    MS_ASSERT(g->n < MAX_REGION_TENSORS);
    ms_tensor_info *t = &g->synth[g->n];
    memset(t, 0, sizeof *t);
    t->dtype = (dt_mask & DT_BF16) ? MS_DT_BF16 : (dt_mask & DT_F32) ? MS_DT_F32 : MS_DT_U8;
    t->n_dim = nd;
    t->numel = 1;
    for (int i = 0; i < nd; i++) { t->shape[i] = dims[i]; t->numel *= dims[i]; }
    t->n_bytes = t->numel * ms_dtype_size(t->dtype);
    t->offset = bd->synth_off;
    bd->synth_off += t->n_bytes;
    return t;
}

const ms_tensor_info *ms_bind_want(binder *bd, group *g, ms_wt *wt, int64_t *ext_off, const char *name,
                                   int dt_mask, int nd, const int64_t *dims, int flat, ms_err *err) {
    const ms_tensor_info *ti = bd->ck ? ms_ckpt_find(bd->ck, name) : synth(bd, g, dt_mask, nd, dims);
    char exp_s[128], got_s[128];
    fmt_shape(exp_s, sizeof exp_s, nd, dims);
    if (!ti) {
        ms_err_set(err, MS_E_MODEL, "%s: tensor '%s' is missing (expected %s %s, found no such tensor)",
                   bd->ck && ms_ckpt_has_index(bd->ck) ? "model.safetensors.index.json" : "the checkpoint's shards",
                   name, dt_set_name(dt_mask), exp_s);
        return NULL;
    }
    fmt_shape(got_s, sizeof got_s, ti->n_dim, ti->shape);
    int shape_ok;
    if (flat) shape_ok = ti->numel == dims[0];
    else {
        shape_ok = ti->n_dim == nd;
        for (int i = 0; shape_ok && i < nd; i++) shape_ok = ti->shape[i] == dims[i];
    }
    if (!((1 << ti->dtype) & dt_mask) || !shape_ok) {
        ms_err_set(err, MS_E_MODEL, "%s: tensor '%s': expected %s %s%s, found %s %s",
                   shard_file(bd, ti->shard), name, dt_set_name(dt_mask), exp_s,
                   flat ? " (any shape with that many elements)" : "", ms_dtype_name(ti->dtype), got_s);
        return NULL;
    }
    MS_ASSERT(g->n < MAX_REGION_TENSORS);
    g->wt[g->n] = wt;
    g->ti[g->n] = ti;
    g->ext_off[g->n] = ext_off;
    g->n++;
    if (wt) {
        wt->dtype = ti->dtype;
        wt->rows = (flat || nd == 1) ? 1 : dims[0];
        wt->cols = 1;
        for (int i = (flat || nd == 1) ? 0 : 1; i < (flat ? 1 : nd); i++) wt->cols *= dims[i];
    }
    return ti;
}

void ms_bind_slice(group *g, int64_t *ext_off, const ms_tensor_info *fused, int64_t e) {
    MS_ASSERT(g->n < MAX_REGION_TENSORS && fused->n_dim >= 2 && e >= 0 && e < fused->shape[0]);
    ms_tensor_info *t = &g->synth[g->n];
    *t = *fused;
    t->n_dim = fused->n_dim - 1;
    for (int i = 0; i < t->n_dim; i++) t->shape[i] = fused->shape[i + 1];
    t->numel = fused->numel / fused->shape[0];
    t->n_bytes = fused->n_bytes / fused->shape[0];
    t->offset = fused->offset + e * t->n_bytes;
    g->wt[g->n] = NULL;
    g->ti[g->n] = t;
    g->ext_off[g->n] = ext_off;
    g->n++;
}

static int cmp_by_offset(const void *a, const void *b) {
    const ms_tensor_info *x = *(const ms_tensor_info * const *)a;
    const ms_tensor_info *y = *(const ms_tensor_info * const *)b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Dry run: record the size the store would give the region (its layout). */
static int plan_region(ms_model *m, ms_region_class cls, int64_t bytes, ms_err *err) {
    if (m->n_plan_regions == m->cap_plan_regions) {
        int cap = m->cap_plan_regions ? 2 * m->cap_plan_regions : 1024;
        ms_plan_region *p = realloc(m->plan_regions, (size_t)cap * sizeof *p);
        if (!p) return ms_err_set(err, MS_E_NOMEM, "out of memory");
        m->plan_regions = p;
        m->cap_plan_regions = cap;
    }
    ms_plan_region *pr = &m->plan_regions[m->n_plan_regions];
    pr->cls = cls;
    pr->bytes = bytes;
    pr->sparse = 0;
    return m->n_plan_regions++;
}

static int64_t region_bytes(const binder *bd, int id) {
    return bd->store ? ms_store_region_bytes(bd->store, id) : bd->m->plan_regions[id].bytes;
}

/* A region of ranges r[0..n): declared to the store, or (dry run) laid out
 * by the store's rule and recorded for the plan. */
static int add_region(binder *bd, ms_region_class cls, const ms_range *r, int n, int64_t *pos, ms_err *err) {
    if (bd->store) return ms_store_add_region(bd->store, cls, r, n, pos, err);
    return plan_region(bd->m, cls, ms_store_layout(r, n, pos), err);
}

/* safetensors does not align data offsets. F32 tensors are read at any
 * alignment (forward_int.h, ms_ld_f32); BF16 data is read in place as 16-bit
 * elements, so a BF16 tensor at an odd file offset lies in a range the store
 * moves one byte down (ms_range.down): -1 (no BF16 tensor: either way), or
 * the `down` a tensor t needs. */
static int down_for(const ms_tensor_info *t) { return t->dtype == MS_DT_BF16 ? (int)(t->offset & 1) : -1; }

/* Turn a group into one store region; fill every member's offset. Tensors
 * adjacent in their file share a range unless they need different `down`s. */
int ms_bind_region(binder *bd, ms_region_class cls, group *g, ms_err *err) {
    const ms_tensor_info *sorted[MAX_REGION_TENSORS];
    memcpy(sorted, g->ti, (size_t)g->n * sizeof *sorted);
    qsort(sorted, (size_t)g->n, sizeof *sorted, cmp_by_offset);
    ms_range ranges[MAX_REGION_TENSORS];
    int down[MAX_REGION_TENSORS];
    int n_ranges = 0;
    for (int i = 0; i < g->n; i++) {
        const ms_tensor_info *t = sorted[i];
        const int d = down_for(t);
        ms_range *last = n_ranges > 0 ? &ranges[n_ranges - 1] : NULL;
        if (last && last->shard == t->shard && last->offset + last->n_bytes == t->offset &&
            (d < 0 || down[n_ranges - 1] < 0 || d == down[n_ranges - 1])) {
            last->n_bytes += t->n_bytes;
            if (d >= 0) down[n_ranges - 1] = d;
        } else {
            ranges[n_ranges] = (ms_range){ t->shard, t->offset, t->n_bytes, 0 };
            down[n_ranges++] = d;
        }
    }
    for (int r = 0; r < n_ranges; r++) ranges[r].down = down[r] > 0;
    int64_t pos[MAX_REGION_TENSORS];
    int id = add_region(bd, cls, ranges, n_ranges, pos, err);
    if (id < 0) return id;
    for (int i = 0; i < g->n; i++) {
        const ms_tensor_info *t = g->ti[i];
        int64_t off = -1, rel = 0;
        for (int r = 0; r < n_ranges; r++) {
            if (ranges[r].shard == t->shard && t->offset >= ranges[r].offset &&
                t->offset + t->n_bytes <= ranges[r].offset + ranges[r].n_bytes) {
                off = pos[r] + (t->offset - ranges[r].offset);
                rel += t->offset - ranges[r].offset;
                break;
            }
            rel += ranges[r].n_bytes;
        }
        MS_ASSERT(off >= 0);
        if (g->wt[i]) {
            g->wt[i]->region = id; g->wt[i]->off = off; g->wt[i]->rel = rel;
            g->wt[i]->name = t->name;
            g->wt[i]->file = bd->ck ? ms_ckpt_shard(bd->ck, t->shard)->file : NULL;
        }
        if (g->ext_off[i]) *g->ext_off[i] = off;
    }
    return id;
}


/* A layer's tensor by its name after "layers.<il>.", into group g: WANT with
 * the exact shape, WANTV a 1-D weight of n elements in BF16 or F32 (any
 * shape with that many elements). Each returns from the function on error. */
#define NAME(...) (snprintf(name, sizeof name, PFX "layers.%d." __VA_ARGS__), name)
#define WANT(wt, dtm, ...) \
    if (!ms_bind_want(bd, g, (wt), NULL, name, (dtm), __VA_ARGS__, 0, err)) return err->status
#define WANTV(wt, n) \
    if (!ms_bind_want(bd, g, (wt), NULL, name, DT_BF16 | DT_F32, D1(n), 1, err)) return err->status

/* The norms and projections of the attention residuals around layer il. */
static ms_status bind_residuals(binder *bd, group *g, ms_layer *L, int il, ms_err *err) {
    const int64_t H = bd->m->cfg.hidden_size;
    char name[256];
    NAME("input_layernorm.weight", il);              WANTV(&L->input_norm, H);
    NAME("post_attention_layernorm.weight", il);     WANTV(&L->post_attn_norm, H);
    NAME("self_attention_res_norm.weight", il);      WANTV(&L->attn_res_norm, H);
    NAME("self_attention_res_proj.weight", il);      WANTV(&L->attn_res_proj, H);
    NAME("mlp_res_norm.weight", il);                 WANTV(&L->mlp_res_norm, H);
    NAME("mlp_res_proj.weight", il);                 WANTV(&L->mlp_res_proj, H);
    return MS_OK;
}

/* Gated NoPE MLA (spec 4.4). */
static ms_status bind_mla(binder *bd, group *g, ms_layer *L, int il, ms_err *err) {
    const ms_config *c = &bd->m->cfg;
    const int64_t H = c->hidden_size, nh = c->num_attention_heads;
    const int64_t qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    char name[256];
    NAME("self_attn.q_a_proj.weight", il);       WANT(&L->q_a, DT_BF16, D2(c->q_lora_rank, H));
    NAME("self_attn.q_a_layernorm.weight", il);  WANTV(&L->q_a_norm, c->q_lora_rank);
    NAME("self_attn.q_b_proj.weight", il);       WANT(&L->q_b, DT_BF16, D2(nh * qk, c->q_lora_rank));
    NAME("self_attn.kv_a_proj_with_mqa.weight", il);
    WANT(&L->kv_a, DT_BF16, D2(c->kv_lora_rank + c->qk_rope_head_dim, H));
    NAME("self_attn.kv_a_layernorm.weight", il); WANTV(&L->kv_a_norm, c->kv_lora_rank);
    NAME("self_attn.kv_b_proj.weight", il);
    WANT(&L->kv_b, DT_BF16, D2(nh * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank));
    NAME("self_attn.g_proj.weight", il);         WANT(&L->g_proj, DT_BF16, D2(nh * c->v_head_dim, H));
    NAME("self_attn.o_proj.weight", il);         WANT(&L->o_proj, DT_BF16, D2(H, nh * c->v_head_dim));
    return MS_OK;
}

/* KDA (spec 4.3). */
static ms_status bind_kda(binder *bd, group *g, ms_layer *L, int il, ms_err *err) {
    const ms_config *c = &bd->m->cfg;
    const int64_t H = c->hidden_size, nh = c->kda_num_heads, hd = c->kda_head_dim, P = nh * hd;
    const int64_t K = c->short_conv_kernel_size;
    char name[256];
    NAME("self_attn.q_proj.weight", il);         WANT(&L->q_proj, DT_BF16, D2(P, H));
    NAME("self_attn.k_proj.weight", il);         WANT(&L->k_proj, DT_BF16, D2(P, H));
    NAME("self_attn.v_proj.weight", il);         WANT(&L->v_proj, DT_BF16, D2(P, H));
    NAME("self_attn.g_proj.weight", il);         WANT(&L->g_proj, DT_BF16, D2(P, H));
    NAME("self_attn.o_proj.weight", il);         WANT(&L->o_proj, DT_BF16, D2(H, P));
    NAME("self_attn.q_conv1d.weight", il);       WANT(&L->q_conv, DT_F32, D3(P, 1, K));
    NAME("self_attn.k_conv1d.weight", il);       WANT(&L->k_conv, DT_F32, D3(P, 1, K));
    NAME("self_attn.v_conv1d.weight", il);       WANT(&L->v_conv, DT_F32, D3(P, 1, K));
    /* f_a_proj's rank is not in the config: take it from the tensor */
    NAME("self_attn.f_a_proj.weight", il);
    const ms_tensor_info *fa = ms_bind_find(bd, name);
    int64_t rank = fa && fa->n_dim == 2 ? fa->shape[0] : hd;
    WANT(&L->f_a, DT_BF16, D2(rank, H));
    NAME("self_attn.f_b_proj.weight", il);       WANT(&L->f_b, DT_BF16, D2(P, rank));
    NAME("self_attn.b_proj.weight", il);         WANT(&L->b_proj, DT_BF16, D2(nh, H));
    NAME("self_attn.dt_bias", il);               WANT(&L->dt_bias, DT_F32 | DT_BF16, D1(P));
    /* A_log is padded to head_dim (spec 3, trap): only the first nh entries,
     * one per head, are used; the forward indexes it by head */
    NAME("self_attn.A_log", il);                 WANT(&L->a_log, DT_F32, D1(hd));
    NAME("self_attn.o_norm.weight", il);         WANTV(&L->o_norm, hd);
    return MS_OK;
}

/* The FFN's trunk: the dense MLP, or the LatentMoE's router, latent
 * projections and shared experts (spec 4.5). */
static ms_status bind_ffn(binder *bd, group *g, ms_layer *L, int il, ms_err *err) {
    const ms_config *c = &bd->m->cfg;
    const int64_t H = c->hidden_size;
    char name[256];
    if (L->is_dense) {
        const int64_t I = c->intermediate_size;
        NAME("mlp.gate_proj.weight", il);            WANT(&L->mlp_gate, DT_BF16, D2(I, H));
        NAME("mlp.up_proj.weight", il);              WANT(&L->mlp_up, DT_BF16, D2(I, H));
        NAME("mlp.down_proj.weight", il);            WANT(&L->mlp_down, DT_BF16, D2(H, I));
        return MS_OK;
    }
    const int64_t E = c->num_experts, lat = c->routed_expert_hidden_size;
    const int64_t S = c->num_shared_experts * c->moe_intermediate_size;
    NAME("block_sparse_moe.gate.weight", il);    WANT(&L->router, DT_BF16, D2(E, H));
    NAME("block_sparse_moe.gate.e_score_correction_bias", il);
    WANT(&L->router_bias, DT_F32 | DT_BF16, D1(E));
    NAME("block_sparse_moe.routed_expert_down_proj.weight", il); WANT(&L->lat_down, DT_BF16, D2(lat, H));
    NAME("block_sparse_moe.routed_expert_norm.weight", il);      WANTV(&L->lat_norm, lat);
    NAME("block_sparse_moe.routed_expert_up_proj.weight", il);   WANT(&L->lat_up, DT_BF16, D2(H, lat));
    NAME("block_sparse_moe.shared_experts.gate_proj.weight", il); WANT(&L->sh_gate, DT_BF16, D2(S, H));
    NAME("block_sparse_moe.shared_experts.up_proj.weight", il);   WANT(&L->sh_up, DT_BF16, D2(S, H));
    NAME("block_sparse_moe.shared_experts.down_proj.weight", il); WANT(&L->sh_down, DT_BF16, D2(H, S));
    return MS_OK;
}
#undef NAME
#undef WANT
#undef WANTV

/* Each routed expert of MoE layer il: its six MXFP4 tensors, one EXPERT
 * region per expert, consecutive region ids. */
static ms_status bind_experts(binder *bd, ms_layer *L, int il, ms_err *err) {
    const ms_config *c = &bd->m->cfg;
    const int64_t E = c->num_experts, lat = c->routed_expert_hidden_size;
    const int64_t I = c->moe_intermediate_size, gs = c->quant_group_size;
    static const char *part[MS_EXP_N] = {
        "w1.weight_packed", "w1.weight_scale", "w2.weight_packed",
        "w2.weight_scale", "w3.weight_packed", "w3.weight_scale" };
    char name[256];
    L->expert_off = calloc((size_t)E, sizeof *L->expert_off);
    if (!L->expert_off) return ms_err_set(err, MS_E_NOMEM, "out of memory binding experts");
    for (int64_t ie = 0; ie < E; ie++) {
        group eg = {0};
        for (int k = 0; k < MS_EXP_N; k++) {
            int is_w2 = k == MS_EXP_W2P || k == MS_EXP_W2S;
            int is_scale = k % 2 == 1;
            int64_t rows = is_w2 ? lat : I, in = is_w2 ? I : lat;
            int64_t cols = is_scale ? in / gs : in / 2;
            snprintf(name, sizeof name, PFX "layers.%d.block_sparse_moe.experts.%lld.%s", il, (long long)ie, part[k]);
            if (!ms_bind_want(bd, &eg, NULL, &L->expert_off[ie][k], name, DT_U8, D2(rows, cols), 0, err))
                return err->status;
        }
        int rid = ms_bind_region(bd, MS_REGION_EXPERT, &eg, err);
        if (rid < 0) return (ms_status)rid;
        if (ie == 0) L->expert_region0 = rid;
        MS_ASSERT(rid == L->expert_region0 + ie);
    }
    return MS_OK;
}

/* Layer il: its attention part (residuals + mixer) and FFN part, one TRUNK
 * region each, then its experts. */
static ms_status bind_layer(binder *bd, int il, ms_err *err) {
    ms_layer *L = &bd->m->layers[il];
    group g = {0};
    ms_status st = bind_residuals(bd, &g, L, il, err);
    if (st == MS_OK) st = L->is_mla ? bind_mla(bd, &g, L, il, err) : bind_kda(bd, &g, L, il, err);
    if (st != MS_OK) return st;
    int id = ms_bind_region(bd, MS_REGION_TRUNK, &g, err);
    if (id < 0) return (ms_status)id;
    L->attn_region = id;
    memset(&g, 0, sizeof g);
    if ((st = bind_ffn(bd, &g, L, il, err)) != MS_OK) return st;
    if ((id = ms_bind_region(bd, MS_REGION_TRUNK, &g, err)) < 0) return (ms_status)id;
    L->ffn_region = id;
    return L->is_dense ? MS_OK : bind_experts(bd, L, il, err);
}

ms_status ms_model_bind(ms_model *m, const ms_config *cfg, const ms_ckpt *ck,
                        ms_store *store, ms_err *err) {
    return ms_model_bind_part(m, cfg, ck, store, 0, (int)cfg->num_hidden_layers, 1, err);
}

/* m before any tensor: the config, every layer's kind and index among its
 * kind, no region yet; the part [layer0, layer1) (+ head). */
static ms_status model_init(ms_model *m, const ms_config *cfg, int layer0, int layer1, int head, ms_err *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    const ms_config *c = &m->cfg;
    m->n_layer = (int)c->num_hidden_layers;
    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (!m->layers) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    m->layer0 = layer0;
    m->layer1 = layer1;
    m->head = head;
    const int oss = c->family == MS_FAMILY_GPT_OSS;
    int n_kda = 0, n_pos = 0;
    for (int il = 0; il < m->n_layer; il++) {
        ms_layer *L = &m->layers[il];
        L->index = il;
        L->is_mla = c->layer_is_mla[il];
        L->is_sliding = c->layer_is_sliding[il];
        L->is_dense = il < c->first_k_dense_replace;
        if (il == layer0) { m->kda0 = n_kda; m->pos0 = n_pos; }
        /* K3: an MLA layer keeps a cache per position, a KDA layer a state;
         * gpt-oss: every layer keeps its keys and values per position */
        const int pos = oss || L->is_mla;
        L->kda_index = pos ? -1 : n_kda++;
        L->pos_index = pos ? n_pos++ : -1;
        if (il == layer1 - 1) { m->kda1 = n_kda; m->pos1 = n_pos; }
        L->attn_region = L->ffn_region = L->expert_region0 = -1;
    }
    m->embed_region = m->final_region = -1;
    if (oss) {
        /* an expert's six slices: gate_up [2I, H] and down [H, I] as blocks,
         * scales and BF16 biases */
        const int64_t H = c->hidden_size, I = c->intermediate_size;
        m->expert_bytes = 2 * I * (H / 2 + H / 32 + 2) + H * (I / 2 + I / 32 + 2);
        return MS_OK;
    }
    m->expert_bytes = c->num_experts > 0 ?
        2 * (c->moe_intermediate_size * c->routed_expert_hidden_size / 2 +
             c->moe_intermediate_size * c->routed_expert_hidden_size / c->quant_group_size) +
        (c->routed_expert_hidden_size * c->moe_intermediate_size / 2 +
         c->routed_expert_hidden_size * c->moe_intermediate_size / c->quant_group_size) : 0;
    return MS_OK;
}

/* The embedding (tensor `name`): GLOBAL, read by rows only. */
ms_status ms_bind_embed(binder *bd, const char *name, ms_err *err) {
    ms_model *m = bd->m;
    group g = {0};
    if (!ms_bind_want(bd, &g, &m->embed, NULL, name, DT_BF16, D2(m->cfg.vocab_size, m->cfg.hidden_size),
              0, err))
        return err->status;
    const int id = ms_bind_region(bd, MS_REGION_GLOBAL, &g, err);
    if (id < 0) return (ms_status)id;
    m->embed_region = id;
    if (bd->store) ms_store_mark_sparse(bd->store, id);     /* read by rows only (ms_store_read_part) */
    else m->plan_regions[id].sparse = 1;
    return MS_OK;
}

/* The final norms and the output residual read: one GLOBAL region. */
static ms_status bind_final(binder *bd, ms_err *err) {
    ms_model *m = bd->m;
    const int64_t H = m->cfg.hidden_size;
    group g = {0};
    if (!ms_bind_want(bd, &g, &m->final_norm, NULL, PFX "norm.weight", DT_BF16 | DT_F32, D1(H), 1, err) ||
        !ms_bind_want(bd, &g, &m->out_res_norm, NULL, PFX "output_attn_res_norm.weight", DT_BF16 | DT_F32, D1(H), 1, err) ||
        !ms_bind_want(bd, &g, &m->out_res_proj, NULL, PFX "output_attn_res_proj.weight", DT_BF16 | DT_F32, D1(H), 1, err))
        return err->status;
    const int id = ms_bind_region(bd, MS_REGION_GLOBAL, &g, err);
    if (id < 0) return (ms_status)id;
    m->final_region = id;
    return MS_OK;
}

/* lm_head rows per region: about the largest layer region of the part, so a
 * streamed lm_head fits the trunk ring's slots. */
static int64_t lm_rows_per_chunk(const binder *bd) {
    const ms_model *m = bd->m;
    const int64_t V = m->cfg.vocab_size, row_bytes = m->cfg.hidden_size * 2;
    int64_t max_region = 1 << 20;
    for (int il = m->layer0; il < m->layer1; il++) {
        int64_t a = region_bytes(bd, m->layers[il].attn_region);
        int64_t f = region_bytes(bd, m->layers[il].ffn_region);
        if (a > max_region) max_region = a;
        if (f > max_region) max_region = f;
    }
    int64_t rows_per = max_region / row_bytes;
    if (rows_per < 1) rows_per = 1;
    if (rows_per < V) {
        /* chunk boundaries on checksum blocks of the tensor (format/sums.h), so
         * every chunk can be verified as read: a multiple of the rows in
         * lcm(B, row_bytes) bytes; when not even one such multiple fits the
         * largest layer region, the chunk is that one multiple (larger than
         * the layer regions; the plan counts it like any region) */
        int64_t a = MS_SUMS_BLOCK_BYTES, b = row_bytes;
        while (b) { int64_t t = a % b; a = b; b = t; }      /* a = gcd(B, row_bytes) */
        const int64_t unit = MS_SUMS_BLOCK_BYTES / a;        /* rows per lcm(B, row_bytes) */
        rows_per = rows_per >= unit ? rows_per / unit * unit : unit;
    }
    return rows_per;
}

/* lm_head (tensor `name`), split by rows into TRUNK regions (after the
 * layers: sized by them). */
ms_status ms_bind_lm_head(binder *bd, const char *name, ms_err *err) {
    ms_model *m = bd->m;
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size, row_bytes = H * 2;
    group g = {0};
    const ms_tensor_info *lt = ms_bind_want(bd, &g, &m->lm_head, NULL, name, DT_BF16, D2(V, H), 0, err);
    if (!lt) return err->status;
    const int64_t rows_per = lm_rows_per_chunk(bd);
    m->n_lm_chunks = (int)((V + rows_per - 1) / rows_per);
    m->lm_region = calloc((size_t)m->n_lm_chunks, sizeof *m->lm_region);
    m->lm_row0 = calloc((size_t)m->n_lm_chunks + 1, sizeof *m->lm_row0);
    m->lm_off = calloc((size_t)m->n_lm_chunks, sizeof *m->lm_off);
    if (!m->lm_region || !m->lm_row0 || !m->lm_off) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    for (int ic = 0; ic < m->n_lm_chunks; ic++) {
        int64_t r0 = (int64_t)ic * rows_per, r1 = r0 + rows_per < V ? r0 + rows_per : V;
        ms_range rg = { lt->shard, lt->offset + r0 * row_bytes, (r1 - r0) * row_bytes, (int)(lt->offset & 1) };
        int64_t pos;
        const int id = add_region(bd, MS_REGION_TRUNK, &rg, 1, &pos, err);
        if (id < 0) return (ms_status)id;
        m->lm_off[ic] = pos;
        m->lm_region[ic] = id;
        m->lm_row0[ic] = r0;
        m->lm_row0[ic + 1] = r1;
    }
    return MS_OK;
}

ms_status ms_model_bind_part(ms_model *m, const ms_config *cfg, const ms_ckpt *ck, ms_store *store,
                             int layer0, int layer1, int head, ms_err *err) {
    MS_ASSERT(0 <= layer0 && layer0 < layer1 && layer1 <= cfg->num_hidden_layers);
    MS_ASSERT((ck == NULL) == (store == NULL));
    binder b = { m, ck, store, 0 };
    ms_status st = model_init(m, cfg, layer0, layer1, head, err);
    if (st != MS_OK) return st;
    /* the regions in the order of use: embedding, layers, final norms, lm_head */
    if (cfg->family == MS_FAMILY_GPT_OSS) return ms_oss_bind(&b, err);
    if (head && (st = ms_bind_embed(&b, PFX "embed_tokens.weight", err)) != MS_OK) return st;
    for (int il = layer0; il < layer1; il++)
        if ((st = bind_layer(&b, il, err)) != MS_OK) return st;
    if (!head) return MS_OK;
    if ((st = bind_final(&b, err)) != MS_OK) return st;
    return ms_bind_lm_head(&b, "language_model.lm_head.weight", err);
}

static ms_status check_finite(const ms_wt *w, ms_store *store, float *buf, int64_t cap, ms_err *err) {
    if (w->region < 0 || w->rows != 1) return MS_OK;
    const int64_t n = w->cols, esz = w->dtype == MS_DT_F32 ? 4 : 2;
    MS_ASSERT(n <= cap);
    ms_status st = ms_store_read_part(store, w->region, w->rel, n * esz, buf, err);
    if (st != MS_OK) return st;
    for (int64_t i = n - 1; i >= 0; i--) {
        float v = esz == 4 ? buf[i] : ms_bf16_to_f32(((const uint16_t *)buf)[i]);
        if (!isfinite(v))
            return ms_err_set(err, MS_E_MODEL, "%s: tensor '%s': expected finite values, found %s at element %lld",
                              w->file ? w->file : "?", w->name, isnan(v) ? "NaN" : "infinity", (long long)i);
    }
    return MS_OK;
}

ms_status ms_model_validate(const ms_model *m, ms_store *store, ms_err *err) {
    const ms_config *c = &m->cfg;
    int64_t cap = c->hidden_size;
    int64_t dims[] = { c->kda_num_heads * c->kda_head_dim, c->num_experts, c->q_lora_rank,
                       c->kv_lora_rank, c->routed_expert_hidden_size, c->kda_head_dim,
                       c->num_attention_heads * c->head_dim };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) if (dims[i] > cap) cap = dims[i];
    float *buf = malloc((size_t)cap * sizeof(float));
    if (!buf) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    ms_status st = MS_OK;
    const ms_wt *globals[] = { &m->final_norm, &m->out_res_norm, &m->out_res_proj };
    for (size_t i = 0; i < 3 && st == MS_OK; i++) st = check_finite(globals[i], store, buf, cap, err);
    for (int il = 0; il < m->n_layer && st == MS_OK; il++) {
        const ms_layer *L = &m->layers[il];
        const ms_wt *v[] = { &L->input_norm, &L->post_attn_norm, &L->attn_res_norm, &L->attn_res_proj,
                             &L->mlp_res_norm, &L->mlp_res_proj, &L->dt_bias, &L->a_log, &L->o_norm,
                             &L->q_a_norm, &L->kv_a_norm, &L->router_bias, &L->lat_norm,
                             &L->q_bias, &L->k_bias, &L->v_bias, &L->o_bias, &L->sinks };
        for (size_t i = 0; i < sizeof v / sizeof v[0] && st == MS_OK; i++)
            if (v[i]->name) st = check_finite(v[i], store, buf, cap, err);
    }
    free(buf);
    return st;
}

void ms_model_free(ms_model *m) {
    if (!m || !m->layers) return;
    for (int il = 0; il < m->n_layer; il++) free(m->layers[il].expert_off);
    free(m->layers);
    free(m->lm_region);
    free(m->lm_row0);
    free(m->lm_off);
    free(m->plan_regions);
    m->layers = NULL;
}
