"""Read the text of ``python -m torch.utils.collect_env`` as people paste it into bug reports,
and turn it into a debtorch facts document (docs/collect-env.md: which line goes where, and
collect_env's traps: its "CUDA runtime version" is the system's nvcc, pytorch/pytorch#21399, and
its "cuDNN version" the libcudnn files ldconfig knows, pytorch/pytorch#78489).

``parse(text)`` returns the document ``debtorch facts --json`` writes, filled as far as the text
tells; every other value is ``None`` with the reason "not in the collect_env text", and a top-level
``collect_env`` entry says which layout the text had and what it lacked.  ``parse_file(path)``
reads a file (``-`` is stdin).  Both raise only :class:`CollectEnvError`, whose message is one
line: ``"FILE: what is wrong"``.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional, TypedDict

from debtorch import inputs, versions
from debtorch.__about__ import __version__
from debtorch.facts import Section, torch_messages
from debtorch.facts.cpu import FEATURES, arm_simd
from debtorch.facts.pyenv import TORCH_WHEELS, wheel_version
from debtorch.host import is_allowed

NOT_IN_TEXT = "not in the collect_env text"
SCHEMA_VERSION = 1
MAX_BYTES = 8 * 1024 * 1024
SECTIONS = ("os", "apt", "cpu", "memory", "storage", "nvidia", "cuda", "python", "env", "network")


class CollectEnvError(Exception):
    """The input cannot be read as a collect_env report; the message is one line."""


# --- labels -------------------------------------------------------------------------------

# Label as collect_env prints it (lower case) -> our key.  Every layout since
# PyTorch 1.0, and vLLM's sectioned copy of the script ("Label   : value").
LABELS = {
    "pytorch version": "torch_version",
    "is debug build": "debug",
    "cuda used to build pytorch": "torch_cuda",
    "rocm used to build pytorch": "torch_rocm",
    "xpu used to build pytorch": "torch_xpu",
    "os": "os",
    "gcc version": "gcc",
    "clang version": "clang",
    "cmake version": "cmake",
    "libc version": "libc",
    "python version": "python",
    "python platform": "python_platform",
    "is cuda available": "cuda_available",
    "cuda runtime version": "nvcc",
    "cuda_module_loading set to": "cuda_module_loading",
    "gpu models and configuration": "gpus",
    "nvidia driver version": "driver",
    "cudnn version": "cudnn",
    "is xpu available": "xpu_available",
    "hip runtime version": "hip_runtime",
    "miopen runtime version": "miopen",
    "is xnnpack available": "xnnpack",
    "caching allocator config": "alloc_conf",
    "versions of relevant libraries": "libs",
    "version of relevant libraries": "libs",
    "cpu": "cpu",
    # vLLM's collect_env.py adds these.
    "vllm version": "vllm_version",
    "rocm version": "rocm_version",
    "neuron sdk version": "neuron",
    "vllm build flags": "vllm_build_flags",
    "gpu topology": "topology",
    "environment variables": "env_vars",
}
# Labels that only collect_env prints; a text needs a few of them to count as a report.
CORE = {"torch_version", "debug", "torch_cuda", "torch_rocm", "os", "gcc", "python", "python_platform",
        "cuda_available", "nvcc", "cuda_module_loading", "gpus", "driver", "cudnn", "hip_runtime", "miopen",
        "xnnpack", "libs", "libc", "clang", "cmake"}
MIN_CORE = 3
HEADER = "Collecting environment information"

LABEL_RE = re.compile(r"^(?P<label>[A-Za-z][A-Za-z0-9_ ()./-]{0,60}?)\s*[:：]\s*(?P<value>.*)$")
# Hand-typed reports sometimes drop the colon: "PyTorch version 1.5.0".
BARE_TORCH_RE = re.compile(r"^pytorch version\s+(\d\S*)\s*$", re.I)
GPU_LINE_RE = re.compile(r"^GPU\s*(\d+)\s*[:：]\s*(.+?)\s*$")
UUID_RE = re.compile(r"\s*\(UUID:\s*([^)]*)\)")
SECTION_RULE_RE = re.compile(r"^=+$")
ENV_VAR_RE = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.*)$")
PIP_RE = re.compile(r"^\[(pip3?|conda)\]\s+(.*)$")
MISSING = {"", "could not collect", "n/a", "none", "no cuda", "not available", "unknown"}

# --- torch's own warnings, printed before the report ----------------------------------------

# Bounded repeats everywhere: a pasted text may hold megabyte lines, and an unbounded
# lazy group before a literal is quadratic on them.
# The GPU name is the text before this phrase on its line; the pattern starts with a literal
# so that the search stays linear.
INCOMPATIBLE_RE = re.compile(r" with CUDA capability (sm_\d{1,4}[a-z]?) is not compatible with the current PyTorch")
SUPPORTS_RE = re.compile(r"current PyTorch install supports CUDA capabilities ((?:(?:sm|compute)_\d{1,4}[a-z]?[ \t]*){1,40})")
# "... which is of cuda capability 6.1" (torch 1.x-2.12), "... of compute capability (CC) 12.1" (2.13).
TOO_OLD_GPU_RE = re.compile(r"Found GPU(\d{1,3}) ([^\n]{1,200}?) which is of (?:cuda|compute) capability (?:\(CC\) )?"
                            r"(\d{1,2})\.(\d{1,2})")
CUDNN_MISMATCH_RE = re.compile(
    r"cuDNN version (?:incompatibility|mismatch): PyTorch was compiled\s+against (\(\d+, \d+, \d+\)|\d+)"
    r" but (?:found runtime version|linked against) (\(\d+, \d+, \d+\)|\d+)")
SMI_FAILED_RE = re.compile(r"NVIDIA-SMI has failed because it couldn'?.?t communicate with the NVIDIA driver")
NVML_MISMATCH_RE = re.compile(r"Failed to initialize NVML: Driver/library version mismatch")

# --- nvidia-smi's table --------------------------------------------------------------------

# Drivers before 410.72 print no "CUDA Version" in the header.
SMI_HEADER_RE = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*([\d.]+)(?:\s+CUDA Version:\s*([\d.]+|N/A))?")
SMI_ROW1_RE = re.compile(
    r"^\|\s*(\d+)\s+(.+?)\s+(On|Off|TCC|WDDM)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+(On|Off|N/A)\s*\|\s*(.*?)\s*\|")
SMI_ROW2_RE = re.compile(
    r"^\|\s*(\S+)\s+(\S+)\s+(P\d+|ERR!|N/A)\s+(.*?)\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|\s*(\d+%|N/A)\s+(\S+)")
SMI_PROC_RE = re.compile(
    r"^\|\s*(\d+)\s+(?:(\S+)\s+(\S+)\s+)?(\d+)\s+(C|G|C\+G|M|M\+C)\s+(.+?)\s+(\d+MiB|N/A)\s*\|")
MIB = 1024 * 1024
SMI_LINE_MAX = 400        # nvidia-smi's lines are under 100 characters
LINE_MAX = 8192           # longer lines are prose or garbage, never a collect_env line

# Localised lscpu keys seen in real reports (es, de, fr, zh_CN) -> the English key.
LSCPU_KEYS = {
    "model name": "model name", "nombre del modelo": "model name", "modellname": "model name",
    "nom de modèle": "model name", "型号名称": "model name",
    "vendor id": "vendor id", "id de fabricante": "vendor id", "anbieterkennung": "vendor id",
    "identifiant constructeur": "vendor id", "厂商 id": "vendor id",
    "cpu(s)": "cpu(s)", "处理器": "cpu(s)",
    "thread(s) per core": "thread(s) per core", "hilo(s) de procesamiento por núcleo": "thread(s) per core",
    "thread(s) pro kern": "thread(s) per core", "每个核的线程数": "thread(s) per core",
    "core(s) per socket": "core(s) per socket", "núcleo(s) por «socket»": "core(s) per socket",
    "kern(e) pro sockel": "core(s) per socket", "每个座的核数": "core(s) per socket",
    "socket(s)": "socket(s)", "«socket(s)»": "socket(s)", "sockel": "socket(s)", "座": "socket(s)",
    "numa node(s)": "numa node(s)", "nodo(s) numa": "numa node(s)", "modo(s) numa": "numa node(s)",
    "numa-knoten": "numa node(s)", "numa 节点": "numa node(s)",
    "flags": "flags", "indicadores": "flags", "markierungen": "flags", "drapeaux": "flags", "标记": "flags",
    "architecture": "architecture", "arquitectura": "architecture", "architektur": "architecture", "架构": "architecture",
    "name": "model name", "manufacturer": "vendor id",  # Windows (wmic ... /VALUE)
}

DERIVATIVES = ("ubuntu", "linux mint", "pop!_os", "kali", "raspbian", "elementary", "zorin", "mx linux",
               "deepin", "devuan", "pureos", "neon", "lubuntu", "xubuntu", "kubuntu")
# os-release IDs for the names lsb_release prints.
OS_IDS = {"red hat": "rhel", "centos": "centos", "rocky": "rocky", "almalinux": "almalinux", "fedora": "fedora",
          "opensuse": "opensuse", "suse": "sles", "arch": "arch", "linux mint": "linuxmint", "amazon linux": "amzn",
          "oracle": "ol", "ubuntu": "ubuntu", "pop!_os": "pop", "kali": "kali", "raspbian": "raspbian"}


# --- small helpers ------------------------------------------------------------------------

def _missing(value: Optional[str]) -> bool:
    return value is None or value.strip().strip(".").lower() in MISSING


def _bare(name: Optional[str]) -> str:
    """A GPU's name as nvidia-smi and torch both print it ("NVIDIA " was added to names in 2021)."""
    return re.sub(r"^nvidia\s+", "", (name or "").strip().lower())


