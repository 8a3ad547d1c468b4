"""Offline mode: compare saved ``facts --json`` / ``doctor --json`` documents."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Callable, Iterable, Optional

from debtorch import hostlist, inputs
from debtorch.fleet import compare
from debtorch.fleet.nodes import MALFORMED, Node, read_node
from debtorch.tune.config import ConfigError, load_config


class FleetInputError(Exception):
    """Bad usage or input that is not a node's fault: one line for the user (exit 2)."""


def document_paths(args: Iterable[str]) -> list:
    """FILE and DIR arguments -> [(name, path)]: a folder gives its *.json regular files, sorted.
    A node is named by its file name without .json (by the relative path when names repeat).
    A FILE that is not a regular file (a FIFO, a device) is bad input, refused before any read."""
    found: list = []
    for arg in args:
        p = Path(arg)
        try:
            mode = p.stat().st_mode
        except FileNotFoundError:
            raise FleetInputError(f"{arg}: no such file or folder") from None
        except OSError as exc:
            raise FleetInputError(f"{arg}: cannot read ({inputs.os_reason(exc)})") from None
        if stat.S_ISDIR(mode):
            files = sorted(x for x in p.iterdir() if x.suffix == ".json" and x.is_file())
            if not files:
                raise FleetInputError(f"{arg}: no .json documents in this folder")
            found.extend(files)
        elif stat.S_ISREG(mode):
            found.append(p)
        else:
            raise FleetInputError(f"{arg}: is {inputs.kind(mode)}, not a facts document")
    stems = [f.stem for f in found]
    return [(hostlist.safe(f.stem if stems.count(f.stem) == 1 else str(f.with_suffix(""))), str(f)) for f in found]


def from_files(args: Iterable[str], tuned: Optional[dict] = None, tuned_path: Optional[str] = None,
               rename: Optional[Callable[[list], None]] = None) -> compare.Summary:
    """Compare saved documents; one document is in memory at a time.  ``rename`` may rename the
    nodes before they are compared (``--redact``)."""
    nodes: list = []
    for name, path in document_paths(args):
        try:
            text = inputs.read_text(path, what="a facts document")
        except inputs.InputError as exc:
            nodes.append(Node(name, status=MALFORMED, detail=str(exc)))
            continue
        nodes.append(read_node(text, name, lambda m: compare.read(m, tuned)))
        del text
    if rename is not None:
        rename(nodes)
    return compare.summarise(nodes, tuned_path=tuned_path)


def load_tuned(path: str) -> dict:
    """The [fingerprint] table of a config written by ``debtorch tune --write``."""
    try:
        fp = load_config(path).fingerprint
    except ConfigError as exc:
        raise FleetInputError(f"--tuned {exc}") from None
    if not fp:
        raise FleetInputError(f"--tuned {path}: no [fingerprint] table (was it written by 'debtorch tune --write'?)")
    return fp

