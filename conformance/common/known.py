"""Reads known-differences.md: the cases where a mismatch is accepted, and why.

The file holds a markdown table whose first column is a case name (optionally in backticks,
optionally a glob such as ``numbers/exponent-*``); the other columns say what differs and why.
A listed case may differ from the reference in any step; what else a listed case must still
do is up to each suite's ``run.py`` (the SQS suite also wants the target to meet every
``expect`` of the case).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path


@dataclass
class KnownDifference:
    case: str
    what: str
    why: str

    def covers(self, case_name: str) -> bool:
        return fnmatch.fnmatchcase(case_name, self.case)


def load_known(path: Path) -> list[KnownDifference]:
    if not path.exists():
        return []
    known = []
    header_seen = False
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line.startswith("|"):
            header_seen = False
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the separator row
        if not header_seen:
            header_seen = True  # the first row of each table is its header
            continue
        case = cells[0].strip("`").strip()
        if case:
            known.append(KnownDifference(case, *(cells[1:3] + ["", ""])[:2]))
    return known


def covering(known: list[KnownDifference], case_name: str) -> KnownDifference | None:
    """The first listed difference that covers the case, if any."""
    return next((k for k in known if k.covers(case_name)), None)
