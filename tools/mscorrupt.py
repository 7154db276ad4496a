#!/usr/bin/env python3
"""tools/mscorrupt.py - a corpus of corrupted checkpoints from one valid one.

Owns: the corruption cases of the hostile-input test (tests/t_corrupt.sh) and
  the manifest that says, per case, what the engine's one-line refusal must name.
Idea: every case is a directory OUT/NAME holding a complete checkpoint in which
  exactly one thing is wrong. Files a case does not change are hard links to the
  source (a copy where linking is impossible); a changed file is written fresh
  (the link is removed first, so the source is never modified through it).
  Shard headers are edited as JSON and written back space-padded to 8 bytes in
  front of the unchanged data section, so data_offsets (relative to the data
  section) keep their meaning.

      shard:  [u64 LE header length N][N bytes JSON, space padded][data section]

  OUT/MANIFEST.json lists the cases in order:
      {"name": ..., "what": one line, "files": file names of which the message
       must contain one, "tensors": tensor names of which it must contain one
       (empty when no tensor is involved),
       "wording": a POSIX extended regular expression (grep -E) for the
       expected-vs-found part}
Invariants: the source directory is only read; every case differs from the
  source in exactly the way its "what" says; the output is deterministic.
Does not: run the engine (t_corrupt.sh does), decide exit codes.

Usage: mscorrupt.py SRC_DIR OUT_DIR [--list]
  SRC_DIR must be a valid checkpoint from tools/msgen.py (preset a is what the
  test uses; any preset works as long as the names below exist in it).
"""

import argparse
import json
import os
import shutil
import struct
import sys

INDEX = "model.safetensors.index.json"
CONFIG = "config.json"
PFX = "language_model.model."


# ---------------------------------------------------------------------------
# Reading and writing the pieces of a checkpoint.
# ---------------------------------------------------------------------------

