"""The training worker, in the target interpreter: a transport session (:mod:`debtorch.transport.server`)
answering ``info``, ``load``, ``trial`` and ``host_waits`` (docs/engine.md); a failed request's error
may carry a ``finding`` and a ``suggestion``.  Standard library only at import time.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

from debtorch.hostwaits import count_host_waits, workload_file
from debtorch.train.device import Device
from debtorch.transport import server
from debtorch.transport.server import BadRequest, RequestError

SHM_FINDING = "memory.E001"  # the doctor's id for /dev/shm too small


# ---------------------------------------------------------------------------
# Errors as findings


def classify(exc: BaseException, context: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """A structured, one-line account of why a request failed; ``context`` may hold the failing trial's
    ``micro_batch``, ``accumulation_steps``, ``num_workers`` and ``device``."""
    ctx = context or {}
    err = server.describe(exc)
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    ours = {"workload": getattr(sys.modules.get("debtorch.train.workloads"), "WorkloadError", None),
            "settings": getattr(sys.modules.get("debtorch.train.engine"), "TrialError", None)}
    kind = next((k for k, cls in ours.items() if cls is not None and isinstance(exc, cls)), None)
    if kind:
        err.update(kind=kind, message=first)
        err.pop("traceback", None)
    elif _is_oom(exc, text):
        mb, acc = ctx.get("micro_batch"), ctx.get("accumulation_steps") or 1
        where = ctx.get("device") or "the GPU"
        msg = f"{where} ran out of memory at micro-batch {mb}" if mb else f"{where} ran out of memory"
        if mb and mb > 1:
            fit = {"micro_batch": max(1, mb // 2), "accumulation_steps": acc * 2}
            err["suggestion"] = fit
            msg += f"; try micro_batch {fit['micro_batch']} with accumulation_steps {fit['accumulation_steps']}"
        err.update(kind="oom", message=msg)
    elif "bus error" in text.lower() or ("dataloader worker" in text.lower() and "shared memory" in text.lower()):
        workers = ctx.get("num_workers")
        who = "the DataLoader workers"
        if workers:
            who = f"{workers} DataLoader worker" + ("s" if workers != 1 else "")
        err.update(kind="shm", finding=SHM_FINDING,
                   message=f"a DataLoader worker died of a bus error: /dev/shm is too small for {who} "
                           f"(debtorch doctor: {SHM_FINDING})")
    elif "dataloader worker" in text.lower() and "killed by signal" in text.lower():
        err.update(kind="dataloader", message=f"a DataLoader worker was killed: {first}")
    return err


def _is_oom(exc: BaseException, text: str) -> bool:
    torch = sys.modules.get("torch")
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)) if t)
    if oom_types and isinstance(exc, oom_types):
        return True
    return "out of memory" in text.lower() and ("cuda" in text.lower() or "hip" in text.lower())


# ---------------------------------------------------------------------------
# The request loop


class Session(server.Session):
    """What the worker holds between requests: the loaded workload and its device."""

    def __init__(self, proto: Any):
        super().__init__(proto)
        self.workload: Any = None         # the loaded Workload (debtorch.train.workloads imports torch)
        self.device: Optional[Device] = None
        self.file: Optional[str] = None   # the workload module's file (host waits are counted there)
        self.context: Optional[dict[str, Any]] = None

    def handle(self, req: dict) -> dict:
        self.context = None
        return super().handle(req)

    def classify(self, exc: BaseException) -> dict:
        return classify(exc, self.context)

    def op_info(self, req: dict) -> dict:
        return info()

    def op_load(self, req: dict) -> dict:
        import torch

        from debtorch.train.workloads import load_workload  # defer: torch, after the worker said it started

        spec = req.get("workload")
        if not isinstance(spec, str):
            raise BadRequest("load needs 'workload' (module:function)")
        device = request_device(req.get("device"), torch.cuda.is_available())
        check_device(device)
        options = req.get("options") or {}
        if not isinstance(options, dict):
            raise BadRequest("'options' must be an object")
        self.workload = None
        self.workload = load_workload(spec, options, seed=int(req.get("seed", 0)))
        self.device = device
        out = self.workload.describe()
        out["device"] = str(device)
        self.file = out["file"] = workload_file(spec)
        return out

    def _loaded(self) -> None:
        if self.workload is None:
            raise BadRequest("no workload loaded: send a load request first")

    def op_host_waits(self, req: dict) -> dict:
        """Synchronising CUDA calls per step in the workload's own file (docs/lint.md); CUDA only."""
        import torch

        from debtorch.train.engine import run_trial  # defer: imports torch
        from debtorch.train.settings import Settings  # defer: with the engine

        self._loaded()
        path = self.file
        device = self.device
        if device is None or not device.is_cuda or not hasattr(torch.cuda, "set_sync_debug_mode"):
            return {"measured": False, "file": path}
        steps = max(1, int(req.get("steps", 5)))

        def run(on_step: Any) -> Any:
            return run_trial(self.workload, Settings(), device=device, steps=steps, warmup_steps=1,
                             seed=int(req.get("seed", 0)), instrument=False, sample_memory=False, on_step=on_step)

        out = count_host_waits(run, [path] if path else [], torch)
        out["file"] = path
        return out

    def op_trial(self, req: dict) -> dict:
        from debtorch.train.engine import MODES, run_trial  # defer: torch, after the worker said it started
        from debtorch.train.settings import Settings  # defer: with the engine

        self._loaded()
        mode = req.get("mode", "instrumented")
        if mode not in MODES:
            raise BadRequest(f"mode must be one of {', '.join(MODES)}")
        try:
            settings = Settings.from_dict(req.get("settings") or {})
        except KeyError as exc:
            raise BadRequest(f"unknown setting {exc.args[0]!r}") from None
        except TypeError as exc:
            raise BadRequest(f"bad settings: {exc}") from None
        rid = req.get("id")

        def progress(ev: dict) -> None:
            self.proto.send(dict(ev, event="progress", id=rid))

        device = self.device
        assert device is not None   # loaded: the load request set it
        self.context = {"micro_batch": settings.micro_batch or self.workload.batch_size,
                        "accumulation_steps": settings.accumulation_steps,
                        "num_workers": settings.num_workers, "device": str(device)}
        return run_trial(
            self.workload, settings, device=device,
            steps=int(req.get("steps", 20)), warmup_steps=int(req.get("warmup", 3)),
            seed=int(req.get("seed", 0)), instrument=(mode != "bare"),
            sample_memory=bool(req.get("sample_memory", True)), profile_dir=req.get("profile_dir"),
            on_step=progress if req.get("progress", True) else None, compute_only=(mode == "compute_only"),
            target_loss=req.get("target_loss"), stop_at_target=bool(req.get("stop_at_target", False)),
            sync_each_step=bool(req.get("sync_each_step", False)),
        ).to_json()


