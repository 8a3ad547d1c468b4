"""The training-step engine: one loop, shared by tune and verify-train (docs/engine.md).

Runs inside the target interpreter; imports only torch and the standard library.  :func:`run_trial`
trains a fresh copy of a workload's model for ``warmup_steps + steps`` optimizer steps under one
:class:`~debtorch.train.settings.Settings` and measures the timed window: the device synchronised
before every clock read, each step cut into chained ``data_wait`` and ``compute`` segments whose
closing and opening clock reads are one, so they add up to the step time exactly.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import gc
import hashlib
import math
import os
import signal
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch

from debtorch import outputs
from debtorch.train import apply, sim
from debtorch.train.device import CPU, Device
from debtorch.train.result import SimTrial, TrialResult
from debtorch.train.settings import Settings
from debtorch.train.workloads import Workload
from debtorch.transport.server import die_with_parent

# Where the engine trains: a torch.device, or a SimDevice (debtorch.train.sim) that answers ``type``
# and ``index`` alike.
EngineDevice = Any

MODES = ("instrumented", "bare", "compute_only")
SMOOTH = 5              # steps in the running mean that decides "loss below target"
COMPUTE_ONLY_BATCHES = 16  # distinct micro-batches kept in device memory for compute_only
SAMPLE_INTERVAL = 0.25  # seconds between gauge readings (between steps)


class TrialError(Exception):
    """A trial that cannot run with these settings; the message is one line."""


# ---------------------------------------------------------------------------
# Processes


def _worker_init(worker_id: int) -> None:  # DataLoader worker_init_fn
    die_with_parent()


def _proc_values(path: str, *keys: str) -> Optional[dict]:
    """``key: N kB`` lines of a /proc file, in bytes (None when unreadable)."""
    out = {}
    try:
        with open(path) as fh:
            for line in fh:
                name = line.split(":", 1)[0]
                if name in keys:
                    out[name] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return out


def _descendants(pid: int) -> list:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
                out.extend(kids)
                todo.extend(kids)
        except (OSError, ValueError):
            continue
    return out


def children_memory(pid: Optional[int] = None) -> int:
    """Bytes the descendants of ``pid`` (DataLoader workers) hold of their own: ``RssAnon + RssShmem``
    (heaps and the batches put in /dev/shm, not torch's shared libraries; pages still shared
    copy-on-write count twice, so this errs high), from ``status`` (microseconds; the exact ``Pss`` of
    ``smaps_rollup`` costs milliseconds)."""
    total = 0
    for p in _descendants(os.getpid() if pid is None else pid):
        vals = _proc_values(f"/proc/{p}/status", "RssAnon", "RssShmem") or {}
        total += vals.get("RssAnon", 0) + vals.get("RssShmem", 0)
    return total


class _Gauges:
    """Peak host memory and GPU utilisation, read in the training thread between steps: on two
    cores a sampling thread (and its hold on the GIL) would slow the very steps it measures.  The
    trainer's peak is the kernel's high-water mark (``VmHWM``, reset through clear_refs), so a peak
    inside a backward pass is not missed; DataLoader workers add the peak of :func:`children_memory`,
    read at most every ``SAMPLE_INTERVAL`` seconds, like NVML's utilisation."""

    def __init__(self, nvml: Any = None, handle: Any = None, notes: Optional[list] = None):
        self._nvml, self._handle = nvml, handle
        self.util: list = []
        self.timing = False
        self.children_peak = 0
        self._last = -SAMPLE_INTERVAL
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")  # reset VmHWM to the current resident size
        except OSError:
            if notes is not None:
                notes.append("could not reset the peak-memory mark; peak host memory covers the worker's life")

    def between_steps(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last < SAMPLE_INTERVAL:
            return
        self._last = now
        self.children_peak = max(self.children_peak, children_memory())
        if self.timing and self._handle is not None:
            with contextlib.suppress(Exception):  # an NVML hiccup loses one sample, not the trial
                self.util.append(float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))

    def peak_host(self) -> Optional[int]:
        own = (_proc_values("/proc/self/status", "VmHWM") or {}).get("VmHWM")
        return None if own is None else own + self.children_peak


