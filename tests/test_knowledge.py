"""checks/ data and debtorch.knowledge: the doctor's version tables and lookups."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debtorch import knowledge as k
from debtorch import versions
from debtorch.findings import catalogue
from debtorch.knowledge.names import gpu_tokens

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ROOT / "checks"


@pytest.fixture(autouse=True)
def _repo_data(monkeypatch):
    """Every test reads the checkout's checks/ unless it points elsewhere itself."""
    monkeypatch.delenv(k.ENV_DIR, raising=False)


def _copy_checks(tmp_path):
    dest = tmp_path / "checks"
    shutil.copytree(CHECKS, dest)
    return dest


# --- the data files -----------------------------------------------------------


def test_every_file_parses_validates_and_has_rows():
    kb = k.Knowledge(CHECKS)
    counts = {name: sum(len(rows) for rows in tables.values()) for name, tables in kb.tables.items()}
    assert set(counts) == set(k.SCHEMA)
    assert all(n > 0 for n in counts.values()), counts
    for name, tables in kb.tables.items():
        for table, rows in tables.items():
            for row in rows:
                assert row["source"].strip(), (name, table, row)


@pytest.mark.skipif(not Path(k.__file__).resolve().is_relative_to(ROOT),
                    reason="debtorch is installed (autopkgtest), not imported from this checkout")
def test_checkout_finds_its_own_checks_folder():
    assert k.checks_dir() == CHECKS


def test_a_row_without_source_fails_with_one_line_naming_file_and_row(tmp_path, monkeypatch):
    folder = _copy_checks(tmp_path)
    path = folder / "gpus.toml"
    text = path.read_text()
    first = text.index('source = "', text.index("[[gpu]]"))
    path.write_text(text[:first] + text[text.index("\n", first) + 1:])
    monkeypatch.setenv(k.ENV_DIR, str(folder))
    with pytest.raises(k.KnowledgeError) as err:
        k.load().validate()
    message = str(err.value)
    assert "\n" not in message
    # The line is that of the row's [[gpu]] header: the row has no source line to point at.
    header = text[:text.index("\n[[gpu]]")].count("\n") + 2
    assert message.endswith(f"gpus.toml:{header}: gpu[0].source: missing")


def test_unconfirmed_row_needs_a_note(tmp_path, monkeypatch):
    folder = _copy_checks(tmp_path)
    path = folder / "thresholds.toml"
    path.write_text(path.read_text().replace('unit = "bytes"\n', 'unit = "bytes"\nconfidence = "unconfirmed"\n', 1))
    # that row already has a note; take it away
    text = path.read_text()
    start = text.index("[[threshold]]\nname = \"docker_default_shm_bytes\"")
    note = text.index("note = ", start)
    path.write_text(text[:note] + text[text.index("\n", note) + 1:])
    monkeypatch.setenv(k.ENV_DIR, str(folder))
    with pytest.raises(k.KnowledgeError, match=r"thresholds.toml:\d+: threshold\[\d+\]\.note: missing: an unconfirmed row says what is unconfirmed$"):
        k.load().validate()


@pytest.mark.parametrize("edit, marker, expected", [
    (lambda t: t.replace('driver_linux = "570.26"', 'driver_linux = "five-seventy"'), "five-seventy",
     r"toolkit\[\d+\]\.driver_linux: must be a version like 12.4 or 535.261.03 \(got \"five-seventy\"\)$"),
    (lambda t: t.replace('release = "CUDA 12.8 GA"', 'release = "CUDA 12.8 GA"\nreleas = "typo"'), "releas =",
     r"toolkit\[\d+\]\.releas: unknown key \(known: cuda, release, "),
    (lambda t: t + "\n[[toolkit]\n", "[[toolkit]\n", r"not valid TOML: Expected ']]'"),
])
def test_malformed_driver_file_names_the_file(tmp_path, monkeypatch, edit, marker, expected):
    folder = _copy_checks(tmp_path)
    path = folder / "cuda_driver.toml"
    text = edit(path.read_text())
    path.write_text(text)
    monkeypatch.setenv(k.ENV_DIR, str(folder))
    line = text[:text.rindex(marker)].count("\n") + 1      # the line of the edit
    with pytest.raises(k.KnowledgeError, match=rf"cuda_driver.toml:{line}: {expected}") as err:
        k.load().validate()
    assert "\n" not in str(err.value)


