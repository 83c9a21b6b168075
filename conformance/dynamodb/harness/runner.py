"""Runs cases on the reference and the target and compares what they answered."""

from __future__ import annotations

import json
import re
import time
import traceback
import uuid
from itertools import zip_longest
from dataclasses import dataclass, field

from common import report

from . import outcome as oc
from . import wire
from .corpus import STREAMS_OPS, Case, Step
from .endpoint import Endpoint


@dataclass
class Mismatch:
    case: str
    step: str
    reference: oc.Outcome
    target: oc.Outcome


@dataclass
class CaseResult:
    case: Case
    mismatches: list[Mismatch] = field(default_factory=list)
    # Steps whose reference outcome is not what the case file's "expect" says it exercises.
    unexpected: list[tuple[str, str, oc.Outcome]] = field(default_factory=list)
    outcomes: list[tuple[str, oc.Outcome, oc.Outcome]] = field(default_factory=list)
    seconds: float = 0.0


class Runner:
    def __init__(self, reference: Endpoint, target: Endpoint, perturb=None):
        self.reference = reference
        self.target = target
        self.run_id = uuid.uuid4().hex[:8]
        # perturb(case_name) -> bool: corrupt the target's outcomes of that case (self-test).
        self.perturb = perturb or (lambda name: False)

    def run_all(self, cases: list[Case], jobs: int) -> list[CaseResult]:
        return report.run_all(self.run_case, cases, jobs)

    def run_case(self, index: int, case: Case) -> CaseResult:
        """Runs one case on both sides; a fault of the harness itself becomes a mismatch."""
        try:
            return self._run_case(index, case)
        except Exception:  # noqa: BLE001 - one broken case must not hide the others
            result = CaseResult(case)
            fault = oc.Outcome({"harness_error": True}, traceback.format_exc())
            result.mismatches.append(Mismatch(case.name, "(harness)", fault, fault))
            return result

    def _run_case(self, index: int, case: Case) -> CaseResult:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", case.name)[:80]
        names = {}
        for side in ("r", "t", "q"):
            logical = [t.name for t in case.tables] + case.creates
            names[side] = {name: f"cf-{self.run_id}-{side}{index:04d}-{slug}-{name}" for name in logical}
        # With both sides on one server (reference against itself) the two must not collide.
        ref = _Side(self.reference, names["r"])
        tgt = _Side(self.target, names["t"])
        result = CaseResult(case)
        started = time.monotonic()
        try:
            ref_out, tgt_out = ref.run(case), tgt.run(case)
        finally:
            ref.cleanup(case)
            tgt.cleanup(case)
        if _internal_failure(ref_out):
            # DynamoDB Local sometimes fails a request with InternalFailure under concurrent
            # load; the reference runs such a case once more on fresh tables. A failure it
            # gives every time (a listed known difference) stays.
            again = _Side(self.reference, names["q"])
            try:
                ref_out = again.run(case)
            finally:
                again.cleanup(case)
        result.seconds = time.monotonic() - started
        # The self-test corrupts the target's outcome of the first step (not the setup).
        perturbed = self.perturb(case.name)
        missing = ("(missing)", None, oc.Outcome({"missing": "this side stopped earlier"}))
        for (title, step, r), (_, _, t) in zip_longest(ref_out, tgt_out, fillvalue=missing):
            if perturbed and (step is not None or title.startswith("final scan")):
                t = _perturbed(t)
                perturbed = False
            result.outcomes.append((title, r, t))
            if r.canonical() != t.canonical():
                result.mismatches.append(Mismatch(case.name, title, r, t))
            if step is not None and step.expect and not oc.matches_expectation(r, step.expect):
                result.unexpected.append((title, step.expect, r))
        return result


def _internal_failure(outcomes) -> bool:
    return any(o.value.get("error") == "InternalFailure" for _, _, o in outcomes if isinstance(o.value, dict))


class _Side:
    """One endpoint's run of one case, under that side's physical table names."""

    def __init__(self, endpoint: Endpoint, names: dict[str, str]):
        self.endpoint = endpoint
        self.names = names
        self.reverse = {v: k for k, v in names.items()}

    def run(self, case: Case) -> list[tuple[str, Step | None, oc.Outcome]]:
        out: list[tuple[str, Step | None, oc.Outcome]] = []
        for table in case.tables:
            created = self.endpoint.create_table(self.names[table.name], table.request)
            if "ok" not in created.value:
                out.append((f"create table {table.name}", None, self._logical(created)))
                return out  # nothing after this would mean anything
        if case.items:
            out.append(("setup items", None, self._logical(self._setup(case))))
        for step in case.steps:
            out.append((step.title(), step, self._logical(self._step(step))))
        for table in case.tables:
            scan = self.endpoint.scan_all(self.names[table.name])
            out.append((f"final scan of {table.name}", None, self._logical(scan)))
        return out

    def _setup(self, case: Case) -> oc.Outcome:
        """Puts the case's items; only the ones that failed are in the outcome."""
        failures = []
        for table, items in case.items.items():
            for item in items:
                put = self.endpoint.call("PutItem", {"TableName": table, "Item": item}, self.names)
                if "ok" not in put.value:
                    failures.append({"item": item, "outcome": put.value})
        return oc.Outcome({"setup_failures": failures})

    def _step(self, step: Step) -> oc.Outcome:
        if step.op == "Stream":
            return self.endpoint.read_stream(self.names.get(step.table, step.table))
        if step.op == "WaitForIndexes":
            return self.endpoint.wait_for_indexes(self.names.get(step.table, step.table))
        if step.op in STREAMS_OPS:
            outcome = self.endpoint.call_streams(step.op, step.params, self.names.get(step.table, step.table))
            return oc.Outcome(
                wire.logical_names(outcome.value, self.reverse),
                wire.logical_names(outcome.message, self.reverse) if outcome.message else None,
            )
        return self.endpoint.call(
            step.op, step.params, self.names, keep_last_key=step.keep_last_key, keep_order=step.keep_order
        )

    def _logical(self, outcome: oc.Outcome) -> oc.Outcome:
        return oc.Outcome(
            wire.logical_names(outcome.value, self.reverse),
            wire.logical_names(outcome.message, self.reverse) if outcome.message else None,
        )

    def cleanup(self, case: Case) -> None:
        for table in case.tables:
            self.endpoint.delete_table(self.names[table.name])
        for name in case.creates:
            self.endpoint.delete_table(self.names[name])


def _perturbed(outcome: oc.Outcome) -> oc.Outcome:
    """A deliberately wrong copy of an outcome, to prove that differences are reported.

    The first number or string in it gets a digit appended (the kind of slip a real bug
    makes); an outcome without one gets a different error code or an extra field.
    """
    value = json.loads(json.dumps(outcome.value))
    if not _corrupt_first_scalar(value):
        if "error" in value:
            value["error"] += "Perturbed"
        else:
            value["perturbed"] = True
    return oc.Outcome(value, outcome.message)


def _corrupt_first_scalar(value) -> bool:
    if isinstance(value, dict):
        for kind in ("N", "S"):
            if isinstance(value.get(kind), str) and len(value) == 1:
                value[kind] += "0"
                return True
        return any(_corrupt_first_scalar(v) for v in value.values())
    if isinstance(value, list):
        return any(_corrupt_first_scalar(v) for v in value)
    return False
