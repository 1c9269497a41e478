"""The input pipeline: its overlap measurement with a fake clock, real loader runs on CPU, the
placement comparison's byte counting, and the CUDA-streams demonstration (GPU only)."""

import pytest
import torch

from a800lab.workloads.pipeline import covered_length, idle_fraction, pipeline_point, run_pipeline
from a800lab.workloads.placement import Crossings, placement_point
from a800lab.workloads.streams import stream_overlap, why_no_streams


class FakeClock:
    """Seconds that pass only when a stage says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float):
        self.now += seconds


def fake_run(load_s: float, copy_s: float = 0.0005, compute_s: float = 0.001):
    clock = FakeClock()
    return run_pipeline(lambda: clock.spend(load_s), lambda batch: clock.spend(copy_s),
                        lambda moved: clock.spend(compute_s), clock=clock, budget_s=0.05,
                        min_warmup=2)


def test_a_starved_step_is_idle_while_it_waits_for_data():
    run = fake_run(load_s=0.003)  # 3 ms loading, 0.5 ms copy, 1 ms compute, one after another
    assert run.timing.samples_ms == pytest.approx([4.5] * len(run.timing.samples_ms))
    assert run.idle_fraction == pytest.approx(1 - 1.0 / 4.5)
    assert run.lane_ms("data wait") == pytest.approx(3.0)
    assert run.lane_ms("compute") == pytest.approx(1.0)
    assert len(run.timing.samples_ms) == round(0.05 / 0.0045)  # the budget over the step time
    assert min(step for _, step, _, _ in run.spans) == run.timing.warmup  # warm-up left out


def test_a_prefetched_batch_leaves_only_the_copy_idle():
    run = fake_run(load_s=0.0)  # workers had the batch ready: no waiting
    assert run.idle_fraction == pytest.approx(0.5 / 1.5)


def test_overlapping_intervals_are_counted_once():
    assert covered_length([(0, 2), (1, 3), (5, 6)]) == 4
    assert covered_length([(0, 10), (2, 3)]) == 10
    assert covered_length([]) == 0
    spans = [("compute", 0, 1.0, 2.0), ("compute", 1, 1.5, 2.5), ("data wait", 0, 0.0, 1.0)]
    assert idle_fraction(spans, "compute", (0.0, 4.0)) == pytest.approx(1 - 1.5 / 4)
    assert idle_fraction(spans, "compute", (2.0, 3.0)) == pytest.approx(0.5)  # clipped
    with pytest.raises(ValueError, match="empty window"):
        idle_fraction(spans, "compute", (1.0, 1.0))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_real_loader_on_cpu(workers):
    result = pipeline_point(num_workers=workers, preprocess_ms=0.2, cost="wait", batch_size=16,
                            budget_s=0.1, device="cpu")
    assert result["throughput"] > 0 and result["throughput_unit"] == "samples/s"
    assert 0 <= result["idle_fraction"] < 1
    assert result["device_stage"].startswith("CPU")
    lanes = {lane for lane, _, _ in result["timeline"]}
    assert {"data wait", "copy", "compute"} <= lanes
    made_by = {"worker 0", "worker 1"} if workers else {"preprocess (main process)"}
    assert made_by <= lanes
    # 16 samples x 0.2 ms of waiting: the main process waits at least that long for a batch
    if not workers:
        assert result["data_wait_ms"] >= 16 * 0.2


def test_pinned_memory_without_a_gpu_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="pinned memory and non_blocking copies need a CUDA"):
        pipeline_point(pin_memory=True, device="cpu")
    with pytest.raises(ValueError, match="cost="):
        pipeline_point(cost="gpu", device="cpu")
    with pytest.raises(ValueError, match="num_workers"):
        pipeline_point(num_workers=-1, device="cpu")


def test_bytes_crossing_are_counted_as_they_cross():
    crossings = Crossings()
    moved = crossings.move(torch.ones(10), "meta")  # another device: 10 fp32 values cross
    assert moved.device.type == "meta" and crossings.bytes == 40
    crossings.move(torch.ones(10), "cpu")  # already there: nothing crosses
    assert crossings.bytes == 40
    pooled = torch.ones(3, requires_grad=True) * 2
    crossings.count_gradient(pooled, "meta")  # its gradient will come back from the device
    pooled.sum().backward()
    assert crossings.bytes == 40 + 12


def test_placement_on_a_cpu_moves_nothing():
    for placement in ("all_on_device", "embedding_on_cpu"):
        result = placement_point(placement, num_rows=10_000, dim=8, batch_size=64,
                                 budget_s=0.05, device="cpu")
        assert result["crossing_bytes_per_step"] == 0 and result["throughput"] > 0
    with pytest.raises(ValueError, match="placement="):
        placement_point("on_the_moon", device="cpu")


def test_streams_need_a_gpu():
    assert "CUDA streams need an NVIDIA GPU" in why_no_streams("cpu")
    with pytest.raises(ValueError, match="no copy engine"):
        stream_overlap(device="cpu")


@pytest.mark.gpu
def test_pinned_non_blocking_pipeline_on_a_gpu():
    result = pipeline_point(num_workers=2, pin_memory=True, non_blocking=True,
                            preprocess_ms=0.05, batch_size=64, budget_s=0.2, device="cuda")
    lanes = {lane for lane, _, _ in result["timeline"]}
    assert {"copy (GPU)", "compute (GPU)", "worker 0"} <= lanes
    assert 0 <= result["idle_fraction"] < 1 and result["copy_ms"] > 0


@pytest.mark.gpu
def test_copy_hides_behind_compute_on_two_streams():
    result = stream_overlap(copy_mb=64, matmul_size=2048, pinned=True, device="cuda")
    assert result["overlapped_ms"] < result["serial_ms"]
    assert result["overlap_share"] > 0.3


@pytest.mark.gpu
def test_embedding_on_cpu_sends_pooled_vectors_both_ways():
    result = placement_point("embedding_on_cpu", num_rows=100_000, dim=16, batch_size=256,
                             budget_s=0.05, device="cuda")
    # indices and offsets stay on the CPU; pooled (256 x 16 fp32) goes, its gradient returns,
    # and the labels (256 fp32) go
    assert result["crossing_bytes_per_step"] == 2 * 256 * 16 * 4 + 256 * 4
    assert result["table_bytes_on_device"] == 0


def test_pipeline_panel_runs_headless_and_says_what_a_cpu_means(tmp_path):
    from a800lab.widgets import PipelineExplorer

    panel = PipelineExplorer(device="cpu", budget_s=0.05, recorded_dir=tmp_path)
    assert panel.params["pin_memory"].value is False  # fixed off without a GPU
    assert any("device stage (the training step) runs on the CPU" in getattr(w, "value", "")
               for w in panel.widget.children)
    assert panel.run(wait=True, num_workers=[0, 2], cost="wait", preprocess_ms=0.1,
                     batch_size=16)
    assert panel.status_text.startswith("Done: 2 points (2 ok)"), panel.status_text
    df = panel.results
    assert list(df["num_workers"]) == [0, 2] and df["idle_fraction"].between(0, 1).all()
    titles = [ax.get_title() for ax in panel.figure.axes]
    assert any(t.startswith("timeline of the newest point (num_workers=2") for t in titles)
    assert "CPU fallback" in panel.figure._suptitle.get_text()
    assert "<th>device idle (%)</th>" in panel.table.value  # idle_fraction, with its unit
