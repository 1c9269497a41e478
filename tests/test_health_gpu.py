"""GPU paths of the health checks (marker `gpu`, skipped without CUDA): real ECC and
remapped-row counters, and a stress run against the card's datasheet."""

import re

import pytest

from a800lab.core.nvml import is_not_available
from a800lab.workloads.health import VERDICTS, health_report
from a800lab.workloads.stress import stress_card

pytestmark = pytest.mark.gpu
DATA_CENTRE = re.compile(r"A100|A800|H100|H800|H200")  # cards that remap rows


def test_health_report_reads_the_real_counters():
    report = health_report()
    assert report["gpu_found"], report["no_gpu_reason"]
    for gpu in report["gpus"]:
        assert gpu["verdict"] in VERDICTS
        if DATA_CENTRE.search(str(gpu["name"])):
            assert not is_not_available(gpu["remapped_rows"]), gpu["remapped_rows"]
            assert is_not_available(gpu["retired_pages"])  # replaced by row remapping


def test_a_stress_run_lands_near_the_datasheet():
    card = stress_card("cuda:0", budget_s=0.2)
    assert card.matmul_tflops > 0 and card.copy_gbs > 0, card.message
    if card.datasheet_tflops:
        assert 0.3 < card.matmul_tflops / card.datasheet_tflops < 1.1
        assert 0.3 < card.copy_gbs / card.datasheet_gbs < 1.1
