"""debtorch fleet's digests before documents (issue 33) and fresh signatures per rank (issue 30),
without launching anything: every rank's torch side (FleetSession) on one in-memory store, rank 0's
own code (gather._rank0) driving them.  The digests path must give the report the documents path
gives, on every fixture machine and every difference; a rank accepts only what carries its own
challenge; what leaves a node has no URL credentials.  The real TCPStore's reader is tested at the
end (needs torch)."""

import copy
import json
import os
import socket
import sys
import zlib
from pathlib import Path

import pytest
from clitools import HOSTS, ROOT
from hostkit import facts_of, make_host
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fleet import DIFFERENCES, FakeStore, four, set_in, write_docs

from debtorch.doctor import Context, diagnose
from debtorch.fleet import compare, digest, gather, offline, torchside
from debtorch.fleet.nodes import Decoder, read_node
from debtorch.fleet.rendezvous import Rendezvous
from debtorch.report import fleet as report
from debtorch.report.console import texts
from debtorch.report.doctor import MARKS_ASCII

sys.path.insert(0, str(ROOT / "benchmarks"))
import fleet_scale  # noqa: E402

SERVER = "debian12-server-8xa100-nvlink"
PREFIX = "debtorch-fleet/test/0/"


@pytest.fixture(scope="module")
def server_doc(tmp_path_factory):
    return facts_of(make_host(tmp_path_factory.mktemp("srv"), base=SERVER))


@pytest.fixture(autouse=True)
def quick_documents(monkeypatch):
    """Rank 0 waits a moment, not 15 s, for a document it asked for and that never comes."""
    monkeypatch.setattr(gather, "DOC_S", 0.3)


def findings_of(facts: dict) -> list:
    return [f.to_json() for f in diagnose(copy.deepcopy(facts), Context(source="facts")).findings]


def rendered(summary) -> tuple:
    return texts(report.lines(summary, MARKS_ASCII)), report.to_json(summary, "error")


class Job:
    """N ranks of one gathered run on one in-memory store: each rank's torch side is a FleetSession,
    rank 0 runs gather._rank0.  ``misbehave(rank, plan) -> "skip" | bytes | None`` changes what a
    rank sends when its plan asks for its document (nothing, or other bytes)."""

    def __init__(self, tmp_path, nodes: list, secret=None, tuned=None, misbehave=None, store=None):
        self.tmp, self.nodes, self.tuned, self.misbehave = tmp_path, nodes, tuned, misbehave
        self.store = store or FakeStore()
        self.world = len(nodes)
        self.secret = secret
        self.sessions = [self.session(r) for r in range(self.world)]
        self.prepared = [gather.Prepared.of(facts, findings, r, name) for r, (name, facts, findings) in enumerate(nodes)]
        self.codes: dict = {}
        self.asked: list = []

    def session(self, r: int):
        s = torchside.FleetSession(proto=None)
        s.store, s.rank, s.world, s.prefix, s.deadline = self.store, r, self.world, PREFIX, 0.0
        s.secret = self.secret
        if self.secret is not None and r == 0:
            s.nonce = os.urandom(16).hex().encode()       # rank 0's word for this run, as op_join makes it
            self.store.set("nonce", s.nonce)
        s.challenge = os.urandom(16).hex()
        return s

    def file(self, name: str, data: bytes) -> str:
        path = self.tmp / name
        path.write_bytes(data)
        return str(path)

    def send_digests(self, ranks=None) -> None:
        for r in ranks if ranks is not None else range(self.world):
            s = self.sessions[r]
            self.store.set(f"hello/{r}", self.nodes[r][0])
            self.store.append("joined", f"{r},")
            s.op_send({"key": "dig", "path": self.file(f"dig-{r}", self.prepared[r].digests(s.challenge))})

    def after(self, op: str, fields: dict) -> None:
        """The other ranks, as gather._other runs them, react to what rank 0 stored."""
        if op == "publish" and fields.get("key") == "plan":
            for r in range(1, self.world):
                try:
                    plan = self.sessions[r].op_await({"key": "plan", "timeout_s": 0})["value"]
                except RuntimeError:
                    continue
                if plan.get("send") is not True:
                    continue
                self.asked.append(r)
                data = self.misbehave(r, plan) if self.misbehave else None
                if data == "skip":
                    continue
                self.sessions[r].op_send({"key": "doc", "path": self.file(f"doc-{r}", data or self.prepared[r].document)})
        if op == "publish" and fields.get("key") == "verdict":
            for r in range(1, self.world):
                try:
                    self.codes[r] = self.sessions[r].op_await({"key": "verdict", "timeout_s": 0})["value"]["code"]
                    self.sessions[r].op_ack({})
                except RuntimeError as exc:
                    self.codes[r] = str(exc)

    def rank0(self):
        rdzv = Rendezvous(0, self.world, "127.0.0.1", 0, "env", False, PREFIX)
        # Every rank that will send has sent: rank 0 waits only a moment for the others.
        options = gather.Options(timeout=0.3, tuned=self.tuned, tuned_path="t.toml" if self.tuned else None,
                                 secret=self.secret)
        work = self.tmp / "rank0"
        work.mkdir(exist_ok=True)
        ask = fleet_scale.LocalAsk(self.sessions[0], self.after)
        shown = {}
        outcome = gather._rank0(ask, rdzv, options, str(work), lambda o: shown.update(outcome=o),
                                self.file("doc-0", self.prepared[0].document))
        self.codes[0] = outcome.code
        return outcome.summary


