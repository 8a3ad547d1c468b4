"""Reading a facts document's values as the machine view needs them: a value of the expected type, or
None (``{}``, ``[]`` for a table or a list), never an exception."""

from __future__ import annotations

import re
from typing import Any, Optional

from debtorch.facts import get


def as_int(value: Any) -> Optional[int]:
    """An integer (not a bool), or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def as_str(value: Any) -> Optional[str]:
    """A string with something in it, stripped; None for anything else."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def as_float(value: Any) -> Optional[float]:
    """A number (not a bool) as a float, or None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def as_glibc(value: Any) -> Optional[str]:
    """A glibc version as "2.36"; None for anything else."""
    text = as_str(value)
    if text and re.fullmatch(r"\d+\.\d+", text):
        return text
    return None


def as_dict(value: Any) -> dict:
    """A table, or {}."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list:
    """A list, or []."""
    return value if isinstance(value, list) else []


def section(facts: dict, dotted: str) -> dict:
    """The table at ``dotted`` ("nvidia", "python.deep"); {} when it is not one."""
    return as_dict(get(facts, dotted))
