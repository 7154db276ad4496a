"""tools/osslib.py - what ossgen.py and ossref.py share: the released gpt-oss
config.json files, the names of the spec's traps, tensor and file names, and the
harmony special tokens.

Owns: RELEASED_CONFIG_TEXT (copies of the config.json of openai/gpt-oss-20b and
  openai/gpt-oss-120b as released on Hugging Face, spec/gpt-oss.md section 2; the
  repository keeps them as tests/data/format/ and docs/configs/
  gpt-oss-{20b,120b}-config.json), load_released_config(), TRAPS, shard_name(),
  HARMONY_SPECIALS.
Idea: as mslib.py for K3: the generator writes the released on-disk layout and
  the reference parses it back on its own; the two share only names and the
  template, never a reader or a writer (so a layout bug cannot hide by being made
  twice).
Does not: read or write tensors.
"""

import json
import os

# The released files, byte for byte (without the final newline) as the repository's
# copies: json.dumps(indent=2, sort_keys=True), the format transformers writes.
# Neither carries torch_dtype / dtype: the release's dtypes are in the safetensors headers.
RELEASED_CONFIG_TEXT = {
    "20b": r"""{
  "architectures": [
    "GptOssForCausalLM"
  ],
  "attention_bias": true,
  "attention_dropout": 0.0,
  "eos_token_id": 200002,
  "experts_per_token": 4,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2880,
  "initial_context_length": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 2880,
  "layer_types": [
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention"
  ],
  "max_position_embeddings": 131072,
  "model_type": "gpt_oss",
  "num_attention_heads": 64,
  "num_experts_per_tok": 4,
  "num_hidden_layers": 24,
  "num_key_value_heads": 8,
  "num_local_experts": 32,
  "output_router_logits": false,
  "pad_token_id": 199999,
  "quantization_config": {
    "modules_to_not_convert": [
      "model.layers.*.self_attn",
      "model.layers.*.mlp.router",
      "model.embed_tokens",
      "lm_head"
    ],
    "quant_method": "mxfp4"
  },
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "rope_type": "yarn",
    "truncate": false
  },
  "rope_theta": 150000,
  "router_aux_loss_coef": 0.9,
  "sliding_window": 128,
  "swiglu_limit": 7.0,
  "tie_word_embeddings": false,
  "transformers_version": "4.55.0.dev0",
  "use_cache": true,
  "vocab_size": 201088
}""",
    "120b": r"""{
  "architectures": [
    "GptOssForCausalLM"
  ],
  "attention_bias": true,
  "attention_dropout": 0.0,
  "eos_token_id": 200002,
  "experts_per_token": 4,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2880,
  "initial_context_length": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 2880,
  "layer_types": [
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "full_attention"
  ],
  "max_position_embeddings": 131072,
  "model_type": "gpt_oss",
  "num_attention_heads": 64,
  "num_experts_per_tok": 4,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "num_local_experts": 128,
  "output_router_logits": false,
  "pad_token_id": 199999,
  "quantization_config": {
    "modules_to_not_convert": [
      "model.layers.*.self_attn",
      "model.layers.*.mlp.router",
      "model.embed_tokens",
      "lm_head"
    ],
    "quant_method": "mxfp4"
  },
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "rope_type": "yarn",
    "truncate": false
  },
  "rope_theta": 150000,
  "router_aux_loss_coef": 0.9,
  "sliding_window": 128,
  "swiglu_limit": 7.0,
  "tie_word_embeddings": false,
  "transformers_version": "4.55.0.dev0",
  "use_cache": true,
  "vocab_size": 201088
}""",
}

_HERE = os.path.dirname(os.path.abspath(__file__))


def config_paths(name):
    """Where the repository keeps the released config of `name` ("20b" or "120b"):
    the test fixture and the copy the docs use, byte for byte the same."""
    base = "gpt-oss-%s-config.json" % name
    return [os.path.join(_HERE, "..", "tests", "data", "format", base),
            os.path.join(_HERE, "..", "docs", "configs", base)]


def load_released_config(name):
    """The released config.json of `name` as a dict (a fresh copy each call): the
    first repository file found that parses, else the embedded copy. They are all
    equal (checked by ossgen --check-template)."""
    for path in config_paths(name):
        try:
            with open(path, "r", encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            pass
    return json.loads(RELEASED_CONFIG_TEXT[name])


def embedded_config(name):
    """The embedded copy only."""
    return json.loads(RELEASED_CONFIG_TEXT[name])


# The traps of spec/gpt-oss.md section 3, each a rule with a plausible wrong version
# that ossref --trap NAME runs instead of the right one (see ossref.py for each).
# tests/make_testdata.sh builds the fixture trap_oss_NAME for every name.
TRAPS = (
    "gate_up_halves",        # MoE 3: gate/up rows taken as halves, not interleaved
    "gate_clamp_symmetric",  # MoE 4: the gate clamped to [-limit, limit], not min(g, limit)
    "up_no_plus_one",        # MoE 4: a = g sigmoid(1.702 g) u, without the +1
    "softmax_before_topk",   # MoE 2: softmax over all experts, then top-k of the probabilities
    "expert_bias_outside",   # MoE 5: the down bias added once per expert, unweighted
    "sinks_left_out",        # attention: no sink column in the softmax
    "yarn_truncated",        # attention: YaRN low/high floored / ceiled (truncate true)
    "yarn_no_attn_factor",   # attention: cos, sin not multiplied by 0.1 ln(factor) + 1
    "rope_interleaved",      # attention: pairs (2i, 2i+1) rotated, not halves (i, i + d/2)
    "window_off_by_one",     # attention: sliding layers see i - window <= j <= i
)

PREFIX = "model."
LM_HEAD = "lm_head.weight"
INDEX_FILE = "model.safetensors.index.json"


def shard_name(i, n):
    """File name of shard i (0-based) of n. The release numbers its shards from 0 and
    writes the LAST index after "of": gpt-oss-20b ships model-00000-of-00002 ..
    model-00002-of-00002 (three files), gpt-oss-120b model-00000-of-00014 ..
    model-00014-of-00014. Readers must go by the index's weight_map, not the names."""
    return "model-%05d-of-%05d.safetensors" % (i, n - 1)


# o200k_harmony's special tokens (openai/gpt-oss gpt_oss/tokenizer.py): id offsets from
# the first special id (199998 in the release). Offsets up to the end of the vocabulary
# that are not listed are "<|reserved_{id}|>"; 20 is o200k_base's <|endofprompt|>.
HARMONY_SPECIALS = (
    (0, "<|startoftext|>"),
    (1, "<|endoftext|>"),
    (4, "<|return|>"),
    (5, "<|constrain|>"),
    (7, "<|channel|>"),
    (8, "<|start|>"),
    (9, "<|end|>"),
    (10, "<|message|>"),
    (14, "<|call|>"),
    (20, "<|endofprompt|>"),
)
RELEASE_FIRST_SPECIAL = 199998
