"""The one reading of a facts document: :class:`Machine`, one typed, frozen value a section of the
machine, each read once, when first asked for, by its module (``nvidia``, ``cpu``, ``system``,
``pytorch``, ``network``, ``slurm``)."""

from __future__ import annotations

import functools
from typing import Any, Optional

from debtorch.facts import get, unknown_reason
from debtorch.machine import cpu, network, nvidia, pytorch, slurm, system
from debtorch.machine.cpu import CPUs, Shm
from debtorch.machine.network import Network
from debtorch.machine.nvidia import Driver, GPUs
from debtorch.machine.pytorch import ArchList, CudaState, Torch, Version
from debtorch.machine.read import section
from debtorch.machine.slurm import Slurm
from debtorch.machine.system import OS, Apt


class Machine:
    """The one reading of a facts document (see the package's docstring)."""

    def __init__(self, facts: dict):
        self.facts = facts if isinstance(facts, dict) else {}

    @classmethod
    def from_facts(cls, facts: dict) -> "Machine":
        return cls(facts)

    # Raw access, for facts that need no interpretation.
    def get(self, dotted: str, default: Any = None) -> Any:
        return get(self.facts, dotted, default)

    def unknown(self, dotted: str) -> Optional[str]:
        return unknown_reason(self.facts, dotted)

    def section(self, dotted: str) -> dict:
        """The table at ``dotted`` ("nvidia", "python.deep"); {} when it is not one."""
        return section(self.facts, dotted)

    # ---------------------------------------------------------- NVIDIA

    @functools.cached_property
    def driver(self) -> Driver:
        """The NVIDIA driver: its version and where it was read, the CUDA it runs, whose it is."""
        return nvidia.read_driver(self.facts)

    @functools.cached_property
    def gpus(self) -> GPUs:
        """Every NVIDIA GPU the facts know (``.listed``, ``.compute``, ``.pci``, ``.present`` ...)."""
        return nvidia.read_gpus(self.facts)

    # ---------------------------------------------------------- CPU and memory

    @functools.cached_property
    def cpus(self) -> CPUs:
        """The CPUs training may use (Slurm's allocation where it bounds them)."""
        return cpu.read_cpus(self.facts, self.slurm)

    @functools.cached_property
    def shm(self) -> Shm:
        """/dev/shm against the DataLoader workers a tuned run would start here."""
        return cpu.read_shm(self.facts, self.cpus)

    # ---------------------------------------------------------- the OS

    @functools.cached_property
    def os(self) -> OS:
        """The OS, and which Debian it is or is based on."""
        return system.read_os(self.facts)

    @functools.cached_property
    def apt(self) -> Apt:
        """APT's components enabled for Debian's own suites."""
        return system.read_apt(self.facts)

    @functools.cached_property
    def debian_driver(self) -> Optional[dict]:
        """Debian's packaged nvidia-driver for this release: {version, release, codename}, or None."""
        return system.debian_driver(self.os, self.driver)

    # ---------------------------------------------------------- PyTorch

    @functools.cached_property
    def torch(self) -> Torch:
        """The PyTorch of the target interpreter."""
        return pytorch.read_torch(self.facts)

    @functools.cached_property
    def torch_arch(self) -> Optional[ArchList]:
        """The architectures the installed CUDA build has code for; None for a CPU or ROCm build."""
        return pytorch.arch_list(self.facts, self.torch)

    @functools.cached_property
    def driver_runs_torch(self) -> Optional[str]:
        """Whether the driver runs torch's CUDA: "full", "minor-compat", "too-old", or None."""
        return pytorch.driver_runs(self.torch, self.driver)

    @functools.cached_property
    def cuda(self) -> CudaState:
        """Whether CUDA works for the installed PyTorch, and the words that say why not."""
        return pytorch.cuda_state(self.facts, self.torch, self.driver, self.gpus, self.driver_runs_torch)

    @functools.cached_property
    def wheels_for_arch(self) -> Optional[dict]:
        """The [[machine]] row of this Linux machine's CPU architecture; {} without wheels; None: unknown."""
        return pytorch.wheels_for_arch(self.os)

    @property
    def wheel_platform(self) -> Optional[str]:
        """The platform of checks/torch_wheels.toml whose wheels install here; None where there are none."""
        return pytorch.wheel_platform(self.wheels_for_arch)

    @functools.cached_property
    def python_version(self) -> Optional[str]:
        """The target interpreter's CPython release ("3.11"), or None."""
        return pytorch.python_version(self.facts)

    @functools.cached_property
    def cudnn(self) -> Version:
        """The cuDNN PyTorch loads, and where that was read."""
        return pytorch.cudnn(self.facts)

    @functools.cached_property
    def nccl(self) -> Version:
        """The NCCL PyTorch loads, and where that was read."""
        return pytorch.nccl(self.facts)

    # ---------------------------------------------------------- network and Slurm

    @functools.cached_property
    def network(self) -> Network:
        """The interfaces, what the IFNAME variables select, InfiniBand, MASTER_ADDR."""
        return network.read_network(self.facts)

    @functools.cached_property
    def slurm(self) -> Slurm:
        """The Slurm job and step this process belongs to."""
        return slurm.read_slurm(self.facts)

    # ---------------------------------------------------------- what the answers rest on

    def answers(self) -> dict:
        """Every interpreted answer, as plain data: what the consistency test compares
        between consumers, and what `debtorch facts` and fleet may show."""
        d, c, o, t = self.driver, self.cpus, self.os, self.torch
        return {
            "driver": d.version, "driver_source": d.source, "driver_cuda": d.cuda,
            "gpus": [(g.name, g.cc) for g in self.gpus],
            "compute_gpus": [g.name for g in self.gpus.compute],
            "usable_cpus": c.usable if c.known else None,
            "debian": o.debian.release if o.debian else None,
            "torch": t.version, "torch_cuda": t.cuda, "torch_variant": t.variant,
        }
