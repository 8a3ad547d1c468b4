"""PyTorch's wheels (checks/torch_wheels.toml; docs/knowledge.md): a row covers every release of its
series, or only its ``releases`` (1.3.0 and 1.3.1 were built for different GPUs), on its ``platform``,
for the CPython versions in ``python``.  Which variants a release has, how its files are named and
what glibc they need, the pin that names one wheel, the variant that runs on a driver and GPUs, and
the CPU architectures PyTorch publishes Linux wheels for."""

from __future__ import annotations

import re
from typing import Any, List, Optional, Tuple

from packaging.version import Version

from debtorch import versions
from debtorch.knowledge.archlists import arch_support
from debtorch.knowledge.cuda import driver_cuda_supports, driver_supports
from debtorch.knowledge.tables import Knowledge, Row, load

PIP_INDEX = "https://download.pytorch.org/whl/"


def _norm_platform(platform: str) -> str:
    p = str(platform).lower().replace("_", "-")
    if "s390x" in p:
        return "linux-s390x"
    return "linux-aarch64" if ("aarch64" in p or "arm64" in p or "sbsa" in p) else "linux-x86_64"


def _wheel_rows(kb: Knowledge, series: str, platform: str, version: Optional[str] = None) -> List[Row]:
    """The rows of a series, or of one release of it: where rows name releases, the newest named
    release not newer than ``version`` (with no version, the newest: what ``torch==X.Y.*`` installs)."""
    entries = kb.wheel_index.get((_norm_platform(platform), series), [])
    named = sorted({rel for rel, _ in entries if rel}, key=Version)
    fit = [r for r in named if version is None or Version(r) <= Version(version)]
    pick = None
    if fit:
        pick = fit[-1]
    elif named:
        pick = named[0]          # older than every named release: the oldest
    return [row for rel, row in entries if rel is None or rel == pick]


def python_fits(row: Row, python: Optional[str]) -> bool:
    """The row publishes wheels for CPython ``python`` ("3.11"); True when the Python is unknown."""
    return python is None or python in row.get("python", ())


def wheel_files(release: str, variant: str, platform: str = "linux-x86_64") -> Optional[Row]:
    """The [[files]] row naming the files of ``release`` ("2.13.0") of ``variant`` on ``platform``:
    their local ``label`` ("variant" or "none") and platform ``tag``; a row naming the variant
    before one for every variant.  None where the table does not name the release."""
    rows = load().files_index.get((_norm_platform(platform), release), [])
    named = [r for r in rows if variant in r.get("variants", ())]
    general = [r for r in rows if not r.get("variants")]
    found = (named or general)[:1]
    return dict(found[0]) if found else None


def releases(series: str, platform: str = "linux-x86_64") -> List[str]:
    """The releases of ``series`` ("2.5" -> ["2.5.0", "2.5.1"]) the [[files]] table names for
    ``platform``, oldest first."""
    return list(load().releases_index.get((_norm_platform(platform), series), []))


# The glibc a manylinux tag needs (PEP 600; the legacy names PEP 513, 571, 599).  A plain linux_* tag
# says nothing: such files are taken to run wherever their release's others do.
_LEGACY_MANYLINUX = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}


def files_glibc(release: Optional[str], variant: str, platform: str = "linux-x86_64", series: str = "") -> Optional[str]:
    """The glibc the files of ``release`` of ``variant`` need ("2.28" for manylinux_2_28 files), from
    [[files]]; for ``release`` None, the newest release of ``series`` (what ``torch==2.14.*`` installs).
    None where the tag does not say or the table does not name the release."""
    if release is None:
        known = releases(series, platform) if series else []
        release = known[-1] if known else None
    files = wheel_files(release, variant, platform) if release else None
    if files is None:
        return None
    needs = []
    for tag in files["tag"].split("."):
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag, re.ASCII)
        legacy = re.fullmatch(r"(manylinux\d+)_\w+", tag)
        if m:
            needs.append(f"{m.group(1)}.{m.group(2)}")
        elif legacy and legacy.group(1) in _LEGACY_MANYLINUX:
            needs.append(_LEGACY_MANYLINUX[legacy.group(1)])
    return min(needs, key=Version) if needs else None


