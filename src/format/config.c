/* format/config.c - the released nested config.json into ms_config.
 *
 * Owns: reading every field of ms_config (spec section 2) and refusing what
 *   the engine does not implement.
 * Idea: one table names every scalar field, its JSON object and its type; a
 *   reader walks it and records, per field, whether a value was read. Each
 *   problem (missing, wrong type, unsupported, out of range) is appended to one
 *   buffer, and all of them are reported at once:
 *     "config.json: text_config.hidden_size missing; text_config.kv_lora_rank:
 *      expected integer, found string"
 *   A check that needs a field that could not be read is skipped (the read
 *   problem is already reported), so one bad field gives one message.
 *   Layout of the input (unknown fields and vision_config are ignored):
 *     { "text_config": { ...scalars...,
 *         "linear_attn_config": { num_heads, head_dim, full_attn_layers, ... },
 *         "quantization_config": { "config_groups": { "group_0": {
 *             "format": "mxfp4-pack-quantized", "weights": { "group_size": 32 } } } } } }
 * Invariants: on success every field of ms_config was read from the file (no
 *   defaults) and passed its check; on failure *out is all zero.
 * Does not: look at weights or the tokenizer, read gpt-oss's config
 *   (config_oss.c; ms_config_parse hands it the parsed JSON).
 */
#include "format/config.h"
#include "base/file.h"
#include "format/config_int.h"
#include "format/json_util.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_BYTES (16LL * 1024 * 1024)
/* per-layer problems (out of range, doubled, missing) reported before "..." */
#define MAX_LAYER_PROBLEMS 8

#define P_TEXT "text_config"
#define P_LIN "text_config.linear_attn_config"
#define P_QUANT "text_config.quantization_config"
#define P_GROUP "text_config.quantization_config.config_groups.group_0"
#define P_WEIGHTS "text_config.quantization_config.config_groups.group_0.weights"

void ms_config_problem(ms_config_problems *p, const char *fmt, ...) {
    p->n++;
    if (p->len + 1 >= sizeof p->buf) return;
    if (p->n > 1) p->len += (size_t)snprintf(p->buf + p->len, sizeof p->buf - p->len, "; ");
    if (p->len + 1 >= sizeof p->buf) { p->len = sizeof p->buf - 1; return; }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(p->buf + p->len, sizeof p->buf - p->len, fmt, ap);
    va_end(ap);
    if (w > 0) p->len += (size_t)w;
    if (p->len >= sizeof p->buf) p->len = sizeof p->buf - 1;
}
#define problem ms_config_problem
typedef ms_config_problems problems;

enum { O_TEXT, O_LIN, O_WEIGHTS, O_COUNT };
static const char *const obj_path[O_COUNT] = { P_TEXT, P_LIN, P_WEIGHTS };

typedef enum kind { K_INT, K_DBL, K_BOOL } kind;

typedef struct field {
    int obj;                    /* O_* */
    const char *key;            /* name in the JSON object */
    kind k;
    size_t off;                 /* offset in ms_config */
} field;

#define FI(o, key, member) { o, key, K_INT, offsetof(ms_config, member) }
#define FD(o, key, member) { o, key, K_DBL, offsetof(ms_config, member) }
#define FB(o, key, member) { o, key, K_BOOL, offsetof(ms_config, member) }

