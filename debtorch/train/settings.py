"""Training settings: the one flat, typed record that tune chooses, the config
file stores, the runtime API applies and the training engine runs.

Torch-free, so that debtorch's own process (which never imports torch) can
build, compare and print settings.  Each field's comment is its meaning; the
reason a value was *chosen* lives beside it in the config file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
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
FIELDS: dict[str, schema.Spec] = {     # each field's type and bounds (None: unset, where the default is None)
    **dict.fromkeys(("pin_memory", "persistent_workers", "tf32", "cudnn_benchmark", "channels_last",
                     "fused_optimizer", "compile", "non_blocking"), schema.BOOL),
    "num_workers": schema.integer(0, PROCESS_MAX), "threads": schema.integer(1, PROCESS_MAX),
    "nproc": schema.integer(1, PROCESS_MAX), "prefetch_factor": schema.integer(1, PREFETCH_MAX),
    "micro_batch": COUNT, "accumulation_steps": COUNT,
    "start_method": schema.one_of(*START_METHODS), "precision": schema.one_of(*PRECISIONS),
    "backend": schema.one_of("nccl", "gloo"), "lr_schedule": schema.one_of(*LR_SCHEDULES),
    "max_lr": schema.number(f"a number > 0 and at most {MAX_LR:g}", lambda v: 0 < v <= MAX_LR),
    "pct_start": schema.number("a number between 0 and 1", lambda v: 0 < v < 1),
}


@dataclass
class Settings:
    # DataLoader
    num_workers: int = 0                    # worker processes; 0 loads in the training process
    pin_memory: bool = False                # page-locked host batches (only helps with a GPU)
    prefetch_factor: Optional[int] = None   # batches each worker loads ahead (None: PyTorch's default)
    persistent_workers: bool = False        # keep workers alive between epochs
    start_method: Optional[str] = None      # multiprocessing start method for workers (None: default)
    # Precision and kernels
    precision: str = "fp32"                 # fp32, bf16 (autocast) or fp16 (autocast + GradScaler)
    tf32: bool = False                      # TF32 matmul and cuDNN convolutions (Ampere and newer)
    cudnn_benchmark: bool = False           # let cuDNN pick the fastest algorithm per shape
    channels_last: bool = False             # NHWC memory format for convolutional models
    fused_optimizer: bool = False           # fused AdamW/SGD kernels where available
    compile: bool = False                   # torch.compile the model (only when asked)
    non_blocking: bool = False              # asynchronous host-to-device copies (with pinned memory)
    # Threads and processes
    threads: Optional[int] = None           # torch.set_num_threads per process (None: PyTorch's default)
    nproc: int = 1                          # DDP processes per machine (one per usable GPU)
    backend: Optional[str] = None           # DDP backend: nccl on GPUs, gloo on CPU
    # Batch and schedule
    micro_batch: Optional[int] = None       # samples per step per process (None: the workload's)
    accumulation_steps: int = 1             # micro-batches per optimizer step
    lr_schedule: str = "constant"           # constant or onecycle (OneCycleLR)
    max_lr: Optional[float] = None          # OneCycleLR peak learning rate
    pct_start: float = 0.3                  # OneCycleLR share of steps spent warming up

    def validate(self) -> list[str]:
        """Problems with these values, one short line each (empty when fine): the bounds of
        :data:`FIELDS` (which the config file has too), then what one field needs of another."""
        try:
            schema.check({k: v for k, v in self.to_dict().items() if v is not None or k not in OPTIONAL}, FIELDS)
        except schema.Invalid as exc:
            return [str(exc)]
        return [f"{name} needs num_workers > 0" for name in ("prefetch_factor", "persistent_workers")
                if getattr(self, name) not in (None, False) and self.num_workers == 0]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Settings":
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


OPTIONAL = {f.name for f in dataclasses.fields(Settings) if f.default is None}

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
