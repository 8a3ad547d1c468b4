"""Prescriptions from the user's job (``debtorch tune --from-watch PATH``, docs/tune.md): the record
``cfg.watch(..., json=PATH)`` wrote of a real training loop, read as untrusted input (the one door,
:mod:`debtorch.inputs`, and the schema, :mod:`debtorch.schema`), becomes a :class:`WatchRecord`; the
rules (:mod:`debtorch.tune.rules`, tune.P001-P005) size the loader from it with this module's model:

* the loop consumes ``batch / (step - data wait)`` samples per second when a batch is ready;
* one worker delivers what the job's workers delivered each (input-bound), or, loading in the training
  process, ``HANDOVER`` of ``batch / data wait`` (a worker hands its batch over through shared memory);
* a worker costs the CPU the job's workers used per sample (when recorded), and the CPUs beside the
  training process's measured share bound them all;
* the data wait predicted is what the step is not spent on the loop's own work (in the record's clock:
  the GPU's with CUDA events, where that is ``1 - supplied / consumed``; the host's otherwise), or, when
  the supply keeps up, a queued batch's hand-over (the job's fastest fetches, at most ``READY_S``) on CPUs
  its workers keep busy: they decode at the rate consumed, each sample at its measured CPU cost, keeping a
  share ``rho`` of the usable CPUs busy, and in processor sharing a piece of work ``x`` takes
  ``x / (1 - rho)`` (L. Kleinrock, "Time-shared systems: a theoretical treatment", J. ACM 14(2), 1967):
  :func:`contention`;
* on a simulated accelerator (``--device sim:RATE``) the device consumes RATE: a host clock cannot see
  an asynchronous device's rate.

Pure and torch-free.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

from debtorch import inputs, schema
from debtorch.train.device import Device

MAX_WATCH_BYTES = 64 * inputs.MIB   # a watch file: one line a minute for weeks, and the verdicts
MAX_RECORDS = 1_000_000
HANDOVER = 0.85          # a worker's rate over loading in the training process (the hand-over through /dev/shm)
HEADROOM = 1.15          # workers for 15% more than the loop consumes
IDLE_WORKER = 0.5        # input-bound workers using less CPU each than this wait on reads, not decoding
READY_S = 0.001          # fetching a batch that is already in the queue, at most (the hand-over)
# Workers that would keep this share of the CPUs busy or more leave the prediction a lower bound: measured
# (benchmarks/results/pipeline.md, 2 CPUs), at 0.55 of them the data wait came within 5 points of the
# prediction, at 0.9 it was 56% (31%-81%) against 21% predicted: near saturation, batches are not ready
# in time far more often than a mean hand-over says.
SATURATED = 0.8
THRESHOLD = 0.05         # watch's input-bound threshold (checks/thresholds.toml dataloader_time_fraction_warn)

_SECONDS = schema.number("a number of seconds, 0 or more, finite", lambda v: 0 <= v <= 1e9)
_SHARE = schema.number("a share from 0 to 1", lambda v: 0 <= v <= 1)
_CPUS = schema.number("a number of CPUs, 0 or more, finite", lambda v: 0 <= v <= 1e6)
_COUNT = schema.integer(0, 2**31 - 1)
_OPT_INT = schema.integer(0, 2**31 - 1)
SPEC = schema.Table({
    "schema_version": schema.integer(1, 1),
    "steps": _COUNT, "seconds": _SECONDS, "steps_per_s": schema.number(), "samples_per_s": schema.number(),
    "data_wait": schema.Table({"share": _SHARE, "low": _SHARE, "high": _SHARE, "windows": _COUNT}),
    "timing": schema.one_of("cuda events", "host clock"),
    "final": schema.BOOL, "left_early": schema.BOOL,
    "loader": schema.Table({"num_workers": schema.integer(0, 65536), "prefetch_factor": schema.integer(1, 65536),
                            "persistent_workers": schema.BOOL, "pin_memory": schema.BOOL}),
    "pipeline": schema.Table({
        "batch_size": schema.integer(1, 2**31 - 1), "batch_bytes": schema.integer(0, 2**62),
        "fetch_s": schema.Table({"median": _SECONDS, "p10": _SECONDS, "p90": _SECONDS, "max": _SECONDS}),
        "step_s": schema.Table({"median": _SECONDS, "p90": _SECONDS}),
        "cpus": schema.Table({"usable": schema.integer(1, 2**31 - 1), "main_busy": _CPUS, "workers_busy": _CPUS,
                              "workers_read": _OPT_INT, "machine_busy": _CPUS, "machine_iowait": _CPUS}),
        "device": schema.one_of("cuda", "cpu"),
        "device_name": schema.text(max_len=200, one_line=True),
    }),
}, required=("schema_version", "steps", "seconds", "data_wait", "pipeline"))


class WatchError(ValueError):
    """A watch file that cannot be used; one line naming the file (exit 2)."""


@dataclass(frozen=True)
class WatchRecord:
    """One pass of the user's loop, as ``cfg.watch`` recorded it (the figures a prescription reads)."""

    path: str
    steps: int
    seconds: float                  # the counted steps' wall time
    batch_size: int                 # samples per batch
    num_workers: int
    prefetch_factor: Optional[int]
    data_wait: float                # share of the step time waiting for the next batch
    data_wait_low: Optional[float]  # its 95% interval
    data_wait_high: Optional[float]
    fetch_median_s: Optional[float]
    fetch_p10_s: Optional[float]
    fetch_p90_s: Optional[float]
    batch_bytes: Optional[int]
    usable_cpus: Optional[int]      # the CPUs the job could use
    main_busy: Optional[float]      # CPUs the training process used
    workers_busy: Optional[float]   # CPUs its DataLoader workers used, together
    machine_busy: Optional[float]   # CPUs the whole machine used (other processes included)
    machine_iowait: Optional[float]  # CPUs of the machine idle while waiting on I/O
    device: Device                  # cuda or cpu
    device_name: Optional[str]
    timing: str

    @property
    def step_s(self) -> float:
        return self.seconds / self.steps

    @property
    def wait_s(self) -> float:
        return self.data_wait * self.step_s

    @property
    def consumed(self) -> float:
        """Samples/s the loop takes when a batch is ready: the batch over the step without its data wait."""
        return self.batch_size / max(1e-9, self.step_s - self.wait_s)

    @property
    def delivered(self) -> float:
        """Samples/s the loader delivered (the loop's own rate)."""
        return self.batch_size / self.step_s

    @property
    def input_bound(self) -> bool:
        return self.data_wait_low is not None and self.data_wait_low > THRESHOLD

    @property
    def fine(self) -> bool:
        return self.data_wait_high is not None and self.data_wait_high < THRESHOLD

    @classmethod
    def from_json(cls, path: str, no: int, r: dict[str, Any]) -> "WatchRecord":
        """The record ``r`` (line ``no`` of ``path``, checked against :data:`SPEC`); WatchError for what a
        prescription needs and the record lacks."""
        p, d, loader = r.get("pipeline") or {}, r.get("data_wait") or {}, r.get("loader") or {}
        fetch, cpus = p.get("fetch_s") or {}, p.get("cpus") or {}

        def need(value: Any, what: str) -> Any:
            if value is None:
                raise WatchError(f"{path}:{no}: {what} is unknown: {HOW.get(what, 'a longer run records it')}")
            return value

        steps = need(r.get("steps"), "steps")
        if steps < 2 or not r.get("seconds"):
            raise WatchError(f"{path}:{no}: {steps} counted steps: too few to prescribe anything (a pass of at least "
                             "20 steps)")
        samples = p.get("batch_size")
        if samples is None and r.get("samples_per_s") and r.get("steps_per_s"):
            samples = max(1, round(r["samples_per_s"] / r["steps_per_s"]))
        return cls(path=path, steps=steps, seconds=float(r["seconds"]), batch_size=need(samples, "batch_size"),
                   num_workers=loader.get("num_workers") or 0, prefetch_factor=loader.get("prefetch_factor"),
                   data_wait=float(need(d.get("share"), "data_wait.share")), data_wait_low=d.get("low"),
                   data_wait_high=d.get("high"), fetch_median_s=fetch.get("median"), fetch_p10_s=fetch.get("p10"),
                   fetch_p90_s=fetch.get("p90"), batch_bytes=p.get("batch_bytes"), usable_cpus=cpus.get("usable"),
                   main_busy=cpus.get("main_busy"), workers_busy=cpus.get("workers_busy"),
                   machine_busy=cpus.get("machine_busy"), machine_iowait=cpus.get("machine_iowait"),
                   device=Device.parse(p.get("device") or "cpu"), device_name=p.get("device_name"),
                   timing=r.get("timing") or "host clock")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "device": str(self.device)}


