"""The one door for reading a file: every file a user names and every file of a recorded machine.
A regular file only (checked before any read), read a chunk at a time in the caller's thread, capped,
decoded whatever wrote it, refused when binary, parsed with nesting and numbers bounded (docs/security.md).
Every failure is an :class:`InputError`, one line naming the file.  Pure; every layer may import it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import sys
from typing import Any, NoReturn, Union

MIB = 1024 * 1024
MAX_BYTES = 8 * MIB          # a facts document, a collect_env report, a recording's file, a fleet document
MAX_CONFIG = 4 * MIB         # a debtorch.toml, a doctor.toml
CHUNK = 65536                # procfs refuses one huge read (ENOMEM)

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))


class InputError(ValueError):
    """An input cannot be used; the message is one line naming the file."""


def decode(data: bytes, name: str) -> str:
    """Text from bytes: a UTF-8 or UTF-16 BOM, BOM-less UTF-16 (NUL in every other
    byte), else UTF-8 (latin-1 for stray bytes).  Binary (NUL bytes) is refused."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16", errors="replace")
    elif data.startswith(b"\xef\xbb\xbf"):
        text = data[3:].decode("utf-8", errors="replace")
    elif len(data) >= 4 and data[1:2] == b"\x00" and data[3:4] == b"\x00" and data[0:1] != b"\x00":
        text = data.decode("utf-16-le", errors="replace")
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    if "\x00" in text:
        raise InputError(f"{name}: binary data, not text")
    return text.lstrip("\ufeff")


def os_reason(exc: OSError) -> str:
    """Why a path could not be opened, in a few words: the system's wording, except for a loop of
    symbolic links (ELOOP), which Python's own checks (``os.path.exists``) report as a missing file."""
    if exc.errno == errno.ELOOP:
        return "a loop of symbolic links"
    return exc.strerror or str(exc)


def size_text(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n // 1024} KiB"


def kind(mode: int) -> str:
    """What a file of ``mode`` is, for a message: "a FIFO", "a character device" ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotRegular(InputError):
    """The path is not a regular file (``kind`` says what it is)."""

    def __init__(self, path: str, kind_: str):
        super().__init__(f"{path}: is {kind_}")
        self.kind = kind_


def read_bytes(path: Union[str, os.PathLike[str]], limit: int, owner_only: bool = False) -> bytes:
    """At most ``limit + 1`` bytes of the regular file ``path`` (one more than the cap tells a
    caller the file is larger).  Raises :class:`NotRegular` before any read, or OSError.
    ``owner_only``: the file must be this user's and nobody else's to read (a secret)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket cannot be opened: say what it is
            raise NotRegular(str(path), kind(os.stat(path).st_mode)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(str(path), kind(st.st_mode))
        if owner_only and (st.st_uid != os.geteuid() or st.st_mode & 0o077):
            raise InputError(f"{path}: must belong to this user and be readable by nobody else "
                             f"(mode {stat.S_IMODE(st.st_mode):o}: chmod 600 it)")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str, max_bytes: int = MAX_BYTES, what: str = "a file") -> str:
    """The text of ``path`` (``-`` reads standard input, which may be a pipe), at most ``max_bytes``."""
    name = "<stdin>" if path == "-" else str(path)
    try:
        if path == "-":
            if sys.stdin is None:  # started with stdin closed (<&-)
                raise InputError(f"{name}: standard input is closed")
            data = sys.stdin.buffer.read(max_bytes + 1)
        else:
            data = read_bytes(path, max_bytes)
    except NotRegular as exc:
        raise InputError(f"{name}: is {exc.kind}, not {what}") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read ({os_reason(exc)})") from None
    if len(data) > max_bytes:
        raise InputError(f"{name}: larger than {size_text(max_bytes)}; not {what}")
    return decode(data, name)


def _no_constant(word: str) -> NoReturn:
    raise ValueError(f"{word} is not a number JSON allows")


def parse_json(text: str, name: str) -> Any:
    """Strict JSON: NaN and Infinity are refused, as strict parsers refuse them."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise InputError(f"{name}: not JSON (nested too deeply)") from None
    except ValueError as exc:
        raise InputError(f"{name}: not JSON ({exc})") from None


def finite(value: Any) -> bool:
    """A real number that is neither NaN nor infinite (bools are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
