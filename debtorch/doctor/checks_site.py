"""Checks: the site's own minimums (docs/site-config.md)."""

from __future__ import annotations

from debtorch import versions
from debtorch.doctor.registry import Context, check
from debtorch.findings import Finding, finding
from debtorch.machine import Machine


@check("site")
def check_site_minimums(m: Machine, ctx: Context) -> list[Finding]:
    mins = ctx.site.minimums if ctx.site else {}
    src = ", ".join(ctx.site.files) if ctx.site and ctx.site.files else "site config"
    # (id, the minimum's key, the message's field, what this machine has, the fact it rests on)
    rules = (("site.E001", "driver", "driver", m.driver.version, "driver"),
             ("site.E002", "torch", "torch", m.torch.version, "python.torch.version"),
             ("site.E003", "torch_cuda", "cuda", m.torch.cuda, "python.torch.cuda"))
    return [finding(fid, **{field: have}, minimum=mins[key], src=src, facts={fact: have, "minimum": mins[key]})
            for fid, key, field, have, fact in rules if mins.get(key) and have and versions.below(have, mins[key])]
