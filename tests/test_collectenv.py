"""The collect_env reader on real reports from public bug trackers
(tests/collect_env/, see SOURCES.md there)."""

import importlib.util
import io
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import Result

from debtorch import facts as facts_mod
from debtorch.facts import collectenv
from debtorch.facts.collectenv import CollectEnvError, parse, parse_file, parse_nvidia_smi, parse_torch_warnings

CORPUS = Path(__file__).parent / "collect_env"
TEXTS = sorted(CORPUS.glob("*.txt"))
SMI = sorted((CORPUS / "nvidia-smi").glob("*.txt"))


# The dotted-path helpers the corpus scorer reads every expected file with.
_spec = importlib.util.spec_from_file_location(
    "corpus_score", Path(__file__).resolve().parent.parent / "benchmarks" / "corpus_score.py")
_score = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_score)
resolve, reason = _score.resolve, _score.reason


def expected(text_path):
    with open(text_path.with_suffix(".expected.toml"), "rb") as fh:
        return tomllib.load(fh)


@pytest.mark.parametrize("path", TEXTS, ids=[p.stem for p in TEXTS])
def test_corpus_report_gives_the_facts_a_reader_sees(path):
    exp = expected(path)
    doc = parse_file(str(path))
    meta = doc["collect_env"]
    for key, value in exp["collect_env"].items():
        assert meta[key] == value, f"collect_env.{key}"
    for dotted, value in exp["facts"].items():
        assert resolve(doc, dotted) == value, dotted
    for dotted in exp.get("unknown", []):
        assert resolve(doc, dotted) is None, dotted
        assert reason(doc, dotted), f"{dotted} is None without a reason"
    for dotted in exp.get("known_none", []):
        assert resolve(doc, dotted) is None, dotted
        parent, _, leaf = dotted.rpartition(".")
        assert leaf not in (resolve(doc, parent).get("unknown") or {}), f"{dotted} should be known"


def test_every_text_has_its_source_its_expectation_and_a_verdict():
    sources = (CORPUS / "SOURCES.md").read_text()
    for path in TEXTS + SMI:
        assert f"`{path.relative_to(CORPUS)}`" in sources, path.name
    for path in TEXTS:
        verdict = expected(path)["verdict"]
        assert isinstance(verdict["working"], bool)
        if not verdict["working"]:
            assert verdict["problem"].strip(), path.name


ROOT = Path(__file__).resolve().parent.parent
DOCTOR_SOURCE = "\n".join(p.read_text() for p in sorted((ROOT / "debtorch" / "doctor").glob("*.py")))


def test_expected_ids_are_in_the_catalogue():
    catalogue = (ROOT / "docs" / "checks.md").read_text()
    for path in TEXTS:
        for fid in expected(path)["verdict"]["ids"]:
            assert f"### {fid}:" in catalogue, f"{path.name}: {fid}"


@pytest.mark.parametrize("path", TEXTS, ids=[p.stem for p in TEXTS])
def test_doctor_finds_what_the_report_calls_for(path):
    """The doctor on the parsed report: no check crashes, no finding the report does not
    call for, and every expected finding whose check exists already."""
    from debtorch.doctor import Context, diagnose

    doc = parse_file(str(path))
    report = diagnose(doc, Context(source="collect_env"))
    got = {f.id for f in report.findings}
    verdict = expected(path)["verdict"]
    want, pending = set(verdict["ids"]), set(verdict.get("pending", []))
    assert pending <= want
    assert not report.crashed, [f.message for f in report.crashed]
    assert got <= want, f"unexpected: {sorted(got - want)}"
    # 'pending': the report calls for it, the doctor does not derive it from these facts yet.
    # When it does, this fails: take the id out of 'pending'.
    assert not (pending & got), f"now found, no longer pending: {sorted(pending & got)}"
    implemented = {fid for fid in want - pending if f'"{fid}"' in DOCTOR_SOURCE}
    assert implemented <= got, f"missing: {sorted(implemented - got)}"


def test_the_corpus_covers_working_broken_old_new_smi_and_foreign_hosts():
    docs = {p.stem: parse_file(str(p)) for p in TEXTS}
    verdicts = [expected(p)["verdict"]["working"] for p in TEXTS]
    assert len(TEXTS) >= 12
    assert True in verdicts and False in verdicts
    assert any(d["collect_env"]["extra_nvidia_smi"] for d in docs.values())
    assert {"windows", "macos"} <= {d["collect_env"]["platform"] for d in docs.values()}
    assert any(d["python"]["torch"].get("version", "").startswith("1.") for d in docs.values() if d["python"]["torch"].get("version"))
    assert len({d["collect_env"]["format"] for d in docs.values()}) >= 5


