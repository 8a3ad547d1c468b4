"""The fingerprint of a machine and environment that settings were tuned on.

Written into the config's ``[fingerprint]`` table and compared with the
machine a training script runs on (the runtime warns when they differ).
Hostname-free: only what decides the settings (GPU models, driver, PyTorch
build, CPUs).  Torch-free; values are TOML-ready (no None: an unknown value
is left out, and a value left out on either side is not compared).
"""

from __future__ import annotations

import platform
from typing import Any, Optional

from debtorch.facts import get
from debtorch.tune.rules import cpu_bf16, gpus_of

# key -> what it is, for docs/tune.md and messages.
KEYS = {
    "arch": "machine architecture (x86_64, aarch64)",
    "cpu_model": "CPU model name",
    "usable_cpus": "CPUs this process may use (affinity and cgroup quota)",
    "cpu_bf16": "native bf16 features of the CPU (avx512_bf16, amx_bf16)",
    "gpus": "visible GPU models, in CUDA order",
    "driver": "NVIDIA driver version",
    "python": "Python version",
    "torch": "PyTorch version",
    "torch_cuda": "CUDA version PyTorch was built with ('' for a CPU build)",
}


def _driver(facts: dict) -> Optional[str]:
    for path in ("nvidia.driver_version", "nvidia.kernel_module.version"):  # NVML/nvidia-smi, else /proc
        v = get(facts, path)
        if isinstance(v, str) and v:
            return v
    return None


def from_facts(facts: dict) -> dict:
    """The fingerprint of the machine a facts document describes."""
    fp: dict[str, Any] = {}
    arch = get(facts, "os.arch")
    if arch:
        fp["arch"] = str(arch)
    model = get(facts, "cpu.model")
    if model:
        fp["cpu_model"] = str(model)
    usable = get(facts, "cpu.usable_cpus")
    if isinstance(usable, int) and not isinstance(usable, bool):
        fp["usable_cpus"] = usable
    bf16 = cpu_bf16(facts)
    if bf16 is not None:
        fp["cpu_bf16"] = bf16
    gpus = get(facts, "nvidia.gpus")
    if isinstance(gpus, list):
        fp["gpus"] = [str(g.get("name") or "unknown GPU") for g in gpus_of(facts)]
    elif get(facts, "nvidia.pci_devices") == []:
        fp["gpus"] = []  # no NVIDIA device on the PCI bus at all
    driver = _driver(facts)
    if driver:
        fp["driver"] = driver
    py = get(facts, "python.version")
    if py:
        fp["python"] = str(py)
    torch = get(facts, "python.torch")
    if isinstance(torch, dict) and torch.get("installed") and torch.get("version"):
        fp["torch"] = str(torch["version"])
        fp["torch_cuda"] = str(torch.get("cuda") or "")
    return fp


def current(torch_module: Any = None) -> dict:
    """The fingerprint of the machine this process runs on.

    Reads the CPU and NVIDIA facts through a live Host (files and NVML;
    nvidia-smi only where NVML fails on a machine with an NVIDIA GPU) and
    PyTorch from the imported module when given.
    """
    from debtorch import facts as facts_mod
    from debtorch.host import LiveHost

    host = LiveHost()
    try:
        doc = facts_mod.collect(host, facts_mod.Options(sections=("cpu", "nvidia", "env")))
    finally:
        host.close()
    doc["os"] = {"arch": platform.machine()}
    doc["python"] = {"version": platform.python_version()}
    if torch_module is not None:
        doc["python"]["torch"] = {"installed": True, "version": torch_module.__version__,
                                  "cuda": getattr(torch_module.version, "cuda", None)}
    return from_facts(doc)


def differences(tuned: dict, here: dict) -> list[str]:
    """What differs between two fingerprints, one short phrase each.

    Only keys present in both are compared: an unknown is not a difference.
    """
    out = []
    for key in KEYS:
        if key in tuned and key in here and tuned[key] != here[key]:
            out.append(f"{key} {_show(tuned[key])} -> {_show(here[key])}")
    return out


def _show(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]" if v else "none"
    if v == "":
        return "none"
    return str(v)
