/* format/config.h - the released nested config.json of Kimi K3.
 *
 * Owns: reading and validating config.json (text_config and
 *   text_config.linear_attn_config) into a flat typed struct.
 * Idea: every field the model needs is REQUIRED and typed; a missing or
 *   ill-typed field is an error, never a default (spec section 2). All
 *   problems are collected and reported at once in one line, separated by "; ".
 * Invariants after a successful parse:
 *   - full_attn_layers and kda_layers are one-based, in range, and partition
 *     1..num_hidden_layers; layer_is_mla[L] = 1 iff L+1 is in full_attn_layers;
 *   - values the engine does not implement are refused (hidden_act != "situ",
 *     router activation != "sigmoid", mla_use_nope false, num_expert_group != 1 ...).
 * Does not: look at weights.
 */
#ifndef MS_FORMAT_CONFIG_H
#define MS_FORMAT_CONFIG_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#define MS_MAX_LAYERS 1024

typedef struct ms_config {
    /* text_config */
    int64_t hidden_size;
    int64_t num_hidden_layers;
    int64_t vocab_size;
    double rms_norm_eps;
    bool tie_word_embeddings;           /* must be false */
    int64_t num_attention_heads;
    int64_t q_lora_rank, kv_lora_rank;
    int64_t qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    bool mla_use_nope, mla_use_output_gate;
    int64_t first_k_dense_replace;
    int64_t intermediate_size;
    int64_t num_experts, num_experts_per_token, num_shared_experts;
    int64_t moe_intermediate_size;
    int64_t routed_expert_hidden_size;
    bool latent_moe_use_norm;
    bool moe_renormalize;
    double routed_scaling_factor;
    int64_t num_expert_group, topk_group;
    double activation_situ_beta, activation_situ_linear_beta;
    int64_t attn_res_block_size;
    int64_t num_nextn_predict_layers;
    int64_t bos_token_id, eos_token_id, pad_token_id;
    /* text_config.linear_attn_config */
    int64_t kda_num_heads, kda_head_dim, short_conv_kernel_size;
    double gate_lower_bound;
    bool use_full_rank_gate;
    /* text_config.quantization_config (routed experts) */
    int64_t quant_group_size;           /* 32 */
    /* derived */
    uint8_t layer_is_mla[MS_MAX_LAYERS];
    int64_t n_mla_layers, n_kda_layers;
} ms_config;

/* Parse config.json text (untrusted). `file` names it in messages. */
ms_status ms_config_parse(const char *text, size_t n, const char *file,
                          ms_config *out, ms_err *err);
/* Read and parse a file. */
ms_status ms_config_load(const char *path, ms_config *out, ms_err *err);

#endif
