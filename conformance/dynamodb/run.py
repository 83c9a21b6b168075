#!/usr/bin/env python3
"""Differential conformance run: the same DynamoDB requests against a reference and a target.

    run.py --reference http://127.0.0.1:8000 --target http://127.0.0.1:8001 [--filter NAME]

Prints every mismatch (case, step, both outcomes, both error messages), then
``known differences: K`` and, last, ``cases: N, mismatches: M``. Exits 0 iff every mismatch
belongs to a case listed in known-differences.md. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # this suite's harness, and conformance/common

from common.bootstrap import ensure_boto3  # noqa: E402

ensure_boto3()

from common import wire as common_wire  # noqa: E402
from common.known import covering, load_known  # noqa: E402
from harness.wordings import covering as covering_wording, load_wordings  # noqa: E402
from common.report import load_selected, perturber, print_outcome, show_step, unreachable  # noqa: E402
from harness.corpus import load_corpus  # noqa: E402
from harness.endpoint import Endpoint  # noqa: E402
from harness.outcome import first_difference  # noqa: E402
from harness.runner import Runner  # noqa: E402


def main() -> int:
    args = parse_args()
    cases = load_selected(load_corpus, Path(args.cases), args.filter)
    if cases is None:
        return 2
    if args.list:
        for case in cases:
            print(case.name)
        return 0
    if not cases:
        print("error: no case matches the filter", file=sys.stderr)
        return 2

    known = load_known(Path(args.known))
    wordings = load_wordings(Path(args.wordings))
    runner = Runner(
        Endpoint("reference", args.reference, retry_table_faults=True),
        # Against itself (self-test.sh) the target is DynamoDB Local too, with the same faults.
        Endpoint(
            "target",
            args.target,
            common_wire.target_credentials(args.target_key_file),
            retry_table_faults=args.target == args.reference,
        ),
        perturb=perturber(args.perturb or os.environ.get("CONFORMANCE_PERTURB")),
    )
    if unreachable((runner.reference, runner.target), "ListTables"):
        return 2
    started = time.monotonic()
    results = runner.run_all(cases, args.jobs)
    elapsed = time.monotonic() - started

    mismatches = known_count = 0
    unknown_cases = set()
    unexpected = 0
    errors = worded = unlisted = 0
    for result in results:
        for title, ref, tgt in result.outcomes:
            code = ref.value.get("error") if isinstance(ref.value, dict) else None
            if code and tgt.value == ref.value and ref.message is not None:
                errors += 1
                if tgt.message != ref.message:
                    worded += 1
                    listed = covering_wording(wordings, ref.message, tgt.message or "")
                    if not listed:
                        unlisted += 1
                    if args.messages or not listed:
                        print(f"WORDING {result.case.name} / {title}: {code}{'' if listed else ' (not in known-wordings.md)'}")
                        print(f"  reference: {ref.message}")
                        print(f"  target:    {tgt.message}")
        if args.show:
            show(result)
        if args.verbose:
            print(f"{'MISMATCH' if result.mismatches else 'ok      '} {result.seconds:5.2f}s {result.case.name}")
        cover = covering(known, result.case.name)
        for mismatch in result.mismatches:
            mismatches += 1
            if cover:
                known_count += 1
            else:
                unknown_cases.add(result.case.name)
            report(mismatch, cover)
        for title, expect, outcome in result.unexpected:
            unexpected += 1
            print(f"EXPECTATION {result.case.name} / {title}: the case says {expect}, the reference gave")
            print(f"  {json.dumps(outcome.value, sort_keys=True)}")
            if outcome.message:
                print(f"  message: {outcome.message}")

    print(f"ran {len(cases)} cases in {elapsed:.1f}s (reference {args.reference}, target {args.target}, run {runner.run_id})")
    if unexpected:
        print(f"expectations not met by the reference: {unexpected}")
    print(f"known differences: {known_count}")
    print(
        f"errors worded differently: {worded} of {errors} matching errors, {unlisted} of them not in "
        "known-wordings.md (--messages lists all)"
    )
    if runner.reference.retried:
        counts = ", ".join(f"{n} x {what}" for what, n in sorted(Counter(runner.reference.retried).items()))
        print(f"reference calls retried (a fault DynamoDB Local gives every time is retried too, and stays): {counts}")
    if unknown_cases:
        # Last, so that a log cut to its tail still names what failed.
        print(f"cases with differences not in {Path(args.known).name}: {', '.join(sorted(unknown_cases))}")
    print(f"cases: {len(cases)}, mismatches: {mismatches}")
    if unknown_cases or unlisted:
        return 1
    if args.strict and unexpected:
        return 1
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", help="endpoint URL of the reference (DynamoDB Local)")
    parser.add_argument("--target", help="endpoint URL of the implementation under test")
    parser.add_argument(
        "--target-key-file",
        help="the target's access key, a file of AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines "
        "(postbox serve's <data>/admin-access-key; default: $CONFORMANCE_TARGET_KEY_FILE, else dummy credentials)",
    )
    parser.add_argument("--cases", default=str(HERE / "cases"), help="directory of case files (default: %(default)s)")
    parser.add_argument(
        "--filter",
        action="append",
        metavar="NAME",
        help="run only cases whose name contains NAME (or matches it as a glob); repeatable",
    )
    parser.add_argument("--known", default=str(HERE / "known-differences.md"), help="known differences file")
    parser.add_argument(
        "--wordings", default=str(HERE / "known-wordings.md"), help="known wordings file (default: %(default)s)"
    )
    parser.add_argument("--jobs", type=int, default=4, help="cases run concurrently (default: %(default)s)")
    parser.add_argument(
        "--perturb",
        metavar="GLOB",
        help="corrupt the target's first outcome in matching cases, to check that a difference is caught "
        "(also $CONFORMANCE_PERTURB)",
    )
    parser.add_argument("--show", action="store_true", help="print every outcome of both sides")
    parser.add_argument(
        "--messages",
        action="store_true",
        help="list the steps whose error matches but whose message differs from the reference's",
    )
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument("--strict", action="store_true", help="also fail when the reference contradicts an 'expect'")
    parser.add_argument("-v", "--verbose", action="store_true", help="print one line per case")
    args = parser.parse_args()
    if not args.list and not (args.reference and args.target):
        parser.error("--reference and --target are required")
    return args


def report(mismatch, cover) -> None:
    print(f"MISMATCH {mismatch.case} / {mismatch.step}")
    print_outcome("reference:", mismatch.reference)
    print_outcome("target:", mismatch.target)
    where = first_difference(mismatch.reference.value, mismatch.target.value)
    if where:
        path, ref, tgt = where
        print(f"  {'differs:':<10} at {path}: {json.dumps(ref)[:200]} vs {json.dumps(tgt)[:200]}")
    if cover:
        print(f"  known difference: {cover.what}")


def show(result) -> None:
    print(f"== {result.case.name}")
    for title, ref, tgt in result.outcomes:
        show_step(title, ref, tgt)


if __name__ == "__main__":
    sys.exit(main())
