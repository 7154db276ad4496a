#!/usr/bin/env bash
# tests/t_parallel.sh - `serve --parallel 3`: requests served together answer
# exactly as one at a time.
#
# Starts `serve --parallel 1 --speculate 0` and `serve --parallel 3 --speculate 4` (steps in
# which every slot decodes verify all their drafts in one pass) on the bundled
# model, sends the same 7 requests to each, all at once (greedy and seeded
# completions, a stop string, echo + logprobs, chat plain and streamed with
# logprobs, a length limit), and compares each answer's text, finish reason, token
# counts and log-probabilities. Then /health of the parallel server must show
# decode steps that served more than one request (decode_tokens > decode_steps),
# and of the other exactly one token per step. A second round on the parallel
# server (the same requests again, at once) must give the same answers (sessions
# reused or not). Requests with n = 3 (completions and chat, streamed and not):
# choice i equals the n = 1 answer with seed + i, usage sums the choices, the
# prompt is read once (/health prompt_tokens_read); the --parallel 1 server
# refuses n = 3. Last line: "t_parallel: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=/usr/bin/python3
M=models/k3-tiny
. tests/lib_serve.sh                   # $tmp, serve_start, and the cleanup of both
. tests/lib.sh
[ -x "$BIN" ] || { bad "$BIN not found"; echo "t_parallel: $pass passed, $fail failed"; exit 1; }

serve_start one $M --parallel 1 --speculate 0
serve_start par $M --parallel 3 --speculate 4
u1=$(cat "$tmp/url.one"); u3=$(cat "$tmp/url.par")
if [ -z "$u1" ] || [ -z "$u3" ]; then
    bad "the servers did not start: $(tail -n 3 "$tmp/srv.one.log" "$tmp/srv.par.log")"
    echo "t_parallel: $pass passed, $fail failed"; exit 1
fi

P1="And the LORD spake unto Moses, saying, And the LORD spake unto"
P2="In the beginning God created"
P3="And it came to pass"
BODIES=(
    "completions|{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}"
    "completions|{\"model\":\"k3-tiny\",\"prompt\":\"$P2\",\"max_tokens\":33,\"temperature\":0.9,\"seed\":5}"
    "completions|{\"model\":\"k3-tiny\",\"prompt\":\"$P3\",\"max_tokens\":40,\"temperature\":0,\"stop\":[\"Moses\"]}"
    "completions|{\"model\":\"k3-tiny\",\"prompt\":\"$P2 the heaven\",\"max_tokens\":6,\"temperature\":0,\"echo\":true,\"logprobs\":2}"
    "chat/completions|{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"$P3\"}],\"max_tokens\":24,\"temperature\":0.7,\"seed\":11}"
    "chat/completions|{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"$P1\"}],\"max_tokens\":30,\"temperature\":0,\"stream\":true,\"logprobs\":true,\"top_logprobs\":2}"
    "completions|{\"model\":\"k3-tiny\",\"prompt\":\"$P1 Aaron\",\"max_tokens\":50,\"temperature\":0,\"ignore_eos\":true,\"frequency_penalty\":0.5}"
)


round() {   # url, tag: all requests at once
    local i=0 b ep body pids=
    for b in "${BODIES[@]}"; do
        ep=${b%%|*}; body=${b#*|}
        curl -s --max-time 120 "$1/v1/$ep" -H 'Content-Type: application/json' -d "$body" > "$tmp/$2.$i" &
        pids="$pids $!"
        i=$((i + 1))
    done
    wait $pids        # not the servers
}
round "$u1" one
round "$u3" par
round "$u3" par2
for i in "${!BODIES[@]}"; do
    a=$(serve_summary "$tmp/one.$i"); b=$(serve_summary "$tmp/par.$i"); c=$(serve_summary "$tmp/par2.$i")
    case "$a" in unparsable*|"") bad "request $i: no answer from --parallel 1: $a"; continue ;; esac
    [ "$a" = "$b" ] && ok || bad "request $i: --parallel 3 answered '$b', --parallel 1 '$a'"
    [ "$a" = "$c" ] && ok || bad "request $i: --parallel 3, second round, answered '$c', --parallel 1 '$a'"
done

