"""NVIDIA facts (first cut: PCI devices and the kernel module).

TODO(foundation helper): NVML, nvidia-smi fallback, topology, modules,
blacklists, Secure Boot.
"""

from __future__ import annotations

from debtorch.facts import Section
from debtorch.host import Host, Unavailable

NVIDIA_VENDOR = "0x10de"


def collect(host: Host, ctx) -> dict:
    sec = Section()
    devices = []
    try:
        names = host.listdir("/sys/bus/pci/devices")
    except Unavailable as exc:
        sec.unknown("pci_devices", exc.reason)
        names = []
    for addr in names:
        base = f"/sys/bus/pci/devices/{addr}"
        vendor = (host.try_read(f"{base}/vendor") or "").strip()
        if vendor != NVIDIA_VENDOR:
            continue
        cls = (host.try_read(f"{base}/class") or "").strip()
        try:
            driver = host.readlink(f"{base}/driver").rsplit("/", 1)[-1]
        except Unavailable:
            driver = None
        devices.append({"address": addr, "device_id": (host.try_read(f"{base}/device") or "").strip(),
                        "class": cls, "driver": driver})
    sec["pci_devices"] = devices
    return sec
