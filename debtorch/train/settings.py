"""Training settings: the one flat, typed record that tune chooses, the config
file stores, the runtime API applies and the training engine runs.

Torch-free, so that debtorch's own process (which never imports torch) can
build, compare and print settings.  Each field's comment is its meaning; the
reason a value was *chosen* lives beside it in the config file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from debtorch import schema

PRECISIONS = ("fp32", "bf16", "fp16")
START_METHODS = ("fork", "forkserver", "spawn")
LR_SCHEDULES = ("constant", "onecycle")
DEVICES = ("cpu", "cuda")
# Bounds (docs/tune.md, "Bounds"): every number has a range a training run can use.
COUNT_MAX = 2**31 - 1     # batches, steps, epochs: what a 32-bit counter in any loader or schedule holds
PROCESS_MAX = 65536       # workers, threads or processes on one machine, even deliberately
PREFETCH_MAX = 256        # batches ahead per worker: each one is held in memory
MAX_LR = 1000.0
COUNT = schema.integer(1, COUNT_MAX)
PROCESSES = schema.integer(1, PROCESS_MAX)


@dataclass(frozen=True)
class Searched:
    """How ``tune --measure`` races a setting (docs/tune.md, "Measurement"): the dimensions of its search
    are made from these, in ``order``."""

    order: int                       # the search races dimensions in this order
    rule: str = "tune.M001"          # the measured reason's id
    values: tuple[Any, ...] = ()     # the candidates (none: the caller's, the precisions this hardware has)
    when: str = "always"             # "always", "accelerator", "simulated" or "convolutional"
    needs_workers: bool = False      # means nothing without DataLoader workers
    together: tuple[str, ...] = ()   # fields that take the same value (pin_memory: non_blocking)
    split: bool = False              # one of the CPU split's two (threads, num_workers): raced as one dimension


@dataclass(frozen=True)
class Declared:
    """What :func:`setting` declares of a field beyond its name, type and default."""

    spec: schema.Spec                # its type and bounds (the config file checks them too)
    table: str                       # the config file's table it lives in
    unset: Optional[str] = None      # what None means (a setting whose default is None)
    search: Optional[Searched] = None


def setting(default: Any, spec: schema.Spec, table: str, unset: Optional[str] = None,
            search: Optional[Searched] = None) -> Any:
    """A field of :class:`Settings`, declared once: its default, type and bounds (``spec``), the config
    file's ``table``, what None means (``unset``) and how ``tune --measure`` races it (``search``).
    :data:`SETTINGS`, :data:`FIELDS`, :data:`TABLES`, :data:`UNSET` and the search's dimensions are made
    from these declarations (docs/architecture.md, "A tune setting")."""
    return field(default=default, metadata={"declared": Declared(spec, table, unset, search)})


ON_OFF = schema.BOOL


def _lr_ok(v: float) -> bool:
    return 0 < v <= MAX_LR


def _share_ok(v: float) -> bool:
    return 0 < v < 1


@dataclass
class Settings:
    """Every setting, each declared once (:func:`setting`); the comment above it is its meaning."""

    # [loader]: the DataLoader
    # worker processes; 0 loads in the training process
    num_workers: int = setting(0, schema.integer(0, PROCESS_MAX), "loader", search=Searched(3, "tune.M006", split=True))
    # page-locked host batches (only helps with a GPU)
    pin_memory: bool = setting(False, ON_OFF, "loader", search=Searched(5, values=(False, True), when="accelerator",
                                                                          together=("non_blocking",)))
    # batches each worker loads ahead (None: PyTorch's default)
    prefetch_factor: Optional[int] = setting(None, schema.integer(1, PREFETCH_MAX), "loader",
                                             unset="PyTorch's default, 2 batches per worker",
                                             search=Searched(4, values=(2, 4), needs_workers=True))
    # keep workers alive between epochs (raced on a simulated accelerator, whose short trials span
    # epochs: worker restarts show; docs/engine.md)
    persistent_workers: bool = setting(False, ON_OFF, "loader", search=Searched(6, values=(True, False),
                                                                                  when="simulated", needs_workers=True))
    # multiprocessing start method for workers (None: the platform's default)
    start_method: Optional[str] = setting(None, schema.one_of(*START_METHODS), "loader", unset="the platform's default")

    # [compute]: precision and kernels
    # fp32, bf16 (autocast) or fp16 (autocast + GradScaler)
    precision: str = setting("fp32", schema.one_of(*PRECISIONS), "compute", search=Searched(1, "tune.M003"))
    # TF32 matmul and cuDNN convolutions (Ampere and newer)
    tf32: bool = setting(False, ON_OFF, "compute")
    # let cuDNN pick the fastest algorithm per shape
    cudnn_benchmark: bool = setting(False, ON_OFF, "compute")
    # NHWC memory format for convolutional models
    channels_last: bool = setting(False, ON_OFF, "compute", search=Searched(2, "tune.M004", values=(False, True),
                                                                              when="convolutional"))
    # fused AdamW/SGD kernels where available
    fused_optimizer: bool = setting(False, ON_OFF, "compute")
    # torch.compile the model (only when asked)
    compile: bool = setting(False, ON_OFF, "compute")
    # asynchronous host-to-device copies (with pinned memory)
    non_blocking: bool = setting(False, ON_OFF, "compute")
    # torch.set_num_threads per process (None: PyTorch's default)
    threads: Optional[int] = setting(None, PROCESSES, "compute", unset="PyTorch's default",
                                     search=Searched(3, "tune.M006", split=True))

    # [distributed]: processes
    # DDP processes per machine (one per usable GPU)
    nproc: int = setting(1, PROCESSES, "distributed")
    # DDP backend: nccl on GPUs, gloo on CPU
    backend: Optional[str] = setting(None, schema.one_of("nccl", "gloo"), "distributed", unset="no DDP")

    # [batch]
    # samples per step per process (None: the workload's)
    micro_batch: Optional[int] = setting(None, COUNT, "batch", unset="the training script's own batch size")
    # micro-batches per optimizer step
    accumulation_steps: int = setting(1, COUNT, "batch")

    # [schedule]
    # constant or onecycle (OneCycleLR)
    lr_schedule: str = setting("constant", schema.one_of(*LR_SCHEDULES), "schedule")
    # OneCycleLR peak learning rate
    max_lr: Optional[float] = setting(None, schema.number(f"a number > 0 and at most {MAX_LR:g}", _lr_ok), "schedule",
                                      unset="the optimizer's learning rate")
    # OneCycleLR share of steps spent warming up
    pct_start: float = setting(0.3, schema.number("a number between 0 and 1", _share_ok), "schedule")

    def validate(self) -> list["Problem"]:
        """Problems with these values (empty when fine): the bounds of :data:`FIELDS` (which the config
        file has too), then what one field needs of another."""
        try:
            schema.check({k: v for k, v in self.to_dict().items() if v is not None or k not in OPTIONAL}, FIELDS)
        except schema.Invalid as exc:
            return [Problem(exc.path, exc.problem, str(exc))]
        return [Problem(name, "needs num_workers > 0", f"{name} needs num_workers > 0")
                for name in ("prefetch_factor", "persistent_workers")
                if getattr(self, name) not in (None, False) and self.num_workers == 0]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Settings":
        """Build from a dict; unknown keys raise KeyError naming the key."""
        unknown = [k for k in data if k not in {f.name for f in dataclasses.fields(cls)}]
        if unknown:
            raise KeyError(unknown[0])
        return cls(**data)

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    def short(self) -> str:
        """A compact label for tables: 'w2 pf4 pin bf16 t2 cl' (:data:`SHORT_LEGEND` says each part)."""
        parts = [f"w{self.num_workers}", self.prefetch_factor is not None and f"pf{self.prefetch_factor}",
                 self.num_workers and not self.persistent_workers and "np", self.pin_memory and "pin",
                 self.precision, self.threads is not None and f"t{self.threads}", self.channels_last and "cl",
                 self.compile and "compile"]
        return " ".join(p for p in parts if p)

    def words(self) -> str:
        """:meth:`short` in words: '2 DataLoader workers, 4 batches prefetched per worker, pinned memory, bf16,
        2 compute threads, channels_last'."""
        workers = "no DataLoader workers (loading in the training process)" if not self.num_workers else (
            f"{self.num_workers} DataLoader worker{'s' if self.num_workers != 1 else ''}")
        parts = [workers, self.prefetch_factor is not None and f"{self.prefetch_factor} batches prefetched per worker",
                 self.num_workers and not self.persistent_workers and "workers not persistent",
                 self.pin_memory and "pinned memory", self.precision,
                 self.threads is not None and f"{self.threads} compute thread{'s' if self.threads != 1 else ''}",
                 self.channels_last and "channels_last", self.compile and "torch.compile"]
        return ", ".join(str(p) for p in parts if p)


