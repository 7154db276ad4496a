#!/usr/bin/env python3
"""tools/msgen.py - random Kimi K3 checkpoints in the released on-disk layout.

Owns: the tiny test models (presets a, b, c, d), the trap fixtures (--trap NAME), and
  big random checkpoints at the real widths for benchmarks (preset "wide").
Idea: a checkpoint is planned first (config, tensor names/shapes/dtypes, data order,
  shard of every tensor: spec sections 1-3), then each tensor is filled from its
  own random stream (seeded by (seed, tensor number)), so the same plan can be
  written whole (tiny presets) or block by block (wide) with identical layout.

  shard 1:  [8-byte LE header length][JSON header, space-padded to 8 (+ --header-pad)][data ...]
            data = globals (embed_tokens, norm, output_attn_res_*), then layers
  each layer inside one shard:
            [ non-expert tensors: one contiguous run ][ expert 0: w1p w1s w2p w2s w3p w3s ]
            [ expert 1: ... ] ... [ expert E-1: ... ]
  last shard ends with language_model.lm_head.weight

Invariants:
  - names, shapes and dtypes exactly as spec section 3; JSON header keys sorted
    ("__metadata__" first); data_offsets relative to the data section, no gaps;
  - BF16 = top 16 bits of the float32 value rounded to nearest even;
  - A_log is [head_dim] with entries >= num_heads zero (needs num_heads <= head_dim);
  - MXFP4: packed U8 [rows, in/2] (element 2i = low nibble of byte i), scale U8
    [rows, in/32]; every input width is a multiple of 32; a few scale bytes are 255;
  - the wide preset never holds more than one block (<= 64 MiB of elements) per tensor.
Does not: compute the model (msref.py does), read checkpoints, lay out the bytes of
  a shard or the index (stwrite.py does, for ossgen.py too).

Usage: msgen.py OUT_DIR --preset a|b|c|d|wide [--seed N] [--trap NAME] [--header-pad N] [wide flags]
       msgen.py OUT_DIR --trap NAME          (the trap's fixture on its base preset)
"""

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mslib  # noqa: E402
import stwrite  # noqa: E402

# ---------------------------------------------------------------------------
# Presets. Dims follow the release's structure at toy size (spec section 2).
# mla: one-based MLA layer numbers (the config's full_attn_layers).
# Weight-scale knobs (all default 1 / 0): gate_gain multiplies every SiTU gate
# projection, w2_shift moves the expert down-projection scale bytes (log2),
# bias_amp is the router correction bias range; lm_head_gain multiplies lm_head's std.
# ---------------------------------------------------------------------------

