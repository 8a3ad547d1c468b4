"""Gathered mode: one ``debtorch fleet`` per node, started by the job's launcher (docs/fleet.md, "How
the gather works"): each rank starts its torch side (:mod:`debtorch.fleet.torchside`) and, while torch
imports, collects its facts and runs its doctor, joins the rendezvous and sends its envelope; rank 0
compares what came within ``timeout``, prints the report and publishes the verdict (the exit code);
every other rank waits for the plan and the verdict (bounded), acknowledges it and exits with it.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from debtorch import hostlist, inputs, urlsecrets
from debtorch.__about__ import __version__
from debtorch.fleet import compare, digest, probe
from debtorch.fleet.nodes import (
    DIED,
    MALFORMED,
    MISSING,
    OK,
    SKIPPED,
    DocumentError,
    Node,
    encode,
    envelope,
    node_findings,
    parse,
    read_node,
)
from debtorch.fleet.rendezvous import Rendezvous
from debtorch.machine import Machine
from debtorch.transport.client import Worker, WorkerError

TORCH_SIDE = "debtorch.fleet.torchside"
GRACE_S = 30.0               # what rank 0 may take after the timeout, to compare and print
DOC_S = 15.0                 # what rank 0 waits for the whole documents it asked for
SPARES = 1                   # ranks asked for their document besides each group's first


class GatherError(Exception):
    """This rank could not take part; ``code`` is its exit status (1, or 2 for bad input)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


@dataclass
class Options:
    timeout: float = 60.0
    fail_on: str = "error"
    probe: bool = False
    budget: float = 30.0
    tuned: Optional[dict] = None
    tuned_path: Optional[str] = None
    rename: Optional[Callable[[list], None]] = None      # --redact: rename nodes before comparing
    listen: Optional[str] = None      # where rank 0's store listens ("": every interface; None: MASTER_ADDR)
    secret: Optional[bytes] = None    # signs and checks every value in the store

    @property
    def bound_s(self) -> float:
        """The most a rank takes from joining to its exit, whatever the store says: up to --timeout
        to reach rank 0, --timeout for the others to arrive, the report, --budget with --probe, the
        verdict's acknowledgements."""
        return 2 * self.timeout + 3 * GRACE_S + ((self.budget + GRACE_S) if self.probe else 0.0)


@dataclass
class Outcome:
    """What a rank ends with: rank 0 has the summary (and the probe's verdict)."""

    code: int
    summary: Optional[compare.Summary] = None
    verdict: Optional[probe.Verdict] = None
    notes: list = field(default_factory=list)       # shown with the probe
    warnings: list = field(default_factory=list)    # for stderr


def node_name(facts: dict, environ: dict) -> str:
    """The node's name in the report: Slurm's name for it, else its hostname."""
    return str(environ.get("SLURMD_NODENAME") or (facts.get("os") or {}).get("hostname") or "node")


def _worker_error(exc: WorkerError, doing: str) -> GatherError:
    return GatherError(f"{doing}: {exc.message.removeprefix('RuntimeError: ')}", 2 if exc.user_input else 1)


class _Bounded:
    """The torch side's requests, each within what is left of this rank's bound."""

    def __init__(self, worker: Worker, rank: int, bound_s: float):
        self.worker, self.rank, self.bound = worker, rank, bound_s
        self.end = time.monotonic() + bound_s

    def __call__(self, op: str, limit: Optional[float] = None, **fields: Any) -> dict:
        left = self.end - time.monotonic()
        if left <= 1:
            raise GatherError(f"rank {self.rank}: stopped at its bound of {self.bound:g} s", 1)
        for name in ("timeout_s", "deadline_s"):
            if name in fields:
                fields[name] = min(float(fields[name]), left - 1)
        return self.worker.request(op, timeout=min(limit or left, left), **fields)


@dataclass(frozen=True)
class Prepared:
    """What a rank sends, made from its facts and its doctor's findings with every URL's credentials
    and token-like parameters stripped (docs/security.md): its whole document (the envelope, sent
    when rank 0 asks) and the answers its digests are made of."""

    rank: int
    name: str
    document: bytes
    answers: digest.Answers

    @classmethod
    def of(cls, facts: dict, findings: list, rank: int, name: str) -> "Prepared":
        facts, findings = urlsecrets.scrub_all(facts), urlsecrets.scrub_all(findings)
        return cls(rank, name, encode(envelope(facts, findings, rank, name, __version__)),
                   digest.Answers.of(facts, findings))

    def digests(self, challenge: str) -> bytes:
        """The digests this rank sends first, with its own challenge."""
        return digest.Digests.of(self.answers, self.rank, self.name, __version__, challenge).encode()


