"""Start a group of worker processes (one per rank), talk to them, and always clean them up: a
rank that dies or hangs ends the group with a RankGroupError naming it, and no process is left.

    with RankGroup("a800lab.workloads.comm.worker", world_size=2, timeout_s=30) as group:
        reply = group.request({"job": "point", ...})   # rank 0's answer, once every rank is done
"""

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

PREFIX = "@a800lab "           # marks a message line on a worker's stdout
HOST = "127.0.0.1"             # MASTER_ADDR: every rank on this machine
_STDERR_LINES = 12             # kept per rank for error messages
_STARTUP_S = 120.0             # for every rank to import torch and join the group
_EXIT_GRACE_S = 3.0            # after "exit": how long a rank may take before it is killed
_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible wait", "T": "stopped",
           "t": "stopped by a debugger", "Z": "exited (zombie)"}


class RankGroupError(RuntimeError):
    """The worker group failed (a rank died, hung or reported an error); all ranks are gone."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class RankGroup:
    """`world_size` worker processes running `python -m module`, `env` added to each;
    `timeout_s`: how long a command may take before the group is declared hung."""

    def __init__(self, module: str, *, world_size: int, env: dict | None = None,
                 timeout_s: float = 30.0):
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size={world_size!r} must be a positive int, e.g. 2")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r} must be a positive number of seconds")
        self.module, self.world_size, self.timeout_s = module, world_size, float(timeout_s)
        self._extra_env = dict(env or {})
        self.procs: list[subprocess.Popen] = []
        self._messages: queue.Queue = queue.Queue()
        self._stderr = [deque(maxlen=_STDERR_LINES) for _ in range(world_size)]
        self._threads: list[threading.Thread] = []
        self._closed = False

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def running(self) -> bool:  # started and not closed (a failure closes the group)
        return bool(self.procs) and not self._closed

    def __enter__(self) -> "RankGroup":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def start(self) -> None:
        """Start every rank and wait until each has said "ready" (or fail and clean up)."""
        port = free_port(HOST)
        try:
            for rank in range(self.world_size):
                env = {**os.environ, **self._extra_env, "RANK": str(rank),
                       "WORLD_SIZE": str(self.world_size), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(self.world_size), "MASTER_ADDR": HOST,
                       "MASTER_PORT": str(port), "A800LAB_LAUNCHED": "1",
                       "PYTHONUNBUFFERED": "1"}
                proc = subprocess.Popen([sys.executable, "-m", self.module], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, bufsize=1,
                                        start_new_session=True)
                self.procs.append(proc)
                self._watch(rank, proc)
            ready: set[int] = set()
            deadline = time.monotonic() + _STARTUP_S
            while len(ready) < self.world_size:
                message = self._next(deadline, "start-up (import torch, join the group)",
                                     _STARTUP_S)
                if message.get("kind") == "ready":
                    ready.add(message["rank"])
        except BaseException:
            self.close()
            raise

    def request(self, command: dict):
        """Send `command` to every rank and return rank 0's answer once every rank is done;
        RankGroupError (after cleaning up) when a rank fails or is late."""
        if self._closed or not self.procs:
            raise RankGroupError("the worker group is not running; start a new one")
        line = json.dumps(command) + "\n"
        try:
            for rank, proc in enumerate(self.procs):
                try:
                    proc.stdin.write(line)
                    proc.stdin.flush()
                except (BrokenPipeError, OSError, ValueError):
                    self._fail(f"rank {rank} {self._describe_exit(rank)} before it could take "
                               "the command")
            deadline = time.monotonic() + self.timeout_s
            what = f"the {command.get('job', 'command')!r} command"
            done: dict[int, object] = {}
            while len(done) < self.world_size:
                message = self._next(deadline, what, self.timeout_s, done)
                if message.get("kind") == "done":
                    done[message["rank"]] = message.get("data")
            return done[0]
        except BaseException:
            self.close()
            raise

    def close(self, grace_s: float = _EXIT_GRACE_S) -> None:
        """Ask every rank to exit, kill any still there after `grace_s`, reap all (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for proc in self.procs:
            with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                proc.stdin.write(json.dumps({"job": "exit"}) + "\n")
                proc.stdin.close()
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.poll() is None:
                _kill_session(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        for thread in self._threads:
            thread.join(2)

    def _watch(self, rank: int, proc: subprocess.Popen) -> None:
        def read_stdout() -> None:
            for line in proc.stdout:
                if line.startswith(PREFIX):
                    try:
                        self._messages.put({**json.loads(line[len(PREFIX):]), "rank": rank})
                    except json.JSONDecodeError:
                        self._stderr[rank].append(f"(unreadable message) {line.rstrip()}")
                else:
                    self._stderr[rank].append(line.rstrip())
            self._messages.put({"kind": "eof", "rank": rank})

        def read_stderr() -> None:
            for line in proc.stderr:
                self._stderr[rank].append(line.rstrip())

        for target in (read_stdout, read_stderr):
            thread = threading.Thread(target=target, daemon=True,
                                      name=f"a800lab-rank{rank}-{target.__name__}")
            thread.start()
            self._threads.append(thread)

    def _next(self, deadline: float, what: str, allowed_s: float,
              done: dict | None = None) -> dict:
        try:
            message = self._messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self._fail(f"no answer to {what} within {allowed_s:g} s: {self._states(done)} (a hung "
                       "rank, or ranks waiting for one). Raise timeout_s if the work is just "
                       "slow")
        if message.get("kind") in ("eof", "error"):
            self._fail(self._what_failed(message, what))
        return message

    def _what_failed(self, first: dict, what: str) -> str:
        """The failure in words, root cause first: ranks that exited before the errors of the
        peers they took down."""
        events, deadline = [first], time.monotonic() + 0.5
        while time.monotonic() < deadline:  # let the peers' reactions and exit codes arrive
            try:
                events.append(self._messages.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        exited = sorted({e["rank"] for e in events if e.get("kind") == "eof"},
                        key=lambda r: (self.procs[r].poll() is None or
                                       self.procs[r].returncode >= 0, r))
        errors = {e["rank"]: e.get("message") for e in events if e.get("kind") == "error"}
        parts = [f"rank {r} {self._describe_exit(r)}" for r in exited if r not in errors]
        parts += [f"rank {r} failed: {text}" for r, text in sorted(errors.items())]
        return f"during {what}: " + "; ".join(parts)

    def _fail(self, text: str):
        self.close(grace_s=0.0)  # a failed group cannot finish its collectives: no waiting
        tails = [f"rank {r} stderr: " + " | ".join(lines)
                 for r, lines in enumerate(self._stderr) if lines]
        detail = ("\n" + "\n".join(tails)) if tails else ""
        raise RankGroupError(f"{text}. All {len(self.procs)} worker processes were stopped."
                             f"{detail}")

    def _describe_exit(self, rank: int) -> str:
        proc = self.procs[rank]
        try:
            code = proc.wait(2)
        except subprocess.TimeoutExpired:
            return f"(pid {proc.pid}) closed its output but is still running"
        if code < 0:
            return f"(pid {proc.pid}) was killed by signal {signal.Signals(-code).name}"
        return f"(pid {proc.pid}) exited with code {code}"

    def _states(self, done: dict | None = None) -> str:
        parts = []
        for rank, proc in enumerate(self.procs):
            code = proc.poll()
            state = f"exit code {code}" if code is not None else process_state(proc.pid)
            finished = ", done with it" if done and rank in done else ""
            parts.append(f"rank {rank} (pid {proc.pid}) {state}{finished}")
        return ", ".join(parts)


def process_state(pid: int) -> str:
    """"running", "sleeping", "stopped" ... from /proc/<pid>/stat; "gone" when it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            code = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
    return _STATES.get(code, f"state {code}")


def _kill_session(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: the session id is its pid
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


# ---- the worker side ------------------------------------------------------------------------
def launched() -> bool:
    """True inside a worker started by RankGroup (False under torchrun or plain Python)."""
    return os.environ.get("A800LAB_LAUNCHED") == "1"


def serve(handle: Callable[[dict], object], *, rank: int) -> None:
    """The worker's loop: "ready", then `handle(command)` and "done" (rank 0 with the value)
    per command until "exit"; an exception is reported and ends the worker (its peers would
    wait for it forever), and so does stdin closing (the parent is gone)."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints (libraries, user code) go to stderr, not the message channel
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        channel.write(PREFIX + json.dumps(message) + "\n")
        channel.flush()

    commands: queue.Queue = queue.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            command = json.loads(line)
            commands.put(command)
            if command.get("job") == "exit":
                return
        os._exit(3)  # the parent is gone (its end of the pipe closed): leave no orphan

    threading.Thread(target=read_stdin, daemon=True, name="a800lab-commands").start()
    send({"kind": "ready"})
    while True:
        command = commands.get()
        if command.get("job") == "exit":
            return
        try:
            data = handle(command)
        except BaseException as exc:  # noqa: B036 -- any failure: report it, then end this rank
            send({"kind": "error", "message": f"{type(exc).__name__}: {exc}"})
            channel.close()
            os._exit(1)
        send({"kind": "done", "data": data if rank == 0 else None})
