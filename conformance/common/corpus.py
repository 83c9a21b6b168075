"""The case-file reading both corpora share: the files, their errors and the load-time macros.

A case file is JSON: ``{"defaults": {...}, "cases": [...]}`` (or a bare list of cases), and a
case is named ``<file stem>/<name>``. What a case holds is each suite's own (its ``parse_case``).
Macros let a case describe large or repetitive values without spelling them out:

- ``{"$repeat": "ab", "count": 3}`` becomes the string ``"ababab"``;
- ``{"$each": 3, "do": TEMPLATE}`` as a list element splices in three copies of TEMPLATE in
  which every ``{i}`` (or ``{i:03d}``, any Python format spec) in a string is replaced by the
  copy's index (``"from": 1`` starts elsewhere); anywhere else it becomes that list.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, TypeVar

C = TypeVar("C")
# parse_case(prefix, file name, raw case, the file's defaults) -> a case with a .name
ParseCase = Callable[[str, str, dict, dict], C]


class CorpusError(Exception):
    """A case file that cannot be run as written."""


def load_corpus(directory: Path, parse_case: ParseCase) -> list[C]:
    """Every case of every ``*.json`` in the directory, in file order; names must be unique."""
    files = sorted(directory.glob("*.json"))
    if not files:
        raise CorpusError(f"no case files (*.json) in {directory}")
    cases: list[C] = []
    seen: dict[str, str] = {}
    for path in files:
        for case in load_file(path, parse_case):
            if case.name in seen:
                raise CorpusError(f"case {case.name} is defined twice ({seen[case.name]} and {path.name})")
            seen[case.name] = path.name
            cases.append(case)
    return cases


def load_file(path: Path, parse_case: ParseCase) -> list[C]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CorpusError(f"{path}: not valid JSON: {err}") from err
    if isinstance(data, list):
        data = {"cases": data}
    defaults = data.get("defaults", {})
    cases = []
    for raw in data.get("cases", []):
        try:
            cases.append(parse_case(path.stem, path.name, raw, defaults))
        except CorpusError as err:
            raise CorpusError(f"{path.name}: case {raw.get('name', '?')}: {err}") from err
    return cases


def case_basics(prefix: str, file: str, raw: dict, fields: set[str]) -> dict[str, str]:
    """Checks that a raw case has a name and only known fields; returns its name, file and doc."""
    if "name" not in raw:
        raise CorpusError("a case needs a name")
    unknown = set(raw) - fields
    if unknown:
        raise CorpusError(f"unknown case fields {sorted(unknown)}")
    return {"name": f"{prefix}/{raw['name']}", "file": file, "doc": raw.get("doc", "")}


def split_step(index: int, raw: dict, options: set[str]) -> tuple[dict, dict]:
    """Checks that a raw step has an op and no unknown option; returns (options, params).

    Runner options on a step are lowercase and request parameters capitalised, so a lowercase
    key that is not an option is a mistake. The params come back with their macros expanded.
    """
    if "op" not in raw:
        raise CorpusError(f"step {index} has no op")
    unknown = {k for k in raw if k[:1].islower() and k not in options}
    if unknown:
        raise CorpusError(f"step {index}: unknown options {sorted(unknown)}")
    return {k: v for k, v in raw.items() if k in options}, expand({k: v for k, v in raw.items() if k not in options})


_INDEX = re.compile(r"\{i(?::([^}]*))?\}")


def expand(value: Any) -> Any:
    """Expands ``$repeat`` and ``$each`` macros, recursively."""
    if isinstance(value, dict):
        if "$repeat" in value:
            return str(value["$repeat"]) * int(value["count"])
        if "$each" in value:
            return _each(value)
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        out = []
        for element in value:
            if isinstance(element, dict) and "$each" in element:
                out.extend(_each(element))
            else:
                out.append(expand(element))
        return out
    return value


def _each(macro: dict) -> list:
    template = expand(macro["do"])
    start = int(macro.get("from", 0))
    return [_substitute(template, i) for i in range(start, start + int(macro["$each"]))]


def _substitute(value: Any, i: int) -> Any:
    if isinstance(value, str):
        return _INDEX.sub(lambda m: format(i, m.group(1) or ""), value)
    if isinstance(value, dict):
        return {_substitute(k, i): _substitute(v, i) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, i) for v in value]
    return value
