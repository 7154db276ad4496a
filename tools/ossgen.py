#!/usr/bin/env python3
"""tools/ossgen.py - random gpt-oss checkpoints in the Hugging Face release layout.

Owns: the tiny gpt-oss test models (presets oa, ob), the trap fixtures (--trap NAME),
  and full-width random checkpoints shaped like gpt-oss-20b and gpt-oss-120b for I/O
  benchmarks (presets 20b and 120b: the released configs, shard counts and tensor
  layout; --layers / --experts shrink them for a dry run).
Idea: as msgen.py: a checkpoint is planned first (config, tensor names / shapes /
  dtypes in data order, the shard of every layer: spec/gpt-oss.md section 2), then
  each tensor is filled from its own random stream seeded by (seed, tensor number),
  whole (tiny presets) or block by block (20b, 120b), with the same layout either way.

  shard 0:  [8-byte LE header length][JSON header, space-padded to 8][data ...]
            data = model.embed_tokens.weight, then whole layers
  a layer:  [ input_layernorm, self_attn q k v o (weight, bias), sinks,
              post_attention_layernorm, mlp.router (weight, bias) ]
            [ mlp.experts: gate_up_proj_blocks U8 [E, 2I, H/32, 16], _scales U8 [E, 2I, H/32],
              gate_up_proj_bias [E, 2I], down_proj_blocks U8 [E, H, I/32, 16],
              _scales U8 [E, H, I/32], down_proj_bias [E, H] ]
  last shard ends with model.norm.weight, lm_head.weight
  files:    model-00000-of-0000{N-1}.safetensors .. (numbered from 0, as released),
            model.safetensors.index.json, config.json, generation_config.json,
            tokenizer.json, tokenizer_config.json, special_tokens_map.json, ossgen.json

Invariants:
  - names, shapes and dtypes as the release: everything BF16 (self_attn.sinks too, as
    the release and openai's reference declare them), experts' blocks and scales U8;
    JSON header keys sorted ("__metadata__" first), data_offsets without gaps;
  - BF16 = the float32 value rounded to nearest even on its top 16 bits;
  - MXFP4: byte k of block g of row r holds elements (r, 32g+2k) (low nibble) and
    (r, 32g+2k+1) (high nibble); scale bytes are center + {-1, 0, 1}, never 255;
  - gate_up rows are interleaved: row 2j is gate unit j, row 2j+1 up unit j;
  - config.json is the released one with the dims replaced; max_position_embeddings
    is always factor * original_max_position_embeddings (so readers that derive the
    YaRN factor from their ratio agree);
  - the tiny vocabulary is the 256 byte tokens (ids in o200k's order), BPE merges
    learnt on a fixed text, then the harmony specials at the top (osslib), so every
    special id is < vocab_size.
Does not: compute the model (ossref.py does), read checkpoints, lay out the bytes of
  a shard or the index (stwrite.py does, for msgen.py too).

Usage: ossgen.py OUT_DIR --preset oa|ob|20b|120b [--seed N] [--trap NAME] [--check-template]
       ossgen.py OUT_DIR --preset oa|ob --vocab N  (the preset with N vocabulary ids)
       ossgen.py OUT_DIR --trap NAME          (the trap's fixture on its base preset)
       ossgen.py OUT_DIR --preset 20b|120b [--layers N] [--experts N] [--dry-run]
"""

import argparse
import json
import math
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import osslib  # noqa: E402
import stwrite  # noqa: E402

# ---------------------------------------------------------------------------
# Presets. Dims follow the release's structure at toy size. RoPE fields default to the
# release's (theta 150000, yarn factor 32, beta 32 / 1, original context 4096).
# Weight knobs (defaults in KNOBS): q_gain scales q/k projections (attention
# sharpness), w1_std / w2_std the experts' logical weight RMS, sink_mean / sink_std the
# sinks, b2_std the down bias, lm_gain the head.
# ---------------------------------------------------------------------------

