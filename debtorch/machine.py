"""The machine view: one typed reading of a facts document.

Every question about the facts that needs interpretation is answered here, once, and every
command reads the answer from here (docs/architecture.md): the driver and where its version came
from, the GPUs with their compute capability and those CUDA will use, usable CPUs, /dev/shm
against the planned DataLoader workers, the Debian release, the installed PyTorch (its build, its
arch list, whether CUDA works for it, the cuDNN and NCCL it loads), the network and the Slurm job.

``Machine.from_facts(doc)`` never raises on a well-formed document (what
:func:`debtorch.facts.load` or :func:`debtorch.facts.collect` returns): an
answer that cannot be given is None, with a reason where the facts give one.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from debtorch import hostlist, knowledge, versions
from debtorch.facts import get, torch_messages, unknown_reason


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> Optional[str]:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _float(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _glibc(value: Any) -> Optional[str]:
    """A glibc version as "2.36"; None for anything else."""
    text = _str(value)
    return text if text and re.fullmatch(r"\d+\.\d+", text) else None


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


# ---------------------------------------------------------------- the parts


@dataclass(frozen=True)
class Driver:
    """The NVIDIA driver (docs/facts.md, the machine view): ``version`` is the user-space driver, what
    CUDA checks against and what runs after a reboot; ``cuda`` the newest CUDA it runs."""

    version: Optional[str] = None
    source: Optional[str] = None
    kernel_module: Optional[str] = None
    libraries: Optional[str] = None
    cuda: Optional[str] = None
    platform: str = "linux"              # "windows": the Windows driver serves CUDA (WSL 2, a Windows report,
                                         # nvidia-smi's WDDM driver model); "macos"
    unknown: Optional[str] = None        # why the version is unknown

    @property
    def linux(self) -> bool:
        """The driver is a Linux driver that Debian's packages (or NVIDIA's .run) install here."""
        return self.platform == "linux"

    @property
    def mismatch(self) -> bool:
        """The loaded kernel module and the driver libraries differ (upgraded without a reboot)."""
        return bool(self.kernel_module and self.libraries and self.kernel_module != self.libraries)


@dataclass(frozen=True)
class GPU:
    """One NVIDIA GPU: from NVML or nvidia-smi (``row`` is that entry of
    ``nvidia.gpus``), or only seen on the PCI bus (``row`` is None)."""

    index: Optional[int]
    name: Optional[str]
    cc: Optional[str]                    # "8.6"
    cc_from: Optional[str]               # "nvml", "nvidia-smi", "torch", "the name", "the PCI id"
    label: str
    uuid: Optional[str] = None
    pci_address: Optional[str] = None
    device_id: Optional[str] = None
    row: Optional[dict] = field(default=None, compare=False, hash=False)

    @property
    def sm(self) -> Optional[str]:
        return versions.sm_name(self.cc)

    def value(self, name: str, default: Any = None) -> Any:
        """A raw field of the NVML / nvidia-smi entry (``ecc_uncorrected_volatile`` ...)."""
        v = (self.row or {}).get(name)
        return default if v is None else v


@dataclass(frozen=True)
class CPUs:
    usable: int                          # what training may use (assumed when unknown)
    known: bool                          # False: ``usable`` is assumed
    logical: Optional[int]
    note: str                            # how reasons name the count
    unknown: Optional[str] = None        # why usable CPUs are unknown
    model: Optional[str] = None
    bf16: Optional[tuple] = None         # native bf16 features (amx_bf16, avx512_bf16); None: unknown
    quota: Optional[float] = None        # cgroup CPU quota
    affinity: Optional[int] = None
    allocation: Optional[int] = None     # Slurm's SLURM_CPUS_PER_TASK, when it bounds ``usable``


@dataclass(frozen=True)
class Shm:
    """/dev/shm against the DataLoader workers a tuned run would start here (checks/thresholds.toml)."""

    total: Optional[float]               # bytes (memory.shm_total); None: unknown
    free: Optional[float]
    container: Optional[str]             # os.container
    workers: int                         # DataLoader workers of all processes: usable CPUs - 1, bounded
    per_worker: int                      # what one worker's batches take
    docker_default: bool                 # a container's default /dev/shm (Docker's 64 MiB): memory.E002

    @property
    def needed(self) -> int:
        return self.per_worker * self.workers

    @property
    def too_small(self) -> bool:
        """Cannot hold one worker's batches (memory.E001)."""
        return self.total is not None and self.total < self.per_worker

    @property
    def remount_gib(self) -> int:
        """The size memory.E001's fix remounts /dev/shm with: what the workers need, in whole GiB, plus one."""
        return max(1, self.needed // 1024 ** 3 + 1)


@dataclass(frozen=True)
class DebianRelease:
    """A Debian release as checks/debian.toml knows it (``row``), or only by name."""

    release: str                         # "12", "testing", "sid", "15"
    codename: Optional[str] = None
    point_release: Optional[str] = None
    row: Optional[dict] = field(default=None, compare=False, hash=False)
    relation: str = "unknown"            # "supported", "older", "newer" (than the table), "unknown"

    @property
    def title(self) -> str:
        if self.release in ("testing", "sid"):
            return f"Debian {self.release}" + (f" ({self.codename})" if self.codename and self.codename != "sid" else "")
        return f"Debian {self.release}" + (f" ({self.codename})" if self.codename else "")


@dataclass(frozen=True)
class OS:
    platform: str                        # "linux", "windows", "macos", or "unknown"
    id: Optional[str]
    name: Optional[str]                  # PRETTY_NAME, or the id
    is_debian: Optional[bool]            # None: the distribution is unknown
    derivative: bool                     # Ubuntu, Raspberry Pi OS, Mint...
    debian: Optional[DebianRelease]      # this Debian, or the Debian a derivative is based on
    kernel: Optional[str] = None
    arch: Optional[str] = None
    container: Optional[str] = None
    wsl: Optional[int] = None
    glibc: Optional[str] = None          # "2.36": what a wheel's manylinux tag is checked against


@dataclass(frozen=True)
class Apt:
    """APT as it concerns Debian: the components enabled for Debian's own suites."""

    components: Optional[list]           # None: no sources could be read
    suites: list
    backports: bool
    cuda_repo: bool
    unknown: Optional[str] = None


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


@dataclass(frozen=True)
class Interface:
    """A network interface of /sys/class/net."""

    name: str
    up: bool                             # administratively up (IFF_UP) and operational
    operstate: Optional[str] = None
    mtu: Optional[int] = None
    speed_mbps: Optional[int] = None
    link_type: Optional[str] = None      # ether, infiniband, loopback, ...
    virtual: bool = False
    addresses: Optional[tuple] = None    # None: unknown

    @property
    def loopback(self) -> bool:
        return self.link_type == "loopback" or self.name == "lo"


@dataclass(frozen=True)
class IfnameChoice:
    """What ``NCCL_SOCKET_IFNAME`` or ``GLOO_SOCKET_IFNAME`` selects on this machine."""

    variable: str
    value: str
    selected: tuple                      # names of the interfaces it matches
    usable: tuple                        # those up (and with an address, where addresses are known)

    @property
    def ok(self) -> bool:
        return bool(self.usable)

    @property
    def loopback_only(self) -> bool:
        return bool(self.usable) and all(n == "lo" for n in self.usable)


@dataclass(frozen=True)
class IBPort:
    """An InfiniBand or RoCE port of /sys/class/infiniband."""

    device: str
    port: Optional[int]
    state: Optional[str]                 # ACTIVE, INIT, ARMED, DOWN
    phys_state: Optional[str]            # LinkUp, Polling, Disabled, ...
    rate: Optional[str]                  # '200 Gb/sec (4X HDR)'
    rate_gbps: Optional[float]
    link_layer: Optional[str]            # InfiniBand, or Ethernet for RoCE
    netdevs: tuple = ()

    @property
    def label(self) -> str:
        return f"{self.device} port {self.port}"

    @property
    def active(self) -> bool:
        return (self.state or "").upper() == "ACTIVE"


@dataclass(frozen=True)
class Network:
    interfaces: Optional[tuple]          # None: /sys/class/net could not be read
    unknown: Optional[str]
    ib_ports: tuple
    ofed: Optional[str]
    choices: tuple                       # IfnameChoice per variable that is set
    master_addr: Optional[str] = None
    master_addresses: Optional[tuple] = None
    master_error: Optional[str] = None   # why MASTER_ADDR does not resolve

    @property
    def traffic_interfaces(self) -> tuple:
        """The interfaces the collective libraries' sockets use here: those the IFNAME variables
        select, else every usable interface that is neither loopback nor a container bridge
        (NCCL's default skips ``docker*`` and ``lo``)."""
        if self.interfaces is None:
            return ()
        names: list = []
        for c in self.choices:
            names.extend(n for n in c.usable if n not in names)
        if not self.choices:
            names = [i.name for i in self.interfaces if _usable(i) and not i.loopback
                     and not i.name.startswith(("docker", "virbr", "veth", "br-"))]
        return tuple(i for i in self.interfaces if i.name in names)


def _interface(r: dict) -> Interface:
    """A row of network.interfaces, read."""
    flags = _int(r.get("flags"))
    state = (_str(r.get("operstate")) or "").lower()
    admin = True if flags is None else bool(flags & 0x1)     # IFF_UP
    # "unknown" is what lo, tun and some drivers report while up: trust the carrier.
    oper = state == "up" or (state in ("unknown", "") and r.get("carrier") is not False)
    addrs = r.get("addresses")
    return Interface(name=r["name"].strip(), up=admin and oper, operstate=state or None, mtu=_int(r.get("mtu")),
                     speed_mbps=_int(r.get("speed_mbps")), link_type=_str(r.get("link_type")),
                     virtual=bool(r.get("virtual")),
                     addresses=tuple(a for a in addrs if isinstance(a, str)) if isinstance(addrs, list) else None)


def _usable(i: Interface) -> bool:
    return i.up and (i.addresses is None or bool(i.addresses))


def select_interfaces(variable: str, value: str, interfaces) -> tuple:
    """The interface names ``value`` selects, as NCCL reads NCCL_SOCKET_IFNAME (prefixes;
    ``=`` exact names; ``^`` excludes; https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname)
    or as Gloo reads GLOO_SOCKET_IFNAME (exact names, comma-separated;
    https://pytorch.org/docs/stable/distributed.html#choosing-the-network-interface-to-use)."""
    names = [i.name for i in interfaces]
    text = value.strip()
    if variable.startswith("GLOO"):
        wanted = [w.strip() for w in text.split(",") if w.strip()]
        return tuple(n for n in names if n in wanted)
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    words = [w.strip() for w in text.split(",") if w.strip()]

    def match(n: str) -> bool:
        return any(n == w if exact else n.startswith(w) for w in words)

    return tuple(n for n in names if match(n) != exclude)


@dataclass(frozen=True)
class Slurm:
    """The Slurm job and step this process belongs to, from Slurm's variables."""

    job_id: Optional[str] = None
    step_id: Optional[str] = None
    procid: Optional[int] = None
    ntasks: Optional[int] = None
    nnodes: Optional[int] = None
    nodelist: Optional[str] = None       # the step's nodes (else the job's), Slurm's syntax
    node_name: Optional[str] = None
    cpus_per_task: Optional[int] = None
    cpus_on_node: Optional[int] = None
    gpus_on_node: Optional[int] = None
    gpus: Optional[str] = None           # the GPU request (SLURM_GPUS_PER_NODE, SLURM_GPUS ...)
    partition: Optional[str] = None

    @property
    def nodes(self) -> list:
        return hostlist.expand(self.nodelist)


# ---------------------------------------------------------------- the view


class Machine:
    """The one reading of a facts document (see the module docstring)."""

    def __init__(self, facts: dict):
        self.facts = facts if isinstance(facts, dict) else {}

    @classmethod
    def from_facts(cls, facts: dict) -> "Machine":
        return cls(facts)

    # Raw access, for facts that need no interpretation.
    def get(self, dotted: str, default: Any = None) -> Any:
        return get(self.facts, dotted, default)

    def unknown(self, dotted: str) -> Optional[str]:
        return unknown_reason(self.facts, dotted)

    def section(self, dotted: str) -> dict:
        """The table at ``dotted`` ("nvidia", "python.deep"); {} when it is not one."""
        return _dict(self.get(dotted))

    # ---------------------------------------------------------- NVIDIA

    @functools.cached_property
    def driver(self) -> Driver:
        nv = self.section("nvidia")
        nvml, kmod = _dict(nv.get("nvml")), _dict(nv.get("kernel_module"))
        kernel = _str(kmod.get("version"))
        libs = _str(nv.get("userspace_driver_version"))
        version, source = None, None
        for value, where in ((nv.get("driver_version"), nv.get("source") or "NVML"),
                             (nvml.get("driver_version"), nvml.get("source") or "NVML"),
                             (libs, "the driver libraries"), (kernel, "the kernel module")):
            if _str(value):
                version, source = _str(value), str(where)
                break
        cuda = _str(nv.get("cuda_driver_version")) or _str(nvml.get("cuda_driver_version")) or self._torch_said_driver_cuda()
        why = None if version else (unknown_reason(self.facts, "nvidia.driver_version") or "no driver answered")
        return Driver(version=version, source=source, kernel_module=kernel, libraries=libs, cuda=cuda,
                      platform=self._driver_platform(), unknown=why)

    def _torch_said_driver_cuda(self) -> Optional[str]:
        """The CUDA in torch's "driver too old (found version 11040)", from the deep probe."""
        deep = self.section("python.deep")
        for text in [*_dict(deep.get("errors")).values(), *_list(deep.get("warnings"))]:
            if m := torch_messages.DRIVER_TOO_OLD.search(str(text)):
                return versions.cuda_from_int(m.group(1))
        return None

    def _driver_platform(self) -> str:
        """Whose driver serves CUDA here: Windows' under WSL 2, in a Windows report or where
        nvidia-smi names the WDDM driver model (nvidia-smi.exe's XML); macOS's in a macOS report."""
        if self.get("os.wsl") == 2 or self.get("os.platform") == "windows":
            return "windows"
        if self.get("os.platform") == "macos":
            return "macos"
        models = {str(g.get("driver_model")).upper() for g in _list(self.get("nvidia.gpus")) if isinstance(g, dict)}
        return "windows" if "WDDM" in models else "linux"

    @functools.cached_property
    def gpus(self) -> list:
        """Every NVIDIA GPU the facts know: NVML / nvidia-smi entries, else PCI GPUs."""
        out = []
        source = self.get("nvidia.source") or "NVML"
        for i, g in enumerate(_list(self.get("nvidia.gpus"))):
            if not isinstance(g, dict):
                continue
            name = _str(g.get("name"))
            cc = versions.cc_text(g.get("compute_capability"))
            cc_from = ("torch" if str(source).startswith("collect_env") else str(source)) if cc else None
            device_id = _str(g.get("pci_device_id"))
            if cc is None:
                cc, cc_from = _cc_of(name, device_id)
            name = _pci_name(name, device_id)
            idx = _int(g.get("index"))
            out.append(GPU(index=idx, name=name, cc=cc, cc_from=cc_from,
                           label=f"GPU {idx} ({name})" if idx is not None else (name or f"GPU #{i}"),
                           uuid=_str(g.get("uuid")), pci_address=_str(g.get("pci_bus_id")),
                           device_id=knowledge.pci_device_id(device_id), row=g))
        if out:
            return out
        for d in self.pci_gpus:
            name = _str(d.get("name"))
            cc, cc_from = _cc_of(name, _str(d.get("device_id")))
            out.append(GPU(index=None, name=name, cc=cc, cc_from=cc_from,
                           label=f"{d.get('address')} ({name or 'NVIDIA ' + str(d.get('device_id'))})",
                           pci_address=_str(d.get("address")), device_id=_str(d.get("device_id"))))
        return out

    @property
    def listed_gpus(self) -> list:
        """The GPUs NVML or nvidia-smi listed (with their ``row`` of fields)."""
        return [g for g in self.gpus if g.row is not None]

    @functools.cached_property
    def pci_gpus(self) -> list:
        """NVIDIA GPUs on the PCI bus (not audio functions), as the facts list them."""
        return [d for d in _list(self.get("nvidia.pci_devices")) if isinstance(d, dict) and d.get("is_gpu", True)]

    @property
    def gpus_listed(self) -> bool:
        """NVML or nvidia-smi answered with a list of GPUs."""
        return isinstance(self.get("nvidia.gpus"), list) and bool(self.get("nvidia.gpus"))

    @functools.cached_property
    def has_nvidia_gpu(self) -> Optional[bool]:
        """True when any source shows an NVIDIA GPU; False when the PCI bus was read and shows
        none; None when nothing tells."""
        if self.gpus or _int(self.get("nvidia.pci_gpu_count")):
            return True
        return False if isinstance(self.get("nvidia.pci_devices"), list) else None

    @functools.cached_property
    def compute_gpus(self) -> list:
        """The GPUs CUDA will use: those CUDA_VISIBLE_DEVICES leaves (in its order), not Prohibited."""
        gpus = visible_devices(self.get("env.variables.CUDA_VISIBLE_DEVICES"), self.listed_gpus)
        return [g for g in (self.listed_gpus if gpus is None else gpus)
                if str(g.value("compute_mode", "")).lower() != "prohibited"]

    @functools.cached_property
    def gpu_hint(self) -> Optional[str]:
        """Why an NVIDIA GPU is likely where no source lists one (``has_nvidia_gpu`` None):
        a CUDA toolkit installed beside torch.  None when the facts give no hint."""
        if self.has_nvidia_gpu is not None:
            return None
        nvcc = _str(self.get("cuda.toolkit_nvcc.version"))
        return f"a CUDA {nvcc} toolkit (nvcc) is installed" if nvcc else None

    @property
    def vgpu(self) -> bool:
        """A guest of NVIDIA's vGPU software: a virtual GPU (its driver must match the host's vGPU
        manager), or a GPU that runs the licensed vGPU guest driver (:attr:`vgpu_software`)."""
        vgpu_mode = any(str(g.value("virtualization_mode", "")).upper() == "VGPU" for g in self.listed_gpus)
        return vgpu_mode or self.vgpu_software is not None

    @property
    def vgpu_software(self) -> Optional[str]:
        """The product of NVIDIA's licensed vGPU software this guest's driver is ("NVIDIA Virtual
        Applications", with its license status), from nvidia-smi's XML; None where none is named."""
        for g in self.listed_gpus:
            product = _str(g.value("vgpu_product"))
            status = _str(g.value("vgpu_license"))
            if product or (status and status.lower().startswith("licensed")):
                return ", ".join(x for x in (product, status) if x)
        return None

    @staticmethod
    def oldest_cc(gpus: list) -> Optional[tuple]:
        """The oldest compute capability among ``gpus``; None when any is unknown or there are none."""
        ccs = [versions.parse_cc(g.cc) for g in gpus]
        known = [cc for cc in ccs if cc]
        return min(known) if known and len(known) == len(ccs) else None

    @functools.cached_property
    def p2p(self) -> list:
        """Peer-to-peer read status per GPU pair, where reported: [(a, b, status)].

        From ``nvidia.topology`` (NVML, or ``nvidia-smi topo -p2p r``); pairs whose
        status is unknown are left out."""
        pairs = []
        for row in _list(self.get("nvidia.topology")):
            if not isinstance(row, dict):
                continue
            ids, status = row.get("gpus"), row.get("p2p_read")
            if isinstance(ids, list) and len(ids) == 2 and isinstance(status, str) and status.lower() != "unknown":
                pairs.append((ids[0], ids[1], status))
        return pairs

    @property
    def p2p_problems(self) -> list:
        """The GPU pairs whose peer-to-peer status is reported and not OK (NCCL may hang on them)."""
        return [(a, b, st) for a, b, st in self.p2p if st.strip().lower() != "ok"]

    @property
    def gpu_names(self) -> str:
        return ", ".join(sorted({g.name or "GPU" for g in self.compute_gpus})) or "GPU"

    # ---------------------------------------------------------- CPU

    @functools.cached_property
    def cpus(self) -> CPUs:
        usable = _int(self.get("cpu.usable_cpus"))
        logical = _int(self.get("cpu.logical_cpus"))
        feats = self.get("cpu.features")
        alloc, why = self.slurm.cpus_per_task, None
        if alloc and alloc > 0 and (not usable or usable <= 0 or alloc < usable):
            # A task of this job may use SLURM_CPUS_PER_TASK CPUs, whatever the node has: a batch
            # script sees the whole allocation, the tasks srun starts get their share.
            had = f"; cpu.usable_cpus {usable}" if usable and usable > 0 else ""
            count, note = alloc, f"{alloc} usable CPUs (Slurm allocation: SLURM_CPUS_PER_TASK={alloc}{had})"
        elif usable and usable > 0:
            count, note, alloc = usable, f"{usable} usable CPUs (cpu.usable_cpus)", None
        else:
            count, alloc = (logical if logical and logical > 0 else 1), None
            why = self.unknown("cpu.usable_cpus") or "not in the facts"
            note = f"{count} CPUs assumed (cpu.usable_cpus unknown: {why})"
        return CPUs(usable=count, known=why is None, logical=logical, note=note, unknown=why,
                    model=_str(self.get("cpu.model")), allocation=alloc, affinity=_int(self.get("cpu.affinity_cpus")),
                    bf16=tuple(f for f in ("amx_bf16", "avx512_bf16") if feats.get(f)) if isinstance(feats, dict) else None,
                    quota=_float(self.get("cpu.cgroup_quota_cpus")))

    @functools.cached_property
    def shm(self) -> Shm:
        total, container = self.get("memory.shm_total"), self.get("os.container")
        usable = self.cpus.usable if self.cpus.known else 1
        workers = max(1, min(usable - 1, int(knowledge.threshold("shm_planned_workers_max"))))
        default = bool(container) and total is not None and total <= int(knowledge.threshold("docker_default_shm_bytes"))
        return Shm(total=total, free=self.get("memory.shm_free"), container=container, workers=workers,
                   per_worker=int(knowledge.threshold("shm_per_worker_bytes")), docker_default=default)

    # ---------------------------------------------------------- OS

    @functools.cached_property
    def os(self) -> OS:
        o = self.section("os")
        os_id = (_str(o.get("id")) or "").lower() or None
        like = (_str(o.get("id_like")) or "").lower().split()
        dv = _str(o.get("debian_version"))
        platform = _str(o.get("platform")) or ("linux" if os_id or o.get("kernel") else "unknown")
        is_debian = None if os_id is None else os_id == "debian"
        derivative = bool(os_id and not is_debian and ("debian" in like or "ubuntu" in like or dv))
        debian = None
        if is_debian:
            debian = self._debian_release(o, dv)
        elif derivative:
            debian = _debian_base(o, os_id, dv)
        return OS(platform=platform, id=os_id, name=_str(o.get("pretty_name")) or os_id, is_debian=is_debian,
                  derivative=derivative, debian=debian, kernel=_str(o.get("kernel")), arch=_str(o.get("arch")),
                  container=_str(o.get("container")), wsl=_int(o.get("wsl")), glibc=_glibc(o.get("glibc")))

    def _debian_release(self, o: dict, dv: Optional[str]) -> Optional[DebianRelease]:
        """Which Debian this is.  A numbered release says its number (VERSION_ID, else a
        numeric debian_version); testing and sid carry a codename but no VERSION_ID
        (os-release of trixie/sid: VERSION_CODENAME=trixie only), or "trixie/sid" in
        debian_version."""
        codename = (_str(o.get("codename")) or "").lower() or None
        version_id = _str(o.get("version_id"))
        full = _str(o.get("debian_version_full"))   # os-release's own point release (Debian 13+)
        point = next((v for v in (dv, full) if v and versions.numeric(v) is not None), None)
        if version_id and versions.numeric(version_id) is not None:
            return _release(version_id.split(".")[0], codename, point or (version_id if "." in version_id else None))
        if point:
            return _release(point.split(".")[0], codename, point)
        if codename or (dv and ("/sid" in dv or dv == "sid")):
            release = "sid" if codename == "sid" or dv == "sid" else "testing"
            if release == "testing":
                # Testing and sid look alike in os-release; APT's suites tell them apart.
                suites = set(self.get("apt.suites") or [])
                if suites & {"sid", "unstable"} and not suites & {"testing", codename or "?"}:
                    release = "sid"
            if not codename and dv and "/" in dv:
                codename = dv.split("/")[0].lower() or None
            return _release(release, codename, None)
        legacy = _str(o.get("release"))     # facts saved by debtorch 0.x named the release themselves
        return _release(legacy, codename, point) if legacy else None

    @functools.cached_property
    def apt(self) -> Apt:
        a = self.section("apt")
        sources = a.get("sources")
        suites = [s for s in a.get("suites") or [] if isinstance(s, str)]
        legacy = a.get("components")           # facts saved by debtorch 0.x summarised them
        if not isinstance(sources, list) or not sources:
            if isinstance(legacy, list):
                return Apt(components=legacy, suites=suites, backports=bool(a.get("backports")),
                           cuda_repo=bool(a.get("cuda_repo")))
            return Apt(components=None, suites=suites, backports=False, cuda_repo=bool(a.get("cuda_repo")),
                       unknown=self.unknown("apt.sources") or self.unknown("apt.components") or "no APT sources found")
        comps: set = set()
        backports = False
        for e in sources:
            if not isinstance(e, dict) or not e.get("enabled", True) or "deb" not in (e.get("types") or []):
                continue
            for suite in e.get("suites") or []:
                if knowledge.is_debian_suite(suite):
                    comps.update(c for c in e.get("components") or [] if isinstance(c, str))
                    backports = backports or str(suite).endswith("-backports")
        order = ["main", "contrib", "non-free", "non-free-firmware"]
        return Apt(components=[c for c in order if c in comps] + sorted(comps - set(order)), suites=suites,
                   backports=backports, cuda_repo=bool(a.get("cuda_repo")))

    @functools.cached_property
    def debian_driver(self) -> Optional[dict]:
        """Debian's packaged nvidia-driver for this release: {version, release, codename}, or None."""
        if self.os.wsl == 2 or self.os.container or not self.driver.linux:
            return None     # the driver is Windows' (WSL 2) or the container host's, not this Debian's
        deb = self.os.debian if self.os.is_debian else None
        if deb is None or not deb.row or not deb.row.get("nvidia_driver"):
            return None
        return {"version": deb.row["nvidia_driver"], "release": deb.row.get("version") or deb.release,
                "codename": deb.row.get("codename")}

    # ---------------------------------------------------------- PyTorch

    @functools.cached_property
    def torch(self) -> Torch:
        t = self.get("python.torch")
        exe = _str(self.get("python.executable"))
        if not isinstance(t, dict) or t.get("installed") is None:
            return Torch(known=False, executable=exe, unknown=self.unknown("python.torch") or "not in the facts")
        if not t.get("installed"):
            return Torch(known=True, installed=False, executable=exe)
        version = _str(t.get("version"))
        parsed = versions.torch_version(version) if version else None
        cuda, hip = _str(t.get("cuda")), _str(t.get("hip"))
        variant = _str(t.get("variant")) or versions.variant_of(version, cuda, hip)
        # Which build this is: CUDA or ROCm when named, else CPU-only, unless the facts leave it
        # open: a report whose copy of collect_env has no "CUDA used to build PyTorch" line
        # (python.torch.cpu_only unknown), or one under which CUDA is available (so not CPU-only).
        # A build that printed CUDA architectures (cpu_only False) but not its CUDA is not CPU-only either.
        build_known = bool(cuda or hip) or (
            self.get("python.deep.cuda_available") is not True and t.get("cpu_only") is not False
            and not (t.get("cpu_only") is None and self.unknown("python.torch.cpu_only")))
        return Torch(known=True, installed=True, version=version, series=parsed["series"] if parsed else None,
                     cuda=cuda, hip=hip, variant=variant, executable=exe, build_known=build_known)

    @functools.cached_property
    def torch_arch(self) -> Optional[ArchList]:
        """The architectures the installed CUDA build has code for (see :class:`ArchList`);
        None for a CPU or ROCm build, or when nothing tells."""
        t = self.torch
        if not t.installed or t.hip or t.cpu_only:
            return None
        deep = self.section("python.deep")
        if listed := deep.get("arch_list"):
            said = "torch's warning" if deep.get("source") == "collect_env" else "torch.cuda.get_arch_list()"
            return ArchList(listed, said, True)
        if not t.cuda:
            return None
        row = knowledge.wheel(t.version, t.variant) if t.version and versions.is_release(t.version) else None
        if row and row.get("arch_list"):
            return ArchList(row["arch_list"], f"the official {row['series']} {row['variant']} wheel", True)
        built = knowledge.cuda_builds_sass(t.cuda)
        if built and built["sass"]:
            return ArchList(";".join(built["sass"]), f"what nvcc of CUDA {built['cuda']} can build "
                                                     "(checks/cuda_arch.toml)", False)
        return None

    @functools.cached_property
    def driver_runs_torch(self) -> Optional[str]:
        """Whether the driver runs the CUDA torch was built with: "full", "minor-compat",
        "too-old", or None when either is unknown.  From the driver's version, else from
        the newest CUDA it runs (nvidia-smi's header, torch's "found version 11040")."""
        tcuda = self.torch.cuda if self.torch.installed else None
        if not tcuda:
            return None
        platform = "windows" if self.driver.platform == "windows" else "linux"
        if self.driver.version:
            verdict = knowledge.driver_supports(self.driver.version, tcuda, platform)[0]
            return None if verdict == "unknown" else verdict
        return knowledge.driver_cuda_supports(self.driver.cuda, tcuda) if self.driver.cuda else None

    @functools.cached_property
    def cuda(self) -> CudaState:
        """Whether CUDA works (see :class:`CudaState`): torch's own words first (the deep
        probe's errors, warnings and computations, or a report's warnings), then what the
        facts imply for a CUDA build that says CUDA is unavailable."""
        deep = self.section("python.deep")
        available = deep.get("cuda_available") if isinstance(deep.get("cuda_available"), bool) else None
        words = [str(v) for v in _dict(deep.get("errors")).values() if v]
        words += [str(w) for w in _list(deep.get("warnings")) if w]
        for res in _dict(deep.get("exercise")).values():
            words += [str(v) for v in _dict(res).values() if v and v != "ok"]
        for text in words:
            if found := torch_messages.classify(text):
                return CudaState(available, found[0], found[1], True)
        kinds = {self.get("nvidia.nvml.error_kind"), self.get("nvidia.nvidia_smi.error_kind")}
        if available is not False or not self.torch.cuda or self.torch.hip:
            return CudaState(available)
        # A CUDA build says CUDA is unavailable: what the rest of the facts make of it.
        if "driver_not_loaded" in kinds:
            return CudaState(False, "driver-not-loaded", self.get("nvidia.nvml.error") or self.get("nvidia.nvidia_smi.error"))
        if self.driver_runs_torch == "too-old":
            return CudaState(False, "driver-too-old", f"driver {self.driver.version or 'supporting CUDA ' + str(self.driver.cuda)}")
        if self.listed_gpus and not self.compute_gpus:
            # Nothing for CUDA to use: CUDA_VISIBLE_DEVICES hides every GPU, or all are Prohibited.
            hidden = self.get("env.variables.CUDA_VISIBLE_DEVICES")
            return CudaState(False, "no-visible-gpu", f"CUDA_VISIBLE_DEVICES={hidden!r}" if isinstance(hidden, str)
                             else "every GPU's compute mode is Prohibited")
        if self.driver.version or self.listed_gpus:
            return CudaState(False, "init-failed", "torch.cuda.is_available() is False while the driver answers")
        if "not_collected" in kinds and self.gpu_hint:
            # Nothing answered for a driver, yet a CUDA toolkit says this machine is meant for
            # an NVIDIA GPU.  Without such a hint a CUDA build (PyPI's default) may simply run
            # on a machine without one: that cannot be judged.
            return CudaState(False, "no-driver", f"{self.get('nvidia.nvidia_smi.error')}; {self.gpu_hint}")
        return CudaState(False)

    @functools.cached_property
    def wheels_for_arch(self) -> Optional[dict]:
        """checks/torch_wheels.toml's [[machine]] row for this Linux machine's CPU architecture
        ({machine, builds, source}), {} when PyTorch publishes no wheels for it, None when the
        architecture is unknown or the machine is not Linux."""
        arch = self.os.arch
        return None if not arch or self.os.platform != "linux" else knowledge.wheel_machine(arch) or {}

    @property
    def wheel_platform(self) -> Optional[str]:
        """The platform of checks/torch_wheels.toml whose wheels install here ("linux-aarch64"); None
        where PyTorch publishes none.  Windows, macOS and an unknown architecture read the x86_64 rows
        (the same index names)."""
        row = self.wheels_for_arch
        return None if row == {} else f"linux-{row['machine']}" if row else "linux-x86_64"

    @functools.cached_property
    def python_version(self) -> Optional[str]:
        """The target interpreter's CPython release ("3.11"), or None."""
        mm = versions.major_minor(self.get("python.version"))
        return f"{mm[0]}.{mm[1]}" if mm else None

    @functools.cached_property
    def cudnn(self) -> Version:
        """The cuDNN PyTorch loads: what torch said (``--deep``), else the nvidia-cudnn wheel,
        conda's build, or a libcudnn in the interpreter's libraries."""
        if said := versions.cudnn_from_int(self.get("python.deep.cudnn_version")):
            return Version(said, "torch.backends.cudnn.version()")
        t = self.section("python.torch")
        for key, where in (("cudnn_wheel", "the nvidia-cudnn wheel"), ("cudnn_conda", "conda's build string")):
            if _str(t.get(key)):
                return Version(_str(t.get(key)), where)
        for lib in _list(self.get("python.libraries")):
            folder, _, name = str(lib).rpartition("/")
            if name.startswith("libcudnn.so.") and versions.library_version(name):
                return Version(versions.library_version(name), folder)
        return Version()

    @functools.cached_property
    def nccl(self) -> Version:
        """The NCCL PyTorch loads: torch.cuda.nccl.version() (``--deep``), else the nvidia-nccl wheel."""
        v = self.get("python.deep.nccl_version")
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
            v = ".".join(str(x) for x in v)
        if _str(v):
            return Version(_str(v), "torch.cuda.nccl.version()")
        wheel = _str(self.get("python.torch.nccl_wheel"))
        return Version(wheel, "the nvidia-nccl wheel") if wheel else Version()

    # ---------------------------------------------------------- network

    @functools.cached_property
    def network(self) -> Network:
        n = self.section("network")
        rows = n.get("interfaces")
        ifaces = tuple(_interface(r) for r in rows if isinstance(r, dict) and _str(r.get("name"))) \
            if isinstance(rows, list) else None
        ports = [IBPort(device=p["device"], port=_int(p.get("port")), state=_str(p.get("state")),
                        phys_state=_str(p.get("phys_state")), rate=_str(p.get("rate")), rate_gbps=_float(p.get("rate_gbps")),
                        link_layer=_str(p.get("link_layer")), netdevs=tuple(x for x in _list(p.get("netdevs")) if isinstance(x, str)))
                 for p in _list(n.get("infiniband")) if isinstance(p, dict) and _str(p.get("device"))]
        env = self.section("env.variables")
        choices = []
        for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            value = env.get(var)
            if isinstance(value, str) and value.strip() and ifaces is not None:
                picked = select_interfaces(var, value, ifaces)
                usable = tuple(i.name for i in ifaces if i.name in picked and _usable(i))
                choices.append(IfnameChoice(var, value.strip(), picked, usable))
        master = _dict(n.get("master_addr"))
        addrs = master.get("addresses")
        return Network(interfaces=ifaces, unknown=None if ifaces is not None else (self.unknown("network.interfaces") or "not in the facts"),
                       ib_ports=tuple(ports), ofed=_str(n.get("ofed_version")), choices=tuple(choices),
                       master_addr=_str(master.get("name")),
                       master_addresses=tuple(addrs) if isinstance(addrs, list) else None,
                       master_error=_str(master.get("error")))

    # ---------------------------------------------------------- Slurm

    @functools.cached_property
    def slurm(self) -> Slurm:
        env = self.section("env.variables")

        def text(*names: str) -> Optional[str]:
            return next((v for name in names if (v := _str(env.get(name)))), None)

        def num(*names: str) -> Optional[int]:
            found = (re.match(r"\s*(\d+)", str(env.get(name) or "")) for name in names)
            return next((int(m.group(1)) for m in found if m), None)

        on_node = num("SLURM_GPUS_ON_NODE")
        if on_node is None:
            listed = text("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
            on_node = len([x for x in listed.split(",") if x.strip()]) if listed else None
        return Slurm(job_id=text("SLURM_JOB_ID", "SLURM_JOBID"), step_id=text("SLURM_STEP_ID"), procid=num("SLURM_PROCID"),
                     ntasks=num("SLURM_NTASKS", "SLURM_NPROCS"), nnodes=num("SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
                     nodelist=text("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"),
                     node_name=text("SLURMD_NODENAME"), cpus_per_task=num("SLURM_CPUS_PER_TASK"),
                     cpus_on_node=num("SLURM_CPUS_ON_NODE"), gpus_on_node=on_node,
                     gpus=text("SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK", "SLURM_GPUS"),
                     partition=text("SLURM_JOB_PARTITION"))

    # ---------------------------------------------------------- what the answers rest on

    def answers(self) -> dict:
        """Every interpreted answer, as plain data: what the consistency test compares
        between consumers, and what `debtorch facts` and fleet may show."""
        d, c, o, t = self.driver, self.cpus, self.os, self.torch
        return {
            "driver": d.version, "driver_source": d.source, "driver_cuda": d.cuda,
            "gpus": [(g.name, g.cc) for g in self.gpus],
            "compute_gpus": [g.name for g in self.compute_gpus],
            "usable_cpus": c.usable if c.known else None,
            "debian": o.debian.release if o.debian else None,
            "torch": t.version, "torch_cuda": t.cuda, "torch_variant": t.variant,
        }


GENERIC_NAMES = ("graphics device", "nvidia graphics device")


def _pci_name(name: Optional[str], device_id: Optional[str]) -> Optional[str]:
    """The GPU's name, where nvidia-smi says only "Graphics Device" (a driver older than the GPU):
    the product checks/pci.toml names for its PCI device id ("NVIDIA GeForce GTX 1660 Ti"), else the
    name as given."""
    if (name or "").strip().lower() not in GENERIC_NAMES or not device_id:
        return name
    row = knowledge.pci_device(device_id)
    product = re.search(r"\[(.+)\]", row["name"]) if row else None
    if not product:
        return name
    text = product.group(1).strip()
    return text if text.lower().startswith("nvidia") else f"NVIDIA {text}"


def _cc_of(name: Optional[str], device_id: Optional[str]) -> tuple:
    """(compute capability, where it came from) of a GPU known by name or PCI device id:
    checks/gpus.toml by name, else checks/pci.toml by device id (nvidia-smi names a GPU
    newer than its driver "Graphics Device")."""
    cc = knowledge.capability_for_name(name) if name else None
    if cc:
        return cc, "the name"
    cc = knowledge.capability_for_pci_id(device_id) if device_id else None
    return (cc, "the PCI id") if cc else (None, None)


def visible_devices(value: Any, gpus: list) -> Optional[list]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves, in its order; None when unset.

    CUDA stops at the first entry it cannot match (an index out of range or an
    unknown UUID prefix), so do we.
    """
    if not isinstance(value, str):
        return None
    out: list = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            break
        match = None
        if item.isdigit():
            idx = int(item)
            match = next((g for g in gpus if g.index == idx), None)
            if match is None and idx < len(gpus) and all(g.index is None for g in gpus):
                match = gpus[idx]
        else:
            match = next((g for g in gpus if (g.uuid or "").startswith(item)), None)
        if match is None or match in out:
            break
        out.append(match)
    return out


def _release(release: str, codename: Optional[str], point: Optional[str]) -> DebianRelease:
    row = knowledge.debian_release(release)
    if codename is None and row is not None and release not in ("testing", "sid"):
        codename = row.get("codename")
    if codename is None and row is None:
        codename = knowledge.debian_codename_for(release)
    relation = knowledge.debian_support(release)
    if release in ("testing", "sid") and codename and codename != "sid":
        # A testing/sid system named after an old release ("stretch/sid") is that old.
        relation = "older" if knowledge.debian_support(codename) == "older" else relation
    return DebianRelease(release=release, codename=codename, point_release=point, row=row, relation=relation)


def _debian_base(o: dict, os_id: Optional[str], dv: Optional[str]) -> Optional[DebianRelease]:
    """The Debian a derivative is based on: LMDE's DEBIAN_CODENAME; the derivative's own
    codename where it is Debian's (Raspbian: "buster", "8 (jessie)"); its
    /etc/debian_version ("jessie/sid" on Ubuntu 14.04, "7.1" on Raspbian 7); Raspbian's
    VERSION_ID, which is the Debian release it rebuilds.  None when nothing names one
    (Ubuntu's os-release alone does not)."""
    point = dv if dv and versions.numeric(dv) is not None else None
    for name in filter(None, (_str(o.get("debian_codename")), _str(o.get("codename")))):
        if number := knowledge.debian_version_for(name):
            return _release(number, name.lower(), point if point and point.split(".")[0] == number else None)
    if dv:
        base = dv.split("/")[0].strip().lower()
        if versions.numeric(base) is not None:
            return _release(base.split(".")[0], None, base if "." in base else None)
        if number := knowledge.debian_version_for(base):
            return _release(number, base, None)
    version_id = _str(o.get("version_id"))
    if os_id == "raspbian" and version_id and versions.numeric(version_id) is not None:
        return _release(version_id.split(".")[0], None, None)
    return None
