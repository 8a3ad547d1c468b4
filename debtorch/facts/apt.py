"""APT facts: enabled components (one-line and deb822 sources), backports,
NVIDIA's CUDA repository, and installed versions of the packages that matter,
read from the dpkg status database."""

from __future__ import annotations

import bisect
import re
from typing import Iterable, Optional

from debtorch.facts import Context, Section
from debtorch.host import Host, Unavailable

SOURCES_LIST = "/etc/apt/sources.list"
SOURCES_DIR = "/etc/apt/sources.list.d"
DPKG_STATUS = "/var/lib/dpkg/status"

# Packages whose installed versions the doctor reasons about.
RELEVANT = re.compile(
    r"^(nvidia-.*|libnvidia-.*|linux-headers-.*|linux-image-.*|cuda-.*|libcudnn.*|cudnn.*"
    r"|libnccl.*|libcuda1|libcudart.*|firmware-misc-nonfree|python3-torch|python3-pynvml"
    r"|dkms|mokutil|libc6|python3|python3-venv|python3-pip|xserver-xorg-video-nvidia)$"
)

CUDA_REPO = re.compile(r"developer\.download\.nvidia\.com/compute/cuda/repos", re.I)


def parse_one_line_sources(text: str, filename: str = "") -> list[dict]:
    """Parse sources.list(5) one-line style.  Never raises."""
    entries = []
    for line in str(text).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] not in ("deb", "deb-src"):
            continue
        kind = words.pop(0)
        options: dict = {}
        if words and words[0].startswith("["):
            opt_words = []
            while words:
                w = words.pop(0)
                opt_words.append(w)
                if w.endswith("]"):
                    break
            for opt in " ".join(opt_words).strip("[] ").split():
                k, _, v = opt.partition("=")
                options[k] = v
        if len(words) < 2:
            continue
        entries.append(_entry(filename, "one-line", [kind], [words[0]], [words[1]], words[2:], True, options))
    return entries


def _entry(file: str, fmt: str, types: list, uris: list, suites: list, components: list, enabled: bool,
           options: dict) -> dict:
    """One source entry, whichever format it was written in."""
    return {"file": file, "format": fmt, "types": types, "uris": uris, "suites": suites, "components": components,
            "enabled": enabled, "options": options}


def parse_deb822_sources(text: str, filename: str = "") -> list[dict]:
    """Parse deb822-style ``.sources`` files (sources.list(5)).  Never raises."""
    entries = []
    for stanza in _stanzas(str(text)):
        fields = {k.lower(): v for k, v in stanza.items()}
        types = fields.get("types", "").split()
        if not types:
            continue
        enabled = fields.get("enabled", "yes").strip().lower() not in ("no", "false", "0")
        uris, suites, components = (fields.get(k, "").split() for k in ("uris", "suites", "components"))
        options = {k: v for k, v in fields.items() if k not in ("types", "uris", "suites", "components", "enabled")}
        entries.append(_entry(filename, "deb822", types, uris, suites, components, enabled, options))
    return entries


def _stanzas(text: str) -> Iterable[dict]:
    """RFC822-like stanzas: 'Key: value', continuation lines start with space."""
    cur: dict = {}
    last: Optional[str] = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                yield cur
            cur, last = {}, None
            continue
        if line[0] in " \t":
            if last is not None:
                cont = line.strip()
                cur[last] = (cur[last] + "\n" + ("" if cont == "." else cont)).strip("\n")
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last = key.strip()
        cur[last] = value.strip()
    if cur:
        yield cur


# Where _stanzas ends a stanza: a run of white space between two "\n" is only blank lines,
# whatever other line breaks it holds.  And where a "Package:" line may be: the name ends at
# any line break _stanzas splits on (str.splitlines).
_BLANK_RUN = re.compile(r"\n[^\S\n]*\n")
_PACKAGE_KEY = re.compile(r"Package[^\S\n]*:([^\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]*)")


