"""Normalises what an endpoint answered into the value the harness compares.

An outcome is ``{"ok": response}`` or ``{"error": code, "type": shape, "status": http}``.
Whatever legitimately differs between two correct implementations is replaced by a marker
that still says what matters about it:

- message ids become ``<message WHERE>``, WHERE being the step (and batch entry, or position
  in a receive) where the id was first seen, so a duplicate send answered with the original
  id reads ``<message s1>`` in both places, and a new id can never pass for an old one (a
  MessageDeduplicationId equal to a known message id reads the same way);
- receipt handles become ``<handle WHERE>`` the same way (a redelivery must hand out a new
  handle; a ReceiveRequestAttemptId retry must hand out the same one);
- MD5 digests become ``<md5 ok>`` or ``<md5 WRONG>``, checked against the body and attributes
  the harness knows (``keep_md5`` keeps the raw digests);
- timestamps become ``<ms timestamp>`` / ``<s timestamp>`` when plausible (integer, near now),
  and ApproximateFirstReceiveTimestamp also says whether it stayed the same on redelivery;
- SequenceNumber becomes ``<sequence number>`` when it is larger than every earlier one of
  its message group, ``<sequence number of the original>`` on a duplicate send, and
  ``<sequence number as sent>`` on receive; anything else is marked as a failure;
- queue URLs become ``<queue NAME>`` and ARNs ``<arn NAME>`` with this case's logical names
  (hosts, ports and account ids are not compared); ListQueues keeps only this case's queues;
- SenderId, task handles and pagination tokens become fixed markers.

Lists without a defined order are sorted: batch results by entry Id, messages received from a
standard queue by body, messages from a FIFO queue stably by message group (the order within a
group is kept and compared; the interleaving of groups is not defined by SQS).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import time
from typing import Any

from common.outcome import Outcome, canonical

DROPPED = {"ResponseMetadata"}
# Queue attributes outside what the queues implement (encryption, access policy); dropped from
# "All" answers, kept when a case asks for them by name.
OUT_OF_SCOPE_ATTRIBUTES = {"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled", "Policy"}
JSON_ATTRIBUTES = {"RedrivePolicy", "RedriveAllowPolicy", "Policy"}
ARN = re.compile(r"arn:aws[a-z-]*:sqs:[a-z0-9-]*:[0-9]*:([A-Za-z0-9_.-]+)")
DAY_MS = 86_400_000


class Context:
    """What one side has seen so far in one case: names, ids, handles, sequence numbers."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.names: dict[str, str] = {}  # physical queue name -> logical name
        self.ids: dict[str, str] = {}  # message id -> marker
        self.handles: dict[str, str] = {}  # receipt handle -> marker
        self.seq_by_id: dict[str, int] = {}
        self.group_max: dict[tuple[str, str], int] = {}
        self.group_of_id: dict[str, str] = {}
        self.first_receive: dict[str, str] = {}

    # Names -----------------------------------------------------------------------------------

    def logical(self, physical: str) -> str:
        if physical in self.names:
            return self.names[physical]
        if physical.startswith(self.prefix):
            return "?" + physical[len(self.prefix):]
        return "(not this case's queue)"

    def queue_marker(self, url: Any) -> Any:
        if not isinstance(url, str):
            return url
        return f"<queue {self.logical(url.rstrip('/').rsplit('/', 1)[-1])}>"

    def owns(self, url: str) -> bool:
        return url.rstrip("/").rsplit("/", 1)[-1].startswith(self.prefix)

    def text(self, value: Any) -> Any:
        """Rewrites ARNs, queue URLs and physical names inside strings, recursively."""
        if isinstance(value, str):
            value = ARN.sub(lambda m: f"<arn {self.logical(m.group(1))}>", value)
            for physical in sorted(self.names, key=len, reverse=True):
                value = value.replace(physical, self.names[physical])
            return value
        if isinstance(value, list):
            return [self.text(v) for v in value]
        if isinstance(value, dict):
            # A message body is data, never rewritten.
            return {k: (v if k == "Body" else self.text(v)) for k, v in value.items()}
        return value

    # Markers ---------------------------------------------------------------------------------

    def id_marker(self, raw: Any, where: str) -> Any:
        if not isinstance(raw, str):
            return raw
        return self.ids.setdefault(raw, f"<message {where}>")

    def handle_marker(self, raw: Any, where: str) -> Any:
        if not isinstance(raw, str):
            return raw
        return self.handles.setdefault(raw, f"<handle {where}>")