def _bool(value: Optional[str]) -> Optional[bool]:
    return {"true": True, "yes": True, "false": False, "no": False}.get((value or "").strip().lower())


# --- the reader ---------------------------------------------------------------------------

def _clean_lines(text: str) -> list[str]:
    """Lines without markdown quoting, HTML tags or code-fence lines; stripped of the
    indentation a paste may add."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    non_empty = [ln for ln in lines if ln.strip()]
    quoted = non_empty and sum(1 for ln in non_empty if ln.lstrip().startswith(">")) * 2 >= len(non_empty)
    out = []
    for ln in lines:
        s = ln.strip()
        if quoted and s.startswith(">"):
            s = s[1:].strip()
        if s.startswith("```") or s.startswith("~~~"):
            s = ""
        s = re.sub(r"</?(details|summary|pre|code|br)\b[^>]*>", "", s, flags=re.I).strip()
        out.append(s)
    return out


class _Reader:
    """One pass over the lines, collecting raw values by label and the blocks."""

    def __init__(self, text: str):
        self.text = text
        self.values: dict[str, str] = {}
        self.raw: dict[str, str] = {}
        self.gpu_lines: list[str] = []
        self.cudnn_paths: list[str] = []
        self.cpu_lines: list[str] = []
        self.lib_lines: list[str] = []
        self.env_lines: list[str] = []
        self.smi_lines: list[str] = []
        self.sectioned = False
        self.repeats = 0
        self.order: list[str] = []
        self._read(_clean_lines(text))

    def _label(self, line: str) -> Optional[tuple[str, str]]:
        if m := BARE_TORCH_RE.match(line):
            return "torch_version", m.group(1)
        m = LABEL_RE.match(line)
        if not m:
            return None
        key = LABELS.get(re.sub(r"\s+", " ", m.group("label").strip().lower()))
        if key is None:
            return None
        return key, m.group("value").strip()

    def _read(self, lines: list[str]) -> None:
        state: Optional[str] = None
        for line in lines:
            if len(line) > LINE_MAX:
                continue
            if SECTION_RULE_RE.match(line):
                self.sectioned = True
                continue
            if line.startswith("|") or line.startswith("+-") or line.startswith("+=") or SMI_HEADER_RE.search(line):
                self.smi_lines.append(line)
                state = None
                continue
            found = self._label(line)
            if found and not (state == "cpu" and found[0] == "cpu"):
                key, value = found
                if key in self.values:
                    # A second report in the same paste (before/after): the first one counts.
                    self.repeats += 1
                    state = "repeat"
                    continue
                self.values[key] = value
                self.raw[key] = value
                self.order.append(key)
                state = {"gpus": "gpus", "cudnn": "cudnn", "cpu": "cpu", "libs": "libs",
                         "env_vars": "env", "topology": "skip"}.get(key, None)
                if key == "gpus" and value:
                    self.gpu_lines.append(value)
                if key == "cudnn" and value and not value.lower().startswith("probably one of"):
                    if ("/" in value or "\\" in value) and not _missing(value):
                        self.cudnn_paths.append(value)
                    state = None
                if key == "cpu" and value:
                    self.cpu_lines.append(value)
                continue
            if not line:
                if state in ("gpus", "cudnn"):
                    state = None
                continue
            if state == "gpus":
                if GPU_LINE_RE.match(line):
                    self.gpu_lines.append(line)
                    continue
                state = None
            elif state == "cudnn":
                if "/" in line or "\\" in line:
                    self.cudnn_paths.append(line)
                    continue
                state = None
            if state == "cpu":
                self.cpu_lines.append(line)
            elif state == "libs":
                if PIP_RE.match(line):
                    self.lib_lines.append(line)
            elif state == "env":
                if ENV_VAR_RE.match(line):
                    self.env_lines.append(line)
            if PIP_RE.match(line) and state not in ("libs", "repeat"):
                # "[pip3] ..." lines pasted without their heading.
                self.lib_lines.append(line)

    @property
    def core_count(self) -> int:
        return len(CORE & set(self.values)) + (1 if self.lib_lines and "libs" not in self.values else 0)


# --- sections -----------------------------------------------------------------------------

class _Sec(Section):
    """A section of a report's facts: unknown, unless said otherwise, because the text does not say."""

    def unknown(self, name: str, reason: str = NOT_IN_TEXT) -> None:
        super().unknown(name, reason)

    def put(self, name: str, value: Any, reason: str = NOT_IN_TEXT) -> None:
        self.set_or_unknown(name, value, reason)

    def finish(self) -> dict:
        self.setdefault("unknown", {})["*"] = NOT_IN_TEXT
        return dict(self)


