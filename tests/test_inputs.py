"""Files a user names (facts, reports, configs) are bounded and typed at the edge:
one line naming the file and the field, exit 2, never a traceback (issue 13, item 6)."""

import json
import os
import re
import socket

import pytest
from clitools import HOSTS, cli_runner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import debtorch
from debtorch import facts as facts_mod
from debtorch.cli import app
from debtorch.facts import schema
from debtorch.host import ReplayHost
from debtorch.tune.config import ConfigError

runner = CliRunner()
cli = cli_runner()
VM_FACTS = facts_mod.collect(ReplayHost(HOSTS / "debian13-workstation-rtx3080"))


def _doctor(path):
    return runner.invoke(app, ["doctor", "--facts", str(path)])


def _one_line_exit_2(res, said):
    assert res.exit_code == 2, res.output
    assert said in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


@pytest.mark.parametrize("path,value,said", [
    (("cpu", "features"), "avx2", 'cpu.features: must be a table (got "avx2")'),
    (("os", "pretty_name"), 5, "os.pretty_name: must be a string (got 5)"),
    (("nvidia", "unknown"), ["x"], "nvidia.unknown: must be a table (got an array)"),
    (("env", "variables"), "PATH=/bin", 'env.variables: must be a table (got "PATH=/bin")'),
    (("nvidia", "gpus"), [{"index": "zero"}], 'nvidia.gpus[0].index: must be an integer (got "zero")'),
    (("cpu", "usable_cpus"), True, "cpu.usable_cpus: must be an integer (got true)"),
])
def test_a_wrong_typed_field_is_named(tmp_path, path, value, said):
    doc = json.loads(json.dumps(VM_FACTS))
    doc[path[0]][path[1]] = value
    f = tmp_path / "facts.json"
    f.write_text(json.dumps(doc))
    _one_line_exit_2(_doctor(f), f"{f}: {said}")


@pytest.mark.parametrize("data,said", [
    (b"[" * 100_000, "nested too deeply"),
    (b'{"schema_version": 1, "cpu": {"usable_cpus": NaN}}', "NaN is not a number JSON allows"),
    (b"\x00\x01\x02\x03", "binary data, not text"),
    (b"{" + b" " * (8 * 1024 * 1024) + b"}", "larger than 8 MiB"),
])
def test_a_file_that_is_not_a_facts_document(tmp_path, data, said):
    f = tmp_path / "facts.json"
    f.write_bytes(data)
    _one_line_exit_2(_doctor(f), said)


def test_utf16_from_powershell_and_a_bom_are_read(tmp_path):
    text = json.dumps(VM_FACTS)
    for i, data in enumerate((text.encode("utf-16"), b"\xef\xbb\xbf" + text.encode())):
        f = tmp_path / f"facts{i}.json"
        f.write_bytes(data)
        assert _doctor(f).exit_code in (0, 1)


# ---------------------------------------------------------------------------
# Issue 23: one door for every input file.  A FIFO, a device or a socket is refused before any
# read (it would wait for a writer, or never end), one line, exit 2, by every command that reads
# a file the user names and by debtorch.load().


def _special(tmp_path, kind):
    if kind == "character device":
        return "/dev/zero"
    path = tmp_path / f"x-{kind.replace(' ', '-')}.json"
    if kind == "FIFO":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        _SOCKETS.append(sock)
    return str(path)


_SOCKETS: list = []


@pytest.fixture(autouse=True, scope="module")
def _close_sockets():
    yield
    while _SOCKETS:
        _SOCKETS.pop().close()

READERS = {
    "doctor --facts": lambda p: ["doctor", "--facts", p],
    "tune --facts": lambda p: ["tune", "--facts", p],
    "doctor --from-collect-env": lambda p: ["doctor", "--from-collect-env", p],
    "doctor --config": lambda p: ["doctor", "--host", str(HOSTS / "debian12-vm-2core"), "--config", p],
    "verify-train --config": lambda p: ["verify-train", "--config", p],
    "fleet FILE": lambda p: ["fleet", p],
    "fleet --tuned": lambda p: ["fleet", "--tuned", p, str(HOSTS)],
    "lint": lambda p: ["lint", p],
}


@pytest.mark.parametrize("kind", ["FIFO", "character device", "socket"])
@pytest.mark.parametrize("command", READERS)
def test_only_a_regular_file_is_read_by_every_command(tmp_path, command, kind):
    path = _special(tmp_path, kind)
    res = cli.invoke(app, READERS[command](path))
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"{path}: is a {kind}" in res.stderr, res.stderr


@pytest.mark.parametrize("kind", ["FIFO", "character device"])
def test_debtorch_load_reads_only_a_regular_file(tmp_path, kind):
    path = _special(tmp_path, kind)
    with pytest.raises(ConfigError, match=f"^{re.escape(path)}: is a {kind}, not a debtorch config$"):
        debtorch.load(path)


# The cap of each kind (docs/security.md, "What it reads"): one byte more is refused with one line.
CAPS = {
    "doctor --facts": (8, lambda p: ["doctor", "--facts", p]),
    "doctor --from-collect-env": (8, lambda p: ["doctor", "--from-collect-env", p]),
    "doctor --config": (4, lambda p: ["doctor", "--host", str(HOSTS / "debian12-vm-2core"), "--config", p]),
    "verify-train --config": (4, lambda p: ["verify-train", "--config", p]),
    "fleet --tuned": (4, lambda p: ["fleet", "--tuned", p, str(HOSTS)]),
}


