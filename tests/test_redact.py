"""--redact: no identifying value survives in either view; versions do."""

import json
import os
import re

from clitools import HOSTS, cli_runner
from hostkit import make_host
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from debtorch.cli import app
from debtorch.report.redact import Redactor

runner = CliRunner()

SECRETS = ["gpu-node-17.example.org", "gpu-node-17", "alice", "10.20.30.40", "fe80::1234:5678",
           "GPU-5b6c1a2e-9f3d-4c1e-8a7b-0123456789ab", "00:1b:21:3a:4f:5e"]


def secret_host(tmp_path, replay):
    import json as _json
    base = replay("debian12-vm-2core")
    light = _json.loads(base.run(["x"], key=f"{base.default_python} <probe:light>").stdout)
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


# ---------------------------------------------------------------------------
# Every field kind in every output a user may share (issue 13, item 10)

PLANTED = {
    "host (FQDN and short)": ["nas-head-3.corp.example", "nas-head-3"],
    "user (any case)": ["alice", "ALICE"],
    "home path": ["/home/alice"],
    "GPU UUID": ["19d6d965-2acc-f646-00f8-4c76979aabb4"],
    "MAC (colons, dashes)": ["00:1b:21:3a:4f:5e", "00-1B-21-3A-4F-5F"],
    "IPv4": ["10.20.30.40", "10.9.8.7"],
    "IPv6": ["fe80::1234:5678"],
    "NFS server": ["filer9.storage.example", "filer9"],
    "URL credentials": ["s3cr3t-token"],
}
SECRET_VALUES = [v for values in PLANTED.values() for v in values]
ENVIRON = {"MASTER_ADDR": "10.20.30.40", "NCCL_COMM_ID": "[fe80::1234:5678]:29500",
           "NCCL_DEBUG_SUBSYS": "00:1b:21:3a:4f:5e", "NCCL_IB_HCA": "mlx5_0,00-1B-21-3A-4F-5F",
           "PIP_INDEX_URL": "https://alice:s3cr3t-token@pypi.corp.example/simple"}
# Where only a learned name (the user's) tells it is an identifier: a replayed machine's user.
NAMED = {"TORCH_HOME": "/scratch/ALICE/torch", "VIRTUAL_ENV": "/home/alice/venvs/torch"}


def planted_host(tmp_path):
    """The RTX 3080 workstation (a GPU with its UUID), with an identifier of every kind planted."""
    base = make_host(tmp_path, base="debian13-workstation-rtx3080", name="base")
    light = json.loads(base.run(["x"], key=next(k for k in base.meta["commands"] if k.endswith("<probe:light>"))).stdout)
    light.update(executable="/home/alice/venvs/torch/bin/python", prefix="/home/alice/venvs/torch")
    mountinfo = (base.root / "proc/self/mountinfo").read_text() if (base.root / "proc/self/mountinfo").exists() else ""
    return make_host(tmp_path, base="debian13-workstation-rtx3080", files={
        "/proc/sys/kernel/hostname": "nas-head-3.corp.example\n",
        "/proc/self/mountinfo": mountinfo + "90 1 0:52 / /data rw,relatime shared:40 - nfs4 "
                                "filer9.storage.example:/export/alice rw,vers=4.2,addr=10.9.8.7\n",
        "/data/alice/shard-0": "x"},
        meta={"user": "alice", "python": "/home/alice/venvs/torch/bin/python", "environ": {**ENVIRON, **NAMED},
              "statvfs": {"/data/alice": {"total": 10**12, "free": 10**11, "used": 9 * 10**11}}},
        commands={"/home/alice/venvs/torch/bin/python <probe:light>": json.dumps(light)})


srunner = cli_runner()   # stdout and stderr apart, on click 8.1 (Debian 12) and 8.2+


def said(res) -> str:
    """Everything a command printed, report and notes."""
    return res.stdout + res.stderr


def leaked(text: str) -> list:
    low = text.lower()
    return [kind for kind, values in PLANTED.items() if any(v.lower() in low for v in values)]


