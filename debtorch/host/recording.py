"""Recording the live machine into a folder that :class:`~debtorch.host.replay.ReplayHost` loads
(``debtorch facts --record DIR``): :class:`RecordingHost`."""

from __future__ import annotations

import errno
import json
import os
import posixpath
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from debtorch import inputs, outputs
from debtorch.host.base import MAX_READ, CommandResult, Unavailable, command_key, norm_path, reason_for
from debtorch.host.environment import allowed_environ
from debtorch.host.live import LiveHost
from debtorch.host.replay import COMMANDS_DIR, HOST_FILE, NVML_FILE


class RecordingHost(LiveHost):
    """The live machine, writing what it reads into ``folder`` (``debtorch facts --record DIR``): only what
    debtorch reads is copied, the environment reduced to the allowlist (:func:`allowed_environ`)."""

    def __init__(self, folder: Union[str, os.PathLike[str]],
                 trim: Optional[dict[str, Callable[[str], str]]] = None) -> None:
        super().__init__()
        self.final = Path(folder)
        # A new or empty folder only: a recording must not overwrite a user's files,
        # nor mix with an older recording that replay would then believe.
        try:
            if self.final.is_symlink():  # (exists() is False for a loop, and rename() cannot replace a link)
                raise Unavailable(f"{folder}: {_link_problem(self.final)}; record into a new or empty folder")
            if self.final.exists() and not self.final.is_dir():
                raise Unavailable(f"{folder}: not a folder")
            if self.final.is_dir() and any(self.final.iterdir()):
                raise Unavailable(f"{folder}: not empty (record into a new or empty folder)")
            # Everything goes into a hidden folder beside it, renamed into place by save():
            # an interrupted recording never leaves a folder that replays as a broken machine.
            self.final.parent.mkdir(parents=True, exist_ok=True)
            self.out = Path(outputs.temporary_folder(f".{self.final.name}.recording-", dir=str(self.final.parent)))
        except OSError as exc:
            raise Unavailable(f"{folder}: {reason_for(exc)}") from None
        self.label = "live (recording)"
        self._lock = threading.Lock()
        self._open = True
        self.meta: dict = {"commands": {}, "statvfs": {}, "rlimits": {}}
        self._trim = trim or {}

    def discard(self) -> None:
        """Remove what was recorded, unless save() moved it into place.  Nothing is written after:
        a thread still reading (a signal cut short the wait for it) must not recreate the folder."""
        with self._lock:
            self._open = False
            outputs.remove_folder(str(self.out))

    def _store(self, dest: Path, text: str) -> None:
        """Write a recorded file: only inside the recording, never through a link."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not (os.path.realpath(dest.parent) + os.sep).startswith(os.path.realpath(self.out) + os.sep):
            return  # a recorded link leads out of the recording: never write there
        if os.path.lexists(dest):
            if os.path.islink(dest) or not os.path.isfile(dest):
                return
            os.unlink(dest)
        outputs.new_file(str(dest), text)

    def __enter__(self) -> "RecordingHost":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self.discard()

    def _dest(self, p: str) -> Path:
        return self.out / norm_path(p).lstrip("/")

    def _copy_links(self, p: str) -> None:
        """Recreate the symlinks along ``p`` inside the recording."""
        parts = [x for x in norm_path(p).split("/") if x]
        cur = "/"
        for part in parts:
            cur = posixpath.join(cur, part)
            if os.path.islink(cur):
                dest = self._dest(cur)
                if not os.path.lexists(dest):
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(os.readlink(cur), dest)
                target = os.readlink(cur)
                real = posixpath.normpath(posixpath.join(posixpath.dirname(cur), target)) if not target.startswith("/") else target
                rest = "/".join(parts[parts.index(part) + 1 :])
                self._copy_links(posixpath.join(real, rest) if rest else real)
                return

    def _keep(self, p: str, write: Callable[[Path], None]) -> None:
        """Recreate the links along ``p`` in the recording, then ``write`` its copy (its place in the
        recording), unless discarded.  A plain lock: a signal's exception cannot leave it held."""
        with self._lock:
            if self._open:
                self._copy_links(p)
                write(self._dest(os.path.realpath(p)))

    def read_text(self, p: str, max_bytes: int = MAX_READ) -> str:
        text = super().read_text(p, max_bytes)
        trim = self._trim.get(norm_path(p))
        self._keep(p, lambda dest: self._store(dest, trim(text) if trim else text))
        return text

    def listdir(self, p: str) -> list[str]:
        names = super().listdir(p)
        self._keep(p, lambda base: self._stand_ins(p, base, names))
        return names

    def _stand_ins(self, p: str, base: Path, names: list[str]) -> None:
        base.mkdir(parents=True, exist_ok=True)
        for name in names:
            full = posixpath.join(p, name)
            if os.path.islink(full):
                if not os.path.lexists(base / name):
                    os.symlink(os.readlink(full), base / name)
                    if os.path.isdir(os.path.realpath(full)):
                        self._dest(os.path.realpath(full)).mkdir(parents=True, exist_ok=True)
            else:
                _stand_in(base / name, os.path.isdir(full))

    def readlink(self, p: str) -> str:
        target = super().readlink(p)
        folder, name = posixpath.split(p)

        def link(dest: Path) -> None:
            dest.mkdir(parents=True, exist_ok=True)
            if not os.path.lexists(dest / name):
                os.symlink(target, dest / name)

        self._keep(folder, link)
        return target

    def exists(self, p: str) -> bool:
        if found := super().exists(p):
            self._keep(p, lambda dest: _stand_in(dest, os.path.isdir(p)))
        return found

    def is_dir(self, p: str) -> bool:
        if found := super().is_dir(p):
            self._keep(p, lambda dest: _stand_in(dest, True))
        return found

    def run(self, argv: Sequence[str], timeout: float = 5.0, key: Optional[str] = None,
            env: Optional[dict] = None) -> CommandResult:
        res = super().run(argv, timeout=timeout, key=key, env=env)
        self._note("commands", key or command_key(res.argv), res.to_json())
        return res

    def _note(self, field: str, key: str, value: Any) -> None:
        """Record ``value`` as ``_host.json``'s ``field[key]``."""
        with self._lock:
            self.meta.setdefault(field, {})[key] = value

    def rlimit(self, name: str) -> tuple[int, int]:
        val = super().rlimit(name)
        self._note("rlimits", name, list(val))
        return val

    def affinity(self) -> list[int]:
        val = super().affinity()
        self.meta["affinity"] = val
        return val

    def statvfs(self, p: str) -> dict:
        val = super().statvfs(p)
        self._note("statvfs", norm_path(p), val)
        return val

    def resolve(self, name: str, timeout: float = 5.0) -> list[str]:
        try:
            val = super().resolve(name, timeout)
        except Unavailable as exc:
            self._note("resolve", name, {"error": exc.reason})
            raise
        self._note("resolve", name, val)
        return val

    def save(self, rewrite: Optional[Callable[[str], str]] = None) -> Path:
        """Write ``_host.json`` (and large command outputs) into the folder, then move it into place.

        ``rewrite`` (``facts --record --redact``: the redactor) is applied to every text of the
        recording before it is moved: file contents, file and folder names, link targets,
        command outputs and every string (and key) of ``_host.json`` and the NVML recording."""
        same = rewrite or (lambda text: text)
        # Our own files first: no recorded path may take their names (a machine with a /_host.json).
        for name in (HOST_FILE, NVML_FILE, COMMANDS_DIR):
            if os.path.lexists(self.out / name):
                _remove(self.out / name)
        meta = dict(self.meta)
        meta["machine"] = self.machine
        meta["python"] = self._own_python()
        meta["user"] = self.user
        meta["environ"] = allowed_environ(os.environ, keep_venv=True)
        if rewrite:
            _rewrite_tree(self.out, rewrite)
        commands = {}
        cmd_dir = self.out / COMMANDS_DIR
        for i, (name, rec) in enumerate(sorted(meta["commands"].items())):
            rec = dict(rec)
            if len(rec.get("stdout") or "") > 512:
                cmd_dir.mkdir(exist_ok=True)
                fname = f"{i:02d}-{_slug(same(name))}.out"
                outputs.new_file(str(cmd_dir / fname), same(rec.pop("stdout")))
                rec["stdout_file"] = fname
            commands[name] = rec
        meta["commands"] = commands
        nv = self._nvml
        if nv is not None:
            if nv[0] is None:
                meta["nvml"] = {"error": nv[1]}
            else:
                from debtorch import nvmlfake  # defer: as in ReplayHost.nvml

                dump = _rewrite_json(nvmlfake.dump(nv[0]), same)
                outputs.new_file(str(self.out / NVML_FILE), json.dumps(dump, indent=1, sort_keys=True))
                meta["nvml"] = {"file": NVML_FILE}
        meta = _rewrite_json(meta, same)
        outputs.new_file(str(self.out / HOST_FILE), json.dumps(meta, indent=1, sort_keys=True) + "\n")
        # Into place at once: rename(2) replaces an empty folder, and nothing else.
        try:
            os.rename(self.out, self.final)
        except OSError as exc:
            raise Unavailable(f"{self.final}: {reason_for(exc)} (the recording is in {self.out})") from None
        return self.final / HOST_FILE


