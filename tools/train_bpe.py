#!/usr/bin/env python3
"""tools/train_bpe.py - the corpus and the byte-level BPE tokenizer of models/k3-tiny.

Owns: extracting the King James Bible (public domain) from Debian's bible-kjv-text
  package as plain English prose; the held-out part (models/k3-tiny/heldout.txt);
  training a byte-level BPE on the rest with the K3 pre-tokenizer (spec section 5);
  writing tiktoken.model and tokenizer_config.json; encoding text exactly as tiktoken
  does (used by train_tiny.py to tokenize its training data).
Idea: the corpus is `bible gen1:1-rev22:21` (package bible-kjv, reading bible-kjv-text's
  /usr/lib/bible.data) with chapter headings and verse numbers removed: one verse per
  line, one blank line between chapters. The held-out text is one whole chapter (Ruth 1)
  that the tokenizer and the model never see in training.
  BPE training: count the pre-tokenizer pieces, then repeatedly merge the most frequent
  adjacent pair (ties: the smaller pair of byte strings), updating the pair counts only
  in the pieces that hold the merged pair. A merge whose bytes already have a rank is
  applied but gets no new rank (tiktoken.model keys must be unique).
  Encoding is tiktoken's, not the training replay: start from single bytes, repeatedly
  merge the adjacent pair whose concatenation has the lowest rank (leftmost on ties).
Invariants: ranks 0..N-1 dense, every single byte present (ranks 0..255 = bytes 0..255);
  specials N..N+255 in tokenizer_config.json in K3's order ([BOS] N, [EOS] N+1,
  <|end_of_msg|> N+2, <|open|> N+3, <|close|> N+4, <|sep|> N+5, [UNK] N+254, [PAD] N+255).
Does not: need torch; run at inference time (the engine has its own tokenizer).

Usage: train_bpe.py OUT_DIR [--ranks 2048] [--corpus-out PATH]
Needs: python3-regex, bible-kjv (apt-get install -y python3-regex bible-kjv).
"""

import argparse
import base64
import collections
import heapq
import json
import os
import subprocess
import sys

import regex

# K3's pre-tokenizer (spec section 5). Class intersection `[X&&[^\p{Han}]]` is written
# as a negative lookahead before each character: (?:(?!\p{Han})[X]).
_UP = r"(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])"
_LO = r"(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])"
_SUF = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
K3_PATTERN = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?" + _UP + "*" + _LO + "+" + _SUF,
    r"[^\r\n\p{L}\p{N}]?" + _UP + "+" + _LO + "*" + _SUF,
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
PRETOK = regex.compile(K3_PATTERN)

HELDOUT_CHAPTER = "Ruth 1"
N_SPECIAL = 256
# K3's special tokens by offset from the first special id (spec section 5)
SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>",
            5: "<|sep|>", 18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>",
            21: "<|media_pad|>", 254: "[UNK]", 255: "[PAD]"}


# ---------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------

def read_kjv():
    """[(chapter title, [verse text])] in canonical order, from the `bible` program."""
    out = subprocess.run(["bible", "gen1:1-rev22:21"], check=True, capture_output=True,
                         env=dict(os.environ, COLUMNS="80")).stdout.decode("ascii")
    chapters, prev_blank = [], True
    for line in out.split("\n"):
        if not line.strip():
            prev_blank = True
            continue
        if prev_blank and not line.startswith(" "):          # "Genesis 1", "1 Samuel 3"
            chapters.append((line.strip(), []))
        elif line.startswith("  ") and line.split()[0].isdigit():   # "  12 And ..."
            chapters[-1][1].append(line.split(None, 1)[1].strip())
        else:                                                  # a wrapped verse line
            chapters[-1][1][-1] += " " + line.strip()
        prev_blank = False
    if len(chapters) != 1189 or sum(len(v) for _, v in chapters) != 31102:
        raise SystemExit("train_bpe: unexpected KJV text: %d chapters, %d verses"
                         % (len(chapters), sum(len(v) for _, v in chapters)))
    return chapters


def chapter_text(verses):
    return "".join(v + "\n" for v in verses)


def corpus_split():
    """(training text, held-out text)."""
    train, held = [], None
    for title, verses in read_kjv():
        if title == HELDOUT_CHAPTER:
            held = chapter_text(verses)
        else:
            train.append(chapter_text(verses))
    return "\n".join(train), held


# ---------------------------------------------------------------------------------------
# BPE training
# ---------------------------------------------------------------------------------------

def piece_counts(text):
    return collections.Counter(m.encode("utf-8") for m in PRETOK.findall(text))


