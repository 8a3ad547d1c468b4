"""debtorch fleet without launching anything: saved documents compared, the findings each
difference gives (and the clean case), bad documents, the report's length at scale, the
rendezvous read from launcher variables, the probe's plan and verdict, the command's exit codes.
The gathered mode under torchrun is tests/test_fleet_gather.py."""

import copy
import json
import os
import tracemalloc
import zlib

import pytest
from hostkit import facts_of, make_host
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from debtorch import hostlist
from debtorch.cli import app
from debtorch.doctor import Context, diagnose
from debtorch.fleet import compare, gather, offline, probe, torchside
from debtorch.fleet.nodes import STATUSES, Node, encode, envelope, read_node
from debtorch.fleet.rendezvous import RendezvousError, from_environ, listen_address, load_secret
from debtorch.host import allowed_environ
from debtorch.report import fleet as report
from debtorch.report.console import texts
from debtorch.report.doctor import MARKS_ASCII

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



# ---------------------------------------------------------------- the store as an untrusted channel (issue 23)


class FakeStore:
    """What FleetSession uses of torch.distributed's store, in memory (anyone may write anything)."""

    def __init__(self):
        self.data = {}

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else bytes(value)

    def get(self, key):
        return self.data[key]

    def check(self, keys):
        return all(k in self.data for k in keys)

    def append(self, key, value):
        self.data[key] = self.data.get(key, b"") + value.encode()

    def add(self, key, n):
        self.data[key] = str(int(self.data.get(key, b"0")) + n).encode()
        return int(self.data[key])

    def wait(self, keys, timeout=None):
        if not self.check(keys):
            raise RuntimeError("wait timed out")


def session(rank=0, world=3, secret=None, store=None):
    s = torchside.FleetSession(proto=None)
    s.store, s.rank, s.world, s.prefix, s.deadline = store or FakeStore(), rank, world, "p/", 0.0
    if secret:
        s.secret, s.nonce = secret, b"n0"
    return s


def send(s, rank, node, doc=None, hello=None, value=None):
    """What rank ``rank`` does: hello, its envelope (signed when ``s`` has a secret), the arrival."""
    s.store.set(f"hello/{rank}", node if hello is None else hello)
    s.store.append("joined", f"{rank},")
    data = value if value is not None else encode(doc or {"fleet": 1, "rank": rank, "node": node, "facts": {}})
    s.store.set(f"doc/{rank}", s._seal(f"doc/{rank}", data) if value is None else data)
    s.store.append("arrived", f"{rank},")


def test_rank_0_takes_only_documents_of_ranks_in_range_that_match_their_hello(tmp_path):
    s = session(world=3)
    s.store.append("arrived", "7,100000000,-3,abc,99999999999999999999,")   # out of range: never counted
    s.store.append("joined", "2,")                                          # joined, never said hello
    send(s, 0, "gpu01")
    send(s, 1, "gpu02", doc={"fleet": 1, "rank": 2, "node": "gpu02"})      # its envelope says rank 2
    got = s.op_collect({"out_dir": str(tmp_path), "deadline_s": 0})
    assert set(got["files"]) == {0} and got["joined"] == {0: "gpu01", 1: "gpu02"}
    assert got["bad"] == {1: "its envelope (rank 2, node 'gpu02') does not match its hello (rank 1, node 'gpu02')"}
    # The real rank 1 sends again (it names itself in the list once more): its document is taken.
    send(s, 1, "gpu02")
    got = s.op_collect({"out_dir": str(tmp_path), "deadline_s": 0})
    assert set(got["files"]) == {0, 1} and got["bad"] == {}
    assert json.loads((tmp_path / "doc-1.json").read_text())["node"] == "gpu02"


