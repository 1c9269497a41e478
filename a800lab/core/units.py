"""Byte sizes in binary units, read and written the same way everywhere in the lab.

    format_bytes(60397977)   # "57.6 MiB"      format_size(3 * 2**20)   # "3 MiB"
    byte_unit(5e9)           # (2**30, "GiB")  parse_size("64M")        # 67108864
"""

import math

KIB, MIB, GIB = 2**10, 2**20, 2**30
_UNITS = (("GiB", GIB), ("MiB", MIB), ("KiB", KIB))
_PARSE = {"": 1, "K": KIB, "KIB": KIB, "M": MIB, "MIB": MIB, "G": GIB, "GIB": GIB}


def byte_unit(top_bytes: float) -> tuple[float, str]:
    """Divisor and name of the largest unit keeping `top_bytes` >= 1 ("bytes" below 1 KiB)."""
    for name, size in _UNITS:
        if abs(top_bytes) >= size:
            return float(size), name
    return 1.0, "bytes"


def format_bytes(n: float) -> str:
    """A measured amount in the largest unit that keeps it >= 1: "57.6 MiB", "1.2 GiB"."""
    scale, unit = byte_unit(n)
    return f"{n:.0f} bytes" if unit == "bytes" else f"{n / scale:.1f} {unit}"


def format_size(size_bytes: float) -> str:
    """A size as nccl-tests' -b/-e write it: 1024 -> "1 KiB", 3 * 2**20 -> "3 MiB", a fraction
    of a unit to 3 digits ("1.5 GiB"); below 1 KiB in bytes ("512 B")."""
    scale, unit = byte_unit(size_bytes)
    if unit == "bytes":
        return f"{size_bytes:.0f} B"
    value = size_bytes / scale
    return f"{value:.0f} {unit}" if math.isclose(value, round(value)) else f"{value:.3g} {unit}"


def parse_size(text: str) -> int:
    """"4096", "4K", "64MiB", "1G" -> bytes (binary units); ValueError naming the text."""
    value = str(text).strip().upper()
    digits = value.rstrip("KMGIB")
    unit = value[len(digits):]
    if not digits.isdigit() or unit not in _PARSE:
        raise ValueError(f"{text!r}: give bytes or a number with K, M or G, e.g. 64M")
    return int(digits) * _PARSE[unit]
