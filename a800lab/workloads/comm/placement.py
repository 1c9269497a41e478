"""Where the ranks of a live process group run, gathered once through the group: each rank's
host, node and local rank. A node is torchrun's node rank (GROUP_RANK), never a hostname alone
(containers and network namespaces may share one); the lab's own launcher puts every rank on
node 0 of this machine.

    where = placement()    # collective: every rank calls it; the dict every record carries
    where["nodes"], where["hosts"], lost_peer(where, "Connection closed by peer [10.0.0.2]:41")
"""

import os
import re
import socket

from ...core.device import compact_ranges

_cache: tuple = (None, None)  # (the group it was gathered on, the placement)


def own_address() -> str:
    """The address this node reaches the rendezvous host from (what its peers see), or ""."""
    master = os.environ.get("MASTER_ADDR")
    if not master:
        return ""
    try:
        family, kind, _, _, where = socket.getaddrinfo(
            master, int(os.environ.get("MASTER_PORT", "1")), type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind) as probe:
            probe.connect(where)  # a UDP "connect" sends nothing: it only picks the route
            return probe.getsockname()[0]
    except (OSError, ValueError):
        return ""


def placement() -> dict:
    """This rank's host, node_rank and local_rank, the group's world_size and nodes, and per
    node (by node rank) its host, address and ranks; gathered once per group."""
    import torch.distributed as dist

    global _cache
    if _cache[0] is dist.group.WORLD:
        return _cache[1]
    me = {"rank": dist.get_rank(), "host": socket.gethostname(),
          "node_rank": int(os.environ.get("GROUP_RANK", "0")),
          "local_rank": int(os.environ.get("LOCAL_RANK", "0")), "address": own_address()}
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, me)
    nodes = sorted({r["node_rank"] for r in everyone})
    first = {n: next(r for r in everyone if r["node_rank"] == n) for n in nodes}
    where = {"host": me["host"], "node_rank": me["node_rank"], "local_rank": me["local_rank"],
             "world_size": len(everyone), "nodes": len(nodes),
             "hosts": [first[n]["host"] for n in nodes],
             "addresses": [first[n]["address"] for n in nodes],
             "ranks": [compact_ranges([r["rank"] for r in everyone if r["node_rank"] == n])
                       for n in nodes]}
    _cache = (dist.group.WORLD, where)
    return where


def describe_node(where: dict, index: int) -> str:
    """"node 1 (host gpu07, ranks 8-15)"."""
    return f"node {index} (host {where['hosts'][index]}, ranks {where['ranks'][index]})"


def lost_peer(where: dict, error: str) -> str:
    """The node behind the peer address a broken collective names ("[10.0.0.2]:4123"), said
    plainly, or "" when the message names none this group knows."""
    for address in re.findall(r"\[([0-9A-Fa-f.:]+)\]:\d+", error):
        known = [i for i, a in enumerate(where.get("addresses", ())) if a == address]
        if len(known) == 1:
            return f"the peer at {address} is {describe_node(where, known[0])}"
    return ""
