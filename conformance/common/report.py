"""The parts of ``run.py`` both suites share: choosing cases, running them, printing outcomes."""

from __future__ import annotations

import fnmatch
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from .corpus import CorpusError

C = TypeVar("C")
R = TypeVar("R")


def load_selected(load_corpus: Callable[[Path], list[C]], directory: Path, filters: list[str] | None) -> list[C] | None:
    """The cases of the corpus that ``--filter`` selects; None, having said why, when it cannot load."""
    try:
        cases = load_corpus(directory)
    except CorpusError as err:
        print(f"error: {err}", file=sys.stderr)
        return None
    return select(cases, filters)


def selects(pattern: str, name: str) -> bool:
    """A ``--filter``/``--perturb`` pattern: a glob if it has ``*?[``, else a substring."""
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


def perturber(pattern: str | None) -> Callable[[str], bool] | None:
    """perturb(case name) -> bool for the runner, from ``--perturb`` or $CONFORMANCE_PERTURB."""
    return (lambda name: selects(pattern, name)) if pattern else None


def unreachable(endpoints: Iterable[Any], request: str) -> bool:
    """Checks that every endpoint answers; says which does not (answering ``request``)."""
    for endpoint in endpoints:
        problem = endpoint.check_reachable()
        if problem:
            print(f"error: the {endpoint.name} at {endpoint.url} does not answer {request}: {problem}", file=sys.stderr)
            return True
    return False


def run_all(run_case: Callable[[int, C], R], cases: list[C], jobs: int, thread_name_prefix: str = "") -> list[R]:
    """run_case(index, case) for every case, ``jobs`` at a time, results in case order."""
    numbered = list(enumerate(cases))
    if jobs <= 1:
        return [run_case(i, c) for i, c in numbered]
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix=thread_name_prefix) as pool:
        return list(pool.map(lambda ic: run_case(*ic), numbered))


def clip(text: str, limit: int = 4000) -> str:
    """Outcomes can hold strings and bodies of hundreds of KB; a report line shows their start."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def print_outcome(label: str, outcome: Any) -> None:
    """Two indented lines: the label and the outcome's value, then its message if any."""
    print(f"  {label:<10} {clip(json.dumps(outcome.value, sort_keys=True))}")
    if outcome.message:
        print(f"  {'':<10} message: {clip(outcome.message)}")


def show_step(title: str, ref: Any, tgt: Any) -> None:
    """``--show``: one step's reference outcome, and the target's where it differs."""
    same = ref.canonical() == tgt.canonical()
    print(f"  {title}: {'same' if same else 'DIFFERENT'}")
    print(f"    reference: {clip(json.dumps(ref.value, sort_keys=True))}")
    if ref.message:
        print(f"               message: {clip(ref.message)}")
    if not same:
        print(f"    target:    {clip(json.dumps(tgt.value, sort_keys=True))}")
        if tgt.message:
            print(f"               message: {clip(tgt.message)}")


def select(cases: list[C], filters: list[str] | None) -> list[C]:
    """The cases ``--filter`` selects: all of them without one, else those any pattern selects."""
    if not filters:
        return cases
    return [c for c in cases if any(selects(f, c.name) for f in filters)]
