"""The value compared for one step, and where two of them first differ.

An outcome is ``{"ok": response}`` or ``{"error": code, ...}``, as each suite normalises it;
the error message is kept beside the compared value, to be shown when outcomes differ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass
class Outcome:
    value: Any
    message: str | None = None

    def canonical(self) -> str:
        return canonical(self.value)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class Absent:
    """Stands for the side of a difference where a key is missing."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = Absent()


def walk_difference(a: Any, b: Any, path: str = "") -> tuple[str, str, Any, Any] | None:
    """The first place where two outcome values differ, in sorted key and list order.

    Returns ``(path, kind, a's part, b's part)`` with a path such as ``.ok.Items[1]`` (``""``
    for the whole value). ``kind`` is ``"key"`` when only one side has the key at the path
    (the other part is ``ABSENT``), ``"length"`` when two lists agree as far as the shorter goes
    (the parts are the lists), and ``"value"`` otherwise. Each suite words the place its way.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return (f"{path}.{key}", "key", a.get(key, ABSENT), b.get(key, ABSENT))
            found = walk_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = walk_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            return (path, "length", a, b)
        return None
    return None if a == b else (path, "value", a, b)
