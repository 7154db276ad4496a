#!/usr/bin/env bash
# tests/t_ident.sh - the identity of the weights, the sidecar's metadata files,
# stale packs and the exit codes of the paths around them (issue 30, items 4,
# 5 and 7; docs/SECURITY.md, "Identity of the weights" and "Exit codes").
#
# Owns: temporary copies of $MS_TESTDATA/a (mktemp, removed at exit) and, where
#   the machine lets it mount one, a 256 KiB tmpfs (unmounted at exit).
# Cases (each can fail):
#   1. a session saved on model A is refused (exit 2, naming both identities)
#      by a copy B with one q_proj byte changed and its sidecar rewritten; the
#      same without sidecars when the byte changed is one of the sampled ones
#      (the shard's last 4 KiB); A itself loads it;
#   2. a session of format 01, and one with n_past = 2^62, exit 2; one
#      holding an id outside the vocabulary (checksum recomputed) exits 2
#      naming the id; one of format 02 (magic rewritten) loads for A (no
#      sliding layer: the same layout) and goes on with the ids the 03 file
#      gives, and is refused (exit 2, "format 02") for gpt-oss's oss_a;
#   3. an edit of rms_norm_eps in config.json, or of one token of
#      tiktoken.model, after `verify --write`: verify exits 4 naming the file,
#      run exits 2 naming it;
#   4. a pack of A placed beside B: run warns that it is ignored and gives
#      B's ids (exit 0), verify warns "stale pack" (exit 0);
#   5. no moestream.pack.tmp after a pack, and one left by a killed run is
#      removed by the next pack;
#   6. ENOSPC (a full tmpfs): verify --write and pack both exit 2 with
#      "No space left on device" and leave no file behind.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=/usr/bin/python3
. tests/lib.sh
[ -x "$BIN" ] || { bad "$BIN is not built"; finish; }
[ -d "$TD/a" ] || { bad "$TD/a missing"; finish; }

