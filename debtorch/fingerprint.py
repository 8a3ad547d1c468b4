"""The fingerprint of the machine settings were tuned on (the config's ``[fingerprint]``), compared with
the one a training script runs on.  Hostname-free: only what decides the settings.  Torch-free; values are
TOML-ready (an unknown value is left out, and a value left out on either side is not compared).
"""

from __future__ import annotations

import platform
from typing import Any, Optional, Union

from debtorch import facts as facts_mod
from debtorch.host import LiveHost
from debtorch.machine import Machine

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


def from_facts(facts: Union[dict, Machine]) -> dict[str, Any]:
    """The fingerprint of the machine a facts document (or its Machine view) describes."""
    m = facts if isinstance(facts, Machine) else Machine.from_facts(facts)
    fp: dict[str, Any] = {
        "arch": m.os.arch or None,
        "cpu_model": m.cpus.model or None,
        "usable_cpus": m.cpus.usable if m.cpus.known else None,
        "cpu_bf16": None if m.cpus.bf16 is None else list(m.cpus.bf16),
        "gpus": _gpus(m),
        "driver": m.driver.version or None,
        "python": None,
        "torch": None,
        "torch_cuda": None,
    }
    if py := m.get("python.version"):
        fp["python"] = str(py)
    if m.torch.installed and m.torch.version:
        fp["torch"] = m.torch.version
        fp["torch_cuda"] = m.torch.cuda or ""
    return {k: v for k, v in fp.items() if v is not None}


def _gpus(m: Machine) -> Optional[list[str]]:
    """The models of the GPUs CUDA will use, in its order; [] where the PCI bus shows no NVIDIA device
    at all; None where nothing tells."""
    if isinstance(m.get("nvidia.gpus"), list):
        return [g.name or "unknown GPU" for g in m.gpus.compute]
    if m.gpus.present is False:
        return []
    return None


def current(torch_module: Any = None) -> dict:
    """The fingerprint of the machine this process runs on: its CPU and NVIDIA facts through a live Host,
    PyTorch from the imported module when given."""
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
    """What differs between two fingerprints, one short phrase each; only keys present in both are
    compared (an unknown is not a difference)."""
    return [f"{key} {_show(tuned[key])} -> {_show(here[key])}" for key in KEYS
            if key in tuned and key in here and tuned[key] != here[key]]


def _show(v: Any) -> str:
    """A fingerprint's value in a phrase: a list in brackets, "none" for an empty one or ""."""
    if v in ("", []):
        return "none"
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    return str(v)