# Checks --------------------------------------------------------------------------------------


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def md5_of_attributes(attributes: dict | None) -> str | None:
    """The digest SQS computes over message attributes (documented in the developer guide):
    for each attribute by name: length-prefixed name, length-prefixed data type, then 1 and the
    length-prefixed UTF-8 string value, or 2 and the length-prefixed binary value."""
    if not attributes:
        return None
    buf = bytearray()
    for name in sorted(attributes):
        attr = attributes[name] or {}
        data_type = str(attr.get("DataType", "")).encode()
        buf += struct.pack("!I", len(name.encode())) + name.encode()
        buf += struct.pack("!I", len(data_type)) + data_type
        if "BinaryValue" in attr:
            value = attr["BinaryValue"]
            if isinstance(value, str):
                value = base64.b64decode(value)
            buf += b"\x02" + struct.pack("!I", len(value)) + bytes(value)
        else:
            value = str(attr.get("StringValue", "")).encode()
            buf += b"\x01" + struct.pack("!I", len(value)) + value
    return md5_hex(bytes(buf))


def md5_check(given: Any, expected: str | None, keep: bool) -> Any:
    if keep:
        return given
    if expected is None:
        return "<md5 of nothing?>"
    return "<md5 ok>" if given == expected else "<md5 WRONG>"


def timestamp(value: Any, unit_ms: bool) -> str:
    try:
        number = int(str(value))
    except ValueError:
        return f"<bad timestamp {value!r}>"
    now = time.time() * 1000
    ms = number if unit_ms else number * 1000
    # A test clock may run ahead of the wall clock; 30 days covers the longest retention.
    if now - DAY_MS <= ms <= now + 30 * DAY_MS:
        return "<ms timestamp>" if unit_ms else "<s timestamp>"
    return f"<implausible timestamp {value!r} ({'ms' if unit_ms else 's'})>"


# Outcomes ------------------------------------------------------------------------------------


def failure(response: dict, ctx: Context) -> Outcome:
    """An error response as botocore parsed it (``ClientError.response``)."""
    error = response.get("Error", {})
    code = error.get("Code", "?")
    value: dict[str, Any] = {
        "error": code,
        "type": error.get("QueryErrorCode", code),
        "status": response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
    }
    if "Type" in error:
        value["fault"] = error["Type"]
    return Outcome(value, ctx.text(error.get("Message")))


def client_failure(err: Exception) -> Outcome:
    """Something that never became an SQS answer (connection refused, unparsable reply)."""
    return Outcome({"client_error": type(err).__name__}, str(err))


