"""Two reports side by side: reading report.json with errors that name the file, figures as
B / A (missing and non-positive values give no ratio), claim statuses that changed, notes."""

import json
import math

import pytest

from a800lab.report.claims import FAILS, HOLDS, METHOD_ON_CPU, NOT_MEASURED
from a800lab.report.compare import compare_reports, figure_ratio, format_compare, load_report
from a800lab.report.register import REGISTER
from tests.report_fixture import make_gpu_report, make_report


def fig(value, unit="TFLOP/s", label=None):
    return {"label": label or f"value {value}", "value": value, "unit": unit}


def with_figures(figures, **overrides):
    return make_report(figures=figures, **overrides)


# ---- figures -----------------------------------------------------------------------------------
def test_ratio_is_b_over_a_and_keys_follow_a_then_b_extras():
    a = with_figures({"x": fig(2.0), "only_a": fig(1.0), "y": fig(10.0, "x")})
    b = with_figures({"y": fig(4.0, "x"), "x": fig(3.0), "only_b": fig(5.0)})
    rows = compare_reports(a, b)["figures"]
    assert [r["key"] for r in rows] == ["x", "only_a", "y", "only_b"]
    by = {r["key"]: r for r in rows}
    assert by["x"]["ratio"] == pytest.approx(1.5)
    assert by["y"]["ratio"] == pytest.approx(0.4)
    assert (by["x"]["a"], by["x"]["b"], by["x"]["only"]) == (2.0, 3.0, None)
    assert by["only_a"]["only"] == "a" and by["only_a"]["ratio"] is None
    assert by["only_a"]["b"] is None
    assert by["only_b"]["only"] == "b" and by["only_b"]["ratio"] is None
    assert by["only_b"]["a"] is None and by["only_b"]["label"] == "value 5.0"
    assert by["y"]["unit"] == "x"


@pytest.mark.parametrize("a, b", [(0.0, 1.0), (1.0, 0.0), (-2.0, 1.0), (None, 1.0),
                                  (1.0, None), (math.nan, 1.0), (1.0, math.inf), (True, 2.0),
                                  ("3", 1.0)])
def test_missing_or_non_positive_values_give_no_ratio(a, b):
    assert figure_ratio(a, b) is None
    row = compare_reports(with_figures({"k": fig(a)}), with_figures({"k": fig(b)}))["figures"][0]
    assert row["ratio"] is None and row["only"] is None


def test_integers_make_a_ratio_too():
    assert figure_ratio(4, 2) == pytest.approx(0.5)


def test_different_units_give_no_ratio_and_a_note():
    c = compare_reports(with_figures({"k": fig(2.0, "GB/s", "copy")}),
                        with_figures({"k": fig(4.0, "TFLOP/s", "copy")}))
    assert c["figures"][0]["ratio"] is None
    assert any("different units" in n and "copy" in n for n in c["notes"])


# ---- claims ------------------------------------------------------------------------------------
def test_claim_statuses_side_by_side_with_their_scopes():
    c = compare_reports(make_report(), make_gpu_report())
    by = {row["id"]: row for row in c["claims"]}
    assert len(by) == len(REGISTER)
    # a CPU's method beside a GPU's verdict: never a "change", always with both scopes
    shape = by["tile_shape"]
    assert (shape["a_status"], shape["b_status"]) == (METHOD_ON_CPU, HOLDS)
    assert shape["same_scope"] is False and shape["changed"] is False
    assert shape["note"] == "different scopes"
    assert shape["a_scope"].startswith("on this CPU") and "NVIDIA H200" in shape["b_scope"]
    assert by["accum_snippet"]["note"] == "different scopes"
    assert by["max_batch"]["b_noisy"] and not by["max_batch"]["a_noisy"]
    assert by["mp_memory"]["chapter"] == "04" and "40%" in by["mp_memory"]["text"]
    text = format_compare(c)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("tile_shape"))
    assert "[CPU]" in line and "[on this GPU: NVIDIA H200]" in line
    assert "different scopes" in line


def test_the_same_card_twice_flags_what_changed():
    a = make_gpu_report()
    b = make_gpu_report(claims=[{**cl, "status": FAILS, "scope": cl["scope"].replace(
        "cuda:0", "cuda:3")} if cl["id"] == "amp_speed" else cl for cl in a["claims"]])
    by = {row["id"]: row for row in compare_reports(a, b)["claims"]}
    assert by["amp_speed"]["changed"] and by["amp_speed"]["same_scope"]   # another ordinal
    assert not by["tile_shape"]["changed"] and by["tile_shape"]["note"] == ""


def test_a_claim_on_one_side_only_counts_as_changed():
    a = make_report()
    b = make_report(claims=[c for c in a["claims"] if c["id"] != "energy"])
    row = next(r for r in compare_reports(a, b)["claims"] if r["id"] == "energy")
    assert row["a_status"] == NOT_MEASURED and row["b_status"] is None and row["changed"]


