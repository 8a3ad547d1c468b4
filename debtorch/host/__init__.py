"""The one door to the machine.

Every read of /proc, /sys, /etc and /var/lib/dpkg, every subprocess, every NVML
call and every system call that describes the machine (rlimits, affinity,
statvfs) goes through a :class:`Host`.  Nothing else in debtorch opens
``/proc/...`` or calls :mod:`subprocess` directly.

One module a host kind, beside what they share:

* ``base.py``: :class:`Host` (the interface every probe uses), the values it
  answers, and :class:`Unavailable`: a probe that cannot read something gets it
  with a short reason ("not present", "permission denied", "timed out", ...);
  facts turn that into ``None`` plus the reason, never a traceback.
* ``live.py``: :class:`LiveHost`, this machine (its commands started and killed
  by ``processes.py``).
* ``replay.py``: :class:`ReplayHost`, a machine replayed from a folder of real
  files (a fake root) plus ``_host.json`` (recorded command outputs, rlimits,
  environment, NVML).  Like python-distro with ``root_dir``, a replayed host
  never falls back to the live machine: what was not recorded is unknown, with
  the reason ``not recorded``.
* ``recording.py``: :class:`RecordingHost`, the live machine copying everything
  it reads into a folder that :class:`ReplayHost` can load (``debtorch facts
  --record DIR``).
* ``environment.py``: the environment allowlist, the only variables debtorch
  reads, reports or records.
* ``prestarted.py``: the target interpreter's probe, started before debtorch
  imports the rest of itself.

Callers import from here (``from debtorch.host import Host, LiveHost``).
"""

from debtorch.host.base import (
    COMMAND_NOT_FOUND,
    MAX_READ,
    NOT_PRESENT,
    NOT_RECORDED,
    PERMISSION_DENIED,
    READ_BLOCK,
    TIMED_OUT,
    ColdRead,
    CommandResult,
    DirEntry,
    Host,
    Unavailable,
    command_key,
    meaningful_line,
)
from debtorch.host.environment import ENV_ALLOWED, ENV_ALLOWED_PREFIXES, FLEET_SECRET, allowed_environ, is_allowed
from debtorch.host.live import LiveHost
from debtorch.host.prestarted import prestart
from debtorch.host.processes import kill_group
from debtorch.host.recording import RecordingHost
from debtorch.host.replay import COMMANDS_DIR, HOST_FILE, NVML_FILE, ReplayHost

__all__ = [
    "COMMAND_NOT_FOUND", "MAX_READ", "NOT_PRESENT", "NOT_RECORDED", "PERMISSION_DENIED", "READ_BLOCK", "TIMED_OUT",
    "ColdRead", "CommandResult", "DirEntry", "Host", "Unavailable", "command_key", "meaningful_line",
    "ENV_ALLOWED", "ENV_ALLOWED_PREFIXES", "FLEET_SECRET", "allowed_environ", "is_allowed",
    "LiveHost", "prestart", "kill_group", "RecordingHost", "COMMANDS_DIR", "HOST_FILE", "NVML_FILE", "ReplayHost",
]