def read_shard(path):
    """(header dict in file order, data-section bytes)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n].decode("utf-8"))
    return hdr, raw[8 + n:]


def shard_bytes(hdr, data):
    text = json.dumps(hdr, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + data


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Case:
    """One case directory: linked from the source, edited file by file."""

    def __init__(self, src, out, name):
        self.src, self.dir, self.name = src, os.path.join(out, name), name
        os.makedirs(self.dir)
        for f in sorted(os.listdir(src)):
            s = os.path.join(src, f)
            if not os.path.isfile(s):
                continue
            d = os.path.join(self.dir, f)
            try:
                os.link(s, d)
            except OSError:
                shutil.copyfile(s, d)

    def path(self, f):
        return os.path.join(self.dir, f)

    def write(self, f, data):
        """Replace file f (never writing through a hard link)."""
        p = self.path(f)
        if os.path.lexists(p):
            os.unlink(p)
        with open(p, "wb") as fh:
            fh.write(data)

    def remove(self, f):
        os.unlink(self.path(f))

    def shard(self, f):
        return read_shard(self.path(f))

    def put_shard(self, f, hdr, data):
        self.write(f, shard_bytes(hdr, data))

    def index(self):
        with open(self.path(INDEX)) as fh:
            return json.load(fh)

    def put_index(self, idx):
        self.write(INDEX, (json.dumps(idx, indent=2) + "\n").encode())

    def config(self):
        with open(self.path(CONFIG)) as fh:
            return json.load(fh)

    def put_config(self, cfg):
        self.write(CONFIG, (json.dumps(cfg, indent=2) + "\n").encode())


class Source:
    """What the cases need to know about the valid checkpoint."""

    def __init__(self, src):
        self.dir = src
        with open(os.path.join(src, INDEX)) as fh:
            self.weight_map = json.load(fh)["weight_map"]
        self.shards = sorted(set(self.weight_map.values()))
        self.headers = {}
        for s in self.shards:
            hdr, data = read_shard(os.path.join(src, s))
            self.headers[s] = (hdr, len(data))

    def shard_of(self, name):
        if name not in self.weight_map:
            raise SystemExit("mscorrupt: %s has no tensor %s" % (self.dir, name))
        return self.weight_map[name]

    def entry(self, name):
        return self.headers[self.shard_of(name)][0][name]

    def by_offset(self, shard):
        """Tensor names of a shard in data order."""
        hdr = self.headers[shard][0]
        names = [k for k in hdr if k != "__metadata__"]
        return sorted(names, key=lambda k: hdr[k]["data_offsets"])


# ---------------------------------------------------------------------------
# The cases. Each returns (what, file or [files], tensor or [tensors] or None,
# wording).
# ---------------------------------------------------------------------------

NORM = PFX + "layers.1.input_layernorm.weight"          # BF16 [hidden], KDA+MoE layer
FINAL_NORM = PFX + "norm.weight"                         # BF16 [hidden]
B_PROJ = PFX + "layers.1.self_attn.b_proj.weight"        # BF16 [kda_heads, hidden]
Q_PROJ = PFX + "layers.2.self_attn.q_proj.weight"        # BF16 [P, hidden]
MISSING = PFX + "layers.2.post_attention_layernorm.weight"


def c_truncated_shard(src, c):
    """The middle shard cut in half, as an interrupted download leaves it: every
    tensor whose data ends past the cut is outside the (shorter) data section;
    the message may name any of them."""
    f = src.shards[len(src.shards) // 2]
    hdr, data_len = src.headers[f]
    with open(src.dir + "/" + f, "rb") as fh:
        raw = fh.read()
    head = len(raw) - data_len
    cut = head + data_len // 2
    cut_off = [k for k in src.by_offset(f) if head + hdr[k]["data_offsets"][1] > cut]
    assert cut_off
    c.write(f, raw[:cut])
    return ("shard truncated to %d of %d bytes (%d tensors cut off)" % (cut, len(raw), len(cut_off)),
            f, cut_off, r"expected|beyond the data section")


def c_header_len_beyond_file(src, c):
    """The 8-byte header length says more than the file holds."""
    f = src.shards[0]
    with open(src.dir + "/" + f, "rb") as fh:
        raw = fh.read()
    bad = len(raw) + 4096
    c.write(f, struct.pack("<Q", bad) + raw[8:])
    return ("header length %d in a file of %d bytes" % (bad, len(raw)), f, None,
            r"expected|needs [0-9]+ bytes but the file has [0-9]+")


def c_header_not_json(src, c):
    """A header whose JSON text is cut off (braces never closed)."""
    f = src.shards[1]
    with open(src.dir + "/" + f, "rb") as fh:
        raw = fh.read()
    n = struct.unpack("<Q", raw[:8])[0]
    text = bytearray(raw[8:8 + n])
    text[n // 2:] = b" " * (n - n // 2)
    c.write(f, raw[:8] + bytes(text) + raw[8 + n:])
    return ("header JSON blanked from byte %d on" % (n // 2), f, None,
            r"expected|not valid JSON")


def c_offsets_overlap(src, c):
    """A tensor moved back by half its size: it overlaps its predecessor."""
    f = src.shard_of(Q_PROJ)
    hdr, data = c.shard(f)
    b, e = hdr[Q_PROJ]["data_offsets"]
    assert b > 0, "q_proj is not first in its shard"
    h = (e - b) // 2
    hdr[Q_PROJ]["data_offsets"] = [b - h, e - h]
    c.put_shard(f, hdr, data)
    return ("data_offsets of %s moved from [%d, %d) to [%d, %d)" % (Q_PROJ, b, e, b - h, e - h),
            f, Q_PROJ, r"expected|overlap")


def c_offsets_outside(src, c):
    """A tensor's data_offsets past the end of the data section."""
    f = src.shard_of(Q_PROJ)
    hdr, data = c.shard(f)
    b, e = hdr[Q_PROJ]["data_offsets"]
    nb, ne = len(data), len(data) + (e - b)
    hdr[Q_PROJ]["data_offsets"] = [nb, ne]
    c.put_shard(f, hdr, data)
    return ("data_offsets of %s set to [%d, %d), data section is %d bytes" % (Q_PROJ, nb, ne, nb),
            f, Q_PROJ, r"expected|beyond the data section")


def c_dtype_vs_span(src, c):
    """dtype BF16 -> F32: shape and offsets unchanged, the span is half the size."""
    f = src.shard_of(Q_PROJ)
    hdr, data = c.shard(f)
    assert hdr[Q_PROJ]["dtype"] == "BF16"
    hdr[Q_PROJ]["dtype"] = "F32"
    c.put_shard(f, hdr, data)
    return ("dtype of %s changed BF16 -> F32 (span unchanged)" % Q_PROJ, f, Q_PROJ,
            r"expected|hold [0-9]+ bytes but .* needs [0-9]+")


