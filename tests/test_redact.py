"""--redact: no identifying value survives in either view; versions do."""

import json

from hypothesis import given, strategies as st
from typer.testing import CliRunner

from debtorch.cli import app
from debtorch.report.redact import Redactor
from hostkit import make_host

runner = CliRunner()

SECRETS = ["gpu-node-17.example.org", "gpu-node-17", "alice", "10.20.30.40", "fe80::1234:5678",
           "GPU-5b6c1a2e-9f3d-4c1e-8a7b-0123456789ab", "00:1b:21:3a:4f:5e"]


def secret_host(tmp_path, replay):
    import json as _json
    base = replay("debian12-vm-2core")
    light = _json.loads(base.run(["x"], key="/work/main/.venv/bin/python3 <probe:light>").stdout)
    light["executable"] = "/home/alice/venvs/torch/bin/python"
    light["prefix"] = "/home/alice/venvs/torch"
    return make_host(tmp_path, files={
        "/proc/sys/kernel/hostname": "gpu-node-17.example.org\n",
        "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor": "powersave\n",
    }, meta={
        "user": "alice",
        "python": "/home/alice/venvs/torch/bin/python",
        "environ": {"MASTER_ADDR": "10.20.30.40", "NCCL_COMM_ID": "[fe80::1234:5678]:29500",
                    "CUDA_VISIBLE_DEVICES": "GPU-5b6c1a2e-9f3d-4c1e-8a7b-0123456789ab",
                    "NCCL_DEBUG_SUBSYS": "00:1b:21:3a:4f:5e", "OMP_NUM_THREADS": "8"},
    }, commands={"/home/alice/venvs/torch/bin/python <probe:light>": _json.dumps(light)})


def test_no_identifying_value_survives_in_either_view(tmp_path, replay):
    host = secret_host(tmp_path, replay)
    for args in (["--json"], ["-v"]):
        plain = runner.invoke(app, ["doctor", "--host", str(host.root), *args])
        assert "alice" in plain.output   # the test data is really there
        if args == ["--json"]:
            assert all(x in plain.output for x in SECRETS[:5])
        red = runner.invoke(app, ["doctor", "--host", str(host.root), "--redact", *args])
        for secret in SECRETS:
            assert secret.lower() not in red.output.lower(), (secret, args)
        assert red.exit_code == plain.exit_code


def test_tokens_are_consistent_and_versions_are_kept(tmp_path, replay):
    host = secret_host(tmp_path, replay)
    doc = json.loads(runner.invoke(app, ["doctor", "--host", str(host.root), "--redact", "--json"]).output)
    f = doc["facts"]
    assert f["os"]["hostname"] == "HOST1" and f["os"]["user"] == "USER1"
    assert f["python"]["executable"] == "/home/USER1/venvs/torch/bin/python"
    assert f["env"]["variables"]["MASTER_ADDR"] in ("HOST3", "IP1")
    assert f["python"]["torch"]["version"] == "2.13.0+cpu"       # not a secret
    assert f["os"]["glibc"] == "2.36" and f["os"]["debian_version"] == "12.11"


def test_redactor_units():
    r = Redactor()
    r.learn({"x": {"cudnn_wheel": "9.1.0.70"}})
    text = r.text("cuDNN 9.1.0.70 from 192.168.1.5 and 192.168.1.5, mac 00:1B:21:3A:4F:5E, pci 0000:01:00.0")
    assert "9.1.0.70" in text and "192.168" not in text and text.count("IP1") == 2
    assert "MAC1" in text and "0000:01:00.0" in text


@given(st.text())
def test_redactor_never_raises(s):
    r = Redactor()
    r.learn({"hostname": s, "user": s[:5], "v": [s]})
    r.walk({"a": [s, {"b": s}]})


def test_site_config_in_a_home_folder_does_not_name_the_user(tmp_path):
    host = make_host(tmp_path, files={"/home/alice/.config/debtorch/doctor.toml": 'silence = ["cpu.W001"]\n'},
                     meta={"user": "alice", "environ": {"HOME": "/home/alice"}})
    for args in (["--json"], []):
        plain = runner.invoke(app, ["doctor", "--host", str(host.root), *args])
        assert "/home/alice/.config/debtorch/doctor.toml" in plain.output   # the file was read and named
        red = runner.invoke(app, ["doctor", "--host", str(host.root), "--redact", *args])
        assert "alice" not in red.output and "/home/USER1/.config/debtorch/doctor.toml" in red.output, args


def test_redact_keeps_what_the_doctor_could_not_judge():
    """--redact rebuilds the report: the areas the input says nothing about stay marked '?'."""
    from pathlib import Path

    report = Path(__file__).parent / "collect_env" / "pytorch-pytorch-43058.txt"
    plain = runner.invoke(app, ["doctor", "--from-collect-env", str(report)]).output
    redacted = runner.invoke(app, ["doctor", "--from-collect-env", str(report), "--redact"]).output
    assert "Not judged: APT sources" in plain and "Not judged: APT sources" in redacted
    assert json.loads(runner.invoke(app, ["doctor", "--from-collect-env", str(report), "--redact", "--json"]).output)[
        "areas"]["apt"]["state"] != "judged"
