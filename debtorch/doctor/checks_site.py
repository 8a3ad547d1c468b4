"""Checks: the site's own minimums (docs/site-config.md)."""

from __future__ import annotations

from debtorch import versions
from debtorch.doctor.registry import Context, check
from debtorch.findings import Finding, finding
from debtorch.machine import Machine


@check("site")
def check_site_minimums(m: Machine, ctx: Context) -> list[Finding]:
    mins = ctx.site.minimums if ctx.site else {}
    out = []
    src = ", ".join(ctx.site.files) if ctx.site and ctx.site.files else "site config"
    driver = m.driver.version
    if mins.get("driver") and driver and versions.below(driver, mins["driver"]):
        out.append(finding("site.E001", driver=driver, minimum=mins["driver"], src=src,
                           facts={"driver": driver, "minimum": mins["driver"]}))
    torch = m.torch.version
    if mins.get("torch") and torch and versions.below(torch, mins["torch"]):
        out.append(finding("site.E002", torch=torch, minimum=mins["torch"], src=src,
                           facts={"python.torch.version": torch, "minimum": mins["torch"]}))
    tcuda = m.torch.cuda
    if mins.get("torch_cuda") and tcuda and versions.below(tcuda, mins["torch_cuda"]):
        out.append(finding("site.E003", cuda=tcuda, minimum=mins["torch_cuda"], src=src,
                           facts={"python.torch.cuda": tcuda, "minimum": mins["torch_cuda"]}))
    return out
