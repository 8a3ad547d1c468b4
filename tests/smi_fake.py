"""An NVML fake (debtorch/nvmlfake.py's format) derived from an ``nvidia-smi -q -x``
document: test tooling for fixture machines (tests/hosts/build_gpu_fixtures.py).

Which NVML call answers which GPU fact, with which arguments and in which part of its
answer, is read from :data:`debtorch.facts.nvidia.GPU_FIELDS`; this module only knows how
to write a fact back as the NVML answer it was read from (:data:`TO_NVML`, the inverse of
each ``from_nvml`` converter).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from debtorch.facts import nvidia
from debtorch.facts.nvidia import COMPUTE_MODES, GPU_FIELDS, NOT_SUPPORTED, THROTTLE_BITS, GpuField, parse_smi_xml
from debtorch.nvmlfake import FORMAT, NVML_ERROR_NOT_SUPPORTED

NOT_SUPPORTED_ANSWER = {"nvml_error": NVML_ERROR_NOT_SUPPORTED}
NO_INSTANCE = 0xFFFFFFFF      # gpuInstanceId / computeInstanceId of a process outside MIG


def _capability(text: str) -> list[int]:
    """"8.6" as NVML's (major, minor)."""
    major, minor = str(text).split(".")
    return [int(major), int(minor)]


def _device_id(hex_text: str) -> int:
    """nvidia-smi's "20B010DE" as nvmlPciInfo_t.pciDeviceId."""
    return int(hex_text, 16)


def _enabled(on: bool) -> int:
    return int(bool(on))


def _page_addresses(count: int) -> list[int]:
    """Retired pages: their addresses are not in the XML; stand-ins keep the count."""
    return [0x1000 * (n + 1) for n in range(int(count))]


def _reason_mask(names: list[str]) -> int:
    bits = {name: bit for bit, name in THROTTLE_BITS}
    mask = 0
    for name in names:
        mask |= bits.get(name, 0)
    return mask


def _milliwatts(watts: float) -> int:
    return int(round(watts * 1000))


def _compute_mode(mode: str) -> int:
    return {name: value for value, name in COMPUTE_MODES.items()}.get(mode, 0)


def _process_infos(processes: list[dict]) -> list[dict]:
    return [{"pid": p["pid"], "usedGpuMemory": p["used_memory"], "gpuInstanceId": NO_INSTANCE,
             "computeInstanceId": NO_INSTANCE} for p in processes]


# from_nvml converter -> the NVML value it reads the fact from.  A GPU field with a new converter
# needs its inverse here: from_smi_xml raises a KeyError naming the field until it has one.
TO_NVML: dict[Callable[[Any], Any], Callable[[Any], Any]] = {
    nvidia._text: str,
    nvidia._bus_address: str,            # the same part as pci_bus_id's, which comes first and is kept
    nvidia._device_id_hex: _device_id,
    nvidia._cc_text: _capability,
    nvidia._is_one: _enabled,
    nvidia._watts_of_milliwatts: _milliwatts,
    nvidia._compute_mode: _compute_mode,
    nvidia._nvml_processes: _process_infos,
    nvidia.decode_throttle_reasons: _reason_mask,
    int: int,
    len: _page_addresses,
}


def _calls() -> dict[tuple[tuple[str, ...], tuple[int, ...]], list[GpuField]]:
    """The GPU fields NVML answers, by (call names, arguments), in GPU_FIELDS' order."""
    calls: dict[tuple[tuple[str, ...], tuple[int, ...]], list[GpuField]] = {}
    for f in GPU_FIELDS:
        if f.nvml is not None:
            names = (f.nvml,) if isinstance(f.nvml, str) else f.nvml
            calls.setdefault((names, f.args), []).append(f)
    return calls


def _to_nvml(f: GpuField, value: Any) -> Any:
    try:
        inverse = TO_NVML[f.from_nvml]
    except KeyError:
        raise KeyError(f"tests/smi_fake.py: no TO_NVML inverse for {f.name}'s converter {f.from_nvml!r}") from None
    return inverse(value)


