"""Profiling a step: the trace analysis on a GPU-shaped trace worked out by hand, and a real
profile of a CPU step with its trace file."""

import dataclasses
import json

import pytest

from a800lab.figures.training_profile import profile_figure
from a800lab.workloads.training.profile import ProfileReport, profile_step
from a800lab.workloads.training.spec import TrainSpec
from a800lab.workloads.training.trace import analyse_trace, classify_device, self_segments

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def span(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


# Two steps of 100 us on the host (kineto's categories and names as torch.profiler writes them)
GPU_TRACE = {"traceEvents": [
    span("user_annotation", "a800lab step 0", 0, 100),
    span("user_annotation", "a800lab step 1", 100, 100),
    span("cpu_op", "aten::mm", 5, 10), span("cpu_op", "aten::add", 20, 5),
    span("cpu_op", "aten::copy_", 30, 10), span("cpu_op", "aten::mm", 105, 10),
    span("cuda_runtime", "cudaLaunchKernel", 8, 2, correlation=1),
    span("cuda_runtime", "cudaLaunchKernel", 22, 2, correlation=2),
    span("cuda_runtime", "cudaMemcpyAsync", 32, 3, correlation=3),
    span("cuda_runtime", "cudaLaunchKernel", 108, 2, correlation=4),
    span("cuda_runtime", "cudaStreamSynchronize", 150, 40, correlation=5),
    span("cuda_runtime", "cudaMemcpyAsync", 155, 1, correlation=6),
    span("kernel", "ampere_sgemm_128x64_nn", 12, 30, tid=7, correlation=1, stream=7),
    span("kernel", "void at::native::vectorized_elementwise_kernel<4>", 42, 8, tid=7,
         correlation=2, stream=7),
    span("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 50, 10, tid=7, correlation=3,
         stream=7),
    span("kernel", "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n", 112, 20, tid=7, correlation=4,
         stream=7),
    span("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 120, 30, tid=20, stream=20),
    span("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 160, 5, tid=7, correlation=6,
         stream=7),
    span("gpu_memset", "Memset (Device)", 170, 2, tid=7, stream=7),
]}


def test_device_time_is_split_by_category_exactly():
    b = analyse_trace(GPU_TRACE, on_cuda=True, steps=2)
    # per step, in ms: the 200 us window over 2 steps; matmul owns the 12 us it shares with
    # the all-reduce (priority), which leaves communication 18 us
    assert b.window_ms == pytest.approx(0.1)
    assert b.categories_ms == pytest.approx({
        "matmul/conv": 0.025, "other compute": 0.004, "copy H2D": 0.005, "copy D2H": 0.0025,
        "copy on device": 0.001, "communication": 0.009, "idle": 0.0535})
    assert sum(b.categories_ms.values()) == pytest.approx(b.window_ms)
    assert b.overlap_ms == pytest.approx(0.006)
    assert b.busy_pct == pytest.approx(46.5)


def test_the_host_side_launch_gaps_and_sync():
    b = analyse_trace(GPU_TRACE, on_cuda=True, steps=2)
    # idle until each of the gemms and the D2H copy was launched (12 + 52 + 10 us); the memset
    # gap has no launch on record and is not counted
    assert b.launch_wait_ms == pytest.approx(0.037)
    assert b.launch_api_ms == pytest.approx(0.003) and b.launches == 1.5
    assert b.sync_wait_ms == pytest.approx(0.02)
    assert b.host_ops_ms == pytest.approx(0.0175)


def test_top_ops_are_named_by_the_op_that_launched_their_kernels():
    top = analyse_trace(GPU_TRACE, on_cuda=True, steps=2).top_ops
    assert [t["name"] for t in top[:4]] == ["aten::mm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                                            "aten::copy_", "aten::add"]
    assert top[0]["self_ms"] == pytest.approx(0.025) and top[0]["calls"] == 1
    assert top[0]["share_pct"] == pytest.approx(100 * 50 / 105)


def test_kernels_are_classified_by_what_they_do():
    assert classify_device({"cat": "kernel", "name": "flash_fwd_kernel<...>"}) == "matmul/conv"
    assert classify_device({"cat": "kernel", "name": "triton_poi_fused_add_0"}) == \
        "other compute"
    assert classify_device({"cat": "kernel", "name": "triton_tem_fused_mm_1"}) == "matmul/conv"
    hopper_gemm = "nvjet_hsh_192x192_64x3_2x1_v_bz_coopB_NTN"  # cuBLAS on an H100/H200
    assert classify_device({"cat": "kernel", "name": hopper_gemm}) == "matmul/conv"
    assert classify_device({"cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)"}) == \
        "copy on device"


def _report(breakdown, device="cuda:0"):
    return ProfileReport(spec=TrainSpec().to_dict(), device=device, device_name="test",
                         mode="GPU", torch_threads=1, steps=2, warmup_steps=1, step_ms=0.09,
                         step_iqr_ms=0.001, effective_batch=32, breakdown=breakdown,
                         trace_path="trace.json")


def test_a_device_waiting_for_launches_is_called_launch_bound():
    report = _report(analyse_trace(GPU_TRACE, on_cuda=True, steps=2))
    assert report.launch_bound and report.bound == "launch-bound"
    assert report.verdict.startswith("launch-bound: the device sat idle 0.037 ms of a 0.1 ms "
                                     "step (37%)")


def test_self_time_of_nested_ops():
    ops = [span("cpu_op", "aten::linear", 0, 10), span("cpu_op", "aten::addmm", 2, 6),
           span("cpu_op", "aten::copy_", 3, 1), span("cpu_op", "aten::relu", 12, 2)]
    got = {(s.name, s.start_us, s.end_us) for s in self_segments(ops)}
    assert got == {("aten::linear", 0, 2), ("aten::addmm", 2, 3), ("aten::copy_", 3, 4),
                   ("aten::addmm", 4, 8), ("aten::linear", 8, 10), ("aten::relu", 12, 14)}


def test_a_cpu_step_profiled_for_real(tmp_path):
    report = profile_step(TrainSpec(model="mlp", batch_size=8), steps=2, warmup_steps=1,
                          timing_budget_s=0.05, out=tmp_path)
    b = report.breakdown
    assert report.mode == "CPU fallback" and not report.on_cuda
    assert report.launch_bound is None and b.launch_wait_ms is None
    assert sum(b.categories_ms.values()) == pytest.approx(b.window_ms)
    assert b.categories_ms["matmul/conv"] > 0 and 0 < report.busy_pct <= 100
    assert {"aten::mm", "aten::addmm"} & {t["name"] for t in b.top_ops}
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert any(e.get("name") == "a800lab step 1" for e in trace["traceEvents"])
    saved = json.loads((tmp_path / "profile.json").read_text())
    assert saved["bound"] == report.bound and saved["trace_path"] == str(tmp_path / "trace.json")
    assert "CPU mode (no device)" in report.summary()
    assert report.summary().startswith("mlp (tiny), micro-batch 8 x 1")
    yours = dataclasses.replace(report, spec={**report.spec, "model": "custom", "size": "custom"})
    assert yours.summary().startswith("your model, micro-batch 8")  # not "custom (custom)"
    figure = profile_figure([report, report])
    gids = {a.get_gid() for ax in figure.axes for a in [*ax.patches, *ax.collections]}
    assert "bar:matmul/conv" in gids and "timeline:matmul/conv" in gids


def test_a_trace_without_annotated_steps_is_refused():
    with pytest.raises(ValueError, match="no 'a800lab step N' ranges"):
        analyse_trace({"traceEvents": []}, on_cuda=False)