def documents_path(tmp_path, nodes: list, tuned=None):
    """The path before digests: every rank's whole envelope, read by rank 0 (gather.read_gathered)."""
    files = {}
    for r, (name, facts, findings) in enumerate(nodes):
        env = gather.Prepared.of(facts, findings, r, name).document
        files[str(r)] = str(tmp_path / f"envelope-{r}.json")
        Path(files[str(r)]).write_bytes(zlib.decompress(env))
    got = {"files": files, "bad": {}, "joined": {str(r): name for r, (name, _, _) in enumerate(nodes)}}
    read = lambda m: compare.read(m, tuned)  # noqa: E731 - as gather passes it
    nodes_read, _ = gather.read_gathered(len(nodes), got, lambda r: f"rank {r}", read)
    return compare.summarise(nodes_read, expected=len(nodes), timeout=0.3, tuned_path="t.toml" if tuned else None)


def fleet_of(docs: dict) -> list:
    return [(name, facts, findings_of(facts)) for name, facts in docs.items()]


@pytest.mark.parametrize("name", sorted(DIFFERENCES))
def test_digests_give_the_report_the_documents_give_for_every_difference(tmp_path, server_doc, name):
    _, change = DIFFERENCES[name]
    nodes = fleet_of(four(server_doc, change))
    (tmp_path / "d").mkdir()
    before = documents_path(tmp_path / "d", nodes)
    job = Job(tmp_path, nodes)
    job.send_digests()
    after = job.rank0()
    assert rendered(after) == rendered(before)
    assert job.codes == {r: before.exit_code() for r in range(4)}
    # Only the first rank of each kind and a spare were asked for their whole document.
    kinds = len(before.identical)
    assert len(job.asked) + 1 <= 2 * kinds


def test_digests_give_the_same_report_on_every_fixture_machine_with_a_tuned_config(tmp_path, server_doc):
    from debtorch import fingerprint

    nodes = []
    for i, host in enumerate(sorted(p.name for p in HOSTS.iterdir() if (p / "_host.json").exists())):
        facts = facts_of(make_host(tmp_path / "hosts", base=host, name=host))
        nodes += [(f"{host}-{k}", facts, findings_of(facts)) for k in range(2)]
    tuned = fingerprint.from_facts(server_doc)
    (tmp_path / "d").mkdir()
    before = documents_path(tmp_path / "d", nodes, tuned)
    job = Job(tmp_path, nodes, tuned=tuned)
    job.send_digests()
    after = job.rank0()
    assert rendered(after) == rendered(before)
    assert {f.id for f in after.findings} >= {"fleet.W011", "fleet.W006"}


