"""Which areas of a report the facts let the doctor judge (docs/checks.md, "What the doctor cannot
judge"): "judged", "unknown" (``reason`` says what was missing) or "not-judged" (outside debtorch's
scope: a macOS or Windows host's OS).  An area whose facts are unknown must not look fine;
:func:`area_states` decides it, once, from the machine view, and the renderer only shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from debtorch.machine import Machine

JUDGED, UNKNOWN, NOT_JUDGED = "judged", "unknown", "not-judged"
# What a GPU entry must give for its health to be judged (ECC, clocks, memory, PCIe).
GPU_HEALTH = ("memory_total", "persistence_mode", "ecc_mode_current", "throttle_reasons", "pcie_current_gen",
              "temperature_c", "ecc_uncorrected_volatile")


@dataclass(frozen=True)
class AreaState:
    state: str
    reason: str = ""

    @property
    def known(self) -> bool:
        return self.state == JUDGED

    @property
    def wording(self) -> str:
        """How a report says it: "" when judged, else "not known: ..." or "not judged: ..."."""
        if self.known:
            return ""
        return ("not judged: " if self.state == NOT_JUDGED else "not known: ") + self.reason

    def to_json(self) -> dict:
        return {"state": self.state, "reason": self.reason}


def _why(m: Machine, *paths: str) -> str:
    for path in paths:
        reason = m.unknown(path)
        if reason:
            return reason
    return "not in the facts"


def area_state(m: Machine, area: str) -> AreaState:
    """Whether ``area``'s checks could judge this machine, and why not."""
    if area == "os":
        if m.os.platform in ("windows", "macos"):
            return AreaState(NOT_JUDGED, "debtorch's checks are for Linux (Debian)")
        if m.os.id is None:
            return AreaState(UNKNOWN, _why(m, "os.id", "os.pretty_name"))
        return AreaState(JUDGED)
    if area == "apt":
        if m.os.platform in ("windows", "macos"):
            return AreaState(NOT_JUDGED, f"no APT on {m.os.platform}")
        if m.apt.components is None and not isinstance(m.get("apt.packages"), dict):
            return AreaState(UNKNOWN, m.apt.unknown or _why(m, "apt.sources", "apt.packages"))
        return AreaState(JUDGED)
    if area == "driver":
        if m.driver.version or m.gpus.present is False or m.gpus.pci or m.cuda.failure:
            return AreaState(JUDGED)
        return AreaState(UNKNOWN, m.driver.unknown or "no driver version and no list of GPUs")
    if area == "gpu":
        if m.gpus.present is False:
            return AreaState(JUDGED)
        listed = m.gpus.listed
        if not listed:
            if m.gpus.pci:
                return AreaState(JUDGED)     # seen on the bus, unreachable: the driver area says why
            return AreaState(UNKNOWN, _why(m, "nvidia.gpus"))
        if not any(g.value(k) is not None for g in listed for k in GPU_HEALTH):
            return AreaState(UNKNOWN, "only the GPUs' names: their memory, ECC, clocks and PCIe link are not in "
                                      "the facts (nvidia-smi -q gives them)")
        return AreaState(JUDGED)
    if area in ("cuda", "torch"):
        if not m.torch.known:
            return AreaState(UNKNOWN, m.torch.unknown or "the installed PyTorch is not in the facts")
        return AreaState(JUDGED)
    if area == "python":
        if m.get("python.version") is None:
            return AreaState(UNKNOWN, _why(m, "python.version"))
        if m.get("python.executable") is None:
            # PEP 668 and the venv are judged by the interpreter's path, which a report lacks.
            return AreaState(UNKNOWN, "which interpreter: " + _why(m, "python.executable"))
        return AreaState(JUDGED)
    if area == "cpu":
        if not m.cpus.known and m.get("cpu.governor") is None:
            return AreaState(UNKNOWN, "usable CPUs and the frequency governor: " + (m.cpus.unknown or "not in the facts"))
        return AreaState(JUDGED)
    if area == "memory":
        if all(m.get(f"memory.{k}") is None for k in ("total", "shm_total", "memlock_soft", "nofile_soft")):
            return AreaState(UNKNOWN, _why(m, "memory.shm_total", "memory.total"))
        return AreaState(JUDGED)
    if area == "storage":
        if m.get("storage.nvme") is None and m.get("storage.data") is None:
            return AreaState(UNKNOWN, _why(m, "storage.nvme", "storage.data"))
        return AreaState(JUDGED)
    if area == "network":
        if m.network.interfaces is None:
            return AreaState(UNKNOWN, m.network.unknown or _why(m, "network.interfaces"))
        return AreaState(JUDGED)
    if area == "site":
        return AreaState(JUDGED)     # the site's rules are debtorch's configuration, not the machine's
    # An area without a rule here has not said which facts it needs: never a tick by default.
    return AreaState(UNKNOWN, f"debtorch does not say which facts the {area} area needs")


def area_states(m: Machine, areas: Iterable[str]) -> dict:
    """{area: AreaState} for every area name in ``areas``."""
    return {a: area_state(m, a) for a in areas}

