"""A `postbox serve` per test module, on a free port, with a pull subscription."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))

ROOT = pathlib.Path(__file__).resolve().parents[3]
CATALOG = """
[[event_types]]
name = "PAYMENT_COMPLETED"
producers = ["shop"]

[[producers]]
name = "shop"
emits = ["PAYMENT_COMPLETED"]

[[subscriptions]]
name = "billing"
glob = "PAYMENT_*"
lane = "DURABLE"
handler = "pull"
retry = { max_attempts = 3, backoff_ms = 100 }
"""


class Server:
    def __init__(self) -> None:
        binary = os.environ.get("POSTBOX_BIN", str(ROOT / "target" / "debug" / "postbox"))
        self.dir = tempfile.TemporaryDirectory()
        catalog = pathlib.Path(self.dir.name) / "catalog.toml"
        catalog.write_text(CATALOG)
        data = pathlib.Path(self.dir.name) / "data"
        self.proc = subprocess.Popen(
            [binary, "serve", "--catalog", str(catalog), "--listen", "127.0.0.1:0", "--data", str(data)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "POSTBOX_LOG": "warn"},
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line.startswith("postbox listening on "):
            self.proc.kill()
            raise RuntimeError(f"postbox serve did not start: {line!r}")
        self.base = line.split()[3]
        self.admin = (data / "admin-token").read_text().strip()

    def tenant_token(self, tenant: str) -> str:
        req = urllib.request.Request(
            f"{self.base}/v1/tokens",
            data=json.dumps({"tenant": tenant}).encode(),
            headers={"Authorization": f"Bearer {self.admin}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req) as res:
            return json.load(res)["token"]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.dir.cleanup()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()
