"""The fuzzing suite (issue 13): the real commands, in-process, on mutated inputs.

Every property drives the command line (``debtorch.cli.app``) as a user would, with a
mutated facts document, config, recording or collect_env report, and asserts what a
user must be able to rely on whatever the input:

* no traceback: the command ends with an exit code, never an exception;
* bad input is exit 2 and one line on stderr (naming the file);
* no file is written anywhere but the named destination (the working directory and
  the input's folder are compared before and after);
* under ``--host`` and ``--facts`` nothing of the live machine is read or run: no
  process starts (``no_live``) and every file opened lies in the recording, this
  checkout or Python's own installation.

CI runs a bounded slice (``DEBTORCH_FUZZ_EXAMPLES``, default 20 examples per
property, well under a minute in all).  To fuzz for long, raise it::

    DEBTORCH_FUZZ_EXAMPLES=5000 ./dev.sh test -q tests/test_fuzz.py -p no:cacheprovider

(hypothesis keeps the failing examples it finds in .hypothesis/ and replays them first.)
"""

import builtins
import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest
from clitools import HOSTS, ROOT, cli_runner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import debtorch
from debtorch import facts as facts_mod
from debtorch.cli import app
from debtorch.facts import schema
from debtorch.host import ReplayHost
from debtorch.tune import config as config_mod

