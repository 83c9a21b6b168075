"""Normalises what an endpoint answered into the value the harness compares.

An outcome is ``{"ok": response}`` or ``{"error": code, ...}``. Everything that legitimately
differs between two correct implementations is removed or put in a canonical order here:
request ids, consumed capacity, timestamps, stream event ids and sequence numbers, the order
of set members, of Scan results and of BatchGetItem results. Error messages are kept beside the
compared value, to be shown when outcomes differ.
"""

from __future__ import annotations

from typing import Any

from common.outcome import ABSENT, Outcome, canonical, walk_difference

DROPPED = {"ResponseMetadata", "ConsumedCapacity"}
DROPPED_RECORD = {"eventID", "eventVersion", "eventSource", "awsRegion"}
DROPPED_RECORD_DYNAMODB = {"ApproximateCreationDateTime", "SequenceNumber", "SizeBytes"}


def success(op: str, response: dict, *, keep_last_key: bool = False, keep_order: bool = False) -> Outcome:
    body = sort_sets({k: v for k, v in response.items() if k not in DROPPED})
    if op == "Scan":
        if not keep_order and "Items" in body:
            body["Items"] = sorted(body["Items"], key=canonical)
        if not keep_last_key:
            body.pop("LastEvaluatedKey", None)
    elif op == "BatchGetItem":
        body["Responses"] = {t: sorted(items, key=canonical) for t, items in body.get("Responses", {}).items()}
    elif op == "DescribeTable":
        body = {"Table": describe_table(body.get("Table", {}))}
    elif op in ("CreateTable", "UpdateTable"):
        body = {"TableDescription": describe_table(body.get("TableDescription", {}))}
    return Outcome({"ok": body})


def streams_success(op: str, response: dict) -> Outcome:
    """A DynamoDB Streams answer, minus what differs per server (ARNs, labels, ids, times)."""
    if op == "DescribeStream":
        d = response.get("StreamDescription", {})
        body = {k: d[k] for k in ("StreamStatus", "StreamViewType", "KeySchema") if k in d}
        body["Shards"] = len(d.get("Shards", []))
        body["HasLastEvaluatedShardId"] = "LastEvaluatedShardId" in d
        body["HasStreamArn"] = bool(d.get("StreamArn"))
    elif op == "ListStreams":
        streams = response.get("Streams", [])
        body = {"Tables": sorted(s.get("TableName", "") for s in streams),
                "HasLastEvaluatedStreamArn": "LastEvaluatedStreamArn" in response}
    elif op == "GetShardIterator":
        body = {"HasShardIterator": bool(response.get("ShardIterator"))}
    else:  # GetRecords
        records = response.get("Records", [])
        body = {"Records": [{"eventName": r.get("eventName"), "Keys": sort_sets(r.get("dynamodb", {}).get("Keys", {}))}
                            for r in records],
                "HasNextShardIterator": bool(response.get("NextShardIterator"))}
    return Outcome({"ok": body})


def describe_table(table: dict) -> dict:
    """The parts of a table description that are behaviour rather than bookkeeping."""
    out = {k: table[k] for k in ("TableName", "TableStatus", "KeySchema", "StreamSpecification") if k in table}
    if "AttributeDefinitions" in table:
        out["AttributeDefinitions"] = sorted(table["AttributeDefinitions"], key=canonical)
    if "BillingModeSummary" in table:
        out["BillingMode"] = table["BillingModeSummary"].get("BillingMode")
    out["HasLatestStreamArn"] = "LatestStreamArn" in table
    for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        # An index's name, keys and projection; its status, counts and ARN
        # are bookkeeping (DynamoDB shows a deleted index as DELETING for a
        # while, Postbox drops it at once: such entries are left out).
        indexes = [
            {
                "IndexName": i.get("IndexName"),
                "KeySchema": i.get("KeySchema"),
                "Projection": sort_sets(i.get("Projection", {})),
            }
            for i in table.get(kind, [])
            if i.get("IndexStatus") != "DELETING"
        ]
        if indexes:
            out[kind] = sorted(indexes, key=canonical)
    return out


def failure(response: dict) -> Outcome:
    """An error response as botocore parsed it (``ClientError.response``)."""
    error = response.get("Error", {})
    value: dict[str, Any] = {"error": error.get("Code", "?")}
    reasons = response.get("CancellationReasons")
    if reasons is not None:
        value["reasons"] = [
            {k: v for k, v in sort_sets(reason).items() if k != "Message"} for reason in reasons
        ]
    if "Item" in response:
        value["Item"] = sort_sets(response["Item"])
    return Outcome(value, error.get("Message"))


def client_failure(err: Exception) -> Outcome:
    """Something that never became a DynamoDB answer (connection refused, unparsable reply)."""
    return Outcome({"client_error": type(err).__name__}, str(err))


def stream_records(view: dict | None, records: list[dict]) -> Outcome:
    """All records of a table's stream, minus what is per-run; checks their order first."""
    sequence = [int(r.get("dynamodb", {}).get("SequenceNumber", "0") or 0) for r in records]
    in_order = all(a < b for a, b in zip(sequence, sequence[1:]))
    normalised = []
    for record in records:
        out = {k: v for k, v in record.items() if k not in DROPPED_RECORD}
        out["dynamodb"] = {k: v for k, v in record.get("dynamodb", {}).items() if k not in DROPPED_RECORD_DYNAMODB}
        normalised.append(sort_sets(out))
    value: dict[str, Any] = {"stream": view, "records": normalised}
    if not in_order:
        value["sequence_numbers_not_increasing"] = True
    return Outcome({"ok": value})


def final_scan(items: list[dict]) -> Outcome:
    return Outcome({"ok": {"Items": sorted((sort_sets(i) for i in items), key=canonical)}})


def sort_sets(value: Any) -> Any:
    """Puts the members of every SS/NS/BS in a canonical order, since sets have none."""
    if isinstance(value, dict):
        if len(value) == 1:
            (kind, members), = value.items()
            if kind in ("SS", "NS", "BS") and isinstance(members, list):
                return {kind: sorted(members, key=str)}
        return {k: sort_sets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sort_sets(v) for v in value]
    return value


def matches_expectation(outcome: Outcome, expect: str) -> bool:
    """``expect`` is ``ok`` or an error code; it documents what a case means to exercise."""
    value = outcome.value
    if expect == "ok":
        return "ok" in value
    return value.get("error") == expect


def first_difference(a: Any, b: Any) -> tuple[str, Any, Any] | None:
    """The first place where two outcome values differ, as (path, a's part, b's part)."""
    found = walk_difference(a, b)
    if found is None:
        return None
    path, kind, a_part, b_part = found
    if kind == "key":
        return (path.lstrip("."), _shown(a_part), _shown(b_part))
    if kind == "length":
        return (f"{path} length", len(a_part), len(b_part))
    return (path.lstrip(".") or "(whole outcome)", a_part, b_part)


def _shown(part: Any) -> Any:
    return "(absent)" if part is ABSENT else part