def _wanted_blocks(text: str, wanted: re.Pattern[str]) -> Iterable[str]:
    """The runs of stanzas of ``text`` that may name a package ``wanted`` matches.  A desktop's
    /var/lib/dpkg/status has thousands of stanzas and debtorch wants a few dozen, so the text
    is searched for "Package" once instead of being read line by line (the doctor's largest
    cost on such a machine).  Blocks are cut only where _stanzas ends a stanza too, and kept
    when any "Package:" in them matches, so the stanzas read from the kept blocks are the ones
    that reading every stanza would keep."""
    cuts = [m.span() for m in _BLANK_RUN.finditer(text)]
    starts = [c[1] for c in cuts]
    last = None
    for m in _PACKAGE_KEY.finditer(text):
        if not wanted.match(m.group(1).strip()):
            continue
        i = bisect.bisect_right(starts, m.start())  # the blank runs that end at or before it
        if i == last:
            continue
        last = i
        begin, end = 0, len(text)      # the block between the blank runs around it
        if i:
            begin = starts[i - 1]
        if i < len(cuts):
            end = cuts[i][0]
        yield text[begin:end]


def parse_dpkg_status(text: str, wanted: re.Pattern[str] = RELEVANT) -> dict:
    """Installed packages matching ``wanted``: {name: {version, arch, status}}.  Never raises."""
    out = {}
    text = str(text)
    blocks = [text] if wanted is None else _wanted_blocks(text, wanted)
    for stanza in (s for block in blocks for s in _stanzas(block)):
        name = stanza.get("Package")
        if not name or (wanted is not None and not wanted.match(name)):
            continue
        status = stanza.get("Status", "")
        words = status.split()
        state = words[-1] if words else ""
        if state not in ("installed", "half-configured", "unpacked", "half-installed", "triggers-pending", "triggers-awaited"):
            continue
        out[name] = {"version": stanza.get("Version"), "arch": stanza.get("Architecture"), "status": state}
    return out


def trim_dpkg_status(text: str) -> str:
    """Keep only the stanzas debtorch reads (for recorded hosts)."""
    kept = []
    for block in re.split(r"\n\s*\n", text):
        m = re.search(r"^Package:\s*(\S+)", block, re.M)
        if m and RELEVANT.match(m.group(1)):
            kept.append(block.strip("\n"))
    return "\n\n".join(kept) + "\n"


def summarise(entries: list[dict]) -> dict:
    """The suites the enabled ``deb`` entries name, in order, and whether NVIDIA's CUDA
    repository is one of the sources.  Which suites are Debian's, and so which components
    Debian's archive gives, is the machine view's question (debtorch/machine/system.py)."""
    suites: list = []
    cuda_repo = False
    for e in entries:
        if not e["enabled"] or "deb" not in e["types"]:
            continue
        cuda_repo = cuda_repo or any(CUDA_REPO.search(uri) for uri in e["uris"])
        suites.extend(s for s in e["suites"] if s not in suites)
    return {"suites": suites, "cuda_repo": cuda_repo}


def collect(host: Host, ctx: Context) -> dict:
    sec = Section()
    entries: list = []
    files: list = []
    try:
        entries += parse_one_line_sources(host.read_text(SOURCES_LIST), SOURCES_LIST)
        files.append(SOURCES_LIST)
    except Unavailable:
        pass
    for name in host.try_listdir(SOURCES_DIR):
        path = f"{SOURCES_DIR}/{name}"
        if name.endswith(".list"):
            parser = parse_one_line_sources
        elif name.endswith(".sources"):
            parser = parse_deb822_sources
        else:
            continue  # APT ignores other names (e.g. *.disabled)
        try:
            entries += parser(host.read_text(path), path)
            files.append(path)
        except Unavailable:
            continue
    sec["source_files"] = files
    sec["sources"] = entries
    sec.update(summarise(entries))
    if not files:
        sec.unknown("sources", "no APT sources found")

    try:
        sec["packages"] = parse_dpkg_status(host.read_text(DPKG_STATUS))
    except Unavailable as exc:
        sec.unknown("packages", f"{DPKG_STATUS}: {exc.reason}")
    kernel = host.try_read("/proc/sys/kernel/osrelease")
    if kernel:
        kernel = kernel.strip()
        pkg = f"linux-headers-{kernel}"
        sec["running_kernel_headers"] = {
            "package": pkg,
            "installed": bool((sec.get("packages") or {}).get(pkg)) if sec.get("packages") is not None else None,
            # DKMS builds against /lib/modules/<release>/build; a custom kernel may have it without a package.
            "build_dir": host.exists(f"/lib/modules/{kernel}/build"),
        }
    else:
        sec.unknown("running_kernel_headers", "kernel release unknown")
    return sec
