"""Checks: operating system, Python environment."""

from __future__ import annotations

from debtorch import knowledge
from debtorch.findings import error, info, warning
from debtorch.doctor.fixes import target_wheel, venv_fix
from debtorch.doctor.registry import check


@check("os")
def check_release(m, ctx):
    o = m.os
    if o.id is None:
        return []
    supported = knowledge.threshold("debian_supported_releases") or ""
    numbered = ", ".join(r for r in str(supported).split() if r.isdigit())
    if o.derivative:
        base = f" (based on {o.debian.title})" if o.debian else ""
        out = [info("os.I001", f"{o.name or o.id} is a Debian derivative{base}",
                    fix="Package names and APT components in the fixes are Debian's; "
                        "check your distribution's equivalents.",
                    facts={"os.id": o.id, "os.id_like": m.get("os.id_like")})]
        if o.debian is not None and o.debian.relation == "older":
            # Warned like the Debian release it is built on: its driver and Python are that old.
            out.append(warning("os.W002", f"{o.name or o.id} is based on {o.debian.title}, older than "
                                          f"debtorch supports ({numbered})",
                               fix=f"Upgrade to a release based on Debian {numbered.split(', ')[0]} or newer; "
                                   "old bases ship drivers that cannot run current PyTorch CUDA wheels.",
                               facts={"os.id": o.id, "debian_base": o.debian.release}))
        return out
    if not o.is_debian:
        if o.platform not in ("linux", "unknown"):
            return [info("os.I002", f"{o.name or o.platform} is not Linux",
                         fix="The driver, limit and storage checks are Linux's; the version checks still apply.",
                         facts={"os.platform": o.platform})]
        return [info("os.I002", f"{o.name or o.id} is not Debian",
                     fix="debtorch's fixes name Debian packages; most checks still apply.",
                     facts={"os.id": o.id})]
    deb = o.debian
    if deb is not None and deb.relation == "older":
        return [warning("os.W002", f"{deb.title} is older than the releases debtorch supports ({numbered})",
                        fix=f"Upgrade to Debian {' or '.join(numbered.split(', '))} (https://www.debian.org/releases/); "
                            "older drivers cannot run current PyTorch CUDA wheels.",
                        facts={"os.release": deb.release})]
    if deb is not None and deb.relation == "newer":
        return [info("os.I004", f"{deb.title} is newer than debtorch's tables (checks/debian.toml)",
                     fix="The checks still apply; what Debian packages for this release (driver, Python) is unknown "
                         "to this debtorch: upgrade debtorch.",
                     facts={"os.release": deb.release})]
    return []


def _wheel_args(m) -> str:
    """What the venv's pip installs: the wheel the other findings name, else the installed build."""
    row = target_wheel(m) or (knowledge.wheel(m.torch.version, m.torch.variant) if m.torch.installed and m.torch.version
                              else None)
    return row["pip"][len("pip install "):] if row else "torch   # add --index-url for a CUDA variant"


@check("os")
def check_wsl(m, ctx):
    wsl = m.os.wsl
    if not wsl:
        return []
    if wsl == 1:
        return [error("os.E001", "WSL 1 cannot use an NVIDIA GPU",
                      fix="In Windows PowerShell: wsl --set-version <distro> 2",
                      facts={"os.wsl": wsl})]
    out = []
    pkgs = m.get("apt.packages") or {}
    installed = sorted(p for p in pkgs if p in ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "cuda-drivers"))
    if installed:
        out.append(warning("os.W003", "a Linux NVIDIA driver is installed inside WSL",
                           fix=f"sudo apt purge {' '.join(installed)}\nWSL uses the Windows driver through "
                               "/usr/lib/wsl/lib/libcuda.so; install drivers on Windows only.",
                           facts={"os.wsl": wsl, "apt.packages": installed}))
    out.append(info("os.I003", "running under WSL 2",
                    fix="GPU access comes from the Windows driver; pinned memory and /dev/shm are limited "
                        "by WSL's memory setting (.wslconfig).",
                    facts={"os.wsl": wsl}))
    return out


@check("python")
def check_interpreter(m, ctx):
    p = m.section("python")
    if p.get("version") is None:
        if ctx.source == "collect_env":
            return []
        return [error("python.E001", "the target Python interpreter did not answer",
                      fix="Point debtorch at a working interpreter: --python /path/to/venv/bin/python",
                      about=p.get("executable") or "", facts={"python.version": m.unknown("python.version")})]
    out = []
    exe = p.get("executable") or ""
    is_system = exe.startswith("/usr/bin/python") and not p.get("venv")
    if is_system and m.get("os.externally_managed"):
        out.append(warning("python.W001", "the system Python is externally managed (PEP 668): use a venv",
                           fix=venv_fix(m, _wheel_args(m)), about=exe,
                           facts={"os.externally_managed": True, "python.venv": False}))
    return out
