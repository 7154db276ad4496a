#!/usr/bin/env bash
# tests/t_opts.sh - the one option parser (src/cli/opts.c) as users meet it:
#   - every flag's bad values, table-driven, in every command that takes it: exit 2 and one
#     line on stderr naming the flag and the value, before anything is opened;
#   - the units of sizes (512M, 8G, 8GiB, 8GB, 1.5G, min, auto, all, max) accepted alike by
#     run and serve, and refused alike (0, -5G, foo); equal spellings give equal plans;
#   - every command's --help (exit 0, its own usage line and flags), moestream --help and
#     --version (version, commit, kernel tables, this CPU's choice);
#   - the checks made before the model loads or any token is printed: the context against
#     the prompt and --max-tokens, token ids against the vocabulary;
#   - plan --ram min prints the plan run --ram min opens with, and a refusal once;
#   - small frictions: --prompt-file names the reason, tokenize --decode ends its line and
#     names a bad id, tokenize FILE... prints a line per file (and stops at an unreadable
#     one), --count their lengths, trace prints no table before an error.
# Last line: "t_opts: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
M=models/k3-tiny
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/lib.sh

# usage_error CMD FLAG VALUE [ARGS...]: exit 2, nothing on stdout, one line on stderr that
# names the flag and the value
usage_error() {
    local cmd=$1 flag=$2 val=$3; shift 3
    timeout 20 "$BIN" "$cmd" "$@" "$flag" "$val" > "$tmp/out" 2> "$tmp/err"; local rc=$?
    local lines; lines=$(wc -l < "$tmp/err")
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [ ! -s "$tmp/out" ] && grep -qF -- "$flag" "$tmp/err" \
       && grep -qF -- "'$val'" "$tmp/err"; then ok
    else bad "$cmd $* $flag '$val': exit $rc, $lines stderr lines: $(head -c 300 "$tmp/err")"; fi
}

# ---- bad values: flag, then the values each command must refuse ---------------------------
ENGINE_BAD=(
    "--ram foo -5G 0 8X 1.5.5G -1 nan 1e3G 0x10G"
    "--threads 0 -1 abc 1025 2x"
    "--max-context 0 -4 x"
    "--ctx 0"
    "--trunk-ram 0 foo -1M"
    "--expert-ram x 0"
    "--io foo"
    "--cache fifo"
    "--kernels sse9"
    "--queue-depth 0 x"
    "--speculate 32 -1"
    "--chunk 0 65537"
    "--parallel 0 65"
    "--stage-groups 65 -1"
    "--fault bogus eio:x"
)
SAMPLE_BAD=(
    "--temperature nan -1 inf 101 x"
    "--top-k -3 1.5"
    "--top-p 0 1.5 nan"
    "--min-p 2 -0.1"
    "--repeat-penalty 0 101"
    "--frequency-penalty 3 -2.5"
    "--presence-penalty -3"
    "--seed -1 x"
)
# every value in run; the first of each in every other command that takes the table (one
# table, one parser: the other values would only repeat run's path)
for row in "${ENGINE_BAD[@]}"; do
    set -- $row; flag=$1; shift
    for v in "$@"; do usage_error run "$flag" "$v" $M; done
    for cmd in serve batch perplexity tokenize plan; do usage_error $cmd "$flag" "$1" $M; done
done
for row in "${SAMPLE_BAD[@]}"; do
    set -- $row; flag=$1; shift
    for v in "$@"; do usage_error run "$flag" "$v" $M; done
    usage_error batch "$flag" "$1" $M
done
for v in -1 x 1e3; do usage_error run --max-tokens "$v" $M; usage_error batch --max-tokens "$v" $M; done
usage_error perplexity --max-tokens -1 $M
usage_error run --stop "" $M
usage_error run --stop e $M --stop a --stop b --stop c --stop d
usage_error serve --port 99999 $M
usage_error serve --max-body 1 $M
usage_error serve --max-header 10 $M
usage_error serve --thinking maybe $M
usage_error serve --shutdown-timeout -1 $M
usage_error serve --idle-timeout 0 $M
usage_error serve --max-queue 0 $M
usage_error serve --max-tokens 0 $M
usage_error plan --pipeline 0 $M
usage_error trace --capacity 0 "$tmp/none"
usage_error trace --policy fifo "$tmp/none"
# a missing value, an unknown option, a second MODEL_DIR: one line, exit 2
for cmd in run batch serve plan perplexity tokenize; do
    "$BIN" $cmd $M --ram > "$tmp/out" 2> "$tmp/err"; rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q -- "--ram needs a value" "$tmp/err" && ok \
        || bad "$cmd --ram without a value: exit $rc: $(cat "$tmp/err")"
    "$BIN" $cmd $M --bogus > "$tmp/out" 2> "$tmp/err"; rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q -- "unknown option '--bogus'" "$tmp/err" && ok \
        || bad "$cmd --bogus: exit $rc: $(cat "$tmp/err")"