def _answer(fields: list[GpuField], g: dict) -> Any:
    """One call's answer from the facts of the fields it gives: the whole answer, a struct's
    attributes (a dict) or a tuple's items (a list) by each field's ``part``."""
    known = [f for f in fields if g.get(f.name) is not None]
    if fields[0].part is None:
        return _to_nvml(fields[0], g[fields[0].name])
    if isinstance(fields[0].part, str):
        struct: dict = {}
        for f in known:
            struct.setdefault(f.part, _to_nvml(f, g[f.name]))
        return struct
    items: list = [None] * (max(int(f.part or 0) for f in fields) + 1)
    for f in known:
        items[int(f.part or 0)] = _to_nvml(f, g[f.name])
    return items


def _record(dev: dict, name: str, args: tuple[int, ...], answer: Any) -> None:
    if args:
        dev.setdefault(name, {})[",".join(str(a) for a in args)] = answer
    else:
        dev[name] = answer


def _device(g: dict) -> dict:
    """One GPU of the XML as the fake's device: a call answers where its first field is known, says
    NOT_SUPPORTED where nvidia-smi said N/A, and is not recorded where nvidia-smi said nothing."""
    unknown = g.get("unknown") or {}
    dev: dict = {"nvmlDeviceGetIndex": g["index"]}
    for (names, args), fields in _calls().items():
        first = fields[0].name
        if g.get(first) is not None:
            answer = _answer(fields, g)
        elif unknown.get(first) == NOT_SUPPORTED:
            answer = NOT_SUPPORTED_ANSWER
        else:
            continue
        for name in names:
            _record(dev, name, args, answer)
    pci = dev.get("nvmlDeviceGetPciInfo")
    if isinstance(pci, dict) and "busId" in pci:
        pci.update(_pci_location(pci["busId"]))
        pci.setdefault("pciDeviceId", 0)
    # A single GPU from nvidia-smi: no NVLink recorded, which NVML says as NOT_SUPPORTED.
    dev["nvmlDeviceGetNvLinkState"] = {"*": NOT_SUPPORTED_ANSWER}
    return dev


def _pci_location(bus: str) -> dict:
    """The rest of nvmlPciInfo_t, from its bus id ("00000000:01:00.0")."""
    parts = bus.split(":")
    return {"busIdLegacy": bus[-12:] if len(bus) >= 12 else bus,
            "domain": int(parts[0], 16) if len(parts) == 3 else 0,
            "bus": int(parts[-2], 16) if len(parts) >= 2 else 0,
            "device": int(parts[-1].split(".")[0], 16) if parts else 0,
            "pciSubSystemId": 0}


def from_smi_xml(xml_text: str, compute_capability: Optional[dict] = None, source: str = "nvidia-smi -q -x") -> dict:
    """An NVML fake derived from an ``nvidia-smi -q -x`` document.

    What nvidia-smi shows as N/A becomes NOT_SUPPORTED; what it does not show
    stays unrecorded.  The XML has no compute capability: pass
    ``compute_capability`` ({uuid or pci bus id or name: "8.6"}) to add it.
    """
    parsed = parse_smi_xml(xml_text)
    if parsed.get("error"):
        raise ValueError(parsed["error"])
    capabilities = compute_capability or {}
    system: dict = {"nvmlDeviceGetCount": len(parsed["gpus"])}
    if parsed.get("driver_version"):
        system["nvmlSystemGetDriverVersion"] = parsed["driver_version"]
    cuda = parsed.get("cuda_driver_version")
    if cuda and "." in cuda:
        maj, mnr = cuda.split(".", 1)
        if maj.isdigit() and mnr.isdigit():
            system["nvmlSystemGetCudaDriverVersion"] = int(maj) * 1000 + int(mnr) * 10
            system["nvmlSystemGetCudaDriverVersion_v2"] = system["nvmlSystemGetCudaDriverVersion"]
            if parsed.get("driver_version"):
                # NVML names its version "<CUDA major>.<driver version>" (e.g. 12.535.54.03).
                system["nvmlSystemGetNVMLVersion"] = f"{maj}.{parsed['driver_version']}"
    devices = []
    for g in parsed["gpus"]:
        cc = capabilities.get(g.get("uuid")) or capabilities.get(g.get("pci_bus_id")) or capabilities.get(g.get("name"))
        devices.append(_device({**g, "compute_capability": cc} if cc else g))
    return {"format": FORMAT, "source": source, "init_error": None, "system": system, "devices": devices,
            "pairs": {}}
