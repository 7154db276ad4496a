"""tools/stwrite.py - what the two generators (msgen.py for K3, ossgen.py for gpt-oss)
share: writing a planned checkpoint as safetensors shards and their index.

Owns: the dtype names and sizes (BF16, F32, U8), nbytes(), split_items() (a plan's
  items over N shards, balanced by bytes), to_bf16_bits() (round to nearest even),
  random_blocks() (the cheap random-bits path for big tensors), shard_header() (sorted
  JSON header, "__metadata__" first, space-padded to 8, data_offsets without gaps),
  write_shards() (each tensor from its own SFC64 stream seeded by (seed, tensor
  number), written through a .tmp file), write_index() and write_json().
Idea: a plan is a list of items, an item a list of tensors (name, dtype, shape, init)
  that must stay in one shard; the generator owns its plan, its shard names and how
  a small tensor is filled exactly, this module owns the bytes on disk. The readers
  are in stread.py, used by the references only: a generator and a reference never
  share a reader or a writer (so a layout bug cannot hide by being made twice).
Does not: read checkpoints, know a model's tensor names or config, choose shard file
  names (the caller passes shard_name).
"""

import json
import math
import os

import numpy as np

BF16, F32, U8 = "BF16", "F32", "U8"
DTYPE_BYTES = {BF16: 2, F32: 4, U8: 1}

BLOCK_ELEMS = 8 << 20        # big tensors are filled at most this many elements at a time


def nbytes(t):
    """Data bytes of a planned tensor (name, dtype, shape, init)."""
    return DTYPE_BYTES[t[1]] * int(np.prod(t[2], dtype=np.int64))


def split_items(items, n_shards):
    """Contiguous split of the items over n_shards, balanced by bytes; every shard
    gets at least one item, so the first item lands in the first shard and the last
    in the last."""
    sizes = [sum(nbytes(t) for t in it) for it in items]
    n_shards = max(1, min(n_shards, len(items)))
    total = sum(sizes)
    shards, cur, acc = [], [], 0
    for i, (it, sz) in enumerate(zip(items, sizes)):
        cur.append(it)
        acc += sz
        left_items, left_shards = len(items) - i - 1, n_shards - len(shards) - 1
        if left_shards > 0 and (acc >= total * (len(shards) + 1) / n_shards
                                or left_items == left_shards):
            shards.append([t for x in cur for t in x])
            cur = []
    shards.append([t for x in cur for t in x])
    assert len(shards) == n_shards and all(shards)
    return shards


def to_bf16_bits(x):
    """float -> BF16 bits: float32, then round to nearest even on the low 16 bits."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def random_blocks(init, dtype, n, rng, step=BLOCK_ELEMS):
    """The bytes of n elements in blocks of `step`, cheap enough for full-width layouts:
      ("codes",)                 random bytes;
      ("scales", center[, n255]) center + {-1, 0, 1}, then n255 entries of the first
                                 block set to 255;
      ("normal", 0.0, std)       BF16 random bits: random sign and mantissa, exponent
                                 floor(log2 std) or one less, i.e. |x| in [std/2, 2 std).
    All block arithmetic stays in uint16 / uint8, in place."""
    kind = init[0]
    for b in range(0, n, step):
        m = min(step, n - b)
        if kind == "codes":
            yield rng.bit_generator.random_raw(m // 8 + 1).view(np.uint8)[:m].tobytes()
        elif kind == "scales":
            s = rng.integers(init[1] - 1, init[1] + 2, m, dtype=np.uint8)
            n255 = init[2] if len(init) > 2 else 0
            if n255 and b == 0:
                s[rng.choice(m, size=min(m, n255), replace=False)] = 255
            yield s.tobytes()
        else:
            assert dtype == BF16 and kind == "normal" and init[1] == 0.0
            e = 127 + int(math.floor(math.log2(init[2])))
            assert 2 <= e <= 254
            r = rng.bit_generator.random_raw(m // 4 + 1).view("<u2")[:m]
            bits = np.bitwise_and(r, np.uint16(0x807F))      # sign, mantissa
            bits |= np.uint16(e << 7)                          # exponent e ...
            bits -= np.bitwise_and(r, np.uint16(0x0080))      # ... or e - 1
            yield bits.tobytes()


def shard_header(tensors, extra_pad=0):
    """JSON header bytes (space-padded to a multiple of 8, then extra_pad more spaces)
    and the data size."""
    hdr, off = {}, 0
    for t in tensors:
        nb = nbytes(t)
        hdr[t[0]] = {"dtype": t[1], "shape": list(t[2]), "data_offsets": [off, off + nb]}
        off += nb
    keyed = {"__metadata__": {"format": "pt"}}
    for k in sorted(hdr):
        keyed[k] = hdr[k]
    text = json.dumps(keyed, separators=(",", ":")).encode()
    return text + b" " * ((-len(text)) % 8 + extra_pad), off


def write_shards(out_dir, shards, seed, shard_name, fill, header_pad=0):
    """Write every shard (shard_name(i, n) for i = 0 .. n-1); fill(init, dtype, shape,
    rng) yields a tensor's bytes. Returns (weight_map, total data bytes, tensors)."""
    os.makedirs(out_dir, exist_ok=True)
    n = len(shards)
    weight_map, total, number = {}, 0, 0
    for i, tensors in enumerate(shards):
        fname = shard_name(i, n)
        header, _ = shard_header(tensors, header_pad)
        tmp = os.path.join(out_dir, fname + ".tmp")
        with open(tmp, "wb") as f:
            f.write(len(header).to_bytes(8, "little"))
            f.write(header)
            for t in tensors:
                rng = np.random.Generator(np.random.SFC64([seed, number]))
                number += 1
                written = 0
                for block in fill(t[3], t[1], t[2], rng):
                    f.write(block)
                    written += len(block)
                assert written == nbytes(t), t[0]
                weight_map[t[0]] = fname
                total += written
        os.replace(tmp, os.path.join(out_dir, fname))
    return weight_map, total, number


def write_json(path, obj, **kw):
    """obj as JSON, indented by 2, with a final newline."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, **kw)
        f.write("\n")


def write_index(path, weight_map, total):
    """The index file: total_size and the weight_map with sorted keys."""
    write_json(path, {"metadata": {"total_size": total},
                      "weight_map": {k: weight_map[k] for k in sorted(weight_map)}})
