"""The doctor's framework: findings, crashes, silencing, exit codes, the two views, --redact."""

import json

import pytest
from hostkit import HOSTS, facts_of, ids, make_host
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from debtorch import doctor
from debtorch.cli import app
from debtorch.doctor import Context, diagnose
from debtorch.doctor.siteconfig import SiteConfigError, parse
from debtorch.findings import CRASH_ID, Finding, finding
from debtorch.report import console
from debtorch.report.doctor import doctor_lines

runner = CliRunner()
VM = str(HOSTS / "debian12-vm-2core")


def test_findings_compare_field_by_field():
    a = finding("cpu.W001", governor="powersave", facts={"cpu.governor": "powersave"})
    assert a == Finding("cpu.W001", "warning", "CPU frequency governor is powersave, not performance",
                        "sudo apt install linux-cpupower\nsudo cpupower frequency-set -g performance", "",
                        (("cpu.governor", "powersave"),))
    assert a != finding("cpu.W001", governor="powersave", fix="y")
    with pytest.raises(ValueError):
        Finding("x.E001", "fatal", "bad level")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=20)


@given(JSON)
def test_a_findings_facts_come_back_as_they_went_in(value):
    """A fact's value, frozen into a finding (hashable, comparable), is the same JSON value in its
    document: a list of pairs stays a list, an empty dict a dict."""
    f = Finding("cpu.W001", "warning", "m", facts=(("x", value),))
    assert hash(f) == hash(Finding("cpu.W001", "warning", "m", facts=(("x", value),)))
    assert f.to_json()["facts"] == {"x": value}


def test_a_dict_and_a_list_of_pairs_stay_apart_also_redacted():
    from debtorch.doctor import Report
    from debtorch.report.redact import redact_report

    facts = {"pairs": [["a", 1]], "empty": {}, "map": {"b": [], "a": {}}}
    f = finding("cpu.W001", governor="powersave", facts=facts)
    assert f.to_json()["facts"] == facts
    _doc, redacted, _files = redact_report({}, Report([f]))
    assert redacted.findings[0].to_json()["facts"] == facts


def test_a_crashing_check_is_a_finding_not_a_traceback(replay):
    def broken(m, ctx):
        return m.facts["no such section"]["x"]

    checks = doctor.registry.copy()
    checks.add("gpu", broken)
    report = diagnose(facts_of(replay("debian12-vm-2core")), checks=checks)
    [crash] = report.crashed
    assert crash.id == CRASH_ID and crash.area == "gpu" and "KeyError" in crash.message
    assert report.fails()
    lines = doctor_lines({}, report)
    assert any(l.text.startswith("[☠] GPUs") and l.kind == "crash" for l in lines)
    assert any(l.startswith("[#] GPUs") for l in console.texts(doctor_lines({}, report, unicode=False)))


def test_exit_codes_and_fail_on(tmp_path):
    host = make_host(tmp_path, files={"/sys/devices/system/cpu/cpufreq/policy0/scaling_governor": "powersave\n"})
    res = runner.invoke(app, ["doctor", "--host", str(host.root)])
    assert res.exit_code == 0, res.output         # a warning does not fail by default
    assert "cpu.W001" in res.output
    res = runner.invoke(app, ["doctor", "--host", str(host.root), "--fail-on", "warning"])
    assert res.exit_code == 1
    res = runner.invoke(app, ["doctor", "--host", str(tmp_path / "nope")])
    assert res.exit_code == 2
    res = runner.invoke(app, ["doctor", "--fail-on", "sometimes"])
    assert res.exit_code == 2


def test_errors_exit_1(tmp_path):
    host = make_host(tmp_path, meta={"statvfs": {"/dev/shm": {"total": 64 << 20, "free": 64 << 20, "used": 0}}})
    res = runner.invoke(app, ["doctor", "--host", str(host.root)])
    assert res.exit_code == 1 and "memory.E002" in res.output and "[✗] Memory and limits" in res.output


def test_json_view_is_one_object_with_schema_version():
    res = runner.invoke(app, ["doctor", "--host", VM, "--json"])
    doc = json.loads(res.output)
    assert doc["schema_version"] == 1 and doc["facts"]["schema_version"] == 1
    assert set(doc["summary"]) >= {"errors", "warnings", "infos", "crashed_checks"}
    assert doc["exit_code"] == res.exit_code


