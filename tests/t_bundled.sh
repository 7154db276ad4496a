#!/usr/bin/env bash
# tests/t_bundled.sh - the bundled model models/k3-tiny: its layout, and the engine's
# perplexity on held-out text against the float64 reference.
#
# Owns: nothing on disk (temporary files in a mktemp directory, removed at exit).
# Idea:
#   1. layout: the directory holds config.json, tiktoken.model, tokenizer_config.json,
#      heldout.txt and the index; 3+ shards; the index names exactly the tensors that the
#      shard headers hold (each in the shard it names); every byte range in bounds; the
#      whole model under 12 MB; vocab_size = BPE ranks + 256; eos = <|end_of_msg|>;
#      the routed experts are U8 (MXFP4) and each expert's six tensors are adjacent.
#   2. perplexity: the first MS_BUNDLED_TOKENS (default 160) tokens of heldout.txt, as
#      the C tokenizer cuts them, through `moestream perplexity` and through
#      tools/perplexity.py (msref, float64): NLL and perplexity agree within 1e-4
#      relative. The model is trained, so the perplexity is also far below the vocabulary
#      size (a broken forward pass gives a uniform-like or an exploding one).
#   3. streaming: a greedy continuation under `--ram min` (which must read expert bytes
#      from disk: the experts are streamed) equals the unlimited run's and the
#      reference's greedy ids, and decodes to words.
# Env: MS_BIN (default build/moestream), PYTHON (default /usr/bin/python3),
#   MS_BUNDLED_MODEL (default models/k3-tiny; another directory to check the test itself),
#   MS_BUNDLED_TOKENS.
# Does not: need torch or python3-regex (the training tools do); judge the prose.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${MS_BIN:-build/moestream}
PY=${PYTHON:-/usr/bin/python3}
MODEL=${MS_BUNDLED_MODEL:-models/k3-tiny}
NTOK=${MS_BUNDLED_TOKENS:-160}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. tests/lib.sh

# --- 1. layout ---------------------------------------------------------------------
if out=$("$PY" - "$MODEL" <<'EOF' 2>&1
import json, os, struct, sys
d = sys.argv[1]
errs = []
for f in ("config.json", "tiktoken.model", "tokenizer_config.json", "heldout.txt",
          "model.safetensors.index.json"):
    if not os.path.isfile(os.path.join(d, f)):
        errs.append("missing " + f)
if errs:
    sys.exit("; ".join(errs))
wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
shards = sorted(set(wm.values()))
if len(shards) < 3:
    errs.append("%d shards, want 3 or more" % len(shards))
held, total, n_experts = {}, 0, 0
for s in shards:
    p = os.path.join(d, s)
    size = os.path.getsize(p)
    total += size
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    spans = []
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        numel = 1
        for x in t["shape"]:
            numel *= x
        if e - b != numel * {"BF16": 2, "F32": 4, "U8": 1}[t["dtype"]] or not 0 <= b <= e <= size - 8 - n:
            errs.append("%s: bad range" % name)
        held[name] = (s, t["dtype"], b, e)
        spans.append((b, e, name))
    spans.sort()
    order = [x[2] for x in spans]
    pos = {nm: i for i, nm in enumerate(order)}
    for nm in order:      # the six tensors of an expert are adjacent
        if ".experts." in nm and nm.endswith(".w1.weight_packed"):
            n_experts += 1
            base = nm[:-len("w1.weight_packed")]
            six = [base + w + ".weight_" + k for w in ("w1", "w2", "w3") for k in ("packed", "scale")]
            idx = sorted(pos.get(x, -10) for x in six)
            if idx != list(range(idx[0], idx[0] + 6)):
                errs.append("expert %s: tensors not adjacent" % base)
for name, s in wm.items():
    if name not in held or held[name][0] != s:
        errs.append("index names %s in %s, which does not hold it" % (name, s))
for name in held:
    if name not in wm:
        errs.append("%s is in a shard but not in the index" % name)
experts = [n for n in held if ".experts." in n]
if not experts or n_experts * 6 != len(experts) or any(held[n][1] != "U8" for n in experts):
    errs.append("routed experts are missing or not U8")
if total > 12 * 1024 * 1024:
    errs.append("model is %d bytes, over 12 MB" % total)
ranks = sum(1 for _ in open(os.path.join(d, "tiktoken.model")))
tc = json.load(open(os.path.join(d, "config.json")))["text_config"]
if tc["vocab_size"] != ranks + 256:
    errs.append("vocab_size %d != %d ranks + 256" % (tc["vocab_size"], ranks))
dec = json.load(open(os.path.join(d, "tokenizer_config.json")))["added_tokens_decoder"]
if dec.get(str(tc["eos_token_id"]), {}).get("content") != "<|end_of_msg|>":
    errs.append("eos_token_id is not <|end_of_msg|>")
if dec.get(str(tc["bos_token_id"]), {}).get("content") != "[BOS]":
    errs.append("bos_token_id is not [BOS]")
if errs:
    sys.exit("; ".join(errs[:5]))
print("layout ok: %d shards, %d tensors, %d experts, %d bytes" % (len(shards), len(held), n_experts, total))
EOF
); then ok; echo "$out"; else bad "layout: $out"; fi

