import http.server
import threading
import time

import pytest

from postbox_client import (
    Client,
    PostboxError,
    PullConsumer,
    RetryAfter,
    Terminal,
    WebhookVerificationError,
    verify_webhook,
)


def payment(i):
    return {"order_id": f"A-{i}", "amount": 100 * i}


def test_emit_reads_back_in_order_and_an_idempotency_key_emits_once(server):
    client = Client(server.base, server.tenant_token("acme"))
    first = client.emit("PAYMENT_COMPLETED", payment(1), idempotency_key="pay-A-1")
    again = client.emit("PAYMENT_COMPLETED", payment(1), idempotency_key="pay-A-1")
    assert again["event"]["id"] == first["event"]["id"]
    client.emit("PAYMENT_COMPLETED", payment(2))
    page = client.events()
    assert [e["event"]["seq"] for e in page["events"]] == [1, 2]
    assert page["events"][0]["event"]["payload"] == payment(1)


def test_bad_input_is_an_error_with_the_servers_words(server):
    client = Client(server.base, server.tenant_token("acme"))
    with pytest.raises(PostboxError) as e:
        client.emit("NO_SUCH_TYPE", {})
    assert e.value.status == 400
    assert e.value.code == "unknown_event_type"
    # The extra writes reach the server (this one names a missing table).
    with pytest.raises(PostboxError) as e:
        client.emit(
            "PAYMENT_COMPLETED",
            payment(2),
            writes=[{"Put": {"TableName": "shop", "Item": {"pk": {"S": "acme#A-2"}}}}],
        )
    assert e.value.status == 404
    assert 'table "shop" does not exist' in e.value.message
    assert client.events()["events"] == []


def test_follow_yields_the_log_then_new_events_as_they_commit(server):
    client = Client(server.base, server.tenant_token("acme"))
    client.emit("PAYMENT_COMPLETED", payment(1))
    seen = []

    def follow():
        for emitted in client.follow():
            seen.append(emitted["event"]["seq"])
            if len(seen) == 3:
                return

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    time.sleep(0.5)
    client.emit("PAYMENT_COMPLETED", payment(2))
    client.emit("PAYMENT_COMPLETED", payment(3))
    t.join(timeout=20)
    assert seen == [1, 2, 3]


def test_a_retried_emit_keeps_its_idempotency_key():
    # A server that answers 503 (Retry-After: 0) once, then 201.
    keys = []

    class Flaky(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            keys.append(self.headers["Idempotency-Key"])
            if len(keys) == 1:
                self.send_response(503)
                self.send_header("Retry-After", "0")
                body = b'{"error": {"code": "unavailable", "message": "busy"}}'
            else:
                self.send_response(201)
                body = b'{"event": {"id": "E1"}}'
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = Client(f"http://127.0.0.1:{httpd.server_port}", "t", backoff=0.01)
        assert client.emit("X", {})["event"]["id"] == "E1"
    finally:
        httpd.shutdown()
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0]


def test_a_pull_consumer_completes_retries_dead_letters_and_keeps_its_lease(server):
    acme = Client(server.base, server.tenant_token("acme"))
    ids = [acme.emit("PAYMENT_COMPLETED", payment(i))["event"]["id"] for i in range(1, 5)]
    seen = []

    def bill(d):
        seen.append((d.event["id"], d.attempt))
        n = ids.index(d.event["id"])
        if n == 1 and d.attempt == 1:
            raise RuntimeError("card network down")
        if n == 2:
            raise Terminal("no such card")
        if n == 3:
            time.sleep(2.5)  # longer than the lease: the consumer extends it
        return {"invoice": f"INV-{n}"}  # recorded in the claim

    consumer = PullConsumer(acme, "billing", bill, lease_seconds=1.5, wait_seconds=1)
    t = threading.Thread(target=consumer.run, kwargs={"install_signal_handlers": False}, daemon=True)
    t.start()
    deadline = time.time() + 30
    while consumer.completed + consumer.failed < 5 and time.time() < deadline:
        time.sleep(0.1)
    consumer.stop()
    t.join(timeout=10)
    assert seen == [(ids[0], 1), (ids[1], 1), (ids[1], 2), (ids[2], 1), (ids[3], 1)]
    assert (consumer.completed, consumer.failed) == (3, 2)
    _, dead = Client(server.base, server.admin).request("GET", "/v1/dead-letters")
    assert [d["event_id"] for d in dead["dead_letters"]] == [ids[2]]
    assert "no such card" in dead["dead_letters"][0]["error"]
    _, first = acme.request("GET", "/v1/events/1")
    assert first["deliveries"] == [
        {**first["deliveries"][0], "subscription": "billing", "status": "completed", "result": {"invoice": "INV-0"}}
    ]


def test_retry_after_reaches_the_server():
    # RetryAfter maps to retry_after_seconds; checked without a server.
    sent = []

    class Recording(Client):
        def request(self, method, path, body=None, headers=None, **kw):
            sent.append((path, body))
            return 200, {"failed": True}

    from postbox_client import Delivery

    d = Delivery("1.%032x" % 1, "billing", {"id": "E"}, 1, "E:billing", 0)

    def slow(_):
        raise RetryAfter("rate limited", 7)

    PullConsumer(Recording("http://x"), "billing", slow, lease_seconds=30).handle(d)
    assert sent == [
        (
            "/v1/subscriptions/billing/fail",
            {"handle": d.handle, "error": "RetryAfter: rate limited", "retry_after_seconds": 7},
        )
    ]


def test_verify_webhook_takes_the_specifications_example_and_refuses_a_changed_body():
    # The Standard Webhooks specification's example.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    headers = {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }
    body = b'{"test": 2432232314}'
    assert verify_webhook(secret, headers, body, now=1614265330) == {"test": 2432232314}
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, headers, b'{"test": 2432232315}', now=1614265330)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, headers, body, now=1614265330 + 3600)
    # A second secret while a new one rolls out.
    assert verify_webhook("whsec_AAAA " + secret, headers, body, now=1614265330)