def _platform_of(os_text: Optional[str], py_platform: Optional[str], libc: Optional[str]) -> str:
    s = f"{os_text or ''} {py_platform or ''}".lower()
    if "windows" in s or "win32" in s or "mingw" in s:
        return "windows"
    if "macos" in s or "mac osx" in s or "darwin" in s or "mac os x" in s:
        return "macos"
    if "linux" in s or (libc or "").lower().startswith("glibc") or re.search(
            r"ubuntu|debian|centos|red hat|fedora|rocky|alma|suse|arch|mint|amazon|oracle", s):
        return "linux"
    return "unknown"


def _os_section(rd: _Reader, platform: str) -> dict:
    sec = _Sec()
    os_text = None if _missing(rd.values.get("os")) else rd.values["os"]
    sec["platform"] = platform
    arch = None
    pretty = os_text
    if os_text:
        m = re.search(r"\s*\((x86_64|aarch64|arm64|ppc64le|s390x|armv7l|riscv64|AMD64|i686)\)\s*$", os_text)
        if m:
            arch = m.group(1)
            pretty = os_text[:m.start()].strip()
    sec.put("pretty_name", pretty)
    low = (pretty or "").lower()
    is_debian = low.startswith("debian")
    os_id = None
    derivative = False
    if pretty:
        if is_debian:
            os_id = "debian"
        elif platform == "linux":
            os_id = next((v for k, v in OS_IDS.items() if low.startswith(k)), None) or re.split(r"[\s/]", low)[0] or None
            derivative = any(low.startswith(d) for d in DERIVATIVES)
        elif platform in ("windows", "macos"):
            os_id = platform
    sec.put("id", os_id)
    # What os-release's ID_LIKE says on these systems (Ubuntu: "debian"; Mint: "ubuntu debian").
    id_like = None
    if derivative:
        id_like = "ubuntu debian" if os_id in ("linuxmint", "pop") else "debian"
    sec.put("id_like", id_like, NOT_IN_TEXT if not pretty or platform == "linux" else f"a {platform} host")
    # The release as collect_env prints it ("Debian GNU/Linux 12 (bookworm)", "... 12.5 (bookworm)",
    # lsb_release's "Debian GNU/Linux trixie/sid" on testing and unstable); the machine view
    # (debtorch/machine/system.py) says which Debian release that is.
    version_id = codename = debian_version = None
    if pretty:
        m = re.search(r"\b(\d+(?:\.\d+)*)\b", pretty)
        version_id = m.group(1) if m and (is_debian or "." in m.group(1)) else None
        if c := re.search(r"\(([a-z]+)\)", pretty):
            codename = c.group(1)
        if is_debian:
            if c2 := re.search(r"GNU/Linux\s+([a-z]+/sid|sid)\b", pretty):
                debian_version = c2.group(1)
    sec.put("version_id", version_id)
    sec.put("codename", codename)
    sec.put("debian_version", debian_version)

    py_platform = rd.values.get("python_platform")
    kernel = glibc = None
    if py_platform and platform == "linux":
        m = re.match(r"Linux-(.+?)-(x86_64|aarch64|ppc64le|s390x|armv7l|riscv64|i686)(?:-with-(?:glibc)?([\d.]+)?.*)?$",
                     py_platform.strip())
        if m:
            kernel = m.group(1)
            arch = arch or m.group(2)
            glibc = m.group(3)
    libc = rd.values.get("libc")
    if libc and not _missing(libc):
        g = re.match(r"glibc-([\d.]+)", libc.strip())
        glibc = g.group(1) if g else glibc
    sec.put("kernel", kernel, "collect_env printed no Python platform" if not py_platform else NOT_IN_TEXT)
    sec.put("arch", arch)
    sec.put("glibc", glibc)
    if platform == "linux" and kernel:
        sec["wsl"] = 2 if ("wsl2" in kernel.lower() or "microsoft-standard" in kernel.lower()) else (
            1 if "microsoft" in kernel.lower() else None)
    else:
        sec.unknown("wsl")
    kind, evidence = _container_evidence(rd.text, os_id, derivative, pretty, kernel)
    if kind:
        sec["container"] = kind
        sec["container_evidence"] = evidence
    else:
        sec.unknown("container")
    sec.unknown("externally_managed")
    return sec.finish()


# A kernel built by a distribution carries its RPM dist tag (".el7", ".amzn2", ".fc39"; the
# Fedora packaging guidelines' %{dist}: https://docs.fedoraproject.org/en-US/packaging-guidelines/DistTag/).
# A Debian or Ubuntu userspace on such a kernel is a container on that distribution's host.
KERNEL_DIST_TAGS = (
    (re.compile(r"\.el\d+"), "Red Hat Enterprise Linux or a rebuild (CentOS, Rocky, AlmaLinux)"),
    (re.compile(r"\.amzn\d+"), "Amazon Linux"),
    (re.compile(r"\.al\d+(?:\.|$)"), "Alibaba Cloud Linux"),
    (re.compile(r"\.fc\d+"), "Fedora"),
)
# Debian's and Ubuntu's kernels tell each other apart by their flavour ("6.1.0-18-amd64",
# "5.10.0-28-cloud-amd64": https://packages.debian.org/bookworm/linux-image-amd64; "6.5.0-15-generic",
# "6.8.0-1015-aws": https://ubuntu.com/kernel/variants): Debian on Ubuntu's kernel, or Ubuntu on
# Debian's, is a container on the other's host.
DEBIAN_KERNEL_RE = re.compile(r"^\d+\.\d+\.\d+-\d+-(?:cloud-|rt-)?(?:amd64|arm64|686-pae|686|armmp|armmp-lpae)$")
UBUNTU_KERNEL_RE = re.compile(r"^\d+\.\d+\.\d+-\d+-(?:generic|lowlatency|aws|azure|gcp|gke|oracle|kvm|ibm|nvidia|"
                              r"raspi|realtime|oem)(?:-|$)")
# Distributions published only as container images (they ship no kernel): Wolfi and Chainguard's
# images (https://github.com/wolfi-dev/os: "a Linux undistro ... for containers"), distroless.
CONTAINER_ONLY_OS = ("chainguard", "wolfi", "distroless")
# A shell prompt of Docker's default hostname, the container's ID cut to 12 hex digits
# (https://docs.docker.com/engine/network/: "a container's hostname defaults to be the container's ID").
DOCKER_PROMPT_RE = re.compile(r"(?m)^\s*[\w.-]+@([0-9a-f]{12}):\S*\s*[#$]")