static const field fields[] = {
    FI(O_TEXT, "hidden_size", hidden_size),
    FI(O_TEXT, "num_hidden_layers", num_hidden_layers),
    FI(O_TEXT, "vocab_size", vocab_size),
    FD(O_TEXT, "rms_norm_eps", rms_norm_eps),
    FB(O_TEXT, "tie_word_embeddings", tie_word_embeddings),
    FI(O_TEXT, "num_attention_heads", num_attention_heads),
    FI(O_TEXT, "q_lora_rank", q_lora_rank),
    FI(O_TEXT, "kv_lora_rank", kv_lora_rank),
    FI(O_TEXT, "qk_nope_head_dim", qk_nope_head_dim),
    FI(O_TEXT, "qk_rope_head_dim", qk_rope_head_dim),
    FI(O_TEXT, "v_head_dim", v_head_dim),
    FB(O_TEXT, "mla_use_nope", mla_use_nope),
    FB(O_TEXT, "mla_use_output_gate", mla_use_output_gate),
    FI(O_TEXT, "first_k_dense_replace", first_k_dense_replace),
    FI(O_TEXT, "intermediate_size", intermediate_size),
    FI(O_TEXT, "num_experts", num_experts),
    FI(O_TEXT, "num_experts_per_token", num_experts_per_token),
    FI(O_TEXT, "num_shared_experts", num_shared_experts),
    FI(O_TEXT, "moe_intermediate_size", moe_intermediate_size),
    FI(O_TEXT, "routed_expert_hidden_size", routed_expert_hidden_size),
    FB(O_TEXT, "latent_moe_use_norm", latent_moe_use_norm),
    FB(O_TEXT, "moe_renormalize", moe_renormalize),
    FD(O_TEXT, "routed_scaling_factor", routed_scaling_factor),
    FI(O_TEXT, "num_expert_group", num_expert_group),
    FI(O_TEXT, "topk_group", topk_group),
    FD(O_TEXT, "activation_situ_beta", activation_situ_beta),
    FD(O_TEXT, "activation_situ_linear_beta", activation_situ_linear_beta),
    FI(O_TEXT, "attn_res_block_size", attn_res_block_size),
    FI(O_TEXT, "num_nextn_predict_layers", num_nextn_predict_layers),
    FI(O_TEXT, "bos_token_id", bos_token_id),
    FI(O_TEXT, "eos_token_id", eos_token_id),
    FI(O_TEXT, "pad_token_id", pad_token_id),
    FI(O_LIN, "num_heads", kda_num_heads),
    FI(O_LIN, "head_dim", kda_head_dim),
    FI(O_LIN, "short_conv_kernel_size", short_conv_kernel_size),
    FD(O_LIN, "gate_lower_bound", gate_lower_bound),
    FB(O_LIN, "use_full_rank_gate", use_full_rank_gate),
    FI(O_WEIGHTS, "group_size", quant_group_size),
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

typedef struct reader {
    problems pr;
    const json_t *obj[O_COUNT]; /* NULL: missing or not an object (reported) */
    bool ok[N_FIELDS];          /* the field was read with the right type */
    ms_config *c;
} reader;

static int field_index(size_t off) {
    for (size_t i = 0; i < N_FIELDS; i++)
        if (fields[i].off == off) return (int)i;
    MS_ASSERT(!"config field not in the table");
    return -1;
}

/* was the field at this offset read? */
#define HAVE(r, member) ((r)->ok[field_index(offsetof(ms_config, member))])
#define PATH(member) field_path(offsetof(ms_config, member))

static const char *field_path(size_t off) {
    /* "text_config.linear_attn_config.head_dim" etc.; one static buffer per
     * slot so a message may name two fields */
    static _Thread_local char buf[2][160];
    static _Thread_local int which;
    const field *f = &fields[field_index(off)];
    char *b = buf[which ^= 1];
    snprintf(b, sizeof buf[0], "%s.%s", obj_path[f->obj], f->key);
    return b;
}

/* The object parent[key], or NULL after reporting it missing / not an object.
 * ppath names the parent in messages; NULL for the top level. */
static const json_t *get_obj(reader *r, const json_t *parent, const char *ppath,
                             const char *key) {
    if (!parent) return NULL;
    const json_t *v = json_object_get(parent, key);
    const char *dot = ppath ? "." : "";
    if (!ppath) ppath = "";
    if (!v) {
        problem(&r->pr, "%s%s%s missing", ppath, dot, key);
        return NULL;
    }
    if (!json_is_object(v)) {
        problem(&r->pr, "%s%s%s: expected object, found %s", ppath, dot, key, ms_json_type_name(v));
        return NULL;
    }
    return v;
}

static void read_fields(reader *r) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        const json_t *o = r->obj[f->obj];
        if (!o) continue;       /* the object's own problem is reported */
        const char *path = obj_path[f->obj];
        const json_t *v = json_object_get(o, f->key);
        if (!v) {
            problem(&r->pr, "%s.%s missing", path, f->key);
            continue;
        }
        char *dst = (char *)r->c + f->off;
        switch (f->k) {
        case K_INT:
            if (!json_is_integer(v)) {
                problem(&r->pr, "%s.%s: expected integer, found %s", path, f->key, ms_json_type_name(v));
                continue;
            }
            *(int64_t *)(void *)dst = (int64_t)json_integer_value(v);
            break;
        case K_DBL:
            if (!json_is_number(v)) {
                problem(&r->pr, "%s.%s: expected number, found %s", path, f->key, ms_json_type_name(v));
                continue;
            }
            *(double *)(void *)dst = json_number_value(v);
            break;
        case K_BOOL:
            if (!json_is_boolean(v)) {
                problem(&r->pr, "%s.%s: expected boolean, found %s", path, f->key, ms_json_type_name(v));
                continue;
            }
            *(bool *)(void *)dst = json_is_true(v);
            break;
        }
        r->ok[i] = true;
    }
}

