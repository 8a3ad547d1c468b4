"""Checks: CUDA (driver and libraries against PyTorch's CUDA) and the installed PyTorch."""

from __future__ import annotations

import os
import re
from typing import Optional

from debtorch import knowledge, versions
from debtorch.doctor.fixes import (
    driver_upgrade,
    newest_for_python,
    no_wheels_advice,
    pip_command,
    target_wheel,
    torch_fix,
)
from debtorch.doctor.limits import limit
from debtorch.doctor.registry import Context, check
from debtorch.findings import Finding, finding
from debtorch.machine import Machine


def _torch(m: Machine) -> dict:
    return m.get("python.torch") or {}


# ---------------------------------------------------------------- torch
@check("torch")
def check_torch_installed(m: Machine, ctx: Context) -> list[Finding]:
    t = _torch(m)
    if not t or t.get("installed") is not False:
        return []
    exe = m.get("python.executable")
    if m.wheels_for_arch == {}:
        # No wheels for this CPU at all (armv7l, i686 ...): cpu.W004's advice, not pytorch.org's selector.
        return [finding("torch.E001", about=exe or "", fix=no_wheels_advice(m), facts={"python.executable": exe,
                                                                                     "os.arch": m.os.arch})]
    fix = torch_fix(m)
    if exe and fix.startswith("pip "):
        fix = f"{exe} -m {fix}"
    return [finding("torch.E001", about=exe or "", fix=fix, facts={"python.executable": exe})]


@check("torch")
def check_cpu_only_on_gpu(m: Machine, ctx: Context) -> list[Finding]:
    t = _torch(m)
    if not m.torch.cpu_only and not m.torch.hip:
        return []       # a CUDA build, or one the facts do not name (never guessed CPU-only)
    hint = m.gpus.hint if not t.get("hip") else None
    if not m.gpus.present:
        if not hint:
            return []
        # Whether there is a GPU is unknown (a report names none): a question, not an error.
        return [finding("torch.I001", version=t.get("version"), hint=hint, install=torch_fix(m, uninstall=True),
                        facts={"python.torch.version": t.get("version"), "python.torch.cuda": None, "gpu_hint": hint})]
    kind = f"a ROCm build (HIP {t['hip']})" if t.get("hip") else "a CPU-only build"
    return [finding("torch.E002", version=t.get("version"), kind=kind, where="on a machine with an NVIDIA GPU",
                    fix=torch_fix(m, uninstall=True),
                    facts={"python.torch.version": t.get("version"), "python.torch.cuda": None,
                           "nvidia.gpus": [g.label for g in m.gpus]})]


@check("torch")
def check_cuda_build_without_gpu(m: Machine, ctx: Context) -> list[Finding]:
    t = _torch(m)
    devices = m.get("nvidia.pci_devices")
    if not t.get("installed") or not t.get("cuda") or devices is None or m.gpus.present:
        return []
    if not isinstance(devices, list) or m.get("os.wsl"):
        return []
    return [finding("torch.W004", version=t.get("version"),
                    install=torch_fix(m, "PyTorch's CPU build (https://download.pytorch.org/whl/cpu), "
                                         "in place of this CUDA build"),
                    facts={"python.torch.cuda": t.get("cuda"), "nvidia.pci_devices": []})]


def _python_order(version: str) -> tuple:
    return versions.major_minor(version) or ()


