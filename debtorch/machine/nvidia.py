"""The NVIDIA side of the machine view: the driver (:class:`Driver`) and the GPUs (:class:`GPUs`, each a
:class:`GPU` with its compute capability and where it came from)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union, overload

from debtorch import knowledge, versions
from debtorch.facts import get, torch_messages, unknown_reason
from debtorch.machine.read import as_dict, as_int, as_list, as_str, section


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
    ``nvidia.gpus``), or only seen on the PCI bus (``row`` is {})."""

    index: Optional[int]
    name: Optional[str]
    cc: Optional[str]                    # "8.6"
    cc_from: Optional[str]               # "nvml", "nvidia-smi", "torch", "the name", "the PCI id"
    label: str
    uuid: Optional[str] = None
    pci_address: Optional[str] = None
    device_id: Optional[str] = None
    row: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def sm(self) -> Optional[str]:
        return versions.sm_name(self.cc)

    def value(self, name: str, default: Any = None) -> Any:
        """A raw field of the NVML / nvidia-smi entry (``ecc_uncorrected_volatile`` ...)."""
        v = self.row.get(name)
        return default if v is None else v


@dataclass(frozen=True)
class GPUs(Sequence[GPU]):
    """Every NVIDIA GPU the facts know (iterating, indexing and ``len`` read ``all``), and what the
    facts say of them together."""

    all: tuple[GPU, ...] = ()            # NVML / nvidia-smi entries, else the GPUs seen on the PCI bus
    listed: tuple[GPU, ...] = ()         # those NVML or nvidia-smi listed (with their ``row`` of fields)
    compute: tuple[GPU, ...] = ()        # those CUDA will use: left by CUDA_VISIBLE_DEVICES (in its order), not Prohibited
    pci: tuple[dict, ...] = ()           # NVIDIA GPUs on the PCI bus (not audio functions), as the facts list them
    present: Optional[bool] = None       # True: a source shows one; False: the PCI bus was read and shows none
    hint: Optional[str] = None           # why one is likely where no source lists one (``present`` None)
    vgpu_software: Optional[str] = None  # the licensed vGPU software this guest's driver is, with its license status
    p2p: tuple[tuple[Any, Any, str], ...] = ()   # peer-to-peer read status per GPU pair, where reported

    @overload
    def __getitem__(self, i: int) -> GPU: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[GPU, ...]: ...

    def __getitem__(self, i: Union[int, slice]) -> Union[GPU, tuple[GPU, ...]]:
        return self.all[i]

    def __len__(self) -> int:
        return len(self.all)

    @property
    def vgpu(self) -> bool:
        """A guest of NVIDIA's vGPU software: a virtual GPU (its driver must match the host's vGPU
        manager), or a GPU that runs the licensed vGPU guest driver (``vgpu_software``)."""
        vgpu_mode = any(str(g.value("virtualization_mode", "")).upper() == "VGPU" for g in self.listed)
        return vgpu_mode or self.vgpu_software is not None

    @property
    def p2p_problems(self) -> list[tuple[Any, Any, str]]:
        """The GPU pairs whose peer-to-peer status is reported and not OK (NCCL may hang on them)."""
        return [(a, b, st) for a, b, st in self.p2p if st.strip().lower() != "ok"]

    @property
    def names(self) -> str:
        """The names of the GPUs CUDA will use, for a sentence ("GPU" when none is named)."""
        return ", ".join(sorted({g.name or "GPU" for g in self.compute})) or "GPU"


def oldest_cc(gpus: Sequence[GPU]) -> Optional[tuple[int, int]]:
    """The oldest compute capability among ``gpus``; None when any is unknown or there are none."""
    ccs = [versions.parse_cc(g.cc) for g in gpus]
    known = [cc for cc in ccs if cc]
    if known and len(known) == len(ccs):
        return min(known)
    return None


# ---------------------------------------------------------------- the driver


def read_driver(facts: dict) -> Driver:
    """The driver: its version from the first source that says it (nvidia-smi or NVML, the driver
    libraries, the kernel module), the newest CUDA it runs, and whose driver it is."""
    nv = section(facts, "nvidia")
    nvml, kmod = as_dict(nv.get("nvml")), as_dict(nv.get("kernel_module"))
    kernel = as_str(kmod.get("version"))
    libs = as_str(nv.get("userspace_driver_version"))
    version, source = None, None
    for value, where in ((nv.get("driver_version"), nv.get("source") or "NVML"),
                         (nvml.get("driver_version"), nvml.get("source") or "NVML"),
                         (libs, "the driver libraries"), (kernel, "the kernel module")):
        if as_str(value):
            version, source = as_str(value), str(where)
            break
    cuda = as_str(nv.get("cuda_driver_version")) or as_str(nvml.get("cuda_driver_version"))
    if cuda is None:
        cuda = _torch_said_driver_cuda(facts)
    why = None
    if version is None:
        why = unknown_reason(facts, "nvidia.driver_version") or "no driver answered"
    return Driver(version=version, source=source, kernel_module=kernel, libraries=libs, cuda=cuda,
                  platform=_driver_platform(facts), unknown=why)


def _torch_said_driver_cuda(facts: dict) -> Optional[str]:
    """The CUDA in torch's "driver too old (found version 11040)", from the deep probe."""
    deep = section(facts, "python.deep")
    for text in [*as_dict(deep.get("errors")).values(), *as_list(deep.get("warnings"))]:
        if m := torch_messages.DRIVER_TOO_OLD.search(str(text)):
            return versions.cuda_from_int(m.group(1))
    return None