def _outputs(host_dir):
    d = str(host_dir)
    data = ["--data", "/data/alice"]
    return {
        "facts": ["facts", "--host", d, *data], "facts --json": ["facts", "--host", d, "--json", *data],
        "doctor -v": ["doctor", "--host", d, "-v", *data], "doctor --json": ["doctor", "--host", d, "--json", *data],
        "tune": ["tune", "--host", d], "tune --json": ["tune", "--host", d, "--json"],
        "tune --emit env": ["tune", "--host", d, "--emit", "env"],
    }


def test_every_planted_identifier_is_in_the_plain_outputs_and_in_none_redacted(tmp_path):
    host = planted_host(tmp_path)
    seen = set()
    for name, args in _outputs(host.root).items():
        plain = srunner.invoke(app, args)
        seen.update(leaked(said(plain)))
        red = srunner.invoke(app, [*args, "--redact"])
        assert red.exit_code == plain.exit_code, (name, said(red))
        assert leaked(said(red)) == [], (name, leaked(said(red)))
        if "--json" in args:
            json.loads(red.stdout)   # still a document
    # The planted values really reach the outputs (the test can fail).
    assert seen == set(PLANTED), set(PLANTED) - seen


def test_verify_train_json_and_text_are_redacted(tmp_path, monkeypatch):
    """verify-train's document carries the machine's facts, the config's path and the worker's paths."""
    from debtorch.facts import collect
    from debtorch.verify import run
    from debtorch.verify.measure import Measured

    facts = collect(planted_host(tmp_path))
    m = Measured(plan={"python": "/home/alice/venvs/torch/bin/python", "cwd": "/home/alice/proj"},
                 workload={"name": "train:make", "file": "/home/alice/proj/train.py"}, device="cpu")

    class Ready:
        warnings = ["/home/alice/proj/debtorch.toml was tuned on another machine: host nas-head-3"]

        def __init__(self):
            self.facts = facts

        def run(self, progress, warn):
            from debtorch.verify import analysis
            summary = analysis.summary(m)
            return run.Outcome(m, summary, "no speed-up measured", self.warnings,
                               {"source": "config", "path": "/home/alice/proj/debtorch.toml"}, facts)

    monkeypatch.setattr(run, "prepare", lambda options, host: Ready())
    for args in (["--json"], []):
        plain = srunner.invoke(app, ["verify-train", *args])
        red = srunner.invoke(app, ["verify-train", "--redact", *args])
        assert leaked(said(plain)) and leaked(said(red)) == [], (args, leaked(said(red)))
    # A refusal's document (--json) carries the facts too.
    def refuse(options, host):
        raise run.Refused("cannot import train (from train:make): No module named 'train' in /home/alice/proj")
    monkeypatch.setattr(run, "prepare", refuse)
    red = srunner.invoke(app, ["verify-train", "--json", "--redact"])
    assert red.exit_code == 2 and leaked(said(red)) == [] and json.loads(red.stdout)["failure"]["kind"] == "refused"


def test_lint_names_no_user_in_its_paths(tmp_path):
    script = tmp_path / "home" / "alice" / "train.py"
    script.parent.mkdir(parents=True)
    script.write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\nMASTER = '10.20.30.40'\n")
    for args in (["--json"], []):
        plain = srunner.invoke(app, ["lint", str(script), *args])
        assert "/home/alice/train.py" in said(plain)
        red = srunner.invoke(app, ["lint", str(script), "--redact", *args])
        assert "alice" not in said(red) and "/home/USER1/train.py" in said(red), said(red)


def test_redactor_kinds_one_by_one():
    r = Redactor()
    r.learn({"os": {"hostname": "Gpu-Node-17.Example.org", "user": "alice"},
             "storage": {"data": {"source": "filer9:/export/x", "fstype": "nfs"}}})
    text = r.text("GPU-NODE-17 ALICE /home/Alice mac 00-1B-21-3A-4F-5E and 00:1b:21:3a:4f:5e "
                  "filer9:/export/x nas.example.com:/vol https://bob:pw@index.example/simple")
    for secret in ("gpu-node-17", "alice", "1b-21", "1b:21", "filer9", "nas.example.com", "bob", "pw@"):
        assert secret not in text.lower(), (secret, text)
    assert text.count("MAC1") == 2   # the same address written two ways is one token


