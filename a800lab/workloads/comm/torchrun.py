"""torchrun with the lab's two checks: the lab's group command on every rank of this node through
torch.distributed.run itself (its options, rendezvous and agent), after the rendezvous endpoint
has answered, and with a failed rank said in one line.

    python -m a800lab torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint head:29500 comm collectives --op all_reduce --out comm.jsonl
    launch(torchrun_args(["--nnodes", "2", ..., "doctor", "--fleet"]))   # -> exit code

Plain `torchrun ... -m a800lab comm collectives ...` runs the same ranks; an endpoint that does
not answer then ends in torchrun's traceback after its read_timeout.
"""

import contextlib
import os
import signal
import socket
import sys
import time

GROUP_COMMANDS = {"comm": ("collectives", "ddp"), "doctor": ("--fleet",)}
# how long torchrun itself tries to reach the rendezvous store, per backend: (its --rdzv-conf
# key, its default in seconds)
WAITS = {"c10d": ("read_timeout", 60), "static": ("timeout", 900)}
C10D_PORT = 29400  # torchrun's default c10d port


def torchrun_args(argv: list[str]):
    """torchrun's own parser on `argv` (options, then the lab command); the lab command becomes
    `-m a800lab COMMAND ...`. ValueError for anything but a group command of the lab."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "a800lab torchrun"
    args = parser.parse_args(argv)
    if args.module or args.no_python or args.run_path:
        raise ValueError("a800lab torchrun runs the lab's command itself: give it after the "
                         "torchrun options (comm collectives ..., comm ddp ..., doctor --fleet), "
                         "without -m, --no-python or --run-path")
    command = [args.training_script, *args.training_script_args]
    wanted = GROUP_COMMANDS.get(command[0], ())
    if not any(word in command[1:] for word in wanted):
        raise ValueError(f"{' '.join(command[:2])!r}: a800lab torchrun runs the lab's group "
                         "commands: comm collectives, comm ddp, doctor --fleet (the others run on "
                         "one machine: start them there)")
    args.module, args.training_script, args.training_script_args = True, "a800lab", command
    return args


def endpoint_to_reach(args) -> tuple[str, int, float, str] | None:
    """(host, port, seconds to wait, the --rdzv-conf key setting them) of the rendezvous this
    node must reach, or None where this node serves it (torchrun's rule: is_host, or the
    endpoint is this machine; static: node rank 0) or none is needed."""
    from torch.distributed.elastic.rendezvous.utils import (
        _matches_machine_hostname,
        _parse_rendezvous_config,
        parse_rendezvous_endpoint,
    )

    if args.standalone or args.rdzv_backend not in WAITS or \
            str(args.nnodes).split(":")[-1] == "1":
        return None
    conf = _parse_rendezvous_config(args.rdzv_conf or "")
    key, default_s = WAITS[args.rdzv_backend]
    wait_s = float(conf.get(key, default_s))
    if args.rdzv_backend == "static":
        return None if args.node_rank == 0 else (args.master_addr, args.master_port, wait_s, key)
    host, port = parse_rendezvous_endpoint(args.rdzv_endpoint, default_port=C10D_PORT)
    is_host = conf.get("is_host", "").lower()
    if is_host in ("1", "true", "yes") or (not is_host and _matches_machine_hostname(host)):
        return None
    return host, port, wait_s, key


def wait_for_endpoint(host: str, port: int, wait_s: float, key: str,
                      clock=time.monotonic) -> None:
    """Return once `host:port` accepts a connection; ValueError naming it after `wait_s`."""
    deadline, why = clock() + wait_s, "no answer"
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(2.0, wait_s))):
                return
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
        if clock() >= deadline:
            raise ValueError(
                f"the rendezvous endpoint {host}:{port} did not answer within {wait_s:g} s "
                f"({why.lower()}): start the first node's torchrun (it serves the endpoint; "
                "--rdzv-conf is_host=1 there), check the address and port, or wait longer "
                f"(--rdzv-conf {key}=SECONDS)")
        time.sleep(0.2)


def _ended(failure) -> str:
    code = failure.exitcode
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def failure_line(failures: dict) -> str:
    """torchrun's failures on this node ({global rank: ProcessFailure}) in one line, the cause
    first: a rank killed by a signal other than torchrun's SIGTERM, then one that exited with an
    error (its own line is above), then those torchrun stopped."""
    def order(rank):
        code = failures[rank].exitcode
        return (0 if code < 0 and code != -signal.SIGTERM else 1 if code > 0 else 2,
                failures[rank].timestamp, rank)

    ranks = sorted(failures, key=order)
    first = failures[ranks[0]]
    text = (f"on {socket.gethostname()}: rank {ranks[0]} (local rank {first.local_rank}, pid "
            f"{first.pid}) {_ended(first)}")
    if first.exitcode > 0:
        text += " (its own error line is above)"
    rest = ", ".join(f"rank {r} {_ended(failures[r])}" for r in ranks[1:])
    return text + (f"; then {rest}" if rest else "")


def leave(code: int):
    """End a rank torchrun started (or the agent, once torchrun has returned), its output
    flushed, skipping the interpreter's teardown of torch: seconds per process, and in a rank
    gloo's threads torn down at exit can abort it (SIGABRT), which its node's agent reports as a
    failed rank while the other nodes' agents wait 300 s for it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launch(args) -> int:
    """Wait for the endpoint, run torchrun with `args` (torchrun_args'); 1 with one line when a
    rank failed or the rendezvous did (ValueError for an endpoint that does not answer)."""
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.run import run

    reach = endpoint_to_reach(args)
    if reach is not None:
        wait_for_endpoint(*reach)
    try:
        run(args)
    except ChildFailedError as exc:
        print(f"a800lab: error: {failure_line(exc.failures)}", file=sys.stderr)
        return 1
    except (RendezvousError, DistError) as exc:
        text = (str(exc).strip().splitlines() or [""])[0]
        print(f"a800lab: error: torchrun's rendezvous failed on {socket.gethostname()}: "
              f"{type(exc).__name__}: {text}", file=sys.stderr)
        return 1
    return 0
