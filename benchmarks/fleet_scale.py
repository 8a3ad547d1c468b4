"""debtorch fleet at scale, by simulation: rank 0's time, CPU and memory to reach the verdict on N
nodes, three ways, and the bytes a node sends.  Full runs: benchmarks/results/fleet.md.

    python benchmarks/fleet_scale.py                          # 1,000 and 10,000 nodes, every path
    python benchmarks/fleet_scale.py --nodes 100 --quick      # what the fast tier runs: one process, no torch
    python benchmarks/fleet_scale.py --nodes 10000 --paths digests offline --realistic --json out.json

The nodes are the 8xA100 fixture server (tests/hosts), each with its own host name; 1 % have another
NVIDIA driver and 0.5 % another torch (the issue's fleet); with ``--realistic`` every node also has its
own GPU UUIDs, temperatures, power draw, memory in use and free, and addresses, as real nodes do.

- ``digests``: every node's digests are in torch's TCPStore, as the ranks leave them; rank 0 runs as
  it runs, debtorch's own code (``gather._rank0``) in this process and its torch side in a worker
  process that hosts the store, the N ranks in a third process.  Timed from there to every rank's
  verdict stored: the torch side reads the digests (``FleetSession.op_gather``), rank 0 groups them,
  stores each rank's plan, reads the whole documents it asked for (the ranks send them when their
  plan says so: a handful), compares, renders the text and JSON reports, and stores each verdict.
- ``documents``: the path before digests: every node's whole document in the store, read, compared
  and rendered (``FleetSession.op_collect``, ``gather.read_gathered``).
- ``offline``: ``debtorch fleet DIR --json`` on N saved ``doctor --json`` documents, the command in
  this process with its worker processes (one per usable CPU, at most 8).

With ``--quick`` (the tests) the digests path runs in one process on an in-memory store: the same
code, not its cost; the documents path, which needs a real store, is left out.

Each path runs in a process of its own, ``--repeat`` times; its wall time, its CPU time (its own and
its workers', and its torch side's) and its peak resident memory (its own, its workers' largest, its
torch side's) are reported.  The
three reports must be the same text and JSON (the run fails otherwise).  Load average before and
after, the CPU model and count are printed beside the numbers: on a shared machine they say how
much to trust them.  Needs torch for ``digests`` and ``documents``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debtorch import facts as facts_mod  # noqa: E402
from debtorch.__about__ import __version__  # noqa: E402
from debtorch.doctor import Context, diagnose  # noqa: E402
from debtorch.fleet import compare, digest, gather  # noqa: E402
from debtorch.fleet.nodes import encode, envelope  # noqa: E402
from debtorch.fleet.rendezvous import Rendezvous  # noqa: E402
from debtorch.host import ReplayHost  # noqa: E402
from debtorch.report import fleet as report  # noqa: E402
from debtorch.report.console import texts  # noqa: E402
from debtorch.report.doctor import MARKS_ASCII, DoctorView  # noqa: E402

HOSTS = ROOT / "tests" / "hosts"
SERVER = "debian12-server-8xa100-nvlink"
PATHS = ("digests", "documents", "offline")


# ---------------------------------------------------------------- the nodes


@dataclass(frozen=True)
class Variant:
    """One kind of node: its facts and its doctor's findings (JSON)."""

    facts: dict
    findings: list


def variants() -> dict[str, Variant]:
    """The kinds of node in the fleet: the server as it is, with another driver, with another
    torch, with both; each with its own doctor's findings."""
    base = facts_mod.collect(ReplayHost(HOSTS / SERVER))
    changes: dict[str, Callable[[dict], None]] = {
        "same": lambda d: None,
        "driver": lambda d: d["nvidia"].update(driver_version="535.129.03"),
        "torch": lambda d: d["python"]["torch"].update(version="2.4.0+cu121"),
    }
    out = {}
    for name, change in changes.items():
        doc = copy.deepcopy(base)
        change(doc)
        out[name] = Variant(doc, [f.to_json() for f in diagnose(doc, Context(source="facts")).findings])
    both = copy.deepcopy(out["driver"].facts)
    both["python"]["torch"]["version"] = "2.4.0+cu121"
    out["both"] = Variant(both, [f.to_json() for f in diagnose(both, Context(source="facts")).findings])
    return out