def run(rdzv: Rendezvous, python: str, describe: Callable[[], tuple], options: Options,
        environ: dict, on_report: Callable[[Outcome], None]) -> Outcome:
    """Take part in the gather as ``rdzv.rank``.  ``describe()`` returns (facts, findings JSON, node name).
    ``on_report`` prints rank 0's report before the verdict goes out."""
    work = tempfile.mkdtemp(prefix="debtorch-fleet-")
    worker = Worker(python, TORCH_SIDE, env=dict(environ), timeout=options.timeout + GRACE_S)
    try:
        # Torch imports (seconds) while the facts are collected.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            described = pool.submit(describe)
            try:
                worker.start()
            except WorkerError as exc:
                raise _worker_error(exc, f"starting the torch side in {python}") from None
            facts, findings, name = described.result()
        mine = Prepared.of(facts, findings, rdzv.rank, name)
        del facts, findings
        doc_path = os.path.join(work, "envelope.bin")
        with open(doc_path, "wb") as fh:
            fh.write(mine.document)
        ask = _Bounded(worker, rdzv.rank, options.bound_s)
        try:
            joined = ask("join", rank=rdzv.rank, world=rdzv.world, addr=rdzv.addr, port=rdzv.port,
                         agent_store=rdzv.agent_store, prefix=rdzv.prefix, node=name, timeout_s=options.timeout,
                         listen=rdzv.addr if options.listen is None else options.listen,
                         secret=options.secret.decode("latin-1") if options.secret else None)
            dig_path = os.path.join(work, "digests.json")
            with open(dig_path, "wb") as fh:
                fh.write(mine.digests(str(joined["challenge"])))
            ask("send", key="dig", path=dig_path)
        except WorkerError as exc:
            raise _worker_error(exc, f"rank {rdzv.rank} joining {rdzv.addr}:{rdzv.port}") from None
        if rdzv.rank != 0:
            return _other(ask, rdzv, options, doc_path)
        outcome = Outcome(code=0)
        if not joined.get("bounded"):
            outcome.warnings.append("this torch's store did not answer debtorch's reader: its values were read "
                                    "whole before their size was checked (docs/security.md)")
        can = joined.get("descriptors")
        if isinstance(can, int) and can < rdzv.world + 64:
            outcome.warnings.append(f"rank 0 may open {can} files (ulimit -n, hard limit included): the store "
                                    f"keeps a connection per rank, so not all {rdzv.world} ranks may get in; raise "
                                    "the limit where the job starts (docs/fleet.md, \"Scale\")")
        return _rank0(ask, rdzv, options, work, on_report, doc_path, outcome)
    finally:
        worker.close(grace=5.0)
        shutil.rmtree(work, ignore_errors=True)


