"""TorchFix's findings (https://github.com/pytorch-labs/torchfix, an optional extra), under its own codes
(``torchfix.TOR101``; docs/lint.md).  Driven through its flake8 plugin interface, the one TorchFix keeps
stable: ``TorchChecker(tree, lines).run()`` yields ``(line, col, "TORnnn message", type)``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Iterator, Optional

from debtorch.findings import WARNING, Finding, finding
from debtorch.lint.result import Located, located
from debtorch.lint.script import Script

AREA = "torchfix"   # TorchFix's findings keep their codes under it: torchfix.TOR101, ...

FALLBACK_DISABLED = ("TOR3", "TOR4", "TOR9")  # TorchFix's default-off codes (TOR401 is script.W005 here)
HOME = "https://github.com/pytorch-labs/torchfix#rules"


def _module(name: str) -> Optional[ModuleType]:
    try:
        return importlib.import_module(name)  # defer: optional extra, imports libcst
    except Exception:  # noqa: BLE001 - absent or broken: TorchFix is simply not used
        return None


def version() -> Optional[str]:
    """TorchFix's version when it can be imported, else None."""
    mod = _module("torchfix")
    if mod is None or _module("torchfix.torchfix") is None:
        return None
    return str(getattr(mod, "__version__", None) or getattr(_module("torchfix.torchfix"), "__version__", "unknown"))


def findings(script: Script) -> Iterator[Located]:
    """TorchFix's findings for a parsed :class:`~debtorch.lint.script.Script`."""
    mod = _module("torchfix.torchfix")
    if mod is None:
        return
    disabled = tuple(getattr(mod, "DISABLED_BY_DEFAULT", FALLBACK_DISABLED))
    lines = [line + "\n" for line in script.text.split("\n")]
    try:
        results = list(mod.TorchChecker(script.tree, lines).run())
    except Exception as exc:  # noqa: BLE001 - TorchFix failing on a file is a finding, not a traceback
        crash = finding("script.E001", about=script.path, error=f"torchfix: {type(exc).__name__}: {exc}"[:120])
        yield located(script.path, 1, 1, crash, script.code(1))
        return
    for item in results:
        try:
            line, col, text = int(item[0]), int(item[1]), str(item[2])
        except (TypeError, ValueError, IndexError):
            continue
        code, _, message = text.partition(" ")
        if not code.startswith("TOR") or code.startswith(disabled):
            continue
        about = f"{script.path}:{line}"
        yield located(script.path, line, max(col, 1),
                      Finding(f"{AREA}.{code}", WARNING, message.strip(), f"see {HOME} ({code})", about),
                      script.code(line))