def test_with_a_secret_the_digests_path_gives_the_same_report(tmp_path, server_doc):
    nodes = fleet_of(four(server_doc, set_in("nvidia.driver_version", "535.129.03")))
    (tmp_path / "d").mkdir()
    before = documents_path(tmp_path / "d", nodes)
    job = Job(tmp_path, nodes, secret=b"a secret the ranks share")
    job.send_digests()
    assert rendered(job.rank0()) == rendered(before)
    assert job.codes == {0: 0, 1: 0, 2: 0, 3: 0}


def kernel(doc):
    doc["os"]["kernel"] = "6.1.0-31-amd64"


def rank0_unlike_the_rest(server_doc) -> list:
    """n1 (rank 0) has another kernel; n2..n4 are alike: rank 1 is their first, rank 2 their spare."""
    docs = four(server_doc)
    kernel(docs["n1"])
    return fleet_of(docs)


def test_a_kind_whose_first_rank_sends_nothing_is_read_from_its_spare(tmp_path, server_doc):
    nodes = rank0_unlike_the_rest(server_doc)
    (tmp_path / "d").mkdir()
    before = documents_path(tmp_path / "d", nodes)
    job = Job(tmp_path, nodes, misbehave=lambda r, plan: "skip" if r == 1 else None)
    job.send_digests()
    after = job.rank0()
    assert sorted(job.asked) == [1, 2]
    assert rendered(after) == rendered(before)


def test_a_document_unlike_its_digests_is_refused_and_its_kind_read_from_another(tmp_path, server_doc):
    nodes = rank0_unlike_the_rest(server_doc)
    other = copy.deepcopy(server_doc)
    other["python"]["torch"]["version"] = "2.4.0+cu121"
    liar = gather.Prepared.of(other, findings_of(other), 1, "n2").document
    job = Job(tmp_path, nodes, misbehave=lambda r, plan: liar if r == 1 else None)
    job.send_digests()
    s = job.rank0()
    status = {n.name: (n.status, n.detail) for n in s.nodes}
    assert status["n2"] == ("malformed", "its document does not give the digests it sent")
    assert [names for names, _ in s.identical] == [["n3", "n4"], ["n1"]]
    assert not [f for f in s.findings if f.id == "fleet.E005"]     # the lie never became an answer


def test_a_kind_of_which_no_document_arrives_is_named_not_guessed(tmp_path, server_doc):
    nodes = fleet_of(four(server_doc, set_in("python.torch.version", "2.4.0+cu121")))
    job = Job(tmp_path, nodes, misbehave=lambda r, plan: "skip")
    job.send_digests()
    s = job.rank0()
    odd = next(n for n in s.nodes if n.name == "n4")
    assert (odd.status, odd.detail) == (
        "malformed", "sent its digests, but no document of its kind arrived to read its answers from (asked rank 3)")
    assert [names for names, _ in s.identical] == [["n1", "n2", "n3"]]
    assert s.exit_code() == 1 and job.codes == {0: 1, 1: 1, 2: 1, 3: 1}


def test_a_node_of_another_debtorch_is_read_from_its_own_document(tmp_path, server_doc, monkeypatch):
    nodes = fleet_of(four(server_doc, set_in("debtorch_version", "0.0.9")))
    (tmp_path / "d").mkdir()
    before = documents_path(tmp_path / "d", nodes)
    job = Job(tmp_path, nodes)
    real = digest.Digests.of

    def older(answers, rank, node, version, challenge):
        return real(answers, rank, node, "0.0.9" if rank == 3 else version, challenge)

    monkeypatch.setattr(digest.Digests, "of", older)
    job.send_digests()
    assert rendered(job.rank0()) == rendered(before)
    assert 3 in job.asked


def test_a_rank_of_the_first_protocol_is_read_from_its_whole_document(tmp_path, server_doc):
    nodes = fleet_of(four(server_doc, set_in("os.kernel", "6.1.0-31-amd64")))
    (tmp_path / "d").mkdir()
    before = documents_path(tmp_path / "d", nodes)
    job = Job(tmp_path, nodes)
    job.send_digests(ranks=[0, 1, 2])
    job.store.set("hello/3", "n4")
    job.store.append("joined", "3,")
    job.sessions[3].challenge = None
    job.sessions[3].op_send({"key": "doc", "path": job.file("whole-3", job.prepared[3].document)})
    assert rendered(job.rank0()) == rendered(before)
    assert job.codes[3] == before.exit_code()      # it read the plain verdict


