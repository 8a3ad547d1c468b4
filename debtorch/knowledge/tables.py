"""Loading the tables of ``checks/``: where the folder is (docs/knowledge.md), each file's schema
(:data:`SCHEMA`, debtorch/schema.py's specs), reading and checking a file when a question first needs
it, and :class:`Knowledge`, the validated tables of one folder with the indexes the questions use.
Only a malformed data file raises :class:`KnowledgeError`, whose message is one line naming the file
and the row."""

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
from debtorch.knowledge.archlists import parse_arch_list
from debtorch.knowledge.names import gpu_tokens

ENV_DIR = "DEBTORCH_CHECKS_DIR"
SYSTEM_DIR = DATA_DIRS[-1]
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
        return sorted(self.tables["cuda_driver.toml"]["toolkit"], key=lambda r: version_of(r["cuda"]))

    @functools.cached_property
    def by_minor(self) -> Dict[Tuple[int, int], List[Row]]:
        out: Dict[Tuple[int, int], List[Row]] = {}
        for row in self.toolkits:
            out.setdefault(minor_of(version_of(row["cuda"])), []).append(row)
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
                tokens = tuple(gpu_tokens(key))
                if not tokens:
                    bad = schema.Invalid(f"gpu[{i}].match", f"must name a GPU in every entry (got {schema.show(key)})")
                    raise KnowledgeError(schema.place(bad, str(self.folder / "gpus.toml")))
                keys.append((tokens, cc_of(row["cc"]), row["name"]))
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
                if tokens := tuple(gpu_tokens(product)):
                    index.setdefault(tokens, set()).add(cc_of(row["cc"]))
        return index

    @functools.cached_property
    def pci_devices(self) -> Dict[str, Row]:
        return {row["id"].lower(): row for row in self.tables["pci.toml"]["device"]}

    @functools.cached_property
    def nvcc_rows(self) -> List[Row]:
        return sorted(self.tables["cuda_arch.toml"]["nvcc"], key=lambda r: version_of(r["cuda"]))


def version_of(text: str) -> Version:
    """A version column of a checked table (the schema let only readable ones in)."""
    return cast(Version, versions.numeric(text))


def cc_of(text: str) -> str:
    """A compute capability column of a checked table, as "8.6"."""
    return cast(str, versions.fmt_cc(versions.parse_cc(text)))


def minor_of(v: Version) -> Tuple[int, int]:
    """(major, minor) of a CUDA version: "12" is 12.0."""
    return v.release[0], v.release[1] if len(v.release) > 1 else 0


@functools.lru_cache(maxsize=8)
def _load_folder(folder: str) -> Knowledge:
    return Knowledge(Path(folder))


def load() -> Knowledge:
    """The validated data of :func:`checks_dir` (read once per folder)."""
    return _load_folder(str(checks_dir()))


