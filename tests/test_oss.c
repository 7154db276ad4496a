/* tests/test_oss.c - the gpt-oss family's config and layout, from the
 * released configs alone (no weights).
 *
 * Checks:
 *   - tests/data/format/gpt-oss-{120b,20b}-config.json (the Hugging Face
 *     release's config.json) parse into the gpt-oss family with every value
 *     the spec lists; layer 0 sliding, alternating; every layer keeps keys and
 *     values per position (2 x 8 x 64 floats);
 *   - refusals: a missing key, a wrong type, layer_types of the wrong length
 *     or with an unknown entry, rope_type other than yarn, attention_bias
 *     false, quant_method other than mxfp4, heads not a multiple of the KV
 *     heads - each named, all in one message;
 *   - the dry-run binding (what `plan` uses) lays the released checkpoint
 *     out as the spec's sizes say: one expert 13,236,480 bytes (six slices),
 *     E x layers expert regions, and every byte of the checkpoint in some
 *     region (65,248,815,744 for the 120b, 13,761,264,768 for the 20b);
 *   - the session state (model.h, ms_state): a full layer keeps every
 *     position, a sliding one a ring of window + max_back slots (none below
 *     that context); ms_state_layer hands out the last window - 1 positions
 *     of a sliding layer in position order, in two parts where they wrap;
 *     ms_state_rewind moves back at most max_back + 1 positions in a ring,
 *     any distance without one.
 * Needs: run from the repo root.
 */
#include "check.h"
#include "format/config.h"
#include "model/model.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const CONFIG[2] = { "tests/data/format/gpt-oss-120b-config.json",
                                       "tests/data/format/gpt-oss-20b-config.json" };

static void released(int which) {
    ms_config c;
    ms_err e;
    ms_err_clear(&e);
    const ms_status st = ms_config_load(CONFIG[which], &c, &e);
    CHECK(st == MS_OK, "%s refused: %s", CONFIG[which], e.msg);
    if (st != MS_OK) return;
    const int64_t L = which == 0 ? 36 : 24, E = which == 0 ? 128 : 32;
    CHECK(c.family == MS_FAMILY_GPT_OSS, "family %d", c.family);
    CHECK(c.num_hidden_layers == L && c.num_experts == E && c.num_experts_per_token == 4, "%lld %lld %lld",
          (long long)c.num_hidden_layers, (long long)c.num_experts, (long long)c.num_experts_per_token);
    CHECK(c.hidden_size == 2880 && c.intermediate_size == 2880 && c.vocab_size == 201088, "%lld %lld %lld",
          (long long)c.hidden_size, (long long)c.intermediate_size, (long long)c.vocab_size);
    CHECK(c.num_attention_heads == 64 && c.num_key_value_heads == 8 && c.head_dim == 64, "heads");
    CHECK(c.sliding_window == 128 && c.rope_theta == 150000.0 && c.rope_factor == 32.0 &&
          c.rope_beta_fast == 32.0 && c.rope_beta_slow == 1.0 && c.rope_original_max == 4096 && !c.rope_truncate,
          "rope / window");
    CHECK(c.rms_norm_eps == 1e-5 && c.swiglu_limit == 7.0 && !c.tie_word_embeddings, "eps, limit, tie");
    CHECK(c.eos_token_id == 200002 && c.pad_token_id == 199999 && c.bos_token_id == -1, "%lld %lld %lld",
          (long long)c.eos_token_id, (long long)c.pad_token_id, (long long)c.bos_token_id);
    CHECK(c.n_pos_layers == L && c.pos_floats == 2 * 8 * 64 && c.n_mla_layers == 0 && c.n_kda_layers == 0,
          "%lld %lld", (long long)c.n_pos_layers, (long long)c.pos_floats);
    int bad = 0;
    for (int i = 0; i < L; i++) bad += c.layer_is_sliding[i] != (i % 2 == 0);
    CHECK(bad == 0 && c.layer_is_sliding[L] == 0, "%d layers with the wrong kind", bad);

    /* the layout as the planner sees it */
    ms_model m;
    ms_err_clear(&e);
    CHECK(ms_model_bind(&m, &c, NULL, NULL, &e) == MS_OK, "dry-run bind: %s", e.msg);
    CHECK(m.expert_bytes == 13236480, "expert bytes %lld", (long long)m.expert_bytes);
    int64_t n_exp = 0, all = 0, exp_bytes = 0;
    for (int r = 0; r < m.n_plan_regions; r++) {
        all += m.plan_regions[r].bytes;
        if (m.plan_regions[r].cls == MS_REGION_EXPERT) { n_exp++; exp_bytes += m.plan_regions[r].bytes; }
    }
    const int64_t want = which == 0 ? 65248815744LL : 13761264768LL;
    CHECK(n_exp == L * E, "%lld expert regions", (long long)n_exp);
    CHECK(exp_bytes >= L * E * m.expert_bytes, "expert regions %lld bytes", (long long)exp_bytes);
    /* every byte in a region; a region may add a few bytes of alignment per range */
    CHECK(all >= want && all - want < (int64_t)m.n_plan_regions * 6 * 4096, "regions hold %lld bytes, checkpoint %lld",
          (long long)all, (long long)want);
    const int64_t pos = 2 * 8 * 64 * 4;         /* bytes a layer keeps per position */
    CHECK(ms_state_bytes(&m, 4096, 0) == pos * (L / 2) * (4096 + 128) &&
          ms_state_bytes(&m, 4096, 31) == pos * (L / 2) * (4096 + 159) && ms_state_bytes(&m, 100, 31) == pos * L * 100,
          "state bytes %lld / %lld / %lld", (long long)ms_state_bytes(&m, 4096, 0), (long long)ms_state_bytes(&m, 4096, 31),
          (long long)ms_state_bytes(&m, 100, 31));
    ms_model_free(&m);
}

