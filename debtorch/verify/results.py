"""What verify-train measured and concluded, as typed values (docs/verify-train.md): :mod:`debtorch.verify.analysis`
makes them from the trials, :mod:`debtorch.report.verify` and :mod:`debtorch.report.plot` read their attributes,
and each writes its part of the JSON document with one ``to_json``.  Torch-free.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Optional

from debtorch import stats
from debtorch.train.result import TrialResult

# The arms of the interleaved rounds (the trials' keys in the JSON): baseline and tuned, tuned in a bare loop
# (what the per-step clocks cost), tuned reading its loss every step (a simulated accelerator: what a sync
# costs), and the compute-only bounds.  Attribution adds arms named "without <group>".
BASELINE, TUNED, TUNED_BARE, TUNED_SYNC = "baseline", "tuned", "tuned_bare", "tuned_sync"
BASELINE_BOUND, TUNED_BOUND = "baseline_bound", "tuned_bound"
ARMS = (BASELINE, TUNED, TUNED_BARE, TUNED_SYNC, BASELINE_BOUND, TUNED_BOUND)


@dataclass(frozen=True)
class ArmSummary:
    """Median, spread and breakdown of one arm's trials."""

    runs: int                                 # trials that gave a rate
    samples_per_s: Optional[float]            # their median
    samples_per_s_min: Optional[float]
    samples_per_s_max: Optional[float]
    spread: Optional[float]                   # (max - min) / median
    samples_per_s_all: list[Optional[float]]  # every trial's, failed ones included (None)
    data_wait_share: Optional[float]
    step_s: Optional[float]                   # the median optimizer step
    data_wait_step_s: Optional[float]         # of it, waiting for data
    compute_step_s: Optional[float]           # of it, computing
    peak_host_bytes: Optional[float]
    peak_device_bytes: Optional[float]
    gpu_util: Optional[float]
    between_steps_share: Optional[float]      # bookkeeping between the timed steps, of the window
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """A figure with its interval and verdict (:class:`debtorch.stats.Estimate`), named as the JSON names it
    (``ratio``, ``cost``, ``share``, ``efficiency``); ``pairs``: the per-round values it rests on."""

    name: str
    estimate: stats.Estimate
    pairs: Optional[list[float]] = None

    @property
    def value(self) -> Optional[float]:
        return self.estimate.estimate

    @property
    def low(self) -> Optional[float]:
        return self.estimate.low

    @property
    def high(self) -> Optional[float]:
        return self.estimate.high

    @property
    def verdict(self) -> str:
        return self.estimate.verdict

    @property
    def rounds(self) -> int:
        return self.estimate.rounds

    @property
    def more_rounds(self) -> Optional[int]:
        return self.estimate.more_rounds

    @property
    def reason(self) -> str:
        return self.estimate.reason

    @property
    def interval(self) -> Optional[tuple[float, float]]:
        """(low, high) when worth stating; None with too few rounds for one (:attr:`stats.Estimate.interval`)."""
        return self.estimate.interval

    def to_json(self) -> dict[str, Any]:
        out = self.estimate.to_dict(self.name)
        if self.pairs is not None:
            out["pairs"] = self.pairs
        return out


@dataclass(frozen=True)
class BoundFractions:
    """How close baseline and tuned come to their bound (compute-only, or a simulated device's rate)."""

    baseline: Comparison
    tuned: Comparison

    def to_json(self) -> dict[str, Any]:
        return {BASELINE: self.baseline.to_json(), TUNED: self.tuned.to_json()}


@dataclass(frozen=True)
class Sequential:
    """The sequential design the rounds were judged by, and the looks the run took."""

    looks: stats.Looks
    rounds: Optional[int]

    @property
    def taken(self) -> int:
        """The looks the run took (0 before any round)."""
        return self.looks.taken(self.rounds) if self.rounds is not None else 0

    def to_json(self) -> dict[str, Any]:
        return self.looks.to_dict(self.rounds)


@dataclass(frozen=True)
class SyncCost:
    """What reading the loss every step costs on a simulated accelerator: measured (paired by round), and
    the model's figure (None where it is impossible: a disturbed round) with whether it lies in the interval."""

    cost: Comparison
    predicted: Optional[float]
    model: Optional[str] = None      # "within" or "outside" the interval

    def to_json(self) -> dict[str, Any]:
        out = {**self.cost.to_json(), "predicted": self.predicted}
        if self.model is not None:
            out["model"] = self.model
        return out


