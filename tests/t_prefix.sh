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
echo "t_prefix: $pass passed, $fail failed"
[ "$fail" = 0 ]
