"""The environment allowlist: the variables that change how PyTorch trains, the only ones debtorch
reads, reports or records (facts/env.py, :class:`~debtorch.host.recording.RecordingHost`); no other
variable leaves the machine."""

from __future__ import annotations

from collections.abc import Mapping

ENV_ALLOWED = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH", "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING", "CUDNN_PATH", "LD_LIBRARY_PATH", "LD_PRELOAD",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "GOMP_CPU_AFFINITY",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NVML_BASED_CUDA_CHECK", "TORCH_CUDA_ARCH_LIST",
    "TORCH_HOME", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "VIRTUAL_ENV", "CONDA_PREFIX", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
    "WSL_DISTRO_NAME", "KUBERNETES_SERVICE_HOST",
    # torchrun's rendezvous (debtorch fleet reads it; RANK and the like differ per node by design).
    "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_USE_AGENT_STORE",
    # Slurm's allocation and rendezvous.  Not SLURM_* wholesale: SLURM_JOB_USER, SLURM_JOB_ACCOUNT,
    # SLURM_SUBMIT_DIR and SLURM_JOB_NAME name people, projects and home folders.
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_CPUS_PER_NODE", "SLURM_CPU_BIND", "SLURM_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_MEM_PER_NODE", "SLURM_MEM_PER_CPU",
    "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURMD_NODENAME", "SLURM_JOB_PARTITION",
)
ENV_ALLOWED_PREFIXES = ("NCCL_", "TORCH_", "TORCHINDUCTOR_", "GLOO_", "DEBTORCH_")
FLEET_SECRET = "DEBTORCH_FLEET_SECRET"   # debtorch fleet's shared secret: never read as a fact


def is_allowed(name: str) -> bool:
    """Whether debtorch may read, report or record the variable ``name``."""
    return name != FLEET_SECRET and (name in ENV_ALLOWED or name.startswith(ENV_ALLOWED_PREFIXES))


def allowed_environ(environ: Mapping[str, str], keep_venv: bool = True) -> dict[str, str]:
    """The allowlisted subset of ``environ``, sorted by name (``keep_venv`` False: without VIRTUAL_ENV)."""
    return {k: environ[k] for k in sorted(environ) if is_allowed(k) and (keep_venv or k != "VIRTUAL_ENV")}