/* A string field that must hold one supported value. */
static void check_string(reader *r, const json_t *o, const char *ppath, const char *key,
                         const char *want) {
    if (!o) return;
    const json_t *v = json_object_get(o, key);
    if (!v) {
        problem(&r->pr, "%s.%s missing", ppath, key);
    } else if (!json_is_string(v)) {
        problem(&r->pr, "%s.%s: expected string, found %s", ppath, key, ms_json_type_name(v));
    } else if (strcmp(json_string_value(v), want) != 0) {
        problem(&r->pr, "%s.%s: \"%.60s\" is not supported (expected \"%s\")", ppath, key,
                json_string_value(v), want);
    }
}

static void check_positive(reader *r, size_t off) {
    int i = field_index(off);
    if (!r->ok[i]) return;
    int64_t v = *(const int64_t *)(const void *)((const char *)r->c + off);
    if (v <= 0) problem(&r->pr, "%s: expected > 0, found %lld", field_path(off), (long long)v);
}

static void check_positive_dbl(reader *r, size_t off) {
    int i = field_index(off);
    if (!r->ok[i]) return;
    double v = *(const double *)(const void *)((const char *)r->c + off);
    if (!(v > 0)) problem(&r->pr, "%s: expected > 0, found %g", field_path(off), v);
}

static void check_bool(reader *r, size_t off, bool want, const char *why) {
    int i = field_index(off);
    if (!r->ok[i]) return;
    bool v = *(const bool *)(const void *)((const char *)r->c + off);
    if (v != want)
        problem(&r->pr, "%s: %s is not supported (expected %s: %s)", field_path(off),
                v ? "true" : "false", want ? "true" : "false", why);
}

static void check_int_eq(reader *r, size_t off, int64_t want, const char *why) {
    int i = field_index(off);
    if (!r->ok[i]) return;
    int64_t v = *(const int64_t *)(const void *)((const char *)r->c + off);
    if (v != want)
        problem(&r->pr, "%s: %lld is not supported (expected %lld: %s)", field_path(off),
                (long long)v, (long long)want, why);
}

/* Read a layer list into cnt[1..n] (counts per one-based layer). Reports type
 * problems always, range and doubling problems when cnt is given (n_layers
 * usable). Returns -2 if the list is missing or not an array, -1 if some entry
 * is bad, 0 if every entry is a distinct in-range integer. */
static int read_layer_list(reader *r, const char *key, int64_t n_layers, int *cnt) {
    const json_t *o = r->obj[O_LIN];
    if (!o) return -2;
    const json_t *a = json_object_get(o, key);
    if (!a) {
        problem(&r->pr, P_LIN ".%s missing", key);
        return -2;
    }
    if (!json_is_array(a)) {
        problem(&r->pr, P_LIN ".%s: expected array, found %s", key, ms_json_type_name(a));
        return -2;
    }
    int rc = 0, n_range = 0, n_twice = 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v)) {
            problem(&r->pr, P_LIN ".%s[%zu]: expected integer, found %s", key, i, ms_json_type_name(v));
            rc = -1;
            continue;
        }
        if (!cnt) continue;     /* no usable num_hidden_layers to check against */
        int64_t L = (int64_t)json_integer_value(v);
        if (L < 1 || L > n_layers) {
            if (n_range++ < MAX_LAYER_PROBLEMS)
                problem(&r->pr, P_LIN ".%s[%zu]: layer %lld out of range 1..%lld (one-based)",
                        key, i, (long long)L, (long long)n_layers);
            rc = -1;
            continue;
        }
        if (cnt[L]++ == 1 && n_twice++ < MAX_LAYER_PROBLEMS)
            problem(&r->pr, P_LIN ".%s: layer %lld listed more than once", key, (long long)L);
        if (cnt[L] > 1) rc = -1;
    }
    if (n_range > MAX_LAYER_PROBLEMS)
        problem(&r->pr, P_LIN ".%s: %d more layers out of range", key, n_range - MAX_LAYER_PROBLEMS);
    if (n_twice > MAX_LAYER_PROBLEMS)
        problem(&r->pr, P_LIN ".%s: %d more layers listed more than once", key, n_twice - MAX_LAYER_PROBLEMS);
    return rc;
}

