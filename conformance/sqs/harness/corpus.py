"""Loads case files, expands their macros and checks the case format.

A case file is JSON: ``{"defaults": {...}, "cases": [...]}`` (README.md describes the format).
Reading the files and the load-time macros (``$repeat``, ``$each``) are shared with the
DynamoDB suite (``common.corpus``); the queues, steps and checks of a case are SQS's own.

References to things only known while a case runs (``$url``, ``$arn``, ``$name``, ``$rh``,
``$ref``, ``$json``) are left in place here and resolved per endpoint by ``side``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import corpus as common_corpus
from common.corpus import CorpusError, expand

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
    return common_corpus.load_corpus(directory, parse_case)


def parse_case(prefix: str, file: str, raw: dict, defaults: dict) -> Case:
    basics = common_corpus.case_basics(prefix, file, raw, CASE_FIELDS)
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
    return Case(**basics, requires=requires, queues=queues, steps=steps)


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
    options, params = common_corpus.split_step(index, raw, STEP_OPTIONS)
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
