"""Settings applied to PyTorch, in one place: what is measured is what is applied.

The measuring engine (``tune --measure``, ``verify-train``) and the runtime API
(``debtorch.load(...)``) both call these functions, so a setting cannot mean one thing while it
is measured and another once a training script adopts it (two paths once disagreed: with
``tf32 = false`` the runtime turned cuDNN's TF32 off while the engine left PyTorch's default on).
Every function takes the ``torch`` module as its first argument: this module imports nothing of
torch, so debtorch's own process can import the package.  ``tf32`` sets only the CUDA flags:
``torch.set_float32_matmul_precision`` would also change oneDNN's CPU matmul precision.
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Iterator, Optional

from debtorch.train.settings import Settings


def configure(torch: Any, s: Settings) -> dict:
    """Apply the process-wide settings; return what was set (``tf32``, ``cudnn_benchmark``, ``threads``)."""
    done: dict = {"tf32": bool(s.tf32), "cudnn_benchmark": bool(s.cudnn_benchmark)}
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = done["tf32"]
    torch.backends.cudnn.benchmark = done["cudnn_benchmark"]
    if s.threads is not None:
        torch.set_num_threads(s.threads)
        done["threads"] = s.threads
    return done


def state(torch: Any) -> dict:
    """The process-wide state the settings touch (and the related precisions), for comparing and restoring."""
    mkldnn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return {
        "threads": torch.get_num_threads(),
        "matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "mkldnn_matmul_precision": getattr(mkldnn, "fp32_precision", None),
    }


def restore(torch: Any, saved: dict) -> None:
    """Put back what :func:`configure` changes, as :func:`state` read it."""
    torch.set_num_threads(saved["threads"])
    torch.backends.cuda.matmul.allow_tf32 = saved["matmul_tf32"]
    torch.backends.cudnn.allow_tf32 = saved["cudnn_tf32"]
    torch.backends.cudnn.benchmark = saved["cudnn_benchmark"]


@contextlib.contextmanager
def applied(torch: Any, s: Settings) -> Iterator[None]:
    """:func:`configure` for the duration of a block (one trial), then the state as it was."""
    saved = state(torch)
    configure(torch, s)
    try:
        yield
    finally:
        restore(torch, saved)


def autocast(torch: Any, s: Settings, kind: str) -> ContextManager[Any]:
    """Autocast to bf16 or fp16 as set on device ``kind`` ("cpu", "cuda"); nothing for fp32."""
    if s.precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if s.precision == "bf16" else torch.float16
    return torch.autocast(device_type=kind, dtype=dtype)


def prepare_model(torch: Any, s: Settings, model: Any, convolutional: bool = True) -> Any:
    """The model in channels_last memory format and compiled, as set (the runtime cannot know whether a
    model is convolutional: it converts any, a no-op for models without 4-D weights)."""
    if s.channels_last and convolutional:
        model = model.to(memory_format=torch.channels_last)
    if s.compile:
        model = torch.compile(model)
    return model


def to_device(torch: Any, s: Settings, obj: Any, device: Any, channels_last: Optional[bool] = None) -> Any:
    """Tensors (also in tuples, lists and dicts) moved to ``device``: non-blocking to a GPU when set,
    4-D tensors in channels_last when set (``channels_last`` overrides the setting: targets never)."""
    cl = s.channels_last if channels_last is None else channels_last
    nb = bool(s.non_blocking and device_type(device) in ("cuda", "sim"))
    if isinstance(obj, torch.Tensor) and device_type(device) == "sim":  # debtorch.train.sim: a simulated copy
        return device.copy(obj, pinned=bool(s.pin_memory), non_blocking=nb)
    if isinstance(obj, torch.Tensor):
        obj = obj.to(device, non_blocking=nb)
        if cl and obj.dim() == 4:
            obj = obj.contiguous(memory_format=torch.channels_last)
        return obj
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(torch, s, x, device, cl) for x in obj)
    return {k: to_device(torch, s, v, device, cl) for k, v in obj.items()} if isinstance(obj, dict) else obj


def device_type(device: Any) -> str:
    """"cpu", "cuda" ... of a torch.device, a string like "cuda:1", or None (the CPU)."""
    kind = "cpu" if device is None else getattr(device, "type", None)
    return str(kind) if kind is not None else str(device).split(":", 1)[0]