def test_bad_arch_list_in_wheel_data_is_caught(tmp_path, monkeypatch):
    folder = _copy_checks(tmp_path)
    path = folder / "torch_wheels.toml"
    path.write_text(path.read_text().replace('arch_list = "7.0;7.5;8.0;8.6;9.0;10.0;12.0"', 'arch_list = "7.0;7.5;Ampere"', 1))
    monkeypatch.setenv(k.ENV_DIR, str(folder))
    with pytest.raises(k.KnowledgeError, match=r"torch_wheels.toml:\d+: wheel\[\d+\]\.arch_list: cannot read architecture 'Ampere' \(got \"7.0;7.5;Ampere\"\)$"):
        k.load().validate()


def test_env_var_naming_no_folder_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv(k.ENV_DIR, str(tmp_path / "nowhere"))
    with pytest.raises(k.KnowledgeError, match="DEBTORCH_CHECKS_DIR"):
        k.checks_dir()


def test_every_cuda_wheel_has_a_known_driver_requirement():
    for row in k.load().wheels:
        if row.get("cuda"):
            need = k.min_driver(row["cuda"])
            assert need and need["toolkit_driver"], row["variant"] + " " + row["cuda"]


def test_gpu_examples_resolve_to_their_own_row():
    for row in k.load().tables["gpus.toml"]["gpu"]:
        for example in row.get("examples", []) + [row["name"]]:
            if "/" in example:   # "Jetson T5000 / T4000 (Thor)" names two products
                continue
            assert k.capability_for_name(example) == row["cc"], example


def test_debian_derived_max_cuda_matches_the_driver_table():
    for row in k.load().debian:
        got = k.max_cuda_for_driver(row["nvidia_driver"])
        assert got["full"] == row["max_cuda_full"], row["codename"]
        if "max_cuda_minor_compat" in row:
            assert str(got["minor_compat_major"]) == row["max_cuda_minor_compat"], row["codename"]


# --- real cases ---------------------------------------------------------------


def test_rtx_5090_has_no_code_in_2_6_cu124():
    row = k.wheel("2.6.0+cu124")
    verdict, detail = k.arch_support("12.0", row["arch_list"])
    assert verdict == "none"
    assert not k.older_than_all("12.0", row["arch_list"])
    assert k.capability_for_name("NVIDIA GeForce RTX 5090") == "12.0"


def test_rtx_4090_runs_sm_86_code():
    assert k.arch_support("8.9", "7.5;8.0;8.6")[0] == "sass"
    assert k.arch_support((8, 9), ["sm_75", "sm_80", "sm_86"])[0] == "sass"


def test_h100_runs_only_through_ptx_on_a_list_ending_8_6_ptx():
    verdict, detail = k.arch_support("9.0", "7.5;8.0;8.6+PTX")
    assert verdict == "ptx" and "compute_86" in detail


def test_sass_never_crosses_majors():
    assert k.arch_support("9.0", "8.0;8.6;8.9")[0] == "none"
    assert k.arch_support("8.6", "8.0;9.0")[0] == "sass"       # 8.0 runs on 8.6
    assert k.arch_support("8.0", "8.6;9.0")[0] == "none"       # not backwards within a major
    assert k.arch_support("12.1", "12.0")[0] == "sass"         # GB10 runs sm_120
    assert k.arch_support("9.0", "sm_90a")[0] == "sass"
    assert k.arch_support("9.1", "sm_90a")[0] == "none"        # arch-specific: 9.0 only