def _rank0(ask: _Bounded, rdzv: Rendezvous, options: Options, work: str,
           on_report: Callable[[Outcome], None], doc_path: str, outcome: Optional[Outcome] = None) -> Outcome:
    got = ask("gather", GRACE_S + options.timeout, out_dir=work, deadline_s=options.timeout)
    elapsed = float(got.get("waited_s") or 0.0)
    arrivals = read_arrivals(rdzv.world, str(got["path"]), rdzv.name_of)
    wanted = representatives(arrivals)
    outcome = outcome or Outcome(code=0)
    everyone = all(a.status in (OK, WHOLE) for a in arrivals)
    the_plan: dict = {"probe": False}
    if options.probe and everyone and rdzv.world > 1:
        gpu = bool(ask("caps").get("cuda"))
        the_plan = probe.plan(rdzv.world, options.budget, gpu)
    elif options.probe:
        outcome.notes.append("probe skipped: " + ("one node" if rdzv.world < 2 else "not every node answered"))
    ask("publish", key="plan", value=the_plan, per_rank=True, send=wanted, compact=_compact(the_plan))
    if 0 in wanted:
        ask("send", key="doc", path=doc_path)
    extra: list = []
    if the_plan.get("probe"):
        results: dict = {}
        try:
            ask("probe", options.budget + GRACE_S, plan=the_plan)
            # The probe's deadline is counted like the gather's, from when rank 0 joined.
            got = ask("collect", options.budget + GRACE_S, out_dir=work, key="probe",
                      deadline_s=elapsed + options.budget)
            elapsed = float(got.get("waited_s") or elapsed)
        except WorkerError as exc:
            # Rank 0's own torch side failed or hung past the budget (and was killed): the report
            # still comes, without the verdict the others wait for (they give up, exit 1).
            outcome.notes.append(f"probe: rank 0's torch side failed: {exc.message}")
            results[0] = {"error": exc.message}
            got = {"files": {}}
        results.update({int(r): {"error": why} for r, why in (got.get("bad") or {}).items()})
        for r, p in got["files"].items():
            try:
                results[int(r)] = inputs.parse_json(inputs.read_text(p), p)
            except inputs.InputError:
                results[int(r)] = {"error": "unreadable probe result"}
    docs: dict = {"files": {}, "bad": {}}
    if wanted and ask.worker.proc is not None and ask.worker.proc.poll() is None:
        try:
            docs = ask("collect", DOC_S + GRACE_S, out_dir=work, key="doc", ranks=wanted, deadline_s=elapsed + DOC_S)
        except WorkerError as exc:
            outcome.notes.append(f"rank 0's torch side failed while fetching documents: {exc.message}")
    nodes, names = assemble(arrivals, docs, options.tuned, ask.end)
    if options.rename is not None:
        options.rename(nodes)
        names.update({n.rank: n.name for n in nodes if n.rank is not None})
    if the_plan.get("probe"):
        outcome.verdict = probe.judge(results, names, rdzv.world, options.budget)
        extra = outcome.verdict.findings
    outcome.summary = compare.summarise(nodes, expected=rdzv.world, timeout=options.timeout,
                                        tuned_path=options.tuned_path, extra=extra)
    outcome.code = outcome.summary.exit_code(options.fail_on)
    on_report(outcome)
    if ask.worker.proc is None or ask.worker.proc.poll() is not None:
        raise GatherError("rank 0's torch side is gone: the other ranks get no verdict", outcome.code or 1)
    published = int(ask("publish", key="verdict", value={"code": outcome.code}, per_rank=True).get("ranks") or 0)
    # The ranks that sent something wait for the verdict; one that died before sending never will,
    # nor (with a secret) one whose digests did not verify: it has no verdict of its own to read.
    senders = sum(a.status not in (DIED, MISSING) for a in arrivals)
    readers = senders if options.secret is None else published + sum(a.status == WHOLE for a in arrivals)
    ask("finish", GRACE_S + 10, expected=min(senders, readers) - 1, timeout_s=GRACE_S)
    return outcome


def _compact(plan: dict) -> dict:
    """The plan as each rank gets it with its challenge: the pairs' schedule as a digest (every
    rank computes the schedule itself, and a schedule of 10,000 ranks is hundreds of KB)."""
    if not plan.get("probe"):
        return plan
    return dict(plan, rounds=digest.digest(plan["rounds"]))


WHOLE = "whole"              # an arrival that is a whole document (a rank of the first protocol)


@dataclass(frozen=True)
class Arrival:
    """What rank 0 heard from one rank: its name, and its digests (``status`` OK: ``key`` and the
    debtorch ``version`` that hashed them), a whole document (WHOLE: its ``file``), nothing (MISSING,
    DIED) or something it refused (MALFORMED, ``detail`` says why)."""

    rank: int
    name: str
    status: str
    detail: str = ""
    key: Optional[tuple] = None
    version: str = ""
    file: str = ""


def read_arrivals(world: int, path: str, name_of: Callable[[int], str]) -> list[Arrival]:
    """Every rank's :class:`Arrival`, in rank order, from the torch side's ``gathered.jsonl`` (read a
    line at a time; equal digests share one key object, so memory grows by kinds of node)."""
    heard: dict[int, Arrival] = {}
    keys: dict[tuple, tuple] = {}
    checked: set = set()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                parsed = json.loads(line)
            except ValueError:
                continue       # (the torch side writes whole lines of JSON; nothing else is trusted)
            heard_one = _arrival(parsed, world, name_of, keys, checked)
            if heard_one is not None:
                heard[heard_one.rank] = heard_one
    return [heard.get(r) or Arrival(r, name_of(r), MISSING, "did not join") for r in range(world)]


