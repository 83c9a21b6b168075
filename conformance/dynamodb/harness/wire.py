"""Translation between case-file requests and what boto3 sends and returns.

Case files name tables logically (``t``) and write binaries as base64 strings, the way
DynamoDB JSON does on the wire. boto3 wants the physical table names of this run and raw
bytes for blobs, and hands bytes back; these functions convert both ways.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from botocore.model import Shape


def physical_names(params: Any, names: dict[str, str], salt: str = "") -> Any:
    """Replaces logical table names by physical ones wherever DynamoDB takes a table name.

    A ClientRequestToken is made unique to the run, case and side the same way (salted and
    hashed to the 36 characters DynamoDB allows), because a server remembers tokens for
    minutes and the reference may be the same server as the target.
    """
    if isinstance(params, list):
        return [physical_names(v, names, salt) for v in params]
    if not isinstance(params, dict):
        return params
    out = {}
    for key, value in params.items():
        if key == "TableName" and isinstance(value, str):
            out[key] = names.get(value, value)
        elif key == "RequestItems" and isinstance(value, dict):
            out[key] = {names.get(k, k): physical_names(v, names, salt) for k, v in value.items()}
        elif key == "ClientRequestToken" and isinstance(value, str):
            out[key] = hashlib.sha256(f"{salt}/{value}".encode()).hexdigest()[:36]
        else:
            out[key] = physical_names(value, names, salt)
    return out


def logical_names(value: Any, names: dict[str, str]) -> Any:
    """Replaces physical table names by logical ones in a response (keys, ARNs, messages)."""
    if isinstance(value, str):
        for physical, logical in names.items():
            if physical in value:
                value = value.replace(physical, logical)
        return value
    if isinstance(value, list):
        return [logical_names(v, names) for v in value]
    if isinstance(value, dict):
        return {logical_names(k, names): logical_names(v, names) for k, v in value.items()}
    return value


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
