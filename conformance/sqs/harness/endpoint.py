"""One endpoint under test: a boto3 SQS client on one URL, and its optional test clock.

The client is an ordinary boto3 low-level client in us-east-1, with dummy credentials (or,
for a target that checks signatures, its access key), so
requests use SQS's JSON protocol (``X-Amz-Target: AmazonSQS.<Action>``, content type
``application/x-amz-json-1.0``): botocore's SQS model declares only that protocol, and
``Endpoint`` refuses to run if an older botocore would fall back to the query protocol.
It is set up as ``common.wire`` sets up both suites' clients: client-side parameter
validation and retries are off, so the server, not the SDK, is what is tested. The read
timeout is longer than the longest long poll (20 s).

Test clock: a case with ``"requires": ["clock"]`` advances the server's clock with the
``AdvanceClock`` pseudo-step. The harness sends ``POST <endpoint>/_postbox/test/clock`` with
``{"advance_seconds": N}`` and expects a 2xx answer; only endpoints given the ``clock``
capability on the command line are asked (see README.md).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from common import wire

CONFIG = wire.client_config(read_timeout=45, max_pool_connections=64)

CLOCK_PATH = "/_postbox/test/clock"


class Endpoint:
    def __init__(
        self,
        name: str,
        url: str,
        capabilities: set[str] | None = None,
        credentials: tuple[str, str] | None = None,
    ):
        self.name = name
        self.url = url.rstrip("/")
        self.capabilities = set(capabilities or ())
        session = wire.session(credentials)
        self.sqs = session.client("sqs", endpoint_url=self.url, config=CONFIG)
        if credentials:
            wire.vary_signatures(self.sqs)
        protocol = self.sqs.meta.service_model.protocol
        if protocol != "json":
            raise SystemExit(
                f"botocore {self.sqs.meta.service_model.api_version} speaks {protocol} to SQS; "
                "the suite needs the JSON protocol (botocore >= 1.31.x): upgrade boto3 in the venv"
            )

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    def raw(self, op: str, params: dict) -> dict:
        """Calls an operation with case-file params; raises ClientError or BotoCoreError."""
        return wire.call(self.sqs, op, params)

    def check_reachable(self) -> str | None:
        """None when the endpoint answers ListQueues over the JSON protocol, else what went wrong."""
        try:
            self.raw("ListQueues", {"QueueNamePrefix": "pb-reachability-check"})
        except Exception as err:  # noqa: BLE001 - any failure means we cannot run
            return f"{type(err).__name__}: {err}"
        return None

    def advance_clock(self, seconds: float) -> dict[str, Any]:
        """Moves the server's test clock forward; returns a small outcome."""
        if not self.has("clock"):
            return {"error": "NoTestClock"}
        body = json.dumps({"advance_seconds": seconds}).encode()
        request = urllib.request.Request(
            self.url + CLOCK_PATH, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return {"ok": {"status": answer.status}}
        except Exception as err:  # noqa: BLE001 - any failure is an outcome here
            return {"error": "ClockAdvanceFailed", "detail": str(err)}
