"""Measured peaks kept per environment, and the tile point's % of them."""

import json
from types import SimpleNamespace

import pytest

from a800lab.core.environment import environment
from a800lab.workloads.peak import measured_peak, record_peaks, roofline_peaks
from a800lab.workloads.tiles.point import tiled_matmul_point


def report(tflops, noisy=None, mem_bw_gbs=10.0):
    return SimpleNamespace(device_name="CPU: test", tflops=tflops, mem_bw_gbs=mem_bw_gbs,
                           size=512, noisy=noisy or {})


def test_peaks_are_kept_per_environment(tmp_path):
    path = tmp_path / "peaks.json"
    env = environment("cpu")
    assert measured_peak(env, "fp32", path) is None  # nothing recorded yet
    record_peaks(report({"fp32": 0.5}), env, path)
    assert measured_peak(env, "fp32", path) == 0.5
    assert measured_peak(env, "bf16", path) is None
    other = {**env, "driver": "999.99"}  # a new driver: measure again
    assert measured_peak(other, "fp32", path) is None
    record_peaks(report({"fp32": 0.7}), env, path)  # a re-measurement replaces the old one
    assert measured_peak(env, "fp32", path) == 0.7


def test_a_noisy_peak_is_never_a_reference(tmp_path):
    path = tmp_path / "peaks.json"
    env = environment("cpu")
    contended = "oversubscribed: 2 torch thread(s) + 1.0 cores busy in other processes"
    record_peaks(report({"fp32": 0.0056}, noisy={"fp32": contended, "copy": contended}), env,
                 path)
    assert not path.exists()  # nothing clean: nothing written
    record_peaks(report({"fp32": 0.18}), env, path)
    record_peaks(report({"fp32": 0.0056}, noisy={"fp32": contended}, mem_bw_gbs=27.0), env,
                 path)
    assert measured_peak(env, "fp32", path) == 0.18  # the clean figure stays
    assert json.loads(path.read_text())[next(iter(json.loads(path.read_text())))][
        "mem_bw_gbs"] == 27.0  # the clean copy figure of the same run is kept


def test_an_unreadable_file_is_named_and_never_overwritten(tmp_path):
    path = tmp_path / "peaks.json"
    path.write_text("[1, 2")
    with pytest.warns(UserWarning, match="peaks.json is not a peaks file"):
        assert measured_peak(environment("cpu"), "fp32", path) is None
    with pytest.raises(ValueError, match="move it away"):
        record_peaks(report({"fp32": 0.5}), environment("cpu"), path)
    assert path.read_text() == "[1, 2"


def test_tile_points_report_the_share_of_a_recorded_peak(tmp_path, monkeypatch):
    path = tmp_path / "peaks.json"
    monkeypatch.setenv("A800LAB_PEAKS", str(path))
    args = dict(m=64, n=64, k=64, backend="cpu_blocked", device="cpu", budget_s=0.01)
    before = tiled_matmul_point(**args)
    assert before["measured_peak_tflops"] is None and before["pct_of_measured_peak"] is None
    path.write_text(json.dumps({}))
    record_peaks(report({"fp32": 2 * before["tflops"]}), environment("cpu"), path)
    after = tiled_matmul_point(**args)
    assert after["measured_peak_tflops"] == 2 * before["tflops"]
    assert after["pct_of_measured_peak"] == pytest.approx(
        100 * after["tflops"] / after["measured_peak_tflops"])


def test_roofline_peaks_use_the_recorded_roofs_and_measure_only_when_missing(tmp_path):
    path = tmp_path / "peaks.json"
    record_peaks(report({"fp32": 0.5}), environment("cpu"), path)
    assert roofline_peaks("cpu", "fp32", path=path) == {
        "peak_tflops": None, "mem_bw_gbs": None,  # a CPU has no datasheet row
        "measured_peak_tflops": 0.5, "measured_bw_gbs": 10.0}
    unrecorded = roofline_peaks("cpu", "fp32", path=tmp_path / "none.json", budget_s=0.02)
    # measured now: a rate, or None when this shared machine made it noisy (then no roof)
    assert unrecorded["measured_peak_tflops"] is None or unrecorded["measured_peak_tflops"] > 0
    assert roofline_peaks("cpu", "fp32", path=tmp_path / "none.json",
                          measure_missing=False)["measured_peak_tflops"] is None