def _nvml_for(device: torch.device, notes: list) -> tuple:
    """(pynvml module, handle) for a CUDA device, or (None, None) with a note saying why."""
    try:
        import pynvml  # nvidia-ml-py, optional in the target venv
    except ImportError:
        notes.append("nvidia-ml-py is not installed in this environment")
        return None, None
    try:
        pynvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is None:
            return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
        text = str(uuid)
        return pynvml, pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
    except Exception as exc:  # noqa: BLE001 - NVML is optional
        notes.append(f"NVML unavailable: {str(exc).strip() or type(exc).__name__}")
        return None, None


# ---------------------------------------------------------------------------
# Applying settings


@contextlib.contextmanager
def _torch_state(settings: Settings, device: EngineDevice, notes: list[str]) -> Iterator[None]:
    """Threads, TF32 and cuDNN flags for one trial, as ``debtorch.load()`` applies them
    (:mod:`debtorch.train.apply`), restored afterwards."""
    notes += [f"{f} applies to CUDA only; ignored" for f in ("tf32", "cudnn_benchmark")
              if getattr(settings, f) and device.type != "cuda"]
    with apply.applied(torch, settings):
        yield


def _scaler(settings: Settings, device: EngineDevice, notes: list[str]) -> Any:
    if settings.precision != "fp16":
        return None
    try:
        return torch.amp.GradScaler(device.type)
    except (AttributeError, RuntimeError, TypeError):
        if device.type == "cuda":
            return torch.cuda.amp.GradScaler()
        notes.append(f"no GradScaler for {device.type} in this torch; fp16 runs unscaled")
        return None


def _optimizer(model: torch.nn.Module, lr: float, settings: Settings, notes: list[str]) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if settings.fused_optimizer:
        try:
            return torch.optim.AdamW(params, lr=lr, fused=True)
        except (RuntimeError, TypeError, ValueError) as exc:
            notes.append(f"fused AdamW unavailable ({str(exc).strip().splitlines()[0][:80]}); used the default")
    return torch.optim.AdamW(params, lr=lr)


def _schedule(optimizer: torch.optim.Optimizer, settings: Settings, lr: float, total_steps: int) -> Any:
    if settings.lr_schedule != "onecycle":
        return None
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=settings.max_lr or lr, total_steps=max(total_steps, 2), pct_start=settings.pct_start)


class _TrackedBatches:
    """A batch sampler that remembers the index batches it handed out, in order: the DataLoader
    returns batches in that order (prefetching workers included), so the oldest is the one the
    training loop has just received."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.sent: collections.deque[list[int]] = collections.deque()

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.inner:
            self.sent.append(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.inner)


def build_loader(workload: Workload, settings: Settings, micro_batch: int, seed: int,
                 device: EngineDevice, notes: list[str],
                 distributed: Optional[dict] = None) -> tuple[torch.utils.data.DataLoader, _TrackedBatches]:
    """The DataLoader the settings describe, and its tracked batch sampler."""
    ds = workload.dataset
    sampler: torch.utils.data.Sampler
    if distributed:
        sampler = torch.utils.data.distributed.DistributedSampler(
            ds, num_replicas=distributed["world_size"], rank=distributed["rank"], shuffle=True,
            seed=seed, drop_last=True)
    else:
        sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
    tracked = _TrackedBatches(torch.utils.data.BatchSampler(sampler, micro_batch, drop_last=True))
    if len(tracked) == 0:
        raise TrialError(f"dataset has {len(ds)} samples, fewer than one micro-batch of {micro_batch}"
                         + (f" per process ({distributed['world_size']} processes)" if distributed else ""))
    kwargs: dict[str, Any] = {"batch_sampler": tracked, "num_workers": settings.num_workers}
    if workload.collate_fn is not None:
        kwargs["collate_fn"] = workload.collate_fn
    if settings.pin_memory and device.type == "cuda":
        kwargs["pin_memory"] = True
    elif settings.pin_memory and device.type == "cpu":
        notes.append("pin_memory only helps copies to a GPU; ignored on CPU")
    if settings.num_workers > 0:
        kwargs["worker_init_fn"] = _worker_init
        kwargs["persistent_workers"] = settings.persistent_workers
        if settings.prefetch_factor is not None:
            kwargs["prefetch_factor"] = settings.prefetch_factor
        if settings.start_method is not None:
            kwargs["multiprocessing_context"] = settings.start_method
    return torch.utils.data.DataLoader(ds, **kwargs), tracked


def _worker_death(iterator: Any) -> Optional[RuntimeError]:
    """PyTorch's own wording for a DataLoader worker killed by a signal, or None: when a worker dies
    between batches PyTorch may only say it "exited unexpectedly", but its exit code still says which
    signal (SIGBUS when /dev/shm ran out), and that is what the diagnosis needs."""
    for proc in getattr(iterator, "_workers", None) or []:
        code = getattr(proc, "exitcode", None)
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            text = {"SIGBUS": "Bus error", "SIGKILL": "Killed", "SIGSEGV": "Segmentation fault"}.get(name, name)
            hint = (" It is possible that dataloader's workers are out of shared memory."
                    if name == "SIGBUS" else "")
            return RuntimeError(f"DataLoader worker (pid {proc.pid}) is killed by signal: {text}.{hint}")
    return None


# ---------------------------------------------------------------------------
# Moving batches


def tensor_bytes(obj: Any, depth: int = 0) -> int:
    """Bytes of the tensors in a batch (into tuples, lists and dicts): what one batch puts in shared memory."""
    if isinstance(obj, torch.Tensor):
        return obj.element_size() * obj.nelement()
    if depth > 8:
        return 0
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (tuple, list)):
        return sum(tensor_bytes(x, depth + 1) for x in obj)
    return 0


def _split(batch: Any) -> tuple[Any, Any]:
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    if isinstance(batch, dict) and set(batch) >= {"inputs", "target"} and len(batch) == 2:
        return batch["inputs"], batch["target"]
    what = f"a {type(batch).__name__}" + (f" of {len(batch)}" if isinstance(batch, (tuple, list)) else "")
    raise TrialError(f"a batch must be (inputs, target); the DataLoader gave {what}")


def _call(model: Any, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(*inputs) if isinstance(inputs, (tuple, list)) else model(inputs)


def _sync(device: EngineDevice) -> Callable[[], None]:
    """The synchronisation before each clock read: CUDA's; a simulated device's queue is drained only
    at the window's ends (per step it would forbid the run-ahead being measured)."""
    def cuda() -> None:
        torch.cuda.synchronize(device)

    def nothing() -> None:
        pass

    return cuda if device.type == "cuda" else nothing


