"""Drawing off the measuring thread: a panel asks for a re-plot, a thread of its own draws.

    drawer = Redrawer(panel_draw)
    drawer.request()                 # any thread, returns at once; urgent=True skips the wait
    drawer.flush()                   # blocks until every request so far is drawn

Requests coalesce. Draws start at most every `min_interval_s` and no sooner than `rest_factor`
times the last draw's duration after it ended, so drawing takes at most 1 / (1 + rest_factor)
of a core from the measurement; on CPU a draw also waits for the point in flight.
"""

import threading
import time
from collections.abc import Callable

from ..core.window import harness_work

MIN_INTERVAL_S = 0.3   # at most ~3 live re-plots a second
REST_FACTOR = 2.0      # after a draw of d seconds, wait >= 2 d: drawing takes <= 1/3 of the time
CPU_MIN_INTERVAL_S = 1.0  # CPU fallback: a live picture a second at most (the browser paints it
CPU_REST_FACTOR = 4.0     # on the cores being measured); drawing takes <= 1/5 of the time


class Redrawer:
    """Runs `draw()` on a thread that exists only while there is something to draw."""

    def __init__(self, draw: Callable[[], None], *, min_interval_s: float = MIN_INTERVAL_S,
                 rest_factor: float = REST_FACTOR, name: str = "a800lab-draw",
                 on_error: Callable[[BaseException], None] | None = None):
        self._draw = draw
        self.min_interval_s, self.rest_factor, self.name = min_interval_s, rest_factor, name
        self._on_error = on_error
        self._cond = threading.Condition()
        self._wanted = 0        # requests so far
        self._done = 0          # requests covered by a finished draw
        self._urgent = False
        self._next_at = 0.0     # time.monotonic() before which a plain request waits
        self._thread: threading.Thread | None = None
        self.draws = 0          # how many times draw() ran

    def request(self, urgent: bool = False) -> None:
        """Ask for a draw of the state as it is now."""
        with self._cond:
            self._wanted += 1
            self._urgent = self._urgent or urgent
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Draw now what was requested so far and wait for it; False on timeout."""
        with self._cond:
            target = self._wanted
            if self._done < target:
                self._urgent = True
                self._cond.notify_all()
            return self._cond.wait_for(lambda: self._done >= target, timeout_s)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._done >= self._wanted:
                        self._thread = None  # a later request starts a new thread
                        return
                    delay = 0.0 if self._urgent else self._next_at - time.monotonic()
                    if delay <= 0:
                        break
                    self._cond.wait(delay)
                target, self._urgent = self._wanted, False
            started = time.monotonic()
            try:
                with harness_work():  # between CPU points: never inside a measured window
                    self._draw()
            except Exception as exc:  # a failed draw must not end the drawing for good
                if self._on_error is not None:
                    self._on_error(exc)
            ended = time.monotonic()
            with self._cond:
                self.draws += 1
                self._next_at = max(started + self.min_interval_s,
                                    ended + self.rest_factor * (ended - started))
                self._done = target
                self._cond.notify_all()
