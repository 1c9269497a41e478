"""Exercise every GPU path of a800lab briefly on a real device and write one JSON report.

    python scripts/gpu_check.py [--out data/gpu_check.json]     # about 2-4 minutes on one GPU

Checks, each independent (one failing does not stop the others): doctor's report, measure_peak()
for every precision the card has, measure() against triton's do_bench and torch's Timer, the
telemetry sampler during a large bf16 matmul, and out-of-memory recovery inside a sweep. The
report carries the environment it came from; commit it under data/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from a800lab.core.backends import HAS_CUDA, why_unavailable  # noqa: E402
from a800lab.core.environment import environment, fingerprint  # noqa: E402


def check_doctor() -> dict:
    from a800lab.core.doctor import advice, build_report

    report = build_report()
    return {"report": report, "advice": advice(report)}


def check_peak() -> dict:
    from a800lab.core.peak import measure_peak

    def show(done, total, what):
        print(f"  [{done}/{total}] {what}", flush=True)

    return measure_peak(device="cuda", on_progress=show).to_dict()


def check_timing() -> dict:
    from benchmarks.bench_timing_fidelity import run

    return {size: run(size=size, device="cuda", rounds=3, budget_s=0.5)
            for size in (1024, 4096)}


def check_sampler() -> dict:
    from a800lab.core.telemetry import TelemetrySampler

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    calls, t0 = 0, time.perf_counter()
    with TelemetrySampler(interval_s=0.05) as sampler:
        while time.perf_counter() - t0 < 4.0:
            for _ in range(20):
                torch.matmul(a, b)
            torch.cuda.synchronize()
            calls += 20
    elapsed_s = time.perf_counter() - t0
    return {"summary": sampler.summary(), "n_samples": len(sampler.samples),
            "matmul_calls": calls, "tflops": 2 * 8192**3 * calls / elapsed_s / 1e12,
            "first_samples": sampler.samples[:3]}


def check_oom_recovery() -> dict:
    from a800lab.core.sweep import run_sweep

    capacity_gib = torch.cuda.get_device_properties(0).total_memory / 2**30

    def allocate(gib):
        x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        return {"throughput": float(gib), "throughput_unit": "GiB held"}

    before = torch.cuda.memory_allocated()
    sizes = [1, round(2 * capacity_gib), 1]
    res = run_sweep(allocate, {"gib": sizes}, workload="oom_check")
    return {"capacity_gib": capacity_gib, "sizes_gib": sizes,
            "outcomes": [r.outcome for r in res.records],
            "messages": [r.message[:200] for r in res.records],
            "allocated_before_bytes": before,
            "allocated_after_bytes": torch.cuda.memory_allocated(),
            "passed": [r.outcome for r in res.records] == ["ok", "oom", "ok"]}


def _write(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str))


CHECKS = {"doctor": check_doctor, "peak": check_peak, "timing_vs_do_bench": check_timing,
          "sampler": check_sampler, "oom_recovery": check_oom_recovery}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(os.environ.get("OUT", REPO / "data")) / "gpu_check.json"
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--only", nargs="+", choices=sorted(CHECKS), help="run only these")
    args = parser.parse_args()
    env = environment()
    report = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "environment": env, "fingerprint": fingerprint(env), "checks": {}}
    if not HAS_CUDA:
        report["error"] = f"no CUDA device: {why_unavailable('cuda')}"
    for name, check in CHECKS.items():
        if not HAS_CUDA or (args.only and name not in args.only):
            continue
        print(f"[gpu_check] {name} ...", flush=True)
        t0 = time.perf_counter()
        try:
            result = {"status": "ok", "result": check()}
        except Exception as exc:  # record and go on: one broken path must not hide the others
            result = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc()}
        result["duration_s"] = round(time.perf_counter() - t0, 2)
        report["checks"][name] = result
        print(f"[gpu_check] {name}: {result['status']} in {result['duration_s']} s", flush=True)
        _write(args.out, report)  # after every check: a crash keeps what was measured
    _write(args.out, report)
    print(f"[gpu_check] report written to {args.out}")
    failed = [n for n, r in report["checks"].items() if r["status"] != "ok"]
    return 1 if (failed or not HAS_CUDA) else 0


if __name__ == "__main__":
    sys.exit(main())
