"""Fix texts in Debian's own terms: APT components, packages, commands, the wheel to install.

Pure functions of the machine view, shared by the checks so that every finding
says the same thing the same way.
"""

from __future__ import annotations

from typing import Optional

from debtorch import knowledge, versions
from debtorch.findings import finding_fix
from debtorch.machine import Machine

COMPONENT_ORDER = ["main", "contrib", "non-free", "non-free-firmware"]


def driver_components(m: Machine) -> list:
    """Components the NVIDIA driver needs on this Debian (https://wiki.debian.org/NvidiaGraphicsDrivers):
    contrib, and where checks/debian.toml puts nvidia-driver and its firmware (non-free and, from
    bookworm, non-free-firmware); all three for a release the table does not know."""
    row = m.os.debian.row if m.os.debian else None
    if not row:
        return ["contrib", "non-free", "non-free-firmware"]
    want = {"contrib", row.get("nvidia_driver_component"), row.get("firmware_component")} - {None}
    return [c for c in COMPONENT_ORDER if c in want]


def headers_package(m: Machine) -> str:
    flavour = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "powerpc64le"}.get(m.os.arch or "x86_64", "amd64")
    return f"linux-headers-{flavour}"


def enable_components_fix(m: Machine, needed: list) -> str:
    """How to enable ``needed`` components in the sources this machine actually has."""
    lines = []
    seen = set()
    for e in m.get("apt.sources") or []:
        if not isinstance(e, dict) or not e.get("enabled", True) or "deb" not in (e.get("types") or []):
            continue
        if not any(knowledge.is_debian_suite(s) for s in e.get("suites") or []):
            continue
        have = e.get("components") or []
        missing = [c for c in needed if c not in have]
        key = (e.get("file"), e.get("format"))
        if not missing or key in seen:
            continue
        seen.add(key)
        merged = [c for c in COMPONENT_ORDER if c in have or c in missing] + [c for c in have if c not in COMPONENT_ORDER]
        want = " ".join(merged)
        if e.get("format") == "deb822":
            lines.append(f"In {e.get('file')}, set every Debian stanza's line to `Components: {want}`")
        else:
            lines.append(f"In {e.get('file')}, make each Debian `deb` line end in `{want}`")
    if not lines:
        want = " ".join(["main"] + needed)
        lines.append(f"Add the components to your Debian sources: `Components: {want}` (deb822) "
                     f"or `... {want}` at the end of each `deb` line (sources.list)")
    lines.append("sudo apt update")
    return "\n".join(lines)


def host_side(m: Machine, variant: str = "") -> str:
    """The catalogue variant of a fix whose steps act on the kernel, the driver, Secure Boot or a
    daemon of the host: "container" inside a container (they run on its host, not in it), else
    ``variant``."""
    return "container" if m.os.container else variant


def driver_upgrade(m: Machine) -> str:
    """How this machine gets a newer NVIDIA driver, as the start of a sentence: for a vGPU from the
    host's vGPU software (whatever the guest's OS: gpu.I003), on Windows under WSL 2 or in a Windows
    report, from the container's host, else Debian's backports or NVIDIA's repository."""
    if m.gpus.vgpu_software and not any(str(g.value("virtualization_mode", "")).upper() == "VGPU" for g in m.gpus.listed):
        return (f"Update the vGPU guest driver from the NVIDIA vGPU software release this guest is licensed for "
                f"({m.gpus.vgpu_software}; NVIDIA's licensing portal), never the public driver or Debian's nvidia-driver")
    if m.gpus.vgpu:
        return "Update the vGPU guest driver to the release of the host's vGPU software"
    if m.driver.platform == "macos":
        return "Update NVIDIA's CUDA driver for macOS"
    last = last_branch(m)
    if m.driver.platform == "windows":
        if last:
            return (f"Update the NVIDIA driver on Windows to an R{last['branch']} release, the last branch for "
                    f"{last['arch']} GPUs (https://www.nvidia.com/Download/index.aspx; WSL uses it)")
        return "Update the NVIDIA driver on Windows (https://www.nvidia.com/Download/index.aspx; WSL uses it)"
    if m.os.container:
        stay = f", staying on R{last['branch']} (the last branch for {last['arch']} GPUs)" if last else ""
        return f"Upgrade the NVIDIA driver on the container's host{stay}"
    if last:
        return (f"Upgrade the NVIDIA driver within R{last['branch']}, the last branch for {last['arch']} GPUs: a newer "
                f"one drops them (Debian: backports, or NVIDIA's CUDA repository's cuda-drivers-{last['branch']})")
    return "Upgrade the NVIDIA driver (Debian: backports, or NVIDIA's CUDA repository)"


