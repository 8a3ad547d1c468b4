"""The Slurm job and step this process belongs to, in the machine view (:class:`Slurm`), from Slurm's
variables of the environment."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from debtorch import hostlist
from debtorch.machine.read import as_str, section


@dataclass(frozen=True)
class Slurm:
    """The Slurm job and step this process belongs to, from Slurm's variables."""

    job_id: Optional[str] = None
    step_id: Optional[str] = None
    procid: Optional[int] = None
    ntasks: Optional[int] = None
    nnodes: Optional[int] = None
    nodelist: Optional[str] = None       # the step's nodes (else the job's), Slurm's syntax
    node_name: Optional[str] = None
    cpus_per_task: Optional[int] = None
    cpus_on_node: Optional[int] = None
    gpus_on_node: Optional[int] = None
    gpus: Optional[str] = None           # the GPU request (SLURM_GPUS_PER_NODE, SLURM_GPUS ...)
    partition: Optional[str] = None

    @property
    def nodes(self) -> list[str]:
        return hostlist.expand(self.nodelist)


def read_slurm(facts: dict) -> Slurm:
    """Slurm's variables of env.variables, read (the first of each group that is set)."""
    env = section(facts, "env.variables")

    def text(*names: str) -> Optional[str]:
        """The first of ``names`` that is set."""
        return next((v for name in names if (v := as_str(env.get(name)))), None)

    def num(*names: str) -> Optional[int]:
        """The number the first of ``names`` that starts with one starts with ("4(x2)" -> 4)."""
        found = (re.match(r"\s*(\d+)", str(env.get(name) or "")) for name in names)
        return next((int(m.group(1)) for m in found if m), None)

    on_node = num("SLURM_GPUS_ON_NODE")
    if on_node is None:
        listed = text("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
        on_node = len([x for x in listed.split(",") if x.strip()]) if listed else None
    return Slurm(job_id=text("SLURM_JOB_ID", "SLURM_JOBID"), step_id=text("SLURM_STEP_ID"), procid=num("SLURM_PROCID"),
                 ntasks=num("SLURM_NTASKS", "SLURM_NPROCS"), nnodes=num("SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
                 nodelist=text("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"),
                 node_name=text("SLURMD_NODENAME"), cpus_per_task=num("SLURM_CPUS_PER_TASK"),
                 cpus_on_node=num("SLURM_CPUS_ON_NODE"), gpus_on_node=on_node,
                 gpus=text("SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK", "SLURM_GPUS"),
                 partition=text("SLURM_JOB_PARTITION"))
