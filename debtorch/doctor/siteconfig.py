"""The site's own doctor rules and silenced ids (docs/site-config.md).

Read, in order (later files add to earlier ones): ``/etc/debtorch/doctor.toml``,
``$XDG_CONFIG_HOME/debtorch/doctor.toml`` (default ``~/.config``), and the file
given with ``--config``::

    silence = ["cpu.W001", "gpu.*"]     # ids (or area.*) never reported here

    [minimums]
    driver = "550.54.14"                # the cluster's minimum NVIDIA driver
    torch = "2.4"                       # minimum PyTorch release
    torch_cuda = "12.4"                 # minimum CUDA that PyTorch was built with
    shm = "8G"                          # minimum /dev/shm size (K, M, G, T suffixes)

Unknown keys and bad values are rejected with one line naming the file, the
line and the key.  Nothing in the file is executed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from packaging.version import Version

from debtorch import inputs
from debtorch.units import parse_size

SYSTEM_PATH = "/etc/debtorch/doctor.toml"
ID_PATTERN = re.compile(r"^[a-z_]+\.(\*|[EWI]\*|[EWI]\d{3})$")
MINIMUM_KEYS = ("driver", "torch", "torch_cuda", "shm")


class SiteConfigError(Exception):
    """One line: FILE:LINE: key: what is wrong."""


@dataclass
class SiteConfig:
    silence: list = field(default_factory=list)
    minimums: dict = field(default_factory=dict)
    files: list = field(default_factory=list)

    def silenced(self, finding_id: str) -> bool:
        for pat in self.silence:
            if pat == finding_id:
                return True
            area, _, rest = pat.partition(".")
            fa, _, frest = finding_id.partition(".")
            if area == fa and (rest == "*" or (rest.endswith("*") and frest.startswith(rest[:-1]))):
                return True
        return False


def _line_of(text: str, key: str, section: Optional[str] = None) -> int:
    """1-based line where ``key`` is assigned (inside ``[section]`` if given); 0 if not found."""
    in_section = section is None
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("["):
            in_section = section is not None and s.strip("[] ") == section
            continue
        if in_section and re.match(rf"^\s*{re.escape(key)}\s*=", line):
            return i
    return 0


def parse(text: str, path: str, into: Optional[SiteConfig] = None) -> SiteConfig:
    cfg = into or SiteConfig()

    def fail(key: str, msg: str, section: Optional[str] = None) -> SiteConfigError:
        line = _line_of(text, key.split(".")[-1], section)
        return SiteConfigError(f"{path}:{line}: {key}: {msg}" if line else f"{path}: {key}: {msg}")

    try:
        data = inputs.parse_toml(text, path)
    except inputs.InputError as exc:
        raise SiteConfigError(str(exc)) from None
    for key in data:
        if key not in ("silence", "minimums"):
            raise fail(key, "unknown key (expected silence or [minimums])")
    silence = data.get("silence", [])
    if not isinstance(silence, list) or not all(isinstance(x, str) for x in silence):
        raise fail("silence", "must be a list of ids like \"cpu.W001\"")
    for item in silence:
        if not ID_PATTERN.match(item):
            raise fail("silence", f"{item!r} is not an id like cpu.W001 or gpu.*")
    cfg.silence.extend(silence)
    mins = data.get("minimums", {})
    if not isinstance(mins, dict):
        raise fail("minimums", "must be a table")
    for key, value in mins.items():
        if key not in MINIMUM_KEYS:
            raise fail(f"minimums.{key}", f"unknown key (expected one of {', '.join(MINIMUM_KEYS)})", "minimums")
        if key == "shm":
            size = parse_size(str(value))
            if size is None:
                raise fail(f"minimums.{key}", f"{str(value)[:40]!r} is not a size like \"8G\"", "minimums")
            cfg.minimums[key] = size
            continue
        try:
            Version(str(value))
        except ValueError:  # InvalidVersion, or more digits than int() takes
            raise fail(f"minimums.{key}", f"{str(value)[:40]!r} is not a version", "minimums") from None
        cfg.minimums[key] = str(value)
    cfg.files.append(path)
    return cfg


def load(host=None, explicit: Optional[str] = None) -> SiteConfig:
    """The site config from the standard places on ``host`` and ``explicit``."""
    cfg = SiteConfig()
    if host is not None:
        env = host.environ
        places = [SYSTEM_PATH]
        xdg = env.get("XDG_CONFIG_HOME") or (env.get("HOME") and env["HOME"].rstrip("/") + "/.config")
        if xdg:
            places.append(f"{xdg}/debtorch/doctor.toml")
        for p in places:
            text = host.try_read(p, inputs.MAX_CONFIG)
            if text is not None:
                parse(text, p, cfg)
    if explicit:
        try:
            text = inputs.read_text(explicit, inputs.MAX_CONFIG, what="a doctor config")
        except inputs.InputError as exc:
            raise SiteConfigError(str(exc)) from None
        parse(text, explicit, cfg)
    return cfg