PRESETS = {
    # 13 layers, blocks of 3: the bank closes blocks at 0, 3, 6, 9, 12 (>= 2 closed
    # and a third opened); MLA every 4th one-based plus the last two, as released.
    "a": dict(layers=13, hidden=64, vocab=384, block=3, mla=[4, 8, 12, 13], dense=1,
              experts=8, topk=2, shared=2, conv=4, kda_heads=4, kda_dim=16,
              mla_heads=4, q_lora=32, kv_lora=16, nope=16, rope=8, v=16,
              inter=96, moe_inter=32, latent=32, scaling=1.0, shards=4, seed=1001),
    # Different dims everywhere, MLA not every 4th, two dense layers, one shared
    # expert, kernel 3, P = 96 != mla_heads * v_head_dim = 72.
    "b": dict(layers=6, hidden=96, vocab=320, block=4, mla=[2, 5, 6], dense=2,
              experts=6, topk=3, shared=1, conv=3, kda_heads=3, kda_dim=32,
              mla_heads=6, q_lora=48, kv_lora=24, nope=12, rope=4, v=12,
              inter=128, moe_inter=64, latent=64, scaling=1.0, shards=3, seed=2002),
    # Many experts, top-4, blocks of 2, routed_scaling_factor 2.5. The expert
    # down-projections are small (w2_shift) so that mean(r^2) of the routed sum is
    # near rms_norm_eps: only then does the aggregate routed_expert_norm let
    # routed_scaling_factor change the output (otherwise the norm divides it out).
    "c": dict(layers=4, hidden=64, vocab=256, block=2, mla=[3, 4], dense=1,
              experts=20, topk=4, shared=2, conv=4, kda_heads=4, kda_dim=16,
              mla_heads=4, q_lora=32, kv_lora=16, nope=16, rope=8, v=16,
              inter=96, moe_inter=32, latent=64, scaling=2.5, shards=3, seed=3003,
              w2_shift=-9),
    # Odd counts everywhere the loader allows them: 7 experts, 3 KDA and 5 MLA
    # heads, odd widths (hidden 67, head dims 13 / 11 / 5 / 9, ranks 27 / 19,
    # vocab 301). Written without padding, like any safetensors writer, so
    # some F32 tensors (dt_bias, the conv taps) start at 2 mod 4.
    "d": dict(layers=5, hidden=67, vocab=301, block=2, mla=[3, 5], dense=1,
              experts=7, topk=3, shared=1, conv=3, kda_heads=3, kda_dim=13,
              mla_heads=5, q_lora=27, kv_lora=19, nope=11, rope=5, v=9,
              inter=83, moe_inter=32, latent=64, scaling=1.0, shards=3, seed=5005),
    # A draft model for preset a (--draft-model): a's vocabulary (384 ids, no tokenizer)
    # in 4 layers and 4 experts; its own random weights, so its drafts are mostly wrong.
    "e": dict(layers=4, hidden=64, vocab=384, block=2, mla=[3, 4], dense=1,
              experts=4, topk=2, shared=1, conv=4, kda_heads=2, kda_dim=16,
              mla_heads=2, q_lora=32, kv_lora=16, nope=16, rope=8, v=16,
              inter=64, moe_inter=32, latent=32, scaling=1.0, shards=3, seed=6006),
    # e with an all-zero lm_head: every logit is 0, so its greedy id is always 0 and
    # a draft from it is always wrong wherever the model never emits id 0.
    "e0": dict(layers=4, hidden=64, vocab=384, block=2, mla=[3, 4], dense=1,
               experts=4, topk=2, shared=1, conv=4, kda_heads=2, kda_dim=16,
               mla_heads=2, q_lora=32, kv_lora=16, nope=16, rope=8, v=16,
               inter=64, moe_inter=32, latent=32, scaling=1.0, shards=3, seed=6006,
               lm_head_gain=0.0),
}

# The real widths (spec section 2); counts (layers, experts, vocab) are flags.
WIDE_DEFAULTS = dict(layers=4, hidden=7168, vocab=163840, block=12, dense=1,
                     experts=32, topk=16, shared=2, conv=4, kda_heads=96, kda_dim=128,
                     mla_heads=96, q_lora=1536, kv_lora=512, nope=128, rope=64, v=128,
                     inter=33792, moe_inter=3072, latent=3584, scaling=1.0, shards=0,
                     seed=4004)

# Which base preset each trap fixture uses, and how it shapes the weights so the
# wrong version visibly changes the result.
TRAP_FIXTURES = {
    "alog_per_channel": ("a", {}),
    "one_based_off": ("a", {"both_attn": True}),   # see plan_layer
    "l2_mean": ("a", {}),
    "kda_gate_then_norm": ("a", {}),
    "mla_rope_rotated": ("a", {}),
    "mla_scale_128": ("a", {"q_gain": 2.0}),
    # seed: the correct greedy run has no near-tie (top-2 gap >= 0.03)
    "router_bias_weights": ("c", {"bias_amp": 1.0, "seed": 3006}),
    "latent_norm_per_expert": ("c", {}),
    "shared_weighted": ("c", {}),
    # gates into the caps: |g| ~ 10..1000
    "situ_capped_sigmoid": ("c", {"gate_gain": 150.0, "w1_shift": 7}),
    "nibble_swap": ("c", {}),
    # 255 scale bytes in every expert, so routed experts certainly hold some
    "scale255_nan": ("c", {"n255_frac": 0.08}),
    "attnres_no_clear": ("a", {}),
    "attnres_mix_normed": ("a", {}),
}

