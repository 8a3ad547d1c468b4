"""Checks: operating system, Python environment."""

from __future__ import annotations

from debtorch.doctor import check
from debtorch.doctor.debian import venv_fix
from debtorch.doctor.findings import error, info, warning
from debtorch.facts import get

SUPPORTED_RELEASES = ("12", "13", "testing", "sid")


@check("os")
def check_release(facts, ctx):
    o = facts.get("os") or {}
    if o.get("id") is None:
        return []
    if o.get("derivative_of"):
        return [info("os.I001", f"{o.get('pretty_name') or o.get('id')} is a Debian derivative",
                     fix="Package names and APT components in the fixes are Debian's; "
                         "check your distribution's equivalents.",
                     facts={"os.id": o.get("id"), "os.id_like": o.get("id_like")})]
    if not o.get("is_debian"):
        platform = o.get("platform")
        if platform and platform != "linux":
            return [info("os.I002", f"{o.get('pretty_name') or platform} is not Linux",
                         fix="The driver, limit and storage checks are Linux's; the version checks still apply.",
                         facts={"os.platform": platform})]
        return [info("os.I002", f"{o.get('pretty_name') or o.get('id')} is not Debian",
                     fix="debtorch's fixes name Debian packages; most checks still apply.",
                     facts={"os.id": o.get("id")})]
    rel = o.get("release")
    if rel and rel not in SUPPORTED_RELEASES:
        return [warning("os.W002", f"Debian {rel} is older than the releases debtorch supports (12, 13)",
                        fix="Upgrade to Debian 12 or 13 (https://www.debian.org/releases/); older drivers "
                            "cannot run current PyTorch CUDA wheels.",
                        facts={"os.release": rel})]
    return []


@check("os")
def check_wsl(facts, ctx):
    wsl = get(facts, "os.wsl")
    if not wsl:
        return []
    if wsl == 1:
        return [error("os.E001", "WSL 1 cannot use an NVIDIA GPU",
                      fix="In Windows PowerShell: wsl --set-version <distro> 2",
                      facts={"os.wsl": wsl})]
    out = []
    pkgs = get(facts, "apt.packages") or {}
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
def check_interpreter(facts, ctx):
    p = facts.get("python") or {}
    if p.get("version") is None:
        reason = (p.get("unknown") or {}).get("version") or (p.get("unknown") or {}).get("*")
        if ctx.source == "collect_env":
            return []
        return [error("python.E001", "the target Python interpreter did not answer",
                      fix="Point debtorch at a working interpreter: --python /path/to/venv/bin/python",
                      about=p.get("executable") or "", facts={"python.version": reason})]
    out = []
    exe = p.get("executable") or ""
    is_system = exe.startswith("/usr/bin/python") and not p.get("venv")
    if is_system and get(facts, "os.externally_managed"):
        out.append(warning("python.W001", "the system Python is externally managed (PEP 668): use a venv",
                           fix=venv_fix(), about=exe,
                           facts={"os.externally_managed": True, "python.venv": False}))
    return out
