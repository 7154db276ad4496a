#!/usr/bin/python3
"""bench/spec_project.py - what speculation would save on Kimi K3, from counts.

Runs the speculation workloads of docs/PERFORMANCE.md on the bundled model
(models/k3-tiny, --ram min) and projects their counts onto K3 at several
budgets. A pass over K3 reads the trunk bytes the plan streams (`moestream
plan docs/configs/kimi-k3-config.json --ram B`: "... streamed per pass") and
every fed token its 16 x 92 experts (17,547,264 B each: 25.83 GB); so for a
run of P decode passes that fed F tokens (P + the drafted ids) and emitted N:

    bytes per emitted token = (P x trunk + F x experts) / N

against trunk + experts for plain decoding (its own plan, without the
rollback records). Fixed-K rows carry over as they are (which ids are drafted
and accepted depends on the ids only). `auto` chooses its lengths by the
bytes a pass and a token cost, so its rows are run again per budget with K3's
costs given (`--draft-costs PASS,TOKEN`): the drafts auto would verify on K3.
Experts shared by tokens of one pass and expert-cache hits are left out
(16 of 896 per layer: a few percent), which favours plain decoding slightly.

Usage: /usr/bin/python3 bench/spec_project.py [--bin build/moestream] [--budgets 8G,32G,128G]
Prints a Markdown table. Counts only: any machine gives the same numbers.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

EXPERT_TOKEN_BYTES = 16 * 92 * 17547264
K3_CONFIG = "docs/configs/kimi-k3-config.json"
M, D = "models/k3-tiny", "models/k3-tiny-draft"
ABRAHAM = "And it came to pass after these things, that God did tempt Abraham"


def run(bin_, args):
    out = subprocess.run([bin_, "run", M, "--ram", "min", "--json", "--quiet", "--ignore-eos"] + args,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def streamed_per_pass(bin_, budget, speculate):
    out = subprocess.run([bin_, "plan", K3_CONFIG, "--ram", budget, "--speculate", speculate],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"([0-9.]+) (B|KiB|MiB|GiB|TiB) streamed per pass", out)
    if not m:
        sys.exit("no 'streamed per pass' in the plan at %s:\n%s" % (budget, out))
    unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[m.group(2)]
    return float(m.group(1)) * unit


def workloads(tmp):
    """(name, [(args of one run), ...]): each a list of runs whose counts add up."""
    held = open(os.path.join(M, "heldout.txt"), encoding="utf-8").read()
    copy = os.path.join(tmp, "copy.txt")
    with open(copy, "w", encoding="utf-8") as f:
        f.write(held[:420] + "\n\n" + held[:60])
    verses = held.splitlines()[:6]
    return [
        ("(b) the answer copies the prompt", [["--prompt-file", copy, "--max-tokens", "64"]]),
        ("(c) a corpus quotes the answer", [["--prompt", ABRAHAM, "--max-tokens", "64", "--draft-corpus", "@quote"]]),
        ("(d) held-out verses, greedy, draft model",
         [["--prompt", v, "--max-tokens", "64", "--draft-model", D] for v in verses]),
        ("(d) held-out verses, sampled, draft model",
         [["--prompt", v, "--max-tokens", "64", "--draft-model", D, "--temperature", "0.7", "--top-k", "40",
           "--seed", "1"] for v in verses]),
        ("(e) sampled at temperature 1.5, no draft model",
         [["--prompt", v, "--max-tokens", "64", "--temperature", "1.5", "--seed", "3"] for v in verses]),
    ]


def counts(bin_, runs, speculate, costs):
    P = F = N = 0
    for args in runs:
        extra = ["--speculate", speculate] + (["--draft-costs", costs] if costs else [])
        s = run(bin_, args + extra)["stats"]
        P += s["decode_passes"]
        F += s["decode_passes"] + s["drafted"]
        N += s["decode_tokens"]
    return P, F, N


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/moestream")
    ap.add_argument("--budgets", default="8G,32G,128G")
    ap.add_argument("--fixed", default="4,8", help="fixed draft lengths to project too")
    a = ap.parse_args()
    budgets = a.budgets.split(",")
    trunk = {b: streamed_per_pass(a.bin, b, "auto") for b in budgets}
    trunk0 = {b: streamed_per_pass(a.bin, b, "0") for b in budgets}
    E = EXPERT_TOKEN_BYTES
    with tempfile.TemporaryDirectory() as tmp:
        wl = workloads(tmp)
        # (c)'s corpus: the prompt and its plain answer
        ans = subprocess.run([a.bin, "run", M, "--prompt", ABRAHAM, "--max-tokens", "64", "--ignore-eos", "--quiet"],
                             check=True, capture_output=True, text=True).stdout
        quote = os.path.join(tmp, "quote.txt")
        with open(quote, "w", encoding="utf-8") as f:
            f.write(ABRAHAM + ans)
        for runs in (r for _, r in wl):
            for args in runs:
                if "@quote" in args:
                    args[args.index("@quote")] = quote
        print("| workload | --speculate | costs steering auto | passes | fed / emitted | "
              + " | ".join("K3 %s GB / token (x plain)" % b for b in budgets) + " |")
        print("|---|---|---|---:|---|" + "---:|" * len(budgets))
        plain = {b: trunk0[b] + E for b in budgets}
        print("| plain decoding | 0 | - | - | - | "
              + " | ".join("%.1f" % (plain[b] / 1e9) for b in budgets) + " |")
        for name, runs in wl:
            rows = [(k, None, [counts(a.bin, runs, k, None)] * len(budgets)) for k in a.fixed.split(",")]
            rows.append(("auto", "K3's at each budget",
                         [counts(a.bin, runs, "auto", "%d,%d" % (trunk[b], E)) for b in budgets]))
            for k, how, per in rows:
                cells = []
                for b, (P, F, N) in zip(budgets, per):
                    x = (P * trunk[b] + F * E) / N
                    cells.append("%.1f (%.3fx)" % (x / 1e9, x / plain[b]))
                P, F, N = per[0]
                pf = "/".join("%d" % c[0] for c in per) if how else "%d" % P
                fe = "/".join("%d / %d" % (c[1], c[2]) for c in per) if how else "%d / %d" % (F, N)
                print("| %s | %s | %s | %s | %s | %s |" % (name, k, how or "-", pf, fe, " | ".join(cells)))


if __name__ == "__main__":
    main()