def last_branch(m: Machine) -> Optional[dict]:
    """The last driver branch of the oldest retired architecture among the machine's GPUs
    (checks/cuda_driver.toml [[last_branch]]: R580 for Maxwell, Pascal and Volta), where it is older
    than the newest branch; None where every GPU runs the newest drivers, or none is known."""
    rows = [row for g in m.gpus if g.cc and (row := knowledge.last_driver_branch(g.cc))]
    newest = knowledge.newest_driver_branch()
    if not rows or newest is None:
        return None
    oldest = min(rows, key=_branch_number)
    return oldest if _branch_number(oldest) < newest else None


def _branch_number(row: dict) -> int:
    return int(str(row["branch"]).split(".")[0])


def driver_install_fix(m: Machine, enable: bool = True) -> str:
    """Debian's driver: headers, nvidia-driver and its firmware, then a reboot; first (``enable``) the
    components they need where the sources lack them (driver.E007 says that part itself)."""
    packages = (headers_package(m), "nvidia-driver", "firmware-misc-nonfree")
    line = apt_install_enabling(m, *packages) if enable else apt_install(m, *packages)
    return line + "\nsudo reboot"


def not_installed(m: Machine, *packages: str) -> list:
    """Those of ``packages`` dpkg does not list as installed."""
    have = m.get("apt.packages")
    have = have if isinstance(have, dict) else {}
    return [p for p in packages if not (isinstance(have.get(p), dict) and "installed" in str(have[p].get("status", "installed")))]


def apt_install(m: Machine, *packages: str) -> str:
    """``sudo apt install`` of those ``packages`` dpkg does not list as installed (a fix never
    names what is installed); "" when all are."""
    want = not_installed(m, *packages)
    return f"sudo apt install {' '.join(want)}" if want else ""


def components_for(m: Machine, *packages: str) -> list:
    """The components (checks/debian_packages.toml) of ``packages`` this Debian's sources lack, in
    APT's order: what a fix must enable before it installs them.  [] where the sources or the
    release are unknown, on a derivative, or where NVIDIA's CUDA repository provides NVIDIA's."""
    if not m.os.is_debian or m.apt.components is None or m.apt.cuda_repo or m.os.debian is None:
        return []
    need: set = set()
    for name in packages:
        row = knowledge.debian_package(name, m.os.debian.release)
        if row:
            need.update(c for c in row.get("needs") or [row["component"]] if c not in m.apt.components)
    return [c for c in COMPONENT_ORDER if c in need]


def apt_install_enabling(m: Machine, *packages: str) -> str:
    """:func:`apt_install`, after the lines that enable the components it needs (contrib for
    nvidia-persistenced and python3-pynvml) where the sources lack them."""
    line = apt_install(m, *packages)
    need = components_for(m, *not_installed(m, *packages))
    return f"{enable_components_fix(m, need)}\n{line}" if line and need else line


VENV = "~/venvs/torch"


def venv_fix(m: Machine, pip_args: str = "torch   # add --index-url for a CUDA variant") -> str:
    """A venv for PyTorch beside Debian's own Python (PEP 668), with ``pip_args`` installed in it."""
    lines = [apt_install(m, "python3-venv"), f"python3 -m venv {VENV}", f"{VENV}/bin/pip install {pip_args}",
             f"then run training with {VENV}/bin/python, or `debtorch doctor --python {VENV}/bin/python`"]
    return "\n".join(x for x in lines if x)


def externally_managed(m: Machine) -> bool:
    """The target is Debian's own Python, which refuses `pip install` (PEP 668)."""
    exe = m.get("python.executable") or ""
    return bool(m.get("os.externally_managed")) and not m.get("python.venv") and exe.startswith("/usr/bin/python")


def pip_command(m: Machine, line: str) -> str:
    """``line`` ("pip install torch==... --index-url ...") as this machine's Python takes it:
    into a venv where the target is an externally managed system Python (PEP 668)."""
    if line.startswith("pip install ") and externally_managed(m):
        return venv_fix(m, line[len("pip install "):])
    return line


