"""The boto3 side both suites share: one client setup, raw calls, and blobs both ways.

The clients are ordinary boto3 low-level clients with dummy credentials in us-east-1. Two
settings differ from the defaults, for the same reason: the server, not the SDK, must be what
is tested. Client-side parameter validation is off, so a request that breaks a documented
limit reaches the server; retries are off, so an error is seen as the server first gave it.

Case files write binaries as base64 strings, the way the JSON protocols carry them. boto3
wants raw bytes for blobs and hands bytes back; ``to_boto`` and ``from_boto`` convert both
ways, guided by the operation's botocore input shape.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import boto3
from botocore.config import Config
from botocore.model import Shape


def client_config(*, read_timeout: int, max_pool_connections: int) -> Config:
    """Client settings: no parameter validation, a single attempt, the given read timeout."""
    return Config(
        parameter_validation=False,
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=5,
        read_timeout=read_timeout,
        max_pool_connections=max_pool_connections,
    )


def session() -> boto3.session.Session:
    """A session with dummy credentials in us-east-1."""
    return boto3.session.Session(
        aws_access_key_id="conformance",
        aws_secret_access_key="conformance",
        region_name="us-east-1",
    )


def call(client: Any, op: str, params: dict) -> dict:
    """Calls an operation with case-file params; raises ClientError or BotoCoreError."""
    shape = client.meta.service_model.operation_model(op).input_shape
    return from_boto(client._make_api_call(op, to_boto(shape, params)))


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
