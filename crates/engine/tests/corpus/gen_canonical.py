#!/usr/bin/env python3
"""Generates canonical.jsonl: JSON inputs and their RFC 8785 canonical form.

The expected output comes from the reference implementation, the PyPI
package `rfc8785`; the Rust canonicaliser (crates/engine/src/canonical.rs)
must produce the same bytes for every line. Install and run:

    PY=$(scripts/python-env.sh rfc8785)
    $PY crates/engine/tests/corpus/gen_canonical.py

Each line is {"name", "input": JSON text, "canonical": expected text}. Inputs
are written with Python's json.dumps, whose float repr is the shortest
round-trip form, so the Rust side parses back the very same doubles.
"""
import json
import math
import os
import random
import struct
import sys

import rfc8785

HERE = os.path.dirname(os.path.abspath(__file__))


def numbers(rnd):
    fixed = [
        0.0, -0.0, 1.0, -1.0, 0.1, 0.5, 1.5, 100.0, 1e20, 1e21, 1e22, 123456789012345680000.0,
        1e-6, 1e-7, 1.5e-7, 0.000001234, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
        9007199254740991.0, 9007199254740992.0, 333333333.3333333, 4.35, 0.3, 1 / 3, 2 / 3,
        295147905179352830000.0, 1e23, 8.41e21, 5.1e-5, 1e-5, 1e-100, 1.0000000000000002,
        -1.7976931348623157e308, 4503599627370496.5, 1e15, 1e16, 1e17, 12345.6789, 9.999999999999999e20,
    ]
    out = [(f"fixed {x!r}", x) for x in fixed]
    # Random doubles from their bits, all exponents.
    while len(out) < 1500:
        bits = rnd.getrandbits(64)
        x = struct.unpack("<d", struct.pack("<Q", bits))[0]
        if math.isfinite(x):
            out.append((f"bits {bits:016x}", x))
    # Random decimals of a few digits, where formatting thresholds bite.
    for _ in range(500):
        x = float(f"{rnd.randint(1, 99999)}e{rnd.randint(-12, 25)}")
        out.append((f"decimal {x!r}", x))
    # Integers within the safe range.
    for x in [0, 1, -1, 2**53 - 1, -(2**53 - 1), 10**15, 123456789]:
        out.append((f"int {x}", x))
    return out


def strings(rnd):
    fixed = [
        "", "plain", "\"quote\"", "back\\slash", "\b\f\n\r\t", "\u0000\u0001\u001f", "\u007f",
        "\u2028\u2029", "é", "\u20ac", "\U0001f600", "\ufb01", "/slash", "\ud7ff\ue000\uffff",
        "mixed \u0007 and \u00e9 and \U0001d11e",
    ]
    out = [(f"string {i}", s) for i, s in enumerate(fixed)]
    pool = [chr(c) for c in list(range(0, 0x30)) + [0x5c, 0x7f, 0x80, 0xff, 0x2028, 0xfeff, 0xfb01, 0x1f600, 0x10ffff, 0xd7ff, 0xe000]]
    for i in range(200):
        out.append((f"random string {i}", "".join(rnd.choice(pool) for _ in range(rnd.randint(0, 10)))))
    return out


def objects(rnd):
    keys = ["a", "b", "aa", "A", "", "\u00e9", "\ufb01", "\U0001f600", "\U0001d11e", "\ue000", "\uffff",
            "\u0080", "1", "10", "2", "\u20ac", "\r", "key with space", "\U00010000"]
    out = [
        ("rfc example", {"numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
                         "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
                         "literals": [None, True, False]}),
        ("utf16 order", {k: i for i, k in enumerate(keys)}),
        ("nested", {"b": {"z": [], "a": {}}, "a": [{"y": 1, "x": [None, {"\U0001f600": 1, "\ufb01": 2}]}]}),
        ("empty", {}),
    ]
    for i in range(200):
        obj = {}
        for _ in range(rnd.randint(0, 6)):
            k = "".join(rnd.choice(keys) for _ in range(rnd.randint(1, 3)))
            obj[k] = rnd.choice([None, True, False, rnd.random() * 10 ** rnd.randint(-8, 25), rnd.randint(-1000, 1000),
                                 rnd.choice(keys), [rnd.random(), "x"], {"k": rnd.choice(keys)}])
        out.append((f"random object {i}", obj))
    return out


def main():
    rnd = random.Random(8785)
    cases = numbers(rnd) + strings(rnd) + objects(rnd)
    path = os.path.join(HERE, "canonical.jsonl")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for name, value in cases:
            line = {
                "name": name,
                "input": json.dumps(value, ensure_ascii=True, allow_nan=False),
                "canonical": rfc8785.dumps(value).decode("utf-8"),
            }
            f.write(json.dumps(line, ensure_ascii=True) + "\n")
    print(f"wrote {len(cases)} cases to {path} (rfc8785 {getattr(rfc8785, '__version__', '?')})")


if __name__ == "__main__":
    main()