def success(op: str, params: dict, response: dict, where: str, ctx: Context, options: dict) -> Outcome:
    body = {k: v for k, v in response.items() if k not in DROPPED}
    keep_md5 = bool(options.get("keep_md5"))
    queue = params.get("QueueUrl", "")
    messages: list[str] = []
    if op == "SendMessage":
        body = send_result(body, params, queue, where, ctx, keep_md5)
    elif op == "SendMessageBatch":
        entries = {e.get("Id"): e for e in params.get("Entries", []) if isinstance(e, dict)}
        body["Successful"] = [
            send_result(e, entries.get(e.get("Id"), {}), queue, f"{where}/{e.get('Id')}", ctx, keep_md5)
            for e in sorted(body.get("Successful", []), key=lambda e: str(e.get("Id")))
        ]
        body["Failed"] = batch_failures(body.get("Failed", []), messages)
    elif op in ("DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
        body["Successful"] = sorted(body.get("Successful", []), key=lambda e: str(e.get("Id")))
        body["Failed"] = batch_failures(body.get("Failed", []), messages)
    elif op == "ReceiveMessage":
        # No messages may be answered as an empty list or as no member at all: the same to a client.
        if body.get("Messages"):
            body["Messages"] = received(body["Messages"], queue, where, ctx, options)
        else:
            body.pop("Messages", None)
    elif op in ("CreateQueue", "GetQueueUrl"):
        if "QueueUrl" in body:
            body["QueueUrl"] = ctx.queue_marker(body["QueueUrl"])
    elif op in ("ListQueues", "ListDeadLetterSourceQueues"):
        key = "QueueUrls" if op == "ListQueues" else "queueUrls"
        # Only this case's queues; an empty list and no member are the same to a client.
        body[key] = sorted(ctx.queue_marker(u) for u in body.get(key) or [] if isinstance(u, str) and ctx.owns(u))
        if body.get("NextToken"):
            body["NextToken"] = "<token>"
    elif op == "GetQueueAttributes":
        wanted = params.get("AttributeNames") or []
        body["Attributes"] = queue_attributes(body.get("Attributes", {}), "All" in wanted, ctx)
    elif op == "StartMessageMoveTask":
        if "TaskHandle" in body:
            body["TaskHandle"] = "<task handle>"
    elif op == "ListMessageMoveTasks":
        body["Results"] = [move_task(r, ctx) for r in body.get("Results", [])]
    elif op == "ListQueueTags":
        pass
    return Outcome({"ok": ctx.text(body)}, "; ".join(messages) or None)


def batch_failures(failed: list, messages: list[str]) -> list:
    out = []
    for entry in sorted(failed, key=lambda e: str(e.get("Id"))):
        if entry.get("Message"):
            messages.append(f"{entry.get('Id')}: {entry['Message']}")
        out.append({k: v for k, v in entry.items() if k != "Message"})
    return out


def send_result(body: dict, request: dict, queue: str, where: str, ctx: Context, keep_md5: bool) -> dict:
    out = dict(body)
    raw_id = body.get("MessageId")
    new = isinstance(raw_id, str) and raw_id not in ctx.ids
    group = request.get("MessageGroupId")
    if "MessageId" in out:
        out["MessageId"] = ctx.id_marker(raw_id, where)
    if new and group is not None:
        ctx.group_of_id[raw_id] = group
    if "MD5OfMessageBody" in out:
        text = request.get("MessageBody")
        expected = md5_hex(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else None
        out["MD5OfMessageBody"] = md5_check(out["MD5OfMessageBody"], expected, keep_md5)
    if "MD5OfMessageAttributes" in out:
        out["MD5OfMessageAttributes"] = md5_check(
            out["MD5OfMessageAttributes"], md5_of_attributes(request.get("MessageAttributes")), keep_md5
        )
    if "MD5OfMessageSystemAttributes" in out:
        out["MD5OfMessageSystemAttributes"] = md5_check(
            out["MD5OfMessageSystemAttributes"], md5_of_attributes(request.get("MessageSystemAttributes")), keep_md5
        )
    if "SequenceNumber" in out:
        out["SequenceNumber"] = sent_sequence(out["SequenceNumber"], raw_id, new, queue, group, ctx)
    return out


def sent_sequence(raw: Any, raw_id: Any, new: bool, queue: str, group: Any, ctx: Context) -> str:
    try:
        number = int(str(raw))
    except ValueError:
        return f"<bad sequence number {raw!r}>"
    if not new:
        original = ctx.seq_by_id.get(raw_id)
        if original is None:
            return "<sequence number>"
        return "<sequence number of the original>" if number == original else "<sequence number differs from the original>"
    key = (queue, str(group))
    previous = ctx.group_max.get(key)
    if isinstance(raw_id, str):
        ctx.seq_by_id[raw_id] = number
    if previous is not None and number <= previous:
        return "<sequence number NOT increasing within its group>"
    ctx.group_max[key] = number
    return "<sequence number>"


def received(messages: list, queue: str, where: str, ctx: Context, options: dict) -> list:
    ordered = order_messages(messages, queue, ctx, options.get("sort", "auto"))
    return [message(m, f"{where} #{i}", ctx, bool(options.get("keep_md5"))) for i, m in enumerate(ordered)]


def order_messages(messages: list, queue: str, ctx: Context, mode: str) -> list:
    if mode == "none":
        return list(messages)
    if is_fifo(queue):
        return sorted(messages, key=lambda m: group_of(m, ctx))  # stable: keeps order within a group
    return sorted(messages, key=lambda m: (str(m.get("Body")), canonical(m.get("MessageAttributes"))))


def is_fifo(queue_url: str) -> bool:
    return isinstance(queue_url, str) and queue_url.rstrip("/").endswith(".fifo")


def group_of(m: dict, ctx: Context) -> str:
    group = (m.get("Attributes") or {}).get("MessageGroupId")
    if group is None:
        group = ctx.group_of_id.get(m.get("MessageId"), "")
    return str(group)


def message(m: dict, where: str, ctx: Context, keep_md5: bool) -> dict:
    raw_id = m.get("MessageId")
    out: dict[str, Any] = {}
    for key, value in m.items():
        if key == "MessageId":
            out[key] = ctx.id_marker(value, where)
        elif key == "ReceiptHandle":
            out[key] = ctx.handle_marker(value, where)
        elif key == "MD5OfBody":
            body = m.get("Body")
            out[key] = md5_check(value, md5_hex(body.encode("utf-8", "surrogatepass")) if isinstance(body, str) else None, keep_md5)
        elif key == "MD5OfMessageAttributes":
            out[key] = md5_check(value, md5_of_attributes(m.get("MessageAttributes")), keep_md5)
        elif key == "Attributes":
            out[key] = message_attributes(value, raw_id, ctx)
        else:
            out[key] = value
    return out


def message_attributes(attributes: dict, raw_id: Any, ctx: Context) -> dict:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if key == "SenderId":
            out[key] = "<sender id>"
        elif key == "SentTimestamp":
            out[key] = timestamp(value, unit_ms=True)
        elif key == "ApproximateFirstReceiveTimestamp":
            mark = timestamp(value, unit_ms=True)
            if mark == "<ms timestamp>" and isinstance(raw_id, str):
                first = ctx.first_receive.setdefault(raw_id, value)
                mark = "<ms timestamp, first receive>" if first == value else "<ms timestamp, CHANGED since the first receive>"
            out[key] = mark
        elif key == "MessageDeduplicationId" and isinstance(value, str) and value in ctx.ids:
            # A FIFO DLQ replaces the deduplication id of a moved message by its message id.
            out[key] = ctx.ids[value]
        elif key == "SequenceNumber":
            original = ctx.seq_by_id.get(raw_id)
            try:
                number = int(str(value))
            except ValueError:
                out[key] = f"<bad sequence number {value!r}>"
                continue
            if original is None:
                out[key] = "<sequence number>"
            else:
                out[key] = "<sequence number as sent>" if number == original else "<sequence number differs from the send>"
        else:
            out[key] = value
    return out


def queue_attributes(attributes: dict, asked_all: bool, ctx: Context) -> dict:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if asked_all and key in OUT_OF_SCOPE_ATTRIBUTES:
            continue
        if key in ("CreatedTimestamp", "LastModifiedTimestamp"):
            out[key] = timestamp(value, unit_ms=False)
        elif key in JSON_ATTRIBUTES and isinstance(value, str):
            try:
                out[key] = ctx.text(json.loads(value))
            except ValueError:
                out[key] = ctx.text(value)
        else:
            out[key] = ctx.text(value)
    return out


def move_task(entry: dict, ctx: Context) -> dict:
    out = dict(entry)
    if "TaskHandle" in out:
        out["TaskHandle"] = "<task handle>"
    if "StartedTimestamp" in out:
        out["StartedTimestamp"] = timestamp(out["StartedTimestamp"], unit_ms=True)
    return ctx.text(out)


# Projections ---------------------------------------------------------------------------------


def project(outcome: Outcome, how: str | None) -> Outcome:
    """Reduces a successful outcome to the part a step compares (its ``project`` option)."""
    if not how or how == "none" or "ok" not in outcome.value:
        return outcome
    body = outcome.value["ok"]
    if how == "bodies":
        return Outcome({"ok": {"bodies": [m.get("Body") for m in body.get("Messages", [])]}}, outcome.message)
    if how == "count":
        items = body.get("Messages", body.get("QueueUrls", body.get("Results", [])))
        value: dict[str, Any] = {"count": len(items)}
        if "NextToken" in body:
            value["NextToken"] = body["NextToken"]
        return Outcome({"ok": value}, outcome.message)
    if how == "lengths":
        items = body.get("Messages", [])
        return Outcome({"ok": {"lengths": [len(str(m.get("Body", "")).encode("utf-8", "surrogatepass")) for m in items]}},
                       outcome.message)
    if how == "keys":
        return Outcome({"ok": {"keys": sorted(body.get("Attributes", {}))}}, outcome.message)
    if how == "attributes":
        return Outcome(
            {"ok": {"attributes": [m.get("Attributes", {}) for m in body.get("Messages", [])]}}, outcome.message
        )
    return outcome
