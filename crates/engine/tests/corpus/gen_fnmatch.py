#!/usr/bin/env python3
"""Generates fnmatch.jsonl: (pattern, name, fnmatchcase result) triples.

The Rust glob matcher (crates/engine/src/glob.rs) must agree with Python's
fnmatch.fnmatchcase on every line. Run from anywhere:

    python3 crates/engine/tests/corpus/gen_fnmatch.py

The output is deterministic (fixed seed), so a regenerated file only changes
when Python's fnmatch does.
"""
import fnmatch
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Hand-picked corners of fnmatch.translate.
EDGE = [
    ("*", ""), ("*", "abc"), ("?", ""), ("?", "a"), ("??", "a"), ("a*b", "ab"), ("a*b", "axxb"),
    ("a*b*c", "abcbc"), ("*a", "bbba"), ("**", "x"), ("[abc]", "b"), ("[!abc]", "b"), ("[!abc]", "d"),
    ("[", "["), ("[a", "[a"), ("[!", "[!"), ("[!]", "[!]"), ("[]]", "]"), ("[]a]", "a"), ("[!]]", "]"),
    ("[!]]", "a"), ("[]", "[]"), ("[a-c]", "b"), ("[a-c]", "-"), ("[a-]", "-"), ("[-a]", "-"),
    ("[!-a]", "-"), ("[z-a]", "b"), ("[z-a]", "z"), ("[!z-a]", "q"), ("[a-c-e]", "-"), ("[a-c-e]", "d"),
    ("[a-c-e]", "e"), ("[b-a-c]", "-"), ("[b-a-c]", "c"), ("[b-a-c]", "b"), ("[a--b]", "b"),
    ("[a--b]", "-"), ("[--z]", "a"), ("[!--z]", "a"), ("[\\]", "\\"), ("[\\]a]", "a"), ("\\*", "\\x"),
    ("{a,b}", "a"), ("{a,b}", "{a,b}"), ("[^a]", "^"), ("[^a]", "b"), ("[[]", "["), ("[&&a]", "&"),
    ("[~~]", "~"), ("[||]", "|"), ("a?b", "a\nb"), ("*", "line\nbreak"), ("ORDER_*", "ORDER_PLACED"),
    ("ORDER_*", "order_placed"), ("row:*:INSERT", "row:CONTACT:INSERT"), ("row:CONTACT:*", "row:CONTACTADDRESS:INSERT"),
    ("CONTACTADDR", "CONTACTADDRESS"), ("[é-ü]", "ö"), ("?", "\U0001f600"), ("[\U0001f600]", "\U0001f600"),
    ("[a-\U0001f600]", "\U0001f000"), ("[!a-z]x", "Ax"), ("*[!a]", "aaa"), ("*[!a]", "aab"),
]

ALPHABET = "ab-!]*?[z^\\"
NAMES = "ab-!]z[^\\"


def main():
    rnd = random.Random(8785)
    cases = list(EDGE)
    while len(cases) < 4000:
        pat = "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 8)))
        for _ in range(3):
            name = "".join(rnd.choice(NAMES) for _ in range(rnd.randint(0, 6)))
            cases.append((pat, name))
    path = os.path.join(HERE, "fnmatch.jsonl")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for pat, name in cases:
            f.write(json.dumps({"pattern": pat, "name": name, "match": fnmatch.fnmatchcase(name, pat)}) + "\n")
    print(f"wrote {len(cases)} cases to {path} (Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
