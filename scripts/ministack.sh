#!/usr/bin/env bash
# Starts and stops MiniStack, the SQS-compatible server our queue conformance suite compares against.
#
#   scripts/ministack.sh start <port> [state-dir]   # SQS on 127.0.0.1:<port>, waits until it answers
#   scripts/ministack.sh stop [port] [state-dir]    # stops the one on <port>, or every one we started
#   scripts/ministack.sh status [port] [state-dir]
#
# MiniStack is the PyPI package `ministack`, installed on first use into the shared venv
# (scripts/python-env.sh). It runs in the foreground of a background process, in memory, with
# only SQS enabled, bound to 127.0.0.1. The pid file and log live in the state dir: the given
# one, else $MINISTACK_STATE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/postbox/ministack.
#
# Environment: MINISTACK_VERSION (pip requirement pin, default 1.5.33), MINISTACK_TIMEOUT
# (seconds to wait for the first answer, default 60), MINISTACK_SERVICES (default sqs).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/postbox"
version="${MINISTACK_VERSION:-1.5.33}"
timeout="${MINISTACK_TIMEOUT:-60}"
services="${MINISTACK_SERVICES:-sqs}"

service=ministack
service_label=MiniStack
service_cmdline=ministack # python -m ministack
usage_lines=14
# shellcheck source=lib/service.sh
. "$here/lib/service.sh"

state_dir_for() {
    service_state_dir "${1:-${MINISTACK_STATE_DIR:-$cache/ministack}}"
}

# Prints the venv's python with ministack installed in it. python-env.sh installs only what
# is missing, so this is quick once the cache is warm.
venv_python() {
    "$here/python-env.sh" "ministack==$version" || die "could not install ministack==$version into the shared venv"
}

# Answers 0 when something speaking SQS's JSON protocol answers ListQueues on the port.
answers() {
    local body
    body="$(service_ask "$1" AmazonSQS.ListQueues sqs)" || return 1
    # An empty server answers {} (no QueueUrls member); anything else that is JSON with
    # QueueUrls also counts. An error body has __type.
    [[ "$body" == "{}" || "$body" == *QueueUrls* ]]
}

start() {
    local port="${1:-}"
    [[ "$port" =~ ^[0-9]+$ ]] || usage
    local dir pidfile log python
    dir="$(state_dir_for "${2:-}")"
    pidfile="$dir/ministack.$port.pid"
    log="$dir/ministack.$port.log"

    service_needs_start "$port" "$pidfile" SQS || return 0
    command -v curl >/dev/null || die "curl is needed to check that MiniStack answers"
    python="$(venv_python)"

    # MiniStack's own settings come from the environment (ministack/app.py): GATEWAY_PORT is
    # the port, BIND_HOST the interface, SERVICES the enabled services, MINISTACK_HOST the
    # host in the queue URLs it hands out. It writes its own pid file to the temp dir
    # (ministack-<port>.pid), so TMPDIR points into the state dir to keep it there too.
    # PERSIST_STATE stays off: every start is empty.
    mkdir -p "$dir/tmp"
    service_launch "$log" "$pidfile" . env GATEWAY_PORT="$port" BIND_HOST=127.0.0.1 MINISTACK_HOST=127.0.0.1 \
        SERVICES="$services" PERSIST_STATE=0 LOG_LEVEL="${MINISTACK_LOG_LEVEL:-WARNING}" \
        TMPDIR="$dir/tmp" MINISTACK_REGION=us-east-1 \
        setsid "$python" -m ministack
    service_wait "$port" "$pidfile" "$log" "$timeout" "SQS ListQueues"
}

service_main "$@"
