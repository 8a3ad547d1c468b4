"""Checks: CUDA (driver and libraries against PyTorch's CUDA) and the installed PyTorch."""

from __future__ import annotations

import os
import re

from debtorch import knowledge, versions
from debtorch.findings import error, warning
from debtorch.doctor.fixes import driver_upgrade, externally_managed, pip_command, target_wheel, torch_fix
from debtorch.doctor.limits import limit
from debtorch.doctor.registry import check


def _torch(m) -> dict:
    return m.get("python.torch") or {}


# ---------------------------------------------------------------- torch
@check("torch")
def check_torch_installed(m, ctx):
    t = _torch(m)
    if not t or t.get("installed") is not False:
        return []
    exe = m.get("python.executable")
    fix = torch_fix(m)
    if exe and fix.startswith("pip "):
        fix = f"{exe} -m {fix}"
    return [error("torch.E001", "PyTorch is not installed in the target interpreter", about=exe or "",
                  fix=fix, facts={"python.executable": exe})]


@check("torch")
def check_cpu_only_on_gpu(m, ctx):
    t = _torch(m)
    if not m.torch.cpu_only and not m.torch.hip:
        return []       # a CUDA build, or one the facts do not name (never guessed CPU-only)
    hint = m.gpu_hint if not t.get("hip") else None
    if not m.has_nvidia_gpu and not hint:
        return []
    kind = f"a ROCm build (HIP {t['hip']})" if t.get("hip") else "a CPU-only build"
    where = "on a machine with an NVIDIA GPU" if m.has_nvidia_gpu else f"where {hint}"
    return [error("torch.E002", f"PyTorch {t.get('version')} is {kind} {where}",
                  fix=_uninstall(m) + torch_fix(m) + ("" if m.has_nvidia_gpu else
                                                     "\n(if this machine has no NVIDIA GPU, the CPU build is right)"),
                  facts={"python.torch.version": t.get("version"), "python.torch.cuda": None,
                         "nvidia.gpus": [g.label for g in m.gpus], "gpu_hint": hint})]


def _uninstall(m) -> str:
    """How the wrong torch leaves, before the right one goes in (a venv needs no uninstall)."""
    return "" if externally_managed(m) else "pip uninstall torch\n"


@check("torch")
def check_cuda_build_without_gpu(m, ctx):
    t = _torch(m)
    devices = m.get("nvidia.pci_devices")
    if not t.get("installed") or not t.get("cuda") or devices is None or m.has_nvidia_gpu:
        return []
    if not isinstance(devices, list) or m.get("os.wsl"):
        return []
    return [warning("torch.W004", f"PyTorch {t.get('version')} is a CUDA build but this machine has no NVIDIA GPU",
                    fix="Training runs on the CPU. The CPU build is several GB smaller:\n"
                        + torch_fix(m, "pip install torch --index-url https://download.pytorch.org/whl/cpu"),
                    facts={"python.torch.cuda": t.get("cuda"), "nvidia.pci_devices": []})]


@check("torch")
def check_torch_age(m, ctx):
    t = _torch(m)
    floor = limit("torch_min_version")
    if not t.get("installed") or not versions.below(t.get("version"), floor):
        return []
    row = target_wheel(m)
    held = row is not None and row["kind"] == "older" and row["why"].endswith(f"driver {m.driver.version} runs")
    line = torch_fix(m, "pip install --upgrade torch (the index for your variant: https://pytorch.org/get-started/locally/)")
    return [warning("torch.W001", f"PyTorch {t.get('version')} is older than {floor}",
                    fix=(f"{driver_upgrade(m)} first: it holds PyTorch back. With this driver the newest is:\n{line}"
                         if held else "Upgrade it: " + line),
                    facts={"python.torch.version": t.get("version")})]


def _cudnn(m):
    """(version string or None, where it came from): the machine view's answer."""
    return m.cudnn.value, m.cudnn.source


@check("torch")
def check_cudnn(m, ctx):
    t = _torch(m)
    if not t.get("installed") or not t.get("cuda"):
        return []
    version, where = _cudnn(m)
    deep = m.get("python.deep") or {}
    if version is None:
        if deep.get("ok") and deep.get("cudnn_version") is None or (not deep and ctx.source == "live"):
            row = knowledge.wheel(t.get("version") or "", t.get("variant"))
            fix = (pip_command(m, "pip install --force-reinstall " + row["pip"][len("pip install "):]) if row else
                   "Reinstall PyTorch with pip install --force-reinstall torch, from the index of its variant "
                   "(https://pytorch.org/get-started/locally/).")
            return [error("torch.E004", f"no cuDNN found for PyTorch {t.get('version')} (a CUDA build)", fix=fix,
                          facts={"python.torch.cudnn_wheel": None})]
        return []
    floor = limit("cudnn_min_version")
    if versions.below(version, floor):
        return [warning("torch.W002", f"cuDNN {version} is older than {floor}",
                        fix="Upgrade PyTorch; its wheels bring a current cuDNN:\n"
                            + torch_fix(m, "pip install --upgrade torch (https://pytorch.org/get-started/locally/)"),
                        facts={"cudnn": version, "from": where})]
    return []


