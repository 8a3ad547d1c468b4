"""CUDA library facts (first cut: nvcc only).  TODO(foundation helper)."""

from __future__ import annotations

from debtorch.facts import Section
from debtorch.host import Host


def collect(host: Host, ctx) -> dict:
    sec = Section()
    res = host.run(["nvcc", "--version"], timeout=5)
    sec["nvcc"] = {"output": res.stdout.strip()} if res.ok else None
    return sec
