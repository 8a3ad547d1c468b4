"""The installed PyTorch in the machine view: its build (:class:`Torch`), the GPU architectures it has
code for (:class:`ArchList`), whether the driver runs its CUDA and whether CUDA works for it
(:class:`CudaState`), the cuDNN and NCCL it loads (:class:`Version`), and which of PyTorch's wheels
install on this machine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from debtorch import knowledge, versions
from debtorch.facts import get, torch_messages, unknown_reason
from debtorch.machine.nvidia import Driver, GPUs
from debtorch.machine.read import as_dict, as_list, as_str, section
from debtorch.machine.system import OS


@dataclass(frozen=True)
class Torch:
    """The PyTorch of the target interpreter."""

    known: bool                          # False: the facts do not say (probe failed, not in a report)
    installed: Optional[bool] = None
    version: Optional[str] = None
    series: Optional[str] = None         # "2.5"
    cuda: Optional[str] = None
    hip: Optional[str] = None
    variant: Optional[str] = None        # "cu124", "cpu", "rocm6.2"
    executable: Optional[str] = None
    unknown: Optional[str] = None
    build_known: bool = True             # False: neither CUDA, ROCm nor CPU-only is said (a report without the line)

    @property
    def build(self) -> str:
        if self.cuda:
            return f"CUDA {self.cuda}"
        if self.hip:
            return f"ROCm {self.hip}"
        return "CPU only" if self.build_known else "build not known"

    @property
    def cpu_only(self) -> bool:
        """Known to be a CPU-only build: never when the facts do not say which build it is."""
        return bool(self.installed) and not self.cuda and not self.hip and self.build_known

    @property
    def series_tuple(self) -> Optional[tuple]:
        return versions.torch_series_tuple(self.version)


@dataclass(frozen=True)
class ArchList:
    """The GPU architectures the installed PyTorch has code for.  Not ``exact``: only what nvcc of its
    CUDA release could build; a GPU outside it has no kernels, one inside it may still have none."""

    arch: Any                            # a list ("sm_86", ...) or TORCH_CUDA_ARCH_LIST text
    source: str
    exact: bool

    @property
    def shown(self) -> str:
        return self.arch if isinstance(self.arch, str) else " ".join(self.arch)


@dataclass(frozen=True)
class CudaState:
    """Whether CUDA works for the installed PyTorch, as far as the facts tell (docs/facts.md, the
    machine view): ``failure`` and the words it rests on; ``from_torch``: torch's own words."""

    available: Optional[bool]            # torch.cuda.is_available(); None: unknown
    failure: Optional[str] = None
    evidence: Optional[str] = None
    from_torch: bool = False


@dataclass(frozen=True)
class Version:
    """A version and where it was read (``source``); ``value`` None when nothing tells."""

    value: Optional[str] = None
    source: Optional[str] = None



def read_torch(facts: dict) -> Torch:
    """The PyTorch of the target interpreter: installed or not, its version and build; not ``known``
    where the facts do not say (the probe failed, a report without it)."""
    t = get(facts, "python.torch")
    exe = as_str(get(facts, "python.executable"))
    if not isinstance(t, dict) or t.get("installed") is None:
        return Torch(known=False, executable=exe, unknown=unknown_reason(facts, "python.torch") or "not in the facts")
    if not t.get("installed"):
        return Torch(known=True, installed=False, executable=exe)
    version = as_str(t.get("version"))
    parsed = versions.torch_version(version) if version else None
    cuda, hip = as_str(t.get("cuda")), as_str(t.get("hip"))
    variant = as_str(t.get("variant")) or versions.variant_of(version, cuda, hip)
    # Which build this is: CUDA or ROCm when named, else CPU-only, unless the facts leave it
    # open: a report whose copy of collect_env has no "CUDA used to build PyTorch" line
    # (python.torch.cpu_only unknown), or one under which CUDA is available (so not CPU-only).
    # A build that printed CUDA architectures (cpu_only False) but not its CUDA is not CPU-only either.
    cpu_only_unknown = t.get("cpu_only") is None and unknown_reason(facts, "python.torch.cpu_only")
    build_known = bool(cuda or hip) or (get(facts, "python.deep.cuda_available") is not True
                                        and t.get("cpu_only") is not False and not cpu_only_unknown)
    return Torch(known=True, installed=True, version=version, series=parsed["series"] if parsed else None,
                 cuda=cuda, hip=hip, variant=variant, executable=exe, build_known=build_known)


def arch_list(facts: dict, t: Torch) -> Optional[ArchList]:
    """The architectures the installed CUDA build has code for (see :class:`ArchList`): what torch
    said, else the official wheel's list, else what nvcc of its CUDA could build; None for a CPU or
    ROCm build, or when nothing tells."""
    if not t.installed or t.hip or t.cpu_only:
        return None
    deep = section(facts, "python.deep")
    if listed := deep.get("arch_list"):
        said = "torch's warning" if deep.get("source") == "collect_env" else "torch.cuda.get_arch_list()"
        return ArchList(listed, said, True)
    if not t.cuda:
        return None
    row = None
    if t.version and versions.is_release(t.version):
        row = knowledge.wheel(t.version, t.variant)
    if row and row.get("arch_list"):
        return ArchList(row["arch_list"], f"the official {row['series']} {row['variant']} wheel", True)
    built = knowledge.cuda_builds_sass(t.cuda)
    if built and built["sass"]:
        return ArchList(";".join(built["sass"]), f"what nvcc of CUDA {built['cuda']} can build "
                                                 "(checks/cuda_arch.toml)", False)
    return None