def train(text, n_ranks):
    """The token byte strings by rank (list of length n_ranks)."""
    vocab = [bytes([b]) for b in range(256)]
    rank_of = {t: i for i, t in enumerate(vocab)}
    pieces = [(list(p), c) for p, c in piece_counts(text).items()]   # ids per piece
    pair_count = collections.Counter()
    where = collections.defaultdict(set)                     # pair -> piece indices
    for ip, (ids, c) in enumerate(pieces):
        for a, b in zip(ids, ids[1:]):
            pair_count[(a, b)] += c
            where[(a, b)].add(ip)
    # lazy max-heap of (-count, bytes a, bytes b, a, b); stale entries are skipped
    heap = [(-n, vocab[a], vocab[b], a, b) for (a, b), n in pair_count.items()]
    heapq.heapify(heap)
    while len(vocab) < n_ranks and heap:
        negn, _, _, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -negn or negn == 0:
            continue
        merged = vocab[a] + vocab[b]
        if merged in rank_of:
            new = rank_of[merged]
        else:
            new = len(vocab)
            vocab.append(merged)
            rank_of[merged] = new
        changed = set()
        for ip in list(where[(a, b)]):
            ids, c = pieces[ip]
            for x, y in zip(ids, ids[1:]):                   # remove the old pairs
                pair_count[(x, y)] -= c
                changed.add((x, y))
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            pieces[ip] = (out, c)
            for x, y in zip(out, out[1:]):                   # add the new pairs
                pair_count[(x, y)] += c
                where[(x, y)].add(ip)
                changed.add((x, y))
        del where[(a, b)]
        pair_count.pop((a, b), None)
        for p in changed:
            n = pair_count.get(p, 0)
            if n > 0:
                heapq.heappush(heap, (-n, vocab[p[0]], vocab[p[1]], p[0], p[1]))
            else:
                pair_count.pop(p, None)
    return vocab


# ---------------------------------------------------------------------------------------
# Encoding (tiktoken's algorithm) and the files
# ---------------------------------------------------------------------------------------

class Tokenizer:
    """tiktoken-style byte-level BPE over the K3 pre-tokenizer, specials disabled."""

    def __init__(self, model_dir):
        self.vocab = []
        with open(os.path.join(model_dir, "tiktoken.model"), "rb") as f:
            for ln, line in enumerate(f):
                b64, rank = line.split()
                if int(rank) != ln:
                    raise ValueError("tiktoken.model: ranks are not dense")
                self.vocab.append(base64.b64decode(b64))
        self.rank = {t: i for i, t in enumerate(self.vocab)}
        with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
            dec = json.load(f)["added_tokens_decoder"]
        self.specials = {int(k): v["content"] for k, v in dec.items()}
        self.cache = {}

    def encode_piece(self, piece):
        if piece in self.rank:
            return [self.rank[piece]]
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.rank.get(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        return [self.rank[p] for p in parts]

    def encode(self, text):
        out = []
        for m in PRETOK.findall(text):
            ids = self.cache.get(m)
            if ids is None:
                ids = self.cache[m] = self.encode_piece(m.encode("utf-8"))
            out.extend(ids)
        return out

    def decode(self, ids):
        return b"".join(self.vocab[i] if i < len(self.vocab)
                        else self.specials.get(i, "<|reserved_token_%d|>" % i).encode()
                        for i in ids).decode("utf-8", errors="replace")


def write_tokenizer(out_dir, vocab):
    n = len(vocab)
    with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
        for r, t in enumerate(vocab):
            f.write("%s %d\n" % (base64.b64encode(t).decode("ascii"), r))
    dec = {str(n + k): {"content": v, "lstrip": False, "normalized": False,
                        "rstrip": False, "single_word": False, "special": True}
           for k, v in sorted(SPECIALS.items())}
    cfg = {"added_tokens_decoder": dec, "bos_token": "[BOS]", "eos_token": "[EOS]",
           "pad_token": "[PAD]", "unk_token": "[UNK]", "model_max_length": 1048576,
           "tokenizer_class": "TikTokenTokenizer"}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--ranks", type=int, default=2048, help="BPE ranks N (vocab = N + 256)")
    ap.add_argument("--corpus-out", help="also write the training text here")
    a = ap.parse_args(argv)
    os.makedirs(a.out_dir, exist_ok=True)
    text, held = corpus_split()
    if a.corpus_out:
        with open(a.corpus_out, "w") as f:
            f.write(text)
    with open(os.path.join(a.out_dir, "heldout.txt"), "w") as f:
        f.write(held)
    vocab = train(text, a.ranks)
    if len(vocab) != a.ranks:
        raise SystemExit("train_bpe: only %d ranks could be made" % len(vocab))
    write_tokenizer(a.out_dir, vocab)
    tok = Tokenizer(a.out_dir)
    ids = tok.encode(held)
    if tok.decode(ids) != held:
        raise SystemExit("train_bpe: held-out text does not round-trip")
    print("train_bpe: %d ranks; training text %d bytes; held-out %d bytes = %d tokens"
          % (len(vocab), len(text), len(held), len(ids)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
