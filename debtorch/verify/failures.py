"""Failures are findings, not tracebacks (docs/verify-train.md, "When a run fails"): the worker's
classification (:func:`debtorch.train.worker.classify`) becomes what the user reads: the doctor's id
for a bus error in a DataLoader worker, as the machine view answers it, what fits after an
out-of-memory, and the exit code.  Torch-free.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional

from debtorch import fingerprint
from debtorch.findings import finding
from debtorch.machine import Machine
from debtorch.train.device import Device
from debtorch.transport.client import USER_INPUT_KINDS
from debtorch.units import human_bytes
from debtorch.verify.results import NonFinite

SHM_FIX = "sudo mount -o remount,size=8G /dev/shm   (persist it with a tmpfs line in /etc/fstab)"


@dataclass(frozen=True)
class Fit:
    """What fits after an out-of-memory: a smaller micro-batch, and the accumulation that keeps the global batch."""

    micro_batch: int
    accumulation_steps: int

    @classmethod
    def from_json(cls, doc: Any) -> Optional["Fit"]:
        """The worker's (or a document's) suggestion; None when there is none."""
        if not isinstance(doc, Mapping):
            return None
        return cls(int(doc["micro_batch"]), int(doc["accumulation_steps"]))

    def to_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class Failure:
    """What stopped a verify-train run, for the report and the exit code."""

    kind: str                           # the worker's kind (oom, shm, workload, died, ...)
    message: str                        # one line
    phase: str = ""                     # which trial failed ("round 2: tuned")
    finding: Optional[str] = None       # the doctor's id, when one applies
    fix: str = ""                       # what to do, when known
    suggestion: Optional[Fit] = None    # what fits (after an out-of-memory)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def user_input(self) -> bool:
        """About what the user gave (the command line exits 2), not a run that failed (1)."""
        return self.kind in USER_INPUT_KINDS

    def line(self) -> str:
        where = f" ({self.phase})" if self.phase else ""
        return f"{self.message}{where}"

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Failure":
        """A failure as a verify-train document recorded it (its traceback is never recorded)."""
        return cls(kind=doc["kind"], message=doc["message"], phase=doc.get("phase") or "", finding=doc.get("finding"),
                   fix=doc.get("fix") or "", suggestion=Fit.from_json(doc.get("suggestion")), detail=dict(doc.get("detail") or {}))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["user_input"] = self.user_input
        out["detail"] = {k: v for k, v in self.detail.items() if k != "traceback"}
        return out


def shm_finding(facts: Optional[dict[str, Any]]) -> tuple[str, str]:
    """(doctor id, fix) for a DataLoader worker killed by a bus error on this machine, as the doctor
    gives it: ``memory.E002`` in a container with Docker's default 64 MB /dev/shm, else ``memory.E001``."""
    shm = Machine.from_facts(facts).shm if facts else None
    if shm is not None and (shm.docker_default or shm.too_small):
        fid = "memory.E002" if shm.docker_default else "memory.E001"
        return fid, finding(fid, size=human_bytes(shm.total), gib=shm.remount_gib).fix.replace("\n", " ")
    return "memory.E001", SHM_FIX


def from_worker_error(exc: BaseException, phase: str = "", facts: Optional[dict[str, Any]] = None) -> Failure:
    """A :class:`Failure` from a :class:`debtorch.transport.client.WorkerError`."""
    kind = getattr(exc, "kind", "exception")
    detail = dict(getattr(exc, "detail", {}) or {})
    message = getattr(exc, "message", None) or str(exc)
    fail = Failure(kind=kind, message=message, phase=phase, detail=detail)
    if kind == "shm":
        fid, fix = shm_finding(facts)
        said = detail.get("finding") or "memory.E001"
        fail.finding, fail.fix = fid, fix
        fail.message = message.replace(said, fid) if said in message else f"{message} (debtorch doctor: {fid})"
    elif kind == "oom":
        fail.suggestion = Fit.from_json(detail.get("suggestion"))
    elif kind == "no_torch":
        fail.fix = "pip install torch in that interpreter's venv, or name another with --python"
    return fail


def nonfinite_loss(events: list[NonFinite]) -> Failure:
    """The failure of a run whose loss became NaN or infinite (``events``: analysis.nonfinite_losses).

    Never a healthy result: the speeds were measured on a model that no longer learns."""
    first = events[0]
    precisions = {e.precision for e in events}
    if "fp32" not in precisions:  # only the mixed-precision runs diverged
        fix = (f"train in fp32 (precision = \"fp32\" in [compute] of the config), or fp16 with its GradScaler; "
               f"{'/'.join(sorted(precisions))} loses range on this workload")
    else:
        fix = "the loss diverges whatever the settings: lower the learning rate, check the data and the loss function"
    more = f" (and in {len(events) - 1} more run(s))" if len(events) > 1 else ""
    return Failure(kind="nonfinite_loss", message=f"the loss became non-finite (NaN or infinite) at step "
                   f"{first.step}{more}", phase=first.run, fix=fix, detail={"runs": [e.to_json() for e in events]})


def oom_message(device: Optional[Device], micro_batch: int, accumulation_steps: int, fit: Optional[Fit],
                stopped: Optional[str] = None) -> str:
    """One line for an out-of-memory, with what fits when a smaller micro-batch was found (``stopped``:
    why the search for one ended early, when it did)."""
    if device is None:
        where = "the device"
    elif device.is_cuda:
        where = "the GPU"
    else:
        where = str(device)
    glob = micro_batch * accumulation_steps
    msg = f"{where} ran out of memory at micro-batch {micro_batch}"
    if fit:
        now = fit.micro_batch * fit.accumulation_steps
        same = "as before" if now == glob else f"was {glob}"
        msg += (f"; micro-batch {fit.micro_batch} with accumulation_steps {fit.accumulation_steps} "
                f"fits ({now} samples per optimizer step, {same})")
    elif stopped:
        msg += f"; the search for a micro-batch that fits stopped at {stopped}"
    elif micro_batch > 1:
        msg += "; even micro-batch 1 does not fit"
    return msg


def stale_config(config_fingerprint: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """What differs between the machine a config was tuned on and this one (:mod:`debtorch.fingerprint`)."""
    return fingerprint.differences(config_fingerprint or {}, here or {})
