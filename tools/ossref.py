#!/usr/bin/env python3
"""tools/ossref.py - the readable float64 reference forward pass of gpt-oss.

Owns: the specification of spec/gpt-oss.md section 3 in code. Every function is one
  formula of it; the C engine's gpt-oss golden files come from here.
Idea: parse the checkpoint as the engine must (flat config.json, the index, every
  safetensors header, MXFP4 blocks and scales), decode every weight to float64 once,
  then run the model token by token: per layer a cache of the RoPE'd keys and the
  values of every position; a query attends over the cache (the window and the sink
  decide what it sees and how much). There is no batched path: the token loop is the
  only path, so it is the reference.
Traps: `--trap NAME` switches exactly one rule to its plausible wrong version (the
  `if TRAP == ...` lines; names in osslib.TRAPS); the golden files of the wrong version
  must differ clearly (tests/make_testdata.sh checks it).
Invariants: decoding is exact (BF16 and MXFP4 values are representable in float64);
  greedy ties go to the lower id, router ties to the lower expert; an expert's
  outputs are summed in the router's order (descending logit).
Does not: tokenize, sample, run fast (a tiny model at ~70 tokens takes well under 1 s),
  share any code with ossgen.py but names (osslib).

Usage: ossref.py MODEL_DIR --ids 1,2,3 [--gen N] [--tf-ids 4,5,6] --out DIR
                 [--trap NAME] [--check] [--stats]
Writes DIR/golden.json, DIR/tf_logits.f32 [len(tf_ids), V], DIR/gen_logits0.f32 [V]
(the same files and fields as msref.py, so tests/test_golden.c reads both).
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goldens  # noqa: E402
import osslib  # noqa: E402
import stread  # noqa: E402

TRAP = None          # the one rule to run wrongly (see osslib.TRAPS), or None
STATS = None         # dict of counters when --stats is given


def stat(key, value, how="max"):
    """Record a statistic for --stats (goldens.record_stat)."""
    goldens.record_stat(STATS, key, value, how)


# =========================================================================================
# The checkpoint on disk (spec section 2)
# =========================================================================================

class Checkpoint(stread.Checkpoint):
    """The tensors of a model directory, read by stread.py (shared with msref.py): the
    index names the shards, each shard's header names its tensors. Headers are untrusted
    input: offsets are checked against the file and against each other."""

    def __init__(self, model_dir):
        super().__init__(model_dir, osslib.INDEX_FILE)

    def tensor(self, name, dtype, shape):
        """The tensor as float64 (BF16, exact) or uint8 (U8); dtype and shape checked."""
        return super().tensor(name, shape, dtype)


# =========================================================================================
# config.json: flat; every field this reference uses is required and typed
# =========================================================================================

class Config:
    INTS = ("hidden_size num_hidden_layers vocab_size num_attention_heads num_key_value_heads "
            "head_dim num_local_experts num_experts_per_tok intermediate_size "
            "sliding_window").split()
    FLOATS = "rms_norm_eps swiglu_limit rope_theta".split()

    def __init__(self, path):
        with open(path) as f:
            c = json.load(f)

        get = stread.config_field

        for k in self.INTS:
            setattr(self, k, get(c, k, "int"))
        for k in self.FLOATS:
            setattr(self, k, float(get(c, k, "float")))
        rs = c["rope_scaling"]
        self.rope_factor = float(get(rs, "factor", "float"))
        self.beta_fast = float(get(rs, "beta_fast", "float"))
        self.beta_slow = float(get(rs, "beta_slow", "float"))
        self.original_ctx = get(rs, "original_max_position_embeddings", "int")
        self.rope_truncate = get(rs, "truncate", "bool")
        self.layer_types = c["layer_types"]
        if (c["model_type"] != "gpt_oss" or rs["rope_type"] != "yarn"
                or not get(c, "attention_bias", "bool") or get(c, "tie_word_embeddings", "bool")
                or c["hidden_act"] != "silu"
                or c.get("experts_per_token", self.num_experts_per_tok) != self.num_experts_per_tok
                or len(self.layer_types) != self.num_hidden_layers
                or any(t not in ("sliding_attention", "full_attention") for t in self.layer_types)
                or self.num_attention_heads % self.num_key_value_heads or self.head_dim % 2
                or self.hidden_size % 32 or self.intermediate_size % 32
                or not 0 < self.num_experts_per_tok <= self.num_local_experts):
            raise ValueError("config asks for a variant this reference does not implement")

    def is_sliding(self, il):
        return self.layer_types[il] == "sliding_attention"


# =========================================================================================
# Building blocks
# =========================================================================================

def sigmoid(x):
    """σ(x), without overflow for large |x|."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softmax(s):
    e = np.exp(s - np.max(s))
    return e / np.sum(e)