def kind_of(i: int, n: int) -> str:
    """Node ``i``'s kind: the same random draw for every path (1 % driver, 0.5 % torch)."""
    rng = random.Random(f"{n}:{i}")
    driver, torch = rng.random() < 0.01, rng.random() < 0.005
    return "both" if driver and torch else "driver" if driver else "torch" if torch else "same"


def name_of(i: int) -> str:
    return f"gpu{i:05d}"


def node_facts(v: Variant, i: int, realistic: bool) -> dict:
    """Node ``i``'s facts: the variant's with its own host name (and, ``realistic``, what differs
    between real nodes of one kind)."""
    d = copy.deepcopy(v.facts)
    d["os"]["hostname"] = name_of(i)
    if realistic:
        rng = random.Random(i)
        for g in d["nvidia"].get("gpus") or []:
            g["uuid"] = f"GPU-{rng.getrandbits(128):032x}"
            g["temperature_c"] = rng.randint(25, 80)
            g["power_draw_w"] = round(rng.uniform(60, 400), 2)
            g["memory_used"] = rng.randint(0, 2 ** 30)
            g["memory_free"] = g["memory_total"] - g["memory_used"] if isinstance(g.get("memory_total"), int) else None
        d["memory"]["available"] = int(d["memory"]["available"] * rng.uniform(0.9, 1.0))
        for iface in d["network"].get("interfaces") or []:
            if iface.get("addresses"):
                iface["addresses"] = [f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}/16"]
            if iface.get("mac") and len(iface["mac"]) == 17:
                iface["mac"] = "02:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(5))
    return d


def doctor_document(facts: dict, findings: list) -> str:
    """What ``debtorch doctor --json`` prints for a node (its findings as they are)."""
    doc = DoctorView(facts, _Report(findings), "error", 0).document()
    return json.dumps(doc, indent=2)


class _Report:
    """Just enough of the doctor's report for its JSON view: the findings as JSON."""

    def __init__(self, findings: list):
        self.findings = findings

    def to_json(self) -> dict:
        return {"summary": {}, "findings": self.findings, "silenced": [], "areas": {}}


def write_documents(n: int, folder: Path, kinds: dict[str, Variant], realistic: bool) -> int:
    """N ``doctor --json`` documents in ``folder``, one per node, named by the node; their bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(n):
        v = kinds[kind_of(i, n)]
        text = doctor_document(node_facts(v, i, realistic), v.findings)
        (folder / f"{name_of(i)}.json").write_text(text)
        total += len(text)
    return total


# ---------------------------------------------------------------- the ranks and rank 0


class MemoryStore:
    """What the ranks and rank 0's torch side use of torch.distributed's store, in memory (``--quick``)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else bytes(value)

    def multi_set(self, keys: list[str], values: list[bytes]) -> None:
        for k, v in zip(keys, values):
            self.set(k, v)

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def append(self, key: str, value: str) -> None:
        self.data[key] = self.data.get(key, b"") + value.encode()

    def add(self, key: str, n: int) -> int:
        self.data[key] = str(int(self.data.get(key, b"0")) + n).encode()
        return int(self.data[key])

    def wait(self, keys: list[str], timeout: Any = None) -> None:
        if not self.check(keys):
            raise RuntimeError("wait timed out")


