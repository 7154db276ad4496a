#!/usr/bin/env bash
# tests/t_files.sh - hostile files in place of the model's metadata files are
# refused at once (issue 30, "reading files"), and a truncated shard says so.
#
# Owns: a temporary model directory (mktemp, removed at exit): a copy of
#   $MS_TESTDATA/a with a byte-level tokenizer (tiktoken.model, an empty
#   tokenizer_config.json) and its checksum sidecar (moestream.sums); one case
#   directory per hostile file, made of symlinks to that copy.
# Idea: for each metadata file the engine reads (config.json,
#   model.safetensors.index.json, a shard, tiktoken.model,
#   tokenizer_config.json, moestream.sums) the case directory holds instead
#     - a FIFO (open(2) on it would block for ever without O_NONBLOCK),
#     - a symlink to /dev/zero (a read to the end would never end),
#     - a directory,
#     - for the files with a size limit (docs/SECURITY.md, "Limits on metadata
#       files"), a sparse file one byte over the limit (1 GB for
#       tiktoken.model, as the issue measured);
#   and `moestream run CASE --ids 1,2,3 --gen 2` must exit 2 with a line naming
#   the file, with a peak RSS no more than 64 MiB above the valid run's. The
#   refusal comes before any weight is read; the time allowed is the valid
#   model's own run plus 2 s, the margin being for a loaded machine (a FIFO
#   opened without O_NONBLOCK hangs until the 20 s timeout). Every run is under
#   `timeout` and an address-space limit, so a regression fails instead of
#   hanging or eating the machine.
#   Then a shard cut in half must be refused (exit 2) as "truncated", naming
#   the file with the size expected and the size found.
# Does not: test files opened by other layers (moestream.pack, session files).
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=${PYTHON:-/usr/bin/python3}
. tests/lib.sh
[ -x "$BIN" ] || { bad "$BIN is not built"; finish; }
[ -d "$TD/a" ] || { bad "$TD/a missing"; finish; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
m=$tmp/m
mkdir -p "$m"
cp "$TD"/a/*.json "$TD"/a/*.safetensors "$m"/
$PY - "$m" <<'PYEOF' || { bad "cannot write the tokenizer files"; finish; }
import base64, json, sys
d = sys.argv[1]
with open(d + "/tiktoken.model", "w") as f:           # byte-level: the 256 single bytes
    for i in range(256):
        f.write(base64.b64encode(bytes([i])).decode() + " %d\n" % i)
json.dump({"added_tokens_decoder": {}}, open(d + "/tokenizer_config.json", "w"))
PYEOF
"$BIN" verify "$m" --write >/dev/null 2>"$tmp/err" || { bad "verify --write: $(head -c 300 "$tmp/err")"; finish; }
[ -f "$m/moestream.sums" ] || { bad "no moestream.sums written"; finish; }
SHARD=$(cd "$m" && ls *.safetensors | head -n 1)

# measure DIR: runs the model under timeout 20 s and a 4 GiB address-space
# limit (none under a sanitizer: its shadow memory needs more); sets rc, ms
# (wall time), kb (peak RSS) and leaves stderr in $tmp/err.
AS_KB=4194304; [ "${MS_SANITIZER:-0}" = 1 ] && AS_KB=unlimited
measure() {
    local out
    out=$($PY - "$tmp/err" timeout 20 bash -c 'ulimit -v "$0"; exec "$@"' "$AS_KB" \
              "$BIN" run "$1" --ids 1,2,3 --gen 2 <<'PYEOF'
import resource, subprocess, sys, time
t0 = time.monotonic()
with open(sys.argv[1], "wb") as err:
    rc = subprocess.run(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err).returncode
ms = int((time.monotonic() - t0) * 1000)
print(rc, ms, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PYEOF
)
    read -r rc ms kb <<<"$out"; [ -n "${T_FILES_DEBUG:-}" ] && echo "$1 rc=$rc ms=$ms kb=$kb" >&2
}

measure "$m"
[ "$rc" = 0 ] && ok || bad "the valid model exits $rc: $(head -c 300 "$tmp/err")"
base_ms=$ms; base_kb=$kb

# a case directory: symlinks to every file of $m but $1 (left for the caller)
case_dir() {
    local c=$tmp/case
    rm -rf "$c"; mkdir "$c"
    ln -s "$m"/* "$c"/ && rm -f "$c/$1"
    echo "$c"
}

# expect_refused FILE WHAT: the current case must exit 2 quickly, naming FILE
expect_refused() {
    local file=$1 what=$2
    measure "$tmp/case"
    local lines
    lines=$(grep -vE '^(moestream: )?(info|warning)' "$tmp/err")
    if [ "$rc" != 2 ]; then
        bad "$file as $what: exit $rc (want 2): $(printf '%s' "$lines" | head -c 300)"
    elif ! printf '%s' "$lines" | grep -qF "$file"; then
        bad "$file as $what: the message does not name it: $(printf '%s' "$lines" | head -c 300)"
    elif [ "$ms" -gt $((base_ms + 2000)) ]; then
        bad "$file as $what: refused after $ms ms (the valid model runs in $base_ms ms)"
    elif [ "$kb" -gt $((base_kb + 65536)) ]; then
        bad "$file as $what: peak RSS $kb kB (the valid model: $base_kb kB)"
    else
        ok
    fi
}

# file and its size limit in bytes (0: no limit of its own)
for spec in config.json:16777216 model.safetensors.index.json:536870912 "$SHARD":0 \
            tiktoken.model:67108864 tokenizer_config.json:16777216 moestream.sums:0; do
    f=${spec%%:*}; limit=${spec##*:}
    c=$(case_dir "$f"); mkfifo "$c/$f"; expect_refused "$f" "a FIFO"
    c=$(case_dir "$f"); ln -s /dev/zero "$c/$f"; expect_refused "$f" "a symlink to /dev/zero"
    c=$(case_dir "$f"); mkdir "$c/$f"; expect_refused "$f" "a directory"
    if [ "$limit" != 0 ]; then
        c=$(case_dir "$f"); truncate -s $((limit + 1)) "$c/$f"
        expect_refused "$f" "a file of $((limit + 1)) bytes"
    fi
done
# the issue's case: a 1 GB tiktoken.model, refused without being read
c=$(case_dir tiktoken.model); truncate -s 1000000000 "$c/tiktoken.model"
expect_refused tiktoken.model "a file of 1 GB"
# a sidecar of another size is judged by its header, never read whole
c=$(case_dir moestream.sums); truncate -s 1000000000 "$c/moestream.sums"
expect_refused moestream.sums "a file of 1 GB"

# a shard cut in half: "truncated", both sizes
c=$(case_dir "$SHARD")
size=$(stat -c %s "$m/$SHARD")
head -c $((size / 2)) "$m/$SHARD" > "$c/$SHARD"
rm -f "$c/moestream.sums"
measure "$c"
if [ "$rc" = 2 ] && grep -qE "$SHARD: truncated: $((size / 2)) bytes, expected $size" "$tmp/err"; then ok
else bad "a truncated shard: exit $rc, $(grep -v info "$tmp/err" | head -c 400)"; fi
finish
