#!/usr/bin/env bash
# tests/t_chat_tty.sh - `moestream chat` at a terminal, driven through tmux (a
# real pseudo-terminal: keys sent with send-keys, the screen read back).
#
# On t_chat.sh's tiny model (byte-level tokenizer: a saved session's ids are
# the bytes of the text):
#  - the banner names the model, the budget and the commands; /help lists them;
#    /save without a path is a usage message and, like an unknown command,
#    feeds nothing (a save right after holds 0 tokens);
#  - the Up arrow brings the last line back (history), in the next run too;
#  - a """ block and a trailing \ make one message with newlines;
#  - Ctrl-C mid-answer stops it: the session then equals, bit for bit, that of
#    a chat whose answer was limited to the tokens shown (--max-tokens K), and
#    the next turn in the same process equals that chat's next turn;
#  - /save then /load (and --load-session / --save-session) in a new process
#    continue with the same bits as one process that never stopped;
#  - Ctrl-D exits 0, and so do two Ctrl-C at an empty prompt.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=/usr/bin/python3
dir=$BUILD/testdata-chat
tmp=$(mktemp -d)
sock=mstest$$
tm() { tmux -L "$sock" "$@"; }
trap 'tm kill-server 2>/dev/null; rm -rf "$tmp"' EXIT
. tests/lib.sh
command -v tmux >/dev/null || { echo "FAIL: tmux is missing (scripts/setup.sh installs it)"; echo "t_chat_tty: 0 passed, 1 failed"; exit 1; }
[ -f "$dir/.stamp" ] || bash tests/t_chat.sh >/dev/null 2>&1    # makes the tiny model
M="--max-context 8192"
export MOESTREAM_HISTORY=$tmp/history    # not the user's ~/.moestream_history

# start NAME ARGS...: chat at a 220x60 terminal; "EXITED rc" when it ends
start() {
    local name=$1; shift
    tm new-session -d -s "$name" -x 220 -y 60 "$BIN chat $dir $M $*; echo EXITED \$?; sleep 120"
    wait_for "$name" '^>>> ' || bad "$name: no prompt: $(screen "$name" | tail -3)"
}
screen() { tm capture-pane -p -J -S - -t "$1"; }
# wait_for NAME REGEX [COUNT]: until the screen has COUNT (1) lines matching
wait_for() {
    local i
    for i in $(seq 1 600); do
        [ "$(screen "$1" | grep -c -- "$2")" -ge "${3:-1}" ] && return 0
        sleep 0.1
    done
    return 1
}
type_line() { tm send-keys -t "$1" -l -- "$2"; tm send-keys -t "$1" Enter; }
prompts() { screen "$1" | grep -c '^>>> '; }
# ids FILE: the token ids a saved session holds, comma-separated
ids() {
    $PY - "$1" <<'PYEOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"MSSESS03", b[:8]
n = struct.unpack_from("<q", b, 16)[0]          # ids start at 96 (engine/session_io.c)
print(",".join(map(str, struct.unpack_from("<%di" % n, b, 96))))
PYEOF
}
has_text() {   # FILE TEXT: the session's ids hold TEXT's bytes in a row
    $PY - "$(ids "$1")" "$2" <<'PYEOF'
import sys
ids = bytes(int(x) for x in sys.argv[1].split(",") if x and int(x) < 256)
sys.exit(0 if sys.argv[2].encode() in ids else 1)
PYEOF
}

# ---- banner, /help, usage, unknown commands, history, Ctrl-D
start a --max-tokens 5
s=$(screen a)
echo "$s" | grep -q "moestream chat - $dir: 4 layers, 8 experts" && echo "$s" | grep -q "no RAM limit" && \
    echo "$s" | grep -q "Commands: /help /set /save PATH /load PATH /reset /exit" && ok || bad "banner: $s"
type_line a "/help"
wait_for a "/load PATH     replace the conversation" && ok || bad "/help: $(screen a | tail -5)"
type_line a "/save"
wait_for a "^usage: /save PATH" && ok || bad "/save without a path: $(screen a | tail -3)"
type_line a "/bogus1"
wait_for a "unknown command /bogus1" || bad "unknown command"
tm send-keys -t a Up; sleep 0.3; tm send-keys -t a Enter
wait_for a "unknown command /bogus1; /help" 2 && ok || bad "Up arrow did not recall the line: $(screen a | tail -4)"
type_line a "/save $tmp/empty.bin"
wait_for a "saved the conversation (0 tokens)" && ok || bad "a command was fed to the model: $(screen a | tail -3)"
# ---- multi-line input: a """ block, then a trailing backslash
n=$(prompts a)
type_line a '"""'; type_line a "line one"; type_line a "line two"
wait_for a '^\.\.\. line two' || bad "no continuation prompt: $(screen a | tail -3)"
type_line a '"""'
wait_for a '^>>> ' $((n + 1)) || bad "the block got no answer"
type_line a 'first \'; type_line a "second"
wait_for a '^>>> ' $((n + 2)) || bad "the continued line got no answer"
type_line a "/save $tmp/m.bin"
# (match the message that names the file: chat a already printed "saved the conversation" for empty.bin)
wait_for a "saved the conversation ([0-9]* tokens) to $tmp/m.bin" || bad "/save after multi-line input"
has_text "$tmp/m.bin" $'line one\nline two' && has_text "$tmp/m.bin" $'first \nsecond' && ok || \
    bad "multi-line messages not sent as one message with newlines: $(ids "$tmp/m.bin")"
