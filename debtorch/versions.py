"""Version arithmetic, in one place: pure functions of text, never raising: compute capabilities, CUDA
and cuDNN versions and their integers, versions in library file names, numeric versions, PyTorch's
versions and series.  Every layer may import it; it imports nothing of debtorch.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

from packaging.version import Version

CC = Tuple[int, int]

# ---------------------------------------------------------------- compute capability

_CC_DOTTED = re.compile(r"(?:sm_?)?(\d{1,2})\.(\d)", re.ASCII)
_CC_SM = re.compile(r"(?:sm_?|compute_)?(\d{2,3})[af]?", re.ASCII)


def parse_cc(value: Any) -> Optional[CC]:
    """A compute capability from "8.6", 8.6, "sm_86", "sm_120a", "compute_90", "86",
    [8, 6], (8, 6) or {"major": 8, "minor": 6}; None when it is not one."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, dict):
        value = (value.get("major"), value.get("minor"))
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return None
        major, minor = value
    elif isinstance(value, (int, float)):  # NaN and infinities read as "nan", "inf": not one
        return parse_cc(f"{value:.1f}" if isinstance(value, float) else str(value))
    elif isinstance(value, str):
        text = value.strip().lower()
        m = _CC_DOTTED.fullmatch(text)
        if m:
            major, minor = int(m.group(1)), int(m.group(2))
        else:
            m = _CC_SM.fullmatch(text)
            if not m:
                return None
            digits = m.group(1)
            major, minor = int(digits[:-1]), int(digits[-1])
    else:
        return None
    return (major, minor) if 1 <= major <= 99 and 0 <= minor <= 9 else None


def fmt_cc(cc: Optional[CC]) -> Optional[str]:
    """(8, 6) -> "8.6"; None stays None."""
    return f"{cc[0]}.{cc[1]}" if cc else None


def cc_text(value: Any) -> Optional[str]:
    """Any spelling of a compute capability -> "8.6", or None."""
    return fmt_cc(parse_cc(value))


def sm_name(value: Any) -> Optional[str]:
    """"8.6" -> "sm_86"; None when not a compute capability."""
    cc = parse_cc(value)
    return f"sm_{cc[0]}{cc[1]}" if cc else None


# ---------------------------------------------------------------- CUDA and cuDNN integers


