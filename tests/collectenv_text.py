"""The text ``python -m torch.utils.collect_env`` would print on a machine, made from its facts document
(issue 34, item 3: the same machine through ``doctor``, ``doctor --facts`` and ``doctor --from-collect-env``).

It writes only what collect_env itself reads (torch's version and build, the OS line, glibc, Python,
the GPUs and driver nvidia-smi names, nvcc, lscpu's lines, the pip list), in the layout of PyTorch 2.x's
script (torch/utils/collect_env.py), and nothing the facts do not say: where a fact is unknown the line
says "Could not collect", as collect_env does.
"""

from __future__ import annotations

from typing import Any, Optional

from debtorch.machine import Machine

COULD_NOT = "Could not collect"


def _get(doc: dict, dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _cuda_available(m: Machine) -> str:
    """What torch.cuda.is_available() says there: the deep probe's answer, else what the machine view
    makes of the driver and the build (a CPU build: False)."""
    said = m.get("python.deep.cuda_available")
    if isinstance(said, bool):
        return str(said)
    if not m.torch.installed or not m.torch.cuda:
        return "False"
    runs = m.driver_runs_torch in ("full", "minor-compat") and bool(m.gpus.compute)
    return str(runs and m.cuda.failure is None)


def collect_env_text(doc: dict) -> str:
    """The collect_env report of the machine ``doc`` describes."""
    m = Machine.from_facts(doc)
    t = m.torch
    arch = m.os.arch or "x86_64"
    glibc = _get(doc, "os.glibc")
    kernel = m.os.kernel or "6.1.0-18-amd64"
    python = _get(doc, "python.version")
    # collect_env asks nvidia-smi: where it failed (a driver/library mismatch), GPUs and driver are
    # "Could not collect".
    answered = not ({m.get("nvidia.nvml.error_kind"), m.get("nvidia.nvidia_smi.error_kind")} - {None, "binding_not_installed"})
    gpus = list(m.gpus.listed) if answered else []
    nvcc = _get(doc, "cuda.toolkit_nvcc.version")
    lines = ["Collecting environment information...",
             f"PyTorch version: {t.version if t.installed and t.version else 'N/A'}",
             f"Is debug build: {'False' if t.installed else 'N/A'}",
             f"CUDA used to build PyTorch: {(t.cuda or 'None') if t.installed else 'N/A'}",
             f"ROCM used to build PyTorch: {t.hip or 'N/A'}",
             "",
             f"OS: {m.os.name or COULD_NOT} ({arch})",
             f"GCC version: {COULD_NOT}",
             f"Clang version: {COULD_NOT}",
             f"CMake version: {COULD_NOT}",
             f"Libc version: {'glibc-' + str(glibc) if glibc else 'N/A'}",
             "",
             f"Python version: {python or COULD_NOT} (64-bit runtime)",
             f"Python platform: Linux-{kernel}-{arch}-with-glibc{glibc or ''}",
             f"Is CUDA available: {_cuda_available(m) if t.installed else 'N/A'}",
             f"CUDA runtime version: {nvcc or COULD_NOT}",
             "CUDA_MODULE_LOADING set to: LAZY" if t.cuda else "CUDA_MODULE_LOADING set to: N/A"]
    if gpus:
        lines.append("GPU models and configuration: ")
        lines += [f"GPU {g.index if g.index is not None else i}: {g.name}" for i, g in enumerate(gpus)]
    else:
        lines.append(f"GPU models and configuration: {COULD_NOT}")
    lines += [f"Nvidia driver version: {(m.driver.version if answered else None) or COULD_NOT}",
              f"cuDNN version: {COULD_NOT}",
              "HIP runtime version: N/A",
              "MIOpen runtime version: N/A",
              "Is XNNPACK available: True",
              "",
              "CPU:",
              f"Architecture:                         {arch}"]
    lines += _cpu_lines(doc)
    lines += ["", "Versions of relevant libraries:"]
    dists = _get(doc, "python.distributions") or {}
    pins = [f"[pip3] {name}=={version}" for name, version in sorted(dists.items())
            if isinstance(version, str) and (name in ("numpy", "torch") or name.startswith("nvidia-"))]
    if t.installed and t.version and not any(p.startswith("[pip3] torch==") for p in pins):
        pins.append(f"[pip3] torch=={t.version.split('+')[0]}")
    lines += pins or ["[pip3] No relevant packages"]
    return "\n".join(lines) + "\n"


def _cpu_lines(doc: dict) -> list:
    out = []
    logical: Optional[int] = _get(doc, "cpu.logical_cpus")
    if isinstance(logical, int):
        out.append(f"CPU(s):                               {logical}")
    model = _get(doc, "cpu.model")
    if model:
        out.append(f"Model name:                           {model}")
    features = _get(doc, "cpu.features") or {}
    flags = " ".join(sorted(name for name, on in features.items() if on is True))
    if flags:
        out.append(f"Flags:                                {flags}")
    return out
