"""What every rank runs: join the process group (gloo on CPUs, NCCL on GPUs), then measure the
points it is asked for; rank 0's record is the answer.

    python -m a800lab.workloads.comm.worker     # one per rank, started by launcher.RankGroup
"""

import datetime
import functools
import os

import torch

from ...core.environment import environment, fingerprint
from ...core.results import Record
from ...core.sweep import measure_point
from .collectives import collective_point
from .ddp import ddp_point, hook_support
from .placement import placement

WORKLOADS = {"comm": collective_point, "ddp": ddp_point}
DEFAULT_TIMEOUT_S = 300.0


def default_comm_backend() -> str:
    """NCCL when CUDA works with at least 2 GPUs (one per rank), else gloo (CPU ranks)."""
    from ...core.backends import HAS_CUDA

    return "nccl" if HAS_CUDA and torch.cuda.device_count() >= 2 else "gloo"


def join_group(backend: str | None = None) -> str:
    """init_process_group from torchrun's environment; returns this rank's device."""
    import torch.distributed as dist

    backend = backend or os.environ.get("A800LAB_BACKEND") or default_comm_backend()
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    else:
        torch.set_num_threads(int(os.environ.get("A800LAB_THREADS", "1")))
        device = "cpu"
    timeout_s = float(os.environ.get("A800LAB_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return device


def measure_on_group(command: dict, device: str) -> Record | None:
    """Run one point on this rank (every rank must); rank 0 gets the Record, others None. The
    record is rank 0's; its env["group"] says where every rank ran (placement)."""
    import torch.distributed as dist

    workload = command["workload"]  # checked by runs.check_point before any rank started
    point = functools.partial(WORKLOADS[workload], **command.get("settings", {}))
    env = environment(device)
    env["fingerprint"] = fingerprint(env)
    env["group"] = placement()  # where the ranks ran: host, node_rank, local_rank, nodes, ...
    record = measure_point(point, dict(command["params"]), workload=workload, device=device,
                           env=env, label=command.get("label", ""),
                           run_id=command.get("run_id", ""))
    return record if dist.get_rank() == 0 else None


def handle(command: dict, device: str):
    if command.get("job") == "hook_support":
        return hook_support(device)
    if command.get("job") == "point":
        record = measure_on_group(command, device)
        return None if record is None else record.to_json()
    raise ValueError(f"unknown job {command.get('job')!r}")


def main() -> None:
    import torch.distributed as dist

    from .launcher import serve

    device = join_group()
    serve(functools.partial(handle, device=device), rank=dist.get_rank())
    dist.destroy_process_group()
    os._exit(0)  # skip the interpreter's slow teardown of torch: nothing is left to flush


if __name__ == "__main__":
    main()