def target_wheel(m: Machine) -> Optional[dict]:
    """The one official wheel every finding of a report names (fixes never
    contradict each other): a knowledge row with ``pip``, plus ``why`` (a note for the
    fix line, or "") and ``kind``: "same" (the installed release), "newer" (the
    installed release has no wheel for this GPU, driver or Python), "older" (the newest
    release that has one), "latest" (no torch, or one too old or of unknown version),
    "cpu" (no NVIDIA GPU, or none any wheel for this Python has code for), "cpu-driver"
    (only wheels a newer driver runs have code for the GPU).

    Only wheels published for the machine (its CPU architecture, checks/torch_wheels.toml
    ``platform``, and its Python, ``python``) are answers, and never the installed build:
    where it is the best its release offers, the answer is None and a finding that would
    name it says so.  None also where PyTorch publishes no wheels for the architecture, or
    nothing is known to choose by."""
    t, plat, py, libc = m.torch, m.wheel_platform, m.python_version, m.os.glibc
    old = t.installed and versions.below(t.version, str(knowledge.threshold("torch_min_version") or "0"))
    keep = bool(t.installed and t.version and t.series and not old)
    latest = knowledge.latest_series(plat) if plat else None
    series = t.series if keep else latest
    if not series or not plat:
        return None
    release = (t.version if keep else None) or series          # pins the installed version in the pip line
    kind, mine = ("same", t.variant) if keep else ("latest", None)

    def answer(row: Optional[dict], kind: str, note: str = "") -> Optional[dict]:
        same = row and t.installed and (row.get("series"), row["variant"]) == (t.series, t.variant)
        return None if not row or same else dict(row, kind=kind, why=note)

    if not m.gpus and m.gpus.present is False:
        return answer(_cpu_row(release, plat, py, libc), "cpu")
    ccs = sorted({g.cc for g in m.gpus if g.cc}, key=lambda cc: versions.parse_cc(cc) or ())   # for every GPU
    driver, note = m.driver.version, ""
    if not driver and not m.driver.cuda and m.debian_driver and m.gpus.present:
        # A GPU without a driver yet: the wheel Debian's packaged driver will run (never assumed
        # where nothing says there is a GPU).
        driver, note = m.debian_driver["version"], f"for Debian's packaged driver {m.debian_driver['version']}"
    platform = "windows" if m.driver.platform == "windows" else "linux"

    def best(s: str, skip: tuple = (), python: Optional[str] = py, drv: Optional[str] = "",
             glibc: Optional[str] = libc) -> Optional[dict]:
        return knowledge.best_variant_for_driver(s, driver if drv == "" else drv, ccs, platform=plat, exclude=skip,
                                                 driver_platform=platform, python=python,
                                                 driver_cuda=m.driver.cuda if drv == "" else None, glibc=glibc)

    row = best(release, (mine,) if mine else ())
    if row is None and mine and (best(release) or {}).get("variant") == mine:
        return None            # the installed build is the best its release offers
    if row is not None and row.get("nearest"):
        kind = "nearest"                       # a release newer than the table: its nearest known one
    if row is None and keep and best(release, python=None) and not best(release):
        note = f"{t.version} has no wheels for Python {py}"
    known = knowledge.known_series(plat)

    def held_back(s: str) -> str:
        """What holds the machine back from a release newer than ``s``: its driver, its Python or its glibc."""
        newer = [x for x in known if versions.below(s, x)]
        if (driver or m.driver.cuda) and (not ccs or any(best(x, drv=None) for x in newer)):
            return f"release {s}: the newest that {f'driver {driver}' if driver else 'this driver'} runs"
        if any(best(x, python=None) for x in newer):
            return f"release {s}: the newest with wheels for Python {py}"
        if any(best(x, glibc=None) for x in newer):
            return f"release {s}: the newest whose wheels run on glibc {libc}"
        return ""

    if row is None and latest and versions.below(series, latest):
        # A newer release: the newest that fits, not only the latest (a driver may run 2.11's cu128
        # but no wheel of 2.14).
        for s in reversed([x for x in known if versions.below(series, x)]):
            row = best(s)
            if row is not None:
                kind = "newer"
                note = held_back(s) if s != latest else note
                break
    for s in reversed([s for s in known if versions.below(s, series)] if row is None else []):
        row = best(s)
        if row is not None:
            kind = "older"
            note = held_back(s)
            break
    if row is None and ccs:
        # The CPU build: because no wheel for this Python has code for the GPUs ("cpu"), or because
        # none of those the driver runs does ("cpu-driver": a newer driver would run one).
        sms = ", ".join(str(versions.sm_name(c)) for c in ccs)
        held = bool(driver) and any(best(s, drv=None) for s in known)
        row, kind = _cpu_row(release, plat, py, libc), "cpu-driver" if held else "cpu"
        note = (f"no wheel for Python {py} that driver {driver} runs has code for {sms}" if held
                else f"no official CUDA wheel{f' for Python {py}' if py else ''} has code for {sms}")
    elif row is not None and not driver:
        need = knowledge.min_driver(row["cuda"], platform) or {}
        wants = need.get("minor_compat_driver") or need.get("toolkit_driver")
        note = note or (f"needs driver >= {wants}" if wants and not m.driver.cuda else "")
    return answer(row, kind, note)


