"""debtorch fleet without launching anything: saved documents compared, the findings each
difference gives (and the clean case), bad documents, the report's length at scale, the
rendezvous read from launcher variables, the probe's plan and verdict, the command's exit codes.
The gathered mode under torchrun is tests/test_fleet_gather.py."""

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from debtorch.cli import app
from debtorch.doctor import Context, diagnose
from debtorch.fleet import compare, offline, probe
from debtorch.report import fleet as report
from debtorch.report.console import texts
from debtorch.fleet import torchside
from debtorch.fleet.nodes import STATUSES, Node, encode, envelope, read_node
from debtorch.fleet.rendezvous import RendezvousError, from_environ
from debtorch.report.doctor import MARKS_ASCII
from hostkit import facts_of, make_host

SERVER = "debian12-server-8xa100-nvlink"


@pytest.fixture(scope="module")
def server_doc(tmp_path_factory):
    return facts_of(make_host(tmp_path_factory.mktemp("srv"), base=SERVER))


def write_docs(folder, docs: dict):
    folder.mkdir(parents=True, exist_ok=True)
    for name, doc in docs.items():
        (folder / f"{name}.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return folder


def four(doc, change=None):
    """Four copies of ``doc`` named n1..n4; ``change`` mutates the copy n4."""
    docs = {f"n{i}": copy.deepcopy(doc) for i in range(1, 5)}
    if change:
        change(docs["n4"])
    return docs


def fleet_ids(summary):
    return {(f.id, f.finding.about) for f in summary.findings}


def set_in(path, value):
    def change(doc):
        cur = doc
        *parts, last = path.split(".")
        for p in parts:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        cur[last] = value
    return change


def iface(name, key, value):
    def change(doc):
        for i in doc["network"]["interfaces"]:
            if i["name"] == name:
                i[key] = value
    return change


def gpu_names(value):
    def change(doc):
        for g in doc["nvidia"]["gpus"]:
            g["name"] = value
    return change


def env(**variables):
    def change(doc):
        doc["env"]["variables"].update(variables)
    return change


# One injected difference per finding: (id(s) the fleet adds over four identical nodes, change).
DIFFERENCES = {
    "torch": ({"fleet.E005"}, set_in("python.torch.version", "2.5.1+cu124")),
    "nccl": ({"fleet.E006"}, set_in("python.torch.nccl_wheel", "2.21.5")),
    "gpu count": ({"fleet.E007", "fleet.W007"}, env(CUDA_VISIBLE_DEVICES="0,1,2,3")),
    "driver": ({"fleet.W001"}, set_in("nvidia.driver_version", "535.129.03")),
    "cudnn": ({"fleet.W002"}, set_in("python.torch.cudnn_wheel", "9.5.1.17")),
    "cuda runtime": ({"fleet.W003"}, set_in("python.torch.cuda_runtime_wheel", "12.1.999")),
    "kernel": ({"fleet.W004"}, set_in("os.kernel", "6.1.0-31-amd64")),
    "python": ({"fleet.W005"}, set_in("python.version", "3.11.9")),
    "gpu models": ({"fleet.W006"}, gpu_names("NVIDIA A100-SXM4-40GB")),
    "nccl variable": ({"fleet.W007"}, env(NCCL_IB_HCA="mlx5_1")),
    "shm": ({"fleet.W008"}, set_in("memory.shm_total", 64 * 2 ** 30)),
    "memlock": ({"fleet.W009"}, set_in("memory.memlock_soft", 65536)),
    # 20 CPUs are fewer than OMP_NUM_THREADS=5 x 8 GPU processes: that node's doctor says so too.
    "usable cpus": ({"fleet.W010", "fleet.W015"}, set_in("cpu.usable_cpus", 20)),
    "mtu": ({"fleet.W012"}, iface("ib0", "mtu", 2044)),
    "ib rate": ({"fleet.W013"}, set_in("network.infiniband.0.rate_gbps", 100.0)),
    "ofed": ({"fleet.W014"}, set_in("network.ofed_version", "5.8-1.0.1.1")),
    "doctor error on one node": ({"fleet.W008", "fleet.E009"}, set_in("memory.shm_total", 64 * 2 ** 20)),
    "doctor warning on one node": ({"fleet.W015"}, set_in("cpu.governor", "powersave")),
    "debtorch version": ({"fleet.I001"}, set_in("debtorch_version", "0.0.9")),
}


@pytest.mark.parametrize("name", sorted(DIFFERENCES))
def test_each_difference_gives_its_finding_naming_the_odd_node(tmp_path, server_doc, name):
    expected, change = DIFFERENCES[name]
    base = offline.from_files([str(write_docs(tmp_path / "same", four(server_doc)))])
    odd = offline.from_files([str(write_docs(tmp_path / "odd", four(server_doc, change)))])
    added = fleet_ids(odd) - fleet_ids(base)
    assert {i for i, _ in added} == expected
    for f in odd.findings:
        if (f.id, f.finding.about) in added and f.id.startswith("fleet.") and f.id not in ("fleet.E009", "fleet.W015"):
            assert [g.nodes for g in f.groups] == [("n1", "n2", "n3"), ("n4",)]
    assert [names for names, _ in odd.identical] == [["n1", "n2", "n3"], ["n4"]]


def test_identical_nodes_give_no_consistency_or_network_finding(tmp_path, server_doc):
    s = offline.from_files([str(write_docs(tmp_path, four(server_doc)))])
    assert not [f for f in s.findings if f.section in ("consistency", "network", "nodes")]
    assert s.identical == [(["n1", "n2", "n3", "n4"], [])]


def test_an_ifname_missing_on_one_node_is_fleet_E008_not_repeated_by_the_doctor(tmp_path, server_doc):
    doc = copy.deepcopy(server_doc)
    doc["env"]["variables"]["NCCL_SOCKET_IFNAME"] = "=ib0"
    docs = four(doc, iface("ib0", "name", "ibp65s0"))     # that node's HCA interface has another name
    s = offline.from_files([str(write_docs(tmp_path, docs))])
    e008 = [f for f in s.findings if f.id == "fleet.E008"]
    assert len(e008) == 1 and list(e008[0].groups) == [
        compare.Group("NCCL_SOCKET_IFNAME==ib0: usable", ("n1", "n2", "n3")),
        compare.Group("NCCL_SOCKET_IFNAME==ib0: matches no interface", ("n4",))]
    assert not [f for f in s.findings if f.finding.about in ("network.E001", "network.E002")]
    same = offline.from_files([str(write_docs(tmp_path / "same", four(doc)))])
    assert not [f for f in same.findings if f.id == "fleet.E008"]


def test_bad_documents_are_named_and_the_others_still_compared(tmp_path, server_doc):
    other_schema = dict(copy.deepcopy(server_doc), schema_version=2)
    found = [f.to_json() for f in diagnose(server_doc, Context(source="facts")).findings]
    doctor_doc = {"schema_version": 1, "findings": found, "facts": server_doc}
    env_doc = envelope(server_doc, found, 3, "n3", "0.1.0")
    docs = {"n1": server_doc, "n2": doctor_doc, "n3": json.dumps(env_doc), "bad": "{not json",
            "array": "[1, 2]", "new": other_schema, "sectionless": {"schema_version": 1, "cpu": 5}}
    s = offline.from_files([str(write_docs(tmp_path, docs))])
    status = {n.name: n.status for n in s.nodes}
    assert status == {"n1": "ok", "n2": "ok", "n3": "ok", "bad": "malformed", "array": "malformed",
                      "new": "schema", "sectionless": "malformed"}
    ids = {f.id for f in s.findings if f.section == "nodes"}
    assert ids == {"fleet.E003", "fleet.E004"}
    assert s.identical[0][0] == ["n1", "n2", "n3"]
    assert s.exit_code() == 1


@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
@settings(deadline=None)
def test_reading_any_text_as_a_node_never_raises(text):
    node = read_node(text, "x", compare.read)
    assert node.status in STATUSES


def test_a_document_survives_the_wire(server_doc):
    data = encode(envelope(server_doc, [{"id": "x.W001", "level": "warning", "message": "m"}], 2, "gpu9", "0.1.0"))
    assert json.loads(torchside.inflate(data, torchside.MAX_DOC))["facts"] == server_doc


def test_a_thousand_nodes_make_a_short_report():
    def node(i, torch="2.5.1 (CUDA 12.4)"):
        values = {a.key: None for a in compare.ASPECTS}
        values.update(torch=torch, driver="550.54.15", env={"NCCL_DEBUG": "WARN"})
        return Node(name=f"gpu{i:04d}", rank=i, values=values)

    nodes = [node(i) for i in range(1000)]
    nodes[7] = node(7, torch="2.4.0 (CUDA 12.1)")
    nodes[500] = node(500, torch="2.4.0 (CUDA 12.1)")
    s = compare.summarise(nodes)
    text = texts(report.lines(s, MARKS_ASCII))
    assert len(text) < 20
    assert "  998 identical: gpu[0000-0006,0008-0499,0501-0999]" in text
    assert any("gpu[0007,0500]" in line for line in text)


# ---------------------------------------------------------------- the rendezvous


def test_torchrun_variables():
    r = from_environ({"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "n1", "MASTER_PORT": "29400",
                      "TORCHELASTIC_RUN_ID": "job7", "TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert (r.rank, r.world, r.addr, r.port, r.launcher, r.agent_store) == (3, 4, "n1", 29400, "torchrun", True)
    assert r.prefix == "debtorch-fleet/job7/0/"


def test_slurm_variables_put_rank_0_on_the_first_node_and_the_port_on_the_job():
    r = from_environ({"SLURM_PROCID": "1", "SLURM_NTASKS": "3", "SLURM_STEP_NODELIST": "gpu[07-09]",
                      "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "2"})
    assert (r.rank, r.world, r.addr, r.port, r.agent_store) == (1, 3, "gpu07", 20000 + 123456 % 20000, False)
    assert r.name_of(2) == "gpu09" and r.prefix == "debtorch-fleet/123456.2/"


@pytest.mark.parametrize("environ, words", [
    ({"RANK": "0"}, "set together"),
    ({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "a"}, "outside"),
    ({"RANK": "x", "WORLD_SIZE": "4"}, "not a number"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "70000"}, "TCP port"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "MASTER_ADDR"),
])
def test_bad_rendezvous_variables_are_one_line(environ, words):
    with pytest.raises(RendezvousError, match=words):
        from_environ(environ)
    assert from_environ({"PATH": "/bin"}) is None


# ---------------------------------------------------------------- the probe


@given(st.integers(min_value=0, max_value=40))
def test_round_robin_meets_every_pair_once_and_each_rank_once_per_round(world):
    sched = probe.rounds(world)
    seen = [tuple(p) for r in sched for p in r]
    assert len(seen) == len(set(seen)) == world * (world - 1) // 2
    for r in sched:
        ranks = [x for p in r for x in p]
        assert len(ranks) == len(set(ranks))


@given(st.integers(min_value=1, max_value=2000), st.floats(min_value=probe.MIN_BUDGET_S, max_value=3600))
@settings(max_examples=50, deadline=None)
def test_the_plan_fits_the_budget(world, budget):
    p = probe.plan(world, budget, gpu=False)
    assert p["compute_s"] + p["round_s"] * len(p["rounds"]) <= budget


def _result(rank, gflops, pairs):
    return {"rank": rank, "compute": {"gflops": gflops},
            "pairs": [{"partner": b, "busbw_gbs": bw} for b, bw in pairs]}


def test_a_slow_rank_is_named_and_excluded_a_healthy_one_is_not():
    names = {r: f"n{r}" for r in range(4)}
    bw = {(0, 1): 10.0, (0, 2): 10.0, (0, 3): 4.0, (1, 2): 10.0, (1, 3): 4.0, (2, 3): 4.0}
    results = {r: _result(r, 50.0 if r != 3 else 20.0,
                          [(b if a == r else a, v) for (a, b), v in bw.items() if r in (a, b)]) for r in range(4)}
    v = probe.judge(results, names, 4, 30.0)
    assert [s.verdict for s in v.scores] == ["ok", "ok", "ok", "slow compute"]
    assert v.exclude == ["n3"] and [f.id for f in v.findings] == ["fleet.W016"]


def test_a_node_slow_with_every_partner_is_named_one_fast_partner_clears_it():
    names = {r: f"n{r}" for r in range(4)}

    def verdict(bw):
        results = {r: _result(r, 50.0, [(b if a == r else a, v) for (a, b), v in bw.items() if r in (a, b)])
                   for r in range(4)}
        return probe.judge(results, names, 4, 30.0)

    v = verdict({(0, 1): 10.0, (0, 2): 10.0, (0, 3): 5.0, (1, 2): 10.0, (1, 3): 5.0, (2, 3): 5.0})
    assert [f.id for f in v.findings] == ["fleet.W017"] and v.exclude == ["n3"]
    v = verdict({(0, 1): 10.0, (0, 2): 10.0, (0, 3): 9.0, (1, 2): 10.0, (1, 3): 5.0, (2, 3): 5.0})
    assert v.exclude == [] and "fleet.W017" not in [f.id for f in v.findings]


def test_a_slow_link_names_the_pair_and_a_silent_rank_fails():
    names = {r: f"n{r}" for r in range(4)}
    bw = {(0, 1): 4.0, (0, 2): 10.0, (0, 3): 10.0, (1, 2): 10.0, (1, 3): 10.0, (2, 3): 10.0}
    results = {r: _result(r, 50.0, [(b if a == r else a, v) for (a, b), v in bw.items() if r in (a, b)])
               for r in range(4)}
    v = probe.judge(results, names, 4, 30.0)
    assert [f.id for f in v.findings] == ["fleet.W018"] and v.findings[0].groups[0].nodes == ("n0", "n1")
    assert v.exclude == []
    del results[2]
    v = probe.judge(results, names, 4, 30.0)
    assert "fleet.E010" in [f.id for f in v.findings] and v.exclude == ["n2"]


# ---------------------------------------------------------------- the command


def test_offline_exit_codes_and_json(tmp_path, server_doc):
    same = write_docs(tmp_path / "same", four(server_doc))
    odd = write_docs(tmp_path / "odd", four(server_doc, set_in("python.torch.version", "2.5.1+cu124")))
    runner = CliRunner()
    assert runner.invoke(app, ["fleet", str(same)]).exit_code == 0
    res = runner.invoke(app, ["fleet", str(same), "--fail-on", "warning"])
    assert res.exit_code == 1 and "fleet.W015" in res.output        # the server's own doctor warnings
    res = runner.invoke(app, ["fleet", str(odd), "--json"])
    out = json.loads(res.output)
    assert res.exit_code == 1 and out["exit_code"] == 1 and out["schema_version"] == 1
    torch = next(f for f in out["findings"] if f["id"] == "fleet.E005")
    assert [g["nodes"] for g in torch["groups"]] == ["n[1-3]", "n4"]
    res = runner.invoke(app, ["fleet", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "no such file or folder" in res.output


def test_offline_refuses_live_options_and_gathering_needs_a_launcher(tmp_path, server_doc, monkeypatch):
    same = write_docs(tmp_path, four(server_doc))
    runner = CliRunner()
    assert runner.invoke(app, ["fleet", str(same), "--probe"]).exit_code == 2
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    res = runner.invoke(app, ["fleet"])
    assert res.exit_code == 2 and "srun or torchrun" in res.output
    monkeypatch.setenv("RANK", "0")
    res = runner.invoke(app, ["fleet"])
    assert res.exit_code == 2 and "RANK and WORLD_SIZE" in res.output


def test_redact_hides_node_names_and_addresses(tmp_path, server_doc):
    docs = four(server_doc, iface("ib0", "mtu", 2044))
    docs = {f"gpu-node-{k}": v for k, v in docs.items()}
    docs["gpu-node-n4"]["env"]["variables"]["MASTER_ADDR"] = "10.20.0.1"
    res = CliRunner().invoke(app, ["fleet", str(write_docs(tmp_path, docs)), "--redact", "--json"])
    assert "gpu-node" not in res.output and "10.20.0.1" not in res.output
    assert "HOST" in res.output


def test_tuned_config_for_another_machine_is_fleet_W011(tmp_path, server_doc):
    runner = CliRunner()
    facts_file = tmp_path / "facts.json"
    facts_file.write_text(json.dumps(server_doc))
    cfg = tmp_path / "debtorch.toml"
    assert runner.invoke(app, ["tune", "--facts", str(facts_file), "--write", str(cfg)]).exit_code == 0
    docs = write_docs(tmp_path / "docs", four(server_doc, set_in("cpu.usable_cpus", 20)))
    res = runner.invoke(app, ["fleet", str(docs), "--tuned", str(cfg), "--json"])
    w011 = [f for f in json.loads(res.output)["findings"] if f["id"] == "fleet.W011"]
    assert len(w011) == 1 and w011[0]["groups"][-1]["nodes"] == "n4"
    same = write_docs(tmp_path / "same", four(server_doc))
    res = runner.invoke(app, ["fleet", str(same), "--tuned", str(cfg), "--json"])
    assert not [f for f in json.loads(res.output)["findings"] if f["id"] == "fleet.W011"]
    res = runner.invoke(app, ["fleet", str(same), "--tuned", str(tmp_path / "none.toml")])
    assert res.exit_code == 2 and "--tuned" in res.output

