#!/usr/bin/env bash
# tests/t_chat.sh - `moestream chat` across turns without re-prefilling.
#
# On a tiny random model with a byte-level tokenizer and the K3 specials:
#  - two user turns, then /save: every token of the conversation was fed
#    exactly once (prefill + decode counts == positions in the saved session),
#    i.e. turn 2 fed only the closing of answer 1 and its own message;
#  - the kept state is the state of the whole conversation fed at once: a run
#    resumed from the saved session continues with the same ids as a fresh run
#    fed all of the conversation's ids;
#  - --speculate 1 and 4 give the same answers and saved state as the one-token loop;
#  - a full context: the answer stops before --max-context with room for its closing, a
#    message that does not fit is refused and the chat goes on (/reset, /save);
#  - /set changes the system message (before the first message), thinking, max-tokens and
#    the sampling as the flags would; an answer picked with thinking on is closed so after
#    /set thinking off; refusals say why and change nothing;
#  - user text containing "<|open|>" is tokenized as text (no special ids).
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=/usr/bin/python3
dir=$BUILD/testdata-chat
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. tests/lib.sh
stamp="$(sha1sum tools/msgen.py tools/mslib.py tools/stwrite.py "$0" | sha1sum | cut -c1-16)"
if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$dir"
    $PY tools/msgen.py "$dir" --preset wide --layers 4 --hidden 64 --experts 8 --topk 2 --vocab 512 \
        --kda-heads 4 --kda-dim 16 --mla-heads 4 --q-lora 32 --kv-lora 16 --nope 16 --rope 8 --v 16 \
        --inter 96 --moe-inter 32 --latent 32 --block 2 --seed 9 2>/dev/null || bad "generation"
    $PY - "$dir" <<'PYEOF'
import base64, json, sys
d = sys.argv[1]
with open(d + "/tiktoken.model", "w") as f:           # byte-level: the 256 single bytes
    for i in range(256):
        f.write(base64.b64encode(bytes([i])).decode() + " %d\n" % i)
names = {256: "[BOS]", 257: "[EOS]", 258: "<|end_of_msg|>", 259: "<|open|>", 260: "<|close|>",
         261: "<|sep|>", 510: "[UNK]", 511: "[PAD]"}          # the K3 block's order
json.dump({"added_tokens_decoder": {str(k): {"content": v, "special": True} for k, v in names.items()}},
          open(d + "/tokenizer_config.json", "w"))
c = json.load(open(d + "/config.json"))
for t in (c, c["text_config"]):
    t["bos_token_id"], t["eos_token_id"], t["pad_token_id"] = 256, 258, 511
json.dump(c, open(d + "/config.json", "w"), indent=2)
PYEOF
    echo "$stamp" > "$dir/.stamp"
fi

printf 'hello there\nand a second question\n/save %s\n' "$tmp/s.bin" | \
    "$BIN" chat "$dir" --max-tokens 6 > "$tmp/out.txt" 2> "$tmp/err.txt"; rc=$?
[ $rc -eq 0 ] && ok || bad "chat exited $rc: $(cat "$tmp/err.txt")"
pre=$(grep -o 'prefill [0-9]* tokens' "$tmp/err.txt" | grep -o '[0-9]*')
dec=$(grep -o 'decode [0-9]* tokens' "$tmp/err.txt" | grep -o '[0-9]*')
$PY - "$tmp/s.bin" "$tmp/ids.txt" <<'PYEOF' || bad "cannot read the saved session"
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"MSSESS03"
n_past = struct.unpack_from("<q", b, 16)[0]
ids = struct.unpack_from("<%di" % n_past, b, 96)
open(sys.argv[2], "w").write("%d\n%s\n" % (n_past, ",".join(map(str, ids))))
PYEOF
n_past=$(head -1 "$tmp/ids.txt"); all=$(tail -1 "$tmp/ids.txt")
[ -n "$pre" ] && [ -n "$dec" ] && [ $((pre + dec)) -eq "$n_past" ] && ok || \
    bad "tokens fed (prefill $pre + decode $dec) != positions $n_past: something was fed twice"