def _device(device: Device) -> EngineDevice:
    """The engine's device: a :class:`~debtorch.train.sim.SimDevice` for a simulated accelerator, else torch's."""
    if device.spec is not None:
        return sim.SimDevice(device.spec)
    return torch.device(str(device))


# ---------------------------------------------------------------------------
# The trial


class _Trial:
    """One trial's model, optimizer and batch source: ``fetch`` hands out the next micro-batch (from
    the DataLoader, or device memory in compute-only mode), adding its sample indices to the digest
    while the window is timed; ``step`` is one optimizer step over ``accumulation_steps`` of them."""

    def __init__(self, workload: Workload, settings: Settings, device: EngineDevice, steps: int,
                 warmup_steps: int, seed: int, compute_only: bool, distributed: Optional[dict], notes: list[str]):
        self.workload, self.settings, self.device = workload, settings, device
        self.distributed = distributed
        self.micro_batch = settings.micro_batch or workload.batch_size
        self.accum = settings.accumulation_steps
        self.channels_last = settings.channels_last and workload.convolutional
        self.sim = device if isinstance(device, sim.SimDevice) else None
        self.sync_each_step = False
        if self.sim is None:
            self._model(workload, settings, device, warmup_steps + steps, seed, distributed, notes)
        self.loader, self.tracked = build_loader(workload, settings, self.micro_batch, seed, device, notes,
                                                 distributed)
        self.iterator: Optional[Iterator[Any]] = None   # the DataLoader's, while it runs
        self.epochs, self.counting, self.position = 0, False, 0
        self.batch_bytes: Optional[int] = None   # bytes of the tensors of one timed micro-batch
        self.digest = hashlib.blake2b(digest_size=8)
        self.cached: list = []
        if compute_only:
            for _ in range(min(self.accum * (warmup_steps + steps), COMPUTE_ONLY_BATCHES)):
                batch, indices = self._from_loader()
                inputs, target = _split(batch)
                self.cached.append(((self._to_device(inputs, self.channels_last),
                                     self._to_device(target, False)), indices))
            self.iterator = None  # shut the DataLoader's workers down before timing

    def _model(self, workload: Workload, settings: Settings, device: EngineDevice, total_steps: int, seed: int,
               distributed: Optional[dict], notes: list[str]) -> None:
        lr = float(workload.lr or 1e-3)
        torch.manual_seed(seed)
        model = copy.deepcopy(workload.model).to(device)
        model = apply.prepare_model(torch, settings.replace(compile=False), model, workload.convolutional)
        model.train()
        if distributed:
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        self.model = model
        self.run_model = apply.prepare_model(torch, Settings(compile=settings.compile), model)
        self.optimizer = _optimizer(model, lr, settings, notes)
        self.scheduler = _schedule(self.optimizer, settings, lr, total_steps)
        self.scaler = _scaler(settings, device, notes)
        self.autocast = apply.autocast(torch, settings, device.type)

    # -- batches ---------------------------------------------------------
    def _from_loader(self) -> tuple[Any, list[int]]:
        if self.iterator is None:
            self.iterator = iter(self.loader)
        try:
            try:
                batch = next(self.iterator)
            except StopIteration:
                self.epochs += 1
                if self.distributed:
                    self.tracked.inner.sampler.set_epoch(self.epochs)
                self.iterator = iter(self.loader)
                batch = next(self.iterator)
        except RuntimeError as exc:
            death = _worker_death(self.iterator)
            if death is None:
                raise
            raise death from exc
        return batch, self.tracked.sent.popleft()

    def fetch(self) -> Any:
        if self.cached:
            batch, indices = self.cached[self.position % len(self.cached)]
            self.position += 1
        else:
            batch, indices = self._from_loader()
        if self.counting:
            self.digest.update(repr(indices).encode())
            if self.batch_bytes is None:
                self.batch_bytes = tensor_bytes(batch)
        return batch

    def _to_device(self, obj: Any, channels_last: bool) -> Any:
        return apply.to_device(torch, self.settings, obj, self.device, channels_last)

    # -- training --------------------------------------------------------
    def micro(self, batch: Any, last: bool) -> Optional[torch.Tensor]:
        """Forward and backward of one micro-batch; its loss, detached."""
        inputs, target = _split(batch)
        if not self.cached:
            inputs = self._to_device(inputs, self.channels_last)
            target = self._to_device(target, False)
        if self.sim is not None:  # no model: its work on the device, launched by the host
            self.sim.compute(self.micro_batch)
            return None
        # DDP all-reduces gradients on the last micro-batch of a step only.
        no_sync = self.distributed is not None and not last
        with (self.model.no_sync() if no_sync else contextlib.nullcontext()):
            with self.autocast:
                loss = self.workload.loss_fn(_call(self.run_model, inputs), target)
            scaled = loss / self.accum if self.accum > 1 else loss
            if self.scaler is not None:
                self.scaler.scale(scaled).backward()
            else:
                scaled.backward()
        return loss.detach()

    def optimizer_step(self) -> None:
        if self.sim is not None:
            self.sim.end_step(self.sync_each_step)
            return
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()

    def step(self) -> list:
        """One optimizer step, untimed; the micro-batches' losses."""
        losses = [self.micro(self.fetch(), m == self.accum - 1) for m in range(self.accum)]
        self.optimizer_step()
        return losses

    def drain(self, sync: Callable[[], None], start: bool = False) -> None:
        """The device idle at the window's ends; at its start, a simulated device's counters reset."""
        sync()
        if self.sim is not None:
            self.sim.drain()
            if start:
                self.sim.reset()

    def close(self) -> None:
        self.iterator = None  # shuts the DataLoader's workers down, also after an error
        self.cached.clear()