def rms_norm(x, w, eps):
    """RMSNorm(x; w, eps) = x / sqrt(mean(x²) + eps) ⊙ w."""
    return x / np.sqrt(np.dot(x, x) / x.size + eps) * w


FP4_MAGNITUDE = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_decode(blocks, scales):
    """The logical W[..., rows, 32 G] of an MXFP4 tensor: blocks U8 [..., rows, G, 16],
    scales U8 [..., rows, G]. Byte k of block g holds elements 32g+2k (LOW nibble) and
    32g+2k+1 (high nibble). Code c: bit 3 the sign, bits 0-2 index FP4_MAGNITUDE. The
    block's scale byte s multiplies by 2^(s - 127); s = 255 (E8M0 NaN) is refused."""
    if np.any(scales == 255):
        raise ValueError("MXFP4 scale byte 255 (NaN) in the checkpoint")
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1)          # [..., G, 16, 2]
    value = np.where(codes & 0x8, -1.0, 1.0) * FP4_MAGNITUDE[codes & 0x7]
    value = value.reshape(blocks.shape[:-1] + (32,))                    # [..., G, 32]
    value = value * np.exp2(scales.astype(np.float64) - 127.0)[..., None]
    return value.reshape(blocks.shape[:-2] + (blocks.shape[-2] * 32,))


# =========================================================================================
# Attention: RoPE with YaRN frequencies, GQA, sinks, sliding windows
# =========================================================================================

def yarn(c):
    """(inv_freq [head_dim/2], attention factor), as transformers'
    _compute_yarn_parameters: the correction range [low, high] of the frequency index
    from beta_fast / beta_slow over the ORIGINAL context, NOT floored / ceiled when
    truncate is false (the release), clamped to [0, head_dim - 1]; a linear ramp over
    the head_dim/2 frequencies; extrapolated (1/θ^(2i/d)) below low, interpolated
    (divided by factor) above high. The attention factor 0.1 ln(factor) + 1 multiplies
    cos AND sin (so the scores scale by its square)."""
    d, base, L, factor = c.head_dim, c.rope_theta, c.original_ctx, c.rope_factor
    pos_freqs = base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)

    def correction_dim(rotations):
        return d * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(c.beta_fast), correction_dim(c.beta_slow)
    if c.rope_truncate or TRAP == "yarn_truncated":    # wrong for the release: truncated
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation_factor = 1.0 - ramp
    inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1.0 else 1.0
    if TRAP == "yarn_no_attn_factor":                  # wrong: the factor dropped
        attention_factor = 1.0
    return inv_freq, attention_factor


