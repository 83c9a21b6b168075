# shellcheck shell=bash
# What both suites' self-test.sh do, with the reference on both sides:
#   1. the whole corpus, reference against reference, must give 0 mismatches and exit 0;
#   2. the same run with the target's outcomes deliberately corrupted in a few cases must
#      report exactly those cases as mismatches and exit 1.
#
# The sourcing script sets:
#   here              its own directory, where run.py is
#   server            the script in scripts/ that starts and stops the reference
#   summary_lines     how many of a run's last lines to show
#   perturbed         the glob of the cases whose target outcomes are corrupted
#   perturbed_filter  the --filter of the corrupted run
#   perturbed_match   a grep pattern that every reported case must match
# and defines:
#   against_itself [options...]  runs "$python" "$here/run.py" with "$reference" on both sides
#   show_failure FILE            prints what a failed run of the whole corpus said
# then runs: self_test "$@"   (the options are [--reference URL]).

self_test() {
    root="$(cd "$here/../.." && pwd)"
    reference=""
    if [ "${1:-}" = "--reference" ]; then
        reference="${2:?--reference needs a URL}"
    fi

    python="$("$root/scripts/python-env.sh")"
    work="$(mktemp -d)"
    port=""
    trap self_test_cleanup EXIT

    if [ -z "$reference" ]; then
        port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
        "$root/scripts/$server" start "$port" "$work"
        reference="http://127.0.0.1:$port"
    fi

    echo "self-test 1/2: the whole corpus, reference against reference"
    if ! against_itself >"$work/same.txt"; then
        show_failure "$work/same.txt"
        self_test_fail "reference against itself must pass"
    fi
    tail -n "$summary_lines" "$work/same.txt"
    grep -q '^cases: [0-9]*, mismatches: 0$' "$work/same.txt" ||
        self_test_fail "reference against itself must give 0 mismatches"

    echo "self-test 2/2: corrupted target outcomes must be reported"
    local expected status reported
    expected="$("$python" "$here/run.py" --list --filter "$perturbed" | wc -l)"
    set +e
    against_itself --filter "$perturbed_filter" --perturb "$perturbed" >"$work/perturbed.txt"
    status=$?
    set -e
    tail -n "$summary_lines" "$work/perturbed.txt"
    [ "$status" -eq 1 ] || self_test_fail "a corrupted run must exit 1, it exited $status"
    reported="$(grep '^MISMATCH ' "$work/perturbed.txt" | sed 's/^MISMATCH \([^ ]*\) .*/\1/' | sort -u)"
    [ "$(echo "$reported" | grep -c .)" -eq "$expected" ] ||
        self_test_fail "expected $expected corrupted cases to be reported, got: $reported"
    if echo "$reported" | grep -qv "$perturbed_match"; then
        self_test_fail "a case that was not corrupted was reported: $reported"
    fi
    echo "self-test: passed ($expected corrupted cases reported, none other)"
}

self_test_cleanup() {
    if [ -n "$port" ]; then
        "$root/scripts/$server" stop "$port" "$work" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}

self_test_fail() {
    echo "self-test: $*" >&2
    exit 1
}