tmp=$(mktemp -d)
mnt=""
cleanup() { [ -n "$mnt" ] && umount "$mnt" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
IDS="--ids 1,2,3,4,5 --gen 3 --quiet"
copy() { mkdir -p "$1"; cp "$TD"/a/*.json "$TD"/a/*.safetensors "$1"/; }
# poke_last FILE: XOR 0x01 into the file's last byte
poke_last() {
    $PY -c "
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(-1, 2); x = f.read(1); f.seek(-1, 2); f.write(bytes([x[0] ^ 1]))" "$1"
}

A=$tmp/A; B=$tmp/B; C=$tmp/C
copy "$A"; copy "$B"; copy "$C"
"$BIN" verify "$A" --write --quiet >/dev/null 2>&1 || bad "verify --write A"
flip_tensor "$B" language_model.model.layers.0.self_attn.q_proj.weight
"$BIN" verify "$B" --write --quiet >/dev/null 2>&1 || bad "verify --write B"

# 1. sessions across weights
"$BIN" run "$A" $IDS --save-session "$tmp/a.sess" >"$tmp/a.out" 2>"$tmp/err" || bad "save on A: $(cat "$tmp/err")"
"$BIN" run "$A" --load-session "$tmp/a.sess" --gen 2 --quiet >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && ok || bad "A loads its own session: exit $rc, $(cat "$tmp/err")"
"$BIN" run "$B" --load-session "$tmp/a.sess" --gen 2 --quiet >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "other weights" "$tmp/err" && [ "$(grep -o 'sums [0-9a-f]\{16\}' "$tmp/err" | sort -u | wc -l)" -eq 2 ] && ok ||
    bad "session of A into B (sidecars): exit $rc, $(cat "$tmp/err")"
"$BIN" run "$A" $IDS --no-verify --save-session "$tmp/a2.sess" >/dev/null 2>&1 || bad "save on A --no-verify"
poke_last "$C/model-00004-of-00004.safetensors"
"$BIN" run "$C" --load-session "$tmp/a2.sess" --gen 2 --quiet >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ "$(grep -o 'sampled [0-9a-f]\{16\}' "$tmp/err" | sort -u | wc -l)" -eq 2 ] && ok ||
    bad "session of A into C (no sidecars, a sampled byte changed): exit $rc, $(cat "$tmp/err")"

# 2. session files: format 01, n_past = 2^62, an id outside the vocabulary
$PY - "$tmp/a.sess" "$tmp" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
d = sys.argv[2]
old = bytearray(b); old[:8] = b"MSSESS01"
open(d + "/old.sess", "wb").write(old)
v2 = bytearray(b); v2[:8] = b"MSSESS02"
open(d + "/v2.sess", "wb").write(v2)
big = bytearray(b); struct.pack_into("<q", big, 16, 1 << 62)
open(d + "/big.sess", "wb").write(big)
n_past, n_vocab = struct.unpack_from("<qq", b, 16)
oov = bytearray(b); struct.pack_into("<i", oov, 96, n_vocab + 7)
h = 0xcbf29ce484222325
for x in oov[96:-8]:
    h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
struct.pack_into("<Q", oov, len(oov) - 8, h)
open(d + "/oov.sess", "wb").write(oov)
EOF
for k in old big oov; do
    "$BIN" run "$A" --load-session "$tmp/$k.sess" --gen 2 --quiet >/dev/null 2>"$tmp/err"; rc=$?
    case $k in old) want='format 01';; big) want='4611686018427387904 positions';; oov) want='outside the vocabulary';; esac
    [ $rc -eq 2 ] && grep -q "$want" "$tmp/err" && ok || bad "session $k: exit $rc, $(cat "$tmp/err")"
done
"$BIN" run "$A" --load-session "$tmp/a.sess" --gen 4 >"$tmp/v3.out" 2>"$tmp/err" || bad "format 03 on A: $(cat "$tmp/err")"
"$BIN" run "$A" --load-session "$tmp/v2.sess" --gen 4 >"$tmp/v2.out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && [ -s "$tmp/v2.out" ] && cmp -s "$tmp/v2.out" "$tmp/v3.out" && ok ||
    bad "format 02 on A (no sliding layer): exit $rc, $(cat "$tmp/err"; diff "$tmp/v2.out" "$tmp/v3.out")"
if [ -d "$TD/oss_a" ]; then
    "$BIN" run "$TD/oss_a" $IDS --save-session "$tmp/o.sess" >/dev/null 2>"$tmp/err" || bad "save on oss_a: $(cat "$tmp/err")"
    $PY -c "
import sys
b = bytearray(open(sys.argv[1], 'rb').read()); b[:8] = b'MSSESS02'
open(sys.argv[1], 'wb').write(b)" "$tmp/o.sess"
    "$BIN" run "$TD/oss_a" --load-session "$tmp/o.sess" --gen 2 --quiet >/dev/null 2>"$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -q "format 02" "$tmp/err" && ok || bad "format 02 on oss_a: exit $rc, $(cat "$tmp/err")"
else
    bad "$TD/oss_a missing"
fi

# 3. metadata files: config.json and tiktoken.model
D=$tmp/D; copy "$D"
$PY -c "
import base64, sys
with open(sys.argv[1] + '/tiktoken.model', 'w') as f:
    for i in range(256): f.write(base64.b64encode(bytes([i])).decode() + ' %d\n' % i)" "$D"
"$BIN" verify "$D" --write --quiet >/dev/null 2>&1 || bad "verify --write D"
"$BIN" verify "$D" --quiet >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && ok || bad "verify D unchanged: exit $rc, $(cat "$tmp/err")"
cp "$D/config.json" "$tmp/config.keep"
sed -i 's/"rms_norm_eps": 1e-05/"rms_norm_eps": 2e-05/' "$D/config.json"
cmp -s "$D/config.json" "$tmp/config.keep" && bad "rms_norm_eps not found in config.json"
"$BIN" verify "$D" --quiet >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 4 ] && grep -q 'config.json: checksum mismatch' "$tmp/err" && ok || bad "verify after a config edit: exit $rc, $(cat "$tmp/err")"
"$BIN" run "$D" $IDS >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'config.json: checksum mismatch' "$tmp/err" && ok || bad "run after a config edit: exit $rc, $(cat "$tmp/err")"
cp "$tmp/config.keep" "$D/config.json"
sed -i '66s/^[^ ]* /QUJD /' "$D/tiktoken.model"
"$BIN" verify "$D" --quiet >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 4 ] && grep -q 'tiktoken.model: checksum mismatch' "$tmp/err" && ok || bad "verify after a token edit: exit $rc, $(cat "$tmp/err")"
"$BIN" run "$D" $IDS >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'tiktoken.model' "$tmp/err" && ok || bad "run after a token edit: exit $rc, $(cat "$tmp/err")"

# 4. a stale pack: A's pack beside B
"$BIN" pack "$A" --quiet >/dev/null 2>"$tmp/err" || bad "pack A: $(cat "$tmp/err")"
[ ! -e "$A/moestream.pack.tmp" ] && [ -s "$A/moestream.pack" ] && ok || bad "pack A left a .tmp or no pack"
cp "$A/moestream.pack" "$B/"
want=$("$BIN" run "$B" $IDS --no-pack 2>/dev/null)
got=$("$BIN" run "$B" --ids 1,2,3,4,5 --gen 3 2>"$tmp/err"); rc=$?
[ $rc -eq 0 ] && [ "$got" = "$want" ] && grep -q 'packed trunk ignored' "$tmp/err" && ok ||
    bad "stale pack at run: exit $rc, ids '$got' vs '$want', $(grep -i pack "$tmp/err")"
"$BIN" verify "$B" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q 'stale pack' "$tmp/err" && ok || bad "verify with a stale pack: exit $rc, $(cat "$tmp/err")"

# 5. a leftover moestream.pack.tmp (a killed run) is removed by the next pack
head -c 100000 /dev/urandom > "$A/moestream.pack.tmp"
"$BIN" pack "$A" --quiet >/dev/null 2>"$tmp/err" || bad "pack A again: $(cat "$tmp/err")"
[ ! -e "$A/moestream.pack.tmp" ] && ok || bad "a leftover moestream.pack.tmp was not removed"

# 6. ENOSPC: a full tmpfs
mkdir -p "$tmp/mnt"
if mount -t tmpfs -o size=256k tmpfs "$tmp/mnt" 2>/dev/null; then
    mnt=$tmp/mnt
    dd if=/dev/zero of="$mnt/fill" bs=4k 2>/dev/null
    "$BIN" verify "$A" --write --sums "$mnt/x.sums" --quiet >/dev/null 2>"$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -q 'No space left on device' "$tmp/err" && ok || bad "verify --write on a full disk: exit $rc, $(cat "$tmp/err")"
    "$BIN" pack "$A" --out "$mnt/x.pack" --quiet >/dev/null 2>"$tmp/err"; rc=$?
    [ $rc -eq 2 ] && grep -q 'No space left on device' "$tmp/err" && ok || bad "pack on a full disk: exit $rc, $(cat "$tmp/err")"
    [ "$(ls "$mnt")" = "fill" ] && ok || bad "files left on the full disk: $(ls "$mnt")"
else
    echo "t_ident: ENOSPC case not run (this machine does not allow mounting a tmpfs)"
fi
finish
