"""tools/goldens.py - what the float64 references (msref.py for K3, ossref.py for gpt-oss)
share: the greedy and teacher-forced drivers over a reference's one-token step, their
self-check, and the golden files tests/test_golden.c reads.

Owns: the golden files of a reference run, in OUT:
  golden.json       prompt_ids, greedy_ids, tf_ids, tf_argmax, n_vocab, trap, logit_scale,
                    the top-2 logit gaps of every greedy step and teacher-forced position
                    and their minima (how close an argmax comes to a tie)
  tf_logits.f32     [len(tf_ids), V] float32 LE, the logits after each teacher-forced id
  gen_logits0.f32   [V], the logits after the prompt
  and the command line every reference takes (MODEL_DIR --ids --gen --tf-ids --out
  --trap --check --stats), and record_stat() for --stats.
Idea: a reference is a model object, a fresh-sequence constructor and a step function
  step(session, id) -> logits [V]; everything here is written once against those.
Does not: read checkpoints or compute a layer (each reference does, on its own).
"""

import argparse
import json
import math
import os
import sys

import numpy as np


def argmax_low(logits):
    """Greedy choice: the largest logit, ties to the lower id (np.argmax keeps the first)."""
    return int(np.argmax(logits))


def top2_gap(logits):
    s = np.sort(logits)
    return float(s[-1] - s[-2])


def record_stat(stats, key, value, how="max"):
    """Record a statistic for --stats into the dict stats (None: not asked for); value
    may be a function (called only then). how: "max", "add" or "set" (distinct values)."""
    if stats is None:
        return
    if callable(value):
        value = value()
    if how == "max":
        stats[key] = max(stats.get(key, -math.inf), value)
    elif how == "add":
        stats[key] = stats.get(key, 0) + value
    elif how == "set":
        stats.setdefault(key, set()).add(value)


def parse_ids(s):
    return [int(x) for x in s.split(",") if x.strip()] if s else []


def teacher_force(new_session, step, model, ids):
    """Logits after each of ids, fed from the start of a fresh sequence: [len(ids), V]."""
    sess = new_session(model)
    return np.stack([step(sess, t) for t in ids])


def greedy(new_session, step, model, prompt, n_gen):
    """(the n_gen greedy ids, the logits that chose each of them [n_gen, V]; row 0
    are the logits after the prompt)."""
    sess = new_session(model)
    for t in prompt:
        logits = step(sess, t)
    out, chose = [], []
    for i in range(n_gen):
        out.append(argmax_low(logits))
        chose.append(logits)
        if i + 1 < n_gen:
            logits = step(sess, out[-1])
    return out, np.stack(chose) if chose else logits[None, :]


def self_check(new_session, step, model, prompt, gen_ids, logits0, tf_ids, tf_logits):
    """The reference's own invariants; returns a list of failures."""
    bad = []
    if gen_ids:
        seq = prompt + gen_ids[:-1]
        lg = teacher_force(new_session, step, model, seq)
        am = [argmax_low(r) for r in lg[len(prompt) - 1:]]
        if am != gen_ids:
            bad.append("greedy ids %s != teacher-forced argmax %s" % (gen_ids, am))
        if not np.array_equal(lg[len(prompt) - 1], logits0):
            bad.append("logits after the prompt differ between greedy and teacher forcing")
    if tf_ids:
        again = teacher_force(new_session, step, model, tf_ids)
        if not np.array_equal(again, tf_logits):
            bad.append("two teacher-forcing runs differ")
        for t in sorted({0, len(tf_ids) // 2, len(tf_ids) - 1}):
            fresh = teacher_force(new_session, step, model, tf_ids[:t + 1])[-1]
            if not np.array_equal(fresh, tf_logits[t]):
                bad.append("position %d: from scratch != incremental" % t)
    return bad


def main(argv, name, doc, traps, open_model, new_session, step, configure, print_stats):
    """A reference's command line. configure(trap, stats) sets the reference's trap and
    statistics dictionary (None: off) before the model is read; print_stats(stats) prints
    them at the end."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--ids", required=True, help="prompt ids, comma separated")
    ap.add_argument("--gen", type=int, default=0, help="greedy tokens to generate")
    ap.add_argument("--tf-ids", default="", help="ids for teacher forcing")
    ap.add_argument("--out", required=True)
    ap.add_argument("--trap", choices=traps)
    ap.add_argument("--check", action="store_true", help="verify the reference's invariants")
    ap.add_argument("--stats", action="store_true", help="print activation statistics")
    a = ap.parse_args(argv)
    stats = {} if a.stats else None
    configure(a.trap, stats)

    model = open_model(a.model_dir)
    V = model.cfg.vocab_size
    prompt, tf_ids = parse_ids(a.ids), parse_ids(a.tf_ids)
    if not prompt or any(not 0 <= t < V for t in prompt + tf_ids):
        raise SystemExit("%s: ids must be non-empty and in [0, %d)" % (name, V))
    gen_ids, gen_logits = greedy(new_session, step, model, prompt, a.gen)
    logits0 = gen_logits[0]
    tf_logits = teacher_force(new_session, step, model, tf_ids) if tf_ids else np.zeros((0, V))
    if not np.all(np.isfinite(logits0)) or not np.all(np.isfinite(tf_logits)):
        raise SystemExit("%s: non-finite logits" % name)

    os.makedirs(a.out, exist_ok=True)
    tf_logits.astype("<f4").tofile(os.path.join(a.out, "tf_logits.f32"))
    logits0.astype("<f4").tofile(os.path.join(a.out, "gen_logits0.f32"))
    scale = max([float(np.max(np.abs(logits0)))] +
                ([float(np.max(np.abs(tf_logits)))] if tf_ids else []))
    golden = {
        "prompt_ids": prompt, "greedy_ids": gen_ids,
        "tf_ids": tf_ids, "tf_argmax": [argmax_low(r) for r in tf_logits],
        "n_vocab": V, "trap": a.trap, "logit_scale": scale,
        # smallest gap between the best and second-best logit over the greedy steps and
        # the teacher-forced positions: how close an argmax comes to a tie
        "greedy_top2_gaps": [top2_gap(r) for r in gen_logits[:len(gen_ids)]],
        "tf_top2_gaps": [top2_gap(r) for r in tf_logits],
        "greedy_top2_gap_min": min((top2_gap(r) for r in gen_logits[:len(gen_ids)]), default=None),
        "tf_top2_gap_min": min((top2_gap(r) for r in tf_logits), default=None),
    }
    with open(os.path.join(a.out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    if stats is not None:
        print_stats(stats)
    if a.check:
        bad = self_check(new_session, step, model, prompt, gen_ids, logits0, tf_ids, tf_logits)
        for b in bad:
            print("%s: CHECK FAILED: %s" % (name, b), file=sys.stderr)
        if bad:
            return 1
        print("%s: self-check passed" % name, file=sys.stderr)
    return 0
