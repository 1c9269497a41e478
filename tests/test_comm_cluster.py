"""The pieces of the comm lab across nodes, without a second host: `a800lab torchrun`'s parsing,
its endpoint rule and wait, its one-line failure, where a group's ranks run (placement), the
peer a broken collective names, and the fleet's comparison of doctor reports."""

import socket
from types import SimpleNamespace

import pytest

from a800lab.cli import main
from a800lab.core.doctor import build_report
from a800lab.workloads.comm.fleet import fleet_dict, format_fleet, gather_fleet
from a800lab.workloads.comm.placement import lost_peer, placement
from a800lab.workloads.comm.torchrun import (
    endpoint_to_reach,
    failure_line,
    torchrun_args,
    wait_for_endpoint,
)

C10D = ["--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d"]
LAB = ["comm", "collectives", "--out", "c.jsonl"]


def test_torchrun_args_are_torchruns_with_the_lab_command_as_its_module():
    args = torchrun_args([*C10D, "--rdzv-endpoint", "10.0.0.1:29500", *LAB])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_endpoint) == ("2", "2", "10.0.0.1:29500")
    assert args.module and args.training_script == "a800lab"
    assert args.training_script_args == LAB


@pytest.mark.parametrize("argv, says", [
    (["sweep", "matmul"], "'sweep matmul': a800lab torchrun runs the lab's group commands"),
    (["doctor"], "'doctor': a800lab torchrun runs the lab's group commands"),
    (["-m", "comm", "collectives"], "without -m, --no-python or --run-path"),
])
def test_torchrun_args_refuse_what_is_not_a_group_command(argv, says):
    with pytest.raises(ValueError, match=says):
        torchrun_args([*C10D, "--rdzv-endpoint", "10.0.0.1:29500", *argv])


@pytest.mark.parametrize("extra, reach", [
    (["--rdzv-endpoint", "10.0.0.1:29500", "--rdzv-conf", "is_host=0"],
     ("10.0.0.1", 29500, 60.0, "read_timeout")),
    (["--rdzv-endpoint", "10.0.0.1", "--rdzv-conf", "is_host=0,read_timeout=5"],
     ("10.0.0.1", 29400, 5.0, "read_timeout")),                 # torchrun's default port
    (["--rdzv-endpoint", "10.0.0.1:29500", "--rdzv-conf", "is_host=1"], None),  # it serves
    (["--rdzv-endpoint", "127.0.0.1:29500"], None),             # this machine: it serves
])
def test_the_endpoint_a_node_must_reach_is_torchruns_rule(extra, reach):
    assert endpoint_to_reach(torchrun_args([*C10D, *extra, *LAB])) == reach


