"""Runs one case on one endpoint: its queues, its steps and the references between them.

Each side names its queues ``<prefix><logical name>`` (``.fifo`` appended for FIFO queues), so
a reference run against itself never collides, and every queue a case made is found again for
cleanup. Request parameters may hold references resolved here, per side, just before the
request is sent:

- ``{"$url": "q"}``: the queue's URL (for a queue that does not exist, a URL of the same shape);
- ``{"$name": "q"}``: the queue's physical name; ``"length": 80`` pads it to that many characters;
- ``{"$arn": "q"}``: the queue's ARN, read with GetQueueAttributes (or made up for a missing queue);
- ``{"$rh": "label", "body": "x"}`` / ``"index": 0``: a receipt handle from a receive step;
- ``{"$ref": "label", "path": "Successful.0.Id"}``: any value of an earlier step's response;
- ``{"$json": VALUE}``: VALUE (references resolved) as a JSON string, e.g. a RedrivePolicy;
- ``{"$sha256": "text"}``: the hex SHA-256 of the text.

Pseudo-steps: ``Sleep`` (seconds), ``Join`` (the outcome of an earlier ``background`` step),
``Poll`` (repeat a request until its outcome matches ``until``), ``Drain`` (receive and delete
until the queue answers empty; the outcome is the bodies) and ``AdvanceClock``.
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from common import wire

from . import expect as ex
from . import normalise as nm
from .corpus import Case, QueueSpec, Step
from .endpoint import Endpoint


class ResolveError(Exception):
    """A reference that cannot be resolved, e.g. to a receive that returned nothing."""


@dataclass
class Raw:
    op: str
    params: dict
    elapsed: float
    response: dict | None = None
    error: dict | None = None
    exc: Exception | None = None


class Side:
    def __init__(self, endpoint: Endpoint, prefix: str, case: Case):
        self.endpoint = endpoint
        self.prefix = prefix
        self.case = case
        self.ctx = nm.Context(prefix)
        self.fifo = {q.name for q in case.queues if q.fifo}
        self.urls: dict[str, str] = {}
        self.arns: dict[str, str] = {}
        self.responses: dict[str, dict] = {}
        self.pending: dict[str, tuple[Step, Future]] = {}
        self._pool: ThreadPoolExecutor | None = None
        for spec in case.queues:
            self.physical(spec.name)

    # Running ---------------------------------------------------------------------------------

    def run(self) -> list[tuple[str, Step | None, nm.Outcome]]:
        out: list[tuple[str, Step | None, nm.Outcome]] = []
        try:
            for spec in self.case.queues:
                failed = self.create(spec)
                if failed is not None:
                    out.append((f"create queue {spec.name}", None, failed))
                    return out  # nothing after this would mean anything
            for step in self.case.steps:
                outcome = self.step(step)
                if outcome is not None:
                    out.append((step.title(), step, outcome))
        finally:
            for _, future in self.pending.values():
                future.result()
            if self._pool:
                self._pool.shutdown(wait=True)
        return out

    def create(self, spec: QueueSpec) -> nm.Outcome | None:
        try:
            attributes = {k: v if isinstance(v, str) else self.resolve(v) for k, v in spec.attributes.items()}
        except ResolveError as err:
            return nm.Outcome({"unresolved": str(err)})
        attributes = {k: v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list)) else str(v)
                      for k, v in attributes.items()}
        if spec.fifo:
            attributes = {"FifoQueue": "true", **attributes}
        params: dict[str, Any] = {"QueueName": self.physical(spec.name)}
        if attributes:
            params["Attributes"] = attributes
        if spec.tags:
            params["tags"] = spec.tags
        raw = self.call("CreateQueue", params)
        if raw.response is not None:
            self.track("CreateQueue", raw.response)
            return None
        return self.failed(raw)

    def step(self, step: Step) -> nm.Outcome | None:
        op, options = step.op, step.options
        if op == "Sleep":
            time.sleep(float(options["seconds"]))
            return None
        if op == "AdvanceClock":
            return self.advance_clock(float(options["seconds"]))
        if op == "Join":
            joined, future = self.pending.pop(options["step"])
            return self.finish(joined, future.result())
        if op == "Poll":
            return self.poll(step)
        if op == "Drain":
            return self.drain(step)
        try:
            params = self.prepare(step.params, options)
        except ResolveError as err:
            return nm.Outcome({"unresolved": str(err)})
        if options.get("background"):
            self.pending[step.label] = (step, self.pool().submit(self.call, op, params))
            return None
        return self.finish(step, self.call(op, params))

    def prepare(self, params: dict, options: dict) -> dict:
        resolved = self.resolve(params)
        if "queue" in options and "QueueUrl" not in resolved:
            resolved = {"QueueUrl": self.url_of(options["queue"]), **resolved}
        return resolved

    def call(self, op: str, params: dict) -> Raw:
        started = time.monotonic()
        try:
            response = self.endpoint.raw(op, params)
            return Raw(op, params, time.monotonic() - started, response=response)
        except ClientError as err:
            return Raw(op, params, time.monotonic() - started, error=wire.from_boto(err.response))
        except Exception as err:  # noqa: BLE001 - connection errors, unparsable answers
            return Raw(op, params, time.monotonic() - started, exc=err)

    def finish(self, step: Step, raw: Raw) -> nm.Outcome:
        where = step.label or f"step {step.index}"
        if raw.response is not None:
            self.responses[f"#{step.index}"] = raw.response
            if step.label:
                self.responses[step.label] = raw.response
            self.track(raw.op, raw.response)
            outcome = nm.success(raw.op, raw.params, raw.response, where, self.ctx, step.options)
        else:
            outcome = self.failed(raw)
        outcome = nm.project(outcome, step.options.get("project"))
        timing = step.options.get("timing")
        if timing:
            low, high = float(timing[0]), float(timing[1])
            verdict = "in range" if low <= raw.elapsed <= high else (
                f"faster than {low}s" if raw.elapsed < low else f"slower than {high}s")
            note = f"took {raw.elapsed:.2f}s"
            outcome = nm.Outcome({**outcome.value, "timing": verdict},
                                 f"{outcome.message}; {note}" if outcome.message else note)
        return outcome

    def failed(self, raw: Raw) -> nm.Outcome:
        if raw.error is not None:
            return nm.failure(raw.error, self.ctx)
        return nm.client_failure(raw.exc or RuntimeError("no answer"))

    def track(self, op: str, response: dict) -> None:
        """Remembers the URL of every queue this case creates or looks up."""
        if op in ("CreateQueue", "GetQueueUrl") and isinstance(response.get("QueueUrl"), str):
            url = response["QueueUrl"]
            physical = url.rstrip("/").rsplit("/", 1)[-1]
            logical = self.ctx.logical(physical)
            if logical.startswith("?"):
                logical = logical[1:]
                self.ctx.names[physical] = logical
            if not logical.startswith("("):
                self.urls[logical] = url

    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="background")
        return self._pool

    # Pseudo-steps ----------------------------------------------------------------------------

    def advance_clock(self, seconds: float) -> nm.Outcome:
        answer = self.endpoint.advance_clock(seconds)
        if "ok" in answer:
            return nm.Outcome({"ok": {}})
        return nm.Outcome({"error": answer["error"]}, answer.get("detail"))

    def poll(self, step: Step) -> nm.Outcome:
        request = step.options["request"]
        inner = Step(step.index, request["op"], request["params"], {**request["options"], "label": step.label})
        deadline = time.monotonic() + float(step.options.get("timeout", 15))
        interval = float(step.options.get("interval", 0.5))
        while True:
            outcome = self.step(inner) or nm.Outcome({"missing": "no outcome"})
            if ex.matches(outcome.value, step.options["until"]):
                return outcome
            if "error" in outcome.value or "client_error" in outcome.value:
                note = "stopped polling: the request failed"
                return nm.Outcome(outcome.value, f"{outcome.message}; {note}" if outcome.message else note)
            if time.monotonic() >= deadline:
                note = f"gave up polling after {step.options.get('timeout', 15)}s"
                return nm.Outcome(outcome.value, f"{outcome.message}; {note}" if outcome.message else note)
            time.sleep(interval)

    def drain(self, step: Step) -> nm.Outcome:
        url = self.url_of(step.options["queue"])
        delete = step.options.get("delete", True)
        collected: list[dict] = []
        for _ in range(int(step.options.get("max_rounds", 20))):
            raw = self.call("ReceiveMessage", {
                "QueueUrl": url,
                "MaxNumberOfMessages": 10,
                "VisibilityTimeout": int(step.options.get("visibility", 30)),
                "WaitTimeSeconds": 0,
                "MessageSystemAttributeNames": ["MessageGroupId"],
            })
            if raw.response is None:
                return self.failed(raw)
            messages = raw.response.get("Messages", [])
            if not messages:
                break
            collected.extend(messages)
            if delete:
                entries = [{"Id": f"m{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
                deleted = self.call("DeleteMessageBatch", {"QueueUrl": url, "Entries": entries})
                if deleted.response is None:
                    return self.failed(deleted)
                if deleted.response.get("Failed"):
                    return nm.Outcome({"drain_delete_failed": len(deleted.response["Failed"])})
        ordered = nm.order_messages(collected, url, self.ctx, "auto")
        return nm.Outcome({"ok": {"bodies": [m.get("Body") for m in ordered]}})

    # References ------------------------------------------------------------------------------

    def physical(self, logical: str, length: int | None = None) -> str:
        name = self.prefix + logical
        if logical in self.fifo and not logical.endswith(".fifo"):
            name += ".fifo"
        if length:
            suffix = ".fifo" if name.endswith(".fifo") else ""
            stem = name[: len(name) - len(suffix)]
            name = stem + "x" * max(0, int(length) - len(stem) - len(suffix)) + suffix
        self.ctx.names[name] = logical
        return name

    def url_of(self, logical: str) -> str:
        if logical in self.urls:
            return self.urls[logical]
        physical = self.physical(logical)
        template = next(iter(self.urls.values()), None)
        if template:
            return template.rstrip("/").rsplit("/", 1)[0] + "/" + physical
        return f"{self.endpoint.url}/000000000000/{physical}"

    def arn_of(self, logical: str) -> str:
        if logical in self.arns:
            return self.arns[logical]
        if logical in self.urls:
            arn = self._read_arn(self.urls[logical])
            if arn:
                self.arns[logical] = arn
                return arn
        physical = self.physical(logical)
        template = next(iter(self.arns.values()), None)
        if template is None:
            for known, url in self.urls.items():
                template = self._read_arn(url)
                if template:
                    self.arns[known] = template
                    break
        if template:
            return template.rsplit(":", 1)[0] + ":" + physical
        return f"arn:aws:sqs:us-east-1:000000000000:{physical}"

    def _read_arn(self, url: str) -> str | None:
        try:
            answer = self.endpoint.raw("GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["QueueArn"]})
        except Exception:  # noqa: BLE001 - a deleted queue has no ARN to read
            return None
        return answer.get("Attributes", {}).get("QueueArn")

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "$url" in value:
            return self.url_of(value["$url"])
        if "$name" in value:
            return self.physical(value["$name"], value.get("length"))
        if "$arn" in value:
            return self.arn_of(value["$arn"])
        if "$rh" in value:
            return self._receipt_handle(value)
        if "$ref" in value:
            return self._ref(value["$ref"], str(value.get("path", "")))
        if "$json" in value:
            return json.dumps(self.resolve(value["$json"]))
        if "$sha256" in value:
            return hashlib.sha256(str(value["$sha256"]).encode()).hexdigest()
        return {k: self.resolve(v) for k, v in value.items()}

    def _receipt_handle(self, ref: dict) -> str:
        response = self.responses.get(ref["$rh"])
        if response is None:
            raise ResolveError(f"no answer from step {ref['$rh']} to take a receipt handle from")
        messages = response.get("Messages") or []
        if "body" in ref:
            found = [m for m in messages if m.get("Body") == ref["body"]]
            if not found:
                raise ResolveError(f"step {ref['$rh']} received no message with body {ref['body']!r}")
            return found[0].get("ReceiptHandle")
        index = int(ref.get("index", 0))
        if index >= len(messages):
            raise ResolveError(f"step {ref['$rh']} received {len(messages)} messages, not {index + 1}")
        return messages[index].get("ReceiptHandle")

    def _ref(self, label: str, path: str) -> Any:
        value: Any = self.responses.get(label)
        if value is None:
            raise ResolveError(f"no answer from step {label}")
        for part in [p for p in path.split(".") if p]:
            if isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            elif isinstance(value, dict) and part in value:
                value = value[part]
            else:
                raise ResolveError(f"step {label}'s answer has no {path}")
        return value

    # Cleanup ---------------------------------------------------------------------------------

    def cleanup(self) -> None:
        urls = set(self.urls.values())
        try:
            listed = self.endpoint.raw("ListQueues", {"QueueNamePrefix": self.prefix})
            urls.update(listed.get("QueueUrls", []))
        except Exception:  # noqa: BLE001 - nothing more to find
            pass
        for url in urls:
            try:
                self.endpoint.raw("DeleteQueue", {"QueueUrl": url})
            except Exception:  # noqa: BLE001 - already deleted, or the server is gone
                pass
