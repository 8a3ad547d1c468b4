"""Sizes in bytes, written and read the way people do ("8.0 GiB", "8G").  Pure; every layer may import it."""

from __future__ import annotations

import re
from typing import Any, Optional

_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*", re.I)


def human_bytes(n: Any) -> str:
    """1536 -> "1.5 KiB"; None -> "unknown"; a negative limit -> "unlimited"."""
    if n is None:
        return "unknown"
    if isinstance(n, bool) or not isinstance(n, (int, float)) or n != n:
        return str(n)
    if n < 0:
        return "unlimited"
    val = float(n)
    for unit in _UNITS:
        if val < 1024.0 or unit == _UNITS[-1]:
            return f"{val:.0f} {unit}" if unit == "B" else f"{val:.1f} {unit}"
        val /= 1024.0
    return f"{n} B"  # pragma: no cover


def parse_size(text: Any, unit_required: bool = False) -> Optional[int]:
    """"8G", "512M", "1.5 GiB", "4096" -> bytes; None when not a size (``unit_required``: a bare
    number like "4096" is not one either, where a reader would take it for gigabytes)."""
    m = _SIZE.fullmatch(str(text))
    if not m or (unit_required and not (m.group(2) or m.group(3))):
        return None
    mult = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)
