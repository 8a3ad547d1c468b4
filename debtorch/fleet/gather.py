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
from typing import Callable, Optional

from debtorch import hostlist, inputs
from debtorch.__about__ import __version__
from debtorch.fleet import compare, probe
from debtorch.fleet.nodes import DIED, MALFORMED, MISSING, Node, encode, envelope, read_node
from debtorch.fleet.rendezvous import Rendezvous
from debtorch.transport.client import Worker, WorkerError

TORCH_SIDE = "debtorch.fleet.torchside"
GRACE_S = 30.0               # what rank 0 may take after the timeout, to compare and print


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
    notes: list = field(default_factory=list)


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

    def __call__(self, op: str, limit: Optional[float] = None, **fields) -> dict:
        left = self.end - time.monotonic()
        if left <= 1:
            raise GatherError(f"rank {self.rank}: stopped at its bound of {self.bound:g} s", 1)
        for name in ("timeout_s", "deadline_s"):
            if name in fields:
                fields[name] = min(float(fields[name]), left - 1)
        return self.worker.request(op, timeout=min(limit or left, left), **fields)


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
        ask = _Bounded(worker, rdzv.rank, options.bound_s)
        try:
            ask("join", rank=rdzv.rank, world=rdzv.world, addr=rdzv.addr, port=rdzv.port,
                agent_store=rdzv.agent_store, prefix=rdzv.prefix, node=name, timeout_s=options.timeout,
                listen=rdzv.addr if options.listen is None else options.listen,
                secret=options.secret.decode("latin-1") if options.secret else None)
            path = os.path.join(work, "envelope.bin")
            with open(path, "wb") as fh:
                fh.write(encode(envelope(facts, findings, rdzv.rank, name, __version__)))
            ask("send", path=path)
        except WorkerError as exc:
            raise _worker_error(exc, f"rank {rdzv.rank} joining {rdzv.addr}:{rdzv.port}") from None
        return _rank0(ask, rdzv, options, work, on_report) if rdzv.rank == 0 else _other(ask, rdzv, options)
    finally:
        worker.close(grace=5.0)
        shutil.rmtree(work, ignore_errors=True)


def _rank0(ask: _Bounded, rdzv: Rendezvous, options: Options, work: str,
           on_report: Callable[[Outcome], None]) -> Outcome:
    got = ask("collect", GRACE_S + options.timeout, out_dir=work, deadline_s=options.timeout)
    nodes, names = read_gathered(rdzv.world, got, rdzv.name_of, lambda m: compare.read(m, options.tuned), ask.end)
    if options.rename is not None:
        options.rename(nodes)
        names.update({n.rank: n.name for n in nodes})
    outcome = Outcome(code=0)
    extra: list = []
    everyone = len(got["files"]) == rdzv.world
    if options.probe and everyone and rdzv.world > 1:
        gpu = bool(ask("caps").get("cuda"))
        the_plan = probe.plan(rdzv.world, options.budget, gpu)
        ask("publish", key="plan", value=the_plan)
        results = {}
        try:
            ask("probe", options.budget + GRACE_S, plan=the_plan)
            # The probe's deadline is counted like the gather's, from when rank 0 joined.
            got = ask("collect", options.budget + GRACE_S, out_dir=work, key="probe",
                      deadline_s=float(got.get("waited_s") or 0.0) + options.budget)
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
        outcome.verdict = probe.judge(results, names, rdzv.world, options.budget)
        extra = outcome.verdict.findings
    else:
        if options.probe:
            outcome.notes.append("probe skipped: " + ("one node" if rdzv.world < 2 else
                                                       "not every node answered"))
        ask("publish", key="plan", value={"probe": False})
    outcome.summary = compare.summarise(nodes, expected=rdzv.world, timeout=options.timeout,
                                        tuned_path=options.tuned_path, extra=extra)
    outcome.code = outcome.summary.exit_code(options.fail_on)
    on_report(outcome)
    if ask.worker.proc is None or ask.worker.proc.poll() is not None:
        raise GatherError("rank 0's torch side is gone: the other ranks get no verdict", outcome.code or 1)
    ask("publish", key="verdict", value={"code": outcome.code})
    # The ranks that sent a document wait for the verdict; one that died before sending never will.
    ask("finish", GRACE_S + 10, expected=sum(n.status not in (DIED, MISSING) for n in nodes) - 1,
        timeout_s=GRACE_S)
    return outcome


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


def _other(ask: _Bounded, rdzv: Rendezvous, options: Options) -> Outcome:
    """Wait for rank 0's plan (run the probe it asks for: exactly the one this rank would plan with
    its own --budget, never more) and its verdict, acknowledge it, and exit with its code."""
    wait = options.timeout + GRACE_S
    try:
        plan = ask("await", wait + 10, key="plan", timeout_s=wait)["value"]
        if isinstance(plan, dict) and plan.get("probe"):
            mine = probe.plan(rdzv.world, options.budget, plan.get("backend") == "nccl")
            if not options.probe or plan != json.loads(json.dumps(mine)):
                raise GatherError(f"rank {rdzv.rank}: rank 0's plan is not the probe this rank was started for "
                                  f"(--probe --budget {options.budget:g} on every rank)", 1)
            ask("probe", options.budget + GRACE_S, plan=plan)
            wait += options.budget
        verdict = ask("await", wait + 10, key="verdict", timeout_s=wait)["value"]
        ask("ack")
    except WorkerError as exc:
        raise _worker_error(exc, f"rank {rdzv.rank}") from None
    code = verdict.get("code") if isinstance(verdict, dict) else None
    if code not in (0, 1, 2) or isinstance(code, bool):
        raise GatherError(f"rank {rdzv.rank}: rank 0 sent an unreadable verdict", 1)
    return Outcome(code=code)
