"""Checks: operating system, Python environment."""

from __future__ import annotations

from debtorch import knowledge
from debtorch.doctor.fixes import target_wheel, venv_fix
from debtorch.doctor.registry import Context, check
from debtorch.findings import Finding, finding
from debtorch.machine import Machine


@check("os")
def check_release(m: Machine, ctx: Context) -> list[Finding]:
    o = m.os
    if o.id is None:
        return []
    supported = knowledge.threshold("debian_supported_releases") or ""
    numbered = ", ".join(r for r in str(supported).split() if r.isdigit())
    if o.derivative:
        base = f" (based on {o.debian.title})" if o.debian else ""
        out = [finding("os.I001", name=o.name or o.id, base=base,
                       facts={"os.id": o.id, "os.id_like": m.get("os.id_like")})]
        if o.debian is not None and o.debian.relation == "older":
            # Warned like the Debian release it is built on: its driver and Python are that old.
            out.append(finding("os.W002", variant="derivative", name=o.name or o.id, release=o.debian.title,
                               supported=numbered, first=numbered.split(", ")[0],
                               facts={"os.id": o.id, "debian_base": o.debian.release}))
        return out
    if not o.is_debian:
        if o.platform not in ("linux", "unknown"):
            return [finding("os.I002", variant="not_linux", name=o.name or o.platform,
                            facts={"os.platform": o.platform})]
        return [finding("os.I002", name=o.name or o.id, facts={"os.id": o.id})]
    deb = o.debian
    if deb is not None and deb.relation == "older":
        return [finding("os.W002", release=deb.title, supported=numbered, releases=" or ".join(numbered.split(", ")),
                        facts={"os.release": deb.release})]
    if deb is not None and deb.relation == "newer":
        return [finding("os.I004", release=deb.title, facts={"os.release": deb.release})]
    return []


def _wheel_args(m: Machine) -> str:
    """What the venv's pip installs: the wheel the other findings name, else the installed build."""
    row = target_wheel(m) or (knowledge.wheel(m.torch.version, m.torch.variant) if m.torch.installed and m.torch.version
                              else None)
    return row["pip"][len("pip install "):] if row else "torch   # add --index-url for a CUDA variant"


@check("os")
def check_wsl(m: Machine, ctx: Context) -> list[Finding]:
    wsl = m.os.wsl
    if not wsl:
        return []
    if wsl == 1:
        return [finding("os.E001", facts={"os.wsl": wsl})]
    out = []
    pkgs = m.get("apt.packages") or {}
    installed = sorted(p for p in pkgs if p in ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "cuda-drivers"))
    if installed:
        out.append(finding("os.W003", packages=" ".join(installed), facts={"os.wsl": wsl, "apt.packages": installed}))
    out.append(finding("os.I003", facts={"os.wsl": wsl}))
    return out


@check("python")
def check_interpreter(m: Machine, ctx: Context) -> list[Finding]:
    p = m.section("python")
    if p.get("version") is None:
        if ctx.source == "collect_env":
            return []
        return [finding("python.E001", about=p.get("executable") or "",
                        facts={"python.version": m.unknown("python.version")})]
    out = []
    exe = p.get("executable") or ""
    is_system = exe.startswith("/usr/bin/python") and not p.get("venv")
    if is_system and m.get("os.externally_managed"):
        out.append(finding("python.W001", fix=venv_fix(m, _wheel_args(m)), about=exe,
                           facts={"os.externally_managed": True, "python.venv": False}))
    return out
