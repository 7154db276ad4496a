#!/usr/bin/env python3
"""tools/perplexity.py - the reference perplexity of a token sequence (tools/msref.py).

Owns: the float64 perplexity that `moestream perplexity` must reproduce.
Idea: feed ids[0..N-2] through msref.teacher_force from a fresh sequence; the mean
  negative log-likelihood of ids[1..N-1] given the tokens before them, log-softmax in
  float64; perplexity = exp(mean NLL). Same definition and output shape as the engine's
  `moestream perplexity MODEL_DIR --file F`.
Does not: tokenize (give it the engine's ids: `moestream tokenize MODEL_DIR < F`).

Usage: perplexity.py MODEL_DIR --ids-file PATH|- [--max-tokens N]
       (PATH holds a JSON array of ids, as `moestream tokenize` prints)
Prints: {"n_tokens": N, "nll": x, "perplexity": y}
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import msref  # noqa: E402


def perplexity(model, ids):
    """(mean NLL of ids[1:] given their prefixes, perplexity), float64."""
    logits = msref.teacher_force(model, ids[:-1])
    nll = 0.0
    for row, nxt in zip(logits, ids[1:]):
        m = np.max(row)
        nll += -(row[nxt] - m - math.log(np.sum(np.exp(row - m))))
    mean = nll / (len(ids) - 1)
    return mean, math.exp(mean)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--ids-file", required=True, help="JSON array of ids; - for stdin")
    ap.add_argument("--max-tokens", type=int, default=0, help="use only the first N ids")
    a = ap.parse_args(argv)
    f = sys.stdin if a.ids_file == "-" else open(a.ids_file)
    ids = json.load(f)
    if f is not sys.stdin:
        f.close()
    if a.max_tokens > 1:
        ids = ids[:a.max_tokens]
    model = msref.Model(a.model_dir)
    if len(ids) < 2 or any(not isinstance(t, int) or not 0 <= t < model.cfg.vocab_size for t in ids):
        raise SystemExit("perplexity: need at least 2 ids in [0, %d)" % model.cfg.vocab_size)
    nll, ppl = perplexity(model, ids)
    print(json.dumps({"n_tokens": len(ids), "nll": round(nll, 10), "perplexity": round(ppl, 10)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