done
"$BIN" run $M $M --ids 1 > /dev/null 2> "$tmp/err"; [ $? -eq 2 ] && grep -q "unexpected argument" "$tmp/err" && ok \
    || bad "a second MODEL_DIR: $(cat "$tmp/err")"

# ---- units: the same spellings accepted (and refused) by run and serve ----------------------
# (--help after the value: the value is parsed first, then the help ends the command)
for v in 512M 8G 8GiB 8GB 8g 1.5G 4096M 1T min auto all max; do
    for cmd in run serve; do
        "$BIN" $cmd $M --ram "$v" --help > /dev/null 2> "$tmp/err" && ok || bad "$cmd --ram $v refused: $(cat "$tmp/err")"
    done
    "$BIN" run $M --trunk-ram "$v" --help > /dev/null 2>&1 || case $v in min|auto|all|max) ok ;; *) bad "--trunk-ram $v refused" ;; esac
done
"$BIN" serve $M --max-body 1MiB --max-header 16KiB --help > /dev/null 2>&1 && ok || bad "serve --max-body 1MiB refused"
p1=$("$BIN" plan $M --ram 8G); p2=$("$BIN" plan $M --ram 8GiB); p3=$("$BIN" plan $M --ram 8192M); p4=$("$BIN" plan $M --ram=8GB)
[ -n "$p1" ] && [ "$p1" = "$p2" ] && [ "$p1" = "$p3" ] && [ "$p1" = "$p4" ] && ok || bad "8G, 8GiB, 8192M, 8GB give different plans"
pa=$("$BIN" plan $M --ram all); pm=$("$BIN" plan $M --ram max); pn=$("$BIN" plan $M)
[ "$pa" = "$pn" ] && [ "$pm" = "$pn" ] && ok || bad "--ram all / max differ from no --ram"

# ---- help and version ---------------------------------------------------------------------
# (chat's options are parsed in cli/chat.c, which moves to this parser on its own)
for cmd in run batch serve tokenize perplexity plan trace verify pack; do
    "$BIN" $cmd --help > "$tmp/h" 2> "$tmp/err"; rc=$?
    [ $rc -eq 0 ] && head -n 1 "$tmp/h" | grep -q "^usage: moestream $cmd" && [ ! -s "$tmp/err" ] && ok \
        || bad "$cmd --help: exit $rc, first line '$(head -n 1 "$tmp/h")' $(head -c 200 "$tmp/err")"
    [ "$(wc -l < "$tmp/h")" -le 60 ] && ok || bad "$cmd --help has $(wc -l < "$tmp/h") lines (short, please)"
done
"$BIN" run --help > "$tmp/h"
for f in --prompt --max-tokens --temperature --seed --ram --threads --max-context --kernels; do
    grep -q -- "^  $f" "$tmp/h" && ok || bad "run --help does not list $f"
done
grep -q -- "--ram SIZE .*512M, 8G, 8GiB.*(default all)" "$tmp/h" && ok || bad "run --help: --ram without units or default"
grep -q -- "--max-tokens N .*(default 64)" "$tmp/h" && ok || bad "run --help: --max-tokens without its default"
"$BIN" serve --help | grep -q -- "--ram SIZE .*512M, 8G, 8GiB" && ok || bad "serve --help: --ram is not the shared one"
"$BIN" --help > "$tmp/h"; [ $? -eq 0 ] && grep -q "^  run MODEL_DIR" "$tmp/h" && grep -q "^  serve" "$tmp/h" && ok \
    || bad "moestream --help: $(head -n 3 "$tmp/h")"
"$BIN" --version > "$tmp/v"; rc=$?
[ $rc -eq 0 ] && grep -qE "^moestream [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-f]{7,}\)" "$tmp/v" && ok || bad "--version: $(cat "$tmp/v")"
built=$(sed -n 's/^kernels compiled in: //p' "$tmp/v"); cpu=$(sed -n 's/^this CPU: \([^ ]*\).*/\1/p' "$tmp/v")
echo " $built " | grep -q " ref " && [ -n "$cpu" ] && echo " $built " | grep -q " $cpu " && ok \
    || bad "--version: kernels '$built', this CPU '$cpu'"
# the table --version names is the one run uses
k=$("$BIN" run $M --ids 1,2 --gen 1 --json --quiet | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['kernels'])")
[ "$k" = "$cpu" ] && ok || bad "--version says $cpu, run used $k"
"$BIN" > /dev/null 2>&1; [ $? -eq 2 ] && ok || bad "no command: not exit 2"

# ---- checks before the model loads / before any token ---------------------------------------
"$BIN" run $M --prompt "And the LORD said" --max-tokens 100000 > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q -- "--max-context" "$tmp/err" && ok \
    || bad "--max-tokens 100000: exit $rc, stdout '$(head -c 100 "$tmp/out")', stderr $(cat "$tmp/err")"
"$BIN" run $M --ids 1,2,3 --max-tokens 100 --max-context 50 > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q "need 102 positions; the context holds 50" "$tmp/err" && ok \
    || bad "--ids with too small a context: exit $rc: $(cat "$tmp/err")"
