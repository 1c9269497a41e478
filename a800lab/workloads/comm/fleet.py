"""The fleet's consistency (the guide's consistent environment, G.6.3, across real hosts): every
node's doctor report gathered through a process group, and each node compared with node 0 by
diff's engine (core.envdiff), the environment variables NCCL, gloo and CUDA read included.

    torchrun --nnodes 4 --nproc-per-node 1 ... -m a800lab doctor --fleet
    nodes = gather_fleet(build_report)      # every rank calls it; rank 0 gets the nodes
    print(format_fleet(nodes))              # or fleet_dict(nodes) for --json
"""

import datetime
import os

from ...core.envdiff import EnvDiff, diff_sides, format_diff, side_from_report
from .placement import describe_node, placement

TIMEOUT_S = 300.0  # for the gather: a node's report takes seconds, not minutes


def gather_fleet(build_report) -> list[dict] | None:
    """Join the group torchrun started (gloo: the reports are Python objects), run
    `build_report()` on each node's local rank 0, gather them; rank 0 gets one dict per node
    ({"node", "host", "ranks", "report"}), the other ranks None. ValueError outside torchrun."""
    import torch.distributed as dist

    if "RANK" not in os.environ or "MASTER_ADDR" not in os.environ:
        raise ValueError("--fleet compares the nodes of a process group: start it on every node "
                         "under torchrun, one process per node, e.g. `python -m a800lab torchrun "
                         "--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "
                         "HEAD:29500 doctor --fleet`")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    try:
        where, rank = placement(), dist.get_rank()
        mine = (where["node_rank"], build_report() if where["local_rank"] == 0 else None)
        everyone: list = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    reports = {node: report for node, report in everyone if report is not None}
    return [{"node": i, "host": where["hosts"][i], "ranks": where["ranks"][i],
             "name": describe_node(where, i), "report": reports[node]}
            for i, node in enumerate(sorted(reports))]


def fleet_diffs(nodes: list[dict]) -> list[EnvDiff]:
    """Each node after the first against node 0, field by field (diff's engine)."""
    first = side_from_report(nodes[0]["report"], nodes[0]["name"])
    return [diff_sides(first, side_from_report(n["report"], n["name"])) for n in nodes[1:]]


def fleet_dict(nodes: list[dict]) -> dict:
    """The fleet for --json: its nodes (no reports) and each comparison with node 0."""
    return {"nodes": [{k: n[k] for k in ("node", "host", "ranks")} for n in nodes],
            "against_node_0": [d.to_dict() for d in fleet_diffs(nodes)]}


def format_fleet(nodes: list[dict]) -> str:
    """The fleet as text: its nodes, each comparison with node 0, and one closing line naming
    the nodes that differ and in what."""
    out = [f"Fleet: {len(nodes)} node(s): " + "; ".join(n["name"] for n in nodes)]
    differ = []
    for node, diff in zip(nodes[1:], fleet_diffs(nodes), strict=True):
        out += ["", format_diff(diff)]
        fields = [d.label for d in diff.differences + diff.only_a + diff.only_b]
        if fields:
            differ.append(f"node {node['node']} ({node['host']}) in {', '.join(fields)}")
    out.append("")
    out.append("Differs from node 0: " + "; ".join(differ) if differ else
               "Every node agrees with node 0 in every field both record." if len(nodes) > 1
               else "One node: nothing to compare (start one process on each node).")
    return "\n".join(out)