PRESETS = {
    # 2 layers (one sliding, one full), GQA groups of 2, H = I as released, window 4
    # so that ~40-token tests slide it many times.
    "oa": dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=8, topk=4,
               inter=64, vocab=320, window=4, shards=2, limit=7.0, seed=7110),
    # Different everywhere: H != I != heads * head_dim (128 / 96 / 192), 3 KV heads in
    # groups of 2, 12 experts, an odd vocabulary, window 7, swiglu_limit 5, 3 shards,
    # the original context 2048 (YaRN ramp over other frequencies).
    "ob": dict(layers=4, hidden=128, heads=6, kv_heads=3, head_dim=32, experts=12, topk=4,
               inter=96, vocab=347, window=7, shards=3, limit=5.0, orig_ctx=2048,
               seed=7226),
    # Attention far larger than a router (32 heads of 64 over H = 64): each layer's
    # router region is under 1/32 of its attention region, as in the release (1/290 in
    # the 20b, 1/72 in the 120b), so every plan pins the routers (store/plan.h, "small
    # regions") and the floor's predictor can run (test_budget floor_guesses).
    "oc": dict(layers=3, hidden=64, heads=32, kv_heads=4, head_dim=64, experts=6, topk=2,
               inter=64, vocab=320, window=4, shards=1, limit=7.0, seed=7336),
}

KNOBS = dict(q_gain=1.0, w1_std=0.5, w2_std=None, sink_mean=0.5, sink_std=1.0, b2_std=0.5,
             lm_gain=3.0, theta=150000, factor=32.0, beta_fast=32.0, beta_slow=1.0,
             orig_ctx=4096, eps=1e-5)

# Which base preset each trap fixture uses, and how it shapes the model so that the
# wrong version visibly changes the logits (tests/make_testdata.sh checks > 0.1). A seed
# is given where the preset's would leave a correct top-2 logit gap under 0.01
# (test_golden's tolerance, 1e-3 of the largest logit, is ~0.012 here).
TRAP_FIXTURES = {
    "gate_up_halves": ("oa", {}),
    # the gate's lower clamp only shows where g sigmoid(1.702 g) is not ~0 at -limit:
    # a small limit (a config field) and wide gates
    "gate_clamp_symmetric": ("oa", {"limit": 1.0, "w1_std": 0.8, "w2_std": 0.25, "seed": 7111}),
    "up_no_plus_one": ("oa", {}),
    "softmax_before_topk": ("oa", {"seed": 7112}),       # the greedy ids change too
    "expert_bias_outside": ("oa", {"b2_std": 1.0, "seed": 7115}),
    "sinks_left_out": ("oa", {"sink_mean": 1.5, "seed": 7121}),
    # truncation moves the ramp ends by < 1 frequency index; a short original context and
    # theta 10^4 put the ramp on frequencies that turn fast enough to matter within ~40
    # positions: low 0.21 -> 0, high 3.22 -> 4 (both inside (0, head_dim/2 - 1), as
    # openai's reference asserts)
    "yarn_truncated": ("oa", {"orig_ctx": 256, "q_gain": 2.0, "theta": 10000}),
    "yarn_no_attn_factor": ("oa", {}),
    "rope_interleaved": ("oa", {}),
    "window_off_by_one": ("oa", {"q_gain": 1.5, "seed": 7111}),
}

# The dtype names and the writer's helpers are stwrite.py's (shared with msgen.py).
BF16, U8 = stwrite.BF16, stwrite.U8
nbytes, split_items, to_bf16_bits, write_json = (stwrite.nbytes, stwrite.split_items,
                                                 stwrite.to_bf16_bits, stwrite.write_json)


# the release's shard files: gpt-oss-20b model-00000-of-00002 .. (3), 120b .. -of-00014 (15)
RELEASED_SHARDS = {"20b": 3, "120b": 15}


def released_params(name):
    """The preset of a released model, from its config.json."""
    c = osslib.load_released_config(name)
    rs = c["rope_scaling"]
    return dict(layers=c["num_hidden_layers"], hidden=c["hidden_size"],
                heads=c["num_attention_heads"], kv_heads=c["num_key_value_heads"],
                head_dim=c["head_dim"], experts=c["num_local_experts"],
                topk=c["num_experts_per_tok"], inter=c["intermediate_size"],
                vocab=c["vocab_size"], window=c["sliding_window"],
                limit=c["swiglu_limit"], theta=c["rope_theta"], factor=rs["factor"],
                beta_fast=rs["beta_fast"], beta_slow=rs["beta_slow"],
                orig_ctx=rs["original_max_position_embeddings"], eps=c["rms_norm_eps"],
                seed=2020, released=name, shards=RELEASED_SHARDS[name])


