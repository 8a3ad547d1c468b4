"""Gathered mode: one ``debtorch fleet`` per node, started by the job's launcher.

Every rank, in debtorch's own process (no torch):

1. starts its torch side (:mod:`debtorch.fleet.torchside`, in the user's
   interpreter, through :class:`debtorch.transport.client.Worker`) and, while
   torch imports, collects its facts and runs its doctor;
2. joins the rendezvous (:mod:`debtorch.fleet.rendezvous`): the torch side
   connects to the TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 hosts it
   unless torchrun's agent does) and says hello with the node's name;
3. sends its envelope (facts and findings, compressed) into the store.

Rank 0 then waits until every rank's document is in, or until ``timeout``
seconds after it joined: a rank that never said hello is *missing*, one that
said hello and sent nothing *died*.  It reads the documents one at a time,
publishes the plan (``--probe`` or not), compares, prints the report and
publishes the verdict (the exit code); every other rank waits for the plan
and the verdict (bounded), acknowledges it and exits with that code.  A rank
that cannot reach rank 0 within ``timeout`` exits 1 with one line.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Optional

from debtorch.__about__ import __version__
from debtorch.fleet import compare, probe
from debtorch.fleet.nodes import DIED, MISSING, DocumentError, decode, encode, envelope, failed, jsonable, read_node
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
    code = 2 if exc.user_input else 1
    return GatherError(f"{doing}: {exc.message}", code)


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
        try:
            worker.request("join", rank=rdzv.rank, world=rdzv.world, addr=rdzv.addr, port=rdzv.port,
                           agent_store=rdzv.agent_store, prefix=rdzv.prefix, node=name,
                           timeout_s=options.timeout, timeout=options.timeout + GRACE_S)
            path = os.path.join(work, "envelope.bin")
            with open(path, "wb") as fh:
                fh.write(encode(envelope(jsonable(facts), findings, rdzv.rank, name, __version__)))
            worker.request("send", path=path)
        except WorkerError as exc:
            raise _worker_error(exc, f"rank {rdzv.rank} joining {rdzv.addr}:{rdzv.port}") from None
        if rdzv.rank == 0:
            return _rank0(worker, rdzv, options, work, on_report)
        return _other(worker, rdzv, options)
    finally:
        worker.close(grace=5.0)
        shutil.rmtree(work, ignore_errors=True)


def _rank0(worker: Worker, rdzv: Rendezvous, options: Options, work: str,
           on_report: Callable[[Outcome], None]) -> Outcome:
    got = worker.request("collect", out_dir=work, deadline_s=options.timeout, timeout=options.timeout + GRACE_S)
    files = {int(r): p for r, p in got["files"].items()}
    joined = {int(r): n for r, n in got["joined"].items()}
    nodes, names = read_gathered(rdzv.world, files, joined, rdzv.name_of, lambda m: compare.read(m, options.tuned))
    if options.rename is not None:
        options.rename(nodes)
        names.update({n.rank: n.name for n in nodes})
    outcome = Outcome(code=0)
    extra: list = []
    everyone = len(files) == rdzv.world
    if options.probe and everyone and rdzv.world > 1:
        gpu = bool(worker.request("caps").get("cuda"))
        the_plan = probe.plan(rdzv.world, options.budget, gpu)
        worker.request("publish", key="plan", value=the_plan)
        results = {}
        try:
            worker.request("probe", plan=the_plan, timeout=options.budget + GRACE_S)
            got = worker.request("collect", out_dir=work, key="probe", deadline_s=_since(got, options.budget),
                                 timeout=options.budget + GRACE_S)
        except WorkerError as exc:
            # Rank 0's own torch side failed or hung past the budget (and was killed): the report
            # still comes, without the verdict the others wait for (they give up, exit 1).
            outcome.notes.append(f"probe: rank 0's torch side failed: {exc.message}")
            results[0] = {"error": exc.message}
            got = {"files": {}}
        for r, p in got["files"].items():
            with open(p, "rb") as fh:
                results[int(r)] = _json(fh.read())
        outcome.verdict = probe.judge(results, names, rdzv.world, options.budget)
        extra = outcome.verdict.findings
    else:
        if options.probe:
            outcome.notes.append("probe skipped: " + ("one node" if rdzv.world < 2 else
                                                       "not every node answered"))
        worker.request("publish", key="plan", value={"probe": False})
    outcome.summary = compare.summarise(nodes, expected=rdzv.world, timeout=options.timeout,
                                        tuned_path=options.tuned_path, extra=extra)
    outcome.code = outcome.summary.exit_code(options.fail_on)
    on_report(outcome)
    if worker.proc is None or worker.proc.poll() is not None:
        raise GatherError("rank 0's torch side is gone: the other ranks get no verdict", outcome.code or 1)
    worker.request("publish", key="verdict", value={"code": outcome.code})
    # The ranks that sent a document wait for the verdict; one that died before sending never will.
    worker.request("finish", expected=len(files) - 1, timeout_s=GRACE_S, timeout=GRACE_S + 10)
    return outcome


def read_gathered(world: int, files: dict, joined: dict, name_of: Callable[[int], str],
                  read: Callable) -> tuple:
    """Rank 0's reading of what arrived: ``files`` rank -> the document's file (deleted once read),
    ``joined`` rank -> the name it said hello with.  One document in memory at a time.
    Returns ([Node] in rank order, {rank: name})."""
    nodes: list = []
    names: dict = {}
    for r in range(world):
        name = joined.get(r) or name_of(r)
        if r not in files:
            nodes.append(failed(name, DIED if r in joined else MISSING,
                                "joined, sent nothing" if r in joined else "did not join", rank=r))
            names[r] = name
            continue
        with open(files[r], "rb") as fh:
            data = fh.read()
        os.unlink(files[r])
        try:
            text = decode(data)
        except DocumentError as exc:
            nodes.append(failed(name, exc.status, exc.message, rank=r))
            names[r] = name
            continue
        node = read_node(text, name, read, rank=r)
        nodes.append(node)
        names[r] = node.name
    _unique_names(nodes, names)
    return nodes, names


def _since(got: dict, budget: float) -> float:
    """The probe's deadline, counted like the gather's from when rank 0 joined."""
    return float(got.get("waited_s") or 0.0) + budget


def _json(data: bytes) -> dict:
    try:
        value = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError:
        return {"error": "unreadable probe result"}
    return value if isinstance(value, dict) else {"error": "unreadable probe result"}


def _unique_names(nodes: list, names: dict) -> None:
    """Two ranks on one node (or two replayed copies) get their rank appended."""
    seen: dict = {}
    for n in nodes:
        seen[n.name] = seen.get(n.name, 0) + 1
    for n in nodes:
        if seen[n.name] > 1:
            n.name = f"{n.name}:{n.rank}"
            names[n.rank] = n.name


def _other(worker: Worker, rdzv: Rendezvous, options: Options) -> Outcome:
    wait = options.timeout + GRACE_S
    try:
        plan = worker.request("await", key="plan", timeout_s=wait, timeout=wait + 10)["value"]
        if isinstance(plan, dict) and plan.get("probe"):
            worker.request("probe", plan=plan, timeout=float(plan.get("budget_s") or options.budget) + GRACE_S)
            wait = float(plan.get("budget_s") or options.budget) + wait
        verdict = worker.request("await", key="verdict", timeout_s=wait, timeout=wait + 10)["value"]
        worker.request("ack")
    except WorkerError as exc:
        raise GatherError(f"rank {rdzv.rank}: {exc.message}", 1) from None
    code = verdict.get("code") if isinstance(verdict, dict) else None
    if code not in (0, 1, 2):
        raise GatherError(f"rank {rdzv.rank}: rank 0 sent an unreadable verdict", 1)
    return Outcome(code=code)

