"""A machine replayed from a folder of real files: :class:`ReplayHost`.  Like python-distro with
``root_dir``, a replayed host never falls back to the live machine: what was not recorded is unknown,
with the reason ``not recorded``.  The folder's format (``_host.json``, ``_commands/``, ``_nvml.json``)
is what :class:`~debtorch.host.recording.RecordingHost` writes."""

from __future__ import annotations

import errno
import os
import posixpath
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from debtorch import inputs, schema
from debtorch.host.base import (
    COMMAND_NOT_FOUND,
    NOT_RECORDED,
    CommandResult,
    Host,
    Unavailable,
    command_key,
    norm_path,
    nvml_error_text,
    reason_for,
)

HOST_FILE = "_host.json"
COMMANDS_DIR = "_commands"
NVML_FILE = "_nvml.json"


def _symlink_loop(path: Union[str, os.PathLike[str]]) -> bool:
    """Whether ``path`` ends in a loop of symbolic links (stat says ELOOP; Path.resolve() raises on one before
    Python 3.13, RuntimeError or OSError, and returns the path unresolved from 3.13 on)."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


class ReplayHost(Host):
    """A machine replayed from ``folder``: a fake root plus ``_host.json``.

    ``_host.json`` holds what is not a file: ``machine``, ``python`` (the
    interpreter that ran debtorch), ``environ``, ``rlimits``, ``affinity``,
    ``statvfs``, ``resolve`` (name -> addresses, or ``{"error": reason}``) and
    ``commands`` (keyed by :func:`command_key`; a command's
    stdout may live in ``_commands/<file>`` and be named by ``stdout_file``).
    ``nvml`` is either ``{"file": "_nvml.json"}`` (replayed by
    :mod:`debtorch.nvmlfake`) or ``{"error": "..."}``.
    """

    live = False

    def __init__(self, folder: Union[str, os.PathLike[str]], label: Optional[str] = None) -> None:
        if _symlink_loop(folder):
            raise Unavailable(f"{folder}: a loop of symbolic links")
        try:
            self.root = Path(folder).resolve()
        except (OSError, RuntimeError) as exc:  # what stat did not see (a race): one line all the same
            raise Unavailable(f"{folder}: cannot read ({exc})") from None
        if not self.root.is_dir():
            raise Unavailable(f"{folder}: not a folder")
        self.label = label or f"replay:{self.root.name}"
        meta_path = self.root / HOST_FILE
        self.meta: dict = {}
        if meta_path.exists():
            try:
                self.meta = inputs.parse_json(inputs.read_text(str(meta_path), what="a recording"), str(meta_path))
            except inputs.InputError as exc:
                raise Unavailable(str(exc)) from None
            if bad := _meta_problem(self.meta):
                raise Unavailable(f"{meta_path}: {bad}")
        self._nvml: Optional[tuple[Any, Optional[str]]] = None

    def _inside(self, *parts: str) -> Optional[Path]:
        """``root/parts`` when it is a plain name that stays inside the recording, links
        followed; None otherwise (an absolute or ``..`` name must never read the live machine)."""
        name = parts[-1]
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
            return None
        path = self.root.joinpath(*parts)
        real = os.path.realpath(path)
        return path if real.startswith(str(self.root) + os.sep) else None

    # Paths are resolved inside the fake root, symlinks included, so that an
    # absolute link in a fixture never escapes to the live machine.
    def path(self, p: str) -> Path:
        parts = [x for x in norm_path(p).split("/") if x]
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            if part == ".":
                continue
            candidate = self.root.joinpath(*resolved, part)
            if candidate.is_symlink():
                hops += 1
                if hops > 40:
                    raise Unavailable("too many levels of symbolic links")
                target = os.readlink(candidate)
                if target.startswith("/"):
                    resolved = []
                parts = [x for x in target.split("/") if x] + parts
                continue
            resolved.append(part)
        return self.root.joinpath(*resolved)

    def readlink(self, p: str) -> str:
        parent, name = posixpath.split(norm_path(p))
        real = self.path(parent) / name
        try:
            return os.readlink(real)
        except OSError as exc:
            raise Unavailable(reason_for(exc)) from None

    def run(self, argv: Sequence[str], timeout: float = 5.0, key: Optional[str] = None,
            env: Optional[dict] = None) -> CommandResult:
        args = tuple(str(a) for a in argv)
        rec = (self.meta.get("commands") or {}).get(key or command_key(args))
        if rec is None:
            # Never run here: a named probe (key=...) not recorded is unknown; a plain command
            # missing from the recording was not on the recorded machine.
            reason = NOT_RECORDED if key else (self.meta.get("missing_command_reason") or COMMAND_NOT_FOUND)
            return CommandResult(args, None, "", "", reason)
        stdout = rec.get("stdout", "")
        if rec.get("stdout_file"):
            path = self._inside(COMMANDS_DIR, rec["stdout_file"])
            if path is None:
                return CommandResult(args, None, "", "", "recorded output is not a file inside the recording")
            try:
                stdout = inputs.read_text(str(path), what="recorded output")
            except inputs.InputError as exc:
                return CommandResult(args, None, "", "", f"recorded output unreadable: {exc}")
        return CommandResult(args, rec.get("returncode"), stdout, rec.get("stderr", ""), rec.get("error"))

    def nvml(self) -> tuple[Any, Optional[str]]:
        if self._nvml is None:
            spec = self.meta.get("nvml")
            if not spec:
                self._nvml = (None, "NVML binding not installed (nvidia-ml-py / python3-pynvml)")
            elif spec.get("error"):
                self._nvml = (None, spec["error"])
            else:
                from debtorch import nvmlfake  # defer: only a recording with NVML needs the fake (inspect, 30 ms)

                try:
                    path = self._inside(spec.get("file", NVML_FILE))
                    if path is None:
                        raise ValueError("the NVML recording is not a file inside the recording")
                    fake = nvmlfake.load(path)
                    fake.nvmlInit()
                    self._nvml = (fake, None)
                except Exception as exc:  # a fake raising like the real binding
                    self._nvml = (None, f"NVML did not initialise: {nvml_error_text(exc)}")
        return self._nvml

    @property
    def environ(self) -> dict:
        return dict(self.meta.get("environ") or {})

    def _recorded(self, field: str, key: Optional[str] = None) -> Any:
        """``_host.json``'s ``field`` (its entry ``key``); Unavailable when it was not recorded."""
        val = self.meta.get(field) if key is None else (self.meta.get(field) or {}).get(key)
        if val is None:
            raise Unavailable(NOT_RECORDED)
        return val

    def rlimit(self, name: str) -> tuple[int, int]:
        soft, hard = self._recorded("rlimits", name)
        return int(soft), int(hard)

    def affinity(self) -> list[int]:
        return [int(x) for x in self._recorded("affinity")]

    def statvfs(self, p: str) -> dict:
        return dict(self._recorded("statvfs", norm_path(p)))

    def resolve(self, name: str, timeout: float = 5.0) -> list[str]:
        val = self._recorded("resolve", name)
        if isinstance(val, dict):
            raise Unavailable(str(val.get("error") or "does not resolve"))
        return [str(a) for a in val]

    @property
    def machine(self) -> str:
        return self.meta.get("machine", "x86_64")

    def _own_python(self) -> str:
        return self.meta.get("python", "/usr/bin/python3")

    @property
    def user(self) -> Optional[str]:
        return self.meta.get("user")


_STR, _INT = schema.text(), schema.integer()
_META = {   # a recording's _host.json (open: a newer recording's fields are allowed)
    "machine": _STR, "python": _STR, "user": _STR, "missing_command_reason": _STR, "environ": {"*": _STR},
    "rlimits": {"*": schema.Value(("[soft, hard]", lambda v: isinstance(v, list) and len(v) == 2
                                   and all(schema.is_int(x) for x in v)))},
    "affinity": [_INT], "statvfs": {"*": {"*": schema.number()}}, "nvml": {"*": schema.ANY},
    "commands": {"*": {"stdout": _STR, "stderr": _STR, "stdout_file": _STR, "error": _STR, "returncode": _INT}},
}


def _meta_problem(meta: Any) -> Optional[str]:
    """What is wrong with a recording's _host.json, in one line, or None."""
    try:
        schema.check(meta, _META, open=True)
    except schema.Invalid as exc:
        return str(exc)
    return None
