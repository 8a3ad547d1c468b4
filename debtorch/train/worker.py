"""The training worker: a long-lived process of the target interpreter.

debtorch's own process never imports torch; :class:`debtorch.train.runner.Worker`
starts this module in the user's interpreter and talks to it in JSON lines
(docs/engine.md):

* requests, one per line, on **stdin**: ``{"id": 1, "op": "info"}``,
  ``{"op": "load", "workload": "builtin:cnn", "device": "cpu"}``,
  ``{"op": "trial", "settings": {...}, "steps": 20, "warmup": 3,
  "mode": "instrumented", "seed": 0}``, ``{"op": "exit"}``;
* events and results on the **protocol file descriptor** named by
  ``DEBTORCH_PROTOCOL_FD``, never on stdout: at start-up stdout is pointed
  at stderr, so a workload's prints (Python's or C's) cannot corrupt the
  protocol.

Every failure becomes a result with ``"ok": false`` and an ``error`` object
(``kind``, one-line ``message``, sometimes ``finding`` and ``suggestion``);
the traceback travels in ``error.traceback`` for ``--verbose``, never onto
the user's terminal.

Standard library only at import time; torch is imported in :func:`main`.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import traceback
from typing import Any, Optional

from debtorch.lint.hostwaits import count_host_waits, workload_file
from debtorch.train import sim
from debtorch.train._proc import die_with_parent

PROTOCOL_VERSION = 1
PROTOCOL_FD_ENV = "DEBTORCH_PROTOCOL_FD"
SHM_FINDING = "memory.E001"  # the doctor's id for /dev/shm too small


class Protocol:
    """Writes one JSON object per line to the protocol descriptor."""

    def __init__(self, fd: int):
        self.stream = os.fdopen(fd, "w", buffering=1, encoding="utf-8", closefd=True)

    def send(self, obj: dict) -> None:
        self.stream.write(json.dumps(obj, default=_jsonable, allow_nan=True) + "\n")
        self.stream.flush()


def _jsonable(obj: Any):
    return str(obj)


# ---------------------------------------------------------------------------
# Errors as findings


def classify(exc: BaseException, context: Optional[dict] = None) -> dict:
    """A structured, one-line account of why a request failed.

    ``context`` may hold ``micro_batch``, ``accumulation_steps``,
    ``num_workers`` and ``device`` of the failing trial.
    """
    ctx = context or {}
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    name = type(exc).__name__
    err: dict = {"kind": "exception", "type": name, "message": f"{name}: {first}" if first else name,
                 "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]}
    mod = sys.modules.get("debtorch.train.workloads")
    eng = sys.modules.get("debtorch.train.engine")
    if mod is not None and isinstance(exc, mod.WorkloadError):
        err.update(kind="workload", message=first)
        err.pop("traceback", None)
    elif eng is not None and isinstance(exc, eng.TrialError):
        err.update(kind="settings", message=first)
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
        who = (f"{workers} DataLoader worker" + ("s" if workers != 1 else "")) if workers else "the DataLoader workers"
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


class Session:
    """What the worker holds between requests: the loaded workload and its device."""

    def __init__(self, proto: Protocol):
        self.proto = proto
        self.workload = None
        self.device = None
        self.file: Optional[str] = None   # the workload module's file (host waits are counted there)
        self.context: Optional[dict] = None

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "info":
            return info()
        if op == "load":
            return self.load(req)
        if op == "trial":
            return self.trial(req)
        if op == "host_waits":
            return self.host_waits(req)
        raise BadRequest(f"unknown op {op!r}")

    def load(self, req: dict) -> dict:
        import torch

        from debtorch.train.workloads import load_workload  # defer: torch, after the worker said it started

        spec = req.get("workload")
        if not isinstance(spec, str):
            raise BadRequest("load needs 'workload' (module:function)")
        device = req.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        check_device(device)
        options = req.get("options") or {}
        if not isinstance(options, dict):
            raise BadRequest("'options' must be an object")
        self.workload = None
        self.workload = load_workload(spec, options, seed=int(req.get("seed", 0)))
        self.device = device
        out = self.workload.describe()
        out["device"] = device
        self.file = out["file"] = workload_file(spec)
        return out

    def host_waits(self, req: dict) -> dict:
        """Synchronising CUDA calls per step in the workload's own file (docs/lint.md); CUDA only."""
        import torch

        from debtorch.train.engine import run_trial  # defer: imports torch
        from debtorch.train.settings import Settings  # defer: with the engine

        if self.workload is None:
            raise BadRequest("no workload loaded: send a load request first")
        path = self.file
        if torch.device(self.device).type != "cuda" or not hasattr(torch.cuda, "set_sync_debug_mode"):
            return {"measured": False, "file": path}
        steps = max(1, int(req.get("steps", 5)))

        def run(on_step):
            return run_trial(self.workload, Settings(), device=self.device, steps=steps, warmup_steps=1,
                             seed=int(req.get("seed", 0)), instrument=False, sample_memory=False, on_step=on_step)

        out = count_host_waits(run, [path] if path else [], torch)
        out["file"] = path
        return out

    def trial(self, req: dict) -> dict:
        from debtorch.train.engine import MODES, run_trial  # defer: torch, after the worker said it started
        from debtorch.train.settings import Settings  # defer: with the engine

        if self.workload is None:
            raise BadRequest("no workload loaded: send a load request first")
        mode = req.get("mode", "instrumented")
        if mode not in MODES:
            raise BadRequest(f"mode must be one of {', '.join(MODES)}")
        raw = req.get("settings") or {}
        try:
            settings = Settings.from_dict(raw)
        except KeyError as exc:
            raise BadRequest(f"unknown setting {exc.args[0]!r}") from None
        except TypeError as exc:
            raise BadRequest(f"bad settings: {exc}") from None
        rid = req.get("id")
        want_progress = req.get("progress", True)

        def on_step(ev: dict) -> None:
            if want_progress:
                self.proto.send(dict(ev, event="progress", id=rid))

        self.context = {"micro_batch": settings.micro_batch or self.workload.batch_size,
                        "accumulation_steps": settings.accumulation_steps,
                        "num_workers": settings.num_workers, "device": self.device}
        return run_trial(
            self.workload, settings, device=self.device,
            steps=int(req.get("steps", 20)), warmup_steps=int(req.get("warmup", 3)),
            seed=int(req.get("seed", 0)), instrument=(mode != "bare"),
            sample_memory=bool(req.get("sample_memory", True)), profile_dir=req.get("profile_dir"),
            on_step=on_step, compute_only=(mode == "compute_only"),
            target_loss=req.get("target_loss"), stop_at_target=bool(req.get("stop_at_target", False)),
            sync_each_step=bool(req.get("sync_each_step", False)),
        )