static void check_layers(reader *r) {
    ms_config *c = r->c;
    int64_t n = c->num_hidden_layers;
    bool n_ok = HAVE(r, num_hidden_layers) && n >= 1 && n <= MS_MAX_LAYERS;
    /* counts per one-based layer */
    int cnt_mla[MS_MAX_LAYERS + 1], cnt_kda[MS_MAX_LAYERS + 1];
    memset(cnt_mla, 0, sizeof cnt_mla);
    memset(cnt_kda, 0, sizeof cnt_kda);
    int rc_mla = read_layer_list(r, "full_attn_layers", n, n_ok ? cnt_mla : NULL);
    int rc_kda = read_layer_list(r, "kda_layers", n, n_ok ? cnt_kda : NULL);
    if (!n_ok || rc_mla == -2 || rc_kda == -2) return;
    int n_both = 0, n_none = 0;
    for (int64_t L = 1; L <= n; L++) {
        if (cnt_mla[L] && cnt_kda[L]) {
            if (n_both++ < MAX_LAYER_PROBLEMS)
                problem(&r->pr, P_LIN ": layer %lld is in both full_attn_layers and kda_layers",
                        (long long)L);
        } else if (!cnt_mla[L] && !cnt_kda[L]) {
            if (n_none++ < MAX_LAYER_PROBLEMS)
                problem(&r->pr, P_LIN ": layer %lld is in neither full_attn_layers nor kda_layers",
                        (long long)L);
        }
    }
    if (n_both > MAX_LAYER_PROBLEMS)
        problem(&r->pr, P_LIN ": %d more layers in both lists", n_both - MAX_LAYER_PROBLEMS);
    if (n_none > MAX_LAYER_PROBLEMS)
        problem(&r->pr, P_LIN ": %d more layers in neither list", n_none - MAX_LAYER_PROBLEMS);
    if (rc_mla == 0 && rc_kda == 0 && n_both == 0 && n_none == 0) {
        for (int64_t L = 1; L <= n; L++) {
            c->layer_is_mla[L - 1] = cnt_mla[L] ? 1 : 0;
            if (cnt_mla[L]) c->n_mla_layers++;
            else c->n_kda_layers++;
        }
    }
}

