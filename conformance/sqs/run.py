#!/usr/bin/env python3
"""Differential SQS conformance run: the same requests against a reference and a target.

    run.py --reference http://127.0.0.1:4566 --target http://127.0.0.1:8000 [--filter NAME]
    run.py --reference http://127.0.0.1:4566 --reference-only    # the reference against itself

Prints every mismatch (case, step, both outcomes, both error messages), every step where the
reference or the target does not do what the AWS documentation says (the case's "expect"),
then a summary and, last, exactly ``cases: N, mismatches: M``. Exits 0 iff every mismatch
belongs to a case listed in known-differences.md and the target meets every expectation of
the listed cases and of the cases that ran on the target alone. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # this suite's harness, and conformance/common

from common.bootstrap import ensure_boto3  # noqa: E402

ensure_boto3()

from common import wire  # noqa: E402
from common.known import covering, load_known  # noqa: E402
from common.outcome import ABSENT, walk_difference  # noqa: E402
from common.report import clip, load_selected, perturber, print_outcome, show_step, unreachable  # noqa: E402
from harness.corpus import load_corpus  # noqa: E402
from harness.endpoint import Endpoint  # noqa: E402
from harness.runner import Runner  # noqa: E402


def main() -> int:
    args = parse_args()
    cases = load_selected(load_corpus, Path(args.cases), args.filter)
    if cases is None:
        return 2
    if args.list:
        for case in cases:
            requires = f"  (requires {', '.join(case.requires)})" if case.requires else ""
            print(f"{case.name}{requires}")
        return 0
    if not cases:
        print("error: no case matches the filter", file=sys.stderr)
        return 2

    known = load_known(Path(args.known))
    reference = Endpoint("reference", args.reference, set(args.reference_capability or ()))
    target = Endpoint(
        "target",
        args.target,
        set(args.target_capability or ()),
        wire.target_credentials(args.target_key_file) if not args.reference_only else None,
    )
    runner = Runner(reference, target, perturb=perturber(args.perturb or os.environ.get("CONFORMANCE_PERTURB")))
    if unreachable((reference, target), "SQS ListQueues"):
        return 2
    started = time.monotonic()
    results = runner.run_all(cases, args.jobs)
    elapsed = time.monotonic() - started

    ran = skipped = target_only = mismatches = known_count = 0
    failing: list[str] = []
    deviations: list[str] = []
    for result in results:
        name = result.case.name
        if result.mode == "skipped":
            skipped += 1
            if args.verbose:
                print(f"skipped  {name}: {result.skipped_because}")
            continue
        ran += 1
        target_only += result.mode == "target-only"
        cover = covering(known, name)
        if args.show:
            show(result)
        if args.verbose:
            state = "MISMATCH" if result.mismatches else "ok      "
            print(f"{state} {name}{' (target only)' if result.mode == 'target-only' else ''}")
        for mismatch in result.mismatches:
            mismatches += 1
            known_count += cover is not None
            report(mismatch, cover)
        for title, want, outcome in result.reference_unmet:
            deviations.append(name)
            print(f"DOCUMENTED {name} / {title}: the AWS documentation says {clip(json.dumps(want))}; the reference gave")
            print_outcome("", outcome)
        # Where the target is the reference, or agrees with it, the lines above already say it.
        loud = result.mode == "target-only" or bool(result.mismatches) or args.strict
        for title, want, outcome in result.target_unmet if loud else []:
            print(f"EXPECTATION {name} / {title}: the AWS documentation says {clip(json.dumps(want))}; the target gave")
            print_outcome("", outcome)
        if result.mismatches and cover is None:
            failing.append(f"{name}: differs from the reference and is not in known-differences.md")
        elif result.target_unmet and (result.mismatches or result.mode == "target-only"):
            failing.append(f"{name}: the target does not do what the documentation says")
        elif result.target_unmet and args.strict:
            failing.append(f"{name}: the target misses an expectation (--strict)")

    print()
    print(f"ran {ran} cases in {elapsed:.1f}s (reference {args.reference}, target {args.target}, run {runner.run_id})")
    if skipped:
        print(f"skipped: {skipped} (the target lacks a capability they require, e.g. the test clock)")
    if target_only:
        print(f"target only: {target_only} (the reference lacks a capability; judged by the documentation)")
    if deviations:
        print(f"reference deviates from the AWS documentation in {len(set(deviations))} cases "
              f"({len(deviations)} steps)")
    for line in failing:
        print(f"FAIL {line}")
    unused = [k.case for k in known if not any(k.covers(r.case.name) for r in results)]
    if unused and not args.filter:
        print(f"known-differences.md names cases that do not exist: {', '.join(unused)}")
    print(f"known differences: {known_count}")
    print(f"cases: {ran}, mismatches: {mismatches}")
    return 1 if failing else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", help="endpoint URL of the reference (an SQS-compatible server)")
    parser.add_argument("--target", help="endpoint URL of the implementation under test (postbox serve)")
    parser.add_argument(
        "--target-key-file",
        help="the target's access key, a file of AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines "
        "(postbox serve's <data>/admin-access-key; default: $CONFORMANCE_TARGET_KEY_FILE, else dummy credentials)",
    )
    parser.add_argument("--reference-only", action="store_true",
                        help="run the reference against itself (the harness's own sanity check)")
    parser.add_argument("--cases", default=str(HERE / "cases"), help="directory of case files (default: %(default)s)")
    parser.add_argument("--filter", action="append", metavar="NAME",
                        help="run only cases whose name contains NAME (or matches it as a glob); repeatable")
    parser.add_argument("--known", default=str(HERE / "known-differences.md"), help="known differences file")
    parser.add_argument("--jobs", type=int, default=10, help="cases run concurrently (default: %(default)s)")
    parser.add_argument("--reference-capability", action="append", metavar="NAME",
                        help="a capability the reference has (clock); repeatable")
    parser.add_argument("--target-capability", action="append", metavar="NAME",
                        help="a capability the target has (clock: POST /_postbox/test/clock); repeatable")
    parser.add_argument("--perturb", metavar="GLOB",
                        help="corrupt the target's first outcome in matching cases, to check that a difference "
                        "is caught (also $CONFORMANCE_PERTURB)")
    parser.add_argument("--show", action="store_true", help="print every outcome of both sides")
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument("--strict", action="store_true",
                        help="also fail when the target misses an expectation that the reference misses too")
    parser.add_argument("-v", "--verbose", action="store_true", help="print one line per case")
    args = parser.parse_args()
    if args.reference_only:
        if args.target:
            parser.error("--reference-only runs the reference against itself; leave out --target")
        args.target = args.reference
        args.target_capability = args.reference_capability
    if not args.list and not (args.reference and args.target):
        parser.error("--reference and --target (or --reference-only) are required")
    return args


def report(mismatch, cover) -> None:
    print(f"MISMATCH {mismatch.case} / {mismatch.step}")
    print_outcome("reference:", mismatch.reference)
    print_outcome("target:", mismatch.target)
    path = first_difference(mismatch.reference.value, mismatch.target.value)
    if path:
        print(f"  first difference at {path}")
    if cover:
        print(f"  known difference: {cover.what}")


def first_difference(a, b) -> str | None:
    """The path of the first place two outcomes differ (``ok.Messages[1].Body``)."""
    found = walk_difference(a, b)
    if found is None:
        return None
    path, kind, a_part, b_part = found
    if kind == "key":
        return path.lstrip(".") + (" (only in the target)" if a_part is ABSENT else " (only in the reference)")
    if kind == "length":
        return f"{path.lstrip('.')} (length {len(a_part)} against {len(b_part)})"
    return path.lstrip(".") or "(top)"


def show(result) -> None:
    print(f"== {result.case.name}{' (target only)' if result.mode == 'target-only' else ''}")
    for title, ref, tgt in result.outcomes:
        if ref is None:
            print(f"  {title}")
            print(f"    target:    {clip(json.dumps(tgt.value, sort_keys=True))}")
            continue
        show_step(title, ref, tgt)


if __name__ == "__main__":
    sys.exit(main())
