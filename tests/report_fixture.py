"""Synthetic `a800lab report` results (report.json dicts) for tests of the HTML and the
comparison, shaped as the report runner writes them.

    from tests.report_fixture import make_report
    cpu = make_report()                        # a complete quick CPU fallback report
    gpu = make_report(gpu=True)                # a quick report on 2 H200s, cuda:1 flagged slow
    make_report(complete=False, stopped="budget")   # top-level keys replaced (a deep copy)

The claims are real Verdicts of every register entry (a800lab.report.register.REGISTER order),
the doctor reports are JSON-shaped like build_report's (not-available values as
{"available": false, ...}).
"""

from __future__ import annotations

import copy

from a800lab.report.claims import (
    FAILED,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    METHOD_ON_CPU,
    NOT_MEASURABLE,
    NOT_MEASURED,
    UNTESTABLE,
    Verdict,
    figure,
)
from a800lab.report.register import REGISTER
from a800lab.report.rules import thresholds


def _na(reason: str) -> dict:
    return {"available": False, "reason": reason}


CPU_MODEL = "AMD EPYC 7B13"
H200 = "NVIDIA H200"


def _cpu_doctor() -> dict:
    no_driver = _na("no NVIDIA driver: nvmlInit failed (Driver Not Loaded)")
    system = {"driver_version": no_driver, "cuda_driver_version": no_driver,
              "torch_version": "2.5.1+cpu",
              "torch_cuda_version": _na("torch 2.5.1+cpu is a CPU-only build"),
              "cudnn_version": _na("torch has no cuDNN"),
              "nccl_version": _na("this torch build has no NCCL"),
              "torch_cuda_usable": _na("torch 2.5.1+cpu is a CPU-only build"),
              "matmul_fp32_precision": "ieee", "conv_fp32_precision": "tf32",
              "tf32_api": "fp32_precision"}
    cpu = {"model": CPU_MODEL, "logical_cores": 2, "physical_cores": 2, "numa_nodes": 1,
           "memory_total_bytes": 8 * 2**30, "torch_threads": 2, "isa": "AVX2"}
    why = "no NVIDIA driver: nvmlInit failed (Driver Not Loaded)"
    return {"system": system, "cpu": cpu, "gpu_found": False, "no_gpu_reason": why, "gpus": [],
            "topology": None,
            "advice": [f"No NVIDIA GPU found: {why}. The lab runs in CPU fallback mode (small "
                       "sizes, CPU timings)."]}


def _gpu(index: int) -> dict:
    return {"index": index, "cuda_index": index, "name": H200,
            "uuid": f"GPU-h200fake-{index:04d}", "pci_bus_id": f"0000:{7 + 8 * index:02x}:00.0",
            "compute_capability": "9.0", "sm_count": 132, "memory_total_bytes": 150754820096,
            "memory_free_bytes": 150750625792, "ecc_enabled": True,
            "ecc_errors": {"volatile_corrected": 0, "volatile_uncorrected": 0,
                           "aggregate_corrected": 0, "aggregate_uncorrected": 0},
            "mig_enabled": False, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980,
            "mem_clock_mhz": 3201, "mem_clock_max_mhz": 3201, "power_w": 120.0,
            "power_source": "instant", "power_limit_w": 700.0, "temperature_c": 35,
            "throttle_reasons": [], "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16,
            "pcie_width_max": 16, "nvlink_active_links": 18, "nvlink_remote_types": ["switch"] * 18,
            "nvlink_remote_bus_ids": ["0000:c1:00.0"] * 18, "cpu_affinity": "0-47",
            "numa_node": 0}


def _gpu_doctor() -> dict:
    system = {"driver_version": "550.54.15", "cuda_driver_version": "12.4",
              "torch_version": "2.5.1+cu124", "torch_cuda_version": "12.4",
              "cudnn_version": 90100, "nccl_version": "2.21.5", "torch_cuda_usable": True,
              "matmul_fp32_precision": "ieee", "conv_fp32_precision": "tf32",
              "tf32_api": "fp32_precision"}
    cpu = {"model": "Intel(R) Xeon(R) Platinum 8480+", "logical_cores": 96, "physical_cores": 48,
           "numa_nodes": 1, "memory_total_bytes": 512 * 2**30, "torch_threads": 48, "isa": "AVX512"}
    topology = {"labels": ["GPU0", "GPU1"], "matrix": [["X", "NV18"], ["NV18", "X"]],
                "cpu_affinity": ["0-47", "0-47"], "numa_node": [0, 0],
                "nvlink_peers": [[0, 18], [18, 0]], "nvswitch_links": [18, 18],
                "nvlink_unknown_links": [0, 0], "legend": {}}
    advice = ["TF32 is off for float32 matmuls although GPU(s) 0,1 have TF32 TensorCores: "
              "float32 matmuls run several times slower."]
    return {"system": system, "cpu": cpu, "gpu_found": True, "no_gpu_reason": "",
            "gpus": [_gpu(0), _gpu(1)], "topology": topology, "advice": advice}


