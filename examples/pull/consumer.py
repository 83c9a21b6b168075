#!/usr/bin/env python3
"""A pull consumer of the `billing` subscription, standard library only.

    POSTBOX_TOKEN=$(cat postbox-data/admin-token) python3 examples/pull/consumer.py

It receives deliveries, records each payment's invoice in INVOICES (a JSON
lines file standing in for an external system) under the delivery's
idempotency key, and completes the delivery. A delivery can come again (its
consumer died before completing it, or the completion was lost), so the
effect is keyed: an invoice already written for that key is not written
twice. Environment: POSTBOX_ENDPOINT (default http://127.0.0.1:8000),
POSTBOX_TOKEN, INVOICES (default invoices.jsonl), LEASE_SECONDS (default
30), PAUSE_AFTER_EFFECT (seconds to wait between the effect and the
completion; the tests kill the consumer there).
"""
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

BASE = os.environ.get("POSTBOX_ENDPOINT", "http://127.0.0.1:8000")
TOKEN = os.environ["POSTBOX_TOKEN"]
INVOICES = os.environ.get("INVOICES", "invoices.jsonl")
LEASE = float(os.environ.get("LEASE_SECONDS", "30"))
PAUSE = float(os.environ.get("PAUSE_AFTER_EFFECT", "0"))
stopping = False


def call(verb, body):
    req = urllib.request.Request(
        f"{BASE}/v1/subscriptions/billing/{verb}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=LEASE + 30) as res:
        return json.load(res)


def invoice(delivery):
    """The effect, once per idempotency key."""
    key = delivery["idempotency_key"]
    if os.path.exists(INVOICES):
        with open(INVOICES) as f:
            if any(json.loads(line)["key"] == key for line in f):
                return
    payment = delivery["event"]["payload"]
    with open(INVOICES, "a") as f:
        f.write(json.dumps({"key": key, "order": payment["order_id"], "amount": payment["amount"]}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def main():
    def stop(*_):
        global stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("consumer: ready", flush=True)
    while not stopping:
        got = call("receive", {"max": 10, "wait_seconds": 2, "lease_seconds": LEASE})
        for d in got["deliveries"]:
            try:
                invoice(d)
                print(f"consumer: invoiced {d['event']['id']} (attempt {d['attempt']})", flush=True)
                time.sleep(PAUSE)
                call("complete", {"handle": d["handle"]})
            except urllib.error.HTTPError as e:
                # 409: the lease ran out meanwhile; the delivery comes back.
                print(f"consumer: {e.code} {e.read().decode()}", file=sys.stderr, flush=True)
            except Exception as e:  # the handler failed: retried with backoff
                call("fail", {"handle": d["handle"], "error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    main()
