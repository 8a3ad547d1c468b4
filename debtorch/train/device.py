"""Where training runs, as one typed value: the CPU, a CUDA GPU (``cuda``, ``cuda:N``) or an accelerator
simulated on the CPU (``sim:RATE[,k=v...]``, :mod:`debtorch.train.sim`).

A device is parsed once where it enters (the command line, a config file, a request the worker reads)
and passed on as a :class:`Device`: nothing below asks a string what device it names.  Standard library
only: the worker and the engine in the user's interpreter use it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from debtorch.train import sim

KINDS = ("cpu", "cuda", "sim")
_CUDA = re.compile(r"cuda(?::(0|[1-9][0-9]{0,3}))?")   # cuda, cuda:N (N as torch writes it)


@dataclass(frozen=True)
class Device:
    """One device: its ``kind`` ("cpu", "cuda" or "sim"), a GPU's ``index`` (``cuda:N``), a simulated
    accelerator's ``spec``.  ``str(device)`` is its canonical text (what the worker is sent, what a
    document records)."""

    kind: str
    index: Optional[int] = None
    spec: Optional[sim.SimSpec] = None

    @classmethod
    def parse(cls, text: str, thresholds: Optional[Mapping[str, Mapping[str, Any]]] = None) -> "Device":
        """``cpu``, ``cuda``, ``cuda:N`` or ``sim:RATE[,...]`` as a Device; ``thresholds`` (checks/thresholds.toml's
        rows, the command line passes them) give a simulated accelerator its defaults and presets, without
        them its spec must be complete.  ValueError with one line on anything else."""
        if not isinstance(text, str):
            raise ValueError(f"must be cpu, cuda, cuda:N or sim:RATE (got {text!r})")
        if text == "cpu":
            return CPU
        cuda = _CUDA.fullmatch(text)
        if cuda is not None:
            return Device("cuda", None if cuda.group(1) is None else int(cuda.group(1)))
        if not text.startswith(sim.PREFIX):
            raise ValueError(f"must be cpu, cuda, cuda:N or sim:RATE (got {text!r})")
        defaults, presets = sim.from_thresholds(thresholds or {})
        return Device("sim", spec=sim.parse(text, defaults or None, presets or None))

    @classmethod
    def gpu(cls, index: Optional[int] = None) -> "Device":
        """``cuda`` (the current GPU) or ``cuda:index``."""
        return Device("cuda", index)

    def __str__(self) -> str:
        if self.spec is not None:
            return self.spec.text()
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    def to_json(self) -> str:
        return str(self)

    @property
    def is_cpu(self) -> bool:
        return self.kind == "cpu"

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def simulated(self) -> bool:
        return self.spec is not None

    @property
    def accelerator(self) -> bool:
        """A GPU or a simulated one: what is fed through pinned memory and asynchronous copies."""
        return not self.is_cpu

    @property
    def real_kind(self) -> str:
        """"cpu" or "cuda": the device training code runs these settings on (a simulated accelerator
        stands for a GPU)."""
        return "cpu" if self.is_cpu else "cuda"

    @property
    def rate(self) -> Optional[float]:
        """Samples/s a simulated accelerator consumes; None for a real device (its rate is measured)."""
        return self.spec.rate if self.spec is not None else None

    def unindexed(self) -> "Device":
        """This device without its GPU's index (``cuda:1`` -> ``cuda``): what settings are tuned for."""
        return Device(self.kind, None, self.spec)

    def words(self) -> str:
        """'simulated accelerator (2470 samples/s, a100-resnet50)', else the device's text."""
        return self.spec.words() if self.spec is not None else str(self)


CPU = Device("cpu")
CUDA = Device("cuda")
