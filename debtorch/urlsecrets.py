"""Secrets in URLs: the credentials of ``https://user:token@index.example/simple`` and query parameters
named like a token (``?access_token=...``, ``&sig=...``).  One rule for ``--redact`` (report/redact.py)
and for what a fleet rank sends (docs/security.md): the host, the path and the other parameters stay,
which is all a comparison needs.  Pure, no debtorch imports.
"""

from __future__ import annotations

import re
from typing import Any

USERINFO = re.compile(r"(?<=://)[^/\s@]+@")
CREDENTIALS = "CREDENTIALS@"
# A parameter whose name is, or ends or starts with, a word that names a secret (x-amz-signature,
# private_token, api_key); "keyword" is not "key".
SECRET_PARAM = re.compile(
    r"(?i)(?<=[?&;])((?:[\w.-]*[_-])?(?:token|secret|password|passwd|pwd|auth|authorization|key|apikey|"
    r"access_key|sig|signature|credential|credentials|session|sas)(?:[_-][\w.-]*)?=)[^&#\s;]*")
REDACTED = "REDACTED"


def scrub(text: str) -> str:
    """``text`` with every URL's credentials replaced by ``CREDENTIALS@`` and the values of its
    token-like query parameters by ``REDACTED``."""
    if "://" not in text:
        return text
    text = USERINFO.sub(CREDENTIALS, text)
    return SECRET_PARAM.sub(lambda m: m.group(1) + REDACTED, text)


def scrub_all(value: Any) -> Any:
    """A JSON value with :func:`scrub` applied to every string in it (not to the keys: names)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: scrub_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_all(v) for v in value]
    return value
