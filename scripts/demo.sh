#!/usr/bin/env bash
# scripts/demo.sh - the README's first command (`make demo`).
# Runs the bundled default model (models/k3-tiny: the exact K3 architecture,
# trained on English text, see models/README.md) under the smallest RAM plan
# that fits (--ram min), so its trunk and routed experts are streamed from
# disk, and prints its continuation of a prompt with the statistics; with its draft model
# (models/k3-tiny-draft) speculating ahead.
# Without the bundled model it generates a tiny random checkpoint in the
# released layout and runs it on token ids.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/moestream
model=models/k3-tiny
draft=models/k3-tiny-draft
if [ -f "$model/config.json" ]; then
    prompt=${DEMO_PROMPT:-"And it came to pass, when the"}
    # its draft model guesses ahead and k3-tiny checks the guesses in one pass: the same
    # text from about half the bytes read (docs/PERFORMANCE.md, "A draft model")
    spec=()
    [ -f "$draft/config.json" ] && spec=(--speculate auto --draft-model "$draft")
    echo "demo: $BIN run $model --prompt \"$prompt\" --max-tokens 80 --ram min ${spec[*]}"
    echo
    "$BIN" run "$model" --prompt "$prompt" --max-tokens 80 --ram min "${spec[@]}"
else
    dir=$BUILD/demo-model
    if [ ! -f "$dir/config.json" ]; then
        echo "demo: generating a tiny random checkpoint in the released K3 layout into $dir"
        /usr/bin/python3 tools/msgen.py "$dir" --preset a --seed 1
    fi
    echo "demo: $BIN run $dir --ids 1,2,3,4,5 --gen 16 --ram min"
    "$BIN" run "$dir" --ids 1,2,3,4,5 --gen 16 --ram min
fi
