"""Untrusted text as a terminal may show it: one rule for every text report and every note.

A facts document, a recording, a fleet document, a linted file's name and code are data someone else
may have written; printed as they are, their control characters can retitle a terminal, erase the
lines above, set the clipboard (OSC 52) or reorder what the reader sees (Trojan Source's bidirectional
overrides, CVE-2021-42574).  :func:`printable` writes each of those characters as an escape instead:
C0 controls (line breaks and tabs included: a value cannot start a line of its own), DEL, C1
controls, the Unicode line and paragraph separators, the bidirectional embeddings, overrides and
isolates (U+202A-U+202E, U+2066-U+2069) and marks (U+061C, U+200E, U+200F), and lone surrogates (an undecodable file name; printing one
would raise).  Everything else, other scripts included, is shown as it is.  ``--json`` documents are
left alone: JSON escapes controls itself, and a reader of JSON wants the value.  Pure; every layer may
import it.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` (``str()`` of it) with every unsafe character written as ``\\xNN`` or ``\\uNNNN``
    (``"\\x1b]0;owned\\x07"``, ``"\\u202e"``); the text itself when it has none.  Printable output stays
    as it is, so ``printable(printable(x)) == printable(x)``."""
    s = str(text)
    if _UNSAFE.search(s) is None:
        return s
    return _UNSAFE.sub(_escape, s)