@check("torch")
def check_torch_age(m: Machine, ctx: Context) -> list[Finding]:
    t = _torch(m)
    floor = limit("torch_min_version")
    if not t.get("installed") or not versions.below(t.get("version"), floor):
        return []
    row = target_wheel(m)
    newest = newest_for_python(m)
    if row is None and newest and not versions.below(m.torch.series, newest):
        # No newer release has wheels for this Python: `pip install --upgrade torch` would change nothing.
        latest = knowledge.latest_series(m.wheel_platform or "linux-x86_64") or newest
        pythons = (knowledge.wheel(latest, "cpu", m.wheel_platform or "linux-x86_64") or {}).get("python") or ["3"]
        return [finding("torch.W001", variant="python", version=t.get("version"), floor=floor, newest=newest,
                        python=m.python_version, latest_python=max(pythons, key=_python_order),
                        facts={"python.torch.version": t.get("version"), "python.version": m.python_version})]
    held = row is not None and row["kind"] == "older" and row["why"].endswith(f"driver {m.driver.version} runs")
    line = torch_fix(m, "pip install --upgrade torch (the index for your variant: https://pytorch.org/get-started/locally/)")
    return [finding("torch.W001", variant="held" if held else "", version=t.get("version"), floor=floor,
                    upgrade=driver_upgrade(m) if held else "", install=line,
                    facts={"python.torch.version": t.get("version")})]


@check("torch")
def check_cudnn(m: Machine, ctx: Context) -> list[Finding]:
    t = _torch(m)
    if not t.get("installed") or not t.get("cuda"):
        return []
    version, where = m.cudnn.value, m.cudnn.source
    deep = m.get("python.deep") or {}
    if version is None:
        if deep.get("ok") and deep.get("cudnn_version") is None or (not deep and ctx.source == "live"):
            return [finding("torch.E004", version=t.get("version"), fix=_reinstall(m),
                            facts={"python.torch.cudnn_wheel": None})]
        return []
    floor = limit("cudnn_min_version")
    if versions.below(version, floor):
        return [finding("torch.W002", version=version, floor=floor,
                        install=torch_fix(m, "pip install --upgrade torch (https://pytorch.org/get-started/locally/)"),
                        facts={"cudnn": version, "from": where})]
    return []


def _reinstall(m: Machine) -> Optional[str]:
    """The installed build again, from its variant's index (``--force-reinstall``: pip would keep
    it otherwise); None (the entry's general words) where no official wheel is known for it."""
    row = knowledge.wheel(m.torch.version or "", m.torch.variant, m.wheel_platform or "linux-x86_64")
    if row is None or not m.torch.version or not versions.is_release(m.torch.version):
        return None
    return pip_command(m, "pip install --force-reinstall " + row["pip"][len("pip install "):])


@check("torch")
def check_arch(m: Machine, ctx: Context) -> list[Finding]:
    t = _torch(m)
    arch = m.torch_arch
    if arch is None:
        return []
    version = t.get("version") or "(version not known)"
    out = []
    for g in m.gpus:
        if not g.cc:
            continue
        verdict, detail = knowledge.arch_support(g.cc, arch.arch)
        facts = {"compute_capability": g.cc, "compute_capability_from": g.cc_from, "arch_list": arch.shown,
                 "arch_list_from": arch.source}
        if verdict == "none":
            old = knowledge.older_than_all(g.cc, arch.arch)
            built = {} if arch.exact else knowledge.cuda_builds_sass(t["cuda"]) or {}
            if not arch.exact:
                detail = (f"nvcc of CUDA {built.get('cuda')} builds {versions.sm_name(built.get('oldest'))} to "
                          f"{versions.sm_name(built.get('newest'))} only (checks/cuda_arch.toml)")
            if arch.exact:
                variant = "older" if old else ""
            else:
                variant = "cuda_older" if old else "cuda_cannot"
            out.append(finding("torch.E003", variant=variant, gpu=g.name, sm=g.sm, version=version,
                               cuda=built.get("cuda"), install=torch_fix(m), detail=detail, about=g.label, facts=facts))
        elif verdict == "ptx" and arch.exact:
            row = target_wheel(m)
            sass = row and row.get("arch_verdict") == "sass"
            out.append(finding("torch.W003", variant="" if sass else "no_better", gpu=g.name, version=version,
                               better=torch_fix(m) if sass else "", series=m.torch.series, sm=g.sm, about=g.label,
                               facts=facts))
    if not out and m.cuda.failure == "no-kernel-image":
        gpu = next(iter(m.gpus.compute or m.gpus), None)
        out.append(finding("torch.E003", variant="no_kernel_image", gpu=(gpu.name if gpu else None) or "the GPU",
                           install=torch_fix(m), about=gpu.label if gpu else "", facts={"evidence": m.cuda.evidence}))
    return out