# --- 2. perplexity: engine vs reference -------------------------------------------------
if [ ! -x "$BIN" ]; then
    bad "no engine binary $BIN"
else
    if ! "$BIN" tokenize "$MODEL" --quiet < "$MODEL/heldout.txt" > "$TMP/ids.json" 2> "$TMP/tok.err"; then
        bad "tokenize: $(head -c 300 "$TMP/tok.err")"
    elif ! "$BIN" perplexity "$MODEL" --file "$MODEL/heldout.txt" --max-tokens "$NTOK" --quiet \
            > "$TMP/engine.json" 2> "$TMP/engine.err"; then
        bad "engine perplexity: $(head -c 300 "$TMP/engine.err")"
    elif ! "$PY" tools/perplexity.py "$MODEL" --ids-file "$TMP/ids.json" --max-tokens "$NTOK" \
            > "$TMP/ref.json" 2> "$TMP/ref.err"; then
        bad "reference perplexity: $(head -c 300 "$TMP/ref.err")"
    elif out=$("$PY" - "$TMP/engine.json" "$TMP/ref.json" "$NTOK" <<'EOF' 2>&1
import json, sys
e, r, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
errs = []
if e["n_tokens"] != r["n_tokens"] or e["n_tokens"] != n:
    errs.append("n_tokens engine %s, reference %s, wanted %d" % (e["n_tokens"], r["n_tokens"], n))
for k in ("nll", "perplexity"):
    rel = abs(e[k] - r[k]) / abs(r[k])
    if not rel <= 1e-4:
        errs.append("%s: engine %.10g, reference %.10g (relative %.3g)" % (k, e[k], r[k], rel))
if not 1.0 < r["perplexity"] < 100.0:
    errs.append("reference perplexity %.4g: not a trained model" % r["perplexity"])
if errs:
    sys.exit("; ".join(errs))
print("perplexity engine %.6f reference %.6f (nll %.8f vs %.8f)"
      % (e["perplexity"], r["perplexity"], e["nll"], r["nll"]))
EOF
); then ok; echo "$out"; else bad "perplexity: $out"; fi
fi

# --- 3. streamed greedy continuation == unlimited == reference ----------------------
PROMPT="And the LORD spake unto Moses, saying,"
GEN=12
if [ -x "$BIN" ]; then
    if ! "$BIN" run "$MODEL" --prompt "$PROMPT" --max-tokens $GEN --ignore-eos --json --quiet \
            > "$TMP/full.json" 2> "$TMP/full.err"; then
        bad "run (unlimited): $(head -c 300 "$TMP/full.err")"
    elif ! "$BIN" run "$MODEL" --prompt "$PROMPT" --max-tokens $GEN --ignore-eos --json --quiet \
            --ram min > "$TMP/min.json" 2> "$TMP/min.err"; then
        bad "run --ram min: $(head -c 300 "$TMP/min.err")"
    elif out=$("$PY" - "$TMP/full.json" "$TMP/min.json" "$MODEL" $GEN <<'EOF' 2>&1
import json, os, sys
sys.path.insert(0, "tools")
import msref
full, mini = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
n = int(sys.argv[4])
errs = []
if not mini["stats"]["expert_bytes_read"] > 0:
    errs.append("--ram min read no expert bytes: the experts were not streamed")
if full["generated_ids"] != mini["generated_ids"]:
    errs.append("--ram min ids %s != unlimited %s" % (mini["generated_ids"], full["generated_ids"]))
ref, _ = msref.greedy(msref.Model(sys.argv[3]), full["prompt_ids"], n)
if full["generated_ids"] != ref:
    errs.append("engine greedy %s != reference %s" % (full["generated_ids"], ref))
words = [w for w in full["text"].split() if w.isalpha()]
if len(words) < 3:
    errs.append("continuation %r has too few words" % full["text"])
if errs:
    sys.exit("; ".join(errs))
print("continuation: %r" % full["text"])
EOF
); then ok; echo "$out"; else bad "streamed run: $out"; fi
fi

echo "t_bundled: $pass passed, $fail failed"
[ $fail -eq 0 ]
