"""Files debtorch writes (a config, a plot, a trace, a recording, the man page) and the temporary
folders it makes, written safely: whole or not at all, never over an existing file without ``force``,
never over anything but a regular file, never through a planted link; temporary folders registered
and removed however the process ends.  The write side of :mod:`debtorch.inputs`; how and what is
written where: docs/security.md.  Every failure is an :class:`OutputError`, one line naming the path.
"""

from __future__ import annotations

import atexit
import errno
import os
import shutil
import stat
import threading
from typing import BinaryIO, Callable, Optional, Union

from debtorch.inputs import kind as _kind


class OutputError(Exception):
    """A file cannot be written; ``str()`` is one line naming the path."""


def check_destination(path: str, force: bool = False) -> str:
    """Refuse a destination :func:`write_atomic` would refuse; return its folder.

    Called before minutes of measuring (tune --write, verify-train --plot), so
    that the work is not lost to a bad destination.
    """
    if not path or not str(path).strip():
        raise OutputError("an empty path names no file")
    path = str(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{path}: is a directory")
        if not force:
            raise OutputError(f"{path}: exists; use --force to replace it")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{path}: is {_kind(st.st_mode)}; only a regular file is replaced")
    if not os.path.isdir(directory):
        raise OutputError(f"{path}: cannot write: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write: directory {directory} is read-only for this user")
    return directory


def write_atomic(path: str, data: Union[str, bytes], force: bool = False) -> None:
    """Write ``data`` (text is UTF-8) to ``path`` whole or not at all; replace a regular
    file only with ``force``.  Leaves no temporary file behind."""
    blob = data.encode("utf-8") if isinstance(data, str) else data
    write_with(path, lambda fh: fh.write(blob), force)


def write_with(path: str, fill: Callable[[BinaryIO], object], force: bool = False) -> None:
    """Like :func:`write_atomic`, the content written by ``fill(binary file)`` (matplotlib's savefig)."""
    directory = check_destination(path, force)
    base = os.path.basename(path)
    import tempfile  # defer: only a command that writes a file needs it (doctor stays fast)

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base[:40]}.", suffix=".tmp", dir=directory)  # O_EXCL | O_NOFOLLOW
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        publish(tmp, path, force)
    except OSError as exc:  # (an OutputError, not an OSError, goes through as it is)
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def publish(tmp: str, path: str, force: bool = False) -> None:
    """Put the finished file ``tmp`` (in ``path``'s folder) in place: never over an
    existing file without ``force``, never over anything but a regular file."""
    if not force:
        try:
            os.link(tmp, path)  # fails if path exists, whatever it is: never overwrites
            os.unlink(tmp)
            return
        except FileExistsError:
            raise OutputError(f"{path}: exists; use --force to replace it") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            # A filesystem without hard links: check, then rename.
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not force:
            raise OutputError(f"{path}: exists; use --force to replace it")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{path}: is {_kind(st.st_mode)}; only a regular file is replaced")
    os.replace(tmp, path)


def new_file(path: str, data: Union[str, bytes]) -> None:
    """Create ``path`` exclusively (inside a folder debtorch just made, such as a
    recording): an existing file or a link under that name is an error, never followed."""
    blob = data.encode("utf-8") if isinstance(data, str) else data
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o666)
    with os.fdopen(fd, "wb") as fh:
        fh.write(blob)


def cache_dir() -> str:
    """Where debtorch keeps what it can rebuild (the built-in workloads' image files):
    $DEBTORCH_CACHE, else $XDG_CACHE_HOME/debtorch, else ~/.cache/debtorch (a relative path is ignored)."""
    explicit = os.environ.get("DEBTORCH_CACHE")
    if explicit and os.path.isabs(explicit):
        return explicit
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):  # the XDG base directory spec: a relative path is invalid
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "debtorch")


# ---------------------------------------------------------------------------
# Temporary folders, removed however the process ends

_temporary: set = set()
_lock = threading.Lock()


def temporary_folder(prefix: str, dir: Optional[str] = None) -> str:
    """A new private folder (mode 0700, created exclusively, as ``mkdtemp`` does), registered for
    removal *before* it exists: a signal at any moment cannot leave it unregistered."""
    import tempfile  # defer: as in write_with

    base = os.path.abspath(dir or tempfile.gettempdir())
    for _ in range(100):
        path = os.path.join(base, prefix + os.urandom(4).hex())
        with _lock:
            _temporary.add(path)
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:  # someone else's: never ours to remove
            with _lock:
                _temporary.discard(path)
    raise FileExistsError(errno.EEXIST, f"no unused name for a temporary folder in {base}")


def remove_folder(path: Optional[str]) -> None:
    """Remove a registered temporary folder (and forget it)."""
    if not path:
        return
    shutil.rmtree(path, ignore_errors=True)
    with _lock:
        _temporary.discard(path)


def remove_temporary() -> None:
    """Remove every temporary folder still registered (at exit, and after a signal)."""
    with _lock:
        left = list(_temporary)
    for path in left:
        remove_folder(path)


def leftover() -> list:
    """The registered temporary folders not yet removed (tests)."""
    with _lock:
        return sorted(_temporary)


atexit.register(remove_temporary)
