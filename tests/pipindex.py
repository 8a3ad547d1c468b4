"""Run the pip lines of the doctor's fixes with real pip, offline (issue 28; docs/checks.md, "How fixes
are verified").

:class:`Index` builds a local package index of stub wheels: one empty wheel per file the real indexes
hold, named from checks/torch_wheels.toml (every ``[[wheel]]`` row's variant, platform and Pythons, every
release ``[[files]]`` names for its series, with the local label and platform tag ``[[files]]`` gives),
under ``<variant>/torch/`` as download.pytorch.org serves them, and PyPI's unlabelled builds (and
nvidia-ml-py) under ``pypi/``.  :func:`run_fix` runs a fix's commands in order in a virtual environment
holding a stub of the machine's installed torch: ``pip uninstall`` for real, each ``pip install`` as
``pip install --dry-run --report`` with download.pytorch.org mapped to the local index (PyPI where the
line names none), and :func:`judge` says what is wrong with what pip would do: nothing installed (pip keeps
the installed torch), or a wheel other than the one the line names.

Two ways to run pip: a pip that takes ``--python-version`` and ``--platform`` with ``--dry-run`` (24.1+)
resolves for the machine's Python and architecture against the real tags; an older one (Debian 12's
23.0.1, 23.2.1) resolves against a view of the index that keeps only the files the machine can install,
retagged ``py3-none-any`` (the tags are this module's to match; versions, labels and "already satisfied"
are pip's).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from packaging.version import InvalidVersion, Version

from debtorch import knowledge

PYTORCH = "https://download.pytorch.org/whl/"
NVML_STUB = ("nvidia-ml-py", "13.580.82")     # what `pip install nvidia-ml-py` gets from PyPI
GLIBC_FLOOR = "2.28"                           # Debian 10's: the oldest glibc assumed where the facts give none
PIP_TIMEOUT = 120.0


# ---------------------------------------------------------------- the machine a fix runs on


@dataclass(frozen=True)
class Target:
    """What pip sees of a machine: its installed torch (None: none), CPython and wheel platform."""

    installed: Optional[str]
    python: Optional[str]                      # None: the facts do not say (python_for picks one)
    platform: str = "linux-x86_64"
    glibc: str = GLIBC_FLOOR

    @property
    def arch(self) -> str:
        return self.platform.split("-", 1)[1]


def python_tags(python: str) -> tuple[str, str]:
    """("cp37", "cp37m"): the interpreter and ABI tags of CPython ``python``'s wheels."""
    digits = python.replace(".", "")
    if python == "2.7":
        return "cp27", "cp27mu"
    return f"cp{digits}", f"cp{digits}" + ("m" if python in ("3.5", "3.6", "3.7") else "")


def platform_fits(tag: str, arch: str, glibc: str) -> bool:
    """A wheel's platform tag installs on Linux ``arch`` with ``glibc`` (PEP 600: manylinux_X_Y needs
    glibc X.Y; manylinux1, 2010, 2014 are 2.5, 2.12, 2.17)."""
    legacy = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}
    for one in tag.split("."):
        if one == f"linux_{arch}":
            return True
        m = re.fullmatch(rf"manylinux_(\d+)_(\d+)_{arch}", one) or re.fullmatch(rf"(manylinux\w+?)_{arch}", one)
        if not m:
            continue
        need = f"{m.group(1)}.{m.group(2)}" if m.re.groups == 2 else legacy.get(m.group(1), "99")
        if Version(need) <= Version(glibc):
            return True
    return False


