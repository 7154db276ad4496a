#!/bin/bash
# tools/lint.sh - checks of the tracked files that no compiler makes (run by .ci/run).
#
# Usage: bash tools/lint.sh      (from the repository root; exit 0: clean, 1: findings)
# Checks:
#   1. the size limits of docs/CONTRIBUTING.md (tools/srcsize.py);
#   2. no merge conflict markers left in a tracked file (a marker inside a C
#      comment compiles, so the build does not see it);
#   3. the repository stands alone: no relative path up into a sibling directory
#      of the repository and no absolute path into a machine's home or work tree
#      (the patterns below are spelled so that this file does not match them).
# Does not: check style beyond these, or untracked files.
cd "$(dirname "$0")/.." || exit 1
fail=0
/usr/bin/python3 tools/srcsize.py > /tmp/lint.$$ 2>&1 || { cat /tmp/lint.$$; fail=1; }
rm -f /tmp/lint.$$
if git grep -nE '^(<<<<<<<|>>>>>>>)( |$)|^=======$'; then
    echo "lint: merge conflict markers (above)"; fail=1
fi
outside='\.\./(sha)red|/(wo)rk/|/(ho)me/'
if git grep -nE "$outside"; then
    echo "lint: a path outside the repository (above)"; fail=1
fi
[ $fail -eq 0 ] && echo "lint: clean"
exit $fail