static void check_values(reader *r) {
    ms_config *c = r->c;
    static const size_t positive[] = {
        offsetof(ms_config, hidden_size), offsetof(ms_config, num_hidden_layers),
        offsetof(ms_config, vocab_size), offsetof(ms_config, num_attention_heads),
        offsetof(ms_config, q_lora_rank), offsetof(ms_config, kv_lora_rank),
        offsetof(ms_config, qk_nope_head_dim), offsetof(ms_config, qk_rope_head_dim),
        offsetof(ms_config, v_head_dim), offsetof(ms_config, intermediate_size),
        offsetof(ms_config, num_experts), offsetof(ms_config, num_experts_per_token),
        offsetof(ms_config, moe_intermediate_size), offsetof(ms_config, routed_expert_hidden_size),
        offsetof(ms_config, kda_num_heads), offsetof(ms_config, kda_head_dim),
        offsetof(ms_config, short_conv_kernel_size), offsetof(ms_config, quant_group_size),
        offsetof(ms_config, attn_res_block_size),
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++) check_positive(r, positive[i]);
    check_positive_dbl(r, offsetof(ms_config, rms_norm_eps));
    check_positive_dbl(r, offsetof(ms_config, routed_scaling_factor));
    check_positive_dbl(r, offsetof(ms_config, activation_situ_beta));
    check_positive_dbl(r, offsetof(ms_config, activation_situ_linear_beta));

    if (HAVE(r, num_shared_experts) && c->num_shared_experts < 0)
        problem(&r->pr, "%s: expected >= 0, found %lld", PATH(num_shared_experts),
                (long long)c->num_shared_experts);
    if (HAVE(r, num_experts) && HAVE(r, num_experts_per_token) && c->num_experts > 0 &&
        c->num_experts_per_token > c->num_experts)
        problem(&r->pr, "%s: %lld is more than num_experts %lld", PATH(num_experts_per_token),
                (long long)c->num_experts_per_token, (long long)c->num_experts);
    /* A_log is stored padded to head_dim, one value per head (spec section 3) */
    if (HAVE(r, kda_num_heads) && HAVE(r, kda_head_dim) && c->kda_num_heads > c->kda_head_dim)
        problem(&r->pr, "%s: %lld heads is more than head_dim %lld (A_log is padded to head_dim)",
                PATH(kda_num_heads), (long long)c->kda_num_heads, (long long)c->kda_head_dim);
    check_int_eq(r, offsetof(ms_config, quant_group_size), 32, "MXFP4 scales groups of 32");
    if (HAVE(r, quant_group_size) && c->quant_group_size > 0) {
        if (HAVE(r, routed_expert_hidden_size) && c->routed_expert_hidden_size % c->quant_group_size)
            problem(&r->pr, "%s: %lld is not a multiple of group_size %lld", PATH(routed_expert_hidden_size),
                    (long long)c->routed_expert_hidden_size, (long long)c->quant_group_size);
        if (HAVE(r, moe_intermediate_size) && c->moe_intermediate_size % c->quant_group_size)
            problem(&r->pr, "%s: %lld is not a multiple of group_size %lld", PATH(moe_intermediate_size),
                    (long long)c->moe_intermediate_size, (long long)c->quant_group_size);
    }
    check_int_eq(r, offsetof(ms_config, num_expert_group), 1, "expert groups are not implemented");
    check_int_eq(r, offsetof(ms_config, topk_group), 1, "expert groups are not implemented");
    check_int_eq(r, offsetof(ms_config, num_nextn_predict_layers), 0,
                 "multi-token prediction layers are not supported");
    check_bool(r, offsetof(ms_config, mla_use_nope), true, "MLA without rotary embedding is the only MLA implemented");
    check_bool(r, offsetof(ms_config, mla_use_output_gate), true, "the gated MLA is the only MLA implemented");
    check_bool(r, offsetof(ms_config, use_full_rank_gate), true, "the full-rank KDA output gate is the only one implemented");
    check_bool(r, offsetof(ms_config, latent_moe_use_norm), true, "the normed LatentMoE is the only one implemented");
    check_bool(r, offsetof(ms_config, tie_word_embeddings), false, "a separate lm_head is expected");

    if (HAVE(r, num_hidden_layers) && c->num_hidden_layers > MS_MAX_LAYERS)
        problem(&r->pr, "%s: %lld is more than the %d supported", PATH(num_hidden_layers),
                (long long)c->num_hidden_layers, MS_MAX_LAYERS);
    if (HAVE(r, first_k_dense_replace) && HAVE(r, num_hidden_layers) &&
        (c->first_k_dense_replace < 0 || c->first_k_dense_replace > c->num_hidden_layers))
        problem(&r->pr, "%s: %lld is outside 0..num_hidden_layers (%lld)", PATH(first_k_dense_replace),
                (long long)c->first_k_dense_replace, (long long)c->num_hidden_layers);

    static const size_t tokens[] = {
        offsetof(ms_config, bos_token_id), offsetof(ms_config, eos_token_id),
        offsetof(ms_config, pad_token_id),
    };
    for (size_t i = 0; i < 3; i++) {
        int fi = field_index(tokens[i]);
        if (!r->ok[fi]) continue;
        int64_t v = *(const int64_t *)(const void *)((const char *)c + tokens[i]);
        if (v < 0)
            problem(&r->pr, "%s: expected >= 0, found %lld", field_path(tokens[i]), (long long)v);
        else if (HAVE(r, vocab_size) && c->vocab_size > 0 && v >= c->vocab_size)
            problem(&r->pr, "%s: %lld is not below vocab_size %lld", field_path(tokens[i]),
                    (long long)v, (long long)c->vocab_size);
    }
    check_layers(r);
}

/* Parse config.json text (untrusted); see config.h. Reads text_config,
 * text_config.linear_attn_config and the routed-expert quantization; ignores
 * unknown fields and vision_config. On failure returns MS_E_MODEL with every
 * problem in one message "FILE: p1; p2; ..." and zeroes *out.
 * Allocates only temporaries; thread-safe. */
