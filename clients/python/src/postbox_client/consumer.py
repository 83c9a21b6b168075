"""Pull consumers: a handler function run over a pull subscription."""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable, Optional

from .client import Client, Delivery, PostboxError


class Terminal(Exception):
    """Raised by a handler: the delivery will fail the same way again, so it
    is dead-lettered at once."""


class RetryAfter(Exception):
    """Raised by a handler: retry, but not before `seconds`."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class PullConsumer:
    """Runs `handler(delivery)` on each delivery of `subscription`.

    The lease is extended every third of `lease_seconds` while the handler
    runs. A handler that returns completes the delivery (what it returns,
    if not None, is recorded in the claim as the result: any JSON value of
    at most 4 KB); one that raises
    fails it (retried with the subscription's backoff; `Terminal`: dead-
    lettered; `RetryAfter`: retried no sooner than asked). `run()` returns
    after `stop()` (or SIGTERM/SIGINT when it installs its signal handlers)
    once the deliveries in hand are settled.
    """

    def __init__(
        self,
        client: Client,
        subscription: str,
        handler: Callable[[Delivery], Any],
        *,
        lease_seconds: float = 30,
        max: int = 10,
        wait_seconds: float = 5,
    ) -> None:
        self.client = client
        self.subscription = subscription
        self.handler = handler
        self.lease_seconds = lease_seconds
        self.max = max
        self.wait_seconds = wait_seconds
        self._stop = threading.Event()
        self.completed = 0
        self.failed = 0

    def stop(self, *_: Any) -> None:
        """Stops after the deliveries in hand."""
        self._stop.set()

    def run(self, *, install_signal_handlers: bool = True) -> None:
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        while not self._stop.is_set():
            deliveries = self.client.receive(
                self.subscription,
                max=self.max,
                wait_seconds=self.wait_seconds,
                lease_seconds=self.lease_seconds,
            )
            for d in deliveries:
                self.handle(d)

    def handle(self, delivery: Delivery) -> bool:
        """Runs the handler on one delivery and settles it; whether it completed."""
        done = threading.Event()
        lost = threading.Event()

        def keep_leased() -> None:
            while not done.wait(self.lease_seconds / 3):
                try:
                    self.client.extend(delivery, self.lease_seconds)
                except PostboxError as e:
                    if e.status == 409:
                        lost.set()
                        return
                except OSError:
                    pass  # the next tick tries again; the lease still runs

        keeper = threading.Thread(target=keep_leased, daemon=True)
        keeper.start()
        try:
            result = self.handler(delivery)
        except Exception as e:  # noqa: BLE001 - a handler's failure is data
            done.set()
            keeper.join()
            message = f"{type(e).__name__}: {e}"
            try:
                if isinstance(e, Terminal):
                    self.client.fail(delivery, message, terminal=True)
                elif isinstance(e, RetryAfter):
                    self.client.fail(delivery, message, retry_after_seconds=e.seconds)
                else:
                    self.client.fail(delivery, message)
                self.failed += 1
            except PostboxError as refused:
                if refused.status != 409:
                    raise
            return False
        done.set()
        keeper.join()
        try:
            self.client.complete(delivery, result)
        except PostboxError as e:
            if e.status == 409:
                # The lease was lost: the delivery comes back, with the same
                # idempotency key, to whichever consumer asks.
                return False
            raise
        self.completed += 1
        return True
