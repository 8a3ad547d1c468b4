"""debtorch: is this Debian machine right for PyTorch training, and how should it train?

Importing it is cheap: ``debtorch.load`` imports torch only when it is called.  The public face, above
every layer: no module of debtorch imports it (docs/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from debtorch.__about__ import __version__

if TYPE_CHECKING:   # names for the annotations only: importing debtorch stays cheap
    from debtorch.tune.runtime import Config
    from debtorch.tune.watch import Watch

__all__ = ["__version__", "load", "watch"]


def load(path: str = "debtorch.toml", *, warn_on_mismatch: bool = True, oversubscribe: bool = False) -> Config:
    """Load a config written by ``debtorch tune --write`` (see docs/runtime.md)."""
    from debtorch.tune.runtime import load as _load  # defer: `import debtorch` stays cheap

    return _load(path, warn_on_mismatch=warn_on_mismatch, oversubscribe=oversubscribe)


def watch(iterable: Any, **options: Any) -> Watch:
    """Wrap a training loader: data wait, host syncs per step and a verdict (see docs/runtime.md)."""
    from debtorch.tune.watch import watch as _watch  # defer: `import debtorch` stays cheap

    return _watch(iterable, **options)