@dataclass(frozen=True)
class InputBound:
    """Tuned cannot feed the simulated device: the loader's ceiling, one loading process's rate, and the CPUs
    of loading the device's rate would take."""

    ceiling: Optional[float]
    one_process: Optional[float]
    cpus: Optional[int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SimSummary:
    """On a simulated accelerator: its words and rate (each arm's bound), and what a per-step sync costs."""

    device: str
    words: str
    rate: float
    sync_cost: SyncCost
    bound_fraction: BoundFractions
    input_bound: Optional[InputBound] = None

    def to_json(self) -> dict[str, Any]:
        out = {"device": self.device, "words": self.words, "rate": self.rate, "sync_cost": self.sync_cost.to_json(),
               "bound_fraction": self.bound_fraction.to_json()}
        if self.input_bound is not None:
            out["input_bound"] = self.input_bound.to_json()
        return out


@dataclass(frozen=True)
class CurveCheck:
    """Whether AMP's loss curve diverged from fp32's (``diverged`` None: not judged, ``reason`` says why)."""

    precision: str
    compared_steps: int
    tolerance_rel: float
    tolerance_abs: float
    diverged: Optional[bool] = False
    reason: Optional[str] = None
    max_gap_rel: Optional[float] = None
    final_gap_rel: Optional[float] = None
    step: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# What a convergence run's summary shows of its trial.
CONVERGE_KEYS = ("target_loss", "target_step", "time_to_target_s", "steps", "steps_requested", "warmup_steps",
                 "wall_s", "loss_first", "loss_last", "nonfinite_loss_step", "samples_per_s")


def converge_view(result: Optional[TrialResult]) -> Optional[dict[str, Any]]:
    if result is None:
        return None
    return {k: getattr(result, k) for k in CONVERGE_KEYS}


@dataclass(frozen=True)
class Convergence:
    """The convergence runs: time to the target loss, the schedule's own part, AMP against fp32."""

    target_loss: Optional[float]
    baseline: Optional[TrialResult]
    tuned: Optional[TrialResult]
    same_schedule: Optional[TrialResult]      # tuned with the baseline's schedule
    schedule: Optional[str]                   # tuned's schedule change, in words
    reference: Optional[str]                  # the fp32 run AMP was compared with: "reference" or "baseline"
    amp: Optional[CurveCheck]

    def to_json(self) -> dict[str, Any]:
        return {"target_loss": self.target_loss, BASELINE: converge_view(self.baseline),
                TUNED: converge_view(self.tuned), "same_schedule": converge_view(self.same_schedule),
                "schedule": self.schedule, "reference": self.reference,
                "amp": self.amp.to_json() if self.amp is not None else None}


@dataclass(frozen=True)
class Scaling:
    """The multi-process runs: N processes' samples/s over N times one process's (``efficiency``)."""

    nproc: int
    backend: Optional[str]
    runs: int
    samples_per_s: Optional[float]
    samples_per_s_all: list[Optional[float]]
    one_process_samples_per_s: Optional[float]
    gpu_util: Optional[float]
    one_process_gpu_util: Optional[float]
    efficiency: Comparison

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "efficiency"}
        return {**out, **self.efficiency.to_json()}


@dataclass(frozen=True)
class NonFinite:
    """A run whose loss became NaN or infinite: at which step (1-based, warm-up included), in which precision."""

    run: str
    step: int
    precision: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AttributionArm:
    """A group of settings tuned changes: the arm that runs tuned without it (``baseline`` when it is the only
    change) with that arm's settings, or a note saying why nothing needs measuring."""

    group: str
    change: str                                # in words
    note: Optional[str] = None
    arm: Optional[str] = None
    settings: Optional[dict[str, Any]] = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "AttributionArm":
        return cls(group=doc["group"], change=doc["change"], note=doc.get("note"), arm=doc.get("arm"),
                   settings=doc.get("settings"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"group": self.group, "change": self.change}
        if self.note is not None:
            out["note"] = self.note
        if self.arm is not None:
            out.update(arm=self.arm, settings=self.settings)
        return out


@dataclass(frozen=True)
class Attribution:
    """What a group contributes: tuned over tuned without it, paired by round (None where nothing ran)."""

    entry: AttributionArm
    ratio: Optional[Comparison]

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.entry.to_json().items() if k != "settings"}
        if self.ratio is not None:
            out.update(self.ratio.to_json())
        return out