/* The ring of a sliding layer, on the 20b's config (window 128). */
static void ring(void) {
    ms_config c;
    ms_err e;
    ms_err_clear(&e);
    ms_model m;
    if (ms_config_load(CONFIG[1], &c, &e) != MS_OK || ms_model_bind(&m, &c, NULL, NULL, &e) != MS_OK) {
        CHECK(0, "20b config: %s", e.msg);
        return;
    }
    const int64_t pw = c.pos_floats;
    ms_state st, lin;
    CHECK(ms_state_init(&st, &m, 512, 3, &e) == MS_OK && ms_state_init(&lin, &m, 100, 3, &e) == MS_OK, "%s", e.msg);
    CHECK(st.ring == 131 && lin.ring == 100 && ms_state_slots(&st, &m.layers[0]) == 131 &&
          ms_state_slots(&st, &m.layers[1]) == 512, "ring %lld, linear %lld", (long long)st.ring, (long long)lin.ring);
    float *part[2];
    int64_t n[2], k[2];
    /* n = 200: the sliding layer's positions 73..199 are slots 73..130 then 0..68 */
    ms_state_layer(&st, &m, 0, 200, part, n);
    CHECK(part[0] == st.pos_cache[0] + 73 * pw && n[0] == 58 * pw && part[1] == st.pos_cache[0] && n[1] == 69 * pw,
          "wrapped parts: %lld + %lld floats", (long long)n[0], (long long)n[1]);
    ms_state_layer(NULL, &m, 0, 200, part, k);
    CHECK(part[0] == NULL && k[0] + k[1] == 127 * pw, "sizes without a state: %lld", (long long)(k[0] + k[1]));
    /* n = 140: positions 13..139, slots 13..130 then 0..8 */
    ms_state_layer(&st, &m, 0, 140, part, n);
    CHECK(part[0] == st.pos_cache[0] + 13 * pw && n[0] == 118 * pw && n[1] == 9 * pw, "parts at 140");
    /* n = 128: positions 1..127, one run; fewer than window - 1: all of them */
    ms_state_layer(&st, &m, 0, 128, part, n);
    CHECK(part[0] == st.pos_cache[0] + pw && n[0] == 127 * pw && n[1] == 0, "parts at 128");
    ms_state_layer(&st, &m, 0, 127, part, n);
    CHECK(part[0] == st.pos_cache[0] && n[0] == 127 * pw && n[1] == 0, "parts at 127");
    ms_state_layer(&st, &m, 1, 200, part, n);
    CHECK(part[0] == st.pos_cache[1] && n[0] == 200 * pw && n[1] == 0, "a full layer: every position");
    CHECK(ms_state_floats(&m, 0, 2, 200) == 327 * pw, "floats of two layers at 200");
    st.n_past = 200;
    CHECK(ms_state_rewind(&st, 196, &m) == 1 && st.n_past == 196, "back 4 (max_back + 1)");
    CHECK(ms_state_rewind(&st, 191, &m) == 0 && st.n_past == 196, "back 5: refused, unchanged");
    lin.n_past = 100;
    CHECK(ms_state_rewind(&lin, 0, &m) == 1 && lin.n_past == 0, "no ring: any distance");
    ms_state_free(&st, &m);
    ms_state_free(&lin, &m);
    ms_model_free(&m);
}