@pytest.mark.parametrize("command", CAPS)
def test_each_kind_of_input_has_its_cap(tmp_path, command):
    mib, args = CAPS[command]
    path = tmp_path / "big"
    with open(path, "wb") as fh:
        fh.truncate(mib * 1024 * 1024 + 1)   # sparse: nothing is written, the size is what counts
    res = cli.invoke(app, args(str(path)))
    assert res.exit_code == 2 and f"larger than {mib} MiB" in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_lint_refuses_a_script_its_memory_budget_cannot_parse(tmp_path):
    """A dense script is refused unparsed by its token count (the tree it would build), long before the
    byte cap; a larger one by its size, unread."""
    from debtorch.lint import api

    dense = tmp_path / "dense.py"
    dense.write_bytes(b"import torch\n" + b"a\n" * 300_000)   # 600 KB: a name alone on each line
    res = cli.invoke(app, ["lint", str(dense)])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "dense.py: too large to lint within lint's 512 MiB memory budget (its syntax tree could take" in res.stderr
    big = tmp_path / "big.py"
    with open(big, "wb") as fh:
        fh.truncate(api.MAX_SCRIPT + 1)
    res = cli.invoke(app, ["lint", str(big)])
    assert res.exit_code == 2 and res.stderr.strip().endswith(
        "big.py: larger than 8 MiB: too large to lint within lint's 512 MiB memory budget"), res.stderr
    sparse = tmp_path / "sparse.py"   # the same 600 KB as real code is: comments, strings, blank lines
    sparse.write_bytes(b"import torch\n" + b"# a comment about the next line, as real code has\nx = 'a string'\n\n" * 9000)
    assert cli.invoke(app, ["lint", str(sparse)]).exit_code == 0


def test_fleet_documents_have_the_facts_cap_and_are_read_in_any_encoding(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    text = json.dumps(VM_FACTS)
    (folder / "bom.json").write_bytes(b"\xef\xbb\xbf" + text.encode())
    (folder / "utf16.json").write_bytes(text.encode("utf-16"))
    with open(folder / "huge.json", "wb") as fh:
        fh.truncate(8 * 1024 * 1024 + 1)
    res = cli.invoke(app, ["fleet", str(folder), "--json"])
    out = json.loads(res.stdout)
    assert out["nodes"]["compared"] == 2, out["nodes"]
    [huge] = out["nodes"]["not_compared"]
    assert huge["name"] == "huge" and "larger than 8 MiB" in huge["detail"]


def test_a_recording_whose_files_are_fifos_replays_at_once(tmp_path):
    """A FIFO as a recorded file or a recorded command's output never waits for a writer."""
    import shutil

    rec = tmp_path / "rec"
    shutil.copytree(HOSTS / "debian13-workstation-rtx3080", rec, symlinks=True)
    (rec / "proc" / "cpuinfo").unlink()
    os.mkfifo(rec / "proc" / "cpuinfo")
    meta = json.loads((rec / "_host.json").read_text())
    name = next(n for n, c in meta["commands"].items() if c.get("stdout_file"))
    os.unlink(rec / "_commands" / meta["commands"][name]["stdout_file"])
    os.mkfifo(rec / "_commands" / meta["commands"][name]["stdout_file"])
    doc = facts_mod.collect(ReplayHost(rec))
    assert doc["cpu"]["unknown"]["model"] == "/proc/cpuinfo: is a FIFO, not a regular file"
    assert "is a FIFO, not recorded output" in ReplayHost(rec).run(name.split(" ")).error


def test_every_recorded_machine_matches_the_schema():
    for d in sorted(HOSTS.iterdir()):
        if (d / "_host.json").exists():
            doc = json.loads(json.dumps(facts_mod.collect(ReplayHost(d), facts_mod.Options(deep=True))))
            assert schema.check(doc) is None, d.name


def _mutations():
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                     st.text(max_size=20))
    value = st.recursive(leaf, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                      st.dictionaries(st.text(max_size=8), kids, max_size=3)),
                         max_leaves=8)
    sections = st.sampled_from(list(schema.SCHEMA))
    return st.lists(st.tuples(sections, st.sampled_from(["*"] + sorted({k for s in schema.SCHEMA.values() for k in s})),
                              value), min_size=1, max_size=4)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(muts=_mutations())
def test_mutated_facts_never_raise(tmp_path, muts):
    """Any mutation of a real document: the doctor reports or refuses with one line."""
    doc = json.loads(json.dumps(VM_FACTS))
    for section, key, value in muts:
        if key == "*":
            doc[section] = value
        elif isinstance(doc.get(section), dict):
            doc[section][key] = value
    f = tmp_path / "facts.json"
    f.write_text(json.dumps(doc))
    for args in (["doctor", "--facts", str(f)], ["doctor", "--facts", str(f), "--json"],
                 ["tune", "--facts", str(f)]):
        res = runner.invoke(app, args)
        assert res.exit_code in (0, 1, 2), (args, res.output, res.exception)
        assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
        if res.exit_code == 2:
            assert len(res.output.strip().splitlines()) == 1, res.output
