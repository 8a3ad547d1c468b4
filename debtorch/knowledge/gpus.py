"""GPUs by name and by PCI device id (checks/gpus.toml, checks/pci.toml): their compute capability,
and the pci.toml row of a device id in any form a report prints it."""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from debtorch.knowledge.names import gpu_tokens
from debtorch.knowledge.tables import Row, cc_of, load


def capability_for_name(gpu_name: Any) -> Optional[str]:
    """Compute capability ("8.6") for a GPU name as nvidia-smi, NVML or collect_env
    print it ("NVIDIA GeForce RTX 3090", "Tesla T4", "NVIDIA A100-SXM4-80GB",
    "NVIDIA GeForce RTX 4070 Laptop GPU"), or None when unknown or ambiguous."""
    if not isinstance(gpu_name, str):
        return None
    tokens = gpu_tokens(gpu_name)
    if not tokens:
        return None
    hits: Dict[int, set] = {}
    for key, cc, _name in load().gpu_keys:
        n = len(key)
        if all(t.isdigit() for t in key):
            # A bare model number ("210": GeForce 210) is that GPU only as the whole name,
            # never inside another product's ("NVIDIA PG509-210" is an A100 board).
            if tuple(tokens) == key:
                hits.setdefault(n, set()).add(cc)
        elif any(tuple(tokens[i:i + n]) == key for i in range(len(tokens) - n + 1)):
            hits.setdefault(n, set()).add(cc)
    found = hits[max(hits)] if hits else set()
    table = next(iter(found)) if len(found) == 1 else None
    if hits and max(hits) == len(tokens):
        return table        # gpus.toml names this very GPU (NVIDIA's tables)
    # pci.ids' exact product name outranks a partial match of gpus.toml: it names boards and
    # OEM parts ("PH402 SKU 200": GP100) and the products made on another chip than the
    # name's family ("GeForce RTX 3050 A Laptop GPU": AD106/AD107, Ada).  A name pci.ids
    # gives on chips of different capability keeps gpus.toml's answer if it is one of them.
    if exact := load().pci_names.get(tuple(tokens)):
        if len(exact) == 1:
            return next(iter(exact))
        return table if table in exact else None
    return table



NVIDIA_PCI_VENDOR = "10de"


def pci_device_id(value: Any) -> Optional[str]:
    """The NVIDIA device id ("2684") in the forms reports print it: "2684",
    "0x2684", "10de:2684" (lspci -n), "0x268410DE" (nvidia-smi's pci_device_id:
    device then vendor), "0x10de2684"; None when it is not an NVIDIA device id."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if ":" in text:
        vendor, _, device = text.partition(":")
        vendor = vendor[2:] if vendor.startswith("0x") else vendor
        text = device if vendor == NVIDIA_PCI_VENDOR else ""
    elif len(text) == 8:
        if text.endswith(NVIDIA_PCI_VENDOR):
            text = text[:4]
        elif text.startswith(NVIDIA_PCI_VENDOR):
            text = text[4:]
        else:
            text = ""
    return text if re.fullmatch(r"[0-9a-f]{4}", text) else None


def pci_device(device_id: Any) -> Optional[Row]:
    """The checks/pci.toml row (id, name, chip, cc, source) of an NVIDIA PCI
    device id in any form :func:`pci_device_id` reads, or None."""
    row = load().pci_devices.get(pci_device_id(device_id) or "")
    return dict(row) if row else None


def capability_for_pci_id(device_id: Any) -> Optional[str]:
    """Compute capability ("8.9") of the GPU with this PCI device id: the fallback
    for a GPU nvidia-smi names "Graphics Device" (a driver older than the GPU).
    None for an unknown id or text that is not one."""
    row = pci_device(device_id)
    return cc_of(row["cc"]) if row else None


