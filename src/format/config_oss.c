/* format/config_oss.c - gpt-oss's config.json (the Hugging Face release:
 * flat, model_type "gpt_oss") into ms_config.
 *
 * Owns: the keys of the released config (docs/configs/gpt-oss-*-config.json)
 *   and refusing what the engine does not implement.
 * Idea: as for K3 (config.c), every field the model needs is required and
 *   typed, never defaulted, and every problem is collected and reported at
 *   once. The shared fields land where K3's do (hidden_size, num_experts =
 *   num_local_experts, num_experts_per_token = num_experts_per_tok,
 *   intermediate_size = the experts' width); the rest in the gpt-oss part of
 *   ms_config. Layout of the input (other keys are ignored):
 *     { "model_type": "gpt_oss", ...scalars..., "layer_types": [...],
 *       "rope_scaling": { "rope_type": "yarn", "factor", "beta_fast",
 *                         "beta_slow", "original_max_position_embeddings",
 *                         "truncate" },
 *       "quantization_config": { "quant_method": "mxfp4", ... } }
 * Invariants: on success every gpt-oss layer is a position-cache layer
 *   (n_pos_layers = num_hidden_layers, pos_floats = 2 * kv heads * head_dim)
 *   and layer_is_sliding[] follows layer_types.
 * Does not: read K3's nested layout (config.c), look at weights.
 */
#include "format/config_int.h"
#include "format/json_util.h"

#include <string.h>

typedef struct oss_reader {
    ms_config_problems *pr;
    ms_config *c;
} oss_reader;

static const json_t *get(oss_reader *r, const json_t *o, const char *path, const char *key, const char *want,
                         int (*is)(const json_t *)) {
    const json_t *v = o ? json_object_get(o, key) : NULL;
    if (!o) return NULL;
    if (!v) {
        ms_config_problem(r->pr, "%s%s missing", path, key);
    } else if (!is(v)) {
        ms_config_problem(r->pr, "%s%s: expected %s, found %s", path, key, want, ms_json_type_name(v));
        v = NULL;
    }
    return v;
}

static int is_int(const json_t *v) { return json_is_integer(v); }
static int is_num(const json_t *v) { return json_is_number(v); }
static int is_bool(const json_t *v) { return json_is_boolean(v); }
static int is_str(const json_t *v) { return json_is_string(v); }
static int is_obj(const json_t *v) { return json_is_object(v); }
static int is_arr(const json_t *v) { return json_is_array(v); }

/* *dst = o[key], an integer > 0 (min 0 with nonneg). */
static void rd_int(oss_reader *r, const json_t *o, const char *path, const char *key, int64_t *dst, int nonneg) {
    const json_t *v = get(r, o, path, key, "integer", is_int);
    if (!v) return;
    *dst = (int64_t)json_integer_value(v);
    if (nonneg ? *dst < 0 : *dst <= 0) {
        ms_config_problem(r->pr, "%s%s: expected %s 0, found %lld", path, key, nonneg ? ">=" : ">", (long long)*dst);
        *dst = 0;
    }
}

static void rd_dbl(oss_reader *r, const json_t *o, const char *path, const char *key, double *dst) {
    const json_t *v = get(r, o, path, key, "number", is_num);
    if (!v) return;
    *dst = json_number_value(v);
    if (!(*dst > 0)) {
        ms_config_problem(r->pr, "%s%s: expected > 0, found %g", path, key, *dst);
    }
}

static void rd_bool(oss_reader *r, const json_t *o, const char *path, const char *key, bool want, const char *why) {
    const json_t *v = get(r, o, path, key, "boolean", is_bool);
    if (v && json_is_true(v) != want)
        ms_config_problem(r->pr, "%s%s: %s is not supported (expected %s: %s)", path, key,
                          want ? "false" : "true", want ? "true" : "false", why);
}

static void rd_str(oss_reader *r, const json_t *o, const char *path, const char *key, const char *want) {
    const json_t *v = get(r, o, path, key, "string", is_str);
    if (v && strcmp(json_string_value(v), want) != 0)
        ms_config_problem(r->pr, "%s%s: \"%.60s\" is not supported (expected \"%s\")", path, key,
                          json_string_value(v), want);
}

/* layer_types: one "sliding_attention" or "full_attention" per layer. */
static void rd_layers(oss_reader *r, const json_t *root) {
    ms_config *c = r->c;
    const json_t *a = get(r, root, "", "layer_types", "array", is_arr);
    if (!a || c->num_hidden_layers <= 0 || c->num_hidden_layers > MS_MAX_LAYERS) return;
    if ((int64_t)json_array_size(a) != c->num_hidden_layers) {
        ms_config_problem(r->pr, "layer_types: %zu entries for num_hidden_layers %lld", json_array_size(a),
                          (long long)c->num_hidden_layers);
        return;
    }
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        const char *s = json_is_string(v) ? json_string_value(v) : NULL;
        if (s && strcmp(s, "sliding_attention") == 0) c->layer_is_sliding[i] = 1;
        else if (!s || strcmp(s, "full_attention") != 0) {
            ms_config_problem(r->pr, "layer_types[%zu]: expected \"sliding_attention\" or \"full_attention\", found %s",
                              i, s ? s : ms_json_type_name(v));
            return;
        }
    }
}

