"""Byte sizes: one formatter and one parser for the whole lab."""

import pytest

from a800lab.core.units import GIB, MIB, byte_unit, format_bytes, format_size, parse_size


def test_sizes_read_as_nccl_tests_writes_them():
    assert format_size(1024) == "1 KiB"
    assert format_size(3 * MIB) == "3 MiB"
    assert format_size(GIB) == "1 GiB"
    assert format_size(1.5 * GIB) == "1.5 GiB"
    assert format_size(100) == "100 B"


def test_measured_amounts_keep_one_decimal():
    assert format_bytes(60397977) == "57.6 MiB"
    assert format_bytes(1.25 * GIB) == "1.2 GiB"
    assert format_bytes(512) == "512 bytes"
    assert byte_unit(5e9) == (float(GIB), "GiB") and byte_unit(10) == (1.0, "bytes")


@pytest.mark.parametrize(("text", "size"), [("4096", 4096), ("4K", 4096), ("64MiB", 64 * MIB),
                                            ("1g", GIB), (" 2M ", 2 * MIB)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["12Q", "", "1.5M", "-4K", "M"])
def test_parse_size_names_what_it_refused(text):
    with pytest.raises(ValueError, match="give bytes or a number with K, M or G"):
        parse_size(text)
