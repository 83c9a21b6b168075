"""Loads case files and expands their macros into plain requests.

A case file is JSON: ``{"defaults": {...}, "cases": [...]}`` (see README.md for the format).
Reading the files and the macros (``$repeat``, ``$each``) are shared with the SQS suite
(``common.corpus``); the tables, items and steps of a case are DynamoDB's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from common import corpus as common_corpus
from common.corpus import CorpusError, expand

# Runner options on a step are lowercase; DynamoDB parameters are capitalised.
STEP_OPTIONS = {"op", "label", "expect", "keep_last_key", "keep_order", "table", "note"}
PSEUDO_OPS = {"Stream", "WaitForIndexes"}
# DynamoDB Streams operations, sent to the streams endpoint. In their parameters "$stream" is
# the step's table's latest stream ARN, "$shard" its first shard and "$iterator" a TRIM_HORIZON
# iterator of that shard, fetched on each side before the step.
STREAMS_OPS = {"ListStreams", "DescribeStream", "GetShardIterator", "GetRecords"}
CASE_FIELDS = {"name", "doc", "tables", "items", "steps", "creates"}
# Operations (and transaction actions) that name one table: TableName defaults to the case's
# first table. Write "TableName": null to send a request without one.
TABLE_OPS = {
    "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "DescribeTable",
    "UpdateTimeToLive", "DescribeTimeToLive", "DeleteTable", "UpdateTable",
}
TRANSACT_ACTIONS = {"Put", "Update", "Delete", "ConditionCheck", "Get"}


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
    # Logical names of tables the steps create (CreateTable steps): named per run, side and
    # case like the case's tables, and deleted after the case.
    creates: list[str] = field(default_factory=list)


DEFAULT_TABLES = [{"name": "t", "key": ["pk:S"]}]


def load_corpus(directory: Path) -> list[Case]:
    return common_corpus.load_corpus(directory, parse_case)


def parse_case(prefix: str, file: str, raw: dict, defaults: dict) -> Case:
    basics = common_corpus.case_basics(prefix, file, raw, CASE_FIELDS)
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
    creates = raw.get("creates", [])
    if not isinstance(creates, list) or not all(isinstance(c, str) for c in creates):
        raise CorpusError("creates must be a list of table names")
    return Case(**basics, tables=tables, items=items, steps=steps, creates=creates)


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
    _, params = common_corpus.split_step(index, raw, STEP_OPTIONS)
    op = raw["op"]
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
        table=raw.get("table", default_table if op in PSEUDO_OPS | STREAMS_OPS else None),
    )


def _default_table(params: dict, table: str) -> dict:
    if "TableName" not in params:
        return {"TableName": table, **params}
    if params["TableName"] is None:
        return {k: v for k, v in params.items() if k != "TableName"}
    return params
