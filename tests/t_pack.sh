#!/usr/bin/env bash
# tests/t_pack.sh - `moestream pack` end to end: the CLI and the server read the
# packed trunk and answer exactly as without it.
#
# On a copy of the bundled model (its shards, config, tokenizer; the sidecar is
# written here): `pack` without a sidecar is refused (exit 2); with one it
# writes moestream.pack. `run --json --ram min` with the pack reads fewer trunk
# bytes (trunk_packed_read > 0, standing for trunk_unpacked_bytes) and generates
# the same ids and text as `--no-pack`; `--no-verify` does not read the pack and
# `--no-verify --pack PATH` is refused. `serve` with and without `--no-pack`:
# /health says pack true / false and verify true, and a greedy completion and a
# seeded chat answer are the same text. A test model with BF16 data at odd file
# offsets packs and runs from its pack with the ids of its aligned twin.
# Last line: "t_pack: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=/usr/bin/python3
SRC=models/k3-tiny
. tests/lib_serve.sh                   # $tmp, serve_start, and the cleanup of both
. tests/lib.sh
[ -x "$BIN" ] || { bad "$BIN not found"; echo "t_pack: $pass passed, $fail failed"; exit 1; }

M=$tmp/k3-tiny
mkdir "$M"
cp "$SRC"/*.safetensors "$SRC"/config.json "$SRC"/model.safetensors.index.json "$SRC"/tiktoken.model \
   "$SRC"/tokenizer_config.json "$M"/

# 1. a pack needs the sidecar
"$BIN" pack "$M" > "$tmp/p0.out" 2> "$tmp/p0.err"; rc=$?
if [ $rc = 2 ] && grep -q "moestream verify" "$tmp/p0.err" && [ ! -e "$M/moestream.pack" ]; then ok
else bad "pack without a sidecar: exit $rc, $(cat "$tmp/p0.err")"; fi
"$BIN" verify "$M" --quiet > /dev/null 2>&1 || bad "verify"
if "$BIN" pack "$M" --quiet > "$tmp/p1.out" 2> "$tmp/p1.err" && [ -s "$M/moestream.pack" ] &&
   grep -q "trunk regions packed" "$tmp/p1.out"; then ok
else bad "pack: $(cat "$tmp/p1.out" "$tmp/p1.err")"; fi

# 2. run: fewer bytes, the same ids and text
PROMPT="And the LORD spake unto Moses, saying"
"$BIN" run "$M" --prompt "$PROMPT" --max-tokens 24 --ram min --json --quiet > "$tmp/r1.json" 2> "$tmp/r1.err" || bad "run with the pack: $(cat "$tmp/r1.err")"
"$BIN" run "$M" --prompt "$PROMPT" --max-tokens 24 --ram min --json --quiet --no-pack > "$tmp/r0.json" 2> "$tmp/r0.err" || bad "run --no-pack: $(cat "$tmp/r0.err")"
"$BIN" run "$M" --prompt "$PROMPT" --max-tokens 24 --ram min --json --quiet --no-verify > "$tmp/r2.json" 2> "$tmp/r2.err" || bad "run --no-verify: $(cat "$tmp/r2.err")"
$PY - "$tmp" <<'EOF' > "$tmp/r.check"
import json, sys
t = sys.argv[1]
r1, r0, r2 = (json.load(open("%s/%s.json" % (t, n))) for n in ("r1", "r0", "r2"))
s1, s0, s2 = r1["stats"], r0["stats"], r2["stats"]
print("same_ids", r1["generated_ids"] == r0["generated_ids"] == r2["generated_ids"] and len(r1["generated_ids"]) > 0)
print("same_text", r1["text"] == r0["text"] == r2["text"])
print("pack_read", s1["pack"] and s1["trunk_packed_read"] > 0 and s1["trunk_unpacked_bytes"] > s1["trunk_packed_read"]
      and s1["trunk_bytes_read"] < s0["trunk_bytes_read"] and s1["pack_fallbacks"] == 0)
print("stood_for", s1["trunk_bytes_read"] - s1["trunk_packed_read"] + s1["trunk_unpacked_bytes"] == s0["trunk_bytes_read"])
print("nopack_plain", (not s0["pack"]) and s0["trunk_packed_read"] == 0)
print("noverify_ignores", (not s2["pack"]) and s2["trunk_packed_read"] == 0 and not s2["verify"])
EOF
for k in same_ids same_text pack_read stood_for nopack_plain noverify_ignores; do
    if grep -q "^$k True" "$tmp/r.check"; then ok; else bad "run: $k ($(cat "$tmp/r.check" | tr '\n' ' '))"; fi
done
if "$BIN" run "$M" --prompt "$PROMPT" --max-tokens 2 --ram min --no-verify 2>&1 | grep -q "ignored"; then ok
else bad "--no-verify with a pack present says nothing"; fi
"$BIN" run "$M" --prompt "$PROMPT" --max-tokens 2 --no-verify --pack "$M/moestream.pack" > /dev/null 2> "$tmp/r3.err"; rc=$?
if [ $rc = 2 ] && grep -q "checksum sidecar" "$tmp/r3.err"; then ok; else bad "--no-verify --pack: exit $rc, $(cat "$tmp/r3.err")"; fi

# 3. serve with and without the pack: /health says which, the answers are equal
serve_start pk "$M" --ram min
serve_start np "$M" --ram min --no-pack
upk=$(cat "$tmp/url.pk"); unp=$(cat "$tmp/url.np")
if [ -z "$upk" ] || [ -z "$unp" ]; then
    bad "the servers did not start: $(tail -n 3 "$tmp/srv.pk.log" "$tmp/srv.np.log")"
    echo "t_pack: $pass passed, $fail failed"; exit 1
fi
ask() {   # url, path, body -> stdout
    curl -s -m 120 -H 'Content-Type: application/json' -d "$3" "$1/v1/$2"
}
B1="{\"model\":\"k3-tiny\",\"prompt\":\"$PROMPT\",\"max_tokens\":30,\"temperature\":0,\"ignore_eos\":true}"
B2="{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"In the beginning\"}],\"max_tokens\":20,\"temperature\":0.8,\"seed\":3}"
for u in pk np; do
    url=$(cat "$tmp/url.$u")
    ask "$url" completions "$B1" > "$tmp/c1.$u.json"
    ask "$url" chat/completions "$B2" > "$tmp/c2.$u.json"
    curl -s -m 10 "$url/health" > "$tmp/h.$u.json"
done
$PY - "$tmp" <<'EOF' > "$tmp/s.check"
import json, sys
t = sys.argv[1]
def load(n):
    try:
        return json.load(open("%s/%s" % (t, n)))
    except Exception:
        return {}
c1p, c1n, c2p, c2n = load("c1.pk.json"), load("c1.np.json"), load("c2.pk.json"), load("c2.np.json")
hp, hn = load("h.pk.json"), load("h.np.json")
def text(r, chat):
    try:
        return r["choices"][0]["message"]["content"] if chat else r["choices"][0]["text"]
    except Exception:
        return None
print("completion_equal", text(c1p, 0) is not None and text(c1p, 0) == text(c1n, 0) and len(text(c1p, 0)) > 0)
print("chat_equal", text(c2p, 1) is not None and text(c2p, 1) == text(c2n, 1))
print("health_pack", hp.get("pack") is True and hp.get("verify") is True)
print("health_nopack", hn.get("pack") is False and hn.get("verify") is True)
EOF
for k in completion_equal chat_equal health_pack health_nopack; do
    if grep -q "^$k True" "$tmp/s.check"; then ok; else bad "serve: $k ($(cat "$tmp/s.check" | tr '\n' ' '))"; fi
done
# 4. BF16 data at odd file offsets (make_testdata.sh's d_odd: d with longer headers), whose
# ranges the store moves one byte down after they land, packed like any other: the pack
# decodes to the moved places, and the ids equal d's, read without sidecar or pack
TD=${MS_TESTDATA:-$BUILD/testdata}
O=$tmp/d_odd
if [ -d "$TD/d_odd" ]; then
    mkdir "$O" && cp "$TD"/d_odd/*.safetensors "$TD"/d_odd/*.json "$O"/
    "$BIN" verify "$O" --write --quiet > /dev/null 2>&1 && "$BIN" pack "$O" --quiet > /dev/null 2>&1 || bad "d_odd: verify / pack"
    "$BIN" run "$O" --ids 17,200,33,99 --max-tokens 12 --ram min --json --quiet > "$tmp/o1.json" 2> "$tmp/o1.err" ||
        bad "d_odd with its pack: $(cat "$tmp/o1.err")"
    "$BIN" run "$TD/d" --ids 17,200,33,99 --max-tokens 12 --ram min --json --quiet > "$tmp/o0.json" 2> "$tmp/o0.err" ||
        bad "d: $(cat "$tmp/o0.err")"
    if $PY -c '
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
s = a["stats"]
sys.exit(0 if a["generated_ids"] == b["generated_ids"] and s["pack"] and s["trunk_packed_read"] > 0
         and s["pack_fallbacks"] == 0 and not b["stats"]["pack"] else 1)' "$tmp/o1.json" "$tmp/o0.json"; then ok
    else bad "d_odd packed: other ids or no pack read ($(head -c 300 "$tmp/o1.json"))"; fi
else
    bad "no $TD/d_odd (tests/make_testdata.sh makes it)"
fi

echo "t_pack: $pass passed, $fail failed"
[ $fail = 0 ]