class BadRequest(Exception):
    pass


def check_device(device: str) -> None:
    """Raise a one-line error when this torch cannot use ``device``."""
    import torch

    if sim.is_sim(device):
        try:
            sim.parse(device)
        except ValueError as exc:
            raise DeviceError(str(exc)) from None
        return
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise BadRequest(f"bad device {device!r}: {exc}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise DeviceError(f"device {device} requested but torch {torch.__version__} ({build}) sees no GPU")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(f"device {device} requested but only {torch.cuda.device_count()} GPU(s) are visible")
    elif dev.type != "cpu":
        raise DeviceError(f"device {device}: only cpu, cuda and sim:RATE are supported")


class DeviceError(Exception):
    pass


def info() -> dict:
    import torch

    out = {
        "pid": os.getpid(),
        "python": sys.executable,
        "python_version": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "gpus": [],
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "mkldnn_bf16": _mkldnn_bf16(torch),
        "distributed": torch.distributed.is_available(),
        "protocol": PROTOCOL_VERSION,
        "debtorch": os.path.dirname(os.path.abspath(sys.modules["debtorch"].__file__)),
    }
    if out["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out["gpus"].append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                                "memory_bytes": p.total_memory})
    return out


def _mkldnn_bf16(torch) -> Optional[bool]:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # noqa: BLE001 - a private probe; unknown is fine
        return None


def serve(proto: Protocol, stdin, session=None) -> int:
    """Answer requests until ``exit`` or end of input; ``session`` handles each (``handle(req)``)."""
    session = session if session is not None else Session(proto)
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError:
            proto.send({"id": None, "ok": False, "error": {"kind": "bad_request", "message": "a request must be one JSON object per line"}})
            continue
        if not isinstance(req, dict):
            proto.send({"id": None, "ok": False, "error": {"kind": "bad_request", "message": "a request must be a JSON object"}})
            continue
        rid = req.get("id")
        if req.get("op") == "exit":
            proto.send({"id": rid, "ok": True, "result": {}})
            return 0
        session.context = None
        try:
            proto.send({"id": rid, "ok": True, "result": session.handle(req)})
        except BadRequest as exc:
            proto.send({"id": rid, "ok": False, "error": {"kind": "bad_request", "message": str(exc)}})
            continue
        except DeviceError as exc:
            proto.send({"id": rid, "ok": False, "error": {"kind": "device", "message": str(exc)}})
            continue
        except Exception as exc:  # noqa: BLE001 - every failure is a result, never a traceback
            error = classify(exc, session.context)
        else:
            continue
        # Out of the except block, the failed trial's frames (model, batches) can be
        # freed before the next request: after an OOM the next trial needs that memory.
        _release()
        proto.send({"id": rid, "ok": False, "error": error})
    return 0


def _release() -> None:
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def main(make_session=Session) -> int:
    """Start-up shared with other torch-side modules (debtorch.fleet.torchside): they pass their own
    session class, and speak this module's protocol."""
    fd = int(os.environ.get(PROTOCOL_FD_ENV, "-1"))
    if fd < 0:
        sys.stderr.write("debtorch worker: run by debtorch (no protocol descriptor)\n")
        return 2
    proto = Protocol(fd)
    # The workload's prints go to stderr, never into the protocol or the report.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    die_with_parent()
    try:
        import torch
    except ImportError as exc:
        proto.send({"event": "fatal", "kind": "no_torch", "message": f"{sys.executable} has no torch ({exc})"})
        return 3
    except Exception as exc:  # noqa: BLE001 - a broken torch install
        proto.send({"event": "fatal", "kind": "broken_torch",
                    "message": f"{sys.executable}: import torch failed: {type(exc).__name__}: {str(exc).strip()[:200]}"})
        return 3
    proto.send({"event": "hello", "pid": os.getpid(), "python": sys.executable,
                "python_version": platform.python_version(), "torch": torch.__version__,
                "protocol": PROTOCOL_VERSION})
    return serve(proto, sys.stdin, make_session(proto))


if __name__ == "__main__":
    sys.exit(main())