def _environment(gpu: bool) -> dict:
    if gpu:
        return {"python": "3.11.9", "platform": "Linux-5.15", "hostname": "gpu-box",
                "torch": "2.5.1+cu124", "cuda": "12.4", "cudnn": 90100, "nccl": "2.21.5",
                "driver": "550.54.15", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
                "device_count": 2, "device": "cuda:0", "device_name": H200, "mode": "GPU",
                "matmul_fp32_precision": "ieee", "conv_fp32_precision": "tf32",
                "fingerprint": "bbbbbbbbbbbb"}
    return {"python": "3.11.7", "platform": "Linux-6.1", "hostname": "laptop", "torch": "2.5.1+cpu",
            "cuda": None, "cudnn": None, "nccl": None, "driver": None, "cpu_model": CPU_MODEL,
            "device_count": 0, "device": "cpu", "device_name": f"CPU: {CPU_MODEL}",
            "mode": "CPU fallback", "matmul_fp32_precision": "ieee",
            "conv_fp32_precision": "tf32", "fingerprint": "aaaaaaaaaaaa"}


def _verdicts(gpu: bool) -> list[Verdict]:
    where = f"on this GPU: {H200} (cuda:0)" if gpu else f"on this CPU (CPU: {CPU_MODEL})"
    ratio = 2.9 if gpu else 0.05
    cpu_why = "a claim about tensor cores: this CPU ran its method at small sizes"
    given = {
        "tile_shape": Verdict("tile_shape", HOLDS if gpu else METHOD_ON_CPU, where,
                              f"the guide's 16x16 tile {ratio}x fp32",
                              "" if gpu else cpu_why,
                              figures={"ratio": figure("guide tile / fp32", ratio, "x")}),
        "mp_memory": Verdict("mp_memory", HOLDS if gpu else METHOD_ON_CPU, where,
                             "AMP peak 45% below fp32's", "" if gpu else cpu_why,
                             figures={"saving": figure("AMP memory saving", 45.0, "%")}),
        "accum_snippet": Verdict("accum_snippet", HOLDS, where, "gap 2e-7, peak 40% lower"),
        "max_batch": Verdict("max_batch", FAILS if gpu else UNTESTABLE, where,
                             "model off by 14% on transformer medium bf16", noisy=gpu,
                             reason="" if gpu else "on a CPU the peak is counted bytes"),
        "energy": Verdict("energy", NOT_MEASURED, where, reason="the time budget ran out "
                          "before the energy step: run the same command again to resume"),
    }
    if gpu:
        given.update(
            tc_peak=Verdict("tc_peak", FAILS, where, "best tile at 88% of 989 TFLOP/s"),
            tf32_speed=Verdict("tf32_speed", FAILS, where, "TF32 5.1x fp32",
                               figures={"ratio": figure("TF32 / fp32", 5.1, "x")}),
            amp_speed=Verdict("amp_speed", HOLDS, where, "AMP 2.1x fp32 samples/s"),
            buffers_resnet50=Verdict("buffers_resnet50", FAILED, where, reason=(
                "step 'amp': 2 of 8 point(s) failed: out of memory: CUDA out of memory")),
            compression=Verdict("compression", NOT_MEASURED, where, reason="cancelled before "
                                "the DDP step"),
            idle_cut=Verdict("idle_cut", INCONCLUSIVE, where, "idle cut 23% ± 4",
                             reason="the claimed 25% lies within the measured 23% ± 4: run it "
                                    "again on a quieter machine",
                             readings=({"name": "percentage points", "status": FAILS,
                                        "text": "9 points ± 2"},)))
    out = []
    for claim in REGISTER:
        if claim.not_measurable:
            out.append(Verdict(claim.id, NOT_MEASURABLE, reason=claim.not_measurable))
            continue
        if claim.doc:
            out.append(Verdict(claim.id, claim.doc.verdict, reason=claim.doc.finding))
            continue
        out.append(given.get(claim.id) or Verdict(
            claim.id, UNTESTABLE, where, reason="needs an NVIDIA GPU (CPU fallback run)"
            if not gpu else "this GPU has no fp8 TensorCores or the step is not in quick mode"))
    return out


