"""Scripts that run inside the *target* interpreter (``--python``), never in debtorch's.

They are plain files read as text and passed to ``python -c``, so that they
work in any venv (uv-made ones without pip included) and on Python 3.6+.
Each prints one JSON object as its last line of output.
"""

from pathlib import Path

_HERE = Path(__file__).parent


def source(name: str) -> str:
    return (_HERE / f"{name}.py").read_text()
