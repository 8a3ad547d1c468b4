"""The one JSON writer: every ``--json`` document goes through :func:`dumps`.

Strict JSON (``allow_nan=False``): a NaN or an infinity never reaches a
user's parser.  A number that is not finite (a loss that became NaN, a ratio
over a zero) is written as ``null``; where the reason matters the document
says it in a field of its own (verify-train's ``nonfinite_loss_step``).
Sets become sorted lists; anything else JSON lacks (a path) becomes its text.
"""

from __future__ import annotations

import json
import math
from typing import Any


def plain(obj: Any) -> Any:
    """``obj`` as what strict JSON can hold."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return sorted(plain(v) for v in obj) if isinstance(obj, (set, frozenset)) else str(obj)


def dumps(doc: Any) -> str:
    return json.dumps(plain(doc), indent=2, allow_nan=False)