def c_shape_vs_span(src, c):
    """First dim doubled: the shape needs twice the bytes the offsets hold."""
    f = src.shard_of(Q_PROJ)
    hdr, data = c.shard(f)
    shape = list(hdr[Q_PROJ]["shape"])
    shape[0] *= 2
    hdr[Q_PROJ]["shape"] = shape
    c.put_shard(f, hdr, data)
    return ("shape of %s changed to %s (span unchanged)" % (Q_PROJ, shape), f, Q_PROJ,
            r"expected|hold [0-9]+ bytes but .* needs [0-9]+")


def c_shape_vs_config(src, c):
    """b_proj [heads, hidden] written as [hidden, heads]: bytes agree, the config does not."""
    f = src.shard_of(B_PROJ)
    hdr, data = c.shard(f)
    shape = list(hdr[B_PROJ]["shape"])
    assert len(shape) == 2 and shape[0] != shape[1]
    hdr[B_PROJ]["shape"] = [shape[1], shape[0]]
    c.put_shard(f, hdr, data)
    return ("shape of %s transposed to %s" % (B_PROJ, hdr[B_PROJ]["shape"]), f, B_PROJ,
            r"expected .*, found")


def c_dtype_vs_config(src, c):
    """BF16 relabelled F16 (same size, so the span agrees; the engine wants BF16)."""
    f = src.shard_of(Q_PROJ)
    hdr, data = c.shard(f)
    hdr[Q_PROJ]["dtype"] = "F16"
    c.put_shard(f, hdr, data)
    return ("dtype of %s changed BF16 -> F16" % Q_PROJ, f, Q_PROJ, r"expected .*, found")


def c_unknown_dtype(src, c):
    f = src.shard_of(Q_PROJ)
    hdr, data = c.shard(f)
    hdr[Q_PROJ]["dtype"] = "BF17"
    c.put_shard(f, hdr, data)
    return ("dtype of %s changed to BF17" % Q_PROJ, f, Q_PROJ, r"expected|unknown dtype")


def c_tensor_missing(src, c):
    """A tensor the model needs is in neither its shard nor the index."""
    f = src.shard_of(MISSING)
    hdr, data = c.shard(f)
    del hdr[MISSING]
    c.put_shard(f, hdr, data)
    idx = c.index()
    del idx["weight_map"][MISSING]
    c.put_index(idx)
    # which file to blame is the engine's choice: the index (which should have
    # listed it) or the shard that holds the rest of the layer
    return ("%s removed from %s and the index" % (MISSING, f), [INDEX, f], MISSING,
            r"expected")


def c_index_names_absent_tensor(src, c):
    """The index maps a tensor to a shard whose header lacks it."""
    f = src.shard_of(MISSING)
    hdr, data = c.shard(f)
    del hdr[MISSING]
    c.put_shard(f, hdr, data)
    return ("%s removed from %s, still in the index" % (MISSING, f), INDEX, MISSING,
            r"expected|has no such tensor")


def c_same_name_two_shards(src, c):
    """A tensor of the first shard also appears in the second (appended data)."""
    f1, f2 = src.shards[0], src.shards[1]
    name = FINAL_NORM
    assert src.shard_of(name) == f1
    ent = src.entry(name)
    hdr, data = c.shard(f2)
    b, e = ent["data_offsets"]
    with open(src.dir + "/" + f1, "rb") as fh:
        raw = fh.read()
    n1 = struct.unpack("<Q", raw[:8])[0]
    payload = raw[8 + n1 + b:8 + n1 + e]
    hdr[name] = {"dtype": ent["dtype"], "shape": ent["shape"],
                 "data_offsets": [len(data), len(data) + len(payload)]}
    c.put_shard(f2, hdr, data + payload)
    return ("%s in %s and %s" % (name, f1, f2), f2, name, r"expected|in both")


def c_index_missing_shard(src, c):
    """The index maps one tensor to a shard file that does not exist."""
    idx = c.index()
    n = len(src.shards)
    ghost = "model-%05d-of-%05d.safetensors" % (n + 1, n)
    idx["weight_map"][Q_PROJ] = ghost
    c.put_index(idx)
    return ("index maps %s to %s, which does not exist" % (Q_PROJ, ghost), ghost, Q_PROJ,
            r"expected|No such file|does not exist|missing")


