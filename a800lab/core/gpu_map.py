"""The one CUDA <-> NVML mapping, by UUID then PCI bus id: NVML numbers every GPU its own way
and ignores CUDA_VISIBLE_DEVICES, so a CUDA ordinal is never an NVML index.

    nvml_index("cuda:0")   # 3 under CUDA_VISIBLE_DEVICES=3; NotAvailable(reason) when none
    cuda_ordinal(3)        # 0 there
"""

import os
from typing import Any

import torch

from .backends import HAS_CUDA, why_unavailable
from .nvml import NotAvailable, device_count, device_handle, nvml_call, nvml_const


def cuda_device_properties(cuda_properties: list | None = None) -> list:
    """`cuda_properties` if given, else torch's properties of each CUDA device ([] without CUDA)."""
    if cuda_properties is not None:
        return cuda_properties
    if not HAS_CUDA:
        return []
    return [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]


def normalise_bus_id(bus_id: Any) -> str:
    """"00000000:07:00.0" or b"0000:07:00.0" -> "0000:07:00.0" (the sysfs spelling); ValueError
    for text that is not domain:bus:device.function."""
    text = (bus_id.decode(errors="replace") if isinstance(bus_id, bytes) else str(bus_id))
    try:
        domain, bus, devfn = text.strip().lower().split(":")  # ValueError unless three parts
        if "." not in devfn:
            raise ValueError(devfn)
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{devfn}"
    except ValueError:
        raise ValueError(f"{bus_id!r} is not a PCI bus id like '0000:07:00.0'") from None


def pci_bus_id(pci: Any) -> Any:
    """The bus id of an NVML nvmlPciInfo_t (busId, else busIdLegacy), or NotAvailable."""
    if isinstance(pci, NotAvailable):
        return pci
    raw = getattr(pci, "busId", b"") or getattr(pci, "busIdLegacy", b"")
    try:
        return normalise_bus_id(raw)
    except ValueError as exc:
        return NotAvailable(f"NVML gave no usable PCI bus id: {exc}")


def _uuid_key(uuid: Any) -> str:
    """NVML's "GPU-8f6c..." and torch's "8f6c..." -> "8f6c..."; "" for none or NotAvailable."""
    return str(uuid or "").strip().lower().removeprefix("gpu-")


def _torch_bus_id(props: Any) -> str | None:
    ids = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        return None  # a torch without the PCI ids, or a stand-in without them
    domain, bus, device = ids
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"  # NVIDIA GPUs are PCI function 0


def _mig_on(index: int, nvml: Any) -> bool:
    mode = nvml_call("nvmlDeviceGetMigMode", device_handle(index, nvml), nvml=nvml)
    return not isinstance(mode, NotAvailable) and mode[0] == nvml_const(
        "NVML_DEVICE_MIG_ENABLE", nvml)


def _identity(index: int, nvml: Any) -> tuple[Any, Any]:
    """(UUID, PCI bus id) of NVML GPU `index`, each NotAvailable where NVML cannot tell."""
    handle = device_handle(index, nvml)
    return (nvml_call("nvmlDeviceGetUUID", handle, nvml=nvml),
            pci_bus_id(nvml_call("nvmlDeviceGetPciInfo", handle, nvml=nvml)))


def _requested_ordinal(cuda_device: Any) -> int:
    if isinstance(cuda_device, torch.device):
        cuda_device = str(cuda_device)
    if isinstance(cuda_device, int) and not isinstance(cuda_device, bool) and cuda_device >= 0:
        return cuda_device
    if cuda_device == "cuda":
        return torch.cuda.current_device() if HAS_CUDA else 0
    if isinstance(cuda_device, str) and cuda_device.startswith("cuda:") and \
            cuda_device[5:].isdigit():
        return int(cuda_device[5:])
    raise ValueError(f"cuda_device={cuda_device!r}: use 'cuda' (torch's current device), "
                     "'cuda:N' or an int N, numbered as torch numbers CUDA devices")


def nvml_index(cuda_device: Any = "cuda", *, nvml: Any = None,
               cuda_properties: list | None = None) -> Any:
    """The NVML index of torch's `cuda_device` ("cuda" = the current device, "cuda:N" or N), or
    NotAvailable(reason); ValueError for anything that does not name a CUDA device."""
    ordinal = _requested_ordinal(cuda_device)
    props = cuda_device_properties(cuda_properties)
    if ordinal >= len(props):
        seen = f"torch sees {len(props)} CUDA device(s)" if props else \
            f"torch sees no CUDA device ({why_unavailable('cuda') or 'none is visible'})"
        return NotAvailable(f"there is no cuda:{ordinal}: {seen}")
    count = device_count(nvml)
    if isinstance(count, NotAvailable):
        return NotAvailable(f"cannot find cuda:{ordinal} in NVML: {count.reason}")
    gpus = [(index, *_identity(index, nvml)) for index in range(count)]
    key, bus = _uuid_key(getattr(props[ordinal], "uuid", "")), _torch_bus_id(props[ordinal])
    for index, uuid, _ in gpus:
        if key and _uuid_key(uuid) == key:
            return index
    for index, _, bus_id in gpus:
        if bus and bus_id == bus:
            if _mig_on(index, nvml):
                return NotAvailable(
                    f"cuda:{ordinal} is a MIG slice of NVML GPU {index} ({bus}); NVML's "
                    f"readings of GPU {index} cover all of its slices, not this one")
            return index
    return NotAvailable(f"no NVML GPU has the UUID or PCI bus id of cuda:{ordinal} "
                        f"(UUID {key or 'unknown'}, bus id {bus or 'unknown'})")


def cuda_ordinal_of(uuid: Any, bus_id: Any, *, mig_enabled: Any = False,
                    cuda_properties: list | None = None) -> Any:
    """torch's ordinal N (cuda:N) of the GPU with NVML `uuid` / `bus_id`, or NotAvailable."""
    props = cuda_device_properties(cuda_properties)
    if not props:
        return NotAvailable(f"torch sees no CUDA device: {why_unavailable('cuda') or 'none'}")
    if mig_enabled is True:
        return NotAvailable("MIG is on: torch sees its MIG slices (cuda:N each), not the GPU")
    key = _uuid_key(uuid)
    for ordinal, p in enumerate(props):
        if key and _uuid_key(getattr(p, "uuid", "")) == key:
            return ordinal
    for ordinal, p in enumerate(props):
        if isinstance(bus_id, str) and _torch_bus_id(p) == bus_id:
            return ordinal
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    why = f"CUDA_VISIBLE_DEVICES={visible}" if visible is not None else \
        "hidden by CUDA_VISIBLE_DEVICES?"
    return NotAvailable(f"not among the {len(props)} CUDA device(s) torch sees ({why})")


def cuda_ordinal(index: int, *, nvml: Any = None, cuda_properties: list | None = None) -> Any:
    """torch's ordinal N (cuda:N) of NVML GPU `index`, or NotAvailable(reason)."""
    uuid, bus = _identity(index, nvml)
    if isinstance(uuid, NotAvailable) and isinstance(bus, NotAvailable):
        return NotAvailable(f"NVML cannot identify GPU {index}: {uuid.reason}")
    return cuda_ordinal_of(uuid, bus, mig_enabled=_mig_on(index, nvml),
                           cuda_properties=cuda_properties)