def test_k80_is_older_than_every_arch_in_2_6_cu126_but_runs_cu118():
    cu126 = k.wheel("2.6.0", "cu126")["arch_list"]
    verdict, detail = k.arch_support("3.7", cu126)
    assert verdict == "none" and "older than every architecture" in detail
    assert k.older_than_all("3.7", cu126)
    assert k.arch_support("3.7", k.wheel("2.6.0", "cu118")["arch_list"])[0] == "sass"
    assert k.capability_for_name("Tesla K80") == "3.7"


def test_debian_12_driver_with_cuda_12_8_is_minor_compat():
    verdict, detail = k.driver_supports("535.261.03", "12.8")
    assert verdict == "minor-compat"
    assert "PTX" in detail


def test_535_cannot_run_cuda_13_and_says_why():
    verdict, detail = k.driver_supports("535.261.03", "13.0")
    assert verdict == "too-old"
    assert "580" in detail and "forward-compatibility" in detail


def test_470_cannot_run_cuda_12_1():
    assert k.driver_supports("470.256.02", "12.1")[0] == "too-old"


def test_full_support_and_backward_compatibility():
    assert k.driver_supports("570.124.06", "12.8.1")[0] == "full"
    assert k.driver_supports("570.26", "12.8.1")[0] == "minor-compat"    # 12.8 Update 1 wants 570.124.06
    assert k.driver_supports("595.58.03", "11.8")[0] == "full"            # newer drivers run older CUDA
    assert k.driver_supports("418.226.00", "10.2")[0] == "too-old"        # no minor compat before CUDA 11
    assert k.driver_supports("440.33", "10.2")[0] == "full"


def test_cu130_needs_580():
    need = k.min_driver("13.0")
    assert need["toolkit_driver"] == "580.65.06" and need["minor_compat_driver"] == "580"
    cu130 = k.wheel("2.13.0", "cu130")
    assert k.driver_supports("580.95.05", cu130["cuda"])[0] == "full"
    for codename in ("bookworm", "trixie"):
        driver = k.debian_release(codename)["nvidia_driver"]
        assert k.driver_supports(driver, cu130["cuda"])[0] == "too-old", codename


def test_best_variant_for_debian_12_on_torch_2_13_is_cu126():
    driver = k.debian_release("12")["nvidia_driver"]
    best = k.best_variant_for_driver("2.13.0", driver, "8.6")
    assert best["variant"] == "cu126"
    assert best["pip"] == "pip install torch==2.13.0+cu126 --index-url https://download.pytorch.org/whl/cu126"
    assert best["driver_verdict"] == "minor-compat" and not best["nearest"]


def test_best_variant_prefers_machine_code_and_says_when_nothing_fits():
    # an RTX 5090 with a 570 driver on 2.7: only cu128 has sm_120
    assert k.best_variant_for_driver("2.7.1", "570.124.06", "12.0")["variant"] == "cu128"
    # ... and Debian 12's driver cannot run any 2.13 wheel that has sm_120
    assert k.best_variant_for_driver("2.13.0", "535.261.03", "12.0") is None
    # a release newer than the table falls back to the nearest known one
    best = k.best_variant_for_driver("2.99.0", "595.58.03", "9.0")
    assert best["nearest"] and best["series"] == "2.14" and best["pip"].startswith("pip install torch==2.14.*")


def test_max_cuda_for_driver():
    got = k.max_cuda_for_driver("535.261.03")
    assert got["full"] == "12.2" and got["minor_compat_major"] == 12
    assert k.max_cuda_for_driver("595.58.03")["full"] == "13.2"
    assert k.max_cuda_for_driver("300.1")["full"] is None


def test_wheel_lookup_forms():
    assert k.wheel("2.5.1+cu124")["cudnn"] == "9.1.0.70"
    assert k.wheel("2.13.0", "cu126")["series"] == "2.13"
    assert k.wheel("2.13", "CU126")["pip"].endswith("torch==2.13.* --index-url https://download.pytorch.org/whl/cu126")
    assert k.wheel("2.13.0") is None                      # no variant given
    assert k.wheel("2.13.0", "cu118") is None             # no such wheel
    assert k.wheel("2.14.0", "cu130", platform="linux-aarch64")["arch_list"].startswith("8.0;9.0")
    assert k.variants("2.8.0+cu128") == ["cpu", "cu126", "cu128", "cu129", "rocm6.4"]
    assert k.variants("0.1") == []


