"""Result records and the JSON Lines store: round trip, torn lines, bad files."""

import json
import math

import pytest

from a800lab.core.results import (
    SCHEMA_VERSION,
    Record,
    append_record,
    load_results,
    new_run_id,
    param_column,
    read_records,
    records_to_frame,
)


def ok_record(m=256, throughput=1.5, **kw):
    return Record(workload="matmul", params={"m": m, "precision": "fp32"}, outcome="ok",
                  throughput=throughput, throughput_unit="TFLOP/s", time_ms=(1.0, 2.0, 3.0),
                  metrics={"rel_error": 1e-7}, memory={"peak_allocated_bytes": 1024},
                  env={"device_name": "NVIDIA H200", "fingerprint": "abc"}, **kw)


def test_round_trip_to_frame(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record(path, ok_record(256))
    append_record(path, Record(workload="matmul", params={"m": 512, "precision": "fp32"},
                               outcome="oom", message="CUDA out of memory",
                               env={"device_name": "NVIDIA H200"}))
    df = load_results(path)
    assert list(df["m"]) == [256, 512]
    assert list(df["outcome"]) == ["ok", "oom"]
    assert df.loc[0, "throughput"] == 1.5 and math.isnan(df.loc[1, "throughput"])
    assert df.loc[0, "median_ms"] == 2.0 and df.loc[0, "iqr_ms"] == 1.0
    assert df.loc[0, "time_ms"] == [1.0, 2.0, 3.0]
    assert df.loc[0, "rel_error"] == 1e-7
    assert df.loc[0, "peak_allocated_bytes"] == 1024
    assert df.loc[0, "label"] == "NVIDIA H200" and df.loc[0, "device_name"] == "NVIDIA H200"
    assert read_records(path)[1].message == "CUDA out of memory"


def test_each_record_is_one_complete_line(tmp_path):
    path = tmp_path / "runs.jsonl"
    for m in (1, 2, 3):
        append_record(path, ok_record(m))
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    assert json.loads(lines[2])["params"]["m"] == 3
    assert json.loads(lines[0])["schema_version"] == SCHEMA_VERSION


def test_torn_last_line_is_skipped_with_warning(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record(path, ok_record(1))
    with open(path, "a") as f:
        f.write(ok_record(2).to_json()[:40])  # writer killed mid-line
    with pytest.warns(UserWarning, match="torn last line"):
        records = read_records(path)
    assert [r.params["m"] for r in records] == [1]


def test_append_after_torn_line_cuts_the_fragment(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record(path, ok_record(1))
    with open(path, "a") as f:
        f.write('{"workload": "matm')
    with pytest.warns(UserWarning, match="dropping a torn last line"):
        append_record(path, ok_record(3))
    assert [r.params["m"] for r in read_records(path)] == [1, 3]


def test_malformed_middle_line_names_file_and_line(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text(ok_record(1).to_json() + "\n{not json\n" + ok_record(2).to_json() + "\n")
    with pytest.raises(ValueError, match=r"runs.jsonl:2: malformed"):
        read_records(path)


def test_other_schema_version_is_refused(tmp_path):
    path = tmp_path / "runs.jsonl"
    d = json.loads(ok_record(1).to_json())
    d["schema_version"] = 99
    path.write_text(json.dumps(d) + "\n")
    with pytest.raises(ValueError, match=r"runs.jsonl:1: .*schema_version 99"):
        load_results(path)


def test_directory_path_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        append_record(tmp_path, ok_record())
    with pytest.raises(FileNotFoundError, match="no results file"):
        load_results(tmp_path / "nope.jsonl")


def test_record_validation():
    with pytest.raises(ValueError, match="positive finite throughput"):
        Record(workload="w", params={}, outcome="ok", throughput=0)
    with pytest.raises(ValueError, match="outcome 'fine'"):
        Record(workload="w", params={}, outcome="fine")
    with pytest.raises(ValueError, match="reserved"):
        Record(workload="w", params={"outcome": 1}, outcome="error")
    with pytest.raises(ValueError, match="reserved"):  # a metric may not pose as the record's
        Record(workload="w", params={}, metrics={"label": "x"}, outcome="error")
    # a parameter may: the frame keeps both, the parameter as param.<name>
    rec = Record(workload="w", params={"mode": "fast", "label": "a"}, outcome="error")
    df = records_to_frame([rec])
    assert df.loc[0, "param.mode"] == "fast" and df.loc[0, "param.label"] == "a"
    assert df.loc[0, "label"] == "unknown device" and param_column("n") == "n"
    with pytest.raises(ValueError, match="both a parameter and a metric"):
        Record(workload="w", params={"x": 1}, metrics={"x": 2}, outcome="error")
    with pytest.raises(ValueError, match="not storable"):
        Record(workload="w", params={"x": object()}, outcome="error")


def test_non_finite_metrics_are_stored_as_null(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record(path, Record(workload="w", params={"x": 1}, outcome="wrong",
                               metrics={"rel_error": float("nan")}))
    assert read_records(path)[0].metrics["rel_error"] is None


def test_a_complete_last_line_without_newline_is_kept_when_appending(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record(path, ok_record(8))
    append_record(path, ok_record(16))
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # an editor dropped the final newline
    assert [r.params["m"] for r in read_records(path)] == [8, 16]  # resume counts it as done
    append_record(path, ok_record(24))
    assert [r.params["m"] for r in read_records(path)] == [8, 16, 24]
    assert path.read_text().count("\n") == 3


@pytest.mark.parametrize("line", ["[1, 2]", '"text"', "42", "null"])
def test_a_line_that_is_not_an_object_names_file_and_line(tmp_path, line):
    path = tmp_path / "runs.jsonl"
    path.write_text(ok_record(1).to_json() + "\n" + line + "\n")
    with pytest.raises(ValueError, match=r"runs.jsonl:2: malformed result record: expected a "
                                         r"JSON object"):
        read_records(path)


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_bytes(ok_record(1).to_json().encode() + b"\n\xff\xfe binary\n")
    with pytest.raises(ValueError, match=r"runs.jsonl:2: not UTF-8 text"):
        read_records(path)


@pytest.mark.parametrize("field, value", [("time_ms", 3.5), ("time_ms", ["a"]),
                                          ("memory", [1]), ("params", "m=1"),
                                          ("memory", {"peak_allocated_bytes": "x"})])
def test_a_record_with_wrongly_typed_fields_is_refused_on_load(tmp_path, field, value):
    d = json.loads(ok_record(1).to_json())
    d[field] = value
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(d) + "\n")
    with pytest.raises(ValueError, match=rf"runs.jsonl:1: malformed result record: .*{field}"):
        read_records(path)


def test_schema_1_files_still_load(tmp_path):
    d = json.loads(ok_record(1).to_json())
    for new_field in ("run_id", "noise", "conditions"):
        del d[new_field]
    d["schema_version"] = 1
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(d) + "\n")
    df = load_results(path)
    assert df.loc[0, "run_id"] == "" and not df.loc[0, "noisy"]
    assert math.isnan(df.loc[0, "torch_threads"])


def test_frame_has_run_noise_and_thread_columns():
    record = ok_record(1, run_id="r1", noise={"noisy": True, "iqr_ms": 1.0,
                                              "reasons": ["spread", "oversubscribed"]},
                       conditions={"torch_threads": 2})
    df = records_to_frame([record, ok_record(2)])
    assert list(df["run_id"]) == ["r1", ""] and list(df["noisy"]) == [True, False]
    assert df.loc[0, "noise_reason"] == "spread; oversubscribed"
    assert df.loc[0, "torch_threads"] == 2


def test_run_ids_sort_by_start_time():
    import time

    first = new_run_id()
    time.sleep(0.002)
    assert new_run_id() > first


def test_a_measurement_keeps_its_identity_through_a_file(tmp_path):
    path = tmp_path / "runs.jsonl"
    first, second = ok_record(1, run_id="r1"), ok_record(1, run_id="r2")
    for record in (first, second):
        append_record(path, record)
    assert [r.measurement_key() for r in read_records(path)] == [first.measurement_key(),
                                                                 second.measurement_key()]
    assert first.point_key() == second.point_key()  # the same grid point, two measurements
    assert first.measurement_key() != second.measurement_key()