@dataclass(frozen=True)
class Limit:
    """The limit that stopped an inconclusive speed-up's rounds (``what``) and what to change; ``budget_s``:
    the budget that would pay for the rounds that would likely resolve it, when the budget was the limit."""

    what: str
    change: str
    budget_s: Optional[int] = None


@dataclass(frozen=True)
class Summary:
    """Everything a verify-train run concluded (docs/verify-train.md): each arm's summary, the speed-up and
    the figures beside it, and how the rounds went."""

    baseline: ArmSummary
    tuned: ArmSummary
    tuned_bare: ArmSummary
    tuned_sync: ArmSummary
    baseline_bound: ArmSummary
    tuned_bound: ArmSummary
    speedup: Comparison
    sequential: Sequential
    instrumentation: Comparison
    bound_fraction: BoundFractions
    sim: Optional[SimSummary]
    convergence: Optional[Convergence]
    scaling: Optional[Scaling]
    nonfinite_loss: list[NonFinite]
    attribution: list[Attribution]
    rounds: Optional[int]
    rounds_stopped: Optional[str]
    round_s: Optional[float]
    spent_s: Optional[float]
    disturbed_rounds: list[int]
    interrupted: bool
    failed: Optional[str]

    def arm(self, name: str) -> ArmSummary:
        """The summary of arm ``name`` (one of :data:`ARMS`)."""
        if name not in ARMS:
            raise KeyError(name)
        summary: ArmSummary = getattr(self, name)
        return summary

    @property
    def measured_anything(self) -> bool:
        return bool(self.baseline.runs or self.tuned.runs)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {arm: self.arm(arm).to_json() for arm in ARMS}
        out.update(speedup=self.speedup.to_json(), sequential=self.sequential.to_json(),
                   instrumentation=self.instrumentation.to_json(), bound_fraction=self.bound_fraction.to_json(),
                   sim=self.sim.to_json() if self.sim is not None else None)
        if self.convergence is not None:
            out["convergence"] = self.convergence.to_json()
        if self.scaling is not None:
            out["scaling"] = self.scaling.to_json()
        out.update(nonfinite_loss=[n.to_json() for n in self.nonfinite_loss],
                   attribution=[a.to_json() for a in self.attribution], rounds=self.rounds,
                   rounds_stopped=self.rounds_stopped, round_s=self.round_s, spent_s=self.spent_s,
                   disturbed_rounds=self.disturbed_rounds, interrupted=self.interrupted, failed=self.failed)
        return out


@dataclass(frozen=True)
class WaitLine:
    """A line of the workload's code that made the host wait for the device, and how often per step."""

    path: str
    line: int
    per_step: float
    id: Optional[str] = None          # the lint rule, when read from the code

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "WaitLine":
        return cls(path=doc["path"], line=doc["line"], per_step=doc["per_step"], id=doc.get("id"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "line": self.line, "per_step": self.per_step}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(frozen=True)
class HostWaits:
    """Host waits per step in the workload's code: counted on CUDA (``measured``: the worker's
    ``host_waits``), else read from the code (debtorch lint's :func:`~debtorch.lint.measured.static_result`)."""

    measured: bool
    steps: Optional[int]
    per_step: Optional[float]
    lines: list[WaitLine]
    file: Optional[str]
    elsewhere_per_step: Optional[float] = None    # counted outside the workload's code (measured only)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "HostWaits":
        return cls(measured=bool(doc.get("measured")), steps=doc.get("steps"), per_step=doc.get("per_step"),
                   lines=[WaitLine.from_json(x) for x in doc.get("lines") or []], file=doc.get("file"),
                   elsewhere_per_step=doc.get("elsewhere_per_step"))

    def to_json(self) -> dict[str, Any]:
        lines = [x.to_json() for x in self.lines]
        if self.measured:   # the worker's order: what was counted, then the file it added
            return {"measured": True, "steps": self.steps, "per_step": self.per_step, "lines": lines,
                    "elsewhere_per_step": self.elsewhere_per_step, "file": self.file}
        return {"measured": False, "steps": self.steps, "per_step": self.per_step, "file": self.file, "lines": lines}
