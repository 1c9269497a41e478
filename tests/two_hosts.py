"""Two real hosts on this machine for tests: scripts/two_hosts.sh's network namespaces (each its
own stack, address and hostname, a veth pair between them, no default route), the lab started
on each under `a800lab torchrun`, and everything torn down afterwards, a failing test included.

    with two_hosts() as hosts:                      # skips with the reason where it cannot
        out0, out1 = hosts.run_both(["comm", "collectives", ...], nproc=2)
    assert hosts.gone()
"""

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "two_hosts.sh"
ADDRESSES = ("10.238.0.1", "10.238.0.2")   # the script's
PREFIX = "a8l"                              # namespaces a8l<pid of the test process>-0 and -1


def cannot_make_hosts() -> str:
    """Why this machine cannot make the two hosts ("" when it can)."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces (ip netns add)"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"no `{tool}` here: install {package}"
    return ""


def _namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def _remove_stale() -> None:
    """Tear down the hosts of a test process that was killed before its own teardown."""
    for pid in {n[len(PREFIX):].split("-")[0] for n in _namespaces() if n.startswith(PREFIX)}:
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            subprocess.run([str(SCRIPT), "down", PREFIX + pid], capture_output=True)


class Hosts:
    """Hosts <name>-0 and <name>-1 and what runs on them."""

    def __init__(self, name: str):
        self.name = name
        self.seen: set[int] = set()
        self.procs: list[subprocess.Popen] = []

    def host(self, i: int) -> str:
        return f"{self.name}-{i}"

    def pids(self) -> set[int]:
        """The processes in either namespace now (remembered in `seen`)."""
        now = set()
        for i in (0, 1):
            listed = subprocess.run(["ip", "netns", "pids", self.host(i)], capture_output=True,
                                    text=True).stdout
            now |= {int(p) for p in listed.split()}
        self.seen |= now
        return now

    def start(self, i: int, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        """`python ARGV` on host i, with `env` added."""
        extra = [f"{k}={v}" for k, v in (env or {}).items()]
        proc = subprocess.Popen([str(SCRIPT), "on", self.name, str(i), "env", *extra,
                                 sys.executable, *argv], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.procs.append(proc)
        return proc

    def torchrun(self, i: int, lab: list[str], *, nproc: int, plain: bool = False,
                 env: dict | None = None) -> subprocess.Popen:
        """`a800lab torchrun LAB` (plain: `torchrun ... -m a800lab LAB`) on host i: 2 nodes of
        `nproc` ranks, host 0 serving the c10d rendezvous (is_host), each agent on its own
        address (--local-addr)."""
        options = ["--nnodes", "2", "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"{ADDRESSES[0]}:29400", "--local-addr", ADDRESSES[i],
                   "--rdzv-conf", f"is_host={int(i == 0)}"]
        argv = (["-m", "torch.distributed.run", *options, "-m", "a800lab", *lab] if plain
                else ["-m", "a800lab", "torchrun", *options, *lab])
        return self.start(i, argv, env)

    def run_both(self, lab: list[str], *, nproc: int, plain: bool = False,
                 timeout_s: float = 120, env1: dict | None = None) -> list[tuple[int, str]]:
        """The same lab command on both hosts (host 1 with `env1` added): (exit code, output)."""
        procs = [self.torchrun(i, lab, nproc=nproc, plain=plain, env=env1 if i else None)
                 for i in (0, 1)]
        return [wait(p, timeout_s) for p in procs]

    def down(self) -> None:
        self.pids()
        for proc in self.procs:  # the `on` wrappers are the hosts' processes: gone with them
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        subprocess.run([str(SCRIPT), "down", self.name], capture_output=True, check=True)
        for proc in self.procs:
            proc.wait(10)

    def gone(self) -> bool:
        """No namespace of these hosts, no end of their veth pair (none was ever in this
        namespace) and no process that ran in them is left."""
        return not any(n.startswith(self.name + "-") for n in _namespaces()) and \
            subprocess.run(["ip", "link", "show", "lab0"], capture_output=True).returncode and \
            not any(Path(f"/proc/{pid}").exists() for pid in self.seen)


def wait(proc: subprocess.Popen, timeout_s: float) -> tuple[int, str]:
    """(exit code, output) of `proc`; a test failure, after killing it, when it takes longer."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"still running after {timeout_s} s: {out[-2000:]}")
    return proc.returncode, out


@contextlib.contextmanager
def two_hosts():
    """Hosts a8l<pid>-0 and -1 for the block, torn down however it ends."""
    reason = cannot_make_hosts()
    if reason:
        pytest.skip(reason)
    _remove_stale()
    hosts = Hosts(f"{PREFIX}{os.getpid()}")
    made = subprocess.run([str(SCRIPT), "up", hosts.name], capture_output=True, text=True)
    if made.returncode:
        subprocess.run([str(SCRIPT), "down", hosts.name], capture_output=True)
        pytest.skip(f"cannot make network namespaces here: {made.stderr.strip()}")
    try:
        yield hosts
    finally:
        hosts.down()
