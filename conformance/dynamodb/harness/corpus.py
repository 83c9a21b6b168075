"""Loads case files and expands their macros.

A case file is JSON: ``{"defaults": {...}, "cases": [...]}`` (see README.md for the format).
Macros let a case describe large requests without spelling them out:

- ``{"$repeat": "ab", "count": 3}`` becomes the string ``"ababab"``;
- ``{"$each": 3, "do": TEMPLATE}`` as a list element splices in three copies of TEMPLATE in
  which every ``{i}`` (or ``{i:03d}``, any Python format spec) in a string is replaced by the
  copy's index; anywhere else it becomes that list.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Runner options on a step are lowercase; DynamoDB parameters are capitalised.
STEP_OPTIONS = {"op", "label", "expect", "keep_last_key", "keep_order", "table", "note"}
PSEUDO_OPS = {"Stream"}
# Operations (and transaction actions) that name one table: TableName defaults to the case's
# first table. Write "TableName": null to send a request without one.
TABLE_OPS = {
    "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "DescribeTable",
    "UpdateTimeToLive", "DescribeTimeToLive", "DeleteTable", "UpdateTable",
}
TRANSACT_ACTIONS = {"Put", "Update", "Delete", "ConditionCheck", "Get"}


class CorpusError(Exception):
    """A case file that cannot be run as written."""


@dataclass
class Table:
    """A table a case creates: a logical name and a CreateTable request without TableName."""

    name: str
    request: dict


@dataclass
class Step:
    index: int
    op: str
    params: dict
    label: str | None = None
    expect: str | None = None
    keep_last_key: bool = False
    keep_order: bool = False
    table: str | None = None

    def title(self) -> str:
        title = f"step {self.index} {self.op}"
        return f"{title} ({self.label})" if self.label else title


@dataclass
class Case:
    name: str
    file: str
    doc: str
    tables: list[Table]
    items: dict[str, list[dict]]
    steps: list[Step] = field(default_factory=list)


DEFAULT_TABLES = [{"name": "t", "key": ["pk:S"]}]


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
    prefix = path.stem
    cases = []
    for raw in data.get("cases", []):
        try:
            cases.append(parse_case(prefix, path.name, raw, defaults))
        except CorpusError as err:
            raise CorpusError(f"{path.name}: case {raw.get('name', '?')}: {err}") from err
    return cases


def parse_case(prefix: str, file: str, raw: dict, defaults: dict) -> Case:
    if "name" not in raw:
        raise CorpusError("a case needs a name")
    unknown = set(raw) - {"name", "doc", "tables", "items", "steps"}
    if unknown:
        raise CorpusError(f"unknown case fields {sorted(unknown)}")
    tables = [parse_table(t) for t in raw.get("tables", defaults.get("tables", DEFAULT_TABLES))]
    if not tables:
        raise CorpusError("a case needs at least one table")
    names = {t.name for t in tables}
    items = expand(raw.get("items", defaults.get("items", {})))
    if isinstance(items, list):  # a bare list of items goes into the first table
        items = {tables[0].name: items}
    for table in items:
        if table not in names:
            raise CorpusError(f"items for unknown table {table}")
    steps = [parse_step(i + 1, s, tables[0].name) for i, s in enumerate(raw.get("steps", []))]
    return Case(
        name=f"{prefix}/{raw['name']}",
        file=file,
        doc=raw.get("doc", ""),
        tables=tables,
        items=items,
        steps=steps,
    )


def parse_table(raw: dict) -> Table:
    """A table is either compact (``key``, ``stream``) or a full CreateTable ``request``."""
    name = raw["name"]
    if "request" in raw:
        return Table(name, dict(raw["request"]))
    key = raw.get("key", ["pk:S"])
    if not 1 <= len(key) <= 2:
        raise CorpusError(f"table {name}: key must be [pk] or [pk, sk]")
    schema, definitions = [], []
    for spec, key_type in zip(key, ("HASH", "RANGE")):
        attr, _, attr_type = spec.rpartition(":")
        schema.append({"AttributeName": attr, "KeyType": key_type})
        definitions.append({"AttributeName": attr, "AttributeType": attr_type})
    request = {
        "KeySchema": schema,
        "AttributeDefinitions": definitions,
        "BillingMode": "PAY_PER_REQUEST",
    }
    if raw.get("stream"):
        request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": raw["stream"]}
    return Table(name, request)


def parse_step(index: int, raw: dict, default_table: str) -> Step:
    if "op" not in raw:
        raise CorpusError(f"step {index} has no op")
    unknown = {k for k in raw if k[:1].islower() and k not in STEP_OPTIONS}
    if unknown:
        raise CorpusError(f"step {index}: unknown options {sorted(unknown)}")
    op = raw["op"]
    params = expand({k: v for k, v in raw.items() if k not in STEP_OPTIONS})
    if op in TABLE_OPS:
        params = _default_table(params, default_table)
    if isinstance(params.get("TransactItems"), list):
        params["TransactItems"] = [
            {a: _default_table(body, default_table) if a in TRANSACT_ACTIONS and isinstance(body, dict) else body
             for a, body in action.items()} if isinstance(action, dict) else action
            for action in params["TransactItems"]
        ]
    return Step(
        index=index,
        op=op,
        params=params,
        label=raw.get("label"),
        expect=raw.get("expect"),
        keep_last_key=bool(raw.get("keep_last_key", False)),
        keep_order=bool(raw.get("keep_order", False)),
        table=raw.get("table", default_table if op in PSEUDO_OPS else None),
    )


def _default_table(params: dict, table: str) -> dict:
    if "TableName" not in params:
        return {"TableName": table, **params}
    if params["TableName"] is None:
        return {k: v for k, v in params.items() if k != "TableName"}
    return params


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