def test_gpu_names_from_reports():
    cases = {
        "NVIDIA GeForce RTX 4090": "8.9", "Tesla T4": "7.5", "NVIDIA A100-SXM4-80GB": "8.0",
        "NVIDIA H100 80GB HBM3": "9.0", "NVIDIA GeForce GTX 1070 Ti": "6.1", "NVIDIA RTX A6000": "8.6",
        "NVIDIA GB10": "12.1", "NVIDIA B200": "10.0", "NVIDIA GeForce RTX 5090": "12.0",
        "NVIDIA GeForce RTX 3060 Laptop GPU": "8.6", "GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-5a100e00-aaaa)": "8.6",
        "Quadro RTX 6000": "7.5", "NVIDIA RTX 6000 Ada Generation": "8.9", "NVIDIA A10G": "8.6",
        "GeForce GTX TITAN X": "5.2", "NVIDIA TITAN X (Pascal)": "6.1", "nvidia geforce rtx4090": "8.9",
    }
    for name, cc in cases.items():
        assert k.capability_for_name(name) == cc, name
    for unknown in ("Graphics Device", "NVIDIA RTX 6000", "", "AMD Radeon RX 7900 XTX"):
        assert k.capability_for_name(unknown) is None, unknown


def test_debian_release_lookup():
    assert k.debian_release("bookworm")["version"] == "12"
    assert k.debian_release("Debian 12.7")["codename"] == "bookworm"
    assert k.debian_release(13)["nvidia_driver"] == "550.163.01"
    assert k.debian_release("trixie/sid")["codename"] == "trixie"
    assert k.debian_release("testing")["codename"] == "forky"
    assert k.debian_release("bookworm")["firmware_component"] == "non-free-firmware"
    assert k.debian_release("ubuntu") is None


def test_thresholds():
    assert k.threshold("docker_default_shm_bytes") == 64 * 1024 * 1024
    assert k.threshold("cudnn_min_version") == "8.2"
    assert k.threshold("nope") is None


# --- properties ---------------------------------------------------------------

LOOKUPS = [
    lambda s: k.capability_for_name(s), lambda s: k.debian_release(s), lambda s: k.wheel(s), lambda s: k.wheel("2.6", s),
    lambda s: k.variants(s), lambda s: k.min_driver(s), lambda s: k.driver_supports(s, "12.4"),
    lambda s: k.driver_supports("550.54.15", s), lambda s: k.max_cuda_for_driver(s), lambda s: k.arch_support(s, "8.0"),
    lambda s: k.arch_support("8.6", s), lambda s: k.best_variant_for_driver(s, "550.54.15", "8.6"),
    lambda s: k.best_variant_for_driver("2.6.0", s, s), lambda s: k.threshold(s), lambda s: k.parse_arch_list(s),
    lambda s: k.older_than_all(s, s),
]


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_arbitrary_strings_never_raise(text):
    for lookup in LOOKUPS:
        lookup(text)


@settings(max_examples=150, deadline=None)
@given(st.from_regex(r"\A[0-9]{1,3}(\.[0-9]{1,3}){0,3}\Z"), st.sampled_from(["10.2", "11.8", "12.1", "12.6.3", "12.8.1", "13.0.2", "13.2.1"]))
def test_version_like_strings_never_raise(version, cuda):
    k.driver_supports(version, cuda)
    k.driver_supports("550.54.15", version)
    k.max_cuda_for_driver(version)
    k.min_driver(version)