def test_cuda_runtime_line_is_the_system_nvcc_never_torchs_cuda():
    # pytorch/pytorch#21399: "CUDA runtime version" is `nvcc --version`.
    doc = parse_file(str(CORPUS / "pytorch-pytorch-110153.txt"))
    assert doc["cuda"]["toolkit_nvcc"]["version"] == "12.2.140"
    assert doc["python"]["torch"]["cuda"] == "11.7"


@pytest.mark.parametrize("path", TEXTS, ids=[p.stem for p in TEXTS])
def test_system_cudnn_files_are_never_reported_as_torchs_cudnn(path):
    # pytorch/pytorch#78489: "cuDNN version" lists ldconfig's libcudnn files.
    doc = parse_file(str(path))
    deep = doc["python"].get("deep")
    if deep:
        assert deep["cudnn_version"] is None
        assert "system" in deep["unknown"]["cudnn_version"]


def test_report_says_which_facts_it_lacked():
    cut = parse_file(str(CORPUS / "pytorch-pytorch-112553.txt"))["collect_env"]
    full = parse_file(str(CORPUS / "pytorch-pytorch-150733.txt"))["collect_env"]
    assert "the NVIDIA driver version" in cut["lacking"]
    assert "the NVIDIA driver version" not in full["lacking"]
    for words in ("/dev/shm size", "whether Secure Boot is on",
                  "which kernel driver is bound to each GPU (nvidia, nouveau, nova_core, vfio-pci)"):
        assert words in full["lacking"]
    assert len(cut["lacking"]) == len(cut["lacking_fields"])


@pytest.mark.parametrize("path", TEXTS, ids=[p.stem for p in TEXTS])
def test_document_loads_as_saved_facts(path, tmp_path):
    doc = parse_file(str(path))
    text = json.dumps(doc)  # plain JSON: no sets, no objects
    loaded = facts_mod.load(str(tmp_path / "f.json"), text=text)
    assert set(facts_mod.SECTIONS) <= set(loaded)
    assert facts_mod.get(loaded, "python.torch.version") == doc["python"]["torch"].get("version")


def test_quoted_and_indented_pastes_read_the_same():
    text = (CORPUS / "pytorch-pytorch-28321.txt").read_text()
    plain = parse(text)
    quoted = parse("\n".join("> " + line for line in text.splitlines()))
    indented = parse("\n".join("    " + line for line in text.splitlines()))
    for doc in (quoted, indented):
        assert doc["python"]["torch"] == plain["python"]["torch"]
        assert doc["nvidia"]["gpus"] == plain["nvidia"]["gpus"]


def test_stdin_is_read_for_dash(monkeypatch):
    data = (CORPUS / "pytorch-pytorch-37320.txt").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert parse_file("-")["python"]["torch"]["version"] == "1.5.0"


def test_powershell_utf16_file_reads_like_utf8(tmp_path):
    text = (CORPUS / "pytorch-pytorch-122924.txt").read_text()
    f = tmp_path / "env.txt"
    f.write_bytes(b"\xff\xfe" + text.replace("\n", "\r\n").encode("utf-16-le"))
    assert parse_file(str(f))["python"]["torch"] == parse(text)["python"]["torch"]


def _file(folder, name, data):
    f = folder / name
    f.write_bytes(data)
    return f


@pytest.mark.parametrize("make, words", [
    (lambda p: p / "missing.txt", "cannot read"),
    (lambda p: p, "is a directory"),
    (lambda p: _file(p, "empty.txt", b""), "empty"),
    (lambda p: _file(p, "bin", b"\x7fELF\x02\x01\x01\x00" * 64), "binary"),
    # Only nvidia-smi, no report: a real paste of the wrong command.
    (lambda p: _file(p, "smi.txt", (CORPUS / "nvidia-smi" / "ARCC-RACE-deepracer-for-dummies-58.txt").read_bytes()),
     "not a collect_env report"),
])
def test_bad_input_is_one_line_naming_the_file(tmp_path, make, words):
    path = make(tmp_path)
    with pytest.raises(CollectEnvError) as err:
        parse_file(str(path))
    message = str(err.value)
    assert message.startswith(str(path) + ": ")
    assert words in message
    assert "\n" not in message


def test_oversized_input_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(collectenv, "MAX_BYTES", 1000)
    f = tmp_path / "big.txt"
    f.write_text((CORPUS / "bitsandbytes-foundation-bitsandbytes-1464.txt").read_text())
    with pytest.raises(CollectEnvError, match="larger than"):
        parse_file(str(f))


