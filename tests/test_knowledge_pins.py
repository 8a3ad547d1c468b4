"""Every checks/ row pinned to its source; the PCI id and nvcc tables checked
against each other and against the GPU and wheel tables (issue 10)."""

import re
import shutil
from pathlib import Path

import knowledge_pins as pins
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debtorch import knowledge as k
from debtorch import versions
from debtorch.knowledge.archlists import sass_list

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ROOT / "checks"


@pytest.fixture(autouse=True)
def _repo_data(monkeypatch):
    monkeypatch.delenv(k.ENV_DIR, raising=False)


# --- pins ---------------------------------------------------------------------


def test_every_row_of_every_table_is_pinned_to_its_source():
    assert pins.problems(pins.current(CHECKS), pins.read()) == []


def _edit(folder, name, old, new):
    path = folder / name
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def test_a_silent_edit_fails_and_cannot_be_repinned(tmp_path):
    folder = tmp_path / "checks"
    shutil.copytree(CHECKS, folder)
    pinfile = tmp_path / "pins.txt"
    shutil.copy(pins.PINS, pinfile)
    # the minimum driver of CUDA 12.6, changed without touching its source
    _edit(folder, "cuda_driver.toml", 'driver_linux = "560.28.03"', 'driver_linux = "555.42.02"')
    found = pins.problems(pins.current(folder), pins.read(pinfile))
    assert len(found) == 1 and "'12.6.0'" in found[0] and "the source did not" in found[0]
    assert pins.update(folder, pinfile) == [("cuda_driver.toml", "toolkit", "12.6.0")]
    assert pins.problems(pins.current(folder), pins.read(pinfile)) == found   # nothing was re-pinned


def test_a_sourced_edit_is_one_command(tmp_path):
    folder = tmp_path / "checks"
    shutil.copytree(CHECKS, folder)
    pinfile = tmp_path / "pins.txt"
    shutil.copy(pins.PINS, pinfile)
    path = folder / "gpus.toml"
    text = path.read_text()
    start = text.index('name = "GeForce GTX 1630"')
    end = text.index("[[gpu]]", start)
    block = text[start:end]
    edited = block.replace('cc = "7.5"', 'cc = "7.5"\nexamples = ["NVIDIA GeForce GTX 1630"]')
    edited = re.sub(r'source = "[^"]*"', 'source = "https://developer.nvidia.com/cuda-legacy-gpus (read 2026-09)"', edited)
    path.write_text(text[:start] + edited + text[end:])
    assert pins.problems(pins.current(folder), pins.read(pinfile))
    assert pins.update(folder, pinfile) == []
    assert pins.problems(pins.current(folder), pins.read(pinfile)) == []


def test_a_new_row_is_reported_until_pinned(tmp_path):
    folder = tmp_path / "checks"
    shutil.copytree(CHECKS, folder)
    with open(folder / "thresholds.toml", "a") as fh:
        fh.write('\n[[threshold]]\nname = "new_rule"\nvalue = 1\nunit = "count"\nsource = "a test"\n')
    found = pins.problems(pins.current(folder), pins.read())
    assert found == ["thresholds.toml [[threshold]] 'new_rule': not pinned (a new row): python tests/knowledge_pins.py --update"]


# --- PCI device ids -------------------------------------------------------------


def _pci():
    return k.load().tables["pci.toml"]


def test_device_rows_are_well_formed_and_agree_with_their_chip():
    chips = {r["chip"]: r for r in _pci()["chip"]}
    ids = [r["id"] for r in _pci()["device"]]
    assert len(ids) == len(set(ids))
    for row in _pci()["device"]:
        assert re.fullmatch(r"[0-9a-f]{4}", row["id"]), row
        assert row["name"].split()[0].startswith(row["chip"]), row
        assert row["cc"] == chips[row["chip"]]["cc"], row


def test_device_names_resolve_to_the_same_capability_unless_a_note_says_why():
    checked = 0
    for row in _pci()["device"]:
        m = re.search(r"\[(.*)\]", row["name"])
        by_name = k.capability_for_name(m.group(1)) if m else None
        if by_name is None:
            continue
        checked += 1
        assert by_name == row["cc"] or "note" in row, row
    assert checked > 400


def test_every_chip_capability_is_that_of_the_products_named_on_it():
    """Derived [[chip]] rows: some product on the chip resolves by name to the chip's capability."""
    for chip in (c for c in _pci()["chip"] if c.get("confidence") == "derived"):
        names = [re.search(r"\[(.*)\]", r["name"]) for r in _pci()["device"] if r["chip"] == chip["chip"]]
        caps = {k.capability_for_name(m.group(1)) for m in names if m} - {None}
        assert chip["cc"] in caps, (chip["chip"], caps)


