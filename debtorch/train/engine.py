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
from typing import Any, Callable, Optional

import torch

from debtorch import outputs
from debtorch.train import apply, sim
from debtorch.train.settings import Settings
from debtorch.train.workloads import Workload
from debtorch.transport.server import die_with_parent

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
def _torch_state(settings: Settings, device: torch.device, notes: list):
    """Threads, TF32 and cuDNN flags for one trial, as ``debtorch.load()`` applies them
    (:mod:`debtorch.train.apply`), restored afterwards."""
    notes += [f"{f} applies to CUDA only; ignored" for f in ("tf32", "cudnn_benchmark")
              if getattr(settings, f) and device.type != "cuda"]
    with apply.applied(torch, settings):
        yield


def _scaler(settings: Settings, device: torch.device, notes: list):
    if settings.precision != "fp16":
        return None
    try:
        return torch.amp.GradScaler(device.type)
    except (AttributeError, RuntimeError, TypeError):
        if device.type == "cuda":
            return torch.cuda.amp.GradScaler()
        notes.append(f"no GradScaler for {device.type} in this torch; fp16 runs unscaled")
        return None


def _optimizer(model: torch.nn.Module, lr: float, settings: Settings, notes: list):
    params = [p for p in model.parameters() if p.requires_grad]
    if settings.fused_optimizer:
        try:
            return torch.optim.AdamW(params, lr=lr, fused=True)
        except (RuntimeError, TypeError, ValueError) as exc:
            notes.append(f"fused AdamW unavailable ({str(exc).strip().splitlines()[0][:80]}); used the default")
    return torch.optim.AdamW(params, lr=lr)


def _schedule(optimizer, settings: Settings, lr: float, total_steps: int):
    if settings.lr_schedule != "onecycle":
        return None
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=settings.max_lr or lr, total_steps=max(total_steps, 2), pct_start=settings.pct_start)


class _TrackedBatches:
    """A batch sampler that remembers the index batches it handed out, in order: the DataLoader
    returns batches in that order (prefetching workers included), so the oldest is the one the
    training loop has just received."""

    def __init__(self, inner):
        self.inner = inner
        self.sent: collections.deque = collections.deque()

    def __iter__(self):
        for batch in self.inner:
            self.sent.append(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.inner)


def build_loader(workload: Workload, settings: Settings, micro_batch: int, seed: int,
                 device: torch.device, notes: list, distributed: Optional[dict] = None):
    """The DataLoader the settings describe, and its tracked batch sampler."""
    ds = workload.dataset
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
    kwargs: dict = {"batch_sampler": tracked, "num_workers": settings.num_workers}
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


def _worker_death(iterator) -> Optional[RuntimeError]:
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


def _split(batch):
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    if isinstance(batch, dict) and set(batch) >= {"inputs", "target"} and len(batch) == 2:
        return batch["inputs"], batch["target"]
    what = f"a {type(batch).__name__}" + (f" of {len(batch)}" if isinstance(batch, (tuple, list)) else "")
    raise TrialError(f"a batch must be (inputs, target); the DataLoader gave {what}")


def _call(model, inputs):
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(*inputs) if isinstance(inputs, (tuple, list)) else model(inputs)


def _sync(device) -> Callable[[], None]:
    """The synchronisation before each clock read: CUDA's; a simulated device's queue is drained only
    at the window's ends (per step it would forbid the run-ahead being measured)."""
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def _device(device):
    return sim.SimDevice(sim.parse(device)) if sim.is_sim(device) else torch.device(device)


# ---------------------------------------------------------------------------
# The trial


