"""debtorch fleet at scale, by simulation: rank 0's time and memory to summarise N gathered
documents, and the gather's cost per node through torch.distributed's TCPStore.

    python benchmarks/fleet_scale.py                      # 10, 100, 1000 nodes; gather of 200 nodes
    python benchmarks/fleet_scale.py --nodes 10 100 --gather 50 --json out.json

Summarise: N envelopes, as the ranks send them (zlib-compressed JSON of the facts and the doctor's
findings of the 8xA100 fixture server, each with its own hostname; 1 % of the nodes with another
driver, 0.5 % with another torch) are written to files, as rank 0's torch side writes them; then
rank 0's own code reads them (``gather.read_gathered``), compares (``compare.summarise``) and
renders the text and JSON reports.  Time: the median of ``--repeat`` runs.  Memory: tracemalloc's
peak over the same work (a separate run: tracemalloc slows Python down), in MiB of Python
allocations above what was allocated before.

Gather: rank 0's TCPStore (``torchside.FleetSession``, the real ops) with ``--gather`` clients in
this process, each sending a document padded to 50 KB of JSON (compressed as the ranks send it,
and uncompressed: the padding is more of the document's own sections); rank 0's time to fetch every
document (``collect``), per node.
Needs torch for the gather part (skipped without it).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from debtorch import facts as facts_mod  # noqa: E402
from debtorch.doctor import Context, diagnose  # noqa: E402
from debtorch.fleet import compare, gather  # noqa: E402
from debtorch.fleet.nodes import encode, envelope  # noqa: E402
from debtorch.host import ReplayHost  # noqa: E402
from debtorch.report import fleet as report  # noqa: E402
from debtorch.report.doctor import MARKS_ASCII  # noqa: E402

HOSTS = Path(__file__).resolve().parent.parent / "tests" / "hosts"


def base_document() -> tuple:
    doc = facts_mod.collect(ReplayHost(HOSTS / "debian12-server-8xa100-nvlink"))
    found = [f.to_json() for f in diagnose(doc, Context(source="facts")).findings]
    return doc, found


def node_document(doc: dict, found: list, i: int, rng: random.Random) -> bytes:
    d = copy.deepcopy(doc)
    d["os"]["hostname"] = f"gpu{i:04d}"
    d["memory"]["available"] = int(d["memory"]["available"] * rng.uniform(0.9, 1.0))
    if rng.random() < 0.01:
        d["nvidia"]["driver_version"] = "535.129.03"
    if rng.random() < 0.005:
        d["python"]["torch"]["version"] = "2.4.0+cu121"
    return encode(envelope(d, found, i, f"gpu{i:04d}", "0.1.0"))


def write_documents(n: int, folder: str) -> tuple:
    doc, found = base_document()
    rng = random.Random(n)
    files, raw = {}, 0
    for i in range(n):
        data = node_document(doc, found, i, rng)
        raw += len(data)
        path = os.path.join(folder, f"doc-{i}.bin")
        with open(path, "wb") as fh:
            fh.write(data)
        files[i] = path
    return files, raw


def summarise(files: dict, n: int) -> int:
    copies = {}
    for r, p in files.items():          # read_gathered deletes what it read: work on copies
        q = p + ".run"
        with open(p, "rb") as src, open(q, "wb") as dst:
            dst.write(src.read())
        copies[r] = q
    joined = {r: f"gpu{r:04d}" for r in range(n)}
    t0 = time.perf_counter()
    nodes, _ = gather.read_gathered(n, copies, joined, lambda r: f"rank {r}", compare.read)
    s = compare.summarise(nodes, expected=n)
    text = report.lines(s, MARKS_ASCII)
    json.dumps(report.to_json(s, "error"))
    elapsed = time.perf_counter() - t0
    return elapsed, len(text), len(s.identical)


def scale(sizes: list, repeat: int) -> list:
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="fleet-scale-") as folder:
            files, raw = write_documents(n, folder)
            times = []
            for _ in range(repeat):
                t, lines, groups = summarise(files, n)
                times.append(t)
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            summarise(files, n)
            peak = tracemalloc.get_traced_memory()[1] - before
            tracemalloc.stop()
        rows.append({"nodes": n, "seconds_median": statistics.median(times), "seconds_all": times,
                     "peak_mib": peak / 2 ** 20, "report_lines": lines, "groups": groups,
                     "compressed_kib_per_node": raw / n / 1024})
        print(f"{n:>5} nodes: {statistics.median(times):.3f} s (runs {', '.join(f'{t:.3f}' for t in times)}), "
              f"peak {peak / 2 ** 20:.1f} MiB, {lines} report lines, {groups} groups, "
              f"{raw / n / 1024:.1f} KiB per document on the wire", flush=True)
    return rows


def gather_cost(n: int, repeat: int) -> dict:
    try:
        import torch  # noqa: F401  # defer: only this part needs it

        from debtorch.fleet.torchside import FleetSession  # defer: torch
    except ImportError:
        print("gather: skipped (no torch in this interpreter)")
        return {}
    import socket

    doc, found = base_document()
    env = envelope(doc, found, 0, "gpu0000", "0.1.0")
    # Grow it to 50 KB of JSON with more of its own kind of content (a bigger machine: more GPUs,
    # more packages), so that it compresses like a real document, not like a run of one byte.
    env["facts"]["more"] = []
    sections = ("nvidia", "apt", "cuda", "python")
    while len(json.dumps(env, separators=(",", ":"))) < 50 * 1024:
        env["facts"]["more"].append(copy.deepcopy(doc[sections[len(env["facts"]["more"]) % len(sections)]]))
    out = {}
    for label, data in (("compressed", encode(env)), ("raw", json.dumps(env).encode())):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        prefix = f"bench/{label}/"
        join = dict(world=n, addr="127.0.0.1", port=port, agent_store=False, prefix=prefix, timeout_s=60)
        with tempfile.TemporaryDirectory(prefix="fleet-gather-") as folder:
            path = os.path.join(folder, "doc.bin")
            with open(path, "wb") as fh:
                fh.write(data)
            rank0 = FleetSession(None)
            rank0.op_join(dict(join, rank=0, node="gpu0000"))
            clients = []
            t0 = time.perf_counter()
            for r in range(1, n):
                c = FleetSession(None)
                c.op_join(dict(join, rank=r, node=f"gpu{r:04d}"))
                c.op_send({"path": path})
                clients.append(c)
            send_s = time.perf_counter() - t0
            rank0.op_send({"path": path})
            runs = []
            for i in range(repeat):                  # collect again: every document is fetched anew
                sub = os.path.join(folder, f"collect{i}")
                os.mkdir(sub)
                t0 = time.perf_counter()
                got = rank0.op_collect({"out_dir": sub, "deadline_s": 60})
                runs.append(time.perf_counter() - t0)
                assert len(got["files"]) == n
            collect_s = statistics.median(runs)
        out[label] = {"bytes_per_node": len(data), "rank0_fetch_ms_per_node": 1000 * collect_s / n,
                      "rank0_fetch_s_all": runs, "join_and_send_ms_per_node": 1000 * send_s / (n - 1)}
        print(f"gather of {n} nodes, {len(data) / 1024:.1f} KiB each ({label}): rank 0 fetches "
              f"{1000 * collect_s / n:.2f} ms per node (median of {', '.join(f'{t:.2f}' for t in runs)} s "
              f"for all); a client joins and sends in {1000 * send_s / (n - 1):.2f} ms", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gather", type=int, default=200, help="simulated ranks for the gather's cost (0: skip)")
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()
    with open("/proc/loadavg") as fh:
        load_before = fh.read().split()[:3]
    print(f"load average before: {' '.join(load_before)} ({os.cpu_count()} CPUs)")
    rows = scale(args.nodes, args.repeat)
    g = gather_cost(args.gather, args.repeat) if args.gather else {}
    with open("/proc/loadavg") as fh:
        load_after = fh.read().split()[:3]
    print(f"load average after: {' '.join(load_after)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summarise": rows, "gather": g, "load_before": load_before,
                                               "load_after": load_after, "cpus": os.cpu_count()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
