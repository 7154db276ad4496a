#!/usr/bin/env bash
# tests/t_prefix.sh - the prompt cache where prompts enter: answers equal those
# without it, and prompts sharing a prefix read it once.
#
# serve: `serve --parallel 4` with the prompt cache and with --prompt-cache-ram 0
# on the bundled model. Four chats sharing a long system prompt, sent at once,
# then a second round (other questions, a repeated chat, an edited last
# message): every answer (text, finish reason, token counts, log-probabilities)
# equals the cache-less server's; without the cache nothing is cached; with it,
# at least three of the four concurrent chats report cached_tokens of at least
# 100 (the system prompt) (the first reads it, the others restore it), and
# every second-round chat reports some. batch: chats sharing a system prompt,
# at --parallel 1 and 2, --ram min --chunk 3 with an explicit cache: the same
# generated ids as without the cache, cached_tokens > 0 after the first line.
# run --json reports cached_tokens; plan shows the prompt cache.
# --prompt-cache DIR, each run a new process (a restart): a run warm from the
# directory gives a cold run's generated ids and first logits (--dump-logits,
# byte for byte) and reports the whole prompt cached (and a longer prompt its
# prefix); a flipped byte, a truncated entry, another model's entry put under
# this model's name, an entry of other weights of the same model (a byte
# changed in a shard): a warning naming it, the cold bits, exit 0; ENOSPC halfway
# through a write (the test hook --fault-cache-write) and a real failing write
# (ulimit -f): a warning, no file left; --prompt-cache-size: the directory stays
# under it over many prompts. chat: a restarted chat resuming a saved
# conversation with the same message restores the turn from the directory and
# answers the same. serve: a restarted server answers a repeated chat the same,
# with cached_tokens, and its log line shows them.
# Last line: "t_prefix: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=/usr/bin/python3
M=models/k3-tiny
. tests/lib_serve.sh
. tests/lib.sh
[ -x "$BIN" ] || { bad "$BIN not found"; echo "t_prefix: $pass passed, $fail failed"; exit 1; }

SYS="You are a careful assistant. Answer in the words of the old books: and the LORD spake unto Moses, saying, speak unto the children of Israel, and say unto them, when any man of you bring an offering unto the LORD, ye shall bring your offering of the cattle, even of the herd, and of the flock. In the beginning God created the heaven and the earth."
chat() {    # question, max_tokens, extra messages (JSON, may be empty) -> request body
    $PY - "$SYS" "$1" "$2" "${3:-}" <<'EOF'
import json, sys
sys_p, q, n, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
msgs = [{"role": "system", "content": sys_p}] + (json.loads(extra) if extra else []) + [{"role": "user", "content": q}]
print(json.dumps({"model": "k3-tiny", "messages": msgs, "max_tokens": n, "temperature": 0, "logprobs": True, "top_logprobs": 2}))
EOF
}
summary() {     # file -> text, finish, usage counts, logprobs | cached tokens
    $PY - "$1" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    ch, u = d["choices"][0], d["usage"]
    print(repr(ch["message"]["content"]), ch["finish_reason"], u["completion_tokens"], u["prompt_tokens"],
          json.dumps(ch.get("logprobs"), sort_keys=True), "|", u["prompt_tokens_details"]["cached_tokens"])
except Exception as e:
    print("unparsable:", e, "|", -1)
EOF
}

serve_start warm $M --parallel 4
serve_start cold $M --parallel 4 --prompt-cache-ram 0
uw=$(cat "$tmp/url.warm"); uc=$(cat "$tmp/url.cold")
if [ -z "$uw" ] || [ -z "$uc" ]; then
    bad "the servers did not start: $(tail -n 3 "$tmp/srv.warm.log" "$tmp/srv.cold.log")"
    echo "t_prefix: $pass passed, $fail failed"; exit 1
fi
# the system prompt alone is about 110 tokens: a chat that reuses it reports at least 100
n_sys=100
R1=("Who spake unto Moses?" "What did God create?" "Of the herd, or of the flock?" "Say it again, slowly.")
R2=("Who spake unto Moses?|" "Which offering, then?|" "Say it again, slowly.|[{\"role\":\"user\",\"content\":\"Before that: hello.\"},{\"role\":\"assistant\",\"content\":\"And the LORD spake.\"}]"
    "Say it again, quickly.|[{\"role\":\"user\",\"content\":\"Before that: hello.\"},{\"role\":\"assistant\",\"content\":\"And the LORD spake.\"}]")
