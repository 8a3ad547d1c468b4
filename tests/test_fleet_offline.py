"""debtorch fleet on saved documents, as a new user meets it (issue 34, item 8): only node documents
are nodes (a `tune --json` report in the folder is skipped and named, not a node called "tune"), and
a node doctor's finding shows the fix the node's doctor gave."""

import copy
import json

import pytest
from clitools import cli_runner, said
from hostkit import facts_of, make_host
from test_fleet import four, write_docs

from debtorch.cli import app
from debtorch.doctor import Context, diagnose

SERVER = "debian12-server-8xa100-nvlink"


@pytest.fixture(scope="module")
def server_doc(tmp_path_factory):
    return facts_of(make_host(tmp_path_factory.mktemp("srv"), base=SERVER))


def test_a_tune_report_in_the_folder_is_skipped_and_named_not_a_node(tmp_path, server_doc):
    folder = write_docs(tmp_path / "docs", four(server_doc))
    (tmp_path / "facts.json").write_text(json.dumps(server_doc))
    runner = cli_runner()
    res = runner.invoke(app, ["tune", "--facts", str(tmp_path / "facts.json"), "--json"])
    (folder / "tune.json").write_text(res.stdout)
    res = runner.invoke(app, ["fleet", str(folder)])
    assert res.exit_code == 0, said(res)
    assert "4 nodes expected, 4 compared" in said(res) and "tune" not in said(res).split("skipped")[0]
    note = next(line for line in said(res).splitlines() if "skipped" in line)
    assert note.startswith(f"debtorch fleet: skipped {folder / 'tune.json'}: not a node's 'debtorch facts --json' "
                           "or 'doctor --json' document (it has ")
    assert "settings" in note
    out = json.loads(runner.invoke(app, ["fleet", str(folder), "--json"]).stdout)
    assert out["nodes"]["expected"] == 4 and [x["path"] for x in out["skipped"]] == [str(folder / "tune.json")]
    assert "skipped" not in json.loads(runner.invoke(app, ["fleet", str(tmp_path / "facts.json"), "--json"]).stdout)


def test_a_folder_of_no_node_documents_is_bad_input(tmp_path):
    (tmp_path / "a.json").write_text('{"schema_version": 1, "settings": {}, "env": {}}')
    res = cli_runner().invoke(app, ["fleet", str(tmp_path)])
    assert res.exit_code == 2 and "no node documents to compare" in said(res)


def test_a_broken_node_document_is_still_its_node_not_skipped(tmp_path, server_doc):
    docs = four(server_doc)
    docs["n4"] = "{not json"
    docs["n5"] = {"schema_version": 1, "cpu": 5}
    out = json.loads(cli_runner().invoke(app, ["fleet", str(write_docs(tmp_path, docs)), "--json"]).stdout)
    assert {n["name"]: n["status"] for n in out["nodes"]["not_compared"]} == {"n4": "malformed", "n5": "malformed"}
    assert "skipped" not in out


def test_a_node_doctor_finding_shows_the_fix_its_doctor_gave(tmp_path, server_doc):
    docs = four(server_doc)
    docs["n4"]["cpu"]["governor"] = "powersave"
    mine = next(f for f in diagnose(copy.deepcopy(docs["n4"]), Context(source="facts")).findings if f.id == "cpu.W001")
    doctor_docs = {name: {"schema_version": 1, "findings": [f.to_json() for f in diagnose(
        copy.deepcopy(doc), Context(source="facts")).findings], "facts": doc} for name, doc in docs.items()}
    folder = write_docs(tmp_path, doctor_docs)
    res = cli_runner().invoke(app, ["fleet", str(folder), "--fail-on", "warning"])
    first, *rest = mine.fix.splitlines()
    assert f"      fix: {first}" in said(res)
    assert all(f"           {line}" in said(res) for line in rest)
    assert "debtorch doctor on one of them shows the fix" not in said(res)
    out = json.loads(cli_runner().invoke(app, ["fleet", str(folder), "--json"]).stdout)
    w015 = next(f for f in out["findings"] if f["about"] == "cpu.W001")
    assert w015["fix"] == mine.fix and w015["groups"][0]["fix"] == mine.fix


def test_nodes_whose_doctors_give_other_fixes_are_told_so(tmp_path, server_doc):
    docs = {}
    for i in range(3):
        doc = copy.deepcopy(server_doc)
        docs[f"n{i}"] = {"schema_version": 1, "facts": doc, "findings": [
            {"id": "cpu.W001", "level": "warning", "message": "governor is powersave",
             "fix": "fix A" if i < 2 else "fix B"}]}
    out = said(cli_runner().invoke(app, ["fleet", str(write_docs(tmp_path, docs)), "--fail-on", "warning"]))
    assert "      fix: fix A\n           (on 1 node the doctor gives another fix: --json lists each)" in out
    out = json.loads(cli_runner().invoke(app, ["fleet", str(tmp_path), "--json"]).stdout)
    w015 = next(f for f in out["findings"] if f["about"] == "cpu.W001")
    assert [(g["nodes"], g["fix"]) for g in w015["groups"]] == [("n[0-1]", "fix A"), ("n2", "fix B")]