def _stand_in(dest: Path, folder: bool) -> None:
    """A folder, or an empty file: existence is all that was asked, not a copy."""
    if folder:
        dest.mkdir(parents=True, exist_ok=True)
    elif not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.touch()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _rewrite_json(obj: Any, rewrite: Callable[[str], str]) -> Any:
    """Every string of a JSON value, keys included, through ``rewrite``."""
    if isinstance(obj, dict):
        return {rewrite(k) if isinstance(k, str) else k: _rewrite_json(v, rewrite) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rewrite_json(v, rewrite) for v in obj]
    return rewrite(obj) if isinstance(obj, str) else obj


def _rewrite_tree(root: Path, rewrite: Callable[[str], str]) -> None:
    """Every text file, link target and name under ``root`` through ``rewrite`` (deepest first,
    so that a folder is renamed after what it holds).  Nothing outside ``root`` is touched."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                target = os.readlink(path)
                if rewrite(target) != target:
                    os.unlink(path)
                    os.symlink(rewrite(target), path)
            elif os.path.isfile(path):
                with open(path, "rb") as fh:
                    text = fh.read().decode("utf-8", errors="replace")
                if rewrite(text) != text:
                    os.unlink(path)
                    outputs.new_file(path, rewrite(text))
            new = rewrite(name)
            if new != name and "/" not in new and not os.path.lexists(os.path.join(dirpath, new)):
                os.rename(path, os.path.join(dirpath, new))


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "-" for c in text.split(" -c ")[0])
    return "-".join(x for x in keep.split("-") if x)[:60] or "command"


def _link_problem(path: Path) -> str:
    """What the symbolic link ``path`` is, for a message: a loop, or a link."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"is {inputs.os_reason(exc)}"
    return "is a symbolic link"
