"""The one door to the machine: replayed hosts never touch the live one."""

import json
import os

import pytest

from debtorch import facts
from debtorch.host import COMMAND_NOT_FOUND, LiveHost, RecordingHost, ReplayHost, Unavailable
from debtorch.machine import Machine


def test_replayed_host_never_runs_a_live_command(replay, no_live):
    host = replay("debian12-vm-2core")
    res = host.run(["nvidia-smi", "-q", "-x"])
    assert res.error == COMMAND_NOT_FOUND
    # A recorded command replays its output without any process.
    res = host.run(["getconf", "GNU_LIBC_VERSION"])
    assert res.ok and "glibc" in res.stdout


def test_replayed_facts_need_no_live_machine(replay, no_live):
    doc = facts.collect(replay("debian12-vm-2core"))
    assert Machine.from_facts(doc).os.debian.release == "12"
    assert doc["cpu"]["usable_cpus"] == 2
    assert doc["python"]["torch"]["version"] == "2.13.0+cpu"


def test_absolute_symlink_in_a_fixture_stays_inside_the_root(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").symlink_to("/etc/hostname")
    host = ReplayHost(tmp_path)
    # /etc/hostname exists on the live machine but not in the fixture.
    with pytest.raises(Unavailable) as exc:
        host.read_text("/etc/os-release")
    assert exc.value.reason == "not present"
    assert host.path("/../../etc/passwd") == tmp_path.resolve() / "etc" / "passwd"


def test_unreadable_is_a_reason_not_a_traceback(tmp_path):
    host = ReplayHost(tmp_path)
    with pytest.raises(Unavailable) as exc:
        host.read_text("/proc/cpuinfo")
    assert exc.value.reason == "not present"
    assert host.try_read("/proc/cpuinfo") is None
    with pytest.raises(Unavailable) as exc:
        host.rlimit("NOFILE")
    assert "not recorded" in exc.value.reason


def test_hung_command_is_killed_at_its_timeout():
    res = LiveHost().run(["sh", "-c", "sleep 30 & sleep 30"], timeout=0.5)
    assert res.error and res.error.startswith("timed out")
    assert res.seconds < 5


def test_missing_command_is_a_fact():
    res = LiveHost().run(["debtorch-no-such-command-xyz"])
    assert res.error == COMMAND_NOT_FOUND and not res.ok


def test_recording_then_replaying_this_machine_gives_the_same_facts(tmp_path):
    opts = facts.Options(data=str(tmp_path))
    rec = RecordingHost(tmp_path / "rec")
    live = facts.collect(rec, opts)
    rec.save()
    again = facts.collect(ReplayHost(tmp_path / "rec"), opts)
    for doc in (live, again):
        doc.pop("collected_at")
        doc.pop("host")
    assert json.loads(json.dumps(live, default=sorted)) == json.loads(json.dumps(again, default=sorted))


def test_record_refuses_a_file_or_a_folder_in_use(tmp_path):
    from clitools import run_debtorch

    afile = tmp_path / "notes.txt"
    afile.write_text("mine\n")
    used = tmp_path / "used"
    used.mkdir()
    (used / "_host.json").write_text("mine\n")
    for target, why in ((afile, "not a folder"), (used, "not empty")):
        res = run_debtorch("facts", "--record", str(target))
        assert res.returncode == 2, res.stderr
        assert res.stderr.count("\n") == 1 and why in res.stderr and "Traceback" not in res.stderr
    assert afile.read_text() == "mine\n" and (used / "_host.json").read_text() == "mine\n"


def test_no_apt_sources_leaves_components_unknown_not_empty(tmp_path):
    from hostkit import make_host

    host = make_host(tmp_path, remove=["/etc/apt/sources.list", "/etc/apt/sources.list.d"])
    apt = facts.collect(host, facts.Options(sections=("apt",)))["apt"]
    # [] would tell the doctor "APT has no main"; unreadable sources are unknown.
    assert apt["sources"] is None and apt["unknown"]["sources"] == "no APT sources found"
    assert Machine.from_facts({"apt": apt}).apt.components is None


def test_a_recorded_folder_behind_a_symlink_replays_as_a_folder(tmp_path):
    # Old Debian systems have /dev/shm -> /run/shm; the replay must see the folder too.
    (tmp_path / "run" / "shm").mkdir(parents=True)
    (tmp_path / "shm").symlink_to(tmp_path / "run" / "shm")
    rec = RecordingHost(tmp_path / "rec")
    assert rec.is_dir(str(tmp_path / "shm"))
    rec.save()
    assert ReplayHost(tmp_path / "rec").is_dir(str(tmp_path / "shm"))


def test_a_recording_cannot_read_the_live_machine(tmp_path, no_live):
    """An absolute or '..' stdout_file in _host.json stays unread (issue 13, item 3)."""
    from hostkit import make_host

    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET\n")
    for name in (str(secret), "../../secret.txt", "../secret.txt"):
        host = make_host(tmp_path, commands={"getconf GNU_LIBC_VERSION": {"returncode": 0, "stdout_file": name}})
        res = host.run(["getconf", "GNU_LIBC_VERSION"])
        assert "TOP-SECRET" not in res.stdout and res.error == "recorded output is not a file inside the recording"
    host = make_host(tmp_path, commands={"getconf GNU_LIBC_VERSION": {"returncode": 0, "stdout_file": "link.out"}})
    (host.root / "_commands").mkdir(exist_ok=True)
    os.symlink(secret, host.root / "_commands" / "link.out")        # a link out of the recording
    assert "TOP-SECRET" not in host.run(["getconf", "GNU_LIBC_VERSION"]).stdout


@pytest.mark.parametrize("meta,said", [({"commands": ["x"]}, "commands: must be a table (got an array)"),
                                       ({"environ": {"A": 1}}, "environ.A: must be a string (got 1)"),
                                       ({"rlimits": {"NOFILE": [1]}}, "rlimits.NOFILE: must be [soft, hard] (got an array)")])
def test_a_broken_recording_is_one_line(tmp_path, meta, said):
    from hostkit import make_host
    from typer.testing import CliRunner

    from debtorch.cli import app

    host = make_host(tmp_path)
    data = json.loads((host.root / "_host.json").read_text())
    (host.root / "_host.json").write_text(json.dumps({**data, **meta}))
    res = CliRunner().invoke(app, ["doctor", "--host", str(host.root)])
    assert res.exit_code == 2 and said in res.output and len(res.output.strip().splitlines()) == 1


def test_an_interrupted_recording_leaves_nothing(tmp_path, monkeypatch):
    """Ctrl-C during `facts --record DIR`: no DIR (it would replay as a broken machine),
    no hidden temporary folder (issue 13, item 7)."""
    from typer.testing import CliRunner

    from debtorch.cli import app

    def interrupted(host, options=None):
        host.read_text("/proc/cpuinfo")          # something was already recorded
        raise KeyboardInterrupt

    monkeypatch.setattr(facts, "collect", interrupted)
    dest = tmp_path / "rec"
    CliRunner().invoke(app, ["facts", "--record", str(dest)])
    assert list(tmp_path.iterdir()) == []


def test_a_relative_python_means_the_callers_directory(tmp_path, monkeypatch):
    """`doctor --python .venv/bin/python` from the project folder (issue 13, item 4): it ran from /."""
    import sys

    from debtorch.host import LiveHost

    venv_bin = tmp_path / "v" / "bin"
    venv_bin.mkdir(parents=True)
    os.symlink(sys.executable, venv_bin / "python")
    monkeypatch.chdir(tmp_path)
    doc = facts.collect(LiveHost(), facts.Options(python="v/bin/python", sections=("python",)))
    assert doc["python"]["executable"] == str(tmp_path / "v" / "bin" / "python")
    assert doc["python"]["version"] is not None


def test_doctor_starts_the_probe_first_and_runs_it_once(tmp_path):
    """`debtorch doctor` starts the light probe before importing the rest of itself
    (issue 9, speed); the facts then collect that same process, never a second one."""
    import stat
    import sys

    from clitools import run_debtorch

    log = tmp_path / "calls.log"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho \"$2\" | head -c 40 >> {log}; echo >> {log}\nexec {sys.executable} \"$@\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    res = run_debtorch("doctor", "--python", str(fake), "--json")
    assert res.returncode in (0, 1), res.stderr
    assert json.loads(res.stdout)["facts"]["python"]["version"] is not None
    assert len(log.read_text().splitlines()) == 1          # the light probe, once


def test_a_prestarted_command_nobody_collects_is_killed_at_exit():

    from debtorch.host import prestarted

    prestarted.prestart(["sleep", "30"])
    proc = prestarted._PRESTARTED[("sleep", "30")]
    prestarted._kill_unclaimed()
    assert proc.wait(timeout=10) != 0 and not prestarted._PRESTARTED
