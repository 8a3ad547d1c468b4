"""NVIDIA facts: the GPUs on the PCI bus, the kernel driver, and what NVML (or,
without it, nvidia-smi) says about each GPU.

A GPU is seen from sysfs even when no driver works.  Everything a doctor needs
to tell why the driver does not work is here too: the kernel module's version
and flavour, the loaded modules, nouveau/nova_core blacklisting, Secure Boot
and the DKMS signing key, the user-space driver libraries' version.

NVML answers NOT_SUPPORTED for many queries on consumer GPUs (ECC, retired
pages, remapped rows, MIG); such a field is ``None`` with the reason
``"not supported"`` (:data:`NOT_SUPPORTED`), which is a normal answer, not a
failure.  docs/facts.md describes every field.
"""

from __future__ import annotations

import posixpath
import re
import threading
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Union

from debtorch import versions
from debtorch.facts import Context, Section
from debtorch.facts.cuda import cached_libraries
from debtorch.facts.storage import pcie_link
from debtorch.host import COMMAND_NOT_FOUND, CommandResult, Host, Unavailable

if TYPE_CHECKING:   # the XML parser is imported when nvidia-smi answers (parse_smi_xml)
    from xml.etree.ElementTree import Element

NVIDIA_VENDOR = "0x10de"
PROC_VERSION = "/proc/driver/nvidia/version"
PCI_IDS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids")
EFIVARS = "/sys/firmware/efi/efivars"
EFI_GLOBAL = "8be4df61-93ca-11d2-aa0d-e0a3b1c4d8fd"
SHIM_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
SECURE_BOOT_VAR = f"{EFIVARS}/SecureBoot-{EFI_GLOBAL}"
SETUP_MODE_VAR = f"{EFIVARS}/SetupMode-{EFI_GLOBAL}"
# shim's "mokutil --disable-validation" state, visible at run time.
MOK_SB_STATE_VAR = f"{EFIVARS}/MokSBStateRT-{SHIM_GUID}"
DKMS_MOK_PUB = "/var/lib/dkms/mok.pub"  # Debian's DKMS signing key (dkms >= 3.0.10 generates it)
MODPROBE_DIRS = ("/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/lib/modprobe.d", "/usr/lib/modprobe.d")

# Modules whose presence in /proc/modules the doctor reasons about.
WATCHED_MODULES = (
    "nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem",
    "nouveau", "nova_core", "nova_drm", "vfio_pci",
)
# Modules whose blacklisting is reported.
BLACKLIST_TARGETS = ("nouveau", "nova_core", "nova_drm", "nvidia", "nvidia_drm", "nvidia_modeset", "nvidia_uvm")

# sysfs driver directory names that differ from the module's name: nova-core registers its
# PCI driver as "NovaCore" (torvalds/linux drivers/gpu/nova-core/nova_core.rs, module_pci_driver!).
PCI_DRIVER_NAMES = {"NovaCore": "nova_core"}

NOT_SUPPORTED = "not supported"
# Words nvidia-smi prints in place of a value it could not read (its man page's "N/A",
# "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]", "[GPU is lost]"; "Not Found"
# for <cuda_version> where it found no libcuda, as in microsoft/pai's recorded K80 output).
SMI_PLACEHOLDERS = {"n/a", "not supported", "not found", "insufficient permissions", "unknown error", "gpu is lost"}
NO_PERMISSION = "no permission"
NVML_DEADLINE = 20.0
SMI_TIMEOUT = 15.0

# NVML's C ABI values (stable across releases; pynvml defines the same names).
# Older bindings lack some names, so debtorch does not read them from the module.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
# pynvml writes NVML_P2P_CAPS_INDEX_READ = 0, (a tuple, by a stray comma), so
# the plain integers are used.
NVML_P2P_CAPS_INDEX_READ = 0
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_NVLINK_MAX_LINKS = 18  # 18 on Hopper; newer bindings say 36, no GPU has more than 18
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2

# nvmlClocksThrottleReason* == nvmlClocksEventReason* bits, by name.
THROTTLE_BITS = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks_setting"),
)
# nvidia-smi -q -x element suffixes (clocks_throttle_reason_* / clocks_event_reason_*) -> names above.
SMI_THROTTLE_NAMES = {"hw_power_brake_slowdown": "hw_power_brake"}   # where the names differ
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
# nvmlDeviceGetTopologyCommonAncestor levels; nvidia-smi topo -m codes.
TOPOLOGY_LEVELS = {0: "same_board", 10: "single_switch", 20: "multiple_switches", 30: "host_bridge",
                   40: "numa_node", 50: "system"}
TOPO_CODES = {"PIX": "single_switch", "PXB": "multiple_switches", "PHB": "host_bridge", "NODE": "numa_node",
              "SYS": "system", "SOC": "system"}
P2P_STATUS = {0: "ok", 1: "chipset not supported", 2: "GPU not supported", 3: "topology not supported",
              4: "disabled by regkey", 5: "not supported", 6: "unknown"}
P2P_CODES = {"OK": "ok", "CNS": "chipset not supported", "GNS": "GPU not supported", "TNS": "topology not supported",
             "NS": "not supported", "U": "unknown"}


# ---------------------------------------------------------------------------
# Parsers: pure functions of text that never raise


def parse_proc_version(text: str) -> Optional[dict]:
    """/proc/driver/nvidia/version -> {version, flavor, line, gcc}.  Never raises.

    Proprietary: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  525.105.17  <date>``;
    open: ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  515.43.04  Release Build ...``.
    """
    text = str(text)
    m = re.search(r"NVRM version:\s*(NVIDIA UNIX\b.*?Kernel Module\b.*?)\s+(\d+\.\d+(?:\.\d+)*)\b", text)
    if not m:
        return None
    line = text[m.start():].splitlines()[0].strip()
    g = re.search(r"GCC version:\s*(.+)", text)
    return {
        "version": m.group(2),
        "flavor": "open" if "Open Kernel Module" in m.group(1) else "proprietary",
        "line": line,
        "gcc": g.group(1).strip() if g else None,
    }


def parse_proc_modules(text: str) -> dict:
    """/proc/modules -> {name: {size, refcount, used_by, state, taint}}.  Never raises."""
    out = {}
    for line in str(text).splitlines():
        f = line.split()
        if len(f) < 3 or not f[1].isdigit():
            continue
        used_by = [x for x in f[3].split(",") if x and x != "-"] if len(f) > 3 else []
        taint = ""
        if len(f) > 6 and f[6].startswith("(") and f[6].endswith(")"):
            taint = f[6][1:-1]
        out[f[0]] = {
            "size": int(f[1]),
            "refcount": int(f[2]) if f[2].lstrip("-").isdigit() else None,
            "used_by": used_by,
            "state": f[4] if len(f) > 4 else None,
            "taint": taint,
        }
    return out


