"""An NVML fake (debtorch/nvmlfake.py's format) derived from an ``nvidia-smi -q -x``
document: test tooling for fixture machines (tests/hosts/build_gpu_fixtures.py)."""

from __future__ import annotations

from typing import Optional

from debtorch.facts.nvidia import NOT_SUPPORTED, THROTTLE_BITS, parse_smi_xml
from debtorch.nvmlfake import FORMAT, NVML_ERROR_NOT_SUPPORTED


def _err(code: int) -> dict:
    return {"nvml_error": code}


def from_smi_xml(xml_text: str, compute_capability: Optional[dict] = None, source: str = "nvidia-smi -q -x") -> dict:
    """An NVML fake derived from an ``nvidia-smi -q -x`` document.

    What nvidia-smi shows as N/A becomes NOT_SUPPORTED; what it does not show
    stays unrecorded.  The XML has no compute capability: pass
    ``compute_capability`` ({uuid or pci bus id: "8.6"}) to add it.
    """
    parsed = parse_smi_xml(xml_text)
    if parsed.get("error"):
        raise ValueError(parsed["error"])
    compute_capability = compute_capability or {}
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
    bits = {name: bit for bit, name in THROTTLE_BITS}
    devices = []
    for g in parsed["gpus"]:
        unknown = g.get("unknown") or {}
        dev: dict = {}

        def put(call, fields, build):
            fields = fields if isinstance(fields, tuple) else (fields,)
            if all(g.get(f) is not None for f in fields):
                dev[call] = build(*(g[f] for f in fields))
            elif any(unknown.get(f) == NOT_SUPPORTED for f in fields):
                dev[call] = _err(NVML_ERROR_NOT_SUPPORTED)

        put("nvmlDeviceGetName", "name", lambda v: v)
        put("nvmlDeviceGetUUID", "uuid", lambda v: v)
        dev["nvmlDeviceGetIndex"] = g["index"]
        if g.get("pci_bus_id"):
            bus = g["pci_bus_id"]
            parts = bus.split(":")
            dev["nvmlDeviceGetPciInfo"] = {
                "busIdLegacy": bus[-12:] if len(bus) >= 12 else bus,
                "domain": int(parts[0], 16) if len(parts) == 3 else 0,
                "bus": int(parts[-2], 16) if len(parts) >= 2 else 0,
                "device": int(parts[-1].split(".")[0], 16) if parts else 0,
                "pciDeviceId": int(g["pci_device_id"], 16) if g.get("pci_device_id") else 0,
                "pciSubSystemId": 0,
                "busId": bus,
            }
        cc = compute_capability.get(g.get("uuid")) or compute_capability.get(g.get("pci_bus_id")) \
            or compute_capability.get(g.get("name"))
        if cc:
            a, b = str(cc).split(".")
            dev["nvmlDeviceGetCudaComputeCapability"] = [int(a), int(b)]
        put("nvmlDeviceGetMemoryInfo", ("memory_total", "memory_free", "memory_used"),
            lambda t, f, u: {"total": t, "free": f, "used": u})
        put("nvmlDeviceGetCurrPcieLinkGeneration", "pcie_current_gen", int)
        put("nvmlDeviceGetMaxPcieLinkGeneration", "pcie_max_gen", int)
        put("nvmlDeviceGetCurrPcieLinkWidth", "pcie_current_width", int)
        put("nvmlDeviceGetMaxPcieLinkWidth", "pcie_max_width", int)
        put("nvmlDeviceGetPersistenceMode", "persistence_mode", lambda v: int(bool(v)))
        put("nvmlDeviceGetEccMode", ("ecc_mode_current", "ecc_mode_pending"), lambda c, p: [int(c), int(p)])
        ecc: dict = {}
        for key, field in (("1,0", "ecc_uncorrected_volatile"), ("1,1", "ecc_uncorrected_aggregate")):
            if g.get(field) is not None:
                ecc[key] = g[field]
            elif unknown.get(field) == NOT_SUPPORTED:
                ecc[key] = _err(NVML_ERROR_NOT_SUPPORTED)
        if ecc:
            dev["nvmlDeviceGetTotalEccErrors"] = ecc
        put("nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending", lambda v: int(bool(v)))
        pages: dict = {}
        for key, field in (("0", "retired_pages_single_bit"), ("1", "retired_pages_double_bit")):
            if g.get(field) is not None:
                # Page addresses are not in the XML: stand-ins keep the count.
                pages[key] = [0x1000 * (n + 1) for n in range(int(g[field]))]
            elif unknown.get(field) == NOT_SUPPORTED:
                pages[key] = _err(NVML_ERROR_NOT_SUPPORTED)
        if pages:
            dev["nvmlDeviceGetRetiredPages"] = pages
        put("nvmlDeviceGetRemappedRows",
            ("remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure"),
            lambda c, u, p, f: [int(c), int(u), int(bool(p)), int(bool(f))])
        if g.get("throttle_reasons") is not None:
            mask = 0
            for name in g["throttle_reasons"]:
                mask |= bits.get(name, 0)
            dev["nvmlDeviceGetCurrentClocksThrottleReasons"] = mask
            dev["nvmlDeviceGetCurrentClocksEventReasons"] = mask
        if g.get("temperature_c") is not None:
            dev["nvmlDeviceGetTemperature"] = {"0": g["temperature_c"]}
        put("nvmlDeviceGetPowerUsage", "power_draw_w", lambda w: int(round(w * 1000)))
        put("nvmlDeviceGetEnforcedPowerLimit", "power_limit_w", lambda w: int(round(w * 1000)))
        put("nvmlDeviceGetPowerManagementLimit", "power_limit_w", lambda w: int(round(w * 1000)))
        put("nvmlDeviceGetMigMode", ("mig_mode_current", "mig_mode_pending"), lambda c, p: [int(c), int(p)])
        modes = {"default": 0, "exclusive_thread": 1, "prohibited": 2, "exclusive_process": 3}
        put("nvmlDeviceGetComputeMode", "compute_mode", lambda m: modes.get(m, 0))
        put("nvmlDeviceGetComputeRunningProcesses", "processes",
            lambda ps: [{"pid": p["pid"], "usedGpuMemory": p["used_memory"], "gpuInstanceId": 0xFFFFFFFF,
                         "computeInstanceId": 0xFFFFFFFF} for p in ps])
        put("nvmlDeviceGetUtilizationRates", ("utilization_gpu", "utilization_memory"),
            lambda u, m: {"gpu": u, "memory": m})
        # A single GPU from nvidia-smi: no NVLink recorded, which NVML says as NOT_SUPPORTED.
        dev["nvmlDeviceGetNvLinkState"] = {"*": _err(NVML_ERROR_NOT_SUPPORTED)}
        devices.append(dev)
    return {"format": FORMAT, "source": source, "init_error": None, "system": system, "devices": devices,
            "pairs": {}}
