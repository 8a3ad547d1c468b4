"""Thresholds the doctor applies, from checks/thresholds.toml."""

from __future__ import annotations

from typing import Any

from debtorch import knowledge


def limit(name: str) -> Any:
    value = knowledge.threshold(name)
    if value is None:
        raise KeyError(f"checks/thresholds.toml has no threshold {name!r}")
    return value
