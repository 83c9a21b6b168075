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

die() {
    echo "ministack: $*" >&2
    exit 1
}

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

state_dir_for() {
    local dir="${1:-${MINISTACK_STATE_DIR:-$cache/ministack}}"
    mkdir -p "$dir"
    (cd "$dir" && pwd)
}

# Prints the venv's python with ministack installed in it. python-env.sh installs only what
# is missing, so this is quick once the cache is warm.
venv_python() {
    "$here/python-env.sh" "ministack==$version" || die "could not install ministack==$version into the shared venv"
}

# Answers 0 when something speaking SQS's JSON protocol answers ListQueues on the port.
answers() {
    local port="$1"
    local body
    body="$(curl -s --max-time 2 -X POST "http://127.0.0.1:$port/" \
        -H 'Content-Type: application/x-amz-json-1.0' \
        -H 'X-Amz-Target: AmazonSQS.ListQueues' \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=local/20240101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0' \
        -d '{}' 2>/dev/null)" || return 1
    # An empty server answers {} (no QueueUrls member); anything else that is JSON with
    # QueueUrls also counts. An error body has __type.
    [[ "$body" == "{}" || "$body" == *QueueUrls* ]]
}

# Answers 0 when the pid in the file is alive and is a MiniStack process (not a reused pid).
running_pid() {
    local pidfile="$1" pid
    [ -f "$pidfile" ] || return 1
    pid="$(cat "$pidfile")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ministack || return 1
    echo "$pid"
}

start() {
    local port="${1:-}"
    [[ "$port" =~ ^[0-9]+$ ]] || usage
    local dir pidfile log pid python
    dir="$(state_dir_for "${2:-}")"
    pidfile="$dir/ministack.$port.pid"
    log="$dir/ministack.$port.log"

    if pid="$(running_pid "$pidfile")"; then
        answers "$port" || die "pid $pid from $pidfile is running but does not answer on port $port"
        echo "ministack: already running on 127.0.0.1:$port (pid $pid)"
        return
    fi
    if answers "$port"; then
        die "port $port already answers SQS requests, but not from a process we started; stop it or pick another port"
    fi
    command -v curl >/dev/null || die "curl is needed to check that MiniStack answers"
    python="$(venv_python)"

    # MiniStack's own settings come from the environment (ministack/app.py): GATEWAY_PORT is
    # the port, BIND_HOST the interface, SERVICES the enabled services, MINISTACK_HOST the
    # host in the queue URLs it hands out. It writes its own pid file to the temp dir
    # (ministack-<port>.pid), so TMPDIR points into the state dir to keep it there too.
    # PERSIST_STATE stays off: every start is empty.
    mkdir -p "$dir/tmp"
    (
        exec env GATEWAY_PORT="$port" BIND_HOST=127.0.0.1 MINISTACK_HOST=127.0.0.1 \
            SERVICES="$services" PERSIST_STATE=0 LOG_LEVEL="${MINISTACK_LOG_LEVEL:-WARNING}" \
            TMPDIR="$dir/tmp" MINISTACK_REGION=us-east-1 \
            setsid "$python" -m ministack
    ) </dev/null >"$log" 2>&1 &
    pid=$!
    echo "$pid" >"$pidfile"

    local deadline=$((SECONDS + timeout))
    until answers "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$pidfile"
            tail -n 20 "$log" >&2
            die "MiniStack exited before answering on port $port (log: $log)"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            kill "$pid" 2>/dev/null || true
            rm -f "$pidfile"
            tail -n 20 "$log" >&2
            die "MiniStack did not answer SQS ListQueues on 127.0.0.1:$port within ${timeout}s (log: $log)"
        fi
        sleep 0.2
    done
    echo "ministack: listening on http://127.0.0.1:$port (pid $pid, log $log)"
}

stop_one() {
    local pidfile="$1" pid
    if pid="$(running_pid "$pidfile")"; then
        kill "$pid"
        local i
        for i in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
        echo "ministack: stopped pid $pid"
    fi
    rm -f "$pidfile"
}

stop() {
    local port="${1:-}" dir
    dir="$(state_dir_for "${2:-}")"
    if [ -n "$port" ]; then
        stop_one "$dir/ministack.$port.pid"
        return
    fi
    local pidfile
    for pidfile in "$dir"/ministack.*.pid; do
        [ -e "$pidfile" ] && stop_one "$pidfile"
    done
    return 0
}

status() {
    local port="${1:-}" dir pidfile pid any=1
    dir="$(state_dir_for "${2:-}")"
    for pidfile in "$dir"/ministack.${port:-*}.pid; do
        [ -e "$pidfile" ] || continue
        local p="${pidfile##*/ministack.}"
        p="${p%.pid}"
        if pid="$(running_pid "$pidfile")"; then
            echo "port $p: running (pid $pid)"
            any=0
        else
            echo "port $p: not running (stale pid file)"
        fi
    done
    return "$any"
}

case "${1:-}" in
    start) shift; start "$@" ;;
    stop) shift; stop "$@" ;;
    status) shift; status "$@" ;;
    *) usage ;;
esac