# The dtype names and the writer's helpers are stwrite.py's (shared with ossgen.py);
# the names stay here for msgen's callers (train_tiny.py, tests/fuzz/mkseeds.py).
BF16, F32, U8, DTYPE_BYTES = stwrite.BF16, stwrite.F32, stwrite.U8, stwrite.DTYPE_BYTES
split_items, to_bf16_bits, shard_header = (stwrite.split_items, stwrite.to_bf16_bits,
                                           stwrite.shard_header)


# ---------------------------------------------------------------------------
# config.json: the released file with the dims overridden (spec section 2).
# ---------------------------------------------------------------------------

def mla_layers_default(n_layers):
    """One-based MLA layers as in the release: every 4th, plus the last."""
    s = {i for i in range(4, n_layers + 1, 4)}
    s.add(n_layers)
    return sorted(s)


def make_config(p):
    cfg = mslib.load_released_config()
    tc = cfg["text_config"]
    la = tc["linear_attn_config"]
    n = p["layers"]
    mla = sorted(p["mla"])
    bos, eos, pad = p["vocab"] - 6, p["vocab"] - 4, p["vocab"] - 1
    tc.update({
        "hidden_size": int(p["hidden"]),
        "num_hidden_layers": int(n),
        "vocab_size": int(p["vocab"]),
        "rms_norm_eps": 1e-5,
        "num_attention_heads": int(p["mla_heads"]),
        "num_key_value_heads": int(p["mla_heads"]),
        "q_lora_rank": int(p["q_lora"]),
        "kv_lora_rank": int(p["kv_lora"]),
        "qk_nope_head_dim": int(p["nope"]),
        "qk_rope_head_dim": int(p["rope"]),
        "v_head_dim": int(p["v"]),
        "first_k_dense_replace": int(p["dense"]),
        "intermediate_size": int(p["inter"]),
        "num_experts": int(p["experts"]),
        "num_experts_per_token": int(p["topk"]),
        "num_shared_experts": int(p["shared"]),
        "moe_intermediate_size": int(p["moe_inter"]),
        "routed_expert_hidden_size": int(p["latent"]),
        "routed_scaling_factor": float(p["scaling"]),
        "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0,
        "attn_res_block_size": int(p["block"]),
        "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad,
    })
    la.update({
        "full_attn_layers": mla,
        "kda_layers": [i for i in range(1, n + 1) if i not in mla],
        "num_heads": int(p["kda_heads"]),
        "head_dim": int(p["kda_dim"]),
        "short_conv_kernel_size": int(p["conv"]),
        "gate_lower_bound": -5.0,
    })
    cfg.update({"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad})
    return cfg


def check_params(p):
    """Refuse dims the layout cannot hold (one line per problem)."""
    errs = []
    for k in ("latent", "moe_inter"):
        if p[k] % 32:
            errs.append("%s=%d is not a multiple of 32 (MXFP4 group)" % (k, p[k]))
    if p["kda_heads"] > p["kda_dim"]:
        errs.append("kda_heads %d > kda_dim %d: A_log [head_dim] cannot hold one per head"
                    % (p["kda_heads"], p["kda_dim"]))
    if p["topk"] > p["experts"]:
        errs.append("topk %d > experts %d" % (p["topk"], p["experts"]))
    if not all(1 <= m <= p["layers"] for m in p["mla"]):
        errs.append("MLA layer list %s out of 1..%d" % (p["mla"], p["layers"]))
    if p["layers"] < 1 or p["dense"] > p["layers"]:
        errs.append("bad layer counts")
    if errs:
        raise SystemExit("msgen: " + "; ".join(errs))


# ---------------------------------------------------------------------------
# The plan: every tensor as (name, dtype, shape, init), in data order.
# init is a small tuple saying how to fill it:
#   ("normal", mean, std)       BF16/F32 Gaussian
#   ("alog", n_heads)           F32 [head_dim], first n_heads = log(U(0.5, 8)), rest 0
#   ("conv",)                   F32 [C, 1, K], N(0, 0.5) with +0.5 on the newest tap
#   ("uniform", lo, hi)         F32
#   ("codes",)                  U8 random bytes (two random FP4 codes each)
#   ("scales", center, n255)    U8 center + {-1, 0, 1}, then n255 entries set to 255
# ---------------------------------------------------------------------------

def mxfp4_center(std):
    """Scale byte giving weights of roughly `std` (random codes have RMS ~2.93)."""
    return int(round(127 + math.log2(std / 2.93)))


def plan_globals(p):
    M, H, V = mslib.PREFIX, p["hidden"], p["vocab"]
    return [
        (M + "embed_tokens.weight", BF16, [V, H], ("normal", 0.0, 1.0)),
        (M + "norm.weight", BF16, [H], ("normal", 1.0, 0.1)),
        (M + "output_attn_res_norm.weight", BF16, [H], ("normal", 1.0, 0.1)),
        (M + "output_attn_res_proj.weight", BF16, [1, H], ("normal", 0.0, 2.0 / math.sqrt(H))),
    ]


def plan_kda(p, pre):
    H, nh, d, K = p["hidden"], p["kda_heads"], p["kda_dim"], p["conv"]
    P = nh * d
    sH = 1.0 / math.sqrt(H)
    return [
        (pre + "q_proj.weight", BF16, [P, H], ("normal", 0.0, sH)),
        (pre + "k_proj.weight", BF16, [P, H], ("normal", 0.0, sH)),
        (pre + "v_proj.weight", BF16, [P, H], ("normal", 0.0, sH)),
        (pre + "q_conv1d.weight", F32, [P, 1, K], ("conv",)),
        (pre + "k_conv1d.weight", F32, [P, 1, K], ("conv",)),
        (pre + "v_conv1d.weight", F32, [P, 1, K], ("conv",)),
        (pre + "f_a_proj.weight", BF16, [d, H], ("normal", 0.0, sH)),
        (pre + "f_b_proj.weight", BF16, [P, d], ("normal", 0.0, 1.0 / math.sqrt(d))),
        (pre + "b_proj.weight", BF16, [nh, H], ("normal", 0.0, 1.5 * sH)),
        (pre + "dt_bias", F32, [P], ("normal", 0.0, 1.0)),
        (pre + "A_log", F32, [d], ("alog", nh)),
        (pre + "o_norm.weight", F32, [d], ("normal", 1.0, 0.1)),
    ]


def plan_mla(p, pre):
    H, nh = p["hidden"], p["mla_heads"]
    ql, kl, dn, dr, dv = p["q_lora"], p["kv_lora"], p["nope"], p["rope"], p["v"]
    sH = 1.0 / math.sqrt(H)
    qg = p.get("q_gain", 1.5)
    return [
        (pre + "q_a_proj.weight", BF16, [ql, H], ("normal", 0.0, sH)),
        (pre + "q_a_layernorm.weight", BF16, [ql], ("normal", 1.0, 0.1)),
        (pre + "q_b_proj.weight", BF16, [nh * (dn + dr), ql], ("normal", 0.0, qg / math.sqrt(ql))),
        (pre + "kv_a_proj_with_mqa.weight", BF16, [kl + dr, H], ("normal", 0.0, sH)),
        (pre + "kv_a_layernorm.weight", BF16, [kl], ("normal", 1.0, 0.1)),
        (pre + "kv_b_proj.weight", BF16, [nh * (dn + dv), kl], ("normal", 0.0, 1.0 / math.sqrt(kl))),
    ]


def plan_out(p, pre, width):
    """g_proj and o_proj: shared names of KDA (width P) and MLA (heads * v)."""
    H = p["hidden"]
    return [
        (pre + "g_proj.weight", BF16, [width, H], ("normal", 0.0, 2.0 / math.sqrt(H))),
        (pre + "o_proj.weight", BF16, [H, width], ("normal", 0.0, 1.0 / math.sqrt(width))),
    ]


def plan_layer(p, il, is_mla):
    """The layer's non-expert tensors, in data order."""
    M, H = mslib.PREFIX, p["hidden"]
    pre = M + "layers.%d." % il
    gg = p.get("gate_gain", 1.0)
    t = [
        (pre + "input_layernorm.weight", BF16, [H], ("normal", 1.0, 0.1)),
        (pre + "post_attention_layernorm.weight", BF16, [H], ("normal", 1.0, 0.1)),
        (pre + "self_attention_res_norm.weight", BF16, [H], ("normal", 1.0, 0.1)),
        (pre + "self_attention_res_proj.weight", BF16, [1, H], ("normal", 0.0, 2.0 / math.sqrt(H))),
        (pre + "mlp_res_norm.weight", BF16, [H], ("normal", 1.0, 0.1)),
        (pre + "mlp_res_proj.weight", BF16, [1, H], ("normal", 0.0, 2.0 / math.sqrt(H))),
    ]
    sa = pre + "self_attn."
    kda_width = p["kda_heads"] * p["kda_dim"]
    mla_width = p["mla_heads"] * p["v"]
    if p.get("both_attn") and is_mla != (il in p["mla"]):
        # one_based_off fixture: the wrong (zero-based) reading flips this layer, so
        # it also carries the other kind's tensors (unused by a correct engine, like
        # the release's vision tensors). g_proj/o_proj are shared by name, which
        # needs P == mla_heads * v_head_dim.
        assert kda_width == mla_width
        t += plan_kda(p, sa) + plan_mla(p, sa)
    elif is_mla:
        t += plan_mla(p, sa)
    else:
        t += plan_kda(p, sa)
    t += plan_out(p, sa, mla_width if is_mla else kda_width)
    if il < p["dense"]:
        I = p["inter"]
        t += [
            (pre + "mlp.gate_proj.weight", BF16, [I, H], ("normal", 0.0, gg * 2.0 / math.sqrt(H))),
            (pre + "mlp.up_proj.weight", BF16, [I, H], ("normal", 0.0, 1.0 / math.sqrt(H))),
            (pre + "mlp.down_proj.weight", BF16, [H, I], ("normal", 0.0, 1.0 / math.sqrt(I))),
        ]
    else:
        E, R, S = p["experts"], p["latent"], p["shared"] * p["moe_inter"]
        mo = pre + "block_sparse_moe."
        amp = p.get("bias_amp", 0.3)
        t += [
            (mo + "gate.weight", BF16, [E, H], ("normal", 0.0, 2.0 / math.sqrt(H))),
            (mo + "gate.e_score_correction_bias", F32, [E], ("uniform", -amp, amp)),
            (mo + "routed_expert_down_proj.weight", BF16, [R, H], ("normal", 0.0, 1.0 / math.sqrt(H))),
            (mo + "routed_expert_norm.weight", BF16, [R], ("normal", 1.0, 0.1)),
            (mo + "routed_expert_up_proj.weight", BF16, [H, R], ("normal", 0.0, 1.0 / math.sqrt(R))),
            (mo + "shared_experts.gate_proj.weight", BF16, [S, H], ("normal", 0.0, gg * 2.0 / math.sqrt(H))),
            (mo + "shared_experts.up_proj.weight", BF16, [S, H], ("normal", 0.0, 1.0 / math.sqrt(H))),
            (mo + "shared_experts.down_proj.weight", BF16, [H, S], ("normal", 0.0, 1.0 / math.sqrt(S))),
        ]
    return t


def plan_expert(p, il, ie, n255):
    """One routed expert's six tensors (w1 gate, w2 down, w3 up), in data order.
    n255[k] = how many scale bytes of matrix k (0 w1, 1 w2, 2 w3) are 255."""
    R, I = p["latent"], p["moe_inter"]
    pre = mslib.PREFIX + "layers.%d.block_sparse_moe.experts.%d." % (il, ie)
    c1 = mxfp4_center(2.0 / math.sqrt(R)) + p.get("w1_shift", 0)
    c2 = mxfp4_center(1.0 / math.sqrt(I)) + p.get("w2_shift", 0)
    c3 = mxfp4_center(1.0 / math.sqrt(R))
    out = []
    for k, (w, rows, cols, c) in enumerate((("w1", I, R, c1), ("w2", R, I, c2), ("w3", I, R, c3))):
        out.append((pre + w + ".weight_packed", U8, [rows, cols // 2], ("codes",)))
        out.append((pre + w + ".weight_scale", U8, [rows, cols // 32], ("scales", c, n255[k])))
    return out


def plan_checkpoint(p, rng):
    """[(shard_items)] where an item is a list of tensors that must stay together:
    globals, one layer (non-expert run + its experts), lm_head."""
    n, E = p["layers"], p["experts"]
    mla0 = {m - 1 for m in p["mla"]}            # one-based -> 0-based (spec section 2)
    # 255 scale bytes: a few per model (or a fraction of every expert's groups).
    moe_layers = [il for il in range(n) if il >= p["dense"]]
    n255 = {}
    frac = p.get("n255_frac", 0.0)
    if frac > 0:
        R, I = p["latent"], p["moe_inter"]
        per = [max(1, int(frac * I * R // 32)), max(1, int(frac * R * I // 32)),
               max(1, int(frac * I * R // 32))]
        for il in moe_layers:
            for ie in range(E):
                n255[(il, ie)] = per
    elif moe_layers:
        for _ in range(3):
            il = moe_layers[int(rng.integers(len(moe_layers)))]
            ie, k = int(rng.integers(E)), int(rng.integers(3))
            v = list(n255.get((il, ie), [0, 0, 0]))
            v[k] += 1
            n255[(il, ie)] = v
    items = [plan_globals(p)]
    for il in range(n):
        t = plan_layer(p, il, il in mla0)
        if il >= p["dense"]:
            for ie in range(E):
                t += plan_expert(p, il, ie, n255.get((il, ie), [0, 0, 0]))
        items.append(t)
    H, V = p["hidden"], p["vocab"]
    items.append([(mslib.LM_HEAD, BF16, [V, H], ("normal", 0.0, p.get("lm_head_gain", 1.0) * 2.0 / math.sqrt(H)))])
    return items


# ---------------------------------------------------------------------------
# Filling tensors. Each tensor has its own generator (SFC64: the fastest raw bits in
# numpy) seeded by (seed, tensor number), so contents do not depend on write order.
# ---------------------------------------------------------------------------

def fill_small(init, dtype, shape, rng):
    """The whole tensor as bytes (tiny tensors; exact distributions)."""
    kind = init[0]
    n = int(np.prod(shape))
    if kind == "normal":
        x = init[1] + init[2] * rng.standard_normal(n)
    elif kind == "uniform":
        x = rng.uniform(init[1], init[2], n)
    elif kind == "alog":
        # distinct per-head decay rates; channels >= num_heads are padding (zero)
        x = np.zeros(n)
        x[:init[1]] = np.log(rng.uniform(0.5, 8.0, init[1]))
    elif kind == "conv":
        x = 0.5 * rng.standard_normal(shape)
        x[..., -1] += 0.5                       # newest tap (oldest tap first)
        x = x.reshape(-1)
    elif kind == "codes":
        return rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    elif kind == "scales":
        s = (init[1] + rng.integers(-1, 2, n)).astype(np.int64)
        assert s.min() >= 1 and s.max() <= 254, "scale byte center out of range"
        s = s.astype(np.uint8)
        if init[2]:
            s[rng.choice(n, size=min(n, init[2]), replace=False)] = 255
        return s.tobytes()
    else:
        raise ValueError(kind)
    if dtype == BF16:
        return to_bf16_bits(x).tobytes()
    assert dtype == F32
    return x.astype("<f4").tobytes()


def fill_blocks(init, dtype, shape, rng):
    """Bytes of a tensor in blocks (any size). Small tensors take the exact path; big
    Gaussian BF16, code and scale tensors stwrite.random_blocks (random bits)."""
    n = int(np.prod(shape))
    if n <= (1 << 20) or init[0] not in ("normal", "codes", "scales"):
        yield fill_small(init, dtype, shape, rng)
        return
    yield from stwrite.random_blocks(init, dtype, n, rng)


def write_checkpoint(out_dir, cfg, shards, seed, meta, header_pad=0):
    weight_map, total, number = stwrite.write_shards(
        out_dir, shards, seed, lambda i, n: mslib.shard_name(i + 1, n), fill_blocks, header_pad)
    stwrite.write_index(os.path.join(out_dir, mslib.INDEX_FILE), weight_map, total)
    stwrite.write_json(os.path.join(out_dir, "config.json"), cfg)
    stwrite.write_json(os.path.join(out_dir, "msgen.json"), meta, sort_keys=True)
    return total, number


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--preset", choices=sorted(PRESETS) + ["wide"],
                    help="required unless --trap is given (then: the fixture's base preset)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--trap", choices=mslib.TRAPS)
    ap.add_argument("--header-pad", type=int, default=0,
                    help="spaces added to every shard's header after its padding to 8: an odd "
                    "count puts the data section, and so most tensors, at odd file offsets "
                    "(safetensors does not require aligned data)")
    ap.add_argument("--check-template", action="store_true",
                    help="fail if the released config file differs from the embedded copy")
    for k, v in WIDE_DEFAULTS.items():
        if k != "seed":
            ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=None,
                            help="wide preset only (default %s)" % v)
    ap.add_argument("--mla", help="wide preset: one-based MLA layers, comma separated "
                    "(default every 4th plus the last)")
    a = ap.parse_args(argv)
    if a.check_template and mslib.load_released_config() != mslib.embedded_config():
        raise SystemExit("msgen: the released config differs from the embedded template")

    if a.preset is None:
        if not a.trap:
            raise SystemExit("msgen: --preset is required without --trap")
        a.preset = TRAP_FIXTURES[a.trap][0]
    if a.preset == "wide":
        p = dict(WIDE_DEFAULTS)
        for k in WIDE_DEFAULTS:
            v = getattr(a, k, None)
            if v is not None and k != "seed":
                p[k] = v
        p["mla"] = ([int(x) for x in a.mla.split(",")] if a.mla
                    else mla_layers_default(p["layers"]))
    else:
        p = dict(PRESETS[a.preset])
    if a.trap:
        base, adj = TRAP_FIXTURES[a.trap]
        if a.preset != "wide" and a.preset != base:
            print("msgen: note: trap %s is designed for preset %s" % (a.trap, base),
                  file=sys.stderr)
        p.update(adj)
    if a.seed is not None:
        p["seed"] = a.seed
    check_params(p)
    if p.get("both_attn") and p["kda_heads"] * p["kda_dim"] != p["mla_heads"] * p["v"]:
        raise SystemExit("msgen: one_based_off needs kda_heads*kda_dim == mla_heads*v")

    t0 = time.time()
    cfg = make_config(p)
    rng = np.random.default_rng([p["seed"], 999_999])
    items = plan_checkpoint(p, rng)
    n_shards = p["shards"]
    if n_shards <= 0:   # wide: about 4 GiB per shard, at least 3
        total = sum(DTYPE_BYTES[dt] * int(np.prod(sh)) for it in items for _, dt, sh, _ in it)
        n_shards = max(3, -(-total // (4 << 30)))
    shards = split_items(items, max(3, n_shards))
    meta = {"preset": a.preset, "seed": p["seed"], "trap": a.trap,
            "generator": "tools/msgen.py", "params": p, "header_pad": a.header_pad}
    total, count = write_checkpoint(a.out_dir, cfg, shards, p["seed"], meta, a.header_pad)
    print("msgen: %s: preset %s%s, %d tensors, %d bytes in %d shards, %.2f s"
          % (a.out_dir, a.preset, " trap " + a.trap if a.trap else "", count, total,
             len(shards), time.time() - t0), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