def test_a_document_bomb_is_refused_a_piece_at_a_time(tmp_path):
    z = zlib.compressobj(9)
    bomb = b"".join(z.compress(b" " * 2 ** 24) for _ in range(8)) + z.flush()   # 128 MiB from about 128 KB
    s = session(world=2)
    send(s, 0, "gpu01")
    send(s, 1, "gpu02", value=bomb)
    tracemalloc.start()
    got = s.op_collect({"out_dir": str(tmp_path), "deadline_s": 0})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got["bad"] == {1: "larger than 8 MiB once decompressed"}
    assert peak < 3 * torchside.MAX_DOC, peak
    with pytest.raises(ValueError, match="not a document"):
        torchside.inflate(b"\x78garbage", 100)


def test_a_flooded_list_is_read_rank_by_rank(tmp_path):
    s = session(world=2)
    s.store.append("arrived", "0," * 100_000)
    s.store.append("joined", "junk," * 100_000)
    send(s, 0, "gpu01")
    send(s, 1, "gpu02")
    got = s.op_collect({"out_dir": str(tmp_path), "deadline_s": 0})
    assert set(got["files"]) == {0, 1} and got["joined"] == {0: "gpu01", 1: "gpu02"}
    assert s.flooded == {"arrived", "joined"}


def test_with_a_secret_only_signed_values_of_this_run_are_believed(tmp_path):
    secret = b"a secret of the fleet's ranks"
    s = session(world=4, secret=secret)
    send(s, 0, "gpu01")
    send(s, 1, "gpu02", value=encode({"fleet": 1, "rank": 1, "node": "gpu02", "facts": {}}))   # unsigned
    other_run = session(world=4, secret=secret, store=s.store)
    other_run.nonce = b"an earlier run"
    send(other_run, 2, "gpu03")                                                                # replayed
    send(session(world=4, secret=b"another secret entirely", store=s.store), 3, "gpu04")       # wrong secret
    got = s.op_collect({"out_dir": str(tmp_path), "deadline_s": 0})
    assert set(got["files"]) == {0}
    assert got["bad"] == {1: "not signed with the fleet's secret",
                          2: "its signature does not verify (another secret, another run, or altered)",
                          3: "its signature does not verify (another secret, another run, or altered)"}
    # A forged verdict is not believed: the rank waits on for rank 0's own (here: not within the time).
    s.store.set("verdict", json.dumps({"code": 0}))
    with pytest.raises(RuntimeError, match=r"rank 0 sent no verdict that verifies \(not signed"):
        session(rank=1, world=4, secret=secret, store=s.store).op_await({"key": "verdict", "timeout_s": 0.2})
    s.op_publish({"key": "verdict", "value": {"code": 1}})
    assert session(rank=1, world=4, secret=secret, store=s.store).op_await(
        {"key": "verdict", "timeout_s": 1})["value"] == {"code": 1}
    # Without a secret a signed value is not taken for plain JSON.
    with pytest.raises(RuntimeError, match="signed with a secret this rank was not given"):
        session(rank=1, world=4, store=s.store).op_await({"key": "verdict", "timeout_s": 1})


def _gathered(tmp_path, docs, bad=None, joined=None):
    files = {}
    for r, text in docs.items():
        files[str(r)] = str(tmp_path / f"doc-{r}.json")
        (tmp_path / f"doc-{r}.json").write_text(text)
    return {"files": files, "bad": bad or {}, "joined": joined if joined is not None else {str(r): f"n{r}" for r in docs}}


def test_rank_0_reads_what_arrived_a_wrong_typed_or_refused_document_is_a_node_not_a_crash(tmp_path, server_doc):
    good = json.dumps(envelope(server_doc, [], 0, "n0", "0.1.0"))
    typed = copy.deepcopy(server_doc)
    typed["network"]["infiniband"] = 5
    got = _gathered(tmp_path, {0: good, 1: json.dumps(envelope(typed, [], 1, "n1", "0.1.0"))},
                    bad={"2": "larger than 8 MiB once decompressed"},
                    joined={"0": "n0", "1": "n1", "2": "evil\x1b[2J,gpu01", "3": "n3"})
    nodes, names = gather.read_gathered(5, got, lambda r: f"rank {r}", compare.read)
    assert [(n.name, n.status) for n in nodes] == [
        ("n0", "ok"), ("n1", "malformed"), ("evil\\x1b\\x5b2J\\x2cgpu01", "malformed"), ("n3", "died"),
        ("rank 4", "missing")]
    assert nodes[1].detail == "network.infiniband: must be an array (got 5)"
    assert nodes[2].detail == "larger than 8 MiB once decompressed"
    assert not list(tmp_path.glob("doc-*.json"))   # each file is deleted once read


