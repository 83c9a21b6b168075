#!/usr/bin/env bash
# Checks the conformance harness itself, with DynamoDB Local on both sides:
#   1. the whole corpus, reference against reference, must give 0 mismatches and exit 0;
#   2. the same run with the target's outcomes deliberately corrupted in a few cases must
#      report exactly those cases as mismatches and exit 1.
# A harness that cannot fail proves nothing; this is how we know ours can.
#
#   conformance/dynamodb/self-test.sh [--reference URL]
#
# Without --reference it starts DynamoDB Local on a free port (scripts/dynamodb-local.sh)
# and stops it afterwards. The steps are shared with the SQS suite (../common/self-test.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

server=dynamodb-local.sh
summary_lines=3
perturbed='conditions/contains-*'
perturbed_filter=conditions/
perturbed_match='^conditions/contains-'

against_itself() {
    "$python" "$here/run.py" --reference "$reference" --target "$reference" "$@"
}

show_failure() {
    cat "$1"
}

# shellcheck source=../common/self-test.sh
. "$here/../common/self-test.sh"
self_test "$@"
