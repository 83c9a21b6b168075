#!/usr/bin/env bash
# Checks the SQS conformance harness itself, with MiniStack on both sides:
#   1. the whole corpus, reference against reference, must give 0 mismatches and exit 0;
#   2. the same run with the target's outcomes deliberately corrupted in a few cases must
#      report exactly those cases as mismatches and exit 1.
# A harness that cannot fail proves nothing; this is how we know ours can.
#
#   conformance/sqs/self-test.sh [--reference URL]
#
# Without --reference it starts MiniStack on a free port (scripts/ministack.sh) and stops it
# afterwards. The steps are shared with the DynamoDB suite (../common/self-test.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

server=ministack.sh
summary_lines=2
perturbed='fifo/*group*'
perturbed_filter=fifo/
perturbed_match='^fifo/.*group'

against_itself() {
    "$python" "$here/run.py" --reference "$reference" --reference-only "$@"
}

# The reference's own deviations from the documentation (DOCUMENTED and the lines under them)
# are left out: they do not fail the run.
show_failure() {
    grep -v '^DOCUMENTED\|^  ' "$1" || true
}

# shellcheck source=../common/self-test.sh
. "$here/../common/self-test.sh"
self_test "$@"
