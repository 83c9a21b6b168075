"""Loads case files, expands their macros and checks the case format.

A case file is JSON: ``{"defaults": {...}, "cases": [...]}`` (README.md describes the format).
Load-time macros let a case describe large or repetitive values without spelling them out:

- ``{"$repeat": "ab", "count": 3}`` becomes the string ``"ababab"``;
- ``{"$each": 3, "do": TEMPLATE}`` as a list element splices in three copies of TEMPLATE in
  which every ``{i}`` (or ``{i:03d}``, any Python format spec) in a string is replaced by the
  copy's index (``"from": 1`` starts elsewhere); anywhere else it becomes that list.

References to things only known while a case runs (``$url``, ``$arn``, ``$name``, ``$rh``,
``$ref``, ``$json``) are left in place here and resolved per endpoint by ``side``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .expect import validate as validate_expectation

# Runner options on a step are lowercase; SQS request parameters are capitalised.
STEP_OPTIONS = {
    "op", "queue", "label", "expect", "note", "background", "timing", "keep_md5", "project",
    "sort", "seconds", "step", "request", "until", "timeout", "interval", "delete",
    "visibility", "max_rounds",
}
PSEUDO_OPS = {"Sleep", "Join", "Poll", "Drain", "AdvanceClock"}
CASE_FIELDS = {"name", "doc", "requires", "queues", "steps"}
QUEUE_FIELDS = {"name", "fifo", "attributes", "tags"}
CAPABILITIES = {"clock"}
PROJECTIONS = {"bodies", "count", "keys", "attributes", "lengths", "none"}


class CorpusError(Exception):
    """A case file that cannot be run as written."""


@dataclass
class QueueSpec:
    """A queue a case creates before its steps, under a per-run physical name."""

    name: str
    fifo: bool = False
    attributes: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)


@dataclass
class Step:
    index: int
    op: str
    params: dict
    options: dict

    @property
    def label(self) -> str | None:
        return self.options.get("label")

    @property
    def expect(self) -> Any:
        return self.options.get("expect")

    def title(self) -> str:
        title = f"step {self.index} {self.op}"
        if self.op == "Join":
            title += f" {self.options.get('step')}"
        elif self.op == "Poll":
            title += f" {self.options['request'].get('op')}"
        return f"{title} ({self.label})" if self.label else title


@dataclass
class Case:
    name: str
    file: str
    doc: str
    requires: list[str]
    queues: list[QueueSpec]
    steps: list[Step] = field(default_factory=list)


DEFAULT_QUEUES = [{"name": "q"}]


def load_corpus(directory: Path) -> list[Case]:
    files = sorted(directory.glob("*.json"))
    if not files:
        raise CorpusError(f"no case files (*.json) in {directory}")
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for path in files:
        for case in load_file(path):
            if case.name in seen:
                raise CorpusError(f"case {case.name} is defined twice ({seen[case.name]} and {path.name})")
            seen[case.name] = path.name
            cases.append(case)
    return cases


def load_file(path: Path) -> list[Case]:
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


def parse_case(prefix: str, file: str, raw: dict, defaults: dict) -> Case:
    if "name" not in raw:
        raise CorpusError("a case needs a name")
    unknown = set(raw) - CASE_FIELDS
    if unknown:
        raise CorpusError(f"unknown case fields {sorted(unknown)}")
    requires = list(raw.get("requires", defaults.get("requires", [])))
    if set(requires) - CAPABILITIES:
        raise CorpusError(f"unknown requirements {sorted(set(requires) - CAPABILITIES)}")
    queues = [parse_queue(q) for q in expand(raw.get("queues", defaults.get("queues", DEFAULT_QUEUES)))]
    names = [q.name for q in queues]
    if len(set(names)) != len(names):
        raise CorpusError("two queues share a name")
    steps = [parse_step(i + 1, s) for i, s in enumerate(raw.get("steps", []))]
    labels = [s.label for s in steps if s.label]
    if len(set(labels)) != len(labels):
        raise CorpusError("two steps share a label")
    for step in steps:
        if step.op == "AdvanceClock" and "clock" not in requires:
            raise CorpusError(f"step {step.index}: AdvanceClock needs \"requires\": [\"clock\"]")
        if step.op == "Join" and step.options.get("step") not in labels:
            raise CorpusError(f"step {step.index}: Join names no labelled step")
    return Case(
        name=f"{prefix}/{raw['name']}",
        file=file,
        doc=raw.get("doc", ""),
        requires=requires,
        queues=queues,
        steps=steps,
    )


def parse_queue(raw: dict) -> QueueSpec:
    if not isinstance(raw, dict) or "name" not in raw:
        raise CorpusError("a queue needs a name")
    unknown = set(raw) - QUEUE_FIELDS
    if unknown:
        raise CorpusError(f"queue {raw['name']}: unknown fields {sorted(unknown)}")
    return QueueSpec(
        name=raw["name"],
        fifo=bool(raw.get("fifo", False)),
        attributes=dict(raw.get("attributes", {})),
        tags=dict(raw.get("tags", {})),
    )


def parse_step(index: int, raw: dict) -> Step:
    if "op" not in raw:
        raise CorpusError(f"step {index} has no op")
    unknown = {k for k in raw if k[:1].islower() and k not in STEP_OPTIONS}
    if unknown:
        raise CorpusError(f"step {index}: unknown options {sorted(unknown)}")
    options = {k: v for k, v in raw.items() if k in STEP_OPTIONS}
    params = expand({k: v for k, v in raw.items() if k not in STEP_OPTIONS})
    op = options["op"]
    if op in PSEUDO_OPS:
        if params:
            raise CorpusError(f"step {index}: {op} takes no request parameters ({sorted(params)})")
        if op == "Poll":
            if not isinstance(options.get("request"), dict) or "until" not in options:
                raise CorpusError(f"step {index}: Poll needs a request and an until")
            inner = options["request"]
            options["request"] = {
                "op": inner["op"],
                "options": {k: v for k, v in inner.items() if k in STEP_OPTIONS and k != "op"},
                "params": expand({k: v for k, v in inner.items() if k not in STEP_OPTIONS}),
            }
        if op in ("Sleep", "AdvanceClock") and not isinstance(options.get("seconds"), (int, float)):
            raise CorpusError(f"step {index}: {op} needs seconds")
    elif not op[:1].isupper():
        raise CorpusError(f"step {index}: unknown op {op}")
    if options.get("project", "none") not in PROJECTIONS:
        raise CorpusError(f"step {index}: project must be one of {sorted(PROJECTIONS)}")
    if options.get("background") and not options.get("label"):
        raise CorpusError(f"step {index}: a background step needs a label to Join")
    try:
        validate_expectation(options.get("expect"))
        if op == "Poll":
            validate_expectation(options["until"])
    except ValueError as err:
        raise CorpusError(f"step {index}: {err}") from err
    timing = options.get("timing")
    if timing is not None and not (isinstance(timing, list) and len(timing) == 2):
        raise CorpusError(f"step {index}: timing is [min_seconds, max_seconds]")
    return Step(index=index, op=op, params=params, options=options)


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