static json_t *root_of(int which) {
    json_error_t je;
    json_t *r = json_load_file(CONFIG[which], 0, &je);
    CHECK(r != NULL, "%s: %s", CONFIG[which], je.text);
    return r;
}

/* The mutated config (consumed) fails, its message holding every `want`. */
static void refused(const char *what, json_t *root, int n_want, ...) {
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    ms_config c;
    ms_err e;
    ms_err_clear(&e);
    const ms_status st = ms_config_parse(s, s ? strlen(s) : 0, "config.json", &c, &e);
    free(s);
    CHECK(st == MS_E_MODEL, "%s: status %d '%s'", what, st, e.msg);
    CHECK(c.hidden_size == 0 && c.family == MS_FAMILY_K3, "%s: output not zeroed", what);
    va_list ap;
    va_start(ap, n_want);
    for (int i = 0; i < n_want; i++) {
        const char *w = va_arg(ap, const char *);
        CHECK(strstr(e.msg, w) != NULL, "%s: message lacks '%s': '%s'", what, w, e.msg);
    }
    va_end(ap);
}

static void refusals(void) {
    json_t *r = root_of(1);
    if (!r) return;
    json_object_del(r, "num_local_experts");
    json_object_set_new(r, "head_dim", json_string("64"));
    refused("missing + wrong type", r, 2, "num_local_experts missing", "head_dim: expected integer, found string");

    r = root_of(1);
    json_array_remove(json_object_get(r, "layer_types"), 0);
    refused("layer_types short", r, 1, "layer_types: 23 entries for num_hidden_layers 24");

    r = root_of(1);
    json_array_set_new(json_object_get(r, "layer_types"), 3, json_string("linear_attention"));
    refused("layer_types entry", r, 1, "layer_types[3]: expected \"sliding_attention\" or \"full_attention\"");

    r = root_of(1);
    json_object_set_new(json_object_get(r, "rope_scaling"), "rope_type", json_string("linear"));
    json_object_set_new(r, "attention_bias", json_false());
    json_object_set_new(json_object_get(r, "quantization_config"), "quant_method", json_string("bitsandbytes"));
    refused("unsupported values, all at once", r, 3, "rope_scaling.rope_type: \"linear\" is not supported",
            "attention_bias: false is not supported", "quantization_config.quant_method");

    r = root_of(1);
    json_object_set_new(r, "num_key_value_heads", json_integer(7));
    json_object_del(json_object_get(r, "rope_scaling"), "truncate");
    refused("GQA groups, truncate", r, 2, "not a multiple of num_key_value_heads 7", "rope_scaling.truncate missing");

    /* sizes whose keys and values per position overflow int64 (a fuzz input once
       multiplied them anyway: undefined behaviour) */
    r = root_of(1);
    json_object_set_new(r, "head_dim", json_integer(666666666666666664));
    refused("head_dim far too large", r, 1, "head_dim: 666666666666666664 is more than the 256 supported");
    r = root_of(1);
    json_object_set_new(r, "num_key_value_heads", json_integer((json_int_t)1 << 60));
    json_object_set_new(r, "num_attention_heads", json_integer((json_int_t)1 << 61));
    refused("key-value heads overflow", r, 1, "num_key_value_heads: 1152921504606846976 heads of 64 keys and values overflow");
}

int main(void) {
    released(0);
    released(1);
    refusals();
    ring();
    return CHECK_DONE("test_oss");
}
