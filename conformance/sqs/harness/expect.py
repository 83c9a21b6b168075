"""Matches a normalised outcome against what a step's ``expect`` says the documentation requires.

``expect`` is one of:

- ``"ok"``: the request succeeded; ``"error"``: it failed, with any code;
- any other string: it failed with that code, compared with both the code botocore reports
  (``AWS.SimpleQueueService.NonExistentQueue``) and the JSON shape name (``QueueDoesNotExist``);
- an object, every key of which must hold:
  - ``"ok"``: a pattern the successful response must match (see ``subset``);
  - ``"error"``: as the string form;
  - ``"bodies"``: the bodies of the received messages, in the normalised order;
  - ``"count"``: how many messages were received;
  - ``"messages"``: one pattern per received message;
  - ``"failed"`` / ``"successful"``: the entry Ids of a batch answer, in any order;
  - ``"keys"``: exactly these queue attribute names were answered (GetQueueAttributes);
  - ``"any"``: a list of expectations, one of which must hold.

Patterns match by subset: an object matches when each of its keys matches (``"<absent>"``
requires the key to be missing, ``"<any>"`` only that it is present; so ``{}`` matches any
object), a list matches a list of the same length element by element, anything else must be
equal.
"""

from __future__ import annotations

from typing import Any

ABSENT = "<absent>"
ANY = "<any>"


def matches(value: Any, expect: Any) -> bool:
    if isinstance(expect, str):
        if expect == "ok":
            return isinstance(value, dict) and "ok" in value
        if expect == "error":
            return isinstance(value, dict) and "error" in value
        return isinstance(value, dict) and expect in (value.get("error"), value.get("type"))
    if not isinstance(expect, dict):
        raise ValueError(f"an expectation is a string or an object, not {expect!r}")
    return all(_holds(value, key, want) for key, want in expect.items())


def _holds(value: Any, key: str, want: Any) -> bool:
    if key == "any":
        return any(matches(value, alternative) for alternative in want)
    if key == "error":
        return matches(value, want if isinstance(want, str) else "error")
    ok = value.get("ok") if isinstance(value, dict) else None
    if ok is None:
        return False
    if key == "ok":
        return subset(ok, want)
    if key == "bodies":
        bodies = ok["bodies"] if "bodies" in ok else [m.get("Body") for m in ok.get("Messages", [])]
        return bodies == want
    if key == "count":
        count = ok["count"] if "count" in ok else len(ok.get("Messages", []))
        return count == want
    if key == "messages":
        return subset(ok.get("Messages", []), want)
    if key == "keys":
        return sorted(ok.get("Attributes", {})) == sorted(want)
    if key in ("failed", "successful"):
        entries = ok.get(key.capitalize(), [])
        return sorted(str(e.get("Id")) for e in entries) == sorted(want)
    raise ValueError(f"unknown expectation key {key!r}")


def subset(actual: Any, pattern: Any) -> bool:
    if pattern == ANY:
        return True
    if isinstance(pattern, dict):
        if not isinstance(actual, dict):
            return False
        for key, want in pattern.items():
            if want == ABSENT:
                if key in actual:
                    return False
            elif key not in actual or not subset(actual[key], want):
                return False
        return True
    if isinstance(pattern, list):
        return isinstance(actual, list) and len(actual) == len(pattern) and all(
            subset(a, p) for a, p in zip(actual, pattern)
        )
    return actual == pattern


def validate(expect: Any) -> None:
    """Raises ValueError for an expectation the matcher would not understand."""
    if isinstance(expect, str) or expect is None:
        return
    if not isinstance(expect, dict):
        raise ValueError(f"an expectation is a string or an object, not {expect!r}")
    for key, want in expect.items():
        if key == "any":
            for alternative in want:
                validate(alternative)
        elif key not in ("ok", "error", "bodies", "count", "messages", "failed", "successful", "keys"):
            raise ValueError(f"unknown expectation key {key!r}")
