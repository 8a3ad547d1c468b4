"""debtorch doctor: turns the machine view into findings a user can act on.

``diagnose(facts)`` runs every check of :data:`registry` (debtorch/doctor/registry.py)
on the machine view of ``facts``.  The checks live in ``checks_*.py``, one
module per group of areas; fix texts in Debian's terms in ``fixes.py``.
"""

from __future__ import annotations

from typing import Optional, Union

from debtorch.doctor import checks_cuda, checks_network, checks_nvidia, checks_resources, checks_site, checks_system  # noqa: F401  (they register)
from debtorch.doctor.areas import AREA_TITLES, AREAS, Area, area_states
from debtorch.doctor.registry import Context, Registry, Report, check, registry
from debtorch.machine import Machine

SCHEMA_VERSION = 1

__all__ = ["AREAS", "AREA_TITLES", "Area", "Context", "Registry", "Report", "check", "registry", "diagnose", "SCHEMA_VERSION"]


def diagnose(facts: Union[dict, Machine], ctx: Optional[Context] = None, checks: Optional[Registry] = None) -> Report:
    """Run the checks (the doctor's own unless ``checks`` is given) on a facts document
    or a :class:`~debtorch.machine.Machine`."""
    machine = facts if isinstance(facts, Machine) else Machine.from_facts(facts)
    report = (checks or registry).run(machine, ctx)
    report.areas = area_states(machine)
    return report
