"""Runs cases on the reference and the target and compares what they answered.

A case whose ``requires`` the target lacks is skipped. One whose ``requires`` only the target
has (a test clock, say) runs on the target alone and is judged by its expectations. Every other
case runs on both endpoints at once, one thread per side, each under its own queue names.
"""

from __future__ import annotations

import re
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import zip_longest

from common import report

from . import expect as ex
from . import normalise as nm
from .corpus import Case, Step
from .endpoint import Endpoint
from .side import Side


@dataclass
class Mismatch:
    case: str
    step: str
    reference: nm.Outcome
    target: nm.Outcome


@dataclass
class CaseResult:
    case: Case
    mode: str = "differential"  # or "target-only", "skipped"
    skipped_because: str = ""
    mismatches: list[Mismatch] = field(default_factory=list)
    # Steps whose outcome is not what the case's "expect" (the documentation) says.
    reference_unmet: list[tuple[str, object, nm.Outcome]] = field(default_factory=list)
    target_unmet: list[tuple[str, object, nm.Outcome]] = field(default_factory=list)
    outcomes: list[tuple[str, nm.Outcome | None, nm.Outcome]] = field(default_factory=list)


Outcomes = list[tuple[str, "Step | None", nm.Outcome]]


class Runner:
    def __init__(self, reference: Endpoint, target: Endpoint, perturb=None):
        self.reference = reference
        self.target = target
        self.run_id = uuid.uuid4().hex[:6]
        # perturb(case_name) -> bool: corrupt the target's first outcome of that case (self-test).
        self.perturb = perturb or (lambda name: False)

    def run_all(self, cases: list[Case], jobs: int) -> list[CaseResult]:
        return report.run_all(self.run_case, cases, jobs, thread_name_prefix="case")

    def prefix(self, side: str, index: int) -> str:
        return f"pb{self.run_id}{side}{index:03d}-"

    def run_case(self, index: int, case: Case) -> CaseResult:
        lacking = [c for c in case.requires if not self.target.has(c)]
        if lacking:
            return CaseResult(case, mode="skipped", skipped_because=f"the target has no {', '.join(lacking)}")
        differential = all(self.reference.has(c) for c in case.requires)
        target = Side(self.target, self.prefix("t", index), case)
        result = CaseResult(case, mode="differential" if differential else "target-only")
        if differential:
            reference = Side(self.reference, self.prefix("r", index), case)
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="side") as pool:
                ref_future = pool.submit(_run, reference)
                tgt_future = pool.submit(_run, target)
                ref_out, tgt_out = ref_future.result(), tgt_future.result()
            self._compare(result, ref_out, tgt_out)
        else:
            tgt_out = _run(target)
            for title, step, outcome in tgt_out:
                result.outcomes.append((title, None, outcome))
                self._check(result.target_unmet, title, step, outcome)
        return result

    def _compare(self, result: CaseResult, ref_out: Outcomes, tgt_out: Outcomes) -> None:
        perturbed = self.perturb(result.case.name)
        missing = ("(missing)", None, nm.Outcome({"missing": "this side stopped earlier"}))
        for (title, ref_step, r), (tgt_title, tgt_step, t) in zip_longest(ref_out, tgt_out, fillvalue=missing):
            if perturbed:
                t = _perturbed(t)
                perturbed = False
            title = title if title != "(missing)" else tgt_title
            result.outcomes.append((title, r, t))
            if r.canonical() != t.canonical():
                result.mismatches.append(Mismatch(result.case.name, title, r, t))
            self._check(result.reference_unmet, title, ref_step, r)
            self._check(result.target_unmet, title, tgt_step, t)

    @staticmethod
    def _check(unmet: list, title: str, step: Step | None, outcome: nm.Outcome) -> None:
        if step is not None and step.expect is not None and not ex.matches(outcome.value, step.expect):
            unmet.append((title, step.expect, outcome))


def _run(side: Side) -> Outcomes:
    try:
        return side.run()
    except Exception as err:  # noqa: BLE001 - a harness bug must not stop the other cases
        return [("harness error", None, nm.Outcome({"harness_error": type(err).__name__}, traceback.format_exc()))]
    finally:
        side.cleanup()


def _perturbed(outcome: nm.Outcome) -> nm.Outcome:
    """A deliberately wrong copy of an outcome, to prove that differences are reported."""
    value = dict(outcome.value)
    if "error" in value:
        value["error"] = value["error"] + "Perturbed"
    else:
        value["perturbed"] = True
    return nm.Outcome(value, outcome.message)


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)