tm send-keys -t a C-d
wait_for a "^EXITED 0" && ok || bad "Ctrl-D: $(screen a | tail -3)"
start h --max-tokens 5            # the history of the run before
tm send-keys -t h Up; sleep 0.3; tm send-keys -t h Enter
wait_for h "saved the conversation" && ok || bad "history not kept across runs: $(screen h | tail -3)"
type_line h "/exit"

# ---- Ctrl-C mid-answer, then the next turn in the same process. The answers
# are the random model's bytes, control characters included, so what chat says
# (stderr) is read from a file, not from the screen.
err=$tmp/b.err
said() {   # REGEX [COUNT]: wait until chat's stderr has COUNT (1) lines matching
    local i
    for i in $(seq 1 600); do
        [ "$(grep -c -- "$1" "$err" 2>/dev/null)" -ge "${2:-1}" ] && return 0
        sleep 0.1
    done
    return 1
}
start b --max-tokens 6000 "2>$err"
type_line b "second one"
# its answer runs to ~2300 tokens (~3 s on a quiet machine): Ctrl-C lands in it
# once the answer shows on the screen, however fast or loaded the machine is
before=$(screen b | wc -c)
for i in $(seq 1 200); do [ "$(screen b | wc -c)" -gt $((before + 40)) ] && break; sleep 0.05; done
sleep 0.2
tm send-keys -t b C-c
said '^\[stopped: the [0-9]* tokens shown' || bad "Ctrl-C did not stop the answer: $(tail -3 "$err")"
k=$(grep -o '^\[stopped: the [0-9]* tokens' "$err" | head -1 | grep -o '[0-9]*')
type_line b "/save $tmp/c1.bin"
said "saved the conversation" || bad "/save after Ctrl-C"
type_line b "and then"
sleep 1
tm send-keys -t b C-c        # stops the second answer, or lands at the prompt when it was over
# (2 lines: the first turn's own "[stopped" line matches too)
said '^\[stopped: the [0-9]* tokens\|Ctrl-C again' 2 || bad "second Ctrl-C: $(tail -3 "$err")"
k2=$(grep -o '^\[stopped: the [0-9]* tokens' "$err" | sed -n 2p | grep -o '[0-9]*')
type_line b "/save $tmp/c2.bin"
said "saved the conversation" 2 || bad "/save after the second turn"
n=$(grep -c "Ctrl-C again" "$err")
tm send-keys -t b C-c
said "Ctrl-C again" $((n + 1)) || bad "no hint after a Ctrl-C at an empty prompt"
tm send-keys -t b C-c
wait_for b "EXITED 0" && ok || bad "two Ctrl-C at an empty prompt did not exit 0: $(tail -3 "$err")"
echo "Ctrl-C: the first answer stopped after ${k:-?} tokens, the second ${k2:-at its end}"
if [ -n "$k" ] && [ "$k" -gt 0 ]; then
    printf 'second one\n/save %s\n' "$tmp/r1.bin" | "$BIN" chat "$dir" $M --max-tokens "$k" >/dev/null 2>&1
    cmp -s "$tmp/c1.bin" "$tmp/r1.bin" && ok || bad "after Ctrl-C at $k tokens the session differs from an answer of $k tokens"
    printf 'and then\n/save %s\n' "$tmp/r2.bin" | "$BIN" chat "$dir" $M --max-tokens "${k2:-6000}" \
        --load-session "$tmp/r1.bin" >/dev/null 2>&1
    cmp -s "$tmp/c2.bin" "$tmp/r2.bin" && ok || bad "the turn after Ctrl-C differs from a chat fed the $k tokens shown"
else
    bad "Ctrl-C stopped the answer before its first token (k='$k'): nothing to compare"
fi

# ---- /save, then /load in a new process: the same continuation bits
start d --max-tokens 20
type_line d "hello there"
wait_for d '^>>> ' 2 || bad "no answer"
type_line d "/save $tmp/d1.bin"
wait_for d "saved the conversation ([0-9]* tokens) to $tmp/d1.bin" || bad "/save"
type_line d "/exit"
wait_for d "^EXITED 0" || bad "/exit"
start e --max-tokens 20
type_line e "/load $tmp/d1.bin"
wait_for e "loaded the conversation ([0-9]* tokens) from $tmp/d1.bin" && ok || bad "/load: $(screen e | tail -3)"
type_line e "more please"
wait_for e '^>>> ' 3 || bad "no answer after /load"
type_line e "/save $tmp/e2.bin"
wait_for e "saved the conversation ([0-9]* tokens) to $tmp/e2.bin" || bad "/save after /load"
printf 'hello there\nmore please\n/save %s\n' "$tmp/one.bin" | "$BIN" chat "$dir" $M --max-tokens 20 >/dev/null 2>&1
cmp -s "$tmp/e2.bin" "$tmp/one.bin" && ok || bad "/save + /load in a new process: the continuation differs"
printf 'more please\n' | "$BIN" chat "$dir" $M --max-tokens 20 --load-session "$tmp/d1.bin" \
    --save-session "$tmp/f2.bin" >/dev/null 2>&1
cmp -s "$tmp/f2.bin" "$tmp/one.bin" && ok || bad "--load-session / --save-session: the continuation differs"

echo "t_chat_tty: $pass passed, $fail failed"
[ $fail -eq 0 ]