def c_shard_file_deleted(src, c):
    """A shard the index names is gone (many tensors: none need be named)."""
    f = src.shards[-1]
    c.remove(f)
    return ("%s deleted" % f, f, None, r"expected|No such file|does not exist|missing")


def put_bf16(c, name, element, bits, src):
    f = src.shard_of(name)
    hdr, data = c.shard(f)
    ent = hdr[name]
    assert ent["dtype"] == "BF16" and element < numel(ent["shape"])
    at = ent["data_offsets"][0] + 2 * element
    data = data[:at] + struct.pack("<H", bits) + data[at + 2:]
    c.put_shard(f, hdr, data)
    return f


def c_nan_in_norm(src, c):
    f = put_bf16(c, NORM, 5, 0x7FC0, src)
    return ("%s element 5 = NaN" % NORM, f, NORM, r"expected finite")


def c_inf_in_norm(src, c):
    f = put_bf16(c, FINAL_NORM, 0, 0xFF80, src)
    return ("%s element 0 = -inf" % FINAL_NORM, f, FINAL_NORM, r"expected finite")


def c_config_wrong_type(src, c):
    cfg = c.config()
    cfg["text_config"]["hidden_size"] = str(cfg["text_config"]["hidden_size"])
    c.put_config(cfg)
    return ("text_config.hidden_size is a string", CONFIG, None,
            r"hidden_size: expected integer, found string")


def c_config_wrong_type_list(src, c):
    cfg = c.config()
    la = cfg["text_config"]["linear_attn_config"]
    la["full_attn_layers"] = ",".join(str(x) for x in la["full_attn_layers"])
    c.put_config(cfg)
    return ("linear_attn_config.full_attn_layers is a string", CONFIG, None,
            r"full_attn_layers: expected array, found string")


def c_config_missing_field(src, c):
    cfg = c.config()
    del cfg["text_config"]["kv_lora_rank"]
    c.put_config(cfg)
    return ("text_config.kv_lora_rank deleted", CONFIG, None, r"kv_lora_rank (missing|expected)")


CASES = [
    ("truncated_shard", c_truncated_shard),
    ("header_len_beyond_file", c_header_len_beyond_file),
    ("header_not_json", c_header_not_json),
    ("offsets_overlap", c_offsets_overlap),
    ("offsets_outside_data", c_offsets_outside),
    ("dtype_vs_span", c_dtype_vs_span),
    ("shape_vs_span", c_shape_vs_span),
    ("shape_vs_config", c_shape_vs_config),
    ("dtype_vs_config", c_dtype_vs_config),
    ("unknown_dtype", c_unknown_dtype),
    ("tensor_missing", c_tensor_missing),
    ("index_names_absent_tensor", c_index_names_absent_tensor),
    ("same_name_two_shards", c_same_name_two_shards),
    ("index_missing_shard", c_index_missing_shard),
    ("shard_file_deleted", c_shard_file_deleted),
    ("nan_in_norm", c_nan_in_norm),
    ("inf_in_norm", c_inf_in_norm),
    ("config_wrong_type", c_config_wrong_type),
    ("config_wrong_type_list", c_config_wrong_type_list),
    ("config_missing_field", c_config_missing_field),
]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    a = ap.parse_args(argv)
    if a.list:
        for name, fn in CASES:
            print("%-28s %s" % (name, fn.__doc__.split("\n")[0] if fn.__doc__ else ""))
        return 0
    src = Source(a.src_dir)
    if os.path.exists(a.out_dir):
        shutil.rmtree(a.out_dir)
    os.makedirs(a.out_dir)
    manifest = []
    for name, fn in CASES:
        c = Case(a.src_dir, a.out_dir, name)
        what, f, tensor, wording = fn(src, c)
        files = f if isinstance(f, list) else [f]
        tensors = tensor if isinstance(tensor, list) else [tensor] if tensor else []
        manifest.append({"name": name, "what": what, "files": files, "tensors": tensors,
                         "wording": wording})
    with open(os.path.join(a.out_dir, "MANIFEST.json"), "w") as fh:
        json.dump(manifest, fh, indent=2)
        fh.write("\n")
    print("mscorrupt: %d cases in %s" % (len(manifest), a.out_dir), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
