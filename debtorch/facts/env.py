"""Environment facts: an allowlist of variables that change how PyTorch trains.

Only these names (and the prefixes below) are ever read or reported; no other
variable leaves the machine, even in ``--json`` or a recording.
"""

from __future__ import annotations

from debtorch.facts import Section
from debtorch.host import Host

ALLOWED = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH", "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING", "CUDNN_PATH", "LD_LIBRARY_PATH", "LD_PRELOAD",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "GOMP_CPU_AFFINITY",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NVML_BASED_CUDA_CHECK", "TORCH_CUDA_ARCH_LIST",
    "TORCH_HOME", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "VIRTUAL_ENV", "CONDA_PREFIX", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
    "WSL_DISTRO_NAME", "KUBERNETES_SERVICE_HOST",
)
ALLOWED_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCHINDUCTOR_", "DEBTORCH_")


def is_allowed(name: str) -> bool:
    return name in ALLOWED or name.startswith(ALLOWED_PREFIXES)


def allowed_environ(environ, keep_venv: bool = True) -> dict:
    """The allowlisted subset of ``environ``, sorted by name."""
    return {k: environ[k] for k in sorted(environ) if is_allowed(k) and (keep_venv or k != "VIRTUAL_ENV")}


def collect(host: Host, ctx) -> dict:
    sec = Section()
    env = allowed_environ(host.environ)
    sec["variables"] = env
    ld = env.get("LD_LIBRARY_PATH")
    sec["ld_library_path"] = [p for p in ld.split(":") if p] if ld else []
    return sec