def settle_steps(settings: Settings) -> int:
    """Untimed steps after the warm-up, and the shortest timed window: two turns of the DataLoader's
    prefetch queue, so that the window reads the loader, not the queue the warm-up left full
    (docs/engine.md; a slow loader's queue is gone after a turn or two, a nearly fast one keeps
    much of it for long)."""
    workers = settings.num_workers or 0
    if workers <= 0:
        return 0
    in_flight = workers * (settings.prefetch_factor or 2)
    return math.ceil(2 * in_flight / max(1, settings.accumulation_steps or 1))


def run_trial(
    workload: Workload,
    settings: Any,
    device: Device = CPU,
    steps: int = 20,
    warmup_steps: int = 3,
    seed: int = 0,
    instrument: bool = True,
    sample_memory: bool = True,
    profile_dir: Optional[str] = None,
    on_step: Optional[Callable[[dict], None]] = None,
    compute_only: bool = False,
    distributed: Optional[dict] = None,
    target_loss: Optional[float] = None,
    stop_at_target: bool = False,
    sync_each_step: bool = False,
) -> TrialResult:
    """Train ``warmup_steps + steps`` optimizer steps on ``device`` and measure the last ``steps``; the
    arguments and the result's keys are docs/engine.md's.  ``settings`` is a :class:`Settings` or its
    dict; ``distributed`` (``{"rank", "world_size"}``) needs the process group initialised."""
    if isinstance(settings, dict):
        settings = Settings.from_dict(settings)
    problems = settings.validate()
    if problems:
        raise TrialError("; ".join(str(p) for p in problems))
    if steps < 1 or warmup_steps < 0:
        raise TrialError("steps must be >= 1 and warmup_steps >= 0")
    if compute_only and not instrument:
        raise TrialError("compute_only is an instrumented mode")
    simulated = device.simulated
    where = _device(device)
    goal: Optional[float] = None
    if target_loss is not None:
        goal = float(target_loss)
    elif not simulated:
        goal = workload.target_loss
    if stop_at_target and (not instrument or goal is None):
        raise TrialError("stop_at_target needs an instrumented trial and a target loss"
                         + (" (a simulated accelerator runs no model)" if simulated else ""))
    if sync_each_step and not simulated:
        raise TrialError("sync_each_step applies to a simulated accelerator (sim:RATE)")
    notes: list[str] = []
    idle: list[str] = []
    if simulated:
        idle = [f for f in ("precision", "tf32", "cudnn_benchmark", "channels_last", "fused_optimizer", "compile")
                if getattr(settings, f) != getattr(Settings(), f)]
    if idle:
        notes.append(f"{device.words()}: no model runs, so {', '.join(idle)} change nothing here")
    elif settings.channels_last and not workload.convolutional and not simulated:
        notes.append("channels_last applies to convolutional workloads; ignored")
    if settings.nproc > 1 and not distributed:
        notes.append("nproc > 1 runs through the distributed launcher; this trial used one process")

    def progress(phase: str, step: int, total: int, loss: Optional[float] = None,
                 step_s: Optional[float] = None) -> None:
        if on_step is not None:
            on_step({"phase": phase, "step": step, "steps": total, "loss": loss, "step_s": step_s})

    # What is alive now (torch's modules, the workload) outlives the trial: frozen, the collection
    # after the trial scans only the trial's own objects (0.2-0.3 s saved per trial once torch's
    # lazy imports have filled the heap; https://docs.python.org/3/library/gc.html#gc.freeze).
    gc.freeze()
    # Untimed steps after the warm-up that let the DataLoader's prefetch queue settle (see
    # settle_steps); they train like warm-up steps, so the schedule counts them.
    settle = 0 if compute_only else settle_steps(settings)
    # A timed window shorter than the queue reads the queue, not the loader (see settle_steps).
    steps = max(steps, settle)
    with _torch_state(settings, where, notes if not simulated else []):
        trial = _Trial(workload, settings, where, steps, warmup_steps + settle, seed, compute_only,
                       distributed, notes)
        trial.sync_each_step = sync_each_step
        gauges = None
        if sample_memory and instrument:
            nvml, handle = _nvml_for(where, notes) if where.type == "cuda" else (None, None)
            gauges = _Gauges(nvml, handle, notes)
        if where.type == "cuda":
            torch.cuda.reset_peak_memory_stats(where)
        try:
            warmup_losses: list[Optional[float]] = []
            for s in range(warmup_steps + settle):
                warmup_losses.append(_mean_loss(trial.step()))
                progress("warmup", s + 1, warmup_steps + settle, warmup_losses[-1])
                if gauges is not None:
                    gauges.between_steps()
            trial.counting = True
            if gauges is not None:
                gauges.timing = True
            profiler = _profiler(profile_dir, where, steps) if profile_dir else None
            stop: Optional[Callable[[list], bool]] = None
            if stop_at_target and goal is not None:
                target = goal

                def stop(losses: list) -> bool:   # a convergence run: the running mean below the target
                    return _reached(target, warmup_losses + losses)

            with (profiler or contextlib.nullcontext()):
                timed = _window(trial, steps, _sync(where), progress, instrument, profiler, gauges, stop)
            simulated_steps = _sim_result(trial, timed) if trial.sim is not None else None
            if gauges is not None:
                gauges.timing = False
                gauges.between_steps(force=True)
        finally:
            trial.close()
        mode = "instrumented" if instrument else "bare"
        if compute_only:
            mode = "compute_only"
        result = _result(trial, timed, warmup_losses, steps, warmup_steps, seed, notes, goal,
                         settle_steps=settle, mode=mode,
                         peak_host_bytes=gauges.peak_host() if gauges is not None else None,
                         peak_device_bytes=torch.cuda.max_memory_allocated(where) if where.type == "cuda" else None,
                         gpu_util_mean=statistics.fmean(gauges.util) if gauges is not None and gauges.util else None,
                         gpu_util_samples=len(gauges.util) if gauges is not None else 0,
                         threads=torch.get_num_threads(),
                         profile_trace=os.path.join(profile_dir, "trace.json") if profile_dir else None,
                         sim=simulated_steps)
    del trial
    gc.collect()
    if where.type == "cuda":
        torch.cuda.empty_cache()
    return result