def _container_evidence(text: str, os_id: Optional[str], derivative: bool, pretty: Optional[str],
                        kernel: Optional[str]) -> tuple[Optional[str], list[str]]:
    """(kind, evidence) when the pasted text shows a container, else (None, []).  collect_env
    prints nothing about containers; what can show one: a Debian-family userspace on a kernel
    another distribution built (RHEL's, Amazon's; Ubuntu's under Debian and Debian's under
    Ubuntu), a distribution that exists only as container images, or the author's shell prompt
    carrying Docker's default hostname."""
    evidence: list[str] = []
    kind: Optional[str] = None
    if kernel and (os_id == "debian" or os_id == "ubuntu" or derivative):
        for tag, dist in KERNEL_DIST_TAGS:
            if tag.search(kernel):
                kind = "other"
                evidence.append(f"the kernel {kernel} is {dist}'s while the OS is {pretty}")
                break
    if kernel and not kind:
        if os_id == "debian" and UBUNTU_KERNEL_RE.match(kernel):
            kind = "other"
            evidence.append(f"the kernel {kernel} is Ubuntu's while the OS is {pretty}")
        elif os_id == "ubuntu" and DEBIAN_KERNEL_RE.match(kernel):
            kind = "other"
            evidence.append(f"the kernel {kernel} is Debian's while the OS is {pretty}")
    low = (pretty or "").lower()
    if any(low.startswith(name) for name in CONTAINER_ONLY_OS):
        kind = kind or "other"
        evidence.append(f"{pretty} is published only as container images")
    if m := DOCKER_PROMPT_RE.search(text or ""):
        kind = "docker"
        evidence.append(f"the shell prompt's hostname {m.group(1)} is Docker's default (the container's ID)")
    return kind, evidence


def _cpu_section(rd: _Reader) -> dict:
    sec = _Sec()
    kv: dict[str, str] = {}
    for line in rd.cpu_lines:
        key, sep, value = line.partition("=") if "=" in line and ":" not in line else line.partition(":")
        if not sep:
            key, sep, value = line.partition("：")
        k = re.sub(r"\s+", " ", key.strip().lower())
        if sep:
            kv.setdefault(LSCPU_KEYS.get(k, k), value.strip())
        elif not _missing(line) and "model name" not in kv and len(rd.cpu_lines) <= 2:
            kv["model name"] = line.strip()  # macOS prints just the chip ("Apple M2 Max")
    if not kv:
        for name in ("model", "vendor", "logical_cpus", "physical_cores", "sockets", "features", "numa_nodes"):
            sec.unknown(name)
    else:
        sec.put("model", kv.get("model name") or None)
        sec.put("vendor", kv.get("vendor id") or None)

        def num(key: str) -> Optional[int]:
            m = re.match(r"\s*(\d+)", kv.get(key, ""))
            return int(m.group(1)) if m else None

        logical = num("cpu(s)")
        tpc, cps, sockets = num("thread(s) per core"), num("core(s) per socket"), num("socket(s)")
        sec.put("logical_cpus", logical)
        sec.put("sockets", sockets)
        physical = None
        if cps and sockets:
            physical = cps * sockets
        elif logical and tpc:
            physical = logical // tpc
        sec.put("physical_cores", physical)
        sec.put("numa_nodes", num("numa node(s)"))
        if flags := arm_simd(set(kv.get("flags", "").split())):
            sec["features"] = {f: (f in flags) for f in FEATURES}
        else:
            sec.unknown("features")
    sec.unknown("usable_cpus", "collect_env does not read CPU affinity or the cgroup quota")
    sec.unknown("governor", "collect_env does not read the CPU frequency governor")
    return sec.finish()


def _parse_libs(lines: Iterable[str]) -> tuple[dict, dict]:
    pip: dict[str, str] = {}
    conda: dict[str, dict] = {}
    for line in lines:
        m = PIP_RE.match(line)
        if not m:
            continue
        kind, rest = m.group(1), m.group(2).strip()
        if _missing(rest) or rest.lower() == "no relevant packages":
            continue
        if kind.startswith("pip"):
            if n := re.match(r"([A-Za-z0-9_.\-]+)\s*(?:==|@|\s)\s*(\S+)", rest):
                pip.setdefault(n.group(1).lower().replace("_", "-"), n.group(2))
        else:
            parts = rest.split()
            if len(parts) >= 2:
                conda.setdefault(parts[0].lower(), {"version": parts[1], "build": parts[2] if len(parts) > 2 else None,
                                                   "channel": parts[3] if len(parts) > 3 else None})
    return pip, conda