# ---------------------------------------------------------------------------
# config.json and the small JSON files
# ---------------------------------------------------------------------------

def first_special(p):
    """Id of <|startoftext|>: 199998 in the release; at the top of a tiny vocabulary."""
    if p.get("released") and p["vocab"] == 201088:
        return osslib.RELEASE_FIRST_SPECIAL
    return p["vocab"] - n_special(p)


def n_special(p):
    """The tiny vocabulary keeps 24 special ids (offsets 0..23: the named ones plus
    reserved), as the release's first 24 of 1090."""
    return 24


def make_config(p):
    cfg = osslib.load_released_config("20b")
    n = p["layers"]
    s0 = first_special(p)
    cfg.update({
        "num_hidden_layers": int(n),
        "num_local_experts": int(p["experts"]),
        "num_experts_per_tok": int(p["topk"]),
        "experts_per_token": int(p["topk"]),
        "hidden_size": int(p["hidden"]),
        "intermediate_size": int(p["inter"]),
        "num_attention_heads": int(p["heads"]),
        "num_key_value_heads": int(p["kv_heads"]),
        "head_dim": int(p["head_dim"]),
        "vocab_size": int(p["vocab"]),
        "sliding_window": int(p["window"]),
        "layer_types": ["sliding_attention" if il % 2 == 0 else "full_attention"
                        for il in range(n)],
        "rope_theta": p["theta"],
        "initial_context_length": int(p["orig_ctx"]),
        "max_position_embeddings": int(p["orig_ctx"] * p["factor"]),
        "rms_norm_eps": float(p["eps"]),
        "swiglu_limit": float(p["limit"]),
        "eos_token_id": s0 + 4,          # <|return|>
        "pad_token_id": s0 + 1,          # <|endoftext|>
    })
    cfg["rope_scaling"] = {
        "beta_fast": float(p["beta_fast"]), "beta_slow": float(p["beta_slow"]),
        "factor": float(p["factor"]), "original_max_position_embeddings": int(p["orig_ctx"]),
        "rope_type": "yarn", "truncate": False,
    }
    return cfg


def generation_config(p):
    s0 = first_special(p)
    return {"bos_token_id": s0, "do_sample": True, "eos_token_id": [s0 + 4, s0 + 1, s0 + 14],
            "pad_token_id": s0 + 1, "transformers_version": "4.55.0.dev0"}


def check_params(p):
    """Refuse dims the layout cannot hold (one line per problem)."""
    errs = []
    for k in ("hidden", "inter"):
        if p[k] % 32:
            errs.append("%s=%d is not a multiple of 32 (MXFP4 block)" % (k, p[k]))
    if p["heads"] % p["kv_heads"]:
        errs.append("heads %d not a multiple of kv_heads %d" % (p["heads"], p["kv_heads"]))
    if p["head_dim"] % 2:
        errs.append("head_dim %d is odd" % p["head_dim"])
    if p["topk"] > p["experts"]:
        errs.append("topk %d > experts %d" % (p["topk"], p["experts"]))
    if p["vocab"] < 256 + n_special(p):
        errs.append("vocab %d < 256 bytes + %d specials" % (p["vocab"], n_special(p)))
    if errs:
        raise SystemExit("ossgen: " + "; ".join(errs))


# ---------------------------------------------------------------------------
# The plan: every tensor as (name, dtype, shape, init), in data order.
#   ("normal", mean, std)     BF16 Gaussian
#   ("codes",)                U8 random bytes (two random FP4 codes each)
#   ("scales", center)        U8 center + {-1, 0, 1}
# ---------------------------------------------------------------------------

def mxfp4_center(std):
    """Scale byte giving weights of roughly `std` (random codes have RMS ~2.93)."""
    c = int(round(127 + math.log2(std / 2.93)))
    assert 2 <= c <= 253, "scale byte center out of range"
    return c


