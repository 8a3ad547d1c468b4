"""What the doctor knows, read from the data files in ``checks/``.

The tables (docs/knowledge.md: what each means, where the folder is found, why nothing is cached on
disk) are validated when a check first asks for them, and answered as pure functions (what each
answers: the API table of docs/knowledge.md).  A lookup never raises on odd input: it answers
``None`` or an "unknown" verdict; only a malformed data file raises :class:`KnowledgeError`, whose
message is one line naming the file and the row.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, cast

from packaging.version import Version

from debtorch import inputs, schema, versions
from debtorch.findings import DATA_DIRS

ENV_DIR = "DEBTORCH_CHECKS_DIR"
SYSTEM_DIR = DATA_DIRS[-1]
PIP_INDEX = "https://download.pytorch.org/whl/"
CONFIDENCE = ("confirmed", "unconfirmed", "derived")
Row = Dict[str, Any]


class KnowledgeError(ValueError):
    """A data file in checks/ is missing or malformed (one line: file, row, problem)."""


# --------------------------------------------------------------------------
# Where the data is


def checks_dir() -> Path:
    """The folder the data is read from (docs/knowledge.md)."""
    if env := os.environ.get(ENV_DIR):
        path = Path(env)
        if not path.is_dir():
            raise KnowledgeError(f"{ENV_DIR}={env}: not a folder")
        return path
    found = _installed_dir()
    if found is None:
        raise KnowledgeError("no checks/ data folder found (looked in " + ", ".join(map(str, DATA_DIRS)) + ")")
    return found


@functools.lru_cache(maxsize=1)
def _installed_dir() -> Optional[Path]:
    """The first candidate folder holding the data; looked up once per process (load() is asked
    for every check of every node a fleet compares)."""
    return next((path for path in DATA_DIRS if (path / "cuda_driver.toml").is_file()), None)


# --------------------------------------------------------------------------
# Schema (debtorch/schema.py): each file's arrays of tables; a column is required
# unless ``optional`` names it; every row has a source, a confidence and a note.

STR = schema.Value(("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip())))
VERSION = schema.Value(("a version like 12.4 or 535.261.03",
                        lambda v: isinstance(v, str) and bool(versions.numeric(v))))
CC = schema.Value(("a compute capability like 8.6", lambda v: isinstance(v, str) and bool(versions.parse_cc(v))))
STRS = schema.List(STR, min_len=1, expect="an array of strings")
SERIES = schema.List(schema.Value(('a release series like "2.6"',
                                   lambda v: isinstance(v, str) and bool(versions.series(v)))), min_len=1)
RELEASES = schema.List(schema.Value(('a release like "2.13.0"', lambda v: isinstance(v, str) and versions.is_release(v)
                                     and "+" not in v)), min_len=1)
ARCHS = schema.Value(('a string like "7.5;8.0;9.0+PTX" (empty for CPU builds)', lambda v: isinstance(v, str)),
                     ("an arch list", lambda v: parse_arch_list(v, strict=True)))
_COMMON = {"source": STR, "confidence": schema.one_of(*CONFIDENCE), "note": STR}


def _rows(optional: str = "", **columns: schema.Spec) -> schema.List:
    required = tuple(c for c in columns if c not in optional.split()) + ("source",)
    return schema.List(schema.Table({**columns, **_COMMON}, required), expect="an array of tables")


_FILES: Dict[str, Dict[str, schema.List]] = {
    "cuda_driver.toml": {
        "toolkit": _rows("driver_windows", cuda=VERSION, release=STR, driver_linux=VERSION, driver_windows=VERSION),
        "minor_compat": _rows("min_driver_linux min_driver_windows max_driver_exclusive", major=schema.integer(),
                              supported=schema.BOOL, min_driver_linux=VERSION, min_driver_windows=VERSION,
                              max_driver_exclusive=VERSION),
        "caveat": _rows(id=STR, applies_to=STR, text=STR),
        # [[last_branch]]: the last driver branch of an architecture NVIDIA retired.
        "last_branch": _rows(arch=STR, cc=schema.List(CC, min_len=1), branch=VERSION),
    },
    "torch_wheels.toml": {
        # [[wheel]]: ``python`` the CPython versions ("3.11") the row's wheels are
        # published for; ``releases`` narrows a row to some releases of its series ("1.3.1").
        "wheel": _rows("platform cuda cudnn nccl releases", torch=SERIES, variant=STR, platform=STR, cuda=VERSION,
                       arch_list=ARCHS, cudnn=VERSION, nccl=VERSION, status=STR, python=STRS, releases=STRS),
        "machine": _rows("aliases", machine=STR, aliases=STRS, builds=STRS),
        # [[files]]: how the files of ``releases`` are named on the index (their local label, their
        # platform tag), for every variant or for ``variants``.
        "files": _rows("platform variants", releases=RELEASES, platform=STR, variants=STRS,
                       label=schema.one_of("variant", "none"), tag=STR),
    },
    "gpus.toml": {
        "gpu": _rows("examples", name=STR, cc=CC, arch=STR, segment=STR, match=STRS, examples=STRS),
    },
    "debian.toml": {
        "release": _rows("aliases point_release checked nvidia_driver_debian nvidia_driver_security "
                         "nvidia_driver_backports tesla_drivers open_kernel_package open_kernel_component "
                         "firmware_packages firmware_component nvidia_cuda_toolkit nvidia_cudnn python3_torch "
                         "python3_torch_cuda max_cuda_full max_cuda_minor_compat",
                         version=STR, codename=STR, aliases=STRS, point_release=STR, checked=STR, python=VERSION,
                         nvidia_driver=VERSION, nvidia_driver_debian=STR, nvidia_driver_component=STR,
                         nvidia_driver_security=VERSION, nvidia_driver_backports=VERSION, tesla_drivers=STRS,
                         open_kernel_package=STR, open_kernel_component=STR, firmware_packages=STRS,
                         firmware_component=STR, nvidia_cuda_toolkit=VERSION, nvidia_cudnn=VERSION,
                         python3_torch=VERSION, python3_torch_cuda=VERSION, max_cuda_full=VERSION,
                         max_cuda_minor_compat=STR),
        "archived": _rows(version=STR, codename=STR),
    },
    "thresholds.toml": {
        "threshold": _rows(name=STR, unit=STR, value=schema.Value(
            ("a string or a finite number", lambda v: isinstance(v, str) or inputs.finite(v)))),
    },
    "pci.toml": {
        "device": _rows(id=STR, name=STR, chip=STR, cc=CC),
        "chip": _rows(chip=STR, arch=STR, cc=CC),
    },
    "cuda_arch.toml": {
        "nvcc": _rows("added dropped", cuda=VERSION, sass=ARCHS, added=ARCHS, dropped=ARCHS),
    },
    "debian_packages.toml": {
        # [[package]]: where Debian's archive has a package a fix names (packaging/apt_names.py writes it).
        "package": _rows("needs", name=STR, release=STR, component=STR, architectures=STRS,
                         needs=schema.List(STR, expect="an array of strings"), checked=STR),
        # [[architecture]]: Debian's name of a CPU architecture as `uname -m` prints it.
        "architecture": _rows(debian=STR, uname=STRS),
    },
}
SCHEMA: Dict[str, schema.Table] = {name: schema.Table(tables, tuple(tables)) for name, tables in _FILES.items()}


def _read_tables(path: Path) -> Dict[str, List[Row]]:
    """The checked tables of one data file (read through the one door, :mod:`debtorch.inputs`)."""
    try:
        text = inputs.read_bytes(path, inputs.MAX_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise KnowledgeError(f"{path}: missing") from None
    except inputs.NotRegular as exc:
        raise KnowledgeError(str(exc)) from None
    except OSError as exc:
        raise KnowledgeError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise KnowledgeError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    data = schema.load_toml(text, str(path), SCHEMA[path.name], KnowledgeError)
    for table, rows in data.items():
        for i, row in enumerate(rows):
            if row.get("confidence") == "unconfirmed" and "note" not in row:
                bad = schema.Invalid(f"{table}[{i}].note", "missing: an unconfirmed row says what is unconfirmed")
                raise KnowledgeError(schema.place(bad, str(path), text))
    return data


class _Tables(Mapping):
    """file name -> its validated tables, each file read on first use: the doctor on a
    machine without GPUs never parses the 900 PCI ids."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._loaded: Dict[str, Dict[str, List[Row]]] = {}

    def __getitem__(self, name: str) -> Dict[str, List[Row]]:
        if name not in self._loaded:
            if name not in SCHEMA:
                raise KeyError(name)
            self._loaded[name] = _read_tables(self.folder / name)
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(SCHEMA)

    def __len__(self) -> int:
        return len(SCHEMA)


