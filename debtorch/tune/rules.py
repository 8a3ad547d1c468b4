"""Training settings from the facts document, instantly, each with its reason: ``recommend(facts,
request)`` gives a :class:`Recommendation` (settings, one :class:`Reason` per field: a rule id
``tune.Rnnn`` of checks/findings/tune.toml and a line naming the facts it used, environment hints,
notes); measurement later replaces some reasons (``tune.Mnnn``).  Torch-free and machine-free: a pure
function of a facts dict, so that ``debtorch tune --facts FILE`` tunes for another machine.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from debtorch.budget import count_problem
from debtorch.findings import catalogue
from debtorch.machine import Machine, oldest_cc
from debtorch.train.device import CPU, CUDA, Device
from debtorch.train.settings import COUNT_MAX, PROCESS_MAX, Settings
from debtorch.tune import prescribe
from debtorch.tune.calibration import Calibration
from debtorch.tune.config import machine_limit, machine_problem
from debtorch.tune.prescribe import WatchRecord
from debtorch.units import human_bytes as human

MiB = 1024 * 1024

# Assumed size of one batch in shared memory when the workload is unknown:
# a 64-image batch of 3x224x224 float32 is 37 MiB.
ASSUMED_BATCH_BYTES = 32 * MiB
# File descriptors one worker holds: pipes, plus one per shared tensor storage
# of every batch in flight (pytorch/pytorch#11201 "Too many open files").
FDS_PER_WORKER = 64
FDS_RESERVED = 256
# More workers than this per GPU seldom pay for the RAM each one costs;
# --measure tries more.
MAX_WORKERS_PER_GPU = 8
# Calibrated rules (tune.C001-C003): workers for 15% more than the device takes (jitter, the
# hand-over to the training process); a CPU split that the model predicts 10% faster than loading in
# the training process, or that one trial each measured 10% faster (a trial varies by 5-10%); 4
# batches ahead when a batch's load time varies by half its median.
HEADROOM = 1.15
CPU_GAIN_PREDICTED, CPU_GAIN_MEASURED = 1.10, 1.10
SPREAD_FOR_DEEPER_QUEUE = 1.5
MODEL_KINDS = ("conv", "transformer", "other")


class RequestError(ValueError):
    """The request cannot be satisfied; the message is one line for the user."""


@dataclass(frozen=True)
class Reason:
    """Why a setting has its value: a rule id (``tune.R001``) and one line."""

    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.text}"

    @property
    def measured(self) -> bool:
        """Measurement chose it (the catalogue's ``tune.Mnnn`` ids), not a rule."""
        return self.rule.startswith(MEASURED)


MEASURED = "tune.M"   # the ids of measured reasons (checks/findings/tune.toml, code M)


@dataclass
class Request:
    """What the user asked for (the CLI's options), beyond the machine's facts."""

    device: Optional[Device] = None       # None: cuda when a usable GPU is known
    global_batch: Optional[int] = None    # samples per optimizer step, all processes together
    micro_batch: Optional[int] = None     # samples per forward pass per process
    epochs: Optional[int] = None          # run length, for the schedule
    steps: Optional[int] = None           # run length in optimizer steps, for the schedule
    steps_per_epoch: Optional[int] = None  # optimizer steps per epoch, when a workload tells
    compile: bool = False                 # torch.compile, only when asked
    model: Optional[str] = None           # "conv", "transformer", "other"; None: unknown
    nproc: Optional[int] = None           # processes per machine; None: one per usable GPU
    batch_bytes: Optional[int] = None     # bytes of one batch in shared memory, when known
    oversubscribe: bool = False           # processes beyond the machine's bound are deliberate
    calibration: Optional[Calibration] = None  # the workload measured in seconds: workers sized for it
    watch: Optional[WatchRecord] = None   # the user's job as cfg.watch recorded it: workers prescribed for it

    def check(self) -> None:
        """Raise :class:`RequestError` for a number outside its range (docs/tune.md, "Bounds"):
        before the machine is read, so that a typo costs no probing."""
        for name, v, hi in (("--global-batch", self.global_batch, COUNT_MAX), ("--micro-batch", self.micro_batch, COUNT_MAX),
                            ("--epochs", self.epochs, COUNT_MAX), ("--steps", self.steps, COUNT_MAX),
                            ("--nproc", self.nproc, PROCESS_MAX)):
            problem = None if v is None else count_problem(name, v, 1, hi)
            if problem:
                raise RequestError(problem)


def _known(rule: str) -> None:
    if not rule.startswith("tune.") or rule not in catalogue():
        raise KeyError(rule)


@dataclass
class Recommendation:
    """Settings with a reason for every field, environment hints and notes."""

    settings: Settings
    reasons: dict[str, Reason] = field(default_factory=dict)      # field name -> Reason
    env: dict[str, str] = field(default_factory=dict)             # NAME -> value
    env_reasons: dict[str, Reason] = field(default_factory=dict)  # NAME -> Reason
    notes: list[str] = field(default_factory=list)
    device: Device = CPU
    total_steps: Optional[int] = None                # optimizer steps of the run, for OneCycleLR
    epochs: Optional[int] = None
    global_batch: Optional[int] = None               # what the settings really give
    chosen_by: str = "rules"                         # "rules" or "measured"
    max_workers: Optional[int] = None                # bound from /dev/shm and RLIMIT_NOFILE, if any
    per_process_cpus: int = 1                        # usable CPUs / processes
    oversubscribe: bool = False                      # asked: beyond the machine's bound (the config's [limits])
    calibration: Optional[Calibration] = None        # what sized the loader, when a workload was calibrated
    prescription: Optional[prescribe.Plan] = None    # what the loader is predicted to do, from a watch record

    def set(self, name: str, value: Any, rule: str, text: str) -> None:
        _known(rule)
        self.settings = dataclasses.replace(self.settings, **{name: value})
        self.reasons[name] = Reason(rule, text)

    def hint(self, name: str, value: str, rule: str, text: str) -> None:
        _known(rule)
        self.env[name] = str(value)
        self.env_reasons[name] = Reason(rule, text)

    def note(self, rule: str, text: str) -> None:
        _known(rule)
        self.notes.append(f"{rule}: {text}")

    def torchrun_line(self, script: str = "train.py") -> str:
        return f"torchrun --standalone --nproc_per_node={self.settings.nproc} {shlex.quote(script)}"

    def emit_env(self, script: str = "train.py") -> str:
        """Shell lines for a job script: exports, then the torchrun line."""
        lines = ["# written by debtorch tune; each line's reason is in the comment above it"]
        for name in sorted(self.env):
            lines.append(f"# {self.env_reasons[name]}")
            lines.append(f"export {name}={shlex.quote(self.env[name])}")
        lines.append("# replace train.py with your training script")
        lines.append(self.torchrun_line(script))
        return "\n".join(lines) + "\n"


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ---------------------------------------------------------------------------
# The rules


def recommend(facts: Union[Machine, dict[str, Any]], request: Optional[Request] = None) -> Recommendation:
    """Settings for training on the machine ``facts`` (a facts document or its
    :class:`~debtorch.machine.Machine`) describes, with reasons."""
    req = request or Request()
    if req.model is not None and req.model not in MODEL_KINDS:
        raise RequestError(f"model must be one of {', '.join(MODEL_KINDS)} (got {req.model!r})")
    req.check()
    m = facts if isinstance(facts, Machine) else Machine.from_facts(facts)
    rec = Recommendation(settings=Settings(), oversubscribe=req.oversubscribe, calibration=req.calibration)
    if req.calibration is not None:
        rec.chosen_by = "calibrated"
    if req.watch is not None:
        rec.chosen_by = "watch"
    _device(rec, m, req)
    _processes(rec, m, req)
    _workers(rec, m, req)
    _pinned(rec, m)
    if rec.device.simulated:
        _no_model(rec)
    else:
        _precision(rec, m)
        _kernels(rec, m, req)
    _threads(rec, m)
    _nccl(rec, m)
    _batch(rec, req, rec.settings.nproc)
    _schedule(rec, req)
    return rec


def _device(rec: Recommendation, m: Machine, req: Request) -> None:
    gpus = m.gpus.compute
    if req.device is not None:
        rec.device = req.device
        if req.device.is_cuda and not gpus:
            rec.notes.append(f"--device {req.device} but the facts list no usable GPU: GPU rules assume what they "
                             "cannot see")
        elif req.device.simulated:
            rec.notes.append(f"{req.device.words()}: the GPU rules for what feeds it; no model runs")
        return
    torch_cpu_only = m.get("python.torch.cpu_only")
    if gpus and not torch_cpu_only:
        rec.device = CUDA
    else:
        rec.device = CPU
    on_bus = _int(m.get("nvidia.pci_gpu_count")) or 0
    if not gpus and on_bus:
        why = m.unknown("nvidia.gpus") or "no GPU answers"
        rec.notes.append(f"{on_bus} NVIDIA GPU(s) on the PCI bus but none usable ({why}): tuning for the CPU; "
                         "`debtorch doctor` says how to fix the driver")
    if gpus and torch_cpu_only:
        rec.notes.append(f"{len(gpus)} GPU(s) but a CPU-only PyTorch build: tuning for the CPU "
                         "(see `debtorch doctor`)")


def _processes(rec: Recommendation, m: Machine, req: Request) -> None:
    """tune.R020 (and R026's note)."""
    if m.cpus.unknown:
        rec.note("tune.R026", f"usable CPUs unknown ({m.cpus.unknown}); assuming {m.cpus.usable}")
    if rec.device.simulated and (req.nproc or 1) > 1:
        raise RequestError("a simulated accelerator is one device: --nproc 1")
    if rec.device.accelerator:
        nproc = req.nproc or max(1, len(m.gpus.compute))
        if req.nproc:
            text = f"--nproc {nproc} asked ({len(m.gpus.compute)} usable GPUs in nvidia.gpus)"
        elif m.gpus.compute and rec.device.is_cuda:
            text = f"one DDP process per usable GPU: {len(m.gpus.compute)} x {m.gpus.names} (nvidia.gpus)"
        elif rec.device.simulated:
            text = "one simulated accelerator: one process"
        else:
            text = "no GPU in the facts: one process"
        backend, why = "nccl", "nccl, NVIDIA's collective library for GPUs"
    else:
        nproc = req.nproc or 1
        if req.nproc:
            text = f"--nproc {nproc} asked"
        else:
            text = "CPU training: one process uses every core through intra-op threads; DDP would split them"
        backend, why = "gloo", "gloo, PyTorch's CPU collective backend"
    bad = None if req.oversubscribe else machine_problem({"nproc": nproc}, m.cpus.usable)
    if bad:
        raise RequestError(f"--nproc {bad[1]}; give --oversubscribe to ask for it deliberately")
    if nproc > 1:
        text += f"; {why}"
    rec.set("nproc", nproc, "tune.R020", text)
    rec.set("backend", backend if nproc > 1 else None, "tune.R020",
            text if nproc > 1 else "one process: no DDP, no backend")
    rec.per_process_cpus = max(1, m.cpus.usable // nproc)
    if m.cpus.usable < nproc:
        rec.notes.append(f"{nproc} processes on {m.cpus.usable} usable CPUs: processes will share cores")


def _workers(rec: Recommendation, m: Machine, req: Request) -> None:
    """tune.R001-R005 (C001 and C003 when calibrated) and, through worker_companions, R007-R009 (C002)."""
    nproc, per_proc, cpu_note = rec.settings.nproc, rec.per_process_cpus, m.cpus.note
    cal = req.calibration
    if cal is not None and rec.device.is_cpu:
        workers = _calibrated_cpu_split(rec, cal, cpu_note)
    elif cal is not None:
        workers = _calibrated_feed(rec, cal, cpu_note)
    elif req.watch is not None:
        workers = _prescribed(rec, req.watch)
    elif rec.device.is_cpu and per_proc <= 2:
        workers = 0
        rec.set("num_workers", 0, "tune.R001",
                f"CPU training on {cpu_note}: worker processes would take cores from compute")
    elif rec.device.is_cpu:
        workers = max(1, per_proc // 4)
        rec.set("num_workers", workers, "tune.R002",
                f"CPU training on {cpu_note} / {nproc} process(es): {workers} worker(s) "
                f"load data, {per_proc - workers} cores compute")
    else:
        workers = min(MAX_WORKERS_PER_GPU, max(1, per_proc - 1))
        text = (f"{cpu_note} / {nproc} process(es) = {per_proc} per process; one drives the GPU, "
                f"the rest load data")
        if per_proc - 1 < 1:
            text = f"{cpu_note} / {nproc} process(es): one worker overlaps loading with the GPU's work"
        elif per_proc - 1 > MAX_WORKERS_PER_GPU:
            text += f", at most {MAX_WORKERS_PER_GPU} per GPU (each costs RAM; --measure tries more)"
        rec.set("num_workers", workers, "tune.R003", text)

    prefetch = _calibrated_prefetch(cal) if cal is not None and workers else 2
    known_bytes = req.batch_bytes or (cal.batch_bytes if cal is not None else None) or (
        req.watch.batch_bytes if req.watch is not None else None)
    batch_bytes = known_bytes or ASSUMED_BATCH_BYTES
    measured_bytes = bool(known_bytes)
    shm_free = _int(m.get("memory.shm_free"))
    nofile = _int(m.get("memory.nofile_soft"))
    by_shm = (shm_free // 2) // nproc // (prefetch * batch_bytes) if shm_free is not None else None
    by_nofile = (max(0, (nofile - FDS_RESERVED) // FDS_PER_WORKER // nproc)
                 if nofile is not None and nofile >= 0 else None)
    bounds = [b for b in (by_shm, by_nofile) if b is not None]
    rec.max_workers = min(bounds) if bounds else None
    if workers and by_shm is not None and by_shm < workers:
        size = f"~{human(batch_bytes)}" + ("" if measured_bytes else " (assumed)")
        rec.set("num_workers", by_shm, "tune.R004",
                f"/dev/shm has {human(shm_free)} free (memory.shm_free): {nproc} process(es) x "
                f"{by_shm} worker(s) x {prefetch} batches of {size} fit in half of it")
        rec.note("tune.R004", f"a larger /dev/shm would allow {workers} workers "
                              "(docker run --shm-size=8g, or a bigger tmpfs)")
        workers = by_shm
    if workers and by_nofile is not None and by_nofile < workers:
        rec.set("num_workers", by_nofile, "tune.R005",
                f"RLIMIT_NOFILE is {nofile} (memory.nofile_soft): each worker holds about "
                f"{FDS_PER_WORKER} descriptors for batches in flight")
        rec.note("tune.R005", f"`ulimit -n 65536` (or LimitNOFILE=) would allow {workers} workers")
    worker_companions(rec)
    if cal is not None and rec.settings.num_workers:
        _prefetch_reason(rec, cal, prefetch)
    if req.watch is not None:
        _prescribed_after_bounds(rec, req.watch)


def _calibrated_feed(rec: Recommendation, cal: Calibration, cpu_note: str) -> int:
    """tune.C001: an accelerator's loader workers for the rate it consumes, from the calibration."""
    cpus = rec.per_process_cpus
    per_worker, rate = cal.per_worker, cal.device_rate
    if cal.device.is_cuda:
        main, main_words = min(1.0, cpus / 2), "one drives the GPU" if cpus >= 2 else "it also drives the GPU"
    else:
        main = min(float(cpus), cal.main_batch_s * rate / cal.micro_batch)
        main_words = f"the training process takes {main:.2f} of a CPU to copy and launch"
    loading = max(1.0, cpus - main)
    need = rate / per_worker
    measured = (f"one worker delivers {per_worker:.0f} samples/s" if cal.worker_rate is not None and not cal.worker_kept_up
                else f"one process loads {per_worker:.0f} samples/s")
    head = f"{measured} ({1e3 * cal.fetch_s:.1f} ms a batch of {cal.micro_batch}); the device takes {rate:.0f}"
    if need * HEADROOM <= loading:
        workers = max(1, math.ceil(need * HEADROOM))
        text = (f"{head}: {workers} worker(s) feed it ({workers * per_worker:.0f} samples/s at most), "
                f"within {cpu_note} ({main_words})")
    elif need <= loading:
        workers = max(1, math.ceil(loading))
        text = (f"{head}: {workers} worker(s) just feed it ({loading * per_worker:.0f} samples/s at most on the "
                f"{loading:.1f} CPUs {cpu_note} leave: {main_words}), without the {HEADROOM - 1:.0%} to spare "
                "the rule keeps")
    else:
        workers = max(1, math.ceil(loading))
        text = (f"{head}: input-bound here, feeding it takes about {need:.1f} CPUs of loading and {cpu_note} "
                f"leave {loading:.1f} ({main_words}): {workers} worker(s) give about {loading * per_worker:.0f}")
    workers = min(workers, 2 * cpus)
    rec.set("num_workers", workers, "tune.C001", text)
    return workers


def _prescribed(rec: Recommendation, w: WatchRecord) -> int:
    """tune.P001 and P005: the loader's workers for the rate the user's loop consumed (docs/tune.md,
    "Prescriptions from your job"), before the /dev/shm and open-file bounds."""
    cpus, rate = rec.per_process_cpus, rec.device.rate
    consumed = rate or w.consumed
    measured = (f"measured: {w.data_wait:.0%} data wait at {w.num_workers} worker(s), {w.delivered:.0f} samples/s "
                f"from the loader, {consumed:.0f} consumed")
    if not w.input_bound:
        level = "below" if w.fine else "not above"
        rec.set("num_workers", w.num_workers, "tune.P005", f"{measured}: the data wait is {level} "
                f"{prescribe.THRESHOLD:.0%} (95%: {w.data_wait_low or 0:.0%}-{w.data_wait_high or 0:.0%}): "
                "the loader keeps up; kept")
        return w.num_workers
    most = 2 * cpus   # as --measure's search: workers beyond that wait for a CPU
    if prescribe.plan(w, 1, cpus, rate).waits_on_reads:
        most = machine_limit(cpus)   # waiting on reads, they overlap them: as many as the machine may run
    workers = min(prescribe.workers_for(w, cpus, rate), most)
    rec.set("num_workers", workers, "tune.P001", _prescribed_text(w, prescribe.plan(w, workers, cpus, rate), measured))
    return workers


def _prescribed_text(w: WatchRecord, p: prescribe.Plan, measured: str) -> str:
    wait = f"predicted data wait {p.predicted_wait:.0%}"
    if p.saturated:
        wait += f" or more: they would keep {p.workers_cpus:.1f} of the {p.cpus} CPUs busy"
    if p.supplied >= p.consumed and p.handover_s is None:
        return (f"{measured}: {p.workers} worker(s) would feed it, but decoding it they would keep "
                f"{p.workers_cpus:.1f} CPUs busy, every one the process has: the training process waits for a CPU "
                f"({wait})")
    if p.supplied >= p.consumed:
        return f"{measured}: {p.workers} worker(s) would feed it ({wait})"
    return (f"{measured}: {p.workers} worker(s) give about {p.supplied:.0f} on the CPUs left ({wait}): more "
            "workers cannot help")


def _prescribed_after_bounds(rec: Recommendation, w: WatchRecord) -> None:
    """The prediction for the workers the bounds left, its notes (tune.P003, P004) and prefetch (tune.P002)."""
    cpus, workers = rec.per_process_cpus, rec.settings.num_workers
    p = prescribe.plan(w, workers, cpus, rec.device.rate)
    if w.input_bound:
        rec.prescription = p   # kept settings (tune.P005) predict nothing new: the record is the measurement
    if w.input_bound and rec.reasons["num_workers"].rule != "tune.P001":
        rec.notes.append(f"predicted data wait at {workers} worker(s): {p.predicted_wait:.0%} (the bound above)")
    if w.input_bound and p.cpu_bound and not p.waits_on_reads:
        rec.note("tune.P003", f"loading {p.consumed:.0f} samples/s takes about {p.consumed * p.cpu_per_sample:.1f} "
                              f"CPUs and {rec.per_process_cpus} CPU(s) leave {p.loading_cpus:.1f} beside the "
                              "training process: decoding is CPU-bound here; cheaper decoding or transforms, "
                              "pre-processed (decoded, resized) data, or more CPUs")
    if p.waits_on_reads:
        rec.note("tune.P004", f"the job's workers used {(w.workers_busy or 0) / max(1, w.num_workers):.2f} of a "
                              "CPU each while the loop waited: they wait on reads, not decoding; measure the disk "
                              f"against the rate: debtorch doctor --data DIR --measure-data --data-rate "
                              f"{math.ceil(p.consumed)}")
    if workers:
        spread = (w.fetch_p90_s or 0.0) / w.fetch_median_s if w.fetch_median_s else 1.0
        prefetch = 2
        if w.num_workers == 0 and spread > SPREAD_FOR_DEEPER_QUEUE:
            prefetch = 4
        elif not w.input_bound and w.prefetch_factor:
            prefetch = w.prefetch_factor
        text = (f"the job's fetches took {1e3 * (w.fetch_median_s or 0):.1f} ms (median), 90% within "
                f"{1e3 * (w.fetch_p90_s or 0):.1f} ms: {prefetch} batches ahead per worker")
        rec.set("prefetch_factor", prefetch, "tune.P002", text)


def cpu_split_rate(cal: Calibration, cpus: int, workers: int) -> float:
    """Samples/s the model of tune.C003 predicts for ``workers`` loader workers and the other CPUs computing:
    loading in the training process adds its time to the compute's; workers overlap it, each at the
    worker's rate, while compute scales with its threads (linearly: what the rule assumes)."""
    if workers <= 0:
        return 1.0 / (1.0 / cal.loader_rate + 1.0 / cal.device_rate)
    threads = max(1, cpus - workers)
    return min(workers * cal.per_worker, cal.device_rate * threads / cpus)


def _calibrated_cpu_split(rec: Recommendation, cal: Calibration, cpu_note: str) -> int:
    """tune.C003: CPU training's split between loader workers and compute threads, from the calibration."""
    cpus = rec.per_process_cpus
    base = (f"loading in the training process {cal.in_process_rate:.0f} samples/s (one process loads "
            f"{cal.loader_rate:.0f}, {cpus} thread(s) compute {cal.device_rate:.0f})")
    if cal.worker_rate is not None and cpus <= 2:
        gain = cal.worker_rate / cal.in_process_rate
        if gain >= CPU_GAIN_MEASURED:
            text = (f"{base}; 1 worker + {cal.worker_threads} thread(s) measured {cal.worker_rate:.0f} "
                    f"({gain:.2f}x): one CPU loads while the other computes")
            rec.set("num_workers", 1, "tune.C003", text)
            return 1
        rec.set("num_workers", 0, "tune.C003", f"{base}; 1 worker + {cal.worker_threads} thread(s) measured "
                f"{cal.worker_rate:.0f} ({gain:.2f}x): a worker would take a CPU from compute for no gain")
        return 0
    best = max(range(1, cpus), key=lambda w: cpu_split_rate(cal, cpus, w), default=0)
    predicted = cpu_split_rate(cal, cpus, best) if best else 0.0
    if best and predicted >= CPU_GAIN_PREDICTED * cal.in_process_rate:
        rec.set("num_workers", best, "tune.C003", f"{base}: {best} worker(s) + {cpus - best} thread(s) predicted "
                f"{predicted:.0f} ({predicted / cal.in_process_rate:.2f}x) on {cpu_note}")
        return best
    why = cal.skipped or f"the best split predicted {predicted:.0f}"
    rec.set("num_workers", 0, "tune.C003", f"{base}; {why}: the cores compute")
    return 0


def _calibrated_prefetch(cal: Calibration) -> int:
    """tune.C002's value: 4 batches ahead per worker when a batch's load time varies, else 2."""
    return 4 if cal.spread > SPREAD_FOR_DEEPER_QUEUE else 2


def _prefetch_reason(rec: Recommendation, cal: Calibration, prefetch: int) -> None:
    """tune.C002: the prefetch queue for the calibration's spread of batch load times."""
    times = f"a batch loads in {1e3 * cal.fetch_s:.1f} ms, 90% within {1e3 * cal.fetch_p90_s:.1f} ms"
    if prefetch > 2:
        text = f"{times} ({cal.spread:.1f}x the median): {prefetch} batches ahead per worker absorb the slow ones"
    else:
        text = f"{times}: {prefetch} batches ahead per worker cover it (PyTorch's default, set explicitly)"
    rec.set("prefetch_factor", prefetch, "tune.C002", text)


def _pinned(rec: Recommendation, m: Machine) -> None:
    """tune.R006."""
    if rec.device.accelerator:
        text = "GPU training: page-locked batches copy to the GPU asynchronously"
        rec.set("pin_memory", True, "tune.R006", text)
        rec.set("non_blocking", True, "tune.R006", text + " (non_blocking=True)")
        memlock = _int(m.get("memory.memlock_soft"))
        if memlock is not None and 0 <= memlock < 64 * MiB:
            rec.notes.append(f"RLIMIT_MEMLOCK is {human(memlock)} (memory.memlock_soft): if pinning fails "
                             "in a container, raise it (--ulimit memlock=-1)")
    else:
        text = "CPU training: pinned memory only speeds copies to a GPU"
        rec.set("pin_memory", False, "tune.R006", text)
        rec.set("non_blocking", False, "tune.R006", text)


def _precision(rec: Recommendation, m: Machine) -> None:
    """tune.R010-R016."""
    cc = oldest_cc(m.gpus.compute)
    if rec.device.is_cuda:
        cc_text = f"{m.gpus.names} compute capability {cc[0]}.{cc[1]} (nvidia.gpus)" if cc else ""
        if cc and cc >= (8, 0):
            rec.set("precision", "bf16", "tune.R010", f"{cc_text}: native bf16, fp32's range, no gradient scaler")
            rec.set("tf32", True, "tune.R015", f"{cc_text}: fp32 matmuls and convolutions on TF32 tensor cores "
                    "(PyTorch leaves matmul TF32 off)")
        else:
            if cc and cc >= (7, 0):
                rec.set("precision", "fp16", "tune.R011", f"{cc_text}: fp16 tensor cores, no bf16; "
                        "a GradScaler keeps small gradients")
            elif cc:
                rec.set("precision", "fp32", "tune.R012", f"{cc_text}: no tensor cores for fp16 or bf16")
            else:
                rec.set("precision", "fp32", "tune.R012", "compute capability unknown (nvidia.gpus): fp32 is safe")
            rec.set("tf32", False, "tune.R015", "TF32 needs compute capability 8.0 or newer")
        rec.set("cudnn_benchmark", True, "tune.R016", "GPU training with fixed input shapes: cuDNN picks its fastest "
                "algorithm once per shape (turn off for varying shapes)")
        return
    have = list(m.cpus.bf16) if m.cpus.bf16 is not None else None
    model = m.cpus.model or "CPU"
    if have:
        rec.set("precision", "bf16", "tune.R013", f"{model} has {' and '.join(have)} (cpu.features): "
                "native bf16 matmuls and convolutions")
    elif have is None:
        rec.set("precision", "fp32", "tune.R014", "CPU features unknown (cpu.features): fp32 is safe")
    else:
        rec.set("precision", "fp32", "tune.R014", f"{model} has no avx512_bf16 or amx_bf16 (cpu.features): "
                "bf16 would be emulated, slower than fp32")
    rec.set("tf32", False, "tune.R015", "TF32 is a GPU feature (compute capability 8.0 and newer)")
    rec.set("cudnn_benchmark", False, "tune.R016", "cuDNN is CUDA's; CPU training does not use it")


def _no_model(rec: Recommendation) -> None:
    """A simulated accelerator runs no model: precision and kernels stay PyTorch's defaults (R012-R019)."""
    for name, rule in (("precision", "tune.R012"), ("tf32", "tune.R015"), ("cudnn_benchmark", "tune.R016"),
                       ("channels_last", "tune.R017"), ("fused_optimizer", "tune.R018"), ("compile", "tune.R019")):
        rec.set(name, getattr(Settings(), name), rule, "a simulated accelerator runs no model: PyTorch's default")


def _kernels(rec: Recommendation, m: Machine, req: Request) -> None:
    """tune.R017-R019."""
    cc = oldest_cc(m.gpus.compute)
    if req.model == "conv" and rec.device.is_cuda and cc and cc >= (7, 0):
        rec.set("channels_last", True, "tune.R017", f"convolutional model on compute capability {cc[0]}.{cc[1]}: "
                "tensor cores run NHWC convolutions without transposes")
    elif req.model == "conv" and rec.device.is_cuda:
        rec.set("channels_last", False, "tune.R017", "NHWC pays on tensor cores (compute capability 7.0 and newer)")
    elif req.model == "conv":
        rec.set("channels_last", False, "tune.R017", "on the CPU, NHWC's gain depends on the model: --measure decides")
    elif req.model is None:
        rec.set("channels_last", False, "tune.R017", "model kind unknown (--model conv to consider NHWC)")
    else:
        rec.set("channels_last", False, "tune.R017", f"{req.model} model: no convolutions to reorder")

    tv = m.torch.series_tuple
    need = (2, 0) if rec.device.is_cuda else (2, 4)
    where = "GPUs" if rec.device.is_cuda else "the CPU"
    if tv is None:
        rec.set("fused_optimizer", False, "tune.R018", "PyTorch version unknown (python.torch.version)")
    elif tv >= need:
        rec.set("fused_optimizer", True, "tune.R018", f"PyTorch {tv[0]}.{tv[1]} (python.torch.version) has fused "
                f"Adam/AdamW/SGD on {where}: one kernel per step")
    else:
        rec.set("fused_optimizer", False, "tune.R018", f"PyTorch {tv[0]}.{tv[1]} has no fused optimizer on "
                f"{where} (needs {need[0]}.{need[1]})")
    if req.compile:
        rec.set("compile", True, "tune.R019", "asked (--compile): the first steps compile, later steps run faster")
    else:
        rec.set("compile", False, "tune.R019", "only when asked (--compile): compiling costs minutes up front")


def _threads(rec: Recommendation, m: Machine) -> None:
    """tune.R022 and R025."""
    nproc, workers = rec.settings.nproc, rec.settings.num_workers
    threads = max(1, rec.per_process_cpus - workers)
    verb = "fit" if nproc * (threads + workers) <= m.cpus.usable else "share"
    text = f"{nproc} process(es) x ({threads} thread(s) + {workers} worker(s)) {verb} {m.cpus.note}"
    quota, affinity = m.cpus.quota, m.cpus.affinity
    if quota is not None and affinity and quota < affinity:
        text += f"; PyTorch would start {affinity} threads but the cgroup allows {quota:g} CPUs"
    rec.set("threads", threads, "tune.R022", text)
    thread_env(rec)


def _nccl(rec: Recommendation, m: Machine) -> None:
    """tune.R021: NCCL hints from the topology."""
    if not rec.device.is_cuda or rec.settings.nproc < 2:
        return
    bad = m.gpus.p2p_problems
    if bad:
        a, b, status = bad[0]
        more = f" and {len(bad) - 1} more pair(s)" if len(bad) > 1 else ""
        rec.hint("NCCL_P2P_DISABLE", "1", "tune.R021",
                 f"GPU {a}<->{b} peer-to-peer is {status} (nvidia.topology p2p_read){more}: "
                 "NCCL would hang on P2P; copy through host memory")
    elif not m.gpus.p2p:
        rec.notes.append("peer-to-peer status unknown (nvidia.topology): if DDP hangs at the first "
                         "all-reduce, try NCCL_P2P_DISABLE=1 (see `debtorch doctor`)")


def worker_companions(rec: Recommendation, prefetch: int = 2) -> None:
    """prefetch_factor, persistent_workers and start_method follow num_workers (R007-R009); also after
    measurement changed num_workers (a measured prefetch factor is kept)."""
    workers = rec.settings.num_workers
    if workers:
        reason = rec.reasons.get("prefetch_factor")
        measured = reason is not None and reason.measured
        if rec.settings.prefetch_factor is None or not measured:
            n = rec.settings.prefetch_factor or prefetch
            rec.set("prefetch_factor", n, "tune.R007", f"{n} batches ahead per worker" + (
                " (PyTorch's default, set explicitly); --measure tries 4" if n == 2 else ""))
        rec.set("persistent_workers", True, "tune.R008",
                f"{workers} worker(s) kept alive between epochs instead of restarted")
        rec.set("start_method", "fork", "tune.R009",
                "fork: workers start fast and share the dataset copy-on-write "
                "(Python 3.14 makes forkserver the Linux default)")
    else:
        rec.set("prefetch_factor", None, "tune.R007", "no workers: nothing to prefetch")
        rec.set("persistent_workers", False, "tune.R008", "no workers to keep alive")
        rec.set("start_method", None, "tune.R009", "no workers: no processes to start")


def thread_env(rec: Recommendation) -> None:
    """OMP_NUM_THREADS for launched processes follows threads (rule R025)."""
    threads, nproc = rec.settings.threads, rec.settings.nproc
    rec.env.pop("OMP_NUM_THREADS", None)
    rec.env_reasons.pop("OMP_NUM_THREADS", None)
    if threads and (nproc > 1 or rec.device.is_cpu):
        rec.hint("OMP_NUM_THREADS", str(threads), "tune.R025",
                 f"{threads} OpenMP thread(s) per process" + (
                     " (torchrun sets 1 for more than one process unless told)" if nproc > 1 else ""))


def _batch(rec: Recommendation, req: Request, nproc: int) -> None:
    g, m = req.global_batch, req.micro_batch  # integers >= 1 (Request.check)
    if g is not None and m is not None:
        per_step = m * nproc
        if g < per_step:
            raise RequestError(f"--global-batch {g} is smaller than one step: --micro-batch {m} x {nproc} process(es)")
        acc, gives = _reachable(rec, g, per_step, str(per_step))
        rec.set("micro_batch", m, "tune.R023", f"--micro-batch {m}")
        rec.set("accumulation_steps", acc, "tune.R023",
                f"--global-batch {g} / (--micro-batch {m} x {nproc} process(es)) = {acc} micro-batches per step{gives}")
        rec.global_batch = acc * per_step
    elif g is not None:
        if g < nproc:
            raise RequestError(f"--global-batch {g} is smaller than one sample per process ({nproc} processes)")
        micro, gives = _reachable(rec, g, nproc, f"{nproc} process(es)")
        rec.set("micro_batch", micro, "tune.R023", f"--global-batch {g} / {nproc} process(es){gives}; if it does "
                "not fit in memory, give --micro-batch and accumulate")
        rec.set("accumulation_steps", 1, "tune.R023", "no --micro-batch: each step is one micro-batch")
        rec.global_batch = micro * nproc
    else:
        rec.set("micro_batch", m, "tune.R023", f"--micro-batch {m}" if m else "the workload's own batch size")
        rec.set("accumulation_steps", 1, "tune.R023", "no --global-batch target: no accumulation")
        rec.global_batch = m * nproc if m else None


def _reachable(rec: Recommendation, g: int, unit: int, words: str) -> tuple:
    """(units per global batch ``g``, rounded up; the words that say so when ``g`` is not a multiple)."""
    n = math.ceil(g / unit)
    if n * unit == g:
        return n, ""
    rec.note("tune.R023", f"global batch {g} is not a multiple of {words}; using {n * unit}")
    return n, f" (gives {n * unit}, the nearest reachable)"


def _schedule(rec: Recommendation, req: Request) -> None:
    if req.steps is not None:
        total, how = req.steps, f"--steps {req.steps} optimizer steps"
    elif req.epochs is not None and req.steps_per_epoch:
        total = req.epochs * req.steps_per_epoch
        how = f"--epochs {req.epochs} x {req.steps_per_epoch} steps per epoch"
    elif req.epochs is not None:
        total, how = None, f"--epochs {req.epochs} (the script gives steps per epoch)"
    else:
        rec.set("lr_schedule", "constant", "tune.R024", "no run length (--epochs or --steps): OneCycleLR needs one")
        rec.set("max_lr", None, "tune.R024", "no OneCycleLR")
        rec.set("pct_start", 0.3, "tune.R024", "no OneCycleLR (PyTorch's default kept)")
        return
    rec.total_steps, rec.epochs = total, req.epochs
    rec.set("lr_schedule", "onecycle", "tune.R024", f"OneCycleLR over the run: {how}")
    rec.set("max_lr", None, "tune.R024", "the optimizer's learning rate is the peak; it starts 25x lower")
    rec.set("pct_start", 0.3, "tune.R024", "30% of the steps warm up (PyTorch's default)")
