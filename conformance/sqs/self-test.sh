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
# afterwards.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

reference=""
if [ "${1:-}" = "--reference" ]; then
    reference="${2:?--reference needs a URL}"
fi

python="$("$root/scripts/python-env.sh")"
work="$(mktemp -d)"
port=""
cleanup() {
    if [ -n "$port" ]; then
        "$root/scripts/ministack.sh" stop "$port" "$work" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$reference" ]; then
    port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    "$root/scripts/ministack.sh" start "$port" "$work"
    reference="http://127.0.0.1:$port"
fi

fail() {
    echo "self-test: $*" >&2
    exit 1
}

echo "self-test 1/2: the whole corpus, reference against reference"
if ! "$python" "$here/run.py" --reference "$reference" --reference-only >"$work/same.txt"; then
    grep -v '^DOCUMENTED\|^  ' "$work/same.txt" || true
    fail "reference against itself must pass"
fi
tail -n 2 "$work/same.txt"
grep -q '^cases: [0-9]*, mismatches: 0$' "$work/same.txt" || fail "reference against itself must give 0 mismatches"

echo "self-test 2/2: corrupted target outcomes must be reported"
perturbed='fifo/*group*'
expected="$("$python" "$here/run.py" --list --filter "$perturbed" | wc -l)"
set +e
"$python" "$here/run.py" --reference "$reference" --reference-only \
    --filter fifo/ --perturb "$perturbed" >"$work/perturbed.txt"
status=$?
set -e
tail -n 2 "$work/perturbed.txt"
[ "$status" -eq 1 ] || fail "a corrupted run must exit 1, it exited $status"
reported="$(grep '^MISMATCH ' "$work/perturbed.txt" | sed 's/^MISMATCH \([^ ]*\) .*/\1/' | sort -u)"
[ "$(echo "$reported" | grep -c .)" -eq "$expected" ] ||
    fail "expected $expected corrupted cases to be reported, got: $reported"
if echo "$reported" | grep -qv '^fifo/.*group'; then
    fail "a case that was not corrupted was reported: $reported"
fi
echo "self-test: passed ($expected corrupted cases reported, none other)"