# a text prompt longer than the context leaves: refused after tokenizing, before any token
"$BIN" run $M --prompt "And the LORD spake unto Moses, saying, Speak unto the children of Israel" \
    --max-tokens 60 --max-context 64 > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q "do not fit the context of 64" "$tmp/err" && ok \
    || bad "long prompt: exit $rc, stdout '$(head -c 100 "$tmp/out")', $(cat "$tmp/err")"
# exactly full is fine: prompt + max_tokens - 1 positions are fed
n=$("$BIN" run $M --ids 1,2,3 --max-tokens 8 --max-context 10 --quiet | tr ',' '\n' | wc -l)
[ "$n" -eq 8 ] && ok || bad "3 ids + 8 tokens in a context of 10: $n tokens"
"$BIN" run $M --ids 1,2,999999 > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q 999999 "$tmp/err" && ok \
    || bad "--ids 1,2,999999: exit $rc, $(cat "$tmp/err")"

# ---- plan --ram min is run --ram min's plan; a refusal is printed once ----------------------
"$BIN" plan $M --ram min > "$tmp/plan" 2>&1 && ok || bad "plan --ram min failed: $(cat "$tmp/plan")"
"$BIN" run $M --ids 1,2 --gen 1 --ram min --verbose --no-verify --no-pack > /dev/null 2> "$tmp/run"
for part in "trunk pinned" "trunk ring" "expert cache"; do
    a=$(grep "^  $part " "$tmp/plan"); b=$(grep "^  $part " "$tmp/run")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "--ram min: plan '$a', run '$b'"
done
grep -q "everything resident)$" "$tmp/plan" && bad "plan --ram min prints the resident plan" || ok
n=$("$BIN" plan $M --ram 1M 2>&1 | grep -c "DOES NOT FIT"); rc=$("$BIN" plan $M --ram 1M > /dev/null 2>&1; echo $?)
[ "$n" -eq 1 ] && [ "$rc" -eq 2 ] && ok || bad "plan --ram 1M: refusal printed $n times, exit $rc"

# ---- frictions ------------------------------------------------------------------------------
"$BIN" run $M --prompt-file "$tmp/nonexistent" > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "No such file or directory" "$tmp/err" && ok || bad "--prompt-file: exit $rc: $(cat "$tmp/err")"
printf '[100, 200]' | "$BIN" tokenize $M --decode > "$tmp/out"; rc=$?
[ $rc -eq 0 ] && [ "$(tail -c 1 "$tmp/out" | od -An -c | tr -d ' ')" = '\n' ] && ok || bad "tokenize --decode: no trailing newline"
printf '[1, 99999]' | "$BIN" tokenize $M --decode > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 99999 "$tmp/err" && ok || bad "tokenize --decode of a bad id: exit $rc: $(cat "$tmp/err")"
# tokenize FILE...: a JSON array per file, in order, equal to each file on stdin; a file that
# cannot be read ends the output after the files before it (exit 2); --decode reads stdin only
printf 'Hello, world.\n' > "$tmp/t1"; printf 'Second file\n\nwith two lines' > "$tmp/t2"
"$BIN" tokenize $M "$tmp/t1" "$tmp/t2" > "$tmp/out"; rc=$?
{ "$BIN" tokenize $M < "$tmp/t1"; "$BIN" tokenize $M < "$tmp/t2"; } > "$tmp/want"
[ $rc -eq 0 ] && [ "$(wc -l < "$tmp/out")" -eq 2 ] && cmp -s "$tmp/out" "$tmp/want" && ok ||
    bad "tokenize of two files: exit $rc: $(head -c 300 "$tmp/out") against $(head -c 300 "$tmp/want")"
counts=$("$BIN" tokenize $M "$tmp/t1" "$tmp/t2" --count | tr '\n' ' ')
wantc=$(/usr/bin/python3 -c 'import json,sys; print(" ".join(str(len(json.loads(l))) for l in open(sys.argv[1])) + " ")' "$tmp/want")
[ "$counts" = "$wantc" ] && ok || bad "tokenize --count: '$counts', the arrays hold '$wantc'"
printf 'x' | "$BIN" tokenize $M --count --decode > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok || bad "tokenize --count --decode: exit $rc"
"$BIN" tokenize $M "$tmp/t1" "$tmp/nonexistent" "$tmp/t2" > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ "$(cat "$tmp/out")" = "$(head -n 1 "$tmp/want")" ] && grep -q "nonexistent: No such file" "$tmp/err" &&
    ok || bad "tokenize of a missing file: exit $rc: $(cat "$tmp/out" "$tmp/err" | head -c 300)"
"$BIN" tokenize $M "$tmp/t1" --decode > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q "stdin" "$tmp/err" && ok || bad "tokenize FILE --decode: exit $rc: $(cat "$tmp/err")"
"$BIN" trace "$tmp/nonexistent" --capacity 4 > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc -ne 0 ] && [ ! -s "$tmp/out" ] && ok || bad "trace of a missing file printed '$(cat "$tmp/out")'"

echo "t_opts: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
