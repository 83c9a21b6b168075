#!/usr/bin/env python3
"""The payment fan-out's four handlers in Python, as pull consumers.

    postbox serve --catalog examples/pull/payments.toml
    POSTBOX_TOKEN=$(cat postbox-data/admin-token) python3 examples/python/payments.py

Each PAYMENT_COMPLETED is delivered to four subscriptions: the order is
mirrored, a shipment booked, the buyer notified (this handler fails every
first attempt, so retries show) and the product's tag marked. Each effect
goes to an external system, here the LEDGER file (JSON lines), keyed by the
delivery's idempotency key: a delivery can come again (its consumer died
before completing it), and the key makes the second run a no-op. What a
handler returns is recorded in the claim. Runs until SIGTERM or SIGINT.

Environment: POSTBOX_ENDPOINT (default http://127.0.0.1:8000), POSTBOX_TOKEN,
LEDGER (default ledger.jsonl), LEASE_SECONDS (default 10), PAUSE_AFTER_EFFECT
(seconds between an effect and its completion; the tests kill the process
there).
"""
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

try:
    from postbox_client import Client, PullConsumer
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
    from postbox_client import Client, PullConsumer

LEDGER = os.environ.get("LEDGER", "ledger.jsonl")
PAUSE = float(os.environ.get("PAUSE_AFTER_EFFECT", "0"))
LEASE = float(os.environ.get("LEASE_SECONDS", "10"))
lock = threading.Lock()


def once(delivery, effect):
    """Applies `effect` to the external system once per idempotency key."""
    key = delivery.idempotency_key
    with lock:
        if os.path.exists(LEDGER):
            with open(LEDGER) as f:
                for n, line in enumerate(f, 1):
                    if json.loads(line)["key"] == key:
                        return {"ledger_line": n, "again": True}
        with open(LEDGER, "a") as f:
            f.write(json.dumps({"key": key, **effect}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        with open(LEDGER) as f:
            n = sum(1 for _ in f)
    print(f"payments.py: {delivery.subscription} {delivery.event['id']} (attempt {delivery.attempt})", flush=True)
    time.sleep(PAUSE)
    return {"ledger_line": n}


def mirror_order(d):
    p = d.event["payload"]
    return once(d, {"effect": "order mirrored", "order": p["order_id"], "amount": p["amount"]})


def book_shipment(d):
    return once(d, {"effect": "shipment booked", "order": d.event["payload"]["order_id"]})


def notify_buyer(d):
    if d.attempt == 1:
        raise RuntimeError("the mail server is busy")  # retried with backoff
    return once(d, {"effect": "buyer notified", "to": d.event["payload"]["buyer"]})


def mark_tag(d):
    return once(d, {"effect": "tag marked", "tag": d.event["payload"]["tag"]})


HANDLERS = {
    "order-mirror": mirror_order,
    "shipment": book_shipment,
    "notification": notify_buyer,
    "tag-update": mark_tag,
}


def main():
    client = Client(os.environ.get("POSTBOX_ENDPOINT", "http://127.0.0.1:8000"), os.environ["POSTBOX_TOKEN"])
    consumers = [PullConsumer(client, name, h, lease_seconds=LEASE, wait_seconds=2) for name, h in HANDLERS.items()]
    threads = [threading.Thread(target=c.run, kwargs={"install_signal_handlers": False}) for c in consumers]

    def stop(*_):
        for c in consumers:
            c.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for t in threads:
        t.start()
    print("payments.py: ready", flush=True)
    for t in threads:
        while t.is_alive():
            t.join(timeout=0.5)


if __name__ == "__main__":
    main()
