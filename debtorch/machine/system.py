"""The operating system in the machine view: which OS and which Debian (:class:`OS`,
:class:`DebianRelease`), APT's components for Debian's own suites (:class:`Apt`), and Debian's
packaged driver for this release."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from debtorch import knowledge, versions
from debtorch.facts import get, unknown_reason
from debtorch.machine.nvidia import Driver
from debtorch.machine.read import as_glibc, as_int, as_str, section


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
        """"Debian 12 (bookworm)"; testing and sid with the codename they carry, not "sid"."""
        if not self.codename or (self.release in ("testing", "sid") and self.codename == "sid"):
            return f"Debian {self.release}"
        return f"Debian {self.release} ({self.codename})"


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


def read_os(facts: dict) -> OS:
    """The OS: its id and name, whether it is Debian or a derivative, and which Debian."""
    o = section(facts, "os")
    os_id = (as_str(o.get("id")) or "").lower() or None
    like = (as_str(o.get("id_like")) or "").lower().split()
    dv = as_str(o.get("debian_version"))
    platform = as_str(o.get("platform")) or ("linux" if os_id or o.get("kernel") else "unknown")
    is_debian = None if os_id is None else os_id == "debian"
    derivative = bool(os_id and not is_debian and ("debian" in like or "ubuntu" in like or dv))
    debian = None
    if is_debian:
        debian = _debian_release(o, dv, get(facts, "apt.suites"))
    elif derivative:
        debian = _debian_base(o, os_id, dv)
    return OS(platform=platform, id=os_id, name=as_str(o.get("pretty_name")) or os_id, is_debian=is_debian,
              derivative=derivative, debian=debian, kernel=as_str(o.get("kernel")), arch=as_str(o.get("arch")),
              container=as_str(o.get("container")), wsl=as_int(o.get("wsl")), glibc=as_glibc(o.get("glibc")))


def _debian_release(o: dict, dv: Optional[str], apt_suites: Any) -> Optional[DebianRelease]:
    """Which Debian this is.  A numbered release says its number (VERSION_ID, else a
    numeric debian_version); testing and sid carry a codename but no VERSION_ID
    (os-release of trixie/sid: VERSION_CODENAME=trixie only), or "trixie/sid" in
    debian_version."""
    codename = (as_str(o.get("codename")) or "").lower() or None
    version_id = as_str(o.get("version_id"))
    full = as_str(o.get("debian_version_full"))   # os-release's own point release (Debian 13+)
    point = next((v for v in (dv, full) if v and versions.numeric(v) is not None), None)
    if version_id and versions.numeric(version_id) is not None:
        return _release(version_id.split(".")[0], codename, point or (version_id if "." in version_id else None))
    if point:
        return _release(point.split(".")[0], codename, point)
    if codename or (dv and ("/sid" in dv or dv == "sid")):
        release = "sid" if codename == "sid" or dv == "sid" else "testing"
        if release == "testing":
            # Testing and sid look alike in os-release; APT's suites tell them apart.
            suites = set(apt_suites or [])
            if suites & {"sid", "unstable"} and not suites & {"testing", codename or "?"}:
                release = "sid"
        if not codename and dv and "/" in dv:
            codename = dv.split("/")[0].lower() or None
        return _release(release, codename, None)
    legacy = as_str(o.get("release"))     # facts saved by debtorch 0.x named the release themselves
    return _release(legacy, codename, point) if legacy else None


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
    for name in filter(None, (as_str(o.get("debian_codename")), as_str(o.get("codename")))):
        if number := knowledge.debian_version_for(name):
            return _release(number, name.lower(), point if point and point.split(".")[0] == number else None)
    if dv:
        base = dv.split("/")[0].strip().lower()
        if versions.numeric(base) is not None:
            return _release(base.split(".")[0], None, base if "." in base else None)
        if number := knowledge.debian_version_for(base):
            return _release(number, base, None)
    version_id = as_str(o.get("version_id"))
    if os_id == "raspbian" and version_id and versions.numeric(version_id) is not None:
        return _release(version_id.split(".")[0], None, None)
    return None


def read_apt(facts: dict) -> Apt:
    """The components enabled for Debian's own suites (a suite of checks/debian.toml), in Debian's order."""
    a = section(facts, "apt")
    sources = a.get("sources")
    suites = [s for s in a.get("suites") or [] if isinstance(s, str)]
    legacy = a.get("components")           # facts saved by debtorch 0.x summarised them
    if not isinstance(sources, list) or not sources:
        if isinstance(legacy, list):
            return Apt(components=legacy, suites=suites, backports=bool(a.get("backports")),
                       cuda_repo=bool(a.get("cuda_repo")))
        why = unknown_reason(facts, "apt.sources") or unknown_reason(facts, "apt.components") or "no APT sources found"
        return Apt(components=None, suites=suites, backports=False, cuda_repo=bool(a.get("cuda_repo")), unknown=why)
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


def debian_driver(system: OS, driver: Driver) -> Optional[dict]:
    """Debian's packaged nvidia-driver for this release: {version, release, codename}, or None where
    the driver is not this Debian's to install (WSL 2's, a container host's, another OS's)."""
    if system.wsl == 2 or system.container or not driver.linux:
        return None
    deb = system.debian if system.is_debian else None
    if deb is None or not deb.row or not deb.row.get("nvidia_driver"):
        return None
    return {"version": deb.row["nvidia_driver"], "release": deb.row.get("version") or deb.release,
            "codename": deb.row.get("codename")}
