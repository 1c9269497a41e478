"""The compiler's verdict on tile configs for cards this machine does not have: real Triton
compiles for sm_80, sm_89 and sm_90 (a handful, cached for the session), the estimate without
Triton, occupancy arithmetic, the cache, and `a800lab check tiles`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from a800lab.cli import main
from a800lab.core import backends
from a800lab.core.specs import arch_limits, resolve_target
from a800lab.workloads.matmul import MatmulSpec
from a800lab.workloads.tiles import facts as facts_mod
from a800lab.workloads.tiles.facts import estimate, tile_facts
from a800lab.workloads.tiles.occupancy import occupancy

pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from gpu_rehearsal import compile_like_a_launch  # noqa: E402  (the JIT as a launch drives it)

BIG = dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4)


def spec(precision="bf16", size=4096, **tile):
    return MatmulSpec(size, size, size, precision, "triton", **{**BIG, **tile})


@pytest.fixture(scope="module")
def compiled():
    """Each config of the module compiled once: (precision, target, extra) -> TileFacts."""
    cases = {
        ("bf16", "A800", ()): spec(),
        ("bf16", "H100 SXM5 80GB", ()): spec(),
        ("bf16", "sm_80", ("ragged",)): spec(size=1000, num_stages=3),
        ("fp8", "sm_89", ()): spec("fp8", block_n=128, num_warps=4, num_stages=3),
        ("fp8", "sm_90", ()): spec("fp8", block_n=128, num_warps=4, num_stages=3),
        ("fp8", "sm_90", ("fast",)): spec("fp8", block_n=128, num_warps=4, num_stages=3,
                                          fp8_acc="fast"),
        ("bf16", "sm_90", ("tma",)): spec(block_n=128, num_stages=3, loads="tma"),
        ("bf16", "sm_90", ("persistent", "tma")): spec(block_n=128, num_stages=3, loads="tma",
                                                       schedule="persistent"),
        ("bf16", "sm_80", ("persistent",)): spec(block_n=128, num_stages=3,
                                                 schedule="persistent"),
    }
    return {key: tile_facts(s, key[1]) for key, s in cases.items()}


def test_the_compiler_says_what_the_hand_rule_got_wrong_on_the_a800(compiled):
    a800 = compiled["bf16", "A800", ()]
    # 128x256x64 at 4 stages: 3 buffers on mma.sync (196,608 B by the old hand rule, refused)
    assert a800.fits and a800.exact and a800.smem_bytes == 3 * (128 + 256) * 64 * 2
    assert a800.source.startswith("Triton ") and a800.target == "sm_80"
    assert (a800.mma, a800.pipeline, a800.spill_bytes) == ("mma.sync", "cp.async", 0)
    assert 128 <= a800.registers <= 255 and a800.blocks_per_sm == 1
    h100 = compiled["bf16", "H100 SXM5 80GB", ()]
    assert h100.fits and h100.smem_bytes == 4 * (128 + 256) * 64 * 2  # wgmma: every stage
    assert (h100.mma, h100.pipeline, h100.smem_limit_bytes) == ("wgmma", "cp.async", 232448)


def test_a_ragged_shape_is_not_pipelined(compiled):
    ragged = compiled["bf16", "sm_80", ("ragged",)]  # 1000: rows not provably 16-aligned
    assert ragged.pipeline == "none" and ragged.fits


def test_the_estimate_follows_the_compilers_rule(compiled, monkeypatch):
    monkeypatch.setattr(backends, "HAS_TRITON", False)
    for (precision, target, extra), exact in compiled.items():
        if "persistent" in extra or not exact.fits:
            continue
        guess = tile_facts(spec(precision, **_tile_of(precision, extra)), target)
        assert not guess.exact and guess.source.startswith("estimate for ")
        assert guess.registers is None and guess.mma == exact.mma, (target, extra)
        assert guess.smem_bytes == pytest.approx(exact.smem_bytes, rel=0.01), (target, extra)


def _tile_of(precision, extra):
    if "ragged" in extra:
        return {"size": 1000, "num_stages": 3}
    if precision == "fp8":
        return {"block_n": 128, "num_warps": 4, "num_stages": 3,
                **({"fp8_acc": "fast"} if "fast" in extra else {})}
    if "tma" in extra:
        return {"block_n": 128, "num_stages": 3, "loads": "tma"}
    return {}


def test_fp8_compiles_for_ada_and_hopper_and_is_refused_for_the_a800(compiled):
    ada, hopper = compiled["fp8", "sm_89", ()], compiled["fp8", "sm_90", ()]
    assert ada.fits and ada.mma == "mma.sync"
    assert hopper.fits and hopper.mma == "wgmma"  # precise accumulation keeps wgmma (32-deep)
    fast = compiled["fp8", "sm_90", ("fast",)]
    assert fast.mma == "wgmma" and fast.registers < hopper.registers  # no second accumulator
    refused = tile_facts(spec("fp8", block_n=128, num_warps=4, num_stages=3), "A800")
    assert not refused.fits and refused.reason.startswith("precision: fp8 needs compute "
                                                          "capability >= 8.9")
    assert "fp8e4nv not supported" in refused.reason  # the compiler's own word


def test_the_hopper_variants_compile_for_sm90_and_tma_is_refused_before(compiled):
    tma = compiled["bf16", "sm_90", ("tma",)]
    assert tma.fits and (tma.pipeline, tma.mma) == ("TMA", "wgmma")
    both = compiled["bf16", "sm_90", ("persistent", "tma")]
    assert both.fits and both.pipeline == "TMA"
    assert compiled["bf16", "sm_80", ("persistent",)].fits  # a persistent loop runs anywhere
    no_tma = tile_facts(spec(block_n=128, num_stages=3, loads="tma"), "A800")
    assert not no_tma.fits and "Tensor Memory Accelerator of Hopper" in no_tma.reason
    unaligned = tile_facts(spec(size=1001, block_n=128, num_stages=3, loads="tma"), "sm_90")
    assert "multiple of 16 bytes" in unaligned.reason and "pad k and n" in unaligned.reason


def test_a_compile_is_cached_per_triton_kernel_config_and_target(compiled, monkeypatch):
    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(facts_mod, "compile_raw", no_compiling)
    again = tile_facts(spec(), "A800")  # from the session's cache file
    assert again == compiled["bf16", "A800", ()]
    key = facts_mod._Cache.key(spec(), resolve_target("A800"))
    assert '"target": "sm_80"' in key and '"triton": ' in key and '"kernel": ' in key
    assert key != facts_mod._Cache.key(spec(), resolve_target("sm_90"))
    assert key == facts_mod._Cache.key(spec(size=8192), resolve_target("A800"))  # same code


def test_occupancy_follows_cudas_calculator():
    a800 = arch_limits((8, 0))
    # 8 warps x 255 registers: 8160 per warp -> 8192; 16384 per quarter holds 2 warps -> 1 block
    occ = occupancy(a800, num_warps=8, registers_per_thread=255, smem_bytes=147456)
    assert (occ.blocks_per_sm, occ.by_registers, occ.by_smem) == (1, 1, 1)
    small = occupancy(a800, num_warps=4, registers_per_thread=64, smem_bytes=16384)
    # 17408 B per block (+1 KiB reserved) -> 9 of 164 KiB; 64 x 32 = 2048 regs -> 8 per quarter
    assert (small.by_smem, small.by_registers, small.by_warps) == (9, 8, 16)
    assert small.blocks_per_sm == 8 and small.limited_by == "registers"
    over = occupancy(a800, num_warps=4, registers_per_thread=64, smem_bytes=170000)
    assert over.blocks_per_sm == 0 and over.limited_by == "shared memory"


def test_the_estimate_without_triton_counts_triton_s_buffers():
    assert estimate(spec(), (8, 0))["smem_bytes"] == 3 * 384 * 64 * 2  # stages - 1
    assert estimate(spec(), (9, 0))["smem_bytes"] == 4 * 384 * 64 * 2  # wgmma: every stage
    assert estimate(spec("fp32"), (9, 0))["mma"] == "FMA (no tensor cores)"


def test_check_tiles_prints_the_compilers_figures_for_every_config(compiled, capsys):
    code = main(["check", "tiles", "--card", "A800", "--precision", "bf16", "--block-m", "128",
                 "--block-n", "256", "--block-k", "64", "--num-warps", "8", "--num-stages",
                 "4", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["target"] == "A800 (sm_80)" and out["sm_count"] == 108
    (row,) = out["rows"]
    assert row["smem_bytes"] == compiled["bf16", "A800", ()].smem_bytes
    assert row["waves"] == 5 and row["predicted_efficiency"] == pytest.approx(512 / 540)
    code = main(["check", "tiles", "--card", "A800", "--precision", "bf16", "--block-m", "128",
                 "--block-n", "256", "--block-k", "64", "--num-warps", "8", "--num-stages",
                 "4"])
    text = capsys.readouterr().out
    assert "A800 (sm_80), 108 SMs; bf16 4096x4096x4096; 1 of 1 configs fit" in text
    assert "147,456" in text and "mma.sync" in text


def test_check_tiles_refuses_an_unknown_card(capsys):
    assert main(["check", "tiles", "--card", "B9000"]) == 2
    assert "unknown target 'B9000'" in capsys.readouterr().err


@pytest.mark.parametrize("card, spec_", [
    ("A800", MatmulSpec(1000, 1000, 1000, "bf16", "triton")),  # ragged: ints not divisible
    ("H100 SXM5 80GB", MatmulSpec(4096, 4096, 4096, "fp8", "triton", block_m=128, block_n=128,
                                  block_k=128, num_warps=8)),
    ("H100 SXM5 80GB", MatmulSpec(4096, 4096, 4096, "bf16", "triton", block_m=128, block_n=128,
                                  block_k=64, num_warps=8, schedule="persistent", loads="tma")),
], ids=["a800-ragged-bf16", "h100-fp8", "h100-persistent-tma"])
def test_the_facts_are_the_kernel_a_launch_builds(card, spec_):
    """The installed Triton's JIT, driven as a launch drives it, builds the kernel the
    compile-only facts describe: the same hash (so the same specialisation and options)."""
    target = resolve_target(card)
    facts, jit = tile_facts(spec_, target), compile_like_a_launch(spec_, target)
    assert facts.exact and facts.kernel_hash == jit.hash
    assert facts.smem_bytes == jit.metadata.shared


def test_check_tiles_reports_the_spills_a_launch_would_count(capsys):
    """fp32's 128x128 FMA tile runs out of registers on sm_80: ptxas spills into the stack
    frame, which the driver reports as the kernel's local memory (a launch's n_spills x 4)."""
    args = ["check", "tiles", "--card", "A800", "--precision", "fp32", "--size", "1000",
            "--block-m", "128", "--block-n", "128", "--block-k", "32", "--num-warps", "4",
            "--num-stages", "3"]
    assert main([*args, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    from triton import knobs

    spec_ = MatmulSpec(1000, 1000, 1000, "fp32", "triton", block_m=128, block_n=128,
                       block_k=32, num_warps=4, num_stages=3)
    jit = compile_like_a_launch(spec_, resolve_target("A800"))
    usage = _cuobjdump(knobs.nvidia.cuobjdump.path, jit.asm["cubin"])
    assert usage["REG"] == 255 and usage["STACK"] + usage["LOCAL"] > 0
    assert row["registers"] == usage["REG"]
    assert row["spill_bytes"] == usage["STACK"] + usage["LOCAL"] > 0
    assert main(args) == 0
    assert f"{row['spill_bytes']}B" in capsys.readouterr().out


def _cuobjdump(path, cubin: bytes) -> dict:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "k.cubin"
        file.write_bytes(cubin)
        text = subprocess.run([path, "--dump-resource-usage", str(file)], capture_output=True,
                              text=True, check=True).stdout
    return {key: int(value) for key, value in re.findall(r"(REG|STACK|LOCAL):(\d+)", text)}


def test_the_gpu_tests_refused_config_is_over_every_cards_limit():
    """The gpu test of a device's shared-memory limit (tests/test_tiled_matmul.py) refuses
    this config on whatever card runs it: over the limit of each, and quick to compile."""
    over = spec("fp16", num_stages=6)
    for card in ("A800", "H100 SXM5 80GB"):  # sm_80, sm_90: the cards it runs on
        facts = tile_facts(over, card)
        assert not facts.fits and facts.reason.startswith("shared memory: "), (card, facts)
