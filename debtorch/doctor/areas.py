"""The areas of the doctor's report, each declared once (:class:`Area`): its id, its title, the facts
section it reads, whether the facts let its checks judge the machine, and its headline.

Whether an area could be judged (docs/checks.md, "What the doctor cannot judge") is "judged",
"unknown" (``reason`` says what was missing) or "not-judged" (outside debtorch's scope: a macOS or
Windows host's OS).  An area whose facts are unknown must not look fine: its ``judge`` decides it,
once, from the machine view, and the renderer only shows it.

A new area: its two functions (``_x_state``, ``_x_headline``) and one :class:`Area` in :data:`AREAS`
(report order); its checks register under its id (``@check("x")``, debtorch/doctor/registry.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from debtorch.machine import Machine
from debtorch.units import human_bytes

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


@dataclass(frozen=True)
class Area:
    """One area of the report.  ``judge`` says whether the facts let the area's checks judge the
    machine (None: the area is not about the machine, as the site's rules are); ``headline`` says in
    one line what was looked at (None: the renderer says which site files were read); ``section`` is
    the facts section whose being unknown as a whole makes the headline "unknown (why)" (None: the
    area reads several)."""

    id: str
    title: str
    judge: Optional[Callable[[Machine], AreaState]]
    headline: Optional[Callable[[Machine], str]]
    section: Optional[str] = None

    def headline_of(self, m: Machine) -> str:
        """The headline for ``m``: "unknown (why)" when the area's facts section is unknown as a whole."""
        if self.headline is None:
            return ""
        if self.section is not None:
            sec = m.section(self.section)
            whole = (sec.get("unknown") or {}).get("*")
            if whole and all(k == "unknown" or v in (None, [], {}) for k, v in sec.items()):
                return f"unknown ({whole})"
        return self.headline(m)


def _why(m: Machine, *paths: str) -> str:
    for path in paths:
        reason = m.unknown(path)
        if reason:
            return reason
    return "not in the facts"


# ---------------------------------------------------------------- os


def _os_state(m: Machine) -> AreaState:
    if m.os.platform in ("windows", "macos"):
        return AreaState(NOT_JUDGED, "debtorch's checks are for Linux (Debian)")
    if m.os.id is None:
        return AreaState(UNKNOWN, _why(m, "os.id", "os.pretty_name"))
    return AreaState(JUDGED)


def _os_headline(m: Machine) -> str:
    o = m.os
    bits = [o.name or "unknown OS"]
    if o.kernel:
        bits.append(f"kernel {o.kernel}")
    if o.container:
        bits.append(f"in a {o.container} container")
    if o.wsl:
        bits.append(f"WSL {o.wsl}")
    return ", ".join(bits)


# ---------------------------------------------------------------- apt


def _apt_state(m: Machine) -> AreaState:
    if m.os.platform in ("windows", "macos"):
        return AreaState(NOT_JUDGED, f"no APT on {m.os.platform}")
    if m.apt.components is None and not isinstance(m.get("apt.packages"), dict):
        return AreaState(UNKNOWN, m.apt.unknown or _why(m, "apt.sources", "apt.packages"))
    return AreaState(JUDGED)


def _apt_headline(m: Machine) -> str:
    comps = m.apt.components
    return f"components: {' '.join(comps)}" if comps else "APT sources unknown"


# ---------------------------------------------------------------- driver


def _driver_state(m: Machine) -> AreaState:
    if m.driver.version or m.gpus.present is False or m.gpus.pci or m.cuda.failure:
        return AreaState(JUDGED)
    return AreaState(UNKNOWN, m.driver.unknown or "no driver version and no list of GPUs")


def _driver_headline(m: Machine) -> str:
    d = m.driver
    if m.gpus.present is False and not d.version:
        return "no NVIDIA GPU"
    if not d.version:
        return "no working NVIDIA driver" if m.gpus.pci else "driver version unknown"
    text = f"driver {d.version}"
    if d.cuda:
        text += f", supports CUDA up to {d.cuda}"
    if d.mismatch:
        text += f" (libraries; kernel module {d.kernel_module} still loaded)"
    return text


# ---------------------------------------------------------------- gpu


def _gpu_state(m: Machine) -> AreaState:
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


def _gpu_headline(m: Machine) -> str:
    if m.gpus.listed:
        return ", ".join(f"{c} x {n}" for n, c in Counter(g.name or "GPU" for g in m.gpus.listed).items())
    if m.gpus.present is None:
        return "unknown"
    n = len(m.gpus.pci)
    if n:
        return f"{n} NVIDIA GPU(s) on the PCI bus, not reachable through NVML or nvidia-smi"
    return "none"


# ---------------------------------------------------------------- cuda and torch


def _torch_known_state(m: Machine) -> AreaState:
    if not m.torch.known:
        return AreaState(UNKNOWN, m.torch.unknown or "the installed PyTorch is not in the facts")
    return AreaState(JUDGED)


def _cuda_headline(m: Machine) -> str:
    parts = []
    if m.torch.cuda:
        parts.append(f"PyTorch built with CUDA {m.torch.cuda}")
    nv = m.get("cuda.toolkit_nvcc")
    if isinstance(nv, dict) and nv.get("version"):
        parts.append(f"nvcc {nv['version']} (toolkit)")
    return "; ".join(parts) or "no CUDA in use"


def _torch_headline(m: Machine) -> str:
    t = m.torch
    if not t.known:
        return "unknown"
    if not t.installed:
        return f"not installed in {t.executable}" if t.executable else "not installed"
    return f"{t.version or 'version not known'} ({t.build})"


# ---------------------------------------------------------------- python


def _python_state(m: Machine) -> AreaState:
    if m.get("python.version") is None:
        return AreaState(UNKNOWN, _why(m, "python.version"))
    if m.get("python.executable") is None:
        # PEP 668 and the venv are judged by the interpreter's path, which a report lacks.
        return AreaState(UNKNOWN, "which interpreter: " + _why(m, "python.executable"))
    return AreaState(JUDGED)


def _python_headline(m: Machine) -> str:
    exe = m.get("python.executable") or "interpreter unknown"
    ver = m.get("python.version")
    if not ver:
        return f"{exe}"
    venv = ", venv" if m.get("python.venv") else ""
    return f"{exe} (Python {ver}{venv})"


# ---------------------------------------------------------------- cpu


def _cpu_state(m: Machine) -> AreaState:
    if not m.cpus.known and m.get("cpu.governor") is None:
        return AreaState(UNKNOWN, "usable CPUs and the frequency governor: " + (m.cpus.unknown or "not in the facts"))
    return AreaState(JUDGED)


def _cpu_headline(m: Machine) -> str:
    shown = ("avx512_bf16", "amx_bf16", "avx2", "avx512f")
    feats = [k for k, v in (m.get("cpu.features") or {}).items() if v and k in shown]
    usable = m.cpus.usable if m.cpus.known else "?"
    text = f"{m.cpus.model or 'unknown CPU'}, {usable} usable CPUs"
    if feats:
        text += f", {' '.join(feats)}"
    return text


# ---------------------------------------------------------------- memory


def _memory_state(m: Machine) -> AreaState:
    if all(m.get(f"memory.{k}") is None for k in ("total", "shm_total", "memlock_soft", "nofile_soft")):
        return AreaState(UNKNOWN, _why(m, "memory.shm_total", "memory.total"))
    return AreaState(JUDGED)


def _memory_headline(m: Machine) -> str:
    return f"{human_bytes(m.get('memory.total'))} RAM, /dev/shm {human_bytes(m.get('memory.shm_total'))}"


# ---------------------------------------------------------------- storage


def _storage_state(m: Machine) -> AreaState:
    if m.get("storage.nvme") is None and m.get("storage.data") is None:
        return AreaState(UNKNOWN, _why(m, "storage.nvme", "storage.data"))
    return AreaState(JUDGED)


def _storage_headline(m: Machine) -> str:
    d = m.get("storage.data")
    if d and d.get("exists"):
        if d.get("network"):
            kind = "network"
        elif d.get("rotational"):
            kind = "rotational"
        else:
            kind = "non-rotational"
        return f"data {d.get('path')} on {d.get('fstype')} ({kind})"
    n = len(m.get("storage.nvme") or [])
    return f"{n} NVMe controller(s)" + ("" if d else "; no --data given")


# ---------------------------------------------------------------- network


def _network_state(m: Machine) -> AreaState:
    if m.network.interfaces is None:
        return AreaState(UNKNOWN, m.network.unknown or _why(m, "network.interfaces"))
    return AreaState(JUDGED)


def _network_headline(m: Machine) -> str:
    """'eth0 25 Gb/s, ib0 200 Gb/s; mlx5_0 port 1 ACTIVE 200 Gb/s InfiniBand; OFED 23.10' (one line)."""
    n = m.network
    if n.interfaces is None:
        return f"unknown ({n.unknown})"
    up = [i for i in n.interfaces if i.up and not i.loopback]
    parts = [", ".join(f"{i.name}" + (f" {i.speed_mbps / 1000:g} Gb/s" if i.speed_mbps else "") for i in up)
             or "no interface up besides loopback"]
    if n.ib_ports:
        parts.append(", ".join(f"{p.label} {p.state or '?'}" + (f" {p.rate_gbps:g} Gb/s" if p.rate_gbps else "")
                               + (f" {p.link_layer}" if p.link_layer else "") for p in n.ib_ports))
    if n.ofed:
        parts.append(f"OFED {n.ofed}")
    return "; ".join(parts)


# ---------------------------------------------------------------- the areas, in report order

AREAS = (
    Area("os", "Operating system", _os_state, _os_headline, section="os"),
    Area("apt", "APT sources and packages", _apt_state, _apt_headline, section="apt"),
    Area("driver", "NVIDIA driver", _driver_state, _driver_headline, section="nvidia"),
    Area("gpu", "GPUs", _gpu_state, _gpu_headline, section="nvidia"),
    Area("cuda", "CUDA", _torch_known_state, _cuda_headline),
    Area("torch", "PyTorch", _torch_known_state, _torch_headline),
    Area("python", "Python environment", _python_state, _python_headline, section="python"),
    Area("cpu", "CPU", _cpu_state, _cpu_headline, section="cpu"),
    Area("memory", "Memory and limits", _memory_state, _memory_headline, section="memory"),
    Area("storage", "Storage", _storage_state, _storage_headline, section="storage"),
    Area("network", "Network", _network_state, _network_headline, section="network"),
    # The site's rules are debtorch's configuration, not the machine's: nothing to judge, and the
    # renderer names the files read.
    Area("site", "Site rules", None, None),
)
AREA = {a.id: a for a in AREAS}
AREA_TITLES = {a.id: a.title for a in AREAS}


def area_state(m: Machine, area: str) -> AreaState:
    """Whether ``area``'s checks could judge this machine, and why not."""
    judge = AREA[area].judge
    if judge is None:
        return AreaState(JUDGED)
    return judge(m)


def area_states(m: Machine, areas: Iterable[Area] = AREAS) -> dict[str, AreaState]:
    """{area id: AreaState} for every area of ``areas`` that is about the machine."""
    return {a.id: a.judge(m) for a in areas if a.judge is not None}
