"""Environment facts: the variables that change how PyTorch trains.

Only the host's allowlist (debtorch/host/environment.py, ``ENV_ALLOWED``) is ever read or
reported; no other variable leaves the machine, even in ``--json`` or a recording.
"""

from __future__ import annotations

from debtorch.facts import Context, Section
from debtorch.host import Host, allowed_environ


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()
    env = allowed_environ(host.environ)
    sec["variables"] = env
    ld = env.get("LD_LIBRARY_PATH")
    sec["ld_library_path"] = [p for p in ld.split(":") if p] if ld else []
    return sec