@check("torch")
def check_deep_import(m: Machine, ctx: Context) -> list[Finding]:
    deep = m.get("python.deep")
    if not deep:
        return []
    errs = deep.get("errors") or {}
    if errs.get("import"):
        return [finding("torch.E005", error=errs["import"][:120], fix=_reinstall(m), facts={"error": errs["import"]})]
    if not deep.get("ok") and errs.get("probe"):
        return [finding("torch.E005", variant="probe", error=errs["probe"][:120], facts={"error": errs["probe"]})]
    out = []
    for dev, res in (deep.get("exercise") or {}).items():
        bad = {k: v for k, v in res.items() if v != "ok"}
        if bad:
            k, v = next(iter(bad.items()))
            out.append(finding("torch.E006", what=k, device=dev, error=v[:100], about=dev,
                               facts={"device": dev, **bad}))
    return out


# ---------------------------------------------------------------- cuda
@check("cuda")
def check_driver_for_torch(m: Machine, ctx: Context) -> list[Finding]:
    t = _torch(m)
    tcuda = t.get("cuda") if t.get("installed") else None
    if not tcuda:
        return []
    out = []
    verdict = m.driver_runs_torch
    if m.cuda.failure == "driver-too-old" and m.cuda.from_torch:
        verdict = "too-old"          # torch's own words ("found version 11040") outrank a table
    if m.driver.version:
        driver, f = m.driver.version, {"driver": m.driver.version, "python.torch.cuda": tcuda}
    else:
        # Only the driver's highest CUDA is known (a report; torch's "found version 11040").
        driver = f"supporting CUDA {m.driver.cuda}"
        f = {"nvidia.cuda_driver_version": m.driver.cuda, "python.torch.cuda": tcuda}
    if verdict == "too-old" and m.get("python.deep.cuda_available") is True:
        # CUDA initialises although the driver is too old: NVIDIA's forward-compatibility
        # package (cuda-compat), which works on data-center GPUs only.
        out.append(finding("cuda.W004", driver=driver, cuda=tcuda, facts=f))
        verdict = None
    if verdict == "too-old":
        kind = (target_wheel(m) or {}).get("kind")
        if m.cuda.from_torch and m.cuda.failure == "driver-too-old":
            f = dict(f, evidence=m.cuda.evidence)
        out.append(finding("cuda.E001", variant={"cpu": "cpu", "cpu-driver": "cpu_until_upgrade"}.get(kind or "", ""),
                           driver=driver, cuda=tcuda, upgrade=driver_upgrade(m) if kind != "cpu" else "",
                           install=torch_fix(m), facts=f))
    elif verdict == "minor-compat":
        # The alternative is a wheel this driver runs fully, named from the table (never the installed
        # one, nor one of the same CUDA); where none has code for the GPU, only the driver helps.
        row = target_wheel(m)
        if row and row.get("driver_verdict") == "full":
            alternative = {"variant": "", "series": row["series"], "variant_name": row["variant"],
                           "wheel_cuda": row["cuda"], "install": torch_fix(m)}
        else:
            alternative = {"variant": "driver_only", "series": m.torch.series, "variant_name": "",
                           "wheel_cuda": "", "install": ""}
        out.append(finding("cuda.W001", driver=driver, cuda=tcuda, upgrade=driver_upgrade(m), facts=f,
                           **alternative))
    dd = m.debian_driver if m.gpus.present else None      # no GPU known: no driver of Debian's to judge
    if dd:
        dverdict, _ = knowledge.driver_supports(dd["version"], tcuda)
        # The driver in use runs the wheel (its version says so, or CUDA works under it): what
        # Debian's packaged driver could not run is then no error of this machine.
        current_ok = (m.driver.version and verdict in ("full", "minor-compat")) or (
            m.cuda.available is True and m.cuda.failure is None)
        if dverdict == "too-old" and not current_ok:
            out.append(finding("cuda.E002", release=dd["release"], driver=dd["version"], cuda=tcuda,
                               install=torch_fix(m),
                               facts={"debian_driver": dd["version"], "python.torch.cuda": tcuda}))
    return out


