"""The site's own doctor rules and silenced ids (docs/site-config.md: the files, in order, and the
keys).  Unknown keys and bad values are rejected with one line naming the file, the line and the
key.  Nothing in the file is executed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from packaging.version import Version

from debtorch import inputs, schema
from debtorch.host import Host
from debtorch.units import parse_size

SYSTEM_PATH = "/etc/debtorch/doctor.toml"
ID_PATTERN = r"[a-z_]+\.(\*|[EWI]\*|[EWI]\d{3})"


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


def _version(value: Any) -> bool:
    try:
        Version(str(value))
    except ValueError:  # InvalidVersion, or more digits than int() takes
        return False
    return True


def _size_with_unit(value: Any) -> bool:
    """A string like "8G", "512 MiB" or "4096B": a bare number (8, "8") is refused, not taken as 8 bytes."""
    return isinstance(value, str) and parse_size(value, unit_required=True) is not None


VERSION = schema.Value(("a version", _version))
SCHEMA = {
    "silence": [schema.text(pattern=ID_PATTERN, expect="an id like cpu.W001, gpu.E* or gpu.*")],
    "minimums": {"driver": VERSION, "torch": VERSION, "torch_cuda": VERSION,
                 "shm": schema.Value(('a size with its unit, like "8G" or "512M" (a bare number would be bytes)',
                                      _size_with_unit))},
}


def parse(text: str, path: str, into: Optional[SiteConfig] = None) -> SiteConfig:
    cfg = into or SiteConfig()
    data = schema.load_toml(text, path, SCHEMA, SiteConfigError)
    cfg.silence.extend(data.get("silence", []))
    for key, value in data.get("minimums", {}).items():
        cfg.minimums[key] = parse_size(value, unit_required=True) if key == "shm" else str(value)
    cfg.files.append(path)
    return cfg


def load(host: Optional[Host] = None, explicit: Optional[str] = None) -> SiteConfig:
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