def _modname(name: str) -> str:
    return str(name).replace("-", "_")


def parse_modprobe_conf(text: str, filename: str = "", targets: tuple[str, ...] = BLACKLIST_TARGETS) -> list[dict]:
    """modprobe.d(5) lines that keep a watched module out.  Never raises.

    ``blacklist nouveau``, ``install nouveau /bin/false`` (or ``/bin/true``),
    ``options nouveau modeset=0`` and ``alias nouveau off`` count.  Module names
    compare with ``-`` and ``_`` alike, as modprobe does.
    """
    found = []
    logical: list[str] = []
    buf = ""
    for raw in str(text).splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    if buf:
        logical.append(buf)
    for line in logical:
        words = line.split()
        if len(words) < 2:
            continue
        cmd, mod = words[0].lower(), _modname(words[1])
        if mod not in targets:
            continue
        how = None
        if cmd == "blacklist":
            how = "blacklist"
        elif cmd == "install" and len(words) > 2:
            prog = words[2]
            if posixpath.basename(prog) in ("false", "true") or "/dev/null" in line:
                how = f"install {prog}"
        elif cmd == "options" and any(w.lower() in ("modeset=0", "modeset=n") for w in words[2:]):
            how = "options modeset=0"
        elif cmd == "alias" and len(words) > 2 and words[2] == "off":
            how = "alias off"
        if how:
            found.append({"module": mod, "how": how, "file": filename, "line": " ".join(words)})
    return found


CMDLINE_PREFIXES = (
    "modprobe.blacklist=", "module_blacklist=", "rd.driver.blacklist=", "rd.driver.pre=", "nouveau.", "nova_core.",
    "nvidia.", "nvidia-drm.", "nvidia_drm.", "nomodeset", "iommu", "intel_iommu=", "amd_iommu=", "pci=",
    "pcie_aspm", "pcie_acs_override=", "vfio-pci.", "vfio_pci.", "initcall_blacklist=",
)


def parse_cmdline(text: str, targets: tuple[str, ...] = BLACKLIST_TARGETS) -> dict:
    """/proc/cmdline -> {params: {relevant name: value}, blacklist: [...]}.  Never raises.

    Only parameters that bear on the GPU driver, IOMMU or PCIe are kept:
    the rest of a command line is none of debtorch's business.
    """
    params: dict = {}
    blacklist = []
    for w in _kernel_words(text):
        name, sep, value = w.partition("=")
        params[name] = value if sep else True
        if name in ("modprobe.blacklist", "module_blacklist", "rd.driver.blacklist"):
            for mod in value.split(","):
                if _modname(mod) in targets:
                    blacklist.append({"module": _modname(mod), "how": name, "file": "/proc/cmdline", "line": w})
        elif _modname(name) in ("nouveau.modeset", "nova_core.modeset") and value in ("0", "n", "N"):
            blacklist.append({"module": _modname(name.split(".")[0]), "how": "modeset=0", "file": "/proc/cmdline",
                              "line": w})
    return {"params": params, "blacklist": blacklist}


def trim_cmdline(text: str) -> str:
    """Keep only the parameters debtorch reports (for recorded hosts)."""
    return " ".join(_kernel_words(text)) + "\n"


def _kernel_words(text: str) -> list[str]:
    """The kernel's parameters of a command line that bear on the driver, IOMMU or PCIe."""
    words = str(text).split()
    if "--" in words:
        words = words[: words.index("--")]  # what follows is for init, not the kernel
    return [w for w in words if w.startswith(CMDLINE_PREFIXES)]


def parse_efivar_bool(data: object) -> Optional[bool]:
    """An efivarfs boolean variable: 4 attribute bytes, then 1 value byte.  Never raises."""
    if isinstance(data, str):
        data = data.encode("latin-1", errors="replace")
    if not isinstance(data, (bytes, bytearray)) or len(data) < 5:
        return None
    return data[4] == 1 if data[4] in (0, 1) else None


def parse_mokutil_test_key(text: str) -> Optional[bool]:
    """``mokutil --test-key KEY`` -> True (enrolled), False (not), None.  Never raises."""
    t = str(text).lower()
    if "is already enrolled" in t or "already in the enrollment request" in t:
        return True
    return False if "is not enrolled" in t else None


def normalise_bus_id(bus_id: object) -> Optional[str]:
    """'00000000:0C:00.0' (NVML) or '0000:0c:00.0' (sysfs) -> '0000:0c:00.0'.  Never raises."""
    m = re.fullmatch(r"\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*", str(bus_id))
    if not m:
        return None
    dom = int(m.group(1) or "0", 16)
    return f"{dom:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def decode_throttle_reasons(mask: Any) -> list[str]:
    """nvmlDeviceGetCurrentClocksEventReasons bits -> names ('gpu_idle', ...).  Never raises."""
    try:
        bits = int(mask)
    except (TypeError, ValueError, OverflowError):
        return []
    names = []
    for bit, name in THROTTLE_BITS:
        if bits & bit:
            names.append(name)
            bits &= ~bit
    if bits > 0:
        names.append(f"other_0x{bits:x}")
    return names


def classify_failure(text: object) -> Optional[str]:
    """What an NVML / nvidia-smi failure message means, as a stable word.  Never raises.

    driver_library_mismatch, driver_not_loaded, library_not_found,
    binding_not_installed, no_permission, gpu_lost, timed_out,
    command_not_found, other; None for no message.
    """
    if not text:
        return None
    t = str(text).lower()
    if "version mismatch" in t:
        return "driver_library_mismatch"
    if "driver not loaded" in t or "couldn't communicate with the nvidia driver" in t or "no devices were found" in t:
        return "driver_not_loaded"
    if "library not found" in t or "couldn't find libnvidia-ml" in t or "libnvidia-ml.so" in t:
        return "library_not_found"
    if "not installed" in t:
        return "binding_not_installed"
    if "insufficient permissions" in t or "permission denied" in t:
        return "no_permission"
    if "gpu is lost" in t or "fallen off the bus" in t:
        return "gpu_lost"
    if "timed out" in t or "did not answer" in t:
        return "timed_out"
    return "command_not_found" if t.strip() == COMMAND_NOT_FOUND else "other"


def parse_pci_ids_nvidia(text: str) -> dict:
    """The NVIDIA (10de) block of pci.ids -> {'0x1b82': 'GP104 [GeForce GTX 1070 Ti]'}.  Never raises."""
    text = str(text)
    m = re.search(r"^10de\s", text, re.M)
    if not m:
        return {}
    out = {}
    for line in text[m.start():].splitlines()[1:]:
        if not line.startswith("\t"):
            if line.strip() and not line.startswith("#"):
                break
            continue
        if line.startswith("\t\t"):
            continue  # subsystem lines
        dev, _, name = line.strip().partition(" ")
        if re.fullmatch(r"[0-9a-fA-F]{4}", dev):
            out[f"0x{dev.lower()}"] = name.strip()
    return out