def request_device(text: Any, cuda_available: bool) -> Device:
    """The device a request names (the worker's edge: the one place it reads a device's text), or
    cuda when this torch sees a GPU, else cpu.  DeviceError for a device the worker cannot parse."""
    if not text:
        return Device.gpu() if cuda_available else Device("cpu")
    try:
        return Device.parse(text)
    except ValueError as exc:
        raise DeviceError(f"device {exc}") from None


def check_device(device: Device) -> None:
    """Raise a one-line error when this torch cannot use ``device``."""
    import torch

    if device.simulated:
        return
    if device.is_cuda:
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise DeviceError(f"device {device} requested but torch {torch.__version__} ({build}) sees no GPU")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(f"device {device} requested but only {torch.cuda.device_count()} GPU(s) are visible")


class DeviceError(RequestError):
    kind = "device"


def info() -> dict:
    import torch

    out, cuda = server.hello(torch), torch.cuda.is_available()
    protocol = out.pop("protocol")
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())] if cuda else []
    return {**out, "torch_cuda": torch.version.cuda, "cuda_available": cuda,
            "gpus": [{"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}", "memory_bytes": p.total_memory}
                     for i, p in enumerate(props)],
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "mkldnn_bf16": _mkldnn_bf16(torch),
            "distributed": torch.distributed.is_available(), "protocol": protocol,
            "debtorch": os.path.dirname(os.path.abspath(sys.modules["debtorch"].__file__ or "."))}


def _mkldnn_bf16(torch: Any) -> Optional[bool]:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # noqa: BLE001 - a private probe; unknown is fine
        return None


def main() -> int:
    return server.main(Session)


if __name__ == "__main__":
    sys.exit(main())