def _python_section(rd: _Reader, warn: TorchWarnings, notes: list) -> dict:
    sec = _Sec()
    pyv = rd.values.get("python")
    sec.put("version", versions.first_dotted(pyv) if pyv and not _missing(pyv) else None)
    if pyv and "bit runtime" in pyv:
        b = re.search(r"(\d+)-bit runtime", pyv)
        sec["bits"] = int(b.group(1)) if b else None
    for name in ("executable", "venv", "prefix"):
        sec.unknown(name)
    pip, conda = _parse_libs(rd.lib_lines)
    sec["distributions"] = pip
    sec["conda_packages"] = {k: v["version"] for k, v in conda.items()}
    if not rd.lib_lines:
        sec.setdefault("unknown", {})["distributions"] = NOT_IN_TEXT

    torch = _Sec()
    tv = rd.values.get("torch_version")
    printed = None if tv is None or _missing(tv) else tv.split()[0]
    pip_torch = pip.get("torch")
    conda_torch = (conda.get("pytorch") or conda.get("torch") or {}).get("version")
    version = printed or pip_torch or conda_torch
    # torch was imported when it answered collect_env or printed its warnings ("PyTorch version:
    # Could not collect" beside "CUDA used to build PyTorch: 12.1", or a paste cut before the lines).
    imported = bool(versions.first_dotted(rd.values.get("torch_cuda")) or _bool(rd.values.get("cuda_available"))
                    is not None or warn["devices"] or warn["arch_list"] or warn["driver_cuda"])
    if tv is not None and tv.strip().upper() == "N/A" and not (pip_torch or conda_torch):
        torch["installed"] = False
        torch.unknown("version", "collect_env could not import torch")
    elif version is None and imported:
        torch["installed"] = True
        torch.unknown("version", NOT_IN_TEXT if tv is None else f"collect_env printed {tv.strip()!r} for it")
    elif version is None:
        torch["installed"] = None
        torch.unknown("installed")
        torch.unknown("version")
    else:
        torch["installed"] = True
        torch["version"] = version
        if not printed:
            notes.append("torch's version comes from the package list, not from an imported torch")
    copies = []
    if pip_torch:
        copies.append({"source": "pip", "version": pip_torch})
    conda_entry = conda.get("pytorch") or conda.get("torch") or {}
    if conda_torch and conda_entry.get("channel") != "pypi" and conda_entry.get("build") not in ("pypi_0", "<pip>"):
        copies.append({"source": "conda", "version": conda_torch})
    if len({c["version"].split("+")[0] for c in copies}) > 1:
        torch["copies"] = copies
        notes.append("more than one torch is installed: " + ", ".join(f"{c['source']} {c['version']}" for c in copies))

    # The CUDA torch was built with.  "Could not collect" / "None" after an imported
    # torch means torch.version.cuda is None (a CPU or ROCm build).
    tc = rd.values.get("torch_cuda")
    cuda = hip = None
    cuda_known = False
    if tc is not None:
        low = tc.strip().lower()
        if low in ("none", "could not collect") and printed:
            cuda_known = True
        elif versions.first_dotted(tc):
            cuda, cuda_known = versions.first_dotted(tc), True
        elif low == "n/a":
            cuda_known = bool(printed)
    conda_build = (conda.get("pytorch") or {}).get("build") or ""
    cb = re.search(r"cuda([\d.]+)_cudnn([\d.]+)", conda_build)
    if not cuda_known and version:
        if m := re.search(r"\+cu(\d+)(\d)\b", version):
            cuda, cuda_known = f"{m.group(1)}.{m.group(2)}", True
        elif cb:
            cuda, cuda_known = cb.group(1), True
        elif "+cpu" in version:
            cuda_known = True
        elif runtime := wheel_version(pip, "nvidia-cuda-runtime-cu"):
            cuda, cuda_known = ".".join(runtime.split(".")[:2]), True
            notes.append("torch's CUDA is inferred from the nvidia-cuda-runtime wheel in the package list")
    tr = rd.values.get("torch_rocm")
    if tr and not _missing(tr):
        hip = versions.first_dotted(tr) or tr
    elif version and "+rocm" in version:
        hip = version.split("+rocm", 1)[1]
    torch["cuda"] = cuda
    if not cuda_known and not hip:
        torch.setdefault("unknown", {})["cuda"] = NOT_IN_TEXT
    torch["hip"] = hip
    if version or cuda or hip:
        torch["variant"] = versions.variant_of(version, cuda, hip) if (cuda_known or hip or (version and "+" in version)) else None
        torch["cpu_only"] = (not cuda and not hip) if (cuda_known or hip) else None
    else:
        torch["variant"] = torch["cpu_only"] = None
    if not (cuda_known or hip) and warn["arch_list"]:
        torch["cpu_only"] = False           # torch printed the CUDA architectures it was built for
    if torch.get("cpu_only") is None and torch.get("installed") is not False:
        torch.setdefault("unknown", {})["cpu_only"] = NOT_IN_TEXT
    torch.update({key: wheel_version(pip, prefix) for key, prefix in TORCH_WHEELS.items()})
    if cb:
        torch["cudnn_conda"] = cb.group(2)
    torch["debug"] = _bool(rd.values.get("debug"))
    torch["xnnpack"] = _bool(rd.values.get("xnnpack"))
    for key, name in (("hip_runtime", "hip_runtime"), ("miopen", "miopen")):
        v = rd.values.get(key)
        torch[name] = None if _missing(v) else v
    torch.unknown("location")
    sec["torch"] = dict(torch)

    # What the imported torch said: collect_env called torch.cuda.is_available().
    avail = _bool(rd.values.get("cuda_available"))
    devices = [dict(d) for d in warn["devices"]]
    gv = rd.values.get("gpus")
    if hip and gv and not _missing(gv):
        # For ROCm builds collect_env asks torch for the device name ("AMD Instinct MI250X (gfx90a...)").
        arch = re.search(r"\((gfx[0-9a-f]+)[^)]*\)", gv)
        devices.append({"index": 0, "name": re.sub(r"\s*\(gfx.*$", "", gv).strip(), "capability": None,
                        "gcn_arch": arch.group(1) if arch else None})
    if imported or printed or warn["errors"]:
        # collect_env imported torch and asked is_available(), but ran no computation: the
        # deep probe's "ok" (it completed) stays unknown.
        deep: dict[str, Any] = {"source": "collect_env", "ok": None, "imported": bool(imported or printed),
                                "version": version, "cuda": cuda, "hip": hip, "cuda_available": avail,
                                "arch_list": warn["arch_list"], "cudnn_version": warn["cudnn_compiled"],
                                "devices": devices, "errors": warn["errors"],
                                "unknown": {"ok": "collect_env imports torch but runs no computation on it",
                                            "exercise": "collect_env runs no computation",
                                            "cudnn_version": "collect_env prints the system's libcudnn files, not torch's cuDNN",
                                            "mapped_libraries": "collect_env does not list the libraries torch loaded"}}
        if warn["arch_list"] is None:
            deep["unknown"]["arch_list"] = "torch printed no arch list (it does so only for an unsupported GPU)"
        deep["mapped_libraries"] = None
        deep["exercise"] = None
        sec["deep"] = deep
    else:
        sec.unknown("deep")
    return sec.finish()


class TorchWarnings(TypedDict):
    """What :func:`parse_torch_warnings` found."""

    devices: list[dict]             # {index, name, capability}
    arch_list: Optional[list[str]]
    errors: dict[str, str]          # cuda_init, kernel, cudnn
    driver_cuda: Optional[str]
    cudnn_compiled: Optional[int]
    messages: list[str]


def parse_torch_warnings(text: str) -> TorchWarnings:
    """Facts in the warnings torch prints while collect_env imports it (and in a traceback
    pasted with the report): GPUs with their compute capability, the wheel's arch list,
    the driver's CUDA from "driver too old", CUDA init errors (``errors["cuda_init"]``,
    debtorch/facts/torch_messages.py), "no kernel image" (``errors["kernel"]``) and
    cuDNN errors.  Never raises."""
    text = str(text)
    out = TorchWarnings(devices=[], arch_list=None, errors={}, driver_cuda=None, cudnn_compiled=None, messages=[])
    for m in INCOMPATIBLE_RE.finditer(text):
        start = text.rfind("\n", max(0, m.start() - 200), m.start()) + 1
        name = re.sub(r"^.*?UserWarning:\s*", "", text[start:m.start()]).strip()
        if not name or (start == 0 and m.start() > 200):
            continue
        out["devices"].append({"index": None, "name": name, "capability": versions.cc_text(m.group(1))})
        out["messages"].append((name + m.group(0)).strip())
    for m in TOO_OLD_GPU_RE.finditer(text):
        out["devices"].append({"index": int(m.group(1)), "name": m.group(2).strip(),
                               "capability": f"{m.group(3)}.{m.group(4)}"})
        out["messages"].append(m.group(0).strip())
    if arch := SUPPORTS_RE.search(text):
        out["arch_list"] = arch.group(1).split()
    if old := torch_messages.DRIVER_TOO_OLD.search(text):
        out["driver_cuda"] = versions.cuda_from_int(old.group(1))
    found = torch_messages.classify(text)
    if found and found[0] != "no-kernel-image":
        out["errors"]["cuda_init"] = found[1]
    if kernel := torch_messages.NO_KERNEL_IMAGE.search(text):
        # A kernel launch failed (a traceback pasted below the report): the wheel has no code for the GPU.
        out["errors"]["kernel"] = kernel.group(0)
    if cudnn := CUDNN_MISMATCH_RE.search(text):
        out["errors"]["cudnn"] = cudnn.group(0)
        nums = [int(x) for x in re.findall(r"\d+", cudnn.group(1))]
        out["cudnn_compiled"] = nums[0] * 1000 + nums[1] * 100 + nums[2] if len(nums) == 3 else nums[0]
    return out