ms_status ms_config_parse(const char *text, size_t n, const char *file,
                          ms_config *out, ms_err *err) {
    if (!file) file = "config.json";
    if (!out) return ms_err_set(err, MS_E_USAGE, "%.200s: no output config", file);
    memset(out, 0, sizeof *out);
    if (!text && n > 0) return ms_err_set(err, MS_E_USAGE, "%.200s: no text", file);
    json_error_t je;
    json_t *root = json_loadb(text ? text : "", n, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        char key[128];
        if (ms_json_dup_key(text, n, &je, key, sizeof key) == 0)
            return ms_err_set(err, MS_E_MODEL, "%.200s: key \"%s\" appears twice in one object", file, key);
        return ms_err_set(err, MS_E_MODEL, "%.200s: not valid JSON (line %d, column %d): %.200s",
                          file, je.line, je.column, je.text);
    }
    reader *r = calloc(1, sizeof *r);
    if (!r) {
        json_decref(root);
        return ms_err_set(err, MS_E_NOMEM, "%.200s: cannot allocate the reader", file);
    }
    r->c = out;
    const json_t *mt = json_is_object(root) ? json_object_get(root, "model_type") : NULL;
    if (!json_is_object(root)) {
        problem(&r->pr, "top level: expected object, found %s", ms_json_type_name(root));
    } else if (json_is_string(mt) && strcmp(json_string_value(mt), "gpt_oss") == 0) {
        ms_config_read_oss(root, out, &r->pr);
    } else if (!json_object_get(root, "text_config")) {
        problem(&r->pr, "text_config missing (expected the nested layout of the released "
                        "config.json, with the model's fields under text_config)");
    } else {
        r->obj[O_TEXT] = get_obj(r, root, NULL, "text_config");
        r->obj[O_LIN] = get_obj(r, r->obj[O_TEXT], P_TEXT, "linear_attn_config");
        const json_t *q = get_obj(r, r->obj[O_TEXT], P_TEXT, "quantization_config");
        const json_t *cg = get_obj(r, q, P_QUANT, "config_groups");
        const json_t *g0 = get_obj(r, cg, P_QUANT ".config_groups", "group_0");
        r->obj[O_WEIGHTS] = get_obj(r, g0, P_GROUP, "weights");
        read_fields(r);
        check_string(r, r->obj[O_TEXT], P_TEXT, "hidden_act", "situ");
        check_string(r, r->obj[O_TEXT], P_TEXT, "moe_router_activation_func", "sigmoid");
        check_string(r, r->obj[O_TEXT], P_TEXT, "topk_method", "noaux_tc");
        check_string(r, g0, P_GROUP, "format", "mxfp4-pack-quantized");
        check_values(r);
        out->n_pos_layers = out->n_mla_layers;
        /* a position's cached floats: the latent and the rope key (each may be
           anything up to INT64_MAX here, so the sum is overflow-checked) */
        if (ms_add_i64(out->kv_lora_rank, out->qk_rope_head_dim, &out->pos_floats))
            problem(&r->pr, "%s: %lld with qk_rope_head_dim %lld overflows a position's size", PATH(kv_lora_rank),
                    (long long)out->kv_lora_rank, (long long)out->qk_rope_head_dim);
    }
    json_decref(root);
    ms_status st = MS_OK;
    if (r->pr.n > 0) {
        st = ms_err_set(err, MS_E_MODEL, "%.200s: %s", file, r->pr.buf);
        memset(out, 0, sizeof *out);
    }
    free(r);
    return st;
}

/* Read config.json at `path` (a regular file of at most CONFIG_MAX_BYTES,
 * docs/SECURITY.md "Limits on metadata files") and parse it; messages name the
 * path. Errors: MS_E_IO, MS_E_MODEL, MS_E_NOMEM. Allocates only temporaries. */
ms_status ms_config_load(const char *path, ms_config *out, ms_err *err) {
    if (!path) return ms_err_set(err, MS_E_USAGE, "ms_config_load: no path");
    if (out) memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t n = 0;
    ms_status st = ms_file_read(path, CONFIG_MAX_BYTES, &text, &n, err);
    if (st < 0) return st;
    st = ms_config_parse(text, n, path, out, err);
    free(text);
    return st;
}