def _series(gpu: bool) -> dict:
    if not gpu:
        return {
            "peaks": [{"device": "cpu", "card_name": CPU_MODEL, "precision": p, "tflops": t,
                       "datasheet_tflops": None, "noisy": p == "bf16"}
                      for p, t in (("fp32", 0.21), ("bf16", 0.05))],
            "tiles": [{"config": f"{b}x{b}x64 g1", "tflops": t, "noisy": b == 32,
                       "outcome": "ok", "message": ""}
                      for b, t in ((32, 0.04), (64, 0.07), (128, 0.088))],
            "train": [{"model": "mlp", "size": "small", "precision": p, "samples_per_s": s,
                       "peak_mib": m, "noisy": False}
                      for p, s, m in (("fp32", 950.0, 60.0), ("bf16", 610.0, 33.0))],
            # 256^3 fp32: 2 x 256^3 FLOP over 3 x 256^2 x 4 bytes = 42.7 FLOP/byte
            "roofline": [{"config": f"{b}x{b}x64 g1", "kind": "tile",
                          "intensity_flop_per_byte": 42.67, "tflops": t, "noisy": b == 32}
                         for b, t in ((32, 0.04), (64, 0.07), (128, 0.088))],
            "roofs": {"precision": "fp32", "datasheet_tflops": None, "datasheet_gbs": None,
                      "measured_tflops": 0.21, "measured_gbs": 9.5, "measured_noisy": False,
                      "measured_size": 512},
        }
    peaks = [{"device": d, "card_name": H200, "precision": p,
              "tflops": None if t is None else round(t * scale, 1), "datasheet_tflops": sheet,
              "noisy": False}
             for d, scale in (("cuda:0", 1.0), ("cuda:1", 0.71))
             for p, t, sheet in (("fp32", 51.0, 67.0), ("tf32", 260.0, 494.7),
                                 ("bf16", 700.1, 989.4), ("fp8", None, 1978.9))]
    tiles = [{"config": c, "tflops": t, "noisy": n, "outcome": "ok", "message": ""}
             for c, t, n in (("64x64x32 w4 s3 g8", 212.0, False),
                             ("128x128x32 w4 s3 g8", 610.0, False),
                             ("128x256x64 w8 s3 g8", 655.0, True))]
    tiles.append({"config": "256x256x64 w8 s4 g8", "tflops": None, "noisy": False,
                  "outcome": "error", "message": "out of shared memory: 262144 > 232448 bytes"})
    train = [{"model": m, "size": "medium", "precision": p, "samples_per_s": s, "peak_mib": mib,
              "noisy": False}
             for m, p, s, mib in (("transformer", "fp32", 390.0, 3900.0),
                                  ("transformer", "bf16", 812.0, 2048.0),
                                  ("cnn", "fp32", 2200.0, 1500.0), ("cnn", "bf16", 4100.0, 900.0))]
    busbw = [{"size_bytes": s, "busbw_gbs": g, "noisy": s == 2**24}
             for s, g in ((2**24, 150.2), (2**28, 330.5), (2**30, 362.0))]
    # 4096^3 bf16: 2 x 4096^3 FLOP over 3 x 4096^2 x 2 bytes = 1365 FLOP/byte
    roofline = [{"config": t["config"], "kind": "tile", "intensity_flop_per_byte": 1365.3,
                 "tflops": t["tflops"], "noisy": t["noisy"]} for t in tiles if t["tflops"]]
    roofline.append({"config": "cuBLAS", "kind": "cublas", "intensity_flop_per_byte": 1365.3,
                     "tflops": 690.0, "noisy": False})
    roofs = {"precision": "bf16", "datasheet_tflops": 989.4, "datasheet_gbs": 4800.0,
             "measured_tflops": 700.1, "measured_gbs": 3900.0, "measured_noisy": False,
             "measured_size": 8192}
    return {"peaks": peaks, "tiles": tiles, "train": train, "busbw": busbw,
            "roofline": roofline, "roofs": roofs}


