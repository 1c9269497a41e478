"""GPU memory health, read only: ECC counters, retired pages and remapped rows, with a verdict
per GPU ("ok", "watch", "drain") and what to do about it.

    print(format_health(health_report()))     # what `python -m a800lab health` prints
"""

from typing import Any

from ..core.device import discover_gpus
from ..core.doctor import format_reading, table_lines
from ..core.nvml import (
    NotAvailable,
    device_handle,
    is_not_available,
    nvml_call,
    nvml_const,
    to_jsonable,
)

VERDICTS = ("ok", "watch", "drain")


def _remapped_rows(handle: Any, nvml: Any) -> Any:
    rows = nvml_call("nvmlDeviceGetRemappedRows", handle, nvml=nvml)
    if isinstance(rows, NotAvailable):
        return rows
    correctable, uncorrectable, pending, failure = rows
    return {"correctable": int(correctable), "uncorrectable": int(uncorrectable),
            "pending": bool(pending), "failure": bool(failure)}


def _retired_pages(handle: Any, nvml: Any) -> Any:
    counts = {}
    for key, cause in (("single_bit", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
                       ("double_bit", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR")):
        pages = nvml_call("nvmlDeviceGetRetiredPages", handle, nvml_const(cause, nvml), nvml=nvml)
        if isinstance(pages, NotAvailable):
            return pages
        counts[key] = len(pages)
    pending = nvml_call("nvmlDeviceGetRetiredPagesPendingStatus", handle, nvml=nvml)
    counts["pending"] = pending if isinstance(pending, NotAvailable) else bool(pending)
    return counts


def _count(value: Any) -> int:
    return 0 if value is None or is_not_available(value) else int(value)


def memory_verdict(gpu: dict) -> tuple[str, list[str]]:
    """(verdict, reasons) of one GPU entry of health_report (also re-read JSON)."""
    i, reasons, verdict = gpu["index"], [], "ok"

    def worse(level: str, text: str) -> None:
        nonlocal verdict
        verdict = max(verdict, level, key=VERDICTS.index)
        reasons.append(text)

    ecc, rows, pages = gpu["ecc_errors"], gpu["remapped_rows"], gpu["retired_pages"]
    if isinstance(rows, dict) and not is_not_available(rows):
        if rows["failure"]:
            worse("drain", f"GPU {i}: row remapping failed (no spare rows left): drain it and "
                           "have it replaced")
        if rows["pending"]:
            worse("watch", f"GPU {i}: a row remap is pending: it takes effect at the next GPU "
                           f"reset (when idle: nvidia-smi -r -i {i}, or a reboot)")
        if rows["uncorrectable"]:
            worse("watch", f"GPU {i}: {rows['uncorrectable']} rows remapped after uncorrectable "
                           f"errors (correctable: {rows['correctable']}); watch whether it grows")
    if isinstance(pages, dict) and not is_not_available(pages):
        if pages["pending"] is True:
            worse("watch", f"GPU {i}: page retirement pending: reboot (or reset the GPU) to "
                           "retire the pages")
        if pages["double_bit"]:
            worse("watch", f"GPU {i}: {pages['double_bit']} pages retired after double-bit "
                           "errors")
    if _count(ecc.get("volatile_uncorrected")):
        worse("drain", f"GPU {i}: {_count(ecc['volatile_uncorrected'])} uncorrected ECC errors "
                       "since the driver loaded: jobs on it may crash or compute on bad data; "
                       f"drain it and check nvidia-smi -q -d ECC,ROW_REMAPPER -i {i}")
    elif _count(ecc.get("aggregate_uncorrected")):
        worse("watch", f"GPU {i}: {_count(ecc['aggregate_uncorrected'])} uncorrected ECC errors "
                       "in its lifetime, none since the driver loaded")
    if gpu["ecc_enabled"] is False:
        worse("watch", f"GPU {i}: ECC is off, so memory errors go unnoticed (nvidia-smi -e 1 "
                       "-i N and a reboot turn it on)")
    return verdict, reasons


def health_report(nvml: Any = None, cuda_properties: list | None = None) -> dict:
    """Every GPU's ECC mode and counters, remapped rows and retired pages, with verdicts."""
    gpus = discover_gpus(nvml=nvml, cuda_properties=cuda_properties)
    if isinstance(gpus, NotAvailable) or not gpus:
        why = gpus.reason if isinstance(gpus, NotAvailable) else "NVML lists no GPUs"
        return {"gpu_found": False, "no_gpu_reason": why, "gpus": [],
                "advice": [f"No NVIDIA GPU found ({why}): nothing to check."]}
    entries = []
    for g in gpus:
        handle = device_handle(g.index, nvml)
        entry = to_jsonable({"index": g.index, "name": g.name, "uuid": g.uuid,
                             "ecc_enabled": g.ecc_enabled, "ecc_errors": g.ecc_errors,
                             "remapped_rows": _remapped_rows(handle, nvml),
                             "retired_pages": _retired_pages(handle, nvml)})
        entry["verdict"], entry["reasons"] = memory_verdict(entry)
        entries.append(entry)
    advice = [r for e in entries for r in e["reasons"]]
    return {"gpu_found": True, "no_gpu_reason": "", "gpus": entries,
            "advice": advice or ["No memory errors, pending remaps or retirements found."]}


def _rows_text(rows: Any) -> str:
    if is_not_available(rows):
        return "n/a"
    flags = [name for name in ("pending", "failure") if rows[name]]
    return f"{rows['correctable']}/{rows['uncorrectable']}" + (f" ({', '.join(flags)})"
                                                                if flags else "")


def _pages_text(pages: Any) -> str:
    if is_not_available(pages):
        return "n/a"
    pending = " (pending)" if pages["pending"] is True else ""
    return f"{pages['single_bit']}/{pages['double_bit']}{pending}"


def format_health(report: dict) -> str:
    if not report["gpu_found"]:
        return "\n".join(report["advice"])
    headers = ["GPU", "name", "ECC", "uncorrected vol/agg", "corrected vol/agg",
               "remapped rows corr/unc", "retired pages sbe/dbe", "verdict"]
    rows = []
    for g in report["gpus"]:
        e = g["ecc_errors"]
        rows.append([str(g["index"]), format_reading(g["name"]), format_reading(g["ecc_enabled"]),
                     f"{format_reading(e.get('volatile_uncorrected'))}/"
                     f"{format_reading(e.get('aggregate_uncorrected'))}",
                     f"{format_reading(e.get('volatile_corrected'))}/"
                     f"{format_reading(e.get('aggregate_corrected'))}",
                     _rows_text(g["remapped_rows"]), _pages_text(g["retired_pages"]),
                     g["verdict"]])
    advice = [f"  - {a}" for a in report["advice"]]
    return "\n".join([*table_lines(headers, rows), "", "Memory health:", *advice])
