"""The comm lab across two real hosts on one machine (tests/two_hosts.py: network namespaces, a
veth pair, torchrun's c10d rendezvous): 2 hosts x 2 ranks in one file, the hierarchical
all-reduces equal to the flat one, the G.7.2 row, doctor --fleet naming a planted difference, a
rank killed mid-run named, and nothing left behind. The endpoint that does not answer needs no
namespaces."""

import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from a800lab.cli import main
from a800lab.core.results import read_records
from a800lab.workloads.comm.launcher import free_port
from tests.two_hosts import two_hosts, wait


def test_the_comm_lab_runs_on_two_hosts_and_rank_0_writes_one_file(tmp_path):
    out = tmp_path / "comm.jsonl"
    with two_hosts() as hosts:
        for i in (0, 1):
            routes = subprocess.run(["ip", "-n", hosts.host(i), "route"], capture_output=True,
                                    text=True).stdout
            assert routes.strip() and "default" not in routes  # only the pair between them
        results = hosts.run_both(["comm", "collectives", "--op", "all_reduce",
                                  "hierarchical_all_reduce", "leader_all_reduce", "--size",
                                  "64K", "--budget-s", "0.02", "--out", str(out)], nproc=2,
                                 plain=True)   # torchrun itself, as a user runs it
        assert all(code == 0 for code, _ in results), results
        assert not hosts.pids()   # every rank and agent exited by itself
    assert hosts.gone()
    records = read_records(out)
    assert [r.params["op"] for r in records] == ["all_reduce", "hierarchical_all_reduce",
                                                 "leader_all_reduce"]
    for r in records:
        group = r.env["group"]
        assert r.outcome == "ok" and math.isfinite(r.throughput) and r.throughput > 0
        assert r.throughput_unit == "GB/s busbw" and r.metrics["bus_factor"] == 1.5  # 2(n-1)/n
        assert r.params["world_size"] == 4 and r.params["nodes"] == 2
        assert group["world_size"] == 4 and group["nodes"] == 2
        assert group["hosts"] == [hosts.host(0), hosts.host(1)]  # each host its own name
        assert group["addresses"] == ["10.238.0.1", "10.238.0.2"]
        assert group["ranks"] == ["0-1", "2-3"]
        assert (group["host"], group["node_rank"], group["local_rank"]) == (hosts.host(0), 0, 0)
    for r in records[1:]:     # the same integers summed: equal to the flat all-reduce's
        assert r.params["ranks_per_node"] == 2 and r.metrics["max_diff_vs_flat"] == 0
    head = results[0][1]
    assert "G.7.2 (the report's hierarchical all-reduce row): method shown on CPU" in head
    assert "4 ranks (gloo) on 2 node(s), groups of 2" in head


def test_the_hosts_and_what_runs_on_them_are_gone_after_a_failing_block():
    with pytest.raises(RuntimeError, match="a test failing"), two_hosts() as hosts:
        sleeper = hosts.start(1, ["-c", "import time; time.sleep(120)"])
        while not hosts.pids():
            time.sleep(0.05)
        raise RuntimeError("a test failing while a host still runs something")
    assert sleeper.returncode is not None and hosts.seen and hosts.gone()


def test_without_root_the_two_host_tests_skip_saying_why(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="needs root to make network namespaces"), \
            two_hosts():
        pass


def test_doctor_fleet_names_the_variable_set_on_one_host_only():
    with two_hosts() as hosts:
        (code0, head), (code1, other) = hosts.run_both(["doctor", "--fleet"], nproc=1,
                                                       env1={"NCCL_IB_DISABLE": "1"})
    assert hosts.gone()
    assert code0 == code1 == 0, (head, other)
    assert f"node 1 (host {hosts.host(1)}, ranks 1)" in head
    assert "NCCL_IB_DISABLE: A (unset) | B 1" in head
    assert f"Differs from node 0: node 1 ({hosts.host(1)}) in NCCL_IB_DISABLE" in head
    assert "Fleet:" not in other  # rank 0 alone prints


def _rank_pid(hosts, rank: int) -> int | None:
    for pid in hosts.pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and b"collectives" in command:
            return pid
    return None


def test_a_rank_killed_mid_run_ends_both_hosts_with_the_rank_named(tmp_path):
    out = tmp_path / "comm.jsonl"
    lab = ["comm", "collectives", "--size", *[f"{2 ** k}K" for k in range(1, 12)],
           "--budget-s", "0.5", "--out", str(out)]
    with two_hosts() as hosts:
        procs = [hosts.torchrun(i, lab, nproc=1) for i in (0, 1)]
        deadline = time.monotonic() + 90
        while not (out.exists() and out.read_text().strip()):  # a point is finished
            assert time.monotonic() < deadline and procs[0].poll() is None, "no point measured"
            time.sleep(0.1)
        victim = _rank_pid(hosts, 1)
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        (code0, head), (code1, other) = (wait(p, 60) for p in procs)
        took_s = time.monotonic() - killed
    assert hosts.gone()
    assert code0 == code1 == 1 and took_s < 30, (took_s, head, other)
    assert f"a800lab: error: on {hosts.host(1)}: rank 1 (local rank 0, pid {victim}) was " \
           "killed by SIGKILL" in other
    assert f"a800lab: error: rank 0 on {hosts.host(0)}: the group broke during" in head
    assert f"the peer at 10.238.0.2 is node 1 (host {hosts.host(1)}, ranks 1)" in head
    assert f"every finished point is in {out}" in head
    records = read_records(out)
    assert records and all(r.outcome == "ok" for r in records)  # the broken point not written


def test_a_rendezvous_endpoint_that_does_not_answer_ends_in_one_line(capsys):
    port = free_port()
    started = time.monotonic()
    assert main(["torchrun", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-conf",
                 "is_host=0,read_timeout=1", "doctor", "--fleet"]) == 2
    took_s = time.monotonic() - started
    assert 1 <= took_s < 20, took_s   # the stated wait, then one line
    assert capsys.readouterr().err.splitlines() == [
        f"a800lab: error: the rendezvous endpoint 127.0.0.1:{port} did not answer within 1 s "
        "(connection refused): start the first node's torchrun (it serves the endpoint; "
        "--rdzv-conf is_host=1 there), check the address and port, or wait longer "
        "(--rdzv-conf read_timeout=SECONDS)"]
