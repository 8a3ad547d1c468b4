"""How many ranks one TCPStore serves: debtorch fleet's whole gathered protocol against torch's own
store server, with N simulated ranks.  Full runs: benchmarks/results/fleet.md ("The store's limits").

    python benchmarks/fleet_store.py --ranks 1000 10000
    python benchmarks/fleet_store.py --ranks 2000 --procs 2 --json out.json

Rank 0 is real: debtorch's own code (``gather._rank0``) in this process, its torch side in a worker
process of this interpreter (``debtorch.fleet.torchside``, through the transport, as ``debtorch
fleet`` starts it), hosting torch's TCPStore.  The N-1 other ranks are simulated in ``--procs``
processes, a connection per rank speaking the store's wire protocol as torch's client does (in an
event loop: the clients, which on a cluster run on their own nodes, cost this machine little, and
the store is what is measured), all starting at once as a job's ranks do (``--pace K``: K of a
process connecting at once): each says hello, leaves its digests (a real node's, about 1 KB, with
its own rank, name and challenge), waits in the store for its plan, sends its whole document when
the plan asks, waits for its verdict and acknowledges it.

Reported: when the last rank's digests were in (from the first rank's connection), rank 0's time
from all digests in to every verdict stored, when the last rank had read its verdict, how many ranks
failed (could not connect, timed out), and the store's memory (the worker's peak resident set) and
its file descriptors.  The load average before and after is printed: on a shared machine the clients
compete with the store for the same CPUs, so the times are an upper bound.  Needs torch; each process
needs a file descriptor per connection (``ulimit -n`` above N).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PREFIX = "debtorch-fleet/store-bench/0/"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def templates() -> tuple[bytes, bytes]:
    """A real node's digests and its whole document (JSON, not compressed), each with rank 999999,
    node NODE (and challenge c...c) for :func:`filled` to replace."""
    import fleet_scale

    from debtorch.fleet import gather

    v = fleet_scale.variants()["same"]
    prepared = gather.Prepared.of(v.facts, v.findings, 999999, "NODE")
    return prepared.digests("c" * 32), zlib.decompress(prepared.document)


def filled(template: bytes, r: int) -> bytes:
    """A template of :func:`templates` for rank ``r`` (node gpu<r>, challenge its rank in hex)."""
    return template.replace(b'"rank":999999', f'"rank":{r}'.encode()).replace(
        b'"node":"NODE"', f'"node":"gpu{r:05d}"'.encode()).replace(b"c" * 32, f"{r:032x}".encode())


# ---------------------------------------------------------------- the simulated ranks

SET, GET, ADD, WAIT, APPEND = 1, 3, 4, 6, 9     # TCPStoreBackend.hpp's QueryType (torchside.Reader's source)


def _key(key: str) -> bytes:
    k = ("/" + PREFIX + "/" + key).encode()     # as a PrefixStore over a TCPStore puts it on the wire
    return struct.pack("<Q", len(k)) + k


def _set(op: int, key: str, value: bytes) -> bytes:
    return struct.pack("<B", op) + _key(key) + struct.pack("<Q", len(value)) + value


def _wait(key: str) -> bytes:
    return struct.pack("<BQ", WAIT, 1) + _key(key)


def _get(key: str) -> bytes:
    return struct.pack("<B", GET) + _key(key)


async def _read_value(reader: Any) -> bytes:
    size = struct.unpack("<Q", await reader.readexactly(8))[0]
    return await reader.readexactly(size)


def ranks_process(port: int, ranks: list[int], out: str, pace: int) -> int:
    """``--clients``: a store connection per rank in ``ranks``, all in one event loop, speaking the
    store's wire protocol as torch's client does (so that the clients cost the machine little and
    the store is what is measured); at most ``pace`` connecting at once (0: all at once)."""
    import asyncio

    dig_template, document = templates()
    results: list[dict] = []

    async def rank(r: int, gate: Any) -> None:
        got: dict = {"rank": r}
        try:
            async with gate:
                t0 = got["start"] = time.time()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                got["connected"] = time.time() - t0
                writer.write(struct.pack("<BI", 0, 0x3C85F7CE)            # VALIDATE
                             + _set(SET, f"hello/{r}", f"gpu{r:05d}".encode())
                             + _set(APPEND, "joined", f"{r},".encode())
                             + _set(SET, f"dig/{r}", filled(dig_template, r))
                             + _set(APPEND, "dig_arrived", f"{r},".encode()))
                await writer.drain()
                got["posted"] = time.time()
            writer.write(_wait(f"plan/{r}"))
            await reader.readexactly(1)
            writer.write(_get(f"plan/{r}"))
            plan = json.loads(await _read_value(reader))
            got["plan"] = time.time()
            if plan.get("send"):
                writer.write(_set(SET, f"doc/{r}", zlib.compress(filled(document, r), 6))
                             + _set(APPEND, "arrived", f"{r},".encode()))
            writer.write(_wait(f"verdict/{r}"))
            await reader.readexactly(1)
            writer.write(_get(f"verdict/{r}"))
            got["code"] = json.loads(await _read_value(reader))["code"]
            got["verdict"] = time.time()
            writer.write(struct.pack("<B", ADD) + _key("acks") + struct.pack("<q", 1))
            await reader.readexactly(8)
            writer.close()
        except Exception as exc:  # noqa: BLE001 - a failed rank is a result
            got["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        results.append(got)

    async def main() -> None:
        gate = asyncio.Semaphore(pace) if pace > 0 else contextlib.nullcontext()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)   # rank 0 says go
        await asyncio.gather(*(rank(r, gate) for r in ranks))

    asyncio.run(main())
    Path(out).write_text(json.dumps(results))
    return 0


# ---------------------------------------------------------------- rank 0


def vm(pid: Optional[int], field: str) -> Optional[float]:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def fds(pid: Optional[int]) -> Optional[int]:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def run(n: int, procs: int, timeout: float, pace: int) -> dict:
    from debtorch.fleet import gather
    from debtorch.fleet.rendezvous import Rendezvous
    from debtorch.transport.client import Worker

    port = _free_port()
    work = tempfile.mkdtemp(prefix="fleet-store-")
    worker = Worker(sys.executable, gather.TORCH_SIDE, timeout=timeout + 600)
    worker.start()
    clients: list[subprocess.Popen] = []
    outs = [os.path.join(work, f"clients-{i}.json") for i in range(procs)]
    info: dict = {"ranks": n, "procs": procs, "pace": pace}
    try:
        ask = gather._Bounded(worker, 0, timeout + 3600)
        ask("join", rank=0, world=n, addr="127.0.0.1", port=port, agent_store=False, prefix=PREFIX,
            node="gpu00000", timeout_s=timeout, listen="127.0.0.1", secret=None)
        info["store_rss_idle_mib"] = vm(worker.pid, "VmRSS")
        others = list(range(1, n))
        for i in range(procs):
            part = others[i::procs]
            clients.append(subprocess.Popen([sys.executable, __file__, "--clients", str(port), outs[i],
                                             ",".join(map(str, part)), str(pace)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True,
                                            env=dict(os.environ, TORCH_CPP_LOG_LEVEL="ERROR")))
        for c in clients:
            assert c.stdout is not None
            c.stdout.readline()          # every thread started, waiting at the gate
        dig0, document = templates()
        Path(work, "dig0").write_bytes(filled(dig0, 0))
        Path(work, "doc0").write_bytes(zlib.compress(filled(document, 0), 6))
        ask("send", key="dig", path=os.path.join(work, "dig0"))
        go = time.time()
        for c in clients:
            assert c.stdin is not None
            c.stdin.write("go\n")
            c.stdin.flush()
        reported: dict = {}

        def on_report(outcome: Any) -> None:
            reported["code"] = outcome.code
            reported["at"] = time.time()

        rdzv = Rendezvous(0, n, "127.0.0.1", port, "env", False, PREFIX)
        gather_start = time.time()
        outcome = gather._rank0(ask, rdzv, gather.Options(timeout=timeout), work, on_report,
                                os.path.join(work, "doc0"))
        done = time.time()
        info["store_peak_rss_mib"] = vm(worker.pid, "VmHWM")
        info["store_fds"] = fds(worker.pid)
        for c in clients:
            c.wait(timeout=timeout + 600)
        results = [r for out in outs if os.path.exists(out) for r in json.loads(Path(out).read_text())]
        start = go
        ok = [r for r in results if "verdict" in r]
        failed = [r for r in results if "error" in r]
        info.update(
            compared=len(outcome.summary.compared) if outcome.summary else 0,
            code=outcome.code,
            failed=len(failed), failures=sorted({r["error"] for r in failed})[:5],
            last_digests_s=max((r["posted"] for r in results if "posted" in r), default=start) - start,
            connect_median_ms=1000 * sorted(r["connected"] for r in results if "connected" in r)[len(results) // 2]
            if results else None,
            rank0_s=done - gather_start,
            rank0_after_last_digests_s=done - max((r["posted"] for r in results if "posted" in r), default=start),
            last_plan_s=max((r["plan"] for r in ok), default=done) - start,
            last_verdict_s=max((r["verdict"] for r in ok), default=done) - start,
            verdicts_read=len(ok),
        )
    finally:
        worker.close(grace=5.0)
        for c in clients:
            if c.poll() is None:
                c.kill()
                c.wait()
    return info


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--procs", type=int, default=2, help="processes simulating the ranks")
    ap.add_argument("--timeout", type=float, default=300.0, help="the fleet's --timeout")
    ap.add_argument("--pace", type=int, default=0, help="ranks of a process connecting at once (0: all at once)")
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--clients", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.clients:
        port, out, ranks, pace = args.clients
        return ranks_process(int(port), [int(r) for r in ranks.split(",") if r], out, int(pace))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open("/proc/loadavg") as fh:
        before = fh.read().split()[:3]
    print(f"load average before: {' '.join(before)}; {os.cpu_count()} CPUs; file descriptors {hard}", flush=True)
    rows = []
    for n in args.ranks:
        info = run(n, args.procs, args.timeout, args.pace)
        rows.append(info)
        print(f"{n:>6} ranks: last digests in {info['last_digests_s']:.1f} s after the start; rank 0 "
              f"{info['rank0_after_last_digests_s']:.2f} s from there to every verdict stored; last verdict read "
              f"{info['last_verdict_s']:.1f} s after the start; {info['verdicts_read']} of {n - 1} ranks read "
              f"theirs, {info['failed']} failed {info['failures']}, {info['compared']} compared; store peak {info['store_peak_rss_mib']:.0f} MiB "
              f"(idle {info['store_rss_idle_mib']:.0f}), {info['store_fds']} descriptors; connect median "
              f"{info['connect_median_ms']:.0f} ms", flush=True)
    with open("/proc/loadavg") as fh:
        after = fh.read().split()[:3]
    print(f"load average after: {' '.join(after)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "load_before": before, "load_after": after,
                                               "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M")},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
