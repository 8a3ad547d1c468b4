"""Build variants of the fixture hosts for tests: copy one, then change files or _host.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from debtorch import facts as facts_mod
from debtorch.host import ReplayHost

HOSTS = Path(__file__).resolve().parent / "hosts"


def make_host(tmp_path: Path, base: str = "debian12-vm-2core", files: dict = None, remove=(), meta: dict = None,
              commands: dict = None, name: str = "variant") -> ReplayHost:
    """A copy of tests/hosts/<base> with ``files`` written (path -> text), ``remove`` deleted,
    ``meta`` merged into _host.json and ``commands`` (key -> stdout or dict) recorded."""
    dest = tmp_path / name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(HOSTS / base, dest, symlinks=True)
    for path, text in (files or {}).items():
        p = dest / path.lstrip("/")
        if p.is_symlink():
            p.unlink()
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for path in remove:
        p = dest / path.lstrip("/")
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    hj = dest / "_host.json"
    data = json.loads(hj.read_text()) if hj.exists() else {}
    for k, v in (meta or {}).items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k].update(v)
        else:
            data[k] = v
    for key, out in (commands or {}).items():
        data.setdefault("commands", {})[key] = out if isinstance(out, dict) else {"returncode": 0, "stdout": out, "stderr": "", "error": None}
    hj.write_text(json.dumps(data))
    return ReplayHost(dest)


def facts_of(host, **options) -> dict:
    return facts_mod.collect(host, facts_mod.Options(**options))


def diagnose(host_or_facts, **ctx) -> list:
    """The findings (ids) the doctor reports."""
    from debtorch.doctor import Context, diagnose as _diagnose

    doc = host_or_facts if isinstance(host_or_facts, dict) else facts_of(host_or_facts)
    return _diagnose(doc, Context(**ctx)).findings


def ids(findings) -> list:
    return [f.id for f in findings]