# ---- notes and sides ---------------------------------------------------------------------------
def test_cpu_against_gpu_and_an_incomplete_side_are_noted():
    b = make_gpu_report(complete=False, stopped="budget",
                        points={"planned": 40, "measured": 38, "ok": 37, "failed": 1,
                                "not_measured": 2})
    c = compare_reports(make_report(), b, "cpu/", "gpu/")
    assert c["a"]["path"] == "cpu/" and c["b"]["device_name"] == "NVIDIA H200"
    assert c["a"]["scope"] == "CPU fallback" and c["b"]["complete"] is False
    assert any(n.startswith("A is CPU fallback, B is a GPU") for n in c["notes"])
    assert any("B was not complete (38 of 40 points measured, stopped: budget)" in n
               for n in c["notes"])
    assert not any(n.startswith("A was not complete") for n in c["notes"])


def test_same_kind_notes():
    both_cpu = compare_reports(make_report(), make_report())["notes"]
    assert any("both are CPU fallback" in n for n in both_cpu)
    other_gpu = make_gpu_report(device_name="NVIDIA A800-SXM4-80GB", mode="full")
    notes = compare_reports(make_gpu_report(), other_gpu)["notes"]
    assert any("A ran on NVIDIA H200, B on NVIDIA A800-SXM4-80GB" in n for n in notes)
    assert any("A is a quick report, B a full one" in n for n in notes)
    assert not any("kinds of machine" in n for n in notes)


def test_environment_diff_from_the_doctor_reports():
    c = compare_reports(make_report(), make_gpu_report())
    fields = {d["field"] for d in c["env_diff"]["differences"]}
    assert {"mode", "gpu_count", "torch", "driver"} <= fields
    assert "gpu_model" in {d["field"] for d in c["env_diff"]["only_b"]}
    same = compare_reports(make_gpu_report(), make_gpu_report())["env_diff"]
    assert same["differences"] == [] and "gpu_model" in same["same"]


def test_a_report_without_doctor_is_compared_without_environment():
    a = make_report()
    del a["doctor"]
    c = compare_reports(a, make_report())
    assert c["env_diff"] is None
    assert any("A holds no doctor report" in n for n in c["notes"])


def test_format_compare_text():
    a = with_figures({"x": fig(2.0, label="bf16 matmul"), "gone": fig(1.0, label="old one")})
    b = make_gpu_report(figures={"x": fig(3.0, label="bf16 matmul")})
    text = format_compare(compare_reports(a, b, "a-dir", "b-dir"))
    assert text.splitlines()[0].startswith("A: a-dir: AMD EPYC 7B13 (2 cores) (CPU fallback)")
    line = next(ln for ln in text.splitlines() if "bf16 matmul" in ln)
    assert "1.50x" in line and "2" in line and "3" in line
    assert "only in A" in next(ln for ln in text.splitlines() if "old one" in ln)
    assert "different scopes" in next(ln for ln in text.splitlines()
                                      if ln.strip().startswith("tf32_speed"))
    assert "Environment differences" in text and "NVIDIA driver" in text
    assert "Recorded only in B" in text


# ---- load_report -------------------------------------------------------------------------------
def write(path, data):
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_load_report_from_a_directory_or_the_file(tmp_path):
    report = make_report()
    write(tmp_path / "report.json", report)
    assert load_report(tmp_path) == report
    assert load_report(str(tmp_path / "report.json")) == report


def test_missing_directory_names_it_and_what_to_run(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError, match="python -m a800lab report --out") as err:
        load_report(missing)
    assert str(missing) in str(err.value)


def test_directory_without_report_json(tmp_path):
    with pytest.raises(ValueError, match="has no report.json") as err:
        load_report(tmp_path)
    assert str(tmp_path) in str(err.value)
    (tmp_path / "points.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="interrupted.*run the same command again"):
        load_report(tmp_path)


def test_corrupt_json_names_file_and_line(tmp_path):
    file = write(tmp_path / "report.json", '{\n "kind": "a800lab-report",\n "mode": \n')
    with pytest.raises(ValueError, match=r"not valid JSON \(line \d+") as err:
        load_report(tmp_path)
    assert str(file) in str(err.value)


@pytest.mark.parametrize("data, message", [
    ([1, 2], "JSON list, not a report"),
    ({"kind": "something-else", "report_version": 1}, "kind 'something-else' is not"),
    ({"report_version": 1}, "kind None is not"),
    ({"system": {}, "gpus": []}, "doctor report"),
    ({"kind": "a800lab-report", "report_version": 4}, "report_version 4 is unknown"),
    ({"kind": "a800lab-report"}, "report_version None is unknown"),
])
def test_wrong_content_is_refused_with_the_path(tmp_path, data, message):
    file = write(tmp_path / "r.json", data)
    with pytest.raises(ValueError, match=message) as err:
        load_report(file)
    assert str(file) in str(err.value)
