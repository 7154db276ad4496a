"""tools/stread.py - what the two float64 references (msref.py for K3, ossref.py for
gpt-oss) share: reading a checkpoint's files as untrusted input.

Owns: config_field() (one typed, required field of a config.json), DTYPE_SIZE,
  Checkpoint (the index and every shard header, checked; has(), raw(), tensor() with
  BF16 / F32 decoded to float64 exactly and U8 kept as uint8).
Idea: parse the checkpoint as the engine must (spec/kimi-k3.md section 1,
  spec/gpt-oss.md section 2): the index names the shards and must name every tensor
  they hold, each in the shard that holds it; a header's length must fit the file,
  every tensor's data_offsets must match its dtype and shape, lie inside the data
  section and not overlap another's; no name may be in two shards. Every error names
  the file and the tensor. The writers are in stwrite.py, used by the generators
  only: a generator and a reference never share a reader or a writer (so a layout
  bug cannot hide by being made twice).
Does not: know a model's tensor names or which config fields it has, decode MXFP4
  (each reference does, on its own), write anything.
"""

import json
import os

import numpy as np

DTYPE_SIZE = {"BF16": 2, "F32": 4, "U8": 1}


def config_field(d, key, kind):
    """d[key], required (missing -> KeyError, never a default) and of kind "int",
    "float" (an int is accepted), "bool" or "list" (of ints); bools are not numbers."""
    v = d[key]
    ok = {"int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, (int, float)) and not isinstance(v, bool),
          "bool": isinstance(v, bool),
          "list": isinstance(v, list) and all(isinstance(x, int) for x in v)}[kind]
    if not ok:
        raise TypeError("config field %s = %r is not %s" % (key, v, kind))
    return v


class Checkpoint:
    """All tensors of a model directory: the index names the shards, each shard's
    header names its tensors. Headers are untrusted input: offsets are checked
    against the file and against each other."""

    def __init__(self, model_dir, index_file):
        self.dir = model_dir
        self.where = {}                        # name -> (shard file, dtype, shape, begin, end)
        self.maps = {}
        with open(os.path.join(model_dir, index_file)) as f:
            weight_map = json.load(f)["weight_map"]
        for fname in sorted(set(weight_map.values())):
            self._read_header(fname)
        for name, fname in weight_map.items():
            if name not in self.where or self.where[name][0] != fname:
                raise ValueError("index names %s in %s, which does not hold it" % (name, fname))
        for name in sorted(set(self.where) - set(weight_map)):
            raise ValueError("%s: tensor %s is not named by the index %s"
                             % (self.where[name][0], name, index_file))

    def _read_header(self, fname):
        path = os.path.join(self.dir, fname)
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if n + 8 > size:
                raise ValueError("%s: header length %d past the end of the file" % (fname, n))
            header = json.loads(f.read(n))
        data_start, data_bytes = 8 + n, size - 8 - n
        spans = []
        for name, t in header.items():
            if name == "__metadata__":
                continue
            if name in self.where:
                raise ValueError("%s: tensor %s also in %s" % (fname, name, self.where[name][0]))
            begin, end = t["data_offsets"]
            numel = int(np.prod(t["shape"], dtype=np.int64))
            if end - begin != numel * DTYPE_SIZE[t["dtype"]] or not 0 <= begin <= end <= data_bytes:
                raise ValueError("%s: tensor %s: bad data_offsets %s" % (fname, name, t["data_offsets"]))
            spans.append((begin, end, name))
            self.where[name] = (fname, t["dtype"], tuple(t["shape"]), data_start + begin, data_start + end)
        spans.sort()
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise ValueError("%s: tensors %s and %s: overlapping data" % (fname, n0, n1))

    def has(self, name):
        return name in self.where

    def raw(self, name):
        """The tensor's bytes as a uint8 array, and its dtype and shape."""
        if name not in self.where:
            raise KeyError("tensor %s is not in the checkpoint" % name)
        fname, dtype, shape, b, e = self.where[name]
        if fname not in self.maps:
            self.maps[fname] = np.memmap(os.path.join(self.dir, fname), dtype=np.uint8, mode="r")
        return np.asarray(self.maps[fname][b:e]), dtype, shape

    def tensor(self, name, shape=None, dtype=None):
        """BF16 / F32 as float64 (exact), U8 as uint8; `shape` and `dtype` are checked
        if given."""
        data, dt, sh = self.raw(name)
        if (shape is not None and tuple(shape) != sh) or (dtype is not None and dt != dtype):
            raise ValueError("tensor %s in %s is %s %s, expected %s %s"
                             % (name, self.where[name][0], dt, list(sh), dtype or dt,
                                list(sh if shape is None else shape)))
        if dt == "BF16":           # bf16 = the top half of a float32
            bits = data.view("<u2").astype(np.uint32) << 16
            return bits.view(np.float32).astype(np.float64).reshape(sh)
        if dt == "F32":
            return data.view("<f4").astype(np.float64).reshape(sh)
        return np.array(data, dtype=np.uint8).reshape(sh)