send_round() {  # url, tag, questions... (all at once)
    local url=$1 tag=$2 i=0 q pids=
    shift 2
    for q in "$@"; do
        chat "${q%%|*}" 12 "$(case "$q" in *\|*) echo "${q#*|}";; esac)" > "$tmp/body.$tag.$i"
        curl -s --max-time 120 "$url/v1/chat/completions" -H 'Content-Type: application/json' -d @"$tmp/body.$tag.$i" > "$tmp/$tag.$i" &
        pids="$pids $!"
        i=$((i + 1))
    done
    wait $pids
}
send_round "$uw" w1 "${R1[@]}"
send_round "$uc" c1 "${R1[@]}"
send_round "$uw" w2 "${R2[@]}"
send_round "$uc" c2 "${R2[@]}"
n_shared=0
for r in 1 2; do
    for i in 0 1 2 3; do
        w=$(summary "$tmp/w$r.$i"); c=$(summary "$tmp/c$r.$i")
        case "$c" in unparsable*) bad "round $r chat $i: no answer without the cache: $c"; continue ;; esac
        [ "${w%|*}" = "${c%|*}" ] && ok || bad "round $r chat $i: with the cache '${w%|*}', without '${c%|*}'"
        [ "${c##*| }" = 0 ] && ok || bad "round $r chat $i: the cache-less server reports ${c##*| } cached"
        cw=${w##*| }
        if [ "$r" = 1 ] && [ "$cw" -ge "$n_sys" ]; then n_shared=$((n_shared + 1)); fi
        if [ "$r" = 2 ]; then [ "$cw" -ge "$n_sys" ] && ok || bad "round 2 chat $i: cached $cw < the system prompt's $n_sys"; fi
    done
done
[ "$n_shared" -ge 3 ] && ok || bad "four concurrent chats sharing a system prompt of $n_sys tokens: $n_shared reused it"

# batch: chats sharing a system prompt, with and without the cache
for i in 0 1 2 3 4; do
    $PY - "$SYS" "$i" <<'EOF'
import json, sys
q = ["Who spake?", "What offering?", "Who spake?", "And the flock?", "Of the cattle?"][int(sys.argv[2])]
print(json.dumps({"messages": [{"role": "system", "content": sys.argv[1]}, {"role": "user", "content": q}], "max_tokens": 8}))
EOF
done > "$tmp/in.jsonl"
gen_ids() { $PY -c 'import json,sys; [print(d["index"], json.dumps(d["generated_ids"]).replace(" ", ""), d.get("cached_tokens")) for d in map(json.loads, sys.stdin)]'; }
for args in "--parallel 1" "--parallel 2" "--parallel 2 --ram min --chunk 3 --prompt-cache-ram 64M"; do
    "$BIN" batch $M --input "$tmp/in.jsonl" $args --quiet | gen_ids > "$tmp/bw" 2>&1
    "$BIN" batch $M --input "$tmp/in.jsonl" $args --prompt-cache-ram 0 --quiet | gen_ids > "$tmp/bc" 2>&1
    diff <(cut -d' ' -f1-2 "$tmp/bw") <(cut -d' ' -f1-2 "$tmp/bc") > /dev/null &&
        [ "$(wc -l < "$tmp/bw")" = 5 ] && ok || bad "batch $args: generated ids differ with the cache: $(paste "$tmp/bw" "$tmp/bc")"
    [ "$(awk '{print $NF}' "$tmp/bc" | sort -u)" = 0 ] && ok || bad "batch $args without the cache: cached $(awk '{print $NF}' "$tmp/bc")"
    n_hit=$(awk 'NR > 1 && $NF > 0' "$tmp/bw" | wc -l)
    [ "$n_hit" -ge 3 ] && ok || bad "batch $args: $n_hit of the 4 later lines reused a prefix: $(cat "$tmp/bw")"
done

# run --json reports it; plan shows the cache
"$BIN" run $M --prompt "And the LORD" --max-tokens 2 --json --quiet > "$tmp/run.json" 2>/dev/null
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["stats"]["cached_tokens"] == 0 else 1)' "$tmp/run.json" && ok ||
    bad "run --json: no cached_tokens: $(head -c 300 "$tmp/run.json")"
"$BIN" plan $M --ram 1G | grep -q '^prompt cache: ' && ok || bad "plan shows no prompt cache line"
"$BIN" plan $M --ram min | grep -q '^prompt cache: 0' && ok || bad "plan --ram min: the automatic cache is not 0"

