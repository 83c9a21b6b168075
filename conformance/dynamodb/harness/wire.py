"""Translation between case-file table names and the physical names of a run.

Case files name tables logically (``t``); boto3 sends the physical table names of this run,
and responses name them back. These functions convert both ways. Base64 blobs, the other
translation, are shared with the SQS suite (``common.wire``).
"""

from __future__ import annotations

import hashlib
from typing import Any


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
