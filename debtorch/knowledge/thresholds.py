"""The thresholds of checks/thresholds.toml (limits a check compares against, each with its source)."""

from __future__ import annotations

from typing import Any

from debtorch.knowledge.tables import load


def threshold(name: str) -> Any:
    """The value of a threshold in thresholds.toml, or None."""
    row = load().thresholds.get(name) if isinstance(name, str) else None
    return row["value"] if row else None