def _health(gpu: bool, series: dict) -> dict:
    if not gpu:
        p = series["peaks"][0]
        return {"advice": _cpu_doctor()["advice"],
                "cards": [{"device": "cpu", "name": CPU_MODEL, "precision": "fp32",
                           "matmul_tflops": p["tflops"], "datasheet_tflops": None,
                           "ratio_of_datasheet": None, "copy_gbs": 9.5,
                           "datasheet_copy_gbs": None, "noisy": False}],
                "flags": [], "threshold": 0.1, "datasheet_threshold": 0.4,
                "busbw": {"untestable": "no GPU here: bus bandwidth needs 2 or more GPUs"},
                "memory": {"gpu_found": False, "no_gpu_reason": "no NVIDIA driver", "gpus": [],
                           "advice": ["No NVIDIA GPU found (no NVIDIA driver): nothing to "
                                      "check."]}}
    cards = [{"device": d, "name": H200, "precision": "bf16", "matmul_tflops": t,
              "datasheet_tflops": 989.4, "ratio_of_datasheet": round(t / 989.4, 2),
              "copy_gbs": 3900.0, "datasheet_copy_gbs": 4800.0, "noisy": False}
             for d, t in (("cuda:0", 700.1), ("cuda:1", 497.1))]
    flag = {"device": "cuda:1", "metric": "matmul_tflops", "value": 497.1, "reference": 700.1,
            "message": "cuda:1 matmul TFLOP/s 497 is 29% below its siblings' median 700"}
    rows = [{"size_bytes": r["size_bytes"], "busbw_gbs": r["busbw_gbs"],
             "algbw_gbs": r["busbw_gbs"], "time_ms": r["size_bytes"] / r["busbw_gbs"] / 1e6}
            for r in series["busbw"]]
    return {"advice": _gpu_doctor()["advice"], "cards": cards, "flags": [flag],
            "threshold": 0.1, "datasheet_threshold": 0.4,
            "busbw": {"rows": rows, "link_gbs": 450.0},
            "memory": {"gpu_found": True, "no_gpu_reason": "", "gpus": [
                {"index": 0, "name": H200, "verdict": "ok", "reasons": []},
                {"index": 1, "name": H200, "verdict": "drain",
                 "reasons": ["GPU 1: a row remapping failed: drain it and ask for an RMA"]}],
                "advice": ["GPU 1: a row remapping failed: drain it and ask for an RMA"]}}


def _figures(gpu: bool, verdicts: list[Verdict], series: dict) -> dict:
    out = {}
    for p in series["peaks"]:
        out[f"peak.{p['device']}.{p['precision']}_tflops"] = figure(
            f"{p['device']} {p['precision']} matmul TFLOP/s", p["tflops"], "TFLOP/s")
    for t in series["train"]:
        out[f"train.{t['model']}.{t['precision']}_samples_per_s"] = figure(
            f"{t['model']} {t['size']} {t['precision']} samples/s", t["samples_per_s"],
            "samples/s")
    for v in verdicts:
        out.update({f"{v.claim}.{name}": fig for name, fig in v.figures.items()})
    return out


def make_report(gpu: bool = False, **overrides) -> dict:
    """A report.json dict: a complete quick CPU fallback run, or (gpu=True) a quick run on a
    box with 2 H200s where cuda:1 is flagged 29% below its sibling. `overrides` replace
    top-level keys."""
    verdicts = _verdicts(gpu)
    series = _series(gpu)
    planned = 40 if gpu else 14
    report = {
        "kind": "a800lab-report", "report_version": 2, "mode": "quick",
        "created": "2026-12-01T02:03:04+00:00", "wall_s": 95.2 if gpu else 61.4,
        "device": "cuda:0" if gpu else "cpu",
        "device_name": H200 if gpu else f"{CPU_MODEL} (2 cores)",
        "scope": "GPU" if gpu else "CPU fallback", "complete": True, "stopped": "",
        "points": {"planned": planned, "measured": planned, "ok": planned - 1, "failed": 1,
                   "not_measured": 0},
        "results_file": "points.jsonl", "price_per_gpu_hour_usd": 2.0,
        "environment": _environment(gpu),
        "doctor": _gpu_doctor() if gpu else _cpu_doctor(),
        "health": _health(gpu, series),
        "claims": [v.to_dict(claim.to_dict())
                   for v, claim in zip(verdicts, REGISTER, strict=True)],
        "thresholds": thresholds(),
        "figures": _figures(gpu, verdicts, series),
        "series": series,
        "plan": {"mode": "quick", "device": "cuda:0" if gpu else "cpu",
                 "gpu_count": 2 if gpu else 0, "steps": [], "untestable": {},
                 "points": planned, "estimate_s": 90.0},
    }
    report.update(copy.deepcopy(overrides))
    return report


def make_gpu_report(**overrides) -> dict:
    """make_report(gpu=True, ...)."""
    return make_report(gpu=True, **overrides)