def test_a_common_node_sends_at_most_2_kb(tmp_path):
    """What a node like its group sends: its hello, its digests, its name in two lists, one ack."""
    for host in sorted(p.name for p in HOSTS.iterdir() if (p / "_host.json").exists()):
        facts = facts_of(make_host(tmp_path, base=host, name=host))
        prepared = gather.Prepared.of(facts, findings_of(facts), 65535, "a-long-node-name-0001.cluster.example")
        sealed = torchside.SIGNED + b"t" * 32 + prepared.digests("0" * 32)
        keys = len(PREFIX) * 5 + len("hello/65535dig/65535joineddig_arrivedacks")
        assert len(sealed) + len(prepared.name) + 2 * len("65535,") + keys < 2048, host


# ---------------------------------------------------------------- fresh signatures per rank (issue 30)


def test_a_replayed_plan_and_verdict_of_an_earlier_run_are_refused(tmp_path, server_doc):
    """Issue 30: a process that recorded an earlier run's nonce, plan and verdict writes them back
    once the new run's nonce appears; a rank that starts a moment later used to read the old nonce,
    and exit with the old verdict.  Each rank now takes only what carries its own random challenge,
    which no earlier run's value can."""
    secret = b"a secret the ranks share"
    nodes = fleet_of(four(server_doc))
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
    first = Job(tmp_path / "first", nodes, secret=secret)
    first.send_digests()
    first.rank0()
    recorded = dict(first.store.data)
    assert first.codes == {0: 0, 1: 0, 2: 0, 3: 0}

    second = Job(tmp_path / "second", nodes, secret=secret)     # rank 0 has stored its new nonce
    second.send_digests(ranks=[0])
    for key in ("nonce", "plan", "verdict", "plan/1", "verdict/1"):
        second.store.data[key] = recorded[key]                  # the attacker writes the old run back
    second.send_digests(ranks=[1, 2, 3])                        # the other ranks start a moment later
    # The attack as it was: a rank without a challenge of its own (the first protocol) takes the
    # old run's verdict as rank 0's.
    old = second.session(1)
    old.challenge, old.nonce = None, None
    assert old.op_await({"key": "verdict", "timeout_s": 0})["value"] == {"code": 0}
    s = second.rank0()
    rank1 = second.sessions[1]
    with pytest.raises(RuntimeError, match=r"sent no plan that verifies \(it does not carry this rank's challenge"):
        rank1.op_await({"key": "plan", "timeout_s": 0})
    with pytest.raises(RuntimeError, match="sent no verdict that verifies"):
        rank1.op_await({"key": "verdict", "timeout_s": 0})
    # Rank 0's report stays right: it refused the digests signed with the old word.
    assert {n.name: n.status for n in s.nodes} == {"n1": "ok", "n2": "malformed", "n3": "malformed",
                                                   "n4": "malformed"}


def test_rank_0_signs_each_rank_its_own_plan(tmp_path, server_doc):
    secret = b"a secret the ranks share"
    job = Job(tmp_path, fleet_of(four(server_doc)), secret=secret)
    job.send_digests()
    job.rank0()
    a, b = (json.loads(job.store.data[f"plan/{r}"][36:]) for r in (1, 2))
    assert a["challenge"] == job.sessions[1].challenge and b["challenge"] == job.sessions[2].challenge
    # Rank 2's plan moved to rank 1's key does not verify: the key is signed too.
    job.store.data["plan/1"] = job.store.data["plan/2"]
    with pytest.raises(RuntimeError, match="does not verify"):
        job.sessions[1].op_await({"key": "plan", "timeout_s": 0})


