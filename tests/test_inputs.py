"""Files a user names (facts, reports, configs) are bounded and typed at the edge:
one line naming the file and the field, exit 2, never a traceback (issue 13, item 6)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from debtorch import facts as facts_mod
from debtorch import inputs
from debtorch.cli import app
from debtorch.facts import schema
from debtorch.host import ReplayHost

from clitools import HOSTS

runner = CliRunner()
VM_FACTS = facts_mod.collect(ReplayHost(HOSTS / "debian13-workstation-rtx3080"))


def _doctor(path):
    return runner.invoke(app, ["doctor", "--facts", str(path)])


def _one_line_exit_2(res, said):
    assert res.exit_code == 2, res.output
    assert said in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


@pytest.mark.parametrize("path,value,said", [
    (("cpu", "features"), "avx2", "cpu.features: expected an object, got a string"),
    (("os", "pretty_name"), 5, "os.pretty_name: expected a string, got an integer"),
    (("nvidia", "unknown"), ["x"], "nvidia.unknown: expected an object, got a list"),
    (("env", "variables"), "PATH=/bin", "env.variables: expected an object, got a string"),
    (("nvidia", "gpus"), [{"index": "zero"}], "nvidia.gpus[0].index: expected an integer, got a string"),
    (("cpu", "usable_cpus"), True, "cpu.usable_cpus: expected an integer, got true/false"),
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


def test_an_endless_device_is_read_only_up_to_the_cap():
    with pytest.raises(inputs.InputError, match="larger than 1 MiB"):
        inputs.read_text("/dev/zero", 1024 * 1024)


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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