# ---- --prompt-cache DIR: each run a new process ----
TD=${MS_TESTDATA:-$BUILD/testdata}
A=$TD/a; C=$TD/c
IDS=3,14,15,92,65,35,89,79,32,38,46,26,43,7,1,200,45,45
runj() {    # name model args... -> $tmp/NAME.{json,bin,err}, exit code in $tmp/NAME.rc
    local name=$1 model=$2
    shift 2
    "$BIN" run "$model" --max-tokens 8 --json --dump-logits "$tmp/$name.bin" "$@" > "$tmp/$name.json" 2> "$tmp/$name.err"
    echo $? > "$tmp/$name.rc"
}
gen_of() { $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["generated_ids"])' "$tmp/$1.json" 2>/dev/null; }
cached_of() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["stats"]["cached_tokens"])' "$tmp/$1.json" 2>/dev/null || echo -1; }
same() {    # name ref: exit 0, the same generated ids and first logits
    [ "$(cat "$tmp/$1.rc")" = 0 ] && [ -n "$(gen_of "$1")" ] && [ "$(gen_of "$1")" = "$(gen_of "$2")" ] &&
        cmp -s "$tmp/$1.bin" "$tmp/$2.bin"
}
entry() { ls "$1"/*-"$2".mspc 2>/dev/null | head -n 1; }    # dir n -> the file of an entry of n positions
dir_bytes() { find "$1" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
D=$tmp/pc
runj cold $A --ids $IDS --prompt-cache-ram 0
runj cold2 $A --ids $IDS,5,6,7 --prompt-cache-ram 0
runj w1 $A --ids $IDS --prompt-cache $D
same w1 cold && [ "$(cached_of w1)" = 0 ] && [ -n "$(entry $D 18)" ] && ok ||
    bad "first run with --prompt-cache: $(cat "$tmp/w1.err") cached $(cached_of w1), files: $(ls $D)"
runj w2 $A --ids $IDS --prompt-cache $D
same w2 cold && [ "$(cached_of w2)" = 18 ] && ok || bad "a new run of the same prompt: cached $(cached_of w2), ids $(gen_of w2) vs $(gen_of cold)"
runj w3 $A --ids $IDS,5,6,7 --prompt-cache $D
same w3 cold2 && [ "$(cached_of w3)" = 18 ] && ok || bad "a longer prompt: cached $(cached_of w3), ids $(gen_of w3) vs $(gen_of cold2)"
# a flipped byte, a cut file, another model's entry under this model's name
f=$(entry $D 18)
$PY -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x40; open(p, "wb").write(b)' "$f"
runj w4 $A --ids $IDS --prompt-cache $D
same w4 cold && [ "$(cached_of w4)" = 0 ] && grep -q "prompt cache: .*checksum mismatch" "$tmp/w4.err" && ok ||
    bad "a flipped byte: cached $(cached_of w4), stderr: $(cat "$tmp/w4.err")"
f=$(entry $D 18)
truncate -s 1000 "$f"
runj w5 $A --ids $IDS --prompt-cache $D
same w5 cold && [ "$(cached_of w5)" = 0 ] && grep -q "prompt cache: .*truncated" "$tmp/w5.err" && ok ||
    bad "a truncated entry: cached $(cached_of w5), stderr: $(cat "$tmp/w5.err")"
"$BIN" run $C --ids $IDS --max-tokens 1 --prompt-cache $tmp/pc_c --quiet > /dev/null 2>&1
f=$(entry $D 18); g=$(entry $tmp/pc_c 18)
if [ -n "$f" ] && [ -n "$g" ]; then
    cp "$g" "$f"
    runj w6 $A --ids $IDS --prompt-cache $D
    same w6 cold && [ "$(cached_of w6)" = 0 ] && grep -q "prompt cache: .*another model" "$tmp/w6.err" && ok ||
        bad "another model's entry: cached $(cached_of w6), stderr: $(cat "$tmp/w6.err")"
else
    bad "no entries to swap: '$f' '$g'"
fi
runj w7 $A --ids $IDS --prompt-cache $D
same w7 cold && [ "$(cached_of w7)" = 18 ] && ! grep -q warning "$tmp/w7.err" && ok ||
    bad "after the refused entries were recomputed: cached $(cached_of w7), stderr: $(cat "$tmp/w7.err")"
# stale: the same model (config, tensor table) with other weights: one byte near the end of a shard
cp -r "$A" "$tmp/a2"
last=$(ls "$tmp"/a2/*.safetensors | tail -n 1)
$PY -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-3] ^= 0x01; open(p, "wb").write(b)' "$last"
runj cold_a2 "$tmp/a2" --ids $IDS --prompt-cache-ram 0
runj w_a2 "$tmp/a2" --ids $IDS --prompt-cache $D
same w_a2 cold_a2 && [ "$(cached_of w_a2)" = 0 ] && grep -q "prompt cache: .*other weights (stale" "$tmp/w_a2.err" && ok ||
    bad "an entry of other weights: cached $(cached_of w_a2), stderr: $(cat "$tmp/w_a2.err")"
# a full disk: the hook, and a real write failure (the file size limit)
runj w8 $A --ids $IDS --prompt-cache $tmp/pc_full --fault-cache-write 1
same w8 cold && grep -q "not written: No space left on device" "$tmp/w8.err" && [ -z "$(ls -A $tmp/pc_full)" ] && ok ||
    bad "ENOSPC while writing: files '$(ls -A $tmp/pc_full)', stderr: $(cat "$tmp/w8.err")"
(trap '' XFSZ; ulimit -f 16; runj w9 $A --ids $IDS --prompt-cache $tmp/pc_fsize)
same w9 cold && grep -q "not written: File too large" "$tmp/w9.err" && [ -z "$(ls -A $tmp/pc_fsize)" ] && ok ||
    bad "a write over the file size limit: files '$(ls -A $tmp/pc_fsize)', stderr: $(cat "$tmp/w9.err")"
# the cap: ~2 entries of model a under eight prompts
n_over=0; n_files=0
for i in 1 2 3 4 5 6 7 8; do
    "$BIN" run $A --ids $IDS,$i,$((i * 7)) --max-tokens 2 --prompt-cache $tmp/pc_cap --prompt-cache-size 150K --quiet > /dev/null 2>&1
    [ "$(dir_bytes $tmp/pc_cap)" -le 153600 ] || n_over=$((n_over + 1))
    n_files=$(ls $tmp/pc_cap | wc -l)
done
[ "$n_over" = 0 ] && [ "$n_files" -ge 1 ] && ok || bad "--prompt-cache-size 150K: over it $n_over times, $(dir_bytes $tmp/pc_cap) bytes in $n_files files"

# chat: a restarted chat resuming a saved conversation
printf 'Hello there\n/save %s\n' "$tmp/conv.sess" | "$BIN" chat $M --max-tokens 6 --prompt-cache $tmp/pc_chat > "$tmp/chat0" 2> "$tmp/chat0.err"
for i in 1 2; do
    printf 'And again\n' | "$BIN" chat $M --max-tokens 6 --prompt-cache $tmp/pc_chat --load-session "$tmp/conv.sess" > "$tmp/chat$i" 2> "$tmp/chat$i.err"
done
printf 'And again\n' | "$BIN" chat $M --max-tokens 6 --prompt-cache-ram 0 --load-session "$tmp/conv.sess" > "$tmp/chatc" 2> /dev/null
reused=$(sed -n 's/.*prompt cache: \([0-9]*\) tokens reused.*(\([0-9]*\) from disk).*/\1 \2/p' "$tmp/chat2.err")
[ -s "$tmp/chat1" ] && cmp -s "$tmp/chat1" "$tmp/chatc" && cmp -s "$tmp/chat2" "$tmp/chatc" && [ "${reused% *}" -gt 0 ] 2>/dev/null &&
    [ "${reused#* }" = 1 ] && ok || bad "chat resumed twice: '$(cat "$tmp/chat1")' '$(cat "$tmp/chat2")' vs '$(cat "$tmp/chatc")', reused '$reused'"

# serve: a restarted server
chat "Who spake unto Moses?" 8 "" > "$tmp/body.d"
serve_start d1 $M --prompt-cache $tmp/pc_srv
u1=$(cat "$tmp/url.d1")
curl -s --max-time 60 "$u1/v1/chat/completions" -H 'Content-Type: application/json' -d @"$tmp/body.d" > "$tmp/d1"
kill ${PIDS##* } 2>/dev/null
# not --quiet: the per-request log line
"$BIN" serve $M --port 0 --prompt-cache $tmp/pc_srv > "$tmp/srv.d2.log" 2>&1 &
PIDS="$PIDS $!"
disown $!
for _ in $(seq 300); do grep -qs 'listening on' "$tmp/srv.d2.log" && break; sleep 0.1; done
u2=$(grep -o 'listening on http://[^/]*' "$tmp/srv.d2.log" | head -n 1 | sed 's|.*listening on ||')
curl -s --max-time 60 "$u2/v1/chat/completions" -H 'Content-Type: application/json' -d @"$tmp/body.d" > "$tmp/d2"
s1=$(summary "$tmp/d1"); s2=$(summary "$tmp/d2")
case "$s1" in unparsable*) bad "the first server: $s1" ;; *)
    [ "${s1%|*}" = "${s2%|*}" ] && [ "${s1##*| }" = 0 ] && [ "${s2##*| }" -ge "$n_sys" ] && ok ||
        bad "a restarted server: '$s1' then '$s2'" ;;
esac
grep -Eq "\(cached [1-9][0-9]*\)" "$tmp/srv.d2.log" && ok || bad "the restarted server's log shows no cached tokens: $(tail -n 3 "$tmp/srv.d2.log")"

echo "t_prefix: $pass passed, $fail failed"
[ "$fail" = 0 ]
