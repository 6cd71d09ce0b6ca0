#!/usr/bin/env python3
"""wikitext2_lengths.py -- sentence lengths (in tokens) of a WikiText-2 token
file, one per line: the bundled data/wikitext2_lengths/wiki.test.lengths.

  python3 scripts/wikitext2_lengths.py WIKI.TEST.TOKENS > wiki.test.lengths

Headings (" = Title = ") and empty lines are skipped; every other line is
split on whitespace and cut into sentences after each "." "?" "!" token (the
terminator counts); a line's trailing tokens without a terminator form a
sentence of their own. ("@.@" is WikiText's decimal point, not a period.)
"""
import sys


def lengths(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if not s or s.startswith("="):
                continue
            n = 0
            for tok in s.split():
                n += 1
                if tok in (".", "?", "!"):
                    out.append(n)
                    n = 0
            if n:
                out.append(n)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.stdout.write("".join(f"{n}\n" for n in lengths(sys.argv[1])))