# --- nvidia-smi and torch's warnings ------------------------------------------------------

def test_nvidia_smi_tables_of_every_driver_era():
    got = {p.stem: parse_nvidia_smi(p.read_text()) for p in SMI}
    k520 = got["ARCC-RACE-deepracer-for-dummies-58"]
    assert (k520["driver"], k520["cuda"]) == ("418.87.00", "10.1")
    assert k520["gpus"][0]["persistence_mode"] is True
    assert k520["gpus"][0]["memory_total"] == 4037 * 1024 * 1024
    assert k520["processes"] == [{"gpu": 0, "pid": 8351, "type": "C", "name": "/usr/bin/python3.6",
                                  "used_memory": 35 * 1024 * 1024}]
    gtx780 = got["pytorch-pytorch-31007"]
    assert gtx780["gpus"][0]["utilization_gpu"] is None and gtx780["processes"] == []
    p4 = got["slackr31337-wyoming-piper-gpu-20"]
    assert (p4["driver"], p4["cuda"], p4["gpus"][0]["name"]) == ("550.135", "12.4", "Tesla P4")
    assert p4["gpus"][0]["memory_used"] == 7719 * 1024 * 1024
    assert [g["index"] for g in got["neuralhydrology-neuralhydrology-43"]["gpus"]] == [0, 1]
    old = got["m0nad-Diamorphine-13"]
    assert (old["driver"], old["cuda"]) == ("410.48", None)


def test_nvidia_smi_after_a_report_fills_the_drivers_cuda():
    doc = parse_file(str(CORPUS / "pytorch-pytorch-43058.txt"))
    assert doc["nvidia"]["nvml"]["cuda_driver_version"] == "10.1"
    assert doc["nvidia"]["source"] == "collect_env+nvidia-smi"


@pytest.mark.parametrize("text, name, capability", [
    # pytorch/pytorch#16712 (Windows, PyTorch 1.0)
    ("UserWarning: \n    Found GPU0 GeForce GTX 670M which is of cuda capability 2.1.\n"
     "    PyTorch no longer supports this GPU because it is too old.", "GeForce GTX 670M", "2.1"),
    # w-okada/voice-changer#447
    ("Found GPU0 GeForce GT 720 which is of cuda capability 3.5.\nPyTorch no longer supports this GPU because it is "
     "too old.\nThe minimum cuda capability supported by this library is 3.7.", "GeForce GT 720", "3.5"),
])
def test_too_old_gpu_warning_gives_its_capability(text, name, capability):
    warn = parse_torch_warnings(text)
    assert [(d["name"], d["capability"]) for d in warn["devices"]] == [(name, capability)]


def test_warning_template_without_values_is_not_a_device():
    # neuralhydrology/neuralhydrology#43 pasted the format string itself.
    text = ("Found GPU%d %s which is of cuda capability %d.%d.\nPyTorch no longer supports this GPU because it is "
            "too old.\nThe minimum cuda capability supported by this library is %d.%d.")
    assert parse_torch_warnings(text)["devices"] == []


# --- never anything but CollectEnvError ---------------------------------------------------

def _check(text):
    try:
        doc = parse(text)
    except CollectEnvError as exc:
        assert "\n" not in str(exc)
        return
    assert doc["schema_version"] == 1
    assert set(collectenv.SECTIONS) <= set(doc)
    json.dumps(doc)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises_anything_else(text):
    _check(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(TEXTS), st.lists(st.tuples(st.sampled_from(["drop", "dup", "swap", "cut"]),
                                                  st.integers(0, 10_000)), max_size=12))
def test_damaged_corpus_texts_never_raise_anything_else(path, edits):
    lines = path.read_text().splitlines()
    for op, n in edits:
        if not lines:
            break
        i = n % len(lines)
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = (n // 7) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = lines[i][: n % (len(lines[i]) + 1)]
    _check("\n".join(lines))


LINE_HEADS = sorted(collectenv.LABELS) + [
    "GPU 0", "[pip3] torch=", "[conda] pytorch", "| NVIDIA-SMI 1 Driver Version: 1 CUDA Version: 1",
    "|   0  X  On | 0000:00:00.0 Off | 0 |", "| 0 1C P0 1W / 1W | 1MiB / 2MiB | 1% Default |", "Processes:",
    "CPU(s)", "Flags", "=====", "Probably one of the following", "/usr/lib/libcudnn.so.",
    "with CUDA capability sm_", "found version "]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LINE_HEADS), st.sampled_from([":", "：", " ", "=", ""]),
                          st.text(max_size=30)), max_size=40))
