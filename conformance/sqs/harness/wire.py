"""Translation between case-file values and what boto3 sends and returns.

Case files write binary message attribute values as base64 strings, the way SQS's JSON
protocol carries them. boto3 wants raw bytes for blobs and hands bytes back; these functions
convert both ways, guided by the operation's botocore input shape.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from botocore.model import Shape


def to_boto(shape: Shape | None, value: Any) -> Any:
    """Walks a request along its botocore shape and decodes base64 strings where a blob goes.

    Values that do not fit the shape are passed through untouched, so a case can still send a
    deliberately malformed request (parameter validation is off in our clients).
    """
    if shape is None:
        return value
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        return {k: to_boto(shape.members.get(k), v) for k, v in value.items()}
    if kind == "list" and isinstance(value, list):
        return [to_boto(shape.member, v) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: to_boto(shape.value, v) for k, v in value.items()}
    if kind == "blob" and isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error:
            return value.encode()
    return value


def from_boto(value: Any) -> Any:
    """Turns a parsed response into plain JSON values: bytes become base64 strings."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {k: from_boto(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_boto(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