def glibc_fits(need: Optional[str], glibc: Optional[str]) -> bool:
    """Files that need glibc ``need`` run on a machine with ``glibc``; True when either is unknown."""
    if not need or not glibc or versions.numeric(glibc) is None:
        return True
    return Version(need) <= Version(glibc)


def pin(version: Optional[str], series: str, variant: str, platform: str = "linux-x86_64") -> str:
    """The requirement that names one wheel: ``torch==2.13.0+cu126`` (the release with the local
    label its files carry: ``==2.13.0`` alone matches any label, PEP 440), ``torch==1.7.1`` where
    the files have none, ``torch==2.14.*`` for the newest release of a series."""
    if not version:
        return f"torch=={series}.*"
    files = wheel_files(version, variant, platform)
    unlabelled = files is not None and files["label"] == "none"
    return f"torch=={version}" if unlabelled else f"torch=={version}+{variant}"


def _pip(version: Optional[str], series: str, variant: str, platform: str) -> str:
    return f"pip install {pin(version, series, variant, platform)} --index-url {PIP_INDEX}{variant}"


def _wheel_answer(row: Row, series: str, version: Optional[str]) -> Row:
    answer = dict(row)
    answer.setdefault("platform", "linux-x86_64")
    answer.setdefault("confidence", "confirmed")
    answer["series"] = series
    answer["release"] = version
    answer["pip"] = _pip(version, series, row["variant"], answer["platform"])
    files = wheel_files(version, row["variant"], answer["platform"]) if version else None
    answer["unlabelled"] = files is not None and files["label"] == "none"
    return answer


def wheel(torch_version: str, variant: Optional[str] = None, platform: str = "linux-x86_64") -> Optional[Row]:
    """The official wheel row (plus ``series`` and ``pip``) for a release as torch reports it
    ("2.5.1+cu124") or plain ("2.13.0", "2.13"); ``variant`` defaults to the version's local part."""
    parsed = versions.torch_version(torch_version)
    if parsed is None:
        return None
    want = (variant.strip().lower() if isinstance(variant, str) and variant.strip() else None) or parsed["local"]
    if not want:
        return None
    row = next((r for r in _wheel_rows(load(), parsed["series"], platform, parsed["version"])
                if r["variant"] == want), None)
    return None if row is None else _wheel_answer(row, parsed["series"], parsed["version"])


def variants(torch_version: str, platform: str = "linux-x86_64") -> List[str]:
    """The official variants of a release ("cpu", "cu118", ...), sorted; [] if unknown."""
    parsed = versions.torch_version(torch_version)
    if parsed is None:
        return []
    return sorted({r["variant"] for r in _wheel_rows(load(), parsed["series"], platform, parsed["version"])})


def known_series(platform: str = "linux-x86_64") -> List[str]:
    """The PyTorch release series the table knows, oldest first ("1.0" ... "2.14")."""
    plat = _norm_platform(platform)
    return sorted({s for p, s in load().wheel_index if p == plat}, key=Version)


def _nearest_series(series: str, platform: str) -> Optional[str]:
    known = known_series(platform)
    if not known or series in known:
        return series if known else None
    older = [s for s in known if Version(s) <= Version(series)]
    return older[-1] if older else known[0]


def latest_series(platform: str = "linux-x86_64") -> Optional[str]:
    """The newest PyTorch release series the table knows ("2.14"), or None."""
    known = known_series(platform)
    return known[-1] if known else None


def _driver_verdict(cuda: str, driver_version: Optional[str], driver_cuda: Optional[str],
                    driver_platform: str) -> Tuple[Optional[str], str]:
    """Whether the driver runs a wheel built with ``cuda``, and why: by its version, else by the newest
    CUDA it runs, else "unknown"."""
    if driver_version:
        return driver_supports(driver_version, cuda, driver_platform)
    if driver_cuda:
        return driver_cuda_supports(driver_cuda, cuda), f"the driver runs CUDA {driver_cuda}"
    return "unknown", "the driver is unknown"