turns=$(printf '%s' "$all" | tr ',' '\n' | grep -cx 258)
[ "$turns" -ge 3 ] && ok || bad "expected <|end_of_msg|> after each message, found $turns"
a=$("$BIN" run "$dir" --load-session "$tmp/s.bin" --gen 5 --quiet)
b=$("$BIN" run "$dir" --ids "$all" --gen 5 --quiet)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "resumed chat state '$a' != fresh feed of the conversation '$b'"
# --speculate: the same answers and the same saved state (bytes) as the one-token loop
for k in 1 4; do
    printf 'hello there\nand a second question\n/save %s\n' "$tmp/s$k.bin" | \
        "$BIN" chat "$dir" --max-tokens 12 --speculate $k > "$tmp/out$k.txt" 2> "$tmp/err$k.txt"
    [ $k = 1 ] || { printf 'hello there\nand a second question\n/save %s\n' "$tmp/s0.bin" | \
        "$BIN" chat "$dir" --max-tokens 12 > "$tmp/out0.txt" 2> "$tmp/err0.txt"; }
done
for k in 1 4; do
    cmp -s "$tmp/out0.txt" "$tmp/out$k.txt" && cmp -s "$tmp/s0.bin" "$tmp/s$k.bin" && ok || \
        bad "chat --speculate $k: answers or saved state differ from the one-token loop"
done
# a full context ends nothing (cli/chat.c, invariant 5): the first answer stops 64 positions
# (kept for its closing) before --max-context, 10 tokens in, as the same chat limited to 10
# tokens answers; the second message is refused with nothing fed; after /reset the first
# answer comes again; the conversation saves closed and goes on under a larger context; the
# exit code says a message was refused
printf 'hello there\n' | "$BIN" chat "$dir" --max-tokens 10 > "$tmp/c10.txt" 2> "$tmp/c10err.txt"
p1=$(grep -o 'prefill [0-9]* tokens' "$tmp/c10err.txt" | grep -o '[0-9]*')
printf 'hello there\nand a second question\n/reset\nhello there\n/save %s\n' "$tmp/full.bin" | \
    "$BIN" chat "$dir" --max-tokens 400 --max-context $((p1 + 64 + 10)) > "$tmp/cfull.txt" 2> "$tmp/cfullerr.txt"; rc=$?
[ $rc -eq 1 ] && ok || bad "chat with a refused message exited $rc, not 1"
[ "$(grep -c '^\[the context is full: the answer stopped at 10 tokens' "$tmp/cfullerr.txt")" = 2 ] && ok || \
    bad "no context-full notice after 10 tokens, twice: $(head -c 600 "$tmp/cfullerr.txt")"
grep -q '^moestream: the message does not fit: the conversation holds '$((p1 + 10))' positions' "$tmp/cfullerr.txt" && ok || \
    bad "the second message was not refused: $(head -c 600 "$tmp/cfullerr.txt")"
[ "$(sed -n 1p "$tmp/cfull.txt")" = "$(cat "$tmp/c10.txt")" ] && [ "$(sed -n 2p "$tmp/cfull.txt")" = "$(cat "$tmp/c10.txt")" ] && \
    [ "$(wc -l < "$tmp/cfull.txt")" -eq 2 ] && ok || bad "answers under a full context differ from --max-tokens 10's"
grep -q '^saved the conversation' "$tmp/cfullerr.txt" && \
    printf 'and a second question\n' | "$BIN" chat "$dir" --load-session "$tmp/full.bin" --max-tokens 4 \
        > "$tmp/cmore.txt" 2> "$tmp/cmoreerr.txt" && [ -s "$tmp/cmore.txt" ] && ok || \
    bad "the full conversation was not saved, or does not go on under a larger context: $(tail -c 400 "$tmp/cmoreerr.txt")"
