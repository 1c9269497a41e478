"""Communication arithmetic and checks that need no worker processes: nccl-tests' algbw and
busbw against hand-computed values, message rounding, link bandwidths, refused points, MPS/MIG
detection."""

import pytest

from a800lab.core.sharing import describe_sharing, mps_status
from a800lab.workloads.comm.collectives import (
    algbw_gbs,
    bus_factor,
    busbw_gbs,
    link_gbs,
    message_bytes,
)
from a800lab.workloads.comm.launcher import RankGroup, process_state
from a800lab.workloads.comm.runs import check_point


@pytest.mark.parametrize(("op", "n", "factor"), [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 2, 0.5), ("all_gather", 8, 0.875),
    ("reduce_scatter", 4, 0.75), ("reduce_scatter", 8, 0.875),
    ("broadcast", 2, 1.0), ("broadcast", 8, 1.0),
    ("hierarchical_all_reduce", 8, 1.75), ("all_reduce", 1, 0.0),
])
def test_bus_factors_are_nccl_tests(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_bandwidths_by_hand():
    # 1 GiB all-reduce in 10 ms on 8 ranks: algbw = 1073741824 B / 0.01 s / 1e9 = 107.374 GB/s,
    # busbw = algbw * 2 * 7 / 8 = 187.905 GB/s
    assert algbw_gbs(2**30, 10.0) == pytest.approx(107.3741824)
    assert busbw_gbs("all_reduce", 2**30, 10.0, 8) == pytest.approx(187.9048192)
    # a 4 MiB all-gather (the gathered buffer) in 2 ms on 4 ranks: 2.097152 GB/s, x 3/4
    assert algbw_gbs(4 * 2**20, 2.0) == pytest.approx(2.097152)
    assert busbw_gbs("all_gather", 4 * 2**20, 2.0, 4) == pytest.approx(1.572864)
    assert busbw_gbs("reduce_scatter", 4 * 2**20, 2.0, 4) == pytest.approx(1.572864)
    # broadcast: busbw = algbw; 1 MB in 1 ms = 1.048576 GB/s
    assert busbw_gbs("broadcast", 2**20, 1.0, 8) == pytest.approx(1.048576)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="op='allreduce' is not a choice"):
        bus_factor("allreduce", 2)
    with pytest.raises(ValueError, match="world_size"):
        bus_factor("all_reduce", 0)
    with pytest.raises(ValueError, match="time_ms > 0"):
        algbw_gbs(1024, 0.0)


def test_message_bytes_round_like_nccl_tests():
    assert message_bytes("all_reduce", 1001, 3, 4) == 1000           # whole fp32 elements
    assert message_bytes("all_gather", 1000, 3, 4) == 996            # 250 // 3 * 3 elements
    assert message_bytes("reduce_scatter", 2**20, 8, 2) == 2**20
    assert message_bytes("hierarchical_all_reduce", 4096, 8, 4, ranks_per_node=4) == 4096
    with pytest.raises(ValueError, match="at least 32 bytes"):
        message_bytes("all_gather", 16, 8, 4)


def test_link_bandwidth_per_direction_from_the_specs():
    assert link_gbs("NVIDIA A800-SXM4-80GB")[0] == 200.0   # 400 GB/s total, 200 each way
    assert link_gbs("NVIDIA A100-SXM4-80GB")[0] == 300.0
    assert link_gbs("NVIDIA H100 80GB HBM3")[0] == 450.0
    assert "400 GB/s total, 200 GB/s per direction" in link_gbs("NVIDIA A800-SXM4-80GB")[1]
    assert link_gbs("NVIDIA L40S")[0] is None and "no NVLink" in link_gbs("NVIDIA L40S")[1]
    assert link_gbs("CPU: AMD EPYC")[0] is None


def test_points_are_checked_before_any_process_starts():
    base = {"world_size": 2, "backend": "gloo"}
    check_point("comm", {**base, "op": "all_reduce", "size_bytes": 1024})
    with pytest.raises(ValueError, match="op='allgather' is not a choice"):
        check_point("comm", {**base, "op": "allgather", "size_bytes": 1024})
    with pytest.raises(ValueError, match="size_bytes"):
        check_point("comm", {**base, "op": "all_reduce", "size_bytes": 0})
    with pytest.raises(ValueError, match="ranks_per_node"):
        check_point("comm", {**base, "op": "all_reduce", "size_bytes": 64, "ranks_per_node": 1})
    with pytest.raises(ValueError, match="not parameters"):
        check_point("comm", {**base, "op": "all_reduce", "size_bytes": 64, "hook": "x"})
    with pytest.raises(ValueError, match="hook='int8' is not a choice"):
        check_point("ddp", {**base, "hook": "int8"})
    with pytest.raises(ValueError, match="start_iter=1 must be an int from 2"):
        check_point("ddp", {**base, "hook": "powersgd", "start_iter": 1})