def trim_pci_ids(text: str) -> str:
    """Keep only the NVIDIA block of pci.ids (for recorded hosts)."""
    m = re.search(r"^10de\s.*?(?=^[0-9a-f]{4}\s|\Z)", text, re.M | re.S)
    return m.group(0) if m else ""


def _num(text: object) -> Optional[float]:
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", str(text or ""))
    return float(m.group(1)) if m else None


def _mib(text: object) -> Optional[int]:
    v = _num(text)
    return int(v * 1024 * 1024) if v is not None else None


def _int_or_none(text: object) -> Optional[int]:
    return int(text) if isinstance(text, str) and text.strip().isdigit() else None


# ---------------------------------------------------------------------------
# The GPU fields: one table that both readers fill, nvidia-smi's XML (parse_smi_xml)
# and NVML (nvml_gpu).  A new field is one row.

_Txt = Callable[["Element", str], Optional[str]]     # the text at a path under an element, or None
_XmlReader = Callable[["Element", _Txt], Any]        # a field read from several elements of a <gpu>


def _enabled(s: str) -> bool:
    return {"enabled": True, "disabled": False, "yes": True, "no": False}[s.lower()]


def _number(s: str) -> float:
    """The number a value starts with ("45 C", "3 %", "70.50 W"); ValueError when there is none."""
    v = _num(s)
    if v is None:
        raise ValueError(s)
    return v


def _int_num(s: str) -> int:
    return int(_number(s))


def _watts(s: str) -> float:
    return round(_number(s), 2)


def _link_width(s: str) -> int:
    """"16x" as 16."""
    return int(s.rstrip("x"))


def _ecc(kind: str) -> _XmlReader:
    def read(g: Element, txt: _Txt) -> Union[int, str, None]:
        node = g.find(f"ecc_errors/{kind}")
        if node is None:
            return None
        if node.find("double_bit") is not None:
            # Before format v10 (drivers up to about 450): single_bit (corrected) and
            # double_bit (uncorrected) blocks, each with a total.
            vals = [txt(node, "double_bit/total") or ""]
        else:
            vals = [(c.text or "").strip() for c in node if "uncorrectable" in c.tag]
        if vals and all(v.isdigit() for v in vals):
            return sum(int(v) for v in vals)
        return "N/A" if "N/A" in vals else " ".join(vals) or None
    return read


def _remapped(tag: str) -> _XmlReader:
    def read(g: Element, txt: _Txt) -> Optional[str]:
        rr = g.find("remapped_rows")
        if rr is not None and len(rr) == 0 and (rr.text or "").strip() == "N/A":
            return "N/A"
        return txt(g, f"remapped_rows/{tag}")
    return read


def _throttle(g: Element, txt: _Txt) -> Union[list[str], str, None]:
    reasons = g.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons = g.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if reasons is None or len(reasons) == 0:
        return None if reasons is None else (reasons.text or "").strip()   # N/A on a vGPU: unknown, not "none active"
    order = [n for _, n in THROTTLE_BITS]

    def in_bit_order(name: str) -> int:
        return order.index(name) if name in order else len(order)

    active = [SMI_THROTTLE_NAMES.get(c.tag.removeprefix(prefix), c.tag.removeprefix(prefix))
              for c in reasons if (c.text or "").strip() == "Active"]
    return sorted(active, key=in_bit_order)


def _power(*tags: str, number_first: bool = False) -> _XmlReader:
    """The first of ``tags`` in the power readings (``number_first``: the first that holds a
    number): power_draw (v10, v11), else average_power_draw, else instant_power_draw, as newer
    drivers leave the average N/A on some GPUs and give only the instant reading."""
    def read(g: Element, txt: _Txt) -> Optional[str]:
        power = g.find("gpu_power_readings")
        power = g.find("power_readings") if power is None else power
        if power is None:
            return None
        have = [t for t in tags if power.find(t) is not None]
        good = [t for t in have if number_first and _num(txt(power, t)) is not None]
        return txt(power, (good or have)[0]) if have else None
    return read


def _mig_devices(g: Element, txt: _Txt) -> Optional[list[dict]]:
    migs = g.find("mig_devices")   # "None" as its text when MIG is off; one <mig_device> per instance
    if migs is None:
        return None
    return [{"index": _int_or_none(txt(d, "index")), "gpu_instance_id": _int_or_none(txt(d, "gpu_instance_id")),
             "compute_instance_id": _int_or_none(txt(d, "compute_instance_id")),
             "memory_total": _mib(txt(d, "fb_memory_usage/total"))} for d in migs.findall("mig_device")]


def _mig_device_count(g: Element, txt: _Txt) -> Optional[int]:
    devices = _mig_devices(g, txt)
    return None if devices is None else len(devices)


def _processes(g: Element, txt: _Txt) -> Optional[list[dict]]:
    procs = g.find("processes")
    if procs is None:
        return None
    # Graphics-only clients (Xorg, type "G") hold memory but no CUDA context.
    return [{"pid": _int_or_none(txt(p, "pid")), "used_memory": _mib(txt(p, "used_memory"))}
            for p in procs.findall("process_info") if "C" in (txt(p, "type") or "").upper()]


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _bus_address(bus_id: Any) -> Optional[str]:
    """NVML's busId as a PCI address ("0000:01:00.0")."""
    return normalise_bus_id(_text(bus_id))


def _device_id_hex(value: Any) -> Optional[str]:
    """nvmlPciInfo_t.pciDeviceId (device id above the vendor id) as nvidia-smi's XML writes
    it, "20B010DE"; None where the binding gives none."""
    return f"{int(value):08X}" if isinstance(value, int) and value > 0 else None


def _cc_text(pair: Any) -> str:
    """(major, minor) as "8.6"."""
    return f"{int(pair[0])}.{int(pair[1])}"


def _is_one(v: Any) -> bool:
    """NVML's enabled (1) as True."""
    return int(v) == 1


def _watts_of_milliwatts(mw: Any) -> float:
    return round(int(mw) / 1000.0, 2)


def _compute_mode(v: Any) -> str:
    return COMPUTE_MODES.get(int(v), f"mode {int(v)}")


def _nvml_processes(ps: Any) -> list[dict]:
    return [{"pid": int(p.pid), "used_memory": None if p.usedGpuMemory is None else int(p.usedGpuMemory)}
            for p in ps]


def _bus_id(g: Element, txt: _Txt) -> Optional[str]:
    return g.get("id") or txt(g, "pci/pci_bus_id")


