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

PRECISIONS = ("fp32", "bf16", "fp16")
START_METHODS = ("fork", "forkserver", "spawn")
LR_SCHEDULES = ("constant", "onecycle")
DEVICES = ("cpu", "cuda")


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
        """Problems with these values, one short line each (empty when fine)."""
        errs = []
        if not isinstance(self.num_workers, int) or self.num_workers < 0:
            errs.append("num_workers must be an integer >= 0")
        if self.prefetch_factor is not None and (not isinstance(self.prefetch_factor, int) or self.prefetch_factor < 1):
            errs.append("prefetch_factor must be an integer >= 1")
        if self.prefetch_factor is not None and self.num_workers == 0:
            errs.append("prefetch_factor needs num_workers > 0")
        if self.persistent_workers and self.num_workers == 0:
            errs.append("persistent_workers needs num_workers > 0")
        if self.start_method is not None and self.start_method not in START_METHODS:
            errs.append(f"start_method must be one of {', '.join(START_METHODS)}")
        if self.precision not in PRECISIONS:
            errs.append(f"precision must be one of {', '.join(PRECISIONS)}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            errs.append("threads must be an integer >= 1")
        if not isinstance(self.nproc, int) or self.nproc < 1:
            errs.append("nproc must be an integer >= 1")
        if self.backend is not None and self.backend not in ("nccl", "gloo"):
            errs.append("backend must be nccl or gloo")
        if self.micro_batch is not None and (not isinstance(self.micro_batch, int) or self.micro_batch < 1):
            errs.append("micro_batch must be an integer >= 1")
        if not isinstance(self.accumulation_steps, int) or self.accumulation_steps < 1:
            errs.append("accumulation_steps must be an integer >= 1")
        if self.lr_schedule not in LR_SCHEDULES:
            errs.append(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}")
        if self.max_lr is not None and not (isinstance(self.max_lr, (int, float)) and self.max_lr > 0):
            errs.append("max_lr must be a number > 0")
        if not (isinstance(self.pct_start, (int, float)) and 0 < self.pct_start < 1):
            errs.append("pct_start must be between 0 and 1")
        return errs

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Settings":
        """Build from a dict; unknown keys raise KeyError naming the key."""
        names = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in names:
                raise KeyError(key)
        return cls(**data)

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    def short(self) -> str:
        """A compact label for tables: 'w2 pf4 pin bf16 t2 cl' ('np': workers not persistent)."""
        parts = [f"w{self.num_workers}"]
        if self.prefetch_factor is not None:
            parts.append(f"pf{self.prefetch_factor}")
        if self.num_workers and not self.persistent_workers:
            parts.append("np")
        if self.pin_memory:
            parts.append("pin")
        parts.append(self.precision)
        if self.threads is not None:
            parts.append(f"t{self.threads}")
        if self.channels_last:
            parts.append("cl")
        if self.compile:
            parts.append("compile")
        return " ".join(parts)


def defaults() -> Settings:
    """PyTorch's own defaults: what a training script gets when it tunes nothing."""
    return Settings()
