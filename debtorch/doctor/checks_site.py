"""Checks: the site's own minimums (docs/site-config.md)."""

from __future__ import annotations

from debtorch import versions
from debtorch.doctor.registry import check
from debtorch.findings import error


@check("site")
def check_site_minimums(m, ctx):
    mins = ctx.site.minimums if ctx.site else {}
    out = []
    src = ", ".join(ctx.site.files) if ctx.site and ctx.site.files else "site config"
    driver = m.driver.version
    if mins.get("driver") and driver and versions.below(driver, mins["driver"]):
        out.append(error("site.E001", f"NVIDIA driver {driver} is below this site's minimum {mins['driver']}",
                         fix=f"Upgrade the driver (site rule from {src}).",
                         facts={"driver": driver, "minimum": mins["driver"]}))
    torch = m.torch.version
    if mins.get("torch") and torch and versions.below(torch, mins["torch"]):
        out.append(error("site.E002", f"PyTorch {torch} is below this site's minimum {mins['torch']}",
                         fix=f"pip install --upgrade 'torch>={mins['torch']}'  (site rule from {src})",
                         facts={"python.torch.version": torch, "minimum": mins["torch"]}))
    tcuda = m.torch.cuda
    if mins.get("torch_cuda") and tcuda and versions.below(tcuda, mins["torch_cuda"]):
        out.append(error("site.E003", f"PyTorch's CUDA {tcuda} is below this site's minimum {mins['torch_cuda']}",
                         fix=f"Install a wheel built for CUDA >= {mins['torch_cuda']} (site rule from {src}).",
                         facts={"python.torch.cuda": tcuda, "minimum": mins["torch_cuda"]}))
    return out
