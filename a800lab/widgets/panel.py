"""What every panel shares: a status line, a Job that runs one piece of work at a time on a
thread of its own (Stop, disabled buttons, its end said in the status line), Run / Stop and
a progress bar.

    job = Job(status, stop_button=stop, buttons=[run, clear])
    job.start(plan, failed=lambda exc: f"Run failed: {exc}", name="a800lab-run")
"""

import html
import io
import threading

import ipywidgets as widgets

from ..core.cancel import Cancelled, CancelToken

_COLOURS = {"ok": "green", "warn": "darkorange", "error": "crimson"}
BUSY = "A run is already in progress: press Stop or wait for it."
PNG_DPI = 90  # the 10 in wide figure as 900 px: fits a notebook, small text stays legible


class StatusLine(widgets.HTML):
    """One escaped, coloured message (levels: info, ok, warn, error), readable as `text`."""

    def __init__(self, text: str = "", level: str = "info", **kwargs):
        super().__init__(**kwargs)
        self.say(text, level)

    def say(self, text: str, level: str = "info") -> None:
        colour = _COLOURS.get(level, "inherit")
        self.value = f'<span style="color:{colour}">{html.escape(text)}</span>'

    @property
    def text(self) -> str:
        return html.unescape(self.value.split(">", 1)[1].rsplit("<", 1)[0])


class Job:
    """A panel's runner of background work; `cancel` is the running job's CancelToken."""

    def __init__(self, status: StatusLine, *, stop_button, buttons=(), busy: str = BUSY):
        self.status, self.stop_button, self.busy = status, stop_button, busy
        self.buttons = list(buttons)  # disabled while a job runs
        self.cancel = CancelToken()
        self.refusal = ""  # set: every start says it and runs nothing (a model that cannot run)
        self._stopped = threading.Event()
        self._stopping = ""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, plan, *, failed, name: str, cannot: str = "Cannot run", stopped=None,
              stopping="", wait: bool = False) -> bool:
        """Run the work `plan()` returns on thread `name`, unless the job refuses every run
        (`refusal`) or one runs (`busy`), said either way. A plan that raises is said as
        "<cannot>: <message>" and starts nothing; the work's exception as `failed(exc)` (a
        Cancelled one as `stopped` when given); Stop says `stopping`. Texts may be callables."""
        with self._lock:
            if self.refusal:
                self.status.say(self.refusal, "error")
                return False
            if self.running:
                self.status.say(self.busy, "warn")
                return False
            self.cancel, self._stopping = CancelToken(), stopping
            self._stopped.clear()
            try:
                work = plan()
            except Exception as exc:  # any bad value: say so, start nothing
                self.status.say(f"{cannot}: {exc}" if cannot else str(exc), "error")
                return False
            self._thread = threading.Thread(target=self._run, args=(work, failed, stopped),
                                            name=name, daemon=True)
            self._busy(True)
            self._thread.start()
        if wait:
            self.wait()
        return True

    def _run(self, work, failed, stopped) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: B036 -- whatever ends it, say so and recover
            if isinstance(exc, Cancelled) and stopped is not None:
                self.status.say(_text(stopped), "warn")
            else:
                self.status.say(failed(exc), "error")
        finally:
            self._busy(False)

    def _busy(self, busy: bool) -> None:
        for button in self.buttons:
            button.disabled = busy
        self.stop_button.disabled = not busy

    def stop(self) -> None:
        """Cancel the job (it ends at its next check)."""
        if self.running:
            self.cancel.cancel()
            self._stopped.set()
            if self._stopping:
                self.status.say(_text(self._stopping), "warn")

    def sleep(self, seconds: float) -> bool:
        """Wait `seconds` or until Stop, for a job that repeats; True once stopped."""
        return self._stopped.wait(seconds)

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until the job ends; a kernel interrupt (Ctrl-C) stops it, then re-raises."""
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        try:
            thread.join(timeout_s)
        except KeyboardInterrupt:
            self.stop()
            thread.join()
            raise


def _text(text) -> str:
    return text() if callable(text) else text


def png(figure, dpi: int = PNG_DPI) -> bytes:
    buf = io.BytesIO()
    figure.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


class Panel:
    """Shown by its `widget`, saying things in its `status` line, running one `job`."""

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    @property
    def status_text(self) -> str:
        return self.status.text

    @property
    def running(self) -> bool:
        return self.job.running

    def _conditions(self) -> str:
        """"GPU cuda:0" or "CPU fallback, 1 torch thread"."""
        threads = self.torch_threads
        if self.device != "cpu":
            return f"GPU {self.device}" + ("" if threads is None else f", {threads} CPU threads")
        return f"CPU fallback, {threads} torch thread{'s' * (threads != 1)}"

    def stop(self) -> None:
        """End the run (a sweep after the point in flight)."""
        self.job.stop()

    def _refuse_every_run(self, fault: str) -> None:
        """Say `fault` (one line: your model cannot run, and why) now and at every press."""
        if fault:
            self.job.refusal = fault
            self.status.say(fault, "error")

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until the run ends and its last points are drawn (Ctrl-C stops it)."""
        self.job.wait(timeout_s)
        self._drawer.flush(timeout_s)

    def _run_controls(self, ready: str, *, busy: str = BUSY, buttons=()) -> None:
        """Run, Stop, the progress bar, the status line saying `ready` and the job runner."""
        self.run_button = widgets.Button(description="Run", button_style="success", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          disabled=True)
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress")
        self.progress_text = widgets.Label("")
        self.status = StatusLine(ready)
        self.status.add_class("a800lab-status")
        self.job = Job(self.status, stop_button=self.stop_button,
                       buttons=[self.run_button, *buttons], busy=busy)

    def _on_progress(self, done: int, total: int, eta_s: float | None) -> None:
        self.progress.max, self.progress.value = total, done
        left = "" if eta_s is None or done == total else f", about {eta_s:.0f} s left"
        self.progress_text.value = f"{done}/{total} points{left}"