def test_the_static_rendezvous_is_reached_by_every_node_but_node_0():
    static = ["--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "23456"]
    assert endpoint_to_reach(torchrun_args([*static, "--node-rank", "0", *LAB])) is None
    assert endpoint_to_reach(torchrun_args([*static, "--node-rank", "1", *LAB])) == (
        "10.0.0.1", 23456, 900.0, "timeout")
    assert endpoint_to_reach(torchrun_args(["--standalone", *LAB])) is None


def test_wait_for_endpoint_returns_once_it_listens_and_names_it_after_the_wait():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        wait_for_endpoint("127.0.0.1", server.getsockname()[1], 1.0, "read_timeout")
        port = server.getsockname()[1]
    ticks = iter([0.0, 0.5, 3.0])   # a fake clock: the second refusal is past the 2 s wait
    with pytest.raises(ValueError) as refused:
        wait_for_endpoint("127.0.0.1", port, 2.0, "read_timeout", clock=lambda: next(ticks))
    assert str(refused.value).startswith(f"the rendezvous endpoint 127.0.0.1:{port} did not "
                                         "answer within 2 s (connection refused)")


def failure(local_rank, pid, exitcode, timestamp):
    return SimpleNamespace(local_rank=local_rank, pid=pid, exitcode=exitcode,
                           timestamp=timestamp)


def test_a_failed_rank_is_named_in_one_line_the_cause_first():
    host = socket.gethostname()
    stopped_first = {2: failure(0, 11, -15, 100), 3: failure(1, 12, -9, 100)}
    assert failure_line(stopped_first) == (
        f"on {host}: rank 3 (local rank 1, pid 12) was killed by SIGKILL; then rank 2 was "
        "killed by SIGTERM")
    assert failure_line({0: failure(0, 7, 1, 5)}) == (
        f"on {host}: rank 0 (local rank 0, pid 7) exited with code 1 (its own error line is "
        "above)")


WHERE = {"hosts": ["gpu01", "gpu02"], "addresses": ["10.0.0.1", "10.0.0.2"],
         "ranks": ["0-7", "8-15"]}


def test_the_peer_a_broken_collective_names_is_said_as_its_node():
    assert lost_peer(WHERE, "Connection closed by peer [10.0.0.2]:4123") == \
        "the peer at 10.0.0.2 is node 1 (host gpu02, ranks 8-15)"
    assert lost_peer(WHERE, "Connection closed by peer [10.9.9.9]:1") == ""
    assert lost_peer(WHERE, "Timed out waiting 120000ms for recv") == ""


def test_placement_on_one_process_is_one_node_of_this_host(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        where = placement()
        assert placement() is where   # gathered once per group
    finally:
        dist.destroy_process_group()
    assert where["nodes"] == 1 and where["world_size"] == 1 and where["ranks"] == ["0"]
    assert where["hosts"] == [socket.gethostname()] and where["host"] == socket.gethostname()
    assert (where["node_rank"], where["local_rank"]) == (0, 0)


def node(i: int, environ: dict) -> dict:
    report = {**build_report(), "environ": environ}
    return {"node": i, "host": f"gpu0{i + 1}", "ranks": str(i),
            "name": f"node {i} (host gpu0{i + 1}, ranks {i})", "report": report}


def test_the_fleet_names_a_variable_set_on_one_node_only():
    nodes = [node(0, {"NCCL_SOCKET_IFNAME": "eth0"}),
             node(1, {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"})]
    text = format_fleet(nodes)
    assert "NCCL_IB_DISABLE: A (unset) | B 1" in text
    assert "1 forbids InfiniBand" in text   # what the variable does, from core.nccl_env
    assert text.splitlines()[-1] == "Differs from node 0: node 1 (gpu02) in NCCL_IB_DISABLE"
    (against,) = fleet_dict(nodes)["against_node_0"]
    assert [d["field"] for d in against["differences"]] == ["environ.NCCL_IB_DISABLE"]
    same = [node(0, {}), node(1, {})]
    assert format_fleet(same).splitlines()[-1] == \
        "Every node agrees with node 0 in every field both record."


def test_doctor_fleet_outside_a_group_says_how_to_start_it(capsys, monkeypatch):
    for name in ("RANK", "MASTER_ADDR"):
        monkeypatch.delenv(name, raising=False)
    assert main(["doctor", "--fleet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("a800lab: error: --fleet compares the nodes of a process group") and \
        "doctor --fleet" in err and len(err.splitlines()) == 1
    with pytest.raises(ValueError, match="start it on every node under torchrun"):
        gather_fleet(build_report)


def test_a800lab_torchrun_refuses_a_bad_comm_command_before_any_rank_starts(tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    for argv, says in ((["--op", "allreduce"], "op='allreduce' is not a choice"),
                       (["--op", "leader_all_reduce", "--ranks-per-node", "3"],
                        "ranks_per_node=3 needs op")):
        assert main(["torchrun", "--nnodes", "1", "--nproc-per-node", "2", "comm",
                     "collectives", *argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.splitlines()) == 1
    assert not out.exists()