class Ranks:
    """The N ranks of a simulated job, through a client of rank 0's store: they leave their hello and
    digests (or, the path before digests, their whole documents), send their whole document when
    their plan asks for it, and acknowledge the verdict."""

    def __init__(self, n: int, kinds: dict[str, Variant], realistic: bool, store: Any):
        self.n, self.kinds, self.realistic, self.store = n, kinds, realistic, store
        self.sent = 0

    def document(self, r: int) -> bytes:
        v = self.kinds[kind_of(r, self.n)]
        return encode(envelope(node_facts(v, r, self.realistic), v.findings, r, name_of(r), __version__))

    def post_digests(self) -> int:
        """Every rank's hello and digests in the store; the bytes a rank stores (hello and digests)."""
        answers = {k: digest.Answers.of(v.facts, v.findings) for k, v in self.kinds.items()}
        values: dict[str, bytes] = {}
        for r in range(self.n):
            d = digest.Digests.of(answers[kind_of(r, self.n)], r, name_of(r), __version__, f"{r:032x}")
            values[f"hello/{r}"] = name_of(r).encode()
            values[f"dig/{r}"] = d.encode()
        self._set_many(values)
        self.store.append("joined", "".join(f"{r}," for r in range(self.n)))
        self.store.append("dig_arrived", "".join(f"{r}," for r in range(self.n)))
        return sum(len(v) for v in values.values()) // self.n

    def post_documents(self) -> int:
        values: dict[str, bytes] = {}
        for r in range(self.n):
            values[f"hello/{r}"] = name_of(r).encode()
            values[f"doc/{r}"] = self.document(r)
        self._set_many(values)
        self.store.append("joined", "".join(f"{r}," for r in range(self.n)))
        self.store.append("arrived", "".join(f"{r}," for r in range(self.n)))
        return sum(len(v) for v in values.values()) // self.n

    def _set_many(self, values: dict[str, bytes]) -> None:
        keys = list(values)
        for i in range(0, len(keys), 1000):
            part = keys[i:i + 1000]
            self.store.multi_set(part, [values[k] for k in part])

    def send_asked(self, plans: dict[int, Any]) -> None:
        """The ranks whose plan asks for their whole document send it."""
        for r, plan in plans.items():
            if r != 0 and isinstance(plan, dict) and plan.get("send") is True:
                self.store.set(f"doc/{r}", self.document(r))
                self.store.append("arrived", f"{r},")
                self.sent += 1

    def follow(self) -> None:
        """What the ranks do after their digests, through a real store: read their plans (rank 0
        stores the plain ``plan`` after every rank's own), send what is asked, wait for the verdict,
        acknowledge it.  Real ranks read their plans at once, each on its node; here one process
        reads the plans of the ranks that can be asked (the first two of each kind), so that rank
        0 waits for the documents as long as in a real job, not for 10,000 reads in a row."""
        self.store.wait(["plan"], datetime.timedelta(seconds=600))
        firsts: dict[str, list[int]] = {}
        for r in range(self.n):
            mates = firsts.setdefault(kind_of(r, self.n), [])
            if len(mates) < 2:
                mates.append(r)
        candidates = sorted(r for mates in firsts.values() for r in mates)
        plans = {r: json.loads(raw) for r, raw in zip(candidates, self.store.multi_get(
            [f"plan/{r}" for r in candidates]))}
        self.send_asked(plans)
        self.store.wait(["verdict"], datetime.timedelta(seconds=600))
        self.store.add("acks", self.n - 1)


class LocalAsk:
    """``gather._Bounded`` for a torch side in this process (``--quick``): each request calls the
    session's op, then ``after(op, fields)`` (the simulated ranks react to what rank 0 stored)."""

    class _Worker:
        class proc:   # noqa: N801 - stands for the worker's subprocess.Popen
            @staticmethod
            def poll() -> None:
                return None

    def __init__(self, session: Any, after: Callable[[str, dict], None]):
        self.session, self.after = session, after
        self.worker = self._Worker()
        self.end = time.monotonic() + 3600

    def __call__(self, op: str, limit: Optional[float] = None, **fields: Any) -> dict:
        out = getattr(self.session, f"op_{op}")(fields)
        self.after(op, fields)
        return out


PREFIX = "debtorch-fleet/bench/0/"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _on_report(shown: dict) -> Callable[[gather.Outcome], None]:
    def on_report(outcome: gather.Outcome) -> None:
        shown["lines"] = texts(report.lines(outcome.summary, MARKS_ASCII))
        shown["json"] = json.dumps(report.to_json(outcome.summary, "error"))
    return on_report