@check("torch")
def check_arch(m, ctx):
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
            if not arch.exact:
                built = knowledge.cuda_builds_sass(t["cuda"]) or {}
                msg = (f"{g.name} ({g.sm}) is older than anything CUDA {built.get('cuda')} builds" if old else
                       f"CUDA {built.get('cuda')} (PyTorch {version}) cannot build code for {g.name} ({g.sm})")
                detail = (f"nvcc of CUDA {built.get('cuda')} builds {versions.sm_name(built.get('oldest'))} to "
                          f"{versions.sm_name(built.get('newest'))} only (checks/cuda_arch.toml)")
            else:
                msg = (f"{g.name} ({g.sm}) is older than every arch in PyTorch {version}"
                       if old else f"PyTorch {version} has no kernels for {g.name} ({g.sm})")
            out.append(error("torch.E003", msg, about=g.label, fix=torch_fix(m) + f"\n({detail})", facts=facts))
        elif verdict == "ptx" and arch.exact:
            row = target_wheel(m)
            better = (torch_fix(m) if row and row.get("arch_verdict") == "sass" else
                      f"No other official variant of PyTorch {m.torch.series} has machine code for {g.sm}.")
            out.append(warning("torch.W003", f"{g.name} runs PyTorch {version} only through PTX JIT",
                               about=g.label,
                               fix="Expect a slow first start; the driver must be at least the toolkit's. " + better,
                               facts=facts))
    if not out and m.cuda.failure == "no-kernel-image":
        gpu = next(iter(m.compute_gpus or m.gpus), None)
        out.append(error("torch.E003", f"torch says no kernel image is available for "
                                       f"{(gpu.name if gpu else None) or 'the GPU'}",
                         about=gpu.label if gpu else "",
                         fix=torch_fix(m) + "\n(python -c 'import torch; print(torch.cuda.get_arch_list(), "
                                            "torch.cuda.get_device_capability())' shows what is missing)",
                         facts={"evidence": m.cuda.evidence}))
    return out


@check("torch")
def check_deep_import(m, ctx):
    deep = m.get("python.deep")
    if not deep:
        return []
    errs = deep.get("errors") or {}
    if errs.get("import"):
        return [error("torch.E005", f"import torch fails: {errs['import'][:120]}",
                      fix="Reinstall PyTorch in that venv: pip install --force-reinstall torch ...",
                      facts={"error": errs["import"]})]
    if not deep.get("ok") and errs.get("probe"):
        return [error("torch.E005", f"the torch probe failed: {errs['probe'][:120]}",
                      fix="Run `python -c 'import torch'` in that venv to see the error.",
                      facts={"error": errs["probe"]})]
    out = []
    for dev, res in (deep.get("exercise") or {}).items():
        bad = {k: v for k, v in res.items() if v != "ok"}
        if bad:
            k, v = next(iter(bad.items()))
            out.append(error("torch.E006", f"a tiny {k} failed on {dev}: {v[:100]}", about=dev,
                             fix="See the other findings (architecture, driver); "
                                 "CUDA_LAUNCH_BLOCKING=1 python -c ... shows the failing call.",
                             facts={"device": dev, **bad}))
    return out


# ---------------------------------------------------------------- cuda
@check("cuda")
def check_driver_for_torch(m, ctx):
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
        out.append(warning("cuda.W004", f"driver {driver} is older than CUDA {tcuda} needs, yet CUDA works",
                           fix="This is forward compatibility (the cuda-compat package), supported on data-center "
                               "GPUs only; keep cuda-compat matched to the driver, or upgrade the driver.",
                           facts=f))
        verdict = None
    if verdict == "too-old":
        row = target_wheel(m)
        if row is not None and row["kind"] == "cpu":
            fix = "No CUDA build of PyTorch runs this GPU, whatever the driver: " + torch_fix(m)
        elif row is not None and row["kind"] == "cpu-driver":
            fix = driver_upgrade(m) + "; until then only the CPU build runs:\n" + torch_fix(m)
        else:
            fix = driver_upgrade(m) + ", or install the variant this driver runs:\n" + torch_fix(m)
        if m.cuda.from_torch and m.cuda.failure == "driver-too-old":
            f = dict(f, evidence=m.cuda.evidence)
        out.append(error("cuda.E001", f"driver {driver} is too old for PyTorch's CUDA {tcuda}", fix=fix, facts=f))
    elif verdict == "minor-compat":
        # The alternative is a wheel this driver runs fully, named from the table (never the installed
        # one, nor one of the same CUDA); where none has code for the GPU, only the driver helps.
        row = target_wheel(m)
        other = (f", or install {row['series']}'s {row['variant']} (CUDA {row['cuda']}), which it runs fully:\n"
                 + torch_fix(m)) if row and row.get("driver_verdict") == "full" else \
            f" (no other {m.torch.series} wheel for this GPU runs fully on it)."
        out.append(warning("cuda.W001", f"driver {driver} runs CUDA {tcuda} only through minor-version compatibility",
                           fix="PTX JIT (torch.compile/Triton, +PTX archs) may fail. " + driver_upgrade(m)
                               + " to the toolkit's" + other, facts=f))
    dd = m.debian_driver
    if dd:
        dverdict, _ = knowledge.driver_supports(dd["version"], tcuda)
        # The driver in use runs the wheel (its version says so, or CUDA works under it): what
        # Debian's packaged driver could not run is then no error of this machine.
        current_ok = (m.driver.version and verdict in ("full", "minor-compat")) or (
            m.cuda.available is True and m.cuda.failure is None)
        if dverdict == "too-old" and not current_ok:
            out.append(error("cuda.E002",
                             f"Debian {dd['release']}'s driver {dd['version']} can never run PyTorch's CUDA {tcuda}",
                             fix=torch_fix(m) + "\n(or take a newer driver from NVIDIA's CUDA repository)",
                             facts={"debian_driver": dd["version"], "python.torch.cuda": tcuda}))
    return out