@dataclass(frozen=True)
class _Timed:
    """The timed window: its length and, instrumented, each step's time cut into data wait and compute."""

    wall: float
    step_s: Optional[list[float]]
    data_s: Optional[list[float]]
    compute_s: Optional[list[float]]
    losses: list[Optional[float]]


def _window(trial: _Trial, steps: int, sync: Callable[[], None], progress: Callable[..., None],
            instrument: bool = True, profiler: Any = None, gauges: Optional[_Gauges] = None,
            stop: Optional[Callable[[list], bool]] = None) -> _Timed:
    """The timed window.  Instrumented, every step is cut into chained data-wait and compute segments,
    the device synchronised before every clock read (one segment's closing read opens the next, so data
    wait + compute = step time exactly); ``stop(losses)`` may end it early (a convergence run).  Bare,
    the same steps with one clock read at each end, their losses read afterwards."""
    clock = time.perf_counter
    step_s: list[float] = []
    data_s: list[float] = []
    compute_s: list[float] = []
    step_losses: list[Any] = []   # instrumented: each step's mean loss; bare: each step's losses, read after
    last = trial.accum - 1
    trial.drain(sync, start=True)
    window_start = clock()
    for s in range(steps):
        if not instrument:
            step_losses.append(trial.step())
            progress("timed", s + 1, steps)
            continue
        losses, waited, worked = [], 0.0, 0.0
        sync()
        t_open = start = clock()
        for m in range(trial.accum):
            with _range("data_wait", profiler):
                batch = trial.fetch()
            sync()
            t_data = clock()
            waited += t_data - t_open
            with _range("compute", profiler):
                losses.append(trial.micro(batch, m == last))
                if m == last:
                    trial.optimizer_step()
            sync()
            t_open = clock()
            worked += t_open - t_data
        step_s.append(t_open - start)
        data_s.append(waited)
        compute_s.append(worked)
        step_losses.append(_mean_loss(losses))
        if profiler is not None:
            profiler.step()
        progress("timed", s + 1, steps, step_losses[-1], step_s[-1])
        if gauges is not None:
            gauges.between_steps()
        if stop is not None and stop(step_losses):
            break
    trial.drain(sync)
    wall = clock() - window_start
    if not instrument:
        return _Timed(wall, None, None, None, [_mean_loss(x) for x in step_losses])
    return _Timed(wall, step_s, data_s, compute_s, step_losses)