def digests_in_process(n: int, kinds: dict[str, Variant], realistic: bool, work: str) -> dict:
    """rank 0 from gathered digests, its torch side and the ranks in this process, the store in
    memory (``--quick``, the tests): the same code as the real thing, not its cost."""
    from debtorch.fleet.torchside import FleetSession  # defer: its module needs no torch, but is the torch side

    store = MemoryStore()
    ranks = Ranks(n, kinds, realistic, store)
    info = {"bytes_per_node": ranks.post_digests()}
    session = FleetSession(None)
    session.store, session.world, session.prefix, session.started = store, n, PREFIX, time.monotonic()

    def after(op: str, fields: dict) -> None:
        if op == "publish" and fields.get("key") == "plan":
            ranks.send_asked({r: json.loads(store.get(f"plan/{r}")) for r in range(n)})
        if op == "publish" and fields.get("key") == "verdict":
            store.add("acks", n - 1)

    shown: dict = {}
    doc0 = os.path.join(work, "doc0.bin")
    Path(doc0).write_bytes(ranks.document(0))
    rdzv = Rendezvous(0, n, "127.0.0.1", 0, "env", False, PREFIX)
    start, cpu0 = time.perf_counter(), _cpu()
    gather._rank0(LocalAsk(session, after), rdzv, gather.Options(timeout=60), work, _on_report(shown), doc0)
    info.update(seconds=time.perf_counter() - start, cpu_s=_cpu() - cpu0, documents_asked=ranks.sent,
                report_json=shown["json"], report_lines=shown["lines"])
    return info