@check("cuda")
def check_cuda_init(m, ctx):
    c = m.cuda
    if c.failure == "no-visible-gpu" and m.torch.cuda and c.evidence.startswith("CUDA_VISIBLE_DEVICES"):
        return [error("cuda.E003", f"CUDA sees no GPU: {c.evidence} hides every one",
                      fix="unset CUDA_VISIBLE_DEVICES   # or name the GPUs to use: export CUDA_VISIBLE_DEVICES=0",
                      facts={"env.CUDA_VISIBLE_DEVICES": m.get("env.variables.CUDA_VISIBLE_DEVICES")})]
    if c.failure != "init-failed" or not m.torch.cuda:
        return []
    text = c.evidence or ""
    suspend = "999" in text or "unknown error" in text.lower()
    if m.driver.platform == "windows" and m.os.wsl == 2:
        fix = ("WSL reaches the Windows driver through /usr/lib/wsl/lib: check `ls /usr/lib/wsl/lib/libcuda.so*` "
               "and that `ldconfig -p | grep libcuda` lists it; then update the driver on Windows and run "
               "`wsl --shutdown` in PowerShell")
    elif m.driver.platform != "linux":
        fix = "Reboot, then reinstall the NVIDIA driver if CUDA still does not start"
    elif m.os.container:
        fix = ("Start the container with the GPUs (docker run --gpus all, NVIDIA Container Toolkit); "
               "on the host: sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm")
    else:
        fix = "sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm"
        if not c.from_torch:
            fix += "\nls -l /dev/nvidia*   # readable by you? (groups video, render)"
    return [error("cuda.E003", "CUDA fails to initialise while the driver answers"
                  + (" (error 999, typical after suspend)" if suspend else ""),
                  fix=fix, facts={"error": text.strip()[:300], "from_torch": c.from_torch})]


_WHEEL_DIR = re.compile(r"/(site|dist)-packages/(nvidia/[^/]+/lib|torch/lib)/")


@check("cuda")
def check_mapped_libraries(m, ctx):
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
    return [error("cuda.E004", f"PyTorch loaded {os.path.basename(foreign[0])} from outside its wheels",
                  about=foreign[0],
                  fix=f"Remove {folder} from LD_LIBRARY_PATH where you train.",
                  facts={"mapped": foreign})]


@check("cuda")
def check_nvcc(m, ctx):
    nv = m.get("cuda.toolkit_nvcc") or {}
    t = _torch(m)
    ver, tcuda = nv.get("version"), t.get("cuda")
    if not ver or not tcuda:
        return []
    if str(ver).split(".")[0] != str(tcuda).split(".")[0]:
        return [warning("cuda.W002", f"nvcc {ver} (toolkit) differs in major version from PyTorch's CUDA {tcuda}",
                        about=nv.get("path") or "nvcc",
                        fix=f"Only building CUDA extensions is affected: install CUDA {tcuda.split('.')[0]}.x's "
                            "toolkit and point CUDA_HOME at it.",
                        facts={"cuda.toolkit_nvcc.version": ver, "python.torch.cuda": tcuda})]
    return []


@check("cuda")
def check_shadowing(m, ctx):
    by_dir: dict = {}
    for s in m.get("cuda.shadowing") or []:
        where = s.get("ld_library_path_copy") or ""
        by_dir.setdefault(os.path.dirname(where), []).append(s)
    out = []
    for folder, items in sorted(by_dir.items()):
        libs = [s.get("name") or s.get("library") for s in items]
        out.append(warning("cuda.W003", f"LD_LIBRARY_PATH folder {folder} shadows the wheels' {', '.join(libs)}",
                           about=folder,
                           fix=f"Remove {folder} from LD_LIBRARY_PATH where you train (the loader takes it before "
                               "the wheels' copies).",
                           facts={"shadowed": [f"{s.get('name')} {s.get('ld_library_path_version')} over "
                                               f"{s.get('wheel_version')}" for s in items]}))
    return out
