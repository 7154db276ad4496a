#!/usr/bin/env python3
"""tools/msref.py - the readable float64 reference forward pass of Kimi K3.

Owns: the project's specification in code. Every function is one formula of
  spec/kimi-k3.md section 4 and cites it; the C engine's golden files come from here.
Idea: parse the checkpoint as the engine must (nested config.json, the index, every
  safetensors header; section 1-3), then run a plain token-by-token recurrence in
  float64: per KDA layer the state S of every head and the conv history, per MLA layer
  the cache of keys and values, per token the bank of attention residuals. There is no
  batched or chunked path: the recurrence is the only path, so it is the reference.
Traps: `--trap NAME` switches exactly one rule to its plausible wrong version (the
  `if TRAP == ...` lines); the golden files of the wrong version must differ clearly.
Invariants: decoding is exact (BF16 and MXFP4 values are representable in float64);
  greedy ties go to the lower id, router ties to the lower expert.
Does not: tokenize, sample, run fast (a tiny model at ~40 tokens takes well under 1 s).

Usage: msref.py MODEL_DIR --ids 1,2,3 [--gen N] [--tf-ids 4,5,6] --out DIR
                [--trap NAME] [--check] [--stats]
Writes DIR/golden.json, DIR/tf_logits.f32 [len(tf_ids), V], DIR/gen_logits0.f32 [V].
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goldens  # noqa: E402
import mslib  # noqa: E402
import stread  # noqa: E402

TRAP = None          # the one rule to run wrongly (see mslib.TRAPS), or None
STATS = None         # dict of counters when --stats is given


def stat(key, value, how="max"):
    """Record a statistic for --stats (goldens.record_stat)."""
    goldens.record_stat(STATS, key, value, how)


# =========================================================================================
# Section 1: the checkpoint on disk
# =========================================================================================

class Checkpoint(stread.Checkpoint):
    """All tensors of a model directory, read by stread.py (shared with ossref.py):
    the index names the shards, each shard's header names its tensors; every header
    is checked as untrusted input. tensor(name, shape) as stread's."""

    def __init__(self, model_dir):
        super().__init__(model_dir, mslib.INDEX_FILE)


# =========================================================================================
# Section 2: config.json, nested; every field required and typed
# =========================================================================================

class Config:
    """The language model's fields (text_config and text_config.linear_attn_config)."""

    INTS = ("hidden_size num_hidden_layers vocab_size num_attention_heads q_lora_rank "
            "kv_lora_rank qk_nope_head_dim qk_rope_head_dim v_head_dim first_k_dense_replace "
            "intermediate_size num_experts num_experts_per_token num_shared_experts "
            "moe_intermediate_size routed_expert_hidden_size attn_res_block_size "
            "num_expert_group topk_group num_nextn_predict_layers").split()
    FLOATS = ("rms_norm_eps routed_scaling_factor activation_situ_beta "
              "activation_situ_linear_beta").split()
    BOOLS = "tie_word_embeddings mla_use_nope mla_use_output_gate latent_moe_use_norm moe_renormalize".split()
    LA_INTS = "num_heads head_dim short_conv_kernel_size".split()

    def __init__(self, path):
        with open(path) as f:
            tc = json.load(f)["text_config"]          # the fields are NESTED (trap, section 2)
        la = tc["linear_attn_config"]

        get = stread.config_field

        for k in self.INTS:
            setattr(self, k, get(tc, k, "int"))
        for k in self.FLOATS:
            setattr(self, k, float(get(tc, k, "float")))
        for k in self.BOOLS:
            setattr(self, k, get(tc, k, "bool"))
        self.kda_heads = get(la, "num_heads", "int")
        self.kda_head_dim = get(la, "head_dim", "int")
        self.conv_kernel = get(la, "short_conv_kernel_size", "int")
        self.gate_lower_bound = float(get(la, "gate_lower_bound", "float"))
        self.full_attn_layers = get(la, "full_attn_layers", "list")
        self.kda_layers = get(la, "kda_layers", "list")
        n = self.num_hidden_layers
        if sorted(self.full_attn_layers + self.kda_layers) != list(range(1, n + 1)):
            raise ValueError("full_attn_layers and kda_layers do not partition 1..%d" % n)
        if (self.tie_word_embeddings or not self.mla_use_nope or not self.mla_use_output_gate
                or not self.latent_moe_use_norm or not self.moe_renormalize
                or tc["hidden_act"] != "situ" or tc["moe_router_activation_func"] != "sigmoid"
                or self.num_expert_group != 1 or self.kda_heads > self.kda_head_dim):
            raise ValueError("config asks for a variant this reference does not implement")

    def is_mla(self, il):
        """Layer map, section 2: the lists are ONE-BASED (trap): MLA iff il + 1 is listed."""
        if TRAP == "one_based_off":                  # wrong: read as zero-based
            return il in self.full_attn_layers
        return (il + 1) in self.full_attn_layers

    def is_dense(self, il):
        return il < self.first_k_dense_replace