def parse_nvidia_smi(text: str) -> dict:
    """nvidia-smi's default table (any layout since R410): ``present``, ``driver``,
    ``cuda`` (the highest CUDA the driver supports), ``gpus`` (index, name as printed,
    possibly cut short with '...', persistence mode, bus id, memory in bytes ...) and
    ``processes``.  Never raises."""
    return _parse_smi([ln.strip() for ln in str(text).splitlines()])


def _parse_smi(lines: list[str]) -> dict:
    out: dict = {"present": False, "driver": None, "cuda": None, "gpus": [], "processes": []}
    in_procs = False
    pending: Optional[dict] = None
    for line in lines:
        if len(line) > SMI_LINE_MAX:
            continue
        if h := SMI_HEADER_RE.search(line):
            out["present"] = True
            out["driver"] = h.group(2)
            out["cuda"] = None if h.group(3) in (None, "N/A") else h.group(3)
            continue
        if "Processes:" in line:
            in_procs = True
            continue
        if in_procs:
            if p := SMI_PROC_RE.match(line):
                mem = p.group(7)
                out["processes"].append({"gpu": int(p.group(1)), "pid": int(p.group(4)), "type": p.group(5),
                                         "name": p.group(6).strip(),
                                         "used_memory": int(mem[:-3]) * MIB if mem.endswith("MiB") else None})
            continue
        if r1 := SMI_ROW1_RE.match(line):
            out["present"] = True
            ecc = r1.group(6)
            pending = {"index": int(r1.group(1)), "name": r1.group(2).strip(), "persistence_mode": None,
                       "driver_model": None, "pci_bus_id": r1.group(4),
                       "display_active": None if r1.group(5) == "N/A" else r1.group(5) == "On",
                       "ecc_uncorrected_volatile": int(ecc) if ecc.isdigit() else None, "processes": []}
            if r1.group(3) in ("On", "Off"):
                pending["persistence_mode"] = r1.group(3) == "On"
            else:
                pending["driver_model"] = r1.group(3)
            out["gpus"].append(pending)
            continue
        r2 = SMI_ROW2_RE.match(line)
        if r2 and pending is not None:
            temp = re.match(r"(\d+)C", r2.group(2))
            util = re.match(r"(\d+)%", r2.group(7))
            used, total = int(r2.group(5)) * MIB, int(r2.group(6)) * MIB
            pending.update({"temperature": int(temp.group(1)) if temp else None, "performance_state": r2.group(3),
                            "power": r2.group(4).strip() or None, "memory_used": used, "memory_total": total,
                            "memory_free": max(total - used, 0),
                            "utilization_gpu": int(util.group(1)) if util else None,
                            "compute_mode": r2.group(8).lower()})
            pending = None
    return out


def _nvidia_section(rd: _Reader, platform: str, hip: Optional[str], warn: TorchWarnings, smi: dict,
                    notes: list) -> dict:
    sec = _Sec()
    sec["source"] = "collect_env+nvidia-smi" if smi["present"] else "collect_env"
    sec.unknown("pci_devices", "collect_env does not list PCI devices or the kernel driver bound to them")
    sec.unknown("kernel_module", "collect_env does not read /proc/driver/nvidia/version")
    for name in ("nouveau_loaded", "secure_boot", "topology"):
        sec.unknown(name)

    driver_raw = rd.values.get("driver")
    driver = (versions.first_dotted(driver_raw) if driver_raw and not _missing(driver_raw) else None) or smi["driver"]
    nvml: dict = {"available": None, "error": None, "driver_version": driver, "cuda_driver_version": None,
                  "source": None, "unknown": {}}
    failed = SMI_FAILED_RE.search(rd.text) or NVML_MISMATCH_RE.search(rd.text)
    if failed:
        nvml["available"], nvml["error"] = False, failed.group(0)
    elif driver:
        nvml["available"] = True  # nvidia-smi answered, so NVML loaded
        nvml["source"] = "nvidia-smi (through collect_env)"
    else:
        reason = NOT_IN_TEXT if driver_raw is None else f"collect_env printed {driver_raw.strip()!r} for the driver"
        nvml["unknown"]["available"] = reason
        nvml["unknown"]["driver_version"] = reason
    gv = rd.values.get("gpus")
    if (driver is None and not smi["present"] and platform != "macos" and hip is None
            and driver_raw is not None and _missing(driver_raw) and gv is not None and _missing(gv)):
        # collect_env asks nvidia-smi for both; "Could not collect" (or "No CUDA") for both
        # means nvidia-smi gave nothing: missing, or no driver to talk to.
        sec["nvidia_smi"] = {"ran": None, "returncode": None, "error_kind": "not_collected",
                             "error": f"collect_env printed {driver_raw.strip()!r} for the driver and "
                                      f"{gv.strip()!r} for the GPUs: nvidia-smi answered nothing"}
    if smi["cuda"]:
        nvml["cuda_driver_version"] = smi["cuda"]
    elif warn["driver_cuda"]:
        nvml["cuda_driver_version"] = warn["driver_cuda"]
        notes.append(f"the driver's CUDA ({warn['driver_cuda']}) comes from torch's 'driver too old' warning")
    else:
        nvml["unknown"]["cuda_driver_version"] = "collect_env does not print the driver's CUDA version; nvidia-smi does"
    for key in ("driver_version", "cuda_driver_version"):
        # The facts' own top-level fields (what the doctor reads first).
        sec.put(key, nvml[key], nvml.get("unknown", {}).get(key, NOT_IN_TEXT))
    if not nvml["unknown"]:
        del nvml["unknown"]
    sec["nvml"] = nvml

    gpus: list[dict] = []
    names_from_torch = hip is not None or platform == "macos"
    if not names_from_torch:
        for line in rd.gpu_lines:
            m = GPU_LINE_RE.match(line)
            if not m:
                continue
            name = m.group(2)
            u = UUID_RE.search(name)
            uuid = u.group(1).strip() if u else None
            name = UUID_RE.sub("", name).strip()
            gpus.append({"index": int(m.group(1)), "name": name, "uuid": uuid, "compute_capability": None,
                         "memory_total": None, "memory_used": None, "persistence_mode": None})
    for row in smi["gpus"]:
        match = next((g for g in gpus if g["index"] == row["index"]), None)
        if match is None:
            match = {"index": row["index"], "name": row["name"], "uuid": None, "compute_capability": None}
            gpus.append(match)
        for k in ("memory_total", "memory_used", "memory_free", "persistence_mode", "pci_bus_id", "temperature",
                  "utilization_gpu", "performance_state", "compute_mode", "driver_model", "ecc_uncorrected_volatile"):
            if row.get(k) is not None:
                match[k] = row[k]
        if row.get("pci_bus_id"):
            # Only a table gives processes, and only per GPU: C (compute) clients, as the facts keep them.
            match["processes"] = [{"pid": p["pid"], "used_memory": p["used_memory"]} for p in smi["processes"]
                                  if p["gpu"] == row["index"] and "C" in p["type"]]
    if not gpus and not names_from_torch:
        # No GPU list (cut off, or nvidia-smi answered nothing): the GPUs torch warned about.
        gpus = [{"index": d["index"], "name": d["name"], "uuid": None, "compute_capability": d["capability"]}
                for d in warn["devices"]]
    for dev in warn["devices"]:
        for g in gpus:
            if _bare(g["name"]) == _bare(dev["name"]) or (dev["index"] is not None and g["index"] == dev["index"]):
                g["compute_capability"] = dev["capability"]
    for g in gpus:
        g.setdefault("unknown", {})
        if g.get("compute_capability") is None:
            g["unknown"]["compute_capability"] = "collect_env prints only the GPU's name"
        for k in ("memory_total", "memory_used", "persistence_mode", "pcie_current_gen", "pcie_max_gen",
                  "pcie_current_width", "pcie_max_width", "ecc_mode_current", "clocks_throttle_reasons", "processes"):
            if g.get(k) is None:
                g[k] = None
                g["unknown"][k] = "not in the collect_env text (nvidia-smi -q gives it)"
    if gpus:
        sec["gpus"] = gpus
    elif names_from_torch:
        sec["gpus"] = []
        sec.setdefault("unknown", {})["gpus"] = "no NVIDIA GPU listed (ROCm or macOS build)" if hip else "a macOS host"
    elif gv is not None and gv.strip().lower() == "no cuda":
        sec.unknown("gpus", "collect_env printed 'No CUDA': nvidia-smi listed no GPU and torch saw none")
    else:
        sec.unknown("gpus", NOT_IN_TEXT if gv is None else f"collect_env printed {gv.strip()!r}")
    return sec.finish()