def test_soup_of_report_lines_never_raises_anything_else(parts):
    _check("\n".join(f"{head}{sep}{value}" for head, sep, value in parts))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(TEXTS), st.integers(0, 100_000))
def test_truncated_corpus_texts_never_raise_anything_else(path, n):
    text = path.read_text()
    _check(text[: n % (len(text) + 1)])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_in_a_file_never_raise_anything_else(tmp_path, data):
    f = tmp_path / "any.txt"
    f.write_bytes(data)
    try:
        parse_file(str(f))
    except CollectEnvError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_smi_and_warning_readers_never_raise(text):
    parse_nvidia_smi(text)
    parse_torch_warnings(text)


def test_two_reports_in_one_paste_read_the_first():
    # Reporters paste "before" and "after" (Lightning-AI/pytorch-lightning#18968 does).
    first = (CORPUS / "pytorch-pytorch-28321.txt").read_text()
    second = (CORPUS / "pytorch-pytorch-37320.txt").read_text()
    doc = parse(first + "\n\nand after the upgrade:\n\n" + second)
    assert doc["python"]["torch"]["version"] == "1.3.0"
    assert [g["name"] for g in doc["nvidia"]["gpus"]] == ["Tesla T4"]
    assert "the text holds more than one report; the first one was read" in doc["collect_env"]["notes"]


def test_megabyte_lines_are_read_in_one_pass():
    # A regression guard: an unbounded lazy group before a literal made such a paste
    # take minutes.  No clock here; a quadratic reader simply would not finish.
    text = (CORPUS / "pytorch-pytorch-150733.txt").read_text()
    junk = "x" * 1_000_000
    doc = parse(text + "\n" + junk + "\n|   0  " + " " * 200_000 + "x\n" + junk + " with CUDA capability sm_90 is not")
    assert doc["nvidia"]["gpus"][0]["compute_capability"] == "12.0"


# --- through the command line ------------------------------------------------------------

def doctor_command(*args: str, input: Optional[str] = None) -> Result:
    """``debtorch doctor ARGS`` run in this process, as the command line runs it (``input`` on stdin)."""
    from clitools import cli_runner

    from debtorch.cli import app

    return cli_runner().invoke(app, ["doctor", *args], input=input)


def test_cli_reads_a_report_from_stdin_and_says_what_it_lacked():
    text = (CORPUS / "pytorch-pytorch-28321.txt").read_text()
    res = doctor_command("--from-collect-env", "-", input=text)
    assert res.exit_code in (0, 1), res.stderr
    assert "Debian GNU/Linux 9.11 (stretch)" in res.stdout
    assert "/dev/shm size" in res.stdout
    res = doctor_command("--from-collect-env", "-", "--json", input=text)
    out = json.loads(res.stdout)
    assert out["facts"]["collect_env"]["format"] == "1.0-1.6"
    assert "whether Secure Boot is on" in out["lacking"]


def test_cli_exits_2_with_one_line_for_a_file_that_is_no_report(tmp_path):
    f = _file(tmp_path, "notes.txt", b"my GPU does not work, please help\n")
    res = doctor_command("--from-collect-env", str(f))
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0
    assert str(f) in res.stderr and "not a collect_env report" in res.stderr


# --- a container shown by the pasted text (held-out check, docs/corpus.md) ------------------

LINUX_REPORTS = [p for p in sorted((Path(__file__).parent / "corpus" / "collect_env").glob("*.txt")) + TEXTS
                 if "Python platform: Linux-" in p.read_text()]
DEBIAN_FAMILY = [p for p in LINUX_REPORTS if parse_file(str(p))["os"].get("id") in ("debian", "ubuntu")]


@pytest.mark.parametrize("kernel, container", [
    ("3.10.0-1160.71.1.el7.x86_64", True), ("4.18.0-553.40.1.el8_10.x86_64", True),
    ("5.10.223-212.873.amzn2.x86_64", True), ("5.10.134-008.7.kangaroo.al8.x86_64", True), ("6.7.11-200.fc39.x86_64", True),
    ("5.15.153.1-microsoft-standard-WSL2", False),
])
@pytest.mark.parametrize("path", DEBIAN_FAMILY[:6], ids=[p.stem for p in DEBIAN_FAMILY[:6]])
def test_a_debian_family_userspace_on_another_distributions_kernel_is_a_container(path, kernel, container):
    """collect_env says nothing of containers, but Ubuntu or Debian on a kernel that RHEL, Amazon
    Linux, Alibaba Cloud Linux or Fedora built (its dist tag) can only be a container."""
    doc = parse(_with_kernel(path.read_text(), kernel))
    assert doc["os"]["kernel"] == kernel
    assert bool(doc["os"].get("container")) is container
    assert bool(doc["os"].get("container_evidence")) is container


