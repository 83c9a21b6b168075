"""Known wordings: error messages of ours that differ from DynamoDB Local's on purpose.

``known-wordings.md`` holds a table of (Local's message, ours, why); the first two columns
are regular expressions that must match the whole message. ``\\|`` inside a cell is a ``|``
of the expression (a bare ``|`` ends the cell).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Wording:
    reference: re.Pattern
    target: re.Pattern
    why: str

    def covers(self, reference: str, target: str) -> bool:
        return bool(self.reference.fullmatch(reference) and self.target.fullmatch(target))


def load_wordings(path: Path) -> list[Wording]:
    out = []
    header_seen = False
    for line in path.read_text().splitlines() if path.exists() else []:
        line = line.strip()
        if not line.startswith("|"):
            header_seen = False
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        if all(set(c) <= set("-: ") for c in cells):
            continue
        if not header_seen:
            header_seen = True
            continue
        if len(cells) < 3:
            raise ValueError(f"{path}: a row needs three cells: {line}")
        unquote = lambda c: c[1:-1] if c.startswith("`") and c.endswith("`") else c
        out.append(Wording(re.compile(unquote(cells[0])), re.compile(unquote(cells[1])), cells[2]))
    return out


def covering(wordings: list[Wording], reference: str, target: str) -> Wording | None:
    return next((w for w in wordings if w.covers(reference, target)), None)