class _Ask:
    """A stand-in for the torch side's requests: the plan and the verdict rank 0 (or a forger) sent."""

    def __init__(self, plan, verdict):
        self.values = {"plan": plan, "verdict": verdict}
        self.ops = []

    def __call__(self, op, limit=None, **fields):
        self.ops.append(op)
        return {"value": self.values[fields["key"]]} if op == "await" else {}


@pytest.mark.parametrize("started_with_probe", [True, False])
def test_a_rank_runs_only_the_probe_it_would_plan_itself(started_with_probe):
    rdzv = from_environ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"})
    options = gather.Options(timeout=10, probe=started_with_probe, budget=10)
    forged = dict(probe.plan(2, 10, gpu=False), budget_s=500, timeout_s=500, compute_s=400)
    with pytest.raises(gather.GatherError, match="rank 0's plan is not the probe this rank was started for"):
        gather._other(_Ask(forged, {"code": 0}), rdzv, options)
    ask = _Ask(json.loads(json.dumps(probe.plan(2, 10, gpu=False))), {"code": 1})
    if started_with_probe:
        assert gather._other(ask, rdzv, options).code == 1 and "probe" in ask.ops
    else:
        with pytest.raises(gather.GatherError, match="not the probe"):
            gather._other(ask, rdzv, options)
    for verdict in ({"code": True}, {"code": 7}, ["code", 0], {"code": "0"}):
        with pytest.raises(gather.GatherError, match="unreadable verdict"):
            gather._other(_Ask({"probe": False}, verdict), rdzv, options)


def test_a_probe_result_of_any_shape_is_judged_never_raises():
    results = {0: _result(0, 100.0, [(1, 10.0)]), 1: ["not", "a", "dict"], 2: {"compute": [1], "pairs": 5},
               3: {"compute": {"gflops": -1.0}, "pairs": [{"partner": 99, "busbw_gbs": 1.0}, "x", None]}}
    v = probe.judge(results, {}, 4, 10)
    assert [s.verdict for s in v.scores][:2] == ["ok", "failed"]
    assert v.scores[3].gflops is None and v.scores[3].partners == 0


def test_every_rank_has_one_bound_whatever_the_store_says():
    assert gather.Options(timeout=60).bound_s == 2 * 60 + 90
    assert gather.Options(timeout=60, probe=True, budget=30).bound_s == 2 * 60 + 90 + 30 + 30
    worker = type("W", (), {"request": lambda self, op, timeout=None, **f: {"timeout": timeout, **f}})()
    ask = gather._Bounded(worker, 1, 100)
    got = ask("await", 1000, key="plan", timeout_s=1000)
    assert got["timeout"] <= 100 and got["timeout_s"] <= 99
    ask.end = 0
    with pytest.raises(gather.GatherError, match="rank 1: stopped at its bound of 100 s"):
        ask("ack")


@pytest.mark.parametrize("environ, words", [
    ({"RANK": "0", "WORLD_SIZE": "100000000", "MASTER_ADDR": "a"}, "WORLD_SIZE=100000000: debtorch fleet takes 1 to 65536"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "70000", "MASTER_ADDR": "a"}, "SLURM_NTASKS=70000"),
    ({"RANK": "0", "WORLD_SIZE": "1" + "0" * 5000, "MASTER_ADDR": "a"}, "is not a number"),
])
def test_ranks_and_world_size_are_bounded(environ, words):
    with pytest.raises(RendezvousError, match=words):
        from_environ(environ)