class GpuField(NamedTuple):
    """A fact of each GPU: ``xml``, its path under nvidia-smi's <gpu> (or a function of the
    element giving its text, or the value itself; None: nvidia-smi -q does not say) and
    ``from_xml`` to read the text; ``nvml``, the NVML call on the GPU's handle (names: the
    first the binding has; None: not asked of NVML) with ``args``, ``part`` the part of its answer
    that holds this fact (a struct's attribute, a tuple's index; None: the whole answer), and
    ``from_nvml`` to read that part."""

    name: str
    xml: Any
    from_xml: Callable[[str], Any] = str
    nvml: Union[str, tuple[str, ...], None] = None
    from_nvml: Callable[[Any], Any] = int
    args: tuple[int, ...] = ()
    part: Union[str, int, None] = None

    def nvml_value(self, answer: Any) -> Any:
        """This fact, read from the answer of its NVML call."""
        if isinstance(self.part, str):
            answer = getattr(answer, self.part, None)     # a binding without the attribute gives nothing
        elif isinstance(self.part, int):
            answer = answer[self.part]
        return self.from_nvml(answer)


_LINK = "pci/pci_gpu_link_info"
GPU_FIELDS = tuple(GpuField(*row) for row in (
    ("name", "product_name", str, "nvmlDeviceGetName", _text),
    ("uuid", "uuid", str, "nvmlDeviceGetUUID", _text),
    ("pci_bus_id", _bus_id, str, "nvmlDeviceGetPciInfo", _text, (), "busId"),
    ("pci_address", _bus_id, normalise_bus_id, "nvmlDeviceGetPciInfo", _bus_address, (), "busId"),
    # "1E8710DE": device, then vendor.  A driver older than the GPU names it "Graphics
    # Device"; the id still says which GPU it is (checks/pci.toml).
    ("pci_device_id", "pci/pci_device_id", str, "nvmlDeviceGetPciInfo", _device_id_hex, (), "pciDeviceId"),
    # WDDM / TCC: nvidia-smi.exe on Windows (its driver, not a Linux one); N/A on Linux.
    ("driver_model", "driver_model/current_dm"),
    # None, Pass-Through (a whole GPU given to a VM), VGPU (a slice of one: a GRID guest driver).
    ("virtualization_mode", "gpu_virtualization_mode/virtualization_mode"),
    # NVIDIA's licensed vGPU software in a guest (a vGPU, or a GPU passed through running the vGPU
    # guest driver): the product ("NVIDIA Virtual Applications") and "Licensed (Expiry: ...)".
    ("vgpu_product", "vgpu_software_licensed_product/licensed_product_name"),
    ("vgpu_license", "vgpu_software_licensed_product/license_status"),
    ("compute_capability", None, str, "nvmlDeviceGetCudaComputeCapability", _cc_text),
    ("memory_total", "fb_memory_usage/total", _mib, "nvmlDeviceGetMemoryInfo", int, (), "total"),
    ("memory_used", "fb_memory_usage/used", _mib, "nvmlDeviceGetMemoryInfo", int, (), "used"),
    ("memory_free", "fb_memory_usage/free", _mib, "nvmlDeviceGetMemoryInfo", int, (), "free"),
    ("pcie_current_gen", f"{_LINK}/pcie_gen/current_link_gen", int, "nvmlDeviceGetCurrPcieLinkGeneration"),
    ("pcie_max_gen", f"{_LINK}/pcie_gen/max_link_gen", int, "nvmlDeviceGetMaxPcieLinkGeneration"),
    ("pcie_current_width", f"{_LINK}/link_widths/current_link_width", _link_width, "nvmlDeviceGetCurrPcieLinkWidth"),
    ("pcie_max_width", f"{_LINK}/link_widths/max_link_width", _link_width, "nvmlDeviceGetMaxPcieLinkWidth"),
    ("persistence_mode", "persistence_mode", _enabled, "nvmlDeviceGetPersistenceMode", _is_one),
    ("ecc_mode_current", "ecc_mode/current_ecc", _enabled, "nvmlDeviceGetEccMode", _is_one, (), 0),
    ("ecc_mode_pending", "ecc_mode/pending_ecc", _enabled, "nvmlDeviceGetEccMode", _is_one, (), 1),
    ("ecc_uncorrected_volatile", _ecc("volatile"), int, "nvmlDeviceGetTotalEccErrors", int,
     (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)),
    ("ecc_uncorrected_aggregate", _ecc("aggregate"), int, "nvmlDeviceGetTotalEccErrors", int,
     (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)),
    ("retired_pages_pending", "retired_pages/pending_retirement", _enabled, "nvmlDeviceGetRetiredPagesPendingStatus",
     _is_one),
    ("retired_pages_single_bit", "retired_pages/multiple_single_bit_retirement/retired_count", int,
     "nvmlDeviceGetRetiredPages", len, (NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,)),
    ("retired_pages_double_bit", "retired_pages/double_bit_retirement/retired_count", int,
     "nvmlDeviceGetRetiredPages", len, (NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,)),
    ("remapped_rows_pending", _remapped("remapped_row_pending"), _enabled, "nvmlDeviceGetRemappedRows", _is_one, (), 2),
    ("remapped_rows_failure", _remapped("remapped_row_failure"), _enabled, "nvmlDeviceGetRemappedRows", _is_one, (), 3),
    ("remapped_rows_correctable", _remapped("remapped_row_corr"), int, "nvmlDeviceGetRemappedRows", int, (), 0),
    ("remapped_rows_uncorrectable", _remapped("remapped_row_unc"), int, "nvmlDeviceGetRemappedRows", int, (), 1),
    ("throttle_reasons", _throttle, str,
     ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"), decode_throttle_reasons),
    ("temperature_c", "temperature/gpu_temp", _int_num, "nvmlDeviceGetTemperature", int, (NVML_TEMPERATURE_GPU,)),
    ("power_draw_w", _power("power_draw", "average_power_draw", "instant_power_draw", number_first=True), _watts,
     "nvmlDeviceGetPowerUsage", _watts_of_milliwatts),
    ("power_limit_w", _power("enforced_power_limit", "current_power_limit", "power_limit"), _watts,
     "nvmlDeviceGetEnforcedPowerLimit", _watts_of_milliwatts),
    ("mig_mode_current", "mig_mode/current_mig", _enabled, "nvmlDeviceGetMigMode", _is_one, (), 0),
    ("mig_mode_pending", "mig_mode/pending_mig", _enabled, "nvmlDeviceGetMigMode", _is_one, (), 1),
    ("mig_devices", _mig_devices),
    ("mig_device_count", _mig_device_count),
    ("compute_mode", "compute_mode", str.lower, "nvmlDeviceGetComputeMode", _compute_mode),
    ("processes", _processes, str, "nvmlDeviceGetComputeRunningProcesses", _nvml_processes),
    ("utilization_gpu", "utilization/gpu_util", _int_num, "nvmlDeviceGetUtilizationRates", int, (), "gpu"),
    ("utilization_memory", "utilization/memory_util", _int_num, "nvmlDeviceGetUtilizationRates", int, (), "memory"),
))


def parse_smi_xml(text: str) -> dict:
    """``nvidia-smi -q -x`` -> {driver_version, cuda_driver_version, gpus: [...]}
    with the same per-GPU fields as the NVML path.  Never raises: bad XML gives
    ``{"error": ...}``.

    Formats before nvsmi_device_v10 (single_bit/double_bit ECC blocks) to v13:
    ``clocks_throttle_reasons`` became ``clocks_event_reasons``, ``power_readings``
    became ``gpu_power_readings`` (whose average may be N/A beside an instant
    reading), ECC counters grew sram_uncorrectable_parity/secded.  "N/A" is
    nvidia-smi's word for NOT_SUPPORTED.  Also read: the PCI device id, the driver
    model (WDDM/TCC on Windows), the virtualization mode (VGPU) and the MIG devices.
    """
    import xml.etree.ElementTree as ET  # only when nvidia-smi answered: keeps `debtorch facts` start-up small

    try:
        root = ET.fromstring(str(text).strip())
    except (ET.ParseError, ValueError) as exc:
        return {"error": f"not nvidia-smi XML ({exc})", "gpus": []}
    except Exception as exc:  # noqa: BLE001 - expat limits (entity expansion) and the like
        return {"error": f"not nvidia-smi XML ({type(exc).__name__})", "gpus": []}
    if root.tag != "nvidia_smi_log":
        return {"error": f"not nvidia-smi XML (root element <{root.tag}>)", "gpus": []}

    def txt(el: Element, path: str) -> Optional[str]:
        node = el.find(path)
        return None if node is None or node.text is None else node.text.strip()

    def version(path: str) -> Optional[str]:
        """A version nvidia-smi printed; None for its placeholders ("Not Found", "N/A")."""
        val = txt(root, path)
        return val if val and re.fullmatch(r"\d+(\.\d+)+", val) else None

    out: dict = {
        "driver_version": version("driver_version"),
        "cuda_driver_version": version("cuda_version"),
        "attached_gpus": _int_or_none(txt(root, "attached_gpus")),
        "gpus": [],
    }
    for index, g in enumerate(root.findall("gpu")):
        out["gpus"].append(_smi_gpu(g, index, txt))
    return out


def _smi_gpu(g: Element, index: int, txt: _Txt) -> dict:
    gpu = Section(index=index)
    for f in GPU_FIELDS:
        val = None
        if isinstance(f.xml, str):
            val = txt(g, f.xml)
        elif f.xml is not None:
            val = f.xml(g, txt)
        if f.xml is None:
            gpu.unknown(f.name, "not in nvidia-smi -q output")
        elif val is not None and not isinstance(val, str):
            gpu[f.name] = val          # read from several elements
        elif not val:
            gpu.unknown(f.name, "not in nvidia-smi output")
        elif val.strip("[]").lower() in SMI_PLACEHOLDERS or val.startswith("[REDACTED"):
            gpu.unknown(f.name, NOT_SUPPORTED if val != "[REDACTED]" else "redacted")
        else:
            try:
                v = f.from_xml(val)
            except (ValueError, TypeError, KeyError):
                v = None
            gpu.set_or_unknown(f.name, v, f"unrecognised value {val!r}")
    return gpu


def parse_topo_matrix(text: str) -> dict:
    """``nvidia-smi topo -m`` (or ``topo -p2p r``) -> {gpus: n, cells: {"0,1": "NV12", ...},
    cpu_affinity: {0: "0-31,64-95"}, numa_affinity: {0: "0"}}.  Never raises."""
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    header = None
    out: dict = {"gpus": 0, "cells": {}, "cpu_affinity": {}, "numa_affinity": {}}

    def split(ln: str) -> list:
        # nvidia-smi separates columns with tabs; copies that went through a
        # terminal or a web page have runs of spaces ("CPU Affinity" keeps its one).
        if "\t" in ln:
            return [c.strip() for c in ln.split("\t")]
        return [""] * (ln[:1] == " ") + [c for c in re.split(r"\s{2,}", ln.strip()) if c]

    for ln in lines:
        cols = split(ln)
        if not cols:
            continue
        if header is None:
            if any(re.fullmatch(r"GPU\d+", c) for c in cols) and not re.fullmatch(r"GPU\d+", cols[0]):
                header = cols[1:] if cols[0] == "" else cols
            continue
        if not cols or not re.fullmatch(r"GPU\d+", cols[0]):
            if cols and cols[0].lower().startswith("legend"):
                break
            continue
        row = int(cols[0][3:])
        out["gpus"] = max(out["gpus"], row + 1)
        for name, val in zip(header, cols[1:]):
            if re.fullmatch(r"GPU\d+", name):
                col = int(name[3:])
                if col != row and val:
                    out["cells"][f"{min(row, col)},{max(row, col)}"] = val
            elif name == "CPU Affinity":
                out["cpu_affinity"][row] = val
            elif name == "NUMA Affinity":
                out["numa_affinity"][row] = val
    return out


def topo_link(code: str) -> dict:
    """A topo -m cell -> {link, nvlink_count, pcie_level}.  Never raises."""
    code = str(code).strip()
    if m := re.fullmatch(r"NV(\d+)", code):
        return {"link": "nvlink", "nvlink_count": int(m.group(1)), "pcie_level": None}
    level = TOPO_CODES.get(code)
    return {"link": "pcie" if level else None, "nvlink_count": 0, "pcie_level": level}


def parse_compute_cap_csv(text: str) -> dict:
    """``nvidia-smi --query-gpu=pci.bus_id,compute_cap --format=csv,noheader`` ->
    {'0000:01:00.0': '8.0'}.  Never raises."""
    out = {}
    for line in str(text).splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and re.fullmatch(r"\d+\.\d+", parts[1]):
            if addr := normalise_bus_id(parts[0]):
                out[addr] = parts[1]
    return out


# ---------------------------------------------------------------------------
# sysfs, procfs, modprobe.d, efivars


def pci_devices(host: Host) -> tuple[Optional[list], Optional[str]]:
    try:
        names = host.listdir("/sys/bus/pci/devices")
    except Unavailable as exc:
        return None, f"/sys/bus/pci/devices: {exc.reason}"
    devices = []
    ids: Optional[dict] = None
    for addr in names:
        base = f"/sys/bus/pci/devices/{addr}"
        if (host.try_read(f"{base}/vendor") or "").strip().lower() != NVIDIA_VENDOR:
            continue
        if ids is None:
            ids = {}
            for path in PCI_IDS:
                if text := host.try_read(path):
                    ids = parse_pci_ids_nvidia(text)
                    break
        cls = (host.try_read(f"{base}/class") or "").strip().lower()
        device_id = (host.try_read(f"{base}/device") or "").strip().lower() or None
        try:
            bound = posixpath.basename(host.readlink(f"{base}/driver"))
            driver: Optional[str] = PCI_DRIVER_NAMES.get(bound, bound)
        except Unavailable:
            driver = None
        numa = (host.try_read(f"{base}/numa_node") or "").strip()
        dev = {
            "address": addr,
            "device_id": device_id,
            "subsystem_vendor_id": (host.try_read(f"{base}/subsystem_vendor") or "").strip().lower() or None,
            "subsystem_device_id": (host.try_read(f"{base}/subsystem_device") or "").strip().lower() or None,
            "class": cls or None,
            "is_gpu": cls.startswith("0x03"),
            "name": ids.get(device_id or "") if ids else None,
            "driver": driver,
            "numa_node": int(numa) if numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
        }
        if dev["is_gpu"]:
            dev.update(pcie_link(host, base))
        devices.append(dev)
    return devices, None


def _blacklists(host: Host) -> list[dict]:
    found: list = []
    seen: set = set()
    for d in MODPROBE_DIRS:
        for name in host.try_listdir(d):
            # A file in an earlier directory overrides one of the same name later (modprobe.d(5)).
            if not name.endswith(".conf") or name in seen:
                continue
            seen.add(name)
            if text := host.try_read(f"{d}/{name}"):
                found += parse_modprobe_conf(text, f"{d}/{name}")
    return found


def _secure_boot(host: Host, sec: Section, container: Optional[str]) -> None:
    uefi = host.is_dir("/sys/firmware/efi")
    if not uefi and container:
        # Docker and Podman mask /sys/firmware: the host's boot is not visible here.
        sec.unknown("uefi", f"/sys/firmware is hidden in this {container} container")
        sec.unknown("secure_boot", "decided by the host, not visible in a container")
        return
    sec["uefi"] = uefi
    if not uefi:
        sec.unknown("secure_boot", "booted without UEFI (legacy BIOS): no Secure Boot")
        return
    try:
        data = host.read_text(SECURE_BOOT_VAR, max_bytes=64)
    except Unavailable as exc:
        sec.unknown("secure_boot", f"SecureBoot efivar: {exc.reason}")
        return
    sec.set_or_unknown("secure_boot", parse_efivar_bool(data), "unrecognised SecureBoot efivar")
    setup = host.try_read(SETUP_MODE_VAR, max_bytes=64)
    sec["secure_boot_setup_mode"] = parse_efivar_bool(setup) if setup else None
    mok = host.try_read(MOK_SB_STATE_VAR, max_bytes=64)
    # MokSBStateRT = 1: shim's validation is disabled ("mokutil --disable-validation").
    sec["shim_validation_disabled"] = parse_efivar_bool(mok) if mok else False


def _module_files(host: Host, kernel: Optional[str]) -> tuple[list, Optional[str]]:
    if not kernel:
        return [], "kernel release unknown"
    files = []
    for sub in ("updates/dkms", "updates", "kernel/drivers/video", "extra", "kernel/nvidia"):
        d = f"/lib/modules/{kernel}/{sub}"
        files += [f"{d}/{n}" for n in host.try_listdir(d) if re.match(r"nvidia[-_a-z]*\.ko(\.[a-z]+)?$", n)]
    return files, None


def _mok(host: Host, sec: Section, want: bool) -> None:
    exists = host.exists(DKMS_MOK_PUB)
    info: dict = {"path": DKMS_MOK_PUB, "exists": exists, "enrolled": None}
    sec["dkms_mok_key"] = info
    if not (want and exists):
        return
    mokutil = next((p for p in ("/usr/bin/mokutil", "/bin/mokutil") if host.exists(p)), None)
    if mokutil is None:
        sec.setdefault("unknown", {})["dkms_mok_key.enrolled"] = "mokutil is not installed"
        return
    res = host.run([mokutil, "--test-key", DKMS_MOK_PUB], timeout=5, key=f"mokutil --test-key {DKMS_MOK_PUB}")
    answer = parse_mokutil_test_key(res.stdout + "\n" + res.stderr) if res.error is None else None
    info["enrolled"] = answer
    if answer is None:
        sec.setdefault("unknown", {})["dkms_mok_key.enrolled"] = res.reason or "unrecognised mokutil output"


def _userspace_driver(host: Host, sec: Section) -> None:
    libs, reason = cached_libraries(host, families=("cuda", "nvidia-ml"))
    if libs is None:
        sec.unknown("userspace_driver_version", reason)
        sec["userspace_libraries"] = []
        return
    keep = [x for x in libs if x["name"] in ("libcuda.so.1", "libnvidia-ml.so.1")]
    sec["userspace_libraries"] = keep
    # NVML's library decides what "user space" means for a mismatch; libcuda next.
    for name in ("libnvidia-ml.so.1", "libcuda.so.1"):
        for x in keep:
            v = x["version"]
            if x["name"] == name and v and v.count(".") >= 1:
                sec["userspace_driver_version"] = v
                sec["userspace_driver_version_from"] = x["real_path"]
                return
    sec.unknown(
        "userspace_driver_version",
        "no libnvidia-ml.so.1 or libcuda.so.1 in the linker cache" if not keep
        else "the driver libraries' file names carry no version",
    )


# ---------------------------------------------------------------------------
# NVML


def nvml_reason(exc: BaseException) -> str:
    value = getattr(exc, "value", None)
    if value == NVML_ERROR_NOT_SUPPORTED:
        return NOT_SUPPORTED
    if value == NVML_ERROR_NO_PERMISSION:
        return NO_PERMISSION
    text = str(exc).strip()
    return text or type(exc).__name__


class _Caller:
    def __init__(self, nv: Any):
        self.nv = nv

    def __call__(self, name: str, *args: Any) -> tuple[Any, Optional[str]]:
        fn = getattr(self.nv, name, None)
        if fn is None:
            return None, f"the NVML binding has no {name}"
        try:
            return fn(*args), None
        except Exception as exc:  # noqa: BLE001 - NVMLError and the binding's own failures
            return None, nvml_reason(exc)

    def first(self, names: tuple[str, ...], *args: Any) -> tuple[Any, Optional[str]]:
        why = None
        for name in names:
            val, why = self(name, *args)
            if why is None or not why.startswith("the NVML binding has no"):
                return val, why
        return None, why


def nvml_gpu(call: _Caller, index: int) -> tuple[Section, Any]:
    g = Section(index=index)
    h, why = call("nvmlDeviceGetHandleByIndex", index)
    if why:
        g.unknown("name", f"no handle: {why}")
        return g, None
    answers: dict = {}      # one call for the fields it answers (memory total, used, free)
    for f in GPU_FIELDS:
        if f.nvml is None:
            continue
        names = (f.nvml,) if isinstance(f.nvml, str) else f.nvml
        if (names, f.args) not in answers:
            answers[names, f.args] = call.first(names, h, *f.args)
        val, why = answers[names, f.args]
        if why is None:
            try:
                val = f.nvml_value(val)
            except Exception:  # noqa: BLE001 - an odd answer from an odd binding
                why = f"unexpected answer from {names[0]}"
        if why is None:
            g.set_or_unknown(f.name, val, f"{names[0]} gave nothing")
        else:
            g.unknown(f.name, why)
    return g, h


def _nvlinks(call: _Caller, h: Any) -> list[dict]:
    """Active NVLinks of one GPU: [{link, remote_type, remote_address}]."""
    links = []
    for link in range(NVML_NVLINK_MAX_LINKS):
        state, why = call("nvmlDeviceGetNvLinkState", h, link)
        if why:
            if link == 0 and why == NOT_SUPPORTED:
                break  # no NVLink on this GPU
            continue
        if int(state) != 1:
            continue
        rtype, _ = call("nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
        pci, _ = call("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
        links.append({"link": link, "remote_type": rtype,
                      "remote_address": normalise_bus_id(_text(pci.busId)) if pci is not None else None})
    return links


def nvml_topology(call: _Caller, gpus: list, handles: list) -> list[dict]:
    links = [_nvlinks(call, h) if h is not None else [] for h in handles]
    pairs: list[dict] = []
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            p = Section(gpus=[i, j])
            hi, hj = handles[i], handles[j]
            if hi is None or hj is None:
                p.unknown("link", "no NVML handle")
                pairs.append(p)
                continue
            addr_j = gpus[j].get("pci_address")
            direct = sum(1 for x in links[i] if x["remote_address"] == addr_j and x["remote_type"] != NVML_NVLINK_DEVICE_TYPE_SWITCH)
            sw_i = sum(1 for x in links[i] if x["remote_type"] == NVML_NVLINK_DEVICE_TYPE_SWITCH)
            sw_j = sum(1 for x in links[j] if x["remote_type"] == NVML_NVLINK_DEVICE_TYPE_SWITCH)
            if direct:
                p.update(link="nvlink", nvlink_count=direct, nvlink_via="direct")
            elif sw_i and sw_j:
                p.update(link="nvlink", nvlink_count=min(sw_i, sw_j), nvlink_via="nvswitch")
            else:
                p.update(link="pcie", nvlink_count=0, nvlink_via=None)
            level, why = call("nvmlDeviceGetTopologyCommonAncestor", hi, hj)
            p.set_or_unknown("pcie_level", TOPOLOGY_LEVELS.get(int(level), f"level {level}") if why is None else None,
                             why or "")
            for field, idx in (("p2p_read", NVML_P2P_CAPS_INDEX_READ), ("p2p_nvlink", NVML_P2P_CAPS_INDEX_NVLINK)):
                st, why = call("nvmlDeviceGetP2PStatus", hi, hj, idx)
                p.set_or_unknown(field, P2P_STATUS.get(int(st), f"status {st}") if why is None else None, why or "")
            pairs.append(dict(p))
    return pairs


def nvml_facts(nv: Any) -> dict:
    """Everything NVML says, as plain data.  ``nv`` is pynvml or the fake."""
    call = _Caller(nv)
    out = Section()
    v, why = call("nvmlSystemGetDriverVersion")
    out.set_or_unknown("driver_version", _text(v) if why is None else None, why or "")
    v, why = call.first(("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"))
    out.set_or_unknown("cuda_driver_version", versions.cuda_from_int(v) if why is None else None,
                       why or "unrecognised answer")
    out["cuda_driver_version_int"] = int(v) if why is None and isinstance(v, int) else None
    v, why = call("nvmlSystemGetNVMLVersion")
    out.set_or_unknown("nvml_version", _text(v) if why is None else None, why or "")
    count, why = call("nvmlDeviceGetCount")
    gpus, handles = [], []
    if why:
        out.unknown("gpus", f"nvmlDeviceGetCount: {why}")
    else:
        for i in range(int(count)):
            g, h = nvml_gpu(call, i)
            gpus.append(g)
            handles.append(h)
        out["gpus"] = [dict(g) for g in gpus]
    out["topology"] = nvml_topology(call, gpus, handles) if len(gpus) > 1 else None
    return dict(out)


def _start_nvml(host: Host) -> tuple[threading.Thread, dict]:
    """Start asking NVML, in a daemon thread: a GPU that fell off the bus can hang
    an NVML call, and debtorch must be able to stop waiting for it."""
    box: dict = {}

    def work() -> None:
        try:
            nv, reason = host.nvml()
            box["result"] = (None, reason) if nv is None else (nvml_facts(nv), None)
        except Exception as exc:  # noqa: BLE001 - never let NVML take the section down
            box["result"] = (None, f"NVML failed: {type(exc).__name__}: {exc}")

    t = threading.Thread(target=work, name="debtorch-nvml", daemon=True)
    t.start()
    return t, box


def _nvml_result(started: tuple[threading.Thread, dict], deadline: float) -> tuple[Optional[dict], Optional[str]]:
    """NVML facts, or (None, reason), waiting at most ``deadline`` seconds more."""
    t, box = started
    t.join(deadline)
    if t.is_alive():
        return None, f"NVML did not answer within {deadline:g} s"
    return box.get("result", (None, "NVML gave no result"))


# ---------------------------------------------------------------------------
# nvidia-smi, when NVML is not there


def smi_facts(host: Host, topology: bool) -> dict:
    calls = [
        {"argv": ["nvidia-smi", "-q", "-x"], "timeout": SMI_TIMEOUT},
        {"argv": ["nvidia-smi", "--query-gpu=pci.bus_id,compute_cap", "--format=csv,noheader"], "timeout": SMI_TIMEOUT},
    ]
    if topology:
        calls.append({"argv": ["nvidia-smi", "topo", "-m"], "timeout": SMI_TIMEOUT})
        calls.append({"argv": ["nvidia-smi", "topo", "-p2p", "r"], "timeout": SMI_TIMEOUT})
    results = host.run_all(calls)
    q = results[0]
    out: dict = {"ran": q.error is None, "returncode": q.returncode}
    if not q.ok:
        text = (q.stdout.strip() or q.stderr.strip() or q.error or "").strip()
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), q.reason)
        out["error"] = first
        out["error_kind"] = classify_failure(first if q.error is None else q.error)
        out["output"] = text[:2000] if q.error is None else None
        return out
    parsed = parse_smi_xml(q.stdout)
    if parsed.get("error"):
        out["error"] = parsed["error"]
        out["error_kind"] = "other"
        return out
    out.update(error=None, error_kind=None, driver_version=parsed["driver_version"],
               cuda_driver_version=parsed["cuda_driver_version"])
    caps = parse_compute_cap_csv(results[1].stdout) if results[1].ok else {}
    gpus = []
    for g in parsed["gpus"]:
        if cc := caps.get(g.get("pci_address") or ""):
            g["compute_capability"] = cc
            g.get("unknown", {}).pop("compute_capability", None)
        elif not results[1].ok:
            g["unknown"]["compute_capability"] = f"nvidia-smi --query-gpu=compute_cap: {results[1].reason}"
        gpus.append(dict(g))
    out["gpus"] = gpus
    out["topology"] = None
    if topology and len(gpus) > 1:
        out["topology"] = _smi_topology(results[2], results[3], len(gpus))
    return out


def _smi_topology(topo_res: CommandResult, p2p_res: CommandResult, n: int) -> list[dict]:
    matrix = parse_topo_matrix(topo_res.stdout) if topo_res.ok else {"cells": {}}
    p2p = parse_topo_matrix(p2p_res.stdout) if p2p_res.ok else {"cells": {}}
    pairs = []
    for i in range(n):
        for j in range(i + 1, n):
            key = f"{i},{j}"
            p = Section(gpus=[i, j])
            cell = matrix["cells"].get(key)
            if cell is None:
                p.unknown("link", f"nvidia-smi topo -m: {topo_res.reason or 'no entry'}")
            else:
                t = topo_link(cell)
                p.update(link=t["link"], nvlink_count=t["nvlink_count"],
                         nvlink_via=None if t["link"] != "nvlink" else "unknown")
                p.set_or_unknown("pcie_level", t["pcie_level"],
                                 "nvidia-smi topo -m names only the NVLink" if t["link"] == "nvlink" else f"code {cell!r}")
            code = p2p["cells"].get(key)
            p.set_or_unknown("p2p_read", P2P_CODES.get(code, code) if code else None,
                             f"nvidia-smi topo -p2p r: {p2p_res.reason or 'no entry'}")
            p.unknown("p2p_nvlink", "not asked of nvidia-smi")
            pairs.append(dict(p))
    return pairs


# ---------------------------------------------------------------------------


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()
    devices, reason = pci_devices(host)
    if devices is None:
        sec.unknown("pci_devices", reason or "unreadable")
    else:
        sec["pci_devices"] = devices
    gpu_count_pci = sum(1 for d in devices or [] if d["is_gpu"])
    sec["pci_gpu_count"] = gpu_count_pci if devices is not None else None

    # Without any sign of an NVIDIA GPU, neither NVML (importing pynvml alone costs
    # tens of ms) nor nvidia-smi is asked.  WSL 2 shows no PCI device but has /dev/dxg.
    ask = devices is None or gpu_count_pci > 0 or host.exists("/dev/nvidiactl") or host.exists("/dev/dxg")
    # NVML runs beside the file reads: nvmlInit can take seconds on a server
    # whose GPUs are not in persistence mode.
    nvml_started = _start_nvml(host) if ask else None

    text = host.try_read(PROC_VERSION)
    if text is None:
        sec.unknown("kernel_module", f"no {PROC_VERSION}: the nvidia kernel module is not loaded")
    else:
        parsed = parse_proc_version(text)
        sec.set_or_unknown("kernel_module", parsed, f"unrecognised {PROC_VERSION}")

    try:
        mods = parse_proc_modules(host.read_text("/proc/modules"))
        sec["modules"] = {k: v for k, v in mods.items() if k in WATCHED_MODULES}
    except Unavailable as exc:
        sec.unknown("modules", f"/proc/modules: {exc.reason}")

    blacklisted = _blacklists(host)
    cmdline = host.try_read("/proc/cmdline")
    if cmdline is not None:
        cl = parse_cmdline(cmdline)
        sec["kernel_cmdline"] = cl["params"]
        blacklisted += cl["blacklist"]
    else:
        sec.unknown("kernel_cmdline", "/proc/cmdline unreadable")
    sec["blacklisted"] = blacklisted

    container = (ctx.section("os") if ctx is not None else {}).get("container")
    _secure_boot(host, sec, container)
    kernel = (host.try_read("/proc/sys/kernel/osrelease") or "").strip() or None
    files, why = _module_files(host, kernel)
    sec["module_files"] = files
    sec["dkms_module"] = any("/updates/dkms/" in f for f in files) if why is None else None
    _mok(host, sec, want=bool(sec.get("secure_boot")) and bool(files))
    _userspace_driver(host, sec)

    if nvml_started is None:      # not asked
        why = "no NVIDIA GPU on the PCI bus (and no /dev/nvidiactl)"
        sec["nvml"] = {"available": False, "error": f"not asked: {why}", "error_kind": "no_gpu"}
        sec.update(source=None, nvidia_smi=None, gpus=[], topology=None)
        sec.unknown("driver_version", why)
        sec.unknown("cuda_driver_version", why)
        return sec
    facts, nvml_error = _nvml_result(nvml_started, NVML_DEADLINE)
    nvml = {"available": facts is not None, "error": nvml_error, "error_kind": classify_failure(nvml_error)}
    if facts is not None:
        for k in ("driver_version", "cuda_driver_version", "cuda_driver_version_int", "nvml_version"):
            nvml[k] = facts.get(k)
    sec["nvml"] = nvml

    if facts is not None:
        sec["source"] = "nvml"
        sec["nvidia_smi"] = None
        sec["driver_version"] = facts.get("driver_version")
        sec["cuda_driver_version"] = facts.get("cuda_driver_version")
        sec.set_or_unknown("gpus", facts.get("gpus"), (facts.get("unknown") or {}).get("gpus", ""))
        sec["topology"] = facts.get("topology")
        return sec

    smi = smi_facts(host, topology=gpu_count_pci > 1 or devices is None)
    sec["nvidia_smi"] = {k: smi.get(k) for k in ("ran", "returncode", "error", "error_kind", "output")}
    if smi.get("gpus") is not None:
        sec["source"] = "nvidia-smi"
        sec["driver_version"] = smi.get("driver_version")
        sec["cuda_driver_version"] = smi.get("cuda_driver_version")
        sec["gpus"] = smi["gpus"]
        sec["topology"] = smi.get("topology")
        return sec
    sec["source"] = None
    why = f"NVML: {nvml_error}; nvidia-smi: {smi.get('error')}"
    sec.unknown("driver_version", why)
    sec.unknown("cuda_driver_version", why)
    sec.unknown("gpus", why)
    sec["topology"] = None
    return sec
