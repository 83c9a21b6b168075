"""Postbox's HTTP API from Python, with the standard library only.

    from postbox_client import Client, PullConsumer

    client = Client("http://127.0.0.1:8000", token)
    client.emit("PAYMENT_COMPLETED", {"order_id": "A-1"}, idempotency_key="pay-A-1")
    for emitted in client.follow():          # the tenant's log, live
        print(emitted["event"]["seq"], emitted["event"]["type"])

    def bill(delivery):                       # raise to fail (Terminal: no retry)
        charge(delivery.event["payload"], key=delivery.idempotency_key)
    PullConsumer(client, "billing", bill).run()   # until SIGTERM or SIGINT
"""

from .client import Client, Delivery, PostboxError
from .consumer import PullConsumer, RetryAfter, Terminal
from .webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "Client",
    "Delivery",
    "PostboxError",
    "PullConsumer",
    "RetryAfter",
    "Terminal",
    "WebhookVerificationError",
    "verify_webhook",
]