def _arrival(line: Any, world: int, name_of: Callable[[int], str], keys: dict, checked: set) -> Optional[Arrival]:
    r = line.get("rank") if isinstance(line, dict) else None
    if not isinstance(r, int) or not 0 <= r < world:
        return None
    hello = line.get("hello")
    name = hostlist.safe(hello) if isinstance(hello, str) else name_of(r)
    if isinstance(line.get("bad"), str):
        return Arrival(r, name, MALFORMED, line["bad"][:200])
    if isinstance(line.get("file"), str):
        return Arrival(r, name, WHOLE, file=line["file"])
    if "digests" not in line:
        return Arrival(r, name, DIED, "joined, sent nothing")
    try:
        d = digest.Digests.from_json(line["digests"], known=checked)
    except ValueError as exc:
        return Arrival(r, name, MALFORMED, str(exc))
    return Arrival(r, name, OK, key=keys.setdefault(d.key, d.key), version=d.debtorch_version)



def representatives(arrivals: list[Arrival]) -> list[int]:
    """The ranks rank 0 asks for their whole document: the first of each group of equal digests and
    :data:`SPARES` more (one that dies before it sends must not cost its group), and every rank of
    another debtorch version (its digests may hash another reading of the facts)."""
    taken: dict[tuple, int] = {}
    out = []
    for a in arrivals:
        if a.status != OK or a.key is None:  # (an arrival with digests always has its key)
            continue
        if a.version != __version__:
            out.append(a.rank)
            continue
        count = taken.get(a.key, 0)
        if count <= SPARES:
            out.append(a.rank)
            taken[a.key] = count + 1
    return out


def assemble(arrivals: list[Arrival], docs: dict, tuned: Optional[dict], end: Optional[float] = None,
             wanted: Optional[list[int]] = None) -> tuple[list[Node], dict[int, str]]:
    """([Node] in rank order, {rank: name}): every rank that sent digests takes its group's answers,
    read from the first whole document of the group that arrived and gives the same digests; a
    document that does not is its sender's fleet.E003.  ``docs`` is the torch side's collection of
    the documents asked for (``files``: rank -> file, ``bad``: rank -> why refused).  Past ``end``
    nothing more is read."""
    files = {int(r): str(p) for r, p in (docs.get("files") or {}).items()}
    files.update({a.rank: a.file for a in arrivals if a.status == WHOLE})
    refused = {int(r): str(why) for r, why in (docs.get("bad") or {}).items()}
    asked = set(representatives(arrivals) if wanted is None else wanted)
    shared: dict[tuple, tuple[dict, tuple]] = {}
    own: dict[int, Node] = {}
    for a in arrivals:
        if a.rank not in files and a.rank in refused and a.rank in asked:
            own[a.rank] = Node(a.name, a.rank, MALFORMED, refused[a.rank][:200])
        if a.rank not in files or (a.status == OK and a.key in shared and a.version == __version__):
            continue
        if end is not None and time.monotonic() > end:
            own[a.rank] = Node(a.name, a.rank, MALFORMED, "not read: this rank's bound ran out")
            continue
        found = _read_document(files[a.rank], a, shared, tuned)
        if found is not None:
            own[a.rank] = found
    nodes = []
    for a in arrivals:
        if a.rank in own:
            node = own[a.rank]
        elif a.status == OK and a.key in shared and a.version == __version__:
            values, findings = shared[a.key]
            node = Node(a.name, a.rank, OK, values=values, findings=findings)
        elif a.status == OK:
            node = Node(a.name, a.rank, MALFORMED, _unanswered(a, arrivals, asked))
        elif a.status == WHOLE:
            node = Node(a.name, a.rank, MALFORMED, "its document was not read")
        else:
            node = Node(a.name, a.rank, a.status, a.detail)
        nodes.append(node)
    _unique_names(nodes)
    return nodes, {n.rank: n.name for n in nodes if n.rank is not None}


def _read_document(path: str, a: Arrival, shared: dict, tuned: Optional[dict]) -> Optional[Node]:
    """Read the whole document at ``path`` from ``a``'s rank: for a rank that sent digests, its
    group's answers (checked against them) and None; else the rank's own Node."""
    try:
        text = inputs.read_text(path, what="a fleet document")
    except inputs.InputError as exc:
        return Node(a.name, a.rank, MALFORMED, str(exc))
    finally:
        os.unlink(path)
    try:
        facts, findings, _ = parse(text, a.name)
    except DocumentError as exc:
        status = MALFORMED if exc.status == SKIPPED else exc.status
        return Node(a.name, a.rank, status, str(exc))
    answers = digest.Answers.of(facts, findings)
    every = node_findings(Machine.from_facts(facts), findings)
    if a.status == OK and a.version == __version__:
        if (answers.aspects(), answers.finding_digests()) != a.key:
            return Node(a.name, a.rank, MALFORMED, "its document does not give the digests it sent")
        shared[a.key] = (answers.values_for(tuned), every)
        return None
    return Node(a.name, a.rank, OK, values=answers.values_for(tuned), findings=every)