class _Trial:
    """One trial's model, optimizer and batch source: ``fetch`` hands out the next micro-batch (from
    the DataLoader, or device memory in compute-only mode), adding its sample indices to the digest
    while the window is timed; ``step`` is one optimizer step over ``accumulation_steps`` of them."""

    def __init__(self, workload: Workload, settings: Settings, device: torch.device, steps: int,
                 warmup_steps: int, seed: int, compute_only: bool, distributed: Optional[dict], notes: list):
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
        self.iterator, self.epochs, self.counting, self.position = None, 0, False, 0
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

    def _model(self, workload: Workload, settings: Settings, device: torch.device, total_steps: int, seed: int,
               distributed: Optional[dict], notes: list) -> None:
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
    def _from_loader(self):
        if self.iterator is None:
            self.iterator = iter(self.loader)
        try:
            try:
                batch = next(self.iterator)
            except StopIteration:
                self.epochs += 1
                if self.distributed:
                    self.loader.batch_sampler.inner.sampler.set_epoch(self.epochs)
                self.iterator = iter(self.loader)
                batch = next(self.iterator)
        except RuntimeError as exc:
            death = _worker_death(self.iterator)
            if death is None:
                raise
            raise death from exc
        return batch, self.tracked.sent.popleft()

    def fetch(self):
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

    def _to_device(self, obj, channels_last: bool):
        return apply.to_device(torch, self.settings, obj, self.device, channels_last)

    # -- training --------------------------------------------------------
    def micro(self, batch, last: bool) -> torch.Tensor:
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

    def drain(self, sync, start: bool = False) -> None:
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
    device: Any = "cpu",
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
) -> dict:
    """Train ``warmup_steps + steps`` optimizer steps and measure the last ``steps``; the arguments
    and the result dict are docs/engine.md's.  ``settings`` is a :class:`Settings` or its dict;
    ``distributed`` (``{"rank", "world_size"}``) needs the process group initialised."""
    if isinstance(settings, dict):
        settings = Settings.from_dict(settings)
    problems = settings.validate()
    if problems:
        raise TrialError("; ".join(problems))
    if steps < 1 or warmup_steps < 0:
        raise TrialError("steps must be >= 1 and warmup_steps >= 0")
    if compute_only and not instrument:
        raise TrialError("compute_only is an instrumented mode")
    device = _device(device)
    simulated = isinstance(device, sim.SimDevice)
    goal = None if simulated else workload.target_loss if target_loss is None else float(target_loss)
    if stop_at_target and (not instrument or goal is None):
        raise TrialError("stop_at_target needs an instrumented trial and a target loss"
                         + (" (a simulated accelerator runs no model)" if simulated else ""))
    if sync_each_step and not simulated:
        raise TrialError("sync_each_step applies to a simulated accelerator (sim:RATE)")
    notes: list = []
    idle = [f for f in ("precision", "tf32", "cudnn_benchmark", "channels_last", "fused_optimizer", "compile")
            if getattr(settings, f) != getattr(Settings(), f)] if simulated else []
    if idle:
        notes.append(f"{device.spec.words()}: no model runs, so {', '.join(idle)} change nothing here")
    elif settings.channels_last and not workload.convolutional and not simulated:
        notes.append("channels_last applies to convolutional workloads; ignored")
    if settings.nproc > 1 and not distributed:
        notes.append("nproc > 1 runs through the distributed launcher; this trial used one process")

    def progress(phase: str, step: int, total: int, loss=None, step_s=None):
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
    with _torch_state(settings, device, notes if not simulated else []):
        trial = _Trial(workload, settings, device, steps, warmup_steps + settle, seed, compute_only,
                       distributed, notes)
        trial.sync_each_step = sync_each_step
        gauges = None
        if sample_memory and instrument:
            gauges = _Gauges(*(_nvml_for(device, notes) if device.type == "cuda" else (None, None)), notes)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            warmup_losses = []
            for s in range(warmup_steps + settle):
                warmup_losses.append(_mean_loss(trial.step()))
                progress("warmup", s + 1, warmup_steps + settle, warmup_losses[-1])
                if gauges is not None:
                    gauges.between_steps()
            trial.counting = True
            if gauges is not None:
                gauges.timing = True
            profiler = _profiler(profile_dir, device, steps) if profile_dir else None
            with (profiler or contextlib.nullcontext()):
                stop = (lambda losses: _reached(goal, warmup_losses + losses)) if stop_at_target else None
                timed = _window(trial, steps, _sync(device), progress, instrument, profiler, gauges, stop)
            timed["sim"] = _sim_result(trial, timed) if simulated else None
            if gauges is not None:
                gauges.timing = False
                gauges.between_steps(force=True)
        finally:
            trial.close()
        result = _result(trial, timed, warmup_losses, steps, warmup_steps, seed, notes, goal)
        result.update({
            "settle_steps": settle,
            "mode": "compute_only" if compute_only else ("instrumented" if instrument else "bare"),
            "peak_host_bytes": gauges.peak_host() if gauges is not None else None,
            "peak_device_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
            "gpu_util_mean": statistics.fmean(gauges.util) if (gauges is not None and gauges.util) else None,
            "gpu_util_samples": len(gauges.util) if gauges is not None else 0,
            "threads": torch.get_num_threads(),
            "profile_trace": os.path.join(profile_dir, "trace.json") if profile_dir else None,
            "sim": timed["sim"],
        })
    del trial
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def _window(trial: _Trial, steps: int, sync, progress, instrument: bool = True, profiler=None, gauges=None,
            stop: Optional[Callable[[list], bool]] = None) -> dict:
    """The timed window.  Instrumented, every step is cut into chained data-wait and compute segments,
    the device synchronised before every clock read (one segment's closing read opens the next, so data
    wait + compute = step time exactly); ``stop(losses)`` may end it early (a convergence run).  Bare,
    the same steps with one clock read at each end, their losses read afterwards."""
    clock = time.perf_counter
    step_s, data_s, compute_s, step_losses = [], [], [], []
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
        return {"wall": wall, "step_s": None, "data_s": None, "compute_s": None,
                "losses": [_mean_loss(x) for x in step_losses]}
    return {"wall": wall, "step_s": step_s, "data_s": data_s, "compute_s": compute_s, "losses": step_losses}


