# shellcheck shell=bash
# What scripts/dynamodb-local.sh and scripts/ministack.sh share: a local server started in the
# background on 127.0.0.1:<port>, with its pid file and log in a state dir, waited for until it
# answers, and stopped by its pid file.
#
# The sourcing script sets, before it calls anything here:
#   service         the name in messages and in the files' names (<service>.<port>.pid, .log)
#   service_label   the server's name in sentences ("DynamoDB Local")
#   service_cmdline what the pid's command line must contain for the pid to count as ours
#                   (a pid file can outlive its process, and the pid can be reused)
#   usage_lines     the last line of the script's header comment, which usage prints
# and defines:
#   answers <port>       0 when the server answers a request on 127.0.0.1:<port>
#   state_dir_for [dir]  prints the state dir (through service_state_dir)
#   start <port> [dir]   (the server's own launch, through the service_* helpers below)

die() {
    echo "$service: $*" >&2
    exit 1
}

usage() {
    sed -n "2,${usage_lines}p" "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# Creates the state dir and prints its absolute path.
service_state_dir() {
    local dir="$1"
    mkdir -p "$dir"
    (cd "$dir" && pwd)
}

# Prints the body of an empty JSON 1.0 request for <target> (X-Amz-Target) to 127.0.0.1:<port>,
# signed with a dummy credential scoped to <signing-name>; fails when nothing answers in 2 s.
service_ask() {
    local port="$1" target="$2" signing_name="$3"
    curl -s --max-time 2 -X POST "http://127.0.0.1:$port/" \
        -H 'Content-Type: application/x-amz-json-1.0' \
        -H "X-Amz-Target: $target" \
        -H "Authorization: AWS4-HMAC-SHA256 Credential=local/20240101/us-east-1/$signing_name/aws4_request, SignedHeaders=host, Signature=0" \
        -d '{}' 2>/dev/null
}

# Answers 0 when the pid in the file is alive and is our server (not a reused pid), printing it.
running_pid() {
    local pidfile="$1" pid
    [ -f "$pidfile" ] || return 1
    pid="$(cat "$pidfile")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$service_cmdline" || return 1
    echo "$pid"
}

# The first half of start: 0 when a server should be launched on <port>; 1, having said so,
# when the one in <pidfile> already runs there. Dies when the port answers <protocol> requests
# but no server of ours does.
service_needs_start() {
    local port="$1" pidfile="$2" protocol="$3" pid
    if pid="$(running_pid "$pidfile")"; then
        answers "$port" || die "pid $pid from $pidfile is running but does not answer on port $port"
        echo "$service: already running on 127.0.0.1:$port (pid $pid)"
        return 1
    fi
    if answers "$port"; then
        die "port $port already answers $protocol requests, but not from a process we started; stop it or pick another port"
    fi
    return 0
}

# Starts <command...> in the background in <cwd>, stdin closed, output to <log>, and writes
# its pid to <pidfile>.
service_launch() {
    local log="$1" pidfile="$2" cwd="$3"
    shift 3
    (
        cd "$cwd"
        exec "$@"
    ) </dev/null >"$log" 2>&1 &
    echo "$!" >"$pidfile"
}

# Waits until the server launched with <pidfile> answers on <port>, for at most <timeout>
# seconds. When it exits first or does not answer in time, removes the pid file, prints the
# end of the log and dies, saying that it did not answer <request>.
service_wait() {
    local port="$1" pidfile="$2" log="$3" timeout="$4" request="$5" pid
    pid="$(cat "$pidfile")"
    local deadline=$((SECONDS + timeout))
    until answers "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$pidfile"
            tail -n 20 "$log" >&2
            die "$service_label exited before answering on port $port (log: $log)"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            kill "$pid" 2>/dev/null || true
            rm -f "$pidfile"
            tail -n 20 "$log" >&2
            die "$service_label did not answer $request on 127.0.0.1:$port within ${timeout}s (log: $log)"
        fi
        sleep 0.2
    done
    echo "$service: listening on http://127.0.0.1:$port (pid $pid, log $log)"
}

# Stops the server in the pid file (TERM, then KILL after 5 s) if it is ours; removes the file.
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
        echo "$service: stopped pid $pid"
    fi
    rm -f "$pidfile"
}

stop() {
    local port="${1:-}" dir
    dir="$(state_dir_for "${2:-}")"
    if [ -n "$port" ]; then
        stop_one "$dir/$service.$port.pid"
        return
    fi
    local pidfile
    for pidfile in "$dir/$service".*.pid; do
        [ -e "$pidfile" ] && stop_one "$pidfile"
    done
    return 0
}

status() {
    local port="${1:-}" dir pidfile pid any=1
    dir="$(state_dir_for "${2:-}")"
    for pidfile in "$dir/$service".${port:-*}.pid; do
        [ -e "$pidfile" ] || continue
        local p="${pidfile##*/"$service".}"
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

# The command line: start, stop or status.
service_main() {
    case "${1:-}" in
        start) shift; start "$@" ;;
        stop) shift; stop "$@" ;;
        status) shift; status "$@" ;;
        *) usage ;;
    esac
}