runner = cli_runner()
EXAMPLES = int(os.environ.get("DEBTORCH_FUZZ_EXAMPLES", "20"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="DEBTORCH_FUZZ_EXAMPLES" not in os.environ,
                report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
BASE_HOST = HOSTS / "debian13-workstation-rtx3080"
BASE_FACTS = facts_mod.collect(ReplayHost(BASE_HOST))
COLLECT_ENV = sorted((ROOT / "tests" / "collect_env").glob("*.txt"))
ALLOWED_ROOTS = {os.path.realpath(p) for p in (ROOT, sys.prefix, sys.base_prefix, sys.exec_prefix)}


# ---------------------------------------------------------------------------
# What every run must show


def tree(folder: Path) -> dict:
    """{relative path: (size, mtime)} of everything under ``folder``, links not followed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st_ = os.lstat(p)
            out[os.path.relpath(p, folder)] = (st_.st_size, st_.st_mtime_ns)
    return out


def ended_well(res, args):
    """No traceback; exit 0, 1 or 2; exit 2 is one line on stderr."""
    assert res.exit_code in (0, 1, 2), (args, res.exit_code, res.stderr, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), (args, repr(res.exception))
    assert "Traceback" not in res.stdout + res.stderr, args
    if res.exit_code == 2:
        assert len(res.stderr.strip().splitlines()) == 1, (args, res.stderr)
    if "--json" in args and res.exit_code in (0, 1):
        json.loads(res.stdout, parse_constant=lambda word: pytest.fail(f"{word} in --json output"))


@pytest.fixture
def reads(monkeypatch):
    """Every path opened with open() during the test (what a replayed host reads goes through it)."""
    seen = []
    real_open = builtins.open

    def spy(file, *a, **k):
        if isinstance(file, (str, bytes, os.PathLike)):
            seen.append(os.fsdecode(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", spy)
    return seen


def only_inside(seen: list, *roots: Path, also=()) -> None:
    """No file of the live machine was opened: each lies in ``roots``, the checkout or Python
    (or is one of ``also``); then forget them, for the next example."""
    allowed = {os.path.realpath(r) for r in roots} | ALLOWED_ROOTS
    for path in seen:
        real = os.path.realpath(path)
        assert path in also or any(real == r or real.startswith(r + os.sep) for r in allowed), f"live read: {path}"
    seen.clear()


# doctor --facts and --from-collect-env check another machine's facts against *this* site's rules
# (docs/site-config.md): the only files of this machine they read.
SITE_CONFIGS = ("/etc/debtorch/doctor.toml", os.path.expanduser("~/.config/debtorch/doctor.toml"))


# ---------------------------------------------------------------------------
# Values


LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, -1, 2**63 - 1, 2**63]),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                 st.sampled_from(["../../etc/passwd", "/etc/hostname", "/proc/self/environ", "", "\x00", "~"]))
VALUE = st.recursive(LEAF, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                  st.dictionaries(st.text(max_size=10), kids, max_size=3)),
                     max_leaves=8)


def json_safe(v):
    """JSON text cannot hold NaN (the parsers refuse it): keep the value, as a string."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, list):
        return [json_safe(x) for x in v]
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    return v


# ---------------------------------------------------------------------------
# Facts documents: doctor --facts, tune --facts (--write)


FACT_MUTATIONS = st.lists(st.tuples(st.sampled_from(sorted(schema.SCHEMA)),
                                    st.sampled_from(["*"] + sorted({k for s in schema.SCHEMA.values() for k in s})),
                                    VALUE), min_size=1, max_size=4)


@FUZZ
@given(muts=FACT_MUTATIONS, raw=st.one_of(st.none(), st.binary(max_size=64)))
def test_fuzz_facts_documents(tmp_path_factory, monkeypatch, no_live, reads, muts, raw):
    work = tmp_path_factory.mktemp("facts")
    monkeypatch.chdir(work)
    doc = json.loads(json.dumps(BASE_FACTS))
    for section, key, value in muts:
        if key == "*":
            doc[section] = json_safe(value)
        elif isinstance(doc.get(section), dict):
            doc[section][key] = json_safe(value)
    f = work / "facts.json"
    f.write_bytes(raw if raw is not None else json.dumps(doc).encode())
    before = tree(work)
    reads.clear()  # from here on, only what the commands open
    for args in (["doctor", "--facts", str(f)], ["doctor", "--facts", str(f), "--json"],
                 ["doctor", "--facts", str(f), "-v", "--redact"], ["fleet", str(f)],
                 ["tune", "--facts", str(f), "--json"], ["tune", "--facts", str(f), "--write", "out.toml"]):
        res = runner.invoke(app, args)
        ended_well(res, args)
        after = tree(work)
        if "--write" in args and res.exit_code == 0:
            assert set(after) - set(before) == {"out.toml"}
            config_mod.load_config("out.toml")   # what tune wrote loads
            os.unlink("out.toml")
            after = tree(work)
        assert after == before, (args, set(after) ^ set(before))
    only_inside(reads, work, also=SITE_CONFIGS)


NET_BASE = facts_mod.collect(ReplayHost(HOSTS / "debian12-server-8xa100-nvlink"))
NET_KEYS = sorted(schema.SCHEMA["network"]) + ["*"]
NET_FIELDS = sorted({k for v in schema.SCHEMA["network"].values() if isinstance(v, list) for k in v[0]}
                    | set(schema.SCHEMA["network"]["master_addr"]))


@FUZZ
@given(muts=st.lists(st.tuples(st.sampled_from(NET_KEYS), st.one_of(st.none(), st.sampled_from(NET_FIELDS)),
                               st.one_of(VALUE, st.just([None]), st.just([{}]))), min_size=1, max_size=4))
def test_fuzz_network_facts(tmp_path_factory, no_live, muts):
    """Issue 23: wrong-typed network facts (an interface's fields, InfiniBand ports, MASTER_ADDR) in
    the doctor's every view and in fleet's comparison: refused with one line, or reported."""
    work = tmp_path_factory.mktemp("network")
    doc = json.loads(json.dumps(NET_BASE))
    for key, field, value in muts:
        value = json_safe(json.loads(json.dumps(value)))
        net = doc["network"] if isinstance(doc["network"], dict) else {}
        if key == "*":
            doc["network"] = value
        elif field is None or not isinstance(net.get(key), (list, dict)):
            net[key] = value
        elif isinstance(net[key], dict):
            net[key][field] = value
        elif net[key] and isinstance(net[key][0], dict):
            net[key][0][field] = value
    (work / "odd.json").write_text(json.dumps(doc))
    (work / "base.json").write_text(json.dumps(NET_BASE))
    f = str(work / "odd.json")
    for args in (["doctor", "--facts", f], ["doctor", "--facts", f, "-v"], ["doctor", "--facts", f, "--json"],
                 ["doctor", "--facts", f, "--redact"], ["fleet", str(work)], ["fleet", str(work), "--json"]):
        ended_well(runner.invoke(app, args), args)


# ---------------------------------------------------------------------------
# Configs: debtorch.load() and verify-train --config


KEYS = sorted(config_mod.TABLE_OF) + list(config_mod.SCHEDULE_EXTRA) + ["oversubscribe", "x", "OMP_NUM_THREADS"]
TABLES = list(config_mod.SCHEMA) + ["other"]
CONFIG = st.dictionaries(st.sampled_from(TABLES), st.one_of(
    st.dictionaries(st.sampled_from(KEYS), LEAF.filter(lambda v: v is not None), max_size=4), LEAF), max_size=6)


def toml_text(doc: dict) -> str:
    import tomlkit

    clean = {k: v for k, v in doc.items() if v is not None}
    return tomlkit.dumps(clean)


class _Accepted(Exception):
    """verify-train took the config and would now start training."""


def _accept(prepared, *args, **kwargs) -> None:
    """Prepared.run for a config verify-train took: stop the worker prepare() started (it would go on
    importing torch after the test) and start no training."""
    prepared.close()
    raise _Accepted()


@FUZZ
@given(doc=CONFIG, junk=st.one_of(st.none(), st.text(max_size=40), st.binary(max_size=40)))
def test_fuzz_configs(tmp_path_factory, monkeypatch, doc, junk):
    from debtorch.verify import run

    work = tmp_path_factory.mktemp("config")
    monkeypatch.chdir(work)
    if isinstance(doc.get("schema_version"), (dict, type(None))) and doc.get("other") is None:
        doc["schema_version"] = 1
    path = work / "debtorch.toml"
    try:
        text = toml_text(doc)
    except Exception:  # tomlkit cannot write every value (a NUL in a key): the bytes then
        text = repr(doc)
    if isinstance(junk, bytes):
        path.write_bytes(text.encode() + junk)
    else:
        path.write_text(text + (junk or ""))
    before = tree(work)
    try:
        cfg = debtorch.load(str(path), warn_on_mismatch=False)
    except config_mod.ConfigError as exc:
        msg = str(exc)
        assert msg.startswith(str(path)) and "\n" not in msg, msg
    else:
        assert cfg.settings.validate() == []
    # verify-train --config: the same file, refused with one line or taken (training is not started).
    monkeypatch.setattr(run, "worker_python", lambda python, host: sys.executable)
    monkeypatch.setattr(run.facts_mod, "collect", lambda host, options: json.loads(json.dumps(BASE_FACTS)))
    monkeypatch.setattr(run.Prepared, "run", _accept)
    res = runner.invoke(app, ["verify-train", "--config", str(path)])
    if not isinstance(res.exception, _Accepted):
        ended_well(res, ["verify-train", "--config"])
        assert res.exit_code == 2 and f"--config {path}" in res.stderr
    assert tree(work) == before


# ---------------------------------------------------------------------------
# Recordings: _host.json and the files under --host


META_KEYS = ["machine", "python", "user", "environ", "rlimits", "affinity", "statvfs", "commands", "nvml",
             "missing_command_reason"]
ESCAPES = st.sampled_from(["/etc/passwd", "/etc", "/proc/self/environ", "../../../../etc/passwd", "/", "..",
                           "/dev/zero", "_host.json"])
FILES = st.sampled_from(["/etc/os-release", "/etc/debian_version", "/proc/cpuinfo", "/proc/meminfo",
                         "/proc/self/mountinfo", "/proc/driver/nvidia/version", "/sys/fs/cgroup/cpu.max",
                         "/var/lib/dpkg/status", "/proc/sys/kernel/hostname", "/etc/apt/sources.list"])


@FUZZ
@given(meta=st.lists(st.tuples(st.sampled_from(META_KEYS), VALUE), max_size=3),
       stdout_file=st.one_of(st.none(), ESCAPES), nvml_file=st.one_of(st.none(), ESCAPES),
       files=st.lists(st.tuples(FILES, st.one_of(st.binary(max_size=200), st.text(max_size=200))), max_size=3),
       links=st.lists(st.tuples(FILES, ESCAPES), max_size=2))
def test_fuzz_recordings(tmp_path_factory, monkeypatch, no_live, reads, meta, stdout_file, nvml_file, files, links):
    work = tmp_path_factory.mktemp("replay")
    monkeypatch.chdir(work)
    rec = work / "rec"
    shutil.copytree(BASE_HOST, rec, symlinks=True)
    hj = rec / "_host.json"
    data = json.loads(hj.read_text())
    for key, value in meta:
        data[key] = json_safe(value)
    if stdout_file is not None and isinstance(data.get("commands"), dict):
        for rec_ in data["commands"].values():
            if isinstance(rec_, dict):
                rec_["stdout_file"] = stdout_file
    if nvml_file is not None:
        data["nvml"] = {"file": nvml_file}
    hj.write_text(json.dumps(data))
    for path, content in files:
        p = rec / path.lstrip("/")
        if p.is_symlink() or p.is_dir():
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    for path, target in links:
        p = rec / path.lstrip("/")
        if os.path.lexists(p):
            if p.is_dir() and not p.is_symlink():
                continue
            p.unlink()
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(target)
    before = tree(work)
    reads.clear()  # from here on, only what the commands open
    for args in (["facts", "--host", str(rec), "--json"], ["doctor", "--host", str(rec)],
                 ["tune", "--host", str(rec), "--json"]):
        res = runner.invoke(app, args)
        ended_well(res, args)
        assert tree(work) == before, args
    only_inside(reads, rec)


# ---------------------------------------------------------------------------
# collect_env reports: doctor --from-collect-env


@FUZZ
@given(report=st.sampled_from(COLLECT_ENV), cuts=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 40)), max_size=4),
       inserts=st.lists(st.tuples(st.integers(0, 400), st.text(max_size=60)), max_size=4),
       noise=st.one_of(st.none(), st.binary(max_size=32)), truncate=st.one_of(st.none(), st.integers(0, 4000)))
def test_fuzz_collect_env_reports(tmp_path_factory, monkeypatch, no_live, reads, report, cuts, inserts, noise,
                                  truncate):
    work = tmp_path_factory.mktemp("collect_env")
    monkeypatch.chdir(work)
    lines = report.read_text().splitlines()
    for at, n in cuts:
        del lines[at:at + n]
    for at, text in inserts:
        lines.insert(min(at, len(lines)), text)
    data = "\n".join(lines).encode()
    if truncate is not None:
        data = data[:truncate]
    if noise is not None:
        data = data[: len(data) // 2] + noise + data[len(data) // 2:]
    f = work / "report.txt"
    f.write_bytes(data)
    before = tree(work)
    reads.clear()  # from here on, only what the commands open
    for args in (["doctor", "--from-collect-env", str(f)], ["doctor", "--from-collect-env", str(f), "--json"]):
        res = runner.invoke(app, args)
        ended_well(res, args)
        assert tree(work) == before, args
    only_inside(reads, work, report.parent, also=SITE_CONFIGS)
