"""The data read check (doctor --data DIR --measure-data): reads through the Host with a cold cache, the
figures it keeps, the doctor's judgement against the loader's need, and a throttled reader (a test double
for a slow disk) against tmpfs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clitools import HOSTS
from throttle import ThrottledHost
from typer.testing import CliRunner

from debtorch import facts as facts_mod
from debtorch.cli import app
from debtorch.doctor import Context, diagnose
from debtorch.facts import dataread
from debtorch.host import LiveHost, ReplayHost, Unavailable

runner = CliRunner()
SHM = Path("/dev/shm")


def tmpfs_mounted_at(path: Path) -> bool:
    """Whether this process's mount table lists a tmpfs at ``path`` (not so in a chroot such as the
    clean rooms', where /dev/shm is a folder of the tree and the mount table names the host's paths)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        mine, _, theirs = line.partition(" - ")
        fields = mine.split()
        if len(fields) > 4 and fields[4] == str(path) and theirs.split()[:1] == ["tmpfs"]:
            return True
    return False


def folder(root: Path, files: int = 40, size: int = 16384) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        sub = root / f"part{i % 3}"
        sub.mkdir(exist_ok=True)
        (sub / f"s{i:04d}.bin").write_bytes(os.urandom(size))
    return root


def ids(doc: dict) -> list:
    return [f.id for f in diagnose(doc, Context(source="live")).findings if f.id.startswith("storage.")]


def test_files_are_listed_without_following_links_and_read_whole(tmp_path):
    root = folder(tmp_path / "data", files=10, size=5000)
    outside = folder(tmp_path / "elsewhere", files=5, size=100)
    (root / "link-to-folder").symlink_to(outside)
    (root / "link-to-file").symlink_to(outside / "part0" / "s0000.bin")
    (root / "empty.bin").write_bytes(b"")
    files = dataread.list_files(LiveHost(), str(root))
    assert len(files) == 10 and all(size == 5000 for _, size in files)
    assert not any("elsewhere" in p or "link" in p for p, _ in files)
    got = LiveHost().read_cold(files[0][0], dataread.FILE_LIMIT)
    assert got.bytes == 5000 and got.seconds >= 0
    assert LiveHost().read_cold(files[0][0], 1000).bytes == 1000   # the limit holds


def test_a_link_a_fifo_and_a_folder_are_never_read(tmp_path):
    target = tmp_path / "t.bin"
    target.write_bytes(b"x" * 10)
    (tmp_path / "l.bin").symlink_to(target)
    os.mkfifo(tmp_path / "pipe")
    host = LiveHost()
    for name, said in (("l.bin", "symbolic links"), ("pipe", "is a FIFO"), (".", "is a directory")):
        with pytest.raises(Unavailable) as exc:
            host.read_cold(str(tmp_path / name), 100)
        assert said in exc.value.reason, exc.value.reason   # O_NOFOLLOW: a link is ELOOP


def test_a_recorded_machine_is_not_measured():
    host = ReplayHost(HOSTS / "debian12-vm-2core")
    with pytest.raises(Unavailable, match="only this machine's disks are measured"):
        host.read_cold("/etc/os-release", 100)


def test_the_measurement_counts_every_read_and_says_the_cache_was_cold(tmp_path):
    root = folder(tmp_path / "data", files=30, size=8192)
    got = dataread.measure(LiveHost(), str(root), readers=4, seconds=5.0, data_rate=10.0)
    assert got.files_found == 30 and got.mean_file_bytes == 8192
    assert got.one.files + got.many.files == 30 and got.one.readers == 1 and got.many.readers == 4
    assert got.one.bytes == 8192 * got.one.files and got.cold
    assert got.need_mb_per_s == pytest.approx(10 * 8192 / 1e6)
    doc = got.to_json()
    assert doc["one"]["files_per_s"] > 0 and doc["samples_per_s"] == got.samples_per_s


def test_too_few_files_is_an_unknown_with_its_reason(tmp_path):
    root = folder(tmp_path / "data", files=3)
    with pytest.raises(dataread.NothingToRead, match="3 readable file"):
        dataread.measure(LiveHost(), str(root), readers=4, seconds=1.0)


def _facts(host, root: Path, rate: float, seconds: float = 1.5) -> dict:
    opts = facts_mod.Options(data=str(root), measure_data=True, data_rate=rate, data_seconds=seconds,
                             sections=("cpu", "memory", "storage"))
    return facts_mod.collect(host, opts)


def test_a_throttled_reader_below_the_need_is_a_finding_with_the_storage_facts(tmp_path):
    root = folder(tmp_path / "data", files=60, size=65536)
    doc = _facts(ThrottledHost(mb_per_s=1.0), root, rate=100.0, seconds=0.6)   # 100 x 64 KiB = 6.6 MB/s needed
    read = doc["storage"]["data"]["read"]
    assert read["best_mb_per_s"] < 1.5
    found = diagnose(doc, Context(source="live")).findings
    w = [f for f in found if f.id == "storage.W004"]
    assert len(w) == 1 and "below the 100 the loader needs" in w[0].message
    assert dict(w[0].facts)["storage.data.read.cold"] is True


@pytest.mark.skipif(not tmpfs_mounted_at(SHM) or not os.access(SHM, os.W_OK), reason="no writable tmpfs at /dev/shm")
def test_tmpfs_meets_a_rate_a_disk_would_and_says_so_without_a_warning(tmp_path):
    root = folder(Path(__import__("tempfile").mkdtemp(dir=SHM, prefix="debtorch-test-")), files=60, size=4096)
    try:
        doc = _facts(LiveHost(), root, rate=200.0)
        assert "storage.W004" not in ids(doc) and "storage.I002" in ids(doc)
        assert doc["storage"]["data"]["fstype"] == "tmpfs"
    finally:
        import shutil

        shutil.rmtree(root)


def test_without_a_rate_the_figures_are_shown_and_nothing_is_judged(tmp_path):
    root = folder(tmp_path / "data", files=20, size=1000)
    doc = _facts(LiveHost(), root, rate=None)
    assert "storage.W004" not in ids(doc) and "storage.I002" in ids(doc)
    info = [f for f in diagnose(doc, Context(source="live")).findings if f.id == "storage.I002"][0]
    assert "give --data-rate" in info.fix


@pytest.mark.parametrize("args,said", [
    (["--measure-data"], "--measure-data needs --data DIR"),
    (["--data", "/tmp", "--data-rate", "10"], "--data-rate only applies to --measure-data"),
    (["--data", "/tmp", "--measure-data", "--data-rate", "nan"], "--data-rate must be a number of samples per second"),
    (["--data", "/tmp", "--measure-data", "--data-rate", "-1"], "--data-rate must be a number of samples per second"),
])
def test_bad_options_are_one_line_and_exit_2(args, said):
    got = runner.invoke(app, ["doctor", *args])
    assert got.exit_code == 2 and said in got.output


def test_a_recorded_machine_with_measure_data_says_why_nothing_was_read():
    host = ReplayHost(HOSTS / "debian12-vm-2core")
    doc = facts_mod.collect(host, facts_mod.Options(data="/etc", measure_data=True, sections=("cpu", "storage")))
    data = doc["storage"]["data"]
    if data.get("exists"):
        assert data["read"] is None and data["unknown"]["read"]