# =========================================================================================
# Section 4.1: building blocks
# =========================================================================================

def sigmoid(x):
    """σ, without overflow for large |x|."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(x):
    return x * sigmoid(x)


def rms_norm(v, w, eps):
    """RMSNorm(v; w, eps) = w ⊙ v / sqrt(mean(v²) + eps)."""
    return w * v / np.sqrt(np.dot(v, v) / v.size + eps)          # mean(v²)


def softmax(s):
    e = np.exp(s - np.max(s))
    return e / np.sum(e)


def situ_glu(g, u, beta1, beta2):
    """SiTU-GLU(g, u) = β1·tanh(g/β1)·σ(g) · β2·tanh(u/β2); the sigmoid takes the
    UNCAPPED g (trap)."""
    capped = beta1 * np.tanh(g / beta1)
    stat("situ_max_abs_gate", lambda: float(np.max(np.abs(g))))
    if TRAP == "situ_capped_sigmoid":               # wrong: σ of the capped gate
        return capped * sigmoid(capped) * beta2 * np.tanh(u / beta2)
    return capped * sigmoid(g) * beta2 * np.tanh(u / beta2)


FP4_MAGNITUDE = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_matrix(packed, scale):
    """The logical W[rows, in] of an MXFP4 matrix (section 4.1).
    Element 2i of a row is the LOW nibble of byte i, element 2i+1 the high nibble
    (trap). Code c: bit 3 sign, bits 0-2 index FP4_MAGNITUDE. Scale byte s of each
    32-group multiplies by 2^(s-127); s = 255 makes the whole group zero."""
    rows = packed.shape[0]
    lo, hi = packed & 0x0F, packed >> 4
    if TRAP == "nibble_swap":                        # wrong: high nibble first
        lo, hi = hi, lo
    codes = np.stack([lo, hi], axis=-1).reshape(rows, -1)
    sign = np.where(codes & 0x8, -1.0, 1.0)
    value = sign * FP4_MAGNITUDE[codes & 0x7]
    s = scale.astype(np.float64)
    factor = np.exp2(s - 127.0)
    if TRAP != "scale255_nan":                       # wrong: 255 read as 2^128
        factor[scale == 255] = 0.0
    return value * np.repeat(factor, 32, axis=1)


def dense_mlp(x, W, c):
    """Dense MLP(x) = W_down · SiTU-GLU(W_gate x, W_up x)."""
    return W["mlp.down_proj"] @ situ_glu(W["mlp.gate_proj"] @ x, W["mlp.up_proj"] @ x,
                                         c.activation_situ_beta, c.activation_situ_linear_beta)


# =========================================================================================
# Section 4.2: attention residuals
# =========================================================================================

def attn_res_read(candidates, w_norm, w_proj, eps):
    """read(V_0..V_n): s_j = Σ_i (V_j[i] / sqrt(mean(V_j²) + eps)) w_norm[i] w_proj[i];
    p = softmax(s); return Σ_j p_j V_j, mixing the RAW candidates (trap)."""
    keys = [rms_norm(v, w_norm, eps) for v in candidates]
    p = softmax(np.array([np.dot(k, w_proj) for k in keys]))
    mixed = keys if TRAP == "attnres_mix_normed" else candidates   # wrong: the normed ones
    return sum(pj * v for pj, v in zip(p, mixed))


# =========================================================================================
# Section 4.3: KDA, Kimi Delta Attention
# =========================================================================================

class KDAState:
    """Per KDA layer: S per head [d_k, d_v] (zero at start) and the last K-1 inputs of
    each of the q, k, v convolutions (zero history at sequence start)."""

    def __init__(self, c):
        d, P = c.kda_head_dim, c.kda_heads * c.kda_head_dim
        self.S = np.zeros((c.kda_heads, d, d))
        self.conv_history = {s: np.zeros((c.conv_kernel - 1, P)) for s in "qkv"}


def causal_conv_silu(x, w, history):
    """SiLU(causal depthwise conv_K(x)) per channel: w[c, 0, 0..K-1], oldest tap first.
    history [K-1, C] holds the previous inputs, oldest first; updated in place."""
    window = np.vstack([history, x[None, :]])        # [K, C], newest last
    y = np.sum(window * w[:, 0, :].T, axis=0)
    history[:] = window[1:]
    return silu(y)


def l2_norm(x):
    """x / sqrt(Σ x² + 1e-6): the SUM of squares (trap)."""
    if TRAP == "l2_mean":                             # wrong: mean of squares
        return x / np.sqrt(np.mean(x * x) + 1e-6)
    return x / np.sqrt(np.sum(x * x) + 1e-6)


def kda(x, W, st, c):
    """KDA(x) for one token; x is the normed layer input; st is updated in place."""
    nh, d, eps = c.kda_heads, c.kda_head_dim, c.rms_norm_eps
    q = causal_conv_silu(W["q_proj"] @ x, W["q_conv1d"], st.conv_history["q"]).reshape(nh, d)
    k = causal_conv_silu(W["k_proj"] @ x, W["k_conv1d"], st.conv_history["k"]).reshape(nh, d)
    v = causal_conv_silu(W["v_proj"] @ x, W["v_conv1d"], st.conv_history["v"]).reshape(nh, d)
    q = np.stack([l2_norm(qh) for qh in q])           # per head; v is not normed
    k = np.stack([l2_norm(kh) for kh in k])

    f = (W["f_b_proj"] @ (W["f_a_proj"] @ x) + W["dt_bias"]).reshape(nh, d)
    # A_log is [head_dim] but only the first num_heads entries are used, ONE PER HEAD (trap)
    if TRAP == "alog_per_channel":                    # wrong: A_log[c] per channel
        a = np.exp(W["A_log"])[None, :]
    else:
        a = np.exp(W["A_log"][:nh])[:, None]
    g = c.gate_lower_bound * sigmoid(a * f)           # in (lb, 0)
    alpha = np.exp(g)                                 # decay per key channel
    beta = sigmoid(W["b_proj"] @ x)                   # one scalar per head
    out_gate = sigmoid(W["g_proj"] @ x).reshape(nh, d)

    y = np.empty((nh, d))
    for h in range(nh):
        S = alpha[h][:, None] * st.S[h]                       # 1. decay rows first
        u = S.T @ k[h]                                        # 2. read along k
        S = S + np.outer(k[h], beta[h] * (v[h] - u))          # 3. delta-rule write
        o = S.T @ (q[h] / math.sqrt(d))                       # 4. read the UPDATED state
        st.S[h] = S
        if TRAP == "kda_gate_then_norm":              # wrong: gate, then norm
            y[h] = rms_norm(o * out_gate[h], W["o_norm"], eps)
        else:                                         # norm FIRST, then gate (trap)
            y[h] = rms_norm(o, W["o_norm"], eps) * out_gate[h]
    return W["o_proj"] @ y.reshape(-1)


# =========================================================================================
# Section 4.4: gated MLA, no rotary embedding
# =========================================================================================

class MLACache:
    """Per MLA layer, per position: k_nope and v of every head, and the one shared k_rope."""

    def __init__(self):
        self.k_nope, self.v, self.k_rope = [], [], []


def wrong_rope(x, pos, theta=50000.0):
    """Only for TRAP mla_rope_rotated: standard RoPE on interleaved pairs."""
    n = x.shape[-1] // 2
    ang = pos * theta ** (-np.arange(n) * 2.0 / x.shape[-1])
    cos, sin = np.cos(ang), np.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def mla(x, W, cache, pos, c):
    """MLA(x) for the token at position pos (0-based); the cache gets its k and v."""
    nh, dn, dr, dv, eps = (c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim,
                           c.v_head_dim, c.rms_norm_eps)
    kl = c.kv_lora_rank
    c_q = rms_norm(W["q_a_proj"] @ x, W["q_a_layernorm"], eps)    # eps: rms_norm_eps (1e-5)
    q = (W["q_b_proj"] @ c_q).reshape(nh, dn + dr)
    q_nope, q_rope = q[:, :dn], q[:, dn:]
    ckv = W["kv_a_proj_with_mqa"] @ x
    c_kv, k_rope = ckv[:kl], ckv[kl:]                   # k_rope: ONE vector for all heads, not normed
    kv = (W["kv_b_proj"] @ rms_norm(c_kv, W["kv_a_layernorm"], eps)).reshape(nh, dn + dv)
    if TRAP == "mla_rope_rotated":                      # wrong: the rope slots get rotated
        q_rope, k_rope = wrong_rope(q_rope, pos), wrong_rope(k_rope, pos)
    cache.k_nope.append(kv[:, :dn])
    cache.v.append(kv[:, dn:])
    cache.k_rope.append(k_rope)

    K_nope = np.stack(cache.k_nope)                     # [T, nh, dn]
    V = np.stack(cache.v)                               # [T, nh, dv]
    K_rope = np.stack(cache.k_rope)                     # [T, dr]
    scale = 1.0 / math.sqrt(dn + dr)                    # the full width (trap)
    if TRAP == "mla_scale_128":                         # wrong: 1/sqrt(qk_nope_head_dim)
        scale = 1.0 / math.sqrt(dn)
    o = np.empty((nh, dv))
    for h in range(nh):
        score = (K_nope[:, h, :] @ q_nope[h] + K_rope @ q_rope[h]) * scale    # s <= t
        o[h] = softmax(score) @ V[:, h, :]
    gate = sigmoid(W["g_proj"] @ x).reshape(nh, dv)     # gate BEFORE o_proj, no norm
    return W["o_proj"] @ (o * gate).reshape(-1)


# =========================================================================================
# Section 4.5: router and Stable LatentMoE
# =========================================================================================

def route(x, W, c):
    """Top-k experts of x and their weights: (idx in descending choice order, w, s)."""
    s = sigmoid(W["gate"] @ x)
    choice = s + W["gate.e_score_correction_bias"]       # the bias steers SELECTION ONLY (trap)
    order = sorted(range(c.num_experts), key=lambda e: (-choice[e], e))   # ties: lower index
    idx = order[:c.num_experts_per_token]
    w = choice[idx] if TRAP == "router_bias_weights" else s[idx]   # wrong: weights from s + bias
    w = w / (np.sum(w) + 1e-20) * c.routed_scaling_factor
    return idx, w, s


def latent_moe(x, W, expert, c):
    """LatentMoE(x): experts run in the latent z, routed_expert_norm on the aggregate,
    shared experts on the original x. expert(e) -> (W1, W2, W3) as float64."""
    b1, b2, eps = c.activation_situ_beta, c.activation_situ_linear_beta, c.rms_norm_eps
    idx, w, s = route(x, W, c)
    stat("expert_sets_seen", tuple(idx), "set")
    z = W["routed_expert_down_proj"] @ x
    r = np.zeros(c.routed_expert_hidden_size)
    for wj, e in zip(w, idx):                            # summed in idx order
        W1, W2, W3 = expert(e)
        y = W2 @ situ_glu(W1 @ z, W3 @ z, b1, b2)
        if TRAP == "latent_norm_per_expert":             # wrong: norm each expert
            y = rms_norm(y, W["routed_expert_norm"], eps)
        r = r + wj * y
    stat("routed_mean_square", lambda: float(np.mean(r * r)))
    if TRAP != "latent_norm_per_expert":
        r = rms_norm(r, W["routed_expert_norm"], eps)    # on the AGGREGATE, once (trap)
    shared = W["shared_experts.down_proj"] @ situ_glu(
        W["shared_experts.gate_proj"] @ x, W["shared_experts.up_proj"] @ x, b1, b2)
    if TRAP == "shared_weighted":                        # wrong: weighted by the raw scores
        shared = shared * np.sum(s[idx])
    return W["routed_expert_up_proj"] @ r + shared       # shared: UNWEIGHTED


# =========================================================================================
# The model: weights by layer, the session state, one token through all layers
# =========================================================================================

KDA_NAMES = ("q_proj k_proj v_proj g_proj o_proj q_conv1d k_conv1d v_conv1d f_a_proj f_b_proj "
             "b_proj dt_bias A_log o_norm").split()
MLA_NAMES = ("q_a_proj q_a_layernorm q_b_proj kv_a_proj_with_mqa kv_a_layernorm kv_b_proj "
             "g_proj o_proj").split()
MOE_NAMES = ("gate e_score_correction_bias routed_expert_down_proj routed_expert_norm "
             "routed_expert_up_proj shared_experts.gate_proj shared_experts.up_proj "
             "shared_experts.down_proj").split()


class Model:
    def __init__(self, model_dir):
        c = self.cfg = Config(os.path.join(model_dir, "config.json"))
        ck = self.ckpt = Checkpoint(model_dir)
        M, H, V = mslib.PREFIX, c.hidden_size, c.vocab_size
        nh, d, P = c.kda_heads, c.kda_head_dim, c.kda_heads * c.kda_head_dim
        mh, dn, dr, dv = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        E, R, I = c.num_experts, c.routed_expert_hidden_size, c.moe_intermediate_size
        S = c.num_shared_experts * I

        def w(name, shape):
            x = ck.tensor(name, shape)
            return x.reshape(-1) if len(shape) == 1 or shape[0] == 1 else x

        self.embed = w(M + "embed_tokens.weight", [V, H])
        self.lm_head = w(mslib.LM_HEAD, [V, H])
        self.norm = w(M + "norm.weight", [H])
        self.out_res_norm = w(M + "output_attn_res_norm.weight", [H])
        self.out_res_proj = w(M + "output_attn_res_proj.weight", [1, H])
        self.layers = []
        for il in range(c.num_hidden_layers):
            pre = M + "layers.%d." % il
            L = {k: w(pre + k + ".weight", sh) for k, sh in (
                ("input_layernorm", [H]), ("post_attention_layernorm", [H]),
                ("self_attention_res_norm", [H]), ("self_attention_res_proj", [1, H]),
                ("mlp_res_norm", [H]), ("mlp_res_proj", [1, H]))}
            sa = pre + "self_attn."
            if c.is_mla(il):
                shapes = dict(q_a_proj=[c.q_lora_rank, H], q_a_layernorm=[c.q_lora_rank],
                              q_b_proj=[mh * (dn + dr), c.q_lora_rank],
                              kv_a_proj_with_mqa=[c.kv_lora_rank + dr, H],
                              kv_a_layernorm=[c.kv_lora_rank],
                              kv_b_proj=[mh * (dn + dv), c.kv_lora_rank],
                              g_proj=[mh * dv, H], o_proj=[H, mh * dv])
                L["attn"] = {k: w(sa + k + ".weight", shapes[k]) for k in MLA_NAMES}
            else:
                K = c.conv_kernel
                shapes = dict(q_proj=[P, H], k_proj=[P, H], v_proj=[P, H], g_proj=[P, H],
                              o_proj=[H, P], q_conv1d=[P, 1, K], k_conv1d=[P, 1, K],
                              v_conv1d=[P, 1, K], f_a_proj=[d, H], f_b_proj=[P, d],
                              b_proj=[nh, H], dt_bias=[P], A_log=[d], o_norm=[d])
                suffix = {"dt_bias": "", "A_log": ""}
                L["attn"] = {k: ck.tensor(sa + k + suffix.get(k, ".weight"), shapes[k])
                             for k in KDA_NAMES}
                L["attn"]["b_proj"] = L["attn"]["b_proj"].reshape(nh, H)
            if c.is_dense(il):
                I_d = c.intermediate_size
                L["ffn"] = {"mlp." + k: w(pre + "mlp." + k + ".weight", sh) for k, sh in (
                    ("gate_proj", [I_d, H]), ("up_proj", [I_d, H]), ("down_proj", [H, I_d]))}
            else:
                mo = pre + "block_sparse_moe."
                shapes = {"gate": [E, H], "e_score_correction_bias": [E],
                          "routed_expert_down_proj": [R, H], "routed_expert_norm": [R],
                          "routed_expert_up_proj": [H, R], "shared_experts.gate_proj": [S, H],
                          "shared_experts.up_proj": [S, H], "shared_experts.down_proj": [H, S]}
                ffn = {}
                for k in MOE_NAMES:
                    name = mo + ("gate." + k if k == "e_score_correction_bias" else k + ".weight")
                    ffn["gate." + k if k == "e_score_correction_bias" else k] = w(name, shapes[k])
                L["ffn"] = ffn
                L["expert_cache"] = {}
            self.layers.append(L)

    def expert(self, il, e):
        """(W1, W2, W3) of routed expert e of layer il, decoded once."""
        cache = self.layers[il]["expert_cache"]
        if e not in cache:
            c, ck = self.cfg, self.ckpt
            R, I = c.routed_expert_hidden_size, c.moe_intermediate_size
            pre = mslib.PREFIX + "layers.%d.block_sparse_moe.experts.%d." % (il, e)
            mats = []
            for wn, rows, cols in (("w1", I, R), ("w2", R, I), ("w3", I, R)):
                packed = ck.tensor(pre + wn + ".weight_packed", [rows, cols // 2])
                scale = ck.tensor(pre + wn + ".weight_scale", [rows, cols // 32])
                stat("scale255_groups_decoded", int(np.sum(scale == 255)), "add")
                mats.append(mxfp4_matrix(packed, scale))
            cache[e] = tuple(mats)
        return cache[e]


class Session:
    """Per-sequence state: KDA state per KDA layer, MLA cache per MLA layer, position."""

    def __init__(self, model):
        c = model.cfg
        self.model = model
        self.pos = 0
        self.state = [MLACache() if c.is_mla(il) else KDAState(c)
                      for il in range(c.num_hidden_layers)]


def forward_token(sess, token):
    """Logits after feeding `token` at the session's next position (section 4.2)."""
    m, c = sess.model, sess.model.cfg
    eps, B = c.rms_norm_eps, c.attn_res_block_size
    run = m.embed[token].copy()                      # used as is: no scaling
    bank = []
    for il, L in enumerate(m.layers):
        h = run
        if bank:
            h = attn_res_read(bank + [run], L["self_attention_res_norm"],
                              L["self_attention_res_proj"], eps)
        if il % B == 0:                              # block boundary: snapshot, then clear
            bank.append(run)
            if TRAP != "attnres_no_clear":           # wrong: run kept after the snapshot
                run = None
        x = rms_norm(h, L["input_layernorm"], eps)
        if c.is_mla(il):
            a = mla(x, L["attn"], sess.state[il], sess.pos, c)
        else:
            a = kda(x, L["attn"], sess.state[il], c)
        run = a if run is None else run + a
        h2 = attn_res_read(bank + [run], L["mlp_res_norm"], L["mlp_res_proj"], eps)  # no guard
        x2 = rms_norm(h2, L["post_attention_layernorm"], eps)
        if c.is_dense(il):
            f = dense_mlp(x2, L["ffn"], c)
        else:
            f = latent_moe(x2, L["ffn"], lambda e, il=il: m.expert(il, e), c)
        run = run + f
        stat("run_rms_max", lambda: float(np.sqrt(np.mean(run * run))))
    y = rms_norm(attn_res_read(bank + [run], m.out_res_norm, m.out_res_proj, eps), m.norm, eps)
    sess.pos += 1
    return m.lm_head @ y                             # no soft-cap, no logit scale


def teacher_force(model, ids):
    """Logits after each of ids, fed from the start of a fresh sequence: [len(ids), V]."""
    return goldens.teacher_force(Session, forward_token, model, ids)


def greedy(model, prompt, n_gen):
    """(the n_gen greedy ids, the logits that chose each of them [n_gen, V])."""
    return goldens.greedy(Session, forward_token, model, prompt, n_gen)


def configure(trap, stats):
    global TRAP, STATS
    TRAP, STATS = trap, stats


def print_stats(stats):
    for k in sorted(stats):
        v = stats[k]
        print("stat %s: %s" % (k, len(v) if isinstance(v, set) else v), file=sys.stderr)


def main(argv):
    return goldens.main(argv, "msref", __doc__, mslib.TRAPS, Model, Session, forward_token, configure, print_stats)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
