"""What one trial of the engine measured, as a typed value (docs/engine.md, "Result keys"): the engine
(:func:`debtorch.train.engine.run_trial`) builds a :class:`TrialResult` and sends its :meth:`~TrialResult.to_json`
over the worker's wire; debtorch's own process reads it back with :meth:`~TrialResult.from_json`, and tune,
verify-train and the reports read its attributes.  A multi-process run's ranks are gathered in a
:class:`DistributedResult`; the worker's answer to ``load`` is a :class:`LoadedWorkload`.  Standard library only (the engine runs in the user's interpreter).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional

from debtorch.train.device import Device


@dataclass(frozen=True)
class SimTrial:
    """What a simulated accelerator did per timed step (docs/engine.md, ``sim``)."""

    spec: str                  # the accelerator's canonical spec
    words: str                 # how a report names it
    rate: float                # samples/s it consumes
    sync_each_step: bool       # the loss was read every step
    device_busy_s: float       # its work: copies and compute
    device_wait_s: float       # the host waiting for it
    staging_s: float           # the host's memcpy of pageable batches
    wake_s: float              # how late the host woke after the work it waited for

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "SimTrial":
        values: dict[str, Any] = {f.name: doc.get(f.name) for f in fields(cls)}
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class TrialResult:
    """One trial, in the order of the engine's document; a field the document lacks is None (a test's
    hand-made trial gives only what it needs)."""

    workload: Optional[str] = None
    device: Optional[str] = None                 # as the engine named it ("cpu", "cuda:0", a sim spec)
    settings: Optional[dict[str, Any]] = None    # the Settings it ran, as a dict
    seed: Optional[int] = None
    steps: Optional[int] = None                  # timed steps that ran
    steps_requested: Optional[int] = None
    warmup_steps: Optional[int] = None
    micro_batch: Optional[int] = None
    accumulation_steps: Optional[int] = None
    samples_per_step: Optional[int] = None
    samples: Optional[int] = None
    wall_s: Optional[float] = None               # the timed window
    samples_per_s: Optional[float] = None        # None: no window (a failed trial)
    step_s: Optional[list[float]] = None         # per timed step (None in bare mode)
    data_wait_s: Optional[list[float]] = None
    compute_s: Optional[list[float]] = None
    step_median_s: Optional[float] = None
    data_wait_share: Optional[float] = None
    overhead_s: Optional[float] = None
    warmup_losses: Optional[list[Optional[float]]] = None
    losses: Optional[list[Optional[float]]] = None
    loss_first: Optional[float] = None
    loss_last: Optional[float] = None
    nonfinite_loss_step: Optional[int] = None    # 0-based, warm-up included
    sample_digest: Optional[str] = None
    batch_bytes: Optional[int] = None
    epochs: Optional[int] = None
    world_size: Optional[int] = None
    rank: Optional[int] = None
    notes: Optional[list[str]] = None
    torch: Optional[str] = None
    target_loss: Optional[float] = None
    target_step: Optional[int] = None            # 1-based, warm-up included
    time_to_target_s: Optional[float] = None
    settle_steps: Optional[int] = None
    mode: Optional[str] = None                   # instrumented, bare or compute_only
    peak_host_bytes: Optional[int] = None
    peak_device_bytes: Optional[int] = None
    gpu_util_mean: Optional[float] = None
    gpu_util_samples: Optional[int] = None
    threads: Optional[int] = None
    profile_trace: Optional[str] = None
    sim: Optional[SimTrial] = None               # on a simulated accelerator
    backend: Optional[str] = field(default=None, metadata={"only_when_set": True})   # a rank of a distributed run

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TrialResult":
        values = {f.name: doc.get(f.name) for f in fields(cls)}
        sim = values["sim"]
        values["sim"] = SimTrial.from_json(sim) if isinstance(sim, Mapping) else None
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("only_when_set"):
                continue
            out[f.name] = value.to_json() if isinstance(value, SimTrial) else value
        return out

    @property
    def all_losses(self) -> list[Optional[float]]:
        """Every optimizer step's loss, warm-up included, in order."""
        return list(self.warmup_losses or []) + list(self.losses or [])

    @property
    def steps_run(self) -> int:
        """Optimizer steps the trial ran, warm-up included."""
        return (self.warmup_steps or 0) + (self.steps or 0)


@dataclass(frozen=True)
class DistributedResult:
    """A multi-process trial: the whole job's throughput (all samples over the slowest rank's window)
    and each rank's own result."""

    nproc: int
    backend: Optional[str]
    samples_per_s: Optional[float]
    per_rank_samples_per_s: list[Optional[float]]
    ranks: list[TrialResult]

    @classmethod
    def of(cls, ranks: list[TrialResult]) -> "DistributedResult":
        slowest = max(r.wall_s or 0.0 for r in ranks)
        total = sum(r.samples or 0 for r in ranks)
        return cls(nproc=len(ranks), backend=ranks[0].backend, samples_per_s=total / slowest if slowest > 0 else None,
                   per_rank_samples_per_s=[r.samples_per_s for r in ranks], ranks=list(ranks))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "DistributedResult":
        return cls(nproc=doc.get("nproc") or 1, backend=doc.get("backend"), samples_per_s=doc.get("samples_per_s"),
                   per_rank_samples_per_s=list(doc.get("per_rank_samples_per_s") or []),
                   ranks=[TrialResult.from_json(r) for r in doc.get("ranks") or []])

    def to_json(self) -> dict[str, Any]:
        return {"nproc": self.nproc, "backend": self.backend, "samples_per_s": self.samples_per_s,
                "per_rank_samples_per_s": list(self.per_rank_samples_per_s),
                "ranks": [r.to_json() for r in self.ranks]}


@dataclass(frozen=True)
class LoadedWorkload:
    """The worker's answer to ``load``: the workload it built (docs/engine.md) and the device it trains on."""

    name: Optional[str] = None
    batch_size: Optional[int] = None
    dataset_len: Optional[int] = None
    parameters: Optional[int] = None
    target_loss: Optional[float] = None
    lr: Optional[float] = None
    convolutional: Optional[bool] = None
    model_class: Optional[str] = None
    device: Optional[Device] = None
    file: Optional[str] = None          # the workload module's file (host waits are read there)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "LoadedWorkload":
        values = {f.name: doc.get(f.name) for f in fields(cls)}
        if values["device"] is not None:
            values["device"] = Device.parse(values["device"])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["device"] = None if self.device is None else str(self.device)
        return out


@dataclass(frozen=True)
class RankOutcome:
    """What one rank of a multi-process trial leaves in its ``rank<R>.json``: its result, or the worker's
    account of why it failed (:func:`debtorch.train.worker.classify`: ``kind``, ``message`` and what goes with
    them)."""

    rank: Optional[int]
    result: Optional[TrialResult] = None
    error: Optional[dict[str, Any]] = None   # the worker's account, whole
    kind: str = ""                           # of it, read back: the failure's kind and one line
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "RankOutcome":
        if doc.get("ok"):
            return cls(doc.get("rank"), TrialResult.from_json(doc["result"]))
        error = dict(doc.get("error") or {})
        return cls(doc.get("rank"), error=error, kind=str(error.get("kind", "exception")),
                   message=str(error.get("message")))

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"ok": False, "rank": self.rank, "error": self.error}
        return {"ok": True, "rank": self.rank, "result": self.result.to_json() if self.result is not None else None}