def rank0_for_real(path: str, n: int, realistic: bool, work: str, tracemalloc_on: bool) -> dict:
    """rank 0 as it runs: this process (debtorch, no torch) with its torch side in a worker
    process hosting torch's TCPStore, the N ranks in a third process.  Timed from every rank's
    digests (or documents) being in the store to every rank's verdict stored (documents: to the
    report)."""
    from debtorch.transport.client import Worker  # defer: only this measurement

    port = _free_port()
    worker = Worker(sys.executable, gather.TORCH_SIDE, timeout=600)
    worker.start()
    info: dict = {}
    ranks_proc = None
    try:
        ask = gather._Bounded(worker, 0, 3600)
        ask("join", rank=0, world=n, addr="127.0.0.1", port=port, agent_store=False, prefix=PREFIX,
            node=name_of(0), timeout_s=600, listen="127.0.0.1", secret=None)
        cmd = [sys.executable, __file__, "--ranks", path, "--nodes", str(n), "--port", str(port)]
        if realistic:
            cmd.append("--realistic")
        ranks_proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        ready = json.loads(ranks_proc.stdout.readline())
        info["bytes_per_node"] = ready["bytes_per_node"]
        if tracemalloc_on:
            import tracemalloc  # defer: only when asked (it slows Python down)

            tracemalloc.start()
        shown: dict = {}
        doc0 = os.path.join(work, "doc0.bin")
        Path(doc0).write_bytes(Ranks(n, variants(), realistic, None).document(0))
        start, cpu0, side0 = time.perf_counter(), _cpu(), _cpu_of(worker.pid)
        if path == "digests":
            rdzv = Rendezvous(0, n, "127.0.0.1", port, "env", False, PREFIX)
            gather._rank0(ask, rdzv, gather.Options(timeout=600), work, _on_report(shown), doc0)
        else:
            got = ask("collect", out_dir=work, deadline_s=600)
            nodes, _ = gather.read_gathered(n, got, lambda r: f"rank {r}", compare.read)
            summary = compare.summarise(nodes, expected=n, timeout=600)
            _on_report(shown)(gather.Outcome(code=0, summary=summary))
        info.update(seconds=time.perf_counter() - start, cpu_s=_cpu() - cpu0,
                    torch_side_cpu_s=_cpu_of(worker.pid) - side0, report_json=shown["json"], report_lines=shown["lines"])
        if tracemalloc_on:
            info["python_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2 ** 20
        info["torch_side_peak_rss_mib"] = _peak_rss_of(worker.pid)
        if path == "digests":
            ranks_proc.wait(timeout=600)
            done = json.loads(ranks_proc.stdout.readline() or "{}")
            info["documents_asked"] = done.get("sent")
    finally:
        worker.close(grace=5.0)
        if ranks_proc is not None and ranks_proc.poll() is None:
            ranks_proc.kill()
            ranks_proc.wait()
    return info


def _cpu_of(pid: Optional[int]) -> float:
    """A running process's CPU seconds (user and system), from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_of(pid: Optional[int]) -> Optional[float]:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def ranks_process(path: str, n: int, port: int, realistic: bool) -> int:
    """``--ranks``: the N simulated ranks, in a process of their own (they import torch)."""
    import torch.distributed as dist  # defer: this process only

    store = dist.PrefixStore(PREFIX, dist.TCPStore("127.0.0.1", port, is_master=False,
                                                   timeout=datetime.timedelta(seconds=600)))
    ranks = Ranks(n, variants(), realistic, store)
    stored = ranks.post_digests() if path == "digests" else ranks.post_documents()
    print(json.dumps({"bytes_per_node": stored}), flush=True)
    if path == "digests":
        ranks.follow()
        print(json.dumps({"sent": ranks.sent}), flush=True)
    return 0


# ---------------------------------------------------------------- one measurement, in its own process


def measure_one(path: str, n: int, folder: Path, realistic: bool, quick: bool, tracemalloc_on: bool = False) -> dict:
    """Run ``path`` once in this process; what it took and the report it gave."""
    info: dict = {"path": path, "nodes": n}
    work = tempfile.mkdtemp(prefix="fleet-scale-")
    try:
        if path == "offline":
            from typer.testing import CliRunner  # defer: the command's own entry point

            from debtorch.cli import app  # defer: as above

            start, cpu0 = time.perf_counter(), _cpu()
            res = CliRunner().invoke(app, ["fleet", str(folder), "--json"])
            info.update(seconds=time.perf_counter() - start, cpu_s=_cpu() - cpu0, exit_code=res.exit_code,
                        report_json=json.dumps(json.loads(res.stdout)))
        elif quick:
            info.update(digests_in_process(n, variants(), realistic, work))
        else:
            info.update(rank0_for_real(path, n, realistic, work, tracemalloc_on))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    info["workers_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return info


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_one(path: str, n: int, folder: Path, realistic: bool, quick: bool, tracemalloc_on: bool = False) -> dict:
    """``measure_one`` in a fresh process (its peak memory its own); in this one with ``quick``."""
    if quick:
        return measure_one(path, n, folder, realistic, quick)
    cmd = [sys.executable, __file__, "--one", path, "--nodes", str(n), "--folder", str(folder)]
    if realistic:
        cmd.append("--realistic")
    if tracemalloc_on:
        cmd.append("--tracemalloc")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{path} at {n} nodes failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def canonical(report_json: str) -> dict:
    """A report's JSON without what differs by path but not by content."""
    doc = json.loads(report_json)
    doc.pop("notes", None)
    return doc


# ---------------------------------------------------------------- the run


def load() -> list[str]:
    with open("/proc/loadavg") as fh:
        return fh.read().split()[:3]


def cpu_model() -> str:
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def scale(sizes: list[int], paths: list[str], repeat: int, realistic: bool, tracemalloc_on: bool,
          quick: bool = False, say: Callable[[str], None] = print) -> list[dict]:
    """Each path at each size; raises SystemExit when two paths' reports differ."""
    rows = []
    kinds = variants()
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="fleet-scale-docs-") as tmp:
            folder = Path(tmp) / "docs"
            doc_bytes = write_documents(n, folder, kinds, realistic) if "offline" in paths else 0
            reports: dict[str, dict] = {}
            for path in paths:
                runs = [run_one(path, n, folder, realistic, quick) for _ in range(repeat)]
                if tracemalloc_on and path != "offline" and not quick:
                    runs[0]["python_peak_mib"] = run_one(path, n, folder, realistic, quick, True)["python_peak_mib"]
                reports[path] = canonical(runs[0]["report_json"])
                row = {"nodes": n, "path": path, "realistic": realistic,
                       "seconds_median": statistics.median(r["seconds"] for r in runs),
                       "seconds_all": [round(r["seconds"], 3) for r in runs],
                       "cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
                       "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
                       "workers_peak_rss_mib": max(r["workers_peak_rss_mib"] for r in runs),
                       "python_peak_mib": runs[0].get("python_peak_mib"),
                       "torch_side_peak_rss_mib": runs[0].get("torch_side_peak_rss_mib"),
                       "torch_side_cpu_s_median": statistics.median(r.get("torch_side_cpu_s") or 0.0 for r in runs),
                       "bytes_per_node": runs[0].get("bytes_per_node"),
                       "documents_asked": runs[0].get("documents_asked"),
                       "saved_mib": doc_bytes / 2 ** 20 if path == "offline" else None,
                       "report_lines": len(runs[0].get("report_lines") or [])}
                rows.append(row)
                extra = ""
                if row["bytes_per_node"]:
                    extra += f", {row['bytes_per_node']} bytes stored per node"
                if row["documents_asked"] is not None and path == "digests":
                    extra += f", {row['documents_asked']} whole documents asked for"
                if row["python_peak_mib"] is not None:
                    extra += f", Python peak {row['python_peak_mib']:.1f} MiB"
                side_cpu = f" + torch side {row['torch_side_cpu_s_median']:.2f} s" if row["torch_side_cpu_s_median"] else ""
                say(f"{n:>6} nodes, {path:<9}: {row['seconds_median']:.2f} s (runs {', '.join(map(str, row['seconds_all']))}), "
                    f"CPU {row['cpu_s_median']:.2f} s{side_cpu}, peak RSS {row['peak_rss_mib']:.0f} MiB"
                    + (f" (workers {row['workers_peak_rss_mib']:.0f} MiB)" if path == "offline" else "")
                    + (f" (torch side {row['torch_side_peak_rss_mib']:.0f} MiB)" if row["torch_side_peak_rss_mib"] else "")
                    + extra)
            first = next(iter(reports))
            for path, rep in reports.items():
                if rep != reports[first]:
                    raise SystemExit(f"the {path} report differs from the {first} report at {n} nodes")
            say(f"{n:>6} nodes: the {', '.join(reports)} reports are the same")
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--realistic", action="store_true", help="nodes of one kind differ as real nodes do")
    ap.add_argument("--tracemalloc", action="store_true", help="also Python's own peak (a separate run)")
    ap.add_argument("--quick", action="store_true", help="one run of each path (the tests' check)")
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--one", choices=PATHS, help=argparse.SUPPRESS)
    ap.add_argument("--ranks", choices=PATHS, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ranks:
        return ranks_process(args.ranks, args.nodes[0], args.port, args.realistic)
    if args.one:
        info = measure_one(args.one, args.nodes[0], Path(args.folder), args.realistic, False, args.tracemalloc)
        print(json.dumps(info))
        return 0
    if args.quick and "documents" in args.paths:
        args.paths.remove("documents")    # the path before digests needs a real store
    repeat = 1 if args.quick else args.repeat
    before = load()
    print(f"load average before: {' '.join(before)}; {os.cpu_count()} CPUs ({cpu_model()})", flush=True)
    rows = scale(args.nodes, args.paths, repeat, args.realistic, args.tracemalloc, args.quick,
                 say=lambda line: print(line, flush=True))
    after = load()
    print(f"load average after: {' '.join(after)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "load_before": before, "load_after": after,
                                               "cpus": os.cpu_count(), "cpu": cpu_model(),
                                               "date": time.strftime("%Y-%m-%d %H:%M")}, indent=2))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
