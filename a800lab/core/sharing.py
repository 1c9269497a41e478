"""Is this machine's GPU shared between jobs? MIG (a mode NVML reports per GPU) and MPS (a
daemon: its control process under /proc, or its pipe directory), read only.

    print(describe_sharing(sharing_status()))
"""

import os
from pathlib import Path

MPS_PIPE_DEFAULT = "/tmp/nvidia-mps"
_MPS_NAMES = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")


def mps_processes(proc: Path = Path("/proc")) -> dict[str, list[int]]:
    """PIDs of MPS control daemons and servers visible under `proc`."""
    found: dict[str, list[int]] = {name: [] for name in _MPS_NAMES}
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:  # the process ended while we looked, or is not ours to read
            continue
        name = os.path.basename(argv0)
        if name in found:
            found[name].append(int(entry.name))
    return found


def mps_status(proc: Path = Path("/proc"), environ: dict | None = None) -> dict:
    """What can be seen of MPS here, without talking to it."""
    environ = os.environ if environ is None else environ
    pipe_dir = environ.get("CUDA_MPS_PIPE_DIRECTORY", MPS_PIPE_DEFAULT)
    processes = mps_processes(proc)
    return {
        "control_running": bool(processes["nvidia-cuda-mps-control"]),
        "servers": processes["nvidia-cuda-mps-server"],
        "pipe_directory": pipe_dir,
        "control_pipe_present": (Path(pipe_dir) / "control").exists(),
        "active_thread_percentage": environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
    }


def mig_status(nvml=None) -> list[dict] | str:
    """Per GPU: NVML index, name and whether MIG is on; a sentence when no GPU can be read."""
    from .device import discover_gpus
    from .nvml import NotAvailable

    gpus = discover_gpus(nvml=nvml)
    if isinstance(gpus, NotAvailable):
        return f"no GPU to ask: {gpus.reason}"
    return [{"gpu": g.index, "name": str(g.name),
             "mig_enabled": g.mig_enabled if isinstance(g.mig_enabled, bool) else
             str(g.mig_enabled)} for g in gpus]


def sharing_status(nvml=None, proc: Path = Path("/proc"), environ: dict | None = None) -> dict:
    """{"mig": mig_status(), "mps": mps_status()}: read only, never changes a mode."""
    return {"mig": mig_status(nvml), "mps": mps_status(proc, environ)}


def describe_sharing(status: dict) -> str:
    """The status in a few plain lines."""
    lines = []
    mig = status["mig"]
    if isinstance(mig, str):
        lines.append(f"MIG: {mig}")
    else:
        for gpu in mig:
            state = {True: "on (CUDA sees its instances, not the whole GPU)",
                     False: "off"}.get(gpu["mig_enabled"], f"unknown ({gpu['mig_enabled']})")
            lines.append(f"MIG on GPU {gpu['gpu']} ({gpu['name']}): {state}")
    mps = status["mps"]
    if mps["control_running"] or mps["control_pipe_present"]:
        servers = f", {len(mps['servers'])} server(s) with clients" if mps["servers"] else ""
        limit = mps["active_thread_percentage"]
        lines.append(f"MPS: on (control daemon{' seen' if mps['control_running'] else ''}, "
                     f"pipe directory {mps['pipe_directory']}{servers}); CUDA processes "
                     "started now share the GPU through it"
                     + (f", each limited to {limit}% of the SMs" if limit else ""))
    else:
        lines.append(f"MPS: off (no nvidia-cuda-mps-control process, no control pipe in "
                     f"{mps['pipe_directory']}); processes time-slice a shared GPU")
    return "\n".join(lines)
