"""Build variants of the fixture hosts for tests: copy one, then change files or _host.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from clitools import HOSTS

from debtorch import facts as facts_mod
from debtorch.host import ReplayHost


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
    from debtorch.doctor import Context
    from debtorch.doctor import diagnose as _diagnose

    doc = host_or_facts if isinstance(host_or_facts, dict) else facts_of(host_or_facts)
    return _diagnose(doc, Context(**ctx)).findings


def ids(findings) -> list:
    return [f.id for f in findings]


def probe_key(host, kind="light") -> str:
    data = json.loads((host.root / "_host.json").read_text())
    return next(k for k in data["commands"] if k.endswith(f"<probe:{kind}>"))


def probe(host, kind="light"):
    """(key, the JSON the probe printed) of a fixture host."""
    key = probe_key(host, kind)
    return key, json.loads(host.run(["x"], key=key).stdout)


def set_probe(host, kind, data) -> ReplayHost:
    """Record new output for a probe of ``host`` (a make_host copy) and replay it afresh."""
    hj = host.root / "_host.json"
    meta = json.loads(hj.read_text())
    key = next((k for k in meta["commands"] if k.endswith(f"<probe:{kind}>")), None) or \
        probe_key(host, "light").replace("<probe:light>", f"<probe:{kind}>")
    meta["commands"][key] = {"returncode": 0, "stdout": json.dumps(data), "stderr": "", "error": None}
    hj.write_text(json.dumps(meta))
    return ReplayHost(host.root)


def with_torch(tmp_path, base, version, cuda=None, dists=None, deep=None, name="torch-variant", **make):
    """A copy of ``base`` whose target interpreter holds torch ``version`` built for ``cuda``.
    ``dists`` replaces the nvidia-* wheel list ({name: version}); ``deep`` (dict) updates the deep probe."""
    host = make_host(tmp_path, base=base, name=name, **make)
    _, light = probe(host)
    if version is None:
        light["torch"] = None
        light["distributions"].pop("torch", None)
    else:
        t = dict(light.get("torch") or {"location": "/x/site-packages/torch"})
        t.update(version=version, cuda=cuda, hip=None)
        light["torch"] = t
        light["distributions"]["torch"] = {"version": version, "location": "/x/site-packages"}
    if dists is not None:
        light["distributions"] = {k: v for k, v in light["distributions"].items() if not k.startswith("nvidia-")}
        light["distributions"].update({k: {"version": v, "location": "/x/site-packages"} for k, v in dists.items()})
        light["libraries"] = [p for p in light.get("libraries", []) if "/nvidia/" not in p]
    host = set_probe(host, "light", light)
    if deep is not None:
        try:
            _, d = probe(host, "deep")
        except StopIteration:
            d = {"ok": True, "warnings": [], "errors": {}}
        d.update(deep)
        host = set_probe(host, "deep", d)
    return host


def relink(host, path: str, target: str) -> None:
    link = host.root / path.lstrip("/")
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def change_nvml(host, change) -> ReplayHost:
    path = host.root / "_nvml.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return ReplayHost(host.root)


def add_packages(host, *names_versions) -> ReplayHost:
    """Add installed packages to the dpkg status of a make_host copy."""
    path = host.root / "var/lib/dpkg/status"
    text = path.read_text() if path.exists() else ""
    for name, version in names_versions:
        text = text.rstrip("\n") + f"\n\nPackage: {name}\nStatus: install ok installed\nArchitecture: amd64\nVersion: {version}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return ReplayHost(host.root)
