"""GPU-path defects caught on a CPU, with stand-ins that behave like torch.cuda where it
matters (the current device decides where a launch or an event goes): the tile kernel and the
pipeline's events on the tensors' device, 2:4 sparsity's back end by torch's rule, cuBLAS's
workspace outside the first point's memory, and the L2 flush no longer hiding a slow launch."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from a800lab.core import timing as timing_mod
from a800lab.core.timing import _time_cuda, guard_cycles_for
from a800lab.core.window import PointWindow
from a800lab.workloads import pipeline as pipeline_mod
from a800lab.workloads import sparsity
from a800lab.workloads.matmul import MatmulSpec
from tests.fake_probe import FakeProbe

MIB = 2**20


class CurrentDevice:
    """torch.cuda's current-device state: `device(d)` makes d current inside a with block."""

    def __init__(self):
        self.index = 0

    @contextlib.contextmanager
    def device(self, device):
        saved, self.index = self.index, torch.device(device).index or 0
        try:
            yield
        finally:
            self.index = saved


@pytest.fixture
def cuda(monkeypatch):
    state = CurrentDevice()
    monkeypatch.setattr(torch.cuda, "device", state.device)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(multi_processor_count=4))
    return state


def test_the_tile_kernel_launches_on_the_tensors_device(cuda, monkeypatch):
    pytest.importorskip("triton")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from a800lab.workloads.tiles import kernel

    launched = []

    class Kernel:  # what Triton does: launch on the *current* device
        arg_names = ()

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append((cuda.index, args[0].device))

    monkeypatch.setattr(kernel, "tile_matmul_kernel", Kernel())
    spec = MatmulSpec(64, 64, 64, "fp16", "triton", block_m=32, block_n=32, block_k=32)
    with FakeTensorMode(allow_non_fake_inputs=True):
        a = torch.empty(64, 64, dtype=torch.float16, device="cuda:1")
        kernel.launch_tile_matmul(a, a, spec)
    assert launched == [(1, torch.device("cuda:1"))]
    assert cuda.index == 0  # restored


def test_the_pipelines_events_are_recorded_on_its_device(cuda, monkeypatch):
    recorded = []

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self, stream=None):
            recorded.append(cuda.index)

        def elapsed_time(self, end):
            return 1.0

    def measure(step, *, device, clock, min_warmup, **_):
        for _ in range(min_warmup + 2):
            step()
        return timing_mod.Timing(samples_ms=(1.0, 1.0), warmup=min_warmup, device=device)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(pipeline_mod, "measure", measure)
    run = pipeline_mod.run_pipeline(lambda: None, lambda batch: batch, lambda moved: None,
                                    device="cuda:1", min_warmup=1)
    assert recorded and set(recorded) == {1}  # the reference and every mark: cuda:1's
    assert run.compute_lane == "compute (GPU)"


def test_sparsitys_back_end_follows_torchs_rule(monkeypatch):
    from torch.sparse import SparseSemiStructuredTensor

    monkeypatch.setattr(torch.backends.cusparselt, "is_available", lambda: False)
    monkeypatch.setattr(SparseSemiStructuredTensor, "_FORCE_CUTLASS", False)
    assert sparsity.backend_name() == "cusparselt"  # torch does not fall back by itself
    reason = sparsity.sparsity_unsupported_reason(4096, 4096, "fp16", "cuda", (8, 0))
    assert "cuSPARSELt, is not in this torch build" in reason
    monkeypatch.setattr(SparseSemiStructuredTensor, "_FORCE_CUTLASS", True)
    assert sparsity.backend_name() == "cutlass"
    assert sparsity.sparsity_unsupported_reason(4096, 4096, "fp16", "cuda", (8, 0)) == ""
    hopper = sparsity.sparsity_unsupported_reason(4096, 4096, "fp16", "cuda", (9, 0))
    assert "built for sm_8x" in hopper and "cannot be tested here" in hopper


class WorkspaceProbe(FakeProbe):
    """A CUDA device where the first matmul of the process makes a lasting 32 MiB workspace."""

    device = "cuda:0"
    on_cuda = True

    def __init__(self):
        super().__init__(100 * MIB)
        self.workspace = False

    def first_matmul(self):
        if not self.workspace:
            self.workspace = True
            self.alloc(32 * MIB)

    def warm(self):
        self.first_matmul()


def test_cublas_is_warmed_before_the_first_points_baseline(monkeypatch):
    monkeypatch.setattr("a800lab.core.window.read_memory", lambda device: {})
    probe = WorkspaceProbe()
    with PointWindow("cuda:0", probe=probe) as window:
        probe.first_matmul()           # the point's product: cuBLAS exists already
        probe.live += 8 * MIB          # its operands
        probe.peak = max(probe.peak, probe.live)
    assert window.memory()["peak_allocated_bytes"] == 8 * MIB  # not 40 MiB


def test_a_slow_launch_gets_a_gpu_spin_after_the_flush():
    # an H200 flushes 256 MiB in ~0.055 ms; a 0.2 ms Python dispatch would leak ~0.15 ms
    assert guard_cycles_for(0.01, 0.055, 1.98e6) == 0          # the flush covers it
    cycles = guard_cycles_for(0.2, 0.055, 1.98e6)             # 2 x 0.2 + 0.02 - 0.055 ms
    assert cycles == int((0.42 - 0.055) * 1.98e6)

    log = []

    class Cuda:
        def device(self, device):
            return contextlib.nullcontext()

        def Event(self, enable_timing=False):  # noqa: N802 - torch's name
            class Event:
                def record(self):
                    log.append("record")

                def elapsed_time(self, end):
                    return 1.0
            return Event()

        def _sleep(self, cycles):
            log.append(f"spin {cycles}")

        def synchronize(self, device=None):
            log.append("sync")

    class Flush:
        def zero_(self):
            log.append("flush")

    _time_cuda(lambda: log.append("fn"), "cuda:0", 1, Flush(), None, cuda=Cuda(),
               guard_cycles=cycles)
    assert log == ["flush", f"spin {cycles}", "record", "fn", "record", "sync"]