def _result(trial: _Trial, timed: _Timed, warmup_losses: list[Optional[float]], steps: int, warmup_steps: int,
            seed: int, notes: list[str], target: Optional[float], **measured: Any) -> TrialResult:
    """The trial's result; ``measured``: what run_trial read beside the window (the gauges, the mode)."""
    wall, step_s, data_s, losses = timed.wall, timed.step_s, timed.data_s, timed.losses
    steps_requested, steps = steps, len(losses)  # fewer when a convergence run reached its target
    samples = steps * trial.accum * trial.micro_batch
    dist = trial.distributed or {"world_size": 1, "rank": 0}
    reached = time_to_target(target, warmup_losses, losses, step_s if step_s is not None else [wall / steps] * steps)
    every = warmup_losses + losses
    nonfinite = next((i for i, x in enumerate(every) if x is not None and not math.isfinite(x)), None)
    return TrialResult(
        workload=trial.workload.name, device=str(trial.device), settings=trial.settings.to_dict(), seed=seed,
        steps=steps, steps_requested=steps_requested, warmup_steps=warmup_steps, micro_batch=trial.micro_batch,
        accumulation_steps=trial.accum, samples_per_step=trial.accum * trial.micro_batch, samples=samples,
        wall_s=wall, samples_per_s=samples / wall if wall > 0 else None,
        step_s=step_s, data_wait_s=data_s, compute_s=timed.compute_s,
        step_median_s=statistics.median(step_s) if step_s else wall / steps,
        data_wait_share=sum(data_s) / wall if data_s is not None and wall > 0 else None,
        overhead_s=wall - sum(step_s) if step_s is not None else None,
        warmup_losses=warmup_losses, losses=losses, loss_first=losses[0] if losses else None,
        loss_last=losses[-1] if losses else None, nonfinite_loss_step=nonfinite,
        sample_digest=trial.digest.hexdigest(), batch_bytes=trial.batch_bytes, epochs=trial.epochs,
        world_size=dist["world_size"], rank=dist["rank"], notes=notes, torch=torch.__version__,
        target_loss=reached.loss, target_step=reached.step, time_to_target_s=reached.seconds, **measured)