def _result(trial: _Trial, timed: dict, warmup_losses: list, steps: int, warmup_steps: int, seed: int,
            notes: list, target: Optional[float] = None) -> dict:
    wall, step_s, data_s, losses = timed["wall"], timed["step_s"], timed["data_s"], timed["losses"]
    steps_requested, steps = steps, len(losses)  # fewer when a convergence run reached its target
    samples = steps * trial.accum * trial.micro_batch
    dist = trial.distributed
    out = {
        "workload": trial.workload.name,
        "device": str(trial.device),
        "settings": trial.settings.to_dict(),
        "seed": seed,
        "steps": steps,
        "steps_requested": steps_requested,
        "warmup_steps": warmup_steps,
        "micro_batch": trial.micro_batch,
        "accumulation_steps": trial.accum,
        "samples_per_step": trial.accum * trial.micro_batch,
        "samples": samples,
        "wall_s": wall,
        "samples_per_s": samples / wall if wall > 0 else None,
        "step_s": step_s,
        "data_wait_s": data_s,
        "compute_s": timed["compute_s"],
        "step_median_s": statistics.median(step_s) if step_s else wall / steps,
        "data_wait_share": (sum(data_s) / wall) if (data_s is not None and wall > 0) else None,
        "overhead_s": (wall - sum(step_s)) if step_s is not None else None,
        "warmup_losses": warmup_losses,
        "losses": losses,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "nonfinite_loss_step": next((i for i, x in enumerate(warmup_losses + losses)
                                     if x is not None and not math.isfinite(x)), None),
        "sample_digest": trial.digest.hexdigest(),
        "batch_bytes": trial.batch_bytes,
        "epochs": trial.epochs,
        "world_size": dist["world_size"] if dist else 1,
        "rank": dist["rank"] if dist else 0,
        "notes": notes,
        "torch": torch.__version__,
    }
    out.update(time_to_target(target, warmup_losses, losses,
                              step_s if step_s is not None else [wall / steps] * steps))
    return out


def _mean_loss(losses: list) -> Optional[float]:
    if losses and losses[0] is None:
        return None  # a simulated accelerator: no model, no loss
    return float(torch.stack([x.float() for x in losses]).mean()) if losses else float("nan")


def _sim_result(trial: _Trial, timed: dict) -> dict:
    """What the simulated device did per timed step: its work, the host's waits for it, the staging copies."""
    d, steps = trial.sim, max(1, len(timed["losses"]))
    return {"spec": d.spec.text(), "words": d.spec.words(), "rate": d.spec.rate, "sync_each_step": trial.sync_each_step,
            "device_busy_s": d.busy / steps, "device_wait_s": d.waited / steps, "staging_s": d.staged / steps,
            "wake_s": d.wake / steps}


def _reached(target: float, losses: list) -> bool:
    """Whether the running mean of the last ``SMOOTH`` losses is below ``target``."""
    return len(losses) >= SMOOTH and sum(losses[-SMOOTH:]) / SMOOTH < target


def time_to_target(target: Optional[float], warmup_losses: list, losses: list, step_times: list) -> dict:
    """When the running mean of the loss (over ``SMOOTH`` steps) first fell below ``target``: the step
    (1-based, warm-up included) and the time to it (warm-up steps, whose times include start-up costs,
    counted at the median timed step)."""
    out = {"target_loss": target, "target_step": None, "time_to_target_s": None}
    every = list(warmup_losses) + list(losses)
    step = None if target is None else next((n for n in range(SMOOTH, len(every) + 1)
                                             if _reached(target, every[:n])), None)
    if step is not None:
        typical = statistics.median(step_times) if step_times else 0.0
        out.update(target_step=step, time_to_target_s=sum(([typical] * len(warmup_losses) + list(step_times))[:step]))
    return out


def _range(name: str, profiler):
    return contextlib.nullcontext() if profiler is None else torch.profiler.record_function(name)


def _profiler(profile_dir: str, device: torch.device, steps: int):
    """A torch.profiler trace of up to 5 timed steps, written to ``profile_dir``/trace.json."""
    os.makedirs(profile_dir, exist_ok=True)
    kinds = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    return torch.profiler.profile(
        activities=kinds,
        schedule=torch.profiler.schedule(wait=0, warmup=1 if steps > 1 else 0, active=max(1, min(5, steps - 1)), repeat=1),
        on_trace_ready=lambda prof: _export_trace(prof, os.path.join(profile_dir, "trace.json")))


def _export_trace(prof, path: str) -> None:
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
