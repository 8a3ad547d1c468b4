"""Verdicts from partial evidence (issue 10, phase 2), tested by class rather than by file.

torch's own words are evidence wherever they appear: each warning is added to
every healthy Linux report of the corpus, and the verdict must follow from
the words alone.  The machine view answers what the facts imply (a GPU known
by name or PCI id, an old wheel's arch list from its CUDA, the Debian a
derivative is built on, the architecture without wheels); the area states say
what could not be judged.
"""

import importlib.util
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from debtorch import knowledge
from debtorch.doctor import Context, diagnose
from debtorch.doctor.areas import JUDGED, NOT_JUDGED, UNKNOWN, area_state
from debtorch.facts import collectenv, torch_messages
from debtorch.facts.nvidia import parse_smi_xml
from debtorch.machine import Machine

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("corpus_score", ROOT / "benchmarks" / "corpus_score.py")
score = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(score)

REPORTS = sorted((ROOT / "tests" / "corpus" / "collect_env").glob("*.txt")) + \
    sorted((ROOT / "tests" / "collect_env").glob("*.txt"))


def _healthy_linux_cuda_reports():
    out = []
    for path in REPORTS:
        exp = score._expected(path.with_suffix(".expected.toml"))
        doc = collectenv.parse_file(str(path))
        m = Machine.from_facts(doc)
        if (score.target({"expected": exp}) == "healthy" and m.os.platform == "linux" and m.torch.cuda
                and not m.os.wsl):
            out.append(path)
    return out


HEALTHY = _healthy_linux_cuda_reports()
WARN = "/x/site-packages/torch/cuda/__init__.py:52: UserWarning: CUDA initialization: {}\n"


def _unavailable(text):
    """What the report says when torch's warning fired: CUDA is not available."""
    return re.sub(r"(Is CUDA available\s*:\s*)(True|Yes)", lambda m: m.group(1) + ("False" if m.group(2) == "True" else "No"),
                  text)


def _verdict(text):
    doc = collectenv.parse(text)
    report = diagnose(doc, Context(source="collect_env"))
    return score.verdict_class(report.findings), report.findings, Machine.from_facts(doc)


def test_there_are_enough_healthy_reports_to_vary():
    assert len(HEALTHY) >= 8


