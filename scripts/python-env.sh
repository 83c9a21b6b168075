#!/usr/bin/env bash
# Creates (once) the Python virtual environment our test scripts share, with boto3 in it.
#
#   scripts/python-env.sh [EXTRA_PIP_PACKAGE...]          # run: prints the venv's python path
#   source scripts/python-env.sh [EXTRA_PIP_PACKAGE...]   # source: also activates the venv
#
# The venv lives under ${XDG_CACHE_HOME:-$HOME/.cache}/postbox/venv (override with
# POSTBOX_VENV). Packages already importable are not reinstalled, so a second call costs
# well under a second. When sourced, POSTBOX_PYTHON is exported with the venv's interpreter.
# pip runs quietly; its output is shown only when it fails.

_postbox_python_env() {
    local venv="${POSTBOX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/postbox/venv}"
    local base_python="${PYTHON:-python3}"
    local log

    if [ ! -x "$venv/bin/python" ]; then
        mkdir -p "$(dirname "$venv")" || return 1
        if ! "$base_python" -m venv "$venv" >/dev/null 2>&1; then
            echo "python-env: could not create a venv at $venv with $base_python" >&2
            return 1
        fi
    fi

    # boto3 always, plus whatever the caller asked for; only the missing ones go to pip.
    local wanted=(boto3 "$@")
    local missing=()
    local pkg
    for pkg in "${wanted[@]}"; do
        # A requirement like "foo[extra]" is checked by its distribution name; "foo==1.2" also by
        # its version, so a venv holding another version gets the pinned one.
        local name="${pkg%%[=<>!~\[ ;]*}"
        local pinned=""
        case "$pkg" in *==*) pinned="${pkg#*==}" ;; esac
        if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; v = m.version(sys.argv[1]); sys.exit(0 if sys.argv[2] in ('', v) else 1)" \
            "$name" "$pinned" >/dev/null 2>&1; then
            missing+=("$pkg")
        fi
    done

    if [ "${#missing[@]}" -gt 0 ]; then
        log="$(mktemp)"
        if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            "${missing[@]}" >"$log" 2>&1; then
            echo "python-env: pip install ${missing[*]} failed:" >&2
            cat "$log" >&2
            rm -f "$log"
            return 1
        fi
        rm -f "$log"
    fi

    POSTBOX_PYTHON="$venv/bin/python"
    POSTBOX_VENV_DIR="$venv"
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # Sourced: activate the venv in the caller's shell.
    if _postbox_python_env "$@"; then
        export POSTBOX_PYTHON
        # shellcheck disable=SC1091
        . "$POSTBOX_VENV_DIR/bin/activate"
        unset -f _postbox_python_env
    else
        unset -f _postbox_python_env
        return 1
    fi
else
    set -euo pipefail
    _postbox_python_env "$@"
    echo "$POSTBOX_PYTHON"
fi