class Knowledge:
    """The validated tables of one checks/ folder, with lookup indexes (both built on first use)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.tables = _Tables(folder)
        missing = [name for name in SCHEMA if not (folder / name).exists()]
        if missing:
            raise KnowledgeError(f"{folder / missing[0]}: missing")

    def validate(self) -> "Knowledge":
        """Read and check every file now (a broken folder is bad input before any check runs)."""
        for name in SCHEMA:
            _ = self.tables[name]
        _ = self.gpu_keys
        return self

    @functools.cached_property
    def toolkits(self) -> List[Row]:
        return sorted(self.tables["cuda_driver.toml"]["toolkit"], key=lambda r: _version(r["cuda"]))

    @functools.cached_property
    def by_minor(self) -> Dict[Tuple[int, int], List[Row]]:
        out: Dict[Tuple[int, int], List[Row]] = {}
        for row in self.toolkits:
            out.setdefault(_minor(_version(row["cuda"])), []).append(row)
        return out

    @functools.cached_property
    def minor_compat(self) -> Dict[int, Row]:
        return {r["major"]: r for r in self.tables["cuda_driver.toml"]["minor_compat"]}

    @property
    def caveats(self) -> List[Row]:
        return self.tables["cuda_driver.toml"]["caveat"]

    @property
    def wheels(self) -> List[Row]:
        return self.tables["torch_wheels.toml"]["wheel"]

    @functools.cached_property
    def files(self) -> List[Row]:
        return self.tables["torch_wheels.toml"]["files"]

    @functools.cached_property
    def files_index(self) -> Dict[Tuple[str, str], List[Row]]:
        """(platform, release) -> the [[files]] rows naming it."""
        index: Dict[Tuple[str, str], List[Row]] = {}
        for row in self.files:
            for rel in row["releases"]:
                index.setdefault((row.get("platform", "linux-x86_64"), rel), []).append(row)
        return index

    @functools.cached_property
    def releases_index(self) -> Dict[Tuple[str, str], List[str]]:
        """(platform, series) -> its releases [[files]] names, oldest first."""
        index: Dict[Tuple[str, str], set] = {}
        for (platform, rel) in self.files_index:
            parsed = versions.torch_version(rel)
            if parsed:
                index.setdefault((platform, parsed["series"]), set()).add(rel)
        return {k: sorted(v, key=Version) for k, v in index.items()}

    @functools.cached_property
    def gpu_keys(self) -> List[Tuple[Tuple[str, ...], str, str]]:
        keys = []
        for i, row in enumerate(self.tables["gpus.toml"]["gpu"]):
            for key in row["match"]:
                tokens = tuple(_gpu_tokens(key))
                if not tokens:
                    bad = schema.Invalid(f"gpu[{i}].match", f"must name a GPU in every entry (got {schema.show(key)})")
                    raise KnowledgeError(schema.place(bad, str(self.folder / "gpus.toml")))
                keys.append((tokens, _cc(row["cc"]), row["name"]))
        return keys

    @property
    def debian(self) -> List[Row]:
        return self.tables["debian.toml"]["release"]

    @property
    def all_debian(self) -> List[Row]:
        """The releases, current and archived."""
        return self.debian + self.tables["debian.toml"]["archived"]

    @functools.cached_property
    def thresholds(self) -> Dict[str, Row]:
        return {r["name"]: r for r in self.tables["thresholds.toml"]["threshold"]}

    @functools.cached_property
    def wheel_index(self) -> Dict[Tuple[str, str], List[Tuple[Optional[str], Row]]]:
        """(platform, series) -> [(release or None for the whole series, row)]."""
        index: Dict[Tuple[str, str], List[Tuple[Optional[str], Row]]] = {}
        for row in self.wheels:
            for series in row["torch"]:
                for rel in row.get("releases") or [None]:
                    parsed = versions.torch_version(rel) if rel else None
                    if rel is None or (parsed and parsed["series"] == series):
                        index.setdefault((row.get("platform", "linux-x86_64"), series), []).append((rel, row))
        return index

    @functools.cached_property
    def pci_names(self) -> Dict[Tuple[str, ...], set]:
        """pci.ids' product names (the bracketed part of checks/pci.toml's names, "/" separating
        alternatives) as name tokens -> the capabilities of the chips they are made on."""
        index: Dict[Tuple[str, ...], set] = {}
        for row in self.tables["pci.toml"]["device"]:
            m = re.search(r"\[(.+)\]", row["name"])
            for product in (m.group(1).split("/") if m else []):
                if tokens := tuple(_gpu_tokens(product)):
                    index.setdefault(tokens, set()).add(_cc(row["cc"]))
        return index

    @functools.cached_property
    def pci_devices(self) -> Dict[str, Row]:
        return {row["id"].lower(): row for row in self.tables["pci.toml"]["device"]}

    @functools.cached_property
    def nvcc_rows(self) -> List[Row]:
        return sorted(self.tables["cuda_arch.toml"]["nvcc"], key=lambda r: _version(r["cuda"]))


def _version(text: str) -> Version:
    """A version column of a checked table (the schema let only readable ones in)."""
    return cast(Version, versions.numeric(text))


def _cc(text: str) -> str:
    """A compute capability column of a checked table, as "8.6"."""
    return cast(str, versions.fmt_cc(versions.parse_cc(text)))


def _minor(v: Version) -> Tuple[int, int]:
    """(major, minor) of a CUDA version: "12" is 12.0."""
    return v.release[0], v.release[1] if len(v.release) > 1 else 0


@functools.lru_cache(maxsize=8)
def _load_folder(folder: str) -> Knowledge:
    return Knowledge(Path(folder))


def load() -> Knowledge:
    """The validated data of :func:`checks_dir` (read once per folder)."""
    return _load_folder(str(checks_dir()))


def _platform_key(platform: str) -> str:
    return "windows" if str(platform).lower().startswith(("win", "wsl")) else "linux"


# --------------------------------------------------------------------------
# CUDA and the driver


def _toolkit_row(kb: Knowledge, cuda: Version) -> Optional[Row]:
    rel = cuda.release
    rows = kb.by_minor.get(_minor(cuda))
    if not rows:
        return None
    if len(rel) < 3:
        return rows[0]
    fitting = [r for r in rows if _version(r["cuda"]).release[2:3] <= rel[2:3]]
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
    majors = [m for m, d in need.items() if d and driver >= _version(d)]
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
    if toolkit and driver >= _version(toolkit):
        return "full", f"driver {driver_version} >= {toolkit}, the {need['release']} toolkit driver"
    mc = need["minor_compat_driver"]
    if mc and driver >= _version(mc):
        older = f"older than the {need['release']} toolkit driver {toolkit}" if toolkit else f"CUDA {cuda} is newer than the table"
        return "minor-compat", (f"driver {driver_version} is {older}; it runs CUDA {cuda} through minor-version "
                                f"compatibility (>= {mc}) with limited features; PTX JIT (+PTX archs, run-time "
                                "compiled kernels) needs the toolkit driver")
    wants = f">= {toolkit}" if toolkit else "a newer driver"
    if mc:
        wants += f" (or >= {mc} with minor-version compatibility)"
    detail = f"driver {driver_version} is too old for CUDA {cuda}: needs {wants}"
    family = _family(kb, driver, platform)
    cuda_major = _version(cuda).release[0]
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
    cc = _cc(compute_capability) if versions.parse_cc(compute_capability) else None
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
        if need and driver >= _version(need):
            best = row
    family = _family(kb, driver, platform)
    full = "{}.{}".format(*_minor(_version(best["cuda"]))) if best else None
    parts = [f"runs CUDA up to {full} with every feature" if full else "older than every toolkit driver in the table"]
    if family is not None:
        parts.append(f"every CUDA {family}.x release through minor-version compatibility")
    return {"full": full, "full_toolkit": best["cuda"] if best else None, "full_release": best["release"] if best else None,
            "minor_compat_major": family, "detail": f"driver {driver_version} " + "; ".join(parts)}


# --------------------------------------------------------------------------
# Architectures


def parse_arch_list(arch_list: Any, strict: bool = False) -> Tuple[frozenset, frozenset]:
    """SASS and PTX targets of TORCH_CUDA_ARCH_LIST text or torch.cuda.get_arch_list()'s list: sets of
    ``(major, minor, suffix)``, suffix "", "a" (arch-specific) or "f" (family-specific).  Unreadable
    entries are skipped, or raise ValueError when ``strict``."""
    if isinstance(arch_list, (list, tuple, set, frozenset)):
        items = [str(x) for x in arch_list]
    elif isinstance(arch_list, str):
        items = re.split(r"[;,\s\[\]'\"]+", arch_list)
    else:
        if strict:
            raise ValueError("must be a string or a list")
        return frozenset(), frozenset()
    sass: set = set()
    ptx: set = set()
    for item in items:
        text = item.strip().lower()
        if not text:
            continue
        m = re.fullmatch(r"(\d{1,2})\.(\d)([af]?)(\+ptx)?", text) or re.fullmatch(r"(sm|compute)_(\d{1,2})(\d)([af]?)", text)
        if not m:
            if strict:
                raise ValueError(f"cannot read architecture {item!r}")
            continue
        if m.group(1) in ("sm", "compute"):
            target = (int(m.group(2)), int(m.group(3)), m.group(4))
            (sass if m.group(1) == "sm" else ptx).add(target)
        else:
            target = (int(m.group(1)), int(m.group(2)), m.group(3))
            sass.add(target)
            if m.group(4):
                ptx.add(target)
    return frozenset(sass), frozenset(ptx)


def _arch_name(t: Tuple[int, int, str], kind: str) -> str:
    return f"{kind}_{t[0]}{t[1]}{t[2]}"


def older_than_all(compute_capability: Any, arch_list: Any) -> bool:
    """True when the GPU is older than every architecture in the list."""
    cc = versions.parse_cc(compute_capability)
    sass, ptx = parse_arch_list(arch_list)
    targets = sass | ptx
    return bool(cc and targets and all((t[0], t[1]) > cc for t in targets))


def arch_support(compute_capability: Any, arch_list: Any) -> Tuple[str, str]:
    """Whether a wheel built for ``arch_list`` has code for a GPU: ("sass", "ptx", "none" or "unknown",
    why).  SASS for X.Y runs on X.Z with Z >= Y, never across majors (sm_XYa only on X.Y); PTX
    (compute_XY, "+PTX") the driver JIT-compiles forward to the GPU."""
    cc = versions.parse_cc(compute_capability)
    if cc is None:
        return "unknown", f"not a compute capability: {compute_capability!r}"
    sass, ptx = parse_arch_list(arch_list)
    name = f"sm_{cc[0]}{cc[1]}"
    runs = sorted(t for t in sass if t[0] == cc[0] and (t[1] == cc[1] if t[2] == "a" else t[1] <= cc[1]))
    if runs:
        best = runs[-1]
        how = "exact match" if best[:2] == cc else f"SASS for {best[0]}.{best[1]} runs on {cc[0]}.{cc[1]} (same major)"
        return "sass", f"{_arch_name(best, 'sm')} covers {name}: {how}"
    if jit := sorted(t for t in ptx if (t[:2] == cc if t[2] == "a" else t[:2] <= cc)):
        best = jit[-1]
        return "ptx", (f"no SASS for {name}; the driver JIT-compiles {_arch_name(best, 'compute')} PTX at first use "
                       "(slow start; needs a driver at least as new as the wheel's CUDA toolkit driver)")
    if not (sass or ptx):
        return "none", "the arch list is empty (a CPU build?)"
    targets = sorted(sass | ptx)
    if older_than_all(cc, arch_list):
        return "none", f"the GPU ({name}) is older than every architecture in the wheel (oldest {_arch_name(targets[0], 'sm')})"
    return "none", (f"no SASS for compute capability {cc[0]}.x at or below {cc[0]}.{cc[1]} and no PTX at or below "
                    f"{cc[0]}.{cc[1]} (wheel has " + " ".join(_arch_name(t, "sm") for t in sorted(sass)) + ")")


# --------------------------------------------------------------------------
# PyTorch wheels (torch_wheels.toml; docs/knowledge.md).  A row covers every release of its
# series, or only its ``releases`` (1.3.0 and 1.3.1 were built for different GPUs), on its
# ``platform``, for the CPython versions in ``python``.

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
    pick = fit[-1] if fit else named[0] if named else None
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
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag)
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
        dv, ddetail = (driver_supports(driver_version, row["cuda"], driver_platform) if driver_version else
                       (driver_cuda_supports(driver_cuda, row["cuda"]), f"the driver runs CUDA {driver_cuda}")
                       if driver_cuda else ("unknown", "the driver is unknown"))
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


# --------------------------------------------------------------------------
# GPU names

_GPU_DROP = {"nvidia", "geforce", "tesla", "corporation"}


def _gpu_tokens(name: str) -> List[str]:
    text = str(name).lower()
    text = re.sub(r"\(\s*uuid[^)]*\)?", " ", text)          # nvidia-smi -L: (UUID: GPU-...)
    text = re.sub(r"\bgpu-[0-9a-f-]{8,}", " ", text)        # a bare UUID
    text = re.sub(r"^\s*gpu\s*\d+\s*:", " ", text)          # "GPU 0: ..."
    text = re.sub(r"[^a-z0-9]+", " ", text)
    text = re.sub(r"(?<=[a-z])(?=[0-9])|(?<=[0-9])(?=[a-z])", " ", text)
    return [t for t in text.split() if t not in _GPU_DROP]


def capability_for_name(gpu_name: Any) -> Optional[str]:
    """Compute capability ("8.6") for a GPU name as nvidia-smi, NVML or collect_env
    print it ("NVIDIA GeForce RTX 3090", "Tesla T4", "NVIDIA A100-SXM4-80GB",
    "NVIDIA GeForce RTX 4070 Laptop GPU"), or None when unknown or ambiguous."""
    if not isinstance(gpu_name, str):
        return None
    tokens = _gpu_tokens(gpu_name)
    if not tokens:
        return None
    hits: Dict[int, set] = {}
    for key, cc, _name in load().gpu_keys:
        n = len(key)
        if all(t.isdigit() for t in key):
            # A bare model number ("210": GeForce 210) is that GPU only as the whole name,
            # never inside another product's ("NVIDIA PG509-210" is an A100 board).
            if tuple(tokens) == key:
                hits.setdefault(n, set()).add(cc)
        elif any(tuple(tokens[i:i + n]) == key for i in range(len(tokens) - n + 1)):
            hits.setdefault(n, set()).add(cc)
    found = hits[max(hits)] if hits else set()
    table = next(iter(found)) if len(found) == 1 else None
    if hits and max(hits) == len(tokens):
        return table        # gpus.toml names this very GPU (NVIDIA's tables)
    # pci.ids' exact product name outranks a partial match of gpus.toml: it names boards and
    # OEM parts ("PH402 SKU 200": GP100) and the products made on another chip than the
    # name's family ("GeForce RTX 3050 A Laptop GPU": AD106/AD107, Ada).  A name pci.ids
    # gives on chips of different capability keeps gpus.toml's answer if it is one of them.
    if exact := load().pci_names.get(tuple(tokens)):
        if len(exact) == 1:
            return next(iter(exact))
        return table if table in exact else None
    return table


# --------------------------------------------------------------------------
# Debian and thresholds


def debian_release(release_or_codename: Any) -> Optional[Row]:
    """The debian.toml row for "12", "12.7", "bookworm", "Debian 12", "testing",
    "trixie/sid" (a testing system's debian_version), "sid"; None if unknown."""
    if not isinstance(release_or_codename, (str, int)) or isinstance(release_or_codename, bool):
        return None
    text = str(release_or_codename).strip().lower()
    text = re.sub(r"^debian\s*(gnu/linux\s*)?", "", text).strip()
    if "/" in text:
        text = text.split("/")[0].strip()
    if m := re.fullmatch(r"(\d+)(?:\.\d+)*", text):
        text = m.group(1)
    for row in load().debian:
        names = {row["version"].lower(), row["codename"].lower(), *(a.lower() for a in row.get("aliases", []))}
        if text in names:
            answer = dict(row)
            answer.setdefault("confidence", "confirmed")
            return answer
    return None


def debian_version_for(codename: Any) -> Optional[str]:
    """The release number of a Debian codename, current or archived ("bookworm" -> "12",
    "jessie" -> "8"); None for anything else (a suite alias like "testing" included)."""
    if not isinstance(codename, str):
        return None
    text = codename.strip().lower()
    return next((row["version"] for row in load().all_debian
                 if row["codename"].lower() == text and versions.numeric(row["version"]) is not None), None)


def debian_codename_for(release: Any) -> Optional[str]:
    """The codename of a numbered Debian release, current or archived ("8" -> "jessie")."""
    text = str(release).strip() if isinstance(release, (str, int)) and not isinstance(release, bool) else ""
    return next((row["codename"] for row in load().all_debian if row["version"] == text), None)


def threshold(name: str) -> Any:
    """The value of a threshold in thresholds.toml, or None."""
    row = load().thresholds.get(name) if isinstance(name, str) else None
    return row["value"] if row else None


def debian_support(release: Any) -> str:
    """How a Debian release ("12", "testing", "15") stands: "supported" (thresholds.toml's
    debian_supported_releases), "older" (a row of checks/debian.toml not supported, or a number below every row),
    "newer" (a number above every row: released after the table was written), or "unknown"."""
    if isinstance(release, str) and not debian_release(release) and debian_version_for(release):
        release = debian_version_for(release)      # an archived codename ("jessie")
    row = debian_release(release)
    if row is not None:
        supported = str(threshold("debian_supported_releases") or "").split()
        names = {row["version"], row["codename"], *row.get("aliases", [])}
        return "supported" if names & set(supported) or str(release).lower() in supported else "older"
    number = versions.numeric(str(release)) if isinstance(release, (str, int)) and not isinstance(release, bool) else None
    known = [v for r in load().debian if (v := versions.numeric(r["version"])) is not None]
    if number is None or not known:
        return "unknown"
    major = Version(str(number.release[0]))
    if major > max(known):
        return "newer"
    return "older" if major < min(known) else "unknown"


# Suite names that are not releases (debian-policy, sources.list(5)).
SUITE_ALIASES = ("stable", "oldstable", "oldoldstable", "testing", "unstable", "experimental")
SUITE_PARTS = ("updates", "backports", "security", "proposed-updates", "backports-sloppy")


def is_debian_suite(suite: Any) -> bool:
    """True for a Debian archive suite: a codename in checks/debian.toml or an alias
    ("stable", "sid"), alone or with -updates, -backports, -security, ..."""
    if not isinstance(suite, str):
        return False
    name, _, part = suite.strip().lower().partition("-")
    if part and part not in SUITE_PARTS:
        return False
    return name in SUITE_ALIASES or debian_release(name) is not None and not name.isdigit()


# --------------------------------------------------------------------------
# PCI device ids and what each CUDA release compiles for (checks/pci.toml,
# checks/cuda_arch.toml; docs/knowledge.md).  The lookups keep their indexes
# on the Knowledge object they were built from.

NVIDIA_PCI_VENDOR = "10de"


def pci_device_id(value: Any) -> Optional[str]:
    """The NVIDIA device id ("2684") in the forms reports print it: "2684",
    "0x2684", "10de:2684" (lspci -n), "0x268410DE" (nvidia-smi's pci_device_id:
    device then vendor), "0x10de2684"; None when it is not an NVIDIA device id."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if ":" in text:
        vendor, _, device = text.partition(":")
        vendor = vendor[2:] if vendor.startswith("0x") else vendor
        text = device if vendor == NVIDIA_PCI_VENDOR else ""
    elif len(text) == 8:
        if text.endswith(NVIDIA_PCI_VENDOR):
            text = text[:4]
        elif text.startswith(NVIDIA_PCI_VENDOR):
            text = text[4:]
        else:
            text = ""
    return text if re.fullmatch(r"[0-9a-f]{4}", text) else None


def pci_device(device_id: Any) -> Optional[Row]:
    """The checks/pci.toml row (id, name, chip, cc, source) of an NVIDIA PCI
    device id in any form :func:`pci_device_id` reads, or None."""
    row = load().pci_devices.get(pci_device_id(device_id) or "")
    return dict(row) if row else None


def capability_for_pci_id(device_id: Any) -> Optional[str]:
    """Compute capability ("8.9") of the GPU with this PCI device id: the fallback
    for a GPU nvidia-smi names "Graphics Device" (a driver older than the GPU).
    None for an unknown id or text that is not one."""
    row = pci_device(device_id)
    return _cc(row["cc"]) if row else None


def _cc_list(arch_list: Any) -> List[str]:
    sass, _ptx = parse_arch_list(arch_list or "")
    return [f"{t[0]}.{t[1]}" for t in sorted(sass)]


def cuda_builds_sass(cuda_version: Any) -> Optional[Row]:
    """What nvcc of a CUDA release compiles machine code for (capabilities as "8.6", oldest first): the
    newest row of its major not newer than it (``nearest`` when it is another: "12.7" -> 12.6)."""
    cuda = versions.numeric(cuda_version) if isinstance(cuda_version, str) else None
    if cuda is None:
        return None
    want = _minor(cuda)
    fits = [row for row in load().nvcc_rows if (r := _minor(_version(row["cuda"])))[0] == want[0] and r <= want]
    if not fits:
        return None
    best = fits[-1]
    sass = _cc_list(best["sass"])
    return {"cuda": f"{want[0]}.{want[1]}", "row": best["cuda"], "sass": sass, "added": _cc_list(best.get("added")),
            "dropped": _cc_list(best.get("dropped")), "oldest": sass[0] if sass else None,
            "newest": sass[-1] if sass else None, "nearest": _minor(_version(best["cuda"])) != want, "source": best["source"]}


def cuda_can_build(cuda_version: Any, compute_capability: Any) -> Optional[bool]:
    """Whether nvcc of that CUDA release emits SASS that runs on the GPU (:func:`arch_support`'s rule);
    None when either is unknown."""
    cc = versions.parse_cc(compute_capability)
    info = cuda_builds_sass(cuda_version)
    if cc is None or info is None:
        return None
    return any(c[0] == cc[0] and c[1] <= cc[1] for x in info["sass"] if (c := versions.parse_cc(x)))


# --------------------------------------------------------------------------
# Debian's packages (debian_packages.toml; docs/knowledge.md)


def debian_arch(machine: Any) -> Optional[str]:
    """Debian's name of a CPU architecture as ``uname -m`` prints it ("x86_64" -> "amd64"), or None."""
    if not isinstance(machine, str) or not machine.strip():
        return None
    text = machine.strip().lower()
    return next((row["debian"] for row in load().tables["debian_packages.toml"]["architecture"]
                 if text == row["debian"] or text in row["uname"]), None)


def debian_package(name: str, release: Any) -> Optional[Row]:
    """The [[package]] row of ``name`` in Debian ``release`` ("12"): its component and the
    architectures it installs on; None where the table does not name it for that release."""
    rel = str(release).split(".")[0] if release is not None else ""
    row = next((r for r in load().tables["debian_packages.toml"]["package"] if r["name"] == name and r["release"] == rel),
               None)
    return dict(row) if row else None


def debian_has(name: str, release: Any, machine: Any) -> Optional[bool]:
    """Whether Debian ``release`` has ``name`` for the CPU ``machine`` (uname -m); None where the
    table does not cover that release or architecture."""
    arch = debian_arch(machine)
    covered = {r["release"] for r in load().tables["debian_packages.toml"]["package"]}
    rel = str(release).split(".")[0] if release is not None else ""
    if arch is None or rel not in covered:
        return None
    row = debian_package(name, rel)
    return bool(row and arch in row["architectures"])


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