def _with_kernel(text, kernel):
    return re.sub(r"(Python platform\s*:\s*Linux-)\S+?(-x86_64|-aarch64)", lambda m: m.group(1) + kernel + m.group(2),
                  text, count=1)


@pytest.mark.parametrize("kernel, on_ubuntu, on_debian", [
    ("6.8.0-52-generic", False, True), ("6.8.0-1015-aws", False, True), ("5.15.0-1022-gcp", False, True),
    ("6.5.0-15-generic", False, True), ("6.1.0-18-amd64", True, False), ("6.1.0-18-cloud-amd64", True, False),
    ("5.10.0-28-arm64", True, False), ("5.4.143.bsk.8-amd64", False, False),     # a vendor's own build: no evidence
])
def test_debian_on_ubuntus_kernel_or_ubuntu_on_debians_is_a_container(kernel, on_ubuntu, on_debian):
    """Their kernels tell them apart by flavour: Debian's -amd64/-cloud-amd64/-arm64, Ubuntu's
    -generic/-aws/-gcp ...; each distribution on its own kernel is no container."""
    ubuntu = [p.read_text() for p in DEBIAN_FAMILY if parse_file(str(p))["os"]["id"] == "ubuntu"][:3]
    debian = [re.sub(r"(?m)^(OS\s*:\s*).*$", r"\1Debian GNU/Linux 12 (bookworm) (x86_64)", t, count=1) for t in ubuntu]
    assert ubuntu and all(parse(t)["os"]["id"] == "debian" for t in debian)
    for texts, want in ((ubuntu, on_ubuntu), (debian, on_debian)):
        for text in texts:
            assert bool(parse(_with_kernel(text, kernel))["os"].get("container")) is want, kernel


def test_a_distribution_of_container_images_only_is_a_container():
    """Wolfi/Chainguard and distroless have no kernel: a report from one comes from a container,
    whatever kernel the host runs; a distribution with its own kernel on it is not."""
    base = "PyTorch version: 2.5.1+cu124\nCUDA used to build PyTorch: 12.4\nOS: {} (x86_64)\n" \
           "Python platform: Linux-6.1.0-18-amd64-x86_64-with-glibc2.36\n"
    assert parse(base.format("Chainguard"))["os"]["container"]
    assert parse(base.format("Red Hat Enterprise Linux 9.4 (Plow)"))["os"].get("container") is None


@pytest.mark.parametrize("prompt, kind", [
    ("root@7dc9530a8c13:/workspace# python collect_env.py", "docker"),
    ("user@168b53aa1722:~$ python -m torch.utils.collect_env", "docker"),
    ("root@rocm:/# python collect_env.py", None), ("me@workstation-01:~$ python collect_env.py", None),
    ("root@7DC9530A8C13:/workspace# python collect_env.py", None),     # Docker's ids are lower-case hex
])
@pytest.mark.parametrize("path", LINUX_REPORTS[:4], ids=[p.stem for p in LINUX_REPORTS[:4]])
def test_a_prompt_with_dockers_default_hostname_is_a_container(path, prompt, kind):
    doc = parse(prompt + "\n" + path.read_text())
    assert doc["os"].get("container") == kind or (kind is None and doc["os"].get("container") != "docker")


KEY_FIELDS = (("python", "torch", "version"), ("python", "torch", "cuda"), ("nvidia", "driver_version"),
              ("os", "pretty_name"), ("python", "deep", "cuda_available"))


def _fields(doc):
    out = []
    for path in KEY_FIELDS:
        node = doc
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        out.append(node)
    out.append([g.get("name") for g in doc["nvidia"].get("gpus") or []])
    return out


@pytest.mark.parametrize("path", LINUX_REPORTS[:12], ids=[p.stem for p in LINUX_REPORTS[:12]])
def test_a_report_pasted_with_html_line_breaks_reads_as_the_plain_one(path):
    """Reports pasted into Markdown or HTML sometimes end every line with <br> (a README's
    "pytorch env" section, held-out check): the same facts as the plain text."""
    text = path.read_text()
    br = "".join(line + "<br>\n" for line in text.splitlines())
    assert _fields(parse(br)) == _fields(parse(text))
