# tests/lib.sh - sourced by every tests/t_*.sh (from the repository root): the
# pass / fail counters and the three functions every script reports with.
#
# BUILD, BIN, PY     the build directory ($MS_BUILD, else build), the program
#                ($MS_BIN, else $BUILD/moestream) and the Python of the
#                oracles, unless the script set them before
#
# ok             one check passed
# bad MESSAGE    one check failed: prints "FAIL: MESSAGE"
# flip_tensor DIR NAME   XOR 0x01 into the middle byte of tensor NAME of the
#                checkpoint in DIR (found through its index)
# finish         prints "NAME: N passed, N failed" (NAME: the script's file name
#                without .sh), the line tests/run.sh reads, and exits 0 only
#                when nothing failed
: "${BUILD:=${MS_BUILD:-build}}" "${BIN:=${MS_BIN:-$BUILD/moestream}}" "${PY:=/usr/bin/python3}"
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() { echo "$(basename "$0" .sh): $pass passed, $fail failed"; [ "$fail" = 0 ]; exit $?; }
flip_tensor() {
    /usr/bin/python3 - "$1" "$2" <<'EOF'
import json, os, struct, sys
d, name = sys.argv[1], sys.argv[2]
shard = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"][name]
with open(os.path.join(d, shard), "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    b, e = json.loads(f.read(n))[name]["data_offsets"]
    at = 8 + n + b + (e - b) // 2
    f.seek(at); x = f.read(1); f.seek(at); f.write(bytes([x[0] ^ 1]))
EOF
}