def test_rank_group_arguments():
    with pytest.raises(ValueError, match="world_size"):
        RankGroup("x", world_size=0)
    with pytest.raises(ValueError, match="timeout_s"):
        RankGroup("x", world_size=2, timeout_s=0)
    assert process_state(2**22 + 12345) == "gone"


def test_mps_seen_from_processes_and_pipe(tmp_path):
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "cmdline").write_bytes(b"/usr/bin/nvidia-cuda-mps-control\0-d\0")
    (proc / "self").mkdir()
    pipe = tmp_path / "mps"
    status = mps_status(proc, {"CUDA_MPS_PIPE_DIRECTORY": str(pipe),
                               "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"})
    assert status["control_running"] and status["active_thread_percentage"] == "50"
    text = describe_sharing({"mig": [{"gpu": 0, "name": "A800", "mig_enabled": False}],
                             "mps": status})
    assert "MIG on GPU 0 (A800): off" in text and "MPS: on" in text and "50% of the SMs" in text
    off = mps_status(tmp_path / "none", {"CUDA_MPS_PIPE_DIRECTORY": str(pipe)})
    assert not off["control_running"] and not off["control_pipe_present"]
    pipe.mkdir()
    (pipe / "control").touch()  # a container sees the mounted pipe, not the host's daemon
    assert mps_status(tmp_path / "none", {"CUDA_MPS_PIPE_DIRECTORY": str(pipe)})[
        "control_pipe_present"]
    assert "MPS: off" in describe_sharing({"mig": "no GPU to ask: no driver", "mps": off})


def test_the_chapters_comm_recipes_parse():
    """Every `a800lab comm` command in chapter 08 (plain, under torchrun) is one the CLI takes."""
    import json
    import shlex
    from pathlib import Path

    from a800lab.cli import build_parser
    from a800lab.core.units import parse_size
    from a800lab.workloads.comm.collectives import OPS
    from a800lab.workloads.comm.ddp import HOOKS

    chapter = Path(__file__).resolve().parents[1] / "notebooks" / \
        "08-distributed-communication.ipynb"
    text = "".join("".join(cell["source"]) + "\n"
                   for cell in json.loads(chapter.read_text())["cells"]
                   if cell["cell_type"] == "markdown")
    fenced = "".join(block.split("\n", 1)[1] for block in text.split("```")[1::2])
    commands = [line for line in fenced.replace("\\\n", " ").splitlines()
                if "a800lab comm " in line or "a800lab torchrun " in line]
    assert len(commands) >= 4  # plain collectives and ddp, torchrun, a800lab torchrun
    for line in commands:
        words = shlex.split(line)
        args = build_parser().parse_args(words[words.index("comm"):])
        assert args.command == "comm" and args.out
        assert all(op in OPS for op in getattr(args, "op", None) or [])
        assert all(hook in HOOKS for hook in getattr(args, "hook", None) or [])
        assert all(parse_size(size) > 0 for size in getattr(args, "size", None) or [])


def test_the_timed_all_reduce_is_the_collective_alone(tmp_path, monkeypatch):
    """The check verifies the first call's sum; the timed calls then run all_reduce on a buffer
    zeroed once, with no refill (a memset per call cost a few % of busbw at 1 GiB)."""
    import torch
    import torch.distributed as dist

    from a800lab.workloads.comm.collectives import MIN_REPS, collective_point

    zeroed = []
    real_zero = torch.Tensor.zero_

    def no_fill(*args, **kwargs):
        raise AssertionError("a timed call refilled the buffer")

    def count_zero(self):
        zeroed.append(self.numel())
        return real_zero(self)

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        monkeypatch.setattr(torch.Tensor, "fill_", no_fill)
        monkeypatch.setattr(torch.Tensor, "zero_", count_zero)
        point = collective_point("all_reduce", 2**12, world_size=1, backend="gloo",
                                 budget_s=0.01)
        hier = collective_point("hierarchical_all_reduce", 2**12, world_size=1,
                                backend="gloo", budget_s=0.01)
    finally:
        dist.destroy_process_group()
    # one rank: busbw's factor 2(n-1)/n is 0, algbw still times the call
    assert point["algbw_gbs"] > 0 and len(point["time_ms"]) >= MIN_REPS
    assert hier["algbw_gbs"] > 0
    assert zeroed == [1024, 1024]        # once per point, before timing: 1024 fp32 = 4 KiB
