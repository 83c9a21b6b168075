"""The boto3 side both suites share: one client setup, raw calls, and blobs both ways.

The clients are ordinary boto3 low-level clients in us-east-1, with dummy credentials except
for a target given an access key file (``postbox serve`` checks SigV4 signatures against the
keys it issued; ``--target-key-file`` names its ``admin-access-key``). Two settings differ from
the defaults, for the same reason: the server, not the SDK, must be what is tested.
Client-side parameter validation is off, so a request that breaks a documented limit reaches
the server; retries are off, so an error is seen as the server first gave it.

A signed client also signs a random ``x-postbox-nonce`` header on every request: postbox
refuses a signature it has already seen (a replay), and cases send identical requests within
one second.

Case files write binaries as base64 strings, the way the JSON protocols carry them. boto3
wants raw bytes for blobs and hands bytes back; ``to_boto`` and ``from_boto`` convert both
ways, guided by the operation's botocore input shape.
"""

from __future__ import annotations

import base64
import binascii
import os
import uuid
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


def session(credentials: tuple[str, str] | None = None) -> boto3.session.Session:
    """A session in us-east-1 with these credentials, or dummy ones."""
    key, secret = credentials or ("conformance", "conformance")
    return boto3.session.Session(
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )


KEY_FILE_ENV = "CONFORMANCE_TARGET_KEY_FILE"


def read_key_file(path: str) -> tuple[str, str]:
    """The access key in a file of ``AWS_ACCESS_KEY_ID=...`` and ``AWS_SECRET_ACCESS_KEY=...`` lines."""
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            name, sep, value = line.strip().removeprefix("export ").partition("=")
            if sep:
                values[name] = value.strip()
    try:
        return values["AWS_ACCESS_KEY_ID"], values["AWS_SECRET_ACCESS_KEY"]
    except KeyError as missing:
        raise SystemExit(f"{path}: no {missing.args[0]}=... line") from None


def target_credentials(path: str | None) -> tuple[str, str] | None:
    """The target's access key: from ``path``, else the file named by $CONFORMANCE_TARGET_KEY_FILE, else none."""
    path = path or os.environ.get(KEY_FILE_ENV)
    return read_key_file(path) if path else None


def vary_signatures(client: Any) -> None:
    """Signs a fresh random header on each of the client's requests, so no two signatures repeat."""

    def add_nonce(request: Any, **_: Any) -> None:
        request.headers["x-postbox-nonce"] = uuid.uuid4().hex

    client.meta.events.register("before-sign", add_nonce)


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
