"""Verifying Postbox's webhook deliveries (the Standard Webhooks scheme)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any, Mapping, Optional


class WebhookVerificationError(Exception):
    """The delivery is not signed with the secret, or is too old."""


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_seconds: int = 300,
    now: Optional[float] = None,
) -> Any:
    """The delivery's JSON body, if `webhook-signature` signs
    `<webhook-id>.<webhook-timestamp>.<body>` with `secret` (a `whsec_`
    secret, or several separated by spaces while one rolls out) and the
    timestamp is within `tolerance_seconds`; else WebhookVerificationError.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id = lower["webhook-id"]
        stamp = lower["webhook-timestamp"]
        signatures = lower["webhook-signature"]
    except KeyError as e:
        raise WebhookVerificationError(f"missing header {e.args[0]}") from None
    try:
        sent = int(stamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number") from None
    if abs((now if now is not None else time.time()) - sent) > tolerance_seconds:
        raise WebhookVerificationError("webhook-timestamp is outside the tolerance")
    signed = f"{msg_id}.{stamp}.".encode() + body
    offered = [s.split(",", 1)[1] for s in signatures.split() if s.startswith("v1,")]
    for one in secret.split():
        key = base64.b64decode(one[len("whsec_"):] if one.startswith("whsec_") else one)
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        if any(hmac.compare_digest(expected, s) for s in offered):
            return json.loads(body)
    raise WebhookVerificationError("no signature matches the secret")