@pytest.mark.parametrize("given_id, cc", [
    ("0x218410DE", "7.5"),     # nvidia-smi's pci_device_id of a GTX 1660 Ti it names "Graphics Device"
    ("10de:2684", "8.9"),      # lspci -n: an RTX 4090
    ("2b85", "12.0"), ("0x2B85", "12.0"),   # RTX 5090
    ("0x10de2e12", "12.1"),    # GB10
    ("1db4", "7.0"),           # V100 PCIe
    ("13bd", "5.0"),           # Tesla M10
])
def test_capability_for_pci_id(given_id, cc):
    assert k.capability_for_pci_id(given_id) == cc


@pytest.mark.parametrize("junk", ["", "Graphics Device", "000000DE", "1002:73bf", "0x73bf1002", "26844", "ffff", None, 2684])
def test_capability_for_pci_id_unknown(junk):
    assert k.capability_for_pci_id(junk) is None


# --- names as old and new reports spell them -------------------------------------


@pytest.mark.parametrize("name, cc", [
    ("GeForce RTX 2080 Ti", "7.5"), ("Tesla K20m", "3.5"), ("Quadro M4000", "5.2"), ("TITAN X (Pascal)", "6.1"),
    ("NVIDIA TITAN X", "6.1"), ("GeForce GTX TITAN X", "5.2"), ("A100-SXM4-40GB", "8.0"), ("A100-PCIE-40GB", "8.0"),
    ("Tesla V100S-PCIE-32GB", "7.0"), ("TITAN Xp", "6.1"), ("GRID P4-1Q", "6.1"), ("GeForce 210", "1.2"),
    ("NVIDIA CMP 100-210", "7.0"), ("GeForce GTX 780M", "3.0"), ("GeForce GTX 780", "3.5"),
    ("NVIDIA GeForce RTX 2050", "8.6"), ("NVIDIA GeForce MX450", "7.5"), ("NVIDIA RTX A500 Laptop GPU", "8.6"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0"), ("NVIDIA RTX 4000 SFF Ada Generation", "8.9"),
    ("NVIDIA GeForce RTX 5090 D", "12.0"), ("NVIDIA GeForce RTX 3080 Laptop GPU", "8.6"), ("Tesla C2050", "2.0"),
])
def test_historical_and_laptop_spellings(name, cc):
    assert k.capability_for_name(name) == cc


# --- what each CUDA release compiles for ----------------------------------------


def _nvcc():
    return sorted(k.load().tables["cuda_arch.toml"]["nvcc"], key=lambda r: versions.numeric(r["cuda"]))


def test_added_and_dropped_are_the_difference_from_the_previous_row():
    rows = _nvcc()
    for prev, row in zip(rows, rows[1:]):
        before, now = set(sass_list(prev["sass"])), set(sass_list(row["sass"]))
        assert set(sass_list(row.get("added"))) == now - before, row["cuda"]
        assert set(sass_list(row.get("dropped"))) == before - now, row["cuda"]


def test_every_wheel_arch_list_is_something_its_cuda_compiles():
    checked = 0
    for row in k.load().wheels:
        if not row.get("cuda") or not row["arch_list"]:
            continue
        sass, ptx = k.parse_arch_list(row["arch_list"])
        built = k.cuda_builds_sass(row["cuda"])
        if built is None:
            continue
        can = {versions.parse_cc(x) for x in built["sass"]}
        missing = {(t[0], t[1]) for t in sass | ptx} - can
        assert not missing, (row["torch"], row["variant"], sorted(missing))
        checked += 1
    assert checked >= 40


@pytest.mark.parametrize("cuda, cc, can", [
    ("10.2", "8.6", False),   # torch 1.x cu102 wheels: no Ampere
    ("11.1", "8.6", True), ("11.0", "8.6", True),   # sm_80 code runs on 8.6
    ("11.8", "9.0", True), ("11.7", "9.0", False),
    ("12.0", "3.7", False), ("11.8", "3.7", True),  # Kepler dropped in 12.0
    ("12.6", "12.0", False), ("12.8", "12.0", True),
    ("13.0", "6.1", False), ("13.0", "7.0", False), ("13.0", "7.5", True),
    ("12.7", "9.0", True),    # between rows: the 12.6 row
])
def test_cuda_can_build(cuda, cc, can):
    assert k.cuda_can_build(cuda, cc) is can


def test_cuda_builds_sass_answers_and_unknowns():
    info = k.cuda_builds_sass("11.8.89")
    assert info["newest"] == "9.0" and info["added"] == ["8.9", "9.0"] and not info["nearest"]
    assert k.cuda_builds_sass("12.7")["nearest"] and k.cuda_builds_sass("12.7")["row"] == "12.6.0"
    assert k.cuda_builds_sass("13.0")["dropped"][0] == "5.0"
    for unknown in ("7.5", "14.1", "not a version", None, 12.8):
        assert k.cuda_builds_sass(unknown) is None
    assert k.cuda_can_build("12.8", "not a gpu") is None


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_new_lookups_never_raise(text):
    k.pci_device_id(text)
    k.capability_for_pci_id(text)
    k.cuda_builds_sass(text)
    k.cuda_can_build(text, text)
    k.cuda_can_build("12.8", text)