@pytest.mark.parametrize("path", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_found_no_driver_is_no_driver_on_any_report(path):
    text = WARN.format("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
                       "installed a driver from http://www.nvidia.com/Download/index.aspx") + _unavailable(path.read_text())
    cls, found, m = _verdict(text)
    assert cls == "no-driver" and m.cuda.failure == "no-driver" and m.cuda.from_torch


@pytest.mark.parametrize("path", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_driver_too_old_words_carry_the_drivers_cuda(path):
    text = WARN.format("The NVIDIA driver on your system is too old (found version 10010). Please update your "
                       "GPU driver") + _unavailable(path.read_text())
    cls, found, m = _verdict(text)
    assert m.driver.cuda == "10.1" or m.get("nvidia.cuda_driver_version")      # 10010 is CUDA 10.1
    assert cls == "driver-too-old", [f.id for f in found]
    e1 = next(f for f in found if f.id == "cuda.E001")
    assert "too old" in e1.message


@pytest.mark.parametrize("path", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_no_kernel_image_is_an_arch_verdict_on_any_report(path):
    text = path.read_text() + ("\nTraceback (most recent call last):\nRuntimeError: CUDA error: no kernel image is "
                               "available for execution on the device\n")
    cls, found, _ = _verdict(text)
    assert cls in ("arch-too-new", "arch-too-old"), [f.id for f in found]


@pytest.mark.parametrize("path", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_cuda_unknown_error_is_a_failed_initialisation_on_any_report(path):
    text = WARN.format("CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing "
                       "env variable CUDA_VISIBLE_DEVICES after program start.") + _unavailable(path.read_text())
    cls, found, _ = _verdict(text)
    assert "cuda.E003" in {f.id for f in found} and cls in ("other", "driver-too-old", "cpu-wheel")


@given(st.text(max_size=400))
def test_classifying_torchs_words_never_raises(text):
    got = torch_messages.classify(text)
    assert got is None or got[0] in {k for k, _ in torch_messages.KINDS}


# --- the machine view ------------------------------------------------------------------------

def test_a_gpu_nvidia_smi_calls_graphics_device_is_known_by_its_pci_id():
    xml = (ROOT / "tests" / "corpus" / "nvidia-smi-xml" / "telegraf-gtx-1660-ti.xml").read_text()
    got = parse_smi_xml(xml)
    doc = {"nvidia": {"source": "nvidia-smi", "gpus": got["gpus"]}}
    [g] = Machine.from_facts(doc).gpus
    assert g.cc == "7.5" and g.cc_from == "the PCI id"
    assert g.name == "NVIDIA GeForce GTX 1660" and g.row["name"] == "Graphics Device"   # named from the PCI id too


def test_windows_xml_makes_the_driver_windows():
    xml = (ROOT / "tests" / "corpus" / "nvidia-smi-xml" / "telegraf-rtx-3080-v12.xml").read_text()
    assert "<current_dm>WDDM</current_dm>" in xml          # a Windows driver model
    doc = {"nvidia": {"source": "nvidia-smi", "gpus": parse_smi_xml(xml)["gpus"], "driver_version": "536.40"}}
    assert Machine.from_facts(doc).driver.platform == "windows"


@pytest.mark.parametrize("version, cuda, cc, judged", [
    ("1.2.0a0+b527e48", "10.0", "1.2", "none"),    # older than anything CUDA 10.0 builds
    ("1.5.0a0+c63c82e", "10.2", "8.6", "none"),    # Ampere: CUDA 10.2 stops at sm_75
    ("1.5.0a0+c63c82e", "10.2", "3.0", "sass"),    # CUDA 10.2 builds sm_30; whether this build did is not known
    ("1.8.0a0+af2250e", "11.0", "8.6", "sass"),    # 11.0 builds sm_80, which runs on 8.6
    ("0.4.1", "9.2", "7.0", "sass"),               # older than the wheel table
])
def test_a_build_the_wheel_table_does_not_describe_is_judged_by_what_its_cuda_can_build(version, cuda, cc, judged):
    """Source builds (their versions from real reports: pytorch/pytorch#21710, #35565, #51833)
    chose their own architectures: only what their CUDA could build is known."""
    doc = {"python": {"torch": {"installed": True, "version": version, "cuda": cuda}}}
    arch = Machine.from_facts(doc).torch_arch
    assert arch is not None and not arch.exact and "cuda_arch.toml" in arch.source
    assert knowledge.arch_support(cc, arch.arch)[0] == judged


@pytest.mark.parametrize("version, cuda, gpu, verdict", [
    ("1.3.0", "10.1.243", "Tesla K40c", "sass"),      # 1.3.0 still built sm_35
    ("1.3.1", "10.1.243", "Tesla K40c", "none"),      # 1.3.1 moved to sm_37 (pytorch/pytorch#31319)
    ("1.4.0", "10.1", "Tesla K40m", "none"),
    ("1.2.0", "9.2.148", "GeForce GTX TITAN X", "sass"),
    ("1.6.0", "10.2", "GeForce RTX 3090", "none"),    # Ampere under a CUDA 10 wheel
    ("1.7.1", "11.0", "GeForce RTX 3090", "sass"),    # sm_80 code runs on 8.6
    ("1.0.1", "10.0.130", "GeForce RTX 2080 Ti", "sass"),
])
def test_every_release_back_to_1_0_is_judged_by_its_own_arch_list(version, cuda, gpu, verdict):
    """Issue 22: a wheel older than 1.8 is judged by the architectures it was built for
    (checks/torch_wheels.toml), not only by what its CUDA could build."""
    doc = {"python": {"torch": {"installed": True, "version": version, "cuda": cuda}},
           "nvidia": {"gpus": [{"index": 0, "name": gpu}]}}
    m = Machine.from_facts(doc)
    assert m.torch_arch.exact and m.torch_arch.source.startswith(f"the official {version[:3]} ")
    assert knowledge.arch_support(m.gpus[0].cc, m.torch_arch.arch)[0] == verdict


@pytest.mark.parametrize("files, release, relation", [
    ({"ID": "ubuntu", "ID_LIKE": "debian", "VERSION_ID": "16.04"}, None, None),          # Ubuntu alone: no base
    ({"ID": "ubuntu", "ID_LIKE": "debian", "debian_version": "stretch/sid"}, "9", "older"),
    ({"ID": "linuxmint", "ID_LIKE": "debian", "VERSION_ID": "6", "DEBIAN_CODENAME": "bookworm"}, "12", "supported"),
    ({"ID": "raspbian", "ID_LIKE": "debian", "VERSION_ID": "10", "VERSION": "10 (buster)"}, "10", "older"),
    ({"ID": "raspbian", "ID_LIKE": "debian", "VERSION_ID": "8"}, "8", "older"),
    ({"ID": "debian", "VERSION_CODENAME": "trixie"}, "testing", "supported"),              # no VERSION_ID: testing
    ({"ID": "debian", "debian_version": "stretch/sid"}, "testing", "older"),
    ({"ID": "debian", "VERSION": "8 (jessie)", "VERSION_ID": "8"}, "8", "older"),
    ({"ID": "debian", "VERSION_ID": "15"}, "15", "newer"),                                 # newer, never older
    ({"ID": "Deepin", "ID_LIKE": "debian"}, None, None),
])
def test_which_debian_a_machine_is_or_is_built_on(files, release, relation):
    from debtorch.facts.osinfo import identify

    osr = {k: v for k, v in files.items() if k.isupper()}
    os_sec = dict(identify(osr), debian_version=files.get("debian_version"), platform="linux")
    o = Machine.from_facts({"os": os_sec}).os
    assert o.id == o.id.lower()
    assert (o.debian.release if o.debian else None) == release
    assert (o.debian.relation if o.debian else None) == relation


def test_a_derivative_on_an_old_base_is_warned_like_that_debian():
    doc = {"os": {"id": "ubuntu", "id_like": "debian", "pretty_name": "Ubuntu 16.04.7 LTS",
                  "debian_version": "stretch/sid", "platform": "linux"}}
    ids = {f.id for f in diagnose(doc).findings}
    assert {"os.I001", "os.W002"} <= ids


@pytest.mark.parametrize("arch, wheels", [("x86_64", True), ("aarch64", True), ("s390x", True),
                                          ("armv7l", False), ("i686", False), ("riscv64", False)])
def test_architectures_without_wheels_get_a_finding(arch, wheels):
    doc = {"os": {"id": "debian", "version_id": "12", "platform": "linux", "arch": arch},
           "python": {"version": "3.11.2", "torch": {"installed": False}}}
    ids = {f.id for f in diagnose(doc).findings}
    assert ("cpu.W004" in ids) is (not wheels)


# --- what cannot be judged -------------------------------------------------------------------

def test_a_reports_silent_areas_are_unknown_and_a_live_machines_are_judged(replay):
    doc = collectenv.parse_file(str(ROOT / "tests" / "corpus" / "collect_env" / "pytorch-pytorch-82382.txt"))
    m = Machine.from_facts(doc)
    for area in ("apt", "memory", "storage", "gpu", "cpu"):
        assert area_state(m, area).state == UNKNOWN, area
        assert area_state(m, area).reason
    assert area_state(m, "os").state == JUDGED and area_state(m, "driver").state == JUDGED
    from debtorch import facts as facts_mod
    live = Machine.from_facts(facts_mod.collect(replay("debian13-workstation-rtx3080")))
    assert all(area_state(live, a).known for a in ("os", "apt", "driver", "gpu", "cpu", "memory", "storage"))


def test_a_macos_reports_os_is_not_judged_and_not_a_tick():
    path = ROOT / "tests" / "corpus" / "collect_env" / "pytorch-pytorch-11870.txt"
    from typer.testing import CliRunner

    from debtorch.cli import app
    doc = collectenv.parse_file(str(path))
    assert area_state(Machine.from_facts(doc), "os").state == NOT_JUDGED
    text = CliRunner().invoke(app, ["doctor", "--from-collect-env", str(path)]).output
    os_line = next(ln for ln in text.splitlines() if "Operating system" in ln)
    assert os_line.startswith("[?]") and "not judged" in os_line
    assert "[✓] APT" not in text and "[✓] Memory" not in text and "Not judged:" in text


@pytest.mark.parametrize("path", REPORTS, ids=[p.stem for p in REPORTS])
def test_missing_values_never_render_as_words(path):
    from typer.testing import CliRunner

    from debtorch.cli import app
    text = CliRunner().invoke(app, ["doctor", "-v", "--from-collect-env", str(path)]).output
    for word in (" None", "None)", "in None", "(None"):
        assert word not in text.replace("NoneType", ""), (word, [ln for ln in text.splitlines() if word in ln])


@pytest.mark.parametrize("env, mode, want", [
    ({"CUDA_VISIBLE_DEVICES": ""}, "default", {"cuda.E003"}),     # hidden: unset it, not a driver reload
    ({}, "prohibited", {"gpu.E003"}),                              # prohibited: gpu.E003 alone says what to do
    ({}, "default", {"cuda.E003"}),                                # the driver answers, CUDA does not start
])
def test_cuda_unavailable_is_explained_by_what_hides_the_gpus_first(env, mode, want):
    doc = {"nvidia": {"driver_version": "570.124.06",
                      "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_mode": mode}]},
           "env": {"variables": env},
           "python": {"version": "3.11.2", "torch": {"installed": True, "version": "2.6.0+cu124", "cuda": "12.4"},
                      "deep": {"cuda_available": False}}}
    found = diagnose(doc).findings
    errors = {f.id for f in found if f.level == "error"}
    assert errors == want
    if env:
        assert next(f for f in found if f.id == "cuda.E003").fix.startswith("unset CUDA_VISIBLE_DEVICES")


# --- held-out classes (benchmarks/results/corpus.md, "Held-out check") -------------------------------------

@pytest.mark.parametrize("path", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_a_report_that_does_not_name_the_build_is_not_called_cpu_only(path):
    """Projects' copies of collect_env (TorchCAM's) leave out "CUDA used to build PyTorch":
    a build the text does not name is not known, never a CPU-only build."""
    text = re.sub(r"(?m)^.*CUDA used to build PyTorch.*\n", "", path.read_text())
    text = re.sub(r"\+cu\d+", "", text)
    cls, found, m = _verdict(text)
    assert "torch.E002" not in {f.id for f in found}
    assert not m.torch.cpu_only and (m.torch.cuda or m.torch.build == "build not known")


@pytest.mark.parametrize("release, cuda", [("11", "12.1"), ("11", "12.4"), ("12", "13.0"), ("13", "13.0")])
@pytest.mark.parametrize("available, e002", [(True, False), (None, True), (False, True)])
def test_debians_packaged_driver_is_no_error_while_cuda_works_under_another(release, cuda, available, e002):
    """cuda.E002 says Debian's own driver can never run the wheel; where the driver in use is not
    named but CUDA works under it (a report's "Could not collect"), that is moot."""
    doc = {"os": {"id": "debian", "version_id": release, "platform": "linux"},
           "nvidia": {"gpus": [{"index": 0, "name": "NVIDIA L40"}]},
           "python": {"version": "3.11.2", "torch": {"installed": True, "version": "2.6.0", "cuda": cuda},
                      "deep": {"cuda_available": available}}}
    assert ("cuda.E002" in {f.id for f in diagnose(doc).findings}) is e002


@pytest.mark.parametrize("files, os_id, release", [
    ({"etc/debian_version": "6.0.10\n"}, "debian", "6"),                     # squeeze: no os-release yet
    ({"etc/debian_version": "5.0.10\n"}, "debian", "5"),
    ({"etc/debian_version": "jessie/sid\n", "etc/lsb-release": "DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE=14.04\n"},
     "ubuntu", "8"),                                                         # a derivative names itself
    ({}, None, None),
])
def test_a_tree_whose_only_release_file_is_debian_version_is_debian(tmp_path, files, os_id, release):
    from debtorch import facts as facts_mod
    from debtorch.host import ReplayHost

    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    doc = facts_mod.collect(ReplayHost(tmp_path), facts_mod.Options(sections=("os",)))
    m = Machine.from_facts(doc)
    assert m.os.id == os_id and (m.os.debian.release if m.os.debian else None) == release
    assert ("os.W002" in {f.id for f in diagnose(doc).findings}) is (release is not None)


def test_no_area_is_judged_on_facts_that_say_nothing():
    """Unknown is not fine, for every area the doctor has (issue 10, class 8): on an empty facts
    document each is unknown, with a reason, but the site's rules (configuration, not facts)."""
    from debtorch.doctor import AREAS

    m = Machine.from_facts({})
    states = {area.id: area_state(m, area.id) for area in AREAS}
    assert {a for a, s in states.items() if s.known} <= {"site"}
    assert all(s.reason for a, s in states.items() if not s.known)


@pytest.mark.parametrize("path", REPORTS, ids=[p.stem for p in REPORTS])
def test_a_reports_network_and_python_environment_are_not_ticked(path):
    """collect_env lists no network interfaces and not the interpreter's path (PEP 668, venv)."""
    m = Machine.from_facts(collectenv.parse_file(str(path)))
    assert area_state(m, "network").state == UNKNOWN
    assert area_state(m, "python").state == UNKNOWN


# --- issue 22: torch's words where the report's own lines are missing ------------------------

ARCH_WARN = ("/x/site-packages/torch/cuda/__init__.py:287: UserWarning:\nNVIDIA GeForce RTX 5090 with CUDA capability "
             "sm_120 is not compatible with the current PyTorch installation.\nThe current PyTorch install supports "
             "CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n")


def _without_gpus(text):
    """The report with its GPU section and driver line cut out (a paste that lost them)."""
    out, skip = [], False
    for line in text.splitlines():
        bare = line.strip().lstrip("> ")
        if re.match(r"(GPU models and configuration|Nvidia driver version)\s*:", bare):
            skip = True
            continue
        if skip and re.match(r"GPU \d+\s*:", bare):
            continue
        skip = False
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("path", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_the_arch_warning_judges_a_report_without_its_gpu_section(path):
    cls, found, m = _verdict(ARCH_WARN + _without_gpus(path.read_text()))
    assert [g.cc for g in m.gpus] == ["12.0"] and m.gpus[0].cc_from == "torch"
    assert cls == "arch-too-new", [f.id for f in found]


BUILT = [p for p in HEALTHY if re.search(r"CUDA used to build PyTorch\s*:\s*\d", p.read_text())]


@pytest.mark.parametrize("path", BUILT, ids=[p.stem for p in BUILT])
def test_a_torch_version_not_collected_still_has_its_driver_judged(path):
    """'PyTorch version: Could not collect' beside 'CUDA used to build PyTorch' and torch's own
    driver warning: torch was imported, so its build's CUDA is judged against the driver."""
    text = re.sub(r"(PyTorch version\s*:\s*)\S+", r"\1Could not collect", path.read_text(), count=1)
    text = "\n".join(ln for ln in text.splitlines() if not re.search(r"\[(pip3?|conda)\]\s+(torch|pytorch)\b", ln))
    cls, found, m = _verdict(WARN.format("The NVIDIA driver on your system is too old (found version 10010).")
                             + _unavailable(text))
    assert m.torch.installed and m.torch.version is None and m.torch.cuda
    assert cls == "driver-too-old", [f.id for f in found]


def test_a_paste_cut_after_the_header_is_judged_by_torchs_warning():
    cls, found, m = _verdict("Collecting environment information...\n" + ARCH_WARN)
    assert cls == "arch-too-new" and m.torch.installed and not m.torch.cpu_only
    with pytest.raises(collectenv.CollectEnvError):
        collectenv.parse("Collecting environment information...\nsome prose, no torch words\n")


def test_torch_2_13s_wording_gives_the_gpus_capability():
    warn = collectenv.parse_torch_warnings(
        "UserWarning: Found GPU0 NVIDIA GB10 which is of compute capability (CC) 12.1.\n"
        "Your installed torch==2.13.0+cu130 does not include kernels for this GPU.")
    assert warn["devices"] == [{"index": 0, "name": "NVIDIA GB10", "capability": "12.1"}]
