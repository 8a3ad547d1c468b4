"""Files a user names on the command line (facts, configs, reports), read safely.

Every such input is capped in size (``/dev/zero`` is not read until memory runs
out), decoded whatever editor or shell wrote it (UTF-8 with or without a BOM,
UTF-16 as PowerShell's ``>`` writes it), refused when it is binary, and parsed
without letting a pathological nesting (``[`` 100,000 times) raise
RecursionError.  Every failure is an :class:`InputError` whose message is one
line naming the file.  Pure (the files are the user's, not the machine's: the
Host is for the described machine); every layer may import it.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

MAX_BYTES = 8 * 1024 * 1024


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


def read_text(path: str, max_bytes: int = MAX_BYTES, what: str = "a file") -> str:
    """The text of ``path`` (``-`` reads standard input), at most ``max_bytes``."""
    name = "<stdin>" if path == "-" else str(path)
    try:
        if path == "-":
            if sys.stdin is None:  # started with stdin closed (<&-)
                raise InputError(f"{name}: standard input is closed")
            data = sys.stdin.buffer.read(max_bytes + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(max_bytes + 1)
    except IsADirectoryError:
        raise InputError(f"{name}: is a directory, not {what}") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise InputError(f"{name}: larger than {max_bytes // (1024 * 1024)} MiB; not {what}")
    return decode(data, name)


def _no_constant(word: str):
    raise ValueError(f"{word} is not a number JSON allows")


def parse_json(text: str, name: str) -> Any:
    """Strict JSON: NaN and Infinity are refused, as strict parsers refuse them."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise InputError(f"{name}: not JSON (nested too deeply)") from None
    except ValueError as exc:
        raise InputError(f"{name}: not JSON ({exc})") from None


def parse_toml(text: str, name: str) -> dict:
    import tomllib  # defer: only a TOML input needs the parser (doctor stays fast)

    try:
        return tomllib.loads(text)
    except RecursionError:
        raise InputError(f"{name}: not valid TOML (nested too deeply)") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{name}: not valid TOML ({exc})") from None


def finite(value: Any) -> bool:
    """A real number that is neither NaN nor infinite (bools are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