@settings(max_examples=200, deadline=None)
@given(st.integers(3, 12), st.integers(0, 9), st.integers(0, 9))
def test_sass_runs_forward_within_a_major_only(major, built_minor, gpu_minor):
    verdict = k.arch_support(f"{major}.{gpu_minor}", f"{major}.{built_minor}")[0]
    assert verdict == ("sass" if gpu_minor >= built_minor else "none")
    assert k.arch_support(f"{major + 1}.{gpu_minor}", f"{major}.{built_minor}")[0] == "none"
    assert k.arch_support(f"{major + 1}.{gpu_minor}", f"{major}.{built_minor}+PTX")[0] == "ptx"


@settings(max_examples=200, deadline=None)
@given(st.integers(400, 700), st.integers(0, 200), st.sampled_from(["11.4", "11.8", "12.0", "12.4.1", "12.8.1", "13.0", "13.2.1"]))
def test_a_newer_driver_never_supports_less(major, minor, cuda):
    order = {"too-old": 0, "minor-compat": 1, "full": 2}
    lower = k.driver_supports(f"{major}.{minor}", cuda)[0]
    higher = k.driver_supports(f"{major}.{minor + 1}", cuda)[0]
    assert order[higher] >= order[lower]


# --- the installed wheel carries the data ----------------------------------------


