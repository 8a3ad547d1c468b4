"""CPUs and shared memory in the machine view: how many CPUs training may use (:class:`CPUs`), and
/dev/shm against the DataLoader workers a tuned run would start here (:class:`Shm`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from debtorch import knowledge
from debtorch.facts import get, unknown_reason
from debtorch.machine.read import as_float, as_int, as_str
from debtorch.machine.slurm import Slurm


@dataclass(frozen=True)
class CPUs:
    usable: int                          # what training may use (assumed when unknown)
    known: bool                          # False: ``usable`` is assumed
    logical: Optional[int]
    note: str                            # how reasons name the count
    unknown: Optional[str] = None        # why usable CPUs are unknown
    model: Optional[str] = None
    bf16: Optional[tuple] = None         # native bf16 features (amx_bf16, avx512_bf16); None: unknown
    quota: Optional[float] = None        # cgroup CPU quota
    affinity: Optional[int] = None
    allocation: Optional[int] = None     # Slurm's SLURM_CPUS_PER_TASK, when it bounds ``usable``


@dataclass(frozen=True)
class Shm:
    """/dev/shm against the DataLoader workers a tuned run would start here (checks/thresholds.toml)."""

    total: Optional[float]               # bytes (memory.shm_total); None: unknown
    free: Optional[float]
    container: Optional[str]             # os.container
    workers: int                         # DataLoader workers of all processes: usable CPUs - 1, bounded
    per_worker: int                      # what one worker's batches take
    docker_default: bool                 # a container's default /dev/shm (Docker's 64 MiB): memory.E002

    @property
    def needed(self) -> int:
        return self.per_worker * self.workers

    @property
    def too_small(self) -> bool:
        """Cannot hold one worker's batches (memory.E001)."""
        return self.total is not None and self.total < self.per_worker

    @property
    def remount_gib(self) -> int:
        """The size memory.E001's fix remounts /dev/shm with: what the workers need, in whole GiB, plus one."""
        return max(1, self.needed // 1024 ** 3 + 1)


def read_cpus(facts: dict, slurm: Slurm) -> CPUs:
    """The CPUs training may use: Slurm's allocation where it bounds them, else cpu.usable_cpus, else
    the logical CPUs (assumed, with the reason)."""
    usable = as_int(get(facts, "cpu.usable_cpus"))
    logical = as_int(get(facts, "cpu.logical_cpus"))
    feats = get(facts, "cpu.features")
    alloc, why = slurm.cpus_per_task, None
    if alloc and alloc > 0 and (not usable or usable <= 0 or alloc < usable):
        # A task of this job may use SLURM_CPUS_PER_TASK CPUs, whatever the node has: a batch
        # script sees the whole allocation, the tasks srun starts get their share.
        had = f"; cpu.usable_cpus {usable}" if usable and usable > 0 else ""
        count, note = alloc, f"{alloc} usable CPUs (Slurm allocation: SLURM_CPUS_PER_TASK={alloc}{had})"
    elif usable and usable > 0:
        count, note, alloc = usable, f"{usable} usable CPUs (cpu.usable_cpus)", None
    else:
        count, alloc = (logical if logical and logical > 0 else 1), None
        why = unknown_reason(facts, "cpu.usable_cpus") or "not in the facts"
        note = f"{count} CPUs assumed (cpu.usable_cpus unknown: {why})"
    bf16 = None
    if isinstance(feats, dict):
        bf16 = tuple(f for f in ("amx_bf16", "avx512_bf16") if feats.get(f))
    return CPUs(usable=count, known=why is None, logical=logical, note=note, unknown=why,
                model=as_str(get(facts, "cpu.model")), allocation=alloc, affinity=as_int(get(facts, "cpu.affinity_cpus")),
                bf16=bf16, quota=as_float(get(facts, "cpu.cgroup_quota_cpus")))


def read_shm(facts: dict, cpus: CPUs) -> Shm:
    """/dev/shm against the workers of ``cpus`` (thresholds: shm_planned_workers_max, shm_per_worker_bytes,
    docker_default_shm_bytes)."""
    total, container = get(facts, "memory.shm_total"), get(facts, "os.container")
    usable = cpus.usable if cpus.known else 1
    workers = max(1, min(usable - 1, int(knowledge.threshold("shm_planned_workers_max"))))
    default = bool(container) and total is not None and total <= int(knowledge.threshold("docker_default_shm_bytes"))
    return Shm(total=total, free=get(facts, "memory.shm_free"), container=container, workers=workers,
               per_worker=int(knowledge.threshold("shm_per_worker_bytes")), docker_default=default)
