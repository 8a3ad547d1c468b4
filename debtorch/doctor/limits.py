"""Thresholds from checks/limits.toml."""

from __future__ import annotations

import functools
import os
import tomllib
from pathlib import Path


def _data_dir() -> Path:
    # TODO(lead): use debtorch.knowledge's finder once it lands.
    env = os.environ.get("DEBTORCH_CHECKS_DIR")
    here = Path(__file__).resolve().parent.parent
    for c in ([Path(env)] if env else []) + [here.parent / "checks", here / "_data" / "checks",
                                             Path("/usr/share/debtorch/checks")]:
        if (c / "limits.toml").exists():
            return c
    raise FileNotFoundError("debtorch's checks/ data was not found (set DEBTORCH_CHECKS_DIR)")


@functools.lru_cache(maxsize=None)
def _limits() -> dict:
    with open(_data_dir() / "limits.toml", "rb") as fh:
        rows = tomllib.load(fh).get("limit", [])
    return {r["name"]: r["value"] for r in rows}


def limit(name: str):
    return _limits()[name]
