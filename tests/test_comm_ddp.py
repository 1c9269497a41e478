"""A DDP step on 2 gloo ranks: comm hooks (losses close to plain all-reduce, bytes counted),
no_sync communicating once per accumulation cycle, bucket_cap_mb changing the bucket count, and
which hooks this group runs."""

import json
import math

import pytest

from a800lab.workloads.comm.ddp import HOOKS
from a800lab.workloads.comm.launcher import RankGroup
from a800lab.workloads.comm.runs import WORKER

SETTINGS = {"budget_s": 0.02, "train_steps": 10}


@pytest.fixture(scope="module")
def group():
    with RankGroup(WORKER, world_size=2, env={"A800LAB_BACKEND": "gloo"},
                   timeout_s=60) as ranks:
        yield ranks


def ddp(group, **params) -> dict:
    reply = group.request({"job": "point", "workload": "ddp", "settings": SETTINGS,
                           "params": {"world_size": 2, "backend": "gloo", **params}})
    record = json.loads(reply)
    assert record["outcome"] == "ok", record["message"]
    return {**record["metrics"], "throughput": record["throughput"]}


@pytest.fixture(scope="module")
def hooks(group):
    return {hook: ddp(group, hook=hook, **({"powersgd_rank": 4} if hook == "powersgd" else {}))
            for hook in HOOKS}


def test_every_hook_runs_on_gloo_here(group):
    assert group.request({"job": "hook_support"}) == {hook: "ok" for hook in HOOKS}


def test_compressed_hooks_learn_like_plain_all_reduce(hooks):
    plain = hooks["allreduce"]["eval_loss"]
    assert plain < math.log(16) - 0.3  # it learned something in 10 steps (chance: ln 16)
    for hook in ("fp16_compress", "bf16_compress"):
        assert hooks[hook]["eval_loss"] == pytest.approx(plain, rel=1e-3)
    # PowerSGD (rank 4 from step 2) approximates the gradient: slower, but still learning
    assert hooks["powersgd"]["eval_loss"] == pytest.approx(plain, rel=0.2)
    assert hooks["powersgd"]["eval_loss"] < math.log(16) - 0.2


def test_bytes_sent_per_hook(hooks):
    fp32 = hooks["allreduce"]
    assert fp32["bytes_per_step"] == fp32["grad_bytes"] == 4 * fp32["param_count"]
    for hook in ("fp16_compress", "bf16_compress"):
        assert hooks[hook]["bytes_per_step"] == fp32["grad_bytes"] // 2
    assert hooks["powersgd"]["compressed"] is True
    assert hooks["powersgd"]["bytes_per_step"] < fp32["grad_bytes"] / 10


def test_no_sync_communicates_once_per_cycle(group):
    once = ddp(group, accum_steps=4, sync="no_sync")
    every = ddp(group, accum_steps=4, sync="every_micro_batch")
    assert once["syncs_per_step"] == 1 and every["syncs_per_step"] == 4
    assert once["allreduce_calls_per_step"] == once["buckets"]
    assert every["allreduce_calls_per_step"] == 4 * every["buckets"]
    assert every["bytes_per_step"] == 4 * once["bytes_per_step"]
    # the same averaged gradient either way: the same model afterwards
    assert once["eval_loss"] == pytest.approx(every["eval_loss"], rel=1e-4)


def test_smaller_buckets_mean_more_of_them(group):
    small, large = ddp(group, bucket_cap_mb=0.25), ddp(group, bucket_cap_mb=25.0)
    assert small["buckets"] > large["buckets"] >= 1
    assert small["bytes_per_step"] == large["bytes_per_step"]
    assert small["eval_loss"] == pytest.approx(large["eval_loss"], rel=1e-4)


@pytest.mark.gpu
def test_every_hook_runs_on_nccl():
    import torch

    from a800lab.workloads.comm.runs import hook_support_on

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs: NCCL takes one GPU per rank")
    assert hook_support_on(world_size=2, backend="nccl") == {hook: "ok" for hook in HOOKS}