@dataclass(frozen=True)
class Problem:
    """A setting's value that cannot run: the field and what is wrong ("prefetch_factor", "needs num_workers > 0")."""

    field: str
    text: str
    line: str     # the one line a reader sees: "prefetch_factor needs num_workers > 0"

    def __str__(self) -> str:
        return self.line


@dataclass(frozen=True)
class Setting:
    """One field of :class:`Settings` with its declaration: the row every table is made from."""

    name: str
    default: Any
    spec: schema.Spec
    table: str
    unset: Optional[str]
    search: Optional[Searched]


SETTINGS: tuple[Setting, ...] = tuple(
    Setting(f.name, f.default, d.spec, d.table, d.unset, d.search)
    for f in dataclasses.fields(Settings) for d in [f.metadata["declared"]])
FIELDS: dict[str, schema.Spec] = {s.name: s.spec for s in SETTINGS}      # each field's type and bounds
TABLES: dict[str, tuple[str, ...]] = {}                                  # config table -> its fields, in order
for _s in SETTINGS:
    TABLES[_s.table] = TABLES.get(_s.table, ()) + (_s.name,)
TABLE_OF: dict[str, str] = {s.name: s.table for s in SETTINGS}
UNSET: dict[str, str] = {s.name: s.unset for s in SETTINGS if s.unset}    # what a setting left unset (None) means
OPTIONAL = {s.name for s in SETTINGS if s.default is None}

# The parts of Settings.short(), said once wherever the short labels are shown.
SHORT_LEGEND = (("w", "DataLoader workers"), ("pf", "batches each worker prefetches"),
                ("np", "workers not persistent (restarted every epoch)"), ("pin", "pinned memory"),
                ("fp32/bf16/fp16", "precision"), ("t", "compute threads"), ("cl", "channels_last"),
                ("compile", "torch.compile"))


def legend(labels: list[str]) -> str:
    """One line saying the parts of the short labels ``labels`` use: 'settings in short: w = DataLoader
    workers, pf = batches each worker prefetches, ...'."""
    used = {part for label in labels for part in label.split()}

    def shown(abbreviation: str) -> bool:
        if "/" in abbreviation:
            return bool(used & set(abbreviation.split("/")))
        return any(part == abbreviation or (part.startswith(abbreviation) and part[len(abbreviation):].isdigit())
                   for part in used)

    return "settings in short: " + ", ".join(f"{a} = {meaning}" for a, meaning in SHORT_LEGEND if shown(a))
