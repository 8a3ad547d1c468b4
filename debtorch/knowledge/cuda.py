"""CUDA releases (checks/cuda_driver.toml, checks/cuda_arch.toml): the driver each needs, whether a
driver runs one (in full or through minor-version compatibility), the newest CUDA a driver runs, the
last driver branch of a retired architecture, and what nvcc of a release compiles machine code for."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from packaging.version import Version

from debtorch import versions
from debtorch.knowledge.archlists import sass_list
from debtorch.knowledge.tables import Knowledge, Row, cc_of, load, minor_of, version_of


def _platform_key(platform: str) -> str:
    return "windows" if str(platform).lower().startswith(("win", "wsl")) else "linux"



def _toolkit_row(kb: Knowledge, cuda: Version) -> Optional[Row]:
    rel = cuda.release
    rows = kb.by_minor.get(minor_of(cuda))
    if not rows:
        return None
    if len(rel) < 3:
        return rows[0]
    fitting = [r for r in rows if version_of(r["cuda"]).release[2:3] <= rel[2:3]]
    return fitting[-1] if fitting else rows[0]


def _driver_for(row: Row, kind: str, platform: str) -> Optional[str]:
    """The driver column of a toolkit (kind="driver") or minor_compat (kind="min_driver") row."""
    plat = _platform_key(platform)
    value = row.get(f"{kind}_{plat}")
    if value is None and plat == "windows":    # CUDA 13 rows have no Windows column: the Linux branch number
        value = row.get(f"{kind}_linux") if row.get("cuda", "").startswith("13") or row.get("major") == 13 else None
    return value


def min_driver(cuda_version: str, platform: str = "linux") -> Optional[Row]:
    """The drivers a CUDA release needs (``toolkit_driver`` None for a release newer than the table,
    ``minor_compat_driver`` None without minor-version compatibility).  A bare "12.6" means the GA
    release; a wheel built with 12.6.3 needs the 12.6 Update 3 driver for the full feature set.
    ``platform`` "windows" (or "wsl": WSL reports the Windows driver) reads the Windows column."""
    cuda = versions.numeric(cuda_version)
    if cuda is None:
        return None
    kb = load()
    row = _toolkit_row(kb, cuda)
    mc = kb.minor_compat.get(cuda.release[0])
    if row is None and mc is None:
        return None
    mc_driver = _driver_for(mc, "min_driver", platform) if mc and mc["supported"] else None
    return {
        "cuda": str(cuda),
        "release": row["release"] if row else None,
        "toolkit_driver": _driver_for(row, "driver", platform) if row else None,
        "minor_compat": bool(mc_driver),
        "minor_compat_driver": mc_driver,
        "caveats": [c["text"] for c in kb.caveats if c["applies_to"] == "minor-compat"] if mc_driver else [],
        "sources": [r["source"] for r in (row, mc) if r],
    }


def _family(kb: Knowledge, driver: Version, platform: str) -> Optional[int]:
    """The newest CUDA major the driver runs through minor-version compatibility."""
    need = {m: _driver_for(r, "min_driver", platform) for m, r in kb.minor_compat.items() if r["supported"]}
    majors = [m for m, d in need.items() if d and driver >= version_of(d)]
    return max(majors) if majors else None


def driver_supports(driver_version: str, cuda_version: str, platform: str = "linux") -> Tuple[str, str]:
    """Whether a driver runs code built with a CUDA release: ("full", "minor-compat", "too-old" or
    "unknown", a sentence saying why)."""
    driver = versions.numeric(driver_version)
    if driver is None:
        return "unknown", f"not a driver version: {driver_version!r}"
    need = min_driver(cuda_version, platform)
    if need is None:
        return "unknown", f"CUDA {cuda_version!r} is not in checks/cuda_driver.toml"
    kb = load()
    cuda = need["cuda"]
    toolkit = need["toolkit_driver"]
    if toolkit and driver >= version_of(toolkit):
        return "full", f"driver {driver_version} >= {toolkit}, the {need['release']} toolkit driver"
    mc = need["minor_compat_driver"]
    if mc and driver >= version_of(mc):
        older = f"older than the {need['release']} toolkit driver {toolkit}" if toolkit else f"CUDA {cuda} is newer than the table"
        return "minor-compat", (f"driver {driver_version} is {older}; it runs CUDA {cuda} through minor-version "
                                f"compatibility (>= {mc}) with limited features; PTX JIT (+PTX archs, run-time "
                                "compiled kernels) needs the toolkit driver")
    wants = f">= {toolkit}" if toolkit else "a newer driver"
    if mc:
        wants += f" (or >= {mc} with minor-version compatibility)"
    detail = f"driver {driver_version} is too old for CUDA {cuda}: needs {wants}"
    family = _family(kb, driver, platform)
    cuda_major = version_of(cuda).release[0]
    if family is not None and family < cuda_major:
        detail += (f"; a CUDA {family}.x driver runs CUDA {cuda_major} only with the cuda-compat forward-compatibility "
                   "package on data-center GPUs")
    return "too-old", detail


def driver_cuda_supports(driver_cuda: Any, cuda_version: Any) -> Optional[str]:
    """"too-old", "minor-compat" or "full" from the newest CUDA a driver runs alone (no driver
    version: a report that gives only nvidia-smi's "CUDA Version", or torch's "found version
    11040"); None when either is not understood or the CUDA major is not in the table."""
    d, t = versions.major_minor(driver_cuda), versions.major_minor(cuda_version)
    if d is None or t is None:
        return None
    if t[0] > d[0]:
        return "too-old"
    if t[0] == d[0] and t[1] > d[1]:
        # Within a major, minor-version compatibility where checks/cuda_driver.toml says the family has it.
        need = min_driver(f"{t[0]}.{t[1]}")
        if need is None:
            return None
        return "minor-compat" if need["minor_compat"] else "too-old"
    return "full"


def last_driver_branch(compute_capability: Any) -> Optional[Row]:
    """The [[last_branch]] row of a GPU's architecture ({arch, cc, branch, source}) where NVIDIA has
    retired it (Maxwell, Pascal, Volta: R580), else None."""
    cc = cc_of(compute_capability) if versions.parse_cc(compute_capability) else None
    row = next((r for r in load().tables["cuda_driver.toml"]["last_branch"] if cc and cc in r["cc"]), None)
    return dict(row) if row else None


def newest_driver_branch(platform: str = "linux") -> Optional[int]:
    """The newest driver branch the toolkit table names (615 for CUDA 13.4's R615), or None."""
    kb = load()
    branches = [int(str(_driver_for(r, "driver", platform)).split(".")[0]) for r in kb.toolkits
                if _driver_for(r, "driver", platform)]
    return max(branches) if branches else None


def max_cuda_for_driver(driver_version: str, platform: str = "linux") -> Optional[Row]:
    """The newest CUDA a driver runs: ``full`` (what nvidia-smi prints as "CUDA Version") and the
    CUDA major whose every release it runs with minor-version compatibility."""
    driver = versions.numeric(driver_version)
    if driver is None:
        return None
    kb = load()
    best = None
    for row in kb.toolkits:
        need = _driver_for(row, "driver", platform)
        if need and driver >= version_of(need):
            best = row
    family = _family(kb, driver, platform)
    full = "{}.{}".format(*minor_of(version_of(best["cuda"]))) if best else None
    parts = [f"runs CUDA up to {full} with every feature" if full else "older than every toolkit driver in the table"]
    if family is not None:
        parts.append(f"every CUDA {family}.x release through minor-version compatibility")
    return {"full": full, "full_toolkit": best["cuda"] if best else None, "full_release": best["release"] if best else None,
            "minor_compat_major": family, "detail": f"driver {driver_version} " + "; ".join(parts)}




def cuda_builds_sass(cuda_version: Any) -> Optional[Row]:
    """What nvcc of a CUDA release compiles machine code for (capabilities as "8.6", oldest first): the
    newest row of its major not newer than it (``nearest`` when it is another: "12.7" -> 12.6)."""
    cuda = versions.numeric(cuda_version) if isinstance(cuda_version, str) else None
    if cuda is None:
        return None
    want = minor_of(cuda)
    fits = [row for row in load().nvcc_rows if (r := minor_of(version_of(row["cuda"])))[0] == want[0] and r <= want]
    if not fits:
        return None
    best = fits[-1]
    sass = sass_list(best["sass"])
    return {"cuda": f"{want[0]}.{want[1]}", "row": best["cuda"], "sass": sass, "added": sass_list(best.get("added")),
            "dropped": sass_list(best.get("dropped")), "oldest": sass[0] if sass else None,
            "newest": sass[-1] if sass else None, "nearest": minor_of(version_of(best["cuda"])) != want, "source": best["source"]}


def cuda_can_build(cuda_version: Any, compute_capability: Any) -> Optional[bool]:
    """Whether nvcc of that CUDA release emits SASS that runs on the GPU (:func:`arch_support`'s rule);
    None when either is unknown."""
    cc = versions.parse_cc(compute_capability)
    info = cuda_builds_sass(cuda_version)
    if cc is None or info is None:
        return None
    return any(c[0] == cc[0] and c[1] <= cc[1] for x in info["sass"] if (c := versions.parse_cc(x)))


