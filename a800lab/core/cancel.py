"""A cancel token shared between a long run and whoever may stop it (a Stop button, Ctrl-C):
loops call `token.raise_if_cancelled()` between units of work, so no unit is left half-done.

    token = CancelToken(); run_sweep(..., cancel=token); token.cancel()
"""

import threading


class Cancelled(Exception):
    """Raised by CancelToken.raise_if_cancelled() once cancel() was called."""


class CancelToken:
    """Thread-safe one-way flag: once cancelled, it stays cancelled."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled("cancelled by request")
