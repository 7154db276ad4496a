#!/usr/bin/python3
"""bench/fork_corpus.py - a --draft-corpus whose index offers two continuations.

    bench/fork_corpus.py MOESTREAM MODEL_DIR ANSWER.json OUT.txt [--wrong]

ANSWER.json is `moestream run MODEL_DIR ... --json`'s output (prompt_ids and
generated_ids). For every position j >= 8 of prompt + answer the corpus has
five lines: the 8 ids before it followed by a wrong id (" the", else " of")
three times and by the answer's id twice (--wrong: by another wrong id, " and",
else " of"), each line ended by a newline, written as the model's text
(`moestream tokenize --decode`). A chain drafts the more frequent, wrong
continuation; `--draft-tree 1` can verify the right one beside it
(docs/PERFORMANCE.md, tests/t_spec.sh). Re-tokenized, the text gives back
nearly all of these forks (a line's first id may merge with the newline).
"""
import json
import subprocess
import sys


def tok(binp, model, text, decode=False):
    r = subprocess.run([binp, "tokenize", model, "--quiet"] + (["--decode"] if decode else []), input=text,
                       capture_output=True, text=True, check=True).stdout
    return r.rstrip("\n") if decode else json.loads(r)


def main(argv):
    if len(argv) not in (5, 6) or (len(argv) == 6 and argv[5] != "--wrong"):
        sys.stderr.write(__doc__)
        return 2
    binp, model, ans, out = argv[1:5]
    wrong_only = len(argv) == 6
    d = json.load(open(ans))
    ids_all = d["prompt_ids"] + d["generated_ids"]
    the, and_, of = (tok(binp, model, w)[0] for w in (" the", " and", " of"))
    nl = tok(binp, model, "\n")
    ids = []
    for j in range(8, len(ids_all)):
        right = ids_all[j]
        w1 = the if right != the else of
        w2 = and_ if right != and_ else of
        for c in range(5):
            ids += ids_all[j - 8:j] + [w1 if c < 3 else w2 if wrong_only else right] + nl
    with open(out, "w") as f:
        f.write(tok(binp, model, json.dumps(ids), decode=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
