"""The one door to the machine: replayed hosts never touch the live one."""

import json
import os

import pytest

from debtorch import facts
from debtorch.machine import Machine
from debtorch.host import COMMAND_NOT_FOUND, LiveHost, RecordingHost, ReplayHost, Unavailable


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
    from conftest import run_debtorch

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