def _driver_platform(facts: dict) -> str:
    """Whose driver serves CUDA here: Windows' under WSL 2, in a Windows report or where
    nvidia-smi names the WDDM driver model (nvidia-smi.exe's XML); macOS's in a macOS report."""
    if get(facts, "os.wsl") == 2 or get(facts, "os.platform") == "windows":
        return "windows"
    if get(facts, "os.platform") == "macos":
        return "macos"
    models = {str(g.get("driver_model")).upper() for g in as_list(get(facts, "nvidia.gpus")) if isinstance(g, dict)}
    return "windows" if "WDDM" in models else "linux"


# ---------------------------------------------------------------- the GPUs


def read_gpus(facts: dict) -> GPUs:
    """Every NVIDIA GPU the facts know: NVML / nvidia-smi entries, else PCI GPUs; which of them CUDA
    will use, and what the facts say of them together."""
    pci = tuple(d for d in as_list(get(facts, "nvidia.pci_devices")) if isinstance(d, dict) and d.get("is_gpu", True))
    listed = _listed_gpus(facts)
    every = listed or tuple(_pci_gpu(d) for d in pci)
    if every or as_int(get(facts, "nvidia.pci_gpu_count")):
        present: Optional[bool] = True
    elif isinstance(get(facts, "nvidia.pci_devices"), list):
        present = False
    else:
        present = None
    hint = None
    nvcc = as_str(get(facts, "cuda.toolkit_nvcc.version"))
    if present is None and nvcc:
        hint = f"a CUDA {nvcc} toolkit (nvcc) is installed"
    visible = visible_devices(get(facts, "env.variables.CUDA_VISIBLE_DEVICES"), list(listed))
    compute = tuple(g for g in (listed if visible is None else visible)
                    if str(g.value("compute_mode", "")).lower() != "prohibited")
    return GPUs(all=every, listed=listed, compute=compute, pci=pci, present=present, hint=hint,
                vgpu_software=_vgpu_software(listed), p2p=_p2p(facts))


def _listed_gpus(facts: dict) -> tuple[GPU, ...]:
    """The GPUs NVML or nvidia-smi listed, each with its entry as ``row``."""
    out = []
    source = get(facts, "nvidia.source") or "NVML"
    for i, g in enumerate(as_list(get(facts, "nvidia.gpus"))):
        if not isinstance(g, dict):
            continue
        name = as_str(g.get("name"))
        cc = versions.cc_text(g.get("compute_capability"))
        device_id = as_str(g.get("pci_device_id"))
        cc_from = None
        if cc is None:
            cc, cc_from = _cc_of(name, device_id)
        elif str(source).startswith("collect_env"):
            cc_from = "torch"
        else:
            cc_from = str(source)
        name = _pci_name(name, device_id)
        idx = as_int(g.get("index"))
        if idx is not None:
            label = f"GPU {idx} ({name})"
        else:
            label = name or f"GPU #{i}"
        out.append(GPU(index=idx, name=name, cc=cc, cc_from=cc_from, label=label, uuid=as_str(g.get("uuid")),
                       pci_address=as_str(g.get("pci_bus_id")), device_id=knowledge.pci_device_id(device_id), row=g))
    return tuple(out)


def _pci_gpu(d: dict) -> GPU:
    """A GPU only seen on the PCI bus."""
    name = as_str(d.get("name"))
    cc, cc_from = _cc_of(name, as_str(d.get("device_id")))
    return GPU(index=None, name=name, cc=cc, cc_from=cc_from,
               label=f"{d.get('address')} ({name or 'NVIDIA ' + str(d.get('device_id'))})",
               pci_address=as_str(d.get("address")), device_id=as_str(d.get("device_id")))


def _vgpu_software(listed: tuple[GPU, ...]) -> Optional[str]:
    """The product of NVIDIA's licensed vGPU software this guest's driver is ("NVIDIA Virtual
    Applications", with its license status), from nvidia-smi's XML; None where none is named."""
    for g in listed:
        product = as_str(g.value("vgpu_product"))
        status = as_str(g.value("vgpu_license"))
        if product or (status and status.lower().startswith("licensed")):
            return ", ".join(x for x in (product, status) if x)
    return None


def _p2p(facts: dict) -> tuple[tuple[Any, Any, str], ...]:
    """Peer-to-peer read status per GPU pair, where reported: (a, b, status), from ``nvidia.topology``
    (NVML, or ``nvidia-smi topo -p2p r``); pairs whose status is unknown are left out."""
    pairs = []
    for row in as_list(get(facts, "nvidia.topology")):
        if not isinstance(row, dict):
            continue
        ids, status = row.get("gpus"), row.get("p2p_read")
        if isinstance(ids, list) and len(ids) == 2 and isinstance(status, str) and status.lower() != "unknown":
            pairs.append((ids[0], ids[1], status))
    return tuple(pairs)


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


def _cc_of(name: Optional[str], device_id: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(compute capability, where it came from) of a GPU known by name or PCI device id:
    checks/gpus.toml by name, else checks/pci.toml by device id (nvidia-smi names a GPU
    newer than its driver "Graphics Device")."""
    cc = knowledge.capability_for_name(name) if name else None
    if cc:
        return cc, "the name"
    cc = knowledge.capability_for_pci_id(device_id) if device_id else None
    if cc:
        return cc, "the PCI id"
    return None, None


def visible_devices(value: Any, gpus: list[GPU]) -> Optional[list[GPU]]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves, in its order; None when unset.

    CUDA stops at the first entry it cannot match (an index out of range or an
    unknown UUID prefix), so do we.
    """
    if not isinstance(value, str):
        return None
    out: list[GPU] = []
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