@pytest.mark.slow
def test_built_wheel_contains_checks_and_the_loader_finds_them(tmp_path):
    out = tmp_path / "dist"
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.skip("building the wheel timed out (no package index reachable?)")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["pip wheel failed"])[-1]
        pytest.skip(f"cannot build a wheel here (offline, no hatchling?): {last}")
    wheels = list(out.glob("debtorch-*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as zf:
        names = set(zf.namelist())
        for name in k.SCHEMA:
            assert f"debtorch/_data/checks/{name}" in names
        zf.extractall(tmp_path / "site")
    env = {key: value for key, value in os.environ.items() if key not in (k.ENV_DIR, "PYTHONPATH")}
    env["PYTHONPATH"] = str(tmp_path / "site")
    probe = ("from debtorch import knowledge as k, findings as f; print(k.checks_dir()); "
             "print(k.capability_for_name('Tesla T4')); print(len(f.catalogue()))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert run.returncode == 0, run.stderr
    where, cc, ids = run.stdout.split()
    assert Path(where) == tmp_path / "site" / "debtorch" / "_data" / "checks"
    assert cc == "7.5" and int(ids) == len(catalogue())      # the catalogue of ids travels with the data
    for name in k.SCHEMA:   # the wheel ships the checkout's files unchanged
        assert tomllib.loads((Path(where) / name).read_text()) == tomllib.loads((CHECKS / name).read_text())


def _pci_products():
    """(product name, {capabilities}) for every bracketed product of checks/pci.toml (pci.ids)."""
    out: dict = {}
    for row in k.load().tables["pci.toml"]["device"]:
        m = re.search(r"\[(.+)\]", row["name"])
        for product in (m.group(1).split("/") if m else []):
            out.setdefault(product.strip(), set()).add(row["cc"])
    return out


def test_a_bare_model_number_names_a_gpu_only_as_the_whole_name():
    """gpus.toml's "210" (GeForce 210, 1.2) must not make "NVIDIA PG509-210" (an A100 board) a
    Tesla-generation GPU: a key of digits alone matches only the whole name."""
    numbers = [(key, cc) for key, cc, _name in k.load().gpu_keys if all(t.isdigit() for t in key)]
    assert numbers
    for key, cc in numbers:
        num = " ".join(key)
        assert k.capability_for_name(f"GeForce {num}") == cc
        for other in (f"NVIDIA PG509-{num}", f"NVIDIA X{num} Board", f"{num}0"):
            assert k.capability_for_name(other) != cc or k.capability_for_name(other) is None, other


def test_names_agree_with_pci_ids_exact_products_where_nvidias_tables_do_not_name_them():
    """A GPU named exactly as a pci.ids product (an OEM board, "PH402 SKU 200"; a part made on
    another chip than its family, "GeForce RTX 3050 A Laptop GPU") gets that product's
    capability; a product pci.ids puts on chips of different capability gets none of another."""
    exact_rows = {key for key, _cc, _name in k.load().gpu_keys}
    checked = 0
    for product, ccs in _pci_products().items():
        tokens = tuple(gpu_tokens(product))
        if not tokens or tokens in exact_rows:
            continue            # checks/gpus.toml names it itself (NVIDIA's tables; disagreements noted there)
        got = k.capability_for_name(product)
        ccs = {versions.fmt_cc(versions.parse_cc(c)) for c in ccs}
        assert got in ccs or (got is None and len(ccs) > 1), (product, got, ccs)
        checked += 1
    assert checked > 100


# --- no cache: every start reads the data files themselves ----------------------------


def test_an_edited_data_file_is_read_and_checked_again(tmp_path):
    folder = _copy_checks(tmp_path)
    assert k.Knowledge(folder).thresholds["docker_default_shm_bytes"]["value"] != 123
    path = folder / "thresholds.toml"
    text = path.read_text()
    at = text.index("value =", text.index('name = "docker_default_shm_bytes"'))
    path.write_text(text[:at] + "value = 123" + text[text.index("\n", at):])
    assert k.Knowledge(folder).thresholds["docker_default_shm_bytes"]["value"] == 123
    path.write_text(text.replace('name = "docker_default_shm_bytes"', 'nam = "docker_default_shm_bytes"', 1))  # no name: malformed
    with pytest.raises(k.KnowledgeError, match=r"thresholds.toml:\d+: threshold\[\d+\]\.name: missing$"):
        k.Knowledge(folder).tables["thresholds.toml"]


def test_nothing_is_cached_so_nothing_planted_is_believed(tmp_path, monkeypatch):
    """Issue 23: a planted cache entry silenced findings.  There is no cache: the doctor writes
    nothing and reads only checks/."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DEBTORCH_CACHE", str(cache))
    folder = _copy_checks(tmp_path)
    want = tomllib.loads((folder / "debian.toml").read_text())
    assert k.Knowledge(folder).tables["debian.toml"] == want
    assert not cache.exists()


def test_a_data_file_that_is_not_a_regular_file_is_one_line(tmp_path):
    folder = _copy_checks(tmp_path)
    (folder / "debian.toml").unlink()
    os.mkfifo(folder / "debian.toml")
    with pytest.raises(k.KnowledgeError, match=r"debian.toml: is a FIFO$"):
        k.Knowledge(folder).tables["debian.toml"]


def test_a_data_file_that_is_not_utf8_is_one_line(tmp_path):
    folder = _copy_checks(tmp_path)
    (folder / "debian.toml").write_bytes(b"[[release]]\nversion = \"\xff\"\n")
    with pytest.raises(k.KnowledgeError, match=r"debian.toml: not UTF-8 text \(invalid start byte at byte 23\)$"):
        k.Knowledge(folder).tables["debian.toml"]


# --- issue 22: every release back to 1.0, the Python column, rows by release ------------------

def test_every_wheel_row_names_its_pythons_and_releases_of_its_own_series():
    seen = set()
    for row in k.load().wheels:
        assert row["python"] and all(re.fullmatch(r"[23]\.\d{1,2}", p) for p in row["python"]), row
        for rel in row.get("releases", []):
            assert re.fullmatch(r"\d+\.\d+\.\d+", rel) and rel.rsplit(".", 1)[0] in row["torch"], row
        for series in row["torch"]:
            for rel in row.get("releases") or [None]:
                key = (row.get("platform", "linux-x86_64"), series, rel, row["variant"])
                assert key not in seen, key          # one row per release (or series) and variant
                seen.add(key)


def test_every_release_from_1_0_is_known():
    assert k.known_series()[0] == "1.0" and {"1.3", "1.5", "1.7", "2.14"} <= set(k.known_series())


def test_1_3_0_and_1_3_1_differ_and_a_series_means_its_newest_release():
    assert k.wheel("1.3.0", "cu101")["arch_list"].startswith("3.5;")
    assert k.wheel("1.3.1", "cu101")["arch_list"].startswith("3.7+PTX;")
    assert k.wheel("1.3", "cu101")["arch_list"] == k.wheel("1.3.1", "cu101")["arch_list"]
    assert k.arch_support("3.5", k.wheel("1.3.1+cu101")["arch_list"])[0] == "none"     # a K40 under 1.3.1
    assert k.arch_support("3.5", k.wheel("1.3.0+cu101")["arch_list"])[0] == "sass"


def test_the_python_column_filters_and_status_orders():
    # 2.13 on an Ampere GPU, driver unknown: the stable cu130 before the experimental cu132
    assert k.best_variant_for_driver("2.13.0", None, "8.6")["variant"] == "cu130"
    assert k.best_variant_for_driver("2.13.0", None, "8.6", python="3.9") is None      # 2.13 starts at 3.10
    assert k.best_variant_for_driver("2.4.1", "535.261.03", "8.6", python="3.8")["variant"] == "cu121"
    assert k.python_fits(k.wheel("1.8.1", "cu111"), "3.11") is False


def test_every_gpu_of_a_list_must_have_code():
    assert k.best_variant_for_driver("2.7.0", "580.95.05", ["8.6", "12.0"])["variant"] == "cu128"
    assert k.best_variant_for_driver("2.7.0", "580.95.05", ["8.6"])["variant"] != "cu128"   # stable before experimental


# --- the files on the index (issue 28) -------------------------------------------------------------

def test_every_series_of_the_wheel_table_has_its_releases_named():
    kb = k.load()
    for row in kb.wheels:
        platform = row.get("platform", "linux-x86_64")
        for series in row["torch"]:
            known = k.releases(series, platform)
            assert known, (series, platform)
            for release in row.get("releases") or known:
                assert k.wheel_files(release, row["variant"], platform), (release, row["variant"], platform)


def test_every_release_of_the_files_table_belongs_to_a_series_the_wheels_know():
    kb = k.load()
    for row in kb.files:
        platform = row.get("platform", "linux-x86_64")
        for release in row["releases"]:
            series = versions.torch_version(release)["series"]
            assert series in k.known_series(platform), (release, platform)
            for variant in row.get("variants", ()):
                assert variant in k.variants(release, platform), (release, variant)


@pytest.mark.parametrize("release, series, variant, platform, want", [
    ("2.13.0", "2.13", "cu126", "linux-x86_64", "torch==2.13.0+cu126"),
    ("1.7.1", "1.7", "cu92", "linux-x86_64", "torch==1.7.1+cu92"),
    ("1.7.1", "1.7", "cu102", "linux-x86_64", "torch==1.7.1"),          # PyPI's build, copied unlabelled
    ("1.8.1", "1.8", "cu102", "linux-x86_64", "torch==1.8.1+cu102"),
    ("2.5.1", "2.5", "cu124", "linux-aarch64", "torch==2.5.1"),
    (None, "2.14", "cu130", "linux-x86_64", "torch==2.14.*"),
    ("2.99.0", "2.99", "cu130", "linux-x86_64", "torch==2.99.0+cu130"),   # unknown to the table: labelled
])
def test_a_pin_names_one_wheel(release, series, variant, platform, want):
    assert k.pin(release, series, variant, platform) == want


def test_the_glibc_a_release_needs_comes_from_its_files_tag():
    assert k.files_glibc("2.7.0", "cu118") == "2.28"
    assert k.files_glibc(None, "cu118", series="2.7") == "2.28"
    assert k.files_glibc("1.2.0", "cu100") == "2.5"                # manylinux1
    assert k.files_glibc("2.5.1", "cu124") is None                 # linux_x86_64 says nothing
    assert k.glibc_fits("2.28", "2.27") is False and k.glibc_fits("2.28", None)
    best = k.best_variant_for_driver("2.7.1", "550.54.14", ["8.6"], glibc="2.27")
    assert best is None
