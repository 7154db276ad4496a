#!/usr/bin/env bash
# scripts/demo.sh - the README's first command (`make demo`).
# Until the bundled English model exists, it generates a tiny random checkpoint
# in the released Kimi K3 layout and runs greedy generation on it.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
dir=$BUILD/demo-model
if [ ! -f "$dir/config.json" ]; then
    echo "demo: generating a tiny checkpoint in the released K3 layout into $dir"
    /usr/bin/python3 tools/msgen.py "$dir" --preset a --seed 1
fi
echo "demo: $BUILD/moestream run $dir --ids 1,2,3,4,5 --gen 16"
"$BUILD"/moestream run "$dir" --ids 1,2,3,4,5 --gen 16
