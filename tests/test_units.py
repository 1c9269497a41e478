"""Byte sizes: one formatter and one parser for the whole lab. Every expected size is a literal
byte count (never the module's own constants): a wrong constant cannot test itself."""

import pytest
import torch

from a800lab.core import units
from a800lab.core.units import byte_unit, format_bytes, format_size, parse_size

ONE_GIB = 1_073_741_824   # 2**30 written out
ONE_MIB = 1_048_576


def test_the_units_are_powers_of_two():
    assert (units.KIB, units.MIB, units.GIB) == (1024, ONE_MIB, ONE_GIB)
    assert byte_unit(1_000_000_000) == (float(ONE_MIB), "MiB")  # 10**9 bytes: under 1 GiB
    assert format_bytes(1_000_000_000) == "953.7 MiB" and format_size(10**9) == "954 MiB"


def test_a_known_tensor_reads_as_its_bytes():
    tensor = torch.empty(256, 1024, 1024, dtype=torch.float32, device="meta")  # no memory used
    size = tensor.numel() * tensor.element_size()
    assert size == ONE_GIB and format_bytes(size) == "1.0 GiB" and format_size(size) == "1 GiB"
    half = torch.empty(1000, 1000, dtype=torch.bfloat16, device="meta")
    assert format_bytes(half.numel() * half.element_size()) == "1.9 MiB"  # 2,000,000 B


def test_sizes_read_as_nccl_tests_writes_them():
    assert format_size(1024) == "1 KiB"
    assert format_size(3_145_728) == "3 MiB"
    assert format_size(ONE_GIB) == "1 GiB"
    assert format_size(1_610_612_736) == "1.5 GiB"
    assert format_size(100) == "100 B"


def test_measured_amounts_keep_one_decimal():
    assert format_bytes(60397977) == "57.6 MiB"
    assert format_bytes(1_342_177_280) == "1.2 GiB"   # 1.25 GiB
    assert format_bytes(512) == "512 bytes"
    assert byte_unit(5e9) == (float(ONE_GIB), "GiB") and byte_unit(10) == (1.0, "bytes")


@pytest.mark.parametrize(("text", "size"), [("4096", 4096), ("4K", 4096), ("64MiB", 67_108_864),
                                            ("1g", ONE_GIB), (" 2M ", 2_097_152)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["12Q", "", "1.5M", "-4K", "M"])
def test_parse_size_names_what_it_refused(text):
    with pytest.raises(ValueError, match="give bytes or a number with K, M or G"):
        parse_size(text)