def _cpu_row(release: str, plat: str, py: Optional[str], glibc: Optional[str] = None) -> Optional[dict]:
    """The CPU wheel of ``release`` for this platform, Python and glibc, else of the newest release that
    has one."""
    for s in [release] + list(reversed(knowledge.known_series(plat))):
        row = knowledge.wheel(s, "cpu", plat)
        need = knowledge.files_glibc(row["release"], "cpu", plat, row["series"]) if row else None
        if row and knowledge.python_fits(row, py) and knowledge.glibc_fits(need, glibc):
            return row
    return None


def torch_fix(m: Machine, generic: str = "Install the PyTorch variant that matches your driver and GPU "
                                          "(https://pytorch.org/get-started/locally/).", uninstall: bool = False) -> str:
    """The fix line every torch finding names: the target wheel's pip line with its note
    (PEP 668-aware), else ``generic``.  ``pip uninstall torch`` goes first where ``uninstall``
    asks for it, or where pip would otherwise keep the installed torch (:func:`keeps_installed`)."""
    row = target_wheel(m)
    if row is None:
        first = "pip uninstall torch\n" if uninstall and not externally_managed(m) else ""
        return first + (_no_wheel_for_python(m) or generic)
    have = (m.torch.version or "").split("+")[0]
    note = row["why"] or {"newer": f"no other {have} variant fits; release {row['series']} does",
                          "older": f"release {row['series']}: the newest with code for this GPU",
                          "nearest": f"release {row['series']}: the nearest one debtorch knows",
                          }.get(row["kind"], "")
    line = pip_command(m, row["pip"] + (f"  # {note}" if note else ""))
    if line.startswith("pip install ") and (uninstall or keeps_installed(m, row)):
        return "pip uninstall torch\n" + line
    return line


def keeps_installed(m: Machine, row: dict) -> bool:
    """Whether pip, given ``row``'s pin, would keep the installed torch ("Requirement already
    satisfied"): the same release where the index's files carry no local label (1.7.1 is 1.7.1,
    whatever it was built with), or a series pin (``torch==2.14.*``) the installed release is in.
    A pin with a label (``torch==2.13.0+cu126``) never matches another build (PEP 440)."""
    t = m.torch
    parsed = versions.torch_version(t.version) if t.installed else None
    if parsed is None:
        return False
    if row.get("release"):
        return bool(row.get("unlabelled")) and parsed["version"] == row["release"]
    return parsed["series"] == row["series"]


def no_wheels_advice(m: Machine) -> str:
    """cpu.W004's fix: what to do where PyTorch publishes no wheels for the CPU architecture (also
    torch.E001's there: pytorch.org's selector has nothing for it)."""
    release = m.os.debian.release if m.os.is_debian and m.os.debian else None
    debian = knowledge.debian_has("python3-torch", release, m.os.arch) is True
    return finding_fix("cpu.W004", variant="debian" if debian else "", machines=", ".join(knowledge.wheel_machines()))


def newest_for_python(m: Machine) -> Optional[str]:
    """The newest release series with an official wheel for the machine's Python (and platform),
    or None where either is unknown or none has one."""
    plat, py = m.wheel_platform, m.python_version
    if not plat or not py:
        return None
    fits = [s for s in knowledge.known_series(plat)
            if any(knowledge.python_fits(row, py) for v in knowledge.variants(s, plat)
                   if (row := knowledge.wheel(s, v, plat)))]
    return fits[-1] if fits else None


def _no_wheel_for_python(m: Machine) -> Optional[str]:
    """What to say where no release publishes wheels for the machine's Python (a newer CPython
    than any release, or an old one), else None."""
    plat, py = m.wheel_platform, m.python_version
    latest = knowledge.latest_series(plat) if plat else None
    row = knowledge.wheel(latest, "cpu", plat) if plat and latest else None
    if not plat or not py or not row or _cpu_row(latest or "", plat, py, m.os.glibc):
        return None
    newest = max(row["python"], key=lambda v: versions.major_minor(v) or ())
    return (f"PyTorch publishes no wheels for Python {py} (checks/torch_wheels.toml): make a venv with a Python "
            f"its wheels are built for (Python {newest} for the newest release)")
