"""The target interpreter's side of the transport: start-up, the request loop, errors (docs/engine.md).

A torch-side module (``debtorch.train.worker``, ``debtorch.fleet.torchside``) calls :func:`main` with
its :class:`Session`.  Requests come one JSON object per line on stdin; events and results go to the
descriptor named by ``DEBTORCH_PROTOCOL_FD``, never stdout (pointed at stderr, so that the user's
prints cannot corrupt the protocol).  Every failure is a result with ``"ok": false`` and an ``error``
(``kind``, one-line ``message``, the traceback for ``--verbose``).  Standard library only: the user's
interpreter need not have debtorch's dependencies; torch is imported in :func:`main`.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import sys
import traceback
from typing import Any, Iterable

PROTOCOL_VERSION = 1
PROTOCOL_FD_ENV = "DEBTORCH_PROTOCOL_FD"
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (``PR_SET_PDEATHSIG``; a no-op without prctl):
    the worker, each torchrun rank (in a session of its own, out of reach of a group kill) and each
    DataLoader worker, so that killing debtorch never leaves strays behind."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return


class Protocol:
    """Writes one JSON object per line to the protocol descriptor."""

    def __init__(self, fd: int):
        self.stream = os.fdopen(fd, "w", buffering=1, encoding="utf-8", closefd=True)

    def send(self, obj: dict) -> None:
        self.stream.write(json.dumps(obj, default=str, allow_nan=True) + "\n")
        self.stream.flush()


class RequestError(Exception):
    """A request refused with a reason of its own: ``kind`` and a one-line message, no traceback."""

    kind = "bad_request"


class BadRequest(RequestError):
    pass


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (``Type`` alone when there is none)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def describe(exc: BaseException) -> dict:
    """The error object of a request that raised ``exc``: its type, first line and traceback."""
    return {"kind": "exception", "type": type(exc).__name__, "message": one_line(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]}


class Session:
    """What a worker holds between requests; a torch-side module subclasses it and answers ``op_<name>``."""

    def __init__(self, proto: Protocol):
        self.proto = proto

    def handle(self, req: dict) -> dict:
        fn = getattr(self, f"op_{req.get('op')}", None)
        if fn is None:
            raise BadRequest(f"unknown op {req.get('op')!r}")
        return fn(req)

    def classify(self, exc: BaseException) -> dict:
        """The error object of a request that raised ``exc`` (a subclass may say more)."""
        return describe(exc)


def serve(proto: Protocol, stdin: Iterable[str], session: Session) -> int:
    """Answer requests until ``exit`` or end of input."""
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError:
            req, why = None, "a request must be one JSON object per line"
        else:
            why = "a request must be a JSON object"
        if not isinstance(req, dict):
            proto.send({"id": None, "ok": False, "error": {"kind": "bad_request", "message": why}})
            continue
        rid = req.get("id")
        if req.get("op") == "exit":
            proto.send({"id": rid, "ok": True, "result": {}})
            return 0
        try:
            proto.send({"id": rid, "ok": True, "result": session.handle(req)})
        except RequestError as exc:
            proto.send({"id": rid, "ok": False, "error": {"kind": exc.kind, "message": str(exc)}})
            continue
        except Exception as exc:  # noqa: BLE001 - every failure is a result, never a traceback
            error = session.classify(exc)
        else:
            continue
        # Out of the except block, the failed request's frames (a model, batches) can be
        # freed before the next request: after an OOM the next trial needs that memory.
        _release()
        proto.send({"id": rid, "ok": False, "error": error})
    return 0


def _release() -> None:
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def hello(torch: Any) -> dict:
    """Who answers: this process, its Python and torch, the protocol."""
    return {"pid": os.getpid(), "python": sys.executable, "python_version": platform.python_version(),
            "torch": torch.__version__, "protocol": PROTOCOL_VERSION}


def main(make_session: Any) -> int:
    """The start-up of a torch-side module: the protocol, stdout to stderr, torch imported, the hello;
    then ``make_session(proto)`` answers the requests."""
    fd = int(os.environ.get(PROTOCOL_FD_ENV, "-1"))
    if fd < 0:
        sys.stderr.write("debtorch worker: run by debtorch (no protocol descriptor)\n")
        return 2
    proto = Protocol(fd)
    # The user's prints go to stderr, never into the protocol or the report.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    die_with_parent()
    try:
        import torch
    except ImportError as exc:
        proto.send({"event": "fatal", "kind": "no_torch", "message": f"{sys.executable} has no torch ({exc})"})
        return 3
    except Exception as exc:  # noqa: BLE001 - a broken torch install
        proto.send({"event": "fatal", "kind": "broken_torch",
                    "message": f"{sys.executable}: import torch failed: {type(exc).__name__}: {str(exc).strip()[:200]}"})
        return 3
    proto.send({"event": "hello", **hello(torch)})
    return serve(proto, sys.stdin, make_session(proto))
