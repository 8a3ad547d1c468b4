"""Whether the machine was busy while debtorch measured (``tune --measure``, ``verify-train``): the
1-minute load average and the CPU time a hypervisor stole, read through the Host before and after
measuring, against the usable CPUs.  Not a section of the facts document: a reading of the moment.
Parsers are pure functions of the files' text; :func:`judge` takes its thresholds from its caller
(checks/thresholds.toml: ``busy_load_per_cpu``, ``busy_steal_share``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from debtorch.host import Host

LOADAVG = "/proc/loadavg"
STAT = "/proc/stat"


@dataclass(frozen=True)
class Reading:
    """One look at the machine's load."""

    load1: Optional[float]    # /proc/loadavg: tasks runnable or in disk wait, averaged over the last minute
    steal: Optional[int]      # /proc/stat: clock ticks the hypervisor stole, all CPUs together
    total: Optional[int]      # /proc/stat: all clock ticks, all CPUs together


def parse_loadavg(text: str) -> Optional[float]:
    """The 1-minute load average of /proc/loadavg's text ("0.52 0.58 0.59 1/467 12345"), or None."""
    try:
        value = float(text.split()[0])
    except (IndexError, ValueError):
        return None
    return value if value >= 0 else None


def parse_cpu_ticks(text: str) -> tuple[Optional[int], Optional[int]]:
    """(stolen, all) clock ticks of /proc/stat's aggregate ``cpu`` line (user nice system idle iowait irq
    softirq steal ...; guest time is already counted in user and nice), or (None, None)."""
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] != "cpu":
            continue
        try:
            ticks = [int(x) for x in fields[1:9]]
        except ValueError:
            return None, None
        if len(ticks) < 8:
            return None, None
        return ticks[7], sum(ticks)
    return None, None


def read(host: Host) -> Reading:
    """The load now, through ``host`` (unknown parts are None)."""
    loadavg, stat = host.try_read(LOADAVG), host.try_read(STAT)
    steal, total = parse_cpu_ticks(stat) if stat else (None, None)
    return Reading(parse_loadavg(loadavg) if loadavg else None, steal, total)


@dataclass(frozen=True)
class Busy:
    """The load check of one measurement: was the machine busy with other work?"""

    usable_cpus: int
    own: int                          # the tasks the measurement itself kept runnable, at most
    before: Optional[float]           # the 1-minute load average before measuring
    after: Optional[float]            # ... and after
    steal_share: Optional[float]      # the share of CPU time stolen by a hypervisor meanwhile
    reasons: tuple[str, ...] = ()     # why it was busy (empty: it was not, as far as is known)

    @property
    def busy(self) -> bool:
        return bool(self.reasons)

    def warning(self) -> str:
        """The warning line ('' when the machine was not busy)."""
        if not self.busy:
            return ""
        return (f"the machine was busy while measuring ({'; '.join(self.reasons)}): the figures may be slowed "
                "or noisy; measure again when it is quiet")

    def to_json(self) -> dict:
        return {"usable_cpus": self.usable_cpus, "own": self.own, "load_before": self.before,
                "load_after": self.after, "steal_share": self.steal_share, "busy": self.busy,
                "reasons": list(self.reasons)}


def judge(before: Reading, after: Reading, usable_cpus: int, own: int, per_cpu: float,
          steal: float) -> Busy:
    """Whether other work held the machine: a 1-minute load average of ``per_cpu`` x the usable CPUs or
    more before measuring, or after it beyond the ``own`` tasks the measurement ran; or a hypervisor that
    stole ``steal`` of the CPU time or more in between."""
    cpus = max(1, int(usable_cpus))
    limit = per_cpu * cpus
    reasons = []
    if before.load1 is not None and before.load1 >= limit:
        reasons.append(f"load average {before.load1:.1f} on {cpus} usable CPUs before measuring")
    if after.load1 is not None and after.load1 - own >= limit:
        reasons.append(f"load average {after.load1:.1f} after it, {after.load1 - own:.1f} beyond the {own} "
                       "tasks the measurement ran")
    share = None
    if None not in (before.steal, before.total, after.steal, after.total):
        ticks = after.total - before.total   # type: ignore[operator]
        if ticks > 0:
            share = max(0.0, (after.steal - before.steal) / ticks)   # type: ignore[operator]
            if share >= steal:
                reasons.append(f"the hypervisor took {share:.0%} of the CPU time")
    return Busy(cpus, own, before.load1, after.load1, share, tuple(reasons))