def plan_layer(p, il):
    H, nq, nkv, d = p["hidden"], p["heads"], p["kv_heads"], p["head_dim"]
    E, I = p["experts"], p["inter"]
    pre = osslib.PREFIX + "layers.%d." % il
    sa, mo = pre + "self_attn.", pre + "mlp."
    sH = 1.0 / math.sqrt(H)
    qg = p["q_gain"]
    w2_std = p["w2_std"] or 0.25 / math.sqrt(I)
    return [
        (pre + "input_layernorm.weight", BF16, [H], ("normal", 1.0, 0.1)),
        (sa + "q_proj.weight", BF16, [nq * d, H], ("normal", 0.0, qg * sH)),
        (sa + "q_proj.bias", BF16, [nq * d], ("normal", 0.0, 0.5 * qg)),
        (sa + "k_proj.weight", BF16, [nkv * d, H], ("normal", 0.0, qg * sH)),
        (sa + "k_proj.bias", BF16, [nkv * d], ("normal", 0.0, 0.5 * qg)),
        (sa + "v_proj.weight", BF16, [nkv * d, H], ("normal", 0.0, sH)),
        (sa + "v_proj.bias", BF16, [nkv * d], ("normal", 0.0, 0.2)),
        (sa + "o_proj.weight", BF16, [H, nq * d], ("normal", 0.0, 1.0 / math.sqrt(nq * d))),
        (sa + "o_proj.bias", BF16, [H], ("normal", 0.0, 0.1)),
        (sa + "sinks", BF16, [nq], ("normal", p["sink_mean"], p["sink_std"])),
        (pre + "post_attention_layernorm.weight", BF16, [H], ("normal", 1.0, 0.1)),
        (mo + "router.weight", BF16, [E, H], ("normal", 0.0, 2.0 * sH)),
        (mo + "router.bias", BF16, [E], ("normal", 0.0, 0.5)),
        (mo + "experts.gate_up_proj_blocks", U8, [E, 2 * I, H // 32, 16], ("codes",)),
        (mo + "experts.gate_up_proj_scales", U8, [E, 2 * I, H // 32],
         ("scales", mxfp4_center(p["w1_std"]))),
        (mo + "experts.gate_up_proj_bias", BF16, [E, 2 * I], ("normal", 0.0, 1.0)),
        (mo + "experts.down_proj_blocks", U8, [E, H, I // 32, 16], ("codes",)),
        (mo + "experts.down_proj_scales", U8, [E, H, I // 32], ("scales", mxfp4_center(w2_std))),
        (mo + "experts.down_proj_bias", BF16, [E, H], ("normal", 0.0, p["b2_std"])),
    ]


def plan_checkpoint(p):
    """Items that stay together in one shard: the embedding, each layer, the head."""
    H, V = p["hidden"], p["vocab"]
    items = [[(osslib.PREFIX + "embed_tokens.weight", BF16, [V, H], ("normal", 0.0, 1.0))]]
    for il in range(p["layers"]):
        items.append(plan_layer(p, il))
    items.append([(osslib.PREFIX + "norm.weight", BF16, [H], ("normal", 1.0, 0.1)),
                  (osslib.LM_HEAD, BF16, [V, H], ("normal", 0.0, p["lm_gain"] / math.sqrt(H)))])
    return items


# ---------------------------------------------------------------------------
# Filling tensors: each from its own generator (SFC64) seeded by (seed, number).
# ---------------------------------------------------------------------------

def fill(init, dtype, shape, rng):
    """The tensor's bytes, in blocks. Gaussian tensors up to 1 Mi elements take the
    exact distribution; bigger ones, and codes and scales of any size, the random bits
    of stwrite.random_blocks, cheap enough for the 13.8 GB 20b layout."""
    n = int(np.prod(shape, dtype=np.int64))
    small = n <= (1 << 20)
    if small and init[0] not in ("codes", "scales"):
        assert dtype == BF16 and init[0] == "normal"
        yield to_bf16_bits(init[1] + init[2] * rng.standard_normal(n)).tobytes()
        return
    yield from stwrite.random_blocks(init, dtype, n, rng, n if small else stwrite.BLOCK_ELEMS)


def write_checkpoint(out_dir, shards, seed):
    weight_map, total, number = stwrite.write_shards(out_dir, shards, seed,
                                                     osslib.shard_name, fill)
    stwrite.write_index(os.path.join(out_dir, osslib.INDEX_FILE), weight_map, total)
    return total, number


# ---------------------------------------------------------------------------
# The tokenizer: byte-level BPE in the Hugging Face tokenizers format, as released
# (tokenizer.json + tokenizer_config.json + special_tokens_map.json).
# ---------------------------------------------------------------------------

# o200k's pre-tokenizer (tiktoken o200k_base pat_str), as tokenizer.json's Split regex.
O200K_PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])

# The same pattern restricted to ASCII (Python's re has no \p{..}); the training text
# is ASCII, where the two split identically.
_ASCII_PATTERN = re.compile("|".join([
    r"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[0-9]{1,3}",
    r" ?[^\sA-Za-z0-9]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
]))

TRAIN_TEXT = (
    "The engine reads the experts it needs from the disk, one layer at a time, and keeps "
    "the rest of the model in memory. When the memory is small, the store streams the "
    "trunk through a ring and the experts through a cache. It's the same answer at every "
    "budget: the tokens don't change, and the logits keep their bits. We've tested it on "
    "1024 prompts, 2048 tokens each, with 4 threads and with 7. The router picks 4 of 32 "
    "experts for every token; the attention sees 128 tokens back on every other layer.\n"
    "<|start|>user<|message|>What is the weather in Paris?<|end|>\n"
)


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (byte-level BPE's alphabet), and the
    bytes in o200k's rank order of the single-byte tokens (printable ones first)."""
    order = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
             + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    chars = {b: chr(b) for b in order}
    k = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + k)
            order.append(b)
            k += 1
    return chars, order


def learn_merges(n_merges, rng):
    """Up to n_merges merges (pairs of token byte strings), rank order: the most
    frequent adjacent pair within the pre-tokenizer's pieces of TRAIN_TEXT, ties to
    the smallest pair; when the text runs out (the 20b-sized vocabulary), a random
    token followed by a random byte, each making a new token of at most 16 bytes."""
    words = {}
    for piece in _ASCII_PATTERN.findall(TRAIN_TEXT):
        key = tuple(bytes([c]) for c in piece.encode())
        words[key] = words.get(key, 0) + 1
    merges, seen = [], {bytes([b]) for b in range(256)}
    while len(merges) < n_merges:
        counts = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + c
        counts = {ab: c for ab, c in counts.items() if c >= 2 and ab[0] + ab[1] not in seen}
        if not counts:
            break
        best = min(counts, key=lambda ab: (-counts[ab], ab))
        merges.append(best)
        seen.add(best[0] + best[1])
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    tokens = sorted(seen)
    while len(merges) < n_merges:         # a random token + a random byte, <= 16 bytes
        a, b = tokens[int(rng.integers(len(tokens)))], bytes([int(rng.integers(256))])
        if len(a) < 16 and a + b not in seen:
            merges.append((a, b))
            seen.add(a + b)
            tokens.append(a + b)
    return merges


def special_names(p):
    """[(id, content)] of every id from the first special to the end of the vocabulary."""
    s0 = first_special(p)
    named = dict(osslib.HARMONY_SPECIALS)
    return [(s0 + k, named.get(k, "<|reserved_%d|>" % (s0 + k))) for k in range(p["vocab"] - s0)]


def write_tokenizer(out_dir, p, rng):
    chars, order = bytes_to_unicode()

    def show(bs):
        return "".join(chars[c] for c in bs)

    s0 = first_special(p)
    merges = learn_merges(s0 - 256, rng)
    vocab = {show(bytes([b])): i for i, b in enumerate(order)}
    for i, (a, b) in enumerate(merges):
        vocab[show(a + b)] = 256 + i
    assert len(vocab) == s0
    specials = special_names(p)
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in specials]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": O200K_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [[show(a), show(b)] for a, b in merges]},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=2)
        f.write("\n")
    name = dict((k, s) for k, s in osslib.HARMONY_SPECIALS)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False, "special": True}
                                 for i, s in specials},
        "bos_token": name[0], "clean_up_tokenization_spaces": False, "eos_token": name[4],
        "extra_special_tokens": {}, "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 1000000000000000019884624838656, "pad_token": name[1],
        "tokenizer_class": "PreTrainedTokenizerFast"})
    write_json(os.path.join(out_dir, "special_tokens_map.json"),
               {"bos_token": name[0], "eos_token": name[4], "pad_token": name[1]})


