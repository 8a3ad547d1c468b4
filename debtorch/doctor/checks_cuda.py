"""Checks: CUDA (driver and libraries against PyTorch's CUDA) and the installed PyTorch."""

from __future__ import annotations

import os
import re

from debtorch import knowledge, versions
from debtorch.doctor.findings import error, warning
from debtorch.doctor.fixes import pip_line
from debtorch.doctor.limits import limit
from debtorch.doctor.registry import check
from debtorch.host import NOT_RECORDED


def _torch(m) -> dict:
    return m.get("python.torch") or {}


def _variant_fix(m, version, why: str = "") -> str:
    row = pip_line(m, version)
    if row is None:
        return ("Install the PyTorch variant that matches your driver and GPU "
                "(https://pytorch.org/get-started/locally/).")
    note = ""
    if row.get("hypothetical_driver"):
        note = f"  # for Debian's packaged driver {row['for_driver']}"
    elif row.get("newer_release"):
        note = f"  # no {version.split('+')[0] if version else 'such'} variant fits; release {row['series']} does"
    elif row.get("nearest"):
        note = f"  # release {row['series']}: the nearest one debtorch knows"
    return f"{row['pip']}{note}" + (f"\n{why}" if why else "")


# ---------------------------------------------------------------- torch
@check("torch")
def check_torch_installed(m, ctx):
    t = _torch(m)
    if not t or t.get("installed") is not False:
        return []
    exe = m.get("python.executable")
    fix = _variant_fix(m, None)
    return [error("torch.E001", "PyTorch is not installed in the target interpreter", about=exe or "",
                  fix=(f"{exe} -m " if exe and fix.startswith("pip ") else "") + fix,
                  facts={"python.executable": exe})]


@check("torch")
def check_cpu_only_on_gpu(m, ctx):
    t = _torch(m)
    if not t.get("installed") or not m.has_nvidia_gpu:
        return []
    if t.get("cuda"):
        return []
    kind = f"a ROCm build (HIP {t['hip']})" if t.get("hip") else "a CPU-only build"
    return [error("torch.E002", f"PyTorch {t.get('version')} is {kind} on a machine with an NVIDIA GPU",
                  fix="pip uninstall torch\n" + _variant_fix(m, t.get("version")),
                  facts={"python.torch.version": t.get("version"), "python.torch.cuda": None,
                         "nvidia.gpus": [g.label for g in m.gpus]})]


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
                        + (knowledge.wheel(t.get("version") or "", "cpu") or {}).get(
                            "pip", "pip install torch --index-url https://download.pytorch.org/whl/cpu"),
                    facts={"python.torch.cuda": t.get("cuda"), "nvidia.pci_devices": []})]


