"""The runtime API: training code adopts a tuned config in one line each (``cfg =
debtorch.load("debtorch.toml")``; docs/runtime.md shows the loop and documents every method).
The only module of debtorch that imports torch, and only when a method needs it.
"""

from __future__ import annotations

import warnings
from types import FrameType
from typing import Any, Optional

from debtorch import fingerprint as fp_mod
from debtorch.host import LiveHost
from debtorch.train import apply
from debtorch.tune import watch as watch_mod
from debtorch.tune.config import ConfigFile, load_config, usable_cpus

_warned = False  # the fingerprint warning is given once per process


class FingerprintWarning(UserWarning):
    """The config was tuned on a different machine or environment."""


class Config:
    """A loaded config: the settings, and helpers that apply them to PyTorch."""

    def __init__(self, file: ConfigFile):
        self.file = file
        self.settings = file.settings
        self.env = dict(file.env)
        self.fingerprint = dict(file.fingerprint)
        self.tuned = dict(file.tuned)
        self.path = file.path

    def __repr__(self) -> str:
        return f"<debtorch.Config {self.path}: {self.settings.short()}>"

    @property
    def device(self) -> str:
        """The device the settings are for, "cpu" or "cuda" (tuned on a simulated accelerator: "cuda", the
        device it stands for; the simulation is :attr:`simulated`)."""
        return self.file.device

    @property
    def simulated(self) -> Optional[str]:
        """The simulated accelerator (``sim:`` spec) the settings were measured on, or None."""
        return self.file.simulated

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches per optimizer step."""
        return self.settings.accumulation_steps

    @property
    def total_steps(self) -> Optional[int]:
        return self.file.total_steps

    # -- data ------------------------------------------------------------
    def loader_kwargs(self, **defaults: Any) -> dict:
        """Keyword arguments for ``torch.utils.data.DataLoader``: the config's, over your ``defaults``;
        pinned memory only when CUDA is available (it would only warn otherwise)."""
        import torch

        s = self.settings
        kw: dict = dict(defaults)
        kw["num_workers"] = s.num_workers
        kw["pin_memory"] = bool(s.pin_memory and torch.cuda.is_available())
        if s.micro_batch is not None:
            kw["batch_size"] = s.micro_batch
        if s.num_workers > 0:
            if s.prefetch_factor is not None:
                kw["prefetch_factor"] = s.prefetch_factor
            kw["persistent_workers"] = s.persistent_workers
            if s.start_method is not None:
                kw["multiprocessing_context"] = s.start_method
        else:  # these need workers; DataLoader refuses them without
            for name in ("prefetch_factor", "persistent_workers", "multiprocessing_context"):
                kw.pop(name, None)
        return kw

    def to_device(self, tensor: Any, device: Any) -> Any:
        """``tensor.to(device)``: non-blocking from pinned memory; 4-D inputs channels_last when set
        (tuples, lists and dicts of tensors too)."""
        import torch

        return apply.to_device(torch, self.settings, tensor, device)

    # -- precision -------------------------------------------------------
    def autocast(self, device: Any = None) -> Any:
        """A context manager: autocast to bf16 or fp16 as set, nothing for fp32."""
        import torch

        return apply.autocast(torch, self.settings, apply.device_type(device or self.device))

    def scaler(self, device: Any = None) -> Any:
        """A GradScaler, enabled only for fp16 (otherwise a no-op with the same methods)."""
        import torch

        kind = apply.device_type(device or self.device)
        enabled = self.settings.precision == "fp16"
        if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
            return torch.amp.GradScaler(kind, enabled=enabled)
        return torch.cuda.amp.GradScaler(enabled=enabled and kind == "cuda")  # PyTorch < 2.3

    # -- kernels and threads -----------------------------------------------
    def configure_torch(self) -> dict:
        """Apply TF32, cudnn.benchmark and the thread count; return what was set."""
        import torch

        return apply.configure(torch, self.settings)

    def prepare_model(self, model: Any) -> Any:
        """The model in channels_last memory format and compiled, as the config says."""
        import torch

        return apply.prepare_model(torch, self.settings, model)

    def optimizer_kwargs(self) -> dict:
        """``{"fused": True}`` when the config asks for a fused optimizer (Adam, AdamW, SGD)."""
        return {"fused": True} if self.settings.fused_optimizer else {}

    # -- watching the run ----------------------------------------------------
    def watch(self, iterable: Any, **options: Any) -> Any:
        """The loader, measured: data wait, host syncs and a verdict (``debtorch.watch``, docs/runtime.md)."""
        return watch_mod.watch(iterable, **options)

    # -- schedule ----------------------------------------------------------
    def scheduler(self, optimizer: Any, total_steps: Optional[int] = None,
                  steps_per_epoch: Optional[int] = None) -> Any:
        """OneCycleLR over the run (``total_steps``, else the file's, else its epochs x ``steps_per_epoch``),
        or a constant schedule; call ``.step()`` after each optimizer step."""
        import torch

        s = self.settings
        if s.lr_schedule == "constant":
            return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _step: 1.0)
        total = total_steps or self.file.total_steps
        if total is None and self.file.epochs and steps_per_epoch:
            total = self.file.epochs * steps_per_epoch
        if not total:
            raise ValueError(f"{self.path}: OneCycleLR needs the run's length: pass total_steps "
                             "(or steps_per_epoch with schedule.epochs in the file)")
        max_lr = s.max_lr if s.max_lr is not None else [group["lr"] for group in optimizer.param_groups]
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=int(total),
                                                   pct_start=s.pct_start)


def _caller_level() -> int:
    """The stacklevel of the first frame outside debtorch, so the warning names the user's line."""
    import sys

    frame: Optional[FrameType] = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("debtorch"):
        frame, level = frame.f_back, level + 1
    return level


def check_fingerprint(cfg: Config, here: Optional[dict] = None) -> list[str]:
    """Differences between the config's machine and this one; warn once per process."""
    global _warned
    if here is None:
        import torch

        here = fp_mod.current(torch)
    diffs = fp_mod.differences(cfg.fingerprint, here)
    if diffs and not _warned:
        _warned = True
        warnings.warn(f"{cfg.path} was tuned on another machine or environment ({'; '.join(diffs)}); "
                      "re-run `debtorch tune --write` here", FingerprintWarning, stacklevel=_caller_level())
    return diffs


def load(path: str = "debtorch.toml", *, warn_on_mismatch: bool = True, oversubscribe: bool = False) -> Config:
    """Load a config written by ``debtorch tune --write``; :class:`~debtorch.tune.config.ConfigError` (one
    line: file, line, key) when it cannot be used, workers or processes beyond what this machine runs
    included unless the caller says ``oversubscribe=True`` (docs/tune.md, "Bounds")."""
    cfg = Config(load_config(path, cpus=None if oversubscribe else usable_cpus(LiveHost())))
    if warn_on_mismatch:
        check_fingerprint(cfg)
    return cfg
