#!/usr/bin/python3
"""bench/prompt_share.py - what the prompt cache saves a server whose requests share a
system prompt: bytes read and time before the first token.

Starts `moestream serve MODEL --ram min --prompt-cache-ram 256M` (plus any extra
arguments) on a free port and sends chat requests with max_tokens 1, so that a
request's time is its time to the first token:

  1. the system prompt S (models/k3-tiny/heldout.txt and one line: ~940 ids with
     the bundled tokenizer) and a question Q1, cold;
  2. S and another question Q2: the prompt cache holds S (a snapshot is taken
     where the first message ends), so only Q2's message is fed;
  3. S with its first word changed and Q2: the same work as 2 without a match
     (the cold cost of request 2).

Then, as a chat client does, a conversation resent whole for 10 turns (each turn
adds the previous answer, forced here as an assistant message of fixed text, and a
new question): the ids fed per turn against the ids sent.

Bytes are the deltas of /metrics' moestream_disk_read_bytes_total (trunk and
experts) around each request (read once /metrics counts the request finished); passes are not counted by the server, so the table
gives ids fed (prompt_tokens - cached_tokens). Times are wall seconds of the HTTP
request, from one run: compare them within the run only.

The model needs a tokenizer (a chat request is rendered to ids): a checkpoint
made by tools/msgen.py gets the bundled one by copying models/k3-tiny's
tiktoken.model and tokenizer_config.json into it, with --vocab 2304.

Usage: /usr/bin/python3 bench/prompt_share.py MODEL [--bin build/moestream] [-- serve args...]
Prints a Markdown table.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

QUESTIONS = ["What is the first thing the text above says, in one short sentence?",
             "Name two people the text above mentions, and nothing else please.",
             "Which place does the text above name first? Answer with one word."]


def start(bin_, model, extra):
    cmd = [bin_, "serve", model, "--port", "0", "--host", "127.0.0.1", "--ram", "min",
           "--prompt-cache-ram", "256M"] + extra
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        sys.stderr.write(line)
        m = re.search(r"listening on (http://[^ ]+)/v1", line)
        if m:
            return p, m.group(1)
    sys.exit("prompt_share: the server ended before listening")


def get(url):
    with urllib.request.urlopen(url, timeout=3600) as r:
        return r.read().decode()


def counters(base):
    """(weight bytes read, generations finished): /metrics' engine counters are those of
    the last finished generation, set just after its reply is sent."""
    total, jobs = 0, 0
    for line in get(base + "/metrics").splitlines():
        if line.startswith("moestream_disk_read_bytes_total{"):
            total += int(float(line.split()[-1]))
        elif line.startswith("moestream_generations_total "):
            jobs = int(float(line.split()[-1]))
    return total, jobs


def disk_bytes_after(base, jobs):
    """The bytes read once `jobs` generations have finished."""
    for _ in range(1000):
        b, j = counters(base)
        if j >= jobs:
            return b
        time.sleep(0.01)
    sys.exit("prompt_share: /metrics did not count the request")


def chat(base, model, messages):
    body = json.dumps({"model": model, "messages": messages, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    (b0, j0), t0 = counters(base), time.time()
    try:
        with urllib.request.urlopen(req, timeout=3600) as r:
            out = json.loads(r.read().decode())
    except urllib.error.HTTPError as err:
        sys.exit("prompt_share: HTTP %d: %s" % (err.code, err.read().decode()))
    dt = time.time() - t0
    b1 = disk_bytes_after(base, j0 + 1)
    u = out["usage"]
    cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return {"prompt": u["prompt_tokens"], "cached": cached, "fed": u["prompt_tokens"] - cached,
            "bytes": b1 - b0, "s": dt}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--bin", default="build/moestream")
    ap.add_argument("serve_args", nargs="*")
    a = ap.parse_args()
    system = open("models/k3-tiny/heldout.txt", encoding="utf-8").read() + \
        "\nAnswer questions about the text above briefly and exactly."
    other = "Then" + system[system.index(" "):]
    proc, base = start(a.bin, a.model, a.serve_args)
    name = os.path.basename(os.path.normpath(a.model))     # the model name the server answers to
    rows = []
    try:
        sysm = {"role": "system", "content": system}
        rows.append(("1. system prompt + Q1, cold", chat(base, name, [sysm, {"role": "user", "content": QUESTIONS[0]}])))
        rows.append(("2. the same system prompt + Q2", chat(base, name, [sysm, {"role": "user", "content": QUESTIONS[1]}])))
        rows.append(("3. request 2 with the system prompt's first word changed (cold)",
                     chat(base, name, [{"role": "system", "content": other}, {"role": "user", "content": QUESTIONS[1]}])))
        conv, turns = [sysm], []
        for k in range(10):
            conv.append({"role": "user", "content": "Turn %d. %s" % (k + 1, QUESTIONS[k % 3])})
            turns.append(chat(base, name, conv))
            conv.append({"role": "assistant", "content": "Answer %d: the text is about a journey." % (k + 1)})
    finally:
        proc.terminate()
        proc.wait()
    first = rows[0][1]
    print("| request | prompt ids | reused / fed | GB read before the first token | of request 1 | s |")
    print("|---|---:|---|---:|---:|---:|")
    for name, r in rows:
        print("| %s | %d | %d / %d | %.2f | %.3f | %.1f |" % (name, r["prompt"], r["cached"], r["fed"],
                                                             r["bytes"] / 1e9, r["bytes"] / first["bytes"], r["s"]))
    sent = sum(t["prompt"] for t in turns)
    fed = sum(t["fed"] for t in turns)
    print()
    print("chat resent whole, 10 turns: %d ids sent, %d fed (turn 1: %d; turns 2-10: %s), %.2f GB read, %.1f s"
          % (sent, fed, turns[0]["fed"], ", ".join(str(t["fed"]) for t in turns[1:]),
             sum(t["bytes"] for t in turns) / 1e9, sum(t["s"] for t in turns)))
    distinct = turns[-1]["prompt"]
    print("ids of the last turn's prompt (every id sent, once): %d; fed in all turns: %d" % (distinct, fed))


if __name__ == "__main__":
    main()
