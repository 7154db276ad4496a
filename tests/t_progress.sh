#!/usr/bin/env bash
# tests/t_progress.sh - progress lines of the slow steps (cli/progress.c).
#
# `script` gives the command a pseudo-terminal and keeps every byte written to
# it. --progress draws from the first report on (without it, only steps that
# last more than half a second are drawn, which the tiny model never does):
#  - at a terminal: open, prompt (chunks, tokens, bytes read and their speed, ETA), verify, pack and, when
#    stdout is not the terminal, generation (s/token, ETA) are drawn on stderr;
#  - with --json, --quiet, or stderr not a terminal: nothing is drawn;
#  - the generated text is the same with and without progress;
#  - the summary gives s/token and the time --max-tokens takes at that speed.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
dir=$BUILD/testdata-chat
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. tests/lib.sh
[ -f "$dir/.stamp" ] || bash tests/t_chat.sh >/dev/null 2>&1    # makes the tiny model
# tty LOG COMMAND: run COMMAND (a shell line) at a terminal, its bytes into LOG
tty() { script -qefc "$2" "$1" </dev/null >/dev/null 2>&1; }
R="$BIN run $dir --prompt 'hello there, how are you today' --max-tokens 6 --chunk 4"

tty "$tmp/run.log" "$R --progress > $tmp/run.out"
grep -q $'\r\033\[Kopen: 0 KB of [0-9]* KB' "$tmp/run.log" && ok || bad "no open progress: $(cat -v "$tmp/run.log" | head -3)"
grep -q 'prompt: chunk [0-9]*/8, [0-9]*/30 tokens, .*ETA' "$tmp/run.log" && ok || bad "no prompt progress"
grep -q 'generate: [0-9]*/6 tokens, [0-9.]* s/token, ETA' "$tmp/run.log" && ok || bad "no generation progress"
grep -q 'generation [0-9.]* s/token; --max-tokens 6 at this speed: ' "$tmp/run.log" && ok || bad "no generation summary"
tty "$tmp/min.log" "$R --ram min --progress > /dev/null"
grep -q 'prompt: chunk [0-9]*/8, [0-9]*/30 tokens, [0-9.]* [KM]B read ([0-9.]* [KM]B/s)' "$tmp/min.log" && ok || \
    bad "no bytes read in a streamed prompt's progress: $(cat -v "$tmp/min.log" | head -3)"
eval "$R" > "$tmp/plain.out" 2> "$tmp/plain.err"
cmp -s "$tmp/run.out" "$tmp/plain.out" && ok || bad "the text differs with progress drawn"
grep -q $'\033\|prompt: chunk' "$tmp/plain.err" && bad "progress drawn into a pipe" || ok
tty "$tmp/json.log" "$R --progress --json"
grep -q 'prompt: chunk\|open: ' "$tmp/json.log" && bad "progress mixed with --json" || ok
grep -q '"generated_ids"' "$tmp/json.log" && ok || bad "no JSON under --json"
tty "$tmp/quiet.log" "$R --progress --quiet"
grep -q 'prompt: chunk\|open: ' "$tmp/quiet.log" && bad "progress drawn under --quiet" || ok

tty "$tmp/verify.log" "$BIN verify $dir --write --sums $tmp/s.sums --progress"
grep -q 'verify: 0 KB of [0-9]* KB (0%)' "$tmp/verify.log" && ok || bad "no verify progress: $(cat -v "$tmp/verify.log")"
"$BIN" verify "$dir" --sums "$tmp/s.sums" --progress > /dev/null 2> "$tmp/verify.err" && \
    ! grep -q 'verify: ' "$tmp/verify.err" && ok || bad "verify progress drawn into a pipe"
tty "$tmp/pack.log" "$BIN pack $dir --sums $tmp/s.sums --out $tmp/p.pack --progress"
grep -q 'pack: 0 KB of [0-9]* KB (0%)' "$tmp/pack.log" && ok || bad "no pack progress: $(cat -v "$tmp/pack.log")"

echo "t_progress: $pass passed, $fail failed"
[ $fail -eq 0 ]
