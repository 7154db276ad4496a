#!/usr/bin/env bash
# tests/t_slow.sh - `serve` under slow and many clients, duplicate JSON keys, and a
# server that cannot open its slots (docs/SERVER.md, "Slow and many clients").
#
# Starts `serve models/k3-tiny --header-timeout 2` (every other limit at its default)
# and runs tests/server/slow_check.py against it:
#   dupkey     a body with a repeated key (top level, nested) -> 400 naming the key;
#   keepalive  an idle kept-alive connection outlives the deadline; its next request,
#              trickled, is cut about 2 s after its first byte;
#   burst      200 simultaneous chat requests (more than --max-connections 128, and
#              than 1 slot + --max-queue 64): every one answered - 200, 429 queue_full
#              or 503 server_busy, with Retry-After - none dropped;
#   per_ip     --max-conn-per-ip 64: the 65th connection of one address is closed at
#              once, another address is served;
#   slowloris  130 connections trickling a byte a second (re-opened when cut): every
#              /health probe meanwhile answers 200 within 2 s, and every trickling
#              connection is cut 2 s (the deadline) after it opened.
# Then, unless the binary is a sanitizer build (its shadow memory makes an address-space
# cap meaningless): `serve --parallel 8 --ctx 65536` under `prlimit --as=128M` (the
# engine opens, its 8 sessions do not fit) exits 2 naming the session, without
# 'listening'; under 1G the same command listens and answers.
# Last line: "t_slow: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=${PYTHON:-/usr/bin/python3}
export PYTHONDONTWRITEBYTECODE=1
M=models/k3-tiny
. tests/lib.sh
. tests/lib_serve.sh                   # $tmp, serve_start, and the cleanup

[ -x "$BIN" ] || { bad "$BIN is not built"; finish; }
for a in "--header-timeout 0" "--header-timeout x" "--max-conn-per-ip -1" "--max-connections 0"; do
    "$BIN" serve $M $a --port 0 > "$tmp/opt.log" 2>&1; rc=$?
    [ $rc -eq 2 ] && grep -q -- "${a%% *}" "$tmp/opt.log" && ok || bad "serve $a: exit $rc: $(head -c 200 "$tmp/opt.log")"
done
serve_start a $M --header-timeout 2
url=$(cat "$tmp/url.a")
[ -n "$url" ] || { bad "the server did not start: $(tail -n 5 "$tmp/srv.a.log")"; finish; }
port=${url##*:}

# each part prints ok / FAIL lines and "NAME: N passed, N failed"
part() {
    local out p f
    out=$(timeout 120 "$PY" tests/server/slow_check.py "$1" 127.0.0.1 "$port" "${@:2}" 2>&1)
    printf '%s\n' "$out" | grep -v '^ok:'
    p=$(printf '%s\n' "$out" | grep -cE '^ok:'); f=$(printf '%s\n' "$out" | grep -cE '^FAIL:')
    pass=$((pass + p)); fail=$((fail + f))
    printf '%s\n' "$out" | grep -qE "^$1: [0-9]+ passed, 0 failed$" || [ "$f" -gt 0 ] || bad "slow_check.py $1 ended early"
}
part dupkey k3-tiny
part keepalive 2
part burst 200 k3-tiny
part per_ip 64
part slowloris 130 2
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/health")
[ "$code" = 200 ] && ok || bad "/health after the slow clients: $code"
grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:|WARNING: ThreadSanitizer' "$tmp/srv.a.log" &&
    bad "a sanitizer report: $(grep -m1 -A 8 -E 'Sanitizer|runtime error' "$tmp/srv.a.log")" || ok

# ---- the slots do not fit: exit 2 before listening --------------------------------------------
if [ "${MS_SANITIZER:-0}" = 1 ] || nm "$BIN" 2>/dev/null | grep -qE ' (__asan_init|__tsan_init|__msan_init)$' ||
   ldd "$BIN" 2>/dev/null | grep -qE 'lib(asan|tsan|msan)'; then
    echo "t_slow: the address-space cap part is skipped: $BIN is a sanitizer build"
    finish
fi
# One malloc arena: glibc reserves 64 MiB of address space for each arena a thread
# creates under contention, which threads do or not as they are scheduled. Once, on a
# loaded machine, the 128 MiB cap was reached at open (the draft index) instead of at
# the sessions (not reproduced in 12 runs since); one arena takes the schedule out.
capped() {   # AS_MB -> runs serve under the cap for at most 30 s; sets rc, log in $tmp/cap.log
    MALLOC_ARENA_MAX=1 timeout 30 prlimit --as=$(($1 << 20)) "$BIN" serve $M --port 0 --quiet --threads 2 --parallel 8 --ctx 65536 \
        > "$tmp/cap.log" 2>&1 &
    local p=$!
    for _ in $(seq 300); do grep -qs 'listening on' "$tmp/cap.log" && break; kill -0 $p 2>/dev/null || break; sleep 0.1; done
    if grep -q 'listening on' "$tmp/cap.log"; then
        local u
        u=$(grep -o 'listening on http://[^ ]*/v1' "$tmp/cap.log" | sed 's|listening on ||')
        capcode=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 "$u/chat/completions" \
            -d '{"model":"k3-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2}')
        kill -TERM $p
    fi
    wait $p; rc=$?
}
capped 128
if [ $rc -eq 2 ] && grep -q 'cannot open session [0-9]* of 8' "$tmp/cap.log" && ! grep -q 'listening' "$tmp/cap.log"; then ok
else bad "under --as=128M: exit $rc, expected 2 naming the session before listening: $(head -c 400 "$tmp/cap.log")"; fi
capcode=
capped 1024
[ $rc -eq 0 ] && [ "$capcode" = 200 ] && ok ||
    bad "under --as=1G the same server should listen and answer 200: exit $rc, status '$capcode': $(head -c 400 "$tmp/cap.log")"
finish