# Stable variants before legacy ones, legacy before experimental (RELEASE.md's labels): where
# the driver does not decide (unknown, or it runs several), the tested build is the answer.
STATUS_RANK = {"stable": 2, "legacy": 1}


def best_variant_for_driver(torch_version: str, driver_version: Optional[str], compute_capability: Any,
                            platform: str = "linux-x86_64", exclude: Tuple[str, ...] = (),
                            driver_platform: str = "linux", python: Optional[str] = None,
                            driver_cuda: Optional[str] = None, glibc: Optional[str] = None) -> Optional[Row]:
    """The official CUDA variant of a release (or of the newest release the table knows not newer
    than it) that runs on this driver and has code for every GPU of ``compute_capability`` (one, or
    a list; empty: the GPU is not known), published for ``platform`` and ``python``: SASS over PTX,
    then full driver support over minor-version compatibility, then stable over legacy over
    experimental, then the newer CUDA.  A ``driver_version`` of None judges by ``driver_cuda`` (the
    newest CUDA the driver runs), else by the GPU alone; ``exclude`` names variants not to answer;
    ``glibc`` ("2.27") leaves out files that need a newer one ([[files]] tags)."""
    parsed = versions.torch_version(torch_version)
    ccs = list(compute_capability) if isinstance(compute_capability, (list, tuple)) else [compute_capability]
    if parsed is None or any(versions.parse_cc(cc) is None for cc in ccs) or not (ccs or driver_version or driver_cuda):
        return None
    if driver_version is not None and versions.numeric(driver_version) is None:
        return None
    kb = load()
    series = _nearest_series(parsed["series"], platform)
    if series is None:
        return None
    same = series == parsed["series"]
    rank = {"full": 2, "minor-compat": 1, "unknown": 1, "sass": 2, "ptx": 1}
    best, best_key = None, None
    for row in _wheel_rows(kb, series, platform, parsed["version"] if same else None):
        if (not row.get("cuda") or not row["variant"].startswith("cu") or row["variant"] in exclude
                or not python_fits(row, python)):
            continue
        need = files_glibc(parsed["version"] if same else None, row["variant"], platform, series)
        if not glibc_fits(need, glibc):
            continue
        dv, ddetail = _driver_verdict(row["cuda"], driver_version, driver_cuda, driver_platform)
        # Every GPU must have code in the wheel; the one served worst decides.
        av, adetail = min((arch_support(cc, row["arch_list"]) for cc in ccs), key=lambda v: rank.get(v[0], 0),
                          default=("sass", "the GPU is not known"))
        if dv not in ("full", "minor-compat", "unknown") or av not in ("sass", "ptx"):
            continue
        key = (rank[av], rank[dv], STATUS_RANK.get(row["status"], 0), versions.numeric(row["cuda"]))
        if best_key is None or key > best_key:
            best_key = key
            best = _wheel_answer(row, series, parsed["version"] if same else None)
            best.update(driver_verdict=dv, arch_verdict=av, detail=f"{ddetail}; {adetail}", nearest=not same)
    return best




def wheel_machine(arch: Any) -> Optional[Row]:
    """The torch_wheels.toml [[machine]] row of a CPU architecture as ``uname -m``, Windows, macOS or
    Debian name it ("x86_64", "AMD64", "arm64"); None where PyTorch publishes no Linux wheels."""
    if not isinstance(arch, str) or not arch.strip():
        return None
    text = arch.strip().lower()
    return next((dict(row) for row in load().tables["torch_wheels.toml"]["machine"]
                 if text == row["machine"] or text in (a.lower() for a in row.get("aliases", []))), None)


def wheel_machines() -> List[str]:
    """The architectures PyTorch publishes Linux wheels for, as ``uname -m`` names them."""
    return [row["machine"] for row in load().tables["torch_wheels.toml"]["machine"]]