def _unanswered(a: Arrival, arrivals: list[Arrival], asked: set[int]) -> str:
    mates = [x.rank for x in arrivals if x.key is a.key and x.rank in asked][:3]
    return ("sent its digests, but no document of its kind arrived to read its answers from "
            f"(asked rank{'s' if len(mates) > 1 else ''} {', '.join(map(str, mates))})")


def read_gathered(world: int, got: dict, name_of: Callable[[int], str], read: Callable,
                  end: Optional[float] = None) -> tuple:
    """([Node] in rank order, {rank: name}) from what the torch side collected: ``files`` (rank ->
    its document's file, deleted once read, one in memory at a time), ``bad`` (rank -> why it was
    refused), ``joined`` (rank -> its hello, escaped: names are data).  Past ``end`` nothing is read."""
    files = {int(r): p for r, p in got["files"].items()}
    bad = {int(r): why for r, why in (got.get("bad") or {}).items()}
    joined = {int(r): n for r, n in got["joined"].items()}
    nodes: list = []
    for r in range(world):
        name = hostlist.safe(joined[r]) if r in joined else name_of(r)
        if r in files and end is not None and time.monotonic() > end:
            node = Node(name, r, MALFORMED, "not read: this rank's bound ran out")
        elif r in files:
            try:
                node = read_node(inputs.read_text(files[r], what="a fleet document"), name, read, rank=r)
            except inputs.InputError as exc:
                node = Node(name, r, MALFORMED, str(exc))
            os.unlink(files[r])
        elif r in bad:
            node = Node(name, r, MALFORMED, bad[r][:200])
        else:
            node = Node(name, r, *((DIED, "joined, sent nothing") if r in joined else (MISSING, "did not join")))
        node.rank = r
        nodes.append(node)
    _unique_names(nodes)
    return nodes, {n.rank: n.name for n in nodes}


def _unique_names(nodes: list) -> None:
    """Two ranks on one node (or two replayed copies) get their rank appended."""
    seen: dict = {}
    for n in nodes:
        seen[n.name] = seen.get(n.name, 0) + 1
    for n in nodes:
        if seen[n.name] > 1:
            n.name = f"{n.name}:{n.rank}"


def _other(ask: _Bounded, rdzv: Rendezvous, options: Options, doc_path: Optional[str] = None) -> Outcome:
    """Wait for rank 0's plan (send the whole document when it asks; run the probe it asks for:
    exactly the one this rank would plan with its own --budget, never more) and its verdict,
    acknowledge it, and exit with its code."""
    wait = options.timeout + GRACE_S
    try:
        plan = ask("await", wait + 10, key="plan", timeout_s=wait)["value"]
        if isinstance(plan, dict) and plan.get("send") is True and doc_path is not None:
            ask("send", key="doc", path=doc_path)
        wait = DOC_S + GRACE_S
        if isinstance(plan, dict) and plan.get("probe"):
            mine = probe.plan(rdzv.world, options.budget, plan.get("backend") == "nccl")
            theirs = {k: v for k, v in plan.items() if k not in ("challenge", "send")}
            expected = _compact(mine) if isinstance(theirs.get("rounds"), str) else mine
            if not options.probe or theirs != json.loads(json.dumps(expected)):
                raise GatherError(f"rank {rdzv.rank}: rank 0's plan is not the probe this rank was started for "
                                  f"(--probe --budget {options.budget:g} on every rank)", 1)
            ask("probe", options.budget + GRACE_S, plan=mine)
            wait += options.budget
        verdict = ask("await", wait + 10, key="verdict", timeout_s=wait)["value"]
        ask("ack")
    except WorkerError as exc:
        raise _worker_error(exc, f"rank {rdzv.rank}") from None
    code = verdict.get("code") if isinstance(verdict, dict) else None
    if code not in (0, 1, 2) or isinstance(code, bool):
        raise GatherError(f"rank {rdzv.rank}: rank 0 sent an unreadable verdict", 1)
    return Outcome(code=code)