# ---------------------------------------------------------------------------

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--preset", choices=sorted(PRESETS) + sorted(RELEASED_SHARDS),
                    help="required unless --trap is given (then: the fixture's base preset)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--trap", choices=osslib.TRAPS)
    ap.add_argument("--check-template", action="store_true",
                    help="fail if a released config file differs from the embedded copy")
    ap.add_argument("--vocab", type=int,
                    help="oa / ob only: another vocabulary size (e.g. o200k's 201088, so that a "
                         "full-size tokenizer.json fits the model: tests/t_tokenizer_parity.sh)")
    ap.add_argument("--layers", type=int, help="20b only: fewer layers")
    ap.add_argument("--experts", type=int, help="20b only: fewer experts per layer")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan (tensors, bytes, shards) and write nothing")
    a = ap.parse_args(argv)
    if a.check_template:
        for name in osslib.RELEASED_CONFIG_TEXT:
            for path in osslib.config_paths(name):
                if os.path.isfile(path):
                    with open(path, encoding="utf-8") as f:
                        text = f.read()
                    if text != osslib.RELEASED_CONFIG_TEXT[name] + "\n":
                        raise SystemExit("ossgen: %s differs from the embedded copy" % path)

    if a.preset is None:
        if not a.trap:
            raise SystemExit("ossgen: --preset is required without --trap")
        a.preset = TRAP_FIXTURES[a.trap][0]
    p = dict(KNOBS)
    if a.preset in RELEASED_SHARDS:
        if a.vocab:
            raise SystemExit("ossgen: --vocab is for the tiny presets (%s has the released one)" % a.preset)
        p.update(released_params(a.preset))
        if a.layers:
            p["layers"] = a.layers
        if a.experts:
            p["experts"] = a.experts
            p["topk"] = min(p["topk"], a.experts)
    else:
        if a.layers or a.experts:
            raise SystemExit("ossgen: --layers / --experts are for --preset 20b or 120b")
        p.update(PRESETS[a.preset])
        if a.vocab:
            p["vocab"] = a.vocab
    if a.trap:
        base, adj = TRAP_FIXTURES[a.trap]
        if a.preset != base:
            print("ossgen: note: trap %s is designed for preset %s" % (a.trap, base),
                  file=sys.stderr)
        p.update(adj)
    if a.seed is not None:
        p["seed"] = a.seed
    check_params(p)

    t0 = time.time()
    cfg = make_config(p)
    if p.get("released") and (a.layers or a.experts) is None:
        assert cfg == osslib.load_released_config(p["released"]), "%s plan != released config" % p["released"]
    shards = split_items(plan_checkpoint(p), p["shards"])
    total = sum(nbytes(t) for s in shards for t in s)
    if a.dry_run:
        for i, s in enumerate(shards):
            print("%s: %d tensors, %d bytes" % (osslib.shard_name(i, len(shards)), len(s),
                                                sum(nbytes(t) for t in s)))
        print("total %d bytes" % total)
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    write_json(os.path.join(a.out_dir, "config.json"), cfg, sort_keys=True)
    write_json(os.path.join(a.out_dir, "generation_config.json"), generation_config(p),
               sort_keys=True)
    write_tokenizer(a.out_dir, p, np.random.default_rng([p["seed"], 77]))
    total, count = write_checkpoint(a.out_dir, shards, p["seed"])
    meta = {"preset": a.preset, "seed": p["seed"], "trap": a.trap,
            "generator": "tools/ossgen.py", "params": p}
    write_json(os.path.join(a.out_dir, "ossgen.json"), meta, sort_keys=True)
    print("ossgen: %s: preset %s%s, %d tensors, %d bytes in %d shards, %.2f s"
          % (a.out_dir, a.preset, " trap " + a.trap if a.trap else "", count, total,
             len(shards), time.time() - t0), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