@dataclass(frozen=True)
class Plan:
    """What the model says of a number of workers for this job on this machine."""

    workers: int
    per_worker: float        # samples/s one worker delivers
    cpu_per_sample: float    # CPU seconds a worker spends on a sample
    loading_cpus: float      # CPUs left beside the training process
    consumed: float          # samples/s the loop takes
    supplied: float          # samples/s the workers deliver, at most
    predicted_wait: float    # share of the step
    cpu_bound: bool          # more workers cannot help: the CPUs are the limit
    waits_on_reads: bool     # the job's workers were input-bound with CPU to spare
    workers_cpus: float      # CPUs the workers keep busy, decoding at the rate taken from them
    handover_s: Optional[float]   # a queued batch's hand-over, seconds, on CPUs that busy (None: every CPU taken)
    cpus: int = 0            # the CPUs the training process and its workers may use
    saturated: bool = False  # the supply keeps up, the workers keeping SATURATED of the CPUs busy or more (not all)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_watch(path: str) -> WatchRecord:
    """The last verdict of a ``cfg.watch(..., json=PATH)`` file (else its last line), checked.  Raises
    :class:`WatchError`: one line naming the file and, for a bad value, the line and key."""
    try:
        text = inputs.read_text(path, MAX_WATCH_BYTES, what="a cfg.watch JSON file")
    except inputs.InputError as exc:
        raise WatchError(str(exc)) from None
    lines = [(no, line) for no, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise WatchError(f"{path}: empty; it is written by cfg.watch(loader, json=PATH) (docs/runtime.md)")
    if len(lines) > MAX_RECORDS:
        raise WatchError(f"{path}: more than {MAX_RECORDS} records; not a cfg.watch JSON file")
    chosen = None
    for no, line in reversed(lines):
        try:
            record = inputs.parse_json(line, f"{path}:{no}")
        except inputs.InputError as exc:
            raise WatchError(str(exc)) from None
        if not isinstance(record, dict):
            raise WatchError(f"{path}:{no}: not a cfg.watch record (a JSON object)")
        if chosen is None or (record.get("final") is True and chosen[1].get("final") is not True):
            chosen = (no, record)
        if record.get("final") is True:
            break
    assert chosen is not None
    no, record = chosen
    if "pipeline" not in record:
        raise WatchError(f"{path}:{no}: no \"pipeline\" record (an older debtorch wrote it); run the job again "
                         "with this debtorch's cfg.watch(loader, json=PATH)")
    try:
        schema.check(record, SPEC, open=True)
    except schema.Invalid as exc:
        raise WatchError(f"{path}:{no}: {exc}") from None
    return WatchRecord.from_json(path, no, record)


HOW = {"batch_size": "the batches had no size watch could read; give cfg.watch(loader, batch_size=N)",
       "data_wait.share": "a pass of at least 20 steps records it"}


def per_worker(w: WatchRecord) -> float:
    """Samples/s one worker delivers: what the job's workers delivered each when they were the limit, else
    ``HANDOVER`` of loading in the training process (or of what the workers kept up with)."""
    if w.num_workers == 0:
        return HANDOVER * w.batch_size / max(1e-9, w.wait_s)
    each = w.delivered / w.num_workers
    if w.input_bound:
        return each
    return max(each, w.consumed / w.num_workers)


def loading_busy(w: WatchRecord) -> Optional[float]:
    """CPUs the training process spent loading, when it loaded its own batches: one CPU at most (loading
    runs in the loop's thread) for the share of the time it waited."""
    if w.num_workers or w.main_busy is None:
        return None
    return min(1.0, w.main_busy) * w.data_wait


def cpu_per_sample(w: WatchRecord, rate: float) -> float:
    """CPU seconds a worker spends on one sample: from the workers' recorded CPU time when input-bound, from
    the training process's when it loaded (over ``HANDOVER``), else a whole CPU at ``rate``."""
    if w.num_workers and w.input_bound and w.workers_busy:
        return w.workers_busy / w.delivered
    busy = loading_busy(w)
    if busy:
        return busy / w.delivered / HANDOVER
    return 1.0 / rate


def main_cpus(w: WatchRecord, cpus: int) -> float:
    """CPUs the training process needs of its own beside the workers: what it used, less its own loading
    (unknown: one drives a GPU, half of them compute on a CPU)."""
    if w.main_busy is None:
        return 1.0 if w.device.is_cuda else float(cpus) / 2
    return max(0.0, w.main_busy - (loading_busy(w) or 0.0))


def plan(w: WatchRecord, workers: int, cpus: int, rate: Optional[float] = None) -> Plan:
    """The model's figures for ``workers`` loader workers on a process with ``cpus`` CPUs; ``rate``: the
    samples/s the device consumes when it is known (a simulated accelerator), else the record's."""
    each = per_worker(w)
    cost = cpu_per_sample(w, each)
    loading = max(1.0, cpus - min(main_cpus(w, cpus), cpus - 1.0)) if cpus > 1 else 1.0
    supplied = min(workers * each, loading / cost) if workers else w.delivered
    consumed = rate or w.consumed
    busy = 0.0
    if workers:
        busy = min(supplied, consumed) * cost   # the workers decode at the rate taken from them
    # A batch already in the queue still takes its hand-over (the job's fastest fetches, at most READY_S),
    # on CPUs the workers keep busy.
    stretch = contention(busy, cpus)
    handover = None
    if math.isfinite(stretch):
        handover = min(w.fetch_p10_s or READY_S, READY_S) * stretch
    if supplied >= consumed:
        predicted = 1.0   # the workers take every CPU: the training process waits for one as long as it runs
        if handover is not None:
            predicted = min(1.0, handover / (w.batch_size / consumed + handover))
    else:
        # A step lasts a batch at the rate supplied; of it, the loop's own time (what the record measured
        # beside the wait, in its clock) is not waiting.
        predicted = max(0.0, 1.0 - (w.step_s - w.wait_s) * supplied / w.batch_size)
    busy_each = (w.workers_busy / w.num_workers) if (w.workers_busy is not None and w.num_workers) else None
    waits_on_reads = bool(w.input_bound and busy_each is not None and busy_each < IDLE_WORKER
                          and spare_cpus(w) >= IDLE_WORKER)
    return Plan(workers=workers, per_worker=each, cpu_per_sample=cost, loading_cpus=loading, consumed=consumed,
                supplied=supplied, predicted_wait=predicted, cpu_bound=consumed * cost > loading,
                waits_on_reads=waits_on_reads, workers_cpus=busy, handover_s=handover, cpus=cpus,
                saturated=supplied >= consumed and handover is not None and busy >= SATURATED * cpus)


def contention(busy: float, cpus: int) -> float:
    """How many times longer the training process's short pieces of CPU work (a batch's hand-over) take when
    its workers keep ``busy`` of its ``cpus`` CPUs busy: ``1 / (1 - rho)``, ``rho = busy / cpus``, the mean time
    of a job in processor sharing over its work (Kleinrock 1967: a woken thread that finds its CPU taken waits
    its turn there).  Infinite when the workers would take every CPU.  The machine's other processes are left
    out: measured (benchmarks/results/pipeline.md), a neighbour holding 1.2 of 2 CPUs did not stretch the
    hand-over as sharing every busy CPU would (its median 2.5-4.8 ms against 4.2-4.4 ms without the
    neighbour; that model said 147 ms): the hand-over's threads contend with the workers' decoding."""
    rho = busy / max(1, cpus)
    if rho >= 1.0:
        return math.inf
    return 1.0 / (1.0 - rho)


def spare_cpus(w: WatchRecord) -> float:
    """CPUs of the machine nobody used while the job ran (0 when unknown): idle workers on a busy machine
    wait for a CPU, not for reads."""
    if w.machine_busy is None or w.usable_cpus is None:
        return 0.0
    return max(0.0, w.usable_cpus - w.machine_busy)


def workers_for(w: WatchRecord, cpus: int, rate: Optional[float] = None) -> int:
    """Workers for the rate the loop consumes (``rate``, when known), within the CPUs beside the training
    process (input-bound workers that wait on reads, not the CPU, are not bounded by it)."""
    first = plan(w, 1, cpus, rate)
    need = first.consumed / first.per_worker * HEADROOM
    if first.waits_on_reads:
        return max(1, math.ceil(need))
    by_cpu = first.loading_cpus / (first.per_worker * first.cpu_per_sample)
    return max(1, math.ceil(min(need, by_cpu)))
