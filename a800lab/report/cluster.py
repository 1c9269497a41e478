"""A register row read from records measured outside the report's battery: G.7.2's hierarchical
all-reduce from the records of `comm collectives`, say across nodes under torchrun, where the
row can decide (its ranks on two or more nodes); the CPU rule applied as in the report.

    status, measured, reason = hierarchical_row(read_records("comm.jsonl"), device="cpu")
"""

import dataclasses
from types import SimpleNamespace

from .claims import RUN
from .judge import Context
from .systems import hierarchical
from .verdicts import on_cpu


def hierarchical_row(records, device: str) -> tuple[str, str, str] | None:
    """G.7.2's (status, measured, reason) on the newest group shape's all-reduces in `records`
    (world_size, backend and nodes alike; each sitting's run id one run: three decide), or None
    without flat and hierarchical ones."""
    comm = [r for r in records if r.workload == "comm" and "all_reduce" in r.params.get("op", "")]
    if not comm:
        return None
    newest = max(comm, key=lambda r: r.timestamp)
    shape = {k: newest.params.get(k) for k in ("world_size", "backend", "nodes")}
    same = [r for r in comm if all(r.params.get(k) == v for k, v in shape.items())]
    # each sitting into the file (its run id) an independent run, as the report's runs
    runs = {run_id: i for i, run_id in enumerate(dict.fromkeys(r.run_id for r in same))}
    same = [dataclasses.replace(r, params={**r.params, RUN: runs[r.run_id]}) for r in same]
    ctx = Context({"hierarchical": same}, SimpleNamespace(device=device), device, 0.0)
    found = hierarchical.judge(ctx, hierarchical)
    if found is None:
        return None
    return on_cpu(found.status, hierarchical, ctx), found.measured, found.reason
