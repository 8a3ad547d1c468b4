"""Offline mode: compare saved ``facts --json`` / ``doctor --json`` documents.

The documents are read one at a time (never all in memory), by a :class:`~debtorch.fleet.nodes.Decoder`
in each of up to ``workers`` processes when there are many (:data:`PARALLEL_MIN`), in their order;
nodes that answered alike share one set of answers.  A JSON file that is no node's document
(another command's report) is skipped and named, not made a node.
"""

from __future__ import annotations

import collections
import concurrent.futures
import multiprocessing
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from debtorch import hostlist, inputs
from debtorch.fleet import compare
from debtorch.fleet.nodes import MALFORMED, SKIPPED, Decoder, Node
from debtorch.machine import Machine
from debtorch.tune.config import ConfigError, load_config

PARALLEL_MIN = 256      # fewer documents than this are read in this process: starting workers costs more
CHUNK = 64              # documents a worker reads per task


@dataclass(frozen=True)
class Skipped:
    """A file that is no node's document, and why."""

    path: str
    reason: str

    def to_json(self) -> dict:
        return {"path": self.path, "reason": self.reason}


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
    stems = collections.Counter(f.stem for f in found)
    return [(hostlist.safe(f.stem if stems[f.stem] == 1 else str(f.with_suffix(""))), str(f)) for f in found]


def from_files(args: Iterable[str], tuned: Optional[dict] = None, tuned_path: Optional[str] = None,
               rename: Optional[Callable[[list], None]] = None, workers: int = 1) -> compare.Summary:
    """Compare saved documents; one document at a time is in memory in each of up to ``workers``
    processes.  ``rename`` may rename the nodes before they are compared (``--redact``).  The
    summary's ``skipped`` names the files that are no node's document."""
    paths = document_paths(args)
    nodes: list[Node] = []
    skipped: list[Skipped] = []
    shared: dict = {}
    keys: dict[tuple[int, int], tuple] = {}    # (ids of a node's objects) -> (its key, the objects kept alive)
    for (_, path), node in zip(paths, decoded(paths, tuned, workers)):
        if node.status == SKIPPED:
            skipped.append(Skipped(path, node.detail))
            continue
        nodes.append(_shared(node, shared, keys))
    if not nodes:
        raise FleetInputError(f"{skipped[0].path}: {skipped[0].reason}; no node documents to compare")
    if rename is not None:
        rename(nodes)
    summary = compare.summarise(nodes, tuned_path=tuned_path)
    summary.skipped = skipped
    return summary


def _shared(node: Node, shared: dict, keys: dict[tuple[int, int], tuple]) -> Node:
    """``node`` with answers and findings equal to an earlier node's replaced by that node's
    objects: memory by kinds of node, and :func:`compare.kinds` groups them without looking inside.
    (Nodes of one worker's task arrive sharing their objects already: each is looked at once.)"""
    if node.ok:
        ident = (id(node.values), id(node.findings))
        if ident not in keys:
            keys[ident] = ((repr(sorted(node.values.items())), node.findings), node.values, node.findings)
        node.values, node.findings = shared.setdefault(keys[ident][0], (node.values, node.findings))
    return node


def decoded(paths: list, tuned: Optional[dict], workers: int) -> Iterator[Node]:
    """The nodes of ``paths`` ([(name, path)]), in order: in this process, or in ``workers``
    processes (``fork``) when there are many documents and more than one CPU."""
    if workers <= 1 or len(paths) < PARALLEL_MIN:
        decoder = _decoder(tuned)
        for name, path in paths:
            yield _read(decoder, name, path)
        return
    chunks = [paths[i:i + CHUNK] for i in range(0, len(paths), CHUNK)]
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                initializer=_start_worker, initargs=(tuned,)) as pool:
        for nodes in pool.map(_read_chunk, chunks):
            yield from nodes


def _decoder(tuned: Optional[dict]) -> Decoder:
    def read(m: Machine) -> dict:
        return compare.read(m, tuned)

    return Decoder(read)


def _read(decoder: Decoder, name: str, path: str) -> Node:
    try:
        text = inputs.read_text(path, what="a facts document")
    except inputs.InputError as exc:
        return Node(name, status=MALFORMED, detail=str(exc))
    return decoder.node(text, name)


_WORKER: Optional[Decoder] = None   # each worker process's own decoder (what it remembers stays there)


def _start_worker(tuned: Optional[dict]) -> None:
    global _WORKER
    _WORKER = _decoder(tuned)


def _read_chunk(chunk: list) -> list[Node]:
    decoder = _WORKER if _WORKER is not None else _decoder(None)
    return [_read(decoder, name, path) for name, path in chunk]


def load_tuned(path: str) -> dict:
    """The [fingerprint] table of a config written by ``debtorch tune --write``."""
    try:
        fp = load_config(path).fingerprint
    except ConfigError as exc:
        raise FleetInputError(f"--tuned {exc}") from None
    if not fp:
        raise FleetInputError(f"--tuned {path}: no [fingerprint] table (was it written by 'debtorch tune --write'?)")
    return fp

