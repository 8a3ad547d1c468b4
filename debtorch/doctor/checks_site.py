"""Checks: the site's own minimums (docs/site-config.md)."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from debtorch.doctor import check
from debtorch.doctor.findings import error
from debtorch.doctor.machine import driver_version
from debtorch.facts import get


def _below(have, want) -> bool:
    try:
        return Version(str(have).split("+")[0]) < Version(str(want))
    except InvalidVersion:
        return False


@check("site")
def check_site_minimums(facts, ctx):
    mins = ctx.site.minimums if ctx.site else {}
    out = []
    src = ", ".join(ctx.site.files) if ctx.site and ctx.site.files else "site config"
    driver = driver_version(facts)
    if mins.get("driver") and driver and _below(driver, mins["driver"]):
        out.append(error("site.E001", f"NVIDIA driver {driver} is below this site's minimum {mins['driver']}",
                         fix=f"Upgrade the driver (site rule from {src}).",
                         facts={"driver": driver, "minimum": mins["driver"]}))
    torch = get(facts, "python.torch.version")
    if mins.get("torch") and torch and _below(torch, mins["torch"]):
        out.append(error("site.E002", f"PyTorch {torch} is below this site's minimum {mins['torch']}",
                         fix=f"pip install --upgrade 'torch>={mins['torch']}'  (site rule from {src})",
                         facts={"python.torch.version": torch, "minimum": mins["torch"]}))
    tcuda = get(facts, "python.torch.cuda")
    if mins.get("torch_cuda") and tcuda and _below(tcuda, mins["torch_cuda"]):
        out.append(error("site.E003", f"PyTorch's CUDA {tcuda} is below this site's minimum {mins['torch_cuda']}",
                         fix=f"Install a wheel built for CUDA >= {mins['torch_cuda']} (site rule from {src}).",
                         facts={"python.torch.cuda": tcuda, "minimum": mins["torch_cuda"]}))
    return out