def test_a_redacted_recording_has_no_identifier_and_still_replays(tmp_path, monkeypatch):
    """facts --record --redact on the live machine: the recording itself is what users attach."""
    for name, value in ENVIRON.items():
        monkeypatch.setenv(name, value)
    dest = tmp_path / "rec"
    res = srunner.invoke(app, ["facts", "--record", str(dest), "--redact", "--json"])
    assert res.exit_code == 0, said(res)
    live_host = open("/proc/sys/kernel/hostname").read().strip()
    texts = []
    for path in dest.rglob("*"):
        texts.append(str(path.relative_to(dest)))
        if path.is_symlink():
            texts.append(os.readlink(path))
        elif path.is_file():
            texts.append(path.read_text(errors="replace"))
    everything = "\n".join(texts)
    assert [v for v in ENVIRON.values() if v.lower() in everything.lower()] == []
    assert "s3cr3t-token" not in everything and "10.20.30.40" not in everything
    assert not re.search(rf"(?<![\w-]){re.escape(live_host)}(?![\w-])", everything, re.I), live_host
    assert (dest / "proc/sys/kernel/hostname").read_text().strip() == "HOST1"
    replayed = srunner.invoke(app, ["doctor", "--host", str(dest), "--json"])
    assert replayed.exit_code in (0, 1) and json.loads(replayed.stdout)["facts"]["os"]["hostname"] == "HOST1"


# ---------------------------------------------------------------------------
# A name is replaced where it stands as that name, never inside the reports' vocabulary (issue 34, item 1):
# the Debian installer names a machine "debian", cloud images "vm" or "ubuntu".

WORD_HOSTS = ("debian12-vm-2core", "debian13-workstation-rtx3080", "debian12-server-8xa100-nvlink",
              "debian12-container-t4-shm64m", "debian12-nouveau-gtx1070ti", "debian12-driver-mismatch-rtx3090")


def _strings(obj, key: str = "", out=None) -> list:
    """Every (string, is a name's own field) of a JSON document, keys included, as Redactor.walk sees them."""
    from debtorch.report.redact import SECRET_KEYS

    out = [] if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((k, False))
            _strings(v, k, out)
    elif isinstance(obj, list):
        for v in obj:
            _strings(v, key, out)
    elif isinstance(obj, str):
        out.append((obj, bool(SECRET_KEYS.get(key) or SECRET_KEYS.get(key.lower()))))
    return out


def test_a_host_named_after_any_word_of_its_reports_keeps_that_word(tmp_path):
    """Every word the reports of a fixture machine contain (facts, doctor -v, tune; text and JSON), taken
    as the host name in turn: the redacted reports are the same as with a name no report contains, but
    for the host name's own field.  (Not tested: words made only of a single letter, the redactor's own
    tokens, root and localhost, which are never taken for names; words only in environment variables,
    which may name hosts under any key and are replaced there; a number the text view prints with a unit
    letter, PCIe "gen1 x4".)"""
    from debtorch.report.redact import words

    for name in WORD_HOSTS:
        d = str(HOSTS / name)
        texts = [srunner.invoke(app, [*args, "--host", d]).stdout for args in (["facts"], ["doctor", "-v"], ["tune"])]
        docs = [json.loads(srunner.invoke(app, [*args, "--host", d, "--json"]).stdout)
                for args in (["facts"], ["doctor"], ["tune"])]
        facts = docs[0]
        own = facts["os"]["hostname"]
        strings = {(line, False) for text in texts for line in text.splitlines()}
        strings |= {x for doc in docs for x in _strings(doc)}
        strings = [(s, named, s.lower()) for s, named in strings if s != own]
        learned = Redactor()
        learned.learn({k: v for k, v in facts.items() if k != "os"} | {"os": {**facts["os"], "hostname": ""}})

        def redactor(host_name: str) -> Redactor:
            """What learning these facts with ``host_name`` for the host name gives (learned once)."""
            r = Redactor(vocabulary=learned.vocabulary)
            r.tokens, r.kinds, r.counters = dict(learned.tokens), dict(learned.kinds), dict(learned.counters)
            r.versions = learned.versions
            r.secret("HOST", host_name)
            return r

        neutral = redactor("zqx-no-report-says-this")
        assert neutral.tokens["zqx-no-report-says-this"] == "HOST1"
        expected = {(s, named): neutral.text(s, named) for s, named, _ in strings}
        said = set().union(*(words(text) for text in expected.values()))
        env = set().union(*(words(v) for v in (facts.get("env") or {}).get("variables", {}).values()))
        json_words = set().union(*(words(s) for doc in docs for s, _ in _strings(doc)))
        tokens = {t.lower() for t in neutral.tokens.values()}
        unit = re.compile(r"[a-z]+\d+")
        candidates = [w for w in sorted(said) if w[0].isalpha() and len(w) > 1 and w not in tokens | env
                      and w not in (own, "root", "localhost") and not (unit.fullmatch(w) and w not in json_words)]
        assert {"debian", "nvidia", "cuda", "main", "vm", "amd64", "bookworm"} & set(candidates)
        changed = []
        r = neutral   # as learned, with the shapes its texts met (UUID1 ...); the host name swapped for each word
        tokens_but_name = {k: v for k, v in neutral.tokens.items() if v != "HOST1"}
        for word in candidates:
            r.tokens, r.kinds = {**tokens_but_name, word: "HOST1"}, {**neutral.kinds, word: "HOST"}
            assert r.walk({"os": {"hostname": word}}) == {"os": {"hostname": "HOST1"}}
            for s, named, low in strings:
                if word in low and r.text(s, named) != expected[s, named]:
                    changed.append((name, word, s[:100]))
                    break
        assert changed == [], changed[:10]


