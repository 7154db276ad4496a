/* tests/fuzz/fuzz_config.c - libFuzzer target: config.json.
 *
 * Owns: fuzzing ms_config_parse (format/config.h) on arbitrary bytes.
 * Idea: on success the invariants of config.h must hold (layer lists
 *   partition 1..num_hidden_layers, counts add up, sizes positive, top-k <=
 *   experts, token ids below the vocabulary, group size 32); on failure the
 *   output is all zero and the message is one line naming the file.
 * Does not: read files (ms_config_load is a thin wrapper).
 */
#include "format/config.h"
#include "fuzz_fixture.h"

#include <stdint.h>
#include <string.h>

/* gpt-oss's config (model_type "gpt_oss", config_oss.c). */
static void check_oss(const ms_config *c) {
    const int64_t pos[] = { c->hidden_size, c->vocab_size, c->num_attention_heads, c->num_key_value_heads,
                            c->head_dim, c->intermediate_size, c->num_experts, c->num_experts_per_token,
                            c->sliding_window, c->rope_original_max };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i] <= 0) fz_fail("gpt-oss size #%zu = %lld accepted", i, (long long)pos[i]);
    if (c->num_experts_per_token > c->num_experts) fz_fail("top-k > experts accepted");
    if (c->num_attention_heads % c->num_key_value_heads) fz_fail("heads not a multiple of KV heads accepted");
    if (c->head_dim % 2 || c->head_dim > MS_OSS_MAX_HEAD_DIM) fz_fail("head_dim %lld accepted", (long long)c->head_dim);
    if (c->hidden_size % 32 || c->intermediate_size % 32) fz_fail("widths not multiples of 32");
    if (c->n_pos_layers != c->num_hidden_layers || c->pos_floats != 2 * c->num_key_value_heads * c->head_dim ||
        c->n_mla_layers || c->n_kda_layers)
        fz_fail("gpt-oss layer counts");
    for (int64_t L = c->num_hidden_layers; L < MS_MAX_LAYERS; L++)
        if (c->layer_is_sliding[L] || c->layer_is_mla[L]) fz_fail("layer %lld past the end", (long long)L);
    if (c->eos_token_id < 0 || c->eos_token_id >= c->vocab_size || c->pad_token_id < 0 ||
        c->pad_token_id >= c->vocab_size)
        fz_fail("gpt-oss token id accepted");
    if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 0) || !(c->rope_factor > 0) || !(c->swiglu_limit > 0))
        fz_fail("non-positive gpt-oss value accepted");
}

static void check_ok(const ms_config *c) {
    if (c->num_hidden_layers < 1 || c->num_hidden_layers > MS_MAX_LAYERS)
        fz_fail("num_hidden_layers %lld accepted", (long long)c->num_hidden_layers);
    if (c->family == MS_FAMILY_GPT_OSS) { check_oss(c); return; }
    int64_t n_mla = 0;
    for (int64_t L = 0; L < MS_MAX_LAYERS; L++) {
        if (c->layer_is_mla[L] > 1) fz_fail("layer_is_mla[%lld] = %d", (long long)L, c->layer_is_mla[L]);
        if (L >= c->num_hidden_layers && c->layer_is_mla[L]) fz_fail("MLA layer %lld past the end", (long long)L);
        n_mla += c->layer_is_mla[L];
    }
    if (n_mla != c->n_mla_layers || c->n_mla_layers + c->n_kda_layers != c->num_hidden_layers)
        fz_fail("layer counts %lld + %lld != %lld", (long long)c->n_mla_layers, (long long)c->n_kda_layers,
                (long long)c->num_hidden_layers);
    const int64_t pos[] = { c->hidden_size, c->vocab_size, c->num_attention_heads, c->q_lora_rank,
                            c->kv_lora_rank, c->qk_nope_head_dim, c->qk_rope_head_dim, c->v_head_dim,
                            c->intermediate_size, c->num_experts, c->num_experts_per_token,
                            c->moe_intermediate_size, c->routed_expert_hidden_size, c->kda_num_heads,
                            c->kda_head_dim, c->short_conv_kernel_size, c->attn_res_block_size };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i] <= 0) fz_fail("size #%zu = %lld accepted", i, (long long)pos[i]);
    if (c->num_experts_per_token > c->num_experts) fz_fail("top-k > experts accepted");
    if (c->quant_group_size != 32) fz_fail("group size %lld accepted", (long long)c->quant_group_size);
    if (c->routed_expert_hidden_size % 32 || c->moe_intermediate_size % 32) fz_fail("widths not multiples of 32");
    if (c->kda_num_heads > c->kda_head_dim) fz_fail("kda heads > head_dim accepted");
    if (c->first_k_dense_replace < 0 || c->first_k_dense_replace > c->num_hidden_layers)
        fz_fail("first_k_dense_replace %lld accepted", (long long)c->first_k_dense_replace);
    const int64_t tok[] = { c->bos_token_id, c->eos_token_id, c->pad_token_id };
    for (int i = 0; i < 3; i++)
        if (tok[i] < 0 || tok[i] >= c->vocab_size) fz_fail("token id %lld accepted", (long long)tok[i]);
    if (!(c->rms_norm_eps > 0) || !(c->routed_scaling_factor > 0)) fz_fail("non-positive eps/scale accepted");
    if (c->tie_word_embeddings || !c->mla_use_nope || !c->mla_use_output_gate || !c->latent_moe_use_norm ||
        !c->use_full_rank_gate || c->num_expert_group != 1 || c->topk_group != 1 || c->num_nextn_predict_layers != 0)
        fz_fail("an unsupported variant was accepted");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ms_config *c = malloc(sizeof *c);
    if (!c) return 0;
    ms_err err;
    ms_err_clear(&err);
    ms_status st = ms_config_parse((const char *)data, size, "fuzz-config.json", c, &err);
    if (st == MS_OK) {
        if (err.msg[0]) fz_fail("success with message '%s'", err.msg);
        check_ok(c);
    } else {
        if (!err.msg[0] || strchr(err.msg, '\n') || strncmp(err.msg, "fuzz-config.json", 16) != 0)
            fz_fail("bad failure message '%s'", err.msg);
        static const ms_config zero;
        if (memcmp(c, &zero, sizeof zero) != 0) fz_fail("failed parse left fields set");
    }
    free(c);
    return 0;
}