def test_the_store_listens_where_master_addr_says():
    local = from_environ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"})
    assert listen_address(local, lambda n: ["127.0.0.1"]) == ("127.0.0.1", "")
    named = from_environ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "gpu01"})
    assert listen_address(named, lambda n: ["10.0.0.7", "fe80::1"]) == ("10.0.0.7", "")
    # Debian maps a host's own name to 127.0.1.1: the other nodes reach it by another address.
    addr, note = listen_address(named, lambda n: ["127.0.1.1"])
    assert addr == "" and "every interface" in note
    one_node = from_environ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "gpu01,gpu01"})
    assert one_node.local and listen_address(one_node, lambda n: ["127.0.1.1"]) == ("127.0.1.1", "")


def test_the_secret_comes_from_a_private_file_or_the_environment(tmp_path):
    f = tmp_path / "secret"
    f.write_text("a long enough shared secret\n")
    f.chmod(0o644)
    with pytest.raises(RendezvousError, match=r"readable by nobody else \(mode 644: chmod 600 it\)"):
        load_secret({}, str(f))
    f.chmod(0o600)
    assert load_secret({}, str(f)) == b"a long enough shared secret"
    assert load_secret({"DEBTORCH_FLEET_SECRET": "from the environment!"}, None) == b"from the environment!"
    assert load_secret({}, None) is None
    with pytest.raises(RendezvousError, match="a secret of 16 to 4096 characters is needed"):
        load_secret({"DEBTORCH_FLEET_SECRET": "short"}, None)
    with pytest.raises(RendezvousError, match="is a FIFO"):
        os.mkfifo(tmp_path / "fifo")
        load_secret({}, str(tmp_path / "fifo"))
    # Never a fact: not read, reported or recorded.
    assert "DEBTORCH_FLEET_SECRET" not in allowed_environ({"DEBTORCH_FLEET_SECRET": "x", "DEBTORCH_CACHE": "/c"})


HOST = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)


@given(st.lists(HOST, max_size=12))
@settings(max_examples=150, deadline=None)
def test_host_lists_round_trip(names):
    assert set(hostlist.expand(hostlist.compress(names))) == set(names)


@given(st.lists(st.text(max_size=12), max_size=8))
@settings(max_examples=300, deadline=None)
def test_any_name_is_shown_escaped_and_round_trips_as_shown(names):
    out = hostlist.compress(names)
    assert all(32 <= ord(c) < 127 for c in out)
    assert set(hostlist.expand(out)) == {hostlist.safe(n) for n in names}
    assert all(hostlist.safe(hostlist.safe(n)) == hostlist.safe(n) for n in names)


def test_a_name_that_is_no_host_name_is_never_written_for_srun(tmp_path, monkeypatch):
    from debtorch.cli import fleet as cli_fleet

    verdict = probe.Verdict(scores=[], pairs=[], median_gflops=None, median_busbw=None,
                            exclude=["gpu07", "gpu01:3", "gpu\\x2cgpu02"])
    with pytest.raises(Exception) as exc:
        cli_fleet._write_exclude(str(tmp_path / "bad"), verdict, False)
    assert getattr(exc.value, "exit_code", None) == 1 and not (tmp_path / "bad").exists()
    verdict.exclude = ["gpu07", "gpu01:3", "gpu01:4"]
    cli_fleet._write_exclude(str(tmp_path / "good"), verdict, False)
    assert (tmp_path / "good").read_text() == "gpu[01,07]\n"


def test_a_store_that_went_away_is_not_called_silence():
    """Issue 23: "rank 0 said nothing within 45 s" was printed 1-3 s after rank 0 died."""
    s = session(rank=1, world=2)
    with pytest.raises(RuntimeError, match=r"^rank 0's store went away before it said plan \(0 s\)$"):
        s.op_await({"key": "plan", "timeout_s": 45})