# /set: the next answers use the new values as if chat had started with them.
# (1) the system message (before the first message), sampling and max-tokens
printf '/set system Be brief.\n/set temperature 0.9\n/set seed 7\n/set max-tokens 5\nhello there\n' |
    "$BIN" chat "$dir" --quiet > "$tmp/set1.txt" 2> "$tmp/set1err.txt"
printf 'hello there\n' | "$BIN" chat "$dir" --quiet --system 'Be brief.' --temperature 0.9 --seed 7 --max-tokens 5 \
    > "$tmp/flag1.txt"
[ -s "$tmp/set1.txt" ] && cmp -s "$tmp/set1.txt" "$tmp/flag1.txt" && ok ||
    bad "/set system, temperature, seed, max-tokens: '$(cat "$tmp/set1.txt")', the flags give '$(cat "$tmp/flag1.txt")'"
# (2) thinking on for the first turn, off for the second: the first answer is closed as it was
#     picked (thinking on), as a conversation saved under --thinking on and resumed without it
printf '/set thinking on\nhello there\n/set thinking off\nand a second question\n/save %s\n' "$tmp/th1.bin" |
    "$BIN" chat "$dir" --max-tokens 6 --quiet > "$tmp/th1.txt" 2>&1
printf 'hello there\n' | "$BIN" chat "$dir" --max-tokens 6 --quiet --thinking on --save-session "$tmp/th.bin" > /dev/null 2>&1
printf 'and a second question\n/save %s\n' "$tmp/th2.bin" |
    "$BIN" chat "$dir" --max-tokens 6 --quiet --load-session "$tmp/th.bin" > /dev/null 2>&1
[ -s "$tmp/th1.bin" ] && cmp -s "$tmp/th1.bin" "$tmp/th2.bin" && ok ||
    bad "/set thinking between turns: the conversation differs from one saved under --thinking on and resumed"
# (3) max-tokens lowered below the open answer's length: its ids stay, closed with the next save
printf 'hello there\n/set max-tokens 2\n/save %s\n' "$tmp/mt1.bin" | "$BIN" chat "$dir" --max-tokens 6 --quiet > /dev/null 2>&1
printf 'hello there\n/save %s\n' "$tmp/mt2.bin" | "$BIN" chat "$dir" --max-tokens 6 --quiet > /dev/null 2>&1
[ -s "$tmp/mt1.bin" ] && cmp -s "$tmp/mt1.bin" "$tmp/mt2.bin" && ok || bad "/set max-tokens 2 after a 6-token answer changed the conversation"
# (4) refusals say why and change nothing: a bad value, an engine option, the system message
#     after the first message, a value missing
printf '/set top-p 2\n/set ram 1G\nhello there\n/set system x\n/set seed\n/set show-reasoning off\n/set\n' |
    "$BIN" chat "$dir" --max-tokens 2 --quiet > /dev/null 2> "$tmp/set4err.txt"
grep -q "^bad top-p '2': " "$tmp/set4err.txt" && grep -q '^ram is not one /set changes' "$tmp/set4err.txt" &&
    grep -q '^the system message opens the conversation' "$tmp/set4err.txt" && grep -q '^usage: /set seed VALUE' "$tmp/set4err.txt" &&
    grep -q '^show-reasoning takes no value' "$tmp/set4err.txt" &&
    [ "$(tail -n 1 "$tmp/set4err.txt" | grep -c 'hidden reasoning, .*top-p 1, .*seed 0; system none')" = 1 ] && ok ||
    bad "/set refusals: $(cat "$tmp/set4err.txt")"
ids=$(printf 'say <|open|> and <|end_of_msg|>' | "$BIN" tokenize "$dir")
$PY -c "import json,sys; ids=json.loads(sys.argv[1]); sys.exit(0 if ids and max(ids) < 256 else 1)" "$ids" && ok || \
    bad "user text became special tokens: $ids"
echo "t_chat: $pass passed, $fail failed"
[ $fail -eq 0 ]