# n choices: choice i is the answer of the same request with n = 1 and seed + i; the
# usage counts the prompt once and every choice's tokens; --parallel 1 refuses n = 3
nreq() {    # url, endpoint, n, seed, stream
    local body
    if [ "$2" = completions ]; then
        body="{\"model\":\"k3-tiny\",\"prompt\":\"$P2\",\"max_tokens\":20,\"temperature\":0.9,\"n\":$3,\"seed\":$4,\"stream\":$5,\"logprobs\":1,\"echo\":true}"
    else
        body="{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"$P3\"}],\"max_tokens\":16,\"temperature\":0.8,\"n\":$3,\"seed\":$4,\"stream\":$5}"
    fi
    curl -s --max-time 120 "$1/v1/$2" -H 'Content-Type: application/json' -d "$body"
}
choices() {     # file -> one line per choice index: text, finish reason (streams joined)
    $PY - "$1" <<'EOF'
import json, sys
raw = open(sys.argv[1]).read()
out = {}
if raw.lstrip().startswith("data:"):
    for line in raw.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        d = json.loads(line[6:])
        for ch in d.get("choices", []):
            t, f, lp = out.get(ch["index"], ("", None, []))
            t += ch.get("text") or (ch.get("delta") or {}).get("content") or ""
            lp += ((ch.get("logprobs") or {}).get("token_logprobs")) or []
            out[ch["index"]] = (t, ch.get("finish_reason") or f, lp)
        if d.get("usage") and not d.get("choices"):
            pass
else:
    d = json.loads(raw)
    for ch in d["choices"]:
        t = ch["text"] if "text" in ch else ch["message"]["content"]
        out[ch["index"]] = (t, ch["finish_reason"], (ch.get("logprobs") or {}).get("token_logprobs") or [])
    print("usage", d["usage"]["completion_tokens"], d["usage"]["prompt_tokens"])
for i in sorted(out):
    print(i, repr(out[i][0]), out[i][1], json.dumps(out[i][2]))
EOF
}
for ep in completions chat/completions; do
    for st in false true; do
        nreq "$u3" $ep 3 5 $st > "$tmp/n3"
        got=$(choices "$tmp/n3" | grep -v '^usage')
        want=""
        sum=0
        for i in 0 1 2; do
            nreq "$u3" $ep 1 $((5 + i)) $st > "$tmp/n1.$i"
            line=$(choices "$tmp/n1.$i" | grep -v '^usage' | sed "s/^0 /$i /")
            want=$(printf '%s\n%s' "$want" "$line")
            [ "$st" = false ] && sum=$((sum + $(choices "$tmp/n1.$i" | grep '^usage' | cut -d' ' -f2)))
        done
        want=$(printf '%s' "$want" | sed '/^$/d')
        [ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "n = 3 ($ep, stream $st): '$got' != '$want'"
        if [ "$st" = false ]; then
            u=$(choices "$tmp/n3" | grep '^usage' | cut -d' ' -f2)
            [ "$u" = "$sum" ] && ok || bad "n = 3 ($ep): completion_tokens $u, the three answers $sum"
        fi
    done
done
# the choices read the prompt once: choice 0 reads it, the others start from a copy
pr0=$(curl -s "$u3/health" | $PY -c "import json,sys; print(json.load(sys.stdin)['prompt_tokens_read'])")
nreq "$u3" completions 3 9 false > "$tmp/n3b"
pr1=$(curl -s "$u3/health" | $PY -c "import json,sys; print(json.load(sys.stdin)['prompt_tokens_read'])")
np=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['usage']['prompt_tokens'])" "$tmp/n3b")
[ -n "$np" ] && [ $((pr1 - pr0)) -le "$np" ] && ok || bad "n = 3 read $((pr1 - pr0)) prompt tokens for a $np-token prompt"
code=$(curl -s -o "$tmp/n1err" -w '%{http_code}' "$u1/v1/completions" -H 'Content-Type: application/json' \
       -d "{\"model\":\"k3-tiny\",\"prompt\":\"$P2\",\"max_tokens\":4,\"n\":3}")
[ "$code" = 400 ] && grep -q -- '--parallel 3' "$tmp/n1err" && ok || bad "--parallel 1 answered n = 3 with $code: $(cat "$tmp/n1err")"

# batched steps happened on the parallel server, never on the other
h1=$(curl -s "$u1/health"); h3=$(curl -s "$u3/health")
steps() { printf '%s' "$1" | $PY -c "import json,sys; d=json.load(sys.stdin); print(d['parallel'], d['decode_steps'], d['decode_tokens'])"; }
read -r p1 s1 t1 <<< "$(steps "$h1")"
read -r p3 s3 t3 <<< "$(steps "$h3")"
[ "$p1" = 1 ] && [ "$p3" = 3 ] && ok || bad "/health parallel: $h1 / $h3"
[ "${s1:-0}" -gt 0 ] && [ "$s1" = "$t1" ] && ok || bad "--parallel 1: $t1 tokens in $s1 steps (one each expected)"
[ "${s3:-0}" -gt 0 ] && [ "$t3" -gt "$s3" ] && ok || bad "--parallel 3: $t3 tokens in $s3 steps: no step served two requests"
echo "parallel: $t3 decode tokens in $s3 steps (--parallel 1: $t1 in $s1)"
grep -q "ERROR: AddressSanitizer\|runtime error:\|ThreadSanitizer" "$tmp"/srv.*.log && bad "a sanitizer report in the server logs" || ok
echo "t_parallel: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