def _cuda_section(rd: _Reader) -> dict:
    sec = _Sec()
    nv = rd.values.get("nvcc")
    if nvcc := versions.first_dotted(nv):
        sec["toolkit_nvcc"] = {"version": nvcc, "release": ".".join(nvcc.split(".")[:2]),
                               "path": None, "found_via": "collect_env ('CUDA runtime version')"}
    else:
        sec.unknown("toolkit_nvcc", NOT_IN_TEXT if nv is None else
                    "collect_env found no nvcc (a system CUDA toolkit; PyTorch wheels do not need one)")
    cudnn = rd.values.get("cudnn")
    if rd.cudnn_paths:
        libs: list[dict] = [{"path": p, "version": versions.library_version(p)} for p in rd.cudnn_paths]
        sec["cudnn_system"] = libs
        main = [lib["version"] for lib in libs if lib["version"]
                and re.match(r"(libcudnn\.|cudnn64_)", re.split(r"[\\/]", lib["path"])[-1])]
        found = sorted({lib["version"] for lib in libs if lib["version"]}, key=lambda v: [int(x) for x in v.split(".")])
        sec["cudnn_system_versions"] = found
        sec["cudnn_system_majors"] = sorted({int(v.split(".")[0]) for v in found})
        sec["cudnn_system_main"] = sorted(set(main), key=lambda v: [int(x) for x in v.split(".")])
    else:
        sec.unknown("cudnn_system", NOT_IN_TEXT if cudnn is None else f"collect_env printed {cudnn.strip()!r}")
    sec.unknown("linker_cache", "collect_env shows only the libcudnn files of the linker cache (cuda.cudnn_system)")
    sec.unknown("wheel_libraries", "collect_env does not list the nvidia-* wheels' library files")
    for name in ("cuda_home", "local_toolkits"):
        sec.unknown(name)
    for name in ("ld_library_path", "ld_library_path_dirs", "shadowing"):
        sec.unknown(name, "collect_env does not print LD_LIBRARY_PATH")
    return sec.finish()


def _env_section(rd: _Reader) -> dict:
    sec = _Sec()
    variables: dict[str, str] = {}
    for line in rd.env_lines:
        m = ENV_VAR_RE.match(line)
        if m and is_allowed(m.group(1)):
            variables.setdefault(m.group(1), m.group(2))
    alloc = rd.values.get("alloc_conf")
    if alloc and not _missing(alloc):
        variables.setdefault("PYTORCH_CUDA_ALLOC_CONF", alloc)
    sec["variables"] = dict(sorted(variables.items()))
    mod = rd.values.get("cuda_module_loading")
    sec.put("cuda_module_loading", None if _missing(mod) else mod,
            NOT_IN_TEXT if mod is None else "collect_env printed nothing for it")
    sec.unknown("ld_library_path", "collect_env does not print LD_LIBRARY_PATH")
    return sec.finish()


def _empty_section(reason: str) -> dict:
    return {"unknown": {"*": reason}}


# --- what the text could not tell ----------------------------------------------------------

ALWAYS_LACKING = (
    ("nvidia.pci_devices", "which kernel driver is bound to each GPU (nvidia, nouveau, nova_core, vfio-pci)"),
    ("nvidia.kernel_module", "the NVIDIA kernel module's version (/proc/driver/nvidia/version)"),
    ("nvidia.secure_boot", "whether Secure Boot is on"),
    ("apt", "the APT sources (non-free, non-free-firmware) and installed Debian packages (driver, linux-headers)"),
    ("memory.shm_total", "/dev/shm size"),
    ("memory.memlock_soft", "RLIMIT_MEMLOCK and RLIMIT_NOFILE"),
    ("memory.total", "RAM and swap"),
    ("cpu.usable_cpus", "usable CPUs (affinity and cgroup quota)"),
    ("cpu.governor", "the CPU frequency governor"),
    ("env.ld_library_path", "LD_LIBRARY_PATH (libraries that shadow the wheels' CUDA and cuDNN)"),
    ("python.deep.mapped_libraries", "which cuDNN and CUDA libraries torch actually loaded"),
    ("os.container", "whether it runs in a container"),
    ("storage", "disks and the training data's filesystem"),
)