def _mean_loss(losses: list[Any]) -> Optional[float]:
    if losses and losses[0] is None:
        return None  # a simulated accelerator: no model, no loss
    return float(torch.stack([x.float() for x in losses]).mean()) if losses else float("nan")


def _sim_result(trial: _Trial, timed: _Timed) -> SimTrial:
    """What the simulated device did per timed step: its work, the host's waits for it, the staging copies."""
    d, steps = trial.sim, max(1, len(timed.losses))
    assert d is not None
    return SimTrial(spec=d.spec.text(), words=d.spec.words(), rate=d.spec.rate, sync_each_step=trial.sync_each_step,
                    device_busy_s=d.busy / steps, device_wait_s=d.waited / steps, staging_s=d.staged / steps,
                    wake_s=d.wake / steps)


def _reached(target: float, losses: list) -> bool:
    """Whether the running mean of the last ``SMOOTH`` losses is below ``target``."""
    return len(losses) >= SMOOTH and sum(losses[-SMOOTH:]) / SMOOTH < target


@dataclass(frozen=True)
class Target:
    """When a trial's loss reached its target: the step (1-based, warm-up included) and the time to it."""

    loss: Optional[float]
    step: Optional[int] = None
    seconds: Optional[float] = None


def time_to_target(target: Optional[float], warmup_losses: list, losses: list, step_times: list) -> Target:
    """When the running mean of the loss (over ``SMOOTH`` steps) first fell below ``target``: the step
    (1-based, warm-up included) and the time to it (warm-up steps, whose times include start-up costs,
    counted at the median timed step)."""
    if target is None:
        return Target(None)
    every = list(warmup_losses) + list(losses)
    step = next((n for n in range(SMOOTH, len(every) + 1) if _reached(target, every[:n])), None)
    if step is None:
        return Target(target)
    typical = statistics.median(step_times) if step_times else 0.0
    return Target(target, step, sum(([typical] * len(warmup_losses) + list(step_times))[:step]))


def _range(name: str, profiler: Any) -> Any:
    return contextlib.nullcontext() if profiler is None else torch.profiler.record_function(name)


def _profiler(profile_dir: str, device: EngineDevice, steps: int) -> Any:
    """A torch.profiler trace of up to 5 timed steps, written to ``profile_dir``/trace.json."""
    os.makedirs(profile_dir, exist_ok=True)
    kinds = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    return torch.profiler.profile(
        activities=kinds,
        schedule=torch.profiler.schedule(wait=0, warmup=1 if steps > 1 else 0, active=max(1, min(5, steps - 1)), repeat=1),
        on_trace_ready=lambda prof: _export_trace(prof, os.path.join(profile_dir, "trace.json")))


def _export_trace(prof: Any, path: str) -> None:
    """Write the Chrome trace whole or not at all: into a private folder beside it (made
    exclusively, so never through a planted link), then put in place over nothing but a
    regular file (verify-train refused an existing trace without --force before the run)."""
    folder = outputs.temporary_folder(".trace-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        tmp = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(tmp)
        outputs.publish(tmp, path, force=True)
    finally:
        outputs.remove_folder(folder)
