"""The HTTP client: one method per operation of Postbox's API."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, fields
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

# Statuses worth retrying: the request changed nothing, or was idempotent.
RETRIED = {408, 429, 500, 502, 503, 504}


class PostboxError(Exception):
    """An error answer of the API: its status, code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Delivery:
    """One delivery of a pull subscription."""

    handle: str
    subscription: str
    event: Dict[str, Any]
    attempt: int
    idempotency_key: str
    lease_expires_at_ms: int
    #: W3C Trace Context of this delivery, when the event carries one:
    #: continue it in the consumer's own spans.
    traceparent: Optional[str] = None


class Client:
    """Calls one Postbox server with one token.

    Requests that changed nothing (429, 5xx, a connection that failed) are
    retried `retries` times with jittered exponential backoff, no sooner
    than the server's Retry-After. An emit is retried with the same
    Idempotency-Key, so a retry never emits twice.
    """

    def __init__(
        self,
        endpoint: str = "http://127.0.0.1:8000",
        token: Optional[str] = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.2,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    # -- transport ---------------------------------------------------------

    def _open(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ):
        data = None if body is None else json.dumps(body).encode()
        h = {"Accept": "application/json"}
        if data is not None:
            h["Content-Type"] = "application/json"
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        h.update(headers or {})
        req = urllib.request.Request(self.endpoint + path, data=data, headers=h, method=method)
        return urllib.request.urlopen(req, timeout=timeout or self.timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        *,
        timeout: Optional[float] = None,
        retry: bool = True,
    ) -> Tuple[int, Any]:
        """Sends a request; its status and JSON answer. Raises PostboxError."""
        attempt = 0
        while True:
            try:
                with self._open(method, path, body, headers, timeout) as res:
                    text = res.read()
                    return res.status, json.loads(text) if text else None
            except urllib.error.HTTPError as e:
                text = e.read()
                try:
                    err = json.loads(text)["error"]
                    failure = PostboxError(e.code, err.get("code", ""), err.get("message", ""))
                except (ValueError, KeyError, TypeError):
                    failure = PostboxError(e.code, "", text.decode(errors="replace"))
                if not retry or e.code not in RETRIED or attempt >= self.retries:
                    raise failure from None
                wait = _retry_after(e.headers.get("Retry-After"))
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                if not retry or attempt >= self.retries:
                    raise
                wait = None
            delay = self.backoff * (2**attempt) * (0.5 + random.random() / 2)
            time.sleep(max(delay, wait or 0.0))
            attempt += 1

    # -- events ------------------------------------------------------------

    def emit(
        self,
        type: str,
        payload: Mapping[str, Any],
        *,
        writes: Optional[Sequence[Mapping[str, Any]]] = None,
        idempotency_key: Optional[str] = None,
        correlation_id: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Emits an event with its extra writes in one transaction.

        Without an idempotency key one is drawn, so the retries of this call
        are safe; pass your own to make a retried *call* safe too.
        """
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        if correlation_id:
            headers["X-Correlation-Id"] = correlation_id
        body: Dict[str, Any] = {"type": type, "payload": dict(payload)}
        if writes:
            body["writes"] = list(writes)
        _, answer = self.request("POST", "/v1/events", body, headers)
        return answer

    def events(self, from_seq: int = 1, limit: int = 100) -> Dict[str, Any]:
        """A page of the token's tenant's log: {"events": [...], "next": seq}."""
        _, answer = self.request("GET", f"/v1/events?from={from_seq}&limit={limit}")
        return answer

    def follow(self, from_seq: int = 1, *, reconnect: bool = True) -> Iterator[Dict[str, Any]]:
        """The tenant's log from `from_seq`, then each event as it commits.

        A dropped connection is reopened with Last-Event-ID, so no event is
        skipped or repeated.
        """
        last: Optional[int] = None
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            path = f"/v1/events/stream?from={from_seq}"
            if last is not None:
                headers["Last-Event-ID"] = str(last)
            try:
                with self._open("GET", path, headers=headers, timeout=3600) as res:
                    failures = 0
                    for kind, ident, data in _sse(res):
                        if kind == "event":
                            last = int(ident)
                            yield json.loads(data)
                        elif kind == "error":
                            raise PostboxError(500, "stream_error", data)
            except urllib.error.HTTPError as e:
                if e.code not in RETRIED or not reconnect:
                    raise PostboxError(e.code, "", e.read().decode(errors="replace")) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if not reconnect:
                    raise
            if not reconnect or failures >= self.retries:
                return
            time.sleep(self.backoff * (2**failures))
            failures += 1

    # -- pull subscriptions ------------------------------------------------

    def receive(
        self,
        subscription: str,
        *,
        max: int = 1,
        wait_seconds: float = 20,
        lease_seconds: float = 30,
    ) -> List[Delivery]:
        """Up to `max` deliveries, each leased for `lease_seconds`."""
        _, answer = self.request(
            "POST",
            f"/v1/subscriptions/{subscription}/receive",
            {"max": max, "wait_seconds": wait_seconds, "lease_seconds": lease_seconds},
            timeout=wait_seconds + self.timeout,
        )
        # Fields a newer server adds are ignored, not an error.
        known = {f.name for f in fields(Delivery)}
        return [Delivery(**{k: v for k, v in d.items() if k in known}) for d in answer["deliveries"]]

    def complete(self, delivery: Delivery, result: Any = None) -> None:
        """Completes a delivery (409 PostboxError: its lease was lost),
        recording `result` (any JSON value, at most 4 KB) in its claim."""
        body: Dict[str, Any] = {"handle": delivery.handle}
        if result is not None:
            body["result"] = result
        self.request(
            "POST",
            f"/v1/subscriptions/{delivery.subscription}/complete",
            body,
            retry=False,
        )

    def fail(
        self,
        delivery: Delivery,
        error: str,
        *,
        terminal: bool = False,
        retry_after_seconds: Optional[float] = None,
    ) -> None:
        """Fails a delivery: retried after backoff, or dead-lettered when terminal."""
        body: Dict[str, Any] = {"handle": delivery.handle, "error": error or "failed"}
        if terminal:
            body["terminal"] = True
        elif retry_after_seconds is not None:
            body["retry_after_seconds"] = retry_after_seconds
        self.request(
            "POST", f"/v1/subscriptions/{delivery.subscription}/fail", body, retry=False
        )

    def extend(self, delivery: Delivery, lease_seconds: float) -> int:
        """Moves the lease's end to `lease_seconds` from now; the new end (epoch ms)."""
        _, answer = self.request(
            "POST",
            f"/v1/subscriptions/{delivery.subscription}/extend",
            {"handle": delivery.handle, "lease_seconds": lease_seconds},
            retry=False,
        )
        return answer["lease_expires_at_ms"]


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _sse(res) -> Iterator[Tuple[str, str, str]]:
    """(event, id, data) of each server-sent event of a response."""
    kind, ident, data = "message", "", []
    for raw in res:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if data:
                yield kind, ident, "\n".join(data)
            kind, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            kind = value
        elif field == "id":
            ident = value
        elif field == "data":
            data.append(value)