def rope(x, pos, inv_freq, attention_factor):
    """x [n_heads, d] rotated to position pos: NeoX half-split, o1 = x1 cos - x2 sin,
    o2 = x2 cos + x1 sin with x1 the FIRST d/2 dims, cos and sin times the factor."""
    angle = pos * inv_freq
    cos, sin = np.cos(angle) * attention_factor, np.sin(angle) * attention_factor
    if TRAP == "rope_interleaved":                     # wrong: pairs (2i, 2i+1)
        x1, x2 = x[:, 0::2], x[:, 1::2]
        out = np.empty_like(x)
        out[:, 0::2], out[:, 1::2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        return out
    half = x.shape[1] // 2
    x1, x2 = x[:, :half], x[:, half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=1)


class KVCache:
    """One layer's keys (after RoPE) and values of every position so far."""

    def __init__(self):
        self.k, self.v = [], []


def attention(x, W, cache, pos, sliding, c, rot):
    """Attention of the normed token x at position pos; appends its k, v to cache."""
    nq, nkv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    q = (W["q_proj.weight"] @ x + W["q_proj.bias"]).reshape(nq, d)
    k = (W["k_proj.weight"] @ x + W["k_proj.bias"]).reshape(nkv, d)
    v = (W["v_proj.weight"] @ x + W["v_proj.bias"]).reshape(nkv, d)
    q, k = rope(q, pos, *rot), rope(k, pos, *rot)
    cache.k.append(k)
    cache.v.append(v)
    first = 0
    if sliding:                                  # keys j with pos - window < j <= pos
        first = max(0, pos - c.sliding_window + 1)
        if TRAP == "window_off_by_one":          # wrong: pos - window <= j
            first = max(0, pos - c.sliding_window)
    K, V = np.stack(cache.k[first:]), np.stack(cache.v[first:])    # [n, nkv, d]
    group = nq // nkv
    out = np.empty((nq, d))
    for h in range(nq):
        kv = h // group                           # GQA: query head h reads KV head h // group
        score = (K[:, kv, :] @ q[h]) / math.sqrt(d)
        stat("attn_max_abs_score", lambda: float(np.max(np.abs(score))))
        if TRAP == "sinks_left_out":              # wrong: no sink column
            p = softmax(score)
        else:                                     # the sink: one more column, dropped after
            p = softmax(np.append(score, W["sinks"][h]))
            stat("attn_sink_mass_sum", float(p[-1]), "add")
            stat("attn_sink_mass_n", 1, "add")
            p = p[:-1]
        out[h] = p @ V[:, kv, :]
    return W["o_proj.weight"] @ out.reshape(-1) + W["o_proj.bias"]


# =========================================================================================
# MoE: router, top-k, clamped SwiGLU experts with biases
# =========================================================================================

def route(x, W, c):
    """(the top-k experts in descending logit order, ties to the lower index, and
    their weights: the softmax over the k chosen logits ONLY)."""
    logits = W["router.weight"] @ x + W["router.bias"]
    order = sorted(range(c.num_local_experts), key=lambda e: (-logits[e], e))
    idx = order[:c.num_experts_per_tok]
    if TRAP == "softmax_before_topk":              # wrong: softmax over all, not renormed
        return idx, softmax(logits)[idx]
    return idx, softmax(logits[idx])


def swiglu(h, limit):
    """The expert activation of h = W1 x + b1 [2I]: rows INTERLEAVED (gate = h[0::2],
    up = h[1::2]); the gate clamped from ABOVE only, up from both sides;
    a = g σ(1.702 g) (u + 1)."""
    if TRAP == "gate_up_halves":                   # wrong: first half gate, second up
        gate, up = h[:h.size // 2], h[h.size // 2:]
    else:
        gate, up = h[0::2], h[1::2]
    stat("gate_frac_above_limit", lambda: float(np.mean(gate > limit)))
    stat("gate_frac_below_minus_limit", lambda: float(np.mean(gate < -limit)))
    stat("up_frac_clamped", lambda: float(np.mean(np.abs(up) > limit)))
    if TRAP == "gate_clamp_symmetric":             # wrong: clamped from below too
        g = np.clip(gate, -limit, limit)
    else:
        g = np.minimum(gate, limit)
    u = np.clip(up, -limit, limit)
    if TRAP == "up_no_plus_one":                   # wrong: u, not u + 1
        return g * sigmoid(1.702 * g) * u
    return g * sigmoid(1.702 * g) * (u + 1.0)


def moe(x, W, c):
    """y = Σ_e w_e (W2_e a_e + b2_e) over the chosen experts: the down bias INSIDE the
    weighted sum. No shared expert."""
    idx, w = route(x, W, c)
    y = np.zeros(c.hidden_size)
    for we, e in zip(w, idx):                      # summed in the router's order
        a = swiglu(W["W1"][e] @ x + W["b1"][e], c.swiglu_limit)
        if TRAP == "expert_bias_outside":          # wrong: the bias added unweighted
            y = y + we * (W["W2"][e] @ a) + W["b2"][e]
        else:
            y = y + we * (W["W2"][e] @ a + W["b2"][e])
    return y


# =========================================================================================
# The model, a session, one token through all layers
# =========================================================================================

class Model:
    def __init__(self, model_dir):
        c = self.cfg = Config(os.path.join(model_dir, "config.json"))
        ck = Checkpoint(model_dir)
        H, V, E, I = c.hidden_size, c.vocab_size, c.num_local_experts, c.intermediate_size
        nq, nkv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        P = osslib.PREFIX
        self.embed = ck.tensor(P + "embed_tokens.weight", "BF16", [V, H])
        self.norm = ck.tensor(P + "norm.weight", "BF16", [H])
        self.lm_head = ck.tensor(osslib.LM_HEAD, "BF16", [V, H])
        self.rot = yarn(c)
        stat("yarn_inv_freq_min", lambda: float(np.min(self.rot[0])))
        self.layers = []
        for il in range(c.num_hidden_layers):
            pre = P + "layers.%d." % il
            bf16 = {
                "self_attn.q_proj.weight": [nq * d, H], "self_attn.q_proj.bias": [nq * d],
                "self_attn.k_proj.weight": [nkv * d, H], "self_attn.k_proj.bias": [nkv * d],
                "self_attn.v_proj.weight": [nkv * d, H], "self_attn.v_proj.bias": [nkv * d],
                "self_attn.o_proj.weight": [H, nq * d], "self_attn.o_proj.bias": [H],
                "self_attn.sinks": [nq], "mlp.router.weight": [E, H], "mlp.router.bias": [E],
                "mlp.experts.gate_up_proj_bias": [E, 2 * I], "mlp.experts.down_proj_bias": [E, H],
            }
            # keys without the module: "q_proj.weight", "sinks", "router.bias", ...
            L = {k.split(".", 1)[1]: ck.tensor(pre + k, "BF16", sh) for k, sh in bf16.items()}
            L["input_layernorm"] = ck.tensor(pre + "input_layernorm.weight", "BF16", [H])
            L["post_attention_layernorm"] = ck.tensor(pre + "post_attention_layernorm.weight",
                                                      "BF16", [H])
            ex = pre + "mlp.experts."
            L["W1"] = mxfp4_decode(                      # [E, 2I, H], rows interleaved
                ck.tensor(ex + "gate_up_proj_blocks", "U8", [E, 2 * I, H // 32, 16]),
                ck.tensor(ex + "gate_up_proj_scales", "U8", [E, 2 * I, H // 32]))
            L["W2"] = mxfp4_decode(ck.tensor(ex + "down_proj_blocks", "U8", [E, H, I // 32, 16]),
                                   ck.tensor(ex + "down_proj_scales", "U8", [E, H, I // 32]))
            L["b1"], L["b2"] = L["experts.gate_up_proj_bias"], L["experts.down_proj_bias"]
            self.layers.append(L)


class Session:
    """Per-sequence state: one KV cache per layer and the next position."""

    def __init__(self, model):
        self.model = model
        self.pos = 0
        self.cache = [KVCache() for _ in model.layers]


def forward_token(sess, token):
    """Logits after feeding `token` at the session's next position."""
    m, c = sess.model, sess.model.cfg
    eps = c.rms_norm_eps
    x = m.embed[token].copy()                            # no embedding scale
    for il, L in enumerate(m.layers):
        h = rms_norm(x, L["input_layernorm"], eps)
        x = x + attention(h, L, sess.cache[il], sess.pos, c.is_sliding(il), c, m.rot)
        h = rms_norm(x, L["post_attention_layernorm"], eps)
        x = x + moe(h, L, c)
        stat("residual_rms_max", lambda: float(np.sqrt(np.mean(x * x))))
    sess.pos += 1
    return m.lm_head @ rms_norm(x, m.norm, eps)          # no soft-cap, no logit scale


def configure(trap, stats):
    global TRAP, STATS
    TRAP, STATS = trap, stats


def print_stats(stats):
    if stats.get("attn_sink_mass_n"):
        stats["attn_sink_mass_mean"] = stats["attn_sink_mass_sum"] / stats["attn_sink_mass_n"]
    for k in sorted(stats):
        print("stat %s: %s" % (k, stats[k]), file=sys.stderr)


def main(argv):
    return goldens.main(argv, "ossref", __doc__, osslib.TRAPS, Model, Session, forward_token, configure, print_stats)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