def platform_tags(target: Target) -> list:
    """Every platform tag pip on ``target`` accepts (pip expands only the legacy manylinux names
    given to --platform, never manylinux_2_39 down to manylinux_2_28)."""
    minor = int(target.glibc.split(".")[1])
    tags = [f"manylinux_2_{m}_{target.arch}" for m in range(minor, 4, -1)]
    legacy = [("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5)]
    return tags + [f"{name}_{target.arch}" for name, need in legacy if need <= minor] + [f"linux_{target.arch}"]


def python_for(target: Target, args: tuple) -> str:
    """The CPython a pip line is resolved for: the machine's, or where the facts do not say, the
    newest the named wheel is built for (a user runs the line in an interpreter it installs in)."""
    if target.python:
        return target.python
    url = index_of(args)
    pins = [r.split("==", 1)[1] for r in requirements(args) if r.startswith("torch==")]
    if url and url.startswith(PYTORCH) and pins:
        row = knowledge.wheel(pins[0].replace(".*", ""), url[len(PYTORCH):].strip("/"), target.platform)
        if row:
            return max(row["python"], key=Version)
    return "3.11"


# ---------------------------------------------------------------- the index


def _wheel(folder: Path, name: str, version: str, tags: str) -> str:
    """An empty wheel of ``name`` ``version`` (metadata only) in ``folder``; its file name."""
    dist = name.replace("-", "_")
    filename = f"{dist}-{version}-{tags}.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(folder / filename, "w") as z:
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: debtorch-tests\nRoot-Is-Purelib: false\nTag: {tags}\n")
        z.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return filename


def _write_project_pages(root: Path) -> None:
    """index.html in every project folder: pip reads a file:// index folder's project page from it."""
    for project in root.glob("*/*"):
        if project.is_dir():
            links = "".join(f'<a href="{f.name}">{f.name}</a>\n' for f in sorted(project.glob("*.whl")))
            (project / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")


@dataclass
class Index:
    """A folder of simple indexes: ``<variant>/torch/`` for download.pytorch.org's, ``pypi/`` for PyPI."""

    root: Path
    files: dict = field(default_factory=dict)        # index name -> [(file name, python, platform tag)]
    _views: dict = field(default_factory=dict)

    @classmethod
    def build(cls, root: Path) -> "Index":
        index = cls(root)
        kb = knowledge.load()
        pypi: dict = {}
        for row in kb.wheels:
            platform = row.get("platform", "linux-x86_64")
            for series in row["torch"]:
                for release in knowledge.releases(series, platform):
                    if row.get("releases") and release not in row["releases"]:
                        continue
                    files = knowledge.wheel_files(release, row["variant"], platform)
                    if files is None:
                        continue
                    label = f"+{row['variant']}" if files["label"] == "variant" else ""
                    for python in row["python"]:
                        index._add(row["variant"], "torch", f"{release}{label}", python, files["tag"])
                        pypi[(release, python, files["tag"])] = True
        for release, python, tag in pypi:
            index._add("pypi", "torch", release, python, tag)
        index._add("pypi", NVML_STUB[0], NVML_STUB[1], None, "any")
        _write_project_pages(root)
        return index

    def _add(self, name: str, project: str, version: str, python: Optional[str], tag: str) -> None:
        folder = self.root / name / project
        folder.mkdir(parents=True, exist_ok=True)
        tags = "py3-none-any" if python is None else "-".join(python_tags(python)) + f"-{tag}"
        if not (folder / f"{project.replace('-', '_')}-{version}-{tags}.whl").exists():
            filename = _wheel(folder, project, version, tags)
            self.files.setdefault(name, []).append((project, filename, python, tag))

    def url(self, index_url: Optional[str]) -> Optional[str]:
        """The local index standing for ``index_url`` (None: PyPI); None for an index not modelled."""
        if index_url is None:
            return (self.root / "pypi").as_uri()
        if not index_url.startswith(PYTORCH):
            return None
        name = index_url[len(PYTORCH):].strip("/")
        return (self.root / name).as_uri() if (self.root / name).is_dir() else (self.root / "none").as_uri()

    def view(self, target: Target, python: str) -> "Index":
        """The files ``target`` can install with CPython ``python``, retagged py3-none-any: the index as
        an older pip (no --platform with --dry-run) sees it on that machine."""
        key = (python, target.platform, target.glibc)
        if key not in self._views:
            root = self.root.parent / f"{self.root.name}-view-{python}-{target.platform}-{target.glibc}"
            view = Index(root)
            interp, _ = python_tags(python)
            for name, entries in self.files.items():
                for project, filename, python, tag in entries:
                    fits = python is None or (python_tags(python)[0] == interp
                                              and platform_fits(tag, target.arch, target.glibc))
                    if fits:
                        version = filename.split("-")[1]
                        folder = root / name / project
                        folder.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(self.root / name / project / filename,
                                        folder / f"{project.replace('-', '_')}-{version}-py3-none-any.whl")
            (root / "none").mkdir(parents=True, exist_ok=True)
            _write_project_pages(root)
            self._views[key] = view
        return self._views[key]


# ---------------------------------------------------------------- pip


@dataclass(frozen=True)
class Pip:
    """A pip to run: its package folder (run as ``python <home>/pip``) and version."""

    home: Path               # a folder holding only a link to the pip package
    version: str

    @property
    def takes_platform(self) -> bool:
        """--python-version and --platform with --dry-run (pip 24.1; older pips want --target)."""
        return Version(self.version) >= Version("24.1")

    @classmethod
    def of(cls, package: Path, work: Path) -> "Pip":
        """The pip whose package folder is ``package`` (.../site-packages/pip), linked alone into
        ``work``: running it from its own site-packages would show pip that folder's torch."""
        version = re.search(r'__version__ = "([^"]+)"', (package / "__init__.py").read_text()).group(1)
        home = work / f"pip-{version}"
        home.mkdir(parents=True, exist_ok=True)
        if not (home / "pip").exists():
            (home / "pip").symlink_to(package, target_is_directory=True)
        return cls(home, version)


def pip_packages() -> list[Path]:
    """The pip package folders of this interpreter and of the other Python 3 interpreters found
    (Debian's python3-pip, a pyenv's), one per version, this interpreter's first."""
    found: dict = {}
    candidates = [sys.executable, "/usr/bin/python3", shutil.which("python3") or ""]
    for python in dict.fromkeys(c for c in candidates if c):
        try:
            out = subprocess.run([python, "-c", "import os, pip; print(pip.__version__, os.path.dirname(pip.__file__))"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        words = out.stdout.split(maxsplit=1)
        if out.returncode == 0 and len(words) == 2:
            found.setdefault(words[0], Path(words[1].strip()))
    return list(found.values())


def _env() -> dict:
    """pip's environment: no configuration file, no PIP_* variable (this machine's find-links, its
    constraints), nothing of the user's."""
    home = os.environ.get("DEBTORCH_CACHE") or "/tmp"
    return {"PATH": "/usr/bin:/bin", "HOME": home, "PIP_CONFIG_FILE": os.devnull, "PYTHONNOUSERSITE": "1",
            "LC_ALL": "C.UTF-8", "PIP_NO_INPUT": "1"}


class Env:
    """A virtual environment without pip, holding a stub of ``installed`` torch (None: no torch)."""

    def __init__(self, path: Path, installed: Optional[str]):
        self.path = path
        venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(path)
        self.site = next(path.glob("lib/python3*/site-packages"))
        if installed:
            info = self.site / f"torch-{installed}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {installed}\n")
            (info / "INSTALLER").write_text("pip\n")
            (info / "RECORD").write_text(f"torch-{installed}.dist-info/METADATA,,\ntorch-{installed}.dist-info/INSTALLER,,\n"
                                         f"torch-{installed}.dist-info/RECORD,,\n")

    def torch(self) -> Optional[str]:
        """The torch version installed here (its dist-info folder), or None."""
        found = sorted(self.site.glob("torch-*.dist-info"))
        return found[0].name[len("torch-"):-len(".dist-info")] if found else None


class Server:
    """A pip server (tests/pipserver.py): ``pip`` imported once, run in a forked child per command."""

    def __init__(self, pip: Pip, work: Path):
        self.pip = pip
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        base = Env(work / "server-python", None)
        self.proc = subprocess.Popen([str(base.path / "bin" / "python"), "-S", str(Path(__file__).with_name("pipserver.py")),
                                      str(pip.home)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env())
        self.calls = 0

    def run(self, env: Env, argv: list) -> tuple:
        """(pip's exit status, what it printed) for ``pip argv`` run in ``env``."""
        self.calls += 1
        log = self.work / f"pip-{self.calls}.log"
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"env": str(env.path), "site": str(env.site), "argv": argv, "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the pip {self.pip.version} server died")
        return json.loads(answer)["rc"], log.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=PIP_TIMEOUT)


# ---------------------------------------------------------------- a fix, run


# A pip command in a fix: at the start of a line, after ": " or inside backticks; it ends at a
# comment, a parenthesis or a backtick.  Its pip: pip, pip3, a venv's bin/pip, or python -m pip.
PIP_WORDS = r"(?:\S*/)?pip3?|(?:\S*/)?python[\d.]*\s+-m\s+pip"
COMMAND = re.compile(rf"(?:^|:\s+|`)(?P<cmd>(?:{PIP_WORDS})\s+(?:install|uninstall)\b[^`#()\n]*)")
VENV = re.compile(r"^\s*(?:\S*/)?python[\d.]*\s+-m\s+venv\s+(?P<dir>\S+)\s*$")
MENTION = re.compile(r"\bpip3?\s+(?:install|uninstall)\b")


@dataclass(frozen=True)
class Step:
    kind: str                # "venv", "install", "uninstall"
    where: str               # the environment: "" the machine's, or the venv folder the fix made
    args: tuple


def steps(fix: str) -> list:
    """The pip and venv commands of a fix, in order; a mention of ``pip install`` that is no command
    (prose) is a step of kind "prose", which :func:`judge` reports."""
    out = []
    for line in fix.splitlines():
        if m := VENV.match(line):
            out.append(Step("venv", m.group("dir"), ()))
            continue
        found = list(COMMAND.finditer(line))
        for m in found:
            words = shlex.split(m.group("cmd"))
            at = next(i for i, w in enumerate(words) if w in ("install", "uninstall"))
            pip = words[0]
            where = pip[: -len("/bin/pip")] if pip.endswith("/bin/pip") else ""
            out.append(Step(words[at], where, tuple(words[at + 1:])))
        if not found and MENTION.search(line):
            out.append(Step("prose", "", (line.strip(),)))
    return out


def requirements(args: tuple) -> list:
    """The requirement words of a pip install's arguments (not options, not their values)."""
    out, skip = [], False
    for word in args:
        if skip:
            skip = False
        elif word in ("--index-url", "-i", "--extra-index-url", "-f", "--find-links"):
            skip = True
        elif not word.startswith("-"):
            out.append(word)
    return out


def index_of(args: tuple) -> Optional[str]:
    words = list(args)
    for flag in ("--index-url", "-i"):
        if flag in words and words.index(flag) + 1 < len(words):
            return words[words.index(flag) + 1]
    return None


def _resolve(server: Server, env: Env, args: tuple, target: Target, index: Index, work: Path) -> tuple:
    """(what ``pip install --dry-run`` would install: [(name, version)], or None and pip's error)."""
    pip = server.pip
    url = index_of(args)
    local = (index if pip.takes_platform else index.view(target, python_for(target, args))).url(url)
    if local is None:
        return None, f"an index the test does not model: {url}"
    rest, skip = [], False
    for word in args:
        if skip:
            skip = False
        elif word in ("--index-url", "-i"):
            skip = True
        else:
            rest.append(word)
    report = work / f"report-{server.calls}.json"
    cmd = ["install", "--dry-run", "--report", str(report), "-q", "--no-deps", "--disable-pip-version-check",
           "--no-cache-dir", "--index-url", local, *rest]
    if pip.takes_platform:
        cmd += ["--only-binary=:all:", "--implementation", "cp", "--python-version", python_for(target, args)]
        for tag in platform_tags(target):
            cmd += ["--platform", tag]
    code, said = server.run(env, cmd)
    if code != 0:
        return None, (said.strip().splitlines() or ["pip failed"])[-1]
    items = json.loads(report.read_text()).get("install", [])
    report.unlink()
    return [(i["metadata"]["name"].lower(), i["metadata"]["version"]) for i in items], ""


def judge_install(args: tuple, installed: Optional[str], got: list, target: Target) -> list:
    """What is wrong with pip installing ``got`` for ``pip install args`` over ``installed`` torch."""
    out = []
    url = index_of(args)
    for req in requirements(args):
        name = re.split(r"[=<>!~\[ ]", req, maxsplit=1)[0].lower()
        mine = [v for n, v in got if n == name]
        if not mine:
            have = f" {installed}" if name == "torch" and installed else ""
            out.append(f"`pip install {' '.join(args)}` installs nothing: pip keeps the installed {name}{have}")
            continue
        if name != "torch":
            continue
        version = mine[0]
        if version == installed and "--force-reinstall" not in args:
            out.append(f"`pip install {' '.join(args)}` reinstalls the installed torch {installed}")
        pin = req.split("==", 1)[1] if "==" in req else None
        if url and url.startswith(PYTORCH):
            variant = url[len(PYTORCH):].strip("/")
            public = version.split("+")[0]
            files = knowledge.wheel_files(public, variant, target.platform)
            want = variant if files is None or files["label"] == "variant" else None
            local = version.split("+")[1] if "+" in version else None
            if local != want:
                out.append(f"`pip install {' '.join(args)}` installs torch {version}, not the {variant} build")
        if pin and not pin.endswith(".*") and version.split("+")[0] != pin.split("+")[0]:
            out.append(f"`pip install {' '.join(args)}` installs torch {version}, not {pin}")
    return out


def run_fix(fix: str, target: Target, server: Server, index: Index, work: Path) -> list:
    """Run ``fix``'s commands for ``target`` with the pip of ``server``; what went wrong (empty: every
    pip line installs the wheel it names)."""
    work.mkdir(parents=True, exist_ok=True)
    envs: dict = {"": Env(work / "machine", target.installed)}
    problems: list = []
    for step in steps(fix):
        if step.kind == "prose":
            problems.append(f"names pip in words no shell runs: {step.args[0]!r}")
            continue
        if step.kind == "venv":
            envs[step.where] = Env(work / f"venv{len(envs)}", None)
            continue
        env = envs.get(step.where)
        if env is None:
            problems.append(f"runs {step.where}/bin/pip before making that venv")
            continue
        before = env.torch()
        if step.kind == "uninstall":
            code, said = server.run(env, ["uninstall", "-y", "--disable-pip-version-check", *step.args])
            if code != 0:
                problems.append(f"`pip uninstall {' '.join(step.args)}` fails: {said.strip()[-200:]}")
            continue
        got, error = _resolve(server, env, step.args, target, index, work)
        if got is None:
            problems.append(f"`pip install {' '.join(step.args)}` fails: {error}")
            continue
        problems.extend(judge_install(step.args, before, got, target))
    return problems


def target_of(m) -> Target:
    """The :class:`Target` of a machine view (debtorch.machine.Machine)."""
    installed = m.torch.version if m.torch.installed else None
    if installed is not None:
        try:
            Version(installed)           # a source build's or a nightly's version is one too
        except InvalidVersion:
            installed = None
    glibc = str(m.get("os.glibc") or "")
    glibc_ok = re.fullmatch(r"\d+\.\d+", glibc) is not None
    return Target(installed=installed, python=m.python_version, platform=m.wheel_platform or "linux-x86_64",
                  glibc=glibc if glibc_ok else GLIBC_FLOOR)


def run_all(cases: dict, pip: Pip, index: Index, work: Path, servers: int = 0) -> dict:
    """``{(target, fix): problems}`` for every case of ``cases`` (keys (target, fix)), run by ``servers``
    pip servers at a time (default: one per CPU, at most 4)."""
    import queue
    import threading

    count = servers or max(1, min(4, len(os.sched_getaffinity(0))))
    pool: queue.Queue = queue.Queue()
    started = [Server(pip, work / f"server-{i}") for i in range(count)]
    for server in started:
        pool.put(server)
    results: dict = {}
    lock = threading.Lock()

    def one(n: int, case: tuple) -> None:
        server = pool.get()
        try:
            found = run_fix(case[1], case[0], server, index, work / f"case-{n}")
        finally:
            pool.put(server)
        with lock:
            results[case] = found

    threads = [threading.Thread(target=one, args=(n, case)) for n, case in enumerate(cases)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for server in started:
            server.close()
    return results
