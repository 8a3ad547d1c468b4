"""Untrusted text in every text report (issue 30, item 5): control characters, DEL, C1 controls and
bidirectional overrides from a facts document, a recording, a fleet document, a linted file's name
and its code reach the terminal escaped (debtorch/textsafe.py, applied by the console printer and
every note); --json keeps the values as they are."""

import json
import re

import pytest
from clitools import HOSTS, cli_runner
from hostkit import facts_of, make_host
from hypothesis import given
from hypothesis import strategies as st

from debtorch.cli import app
from debtorch.textsafe import printable

runner = cli_runner()
VM = str(HOSTS / "debian12-vm-2core")
# What a hostile value holds: retitle the terminal (OSC 0), clear it (CSI 2J, and its C1 form), set the
# clipboard (OSC 52), a DEL, a line break that would start a fake line, and a right-to-left override.
EVIL = "Debian\x1b]0;owned\x07 12\x1b[2J\x9b2J\x1b]52;c;cm0gLXJmIH4=\x07\x7f\nwatch.I001 fine\u202e(lamrof)\u2066x\u2069"
# Everything that must never reach a terminal as it is (a line break only between lines).
UNSAFE_IN_A_LINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def assert_escaped(out: str) -> None:
    assert UNSAFE_IN_A_LINE.search(out) is None, ascii(out)
    assert "\\x1b]0;owned\\x07" in out and "\\u202e" in out and "\\x9b2J" in out, ascii(out)
    assert not any(line.startswith("watch.I001") for line in out.splitlines())   # no fake line


def test_printable_escapes_every_unsafe_character_and_nothing_else():
    assert printable(EVIL) == ("Debian\\x1b]0;owned\\x07 12\\x1b[2J\\x9b2J\\x1b]52;c;cm0gLXJmIH4=\\x07\\x7f\\x0a"
                               "watch.I001 fine\\u202e(lamrof)\\u2066x\\u2069")
    plain = "GPU 0 (NVIDIA A100) — 40 GiB, ¿qué? 自动选择FP16 ✓ \\x1b"
    assert printable(plain) is plain or printable(plain) == plain
    assert printable("\ud800") == "\\ud800" and printable(7) == "7"


@given(st.text())
def test_printable_output_is_safe_printable_and_stable(text):
    out = printable(text)
    assert UNSAFE_IN_A_LINE.search(out) is None and "\n" not in out
    assert printable(out) == out
    out.encode("utf-8")              # a lone surrogate would raise here, and in print()


@pytest.fixture(scope="module")
def vm_doc(tmp_path_factory):
    return facts_of(make_host(tmp_path_factory.mktemp("vm")))


def test_a_facts_document_shows_escaped_in_text_and_as_it_is_in_json(tmp_path, vm_doc):
    doc = json.loads(json.dumps(vm_doc))
    doc["os"]["pretty_name"], doc["os"]["kernel"] = EVIL, EVIL
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(doc))
    res = runner.invoke(app, ["doctor", "-v", "--facts", str(path)])
    assert res.exit_code in (0, 1), res.output
    assert_escaped(res.stdout)
    res = runner.invoke(app, ["tune", "--facts", str(path)])
    assert res.exit_code == 0 and UNSAFE_IN_A_LINE.search(res.stdout) is None, ascii(res.output)
    res = runner.invoke(app, ["doctor", "--facts", str(path), "--json"])
    assert json.loads(res.stdout)["facts"]["os"]["kernel"] == EVIL          # --json unchanged


def test_a_recording_shows_escaped(tmp_path):
    host = make_host(tmp_path, files={"/etc/os-release": f'PRETTY_NAME="{EVIL.replace(chr(10), "")}"\n'
                                                         'ID=debian\nVERSION_ID="12"\n'})
    for command in (["doctor", "-v"], ["facts"]):
        res = runner.invoke(app, [*command, "--host", str(host.root)])
        assert res.exit_code in (0, 1), res.output
        assert UNSAFE_IN_A_LINE.search(res.stdout) is None and "\\x1b]0;owned\\x07" in res.stdout, ascii(res.stdout)


def test_a_fleet_documents_values_show_escaped(tmp_path, vm_doc):
    for i in range(1, 4):
        doc = json.loads(json.dumps(vm_doc))
        if i == 3:
            doc["os"]["kernel"] = EVIL
            doc["python"]["version"] = EVIL
        (tmp_path / f"n{i}.json").write_text(json.dumps(doc))
    res = runner.invoke(app, ["fleet", str(tmp_path), "--verbose"])
    assert res.exit_code in (0, 1), res.output
    assert_escaped(res.stdout)


def test_lint_shows_an_evil_file_name_and_code_line_escaped(tmp_path):
    path = tmp_path / "train\x1b]0;owned\x07.py"
    path.write_text("import torch\nscaler = torch.cuda.amp.GradScaler()  # \u202e\x1b[2J\x9b2J )\n")
    res = runner.invoke(app, ["lint", str(path)])
    assert res.exit_code in (0, 1), res.output
    assert UNSAFE_IN_A_LINE.search(res.stdout) is None, ascii(res.stdout)
    assert "train\\x1b]0;owned\\x07.py:2:" in res.stdout and "\\u202e\\x1b[2J\\x9b2J" in res.stdout
    res = runner.invoke(app, ["lint", str(path), "--json"])
    assert json.loads(res.stdout)["findings"][0]["path"] == str(path)      # --json unchanged


def test_lint_shows_a_tab_indented_code_line_as_spaces_not_escapes(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("import torch\nif True:\n\tscaler = torch.cuda.amp.GradScaler()\t# old AMP\n")
    res = runner.invoke(app, ["lint", str(path)])
    assert "GradScaler()    # old AMP" in res.stdout and "\\x09" not in res.stdout, res.stdout


def test_a_note_quoting_a_file_name_shows_it_escaped(tmp_path):
    res = runner.invoke(app, ["doctor", "--facts", str(tmp_path / "no\u202eexist\x1b[2J.json")])
    assert res.exit_code == 2
    assert UNSAFE_IN_A_LINE.search(res.stderr) is None and "no\\u202eexist\\x1b[2J.json" in res.stderr