def test_a_machine_named_debian_or_vm_keeps_its_os_and_its_words_in_every_view(tmp_path):
    """doctor --redact on a machine named after its OS: Debian stays Debian, in the text, in the JSON
    (os.id, the APT address) and in the doctor's verdict on that JSON; only the name is replaced."""
    for hostname, kept in (("debian", ["Debian GNU/Linux 12 (bookworm)", "deb.debian.org/debian"]),
                           ("vm", ["(a VM, or the driver is not loaded)"])):
        host = make_host(tmp_path, files={"/proc/sys/kernel/hostname": f"{hostname}\n"}, name=hostname)
        text = srunner.invoke(app, ["doctor", "--host", str(host.root), "-v", "--redact"]).stdout
        facts_text = srunner.invoke(app, ["facts", "--host", str(host.root), "--redact"]).stdout
        doc = json.loads(srunner.invoke(app, ["doctor", "--host", str(host.root), "--json", "--redact"]).stdout)
        assert "HOST1" not in text + facts_text, hostname
        assert doc["facts"]["os"]["hostname"] == "HOST1" and doc["facts"]["os"]["id"] == "debian"
        for phrase in kept:
            assert phrase in text + facts_text + json.dumps(doc), (hostname, phrase)
        saved = tmp_path / f"{hostname}.json"
        saved.write_text(json.dumps(doc["facts"]))
        plain = json.loads(srunner.invoke(app, ["doctor", "--host", str(host.root), "--json"]).stdout)
        again = json.loads(srunner.invoke(app, ["doctor", "--facts", str(saved), "--json"]).stdout)
        assert [f["id"] for f in again["findings"]] == [f["id"] for f in plain["findings"]], hostname


def test_a_name_that_is_a_word_is_still_replaced_where_it_stands_as_a_name():
    r = Redactor()
    r.learn({"os": {"id": "debian", "hostname": "debian", "user": "main"},
             "storage": {"data": {"source": "debian:/export/x"}}})
    said = r.text("root@debian built it; debian:/export/x; //debian/share; http://debian:8080/x; "
                  "Debian GNU/Linux; deb.debian.org/debian bookworm main; /home/main/venv")
    assert said == ("root@HOST1 built it; HOST1:/export/x; //HOST1/share; http://HOST1:8080/x; "
                    "Debian GNU/Linux; deb.debian.org/debian bookworm main; /home/USER1/venv"), said
    assert r.walk({"hostname": "debian", "id": "debian", "MASTER_ADDR": "debian"}) == {
        "hostname": "HOST1", "id": "debian", "MASTER_ADDR": "HOST1"}
    assert r.recorded("debian\n") == "HOST1\n" and r.recorded("ID=debian\n") == "ID=debian\n"
    # A name that is no word of the reports is replaced wherever it is a whole token, as before.
    r.learn({"os": {"hostname": "gpu-node-17"}})
    assert r.text("gpu-node-17 ran; node gpu-node-17, not gpu-node-170") == "HOST2 ran; node HOST2, not gpu-node-170"