@check("torch")
def check_torch_age(m, ctx):
    t = _torch(m)
    floor = limit("torch_min_version")
    if not t.get("installed") or not versions.below(t.get("version"), floor):
        return []
    return [warning("torch.W001", f"PyTorch {t.get('version')} is older than {floor}",
                    fix="pip install --upgrade torch  # with --index-url for your variant: "
                        + (_variant_fix(m, None).splitlines()[0]),
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
            fix = _variant_fix(m, t.get("version"))
            fix = ("pip install --force-reinstall " + fix[len("pip install "):] if fix.startswith("pip install ")
                   else "Reinstall PyTorch with pip install --force-reinstall torch. " + fix)
            return [error("torch.E004", f"no cuDNN found for PyTorch {t.get('version')} (a CUDA build)", fix=fix,
                          facts={"python.torch.cudnn_wheel": None})]
        return []
    floor = limit("cudnn_min_version")
    if versions.below(version, floor):
        return [warning("torch.W002", f"cuDNN {version} is older than {floor}",
                        fix="Upgrade PyTorch; its wheels bring a current cuDNN:\n" + _variant_fix(m, None),
                        facts={"cudnn": version, "from": where})]
    return []


def _arch_list(m):
    deep = m.get("python.deep") or {}
    if deep.get("arch_list"):
        return deep["arch_list"], "torch.cuda.get_arch_list()"
    t = _torch(m)
    row = knowledge.wheel(t.get("version") or "", t.get("variant")) if t.get("version") else None
    if row and row.get("arch_list"):
        return row["arch_list"], f"the official {row['series']} {row['variant']} wheel"
    return None, None


@check("torch")
def check_arch(m, ctx):
    t = _torch(m)
    if not t.get("installed") or not t.get("cuda"):
        return []
    arch, where = _arch_list(m)
    if not arch:
        return []
    out = []
    for g in m.gpus:
        if not g.cc:
            continue
        verdict, detail = knowledge.arch_support(g.cc, arch)
        shown = arch if isinstance(arch, str) else " ".join(arch)
        if verdict == "none":
            old = knowledge.older_than_all(g.cc, arch)
            msg = (f"{g.name} ({g.sm}) is older than every arch in PyTorch {t.get('version')}"
                   if old else f"PyTorch {t.get('version')} has no kernels for {g.name} ({g.sm})")
            out.append(error("torch.E003", msg, about=g.label,
                             fix=_variant_fix(m, t.get("version")) if not old else
                             "Install an older PyTorch release that still builds for this GPU, or use a newer GPU: "
                             + detail,
                             facts={"compute_capability": g.cc, "arch_list": shown, "arch_list_from": where}))
        elif verdict == "ptx":
            out.append(warning("torch.W003", f"{g.name} runs PyTorch {t.get('version')} only through PTX JIT",
                               about=g.label,
                               fix="Expect a slow first start; the driver must be at least the toolkit's. "
                                   + _variant_fix(m, t.get("version")).splitlines()[0],
                               facts={"compute_capability": g.cc, "arch_list": shown}))
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
    if not deep.get("ok") and errs.get("probe") and NOT_RECORDED not in errs["probe"]:
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
    driver = m.driver.version
    dcuda = m.driver.cuda
    verdict = None
    if driver:
        verdict, detail = knowledge.driver_supports(driver, tcuda)
        f = {"driver": driver, "python.torch.cuda": tcuda}
    elif dcuda:
        # Only the driver's highest CUDA is known (a report; torch's "found version 11040").
        verdict = knowledge.driver_cuda_supports(dcuda, tcuda)
        driver = f"supporting CUDA {dcuda}"
        f = {"nvidia.cuda_driver_version": dcuda, "python.torch.cuda": tcuda}
    if verdict == "too-old" and m.get("python.deep.cuda_available") is True:
        # CUDA initialises although the driver is too old: NVIDIA's forward-compatibility
        # package (cuda-compat), which works on data-center GPUs only.
        out.append(warning("cuda.W004", f"driver {driver} is older than CUDA {tcuda} needs, yet CUDA works",
                           fix="This is forward compatibility (the cuda-compat package), supported on data-center "
                               "GPUs only; keep cuda-compat matched to the driver, or upgrade the driver.",
                           facts=f))
        verdict = None
    if verdict:
        if verdict == "too-old":
            out.append(error("cuda.E001", f"driver {driver} is too old for PyTorch's CUDA {tcuda}",
                             fix="Upgrade the NVIDIA driver, or install the variant this driver runs:\n"
                                 + _variant_fix(m, t.get("version")),
                             facts=f))
        elif verdict == "minor-compat":
            out.append(warning("cuda.W001", f"driver {driver} runs CUDA {tcuda} only through minor-version compatibility",
                               fix="PTX JIT (torch.compile/Triton, +PTX archs) may fail. Upgrade the driver to the "
                                   "toolkit's, or install a variant built for an older CUDA:\n"
                                   + _variant_fix(m, t.get("version")),
                               facts=f))
    dd = m.debian_driver
    if dd:
        verdict, _ = knowledge.driver_supports(dd["version"], tcuda)
        current_ok = driver and knowledge.driver_supports(driver, tcuda)[0] in ("full", "minor-compat")
        if verdict == "too-old" and not current_ok:
            out.append(error("cuda.E002",
                             f"Debian {dd['release']}'s driver {dd['version']} can never run PyTorch's CUDA {tcuda}",
                             fix=_variant_fix(m, t.get("version"))
                             + "\n(or take a newer driver from NVIDIA's CUDA repository)",
                             facts={"debian_driver": dd["version"], "python.torch.cuda": tcuda}))
    return out


@check("cuda")
def check_cuda_init(m, ctx):
    deep = m.get("python.deep") or {}
    if not deep.get("ok") or not deep.get("cuda"):
        return []
    errs = deep.get("errors") or {}
    text = " ".join(str(errs.get(k, "")) for k in ("cuda_init", "cuda_available", "device_count"))
    text += " ".join(w for w in deep.get("warnings") or [] if "CUDA" in w)
    failed = deep.get("cuda_init") == "failed" or (deep.get("cuda_available") is False and "error" in text.lower())
    nvml_ok = bool(m.get("nvidia.nvml.available")) or bool(m.get("nvidia.gpus"))
    if not failed or not nvml_ok:
        return []
    suspend = "999" in text or "unknown error" in text.lower()
    return [error("cuda.E003", "CUDA fails to initialise while the driver answers"
                  + (" (error 999, typical after suspend)" if suspend else ""),
                  fix="sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm",
                  facts={"error": text.strip()[:300]})]


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