def test_verbose_shows_info_findings(tmp_path):
    host = make_host(tmp_path, files={"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "100000\n"})
    quiet = runner.invoke(app, ["doctor", "--host", str(host.root)])
    loud = runner.invoke(app, ["doctor", "--host", str(host.root), "-v"])
    assert "cpu.I001" not in quiet.output and "cpu.I001" in loud.output
    assert "facts: cpu.usable_cpus=1" in loud.output
    # -v shows the details: it no longer points to itself (issue 34, item 10).
    assert quiet.output.startswith("Doctor summary (debtorch doctor -v shows details):\n")
    assert loud.output.startswith("Doctor summary:\n") and "-v shows details" not in loud.output


def test_saved_facts_replay_without_the_live_machine(tmp_path, no_live):
    res = runner.invoke(app, ["facts", "--host", VM, "--json"])
    path = tmp_path / "f.json"
    path.write_text(res.output)
    out = runner.invoke(app, ["doctor", "--facts", str(path)])
    assert out.exit_code == 0, out.output
    assert "Debian GNU/Linux 12" in out.output


@pytest.mark.parametrize("content,needle", [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"os": {}}', "no schema_version"),
    ('{"schema_version": 99}', "schema_version 99"),
])
def test_malformed_facts_file_is_one_line_exit_2(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    res = runner.invoke(app, ["doctor", "--facts", str(path)])
    assert res.exit_code == 2
    assert needle in res.output and str(path) in res.output and "Traceback" not in res.output


def test_missing_facts_file(tmp_path):
    res = runner.invoke(app, ["doctor", "--facts", str(tmp_path / "none.json")])
    assert res.exit_code == 2 and "cannot read" in res.output


def test_site_config_silences_and_adds_minimums(tmp_path):
    host = make_host(tmp_path, files={
        "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor": "powersave\n",
        "/etc/debtorch/doctor.toml": 'silence = ["cpu.W001"]\n[minimums]\ntorch = "2.14"\n',
    })
    res = runner.invoke(app, ["doctor", "--host", str(host.root), "--json"])
    doc = json.loads(res.output)
    assert "cpu.W001" in doc["silenced"] and "cpu.W001" not in [f["id"] for f in doc["findings"]]
    assert "site.E002" in [f["id"] for f in doc["findings"]] and res.exit_code == 1
    assert doc["site_config"] == ["/etc/debtorch/doctor.toml"]


@pytest.mark.parametrize("text,needle", [
    ('silence = ["cpu.W001"]\ncolour = "red"\n', "x.toml:2: colour: unknown key"),
    ('silence = ["not an id"]\n', 'x.toml:1: silence[0]: must be an id like cpu.W001, gpu.E* or gpu.* (got "not an id")'),
    ('[minimums]\ndriver = "five-three-five"\n', 'x.toml:2: minimums.driver: must be a version (got "five-three-five")'),
    ('[minimums]\nram = "1"\n', "x.toml:2: minimums.ram: unknown key"),
    ('silence = [', "x.toml:1: not valid TOML"),
])
def test_site_config_errors_name_file_line_and_key(text, needle):
    with pytest.raises(SiteConfigError) as exc:
        parse(text, "x.toml")
    assert str(exc.value).startswith(needle)


def test_bad_site_config_on_the_cli_exits_2(tmp_path):
    cfg = tmp_path / "doctor.toml"
    cfg.write_text("[minimums]\nshm = 'lots'\n")
    res = runner.invoke(app, ["doctor", "--host", VM, "--config", str(cfg)])
    assert res.exit_code == 2 and f"{cfg}:2: minimums.shm" in res.output


@pytest.mark.parametrize("data", [b'silence = ["memory.W002"]\n# caf\xe9 (latin-1)\n',
                                  '\ufeffsilence = ["memory.W002"]\n'.encode("utf-16"),   # PowerShell's '>'
                                  '\ufeffsilence = ["memory.W002"]\n'.encode("utf-8")])
def test_site_config_in_another_encoding_is_read(tmp_path, data):
    cfg = tmp_path / "doctor.toml"
    cfg.write_bytes(data)
    host = str(HOSTS / "debian12-driver-mismatch-rtx3090")      # its open-file limit gives memory.W002
    res = runner.invoke(app, ["doctor", "--host", host, "--config", str(cfg), "--json"])
    assert res.exit_code in (0, 1), res.output
    assert "memory.W002" in json.loads(res.output)["silenced"]


@pytest.mark.parametrize("data,said", [(b"\x00\x01\x02binary", "binary data, not text"),
                                       (b"[" * 100_000, "not valid TOML"),
                                       (b"x" * (4 * 1024 * 1024 + 1), "larger than 4 MiB")])
def test_bad_site_config_file_exits_2_with_one_line(tmp_path, data, said):
    cfg = tmp_path / "doctor.toml"
    cfg.write_bytes(data)
    res = runner.invoke(app, ["doctor", "--host", VM, "--config", str(cfg)])
    assert res.exit_code == 2 and said in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_every_fail_level_is_handled(tmp_path):
    """Each --fail-on level has its exit status on a machine with a warning and no error: a new level
    must say its own here."""
    from debtorch.cli.doctor import FailOn
    host = make_host(tmp_path, files={"/sys/devices/system/cpu/cpufreq/policy0/scaling_governor": "powersave\n"})
    expected = {FailOn.error: 0, FailOn.warning: 1}
    assert set(expected) == set(FailOn)
    for level, code in expected.items():
        res = runner.invoke(app, ["doctor", "--host", str(host.root), "--fail-on", level.value])
        assert res.exit_code == code, (level, res.output)


@pytest.mark.parametrize("damage", ["no folder", "row without source"])
def test_broken_checks_data_exits_2_with_one_line(tmp_path, monkeypatch, damage):
    import shutil

    from debtorch import knowledge
    folder = tmp_path / "checks"
    if damage == "row without source":
        shutil.copytree(knowledge.checks_dir(), folder)
        text = (folder / "thresholds.toml").read_text()
        start = text.index('source = "')
        (folder / "thresholds.toml").write_text(text[:start] + text[text.index("\n", start) + 1:])
    monkeypatch.setenv(knowledge.ENV_DIR, str(folder))
    res = runner.invoke(app, ["doctor", "--host", VM])
    assert res.exit_code == 2 and CRASH_ID not in res.output
    assert res.output.count("\n") == 1 and str(folder) in res.output
    if damage == "row without source":
        assert "thresholds.toml:" in res.output and "threshold[0].source: missing" in res.output


def test_site_driver_minimum_applies_when_only_nvidia_smi_gives_the_driver(tmp_path):
    # No NVML binding (nvidia-smi answered) and no /proc/driver/nvidia/version in this container.
    from debtorch.doctor.siteconfig import SiteConfig
    host = make_host(tmp_path, base="debian12-container-t4-shm64m", remove=["/proc/driver/nvidia/version"])
    doc = facts_of(host)
    assert doc["nvidia"]["driver_version"] == "515.105.01" and doc["nvidia"]["kernel_module"] is None
    found = diagnose(doc, Context(site=SiteConfig(minimums={"driver": "550.54.14"}))).findings
    assert [f.message for f in found if f.id == "site.E001"] == [
        "NVIDIA driver 515.105.01 is below this site's minimum 550.54.14"]


@pytest.mark.parametrize("command", ["facts", "doctor"])
def test_a_python_that_is_no_interpreter_is_bad_usage(command, tmp_path):
    runner = CliRunner()
    data = tmp_path / "notes.txt"
    data.write_text("not a program\n")
    for python, message in ((str(tmp_path / "nope" / "python"), "not an executable file"),
                            (str(data), "not an executable file"),
                            ("no-such-python-3.99", "not found on PATH")):
        res = runner.invoke(app, [command, "--json", "--python", python])
        assert res.exit_code == 2, res.output
        assert f"--python {python}: {message}" in res.output and "Traceback" not in res.output
    # With --host the path belongs to the recorded machine: not checked here.
    res = runner.invoke(app, [command, "--json", "--host", str(HOSTS / "debian12-vm-2core"),
                              "--python", str(tmp_path / "nope" / "python")])
    assert res.exit_code in (0, 1), res.output


def test_a_recording_without_the_deep_probe_is_unknown_not_a_failed_import(tmp_path, replay):
    """--deep on a machine recorded without it: nothing ran, so nothing failed (was a string
    search of the error text in the check; now the facts say unknown, with the reason)."""
    base = make_host(tmp_path, name="base")
    data = json.loads((base.root / "_host.json").read_text())
    kept = {k: v for k, v in data["commands"].items() if not k.endswith("<probe:deep>")}
    host = make_host(tmp_path, meta={"commands": None})
    (host.root / "_host.json").write_text(json.dumps({**data, "commands": kept}))
    host = type(host)(host.root)
    doc = facts_of(host, deep=True)
    assert doc["python"]["deep"] is None and "record with --deep" in doc["python"]["unknown"]["deep"]
    assert "torch.E005" not in ids(diagnose(doc).findings)
