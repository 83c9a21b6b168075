#!/usr/bin/env python3
"""Rewrites case files in the corpus's layout: one item per line, one step per line.

    format_cases.py [FILE...]      # default: every cases/*.json
    format_cases.py --check        # exit 1 if a file is not in this layout

Keeping one step per line makes a diff of the corpus show which steps changed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_line(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def format_file(data) -> str:
    if isinstance(data, list):
        data = {"cases": data}
    out = ["{"]
    head = [k for k in data if k != "cases"]
    for key in head:
        out.append(f"  {json.dumps(key)}: {one_line(data[key])},")
    out.append('  "cases": [')
    cases = data.get("cases", [])
    for n, case in enumerate(cases):
        out.append("    {")
        keys = list(case)
        for m, key in enumerate(keys):
            comma = "," if m < len(keys) - 1 else ""
            value = case[key]
            if key in ("steps", "items") and isinstance(value, list) and value:
                out.append(f"      {json.dumps(key)}: [")
                out.extend(f"        {one_line(v)}{',' if i < len(value) - 1 else ''}" for i, v in enumerate(value))
                out.append(f"      ]{comma}")
            elif key == "items" and isinstance(value, dict) and value:
                out.append(f"      {json.dumps(key)}: {{")
                tables = list(value)
                for i, table in enumerate(tables):
                    rows = value[table]
                    out.append(f"        {json.dumps(table)}: [")
                    out.extend(f"          {one_line(v)}{',' if j < len(rows) - 1 else ''}" for j, v in enumerate(rows))
                    out.append(f"        ]{',' if i < len(tables) - 1 else ''}")
                out.append(f"      }}{comma}")
            else:
                out.append(f"      {json.dumps(key)}: {one_line(value)}{comma}")
        out.append("    }" + ("," if n < len(cases) - 1 else ""))
    out.append("  ]")
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    files = [Path(a) for a in argv if a != "--check"] or sorted((HERE / "cases").glob("*.json"))
    bad = 0
    for path in files:
        text = path.read_text()
        formatted = format_file(json.loads(text))
        if text != formatted:
            if check:
                print(f"{path}: not formatted (run format_cases.py)")
                bad += 1
            else:
                path.write_text(formatted)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