def driver_runs(t: Torch, driver: Driver) -> Optional[str]:
    """Whether the driver runs the CUDA torch was built with: "full", "minor-compat",
    "too-old", or None when either is unknown.  From the driver's version, else from
    the newest CUDA it runs (nvidia-smi's header, torch's "found version 11040")."""
    tcuda = t.cuda if t.installed else None
    if not tcuda:
        return None
    platform = "windows" if driver.platform == "windows" else "linux"
    if driver.version:
        verdict = knowledge.driver_supports(driver.version, tcuda, platform)[0]
        return None if verdict == "unknown" else verdict
    if driver.cuda:
        return knowledge.driver_cuda_supports(driver.cuda, tcuda)
    return None


def cuda_state(facts: dict, t: Torch, driver: Driver, gpus: GPUs, runs: Optional[str]) -> CudaState:
    """Whether CUDA works (see :class:`CudaState`): torch's own words first (the deep probe's
    errors, warnings and computations, or a report's warnings), then what the facts imply for a
    CUDA build that says CUDA is unavailable (``runs``: :func:`driver_runs`)."""
    deep = section(facts, "python.deep")
    available = deep.get("cuda_available") if isinstance(deep.get("cuda_available"), bool) else None
    words = [str(v) for v in as_dict(deep.get("errors")).values() if v]
    words += [str(w) for w in as_list(deep.get("warnings")) if w]
    for res in as_dict(deep.get("exercise")).values():
        words += [str(v) for v in as_dict(res).values() if v and v != "ok"]
    for text in words:
        if found := torch_messages.classify(text):
            return CudaState(available, found[0], found[1], True)
    kinds = {get(facts, "nvidia.nvml.error_kind"), get(facts, "nvidia.nvidia_smi.error_kind")}
    if available is not False or not t.cuda or t.hip:
        return CudaState(available)
    # A CUDA build says CUDA is unavailable: what the rest of the facts make of it.
    if "driver_not_loaded" in kinds:
        said = get(facts, "nvidia.nvml.error") or get(facts, "nvidia.nvidia_smi.error")
        return CudaState(False, "driver-not-loaded", said)
    if runs == "too-old":
        return CudaState(False, "driver-too-old", f"driver {driver.version or 'supporting CUDA ' + str(driver.cuda)}")
    if gpus.listed and not gpus.compute:
        # Nothing for CUDA to use: CUDA_VISIBLE_DEVICES hides every GPU, or all are Prohibited.
        hidden = get(facts, "env.variables.CUDA_VISIBLE_DEVICES")
        if isinstance(hidden, str):
            return CudaState(False, "no-visible-gpu", f"CUDA_VISIBLE_DEVICES={hidden!r}")
        return CudaState(False, "no-visible-gpu", "every GPU's compute mode is Prohibited")
    if driver.version or gpus.listed:
        return CudaState(False, "init-failed", "torch.cuda.is_available() is False while the driver answers")
    if "not_collected" in kinds and gpus.hint:
        # Nothing answered for a driver, yet a CUDA toolkit says this machine is meant for
        # an NVIDIA GPU.  Without such a hint a CUDA build (PyPI's default) may simply run
        # on a machine without one: that cannot be judged.
        return CudaState(False, "no-driver", f"{get(facts, 'nvidia.nvidia_smi.error')}; {gpus.hint}")
    return CudaState(False)


def wheels_for_arch(system: OS) -> Optional[dict]:
    """checks/torch_wheels.toml's [[machine]] row for this Linux machine's CPU architecture
    ({machine, builds, source}), {} when PyTorch publishes no wheels for it, None when the
    architecture is unknown or the machine is not Linux."""
    if not system.arch or system.platform != "linux":
        return None
    row = knowledge.wheel_machine(system.arch)
    if row is None:
        return {}
    return row


def wheel_platform(wheels_row: Optional[dict]) -> Optional[str]:
    """The platform of checks/torch_wheels.toml whose wheels install here ("linux-aarch64") given
    :func:`wheels_for_arch`'s row; None where PyTorch publishes none.  Windows, macOS and an unknown
    architecture read the x86_64 rows (the same index names)."""
    if wheels_row == {}:
        return None
    if wheels_row:
        return f"linux-{wheels_row['machine']}"
    return "linux-x86_64"


def python_version(facts: dict) -> Optional[str]:
    """The target interpreter's CPython release ("3.11"), or None."""
    mm = versions.major_minor(get(facts, "python.version"))
    return f"{mm[0]}.{mm[1]}" if mm else None


def cudnn(facts: dict) -> Version:
    """The cuDNN PyTorch loads: what torch said (``--deep``), else the nvidia-cudnn wheel,
    conda's build, or a libcudnn in the interpreter's libraries."""
    if said := versions.cudnn_from_int(get(facts, "python.deep.cudnn_version")):
        return Version(said, "torch.backends.cudnn.version()")
    t = section(facts, "python.torch")
    for key, where in (("cudnn_wheel", "the nvidia-cudnn wheel"), ("cudnn_conda", "conda's build string")):
        if as_str(t.get(key)):
            return Version(as_str(t.get(key)), where)
    for lib in as_list(get(facts, "python.libraries")):
        folder, _, name = str(lib).rpartition("/")
        if name.startswith("libcudnn.so.") and versions.library_version(name):
            return Version(versions.library_version(name), folder)
    return Version()


def nccl(facts: dict) -> Version:
    """The NCCL PyTorch loads: torch.cuda.nccl.version() (``--deep``), else the nvidia-nccl wheel."""
    v: Any = get(facts, "python.deep.nccl_version")
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
        v = ".".join(str(x) for x in v)
    if as_str(v):
        return Version(as_str(v), "torch.cuda.nccl.version()")
    wheel = as_str(get(facts, "python.torch.nccl_wheel"))
    return Version(wheel, "the nvidia-nccl wheel") if wheel else Version()
