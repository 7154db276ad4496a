/* format/config.h - the released config.json of a model family: Kimi K3's
 * nested one, or gpt-oss's flat Hugging Face one (model_type "gpt_oss").
 *
 * Owns: reading and validating config.json into a flat typed struct: K3's
 *   text_config and text_config.linear_attn_config (config.c), gpt-oss's
 *   top-level keys (config_oss.c); `family` says which.
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
#define MS_OSS_MAX_HEAD_DIM 256     /* gpt-oss head_dim at most (a config above is refused) */

/* The model families the engine runs (docs/ARCHITECTURE.md, "Model families"). */
typedef enum ms_family {
    MS_FAMILY_K3 = 0,           /* Kimi K3: nested config, KDA + MLA, LatentMoE */
    MS_FAMILY_GPT_OSS = 1,      /* gpt-oss-120b / 20b: flat config, GQA with sinks, MoE with biases */
} ms_family;

typedef struct ms_config {
    ms_family family;
    /* Shared by the families (gpt-oss: num_experts = num_local_experts,
     * num_experts_per_token = num_experts_per_tok, intermediate_size = the
     * experts' width; the K3-only fields below are 0). */
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
    /* gpt-oss only (0 for K3) */
    int64_t num_key_value_heads, head_dim;
    int64_t sliding_window;             /* keys a sliding layer's query sees, itself included */
    double rope_theta;
    double rope_factor, rope_beta_fast, rope_beta_slow;  /* rope_scaling (yarn) */
    int64_t rope_original_max;          /* rope_scaling.original_max_position_embeddings */
    bool rope_truncate;
    double swiglu_limit;
    uint8_t layer_is_sliding[MS_MAX_LAYERS];
    /* derived */
    uint8_t layer_is_mla[MS_MAX_LAYERS];
    int64_t n_mla_layers, n_kda_layers;
    /* Layers whose state is a cache per position (K3's MLA layers; every
     * gpt-oss layer), and the floats each keeps per position (K3: the latent,
     * kv_lora_rank + qk_rope_head_dim; gpt-oss: the keys and values,
     * 2 * num_key_value_heads * head_dim). */
    int64_t n_pos_layers, pos_floats;
} ms_config;

/* Parse config.json text (untrusted). `file` names it in messages. A
 * top-level "model_type": "gpt_oss" selects the gpt-oss reader; anything
 * else is read as K3's nested layout. */
ms_status ms_config_parse(const char *text, size_t n, const char *file,
                          ms_config *out, ms_err *err);
/* Read and parse a file. */
ms_status ms_config_load(const char *path, ms_config *out, ms_err *err);

#endif