def test_a_rank_refused_with_a_secret_gets_no_plan_and_exits_1(tmp_path, server_doc):
    secret = b"a secret the ranks share"
    job = Job(tmp_path, fleet_of(four(server_doc)), secret=secret)
    job.send_digests(ranks=[0, 1, 2])
    forged = job.session(3)
    forged.secret = b"another secret entirely!"
    job.store.set("hello/3", "n4")
    forged.op_send({"key": "dig", "path": job.file("dig-3", job.prepared[3].digests(forged.challenge))})
    s = job.rank0()
    assert {n.name: n.status for n in s.nodes}["n4"] == "malformed"
    assert s.exit_code() == 1 and job.codes[3].startswith("rank 0 said nothing")
    assert job.codes[1] == job.codes[2] == 1


# ---------------------------------------------------------------- what leaves a node


def test_url_credentials_and_tokens_never_leave_a_node(server_doc):
    facts = copy.deepcopy(server_doc)
    facts["env"]["variables"]["PIP_INDEX_URL"] = "https://alice:s3cr3t-t0ken@pypi.corp.example/simple?token=abc123"
    facts["env"]["variables"]["NCCL_DEBUG_FILE"] = "https://x.example/log?sig=deadbeef&keep=1"
    prepared = gather.Prepared.of(facts, findings_of(facts), 1, "n1")
    sent = zlib.decompress(prepared.document).decode() + prepared.digests("0" * 32).decode()
    for secret in ("alice", "s3cr3t-t0ken", "abc123", "deadbeef"):
        assert secret not in sent
    doc = json.loads(zlib.decompress(prepared.document))
    assert doc["facts"]["env"]["variables"]["PIP_INDEX_URL"] == \
        "https://CREDENTIALS@pypi.corp.example/simple?token=REDACTED"
    assert "keep=1" in doc["facts"]["env"]["variables"]["NCCL_DEBUG_FILE"]


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=30))
@settings(max_examples=150, deadline=None)
def test_digests_of_any_json_are_read_or_refused_in_one_line(value):
    try:
        digest.Digests.from_json(value)
    except ValueError as exc:
        assert "\n" not in str(exc)


# ---------------------------------------------------------------- offline: the decoder and the workers


@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
@settings(max_examples=300, deadline=None)
def test_the_decoder_reads_any_text_as_read_node_does(text):
    a, b = Decoder(compare.read).node(text, "x"), read_node(text, "x", compare.read)
    assert (a.status, a.detail, a.values, a.findings) == (b.status, b.detail, b.values, b.findings)


WHITESPACE = st.sampled_from(["", " ", "\n", "\t", "\r\n  "])


@given(st.data())
@settings(max_examples=60, deadline=None)
def test_the_decoder_reads_real_documents_however_written_as_read_node_does(server_doc, data):
    doc = {"schema_version": 1, "findings": [], "facts": copy.deepcopy(server_doc)}
    if data.draw(st.booleans()):
        doc["facts"]["cpu"]["usable_cpus"] = data.draw(st.sampled_from([5, "five", None, 2.5]))
    if data.draw(st.booleans()):
        doc = doc["facts"]
    text = json.dumps(doc, indent=data.draw(st.sampled_from([None, 1, 2])))
    ws = data.draw(WHITESPACE)
    text = ws + text.replace(": ", ":" + ws, data.draw(st.integers(0, 5))) + ws
    if data.draw(st.booleans()):
        text = text.replace('"cpu"', '"cpu": {}, "cpu"', 1)    # a repeated key: the last one counts
    decoder = Decoder(compare.read)
    for _ in range(2):                                        # the second read uses what it remembered
        a, b = decoder.node(text, "x"), read_node(text, "x", compare.read)
        assert (a.status, a.detail, a.values, a.findings) == (b.status, b.detail, b.values, b.findings)


def test_offline_in_worker_processes_gives_what_one_process_gives(tmp_path, server_doc, monkeypatch):
    docs = {f"gpu{i:03d}": copy.deepcopy(server_doc) for i in range(40)}
    docs["gpu007"]["nvidia"]["driver_version"] = "535.129.03"
    docs["gpu031"]["cpu"]["governor"] = "powersave"
    folder = write_docs(tmp_path / "docs", docs)
    (folder / "notes.json").write_text('{"schema_version": 1, "settings": {}, "env": {}}')
    one = offline.from_files([str(folder)], workers=1)
    monkeypatch.setattr(offline, "PARALLEL_MIN", 2)
    monkeypatch.setattr(offline, "CHUNK", 3)
    many = offline.from_files([str(folder)], workers=2)
    assert rendered(many) == rendered(one)
    assert [x.path for x in many.skipped] == [str(folder / "notes.json")]