def _lacking(doc: dict, rd: _Reader, smi: dict) -> tuple[list[str], list[str]]:
    words: list[str] = []
    fields: list[str] = []

    def lack(field: str, text: str) -> None:
        fields.append(field)
        words.append(text)

    torch = doc["python"].get("torch") or {}
    if torch.get("version") is None:
        lack("python.torch.version", "the PyTorch version")
    elif torch.get("cuda") is None and torch.get("hip") is None and torch.get("cpu_only") is None:
        lack("python.torch.cuda", "the CUDA version PyTorch was built with")
    nvml = doc["nvidia"].get("nvml") or {}
    if doc["os"].get("platform") not in ("macos",):
        if nvml.get("driver_version") is None:
            lack("nvidia.nvml.driver_version", "the NVIDIA driver version")
        if nvml.get("cuda_driver_version") is None:
            lack("nvidia.nvml.cuda_driver_version", "the highest CUDA the driver supports (nvidia-smi's header)")
        gpus = doc["nvidia"].get("gpus")
        if gpus is None:
            lack("nvidia.gpus", "the GPU models")
        elif gpus and any(g.get("compute_capability") is None for g in gpus):
            lack("nvidia.gpus.compute_capability", "the GPUs' compute capability (only their names, which checks/gpus.toml looks up)")
        if gpus and any(g.get("memory_total") is None for g in gpus):
            lack("nvidia.gpus.memory", "GPU memory, persistence mode, PCIe link, ECC and clocks (nvidia-smi -q)")
    deep = doc["python"].get("deep")
    if not deep or deep.get("cuda_available") is None:
        lack("python.deep.cuda_available", "whether torch.cuda.is_available()")
    if deep and deep.get("arch_list") is None:
        lack("python.deep.arch_list", "the GPU architectures the installed wheel was built for")
    if doc["cuda"].get("toolkit_nvcc") is None:
        lack("cuda.toolkit_nvcc", "the system CUDA toolkit (nvcc), which matters only for building extensions")
    if doc["os"].get("pretty_name") is None:
        lack("os.pretty_name", "the operating system")
    if not rd.lib_lines:
        lack("python.distributions", "the pip/conda package list (nvidia-cudnn, nvidia-nccl wheels)")
    if doc["cpu"].get("model") is None:
        lack("cpu.model", "the CPU model and features")
    for field, text in ALWAYS_LACKING:
        lack(field, text)
    return words, fields


# --- format ----------------------------------------------------------------------------------

def _format(rd: _Reader) -> tuple[str, list[str]]:
    """Which collect_env layout printed the text, and the labels that tell.

    A text that stops before the package list may come from a later layout than
    its lines show; its era then ends in '+'."""
    era, evidence = _era(rd)
    if era not in ("vllm-sections", "fragment", "2.6+") and not rd.lib_lines and "libs" not in rd.values:
        return era.split("-")[0] + "+", evidence + ["the text stops early, so a later layout is possible"]
    return era, evidence


def _era(rd: _Reader) -> tuple[str, list[str]]:
    keys = set(rd.values)
    if rd.sectioned and ("torch_version" in keys or "os" in keys):
        return "vllm-sections", ["'=====' section headings (vLLM's collect_env.py)"]
    evidence = []
    if "xpu_available" in keys or "alloc_conf" in keys:
        evidence.append("'Is XPU available' or 'Caching allocator config' line")
        return "2.6+", evidence
    if "cpu" in keys:
        return "2.0-2.5", ["'CPU:' block (lscpu), no 'Is XPU available'"]
    if "cuda_module_loading" in keys or "xnnpack" in keys:
        return "1.13", ["'CUDA_MODULE_LOADING set to' line, no CPU block"]
    if "torch_rocm" in keys or "hip_runtime" in keys or "clang" in keys:
        return "1.7-1.12", ["'ROCM used to build PyTorch' / 'HIP runtime version' lines, no CUDA_MODULE_LOADING"]
    bools = [rd.values.get(k, "").strip().lower() for k in ("debug", "cuda_available")]
    if "torch_version" in keys or any(b in ("yes", "no") for b in bools):
        return "1.0-1.6", ["no ROCm/HIP lines" + ("; Yes/No booleans" if any(b in ("yes", "no") for b in bools) else "")]
    return "fragment", ["the text starts after the PyTorch lines; too little to date"]


# --- entry points ------------------------------------------------------------------------------

def parse(text: str, name: str = "<text>") -> dict:
    """A facts document from the text of a collect_env report.

    Raises :class:`CollectEnvError` ("NAME: ...") when the text is not a report."""
    if not isinstance(text, str):
        raise CollectEnvError(f"{name}: expected text, got {type(text).__name__}")
    if not text.strip():
        raise CollectEnvError(f"{name}: empty; paste the output of 'python -m torch.utils.collect_env'")
    rd = _Reader(text)
    warn = parse_torch_warnings(text)
    # A paste cut short after collect_env's first line and torch's warnings still tells the GPU,
    # the wheel's arch list or the driver's CUDA: it is a report, if a short one.
    cut = HEADER in text and bool(warn["devices"] or warn["arch_list"] or warn["driver_cuda"])
    if rd.core_count < MIN_CORE and not cut:
        raise CollectEnvError(f"{name}: not a collect_env report (found {rd.core_count} of its lines, "
                              f"need {MIN_CORE}); paste the output of 'python -m torch.utils.collect_env'")
    notes: list[str] = []
    platform = _platform_of(rd.values.get("os"), rd.values.get("python_platform"), rd.values.get("libc"))
    smi = _parse_smi(rd.smi_lines)
    python = _python_section(rd, warn, notes)
    hip = (python.get("torch") or {}).get("hip")
    doc: dict = {
        "schema_version": SCHEMA_VERSION,
        "debtorch_version": __version__,
        "host": "collect_env",
        "collected_at": None,
        "os": _os_section(rd, platform),
        "apt": _empty_section("collect_env does not read APT sources or the dpkg database"),
        "cpu": _cpu_section(rd),
        "memory": _empty_section("collect_env does not report RAM, swap, /dev/shm or resource limits"),
        "storage": _empty_section("collect_env does not report disks or filesystems"),
        "nvidia": _nvidia_section(rd, platform, hip, warn, smi, notes),
        "cuda": _cuda_section(rd),
        "python": python,
        "env": _env_section(rd),
        "network": _empty_section("collect_env does not report network interfaces or InfiniBand ports"),
    }
    if platform in ("windows", "macos"):
        notes.append(f"a {'Windows' if platform == 'windows' else 'macOS'} host: debtorch's checks are for Linux (Debian)")
    elif platform == "linux" and doc["os"].get("id") not in (None, "debian"):
        notes.append(f"not Debian ({doc['os'].get('pretty_name')}): the Debian-specific fixes may not apply")
    if rd.repeats >= MIN_CORE:
        notes.append("the text holds more than one report; the first one was read")
    if (doc["os"].get("wsl") or 0) >= 1:
        notes.append("WSL: the NVIDIA driver is the Windows host's; install drivers on Windows, not in the distribution")
    fmt, evidence = _format(rd)
    words, fields = _lacking(doc, rd, smi)
    doc["collect_env"] = {
        "format": fmt,
        "format_evidence": evidence,
        "platform": platform,
        "lacking": words,
        "lacking_fields": fields,
        "extra_nvidia_smi": smi["present"],
        "truncated": not rd.lib_lines and "libs" not in rd.values,
        "torch_warnings": warn["messages"] + [v for v in warn["errors"].values() if v not in warn["messages"]],
        "notes": notes,
        "raw": {k: rd.raw[k] for k in rd.order},
    }
    return doc


def parse_file(path: str) -> dict:
    """Read ``path`` (``-`` for stdin) and :func:`parse` it."""
    try:
        text = inputs.read_text(path, MAX_BYTES, what="a collect_env report")
    except inputs.InputError as exc:
        raise CollectEnvError(str(exc)) from None
    return parse(text, "<stdin>" if path == "-" else str(path))