def _positive(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n > 0 else None


def cuda_from_int(value: Any) -> Optional[str]:
    """12020 (cudaDriverGetVersion, nvmlSystemGetCudaDriverVersion, torch's "found
    version 12020") -> "12.2"; None when not a positive integer."""
    n = _positive(value)
    return f"{n // 1000}.{(n % 1000) // 10}" if n else None


def cudnn_from_int(value: Any) -> Optional[str]:
    """torch.backends.cudnn.version(): 8906 -> "8.9.6"; 90100 -> "9.1.0"."""
    n = _positive(value)
    if n is None:
        return None
    major, rest = (n // 10000, n % 10000) if n >= 10000 else (n // 1000, n % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


# ---------------------------------------------------------------- versions in text and file names

_NUMERIC = re.compile(r"^\s*v?(\d{1,12}(?:\.\d{1,12}){0,3})\s*$", re.ASCII)   # (bounded: int() of 5,000 digits raises)
_FIRST_DOTTED = re.compile(r"(?<!\d)\d{1,12}(?:\.\d{1,12})+", re.ASCII)


def numeric(text: Any) -> Optional[Version]:
    """A purely numeric version ("535.261.03", "12.4", "v12") as a Version, or None."""
    if not isinstance(text, str):
        return None
    m = _NUMERIC.match(text)
    return Version(m.group(1)) if m else None   # the regex admits only valid ones


def loose(text: Any) -> Optional[Version]:
    """A version from text that may carry a local tag or suffix ("2.1.2+cu121", "12.1"), or None."""
    if text is None or isinstance(text, bool):
        return None
    try:
        return Version(str(text).strip().split("+")[0])
    except ValueError:  # InvalidVersion, or more digits than int() takes
        m = _FIRST_DOTTED.search(str(text))
        return Version(m.group(0)) if m else None


def first_dotted(text: Any) -> Optional[str]:
    """The first dotted number in free text ("Cuda compilation tools, release 12.2, V12.2.140" -> "12.2")."""
    m = _FIRST_DOTTED.search(text) if isinstance(text, str) else None
    return m.group(0) if m else None


def below(have: Any, want: Any) -> bool:
    """True when version ``have`` is older than ``want``; False when either is unreadable."""
    a, b = loose(have), loose(want)
    return bool(a is not None and b is not None and a < b)


def major_minor(text: Any) -> Optional[Tuple[int, int]]:
    """"12.6.3" -> (12, 6); "12" -> (12, 0); None when unreadable."""
    v = loose(text)
    if v is None:
        return None
    rel = v.release + (0,)
    return rel[0], rel[1]


_SONAME = re.compile(r"\.so\.(\d+(?:\.\d+)*)$", re.ASCII)
_DYLIB = re.compile(r"(\d+(?:\.\d+)*)\.dylib$", re.ASCII)
_DLL = re.compile(r"64_(\d+)\.dll$", re.I | re.ASCII)


def library_version(path: Any) -> Optional[str]:
    """The version in a library's file name: "libcudnn.so.8.9.2" -> "8.9.2",
    "/x/libcudart.so.12" -> "12", "libcudnn.8.dylib" -> "8", "cudnn64_7.dll" -> "7"."""
    if not isinstance(path, str):
        return None
    base = re.split(r"[\\/]", path.strip())[-1]
    for pattern in (_SONAME, _DYLIB, _DLL):
        m = pattern.search(base)
        if m:
            return m.group(1)
    return None


# ---------------------------------------------------------------- PyTorch versions

_TORCH = re.compile(r"^\s*v?(\d{1,12})\.(\d{1,12})(?:\.(\d{1,12}))?([A-Za-z0-9.]*?)(?:\+([A-Za-z0-9_.]+))?\s*$", re.ASCII)
_SERIES = re.compile(r"\s*(\d{1,12})\.(\d{1,12})\s*", re.ASCII)


def torch_version(text: Any) -> Optional[dict]:
    """"2.5.1+cu124" -> {"series": "2.5", "version": "2.5.1", "local": "cu124"};
    "2.13" -> {"series": "2.13", "version": None, "local": None}; None when unreadable."""
    if not isinstance(text, str):
        return None
    m = _TORCH.match(text)
    if not m:
        return None
    major, minor, patch, _pre, local = m.groups()
    series = f"{int(major)}.{int(minor)}"
    return {"series": series, "version": f"{series}.{int(patch)}" if patch is not None else None,
            "local": local.split(".")[0].lower() if local else None}


def is_release(text: Any) -> bool:
    """A released build's version ("1.7.1", "2.5.1+cu124"): no pre-release, nightly or source-build
    part ("1.8.0a0+af2250e", "2.6.0.dev20241126+cu124"), so an official wheel's row may describe it."""
    m = _TORCH.match(text) if isinstance(text, str) else None
    return bool(m and m.group(3) is not None and not m.group(4)
                and (m.group(5) is None or re.fullmatch(r"cu\d+|cpu|rocm[\d.]+|xpu", m.group(5).lower())))


def series(text: Any) -> Optional[str]:
    """"2.6" -> "2.6" (exactly a release series), else None."""
    m = _SERIES.fullmatch(text) if isinstance(text, str) else None
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def torch_series_tuple(text: Any) -> Optional[Tuple[int, int]]:
    """"2.5.1+cu124" -> (2, 5)."""
    parsed = torch_version(text)
    return major_minor(parsed["series"]) if parsed else None


def cuda_tag(cuda: Any) -> Optional[str]:
    """"12.4" -> "cu124" (the local tag of PyTorch's wheels)."""
    mm = major_minor(cuda)
    return f"cu{mm[0]}{mm[1]}" if mm else None


def variant_of(version: Any, cuda: Any = None, hip: Any = None) -> Optional[str]:
    """The wheel index name of a torch build ("cu126", "rocm6.2", "cpu", "xpu"): from the
    CUDA or HIP it was built with, else its version's local tag; None when nothing tells."""
    if cuda and (tag := cuda_tag(cuda)):
        return tag
    if hip and (mm := major_minor(hip)):
        return f"rocm{mm[0]}.{mm[1]}"
    if version is not None and (local := re.search(r"\+(cu\d+|rocm[\d.]+|cpu|xpu)", str(version))):
        return local.group(1)
    if version is not None and not cuda and not hip:
        return "cpu"
    return None
