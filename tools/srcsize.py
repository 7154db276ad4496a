#!/usr/bin/env python3
"""tools/srcsize.py - the size limits of docs/CONTRIBUTING.md, checked.

Lists every file under src/ longer than --file-max lines and every C function
longer than --func-max lines (a function starts on a column-0 line that opens a
parameter list and is neither a preprocessor line nor a declaration; it ends at
the next line that is exactly "}"). Exit 0 when nothing is over, else 1.

    /usr/bin/python3 tools/srcsize.py [--file-max 800] [--func-max 100] [--all]

--all also prints the ten longest files and functions within the limits.
Kernel bodies unrolled on purpose may stand over the function limit; name them
in EXEMPT below with the reason.
"""
import argparse
import os
import re
import sys

EXEMPT = {}   # "path:function": "why it is long"

START = re.compile(r'^[A-Za-z_].*\(')
NAME = re.compile(r'([A-Za-z_][A-Za-z_0-9]*)\s*\(')


def functions(path):
    lines = open(path, encoding='utf-8', errors='replace').read().split('\n')
    start = name = None
    for i, line in enumerate(lines):
        if start is None:
            if START.match(line) and not line.startswith('#') and not line.rstrip().endswith(';'):
                if line.rstrip().endswith('}') and '{' in line:
                    continue                    # a whole function on one line
                m = NAME.search(line)
                start, name = i, (m.group(1) if m else '?')
        elif line == '}':
            yield name, start + 1, i - start + 1
            start = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--file-max', type=int, default=800)
    ap.add_argument('--func-max', type=int, default=100)
    ap.add_argument('--all', action='store_true')
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    os.chdir(root)
    files, funcs = [], []
    for d, _, names in os.walk('src'):
        for n in names:
            if not n.endswith(('.c', '.h')):
                continue
            p = os.path.join(d, n)
            with open(p, encoding='utf-8', errors='replace') as f:
                files.append((sum(1 for _ in f), p))
            if n.endswith('.c'):
                funcs += [(ln, '%s:%d' % (p, at), fn) for fn, at, ln in functions(p)]
    files.sort(reverse=True)
    funcs.sort(reverse=True)
    over_files = [x for x in files if x[0] > a.file_max]
    over_funcs = [x for x in funcs
                  if x[0] > a.func_max and '%s:%s' % (x[1].split(':')[0], x[2]) not in EXEMPT]
    print('%d files in src/, %d lines; %d functions' % (len(files), sum(x[0] for x in files), len(funcs)))
    print('files over %d lines: %d' % (a.file_max, len(over_files)))
    for n, p in over_files:
        print('  %5d  %s' % (n, p))
    print('functions over %d lines: %d' % (a.func_max, len(over_funcs)))
    for n, at, fn in over_funcs:
        print('  %5d  %s  %s' % (n, at, fn))
    if a.all:
        print('longest files:')
        for n, p in files[:10]:
            print('  %5d  %s' % (n, p))
        print('longest functions:')
        for n, at, fn in funcs[:10]:
            print('  %5d  %s  %s' % (n, at, fn))
    return 1 if over_files or over_funcs else 0


if __name__ == '__main__':
    sys.exit(main())