static void check_shapes(oss_reader *r) {
    ms_config *c = r->c;
    if (c->num_hidden_layers > MS_MAX_LAYERS)
        ms_config_problem(r->pr, "num_hidden_layers: %lld is more than the %d supported",
                          (long long)c->num_hidden_layers, MS_MAX_LAYERS);
    /* a field that could not be read is 0 (its problem is reported): checks needing it are skipped */
    if (c->num_experts > 0 && c->num_experts_per_token > c->num_experts)
        ms_config_problem(r->pr, "num_experts_per_tok: %lld is more than num_local_experts %lld",
                          (long long)c->num_experts_per_token, (long long)c->num_experts);
    if (c->num_key_value_heads > 0 && c->num_attention_heads % c->num_key_value_heads)
        ms_config_problem(r->pr, "num_attention_heads: %lld is not a multiple of num_key_value_heads %lld",
                          (long long)c->num_attention_heads, (long long)c->num_key_value_heads);
    if (c->head_dim % 2) ms_config_problem(r->pr, "head_dim: %lld is odd (RoPE rotates pairs)", (long long)c->head_dim);
    if (c->head_dim > MS_OSS_MAX_HEAD_DIM)
        ms_config_problem(r->pr, "head_dim: %lld is more than the %d supported", (long long)c->head_dim,
                          MS_OSS_MAX_HEAD_DIM);
    if (c->hidden_size % 32)
        ms_config_problem(r->pr, "hidden_size: %lld is not a multiple of 32 (MXFP4 blocks)", (long long)c->hidden_size);
    if (c->intermediate_size % 32)
        ms_config_problem(r->pr, "intermediate_size: %lld is not a multiple of 32 (MXFP4 blocks)",
                          (long long)c->intermediate_size);
    const int64_t ids[2] = { c->eos_token_id, c->pad_token_id };
    static const char *const names[2] = { "eos_token_id", "pad_token_id" };
    for (int i = 0; i < 2; i++)
        if (c->vocab_size > 0 && ids[i] >= c->vocab_size)
            ms_config_problem(r->pr, "%s: %lld is not below vocab_size %lld", names[i], (long long)ids[i],
                              (long long)c->vocab_size);
}

void ms_config_read_oss(const json_t *root, ms_config *c, ms_config_problems *pr) {
    oss_reader r = { pr, c };
    c->family = MS_FAMILY_GPT_OSS;
    rd_int(&r, root, "", "num_hidden_layers", &c->num_hidden_layers, 0);
    rd_int(&r, root, "", "num_local_experts", &c->num_experts, 0);
    rd_int(&r, root, "", "num_experts_per_tok", &c->num_experts_per_token, 0);
    rd_int(&r, root, "", "hidden_size", &c->hidden_size, 0);
    rd_int(&r, root, "", "intermediate_size", &c->intermediate_size, 0);
    rd_int(&r, root, "", "num_attention_heads", &c->num_attention_heads, 0);
    rd_int(&r, root, "", "num_key_value_heads", &c->num_key_value_heads, 0);
    rd_int(&r, root, "", "head_dim", &c->head_dim, 0);
    rd_int(&r, root, "", "vocab_size", &c->vocab_size, 0);
    rd_int(&r, root, "", "sliding_window", &c->sliding_window, 0);
    rd_int(&r, root, "", "eos_token_id", &c->eos_token_id, 1);
    rd_int(&r, root, "", "pad_token_id", &c->pad_token_id, 1);
    rd_dbl(&r, root, "", "rope_theta", &c->rope_theta);
    rd_dbl(&r, root, "", "rms_norm_eps", &c->rms_norm_eps);
    rd_dbl(&r, root, "", "swiglu_limit", &c->swiglu_limit);
    rd_bool(&r, root, "", "attention_bias", true, "q, k, v and o projections with biases");
    rd_bool(&r, root, "", "tie_word_embeddings", false, "a separate lm_head is expected");
    const json_t *rs = get(&r, root, "", "rope_scaling", "object", is_obj);
    rd_str(&r, rs, "rope_scaling.", "rope_type", "yarn");
    rd_dbl(&r, rs, "rope_scaling.", "factor", &c->rope_factor);
    rd_dbl(&r, rs, "rope_scaling.", "beta_fast", &c->rope_beta_fast);
    rd_dbl(&r, rs, "rope_scaling.", "beta_slow", &c->rope_beta_slow);
    rd_int(&r, rs, "rope_scaling.", "original_max_position_embeddings", &c->rope_original_max, 0);
    const json_t *tr = get(&r, rs, "rope_scaling.", "truncate", "boolean", is_bool);
    if (tr) c->rope_truncate = json_is_true(tr);
    const json_t *q = get(&r, root, "", "quantization_config", "object", is_obj);
    rd_str(&r, q, "quantization_config.", "quant_method", "mxfp4");
    check_shapes(&r);
    rd_layers(&r, root);
    c->quant_group_size = 32;
    c->bos_token_id = -1;                 /* gpt-oss prepends no token */
    c->n_pos_layers = c->num_hidden_layers;
    /* a position's keys and values; a head_dim above the bound is already refused (and
       may be anything up to INT64_MAX), so the product is formed only below it */
    if (c->head_dim <= MS_OSS_MAX_HEAD_DIM && ms_mul_i64(c->num_key_value_heads, 2 * c->head_dim, &c->pos_floats))
        ms_config_problem(pr, "num_key_value_heads: %lld heads of %lld keys and values overflow a position's size",
                          (long long)c->num_key_value_heads, (long long)c->head_dim);
}
