"""Makes boto3 importable for ``run.py``: the venv that ``scripts/python-env.sh`` creates.

Imports nothing outside the standard library, so that it runs under any ``python3``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def ensure_boto3() -> None:
    """Re-executes under the shared venv (scripts/python-env.sh) when boto3 is not importable."""
    try:
        import boto3  # noqa: F401
    except ImportError:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        venv_python = Path(os.environ.get("POSTBOX_VENV") or cache / "postbox" / "venv") / "bin" / "python"
        if venv_python.exists() and Path(sys.executable) != venv_python:
            os.execv(str(venv_python), [str(venv_python), *sys.argv])
        sys.exit("run.py needs boto3: run scripts/python-env.sh once (it creates the venv this script uses)")