# ---------------------------------------------------------------- torch's own store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def real_store():
    """Rank 0's torch side hosting a real TCPStore here, and a client of it (another process's view)."""
    from datetime import timedelta

    import torch.distributed as dist

    port = _free_port()
    rank0 = torchside.FleetSession(None)
    joined = rank0.op_join({"rank": 0, "world": 3, "addr": "127.0.0.1", "port": port, "agent_store": False,
                            "prefix": PREFIX, "node": "gpu01", "timeout_s": 20})
    client = dist.PrefixStore(PREFIX, dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=20)))
    yield rank0, joined, client
    rank0.reader.close()


class Counting(torchside.Reader):
    received = 0

    def _recv(self, n: int) -> bytes:
        data = super()._recv(n)
        Counting.received += len(data)
        return data


@pytest.mark.torch
def test_a_value_too_large_is_refused_from_its_length_never_read(real_store):
    rank0, joined, client = real_store
    assert joined["bounded"] is True
    rank0.reader.__class__ = Counting
    client.set("hello/1", "gpu02")
    for _ in range(2):                                   # 16 MiB, past any cap, as appends build it
        client.append("doc/1", b"x" * (8 * 2 ** 20 - 64))
    client.append("arrived", "1,")
    client.set("hello/2", "evil" * 10_000)              # a 40 KB name: its first 256 bytes are its name
    client.wait(["hello/2"])
    Counting.received = 0
    got = rank0.op_collect({"out_dir": "/tmp", "deadline_s": 0})
    assert got["bad"] == {1: "sent 16777088 bytes, more than 8 MiB"}
    assert Counting.received < 2 ** 20                  # the 16 MiB were never read
    assert not client.check(["doc/1"])                  # and no longer kept
    assert rank0._hello(2) == ("evil" * 64)[:256]
    assert rank0.reader.exists_many(["hello/1", "hello/3"]) == [True, False]
    assert rank0.reader.get("nothing-here", 10) is None


@pytest.mark.torch
def test_a_flooded_list_on_a_real_store_is_not_read_and_ranks_are_looked_up(real_store):
    rank0, _, client = real_store
    for r in (1, 2):
        client.set(f"hello/{r}", f"gpu0{r + 1}")
    client.append("joined", "1,2,")
    for _ in range(2):
        client.append("arrived", b"0," * (4 * 2 ** 20))
    client.set("doc/1", zlib.compress(json.dumps({"fleet": 1, "rank": 1, "node": "gpu02", "facts": {}}).encode()))
    client.wait(["doc/1"])
    got = rank0.op_collect({"out_dir": "/tmp", "deadline_s": 0})
    assert set(got["files"]) == {1} and "arrived" in rank0.flooded
    assert not client.check(["arrived"])


# ---------------------------------------------------------------- the secret and where the store listens


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_a_blank_secret_is_refused_never_taken_for_none(blank):
    from debtorch.fleet.rendezvous import RendezvousError, load_secret

    with pytest.raises(RendezvousError, match="DEBTORCH_FLEET_SECRET is set but blank"):
        load_secret({"DEBTORCH_FLEET_SECRET": blank}, None)
    assert load_secret({}, None) is None


@pytest.mark.parametrize("addr", ["0.0.0.0", "::"])
def test_master_addr_of_every_interface_gets_a_note(addr):
    from debtorch.fleet.rendezvous import from_environ, listen_address

    rdzv = from_environ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": addr})
    where, note = listen_address(rdzv, lambda name: [addr])
    assert where == addr and "listens on every interface" in note and "MASTER_ADDR" in note


def test_redact_strips_token_parameters_as_the_ranks_do():
    from debtorch.report.redact import Redactor

    line = "PIP_INDEX_URL=https://bob:pw@idx.example/simple?access_token=abc&x=1"
    assert Redactor().text(line) == "PIP_INDEX_URL=https://CREDENTIALS@idx.example/simple?access_token=REDACTED&x=1"