@check("cuda")
def check_cuda_init(m: Machine, ctx: Context) -> list[Finding]:
    c = m.cuda
    if c.failure == "no-visible-gpu" and m.torch.cuda and (c.evidence or "").startswith("CUDA_VISIBLE_DEVICES"):
        return [finding("cuda.E003", variant="hidden", evidence=c.evidence,
                        facts={"env.CUDA_VISIBLE_DEVICES": m.get("env.variables.CUDA_VISIBLE_DEVICES")})]
    if c.failure != "init-failed" or not m.torch.cuda:
        return []
    text = c.evidence or ""
    suspend = "999" in text or "unknown error" in text.lower()
    if m.driver.platform == "windows" and m.os.wsl == 2:
        variant = "wsl"
    elif m.driver.platform != "linux":
        variant = "not_linux"
    elif m.os.container:
        variant = "container"
    elif c.from_torch:
        variant = "from_torch"
    else:
        variant = ""
    return [finding("cuda.E003", variant=variant, why=" (error 999, typical after suspend)" if suspend else "",
                    facts={"error": text.strip()[:300], "from_torch": c.from_torch})]


_WHEEL_DIR = re.compile(r"/(site|dist)-packages/(nvidia/[^/]+/lib|torch/lib)/")


@check("cuda")
def check_mapped_libraries(m: Machine, ctx: Context) -> list[Finding]:
    deep = m.get("python.deep") or {}
    t = _torch(m)
    if not deep.get("mapped_libraries") or not t.get("cuda"):
        return []
    foreign = [p for p in deep["mapped_libraries"]
               if re.match(r"lib(cudart|cudnn|nccl|cublas)", os.path.basename(p)) and not _WHEEL_DIR.search(p)]
    if not foreign or not (t.get("cudnn_wheel") or t.get("cuda_runtime_wheel")):
        return []
    # Name the LD_LIBRARY_PATH entry that led there (its files may be links to the mapped one).
    folder = os.path.dirname(foreign[0])
    entries = m.get("cuda.ld_library_path") or []
    for e in entries:
        if foreign[0] in (e.get("real_path"), e.get("path")):
            folder = e.get("dir") or folder
            break
    else:
        name = os.path.basename(foreign[0])
        same = [e for e in entries if os.path.basename(e.get("real_path") or e.get("path") or "") == name]
        if same:
            folder = same[0].get("dir") or folder
    return [finding("cuda.E004", library=os.path.basename(foreign[0]), folder=folder, about=foreign[0],
                    facts={"mapped": foreign})]


@check("cuda")
def check_nvcc(m: Machine, ctx: Context) -> list[Finding]:
    nv = m.get("cuda.toolkit_nvcc") or {}
    t = _torch(m)
    ver, tcuda = nv.get("version"), t.get("cuda")
    if not ver or not tcuda:
        return []
    if str(ver).split(".")[0] != str(tcuda).split(".")[0]:
        return [finding("cuda.W002", version=ver, cuda=tcuda, major=tcuda.split(".")[0], about=nv.get("path") or "nvcc",
                        facts={"cuda.toolkit_nvcc.version": ver, "python.torch.cuda": tcuda})]
    return []


@check("cuda")
def check_shadowing(m: Machine, ctx: Context) -> list[Finding]:
    by_dir: dict = {}
    for s in m.get("cuda.shadowing") or []:
        where = s.get("ld_library_path_copy") or ""
        by_dir.setdefault(os.path.dirname(where), []).append(s)
    out = []
    for folder, items in sorted(by_dir.items()):
        libs = [s.get("name") or s.get("library") for s in items]
        out.append(finding("cuda.W003", folder=folder, libraries=", ".join(libs), about=folder,
                           facts={"shadowed": [f"{s.get('name')} {s.get('ld_library_path_version')} over "
                                               f"{s.get('wheel_version')}" for s in items]}))
    return out
